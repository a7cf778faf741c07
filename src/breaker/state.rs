//! The circuit breaker of one endpoint, as a pure state machine (SPEC §5).
//!
//! No locks, no clock reads, no I/O: the caller owns the breaker (behind its own lock)
//! and passes time in — `now` (monotonic) for cooldowns and the error-rate window, `wall`
//! for the timestamps shown by `GET /api/health`. Every transition therefore happens
//! lazily inside a call (SPEC §5: "request-driven: no background timers").
//!
//! ```text
//!            consecutive failures / error rate          cooldown over (lazily, in try_acquire)
//!  Closed ─────────────────────────────────────► Open ─────────────────────────────► HalfOpen
//!    ▲   (Broken, or RateLimited if all 429s)      ▲                                  │  │
//!    │                                             └──── any failure (ProbeFailed) ───┘  │
//!    └──────────────────────── success_threshold successes ─────────────────────────────┘
//!  reset(): any state → Closed
//! ```
//!
//! In a cluster (`crate::cluster`) other nodes' verdicts arrive through `apply_open` (Open until
//! a deadline, unless this breaker already holds a later one) and `apply_closed` (their probes
//! closed it, or an operator reset it). Failures are still counted here, per node: only the
//! verdicts are shared.

use std::collections::VecDeque;
use std::time::{Duration, Instant, SystemTime};

pub use crate::config::BreakerSettings;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenReason {
    Broken,
    RateLimited,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Circuit {
    Closed,
    Open,
    HalfOpen,
}

/// What one upstream attempt did to the endpoint, as classified by the caller (SPEC §4).
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Success,
    /// Client's fault or cancelled: releases a half-open permit, changes no counters.
    Neutral,
    /// 5xx, 403, 404 on known path, network error, timeout.
    Broken,
    /// 429; `retry_after` already parsed (uncapped) by the caller.
    RateLimited {
        retry_after: Option<Duration>,
    },
}

/// Permission to send one attempt. Must be given back through `record` (or `release`).
///
/// Deliberately neither `Clone` nor `Copy`: giving it back consumes it, so one attempt
/// cannot return its probe permit twice.
#[derive(Debug)]
#[must_use = "a Grant must be given back through Breaker::record or Breaker::release, \
              or a half-open probe permit stays taken"]
pub struct Grant {
    explicit: bool,
    /// `Some(epoch)` when this grant holds the half-open probe permit of that epoch.
    probe_epoch: Option<u64>,
}

impl Grant {
    /// What `Breaker::try_acquire` grants a routed attempt while the breaker is closed.
    pub fn of_closed() -> Grant {
        Grant { explicit: false, probe_epoch: None }
    }

    /// Whether this grant holds the single half-open probe permit.
    pub fn is_probe(&self) -> bool {
        self.probe_epoch.is_some()
    }

    /// Whether the user named the endpoint (SPEC §2 "explicit endpoint").
    pub fn is_explicit(&self) -> bool {
        self.explicit
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Denied {
    /// Open and still cooling down.
    Open { reason: OpenReason, until: Instant },
    /// HalfOpen and its single probe permit is taken; `reason` is why it had opened.
    ProbeBusy { reason: OpenReason },
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TransitionCause {
    ConsecutiveFailures {
        count: u32,
    },
    ErrorRate {
        failures: u32,
        total: u32,
    },
    CooldownElapsed,
    ProbeFailed,
    ProbesSucceeded {
        count: u32,
    },
    ManualReset,
    /// Another node of the cluster opened or closed it.
    Cluster,
}

impl OpenReason {
    /// The name in the API, records, logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            OpenReason::Broken => "broken",
            OpenReason::RateLimited => "rate_limited",
        }
    }
}

impl Circuit {
    /// The name in the API, records, logs and metrics (`half_open` as SPEC fixes it).
    pub fn as_str(self) -> &'static str {
        match self {
            Circuit::Closed => "closed",
            Circuit::Open => "open",
            Circuit::HalfOpen => "half_open",
        }
    }
}

impl TransitionCause {
    pub fn as_str(&self) -> &'static str {
        match self {
            TransitionCause::ConsecutiveFailures { .. } => "consecutive_failures",
            TransitionCause::ErrorRate { .. } => "error_rate",
            TransitionCause::CooldownElapsed => "cooldown_elapsed",
            TransitionCause::ProbeFailed => "probe_failed",
            TransitionCause::ProbesSucceeded { .. } => "probes_succeeded",
            TransitionCause::ManualReset => "manual_reset",
            TransitionCause::Cluster => "cluster",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Transition {
    pub from: Circuit,
    pub to: Circuit,
    /// Set when `to` is Open.
    pub reason: Option<OpenReason>,
    pub cause: TransitionCause,
    /// Set when `to` is Open.
    pub cooldown: Option<Duration>,
}

impl std::fmt::Display for Transition {
    /// `closed→open/broken (consecutive_failures)`, as a decision trail shows it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.reason {
            Some(r) if self.to == Circuit::Open => {
                write!(f, "{}→open/{} ({})", self.from.as_str(), r.as_str(), self.cause.as_str())
            }
            _ => write!(f, "{}→{} ({})", self.from.as_str(), self.to.as_str(), self.cause.as_str()),
        }
    }
}

/// Read-only view for GET /api/health.
#[derive(Clone, Debug, PartialEq)]
pub struct BreakerView {
    pub circuit: Circuit,
    pub open_reason: Option<OpenReason>,
    pub consecutive_failures: u32,
    pub successes: u64,
    pub failures: u64,
    /// All recorded outcomes incl. neutral.
    pub requests: u64,
    pub last_error: Option<String>,
    pub last_failure_at: Option<SystemTime>,
    pub last_success_at: Option<SystemTime>,
    pub cooldown_remaining: Duration,
    /// Any outcome recorded since start.
    pub has_data: bool,
    /// The state was learned from another node of the cluster (health's `"source": "cluster"`).
    pub from_cluster: bool,
}

#[derive(Clone, Debug)]
enum State {
    Closed,
    /// `until` is fixed when it trips and never moved by later outcomes (SPEC §2, §5).
    Open {
        reason: OpenReason,
        until: Instant,
    },
    /// `reason` is kept only to tell a caller waiting on a busy probe why it had opened
    /// (all-rate-limited backoff, SPEC §2 step 5).
    HalfOpen {
        reason: OpenReason,
        probe_taken: bool,
        successes: u32,
    },
}

/// Which kind of counted (non-neutral) outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Counted {
    Success,
    Broken,
    RateLimited,
}

/// Outcomes of one millisecond. Coalescing by millisecond keeps memory bounded by the
/// window length, not by the request rate.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    ms: u64,
    successes: u32,
    failures: u32,
    /// Subset of `failures` that were 429s.
    rate_limited: u32,
}

/// Sliding error-rate window (SPEC §5 **(beyond)**), with running totals so that a
/// record costs O(pruned buckets), not O(window).
#[derive(Clone, Debug, Default)]
struct Window {
    /// Instant that millisecond 0 refers to: the first outcome ever recorded.
    origin: Option<Instant>,
    buckets: VecDeque<Bucket>,
    successes: u64,
    failures: u64,
    rate_limited: u64,
}

impl Window {
    fn millis(&mut self, now: Instant) -> u64 {
        let origin = *self.origin.get_or_insert(now);
        u64::try_from(now.saturating_duration_since(origin).as_millis()).unwrap_or(u64::MAX)
    }

    /// Drops buckets older than `length` before `now_ms`. The length comes from the
    /// settings of the outcome being recorded, so a hot-shortened window takes effect
    /// at once (a lengthened one cannot bring back what was already dropped).
    fn prune(&mut self, now_ms: u64, length: Duration) {
        let length_ms = u64::try_from(length.as_millis()).unwrap_or(u64::MAX);
        while let Some(front) = self.buckets.front().copied() {
            if now_ms.saturating_sub(front.ms) <= length_ms {
                break;
            }
            self.buckets.pop_front();
            self.successes = self.successes.saturating_sub(u64::from(front.successes));
            self.failures = self.failures.saturating_sub(u64::from(front.failures));
            self.rate_limited = self.rate_limited.saturating_sub(u64::from(front.rate_limited));
        }
    }

    fn push(&mut self, now_ms: u64, outcome: Counted) {
        // Callers read the clock before taking the breaker's lock, so `now` can arrive
        // slightly out of order; folding an older time into the newest bucket keeps the
        // deque sorted (pruning relies on that) at the cost of a millisecond of age.
        if !matches!(self.buckets.back(), Some(back) if back.ms >= now_ms) {
            self.buckets.push_back(Bucket { ms: now_ms, successes: 0, failures: 0, rate_limited: 0 });
        }
        let Some(bucket) = self.buckets.back_mut() else {
            return; // unreachable: there is at least the bucket just pushed
        };
        match outcome {
            Counted::Success => {
                bucket.successes = bucket.successes.saturating_add(1);
                self.successes += 1;
            }
            Counted::Broken | Counted::RateLimited => {
                bucket.failures = bucket.failures.saturating_add(1);
                self.failures += 1;
                if outcome == Counted::RateLimited {
                    bucket.rate_limited = bucket.rate_limited.saturating_add(1);
                    self.rate_limited += 1;
                }
            }
        }
    }

    fn total(&self) -> u64 {
        self.successes + self.failures
    }

    fn clear(&mut self) {
        self.buckets.clear();
        self.successes = 0;
        self.failures = 0;
        self.rate_limited = 0;
    }
}

/// The breaker of one endpoint. See the module docs for the state diagram.
#[derive(Clone, Debug)]
pub struct Breaker {
    state: State,
    /// Bumped on every state change, so a probe grant from an earlier half-open period
    /// (or from before a reset) can never give back the permit of a newer one.
    epoch: u64,
    consecutive_failures: u32,
    /// How many of the current consecutive run were not 429s: the run may open the
    /// breaker as RateLimited only while this is 0.
    consecutive_broken: u32,
    window: Window,
    successes: u64,
    failures: u64,
    requests: u64,
    last_error: Option<String>,
    last_failure_at: Option<SystemTime>,
    last_success_at: Option<SystemTime>,
    /// The current state came from another node (`apply_open`), not from this node's outcomes.
    from_cluster: bool,
}

impl Default for Breaker {
    fn default() -> Self {
        Self::new()
    }
}

impl Breaker {
    /// Closed, no data.
    pub fn new() -> Self {
        Self {
            state: State::Closed,
            epoch: 0,
            consecutive_failures: 0,
            consecutive_broken: 0,
            window: Window::default(),
            successes: 0,
            failures: 0,
            requests: 0,
            last_error: None,
            last_failure_at: None,
            last_success_at: None,
            from_cluster: false,
        }
    }

    /// SPEC §2 step 4, read-only: `Err(Denied::Open{..})` only when Open and `now < until`.
    /// Never transitions, never takes a permit: a cooled-down Open endpoint stays a
    /// candidate (it will be probed), and a busy half-open one is skipped later, at send time.
    pub fn routable(&self, now: Instant) -> Result<(), Denied> {
        match self.state {
            State::Open { reason, until } if now < until => Err(Denied::Open { reason, until }),
            _ => Ok(()),
        }
    }

    /// Asks to send one attempt (SPEC §3 "before each send").
    ///
    /// Non-explicit: Closed → grant; Open and cooling → `Denied::Open`; Open and cooled →
    /// becomes HalfOpen here, lazily (the returned Transition), and grants the single probe
    /// permit; HalfOpen with the permit free → probe grant; taken → `Denied::ProbeBusy`.
    ///
    /// `explicit` (the user named the endpoint): always granted, takes no probe permit and
    /// never moves Open → HalfOpen — the user's intent bypasses the breaker (SPEC §2), but
    /// must not steal the probe that would let routed traffic back in.
    pub fn try_acquire(&mut self, now: Instant, explicit: bool) -> (Result<Grant, Denied>, Option<Transition>) {
        if explicit {
            return (Ok(Grant { explicit: true, probe_epoch: None }), None);
        }
        match &mut self.state {
            State::Closed => (Ok(Grant::of_closed()), None),
            State::Open { reason, until } if now < *until => {
                (Err(Denied::Open { reason: *reason, until: *until }), None)
            }
            State::Open { reason, .. } => {
                let reason = *reason;
                self.state = State::HalfOpen { reason, probe_taken: true, successes: 0 };
                self.epoch += 1;
                let transition = Transition {
                    from: Circuit::Open,
                    to: Circuit::HalfOpen,
                    reason: None,
                    cause: TransitionCause::CooldownElapsed,
                    cooldown: None,
                };
                (Ok(self.probe_grant()), Some(transition))
            }
            State::HalfOpen { reason, probe_taken: true, .. } => (Err(Denied::ProbeBusy { reason: *reason }), None),
            State::HalfOpen { probe_taken, .. } => {
                *probe_taken = true;
                (Ok(self.probe_grant()), None)
            }
        }
    }

    /// Records the outcome of a granted attempt and returns the transition it caused.
    ///
    /// `settings` are the thresholds of the inbound protocol of *this* request (SPEC §5
    /// "which protocol's numbers apply"); nothing is cached from earlier calls, which is
    /// what makes hot updates and mixed-protocol traffic work. `note` is the human text
    /// for `last_error`: used for failures, and for neutral outcomes when given (a 401's
    /// "upstream rejected the API key (401)", SPEC §4).
    pub fn record(
        &mut self,
        grant: Grant,
        outcome: Outcome,
        note: Option<&str>,
        now: Instant,
        wall: SystemTime,
        settings: &BreakerSettings,
    ) -> Option<Transition> {
        self.release(grant);
        self.requests += 1;

        let (counted, retry_after) = match outcome {
            Outcome::Neutral => {
                // SPEC §4: a client's bad request must never move a healthy breaker, so
                // only the permit (above) and the visible note change.
                if let Some(note) = note {
                    self.last_error = Some(note.to_owned());
                }
                return None;
            }
            Outcome::Success => (Counted::Success, None),
            Outcome::Broken => (Counted::Broken, None),
            Outcome::RateLimited { retry_after } => (Counted::RateLimited, retry_after),
        };
        self.count(counted, note, now, wall, settings);

        match self.state {
            State::Closed if counted != Counted::Success => self.check_trip(counted, retry_after, now, settings),
            // A success never opens a breaker, even if pruning left the window above the
            // error rate (only possible after a hot update): it is evidence of health.
            State::Closed => None,
            // In-flight or explicit requests finishing while Open: a success leaves it
            // Open (only a probe may close it) and a failure neither restarts nor extends
            // the cooldown, or explicit traffic could keep an endpoint benched forever.
            State::Open { .. } => None,
            State::HalfOpen { reason, probe_taken, successes } => {
                if counted == Counted::Success {
                    let successes = successes.saturating_add(1);
                    if successes >= settings.success_threshold {
                        return Some(self.close(successes));
                    }
                    self.state = State::HalfOpen { reason, probe_taken, successes };
                    None
                } else {
                    // A failed probe reopens at once, with the reason and cooldown of
                    // *that* failure: the earlier trip's reason says nothing about now.
                    let reason = reason_of(counted);
                    Some(self.open(Circuit::HalfOpen, reason, TransitionCause::ProbeFailed, retry_after, now, settings))
                }
            }
        }
    }

    /// Gives a grant back without an outcome (e.g. the attempt was never sent). Returns
    /// its probe permit if it still holds the current one; counts nothing.
    pub fn release(&mut self, grant: Grant) {
        if let Some(epoch) = grant.probe_epoch
            && epoch == self.epoch
            && let State::HalfOpen { probe_taken, .. } = &mut self.state
        {
            *probe_taken = false;
        }
    }

    /// Manual reset (SPEC §5) → Closed with the consecutive run, the window and the
    /// half-open progress cleared. Lifetime totals and `last_*` are kept: they are history
    /// shown by the health page, not inputs to any trip decision.
    ///
    /// Returns `None` when it was already Closed with no consecutive failures (it still
    /// clears the window then), so an idempotent reset does not log a transition.
    pub fn reset(&mut self) -> Option<Transition> {
        let from = self.circuit();
        let changed = from != Circuit::Closed || self.consecutive_failures > 0;
        self.state = State::Closed;
        self.epoch += 1;
        self.clear_counters();
        changed.then_some(Transition {
            from,
            to: Circuit::Closed,
            reason: None,
            cause: TransitionCause::ManualReset,
            cooldown: None,
        })
    }

    /// Another node's verdict: Open with `reason` until `until` — unless this breaker is already
    /// Open until later (a later deadline always wins, never the reverse; a deadline less than
    /// `JITTER` later is the same verdict seen through a slightly different clock offset). A
    /// verdict that has already ended changes nothing. A probe of this node in flight loses its
    /// permit (the epoch moves), so its outcome cannot close what another node just opened.
    pub fn apply_open(&mut self, reason: OpenReason, until: Instant, now: Instant) -> Option<Transition> {
        /// Deadlines closer than this are one verdict.
        const JITTER: Duration = Duration::from_millis(20);
        if until <= now {
            return None;
        }
        let from = self.circuit();
        if let State::Open { until: held, .. } = self.state {
            if until > held + JITTER {
                self.state = State::Open { reason, until };
                self.from_cluster = true;
            }
            return None;
        }
        self.state = State::Open { reason, until };
        self.epoch += 1;
        self.from_cluster = true;
        Some(Transition {
            from,
            to: Circuit::Open,
            reason: Some(reason),
            cause: TransitionCause::Cluster,
            cooldown: Some(until.saturating_duration_since(now)),
        })
    }

    /// Another node closed it (enough probes succeeded there) or an operator reset it there:
    /// Closed with this node's counters cleared too, as after a local reset.
    pub fn apply_closed(&mut self, reset: bool) -> Option<Transition> {
        let from = self.circuit();
        let changed = from != Circuit::Closed || self.consecutive_failures > 0;
        if from != Circuit::Closed {
            self.state = State::Closed;
            self.epoch += 1;
        }
        self.clear_counters();
        let cause = if reset { TransitionCause::ManualReset } else { TransitionCause::Cluster };
        changed.then_some(Transition { from, to: Circuit::Closed, reason: None, cause, cooldown: None })
    }

    /// Why a half-open breaker had opened (what a request denied its probe is told).
    pub fn half_open_reason(&self) -> Option<OpenReason> {
        match self.state {
            State::HalfOpen { reason, .. } => Some(reason),
            _ => None,
        }
    }

    pub fn view(&self, now: Instant) -> BreakerView {
        let (open_reason, cooldown_remaining) = match self.state {
            State::Open { reason, until } => (Some(reason), until.saturating_duration_since(now)),
            State::Closed | State::HalfOpen { .. } => (None, Duration::ZERO),
        };
        BreakerView {
            circuit: self.circuit(),
            open_reason,
            consecutive_failures: self.consecutive_failures,
            successes: self.successes,
            failures: self.failures,
            requests: self.requests,
            last_error: self.last_error.clone(),
            last_failure_at: self.last_failure_at,
            last_success_at: self.last_success_at,
            cooldown_remaining,
            has_data: self.requests > 0,
            from_cluster: self.from_cluster,
        }
    }

    /// Closed: every routed attempt is let through, and nothing changes when one is.
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    fn circuit(&self) -> Circuit {
        match self.state {
            State::Closed => Circuit::Closed,
            State::Open { .. } => Circuit::Open,
            State::HalfOpen { .. } => Circuit::HalfOpen,
        }
    }

    fn probe_grant(&self) -> Grant {
        Grant { explicit: false, probe_epoch: Some(self.epoch) }
    }

    /// Updates every counter with a non-neutral outcome, whatever the state: the totals
    /// and `last_*` are history, and the run and window only matter while Closed and are
    /// cleared whenever it closes again.
    fn count(
        &mut self,
        counted: Counted,
        note: Option<&str>,
        now: Instant,
        wall: SystemTime,
        settings: &BreakerSettings,
    ) {
        let now_ms = self.window.millis(now);
        self.window.prune(now_ms, settings.error_rate_window);
        self.window.push(now_ms, counted);
        match counted {
            Counted::Success => {
                self.successes += 1;
                self.last_success_at = Some(wall);
                self.consecutive_failures = 0;
                self.consecutive_broken = 0;
            }
            Counted::Broken | Counted::RateLimited => {
                self.failures += 1;
                self.last_failure_at = Some(wall);
                self.consecutive_failures = self.consecutive_failures.saturating_add(1);
                if counted == Counted::Broken {
                    self.consecutive_broken = self.consecutive_broken.saturating_add(1);
                }
                // A failure must never leave the previous error on display.
                let default =
                    if counted == Counted::Broken { "upstream failure" } else { "upstream rate limited (429)" };
                self.last_error = Some(note.unwrap_or(default).to_owned());
            }
        }
    }

    /// Closed: do the two trip paths of SPEC §5 fire on this failure?
    fn check_trip(
        &mut self,
        counted: Counted,
        retry_after: Option<Duration>,
        now: Instant,
        settings: &BreakerSettings,
    ) -> Option<Transition> {
        let by_run = self.consecutive_failures >= settings.failure_threshold;
        let total = self.window.total();
        let by_rate = total >= u64::from(settings.min_requests)
            && self.window.failures as f64 / total as f64 >= settings.error_rate_threshold;
        if !by_run && !by_rate {
            return None;
        }

        // RateLimited only if every failure that counted toward the trip was a 429: a
        // broken endpoint must never get the short rate-limit cooldown just because its
        // last failure happened to be a 429 (SPEC §5). When both paths fire, both sets
        // of failures counted.
        let run_all_429 = self.consecutive_broken == 0;
        let window_all_429 = self.window.failures == self.window.rate_limited;
        let all_429 = (!by_run || run_all_429) && (!by_rate || window_all_429);
        let reason = if all_429 { OpenReason::RateLimited } else { OpenReason::Broken };
        debug_assert!(!all_429 || counted == Counted::RateLimited, "the tripping failure is in every counted set");

        // Both paths firing is reported as the consecutive run: it is the simpler story
        // for a log reader, and the reason above already accounts for both.
        let cause = if by_run {
            TransitionCause::ConsecutiveFailures { count: self.consecutive_failures }
        } else {
            TransitionCause::ErrorRate { failures: saturate_u32(self.window.failures), total: saturate_u32(total) }
        };
        Some(self.open(Circuit::Closed, reason, cause, retry_after, now, settings))
    }

    /// Enters Open. The cooldown is fixed here, from the tripping request's settings
    /// (SPEC §5), so later hot updates or other protocols' outcomes cannot move it.
    fn open(
        &mut self,
        from: Circuit,
        reason: OpenReason,
        cause: TransitionCause,
        retry_after: Option<Duration>,
        now: Instant,
        settings: &BreakerSettings,
    ) -> Transition {
        let cooldown = match reason {
            OpenReason::Broken => settings.timeout,
            // The cap guards against a hostile or broken upstream locking the endpoint
            // out with a huge Retry-After (SPEC §5).
            OpenReason::RateLimited => {
                retry_after.unwrap_or(settings.rate_limit_timeout).min(settings.max_rate_limit_timeout)
            }
        };
        self.state = State::Open { reason, until: add_saturating(now, cooldown) };
        self.epoch += 1;
        self.from_cluster = false;
        Transition { from, to: Circuit::Open, reason: Some(reason), cause, cooldown: Some(cooldown) }
    }

    /// HalfOpen → Closed: "all counters reset" (SPEC §5), so the endpoint starts over
    /// instead of being one failure from tripping again.
    fn close(&mut self, successes: u32) -> Transition {
        self.state = State::Closed;
        self.epoch += 1;
        self.clear_counters();
        Transition {
            from: Circuit::HalfOpen,
            to: Circuit::Closed,
            reason: None,
            cause: TransitionCause::ProbesSucceeded { count: successes },
            cooldown: None,
        }
    }

    fn clear_counters(&mut self) {
        self.from_cluster = false;
        self.consecutive_failures = 0;
        self.consecutive_broken = 0;
        self.window.clear();
    }

    #[cfg(test)]
    fn bucket_count(&self) -> usize {
        self.window.buckets.len()
    }
}

fn reason_of(counted: Counted) -> OpenReason {
    if counted == Counted::RateLimited { OpenReason::RateLimited } else { OpenReason::Broken }
}

fn saturate_u32(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// `now + d` without the panic of `Instant + Duration` on overflow; only reachable with
/// settings outside the valid ranges, where "as far as representable" is the intent.
fn add_saturating(now: Instant, mut d: Duration) -> Instant {
    loop {
        if let Some(t) = now.checked_add(d) {
            return t;
        }
        d /= 2;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    const S: Outcome = Outcome::Success;
    const B: Outcome = Outcome::Broken;
    const N: Outcome = Outcome::Neutral;
    const R: Outcome = Outcome::RateLimited { retry_after: None };

    fn rl(retry_after: Duration) -> Outcome {
        Outcome::RateLimited { retry_after: Some(retry_after) }
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn openai() -> BreakerSettings {
        BreakerSettings::openai_defaults()
    }

    fn claude() -> BreakerSettings {
        BreakerSettings::claude_defaults()
    }

    /// openai defaults with some fields changed.
    fn with(change: impl FnOnce(&mut BreakerSettings)) -> BreakerSettings {
        let mut s = openai();
        change(&mut s);
        s
    }

    /// openai defaults with the consecutive path out of reach, to isolate the error rate.
    fn rate_only(change: impl FnOnce(&mut BreakerSettings)) -> BreakerSettings {
        with(|s| {
            s.failure_threshold = 20;
            change(s);
        })
    }

    fn wall(ms: u64) -> SystemTime {
        UNIX_EPOCH + secs(1_764_000_000) + Duration::from_millis(ms)
    }

    fn outcome(c: char) -> Outcome {
        match c {
            'S' => S,
            'B' => B,
            'R' => R,
            'N' => N,
            other => panic!("unknown outcome {other:?}"),
        }
    }

    fn opened(reason: OpenReason, cause: TransitionCause, cooldown: Duration) -> Transition {
        Transition { from: Circuit::Closed, to: Circuit::Open, reason: Some(reason), cause, cooldown: Some(cooldown) }
    }

    fn reopened(reason: OpenReason, cooldown: Duration) -> Transition {
        Transition {
            from: Circuit::HalfOpen,
            to: Circuit::Open,
            reason: Some(reason),
            cause: TransitionCause::ProbeFailed,
            cooldown: Some(cooldown),
        }
    }

    const TO_HALF_OPEN: Transition = Transition {
        from: Circuit::Open,
        to: Circuit::HalfOpen,
        reason: None,
        cause: TransitionCause::CooldownElapsed,
        cooldown: None,
    };

    fn closed_by_probes(count: u32) -> Transition {
        Transition {
            from: Circuit::HalfOpen,
            to: Circuit::Closed,
            reason: None,
            cause: TransitionCause::ProbesSucceeded { count },
            cooldown: None,
        }
    }

    /// A breaker plus a fixed time origin; times are given in milliseconds after it.
    struct H {
        b: Breaker,
        t0: Instant,
    }

    impl H {
        fn new() -> Self {
            Self { b: Breaker::new(), t0: Instant::now() }
        }

        fn at(&self, ms: u64) -> Instant {
            self.t0 + Duration::from_millis(ms)
        }

        fn try_acquire(&mut self, ms: u64) -> (Result<Grant, Denied>, Option<Transition>) {
            let now = self.at(ms);
            self.b.try_acquire(now, false)
        }

        /// A routed (non-explicit) grant that must not cause a transition.
        fn acquire(&mut self, ms: u64) -> Grant {
            let (grant, transition) = self.try_acquire(ms);
            assert_eq!(transition, None, "unexpected transition at {ms} ms");
            grant.expect("granted")
        }

        fn acquire_explicit(&mut self, ms: u64) -> Grant {
            let now = self.at(ms);
            let (grant, transition) = self.b.try_acquire(now, true);
            assert_eq!(transition, None, "explicit grants never transition");
            let grant = grant.expect("explicit is always granted");
            assert!(grant.is_explicit() && !grant.is_probe());
            grant
        }

        /// Open and cooled: the next routed acquire enters HalfOpen and gets the probe.
        fn enter_half_open(&mut self, ms: u64) -> Grant {
            let (grant, transition) = self.try_acquire(ms);
            assert_eq!(transition, Some(TO_HALF_OPEN));
            let grant = grant.expect("probe granted");
            assert!(grant.is_probe() && !grant.is_explicit());
            grant
        }

        fn record(&mut self, grant: Grant, ms: u64, outcome: Outcome, s: &BreakerSettings) -> Option<Transition> {
            let now = self.at(ms);
            self.b.record(grant, outcome, None, now, wall(ms), s)
        }

        fn hit(&mut self, ms: u64, outcome: Outcome, s: &BreakerSettings) -> Option<Transition> {
            let grant = self.acquire(ms);
            self.record(grant, ms, outcome, s)
        }

        fn hit_explicit(&mut self, ms: u64, outcome: Outcome, s: &BreakerSettings) -> Option<Transition> {
            let grant = self.acquire_explicit(ms);
            self.record(grant, ms, outcome, s)
        }

        /// Records `seq` (S success, B broken, R 429 without Retry-After, N neutral)
        /// at `ms`; only the last outcome may cause a transition, which is returned.
        fn feed(&mut self, ms: u64, seq: &str, s: &BreakerSettings) -> Option<Transition> {
            let mut last = None;
            for (i, c) in seq.chars().enumerate() {
                assert_eq!(last, None, "{seq:?} transitioned early, before outcome {i}");
                last = self.hit(ms, outcome(c), s);
            }
            last
        }

        fn view(&self, ms: u64) -> BreakerView {
            self.b.view(self.at(ms))
        }

        fn circuit(&self) -> Circuit {
            self.view(0).circuit
        }

        /// Trips with four openai 5xx at `ms`: Open(Broken) for 60 s.
        fn trip_broken(&mut self, ms: u64) {
            let t = self.feed(ms, "BBBB", &openai());
            assert_eq!(t, Some(opened(OpenReason::Broken, run(4), secs(60))));
        }

        /// Trips with four openai 429s at `ms`: Open(RateLimited) for 5 s.
        fn trip_rate_limited(&mut self, ms: u64) {
            let t = self.feed(ms, "RRRR", &openai());
            assert_eq!(t, Some(opened(OpenReason::RateLimited, run(4), secs(5))));
        }

        fn window_is_consistent(&self) -> bool {
            let w = &self.b.window;
            let sum = |f: fn(&Bucket) -> u32| w.buckets.iter().map(|b| u64::from(f(b))).sum::<u64>();
            let sorted = w.buckets.iter().zip(w.buckets.iter().skip(1)).all(|(a, b)| a.ms < b.ms);
            sorted
                && sum(|b| b.successes) == w.successes
                && sum(|b| b.failures) == w.failures
                && sum(|b| b.rate_limited) == w.rate_limited
        }
    }

    // ---- settings ------------------------------------------------------------------

    #[test]
    fn defaults_are_seed_000_numbers() {
        let cases = [(claude(), 8, 3, 90, 0.7, 15), (openai(), 4, 2, 60, 0.6, 10)];
        for (s, failure, success, timeout, rate, min) in cases {
            assert_eq!(s.failure_threshold, failure);
            assert_eq!(s.success_threshold, success);
            assert_eq!(s.timeout, secs(timeout));
            assert_eq!(s.error_rate_threshold, rate);
            assert_eq!(s.min_requests, min);
            assert_eq!(s.error_rate_window, secs(60));
            assert_eq!(s.rate_limit_timeout, secs(5));
            assert_eq!(s.max_rate_limit_timeout, secs(60));
        }
    }

    #[test]
    fn new_breaker_is_closed_without_data() {
        let h = H::new();
        assert_eq!(h.b.routable(h.at(0)), Ok(()));
        assert_eq!(
            h.view(0),
            BreakerView {
                circuit: Circuit::Closed,
                open_reason: None,
                consecutive_failures: 0,
                successes: 0,
                failures: 0,
                requests: 0,
                last_error: None,
                last_failure_at: None,
                last_success_at: None,
                cooldown_remaining: Duration::ZERO,
                has_data: false,
                from_cluster: false,
            }
        );
        assert_eq!(Breaker::default().view(h.at(0)), h.view(0));
    }

    // ---- Closed -> Open ------------------------------------------------------------

    fn run(count: u32) -> TransitionCause {
        TransitionCause::ConsecutiveFailures { count }
    }

    fn rate(failures: u32, total: u32) -> TransitionCause {
        TransitionCause::ErrorRate { failures, total }
    }

    type Expect = Option<(OpenReason, TransitionCause, Duration)>;

    fn check_trips(cases: &[(BreakerSettings, &str, Expect)]) {
        for (settings, seq, expect) in cases {
            let mut h = H::new();
            let got = h.feed(0, seq, settings);
            let want = expect.map(|(reason, cause, cooldown)| opened(reason, cause, cooldown));
            assert_eq!(got, want, "sequence {seq:?} with {settings:?}");
            let circuit = if want.is_some() { Circuit::Open } else { Circuit::Closed };
            assert_eq!(h.circuit(), circuit, "sequence {seq:?}");
        }
    }

    #[test]
    #[rustfmt::skip]
    fn consecutive_failures_trip() {
        use OpenReason::{Broken, RateLimited};
        check_trips(&[
            (openai(), "BBB", None),
            (openai(), "BBBB", Some((Broken, run(4), secs(60)))),
            (claude(), "BBBBBBB", None),
            (claude(), "BBBBBBBB", Some((Broken, run(8), secs(90)))),
            (with(|s| s.failure_threshold = 1), "B", Some((Broken, run(1), secs(60)))),
            // A success resets the run.
            (openai(), "BBBSBBB", None),
            (openai(), "BBBSBBBB", Some((Broken, run(4), secs(60)))),
            // A neutral outcome neither counts nor breaks the run.
            (openai(), "BBBNB", Some((Broken, run(4), secs(60)))),
            (openai(), "NNNNNNNNNNNN", None),
            // The reason comes from the whole run, not from its last failure.
            (openai(), "RRRR", Some((RateLimited, run(4), secs(5)))),
            (openai(), "BRRR", Some((Broken, run(4), secs(60)))),
            (openai(), "RRBR", Some((Broken, run(4), secs(60)))),
            (openai(), "RRRB", Some((Broken, run(4), secs(60)))),
            // A 5xx before a success is not part of the run.
            (openai(), "BSRRRR", Some((RateLimited, run(4), secs(5)))),
        ]);
    }

    #[test]
    #[rustfmt::skip]
    fn error_rate_trips() {
        use OpenReason::{Broken, RateLimited};
        let claude_rate_only = BreakerSettings { failure_threshold: 20, ..claude() };
        check_trips(&[
            // openai: min_requests 10, threshold 0.6 — exactly 0.6 trips (>=).
            (rate_only(|_| {}), "SSSSBBBBBB", Some((Broken, rate(6, 10), secs(60)))),
            (rate_only(|_| {}), "SSSSSBBBBB", None),
            // Below min_requests the rate does not count, even at 100 %.
            (rate_only(|_| {}), "BBBBBBBBB", None),
            (rate_only(|_| {}), "BBBBBBBBBB", Some((Broken, rate(10, 10), secs(60)))),
            // Neutral outcomes are not in the window: 9 counted outcomes.
            (rate_only(|_| {}), "NNNNNNNNNNSSSBBBBBB", None),
            // The reason comes from every failure in the window.
            (rate_only(|_| {}), "SSSSRRRRRR", Some((RateLimited, rate(6, 10), secs(5)))),
            (rate_only(|_| {}), "SSSSRRBRRR", Some((Broken, rate(6, 10), secs(60)))),
            (rate_only(|_| {}), "SSSSBRRRRR", Some((Broken, rate(6, 10), secs(60)))),
            // Exact boundary at 0.7.
            (rate_only(|s| s.error_rate_threshold = 0.7), "SSSBBBBBBB", Some((Broken, rate(7, 10), secs(60)))),
            (rate_only(|s| s.error_rate_threshold = 0.7), "SSSSBBBBBB", None),
            // claude numbers: 15 outcomes, 0.7, 90 s.
            (claude_rate_only.clone(), "SSSSBBBBBBBBBBB", Some((Broken, rate(11, 15), secs(90)))),
            (claude_rate_only.clone(), "SSSSSBBBBBBBBBB", None),
            (claude_rate_only, "BBBBBBBBBBBBBB", None),
            // Threshold 1.0 needs every outcome to fail; 0.0 trips on the first failure
            // once min_requests is reached (successes alone never trip).
            (rate_only(|s| s.error_rate_threshold = 1.0), "SBBBBBBBBBB", None),
            (rate_only(|s| s.error_rate_threshold = 1.0), "BBBBBBBBBB", Some((Broken, rate(10, 10), secs(60)))),
            (rate_only(|s| s.error_rate_threshold = 0.0), "SSSSSSSSSSSSB", Some((Broken, rate(1, 13), secs(60)))),
            (rate_only(|s| s.min_requests = 1), "B", Some((Broken, rate(1, 1), secs(60)))),
        ]);
    }

    #[test]
    #[rustfmt::skip]
    fn both_paths_firing_on_one_outcome_count_both_sets() {
        use OpenReason::{Broken, RateLimited};
        // failure_threshold 3; error rate 0.55 over >= 7 outcomes. In "BSSSRRR" the run
        // RRR is all 429s, while the window also holds the 5xx.
        let both = with(|s| {
            s.failure_threshold = 3;
            s.min_requests = 7;
            s.error_rate_threshold = 0.55;
        });
        let run_only = BreakerSettings { min_requests: 100, ..both.clone() };
        let rate_path = BreakerSettings { failure_threshold: 20, ..both.clone() };
        check_trips(&[
            (both.clone(), "BSSSRRR", Some((Broken, run(3), secs(60)))),
            (run_only, "BSSSRRR", Some((RateLimited, run(3), secs(5)))),
            (rate_path, "BSSSRRR", Some((Broken, rate(4, 7), secs(60)))),
            (both, "SSSSRRR", Some((RateLimited, run(3), secs(5)))),
        ]);
    }

    #[test]
    fn run_longer_than_window_still_counts_its_5xx() {
        // Window 1 s; the run B..RRR spans 2 s, so the window holds only 429s while the
        // run still holds the 5xx.
        let both = with(|s| {
            s.failure_threshold = 4;
            s.min_requests = 3;
            s.error_rate_window = secs(1);
        });
        let rate_path = BreakerSettings { failure_threshold: 20, ..both.clone() };
        let cases = [
            (both, opened(OpenReason::Broken, run(4), secs(60))),
            (rate_path, opened(OpenReason::RateLimited, rate(3, 3), secs(5))),
        ];
        for (settings, want) in cases {
            let mut h = H::new();
            assert_eq!(h.hit(0, B, &settings), None);
            assert_eq!(h.feed(2000, "RRR", &settings), Some(want));
        }
    }

    #[test]
    fn per_protocol_thresholds_worked_example() {
        // SPEC §5: 5 failures from openai requests (threshold 4) — already Open.
        let mut h = H::new();
        assert!(h.feed(0, "BBBB", &openai()).is_some());
        assert_eq!(
            h.b.try_acquire(h.at(0), false).0.err(),
            Some(Denied::Open { reason: OpenReason::Broken, until: h.at(60_000) })
        );

        // 5 failures from claude requests (threshold 8) stay Closed; a 6th from an openai
        // request trips (6 >= 4) with the openai 60 s cooldown.
        let mut h = H::new();
        assert_eq!(h.feed(0, "BBBBB", &claude()), None);
        assert_eq!(h.circuit(), Circuit::Closed);
        assert_eq!(h.hit(1, B, &openai()), Some(opened(OpenReason::Broken, run(6), secs(60))));
        assert_eq!(h.b.routable(h.at(60_000)), Err(Denied::Open { reason: OpenReason::Broken, until: h.at(60_001) }));
        assert_eq!(h.b.routable(h.at(60_001)), Ok(()));
    }

    #[test]
    #[rustfmt::skip]
    fn rate_limited_cooldown_from_retry_after_capped() {
        let ms = Duration::from_millis;
        let last = |retry_after| [None, None, None, Some(retry_after)];
        // (Retry-After of the four 429s, settings, expected cooldown)
        let cases: Vec<([Option<Duration>; 4], BreakerSettings, Duration)> = vec![
            ([None; 4], openai(), secs(5)),
            (last(secs(10)), openai(), secs(10)),
            (last(ms(500)), openai(), ms(500)),
            (last(secs(0)), openai(), secs(0)),
            (last(secs(60)), openai(), secs(60)),
            (last(secs(61)), openai(), secs(60)),
            (last(Duration::MAX), openai(), secs(60)),
            // Only the tripping 429's Retry-After counts.
            ([Some(secs(30)), Some(secs(30)), Some(secs(30)), None], openai(), secs(5)),
            // The settings of the tripping request decide, including the cap.
            ([None; 4], with(|s| s.rate_limit_timeout = secs(7)), secs(7)),
            ([None; 4], with(|s| s.rate_limit_timeout = secs(120)), secs(60)),
            (last(secs(200)), with(|s| s.max_rate_limit_timeout = secs(300)), secs(200)),
            (last(secs(200)), with(|s| s.max_rate_limit_timeout = secs(0)), secs(0)),
        ];
        for (retry_afters, settings, cooldown) in cases {
            let mut h = H::new();
            let mut last = None;
            for retry_after in retry_afters {
                assert_eq!(last, None);
                last = h.hit(1000, Outcome::RateLimited { retry_after }, &settings);
            }
            let want = opened(OpenReason::RateLimited, run(4), cooldown);
            assert_eq!(last, Some(want), "{retry_afters:?} with {settings:?}");
            let until = h.at(1000) + cooldown;
            if !cooldown.is_zero() {
                let before = until - Duration::from_nanos(1);
                let denied = Denied::Open { reason: OpenReason::RateLimited, until };
                assert_eq!(h.b.routable(before), Err(denied));
            }
            assert_eq!(h.b.routable(until), Ok(()));
        }
    }

    #[test]
    fn huge_cooldowns_do_not_overflow() {
        let settings = with(|s| {
            s.timeout = Duration::MAX;
            s.max_rate_limit_timeout = Duration::MAX;
        });
        for last in [B, rl(Duration::MAX)] {
            let mut h = H::new();
            assert_eq!(h.feed(0, "BBB", &settings), None);
            let t = h.hit(0, last, &settings).expect("tripped");
            assert_eq!(t.cooldown, Some(Duration::MAX));
            assert!(h.b.routable(h.at(1_000_000_000)).is_err());
        }
    }

    // ---- sliding window --------------------------------------------------------------

    #[test]
    fn window_slides_old_outcomes_out() {
        let settings = rate_only(|_| {});
        // (time of the 10th failure, trips?) — nine failures at 0 ms; the window keeps an
        // outcome while its age is at most the window length.
        for (ms, trips) in [(59_999, true), (60_000, true), (60_001, false), (600_000, false)] {
            let mut h = H::new();
            assert_eq!(h.feed(0, "BBBBBBBBB", &settings), None);
            let t = h.hit(ms, B, &settings);
            let want = opened(OpenReason::Broken, rate(10, 10), secs(60));
            assert_eq!(t, trips.then_some(want), "10th failure at {ms} ms");
        }
    }

    #[test]
    fn old_successes_slide_out_too() {
        let settings = rate_only(|_| {});
        let mut h = H::new();
        assert_eq!(h.feed(0, "SSSSSSSSSS", &settings), None);
        assert_eq!(h.feed(30_000, "BBBBBB", &settings), None); // 6 / 16
        assert_eq!(h.feed(61_000, "BBB", &settings), None); // successes gone: 9 outcomes < 10
        assert_eq!(h.hit(61_000, B, &settings), Some(opened(OpenReason::Broken, rate(10, 10), secs(60))));
    }

    #[test]
    fn window_memory_is_bounded() {
        let settings = with(|s| s.error_rate_window = secs(60));
        let mut h = H::new();
        let mut max_buckets = 0;
        for ms in 0..1_000_000 {
            assert_eq!(h.hit(ms, S, &settings), None);
            max_buckets = max_buckets.max(h.b.bucket_count());
        }
        assert_eq!(max_buckets, 60_001);
        assert!(h.window_is_consistent());
        assert_eq!(h.b.window.total(), 60_001);

        // A burst within one millisecond is one bucket.
        let mut h = H::new();
        for _ in 0..100_000 {
            assert_eq!(h.hit(5, S, &settings), None);
        }
        assert_eq!(h.b.bucket_count(), 1);
        assert_eq!(h.b.window.total(), 100_000);
        assert!(h.window_is_consistent());
    }

    #[test]
    fn out_of_order_times_fold_into_the_newest_bucket() {
        let settings = rate_only(|_| {});
        let mut h = H::new();
        assert_eq!(h.hit(0, S, &settings), None);
        let late = h.acquire(400);
        assert_eq!(h.hit(1000, S, &settings), None);
        // Read before the 1000 ms outcome, recorded after it.
        assert_eq!(h.record(late, 400, B, &settings), None);
        assert_eq!(h.b.bucket_count(), 2);
        assert!(h.window_is_consistent());
        assert_eq!((h.b.window.successes, h.b.window.failures), (2, 1));
        // Even a time before the window's origin is fine.
        let mut h = H::new();
        assert_eq!(h.hit(1000, S, &settings), None);
        assert_eq!(h.hit(0, S, &settings), None);
        assert_eq!(h.b.bucket_count(), 1);
    }

    // ---- hot update ------------------------------------------------------------------

    #[test]
    fn hot_update_applies_to_the_next_outcome_without_reset() {
        // Lower consecutive threshold.
        let mut h = H::new();
        assert_eq!(h.feed(0, "BBB", &claude()), None);
        let lowered = BreakerSettings { failure_threshold: 3, ..claude() };
        assert_eq!(h.hit(0, B, &lowered), Some(opened(OpenReason::Broken, run(4), secs(90))));

        // Lower min_requests.
        let mut h = H::new();
        assert_eq!(h.feed(0, "BBBBB", &rate_only(|_| {})), None);
        assert_eq!(
            h.hit(0, B, &rate_only(|s| s.min_requests = 6)),
            Some(opened(OpenReason::Broken, rate(6, 6), secs(60)))
        );

        // Shorter window: pruned at once with the new length.
        let mut h = H::new();
        assert_eq!(h.feed(0, "BBBBBBBBB", &rate_only(|_| {})), None);
        let mut kept = H { b: h.b.clone(), t0: h.t0 };
        assert!(kept.hit(5_000, B, &rate_only(|_| {})).is_some());
        assert_eq!(h.hit(5_000, B, &rate_only(|s| s.error_rate_window = secs(1))), None);
        assert_eq!(h.b.bucket_count(), 1);

        // success_threshold read when recording.
        let mut h = H::new();
        h.trip_broken(0);
        let probe = h.enter_half_open(60_000);
        assert_eq!(h.record(probe, 60_000, S, &claude()), None); // 1 of 3
        let probe = h.acquire(60_001);
        assert_eq!(h.record(probe, 60_001, S, &openai()), Some(closed_by_probes(2)));
    }

    #[test]
    fn cooldown_is_fixed_when_it_trips() {
        let mut h = H::new();
        let in_flight = h.acquire(0);
        h.trip_broken(0);
        // A later outcome under other settings moves nothing.
        let longer = with(|s| s.timeout = secs(300));
        assert_eq!(h.record(in_flight, 1_000, B, &longer), None);
        assert_eq!(h.b.routable(h.at(59_999)), Err(Denied::Open { reason: OpenReason::Broken, until: h.at(60_000) }));
        assert_eq!(h.b.routable(h.at(60_000)), Ok(()));
    }

    // ---- Open -> HalfOpen --------------------------------------------------------------

    #[test]
    fn half_open_is_entered_lazily_by_try_acquire_only() {
        let mut h = H::new();
        h.trip_broken(1_000);
        let until = h.at(61_000);
        let denied = Denied::Open { reason: OpenReason::Broken, until };
        assert_eq!(h.b.routable(h.at(60_999)), Err(denied));
        let (grant, transition) = h.try_acquire(60_999);
        assert_eq!((grant.err(), transition), (Some(denied), None));

        // Cooled: routable, but routable() itself changes nothing.
        assert_eq!(h.b.routable(h.at(61_000)), Ok(()));
        assert_eq!(h.b.routable(h.at(90_000)), Ok(()));
        let view = h.view(90_000);
        assert_eq!(
            (view.circuit, view.open_reason, view.cooldown_remaining),
            (Circuit::Open, Some(OpenReason::Broken), Duration::ZERO)
        );

        let _probe = h.enter_half_open(61_000);
        let view = h.view(61_000);
        assert_eq!(
            (view.circuit, view.open_reason, view.cooldown_remaining),
            (Circuit::HalfOpen, None, Duration::ZERO)
        );
    }

    #[test]
    fn single_probe_permit() {
        let mut h = H::new();
        h.trip_rate_limited(0);
        let probe = h.enter_half_open(5_000);
        let busy = Denied::ProbeBusy { reason: OpenReason::RateLimited };
        let (grant, transition) = h.try_acquire(5_001);
        assert_eq!((grant.err(), transition), (Some(busy), None));
        // Step 4 of routing still keeps it: only Open-and-cooling is filtered there.
        assert_eq!(h.b.routable(h.at(5_001)), Ok(()));

        // A neutral outcome returns the permit and counts nothing.
        let before = h.view(5_002);
        assert_eq!(h.record(probe, 5_002, N, &openai()), None);
        let after = h.view(5_002);
        assert_eq!(after.circuit, Circuit::HalfOpen);
        assert_eq!(
            (after.successes, after.failures, after.consecutive_failures),
            (before.successes, before.failures, before.consecutive_failures)
        );
        assert_eq!(after.requests, before.requests + 1);

        // So does release(); the next request gets the probe.
        let probe = h.acquire(5_003);
        assert!(probe.is_probe());
        assert_eq!(h.try_acquire(5_003).0.err(), Some(busy));
        h.b.release(probe);
        let probe = h.acquire(5_004);
        assert!(probe.is_probe());
        assert_eq!(h.try_acquire(5_004).0.err(), Some(busy));
    }

    #[test]
    fn stale_probe_grant_cannot_release_a_newer_permit() {
        // Across a failed probe period.
        let mut h = H::new();
        h.trip_broken(0);
        let stale = h.enter_half_open(60_000);
        assert_eq!(h.hit_explicit(60_001, B, &openai()), Some(reopened(OpenReason::Broken, secs(60))));
        let current = h.enter_half_open(120_001);
        assert_eq!(h.record(stale, 120_002, N, &openai()), None);
        let busy = Some(Denied::ProbeBusy { reason: OpenReason::Broken });
        assert_eq!(h.try_acquire(120_003).0.err(), busy);
        h.b.release(current);
        assert!(h.acquire(120_004).is_probe());

        // Across a reset.
        let mut h = H::new();
        h.trip_broken(0);
        let stale = h.enter_half_open(60_000);
        assert!(h.b.reset().is_some());
        h.trip_broken(60_001);
        let _current = h.enter_half_open(120_001);
        h.b.release(stale);
        assert_eq!(h.try_acquire(120_002).0.err(), busy);

        // A grant taken while Closed holds no permit to give back.
        let mut h = H::new();
        let closed_grant = h.acquire(0);
        assert!(!closed_grant.is_probe());
        h.trip_broken(0);
        let _current = h.enter_half_open(60_000);
        assert_eq!(h.record(closed_grant, 60_001, N, &openai()), None);
        assert_eq!(h.try_acquire(60_002).0.err(), busy);
    }

    // ---- HalfOpen -> Closed / Open -------------------------------------------------------

    #[test]
    fn success_threshold_probes_close() {
        for settings in [openai(), claude(), with(|s| s.success_threshold = 1)] {
            let mut h = H::new();
            h.trip_broken(0);
            let mut probe = h.enter_half_open(60_000);
            for i in 1..settings.success_threshold {
                assert_eq!(h.record(probe, 60_000, S, &settings), None, "success {i}");
                // A neutral outcome between probes keeps the count.
                assert_eq!(h.hit(60_000, N, &settings), None);
                probe = h.acquire(60_000);
            }
            assert_eq!(h.record(probe, 60_000, S, &settings), Some(closed_by_probes(settings.success_threshold)));
            let view = h.view(60_000);
            assert_eq!((view.circuit, view.open_reason, view.consecutive_failures), (Circuit::Closed, None, 0));
            // Closed again: a fresh run is needed to trip.
            assert_eq!(h.feed(60_001, "BBB", &openai()), None);
            assert!(h.hit(60_001, B, &openai()).is_some());
        }
    }

    #[test]
    fn closing_clears_the_window() {
        let settings = rate_only(|_| {});
        let mut h = H::new();
        assert!(h.feed(0, "BBBBBBBBBB", &settings).is_some());
        let probe = h.enter_half_open(60_000);
        assert_eq!(h.record(probe, 60_000, S, &settings), None);
        let probe = h.acquire(60_000);
        assert_eq!(h.record(probe, 60_000, S, &settings), Some(closed_by_probes(2)));
        // Had the ten failures stayed in the window, 10 / 12 would trip here.
        assert_eq!(h.hit(60_000, B, &settings), None);
    }

    #[test]
    #[rustfmt::skip]
    fn failed_probe_reopens_with_that_failures_reason_and_cooldown() {
        use OpenReason::{Broken, RateLimited};
        // (how it first opened, probe outcome, new reason, new cooldown)
        let cases = [
            (Broken, B, Broken, secs(60)),
            (Broken, R, RateLimited, secs(5)),
            (Broken, rl(secs(2)), RateLimited, secs(2)),
            (RateLimited, B, Broken, secs(60)),
            (RateLimited, R, RateLimited, secs(5)),
            (RateLimited, rl(secs(120)), RateLimited, secs(60)),
            (RateLimited, rl(secs(0)), RateLimited, secs(0)),
        ];
        for (first, probe_outcome, reason, cooldown) in cases {
            let mut h = H::new();
            let cooled = match first {
                Broken => { h.trip_broken(0); 60_000 }
                RateLimited => { h.trip_rate_limited(0); 5_000 }
            };
            let probe = h.enter_half_open(cooled);
            let at = cooled + 10;
            let got = h.record(probe, at, probe_outcome.clone(), &openai());
            assert_eq!(got, Some(reopened(reason, cooldown)), "{first:?} then {probe_outcome:?}");
            // The new cooldown runs from the failed probe.
            let until = h.at(at) + cooldown;
            assert_eq!(h.view(at).cooldown_remaining, cooldown);
            let denied = Denied::Open { reason, until };
            assert_eq!(h.b.routable(h.at(at)).err(), (!cooldown.is_zero()).then_some(denied));
            assert_eq!(h.b.routable(until), Ok(()));
            let _probe = h.enter_half_open(at + u64::try_from(cooldown.as_millis()).unwrap());
        }
    }

    #[test]
    fn failure_after_some_probe_successes_reopens_and_starts_over() {
        let mut h = H::new();
        h.trip_broken(0);
        let probe = h.enter_half_open(60_000);
        assert_eq!(h.record(probe, 60_000, S, &claude()), None);
        let probe = h.acquire(60_000);
        assert_eq!(h.record(probe, 60_000, S, &claude()), None);
        let probe = h.acquire(60_000);
        assert_eq!(h.record(probe, 60_000, B, &claude()), Some(reopened(OpenReason::Broken, secs(90))));
        // The two earlier successes do not carry over into the next half-open period.
        let probe = h.enter_half_open(150_000);
        assert_eq!(h.record(probe, 150_000, S, &claude()), None);
        let probe = h.acquire(150_000);
        assert_eq!(h.record(probe, 150_000, S, &claude()), None);
        let probe = h.acquire(150_000);
        assert_eq!(h.record(probe, 150_000, S, &claude()), Some(closed_by_probes(3)));
    }

    #[test]
    fn in_flight_outcomes_while_half_open_count_like_any_other() {
        // A request sent before the trip that finishes during HalfOpen still tells about
        // the endpoint: its success counts toward closing, its failure reopens.
        let mut h = H::new();
        let early = [h.acquire(0), h.acquire(0)];
        h.trip_broken(0);
        let probe = h.enter_half_open(60_000);
        let [a, b] = early;
        assert_eq!(h.record(a, 60_001, S, &openai()), None);
        assert_eq!(h.record(probe, 60_002, S, &openai()), Some(closed_by_probes(2)));
        assert_eq!(h.record(b, 60_003, S, &openai()), None);
        assert_eq!(h.circuit(), Circuit::Closed);

        let mut h = H::new();
        let early = h.acquire(0);
        h.trip_broken(0);
        let _probe = h.enter_half_open(60_000);
        assert_eq!(h.record(early, 60_001, R, &openai()), Some(reopened(OpenReason::RateLimited, secs(5))));
    }

    // ---- outcomes while Open ------------------------------------------------------------

    #[test]
    fn in_flight_outcomes_while_open_change_stats_not_state() {
        let mut h = H::new();
        let in_flight: Vec<Grant> = (0..4).map(|_| h.acquire(0)).collect();
        h.trip_broken(0);
        let denied = Some(Denied::Open { reason: OpenReason::Broken, until: h.at(60_000) });
        let outcomes = [S, B, rl(secs(1)), N];
        for (i, (grant, outcome)) in in_flight.into_iter().zip(outcomes).enumerate() {
            let ms = 10_000 * (i as u64 + 1);
            assert_eq!(h.record(grant, ms, outcome, &openai()), None);
            assert_eq!(h.b.routable(h.at(59_999)).err(), denied, "after outcome {i}");
            assert_eq!(h.b.routable(h.at(60_000)), Ok(()));
        }
        let view = h.view(50_000);
        assert_eq!((view.successes, view.failures, view.requests), (1, 6, 8));
        assert_eq!(view.last_success_at, Some(wall(10_000)));
        assert_eq!(view.last_failure_at, Some(wall(30_000)));
        assert_eq!(view.open_reason, Some(OpenReason::Broken));
        assert_eq!(view.consecutive_failures, 2);
        assert_eq!(view.cooldown_remaining, secs(10));
    }

    // ---- explicit endpoint ------------------------------------------------------------

    #[test]
    fn explicit_is_always_granted_and_never_half_opens() {
        let mut h = H::new();
        h.trip_broken(0);
        // Cooling and cooled alike: granted, no transition, still Open.
        for ms in [1, 60_000, 90_000] {
            let grant = h.acquire_explicit(ms);
            assert_eq!(h.circuit(), Circuit::Open);
            h.b.release(grant);
        }
        // The probe is still there for routed traffic.
        let _probe = h.enter_half_open(90_000);
        // And while the probe is taken, explicit requests still pass, without taking it.
        let explicit = h.acquire_explicit(90_001);
        let busy = Some(Denied::ProbeBusy { reason: OpenReason::Broken });
        assert_eq!(h.try_acquire(90_002).0.err(), busy);
        h.b.release(explicit);
        assert_eq!(h.try_acquire(90_003).0.err(), busy);
    }

    #[test]
    fn explicit_does_not_take_a_free_probe_permit() {
        let mut h = H::new();
        h.trip_broken(0);
        let probe = h.enter_half_open(60_000);
        assert_eq!(h.record(probe, 60_000, N, &openai()), None);
        let _explicit = h.acquire_explicit(60_001);
        assert!(h.acquire(60_002).is_probe());
    }

    #[test]
    fn explicit_outcomes_are_recorded() {
        // A failure counts toward tripping a Closed breaker.
        let mut h = H::new();
        assert_eq!(h.hit(0, B, &openai()), None);
        assert_eq!(h.hit_explicit(0, B, &openai()), None);
        assert_eq!(h.hit(0, B, &openai()), None);
        assert_eq!(h.hit_explicit(0, rl(secs(3)), &openai()), Some(opened(OpenReason::Broken, run(4), secs(60))));

        // A success resets the consecutive run.
        let mut h = H::new();
        assert_eq!(h.feed(0, "BBB", &openai()), None);
        assert_eq!(h.hit_explicit(0, S, &openai()), None);
        assert_eq!(h.view(0).consecutive_failures, 0);
        assert_eq!(h.feed(0, "BBB", &openai()), None);

        // A failure reopens a HalfOpen breaker.
        let mut h = H::new();
        h.trip_broken(0);
        let _probe = h.enter_half_open(60_000);
        assert_eq!(h.hit_explicit(60_001, R, &openai()), Some(reopened(OpenReason::RateLimited, secs(5))));

        // A success counts toward closing a HalfOpen breaker.
        let mut h = H::new();
        h.trip_broken(0);
        let probe = h.enter_half_open(60_000);
        assert_eq!(h.hit_explicit(60_001, S, &openai()), None);
        assert_eq!(h.record(probe, 60_002, S, &openai()), Some(closed_by_probes(2)));
    }

    #[test]
    fn explicit_outcomes_while_open() {
        let mut h = H::new();
        h.trip_broken(0);
        let denied = Some(Denied::Open { reason: OpenReason::Broken, until: h.at(60_000) });
        // A success leaves it Open (and resets the run).
        assert_eq!(h.hit_explicit(10_000, S, &openai()), None);
        assert_eq!(h.b.routable(h.at(59_999)).err(), denied);
        assert_eq!(h.view(10_000).consecutive_failures, 0);
        // A failure does not restart the cooldown, whatever its kind.
        assert_eq!(h.hit_explicit(20_000, B, &openai()), None);
        assert_eq!(h.hit_explicit(30_000, rl(secs(1)), &openai()), None);
        assert_eq!(h.b.routable(h.at(59_999)).err(), denied);
        assert_eq!(h.b.routable(h.at(60_000)), Ok(()));
        assert_eq!(h.view(30_000).consecutive_failures, 2);
        // Even past the cooldown it stays Open until a routed request probes it.
        assert_eq!(h.hit_explicit(70_000, S, &openai()), None);
        assert_eq!(h.circuit(), Circuit::Open);
    }

    // ---- cluster verdicts --------------------------------------------------------------

    fn learned(reason: OpenReason, from: Circuit, cooldown: Duration) -> Transition {
        Transition {
            from,
            to: Circuit::Open,
            reason: Some(reason),
            cause: TransitionCause::Cluster,
            cooldown: Some(cooldown),
        }
    }

    #[test]
    fn a_later_deadline_wins_and_an_earlier_one_never_shortens() {
        let mut h = H::new();
        let t = h.b.apply_open(OpenReason::Broken, h.at(30_000), h.at(0));
        assert_eq!(t, Some(learned(OpenReason::Broken, Circuit::Closed, secs(30))));
        let v = h.view(0);
        assert!(v.from_cluster && v.circuit == Circuit::Open);
        assert_eq!(v.cooldown_remaining, secs(30));
        // An earlier deadline (a node that saw the trip late, or a stale poll) changes nothing.
        assert_eq!(h.b.apply_open(OpenReason::RateLimited, h.at(10_000), h.at(1_000)), None);
        assert_eq!(h.view(1_000).cooldown_remaining, secs(29));
        assert_eq!(h.view(1_000).open_reason, Some(OpenReason::Broken));
        // A later one extends it, without another transition.
        assert_eq!(h.b.apply_open(OpenReason::Broken, h.at(90_000), h.at(2_000)), None);
        assert_eq!(h.view(2_000).cooldown_remaining, secs(88));
        // Nor does a local trip's deadline lose to an earlier verdict.
        let mut h = H::new();
        h.trip_broken(0);
        assert_eq!(h.b.apply_open(OpenReason::Broken, h.at(5_000), h.at(0)), None);
        assert_eq!(h.view(0).cooldown_remaining, secs(60));
        assert!(!h.view(0).from_cluster, "still this node's own verdict");
    }

    #[test]
    fn an_expired_verdict_is_not_applied() {
        let mut h = H::new();
        assert_eq!(h.b.apply_open(OpenReason::Broken, h.at(1_000), h.at(1_000)), None);
        assert_eq!(h.circuit(), Circuit::Closed);
    }

    #[test]
    fn a_verdict_takes_the_probe_of_this_node_away() {
        let mut h = H::new();
        h.trip_broken(0);
        let probe = h.enter_half_open(60_000);
        let t = h.b.apply_open(OpenReason::Broken, h.at(120_000), h.at(60_001));
        assert_eq!(t, Some(learned(OpenReason::Broken, Circuit::HalfOpen, secs(59) + Duration::from_millis(999))));
        // The probe's success cannot close what another node opened.
        assert_eq!(h.record(probe, 60_002, S, &openai()), None);
        assert_eq!(h.circuit(), Circuit::Open);
        // After the learned cooldown, it probes as usual and closes locally.
        let probe = h.enter_half_open(120_000);
        assert_eq!(h.record(probe, 120_001, S, &openai()), None);
        let probe = h.acquire(120_002);
        assert!(probe.is_probe());
        assert_eq!(h.record(probe, 120_003, S, &openai()), Some(closed_by_probes(2)));
        assert!(!h.view(120_003).from_cluster);
    }

    #[test]
    fn closed_elsewhere_closes_here_and_clears_the_counters() {
        let mut h = H::new();
        h.b.apply_open(OpenReason::RateLimited, h.at(5_000), h.at(0));
        let closed =
            |cause| Transition { from: Circuit::Open, to: Circuit::Closed, reason: None, cause, cooldown: None };
        assert_eq!(h.b.apply_closed(false), Some(closed(TransitionCause::Cluster)));
        assert!(!h.view(0).from_cluster);
        assert_eq!(h.b.apply_closed(false), None, "already closed: nothing to say");
        // A reset elsewhere clears this node's consecutive run too.
        assert_eq!(h.feed(1, "BB", &openai()), None);
        let t = h.b.apply_closed(true).unwrap();
        assert_eq!((t.from, t.cause), (Circuit::Closed, TransitionCause::ManualReset));
        assert_eq!(h.view(1).consecutive_failures, 0);
        assert_eq!(h.feed(2, "BBB", &openai()), None, "the run starts over: 3 of 4");
    }

    // ---- reset ------------------------------------------------------------------------

    #[test]
    fn reset_from_every_state() {
        let reset_from = |from| Transition {
            from,
            to: Circuit::Closed,
            reason: None,
            cause: TransitionCause::ManualReset,
            cooldown: None,
        };

        let mut h = H::new();
        assert_eq!(h.b.reset(), None); // fresh: nothing to do
        assert_eq!(h.feed(0, "BB", &openai()), None);
        assert_eq!(h.b.reset(), Some(reset_from(Circuit::Closed)));
        assert_eq!(h.view(0).consecutive_failures, 0);
        assert_eq!(h.b.reset(), None);

        let mut h = H::new();
        h.trip_broken(0);
        assert_eq!(h.b.reset(), Some(reset_from(Circuit::Open)));
        assert_eq!(h.b.routable(h.at(1)), Ok(()));
        assert!(!h.acquire(1).is_probe());

        let mut h = H::new();
        h.trip_rate_limited(0);
        let probe = h.enter_half_open(5_000);
        assert_eq!(h.b.reset(), Some(reset_from(Circuit::HalfOpen)));
        // The old probe's outcome is an ordinary Closed outcome now.
        assert_eq!(h.record(probe, 5_001, B, &openai()), None);
        assert_eq!(h.view(5_001).consecutive_failures, 1);
    }

    #[test]
    fn reset_clears_run_and_window_but_keeps_history() {
        let settings = rate_only(|s| s.failure_threshold = 6);
        let mut h = H::new();
        let grant = h.acquire(0);
        assert_eq!(h.b.record(grant, B, Some("boom"), h.at(0), wall(0), &settings), None);
        assert_eq!(h.feed(1, "BBBB", &settings), None);
        assert_eq!(h.hit(2, S, &settings), None);
        assert_eq!(h.feed(3, "BBB", &settings), None);
        let before = h.view(3);
        assert!(h.b.reset().is_some());
        let after = h.view(3);
        assert_eq!(after.consecutive_failures, 0);
        assert_eq!(
            (after.successes, after.failures, after.requests),
            (before.successes, before.failures, before.requests)
        );
        assert_eq!(
            (after.last_error.clone(), after.last_failure_at, after.last_success_at),
            (before.last_error, before.last_failure_at, before.last_success_at)
        );
        assert!(after.has_data);
        // Without the reset, 5 more failures would trip both paths (run 8 >= 6; 13 / 14).
        assert_eq!(h.feed(4, "BBBBB", &settings), None);
        assert!(h.hit(4, B, &settings).is_some());

        // Even a reset that reports nothing (Closed, no run) clears the window.
        let settings = rate_only(|_| {});
        let mut h = H::new();
        assert_eq!(h.feed(0, "BBBBBS", &settings), None);
        assert_eq!(h.b.reset(), None);
        assert_eq!(h.feed(0, "BBBB", &settings), None); // 9 / 10 without the reset
    }

    // ---- health view ------------------------------------------------------------------

    #[test]
    #[rustfmt::skip]
    fn view_tracks_notes_and_timestamps() {
        const KEY: &str = "upstream rejected the API key (401)";
        const RATE: &str = "upstream rate limited (429)";
        struct Step {
            ms: u64,
            outcome: Outcome,
            note: Option<&'static str>,
            last_error: Option<&'static str>,
            last_failure_ms: Option<u64>,
            last_success_ms: Option<u64>,
        }
        let step = |ms, outcome, note, last_error, last_failure_ms, last_success_ms| Step {
            ms, outcome, note, last_error, last_failure_ms, last_success_ms,
        };
        let steps = [
            step(1, N, None, None, None, None),
            step(2, N, Some(KEY), Some(KEY), None, None),
            step(3, S, None, Some(KEY), None, Some(3)),
            step(4, B, Some("HTTP 502 from upstream"), Some("HTTP 502 from upstream"), Some(4), Some(3)),
            step(5, B, None, Some("upstream failure"), Some(5), Some(3)),
            step(6, R, None, Some(RATE), Some(6), Some(3)),
            step(7, S, Some("ignored for successes"), Some(RATE), Some(6), Some(7)),
            step(8, N, None, Some(RATE), Some(6), Some(7)),
        ];
        let mut h = H::new();
        for (i, s) in steps.into_iter().enumerate() {
            let grant = h.acquire(s.ms);
            let now = h.at(s.ms);
            assert_eq!(h.b.record(grant, s.outcome, s.note, now, wall(s.ms), &openai()), None);
            let view = h.view(s.ms);
            assert_eq!(view.last_error.as_deref(), s.last_error, "step {i}");
            assert_eq!(view.last_failure_at, s.last_failure_ms.map(wall), "step {i}");
            assert_eq!(view.last_success_at, s.last_success_ms.map(wall), "step {i}");
            assert_eq!(view.requests, i as u64 + 1);
            assert!(view.has_data);
        }
        let view = h.view(8);
        assert_eq!((view.successes, view.failures, view.consecutive_failures), (2, 3, 0));
    }

    #[test]
    fn view_has_data_only_after_an_outcome() {
        let mut h = H::new();
        let grant = h.acquire(0);
        h.b.release(grant);
        assert!(!h.view(0).has_data);
        assert_eq!(h.hit(0, N, &openai()), None);
        assert!(h.view(0).has_data);
    }

    #[test]
    fn view_circuit_reason_and_cooldown() {
        let mut h = H::new();
        h.trip_rate_limited(1_000);
        // (time, circuit, open_reason, cooldown_remaining)
        let expect = [
            (1_000, Circuit::Open, Some(OpenReason::RateLimited), secs(5)),
            (3_500, Circuit::Open, Some(OpenReason::RateLimited), Duration::from_millis(2_500)),
            (6_000, Circuit::Open, Some(OpenReason::RateLimited), Duration::ZERO),
            (9_000, Circuit::Open, Some(OpenReason::RateLimited), Duration::ZERO),
        ];
        for (ms, circuit, reason, remaining) in expect {
            let view = h.view(ms);
            assert_eq!(
                (view.circuit, view.open_reason, view.cooldown_remaining),
                (circuit, reason, remaining),
                "at {ms} ms"
            );
        }
        let probe = h.enter_half_open(9_000);
        let view = h.view(9_000);
        assert_eq!(
            (view.circuit, view.open_reason, view.cooldown_remaining),
            (Circuit::HalfOpen, None, Duration::ZERO)
        );
        assert_eq!(h.record(probe, 9_000, S, &openai()), None);
        let probe = h.acquire(9_000);
        assert_eq!(h.record(probe, 9_000, S, &openai()), Some(closed_by_probes(2)));
        let view = h.view(9_000);
        assert_eq!((view.circuit, view.open_reason, view.cooldown_remaining), (Circuit::Closed, None, Duration::ZERO));
    }
}
