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
use crate::protocol::json_scan;
use crate::protocol::lenient::{self, is_object};
use crate::protocol::plain_json::Cursor;

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
    /// Set when `peek` read the body.
    pub body_peeked: Option<PeekedBody>,
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

/// What the peek showed a converter of the body: that it is one JSON object; and, when the
/// peek's scan read it, where its top-level `tools` value is (`Some(None)`: there is none).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PeekedBody {
    pub tools_span: Option<Option<Range<usize>>>,
}

/// What routing needs from a JSON body.
#[derive(Clone, Debug, PartialEq)]
pub struct Peek {
    /// Where the `model` value (quotes included) sits in the body, for `splice_model`.
    pub model_span: Option<Range<usize>>,
    pub model: Option<String>,
    pub stream: bool,
    /// `prompt_cache_key` (Responses, Chat), when a string.
    pub prompt_cache_key: Option<String>,
    /// `metadata.user_id` (Anthropic), when a string.
    pub user_id: Option<String>,
    /// Where the top-level `tools` value is (`Some(None)`: there is none), when the scan read
    /// the body; a converter's walk to the tools' schemas starts there.
    pub tools_span: Option<Option<Range<usize>>>,
}

impl Peek {
    /// The session fields, for `affinity::session_id`.
    pub fn session(&self) -> crate::affinity::BodySession<'_> {
        crate::affinity::BodySession {
            prompt_cache_key: self.prompt_cache_key.as_deref(),
            user_id: self.user_id.as_deref(),
        }
    }
}

/// The top-level members `peek` reads, in `peek_scanned`'s order.
const PEEKED_MEMBERS: [&str; 5] = ["model", "stream", "prompt_cache_key", "metadata", "tools"];

/// Read just enough of the body; the whole document is still validated as JSON.
///
/// Most bodies are read by `json_scan`, which validates them without parsing the strings in
/// between; what it cannot decide goes to serde_json (`peek_parsed`), which also words every
/// error. Both give the same answer for any body (a property test holds them to it).
pub fn peek(body: &[u8]) -> Result<Peek, GatewayError> {
    // A derived struct also reads a JSON array, field by position: `["m"]` would name model "m".
    if !is_object(body) {
        return Err(GatewayError::new(
            ErrorKind::InvalidRequest,
            "invalid_json",
            "the request body is not a JSON object; send a JSON object with at least \"model\"",
        ));
    }
    if let Some(text) = lenient::utf8(body)
        && let Some(members) = json_scan::top_level_members(text, PEEKED_MEMBERS)
        && let Some(peeked) = peek_scanned(text, members)
    {
        return peeked;
    }
    peek_parsed(body)
}

/// The peek from the members `json_scan` found, read as `peek_parsed` reads them; `None` for a
/// member value serde_json would refuse (`1e999` is valid JSON but not a `Value`), so that
/// `peek_parsed` words the error.
fn peek_scanned(text: &str, members: [Option<Range<usize>>; 5]) -> Option<Result<Peek, GatewayError>> {
    let [model_span, stream, prompt_cache_key, metadata, tools_span] = members;
    // serde_json reads `"model": null` as no model at all.
    let model_span = model_span.filter(|span| &text[span.clone()] != "null");
    let raw = |span: &Option<Range<usize>>| span.clone().map(|span| &text[span]);
    let value = |raw: &str| serde_json::from_str::<serde_json::Value>(raw).ok();
    let stream = match raw(&stream) {
        None | Some("false" | "null") => false,
        Some("true") => true,
        Some(other) => value(other).map(|_| false)?,
    };
    let prompt_cache_key = match raw(&prompt_cache_key) {
        None => None,
        Some(raw) => match unescaped_string(raw) {
            Some(plain) => Some(plain.to_owned()),
            None => value(raw)?.as_str().map(str::to_owned),
        },
    };
    let user_id = match raw(&metadata) {
        None => None,
        Some(raw) => match only_user_id(raw) {
            Some(user_id) => Some(user_id),
            None => value(raw)?.get("user_id").and_then(serde_json::Value::as_str).map(str::to_owned),
        },
    };
    let model = match raw(&model_span) {
        None => None,
        Some(raw) => match unescaped_string(raw).map(str::to_owned).or_else(|| serde_json::from_str(raw).ok()) {
            Some(model) => Some(model),
            None => return Some(Err(model_not_a_string())),
        },
    };
    Some(Ok(Peek { model_span, model, stream, prompt_cache_key, user_id, tools_span: Some(tools_span) }))
}

/// `metadata` as Claude Code writes it, `{"user_id":"..."}` and nothing else: its user id, read
/// without building a `serde_json::Value` (~4 k instructions on every Claude Code request; the
/// id is itself JSON text, escaped). Any other shape, or a surrogate `\u` escape, is left to that parse.
fn only_user_id(raw: &str) -> Option<String> {
    let mut c = Cursor(raw);
    c.literal(r#"{"user_id":"#)?;
    let user_id = c.string_value()?;
    c.literal("}")?;
    c.is_done().then(|| user_id.into_owned())
}

/// The text of a JSON string value without escapes (its quotes removed); `None` for anything
/// else.
fn unescaped_string(raw: &str) -> Option<&str> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    (!inner.contains('\\')).then_some(inner)
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

/// The peek by serde_json: whatever the scan leaves, and the words of every error.
pub(crate) fn peek_parsed(body: &[u8]) -> Result<Peek, GatewayError> {
    let wire: PeekWire<'_> = lenient::from_json(body).map_err(|e| {
        GatewayError::new(
            ErrorKind::InvalidRequest,
            "invalid_json",
            format!("the request body is not valid JSON ({e}); send a JSON object with at least \"model\""),
        )
    })?;
    let model = match wire.model {
        None => None,
        Some(raw) => Some(serde_json::from_str::<String>(raw.get()).map_err(|_| model_not_a_string())?),
    };
    let stream = matches!(wire.stream, Some(serde_json::Value::Bool(true)));
    let string = |v: Option<&serde_json::Value>| v.and_then(serde_json::Value::as_str).map(str::to_string);
    let prompt_cache_key = string(wire.prompt_cache_key.as_ref());
    let user_id = string(wire.metadata.as_ref().and_then(|m| m.get("user_id")));
    // `model` borrows from `body`, so its address gives its offset.
    let model_span = wire.model.and_then(|raw| {
        let value = raw.get();
        let start = (value.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
        Some(start..start + value.len())
    });
    Ok(Peek { model_span, model, stream, prompt_cache_key, user_id, tools_span: None })
}

fn model_not_a_string() -> GatewayError {
    GatewayError::new(ErrorKind::InvalidRequest, "invalid_model", "\"model\" must be a string").with_param("model")
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
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A body of members `peek` reads or must skip, their values of every type `peek` treats
    /// differently (and a few serde_json refuses as a `Value`, such as `1e999`), sometimes
    /// with a byte changed.
    fn body() -> impl Strategy<Value = Vec<u8>> {
        let key = prop::sample::select(
            &["model", "stream", "prompt_cache_key", "metadata", "\\u006dodel", "messages", "tools", "x"][..],
        );
        let value = prop::sample::select(
            &[
                r#""claude-x""#,
                r#""a\"b\u00e9""#,
                r#""\ud800""#,
                "true",
                "false",
                "null",
                r#""true""#,
                "1",
                "-0.5",
                "1e999",
                "[1,{}]",
                "[]",
                r#"{"user_id":"u"}"#,
                r#"{"user_id":"u\n1","x":[true]}"#,
                r#"{"user_id":5}"#,
                r#"{"user_id":"a","user_id":"b"}"#,
                r#"{"user_id":"{\"device_id\":\"d1\",\"session_id\":\"s-1\"}"}"#,
                r#"{"user_id":"\u0041\\"}"#,
                r#"{"user_id":null}"#,
                r#"{ "user_id" : "u" }"#,
                r#"{"x":1e999}"#,
                r#""pk""#,
            ][..],
        );
        let space = prop::sample::select(&["", " ", "\n  "][..]);
        let members = proptest::collection::vec((key, value, space), 0..6);
        let edit = proptest::option::weighted(
            0.3,
            (any::<prop::sample::Index>(), prop::sample::select(&b"\"\\{}[],:1 x"[..])),
        );
        (members, edit).prop_map(|(members, edit)| {
            let inner: Vec<String> = members.iter().map(|(k, v, s)| format!("{s}\"{k}\"{s}:{s}{v}{s}")).collect();
            let mut bytes = format!("{{{}}}", inner.join(",")).into_bytes();
            if let Some((at, byte)) = edit {
                let i = at.index(bytes.len());
                bytes[i] = byte;
            }
            bytes
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

        /// The scan's reading and serde_json's agree on every body: the same fields, the same
        /// model span, the same error in the same words.
        #[test]
        fn the_scanned_peek_is_the_parsed_peek(body in body()) {
            // Both readings run after the one check that the body is an object at all.
            prop_assume!(is_object(&body));
            match (peek(&body), peek_parsed(&body)) {
                (Ok(scanned), Ok(parsed)) => {
                    prop_assert!(tools_span_is_where_serde_finds_tools(&body, &scanned.tools_span));
                    prop_assert_eq!(Peek { tools_span: None, ..scanned }, parsed);
                }
                (Err(a), Err(b)) => prop_assert_eq!((a.kind, a.code, a.message), (b.kind, b.code, b.message)),
                (a, b) => prop_assert!(false, "{:?} against {:?} for {:?}", a.map(|_| ()), b.map(|_| ()), String::from_utf8_lossy(&body)),
            }
        }
    }

    /// `span`, when the scan gave one, holds the body's `tools` value as serde_json reads it (or
    /// there is none). serde_json reads the last of a member named twice, which the scan leaves
    /// to it.
    pub(crate) fn tools_span_is_where_serde_finds_tools(body: &[u8], span: &Option<Option<Range<usize>>>) -> bool {
        let Some(span) = span else { return true };
        // Valid JSON that is not a `Value` (a number beyond `f64`) cannot be compared.
        let Ok(whole) = serde_json::from_slice::<serde_json::Value>(body) else { return true };
        match span {
            Some(span) => {
                serde_json::from_slice::<serde_json::Value>(&body[span.clone()]).ok().as_ref() == whole.get("tools")
            }
            None => whole.get("tools").is_none(),
        }
    }

    #[test]
    fn claude_codes_metadata_is_read_without_a_parse() {
        // Claude Code 2.x: the user id is JSON text of its own, escaped in the body.
        let metadata = r#"{"user_id":"{\"device_id\":\"4919\",\"account_uuid\":\"\",\"session_id\":\"c5af-1\"}"}"#;
        let expected = r#"{"device_id":"4919","account_uuid":"","session_id":"c5af-1"}"#;
        assert_eq!(only_user_id(metadata).as_deref(), Some(expected));
        assert_eq!(
            only_user_id(r#"{"user_id":"user_ab_account_cd_session_ef"}"#).as_deref(),
            Some("user_ab_account_cd_session_ef")
        );
        let body = format!(r#"{{"model":"claude-x","metadata":{metadata},"stream":true}}"#);
        assert_eq!(peek(body.as_bytes()).unwrap().user_id.as_deref(), Some(expected));
        // A `\u` escape naming a character is read as the parse reads it.
        assert_eq!(only_user_id(r#"{"user_id":"\u0041\u003c"}"#).as_deref(), Some("A<"));
        // Every other shape is the parse's to read.
        for other in [
            r#"{"user_id":"u","x":1}"#,
            r#"{ "user_id":"u"}"#,
            r#"{"user_id":"\ud800"}"#,
            r#"{"user_id":null}"#,
            r#"{"user_id":"u"} "#,
            r#"{"session":"u"}"#,
        ] {
            assert_eq!(only_user_id(other), None, "{other}");
        }
    }

    #[test]
    fn a_plain_body_is_read_by_the_scan() {
        let body = br#"{"model":"claude-x","stream":true,"metadata":{"user_id":"u"},"prompt_cache_key":"pk"}"#;
        let text = std::str::from_utf8(body).unwrap();
        let members = json_scan::top_level_members(text, PEEKED_MEMBERS).unwrap();
        let scanned = peek_scanned(text, members).unwrap().unwrap();
        assert_eq!(scanned.tools_span, Some(None));
        assert_eq!(Peek { tools_span: None, ..scanned.clone() }, peek_parsed(body).unwrap());
        assert_eq!(scanned.model_span, Some(9..19));
        let with_tools = peek(br#"{"model":"m","tools":[{"name":"t"}],"x":1}"#).unwrap();
        assert_eq!(with_tools.tools_span, Some(Some(21..35)));
    }

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
        let out = splice_model(&body, p.model_span.clone().unwrap(), "kimi-\"k2\"");
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            "{ \"messages\" : [ {\"role\":\"user\"} ],\n  \"model\" :  \"kimi-\\\"k2\\\"\" , \"x\":1 }"
        );
    }
}
