//! The decision trail of one client request, filled as the request goes and handed to the
//! events hub (record writer, metrics, live events) when it ends — or when it is dropped,
//! because the client went away: a request that disappears still leaves its record.
//!
//! The end of a request settles, here and only here, what depends on how it ended: the record;
//! the client key's charge — the record's own `cost_usd`, so a budget is the bill — and its
//! concurrency lease; the session's binding (a success binds the endpoint that served, a failure
//! at the bound endpoint unbinds it).
//!
//! Timing: `overhead` is the time spent in ccmesh itself up to the first byte sent to the
//! client: everything except waiting on upstreams and deliberate waits (rate-limit backoff,
//! the same-endpoint retry delay).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use axum::http::{HeaderMap, HeaderName, HeaderValue, Method};
use tokio::time::Instant;

use crate::affinity::Affinity;
use crate::breaker::Transition;
use crate::endpoint::EndpointId;
use crate::keys::KeyCharge;
use crate::observe::cost;
use crate::observe::events::Events;
use crate::observe::kept_text::kept_here;
use crate::observe::metrics::push_decimal;
use crate::observe::record::{AttemptRecord, Classification, RecordError, RequestRecord, Tokens};
use crate::observe::record_id::new_id;
use crate::observe::writer::Promise;
use crate::snapshot::Snapshot;

/// Error bodies kept in a record are cut to this many bytes.
const MAX_ERROR_BODY: usize = 4096;
/// What a record keeps of a model name, a session id or a user agent: a client may send
/// megabytes there, and every record would keep them.
const MAX_NAME: usize = 256;
/// What a record keeps of a path or a message.
const MAX_TEXT: usize = 2048;

/// `text` cut to at most `max` bytes at a character boundary, marked with `…` when cut.
fn capped(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = String::with_capacity(end + 3);
    out.push_str(&text[..end]);
    out.push('…');
    out
}

/// A model name or a user agent as the record holds it: kept for every record that repeats it
/// (`observe::kept_text`) when it fits, else capped and owned.
fn record_text(text: &str) -> Cow<'static, str> {
    if text.len() <= MAX_NAME { kept_here(text) } else { Cow::Owned(capped(text, MAX_NAME)) }
}

pub struct Trail {
    /// Boxed from the start: the trail moves through several futures on its way, and the
    /// record goes to the writer in this box.
    record: Box<RequestRecord>,
    /// Taken when the record is handed over (so `None` once it has been), and moved on with it
    /// rather than counting another reference to the hub every serving thread shares.
    events: Option<Events>,
    started: Instant,
    /// Deliberate waits (backoff, retry delay).
    waits: Duration,
    /// Time spent waiting on upstreams (attempts, up to the point their answer was decided).
    upstream: Duration,
    /// The attempt in progress: its index and start.
    current: Option<(usize, Instant)>,
    /// Set once the response head went to the client.
    first_byte: Option<Duration>,
    /// Overhead frozen at the first byte.
    overhead: Option<Duration>,
    /// Price multiplier of the final endpoint.
    multiplier: f64,
    /// The endpoint of the attempt begun last.
    attempt_endpoint: Option<EndpointId>,
    /// What the request owes its client key.
    charge: Option<KeyCharge>,
    /// The request's session, when affinity applies.
    affinity: Option<Affinity>,
}

/// A standard method's name without an allocation; any other's copied.
fn method_name(method: &Method) -> Cow<'static, str> {
    const STANDARD: [(Method, &str); 9] = [
        (Method::POST, "POST"),
        (Method::GET, "GET"),
        (Method::PUT, "PUT"),
        (Method::DELETE, "DELETE"),
        (Method::PATCH, "PATCH"),
        (Method::HEAD, "HEAD"),
        (Method::OPTIONS, "OPTIONS"),
        (Method::CONNECT, "CONNECT"),
        (Method::TRACE, "TRACE"),
    ];
    match STANDARD.iter().find(|(m, _)| m == method) {
        Some((_, name)) => Cow::Borrowed(name),
        None => Cow::Owned(method.as_str().to_owned()),
    }
}

/// A proxied path the gateway serves by name, without an allocation; any other path copied (and
/// capped). A record is made on a serving thread and dropped on the writer's, where each of its
/// strings is a free from another thread's heap.
fn path_name(path: &str) -> Cow<'static, str> {
    const PROXIED: [&str; 4] = ["/v1/messages", "/v1/chat/completions", "/v1/responses", "/v1/messages/count_tokens"];
    match PROXIED.iter().find(|known| **known == path) {
        Some(known) => Cow::Borrowed(known),
        None => Cow::Owned(capped(path, MAX_TEXT)),
    }
}

const SERVER_TIMING: HeaderName = HeaderName::from_static("server-timing");
const X_CCMESH_REQUEST_ID: HeaderName = HeaderName::from_static("x-ccmesh-request-id");

/// Milliseconds with three decimals (microsecond resolution), as Server-Timing wants them.
fn push_ms(out: &mut String, d: Duration) {
    // In u64 (585 000 years of microseconds): dividing a u128 is a call, not a multiply.
    let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    push_decimal(out, us / 1000);
    out.push('.');
    let frac = us % 1000;
    for div in [100, 10, 1] {
        out.push(char::from_digit(((frac / div) % 10) as u32, 10).unwrap_or('0'));
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl Trail {
    /// Boxed from the start: the trail moves from the handler's future into the attempt loop's,
    /// into its `Run` and on into a committed stream's relay, and a box moves as one pointer where
    /// the trail itself is ~300 bytes.
    pub fn start(
        events: Events,
        wall: std::time::SystemTime,
        protocol: &'static str,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
        sessions: &crate::affinity::SessionHeaders,
    ) -> Box<Trail> {
        let unix_ms = wall.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
        // The body may name a better one (`set_session`).
        let session_id = sessions.id();
        let record = Box::new(RequestRecord {
            id: new_id(unix_ms),
            started_at_ms: unix_ms,
            protocol: Cow::Borrowed(protocol),
            method: method_name(method),
            path: path_name(path),
            user_agent: headers.get(axum::http::header::USER_AGENT).and_then(|v| v.to_str().ok()).map(record_text),
            session_id,
            ..empty_record()
        });
        Box::new(Trail {
            record,
            events: Some(events),
            started: Instant::now(),
            waits: Duration::ZERO,
            upstream: Duration::ZERO,
            current: None,
            first_byte: None,
            overhead: None,
            multiplier: 1.0,
            attempt_endpoint: None,
            charge: None,
            affinity: None,
        })
    }

    /// The attempt in progress continues a cut stream: say so, and what it carries over.
    pub fn note_resume(&mut self, note: &str) {
        if let Some((index, _)) = self.current
            && let Some(a) = self.record.attempts.get_mut(index)
        {
            a.resume = Some(note.to_string());
        }
    }

    /// The session id, as read from the headers and the body.
    pub fn set_session(&mut self, session: Option<&str>) {
        if let Some(s) = session {
            self.record.session_id = Some(capped(s, MAX_NAME));
        }
    }

    /// The client key the request presented (its name: never the secret).
    pub fn set_client_key(&mut self, name: &str) {
        self.record.client_key = Some(name.to_string());
    }

    /// What the admitted request owes its key, settled when the request ends.
    pub fn set_charge(&mut self, charge: KeyCharge) {
        self.charge = Some(charge);
    }

    pub fn set_affinity(&mut self, affinity: Affinity) {
        self.affinity = Some(affinity);
    }

    pub fn affinity(&self) -> Option<&Affinity> {
        self.affinity.as_ref()
    }

    /// The session's binding decided where the request started.
    pub fn started_by_affinity(&mut self) {
        self.record.affinity = true;
    }

    /// The first content event of the stream that answers arrived now.
    pub fn first_token(&mut self) {
        // A resumed stream's continuation is not the answer's first token.
        if self.record.first_token_ms.is_none() {
            self.record.first_token_ms = Some(ms(self.started.elapsed()));
        }
    }

    /// When the request arrived.
    pub fn started(&self) -> Instant {
        self.started
    }

    pub fn id(&self) -> &str {
        &self.record.id
    }

    pub fn set_request(&mut self, model: Option<&str>, stream: bool) {
        self.record.model_requested = model.map(record_text);
        self.record.stream = stream;
    }

    pub fn add_wait(&mut self, d: Duration) {
        self.waits += d;
    }

    /// An attempt is about to be sent.
    pub fn begin_attempt(
        &mut self,
        endpoint: Cow<'static, str>,
        id: EndpointId,
        format: &'static str,
        model_sent: Option<&str>,
        multiplier: f64,
    ) {
        let now = Instant::now();
        self.attempt_endpoint = Some(id);
        self.record.attempts.push(AttemptRecord {
            endpoint: endpoint.clone(),
            format: Cow::Borrowed(format),
            started_ms: ms(now - self.started),
            duration_ms: 0.0,
            status: None,
            error_kind: None,
            error: None,
            classification: Classification::Cancelled,
            breaker: None,
            resume: None,
        });
        self.current = Some((self.record.attempts.len() - 1, now));
        self.record.endpoint = Some(endpoint);
        self.record.model_sent = model_sent.map(record_text);
        self.multiplier = multiplier;
        let mut endpoints = self.record.attempts.iter().map(|a| a.endpoint.as_ref());
        let first = endpoints.next();
        self.record.failed_over = endpoints.any(|e| Some(e) != first);
    }

    /// The current attempt's outcome is decided (for a committed stream: its first content).
    pub fn end_attempt(
        &mut self,
        status: Option<u16>,
        classification: Classification,
        error_kind: Option<&str>,
        error: Option<&str>,
        transition: Option<&Transition>,
    ) {
        self.note_failure(classification);
        let Some((index, began)) = self.current.take() else { return };
        let elapsed = began.elapsed();
        self.upstream += elapsed;
        if let Some(a) = self.record.attempts.get_mut(index) {
            a.duration_ms = ms(elapsed);
            a.status = status;
            a.classification = classification;
            a.error_kind = error_kind.map(str::to_string);
            a.error = error.map(|e| capped(e, MAX_TEXT));
            a.breaker = transition.map(Transition::to_string);
        }
    }

    /// A committed stream's attempt: keep its start so the final classification and duration
    /// can be set when the stream ends, while upstream time so far counts toward "upstream".
    pub fn stream_committed(&mut self, status: u16) {
        if let Some((index, began)) = self.current {
            self.upstream += began.elapsed();
            if let Some(a) = self.record.attempts.get_mut(index) {
                a.status = Some(status);
                a.classification = Classification::Success;
            }
        }
    }

    /// The stream's end decided its attempt's final outcome.
    pub fn stream_ended(
        &mut self,
        classification: Classification,
        error: Option<&str>,
        transition: Option<&Transition>,
    ) {
        self.note_failure(classification);
        let Some((index, began)) = self.current.take() else { return };
        if let Some(a) = self.record.attempts.get_mut(index) {
            a.duration_ms = ms(began.elapsed());
            a.classification = classification;
            if error.is_some() {
                a.error_kind = Some("stream_error".into());
                a.error = error.map(|e| capped(e, MAX_TEXT));
            }
            a.breaker = transition.map(Transition::to_string);
        }
    }

    /// A failed attempt at the session's bound endpoint unbinds it.
    fn note_failure(&mut self, classification: Classification) {
        let failed =
            matches!(classification, Classification::Failure | Classification::RateLimited | Classification::Transient);
        if failed && let (Some(a), Some(id)) = (self.affinity.as_mut(), self.attempt_endpoint) {
            a.failed_at(id);
        }
    }

    pub fn set_conversion(&mut self, from: &str, to: &str, losses: Vec<String>) {
        self.record.conversion = Some(conversion_label(from, to));
        self.record.losses = losses;
    }

    /// The response head is going to the client now. Returns the `Server-Timing` value.
    pub fn first_byte(&mut self) -> HeaderValue {
        let total = self.started.elapsed();
        let overhead = total.saturating_sub(self.upstream).saturating_sub(self.waits);
        self.first_byte = Some(total);
        self.overhead = Some(overhead);
        let mut value = String::with_capacity(48);
        value.push_str("gateway;dur=");
        push_ms(&mut value, overhead);
        value.push_str(", upstream;dur=");
        push_ms(&mut value, self.upstream);
        // Handed over as it is, not copied into a second buffer.
        HeaderValue::from_maybe_shared(bytes::Bytes::from(value))
            .unwrap_or_else(|_| HeaderValue::from_static("gateway"))
    }

    /// Add `x-ccmesh-request-id` and `Server-Timing` to a response about to be sent.
    pub fn tag_response(&mut self, headers: &mut HeaderMap) {
        let timing = self.first_byte();
        headers.insert(SERVER_TIMING, timing);
        if let Ok(v) = HeaderValue::from_str(&self.record.id) {
            headers.insert(X_CCMESH_REQUEST_ID, v);
        }
    }

    pub fn set_error(&mut self, source: &str, kind: Option<&str>, message: &str, upstream_body: Option<&[u8]>) {
        self.record.error = Some(RecordError {
            source: source.to_string(),
            kind: kind.map(str::to_string),
            message: capped(message, MAX_TEXT),
            upstream_body: upstream_body.map(error_excerpt),
        });
    }

    /// Finish and hand the record to the hub.
    pub fn finish(&mut self, status: u16, tokens: Tokens, model_answered: Option<String>, snapshot: &Snapshot) {
        self.record.status = status;
        self.set_usage(tokens, model_answered, snapshot);
        self.submit(None);
    }

    /// [`Self::finish`] for an answer about to be written: on a thread serving this request
    /// alone, the record is finished in a task the runtime polls after the answer has been
    /// written and flushed, so its closing (the cost, the metrics, the totals, the hand-over) no
    /// longer stands between the upstream's answer and the client (~6 µs after a pause,
    /// BENCHMARKS.md). What another request may read at once is done first: a client key's
    /// charge keeps the record finishing now (its budget is checked by the next request, maybe
    /// on another thread), the session is bound now, and the record is promised now, so that a
    /// flush or a `/metrics` scrape waits for it. A runtime shutting down drops the task unrun,
    /// and with it the closing, which finishes the record then.
    pub fn finish_answered(
        mut self: Box<Self>,
        status: u16,
        tokens: Tokens,
        model_answered: Option<String>,
        snapshot: &Arc<Snapshot>,
    ) {
        let runtime = match (self.charge.is_none() && crate::thread_load::serving_alone())
            .then(tokio::runtime::Handle::try_current)
        {
            Some(Ok(runtime)) => runtime,
            _ => return self.finish(status, tokens, model_answered, snapshot),
        };
        let Some(promise) = self.events.as_ref().map(Events::promise) else { return };
        self.record.status = status;
        self.bind_session();
        let closing = ClosingAfterAnswer {
            trail: self,
            tokens,
            model_answered,
            snapshot: snapshot.clone(),
            promise: Some(promise),
        };
        drop(runtime.spawn(async move { drop(closing) }));
    }

    /// The client went away from a committed stream: its record says so, with the usage and cost
    /// of what was delivered (what its key is charged).
    /// A committed stream's record closed, its last attempt already settled: the stream's error,
    /// its usage (with that of the attempts a resume continued) and the answering model.
    pub fn close_stream(mut self, snapshot: &Snapshot, error: Option<&str>, tokens: Tokens, model: Option<&str>) {
        if let Some(message) = error {
            self.set_error("stream", None, message, None);
        }
        self.finish(200, tokens, model.map(str::to_string), snapshot);
    }

    pub fn cut_by_client(mut self, tokens: Tokens, model_answered: Option<String>, snapshot: &Snapshot) {
        self.set_usage(tokens, model_answered, snapshot);
        // Dropped now: the record of a request that did not end by itself.
    }

    /// The usage, and the one computation of the cost: the record's `cost_usd` and the charge to
    /// the client key's budgets are this number.
    fn set_usage(&mut self, tokens: Tokens, model_answered: Option<String>, snapshot: &Snapshot) {
        self.record.tokens = tokens;
        if let Some(answered) = model_answered {
            self.record.model_answered = Some(record_text(&answered));
        }
        // Relays often answer with a name the price table does not know: fall back to the model
        // that was sent (what the endpoint bills for), then the one the client asked for, then
        // the default price when one is set.
        let r = &self.record;
        let (answered, sent) = (r.model_answered.as_deref(), r.model_sent.as_deref());
        // Each name is looked up once: the model sent is most often the one asked for, and a
        // lookup hashes the name.
        let sent = sent.filter(|m| answered != Some(*m));
        let requested = r.model_requested.as_deref().filter(|m| answered != Some(*m) && sent != Some(*m));
        let price = [answered, sent, requested]
            .into_iter()
            .flatten()
            .find_map(|m| snapshot.prices.price(m))
            .or(snapshot.settings.default_price);
        self.record.cost_usd = price.and_then(|p| cost::cost(&tokens, &p, self.multiplier));
    }

    /// A session whose request succeeded stays with the endpoint that served it (once).
    fn bind_session(&mut self) {
        let succeeded = self.record.status < 400
            && self.record.attempts.last().is_some_and(|a| a.classification == Classification::Success);
        if succeeded && let (Some(a), Some(id)) = (self.affinity.take(), self.attempt_endpoint) {
            a.served_by(id);
        }
    }

    /// Hand the record to the hub; `promise`: the one `finish_answered` took for it.
    fn submit(&mut self, promise: Option<Promise>) {
        let Some(events) = self.events.take() else { return };
        if let Some(charge) = self.charge.take() {
            charge.settle(&self.record.tokens, self.record.cost_usd);
        }
        self.bind_session();
        let total = self.started.elapsed();
        self.record.total_ms = ms(total);
        self.record.first_byte_ms = self.first_byte.map(ms);
        let overhead = self.overhead.unwrap_or_else(|| total.saturating_sub(self.upstream).saturating_sub(self.waits));
        self.record.overhead_ms = ms(overhead);
        let record = std::mem::replace(&mut self.record, Box::new(empty_record()));
        match promise {
            Some(promise) => events.request_answered_as_promised(record, promise),
            None => events.request_answered(record),
        }
    }
}

/// The rest of [`Trail::finish_answered`], done when dropped: in the task that runs once the
/// answer is written, or when a runtime shutting down drops that task unrun.
struct ClosingAfterAnswer {
    trail: Box<Trail>,
    tokens: Tokens,
    model_answered: Option<String>,
    snapshot: Arc<Snapshot>,
    promise: Option<Promise>,
}

impl Drop for ClosingAfterAnswer {
    fn drop(&mut self) {
        let model_answered = self.model_answered.take();
        self.trail.set_usage(self.tokens, model_answered, &self.snapshot);
        self.trail.submit(self.promise.take());
    }
}

impl Drop for Trail {
    /// The request ended without `finish`: the client went away (or a bug unwound us).
    fn drop(&mut self) {
        if self.events.is_none() {
            return;
        }
        if let Some((index, began)) = self.current.take()
            && let Some(a) = self.record.attempts.get_mut(index)
        {
            a.duration_ms = ms(began.elapsed());
            a.classification = Classification::Cancelled;
        }
        if self.record.status == 0 || self.record.status < 400 {
            self.record.status = 499;
        }
        if self.record.error.is_none() {
            self.record.error = Some(RecordError {
                source: "cancelled".into(),
                kind: Some("client_closed".into()),
                message: "the client closed the connection before the answer was complete".into(),
                upstream_body: None,
            });
        }
        self.submit(None);
    }
}

fn empty_record() -> RequestRecord {
    RequestRecord {
        id: String::new(),
        started_at_ms: 0,
        protocol: Cow::Borrowed(""),
        method: Cow::Borrowed(""),
        path: Cow::Borrowed(""),
        user_agent: None,
        session_id: None,
        model_requested: None,
        model_sent: None,
        model_answered: None,
        endpoint: None,
        stream: false,
        status: 0,
        error: None,
        first_byte_ms: None,
        first_token_ms: None,
        total_ms: 0.0,
        overhead_ms: 0.0,
        tokens: Tokens::default(),
        cost_usd: None,
        attempts: Vec::new(),
        failed_over: false,
        conversion: None,
        losses: Vec::new(),
        client_key: None,
        affinity: false,
    }
}

/// The first 4 KiB of an upstream error body, as text. Secrets are masked by the caller before
/// the cut (`redact`), so the cut cannot leave half a key behind.
pub fn error_excerpt(body: &[u8]) -> String {
    let cut = &body[..body.len().min(MAX_ERROR_BODY)];
    String::from_utf8_lossy(cut).into_owned()
}

/// The record's `conversion`, `{from}→{to}`, pushed rather than formatted (`format!` cost ~0.7 k
/// instructions of a converted request).
fn conversion_label(from: &str, to: &str) -> String {
    let mut label = String::with_capacity(from.len() + '→'.len_utf8() + to.len());
    label.push_str(from);
    label.push('→');
    label.push_str(to);
    label
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trail whose record goes to a writer on a new database, the writer, and the database.
    fn recorded_trail(dir: &std::path::Path) -> (Box<Trail>, crate::observe::writer::RecordSink, std::path::PathBuf) {
        let db = dir.join("ccmesh.db");
        let config = crate::observe::writer::WriterConfig::new(Arc::new(crate::clock::SystemClock));
        let (sink, handle) = crate::observe::writer::start(&db, config).unwrap();
        // The writer thread runs until the process ends; the tests read its database.
        std::mem::forget(handle);
        let headers = HeaderMap::new();
        let trail = Trail::start(
            Events::new(sink.clone()),
            std::time::SystemTime::now(),
            "claude",
            &Method::POST,
            "/v1/messages",
            &headers,
            &crate::affinity::SessionHeaders::read(&headers),
        );
        (trail, sink, db)
    }

    fn snapshot() -> Arc<Snapshot> {
        Arc::new(Snapshot {
            endpoints: Vec::new(),
            settings: Arc::new(crate::config::Settings::default()),
            prices: Arc::new(crate::observe::cost::PriceTable::builtin()),
            keys: Arc::new(crate::keys::KeySet::new(Vec::new(), false)),
        })
    }

    /// The statuses of the stored records, once every record handed over is written.
    fn stored_statuses(sink: &crate::observe::writer::RecordSink, db: &std::path::Path) -> Vec<i64> {
        assert!(sink.flush(Duration::from_secs(10)));
        let c = rusqlite::Connection::open(db).unwrap();
        let mut q = c.prepare("SELECT status FROM requests ORDER BY seq").unwrap();
        q.query_map([], |row| row.get(0)).unwrap().map(Result::unwrap).collect()
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    const TOKENS: Tokens = Tokens { input: Some(10), output: Some(5), cache_read: None, cache_write: None };

    #[test]
    fn an_answer_served_alone_is_recorded_once_the_answer_is_written_and_promised_until_then() {
        let dir = tempfile::tempdir().unwrap();
        let (trail, sink, db) = recorded_trail(dir.path());
        let runtime = runtime();
        runtime.block_on(async {
            trail.finish_answered(200, TOKENS, Some("claude-x".into()), &snapshot());
            // Nothing has yielded yet: the record is announced, not handed over.
            assert_eq!(sink.promised(), 1, "promised before the answer goes");
            assert_eq!(sink.stats().queued, 0, "and not yet queued");
            tokio::task::yield_now().await;
            assert_eq!(sink.promised(), 0, "handed over once the task ran");
        });
        assert_eq!(stored_statuses(&sink, &db), vec![200]);
    }

    #[test]
    fn a_runtime_that_drops_the_closing_unrun_still_records_the_answer_as_answered() {
        let dir = tempfile::tempdir().unwrap();
        let (trail, sink, db) = recorded_trail(dir.path());
        let runtime = runtime();
        runtime.block_on(async { trail.finish_answered(200, TOKENS, None, &snapshot()) });
        // The spawned task never ran: shutting the runtime down drops it.
        drop(runtime);
        assert_eq!(sink.promised(), 0, "the promise was kept");
        assert_eq!(stored_statuses(&sink, &db), vec![200], "answered, not cancelled (499)");
    }

    #[test]
    fn a_client_keys_charge_is_settled_before_the_answer_goes() {
        use crate::keys::limiter::{Lease, Limiter, MemoryLimiter};
        let dir = tempfile::tempdir().unwrap();
        let (mut trail, sink, db) = recorded_trail(dir.path());
        let clock: Arc<dyn crate::clock::Clock> = Arc::new(crate::clock::SystemClock);
        let limiter: Arc<dyn Limiter> = Arc::new(MemoryLimiter::new());
        let now = crate::keys::now_ms(&*clock);
        let id = limiter.admit("alice", &crate::keys::KeyLimits::default(), now, 60_000).unwrap();
        trail.charge = Some(KeyCharge::new(Lease::new(limiter.clone(), "alice", id), clock.clone()));
        let runtime = runtime();
        runtime.block_on(async {
            trail.finish_answered(200, TOKENS, None, &snapshot());
            // Before anything yields: the next request of this key, on any thread, sees it.
            let usage = limiter.usage("alice", crate::keys::now_ms(&*clock));
            assert_eq!(usage.tokens, 15, "charged before the answer goes");
            assert_eq!(usage.in_flight, 0, "and its lease given back");
            // The record's own hand-over still waits for the answer to be written.
            tokio::task::yield_now().await;
        });
        assert_eq!(stored_statuses(&sink, &db), vec![200]);
    }

    #[test]
    fn an_answer_outside_a_runtime_is_recorded_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let (trail, sink, db) = recorded_trail(dir.path());
        trail.finish_answered(502, Tokens::default(), None, &snapshot());
        assert_eq!(sink.promised(), 0);
        assert_eq!(stored_statuses(&sink, &db), vec![502]);
    }

    #[test]
    fn a_conversion_is_labelled_as_format_would() {
        for (from, to) in [("anthropic", "openai"), ("responses", "gemini"), ("", "")] {
            let label = conversion_label(from, to);
            assert_eq!(label, format!("{from}→{to}"));
            assert_eq!(label.capacity(), label.len(), "sized exactly");
        }
    }

    #[test]
    fn milliseconds_are_written_as_format_would() {
        for (us, want) in
            [(0u64, "0.000"), (7, "0.007"), (1_234, "1.234"), (90_050, "90.050"), (12_345_678, "12345.678")]
        {
            let mut out = String::new();
            push_ms(&mut out, Duration::from_micros(us));
            assert_eq!(out, want);
        }
        for us in [999, 1_000, 10_000_000, u64::MAX] {
            let mut out = String::new();
            push_ms(&mut out, Duration::from_micros(us));
            assert_eq!(out, format!("{}.{:03}", us / 1000, us % 1000));
        }
    }

    #[test]
    fn a_method_is_named_as_http_names_it_and_borrowed_when_standard() {
        for m in [Method::POST, Method::GET, Method::PUT, Method::DELETE, Method::PATCH, Method::HEAD, Method::OPTIONS]
        {
            let name = method_name(&m);
            assert_eq!(name, m.as_str());
            assert!(matches!(name, Cow::Borrowed(_)), "{m}");
        }
        let custom = Method::from_bytes(b"PURGE").unwrap();
        assert_eq!(method_name(&custom), "PURGE");
    }

    #[test]
    fn a_proxied_path_is_borrowed_and_any_other_copied_and_capped() {
        for path in ["/v1/messages", "/v1/chat/completions", "/v1/responses", "/v1/messages/count_tokens"] {
            assert!(matches!(path_name(path), Cow::Borrowed(p) if p == path), "{path}");
        }
        assert_eq!(path_name("/v1beta/models/g:generateContent"), "/v1beta/models/g:generateContent");
        let long = format!("/v1/{}", "x".repeat(MAX_TEXT * 2));
        assert_eq!(path_name(&long), capped(&long, MAX_TEXT));
    }

    /// A trail for a Messages request with these headers, handing its record to `events`.
    fn messages_trail(events: &Events, headers: &HeaderMap, sessions: &crate::affinity::SessionHeaders) -> Box<Trail> {
        Trail::start(
            events.clone(),
            std::time::SystemTime::now(),
            "claude",
            &Method::POST,
            "/v1/messages",
            headers,
            sessions,
        )
    }

    #[test]
    fn a_record_borrows_its_model_names_and_user_agent() {
        let mut headers = HeaderMap::new();
        headers.insert(axum::http::header::USER_AGENT, HeaderValue::from_static("claude-cli/2.0.31 (external, cli)"));
        let sessions = crate::affinity::SessionHeaders::read(&headers);
        let events = Events::new(crate::observe::writer::RecordSink::disabled());
        let mut trail = messages_trail(&events, &headers, &sessions);
        trail.set_request(Some("claude-sonnet-4-5"), false);
        trail.begin_attempt(Cow::Borrowed("a"), EndpointId(1), "anthropic", Some("claude-sonnet-4-5"), 1.0);
        let r = &trail.record;
        for text in [&r.user_agent, &r.model_requested, &r.model_sent] {
            assert!(matches!(text, Some(Cow::Borrowed(_))), "{text:?}");
        }
        assert_eq!(r.user_agent.as_deref(), Some("claude-cli/2.0.31 (external, cli)"));
        assert_eq!(r.model_sent.as_deref(), Some("claude-sonnet-4-5"));
        // Leaves no record behind.
        trail.events = None;
    }

    #[test]
    fn a_record_is_handed_over_once_and_later_changes_are_ignored() {
        let headers = HeaderMap::new();
        let sessions = crate::affinity::SessionHeaders::read(&headers);
        let events = Events::new(crate::observe::writer::RecordSink::disabled());
        let snapshot = Snapshot {
            endpoints: Vec::new(),
            settings: std::sync::Arc::new(crate::config::Settings::default()),
            prices: std::sync::Arc::new(crate::observe::cost::PriceTable::builtin()),
            keys: std::sync::Arc::default(),
        };
        let start = |events: &Events| messages_trail(events, &headers, &sessions);
        // A disabled sink counts each record it is handed as dropped.
        let handed = |events: &Events| events.records().dropped();
        let mut trail = start(&events);
        assert_eq!(trail.id().len(), 26);
        trail.finish(200, Tokens::default(), None, &snapshot);
        assert_eq!(handed(&events), 1);
        assert_eq!(trail.id(), "", "the record went with its id");
        trail.set_request(Some("m"), true);
        trail.set_error("gateway", None, "late", None);
        trail.finish(500, Tokens::default(), None, &snapshot);
        drop(trail);
        assert_eq!(handed(&events), 1, "finished once, dropped without a second record");
        // A trail dropped before it finished still leaves its record.
        drop(start(&events));
        assert_eq!(handed(&events), 2);
    }

    #[test]
    fn long_text_is_capped_at_a_character_boundary() {
        assert_eq!(capped("short", 10), "short");
        assert!(matches!(record_text("short"), Cow::Borrowed("short")));
        let long = "é".repeat(300);
        let cut = capped(&long, MAX_NAME);
        assert!(matches!(record_text(&long), Cow::Owned(owned) if owned == cut));
        assert!(cut.len() <= MAX_NAME && cut.ends_with('…'), "{} bytes", cut.len());
        assert_eq!(capped(&"x".repeat(5_000_000), MAX_NAME).len(), MAX_NAME);
    }

    #[test]
    fn error_bodies_are_cut_to_4_kib() {
        let body = vec![b'x'; 10_000];
        assert_eq!(error_excerpt(&body).len(), 4096);
    }
}
