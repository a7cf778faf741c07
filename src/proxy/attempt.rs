//! The attempt loop (SPEC §3): for each attempt ask a breaker for a permit, run one exchange
//! (`exchange.rs`), and decide from its outcome (`outcome.rs`) whether to answer the client
//! (`respond.rs`, the one exit) or move on — the same endpoint again after a transient network
//! error, the next candidate after a failure — until a success, a neutral answer, the attempt
//! cap, the total deadline, or no candidate that will take the request.

use std::pin::pin;
use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::Response;

use super::backoff::{WhenBlocked, when_blocked};
use super::conversion::RequestConversion;
use super::outcome::{AttemptOutcome, NetworkErrorKind, Next, Verdict};
use super::request::Inbound;
use super::run::{Ended, Exchanged, Progress, Run};
use super::trail::Trail;
use crate::breaker::Denied;
use crate::convert::{self, ir::ConvertError};
use crate::endpoint::EndpointId;
use crate::gateway::Gateway;
use crate::protocol::errors::{ErrorKind, GatewayError};
use crate::protocol::{Format, Route};
use crate::routing;
use crate::snapshot::{LiveEndpoint, Snapshot};

pub async fn run(
    gw: Arc<Gateway>,
    snapshot: Arc<Snapshot>,
    inbound: Box<Inbound>,
    mut candidates: Vec<Arc<LiveEndpoint>>,
    explicit: bool,
    mut trail: Box<Trail>,
) -> Response {
    let protocol = inbound.route.protocol();
    // Borrowed, not cloned: the gateway, the snapshot and their parts are shared by every
    // serving thread, and each clone and drop of one is a write to a cache line the other
    // threads are writing too (measured in BENCHMARKS.md).
    let settings = &snapshot.settings;
    let total = settings.timeouts(protocol).total;
    let deadline = trail.started() + total;
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    let now = gw.clock.now();
    let deadline_clock = now + left;
    // One budget per request for every wait (SPEC §15.1), and never past the total deadline.
    let budget_deadline = (now + settings.rate_limit_backoff_budget).min(deadline_clock);
    let seen_current = gw.rotation.current(protocol);
    let mut conversion = RequestConversion::new(Format::native_to(protocol), inbound.route.is_count_tokens())
        .with_stream(inbound.stream)
        .with_body_peeked(inbound.body_peeked.clone());
    conversion.session_id = inbound.session_id.clone();
    // Session affinity (not under `priority`, whose point is to return to the first endpoint;
    // not for an explicit endpoint, which is the only candidate anyway).
    if let Some(session) = inbound.session_id.clone()
        && !explicit
        && settings.routing_strategy != crate::config::RoutingStrategy::Priority
    {
        let key = crate::affinity::SessionKey {
            protocol,
            client: inbound.client_key.clone().unwrap_or_else(|| "-".to_string()),
            session,
        };
        let affinity = match &gw.cluster {
            Some(cluster) => {
                // Cluster calls are boxed so their state does not widen every request's future.
                Box::pin(crate::cluster::bindings::ClusterBindings::look_up(&cluster.bindings, key, &snapshot)).await
            }
            None => crate::affinity::Affinity::look_up(gw.sessions.clone(), key, gw.clock.clone()),
        };
        trail.set_affinity(affinity);
    }
    let strategy = settings.routing_strategy;
    let failover_enabled = settings.failover_enabled(protocol);
    let resume_allowed = settings.stream_resume && settings.stream_resume_attempts > 0;
    let mut run = Run {
        gw,
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
        budget_deadline,
        progress: Progress::new(),
        candidates: Vec::new(),
        bypass_breakers: explicit,
        pinned: false,
        resuming: None,
        round_robin_ticket: None,
    };
    if let Some(cluster) = &run.gw.cluster
        && strategy == crate::config::RoutingStrategy::RoundRobin
    {
        let local = || run.gw.rotation.next_round_robin(protocol);
        run.round_robin_ticket = Some(Box::pin(cluster.core.round_robin_ticket(protocol, local)).await);
    }

    // Endpoints of another format need the request converted. Do it once per format and
    // model now: one the request cannot be converted for is not a candidate, and if none is
    // left the client learns exactly which feature could not be converted (SPEC §1), rather than
    // a generic failure from an upstream that was sent something it cannot read.
    if matches!(run.inbound.route, Route::Protocol(_)) {
        let mut refused: Option<(Format, ConvertError)> = None;
        // Filtered in place: a second list would be an allocation on every request.
        candidates.retain(|endpoint| {
            if run.conversion.needed(endpoint.config.format)
                && let Err(e) = run.converted_body(endpoint)
            {
                refused.get_or_insert((endpoint.config.format, e));
                return false;
            }
            true
        });
        if candidates.is_empty()
            && let Some((format, e)) = refused
        {
            let message = format!(
                "this request cannot be sent to {}-format endpoint: {} (field {}); name {}-format endpoint or remove the feature",
                format.with_article(),
                e.message,
                e.field,
                run.conversion.client.with_article()
            );
            return run.error(GatewayError::new(ErrorKind::InvalidRequest, "conversion_unsupported", message), 0, None);
        }
    }
    if run.inbound.route.is_count_tokens() && !candidates.iter().any(|e| convert::counts_tokens(e.config.format)) {
        return run.token_estimate(None, 0).await;
    }
    if run.inbound.route.is_count_tokens() {
        candidates.retain(|e| convert::counts_tokens(e.config.format));
    }

    // Seed 001's failover switch (SPEC §2 step 1): off, a request goes only to the endpoint the
    // strategy starts at, and is treated like an explicit one there (no breaker filter, no probe
    // permit; outcomes recorded), its HTTP failures returned at once.
    let pinned = !explicit && !failover_enabled && !candidates.is_empty();
    if pinned {
        let ids: Vec<EndpointId> = candidates.iter().map(|e| e.config.id).collect();
        let start = run.start_index(&ids, seen_current);
        run.start_endpoint = Some(ids[start]);
        candidates = vec![candidates[start].clone()];
    }
    run.candidates = candidates;
    run.pinned = pinned;
    run.bypass_breakers = explicit || pinned;

    match run.attempts(None).await {
        Ended::Answer(response) => response,
        Ended::Stream(stream) => {
            let resumable = resume_allowed
                && !run.bypass_breakers
                && run.inbound.stream
                && run.candidates.len() > 1
                // What a client received is read back as SSE: a Gemini JSON-array stream is not.
                && run.inbound.gemini.as_ref().is_none_or(|g| g.sse);
            run.commit(*stream, resumable)
        }
    }
}

/// Where a resume goes on: the first live candidate after the one whose stream was cut (which
/// may itself be filtered out by now, its breaker opened by the cut). Returns its name and the
/// index in `ids`.
fn resume_index<'a>(
    candidates: &'a [Arc<LiveEndpoint>],
    ids: &[EndpointId],
    cut: EndpointId,
) -> Option<(&'a str, usize)> {
    let at = candidates.iter().position(|e| e.config.id == cut)?;
    let n = candidates.len();
    let next = (1..=n).find_map(|k| ids.iter().position(|id| *id == candidates[(at + k) % n].config.id))?;
    Some((&candidates[at].config.name, next))
}

impl Run {
    /// The attempt loop of SPEC §3 over `self.candidates`, from the rotation's start — or, for a
    /// resume, from the candidate after `after`.
    pub(super) async fn attempts(&mut self, after: Option<EndpointId>) -> Ended {
        // Held apart from `self`, which the loop mutates (a clone of a shared `Arc` is a write to
        // a cache line every serving thread writes: no more of them than that).
        let gw = self.gw.clone();
        let protocol = self.protocol();
        let settings = self.snapshot.settings.clone();
        let candidates = std::mem::take(&mut self.candidates);
        let ended = self.attempts_over(&candidates, after, &gw, protocol, &settings, &gw.clock).await;
        self.candidates = candidates;
        ended
    }

    #[allow(clippy::too_many_arguments)]
    async fn attempts_over(
        &mut self,
        candidates: &[Arc<LiveEndpoint>],
        after: Option<EndpointId>,
        gw: &Arc<Gateway>,
        protocol: crate::protocol::Protocol,
        settings: &Arc<crate::config::Settings>,
        clock: &Arc<dyn crate::clock::Clock>,
    ) -> Ended {
        let run = self;
        let explicit = run.bypass_breakers;
        let pinned = run.pinned;
        let seen_current = run.seen_current;
        let budget_deadline = run.budget_deadline;
        let mut p = std::mem::take(&mut run.progress);
        let mut first_pass = after.is_none();
        let mut after = after;
        let ended = 'out: {
            'choose: loop {
                // Made before reading breaker state, so a change in between is not missed: a
                // `Notified` hears every `notify_waiters` from its creation on. Not enabled: that
                // would add it to the waiters' list (a lock every serving thread takes, twice per
                // request) while nearly every request goes through without waiting.
                let changed = pin!(gw.breakers.changed().notified());

                // SPEC §2 step 4 (an explicit endpoint bypasses it).
                let (live, denials) = if explicit {
                    (candidates.iter().collect(), Vec::new())
                } else {
                    routing::breaker_filter(candidates, |e| e.breaker.routable())
                };

                let blocked = if live.is_empty() {
                    Some(denials)
                } else {
                    let cap = *p.cap.get_or_insert_with(|| routing::attempt_cap(live.len(), explicit));
                    let ids: smallvec::SmallVec<[EndpointId; routing::FEW_CANDIDATES]> =
                        live.iter().map(|e| e.config.id).collect();
                    let resume_at = after.take().and_then(|cut| resume_index(candidates, &ids, cut));
                    let start = if pinned {
                        0
                    } else if let Some((cut, next)) = resume_at {
                        gw.events.failover(protocol.as_str(), cut, &live[next].config.name, "stream_cut");
                        next
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
                        if p.attempts >= cap {
                            break 'choose;
                        }
                        if p.deadline_passed || (p.attempts > 0 && tokio::time::Instant::now() >= run.deadline) {
                            let best = p.best_answer();
                            break 'out Ended::Answer(run.deadline_over(best, p.attempts, p.last_endpoint.as_ref()));
                        }
                        let endpoint = live[index];
                        if p.excluded.contains(&endpoint.config.id) {
                            skipped_in_a_row += 1;
                            if skipped_in_a_row >= live.len() {
                                break 'choose;
                            }
                            index = routing::advance(index, live.len());
                            same_endpoint_failures = 0;
                            continue;
                        }
                        skipped_in_a_row = 0;
                        let permit = match endpoint.breaker.acquire(endpoint.record_name.clone(), explicit).await {
                            Ok(permit) => permit,
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
                        // An endpoint that said when to come back (a 429's Retry-After, its breaker still
                        // closed) is not asked before then: wait inside what is left of the backoff
                        // budget, else its 429 is the answer (SPEC §15.1).
                        if let Some(&(_, until)) = p.not_before.iter().find(|(id, _)| *id == endpoint.config.id) {
                            let now = clock.now();
                            if until > now {
                                if until > budget_deadline {
                                    drop(permit);
                                    let best = p.best_answer();
                                    break 'out Ended::Answer(run.last_answer(
                                        best,
                                        p.attempts,
                                        p.last_endpoint.as_ref(),
                                    ));
                                }
                                let waited = tokio::time::Instant::now();
                                clock.sleep_until(until).await;
                                run.add_wait(waited.elapsed());
                            }
                        }
                        denied_in_a_row.clear();
                        p.attempts += 1;
                        p.last_endpoint = Some(endpoint.record_name.clone());
                        run.begin_attempt(endpoint);
                        let (outcome, cause) = match run.exchange(endpoint, permit, p.attempts).await {
                            Exchanged::Committed(stream) => break 'out Ended::Stream(stream),
                            Exchanged::Estimate => {
                                // Many Anthropic-compatible relays lack count_tokens: our estimate.
                                break 'out Ended::Answer(
                                    run.token_estimate(Some(&endpoint.record_name), p.attempts).await,
                                );
                            }
                            Exchanged::Answer { answer, outcome, usage, probe } => {
                                if outcome.next == Next::Answer || (pinned && outcome.next != Next::Repeat) {
                                    // A success, a neutral answer, a rule's `return` — or, with failover
                                    // off, whatever the one endpoint said.
                                    if outcome.is_success() && run.resuming.is_none() {
                                        run.after_success(endpoint.config.id);
                                    }
                                    break 'out Ended::Answer(run.answer(
                                        answer,
                                        p.attempts,
                                        &endpoint.record_name,
                                        usage,
                                    ));
                                }
                                p.last_was_probe_429 = probe && answer.status == StatusCode::TOO_MANY_REQUESTS;
                                if let Verdict::RateLimited { retry_after: Some(wait) } = outcome.verdict {
                                    p.not_before.push((endpoint.config.id, clock.now() + wait));
                                }
                                let cause = format!("HTTP {}", answer.status.as_u16());
                                if outcome == AttemptOutcome::ELSEWHERE {
                                    if p.first_elsewhere.is_none() {
                                        p.first_elsewhere = Some(Box::new(answer.clone()));
                                    }
                                } else {
                                    p.only_elsewhere = false;
                                }
                                p.last_answer = Some(Box::new(answer));
                                p.last_was_answer = true;
                                p.last_timed_out = false;
                                (outcome, cause)
                            }
                            Exchanged::NoAnswer { outcome, kind, detail } => {
                                p.last_timed_out = kind == NetworkErrorKind::Timeout && outcome.next != Next::End;
                                p.last_network = Some((kind, detail));
                                p.last_was_answer = false;
                                p.only_elsewhere = false;
                                (outcome, kind.as_str().to_string())
                            }
                        };
                        if outcome.next == Next::Repeat
                            && run.resuming.as_mut().is_some_and(|r| std::mem::take(&mut r.retry_without_prefill))
                        {
                            // A refused prefill and its retry are one resume attempt (SPEC §15.3).
                            p.attempts -= 1;
                            continue;
                        }
                        match outcome.next {
                            // SPEC §3: a transient network error retries the same endpoint after
                            // `transient_retry_delay`, until it has failed twice in a row; a user rule's
                            // `same` retries it until the attempt cap.
                            Next::SameEndpoint | Next::Repeat
                                if outcome.next == Next::Repeat || same_endpoint_failures + 1 < 2 =>
                            {
                                same_endpoint_failures += 1;
                                // No timer for a zero delay: tokio rounds deadlines up to the next
                                // millisecond tick, which was most of a zero-delay failover's cost.
                                if p.attempts < cap && !settings.transient_retry_delay.is_zero() {
                                    let wake = (clock.now() + settings.transient_retry_delay).min(run.deadline_clock);
                                    let waited = tokio::time::Instant::now();
                                    clock.sleep_until(wake).await;
                                    run.add_wait(waited.elapsed());
                                }
                                continue;
                            }
                            Next::End => p.deadline_passed = true,
                            Next::NextExcluding => p.excluded.push(endpoint.config.id),
                            Next::SameEndpoint | Next::Repeat | Next::NextEndpoint | Next::Answer => {}
                        }
                        same_endpoint_failures = 0;
                        let next = routing::advance(index, live.len());
                        if p.attempts < cap && live.len() > 1 && !p.deadline_passed {
                            gw.events.failover(
                                protocol.as_str(),
                                &endpoint.config.name,
                                &live[next].config.name,
                                &cause,
                            );
                        }
                        index = next;
                    }
                    // No remaining candidate granted a permit (SPEC §3).
                    Some(denied_in_a_row)
                };

                let Some(denials) = blocked else { continue };
                // An earlier real answer beats a gateway-made error — except a 429 from a rate-limited
                // endpoint's probe, which re-enters the rate-limit backoff below (SPEC §3).
                if p.last_answer.is_some() && !p.last_was_probe_429 {
                    let best = p.best_answer();
                    break 'out Ended::Answer(run.last_answer(best, p.attempts, p.last_endpoint.as_ref()));
                }
                let now = clock.now();
                match when_blocked(&denials, now, budget_deadline) {
                    WhenBlocked::Wait { until } => {
                        gw.events.rate_limit_backoff(
                            protocol.as_str(),
                            until.saturating_duration_since(now).as_millis() as u64,
                        );
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
                        break 'out Ended::Answer(run.error(e, p.attempts, p.last_endpoint.as_ref()));
                    }
                    WhenBlocked::AllOpen => {
                        if p.last_answer.is_some() {
                            let best = p.best_answer();
                            break 'out Ended::Answer(run.last_answer(best, p.attempts, p.last_endpoint.as_ref()));
                        }
                        let mut message = "all candidate endpoints are circuit-open; retry later, or reset a breaker (`ccmesh reset NAME`, or POST /api/endpoints/{name}/reset)".to_string();
                        if let Some((kind, detail)) = &p.last_network {
                            message = format!("{message} (last error: {} — {detail})", kind.describe());
                        }
                        let e = GatewayError::new(ErrorKind::BadGateway, "circuit_open", message);
                        break 'out Ended::Answer(run.error(e, p.attempts, p.last_endpoint.as_ref()));
                    }
                }
            }

            // Attempts exhausted (SPEC §3).
            gw.events.candidates_exhausted(protocol.as_str(), p.attempts, p.last_endpoint.as_deref().unwrap_or(""));
            if p.last_was_answer || (p.only_elsewhere && p.first_elsewhere.is_some()) {
                let best = p.best_answer();
                break 'out Ended::Answer(run.last_answer(best, p.attempts, p.last_endpoint.as_ref()));
            }
            let message = match &p.last_network {
                Some((kind, detail)) if detail.as_str() == kind.describe() => {
                    format!("{detail} after {} attempt(s); check the endpoint's base_url and health", p.attempts)
                }
                Some((kind, detail)) => format!(
                    "{} ({detail}) after {} attempt(s); check the endpoint's base_url and health",
                    kind.describe(),
                    p.attempts
                ),
                None => format!("no upstream answered after {} attempt(s)", p.attempts),
            };
            // SPEC §3: 504 when the last failure was a timeout, else 502.
            let kind = if p.last_timed_out { ErrorKind::GatewayTimeout } else { ErrorKind::BadGateway };
            Ended::Answer(run.error(
                GatewayError::new(kind, "upstream_unreachable", message),
                p.attempts,
                p.last_endpoint.as_ref(),
            ))
        };
        run.progress = p;
        ended
    }

    /// Make the loop ready to continue a stream cut on `cut` (`resume.rs`): a fresh total
    /// deadline and wait budget, the cut endpoint out, at most `attempts` more attempts.
    pub(super) fn prepare_resume(&mut self, delivered: Arc<super::resume::Delivered>, cut: EndpointId, attempts: u32) {
        let settings = self.snapshot.settings.clone();
        let clock = self.gw.clock.clone();
        let total = settings.timeouts(self.protocol()).total;
        self.deadline = tokio::time::Instant::now() + total;
        let now = clock.now();
        self.deadline_clock = now + total;
        self.budget_deadline = (now + settings.rate_limit_backoff_budget).min(self.deadline_clock);
        self.resuming = Some(super::resume::Resuming::new(delivered));
        let p = &mut self.progress;
        let cap = p.cap.unwrap_or(usize::MAX);
        p.cap = Some(cap.min(p.attempts + attempts as usize));
        p.excluded.push(cut);
        let kept = Progress {
            cap: p.cap,
            attempts: p.attempts,
            excluded: std::mem::take(&mut p.excluded),
            not_before: std::mem::take(&mut p.not_before),
            ..Progress::new()
        };
        *p = kept;
    }

    /// Attempts sent so far (resumes included).
    pub(super) fn attempts_made(&self) -> usize {
        self.progress.attempts
    }

    pub(super) fn protocol(&self) -> crate::protocol::Protocol {
        self.inbound.route.protocol()
    }

    /// Where a new request starts among `ids` (SPEC §3), taking a manual switch and a
    /// round-robin ticket when the strategy uses one; the endpoint its session is bound to, when
    /// that is among them (session affinity: `routing::affinity_start`).
    fn start_index(&mut self, ids: &[EndpointId], seen_current: Option<EndpointId>) -> usize {
        let protocol = self.protocol();
        let strategy = self.snapshot.settings.routing_strategy;
        let manual = self.gw.rotation.take_manual(protocol);
        let ticket = if strategy == crate::config::RoutingStrategy::RoundRobin {
            let rotation = &self.gw.rotation;
            self.round_robin_ticket.take().unwrap_or_else(|| rotation.next_round_robin(protocol))
        } else {
            0
        };
        if let Some(t) = self.trail.as_mut() {
            let bound = t.affinity().and_then(crate::affinity::Affinity::bound);
            if let Some(i) = routing::affinity_start(strategy, ids, manual, bound) {
                t.started_by_affinity();
                return i;
            }
        }
        routing::start_index(strategy, ids, seen_current, manual, ticket)
    }

    /// What a success on `endpoint` should do to the rotation (SPEC §3), applied by the caller
    /// when the request has really succeeded (for a stream: at its terminal event).
    pub(super) fn rotation_update(&self, endpoint: EndpointId) -> Option<routing::RotationUpdate> {
        if self.explicit || self.start_endpoint == Some(endpoint) {
            return None;
        }
        Some(routing::RotationUpdate { protocol: self.protocol(), seen: self.seen_current, to: endpoint })
    }

    fn after_success(&self, endpoint: EndpointId) {
        if let Some(update) = self.rotation_update(endpoint) {
            update.apply(&self.gw.rotation);
        }
    }

    /// The attempt about to be sent, in the decision trail.
    fn begin_attempt(&mut self, endpoint: &LiveEndpoint) {
        let model = self.inbound.model.as_deref().map(|m| endpoint.config.map_model(m));
        let multiplier = endpoint.config.price_multiplier;
        if let Some(t) = self.trail.as_mut() {
            let format = endpoint.config.format.as_str();
            t.begin_attempt(endpoint.record_name.clone(), endpoint.config.id, format, model, multiplier);
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
}
