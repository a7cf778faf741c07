//! The record of one client request: what was asked, what the gateway decided, what each
//! attempt did, what it cost. Built on the request path (cheaply: plain fields, no I/O) and
//! handed to the background writer when the request ends — for a stream, when the stream ends.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

/// Tokens, normalised across protocols: `input` excludes cached input (Anthropic's convention;
/// OpenAI's `prompt_tokens`/`input_tokens` include cached tokens and are converted). `None` =
/// unknown (the upstream did not say, or the stream was cut before its usage) — never 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokens {
    pub input: Option<u64>,
    pub output: Option<u64>,
    pub cache_read: Option<u64>,
    pub cache_write: Option<u64>,
}

impl Tokens {
    pub fn is_known(&self) -> bool {
        self.input.is_some() || self.output.is_some()
    }

    /// Two attempts' usage together (a field neither knows stays unknown).
    pub fn plus(self, other: Tokens) -> Tokens {
        let sum = |a: Option<u64>, b: Option<u64>| {
            if a.is_none() && b.is_none() { None } else { Some(a.unwrap_or(0) + b.unwrap_or(0)) }
        };
        Tokens {
            input: sum(self.input, other.input),
            output: sum(self.output, other.output),
            cache_read: sum(self.cache_read, other.cache_read),
            cache_write: sum(self.cache_write, other.cache_write),
        }
    }
}

/// How an attempt's outcome was classified (SPEC §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Classification {
    Success,
    /// Returned to the client unchanged; the breaker saw nothing (400, 401, 422, ...).
    Neutral,
    /// The endpoint failed (5xx, 403, 404 on a known path, a broken stream, ...).
    Failure,
    /// 429.
    RateLimited,
    /// A network error or timeout, retried on the same endpoint.
    Transient,
    /// The client went away during this attempt.
    Cancelled,
}

/// One upstream attempt of a request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// Borrowed as `RequestRecord::endpoint` is.
    pub endpoint: Cow<'static, str>,
    /// This attempt continued a cut stream: how (SPEC §6 stream resume).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<String>,
    /// The endpoint's format (`anthropic`, `openai`, `responses`, `gemini`); differs from the
    /// client's protocol when the request was converted. Borrowed from a constant when a request
    /// makes the record, as `RequestRecord::protocol` is.
    pub format: Cow<'static, str>,
    /// Milliseconds from the request's arrival to this attempt's send.
    pub started_ms: f64,
    /// Until the outcome was decided (for a stream that succeeded: its end).
    pub duration_ms: f64,
    /// The upstream's HTTP status, if it answered.
    pub status: Option<u16>,
    /// `connect`, `reset`, `timeout`, `unexpected_eof`, `tls`, `network`, `stream_error`, ...
    pub error_kind: Option<String>,
    pub error: Option<String>,
    pub classification: Classification,
    /// The breaker transition this outcome caused, e.g. `closed→open (consecutive_failures)`.
    pub breaker: Option<String>,
}

/// Why a request failed, when it did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordError {
    /// `upstream` (an upstream's HTTP error returned to the client), `gateway` (an error ccmesh
    /// made: no endpoint, circuit open, rate-limited, bad request), `stream` (a stream failed
    /// after it started), `network`, `cancelled`.
    pub source: String,
    /// The error type/code (`rate_limit_error`, `circuit_open`, `timeout`, ...).
    pub kind: Option<String>,
    pub message: String,
    /// The upstream's error body, truncated to 4 KiB, with secrets redacted.
    pub upstream_body: Option<String>,
}

/// One client request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Time-ordered unique id (also returned to the client as `x-ccmesh-request-id`).
    pub id: String,
    /// Unix milliseconds when the request arrived.
    pub started_at_ms: u64,
    /// `claude`, `openai`, `responses`, `gemini`. Borrowed from a constant when a request makes the
    /// record (no allocation, and none to free on the writer's thread); owned when read back.
    pub protocol: Cow<'static, str>,
    /// The HTTP method, borrowed for the standard ones as `protocol` is.
    pub method: Cow<'static, str>,
    /// Borrowed for the proxied paths the gateway serves by name, as `method` is.
    pub path: Cow<'static, str>,
    /// Kept, as the model names are (`observe::kept_text`), when a request makes the record.
    pub user_agent: Option<Cow<'static, str>>,
    /// The client's session id (`affinity::session_id`: Codex's `prompt_cache_key`, Claude
    /// Code's session header or `metadata.user_id`, Codex's session header), when it sent one.
    pub session_id: Option<String>,
    /// Kept (`observe::kept_text`) when a request makes the record: a record that owned its
    /// model names allocated them on a serving thread and freed them on the writer's; owned when
    /// read back.
    pub model_requested: Option<Cow<'static, str>>,
    /// The model sent to the final endpoint (after `model_map`); kept as `model_requested` is.
    pub model_sent: Option<Cow<'static, str>>,
    /// The model the upstream said answered; kept as `model_requested` is.
    pub model_answered: Option<Cow<'static, str>>,
    /// The final endpoint (the one that answered, or the last one tried). Borrowed from the
    /// configuration's interned name when a request makes the record, as `protocol` is.
    pub endpoint: Option<Cow<'static, str>>,
    pub stream: bool,
    /// The status the client got (499 when the client went away first).
    pub status: u16,
    pub error: Option<RecordError>,
    /// Milliseconds until the first byte of the answer went to the client.
    pub first_byte_ms: Option<f64>,
    /// Streams: milliseconds from arrival until the first content event arrived from the
    /// upstream that answered (the preamble does not count).
    #[serde(default)]
    pub first_token_ms: Option<f64>,
    pub total_ms: f64,
    /// Time spent in ccmesh itself: total minus upstream time minus deliberate waits
    /// (backoff, retry delay), measured up to the first byte sent to the client.
    pub overhead_ms: f64,
    pub tokens: Tokens,
    /// USD; `None` when the model has no known price (never 0 for "unknown").
    pub cost_usd: Option<f64>,
    /// Every upstream attempt, in order.
    pub attempts: Vec<AttemptRecord>,
    /// More than one endpoint was tried.
    pub failed_over: bool,
    /// `anthropic→openai` when converted.
    pub conversion: Option<String>,
    /// What did not survive conversion (`field: note`).
    pub losses: Vec<String>,
    /// The client key's name (never its secret), when keys are enforced and one was presented.
    #[serde(default)]
    pub client_key: Option<String>,
    /// The request started at the endpoint its session is bound to (session affinity).
    #[serde(default)]
    pub affinity: bool,
}

impl RequestRecord {
    /// `2xx`, `4xx`, `5xx`.
    pub fn status_class(&self) -> &'static str {
        status_class(self.status)
    }
}

pub fn status_class(status: u16) -> &'static str {
    match status {
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}
