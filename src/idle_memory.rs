//! Giving memory back while idle. The allocator (mimalloc, chosen in `src/main.rs`) keeps the
//! pages a thread freed until that thread allocates again, so a thread that falls idle after a
//! burst of streams would hold the burst's memory until its next request (BENCHMARKS.md: ~10 MiB
//! after 1024 streams). Threads that go quiet after work (the serving threads, the record writer)
//! call [`release`] once they are idle; the binary installs the allocator's collect with
//! [`set_release`]. Tests and library users leave it unset, and [`release`] does nothing.

use std::sync::OnceLock;

static RELEASE: OnceLock<fn()> = OnceLock::new();

/// Install the function that gives the calling thread's unused allocator memory back (once per
/// process; later calls are ignored).
pub fn set_release(release: fn()) {
    let _ = RELEASE.set(release);
}

/// Give the calling thread's unused allocator memory back to the system, if a way is installed.
pub fn release() {
    if let Some(release) = RELEASE.get() {
        release();
    }
}
