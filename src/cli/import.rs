//! `ccmesh import cc-switch|ccmesh`: read the source database (read-only), then create or update
//! endpoints by name, extend the fast queue and patch the settings through the admin API.
//! `--dry-run` prints the same table without writing. Keys go into request bodies only, and the
//! output is scrubbed of every key the plan holds in case a gateway message quotes one.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Subcommand;
use reqwest::Method;
use serde_json::{Value, json};

use super::api::{Client, Common};
use super::output::{path, pretty, table};
use crate::import::{self, Plan};

#[derive(Subcommand, Debug)]
pub enum ImportCommand {
    /// cc-switch's providers (Claude, Codex, Gemini), failover queues and proxy settings.
    CcSwitch {
        /// cc-switch's database (default: ~/.cc-switch/cc-switch.db).
        #[arg(long)]
        db: Option<PathBuf>,
        /// Show what would be imported; change nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        common: Common,
    },
    /// The ccMesh desktop app's endpoints, models, model maps and fast queue.
    Ccmesh {
        /// The ccMesh desktop app's SQLite database.
        #[arg(long)]
        db: PathBuf,
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        common: Common,
    },
}

pub async fn run(cmd: ImportCommand) -> anyhow::Result<String> {
    let (plan, dry_run, common) = match cmd {
        ImportCommand::CcSwitch { db, dry_run, common } => {
            let db = match db {
                Some(d) => d,
                None => dirs::home_dir()
                    .context("cannot find your home directory; pass --db")?
                    .join(".cc-switch/cc-switch.db"),
            };
            if !db.is_file() {
                bail!("{} does not exist; pass cc-switch's database with --db PATH", db.display());
            }
            (import::cc_switch::read(&db, Some(&super::api::server_url(&common.server)))?, dry_run, common)
        }
        ImportCommand::Ccmesh { db, dry_run, common } => {
            if !db.is_file() {
                bail!("{} does not exist; pass the ccMesh app's database with --db PATH", db.display());
            }
            (import::ccmesh_desktop::read(&db, Some(&super::api::server_url(&common.server)))?, dry_run, common)
        }
    };
    let secrets: Vec<String> =
        plan.endpoints.iter().filter_map(|e| e.body["api_key"].as_str().map(str::to_string)).collect();
    let out = apply(&plan, dry_run, &common).await;
    // Belt and braces: no key leaves this command, whatever a message quotes.
    let scrub = |mut s: String| {
        for k in secrets.iter().filter(|k| k.len() >= 4) {
            s = s.replace(k.as_str(), "(a key)");
        }
        s
    };
    match out {
        Ok(text) => Ok(scrub(text)),
        Err(e) => Err(anyhow::anyhow!(scrub(super::error_text(&e)))),
    }
}

async fn apply(plan: &Plan, dry_run: bool, common: &Common) -> anyhow::Result<String> {
    let api = Client::new(common)?;
    let existing = match api.call(Method::GET, "/api/endpoints", None).await {
        Ok(v) => Some(v),
        Err(e) if dry_run => {
            eprintln!("ccmesh: {}; showing the plan without knowing which endpoints exist", super::error_text(&e));
            None
        }
        Err(e) => return Err(e),
    };
    let existing_names: Vec<String> = existing
        .as_ref()
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|e| e["name"].as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    let mut rows = Vec::new();
    let mut failed = 0;
    let mut applied = Vec::new();
    for e in &plan.endpoints {
        let exists = existing_names.iter().any(|n| n == &e.name);
        let mut action = match (exists, dry_run) {
            (true, true) => "would update".to_string(),
            (false, true) => "would create".to_string(),
            (true, false) => "updated".to_string(),
            (false, false) => "created".to_string(),
        };
        if !dry_run {
            let result = if exists {
                let mut patch = e.body.clone();
                if let Some(o) = patch.as_object_mut() {
                    o.remove("name");
                }
                api.call(Method::PATCH, &format!("/api/endpoints/{}", path(&e.name)), Some(patch)).await
            } else {
                api.call(Method::POST, "/api/endpoints", Some(e.body.clone())).await
            };
            match result {
                Ok(_) => applied.push(e.name.clone()),
                Err(err) => {
                    failed += 1;
                    action = format!("failed: {}", format!("{err:#}").trim_start_matches("the gateway answered "));
                }
            }
        }
        rows.push(vec![
            action,
            e.name.clone(),
            e.format().into(),
            e.base_url().into(),
            e.models_cell(),
            e.from.clone(),
        ]);
    }
    for (from, why) in &plan.skipped {
        rows.push(vec!["skipped".into(), "-".into(), "-".into(), "-".into(), "-".into(), format!("{from}: {why}")]);
    }
    let mut out = vec![
        format!("{}{}", if dry_run { "dry run, nothing changed: " } else { "" }, plan.source),
        table(&["ACTION", "NAME", "FORMAT", "BASE URL", "MODELS", "FROM"], &rows),
    ];

    if !plan.fast_queue.is_empty() {
        let current: Vec<String> = fast_queue_of(existing.as_ref());
        let queue = import::merged_fast_queue(&current, &plan.fast_queue);
        let queue: Vec<String> = if dry_run {
            queue
        } else {
            queue.into_iter().filter(|n| current.contains(n) || applied.contains(n)).collect()
        };
        if dry_run {
            out.push(format!("fast queue would be: {}", queue.join(" → ")));
        } else {
            match api.call(Method::PUT, "/api/fast-queue", Some(json!({"endpoints": queue}))).await {
                Ok(_) => out.push(format!("fast queue: {}", queue.join(" → "))),
                Err(e) => {
                    failed += 1;
                    out.push(format!("fast queue not set: {}", super::error_text(&e)));
                }
            }
        }
    }

    let mut patch = plan.settings.clone();
    let settings_lines = flatten("", &patch);
    let mut failover_lines = Vec::new();
    for (protocol, on) in &plan.failover {
        let verb = if dry_run { "would turn" } else { "turns" };
        if !on {
            failover_lines.push(format!(
                "the source has automatic failover off for {protocol}: this {verb} ccmesh's failover off for {protocol} requests (failover_enabled.{protocol} = false; `ccmesh failover on {protocol}` undoes it)"
            ));
        }
    }
    if !plan.failover.is_empty() {
        import::merge(&mut patch, json!({"failover_enabled": plan.failover}));
    }
    if patch.as_object().is_some_and(|o| !o.is_empty()) {
        if dry_run {
            out.push("settings would be:".into());
            out.extend(settings_lines.iter().map(|l| format!("  {l}")));
        } else {
            match api.call(Method::PATCH, "/api/settings", Some(patch)).await {
                Ok(_) => {
                    out.push("settings:".into());
                    out.extend(settings_lines.iter().map(|l| format!("  {l}")));
                }
                Err(e) => {
                    failed += 1;
                    out.push(format!("settings not changed: {}", super::error_text(&e)));
                }
            }
        }
    }
    out.extend(failover_lines.into_iter().map(|l| format!("note: {l}")));
    out.extend(plan.notes.iter().map(|n| format!("note: {n}")));
    if common.json {
        let rows_json: Vec<Value> = rows
            .iter()
            .map(|r| json!({"action": r[0], "name": r[1], "format": r[2], "base_url": r[3], "models": r[4], "from": r[5]}))
            .collect();
        return Ok(pretty(&json!({"dry_run": dry_run, "source": plan.source, "endpoints": rows_json,
            "fast_queue": plan.fast_queue, "settings": plan.settings, "failover_enabled": plan.failover, "notes": plan.notes})));
    }
    if failed > 0 {
        bail!(
            "{}\n{failed} step(s) failed; fix what they say and run the import again (it updates by name)",
            out.join("\n")
        );
    }
    if !dry_run && !plan.endpoints.is_empty() {
        out.push("next: `ccmesh connect claude-code` (or codex) points your client at the gateway".into());
    }
    Ok(out.join("\n"))
}

fn fast_queue_of(endpoints: Option<&Value>) -> Vec<String> {
    let mut fast: Vec<(i64, String)> = endpoints
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter(|e| e["fast"] == json!(true))
                .map(|e| (e["fast_sort_order"].as_i64().unwrap_or(0), e["name"].as_str().unwrap_or("").to_string()))
                .collect()
        })
        .unwrap_or_default();
    fast.sort();
    fast.into_iter().map(|(_, n)| n).collect()
}

/// `breaker.claude.failure_threshold = 8` lines.
fn flatten(prefix: &str, v: &Value) -> Vec<String> {
    match v {
        Value::Object(m) => m
            .iter()
            .flat_map(|(k, v)| flatten(&if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") }, v))
            .collect(),
        other => vec![format!("{prefix} = {other}")],
    }
}
