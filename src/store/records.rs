//! Request records: the schema (migration 2), batch insert (called only by the writer thread,
//! `observe::writer`), the list/detail/statistics queries of the admin API and retention
//! pruning. This module is SQLite's and holds what both backends share (the columns a record
//! fills, the filters, the cursor, the statistics' arithmetic); `postgres::records` has
//! PostgreSQL's batch insert, pruning and statistics scan, with the same layout below.
//!
//! Layout, and why:
//! - `requests` holds one narrow row per record: the columns the filters, the list and the
//!   statistics read. `request_records` holds the full record JSON (decision trail, error
//!   bodies) under the same `seq`. Keeping the JSON out of `requests` keeps that table ~10×
//!   smaller, so a statistics scan over a week of a 1M-row database reads megabytes, not the
//!   gigabyte the JSON takes.
//! - Pages are ordered by `(started_at, seq)` descending and the cursor is that pair: a record
//!   inserted while a client pages (a newer one, or a long stream finishing late) never shifts
//!   a page, and the tie-break on `seq` makes the order total. Every index ends in
//!   `started_at` (SQLite appends the rowid `seq` itself), so a filtered first page or a page
//!   a million rows deep is an index seek plus `limit` rows, never a sort.
//! - Each index costs every record a B-tree insert, so only the rare rows get their own: the
//!   errors (`status_class`, `search`), the failovers, the keyed requests. A filter by
//!   endpoint, model or protocol — values most rows carry — walks `request_periods` (the periods
//!   holding each value, `periods.rs`) and scans those periods through the time index, which
//!   carries the three columns. A record is found by id through its start time.
//! - `status_class` is stored (2, 3, 4, 5) because "all 5xx" as a range over `status` could not
//!   return rows in time order from an index. Its index, like the client key's, is partial
//!   (`PARTIAL_INDEXES`): the rows most records are — 2xx, no key — are not in it.
//! - `search` is the error text worth searching (the final error and every failed attempt's),
//!   NULL when nothing went wrong; its partial index holds only those rows, so a text search
//!   walks the errors in time order and stops at the first full page.

//!
//! Files: `write` (insert and prune, the writer thread's), `periods` (`request_periods`: the period
//! arithmetic and the writer's memory of the rows it wrote), `query` (the list and detail of
//! `GET /api/requests`), `stats` (`GET /api/stats`).

mod periods;
mod query;
mod stats;
mod write;

use std::time::{Duration, UNIX_EPOCH};

use rusqlite::{Connection, OpenFlags};

pub use periods::{PERIOD_MS, PeriodsWritten, period_of};
pub(crate) use query::tok;
pub use query::{Cursor, Filter, Page, Summary, get, list};
pub use stats::*;
pub(crate) use write::insert_columns;
pub use write::{
    Batch, Columns, DELETE_EMPTIED_PERIODS, count, count_in, detail_json, insert_batch, insert_batch_noting,
    prune_chunk,
};

use super::keys::RecordedCharge;
use super::sql::{Dialect, Sql};
use super::{Backend, Store, StoreError};
use crate::observe::record::RequestRecord;
#[cfg(test)]
use crate::observe::record::Tokens;

/// Migration 2.
pub const SCHEMA: &str = r#"
CREATE TABLE requests (
    seq                 INTEGER PRIMARY KEY,
    id                  TEXT NOT NULL,
    started_at          INTEGER NOT NULL,
    protocol            TEXT NOT NULL,
    endpoint            TEXT,
    model_requested     TEXT,
    model_sent          TEXT,
    status              INTEGER NOT NULL,
    status_class        INTEGER NOT NULL,
    stream              INTEGER NOT NULL,
    failed_over         INTEGER NOT NULL,
    attempts            INTEGER NOT NULL,
    total_ms            REAL NOT NULL,
    first_byte_ms       REAL,
    overhead_ms         REAL NOT NULL,
    input_tokens        INTEGER,
    output_tokens       INTEGER,
    cache_read_tokens   INTEGER,
    cache_write_tokens  INTEGER,
    cost_usd            REAL,
    error               TEXT,
    search              TEXT
);
CREATE UNIQUE INDEX requests_id ON requests (id);
CREATE INDEX requests_time ON requests (started_at);
CREATE INDEX requests_endpoint ON requests (endpoint, started_at);
CREATE INDEX requests_model ON requests (model_requested, started_at);
CREATE INDEX requests_protocol ON requests (protocol, started_at);
CREATE INDEX requests_class ON requests (status_class, started_at);
CREATE INDEX requests_failed_over ON requests (started_at) WHERE failed_over = 1;
CREATE INDEX requests_search ON requests (started_at) WHERE search IS NOT NULL;
CREATE TABLE request_records (
    seq     INTEGER PRIMARY KEY,
    record  TEXT NOT NULL
);
"#;

/// PostgreSQL's migration 2: the same tables and indexes. `seq` comes from one sequence for
/// every gateway on the database, so the cursor `(started_at, seq)` orders their records alike.
pub const PG_SCHEMA: &str = r#"
CREATE TABLE requests (
    seq                 BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id                  TEXT NOT NULL,
    started_at          BIGINT NOT NULL,
    protocol            TEXT NOT NULL,
    endpoint            TEXT,
    model_requested     TEXT,
    model_sent          TEXT,
    status              BIGINT NOT NULL,
    status_class        BIGINT NOT NULL,
    stream              BOOLEAN NOT NULL,
    failed_over         BOOLEAN NOT NULL,
    attempts            BIGINT NOT NULL,
    total_ms            DOUBLE PRECISION NOT NULL,
    first_byte_ms       DOUBLE PRECISION,
    overhead_ms         DOUBLE PRECISION NOT NULL,
    input_tokens        BIGINT,
    output_tokens       BIGINT,
    cache_read_tokens   BIGINT,
    cache_write_tokens  BIGINT,
    cost_usd            DOUBLE PRECISION,
    error               TEXT,
    search              TEXT
);
CREATE UNIQUE INDEX requests_id ON requests (id);
CREATE INDEX requests_time ON requests (started_at, seq);
CREATE INDEX requests_endpoint ON requests (endpoint, started_at, seq);
CREATE INDEX requests_model ON requests (model_requested, started_at, seq);
CREATE INDEX requests_protocol ON requests (protocol, started_at, seq);
CREATE INDEX requests_class ON requests (status_class, started_at, seq);
CREATE INDEX requests_failed_over ON requests (started_at, seq) WHERE failed_over;
CREATE INDEX requests_search ON requests (started_at, seq) WHERE search IS NOT NULL;
CREATE TABLE request_records (
    seq     BIGINT PRIMARY KEY,
    record  TEXT NOT NULL
);
"#;

/// Migration 6: the class and client-key indexes hold only the rows their filters look for.
/// Each full index costs ~4 k instructions per inserted record (BENCHMARKS.md); most records
/// are 2xx and many installations have no client keys, so those rows skip both. A filter for
/// 2xx reads the time index (nearly every row matches); the other classes and a key name still
/// get an index seek, through the terms `where_clause` adds to match these predicates.
pub const PARTIAL_INDEXES: &str = r#"
DROP INDEX requests_class;
CREATE INDEX requests_class ON requests (status_class, started_at) WHERE status_class <> 2;
DROP INDEX requests_client_key;
CREATE INDEX requests_client_key ON requests (client_key, started_at) WHERE client_key IS NOT NULL;
"#;

/// Migration 6 on PostgreSQL.
pub const PG_PARTIAL_INDEXES: &str = r#"
DROP INDEX requests_class;
CREATE INDEX requests_class ON requests (status_class, started_at, seq) WHERE status_class <> 2;
DROP INDEX requests_client_key;
CREATE INDEX requests_client_key ON requests (client_key, started_at) WHERE client_key IS NOT NULL;
"#;

/// Fills `request_periods` from the stored records: in migration 7, and after `ccmesh migrate`
/// copied records into PostgreSQL. Integer division is the same in both engines.
macro_rules! fill_periods {
    () => {
        "INSERT INTO request_periods (dimension, value, period)
    SELECT 'endpoint', endpoint, started_at / 600000 FROM requests WHERE endpoint IS NOT NULL
    UNION SELECT 'model', model_requested, started_at / 600000 FROM requests WHERE model_requested IS NOT NULL
    UNION SELECT 'protocol', protocol, started_at / 600000 FROM requests;
"
    };
}
pub const FILL_PERIODS: &str = fill_periods!();

/// Migration 7: a filter by endpoint, model or protocol finds its rows through `request_periods`
/// instead of an index of its own. Each of those three indexes cost every record a B-tree
/// insert (~4 k instructions, BENCHMARKS.md), and so did the unique index on `id`.
///
/// - `request_periods` says which periods hold at least one record with a given value. The writer
///   adds a batch's (dimension, value, period) triples in the batch's transaction, so a stored
///   record always has its periods; retention drops the periods it has emptied. A filtered page
///   walks those periods newest first and scans each one through the time index.
/// - The time index carries the three filtered columns after its key `(started_at, seq)`, so
///   the scan tests them in the index and reads only the matching rows.
/// - A record is found by id through its start time, the id's first 12 hex digits
///   (`observe::record_id`); the same probe keeps a stored id from being inserted twice when a
///   batch is written again after an error.
pub const VALUE_PERIODS: &str = concat!(
    r#"
DROP INDEX requests_id;
DROP INDEX requests_endpoint;
DROP INDEX requests_model;
DROP INDEX requests_protocol;
DROP INDEX requests_time;
CREATE INDEX requests_time ON requests (started_at, seq, endpoint, model_requested, protocol);
CREATE TABLE request_periods (
    dimension   TEXT NOT NULL,
    value       TEXT NOT NULL,
    period      INTEGER NOT NULL,
    PRIMARY KEY (dimension, value, period)
) WITHOUT ROWID;
"#,
    fill_periods!()
);

/// Migration 7 on PostgreSQL. The unique index on `id` stays: a batch whose commit answer was
/// lost to the network is sent again, and `ON CONFLICT (id)` is what skips it there.
pub const PG_VALUE_PERIODS: &str = concat!(
    r#"
DROP INDEX requests_endpoint;
DROP INDEX requests_model;
DROP INDEX requests_protocol;
DROP INDEX requests_time;
CREATE INDEX requests_time ON requests (started_at, seq) INCLUDE (endpoint, model_requested, protocol);
CREATE TABLE request_periods (
    dimension   TEXT NOT NULL,
    value       TEXT NOT NULL,
    period      BIGINT NOT NULL,
    PRIMARY KEY (dimension, value, period)
);
"#,
    fill_periods!()
);

/// `2026-11-29T10:00:00.123Z`.
pub fn rfc3339_ms(ms: i64) -> String {
    let secs = crate::timefmt::rfc3339(UNIX_EPOCH + Duration::from_secs(ms.div_euclid(1000).max(0) as u64));
    let base = secs.trim_end_matches('Z');
    format!("{base}.{:03}Z", ms.rem_euclid(1000))
}

/// The database connection of the record writer thread (`observe::writer`), one per backend.
pub trait RecordDb: Send {
    /// Insert in one transaction; how many were new (a record whose id is stored is skipped).
    fn insert_batch(&mut self, records: &[RequestRecord]) -> Result<usize, StoreError>;
    /// `insert_batch` for records no batch has held before (the writer's first try), which
    /// need not be looked for among the stored ones.
    fn insert_fresh_batch(&mut self, records: &[RequestRecord]) -> Result<usize, StoreError> {
        self.insert_batch(records)
    }
    /// Delete at most `chunk` records older than `cutoff_ms`, oldest first; how many went.
    fn prune_chunk(&mut self, cutoff_ms: i64, chunk: usize) -> Result<usize, StoreError>;
    /// The stored settings document (for `retention_days`, read at prune time).
    fn settings(&mut self) -> Result<Option<serde_json::Value>, StoreError>;
    /// Give cached memory back while idle.
    fn release_memory(&mut self) {}
}

/// SQLite's writer connection, and the periods it has written.
pub struct SqliteRecords(pub Connection, pub PeriodsWritten);

impl RecordDb for SqliteRecords {
    fn insert_batch(&mut self, records: &[RequestRecord]) -> Result<usize, StoreError> {
        write::insert_batch_noting(&mut self.0, records, &mut self.1, write::Batch::MayBeStored)
    }

    fn insert_fresh_batch(&mut self, records: &[RequestRecord]) -> Result<usize, StoreError> {
        write::insert_batch_noting(&mut self.0, records, &mut self.1, write::Batch::Fresh)
    }

    fn prune_chunk(&mut self, cutoff_ms: i64, chunk: usize) -> Result<usize, StoreError> {
        let n = prune_chunk(&mut self.0, cutoff_ms, chunk)?;
        self.1.forget();
        Ok(n)
    }

    fn settings(&mut self) -> Result<Option<serde_json::Value>, StoreError> {
        super::load_settings(&self.0)
    }

    /// SQLite's page cache (2 MB by default, full after a few thousand records) is rebuilt from
    /// the OS's file cache on the next write.
    fn release_memory(&mut self) {
        if let Err(e) = self.0.execute_batch("PRAGMA shrink_memory") {
            tracing::debug!(error = %e, "shrink_memory failed");
        }
    }
}

impl Store {
    /// A connection of its own for the record writer thread.
    pub fn record_writer(&self) -> Result<Box<dyn RecordDb>, StoreError> {
        match &self.backend {
            Backend::Postgres(pg) => Ok(Box::new(pg.record_writer())),
            Backend::Sqlite(_) => {
                let path = self.sqlite_path()?.ok_or(StoreError::Unsupported(
                    "an in-memory database has no file for the record writer to open",
                ))?;
                let conn = Connection::open(path)?;
                conn.pragma_update(None, "journal_mode", "WAL")?;
                conn.pragma_update(None, "synchronous", "NORMAL")?;
                conn.busy_timeout(Duration::from_secs(5))?;
                Ok(Box::new(SqliteRecords(conn, PeriodsWritten::default())))
            }
        }
    }

    fn sqlite_path(&self) -> Result<Option<String>, StoreError> {
        self.sqlite(|c| Ok(c.path().filter(|p| !p.is_empty()).map(str::to_string))).transpose().map(Option::flatten)
    }

    /// One page of `GET /api/requests`.
    pub fn list_records(&self, filter: &Filter, cursor: Option<Cursor>, limit: usize) -> Result<Page, StoreError> {
        self.records(|db| list(db, filter, cursor, limit))
    }

    /// One record with its decision trail (`GET /api/requests/{id}`).
    pub fn get_record(&self, id: &str) -> Result<Option<serde_json::Value>, StoreError> {
        self.records(|db| get(db, id))
    }

    pub fn count_records(&self) -> Result<u64, StoreError> {
        self.records(count_in)
    }

    /// `GET /api/stats`.
    pub fn record_stats(&self, q: &StatsQuery) -> Result<StatsReport, StoreError> {
        match &self.backend {
            Backend::Postgres(pg) => pg.stats(q),
            Backend::Sqlite(_) => self.read_records(|c| stats(c, q)),
        }
    }

    /// What the recorded requests of every key charged since `since_ms`, in time order: what a
    /// start seeds the budgets with, so a restart does not hand out a day's budget again.
    pub fn recorded_charges(&self, since_ms: i64) -> Result<Vec<RecordedCharge>, StoreError> {
        self.records(|db| {
            // When the request ended, in whole milliseconds (SQLite's CAST truncates; so does
            // PostgreSQL's trunc, where its CAST would round).
            let total = match db.dialect() {
                Dialect::Sqlite => "CAST(total_ms AS INTEGER)",
                Dialect::Postgres => "CAST(trunc(total_ms) AS BIGINT)",
            };
            let rows = db.rows(
                &format!(
                    "SELECT client_key, started_at + {total}, COALESCE(input_tokens, 0) + COALESCE(output_tokens, 0),
                            COALESCE(cost_usd, 0)
                     FROM requests WHERE client_key IS NOT NULL AND started_at >= ? ORDER BY started_at"
                ),
                &[since_ms.into()],
            )?;
            rows.iter().map(|r| Ok((r.text(0)?, r.int(1)?, r.int(2)?.max(0) as u64, r.real(3)?))).collect()
        })
    }

    /// Run a record query on a connection where it cannot hold up the configuration's.
    fn records<T>(&self, f: impl FnOnce(&dyn Sql) -> Result<T, StoreError>) -> Result<T, StoreError> {
        match &self.backend {
            Backend::Postgres(pg) => pg.read(f),
            Backend::Sqlite(_) => self.read_records(|c| f(c)),
        }
    }

    /// SQLite: run record queries on a connection of their own: under WAL, readers never wait
    /// for the writer thread and never hold up admin writes on the shared connection. (An
    /// in-memory store has no file to open a second connection to, so it uses the shared one.)
    pub fn read_records<T>(&self, f: impl FnOnce(&Connection) -> Result<T, StoreError>) -> Result<T, StoreError> {
        if self.postgres().is_some() {
            return Err(StoreError::Unsupported("read_records is SQLite's; use the Store's record queries"));
        }
        let path = self.sqlite_path()?;
        match path {
            Some(path) => {
                let conn = Connection::open_with_flags(
                    &path,
                    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )?;
                conn.busy_timeout(Duration::from_secs(5))?;
                f(&conn)
            }
            None => self.sqlite(|c| f(c)).unwrap_or(Err(StoreError::Unsupported("not SQLite"))),
        }
    }
}

/// A plausible successful record (tests of this module and of the writer).
#[cfg(test)]
pub(crate) fn sample_record(id: &str, started_at_ms: u64) -> RequestRecord {
    use crate::observe::record::{AttemptRecord, Classification};
    RequestRecord {
        id: id.to_string(),
        started_at_ms,
        protocol: "claude".into(),
        method: "POST".into(),
        path: "/v1/messages".into(),
        user_agent: Some("claude-cli/2.1".into()),
        session_id: None,
        model_requested: Some("claude-sonnet-4-5".into()),
        model_sent: Some("claude-sonnet-4-5".into()),
        model_answered: Some("claude-sonnet-4-5-20250929".into()),
        endpoint: Some("a".into()),
        stream: true,
        status: 200,
        error: None,
        first_byte_ms: Some(120.0),
        first_token_ms: None,
        total_ms: 900.0,
        overhead_ms: 0.4,
        tokens: Tokens { input: Some(10), output: Some(20), cache_read: Some(1000), cache_write: Some(0) },
        cost_usd: Some(0.001),
        attempts: vec![AttemptRecord {
            endpoint: "a".into(),
            format: "anthropic".into(),
            started_ms: 0.2,
            duration_ms: 899.0,
            status: Some(200),
            error_kind: None,
            error: None,
            classification: Classification::Success,
            breaker: None,
            resume: None,
        }],
        failed_over: false,
        conversion: None,
        losses: Vec::new(),
        client_key: None,
        affinity: false,
    }
}

#[cfg(test)]
mod tests;
