//! Reading request records: the filtered, cursor-paged list and one record's detail.

use serde::Serialize;
use serde_json::Value;

use super::{PERIOD_MS, period_of, rfc3339_ms};
use crate::observe::record::Tokens;
use crate::store::StoreError;
use crate::store::sql::{Dialect, Row, Sql, Value as SqlValue};

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
    /// The client key's name.
    pub client_key: Option<String>,
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
    /// The client key's name.
    pub client_key: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Page {
    pub requests: Vec<Summary>,
    pub next_cursor: Option<String>,
}

/// The WHERE clause of a filter (`1 = 1` when there is none) and its parameters.
pub(crate) fn where_clause(f: &Filter, dialect: Dialect) -> (String, Vec<SqlValue>) {
    let mut conds: Vec<&str> = Vec::new();
    let mut args: Vec<SqlValue> = Vec::new();
    if let Some(v) = f.since_ms {
        conds.push("started_at >= ?");
        args.push(SqlValue::Int(v));
    }
    if let Some(v) = f.until_ms {
        conds.push("started_at < ?");
        args.push(SqlValue::Int(v));
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
        args.push(SqlValue::Int(class.into()));
        // Spelled as the partial index `requests_class` is, so the planner sees it applies.
        if class != 2 {
            conds.push("status_class <> 2");
        }
    }
    if let Some(v) = f.status {
        conds.push("status = ?");
        args.push(SqlValue::Int(v.into()));
    }
    if let Some(v) = &f.client_key {
        conds.push("client_key = ?");
        args.push(SqlValue::Text(v.clone()));
        // As the partial index `requests_client_key` says it.
        conds.push("client_key IS NOT NULL");
    }
    // Spelled as each partial index `requests_failed_over` is, so the planner sees it applies.
    match (f.failed_over, dialect) {
        (Some(true), Dialect::Sqlite) => conds.push("failed_over = 1"),
        (Some(false), Dialect::Sqlite) => conds.push("failed_over = 0"),
        (Some(true), Dialect::Postgres) => conds.push("failed_over"),
        (Some(false), Dialect::Postgres) => conds.push("NOT failed_over"),
        (None, _) => {}
    }
    if let Some(q) = &f.text {
        // Stated separately so the planner sees the partial index `requests_search` applies.
        conds.push("search IS NOT NULL");
        // SQLite's LIKE ignores ASCII case; PostgreSQL's ILIKE is its equivalent.
        conds.push(match dialect {
            Dialect::Sqlite => "search LIKE ? ESCAPE '\\'",
            Dialect::Postgres => "search ILIKE ? ESCAPE '\\'",
        });
        args.push(SqlValue::Text(format!("%{}%", like_escape(q))));
    }
    let sql = if conds.is_empty() { "1 = 1".to_string() } else { conds.join(" AND ") };
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

pub(super) const SUMMARY_COLUMNS: &str =
    "seq, id, started_at, protocol, endpoint, model_requested, model_sent, status, stream,
     failed_over, attempts, total_ms, first_byte_ms, overhead_ms, input_tokens, output_tokens,
     cache_read_tokens, cache_write_tokens, cost_usd, error, client_key";

pub(crate) fn tok(v: Option<i64>) -> Option<u64> {
    v.map(|n| n.max(0) as u64)
}

fn summary_row(r: &Row) -> Result<(i64, Summary), StoreError> {
    let started_at = r.int(2)?;
    Ok((
        r.int(0)?,
        Summary {
            id: r.text(1)?,
            started_at: rfc3339_ms(started_at),
            started_at_ms: started_at,
            protocol: r.text(3)?,
            endpoint: r.opt_text(4)?,
            model_requested: r.opt_text(5)?,
            model_sent: r.opt_text(6)?,
            status: u16::try_from(r.int(7)?).unwrap_or(0),
            stream: r.bool(8)?,
            failed_over: r.bool(9)?,
            attempts: u32::try_from(r.int(10)?).unwrap_or(0),
            total_ms: r.real(11)?,
            first_byte_ms: r.opt_real(12)?,
            overhead_ms: r.real(13)?,
            tokens: Tokens {
                input: tok(r.opt_int(14)?),
                output: tok(r.opt_int(15)?),
                cache_read: tok(r.opt_int(16)?),
                cache_write: tok(r.opt_int(17)?),
            },
            cost_usd: r.opt_real(18)?,
            error: r.opt_text(19)?,
            client_key: r.opt_text(20)?,
        },
    ))
}

/// One page of records, newest first, after `cursor` (exclusive).
///
/// A filter by endpoint, model or protocol walks the periods `request_periods` lists for its
/// values, newest first, and reads each through the time index until the page is full; the
/// others are one query (module docs, `VALUE_PERIODS`).
pub fn list(db: &dyn Sql, filter: &Filter, cursor: Option<Cursor>, limit: usize) -> Result<Page, StoreError> {
    let want = limit.saturating_add(1);
    let terms = period_terms(filter);
    let mut rows = Vec::new();
    if terms.is_empty() {
        rows = page_rows(db, filter, cursor, want)?;
    } else {
        let mut before = None;
        'walk: loop {
            let periods = periods_holding(db, filter, cursor, &terms, before)?;
            for (newest, oldest) in runs(&periods) {
                // The last period of all has no end within i64: unbounded above.
                let end = newest.checked_add(1).and_then(|p| p.checked_mul(PERIOD_MS));
                let within = within(filter, oldest.saturating_mul(PERIOD_MS), end);
                rows.extend(page_rows(db, &within, cursor, want - rows.len())?);
                if rows.len() >= want {
                    break 'walk;
                }
            }
            match periods.last() {
                Some(&oldest) if periods.len() == PERIODS_PER_READ => before = Some(oldest),
                _ => break,
            }
        }
    }
    let next_cursor = if rows.len() > limit {
        rows.truncate(limit);
        rows.last().map(|(seq, s)| Cursor { started_at: s.started_at_ms, seq: *seq }.encode())
    } else {
        None
    };
    Ok(Page { requests: rows.into_iter().map(|(_, s)| s).collect(), next_cursor })
}

/// Newest-first periods as runs of adjacent ones, each `(newest, oldest)`: one range query
/// serves a run, so a value in every period is one index scan, as with no filter.
fn runs(periods: &[i64]) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = Vec::new();
    for &p in periods {
        match out.last_mut() {
            Some((_, oldest)) if *oldest == p + 1 => *oldest = p,
            _ => out.push((p, p)),
        }
    }
    out
}

/// The filter narrowed to `[start, end)` (unix ms; no `end`: unbounded), so the query has one
/// time range.
fn within(f: &Filter, start: i64, end: Option<i64>) -> Filter {
    Filter {
        since_ms: Some(f.since_ms.map_or(start, |s| s.max(start))),
        until_ms: match (f.until_ms, end) {
            (Some(u), Some(e)) => Some(u.min(e)),
            (u, e) => u.or(e),
        },
        ..f.clone()
    }
}

/// The `request_periods` dimensions a filter names, with the values it asks for.
pub(super) fn period_terms(f: &Filter) -> Vec<(&'static str, &str)> {
    [("endpoint", &f.endpoint), ("model", &f.model), ("protocol", &f.protocol)]
        .into_iter()
        .filter_map(|(dimension, value)| value.as_deref().map(|v| (dimension, v)))
        .collect()
}

/// Periods read at a time: a common value fills a page from its newest one or two, so reading
/// a month's worth (4,320) up front would cost more than the page.
const PERIODS_PER_READ: usize = 64;

/// Up to `PERIODS_PER_READ` periods holding a record with every value of `terms`, newest first:
/// within the filter's time range, not after the cursor's, and before `before`.
fn periods_holding(
    db: &dyn Sql,
    f: &Filter,
    cursor: Option<Cursor>,
    terms: &[(&'static str, &str)],
    before: Option<i64>,
) -> Result<Vec<i64>, StoreError> {
    let (sql, args) = periods_sql(f, cursor, terms, before);
    db.rows(&sql, &args)?.iter().map(|r| r.int(0)).collect()
}

/// The query of `periods_holding`.
pub(super) fn periods_sql(
    f: &Filter,
    cursor: Option<Cursor>,
    terms: &[(&'static str, &str)],
    before: Option<i64>,
) -> (String, Vec<SqlValue>) {
    let first = f.since_ms.map(period_of);
    let last = [
        f.until_ms.map(|u| period_of(u.saturating_sub(1))),
        cursor.map(|c| period_of(c.started_at)),
        before.map(|p| p.saturating_sub(1)),
    ]
    .into_iter()
    .flatten()
    .min();
    let mut selects = Vec::with_capacity(terms.len());
    let mut args = Vec::new();
    for (dimension, value) in terms {
        let mut select = String::from("SELECT period FROM request_periods WHERE dimension = ? AND value = ?");
        args.push(SqlValue::Text((*dimension).into()));
        args.push(SqlValue::Text((*value).into()));
        if let Some(h) = first {
            select.push_str(" AND period >= ?");
            args.push(SqlValue::Int(h));
        }
        if let Some(h) = last {
            select.push_str(" AND period <= ?");
            args.push(SqlValue::Int(h));
        }
        selects.push(select);
    }
    (format!("{} ORDER BY period DESC LIMIT {PERIODS_PER_READ}", selects.join(" INTERSECT ")), args)
}

/// At most `want` rows matching the filter, after the cursor, newest first.
fn page_rows(
    db: &dyn Sql,
    filter: &Filter,
    cursor: Option<Cursor>,
    want: usize,
) -> Result<Vec<(i64, Summary)>, StoreError> {
    let (sql, args) = page_sql(filter, cursor, want, db.dialect());
    db.rows(&sql, &args)?.iter().map(summary_row).collect()
}

/// The query of `page_rows`.
pub(super) fn page_sql(
    filter: &Filter,
    cursor: Option<Cursor>,
    want: usize,
    dialect: Dialect,
) -> (String, Vec<SqlValue>) {
    let (mut cond, mut args) = where_clause(filter, dialect);
    if let Some(c) = cursor {
        cond.push_str(" AND (started_at, seq) < (?, ?)");
        args.push(SqlValue::Int(c.started_at));
        args.push(SqlValue::Int(c.seq));
    }
    let sql =
        format!("SELECT {SUMMARY_COLUMNS} FROM requests WHERE {cond} ORDER BY started_at DESC, seq DESC LIMIT {want}");
    (sql, args)
}

/// The start time (unix ms) a record id begins with: its first 12 hex digits.
pub(crate) fn started_at_of(id: &str) -> Option<i64> {
    let digits = id.get(..12)?;
    if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    i64::from_str_radix(digits, 16).ok()
}

/// The full stored record (with the decision trail), plus `started_at` (RFC 3339) and
/// `status_class` for the reader's convenience; `None` if there is no such id. The record is
/// found through its start time (`started_at_of`), so an id of any other shape names none.
/// Its detail holds what the row does not (`write::detail_json`); the rest comes from the row.
pub fn get(db: &dyn Sql, id: &str) -> Result<Option<Value>, StoreError> {
    let Some(started_at) = started_at_of(id) else { return Ok(None) };
    let sql = format!(
        "SELECT {SUMMARY_COLUMNS}, (SELECT record FROM request_records d WHERE d.seq = requests.seq)
         FROM requests WHERE started_at = ? AND id = ?"
    );
    let Some(row) = db.row(&sql, &[started_at.into(), id.into()])? else { return Ok(None) };
    let (_, summary) = summary_row(&row)?;
    let detail = row.text(21)?;
    let mut v: Value =
        serde_json::from_str(&detail).map_err(|e| StoreError::Corrupt(format!("request record {id}: {e}")))?;
    let Some(obj) = v.as_object_mut() else {
        return Err(StoreError::Corrupt(format!("request record {id}: the detail is not an object")));
    };
    let row = super::write::RowFacts {
        protocol: &summary.protocol,
        endpoint: summary.endpoint.as_deref(),
        status: i64::from(summary.status),
    };
    super::write::restore_detail_defaults(obj, &row);
    let Summary {
        id,
        started_at,
        started_at_ms,
        protocol,
        endpoint,
        model_requested,
        model_sent,
        status,
        stream,
        failed_over,
        attempts: _,
        total_ms,
        first_byte_ms,
        overhead_ms,
        tokens,
        cost_usd,
        error: _,
        client_key,
    } = summary;
    let fields = [
        ("id", Value::from(id)),
        ("started_at", Value::from(started_at)),
        ("started_at_ms", Value::from(started_at_ms)),
        ("protocol", Value::from(protocol)),
        ("endpoint", Value::from(endpoint)),
        ("model_requested", Value::from(model_requested)),
        ("model_sent", Value::from(model_sent)),
        ("status", Value::from(status)),
        ("status_class", Value::from(crate::observe::record::status_class(status))),
        ("stream", Value::from(stream)),
        ("failed_over", Value::from(failed_over)),
        ("total_ms", Value::from(total_ms)),
        ("first_byte_ms", Value::from(first_byte_ms)),
        ("overhead_ms", Value::from(overhead_ms)),
        ("tokens", serde_json::to_value(tokens).unwrap_or(Value::Null)),
        ("cost_usd", Value::from(cost_usd)),
        ("client_key", Value::from(client_key)),
    ];
    for (name, value) in fields {
        obj.insert(name.into(), value);
    }
    Ok(Some(v))
}
