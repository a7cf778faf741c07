//! The attempt loop (SPEC §3): ask a breaker for a permit, send, classify, record, and either
//! answer the client or move on — the same endpoint again after a transient network error, the
//! next candidate after an HTTP failure — until a success, a neutral answer, the attempt cap,
//! or no candidate that will take the request.

use std::pin::pin;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::BodyExt;

use super::Inbound;
use super::backoff::{WhenBlocked, when_blocked};
use super::classify::{Class, NetworkErrorKind, classify_network_error, classify_status, outcome_for, status_note};
use super::conversion::{self, RequestConversion};
use super::relay::{self, Committed, StreamObserver, Transform};
use super::request::splice_model;
use super::trail::Trail;
use super::upstream::{UpstreamBodyError, UpstreamResponse, join_url, read_body, request_headers, response_headers};
use crate::breaker::retry_after::parse_retry_after;
use crate::breaker::{Denied, Outcome, Permit};
use crate::convert::ir::{ConvertError, EncodeContext};
use crate::convert::{self, StreamConversion, count_tokens, upstream_path};
use crate::endpoint::EndpointId;
use crate::gateway::{Gateway, LiveEndpoint, Snapshot};
use crate::observe::record::{Classification, Tokens};
use crate::observe::usage;
use crate::protocol::Format;
use crate::protocol::Route;
use crate::protocol::errors::{ErrorKind, GatewayError};
use crate::routing;

/// Largest preamble held back before giving up on finding content and relaying anyway.
const MAX_HELD_PREAMBLE: usize = 64 * 1024;

/// An upstream HTTP answer read in full.
struct Buffered {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: Bytes,
}

/// What one attempt produced.
enum AttemptResult {
    /// The client's answer is decided (success or neutral); the breaker was told (or the relay
    /// will tell it when the stream ends).
    Answer(Response),
    /// The endpoint failed with an HTTP answer; kept in case it is the last one. `probe`: the
    /// attempt was a half-open breaker's probe.
    HttpFailure { answer: Buffered, class: Class, probe: bool },
    /// No usable HTTP answer: network error, timeout, or a stream that failed before content.
    NoAnswer { kind: NetworkErrorKind, detail: String, transient: bool },
}

/// Context shared by every attempt of one client request.
struct Run {
    gw: Arc<Gateway>,
    snapshot: Arc<Snapshot>,
    inbound: Inbound,
    explicit: bool,
    /// The rotation state this request saw when it started (for compare-and-set).
    seen_current: Option<EndpointId>,
    start_endpoint: Option<EndpointId>,
    /// Bodies with a rewritten model, per target model, so a retry does not redo the splice.
    rewritten: Vec<(String, Bytes)>,
    /// Conversion state for endpoints of another format.
    conversion: RequestConversion,
    /// The decision trail; moves into the relay when a stream is committed.
    trail: Option<Trail>,
    /// SPEC §15.1: the request's total deadline, from its arrival, for the attempts' timers.
    deadline: tokio::time::Instant,
    /// The same deadline on the gateway's clock, for the waits.
    deadline_clock: std::time::Instant,
    /// An attempt was cut short by the total deadline.
    deadline_passed: bool,
    /// Endpoints out of the rest of this request: asking them again cannot help (their answer
    /// could not be used, or the request looped back to this gateway).
    excluded: Vec<EndpointId>,
}

/// The next data chunk of an upstream body (trailers skipped), `None` at its end.
async fn next_data(body: &mut hyper::body::Incoming) -> Option<Result<Bytes, hyper::Error>> {
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

pub async fn run(
    gw: Arc<Gateway>,
    snapshot: Arc<Snapshot>,
    inbound: Inbound,
    mut candidates: Vec<Arc<LiveEndpoint>>,
    explicit: bool,
    trail: Trail,
) -> Response {
    let protocol = inbound.route.protocol();
    let settings = snapshot.settings.clone();
    let clock = gw.clock.clone();
    let total = settings.timeouts(protocol).total;
    let deadline = trail.started() + total;
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    let deadline_clock = clock.now() + left;
    // One budget per request for every wait (SPEC §15.1), and never past the total deadline.
    let budget_deadline = (clock.now() + settings.rate_limit_backoff_budget).min(deadline_clock);
    let seen_current = gw.rotation.current(protocol);
    let conversion = RequestConversion::new(Format::native_to(protocol), inbound.route == Route::CountTokens);
    let mut run = Run {
        gw: gw.clone(),
        snapshot,
        inbound,
        explicit,
        seen_current,
        start_endpoint: None,
        rewritten: Vec::new(),
        conversion,
        trail: Some(trail),
        deadline,
        deadline_clock,
        deadline_passed: false,
        excluded: Vec::new(),
    };

    // Endpoints of another format need the request converted. Do it once per format and
    // model now: one the request cannot be converted for is not a candidate, and if none is
    // left the client learns exactly which feature could not be converted (SPEC §1), rather than
    // a generic failure from an upstream that was sent something it cannot read.
    if matches!(run.inbound.route, Route::Protocol(_)) {
        let mut refused: Option<(Format, ConvertError)> = None;
        let mut kept = Vec::with_capacity(candidates.len());
        for endpoint in candidates {
            if run.conversion.needed(endpoint.config.format)
                && let Err(e) = run.converted_body(&endpoint)
            {
                refused.get_or_insert((endpoint.config.format, e));
                continue;
            }
            kept.push(endpoint);
        }
        candidates = kept;
        if candidates.is_empty()
            && let Some((format, e)) = refused
        {
            let message = format!(
                "this request cannot be sent to a {format}-format endpoint: {} (field {}); name a {}-format endpoint or remove the feature",
                e.message, e.field, run.conversion.client
            );
            return run.finish_error(
                GatewayError::new(ErrorKind::InvalidRequest, "conversion_unsupported", message),
                0,
                None,
            );
        }
    }
    if run.inbound.route == Route::CountTokens && !candidates.iter().any(|e| convert::counts_tokens(e.config.format)) {
        return run.local_token_count(None, 0).await;
    }
    if run.inbound.route == Route::CountTokens {
        candidates.retain(|e| convert::counts_tokens(e.config.format));
    }

    // Seed 001's failover switch (SPEC §2 step 1): off, a request goes only to the endpoint the
    // strategy starts at, and is treated like an explicit one there (no breaker filter, no probe
    // permit; outcomes recorded), its HTTP failures returned at once.
    let pinned = !explicit && !settings.failover_enabled(protocol) && !candidates.is_empty();
    if pinned {
        let ids: Vec<EndpointId> = candidates.iter().map(|e| e.config.id).collect();
        let start = run.start_index(&ids, seen_current);
        run.start_endpoint = Some(ids[start]);
        candidates = vec![candidates[start].clone()];
    }
    let explicit = explicit || pinned;

    let mut attempts = 0usize;
    let mut cap: Option<usize> = None;
    let mut last_answer: Option<Buffered> = None;
    let mut last_was_answer = false;
    let mut last_was_probe_429 = false;
    let mut last_network: Option<(NetworkErrorKind, String)> = None;
    let mut last_endpoint: Option<String> = None;
    let mut first_pass = true;

    'choose: loop {
        // Arm the wake-up before reading breaker state, so a change in between is not missed.
        let mut changed = pin!(gw.breakers.changed().notified());
        changed.as_mut().enable();

        // SPEC §2 step 4: drop endpoints that are open and cooling down (no permit taken).
        let mut denials = Vec::new();
        let live: Vec<&Arc<LiveEndpoint>> = if explicit {
            candidates.iter().collect()
        } else {
            candidates
                .iter()
                .filter(|e| match e.breaker.routable() {
                    Ok(()) => true,
                    Err(d) => {
                        denials.push(d);
                        false
                    }
                })
                .collect()
        };

        let blocked = if live.is_empty() {
            Some(denials)
        } else {
            let cap = *cap.get_or_insert_with(|| routing::attempt_cap(live.len(), explicit));
            let ids: Vec<EndpointId> = live.iter().map(|e| e.config.id).collect();
            let start = if pinned {
                0
            } else if first_pass {
                run.start_index(&ids, seen_current)
            } else {
                // After a backoff, begin where rotation says, like a new request would.
                routing::start_index(settings.routing_strategy, &ids, gw.rotation.current(protocol), None, 0)
            };
            if first_pass && !pinned {
                run.start_endpoint = Some(ids[start]);
            }
            first_pass = false;

            let mut index = start;
            let mut denied_in_a_row: Vec<Denied> = Vec::new();
            let mut skipped_in_a_row = 0usize;
            let mut same_endpoint_failures = 0u32;
            loop {
                if attempts >= cap {
                    break 'choose;
                }
                if run.deadline_passed || (attempts > 0 && tokio::time::Instant::now() >= run.deadline) {
                    return run.deadline_over(last_answer.take(), attempts, last_endpoint.as_deref());
                }
                let endpoint = live[index];
                if run.excluded.contains(&endpoint.config.id) {
                    skipped_in_a_row += 1;
                    if skipped_in_a_row >= live.len() {
                        break 'choose;
                    }
                    index = routing::advance(index, live.len());
                    same_endpoint_failures = 0;
                    continue;
                }
                skipped_in_a_row = 0;
                let permit = match endpoint.breaker.try_acquire(&endpoint.config.name, explicit) {
                    Ok(p) => p,
                    Err(denied) => {
                        denied_in_a_row.push(denied);
                        if denied_in_a_row.len() >= live.len() {
                            break;
                        }
                        index = routing::advance(index, live.len());
                        same_endpoint_failures = 0;
                        continue;
                    }
                };
                denied_in_a_row.clear();
                attempts += 1;
                last_endpoint = Some(endpoint.config.name.clone());
                run.begin_attempt(endpoint);
                match run.attempt(endpoint, permit, attempts).await {
                    AttemptResult::Answer(response) => return response,
                    AttemptResult::HttpFailure { answer, .. } if pinned => {
                        // Failover is off: the endpoint's answer is the answer.
                        return run.finish_with_answer(Some(answer), attempts, last_endpoint.as_deref());
                    }
                    AttemptResult::HttpFailure { answer, class, probe } => {
                        last_was_probe_429 = probe && answer.status == StatusCode::TOO_MANY_REQUESTS;
                        let cause = format!("HTTP {}", answer.status.as_u16());
                        debug_assert!(matches!(class, Class::Failure | Class::RateLimited));
                        last_answer = Some(answer);
                        last_was_answer = true;
                        same_endpoint_failures = 0;
                        let next = routing::advance(index, live.len());
                        if attempts < cap && live.len() > 1 {
                            gw.events.failover(
                                protocol.as_str(),
                                &endpoint.config.name,
                                &live[next].config.name,
                                &cause,
                            );
                        }
                        index = next;
                    }
                    AttemptResult::NoAnswer { kind, detail, transient } => {
                        last_network = Some((kind, detail));
                        last_was_answer = false;
                        same_endpoint_failures += 1;
                        // SPEC §3: a transient network error retries the same endpoint after
                        // `transient_retry_delay`, until it has failed twice in a row.
                        if transient && same_endpoint_failures < 2 {
                            // No timer for a zero delay: tokio rounds deadlines up to the next
                            // millisecond tick, which was most of a zero-delay failover's cost.
                            if attempts < cap && !settings.transient_retry_delay.is_zero() {
                                let wake = (clock.now() + settings.transient_retry_delay).min(run.deadline_clock);
                                let waited = tokio::time::Instant::now();
                                clock.sleep_until(wake).await;
                                run.add_wait(waited.elapsed());
                            }
                            continue;
                        }
                        same_endpoint_failures = 0;
                        let next = routing::advance(index, live.len());
                        if attempts < cap && live.len() > 1 {
                            gw.events.failover(
                                protocol.as_str(),
                                &endpoint.config.name,
                                &live[next].config.name,
                                kind.as_str(),
                            );
                        }
                        index = next;
                    }
                }
            }
            // No remaining candidate granted a permit (SPEC §3).
            Some(denied_in_a_row)
        };

        let Some(denials) = blocked else { continue };
        // An earlier real answer beats a gateway-made error — except a 429 from a rate-limited
        // endpoint's probe, which re-enters the rate-limit backoff below (SPEC §3).
        if last_answer.is_some() && !last_was_probe_429 {
            return run.finish_with_answer(last_answer.take(), attempts, last_endpoint.as_deref());
        }
        let now = clock.now();
        match when_blocked(&denials, now, budget_deadline) {
            WhenBlocked::Wait { until } => {
                gw.events
                    .rate_limit_backoff(protocol.as_str(), until.saturating_duration_since(now).as_millis() as u64);
                let waited = tokio::time::Instant::now();
                tokio::select! {
                    () = clock.sleep_until(until) => {}
                    () = changed => {}
                }
                run.add_wait(waited.elapsed());
                continue 'choose;
            }
            WhenBlocked::RateLimited { retry_after_secs } => {
                let e = GatewayError::new(
                    ErrorKind::RateLimited,
                    "rate_limited",
                    format!(
                        "every endpoint that serves this request is rate-limited; retry after {retry_after_secs} s"
                    ),
                )
                .with_retry_after(retry_after_secs);
                return run.finish_error(e, attempts, last_endpoint.as_deref());
            }
            WhenBlocked::AllOpen => {
                if last_answer.is_some() {
                    return run.finish_with_answer(last_answer.take(), attempts, last_endpoint.as_deref());
                }
                let mut message = "all candidate endpoints are circuit-open; retry later, or reset a breaker with POST /api/endpoints/{name}/reset".to_string();
                if let Some((kind, detail)) = &last_network {
                    message = format!("{message} (last error: {} — {detail})", kind.describe());
                }
                let e = GatewayError::new(ErrorKind::BadGateway, "circuit_open", message);
                return run.finish_error(e, attempts, last_endpoint.as_deref());
            }
        }
    }

    // Attempts exhausted (SPEC §3).
    gw.events.candidates_exhausted(protocol.as_str(), attempts, last_endpoint.as_deref().unwrap_or(""));
    if last_was_answer {
        return run.finish_with_answer(last_answer.take(), attempts, last_endpoint.as_deref());
    }
    let message = match &last_network {
        Some((kind, detail)) => format!(
            "{} ({detail}) after {attempts} attempt(s); check the endpoint's base_url and health",
            kind.describe()
        ),
        None => format!("no upstream answered after {attempts} attempt(s)"),
    };
    run.finish_error(
        GatewayError::new(ErrorKind::BadGateway, "upstream_unreachable", message),
        attempts,
        last_endpoint.as_deref(),
    )
}

impl Run {
    fn protocol(&self) -> crate::protocol::Protocol {
        self.inbound.route.protocol()
    }

    /// Where a new request starts among `ids` (SPEC §3), taking a manual switch and a
    /// round-robin ticket when the strategy uses one.
    fn start_index(&self, ids: &[EndpointId], seen_current: Option<EndpointId>) -> usize {
        let protocol = self.protocol();
        let strategy = self.snapshot.settings.routing_strategy;
        let manual = self.gw.rotation.take_manual(protocol);
        let ticket = if strategy == crate::config::RoutingStrategy::RoundRobin {
            self.gw.rotation.next_round_robin(protocol)
        } else {
            0
        };
        routing::start_index(strategy, ids, seen_current, manual, ticket)
    }

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
    fn converted_body(&mut self, endpoint: &LiveEndpoint) -> Result<Bytes, ConvertError> {
        let model = self.inbound.model.as_deref().unwrap_or_default();
        let target = endpoint.config.map_model(model).to_string();
        self.conversion.body(&self.inbound.body, endpoint.config.format, &target)
    }

    fn encode_context(&mut self) -> EncodeContext {
        let now = self.gw.clock.wall().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let model = self.inbound.model.clone().unwrap_or_default();
        self.conversion.context(&self.inbound.body, &model, now)
    }

    async fn attempt(&mut self, endpoint: &Arc<LiveEndpoint>, permit: Permit, number: usize) -> AttemptResult {
        let protocol = self.protocol();
        let settings = self.snapshot.settings.clone();
        let breaker_settings = settings.breaker(protocol);
        let timeouts = settings.timeouts(protocol);
        let format = endpoint.config.format;
        let converting =
            matches!(self.inbound.route, Route::Protocol(_) | Route::CountTokens) && self.conversion.needed(format);
        let (url, body) = if converting {
            let body = match self.converted_body(endpoint) {
                Ok(b) => b,
                // Candidates were checked before the loop; a failure here is a bug, not the
                // endpoint's fault: neutral, try the next one.
                Err(e) => {
                    drop(permit);
                    return AttemptResult::NoAnswer {
                        kind: NetworkErrorKind::Other,
                        detail: e.message,
                        transient: false,
                    };
                }
            };
            // Gemini names the (mapped) model and the method in the path.
            let model = endpoint.config.map_model(self.inbound.model.as_deref().unwrap_or_default());
            let path = upstream_path(format, model, self.conversion.call(self.inbound.stream));
            (join_url(&endpoint.config.base_url, format, &path, None), body)
        } else {
            let url = join_url(&endpoint.config.base_url, format, &self.inbound.rest, self.inbound.query.as_deref());
            (url, self.native_body(endpoint))
        };
        let mut headers = request_headers(&self.inbound.headers, endpoint, &self.inbound.hop);
        if converting {
            let foreign: Vec<_> =
                headers.keys().filter(|name| conversion::foreign_header(name.as_str(), format)).cloned().collect();
            for name in foreign {
                headers.remove(name);
            }
        }
        let sent_at = tokio::time::Instant::now();
        let head_limit = if self.inbound.stream { timeouts.first_byte } else { timeouts.request };
        let request = self.gw.client.send(self.inbound.method.clone(), &url, headers, body);

        let response = match tokio::time::timeout_at((sent_at + head_limit).min(self.deadline), request).await {
            Err(_) if sent_at + head_limit > self.deadline => return self.cut_by_deadline(permit),
            Err(_) => {
                let note = format!("no response headers within {:.1} s", head_limit.as_secs_f64());
                self.settle(permit, Outcome::Broken, &note, None, Classification::Transient, "timeout");
                return AttemptResult::NoAnswer { kind: NetworkErrorKind::Timeout, detail: note, transient: true };
            }
            Ok(Err(e)) => {
                let kind = classify_network_error(&e);
                let note = kind.describe().to_string();
                self.settle(permit, Outcome::Broken, &note, None, Classification::Transient, kind.as_str());
                return AttemptResult::NoAnswer { kind, detail: note, transient: true };
            }
            Ok(Ok(r)) => r,
        };

        let status = response.status();
        let class = classify_status(status.as_u16(), self.inbound.route, settings.auth_errors_fail_over);
        let is_sse = response
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));

        if class == Class::Success && is_sse {
            let transform = if converting {
                let ctx = self.encode_context();
                Transform::Convert(Box::new(StreamConversion::new(format, self.conversion.client, ctx)))
            } else {
                Transform::Pass
            };
            let observer = StreamObserver::new(
                format,
                Format::native_to(protocol),
                transform,
                settings.limits.max_sse_event_bytes,
            );
            return self.hold_preamble(endpoint, permit, response, observer, sent_at, number).await;
        }

        // Everything else is read in full: error bodies are small, and a non-streaming answer
        // that breaks mid-body can still fail over invisibly.
        let (head, response_body) = response.into_parts();
        let mut headers = head.headers;
        let body_deadline = sent_at
            + if self.inbound.stream && class != Class::Success { timeouts.first_byte } else { timeouts.request };
        let limit = settings.limits.max_upstream_body_bytes;
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
                self.settle(
                    permit,
                    Outcome::Broken,
                    &note,
                    Some(status.as_u16()),
                    Classification::Failure,
                    "response_too_large",
                );
                self.excluded.push(endpoint.config.id);
                return AttemptResult::NoAnswer { kind: NetworkErrorKind::BadAnswer, detail: note, transient: false };
            }
            Ok(Err(UpstreamBodyError::Network(e))) => {
                let kind = classify_network_error(&e);
                let note = format!("{} while reading the body", kind.describe());
                self.settle(
                    permit,
                    Outcome::Broken,
                    &note,
                    Some(status.as_u16()),
                    Classification::Transient,
                    kind.as_str(),
                );
                return AttemptResult::NoAnswer { kind, detail: note, transient: true };
            }
            Err(_) => {
                let note = "the response body did not complete in time".to_string();
                self.settle(
                    permit,
                    Outcome::Broken,
                    &note,
                    Some(status.as_u16()),
                    Classification::Transient,
                    "timeout",
                );
                return AttemptResult::NoAnswer { kind: NetworkErrorKind::Timeout, detail: note, transient: true };
            }
        };
        if class != Class::Success {
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
        let answered = (class == Class::Success).then(|| usage::from_body(format, &body));
        let looped = status == StatusCode::LOOP_DETECTED
            && headers.get(super::X_CCMESH_LOOP).is_some_and(|v| v.as_bytes() == self.gw.instance_id.as_bytes());
        if looped {
            // Our own request came back to us: name the endpoint that points here. The body is
            // made in the client's protocol, so it is not converted.
            let name = &endpoint.config.name;
            let e = GatewayError::new(
                ErrorKind::LoopDetected,
                "loop_detected",
                format!(
                    "loop detected: endpoint {name} points back at this gateway; change its base_url with `ccmesh endpoint edit {name} --base-url URL`"
                ),
            );
            body = Bytes::from(e.body(protocol).to_string());
            self.excluded.push(endpoint.config.id);
            headers = axum::http::HeaderMap::new();
            headers.insert(axum::http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        } else if converting {
            let client = self.conversion.client;
            if class == Class::Success {
                let ctx = self.encode_context();
                match self.conversion.success_body(format, &body, &ctx) {
                    Ok(converted) => body = converted,
                    Err(e) => {
                        // A 2xx we cannot read is no answer at all: this endpoint's failure.
                        let note = format!("the upstream's answer is not a valid {format} response: {}", e.message);
                        self.settle(
                            permit,
                            Outcome::Broken,
                            &note,
                            Some(status.as_u16()),
                            Classification::Failure,
                            "invalid_response",
                        );
                        self.excluded.push(endpoint.config.id);
                        return AttemptResult::NoAnswer {
                            kind: NetworkErrorKind::BadAnswer,
                            detail: note,
                            transient: false,
                        };
                    }
                }
            } else {
                body = conversion::error_body(format, client, status.as_u16(), &body);
            }
            headers = conversion::converted_headers(&headers, "application/json");
        }
        let retry_after = headers
            .get(axum::http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, self.gw.clock.wall()));
        // A client's bad request says nothing about the endpoint; a rejected key does.
        let note = match class {
            Class::Success => None,
            Class::Neutral => (status == StatusCode::UNAUTHORIZED).then(|| status_note(401)),
            Class::Failure | Class::RateLimited => Some(status_note(status.as_u16())),
        };
        let probe = permit.is_probe();
        let classification = match class {
            Class::Success => Classification::Success,
            Class::Neutral => Classification::Neutral,
            Class::Failure => Classification::Failure,
            Class::RateLimited => Classification::RateLimited,
        };
        let transition = permit.record(outcome_for(class, retry_after), note.as_deref(), breaker_settings);
        if let Some(t) = self.trail.as_mut() {
            t.end_attempt(Some(status.as_u16()), classification, None, note.as_deref(), transition.as_ref());
        }
        if class == Class::Neutral
            && self.inbound.route == Route::CountTokens
            && matches!(status.as_u16(), 404 | 405 | 501)
        {
            // Many Anthropic-compatible relays lack count_tokens: answer with our estimate.
            return AttemptResult::Answer(self.local_token_count(Some(&endpoint.config.name), number).await);
        }
        let answer = Buffered { status, headers, body };
        match class {
            Class::Success => {
                self.after_success(endpoint.config.id);
                AttemptResult::Answer(self.respond(answer, number, &endpoint.config.name, answered))
            }
            Class::Neutral => AttemptResult::Answer(self.respond(answer, number, &endpoint.config.name, None)),
            Class::Failure | Class::RateLimited => AttemptResult::HttpFailure { answer, class, probe },
        }
    }

    /// `POST /v1/messages/count_tokens` answered by the gateway's own estimate.
    async fn local_token_count(&mut self, endpoint: Option<&str>, attempts: usize) -> Response {
        let request = match self.conversion.request(&self.inbound.body) {
            Ok(r) => r,
            Err(e) => {
                return self.finish_error(
                    GatewayError::new(ErrorKind::InvalidRequest, "invalid_request", e.message),
                    attempts,
                    endpoint,
                );
            }
        };
        let count = tokio::task::spawn_blocking(move || count_tokens::estimate(&request)).await.unwrap_or(0);
        let mut response = axum::Json(serde_json::json!({"input_tokens": count})).into_response();
        response
            .headers_mut()
            .insert(HeaderName::from_static("x-ccmesh-token-count"), HeaderValue::from_static("estimated"));
        match endpoint {
            Some(name) => self.tag(&mut response, attempts, name),
            None => {
                response
                    .headers_mut()
                    .insert(HeaderName::from_static("x-ccmesh-attempts"), HeaderValue::from(attempts));
            }
        }
        if let Some(mut t) = self.trail.take() {
            t.tag_response(response.headers_mut());
            t.finish(200, Tokens::default(), None, &self.snapshot);
        }
        response
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
    ) -> AttemptResult {
        let protocol = self.protocol();
        let settings = self.snapshot.settings.clone();
        let breaker_settings = settings.breaker(protocol);
        let timeouts = settings.timeouts(protocol);
        let status = response.status();
        let mut headers = response_headers(response.headers());
        if observer.converts() {
            headers = conversion::converted_headers(&headers, "text/event-stream");
        }
        let mut upstream = response.into_body();
        let mut held: Vec<Bytes> = Vec::new();
        let mut received = 0usize;
        let first_byte_deadline = sent_at + timeouts.first_byte;
        // Until the stream is committed the total deadline holds too (SPEC §15.1).
        let deadline = self.deadline;

        loop {
            let deadline_for = match (received == 0, timeouts.idle) {
                (true, _) => Some(first_byte_deadline),
                (false, Some(idle)) => Some(tokio::time::Instant::now() + idle),
                (false, None) => None,
            };
            let cut_by_deadline = deadline_for.is_none_or(|d| d > deadline);
            let next =
                tokio::time::timeout_at(deadline_for.map_or(deadline, |d| d.min(deadline)), next_data(&mut upstream))
                    .await;
            if next.is_err() && cut_by_deadline {
                return self.cut_by_deadline(permit);
            }
            let mut fail = |permit: Permit, kind: NetworkErrorKind, note: String, transient: bool| {
                let class = if transient { Classification::Transient } else { Classification::Failure };
                self.settle(permit, Outcome::Broken, &note, Some(status.as_u16()), class, kind.as_str());
                AttemptResult::NoAnswer { kind, detail: note, transient }
            };
            match next {
                Err(_) if received == 0 => {
                    let note = format!(
                        "no stream data within the first-byte timeout ({:.1} s)",
                        timeouts.first_byte.as_secs_f64()
                    );
                    return fail(permit, NetworkErrorKind::Timeout, note, true);
                }
                Err(_) => {
                    return fail(
                        permit,
                        NetworkErrorKind::Timeout,
                        "the stream went idle before any content".into(),
                        false,
                    );
                }
                Ok(Some(Err(e))) => {
                    let kind = classify_network_error(&e);
                    return fail(permit, kind, format!("{} before any content", kind.describe()), true);
                }
                Ok(None) => {
                    if observer.watch.terminal {
                        break;
                    }
                    let note = "the stream ended before any content".to_string();
                    return fail(permit, NetworkErrorKind::UnexpectedEof, note, false);
                }
                Ok(Some(Ok(chunk))) => {
                    received += chunk.len();
                    if let Some(out) = observer.chunk(chunk) {
                        held.push(out);
                    }
                    if let Some(problem) = observer.watch.malformed.clone() {
                        let result =
                            fail(permit, NetworkErrorKind::BadAnswer, format!("{problem}, before any content"), false);
                        self.excluded.push(endpoint.config.id);
                        return result;
                    }
                    if let Some((rate_limited, message)) = observer.watch.error.clone() {
                        // An error event before any content: a failure of this endpoint that the
                        // client never sees (the common way providers report overload). If it is
                        // the last attempt, the client gets it as an HTTP error of its protocol.
                        let note = format!("upstream stream error before content: {message}");
                        let (outcome, class, kind, status) = if rate_limited {
                            (
                                Outcome::RateLimited { retry_after: None },
                                Class::RateLimited,
                                ErrorKind::RateLimited,
                                StatusCode::TOO_MANY_REQUESTS,
                            )
                        } else {
                            (Outcome::Broken, Class::Failure, ErrorKind::BadGateway, StatusCode::BAD_GATEWAY)
                        };
                        let probe = permit.is_probe();
                        let classification =
                            if rate_limited { Classification::RateLimited } else { Classification::Failure };
                        self.settle(permit, outcome, &note, Some(200), classification, "stream_error");
                        let body = Bytes::from(
                            GatewayError::new(kind, "upstream_stream_error", note).body(protocol).to_string(),
                        );
                        let mut headers = axum::http::HeaderMap::new();
                        headers.insert(axum::http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                        return AttemptResult::HttpFailure { answer: Buffered { status, headers, body }, class, probe };
                    }
                    if observer.watch.content || received > MAX_HELD_PREAMBLE {
                        break;
                    }
                }
            }
        }

        let mut response = Response::new(Body::empty());
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        self.tag(&mut response, number, &endpoint.config.name);
        let mut trail = self.trail.take();
        if let Some(t) = trail.as_mut() {
            t.stream_committed(status.as_u16());
            t.tag_response(response.headers_mut());
        }
        let committed = Committed {
            gw: self.gw.clone(),
            snapshot: self.snapshot.clone(),
            breaker_settings: breaker_settings.clone(),
            idle_timeout: timeouts.idle,
            max_duration: timeouts.max_stream_duration,
            held,
            observer,
            rotation: self.rotation_update(endpoint.config.id),
            trail,
        };
        *response.body_mut() = Body::new(relay::relay(committed, permit, upstream));
        AttemptResult::Answer(response)
    }

    /// SPEC §15.1: the attempt in progress is cut short by the request's total deadline. That
    /// says nothing about the endpoint: neutral for its breaker.
    fn cut_by_deadline(&mut self, permit: Permit) -> AttemptResult {
        self.deadline_passed = true;
        let note = "cut short by the request's total deadline".to_string();
        self.settle(permit, Outcome::Neutral, &note, None, Classification::Neutral, "total_deadline");
        AttemptResult::NoAnswer { kind: NetworkErrorKind::Timeout, detail: note, transient: false }
    }

    /// The total deadline passed: the most recent upstream answer, else 504 (SPEC §15.1).
    fn deadline_over(&mut self, answer: Option<Buffered>, attempts: usize, endpoint: Option<&str>) -> Response {
        if answer.is_some() {
            return self.finish_with_answer(answer, attempts, endpoint);
        }
        let protocol = self.protocol();
        let total = self.snapshot.settings.timeouts(protocol).total.as_secs_f64();
        let e = GatewayError::new(
            ErrorKind::GatewayTimeout,
            "timeout",
            format!(
                "the request's total deadline (timeouts.{}.total_timeout_secs = {total} s) passed before an endpoint answered; check the endpoints' health, or raise the deadline",
                protocol.as_str()
            ),
        );
        self.finish_error(e, attempts, endpoint)
    }

    /// What a success on `endpoint` should do to the rotation (SPEC §3), applied by the caller
    /// when the request has really succeeded (for a stream: at its terminal event).
    fn rotation_update(&self, endpoint: EndpointId) -> Option<relay::RotationUpdate> {
        if self.explicit || self.start_endpoint == Some(endpoint) {
            return None;
        }
        Some(relay::RotationUpdate { protocol: self.protocol(), seen: self.seen_current, to: endpoint })
    }

    fn after_success(&self, endpoint: EndpointId) {
        if let Some(update) = self.rotation_update(endpoint) {
            update.apply(&self.gw);
        }
    }

    fn tag(&self, response: &mut Response, attempts: usize, endpoint: &str) {
        let headers = response.headers_mut();
        headers.insert(HeaderName::from_static("x-ccmesh-attempts"), HeaderValue::from(attempts));
        if let Ok(v) = HeaderValue::from_str(endpoint) {
            headers.insert(HeaderName::from_static("x-ccmesh-endpoint"), v);
        }
    }

    /// The attempt about to be sent, in the decision trail.
    fn begin_attempt(&mut self, endpoint: &LiveEndpoint) {
        let model = self.inbound.model.as_deref().map(|m| endpoint.config.map_model(m).to_string());
        let multiplier = endpoint.config.price_multiplier;
        if let Some(t) = self.trail.as_mut() {
            t.begin_attempt(&endpoint.config.name, endpoint.config.format.as_str(), model.as_deref(), multiplier);
            if self.conversion.needed(endpoint.config.format) && matches!(self.inbound.route, Route::Protocol(_)) {
                let losses = self.conversion.losses(endpoint.config.format);
                t.set_conversion(self.conversion.client.as_str(), endpoint.config.format.as_str(), losses);
            }
        }
    }

    fn add_wait(&mut self, waited: std::time::Duration) {
        if let Some(t) = self.trail.as_mut() {
            t.add_wait(waited);
        }
    }

    /// Record an attempt's outcome in the endpoint's breaker and in the decision trail.
    fn settle(
        &mut self,
        permit: Permit,
        outcome: Outcome,
        note: &str,
        status: Option<u16>,
        classification: Classification,
        error_kind: &str,
    ) {
        let settings = self.snapshot.settings.clone();
        let transition = permit.record(outcome, Some(note), settings.breaker(self.protocol()));
        if let Some(t) = self.trail.as_mut() {
            t.end_attempt(status, classification, Some(error_kind), Some(note), transition.as_ref());
        }
    }

    /// Send an upstream answer (a success, a neutral answer, or the last failure) to the client
    /// and close the record. `answered`: usage and model from a successful answer.
    fn respond(
        &mut self,
        answer: Buffered,
        attempts: usize,
        endpoint: &str,
        answered: Option<(Tokens, Option<String>)>,
    ) -> Response {
        let status = answer.status.as_u16();
        let mut body = answer.body;
        if status >= 400 {
            // An upstream that rejects a key often quotes it: the client must not receive the
            // endpoint's key (SPEC §15.6). Only error bodies are scanned.
            let query = self.inbound.query.as_deref();
            let credential = super::presented_credential(&self.inbound.headers, query);
            if let Some(clean) = crate::redact::current().scrub_bytes(&body, credential.as_deref()) {
                body = Bytes::from(clean);
            }
            if let Some(t) = self.trail.as_mut() {
                t.set_error("upstream", None, &format!("upstream answered HTTP {status}"), Some(&body));
            }
        }
        let mut response = Response::new(Body::from(body));
        *response.status_mut() = answer.status;
        *response.headers_mut() = response_headers(&answer.headers);
        self.tag(&mut response, attempts, endpoint);
        if let Some(mut t) = self.trail.take() {
            t.tag_response(response.headers_mut());
            let (tokens, model) = answered.unwrap_or_default();
            t.finish(status, tokens, model, &self.snapshot);
        }
        response
    }

    fn finish_with_answer(&mut self, answer: Option<Buffered>, attempts: usize, endpoint: Option<&str>) -> Response {
        match answer {
            Some(a) => self.respond(a, attempts, endpoint.unwrap_or(""), None),
            None => self.finish_error(
                GatewayError::new(ErrorKind::BadGateway, "upstream_unreachable", "no upstream answered"),
                attempts,
                endpoint,
            ),
        }
    }

    fn finish_error(&mut self, error: GatewayError, attempts: usize, endpoint: Option<&str>) -> Response {
        let status = error.kind.status().as_u16();
        if let Some(t) = self.trail.as_mut() {
            t.set_error("gateway", Some(error.code), &error.message, None);
        }
        let mut response = error.into_response(self.protocol());
        response.headers_mut().insert(HeaderName::from_static("x-ccmesh-attempts"), HeaderValue::from(attempts));
        if let Some(Ok(v)) = endpoint.map(HeaderValue::from_str) {
            response.headers_mut().insert(HeaderName::from_static("x-ccmesh-endpoint"), v);
        }
        if let Some(mut t) = self.trail.take() {
            t.tag_response(response.headers_mut());
            t.finish(status, Tokens::default(), None, &self.snapshot);
        }
        response
    }
}
