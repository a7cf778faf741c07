//! The `ccmesh` binary: parse the command line and run it.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

/// mimalloc instead of glibc's malloc: allocation was ~12 % of the gateway's CPU under load, and
/// glibc kept the memory of a burst of streams for good (RSS stayed at the peak), while mimalloc
/// returns freed pages to the system. See BENCHMARKS.md.
#[global_allocator]
static ALLOCATOR: Allocator = Allocator;

/// mimalloc, asked for an alignment only when its plain allocation would not give it. The
/// `mimalloc` crate's allocator passes every request through `mi_malloc_aligned`, whose checks
/// cost ~20 instructions more than `mi_malloc` per allocation, and a request makes dozens. A
/// block of at least its alignment, when that is at most `NATURAL_ALIGN`, is aligned to it by
/// `mi_malloc` itself (mimalloc's own `mi_malloc_is_naturally_aligned`, the test its aligned
/// entry takes before the same call).
struct Allocator;

/// mimalloc's `MI_MAX_ALIGN_SIZE`: what `mi_malloc` guarantees to a block at least this large.
const NATURAL_ALIGN: usize = 16;

fn naturally_aligned(layout: Layout) -> bool {
    layout.align() <= NATURAL_ALIGN && layout.align() <= layout.size()
}

// SAFETY: every block comes from mimalloc and goes back to it (`mi_free` takes blocks of either
// entry); each entry returns null on failure, as `GlobalAlloc` requires, and a block of at least
// the layout's size aligned to the layout's alignment otherwise (see `naturally_aligned`).
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: plain FFI calls; mimalloc accepts any size and power-of-two alignment.
        unsafe {
            if naturally_aligned(layout) {
                libmimalloc_sys::mi_malloc(layout.size()).cast()
            } else {
                libmimalloc_sys::mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        unsafe {
            if naturally_aligned(layout) {
                libmimalloc_sys::mi_zalloc(layout.size()).cast()
            } else {
                libmimalloc_sys::mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator, so from mimalloc.
        unsafe { libmimalloc_sys::mi_free(ptr.cast::<c_void>()) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator; the aligned entry keeps the alignment (and
        // takes mimalloc's plain path itself for alignments up to a word, as a `Vec<u8>`'s).
        unsafe { libmimalloc_sys::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast() }
    }
}

/// Give the calling thread's unused allocator memory back to the system. Threads call this
/// when they fall idle (`ccmesh::idle_memory`): mimalloc returns a thread's freed
/// pages only when that thread next allocates, so an idle gateway would otherwise keep the memory
/// of its last burst (~10 MiB after 1024 streams; BENCHMARKS.md).
///
/// The library forbids `unsafe`; the binary has two audited uses, the allocator above and this
/// call. `mi_collect` takes no pointer, has no precondition and may be called from any thread at
/// any time; it only frees pages the calling thread's heap no longer uses and purges the
/// allocator's expired free memory.
#[allow(unsafe_code)]
fn release_idle_memory() {
    // SAFETY: see above; a plain FFI call with a bool argument into the allocator that is linked.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

fn main() -> std::process::ExitCode {
    ccmesh::idle_memory::set_release(release_idle_memory);
    ccmesh::cli::main()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn byte(i: usize) -> u8 {
        (i % 251) as u8
    }

    /// Sizes from one byte to a MiB at alignments from 1 to 4 KiB: each block is aligned as
    /// asked, comes zeroed when asked, and keeps what was written to it while it grows and shrinks.
    #[test]
    #[allow(unsafe_code)]
    fn blocks_are_aligned_and_keep_their_contents() {
        let sizes = (1..=300).chain((301..=20_000).step_by(97)).chain([1024, 4096, 65_536, 1 << 20]);
        for size in sizes {
            for align in [1, 2, 4, 8, 16, 32, 64, 128, 4096] {
                let layout = Layout::from_size_align(size, align).unwrap_or_else(|e| unreachable!("{e}"));
                // SAFETY: non-zero sizes and power-of-two alignments; each block is freed once,
                // with the layout it has at the time; only bytes inside a block are touched.
                unsafe {
                    let zeroed = ALLOCATOR.alloc_zeroed(layout);
                    assert!(!zeroed.is_null());
                    assert_eq!(zeroed as usize % align, 0, "zeroed {size} at {align}");
                    assert!(std::slice::from_raw_parts(zeroed, size).iter().all(|&b| b == 0), "zeroed {size}");
                    ALLOCATOR.dealloc(zeroed, layout);

                    // Blocks side by side: one free block can happen to be aligned.
                    let several: Vec<*mut u8> = (0..4).map(|_| ALLOCATOR.alloc(layout)).collect();
                    for &p in &several {
                        assert!(!p.is_null());
                        assert_eq!(p as usize % align, 0, "{size} at {align}, side by side");
                    }
                    for p in several {
                        ALLOCATOR.dealloc(p, layout);
                    }

                    let mut block = ALLOCATOR.alloc(layout);
                    let mut current = size;
                    assert!(!block.is_null());
                    for i in 0..size {
                        *block.add(i) = byte(i);
                    }
                    for next in [size * 2 + 1, size.div_ceil(2), size] {
                        let old = Layout::from_size_align_unchecked(current, align);
                        block = ALLOCATOR.realloc(block, old, next);
                        assert!(!block.is_null());
                        assert_eq!(block as usize % align, 0, "{current} → {next} at {align}");
                        let kept = current.min(next);
                        assert!((0..kept).all(|i| *block.add(i) == byte(i)), "{current} → {next} at {align}");
                        for i in kept..next {
                            *block.add(i) = byte(i);
                        }
                        current = next;
                    }
                    ALLOCATOR.dealloc(block, layout);
                }
            }
        }
    }
}
