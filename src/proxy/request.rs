//! The client's request as the gateway reads it (`Inbound`): what it needs from the body
//! without re-encoding it — the model, the stream flag and the session fields (`affinity`) —,
//! a model rewrite that keeps every other byte, the credential the client presented, and the
//! header names the request path looks up.

use std::borrow::Cow;
use std::ops::Range;

use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, header};

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::gemini::{self, X_GOOG_API_KEY};
use crate::protocol::Route;
use crate::protocol::errors::{ErrorKind, GatewayError};
use crate::protocol::lenient::is_object;

// Header names looked up on every request, parsed once (a lookup by `&str` parses the name).
pub const ANTHROPIC_VERSION: HeaderName = HeaderName::from_static("anthropic-version");
const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");
pub const X_CCMESH_HOP: HeaderName = HeaderName::from_static("x-ccmesh-hop");
/// On a 508: the instance that found the loop.
pub const X_CCMESH_LOOP: HeaderName = HeaderName::from_static("x-ccmesh-loop");
/// On a request: the endpoint the client names; on an answer: the endpoint that gave it.
pub const X_CCMESH_ENDPOINT: HeaderName = HeaderName::from_static("x-ccmesh-endpoint");

/// Everything about the client's request that the attempts need, read once.
pub struct Inbound {
    pub route: Route,
    pub method: Method,
    /// The path after `/v1` (`/messages`, `/chat/completions`, `/embeddings`, ...).
    pub rest: String,
    /// The query string to forward (without `endpoint=`).
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The requested model after `@name/` removal (what routing and `model_map` see).
    pub model: Option<String>,
    /// Whether the body's model must be replaced even without a map (an `@name/` prefix).
    pub model_prefixed: bool,
    /// Where the model value sits in `body`, for rewriting.
    pub model_span: Option<std::ops::Range<usize>>,
    pub stream: bool,
    /// A Gemini client's call (SPEC §11): the model and the method came from the path.
    pub gemini: Option<gemini::GeminiCall>,
    /// The loop-detection header this request's upstream requests carry (SPEC §8).
    pub hop: HeaderValue,
    /// The client's session id (`affinity::session_id`), for session affinity and
    /// `prompt_cache_key`.
    pub session_id: Option<String>,
    /// The client key's name, when keys are enforced.
    pub client_key: Option<String>,
}

/// The credential the client presented: `x-api-key`, `Authorization: Bearer` (the scheme in any
/// case, RFC 9110), `x-goog-api-key`, or `?key=` in the query.
pub fn presented_credential<'a>(headers: &'a HeaderMap, query: Option<&'a str>) -> Option<Cow<'a, str>> {
    let header = |name: &HeaderName| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(key) = header(&X_API_KEY).or_else(|| header(&X_GOOG_API_KEY)).filter(|k| !k.is_empty()) {
        return Some(Cow::Borrowed(key));
    }
    if let Some(token) = header(&header::AUTHORIZATION).and_then(bearer_token) {
        return Some(Cow::Borrowed(token));
    }
    let query = query?;
    if !query.contains("key=") {
        return None;
    }
    url::form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == "key").map(|(_, v)| v).filter(|v| !v.is_empty())
}

/// The token of an `Authorization: Bearer <token>` value; the scheme is case-insensitive.
pub fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Whether the client looks like an Anthropic SDK: it sends `anthropic-version` or `x-api-key`.
pub fn is_anthropic_client(headers: &HeaderMap) -> bool {
    headers.contains_key(ANTHROPIC_VERSION) || headers.contains_key(X_API_KEY)
}

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
    let wire: PeekWire<'_> = crate::protocol::lenient::from_json(body).map_err(|e| {
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
