//! The circuit breaker in front of Redis itself, and the names of the calls that fall back.
//!
//! Every Redis call already has a short timeout; this is what keeps a dead or slow Redis from
//! costing every request that timeout. After `FAILURES_TO_OPEN` failures in a row (an error, a
//! refused connection or a timeout) calls are not even tried for `COOLDOWN`: each one falls back
//! to local state at once. When the cooldown is over one call is let through as a trial, and the
//! next trial waits another cooldown; the first success closes it. One breaker serves every call:
//! Redis is one server, and when it is down it is down for every kind of call.
//!
//! Pure: time is passed in, so the unit tests step it exactly.

use std::time::{Duration, Instant};

pub const FAILURES_TO_OPEN: u32 = 3;
pub const COOLDOWN: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Closed {
        failures: u32,
    },
    /// No call until `until`; then one trial, and `until` moves a cooldown on.
    Open {
        until: Instant,
    },
}

#[derive(Clone, Copy, Debug)]
pub struct CallBreaker {
    state: State,
}

impl Default for CallBreaker {
    fn default() -> Self {
        CallBreaker { state: State::Closed { failures: 0 } }
    }
}

impl CallBreaker {
    /// May a call be sent now? While open, `true` once per cooldown (the trial).
    pub fn allow(&mut self, now: Instant) -> bool {
        match self.state {
            State::Closed { .. } => true,
            State::Open { until } if now >= until => {
                self.state = State::Open { until: now + COOLDOWN };
                true
            }
            State::Open { .. } => false,
        }
    }

    pub fn success(&mut self) {
        self.state = State::Closed { failures: 0 };
    }

    pub fn failure(&mut self, now: Instant) {
        self.state = match self.state {
            State::Closed { failures } if failures + 1 < FAILURES_TO_OPEN => State::Closed { failures: failures + 1 },
            _ => State::Open { until: now + COOLDOWN },
        };
    }

    pub fn is_open(&self) -> bool {
        matches!(self.state, State::Open { .. })
    }
}

/// Which call fell back to local state (`ccmesh_cluster_fallbacks_total{op}`): a bounded set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Client-key admission (the limits' check-and-count).
    Admit,
    /// A finished request's charge, a lease given back.
    Charge,
    /// Reading a key's use for the admin API.
    Usage,
    /// Claiming the cluster-wide half-open probe.
    Probe,
    /// Publishing a breaker verdict (open, closed, reset, a probe's result).
    Verdict,
    /// The current endpoint and the round-robin counter.
    Rotation,
    /// Session bindings.
    Binding,
    /// Learning what other nodes published (the periodic poll).
    Poll,
    /// The config version bump after an admin write.
    Config,
    /// Background work dropped because its queue was full.
    Queue,
}

impl Op {
    pub const ALL: [Op; 10] = [
        Op::Admit,
        Op::Charge,
        Op::Usage,
        Op::Probe,
        Op::Verdict,
        Op::Rotation,
        Op::Binding,
        Op::Poll,
        Op::Config,
        Op::Queue,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Op::Admit => "admit",
            Op::Charge => "charge",
            Op::Usage => "usage",
            Op::Probe => "probe",
            Op::Verdict => "verdict",
            Op::Rotation => "rotation",
            Op::Binding => "binding",
            Op::Poll => "poll",
            Op::Config => "config",
            Op::Queue => "queue",
        }
    }

    pub fn index(self) -> usize {
        Op::ALL.iter().position(|o| *o == self).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_failures_in_a_row_and_lets_one_trial_through_per_cooldown() {
        let t0 = Instant::now();
        let mut b = CallBreaker::default();
        for _ in 0..FAILURES_TO_OPEN - 1 {
            assert!(b.allow(t0));
            b.failure(t0);
        }
        assert!(!b.is_open(), "not yet");
        b.success();
        for _ in 0..FAILURES_TO_OPEN - 1 {
            b.failure(t0);
        }
        assert!(!b.is_open(), "a success starts the count again");
        b.failure(t0);
        assert!(b.is_open());
        assert!(!b.allow(t0));
        assert!(!b.allow(t0 + COOLDOWN - Duration::from_millis(1)));
        // The trial, and nothing else until another cooldown has passed.
        assert!(b.allow(t0 + COOLDOWN));
        assert!(!b.allow(t0 + COOLDOWN + Duration::from_millis(1)));
        // A failed trial keeps it open; a trial abandoned without an answer does too.
        b.failure(t0 + COOLDOWN);
        assert!(!b.allow(t0 + COOLDOWN + COOLDOWN / 2));
        assert!(b.allow(t0 + COOLDOWN * 2));
        b.success();
        assert!(!b.is_open());
        assert!(b.allow(t0 + COOLDOWN * 2));
    }

    #[test]
    fn op_names_are_distinct() {
        let names: std::collections::HashSet<_> = Op::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(names.len(), Op::ALL.len());
        assert_eq!(Op::Queue.index(), Op::ALL.len() - 1);
    }
}
