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
/// of its last burst (~10 MiB after 1024 streams; BENCHMARKS.md). SQLite allocates with the C
/// library's `malloc`, not through Rust's allocator: what its page caches free (the record
/// writer's `PRAGMA shrink_memory` when it falls idle) stays in glibc's per-thread arenas, which
/// glibc gives back only when `malloc_trim` asks (~2 MiB of an idle gateway's memory otherwise).
///
/// The library forbids `unsafe`; the binary has three audited uses, the allocator above and these
/// two calls. `mi_collect` takes no pointer, has no precondition and may be called from any thread
/// at any time; it only frees pages the calling thread's heap no longer uses and purges the
/// allocator's expired free memory. `malloc_trim` likewise takes only a size to keep, may be called
/// from any thread, and returns whole free pages of every arena to the system under the arenas'
/// own locks.
#[allow(unsafe_code)]
fn release_idle_memory() {
    // SAFETY: see above; a plain FFI call with a bool argument into the allocator that is linked.
    unsafe { libmimalloc_sys::mi_collect(true) }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: see above; a plain FFI call into the C library with a size argument.
    unsafe {
        malloc_trim(0);
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
unsafe extern "C" {
    /// glibc's: give the free memory at the top of the heap and the free pages inside every
    /// arena back to the system, keeping `pad` bytes at the top of the main heap.
    fn malloc_trim(pad: usize) -> std::ffi::c_int;
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

    /// The resident KiB of the mapping of this process that holds `address`.
    fn resident_kib_at(address: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ')
                && let Some((start, end)) = range.split_once('-')
                && let (Ok(start), Ok(end)) = (usize::from_str_radix(start, 16), usize::from_str_radix(end, 16))
            {
                inside = (start..end).contains(&address);
            } else if inside && let Some(kib) = line.strip_prefix("Rss:") {
                return kib.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
            }
        }
        0
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    unsafe extern "C" {
        fn malloc(size: usize) -> *mut c_void;
        fn free(block: *mut c_void);
    }

    /// What the C library's allocator holds for a thread after a burst (SQLite's page cache, freed
    /// by `shrink_memory`) is given back by the idle release, not kept for good.
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    fn the_idle_release_gives_back_what_the_c_allocator_freed() {
        // A thread of its own gets a glibc arena of its own; blocks under the mmap threshold come
        // from it, as SQLite's pages do.
        std::thread::spawn(|| {
            const BLOCK: usize = 4096;
            // SAFETY: each block is written only within its size and freed once.
            let blocks: Vec<*mut u8> = (0..4096)
                .map(|_| unsafe {
                    let block = malloc(BLOCK).cast::<u8>();
                    assert!(!block.is_null());
                    std::ptr::write_bytes(block, 0xa5, BLOCK);
                    block
                })
                .collect();
            let kept = blocks[blocks.len() - 1];
            let filled = resident_kib_at(kept as usize);
            assert!(filled >= 16 * 1024, "the arena holds {filled} KiB after 16 MiB of blocks");
            // All but the last freed: the arena's top stays in use, so freeing alone returns nothing.
            for &block in &blocks[..blocks.len() - 1] {
                // SAFETY: allocated above, freed once.
                unsafe { free(block.cast()) };
            }
            let freed = resident_kib_at(kept as usize);
            assert!(freed >= 15 * 1024, "freeing alone gave back memory: {freed} KiB of {filled}");
            release_idle_memory();
            let released = resident_kib_at(kept as usize);
            assert!(released < 2 * 1024, "the arena still holds {released} KiB of {freed} after the idle release");
            // SAFETY: allocated above, freed once.
            unsafe { free(kept.cast()) };
        })
        .join()
        .unwrap_or_else(|_| panic!("the arena thread failed"));
    }
}
