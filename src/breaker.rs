//! One circuit breaker per endpoint (SPEC §5). `state` is the pure state machine; this file is
//! the thin shell around it: a registry keyed by endpoint identity, short critical sections
//! (a `std::sync::Mutex`, never held across an `.await`), and the RAII `Permit` that guarantees
//! a half-open probe permit is returned however a request ends (success, failure, neutral,
//! cancellation or panic).
//!
//! Breakers live in memory and sit behind this narrow API. In a cluster the registry is given a
//! `Shared` (`crate::cluster`): what a breaker decides — opened until when, closed by its probes,
//! reset — is handed to it to publish, verdicts of other nodes come back through `apply_open` /
//! `apply_closed`, and a half-open probe is claimed cluster-wide before it is sent (`acquire`).
//! None of that blocks: publishing is queued for the cluster's background work, and only the
//! rare probe claim waits for an answer, within the cluster's short timeout.

pub mod retry_after;
pub mod state;

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;

pub use state::{Breaker, BreakerView, Circuit, Denied, Grant, OpenReason, Outcome, Transition, TransitionCause};

use crate::clock::Clock;
use crate::config::BreakerSettings;
use crate::endpoint::EndpointId;

/// Where breakers report their transitions (the events hub: logs, metrics, live events). The
/// breaker defines what it needs, so it depends on nothing above it.
pub trait TransitionSink: Send + Sync + 'static {
    fn transition(&self, endpoint: &str, transition: &Transition);
}

/// The cluster-wide part of the breakers, when there is one. Every method but `claim_probe` only
/// queues work and returns at once; `until_ms` is wall-clock unix milliseconds.
pub trait Shared: Send + Sync + 'static {
    /// This node opened the breaker (a trip, or a failed probe) until `until_ms`.
    fn opened(&self, endpoint: &str, reason: OpenReason, until_ms: i64);
    /// This node closed it (its probes succeeded), or an operator reset it (`reset`).
    fn closed(&self, endpoint: &str, reset: bool);
    /// A probe this node claimed succeeded; `threshold` successes across the cluster close it.
    fn probe_succeeded(&self, endpoint: &str, threshold: u32);
    /// A probe this node claimed ended without a verdict (neutral, cancelled): the claim goes back.
    fn probe_released(&self, endpoint: &str);
    /// Claim the one half-open probe of the cluster: `false` when another node holds it. Fails
    /// open: when the cluster cannot answer in time, the claim is granted (a local probe).
    fn claim_probe<'a>(&'a self, endpoint: &'a str) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>>;
}

/// A sink that drops every transition (tests of the breaker alone).
pub struct NoSink;

impl TransitionSink for NoSink {
    fn transition(&self, _: &str, _: &Transition) {}
}

/// The breaker of one endpoint.
pub struct BreakerCell {
    state: Mutex<Breaker>,
    /// Whether `state` is closed, written under its lock whenever the lock is let go. A closed
    /// breaker lets every routed attempt through without a change, so `routable` and
    /// `try_acquire` answer from this alone: the lock's cache line is written by every serving
    /// thread, and taking it twice per request showed in profiles under load (BENCHMARKS.md).
    closed: AtomicBool,
    registry: Arc<BreakerShared>,
}

/// The breaker's state under its lock; letting go of it brings `BreakerCell::closed` up to date.
struct Locked<'a> {
    state: MutexGuard<'a, Breaker>,
    closed: &'a AtomicBool,
}

impl std::ops::Deref for Locked<'_> {
    type Target = Breaker;
    fn deref(&self) -> &Breaker {
        &self.state
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Breaker {
        &mut self.state
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // Still under the lock (the guard is released after this), so the flag's writes are in
        // the order of the state's changes.
        self.closed.store(self.state.is_closed(), Ordering::Release);
    }
}

/// What every cell shares: the clock, where transitions are reported, and a wake-up for
/// requests waiting in the rate-limit backoff (a returned probe permit may let them in).
pub struct BreakerShared {
    clock: Arc<dyn Clock>,
    sink: Arc<dyn TransitionSink>,
    changed: Notify,
    shared: OnceLock<Arc<dyn Shared>>,
}

pub struct Breakers {
    shared: Arc<BreakerShared>,
    cells: Mutex<HashMap<EndpointId, Arc<BreakerCell>>>,
}

impl Breakers {
    pub fn new(clock: Arc<dyn Clock>, sink: Arc<dyn TransitionSink>) -> Self {
        Self {
            shared: Arc::new(BreakerShared { clock, sink, changed: Notify::new(), shared: OnceLock::new() }),
            cells: Mutex::new(HashMap::new()),
        }
    }

    /// The cell of an endpoint, created on first use. Called when the snapshot is rebuilt,
    /// never per request.
    pub fn cell(&self, id: EndpointId) -> Arc<BreakerCell> {
        let mut cells = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        cells
            .entry(id)
            .or_insert_with(|| {
                let state = Breaker::new();
                let closed = AtomicBool::new(state.is_closed());
                Arc::new(BreakerCell { state: Mutex::new(state), closed, registry: self.shared.clone() })
            })
            .clone()
    }

    /// Forget breakers of deleted endpoints.
    pub fn retain(&self, live: &[EndpointId]) {
        let mut cells = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        cells.retain(|id, _| live.contains(id));
    }

    /// Share the verdicts with a cluster (once, before serving).
    pub fn share(&self, shared: Arc<dyn Shared>) {
        let _ = self.shared.shared.set(shared);
    }

    /// Wakes when any breaker changes in a way that could admit a waiting request. Only ever
    /// `notify_waiters`: a `Notified` made before reading breaker state hears every change after
    /// it without being enabled (the attempt loop relies on it).
    pub fn changed(&self) -> &Notify {
        &self.shared.changed
    }
}

impl BreakerCell {
    fn lock(&self) -> Locked<'_> {
        Locked { state: self.state.lock().unwrap_or_else(|p| p.into_inner()), closed: &self.closed }
    }

    /// SPEC §2 step 4 (read-only, takes no permit).
    pub fn routable(&self) -> Result<(), Denied> {
        if self.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        let now = self.registry.clock.now();
        self.lock().routable(now)
    }

    /// Ask to send one attempt to this endpoint.
    /// `endpoint` is its name as records hold it (`snapshot::record_name`): a permit keeps it for
    /// the transition it may cause, without a copy of its own.
    pub fn try_acquire(self: &Arc<Self>, endpoint: Cow<'static, str>, explicit: bool) -> Result<Permit, Denied> {
        let (result, transition) = if !explicit && self.closed.load(Ordering::Acquire) {
            (Ok(Grant::of_closed()), None)
        } else {
            let now = self.registry.clock.now();
            self.lock().try_acquire(now, explicit)
        };
        if let Some(t) = transition {
            self.registry.sink.transition(&endpoint, &t);
        }
        result.map(|grant| Permit { cell: self.clone(), grant: Some(grant), endpoint, claimed: false })
    }

    /// `try_acquire`, and in a cluster the cluster-wide claim of a half-open probe: a probe
    /// another node holds is denied here as a busy probe, and the local permit goes back.
    pub async fn acquire(self: &Arc<Self>, endpoint: Cow<'static, str>, explicit: bool) -> Result<Permit, Denied> {
        let mut permit = self.try_acquire(endpoint, explicit)?;
        let endpoint = &permit.endpoint;
        let Some(shared) = self.registry.shared.get().filter(|_| permit.is_probe()) else {
            return Ok(permit);
        };
        if shared.claim_probe(endpoint).await {
            permit.claimed = true;
            return Ok(permit);
        }
        let reason = self.lock().half_open_reason().unwrap_or(OpenReason::Broken);
        if let Some(grant) = permit.grant.take() {
            self.lock().release(grant);
        }
        Err(Denied::ProbeBusy { reason })
    }

    /// An operator's reset: here, and in a cluster on every node.
    pub fn reset(&self, endpoint: &str) {
        let transition = self.lock().reset();
        if let Some(t) = transition {
            self.registry.sink.transition(endpoint, &t);
        }
        if let Some(shared) = self.registry.shared.get() {
            shared.closed(endpoint, true);
        }
        self.registry.changed.notify_waiters();
    }

    /// Another node's verdict: Open until `remaining` from now (a later deadline wins).
    pub fn apply_open(&self, endpoint: &str, reason: OpenReason, remaining: Duration) {
        let now = self.registry.clock.now();
        let until = now.checked_add(remaining).unwrap_or(now);
        let transition = self.lock().apply_open(reason, until, now);
        if let Some(t) = transition {
            self.registry.sink.transition(endpoint, &t);
        }
    }

    /// Another node closed it (its probes succeeded) or reset it.
    pub fn apply_closed(&self, endpoint: &str, reset: bool) {
        let transition = self.lock().apply_closed(reset);
        if let Some(t) = transition {
            self.registry.sink.transition(endpoint, &t);
            self.registry.changed.notify_waiters();
        }
    }

    pub fn view(&self) -> BreakerView {
        let now = self.registry.clock.now();
        self.lock().view(now)
    }
}

/// Permission for one attempt. Record its outcome with `record`; dropping it unrecorded
/// (client went away, task cancelled, panic) records a neutral outcome, which returns a
/// half-open probe permit without touching any counter.
pub struct Permit {
    cell: Arc<BreakerCell>,
    grant: Option<Grant>,
    endpoint: Cow<'static, str>,
    /// The probe was claimed cluster-wide: its end is the cluster's to hear.
    claimed: bool,
}

impl Permit {
    /// Whether this is a half-open breaker's single probe.
    pub fn is_probe(&self) -> bool {
        self.grant.as_ref().is_some_and(Grant::is_probe)
    }

    pub fn record(mut self, outcome: Outcome, note: Option<&str>, settings: &BreakerSettings) -> Option<Transition> {
        self.finish(outcome, note, settings)
    }

    fn finish(&mut self, outcome: Outcome, note: Option<&str>, settings: &BreakerSettings) -> Option<Transition> {
        let grant = self.grant.take()?;
        let shared = &self.cell.registry;
        let (now, wall) = (shared.clock.now(), shared.clock.wall());
        let was_probe = grant.is_probe();
        let success = outcome == Outcome::Success;
        let transition = self.cell.lock().record(grant, outcome, note, now, wall, settings);
        if let Some(t) = &transition {
            shared.sink.transition(&self.endpoint, t);
        }
        if let Some(cluster) = shared.shared.get() {
            self.tell_cluster(cluster.as_ref(), transition.as_ref(), success, wall, settings);
        }
        if was_probe || transition.is_some() {
            shared.changed.notify_waiters();
        }
        transition
    }
}

impl Permit {
    /// What the cluster hears of this outcome: a trip or a failed probe publishes the deadline, a
    /// close by probes closes it everywhere, a claimed probe's success is counted cluster-wide,
    /// and a claimed probe that ended without a verdict gives its claim back.
    fn tell_cluster(
        &self,
        cluster: &dyn Shared,
        transition: Option<&Transition>,
        success: bool,
        wall: std::time::SystemTime,
        settings: &BreakerSettings,
    ) {
        match transition {
            Some(t) if t.to == Circuit::Open => {
                let cooldown = t.cooldown.unwrap_or_default();
                let until = wall + cooldown;
                let until_ms = until.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
                cluster.opened(&self.endpoint, t.reason.unwrap_or(OpenReason::Broken), until_ms);
            }
            Some(t) if t.to == Circuit::Closed => cluster.closed(&self.endpoint, false),
            _ if self.claimed && success => cluster.probe_succeeded(&self.endpoint, settings.success_threshold),
            _ if self.claimed => cluster.probe_released(&self.endpoint),
            _ => {}
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.grant.is_some() {
            // Neutral ignores the thresholds; any settings will do.
            let settings = BreakerSettings::openai_defaults();
            self.finish(Outcome::Neutral, None, &settings);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use std::time::Duration;

    fn open_and_cool(breakers: &Breakers, clock: &Arc<ManualClock>) -> Arc<BreakerCell> {
        let cell = breakers.cell(EndpointId(1));
        let settings = BreakerSettings { failure_threshold: 1, ..BreakerSettings::openai_defaults() };
        let permit = cell.try_acquire("e".into(), false).unwrap();
        permit.record(Outcome::Broken, Some("boom"), &settings);
        assert!(cell.routable().is_err());
        clock.advance(Duration::from_secs(60));
        cell
    }

    #[test]
    fn a_dropped_permit_returns_the_probe() {
        let clock = Arc::new(ManualClock::new());
        let breakers = Breakers::new(Arc::new(clock.clone()), Arc::new(NoSink));
        let cell = open_and_cool(&breakers, &clock);
        let probe = cell.try_acquire("e".into(), false).unwrap();
        assert!(matches!(cell.try_acquire("e".into(), false), Err(Denied::ProbeBusy { .. })));
        drop(probe);
        assert!(cell.try_acquire("e".into(), false).is_ok());
    }

    #[test]
    fn a_panicking_request_returns_the_probe() {
        let clock = Arc::new(ManualClock::new());
        let breakers = Breakers::new(Arc::new(clock.clone()), Arc::new(NoSink));
        let cell = open_and_cool(&breakers, &clock);
        let c = cell.clone();
        let result = std::thread::spawn(move || {
            let _probe = c.try_acquire("e".into(), false).unwrap();
            panic!("handler bug");
        })
        .join();
        assert!(result.is_err());
        assert!(cell.try_acquire("e".into(), false).is_ok(), "the unwinding drop gave the permit back");
        assert_eq!(cell.view().consecutive_failures, 1, "neutral: no counter moved");
    }

    #[tokio::test]
    async fn returning_a_probe_wakes_waiters() {
        let clock = Arc::new(ManualClock::new());
        let breakers = Breakers::new(Arc::new(clock.clone()), Arc::new(NoSink));
        let cell = open_and_cool(&breakers, &clock);
        let probe = cell.try_acquire("e".into(), false).unwrap();
        let mut waiting = std::pin::pin!(breakers.changed().notified());
        waiting.as_mut().enable();
        drop(probe);
        tokio::time::timeout(Duration::from_secs(5), waiting).await.unwrap();
    }

    /// `routable` and `try_acquire` answer a closed breaker from its flag: the flag must follow
    /// every change of state, whichever way it comes.
    #[test]
    fn the_closed_flag_follows_every_change_of_state() {
        let clock = Arc::new(ManualClock::new());
        let breakers = Breakers::new(Arc::new(clock.clone()), Arc::new(NoSink));
        let cell = breakers.cell(EndpointId(1));
        let settings = BreakerSettings { failure_threshold: 1, ..BreakerSettings::openai_defaults() };
        let agrees = |cell: &BreakerCell, closed: bool| {
            assert_eq!(cell.lock().is_closed(), closed);
            assert_eq!(cell.closed.load(Ordering::SeqCst), closed);
            assert_eq!(cell.routable().is_ok(), closed || cell.lock().routable(clock.now()).is_ok());
        };
        agrees(&cell, true);
        cell.try_acquire("e".into(), false).unwrap().record(Outcome::Broken, Some("boom"), &settings);
        agrees(&cell, false);
        assert!(cell.routable().is_err() && cell.try_acquire("e".into(), false).is_err());
        clock.advance(Duration::from_secs(60));
        let probe = cell.try_acquire("e".into(), false).unwrap();
        assert!(probe.is_probe());
        agrees(&cell, false);
        assert!(cell.try_acquire("e".into(), false).is_err(), "the probe is taken: no closed grant");
        let mut probe = Some(probe);
        for _ in 0..100 {
            if cell.lock().is_closed() {
                break;
            }
            let p = probe.take().unwrap_or_else(|| cell.try_acquire("e".into(), false).unwrap());
            p.record(Outcome::Success, None, &settings);
        }
        agrees(&cell, true);
        cell.apply_open("e", OpenReason::Broken, Duration::from_secs(30));
        agrees(&cell, false);
        assert!(cell.try_acquire("e".into(), false).is_err());
        cell.apply_closed("e", true);
        agrees(&cell, true);
        cell.try_acquire("e".into(), false).unwrap().record(Outcome::Broken, Some("boom"), &settings);
        agrees(&cell, false);
        cell.reset("e");
        agrees(&cell, true);
    }

    /// What the attempt loop does: a `Notified` made, never enabled, before the change.
    #[tokio::test]
    async fn a_change_wakes_a_waiter_made_before_it_without_enabling() {
        let clock = Arc::new(ManualClock::new());
        let breakers = Breakers::new(Arc::new(clock.clone()), Arc::new(NoSink));
        let cell = open_and_cool(&breakers, &clock);
        let probe = cell.try_acquire("e".into(), false).unwrap();
        let waiting = breakers.changed().notified();
        drop(probe);
        tokio::time::timeout(Duration::from_secs(5), waiting).await.unwrap();
    }
}
