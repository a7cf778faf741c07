use super::query::{page_sql, period_terms, periods_sql};
use super::write::{MAX_SEARCH_BYTES, search_text};
use super::*;
use crate::store::sql::Dialect;
use rusqlite::{params, params_from_iter};

use crate::observe::record::{AttemptRecord, Classification, RecordError};
use crate::protocol::Protocol;

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
        resume: None,
    });
    r
}

fn db() -> Connection {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(SCHEMA).unwrap();
    // The later migrations: `client_key` on the records, then the partial indexes.
    conn.execute_batch(crate::store::keys::SCHEMA).unwrap();
    conn.execute_batch(super::PARTIAL_INDEXES).unwrap();
    conn.execute_batch(super::VALUE_PERIODS).unwrap();
    conn
}

/// A record id as `observe::record_id` makes them: the start time's 12 hex digits first.
fn tid(at: u64, tag: &str) -> String {
    format!("{at:012x}{tag}")
}

fn ids(p: &Page) -> Vec<&str> {
    p.requests.iter().map(|s| s.id.as_str()).collect()
}

#[test]
fn insert_round_trips_and_skips_duplicates() {
    let mut c = db();
    let x1 = tid(1_700_000_000_123, "x1");
    let r = failed(&x1, 1_700_000_000_123);
    assert_eq!(insert_batch(&mut c, &[r.clone(), record("x2", 5)]).unwrap(), 2);
    // A duplicate id is skipped without failing the rest of the batch.
    assert_eq!(insert_batch(&mut c, &[r.clone(), record("x3", 6)]).unwrap(), 1);
    assert_eq!(count(&c).unwrap(), 3);
    let v = get(&c, &x1).unwrap().unwrap();
    assert_eq!(v["started_at"], "2023-11-14T22:13:20.123Z");
    assert_eq!(v["status_class"], "5xx");
    let mut back = v.clone();
    back.as_object_mut().unwrap().remove("started_at");
    back.as_object_mut().unwrap().remove("status_class");
    assert_eq!(serde_json::from_value::<RequestRecord>(back).unwrap(), r);
    assert_eq!(get(&c, "nope").unwrap(), None);
    assert_eq!(get(&c, &tid(1_700_000_000_124, "x1")).unwrap(), None, "another start time names another record");
    let page = list(&c, &Filter::default(), None, 10).unwrap();
    let s = &page.requests[0];
    assert_eq!((s.id.as_str(), s.status, s.attempts, s.failed_over), (x1.as_str(), 503, 2, true));
    assert_eq!(s.error.as_deref(), Some("Overloaded 100%_sure"));
    assert_eq!(s.tokens, Tokens::default());
    assert_eq!(s.cost_usd, None);
    let ok = page.requests.iter().find(|s| s.id == "x2").unwrap();
    assert_eq!(ok.tokens.cache_read, Some(1000));
    assert_eq!(ok.first_byte_ms, Some(120.0));
}

/// The record `get` reads back, without the two fields it adds.
fn read_back(c: &Connection, id: &str) -> RequestRecord {
    let mut v = get(c, id).unwrap().unwrap();
    v.as_object_mut().unwrap().remove("started_at");
    v.as_object_mut().unwrap().remove("status_class");
    serde_json::from_value(v).unwrap()
}

#[test]
fn batches_of_every_size_store_each_record_whole_with_its_own_detail() {
    // Sizes around the multi-row statements' 16, 4 and 1 rows.
    // A fresh batch is numbered by SQLite, a retried one by the writer (`Numbering`).
    for (size, kind) in [1usize, 2, 3, 4, 5, 15, 16, 17, 20, 21, 37]
        .into_iter()
        .flat_map(|size| [(size, Batch::Fresh), (size, Batch::MayBeStored)])
    {
        let mut c = db();
        // Rows already there, so the new ones' numbers follow them.
        insert_batch(&mut c, &[record("before", 1)]).unwrap();
        let batch: Vec<RequestRecord> = (0..size)
            .map(|i| {
                let at = 1_700_000_000_000 + i as u64;
                let mut r = if i % 3 == 0 { failed(&tid(at, &format!("b{i}")), at) } else { record(&tid(at, "b"), at) };
                r.path = format!("/v1/messages?row={i}").into();
                r.status = 200 + i as u16;
                r
            })
            .collect();
        assert_eq!(insert_batch_noting(&mut c, &batch, &mut PeriodsWritten::default(), kind).unwrap(), size);
        assert_eq!(count(&c).unwrap(), size as u64 + 1);
        for r in &batch {
            assert_eq!(&read_back(&c, &r.id), r, "batch of {size}: the summary and the detail of one record");
        }
        let orphans: i64 = c
            .query_row(
                "SELECT count(*) FROM requests r LEFT JOIN request_records d ON d.seq = r.seq WHERE d.seq IS NULL",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(orphans, 0);
    }
}

#[test]
fn new_rows_are_numbered_after_the_highest_number_of_either_table() {
    // A row numbered past every row of the other table (left by an older version or a hand
    // edit), in either table, must not make the next batch collide with it, fresh or retried.
    let strays = [
        "INSERT INTO request_records (seq, record) VALUES (40, '{}')",
        "INSERT INTO requests (seq, id, started_at, protocol, status, status_class, stream, failed_over, attempts, total_ms, overhead_ms) VALUES (40, 'stray', 0, 'claude', 200, 2, 0, 0, 1, 1.0, 0.0)",
    ];
    for (stray, kind) in strays.into_iter().flat_map(|s| [(s, Batch::Fresh), (s, Batch::MayBeStored)]) {
        let mut c = db();
        insert_batch(&mut c, &[record("a", 1)]).unwrap();
        c.execute(stray, []).unwrap();
        let last = record(&tid(3, "c"), 3);
        let batch = [record(&tid(2, "b"), 2), last.clone()];
        insert_batch_noting(&mut c, &batch, &mut PeriodsWritten::default(), kind).unwrap();
        let seqs: Vec<i64> = c
            .prepare("SELECT seq FROM request_records WHERE seq <> 40 ORDER BY seq")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(seqs, [1, 41, 42], "{stray} {kind:?}");
        assert_eq!(read_back(&c, &last.id), last);
    }
}

#[test]
fn rows_are_numbered_by_sqlite_only_for_a_fresh_batch_on_tables_that_agree() {
    use write::Numbering;
    assert_eq!(Numbering::of(Batch::Fresh, 0, 0), Numbering::BySqlite);
    assert_eq!(Numbering::of(Batch::Fresh, 41, 41), Numbering::BySqlite);
    assert_eq!(Numbering::of(Batch::Fresh, 41, 40), Numbering::Given);
    assert_eq!(Numbering::of(Batch::Fresh, 40, 41), Numbering::Given);
    assert_eq!(Numbering::of(Batch::MayBeStored, 41, 41), Numbering::Given);
}

/// If SQLite ever numbered a fresh batch's rows otherwise than one past the highest, the batch
/// is refused rather than stored with summaries and details that do not pair up; the writer's
/// retry numbers the rows itself.
#[test]
fn a_fresh_batch_numbered_otherwise_than_expected_is_refused_and_its_retry_stored() {
    let mut c = db();
    let at = 1_700_000_000_200;
    let batch: Vec<RequestRecord> = (0..16).map(|i| record(&tid(at + i, &format!("r{i}")), at + i)).collect();
    // A row slipped in after the fifth summary moves SQLite's numbers for the rest.
    c.execute_batch(&format!(
        "CREATE TEMP TRIGGER slip AFTER INSERT ON requests WHEN NEW.id = '{}'
         BEGIN INSERT INTO requests (seq, id, started_at, protocol, status, status_class, stream, failed_over, attempts, total_ms, overhead_ms)
               VALUES (1000, 'slipped', 0, 'claude', 200, 2, 0, 0, 1, 1.0, 0.0); END;",
        batch[4].id
    ))
    .unwrap();
    let mut periods = PeriodsWritten::default();
    let refused = insert_batch_noting(&mut c, &batch, &mut periods, Batch::Fresh);
    assert!(matches!(refused, Err(StoreError::Corrupt(_))), "{refused:?}");
    assert_eq!(count(&c).unwrap(), 0, "nothing of the refused batch stays");
    assert_eq!(insert_batch_noting(&mut c, &batch, &mut periods, Batch::MayBeStored).unwrap(), 16);
    for r in &batch {
        assert_eq!(read_back(&c, &r.id), *r);
    }
}

#[test]
fn a_failed_batch_leaves_nothing_so_its_retry_cannot_store_a_record_twice() {
    let mut c = db();
    let mut periods = PeriodsWritten::default();
    let batch = [record(&tid(1_700_000_000_200, "r1"), 1_700_000_000_200), record("boom", 1_700_000_000_200)];
    // The second insert of the batch fails, as a full disk or a lock held too long would.
    c.execute_batch(
        "CREATE TEMP TRIGGER fail_boom BEFORE INSERT ON requests WHEN NEW.id = 'boom'
         BEGIN SELECT RAISE(ABORT, 'disk full'); END;",
    )
    .unwrap();
    assert!(insert_batch_noting(&mut c, &batch, &mut periods, Batch::Fresh).is_err());
    assert!(c.is_autocommit(), "the failed batch's transaction is over, not left open");
    assert_eq!(count(&c).unwrap(), 0, "the first record went back with the batch");
    let periods_rows: i64 = c.query_row("SELECT count(*) FROM request_periods", [], |r| r.get(0)).unwrap();
    assert_eq!(periods_rows, 0);
    c.execute_batch("DROP TRIGGER fail_boom").unwrap();
    // The writer's retry (which also looks for stored ids) stores each record once.
    assert_eq!(insert_batch_noting(&mut c, &batch, &mut periods, Batch::MayBeStored).unwrap(), 2);
    assert_eq!(count(&c).unwrap(), 2);
    // A fresh batch is not looked for among the stored records: every record is inserted.
    let next = [record(&tid(1_700_000_000_300, "r3"), 1_700_000_000_300)];
    assert_eq!(insert_batch_noting(&mut c, &next, &mut periods, Batch::Fresh).unwrap(), 1);
    assert_eq!(count(&c).unwrap(), 3);
    assert_eq!(all_pages(&c, &Filter { endpoint: Some("a".into()), ..Default::default() }, 10).len(), 3);
}

/// A batch goes in through inserts of several rows each; a row failing in the middle of one (the
/// trigger's `FAIL` keeps the rows before it in its statement) still leaves nothing of the batch.
#[test]
fn a_row_failing_inside_a_multi_row_insert_leaves_nothing_of_its_batch() {
    let mut c = db();
    let at = 1_700_000_000_200;
    // 21 records: one insert of sixteen rows, then one of four, then one of one.
    let batch: Vec<RequestRecord> = (0..21).map(|i| record(&tid(at + i, &format!("r{i}")), at + i)).collect();
    // A summary or a detail fails, inside the first insert or the second (a detail is told by
    // how many went in before it: a row SQLite numbers has no number yet in the trigger).
    let failures = [
        format!("requests WHEN NEW.id = '{}'", batch[9].id),
        format!("requests WHEN NEW.id = '{}'", batch[19].id),
        "request_records WHEN (SELECT count(*) FROM request_records) = 9".to_string(),
        "request_records WHEN (SELECT count(*) FROM request_records) = 19".to_string(),
    ];
    for failing in failures {
        c.execute_batch(&format!(
            "CREATE TEMP TRIGGER fail_one BEFORE INSERT ON {failing} BEGIN SELECT RAISE(FAIL, 'disk full'); END;"
        ))
        .unwrap();
        let mut periods = PeriodsWritten::default();
        assert!(insert_batch_noting(&mut c, &batch, &mut periods, Batch::Fresh).is_err());
        assert!(c.is_autocommit(), "the failed batch's transaction is over, not left open");
        assert_eq!(count(&c).unwrap(), 0, "no summary of the batch stays");
        let details: i64 = c.query_row("SELECT count(*) FROM request_records", [], |r| r.get(0)).unwrap();
        assert_eq!(details, 0, "no detail of the batch stays");
        c.execute_batch("DROP TRIGGER fail_one").unwrap();
    }
    let mut periods = PeriodsWritten::default();
    assert_eq!(insert_batch_noting(&mut c, &batch, &mut periods, Batch::MayBeStored).unwrap(), 21);
    for r in &batch {
        assert_eq!(read_back(&c, &r.id), *r);
    }
}

#[test]
fn search_text_holds_the_error_and_failed_attempts_only() {
    assert_eq!(search_text(&record("a", 1)), None);
    let t = search_text(&failed("b", 1)).unwrap();
    assert!(t.contains("overloaded_error") && t.contains("Overloaded") && t.contains("b connect connection refused"));
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
    r.client_key = Some("alice".into());
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
    assert_eq!(q(Filter { client_key: Some("alice".into()), ..Default::default() }), ["resp-429"]);
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
        // Walked period by period (`request_periods`): each period is a range of the time index, whose
        // entries carry these columns.
        (Filter { endpoint: Some("a".into()), ..Default::default() }, "requests_time"),
        (Filter { model: Some("m".into()), ..Default::default() }, "requests_time"),
        (Filter { protocol: Some("claude".into()), ..Default::default() }, "requests_time"),
        (Filter { status_class: Some(5), ..Default::default() }, "requests_class"),
        (Filter { status: Some(503), ..Default::default() }, "requests_class"),
        // 2xx rows are not in the class index: nearly every row matches, so the time index serves.
        (Filter { status_class: Some(2), ..Default::default() }, "requests_time"),
        (Filter { failed_over: Some(true), ..Default::default() }, "requests_failed_over"),
        (Filter { client_key: Some("alice".into()), ..Default::default() }, "requests_client_key"),
        (Filter { text: Some("x".into()), ..Default::default() }, "requests_search"),
        (Filter { since_ms: Some(1), until_ms: Some(2), ..Default::default() }, "requests_time"),
    ];
    for (f, index) in cases {
        // As `list` narrows a walked filter to a run of periods.
        let f = if period_terms(&f).is_empty() {
            f
        } else {
            Filter { since_ms: Some(0), until_ms: Some(3 * PERIOD_MS), ..f }
        };
        let (sql, args) = page_sql(&f, Some(cursor), 51, Dialect::Sqlite);
        let sql = format!("EXPLAIN QUERY PLAN {sql}");
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
            "EXPLAIN QUERY PLAN SELECT d.record FROM requests r JOIN request_records d ON d.seq = r.seq WHERE r.started_at = ?1 AND r.id = ?2",
            params![1, "x"],
            |r| r.get(3),
        )
        .unwrap();
    assert!(plan.contains("requests_time (started_at=?)"), "{plan}");
    let f = Filter { endpoint: Some("a".into()), model: Some("m".into()), since_ms: Some(1), ..Default::default() };
    let (sql, args) = periods_sql(&f, Some(cursor), &period_terms(&f), Some(40));
    let plan: Vec<String> = c
        .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
        .unwrap()
        .query_map(params_from_iter(args), |r| r.get::<_, String>(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let searches: Vec<&String> = plan.iter().filter(|p| p.contains("request_periods")).collect();
    assert_eq!(searches.len(), 2, "{plan:?}");
    assert!(
        searches.iter().all(|p| p.contains("PRIMARY KEY (dimension=? AND value=? AND period>? AND period<?)")),
        "{plan:?}"
    );
}

#[test]
fn prune_deletes_only_old_records_in_chunks() {
    let mut c = db();
    let rs: Vec<_> = (0..25).map(|i| record(&tid(1000 + i, &format!("p{i}")), 1000 + i)).collect();
    insert_batch(&mut c, &rs).unwrap();
    assert_eq!(prune_chunk(&mut c, 1020, 8).unwrap(), 8);
    assert_eq!(prune_chunk(&mut c, 1020, 8).unwrap(), 8);
    assert_eq!(prune_chunk(&mut c, 1020, 8).unwrap(), 4);
    assert_eq!(prune_chunk(&mut c, 1020, 8).unwrap(), 0);
    assert_eq!(count(&c).unwrap(), 5);
    let details: i64 = c.query_row("SELECT COUNT(*) FROM request_records", [], |r| r.get(0)).unwrap();
    assert_eq!(details, 5);
    assert!(get(&c, &tid(1019, "p19")).unwrap().is_none());
    assert!(get(&c, &tid(1020, "p20")).unwrap().is_some());
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
    StatRow { started_at_ms: at, group, status, has_error: false, failed_over: false, total_ms, tokens, cost_usd: cost }
}

#[test]
fn stats_arithmetic_groups_buckets_and_unpriced_usage() {
    const H: i64 = 3_600_000;
    let t = |i, o, cr, cw| Tokens { input: Some(i), output: Some(o), cache_read: Some(cr), cache_write: Some(cw) };
    let q = StatsQuery { since_ms: 0, until_ms: 3 * H, group_by: Some(GroupBy::Endpoint), bucket: Some(Bucket::Hour) };
    let mut b = StatsBuilder::new(q);
    b.add(&row(10, Some("a"), 200, 100.0, t(10, 20, 30, 40), Some(0.5)));
    b.add(&row(20, Some("a"), 200, 300.0, t(1, 2, 3, 4), None)); // unpriced
    b.add(&StatRow { failed_over: true, ..row(H + 5, Some("a"), 502, 50.0, Tokens::default(), None) });
    b.add(&StatRow { has_error: true, ..row(H + 6, Some("b"), 200, 10.0, t(5, 0, 0, 0), Some(0.25)) });
    b.add(&row(2 * H, None, 503, 1.0, Tokens::default(), None));
    let r = b.finish();
    assert_eq!((r.group_by, r.bucket), (Some("endpoint"), Some("hour")));
    assert_eq!(r.groups.iter().map(|g| g.key.clone()).collect::<Vec<_>>(), [Some("a".into()), Some("b".into()), None]);
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
    let q = StatsQuery { since_ms: 0, until_ms: 10 * H, group_by: Some(GroupBy::Model), bucket: Some(Bucket::Hour) };
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
    rs[0].client_key = Some("alice".into());
    rs[2].client_key = Some("alice".into());
    insert_batch(&mut c, &rs).unwrap();
    let q = StatsQuery { since_ms: 0, until_ms: 10_000, group_by: Some(GroupBy::Endpoint), bucket: Some(Bucket::Day) };
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
    let by_key = stats(&c, &StatsQuery { group_by: Some(GroupBy::Key), ..q }).unwrap();
    assert_eq!(
        by_key.groups.iter().map(|g| (g.key.clone(), g.totals.requests)).collect::<Vec<_>>(),
        [(Some("alice".to_string()), 2), (None, 1)]
    );
    assert_eq!(by_key.group_by, Some("key"));
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

/// Records over `periods` periods, with endpoints, models, protocols and statuses spread unevenly
/// (one endpoint in a single period only), several sharing a millisecond, inserted out of order.
fn spread_records(periods: u64) -> Vec<RequestRecord> {
    let mut out = Vec::new();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    let base = 1_764_000_000_000u64 - 1_764_000_000_000 % PERIOD_MS as u64;
    for i in 0..periods * 40 {
        let at = base + next(periods) * PERIOD_MS as u64 + next(PERIOD_MS as u64 / 1000) * 1000;
        let mut r = record(&tid(at, &format!("s{i}")), at);
        r.endpoint = Some(["a", "b", "c"][next(3) as usize].into());
        if i == 7 {
            r.endpoint = Some("rare".into());
        }
        r.model_requested = [Some("m1"), Some("m2"), None][next(3) as usize].map(Into::into);
        r.protocol = ["claude", "openai"][next(2) as usize].into();
        r.status = [200, 200, 503, 429][next(4) as usize];
        out.push(r);
    }
    out
}

/// Every page of `filter`, followed by its cursors.
fn all_pages(c: &Connection, filter: &Filter, limit: usize) -> Vec<String> {
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = list(c, filter, cursor, limit).unwrap();
        assert!(page.requests.len() <= limit);
        seen.extend(page.requests.iter().map(|s| s.id.clone()));
        match page.next_cursor {
            Some(next) => cursor = Some(Cursor::decode(&next).unwrap()),
            None => return seen,
        }
    }
}

#[test]
fn pages_walked_period_by_period_hold_exactly_the_matching_records_in_order() {
    let mut c = db();
    // More periods than one read of `request_periods` returns.
    let records = spread_records(150);
    for batch in records.chunks(37) {
        insert_batch(&mut c, batch).unwrap();
    }
    // The order a page promises: newest first, then the later insert (`seq`) first.
    let mut ordered: Vec<(usize, &RequestRecord)> = records.iter().enumerate().collect();
    ordered.sort_by_key(|(seq, r)| std::cmp::Reverse((r.started_at_ms, *seq)));
    let t = |h: u64| {
        Some((records[0].started_at_ms - records[0].started_at_ms % PERIOD_MS as u64 + h * PERIOD_MS as u64) as i64)
    };
    let filters = [
        Filter { endpoint: Some("a".into()), ..Default::default() },
        Filter { endpoint: Some("rare".into()), ..Default::default() },
        Filter { endpoint: Some("never".into()), ..Default::default() },
        Filter { model: Some("m2".into()), ..Default::default() },
        Filter { protocol: Some("openai".into()), ..Default::default() },
        Filter {
            endpoint: Some("b".into()),
            model: Some("m1".into()),
            protocol: Some("claude".into()),
            ..Default::default()
        },
        Filter { endpoint: Some("c".into()), status_class: Some(5), ..Default::default() },
        Filter { model: Some("m1".into()), status: Some(429), ..Default::default() },
        Filter { endpoint: Some("a".into()), since_ms: t(3), until_ms: t(7), ..Default::default() },
        Filter { protocol: Some("claude".into()), since_ms: t(5).map(|v| v + 1234), ..Default::default() },
    ];
    for f in &filters {
        let expected: Vec<String> = ordered
            .iter()
            .map(|(_, r)| r)
            .filter(|r| f.endpoint.is_none() || r.endpoint.as_deref() == f.endpoint.as_deref())
            .filter(|r| f.model.is_none() || r.model_requested.as_deref() == f.model.as_deref())
            .filter(|r| f.protocol.as_ref().is_none_or(|p| &r.protocol == p))
            .filter(|r| f.status_class.is_none_or(|class| r.status / 100 == class))
            .filter(|r| f.status.is_none_or(|s| r.status == s))
            .filter(|r| f.since_ms.is_none_or(|s| r.started_at_ms as i64 >= s))
            .filter(|r| f.until_ms.is_none_or(|u| (r.started_at_ms as i64) < u))
            .map(|r| r.id.clone())
            .collect();
        for limit in [3, 50, 1000] {
            assert_eq!(all_pages(&c, f, limit), expected, "{f:?}, {limit} a page");
        }
    }
}

#[test]
fn periods_follow_their_records_through_retention() {
    let mut c = db();
    let records = spread_records(6);
    insert_batch(&mut c, &records).unwrap();
    let periods = |c: &Connection| -> Vec<(String, String, i64)> {
        let mut stmt = c.prepare("SELECT dimension, value, period FROM request_periods ORDER BY 1, 2, 3").unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap().collect::<Result<_, _>>().unwrap()
    };
    let expected = |rs: &[&RequestRecord]| -> Vec<(String, String, i64)> {
        let mut v: Vec<_> = rs
            .iter()
            .flat_map(|r| {
                let h = period_of(r.started_at_ms as i64);
                [
                    r.endpoint.clone().map(|e| ("endpoint".to_string(), e.into_owned(), h)),
                    r.model_requested.clone().map(|m| ("model".to_string(), m.into_owned(), h)),
                    Some(("protocol".to_string(), r.protocol.to_string(), h)),
                ]
            })
            .flatten()
            .collect();
        v.sort();
        v.dedup();
        v
    };
    assert_eq!(periods(&c), expected(&records.iter().collect::<Vec<_>>()));
    // The same periods, from the records alone: what migration 7 and `ccmesh migrate` build.
    let filled = periods(&c);
    c.execute_batch("DELETE FROM request_periods").unwrap();
    c.execute_batch(FILL_PERIODS).unwrap();
    assert_eq!(periods(&c), filled);
    // Prune up to the middle of the fourth period: the three periods before it are empty and go;
    // the fourth keeps its rows while any of its records may remain.
    let first_period = period_of(records.iter().map(|r| r.started_at_ms).min().unwrap() as i64);
    let cutoff = (first_period + 3) * PERIOD_MS + PERIOD_MS / 2;
    while prune_chunk(&mut c, cutoff, 16).unwrap() == 16 {}
    let left: Vec<&RequestRecord> = records.iter().filter(|r| r.started_at_ms as i64 >= cutoff).collect();
    let mut want = expected(&left);
    let fourth = first_period + 3;
    // The fourth period's values from its pruned first half may stay: rows say "may hold".
    let kept: Vec<_> = periods(&c);
    assert!(kept.iter().all(|(_, _, h)| *h >= fourth), "{kept:?}");
    want.retain(|(_, _, h)| *h > fourth);
    assert_eq!(kept.iter().filter(|(_, _, h)| *h > fourth).cloned().collect::<Vec<_>>(), want);
    assert_eq!(
        all_pages(&c, &Filter { endpoint: Some("a".into()), ..Default::default() }, 10).len(),
        left.iter().filter(|r| r.endpoint.as_deref() == Some("a")).count()
    );
}

#[test]
fn the_detail_holds_only_what_the_row_does_not_and_reads_back_whole() {
    let mut c = db();
    let mut r = failed(&tid(1_700_000_000_123, "d1"), 1_700_000_000_123);
    r.client_key = Some("alice".into());
    r.cost_usd = Some(0.25);
    r.tokens = Tokens { input: Some(3), output: None, cache_read: Some(7), cache_write: None };
    r.first_token_ms = Some(44.5);
    r.conversion = Some("anthropic→openai".into());
    r.losses = vec!["top_k: dropped".into()];
    r.affinity = true;
    insert_batch(&mut c, std::slice::from_ref(&r)).unwrap();
    let stored: String = c.query_row("SELECT record FROM request_records", [], |row| row.get(0)).unwrap();
    let stored: serde_json::Value = serde_json::from_str(&stored).unwrap();
    for column in
        ["id", "started_at_ms", "protocol", "endpoint", "status", "total_ms", "tokens", "cost_usd", "client_key"]
    {
        assert!(stored.get(column).is_none(), "{column} is the row's: {stored}");
    }
    let read = get(&c, &r.id).unwrap().unwrap();
    let mut back = read.clone();
    back.as_object_mut().unwrap().remove("started_at");
    back.as_object_mut().unwrap().remove("status_class");
    assert_eq!(serde_json::from_value::<RequestRecord>(back).unwrap(), r);
    // A detail stored whole, as every record was before, reads the same.
    c.execute("UPDATE request_records SET record = ?1", [serde_json::to_string(&r).unwrap()]).unwrap();
    assert_eq!(get(&c, &r.id).unwrap().unwrap(), read);
}

#[test]
fn a_detail_leaves_out_its_defaults_and_reads_back_as_a_whole_one() {
    let mut c = db();
    // Every field the detail may leave out at its default, the attempt's too.
    let mut plain = record(&tid(1_700_000_000_500, "p1"), 1_700_000_000_500);
    plain.user_agent = None;
    plain.session_id = None;
    plain.model_answered = None;
    plain.error = None;
    plain.first_token_ms = None;
    plain.conversion = None;
    plain.losses = Vec::new();
    plain.affinity = false;
    for a in &mut plain.attempts {
        (a.status, a.error_kind, a.error, a.breaker, a.resume) = (None, None, None, None, None);
    }
    // And one with all of them set, which leaves nothing out.
    let mut full = failed(&tid(1_700_000_000_501, "f1"), 1_700_000_000_501);
    full.user_agent = Some("claude-cli/2".into());
    full.session_id = Some("s".into());
    full.model_answered = Some("m".into());
    full.first_token_ms = Some(1.5);
    full.conversion = Some("anthropic→openai".into());
    full.losses = vec!["top_k: dropped".into()];
    full.affinity = true;
    full.attempts[0].status = Some(529);
    full.attempts[0].resume = Some("continued".into());
    insert_batch(&mut c, &[plain.clone(), full.clone()]).unwrap();
    let stored: String =
        c.query_row("SELECT record FROM request_records ORDER BY seq LIMIT 1", [], |row| row.get(0)).unwrap();
    for key in ["user_agent", "session_id", "error", "first_token_ms", "losses", "affinity", "breaker"] {
        assert!(!stored.contains(&format!("\"{key}\"")), "{key} in {stored}");
    }
    assert!(!stored.contains("null"), "{stored}");
    for r in [&plain, &full] {
        let read = get(&c, &r.id).unwrap().unwrap();
        let mut back = read.clone();
        back.as_object_mut().unwrap().remove("started_at");
        back.as_object_mut().unwrap().remove("status_class");
        // Every key the record serialises to is there, with its value.
        assert_eq!(back, serde_json::to_value(r).unwrap());
        c.execute(
            "UPDATE request_records SET record = ?1 WHERE seq = (SELECT seq FROM requests WHERE id = ?2)",
            [serde_json::to_string(r).unwrap(), r.id.clone()],
        )
        .unwrap();
        assert_eq!(get(&c, &r.id).unwrap().unwrap(), read, "a whole detail reads the same");
    }
}

#[test]
fn a_request_that_went_plainly_stores_little_more_than_its_timings() {
    let mut c = db();
    let plain = record(&tid(1_700_000_000_600, "q1"), 1_700_000_000_600);
    let mut converted = record(&tid(1_700_000_000_601, "q2"), 1_700_000_000_601);
    converted.attempts[0].format = "openai".into();
    converted.conversion = Some("anthropic→openai".into());
    insert_batch(&mut c, &[plain.clone(), converted.clone()]).unwrap();
    let details: Vec<String> = c
        .prepare("SELECT record FROM request_records ORDER BY seq")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        details,
        [
            r#"{"user_agent":"claude-cli/2.1","model_answered":"claude-sonnet-4-5-20250929","attempt":{"started_ms":0.2,"duration_ms":899.0}}"#,
            r#"{"user_agent":"claude-cli/2.1","model_answered":"claude-sonnet-4-5-20250929","attempt":{"format":"openai","started_ms":0.2,"duration_ms":899.0},"conversion":"anthropic→openai"}"#,
        ]
    );
    for r in [&plain, &converted] {
        assert_eq!(read_back(&c, &r.id), *r);
    }
}

#[test]
fn extreme_start_times_are_listed_by_value_without_overflow() {
    let mut c = db();
    let far = record(&tid(0xffff_ffff_ffff, "far"), u64::MAX);
    let zero = record(&tid(0, "zero"), 0);
    insert_batch(&mut c, &[far, zero]).unwrap();
    let by_endpoint = Filter { endpoint: Some("a".into()), ..Default::default() };
    assert_eq!(all_pages(&c, &by_endpoint, 1).len(), 2);
    // `until` is exclusive: the record stored at i64::MAX is after it, walked or not.
    let window = Filter { since_ms: Some(i64::MIN), until_ms: Some(i64::MAX), ..by_endpoint };
    assert_eq!(all_pages(&c, &window, 5), [tid(0, "zero")]);
    let unwalked = Filter { endpoint: None, ..window };
    assert_eq!(all_pages(&c, &unwalked, 5), [tid(0, "zero")]);
}

mod detail_property {
    use super::*;
    use proptest::prelude::*;

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-zA-Z0-9 /._:-]{0,16}",
            "\\PC{0,8}",
            // What must be escaped: quotes, backslashes, control characters.
            "[\"\\\\\\x00-\\x1fa→]{0,6}",
        ]
    }

    fn millis() -> impl Strategy<Value = f64> {
        prop_oneof![Just(0.0), 0.0f64..1e7, proptest::num::f64::NORMAL]
    }

    fn attempt() -> impl Strategy<Value = AttemptRecord> {
        let classification = prop_oneof![
            Just(Classification::Success),
            Just(Classification::Neutral),
            Just(Classification::Failure),
            Just(Classification::RateLimited),
            Just(Classification::Transient),
            Just(Classification::Cancelled),
        ];
        (
            (text(), proptest::option::of(text()), text(), millis(), millis()),
            (proptest::option::of(any::<u16>()), proptest::option::of(text()), proptest::option::of(text())),
            (classification, proptest::option::of(text())),
        )
            .prop_map(
                |(
                    (endpoint, resume, format, started_ms, duration_ms),
                    (status, error_kind, error),
                    (classification, breaker),
                )| AttemptRecord {
                    endpoint: endpoint.into(),
                    resume,
                    format: format.into(),
                    started_ms,
                    duration_ms,
                    status,
                    error_kind,
                    error,
                    classification,
                    breaker,
                },
            )
    }

    fn error() -> impl Strategy<Value = RecordError> {
        (text(), proptest::option::of(text()), text(), proptest::option::of(text()))
            .prop_map(|(source, kind, message, upstream_body)| RecordError { source, kind, message, upstream_body })
    }

    /// A method or path: the usual ones (which a detail leaves out), one of another protocol,
    /// or any text.
    fn method() -> impl Strategy<Value = String> {
        prop_oneof![2 => Just("POST".to_owned()), 1 => Just("GET".to_owned()), 1 => text()]
    }

    fn path() -> impl Strategy<Value = String> {
        let usual = Protocol::ALL.into_iter().filter_map(Protocol::usual_path).map(str::to_owned).collect::<Vec<_>>();
        prop_oneof![2 => prop::sample::select(usual), 1 => Just("/v1/messages/count_tokens".to_owned()), 1 => text()]
    }

    /// The record's only attempt as most are: answered at the record's endpoint with its
    /// status, nothing else to say; in the format of any protocol (or none).
    fn plain_attempt(r: &RequestRecord, format: String, started_ms: f64, duration_ms: f64) -> AttemptRecord {
        AttemptRecord {
            endpoint: r.endpoint.clone().unwrap_or_default(),
            resume: None,
            format: format.into(),
            started_ms,
            duration_ms,
            status: Some(r.status),
            error_kind: None,
            error: None,
            classification: Classification::Success,
            breaker: None,
        }
    }

    proptest! {
        /// Whatever a record's detail holds (text that needs escaping or not, fields present or
        /// at their default, the usual method, path and attempt or not, any number of attempts),
        /// it is stored and read back as it was.
        #[test]
        fn a_record_s_detail_reads_back_as_it_was_recorded(
            (method, path, user_agent, session_id, model_answered) in
                (method(), path(), proptest::option::of(text()), proptest::option::of(text()), proptest::option::of(text())),
            (error, first_token_ms, attempts) in
                (proptest::option::of(error()), proptest::option::of(millis()), proptest::collection::vec(attempt(), 0..4)),
            (conversion, losses, affinity) in
                (proptest::option::of(text()), proptest::collection::vec(text(), 0..3), any::<bool>()),
            (protocol, endpoint, status) in
                (prop::sample::select(vec!["claude", "openai", "responses", "gemini", "other"]),
                 proptest::option::of(prop_oneof![Just("a".to_owned()), text()]), prop_oneof![Just(200u16), any::<u16>()]),
            (plain, spoiled, format, started_ms, duration_ms) in
                (any::<bool>(), 0..8u8, prop_oneof![
                    prop::sample::select(vec!["anthropic", "openai", "responses", "gemini"]).prop_map(str::to_owned),
                    text(),
                ], millis(), millis()),
        ) {
            let id = tid(1_700_000_000_000, "p");
            let mut r = record(&id, 1_700_000_000_000);
            r.protocol = protocol.into();
            r.endpoint = endpoint.map(Into::into);
            r.status = status;
            r.method = method.into();
            r.path = path.into();
            r.user_agent = user_agent.map(Into::into);
            r.session_id = session_id;
            r.model_answered = model_answered.map(Into::into);
            r.error = error;
            r.first_token_ms = first_token_ms;
            r.attempts = attempts;
            r.conversion = conversion;
            r.losses = losses;
            r.affinity = affinity;
            if plain {
                let mut only = plain_attempt(&r, format, started_ms, duration_ms);
                // Or all but one thing: then it is stored as any attempt is.
                match spoiled {
                    1 => only.resume = Some("continued".into()),
                    2 => only.error_kind = Some("stream_error".into()),
                    3 => only.error = Some("cut".into()),
                    4 => only.breaker = Some("half_open→closed".into()),
                    5 => only.classification = Classification::Neutral,
                    6 => only.status = None,
                    7 => only.endpoint.to_mut().push_str("-elsewhere"),
                    _ => {}
                }
                r.attempts = vec![only];
            }
            let mut c = db();
            prop_assert_eq!(insert_batch(&mut c, std::slice::from_ref(&r)).unwrap(), 1);
            prop_assert_eq!(read_back(&c, &id), r);
        }
    }
}
