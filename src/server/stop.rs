//! The stop signal every serving thread and every connection watches.
//!
//! A connection checks it each time its task wakes, so that check must cost next to nothing:
//! here it is one atomic load and a waker comparison, and the waker is registered once per
//! connection. (tokio's watch channel, used before, locked a mutex shared by every connection of
//! every thread on each of those wake-ups: once per event of every open stream.)

use std::collections::HashMap;
use std::future::poll_fn;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum Stop {
    Running = 0,
    /// Finish the requests in flight, accept no new ones on kept-alive connections.
    Draining = 1,
    /// The grace period is over: drop every connection.
    Now = 2,
}

impl Stop {
    fn from_u8(v: u8) -> Stop {
        match v {
            0 => Stop::Running,
            1 => Stop::Draining,
            _ => Stop::Now,
        }
    }
}

#[derive(Default)]
struct Waiting {
    next_key: u64,
    wakers: HashMap<u64, Waker>,
}

pub struct StopSignal {
    state: OwnLine,
    waiting: Mutex<Waiting>,
}

/// The state on a cache line of its own: connections opening and closing on other cores write
/// the `waiting` list, and a shared line would make every connection's check a cache miss.
#[repr(align(128))]
struct OwnLine(AtomicU8);

impl StopSignal {
    pub fn new() -> Arc<StopSignal> {
        Arc::new(StopSignal { state: OwnLine(AtomicU8::new(Stop::Running as u8)), waiting: Mutex::default() })
    }

    pub fn get(&self) -> Stop {
        Stop::from_u8(self.state.0.load(Ordering::Acquire))
    }

    /// Move to `stop` (never back: a later stage wins) and wake every watcher.
    pub fn set(&self, stop: Stop) {
        self.state.0.fetch_max(stop as u8, Ordering::AcqRel);
        let waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        for waker in waiting.wakers.values() {
            waker.wake_by_ref();
        }
    }

    pub fn watch(self: &Arc<Self>) -> StopWatch {
        StopWatch { signal: self.clone(), registered: None }
    }
}

/// One task's view of the signal; unregisters itself when dropped.
pub struct StopWatch {
    signal: Arc<StopSignal>,
    registered: Option<(u64, Waker)>,
}

impl StopWatch {
    /// The current stage, with the task registered to be woken when it changes.
    pub fn poll_get(&mut self, cx: &mut Context<'_>) -> Stop {
        // Registered before the state is read, so a change in between still wakes the task.
        let current = self.registered.as_ref().is_some_and(|(_, waker)| waker.will_wake(cx.waker()));
        if !current {
            let mut waiting = self.signal.waiting.lock().unwrap_or_else(PoisonError::into_inner);
            let key = match &self.registered {
                Some((key, _)) => *key,
                None => {
                    waiting.next_key += 1;
                    waiting.next_key
                }
            };
            waiting.wakers.insert(key, cx.waker().clone());
            self.registered = Some((key, cx.waker().clone()));
        }
        self.signal.get()
    }

    /// Resolves once the stage is no longer `seen`.
    pub async fn changed_from(&mut self, seen: Stop) -> Stop {
        poll_fn(|cx| match self.poll_get(cx) {
            now if now != seen => Poll::Ready(now),
            _ => Poll::Pending,
        })
        .await
    }
}

impl Drop for StopWatch {
    fn drop(&mut self) {
        if let Some((key, _)) = self.registered.take() {
            let mut waiting = self.signal.waiting.lock().unwrap_or_else(PoisonError::into_inner);
            waiting.wakers.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_waker::counting_waker;

    #[test]
    fn a_watcher_is_woken_at_each_stage_and_a_stop_only_moves_forward() {
        let signal = StopSignal::new();
        let mut watch = signal.watch();
        let (wakes, waker) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        assert_eq!(watch.poll_get(&mut cx), Stop::Running);
        assert_eq!(watch.poll_get(&mut cx), Stop::Running);
        assert_eq!(signal.waiting.lock().unwrap().wakers.len(), 1, "registered once");

        signal.set(Stop::Draining);
        assert_eq!(wakes.count(), 1);
        assert_eq!(watch.poll_get(&mut cx), Stop::Draining);
        signal.set(Stop::Running);
        assert_eq!(watch.poll_get(&mut cx), Stop::Draining, "a stop cannot be undone");
        signal.set(Stop::Now);
        assert_eq!(watch.poll_get(&mut cx), Stop::Now);

        drop(watch);
        assert!(signal.waiting.lock().unwrap().wakers.is_empty(), "a dropped watcher unregisters");
    }

    #[test]
    fn a_watcher_polled_with_a_new_waker_wakes_that_one() {
        let signal = StopSignal::new();
        let mut watch = signal.watch();
        let (old_wakes, old) = counting_waker();
        let (new_wakes, new) = counting_waker();
        watch.poll_get(&mut Context::from_waker(&old));
        watch.poll_get(&mut Context::from_waker(&new));
        signal.set(Stop::Draining);
        assert_eq!(old_wakes.count(), 0);
        assert_eq!(new_wakes.count(), 1);
        assert_eq!(signal.waiting.lock().unwrap().wakers.len(), 1);
    }

    #[tokio::test]
    async fn a_stop_before_the_first_look_is_seen() {
        let signal = StopSignal::new();
        signal.set(Stop::Draining);
        assert_eq!(signal.watch().changed_from(Stop::Running).await, Stop::Draining);
    }
}
