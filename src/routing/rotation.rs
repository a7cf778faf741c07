//! SPEC §3, rotation and attempts: the current endpoint per inbound protocol (remembered by
//! identity, so edits to the list cannot make it point at the wrong endpoint), where a request
//! starts under each routing strategy, how it advances, how many attempts it may make, and the
//! compare-and-set that moves the current endpoint after a success elsewhere.
//!
//! In a cluster the current endpoint and the round-robin counter are shared (`crate::cluster`):
//! `Rotation` stays the local mirror every read goes to, a move that won the local
//! compare-and-set is handed to the `SharedRotation` to repeat atomically in Redis (whose answer
//! then sets the mirror), and moves made by other nodes arrive through `mirror_current`.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::config::RoutingStrategy;
use crate::endpoint::EndpointId;
use crate::protocol::Protocol;

/// Where the attempt loop begins (SPEC §3). `manual` is a one-shot start set by
/// `PUT /api/current`; `round_robin` is this request's ticket from the per-protocol counter.
pub fn start_index(
    strategy: RoutingStrategy,
    candidates: &[EndpointId],
    current: Option<EndpointId>,
    manual: Option<EndpointId>,
    round_robin: u64,
) -> usize {
    let position = |id: Option<EndpointId>| id.and_then(|id| candidates.iter().position(|c| *c == id));
    if candidates.is_empty() {
        return 0;
    }
    if let Some(i) = position(manual) {
        return i;
    }
    match strategy {
        RoutingStrategy::Sticky => position(current).unwrap_or(0),
        RoutingStrategy::Priority => 0,
        RoutingStrategy::RoundRobin => (round_robin % candidates.len() as u64) as usize,
    }
}

/// Session affinity (SPEC §12): the start is the endpoint the request's session is bound to,
/// when it is among the candidates routing chose (affinity reorders, it never adds an endpoint
/// a filter removed), under `sticky` and `round_robin`; not under `priority`, and not when a
/// manual switch (`PUT /api/current`) sets this request's start.
pub fn affinity_start(
    strategy: RoutingStrategy,
    candidates: &[EndpointId],
    manual: Option<EndpointId>,
    bound: Option<EndpointId>,
) -> Option<usize> {
    if strategy == RoutingStrategy::Priority || manual.is_some() {
        return None;
    }
    let bound = bound?;
    candidates.iter().position(|c| *c == bound)
}

/// SPEC §3: next = (position just tried + 1) mod candidates.
pub fn advance(index: usize, candidates: usize) -> usize {
    if candidates == 0 { 0 } else { (index + 1) % candidates }
}

/// SPEC §3 attempt cap: candidates × 2 (at least 1); 3 with an explicit endpoint.
pub fn attempt_cap(candidates: usize, explicit: bool) -> usize {
    if explicit { 3 } else { (candidates * 2).max(1) }
}

/// Where a cluster hears of this node's moves; both only queue work and return at once.
pub trait SharedRotation: Send + Sync + 'static {
    /// A success moved the current endpoint from `seen` to `to` here: the same compare-and-set,
    /// cluster-wide.
    fn moved(&self, protocol: Protocol, seen: Option<EndpointId>, to: EndpointId);
    /// An operator made `to` current (`PUT /api/current`).
    fn switched(&self, protocol: Protocol, to: EndpointId);
}

/// The current endpoint per inbound protocol, by identity (0 = none yet), the
/// round-robin counters, and the one-shot start set by `PUT /api/current`.
#[derive(Default)]
pub struct Rotation {
    current: [AtomicI64; Protocol::COUNT],
    manual_next: [AtomicI64; Protocol::COUNT],
    round_robin: [AtomicU64; Protocol::COUNT],
    shared: OnceLock<Arc<dyn SharedRotation>>,
}

impl Rotation {
    pub fn current(&self, p: Protocol) -> Option<EndpointId> {
        id(self.current[p.index()].load(Ordering::Acquire))
    }

    /// Move the current endpoint to `to` only if it is still `seen` (what this request saw
    /// when it started), so concurrent requests never leapfrog each other.
    pub fn compare_and_set(&self, p: Protocol, seen: Option<EndpointId>, to: EndpointId) -> bool {
        let moved =
            self.current[p.index()].compare_exchange(raw(seen), to.0, Ordering::AcqRel, Ordering::Acquire).is_ok();
        if moved && let Some(shared) = self.shared.get() {
            shared.moved(p, seen, to);
        }
        moved
    }

    /// A manual switch: the current endpoint, and the next request's start under every strategy.
    pub fn set_manual(&self, p: Protocol, to: EndpointId) {
        self.current[p.index()].store(to.0, Ordering::Release);
        self.manual_next[p.index()].store(to.0, Ordering::Release);
        if let Some(shared) = self.shared.get() {
            shared.switched(p, to);
        }
    }

    /// Share the moves with a cluster (once, before serving).
    pub fn share(&self, shared: Arc<dyn SharedRotation>) {
        let _ = self.shared.set(shared);
    }

    /// What the cluster says is current (another node's move, or Redis's answer to ours).
    pub fn mirror_current(&self, p: Protocol, current: Option<EndpointId>) {
        self.current[p.index()].store(raw(current), Ordering::Release);
    }

    /// The cluster's round-robin counter, as last seen (for `peek_round_robin`).
    pub fn mirror_round_robin(&self, p: Protocol, next: u64) {
        self.round_robin[p.index()].store(next, Ordering::Relaxed);
    }

    pub fn take_manual(&self, p: Protocol) -> Option<EndpointId> {
        let slot = &self.manual_next[p.index()];
        if slot.load(Ordering::Relaxed) == 0 {
            return None;
        }
        id(slot.swap(0, Ordering::AcqRel))
    }

    /// The manual start a `PUT /api/current` set, without using it up.
    pub fn peek_manual(&self, p: Protocol) -> Option<EndpointId> {
        id(self.manual_next[p.index()].load(Ordering::Acquire))
    }

    /// The round-robin ticket the next request will take, without taking it.
    pub fn peek_round_robin(&self, p: Protocol) -> u64 {
        self.round_robin[p.index()].load(Ordering::Relaxed)
    }

    pub fn next_round_robin(&self, p: Protocol) -> u64 {
        self.round_robin[p.index()].fetch_add(1, Ordering::Relaxed)
    }

    /// Forget a deleted endpoint.
    pub fn forget(&self, gone: EndpointId) {
        for slot in self.current.iter().chain(self.manual_next.iter()) {
            let _ = slot.compare_exchange(gone.0, 0, Ordering::AcqRel, Ordering::Acquire);
        }
    }
}

fn id(v: i64) -> Option<EndpointId> {
    (v != 0).then_some(EndpointId(v))
}

fn raw(id: Option<EndpointId>) -> i64 {
    id.map(|i| i.0).unwrap_or(0)
}

/// After a success elsewhere, move the current endpoint — only if it is still what the request
/// saw when it started, so concurrent requests never leapfrog each other.
#[derive(Clone, Copy, Debug)]
pub struct RotationUpdate {
    pub protocol: Protocol,
    pub seen: Option<EndpointId>,
    pub to: EndpointId,
}

impl RotationUpdate {
    pub fn apply(self, rotation: &Rotation) {
        rotation.compare_and_set(self.protocol, self.seen, self.to);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_index_per_strategy() {
        let ids = [EndpointId(10), EndpointId(20), EndpointId(30)];
        let cur = Some(EndpointId(20));
        assert_eq!(start_index(RoutingStrategy::Sticky, &ids, cur, None, 0), 1);
        assert_eq!(start_index(RoutingStrategy::Sticky, &ids, Some(EndpointId(99)), None, 0), 0);
        assert_eq!(start_index(RoutingStrategy::Sticky, &ids, None, None, 0), 0);
        assert_eq!(start_index(RoutingStrategy::Priority, &ids, cur, None, 7), 0);
        assert_eq!(start_index(RoutingStrategy::RoundRobin, &ids, cur, None, 7), 1);
        assert_eq!(start_index(RoutingStrategy::RoundRobin, &ids, cur, None, 9), 0);
        // A manual switch wins once, under every strategy.
        for s in [RoutingStrategy::Sticky, RoutingStrategy::Priority, RoutingStrategy::RoundRobin] {
            assert_eq!(start_index(s, &ids, cur, Some(EndpointId(30)), 4), 2);
        }
        assert_eq!(start_index(RoutingStrategy::Priority, &[], None, None, 0), 0);
    }

    #[test]
    fn affinity_starts_at_the_bound_candidate_only() {
        let ids = [EndpointId(10), EndpointId(20), EndpointId(30)];
        let bound = Some(EndpointId(30));
        assert_eq!(affinity_start(RoutingStrategy::Sticky, &ids, None, bound), Some(2));
        assert_eq!(affinity_start(RoutingStrategy::RoundRobin, &ids, None, bound), Some(2));
        assert_eq!(affinity_start(RoutingStrategy::Priority, &ids, None, bound), None);
        assert_eq!(affinity_start(RoutingStrategy::Sticky, &ids, Some(EndpointId(10)), bound), None, "manual wins");
        assert_eq!(affinity_start(RoutingStrategy::Sticky, &ids, None, Some(EndpointId(99))), None, "filtered out");
        assert_eq!(affinity_start(RoutingStrategy::Sticky, &ids, None, None), None);
    }

    #[test]
    fn advance_wraps_and_caps() {
        assert_eq!(advance(0, 3), 1);
        assert_eq!(advance(2, 3), 0);
        assert_eq!(advance(0, 1), 0);
        assert_eq!(attempt_cap(3, false), 6);
        assert_eq!(attempt_cap(0, false), 1);
        assert_eq!(attempt_cap(5, true), 3);
    }

    #[test]
    fn rotation_survives_list_changes_by_identity() {
        // The current endpoint is remembered by id: inserting an endpoint before it does not
        // move the start to a different endpoint.
        let before = [EndpointId(1), EndpointId(2)];
        let after = [EndpointId(3), EndpointId(1), EndpointId(2)];
        let cur = Some(EndpointId(2));
        assert_eq!(before[start_index(RoutingStrategy::Sticky, &before, cur, None, 0)], EndpointId(2));
        assert_eq!(after[start_index(RoutingStrategy::Sticky, &after, cur, None, 0)], EndpointId(2));
    }
}
