//! Failed dashboard logins are limited per client address, so the admin token cannot be guessed
//! at network speed: after [`MAX_FAILURES`] failures within [`WINDOW`], further attempts from that
//! address are refused with 429 until the window that holds them has passed.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const MAX_FAILURES: usize = 5;
pub const WINDOW: Duration = Duration::from_secs(60);
/// Addresses remembered at most (the oldest are forgotten first), so a flood of addresses
/// cannot grow the map without bound.
const MAX_ADDRESSES: usize = 4096;

#[derive(Default)]
pub struct LoginLimit {
    failures: Mutex<HashMap<IpAddr, Vec<Instant>>>,
}

impl LoginLimit {
    /// `Err(wait)` when `addr` must wait before trying again.
    pub fn check(&self, addr: IpAddr, now: Instant) -> Result<(), Duration> {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let Some(times) = failures.get_mut(&addr) else { return Ok(()) };
        times.retain(|t| now.saturating_duration_since(*t) < WINDOW);
        if times.len() < MAX_FAILURES {
            return Ok(());
        }
        let oldest = times.first().copied().unwrap_or(now);
        Err((oldest + WINDOW).saturating_duration_since(now).max(Duration::from_secs(1)))
    }

    pub fn failed(&self, addr: IpAddr, now: Instant) {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        if failures.len() >= MAX_ADDRESSES && !failures.contains_key(&addr) {
            failures.retain(|_, times| times.last().is_some_and(|t| now.saturating_duration_since(*t) < WINDOW));
            if failures.len() >= MAX_ADDRESSES {
                let oldest = failures.iter().min_by_key(|(_, t)| t.last().copied()).map(|(a, _)| *a);
                if let Some(a) = oldest {
                    failures.remove(&a);
                }
            }
        }
        let times = failures.entry(addr).or_default();
        times.retain(|t| now.saturating_duration_since(*t) < WINDOW);
        times.push(now);
    }

    /// A successful login clears the address's failures.
    pub fn succeeded(&self, addr: IpAddr) {
        self.failures.lock().unwrap_or_else(|p| p.into_inner()).remove(&addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_failures_a_minute_then_wait_for_the_oldest_to_expire() {
        let limit = LoginLimit::default();
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let t0 = Instant::now();
        for i in 0..MAX_FAILURES {
            assert_eq!(limit.check(a, t0 + Duration::from_secs(i as u64)), Ok(()));
            limit.failed(a, t0 + Duration::from_secs(i as u64));
        }
        let wait = limit.check(a, t0 + Duration::from_secs(10)).unwrap_err();
        assert_eq!(wait, Duration::from_secs(50), "until the first failure leaves the window");
        assert_eq!(limit.check(b, t0 + Duration::from_secs(10)), Ok(()), "per address");
        assert_eq!(limit.check(a, t0 + Duration::from_secs(60)), Ok(()), "the oldest has expired");
        limit.succeeded(a);
        assert_eq!(limit.check(a, t0 + Duration::from_secs(61)), Ok(()));
    }

    #[test]
    fn the_map_stays_bounded() {
        let limit = LoginLimit::default();
        let t0 = Instant::now();
        for i in 0..(MAX_ADDRESSES as u32 + 100) {
            limit.failed(IpAddr::from(i.to_be_bytes()), t0);
        }
        assert!(limit.failures.lock().unwrap().len() <= MAX_ADDRESSES);
    }
}
