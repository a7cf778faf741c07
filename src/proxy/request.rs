//! Reading what the gateway needs from a client's request body without re-encoding it:
//! the model, the stream flag and the session fields (`affinity`), and a model rewrite that
//! keeps every other byte.

use std::ops::Range;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::protocol::errors::{ErrorKind, GatewayError};

/// What routing needs from a JSON body.
#[derive(Debug)]
pub struct Peek<'a> {
    /// The `model` value exactly as it appears in the body (with its quotes), for splicing.
    model_raw: Option<&'a RawValue>,
    pub model: Option<String>,
    pub stream: bool,
    /// `prompt_cache_key` (Responses, Chat), when a string.
    pub prompt_cache_key: Option<String>,
    /// `metadata.user_id` (Anthropic), when a string.
    pub user_id: Option<String>,
}

#[derive(Deserialize)]
struct PeekWire<'a> {
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(default)]
    stream: Option<serde_json::Value>,
    #[serde(default)]
    prompt_cache_key: Option<serde_json::Value>,
    #[serde(default)]
    metadata: Option<serde_json::Value>,
}

/// Whether a JSON body is an object (by its first byte; the parse checks the rest).
pub fn is_object(body: &[u8]) -> bool {
    body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// Parse just enough of the body; the whole document is still validated as JSON.
pub fn peek(body: &[u8]) -> Result<Peek<'_>, GatewayError> {
    // A derived struct also reads a JSON array, field by position: `["m"]` would name model "m".
    if !is_object(body) {
        return Err(GatewayError::new(
            ErrorKind::InvalidRequest,
            "invalid_json",
            "the request body is not a JSON object; send a JSON object with at least \"model\"",
        ));
    }
    let wire: PeekWire<'_> = serde_json::from_slice(body).map_err(|e| {
        GatewayError::new(
            ErrorKind::InvalidRequest,
            "invalid_json",
            format!("the request body is not valid JSON ({e}); send a JSON object with at least \"model\""),
        )
    })?;
    let model = match wire.model {
        None => None,
        Some(raw) => Some(serde_json::from_str::<String>(raw.get()).map_err(|_| {
            GatewayError::new(ErrorKind::InvalidRequest, "invalid_model", "\"model\" must be a string")
                .with_param("model")
        })?),
    };
    let stream = matches!(wire.stream, Some(serde_json::Value::Bool(true)));
    let string = |v: Option<&serde_json::Value>| v.and_then(serde_json::Value::as_str).map(str::to_string);
    let prompt_cache_key = string(wire.prompt_cache_key.as_ref());
    let user_id = string(wire.metadata.as_ref().and_then(|m| m.get("user_id")));
    Ok(Peek { model_raw: wire.model, model, stream, prompt_cache_key, user_id })
}

impl Peek<'_> {
    /// The session fields, for `affinity::session_id`.
    pub fn session(&self) -> crate::affinity::BodySession<'_> {
        crate::affinity::BodySession {
            prompt_cache_key: self.prompt_cache_key.as_deref(),
            user_id: self.user_id.as_deref(),
        }
    }
}

impl Peek<'_> {
    /// Where the `model` value (quotes included) sits in `body`, for `splice_model`.
    pub fn model_span(&self, body: &[u8]) -> Option<Range<usize>> {
        let value = self.model_raw?.get();
        // `model_raw` borrows from `body`, so its address gives its offset.
        let start = (value.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
        Some(start..start + value.len())
    }
}

/// The body with the model value at `span` replaced by `new_model`; every other byte unchanged.
pub fn splice_model(body: &Bytes, span: Range<usize>, new_model: &str) -> Bytes {
    let quoted = serde_json::to_string(new_model).unwrap_or_else(|_| "\"\"".into());
    let mut out = Vec::with_capacity(body.len() + quoted.len());
    out.extend_from_slice(&body[..span.start]);
    out.extend_from_slice(quoted.as_bytes());
    out.extend_from_slice(&body[span.end..]);
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peeks_model_and_stream() {
        let p = peek(br#"{"model":"claude-x","stream":true,"messages":[]}"#).unwrap();
        assert_eq!(p.model.as_deref(), Some("claude-x"));
        assert!(p.stream);
        let p = peek(br#"{"messages":[]}"#).unwrap();
        assert_eq!(p.model, None);
        assert!(!p.stream);
        let p = peek(br#"{"model":"m","prompt_cache_key":"pk","metadata":{"user_id":"u_session_1"}}"#).unwrap();
        assert_eq!((p.session().prompt_cache_key, p.session().user_id), (Some("pk"), Some("u_session_1")));
        let p = peek(br#"{"model":"m","prompt_cache_key":5,"metadata":"x"}"#).unwrap();
        assert_eq!((p.prompt_cache_key, p.user_id), (None, None));
    }

    #[test]
    fn malformed_json_and_bad_model_are_invalid_requests() {
        for body in [&b"{"[..], b"not json", b"", br#"{"model":"a"} trailing"#, br#"["claude-x", true]"#, b" 7"] {
            let e = peek(body).unwrap_err();
            assert_eq!((e.kind, e.code), (ErrorKind::InvalidRequest, "invalid_json"), "{body:?}");
        }
        assert_eq!(peek(br#"{"model":5}"#).unwrap_err().code, "invalid_model");
    }

    #[test]
    fn model_rewrite_keeps_every_other_byte() {
        let body = Bytes::from_static(
            b"{ \"messages\" : [ {\"role\":\"user\"} ],\n  \"model\" :  \"@kimi/k2\\u0021\" , \"x\":1 }",
        );
        let p = peek(&body).unwrap();
        assert_eq!(p.model.as_deref(), Some("@kimi/k2!"));
        let out = splice_model(&body, p.model_span(&body).unwrap(), "kimi-\"k2\"");
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            "{ \"messages\" : [ {\"role\":\"user\"} ],\n  \"model\" :  \"kimi-\\\"k2\\\"\" , \"x\":1 }"
        );
    }
}
