//! The state one client request's attempts share (`Run`), and what an attempt and the loop
//! produce. The phases are `impl Run` blocks of their own files: the loop (`attempt.rs`), one
//! exchange (`exchange.rs`), the answer (`respond.rs`); a resumed stream's relay (`relay.rs`)
//! runs the loop again.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;

use super::conversion::RequestConversion;
use super::observer::Committed;
use super::outcome::{AttemptOutcome, NetworkErrorKind};
use super::request::Inbound;
use super::trail::Trail;
use crate::breaker::Permit;
use crate::endpoint::EndpointId;
use crate::gateway::Gateway;
use crate::observe::record::Tokens;
use crate::snapshot::{LiveEndpoint, Snapshot};

/// An upstream HTTP answer read in full.
#[derive(Clone)]
pub(super) struct Buffered {
    pub status: StatusCode,
    pub headers: axum::http::HeaderMap,
    pub body: Bytes,
}

/// Everything one client request's attempts share: what was asked, where it may go, and the
/// state that outlives a single attempt. The phases are `impl Run` blocks of their own files:
/// this loop, one exchange (`exchange.rs`), the answer (`respond.rs`).
pub(super) struct Run {
    pub gw: Arc<Gateway>,
    pub snapshot: Arc<Snapshot>,
    /// Boxed: see `proxy::prepare`.
    pub inbound: Box<Inbound>,
    pub explicit: bool,
    /// The rotation state this request saw when it started (for compare-and-set).
    pub seen_current: Option<EndpointId>,
    pub start_endpoint: Option<EndpointId>,
    /// Bodies with a rewritten model, per target model, so a retry does not redo the splice.
    pub rewritten: Vec<(String, Bytes)>,
    /// Conversion state for endpoints of another format.
    pub conversion: RequestConversion,
    /// The decision trail; moves into the relay when a stream is committed.
    pub trail: Option<Box<Trail>>,
    /// SPEC §15.1: the request's total deadline, from its arrival, for the attempts' timers.
    pub deadline: tokio::time::Instant,
    /// The same deadline on the gateway's clock, for the waits.
    pub deadline_clock: std::time::Instant,
    /// One budget per request for every wait (SPEC §15.1), never past the total deadline.
    pub budget_deadline: std::time::Instant,
    /// What the attempts so far have learnt; a resume goes on from here.
    pub progress: Progress,
    /// The request's candidates after the filters of SPEC §2, and how they are treated.
    pub candidates: Vec<Arc<LiveEndpoint>>,
    /// No breaker filter, no probe permits: an explicit endpoint, or failover off.
    pub bypass_breakers: bool,
    /// Failover is off (SPEC §2 step 1): the one endpoint's answer is the answer.
    pub pinned: bool,
    /// Set while a cut stream is being continued (`resume.rs`).
    pub resuming: Option<super::resume::Resuming>,
    /// In a cluster under round-robin: the ticket taken from the shared counter.
    pub round_robin_ticket: Option<u64>,
}

/// How the attempts ended: an answer, or a stream that reached its first content.
pub(super) enum Ended {
    Answer(Response),
    Stream(Box<Stream>),
}

/// The loop's own state, from one attempt to the next.
#[derive(Default)]
pub(super) struct Progress {
    pub attempts: usize,
    pub cap: Option<usize>,
    /// The most recent upstream HTTP answer of a failed attempt (what the client gets if
    /// nothing better comes).
    /// Boxed, as `first_elsewhere` is: only a failed attempt keeps one, and this state moves
    /// with the request's attempt loop for every request.
    pub last_answer: Option<Box<Buffered>>,
    /// The last attempt got an HTTP answer (not a network error).
    pub last_was_answer: bool,
    /// The last answer was a 429 to a rate-limited endpoint's probe (SPEC §3: it re-enters the
    /// backoff instead of being returned).
    pub last_was_probe_429: bool,
    pub last_network: Option<(NetworkErrorKind, String)>,
    /// Its name as records hold it: borrowed, where a copy was an allocation per request.
    pub last_endpoint: Option<std::borrow::Cow<'static, str>>,
    /// Endpoints out of the rest of this request (`Next::NextExcluding`).
    pub excluded: Vec<EndpointId>,
    /// An attempt was cut short by the total deadline.
    pub deadline_passed: bool,
    /// The first answer that said the request belongs elsewhere (an unknown model, a prompt too
    /// long), and whether every attempt answered so: then that one is the client's answer.
    pub first_elsewhere: Option<Box<Buffered>>,
    pub only_elsewhere: bool,
    /// The last failure was a timeout (the gateway's own answer is then 504, not 502).
    pub last_timed_out: bool,
    /// SPEC §3 (beyond): an endpoint that answered 429 with `Retry-After` is not asked again
    /// before then within this request.
    pub not_before: Vec<(EndpointId, std::time::Instant)>,
}

impl Progress {
    pub fn new() -> Self {
        Progress { only_elsewhere: true, ..Progress::default() }
    }

    /// The upstream answer the client gets when nothing better came: the first "elsewhere"
    /// answer when every attempt answered that way, else the most recent one.
    pub fn best_answer(&mut self) -> Option<Buffered> {
        if self.only_elsewhere && self.first_elsewhere.is_some() {
            return self.first_elsewhere.take().map(|answer| *answer);
        }
        self.last_answer.take().map(|answer| *answer)
    }
}

/// What one attempt produced. The breaker and the trail have been told (for a committed stream,
/// the relay tells them when it ends).
pub(super) enum Exchanged {
    /// An upstream answer read in full, classified; `usage` for a success; `probe`: the attempt
    /// was a half-open breaker's probe.
    Answer { answer: Buffered, outcome: AttemptOutcome, usage: Option<(Tokens, Option<String>)>, probe: bool },
    /// A stream that reached its first content event: it now belongs to the client.
    Committed(Box<Stream>),
    /// No usable answer: a network error, a timeout, a stream that failed before content, an
    /// answer that cannot be used, or the total deadline.
    NoAnswer { outcome: AttemptOutcome, kind: NetworkErrorKind, detail: String },
    /// `count_tokens` on an endpoint that lacks it: answer with the gateway's estimate.
    Estimate,
}

/// A stream that reached its first content event, with what relaying it needs.
pub(super) struct Stream {
    pub status: StatusCode,
    pub headers: axum::http::HeaderMap,
    /// The endpoint it comes from (its `record_name`).
    pub endpoint: std::borrow::Cow<'static, str>,
    pub endpoint_id: crate::endpoint::EndpointId,
    /// Which attempt of the request it is.
    pub attempt: usize,
    pub committed: Committed,
    pub permit: Permit,
    pub upstream: super::upstream::UpstreamBody,
}
