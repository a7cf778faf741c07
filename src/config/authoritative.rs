//! The authoritative-config mode (`[config] authoritative = true`, or
//! `serve --config-authoritative`): the config file is the source of truth. At start and on
//! every reload (`config::watch`: SIGHUP, or the file changing) what the file declares
//! replaces the database's, and the admin API refuses with 409 to change it.
//!
//! What "declares" means, section by section (SPEC §15.13: only what the file declares is
//! read-only; runtime state stays writable):
//!
//! - `[[endpoints]]` present: the endpoints are exactly the file's, in the file's order (or its
//!   `sort_order`s), each as the file writes it — a field it omits takes its default, as on a
//!   fresh create. Endpoints it does not name are deleted. An endpoint that stays keeps its row
//!   id, so its breaker and the current-endpoint memory survive (SPEC §5: no breaker reset).
//!   The API refuses creating, editing, deleting and reordering endpoints and setting the fast
//!   queue — except `enabled` of an endpoint whose table does not set it: the enable switch is
//!   the operator's incident tool, and a file that does not pin it leaves it to them (a reload
//!   keeps what they chose).
//! - `[settings]` present: the settings are the defaults with the file's values; `PATCH
//!   /api/settings` is refused.
//! - `[[prices]]` present: the price overrides are exactly the file's; `PUT`/`DELETE
//!   /api/prices/…` are refused.
//! - `[[keys]]` present: the client keys are exactly the file's (their spend, kept under their
//!   names, survives a reload); creating, editing, rotating and deleting keys is refused.
//! - A section the file does not have stays the database's, writable as usual.
//! - Always writable: the current endpoint, breaker resets, connectivity tests (their results
//!   are kept through reloads), and client keys unless a `[[keys]]` section declares them.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::Value;

use super::Settings;
use super::file::{ConfigFile, ConfigFileError};
use crate::endpoint::EndpointDraft;
use crate::store::Store;

/// How often the watcher looks at the file's modification time.
pub const POLL_EVERY: Duration = Duration::from_secs(2);

/// A part of the configuration a file can declare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    Endpoints,
    Settings,
    Prices,
    /// Client keys (SPEC §12), once they exist: declared by `[[keys]]`.
    Keys,
}

impl Section {
    fn as_str(self) -> &'static str {
        match self {
            Section::Endpoints => "endpoints",
            Section::Settings => "settings",
            Section::Prices => "prices",
            Section::Keys => "client keys",
        }
    }
}

/// What the file applied last declares.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Declared {
    pub endpoints: bool,
    pub settings: bool,
    pub prices: bool,
    pub keys: bool,
    /// Endpoints (lower-case names) whose table sets `enabled`.
    pub enabled_pinned: HashSet<String>,
}

impl Declared {
    pub fn of(file: &ConfigFile) -> Declared {
        Declared {
            endpoints: file.declares_endpoints,
            settings: file.settings.is_some(),
            prices: file.declares_prices,
            keys: file.declares_keys,
            enabled_pinned: file
                .endpoints
                .iter()
                .filter(|(item, _)| item.get("enabled").is_some())
                .map(|(_, name)| name.to_lowercase())
                .collect(),
        }
    }

    pub fn declares(&self, section: Section) -> bool {
        match section {
            Section::Endpoints => self.endpoints,
            Section::Settings => self.settings,
            Section::Prices => self.prices,
            Section::Keys => self.keys,
        }
    }
}

/// The file of a gateway in the authoritative mode, what it declared when last applied, and
/// how the watcher looks at it.
pub struct ConfigSource {
    pub path: PathBuf,
    pub poll_every: Duration,
    /// Whether SIGHUP reloads (the binary; not in-process tests, where a signal handler would be
    /// the whole test process's).
    pub on_sighup: bool,
    declared: RwLock<Declared>,
    /// The file's bytes when last read (applied or refused), so an unchanged file is not applied
    /// again when only its modification time moved.
    last_read: std::sync::Mutex<Option<Vec<u8>>>,
    /// Reloads finished so far, applied or refused (what a test waits on instead of sleeping).
    reloads: tokio::sync::watch::Sender<u64>,
    /// The file's modification time and length just before it was first read: the watcher's
    /// starting point, so a change made before it starts is not missed.
    pub(crate) first_stamp: Option<(std::time::SystemTime, u64)>,
}

/// What the watcher compares: a change of either means "read the file again".
pub(crate) fn stamp(path: &Path) -> Option<(std::time::SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

impl ConfigSource {
    pub fn new(
        path: PathBuf,
        declared: Declared,
        text: Vec<u8>,
        poll_every: Duration,
        on_sighup: bool,
    ) -> ConfigSource {
        ConfigSource {
            first_stamp: None,
            path,
            poll_every,
            on_sighup,
            declared: RwLock::new(declared),
            last_read: std::sync::Mutex::new(Some(text)),
            reloads: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Counts finished reloads (applied, refused as invalid, or skipped as unchanged).
    pub fn subscribe_reloads(&self) -> tokio::sync::watch::Receiver<u64> {
        self.reloads.subscribe()
    }

    pub(crate) fn reloaded(&self) {
        self.reloads.send_modify(|n| *n += 1);
    }

    pub fn declared(&self) -> Declared {
        self.declared.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn set_declared(&self, declared: Declared) {
        *self.declared.write().unwrap_or_else(|p| p.into_inner()) = declared;
    }

    /// Whether `text` differs from what was read last; remembers it.
    pub(crate) fn is_new(&self, text: &[u8]) -> bool {
        let mut last = self.last_read.lock().unwrap_or_else(|p| p.into_inner());
        if last.as_deref() == Some(text) {
            return false;
        }
        *last = Some(text.to_vec());
        true
    }

    /// Why an admin write to `section` is refused, if the file declares it: "the file rules".
    pub fn refusal(&self, section: Section) -> Option<String> {
        self.declared().declares(section).then(|| self.rules_message(section.as_str()))
    }

    /// The 409's message for a write to `what`.
    pub fn rules_message(&self, what: &str) -> String {
        format!(
            "the config file {} is authoritative for {what}: change it there (the gateway applies it when the file changes, or on SIGHUP)",
            self.path.display()
        )
    }

    /// An endpoint PATCH: refused when the file declares endpoints, unless it only switches
    /// `enabled` on an endpoint whose table does not set it.
    pub fn endpoint_patch_refusal(&self, name: &str, patch: &Value) -> Option<String> {
        let declared = self.declared();
        if !declared.endpoints {
            return None;
        }
        let only_enabled = patch.as_object().is_some_and(|o| !o.is_empty() && o.keys().all(|k| k == "enabled"));
        if only_enabled && !declared.enabled_pinned.contains(&name.to_lowercase()) {
            return None;
        }
        Some(self.rules_message("endpoints"))
    }
}

/// Read, validate and apply the file as the source of truth (at start, before the gateway
/// exists). Returns what the watcher needs.
pub fn load_and_apply(
    path: &Path,
    store: &Store,
    env: &dyn Fn(&str) -> Option<String>,
    poll_every: Duration,
    on_sighup: bool,
) -> Result<(ConfigFile, ConfigSource), ConfigFileError> {
    let shown = path.display().to_string();
    let first_stamp = stamp(path);
    let bytes = std::fs::read(path).map_err(|source| ConfigFileError::Read { path: shown.clone(), source })?;
    let text = String::from_utf8_lossy(&bytes);
    let file = super::file::parse(&shown, &text, env)?;
    claim_shared(store, &shown, &bytes, false)?;
    apply(&file, &shown, store)?;
    let mut source = ConfigSource::new(path.to_path_buf(), Declared::of(&file), bytes, poll_every, on_sighup);
    source.first_stamp = first_stamp;
    Ok((file, source))
}

/// On a database several gateways share, every one must load the same file (SPEC §15.13):
/// otherwise each start or reload would replace the others' configuration with its own, and
/// which one holds would depend on who started last. The database keeps the SHA-256 of the
/// file applied last; a start with a different file is refused (`replace` false), and a reload
/// of a changed file on a running gateway makes it the new reference (`replace` true) — the
/// way to roll out a new file: SIGHUP one running gateway, then restart or reload the others
/// with the same file. Without a shared database this does nothing.
pub fn claim_shared(store: &Store, path: &str, bytes: &[u8], replace: bool) -> Result<(), ConfigFileError> {
    let Some(pg) = store.postgres() else { return Ok(()) };
    let ours = crate::store::postgres::AppliedFile {
        digest: crate::clients::files::sha256_hex(bytes),
        path: path.to_string(),
        node: format!("node {}", pg.node()),
        applied_at_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
    };
    let stored =
        pg.claim_file(&ours, replace).map_err(|source| ConfigFileError::Store { path: path.into(), source })?;
    if stored.digest != ours.digest {
        return Err(ConfigFileError::Invalid {
            path: path.into(),
            message: format!(
                "this file differs from the authoritative config the other gateways on {} run (sha256 {}…, applied by {} from {} at {}); \
                 every gateway on a shared database must load the same file: deploy that file here, or apply this one with SIGHUP on a running gateway first",
                store.describe(),
                &stored.digest[..stored.digest.len().min(12)],
                stored.node,
                stored.path,
                crate::store::records::rfc3339_ms(stored.applied_at_ms),
            ),
        });
    }
    Ok(())
}

/// Make the database hold what `file` declares (see the module's rules).
pub fn apply(file: &ConfigFile, path: &str, store: &Store) -> Result<(), ConfigFileError> {
    let store_err = |source| ConfigFileError::Store { path: path.into(), source };
    let invalid = |message: String| ConfigFileError::Invalid { path: path.into(), message };
    if file.declares_endpoints {
        let existing = store.list_endpoints().map_err(store_err)?;
        let named = |n: &str| file.endpoints.iter().any(|(_, name)| name.eq_ignore_ascii_case(n));
        for gone in existing.iter().filter(|e| !named(&e.name)) {
            store.delete_endpoint(&gone.name).map_err(store_err)?;
        }
        let fast_declared = file.endpoints.iter().any(|(item, _)| item.get("fast").is_some());
        let mut fast_position = 0i64;
        for (index, (item, name)) in file.endpoints.iter().enumerate() {
            let mut draft =
                EndpointDraft::create(item).map_err(|e| invalid(format!("{name}.{}: {}", e.field, e.message)))?;
            let current = existing.iter().find(|e| e.name.eq_ignore_ascii_case(name));
            if item.get("sort_order").is_none() {
                draft.sort_order = Some(index as i64);
            }
            if draft.fast && item.get("fast_sort_order").is_none() {
                draft.fast_sort_order = Some(fast_position);
            }
            if draft.fast {
                fast_position = draft.fast_sort_order.unwrap_or(fast_position) + 1;
            }
            if !fast_declared {
                draft.fast = false;
                draft.fast_sort_order = None;
            }
            match current {
                Some(current) => {
                    // The operator's enable switch, when the file leaves it to them.
                    if item.get("enabled").is_none() {
                        draft.enabled = current.enabled;
                    }
                    store.update_endpoint(&current.name, &draft).map_err(store_err)?;
                }
                None => {
                    store.insert_endpoint(&draft).map_err(store_err)?;
                }
            }
        }
    }
    if let Some(patch) = &file.settings {
        let next = Settings::default().patched(patch).map_err(|e| invalid(format!("settings: {e}")))?;
        store.save_settings(&next.to_document()).map_err(store_err)?;
    }
    if file.declares_keys {
        for gone in store.list_keys().map_err(store_err)? {
            if !file.keys.iter().any(|(d, _, _)| d.name.eq_ignore_ascii_case(&gone.name)) {
                store.delete_key(&gone.name).map_err(store_err)?;
            }
        }
        file.apply_keys(store).map_err(store_err)?;
    }
    if file.declares_prices {
        for (model, _) in store.list_prices().map_err(store_err)? {
            if !file.prices.iter().any(|(m, _)| m.eq_ignore_ascii_case(&model)) {
                store.delete_price(&model).map_err(store_err)?;
            }
        }
        for (model, price) in &file.prices {
            store.upsert_price(model, price).map_err(store_err)?;
        }
    }
    Ok(())
}

/// A shared handle, as the gateway keeps it.
pub type SharedSource = Arc<ConfigSource>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::file::parse;

    fn env(_: &str) -> Option<String> {
        None
    }

    const FILE: &str = r#"
[config]
authoritative = true

[[endpoints]]
name = "a"
base_url = "http://127.0.0.1:1"
api_key = "sk-a-0000000000"
format = "anthropic"
models = ["claude-*"]

[[endpoints]]
name = "b"
base_url = "http://127.0.0.1:2"
api_key = "sk-b-0000000000"
format = "openai"
fast = true

[settings]
routing_strategy = "priority"

[[prices]]
model = "x"
input = 1
output = 2
"#;

    #[test]
    fn the_file_replaces_what_it_declares_and_keeps_ids() {
        let store = Store::open_in_memory().unwrap();
        // Stored before: an endpoint the file does not name, one it changes, other settings,
        // a price it does not declare.
        let old = |n: &str| {
            EndpointDraft::create(&serde_json::json!({"name": n, "base_url": "http://127.0.0.1:9", "api_key": "sk-old-0000000", "format": "anthropic", "test_model": "t"})).unwrap()
        };
        store.insert_endpoint(&old("gone")).unwrap();
        let a_before = store.insert_endpoint(&old("A")).unwrap();
        store.save_settings(&serde_json::json!({"rate_limit_backoff_budget_secs": 9})).unwrap();
        store
            .upsert_price(
                "old",
                &crate::observe::cost::Price { input: 1.0, output: 1.0, cache_read: 1.0, cache_write: 1.0 },
            )
            .unwrap();

        let file = parse("t.toml", FILE, &env).unwrap();
        assert!(file.authoritative);
        apply(&file, "t.toml", &store).unwrap();
        let eps = store.list_endpoints().unwrap();
        assert_eq!(eps.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(eps[0].id, a_before.id, "an endpoint that stays keeps its id");
        assert_eq!(eps[0].test_model, None, "omitted fields take their defaults");
        assert_eq!(eps[0].base_url, "http://127.0.0.1:1");
        assert!(eps[1].fast && eps[1].fast_sort_order == 0);
        let settings = Settings::default().patched(&store.load_settings().unwrap().unwrap()).unwrap();
        assert_eq!(
            settings.rate_limit_backoff_budget,
            Settings::default().rate_limit_backoff_budget,
            "replaced, not merged"
        );
        assert_eq!(settings.to_document()["routing_strategy"], "priority");
        assert_eq!(store.list_prices().unwrap().iter().map(|(m, _)| m.as_str()).collect::<Vec<_>>(), ["x"]);

        // An operator disabled `a` (the file does not pin `enabled`): a reload keeps that.
        let mut d = store.get_endpoint("a").unwrap().to_draft();
        d.enabled = false;
        store.update_endpoint("a", &d).unwrap();
        apply(&file, "t.toml", &store).unwrap();
        assert!(!store.get_endpoint("a").unwrap().enabled);
        let declared = Declared::of(&file);
        assert!(declared.endpoints && declared.settings && declared.prices && !declared.keys);
        assert!(declared.enabled_pinned.is_empty());
    }

    #[test]
    fn declared_keys_are_exactly_the_files() {
        use crate::keys::secret::SecretHash;
        let store = Store::open_in_memory().unwrap();
        let api_key = crate::keys::KeyDraft::create(&serde_json::json!({"name": "from-api"})).unwrap();
        store.insert_key(&api_key, SecretHash::of("ccm-api"), "ccm-api…", false, 0).unwrap();
        let text = "[config]\nauthoritative = true\n[[keys]]\nname = \"ci\"\nsecret = \"ccm-declared-secret-0123456789abcdef\"\n";
        let file = parse("t.toml", text, &env).unwrap();
        apply(&file, "t.toml", &store).unwrap();
        let names: Vec<String> = store.list_keys().unwrap().into_iter().map(|k| k.name).collect();
        assert_eq!(names, ["ci"]);
        let source = ConfigSource::new("c.toml".into(), Declared::of(&file), Vec::new(), POLL_EVERY, false);
        assert!(source.refusal(Section::Keys).unwrap().contains("authoritative for client keys"));
        // Without [[keys]] the keys stay the database's and writable.
        let file = parse("t.toml", "[config]\nauthoritative = true\n", &env).unwrap();
        apply(&file, "t.toml", &store).unwrap();
        assert_eq!(store.count_keys().unwrap(), 1);
        assert!(!Declared::of(&file).keys);
    }

    #[test]
    fn sections_the_file_does_not_have_stay_the_databases() {
        let store = Store::open_in_memory().unwrap();
        let kept = EndpointDraft::create(&serde_json::json!({"name": "kept", "base_url": "http://127.0.0.1:9", "api_key": "sk-old-0000000", "format": "anthropic"})).unwrap();
        store.insert_endpoint(&kept).unwrap();
        let file =
            parse("t.toml", "[config]\nauthoritative = true\n[settings]\nrouting_strategy = \"priority\"\n", &env)
                .unwrap();
        apply(&file, "t.toml", &store).unwrap();
        assert_eq!(store.list_endpoints().unwrap().len(), 1);
        let declared = Declared::of(&file);
        assert!(!declared.endpoints && declared.settings);
    }

    #[test]
    fn refusals_say_the_file_rules_and_leave_the_enable_switch() {
        let file = parse("t.toml", FILE, &env).unwrap();
        let source = ConfigSource::new("/etc/ccmesh.toml".into(), Declared::of(&file), Vec::new(), POLL_EVERY, false);
        let why = source.refusal(Section::Endpoints).unwrap();
        assert!(why.contains("/etc/ccmesh.toml is authoritative for endpoints"), "{why}");
        assert!(source.refusal(Section::Keys).is_none());
        assert!(source.endpoint_patch_refusal("a", &serde_json::json!({"enabled": false})).is_none());
        assert!(source.endpoint_patch_refusal("a", &serde_json::json!({"enabled": false, "models": []})).is_some());
        assert!(source.endpoint_patch_refusal("a", &serde_json::json!({"test_model": "x"})).is_some());
        let pinned = FILE.replace("fast = true", "fast = true\nenabled = true");
        let file = parse("t.toml", &pinned, &env).unwrap();
        let source = ConfigSource::new("c.toml".into(), Declared::of(&file), Vec::new(), POLL_EVERY, false);
        assert!(source.endpoint_patch_refusal("B", &serde_json::json!({"enabled": false})).is_some());
        assert!(source.endpoint_patch_refusal("a", &serde_json::json!({"enabled": false})).is_none());
    }
}
