//! SPEC §4: what one attempt's result means, as one type. An [`AttemptOutcome`] says whose
//! fault it was and where the request goes next; the breaker (`breaker()`) and the record
//! (`classification()`) read their own views of it, so no caller maps one shape onto another.
//!
//! An outcome is decided at the response head for HTTP answers (`classify_status`), from the
//! error type for attempts that got none (`classify_network_error`), and at the end of a
//! stream (`stream_end`) — the same rule whether the answer was buffered or relayed: an upstream
//! error event makes a failure, a clean end with the protocol's terminal event a success,
//! anything else a failure. (pingora carries "who failed" and "may we retry" on one error;
//! linkerd2-proxy classifies at the head and again at end of stream: the model here.)
//! Pure: no I/O.

use std::error::Error as StdError;
use std::io;
use std::time::Duration;

use crate::breaker::Outcome;
use crate::observe::record::Classification;
use crate::protocol::Route;

/// What an attempt's result means for the client, the attempt loop and the breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// 2xx: the client gets it; breaker success.
    Success,
    /// The client's problem (400, 401, 405, …), or a path the upstream lacks: the client gets
    /// it unchanged, nothing is retried, the breaker sees nothing.
    Neutral,
    /// The endpoint failed; `retry` says where the request goes next. Breaker failure (Broken).
    Failure { retry: Retry },
    /// 429, or an upstream's rate-limit error: next endpoint; breaker failure (RateLimited, the
    /// cooldown from `Retry-After` when the upstream gave one).
    RateLimited { retry_after: Option<Duration> },
    /// The request's total deadline cut the attempt short: says nothing about the endpoint
    /// (neutral), and the request ends.
    CutByDeadline,
}

/// Where a request goes after an attempt failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// A transient network error: the same endpoint again after `transient_retry_delay`, until
    /// it has failed twice in a row (SPEC §3).
    SameEndpoint,
    /// The next candidate at once; this one may be tried again on a later lap.
    NextEndpoint,
    /// The next candidate, and not this one again within the request: asking again cannot help
    /// (its answer could not be used, or the request came back to this gateway).
    NextExcluding,
}

impl AttemptOutcome {
    /// A failure that moves on at once.
    pub const FAILURE: AttemptOutcome = AttemptOutcome::Failure { retry: Retry::NextEndpoint };

    /// The endpoint's breaker's view.
    pub fn breaker(self) -> Outcome {
        match self {
            AttemptOutcome::Success => Outcome::Success,
            AttemptOutcome::Neutral | AttemptOutcome::CutByDeadline => Outcome::Neutral,
            AttemptOutcome::Failure { .. } => Outcome::Broken,
            AttemptOutcome::RateLimited { retry_after } => Outcome::RateLimited { retry_after },
        }
    }

    /// The request record's view (a failure retried on the same endpoint shows as transient).
    pub fn classification(self) -> Classification {
        match self {
            AttemptOutcome::Success => Classification::Success,
            AttemptOutcome::Neutral | AttemptOutcome::CutByDeadline => Classification::Neutral,
            AttemptOutcome::Failure { retry: Retry::SameEndpoint } => Classification::Transient,
            AttemptOutcome::Failure { .. } => Classification::Failure,
            AttemptOutcome::RateLimited { .. } => Classification::RateLimited,
        }
    }

    /// Whether the endpoint failed (and the request may move on).
    pub fn is_failure(self) -> bool {
        matches!(self, AttemptOutcome::Failure { .. } | AttemptOutcome::RateLimited { .. })
    }

    /// The same outcome with the upstream's `Retry-After` (rate-limited outcomes only).
    pub fn with_retry_after(self, retry_after: Option<Duration>) -> AttemptOutcome {
        match self {
            AttemptOutcome::RateLimited { .. } => AttemptOutcome::RateLimited { retry_after },
            other => other,
        }
    }
}

/// Classify an upstream HTTP status for a request on `route`.
pub fn classify_status(status: u16, route: Route, auth_errors_fail_over: bool) -> AttemptOutcome {
    match status {
        200..=299 => AttemptOutcome::Success,
        401 if auth_errors_fail_over => AttemptOutcome::FAILURE,
        400 | 401 => AttemptOutcome::Neutral,
        405 | 406 | 413 | 414 | 415 | 422 => AttemptOutcome::Neutral,
        // Many Anthropic-compatible upstreams lack count_tokens; that is not a broken endpoint.
        404 | 501 if route == Route::CountTokens => AttemptOutcome::Neutral,
        // Scanners and misconfigured clients must not trip breakers through pass-through paths.
        404 if matches!(route, Route::PassThrough { .. }) => AttemptOutcome::Neutral,
        429 => AttemptOutcome::RateLimited { retry_after: None },
        _ => AttemptOutcome::FAILURE,
    }
}

/// How a stream (or the part of it held before content) ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamEnd {
    /// The protocol's terminal event arrived and the body ended cleanly.
    Complete,
    /// Cut, idle, malformed, or ended without its terminal event.
    Broken,
}

/// The outcome of a stream from how it ended and whether the upstream reported an error in it
/// (`Some(rate_limited)`): an upstream error event decides, whatever came after.
pub fn stream_end(upstream_error: Option<bool>, end: StreamEnd) -> AttemptOutcome {
    match (upstream_error, end) {
        (Some(true), _) => AttemptOutcome::RateLimited { retry_after: None },
        (Some(false), _) | (None, StreamEnd::Broken) => AttemptOutcome::FAILURE,
        (None, StreamEnd::Complete) => AttemptOutcome::Success,
    }
}

/// Why an attempt got no HTTP answer. Decided from error types and `io::ErrorKind`, never from
/// message text, which changes between library versions and platforms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetworkErrorKind {
    /// Connection refused or the host is unreachable.
    Connect,
    /// Connection reset or aborted by the peer.
    Reset,
    /// The upstream closed the connection before a complete response.
    UnexpectedEof,
    /// Our first-byte or request timeout fired, or the OS reported a timeout.
    Timeout,
    /// TLS handshake or certificate failure.
    Tls,
    /// An answer arrived but cannot be relayed (too large, unreadable, malformed).
    BadAnswer,
    /// Any other transport failure.
    Other,
}

impl NetworkErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkErrorKind::Connect => "connect",
            NetworkErrorKind::Reset => "reset",
            NetworkErrorKind::UnexpectedEof => "unexpected_eof",
            NetworkErrorKind::Timeout => "timeout",
            NetworkErrorKind::Tls => "tls",
            NetworkErrorKind::BadAnswer => "bad_answer",
            NetworkErrorKind::Other => "network",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            NetworkErrorKind::Connect => "could not connect to the upstream",
            NetworkErrorKind::Reset => "the upstream reset the connection",
            NetworkErrorKind::UnexpectedEof => "the upstream closed the connection before answering completely",
            NetworkErrorKind::Timeout => "the upstream did not answer in time",
            NetworkErrorKind::Tls => "TLS with the upstream failed",
            NetworkErrorKind::BadAnswer => "the upstream's answer could not be used",
            NetworkErrorKind::Other => "a network error occurred talking to the upstream",
        }
    }
}

/// Walk the error's source chain and name the first cause we recognise.
pub fn classify_network_error(err: &(dyn StdError + 'static)) -> NetworkErrorKind {
    let mut connect_hint = false;
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<io::Error>()
            && let Some(kind) = io_kind(io.kind())
        {
            return kind;
        }
        if e.downcast_ref::<rustls::Error>().is_some() {
            return NetworkErrorKind::Tls;
        }
        if let Some(h) = e.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() {
                return NetworkErrorKind::UnexpectedEof;
            }
            if h.is_timeout() {
                return NetworkErrorKind::Timeout;
            }
        }
        if let Some(c) = e.downcast_ref::<hyper_util::client::legacy::Error>() {
            connect_hint |= c.is_connect();
        }
        if let Some(r) = e.downcast_ref::<reqwest::Error>() {
            if r.is_timeout() {
                return NetworkErrorKind::Timeout;
            }
            connect_hint |= r.is_connect();
        }
        cur = e.source();
    }
    if connect_hint { NetworkErrorKind::Connect } else { NetworkErrorKind::Other }
}

fn io_kind(kind: io::ErrorKind) -> Option<NetworkErrorKind> {
    use io::ErrorKind as K;
    Some(match kind {
        K::ConnectionRefused | K::HostUnreachable | K::NetworkUnreachable | K::AddrNotAvailable => {
            NetworkErrorKind::Connect
        }
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::NotConnected => NetworkErrorKind::Reset,
        K::UnexpectedEof => NetworkErrorKind::UnexpectedEof,
        K::TimedOut => NetworkErrorKind::Timeout,
        _ => return None,
    })
}

/// Human text for the endpoint's `last_error` (health), never containing a key.
pub fn status_note(status: u16) -> String {
    match status {
        401 => "upstream rejected the API key (401)".to_string(),
        403 => "upstream refused access (403)".to_string(),
        429 => "upstream rate-limited the request (429)".to_string(),
        _ => format!("upstream answered HTTP {status}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Protocol;

    const MSG: Route = Route::Protocol(Protocol::Claude);
    const PASS: Route = Route::PassThrough { anthropic: false };

    use AttemptOutcome as Class;
    const FAILURE: Class = Class::FAILURE;
    const RATE_LIMITED: Class = Class::RateLimited { retry_after: None };

    #[test]
    fn the_classification_table_row_by_row() {
        let rows: &[(u16, Route, bool, Class)] = &[
            (200, MSG, false, Class::Success),
            (201, MSG, false, Class::Success),
            (204, PASS, false, Class::Success),
            (400, MSG, false, Class::Neutral),
            (401, MSG, false, Class::Neutral),
            (401, MSG, true, FAILURE),
            (400, MSG, true, Class::Neutral),
            (405, MSG, false, Class::Neutral),
            (406, MSG, false, Class::Neutral),
            (413, MSG, false, Class::Neutral),
            (414, MSG, false, Class::Neutral),
            (415, MSG, false, Class::Neutral),
            (422, MSG, false, Class::Neutral),
            (404, PASS, false, Class::Neutral),
            (404, Route::PassThrough { anthropic: true }, false, Class::Neutral),
            (404, Route::CountTokens, false, Class::Neutral),
            (405, Route::CountTokens, false, Class::Neutral),
            (501, Route::CountTokens, false, Class::Neutral),
            (404, MSG, false, FAILURE),
            (404, Route::Protocol(Protocol::Openai), false, FAILURE),
            (501, MSG, false, FAILURE),
            (403, MSG, false, FAILURE),
            (500, MSG, false, FAILURE),
            (502, MSG, false, FAILURE),
            (503, MSG, false, FAILURE),
            (529, MSG, false, FAILURE),
            (302, MSG, false, FAILURE),
            (408, MSG, false, FAILURE),
            (409, MSG, false, FAILURE),
            (429, MSG, false, RATE_LIMITED),
            (429, PASS, false, RATE_LIMITED),
        ];
        for &(status, route, fail_over, want) in rows {
            assert_eq!(
                classify_status(status, route, fail_over),
                want,
                "{status} on {route:?} (fail_over={fail_over})"
            );
        }
    }

    #[test]
    fn io_error_kinds_map_without_reading_messages() {
        let cases = [
            (io::ErrorKind::ConnectionRefused, NetworkErrorKind::Connect),
            (io::ErrorKind::ConnectionReset, NetworkErrorKind::Reset),
            (io::ErrorKind::ConnectionAborted, NetworkErrorKind::Reset),
            (io::ErrorKind::BrokenPipe, NetworkErrorKind::Reset),
            (io::ErrorKind::UnexpectedEof, NetworkErrorKind::UnexpectedEof),
            (io::ErrorKind::TimedOut, NetworkErrorKind::Timeout),
            (io::ErrorKind::Other, NetworkErrorKind::Other),
        ];
        for (kind, want) in cases {
            // The message deliberately lies: only the kind may decide.
            let e = io::Error::new(kind, "connection refused timeout reset eof");
            assert_eq!(classify_network_error(&e), want, "{kind:?}");
        }
    }

    #[derive(Debug)]
    struct Wrapper(io::Error);
    impl std::fmt::Display for Wrapper {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("wrapper")
        }
    }
    impl StdError for Wrapper {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn walks_the_source_chain() {
        let e = Wrapper(io::Error::from(io::ErrorKind::ConnectionReset));
        assert_eq!(classify_network_error(&e), NetworkErrorKind::Reset);
    }

    #[test]
    fn outcomes_and_notes() {
        assert_eq!(FAILURE.breaker(), Outcome::Broken);
        assert_eq!(
            RATE_LIMITED.with_retry_after(Some(Duration::from_secs(2))).breaker(),
            Outcome::RateLimited { retry_after: Some(Duration::from_secs(2)) }
        );
        assert_eq!(status_note(401), "upstream rejected the API key (401)");
    }

    #[test]
    fn each_outcome_has_one_breaker_and_one_record_view() {
        let rows = [
            (Class::Success, Outcome::Success, Classification::Success),
            (Class::Neutral, Outcome::Neutral, Classification::Neutral),
            (Class::CutByDeadline, Outcome::Neutral, Classification::Neutral),
            (Class::Failure { retry: Retry::SameEndpoint }, Outcome::Broken, Classification::Transient),
            (Class::Failure { retry: Retry::NextEndpoint }, Outcome::Broken, Classification::Failure),
            (Class::Failure { retry: Retry::NextExcluding }, Outcome::Broken, Classification::Failure),
            (RATE_LIMITED, Outcome::RateLimited { retry_after: None }, Classification::RateLimited),
        ];
        for (outcome, breaker, record) in rows {
            assert_eq!(outcome.breaker(), breaker, "{outcome:?}");
            assert_eq!(outcome.classification(), record, "{outcome:?}");
        }
        assert_eq!(Class::Neutral.with_retry_after(Some(Duration::from_secs(1))), Class::Neutral);
    }

    #[test]
    fn a_stream_ends_by_one_rule() {
        assert_eq!(stream_end(None, StreamEnd::Complete), Class::Success);
        assert_eq!(stream_end(None, StreamEnd::Broken), FAILURE);
        assert_eq!(stream_end(Some(false), StreamEnd::Complete), FAILURE, "an error event decides");
        assert_eq!(stream_end(Some(true), StreamEnd::Broken), RATE_LIMITED);
    }
}
