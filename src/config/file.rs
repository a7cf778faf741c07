//! The `--config ccmesh.toml` file: endpoints (`[[endpoints]]`), settings (`[settings...]`),
//! model prices (`[[prices]]`) and client keys (`[[keys]]`) with the same keys as the admin
//! API's JSON, upserted by name into the database at start. A declared key's `secret` (from
//! `${ENV}`, so that every machine loading the file accepts the same secret) is hashed when the
//! file is read; only the hash is kept.
//! Strings may reference environment variables as `${NAME}`, so keys need not live in the file.

use serde_json::Value;

use crate::config::Settings;
use crate::endpoint::{EndpointDraft, FieldError};
use crate::keys::key::KeyDraft;
use crate::keys::secret::SecretHash;
use crate::observe::cost::{Price, validate_model};
use crate::store::{Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path} is not valid TOML: {message}")]
    Toml { path: String, message: String },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
    #[error("{path}: {source}")]
    Store { path: String, source: StoreError },
}

/// What a config file declares, validated.
#[derive(Debug)]
pub struct ConfigFile {
    /// `[config] authoritative = true`: the file's endpoints, settings and prices replace the
    /// database's at start and on every reload (`config::authoritative`), instead of being
    /// upserted once at start.
    pub authoritative: bool,
    /// `[[endpoints]]`, each with its name.
    pub endpoints: Vec<(Value, String)>,
    /// Whether the file has an endpoints table at all (in the authoritative mode, endpoints the
    /// file does not declare stay the database's).
    pub declares_endpoints: bool,
    pub settings: Option<Value>,
    /// `[[prices]]`: price overrides by model name (or `*` glob).
    pub prices: Vec<(String, Price)>,
    pub declares_prices: bool,
    /// `[[keys]]`: client keys, each with its secret's hash and prefix (never the secret).
    pub keys: Vec<(KeyDraft, SecretHash, String)>,
    pub declares_keys: bool,
}

/// Parse and validate (without touching the database), so errors surface before binding a port.
pub fn load(path: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<ConfigFile, ConfigFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read { path: path.into(), source })?;
    parse(path, &text, env)
}

pub fn parse(path: &str, text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<ConfigFile, ConfigFileError> {
    let invalid = |message: String| ConfigFileError::Invalid { path: path.into(), message };
    let table: toml::Table =
        toml::from_str(text).map_err(|e| ConfigFileError::Toml { path: path.into(), message: e.to_string() })?;
    let mut doc = serde_json::to_value(&table).map_err(|e| invalid(e.to_string()))?;
    interpolate(&mut doc, env).map_err(invalid)?;
    let Value::Object(mut top) = doc else { return Err(invalid("expected a table".into())) };
    for key in top.keys() {
        if !matches!(key.as_str(), "endpoints" | "settings" | "prices" | "keys" | "config") {
            return Err(invalid(format!(
                "unknown top-level key '{key}'; expected [config], [[endpoints]], [settings], [[prices]] and [[keys]]"
            )));
        }
    }
    let authoritative = match top.remove("config") {
        None => false,
        Some(Value::Object(config)) => {
            if let Some(other) = config.keys().find(|k| k.as_str() != "authoritative") {
                return Err(invalid(format!("config.{other}: unknown key; [config] has only `authoritative`")));
            }
            match config.get("authoritative") {
                None => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(invalid("config.authoritative: must be true or false".into())),
            }
        }
        Some(_) => return Err(invalid("config must be a table ([config])".into())),
    };
    let declares_endpoints = top.contains_key("endpoints");
    let declares_prices = top.contains_key("prices");
    let mut endpoints = Vec::new();
    if let Some(list) = top.remove("endpoints") {
        let Value::Array(items) = list else {
            return Err(invalid("endpoints must be an array of tables ([[endpoints]])".into()));
        };
        for (i, item) in items.into_iter().enumerate() {
            let draft = EndpointDraft::create(&item)
                .map_err(|e| invalid(format!("endpoints[{i}].{}: {}", e.field, e.message)))?;
            if endpoints.iter().any(|(_, n): &(Value, String)| n.eq_ignore_ascii_case(&draft.name)) {
                return Err(invalid(format!("endpoints[{i}].name: '{}' is declared twice", draft.name)));
            }
            endpoints.push((item, draft.name));
        }
    }
    let settings = top.remove("settings");
    if let Some(s) = &settings {
        Settings::default().patched(s).map_err(|e| invalid(format!("settings: {e}")))?;
    }
    let mut prices: Vec<(String, Price)> = Vec::new();
    if let Some(list) = top.remove("prices") {
        let Value::Array(items) = list else {
            return Err(invalid("prices must be an array of tables ([[prices]])".into()));
        };
        for (i, item) in items.into_iter().enumerate() {
            let model = match item.get("model") {
                Some(Value::String(m)) => validate_model(m),
                Some(_) => Err(FieldError { field: "model".into(), message: "must be a string".into() }),
                None => Err(FieldError { field: "model".into(), message: "is required".into() }),
            }
            .map_err(|e| invalid(format!("prices[{i}].{}: {}", e.field, e.message)))?;
            let price = Price::from_json(&item, &["model"])
                .map_err(|e| invalid(format!("prices[{i}].{}: {}", e.field, e.message)))?;
            if prices.iter().any(|(m, _)| m.eq_ignore_ascii_case(&model)) {
                return Err(invalid(format!("prices[{i}].model: '{model}' is declared twice")));
            }
            prices.push((model, price));
        }
    }
    let declares_keys = top.contains_key("keys");
    let mut keys: Vec<(KeyDraft, SecretHash, String)> = Vec::new();
    if let Some(list) = top.remove("keys") {
        let Value::Array(items) = list else {
            return Err(invalid("keys must be an array of tables ([[keys]])".into()));
        };
        for (i, item) in items.into_iter().enumerate() {
            let (draft, hash, prefix) = crate::keys::key::declared(&item)
                .map_err(|e| invalid(format!("keys[{i}].{}: {}", e.field, e.message)))?;
            if keys.iter().any(|(d, _, _)| d.name.eq_ignore_ascii_case(&draft.name)) {
                return Err(invalid(format!("keys[{i}].name: '{}' is declared twice", draft.name)));
            }
            if keys.iter().any(|(_, h, _)| *h == hash) {
                return Err(invalid(format!("keys[{i}].secret: two keys have the same secret")));
            }
            keys.push((draft, hash, prefix));
        }
    }
    Ok(ConfigFile {
        authoritative,
        endpoints,
        declares_endpoints,
        settings,
        prices,
        declares_prices,
        keys,
        declares_keys,
    })
}

impl ConfigFile {
    /// Upsert by name: existing endpoints get the declared fields (others keep their values),
    /// new ones are created. Settings are merged over what is stored.
    pub fn apply(&self, path: &str, store: &Store) -> Result<(), ConfigFileError> {
        let store_err = |source| ConfigFileError::Store { path: path.into(), source };
        let invalid = |message: String| ConfigFileError::Invalid { path: path.into(), message };
        let existing = store.list_endpoints().map_err(store_err)?;
        for (item, name) in &self.endpoints {
            match existing.iter().find(|e| e.name.eq_ignore_ascii_case(name)) {
                Some(current) => {
                    let mut draft = current.to_draft();
                    draft.apply(item).map_err(|e| invalid(format!("{name}.{}: {}", e.field, e.message)))?;
                    store.update_endpoint(&current.name, &draft).map_err(store_err)?;
                }
                None => {
                    let draft = EndpointDraft::create(item)
                        .map_err(|e| invalid(format!("{name}.{}: {}", e.field, e.message)))?;
                    store.insert_endpoint(&draft).map_err(store_err)?;
                }
            }
        }
        if let Some(patch) = &self.settings {
            let current = match store.load_settings().map_err(store_err)? {
                Some(doc) => Settings::default().patched(&doc).unwrap_or_default(),
                None => Settings::default(),
            };
            let next = current.patched(patch).map_err(|e| invalid(format!("settings: {e}")))?;
            store.save_settings(&next.to_document()).map_err(store_err)?;
        }
        // Overrides the file declares replace stored ones of the same name; others (set through
        // the admin API) stay.
        for (model, price) in &self.prices {
            store.upsert_price(model, price).map_err(store_err)?;
        }
        self.apply_keys(store).map_err(store_err)?;
        Ok(())
    }

    /// Upsert the declared keys by name (fields and secret; spend is kept under the name).
    pub fn apply_keys(&self, store: &Store) -> Result<(), StoreError> {
        let now = crate::keys::now_ms(&crate::clock::SystemClock);
        for (draft, hash, prefix) in &self.keys {
            store.upsert_declared_key(draft, *hash, prefix, now)?;
        }
        Ok(())
    }
}

/// Replace `${NAME}` in every string. Every variable that is unset or empty is reported at
/// once, with where it is used, so one start tells the user everything to export (an empty key
/// would only fail later, at the upstream, as a 401).
fn interpolate(v: &mut Value, env: &dyn Fn(&str) -> Option<String>) -> Result<(), String> {
    let mut problems = Problems::default();
    substitute(v, env, "", &mut problems);
    problems.into_result()
}

/// What interpolation found wrong, by kind, in file order.
#[derive(Default)]
struct Problems {
    /// (variable, where)
    unset: Vec<(String, String)>,
    empty: Vec<(String, String)>,
    other: Vec<String>,
}

impl Problems {
    fn into_result(self) -> Result<(), String> {
        let list = |items: &[(String, String)]| {
            items.iter().map(|(name, at)| format!("{name} (in {at})")).collect::<Vec<_>>().join(", ")
        };
        let mut parts = self.other;
        match self.unset.len() {
            0 => {}
            1 => parts.push(format!("environment variable {} is not set", list(&self.unset))),
            _ => parts.push(format!("environment variables not set: {}", list(&self.unset))),
        }
        match self.empty.len() {
            0 => {}
            1 => parts.push(format!("environment variable {} is empty", list(&self.empty))),
            _ => parts.push(format!("environment variables empty: {}", list(&self.empty))),
        }
        if parts.is_empty() {
            return Ok(());
        }
        let mut names: Vec<&str> = Vec::new();
        for (name, _) in self.unset.iter().chain(&self.empty) {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
        let mut message = parts.join("; ");
        if !names.is_empty() {
            message.push_str(&format!("; export {} before `ccmesh serve`", names.join(", ")));
        }
        Err(message)
    }
}

fn substitute(v: &mut Value, env: &dyn Fn(&str) -> Option<String>, at: &str, problems: &mut Problems) {
    match v {
        Value::String(s) if s.contains("${") => {
            let mut out = String::with_capacity(s.len());
            let mut rest = s.as_str();
            while let Some(start) = rest.find("${") {
                out.push_str(&rest[..start]);
                let after = &rest[start + 2..];
                let Some(end) = after.find('}') else {
                    problems.other.push(format!("{at}: unterminated ${{ in a string"));
                    return;
                };
                let name = &after[..end];
                match env(name) {
                    Some(value) if !value.trim().is_empty() => out.push_str(&value),
                    Some(_) => problems.empty.push((name.to_string(), at.to_string())),
                    None => problems.unset.push((name.to_string(), at.to_string())),
                }
                rest = &after[end + 1..];
            }
            out.push_str(rest);
            *s = out;
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                substitute(item, env, &format!("{at}[{i}]"), problems);
            }
        }
        Value::Object(map) => {
            for (k, item) in map.iter_mut() {
                let path = if at.is_empty() { k.clone() } else { format!("{at}.{k}") };
                substitute(item, env, &path, problems);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Protocol;

    const FILE: &str = r#"
[[endpoints]]
name = "anthropic"
base_url = "https://api.anthropic.com"
api_key = "${TEST_ANTHROPIC_KEY}"
format = "anthropic"
models = ["claude-*"]
fast = true

[[endpoints]]
name = "glm"
base_url = "https://open.bigmodel.cn/api/anthropic"
api_key = "prefix-${TEST_GLM_KEY}-suffix"
format = "anthropic"
model_map = { "claude-sonnet-4-5" = "glm-4.6" }

[settings]
routing_strategy = "priority"

[settings.breaker.claude]
failure_threshold = 5

[[prices]]
model = "glm-4.6"
input = 0.5
output = 2
cache_read = 0.1
cache_write = 0.5

[[prices]]
model = "my-relay-*"
input = 1
output = 4
"#;

    fn env(name: &str) -> Option<String> {
        match name {
            "TEST_ANTHROPIC_KEY" => Some("sk-ant-xyz".into()),
            "TEST_GLM_KEY" => Some("glm".into()),
            _ => None,
        }
    }

    #[test]
    fn parses_interpolates_and_upserts() {
        let file = parse("t.toml", FILE, &env).unwrap();
        let store = Store::open_in_memory().unwrap();
        file.apply("t.toml", &store).unwrap();
        let eps = store.list_endpoints().unwrap();
        assert_eq!(eps[0].api_key, "sk-ant-xyz");
        assert_eq!(eps[1].api_key, "prefix-glm-suffix");
        assert!(eps[0].fast);
        let settings = Settings::default().patched(&store.load_settings().unwrap().unwrap()).unwrap();
        assert_eq!(settings.breaker(Protocol::Claude).failure_threshold, 5);

        // A second start with a changed file updates by name and keeps what the file omits.
        store.set_order(&["glm".into()]).unwrap();
        let changed = FILE.replace("claude-*", "claude-opus-*");
        parse("t.toml", &changed, &env).unwrap().apply("t.toml", &store).unwrap();
        let eps = store.list_endpoints().unwrap();
        assert_eq!(eps.len(), 2);
        assert_eq!(eps[0].name, "glm");
        assert_eq!(eps[1].models[0].as_str(), "claude-opus-*");
    }

    #[test]
    fn prices_are_upserted_over_the_builtin_table() {
        use crate::observe::cost::{PriceSource, PriceTable};
        let store = Store::open_in_memory().unwrap();
        // An override set through the admin API before this start survives it.
        let api = Price { input: 9.0, output: 9.0, cache_read: 9.0, cache_write: 9.0 };
        store.upsert_price("from-api", &api).unwrap();
        parse("t.toml", FILE, &env).unwrap().apply("t.toml", &store).unwrap();
        let table = PriceTable::load(&store).unwrap();
        assert_eq!(table.price("glm-4.6"), Some(Price { input: 0.5, output: 2.0, cache_read: 0.1, cache_write: 0.5 }));
        assert_eq!(table.lookup("glm-4.6").unwrap().source, PriceSource::Custom);
        // Omitted cache prices are the input price; globs work.
        assert_eq!(
            table.price("my-relay-large"),
            Some(Price { input: 1.0, output: 4.0, cache_read: 1.0, cache_write: 1.0 })
        );
        assert_eq!(table.price("from-api"), Some(api));
        // A second start with changed numbers replaces them.
        let changed = FILE.replace("input = 0.5", "input = 0.6");
        parse("t.toml", &changed, &env).unwrap().apply("t.toml", &store).unwrap();
        assert_eq!(PriceTable::load(&store).unwrap().price("glm-4.6").unwrap().input, 0.6);
        assert_eq!(store.list_prices().unwrap().len(), 3);
    }

    #[test]
    fn price_errors_name_the_entry_and_field() {
        let cases = [
            ("[[prices]]\ninput = 1\noutput = 2\n", "prices[0].model: is required"),
            ("[[prices]]\nmodel = 3\ninput = 1\noutput = 2\n", "prices[0].model: must be a string"),
            ("[[prices]]\nmodel = \"x\"\ninput = -1\noutput = 2\n", "prices[0].input: must be 0 or more"),
            ("[[prices]]\nmodel = \"x\"\ninput = 1\n", "prices[0].output: is required"),
            ("[[prices]]\nmodel = \"x\"\ninput = 1\noutput = \"2\"\n", "prices[0].output: must be a number"),
            ("[[prices]]\nmodel = \"x\"\ninput = 1\noutput = 2\ncache = 1\n", "prices[0].cache: unknown field"),
            (
                "[[prices]]\nmodel = \"x\"\ninput = 1\noutput = 2\n[[prices]]\nmodel = \"X\"\ninput = 1\noutput = 2\n",
                "prices[1].model: 'X' is declared twice",
            ),
            ("prices = 3\n", "prices must be an array of tables"),
        ];
        for (text, want) in cases {
            let got = parse("t.toml", text, &env).unwrap_err().to_string();
            assert!(got.contains(want), "{text}: {got}");
        }
    }

    #[test]
    fn declared_keys_are_hashed_at_load_and_upserted_by_name() {
        let secret = "ccm-from-the-environment-0123456789";
        let text = r#"
[[keys]]
name = "ci"
secret = "${TEST_CI_KEY}"
models = ["claude-*"]
limits = { rpm = 30, usd_per_day = 2 }
"#;
        let env = |name: &str| (name == "TEST_CI_KEY").then(|| secret.to_string());
        let file = parse("t.toml", text, &env).unwrap();
        assert!(file.declares_keys);
        assert_eq!(file.keys[0].1, SecretHash::of(secret));
        assert!(!format!("{:?}", file.keys).contains(secret), "only the hash is kept");
        let store = Store::open_in_memory().unwrap();
        file.apply("t.toml", &store).unwrap();
        file.apply("t.toml", &store).unwrap();
        let keys = store.list_keys().unwrap();
        assert_eq!(keys.len(), 1);
        assert_eq!((keys[0].limits.rpm, keys[0].limits.usd_per_day, keys[0].declared), (Some(30), Some(2.0), true));
        assert_eq!(keys[0].secret_hash, SecretHash::of(secret));
        for (text, want) in [
            ("[[keys]]\nname = \"a\"\n", "keys[0].secret: is required"),
            ("[[keys]]\nname = \"a\"\nsecret = \"short\"\n", "keys[0].secret: must be at least 32"),
            (
                "[[keys]]\nname = \"a\"\nsecret = \"ccm-from-the-environment-0123456789\"\nlimits = { rpm = 0 }\n",
                "keys[0].limits.rpm",
            ),
            (
                "[[keys]]\nname = \"a\"\nsecret = \"ccm-from-the-environment-0123456789\"\n[[keys]]\nname = \"b\"\nsecret = \"ccm-from-the-environment-0123456789\"\n",
                "keys[1].secret: two keys have the same secret",
            ),
            ("keys = 1\n", "keys must be an array of tables"),
        ] {
            let got = parse("t.toml", text, &env).unwrap_err().to_string();
            assert!(got.contains(want), "{text}: {got}");
        }
    }

    #[test]
    fn every_missing_or_empty_variable_is_reported_at_once() {
        let none = parse("t.toml", FILE, &|_| None).unwrap_err().to_string();
        assert!(
            none.contains("environment variables not set: TEST_ANTHROPIC_KEY (in endpoints[0].api_key), TEST_GLM_KEY (in endpoints[1].api_key)"),
            "{none}"
        );
        assert!(none.contains("export TEST_ANTHROPIC_KEY, TEST_GLM_KEY"), "{none}");
        let empty = |name: &str| match name {
            "TEST_ANTHROPIC_KEY" => Some("  ".to_string()),
            _ => None,
        };
        let got = parse("t.toml", FILE, &empty).unwrap_err().to_string();
        assert!(got.contains("environment variable TEST_GLM_KEY (in endpoints[1].api_key) is not set"), "{got}");
        assert!(got.contains("environment variable TEST_ANTHROPIC_KEY (in endpoints[0].api_key) is empty"), "{got}");
    }

    #[test]
    fn errors_name_what_is_wrong() {
        let missing = parse("t.toml", FILE, &|_| None).unwrap_err().to_string();
        assert!(missing.contains("TEST_ANTHROPIC_KEY (in endpoints[0].api_key)"), "{missing}");
        let bad = parse("t.toml", "[[endpoints]]\nname = \"x\"\nbase_url = \"nope\"\nformat = \"openai\"\n", &env)
            .unwrap_err()
            .to_string();
        assert!(bad.contains("endpoints[0].base_url"), "{bad}");
        let bad = parse("t.toml", "[settings.breaker.claude]\nfailure_threshold = 99\n", &env).unwrap_err().to_string();
        assert!(bad.contains("breaker.claude.failure_threshold must be between 1 and 20"), "{bad}");
        let bad = parse("t.toml", "[oops]\n", &env).unwrap_err().to_string();
        assert!(bad.contains("unknown top-level key 'oops'"), "{bad}");
        let bad = parse("t.toml", "not toml = = =", &env).unwrap_err().to_string();
        assert!(bad.contains("not valid TOML"), "{bad}");
    }
}
