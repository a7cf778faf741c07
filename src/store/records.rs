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

use std::collections::HashMap;
use std::time::{Duration, UNIX_EPOCH};

use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params, params_from_iter};
use serde::Serialize;
use serde_json::Value;

use super::{Store, StoreError};
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

/// The searchable error text of a record is cut to this many bytes.
const MAX_SEARCH_BYTES: usize = 2048;

const INSERT_SUMMARY: &str = "INSERT INTO requests (id, started_at, protocol, endpoint, model_requested, model_sent,
        status, status_class, stream, failed_over, attempts, total_ms, first_byte_ms, overhead_ms,
        input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd, error, search)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)
     ON CONFLICT (id) DO NOTHING";

fn sql_int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn class_digit(status: u16) -> i64 {
    match status {
        200..=299 => 2,
        300..=399 => 3,
        400..=499 => 4,
        // Matches `record::status_class`: anything else (including 0, "never set") is 5xx.
        _ => 5,
    }
}

/// The error text worth searching: the final error and every attempt that went wrong.
fn search_text(r: &RequestRecord) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    if let Some(e) = &r.error {
        parts.push(e.source.clone());
        parts.extend(e.kind.clone());
        parts.push(e.message.clone());
    }
    for a in &r.attempts {
        let failed = a.status.is_some_and(|s| s >= 400);
        if failed || a.error.is_some() || a.error_kind.is_some() {
            let mut line = a.endpoint.clone();
            if let Some(s) = a.status {
                line.push_str(&format!(" {s}"));
            }
            for text in [&a.error_kind, &a.error].into_iter().flatten() {
                line.push(' ');
                line.push_str(text);
            }
            parts.push(line);
        }
    }
    if parts.is_empty() {
        return None;
    }
    let mut text = parts.join("\n");
    if text.len() > MAX_SEARCH_BYTES {
        let mut cut = MAX_SEARCH_BYTES;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    Some(text)
}

/// Insert records in one transaction; returns how many were new (a record whose id is already
/// stored is skipped, so one duplicate can never fail a whole batch).
pub fn insert_batch(conn: &mut Connection, records: &[RequestRecord]) -> Result<usize, StoreError> {
    let tx = conn.transaction()?;
    let mut inserted = 0;
    {
        let mut summary = tx.prepare_cached(INSERT_SUMMARY)?;
        let mut detail = tx.prepare_cached("INSERT INTO request_records (seq, record) VALUES (?1, ?2)")?;
        for r in records {
            let json = serde_json::to_string(r).map_err(|e| StoreError::Corrupt(format!("record {}: {e}", r.id)))?;
            let n = summary.execute(params![
                r.id,
                sql_int(r.started_at_ms),
                r.protocol,
                r.endpoint,
                r.model_requested,
                r.model_sent,
                r.status,
                class_digit(r.status),
                r.stream,
                r.failed_over,
                sql_int(r.attempts.len() as u64),
                r.total_ms,
                r.first_byte_ms,
                r.overhead_ms,
                r.tokens.input.map(sql_int),
                r.tokens.output.map(sql_int),
                r.tokens.cache_read.map(sql_int),
                r.tokens.cache_write.map(sql_int),
                r.cost_usd,
                r.error.as_ref().map(|e| e.message.as_str()),
                search_text(r),
            ])?;
            if n == 1 {
                detail.execute(params![tx.last_insert_rowid(), json])?;
                inserted += 1;
            }
        }
    }
    tx.commit()?;
    Ok(inserted)
}

/// Delete at most `chunk` records that started before `cutoff_ms`, oldest first, in one short
/// transaction; returns how many went. The caller repeats while it gets a full chunk, doing
/// other work in between, so pruning a large backlog never holds the writer for long.
pub fn prune_chunk(conn: &mut Connection, cutoff_ms: i64, chunk: usize) -> Result<usize, StoreError> {
    let tx = conn.transaction()?;
    let seqs: Vec<i64> = {
        let mut stmt =
            tx.prepare_cached("SELECT seq FROM requests WHERE started_at < ?1 ORDER BY started_at, seq LIMIT ?2")?;
        stmt.query_map(params![cutoff_ms, sql_int(chunk as u64)], |r| r.get(0))?.collect::<Result<_, _>>()?
    };
    {
        let mut summary = tx.prepare_cached("DELETE FROM requests WHERE seq = ?1")?;
        let mut detail = tx.prepare_cached("DELETE FROM request_records WHERE seq = ?1")?;
        for seq in &seqs {
            detail.execute([seq])?;
            summary.execute([seq])?;
        }
    }
    tx.commit()?;
    Ok(seqs.len())
}

/// Number of stored records (tests, benchmarks, status).
pub fn count(conn: &Connection) -> Result<u64, StoreError> {
    let n: i64 = conn.query_row("SELECT COUNT(*) FROM requests", [], |r| r.get(0))?;
    Ok(n.max(0) as u64)
}

/// `2026-11-29T10:00:00.123Z`.
pub fn rfc3339_ms(ms: i64) -> String {
    let secs = crate::timefmt::rfc3339(UNIX_EPOCH + Duration::from_secs(ms.div_euclid(1000).max(0) as u64));
    let base = secs.trim_end_matches('Z');
    format!("{base}.{:03}Z", ms.rem_euclid(1000))
}

// ---------------------------------------------------------------------------------------------
// Listing

/// Filters of `GET /api/requests`; every field narrows (AND).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filter {
    /// Inclusive, unix ms.
    pub since_ms: Option<i64>,
    /// Exclusive, unix ms.
    pub until_ms: Option<i64>,
    pub endpoint: Option<String>,
    /// The model the client asked for.
    pub model: Option<String>,
    pub protocol: Option<String>,
    /// 2, 3, 4 or 5.
    pub status_class: Option<u16>,
    pub status: Option<u16>,
    pub failed_over: Option<bool>,
    /// Substring of the error text (final error and failed attempts), ASCII case-insensitive.
    pub text: Option<String>,
}

/// Where the next page starts: the last row's `(started_at, seq)`. Opaque to clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub started_at: i64,
    pub seq: i64,
}

impl Cursor {
    /// 32 hex digits: fixed width, URL-safe, no escaping anywhere.
    pub fn encode(&self) -> String {
        format!("{:016x}{:016x}", self.started_at as u64, self.seq as u64)
    }

    pub fn decode(s: &str) -> Option<Cursor> {
        if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let started_at = u64::from_str_radix(&s[..16], 16).ok()? as i64;
        let seq = u64::from_str_radix(&s[16..], 16).ok()? as i64;
        Some(Cursor { started_at, seq })
    }
}

/// One row of `GET /api/requests`: everything but the decision trail, read from columns only.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    pub id: String,
    pub started_at: String,
    pub started_at_ms: i64,
    pub protocol: String,
    pub endpoint: Option<String>,
    pub model_requested: Option<String>,
    pub model_sent: Option<String>,
    pub status: u16,
    pub stream: bool,
    pub failed_over: bool,
    pub attempts: u32,
    pub total_ms: f64,
    pub first_byte_ms: Option<f64>,
    pub overhead_ms: f64,
    pub tokens: Tokens,
    pub cost_usd: Option<f64>,
    pub error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Page {
    pub requests: Vec<Summary>,
    pub next_cursor: Option<String>,
}

/// The WHERE clause of a filter (`1` when there is none) and its parameters.
fn where_clause(f: &Filter) -> (String, Vec<SqlValue>) {
    let mut conds: Vec<&str> = Vec::new();
    let mut args: Vec<SqlValue> = Vec::new();
    if let Some(v) = f.since_ms {
        conds.push("started_at >= ?");
        args.push(SqlValue::Integer(v));
    }
    if let Some(v) = f.until_ms {
        conds.push("started_at < ?");
        args.push(SqlValue::Integer(v));
    }
    if let Some(v) = &f.endpoint {
        conds.push("endpoint = ?");
        args.push(SqlValue::Text(v.clone()));
    }
    if let Some(v) = &f.model {
        conds.push("model_requested = ?");
        args.push(SqlValue::Text(v.clone()));
    }
    if let Some(v) = &f.protocol {
        conds.push("protocol = ?");
        args.push(SqlValue::Text(v.clone()));
    }
    // An exact status also constrains the class, so the class index (ordered by time) serves it.
    if let Some(class) = f.status_class.or(f.status.map(|s| s / 100)) {
        conds.push("status_class = ?");
        args.push(SqlValue::Integer(class.into()));
    }
    if let Some(v) = f.status {
        conds.push("status = ?");
        args.push(SqlValue::Integer(v.into()));
    }
    match f.failed_over {
        Some(true) => conds.push("failed_over = 1"),
        Some(false) => conds.push("failed_over = 0"),
        None => {}
    }
    if let Some(q) = &f.text {
        // Stated separately so the planner sees the partial index `requests_search` applies.
        conds.push("search IS NOT NULL");
        conds.push("search LIKE ? ESCAPE '\\'");
        args.push(SqlValue::Text(format!("%{}%", like_escape(q))));
    }
    let sql = if conds.is_empty() { "1".to_string() } else { conds.join(" AND ") };
    (sql, args)
}

fn like_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

const SUMMARY_COLUMNS: &str = "seq, id, started_at, protocol, endpoint, model_requested, model_sent, status, stream,
     failed_over, attempts, total_ms, first_byte_ms, overhead_ms, input_tokens, output_tokens,
     cache_read_tokens, cache_write_tokens, cost_usd, error";

fn tok(v: Option<i64>) -> Option<u64> {
    v.map(|n| n.max(0) as u64)
}

fn summary_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(i64, Summary)> {
    let started_at: i64 = r.get(2)?;
    let status: i64 = r.get(7)?;
    let attempts: i64 = r.get(10)?;
    Ok((
        r.get(0)?,
        Summary {
            id: r.get(1)?,
            started_at: rfc3339_ms(started_at),
            started_at_ms: started_at,
            protocol: r.get(3)?,
            endpoint: r.get(4)?,
            model_requested: r.get(5)?,
            model_sent: r.get(6)?,
            status: u16::try_from(status).unwrap_or(0),
            stream: r.get(8)?,
            failed_over: r.get(9)?,
            attempts: u32::try_from(attempts).unwrap_or(0),
            total_ms: r.get(11)?,
            first_byte_ms: r.get(12)?,
            overhead_ms: r.get(13)?,
            tokens: Tokens {
                input: tok(r.get(14)?),
                output: tok(r.get(15)?),
                cache_read: tok(r.get(16)?),
                cache_write: tok(r.get(17)?),
            },
            cost_usd: r.get(18)?,
            error: r.get(19)?,
        },
    ))
}

/// One page of records, newest first, after `cursor` (exclusive).
pub fn list(conn: &Connection, filter: &Filter, cursor: Option<Cursor>, limit: usize) -> Result<Page, StoreError> {
    let (mut cond, mut args) = where_clause(filter);
    if let Some(c) = cursor {
        cond.push_str(" AND (started_at, seq) < (?, ?)");
        args.push(SqlValue::Integer(c.started_at));
        args.push(SqlValue::Integer(c.seq));
    }
    let sql = format!(
        "SELECT {SUMMARY_COLUMNS} FROM requests WHERE {cond} ORDER BY started_at DESC, seq DESC LIMIT {}",
        limit.saturating_add(1)
    );
    let mut stmt = conn.prepare(&sql)?;
    let mut rows: Vec<(i64, Summary)> =
        stmt.query_map(params_from_iter(args), summary_row)?.collect::<Result<_, _>>()?;
    let next_cursor = if rows.len() > limit {
        rows.truncate(limit);
        rows.last().map(|(seq, s)| Cursor { started_at: s.started_at_ms, seq: *seq }.encode())
    } else {
        None
    };
    Ok(Page { requests: rows.into_iter().map(|(_, s)| s).collect(), next_cursor })
}

/// The full stored record (with the decision trail), plus `started_at` (RFC 3339) and
/// `status_class` for the reader's convenience; `None` if there is no such id.
pub fn get(conn: &Connection, id: &str) -> Result<Option<Value>, StoreError> {
    let text: Option<String> = conn
        .query_row(
            "SELECT d.record FROM requests r JOIN request_records d ON d.seq = r.seq WHERE r.id = ?1",
            [id],
            |r| r.get(0),
        )
        .optional()?;
    let Some(text) = text else { return Ok(None) };
    let mut v: Value =
        serde_json::from_str(&text).map_err(|e| StoreError::Corrupt(format!("request record {id}: {e}")))?;
    if let Some(obj) = v.as_object_mut() {
        let started = obj.get("started_at_ms").and_then(Value::as_i64).unwrap_or(0);
        let status = obj.get("status").and_then(Value::as_u64).unwrap_or(0);
        obj.insert("started_at".into(), Value::from(rfc3339_ms(started)));
        obj.insert(
            "status_class".into(),
            Value::from(crate::observe::record::status_class(u16::try_from(status).unwrap_or(0))),
        );
    }
    Ok(Some(v))
}

// ---------------------------------------------------------------------------------------------
// Statistics

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupBy {
    Endpoint,
    /// The model the client asked for.
    Model,
    Protocol,
}

impl GroupBy {
    pub fn parse(s: &str) -> Option<GroupBy> {
        match s {
            "endpoint" => Some(GroupBy::Endpoint),
            "model" => Some(GroupBy::Model),
            "protocol" => Some(GroupBy::Protocol),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            GroupBy::Endpoint => "endpoint",
            GroupBy::Model => "model",
            GroupBy::Protocol => "protocol",
        }
    }

    fn column(self) -> &'static str {
        match self {
            GroupBy::Endpoint => "endpoint",
            GroupBy::Model => "model_requested",
            GroupBy::Protocol => "protocol",
        }
    }
}

/// Buckets are aligned to UTC hours or days.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bucket {
    Hour,
    Day,
}

impl Bucket {
    pub fn parse(s: &str) -> Option<Bucket> {
        match s {
            "hour" => Some(Bucket::Hour),
            "day" => Some(Bucket::Day),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Bucket::Hour => "hour",
            Bucket::Day => "day",
        }
    }

    pub fn width_ms(self) -> i64 {
        match self {
            Bucket::Hour => 3_600_000,
            Bucket::Day => 86_400_000,
        }
    }

    fn start_of(self, ms: i64) -> i64 {
        ms.div_euclid(self.width_ms()) * self.width_ms()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatsQuery {
    /// Inclusive, unix ms.
    pub since_ms: i64,
    /// Exclusive, unix ms.
    pub until_ms: i64,
    pub group_by: Option<GroupBy>,
    /// `None`: one bucket per group spanning the whole range.
    pub bucket: Option<Bucket>,
}

impl StatsQuery {
    /// How many buckets the range spans (the admin API caps it).
    pub fn bucket_count(&self) -> i64 {
        match self.bucket {
            Some(b) => {
                let last = (self.until_ms - 1).max(self.since_ms);
                (b.start_of(last) - b.start_of(self.since_ms)) / b.width_ms() + 1
            }
            None => 1,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TokenSums {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

impl TokenSums {
    fn add(&mut self, t: &Tokens) {
        self.input += t.input.unwrap_or(0);
        self.output += t.output.unwrap_or(0);
        self.cache_read += t.cache_read.unwrap_or(0);
        self.cache_write += t.cache_write.unwrap_or(0);
    }

    fn merge(&mut self, o: &TokenSums) {
        self.input += o.input;
        self.output += o.output;
        self.cache_read += o.cache_read;
        self.cache_write += o.cache_write;
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Latency {
    /// Nearest-rank percentiles of `total_ms`; `None` when there are no requests.
    pub p50: Option<f64>,
    pub p95: Option<f64>,
}

/// Usage the price table could not price: requests whose tokens are known but cost is not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Unpriced {
    pub requests: u64,
    pub tokens: TokenSums,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Stats {
    pub requests: u64,
    /// Status ≥ 400, or an error recorded (e.g. a stream that failed after a 200).
    pub errors: u64,
    /// Requests that tried more than one endpoint.
    pub failovers: u64,
    pub latency_ms: Latency,
    /// Sums of the known token counts.
    pub tokens: TokenSums,
    /// Sum of the known costs; `None` when no request in the set had a known cost.
    pub cost_usd: Option<f64>,
    pub unpriced: Unpriced,
    /// Requests whose token usage is unknown (errors before any answer, streams cut before
    /// their usage event, upstreams that report none).
    pub usage_unknown: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BucketStats {
    /// RFC 3339, the bucket's first instant (the range's start when not bucketed).
    pub start: String,
    pub start_ms: i64,
    #[serde(flatten)]
    pub stats: Stats,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GroupStats {
    /// The endpoint, model or protocol; `null` for records without one (a request that never
    /// reached an endpoint) and when not grouped.
    pub key: Option<String>,
    pub totals: Stats,
    /// Only buckets with requests, oldest first.
    pub buckets: Vec<BucketStats>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StatsReport {
    pub since: String,
    pub until: String,
    pub since_ms: i64,
    pub until_ms: i64,
    pub group_by: Option<&'static str>,
    pub bucket: Option<&'static str>,
    pub totals: Stats,
    /// Ordered by key, `null` last.
    pub groups: Vec<GroupStats>,
}

/// What the statistics need of one record.
#[derive(Clone, Debug, PartialEq)]
pub struct StatRow<'a> {
    pub started_at_ms: i64,
    pub group: Option<&'a str>,
    pub status: u16,
    pub has_error: bool,
    pub failed_over: bool,
    pub total_ms: f64,
    pub tokens: Tokens,
    pub cost_usd: Option<f64>,
}

#[derive(Clone, Debug, Default)]
struct Acc {
    requests: u64,
    errors: u64,
    failovers: u64,
    latencies: Vec<f64>,
    tokens: TokenSums,
    cost: f64,
    priced: u64,
    unpriced: Unpriced,
    usage_unknown: u64,
}

impl Acc {
    fn add(&mut self, r: &StatRow<'_>) {
        self.requests += 1;
        self.errors += u64::from(r.status >= 400 || r.has_error);
        self.failovers += u64::from(r.failed_over);
        self.latencies.push(r.total_ms);
        self.tokens.add(&r.tokens);
        match r.cost_usd {
            Some(c) => {
                self.cost += c;
                self.priced += 1;
            }
            None if r.tokens.is_known() => {
                self.unpriced.requests += 1;
                self.unpriced.tokens.add(&r.tokens);
            }
            None => {}
        }
        self.usage_unknown += u64::from(!r.tokens.is_known());
    }

    fn merge(&mut self, o: &Acc) {
        self.requests += o.requests;
        self.errors += o.errors;
        self.failovers += o.failovers;
        self.latencies.extend_from_slice(&o.latencies);
        self.tokens.merge(&o.tokens);
        self.cost += o.cost;
        self.priced += o.priced;
        self.unpriced.requests += o.unpriced.requests;
        self.unpriced.tokens.merge(&o.unpriced.tokens);
        self.usage_unknown += o.usage_unknown;
    }

    fn finish(mut self) -> Stats {
        let (p50, p95) = percentiles(&mut self.latencies);
        Stats {
            requests: self.requests,
            errors: self.errors,
            failovers: self.failovers,
            latency_ms: Latency { p50, p95 },
            tokens: self.tokens,
            cost_usd: (self.priced > 0).then_some(self.cost),
            unpriced: self.unpriced,
            usage_unknown: self.usage_unknown,
        }
    }
}

/// Nearest-rank p50 and p95 (the value at rank ⌈p·n⌉), by selection rather than a full sort.
/// Reorders `values`.
pub fn percentiles(values: &mut [f64]) -> (Option<f64>, Option<f64>) {
    let n = values.len();
    if n == 0 {
        return (None, None);
    }
    let rank = |p: f64| ((p * n as f64).ceil() as usize).clamp(1, n) - 1;
    let (i50, i95) = (rank(0.50), rank(0.95));
    let (lower, p95, _) = values.select_nth_unstable_by(i95, f64::total_cmp);
    let p95 = *p95;
    // Everything left of i95 is ≤ p95, and i50 ≤ i95, so p50 is within `lower` (or is p95).
    let p50 = if i50 == i95 { p95 } else { *lower.select_nth_unstable_by(i50, f64::total_cmp).1 };
    (Some(p50), Some(p95))
}

/// Accumulates rows into groups × buckets; pure, so the arithmetic is tested without SQL.
///
/// Per-row work is kept small because a month of records is a million rows: groups are few, so
/// they are found by a linear scan (a hash map only past a few dozen); rows arrive in time
/// order, so a row's bucket is almost always its group's last one.
pub struct StatsBuilder {
    query: StatsQuery,
    /// Per group: its key and its buckets, ascending by start.
    groups: Vec<(Option<String>, Buckets)>,
    /// Named groups' positions, used once there are more than `LINEAR_GROUPS` groups.
    index: HashMap<String, usize>,
}

const LINEAR_GROUPS: usize = 32;

/// One group's buckets: (start, accumulator), ascending by start.
type Buckets = Vec<(i64, Acc)>;

impl StatsBuilder {
    pub fn new(query: StatsQuery) -> Self {
        Self { query, groups: Vec::new(), index: HashMap::new() }
    }

    fn group_index(&mut self, group: Option<&str>) -> usize {
        let found = match group {
            Some(g) if self.groups.len() > LINEAR_GROUPS => self.index.get(g).copied(),
            _ => self.groups.iter().position(|(k, _)| k.as_deref() == group),
        };
        if let Some(i) = found {
            return i;
        }
        let i = self.groups.len();
        self.groups.push((group.map(str::to_string), Vec::new()));
        if let Some(g) = group {
            self.index.insert(g.to_string(), i);
        }
        i
    }

    pub fn add(&mut self, row: &StatRow<'_>) {
        let group = if self.query.group_by.is_some() { row.group } else { None };
        let g = self.group_index(group);
        let bucket = match self.query.bucket {
            Some(b) => b.start_of(row.started_at_ms),
            None => self.query.since_ms,
        };
        let cells = &mut self.groups[g].1;
        match cells.last_mut() {
            Some((last, acc)) if *last == bucket => acc.add(row),
            Some((last, _)) if *last > bucket => {
                // Out of time order: find or insert its place.
                let at = cells.partition_point(|(b, _)| *b < bucket);
                if cells.get(at).is_none_or(|(b, _)| *b != bucket) {
                    cells.insert(at, (bucket, Acc::default()));
                }
                cells[at].1.add(row);
            }
            _ => {
                let mut acc = Acc::default();
                acc.add(row);
                cells.push((bucket, acc));
            }
        }
    }

    pub fn finish(self) -> StatsReport {
        let mut all = Acc::default();
        let mut groups: Vec<GroupStats> = Vec::with_capacity(self.groups.len());
        for (key, cells) in self.groups {
            let mut total = Acc::default();
            for (_, acc) in &cells {
                total.merge(acc);
            }
            all.merge(&total);
            let buckets = cells
                .into_iter()
                .map(|(start, acc)| BucketStats { start: rfc3339_ms(start), start_ms: start, stats: acc.finish() })
                .collect();
            groups.push(GroupStats { key, totals: total.finish(), buckets });
        }
        // Keys ascending, `null` last.
        groups.sort_by(|a, b| match (&a.key, &b.key) {
            (Some(x), Some(y)) => x.cmp(y),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        });
        StatsReport {
            since: rfc3339_ms(self.query.since_ms),
            until: rfc3339_ms(self.query.until_ms),
            since_ms: self.query.since_ms,
            until_ms: self.query.until_ms,
            group_by: self.query.group_by.map(GroupBy::as_str),
            bucket: self.query.bucket.map(Bucket::as_str),
            totals: all.finish(),
            groups,
        }
    }
}

/// Statistics over `[since, until)`: one pass over the range's rows through the time index,
/// reading only narrow columns; percentiles are exact.
pub fn stats(conn: &Connection, q: &StatsQuery) -> Result<StatsReport, StoreError> {
    let group_col = q.group_by.map(GroupBy::column).unwrap_or("NULL");
    let sql = format!(
        "SELECT started_at, {group_col}, status, error IS NOT NULL, failed_over, total_ms,
                input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd
         FROM requests WHERE started_at >= ?1 AND started_at < ?2"
    );
    let mut stmt = conn.prepare(&sql)?;
    let mut rows = stmt.query(params![q.since_ms, q.until_ms])?;
    let mut builder = StatsBuilder::new(*q);
    while let Some(r) = rows.next()? {
        let group = match r.get_ref(1)? {
            rusqlite::types::ValueRef::Text(t) => Some(std::str::from_utf8(t).unwrap_or("")),
            _ => None,
        };
        let status: i64 = r.get(2)?;
        builder.add(&StatRow {
            started_at_ms: r.get(0)?,
            group,
            status: u16::try_from(status).unwrap_or(0),
            has_error: r.get(3)?,
            failed_over: r.get(4)?,
            total_ms: r.get(5)?,
            tokens: Tokens {
                input: tok(r.get(6)?),
                output: tok(r.get(7)?),
                cache_read: tok(r.get(8)?),
                cache_write: tok(r.get(9)?),
            },
            cost_usd: r.get(10)?,
        });
    }
    Ok(builder.finish())
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
        }],
        failed_over: false,
        conversion: None,
        losses: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::record::{AttemptRecord, Classification, RecordError};

    fn record(id: &str, started_at_ms: u64) -> RequestRecord {
        sample_record(id, started_at_ms)
    }

    fn failed(id: &str, at: u64) -> RequestRecord {
        let mut r = record(id, at);
        r.status = 503;
        r.tokens = Tokens::default();
        r.cost_usd = None;
        r.failed_over = true;
        r.error = Some(RecordError {
            source: "upstream".into(),
            kind: Some("overloaded_error".into()),
            message: "Overloaded 100%_sure".into(),
            upstream_body: Some("{\"type\":\"error\"}".into()),
        });
        r.attempts.push(AttemptRecord {
            endpoint: "b".into(),
            format: "openai".into(),
            started_ms: 1.0,
            duration_ms: 3.0,
            status: None,
            error_kind: Some("connect".into()),
            error: Some("connection refused".into()),
            classification: Classification::Transient,
            breaker: Some("closed→open/broken (consecutive_failures)".into()),
        });
        r
    }

    fn db() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        conn
    }

    fn ids(p: &Page) -> Vec<&str> {
        p.requests.iter().map(|s| s.id.as_str()).collect()
    }

    #[test]
    fn insert_round_trips_and_skips_duplicates() {
        let mut c = db();
        let r = failed("x1", 1_700_000_000_123);
        assert_eq!(insert_batch(&mut c, &[r.clone(), record("x2", 5)]).unwrap(), 2);
        // A duplicate id is skipped without failing the rest of the batch.
        assert_eq!(insert_batch(&mut c, &[r.clone(), record("x3", 6)]).unwrap(), 1);
        assert_eq!(count(&c).unwrap(), 3);
        let v = get(&c, "x1").unwrap().unwrap();
        assert_eq!(v["started_at"], "2023-11-14T22:13:20.123Z");
        assert_eq!(v["status_class"], "5xx");
        let mut back = v.clone();
        back.as_object_mut().unwrap().remove("started_at");
        back.as_object_mut().unwrap().remove("status_class");
        assert_eq!(serde_json::from_value::<RequestRecord>(back).unwrap(), r);
        assert_eq!(get(&c, "nope").unwrap(), None);
        let page = list(&c, &Filter::default(), None, 10).unwrap();
        let s = &page.requests[0];
        assert_eq!((s.id.as_str(), s.status, s.attempts, s.failed_over), ("x1", 503, 2, true));
        assert_eq!(s.error.as_deref(), Some("Overloaded 100%_sure"));
        assert_eq!(s.tokens, Tokens::default());
        assert_eq!(s.cost_usd, None);
        let ok = page.requests.iter().find(|s| s.id == "x2").unwrap();
        assert_eq!(ok.tokens.cache_read, Some(1000));
        assert_eq!(ok.first_byte_ms, Some(120.0));
    }

    #[test]
    fn search_text_holds_the_error_and_failed_attempts_only() {
        assert_eq!(search_text(&record("a", 1)), None);
        let t = search_text(&failed("b", 1)).unwrap();
        assert!(
            t.contains("overloaded_error") && t.contains("Overloaded") && t.contains("b connect connection refused")
        );
        let mut r = record("c", 1);
        r.attempts[0].status = Some(529);
        assert_eq!(search_text(&r).as_deref(), Some("a 529"));
        let mut long = failed("d", 1);
        long.error.as_mut().unwrap().message = "é".repeat(3000);
        assert!(search_text(&long).unwrap().len() <= MAX_SEARCH_BYTES);
    }

    #[test]
    fn cursor_encoding_round_trips_and_rejects_garbage() {
        let c = Cursor { started_at: 1_764_000_000_000, seq: 42 };
        assert_eq!(Cursor::decode(&c.encode()), Some(c));
        for bad in ["", "zz", &"g".repeat(32), &"0".repeat(31), &"0".repeat(33)] {
            assert_eq!(Cursor::decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn pages_have_no_duplicates_or_gaps_while_records_arrive() {
        let mut c = db();
        // Ties on started_at are broken by seq.
        let batch: Vec<_> = (0..95).map(|i| record(&format!("r{i:03}"), 1000 + (i / 3) as u64)).collect();
        insert_batch(&mut c, &batch).unwrap();
        let mut seen: Vec<String> = Vec::new();
        let mut cursor = None;
        let mut round = 0;
        loop {
            let page = list(&c, &Filter::default(), cursor, 10).unwrap();
            seen.extend(page.requests.iter().map(|s| s.id.clone()));
            // Between pages: newer records, and one late record older than everything.
            round += 1;
            insert_batch(&mut c, &[record(&format!("new{round}"), 5000 + round), record(&format!("old{round}"), 1)])
                .unwrap();
            match page.next_cursor {
                Some(next) => cursor = Cursor::decode(&next),
                None => break,
            }
        }
        let mut want: Vec<String> = batch.iter().map(|r| r.id.clone()).collect();
        want.reverse();
        // Every original record exactly once, in order; the late-but-old ones appear at the end.
        let originals: Vec<&String> = seen.iter().filter(|s| s.starts_with('r')).collect();
        assert_eq!(originals, want.iter().collect::<Vec<_>>());
        assert!(!seen.iter().any(|s| s.starts_with("new")));
        let mut dedup = seen.clone();
        dedup.sort();
        dedup.dedup();
        assert_eq!(dedup.len(), seen.len());
    }

    #[test]
    fn every_filter_narrows() {
        let mut c = db();
        let mut rs = Vec::new();
        let mut r = record("ok-a", 1000);
        r.endpoint = Some("a".into());
        rs.push(r);
        let mut r = record("ok-b-gpt", 2000);
        r.endpoint = Some("b".into());
        r.model_requested = Some("gpt-5".into());
        r.protocol = "openai".into();
        rs.push(r);
        rs.push(failed("fail-503", 3000));
        let mut r = record("bad-400", 4000);
        r.status = 400;
        r.error = Some(RecordError {
            source: "gateway".into(),
            kind: None,
            message: "max_tokens: required".into(),
            upstream_body: None,
        });
        rs.push(r);
        let mut r = record("resp-429", 5000);
        r.protocol = "responses".into();
        r.status = 429;
        rs.push(r);
        insert_batch(&mut c, &rs).unwrap();
        let q = |f: Filter| ids(&list(&c, &f, None, 50).unwrap()).into_iter().map(String::from).collect::<Vec<_>>();
        assert_eq!(q(Filter::default()), ["resp-429", "bad-400", "fail-503", "ok-b-gpt", "ok-a"]);
        assert_eq!(
            q(Filter { since_ms: Some(2000), until_ms: Some(4000), ..Default::default() }),
            ["fail-503", "ok-b-gpt"]
        );
        assert_eq!(q(Filter { endpoint: Some("b".into()), ..Default::default() }), ["ok-b-gpt"]);
        assert_eq!(q(Filter { model: Some("gpt-5".into()), ..Default::default() }), ["ok-b-gpt"]);
        assert_eq!(q(Filter { protocol: Some("responses".into()), ..Default::default() }), ["resp-429"]);
        assert_eq!(q(Filter { status_class: Some(4), ..Default::default() }), ["resp-429", "bad-400"]);
        assert_eq!(q(Filter { status_class: Some(5), ..Default::default() }), ["fail-503"]);
        assert_eq!(q(Filter { status: Some(400), ..Default::default() }), ["bad-400"]);
        assert_eq!(q(Filter { failed_over: Some(true), ..Default::default() }), ["fail-503"]);
        assert_eq!(q(Filter { failed_over: Some(false), ..Default::default() }).len(), 4);
        // Text search: case-insensitive, in the final error and in failed attempts, with LIKE
        // wildcards taken literally.
        assert_eq!(q(Filter { text: Some("OVERLOADED".into()), ..Default::default() }), ["fail-503"]);
        assert_eq!(q(Filter { text: Some("refused".into()), ..Default::default() }), ["fail-503"]);
        assert_eq!(q(Filter { text: Some("max_tokens".into()), ..Default::default() }), ["bad-400"]);
        assert_eq!(q(Filter { text: Some("100%_s".into()), ..Default::default() }), ["fail-503"]);
        assert!(q(Filter { text: Some("100%_x".into()), ..Default::default() }).is_empty());
        assert_eq!(q(Filter { text: Some("%".into()), ..Default::default() }), ["fail-503"]);
        // Combined.
        assert_eq!(
            q(Filter { endpoint: Some("a".into()), status_class: Some(2), since_ms: Some(500), ..Default::default() }),
            ["ok-a"]
        );
    }

    #[test]
    fn common_filters_use_indexes_not_scans_or_sorts() {
        let c = db();
        let cursor = Cursor { started_at: 10, seq: 5 };
        let cases = [
            (Filter::default(), "requests_time"),
            (Filter { endpoint: Some("a".into()), ..Default::default() }, "requests_endpoint"),
            (Filter { model: Some("m".into()), ..Default::default() }, "requests_model"),
            (Filter { protocol: Some("claude".into()), ..Default::default() }, "requests_protocol"),
            (Filter { status_class: Some(5), ..Default::default() }, "requests_class"),
            (Filter { status: Some(503), ..Default::default() }, "requests_class"),
            (Filter { failed_over: Some(true), ..Default::default() }, "requests_failed_over"),
            (Filter { text: Some("x".into()), ..Default::default() }, "requests_search"),
            (Filter { since_ms: Some(1), until_ms: Some(2), ..Default::default() }, "requests_time"),
        ];
        for (f, index) in cases {
            let (mut cond, mut args) = where_clause(&f);
            cond.push_str(" AND (started_at, seq) < (?, ?)");
            args.push(SqlValue::Integer(cursor.started_at));
            args.push(SqlValue::Integer(cursor.seq));
            let sql = format!(
                "EXPLAIN QUERY PLAN SELECT {SUMMARY_COLUMNS} FROM requests WHERE {cond} ORDER BY started_at DESC, seq DESC LIMIT 51"
            );
            let plan: Vec<String> = c
                .prepare(&sql)
                .unwrap()
                .query_map(params_from_iter(args), |r| r.get::<_, String>(3))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let plan = plan.join(" | ");
            assert!(plan.contains(index), "{f:?}: {plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{f:?} sorts: {plan}");
            assert!(!plan.starts_with("SCAN requests") || plan.contains("INDEX"), "{f:?} scans: {plan}");
        }
        let plan: String = c
            .query_row(
                "EXPLAIN QUERY PLAN SELECT started_at FROM requests WHERE started_at >= ?1 AND started_at < ?2",
                [1, 2],
                |r| r.get(3),
            )
            .unwrap();
        assert!(plan.contains("requests_time"), "{plan}");
        let plan: String = c
            .query_row(
                "EXPLAIN QUERY PLAN SELECT d.record FROM requests r JOIN request_records d ON d.seq = r.seq WHERE r.id = ?1",
                ["x"],
                |r| r.get(3),
            )
            .unwrap();
        assert!(plan.contains("requests_id"), "{plan}");
    }

    #[test]
    fn prune_deletes_only_old_records_in_chunks() {
        let mut c = db();
        let rs: Vec<_> = (0..25).map(|i| record(&format!("p{i}"), 1000 + i)).collect();
        insert_batch(&mut c, &rs).unwrap();
        assert_eq!(prune_chunk(&mut c, 1020, 8).unwrap(), 8);
        assert_eq!(prune_chunk(&mut c, 1020, 8).unwrap(), 8);
        assert_eq!(prune_chunk(&mut c, 1020, 8).unwrap(), 4);
        assert_eq!(prune_chunk(&mut c, 1020, 8).unwrap(), 0);
        assert_eq!(count(&c).unwrap(), 5);
        let details: i64 = c.query_row("SELECT COUNT(*) FROM request_records", [], |r| r.get(0)).unwrap();
        assert_eq!(details, 5);
        assert!(get(&c, "p19").unwrap().is_none());
        assert!(get(&c, "p20").unwrap().is_some());
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(percentiles(&mut v), (Some(50.0), Some(95.0)));
        assert_eq!(percentiles(&mut []), (None, None));
        assert_eq!(percentiles(&mut [7.0]), (Some(7.0), Some(7.0)));
        assert_eq!(percentiles(&mut [3.0, 1.0]), (Some(1.0), Some(3.0)));
        let mut v: Vec<f64> = (1..=20).map(f64::from).collect();
        // ⌈0.5·20⌉ = 10, ⌈0.95·20⌉ = 19.
        assert_eq!(percentiles(&mut v), (Some(10.0), Some(19.0)));
        let mut v = vec![5.0, 1.0, 5.0, 5.0, 2.0];
        assert_eq!(percentiles(&mut v), (Some(5.0), Some(5.0)));
    }

    fn row(at: i64, group: Option<&str>, status: u16, total_ms: f64, tokens: Tokens, cost: Option<f64>) -> StatRow<'_> {
        StatRow {
            started_at_ms: at,
            group,
            status,
            has_error: false,
            failed_over: false,
            total_ms,
            tokens,
            cost_usd: cost,
        }
    }

    #[test]
    fn stats_arithmetic_groups_buckets_and_unpriced_usage() {
        const H: i64 = 3_600_000;
        let t = |i, o, cr, cw| Tokens { input: Some(i), output: Some(o), cache_read: Some(cr), cache_write: Some(cw) };
        let q =
            StatsQuery { since_ms: 0, until_ms: 3 * H, group_by: Some(GroupBy::Endpoint), bucket: Some(Bucket::Hour) };
        let mut b = StatsBuilder::new(q);
        b.add(&row(10, Some("a"), 200, 100.0, t(10, 20, 30, 40), Some(0.5)));
        b.add(&row(20, Some("a"), 200, 300.0, t(1, 2, 3, 4), None)); // unpriced
        b.add(&StatRow { failed_over: true, ..row(H + 5, Some("a"), 502, 50.0, Tokens::default(), None) });
        b.add(&StatRow { has_error: true, ..row(H + 6, Some("b"), 200, 10.0, t(5, 0, 0, 0), Some(0.25)) });
        b.add(&row(2 * H, None, 503, 1.0, Tokens::default(), None));
        let r = b.finish();
        assert_eq!((r.group_by, r.bucket), (Some("endpoint"), Some("hour")));
        assert_eq!(
            r.groups.iter().map(|g| g.key.clone()).collect::<Vec<_>>(),
            [Some("a".into()), Some("b".into()), None]
        );
        let a = &r.groups[0];
        assert_eq!(a.buckets.len(), 2);
        assert_eq!((a.buckets[0].start.as_str(), a.buckets[0].start_ms), ("1970-01-01T00:00:00.000Z", 0));
        assert_eq!(a.buckets[1].start_ms, H);
        let first = &a.buckets[0].stats;
        assert_eq!((first.requests, first.errors, first.failovers), (2, 0, 0));
        assert_eq!(first.latency_ms, Latency { p50: Some(100.0), p95: Some(300.0) });
        assert_eq!(first.tokens, TokenSums { input: 11, output: 22, cache_read: 33, cache_write: 44 });
        assert_eq!(first.cost_usd, Some(0.5));
        assert_eq!(
            first.unpriced,
            Unpriced { requests: 1, tokens: TokenSums { input: 1, output: 2, cache_read: 3, cache_write: 4 } }
        );
        assert_eq!(first.usage_unknown, 0);
        let second = &a.buckets[1].stats;
        assert_eq!((second.requests, second.errors, second.failovers, second.usage_unknown), (1, 1, 1, 1));
        // No known cost at all is unknown, not 0 — and a request without usage is not "unpriced".
        assert_eq!((second.cost_usd, second.unpriced.requests), (None, 0));
        assert_eq!(a.totals.requests, 3);
        assert_eq!(a.totals.latency_ms, Latency { p50: Some(100.0), p95: Some(300.0) });
        // An error recorded on a 200 (a stream that broke) counts as an error.
        assert_eq!(r.groups[1].totals.errors, 1);
        assert_eq!(r.totals.requests, 5);
        assert_eq!(r.totals.errors, 3);
        assert_eq!(r.totals.cost_usd, Some(0.75));
        assert_eq!(r.totals.tokens.input, 16);
        assert_eq!(r.totals.latency_ms, Latency { p50: Some(50.0), p95: Some(300.0) });
    }

    #[test]
    fn stats_without_group_or_bucket_is_one_cell() {
        let q = StatsQuery { since_ms: 500, until_ms: 10_000_000, group_by: None, bucket: None };
        assert_eq!(q.bucket_count(), 1);
        let mut b = StatsBuilder::new(q);
        b.add(&row(600, Some("a"), 200, 1.0, Tokens::default(), None));
        b.add(&row(9_000_000, Some("b"), 200, 2.0, Tokens::default(), None));
        let r = b.finish();
        assert_eq!(r.groups.len(), 1);
        assert_eq!(r.groups[0].key, None);
        assert_eq!(r.groups[0].buckets.len(), 1);
        assert_eq!(r.groups[0].buckets[0].start_ms, 500);
        assert_eq!(r.groups[0].buckets[0].stats.requests, 2);
        let empty = StatsBuilder::new(q).finish();
        assert!(empty.groups.is_empty());
        assert_eq!(empty.totals.requests, 0);
        assert_eq!(empty.totals.latency_ms, Latency { p50: None, p95: None });
    }

    #[test]
    fn builder_handles_many_groups_and_rows_out_of_time_order() {
        const H: i64 = 3_600_000;
        let q =
            StatsQuery { since_ms: 0, until_ms: 10 * H, group_by: Some(GroupBy::Model), bucket: Some(Bucket::Hour) };
        let names: Vec<String> = (0..50).map(|i| format!("m{i:02}")).collect();
        let mut b = StatsBuilder::new(q);
        for hour in [5, 1, 5, 3, 0, 9, 3] {
            for n in &names {
                b.add(&row(hour * H + 7, Some(n), 200, hour as f64, Tokens::default(), None));
            }
            b.add(&row(hour * H, None, 200, 1.0, Tokens::default(), None));
        }
        let r = b.finish();
        assert_eq!(r.groups.len(), 51);
        assert_eq!(r.groups[0].key.as_deref(), Some("m00"));
        assert_eq!(r.groups[50].key, None);
        for g in &r.groups {
            let starts: Vec<i64> = g.buckets.iter().map(|b| b.start_ms).collect();
            assert_eq!(starts, [0, H, 3 * H, 5 * H, 9 * H], "{:?}", g.key);
            let counts: Vec<u64> = g.buckets.iter().map(|b| b.stats.requests).collect();
            assert_eq!(counts, [1, 1, 2, 2, 1], "{:?}", g.key);
        }
        assert_eq!(r.totals.requests, 7 * 51);
    }

    #[test]
    fn bucket_count_spans_partial_buckets() {
        const D: i64 = 86_400_000;
        let q = |s, u, b| StatsQuery { since_ms: s, until_ms: u, group_by: None, bucket: Some(b) };
        assert_eq!(q(0, D, Bucket::Day).bucket_count(), 1);
        assert_eq!(q(0, D + 1, Bucket::Day).bucket_count(), 2);
        assert_eq!(q(D - 1, D + 1, Bucket::Day).bucket_count(), 2);
        assert_eq!(q(0, 7 * D, Bucket::Hour).bucket_count(), 168);
    }

    #[test]
    fn stats_sql_matches_the_builder() {
        let mut c = db();
        let mut rs = vec![record("s1", 1_000), record("s2", 2_000), failed("s3", 3_000), record("late", 99_000_000)];
        rs[1].endpoint = Some("b".into());
        rs[1].cost_usd = None;
        rs[1].total_ms = 50.0;
        insert_batch(&mut c, &rs).unwrap();
        let q =
            StatsQuery { since_ms: 0, until_ms: 10_000, group_by: Some(GroupBy::Endpoint), bucket: Some(Bucket::Day) };
        let r = stats(&c, &q).unwrap();
        assert_eq!(r.totals.requests, 3);
        assert_eq!(r.totals.errors, 1);
        assert_eq!(r.totals.failovers, 1);
        assert_eq!(r.totals.unpriced.requests, 1);
        assert_eq!(r.totals.usage_unknown, 1);
        assert_eq!(
            r.groups.iter().map(|g| (g.key.clone().unwrap(), g.totals.requests)).collect::<Vec<_>>(),
            [("a".to_string(), 2), ("b".to_string(), 1)]
        );
        let by_model = stats(&c, &StatsQuery { group_by: Some(GroupBy::Model), ..q }).unwrap();
        assert_eq!(by_model.groups[0].key.as_deref(), Some("claude-sonnet-4-5"));
        let by_protocol = stats(&c, &StatsQuery { group_by: Some(GroupBy::Protocol), ..q }).unwrap();
        assert_eq!(by_protocol.groups[0].key.as_deref(), Some("claude"));
    }

    #[test]
    fn rfc3339_ms_formats() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(1_795_946_400_007), "2026-11-29T10:00:00.007Z");
    }

    #[test]
    fn read_records_uses_its_own_connection_for_files() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("ccmesh.db")).unwrap();
        let mut writer = Connection::open(dir.path().join("ccmesh.db")).unwrap();
        insert_batch(&mut writer, &[record("f1", 1)]).unwrap();
        assert_eq!(store.read_records(count).unwrap(), 1);
        // Read-only: a write through it fails.
        assert!(store.read_records(|c| Ok(c.execute("DELETE FROM requests", [])?)).is_err());
        let mem = Store::open_in_memory().unwrap();
        assert_eq!(mem.read_records(count).unwrap(), 0);
    }
}
