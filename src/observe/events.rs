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
use crate::observe::writer::{Promise, RecordSink};

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

impl Hub {
    /// Scrubbed, shown live and sent to the writer (as the record `promise` announced, if any).
    fn show_and_store(&self, mut record: Box<RequestRecord>, promise: Option<Promise>) {
        scrub_record(&mut record);
        self.show(&record);
        match promise {
            Some(promise) => self.records.submit_promised(promise, record),
            None => self.records.submit(record),
        }
    }

    /// The request's live event, for the dashboards watching.
    fn show(&self, record: &RequestRecord) {
        if !self.live.has_subscribers() {
            return;
        }
        self.live.publish(LiveEvent {
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
    }
}

/// A promised record on its way to the live feed and the writer (`Events::request_answered`). It
/// goes when this is dropped: in its task, or when a runtime shutting down drops the task unrun.
struct HandOver {
    hub: Arc<Hub>,
    record: Option<(Promise, Box<RequestRecord>)>,
}

impl Drop for HandOver {
    fn drop(&mut self) {
        if let Some((promise, record)) = self.record.take() {
            self.hub.show_and_store(record, Some(promise));
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
        let record = record.into();
        self.hub.metrics.observe_request(&record);
        self.hub.show_and_store(record, None);
    }

    /// [`Self::request_completed`] for a request whose answer the calling task is about to write
    /// (or whose client went away): counted now; shown live and stored in a task of its own when
    /// this thread serves no other request ([`crate::thread_load`]). The runtime polls that task
    /// only after the connection's task has written and flushed the answer, so the hand-over (the
    /// record scrubbed, the live event, the writer's channel and, when the writer sleeps, waking
    /// its thread) no longer stands between the upstream's answer and the client. A thread
    /// serving others hands over at once: the task would cost them what it saves this one. A
    /// flush waits for a record still in its task ([`RecordSink::promise`]); outside a runtime
    /// the record goes at once.
    pub fn request_answered(self, record: Box<RequestRecord>) {
        self.hub.metrics.observe_request(&record);
        let runtime = match crate::thread_load::serving_alone().then(tokio::runtime::Handle::try_current) {
            Some(Ok(runtime)) => runtime,
            _ => return self.hub.show_and_store(record, None),
        };
        let promise = self.hub.records.promise();
        let hand_over = HandOver { hub: self.hub, record: Some((promise, record)) };
        // A runtime shutting down drops the task at once, and with it the hand-over: it goes then.
        drop(runtime.spawn(async move { drop(hand_over) }));
    }

    /// A record to be finished after the answer is written (`Trail::finish_answered`): announced
    /// now, so that a flush, and a `/metrics` scrape, waits for it.
    pub fn promise(&self) -> Promise {
        self.hub.records.promise()
    }

    /// [`Self::request_completed`] for a record `promise` announced: counted, shown and stored now.
    pub fn request_answered_as_promised(self, record: Box<RequestRecord>, promise: Promise) {
        self.hub.metrics.observe_request(&record);
        self.hub.show_and_store(record, Some(promise));
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::observe::metrics::Scrape;
    use crate::observe::writer::{self, RecordSink, WriterConfig, WriterHandle};
    use crate::store::records::sample_record;

    /// A writer waiting for records, with batches that wait an hour to fill.
    fn writer(dir: &tempfile::TempDir) -> (RecordSink, WriterHandle) {
        let config = WriterConfig {
            prune_every: None,
            linger: Duration::from_secs(3600),
            ..WriterConfig::new(Arc::new(crate::clock::SystemClock))
        };
        writer::start(&dir.path().join("ccmesh.db"), config).unwrap()
    }

    async fn flushed(sink: &RecordSink) -> u64 {
        let sink = sink.clone();
        tokio::task::spawn_blocking(move || {
            assert!(sink.flush(Duration::from_secs(10)));
            sink.stats().written
        })
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn a_thread_serving_one_request_hands_its_record_over_after_the_answers_task_yields() {
        let dir = tempfile::tempdir().unwrap();
        let (sink, handle) = writer(&dir);
        let events = Events::new(sink.clone());
        let uncounted = events.metrics().render_scrape(&Scrape::default());
        // In a task of its own, as the connection's task that writes the answer.
        let (answering, promised) = (events.clone(), sink.clone());
        tokio::spawn(async move {
            answering.request_answered(Box::new(sample_record("answered", 1_000)));
            assert_ne!(events.metrics().render_scrape(&Scrape::default()), uncounted, "counted at once");
            assert_eq!(promised.promised(), 1, "handed over while the answer's task still ran");
            tokio::task::yield_now().await;
            assert_eq!(promised.promised(), 0, "not handed over once that task yielded");
        })
        .await
        .unwrap();
        assert_eq!(flushed(&sink).await, 1);
        handle.shutdown();
    }

    #[tokio::test]
    async fn a_thread_serving_other_requests_hands_the_record_over_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let (sink, handle) = writer(&dir);
        let (events, promised) = (Events::new(sink.clone()), sink.clone());
        tokio::spawn(async move {
            // This request and another one.
            crate::thread_load::request_started();
            crate::thread_load::request_started();
            events.request_answered(Box::new(sample_record("busy", 1_000)));
            assert_eq!(promised.promised(), 0, "in the channel at once");
            crate::thread_load::request_ended();
            crate::thread_load::request_ended();
        })
        .await
        .unwrap();
        assert_eq!(flushed(&sink).await, 1);
        handle.shutdown();
    }

    #[test]
    fn a_record_whose_task_never_ran_is_handed_over_when_the_runtime_drops_it() {
        let dir = tempfile::tempdir().unwrap();
        let (sink, handle) = writer(&dir);
        let events = Events::new(sink.clone());
        // After each task the runtime looks at the future it was asked to run, which is ready as
        // soon as the answering task is done: the hand-over's task is still queued then.
        let runtime = tokio::runtime::Builder::new_current_thread().event_interval(1).build().unwrap();
        runtime.block_on(async {
            tokio::spawn(async move { events.request_answered(Box::new(sample_record("cut-short", 1_000))) })
                .await
                .unwrap()
        });
        assert_eq!(sink.promised(), 1, "the hand-over's task has not run");
        drop(runtime);
        assert_eq!(sink.promised(), 0, "the dropped task handed its record over");
        assert!(sink.flush(Duration::from_secs(10)));
        assert_eq!(sink.stats().written, 1);
        handle.shutdown();
    }

    #[test]
    fn outside_a_runtime_an_answered_request_is_handed_over_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let (sink, handle) = writer(&dir);
        Events::new(sink.clone()).request_answered(Box::new(sample_record("no-runtime", 1_000)));
        assert_eq!(sink.promised(), 0);
        assert!(sink.flush(Duration::from_secs(10)));
        assert_eq!(sink.stats().written, 1);
        handle.shutdown();
    }
}
