//! Session affinity (SPEC §12, §15.10): a coding agent's session keeps the endpoint that served
//! it, so the provider's prompt cache stays warm — without getting in failover's way.
//!
//! - **The session id** (`session_id`, pure) comes from what the real clients send (the
//!   captured requests in `tests/fixtures/clients/`): Codex's body `prompt_cache_key` (preferred:
//!   it is what the Responses API keys its cache by), Claude Code's `X-Claude-Code-Session-Id`
//!   header, the `session_id` inside Claude Code's `metadata.user_id` (a JSON string since
//!   2.1.78; `user_…_account_…_session_<id>` before), Codex's `session-id` / `session_id`
//!   header. None of them: no affinity.
//! - **Bindings** (`SessionBindings`, in memory here, shared in a cluster): (protocol, client key
//!   name or `-`, session) → the endpoint that last served it, for an hour after its last use. A
//!   success binds; a later request of the session starts at its endpoint when that endpoint is
//!   among the candidates routing chose (never bringing back one a filter removed), under
//!   `sticky` and `round_robin` — not `priority`, whose point is to go back to the first
//!   endpoint. A failure there unbinds, failover goes on as usual, and whichever endpoint then
//!   serves is bound. `PUT /api/current` drops the protocol's bindings: the operator's switch
//!   wins over remembered sessions.
//! - **In a cluster** (`cluster::bindings`) the bindings live in Redis with their TTL; a request
//!   looks its session up there within a short timeout, and the memory bindings here hold what a
//!   node bound while Redis was away (re-published when it is back).

use std::collections::HashMap;
use std::sync::Mutex;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use std::sync::Arc;

use crate::clock::Clock;
use crate::endpoint::EndpointId;
use crate::protocol::Protocol;
use crate::protocol::plain_json::{Cursor, Seen};

/// How long a binding lives after its last use.
pub const BINDING_TTL_MS: i64 = 3_600_000;
/// The most bindings kept in memory; past it a new session is not bound (until expired ones
/// are swept) rather than the map growing without bound.
pub const MAX_BINDINGS: usize = 100_000;
/// Longer ids are not ids (a client may send anything in a header).
pub const MAX_SESSION_ID: usize = 256;

const CLAUDE_CODE_SESSION: HeaderName = HeaderName::from_static("x-claude-code-session-id");
const CODEX_SESSIONS: usize = 2;
const CODEX_SESSION: [HeaderName; CODEX_SESSIONS] =
    [HeaderName::from_static("session-id"), HeaderName::from_static("session_id")];

/// The session fields of a request body (read by the same pass that reads the model).
#[derive(Clone, Copy, Debug, Default)]
pub struct BodySession<'a> {
    /// Responses (and Chat) `prompt_cache_key`.
    pub prompt_cache_key: Option<&'a str>,
    /// Anthropic `metadata.user_id`.
    pub user_id: Option<&'a str>,
}

fn usable(id: &str) -> Option<String> {
    let id = id.trim();
    (!id.is_empty() && id.len() <= MAX_SESSION_ID && !id.chars().any(char::is_control)).then(|| id.to_string())
}

/// The session id in Claude Code's `metadata.user_id`: a JSON object in a string
/// (`{"device_id":…,"account_uuid":…,"session_id":…}`), or the older
/// `user_<hash>_account_<uuid>_session_<uuid>`.
pub fn session_in_user_id(user_id: &str) -> Option<String> {
    let trimmed = user_id.trim();
    if trimmed.starts_with('{') {
        if let Some(session) = plain_session_id(trimmed) {
            return session.and_then(usable);
        }
        let v: Value = serde_json::from_str(trimmed).ok()?;
        return v.get("session_id").and_then(Value::as_str).and_then(usable);
    }
    let (_, id) = trimmed.rsplit_once("_session_")?;
    usable(id)
}

/// Claude Code's object as it writes it, compact and of plain strings only, read without a
/// `Value` (~2.4 k instructions a request from a client that sends no session header):
/// `Some(its session id, if it has one)`. `None` leaves any other text to the parse, so the
/// answer is always the parse's.
fn plain_session_id(text: &str) -> Option<Option<&str>> {
    let mut c = Cursor(text);
    let mut session = None;
    let mut seen = Seen::default();
    c.members(|c, key| {
        let value = c.plain_string()?;
        if key == "session_id" {
            seen.first(0)?;
            session = Some(value);
        }
        Some(())
    })?;
    c.is_done().then_some(session)
}

/// The session ids a request's headers carry, read once: the record takes the id at once, and
/// [`session_id`] weighs them again against the body's fields once it is read.
#[derive(Clone, Debug, Default)]
pub struct SessionHeaders {
    claude_code: Option<String>,
    codex: Option<String>,
}

impl SessionHeaders {
    /// Each name's first value, as `HeaderMap::get` gives it, found in one pass over the
    /// client's headers: three lookups hashed three names for headers most requests lack.
    pub fn read(headers: &HeaderMap) -> SessionHeaders {
        let mut claude_code = None;
        let mut codex = [None; CODEX_SESSIONS];
        for (name, value) in headers {
            if *name == CLAUDE_CODE_SESSION {
                claude_code.get_or_insert(value);
            } else if let Some(i) = CODEX_SESSION.iter().position(|n| n == name)
                && let Some(first) = codex.get_mut(i)
            {
                first.get_or_insert(value);
            }
        }
        let usable_value = |v: &HeaderValue| v.to_str().ok().and_then(usable);
        SessionHeaders {
            claude_code: claude_code.and_then(usable_value),
            codex: codex.iter().flatten().find_map(|v| usable_value(v)),
        }
    }

    /// The session id from the headers alone (before the body is read).
    pub fn id(&self) -> Option<String> {
        self.claude_code.clone().or_else(|| self.codex.clone())
    }
}

/// The session id of a request, from the sources in order of preference, or `None`.
pub fn session_id(headers: &SessionHeaders, body: BodySession<'_>) -> Option<String> {
    body.prompt_cache_key
        .and_then(usable)
        .or_else(|| headers.claude_code.clone())
        .or_else(|| body.user_id.and_then(session_in_user_id))
        .or_else(|| headers.codex.clone())
}

/// Whose session: the protocol, the client key (`-` without keys) and the session id.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SessionKey {
    pub protocol: Protocol,
    pub client: String,
    pub session: String,
}

/// Where sessions are bound: in memory here, shared state in a cluster.
pub trait SessionBindings: Send + Sync + 'static {
    /// The endpoint `key` is bound to, refreshing the binding's lifetime.
    fn bound(&self, key: &SessionKey, now_ms: i64) -> Option<EndpointId>;
    /// Bind (or re-bind) `key` to `endpoint` for `BINDING_TTL_MS`.
    fn bind(&self, key: &SessionKey, endpoint: EndpointId, now_ms: i64);
    /// Drop the binding, if it still points at `endpoint` (a failure there).
    fn unbind(&self, key: &SessionKey, endpoint: EndpointId);
    /// Drop every binding of `protocol` (a manual switch of its current endpoint).
    fn clear_protocol(&self, protocol: Protocol);
}

/// One node's bindings.
#[derive(Default)]
pub struct MemoryBindings {
    map: Mutex<HashMap<SessionKey, (EndpointId, i64)>>,
}

impl MemoryBindings {
    pub fn new() -> MemoryBindings {
        MemoryBindings::default()
    }

    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Take every live binding out, with when it expires (a cluster re-publishing what it bound
    /// while Redis was away).
    pub fn drain(&self, now_ms: i64) -> Vec<(SessionKey, EndpointId, i64)> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.drain().filter(|(_, (_, expires))| *expires > now_ms).map(|(k, (e, x))| (k, e, x)).collect()
    }
}

impl SessionBindings for MemoryBindings {
    fn bound(&self, key: &SessionKey, now_ms: i64) -> Option<EndpointId> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        match map.get_mut(key) {
            Some((endpoint, expires)) if *expires > now_ms => {
                *expires = now_ms + BINDING_TTL_MS;
                Some(*endpoint)
            }
            Some(_) => {
                map.remove(key);
                None
            }
            None => None,
        }
    }

    fn bind(&self, key: &SessionKey, endpoint: EndpointId, now_ms: i64) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_BINDINGS && !map.contains_key(key) {
            map.retain(|_, (_, expires)| *expires > now_ms);
            if map.len() >= MAX_BINDINGS {
                return;
            }
        }
        map.insert(key.clone(), (endpoint, now_ms + BINDING_TTL_MS));
    }

    fn unbind(&self, key: &SessionKey, endpoint: EndpointId) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map.get(key).is_some_and(|(e, _)| *e == endpoint) {
            map.remove(key);
        }
    }

    fn clear_protocol(&self, protocol: Protocol) {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).retain(|k, _| k.protocol != protocol);
    }
}

/// One request's part in its session's binding: where it found the session bound, and, when
/// the request ends, what it teaches the binding (`proxy::trail` calls these).
pub struct Affinity {
    bindings: Arc<dyn SessionBindings>,
    key: SessionKey,
    bound: Option<EndpointId>,
    clock: Arc<dyn Clock>,
}

impl Affinity {
    /// Look the session up (refreshing its binding).
    pub fn look_up(bindings: Arc<dyn SessionBindings>, key: SessionKey, clock: Arc<dyn Clock>) -> Affinity {
        let bound = bindings.bound(&key, crate::keys::now_ms(&*clock));
        Affinity { bindings, key, bound, clock }
    }

    /// A session already looked up elsewhere (a cluster's shared bindings).
    pub fn found(
        bindings: Arc<dyn SessionBindings>,
        key: SessionKey,
        bound: Option<EndpointId>,
        clock: Arc<dyn Clock>,
    ) -> Affinity {
        Affinity { bindings, key, bound, clock }
    }

    /// The endpoint the session was bound to when the request arrived (and is still, as far as
    /// this request knows).
    pub fn bound(&self) -> Option<EndpointId> {
        self.bound
    }

    /// The request succeeded on `endpoint`: the session is bound to it.
    pub fn served_by(&self, endpoint: EndpointId) {
        self.bindings.bind(&self.key, endpoint, crate::keys::now_ms(&*self.clock));
    }

    /// An attempt failed on `endpoint`: if that is where the session is bound, it is not any
    /// more.
    pub fn failed_at(&mut self, endpoint: EndpointId) {
        if self.bound == Some(endpoint) {
            self.bindings.unbind(&self.key, endpoint);
            self.bound = None;
        }
    }
}

impl std::fmt::Debug for Affinity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Affinity").field("key", &self.key).field("bound", &self.bound).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A captured request: its headers and body.
    fn fixture(name: &str) -> (HeaderMap, Value) {
        let path = format!("{}/tests/fixtures/clients/{name}", env!("CARGO_MANIFEST_DIR"));
        let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut headers = HeaderMap::new();
        for (k, val) in v["headers"].as_object().unwrap() {
            headers.insert(HeaderName::from_bytes(k.as_bytes()).unwrap(), val.as_str().unwrap().parse().unwrap());
        }
        (headers, v["body"].clone())
    }

    fn of(headers: &HeaderMap, body: &Value) -> Option<String> {
        session_id(
            &SessionHeaders::read(headers),
            BodySession {
                prompt_cache_key: body["prompt_cache_key"].as_str(),
                user_id: body["metadata"]["user_id"].as_str(),
            },
        )
    }

    #[test]
    fn claude_code_sessions_from_the_captured_requests() {
        for name in ["claude_code_2.1.197_turn1.json", "claude_code_2.1.197_turn2_tool_result.json"] {
            let (headers, body) = fixture(name);
            assert_eq!(of(&headers, &body).as_deref(), Some("c5afce96-fad0-4a19-a6d7-756800b47b50"), "{name}");
            // Without the header, the same id from metadata.user_id (a JSON string).
            let mut bare = headers.clone();
            bare.remove("x-claude-code-session-id");
            assert_eq!(of(&bare, &body).as_deref(), Some("c5afce96-fad0-4a19-a6d7-756800b47b50"), "{name}");
        }
        // Before 2.1.78 the id was the tail of a plain string.
        let old = "user_4919455c86b761be_account_8c1e6f2a-0000-4000-8000-000000000001_session_9d2f1c3e-1111-4222-8333-444455556666";
        assert_eq!(session_in_user_id(old).as_deref(), Some("9d2f1c3e-1111-4222-8333-444455556666"));
        assert_eq!(session_in_user_id("{\"device_id\":\"x\"}"), None);
        assert_eq!(session_in_user_id("just-a-user"), None);
        assert_eq!(session_in_user_id("{not json"), None);
    }

    #[test]
    fn claude_codes_user_id_object_is_read_as_the_parse_reads_it() {
        let written = r#"{"device_id":"4919","account_uuid":"","session_id":"c5af-1"}"#;
        assert_eq!(plain_session_id(written), Some(Some("c5af-1")));
        assert_eq!(plain_session_id(r#"{"device_id":"x"}"#), Some(None));
        assert_eq!(plain_session_id(r#"{ "session_id": "s" }"#), Some(Some("s")));
        // Escaped, a number, a nested value, a session id given twice: the parse's.
        let others = [
            r#"{"session_id":"s\u0041"}"#,
            r#"{"session_id":"s","n":1}"#,
            r#"{"session_id":"s","o":{}}"#,
            r#"{"session_id":"a","session_id":"b"}"#,
            r#"{"session_id":5}"#,
        ];
        for text in others {
            assert_eq!(plain_session_id(text), None, "{text}");
        }
        // Whichever way it is read, the answer is the parse's.
        let parsed = |text: &str| {
            let v: Value = serde_json::from_str(text.trim()).ok()?;
            v.get("session_id").and_then(Value::as_str).and_then(usable)
        };
        for text in others.into_iter().chain([
            written,
            r#"{"device_id":"x"}"#,
            r#"{"session_id":"  "}"#,
            " {\"session_id\":\"t\"} ",
        ]) {
            assert_eq!(session_in_user_id(text), parsed(text), "{text}");
        }
    }

    #[test]
    fn codex_sessions_from_the_captured_requests() {
        for name in ["codex_0.171.0_responses_turn1.json", "codex_0.171.0_responses_turn2_function_call_output.json"] {
            let (headers, body) = fixture(name);
            assert_eq!(of(&headers, &body).as_deref(), Some("01a22988-9369-7463-8ca0-d5ee3df3d883"), "{name}");
            // prompt_cache_key wins over the header when they differ.
            let mut body = body.clone();
            body["prompt_cache_key"] = Value::from("cache-key-of-the-thread");
            assert_eq!(of(&headers, &body).as_deref(), Some("cache-key-of-the-thread"));
        }
        // Codex 0.80 on Chat Completions: only the `session_id` header.
        let (headers, body) = fixture("codex_0.80.0_chat_turn2_tool.json");
        assert_eq!(of(&headers, &body).as_deref(), Some("01a22988-99d5-7ad3-bb08-36871333fe64"));
    }

    /// The lookups the single pass stands for.
    fn looked_up(headers: &HeaderMap) -> SessionHeaders {
        let header = |name: &HeaderName| headers.get(name).and_then(|v| v.to_str().ok()).and_then(usable);
        SessionHeaders { claude_code: header(&CLAUDE_CODE_SESSION), codex: CODEX_SESSION.iter().find_map(header) }
    }

    proptest::proptest! {
        /// Whatever the headers (repeated, unusable, in any order), the one pass reads what
        /// looking each name up reads.
        #[test]
        fn session_headers_read_in_one_pass_as_by_lookups(
            entries in proptest::collection::vec(
                (
                    proptest::sample::select(vec![
                        "x-claude-code-session-id", "session-id", "session_id", "content-type", "x-other",
                    ]),
                    proptest::sample::select(vec!["s1", "s2", "  ", "", "  s3  ", "\u{e9}t\u{e9}"]),
                ),
                0..8,
            ),
        ) {
            let mut headers = HeaderMap::new();
            for (name, value) in &entries {
                let value = HeaderValue::from_bytes(value.as_bytes()).unwrap();
                headers.append(HeaderName::from_static(name), value);
            }
            let (one, each) = (SessionHeaders::read(&headers), looked_up(&headers));
            proptest::prop_assert_eq!(one.claude_code, each.claude_code);
            proptest::prop_assert_eq!(one.codex, each.codex);
        }
    }

    #[test]
    fn no_session_and_hostile_ids() {
        let headers = SessionHeaders::read(&HeaderMap::new());
        assert_eq!(session_id(&headers, BodySession::default()), None);
        let mut long = HeaderMap::new();
        long.insert("session-id", "x".repeat(MAX_SESSION_ID + 1).parse().unwrap());
        assert_eq!(SessionHeaders::read(&long).id(), None);
        assert_eq!(session_id(&headers, BodySession { prompt_cache_key: Some("  "), user_id: None }), None);
    }

    fn key(p: Protocol, s: &str) -> SessionKey {
        SessionKey { protocol: p, client: "-".into(), session: s.into() }
    }

    #[test]
    fn bindings_live_an_hour_after_their_last_use() {
        let b = MemoryBindings::new();
        let k = key(Protocol::Claude, "s1");
        b.bind(&k, EndpointId(7), 0);
        assert_eq!(b.bound(&k, BINDING_TTL_MS - 1), Some(EndpointId(7)), "refreshed here");
        assert_eq!(b.bound(&k, 2 * BINDING_TTL_MS - 2), Some(EndpointId(7)));
        assert_eq!(b.bound(&k, 4 * BINDING_TTL_MS), None);
        assert!(b.is_empty());
    }

    #[test]
    fn unbinding_needs_the_same_endpoint_and_a_switch_clears_one_protocol() {
        let b = MemoryBindings::new();
        let (c, o) = (key(Protocol::Claude, "s"), key(Protocol::Openai, "s"));
        b.bind(&c, EndpointId(1), 0);
        b.bind(&o, EndpointId(1), 0);
        b.unbind(&c, EndpointId(2));
        assert_eq!(b.bound(&c, 1), Some(EndpointId(1)), "bound elsewhere meanwhile: kept");
        b.unbind(&c, EndpointId(1));
        assert_eq!(b.bound(&c, 1), None);
        b.bind(&c, EndpointId(3), 0);
        b.clear_protocol(Protocol::Claude);
        assert_eq!((b.bound(&c, 1), b.bound(&o, 1)), (None, Some(EndpointId(1))));
        // Another client key's session of the same id is another session.
        let other = SessionKey { client: "alice".into(), ..o.clone() };
        assert_eq!(b.bound(&other, 1), None);
    }

    #[test]
    fn the_map_is_bounded() {
        let b = MemoryBindings::new();
        for i in 0..MAX_BINDINGS {
            b.bind(&key(Protocol::Claude, &i.to_string()), EndpointId(1), 0);
        }
        b.bind(&key(Protocol::Claude, "one-too-many"), EndpointId(1), 1);
        assert_eq!(b.len(), MAX_BINDINGS);
        assert_eq!(b.bound(&key(Protocol::Claude, "one-too-many"), 1), None);
        // Once the old ones expired, new sessions are bound again.
        b.bind(&key(Protocol::Claude, "later"), EndpointId(1), BINDING_TTL_MS + 1);
        assert_eq!(b.len(), 1);
    }
}
