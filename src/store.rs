//! Storage of endpoints, settings, prices, client keys and request records: embedded SQLite
//! (the default, one gateway per data dir) or PostgreSQL (`--database postgres://…`, shared by
//! several gateways). Never used on the request path: the admin API writes here, then rebuilds
//! the in-memory snapshot the proxy reads; records arrive through the writer thread.
//!
//! One `Store` type for both: the configuration tables are written once against `sql::Sql`
//! (`endpoints`, `prices`, `keys`, the settings here), the request records have a module per
//! backend around shared pure parts (`records`, `postgres::records`).

use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::Connection;
use serde_json::Value;

use sql::Sql;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("an endpoint named '{0}' already exists")]
    Duplicate(String),
    #[error("no endpoint named '{0}'")]
    NotFound(String),
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("database error: {0}")]
    Postgres(String),
    /// The database cannot be reached now (PostgreSQL down, the network cut): the gateway goes
    /// on serving from its snapshot, and the write or read can be tried again later.
    #[error("the database is unreachable: {0}")]
    Unavailable(String),
    /// A uniqueness rule refused a write; says which (a column or an index name).
    #[error("a unique value is taken ({0})")]
    Unique(String),
    #[error("corrupt stored value: {0}")]
    Corrupt(String),
    #[error("{0}")]
    Unsupported(&'static str),
    /// A database URL or option that cannot be used, and why.
    #[error("{0}")]
    Invalid(String),
    #[error("a client key named '{0}' already exists")]
    KeyDuplicate(String),
    #[error("no client key named '{0}'")]
    KeyNotFound(String),
    #[error("client key '{0}' would have the same secret as another key")]
    SecretTaken(String),
}

pub mod data_dir;
pub mod endpoints;
pub mod keys;
pub mod migrate;
pub mod postgres;
pub mod prices;
pub mod records;
pub mod sql;

/// SQLite's schema migrations, applied in order; `PRAGMA user_version` records how many ran.
/// Each lives beside the code that uses its tables (PostgreSQL's, numbered alike, in
/// `postgres::MIGRATIONS`).
const MIGRATIONS: &[&str] = &[
    endpoints::SCHEMA,
    records::SCHEMA,
    prices::SCHEMA,
    keys::SCHEMA,
    // PostgreSQL's fifth migration is its cluster tables; SQLite has none, and keeps the number.
    "SELECT 1;",
    records::PARTIAL_INDEXES,
    records::VALUE_PERIODS,
];

/// A handle to the database. Cheap to clone; calls are blocking and belong on a blocking thread.
#[derive(Clone)]
pub struct Store {
    backend: Backend,
}

#[derive(Clone)]
enum Backend {
    Sqlite(Arc<Mutex<Connection>>),
    Postgres(Arc<postgres::Pg>),
}

impl Store {
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let conn = Connection::open(path)?;
        Self::init(conn)
    }

    /// Connect to PostgreSQL (`postgres://user:password@host:port/db`), apply its migrations
    /// and take a node number for record ids.
    pub fn open_postgres(url: &str) -> Result<Store, StoreError> {
        Ok(Store { backend: Backend::Postgres(Arc::new(postgres::Pg::open(url)?)) })
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
        Ok(Store { backend: Backend::Sqlite(Arc::new(Mutex::new(conn))) })
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
        Ok(Store { backend: Backend::Sqlite(Arc::new(Mutex::new(conn))) })
    }

    /// Run `f` on the SQLite connection; `None` on PostgreSQL.
    fn sqlite<T>(&self, f: impl FnOnce(&mut Connection) -> Result<T, StoreError>) -> Option<Result<T, StoreError>> {
        match &self.backend {
            Backend::Sqlite(conn) => {
                let mut conn = conn.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                Some(f(&mut conn))
            }
            Backend::Postgres(_) => None,
        }
    }

    /// The PostgreSQL backend, when that is what this store is.
    pub fn postgres(&self) -> Option<&Arc<postgres::Pg>> {
        match &self.backend {
            Backend::Postgres(pg) => Some(pg),
            Backend::Sqlite(_) => None,
        }
    }

    /// Read with either backend's connection.
    pub(crate) fn read<T>(&self, f: impl FnOnce(&dyn Sql) -> Result<T, StoreError>) -> Result<T, StoreError> {
        match &self.backend {
            Backend::Sqlite(conn) => {
                let conn = conn.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                f(&*conn)
            }
            Backend::Postgres(pg) => pg.read(f),
        }
    }

    /// Change the configuration in one transaction. On PostgreSQL the same transaction bumps
    /// the configuration version and notifies the other gateways (`postgres::changes`).
    pub(crate) fn write<T>(&self, f: impl FnOnce(&dyn Sql) -> Result<T, StoreError>) -> Result<T, StoreError> {
        match &self.backend {
            Backend::Sqlite(conn) => {
                let mut conn = conn.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                let tx = conn.transaction().map_err(sql::sqlite_error)?;
                let value = f(&*tx)?;
                tx.commit().map_err(sql::sqlite_error)?;
                Ok(value)
            }
            Backend::Postgres(pg) => pg.write(f),
        }
    }

    pub fn schema_version(&self) -> Result<i64, StoreError> {
        match &self.backend {
            Backend::Sqlite(conn) => {
                let conn = conn.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                Ok(conn.pragma_query_value(None, "user_version", |r| r.get(0))?)
            }
            Backend::Postgres(pg) => pg.schema_version(),
        }
    }

    /// How many configuration changes the database has seen (PostgreSQL; SQLite, with one
    /// gateway per database, has no one to tell and says 0). A snapshot built after reading
    /// version `v` holds at least every change up to `v`.
    pub fn config_version(&self) -> Result<i64, StoreError> {
        match &self.backend {
            Backend::Sqlite(_) => Ok(0),
            Backend::Postgres(pg) => pg.config_version(),
        }
    }

    /// Whether several gateways may share this database.
    pub fn is_shared(&self) -> bool {
        matches!(self.backend, Backend::Postgres(_))
    }

    /// `None` while the database answers; else why it does not (a PostgreSQL that cannot be
    /// reached). SQLite's troubles show through the record writer instead.
    pub fn problem(&self) -> Option<String> {
        self.postgres().and_then(|pg| pg.problem())
    }

    /// Where the data lives, safe to print: `sqlite:PATH`, or the PostgreSQL URL with its
    /// password masked.
    pub fn describe(&self) -> String {
        match &self.backend {
            Backend::Sqlite(conn) => {
                let conn = conn.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                match conn.path().filter(|p| !p.is_empty()) {
                    Some(p) => format!("sqlite:{p}"),
                    None => "sqlite::memory:".to_string(),
                }
            }
            Backend::Postgres(pg) => pg.url().redacted(),
        }
    }

    /// What `/api/status` says of the database: the engine, where it is (no password), and on
    /// a shared one this gateway's node number (the one its record ids carry).
    pub fn summary(&self) -> Value {
        let mut v = serde_json::json!({
            "backend": if self.is_shared() { "postgres" } else { "sqlite" },
            "location": self.describe(),
            "shared": self.is_shared(),
        });
        if let Some(pg) = self.postgres() {
            v["node"] = pg.node().into();
        }
        v
    }

    /// Secrets the logs must never show: the database password.
    pub fn secrets(&self) -> Vec<String> {
        self.postgres().and_then(|pg| pg.url().password().map(str::to_string)).into_iter().collect()
    }

    /// The stored settings document, if any (merged over the defaults by the caller).
    pub fn load_settings(&self) -> Result<Option<Value>, StoreError> {
        self.read(load_settings)
    }

    pub fn save_settings(&self, doc: &Value) -> Result<(), StoreError> {
        self.write(|db| {
            db.exec(
                "INSERT INTO settings (key, value) VALUES ('settings', ?)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                &[doc.to_string().into()],
            )?;
            Ok(())
        })
    }
}

pub(crate) fn load_settings(db: &dyn Sql) -> Result<Option<Value>, StoreError> {
    let text = db.row("SELECT value FROM settings WHERE key = 'settings'", &[])?.map(|r| r.text(0)).transpose()?;
    text.map(|t| serde_json::from_str(&t).map_err(|e| StoreError::Corrupt(format!("settings: {e}")))).transpose()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::{EndpointDraft, TestResult, TestStatus};
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
        let mode: String =
            s.sqlite(|c| Ok(c.pragma_query_value(None, "journal_mode", |r| r.get(0))?)).unwrap().unwrap();
        assert_eq!(mode, "wal");
    }

    #[test]
    fn a_database_from_before_the_partial_indexes_and_hours_migrates_and_filters_as_before() {
        use records::{Filter, sample_record};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ccmesh.db");
        // Written by a gateway that knew only the first four migrations.
        let old = Connection::open(&path).unwrap();
        for (i, sql) in MIGRATIONS.iter().take(4).enumerate() {
            old.execute_batch(sql).unwrap();
            old.pragma_update(None, "user_version", (i + 1) as i64).unwrap();
        }
        // Two hours apart, so the hours migration 7 fills are what the filters walk.
        let rows = [(200, None, "a"), (503, Some("alice"), "b"), (200, Some("alice"), "a"), (429, None, "b")];
        for (i, (status, key, endpoint)) in rows.iter().enumerate() {
            let at = 1_764_000_000_000 + i as i64 * 2 * records::PERIOD_MS;
            let detail = serde_json::to_string(&sample_record(&format!("{at:012x}r{i}"), at as u64)).unwrap();
            old.execute(
                "INSERT INTO requests (id, started_at, protocol, endpoint, model_requested, status, status_class,
                     stream, failed_over, attempts, total_ms, overhead_ms, client_key)
                 VALUES (?1, ?2, 'claude', ?3, 'm', ?4, ?5, 0, 0, 1, 1.0, 0.1, ?6)",
                rusqlite::params![format!("r{i}"), at, endpoint, status, status / 100, key],
            )
            .unwrap();
            old.execute("INSERT INTO request_records (seq, record) VALUES (last_insert_rowid(), ?1)", [detail])
                .unwrap();
        }
        drop(old);
        let s = Store::open(&path).unwrap();
        assert_eq!(s.schema_version().unwrap(), MIGRATIONS.len() as i64);
        let ids = |f: Filter| -> Vec<String> {
            s.read_records(|c| records::list(c, &f, None, 10)).unwrap().requests.into_iter().map(|r| r.id).collect()
        };
        assert_eq!(ids(Filter { status_class: Some(2), ..Filter::default() }), ["r2", "r0"]);
        assert_eq!(ids(Filter { status_class: Some(5), ..Filter::default() }), ["r1"]);
        assert_eq!(ids(Filter { status: Some(429), ..Filter::default() }), ["r3"]);
        assert_eq!(ids(Filter { client_key: Some("alice".into()), ..Filter::default() }), ["r2", "r1"]);
        assert_eq!(ids(Filter::default()).len(), 4);
        assert_eq!(ids(Filter { endpoint: Some("a".into()), ..Filter::default() }), ["r2", "r0"]);
        assert_eq!(
            ids(Filter { endpoint: Some("b".into()), model: Some("m".into()), ..Filter::default() }),
            ["r3", "r1"]
        );
        assert_eq!(ids(Filter { protocol: Some("claude".into()), status_class: Some(4), ..Filter::default() }), ["r3"]);
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
