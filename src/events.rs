//! Operational events with stable names (documented in docs/operations.md). Today they go to
//! the log as structured `tracing` events; the same calls will feed the live event stream.
//!
//! Names: `breaker_opened`, `breaker_half_open`, `breaker_closed`, `breaker_reset`, `failover`,
//! `candidates_exhausted`, `rate_limit_backoff`, `config_changed`. No event ever carries a key.

use crate::breaker::{Circuit, OpenReason, Transition, TransitionCause};

#[derive(Clone, Default)]
pub struct Events {}

pub fn open_reason_str(r: OpenReason) -> &'static str {
    match r {
        OpenReason::Broken => "broken",
        OpenReason::RateLimited => "rate_limited",
    }
}

pub fn cause_str(c: &TransitionCause) -> &'static str {
    match c {
        TransitionCause::ConsecutiveFailures { .. } => "consecutive_failures",
        TransitionCause::ErrorRate { .. } => "error_rate",
        TransitionCause::CooldownElapsed => "cooldown_elapsed",
        TransitionCause::ProbeFailed => "probe_failed",
        TransitionCause::ProbesSucceeded { .. } => "probes_succeeded",
        TransitionCause::ManualReset => "manual_reset",
    }
}

impl Events {
    pub fn new() -> Self {
        Self {}
    }

    pub fn breaker_transition(&self, endpoint: &str, t: &Transition) {
        let cause = cause_str(&t.cause);
        match (t.to, t.cause) {
            (_, TransitionCause::ManualReset) => {
                tracing::info!(event = "breaker_reset", endpoint, "breaker reset by an operator");
            }
            (Circuit::Open, _) => {
                let reason = t.reason.map(open_reason_str).unwrap_or("broken");
                let cooldown_ms = t.cooldown.map(|d| d.as_millis() as u64).unwrap_or(0);
                tracing::warn!(event = "breaker_opened", endpoint, reason, cause, cooldown_ms, "breaker opened");
            }
            (Circuit::HalfOpen, _) => {
                tracing::info!(event = "breaker_half_open", endpoint, "cooldown over; probing");
            }
            (Circuit::Closed, _) => {
                tracing::info!(event = "breaker_closed", endpoint, cause, "breaker closed");
            }
        }
    }

    pub fn failover(&self, protocol: &str, from: &str, to: &str, cause: &str) {
        tracing::info!(event = "failover", protocol, from, to, cause, "failing over to the next endpoint");
    }

    pub fn candidates_exhausted(&self, protocol: &str, attempts: usize, last: &str) {
        tracing::warn!(event = "candidates_exhausted", protocol, attempts, last, "no attempt succeeded");
    }

    pub fn rate_limit_backoff(&self, protocol: &str, wait_ms: u64) {
        tracing::info!(
            event = "rate_limit_backoff",
            protocol,
            wait_ms,
            "every candidate is rate-limited; waiting in the gateway"
        );
    }

    pub fn config_changed(&self, what: &str) {
        tracing::info!(event = "config_changed", what, "configuration changed");
    }
}
