//! SQLite storage of endpoints and settings. Never used on the request path: the admin API
//! writes here, then rebuilds the in-memory snapshot the proxy reads.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

use crate::endpoint::{Endpoint, EndpointDraft, EndpointId, ModelPattern, TestResult, TestStatus};
use crate::protocol::Format;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("an endpoint named '{0}' already exists")]
    Duplicate(String),
    #[error("no endpoint named '{0}'")]
    NotFound(String),
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("corrupt stored value: {0}")]
    Corrupt(String),
    #[error("a client key named '{0}' already exists")]
    KeyDuplicate(String),
    #[error("no client key named '{0}'")]
    KeyNotFound(String),
    #[error("client key '{0}' would have the same secret as another key")]
    SecretTaken(String),
}

pub mod data_dir;
pub mod keys;
pub mod prices;
pub mod records;

/// Schema migrations, applied in order; `PRAGMA user_version` records how many ran. Each later
/// migration lives beside the code that uses its tables.
const MIGRATIONS: &[&str] = &[V1_ENDPOINTS_AND_SETTINGS, records::SCHEMA, prices::SCHEMA, keys::SCHEMA];

const V1_ENDPOINTS_AND_SETTINGS: &str = r#"
CREATE TABLE endpoints (
    id               INTEGER PRIMARY KEY,
    name             TEXT NOT NULL UNIQUE COLLATE NOCASE,
    base_url         TEXT NOT NULL,
    api_key          TEXT NOT NULL,
    format           TEXT NOT NULL,
    models           TEXT NOT NULL DEFAULT '[]',
    model_map        TEXT NOT NULL DEFAULT '{}',
    enabled          INTEGER NOT NULL DEFAULT 1,
    fast             INTEGER NOT NULL DEFAULT 0,
    fast_sort_order  INTEGER NOT NULL DEFAULT 0,
    sort_order       INTEGER NOT NULL DEFAULT 0,
    headers          TEXT NOT NULL DEFAULT '{}',
    test_model       TEXT,
    test_status      TEXT NOT NULL DEFAULT 'untested',
    test_at          TEXT,
    test_latency_ms  INTEGER,
    test_error       TEXT
);
CREATE TABLE settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"#;

/// A handle to the database. Cheap to clone; calls are blocking and belong on a blocking thread.
#[derive(Clone)]
pub struct Store {
    conn: Arc<Mutex<Connection>>,
}

impl Store {
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let conn = Connection::open(path)?;
        Self::init(conn)
    }

    /// Open a database that cannot be written (a read-only data dir or file system): the gateway
    /// then serves with the configuration it last stored, and says storage is degraded.
    /// `immutable` tells SQLite not to create its shared-memory file, which it could not.
    pub fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        use rusqlite::OpenFlags;
        let uri = format!("file:{}?immutable=1", url_path(path));
        let conn = Connection::open_with_flags(uri, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI)?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        if version != MIGRATIONS.len() as i64 {
            return Err(StoreError::Corrupt(format!(
                "the read-only database has schema version {version}, this ccmesh needs {}; make the data dir writable once so it can migrate",
                MIGRATIONS.len()
            )));
        }
        Ok(Store { conn: Arc::new(Mutex::new(conn)) })
    }

    pub fn open_in_memory() -> Result<Store, StoreError> {
        Self::init(Connection::open_in_memory()?)
    }

    fn init(mut conn: Connection) -> Result<Store, StoreError> {
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        migrate(&mut conn)?;
        Ok(Store { conn: Arc::new(Mutex::new(conn)) })
    }

    fn with<T>(&self, f: impl FnOnce(&mut Connection) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut conn = self.conn.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut conn)
    }

    pub fn schema_version(&self) -> Result<i64, StoreError> {
        self.with(|c| Ok(c.pragma_query_value(None, "user_version", |r| r.get(0))?))
    }

    pub fn list_endpoints(&self) -> Result<Vec<Endpoint>, StoreError> {
        self.with(|c| {
            let mut stmt = c.prepare(
                "SELECT id, name, base_url, api_key, format, models, model_map, enabled, fast,
                        fast_sort_order, sort_order, headers, test_model, test_status, test_at,
                        test_latency_ms, test_error, price_multiplier
                 FROM endpoints ORDER BY sort_order, name",
            )?;
            let rows = stmt.query_map([], row_to_raw)?;
            rows.map(|r| r.map_err(StoreError::from).and_then(RawEndpoint::into_endpoint)).collect()
        })
    }

    pub fn get_endpoint(&self, name: &str) -> Result<Endpoint, StoreError> {
        self.list_endpoints()?
            .into_iter()
            .find(|e| e.name == name)
            .ok_or_else(|| StoreError::NotFound(name.to_string()))
    }

    /// Insert a new endpoint; `sort_order` defaults to after all others, and a fast endpoint
    /// without `fast_sort_order` joins the end of the fast queue.
    pub fn insert_endpoint(&self, draft: &EndpointDraft) -> Result<Endpoint, StoreError> {
        self.with(|c| {
            let tx = c.transaction()?;
            if name_taken(&tx, &draft.name, None)? {
                return Err(StoreError::Duplicate(draft.name.clone()));
            }
            let sort_order = match draft.sort_order {
                Some(s) => s,
                None => tx.query_row("SELECT COALESCE(MAX(sort_order) + 1, 0) FROM endpoints", [], |r| r.get(0))?,
            };
            let fast_sort_order = fast_position(&tx, draft, None)?;
            tx.execute(
                "INSERT INTO endpoints (name, base_url, api_key, format, models, model_map, enabled, fast,
                     fast_sort_order, sort_order, headers, test_model, price_multiplier)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                params![
                    draft.name,
                    draft.base_url,
                    draft.api_key,
                    draft.format.as_str(),
                    json_text(&draft.models),
                    json_text(&draft.model_map),
                    draft.enabled,
                    draft.fast,
                    fast_sort_order,
                    sort_order,
                    json_text(&draft.headers),
                    draft.test_model,
                    draft.price_multiplier,
                ],
            )?;
            tx.commit()?;
            Ok(())
        })?;
        self.get_endpoint(&draft.name)
    }

    /// Replace the writable fields of the endpoint currently named `name` (renames allowed).
    pub fn update_endpoint(&self, name: &str, draft: &EndpointDraft) -> Result<Endpoint, StoreError> {
        self.with(|c| {
            let tx = c.transaction()?;
            let id: i64 = tx
                .query_row("SELECT id FROM endpoints WHERE name = ?1", [name], |r| r.get(0))
                .optional()?
                .ok_or_else(|| StoreError::NotFound(name.to_string()))?;
            if name_taken(&tx, &draft.name, Some(id))? {
                return Err(StoreError::Duplicate(draft.name.clone()));
            }
            let fast_sort_order = fast_position(&tx, draft, Some(id))?;
            let sort_order: i64 = match draft.sort_order {
                Some(s) => s,
                None => tx.query_row("SELECT sort_order FROM endpoints WHERE id = ?1", [id], |r| r.get(0))?,
            };
            tx.execute(
                "UPDATE endpoints SET name = ?1, base_url = ?2, api_key = ?3, format = ?4, models = ?5,
                     model_map = ?6, enabled = ?7, fast = ?8, fast_sort_order = ?9, sort_order = ?10,
                     headers = ?11, test_model = ?12, price_multiplier = ?13
                 WHERE id = ?14",
                params![
                    draft.name,
                    draft.base_url,
                    draft.api_key,
                    draft.format.as_str(),
                    json_text(&draft.models),
                    json_text(&draft.model_map),
                    draft.enabled,
                    draft.fast,
                    fast_sort_order,
                    sort_order,
                    json_text(&draft.headers),
                    draft.test_model,
                    draft.price_multiplier,
                    id,
                ],
            )?;
            tx.commit()?;
            Ok(())
        })?;
        self.get_endpoint(&draft.name)
    }

    pub fn delete_endpoint(&self, name: &str) -> Result<(), StoreError> {
        self.with(|c| {
            let n = c.execute("DELETE FROM endpoints WHERE name = ?1", [name])?;
            if n == 0 { Err(StoreError::NotFound(name.to_string())) } else { Ok(()) }
        })
    }

    /// Exactly `names` are fast, in this order; every other endpoint leaves the queue.
    pub fn set_fast_queue(&self, names: &[String]) -> Result<(), StoreError> {
        self.with(|c| {
            let tx = c.transaction()?;
            check_names(&tx, names)?;
            tx.execute("UPDATE endpoints SET fast = 0, fast_sort_order = 0", [])?;
            for (i, name) in names.iter().enumerate() {
                tx.execute(
                    "UPDATE endpoints SET fast = 1, fast_sort_order = ?1 WHERE name = ?2",
                    params![i as i64, name],
                )?;
            }
            tx.commit()?;
            Ok(())
        })
    }

    /// Global order: the named endpoints first, in this order; the others keep their relative
    /// order after them.
    pub fn set_order(&self, names: &[String]) -> Result<(), StoreError> {
        let current = self.list_endpoints()?;
        self.with(|c| {
            let tx = c.transaction()?;
            check_names(&tx, names)?;
            let rest = current.iter().map(|e| &e.name).filter(|n| !names.contains(n));
            for (i, name) in names.iter().chain(rest).enumerate() {
                tx.execute("UPDATE endpoints SET sort_order = ?1 WHERE name = ?2", params![i as i64, name])?;
            }
            tx.commit()?;
            Ok(())
        })
    }

    pub fn save_test_result(&self, name: &str, test: &TestResult) -> Result<(), StoreError> {
        self.with(|c| {
            let n = c.execute(
                "UPDATE endpoints SET test_status = ?1, test_at = ?2, test_latency_ms = ?3, test_error = ?4
                 WHERE name = ?5",
                params![test.status.as_str(), test.at, test.latency_ms.map(|v| v as i64), test.error, name],
            )?;
            if n == 0 { Err(StoreError::NotFound(name.to_string())) } else { Ok(()) }
        })
    }

    /// The stored settings document, if any (merged over the defaults by the caller).
    pub fn load_settings(&self) -> Result<Option<Value>, StoreError> {
        self.with(|c| {
            let text: Option<String> =
                c.query_row("SELECT value FROM settings WHERE key = 'settings'", [], |r| r.get(0)).optional()?;
            text.map(|t| serde_json::from_str(&t).map_err(|e| StoreError::Corrupt(format!("settings: {e}"))))
                .transpose()
        })
    }

    pub fn save_settings(&self, doc: &Value) -> Result<(), StoreError> {
        self.with(|c| {
            c.execute(
                "INSERT INTO settings (key, value) VALUES ('settings', ?1)
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                [doc.to_string()],
            )?;
            Ok(())
        })
    }
}

/// A path as the path part of an SQLite `file:` URI (`?` and `#` would end it; `%` escapes).
fn url_path(path: &Path) -> String {
    let mut out = String::new();
    for c in path.to_string_lossy().chars() {
        match c {
            '?' => out.push_str("%3f"),
            '#' => out.push_str("%23"),
            '%' => out.push_str("%25"),
            c => out.push(c),
        }
    }
    out
}

fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version.max(0) as usize) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        tx.commit()?;
    }
    Ok(())
}

fn name_taken(c: &Connection, name: &str, except: Option<i64>) -> Result<bool, StoreError> {
    let found: Option<i64> =
        c.query_row("SELECT id FROM endpoints WHERE name = ?1", [name], |r| r.get(0)).optional()?;
    Ok(matches!(found, Some(id) if Some(id) != except))
}

fn check_names(c: &Connection, names: &[String]) -> Result<(), StoreError> {
    for name in names {
        let exists: Option<i64> =
            c.query_row("SELECT id FROM endpoints WHERE name = ?1", [name], |r| r.get(0)).optional()?;
        if exists.is_none() {
            return Err(StoreError::NotFound(name.clone()));
        }
    }
    Ok(())
}

/// Where a (possibly newly) fast endpoint sits in the fast queue.
fn fast_position(c: &Connection, draft: &EndpointDraft, id: Option<i64>) -> Result<i64, StoreError> {
    if let Some(pos) = draft.fast_sort_order {
        return Ok(pos);
    }
    if !draft.fast {
        return Ok(0);
    }
    // Already fast: keep its place.
    if let Some(id) = id {
        let (was_fast, pos): (bool, i64) =
            c.query_row("SELECT fast, fast_sort_order FROM endpoints WHERE id = ?1", [id], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?;
        if was_fast {
            return Ok(pos);
        }
    }
    Ok(c.query_row(
        "SELECT COALESCE(MAX(fast_sort_order) + 1, 0) FROM endpoints WHERE fast = 1 AND id IS NOT ?1",
        [id],
        |r| r.get(0),
    )?)
}

fn json_text<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

struct RawEndpoint {
    id: i64,
    name: String,
    base_url: String,
    api_key: String,
    format: String,
    models: String,
    model_map: String,
    enabled: bool,
    fast: bool,
    fast_sort_order: i64,
    sort_order: i64,
    headers: String,
    test_model: Option<String>,
    test_status: String,
    test_at: Option<String>,
    test_latency_ms: Option<i64>,
    test_error: Option<String>,
    price_multiplier: f64,
}

fn row_to_raw(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawEndpoint> {
    Ok(RawEndpoint {
        id: r.get(0)?,
        name: r.get(1)?,
        base_url: r.get(2)?,
        api_key: r.get(3)?,
        format: r.get(4)?,
        models: r.get(5)?,
        model_map: r.get(6)?,
        enabled: r.get(7)?,
        fast: r.get(8)?,
        fast_sort_order: r.get(9)?,
        sort_order: r.get(10)?,
        headers: r.get(11)?,
        test_model: r.get(12)?,
        test_status: r.get(13)?,
        test_at: r.get(14)?,
        test_latency_ms: r.get(15)?,
        test_error: r.get(16)?,
        price_multiplier: r.get(17)?,
    })
}

impl RawEndpoint {
    fn into_endpoint(self) -> Result<Endpoint, StoreError> {
        let corrupt = |what: &str| StoreError::Corrupt(format!("endpoint '{}': {what}", self.name));
        let format = Format::parse(&self.format).ok_or_else(|| corrupt("format"))?;
        let models: Vec<String> = serde_json::from_str(&self.models).map_err(|_| corrupt("models"))?;
        let map: BTreeMap<String, String> = serde_json::from_str(&self.model_map).map_err(|_| corrupt("model_map"))?;
        let headers: BTreeMap<String, String> = serde_json::from_str(&self.headers).map_err(|_| corrupt("headers"))?;
        Ok(Endpoint {
            id: EndpointId(self.id),
            name: self.name,
            base_url: self.base_url,
            api_key: self.api_key,
            format,
            models: models.into_iter().map(ModelPattern::new).collect(),
            model_map: map.into_iter().map(|(k, v)| (ModelPattern::new(k), v)).collect(),
            enabled: self.enabled,
            fast: self.fast,
            fast_sort_order: self.fast_sort_order,
            sort_order: self.sort_order,
            headers,
            test_model: self.test_model,
            test: TestResult {
                status: TestStatus::parse(&self.test_status),
                at: self.test_at,
                latency_ms: self.test_latency_ms.map(|v| v.max(0) as u64),
                error: self.test_error,
            },
            price_multiplier: self.price_multiplier,
        })
    }
}

impl Endpoint {
    /// The writable fields, for read-modify-write updates.
    pub fn to_draft(&self) -> EndpointDraft {
        EndpointDraft {
            name: self.name.clone(),
            base_url: self.base_url.clone(),
            api_key: self.api_key.clone(),
            format: self.format,
            models: self.models.iter().map(|m| m.as_str().to_string()).collect(),
            model_map: self.model_map.iter().map(|(k, v)| (k.as_str().to_string(), v.clone())).collect(),
            enabled: self.enabled,
            fast: self.fast,
            fast_sort_order: self.fast.then_some(self.fast_sort_order),
            sort_order: Some(self.sort_order),
            headers: self.headers.clone(),
            test_model: self.test_model.clone(),
            price_multiplier: self.price_multiplier,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn draft(name: &str, extra: Value) -> EndpointDraft {
        let mut obj = json!({"name": name, "base_url": "http://127.0.0.1:9", "api_key": "sk-test-0000000000", "format": "anthropic"});
        for (k, v) in extra.as_object().unwrap() {
            obj[k] = v.clone();
        }
        EndpointDraft::create(&obj).unwrap()
    }

    #[test]
    fn migrations_set_user_version_and_reopen_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ccmesh.db");
        let s = Store::open(&path).unwrap();
        assert_eq!(s.schema_version().unwrap(), MIGRATIONS.len() as i64);
        s.insert_endpoint(&draft("a", json!({}))).unwrap();
        drop(s);
        let s = Store::open(&path).unwrap();
        assert_eq!(s.list_endpoints().unwrap().len(), 1);
        let mode: String = s.with(|c| Ok(c.pragma_query_value(None, "journal_mode", |r| r.get(0))?)).unwrap();
        assert_eq!(mode, "wal");
    }

    #[test]
    fn insert_orders_and_rejects_duplicates_case_insensitively() {
        let s = Store::open_in_memory().unwrap();
        let a = s.insert_endpoint(&draft("a", json!({}))).unwrap();
        let b = s.insert_endpoint(&draft("b", json!({"fast": true}))).unwrap();
        let c = s.insert_endpoint(&draft("c", json!({"fast": true}))).unwrap();
        assert_eq!((a.sort_order, b.sort_order, c.sort_order), (0, 1, 2));
        assert_eq!((b.fast_sort_order, c.fast_sort_order), (0, 1));
        assert!(matches!(s.insert_endpoint(&draft("A", json!({}))), Err(StoreError::Duplicate(_))));
    }

    #[test]
    fn fast_queue_and_order_replace_positions() {
        let s = Store::open_in_memory().unwrap();
        for n in ["a", "b", "c"] {
            s.insert_endpoint(&draft(n, json!({"fast": n == "a"}))).unwrap();
        }
        s.set_fast_queue(&["c".into(), "b".into()]).unwrap();
        let eps = s.list_endpoints().unwrap();
        let get = |n: &str| eps.iter().find(|e| e.name == n).unwrap().clone();
        assert!(!get("a").fast);
        assert_eq!((get("c").fast, get("c").fast_sort_order), (true, 0));
        assert_eq!((get("b").fast, get("b").fast_sort_order), (true, 1));
        s.set_order(&["c".into()]).unwrap();
        let names: Vec<_> = s.list_endpoints().unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["c", "a", "b"]);
        assert!(matches!(s.set_fast_queue(&["zzz".into()]), Err(StoreError::NotFound(_))));
        // A failed call changes nothing.
        assert!(s.get_endpoint("c").unwrap().fast);
    }

    #[test]
    fn update_keeps_fast_position_and_allows_rename() {
        let s = Store::open_in_memory().unwrap();
        s.insert_endpoint(&draft("a", json!({"fast": true}))).unwrap();
        s.insert_endpoint(&draft("b", json!({"fast": true}))).unwrap();
        let mut d = s.get_endpoint("a").unwrap().to_draft();
        d.name = "a2".into();
        let a2 = s.update_endpoint("a", &d).unwrap();
        assert_eq!(a2.fast_sort_order, 0);
        let mut d = s.get_endpoint("b").unwrap().to_draft();
        d.name = "a2".into();
        assert!(matches!(s.update_endpoint("b", &d), Err(StoreError::Duplicate(_))));
        assert!(matches!(s.delete_endpoint("a"), Err(StoreError::NotFound(_))));
        s.delete_endpoint("a2").unwrap();
    }

    #[test]
    fn price_multiplier_persists_through_insert_update_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ccmesh.db");
        let s = Store::open(&path).unwrap();
        assert_eq!(s.insert_endpoint(&draft("plain", json!({}))).unwrap().price_multiplier, 1.0);
        assert_eq!(s.insert_endpoint(&draft("relay", json!({"price_multiplier": 1.5}))).unwrap().price_multiplier, 1.5);
        let mut d = s.get_endpoint("relay").unwrap().to_draft();
        assert_eq!(d.price_multiplier, 1.5);
        d.price_multiplier = 0.25;
        s.update_endpoint("relay", &d).unwrap();
        drop(s);
        let s = Store::open(&path).unwrap();
        assert_eq!(s.get_endpoint("relay").unwrap().price_multiplier, 0.25);
        assert_eq!(s.get_endpoint("plain").unwrap().price_multiplier, 1.0);
    }

    #[test]
    fn settings_and_test_results_round_trip() {
        let s = Store::open_in_memory().unwrap();
        assert_eq!(s.load_settings().unwrap(), None);
        s.save_settings(&json!({"routing_strategy": "priority"})).unwrap();
        assert_eq!(s.load_settings().unwrap(), Some(json!({"routing_strategy": "priority"})));
        s.insert_endpoint(&draft("a", json!({}))).unwrap();
        let t = TestResult {
            status: TestStatus::Available,
            at: Some("2026-11-29T10:00:00Z".into()),
            latency_ms: Some(12),
            error: None,
        };
        s.save_test_result("a", &t).unwrap();
        assert_eq!(s.get_endpoint("a").unwrap().test, t);
    }
}
