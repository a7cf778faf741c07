//! The ccMesh desktop app's database, read-only. Its public schema (the `MIGRATIONS` of
//! `src-tauri/src/modules/storage/migration.rs` in the ccMesh repositories) keeps upstreams in
//! `endpoints`: `name` (unique), `api_url`, `api_key`, `enabled`, `transformer` (the protocol
//! the upstream speaks: `claude`, `openai`, `codex`/`responses`, `gemini`), `model` (a model every
//! request is rewritten to, when set), `models` (JSON array), `active_models` (JSON array, the
//! subset offered; empty = all), `model_mappings` (JSON `[{"from", "to"}]`), `sort_order`, and in
//! later versions `fast`, `fast_sort_order` (the fast queue) and `archived`. Columns an older
//! database lacks take their defaults.

use std::path::Path;

use serde_json::{Map, Value, json};

use super::cc_switch::{ReadError, has_column, has_table, open_read_only};
use super::{EndpointPlan, Names, Plan, loops_back};

/// ccMesh's `transformer` as a ccmesh format.
pub fn format_of(transformer: &str) -> Option<&'static str> {
    match transformer.trim().to_ascii_lowercase().as_str() {
        "claude" | "anthropic" => Some("anthropic"),
        "openai" | "chat" | "openai_chat" => Some("openai"),
        "codex" | "responses" | "openai_responses" => Some("responses"),
        "gemini" => Some("gemini"),
        _ => None,
    }
}

/// `models`, narrowed to `active_models` when that is set.
pub fn models_of(models: &str, active: &str) -> Vec<String> {
    let parse = |s: &str| serde_json::from_str::<Vec<String>>(s).unwrap_or_default();
    let active = parse(active);
    if active.is_empty() { parse(models) } else { active }
}

/// `model_mappings` (and a locked `model`) as a model map.
pub fn model_map_of(mappings: &str, locked: &str) -> Map<String, Value> {
    let mut map = Map::new();
    if let Ok(Value::Array(items)) = serde_json::from_str::<Value>(mappings) {
        for m in items {
            if let (Some(from), Some(to)) = (m.get("from").and_then(Value::as_str), m.get("to").and_then(Value::as_str))
                && !from.trim().is_empty()
                && !to.trim().is_empty()
            {
                map.insert(from.trim().to_string(), json!(to.trim()));
            }
        }
    }
    if map.is_empty() && !locked.trim().is_empty() {
        map.insert("*".into(), json!(locked.trim()));
    }
    map
}

pub fn read(path: &Path, gateway: Option<&str>) -> Result<Plan, ReadError> {
    let shown = path.display().to_string();
    let conn = open_read_only(path).map_err(|source| ReadError::Open { path: shown.clone(), source })?;
    let sql = |source| ReadError::Sql { path: shown.clone(), source };
    if !has_table(&conn, "endpoints") || !has_column(&conn, "endpoints", "api_url") {
        return Err(ReadError::NotCcSwitch(shown).into_ccmesh());
    }
    let col = |c: &str, default: &str| {
        if has_column(&conn, "endpoints", c) { c.to_string() } else { format!("{default} AS {c}") }
    };
    let query = format!(
        "SELECT name, api_url, api_key, {}, {}, {}, {}, {}, {}, {}, {}, {}, {} FROM endpoints ORDER BY sort_order, id",
        col("enabled", "1"),
        col("transformer", "'claude'"),
        col("model", "''"),
        col("models", "'[]'"),
        col("active_models", "'[]'"),
        col("model_mappings", "'[]'"),
        col("sort_order", "0"),
        col("fast", "0"),
        col("fast_sort_order", "0"),
        col("archived", "0"),
    );
    let mut stmt = conn.prepare(&query).map_err(sql)?;
    let mut rows = stmt.query([]).map_err(sql)?;
    let mut plan = Plan { source: format!("ccMesh desktop database {shown}"), settings: json!({}), ..Plan::default() };
    let mut names = Names::new();
    let mut fast: Vec<(i64, i64, String)> = Vec::new();
    while let Some(r) = rows.next().map_err(sql)? {
        let text = |i: usize| r.get::<_, Option<String>>(i).ok().flatten().unwrap_or_default();
        let int = |i: usize| r.get::<_, Option<i64>>(i).ok().flatten().unwrap_or(0);
        let name = text(0);
        let from = format!("endpoint '{name}'");
        if int(12) != 0 {
            plan.skipped.push((from, "archived in ccMesh".into()));
            continue;
        }
        let base = text(1).trim().to_string();
        let key = text(2);
        let Some(format) = format_of(&text(4)) else {
            plan.skipped.push((from, format!("transformer '{}' has no ccmesh format", text(4))));
            continue;
        };
        if base.is_empty() || key.trim().is_empty() {
            plan.skipped.push((from, "no API URL or no key".into()));
            continue;
        }
        if let Some(why) = loops_back(&base, gateway, &[]) {
            plan.skipped.push((from, why));
            continue;
        }
        if !super::format_supported(format) {
            plan.skipped.push((from, format!("this gateway does not accept '{format}' endpoints yet")));
            continue;
        }
        let new_name = names.take(&name, &name, format);
        let body = json!({
            "name": new_name, "base_url": base, "api_key": key, "format": format,
            "models": models_of(&text(6), &text(7)),
            "model_map": model_map_of(&text(8), &text(5)),
            "enabled": int(3) != 0, "sort_order": int(9),
        });
        if int(10) != 0 {
            fast.push((int(11), int(9), new_name.clone()));
        }
        plan.endpoints.push(EndpointPlan { name: new_name, from, body });
    }
    fast.sort();
    plan.fast_queue = fast.into_iter().map(|(_, _, n)| n).collect();
    if has_table(&conn, "app_config") {
        plan.notes
            .push("ccMesh's app settings (app_config) were not imported: their keys have no documented meaning".into());
    }
    Ok(plan)
}

impl ReadError {
    fn into_ccmesh(self) -> ReadError {
        match self {
            ReadError::NotCcSwitch(p) => ReadError::NotCcMesh(p),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transformers_map_to_formats() {
        assert_eq!(format_of("claude"), Some("anthropic"));
        assert_eq!(format_of("OpenAI"), Some("openai"));
        assert_eq!(format_of("codex"), Some("responses"));
        assert_eq!(format_of("cursor"), None);
    }

    #[test]
    fn models_and_maps() {
        assert_eq!(models_of("[\"a\",\"b\",\"c\"]", "[\"b\"]"), ["b"]);
        assert_eq!(models_of("[\"a\"]", "[]"), ["a"]);
        assert!(models_of("not json", "[]").is_empty());
        assert_eq!(
            Value::Object(model_map_of(
                "[{\"from\":\"claude-sonnet-4-5\",\"to\":\"glm-4.6\"},{\"from\":\"\",\"to\":\"x\"}]",
                "ignored"
            )),
            json!({"claude-sonnet-4-5": "glm-4.6"})
        );
        assert_eq!(Value::Object(model_map_of("[]", "kimi-k2")), json!({"*": "kimi-k2"}));
    }
}
