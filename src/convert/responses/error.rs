//! Error bodies: an upstream's error to the IR, and the IR to the Responses API's
//! `{"error":{...}}` body; with the error codes the response and stream decoders read.

use serde_json::Value;

use super::get_str;
use crate::convert::ir::ErrorBody;
use crate::protocol::errors::{ErrorKind, OpenAiError, to_value};
use crate::protocol::lenient::body_text;

/// Longest error message kept from an unparseable upstream error body, in characters.
const MAX_ERROR_TEXT: usize = 1000;

pub(super) fn error_kind_for_code(code: Option<&str>) -> ErrorKind {
    match code.unwrap_or_default() {
        "rate_limit_exceeded" | "insufficient_quota" | "rate_limit_error" | "requests" | "tokens" => {
            ErrorKind::RateLimited
        }
        "server_is_overloaded" | "slow_down" | "overloaded_error" => ErrorKind::Overloaded,
        "invalid_api_key" | "authentication_error" => ErrorKind::Authentication,
        "permission_denied" | "permission_error" => ErrorKind::Permission,
        "model_not_found" | "not_found_error" => ErrorKind::NotFound,
        "context_length_exceeded"
        | "invalid_prompt"
        | "invalid_request_error"
        | "invalid_image"
        | "invalid_image_format"
        | "invalid_base64_image"
        | "invalid_image_url"
        | "image_too_large"
        | "image_too_small"
        | "image_parse_error"
        | "image_content_policy_violation"
        | "invalid_image_mode"
        | "image_file_too_large"
        | "unsupported_image_media_type"
        | "empty_image_file"
        | "failed_to_download_image"
        | "image_file_not_found"
        | "bio_policy" => ErrorKind::InvalidRequest,
        _ => ErrorKind::Api,
    }
}

fn error_code_for(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidRequest => "invalid_request_error",
        ErrorKind::Authentication => "invalid_api_key",
        ErrorKind::Permission => "permission_denied",
        ErrorKind::NotFound => "model_not_found",
        ErrorKind::RequestTooLarge => "context_length_exceeded",
        ErrorKind::RateLimited => "rate_limit_exceeded",
        ErrorKind::Overloaded => "server_is_overloaded",
        ErrorKind::Api | ErrorKind::BadGateway => "server_error",
        ErrorKind::RequestTimeout => "timeout",
        ErrorKind::GatewayTimeout => "timeout",
        ErrorKind::LoopDetected => "loop_detected",
    }
}

/// Upstream error body (any status) → IR. Never fails.
pub fn decode_error(status: u16, body: &[u8]) -> ErrorBody {
    let kind = ErrorKind::from_status(status);
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let err = parsed.as_ref().and_then(|v| v.get("error")).filter(|e| e.is_object());
    if let Some(err) = err {
        let code = match err.get("code") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => get_str(err, "type").map(str::to_owned),
        };
        let message =
            get_str(err, "message").map(str::to_owned).unwrap_or_else(|| format!("upstream returned HTTP {status}"));
        return ErrorBody { kind, message, code, param: get_str(err, "param").map(str::to_owned) };
    }
    // Some upstreams answer `{"error": "text"}` or `{"message": "..."}`.
    let message = parsed
        .as_ref()
        .and_then(|v| get_str(v, "error").or_else(|| get_str(v, "message")).map(str::to_owned))
        .unwrap_or_else(|| {
            body_text(body, MAX_ERROR_TEXT).unwrap_or_else(|| format!("upstream returned HTTP {status}"))
        });
    ErrorBody { kind, message, code: None, param: None }
}

/// IR error → `{"error":{"message","type","param","code"}}`.
pub fn encode_error(err: &ErrorBody) -> Vec<u8> {
    let code = err.code.as_deref().unwrap_or_else(|| error_code_for(err.kind));
    let body = OpenAiError::new(&err.message, err.kind.openai_type(), err.param.as_deref(), Some(code));
    // Through a `Value`, like every document this codec writes (keys sorted).
    serde_json::to_vec(&to_value(&body)).unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    use serde_json::Value;

    #[test]
    fn payment_required_is_a_permission_error() {
        // This codec read 402 as an invalid request, the other two as a permission (billing)
        // error; the status table is one now.
        let e = decode_error(402, br#"{"error":{"message":"Your credit balance is too low","type":"billing"}}"#);
        assert_eq!(e.kind, ErrorKind::Permission);
    }

    #[test]
    fn errors() {
        let e = decode_error(
            429,
            br#"{"error":{"message":"Rate limit reached for gpt-4o","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#,
        );
        assert_eq!(
            e,
            ErrorBody {
                kind: ErrorKind::RateLimited,
                message: "Rate limit reached for gpt-4o".into(),
                code: Some("rate_limit_exceeded".into()),
                param: None
            }
        );
        let e = decode_error(400, br#"{"error":{"message":"Invalid 'input[0]'","type":"invalid_request_error","param":"input[0]","code":null}}"#);
        assert_eq!(
            (e.kind, e.code.as_deref(), e.param.as_deref()),
            (ErrorKind::InvalidRequest, Some("invalid_request_error"), Some("input[0]"))
        );
        assert_eq!(decode_error(401, b"").message, "upstream returned HTTP 401");
        assert_eq!(decode_error(401, b"").kind, ErrorKind::Authentication);
        assert_eq!(decode_error(502, b"<html>Bad gateway</html>").message, "<html>Bad gateway</html>");
        assert_eq!(decode_error(503, br#"{"error":"overloaded"}"#).message, "overloaded");
        assert_eq!(decode_error(529, b"x").kind, ErrorKind::Overloaded);
        let long = "é".repeat(5000);
        assert_eq!(decode_error(500, long.as_bytes()).message.chars().count(), MAX_ERROR_TEXT + 1);

        let mut bodies = Vec::new();
        for kind in [
            ErrorKind::InvalidRequest,
            ErrorKind::Authentication,
            ErrorKind::Permission,
            ErrorKind::NotFound,
            ErrorKind::RequestTooLarge,
            ErrorKind::RateLimited,
            ErrorKind::Overloaded,
            ErrorKind::Api,
        ] {
            let b = encode_error(&ErrorBody { kind, message: format!("{kind:?} happened"), code: None, param: None });
            let v: Value = serde_json::from_slice(&b).unwrap();
            // Round trip through our own decoder keeps the message and the kind's code.
            let back = decode_error(400, &b);
            assert_eq!(back.message, format!("{kind:?} happened"));
            bodies.push(v);
        }
        bodies.push(
            serde_json::from_slice(&encode_error(&ErrorBody {
                kind: ErrorKind::InvalidRequest,
                message: "prompt is too long".into(),
                code: Some("invalid_request_error".into()),
                param: Some("input".into()),
            }))
            .unwrap(),
        );
        insta::assert_json_snapshot!("encode_errors", bodies);
    }
}
