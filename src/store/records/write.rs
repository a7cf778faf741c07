//! Writing request records: what a record's `requests` row holds (`Columns`, for both
//! backends), SQLite's batch insert of the writer thread and retention pruning.

use rusqlite::{CachedStatement, Connection, Statement, TransactionBehavior, params};

use super::PeriodsWritten;

use crate::observe::record::{AttemptRecord, Classification, RequestRecord};
use crate::protocol::json_write::JsonObject;
use crate::protocol::{Format, Protocol};
use crate::store::StoreError;
use crate::store::sql::Sql;

/// The searchable error text of a record is cut to this many bytes.
pub(super) const MAX_SEARCH_BYTES: usize = 2048;

/// The `requests` columns a record fills, in the order of `Columns`' fields.
macro_rules! insert_columns {
    () => {
        "id, started_at, protocol, endpoint, model_requested, model_sent, status, status_class, stream,
         failed_over, attempts, total_ms, first_byte_ms, overhead_ms, input_tokens, output_tokens,
         cache_read_tokens, cache_write_tokens, cost_usd, error, search, client_key"
    };
}
pub(crate) use insert_columns;

/// Whether a record id is stored: through its start time, as `records::get` finds it. (A
/// `NOT EXISTS` in the insert itself would make SQLite stage every row in a temporary table,
/// as it does for any insert that reads its own table: twice the cost, measured.) The probe
/// reads every row that started in the same millisecond, so under load it costs more the more
/// requests start together: it is made only for a batch that may have been written before.
const STORED: &str = "SELECT 1 FROM requests WHERE started_at = ?1 AND id = ?2";

const INSERT_PERIOD: &str = "INSERT OR IGNORE INTO request_periods (dimension, value, period) VALUES (?1, ?2, ?3)";

/// After a prune pass: the periods that ended before the cutoff hold no record any more.
pub const DELETE_EMPTIED_PERIODS: &str = "DELETE FROM request_periods WHERE period < ?";

/// One record's `requests` row: the narrow columns the filters, the list and the statistics
/// read. Both backends insert exactly these, so a change of what is stored is made here.
pub struct Columns<'a> {
    pub id: &'a str,
    pub started_at: i64,
    pub protocol: &'a str,
    pub endpoint: Option<&'a str>,
    pub model_requested: Option<&'a str>,
    pub model_sent: Option<&'a str>,
    pub status: i64,
    pub status_class: i64,
    pub stream: bool,
    pub failed_over: bool,
    pub attempts: i64,
    pub total_ms: f64,
    pub first_byte_ms: Option<f64>,
    pub overhead_ms: f64,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub cache_read_tokens: Option<i64>,
    pub cache_write_tokens: Option<i64>,
    pub cost_usd: Option<f64>,
    pub error: Option<&'a str>,
    pub search: Option<String>,
    pub client_key: Option<&'a str>,
}

impl<'a> Columns<'a> {
    pub fn of(r: &'a RequestRecord) -> Columns<'a> {
        Columns {
            id: &r.id,
            started_at: sql_int(r.started_at_ms),
            protocol: &r.protocol,
            endpoint: r.endpoint.as_deref(),
            model_requested: r.model_requested.as_deref(),
            model_sent: r.model_sent.as_deref(),
            status: i64::from(r.status),
            status_class: class_digit(r.status),
            stream: r.stream,
            failed_over: r.failed_over,
            attempts: sql_int(r.attempts.len() as u64),
            total_ms: r.total_ms,
            first_byte_ms: r.first_byte_ms,
            overhead_ms: r.overhead_ms,
            input_tokens: r.tokens.input.map(sql_int),
            output_tokens: r.tokens.output.map(sql_int),
            cache_read_tokens: r.tokens.cache_read.map(sql_int),
            cache_write_tokens: r.tokens.cache_write.map(sql_int),
            cost_usd: r.cost_usd,
            error: r.error.as_ref().map(|e| e.message.as_str()),
            search: search_text(r),
            client_key: r.client_key.as_deref(),
        }
    }
}

/// The stored detail: the record as JSON without what its `requests` row holds (`Columns`);
/// `query::get` puts those fields back from the row. A detail stored whole (before this was
/// so) reads the same: the row's values are the ones it holds.
///
/// Fields at their default (`null`, `[]`, `false`) are left out, as most are on a request that
/// went well: writing their keys was a third of the detail's cost. [`restore_detail_defaults`]
/// puts them back when the detail is read. Written by hand, not derived: a derived serializer
/// checked every key for characters to escape and wrote it in three pieces, nearly half of
/// what the detail cost (BENCHMARKS.md).
pub fn detail_json(r: &RequestRecord) -> String {
    // Every field named, none with `..`: a field added to the record must be placed here or in
    // `Columns` (and `query::get`) before this compiles.
    let RequestRecord {
        id: _,
        started_at_ms: _,
        protocol: _,
        method,
        path,
        user_agent,
        session_id,
        model_requested: _,
        model_sent: _,
        model_answered,
        endpoint: _,
        stream: _,
        status: _,
        error,
        first_byte_ms: _,
        first_token_ms,
        total_ms: _,
        overhead_ms: _,
        tokens: _,
        cost_usd: _,
        attempts,
        failed_over: _,
        conversion,
        losses,
        client_key: _,
        affinity,
    } = r;
    let protocol = Protocol::parse(&r.protocol);
    let mut out = Vec::with_capacity(160 + 160 * attempts.len());
    let mut detail = JsonObject::open(&mut out);
    if method != USUAL_METHOD {
        detail.text("method", method);
    }
    if Some(path.as_ref()) != protocol.and_then(Protocol::usual_path) {
        detail.text("path", path);
    }
    detail.text_if("user_agent", user_agent.as_deref());
    detail.text_if("session_id", session_id.as_deref());
    detail.text_if("model_answered", model_answered.as_deref());
    if let Some(error) = error {
        detail.value("error", error);
    }
    if let Some(ms) = first_token_ms {
        detail.value("first_token_ms", ms);
    }
    match attempts.as_slice() {
        [only] if answered_plainly(r, only) => write_plain_attempt(detail.key("attempt"), only, protocol),
        _ => {
            let mut list = detail.list("attempts");
            for attempt in attempts {
                write_attempt(list.element(), attempt);
            }
            list.close();
        }
    }
    detail.text_if("conversion", conversion.as_deref());
    if !losses.is_empty() {
        detail.value("losses", losses);
    }
    if *affinity {
        detail.value("affinity", &true);
    }
    detail.close();
    // Only text and serde_json's output went in: always UTF-8.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// One attempt of the detail, with the fields at `null` left out (`ATTEMPT_NULLS`).
fn write_attempt(out: &mut Vec<u8>, attempt: &AttemptRecord) {
    // Every field named, none with `..`: a field added to an attempt must be placed here.
    let AttemptRecord {
        endpoint,
        resume,
        format,
        started_ms,
        duration_ms,
        status,
        error_kind,
        error,
        classification,
        breaker,
    } = attempt;
    let mut json = JsonObject::open(out);
    json.text("endpoint", endpoint);
    json.text_if("resume", resume.as_deref());
    json.text("format", format);
    json.value("started_ms", started_ms);
    json.value("duration_ms", duration_ms);
    if let Some(status) = status {
        json.value("status", status);
    }
    json.text_if("error_kind", error_kind.as_deref());
    json.text_if("error", error.as_deref());
    json.value("classification", classification);
    json.text_if("breaker", breaker.as_deref());
    json.close();
}

/// Whether `attempt`, a record's only one, is what most are: it answered, with the record's
/// status, at the record's endpoint, with nothing to say. Such an attempt is stored as
/// `"attempt"` with its timings (and its format, when the request was converted); the row holds
/// the rest.
fn answered_plainly(r: &RequestRecord, attempt: &AttemptRecord) -> bool {
    let AttemptRecord {
        endpoint,
        resume,
        format: _,
        started_ms: _,
        duration_ms: _,
        status,
        error_kind,
        error,
        classification,
        breaker,
    } = attempt;
    r.endpoint.as_deref() == Some(endpoint.as_ref())
        && *status == Some(r.status)
        && *classification == Classification::Success
        && resume.is_none()
        && error_kind.is_none()
        && error.is_none()
        && breaker.is_none()
}

/// An attempt that `answered_plainly`: its timings, and its format unless it is the one the
/// record's protocol is passed through to.
fn write_plain_attempt(out: &mut Vec<u8>, attempt: &AttemptRecord, protocol: Option<Protocol>) {
    let mut json = JsonObject::open(out);
    if Some(attempt.format.as_ref()) != protocol.map(|p| Format::native_to(p).as_str()) {
        json.text("format", &attempt.format);
    }
    json.value("started_ms", &attempt.started_ms);
    json.value("duration_ms", &attempt.duration_ms);
    json.close();
}

/// The method a detail leaves out: nearly every proxied request's.
const USUAL_METHOD: &str = "POST";

/// The keys a stored detail may leave out that stand for `null`; `losses` stands for `[]` and
/// `affinity` for `false`.
const DETAIL_NULLS: [&str; 6] = ["user_agent", "session_id", "model_answered", "error", "first_token_ms", "conversion"];

/// The keys a stored attempt may leave out; each stands for `null`.
const ATTEMPT_NULLS: [&str; 4] = ["status", "error_kind", "error", "breaker"];

/// What a record's row says that its detail may leave out.
pub(super) struct RowFacts<'a> {
    pub protocol: &'a str,
    pub endpoint: Option<&'a str>,
    pub status: i64,
}

/// Put back what `detail_json` leaves out — the keys at their default, the usual method and
/// path, the one plain attempt's endpoint, status and classification — so a record reads as it
/// was recorded (and as a detail stored whole reads).
pub(super) fn restore_detail_defaults(detail: &mut serde_json::Map<String, serde_json::Value>, row: &RowFacts<'_>) {
    use serde_json::Value;
    let protocol = Protocol::parse(row.protocol);
    detail.entry("method").or_insert_with(|| Value::from(USUAL_METHOD));
    if let Some(path) = protocol.and_then(Protocol::usual_path) {
        detail.entry("path").or_insert_with(|| Value::from(path));
    }
    if let Some(Value::Object(mut plain)) = detail.remove("attempt") {
        plain.insert("endpoint".into(), Value::from(row.endpoint));
        plain.insert("status".into(), Value::from(row.status));
        plain.insert("classification".into(), serde_json::to_value(Classification::Success).unwrap_or(Value::Null));
        if let Some(native) = protocol.map(Format::native_to) {
            plain.entry("format").or_insert_with(|| Value::from(native.as_str()));
        }
        detail.insert("attempts".into(), Value::Array(vec![Value::Object(plain)]));
    }
    for key in DETAIL_NULLS {
        detail.entry(key).or_insert(serde_json::Value::Null);
    }
    detail.entry("losses").or_insert_with(|| serde_json::Value::Array(Vec::new()));
    detail.entry("affinity").or_insert(serde_json::Value::Bool(false));
    let attempts = detail.get_mut("attempts").and_then(serde_json::Value::as_array_mut);
    for attempt in attempts.into_iter().flatten().filter_map(serde_json::Value::as_object_mut) {
        for key in ATTEMPT_NULLS {
            attempt.entry(key).or_insert(serde_json::Value::Null);
        }
    }
}

pub(super) fn sql_int(v: u64) -> i64 {
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
pub(super) fn search_text(r: &RequestRecord) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    if let Some(e) = &r.error {
        parts.push(e.source.clone());
        parts.extend(e.kind.clone());
        parts.push(e.message.clone());
    }
    for a in &r.attempts {
        let failed = a.status.is_some_and(|s| s >= 400);
        if failed || a.error.is_some() || a.error_kind.is_some() {
            let mut line = a.endpoint.to_string();
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

/// Insert records and their periods (`request_periods`) in one transaction; returns how many were
/// new (a record whose id is already stored is skipped, so one duplicate can never fail a
/// whole batch).
pub fn insert_batch(conn: &mut Connection, records: &[RequestRecord]) -> Result<usize, StoreError> {
    insert_batch_noting(conn, records, &mut PeriodsWritten::default(), Batch::MayBeStored)
}

/// Whether a batch's records may already be stored, so each must be looked for first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Batch {
    /// Records no batch has held before: the writer's first try. Each request's record is
    /// submitted once, with an id of its own (its start time and a random part), so none of
    /// them can be stored yet.
    Fresh,
    /// Records that may have been written before (a retry: the batch that failed was rolled
    /// back whole, but nothing is assumed).
    MayBeStored,
}

/// `insert_batch` for a writer that remembers the periods it wrote, and writes only new ones.
///
/// Rows go in with multi-row `INSERT`s of `ROWS_PER_INSERT` (then fewer) rows: SQLite's cost of
/// running a statement (opening its cursors, resetting, halting) is paid per statement: sharing
/// it between rows took about a tenth off a record's write (BENCHMARKS.md). A record's summary and
/// detail rows share `seq`, numbered on from the highest either table holds (`Numbering`). The
/// transaction takes the write lock at once, so nothing can insert between reading that number
/// and using it.
pub fn insert_batch_noting(
    conn: &mut Connection,
    records: &[RequestRecord],
    written: &mut PeriodsWritten,
    batch: Batch,
) -> Result<usize, StoreError> {
    let periods = written.missing(records);
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut rows: Vec<(Columns<'_>, String)> = Vec::with_capacity(records.len());
    {
        let mut stored = tx.prepare_cached(STORED)?;
        for r in records {
            let c = Columns::of(r);
            if batch == Batch::MayBeStored && stored.exists(params![c.started_at, c.id])? {
                continue;
            }
            let json = detail_json(r);
            rows.push((c, json));
        }
    }
    let (highest_summary, highest_detail): (i64, i64) =
        tx.prepare_cached(HIGHEST_SEQ)?.query_row([], |row| Ok((row.get(0)?, row.get(1)?)))?;
    let numbering = Numbering::of(batch, highest_summary, highest_detail);
    let first_seq = highest_summary.max(highest_detail) + 1;
    let seqs: Vec<i64> = (0..rows.len() as i64).map(|i| first_seq + i).collect();
    // Each insert is taken from the cache once per batch and kept while the batch's rows go in:
    // handing a statement back to the cache clears every one of its parameters (368 for sixteen
    // rows), which cost as much per chunk as half a row's write.
    let mut summaries: [Option<CachedStatement<'_>>; CHUNK_LENS.len()] = Default::default();
    let mut details: [Option<CachedStatement<'_>>; CHUNK_LENS.len()] = Default::default();
    let mut done = 0;
    while done < rows.len() {
        let n = chunk_len(rows.len() - done);
        let chunk = &rows[done..done + n];
        let seq = &seqs[done..done + n];
        let i = chunk_index(n);
        let (summary_sql, detail_sql) = multi_row_sql(numbering, i);
        let given = numbering == Numbering::Given;
        let summary = cached(&tx, &mut summaries[i], summary_sql)?;
        let per_row = if given { SUMMARY_COLUMNS + 1 } else { SUMMARY_COLUMNS };
        for (row, ((c, _), seq)) in chunk.iter().zip(seq).enumerate() {
            let mut before = row * per_row;
            if given {
                summary.raw_bind_parameter(before + 1, *seq)?;
                before += 1;
            }
            bind_summary(summary, before, c)?;
        }
        summary.raw_execute()?;
        numbering.check(&tx, seq)?;
        let detail = cached(&tx, &mut details[i], detail_sql)?;
        for (row, ((_, json), seq)) in chunk.iter().zip(seq).enumerate() {
            if given {
                detail.raw_bind_parameter(row * 2 + 1, *seq)?;
                detail.raw_bind_parameter(row * 2 + 2, json.as_str())?;
            } else {
                detail.raw_bind_parameter(row + 1, json.as_str())?;
            }
        }
        detail.raw_execute()?;
        numbering.check(&tx, seq)?;
        done += n;
    }
    drop((summaries, details));
    {
        let mut period = tx.prepare_cached(INSERT_PERIOD)?;
        for (dimension, value, h) in &periods {
            period.execute(params![dimension, value, h])?;
        }
    }
    tx.commit()?;
    written.note(&periods);
    Ok(rows.len())
}

/// The most rows one `INSERT` carries (23 parameters each, far below SQLite's limit).
const ROWS_PER_INSERT: usize = 16;

/// How many of `left` rows the next `INSERT` takes: 16, 4 or 1, so that a batch of any size
/// needs at most six statement texts, each prepared once and cached.
fn chunk_len(left: usize) -> usize {
    CHUNK_LENS.into_iter().rev().find(|&n| n <= left).unwrap_or(1)
}

/// The highest `seq` of each table (0 when empty).
const HIGHEST_SEQ: &str = "SELECT (SELECT coalesce(max(seq), 0) FROM requests), \
                           (SELECT coalesce(max(seq), 0) FROM request_records)";

/// Who numbers a batch's rows (`seq`, shared by a record's summary and detail row).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Numbering {
    /// SQLite, as it numbers a row given no `seq`: one past the table's highest. Both tables
    /// then give the batch the same numbers. A row given its `seq` costs a seek to prove the
    /// number free; and a statement of several rows that may fail half way (a number taken, a
    /// `NOT NULL` column empty: hence these statements' `OR FAIL`, since an error rolls back
    /// the whole batch anyway) has SQLite copy every page it touches into a statement journal
    /// first, to take back its own rows (BENCHMARKS.md: ~1.2 k instructions a record in all).
    BySqlite,
    /// The writer, one past the higher of the two tables' highest: when they differ (a table
    /// holding a row the other does not, left by an older version or a hand), and on a retry,
    /// which should not depend on how the first try went.
    Given,
}

impl Numbering {
    pub(crate) fn of(batch: Batch, highest_summary: i64, highest_detail: i64) -> Numbering {
        if batch == Batch::Fresh && highest_summary == highest_detail { Numbering::BySqlite } else { Numbering::Given }
    }

    /// After an insert of the rows numbered `seqs`: SQLite numbered them so. A batch whose
    /// numbers came out otherwise is refused whole (and retried with `Given` numbers), never
    /// stored with a summary and a detail that do not match.
    fn check(self, tx: &Connection, seqs: &[i64]) -> Result<(), StoreError> {
        let last = tx.last_insert_rowid();
        match (self, seqs.last()) {
            (Numbering::BySqlite, Some(&expected)) if last != expected => Err(StoreError::Corrupt(format!(
                "SQLite numbered a record row {last} where {expected} was due; the batch is written again"
            ))),
            _ => Ok(()),
        }
    }
}

const INSERT_SUMMARY_HEAD: &str = concat!("INSERT INTO requests (seq, ", insert_columns!(), ") VALUES ");
const INSERT_DETAIL_HEAD: &str = "INSERT INTO request_records (seq, record) VALUES ";
const INSERT_UNNUMBERED_SUMMARY_HEAD: &str = concat!("INSERT OR FAIL INTO requests (", insert_columns!(), ") VALUES ");
const INSERT_UNNUMBERED_DETAIL_HEAD: &str = "INSERT OR FAIL INTO request_records (record) VALUES ";

/// A row's parameters in the summary insert besides `seq`: the `Columns`.
const SUMMARY_COLUMNS: usize = 22;

/// The statement texts for each row count `chunk_len` gives: `(1, 4, 16)` rows, with the rows'
/// `seq` given (`Numbering::Given`) and without (`Numbering::BySqlite`).
struct MultiRow {
    summary: [String; 3],
    detail: [String; 3],
    unnumbered_summary: [String; 3],
    unnumbered_detail: [String; 3],
}

static MULTI_ROW: std::sync::LazyLock<MultiRow> = std::sync::LazyLock::new(|| MultiRow {
    summary: CHUNK_LENS.map(|rows| multi_row_insert(INSERT_SUMMARY_HEAD, SUMMARY_COLUMNS + 1, rows)),
    detail: CHUNK_LENS.map(|rows| multi_row_insert(INSERT_DETAIL_HEAD, 2, rows)),
    unnumbered_summary: CHUNK_LENS.map(|rows| multi_row_insert(INSERT_UNNUMBERED_SUMMARY_HEAD, SUMMARY_COLUMNS, rows)),
    unnumbered_detail: CHUNK_LENS.map(|rows| multi_row_insert(INSERT_UNNUMBERED_DETAIL_HEAD, 1, rows)),
});

const CHUNK_LENS: [usize; 3] = [1, 4, ROWS_PER_INSERT];

/// Where `rows` (one of `CHUNK_LENS`) is in `CHUNK_LENS`.
fn chunk_index(rows: usize) -> usize {
    CHUNK_LENS.iter().position(|&n| n == rows).unwrap_or(0)
}

/// The summary and the detail insert for `CHUNK_LENS[i]` rows.
fn multi_row_sql(numbering: Numbering, i: usize) -> (&'static str, &'static str) {
    match numbering {
        Numbering::Given => (&MULTI_ROW.summary[i], &MULTI_ROW.detail[i]),
        Numbering::BySqlite => (&MULTI_ROW.unnumbered_summary[i], &MULTI_ROW.unnumbered_detail[i]),
    }
}

/// The statement in `slot`, taken from the connection's cache the first time.
fn cached<'s, 'c>(
    tx: &'c Connection,
    slot: &'s mut Option<CachedStatement<'c>>,
    sql: &str,
) -> Result<&'s mut CachedStatement<'c>, StoreError> {
    let statement = match slot.take() {
        Some(statement) => statement,
        None => tx.prepare_cached(sql)?,
    };
    Ok(slot.insert(statement))
}

/// `head` followed by `rows` groups of `per_row` parameters.
fn multi_row_insert(head: &str, per_row: usize, rows: usize) -> String {
    let group = format!("({})", vec!["?"; per_row].join(", "));
    format!("{head}{}", vec![group; rows].join(", "))
}

/// Bind one row's columns, in the order of `insert_columns!`, after the `before` parameters
/// ahead of them in the statement. Each value is bound as its own type rather than through
/// `&dyn ToSql`, which cost a dynamic call and a match per value (22 values a record).
fn bind_summary(statement: &mut Statement<'_>, before: usize, c: &Columns<'_>) -> rusqlite::Result<()> {
    let at = |n: usize| before + n;
    statement.raw_bind_parameter(at(1), c.id)?;
    statement.raw_bind_parameter(at(2), c.started_at)?;
    statement.raw_bind_parameter(at(3), c.protocol)?;
    statement.raw_bind_parameter(at(4), c.endpoint)?;
    statement.raw_bind_parameter(at(5), c.model_requested)?;
    statement.raw_bind_parameter(at(6), c.model_sent)?;
    statement.raw_bind_parameter(at(7), c.status)?;
    statement.raw_bind_parameter(at(8), c.status_class)?;
    statement.raw_bind_parameter(at(9), c.stream)?;
    statement.raw_bind_parameter(at(10), c.failed_over)?;
    statement.raw_bind_parameter(at(11), c.attempts)?;
    statement.raw_bind_parameter(at(12), c.total_ms)?;
    statement.raw_bind_parameter(at(13), c.first_byte_ms)?;
    statement.raw_bind_parameter(at(14), c.overhead_ms)?;
    statement.raw_bind_parameter(at(15), c.input_tokens)?;
    statement.raw_bind_parameter(at(16), c.output_tokens)?;
    statement.raw_bind_parameter(at(17), c.cache_read_tokens)?;
    statement.raw_bind_parameter(at(18), c.cache_write_tokens)?;
    statement.raw_bind_parameter(at(19), c.cost_usd)?;
    statement.raw_bind_parameter(at(20), c.error)?;
    statement.raw_bind_parameter(at(21), c.search.as_deref())?;
    statement.raw_bind_parameter(at(22), c.client_key)?;
    Ok(())
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
    if seqs.len() < chunk {
        tx.execute(DELETE_EMPTIED_PERIODS, [super::period_of(cutoff_ms)])?;
    }
    tx.commit()?;
    Ok(seqs.len())
}

/// Number of stored records in an SQLite database (tests, benchmarks).
pub fn count(conn: &Connection) -> Result<u64, StoreError> {
    count_in(conn)
}

/// Number of stored records, either backend (status).
pub fn count_in(db: &dyn Sql) -> Result<u64, StoreError> {
    let n = db.row("SELECT COUNT(*) FROM requests", &[])?.map(|r| r.int(0)).transpose()?.unwrap_or(0);
    Ok(n.max(0) as u64)
}
