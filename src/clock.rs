//! Time source. Only this module reads the system clock; everything time-dependent
//! (breaker cooldowns, backoff, the 300 ms retry) asks a `Clock`, so tests can step time exactly.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

pub trait Clock: Send + Sync + 'static {
    /// Monotonic time, for cooldowns and durations.
    fn now(&self) -> Instant;
    /// Wall-clock time, for timestamps shown to people and for HTTP-date `Retry-After`.
    fn wall(&self) -> SystemTime;
    /// Sleep until `deadline` of this clock.
    fn sleep_until(&self, deadline: Instant) -> Sleep;
}

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)]
    fn now(&self) -> Instant {
        Instant::now()
    }
    fn wall(&self) -> SystemTime {
        SystemTime::now()
    }
    fn sleep_until(&self, deadline: Instant) -> Sleep {
        Box::pin(tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)))
    }
}

/// A clock that only moves when told to. Sleepers wake when `advance` passes their deadline,
/// so a test can assert "the request is waiting" and then release it deterministically.
pub struct ManualClock {
    origin: Instant,
    wall_origin: SystemTime,
    offset: watch::Sender<Duration>,
    sleepers: Mutex<usize>,
    sleepers_changed: watch::Sender<usize>,
}

impl ManualClock {
    #[allow(clippy::disallowed_methods)]
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
            wall_origin: SystemTime::now(),
            offset: watch::channel(Duration::ZERO).0,
            sleepers: Mutex::new(0),
            sleepers_changed: watch::channel(0).0,
        }
    }

    pub fn advance(&self, by: Duration) {
        self.offset.send_modify(|offset| *offset += by);
    }

    /// Number of tasks currently sleeping on this clock.
    pub fn sleepers(&self) -> usize {
        *self.sleepers_changed.borrow()
    }

    /// Resolves once at least `n` tasks sleep on this clock.
    pub async fn wait_for_sleepers(&self, n: usize) {
        let mut rx = self.sleepers_changed.subscribe();
        // The sender lives as long as self, so this cannot fail while we are borrowed.
        let _ = rx.wait_for(|count| *count >= n).await;
    }

    fn change_sleepers(&self, delta: isize) {
        let mut count = self.sleepers.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        *count = count.saturating_add_signed(delta);
        self.sleepers_changed.send_replace(*count);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for std::sync::Arc<ManualClock> {
    fn now(&self) -> Instant {
        self.origin + *self.offset.borrow()
    }
    fn wall(&self) -> SystemTime {
        self.wall_origin + *self.offset.borrow()
    }
    fn sleep_until(&self, deadline: Instant) -> Sleep {
        let clock = self.clone();
        Box::pin(async move {
            let target = deadline.saturating_duration_since(clock.origin);
            let mut rx = clock.offset.subscribe();
            clock.change_sleepers(1);
            struct Guard(std::sync::Arc<ManualClock>);
            impl Drop for Guard {
                fn drop(&mut self) {
                    self.0.change_sleepers(-1);
                }
            }
            let _guard = Guard(clock.clone());
            let _ = rx.wait_for(|offset| *offset >= target).await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn manual_clock_wakes_sleepers_only_when_advanced_past_deadline() {
        let clock = Arc::new(ManualClock::new());
        let deadline = clock.now() + Duration::from_secs(5);
        let sleeper = tokio::spawn({
            let clock = clock.clone();
            async move { clock.sleep_until(deadline).await }
        });
        clock.wait_for_sleepers(1).await;
        clock.advance(Duration::from_secs(4));
        assert!(!sleeper.is_finished());
        assert_eq!(clock.sleepers(), 1);
        clock.advance(Duration::from_secs(1));
        sleeper.await.unwrap();
        assert_eq!(clock.sleepers(), 0);
    }

    #[test]
    fn wall_and_monotonic_move_together() {
        let clock = Arc::new(ManualClock::new());
        let (t0, w0) = (clock.now(), clock.wall());
        clock.advance(Duration::from_millis(1500));
        assert_eq!(clock.now() - t0, Duration::from_millis(1500));
        assert_eq!(clock.wall().duration_since(w0).unwrap(), Duration::from_millis(1500));
    }
}
