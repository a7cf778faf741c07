//! A client key as stored and as the request path sees it (`ClientKey`), its limits
//! (`KeyLimits`), and the validation every write goes through (`KeyDraft`: the admin API, the CLI
//! through it, and the config file's `[[keys]]` hand it a JSON object, so each refuses the same
//! things with the same messages, naming the field).

use serde_json::{Map, Value, json};

use super::secret::SecretHash;
use crate::endpoint::{FieldError, ModelPattern, valid_name};

/// Largest values a limit may take: beyond them a limit is surely a typo (and the rpm window
/// keeps one timestamp per admitted request, so its size is bounded by the limit).
pub const MAX_RPM: u64 = 100_000;
pub const MAX_TPM: u64 = 1_000_000_000;
pub const MAX_CONCURRENCY: u64 = 10_000;
pub const MAX_USD: f64 = 1_000_000.0;
/// At most this many model patterns and endpoint names per key.
const MAX_LIST: usize = 256;
const MAX_DESCRIPTION: usize = 500;

/// The limits of one key; `None` = no limit of that kind.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KeyLimits {
    /// Requests admitted in any 60 s.
    pub rpm: Option<u64>,
    /// Input + output tokens charged in any 60 s (checked at admission against what is charged).
    pub tpm: Option<u64>,
    /// Requests in flight at once.
    pub concurrency: Option<u64>,
    /// USD per UTC day.
    pub usd_per_day: Option<f64>,
    /// USD per rolling 5 hours.
    pub usd_per_5h: Option<f64>,
    /// USD per UTC calendar month.
    pub usd_per_month: Option<f64>,
}

/// The names of the limits, as the API, the config file and error messages spell them.
pub const LIMIT_NAMES: [&str; 6] = ["rpm", "tpm", "concurrency", "usd_per_day", "usd_per_5h", "usd_per_month"];

impl KeyLimits {
    /// Whether any dollar budget is set (then every request must have a price).
    pub fn has_budget(&self) -> bool {
        self.usd_per_day.is_some() || self.usd_per_5h.is_some() || self.usd_per_month.is_some()
    }

    pub fn to_json(&self) -> Value {
        json!({
            "rpm": self.rpm, "tpm": self.tpm, "concurrency": self.concurrency,
            "usd_per_day": self.usd_per_day, "usd_per_5h": self.usd_per_5h, "usd_per_month": self.usd_per_month,
        })
    }

    /// Apply a partial object: each named limit is set (a number) or removed (`null`).
    pub fn apply(&mut self, v: &Value) -> Result<(), FieldError> {
        let Some(map) = v.as_object() else {
            return Err(err("limits", format!("must be an object with any of {}", LIMIT_NAMES.join(", "))));
        };
        for (k, v) in map {
            let field = format!("limits.{k}");
            match k.as_str() {
                "rpm" => self.rpm = whole(v, &field, MAX_RPM)?,
                "tpm" => self.tpm = whole(v, &field, MAX_TPM)?,
                "concurrency" => self.concurrency = whole(v, &field, MAX_CONCURRENCY)?,
                "usd_per_day" => self.usd_per_day = dollars(v, &field)?,
                "usd_per_5h" => self.usd_per_5h = dollars(v, &field)?,
                "usd_per_month" => self.usd_per_month = dollars(v, &field)?,
                _ => {
                    return Err(err(&field, format!("unknown limit; the limits are {}", LIMIT_NAMES.join(", "))));
                }
            }
        }
        Ok(())
    }
}

fn whole(v: &Value, field: &str, max: u64) -> Result<Option<u64>, FieldError> {
    if v.is_null() {
        return Ok(None);
    }
    match v.as_u64() {
        Some(n) if (1..=max).contains(&n) => Ok(Some(n)),
        _ => Err(err(field, format!("must be a whole number from 1 to {max}, or null for no limit"))),
    }
}

fn dollars(v: &Value, field: &str) -> Result<Option<f64>, FieldError> {
    if v.is_null() {
        return Ok(None);
    }
    match v.as_f64() {
        Some(n) if n.is_finite() && (0.0..=MAX_USD).contains(&n) => Ok(Some(n)),
        _ => Err(err(field, format!("must be a number of US dollars from 0 to {MAX_USD}, or null for no budget"))),
    }
}

/// A client key: who may use the gateway, for what, how much.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientKey {
    pub id: i64,
    /// Unique (case-insensitively), never changes: records, limits and bindings name it.
    pub name: String,
    pub description: Option<String>,
    pub enabled: bool,
    /// RFC 3339, UTC; with its instant in unix milliseconds.
    pub expires_at: Option<(String, i64)>,
    /// Allowed models (globs as endpoint `models`); empty = every model.
    pub models: Vec<ModelPattern>,
    /// Allowed endpoints by name; empty = every endpoint.
    pub endpoints: Vec<String>,
    pub limits: KeyLimits,
    pub secret_hash: SecretHash,
    /// The secret's first characters, for recognising it in a list.
    pub prefix: String,
    /// Declared in the config file (`[[keys]]`).
    pub declared: bool,
    pub created_at_ms: i64,
}

impl ClientKey {
    /// Whether `model` is one this key may use.
    pub fn allows_model(&self, model: &str) -> bool {
        self.models.is_empty() || self.models.iter().any(|p| p.matches(model))
    }

    /// Whether the endpoint named `name` is one this key may use.
    pub fn allows_endpoint(&self, name: &str) -> bool {
        self.endpoints.is_empty() || self.endpoints.iter().any(|e| e.eq_ignore_ascii_case(name))
    }

    pub fn expired(&self, now_ms: i64) -> bool {
        self.expires_at.as_ref().is_some_and(|(_, at)| now_ms >= *at)
    }

    /// The key as the admin API shows it: no secret, no hash.
    pub fn to_json(&self, now_ms: i64) -> Value {
        json!({
            "name": self.name,
            "description": self.description,
            "enabled": self.enabled,
            "expires_at": self.expires_at.as_ref().map(|(s, _)| s),
            "expired": self.expired(now_ms),
            "models": self.models.iter().map(ModelPattern::as_str).collect::<Vec<_>>(),
            "endpoints": self.endpoints,
            "limits": self.limits.to_json(),
            "prefix": self.prefix,
            "declared": self.declared,
            "created_at": crate::timefmt::rfc3339_ms(self.created_at_ms),
        })
    }

    /// The writable fields, for read-modify-write updates.
    pub fn to_draft(&self) -> KeyDraft {
        KeyDraft {
            name: self.name.clone(),
            description: self.description.clone(),
            enabled: self.enabled,
            expires_at: self.expires_at.clone(),
            models: self.models.iter().map(|m| m.as_str().to_string()).collect(),
            endpoints: self.endpoints.clone(),
            limits: self.limits,
        }
    }
}

/// The writable fields of a key.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyDraft {
    pub name: String,
    pub description: Option<String>,
    pub enabled: bool,
    pub expires_at: Option<(String, i64)>,
    pub models: Vec<String>,
    pub endpoints: Vec<String>,
    pub limits: KeyLimits,
}

const FIELDS: &[&str] = &["name", "description", "enabled", "expires_at", "models", "endpoints", "limits"];
const READ_ONLY: &[&str] = &["prefix", "declared", "created_at", "expired", "usage", "secret_sha256", "id"];

fn err(field: &str, message: impl Into<String>) -> FieldError {
    FieldError { field: field.to_string(), message: message.into() }
}

impl KeyDraft {
    /// Validate a create request; only `name` is required.
    pub fn create(obj: &Value) -> Result<KeyDraft, FieldError> {
        let map = obj.as_object().ok_or_else(|| err("body", "must be a JSON object"))?;
        check_keys(map, &[])?;
        if !map.contains_key("name") {
            return Err(err("name", "is required"));
        }
        let mut draft = KeyDraft {
            name: String::new(),
            description: None,
            enabled: true,
            expires_at: None,
            models: Vec::new(),
            endpoints: Vec::new(),
            limits: KeyLimits::default(),
        };
        draft.apply_fields(map)?;
        Ok(draft)
    }

    /// Apply a partial update. The name cannot change: records, limits and session bindings
    /// are kept under it.
    pub fn apply(&mut self, obj: &Value) -> Result<(), FieldError> {
        let map = obj.as_object().ok_or_else(|| err("body", "must be a JSON object"))?;
        check_keys(map, &[])?;
        if let Some(v) = map.get("name")
            && v.as_str().is_none_or(|n| !n.eq_ignore_ascii_case(&self.name))
        {
            return Err(err(
                "name",
                "a key's name cannot change (its records and spend are kept under it); create a new key instead",
            ));
        }
        self.apply_fields(map)
    }

    fn apply_fields(&mut self, map: &Map<String, Value>) -> Result<(), FieldError> {
        if let Some(v) = map.get("name") {
            let name = v.as_str().ok_or_else(|| err("name", "must be a string"))?;
            if !valid_name(name) {
                return Err(err("name", "must be 1-64 characters of A-Z, a-z, 0-9, '.', '_' or '-'"));
            }
            self.name = name.to_string();
        }
        if let Some(v) = map.get("description") {
            self.description = match v {
                Value::Null => None,
                Value::String(s) if s.trim().is_empty() => None,
                Value::String(s) if s.chars().count() <= MAX_DESCRIPTION && !s.chars().any(char::is_control) => {
                    Some(s.trim().to_string())
                }
                Value::String(_) => {
                    return Err(err(
                        "description",
                        format!("must be at most {MAX_DESCRIPTION} characters without control characters"),
                    ));
                }
                _ => return Err(err("description", "must be a string or null")),
            };
        }
        if let Some(v) = map.get("enabled") {
            self.enabled = v.as_bool().ok_or_else(|| err("enabled", "must be true or false"))?;
        }
        if let Some(v) = map.get("expires_at") {
            self.expires_at = match v {
                Value::Null => None,
                Value::String(s) => {
                    let ms = crate::timefmt::parse_rfc3339(s.trim()).ok_or_else(|| {
                        err(
                            "expires_at",
                            format!("'{s}' is not an RFC 3339 time (e.g. 2026-12-31T23:59:59Z) or a date"),
                        )
                    })?;
                    Some((crate::timefmt::rfc3339_ms(ms), ms))
                }
                _ => return Err(err("expires_at", "must be an RFC 3339 time (e.g. 2026-12-31T23:59:59Z) or null")),
            };
        }
        if let Some(v) = map.get("models") {
            self.models = string_list(v, "models", |m| {
                let m = m.trim();
                (!m.is_empty() && m.chars().count() <= 200 && !m.chars().any(char::is_control))
                    .then(|| m.to_string())
                    .ok_or("every entry must be a model name or * glob of 1-200 characters")
            })?;
        }
        if let Some(v) = map.get("endpoints") {
            self.endpoints = string_list(v, "endpoints", |e| {
                valid_name(e).then(|| e.to_string()).ok_or("every entry must be an endpoint name")
            })?;
        }
        if let Some(v) = map.get("limits") {
            self.limits.apply(v)?;
        }
        Ok(())
    }
}

fn check_keys(map: &Map<String, Value>, also: &[&str]) -> Result<(), FieldError> {
    for key in map.keys() {
        if READ_ONLY.contains(&key.as_str()) {
            return Err(err(key, "is read-only"));
        }
        if key == "secret" {
            return Err(err(
                key,
                "the gateway makes secrets: it answers the new one once (POST /api/keys, POST /api/keys/{name}/rotate); a fixed secret can be declared in the config file's [[keys]]",
            ));
        }
        if !FIELDS.contains(&key.as_str()) && !also.contains(&key.as_str()) {
            return Err(err(key, format!("unknown field; valid fields are: {}", FIELDS.join(", "))));
        }
    }
    Ok(())
}

fn string_list(
    v: &Value,
    field: &str,
    each: impl Fn(&str) -> Result<String, &'static str>,
) -> Result<Vec<String>, FieldError> {
    let Some(items) = v.as_array() else { return Err(err(field, "must be an array of strings")) };
    if items.len() > MAX_LIST {
        return Err(err(field, format!("may hold at most {MAX_LIST} entries")));
    }
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let s = item.as_str().ok_or_else(|| err(field, "must be an array of strings"))?;
        let s = each(s).map_err(|m| err(field, m))?;
        if !out.iter().any(|o| o.eq_ignore_ascii_case(&s)) {
            out.push(s);
        }
    }
    Ok(out)
}

/// The fields a config file's `[[keys]]` table may have besides the draft's.
pub const DECLARED_EXTRA: &[&str] = &["secret"];

/// Validate a `[[keys]]` table: the draft and its secret (required, at least
/// `MIN_DECLARED_LEN` characters). Returns the draft, the secret's hash and its prefix — the
/// secret itself is not kept.
pub fn declared(obj: &Value) -> Result<(KeyDraft, SecretHash, String), FieldError> {
    let map = obj.as_object().ok_or_else(|| err("body", "must be a table"))?;
    let secret = match map.get("secret") {
        Some(Value::String(s)) if s.chars().count() >= super::secret::MIN_DECLARED_LEN => s.as_str(),
        Some(Value::String(_)) => {
            return Err(err(
                "secret",
                format!(
                    "must be at least {} characters (e.g. `echo ccm-$(openssl rand -hex 24)`)",
                    super::secret::MIN_DECLARED_LEN
                ),
            ));
        }
        Some(_) => return Err(err("secret", "must be a string, e.g. \"${CCMESH_KEY_ALICE}\"")),
        None => {
            return Err(err("secret", "is required: a declared key's secret, e.g. secret = \"${CCMESH_KEY_ALICE}\""));
        }
    };
    if secret.len() > super::secret::MAX_LEN || secret.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(err("secret", "must be printable, without spaces, at most 512 bytes"));
    }
    let mut rest = map.clone();
    rest.remove("secret");
    let draft = KeyDraft::create(&Value::Object(rest))?;
    Ok((draft, SecretHash::of(secret), super::secret::prefix(secret)))
}

/// A key with no limits, for tests.
#[cfg(test)]
pub fn test_key(name: &str, secret: &str) -> ClientKey {
    ClientKey {
        id: 1,
        name: name.into(),
        description: None,
        enabled: true,
        expires_at: None,
        models: vec![],
        endpoints: vec![],
        limits: KeyLimits::default(),
        secret_hash: SecretHash::of(secret),
        prefix: super::secret::prefix(secret),
        declared: false,
        created_at_ms: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_and_patch_validate_every_field() {
        let d = KeyDraft::create(&json!({
            "name": "alice", "description": " team A ", "expires_at": "2026-12-31T23:59:59+01:00",
            "models": ["claude-*", "gpt-4o", "claude-*"], "endpoints": ["anthropic"],
            "limits": {"rpm": 60, "usd_per_day": 5, "usd_per_5h": 1.5}
        }))
        .unwrap();
        assert_eq!(d.description.as_deref(), Some("team A"));
        assert_eq!(d.expires_at.as_ref().unwrap().0, "2026-12-31T22:59:59Z");
        assert_eq!(d.models, ["claude-*", "gpt-4o"], "duplicates dropped");
        assert_eq!(d.limits.rpm, Some(60));
        assert_eq!(d.limits.usd_per_5h, Some(1.5));
        assert!(d.limits.has_budget() && d.enabled);

        let mut d2 = d.clone();
        d2.apply(&json!({"limits": {"rpm": null, "tpm": 1000}, "enabled": false, "expires_at": null})).unwrap();
        assert_eq!((d2.limits.rpm, d2.limits.tpm, d2.limits.usd_per_day), (None, Some(1000), Some(5.0)));
        assert!(!d2.enabled && d2.expires_at.is_none());
        assert!(d2.apply(&json!({"name": "ALICE"})).is_ok(), "the same name in another case is no change");

        let cases = [
            (json!({}), "name: is required"),
            (json!({"name": "a b"}), "name: must be 1-64"),
            (json!({"name": "a", "limits": {"rpm": 0}}), "limits.rpm: must be a whole number from 1"),
            (json!({"name": "a", "limits": {"rpm": 1.5}}), "limits.rpm: must be a whole number"),
            (
                json!({"name": "a", "limits": {"concurrency": 10001}}),
                "limits.concurrency: must be a whole number from 1 to 10000",
            ),
            (json!({"name": "a", "limits": {"usd_per_day": -1}}), "limits.usd_per_day: must be a number of US dollars"),
            (json!({"name": "a", "limits": {"usd_per_week": 1}}), "limits.usd_per_week: unknown limit"),
            (json!({"name": "a", "limits": 3}), "limits: must be an object"),
            (json!({"name": "a", "expires_at": "tomorrow"}), "expires_at: 'tomorrow' is not an RFC 3339 time"),
            (json!({"name": "a", "models": "claude-*"}), "models: must be an array of strings"),
            (json!({"name": "a", "models": [""]}), "models: every entry must be a model name"),
            (json!({"name": "a", "endpoints": ["no spaces"]}), "endpoints: every entry must be an endpoint name"),
            (json!({"name": "a", "secret": "x"}), "secret: the gateway makes secrets"),
            (json!({"name": "a", "prefix": "x"}), "prefix: is read-only"),
            (json!({"name": "a", "colour": "x"}), "colour: unknown field"),
            (json!({"name": "a", "enabled": "yes"}), "enabled: must be true or false"),
        ];
        for (body, want) in cases {
            let got = KeyDraft::create(&body).unwrap_err().to_string();
            assert!(got.starts_with(want), "{body}: {got}");
        }
        let got = d.clone().apply(&json!({"name": "bob"})).unwrap_err().to_string();
        assert!(got.starts_with("name: a key's name cannot change"), "{got}");
    }

    #[test]
    fn declared_keys_need_a_long_secret_which_is_only_hashed() {
        let secret = "ccm-declared-secret-0123456789abcdef";
        let (d, hash, _) = declared(&json!({"name": "ci", "secret": secret, "limits": {"rpm": 10}})).unwrap();
        assert_eq!(d.name, "ci");
        assert_eq!(hash, SecretHash::of(secret));
        for (body, want) in [
            (json!({"name": "ci"}), "secret: is required"),
            (json!({"name": "ci", "secret": "short"}), "secret: must be at least 32"),
            (json!({"name": "ci", "secret": 5}), "secret: must be a string"),
            (json!({"name": "ci", "secret": format!("{secret} x")}), "secret: must be printable"),
        ] {
            let got = declared(&body).unwrap_err().to_string();
            assert!(got.starts_with(want), "{body}: {got}");
        }
    }

    #[test]
    fn models_and_endpoints_allow_everything_when_empty() {
        let mut key = ClientKey {
            id: 1,
            name: "k".into(),
            description: None,
            enabled: true,
            expires_at: Some(("2026-01-01T00:00:00Z".into(), 1_000)),
            models: vec![],
            endpoints: vec![],
            limits: KeyLimits::default(),
            secret_hash: SecretHash::of("x"),
            prefix: "ccm-…".into(),
            declared: false,
            created_at_ms: 0,
        };
        assert!(key.allows_model("anything") && key.allows_endpoint("any"));
        key.models = vec![ModelPattern::new("claude-*")];
        key.endpoints = vec!["Anthropic".into()];
        assert!(key.allows_model("Claude-Sonnet-4-5") && !key.allows_model("gpt-4o"));
        assert!(key.allows_endpoint("anthropic") && !key.allows_endpoint("openai"));
        assert!(!key.expired(999) && key.expired(1_000));
        let shown = key.to_json(2_000);
        assert_eq!(shown["expired"], true);
        assert!(shown.get("secret_hash").is_none() && shown.get("secret").is_none());
    }
}
