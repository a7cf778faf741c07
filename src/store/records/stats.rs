//! Statistics over request records: totals, latency percentiles, tokens and cost, grouped and
//! bucketed (`GET /api/stats`).

use std::collections::HashMap;

use rusqlite::{Connection, params};
use serde::Serialize;

use super::query::tok;
use super::rfc3339_ms;
use crate::observe::record::Tokens;
use crate::store::StoreError;

// ---------------------------------------------------------------------------------------------
// Statistics

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupBy {
    Endpoint,
    /// The model the client asked for.
    Model,
    Protocol,
    /// The client key's name.
    Key,
}

impl GroupBy {
    pub fn parse(s: &str) -> Option<GroupBy> {
        match s {
            "endpoint" => Some(GroupBy::Endpoint),
            "model" => Some(GroupBy::Model),
            "protocol" => Some(GroupBy::Protocol),
            "key" => Some(GroupBy::Key),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            GroupBy::Endpoint => "endpoint",
            GroupBy::Model => "model",
            GroupBy::Protocol => "protocol",
            GroupBy::Key => "key",
        }
    }

    fn column(self) -> &'static str {
        match self {
            GroupBy::Endpoint => "endpoint",
            GroupBy::Model => "model_requested",
            GroupBy::Protocol => "protocol",
            GroupBy::Key => "client_key",
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

/// The rows the statistics read, in `StatRow` order; `?` placeholders for since and until.
pub(crate) fn stats_sql(q: &StatsQuery) -> String {
    let group_col = q.group_by.map(GroupBy::column).unwrap_or("NULL");
    format!(
        "SELECT started_at, {group_col}, status, error IS NOT NULL, failed_over, total_ms,
                input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd
         FROM requests WHERE started_at >= ? AND started_at < ?"
    )
}

/// Statistics over `[since, until)`: one pass over the range's rows through the time index,
/// reading only narrow columns; percentiles are exact.
pub fn stats(conn: &Connection, q: &StatsQuery) -> Result<StatsReport, StoreError> {
    let mut stmt = conn.prepare(&stats_sql(q))?;
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
