//! Request-record query benchmark, so the admin API's queries stay fast with a full history:
//! fills a temporary database with one million generated records spread over 30 days (the default
//! retention) and times the queries behind `GET /api/requests` and `GET /api/stats`, each on a
//! fresh read connection as the admin API runs them. Prints a Markdown table (copied into
//! BENCHMARKS.md).
//!
//! Run: `cargo bench --bench records` (`CCMESH_BENCH_RECORDS=100000` for a quicker run).
// A benchmark fails loudly.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::print_stdout)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use ccmesh::observe::record::{AttemptRecord, Classification, RecordError, RequestRecord, Tokens};
use ccmesh::store::Store;
use ccmesh::store::records::{self, Bucket, Cursor, Filter, GroupBy, StatsQuery};

/// 2026-11-29T10:00:00Z: a fixed "now" so every run generates the same data.
const NOW_MS: u64 = 1_795_946_400_000;
const DAY_MS: u64 = 86_400_000;

const ENDPOINTS: &[&str] = &["anthropic", "glm", "kimi", "deepseek", "openai", "relay-1", "relay-2", "qwen"];
const MODELS: &[&str] = &[
    "claude-sonnet-4-5",
    "claude-opus-4-1",
    "claude-haiku-4-5",
    "gpt-5",
    "gpt-5-mini",
    "gpt-4o",
    "o3",
    "deepseek-chat",
    "kimi-k2",
    "glm-4.6",
    "qwen3-coder",
    "local-llama",
];
const ERRORS: &[(u16, &str, &str)] = &[
    (529, "overloaded_error", "Overloaded"),
    (503, "api_error", "upstream connect error or disconnect/reset before headers"),
    (500, "api_error", "Internal server error"),
    (429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"),
    (400, "invalid_request_error", "max_tokens: 200000 > 64000, which is the maximum allowed"),
    (502, "timeout", "first byte timeout after 90s"),
    (401, "authentication_error", "invalid x-api-key"),
];

/// xorshift64*: deterministic, dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn attempt(endpoint: &str, status: u16, class: Classification, error: Option<&str>) -> AttemptRecord {
    AttemptRecord {
        endpoint: endpoint.to_owned().into(),
        format: "anthropic".into(),
        started_ms: 0.3,
        duration_ms: 800.0,
        status: Some(status),
        error_kind: None,
        error: error.map(str::to_string),
        classification: class,
        breaker: None,
        resume: None,
    }
}

/// Record `i` of `n`, spread evenly over the 30 days before `NOW_MS`: 5 % errors, 3 % failovers,
/// one model in twelve without a price.
fn generate(rng: &mut Rng, i: u64, n: u64) -> RequestRecord {
    let started_at_ms = NOW_MS - 30 * DAY_MS + i * (30 * DAY_MS / n) + rng.below(1000);
    // A backup endpoint serves one request in ten thousand.
    let endpoint =
        if rng.below(10_000) == 0 { "backup" } else { ENDPOINTS[rng.below(ENDPOINTS.len() as u64) as usize] };
    let model = MODELS[rng.below(MODELS.len() as u64) as usize];
    let total_ms = 200.0 + (rng.below(20_000) as f64) * (rng.below(4) + 1) as f64 / 4.0;
    let mut r = RequestRecord {
        id: format!("{started_at_ms:012x}{i:08x}"),
        started_at_ms,
        protocol: ["claude", "openai", "responses"][rng.below(3) as usize].into(),
        method: "POST".into(),
        path: "/v1/messages".into(),
        user_agent: Some("claude-cli/2.1.197 (external, cli)".into()),
        session_id: Some(format!("{:032x}", rng.below(500))),
        model_requested: Some(model.into()),
        model_sent: Some(model.into()),
        model_answered: Some(model.into()),
        endpoint: Some(endpoint.into()),
        stream: rng.below(4) != 0,
        status: 200,
        error: None,
        first_byte_ms: Some(total_ms / 5.0),
        first_token_ms: None,
        total_ms,
        overhead_ms: 0.2 + rng.below(100) as f64 / 100.0,
        tokens: Tokens {
            input: Some(rng.below(5_000)),
            output: Some(rng.below(2_000)),
            cache_read: Some(rng.below(100_000)),
            cache_write: Some(rng.below(3_000)),
        },
        cost_usd: (model != "local-llama").then(|| rng.below(10_000) as f64 / 100_000.0),
        attempts: vec![attempt(endpoint, 200, Classification::Success, None)],
        failed_over: false,
        conversion: None,
        losses: Vec::new(),
        client_key: None,
        affinity: false,
    };
    // A team's gateway: a fifth of the requests carry one of two client keys.
    r.client_key = match rng.below(10) {
        0 => Some("alice".into()),
        1 => Some("ci".into()),
        _ => None,
    };
    let roll = rng.below(100);
    if roll < 3 {
        r.failed_over = true;
        let first = ENDPOINTS[(rng.below(ENDPOINTS.len() as u64)) as usize];
        r.attempts.insert(0, attempt(first, 529, Classification::Failure, Some("Overloaded")));
        r.attempts[0].breaker = Some("closed→open/broken (consecutive_failures)".into());
    } else if roll < 8 {
        let (status, kind, message) = ERRORS[rng.below(ERRORS.len() as u64) as usize];
        r.status = status;
        r.tokens = Tokens::default();
        r.cost_usd = None;
        r.first_byte_ms = None;
        r.attempts[0] = attempt(endpoint, status, Classification::Failure, Some(message));
        r.error = Some(RecordError {
            source: "upstream".into(),
            kind: Some(kind.into()),
            message: message.into(),
            upstream_body: Some(format!(r#"{{"type":"error","error":{{"type":"{kind}","message":"{message}"}}}}"#)),
        });
    }
    r
}

/// Median of `runs` timings (after one warm-up run).
fn measure(runs: usize, mut f: impl FnMut()) -> Duration {
    f();
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

fn fmt(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms >= 100.0 { format!("{ms:.0} ms") } else { format!("{ms:.2} ms") }
}

fn main() {
    let n: u64 = std::env::var("CCMESH_BENCH_RECORDS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    // CCMESH_BENCH_DB=path keeps the database (and reuses it when it already holds the records),
    // to iterate on queries without refilling.
    let dir = tempfile::tempdir().expect("temp dir");
    let path = std::env::var_os("CCMESH_BENCH_DB")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| dir.path().join("ccmesh.db"));
    let store = Store::open(&path).expect("open");
    let existing = store.read_records(records::count).unwrap();
    let fill = Instant::now();
    if existing != n {
        assert_eq!(existing, 0, "{} holds {existing} records, not {n}", path.display());
        // Fill through the writer's own insert path, in its batch size.
        let mut conn = rusqlite::Connection::open(&path).expect("writer connection");
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.pragma_update(None, "synchronous", "NORMAL").unwrap();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut batch = Vec::with_capacity(1000);
        let mut hours = records::PeriodsWritten::default();
        for i in 0..n {
            batch.push(generate(&mut rng, i, n));
            if batch.len() == 1000 {
                records::insert_batch_noting(&mut conn, &batch, &mut hours, records::Batch::Fresh).unwrap();
                batch.clear();
            }
        }
        records::insert_batch_noting(&mut conn, &batch, &mut hours, records::Batch::Fresh).unwrap();
        conn.pragma_update(None, "wal_checkpoint", "TRUNCATE").unwrap();
    }
    let fill = fill.elapsed();
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "filled {n} records in {:.1} s ({:.0} records/s), database {} MB",
        fill.as_secs_f64(),
        n as f64 / fill.as_secs_f64(),
        size / 1_000_000
    );

    // A cursor ~90 % of the way down the newest-first list.
    let deep: Cursor = store
        .read_records(|c| {
            Ok(c.query_row(
                "SELECT started_at, seq FROM requests ORDER BY started_at DESC, seq DESC LIMIT 1 OFFSET ?1",
                [(n * 9 / 10) as i64],
                |r| Ok(Cursor { started_at: r.get(0)?, seq: r.get(1)? }),
            )?)
        })
        .unwrap();
    let some_id = format!("{:012x}{:08x}", NOW_MS - 15 * DAY_MS, 0);
    let some_id: String = store
        .read_records(|c| {
            Ok(c.query_row("SELECT id FROM requests WHERE id >= ?1 ORDER BY id LIMIT 1", [&some_id], |r| r.get(0))?)
        })
        .unwrap();

    // Closures below capture the store by reference.
    let store = &store;
    let list = |f: Filter, cursor: Option<Cursor>| {
        move || {
            let page = store.read_records(|c| records::list(c, &f, cursor, 50)).unwrap();
            black_box(page);
        }
    };
    let stats = |q: StatsQuery| {
        move || {
            black_box(store.read_records(|c| records::stats(c, &q)).unwrap());
        }
    };
    let week = StatsQuery {
        since_ms: (NOW_MS - 7 * DAY_MS) as i64,
        until_ms: NOW_MS as i64,
        group_by: Some(GroupBy::Endpoint),
        bucket: Some(Bucket::Hour),
    };
    let month = StatsQuery {
        since_ms: (NOW_MS - 30 * DAY_MS) as i64,
        until_ms: NOW_MS as i64 + 1000,
        group_by: Some(GroupBy::Model),
        bucket: Some(Bucket::Day),
    };
    let day = StatsQuery {
        since_ms: (NOW_MS - DAY_MS) as i64,
        until_ms: NOW_MS as i64,
        group_by: Some(GroupBy::Protocol),
        bucket: Some(Bucket::Hour),
    };
    let text = |q: &str| Filter { text: Some(q.into()), ..Filter::default() };

    let rows: Vec<(&str, Duration)> = vec![
        ("list: first page, no filter", measure(21, list(Filter::default(), None))),
        (
            "list: endpoint filter",
            measure(21, list(Filter { endpoint: Some("glm".into()), ..Filter::default() }, None)),
        ),
        (
            "list: endpoint filter, rarely used endpoint (1 in 10,000)",
            measure(21, list(Filter { endpoint: Some("backup".into()), ..Filter::default() }, None)),
        ),
        (
            "list: endpoint filter, no such endpoint",
            measure(21, list(Filter { endpoint: Some("retired".into()), ..Filter::default() }, None)),
        ),
        (
            "list: endpoint filter, deep cursor page (90 % down)",
            measure(21, list(Filter { endpoint: Some("glm".into()), ..Filter::default() }, Some(deep))),
        ),
        (
            "list: model + 5xx filter",
            measure(21, list(Filter { model: Some("gpt-5".into()), status_class: Some(5), ..Filter::default() }, None)),
        ),
        ("list: failed over only", measure(21, list(Filter { failed_over: Some(true), ..Filter::default() }, None))),
        ("list: 5xx only", measure(21, list(Filter { status_class: Some(5), ..Filter::default() }, None))),
        ("list: 2xx only", measure(21, list(Filter { status_class: Some(2), ..Filter::default() }, None))),
        (
            "list: one client key",
            measure(21, list(Filter { client_key: Some("alice".into()), ..Filter::default() }, None)),
        ),
        ("list: text search, common (`overloaded`)", measure(21, list(text("overloaded"), None))),
        ("list: text search, no match (scans every error)", measure(5, list(text("no such words anywhere"), None))),
        ("list: deep cursor page (90 % down)", measure(21, list(Filter::default(), Some(deep)))),
        (
            "list: endpoint filter, last 24 h",
            measure(
                21,
                list(
                    Filter {
                        endpoint: Some("kimi".into()),
                        since_ms: Some((NOW_MS - DAY_MS) as i64),
                        ..Filter::default()
                    },
                    None,
                ),
            ),
        ),
        (
            "get one record by id",
            measure(21, || {
                black_box(store.read_records(|c| records::get(c, &some_id)).unwrap().expect("record"));
            }),
        ),
        ("stats: 24 h by protocol, hourly", measure(7, stats(day))),
        ("stats: 7 days by endpoint, hourly", measure(5, stats(week))),
        ("stats: 30 days by model, daily (all rows)", measure(5, stats(month))),
    ];

    println!(
        "Request records: {n} records over 30 days ({} MB database, filled in {:.0} s = {:.0} records/s through the writer's batch insert). Median of several runs, each on a fresh read connection.\n",
        size / 1_000_000,
        fill.as_secs_f64(),
        n as f64 / fill.as_secs_f64()
    );
    println!("| query | time |");
    println!("| --- | ---: |");
    for (label, t) in rows {
        println!("| {label} | {} |", fmt(t));
    }
}
