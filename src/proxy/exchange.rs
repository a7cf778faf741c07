//! One attempt (SPEC §3–§6): build the upstream request (the client's bytes, a rewritten model,
//! or a converted body), send it under its timeouts, read the answer — in full, or for a stream
//! up to its first content event with the preamble held back — and classify it. The breaker
//! and the decision trail learn the outcome here; what the client gets is decided by the loop.

use std::sync::Arc;

use axum::http::{HeaderValue, StatusCode};
use bytes::Bytes;
use http_body_util::BodyExt;

use super::conversion::{self, ContextSource};
use super::observer::{Committed, StreamObserver, Transform};
use super::outcome::{
    self, AttemptOutcome, NetworkErrorKind, Next, Verdict, classify_network_error, classify_status, status_note,
};
use super::request::{Inbound, splice_model};
use super::run::{Buffered, Exchanged, Run, Stream};
use super::upstream::{UpstreamBodyError, UpstreamResponse, join_url, read_body, request_headers, response_headers};
use crate::breaker::Permit;
use crate::breaker::retry_after::parse_retry_after;
use crate::clock::Clock;
use crate::convert::ir::{ConvertError, EncodeContext};
use crate::convert::{StreamConversion, StreamEncoder, upstream_path};
use crate::observe::usage;
use crate::protocol::errors::{ErrorKind, GatewayError};
use crate::protocol::{Format, Route};
use crate::snapshot::LiveEndpoint;

/// Largest preamble held back before giving up on finding content and relaying anyway.
const MAX_HELD_PREAMBLE: usize = 64 * 1024;

/// The next data chunk of an upstream body (trailers skipped), `None` at its end.
async fn next_data(body: &mut super::upstream::UpstreamBody) -> Option<Result<Bytes, hyper::Error>> {
    loop {
        match body.frame().await? {
            Ok(frame) => match frame.into_data() {
                Ok(data) => return Some(Ok(data)),
                Err(_trailers) => continue,
            },
            Err(e) => return Some(Err(e)),
        }
    }
}

/// SPEC §3–4: only a reset or an EOF before the response headers is worth asking the same
/// endpoint again; a refused connection, a failed lookup, a TLS error, any timeout move on at
/// once and take that endpoint out of the rest of the request (asking a silent endpoint again
/// would cost the client a second timeout).
fn before_headers(kind: NetworkErrorKind) -> AttemptOutcome {
    match kind {
        NetworkErrorKind::Reset | NetworkErrorKind::UnexpectedEof => AttemptOutcome::TRANSIENT,
        _ => AttemptOutcome::EXCLUDED,
    }
}

/// An answer that cannot be used: asking that endpoint again cannot help.
const UNUSABLE: AttemptOutcome = AttemptOutcome::EXCLUDED;

/// A Gemini client's request on a native endpoint, and how its stream is framed.
impl Run {
    /// The URL for an endpoint reached without conversion: the client's path and query, except
    /// that a Gemini client's path carries the model (`model_map`, `@NAME/` removed) and its
    /// JSON-array stream is asked for as SSE.
    pub(super) fn native_url(&self, endpoint: &LiveEndpoint) -> String {
        let config = &endpoint.config;
        let (inbound, query) = (&self.inbound, self.inbound.query.as_deref());
        let Some(call) = &inbound.gemini else {
            return join_url(&config.base_url, config.format, &inbound.rest, query);
        };
        let model = inbound.model.as_deref().unwrap_or_default();
        let rest =
            super::gemini::native_rest(call, &inbound.rest, model, config.map_model(model), inbound.model_prefixed);
        join_url(&config.base_url, config.format, &rest, super::gemini::native_query(call, query).as_deref())
    }

    /// How a streamed answer reaches the client: unchanged, converted from the endpoint's
    /// format, or — for a Gemini client that wants the JSON array — framed as the array.
    pub(super) fn stream_transform(&mut self, format: Format, converting: bool) -> Transform {
        let json_array = self.inbound.gemini.as_ref().is_some_and(super::gemini::GeminiCall::json_array);
        match (converting, json_array) {
            (false, false) => Transform::Pass,
            (false, true) => Transform::Convert(Box::new(StreamConversion::gemini_json_array())),
            (true, json_array) => {
                let ctx = self.encode_context();
                let conversion = if json_array {
                    let encoder = StreamEncoder::Gemini(crate::convert::gemini::StreamEncoder::json_array(ctx));
                    StreamConversion::with_encoder(format, encoder)
                } else {
                    StreamConversion::new(format, self.conversion.client, ctx)
                };
                Transform::Convert(Box::new(conversion))
            }
        }
    }

    /// The content type of a stream the gateway writes for the client.
    pub(super) fn client_stream_content_type(&self) -> &'static str {
        if self.inbound.gemini.as_ref().is_some_and(super::gemini::GeminiCall::json_array) {
            "application/json"
        } else {
            "text/event-stream"
        }
    }
}

impl Run {
    /// The body to send to `endpoint`: the client's bytes unless its model must change.
    fn native_body(&mut self, endpoint: &LiveEndpoint) -> Bytes {
        let (Some(model), Some(span)) = (self.inbound.model.as_deref(), self.inbound.model_span.clone()) else {
            return self.inbound.body.clone();
        };
        let target = endpoint.config.map_model(model);
        if target == model && !self.inbound.model_prefixed {
            return self.inbound.body.clone();
        }
        if let Some((_, body)) = self.rewritten.iter().find(|(m, _)| m == target) {
            return body.clone();
        }
        let body = splice_model(&self.inbound.body, span, target);
        self.rewritten.push((target.to_string(), body.clone()));
        body
    }

    /// The converted body for an endpoint of another format.
    pub(super) fn converted_body(&mut self, endpoint: &LiveEndpoint) -> Result<Bytes, ConvertError> {
        let model = self.inbound.model.as_deref().unwrap_or_default();
        let target = endpoint.config.map_model(model);
        self.conversion.body(&self.inbound.body, endpoint.config.format, target)
    }

    pub(super) fn encode_context(&mut self) -> EncodeContext {
        let source = context_source(&self.inbound, &*self.gw.clock);
        self.conversion.context(source.client_body, source.requested_model, source.now_unix).clone()
    }

    /// Record an attempt's outcome in the endpoint's breaker and in the decision trail.
    fn settle(
        &mut self,
        permit: Permit,
        outcome: AttemptOutcome,
        note: Option<&str>,
        status: Option<u16>,
        error_kind: Option<&str>,
    ) {
        let transition = permit.record(outcome.breaker(), note, self.snapshot.settings.breaker(self.protocol()));
        if let Some(t) = self.trail.as_mut() {
            t.end_attempt(status, outcome.classification(), error_kind, note, transition.as_ref());
        }
    }

    /// An attempt that got no usable answer: settled, and reported to the loop.
    fn no_answer(
        &mut self,
        permit: Permit,
        outcome: AttemptOutcome,
        kind: NetworkErrorKind,
        note: String,
        status: Option<u16>,
        error_kind: &str,
    ) -> Exchanged {
        self.settle(permit, outcome, Some(&note), status, Some(error_kind));
        Exchanged::NoAnswer { outcome, kind, detail: note }
    }

    /// SPEC §15.1: the attempt in progress is cut short by the request's total deadline. That
    /// says nothing about the endpoint: neutral for its breaker.
    fn cut_by_deadline(&mut self, permit: Permit) -> Exchanged {
        let note = "cut short by the request's total deadline".to_string();
        self.no_answer(permit, AttemptOutcome::CUT_BY_DEADLINE, NetworkErrorKind::Timeout, note, None, "total_deadline")
    }

    /// SPEC §4 for an answer read in full: the user's rules first, then the built-in table,
    /// refined by what the body says (a model the endpoint does not know, a prompt too long for
    /// it, a 2xx that is no answer). `Some(message)` with a 2xx that is no answer.
    fn classify_answer(
        &self,
        status: u16,
        body: &[u8],
        endpoint: &LiveEndpoint,
        envelope: Option<&usage::Envelope>,
    ) -> (AttemptOutcome, Option<(bool, String)>) {
        let settings = &self.snapshot.settings;
        if let Some(rule) = crate::config::retry_rules::first_match(&settings.retry_rules, status, body) {
            return (outcome::from_rule(rule, status), None);
        }
        let base = classify_status(status, self.inbound.route, settings.auth_errors_fail_over);
        let inference = matches!(self.inbound.route, Route::Protocol(_));
        if base.is_success() {
            if inference && let Some((rate_limited, message)) = outcome::not_an_answer(body, envelope) {
                let outcome = if rate_limited { AttemptOutcome::rate_limited(None) } else { AttemptOutcome::FAILURE };
                return (outcome, Some((rate_limited, message)));
            }
            return (base, None);
        }
        if inference {
            let requested = self.inbound.model.as_deref().unwrap_or_default();
            let sent = endpoint.config.map_model(requested);
            if outcome::model_unknown(status, body, &[requested, sent]) {
                return (AttemptOutcome::ELSEWHERE, None);
            }
            if settings.context_window_fallback && outcome::context_window_exceeded(status, body) {
                return (AttemptOutcome::ELSEWHERE, None);
            }
        }
        (base, None)
    }

    /// Send one attempt to `endpoint` and classify what came back.
    pub(super) async fn exchange(&mut self, endpoint: &Arc<LiveEndpoint>, permit: Permit, number: usize) -> Exchanged {
        let protocol = self.protocol();
        // Copied out rather than held through a clone of the shared settings (see `attempt::run`).
        let settings = &self.snapshot.settings;
        let timeouts = settings.timeouts(protocol).clone();
        let auth_errors_fail_over = settings.auth_errors_fail_over;
        let max_sse_event_bytes = settings.limits.max_sse_event_bytes;
        let max_upstream_body_bytes = settings.limits.max_upstream_body_bytes;
        let format = endpoint.config.format;
        let converting =
            matches!(self.inbound.route, Route::Protocol(_) | Route::CountTokens(_)) && self.conversion.needed(format);
        let (url, body) = if converting {
            let body = match self.converted_body(endpoint) {
                Ok(b) => b,
                // Candidates were checked before the loop; a failure here is a bug, not the
                // endpoint's fault: neutral, try the next one.
                Err(e) => {
                    drop(permit);
                    return Exchanged::NoAnswer {
                        outcome: AttemptOutcome { verdict: Verdict::Neutral, next: Next::NextExcluding },
                        kind: NetworkErrorKind::Other,
                        detail: e.message,
                    };
                }
            };
            // Gemini names the (mapped) model and the method in the path.
            let model = endpoint.config.map_model(self.inbound.model.as_deref().unwrap_or_default());
            let path = upstream_path(format, model, self.conversion.call(self.inbound.stream));
            (join_url(&endpoint.config.base_url, format, &path, None), body)
        } else {
            (self.native_url(endpoint), self.native_body(endpoint))
        };
        // A resume sends the same request with the delivered text after it (`resume.rs`).
        let body = match &mut self.resuming {
            None => body,
            Some(resuming) => {
                let prefill = resuming.prefill
                    && format == Format::Anthropic
                    && !serde_json::from_slice(&body).is_ok_and(|v| super::resume::anthropic_thinking(&v));
                resuming.prefilled = prefill;
                match super::resume::continuation_body(format, &body, &resuming.delivered.text, prefill) {
                    Ok(b) => b,
                    Err(e) => {
                        drop(permit);
                        let outcome = AttemptOutcome { verdict: Verdict::Neutral, next: Next::NextExcluding };
                        return Exchanged::NoAnswer { outcome, kind: NetworkErrorKind::Other, detail: e };
                    }
                }
            }
        };
        if let Some(resuming) = &self.resuming
            && let Some(t) = self.trail.as_mut()
        {
            let how = if resuming.prefilled { "an assistant prefill" } else { "a user turn asking to continue" };
            t.note_resume(&format!(
                "resumes the cut stream: {} characters carried over as {how}",
                resuming.delivered.text.chars().count()
            ));
        }
        let headers = request_headers(&self.inbound.headers, endpoint, &self.inbound.hop, converting);
        let sent_at = tokio::time::Instant::now();
        let head_limit = if self.inbound.stream { timeouts.first_byte } else { timeouts.request };
        // Built in its heap slot: held inline, the send's state was copied twice on its way into
        // the timeout and the attempt's future.
        let slot = Box::new_uninit();
        let request = Box::into_pin(Box::write(
            slot,
            self.gw.client.send(self.inbound.method.clone(), url, endpoint.origin.as_ref(), headers, body),
        ));

        let response = match tokio::time::timeout_at((sent_at + head_limit).min(self.deadline), request).await {
            Err(_) if sent_at + head_limit > self.deadline => return self.cut_by_deadline(permit),
            Err(_) => {
                let note = format!("no response headers within {:.1} s", head_limit.as_secs_f64());
                let kind = NetworkErrorKind::Timeout;
                return self.no_answer(permit, before_headers(kind), kind, note, None, "timeout");
            }
            Ok(Err(e)) => {
                let kind = classify_network_error(&e);
                let note = kind.describe().to_string();
                return self.no_answer(permit, before_headers(kind), kind, note, None, kind.as_str());
            }
            Ok(Ok(r)) => r,
        };

        let status = response.status();
        // Provisional, from the head; an answer read in full is classified again with its body.
        let outcome = classify_status(status.as_u16(), self.inbound.route, auth_errors_fail_over);
        let is_sse = response
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));

        if outcome.is_success() && is_sse {
            let transform = if let Some(delivered) = self.resuming.as_ref().map(|r| r.delivered.clone()) {
                let ctx = EncodeContext { kept_ids: delivered.kept_ids.clone(), ..self.encode_context() };
                let client = self.conversion.client;
                let encoder = super::resume::primed_encoder(StreamEncoder::new(client, ctx), &delivered);
                let splice = Box::new(super::resume::Splice::new(&delivered));
                Transform::Convert(Box::new(StreamConversion::spliced(format, encoder, splice)))
            } else {
                self.stream_transform(format, converting)
            };
            let observer = StreamObserver::new(format, Format::native_to(protocol), transform, max_sse_event_bytes);
            return self.hold_preamble(endpoint, permit, response, observer, sent_at, number).await;
        }

        // Everything else is read in full: error bodies are small, and a non-streaming answer
        // that breaks mid-body can still fail over invisibly.
        let (head, response_body) = response.into_parts();
        let mut headers = head.headers;
        let body_deadline =
            sent_at + if self.inbound.stream && !outcome.is_success() { timeouts.first_byte } else { timeouts.request };
        let limit = max_upstream_body_bytes;
        let code = Some(status.as_u16());
        let mut body = match tokio::time::timeout_at(body_deadline.min(self.deadline), read_body(response_body, limit))
            .await
        {
            Err(_) if body_deadline > self.deadline => return self.cut_by_deadline(permit),
            Ok(Ok(b)) => b,
            Ok(Err(UpstreamBodyError::TooLarge { limit })) => {
                // Reading stops at the limit: the endpoint's answer cannot be relayed, and the
                // gateway's memory is not the upstream's to fill.
                let note =
                    format!("the upstream's answer is larger than limits.max_upstream_body_bytes ({limit} bytes)");
                return self.no_answer(permit, UNUSABLE, NetworkErrorKind::BadAnswer, note, code, "response_too_large");
            }
            // After the headers nothing is transient any more: the next endpoint.
            Ok(Err(UpstreamBodyError::Network(e))) => {
                let kind = classify_network_error(&e);
                let note = format!("{} while reading the body", kind.describe());
                return self.no_answer(permit, AttemptOutcome::EXCLUDED, kind, note, code, kind.as_str());
            }
            Err(_) => {
                let note = "the response body did not complete in time".to_string();
                let kind = NetworkErrorKind::Timeout;
                return self.no_answer(permit, AttemptOutcome::EXCLUDED, kind, note, code, "timeout");
            }
        };
        // A 2xx answer is read once: for whether it is an answer at all and for its usage; a
        // converted one, by its decoder, which also gives what the client's answer is made from.
        let mut decoded = None;
        let read = status.is_success().then(|| {
            match converting.then(|| self.conversion.decode_answer(format, &body)).flatten() {
                Some((response, read)) => {
                    decoded = Some(response);
                    read
                }
                None => usage::read_answer(format, &body),
            }
        });
        let envelope = read.as_ref().and_then(|r| r.envelope.as_ref());
        let (mut outcome, not_an_answer) = self.classify_answer(status.as_u16(), &body, endpoint, envelope);
        if let Some(resuming) = &mut self.resuming
            && resuming.prefilled
            && status == StatusCode::BAD_REQUEST
        {
            // Refused as a prefill (some models and relays do): once more as a user turn, the
            // two together one resume attempt, neutral for the endpoint (SPEC §15.3).
            resuming.prefill = false;
            resuming.retry_without_prefill = true;
            outcome = AttemptOutcome { verdict: Verdict::Neutral, next: Next::Repeat };
        }
        if !outcome.is_success() {
            // What the upstream said, for whoever debugs it; the log writer masks any key in it.
            tracing::debug!(
                event = "upstream_error_body",
                endpoint = %endpoint.config.name,
                status = status.as_u16(),
                body = %crate::proxy::trail::error_excerpt(&body),
                "upstream answered with an error"
            );
        }
        // Usage and the answering model come from the upstream's own answer, before conversion.
        let answered = outcome.is_success().then(|| match read {
            Some(read) => (read.tokens, read.model),
            None => usage::from_body(format, &body),
        });
        let looped = status == StatusCode::LOOP_DETECTED
            && headers
                .get(super::request::X_CCMESH_LOOP)
                .is_some_and(|v| v.as_bytes() == self.gw.instance_id.as_bytes());
        let mut status = status;
        if let Some((rate_limited, message)) = not_an_answer {
            // A 2xx that is no answer: if it is the last one, the client gets a native error
            // quoting the upstream, not the upstream's garbage.
            let (kind, code) = if rate_limited {
                (ErrorKind::RateLimited, StatusCode::TOO_MANY_REQUESTS)
            } else {
                (ErrorKind::BadGateway, StatusCode::BAD_GATEWAY)
            };
            body = Bytes::from(GatewayError::new(kind, "upstream_not_an_answer", message).body(protocol).to_string());
            status = code;
            headers = axum::http::HeaderMap::new();
            headers.insert(axum::http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        } else if looped {
            // Our own request came back to us: name the endpoint that points here, and do not
            // send it there again. The body is made in the client's protocol, so it is not
            // converted.
            let name = &endpoint.config.name;
            let e = GatewayError::new(
                ErrorKind::LoopDetected,
                "loop_detected",
                format!(
                    "loop detected: endpoint {name} points back at this gateway; change its base_url with `ccmesh endpoint edit {name} --base-url URL`"
                ),
            );
            body = Bytes::from(e.body(protocol).to_string());
            outcome = UNUSABLE;
            headers = axum::http::HeaderMap::new();
            headers.insert(axum::http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        } else if converting {
            let client = self.conversion.client;
            if outcome.is_success() {
                let source = context_source(&self.inbound, &*self.gw.clock);
                match self.conversion.success_body(format, &body, decoded.take(), source) {
                    Ok(converted) => body = converted,
                    Err(e) => {
                        // A 2xx we cannot read is no answer at all: this endpoint's failure.
                        let note = format!("the upstream's answer is not a valid {format} response: {}", e.message);
                        let kind = NetworkErrorKind::BadAnswer;
                        return self.no_answer(permit, UNUSABLE, kind, note, code, "invalid_response");
                    }
                }
            } else {
                body = conversion::error_body(format, client, status.as_u16(), &body);
            }
            headers = conversion::converted_headers(headers, "application/json");
        }
        let retry_after = headers
            .get(axum::http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, self.gw.clock.wall()));
        let outcome = outcome.with_retry_after(retry_after);
        // A client's bad request says nothing about the endpoint; a rejected key does.
        let note = match outcome.verdict {
            Verdict::Success => None,
            Verdict::Neutral => (status == StatusCode::UNAUTHORIZED).then(|| status_note(401)),
            Verdict::Failure | Verdict::RateLimited { .. } => Some(status_note(status.as_u16())),
        };
        let probe = permit.is_probe();
        self.settle(permit, outcome, note.as_deref(), code, None);
        if outcome == AttemptOutcome::NEUTRAL
            && self.inbound.route.is_count_tokens()
            && matches!(status.as_u16(), 404 | 405 | 501)
        {
            return Exchanged::Estimate;
        }
        let usage = if outcome.is_success() { answered } else { None };
        Exchanged::Answer { answer: Buffered { status, headers, body }, outcome, usage, probe }
    }

    /// SPEC §6: read the stream until its first content event, holding back the preamble, so
    /// that anything that goes wrong before that point can still fail over invisibly.
    async fn hold_preamble(
        &mut self,
        endpoint: &Arc<LiveEndpoint>,
        permit: Permit,
        response: UpstreamResponse,
        mut observer: StreamObserver,
        sent_at: tokio::time::Instant,
        number: usize,
    ) -> Exchanged {
        let protocol = self.protocol();
        let timeouts = self.snapshot.settings.timeouts(protocol).clone();
        let (head, mut upstream) = response.into_parts();
        let status = head.status;
        let code = Some(status.as_u16());
        let mut headers = response_headers(head.headers);
        if observer.converts() {
            headers = conversion::converted_headers(headers, self.client_stream_content_type());
        }
        let mut held: Vec<Bytes> = Vec::new();
        let mut received = 0usize;
        let first_byte_deadline = sent_at + timeouts.first_byte;
        // SPEC §6: the first content event within first_token_timeout, or the next endpoint.
        let first_token_deadline = sent_at + timeouts.first_token();
        // Until the stream is committed the total deadline holds too (SPEC §15.1).
        let deadline = self.deadline;

        loop {
            let deadline_for = match (received == 0, timeouts.idle) {
                (true, _) => Some(first_byte_deadline),
                (false, Some(idle)) => Some(tokio::time::Instant::now() + idle),
                (false, None) => None,
            };
            let deadline_for = Some(deadline_for.map_or(first_token_deadline, |d| d.min(first_token_deadline)));
            let cut_by_deadline = deadline_for.is_none_or(|d| d > deadline);
            let next =
                tokio::time::timeout_at(deadline_for.map_or(deadline, |d| d.min(deadline)), next_data(&mut upstream))
                    .await;
            if next.is_err() && cut_by_deadline {
                return self.cut_by_deadline(permit);
            }
            let kind = NetworkErrorKind::Timeout;
            match next {
                Err(_) if tokio::time::Instant::now() >= first_token_deadline && received > 0 => {
                    let note = format!(
                        "no content within the first-token timeout ({:.1} s); the upstream sent only its preamble",
                        timeouts.first_token().as_secs_f64()
                    );
                    return self.no_answer(permit, AttemptOutcome::EXCLUDED, kind, note, code, "first_token_timeout");
                }
                Err(_) if received == 0 => {
                    let which = if first_token_deadline < first_byte_deadline { "first-token" } else { "first-byte" };
                    let limit = timeouts.first_byte.min(timeouts.first_token()).as_secs_f64();
                    let note = format!("no stream data within the {which} timeout ({limit:.1} s)");
                    return self.no_answer(permit, AttemptOutcome::EXCLUDED, kind, note, code, kind.as_str());
                }
                Err(_) => {
                    let note = "the stream went idle before any content".to_string();
                    return self.no_answer(permit, AttemptOutcome::EXCLUDED, kind, note, code, kind.as_str());
                }
                Ok(Some(Err(e))) => {
                    let kind = classify_network_error(&e);
                    let note = format!("{} before any content", kind.describe());
                    return self.no_answer(permit, AttemptOutcome::EXCLUDED, kind, note, code, kind.as_str());
                }
                Ok(None) => {
                    if observer.watch.terminal {
                        break;
                    }
                    let note = "the stream ended before any content".to_string();
                    let kind = NetworkErrorKind::UnexpectedEof;
                    return self.no_answer(permit, AttemptOutcome::FAILURE, kind, note, code, kind.as_str());
                }
                Ok(Some(Ok(chunk))) => {
                    received += chunk.len();
                    if let Some(out) = observer.chunk(chunk) {
                        held.push(out);
                    }
                    if let Some(problem) = observer.watch.malformed.clone() {
                        let note = format!("{problem}, before any content");
                        let kind = NetworkErrorKind::BadAnswer;
                        return self.no_answer(permit, UNUSABLE, kind, note, code, kind.as_str());
                    }
                    if let Some(error) = observer.watch.error.clone() {
                        // An error event before any content: a failure of this endpoint that the
                        // client never sees (the common way providers report overload). If it is
                        // the last attempt, the client gets it as an HTTP error of its protocol.
                        let note = format!("upstream stream error before content: {}", error.message);
                        let outcome =
                            super::outcome::stream_end(Some(error.rate_limited), super::outcome::StreamEnd::Broken);
                        let (kind, status) = if error.rate_limited {
                            (ErrorKind::RateLimited, StatusCode::TOO_MANY_REQUESTS)
                        } else {
                            (ErrorKind::BadGateway, StatusCode::BAD_GATEWAY)
                        };
                        let probe = permit.is_probe();
                        self.settle(permit, outcome, Some(&note), Some(200), Some("stream_error"));
                        let body = Bytes::from(
                            GatewayError::new(kind, "upstream_stream_error", note).body(protocol).to_string(),
                        );
                        let mut headers = axum::http::HeaderMap::new();
                        headers.insert(axum::http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                        let answer = Buffered { status, headers, body };
                        return Exchanged::Answer { answer, outcome, usage: None, probe };
                    }
                    if observer.watch.content || received > MAX_HELD_PREAMBLE {
                        if observer.watch.content
                            && let Some(t) = self.trail.as_mut()
                        {
                            t.first_token();
                        }
                        break;
                    }
                }
            }
        }

        let committed = Committed {
            gw: self.gw.clone(),
            snapshot: self.snapshot.clone(),
            breaker_settings: self.snapshot.settings.breaker(protocol).clone(),
            idle_timeout: timeouts.idle,
            max_duration: timeouts.max_stream_duration,
            held,
            observer,
            rotation: self.rotation_update(endpoint.config.id),
            trail: None,
        };
        Exchanged::Committed(Box::new(Stream {
            status,
            headers,
            endpoint: endpoint.record_name.clone(),
            endpoint_id: endpoint.config.id,
            attempt: number,
            committed,
            permit,
            upstream,
        }))
    }
}

/// What the conversion's encode context is built from: the client's request and model, and now.
fn context_source<'a>(inbound: &'a Inbound, clock: &dyn Clock) -> ContextSource<'a> {
    let now_unix = clock.wall().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let requested_model = inbound.model.as_deref().unwrap_or_default();
    ContextSource { client_body: &inbound.body, requested_model, now_unix }
}
