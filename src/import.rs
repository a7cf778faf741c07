//! `ccmesh import cc-switch|ccmesh`: what a user already configured in cc-switch or the ccMesh
//! desktop app, as ccmesh endpoints, fast queue and settings. The readers (`cc_switch`,
//! `ccmesh_desktop`) open the source database read-only and turn its rows into a [`Plan`]; the CLI
//! shows the plan (`--dry-run`) or applies it through the admin API, creating endpoints that do not
//! exist and updating those that do, by name, so a second import changes nothing new.
//!
//! A plan never holds a key anywhere but in the endpoint bodies it sends: the rows it prints are
//! [`EndpointPlan::row`], which has no key.

pub mod cc_switch;
pub mod ccmesh_desktop;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

/// One endpoint to create or update.
#[derive(Debug, Clone)]
pub struct EndpointPlan {
    pub name: String,
    /// Where it comes from, for the table (`claude: 'DeepSeek'`).
    pub from: String,
    /// The body for `POST /api/endpoints` (without `fast`: the queue is set as a whole).
    pub body: Value,
}

impl EndpointPlan {
    pub fn format(&self) -> &str {
        self.body["format"].as_str().unwrap_or("-")
    }
    pub fn base_url(&self) -> &str {
        self.body["base_url"].as_str().unwrap_or("-")
    }
    /// The model map as `a→b, c→d`, for the table.
    pub fn models_cell(&self) -> String {
        let map = self.body["model_map"]
            .as_object()
            .map(|m| m.iter().map(|(k, v)| format!("{k}→{}", v.as_str().unwrap_or(""))).collect::<Vec<_>>().join(", "));
        match map.filter(|m| !m.is_empty()) {
            Some(m) => m,
            None => self.body["models"]
                .as_array()
                .filter(|a| !a.is_empty())
                .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(","))
                .unwrap_or_else(|| "*".into()),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// What was read (`cc-switch database, schema with providers.in_failover_queue`).
    pub source: String,
    pub endpoints: Vec<EndpointPlan>,
    /// Imported names to put in the fast queue, in order.
    pub fast_queue: Vec<String>,
    /// `PATCH /api/settings` body; `{}` when nothing maps.
    pub settings: Value,
    /// Per inbound protocol, the source's automatic-failover switch.
    pub failover: BTreeMap<String, bool>,
    /// Rows not imported, with the reason.
    pub skipped: Vec<(String, String)>,
    pub notes: Vec<String>,
}

/// Endpoint names are `[A-Za-z0-9._-]{1,64}`: other characters become `-`.
pub fn sanitize_name(raw: &str) -> String {
    let mut out = String::new();
    for c in raw.trim().chars() {
        let c = if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '-' };
        if c == '-' && out.ends_with('-') {
            continue;
        }
        out.push(c);
    }
    let out = out.trim_matches('-').to_string();
    out.chars().take(64).collect::<String>().trim_end_matches('-').to_string()
}

/// Names unique within one import: `name`, else `name-<suffix>`, else `name-<suffix>-2`, …
pub struct Names {
    taken: BTreeSet<String>,
}

impl Names {
    pub fn new() -> Names {
        Names { taken: BTreeSet::new() }
    }

    /// A unique name from the display name, falling back to `fallback` when nothing of it is
    /// usable (a name in Chinese, say).
    pub fn take(&mut self, display: &str, fallback: &str, suffix: &str) -> String {
        let mut base = sanitize_name(display);
        if base.is_empty() {
            base = sanitize_name(fallback);
        }
        if base.is_empty() {
            base = "imported".into();
        }
        let trimmed = |s: String| s.chars().take(64).collect::<String>();
        let mut candidate = trimmed(base.clone());
        if self.taken.contains(&candidate.to_lowercase()) {
            candidate = trimmed(format!("{base}-{suffix}"));
        }
        let mut n = 2;
        while self.taken.contains(&candidate.to_lowercase()) {
            candidate = trimmed(format!("{base}-{suffix}-{n}"));
            n += 1;
        }
        self.taken.insert(candidate.to_lowercase());
        candidate
    }
}

impl Default for Names {
    fn default() -> Self {
        Self::new()
    }
}

/// A model id as the upstream knows it: Claude Code's `[1m]`-style suffixes (a client-side
/// context marker) removed.
pub fn upstream_model(m: &str) -> String {
    let m = m.trim();
    match m.rfind('[') {
        Some(i) if m.ends_with(']') => m[..i].trim().to_string(),
        _ => m.to_string(),
    }
}

/// Claude Code's model variables as a model map. Claude Code sends `claude-…` ids; the family
/// variables map their family, `ANTHROPIC_MODEL` the rest (SPEC: exact keys, then the most
/// specific glob).
pub fn claude_model_map(env: &Map<String, Value>) -> Map<String, Value> {
    let get = |k: &str| env.get(k).and_then(Value::as_str).map(upstream_model).filter(|s| !s.is_empty());
    let mut map = Map::new();
    if let Some(m) = get("ANTHROPIC_MODEL") {
        map.insert("claude-*".into(), json!(m));
    }
    for (var, family) in [
        ("ANTHROPIC_DEFAULT_SONNET_MODEL", "sonnet"),
        ("ANTHROPIC_DEFAULT_OPUS_MODEL", "opus"),
        ("ANTHROPIC_DEFAULT_HAIKU_MODEL", "haiku"),
    ] {
        if let Some(m) = get(var) {
            map.insert(format!("claude-*{family}*"), json!(m));
        }
    }
    if !map.contains_key("claude-*haiku*")
        && let Some(m) = get("ANTHROPIC_SMALL_FAST_MODEL")
    {
        map.insert("claude-*haiku*".into(), json!(m));
    }
    map
}

/// Whether a provider's base URL is one a client takeover points at, not a real upstream: this
/// gateway (an endpoint there would loop, SPEC §8) or the source app's own local proxy.
pub fn loops_back(base_url: &str, gateway: Option<&str>, local_proxies: &[String]) -> Option<String> {
    if let Some(gw) = gateway
        && crate::clients::same_gateway(base_url, gw)
    {
        return Some(format!(
            "its base URL {base_url} is this gateway: an endpoint there would send requests in a loop"
        ));
    }
    local_proxies.iter().find(|p| crate::clients::same_gateway(base_url, p)).map(|p| {
        format!(
            "its base URL is the source app's own local proxy ({p}), not an upstream; import the providers behind it"
        )
    })
}

/// The fast queue after an import: the entries that were there and are not imported keep their
/// places at the front, the imported queue follows in its order (so importing again is a no-op).
pub fn merged_fast_queue(existing: &[String], imported: &[String]) -> Vec<String> {
    let mut out: Vec<String> = existing.iter().filter(|n| !imported.contains(n)).cloned().collect();
    out.extend(imported.iter().cloned());
    out
}

/// The settings document's keys per protocol, from a source's per-app proxy numbers. Only the
/// values present are set.
pub fn settings_for(protocol: &str, breaker: &[(&str, Option<Value>)], timeouts: &[(&str, Option<Value>)]) -> Value {
    let pick = |pairs: &[(&str, Option<Value>)]| -> Map<String, Value> {
        pairs.iter().filter_map(|(k, v)| v.clone().map(|v| (k.to_string(), v))).collect()
    };
    let mut doc = Map::new();
    let b = pick(breaker);
    if !b.is_empty() {
        doc.insert("breaker".into(), json!({ protocol: b }));
    }
    let t = pick(timeouts);
    if !t.is_empty() {
        doc.insert("timeouts".into(), json!({ protocol: t }));
    }
    Value::Object(doc)
}

/// Deep-merge `patch` into `into` (objects only).
pub fn merge(into: &mut Value, patch: Value) {
    match (into, patch) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

/// Whether the gateway accepts endpoints of `format` (an importer may name one it does not know).
pub fn format_supported(format: &str) -> bool {
    crate::protocol::Format::parse(format).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitised_and_made_unique() {
        assert_eq!(sanitize_name("DeepSeek (官方)"), "DeepSeek");
        assert_eq!(sanitize_name("  Zhipu GLM / 4.6 "), "Zhipu-GLM-4.6");
        assert_eq!(sanitize_name("智谱"), "");
        assert_eq!(sanitize_name(&"x".repeat(80)).len(), 64);
        let mut n = Names::new();
        assert_eq!(n.take("DeepSeek", "id1", "claude"), "DeepSeek");
        assert_eq!(n.take("deepseek", "id2", "codex"), "deepseek-codex");
        assert_eq!(n.take("DeepSeek", "id3", "codex"), "DeepSeek-codex-2");
        assert_eq!(n.take("智谱", "glm-provider-1", "claude"), "glm-provider-1");
        assert_eq!(n.take("智谱", "智谱", "claude"), "imported");
    }

    #[test]
    fn claude_variables_become_a_model_map() {
        let env: Map<String, Value> = serde_json::from_value(json!({
            "ANTHROPIC_MODEL": "glm-4.6",
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": "glm-4.5-air",
            "ANTHROPIC_DEFAULT_SONNET_MODEL": "claude-sonnet-4-5-20250929[1M]",
            "ANTHROPIC_SMALL_FAST_MODEL": "ignored-when-haiku-is-set",
        }))
        .unwrap();
        let map = claude_model_map(&env);
        assert_eq!(
            Value::Object(map),
            json!({"claude-*": "glm-4.6", "claude-*haiku*": "glm-4.5-air", "claude-*sonnet*": "claude-sonnet-4-5-20250929"})
        );
        let only_small: Map<String, Value> =
            serde_json::from_value(json!({"ANTHROPIC_SMALL_FAST_MODEL": "kimi-k2-turbo"})).unwrap();
        assert_eq!(Value::Object(claude_model_map(&only_small)), json!({"claude-*haiku*": "kimi-k2-turbo"}));
    }

    #[test]
    fn loops_are_recognised() {
        let gw = Some("http://127.0.0.1:3999");
        assert!(loops_back("http://localhost:3999/", gw, &[]).unwrap().contains("loop"));
        assert!(
            loops_back("http://127.0.0.1:15721", gw, &["http://127.0.0.1:15721".into()])
                .unwrap()
                .contains("local proxy")
        );
        assert_eq!(loops_back("https://api.deepseek.com/anthropic", gw, &["http://127.0.0.1:15721".into()]), None);
    }

    #[test]
    fn the_fast_queue_keeps_what_was_there_and_stays_put_on_a_second_import() {
        let existing = vec!["mine".to_string(), "a".into()];
        let once = merged_fast_queue(&existing, &["a".into(), "b".into()]);
        assert_eq!(once, ["mine", "a", "b"]);
        assert_eq!(merged_fast_queue(&once, &["a".into(), "b".into()]), once);
    }

    #[test]
    fn settings_keep_only_present_values_and_merge() {
        let mut doc = settings_for("claude", &[("failure_threshold", Some(json!(8))), ("min_requests", None)], &[]);
        merge(&mut doc, settings_for("responses", &[], &[("request_timeout_secs", Some(json!(600)))]));
        assert_eq!(
            doc,
            json!({"breaker": {"claude": {"failure_threshold": 8}}, "timeouts": {"responses": {"request_timeout_secs": 600}}})
        );
        assert_eq!(upstream_model(" kimi-k2[1m] "), "kimi-k2");
        assert!(format_supported("anthropic"));
    }
}
