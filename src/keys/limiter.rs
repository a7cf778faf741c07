//! Rate limits, the concurrency limit and dollar budgets of client keys, behind a narrow trait
//! (`Limiter`) so that a cluster can share them (the in-memory `MemoryLimiter` serves one node).
//!
//! **One call, one atomic step.** `admit` checks every limit of a key and, if all pass, counts
//! the request and takes a concurrency lease, under one lock of that key (never held across an
//! `.await`: there is none here). A check followed by a separate increment lets N concurrent
//! requests all pass a limit that has room for one; here an rpm limit of 60 admits exactly 60 of
//! 200 concurrent requests (the thread-storm test below). A shared implementation keeps that
//! shape: one script or transaction per call.
//!
//! **Windows.** `rpm`: the admission times of the last 60 s (one timestamp per admitted request,
//! so its size is bounded by the limit). `tpm`: tokens charged per second over the last 60 s;
//! checked at admission against what is already charged (a request's own tokens are known only
//! when it ends). Budgets: a UTC-day total and a UTC-month total (each reset when its window
//! changes) and, for the rolling 5 hours, per-minute buckets of the last 5 h (a charge counts
//! until the end of its minute plus 5 h: at most a minute longer than exact).
//!
//! **What is charged.** `charge` adds a finished request's tokens (input + output) and its cost,
//! the very `cost_usd` of its record (`proxy::trail`). A request is admitted against what its
//! key has left; its own cost is known only when it ends, so concurrent requests of one key can
//! together overshoot a budget by at most what the requests in flight when it ran out cost
//! (docs/keys.md). A restart seeds the budgets from the stored records (`Gateway::new`).
//!
//! **Leases** are returned when the request ends (the `Lease` guard's drop) and expire after the
//! TTL given at admission (the request's total deadline plus its longest stream), so a slot held
//! by a holder that vanished — a crashed node, in a cluster — comes back by itself.
//!
//! **In a cluster** (`cluster::limiter`) the check-and-count is one script in Redis, awaited by
//! the gate within a short timeout; this trait's methods are then the node's local side — what
//! it counts of its own traffic, and what it falls back to when Redis does not answer.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock};

use super::key::{ClientKey, KeyLimits};

pub type LeaseId = u64;

const MINUTE_MS: i64 = 60_000;
const WINDOW_MS: i64 = 60_000;
const FIVE_HOURS_MS: i64 = 5 * 3_600_000;
const DAY_MS: i64 = 86_400_000;
/// Without an rpm limit the request log is kept for `usage` only, up to this many entries.
const LOG_WITHOUT_LIMIT: usize = 10_000;

/// Which limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitKind {
    Rpm,
    Tpm,
    Concurrency,
    UsdPerDay,
    UsdPer5h,
    UsdPerMonth,
}

impl LimitKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LimitKind::Rpm => "rpm",
            LimitKind::Tpm => "tpm",
            LimitKind::Concurrency => "concurrency",
            LimitKind::UsdPerDay => "usd_per_day",
            LimitKind::UsdPer5h => "usd_per_5h",
            LimitKind::UsdPerMonth => "usd_per_month",
        }
    }

    pub fn is_budget(self) -> bool {
        matches!(self, LimitKind::UsdPerDay | LimitKind::UsdPer5h | LimitKind::UsdPerMonth)
    }
}

/// A limit a request ran into.
#[derive(Clone, Debug, PartialEq)]
pub struct Limit {
    pub kind: LimitKind,
    /// The limit's value (requests, tokens, requests in flight, USD).
    pub limit: f64,
    /// What is used of it now.
    pub used: f64,
    /// How long until a request could pass this limit again.
    pub retry_after_ms: u64,
    /// Budgets: when the window resets (day, month), or when enough spend leaves it (5 h).
    pub resets_at_ms: Option<i64>,
}

/// One key's use of its limits now.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KeyUsage {
    /// Requests admitted in the last 60 s.
    pub requests: u64,
    /// Tokens charged in the last 60 s.
    pub tokens: u64,
    pub in_flight: u64,
    pub usd_day: f64,
    pub usd_5h: f64,
    pub usd_month: f64,
    /// Start of the next UTC day and month.
    pub day_resets_at_ms: i64,
    pub month_resets_at_ms: i64,
    /// When the oldest spend still in the 5-hour window leaves it (`None`: nothing spent).
    pub usd_5h_frees_at_ms: Option<i64>,
}

/// Where limits are counted: in memory here, shared state in a cluster.
pub trait Limiter: Send + Sync + 'static {
    /// Check every limit of `key` and, if all pass, count the request (rpm) and take a
    /// concurrency lease that expires after `lease_ttl_ms` — one atomic step.
    fn admit(&self, key: &str, limits: &KeyLimits, now_ms: i64, lease_ttl_ms: u64) -> Result<LeaseId, Limit>;
    /// Give a lease back (the request ended).
    fn release(&self, key: &str, lease: LeaseId);
    /// Charge a finished request's tokens (input + output) and cost (USD), at `at_ms`.
    fn charge(&self, key: &str, tokens: u64, usd: f64, at_ms: i64);
    /// The key's use of each window now.
    fn usage(&self, key: &str, now_ms: i64) -> KeyUsage;
    /// Forget every key not named (deleted keys).
    fn retain(&self, keys: &[String]);
    /// Charge what the stored records say was spent before this start (`Gateway::new`). A
    /// cluster keeps this local: every node seeding the shared budgets would count it again.
    fn seed(&self, key: &str, tokens: u64, usd: f64, at_ms: i64) {
        self.charge(key, tokens, usd, at_ms);
    }
}

/// A concurrency lease: given back when dropped (the request's end, however it ends).
pub struct Lease {
    limiter: Arc<dyn Limiter>,
    key: Arc<str>,
    id: LeaseId,
}

impl Lease {
    /// A lease `limiter` gave out as `id` (and takes back when this is dropped).
    pub fn new(limiter: Arc<dyn Limiter>, key: &str, id: LeaseId) -> Lease {
        Lease { limiter, key: Arc::from(key), id }
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn limiter(&self) -> &Arc<dyn Limiter> {
        &self.limiter
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.limiter.release(&self.key, self.id);
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("key", &self.key).field("id", &self.id).finish()
    }
}

/// `Limiter::admit`, with the lease in its guard.
pub fn admit(limiter: &Arc<dyn Limiter>, key: &ClientKey, now_ms: i64, lease_ttl_ms: u64) -> Result<Lease, Limit> {
    let id = limiter.admit(&key.name, &key.limits, now_ms, lease_ttl_ms)?;
    Ok(Lease { limiter: limiter.clone(), key: Arc::from(key.name.as_str()), id })
}

/// What one key has used, with the window arithmetic (pure: time is a parameter).
#[derive(Debug, Default)]
struct KeyState {
    /// Admission times of the last 60 s, oldest first.
    requests: VecDeque<i64>,
    /// (second, tokens) charged in the last 60 s, oldest first.
    tokens: VecDeque<(i64, u64)>,
    /// (lease, expires at).
    leases: Vec<(LeaseId, i64)>,
    next_lease: LeaseId,
    /// (minute, USD) of the last 5 hours, oldest first.
    minutes: VecDeque<(i64, f64)>,
    /// (UTC day number, USD).
    day: (i64, f64),
    /// (start of the UTC month, USD).
    month: (i64, f64),
}

impl KeyState {
    fn prune(&mut self, now: i64) {
        while self.requests.front().is_some_and(|t| *t <= now - WINDOW_MS) {
            self.requests.pop_front();
        }
        // A second's bucket counts until 60 s after the end of that second.
        while self.tokens.front().is_some_and(|(s, _)| (s + 1) * 1000 + WINDOW_MS <= now) {
            self.tokens.pop_front();
        }
        self.leases.retain(|(_, expires)| *expires > now);
        while self.minutes.front().is_some_and(|(m, _)| (m + 1) * MINUTE_MS + FIVE_HOURS_MS <= now) {
            self.minutes.pop_front();
        }
    }

    fn tokens_in_window(&self) -> u64 {
        self.tokens.iter().map(|(_, n)| n).sum()
    }

    fn usd_5h(&self) -> f64 {
        self.minutes.iter().map(|(_, usd)| usd).sum()
    }

    fn usd_day(&self, now: i64) -> f64 {
        if self.day.0 == now.div_euclid(DAY_MS) { self.day.1 } else { 0.0 }
    }

    fn usd_month(&self, now: i64) -> f64 {
        if self.month.0 == crate::timefmt::utc_month_bounds(now).0 { self.month.1 } else { 0.0 }
    }

    /// When enough of the 5-hour spend leaves the window for it to be under `limit` again.
    fn five_hours_free_at(&self, limit: f64) -> Option<i64> {
        let mut left = self.usd_5h();
        for (m, usd) in &self.minutes {
            left -= usd;
            if left < limit {
                return Some((m + 1) * MINUTE_MS + FIVE_HOURS_MS);
            }
        }
        None
    }

    fn check(&self, limits: &KeyLimits, now: i64) -> Result<(), Limit> {
        let budget = |kind, limit: Option<f64>, used: f64, resets: Option<i64>| match limit {
            Some(limit) if used >= limit => {
                let at = resets.unwrap_or(now + MINUTE_MS);
                Err(Limit { kind, limit, used, retry_after_ms: (at - now).max(0) as u64, resets_at_ms: Some(at) })
            }
            _ => Ok(()),
        };
        // Budgets first: when a budget is spent, waiting out a rate limit does not help.
        let (_, next_month) = crate::timefmt::utc_month_bounds(now);
        budget(LimitKind::UsdPerMonth, limits.usd_per_month, self.usd_month(now), Some(next_month))?;
        let next_day = (now.div_euclid(DAY_MS) + 1) * DAY_MS;
        budget(LimitKind::UsdPerDay, limits.usd_per_day, self.usd_day(now), Some(next_day))?;
        if let Some(limit) = limits.usd_per_5h {
            budget(LimitKind::UsdPer5h, Some(limit), self.usd_5h(), self.five_hours_free_at(limit))?;
        }
        if let Some(c) = limits.concurrency
            && self.leases.len() as u64 >= c
        {
            // When a slot frees is when a request ends: unknown. A second is a fair hint.
            return Err(Limit {
                kind: LimitKind::Concurrency,
                limit: c as f64,
                used: self.leases.len() as f64,
                retry_after_ms: 1000,
                resets_at_ms: None,
            });
        }
        if let Some(rpm) = limits.rpm {
            let n = self.requests.len() as u64;
            if n >= rpm {
                // Room for one more once the (n - rpm + 1)-th oldest request leaves the window.
                let oldest_in_way = self.requests[(n - rpm) as usize];
                return Err(Limit {
                    kind: LimitKind::Rpm,
                    limit: rpm as f64,
                    used: n as f64,
                    retry_after_ms: (oldest_in_way + WINDOW_MS - now).max(1) as u64,
                    resets_at_ms: None,
                });
            }
        }
        if let Some(tpm) = limits.tpm {
            let used = self.tokens_in_window();
            if used >= tpm {
                let mut left = used;
                let mut free_at = now + WINDOW_MS;
                for (sec, n) in &self.tokens {
                    left -= n;
                    if left < tpm {
                        free_at = (sec + 1) * 1000 + WINDOW_MS;
                        break;
                    }
                }
                return Err(Limit {
                    kind: LimitKind::Tpm,
                    limit: tpm as f64,
                    used: used as f64,
                    retry_after_ms: (free_at - now).max(1) as u64,
                    resets_at_ms: None,
                });
            }
        }
        Ok(())
    }

    fn admit(
        &mut self,
        limits: &KeyLimits,
        now: i64,
        lease_ttl_ms: u64,
        id: Option<LeaseId>,
    ) -> Result<LeaseId, Limit> {
        self.prune(now);
        self.check(limits, now)?;
        let cap = limits.rpm.map_or(LOG_WITHOUT_LIMIT, |r| r as usize);
        while self.requests.len() >= cap {
            self.requests.pop_front();
        }
        // Concurrent callers read the clock before taking the lock: keep the log in order.
        let at = self.requests.back().map_or(now, |last| now.max(*last));
        self.requests.push_back(at);
        let id = id.unwrap_or_else(|| {
            self.next_lease += 1;
            self.next_lease
        });
        let expires = now.saturating_add(i64::try_from(lease_ttl_ms).unwrap_or(i64::MAX));
        self.leases.push((id, expires));
        Ok(id)
    }

    fn charge(&mut self, tokens: u64, usd: f64, at: i64) {
        if tokens > 0 {
            let sec = at.div_euclid(1000);
            match self.tokens.iter_mut().rev().find(|(s, _)| *s == sec) {
                Some((_, n)) => *n += tokens,
                None => {
                    let at_index = self.tokens.partition_point(|(s, _)| *s < sec);
                    self.tokens.insert(at_index, (sec, tokens));
                }
            }
        }
        if !(usd.is_finite() && usd > 0.0) {
            return;
        }
        let minute = at.div_euclid(MINUTE_MS);
        match self.minutes.iter_mut().rev().find(|(m, _)| *m == minute) {
            Some((_, v)) => *v += usd,
            None => {
                let at_index = self.minutes.partition_point(|(m, _)| *m < minute);
                self.minutes.insert(at_index, (minute, usd));
            }
        }
        let day = at.div_euclid(DAY_MS);
        if day > self.day.0 || self.day.1 == 0.0 {
            self.day = (day, 0.0);
        }
        if day == self.day.0 {
            self.day.1 += usd;
        }
        let month = crate::timefmt::utc_month_bounds(at).0;
        if month > self.month.0 || self.month.1 == 0.0 {
            self.month = (month, 0.0);
        }
        if month == self.month.0 {
            self.month.1 += usd;
        }
    }

    fn usage(&mut self, now: i64) -> KeyUsage {
        self.prune(now);
        KeyUsage {
            requests: self.requests.len() as u64,
            tokens: self.tokens_in_window(),
            in_flight: self.leases.len() as u64,
            usd_day: self.usd_day(now),
            usd_5h: self.usd_5h(),
            usd_month: self.usd_month(now),
            day_resets_at_ms: (now.div_euclid(DAY_MS) + 1) * DAY_MS,
            month_resets_at_ms: crate::timefmt::utc_month_bounds(now).1,
            usd_5h_frees_at_ms: self.minutes.front().map(|(m, _)| (m + 1) * MINUTE_MS + FIVE_HOURS_MS),
        }
    }
}

/// One node's limits: a map of keys (read-locked to find one, write-locked the first time a
/// key is seen), each behind its own mutex, so two keys never wait for each other.
#[derive(Default)]
pub struct MemoryLimiter {
    keys: RwLock<HashMap<String, Arc<Mutex<KeyState>>>>,
}

impl MemoryLimiter {
    pub fn new() -> MemoryLimiter {
        MemoryLimiter::default()
    }

    fn state(&self, key: &str) -> Arc<Mutex<KeyState>> {
        if let Some(s) = self.keys.read().unwrap_or_else(|p| p.into_inner()).get(key) {
            return s.clone();
        }
        let mut map = self.keys.write().unwrap_or_else(|p| p.into_inner());
        map.entry(key.to_string()).or_default().clone()
    }

    /// `admit` with a lease id of the caller's (a cluster numbers its leases itself, so that one
    /// id names the lease both here and in Redis).
    pub fn admit_as(
        &self,
        key: &str,
        limits: &KeyLimits,
        now_ms: i64,
        lease_ttl_ms: u64,
        id: LeaseId,
    ) -> Result<LeaseId, Limit> {
        self.with(key, |s| s.admit(limits, now_ms, lease_ttl_ms, Some(id)))
    }

    fn with<T>(&self, key: &str, f: impl FnOnce(&mut KeyState) -> T) -> T {
        let state = self.state(key);
        let mut guard = state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }
}

impl Limiter for MemoryLimiter {
    fn admit(&self, key: &str, limits: &KeyLimits, now_ms: i64, lease_ttl_ms: u64) -> Result<LeaseId, Limit> {
        self.with(key, |s| s.admit(limits, now_ms, lease_ttl_ms, None))
    }

    fn release(&self, key: &str, lease: LeaseId) {
        let state = self.keys.read().unwrap_or_else(|p| p.into_inner()).get(key).cloned();
        if let Some(state) = state {
            state.lock().unwrap_or_else(|p| p.into_inner()).leases.retain(|(id, _)| *id != lease);
        }
    }

    fn charge(&self, key: &str, tokens: u64, usd: f64, at_ms: i64) {
        self.with(key, |s| s.charge(tokens, usd, at_ms));
    }

    fn usage(&self, key: &str, now_ms: i64) -> KeyUsage {
        self.with(key, |s| s.usage(now_ms))
    }

    fn retain(&self, keys: &[String]) {
        self.keys.write().unwrap_or_else(|p| p.into_inner()).retain(|k, _| keys.iter().any(|n| n == k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};
    use std::time::{Duration, UNIX_EPOCH};

    fn limits() -> KeyLimits {
        KeyLimits::default()
    }

    fn ms(clock: &Arc<ManualClock>) -> i64 {
        clock.wall().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
    }

    /// 2027-01-15T08:00:00Z.
    const T0: i64 = 1_800_000_000_000;
    const TTL: u64 = 600_000;

    #[test]
    fn rpm_is_a_sliding_60_second_window() {
        let l = MemoryLimiter::new();
        let lim = KeyLimits { rpm: Some(3), ..limits() };
        for i in 0..3 {
            l.admit("k", &lim, T0 + i * 10_000, TTL).unwrap();
        }
        // At +30 s the window holds 3 (at 0, 10, 20 s): full until the first leaves at +60 s.
        let e = l.admit("k", &lim, T0 + 30_000, TTL).unwrap_err();
        assert_eq!((e.kind, e.limit, e.used, e.retry_after_ms), (LimitKind::Rpm, 3.0, 3.0, 30_000));
        assert!(l.admit("k", &lim, T0 + 59_999, TTL).is_err());
        l.admit("k", &lim, T0 + 60_000, TTL).unwrap();
        assert!(l.admit("k", &lim, T0 + 60_001, TTL).is_err(), "0 s left, 10 s, 20 s, 60 s in the window");
        // Refused requests are not counted: after the window moves past, all room is back.
        assert_eq!(l.usage("k", T0 + 130_000).requests, 0);
        // A lowered limit waits for enough requests to leave.
        let lim1 = KeyLimits { rpm: Some(1), ..limits() };
        let l = MemoryLimiter::new();
        for i in 0..3 {
            l.admit("k", &KeyLimits { rpm: Some(5), ..limits() }, T0 + i * 1000, TTL).unwrap();
        }
        assert_eq!(l.admit("k", &lim1, T0 + 5_000, TTL).unwrap_err().retry_after_ms, 57_000);
    }

    #[test]
    fn tpm_counts_charged_tokens_of_the_last_60_seconds() {
        let l = MemoryLimiter::new();
        let lim = KeyLimits { tpm: Some(1000), ..limits() };
        l.admit("k", &lim, T0, TTL).unwrap();
        l.charge("k", 600, 0.0, T0 + 1_500);
        l.admit("k", &lim, T0 + 2_000, TTL).unwrap();
        l.charge("k", 500, 0.0, T0 + 10_200);
        let e = l.admit("k", &lim, T0 + 20_000, TTL).unwrap_err();
        assert_eq!((e.kind, e.used), (LimitKind::Tpm, 1100.0));
        // The 600 charged in second T0+1 leave the window at T0 + 62 s.
        assert_eq!(e.retry_after_ms, 62_000 - 20_000);
        assert!(l.admit("k", &lim, T0 + 61_999, TTL).is_err());
        l.admit("k", &lim, T0 + 62_000, TTL).unwrap();
        assert_eq!(l.usage("k", T0 + 62_000).tokens, 500);
    }

    #[test]
    fn concurrency_leases_come_back_on_drop_and_on_expiry() {
        let limiter: Arc<dyn Limiter> = Arc::new(MemoryLimiter::new());
        let mut key = crate::keys::key::test_key("k", "ccm-k");
        key.limits.concurrency = Some(2);
        let a = admit(&limiter, &key, T0, TTL).unwrap();
        let b = admit(&limiter, &key, T0, TTL).unwrap();
        let e = admit(&limiter, &key, T0, TTL).unwrap_err();
        assert_eq!((e.kind, e.limit), (LimitKind::Concurrency, 2.0));
        drop(a);
        let c = admit(&limiter, &key, T0, TTL).unwrap();
        assert_eq!(limiter.usage("k", T0).in_flight, 2);
        // A holder that never gives its lease back (a crashed node) loses it after the TTL.
        std::mem::forget(b);
        std::mem::forget(c);
        assert!(admit(&limiter, &key, T0 + TTL as i64 - 1, TTL).is_err());
        let _d = admit(&limiter, &key, T0 + TTL as i64, TTL).unwrap();
    }

    #[test]
    fn day_and_month_budgets_are_utc_windows() {
        let l = MemoryLimiter::new();
        let lim = KeyLimits { usd_per_day: Some(1.0), usd_per_month: Some(2.5), ..limits() };
        // 2027-01-15 08:00 UTC.
        l.admit("k", &lim, T0, TTL).unwrap();
        l.charge("k", 10, 0.6, T0);
        l.admit("k", &lim, T0 + 1, TTL).unwrap();
        l.charge("k", 10, 0.4, T0 + 2);
        let e = l.admit("k", &lim, T0 + 3, TTL).unwrap_err();
        let midnight = (T0 / DAY_MS + 1) * DAY_MS;
        assert_eq!((e.kind, e.resets_at_ms), (LimitKind::UsdPerDay, Some(midnight)));
        assert_eq!(e.retry_after_ms, (midnight - T0 - 3) as u64);
        assert!((e.used - 1.0).abs() < 1e-9);
        // The next UTC day starts empty; the month keeps counting.
        l.admit("k", &lim, midnight, TTL).unwrap();
        l.charge("k", 10, 1.0, midnight + 1);
        let u = l.usage("k", midnight + 2);
        assert!((u.usd_day - 1.0).abs() < 1e-9 && (u.usd_month - 2.0).abs() < 1e-9, "{u:?}");
        l.charge("k", 10, 0.5, midnight + DAY_MS);
        let e = l.admit("k", &lim, midnight + DAY_MS + 5, TTL).unwrap_err();
        let (_, feb) = crate::timefmt::utc_month_bounds(T0);
        assert_eq!((e.kind, e.resets_at_ms), (LimitKind::UsdPerMonth, Some(feb)));
        assert_eq!(crate::timefmt::rfc3339_ms(feb), "2027-02-01T00:00:00Z");
        l.admit("k", &lim, feb, TTL).unwrap();
        assert_eq!(l.usage("k", feb).usd_month, 0.0);
    }

    #[test]
    fn the_five_hour_budget_rolls() {
        let clock = Arc::new(ManualClock::new());
        let l = MemoryLimiter::new();
        let lim = KeyLimits { usd_per_5h: Some(1.0), ..limits() };
        let start = ms(&clock);
        l.charge("k", 0, 0.5, start);
        clock.advance(Duration::from_secs(2 * 3600));
        l.charge("k", 0, 0.5, ms(&clock));
        clock.advance(Duration::from_secs(3600));
        let e = l.admit("k", &lim, ms(&clock), TTL).unwrap_err();
        assert_eq!(e.kind, LimitKind::UsdPer5h);
        // The first 0.5 leaves the window 5 h after the end of its minute.
        let frees = (start.div_euclid(MINUTE_MS) + 1) * MINUTE_MS + FIVE_HOURS_MS;
        assert_eq!(e.resets_at_ms, Some(frees));
        clock.advance(Duration::from_millis((frees - ms(&clock) - 1) as u64));
        assert!(l.admit("k", &lim, ms(&clock), TTL).is_err());
        clock.advance(Duration::from_millis(1));
        l.admit("k", &lim, ms(&clock), TTL).unwrap();
        assert!((l.usage("k", ms(&clock)).usd_5h - 0.5).abs() < 1e-9);
        // Everything leaves in the end.
        clock.advance(Duration::from_secs(5 * 3600));
        let u = l.usage("k", ms(&clock));
        assert_eq!((u.usd_5h, u.usd_5h_frees_at_ms), (0.0, None));
    }

    #[test]
    fn a_budget_of_zero_admits_nothing_and_charges_out_of_order_land_in_place() {
        let l = MemoryLimiter::new();
        assert!(l.admit("k", &KeyLimits { usd_per_day: Some(0.0), ..limits() }, T0, TTL).is_err());
        // Seeding from records may charge minutes in any order; the 5-hour sum is the same.
        l.charge("k", 0, 0.25, T0 + 120_000);
        l.charge("k", 0, 0.25, T0);
        l.charge("k", 0, 0.25, T0 + 60_000);
        l.charge("k", 0, 0.25, T0 + 60_001);
        assert!((l.usage("k", T0 + 120_000).usd_5h - 1.0).abs() < 1e-9);
        assert!((l.usage("k", T0 + 120_000).usd_day - 1.0).abs() < 1e-9);
    }

    #[test]
    fn admission_is_atomic_under_a_thread_storm() {
        let l = Arc::new(MemoryLimiter::new());
        let lim = KeyLimits { rpm: Some(60), ..limits() };
        let barrier = Arc::new(std::sync::Barrier::new(200));
        let threads: Vec<_> = (0..200)
            .map(|i| {
                let (l, barrier) = (l.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    l.admit("storm", &lim, T0 + (i % 7) as i64, TTL).is_ok()
                })
            })
            .collect();
        let admitted = threads.into_iter().map(|t| t.join().unwrap()).filter(|ok| *ok).count();
        assert_eq!(admitted, 60);
        assert_eq!(l.usage("storm", T0 + 10).requests, 60);
    }

    #[test]
    fn forgotten_keys_start_over() {
        let l = MemoryLimiter::new();
        l.charge("gone", 5, 1.0, T0);
        l.charge("kept", 5, 1.0, T0);
        l.retain(&["kept".to_string()]);
        assert_eq!(l.usage("gone", T0).usd_day, 0.0);
        assert_eq!(l.usage("kept", T0).usd_day, 1.0);
    }
}
