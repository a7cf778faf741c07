//! Errors the gateway itself produces, rendered in the inbound protocol's own shape (SPEC §9)
//! so that SDKs raise their normal exceptions (a gateway 429 is the SDK's RateLimitError).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::Protocol;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// 400: the client's request is wrong (bad JSON, unknown explicit endpoint, ...).
    InvalidRequest,
    /// 404: no enabled endpoint serves the model, or an unknown path.
    NotFound,
    /// 408: the request body paused longer than `limits.body_read_timeout_secs`.
    RequestTimeout,
    /// 413: body over `max_body_bytes`.
    PayloadTooLarge,
    /// 429: every candidate is rate-limited past the backoff budget.
    RateLimited,
    /// 502: all candidates circuit-open, or the upstream failed without an HTTP answer.
    BadGateway,
    /// 503: nothing configured for this protocol.
    NoEndpoints,
    /// 504: the request's total deadline passed.
    GatewayTimeout,
    /// 508: the request came back to this gateway (an endpoint points at it).
    LoopDetected,
    /// 500: a bug or an internal failure of ours.
    Internal,
}

impl ErrorKind {
    pub fn status(self) -> StatusCode {
        match self {
            ErrorKind::InvalidRequest => StatusCode::BAD_REQUEST,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            ErrorKind::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            ErrorKind::BadGateway => StatusCode::BAD_GATEWAY,
            ErrorKind::NoEndpoints => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::GatewayTimeout => StatusCode::GATEWAY_TIMEOUT,
            ErrorKind::LoopDetected => StatusCode::LOOP_DETECTED,
            ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn anthropic_type(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest | ErrorKind::PayloadTooLarge | ErrorKind::RequestTimeout => {
                "invalid_request_error"
            }
            ErrorKind::NotFound => "not_found_error",
            ErrorKind::RateLimited => "rate_limit_error",
            ErrorKind::BadGateway | ErrorKind::Internal | ErrorKind::GatewayTimeout | ErrorKind::LoopDetected => {
                "api_error"
            }
            ErrorKind::NoEndpoints => "overloaded_error",
        }
    }

    fn openai_type(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest
            | ErrorKind::PayloadTooLarge
            | ErrorKind::NotFound
            | ErrorKind::RequestTimeout => "invalid_request_error",
            ErrorKind::RateLimited => "rate_limit_error",
            ErrorKind::BadGateway
            | ErrorKind::NoEndpoints
            | ErrorKind::Internal
            | ErrorKind::GatewayTimeout
            | ErrorKind::LoopDetected => "server_error",
        }
    }
}

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
}

impl GatewayError {
    pub fn new(kind: ErrorKind, code: &'static str, message: impl Into<String>) -> Self {
        Self { kind, message: message.into(), code, param: None, retry_after_secs: None }
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

    pub fn body(&self, protocol: Protocol) -> serde_json::Value {
        match protocol {
            Protocol::Claude => json!({
                "type": "error",
                "error": {"type": self.kind.anthropic_type(), "message": self.message},
            }),
            Protocol::Openai | Protocol::Responses => json!({
                "error": {
                    "message": self.message,
                    "type": self.kind.openai_type(),
                    "code": self.code,
                    "param": self.param,
                },
            }),
        }
    }

    pub fn into_response(self, protocol: Protocol) -> Response {
        let mut response = (self.kind.status(), axum::Json(self.body(protocol))).into_response();
        if let Some(secs) = self.retry_after_secs {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
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

    #[test]
    fn anthropic_shape() {
        let e = GatewayError::new(ErrorKind::NotFound, "model_not_found", "no enabled endpoint serves model 'x'");
        assert_eq!(
            e.body(Protocol::Claude),
            json!({"type":"error","error":{"type":"not_found_error","message":"no enabled endpoint serves model 'x'"}})
        );
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
            (ErrorKind::PayloadTooLarge, 413),
            (ErrorKind::BadGateway, 502),
            (ErrorKind::NoEndpoints, 503),
        ] {
            assert_eq!(k.status().as_u16(), s);
        }
    }
}
