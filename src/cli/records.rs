//! `ccmesh logs` and `ccmesh stats`: request records and statistics from the admin API.
//!
//! Records print oldest first, so the newest line is nearest the prompt (as `tail` does) and
//! `-f` continues the list downwards. With `-f` the columns have fixed widths and the header is
//! printed once, at the top, whether or not there is history to show, so live lines stay under
//! their headings.

use anyhow::bail;
use clap::Args;
use serde_json::{Value, json};

use super::api::{Client, Common};
use super::output::{cell, path, pretty, table};

#[derive(Args, Debug)]
pub struct LogsArgs {
    /// Show one request's full record and decision trail.
    #[arg(long)]
    pub id: Option<String>,
    /// How many recent requests to show (the newest N, printed oldest first).
    #[arg(short = 'n', long, default_value_t = 20)]
    pub limit: u32,
    /// Keep running and print requests as they complete.
    #[arg(short, long)]
    pub follow: bool,
    #[arg(long)]
    pub endpoint: Option<String>,
    #[arg(long)]
    pub model: Option<String>,
    /// claude | openai | responses | gemini
    #[arg(long)]
    pub protocol: Option<String>,
    /// A status class (2xx, 4xx, 5xx) or an exact status (429).
    #[arg(long)]
    pub status: Option<String>,
    /// Only requests that failed over.
    #[arg(long)]
    pub failed_over: bool,
    /// Only the requests of this client key (its name).
    #[arg(long = "key")]
    pub client_key: Option<String>,
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
    /// Group by endpoint, model, protocol or key (the client key).
    #[arg(long = "by", default_value = "endpoint")]
    pub group_by: String,
    #[command(flatten)]
    pub common: Common,
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

pub async fn logs(args: LogsArgs) -> anyhow::Result<String> {
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
        ("key", args.client_key.as_deref()),
        ("since", args.since.as_deref()),
        ("q", args.q.as_deref()),
    ]);
    // Following: subscribe first, so nothing that completes while the history is read is lost;
    // a request in both is printed once.
    let events = if args.follow { Some(subscribe(&client).await?) } else { None };
    let v = client.call(Method::GET, &format!("/api/requests?{q}"), None).await?;
    let mut rows: Vec<Value> = v["requests"].as_array().cloned().unwrap_or_default();
    rows.reverse(); // oldest first, so the newest line is nearest the prompt
    let Some(events) = events else {
        return Ok(if args.common.json {
            rows.iter().map(|r| r.to_string()).collect::<Vec<_>>().join("\n")
        } else {
            log_table(&rows)
        });
    };
    let shown: Vec<String> = rows.iter().filter_map(|r| r["id"].as_str().map(str::to_string)).collect();
    if args.common.json {
        print_lines(rows.iter().map(|r| r.to_string()));
    } else {
        print_lines(std::iter::once(follow_header()).chain(rows.iter().map(|r| follow_line(log_row(r)))));
    }
    follow(&client, events, &args, shown).await
}

/// The live event stream, open.
async fn subscribe(client: &Client) -> anyhow::Result<reqwest::Response> {
    let url = format!("{}/api/events", client.server);
    let mut req = client.http.get(&url).timeout(std::time::Duration::from_secs(365 * 24 * 3600));
    if let Some(t) = client.token.as_deref().filter(|t| !t.is_empty()) {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.map_err(|e| client.unreachable(&e))?;
    if !resp.status().is_success() {
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        bail!(
            "the gateway refused to stream its events ({status}): {}",
            super::api::cli_hint(&super::api::api_message(&body))
        );
    }
    Ok(resp)
}

/// Print `request` live events as they arrive (filters applied here, and those already shown
/// skipped), until the server goes away.
async fn follow(
    client: &Client,
    mut resp: reqwest::Response,
    args: &LogsArgs,
    shown: Vec<String>,
) -> anyhow::Result<String> {
    let mut scanner = crate::protocol::sse::SseScanner::new();
    loop {
        let chunk = match resp.chunk().await {
            Ok(Some(c)) => c,
            Ok(None) => return Ok("the gateway closed the event stream".into()),
            Err(e) => bail!("the event stream broke: {}", super::api::why_unreachable(&e, &client.server)),
        };
        let mut lines = Vec::new();
        scanner.feed(&chunk, |event| {
            if event.event != Some("request") {
                return;
            }
            let Ok(v) = serde_json::from_str::<Value>(event.data) else { return };
            if !follow_matches(&v, args) || v["id"].as_str().is_some_and(|id| shown.iter().any(|s| s == id)) {
                return;
            }
            lines.push(if args.common.json { v.to_string() } else { follow_line(log_row(&v)) });
        });
        print_lines(lines.into_iter());
    }
}

fn print_lines(lines: impl Iterator<Item = String>) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    for line in lines {
        let _ = writeln!(stdout, "{line}");
    }
    let _ = stdout.flush();
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
        && eq("client_key", &args.client_key)
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

/// When the request started, and how long it took: two times, two names.
const LOG_HEADERS: [&str; 10] =
    ["STARTED", "PROTO", "MODEL", "ENDPOINT", "STATUS", "TRIES", "TOOK", "TOKENS IN/OUT", "COST", "ERROR"];

/// Column widths of `logs -f` (the error, last, takes what it needs).
const FOLLOW_WIDTHS: [usize; 9] = [19, 9, 28, 16, 6, 5, 7, 13, 9];

fn log_table(rows: &[Value]) -> String {
    if rows.is_empty() {
        return "no requests recorded in this period".into();
    }
    table(&LOG_HEADERS, &rows.iter().map(log_row).collect::<Vec<_>>())
}

/// One `logs -f` line: fixed widths, a cell too long for its column cut with `…`.
fn follow_line(cells: Vec<String>) -> String {
    let mut out = String::new();
    for (i, c) in cells.into_iter().enumerate() {
        match FOLLOW_WIDTHS.get(i) {
            Some(&w) => {
                let shown: String = if c.chars().count() > w {
                    c.chars().take(w - 1).chain(std::iter::once('…')).collect()
                } else {
                    c
                };
                out.push_str(&format!("{shown:<w$}  "));
            }
            None => out.push_str(&c),
        }
    }
    out.trim_end().to_string()
}

fn follow_header() -> String {
    follow_line(LOG_HEADERS.iter().map(|h| h.to_string()).collect())
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

/// `ccmesh stats`.
pub async fn stats(args: StatsArgs) -> anyhow::Result<String> {
    let q = query_string(&[("since", Some(args.since.as_str())), ("group_by", Some(args.group_by.as_str()))]);
    let v = Client::new(&args.common)?.call(reqwest::Method::GET, &format!("/api/stats?{q}"), None).await?;
    Ok(if args.common.json { pretty(&v) } else { stats_table(&v, &args.group_by) })
}

/// The row of a group without a key: requests that never reached an endpoint (refused before
/// any attempt), that named no model, …
fn unkeyed(group_by: &str) -> &'static str {
    match group_by {
        "endpoint" => "(no endpoint reached)",
        "model" => "(no model named)",
        "key" => "(no client key)",
        _ => "(none)",
    }
}

fn stats_row(key: String, t: &Value) -> Vec<String> {
    vec![
        key,
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
}

fn stats_table(v: &Value, group_by: &str) -> String {
    let groups = v["groups"].as_array().map(|a| a.as_slice()).unwrap_or_default();
    if groups.is_empty() {
        return format!("no requests between {} and {}", cell(&v["since"]), cell(&v["until"]));
    }
    let mut rows: Vec<Vec<String>> = groups
        .iter()
        .map(|g| {
            stats_row(
                g["key"].as_str().map(str::to_string).unwrap_or_else(|| unkeyed(group_by).to_string()),
                &g["totals"],
            )
        })
        .collect();
    rows.push(stats_row("TOTAL".into(), &v["totals"]));
    format!(
        "{} → {}\n{}",
        cell(&v["since"]),
        cell(&v["until"]),
        table(
            &[
                &group_by.to_uppercase(),
                "REQUESTS",
                "ERRORS",
                "FAILOVERS",
                "P50",
                "P95",
                "IN",
                "OUT",
                "CACHE READ",
                "COST",
                "UNPRICED"
            ],
            &rows
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follow_lines_keep_their_columns() {
        let header = follow_header();
        let line = follow_line(vec![
            "2026-11-29 10:00:00".into(),
            "claude".into(),
            "a-model-name-much-longer-than-its-column".into(),
            "anthropic".into(),
            "200".into(),
            "1".into(),
            "812ms".into(),
            "12/8".into(),
            "$0.0001".into(),
            String::new(),
        ]);
        let column = |s: &str, what: &str| s.find(what).map(|at| s[..at].chars().count());
        assert_eq!(column(&header, "ENDPOINT"), column(&line, "anthropic"), "{header}\n{line}");
        assert_eq!(column(&header, "TOOK"), column(&line, "812ms"));
        assert!(line.contains("a-model-name-much-longer-th… "), "{line}");
        assert_eq!(LOG_HEADERS.iter().filter(|h| **h == "TIME").count(), 0);
    }

    #[test]
    fn stats_say_what_the_keyless_row_is_and_add_a_total() {
        let v = json!({"since": "a", "until": "b", "totals": {"requests": 5},
            "groups": [{"key": "kimi", "totals": {"requests": 3}}, {"key": null, "totals": {"requests": 2}}]});
        let t = stats_table(&v, "endpoint");
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[1].starts_with("ENDPOINT"), "{t}");
        assert!(lines[3].starts_with("(no endpoint reached)") && lines[3].contains(" 2 "), "{t}");
        assert!(lines[4].starts_with("TOTAL") && lines[4].contains(" 5 "), "{t}");
        assert!(!t.contains("(all)"));
    }
}
