//! SPEC §4: what an upstream result means for the client, the attempt loop and the breaker.
//! Pure: the attempt loop and the breaker consume `Class`, never raw status codes.

use std::error::Error as StdError;
use std::io;
use std::time::Duration;

use crate::breaker::Outcome;
use crate::protocol::Route;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// 2xx: return it; breaker success.
    Success,
    /// The client's problem (400, 401, 405, ...) or a path the upstream lacks: return it
    /// unchanged, do not retry, breaker neutral.
    Neutral,
    /// The endpoint's problem: try the next endpoint; breaker failure (Broken).
    Failure,
    /// 429: next endpoint; breaker failure (RateLimited).
    RateLimited,
}

/// Classify an upstream HTTP status for a request on `route`.
pub fn classify_status(status: u16, route: Route, auth_errors_fail_over: bool) -> Class {
    match status {
        200..=299 => Class::Success,
        401 if auth_errors_fail_over => Class::Failure,
        400 | 401 => Class::Neutral,
        405 | 406 | 413 | 414 | 415 | 422 => Class::Neutral,
        // Many Anthropic-compatible upstreams lack count_tokens; that is not a broken endpoint.
        404 | 501 if route == Route::CountTokens => Class::Neutral,
        // Scanners and misconfigured clients must not trip breakers through pass-through paths.
        404 if matches!(route, Route::PassThrough { .. }) => Class::Neutral,
        429 => Class::RateLimited,
        _ => Class::Failure,
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

/// The breaker outcome of an HTTP answer.
pub fn outcome_for(class: Class, retry_after: Option<Duration>) -> Outcome {
    match class {
        Class::Success => Outcome::Success,
        Class::Neutral => Outcome::Neutral,
        Class::Failure => Outcome::Broken,
        Class::RateLimited => Outcome::RateLimited { retry_after },
    }
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

    #[test]
    fn the_classification_table_row_by_row() {
        let rows: &[(u16, Route, bool, Class)] = &[
            (200, MSG, false, Class::Success),
            (201, MSG, false, Class::Success),
            (204, PASS, false, Class::Success),
            (400, MSG, false, Class::Neutral),
            (401, MSG, false, Class::Neutral),
            (401, MSG, true, Class::Failure),
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
            (404, MSG, false, Class::Failure),
            (404, Route::Protocol(Protocol::Openai), false, Class::Failure),
            (501, MSG, false, Class::Failure),
            (403, MSG, false, Class::Failure),
            (500, MSG, false, Class::Failure),
            (502, MSG, false, Class::Failure),
            (503, MSG, false, Class::Failure),
            (529, MSG, false, Class::Failure),
            (302, MSG, false, Class::Failure),
            (408, MSG, false, Class::Failure),
            (409, MSG, false, Class::Failure),
            (429, MSG, false, Class::RateLimited),
            (429, PASS, false, Class::RateLimited),
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
        assert_eq!(outcome_for(Class::Failure, None), Outcome::Broken);
        assert_eq!(
            outcome_for(Class::RateLimited, Some(Duration::from_secs(2))),
            Outcome::RateLimited { retry_after: Some(Duration::from_secs(2)) }
        );
        assert_eq!(status_note(401), "upstream rejected the API key (401)");
    }
}
