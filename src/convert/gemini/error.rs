//! Error bodies: a Gemini upstream's `{"error":{"code","message","status"}}` (or a relay's
//! Anthropic / OpenAI shape) to the IR, the IR to Gemini's body, and the error chunk that ends
//! a Gemini client's stream.

use serde_json::Value;

use super::Obj;
use crate::convert::ir::ErrorBody;
use crate::protocol::errors::{ErrorKind, GeminiError, gemini_error_chunk};
use crate::protocol::lenient::{body_text, count, get, get_str, truncate_marked};

/// Longest error message kept from an upstream's error body, in characters.
const MAX_ERROR_MESSAGE: usize = 2000;

/// An error kind from a Google RPC status name (or, for relays, an Anthropic / OpenAI type).
pub(super) fn kind_from_status_name(status: &str) -> Option<ErrorKind> {
    Some(match status {
        "INVALID_ARGUMENT"
        | "FAILED_PRECONDITION"
        | "OUT_OF_RANGE"
        | "ABORTED"
        | "ALREADY_EXISTS"
        | "CANCELLED"
        | "invalid_request_error" => ErrorKind::InvalidRequest,
        "UNAUTHENTICATED" | "authentication_error" | "invalid_api_key" => ErrorKind::Authentication,
        "PERMISSION_DENIED" | "permission_error" => ErrorKind::Permission,
        "NOT_FOUND" | "not_found_error" | "model_not_found" => ErrorKind::NotFound,
        "RESOURCE_EXHAUSTED" | "rate_limit_error" | "rate_limit_exceeded" | "insufficient_quota" => {
            ErrorKind::RateLimited
        }
        "UNAVAILABLE" | "overloaded_error" => ErrorKind::Overloaded,
        "DEADLINE_EXCEEDED" => ErrorKind::GatewayTimeout,
        "INTERNAL" | "UNKNOWN" | "DATA_LOSS" | "UNIMPLEMENTED" | "api_error" | "server_error" => ErrorKind::Api,
        _ => return None,
    })
}

/// The fields of an error object: kind (by status name, else by code, else `by_status`),
/// message, status name.
pub(super) fn error_fields(e: &Obj, by_status: ErrorKind) -> (ErrorKind, Option<String>, Option<String>) {
    let status = get_str(e, "status").or_else(|| get_str(e, "type")).filter(|s| !s.is_empty());
    let code = get(e, "code");
    let kind = status
        .and_then(kind_from_status_name)
        .or_else(|| code.and_then(Value::as_str).and_then(kind_from_status_name))
        .or_else(|| {
            code.and_then(count)
                .and_then(|c| u16::try_from(c).ok())
                .filter(|c| (400..600).contains(c))
                .map(ErrorKind::from_status)
        })
        .unwrap_or(by_status);
    let message = get_str(e, "message").map(|m| truncate_marked(m, MAX_ERROR_MESSAGE));
    (kind, message, status.map(str::to_owned))
}

/// Upstream error body (any status) → IR. Gemini's object, also inside an array (the JSON-array
/// stream's form); anything else keeps the (truncated) body text.
pub fn decode_error(status: u16, body: &[u8]) -> ErrorBody {
    let by_status = ErrorKind::from_status(status);
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let object = match &parsed {
        Some(Value::Array(items)) => items.first().and_then(Value::as_object),
        Some(Value::Object(o)) => Some(o),
        _ => None,
    };
    if let Some(o) = object {
        let error = get(o, "error");
        if let Some(e) = error.and_then(Value::as_object) {
            let (kind, message, code) = error_fields(e, by_status);
            if let Some(message) = message {
                return ErrorBody { kind, message, code, param: None };
            }
        }
        if let Some(message) = error.and_then(Value::as_str).or_else(|| get_str(o, "message")) {
            return ErrorBody {
                kind: by_status,
                message: truncate_marked(message, MAX_ERROR_MESSAGE),
                code: None,
                param: None,
            };
        }
    }
    let message = body_text(body, MAX_ERROR_MESSAGE).unwrap_or_else(|| format!("upstream answered HTTP {status}"));
    ErrorBody { kind: by_status, message, code: None, param: None }
}

/// The Gemini status name to write: the upstream's own when it is one and agrees with the kind
/// (`FAILED_PRECONDITION` survives), else the kind's (SPEC §9).
fn status_name(e: &ErrorBody) -> &str {
    match e.code.as_deref() {
        Some(s)
            if s.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') && kind_from_status_name(s) == Some(e.kind) =>
        {
            s
        }
        _ => e.kind.gemini_status(),
    }
}

/// IR error → Gemini error body. The code is the kind's status (the gateway keeps the
/// upstream's status on the response itself).
pub fn encode_error(e: &ErrorBody) -> Vec<u8> {
    serde_json::to_vec(&GeminiError::new(e.kind.status().as_u16(), &e.message, status_name(e))).unwrap_or_default()
}

/// The chunk that ends a Gemini client's stream with an error: the bare error object, not an
/// SSE `data:` event (see `protocol::errors::gemini_error_chunk` for why).
pub fn error_chunk(e: &ErrorBody, out: &mut Vec<u8>) {
    gemini_error_chunk(out, &GeminiError::new(e.kind.status().as_u16(), &e.message, status_name(e)));
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use insta::assert_json_snapshot;

    fn fixture_answer(status: u16, body: &str) -> String {
        let e = decode_error(status, body.as_bytes());
        format!(
            "{status} {body} → {:?} {:?} {:?} → {}",
            e.kind,
            e.message,
            e.code,
            String::from_utf8(encode_error(&e)).unwrap()
        )
    }

    #[test]
    fn decode_and_encode_errors() {
        let table = [
            (
                400,
                r#"{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID"}]}}"#,
            ),
            (
                400,
                r#"{"error":{"code":400,"message":"User location is not supported for the API use.","status":"FAILED_PRECONDITION"}}"#,
            ),
            (
                403,
                r#"{"error":{"code":403,"message":"Method doesn't allow unregistered callers.","status":"PERMISSION_DENIED"}}"#,
            ),
            (
                404,
                r#"{"error":{"code":404,"message":"models/gemini-9 is not found for API version v1beta","status":"NOT_FOUND"}}"#,
            ),
            (
                429,
                r#"{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.","status":"RESOURCE_EXHAUSTED"}}"#,
            ),
            (500, r#"{"error":{"code":500,"message":"An internal error has occurred.","status":"INTERNAL"}}"#),
            (
                503,
                r#"{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}"#,
            ),
            (
                504,
                r#"{"error":{"code":504,"message":"Deadline expired before operation could complete.","status":"DEADLINE_EXCEEDED"}}"#,
            ),
            (
                401,
                r#"{"error":{"code":401,"message":"Request had invalid authentication credentials.","status":"UNAUTHENTICATED"}}"#,
            ),
            (429, r#"[{"error":{"code":429,"message":"Resource has been exhausted","status":"RESOURCE_EXHAUSTED"}}]"#),
            (429, r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#),
            (502, "<html><body>Bad Gateway</body></html>"),
            (500, ""),
        ];
        assert_json_snapshot!(table.iter().map(|(s, b)| fixture_answer(*s, b)).collect::<Vec<_>>());
    }

    #[test]
    fn every_kind_has_its_spec_status() {
        let kinds = [
            ErrorKind::InvalidRequest,
            ErrorKind::Authentication,
            ErrorKind::Permission,
            ErrorKind::NotFound,
            ErrorKind::RequestTimeout,
            ErrorKind::RequestTooLarge,
            ErrorKind::RateLimited,
            ErrorKind::Overloaded,
            ErrorKind::Api,
            ErrorKind::BadGateway,
            ErrorKind::GatewayTimeout,
            ErrorKind::LoopDetected,
        ];
        let got: Vec<String> = kinds
            .iter()
            .map(|k| {
                let body = encode_error(&ErrorBody { kind: *k, message: "m".into(), code: None, param: None });
                format!("{k:?} → {}", String::from_utf8(body).unwrap())
            })
            .collect();
        assert_json_snapshot!(got);
    }

    #[test]
    fn the_stream_error_is_a_bare_json_chunk() {
        let mut out = Vec::new();
        error_chunk(
            &ErrorBody { kind: ErrorKind::RateLimited, message: "slow down".into(), code: None, param: None },
            &mut out,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"error\":{\"code\":429,\"message\":\"slow down\",\"status\":\"RESOURCE_EXHAUSTED\"}}\n"
        );
    }
}
