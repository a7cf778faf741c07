//! Request records on PostgreSQL: the writer thread's batch insert (multi-row `INSERT`s, one
//! round trip per few hundred records), retention pruning, and the statistics scan. The
//! columns, the filters and the statistics' arithmetic are the shared ones of `store::records`.

use std::sync::Arc;

use tokio_postgres::Client;

use futures_util::Stream;

use super::{OP_TIMEOUT, Pg, PgSql, block_on, pg_error, row, wait};
use crate::observe::record::{RequestRecord, Tokens};
use crate::store::StoreError;
use crate::store::records::{
    Columns, DELETE_EMPTIED_PERIODS, PeriodsWritten, RecordDb, StatRow, StatsBuilder, StatsQuery, StatsReport,
    detail_json, period_of, tok,
};
use crate::store::sql::{Row, Sql, Value, numbered, values_list};

/// Records per `INSERT`: 22 parameters each stays far below PostgreSQL's 65 535 per statement.
const ROWS_PER_STATEMENT: usize = 500;
/// The width of a `requests` row as `Columns` fills it.
const WIDTH: usize = 22;
const _: () = assert!(ROWS_PER_STATEMENT * WIDTH < 65_535);

/// A `Columns` row as statement parameters, in `insert_columns!` order.
fn column_values(c: Columns<'_>) -> [Value; WIDTH] {
    [
        c.id.into(),
        c.started_at.into(),
        c.protocol.into(),
        c.endpoint.into(),
        c.model_requested.into(),
        c.model_sent.into(),
        c.status.into(),
        c.status_class.into(),
        c.stream.into(),
        c.failed_over.into(),
        c.attempts.into(),
        c.total_ms.into(),
        c.first_byte_ms.into(),
        c.overhead_ms.into(),
        c.input_tokens.into(),
        c.output_tokens.into(),
        c.cache_read_tokens.into(),
        c.cache_write_tokens.into(),
        c.cost_usd.into(),
        c.error.into(),
        c.search.into(),
        c.client_key.into(),
    ]
}

/// The insert of `rows` records' summaries; answers each new row's `seq` and `id` (a record
/// whose id is stored already is skipped, so one duplicate never fails a batch).
pub(crate) fn insert_summaries_sql(rows: usize) -> String {
    numbered(&format!(
        "INSERT INTO requests ({}) VALUES {} ON CONFLICT (id) DO NOTHING RETURNING seq, id",
        crate::store::records::insert_columns!(),
        values_list(rows, WIDTH)
    ))
}

/// Retention: delete the oldest `chunk` rows before the cutoff and their details in one
/// statement; answers how many rows went.
const PRUNE: &str = "WITH gone AS (
        DELETE FROM requests WHERE seq IN (
            SELECT seq FROM requests WHERE started_at < $1 ORDER BY started_at, seq LIMIT $2)
        RETURNING seq),
     details AS (DELETE FROM request_records WHERE seq IN (SELECT seq FROM gone))
     SELECT COUNT(*) FROM gone";

/// The writer thread's connection: its own, opened on first use and again after a failure, so
/// a PostgreSQL that went away costs failed batches (counted as dropped) until it is back.
pub struct PgRecords {
    pg: Arc<Pg>,
    client: Option<Client>,
    periods: PeriodsWritten,
}

impl PgRecords {
    pub fn new(pg: Arc<Pg>) -> PgRecords {
        PgRecords { pg, client: None, periods: PeriodsWritten::default() }
    }

    fn with<T>(&mut self, f: impl FnOnce(&mut Client) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let result = (|| {
            let client = match &mut self.client {
                Some(c) if !c.is_closed() => c,
                _ => self.client.insert(self.pg.connect()?),
            };
            f(client)
        })();
        if matches!(result, Err(StoreError::Unavailable(_))) {
            self.client = None;
        }
        self.pg.note(&result);
        result
    }
}

impl RecordDb for PgRecords {
    fn insert_batch(&mut self, records: &[RequestRecord]) -> Result<usize, StoreError> {
        let mut details: Vec<(String, String)> = Vec::with_capacity(records.len());
        for r in records {
            details.push((r.id.clone(), detail_json(r)));
        }
        let periods = self.periods.missing(records);
        let inserted = self.with(|client| {
            let tx = wait(client.transaction())?;
            let db = PgSql::Tx(&tx);
            let mut inserted = 0;
            for (chunk, chunk_details) in records.chunks(ROWS_PER_STATEMENT).zip(details.chunks(ROWS_PER_STATEMENT)) {
                let args: Vec<Value> = chunk.iter().flat_map(|r| column_values(Columns::of(r))).collect();
                let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                    args.iter().map(|v| v as &(dyn tokio_postgres::types::ToSql + Sync)).collect();
                let new = wait(tx.query(&insert_summaries_sql(chunk.len()), &params))?;
                if new.is_empty() {
                    continue;
                }
                let mut detail_args: Vec<Value> = Vec::with_capacity(new.len() * 2);
                for row in &new {
                    let seq: i64 = row.try_get(0).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                    let id: String = row.try_get(1).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                    let json = chunk_details.iter().find(|(i, _)| *i == id).map(|(_, j)| j.clone());
                    detail_args.push(seq.into());
                    detail_args.push(json.into());
                }
                db.exec(
                    &format!("INSERT INTO request_records (seq, record) VALUES {}", values_list(new.len(), 2)),
                    &detail_args,
                )?;
                inserted += new.len();
            }
            for chunk in periods.chunks(ROWS_PER_STATEMENT) {
                let args: Vec<Value> =
                    chunk.iter().flat_map(|(d, v, h)| [Value::from(*d), Value::from(*v), Value::from(*h)]).collect();
                db.exec(
                    &format!(
                        "INSERT INTO request_periods (dimension, value, period) VALUES {} ON CONFLICT DO NOTHING",
                        values_list(chunk.len(), 3)
                    ),
                    &args,
                )?;
            }
            wait(tx.commit())?;
            Ok(inserted)
        })?;
        self.periods.note(&periods);
        Ok(inserted)
    }

    fn prune_chunk(&mut self, cutoff_ms: i64, chunk: usize) -> Result<usize, StoreError> {
        self.periods.forget();
        let limit = i64::try_from(chunk).unwrap_or(i64::MAX);
        self.with(|client| {
            let rows = wait(client.query(PRUNE, &[&cutoff_ms, &limit]))?;
            let n: i64 = rows
                .first()
                .map(|r| r.try_get(0))
                .transpose()
                .map_err(|e| StoreError::Corrupt(e.to_string()))?
                .unwrap_or(0);
            if (n.max(0) as usize) < chunk {
                PgSql::Client(client).exec(DELETE_EMPTIED_PERIODS, &[period_of(cutoff_ms).into()])?;
            }
            Ok(n.max(0) as usize)
        })
    }

    fn settings(&mut self) -> Result<Option<serde_json::Value>, StoreError> {
        self.with(|client| crate::store::load_settings(&PgSql::Client(client)))
    }
}

impl Pg {
    /// A connection of its own for the record writer thread.
    pub fn record_writer(self: &Arc<Self>) -> PgRecords {
        PgRecords::new(self.clone())
    }

    /// `GET /api/stats` over PostgreSQL: the same narrow rows as SQLite's scan, folded by the
    /// same builder as they stream in (a range of a million records is never held in memory).
    pub fn stats(&self, q: &StatsQuery) -> Result<StatsReport, StoreError> {
        let sql = numbered(&crate::store::records::stats_sql(q));
        self.with_client(|client| {
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&q.since_ms, &q.until_ms];
            let rows = wait(client.query_raw(sql.as_str(), params))?;
            let mut rows = std::pin::pin!(rows);
            let mut builder = StatsBuilder::new(*q);
            loop {
                let next = block_on(std::future::poll_fn(|cx| rows.as_mut().poll_next(cx)), OP_TIMEOUT);
                let r = match next {
                    None => return Err(StoreError::Unavailable(format!("no row within {}s", OP_TIMEOUT.as_secs()))),
                    Some(None) => break,
                    Some(Some(Err(e))) => return Err(pg_error(e)),
                    Some(Some(Ok(r))) => row(&r)?,
                };
                add_stat_row(&mut builder, &r)?;
            }
            Ok(builder.finish())
        })
    }
}

/// One row of `stats_sql` into the builder.
fn add_stat_row(builder: &mut StatsBuilder, r: &Row) -> Result<(), StoreError> {
    let group = match r.0.get(1) {
        Some(Value::Text(t)) => Some(t.as_str()),
        _ => None,
    };
    builder.add(&StatRow {
        started_at_ms: r.int(0)?,
        group,
        status: u16::try_from(r.int(2)?).unwrap_or(0),
        has_error: r.bool(3)?,
        failed_over: r.bool(4)?,
        total_ms: r.real(5)?,
        tokens: Tokens {
            input: tok(r.opt_int(6)?),
            output: tok(r.opt_int(7)?),
            cache_read: tok(r.opt_int(8)?),
            cache_write: tok(r.opt_int(9)?),
        },
        cost_usd: r.opt_real(10)?,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_statement_inserts_many_rows_with_numbered_placeholders() {
        let sql = insert_summaries_sql(3);
        assert!(sql.starts_with("INSERT INTO requests (id, started_at,"), "{sql}");
        assert!(sql.contains("($1, $2,") && sql.contains("$22), ($23,"), "{sql}");
        assert!(sql.contains("$66) ON CONFLICT (id) DO NOTHING RETURNING seq, id"), "{sql}");
        assert!(!sql.contains('?'));
    }

    #[test]
    fn a_row_has_as_many_values_as_columns() {
        let sample = crate::store::records::sample_record("r1", 1);
        assert_eq!(column_values(Columns::of(&sample)).len(), WIDTH);
        assert_eq!(crate::store::records::insert_columns!().split(',').count(), WIDTH);
    }
}
