//! Errors in each protocol's own shape (SPEC §9), so that SDKs raise their normal exceptions (a
//! gateway 429 is the SDK's RateLimitError), for errors the gateway makes and for upstream
//! errors a conversion carries to the client alike:
//!
//! - one [`ErrorKind`], what the error is as far as the four protocols can tell, with its
//!   status and its native `type` in each protocol;
//! - the native error bodies ([`AnthropicError`], [`OpenAiError`]) and the gateway's own errors
//!   in them ([`GatewayError`]);
//! - the native events that end a started stream with an error ([`anthropic_error_event`],
//!   [`chat_error_chunk`], [`response_failed_event`]), written by the converting encoders and,
//!   for pass-through streams, by [`stream_error_event`].
//!
//! Key order: the gateway's own errors are `serde_json::Value`s (keys sorted when written),
//! as are all of the Responses codec's documents; the Anthropic and Chat codecs serialise the
//! body structs directly, in the order the real APIs use. Both read the same to any JSON parser.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Value, json};

use super::sse::write_event;
use super::stream_events::StreamContext;
use super::{Format, Protocol};

/// What kind of error, as far as the four protocols can tell. Decoders of upstream errors
/// pick one from the upstream's status and type (keeping the upstream's status); the gateway's
/// own errors are answered with [`ErrorKind::status`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// 400: the client's request is wrong (bad JSON, unknown explicit endpoint, ...).
    InvalidRequest,
    /// 401.
    Authentication,
    /// 403 (and 402, billing).
    Permission,
    /// 404: no enabled endpoint serves the model, an unknown path, an unknown upstream model.
    NotFound,
    /// 408: the request body paused longer than `limits.body_read_timeout_secs`.
    RequestTimeout,
    /// 413: a body over `max_body_bytes`, or over the upstream's limit.
    RequestTooLarge,
    /// 429: every candidate is rate-limited past the backoff budget, or the upstream said so.
    RateLimited,
    /// 503 (529 at Anthropic): the service cannot take the request now; the gateway's answer
    /// when nothing is configured for a protocol.
    Overloaded,
    /// 500: the upstream's (or the gateway's) internal failure.
    Api,
    /// 502: all candidates circuit-open, or the upstream failed without an HTTP answer.
    BadGateway,
    /// 504: the request's total deadline passed.
    GatewayTimeout,
    /// 508: the request came back to this gateway (an endpoint points at it).
    LoopDetected,
}

impl ErrorKind {
    /// The kind an upstream's error status says, before its body is read: the 4xx the three
    /// APIs name, any other 4xx a client error, everything else (5xx, and the odd 2xx or 3xx an
    /// error body came with) the server's failure.
    pub fn from_status(status: u16) -> ErrorKind {
        match status {
            401 => ErrorKind::Authentication,
            402 | 403 => ErrorKind::Permission,
            404 => ErrorKind::NotFound,
            413 => ErrorKind::RequestTooLarge,
            429 => ErrorKind::RateLimited,
            503 | 529 => ErrorKind::Overloaded,
            400..=499 => ErrorKind::InvalidRequest,
            _ => ErrorKind::Api,
        }
    }

    /// The status the gateway answers with when the error is its own.
    pub fn status(self) -> StatusCode {
        match self {
            ErrorKind::InvalidRequest => StatusCode::BAD_REQUEST,
            ErrorKind::Authentication => StatusCode::UNAUTHORIZED,
            ErrorKind::Permission => StatusCode::FORBIDDEN,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            ErrorKind::RequestTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            ErrorKind::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::Api => StatusCode::INTERNAL_SERVER_ERROR,
            ErrorKind::BadGateway => StatusCode::BAD_GATEWAY,
            ErrorKind::GatewayTimeout => StatusCode::GATEWAY_TIMEOUT,
            ErrorKind::LoopDetected => StatusCode::LOOP_DETECTED,
        }
    }

    /// Anthropic's `error.type`.
    pub fn anthropic_type(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest | ErrorKind::RequestTimeout => "invalid_request_error",
            ErrorKind::Authentication => "authentication_error",
            ErrorKind::Permission => "permission_error",
            ErrorKind::NotFound => "not_found_error",
            ErrorKind::RequestTooLarge => "request_too_large",
            ErrorKind::RateLimited => "rate_limit_error",
            ErrorKind::Overloaded => "overloaded_error",
            ErrorKind::Api | ErrorKind::BadGateway | ErrorKind::GatewayTimeout | ErrorKind::LoopDetected => "api_error",
        }
    }

    /// OpenAI's `error.type`: OpenAI itself answers client errors, 401 and 403 included, as
    /// `invalid_request_error` (with the detail in `code`, e.g. `invalid_api_key`).
    pub fn openai_type(self) -> &'static str {
        match self {
            ErrorKind::RateLimited => "rate_limit_error",
            ErrorKind::Overloaded
            | ErrorKind::Api
            | ErrorKind::BadGateway
            | ErrorKind::GatewayTimeout
            | ErrorKind::LoopDetected => "server_error",
            ErrorKind::InvalidRequest
            | ErrorKind::Authentication
            | ErrorKind::Permission
            | ErrorKind::NotFound
            | ErrorKind::RequestTooLarge
            | ErrorKind::RequestTimeout => "invalid_request_error",
        }
    }

    /// Gemini's `error.status` (a Google RPC status name, SPEC §9's Gemini column).
    pub fn gemini_status(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest | ErrorKind::RequestTooLarge => "INVALID_ARGUMENT",
            ErrorKind::Authentication => "UNAUTHENTICATED",
            ErrorKind::Permission => "PERMISSION_DENIED",
            ErrorKind::NotFound => "NOT_FOUND",
            ErrorKind::RateLimited => "RESOURCE_EXHAUSTED",
            ErrorKind::Overloaded | ErrorKind::BadGateway => "UNAVAILABLE",
            ErrorKind::RequestTimeout | ErrorKind::GatewayTimeout => "DEADLINE_EXCEEDED",
            ErrorKind::Api | ErrorKind::LoopDetected => "INTERNAL",
        }
    }

    /// `response.error.code` of a failed Responses response: only the values the API (and the
    /// openai-python `ResponseError` model) define.
    pub fn failed_response_code(self) -> &'static str {
        match self {
            ErrorKind::RateLimited => "rate_limit_exceeded",
            ErrorKind::InvalidRequest
            | ErrorKind::Authentication
            | ErrorKind::Permission
            | ErrorKind::NotFound
            | ErrorKind::RequestTooLarge
            | ErrorKind::RequestTimeout => "invalid_prompt",
            ErrorKind::Overloaded
            | ErrorKind::Api
            | ErrorKind::BadGateway
            | ErrorKind::GatewayTimeout
            | ErrorKind::LoopDetected => "server_error",
        }
    }
}

/// Anthropic's error body, `{"type":"error","error":{"type","message"}}`; also the data of its
/// `error` stream event.
#[derive(Serialize)]
pub struct AnthropicError<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    error: AnthropicErrorDetail<'a>,
}

#[derive(Serialize)]
struct AnthropicErrorDetail<'a> {
    #[serde(rename = "type")]
    ty: &'a str,
    message: &'a str,
}

impl<'a> AnthropicError<'a> {
    /// `error_type` is Anthropic's (`ErrorKind::anthropic_type`, or an upstream's own).
    pub fn new(error_type: &'a str, message: &'a str) -> Self {
        Self { ty: "error", error: AnthropicErrorDetail { ty: error_type, message } }
    }
}

/// The OpenAI APIs' error body (Chat Completions and Responses alike),
/// `{"error":{"message","type","param","code"}}`; also the data of a Chat stream's error chunk.
#[derive(Serialize)]
pub struct OpenAiError<'a> {
    error: OpenAiErrorDetail<'a>,
}

#[derive(Serialize)]
struct OpenAiErrorDetail<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    ty: &'a str,
    param: Option<&'a str>,
    code: Option<&'a str>,
}

impl<'a> OpenAiError<'a> {
    pub fn new(message: &'a str, error_type: &'a str, param: Option<&'a str>, code: Option<&'a str>) -> Self {
        Self { error: OpenAiErrorDetail { message, ty: error_type, param, code } }
    }
}

/// Gemini's error body, `{"error":{"code","message","status"}}`; also the chunk that ends a
/// Gemini stream with an error ([`gemini_error_chunk`]).
#[derive(Serialize)]
pub struct GeminiError<'a> {
    error: GeminiErrorDetail<'a>,
}

#[derive(Serialize)]
struct GeminiErrorDetail<'a> {
    code: u16,
    message: &'a str,
    status: &'a str,
}

impl<'a> GeminiError<'a> {
    /// `code` is the HTTP status, `status` the RPC status name (`ErrorKind::gemini_status`).
    pub fn new(code: u16, message: &'a str, status: &'a str) -> Self {
        Self { error: GeminiErrorDetail { code, message, status } }
    }
}

/// The body as a `Value` (its keys sorted when written), for callers that build `Value`s.
pub fn to_value(body: &impl Serialize) -> Value {
    serde_json::to_value(body).unwrap_or(Value::Null)
}

/// Append Anthropic's stream error: `event: error` carrying the error body.
pub fn anthropic_error_event(out: &mut Vec<u8>, body: &impl Serialize) {
    write_event(out, Some("error"), body);
}

/// Append a Chat stream's error: a data chunk carrying the error body (Chat streams name no
/// events; the SDKs raise on a chunk with an `error` key).
pub fn chat_error_chunk(out: &mut Vec<u8>, body: &impl Serialize) {
    write_event(out, None, body);
}

/// Append a Gemini stream's error: the bare error object on a line of its own, not an SSE
/// `data:` event. The Google GenAI SDK the Gemini CLI bundles (npm `@google/genai`) raises an
/// `ApiError` only for a network chunk that parses as JSON with an `error` key; a
/// `data: {"error": …}` event reads as an empty `GenerateContentResponse`, so the CLI reports
/// an empty answer and exits 0 (the fixtures' `cli_midstream*` captures show both forms). The
/// Python SDK raises for this form too (a line that is not `data:` is read as JSON).
pub fn gemini_error_chunk(out: &mut Vec<u8>, body: &impl Serialize) {
    if serde_json::to_writer(&mut *out, body).is_err() {
        out.extend_from_slice(b"{}");
    }
    out.push(b'\n');
}

/// For a Gemini client on a pass-through stream: an upstream error that came as an SSE event
/// (`data: {"error": …}`), repeated as the bare line [`gemini_error_chunk`] writes, which is the
/// form the Gemini CLI reports (it reads the SSE form as an empty answer). The upstream's own
/// object, compacted onto one line; nothing when the data is not a JSON object.
pub fn gemini_repeat_error(out: &mut Vec<u8>, data: &str) {
    if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(data) {
        gemini_error_chunk(out, &v);
    }
}

/// Append a Responses stream's terminal failure: `response.failed` with its sequence number
/// and the failed `response` object (`status: "failed"`, `error: {code, message}`).
pub fn response_failed_event(out: &mut Vec<u8>, sequence_number: u64, response: Value) {
    let data = json!({"type": "response.failed", "sequence_number": sequence_number, "response": response});
    write_event(out, Some("response.failed"), &data);
}

/// The bytes of a protocol-native error event to append to a pass-through stream whose bytes
/// have already reached the client (SPEC §6): the gateway's own error, in the shape the client
/// expects mid-stream. (A converted stream's encoder writes its own, with what it has sent.)
pub fn stream_error_event(format: Format, message: &str, ctx: &StreamContext) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    match format {
        Format::Anthropic => {
            let error = GatewayError::new(ErrorKind::BadGateway, "upstream_stream_error", message);
            anthropic_error_event(&mut out, &error.body(Protocol::Claude));
        }
        Format::Openai => {
            let error = GatewayError::new(ErrorKind::BadGateway, "upstream_stream_error", message);
            chat_error_chunk(&mut out, &error.body(Protocol::Openai));
        }
        Format::Responses => {
            let sequence_number = ctx.last_sequence_number.map_or(0, |n| n.saturating_add(1));
            let response = json!({
                "id": ctx.response_id.as_deref().unwrap_or("resp_ccmesh_stream_error"),
                "object": "response",
                "created_at": ctx.created_at.unwrap_or(0),
                "status": "failed",
                "error": { "code": ErrorKind::BadGateway.failed_response_code(), "message": message },
                "incomplete_details": null,
                "instructions": null,
                "max_output_tokens": null,
                "metadata": {},
                "model": ctx.model.as_deref().unwrap_or(""),
                "output": [],
                "parallel_tool_calls": true,
                "previous_response_id": null,
                "reasoning": null,
                "temperature": null,
                "tool_choice": "auto",
                "tools": [],
                "top_p": null,
                "truncation": "disabled",
                "usage": null,
                "user": null,
            });
            response_failed_event(&mut out, sequence_number, response);
        }
        Format::Gemini => {
            let kind = ErrorKind::BadGateway;
            gemini_error_chunk(&mut out, &GeminiError::new(kind.status().as_u16(), message, kind.gemini_status()));
        }
    }
    out
}

/// The header by which the official SDKs learn whether retrying can help.
const X_SHOULD_RETRY: axum::http::HeaderName = axum::http::HeaderName::from_static("x-should-retry");

/// An error made by ccmesh (not relayed from an upstream).
#[derive(Clone, Debug, PartialEq)]
pub struct GatewayError {
    pub kind: ErrorKind,
    /// What happened and what to do about it.
    pub message: String,
    /// Machine-readable code for OpenAI-shaped bodies (`model_not_found`, `circuit_open`, ...).
    pub code: &'static str,
    pub param: Option<&'static str>,
    /// Seconds for the `Retry-After` header (429 only).
    pub retry_after_secs: Option<u64>,
    /// A spent budget (429 only, SPEC §9): OpenAI's `insufficient_quota` type, and
    /// `x-should-retry: false`, which tells the official SDKs not to retry what cannot succeed
    /// before the budget's window resets.
    pub quota: bool,
}

impl GatewayError {
    pub fn new(kind: ErrorKind, code: &'static str, message: impl Into<String>) -> Self {
        Self { kind, message: message.into(), code, param: None, retry_after_secs: None, quota: false }
    }

    /// Mark a 429 as a spent budget (see `quota`).
    pub fn quota(mut self) -> Self {
        self.quota = true;
        self
    }

    /// OpenAI's `error.type` of this error.
    pub fn openai_type(&self) -> &'static str {
        if self.quota { "insufficient_quota" } else { self.kind.openai_type() }
    }

    /// Not an answer at all: the client closed the connection before its request was complete.
    pub fn client_gone() -> Self {
        Self::new(ErrorKind::InvalidRequest, "client_closed", "the client closed the connection mid-request")
    }

    pub fn is_client_gone(&self) -> bool {
        self.code == "client_closed"
    }

    pub fn with_param(mut self, param: &'static str) -> Self {
        self.param = Some(param);
        self
    }

    pub fn with_retry_after(mut self, secs: u64) -> Self {
        self.retry_after_secs = Some(secs);
        self
    }

    pub fn body(&self, protocol: Protocol) -> Value {
        match protocol {
            Protocol::Claude => to_value(&AnthropicError::new(self.kind.anthropic_type(), &self.message)),
            Protocol::Openai | Protocol::Responses => {
                to_value(&OpenAiError::new(&self.message, self.openai_type(), self.param, Some(self.code)))
            }
            Protocol::Gemini => {
                to_value(&GeminiError::new(self.kind.status().as_u16(), &self.message, self.kind.gemini_status()))
            }
        }
    }

    pub fn into_response(self, protocol: Protocol) -> Response {
        let mut response = (self.kind.status(), axum::Json(self.body(protocol))).into_response();
        if let Some(secs) = self.retry_after_secs {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.quota {
            response.headers_mut().insert(X_SHOULD_RETRY, HeaderValue::from_static("false"));
        }
        response
    }
}

impl std::fmt::Display for GatewayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for GatewayError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Format::{Anthropic, Openai, Responses};
    use crate::protocol::sse::SseScanner;
    use crate::protocol::stream_events::tests::{err, kind};

    #[test]
    fn anthropic_shape() {
        let e = GatewayError::new(ErrorKind::NotFound, "model_not_found", "no enabled endpoint serves model 'x'");
        assert_eq!(
            e.body(Protocol::Claude),
            json!({"type":"error","error":{"type":"not_found_error","message":"no enabled endpoint serves model 'x'"}})
        );
    }

    #[test]
    fn gemini_shape_follows_spec_9s_column() {
        let body = |kind| GatewayError::new(kind, "x", "what happened").body(Protocol::Gemini);
        assert_eq!(
            body(ErrorKind::NotFound),
            json!({"error":{"code":404,"message":"what happened","status":"NOT_FOUND"}})
        );
        for (kind, code, status) in [
            (ErrorKind::InvalidRequest, 400, "INVALID_ARGUMENT"),
            (ErrorKind::Authentication, 401, "UNAUTHENTICATED"),
            (ErrorKind::Permission, 403, "PERMISSION_DENIED"),
            (ErrorKind::RequestTooLarge, 413, "INVALID_ARGUMENT"),
            (ErrorKind::RateLimited, 429, "RESOURCE_EXHAUSTED"),
            (ErrorKind::BadGateway, 502, "UNAVAILABLE"),
            (ErrorKind::Overloaded, 503, "UNAVAILABLE"),
            (ErrorKind::GatewayTimeout, 504, "DEADLINE_EXCEEDED"),
            (ErrorKind::LoopDetected, 508, "INTERNAL"),
        ] {
            assert_eq!(body(kind)["error"]["code"], code, "{kind:?}");
            assert_eq!(body(kind)["error"]["status"], status, "{kind:?}");
        }
    }

    #[test]
    fn openai_shape_has_code_and_param() {
        let e = GatewayError::new(ErrorKind::RateLimited, "rate_limited", "slow down").with_param("model");
        assert_eq!(
            e.body(Protocol::Responses),
            json!({"error":{"message":"slow down","type":"rate_limit_error","code":"rate_limited","param":"model"}})
        );
    }

    #[test]
    fn statuses_and_retry_after() {
        let r = GatewayError::new(ErrorKind::RateLimited, "rate_limited", "x")
            .with_retry_after(3)
            .into_response(Protocol::Openai);
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()[header::RETRY_AFTER], "3");
        for (k, s) in [
            (ErrorKind::InvalidRequest, 400),
            (ErrorKind::NotFound, 404),
            (ErrorKind::RequestTooLarge, 413),
            (ErrorKind::BadGateway, 502),
            (ErrorKind::Overloaded, 503),
        ] {
            assert_eq!(k.status().as_u16(), s);
        }
    }

    #[test]
    fn gateway_bodies_are_written_with_sorted_keys() {
        // What clients have always received; SDKs do not care, byte-level tests do.
        let e = GatewayError::new(ErrorKind::NotFound, "model_not_found", "no").with_param("model");
        assert_eq!(
            e.body(Protocol::Claude).to_string(),
            r#"{"error":{"message":"no","type":"not_found_error"},"type":"error"}"#
        );
        assert_eq!(
            e.body(Protocol::Openai).to_string(),
            r#"{"error":{"code":"model_not_found","message":"no","param":"model","type":"invalid_request_error"}}"#
        );
    }

    #[test]
    fn kinds_from_upstream_statuses() {
        for (status, kind) in [
            (400, ErrorKind::InvalidRequest),
            (401, ErrorKind::Authentication),
            (402, ErrorKind::Permission),
            (403, ErrorKind::Permission),
            (404, ErrorKind::NotFound),
            (409, ErrorKind::InvalidRequest),
            (413, ErrorKind::RequestTooLarge),
            (422, ErrorKind::InvalidRequest),
            (429, ErrorKind::RateLimited),
            (499, ErrorKind::InvalidRequest),
            (500, ErrorKind::Api),
            (502, ErrorKind::Api),
            (503, ErrorKind::Overloaded),
            (529, ErrorKind::Overloaded),
            (200, ErrorKind::Api),
        ] {
            assert_eq!(ErrorKind::from_status(status), kind, "{status}");
        }
    }

    #[test]
    fn anthropic_413_is_request_too_large() {
        // The gateway's own 413 said `invalid_request_error` while the codec (and Anthropic's
        // API) say `request_too_large`; with one kind there is one answer.
        let e = GatewayError::new(ErrorKind::RequestTooLarge, "request_too_large", "too big");
        assert_eq!(e.body(Protocol::Claude)["error"]["type"], "request_too_large");
        assert_eq!(e.body(Protocol::Openai)["error"]["type"], "invalid_request_error");
        assert_eq!(e.kind.status(), StatusCode::PAYLOAD_TOO_LARGE);
    }

    #[test]
    fn every_kind_has_a_status_and_native_types() {
        let table = [
            (ErrorKind::InvalidRequest, 400, "invalid_request_error", "invalid_request_error", "invalid_prompt"),
            (ErrorKind::Authentication, 401, "authentication_error", "invalid_request_error", "invalid_prompt"),
            (ErrorKind::Permission, 403, "permission_error", "invalid_request_error", "invalid_prompt"),
            (ErrorKind::NotFound, 404, "not_found_error", "invalid_request_error", "invalid_prompt"),
            (ErrorKind::RequestTooLarge, 413, "request_too_large", "invalid_request_error", "invalid_prompt"),
            (ErrorKind::RateLimited, 429, "rate_limit_error", "rate_limit_error", "rate_limit_exceeded"),
            (ErrorKind::Overloaded, 503, "overloaded_error", "server_error", "server_error"),
            (ErrorKind::Api, 500, "api_error", "server_error", "server_error"),
            (ErrorKind::BadGateway, 502, "api_error", "server_error", "server_error"),
        ];
        for (kind, status, anthropic, openai, failed) in table {
            assert_eq!(kind.status().as_u16(), status, "{kind:?}");
            assert_eq!(kind.anthropic_type(), anthropic, "{kind:?}");
            assert_eq!(kind.openai_type(), openai, "{kind:?}");
            assert_eq!(kind.failed_response_code(), failed, "{kind:?}");
        }
    }

    #[test]
    fn native_bodies_in_the_apis_own_key_order() {
        let mut out = Vec::new();
        super::anthropic_error_event(&mut out, &AnthropicError::new("overloaded_error", "busy"));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"busy\"}}\n\n"
        );
        let mut out = Vec::new();
        chat_error_chunk(&mut out, &OpenAiError::new("busy", "server_error", None, Some("x")));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "data: {\"error\":{\"message\":\"busy\",\"type\":\"server_error\",\"param\":null,\"code\":\"x\"}}\n\n"
        );
        let mut out = Vec::new();
        response_failed_event(&mut out, 7, json!({"id": "resp_1", "status": "failed"}));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "event: response.failed\ndata: {\"response\":{\"id\":\"resp_1\",\"status\":\"failed\"},\"sequence_number\":7,\"type\":\"response.failed\"}\n\n"
        );
    }

    fn parse_error_event(bytes: &[u8]) -> (Option<String>, Value) {
        let mut scanner = SseScanner::new();
        let mut out = Vec::new();
        scanner.feed(bytes, |e| out.push((e.event.map(str::to_owned), serde_json::from_str::<Value>(e.data).unwrap())));
        assert_eq!(scanner.pending_bytes(), 0);
        assert_eq!(out.len(), 1);
        out.pop().unwrap()
    }

    const NASTY: &str = "upstream reset: \"quoted\"\n\r\\ <tag> \u{1F4A5} \u{0}";

    #[test]
    fn anthropic_error_event() {
        let bytes = stream_error_event(Anthropic, NASTY, &StreamContext::default());
        assert!(bytes.starts_with(b"event: error\ndata: {"));
        assert!(bytes.ends_with(b"}\n\n"));
        let (name, v) = parse_error_event(&bytes);
        assert_eq!(name.as_deref(), Some("error"));
        assert_eq!(v, json!({"type":"error","error":{"type":"api_error","message":NASTY}}));
        let text = String::from_utf8(bytes).unwrap();
        let data = text.strip_prefix("event: error\ndata: ").unwrap().trim_end();
        assert_eq!(kind(Anthropic, Some("error"), data), err(false, false, NASTY));
    }

    #[test]
    fn openai_error_event() {
        let bytes = stream_error_event(Openai, NASTY, &StreamContext::default());
        assert!(bytes.starts_with(b"data: {"));
        let (name, v) = parse_error_event(&bytes);
        assert_eq!(name, None);
        assert_eq!(
            v,
            json!({"error":{"message":NASTY,"type":"server_error","code":"upstream_stream_error","param":null}})
        );
        assert_eq!(kind(Openai, None, &v.to_string()), err(false, false, NASTY));
    }

    #[test]
    fn gemini_error_chunk_is_bare_json() {
        let bytes = stream_error_event(crate::protocol::Format::Gemini, NASTY, &StreamContext::default());
        // Not an SSE event: the line is the error object itself.
        assert!(bytes.starts_with(b"{\"error\":{\"code\":502,"), "{}", String::from_utf8_lossy(&bytes));
        assert!(bytes.ends_with(b"}\n"));
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["error"]["status"], "UNAVAILABLE");
        assert_eq!(v["error"]["message"], NASTY);
        for (k, status) in [
            (ErrorKind::InvalidRequest, "INVALID_ARGUMENT"),
            (ErrorKind::Authentication, "UNAUTHENTICATED"),
            (ErrorKind::Permission, "PERMISSION_DENIED"),
            (ErrorKind::NotFound, "NOT_FOUND"),
            (ErrorKind::RequestTooLarge, "INVALID_ARGUMENT"),
            (ErrorKind::RateLimited, "RESOURCE_EXHAUSTED"),
            (ErrorKind::BadGateway, "UNAVAILABLE"),
            (ErrorKind::Overloaded, "UNAVAILABLE"),
            (ErrorKind::GatewayTimeout, "DEADLINE_EXCEEDED"),
            (ErrorKind::LoopDetected, "INTERNAL"),
        ] {
            assert_eq!(k.gemini_status(), status, "{k:?} (SPEC §9)");
        }
    }

    #[test]
    fn responses_error_event() {
        let ctx = StreamContext {
            response_id: Some("resp_abc".to_owned()),
            last_sequence_number: Some(41),
            model: Some("gpt-4.1".to_owned()),
            created_at: Some(1741290958),
        };
        let bytes = stream_error_event(Responses, NASTY, &ctx);
        assert!(bytes.starts_with(b"event: response.failed\ndata: {"));
        let (name, v) = parse_error_event(&bytes);
        assert_eq!(name.as_deref(), Some("response.failed"));
        assert_eq!(v["type"], "response.failed");
        assert_eq!(v["sequence_number"], 42);
        let r = &v["response"];
        assert_eq!(r["id"], "resp_abc");
        assert_eq!(r["object"], "response");
        assert_eq!(r["status"], "failed");
        assert_eq!(r["model"], "gpt-4.1");
        assert_eq!(r["created_at"], 1741290958);
        assert_eq!(r["error"], json!({"code":"server_error","message":NASTY}));
        // Fields the SDKs' Response model requires.
        for key in ["output", "tools", "parallel_tool_calls", "tool_choice", "metadata"] {
            assert!(r.get(key).is_some(), "{key}");
        }
        assert_eq!(kind(Responses, Some("response.failed"), &v.to_string()), err(false, false, NASTY));
        // Unknown context: still well-formed.
        let (_, v) = parse_error_event(&stream_error_event(Responses, "x", &StreamContext::default()));
        assert_eq!(v["sequence_number"], 0);
        assert!(v["response"]["id"].as_str().unwrap().starts_with("resp_"));
    }
}
