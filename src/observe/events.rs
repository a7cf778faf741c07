//! Operational events with stable names (documented in docs/operations.md), and the hub every
//! observation passes through: each event goes to the log (structured `tracing` events), to the
//! metrics, and to the live event stream; each finished request's record goes to the writer.
//!
//! Names: `breaker_opened`, `breaker_half_open`, `breaker_closed`, `breaker_reset`, `failover`,
//! `candidates_exhausted`, `rate_limit_backoff`, `config_changed`. No event ever carries a key.

use std::sync::Arc;

use serde_json::json;

use crate::breaker::{Circuit, OpenReason, Transition, TransitionCause};
use crate::observe::live::{LiveBus, LiveEvent};
use crate::observe::metrics::Metrics;
use crate::observe::record::RequestRecord;
use crate::observe::writer::RecordSink;

#[derive(Clone)]
pub struct Events {
    hub: Arc<Hub>,
}

struct Hub {
    metrics: Metrics,
    records: RecordSink,
    live: LiveBus,
}

impl Default for Events {
    fn default() -> Self {
        Self::new(RecordSink::disabled())
    }
}

/// Mask every known secret in the free text of a record (its error and the attempts' notes),
/// the only parts that can carry an upstream's words.
fn scrub_record(record: &mut RequestRecord) {
    if record.error.is_none() && record.attempts.iter().all(|a| a.error.is_none()) {
        return;
    }
    let redactor = crate::redact::current();
    if let Some(e) = &mut record.error {
        redactor.scrub_in_place(&mut e.message, None);
        if let Some(body) = &mut e.upstream_body {
            redactor.scrub_in_place(body, None);
        }
    }
    for a in &mut record.attempts {
        if let Some(note) = &mut a.error {
            redactor.scrub_in_place(note, None);
        }
    }
}

impl crate::breaker::TransitionSink for Events {
    fn transition(&self, endpoint: &str, transition: &Transition) {
        self.breaker_transition(endpoint, transition);
    }
}

impl Events {
    pub fn new(records: RecordSink) -> Self {
        Self { hub: Arc::new(Hub { metrics: Metrics::new(), records, live: LiveBus::new() }) }
    }

    pub fn metrics(&self) -> &Metrics {
        &self.hub.metrics
    }

    pub fn records(&self) -> &RecordSink {
        &self.hub.records
    }

    pub fn live(&self) -> &LiveBus {
        &self.hub.live
    }

    /// A request finished (for a stream: when the stream ended): count it, show it live, store it.
    pub fn request_completed(&self, record: impl Into<Box<RequestRecord>>) {
        let mut record = record.into();
        scrub_record(&mut record);
        self.hub.metrics.observe_request(&record);
        if !self.hub.live.has_subscribers() {
            self.hub.records.submit(record);
            return;
        }
        self.hub.live.publish(LiveEvent {
            kind: "request",
            data: json!({
                "id": record.id,
                "started_at_ms": record.started_at_ms,
                "protocol": record.protocol,
                "model": record.model_requested,
                "endpoint": record.endpoint,
                "status": record.status,
                "stream": record.stream,
                "total_ms": record.total_ms,
                "attempts": record.attempts.len(),
                "failed_over": record.failed_over,
                "tokens": record.tokens,
                "cost_usd": record.cost_usd,
                "error": record.error.as_ref().map(|e| e.message.clone()),
                "client_key": record.client_key,
            }),
        });
        self.hub.records.submit(record);
    }

    pub fn breaker_transition(&self, endpoint: &str, t: &Transition) {
        self.hub.metrics.observe_transition(endpoint, t);
        self.hub.live.publish(LiveEvent {
            kind: "breaker",
            data: json!({
                "endpoint": endpoint,
                "to": t.to.as_str(),
                "reason": t.reason.map(OpenReason::as_str),
                "cause": t.cause.as_str(),
                "cooldown_ms": t.cooldown.map(|d| d.as_millis() as u64),
                "transition": t.to_string(),
            }),
        });
        let cause = t.cause.as_str();
        match (t.to, t.cause) {
            (_, TransitionCause::ManualReset) => {
                tracing::info!(event = "breaker_reset", endpoint, "breaker reset by an operator");
            }
            (Circuit::Open, _) => {
                let reason = t.reason.map(OpenReason::as_str).unwrap_or("broken");
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
        self.hub.live.publish(LiveEvent { kind: "config", data: json!({"what": what}) });
        tracing::info!(event = "config_changed", what, "configuration changed");
    }
}
