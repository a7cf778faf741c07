//! The settings document of `GET|PATCH /api/settings` and its typed, validated form.
//!
//! The JSON document is the source of truth for shape and names (SPEC §10). A PATCH is
//! deep-merged into the current document, checked key by key against the defaults (so an
//! unknown key is named in the error), then every field is range-checked into `Settings`.

use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::protocol::Protocol;

/// Breaker thresholds of one inbound protocol (SPEC §5).
#[derive(Clone, Debug, PartialEq)]
pub struct BreakerSettings {
    /// Consecutive failures that open the breaker.
    pub failure_threshold: u32,
    /// Successful half-open probes that close it.
    pub success_threshold: u32,
    /// Open(Broken) cooldown.
    pub timeout: Duration,
    /// Error rate (0..=1) in the sliding window that opens the breaker.
    pub error_rate_threshold: f64,
    /// Outcomes the window must hold before the error rate counts.
    pub min_requests: u32,
    /// Length of the sliding error-rate window.
    pub error_rate_window: Duration,
    /// Open(RateLimited) cooldown when the upstream sent no `Retry-After`.
    pub rate_limit_timeout: Duration,
    /// Cap on any `Retry-After`, against hostile or broken upstreams.
    pub max_rate_limit_timeout: Duration,
}

impl BreakerSettings {
    pub fn claude_defaults() -> Self {
        Self {
            failure_threshold: 8,
            success_threshold: 3,
            timeout: Duration::from_secs(90),
            error_rate_threshold: 0.7,
            min_requests: 15,
            error_rate_window: Duration::from_secs(60),
            rate_limit_timeout: Duration::from_secs(5),
            max_rate_limit_timeout: Duration::from_secs(60),
        }
    }

    pub fn openai_defaults() -> Self {
        Self {
            failure_threshold: 4,
            success_threshold: 2,
            timeout: Duration::from_secs(60),
            error_rate_threshold: 0.6,
            min_requests: 10,
            error_rate_window: Duration::from_secs(60),
            rate_limit_timeout: Duration::from_secs(5),
            max_rate_limit_timeout: Duration::from_secs(60),
        }
    }
}

/// Timeouts of one inbound protocol (SPEC §6).
#[derive(Clone, Debug, PartialEq)]
pub struct Timeouts {
    /// Streaming: from send until the upstream's first body bytes.
    pub first_byte: Duration,
    /// Streaming: from send until the first content event (the preamble does not count);
    /// `None` = the same as `first_byte`.
    pub first_token: Option<Duration>,
    /// Streaming: longest silence between chunks; `None` = disabled.
    pub idle: Option<Duration>,
    /// Non-streaming: the whole response.
    pub request: Duration,
    /// One request from arrival until its answer starts reaching the client, across every
    /// attempt and backoff (SPEC §15.1).
    pub total: Duration,
    /// The longest a relayed stream may last; `None` = no cap.
    pub max_stream_duration: Option<Duration>,
}

impl Timeouts {
    /// The first-token deadline in force (SPEC §6: by default the first-byte one).
    pub fn first_token(&self) -> Duration {
        self.first_token.unwrap_or(self.first_byte)
    }

    pub fn claude_defaults() -> Self {
        Self {
            first_byte: Duration::from_secs(90),
            first_token: None,
            idle: Some(Duration::from_secs(180)),
            request: Duration::from_secs(600),
            total: Duration::from_secs(600),
            max_stream_duration: None,
        }
    }
    pub fn openai_defaults() -> Self {
        Self {
            first_byte: Duration::from_secs(60),
            first_token: None,
            idle: Some(Duration::from_secs(120)),
            request: Duration::from_secs(600),
            total: Duration::from_secs(600),
            max_stream_duration: None,
        }
    }
}

/// What one client may hold of the gateway (connections, time, memory), so that slow, idle or
/// hostile peers on either side cannot exhaust it. The defaults are those of the proxies that
/// face the internet (nginx, Envoy): generous for real clients, finite for everyone.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// From a connection's first byte of a request (or its opening) until the request's headers
    /// are complete.
    pub header_read_timeout: Duration,
    /// The longest pause between two pieces of a request body.
    pub body_read_timeout: Duration,
    /// How long a kept-alive connection may wait for its next request.
    pub keepalive_timeout: Duration,
    /// Client connections open at once; past it the gateway answers 503 (SPEC §15.8).
    pub max_connections: usize,
    /// The largest upstream body the gateway reads in full (non-streaming answers, errors).
    pub max_upstream_body_bytes: u64,
    /// The largest single SSE event of an upstream stream.
    pub max_sse_event_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(75),
            max_connections: 4096,
            max_upstream_body_bytes: 64 * 1024 * 1024,
            max_sse_event_bytes: 16 * 1024 * 1024,
        }
    }
}

/// Where a request starts among its candidates (SPEC §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoutingStrategy {
    /// Start at the remembered current endpoint (keeps a provider's prompt cache warm).
    Sticky,
    /// Always start at the first candidate.
    Priority,
    /// Start one further than the previous request.
    RoundRobin,
}

impl RoutingStrategy {
    pub fn as_str(self) -> &'static str {
        match self {
            RoutingStrategy::Sticky => "sticky",
            RoutingStrategy::Priority => "priority",
            RoutingStrategy::RoundRobin => "round_robin",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    breaker: [BreakerSettings; Protocol::COUNT],
    timeouts: [Timeouts; Protocol::COUNT],
    /// Per inbound protocol: may a request move to another endpoint (seed 001's switch)?
    failover_enabled: [bool; Protocol::COUNT],
    /// Total in-gateway wait per request when every candidate is rate-limited.
    pub rate_limit_backoff_budget: Duration,
    /// Pause before retrying the same endpoint after a transient network error.
    pub transient_retry_delay: Duration,
    /// Treat an upstream 401 like a 403 (fail over, count as failure).
    pub auth_errors_fail_over: bool,
    pub routing_strategy: RoutingStrategy,
    pub max_body_bytes: u64,
    /// Request records older than this are pruned in the background (`retention_days`).
    pub retention: Duration,
    pub limits: Limits,
    /// Host names besides the loopback ones that may reach the admin API and dashboard without
    /// an admin token (SPEC §15.7), lower-case, with or without a port.
    pub allowed_hosts: Vec<String>,
    /// A 400 saying the prompt exceeds the model's context window moves to the next candidate.
    pub context_window_fallback: bool,
    /// Continue a stream cut after content reached the client on the next candidate.
    pub stream_resume: bool,
    /// Resumes per request, at most.
    pub stream_resume_attempts: u32,
    /// User retry rules, evaluated before the built-in classification (SPEC §4).
    pub retry_rules: Vec<super::retry_rules::RetryRule>,
    /// Client keys are required on the proxy paths even while none exists (SPEC §12).
    pub require_client_key: bool,
    /// The price of a model the price table does not know (SPEC §15.10): records cost such
    /// requests at it, and a key with a dollar budget may use such models.
    pub default_price: Option<crate::observe::cost::Price>,
}

/// The largest default price accepted, USD per million tokens (more is surely a typo).
pub const MAX_DEFAULT_PRICE: f64 = 10_000.0;

impl Default for Settings {
    fn default() -> Self {
        Settings {
            // SPEC §11: Gemini has the general numbers (seed 001), as `openai` and `responses`.
            breaker: [
                BreakerSettings::claude_defaults(),
                BreakerSettings::openai_defaults(),
                BreakerSettings::openai_defaults(),
                BreakerSettings::openai_defaults(),
            ],
            timeouts: [
                Timeouts::claude_defaults(),
                Timeouts::openai_defaults(),
                Timeouts::openai_defaults(),
                Timeouts::openai_defaults(),
            ],
            failover_enabled: [true; Protocol::COUNT],
            rate_limit_backoff_budget: Duration::from_secs(5),
            transient_retry_delay: Duration::from_millis(300),
            auth_errors_fail_over: false,
            routing_strategy: RoutingStrategy::Sticky,
            max_body_bytes: 32 * 1024 * 1024,
            retention: Duration::from_secs(30 * 86_400),
            limits: Limits::default(),
            allowed_hosts: Vec::new(),
            context_window_fallback: true,
            stream_resume: true,
            stream_resume_attempts: 1,
            retry_rules: Vec::new(),
            require_client_key: false,
            default_price: None,
        }
    }
}

impl Settings {
    pub fn breaker(&self, protocol: Protocol) -> &BreakerSettings {
        &self.breaker[protocol.index()]
    }

    pub fn timeouts(&self, protocol: Protocol) -> &Timeouts {
        &self.timeouts[protocol.index()]
    }

    pub fn failover_enabled(&self, protocol: Protocol) -> bool {
        self.failover_enabled[protocol.index()]
    }

    /// The JSON document of SPEC §10 (`GET /api/settings`).
    pub fn to_document(&self) -> Value {
        let mut breaker = Map::new();
        let mut timeouts = Map::new();
        let mut failover = Map::new();
        for p in Protocol::ALL {
            failover.insert(p.as_str().into(), json!(self.failover_enabled(p)));
            let b = self.breaker(p);
            breaker.insert(
                p.as_str().into(),
                json!({
                    "failure_threshold": b.failure_threshold,
                    "success_threshold": b.success_threshold,
                    "timeout_secs": secs(b.timeout),
                    "error_rate_threshold": b.error_rate_threshold,
                    "min_requests": b.min_requests,
                    "error_rate_window_secs": secs(b.error_rate_window),
                    "rate_limit_timeout_secs": secs(b.rate_limit_timeout),
                    "max_rate_limit_timeout_secs": secs(b.max_rate_limit_timeout),
                }),
            );
            let t = self.timeouts(p);
            timeouts.insert(
                p.as_str().into(),
                json!({
                    "first_byte_timeout_secs": secs(t.first_byte),
                    "first_token_timeout_secs": t.first_token.map(secs).unwrap_or(Value::Null),
                    "idle_timeout_secs": t.idle.map(secs).unwrap_or(json!(0)),
                    "request_timeout_secs": secs(t.request),
                    "total_timeout_secs": secs(t.total),
                    "max_stream_duration_secs": t.max_stream_duration.map(secs).unwrap_or(json!(0)),
                }),
            );
        }
        let l = &self.limits;
        json!({
            "breaker": breaker,
            "timeouts": timeouts,
            "failover_enabled": failover,
            "rate_limit_backoff_budget_secs": secs(self.rate_limit_backoff_budget),
            "transient_retry_delay_ms": self.transient_retry_delay.as_millis() as u64,
            "auth_errors_fail_over": self.auth_errors_fail_over,
            "routing_strategy": self.routing_strategy.as_str(),
            "max_body_bytes": self.max_body_bytes,
            "retention_days": self.retention.as_secs() / 86_400,
            "limits": {
                "header_read_timeout_secs": secs(l.header_read_timeout),
                "body_read_timeout_secs": secs(l.body_read_timeout),
                "keepalive_timeout_secs": secs(l.keepalive_timeout),
                "max_connections": l.max_connections,
                "max_upstream_body_bytes": l.max_upstream_body_bytes,
                "max_sse_event_bytes": l.max_sse_event_bytes,
            },
            "allowed_hosts": self.allowed_hosts,
            "context_window_fallback": self.context_window_fallback,
            "stream_resume": self.stream_resume,
            "stream_resume_attempts": self.stream_resume_attempts,
            "retry_rules": self.retry_rules.iter().map(super::retry_rules::RetryRule::to_json).collect::<Vec<_>>(),
            "require_client_key": self.require_client_key,
            "default_price": self.default_price.map(|p| json!({
                "input": p.input, "output": p.output, "cache_read": p.cache_read, "cache_write": p.cache_write,
            })),
        })
    }

    /// Validate a complete document into typed settings. Errors name the offending field.
    pub fn from_document(doc: &Value) -> Result<Settings, SettingsError> {
        let mut breaker = Vec::with_capacity(Protocol::COUNT);
        let mut timeouts = Vec::with_capacity(Protocol::COUNT);
        let mut failover = Vec::with_capacity(Protocol::COUNT);
        let failover_section = Field::new(doc, "failover_enabled")?;
        for p in Protocol::ALL {
            failover.push(failover_section.bool(p.as_str())?);
            let path = format!("breaker.{}", p.as_str());
            let b = Field::new(doc, &path)?;
            breaker.push(BreakerSettings {
                failure_threshold: b.int("failure_threshold", 1, 20)?,
                success_threshold: b.int("success_threshold", 1, 10)?,
                timeout: b.secs("timeout_secs", 0.0, 300.0)?,
                error_rate_threshold: b.num("error_rate_threshold", 0.0, 1.0)?,
                min_requests: b.int("min_requests", 1, 100)?,
                error_rate_window: b.secs("error_rate_window_secs", 1.0, 3600.0)?,
                rate_limit_timeout: b.secs("rate_limit_timeout_secs", 0.0, 300.0)?,
                max_rate_limit_timeout: b.secs("max_rate_limit_timeout_secs", 0.0, 300.0)?,
            });
            let path = format!("timeouts.{}", p.as_str());
            let t = Field::new(doc, &path)?;
            let idle = t.num("idle_timeout_secs", 0.0, 3600.0)?;
            if idle > 0.0 && idle < 0.1 {
                return Err(t.error("idle_timeout_secs", "must be 0 (disabled) or between 0.1 and 3600"));
            }
            let first_token = match t.get("first_token_timeout_secs")? {
                Value::Null => None,
                _ => Some(t.secs("first_token_timeout_secs", 0.1, 600.0)?),
            };
            timeouts.push(Timeouts {
                first_byte: t.secs("first_byte_timeout_secs", 0.1, 600.0)?,
                first_token,
                idle: (idle > 0.0).then(|| Duration::from_secs_f64(idle)),
                request: t.secs("request_timeout_secs", 0.1, 3600.0)?,
                total: t.secs("total_timeout_secs", 1.0, 3600.0)?,
                max_stream_duration: {
                    let cap = t.num("max_stream_duration_secs", 0.0, 86_400.0)?;
                    if cap > 0.0 && cap < 1.0 {
                        return Err(t.error("max_stream_duration_secs", "must be 0 (no cap) or between 1 and 86400"));
                    }
                    (cap > 0.0).then(|| Duration::from_secs_f64(cap))
                },
            });
        }
        let top = Field::new(doc, "")?;
        let strategy = match top.get("routing_strategy")?.as_str() {
            Some("sticky") => RoutingStrategy::Sticky,
            Some("priority") => RoutingStrategy::Priority,
            Some("round_robin") => RoutingStrategy::RoundRobin,
            _ => {
                return Err(top.error("routing_strategy", "must be one of \"sticky\", \"priority\", \"round_robin\""));
            }
        };
        let auth = top.bool("auth_errors_fail_over")?;
        let l = Field::new(doc, "limits")?;
        let limits = Limits {
            header_read_timeout: l.secs("header_read_timeout_secs", 0.1, 3600.0)?,
            body_read_timeout: l.secs("body_read_timeout_secs", 0.1, 3600.0)?,
            keepalive_timeout: l.secs("keepalive_timeout_secs", 0.1, 3600.0)?,
            max_connections: usize::try_from(l.int_u64("max_connections", 1, 1_000_000)?)
                .map_err(|_| l.error("max_connections", "is out of range"))?,
            max_upstream_body_bytes: l.int_u64("max_upstream_body_bytes", 1024, 4 * 1024 * 1024 * 1024)?,
            max_sse_event_bytes: l.int_u64("max_sse_event_bytes", 1024, 1024 * 1024 * 1024)?,
        };
        let allowed_hosts = top.host_list("allowed_hosts")?;
        let retry_rules = super::retry_rules::parse(top.get("retry_rules")?).map_err(SettingsError)?;
        let default_price = default_price(top.get("default_price")?)?;
        Ok(Settings {
            breaker: to_array(breaker)?,
            timeouts: to_array(timeouts)?,
            failover_enabled: to_array(failover)?,
            rate_limit_backoff_budget: top.secs("rate_limit_backoff_budget_secs", 0.0, 60.0)?,
            transient_retry_delay: Duration::from_millis(top.int("transient_retry_delay_ms", 0, 10_000)?.into()),
            auth_errors_fail_over: auth,
            routing_strategy: strategy,
            max_body_bytes: top.int_u64("max_body_bytes", 1024, 1024 * 1024 * 1024)?,
            retention: Duration::from_secs(top.int_u64("retention_days", 1, 3650)? * 86_400),
            limits,
            allowed_hosts,
            context_window_fallback: top.bool("context_window_fallback")?,
            stream_resume: top.bool("stream_resume")?,
            stream_resume_attempts: top.int("stream_resume_attempts", 0, 5)?,
            retry_rules,
            require_client_key: top.bool("require_client_key")?,
            default_price,
        })
    }

    /// Apply a partial document (PATCH semantics): deep merge, reject unknown keys, validate all.
    pub fn patched(&self, patch: &Value) -> Result<Settings, SettingsError> {
        let mut doc = self.to_document();
        merge_checked(&mut doc, patch, "")?;
        Settings::from_document(&doc)
    }
}

/// `default_price`: `null`, or a price object as `PUT /api/prices/{model}` takes it (an object
/// whose `input` and `output` are both null, as a form with emptied fields sends, is `null`).
fn default_price(v: &Value) -> Result<Option<crate::observe::cost::Price>, SettingsError> {
    let named = |e: crate::endpoint::FieldError| SettingsError(format!("default_price.{}: {}", e.field, e.message));
    let obj = match v {
        Value::Null => return Ok(None),
        Value::Object(o) => o,
        _ => {
            return Err(SettingsError(
                "default_price must be null or an object like {\"input\": 1, \"output\": 4}".into(),
            ));
        }
    };
    let set: Map<String, Value> =
        obj.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), v.clone())).collect();
    if !set.contains_key("input") && !set.contains_key("output") {
        if let Some(k) = obj.keys().find(|k| !crate::observe::cost::PRICE_FIELDS.contains(&k.as_str())) {
            return Err(SettingsError(format!("default_price.{k}: unknown field")));
        }
        return Ok(None);
    }
    let price = crate::observe::cost::Price::from_json(&Value::Object(set), &[]).map_err(named)?;
    for (field, n) in [
        ("input", price.input),
        ("output", price.output),
        ("cache_read", price.cache_read),
        ("cache_write", price.cache_write),
    ] {
        if n > MAX_DEFAULT_PRICE {
            return Err(SettingsError(format!(
                "default_price.{field} must be between 0 and {MAX_DEFAULT_PRICE} (got {n})"
            )));
        }
    }
    Ok(Some(price))
}

fn to_array<T>(v: Vec<T>) -> Result<[T; Protocol::COUNT], SettingsError> {
    v.try_into().map_err(|_| SettingsError("internal: wrong protocol count".into()))
}

/// The defaults as a document: the seed-000 numbers of SPEC §5–6.
pub fn defaults_document() -> Value {
    Settings::default().to_document()
}

/// Whole seconds print as integers (`90`), fractions as floats (`0.25`).
fn secs(d: Duration) -> Value {
    if d.subsec_nanos() == 0 { json!(d.as_secs()) } else { json!(d.as_secs_f64()) }
}

/// Deep-merge `patch` into `doc`; every key must already exist in `doc` (whose shape comes from
/// the defaults), objects must stay objects and leaves must stay leaves.
pub fn merge_checked(doc: &mut Value, patch: &Value, path: &str) -> Result<(), SettingsError> {
    let Some(patch) = patch.as_object() else {
        let what = if path.is_empty() { "settings" } else { path };
        return Err(SettingsError(format!("{what} must be a JSON object")));
    };
    for (key, value) in patch {
        let full = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
        let Some(slot) = doc.as_object_mut().and_then(|o| o.get_mut(key)) else {
            return Err(SettingsError(format!(
                "unknown settings key '{full}'; see GET /api/settings for the valid keys"
            )));
        };
        if slot.is_null() && value.is_object() {
            // An unset object setting (`default_price`) takes a whole object; its validation
            // names any key it does not know.
            *slot = value.clone();
        } else if slot.is_object() && value.is_null() && full == "default_price" {
            *slot = Value::Null;
        } else if slot.is_object() {
            merge_checked(slot, value, &full)?;
        } else if slot.is_array() {
            // A list is replaced as a whole: merging lists element by element means nothing.
            if !value.is_array() {
                return Err(SettingsError(format!("{full} must be a JSON array")));
            }
            *slot = value.clone();
        } else if slot.is_null() && !(value.is_object() || value.is_array()) {
            // A setting that is unset by default (null) takes a plain value, or null again.
            *slot = value.clone();
        } else if value.is_object() || value.is_array() {
            return Err(SettingsError(format!("{full} must be a single value, not an object or array")));
        } else {
            *slot = value.clone();
        }
    }
    Ok(())
}

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct SettingsError(pub String);

/// Typed, named access to one object of the document.
struct Field<'a> {
    obj: &'a Map<String, Value>,
    path: String,
}

impl<'a> Field<'a> {
    fn new(doc: &'a Value, path: &str) -> Result<Self, SettingsError> {
        let mut cur = doc;
        for part in path.split('.').filter(|p| !p.is_empty()) {
            cur = cur.get(part).ok_or_else(|| SettingsError(format!("missing settings section '{path}'")))?;
        }
        let obj =
            cur.as_object().ok_or_else(|| SettingsError(format!("settings section '{path}' must be an object")))?;
        Ok(Self { obj, path: path.to_string() })
    }

    fn name(&self, key: &str) -> String {
        if self.path.is_empty() { key.to_string() } else { format!("{}.{key}", self.path) }
    }

    fn error(&self, key: &str, what: &str) -> SettingsError {
        SettingsError(format!("{} {what}", self.name(key)))
    }

    fn get(&self, key: &str) -> Result<&'a Value, SettingsError> {
        self.obj.get(key).ok_or_else(|| self.error(key, "is missing"))
    }

    fn num(&self, key: &str, min: f64, max: f64) -> Result<f64, SettingsError> {
        let v = self.get(key)?;
        let n = v.as_f64().filter(|n| n.is_finite()).ok_or_else(|| self.error(key, "must be a number"))?;
        if n < min || n > max {
            return Err(self.error(key, &format!("must be between {min} and {max} (got {v})")));
        }
        Ok(n)
    }

    fn secs(&self, key: &str, min: f64, max: f64) -> Result<Duration, SettingsError> {
        Ok(Duration::from_secs_f64(self.num(key, min, max)?))
    }

    fn int_u64(&self, key: &str, min: u64, max: u64) -> Result<u64, SettingsError> {
        let v = self.get(key)?;
        let n = v.as_u64().ok_or_else(|| self.error(key, "must be a whole number"))?;
        if n < min || n > max {
            return Err(self.error(key, &format!("must be between {min} and {max} (got {n})")));
        }
        Ok(n)
    }

    fn bool(&self, key: &str) -> Result<bool, SettingsError> {
        self.get(key)?.as_bool().ok_or_else(|| self.error(key, "must be true or false"))
    }

    /// A list of host names (optionally `host:port`), stored lower-case.
    fn host_list(&self, key: &str) -> Result<Vec<String>, SettingsError> {
        let items = self.get(key)?.as_array().ok_or_else(|| self.error(key, "must be an array of host names"))?;
        if items.len() > 256 {
            return Err(self.error(key, "may hold at most 256 host names"));
        }
        items
            .iter()
            .map(|item| {
                let host = item.as_str().map(str::trim).unwrap_or_default().to_ascii_lowercase();
                let valid = !host.is_empty()
                    && host.len() <= 255
                    && host.bytes().all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b));
                if valid { Ok(host) } else { Err(self.error(key, &format!("holds an invalid host name {item}"))) }
            })
            .collect()
    }

    fn int(&self, key: &str, min: u32, max: u32) -> Result<u32, SettingsError> {
        // In range, so the narrowing cannot fail.
        let n = self.int_u64(key, min.into(), max.into())?;
        u32::try_from(n).map_err(|_| self.error(key, "is out of range"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemini_has_its_own_numbers() {
        let s = Settings::default()
            .patched(&json!({"breaker": {"gemini": {"failure_threshold": 7}}, "timeouts": {"gemini": {"idle_timeout_secs": 0}},
                             "failover_enabled": {"gemini": false}}))
            .unwrap();
        assert_eq!(s.breaker(Protocol::Gemini).failure_threshold, 7);
        assert_eq!(s.breaker(Protocol::Openai).failure_threshold, 4);
        assert_eq!(s.timeouts(Protocol::Gemini).idle, None);
        assert!(s.timeouts(Protocol::Openai).idle.is_some());
        assert!(!s.failover_enabled(Protocol::Gemini) && s.failover_enabled(Protocol::Openai));
        // A stored document from before Gemini (no `gemini` keys) still loads, with its defaults.
        let old = json!({"breaker": {"openai": {"failure_threshold": 5}}});
        let s = Settings::default().patched(&old).unwrap();
        assert_eq!(s.breaker(Protocol::Gemini), &BreakerSettings::openai_defaults());
        let e = Settings::default().patched(&json!({"breaker": {"gemini": {"failure_threshold": 21}}})).unwrap_err();
        assert!(e.0.starts_with("breaker.gemini.failure_threshold must be between 1 and 20"), "{}", e.0);
    }

    #[test]
    fn defaults_are_the_seed_numbers() {
        let s = Settings::default();
        assert_eq!(s.breaker(Protocol::Claude), &BreakerSettings::claude_defaults());
        assert_eq!(s.breaker(Protocol::Openai), &BreakerSettings::openai_defaults());
        assert_eq!(s.breaker(Protocol::Responses), &BreakerSettings::openai_defaults());
        assert_eq!(s.breaker(Protocol::Gemini), &BreakerSettings::openai_defaults());
        assert_eq!(s.timeouts(Protocol::Claude), &Timeouts::claude_defaults());
        assert_eq!(s.timeouts(Protocol::Gemini), &Timeouts::openai_defaults());
        assert!(s.failover_enabled(Protocol::Gemini));
        assert_eq!(s.transient_retry_delay, Duration::from_millis(300));
        assert_eq!(s.rate_limit_backoff_budget, Duration::from_secs(5));
        assert_eq!(s.max_body_bytes, 32 * 1024 * 1024);
        assert_eq!(s.retention, Duration::from_secs(30 * 86_400));
        let doc = defaults_document();
        assert_eq!(doc["breaker"]["claude"]["timeout_secs"], json!(90));
        assert_eq!(doc["breaker"]["openai"]["error_rate_threshold"], json!(0.6));
        assert_eq!(doc["timeouts"]["responses"]["idle_timeout_secs"], json!(120));
        assert_eq!(doc["breaker"]["gemini"]["failure_threshold"], json!(4));
        assert_eq!(doc["timeouts"]["gemini"]["first_byte_timeout_secs"], json!(60));
        assert_eq!(doc["failover_enabled"]["gemini"], json!(true));
        assert_eq!(doc["transient_retry_delay_ms"], json!(300));
        assert_eq!(Settings::from_document(&doc).unwrap(), s);
    }

    #[test]
    fn patch_deep_merges_and_keeps_the_rest() {
        let s = Settings::default()
            .patched(&json!({"breaker": {"openai": {"failure_threshold": 2, "timeout_secs": 0.5}}}))
            .unwrap();
        assert_eq!(s.breaker(Protocol::Openai).failure_threshold, 2);
        assert_eq!(s.breaker(Protocol::Openai).timeout, Duration::from_millis(500));
        assert_eq!(s.breaker(Protocol::Openai).success_threshold, 2);
        assert_eq!(s.breaker(Protocol::Claude), &BreakerSettings::claude_defaults());
        assert_eq!(s.to_document()["breaker"]["openai"]["timeout_secs"], json!(0.5));
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (
                json!({"breaker": {"claude": {"failure_threshold": 21}}}),
                "breaker.claude.failure_threshold must be between 1 and 20",
            ),
            (
                json!({"breaker": {"claude": {"failure_threshold": 1.5}}}),
                "breaker.claude.failure_threshold must be a whole number",
            ),
            (
                json!({"breaker": {"openai": {"error_rate_threshold": 1.2}}}),
                "breaker.openai.error_rate_threshold must be between 0 and 1",
            ),
            (json!({"breaker": {"claude": {"bogus": 1}}}), "unknown settings key 'breaker.claude.bogus'"),
            (json!({"bogus": 1}), "unknown settings key 'bogus'"),
            (
                json!({"timeouts": {"responses": {"idle_timeout_secs": 0.05}}}),
                "timeouts.responses.idle_timeout_secs must be 0 (disabled)",
            ),
            (
                json!({"timeouts": {"claude": {"first_byte_timeout_secs": 0}}}),
                "timeouts.claude.first_byte_timeout_secs must be between 0.1 and 600",
            ),
            (json!({"routing_strategy": "random"}), "routing_strategy must be one of"),
            (json!({"max_body_bytes": 10}), "max_body_bytes must be between 1024"),
            (json!({"transient_retry_delay_ms": 20000}), "transient_retry_delay_ms must be between 0 and 10000"),
            (json!({"rate_limit_backoff_budget_secs": 61}), "rate_limit_backoff_budget_secs must be between 0 and 60"),
            (json!({"auth_errors_fail_over": "yes"}), "auth_errors_fail_over must be true or false"),
            (json!({"retention_days": 0}), "retention_days must be between 1 and 3650"),
            (json!({"retention_days": 3651}), "retention_days must be between 1 and 3650"),
            (json!({"retention_days": 7.5}), "retention_days must be a whole number"),
            (json!({"breaker": 3}), "breaker must be a JSON object"),
            (
                json!({"breaker": {"claude": {"min_requests": [1]}}}),
                "breaker.claude.min_requests must be a single value",
            ),
            (json!([1]), "settings must be a JSON object"),
        ];
        for (patch, want) in cases {
            let err = Settings::default().patched(&patch).unwrap_err().0;
            assert!(err.starts_with(want), "{patch}: got {err:?}, want prefix {want:?}");
        }
    }

    #[test]
    fn idle_zero_disables_and_strategy_parses() {
        let s = Settings::default()
            .patched(&json!({"timeouts": {"claude": {"idle_timeout_secs": 0}}, "routing_strategy": "round_robin"}))
            .unwrap();
        assert_eq!(s.timeouts(Protocol::Claude).idle, None);
        assert_eq!(s.routing_strategy, RoutingStrategy::RoundRobin);
    }

    #[test]
    fn client_key_settings_set_and_clear() {
        let d = Settings::default();
        assert!(!d.require_client_key && d.default_price.is_none());
        assert_eq!(d.to_document()["default_price"], Value::Null);
        let s = d.patched(&json!({"require_client_key": true, "default_price": {"input": 1, "output": 4}})).unwrap();
        assert!(s.require_client_key);
        let p = s.default_price.unwrap();
        assert_eq!((p.input, p.output, p.cache_read, p.cache_write), (1.0, 4.0, 1.0, 1.0));
        // Partial changes merge; null (or emptied fields) clears.
        let s = s.patched(&json!({"default_price": {"output": 5}})).unwrap();
        assert_eq!(s.default_price.unwrap().output, 5.0);
        assert!(s.patched(&json!({"default_price": {"input": null, "output": null}})).unwrap().default_price.is_none());
        assert!(s.patched(&json!({"default_price": null})).unwrap().default_price.is_none());
        assert_eq!(Settings::from_document(&s.to_document()).unwrap(), s);
        for (patch, want) in [
            (json!({"default_price": {"input": 1}}), "default_price.output: is required"),
            (json!({"default_price": {"input": 1, "output": -1}}), "default_price.output: must be 0 or more"),
            (
                json!({"default_price": {"input": 1, "output": 10001}}),
                "default_price.output must be between 0 and 10000",
            ),
            (json!({"default_price": {"input": 1, "output": 2, "extra": 1}}), "default_price.extra: unknown field"),
            (json!({"default_price": 3}), "default_price must be null or an object"),
            (json!({"require_client_key": "yes"}), "require_client_key must be true or false"),
        ] {
            let got = Settings::default().patched(&patch).unwrap_err().0;
            assert!(got.starts_with(want), "{patch}: {got}");
        }
    }

    #[test]
    fn boundaries_are_inclusive() {
        let s = Settings::default()
            .patched(&json!({"breaker": {"claude": {"failure_threshold": 20, "error_rate_threshold": 0, "timeout_secs": 300}},
                             "max_body_bytes": 1073741824u64, "transient_retry_delay_ms": 0, "retention_days": 3650}))
            .unwrap();
        assert_eq!(s.breaker(Protocol::Claude).failure_threshold, 20);
        assert_eq!(s.max_body_bytes, 1 << 30);
        assert_eq!(s.retention, Duration::from_secs(3650 * 86_400));
        assert_eq!(s.to_document()["retention_days"], 3650);
        let s = Settings::default().patched(&json!({"retention_days": 1})).unwrap();
        assert_eq!(s.retention, Duration::from_secs(86_400));
    }
}
