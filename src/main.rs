//! The `ccmesh` binary: parse the command line and run it.

/// mimalloc instead of glibc's malloc: allocation was ~12 % of the gateway's CPU under load, and
/// glibc kept the memory of a burst of streams for good (RSS stayed at the peak), while mimalloc
/// returns freed pages to the system. See BENCHMARKS.md.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Give the calling thread's unused allocator memory back to the system. Threads call this
/// when they fall idle (`ccmesh::idle_memory`): mimalloc returns a thread's freed
/// pages only when that thread next allocates, so an idle gateway would otherwise keep the memory
/// of its last burst (~10 MiB after 1024 streams; BENCHMARKS.md).
///
/// The package's only `unsafe` (the library forbids it): `mi_collect` takes no pointer, has no
/// precondition and may be called from any thread at any time; it only frees pages the calling
/// thread's heap no longer uses and purges the allocator's expired free memory.
#[allow(unsafe_code)]
fn release_idle_memory() {
    // SAFETY: see above; a plain FFI call with a bool argument into the allocator that is linked.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

fn main() -> std::process::ExitCode {
    ccmesh::idle_memory::set_release(release_idle_memory);
    ccmesh::cli::main()
}
