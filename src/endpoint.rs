//! The domain types of an upstream endpoint (SPEC §1): `Endpoint`, `ModelPattern`,
//! and the validation every write (admin API, CLI, config file) goes through.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::protocol::Format;

/// Stable identity of an endpoint (its SQLite row id). Rotation and breakers key on it,
/// so edits to the list can never make them point at a different endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EndpointId(pub i64);

/// Result of the last connectivity test (`POST /api/endpoints/{name}/test`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum TestStatus {
    Available,
    Unavailable,
    #[default]
    Untested,
}

impl TestStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TestStatus::Available => "available",
            TestStatus::Unavailable => "unavailable",
            TestStatus::Untested => "untested",
        }
    }
    pub fn parse(s: &str) -> TestStatus {
        match s {
            "available" => TestStatus::Available,
            "unavailable" => TestStatus::Unavailable,
            _ => TestStatus::Untested,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Default)]
pub struct TestResult {
    pub status: TestStatus,
    /// RFC 3339 UTC timestamp.
    pub at: Option<String>,
    pub latency_ms: Option<u64>,
    pub error: Option<String>,
}

/// One upstream, as stored and as routed to.
#[derive(Clone, Debug, PartialEq)]
pub struct Endpoint {
    pub id: EndpointId,
    pub name: String,
    pub base_url: String,
    pub api_key: String,
    pub format: Format,
    pub models: Vec<ModelPattern>,
    pub model_map: Vec<(ModelPattern, String)>,
    pub enabled: bool,
    pub fast: bool,
    pub fast_sort_order: i64,
    pub sort_order: i64,
    pub headers: BTreeMap<String, String>,
    pub test_model: Option<String>,
    pub test: TestResult,
    /// Cost multiplier over the list price (relays often bill a multiple); 0 < m ≤ 100.
    pub price_multiplier: f64,
}

impl Endpoint {
    /// SPEC §2 step 3: does this endpoint serve `model`?
    /// Empty `models` serves everything; otherwise a pattern or a `model_map` key must match.
    pub fn serves(&self, model: &str) -> bool {
        self.models.is_empty()
            || self.models.iter().any(|p| p.matches(model))
            || self.model_map.iter().any(|(k, _)| k.matches(model))
    }

    /// Whether any model a client names can be routed here: the endpoint lists no model and no
    /// `*` map key catches every request. (A `*` key serves every model too, but by sending all
    /// of them to the model it names, which is what it is for; other map keys still leave every
    /// other model going through unchanged.) The README's surprise: such an endpoint receives a
    /// `gpt-4o` request when the OpenAI endpoint fails. `endpoint add`, `endpoint list` and the
    /// dashboard warn about it.
    pub fn serves_every_model(&self) -> bool {
        self.models.is_empty() && !self.model_map.iter().any(|(k, _)| k.is_glob() && k.literal_len() == 0)
    }

    /// The model to send upstream: the matching `model_map` entry, else the model unchanged. An
    /// exact key wins over globs; among globs the most specific (most characters besides `*`)
    /// wins, so `{"*": "a", "claude-*haiku*": "b"}` sends haiku to `b` and the rest to `a`
    /// whatever order the keys come in (a JSON object's order is not kept), ties to the first.
    pub fn map_model<'a>(&'a self, model: &'a str) -> &'a str {
        let exact = self.model_map.iter().find(|(k, _)| !k.is_glob() && k.matches(model));
        let glob = || {
            let mut best: Option<&(ModelPattern, String)> = None;
            for entry in self.model_map.iter().filter(|(k, _)| k.is_glob() && k.matches(model)) {
                if best.is_none_or(|b| entry.0.literal_len() > b.0.literal_len()) {
                    best = Some(entry);
                }
            }
            best
        };
        match exact.or_else(glob) {
            Some((_, to)) => to.as_str(),
            None => model,
        }
    }

    /// A model to use for the connectivity test: `test_model`, else the first concrete model
    /// the endpoint lists (or maps to).
    pub fn probe_model(&self) -> Option<&str> {
        if let Some(m) = self.test_model.as_deref().filter(|m| !m.is_empty()) {
            return Some(m);
        }
        self.models
            .iter()
            .find(|p| !p.is_glob())
            .map(|p| p.as_str())
            .or_else(|| self.model_map.iter().find(|(k, _)| !k.is_glob()).map(|(_, v)| v.as_str()))
    }

    pub fn masked_key(&self) -> String {
        crate::secrets::mask_secret(&self.api_key)
    }
}

/// A model name or a `*` glob (`claude-*`, `*`); `*` matches any run of characters, `/` included.
/// Matching is case-insensitive: model ids differ in case between providers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelPattern {
    raw: String,
    lower: String,
}

impl ModelPattern {
    pub fn new(raw: impl Into<String>) -> Self {
        let raw = raw.into();
        let lower = raw.to_lowercase();
        Self { raw, lower }
    }

    pub fn as_str(&self) -> &str {
        &self.raw
    }

    pub fn is_glob(&self) -> bool {
        self.raw.contains('*')
    }

    /// How specific a glob is: its characters other than `*`.
    pub fn literal_len(&self) -> usize {
        self.raw.chars().filter(|c| *c != '*').count()
    }

    pub fn matches(&self, model: &str) -> bool {
        if !self.is_glob() {
            return self.raw.eq_ignore_ascii_case(model) || self.lower == model.to_lowercase();
        }
        glob_match(&self.lower, &model.to_lowercase())
    }
}

/// Iterative `*`-only glob with single backtrack point: linear in practice, no recursion.
fn glob_match(pattern: &str, text: &str) -> bool {
    let p = pattern.as_bytes();
    let t = text.as_bytes();
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Names are identities used in URLs, headers and the `@name/model` syntax.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Headers an endpoint's extra `headers` may not set: credentials are the gateway's job and
/// hop-by-hop headers belong to the connection, not the request.
pub fn reserved_header(name: &str) -> bool {
    const RESERVED: &[&str] = &[
        "authorization",
        "x-api-key",
        "host",
        "content-length",
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ];
    let lower = name.to_ascii_lowercase();
    RESERVED.contains(&lower.as_str()) || lower.starts_with("x-ccmesh-")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(models: &[&str], map: &[(&str, &str)]) -> Endpoint {
        Endpoint {
            id: EndpointId(1),
            name: "e".into(),
            base_url: "http://127.0.0.1:1".into(),
            api_key: "k".into(),
            format: Format::Anthropic,
            models: models.iter().map(|m| ModelPattern::new(*m)).collect(),
            model_map: map.iter().map(|(k, v)| (ModelPattern::new(*k), v.to_string())).collect(),
            enabled: true,
            fast: false,
            fast_sort_order: 0,
            sort_order: 0,
            headers: BTreeMap::new(),
            test_model: None,
            test: TestResult::default(),
            price_multiplier: 1.0,
        }
    }

    #[test]
    fn globs_match_any_run_including_slashes() {
        let cases = [
            ("claude-*", "claude-sonnet-4-5", true),
            ("claude-*", "claude-", true),
            ("claude-*", "gpt-4o", false),
            ("*", "anything/at/all", true),
            ("*sonnet*", "claude-sonnet-4-5", true),
            ("meta/*", "meta/llama-3/instruct", true),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXbY", false),
            ("gpt-4o", "GPT-4O", true),
            ("gpt-4o", "gpt-4o-mini", false),
            ("Claude-*", "claude-opus", true),
            ("**", "", true),
            ("x*", "", false),
        ];
        for (pattern, model, want) in cases {
            assert_eq!(ModelPattern::new(pattern).matches(model), want, "{pattern} vs {model}");
        }
    }

    #[test]
    fn serves_by_list_glob_or_map_key_and_empty_serves_all() {
        assert!(ep(&[], &[]).serves("whatever"));
        assert!(ep(&["glm-*"], &[]).serves("glm-4.6"));
        assert!(!ep(&["glm-*"], &[]).serves("claude-sonnet-4-5"));
        assert!(ep(&["glm-*"], &[("claude-sonnet-4-5", "glm-4.6")]).serves("claude-sonnet-4-5"));
        assert!(ep(&["glm-*"], &[("claude-*", "glm-4.6")]).serves("claude-haiku"));
    }

    #[test]
    fn serving_every_model_means_no_list_and_no_catch_all_map() {
        assert!(ep(&[], &[]).serves_every_model());
        assert!(ep(&[], &[("claude-sonnet-4-5", "glm-4.6")]).serves_every_model(), "other models pass unchanged");
        assert!(ep(&[], &[("claude-*", "glm-4.6")]).serves_every_model());
        assert!(!ep(&[], &[("*", "deepseek-chat")]).serves_every_model(), "everything is mapped on purpose");
        assert!(!ep(&["glm-*"], &[]).serves_every_model());
        assert!(!ep(&["*"], &[]).serves_every_model(), "a `*` list says so explicitly");
    }

    #[test]
    fn map_model_prefers_the_most_specific_glob_whatever_the_order() {
        let e = ep(&[], &[("*", "main"), ("claude-*haiku*", "fast"), ("claude-*", "family")]);
        assert_eq!(e.map_model("claude-3-5-haiku-20241022"), "fast");
        assert_eq!(e.map_model("claude-sonnet-4-5"), "family");
        assert_eq!(e.map_model("gpt-5"), "main");
        let reversed = ep(&[], &[("claude-*", "family"), ("claude-*haiku*", "fast"), ("*", "main")]);
        assert_eq!(reversed.map_model("claude-haiku-4-5"), "fast");
    }

    #[test]
    fn map_model_prefers_exact_keys_then_globs() {
        let e = ep(&[], &[("*", "fallback"), ("claude-opus-4", "big")]);
        assert_eq!(e.map_model("claude-opus-4"), "big");
        assert_eq!(e.map_model("other"), "fallback");
        assert_eq!(ep(&[], &[]).map_model("same"), "same");
    }

    #[test]
    fn probe_model_prefers_test_model_then_first_concrete() {
        let mut e = ep(&["claude-*", "claude-haiku-4-5"], &[]);
        assert_eq!(e.probe_model(), Some("claude-haiku-4-5"));
        e.test_model = Some("t".into());
        assert_eq!(e.probe_model(), Some("t"));
        assert_eq!(ep(&["*"], &[]).probe_model(), None);
        assert_eq!(ep(&[], &[("claude-x", "glm-4.6")]).probe_model(), Some("glm-4.6"));
    }

    #[test]
    fn names_are_restricted() {
        assert!(valid_name("kimi.k2_main-1"));
        assert!(!valid_name(""));
        assert!(!valid_name("has space"));
        assert!(!valid_name("slash/name"));
        assert!(!valid_name("@at"));
        assert!(!valid_name(&"x".repeat(65)));
        assert!(valid_name(&"x".repeat(64)));
    }

    #[test]
    fn reserved_headers_cover_auth_and_hop_by_hop() {
        for h in ["Authorization", "x-api-key", "Connection", "transfer-encoding", "x-ccmesh-endpoint"] {
            assert!(reserved_header(h), "{h}");
        }
        assert!(!reserved_header("anthropic-beta"));
    }
}

pub mod draft;
pub use draft::{EndpointDraft, FieldError};
