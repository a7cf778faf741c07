//! Management commands: thin clients of the admin API. Tables for people, `--json` for scripts,
//! a non-zero exit and a clear message when the server is unreachable or answers an error.

use std::process::ExitCode;

use anyhow::{anyhow, bail};
use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};

use super::Command;
pub(crate) use super::api::{Client, Common};
pub(crate) use super::output::{cell, path, pretty, table};

/// Where `endpoint add` (and `endpoint edit --api-key-from-env`) read a key that should stay out
/// of shell history.
pub const API_KEY_ENV: &str = "CCMESH_ENDPOINT_API_KEY";

/// The fields `endpoint add` and `endpoint edit` share. The API key is not among them: `add`
/// takes it from the environment when no flag gives it, `edit` only when asked to.
#[derive(Args, Debug)]
pub struct EndpointFields {
    /// Upstream base URL, e.g. https://api.anthropic.com
    #[arg(long)]
    pub base_url: Option<String>,
    /// anthropic | openai | responses | gemini
    #[arg(long)]
    pub format: Option<String>,
    /// A model served (repeatable; `*` globs allowed). Replaces the list on edit.
    #[arg(long = "model")]
    pub models: Vec<String>,
    /// Model rewrite FROM=TO (repeatable). Replaces the map on edit.
    #[arg(long = "map")]
    pub model_map: Vec<String>,
    /// Extra upstream header NAME=VALUE (repeatable). Replaces the headers on edit.
    #[arg(long = "header")]
    pub headers: Vec<String>,
    /// Model used by `ccmesh endpoint test`.
    #[arg(long)]
    pub test_model: Option<String>,
    /// Put the endpoint in the fast queue (at the end).
    #[arg(long, conflicts_with = "no_fast")]
    pub fast: bool,
    /// Take the endpoint out of the fast queue.
    #[arg(long)]
    pub no_fast: bool,
    /// Global order position.
    #[arg(long)]
    pub sort_order: Option<i64>,
}

#[derive(Subcommand, Debug)]
pub enum EndpointCommand {
    /// Add an endpoint (`--preset VENDOR` fills base URL, format and model map; see `ccmesh presets`).
    Add {
        name: String,
        /// Start from a vendor preset; explicit flags override its fields.
        #[arg(long)]
        preset: Option<String>,
        /// API key (or set CCMESH_ENDPOINT_API_KEY to keep it out of shell history).
        #[arg(long, env = API_KEY_ENV, hide_env_values = true)]
        api_key: Option<String>,
        #[command(flatten)]
        fields: EndpointFields,
        /// Create it disabled.
        #[arg(long)]
        disabled: bool,
        #[command(flatten)]
        common: Common,
    },
    /// List endpoints in global order.
    List(Common),
    /// Show one endpoint.
    Show {
        name: String,
        #[command(flatten)]
        common: Common,
    },
    /// Change fields of an endpoint (only the flags given).
    Edit {
        name: String,
        /// Rename the endpoint.
        #[arg(long)]
        rename: Option<String>,
        /// A new API key. The endpoint keeps its key unless this or --api-key-from-env is given
        /// (CCMESH_ENDPOINT_API_KEY alone never changes it: it is meant for `add`).
        #[arg(long, conflicts_with = "api_key_from_env")]
        api_key: Option<String>,
        /// Take the new API key from CCMESH_ENDPOINT_API_KEY (keeps it out of shell history).
        #[arg(long)]
        api_key_from_env: bool,
        #[command(flatten)]
        fields: EndpointFields,
        #[command(flatten)]
        common: Common,
    },
    /// Delete an endpoint.
    Rm {
        name: String,
        #[command(flatten)]
        common: Common,
    },
    /// Enable an endpoint.
    Enable {
        name: String,
        #[command(flatten)]
        common: Common,
    },
    /// Disable an endpoint (it is never routed to).
    Disable {
        name: String,
        #[command(flatten)]
        common: Common,
    },
    /// Run the connectivity test (a one-token request) and store its result.
    Test {
        name: String,
        #[command(flatten)]
        common: Common,
    },
}

#[derive(Subcommand, Debug)]
pub enum FastCommand {
    /// Make exactly these endpoints the fast queue, in this order (none = empty the queue).
    Set {
        names: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
}

pub fn run(command: Command) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ccmesh: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(command)) {
        Ok(output) => {
            if !output.is_empty() {
                use std::io::Write;
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{output}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ccmesh: {}", super::error_text(&e));
            ExitCode::FAILURE
        }
    }
}

fn key_value_map(items: &[String], flag: &str) -> anyhow::Result<Map<String, Value>> {
    let mut map = Map::new();
    for item in items {
        let (k, v) = item.split_once('=').ok_or_else(|| anyhow!("--{flag} expects NAME=VALUE, got '{item}'"))?;
        map.insert(k.trim().to_string(), Value::from(v.trim()));
    }
    Ok(map)
}

fn fields_json(fields: &EndpointFields, api_key: Option<&str>, creating: bool) -> anyhow::Result<Map<String, Value>> {
    let mut obj = Map::new();
    if let Some(v) = &fields.base_url {
        obj.insert("base_url".into(), json!(v));
    }
    if let Some(v) = &fields.format {
        obj.insert("format".into(), json!(v));
    }
    if let Some(v) = api_key {
        obj.insert("api_key".into(), json!(v));
    }
    if !fields.models.is_empty() {
        obj.insert("models".into(), json!(fields.models));
    }
    if !fields.model_map.is_empty() {
        obj.insert("model_map".into(), Value::Object(key_value_map(&fields.model_map, "map")?));
    }
    if !fields.headers.is_empty() {
        obj.insert("headers".into(), Value::Object(key_value_map(&fields.headers, "header")?));
    }
    if let Some(v) = &fields.test_model {
        obj.insert("test_model".into(), json!(v));
    }
    if fields.fast {
        obj.insert("fast".into(), json!(true));
    } else if fields.no_fast || creating {
        obj.insert("fast".into(), json!(false));
    }
    if let Some(v) = fields.sort_order {
        obj.insert("sort_order".into(), json!(v));
    }
    Ok(obj)
}

/// `endpoint edit --api-key-from-env`: the variable must hold a key, or the flag is a mistake.
fn key_from_env(env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<String> {
    match env(API_KEY_ENV).map(|k| k.trim().to_string()) {
        Some(key) if !key.is_empty() => Ok(key),
        _ => {
            bail!("--api-key-from-env reads {API_KEY_ENV}, which is not set; export it, or give the key with --api-key")
        }
    }
}

async fn dispatch(command: Command) -> anyhow::Result<String> {
    use reqwest::Method;
    match command {
        Command::Serve(_) | Command::Migrate(_) => Ok(String::new()),
        Command::Connect(args) => super::clients::connect(args).await,
        Command::Disconnect(args) => super::clients::disconnect(args).await,
        Command::Clients(args) => super::clients::list(args).await,
        Command::Service(cmd) => super::clients::service_install(cmd),
        Command::Import(cmd) => super::import::run(cmd).await,
        Command::Presets(common) => Ok(super::presets::list(&common)),
        Command::Key(cmd) => super::keys::run(cmd).await,
        Command::Endpoint(cmd) => match cmd {
            EndpointCommand::Add { name, preset, api_key, fields, disabled, common } => {
                let mut obj = match preset {
                    Some(id) => super::presets::preset_fields(&id)?,
                    None => Map::new(),
                };
                if obj.is_empty() && fields.base_url.is_none() {
                    bail!(
                        "give --base-url and --format, or start from a vendor with --preset (list them with `ccmesh presets`)"
                    );
                }
                obj.extend(fields_json(&fields, api_key.as_deref(), true)?);
                obj.insert("name".into(), json!(name));
                obj.insert("enabled".into(), json!(!disabled));
                let v = Client::new(&common)?.call(Method::POST, "/api/endpoints", Some(Value::Object(obj))).await?;
                if let Some(warning) = every_model_warning(&v) {
                    eprintln!("{warning}");
                }
                Ok(if common.json { pretty(&v) } else { format!("added endpoint '{name}'\n{}", endpoint_detail(&v)) })
            }
            EndpointCommand::List(common) => {
                let v = Client::new(&common)?.call(Method::GET, "/api/endpoints", None).await?;
                if common.json {
                    return Ok(pretty(&v));
                }
                let warnings: Vec<String> = v
                    .as_array()
                    .map(|a| a.as_slice())
                    .unwrap_or_default()
                    .iter()
                    .filter_map(every_model_warning)
                    .collect();
                Ok(std::iter::once(endpoint_table(&v)).chain(warnings).collect::<Vec<_>>().join("\n"))
            }
            EndpointCommand::Show { name, common } => {
                let v =
                    Client::new(&common)?.call(Method::GET, &format!("/api/endpoints/{}", path(&name)), None).await?;
                Ok(if common.json { pretty(&v) } else { endpoint_detail(&v) })
            }
            EndpointCommand::Edit { name, rename, api_key, api_key_from_env, fields, common } => {
                let api_key = match (api_key, api_key_from_env) {
                    (Some(key), _) => Some(key),
                    (None, true) => Some(key_from_env(&|k| std::env::var(k).ok())?),
                    (None, false) => None,
                };
                let mut obj = fields_json(&fields, api_key.as_deref(), false)?;
                if let Some(n) = rename {
                    obj.insert("name".into(), json!(n));
                }
                if obj.is_empty() {
                    bail!("nothing to change: give at least one flag (see `ccmesh endpoint edit --help`)");
                }
                let v = Client::new(&common)?
                    .call(Method::PATCH, &format!("/api/endpoints/{}", path(&name)), Some(Value::Object(obj)))
                    .await?;
                Ok(if common.json { pretty(&v) } else { format!("updated endpoint '{name}'\n{}", endpoint_detail(&v)) })
            }
            EndpointCommand::Rm { name, common } => {
                Client::new(&common)?.call(Method::DELETE, &format!("/api/endpoints/{}", path(&name)), None).await?;
                Ok(if common.json {
                    json!({"deleted": name}).to_string()
                } else {
                    format!("deleted endpoint '{name}'")
                })
            }
            EndpointCommand::Enable { name, common } => set_enabled(name, common, true).await,
            EndpointCommand::Disable { name, common } => set_enabled(name, common, false).await,
            EndpointCommand::Test { name, common } => {
                let v = Client::new(&common)?
                    .call(Method::POST, &format!("/api/endpoints/{}/test", path(&name)), None)
                    .await?;
                if common.json {
                    return Ok(pretty(&v));
                }
                let status = v["test_status"].as_str().unwrap_or("?");
                let latency = v["test_latency_ms"].as_u64().map(|l| format!(" in {l} ms")).unwrap_or_default();
                let error =
                    v["test_error"].as_str().map(|e| format!(": {}", super::api::cli_hint(e))).unwrap_or_default();
                if status == "available" {
                    Ok(format!("{name}: available{latency}"))
                } else {
                    bail!("{name}: {status}{latency}{error}")
                }
            }
        },
        Command::Fast(FastCommand::Set { names, common }) => {
            let v =
                Client::new(&common)?.call(Method::PUT, "/api/fast-queue", Some(json!({"endpoints": names}))).await?;
            if common.json {
                return Ok(pretty(&v));
            }
            Ok(if names.is_empty() {
                "fast queue emptied".into()
            } else {
                format!("fast queue: {}", names.join(" → "))
            })
        }
        Command::Health(common) => {
            let v = Client::new(&common)?.call(Method::GET, "/api/health", None).await?;
            Ok(if common.json { pretty(&v) } else { health_table(&v) })
        }
        Command::Logs(args) => super::records::logs(args).await,
        Command::Stats(args) => super::records::stats(args).await,
        Command::Failover { state, protocol, common } => {
            let on = state == "on";
            let patch = json!({"failover_enabled": {protocol.as_str(): on}});
            let v = Client::new(&common)?.call(Method::PATCH, "/api/settings", Some(patch)).await?;
            Ok(if common.json {
                pretty(&v["failover_enabled"])
            } else if on {
                format!("failover on for {protocol}: a failed request moves to the next endpoint")
            } else {
                format!(
                    "failover off for {protocol}: requests go only to the endpoint the routing strategy starts at; turn it back on with `ccmesh failover on {protocol}`"
                )
            })
        }
        Command::Reset { name, common } => {
            let v = Client::new(&common)?
                .call(Method::POST, &format!("/api/endpoints/{}/reset", path(&name)), None)
                .await?;
            Ok(if common.json {
                pretty(&v)
            } else {
                format!("breaker of '{name}' reset (now {})", v["circuit"].as_str().unwrap_or("closed"))
            })
        }
    }
}

async fn set_enabled(name: String, common: Common, enabled: bool) -> anyhow::Result<String> {
    let v = Client::new(&common)?
        .call(reqwest::Method::PATCH, &format!("/api/endpoints/{}", path(&name)), Some(json!({"enabled": enabled})))
        .await?;
    Ok(if common.json {
        pretty(&v)
    } else {
        format!("{} endpoint '{name}'", if enabled { "enabled" } else { "disabled" })
    })
}

fn endpoint_table(v: &Value) -> String {
    let rows: Vec<Vec<String>> = v
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|e| {
            vec![
                cell(&e["name"]),
                cell(&e["format"]),
                cell(&e["base_url"]),
                if e["serves_every_model"] == json!(true) { "* (every model)".into() } else { cell(&e["models"]) },
                if e["enabled"] == json!(true) { "yes".into() } else { "no".into() },
                if e["fast"] == json!(true) { format!("#{}", e["fast_sort_order"]) } else { "-".into() },
                cell(&e["test_status"]),
            ]
        })
        .collect();
    if rows.is_empty() {
        return "no endpoints yet; add one with `ccmesh endpoint add NAME --preset deepseek --api-key KEY` (vendors: `ccmesh presets`), `ccmesh endpoint add NAME --base-url URL --format anthropic --api-key KEY`, or bring your cc-switch providers with `ccmesh import cc-switch`".into();
    }
    table(&["NAME", "FORMAT", "BASE URL", "MODELS", "ENABLED", "FAST", "TEST"], &rows)
}

/// The warning for an endpoint that any model can be routed to (`Endpoint::serves_every_model`),
/// with the commands that restrict it.
fn every_model_warning(e: &Value) -> Option<String> {
    if e["serves_every_model"] != json!(true) {
        return None;
    }
    let name = e["name"].as_str().unwrap_or("NAME");
    let mapped = e["model_map"].as_object().filter(|m| !m.is_empty()).map(|m| {
        let keys: Vec<&str> = m.keys().map(String::as_str).collect();
        format!(" (only {} mapped, every other model sent as it is)", keys.join(", "))
    });
    Some(format!(
        "warning: endpoint '{name}' serves every model: it lists none, so a request for any model (gpt-4o, claude-…) can be sent to it{}; name what it serves with `ccmesh endpoint edit {name} --model 'PATTERN'` (repeatable, `*` globs), or send every model to one with `--map '*=MODEL'`",
        mapped.unwrap_or_default()
    ))
}

fn endpoint_detail(e: &Value) -> String {
    // Every field a draft sets, then the last test: the same list the API validates.
    let shown = ["test_status", "test_at", "test_latency_ms", "test_error"];
    let fields = crate::endpoint::draft::FIELDS.iter().chain(&shown);
    let rows: Vec<Vec<String>> = fields.map(|f| vec![format!("{f}:"), cell(&e[*f])]).collect();
    table(&["", ""], &rows).trim_start().to_string()
}

/// The badge (SPEC §7's one rule, as the dashboard shows it) with what it means in a few words.
fn health_cell(h: &Value) -> String {
    let n = h["consecutive_failures"].as_u64().unwrap_or(0);
    let reason = h["open_reason"].as_str().map(|r| r.replace('_', "-")).unwrap_or_else(|| "broken".into());
    match h["badge"].as_str().unwrap_or("unknown") {
        "healthy" => "healthy".into(),
        "degraded" => format!("degraded ({n} failure{} in a row)", if n == 1 { "" } else { "s" }),
        "open" if h["probe_due"] == json!(true) => format!("open ({reason}), cooled down: the next request probes it"),
        "open" => format!("open ({reason})"),
        "recovering" => "recovering (half-open: a probe decides)".into(),
        _ => match h["test_status"].as_str() {
            Some("untested") | None => "unknown (untested)".into(),
            Some(test) => format!("unknown (last test: {test})"),
        },
    }
}

fn health_table(v: &Value) -> String {
    let rows: Vec<Vec<String>> = v
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|h| {
            let cooldown = match h["cooldown_remaining_ms"].as_u64() {
                Some(ms) if ms > 0 => format!("{:.1}s", ms as f64 / 1000.0),
                _ if h["probe_due"] == json!(true) => "over".into(),
                _ => "-".into(),
            };
            let rate = h["success_rate"].as_f64().map(|r| format!("{:.0}%", r * 100.0));
            vec![
                cell(&h["name"]),
                health_cell(h),
                cell(&h["circuit"]),
                cell(&h["consecutive_failures"]),
                rate.unwrap_or_else(|| "-".into()),
                cell(&h["requests"]),
                cooldown,
                cell(&h["last_error"]),
                cell(&h["source"]),
            ]
        })
        .collect();
    if rows.is_empty() {
        return "no endpoints yet".into();
    }
    table(&["NAME", "HEALTH", "CIRCUIT", "FAILS", "SUCCESS", "REQUESTS", "COOLDOWN", "LAST ERROR", "SOURCE"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_says_the_badge_and_a_cooled_down_open_endpoint_will_be_probed() {
        let cases = [
            (json!({"badge": "healthy"}), "healthy"),
            (json!({"badge": "degraded", "consecutive_failures": 2}), "degraded (2 failures in a row)"),
            (json!({"badge": "open", "open_reason": "rate_limited", "probe_due": false}), "open (rate-limited)"),
            (
                json!({"badge": "open", "open_reason": "broken", "probe_due": true}),
                "open (broken), cooled down: the next request probes it",
            ),
            (json!({"badge": "unknown", "test_status": "available"}), "unknown (last test: available)"),
        ];
        for (h, want) in cases {
            assert_eq!(health_cell(&h), want, "{h}");
        }
    }

    #[test]
    fn key_values_parse() {
        let m = key_value_map(&["a=b".into(), "c = d=e".into()], "map").unwrap();
        assert_eq!(m["a"], "b");
        assert_eq!(m["c"], "d=e");
        assert!(key_value_map(&["nope".into()], "map").is_err());
    }
}
