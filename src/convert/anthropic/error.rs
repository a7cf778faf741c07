//! Error bodies: an upstream's error (Anthropic-shaped, or OpenAI-shaped from a relay) to the IR,
//! and the IR to Anthropic's error body.

use serde_json::Value;

use crate::convert::ir::ErrorBody;
use crate::protocol::errors::{AnthropicError, ErrorKind};
use crate::protocol::lenient::{body_text, get_str, truncate_marked};

/// An error kind from an Anthropic `error.type` (OpenAI type/code strings are understood too,
/// for relays that answer in the other shape).
pub(super) fn error_kind_from_type(t: &str) -> Option<ErrorKind> {
    Some(match t {
        "invalid_request_error" => ErrorKind::InvalidRequest,
        "authentication_error" | "invalid_api_key" => ErrorKind::Authentication,
        "permission_error" | "billing_error" => ErrorKind::Permission,
        "not_found_error" | "model_not_found" => ErrorKind::NotFound,
        "request_too_large" => ErrorKind::RequestTooLarge,
        "rate_limit_error" | "rate_limit_exceeded" | "insufficient_quota" => ErrorKind::RateLimited,
        "overloaded_error" => ErrorKind::Overloaded,
        "api_error" | "server_error" | "timeout_error" => ErrorKind::Api,
        _ => return None,
    })
}

/// Longest error message kept from an upstream's error body, in characters.
const MAX_ERROR_MESSAGE: usize = 2000;

/// Upstream error body (any status) → IR. Understands Anthropic's shape and, for relays that
/// answer in it, OpenAI's; anything else keeps the (truncated) body text.
pub fn decode_error(status: u16, body: &[u8]) -> ErrorBody {
    let by_status = ErrorKind::from_status(status);
    if let Ok(Value::Object(obj)) = serde_json::from_slice::<Value>(body) {
        let e = obj.get("error");
        let inner = e.and_then(Value::as_object);
        let etype = inner.and_then(|i| get_str(i, "type")).filter(|t| !t.is_empty());
        let ecode = inner.and_then(|i| i.get("code")).and_then(|c| match c {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        });
        let message = inner
            .and_then(|i| get_str(i, "message"))
            .or_else(|| e.and_then(Value::as_str))
            .or_else(|| get_str(&obj, "message"));
        if let Some(message) = message {
            let kind = etype
                .and_then(error_kind_from_type)
                .or_else(|| ecode.as_deref().and_then(error_kind_from_type))
                .unwrap_or(by_status);
            return ErrorBody {
                kind,
                message: truncate_marked(message, MAX_ERROR_MESSAGE),
                // OpenAI's `code` (e.g. `rate_limit_exceeded`) is the more specific; Anthropic
                // bodies have none, their `type` is the code.
                code: ecode.or_else(|| etype.map(str::to_string)),
                param: inner.and_then(|i| get_str(i, "param")).map(str::to_string),
            };
        }
    }
    let message = body_text(body, MAX_ERROR_MESSAGE).unwrap_or_else(|| format!("upstream answered HTTP {status}"));
    ErrorBody { kind: by_status, message, code: None, param: None }
}

/// IR error → Anthropic error body.
pub fn encode_error(e: &ErrorBody) -> Vec<u8> {
    // An upstream's own Anthropic type (e.g. `billing_error`, `timeout_error`) is kept when it
    // is one; otherwise the kind decides.
    let ty = match e.code.as_deref() {
        Some(
            t @ ("invalid_request_error"
            | "authentication_error"
            | "billing_error"
            | "permission_error"
            | "not_found_error"
            | "request_too_large"
            | "rate_limit_error"
            | "timeout_error"
            | "api_error"
            | "overloaded_error"),
        ) if error_kind_from_type(t) == Some(e.kind) => t,
        _ => e.kind.anthropic_type(),
    };
    serde_json::to_vec(&AnthropicError::new(ty, &e.message)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::Value;

    #[test]
    fn decode_errors() {
        let cases: Vec<(u16, &str)> = vec![
            (
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"},"request_id":"req_1"}"#,
            ),
            (401, r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#),
            (402, r#"{"type":"error","error":{"type":"billing_error","message":"credit balance too low"}}"#),
            (403, r#"{"type":"error","error":{"type":"permission_error","message":"no access"}}"#),
            (404, r#"{"type":"error","error":{"type":"not_found_error","message":"model: claude-x"}}"#),
            (
                413,
                r#"{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum size"}}"#,
            ),
            (429, r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#),
            (500, r#"{"type":"error","error":{"type":"api_error","message":"Internal server error"}}"#),
            (504, r#"{"type":"error","error":{"type":"timeout_error","message":"timed out"}}"#),
            (529, r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#),
            (
                429,
                r#"{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#,
            ),
            (
                400,
                r#"{"error":{"message":"bad param","type":"invalid_request_error","param":"temperature","code":null}}"#,
            ),
            (502, "<html>Bad Gateway</html>"),
            (503, ""),
            (418, r#"{"detail":"teapot"}"#),
        ];
        let shown: Vec<String> =
            cases.iter().map(|(s, b)| format!("{s}: {:?}", decode_error(*s, b.as_bytes()))).collect();
        insta::assert_json_snapshot!(shown);
        let long = "x".repeat(10_000);
        assert!(decode_error(500, long.as_bytes()).message.len() < 2100);
    }

    #[test]
    fn long_error_messages_are_cut_by_characters() {
        // This codec and the Chat one counted bytes, the Responses one characters: a message
        // in a non-Latin script kept half (or a third) of what an English one keeps.
        let long = "\u{e9}".repeat(5000);
        let message = decode_error(500, long.as_bytes()).message;
        assert_eq!(message.chars().count(), MAX_ERROR_MESSAGE + 1);
        assert!(message.ends_with('…'));
    }

    #[test]
    fn encode_errors() {
        let kinds = [
            ErrorKind::InvalidRequest,
            ErrorKind::Authentication,
            ErrorKind::Permission,
            ErrorKind::NotFound,
            ErrorKind::RequestTooLarge,
            ErrorKind::RateLimited,
            ErrorKind::Overloaded,
            ErrorKind::Api,
        ];
        let shown: Vec<String> = kinds
            .iter()
            .map(|k| {
                String::from_utf8(encode_error(&ErrorBody {
                    kind: *k,
                    message: format!("{k:?} \"msg\""),
                    code: None,
                    param: None,
                }))
                .expect("utf8")
            })
            .collect();
        insta::assert_json_snapshot!(shown);
        // An upstream's own Anthropic type survives when consistent with the kind.
        let b = encode_error(&ErrorBody {
            kind: ErrorKind::Permission,
            message: "m".into(),
            code: Some("billing_error".into()),
            param: None,
        });
        assert_eq!(serde_json::from_slice::<Value>(&b).expect("json")["error"]["type"], "billing_error");
        let b = encode_error(&ErrorBody {
            kind: ErrorKind::RateLimited,
            message: "m".into(),
            code: Some("insufficient_quota".into()),
            param: None,
        });
        assert_eq!(serde_json::from_slice::<Value>(&b).expect("json")["error"]["type"], "rate_limit_error");
        for k in kinds {
            let e = ErrorBody { kind: k, message: "m".into(), code: None, param: None };
            assert_eq!(decode_error(400, &encode_error(&e)).kind, k);
        }
    }
}
