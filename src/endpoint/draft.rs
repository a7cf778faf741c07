//! Validation of endpoint writes. The admin API, the CLI (through the API) and the config file
//! all hand a JSON object to `EndpointDraft::apply`, so every path rejects the same things
//! with the same messages, each naming the offending field.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{reserved_header, valid_name};
use crate::protocol::Format;
use crate::secrets::mask_secret;

/// The writable fields of an endpoint, before it has an id.
#[derive(Clone, Debug, PartialEq)]
pub struct EndpointDraft {
    pub name: String,
    pub base_url: String,
    pub api_key: String,
    pub format: Format,
    pub models: Vec<String>,
    pub model_map: BTreeMap<String, String>,
    pub enabled: bool,
    pub fast: bool,
    /// `None` with `fast = true` means "join the end of the fast queue".
    pub fast_sort_order: Option<i64>,
    /// `None` on create means "after every existing endpoint".
    pub sort_order: Option<i64>,
    pub headers: BTreeMap<String, String>,
    pub test_model: Option<String>,
    /// Cost multiplier over the list price; 0 < m ≤ 100, default 1.
    pub price_multiplier: f64,
}

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

fn err(field: &str, message: impl Into<String>) -> FieldError {
    FieldError { field: field.to_string(), message: message.into() }
}

/// The fields a draft may set, in the order they are shown.
pub const FIELDS: &[&str] = &[
    "name",
    "base_url",
    "api_key",
    "format",
    "models",
    "model_map",
    "enabled",
    "fast",
    "fast_sort_order",
    "sort_order",
    "headers",
    "test_model",
    "price_multiplier",
];
/// A relay billing more than 100× the list price is surely a typo.
const MAX_PRICE_MULTIPLIER: f64 = 100.0;
/// Fields the gateway sets; shown, never taken from a draft.
pub const READ_ONLY: &[&str] = &["test_status", "test_at", "test_latency_ms", "test_error", "id", "serves_every_model"];

impl EndpointDraft {
    /// Validate a create request: `name`, `base_url`, `api_key` and `format` are required.
    pub fn create(obj: &Value) -> Result<EndpointDraft, FieldError> {
        let map = as_object(obj)?;
        // A misspelt field is named as such before "required" is reported for the field it was
        // meant to be (`baseurl` → unknown field, not "base_url: is required").
        check_keys(map)?;
        for required in ["name", "base_url", "format"] {
            if !map.contains_key(required) {
                return Err(err(required, "is required"));
            }
        }
        let mut draft = EndpointDraft {
            name: String::new(),
            base_url: String::new(),
            api_key: String::new(),
            format: Format::Anthropic,
            models: Vec::new(),
            model_map: BTreeMap::new(),
            enabled: true,
            fast: false,
            fast_sort_order: None,
            sort_order: None,
            headers: BTreeMap::new(),
            test_model: None,
            price_multiplier: 1.0,
        };
        draft.apply(obj)?;
        Ok(draft)
    }

    /// Apply a partial update (PATCH): only the fields present change. A masked key equal to
    /// the current key's mask means "unchanged", so a form or script can send back what it read.
    pub fn apply(&mut self, obj: &Value) -> Result<(), FieldError> {
        let map = as_object(obj)?;
        check_keys(map)?;
        if let Some(v) = map.get("name") {
            let name = string(v, "name")?;
            if !valid_name(name) {
                return Err(err("name", "must be 1-64 characters of A-Z, a-z, 0-9, '.', '_' or '-'"));
            }
            self.name = name.to_string();
        }
        if let Some(v) = map.get("base_url") {
            self.base_url = validate_base_url(string(v, "base_url")?)?;
        }
        if let Some(v) = map.get("api_key") {
            let key = string(v, "api_key")?;
            if key.chars().any(|c| c.is_control()) {
                return Err(err("api_key", "must not contain control characters"));
            }
            if self.api_key.is_empty() || key != mask_secret(&self.api_key) {
                self.api_key = key.to_string();
            }
        }
        if let Some(v) = map.get("format") {
            let s = string(v, "format")?;
            self.format = Format::parse(s).ok_or_else(|| {
                err("format", format!("must be \"anthropic\", \"openai\", \"responses\" or \"gemini\" (got \"{s}\")"))
            })?;
        }
        if let Some(v) = map.get("models") {
            let Value::Array(items) = v else { return Err(err("models", "must be an array of strings")) };
            let mut models = Vec::with_capacity(items.len());
            for item in items {
                let m = item.as_str().ok_or_else(|| err("models", "must be an array of strings"))?.trim();
                if m.is_empty() {
                    return Err(err("models", "must not contain empty names"));
                }
                if !models.iter().any(|x: &String| x == m) {
                    models.push(m.to_string());
                }
            }
            self.models = models;
        }
        if let Some(v) = map.get("model_map") {
            self.model_map = string_map(v, "model_map")?;
            if self.model_map.iter().any(|(k, v)| k.trim().is_empty() || v.trim().is_empty()) {
                return Err(err("model_map", "keys and values must be non-empty model names"));
            }
        }
        if let Some(v) = map.get("headers") {
            let headers = string_map(v, "headers")?;
            for (name, value) in &headers {
                if axum::http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                    return Err(err("headers", format!("'{name}' is not a valid header name")));
                }
                if axum::http::HeaderValue::from_str(value).is_err() {
                    return Err(err("headers", format!("the value of '{name}' is not a valid header value")));
                }
                if reserved_header(name) {
                    return Err(err(
                        "headers",
                        format!(
                            "'{name}' is managed by the gateway (credentials and hop-by-hop headers cannot be overridden)"
                        ),
                    ));
                }
            }
            self.headers = headers;
        }
        if let Some(v) = map.get("enabled") {
            self.enabled = v.as_bool().ok_or_else(|| err("enabled", "must be true or false"))?;
        }
        if let Some(v) = map.get("fast") {
            self.fast = v.as_bool().ok_or_else(|| err("fast", "must be true or false"))?;
        }
        if let Some(v) = map.get("fast_sort_order") {
            self.fast_sort_order = optional_int(v, "fast_sort_order")?;
        }
        if let Some(v) = map.get("sort_order") {
            self.sort_order = optional_int(v, "sort_order")?;
        }
        if let Some(v) = map.get("test_model") {
            self.test_model = match v {
                Value::Null => None,
                Value::String(s) if s.trim().is_empty() => None,
                Value::String(s) => Some(s.trim().to_string()),
                _ => return Err(err("test_model", "must be a string or null")),
            };
        }
        if let Some(v) = map.get("price_multiplier") {
            self.price_multiplier = v
                .as_f64()
                .filter(|m| *m > 0.0 && *m <= MAX_PRICE_MULTIPLIER)
                .ok_or_else(|| err("price_multiplier", "must be a number above 0 and at most 100 (1 = list price)"))?;
        }
        Ok(())
    }
}

/// Every key must be a writable field; a near miss is named.
fn check_keys(map: &Map<String, Value>) -> Result<(), FieldError> {
    for key in map.keys() {
        if READ_ONLY.contains(&key.as_str()) {
            return Err(err(key, "is read-only"));
        }
        if !FIELDS.contains(&key.as_str()) {
            let hint = match closest_field(key) {
                Some(f) => format!("did you mean '{f}'? "),
                None => String::new(),
            };
            return Err(err(key, format!("unknown field; {hint}valid fields are: {}", FIELDS.join(", "))));
        }
    }
    Ok(())
}

/// The field a misspelt key most likely meant: the same letters without `_`/`-` or case
/// (`baseurl`, `API-Key`), or at most two edits away.
fn closest_field(key: &str) -> Option<&'static str> {
    let squash = |s: &str| s.chars().filter(|c| c.is_ascii_alphanumeric()).collect::<String>().to_ascii_lowercase();
    let wanted = squash(key);
    if let Some(f) = FIELDS.iter().find(|f| squash(f) == wanted) {
        return Some(f);
    }
    FIELDS
        .iter()
        .map(|f| (edit_distance(&squash(f), &wanted), *f))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, f)| f)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

fn as_object(v: &Value) -> Result<&Map<String, Value>, FieldError> {
    v.as_object().ok_or_else(|| err("body", "must be a JSON object"))
}

fn string<'a>(v: &'a Value, field: &str) -> Result<&'a str, FieldError> {
    v.as_str().ok_or_else(|| err(field, "must be a string"))
}

fn optional_int(v: &Value, field: &str) -> Result<Option<i64>, FieldError> {
    match v {
        Value::Null => Ok(None),
        _ => v.as_i64().map(Some).ok_or_else(|| err(field, "must be a whole number")),
    }
}

fn string_map(v: &Value, field: &str) -> Result<BTreeMap<String, String>, FieldError> {
    let Value::Object(obj) = v else { return Err(err(field, "must be an object of string values")) };
    obj.iter()
        .map(|(k, v)| {
            let v = v.as_str().ok_or_else(|| err(field, format!("value of '{k}' must be a string")))?;
            Ok((k.clone(), v.to_string()))
        })
        .collect()
}

/// An http(s) URL with a host, no query, no fragment, no credentials; trailing `/` removed so
/// that path joining (SPEC §8) is unambiguous.
fn validate_base_url(raw: &str) -> Result<String, FieldError> {
    let raw = raw.trim();
    let url = url::Url::parse(raw).map_err(|e| {
        err("base_url", format!("'{raw}' is not a valid URL ({e}); expected e.g. https://api.anthropic.com"))
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(err("base_url", format!("must use http or https (got '{}')", url.scheme())));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(err("base_url", "must include a host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(err("base_url", "must not contain a query string or fragment"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(err("base_url", "must not embed credentials; use api_key"));
    }
    Ok(url.as_str().trim_end_matches('/').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Value {
        json!({"name": "kimi", "base_url": "https://api.moonshot.cn/anthropic/", "api_key": "sk-abcdefghijklmnop", "format": "anthropic"})
    }

    #[test]
    fn create_applies_defaults_and_normalises_url() {
        let d = EndpointDraft::create(&base()).unwrap();
        assert_eq!(d.base_url, "https://api.moonshot.cn/anthropic");
        assert!(d.enabled);
        assert!(!d.fast);
        assert_eq!(d.sort_order, None);
    }

    #[test]
    fn every_invalid_input_names_its_field() {
        let cases: Vec<(Value, &str)> = vec![
            (json!({"format": "vertex"}), "format"),
            (json!({"base_url": "not a url"}), "base_url"),
            (json!({"base_url": "ftp://x.y"}), "base_url"),
            (json!({"base_url": "https://x.y/v1?k=1"}), "base_url"),
            (json!({"base_url": "https://u:p@x.y"}), "base_url"),
            (json!({"name": "bad name"}), "name"),
            (json!({"name": ""}), "name"),
            (json!({"models": "claude-*"}), "models"),
            (json!({"models": [1]}), "models"),
            (json!({"model_map": {"a": 1}}), "model_map"),
            (json!({"headers": {"Authorization": "x"}}), "headers"),
            (json!({"headers": {"bad header": "x"}}), "headers"),
            (json!({"enabled": "yes"}), "enabled"),
            (json!({"fast_sort_order": "1"}), "fast_sort_order"),
            (json!({"bogus": 1}), "bogus"),
            (json!({"test_status": "available"}), "test_status"),
            (json!({"price_multiplier": 0}), "price_multiplier"),
            (json!({"price_multiplier": -1.5}), "price_multiplier"),
            (json!({"price_multiplier": 100.01}), "price_multiplier"),
            (json!({"price_multiplier": "2"}), "price_multiplier"),
            (json!({"price_multiplier": null}), "price_multiplier"),
        ];
        for (patch, field) in cases {
            let mut obj = base();
            for (k, v) in patch.as_object().unwrap() {
                obj[k] = v.clone();
            }
            let e = EndpointDraft::create(&obj).unwrap_err();
            assert_eq!(e.field, field, "{patch}: {e}");
        }
        assert_eq!(EndpointDraft::create(&json!({"name": "x"})).unwrap_err().field, "base_url");
        assert_eq!(EndpointDraft::create(&json!([])).unwrap_err().field, "body");
    }

    #[test]
    fn a_misspelt_field_is_unknown_even_when_it_hides_a_required_one() {
        for (key, meant) in
            [("baseurl", "base_url"), ("apikey", "api_key"), ("Base-URL", "base_url"), ("modles", "models")]
        {
            let mut obj = base();
            let value = obj.as_object_mut().unwrap().remove(meant).unwrap_or(json!(["m"]));
            obj[key] = value;
            let e = EndpointDraft::create(&obj).unwrap_err();
            assert_eq!(e.field, key, "{e}");
            assert!(e.message.starts_with(&format!("unknown field; did you mean '{meant}'?")), "{e}");
        }
        let e = EndpointDraft::create(&json!({"name": "x", "zzz": 1})).unwrap_err();
        assert_eq!((e.field.as_str(), e.message.starts_with("unknown field; valid fields are")), ("zzz", true), "{e}");
    }

    #[test]
    fn patch_changes_only_given_fields_and_masked_key_keeps_secret() {
        let mut d = EndpointDraft::create(&base()).unwrap();
        let masked = mask_secret(&d.api_key);
        d.apply(&json!({"api_key": masked, "fast": true, "models": ["a", "a", " b "]})).unwrap();
        assert_eq!(d.api_key, "sk-abcdefghijklmnop");
        assert!(d.fast);
        assert_eq!(d.models, vec!["a", "b"]);
        d.apply(&json!({"api_key": "sk-new"})).unwrap();
        assert_eq!(d.api_key, "sk-new");
    }

    #[test]
    fn price_multiplier_defaults_to_one_and_accepts_the_range() {
        assert_eq!(EndpointDraft::create(&base()).unwrap().price_multiplier, 1.0);
        let mut d = EndpointDraft::create(&base()).unwrap();
        for m in [0.01, 0.5, 1.0, 2.5, 100.0] {
            d.apply(&json!({"price_multiplier": m})).unwrap();
            assert_eq!(d.price_multiplier, m);
        }
        // Whole numbers (as TOML and JSON write them) are numbers too.
        d.apply(&json!({"price_multiplier": 3})).unwrap();
        assert_eq!(d.price_multiplier, 3.0);
        d.apply(&json!({"price_multiplier": 100})).unwrap();
        // A rejected value leaves the draft as it was.
        assert!(d.apply(&json!({"price_multiplier": 0})).is_err());
        assert_eq!(d.price_multiplier, 100.0);
    }
}
