//! Request records end to end: the writer behind a real gateway, the query API over HTTP
//! (`/api/requests`, `/api/requests/{id}`, `/api/stats`, `/api/records/status`), records
//! surviving a restart, and the real binary killed with SIGKILL mid-traffic (the database must
//! pass `PRAGMA integrity_check` and keep every record flushed before the kill).

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ccmesh::clock::{Clock, SystemClock};
use ccmesh::gateway::Gateway;
use ccmesh::observe::record::{AttemptRecord, Classification, RecordError, RequestRecord, Tokens};
use ccmesh::observe::writer::{self, WriterConfig, WriterHandle};
use ccmesh::store::Store;
use serde_json::{Value, json};

use crate::support::gateway::{TestGateway, claude_body, http_client};
use crate::support::mock::{MockUpstream, Reply};

/// Patience for conditions that depend on the writer thread (it flushes within ~100 ms).
const DEADLINE: Duration = Duration::from_secs(20);

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// A synthetic record: even `i` on endpoint `alpha`, odd on `beta`; every tenth failed over
/// from `alpha` to `beta` and still failed (503, overloaded).
/// A record id as the gateway makes them (its start time's 12 hex digits first), marked `syn`.
pub(crate) fn syn_id(i: u64, at_ms: u64) -> String {
    format!("{at_ms:012x}syn{i:05}")
}

pub(crate) fn synthetic(i: u64, at_ms: u64) -> RequestRecord {
    let endpoint = if i.is_multiple_of(2) { "alpha" } else { "beta" };
    let mut r = RequestRecord {
        id: syn_id(i, at_ms),
        started_at_ms: at_ms,
        protocol: if i.is_multiple_of(3) { "openai".into() } else { "claude".into() },
        method: "POST".into(),
        path: "/v1/messages".into(),
        user_agent: Some("test".into()),
        session_id: Some("sess-1".into()),
        model_requested: Some(if i.is_multiple_of(4) { "gpt-5".into() } else { "claude-sonnet-4-5".into() }),
        model_sent: Some("claude-sonnet-4-5".into()),
        model_answered: None,
        endpoint: Some(endpoint.into()),
        stream: i % 2 == 1,
        status: 200,
        error: None,
        first_byte_ms: Some(50.0),
        first_token_ms: None,
        total_ms: (i % 100) as f64 * 10.0 + 10.0,
        overhead_ms: 0.3,
        tokens: Tokens { input: Some(100), output: Some(10), cache_read: Some(0), cache_write: Some(0) },
        cost_usd: if i.is_multiple_of(7) { None } else { Some(0.01) },
        attempts: vec![AttemptRecord {
            endpoint: endpoint.into(),
            format: "anthropic".into(),
            started_ms: 0.1,
            duration_ms: 9.0,
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
    };
    if i.is_multiple_of(10) {
        r.status = 503;
        r.failed_over = true;
        r.tokens = Tokens::default();
        r.cost_usd = None;
        r.error = Some(RecordError {
            source: "upstream".into(),
            kind: Some("overloaded_error".into()),
            message: "upstream overloaded".into(),
            upstream_body: Some(r#"{"type":"error","error":{"type":"overloaded_error"}}"#.into()),
        });
        r.attempts = vec![
            AttemptRecord {
                endpoint: "alpha".into(),
                format: "anthropic".into(),
                started_ms: 0.1,
                duration_ms: 4.0,
                status: Some(503),
                error_kind: None,
                error: Some("overloaded".into()),
                classification: Classification::Failure,
                breaker: Some("closed→open/broken (consecutive_failures)".into()),
                resume: None,
            },
            AttemptRecord {
                endpoint: "beta".into(),
                format: "openai".into(),
                started_ms: 4.5,
                duration_ms: 5.0,
                status: Some(503),
                error_kind: None,
                error: Some("overloaded".into()),
                classification: Classification::Failure,
                breaker: None,
                resume: None,
            },
        ];
    }
    r
}

async fn flush(g: &TestGateway) {
    let sink = g.gw.events.records().clone();
    assert!(tokio::task::spawn_blocking(move || sink.flush(DEADLINE)).await.unwrap(), "the writer did not flush");
}

async fn get(g: &TestGateway, path: &str) -> (u16, Value) {
    g.api(reqwest::Method::GET, path, None).await
}

fn ids(page: &Value) -> Vec<String> {
    page["requests"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn synthetic_records_are_listed_filtered_paged_detailed_and_counted() {
    let g = TestGateway::start().await;
    let base = now_ms() - 3 * 3_600_000;
    for i in 0..120 {
        g.gw.events.request_completed(synthetic(i, base + i * 60_000));
    }
    flush(&g).await;
    let (_, status) = get(&g, "/api/records/status").await;
    assert_eq!(status["enabled"], true);
    assert_eq!(status["written"], 120);
    assert_eq!((status["dropped"].clone(), status["queued"].clone()), (json!(0), json!(0)));
    assert_eq!(status["capacity"], 10_000);

    // Newest first, 50 by default.
    let (code, first) = get(&g, "/api/requests").await;
    assert_eq!(code, 200, "{first}");
    assert_eq!(first["requests"].as_array().unwrap().len(), 50);
    assert_eq!(first["requests"][0]["id"], syn_id(119, base + 119 * 60_000));
    let s = &first["requests"][0];
    assert_eq!(s["endpoint"], "beta");
    assert_eq!(s["attempts"], 1);
    assert_eq!(s["tokens"]["input"], 100);
    assert!(s["started_at"].as_str().unwrap().ends_with('Z'));

    // Cursor paging: every record exactly once, in order, even with newer records arriving
    // between pages.
    let mut seen: Vec<String> = Vec::new();
    let mut cursor: Option<String> = None;
    let mut extra = 0;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/requests?limit=35&cursor={c}"),
            None => "/api/requests?limit=35".to_string(),
        };
        let (code, page) = get(&g, &path).await;
        assert_eq!(code, 200, "{page}");
        seen.extend(ids(&page));
        extra += 1;
        let mut newer = synthetic(1000 + extra, now_ms());
        newer.id = format!("newer{extra}");
        g.gw.events.request_completed(newer);
        flush(&g).await;
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    let want: Vec<String> = (0..120).rev().map(|i| syn_id(i, base + i * 60_000)).collect();
    assert_eq!(seen, want);

    // Filters.
    let (_, alpha) = get(&g, "/api/requests?endpoint=alpha&limit=500").await;
    assert!(alpha["requests"].as_array().unwrap().iter().all(|r| r["endpoint"] == "alpha"));
    assert_eq!(ids(&alpha).iter().filter(|id| id.contains("syn")).count(), 60);
    let (_, errors) = get(&g, "/api/requests?status_class=5xx&limit=500").await;
    assert_eq!(ids(&errors).len(), 12);
    assert_eq!(errors["next_cursor"], Value::Null);
    let (_, search) = get(&g, "/api/requests?q=OVERLOADED").await;
    assert_eq!(ids(&search).len(), 12);
    let (_, failed_over) = get(&g, "/api/requests?failed_over=true&endpoint=alpha").await;
    assert_eq!(ids(&failed_over).len(), 12);
    let (_, openai) = get(&g, "/api/requests?protocol=openai&model=gpt-5&limit=500").await;
    // i divisible by 3 and by 4.
    assert_eq!(ids(&openai).len(), 10);
    let since = base + 100 * 60_000;
    let (_, window) = get(&g, &format!("/api/requests?since={since}&until={}", base + 110 * 60_000)).await;
    assert_eq!(ids(&window), (100..110).rev().map(|i| syn_id(i, base + i * 60_000)).collect::<Vec<_>>());

    // Detail: the whole decision trail.
    let (code, detail) = get(&g, &format!("/api/requests/{}", syn_id(10, base + 10 * 60_000))).await;
    assert_eq!(code, 200);
    assert_eq!(detail["attempts"].as_array().unwrap().len(), 2);
    assert_eq!(detail["attempts"][0]["classification"], "failure");
    assert_eq!(detail["attempts"][0]["breaker"], "closed→open/broken (consecutive_failures)");
    assert_eq!(detail["attempts"][1]["endpoint"], "beta");
    assert_eq!(detail["error"]["kind"], "overloaded_error");
    assert_eq!(detail["status_class"], "5xx");
    assert_eq!(detail["session_id"], "sess-1");
    let (code, missing) = get(&g, "/api/requests/nope").await;
    assert_eq!(code, 404);
    assert_eq!(missing["error"]["type"], "not_found");

    // Statistics over exactly the 120 records, by endpoint, hourly.
    let (code, stats) =
        get(&g, &format!("/api/stats?since={base}&until={}&group_by=endpoint&bucket=hour", base + 120 * 60_000)).await;
    assert_eq!(code, 200, "{stats}");
    assert_eq!(stats["totals"]["requests"], 120);
    assert_eq!(stats["totals"]["errors"], 12);
    assert_eq!(stats["totals"]["failovers"], 12);
    let groups = stats["groups"].as_array().unwrap();
    assert_eq!(groups.iter().map(|g| g["key"].as_str().unwrap()).collect::<Vec<_>>(), ["alpha", "beta"]);
    assert_eq!(groups[0]["totals"]["requests"], 60);
    assert_eq!(groups[0]["totals"]["errors"], 12);
    let hourly: u64 = groups[0]["buckets"].as_array().unwrap().iter().map(|b| b["requests"].as_u64().unwrap()).sum();
    assert_eq!(hourly, 60);
    // Unpriced: successful requests with usage but no cost (every 7th, but not every 10th).
    let unpriced = (0..120u64).filter(|i| i.is_multiple_of(7) && i % 10 != 0).count();
    assert_eq!(stats["totals"]["unpriced"]["requests"], unpriced);
    assert_eq!(stats["totals"]["unpriced"]["tokens"]["input"], unpriced * 100);
    assert_eq!(stats["totals"]["usage_unknown"], 12);
    assert_eq!(stats["totals"]["tokens"]["input"], 108 * 100);
    assert!(
        stats["totals"]["latency_ms"]["p95"].as_f64().unwrap()
            >= stats["totals"]["latency_ms"]["p50"].as_f64().unwrap()
    );

    // Bad parameters name themselves.
    for (path, field) in [
        ("/api/requests?limit=0", "limit"),
        ("/api/requests?cursor=xyz", "cursor"),
        ("/api/requests?status_class=1xx", "status_class"),
        ("/api/requests?colour=red", "colour"),
        ("/api/stats?group_by=colour", "group_by"),
        ("/api/stats?since=2026-02-30", "since"),
    ] {
        let (code, v) = get(&g, path).await;
        assert_eq!(code, 400, "{path}: {v}");
        assert_eq!(v["error"]["field"], field, "{path}: {v}");
    }
}

#[tokio::test]
async fn retention_comes_from_the_settings() {
    let g = TestGateway::start().await;
    let day = 86_400_000;
    g.gw.events.request_completed(synthetic(1, now_ms() - 3 * day));
    let kept = synthetic(2, now_ms() - day / 2);
    let kept_id = kept.id.clone();
    g.gw.events.request_completed(kept);
    flush(&g).await;
    // prune_now blocks this thread briefly; the writer thread needs nothing from the runtime.
    let writer = g.writer.as_ref().unwrap();
    assert_eq!(writer.prune_now(), Some(0), "default retention is 30 days");
    let doc = g.settings(json!({"retention_days": 1})).await;
    assert_eq!(doc["retention_days"], 1);
    assert_eq!(writer.prune_now(), Some(1));
    let (_, page) = get(&g, "/api/requests").await;
    assert_eq!(ids(&page), [kept_id]);
    let (code, v) = g.api(reqwest::Method::PATCH, "/api/settings", Some(json!({"retention_days": 0}))).await;
    assert_eq!(code, 400, "{v}");
}

// Depends on the request path's instrumentation (src/proxy/trail.rs): a real proxied request,
// through a failover, must leave a record with both attempts.
#[tokio::test]
async fn a_proxied_request_leaves_a_record_with_its_attempts() {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &a.url(), json!({})).await;
    g.add("b", "anthropic", &b.url(), json!({})).await;
    a.push(Reply::anthropic_error(503, "overloaded_error", "busy"));
    b.set_default(Reply::anthropic_message("from b"));
    let r = g.post("/v1/messages", &claude_body("claude-sonnet-4-5", false)).await;
    assert_eq!(r.status(), 200);
    let id = r.headers().get("x-ccmesh-request-id").expect("x-ccmesh-request-id").to_str().unwrap().to_string();
    let _ = r.bytes().await.unwrap();
    let record = g.record(&id).await;
    assert_eq!(record["status"], 200);
    assert_eq!(record["endpoint"], "b");
    assert_eq!(record["model_requested"], "claude-sonnet-4-5");
    assert_eq!(record["failed_over"], true);
    let attempts = record["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{record}");
    assert_eq!((attempts[0]["endpoint"].clone(), attempts[0]["status"].clone()), (json!("a"), json!(503)));
    assert_eq!(attempts[0]["classification"], "failure");
    assert_eq!(
        (attempts[1]["endpoint"].clone(), attempts[1]["classification"].clone()),
        (json!("b"), json!("success"))
    );
    let (_, page) = get(&g, "/api/requests?failed_over=true").await;
    assert_eq!(ids(&page), [id]);
}

#[tokio::test]
async fn a_record_keeps_the_clients_session_id_and_user_agent() {
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &up.url(), json!({})).await;
    up.set_default(Reply::anthropic_message("ok"));
    // Claude Code's own header first; the generic names as fallbacks, in that order.
    let cases = [
        (vec![("x-claude-code-session-id", "cc-1"), ("session-id", "generic")], Some("cc-1")),
        (vec![("session-id", "dash-2"), ("session_id", "underscore")], Some("dash-2")),
        (vec![("session_id", "underscore-3")], Some("underscore-3")),
        (vec![], None),
    ];
    for (headers, session) in cases {
        let mut all = headers.clone();
        all.push(("user-agent", "claude-cli/2.0.14 (external, cli)"));
        let r = g.post_with("/v1/messages", &claude_body("m", false), &all).await;
        assert_eq!(r.status(), 200);
        let id = r.headers()["x-ccmesh-request-id"].to_str().unwrap().to_string();
        let record = g.record(&id).await;
        assert_eq!(record["session_id"].as_str(), session, "{headers:?}");
        assert_eq!(record["user_agent"], "claude-cli/2.0.14 (external, cli)");
    }
}

/// A gateway on a given data dir, so a test can stop it and start another on the same files.
struct Instance {
    url: String,
    gw: Arc<Gateway>,
    writer: WriterHandle,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Instance {
    async fn start(dir: &Path) -> Instance {
        let db = dir.join("ccmesh.db");
        let store = Store::open(&db).unwrap();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let (records, writer) = writer::start(&db, WriterConfig::new(clock.clone())).unwrap();
        let gw =
            Gateway::new(store, clock, ccmesh::proxy::upstream::UpstreamClient::new().unwrap(), None, records).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = gw.clone();
        let task = tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.await;
            };
            ccmesh::server::serve(listener, served, shutdown, Duration::from_secs(5)).await.unwrap();
        });
        Instance { url, gw, writer, stop, task }
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap();
        tokio::task::spawn_blocking(move || self.writer.shutdown()).await.unwrap();
    }
}

#[tokio::test]
async fn records_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let first = Instance::start(dir.path()).await;
    let base = now_ms() - 60_000;
    for i in 0..25 {
        first.gw.events.request_completed(synthetic(i, base + i));
    }
    // No flush: a clean stop writes what is queued.
    first.stop().await;

    let second = Instance::start(dir.path()).await;
    let http = http_client();
    let page: Value =
        http.get(format!("{}/api/requests?limit=100", second.url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(ids(&page).len(), 25);
    let detail: Value = http
        .get(format!("{}/api/requests/{}", second.url, syn_id(20, base + 20)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(detail["attempts"].as_array().unwrap().len(), 2);
    second.stop().await;
}

// ------------------------------------------------------------------ the real binary

const BIN: &str = env!("CARGO_BIN_EXE_ccmesh");

/// `ccmesh serve` on a data dir the test owns (it outlives the process).
struct Binary {
    child: Child,
    url: String,
}

impl Binary {
    fn start(dir: &Path, upstream: &str) -> Binary {
        let config = dir.join("ccmesh.toml");
        std::fs::write(
            &config,
            format!(
                "[[endpoints]]\nname = \"up\"\nbase_url = \"{upstream}\"\napi_key = \"sk-test-000000000000\"\nformat = \"anthropic\"\n"
            ),
        )
        .unwrap();
        let mut child = Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0", "--log-format", "json", "--shutdown-grace-secs", "10"])
            .arg("--data-dir")
            .arg(dir)
            .arg("--config")
            .arg(&config)
            .env_remove("CCMESH_ADMIN_TOKEN")
            .env_remove("CCMESH_CONFIG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // Keep draining stderr so the child never blocks on a full pipe.
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && v["fields"]["event"] == "listening"
                {
                    let _ = tx.send(v["fields"]["addr"].as_str().unwrap_or_default().to_string());
                }
            }
        });
        let addr = rx.recv_timeout(DEADLINE).expect("ccmesh did not start");
        Binary { child, url: format!("http://{addr}") }
    }

    async fn status(&self, http: &reqwest::Client) -> Value {
        http.get(format!("{}/api/records/status", self.url)).send().await.unwrap().json().await.unwrap()
    }

    /// Poll the writer's counters until `written` reaches `n`.
    async fn wait_written(&self, http: &reqwest::Client, n: u64) -> u64 {
        let start = std::time::Instant::now();
        loop {
            let written = self.status(http).await["written"].as_u64().unwrap();
            if written >= n {
                return written;
            }
            assert!(start.elapsed() < DEADLINE, "only {written} of {n} records written");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn send_requests(http: &reqwest::Client, url: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for _ in 0..n {
        let r = http
            .post(format!("{url}/v1/messages"))
            .json(&claude_body("claude-sonnet-4-5", false))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        if let Some(id) = r.headers().get("x-ccmesh-request-id") {
            ids.push(id.to_str().unwrap().to_string());
        }
        let _ = r.bytes().await;
    }
    ids
}

fn stored_ids(db: &Path) -> (String, HashSet<String>) {
    let conn = rusqlite::Connection::open(db).unwrap();
    let integrity: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    let mut stmt = conn.prepare("SELECT id FROM requests").unwrap();
    let ids = stmt.query_map([], |r| r.get::<_, String>(0)).unwrap().map(Result::unwrap).collect();
    (integrity, ids)
}

// Depends on the request path's instrumentation (records for proxied requests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_traffic_keeps_the_database_intact_and_flushed_records() {
    let up = MockUpstream::start().await;
    up.set_default(Reply::anthropic_message("ok"));
    let dir = tempfile::tempdir().unwrap();
    let mut bin = Binary::start(dir.path(), &up.url());
    let http = http_client();

    // Phase 1: traffic, then wait until it is all on disk.
    let flushed = send_requests(&http, &bin.url, 60).await;
    let written = bin.wait_written(&http, 60).await;

    // Phase 2: traffic in flight while the process is killed without warning.
    let traffic = {
        let (http, url) = (http.clone(), bin.url.clone());
        tokio::spawn(async move {
            let mut sent = 0u64;
            while let Ok(r) = http.post(format!("{url}/v1/messages")).json(&claude_body("m", false)).send().await {
                let _ = r.bytes().await;
                sent += 1;
            }
            sent
        })
    };
    up.wait_for_requests(60 + 40).await;
    bin.child.kill().unwrap(); // SIGKILL
    bin.child.wait().unwrap();
    let sent_after = traffic.await.unwrap();
    assert!(sent_after >= 30, "traffic was running at the kill ({sent_after} requests)");

    let db = dir.path().join("ccmesh.db");
    let (integrity, stored) = stored_ids(&db);
    assert_eq!(integrity, "ok");
    assert!(stored.len() as u64 >= written, "{} stored, {written} were flushed before the kill", stored.len());
    for id in &flushed {
        assert!(stored.contains(id), "flushed record {id} lost");
    }
    // The database opens and takes writes again.
    let store = Store::open(&db).unwrap();
    let n = store.read_records(ccmesh::store::records::count).unwrap();
    assert_eq!(n, stored.len() as u64);
    let mut bin = Binary::start(dir.path(), &up.url());
    send_requests(&http, &bin.url, 1).await;
    bin.wait_written(&http, 1).await;
    bin.child.kill().unwrap();
}

// Depends on the request path's instrumentation (records for proxied requests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_writes_every_queued_record_before_exit() {
    let up = MockUpstream::start().await;
    up.set_default(Reply::anthropic_message("ok"));
    let dir = tempfile::tempdir().unwrap();
    let mut bin = Binary::start(dir.path(), &up.url());
    let http = http_client();
    let sent = send_requests(&http, &bin.url, 40).await;
    let status = Command::new("kill").arg("-TERM").arg(bin.child.id().to_string()).status().unwrap();
    assert!(status.success());
    let exit = bin.child.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
    let (integrity, stored) = stored_ids(&dir.path().join("ccmesh.db"));
    assert_eq!(integrity, "ok");
    assert_eq!(stored.len(), 40);
    for id in &sent {
        assert!(stored.contains(id), "record {id} lost at shutdown");
    }
}

#[tokio::test]
async fn a_request_that_fails_over_twice_records_all_three_attempts_and_the_breaker_transitions() {
    use crate::support::gateway::chat_body;
    use crate::support::mock::{MockUpstream, Reply};
    let (a, b, c) = (MockUpstream::start().await, MockUpstream::start().await, MockUpstream::start().await);
    let g = TestGateway::start().await;
    g.settings(serde_json::json!({"routing_strategy": "priority", "breaker": {"openai": {"failure_threshold": 1}}}))
        .await;
    g.add("a", "openai", &a.url(), serde_json::json!({})).await;
    g.add("b", "anthropic", &b.url(), serde_json::json!({})).await;
    g.add("c", "openai", &c.url(), serde_json::json!({})).await;
    a.push(Reply::openai_error(503, "server_error", "a is down"));
    b.push(Reply::anthropic_error(429, "rate_limit_error", "b is busy"));
    c.push(Reply::openai_chat("third time lucky"));
    let r = g.post("/v1/chat/completions", &chat_body("gpt-x", false)).await;
    assert_eq!(r.status(), 200);
    let id = r.headers()["x-ccmesh-request-id"].to_str().unwrap().to_string();
    assert!(r.headers()["server-timing"].to_str().unwrap().starts_with("gateway;dur="));
    g.flush_records().await;
    let (status, record) = g.api(reqwest::Method::GET, &format!("/api/requests/{id}"), None).await;
    assert_eq!(status, 200, "{record}");
    assert_eq!(record["status"], 200);
    assert_eq!(record["failed_over"], true);
    assert_eq!(record["endpoint"], "c");
    assert_eq!(record["model_requested"], "gpt-x");
    let attempts = record["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 3, "{record}");
    let summary: Vec<(String, Value, String, Value)> = attempts
        .iter()
        .map(|a| {
            (
                a["endpoint"].as_str().unwrap().to_string(),
                a["status"].clone(),
                a["classification"].as_str().unwrap().to_string(),
                a["breaker"].clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                "a".into(),
                serde_json::json!(503),
                "failure".into(),
                serde_json::json!("closed→open/broken (consecutive_failures)")
            ),
            (
                "b".into(),
                serde_json::json!(429),
                "rate_limited".into(),
                serde_json::json!("closed→open/rate_limited (consecutive_failures)")
            ),
            ("c".into(), serde_json::json!(200), "success".into(), Value::Null),
        ]
    );
    // The converted attempt (Chat client → Anthropic endpoint b) is marked as such.
    assert_eq!(attempts[1]["format"], "anthropic");
    assert!(attempts[0]["started_ms"].as_f64().unwrap() <= attempts[1]["started_ms"].as_f64().unwrap());
    assert_eq!(record["tokens"]["input"], 12);
    assert_eq!(record["tokens"]["output"], 8);
    assert!(record["overhead_ms"].as_f64().unwrap() >= 0.0);
    assert!(record["total_ms"].as_f64().unwrap() >= record["overhead_ms"].as_f64().unwrap());
    // The failed-over filter finds it.
    let (_, page) = g.api(reqwest::Method::GET, "/api/requests?failed_over=true", None).await;
    assert_eq!(page["requests"][0]["id"], id.as_str());
}
