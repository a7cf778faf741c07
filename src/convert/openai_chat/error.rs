//! Error bodies: an upstream's error (in the shapes OpenAI-compatible vendors use) to the IR, and
//! the IR to Chat's `{"error":{...}}` body.

use serde_json::Value;

use super::Obj;
use crate::convert::ir::ErrorBody;
use crate::protocol::errors::{ErrorKind, OpenAiError};
use crate::protocol::lenient::{body_text, get, get_str, truncate_marked};

/// Longest error-message excerpt taken from an unparseable upstream body, in characters.
pub(super) const MAX_ERROR_TEXT: usize = 512;

/// The kind of an error status (4xx or 5xx); `None` for anything else, such as the 200 of a
/// stream or a numeric code that is not a status.
fn kind_from_status(status: u16) -> Option<ErrorKind> {
    (400..=599).contains(&status).then(|| ErrorKind::from_status(status))
}

fn kind_from_label(label: &str) -> Option<ErrorKind> {
    Some(match label {
        "invalid_request_error" | "context_length_exceeded" | "invalid_value" | "BadRequestError" => {
            ErrorKind::InvalidRequest
        }
        "authentication_error" | "invalid_api_key" | "AuthenticationError" => ErrorKind::Authentication,
        "permission_error" | "permission_denied" | "PermissionDeniedError" | "billing_error" => ErrorKind::Permission,
        "not_found_error" | "model_not_found" | "NotFoundError" => ErrorKind::NotFound,
        "request_too_large" => ErrorKind::RequestTooLarge,
        "rate_limit_error"
        | "rate_limit_exceeded"
        | "insufficient_quota"
        | "requests"
        | "tokens"
        | "RateLimitError" => ErrorKind::RateLimited,
        "overloaded_error"
        | "server_is_overloaded"
        | "engine_overloaded"
        | "slow_down"
        | "service_unavailable_error" => ErrorKind::Overloaded,
        "server_error" | "api_error" | "internal_error" | "InternalServerError" => ErrorKind::Api,
        _ => return None,
    })
}

/// The fields of an error object: message, type, code (string or number), param.
pub(super) struct ErrorFields {
    pub(super) message: Option<String>,
    pub(super) kind_label: Option<String>,
    pub(super) code: Option<String>,
    pub(super) param: Option<String>,
}

fn error_fields(e: &Obj) -> ErrorFields {
    let code = match get(e, "code") {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    ErrorFields {
        message: get_str(e, "message").map(str::to_owned),
        kind_label: get_str(e, "type").filter(|s| !s.is_empty()).map(str::to_owned),
        code,
        param: get_str(e, "param").map(str::to_owned),
    }
}

/// Finds the error object in the shapes vendors use: `{"error":{...}}`, `{"error":"text"}`,
/// `[{"error":{...}}]` (Gemini), or a top-level `{"object":"error","message":...}` (vLLM).
pub(super) fn find_error(v: &Value) -> Option<ErrorFields> {
    let v = match v {
        Value::Array(a) => a.first()?,
        v => v,
    };
    let o = v.as_object()?;
    match get(o, "error") {
        Some(Value::Object(e)) => Some(error_fields(e)),
        Some(Value::String(s)) => {
            let mut f = error_fields(o);
            f.message = Some(s.clone());
            Some(f)
        }
        _ if get_str(o, "message").is_some() || get_str(o, "detail").is_some() => {
            let mut f = error_fields(o);
            if f.message.is_none() {
                f.message = get_str(o, "detail").map(str::to_owned);
            }
            Some(f)
        }
        _ => None,
    }
}

pub(super) fn error_kind(status: Option<u16>, f: &ErrorFields) -> ErrorKind {
    let labelled = f
        .code
        .as_deref()
        .and_then(|c| kind_from_label(c).or_else(|| c.parse::<u16>().ok().and_then(kind_from_status)))
        .or_else(|| f.kind_label.as_deref().and_then(kind_from_label));
    match status.and_then(kind_from_status) {
        // A 5xx that says it is overloaded is overloaded; otherwise the status decides.
        Some(ErrorKind::Api) if labelled == Some(ErrorKind::Overloaded) => ErrorKind::Overloaded,
        Some(k) => k,
        None => labelled.unwrap_or(ErrorKind::Api),
    }
}

/// Upstream error body of this protocol (any status) -> IR. Never fails: unknown shapes become
/// ErrorKind from the status with the body text (truncated) as message.
pub fn decode_error(status: u16, body: &[u8]) -> ErrorBody {
    let found = serde_json::from_slice::<Value>(body).ok().as_ref().and_then(find_error);
    match found {
        Some(f) => {
            let kind = error_kind(Some(status), &f);
            let message =
                f.message.clone().unwrap_or_else(|| truncate_marked(&String::from_utf8_lossy(body), MAX_ERROR_TEXT));
            ErrorBody { kind, message, code: f.code.or(f.kind_label), param: f.param }
        }
        None => {
            let message = body_text(body, MAX_ERROR_TEXT)
                .unwrap_or_else(|| format!("the upstream answered {status} with no body"));
            ErrorBody { kind: kind_from_status(status).unwrap_or(ErrorKind::Api), message, code: None, param: None }
        }
    }
}

/// Chat's error body. The OpenAI type of the kind, except that authentication and permission
/// failures, and an exhausted quota, are named as such: the many Chat-compatible vendors and
/// their clients know these types.
pub(super) fn error_out(err: &ErrorBody) -> OpenAiError<'_> {
    let code = match (err.kind, err.code.as_deref()) {
        (ErrorKind::RateLimited, None | Some("rate_limit_error")) => Some("rate_limit_exceeded"),
        (_, c) => c,
    };
    let ty = match err.kind {
        ErrorKind::Authentication => "authentication_error",
        ErrorKind::Permission => "permission_error",
        ErrorKind::RateLimited if code == Some("insufficient_quota") => "insufficient_quota",
        kind => kind.openai_type(),
    };
    OpenAiError::new(&err.message, ty, err.param.as_deref(), code)
}

/// IR error -> this protocol's error body (the gateway keeps the upstream status).
pub fn encode_error(err: &ErrorBody) -> Vec<u8> {
    serde_json::to_vec(&error_out(err)).unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    use insta::assert_json_snapshot;
    use serde_json::{Value, json};

    #[test]
    fn decode_error_table() {
        let cases: Vec<(u16, &[u8])> = vec![
            (401, br#"{"error":{"message":"Incorrect API key provided: sk-abc***.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#),
            (429, br#"{"error":{"message":"Rate limit reached for gpt-4o on tokens per min (TPM).","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#),
            (429, br#"{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#),
            (404, br#"{"error":{"message":"The model `gpt-9` does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}"#),
            (400, br#"{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#),
            (500, br#"{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}"#),
            (500, br#"{"error":{"message":"overloaded","type":"server_error","code":"server_is_overloaded"}}"#),
            (503, br#"{"error":{"message":"Service Unavailable","type":"service_unavailable_error"}}"#),
            (402, br#"{"error":{"message":"Insufficient Balance","type":"unknown_error","param":null,"code":"invalid_request_error"}}"#),
            (403, br#"{"error":{"message":"Country, region, or territory not supported","type":"request_forbidden","code":"unsupported_country_region_territory"}}"#),
            (413, br#"{"error":"Request too large"}"#),
            (400, br#"[{"error":{"code":400,"message":"Invalid JSON payload received.","status":"INVALID_ARGUMENT"}}]"#),
            (400, br#"{"object":"error","message":"max_tokens is too large","type":"BadRequestError","param":null,"code":400}"#),
            (422, br#"{"detail":"Field required"}"#),
            (502, b"<html><body>Bad Gateway</body></html>"),
            (504, b""),
            (200, br#"{"error":{"message":"mid-stream","type":"rate_limit_error"}}"#),
        ];
        let got: Vec<Value> = cases
            .iter()
            .map(|(status, body)| {
                let e = decode_error(*status, body);
                json!({"status": status, "kind": format!("{:?}", e.kind), "message": e.message, "code": e.code, "param": e.param})
            })
            .collect();
        assert_json_snapshot!("decode_error_table", got);
        let long = "x".repeat(2000);
        assert!(decode_error(500, long.as_bytes()).message.chars().count() <= MAX_ERROR_TEXT + 1);
    }

    #[test]
    fn encode_error_table() {
        let kinds = [
            (ErrorKind::InvalidRequest, None, Some("messages")),
            (ErrorKind::Authentication, Some("invalid_api_key"), None),
            (ErrorKind::Permission, None, None),
            (ErrorKind::NotFound, Some("not_found_error"), None),
            (ErrorKind::RequestTooLarge, None, None),
            (ErrorKind::RateLimited, None, None),
            (ErrorKind::RateLimited, Some("insufficient_quota"), None),
            (ErrorKind::Overloaded, Some("overloaded_error"), None),
            (ErrorKind::Api, None, None),
        ];
        let got: Vec<Value> = kinds
            .iter()
            .map(|(kind, code, param)| {
                let e = ErrorBody {
                    kind: *kind,
                    message: format!("{kind:?} happened"),
                    code: code.map(str::to_owned),
                    param: param.map(str::to_owned),
                };
                serde_json::from_slice::<Value>(&encode_error(&e)).unwrap()
            })
            .collect();
        assert_json_snapshot!("encode_error_table", got);
        // Round trip through our own decoder keeps kind, message and code.
        for (kind, code, _) in kinds {
            let e = ErrorBody { kind, message: "m".into(), code: code.map(str::to_owned), param: None };
            let back = decode_error(200, &encode_error(&e));
            assert_eq!(back.message, "m");
            let same_family = match kind {
                ErrorKind::NotFound | ErrorKind::RequestTooLarge => ErrorKind::InvalidRequest,
                ErrorKind::Overloaded => ErrorKind::Overloaded,
                k => k,
            };
            assert!(back.kind == kind || back.kind == same_family, "{kind:?} → {:?}", back.kind);
        }
    }
}
