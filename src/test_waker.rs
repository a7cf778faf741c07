//! A waker for tests that counts its wake-ups.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Wake, Waker};

#[derive(Default)]
pub struct CountWakes(AtomicUsize);

impl CountWakes {
    /// Wake-ups so far.
    pub fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl Wake for CountWakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A waker, and the count of its wake-ups.
pub fn counting_waker() -> (Arc<CountWakes>, Waker) {
    let count = Arc::new(CountWakes::default());
    (count.clone(), Waker::from(count))
}
