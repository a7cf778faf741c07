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
use crate::observe::usage::Envelope;
use crate::protocol::Route;
use crate::protocol::finder::finder;

/// What an attempt's result means: for the endpoint (`verdict`, what its breaker records) and
/// for the request (`next`, where it goes now). The two are independent: a mistyped model is
/// neutral for the endpoint but moves the request on; a user rule may return a failure at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttemptOutcome {
    pub verdict: Verdict,
    pub next: Next,
}

/// What the attempt says about the endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Success,
    /// The client's problem, or nothing the endpoint is to blame for: the breaker sees nothing.
    Neutral,
    /// The endpoint failed: breaker failure (Broken).
    Failure,
    /// 429, or an upstream's rate-limit error: breaker failure (RateLimited, the cooldown from
    /// `Retry-After` when the upstream gave one).
    RateLimited {
        retry_after: Option<Duration>,
    },
}

/// Where the request goes after the attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// This answer goes to the client.
    Answer,
    /// A transient network error: the same endpoint again after `transient_retry_delay`, until
    /// it has failed twice in a row (SPEC §3).
    SameEndpoint,
    /// The next candidate at once; this one may be tried again on a later lap.
    NextEndpoint,
    /// The next candidate, and not this one again within the request: asking again cannot help
    /// (it timed out, refused, does not know the model, could not give a usable answer, or the
    /// request came back to this gateway).
    NextExcluding,
    /// A user retry rule's `same`: the same endpoint again after `transient_retry_delay`,
    /// bounded by the attempt cap only.
    Repeat,
    /// The request's total deadline cut the attempt short: the request ends.
    End,
}

/// Kept for the names the code and tests use.
pub use Next as Retry;

impl AttemptOutcome {
    pub const SUCCESS: AttemptOutcome = AttemptOutcome { verdict: Verdict::Success, next: Next::Answer };
    pub const NEUTRAL: AttemptOutcome = AttemptOutcome { verdict: Verdict::Neutral, next: Next::Answer };
    /// A failure that moves on at once.
    pub const FAILURE: AttemptOutcome = AttemptOutcome { verdict: Verdict::Failure, next: Next::NextEndpoint };
    /// A transient network error (a reset or EOF before the response headers).
    pub const TRANSIENT: AttemptOutcome = AttemptOutcome { verdict: Verdict::Failure, next: Next::SameEndpoint };
    /// A failure after which asking this endpoint again cannot help.
    pub const EXCLUDED: AttemptOutcome = AttemptOutcome { verdict: Verdict::Failure, next: Next::NextExcluding };
    /// Neutral for the endpoint, but another endpoint may serve the request (model not found,
    /// prompt too long for this endpoint's model).
    pub const ELSEWHERE: AttemptOutcome = AttemptOutcome { verdict: Verdict::Neutral, next: Next::NextExcluding };
    pub const CUT_BY_DEADLINE: AttemptOutcome = AttemptOutcome { verdict: Verdict::Neutral, next: Next::End };

    pub const fn rate_limited(retry_after: Option<Duration>) -> AttemptOutcome {
        AttemptOutcome { verdict: Verdict::RateLimited { retry_after }, next: Next::NextEndpoint }
    }

    /// The endpoint's breaker's view.
    pub fn breaker(self) -> Outcome {
        match self.verdict {
            Verdict::Success => Outcome::Success,
            Verdict::Neutral => Outcome::Neutral,
            Verdict::Failure => Outcome::Broken,
            Verdict::RateLimited { retry_after } => Outcome::RateLimited { retry_after },
        }
    }

    /// The request record's view (a failure retried on the same endpoint shows as transient).
    pub fn classification(self) -> Classification {
        match (self.verdict, self.next) {
            (Verdict::Success, _) => Classification::Success,
            (Verdict::Neutral, _) => Classification::Neutral,
            (Verdict::Failure, Next::SameEndpoint) => Classification::Transient,
            (Verdict::Failure, _) => Classification::Failure,
            (Verdict::RateLimited { .. }, _) => Classification::RateLimited,
        }
    }

    pub fn is_success(self) -> bool {
        self.verdict == Verdict::Success
    }

    /// The same outcome with the upstream's `Retry-After` (rate-limited verdicts only).
    pub fn with_retry_after(self, retry_after: Option<Duration>) -> AttemptOutcome {
        match self.verdict {
            Verdict::RateLimited { .. } => AttemptOutcome { verdict: Verdict::RateLimited { retry_after }, ..self },
            _ => self,
        }
    }
}

/// Classify an upstream HTTP status for a request on `route`.
pub fn classify_status(status: u16, route: Route, auth_errors_fail_over: bool) -> AttemptOutcome {
    match status {
        200..=299 => AttemptOutcome::SUCCESS,
        401 if auth_errors_fail_over => AttemptOutcome::FAILURE,
        400 | 401 => AttemptOutcome::NEUTRAL,
        405 | 406 | 413 | 414 | 415 | 422 => AttemptOutcome::NEUTRAL,
        // Many Anthropic-compatible upstreams lack count_tokens; that is not a broken endpoint.
        404 | 501 if route.is_count_tokens() => AttemptOutcome::NEUTRAL,
        // Scanners and misconfigured clients must not trip breakers through pass-through paths.
        404 if matches!(route, Route::PassThrough { .. }) => AttemptOutcome::NEUTRAL,
        429 => AttemptOutcome::rate_limited(None),
        _ => AttemptOutcome::FAILURE,
    }
}

/// What a user retry rule decides (SPEC §4: it is evaluated before the built-in table).
pub fn from_rule(rule: &crate::config::retry_rules::RetryRule, status: u16) -> AttemptOutcome {
    use crate::config::retry_rules::Action;
    let verdict = match (rule.failure, status) {
        (false, _) => Verdict::Neutral,
        (true, 429) => Verdict::RateLimited { retry_after: None },
        (true, _) => Verdict::Failure,
    };
    let next = match rule.action {
        Action::Return => Next::Answer,
        Action::Same => Next::Repeat,
        Action::Next => Next::NextEndpoint,
    };
    AttemptOutcome { verdict, next }
}

/// The error object of an upstream's error body, when it has one: `(type, code, message)`
/// lower-cased, from the Anthropic, OpenAI and Gemini shapes alike.
fn error_parts(body: &[u8]) -> Option<(String, String, String)> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let e = v.get("error")?;
    let text = |key: &str| match e.get(key) {
        Some(serde_json::Value::String(s)) => s.to_ascii_lowercase(),
        Some(serde_json::Value::Number(n)) => n.to_string(),
        _ => String::new(),
    };
    let ty = match e.get("type") {
        Some(serde_json::Value::String(t)) => t.to_ascii_lowercase(),
        _ => text("status"),
    };
    Some((ty, text("code"), text("message")))
}

/// SPEC §4 (beyond): the upstream says it does not know the requested model — Anthropic's
/// `not_found_error` about the model, OpenAI's `model_not_found`, or any 404 that names one of
/// `models` (the model asked for and the one sent). One mistyped model must not open every
/// breaker that serves its family; another endpoint may know it.
pub fn model_unknown(status: u16, body: &[u8], models: &[&str]) -> bool {
    if status != 404 && status != 400 {
        return false;
    }
    let text = String::from_utf8_lossy(body).to_ascii_lowercase();
    let names_a_model = models.iter().filter(|m| !m.is_empty()).any(|m| contains_name(&text, &m.to_ascii_lowercase()));
    if let Some((ty, code, message)) = error_parts(body) {
        if code == "model_not_found" {
            return true;
        }
        if ty == "not_found_error" && (message.contains("model") || names_a_model) {
            return true;
        }
    }
    status == 404 && names_a_model
}

/// Whether `text` holds `name` as a whole name (not inside a longer word or id: `gpt-4` is not
/// named by `gpt-4o`).
fn contains_name(text: &str, name: &str) -> bool {
    let part_of_name = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':');
    text.match_indices(name).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + name.len()..].chars().next();
        !before.is_some_and(part_of_name) && !after.is_some_and(part_of_name)
    })
}

/// How upstreams say a prompt does not fit the model's context window (lower case): Anthropic,
/// OpenAI and vLLM, Gemini, DeepSeek, Zhipu, Moonshot, Qwen, Mistral and the relays that pass
/// their words on.
const CONTEXT_WINDOW_PHRASES: &[&str] = &[
    "prompt is too long",
    "context_length_exceeded",
    "maximum context length",
    "context length exceeded",
    "exceeds the context window",
    "exceeds the maximum context",
    "context window",
    "input token count",
    "exceeds the maximum number of tokens",
    "too many input tokens",
    "input is too long",
    "prompt tokens too long",
    "exceeded model token limit",
    "range of input length should be",
    "too large for model with",
    "reduce the length of the messages",
];

/// SPEC §4 (beyond): a 400 saying the prompt exceeds the model's context window. Another
/// endpoint (its `model_map` pointing at a larger model) may serve it.
pub fn context_window_exceeded(status: u16, body: &[u8]) -> bool {
    if status != 400 && status != 413 {
        return false;
    }
    let (code, message) = match error_parts(body) {
        Some((_, code, message)) => (code, message),
        None => (String::new(), String::from_utf8_lossy(body).to_ascii_lowercase()),
    };
    code == "context_length_exceeded" || CONTEXT_WINDOW_PHRASES.iter().any(|p| message.contains(p))
}

/// SPEC §4 (beyond): a 2xx on an inference path that is no answer — an empty body, one that is
/// not JSON, a top-level non-null `error`, a Responses `status: "failed"` — with whether it is a
/// rate-limit error and what the upstream said. Some relays report failures this way.
/// `envelope`: the answer's top-level keys from the one read that also takes its usage
/// (`usage::read_answer`); the usual answer — an object with no error — is decided from it, and
/// anything else (no envelope: not an object, a repeated key) by reading the body in full.
pub fn not_an_answer(body: &[u8], envelope: Option<&Envelope>) -> Option<(bool, String)> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Some((false, "the upstream answered 2xx with an empty body".into()));
    }
    if let Some(envelope) = envelope
        && !envelope.error
        && envelope.status.as_deref() != Some("failed")
    {
        return None;
    }
    not_an_answer_read_in_full(body)
}

/// Whether `body` cannot hold what [`not_an_answer`] looks for in a JSON object: it has no
/// `"error"` and no `"failed"` anywhere, and no `\u` escape that could spell either. A body a
/// converter decoded that passes is an answer without reading its envelope; anything else is
/// read for it (a false alarm, an answer whose text says "error", only costs that read).
pub fn plainly_an_answer(body: &[u8]) -> bool {
    [finder!(br#""error""#), finder!(br#""failed""#), finder!(br"\u")].iter().all(|marker| marker.find(body).is_none())
}

fn not_an_answer_read_in_full(body: &[u8]) -> Option<(bool, String)> {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        let start: String = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
        return Some((false, format!("the upstream answered 2xx with a body that is not JSON: {start}")));
    };
    let error = match v.get("error") {
        Some(e) if !e.is_null() => Some(e),
        _ if v.get("status").and_then(|s| s.as_str()) == Some("failed") => Some(&v["error"]),
        _ => None,
    }?;
    let text = |key: &str| error.get(key).and_then(|x| x.as_str()).unwrap_or("").to_ascii_lowercase();
    let rate_limited = ["rate_limit_error", "rate_limit_exceeded", "resource_exhausted", "insufficient_quota"]
        .iter()
        .any(|k| text("type") == *k || text("code") == *k || text("status") == *k)
        || error.get("code").and_then(|c| c.as_u64()) == Some(429);
    let message = error
        .get("message")
        .and_then(|m| m.as_str())
        .map(str::to_string)
        .unwrap_or_else(|| crate::protocol::lenient::truncate(&error.to_string(), 300).to_string());
    Some((rate_limited, format!("the upstream answered 2xx with an error: {message}")))
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
        (Some(true), _) => AttemptOutcome::rate_limited(None),
        (Some(false), _) | (None, StreamEnd::Broken) => AttemptOutcome::FAILURE,
        (None, StreamEnd::Complete) => AttemptOutcome::SUCCESS,
    }
}

/// Why an attempt got no HTTP answer. Decided from error types and `io::ErrorKind`, never from
/// message text, which changes between library versions and platforms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetworkErrorKind {
    /// Connection refused or the host is unreachable.
    Connect,
    /// The upstream's host name does not resolve.
    Dns,
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
            NetworkErrorKind::Dns => "dns",
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
            NetworkErrorKind::Dns => "could not resolve the upstream's host",
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
    // A failed lookup looks like a connect error to the layers above it; say what it is.
    if super::dns::is_dns_failure(err) {
        return NetworkErrorKind::Dns;
    }
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
        if let Some(c) = e.downcast_ref::<super::upstream::SendError>() {
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

    type Class = AttemptOutcome;
    const SUCCESS: Class = Class::SUCCESS;
    const NEUTRAL: Class = Class::NEUTRAL;
    const FAILURE: Class = Class::FAILURE;
    const RATE_LIMITED: Class = Class::rate_limited(None);

    #[test]
    fn the_classification_table_row_by_row() {
        let rows: &[(u16, Route, bool, Class)] = &[
            (200, MSG, false, SUCCESS),
            (201, MSG, false, SUCCESS),
            (204, PASS, false, SUCCESS),
            (400, MSG, false, NEUTRAL),
            (401, MSG, false, NEUTRAL),
            (401, MSG, true, FAILURE),
            (400, MSG, true, NEUTRAL),
            (405, MSG, false, NEUTRAL),
            (406, MSG, false, NEUTRAL),
            (413, MSG, false, NEUTRAL),
            (414, MSG, false, NEUTRAL),
            (415, MSG, false, NEUTRAL),
            (422, MSG, false, NEUTRAL),
            (404, PASS, false, NEUTRAL),
            (404, Route::PassThrough { anthropic: true }, false, NEUTRAL),
            (404, Route::CountTokens(Protocol::Claude), false, NEUTRAL),
            (405, Route::CountTokens(Protocol::Claude), false, NEUTRAL),
            (501, Route::CountTokens(Protocol::Claude), false, NEUTRAL),
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
            (Class::SUCCESS, Outcome::Success, Classification::Success),
            (Class::NEUTRAL, Outcome::Neutral, Classification::Neutral),
            (Class::CUT_BY_DEADLINE, Outcome::Neutral, Classification::Neutral),
            (Class::ELSEWHERE, Outcome::Neutral, Classification::Neutral),
            (Class::TRANSIENT, Outcome::Broken, Classification::Transient),
            (Class::FAILURE, Outcome::Broken, Classification::Failure),
            (Class::EXCLUDED, Outcome::Broken, Classification::Failure),
            (RATE_LIMITED, Outcome::RateLimited { retry_after: None }, Classification::RateLimited),
        ];
        for (outcome, breaker, record) in rows {
            assert_eq!(outcome.breaker(), breaker, "{outcome:?}");
            assert_eq!(outcome.classification(), record, "{outcome:?}");
        }
        assert_eq!(Class::NEUTRAL.with_retry_after(Some(Duration::from_secs(1))), Class::NEUTRAL);
    }

    #[test]
    fn an_unknown_model_is_recognised_in_each_shape() {
        let anthropic = br#"{"type":"error","error":{"type":"not_found_error","message":"model: claude-sonet-4-5"}}"#;
        assert!(model_unknown(404, anthropic, &["claude-sonet-4-5"]));
        let openai = br#"{"error":{"message":"The model `gpt-5-typo` does not exist","type":"invalid_request_error","code":"model_not_found"}}"#;
        assert!(model_unknown(404, openai, &["gpt-5-typo"]));
        assert!(model_unknown(400, openai, &["other"]), "the code alone says it");
        let gemini = br#"{"error":{"code":404,"message":"models/gemini-9 is not found for API version v1beta","status":"NOT_FOUND"}}"#;
        assert!(model_unknown(404, gemini, &["gemini-9"]));
        assert!(model_unknown(404, b"<html>no such model glm-9</html>", &["GLM-9"]), "a 404 naming the model");
        // Not about the model.
        assert!(!model_unknown(
            404,
            br#"{"error":{"type":"not_found_error","message":"no such route"}}"#,
            &["claude-x"]
        ));
        assert!(!model_unknown(400, br#"{"error":{"message":"max_tokens too big"}}"#, &["claude-x"]));
        assert!(!model_unknown(500, openai, &["gpt-5-typo"]));
        assert!(!model_unknown(404, b"not here", &[""]));
        assert!(!model_unknown(404, b"no such route for m", &["gpt-4"]), "a name inside a longer one is no match");
        assert!(!model_unknown(404, b"model gpt-4o is gone", &["gpt-4"]));
        assert!(model_unknown(404, b"model 'gpt-4' is gone", &["gpt-4"]));
    }

    #[test]
    fn a_prompt_too_long_is_recognised_in_the_common_phrasings() {
        let yes: &[&[u8]] = &[
            br#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
            br#"{"error":{"message":"This model's maximum context length is 128000 tokens.","code":"context_length_exceeded"}}"#,
            br#"{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}"#,
            br#"{"error":{"message":"Range of input length should be [1, 30720]","code":"InvalidParameter"}}"#,
            br#"{"error":{"message":"Invalid request: Your request exceeded model token limit: 131072"}}"#,
            b"prompt tokens too long",
        ];
        for body in yes {
            assert!(context_window_exceeded(400, body), "{}", String::from_utf8_lossy(body));
        }
        assert!(!context_window_exceeded(400, br#"{"error":{"message":"temperature must be at most 2"}}"#));
        assert!(!context_window_exceeded(500, yes[0]));
    }

    /// `not_an_answer` as the request path calls it, after the one read of the answer, which is
    /// the same whatever the upstream's format.
    fn checked(body: &[u8]) -> Option<(bool, String)> {
        use crate::observe::usage::read_answer;
        use crate::protocol::Format;
        let results: Vec<_> = [Format::Anthropic, Format::Openai, Format::Responses, Format::Gemini]
            .into_iter()
            .map(|format| not_an_answer(body, read_answer(format, body).envelope.as_ref()))
            .collect();
        assert!(results.windows(2).all(|w| w[0] == w[1]), "{results:?}");
        results.into_iter().next().unwrap()
    }

    #[test]
    fn a_2xx_that_is_no_answer_is_recognised() {
        assert!(checked(b"").is_some());
        assert!(checked(b"  \n").is_some());
        assert!(checked(b"<html>gateway</html>").unwrap().1.contains("not JSON"));
        let (limited, message) = checked(br#"{"error":{"type":"rate_limit_error","message":"slow down"}}"#).unwrap();
        assert!(limited && message.contains("slow down"));
        let (limited, _) = checked(br#"{"error":{"message":"boom","type":"server_error"}}"#).unwrap();
        assert!(!limited);
        assert!(
            checked(br#"{"object":"response","status":"failed","error":{"code":"server_error","message":"x"}}"#)
                .is_some()
        );
        // Real answers, with `error: null` as some APIs send it.
        assert!(checked(br#"{"id":"msg_1","type":"message","content":[]}"#).is_none());
        assert!(checked(br#"{"id":"resp_1","status":"completed","error":null,"output":[]}"#).is_none());
        // The shapes the quick check leaves to the full reading decide the same way.
        assert!(checked(br#"[{"error":"x"}]"#).is_none(), "an array is JSON with no top-level error");
        assert!(checked(br#"{"error":null,"error":{"message":"late"}}"#).unwrap().1.contains("late"));
        assert!(checked(br#"{"status":7,"content":[]}"#).is_none());
        assert!(checked(br#"{"status":"fail\u0065d"}"#).is_some(), "an escaped status is read");
        assert!(checked(br#"{"id":"msg_1","content":[}"#).unwrap().1.contains("not JSON"));
    }

    proptest::proptest! {
        /// The quick check and the full reading agree on every body.
        #[test]
        fn the_quick_check_agrees_with_the_full_reading(
            keys in proptest::collection::vec(
                proptest::sample::select(vec!["error", "status", "id", "content", "usage", "\\u0065rror", "st\\u0061tus"]), 0..5),
            values in proptest::collection::vec(
                proptest::sample::select(vec![
                    "null", "\"failed\"", "\"f\\u0061iled\"", "\"completed\"", "{\"message\":\"m\"}", "{\"error\":1}",
                    "7", "[]", "{",
                ]), 0..5),
        ) {
            let fields: Vec<String> = keys.iter().zip(&values).map(|(k, v)| format!("\"{k}\":{v}")).collect();
            let body = format!("{{{}}}", fields.join(","));
            let full = not_an_answer_read_in_full(body.as_bytes());
            proptest::prop_assert_eq!(checked(body.as_bytes()), full.clone(), "{}", body);
            // A valid body that passes the plain check is an answer, as the full reading says.
            if plainly_an_answer(body.as_bytes()) && serde_json::from_str::<serde_json::Value>(&body).is_ok() {
                proptest::prop_assert_eq!(full, None, "{}", body);
            }
        }
    }

    #[test]
    fn a_rule_decides_both_axes() {
        let rules = crate::config::retry_rules::parse(&serde_json::json!([
            {"status": 500, "action": "same", "breaker": "neutral"},
            {"status": 429, "action": "return", "breaker": "failure"},
            {"status": "400-499", "action": "next", "breaker": "failure"},
        ]))
        .unwrap();
        assert_eq!(from_rule(&rules[0], 500), AttemptOutcome { verdict: Verdict::Neutral, next: Next::Repeat });
        assert_eq!(
            from_rule(&rules[1], 429),
            AttemptOutcome { verdict: Verdict::RateLimited { retry_after: None }, next: Next::Answer }
        );
        assert_eq!(from_rule(&rules[2], 418), AttemptOutcome { verdict: Verdict::Failure, next: Next::NextEndpoint });
    }

    #[test]
    fn a_stream_ends_by_one_rule() {
        assert_eq!(stream_end(None, StreamEnd::Complete), Class::SUCCESS);
        assert_eq!(stream_end(None, StreamEnd::Broken), FAILURE);
        assert_eq!(stream_end(Some(false), StreamEnd::Complete), FAILURE, "an error event decides");
        assert_eq!(stream_end(Some(true), StreamEnd::Broken), RATE_LIMITED);
    }
}
