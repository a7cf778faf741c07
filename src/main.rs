//! The `ccmesh` binary: parse the command line and run it.

/// mimalloc instead of glibc's malloc: allocation was ~12 % of the gateway's CPU under load, and
/// glibc kept the memory of a burst of streams for good (RSS stayed at the peak), while mimalloc
/// returns freed pages to the system after a short delay. See BENCHMARKS.md.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    ccmesh::cli::main()
}
