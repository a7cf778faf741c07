//! Management commands: thin clients of the admin API. Tables for people, `--json` for scripts,
//! a non-zero exit and a clear message when the server is unreachable or answers an error.

use std::process::ExitCode;

use anyhow::{Context, anyhow, bail};
use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};

use super::Command;

#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Base URL of the running gateway.
    #[arg(long, env = "CCMESH_SERVER", default_value = "http://127.0.0.1:3999", global = true)]
    pub server: String,
    /// Admin token (Authorization: Bearer).
    #[arg(long = "admin-token", env = "CCMESH_ADMIN_TOKEN", hide_env_values = true, global = true)]
    pub admin_token: Option<String>,
    /// Print the API's JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct EndpointFields {
    /// Upstream base URL, e.g. https://api.anthropic.com
    #[arg(long)]
    pub base_url: Option<String>,
    /// anthropic | openai | responses | gemini
    #[arg(long)]
    pub format: Option<String>,
    /// API key (or set CCMESH_ENDPOINT_API_KEY to keep it out of shell history).
    #[arg(long, env = "CCMESH_ENDPOINT_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
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

#[derive(Args, Debug)]
pub struct LogsArgs {
    /// Show one request's full record and decision trail.
    #[arg(long)]
    pub id: Option<String>,
    /// How many recent requests to show.
    #[arg(short = 'n', long, default_value_t = 20)]
    pub limit: u32,
    /// Keep running and print requests as they complete.
    #[arg(short, long)]
    pub follow: bool,
    #[arg(long)]
    pub endpoint: Option<String>,
    #[arg(long)]
    pub model: Option<String>,
    /// claude | openai | responses
    #[arg(long)]
    pub protocol: Option<String>,
    /// A status class (2xx, 4xx, 5xx) or an exact status (429).
    #[arg(long)]
    pub status: Option<String>,
    /// Only requests that failed over.
    #[arg(long)]
    pub failed_over: bool,
    /// Start of the period: unix ms, RFC 3339, a date, or an age like 15m, 24h, 7d.
    #[arg(long)]
    pub since: Option<String>,
    /// Text to find in errors.
    #[arg(long = "search")]
    pub q: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
pub struct StatsArgs {
    /// Start of the period (unix ms, RFC 3339, a date, or an age like 24h, 7d).
    #[arg(long, default_value = "24h")]
    pub since: String,
    /// Group by endpoint, model or protocol.
    #[arg(long = "by", default_value = "endpoint")]
    pub group_by: String,
    #[command(flatten)]
    pub common: Common,
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
            eprintln!("ccmesh: {e:#}");
            ExitCode::FAILURE
        }
    }
}

pub(crate) struct Client {
    http: reqwest::Client,
    pub(crate) server: String,
    token: Option<String>,
}

impl Client {
    pub(crate) fn new(common: &Common) -> anyhow::Result<Client> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(60))
            .no_proxy()
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Client { http, server: common.server.trim_end_matches('/').to_string(), token: common.admin_token.clone() })
    }

    pub(crate) async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let (status, value) = self.call_status(method, path, body).await?;
        if !status.is_success() {
            let message = value
                .pointer("/error/message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| value.to_string());
            bail!("the gateway answered {status}: {message}");
        }
        Ok(value)
    }

    /// The status and JSON of any answer, for callers that treat some errors as information.
    pub(crate) async fn call_status(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(reqwest::StatusCode, Value)> {
        let url = format!("{}{path}", self.server);
        let mut req = self.http.request(method, &url);
        if let Some(t) = self.token.as_deref().filter(|t| !t.is_empty()) {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.map_err(|e| {
            anyhow!(
                "cannot reach the gateway at {} ({}); is `ccmesh serve` running? Use --server or CCMESH_SERVER to point elsewhere",
                self.server,
                crate::proxy::classify::classify_network_error(&e).describe()
            )
        })?;
        let status = resp.status();
        let text = resp.text().await.context("the gateway's answer was cut off")?;
        let value: Value =
            if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
        Ok((status, value))
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

fn fields_json(fields: &EndpointFields, creating: bool) -> anyhow::Result<Map<String, Value>> {
    let mut obj = Map::new();
    if let Some(v) = &fields.base_url {
        obj.insert("base_url".into(), json!(v));
    }
    if let Some(v) = &fields.format {
        obj.insert("format".into(), json!(v));
    }
    if let Some(v) = &fields.api_key {
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

async fn dispatch(command: Command) -> anyhow::Result<String> {
    use reqwest::Method;
    match command {
        Command::Serve(_) => Ok(String::new()),
        Command::Connect(args) => super::clients::connect(args).await,
        Command::Disconnect(args) => super::clients::disconnect(args).await,
        Command::Clients(args) => super::clients::list(args).await,
        Command::Service(cmd) => super::clients::service_install(cmd),
        Command::Import(cmd) => super::import::run(cmd).await,
        Command::Presets(common) => Ok(super::presets::list(&common)),
        Command::Endpoint(cmd) => match cmd {
            EndpointCommand::Add { name, preset, fields, disabled, common } => {
                let mut obj = match preset {
                    Some(id) => super::presets::preset_fields(&id)?,
                    None => Map::new(),
                };
                if obj.is_empty() && fields.base_url.is_none() {
                    bail!(
                        "give --base-url and --format, or start from a vendor with --preset (list them with `ccmesh presets`)"
                    );
                }
                obj.extend(fields_json(&fields, true)?);
                obj.insert("name".into(), json!(name));
                obj.insert("enabled".into(), json!(!disabled));
                let v = Client::new(&common)?.call(Method::POST, "/api/endpoints", Some(Value::Object(obj))).await?;
                Ok(if common.json { pretty(&v) } else { format!("added endpoint '{name}'\n{}", endpoint_detail(&v)) })
            }
            EndpointCommand::List(common) => {
                let v = Client::new(&common)?.call(Method::GET, "/api/endpoints", None).await?;
                Ok(if common.json { pretty(&v) } else { endpoint_table(&v) })
            }
            EndpointCommand::Show { name, common } => {
                let v =
                    Client::new(&common)?.call(Method::GET, &format!("/api/endpoints/{}", path(&name)), None).await?;
                Ok(if common.json { pretty(&v) } else { endpoint_detail(&v) })
            }
            EndpointCommand::Edit { name, rename, fields, common } => {
                let mut obj = fields_json(&fields, false)?;
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
                let error = v["test_error"].as_str().map(|e| format!(": {e}")).unwrap_or_default();
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
        Command::Logs(args) => logs(args).await,
        Command::Stats(args) => {
            let q = query_string(&[("since", Some(args.since.as_str())), ("group_by", Some(args.group_by.as_str()))]);
            let v = Client::new(&args.common)?.call(Method::GET, &format!("/api/stats?{q}"), None).await?;
            Ok(if args.common.json { pretty(&v) } else { stats_table(&v) })
        }
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

fn query_string(pairs: &[(&str, Option<&str>)]) -> String {
    pairs.iter().filter_map(|(k, v)| v.map(|v| format!("{k}={}", url_escape(v)))).collect::<Vec<_>>().join("&")
}

fn url_escape(v: &str) -> String {
    v.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b':') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

async fn logs(args: LogsArgs) -> anyhow::Result<String> {
    use reqwest::Method;
    let client = Client::new(&args.common)?;
    if let Some(id) = &args.id {
        let v = client.call(Method::GET, &format!("/api/requests/{}", path(id)), None).await?;
        return Ok(if args.common.json { pretty(&v) } else { record_detail(&v) });
    }
    let (status_class, status) = match args.status.as_deref() {
        Some(s) if s.ends_with("xx") => (Some(s), None),
        Some(s) => (None, Some(s)),
        None => (None, None),
    };
    let limit = args.limit.clamp(1, 500).to_string();
    let q = query_string(&[
        ("limit", Some(limit.as_str())),
        ("endpoint", args.endpoint.as_deref()),
        ("model", args.model.as_deref()),
        ("protocol", args.protocol.as_deref()),
        ("status_class", status_class),
        ("status", status),
        ("failed_over", args.failed_over.then_some("true")),
        ("since", args.since.as_deref()),
        ("q", args.q.as_deref()),
    ]);
    let v = client.call(Method::GET, &format!("/api/requests?{q}"), None).await?;
    let mut rows: Vec<Value> = v["requests"].as_array().cloned().unwrap_or_default();
    rows.reverse(); // oldest first, so the newest line is nearest the prompt
    let out = if args.common.json {
        rows.iter().map(|r| r.to_string()).collect::<Vec<_>>().join("\n")
    } else {
        log_table(&rows)
    };
    if !args.follow {
        return Ok(out);
    }
    {
        use std::io::Write;
        let mut stdout = std::io::stdout().lock();
        if !out.is_empty() {
            let _ = writeln!(stdout, "{out}");
        }
    }
    follow(&client, &args).await
}

/// Print `request` live events as they arrive (filters applied here), until the server goes away.
async fn follow(client: &Client, args: &LogsArgs) -> anyhow::Result<String> {
    use std::io::Write;
    let url = format!("{}/api/events", client.server);
    let mut req = client.http.get(&url).timeout(std::time::Duration::from_secs(365 * 24 * 3600));
    if let Some(t) = client.token.as_deref().filter(|t| !t.is_empty()) {
        req = req.bearer_auth(t);
    }
    let mut resp =
        req.send().await.map_err(|_| anyhow!("cannot reach the gateway at {} to follow its events", client.server))?;
    if !resp.status().is_success() {
        bail!("the gateway answered {} to GET /api/events", resp.status());
    }
    let mut scanner = crate::protocol::sse::SseScanner::new();
    loop {
        let chunk = match resp.chunk().await {
            Ok(Some(c)) => c,
            Ok(None) => return Ok("the gateway closed the event stream".into()),
            Err(e) => {
                bail!("the event stream broke: {}", crate::proxy::classify::classify_network_error(&e).describe())
            }
        };
        let mut lines = Vec::new();
        scanner.feed(&chunk, |event| {
            if event.event != Some("request") {
                return;
            }
            let Ok(v) = serde_json::from_str::<Value>(event.data) else { return };
            if !follow_matches(&v, args) {
                return;
            }
            lines.push(if args.common.json { v.to_string() } else { log_line(&v) });
        });
        let mut stdout = std::io::stdout().lock();
        for line in lines {
            let _ = writeln!(stdout, "{line}");
        }
        let _ = stdout.flush();
    }
}

fn follow_matches(v: &Value, args: &LogsArgs) -> bool {
    let eq = |field: &str, want: &Option<String>| want.as_deref().is_none_or(|w| v[field].as_str() == Some(w));
    let status_ok = match args.status.as_deref() {
        None => true,
        Some(s) if s.ends_with("xx") => {
            v["status"].as_u64().is_some_and(|st| st / 100 == u64::from(s.as_bytes()[0] - b'0'))
        }
        Some(s) => v["status"].as_u64().map(|st| st.to_string()).as_deref() == Some(s),
    };
    eq("endpoint", &args.endpoint)
        && eq("model", &args.model)
        && eq("protocol", &args.protocol)
        && status_ok
        && (!args.failed_over || v["failed_over"] == json!(true))
        && args
            .q
            .as_deref()
            .is_none_or(|q| v["error"].as_str().is_some_and(|e| e.to_lowercase().contains(&q.to_lowercase())))
}

fn ms_cell(v: &Value) -> String {
    v.as_f64()
        .map(|ms| if ms >= 1000.0 { format!("{:.1}s", ms / 1000.0) } else { format!("{ms:.0}ms") })
        .unwrap_or_else(|| "-".into())
}

fn tokens_cell(t: &Value) -> String {
    match (t["input"].as_u64(), t["output"].as_u64()) {
        (None, None) => "-".into(),
        (i, o) => format!(
            "{}/{}",
            i.map(|n| n.to_string()).unwrap_or("?".into()),
            o.map(|n| n.to_string()).unwrap_or("?".into())
        ),
    }
}

fn cost_cell(v: &Value) -> String {
    v.as_f64().map(|c| format!("${c:.4}")).unwrap_or_else(|| "-".into())
}

fn time_cell(ms: &Value) -> String {
    ms.as_u64()
        .map(|ms| crate::timefmt::rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)))
        .map(|t| t.replace('T', " ").trim_end_matches('Z').to_string())
        .unwrap_or_else(|| "-".into())
}

fn log_row(r: &Value) -> Vec<String> {
    let attempts = match &r["attempts"] {
        Value::Array(a) => a.len().to_string(),
        other => cell(other),
    };
    let mut error = r["error"].as_str().map(str::to_string).unwrap_or_else(|| cell(&r["error"]["message"]));
    if error.chars().count() > 60 {
        error = error.chars().take(57).collect::<String>() + "...";
    }
    vec![
        time_cell(&r["started_at_ms"]),
        cell(&r["protocol"]),
        r["model_requested"].as_str().or(r["model"].as_str()).unwrap_or("-").to_string(),
        cell(&r["endpoint"]),
        cell(&r["status"]),
        format!("{attempts}{}", if r["failed_over"] == json!(true) { "↻" } else { "" }),
        ms_cell(&r["total_ms"]),
        tokens_cell(&r["tokens"]),
        cost_cell(&r["cost_usd"]),
        if error == "-" { String::new() } else { error },
    ]
}

const LOG_HEADERS: [&str; 10] =
    ["TIME", "PROTO", "MODEL", "ENDPOINT", "STATUS", "TRIES", "TIME", "TOKENS IN/OUT", "COST", "ERROR"];

fn log_table(rows: &[Value]) -> String {
    if rows.is_empty() {
        return "no requests recorded in this period".into();
    }
    table(&LOG_HEADERS, &rows.iter().map(log_row).collect::<Vec<_>>())
}

fn log_line(v: &Value) -> String {
    log_row(v).into_iter().filter(|c| !c.is_empty()).collect::<Vec<_>>().join("  ")
}

fn record_detail(r: &Value) -> String {
    let mut out = vec![
        format!("request {}  {} {}  {}", cell(&r["id"]), cell(&r["method"]), cell(&r["path"]), cell(&r["started_at"])),
        format!(
            "protocol {}  model {} → sent {} → answered {}  stream {}",
            cell(&r["protocol"]),
            cell(&r["model_requested"]),
            cell(&r["model_sent"]),
            cell(&r["model_answered"]),
            cell(&r["stream"])
        ),
        format!(
            "status {}  total {}  first byte {}  gateway overhead {}  tokens {}  cost {}",
            cell(&r["status"]),
            ms_cell(&r["total_ms"]),
            ms_cell(&r["first_byte_ms"]),
            ms_cell(&r["overhead_ms"]),
            tokens_cell(&r["tokens"]),
            cost_cell(&r["cost_usd"])
        ),
    ];
    if let Some(c) = r["conversion"].as_str() {
        out.push(format!("converted {c}"));
    }
    if let Some(e) = r["error"].as_object() {
        out.push(format!(
            "error ({}): {}",
            e.get("source").and_then(Value::as_str).unwrap_or("-"),
            e.get("message").and_then(Value::as_str).unwrap_or("-")
        ));
    }
    let attempts: Vec<Vec<String>> = r["attempts"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, a)| {
            vec![
                (i + 1).to_string(),
                cell(&a["endpoint"]),
                cell(&a["format"]),
                ms_cell(&a["started_ms"]),
                ms_cell(&a["duration_ms"]),
                a["status"].as_u64().map(|s| s.to_string()).unwrap_or_else(|| cell(&a["error_kind"])),
                cell(&a["classification"]),
                a["breaker"].as_str().unwrap_or("").to_string(),
            ]
        })
        .collect();
    out.push(String::new());
    out.push(table(&["#", "ENDPOINT", "FORMAT", "AT", "TOOK", "RESULT", "OUTCOME", "BREAKER"], &attempts));
    out.join("\n")
}

fn stats_table(v: &Value) -> String {
    let rows: Vec<Vec<String>> = v["groups"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|g| {
            let t = &g["totals"];
            vec![
                g["key"].as_str().unwrap_or("(all)").to_string(),
                cell(&t["requests"]),
                cell(&t["errors"]),
                cell(&t["failovers"]),
                ms_cell(&t["latency_ms"]["p50"]),
                ms_cell(&t["latency_ms"]["p95"]),
                cell(&t["tokens"]["input"]),
                cell(&t["tokens"]["output"]),
                cell(&t["tokens"]["cache_read"]),
                cost_cell(&t["cost_usd"]),
                cell(&t["unpriced"]["requests"]),
            ]
        })
        .collect();
    if rows.is_empty() {
        return format!("no requests between {} and {}", cell(&v["since"]), cell(&v["until"]));
    }
    format!(
        "{} → {}\n{}",
        cell(&v["since"]),
        cell(&v["until"]),
        table(
            &["GROUP", "REQUESTS", "ERRORS", "FAILOVERS", "P50", "P95", "IN", "OUT", "CACHE READ", "COST", "UNPRICED"],
            &rows
        )
    )
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

/// Endpoint names are restricted to URL-safe characters, but be safe anyway.
pub(crate) fn path(name: &str) -> String {
    name.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

pub(crate) fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        Value::Array(items) if items.is_empty() => "*".into(),
        Value::Array(items) => items.iter().map(cell).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// Left-aligned columns sized to their widest cell.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, c) in row.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut out = vec![line(headers.iter().map(|h| h.to_string()).collect())];
    out.extend(rows.iter().map(|r| line(r.clone())));
    out.join("\n")
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
                cell(&e["models"]),
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

fn endpoint_detail(e: &Value) -> String {
    let fields = [
        "name",
        "format",
        "base_url",
        "api_key",
        "models",
        "model_map",
        "enabled",
        "fast",
        "fast_sort_order",
        "sort_order",
        "headers",
        "test_model",
        "test_status",
        "test_at",
        "test_latency_ms",
        "test_error",
    ];
    let rows: Vec<Vec<String>> = fields.iter().map(|f| vec![format!("{f}:"), cell(&e[*f])]).collect();
    table(&["", ""], &rows).trim_start().to_string()
}

fn health_table(v: &Value) -> String {
    let rows: Vec<Vec<String>> = v
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|h| {
            let circuit = match (h["circuit"].as_str(), h["open_reason"].as_str()) {
                (Some(c), Some(r)) => format!("{c} ({r})"),
                (Some(c), None) => c.to_string(),
                _ => "-".into(),
            };
            let cooldown = h["cooldown_remaining_ms"]
                .as_u64()
                .filter(|ms| *ms > 0)
                .map(|ms| format!("{:.1}s", ms as f64 / 1000.0));
            let rate = h["success_rate"].as_f64().map(|r| format!("{:.0}%", r * 100.0));
            vec![
                cell(&h["name"]),
                cell(&h["status"]),
                circuit,
                cell(&h["consecutive_failures"]),
                rate.unwrap_or_else(|| "-".into()),
                cell(&h["requests"]),
                cooldown.unwrap_or_else(|| "-".into()),
                cell(&h["last_error"]),
                cell(&h["source"]),
            ]
        })
        .collect();
    if rows.is_empty() {
        return "no endpoints yet".into();
    }
    table(&["NAME", "STATUS", "CIRCUIT", "FAILS", "SUCCESS", "REQUESTS", "COOLDOWN", "LAST ERROR", "SOURCE"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns() {
        let t = table(&["A", "LONGER"], &[vec!["xxxx".into(), "y".into()], vec!["z".into(), "".into()]]);
        assert_eq!(t, "A     LONGER\nxxxx  y\nz");
    }

    #[test]
    fn key_values_parse() {
        let m = key_value_map(&["a=b".into(), "c = d=e".into()], "map").unwrap();
        assert_eq!(m["a"], "b");
        assert_eq!(m["c"], "d=e");
        assert!(key_value_map(&["nope".into()], "map").is_err());
    }
}
