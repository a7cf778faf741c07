//! The waker an upstream connection is driven with. It wakes the task of the request that uses
//! the connection, except for the wake-ups that task causes itself while it reads the
//! connection: taking a chunk of the answer's body wakes whoever hyper's connection registered to
//! be told there is room for the next one, which is that same task, busy reading. Each such wake-up
//! would make the executor poll the whole request once more for nothing — once per request, and
//! once per streamed event.
//!
//! Held back is not lost: a wake-up that arrives while the task reads (from its own steps, or from
//! another thread's I/O driver) is remembered, and if the read then ends in `Pending` without
//! driving the connection again since, the task is woken after all (`Quiet::leave`). A drive that
//! starts after it sees whatever the wake-up was for (`Quiet::drive_starts`), and a read that ends
//! `Ready` is followed by another poll, which drives the connection again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Wake, Waker};

use futures_util::task::AtomicWaker;

pub(super) struct Quiet {
    /// The task of the request using the connection now (or last).
    task: AtomicWaker,
    /// That task is reading the connection now.
    busy: AtomicBool,
    /// A wake-up came while it was.
    missed: AtomicBool,
}

impl Quiet {
    /// A new connection's waker, and its state.
    pub(super) fn new() -> (Arc<Quiet>, Waker) {
        let quiet =
            Arc::new(Quiet { task: AtomicWaker::new(), busy: AtomicBool::new(false), missed: AtomicBool::new(false) });
        let waker = Waker::from(quiet.clone());
        (quiet, waker)
    }

    /// `cx`'s task starts reading the connection.
    pub(super) fn enter(&self, cx: &Context<'_>) {
        self.task.register(cx.waker());
        self.busy.store(true, Ordering::SeqCst);
    }

    /// The connection is about to be driven: it will see what every wake-up so far was for.
    pub(super) fn drive_starts(&self) {
        self.missed.store(false, Ordering::SeqCst);
    }

    /// `step`, a step of the task's that wakes the connection's waker (a request handed to it),
    /// run as if reading: the wake-up is held back for the drive that follows.
    pub(super) fn held<T>(&self, step: impl FnOnce() -> T) -> T {
        self.busy.store(true, Ordering::SeqCst);
        let out = step();
        self.busy.store(false, Ordering::SeqCst);
        out
    }

    /// The read is over: if it ends `Pending` and a wake-up came since its last drive started,
    /// wake the task now.
    pub(super) fn leave<T>(&self, cx: &Context<'_>, read: &std::task::Poll<T>) {
        self.busy.store(false, Ordering::SeqCst);
        if self.missed.swap(false, Ordering::SeqCst) && read.is_pending() {
            cx.waker().wake_by_ref();
        }
    }
}

impl Wake for Quiet {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.busy.load(Ordering::SeqCst) {
            self.missed.store(true, Ordering::SeqCst);
            // The read may have ended between the two steps above: then it no longer looks at
            // `missed`, and the task is woken here instead.
            if self.busy.load(Ordering::SeqCst) {
                return;
            }
            self.missed.store(false, Ordering::SeqCst);
        }
        self.task.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_waker::counting_waker;
    use std::task::Poll;

    #[test]
    fn a_wake_up_outside_a_read_wakes_the_task() {
        let (count, task_waker) = counting_waker();
        let (quiet, waker) = Quiet::new();
        let cx = Context::from_waker(&task_waker);
        quiet.enter(&cx);
        quiet.leave(&cx, &Poll::<()>::Pending);
        waker.wake_by_ref();
        assert_eq!(count.count(), 1);
    }

    #[test]
    fn a_wake_up_during_a_read_that_ends_ready_is_dropped() {
        let (count, task_waker) = counting_waker();
        let (quiet, waker) = Quiet::new();
        let cx = Context::from_waker(&task_waker);
        quiet.enter(&cx);
        waker.wake_by_ref();
        quiet.leave(&cx, &Poll::Ready(()));
        assert_eq!(count.count(), 0);
        // Nor is it remembered for the next read.
        quiet.enter(&cx);
        quiet.leave(&cx, &Poll::<()>::Pending);
        assert_eq!(count.count(), 0);
    }

    #[test]
    fn a_wake_up_during_a_read_that_ends_pending_wakes_the_task_at_its_end() {
        let (count, task_waker) = counting_waker();
        let (quiet, waker) = Quiet::new();
        let cx = Context::from_waker(&task_waker);
        quiet.enter(&cx);
        waker.wake_by_ref();
        assert_eq!(count.count(), 0, "not while it reads");
        quiet.leave(&cx, &Poll::<()>::Pending);
        assert_eq!(count.count(), 1);
    }

    #[test]
    fn a_wake_up_before_a_drive_is_left_to_the_drive() {
        let (count, task_waker) = counting_waker();
        let (quiet, waker) = Quiet::new();
        let cx = Context::from_waker(&task_waker);
        quiet.held(|| waker.wake_by_ref());
        quiet.enter(&cx);
        waker.wake_by_ref();
        quiet.drive_starts();
        quiet.leave(&cx, &Poll::<()>::Pending);
        assert_eq!(count.count(), 0);
        // One during the drive is not.
        quiet.enter(&cx);
        quiet.drive_starts();
        waker.wake_by_ref();
        quiet.leave(&cx, &Poll::<()>::Pending);
        assert_eq!(count.count(), 1);
    }

    #[test]
    fn wake_ups_from_another_thread_during_reads_are_never_lost() {
        for _ in 0..2_000 {
            let (count, task_waker) = counting_waker();
            let (quiet, waker) = Quiet::new();
            let cx = Context::from_waker(&task_waker);
            quiet.enter(&cx);
            let other = std::thread::spawn(move || waker.wake_by_ref());
            quiet.leave(&cx, &Poll::<()>::Pending);
            other.join().unwrap();
            assert_eq!(count.count(), 1, "woken once, during or after the read");
        }
    }
}
