//! The settings page's form, rendered on the server from one table of fields: label, valid
//! range and seed default next to every input (SPEC §5–6). The ranges here are what
//! `config::settings` enforces; a test walks every boundary through `Settings::patched`, so the
//! page can never advertise a range the API would reject.

use serde_json::Value;

use super::html::escape;
use crate::config::settings::defaults_document;

pub const PROTOCOLS: [&str; 4] = ["claude", "openai", "responses", "gemini"];

#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// A whole number.
    Int,
    /// Any number; `step` is what the arrows move by.
    Num { step: f64 },
}

#[derive(Clone, Copy, Debug)]
pub struct NumField {
    pub key: &'static str,
    pub label: &'static str,
    pub help: &'static str,
    pub min: f64,
    pub max: f64,
    pub kind: Kind,
}

const fn int(key: &'static str, label: &'static str, help: &'static str, min: f64, max: f64) -> NumField {
    NumField { key, label, help, min, max, kind: Kind::Int }
}

const fn num(key: &'static str, label: &'static str, help: &'static str, min: f64, max: f64, step: f64) -> NumField {
    NumField { key, label, help, min, max, kind: Kind::Num { step } }
}

/// `breaker.<protocol>.<key>`.
pub const BREAKER: &[NumField] = &[
    int(
        "failure_threshold",
        "Failures in a row that open it",
        "consecutive failures; a success resets the count",
        1.0,
        20.0,
    ),
    int("success_threshold", "Successful probes that close it", "half-open probes in a row", 1.0, 10.0),
    num("timeout_secs", "Cooldown when broken (s)", "Open(Broken) lasts this long before a probe", 0.0, 300.0, 1.0),
    num("error_rate_threshold", "Error rate that opens it", "0–1, over the sliding window", 0.0, 1.0, 0.05),
    int("min_requests", "Outcomes before the rate counts", "the window must hold at least this many", 1.0, 100.0),
    num("error_rate_window_secs", "Error-rate window (s)", "sliding window length", 1.0, 3600.0, 1.0),
    num("rate_limit_timeout_secs", "Rate-limited cooldown (s)", "when a 429 carries no Retry-After", 0.0, 300.0, 1.0),
    num("max_rate_limit_timeout_secs", "Longest Retry-After honoured (s)", "caps any Retry-After", 0.0, 300.0, 1.0),
];

/// `timeouts.<protocol>.<key>`.
pub const TIMEOUTS: &[NumField] = &[
    num("first_byte_timeout_secs", "First byte (s)", "streaming: until the upstream's first bytes", 0.1, 600.0, 1.0),
    num(
        "idle_timeout_secs",
        "Idle stream (s)",
        "longest silence between chunks; 0 = off, else ≥ 0.1",
        0.0,
        3600.0,
        1.0,
    ),
    num(
        "first_token_timeout_secs",
        "First token (s)",
        "streaming: until the first content event, the preamble aside; empty = the first-byte timeout",
        0.1,
        600.0,
        1.0,
    ),
    num("request_timeout_secs", "Whole request (s)", "non-streaming: the whole response", 0.1, 3600.0, 1.0),
    num(
        "total_timeout_secs",
        "Total deadline (s)",
        "one request across every attempt and wait, until its answer starts",
        1.0,
        3600.0,
        1.0,
    ),
    num(
        "max_stream_duration_secs",
        "Longest stream (s)",
        "a relayed stream ends after this long; 0 = no cap, else ≥ 1",
        0.0,
        86_400.0,
        1.0,
    ),
];

/// `limits.<key>`: what one client may hold of the gateway.
pub const LIMITS: &[NumField] = &[
    num(
        "header_read_timeout_secs",
        "Request head (s)",
        "a client must send its request head within this",
        0.1,
        3600.0,
        1.0,
    ),
    num(
        "body_read_timeout_secs",
        "Pause in a body (s)",
        "longest pause inside a request body (408 past it)",
        0.1,
        3600.0,
        1.0,
    ),
    num(
        "keepalive_timeout_secs",
        "Idle connection (s)",
        "a kept-alive connection waits this long for its next request",
        0.1,
        3600.0,
        1.0,
    ),
    int(
        "max_connections",
        "Client connections",
        "past it only /health and /api/status answer; the rest get 503",
        1.0,
        1_000_000.0,
    ),
    int(
        "max_upstream_body_bytes",
        "Largest upstream answer (bytes)",
        "a longer answer fails that endpoint",
        1024.0,
        4_294_967_296.0,
    ),
    int(
        "max_sse_event_bytes",
        "Largest stream event (bytes)",
        "a longer event fails the stream as malformed",
        1024.0,
        1_073_741_824.0,
    ),
];

/// Top-level numbers.
pub const GENERAL: &[NumField] = &[
    num(
        "rate_limit_backoff_budget_secs",
        "Rate-limit backoff budget (s)",
        "how long a request may wait in the gateway when every candidate is rate-limited, before a 429",
        0.0,
        60.0,
        1.0,
    ),
    int(
        "transient_retry_delay_ms",
        "Same-endpoint retry delay (ms)",
        "pause before retrying an endpoint after a network error",
        0.0,
        10_000.0,
    ),
    int(
        "stream_resume_attempts",
        "Stream resume attempts",
        "attempts a request may spend continuing a cut stream elsewhere; 0 = never",
        0.0,
        5.0,
    ),
    int("retention_days", "Keep request records (days)", "older records are pruned in the background", 1.0, 3650.0),
    int(
        "max_body_bytes",
        "Largest request body (bytes)",
        "bigger requests are refused with 413",
        1024.0,
        1_073_741_824.0,
    ),
];

/// `default_price.<key>`, USD per million tokens; both empty = no default price.
pub const DEFAULT_PRICE: &[NumField] = &[
    num("input", "Default input price", "USD per million input tokens of a model without a price", 0.0, 10_000.0, 0.1),
    num(
        "output",
        "Default output price",
        "USD per million output tokens of a model without a price",
        0.0,
        10_000.0,
        0.1,
    ),
];

fn fmt_num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 { format!("{}", v as i64) } else { format!("{v}") }
}

fn value_str(v: Option<&Value>) -> String {
    match v {
        Some(Value::Number(n)) => n.as_f64().map(fmt_num).unwrap_or_default(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::String(s)) => s.clone(),
        _ => String::new(),
    }
}

fn at<'a>(doc: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(doc, |cur, part| cur.get(part))
}

fn input(f: &NumField, path: &str, current: &Value, defaults: &Value, label: &str) -> String {
    let step = match f.kind {
        Kind::Int => "1".to_string(),
        Kind::Num { step } => fmt_num(step),
    };
    // `step` also constrains what a browser accepts as valid; fractional seconds are fine.
    let step_attr = match f.kind {
        Kind::Int => "step=\"1\"".to_string(),
        Kind::Num { .. } => "step=\"any\"".to_string(),
    };
    let default = value_str(at(defaults, path));
    format!(
        "<input type=\"number\" name=\"{path}\" id=\"f-{path}\" inputmode=\"decimal\" {step_attr} data-step=\"{step}\" \
         min=\"{min}\" max=\"{max}\" value=\"{value}\" data-default=\"{default}\" aria-label=\"{label}\" \
         aria-describedby=\"e-{path}\">\
         <small class=\"default\">default {default}</small>\
         <small class=\"field-error\" id=\"e-{path}\" data-error-for=\"{path}\" role=\"alert\"></small>",
        min = fmt_num(f.min),
        max = fmt_num(f.max),
        value = escape(&value_str(at(current, path))),
        label = escape(label),
    )
}

/// A checkbox field for a boolean setting at `path`.
fn checkbox(path: &str, label: &str, help: &str, current: &Value, defaults: &Value) -> String {
    let default = at(defaults, path).and_then(Value::as_bool).unwrap_or(false);
    let on = at(current, path).and_then(Value::as_bool).unwrap_or(default);
    let help = if help.is_empty() { String::new() } else { format!("<small class=\"help\">{}</small>", escape(help)) };
    format!(
        "<div class=\"field check\"><label><input type=\"checkbox\" name=\"{path}\" id=\"f-{path}\" data-default=\"{default}\"{checked}> {label}</label>\
         <small class=\"default\">default {default_word}</small>\
         <small class=\"field-error\" data-error-for=\"{path}\" role=\"alert\"></small>{help}</div>",
        checked = if on { " checked" } else { "" },
        label = escape(label),
        default_word = if default { "on" } else { "off" },
    )
}

fn range(f: &NumField) -> String {
    format!("{}–{}", fmt_num(f.min), fmt_num(f.max))
}

fn per_protocol_table(section: &str, caption: &str, fields: &[NumField], current: &Value, defaults: &Value) -> String {
    let mut out = format!(
        "<div class=\"table-wrap\"><table class=\"settings-grid\"><caption>{caption}</caption><thead><tr>\
         <th scope=\"col\">setting</th>"
    );
    for p in PROTOCOLS {
        out.push_str(&format!("<th scope=\"col\">{p}</th>"));
    }
    out.push_str("<th scope=\"col\">valid range</th></tr></thead><tbody>");
    for f in fields {
        out.push_str(&format!(
            "<tr><th scope=\"row\">{}<small class=\"help\">{}</small></th>",
            escape(f.label),
            escape(f.help)
        ));
        for p in PROTOCOLS {
            let path = format!("{section}.{p}.{}", f.key);
            let label = format!("{} ({p})", f.label);
            out.push_str(&format!("<td>{}</td>", input(f, &path, current, defaults, &label)));
        }
        out.push_str(&format!("<td class=\"range\">{}</td></tr>", range(f)));
    }
    out.push_str("</tbody></table></div>");
    out
}

/// The whole form, filled with the current settings.
pub fn render(current: &Value) -> String {
    let defaults = defaults_document();
    let mut out = String::from("<form id=\"settings-form\" class=\"panel\" novalidate>");
    out.push_str("<h2>Circuit breaker, per inbound protocol</h2><p class=\"muted\">The numbers of the inbound protocol of the request whose outcome is recorded apply. Changes apply to the next request without a restart and without resetting any breaker.</p>");
    out.push_str(&per_protocol_table("breaker", "Breaker thresholds and cooldowns", BREAKER, current, &defaults));
    out.push_str("<h2>Timeouts, per inbound protocol</h2>");
    out.push_str(&per_protocol_table("timeouts", "Upstream timeouts", TIMEOUTS, current, &defaults));
    out.push_str("<h2>Failover</h2><p class=\"muted\">Off for a protocol: a request goes only to the endpoint the routing strategy starts at (no breaker filter); its failures still count in health and the breaker, but nothing is sent to another endpoint, stream resume included.</p><div class=\"fields\">");
    for p in PROTOCOLS {
        out.push_str(&checkbox(&format!("failover_enabled.{p}"), &format!("Fail over ({p})"), "", current, &defaults));
    }
    out.push_str(&checkbox(
        "stream_resume",
        "Resume cut streams (stream_resume)",
        "a stream that breaks after text reached the client is continued on the next candidate, in the same stream",
        current,
        &defaults,
    ));
    out.push_str(&checkbox(
        "context_window_fallback",
        "Try the next endpoint when the prompt is too long (context_window_fallback)",
        "a 400 saying the prompt exceeds the model's context window is neutral and moves on",
        current,
        &defaults,
    ));
    let rules = serde_json::to_string_pretty(current.get("retry_rules").unwrap_or(&Value::Array(Vec::new())))
        .unwrap_or_else(|_| "[]".into());
    out.push_str(&format!(
        "<div class=\"field wide\"><label for=\"f-retry_rules\">Retry rules (retry_rules)</label>\
         <textarea name=\"retry_rules\" id=\"f-retry_rules\" class=\"mono\" rows=\"6\" spellcheck=\"false\" data-json=\"true\" data-default=\"[]\" aria-describedby=\"e-retry_rules\">{}</textarea>\
         <small class=\"default\">default []</small>\
         <small class=\"field-error\" id=\"e-retry_rules\" data-error-for=\"retry_rules\" role=\"alert\"></small>\
         <small class=\"help\">an ordered JSON list, evaluated before the built-in table; the first match decides: \
         {{\"status\": 500 or \"500-599\", \"body\": \"text\" or {{\"regex\": \"…\"}} (optional), \"action\": \"next\" | \"same\" | \"return\", \"breaker\": \"failure\" | \"neutral\"}} · at most 32</small></div>",
        escape(&rules)
    ));
    out.push_str("</div><h2>Limits</h2><p class=\"muted\">What one client may hold of the gateway; new values apply to new connections.</p><div class=\"fields\">");
    for f in LIMITS {
        let path = format!("limits.{}", f.key);
        out.push_str(&format!(
            "<div class=\"field\"><label for=\"f-{path}\">{label}</label>{input}<small class=\"help\">{help} · valid {range}</small></div>",
            label = escape(f.label),
            input = input(f, &path, current, &defaults, f.label),
            help = escape(f.help),
            range = range(f),
        ));
    }
    out.push_str("</div>");
    out.push_str("<h2>Routing and records</h2><div class=\"fields\">");
    for f in GENERAL {
        out.push_str(&format!(
            "<div class=\"field\"><label for=\"f-{key}\">{label}</label>{input}<small class=\"help\">{help} · valid {range}</small></div>",
            key = f.key,
            label = escape(f.label),
            input = input(f, f.key, current, &defaults, f.label),
            help = escape(f.help),
            range = range(f),
        ));
    }
    let strategy = value_str(current.get("routing_strategy"));
    let options: String = ["sticky", "priority", "round_robin"]
        .iter()
        .map(|s| format!("<option value=\"{s}\"{}>{s}</option>", if *s == strategy { " selected" } else { "" }))
        .collect();
    out.push_str(&format!(
        "<div class=\"field\"><label for=\"f-routing_strategy\">Where a request starts</label>\
         <select name=\"routing_strategy\" id=\"f-routing_strategy\" data-default=\"sticky\">{options}</select>\
         <small class=\"default\">default sticky</small>\
         <small class=\"field-error\" data-error-for=\"routing_strategy\" role=\"alert\"></small>\
         <small class=\"help\">sticky: stay on the current endpoint · priority: always the first candidate · round_robin: rotate</small></div>"
    ));
    out.push_str(&checkbox(
        "auth_errors_fail_over",
        "Fail over on 401 (auth_errors_fail_over)",
        "off: an upstream 401 goes back to the client and the breaker sees nothing; on: it counts as a failure and the next endpoint is tried",
        current,
        &defaults,
    ));
    out.push_str("</div><h2>Client keys</h2><p class=\"muted\">Keys themselves are on the <a href=\"/keys\">Keys</a> page. Once one exists every proxy request needs a key; this makes that so before the first one exists. A key with a dollar budget may use only priced models, unless a default price is set (records then cost unpriced models at it too).</p><div class=\"fields\">");
    let required = current.get("require_client_key").and_then(Value::as_bool).unwrap_or(false);
    out.push_str(&format!(
        "<div class=\"field check\"><label><input type=\"checkbox\" name=\"require_client_key\" id=\"f-require_client_key\" data-default=\"false\"{}> \
         Require a client key (require_client_key)</label>\
         <small class=\"default\">default off</small>\
         <small class=\"field-error\" data-error-for=\"require_client_key\" role=\"alert\"></small>\
         <small class=\"help\">on: a proxy request without a valid client key is refused (401) even while no key exists</small></div>",
        if required { " checked" } else { "" }
    ));
    for f in DEFAULT_PRICE {
        let path = format!("default_price.{}", f.key);
        out.push_str(&format!(
            "<div class=\"field\"><label for=\"f-{path}\">{label}</label>{input}<small class=\"help\">{help} · valid {range}; empty = none</small></div>",
            label = escape(f.label),
            input = input(f, &path, current, &defaults, f.label),
            help = escape(f.help),
            range = range(f),
        ));
    }
    out.push_str("</div><div class=\"form-actions\"><button type=\"submit\" class=\"primary\" id=\"settings-save\">Save settings</button>\
        <button type=\"button\" id=\"settings-defaults\">Fill in the defaults</button>\
        <span class=\"status\" id=\"settings-status\" role=\"status\" aria-live=\"polite\"></span></div></form>");
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::config::Settings;

    fn patch_for(path: &str, v: Value) -> Value {
        let mut out = v;
        for part in path.split('.').rev() {
            out = json!({ part: out });
        }
        out
    }

    fn accepts(path: &str, v: f64, int: bool) -> bool {
        let value = if int { json!(v as u64) } else { json!(v) };
        // A default price needs both of its required fields.
        if let Some(key) = path.strip_prefix("default_price.") {
            let mut price = json!({"input": 1, "output": 1});
            price[key] = value;
            return Settings::default().patched(&json!({"default_price": price})).is_ok();
        }
        Settings::default().patched(&patch_for(path, value)).is_ok()
    }

    /// Every range the page shows is exactly the range the API enforces.
    #[test]
    fn ranges_match_the_validator() {
        let mut paths: Vec<(String, NumField)> = Vec::new();
        for (section, fields) in [("breaker", BREAKER), ("timeouts", TIMEOUTS)] {
            for p in PROTOCOLS {
                for f in fields {
                    paths.push((format!("{section}.{p}.{}", f.key), *f));
                }
            }
        }
        paths.extend(GENERAL.iter().map(|f| (f.key.to_string(), *f)));
        paths.extend(LIMITS.iter().map(|f| (format!("limits.{}", f.key), *f)));
        paths.extend(DEFAULT_PRICE.iter().map(|f| (format!("default_price.{}", f.key), *f)));
        let defaults = defaults_document();
        for (path, f) in paths {
            let int = matches!(f.kind, Kind::Int);
            let section = path.split('.').next().unwrap_or_default();
            assert!(at(&defaults, &path).is_some() || at(&defaults, section).is_some(), "{path} is not a settings key");
            assert!(accepts(&path, f.max, int), "{path}: max {} refused", f.max);
            let above = if int { f.max + 1.0 } else { f.max + 0.01 };
            assert!(!accepts(&path, above, int), "{path}: {above} accepted");
            if f.key == "idle_timeout_secs" {
                assert!(accepts(&path, 0.0, false) && accepts(&path, 0.1, false) && !accepts(&path, 0.05, false));
                continue;
            }
            assert!(accepts(&path, f.min, int), "{path}: min {} refused", f.min);
            if f.min > 0.0 {
                let below = if int { f.min - 1.0 } else { f.min - 0.01 };
                assert!(!accepts(&path, below, int), "{path}: {below} accepted");
            }
            if int {
                assert!(Settings::default().patched(&patch_for(&path, json!(f.min + 0.5))).is_err(), "{path}");
            }
        }
    }

    #[test]
    fn the_form_shows_current_values_and_defaults() {
        let current = Settings::default()
            .patched(&json!({"breaker": {"openai": {"failure_threshold": 6}}, "auth_errors_fail_over": true}))
            .unwrap()
            .to_document();
        let html = render(&current);
        assert!(html.contains("name=\"breaker.openai.failure_threshold\""));
        assert!(html.contains("value=\"6\" data-default=\"4\""), "current 6, default 4");
        assert!(html.contains("name=\"breaker.claude.failure_threshold\" id=\"f-breaker.claude.failure_threshold\""));
        assert!(html.contains("<small class=\"default\">default 8</small>"));
        assert!(html.contains("id=\"f-auth_errors_fail_over\" data-default=\"false\" checked"));
        assert!(html.contains("name=\"retention_days\""));
        assert!(html.contains("1–3650"));
        assert!(html.contains(
            "name=\"failover_enabled.claude\" id=\"f-failover_enabled.claude\" data-default=\"true\" checked"
        ));
        assert!(html.contains("name=\"limits.max_connections\""));
        assert!(html.contains("name=\"timeouts.openai.total_timeout_secs\""));
        assert!(html.contains("name=\"timeouts.claude.first_token_timeout_secs\""));
        assert!(html.contains("id=\"f-stream_resume\" data-default=\"true\" checked"));
        assert!(html.contains("id=\"f-context_window_fallback\" data-default=\"true\" checked"));
        assert!(html.contains("name=\"stream_resume_attempts\""));
        assert!(html.contains("name=\"require_client_key\""));
        assert!(html.contains("name=\"default_price.output\""));
    }

    #[test]
    fn the_retry_rules_are_shown_as_json_to_edit() {
        let rules =
            json!([{"status": "500-599", "body": {"regex": "quota.*<b>"}, "action": "next", "breaker": "neutral"}]);
        let current = Settings::default().patched(&json!({"retry_rules": rules})).unwrap().to_document();
        let html = render(&current);
        let start = html.find("<textarea name=\"retry_rules\"").unwrap();
        let shown = &html[start..html[start..].find("</textarea>").unwrap() + start];
        // Escaped for HTML, and the same rules once unescaped.
        assert!(shown.contains("quota.*&lt;b&gt;"), "{shown}");
        let text =
            shown[shown.find('>').unwrap() + 1..].replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"");
        let parsed: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed, current["retry_rules"]);
    }
}
