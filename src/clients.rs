//! Pointing coding agents at the gateway (`ccmesh connect`, `disconnect`, `clients`), by editing
//! the few settings each one reads and nothing else.
//!
//! The rules, each from a way takeovers have gone wrong elsewhere:
//! - **Only the named keys change.** Each client module lists the keys it sets or removes; the
//!   format editors (`json_edit`, `formats` with `toml_edit`, `dotenv`) keep every other byte.
//! - **Atomic writes** (`files::atomic_write`): temp file, same permissions, rename.
//! - **A record and a backup per connect**, in `<data dir>/clients/<client>/`: `state.json` holds,
//!   per file and key, the value found before (`previous`) and the one written (`written`), the
//!   SHA-256 of the bytes written, and the name of the backup (the file as it was before ccmesh
//!   changed it).
//! - **Disconnect undoes exactly that.** A file still byte-identical to what `connect` wrote gets
//!   the backup's bytes back. A file changed since is restored key by key: a key that still holds
//!   what `connect` wrote gets its previous value (or goes, if there was none); a key someone
//!   changed since is left alone and reported. Nothing else in the file is touched.
//! - **Connecting again** first undoes the earlier connect in memory (as `disconnect` would), so
//!   the record keeps the user's values from before the first connect, never ccmesh's own.
//!
//! Everything here is synchronous file work with the environment passed in (`Environment`: the
//! home directory and the variables the clients honour), so the CLI, the admin API and the tests
//! run the same code against any directory.

pub mod claude_code;
pub mod codex;
pub mod dotenv;
pub mod files;
pub mod formats;
pub mod gemini_cli;
pub mod host;
pub mod json_edit;
pub mod service;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

pub use formats::FileFormat;

/// The clients `connect` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClientKind {
    ClaudeCode,
    Codex,
    GeminiCli,
}

impl ClientKind {
    pub const ALL: [ClientKind; 3] = [ClientKind::ClaudeCode, ClientKind::Codex, ClientKind::GeminiCli];

    pub fn id(self) -> &'static str {
        match self {
            ClientKind::ClaudeCode => "claude-code",
            ClientKind::Codex => "codex",
            ClientKind::GeminiCli => "gemini-cli",
        }
    }

    pub fn parse(s: &str) -> Option<ClientKind> {
        match s.to_ascii_lowercase().as_str() {
            "claude-code" | "claude" | "claudecode" => Some(ClientKind::ClaudeCode),
            "codex" | "codex-cli" => Some(ClientKind::Codex),
            "gemini-cli" | "gemini" => Some(ClientKind::GeminiCli),
            _ => None,
        }
    }

    pub fn display_name(self) -> &'static str {
        match self {
            ClientKind::ClaudeCode => "Claude Code",
            ClientKind::Codex => "Codex CLI",
            ClientKind::GeminiCli => "Gemini CLI",
        }
    }

    /// The command the client installs.
    pub fn binary(self) -> &'static str {
        match self {
            ClientKind::ClaudeCode => "claude",
            ClientKind::Codex => "codex",
            ClientKind::GeminiCli => "gemini",
        }
    }

    fn plan(self, env: &Environment, target: &Target) -> Vec<FilePlan> {
        match self {
            ClientKind::ClaudeCode => claude_code::plan(env, target),
            ClientKind::Codex => codex::plan(env, target),
            ClientKind::GeminiCli => gemini_cli::plan(env, target),
        }
    }

    /// The client's own configuration directory.
    pub fn config_dir(self, env: &Environment) -> PathBuf {
        match self {
            ClientKind::ClaudeCode => claude_code::config_dir(env),
            ClientKind::Codex => codex::config_dir(env),
            ClientKind::GeminiCli => gemini_cli::config_dir(env),
        }
    }

    /// The base URL the client's files point it at, if they set one.
    fn configured_url(self, env: &Environment) -> Result<Option<String>, ClientError> {
        match self {
            ClientKind::ClaudeCode => claude_code::configured_url(env),
            ClientKind::Codex => codex::configured_url(env),
            ClientKind::GeminiCli => gemini_cli::configured_url(env),
        }
    }

    /// What the user should know after a connect.
    fn notes(self, target: &Target) -> Vec<String> {
        match self {
            ClientKind::ClaudeCode => claude_code::notes(target),
            ClientKind::Codex => codex::notes(target),
            ClientKind::GeminiCli => gemini_cli::notes(target),
        }
    }
}

impl std::fmt::Display for ClientKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id())
    }
}

/// The user's home and the environment variables the clients read their locations from
/// (`CLAUDE_CONFIG_DIR`, `CODEX_HOME`, `PATH`), passed in rather than read here.
#[derive(Debug, Clone)]
pub struct Environment {
    pub home: PathBuf,
    pub vars: BTreeMap<String, String>,
}

impl Environment {
    /// The running process's home and variables.
    pub fn from_process() -> Option<Environment> {
        let home = dirs::home_dir()?;
        let vars = ["CLAUDE_CONFIG_DIR", "CODEX_HOME", "PATH"]
            .iter()
            .filter_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()).map(|v| (k.to_string(), v)))
            .collect();
        Some(Environment { home, vars })
    }

    /// Just a home directory (tests).
    pub fn with_home(home: impl Into<PathBuf>) -> Environment {
        Environment { home: home.into(), vars: BTreeMap::new() }
    }

    pub fn var(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str).filter(|v| !v.is_empty())
    }

    /// `~/…` for messages.
    pub fn display(&self, path: &Path) -> String {
        match path.strip_prefix(&self.home) {
            Ok(rest) => format!("~/{}", rest.display()),
            Err(_) => path.display().to_string(),
        }
    }

    fn on_path(&self, binary: &str) -> bool {
        self.var("PATH").is_some_and(|p| std::env::split_paths(p).any(|d| d.join(binary).is_file()))
    }
}

/// Where `connect` points the client, and with which key.
#[derive(Clone)]
pub struct Target {
    /// The gateway's base URL, e.g. `http://127.0.0.1:3999` (no trailing slash).
    pub server: String,
    /// The token the client sends: a client key, or a placeholder when the gateway has none.
    pub key: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target").field("server", &self.server).field("key", &"<hidden>").finish()
    }
}

/// What a client sends when the gateway has no client keys: any non-empty token works then (the
/// gateway replaces credentials with the endpoint's key), and the name says what it is.
pub const PLACEHOLDER_KEY: &str = "ccmesh-no-client-key";

/// One file a client reads, and the keys `connect` sets in it.
#[derive(Debug, Clone)]
pub struct FilePlan {
    pub path: PathBuf,
    pub format: FileFormat,
    pub edits: Vec<KeyEdit>,
}

/// One key: its path in the file, the raw value to write (`None`: remove it), and whether the
/// value is a secret (never shown; reported as "a key").
#[derive(Debug, Clone)]
pub struct KeyEdit {
    pub key: Vec<String>,
    pub value: Option<String>,
    pub secret: bool,
    /// What the report shows for a value that mixes a secret with things worth seeing.
    pub shown: Option<String>,
}

impl KeyEdit {
    pub fn set(key: &[&str], raw: String, secret: bool) -> KeyEdit {
        KeyEdit { key: key.iter().map(|s| s.to_string()).collect(), value: Some(raw), secret, shown: None }
    }
    pub fn remove(key: &[&str], secret: bool) -> KeyEdit {
        KeyEdit { key: key.iter().map(|s| s.to_string()).collect(), value: None, secret, shown: None }
    }
    pub fn shown_as(mut self, shown: String) -> KeyEdit {
        self.shown = Some(shown);
        self
    }
}

/// `state.json`: what one connect did, enough to undo it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub client: ClientKind,
    pub server: String,
    pub connected_at: String,
    pub files: Vec<FileRecord>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileRecord {
    pub path: PathBuf,
    pub format: FileFormat,
    /// Whether the file existed before ccmesh first changed it.
    pub existed: bool,
    /// File name, inside the client's record directory, of the bytes before the change.
    pub backup: Option<String>,
    pub written_sha256: String,
    pub keys: Vec<KeyRecord>,
    /// Objects or tables `connect` created to hold its keys, deepest first: removed again when
    /// they are empty after a key-by-key restore.
    pub created: Vec<Vec<String>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KeyRecord {
    pub key: Vec<String>,
    pub previous: Option<String>,
    pub written: Option<String>,
    pub secret: bool,
    /// For a removed key: the key that followed it, where a restore puts it back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anchor: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{0}")]
    Refused(String),
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("{0} is not connected by ccmesh: there is no record of a connect in {1}")]
    NotConnected(ClientKind, String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ClientError {
    let what = what.into();
    move |source| ClientError::Io { what, source }
}

/// One line of a report: what happened to one key.
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    pub file: String,
    pub key: String,
    /// `set`, `removed`, `restored`, `kept` (changed by someone else since: left alone).
    pub action: &'static str,
    /// The value, or "(a key)" for secrets; `None` when there is nothing to show.
    pub value: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub client: ClientKind,
    pub changes: Vec<Change>,
    /// Files restored to their exact bytes from the backup (disconnect).
    pub restored_exactly: Vec<String>,
    /// Files `connect` had created and nobody changed since, removed again (disconnect).
    pub removed_files: Vec<String>,
    pub backups: Vec<String>,
    pub notes: Vec<String>,
}

/// Where the records and backups live: `<data dir>/clients/<client>/`.
pub fn record_dir(data_dir: &Path, client: ClientKind) -> PathBuf {
    data_dir.join("clients").join(client.id())
}

pub fn load_record(data_dir: &Path, client: ClientKind) -> Result<Option<Record>, ClientError> {
    let path = record_dir(data_dir, client).join("state.json");
    let Some(bytes) = files::read_optional(&path).map_err(io(format!("cannot read {}", path.display())))? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        ClientError::Refused(format!(
            "{} is damaged ({e}); the backups beside it are the files as they were before connect",
            path.display()
        ))
    })
}

fn read_text(env: &Environment, path: &Path) -> Result<Option<String>, ClientError> {
    let bytes = files::read_optional(path).map_err(io(format!("cannot read {}", env.display(path))))?;
    bytes
        .map(|b| {
            String::from_utf8(b).map_err(|_| {
                ClientError::Refused(format!("{} is not UTF-8 text; ccmesh leaves it alone", env.display(path)))
            })
        })
        .transpose()
}

fn shown(key: &KeyRecord, raw: Option<&str>, format: FileFormat) -> Option<String> {
    if key.secret {
        return raw.map(|_| "(a key)".to_string());
    }
    raw.map(|r| match format {
        FileFormat::Json => serde_json::from_str::<String>(r).unwrap_or_else(|_| r.to_string()),
        FileFormat::Dotenv => dotenv::get_value(r, &key.key[0]).unwrap_or_else(|| r.to_string()),
        FileFormat::Toml => r.trim_matches('"').to_string(),
    })
}

/// Undo one file's record on `current` key by key: the keys still holding what connect wrote get
/// their previous values; the others are reported. Returns the text and the changes.
fn restore_keys(rec: &FileRecord, current: &str, file: &str) -> Result<(String, Vec<Change>), String> {
    let mut text = current.to_string();
    let mut changes = Vec::new();
    for key in rec.keys.iter().rev() {
        let now = rec.format.get(&text, &key.key)?;
        let ours = match (&now, &key.written) {
            (Some(a), Some(b)) => rec.format.same(a, b),
            (None, None) => true,
            _ => false,
        };
        let name = key.key.join(".");
        if ours {
            text = rec.format.restore(&text, &key.key, key.previous.as_deref(), key.anchor.as_deref())?;
            changes.push(Change {
                file: file.to_string(),
                key: name,
                action: if key.previous.is_some() { "restored" } else { "removed" },
                value: shown(key, key.previous.as_deref(), rec.format),
            });
        } else {
            changes.push(Change {
                file: file.to_string(),
                key: name,
                action: "kept",
                value: shown(key, now.as_deref(), rec.format),
            });
        }
    }
    for parent in &rec.created {
        text = rec.format.prune(&text, parent)?;
    }
    changes.reverse();
    Ok((text, changes))
}

/// Point `client` at `target`. `now` names the backup.
pub fn connect(
    client: ClientKind,
    env: &Environment,
    data_dir: &Path,
    target: &Target,
    now: SystemTime,
) -> Result<Report, ClientError> {
    let plans = client.plan(env, target);
    let old = load_record(data_dir, client)?;
    let dir = record_dir(data_dir, client);
    let stamp = crate::timefmt::rfc3339(now).replace(':', "");

    struct Prepared {
        plan: FilePlan,
        current: Option<String>,
        base: Option<String>,
        written: String,
        record: FileRecord,
    }
    let mut prepared = Vec::new();
    let mut changes = Vec::new();
    for plan in plans {
        let shown_path = env.display(&plan.path);
        let current = read_text(env, &plan.path)?;
        if let Some(text) = &current {
            plan.format.validate(text).map_err(|e| {
                ClientError::Refused(format!(
                    "{shown_path} is {e}; fix it (or move it away), then run `ccmesh connect {client}` again"
                ))
            })?;
        }
        // Undo an earlier connect first, so `previous` is always the user's own value.
        let old_file = old.as_ref().and_then(|r| r.files.iter().find(|f| f.path == plan.path));
        let (base, existed) = match (old_file, &current) {
            (Some(rec), Some(text)) if files::sha256_hex(text.as_bytes()) == rec.written_sha256 => {
                (backup_text(&dir, rec)?, rec.existed)
            }
            (Some(rec), Some(text)) => {
                let (restored, _) = restore_keys(rec, text, &shown_path).map_err(ClientError::Refused)?;
                (Some(restored), true)
            }
            (_, current) => (current.clone(), current.is_some()),
        };
        let mut text = base.clone().unwrap_or_else(|| plan.format.empty_document().to_string());
        let mut keys = Vec::new();
        let mut created: Vec<Vec<String>> = Vec::new();
        for edit in &plan.edits {
            let previous =
                plan.format.get(&text, &edit.key).map_err(|e| ClientError::Refused(format!("{shown_path}: {e}")))?;
            let anchor = if edit.value.is_none() { plan.format.anchor(&text, &edit.key) } else { None };
            if edit.value.is_some() {
                for depth in (1..edit.key.len()).rev() {
                    let parent = edit.key[..depth].to_vec();
                    let exists = plan.format.get(&text, &parent).map_err(ClientError::Refused)?.is_some();
                    if !exists && !created.contains(&parent) {
                        created.push(parent);
                    }
                }
            }
            text = plan.format.set(&text, &edit.key, edit.value.as_deref()).map_err(|e| {
                ClientError::Refused(format!("{shown_path}: {e}; fix it, then run `ccmesh connect {client}` again"))
            })?;
            let rec =
                KeyRecord { key: edit.key.clone(), previous, written: edit.value.clone(), secret: edit.secret, anchor };
            if edit.value.is_none() && rec.previous.is_none() {
                // Nothing was there to remove: nothing to report, nothing to restore.
                continue;
            }
            changes.push(Change {
                file: shown_path.clone(),
                key: edit.key.join("."),
                action: if edit.value.is_some() { "set" } else { "removed" },
                value: if edit.value.is_some() {
                    edit.shown.clone().or_else(|| shown(&rec, edit.value.as_deref(), plan.format))
                } else {
                    rec.previous.as_ref().map(|_| "(kept for disconnect)".to_string())
                },
            });
            keys.push(rec);
        }
        created.sort_by_key(|p| std::cmp::Reverse(p.len()));
        let record = FileRecord {
            path: plan.path.clone(),
            format: plan.format,
            existed,
            backup: None,
            written_sha256: files::sha256_hex(text.as_bytes()),
            keys,
            created,
        };
        prepared.push(Prepared { plan, current, base, written: text, record });
    }

    // Backups first: nothing is changed until every original is safe.
    files::private_dir(&dir).map_err(io(format!("cannot create {}", dir.display())))?;
    let mut backups = Vec::new();
    for (i, p) in prepared.iter_mut().enumerate() {
        if let Some(base) = &p.base {
            let name = p.plan.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let backup = format!("{stamp}-{i}-{}", name.trim_start_matches('.'));
            let path = dir.join(&backup);
            files::atomic_write(&path, base.as_bytes(), 0o600)
                .map_err(io(format!("cannot write the backup {}", path.display())))?;
            backups.push(path.display().to_string());
            p.record.backup = Some(backup);
        }
    }
    let mut done: Vec<&Prepared> = Vec::new();
    for p in &prepared {
        if let Err(e) = files::atomic_write(&p.plan.path, p.written.as_bytes(), 0o600) {
            // Put back what this connect already changed: all files or none.
            for d in &done {
                let _ = match &d.current {
                    Some(c) => files::atomic_write(&d.plan.path, c.as_bytes(), 0o600),
                    None => files::remove(&d.plan.path),
                };
            }
            return Err(ClientError::Io { what: format!("cannot write {}", env.display(&p.plan.path)), source: e });
        }
        done.push(p);
    }
    let record = Record {
        client,
        server: target.server.clone(),
        connected_at: crate::timefmt::rfc3339(now),
        files: prepared.into_iter().map(|p| p.record).collect(),
    };
    let state = dir.join("state.json");
    let json = serde_json::to_vec_pretty(&record).map_err(|e| ClientError::Refused(e.to_string()))?;
    files::atomic_write(&state, &json, 0o600).map_err(io(format!("cannot write {}", state.display())))?;
    Ok(Report {
        client,
        changes,
        restored_exactly: Vec::new(),
        removed_files: Vec::new(),
        backups,
        notes: client.notes(target),
    })
}

fn backup_text(dir: &Path, rec: &FileRecord) -> Result<Option<String>, ClientError> {
    if !rec.existed {
        return Ok(None);
    }
    let Some(name) = &rec.backup else { return Ok(None) };
    let path = dir.join(name);
    let bytes = std::fs::read(&path).map_err(io(format!("cannot read the backup {}", path.display())))?;
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| ClientError::Refused(format!("the backup {} is not text", path.display())))
}

/// Undo the last connect of `client`.
pub fn disconnect(client: ClientKind, env: &Environment, data_dir: &Path) -> Result<Report, ClientError> {
    let dir = record_dir(data_dir, client);
    let Some(record) = load_record(data_dir, client)? else {
        return Err(ClientError::NotConnected(client, dir.display().to_string()));
    };
    let mut changes = Vec::new();
    let mut exact = Vec::new();
    let mut removed = Vec::new();
    let mut notes = Vec::new();
    let mut writes: Vec<(PathBuf, Option<String>)> = Vec::new();
    for rec in &record.files {
        let shown_path = env.display(&rec.path);
        let Some(current) = read_text(env, &rec.path)? else {
            notes.push(format!("{shown_path} was deleted since connect; left as it is"));
            continue;
        };
        if files::sha256_hex(current.as_bytes()) == rec.written_sha256 {
            // Nothing else changed the file: its bytes from before connect, exactly.
            writes.push((rec.path.clone(), backup_text(&dir, rec)?));
            if rec.existed {
                exact.push(shown_path);
            } else {
                removed.push(shown_path);
            }
            continue;
        }
        rec.format.validate(&current).map_err(|e| {
            ClientError::Refused(format!(
                "{shown_path} is {e} now; fix it, then run `ccmesh disconnect {client}` again (the backup is in {})",
                dir.display()
            ))
        })?;
        let (text, file_changes) = restore_keys(rec, &current, &shown_path).map_err(ClientError::Refused)?;
        if file_changes.iter().any(|c| c.action == "kept") {
            notes.push(format!(
                "some values in {shown_path} were changed after connect and are left as they are; the file as it was before connect is in {}",
                dir.display()
            ));
        }
        changes.extend(file_changes);
        writes.push((rec.path.clone(), Some(text)));
    }
    for (path, text) in writes {
        match text {
            Some(t) => files::atomic_write(&path, t.as_bytes(), 0o600),
            None => files::remove(&path),
        }
        .map_err(io(format!("cannot write {}", env.display(&path))))?;
    }
    let state = dir.join("state.json");
    std::fs::remove_file(&state).map_err(io(format!("cannot remove {}", state.display())))?;
    Ok(Report { client, changes, restored_exactly: exact, removed_files: removed, backups: Vec::new(), notes })
}

/// How a client is set up right now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    NotInstalled,
    /// Its files point at this gateway.
    Connected,
    /// Its files point at another base URL.
    Elsewhere,
    /// Installed, no base URL set: it talks to its vendor directly.
    NotConfigured,
}

impl Status {
    pub fn describe(&self) -> &'static str {
        match self {
            Status::NotInstalled => "not installed",
            Status::Connected => "connected to this gateway",
            Status::Elsewhere => "pointing elsewhere",
            Status::NotConfigured => "not configured",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ClientState {
    pub client: ClientKind,
    pub name: &'static str,
    pub status: Status,
    /// The base URL its files set, if any.
    pub url: Option<String>,
    pub config: String,
    /// `ccmesh disconnect` has something to undo.
    pub has_record: bool,
    /// Set when its files cannot be read (the status is then a best guess).
    pub error: Option<String>,
}

/// The state of `client` relative to the gateway at `server`.
pub fn state(client: ClientKind, env: &Environment, data_dir: Option<&Path>, server: &str) -> ClientState {
    let config_dir = client.config_dir(env);
    let installed = config_dir.exists() || env.on_path(client.binary());
    let (url, error) = match client.configured_url(env) {
        Ok(u) => (u, None),
        Err(e) => (None, Some(e.to_string())),
    };
    let status = match &url {
        Some(u) if same_gateway(u, server) => Status::Connected,
        Some(_) => Status::Elsewhere,
        None if installed => Status::NotConfigured,
        None => Status::NotInstalled,
    };
    let has_record = data_dir.is_some_and(|d| record_dir(d, client).join("state.json").is_file());
    ClientState {
        client,
        name: client.display_name(),
        status,
        url,
        config: env.display(&config_dir),
        has_record,
        error,
    }
}

/// Whether two base URLs reach the same gateway: same scheme and port, loopback names alike,
/// trailing `/` and a `/v1` suffix ignored.
pub fn same_gateway(a: &str, b: &str) -> bool {
    fn norm(u: &str) -> Option<(String, String, u16, String)> {
        let url = url::Url::parse(u.trim()).ok()?;
        let host = match url.host_str()? {
            "localhost" | "127.0.0.1" | "[::1]" | "::1" => "loopback".to_string(),
            h => h.to_ascii_lowercase(),
        };
        let path = url.path().trim_end_matches('/');
        let path = path.strip_suffix("/v1").unwrap_or(path).to_string();
        Some((url.scheme().to_string(), host, url.port_or_known_default()?, path))
    }
    matches!((norm(a), norm(b)), (Some(x), Some(y)) if x == y)
}

#[cfg(test)]
mod tests;
