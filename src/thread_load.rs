//! How many requests the calling thread is serving: from the moment the server hands a request
//! to the service until its answer's body is dropped (`server::conn`, `InFlight`). A thread
//! that serves only the request at hand has time to spare once its answer is out; one that
//! serves others has not, and work put off there only delays them (`observe::events`).
//!
//! A serving thread runs a runtime of its own, so a request starts and ends on one thread. On a
//! runtime that moves tasks between threads (tests) the count is a hint only; it never wraps.

use std::cell::Cell;

thread_local! {
    static SERVING: Cell<u32> = const { Cell::new(0) };
}

pub fn request_started() {
    SERVING.with(|n| n.set(n.get().saturating_add(1)));
}

pub fn request_ended() {
    SERVING.with(|n| n.set(n.get().saturating_sub(1)));
}

/// Whether the thread serves no request but, at most, the caller's.
pub fn serving_alone() -> bool {
    SERVING.with(|n| n.get() <= 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_serves_alone_until_a_second_request_starts_and_the_count_never_wraps() {
        std::thread::spawn(|| {
            assert!(serving_alone());
            request_ended();
            request_started();
            assert!(serving_alone(), "an end before any start did not wrap the count");
            request_started();
            assert!(!serving_alone());
            request_ended();
            assert!(serving_alone());
        })
        .join()
        .unwrap();
    }
}
