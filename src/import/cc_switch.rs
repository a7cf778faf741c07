//! cc-switch's database (`~/.cc-switch/cc-switch.db`), read-only. Facts of its public schema
//! (`src-tauri/src/database/schema.rs` of farion1231/cc-switch) this reader relies on:
//!
//! - `providers`, keyed by `(id, app_type)`, with `name`, `settings_config` (JSON: the client
//!   config cc-switch writes when it switches — Claude `{"env": {…}}`, Codex `{"auth": {…},
//!   "config": "<config.toml text>"}`, Gemini `{"env": {…}}`), `sort_index`, `is_current`.
//! - The failover queue, in one of two schema versions, both supported:
//!   - **queue table** (cc-switch 3.8, schema 2): `failover_queue(app_type, provider_id,
//!     queue_order, enabled)`, and a one-row `proxy_config` (`max_retries`, `request_timeout`)
//!     with a one-row `circuit_breaker_config` (`failure_threshold`, `success_threshold`,
//!     `timeout_seconds`, `error_rate_threshold`, `min_requests`) for every app;
//!   - **queue column** (later versions): `providers.in_failover_queue`, ordered by `sort_index`,
//!     and `proxy_config` with one row per `app_type` (`auto_failover_enabled`, `max_retries`,
//!     `streaming_first_byte_timeout`, `streaming_idle_timeout`, `non_streaming_timeout`,
//!     `circuit_*`, `listen_address`, `listen_port`).
//!
//! Apps: `claude` → `anthropic` endpoints and the claude protocol's settings; `codex` →
//! `responses` endpoints (`openai` when the provider's wire API is chat) and the responses
//! protocol's settings; `gemini` → `gemini` endpoints and the gemini protocol's settings; every
//! other app is skipped with a note. `max_retries` has no equivalent (ccmesh's attempt cap is
//! candidates × 2) and is reported.

use std::path::Path;

use rusqlite::{Connection, OpenFlags};
use serde_json::{Map, Value, json};

use super::{EndpointPlan, Names, Plan, claude_model_map, loops_back, merge, settings_for, upstream_model};

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot open {path} read-only: {source}; is it cc-switch's database (default ~/.cc-switch/cc-switch.db)?")]
    Open { path: String, source: rusqlite::Error },
    #[error("{0} is not a cc-switch database: it has no `providers` table")]
    NotCcSwitch(String),
    #[error("{0} is not a ccMesh desktop database: it has no `endpoints` table with `api_url`")]
    NotCcMesh(String),
    #[error("reading {path}: {source}")]
    Sql { path: String, source: rusqlite::Error },
}

/// Open a source database for reading only: nothing ccmesh does can change it.
pub fn open_read_only(path: &Path) -> Result<Connection, rusqlite::Error> {
    Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
}

pub fn has_table(conn: &Connection, table: &str) -> bool {
    conn.query_row("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1", [table], |_| Ok(())).is_ok()
}

pub fn has_column(conn: &Connection, table: &str, column: &str) -> bool {
    let Ok(mut stmt) = conn.prepare(&format!("PRAGMA table_info({table})")) else { return false };
    let Ok(names) = stmt.query_map([], |r| r.get::<_, String>(1)) else { return false };
    names.filter_map(Result::ok).any(|n| n == column)
}

/// A column as JSON (integers stay integers, reals stay reals); `None` when absent or NULL.
pub fn number(row: &rusqlite::Row<'_>, column: &str) -> Option<Value> {
    match row.get::<_, rusqlite::types::Value>(column).ok()? {
        rusqlite::types::Value::Integer(i) => Some(json!(i)),
        rusqlite::types::Value::Real(f) => Some(json!(f)),
        rusqlite::types::Value::Text(t) => t.trim().parse::<f64>().ok().map(|f| json!(f)),
        _ => None,
    }
}

struct Provider {
    id: String,
    app: String,
    name: String,
    settings: Value,
    sort_index: Option<i64>,
    is_current: bool,
    /// Position in the app's failover queue.
    queue: Option<i64>,
}

/// The endpoint a provider's client config describes.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderEndpoint {
    pub base_url: String,
    pub key: String,
    pub format: &'static str,
    pub model_map: Map<String, Value>,
}

pub fn provider_endpoint(app: &str, settings: &Value) -> Result<ProviderEndpoint, String> {
    let (base_url, key, format, model_map) = provider_parts(app, settings)?;
    Ok(ProviderEndpoint { base_url, key, format, model_map })
}

type Parts = (String, String, &'static str, Map<String, Value>);

fn provider_parts(app: &str, settings: &Value) -> Result<Parts, String> {
    let env = settings.get("env").and_then(Value::as_object).cloned().unwrap_or_default();
    let text = |m: &Map<String, Value>, k: &str| {
        m.get(k).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty()).map(str::to_string)
    };
    match app {
        "claude" => {
            let base = text(&env, "ANTHROPIC_BASE_URL")
                .ok_or("no ANTHROPIC_BASE_URL: it uses Claude's own login, which a gateway cannot share")?;
            let key = text(&env, "ANTHROPIC_AUTH_TOKEN")
                .or_else(|| text(&env, "ANTHROPIC_API_KEY"))
                .ok_or("no ANTHROPIC_AUTH_TOKEN or ANTHROPIC_API_KEY")?;
            Ok((base, key, "anthropic", claude_model_map(&env)))
        }
        "codex" => {
            let auth = settings.get("auth").and_then(Value::as_object).cloned().unwrap_or_default();
            let config = settings.get("config").and_then(Value::as_str).unwrap_or("");
            let doc: toml::Table =
                toml::from_str(config).map_err(|e| format!("its config.toml does not parse ({})", e.message()))?;
            let provider = doc.get("model_provider").and_then(|v| v.as_str());
            let table = provider.and_then(|p| doc.get("model_providers")?.get(p)).and_then(|t| t.as_table());
            let field = |k: &str| table.and_then(|t| t.get(k)).and_then(|v| v.as_str()).map(str::to_string);
            let base = match (provider, field("base_url")) {
                (_, Some(b)) => b,
                (None | Some("openai"), None) => "https://api.openai.com/v1".to_string(),
                (Some(p), None) => return Err(format!("provider table '{p}' has no base_url")),
            };
            let key = field("experimental_bearer_token")
                .or_else(|| field("env_key").and_then(|k| text(&auth, &k)))
                .or_else(|| text(&auth, "OPENAI_API_KEY"))
                .ok_or("no API key (a ChatGPT login cannot be shared through a gateway)")?;
            let format = if field("wire_api").as_deref() == Some("chat") { "openai" } else { "responses" };
            let mut map = Map::new();
            if let Some(m) = doc.get("model").and_then(|v| v.as_str()).filter(|m| !m.is_empty()) {
                map.insert("*".into(), json!(upstream_model(m)));
            }
            Ok((base, key, format, map))
        }
        "gemini" => {
            let base = text(&env, "GOOGLE_GEMINI_BASE_URL")
                .unwrap_or_else(|| "https://generativelanguage.googleapis.com".into());
            let key = text(&env, "GEMINI_API_KEY")
                .or_else(|| text(&env, "GOOGLE_API_KEY"))
                .ok_or("no GEMINI_API_KEY (a Google login cannot be shared)")?;
            let mut map = Map::new();
            if let Some(m) = text(&env, "GEMINI_MODEL") {
                map.insert("*".into(), json!(m));
            }
            Ok((base, key, "gemini", map))
        }
        other => Err(format!("cc-switch app '{other}' has no ccmesh equivalent")),
    }
}

/// The inbound protocols whose settings an app's proxy numbers become.
fn protocols(app: &str) -> &'static [&'static str] {
    match app {
        "claude" => &["claude"],
        "codex" => &["responses"],
        "gemini" => &["gemini"],
        _ => &[],
    }
}

pub fn read(path: &Path, gateway: Option<&str>) -> Result<Plan, ReadError> {
    let shown = path.display().to_string();
    let conn = open_read_only(path).map_err(|source| ReadError::Open { path: shown.clone(), source })?;
    let sql = |source| ReadError::Sql { path: shown.clone(), source };
    if !has_table(&conn, "providers") {
        return Err(ReadError::NotCcSwitch(shown));
    }
    let queue_table = has_table(&conn, "failover_queue");
    let queue_column = has_column(&conn, "providers", "in_failover_queue");
    let per_app = has_column(&conn, "proxy_config", "app_type");
    let mut plan = Plan {
        source: format!(
            "cc-switch database {shown} ({})",
            match (queue_table, queue_column) {
                (true, _) => "schema with the failover_queue table",
                (false, true) => "schema with providers.in_failover_queue",
                (false, false) => "schema without a failover queue",
            }
        ),
        settings: json!({}),
        ..Plan::default()
    };

    // The queue positions, per (app, provider id).
    let mut positions: std::collections::HashMap<(String, String), i64> = std::collections::HashMap::new();
    if queue_table {
        let mut stmt = conn
            .prepare(
                "SELECT app_type, provider_id, queue_order FROM failover_queue WHERE enabled != 0 ORDER BY queue_order",
            )
            .map_err(sql)?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?)))
            .map_err(sql)?;
        for row in rows {
            let (app, id, order) = row.map_err(sql)?;
            positions.insert((app, id), order);
        }
    }
    let queue_expr = if queue_column && !queue_table { "in_failover_queue" } else { "0" };
    let current_expr = if has_column(&conn, "providers", "is_current") { "is_current" } else { "0" };
    let mut stmt = conn
        .prepare(&format!(
            "SELECT id, app_type, name, settings_config, sort_index, {current_expr}, {queue_expr} FROM providers"
        ))
        .map_err(sql)?;
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, Option<i64>>(4)?,
                r.get::<_, Option<bool>>(5)?.unwrap_or(false),
                r.get::<_, Option<bool>>(6)?.unwrap_or(false),
            ))
        })
        .map_err(sql)?;
    let mut providers = Vec::new();
    for row in rows {
        let (id, app, name, settings_config, sort_index, is_current, in_queue) = row.map_err(sql)?;
        let queue = if queue_table {
            positions.get(&(app.clone(), id.clone())).copied()
        } else {
            in_queue.then_some(sort_index.unwrap_or(i64::MAX))
        };
        let settings = serde_json::from_str(&settings_config).unwrap_or(Value::Null);
        providers.push(Provider { id, app, name, settings, sort_index, is_current, queue });
    }
    const APPS: [&str; 3] = ["claude", "codex", "gemini"];
    let app_rank = |a: &str| APPS.iter().position(|x| *x == a).unwrap_or(APPS.len());
    providers.sort_by(|a, b| {
        (app_rank(&a.app), !a.is_current, a.sort_index.unwrap_or(i64::MAX), &a.name, &a.id).cmp(&(
            app_rank(&b.app),
            !b.is_current,
            b.sort_index.unwrap_or(i64::MAX),
            &b.name,
            &b.id,
        ))
    });

    // cc-switch's own proxy addresses: a provider pointing there is a takeover, not an upstream.
    let mut local_proxies = Vec::new();
    if has_column(&conn, "proxy_config", "listen_port") {
        let mut stmt = conn.prepare("SELECT * FROM proxy_config").map_err(sql)?;
        let mut rows = stmt.query([]).map_err(sql)?;
        while let Some(r) = rows.next().map_err(sql)? {
            let host = r.get::<_, String>("listen_address").unwrap_or_else(|_| "127.0.0.1".into());
            if let Ok(port) = r.get::<_, i64>("listen_port") {
                let host = if host == "0.0.0.0" { "127.0.0.1".to_string() } else { host };
                local_proxies.push(format!("http://{host}:{port}"));
            }
        }
    }

    let mut names = Names::new();
    let mut queues: Vec<(usize, i64, String)> = Vec::new();
    let mut chat_codex = false;
    for (i, p) in providers.iter().enumerate() {
        let from = format!("{}: '{}'", p.app, p.name);
        let ProviderEndpoint { base_url: base, key, format, model_map: map } =
            match provider_endpoint(&p.app, &p.settings) {
                Ok(e) => e,
                Err(why) => {
                    plan.skipped.push((from, why));
                    continue;
                }
            };
        if let Some(why) = loops_back(&base, gateway, &local_proxies) {
            plan.skipped.push((from, why));
            continue;
        }
        if !super::format_supported(format) {
            plan.skipped.push((from, format!("this gateway does not accept '{format}' endpoints yet")));
            continue;
        }
        chat_codex |= p.app == "codex" && format == "openai";
        let name = names.take(&p.name, &p.id, &p.app);
        let models: Vec<&str> = if p.app == "claude" { vec!["claude-*"] } else { Vec::new() };
        let body = json!({
            "name": name, "base_url": base, "api_key": key, "format": format,
            // Claude Code asks for `claude-…` models only; serving just those keeps Codex traffic
            // on its own providers when every format is compatible with every protocol.
            "models": models, "model_map": map, "enabled": true, "sort_order": (i as i64 + 1) * 10,
        });
        if let Some(pos) = p.queue {
            queues.push((app_rank(&p.app), pos, name.clone()));
        }
        plan.endpoints.push(EndpointPlan { name, from, body });
    }
    queues.sort();
    plan.fast_queue = queues.into_iter().map(|(_, _, n)| n).collect();
    // The proxy numbers, per app (queue-column schema) or one set for every app (queue table).
    if has_table(&conn, "proxy_config") {
        let mut stmt = conn.prepare("SELECT * FROM proxy_config").map_err(sql)?;
        let mut rows = stmt.query([]).map_err(sql)?;
        while let Some(r) = rows.next().map_err(sql)? {
            let app = if per_app { r.get::<_, String>("app_type").unwrap_or_default() } else { "every app".into() };
            let targets: Vec<&str> = if per_app {
                let mut t = protocols(&app).to_vec();
                if app == "codex" && chat_codex {
                    t.push("openai");
                }
                t
            } else {
                vec!["claude", "openai", "responses", "gemini"]
            };
            if per_app && targets.is_empty() {
                continue;
            }
            if let Some(n) = number(r, "max_retries") {
                plan.notes.push(format!(
                    "cc-switch max_retries = {n} ({app}) has no equivalent: ccmesh sends a request to each candidate at most twice"
                ));
            }
            for protocol in &targets {
                let b = [
                    ("failure_threshold", number(r, "circuit_failure_threshold")),
                    ("success_threshold", number(r, "circuit_success_threshold")),
                    ("timeout_secs", number(r, "circuit_timeout_seconds")),
                    ("error_rate_threshold", number(r, "circuit_error_rate_threshold")),
                    ("min_requests", number(r, "circuit_min_requests")),
                ];
                let t = [
                    ("first_byte_timeout_secs", number(r, "streaming_first_byte_timeout")),
                    ("idle_timeout_secs", number(r, "streaming_idle_timeout")),
                    (
                        "request_timeout_secs",
                        number(r, "non_streaming_timeout").or_else(|| number(r, "request_timeout")),
                    ),
                ];
                merge(&mut plan.settings, settings_for(protocol, &b, &t));
                if let Some(on) = number(r, "auto_failover_enabled").and_then(|v| v.as_f64()) {
                    plan.failover.insert(protocol.to_string(), on != 0.0);
                }
            }
        }
    }
    if has_table(&conn, "circuit_breaker_config") {
        let mut stmt = conn.prepare("SELECT * FROM circuit_breaker_config").map_err(sql)?;
        let mut rows = stmt.query([]).map_err(sql)?;
        if let Some(r) = rows.next().map_err(sql)? {
            for protocol in ["claude", "openai", "responses", "gemini"] {
                let b = [
                    ("failure_threshold", number(r, "failure_threshold")),
                    ("success_threshold", number(r, "success_threshold")),
                    ("timeout_secs", number(r, "timeout_seconds")),
                    ("error_rate_threshold", number(r, "error_rate_threshold")),
                    ("min_requests", number(r, "min_requests")),
                ];
                merge(&mut plan.settings, settings_for(protocol, &b, &[]));
            }
        }
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codex_providers_read_their_table_and_key() {
        let settings = json!({
            "auth": {"OPENAI_API_KEY": "sk-relay-0000"},
            "config": "model_provider = \"relay\"\nmodel = \"gpt-5.5\"\n[model_providers.relay]\nname = \"relay\"\nbase_url = \"https://relay.example.com/v1\"\nwire_api = \"chat\"\n"
        });
        let e = provider_endpoint("codex", &settings).unwrap();
        assert_eq!(
            (e.base_url.as_str(), e.key.as_str(), e.format),
            ("https://relay.example.com/v1", "sk-relay-0000", "openai")
        );
        assert_eq!(Value::Object(e.model_map), json!({"*": "gpt-5.5"}));
        let official = json!({"auth": {"OPENAI_API_KEY": "sk-proj-1"}, "config": ""});
        assert_eq!(provider_endpoint("codex", &official).unwrap().base_url, "https://api.openai.com/v1");
        let login = json!({"auth": {"tokens": {"id_token": "x"}}, "config": ""});
        assert!(provider_endpoint("codex", &login).unwrap_err().contains("ChatGPT"));
    }

    #[test]
    fn claude_providers_need_a_base_url_and_a_key() {
        assert!(provider_endpoint("claude", &json!({"env": {}})).unwrap_err().contains("ANTHROPIC_BASE_URL"));
        let e = provider_endpoint(
            "claude",
            &json!({"env": {"ANTHROPIC_BASE_URL": "https://api.moonshot.cn/anthropic", "ANTHROPIC_API_KEY": "sk-m"}}),
        )
        .unwrap();
        assert_eq!(
            (e.base_url.as_str(), e.key.as_str(), e.format),
            ("https://api.moonshot.cn/anthropic", "sk-m", "anthropic")
        );
        assert!(provider_endpoint("opencode", &json!({})).unwrap_err().contains("no ccmesh equivalent"));
    }
}
