//! Request records in SQLite: the schema (migration 2), batch insert (called only by the
//! writer thread, `observe::writer`), the list/detail/statistics queries of the admin API and
//! retention pruning.
//!
//! Layout, and why:
//! - `requests` holds one narrow row per record: the columns the filters, the list and the
//!   statistics read. `request_records` holds the full record JSON (decision trail, error
//!   bodies) under the same `seq`. Keeping the JSON out of `requests` keeps that table ~10×
//!   smaller, so a statistics scan over a week of a 1M-row database reads megabytes, not the
//!   gigabyte the JSON takes.
//! - Pages are ordered by `(started_at, seq)` descending and the cursor is that pair: a record
//!   inserted while a client pages (a newer one, or a long stream finishing late) never shifts
//!   a page, and the tie-break on `seq` makes the order total. Every filter index ends in
//!   `started_at` (SQLite appends the rowid `seq` itself), so a filtered first page or a page
//!   a million rows deep is an index seek plus `limit` rows, never a sort.
//! - `status_class` is stored (2, 3, 4, 5) because "all 5xx" as a range over `status` could not
//!   return rows in time order from an index.
//! - `search` is the error text worth searching (the final error and every failed attempt's),
//!   NULL when nothing went wrong; its partial index holds only those rows, so a text search
//!   walks the errors in time order and stops at the first full page.

//!
//! Files: `write` (insert and prune, the writer thread's), `query` (the list and detail of
//! `GET /api/requests`), `stats` (`GET /api/stats`).

mod query;
mod stats;
mod write;

use std::time::{Duration, UNIX_EPOCH};

use rusqlite::{Connection, OpenFlags};

pub use query::{Cursor, Filter, Page, Summary, get, list};
pub use stats::*;
pub use write::{count, insert_batch, prune_chunk};

use super::{Store, StoreError};
#[cfg(test)]
use crate::observe::record::{RequestRecord, Tokens};

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

/// `2026-11-29T10:00:00.123Z`.
pub fn rfc3339_ms(ms: i64) -> String {
    let secs = crate::timefmt::rfc3339(UNIX_EPOCH + Duration::from_secs(ms.div_euclid(1000).max(0) as u64));
    let base = secs.trim_end_matches('Z');
    format!("{base}.{:03}Z", ms.rem_euclid(1000))
}

impl Store {
    /// Run record queries on a connection of their own: under WAL, readers never wait for the
    /// writer thread and never hold up admin writes on the shared connection. (An in-memory
    /// store has no file to open a second connection to, so it uses the shared one.)
    pub fn read_records<T>(&self, f: impl FnOnce(&Connection) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let path = self.with(|c| Ok(c.path().filter(|p| !p.is_empty()).map(str::to_string)))?;
        match path {
            Some(path) => {
                let conn = Connection::open_with_flags(
                    &path,
                    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )?;
                conn.busy_timeout(Duration::from_secs(5))?;
                f(&conn)
            }
            None => self.with(|c| f(c)),
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
