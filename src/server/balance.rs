//! Spreading client connections over the serving threads. Every thread waits on the one
//! listening socket and the first to wake takes a new connection, so a burst of connects can all
//! land on one thread while the other stays idle (measured: all 64 `wrk` connections on one of
//! two threads, 15.9 k requests/s against 18.8–20.1 k/s when they split). A thread with more
//! open connections than the least-loaded other thread plus `SLACK` stops accepting until the
//! others catch up, the way nginx stops accepting on a worker that holds too many; the
//! connections wait in the listen backlog for a lighter thread, which is woken by the same
//! readiness. One listening socket stays the only one bound to the port, so a second gateway can
//! never share it (no `SO_REUSEPORT` set whose kernel hash would split by address, not load).

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// How many more open connections than the least-loaded other thread a thread may hold and still
/// accept: 1 keeps the spread within two connections without refusing the connection that would
/// merely tie.
pub const SLACK: usize = 1;

/// The pure rule: may a thread holding `mine` connections accept another, when the least-loaded
/// other thread holds `fewest_elsewhere` (`None`: there is no other thread)?
pub fn fair_to_accept(mine: usize, fewest_elsewhere: Option<usize>) -> bool {
    fewest_elsewhere.is_none_or(|fewest| mine <= fewest + SLACK)
}

/// The open client connections of each serving thread.
pub struct Balance {
    open: Box<[AtomicUsize]>,
    /// One per thread, woken by a change that may let that thread accept again, so that a
    /// thread which stopped accepting looks again. Only a connection opened elsewhere (the others
    /// may now hold more) or closed on the thread itself can do that: a connection closed on
    /// another thread only lowers the count this one is measured against. So a close wakes no
    /// other thread, which would cost it a system call and a pass through its runtime.
    changed: Box<[Notify]>,
}

impl Balance {
    pub fn new(threads: usize) -> Balance {
        let threads = threads.max(1);
        Balance {
            open: (0..threads).map(|_| AtomicUsize::new(0)).collect(),
            changed: (0..threads).map(|_| Notify::new()).collect(),
        }
    }

    pub fn threads(&self) -> usize {
        self.open.len()
    }

    /// Open connections per thread, in thread order.
    pub fn counts(&self) -> Vec<usize> {
        self.open.iter().map(|n| n.load(Ordering::Relaxed)).collect()
    }

    /// Whether `thread` should accept the next connection now.
    pub fn may_accept(&self, thread: usize) -> bool {
        let mine = self.open[thread].load(Ordering::Relaxed);
        let fewest_elsewhere = self
            .open
            .iter()
            .enumerate()
            .filter(|(n, _)| *n != thread)
            .map(|(_, count)| count.load(Ordering::Relaxed))
            .min();
        fair_to_accept(mine, fewest_elsewhere)
    }

    /// A future that resolves at the next change that may let `thread` accept again. Create it
    /// before reading the counts, so a change between the read and the wait is not missed.
    pub fn changed(&self, thread: usize) -> std::pin::Pin<Box<tokio::sync::futures::Notified<'_>>> {
        let mut notified = Box::pin(self.changed[thread].notified());
        notified.as_mut().enable();
        notified
    }

    /// Count a connection `thread` accepted, until the returned guard drops.
    pub fn opened(self: &std::sync::Arc<Self>, thread: usize) -> OpenOnThread {
        self.open[thread].fetch_add(1, Ordering::AcqRel);
        for (n, changed) in self.changed.iter().enumerate() {
            if n != thread {
                changed.notify_waiters();
            }
        }
        OpenOnThread { balance: self.clone(), thread }
    }
}

/// One accepted connection in its thread's count.
pub struct OpenOnThread {
    balance: std::sync::Arc<Balance>,
    thread: usize,
}

impl Drop for OpenOnThread {
    fn drop(&mut self) {
        self.balance.open[self.thread].fetch_sub(1, Ordering::AcqRel);
        self.balance.changed[self.thread].notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_thread_accepts_while_within_slack_of_the_lightest_other() {
        assert!(fair_to_accept(0, None));
        assert!(fair_to_accept(1000, None), "a single thread takes everything");
        assert!(fair_to_accept(0, Some(0)));
        assert!(fair_to_accept(1, Some(0)));
        assert!(!fair_to_accept(2, Some(0)));
        assert!(fair_to_accept(33, Some(32)));
        assert!(!fair_to_accept(34, Some(32)));
        assert!(fair_to_accept(0, Some(10)), "the lighter thread always accepts");
    }

    #[test]
    fn a_burst_taken_by_whichever_thread_may_accept_splits_evenly() {
        let balance = Arc::new(Balance::new(2));
        let mut held = Vec::new();
        // Thread 0 is always first to wake: it takes what it may, thread 1 the rest.
        for _ in 0..64 {
            let thread = if balance.may_accept(0) { 0 } else { 1 };
            assert!(balance.may_accept(thread));
            held.push(balance.opened(thread));
        }
        let counts = balance.counts();
        assert_eq!(counts.iter().sum::<usize>(), 64);
        assert!(counts[0].abs_diff(counts[1]) <= SLACK + 1, "{counts:?}");
        // Closing connections on one thread lets it accept again, and stops the other.
        held.retain(|h| h.thread != 1);
        assert_eq!(balance.counts()[1], 0);
        assert!(!balance.may_accept(0));
        assert!(balance.may_accept(1));
    }

    #[tokio::test]
    async fn a_thread_is_woken_by_an_open_elsewhere_or_a_close_of_its_own_only() {
        use futures_util::FutureExt;
        let balance = Arc::new(Balance::new(3));
        let (mut zero, mut two) = (balance.changed(0), balance.changed(2));
        let guard = balance.opened(2);
        // An open on thread 2 may let the others accept: thread 0 was notified, 2 was not.
        assert!((&mut zero).now_or_never().is_some(), "an open elsewhere wakes the thread");
        assert!((&mut two).now_or_never().is_none(), "its own open cannot let it accept");
        let (mut zero, mut one) = (balance.changed(0), balance.changed(1));
        drop(guard);
        // A close on thread 2 only lowers what the others are measured against.
        assert!((&mut zero).now_or_never().is_none(), "a close elsewhere does not wake the thread");
        assert!((&mut one).now_or_never().is_none());
        assert!((&mut two).now_or_never().is_some(), "its own close may let it accept again");
        assert_eq!(balance.counts(), [0, 0, 0]);
    }

    /// Every change that turns a thread's `may_accept` from no to yes wakes that thread (the
    /// accept loop sleeps on nothing else), over every small state of three threads.
    #[test]
    fn every_change_that_lets_a_thread_accept_again_wakes_it() {
        use futures_util::FutureExt;
        for counts in (0..27).map(|i| [i % 3, i / 3 % 3, i / 9]) {
            for (on, open) in (0..3).flat_map(|on| [(on, true), (on, false)]) {
                if !open && counts[on] == 0 {
                    continue;
                }
                let balance = Arc::new(Balance::new(3));
                let mut guards: Vec<OpenOnThread> =
                    (0..3).flat_map(|t| (0..counts[t]).map(move |_| t)).map(|t| balance.opened(t)).collect();
                let before: Vec<bool> = (0..3).map(|t| balance.may_accept(t)).collect();
                let mut waits: Vec<_> = (0..3).map(|t| balance.changed(t)).collect();
                if open {
                    guards.push(balance.opened(on));
                } else if let Some(i) = guards.iter().position(|g| g.thread == on) {
                    guards.swap_remove(i);
                }
                for t in 0..3 {
                    if !before[t] && balance.may_accept(t) {
                        let woken = (&mut waits[t]).now_or_never().is_some();
                        assert!(
                            woken,
                            "{counts:?}, {} on {on}: thread {t} may accept but was not woken",
                            if open { "open" } else { "close" }
                        );
                    }
                }
            }
        }
    }
}
