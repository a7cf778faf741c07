//! `GET /metrics` (read back by a real Prometheus text-format parser: Python's
//! `prometheus_client`) and `GET /api/events` (the live SSE stream), end to end.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use ccmesh::observe::live::{CAPACITY, LiveEvent};
use ccmesh::observe::record::{AttemptRecord, Classification, RequestRecord, Tokens};
use futures_util::{Stream, StreamExt};
use serde_json::{Value, json};

use crate::support::gateway::{Options, TestGateway, claude_body};
use crate::support::mock::{MockUpstream, Reply};
use crate::support::python::python;

/// A hang guard, not a timing assertion: how long to wait for an SSE event that must come.
const WAIT: Duration = Duration::from_secs(10);

// ===================================================================== helpers

/// An open `GET /api/events` response, read event by event.
struct Events {
    body: Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>,
    buf: Vec<u8>,
}

impl Events {
    async fn open(g: &TestGateway) -> Events {
        let r = g.http.get(format!("{}/api/events", g.url)).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], "text/event-stream");
        Events { body: Box::pin(r.bytes_stream()), buf: Vec::new() }
    }

    /// The next event as (name, JSON data), comments skipped; `None` when the stream ends.
    async fn next(&mut self) -> Option<(String, Value)> {
        let next = async {
            loop {
                if let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
                    let block: Vec<u8> = self.buf.drain(..end + 2).collect();
                    let block = String::from_utf8(block).unwrap();
                    let (mut kind, mut data) = (None, String::new());
                    for line in block.lines() {
                        if let Some(v) = line.strip_prefix("event:") {
                            kind = Some(v.trim().to_string());
                        } else if let Some(v) = line.strip_prefix("data:") {
                            data.push_str(v.strip_prefix(' ').unwrap_or(v));
                        } else {
                            assert!(line.is_empty() || line.starts_with(':'), "unexpected SSE line {line:?}");
                        }
                    }
                    match kind {
                        Some(kind) => return Some((kind, serde_json::from_str(&data).unwrap())),
                        None => continue, // a keep-alive comment
                    }
                }
                match self.body.next().await {
                    Some(chunk) => self.buf.extend_from_slice(&chunk.unwrap()),
                    None => {
                        assert!(self.buf.is_empty(), "stream ended inside an event: {:?}", self.buf);
                        return None;
                    }
                }
            }
        };
        tokio::time::timeout(WAIT, next).await.expect("no SSE event (or end of stream) within the hang guard")
    }

    /// The next event named `kind`, skipping `request` events (which real traffic produces once
    /// the request path is instrumented) — any other event in between is a failure.
    async fn expect(&mut self, kind: &str) -> Value {
        loop {
            let (k, data) = self.next().await.unwrap_or_else(|| panic!("stream ended waiting for {kind}"));
            if k == kind {
                return data;
            }
            assert_eq!(k, "request", "waiting for {kind}, got {k}: {data}");
        }
    }

    /// The next `request` event with this id (real-traffic request events are skipped).
    async fn expect_request(&mut self, id: &str) -> Value {
        loop {
            let data = self.expect("request").await;
            if data["id"] == id {
                return data;
            }
        }
    }
}

async fn scrape(g: &TestGateway) -> String {
    let r = g.http.get(format!("{}/metrics", g.url)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/plain; version=0.0.4; charset=utf-8");
    r.text().await.unwrap()
}

const PARSE: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
families = []
for f in text_string_to_metric_families(sys.stdin.read()):
    families.append({
        "name": f.name, "type": f.type, "help": f.documentation,
        "samples": [{"name": s.name, "labels": s.labels, "value": s.value} for s in f.samples],
    })
print(json.dumps(families))
"#;

/// One family as the Python parser understood it.
#[derive(Debug)]
struct Family {
    kind: String,
    help: String,
    /// (sample name, labels) → value.
    samples: BTreeMap<(String, BTreeMap<String, String>), f64>,
}

impl Family {
    fn get(&self, sample: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        self.samples.get(&(sample.to_string(), labels)).copied()
    }

    /// Every sample named `sample`, as (labels, value).
    fn series(&self, sample: &str) -> Vec<(BTreeMap<String, String>, f64)> {
        self.samples.iter().filter(|((n, _), _)| n == sample).map(|((_, l), v)| (l.clone(), *v)).collect()
    }
}

/// `text` parsed by `prometheus_client.parser.text_string_to_metric_families`, by family name.
/// The parser fails loudly on anything that is not valid text exposition format.
fn parse_with_prometheus_client(text: &str) -> BTreeMap<String, Family> {
    let mut child = Command::new(python())
        .args(["-c", PARSE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "prometheus_client rejected the exposition:\n{}\n--- text\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let parsed: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    parsed
        .into_iter()
        .map(|f| {
            let samples = f["samples"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| {
                    let labels = s["labels"]
                        .as_object()
                        .unwrap()
                        .iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                        .collect();
                    ((s["name"].as_str().unwrap().to_string(), labels), s["value"].as_f64().unwrap())
                })
                .collect();
            let family = Family {
                kind: f["type"].as_str().unwrap().to_string(),
                help: f["help"].as_str().unwrap().to_string(),
                samples,
            };
            (f["name"].as_str().unwrap().to_string(), family)
        })
        .collect()
}

fn attempt(endpoint: &str, classification: Classification, status: Option<u16>) -> AttemptRecord {
    AttemptRecord {
        endpoint: endpoint.to_owned().into(),
        format: "responses".into(),
        started_ms: 0.0,
        duration_ms: 10.0,
        status,
        error_kind: None,
        error: None,
        classification,
        breaker: None,
        resume: None,
    }
}

/// A record as the request path would hand it over.
fn synthetic(id: &str, protocol: &str, endpoint: &str, status: u16) -> RequestRecord {
    RequestRecord {
        id: id.into(),
        started_at_ms: 1_700_000_000_000,
        protocol: protocol.to_owned().into(),
        method: "POST".into(),
        path: "/v1/responses".into(),
        user_agent: Some("test".into()),
        session_id: None,
        model_requested: Some("gpt-c".into()),
        model_sent: Some("gpt-c".into()),
        model_answered: None,
        endpoint: Some(endpoint.to_owned().into()),
        stream: false,
        status,
        error: None,
        first_byte_ms: Some(250.0),
        first_token_ms: None,
        total_ms: 750.0,
        overhead_ms: 0.25,
        tokens: Tokens::default(),
        cost_usd: None,
        attempts: vec![attempt(endpoint, Classification::Success, Some(status))],
        failed_over: false,
        conversion: None,
        losses: Vec::new(),
        client_key: None,
        affinity: false,
    }
}

/// Real traffic through the gateway (claude protocol, failure threshold 1): a success on a,
/// a failover from a (503, which opens a) to b, then a 429 from b that opens b as rate-limited
/// (a is still open, so it is the client's answer).
async fn real_traffic(g: &TestGateway, a: &MockUpstream, b: &MockUpstream) {
    a.push(Reply::anthropic_message("one"));
    let r = g.post("/v1/messages", &claude_body("m", false)).await;
    assert_eq!((r.status().as_u16(), r.headers()["x-ccmesh-endpoint"].to_str().unwrap()), (200, "a"));

    a.push(Reply::anthropic_error(503, "overloaded_error", "busy"));
    b.push(Reply::anthropic_message("two"));
    let r = g.post("/v1/messages", &claude_body("m", false)).await;
    assert_eq!((r.status().as_u16(), r.headers()["x-ccmesh-endpoint"].to_str().unwrap()), (200, "b"));
    assert_eq!(r.headers()["x-ccmesh-attempts"], "2");

    b.push(Reply::anthropic_error(429, "rate_limit_error", "slow down").with_header("retry-after", "30"));
    let r = g.post("/v1/messages", &claude_body("m", false)).await;
    assert_eq!(r.status(), 429);
    assert_eq!((a.request_count(), b.request_count()), (2, 2));
    assert_eq!(g.health("b").await["open_reason"], "rate_limited");
}

/// Three endpoints: a and b take real traffic; c only synthetic records.
async fn three_endpoints() -> (TestGateway, MockUpstream, MockUpstream, MockUpstream) {
    let (a, b, c) = (MockUpstream::start().await, MockUpstream::start().await, MockUpstream::start().await);
    // The gateway's clock stands still: breakers stay open for the whole test.
    let g = TestGateway::start_manual().await;
    g.settings(json!({"transient_retry_delay_ms": 0, "breaker": {"claude": {"failure_threshold": 1}}})).await;
    g.add("a", "anthropic", &a.url(), json!({})).await;
    g.add("b", "anthropic", &b.url(), json!({})).await;
    g.add("c", "responses", &c.url(), json!({"models": ["gpt-c"]})).await;
    (g, a, b, c)
}

// ===================================================================== /metrics

#[tokio::test]
async fn metrics_parse_as_prometheus_text_after_real_traffic() {
    let (g, a, b, _c) = three_endpoints().await;
    // A first scrape: every family is declared even before anything happened, and the scrape
    // refreshes the label vocabulary (endpoint and model names of the configuration).
    let families = parse_with_prometheus_client(&scrape(&g).await);
    assert_eq!(families["ccmesh_breaker_state"].series("ccmesh_breaker_state").len(), 3);

    real_traffic(&g, &a, &b).await;

    // Request-level families from records handed over as the request path hands them, on
    // endpoint c and protocol responses, which the real traffic does not touch (so this test
    // holds whether or not the request path is instrumented yet).
    let mut ok = synthetic("s1", "responses", "c", 200);
    ok.tokens = Tokens { input: Some(100), output: Some(20), cache_read: Some(50), cache_write: None };
    ok.cost_usd = Some(0.5);
    g.gw.events.request_completed(ok);
    let mut failed_over = synthetic("s2", "responses", "c", 200);
    failed_over.attempts.insert(0, attempt("b", Classification::Failure, Some(500)));
    failed_over.failed_over = true;
    failed_over.first_byte_ms = None;
    failed_over.total_ms = 45_000.0;
    g.gw.events.request_completed(failed_over);
    let mut invented = synthetic("s3", "responses", "c", 502);
    invented.attempts = vec![attempt("c", Classification::Failure, Some(502))];
    invented.model_sent = Some("a-client-invented-model".into());
    invented.tokens.output = Some(7);
    g.gw.events.request_completed(invented);

    let text = scrape(&g).await;
    let families = parse_with_prometheus_client(&text);

    // Every family, with its type (the parser drops a counter's `_total` from the family name).
    let expected = [
        ("ccmesh_requests", "counter"),
        ("ccmesh_upstream_attempts", "counter"),
        ("ccmesh_failovers", "counter"),
        ("ccmesh_breaker_state", "gauge"),
        ("ccmesh_breaker_transitions", "counter"),
        ("ccmesh_request_duration_seconds", "histogram"),
        ("ccmesh_first_byte_seconds", "histogram"),
        ("ccmesh_gateway_overhead_seconds", "histogram"),
        ("ccmesh_tokens", "counter"),
        ("ccmesh_cost_usd", "counter"),
        ("ccmesh_unpriced_requests", "counter"),
        ("ccmesh_records_dropped", "counter"),
        ("ccmesh_connections_open", "gauge"),
        ("ccmesh_connections_past_cap", "counter"),
    ];
    let names: Vec<&str> = families.keys().map(String::as_str).collect();
    let mut expected_names: Vec<&str> = expected.iter().map(|(n, _)| *n).collect();
    expected_names.sort();
    assert_eq!(names, expected_names);
    for (name, kind) in expected {
        assert_eq!(families[name].kind, kind, "{name}");
        assert!(!families[name].help.is_empty(), "{name} has HELP");
    }

    // Breakers, from the real traffic: both a and b open, c closed; one trip each.
    let state = &families["ccmesh_breaker_state"];
    for (endpoint, value) in [("a", 2.0), ("b", 2.0), ("c", 0.0)] {
        assert_eq!(state.get("ccmesh_breaker_state", &[("endpoint", endpoint)]), Some(value), "{endpoint}");
    }
    let transitions = &families["ccmesh_breaker_transitions"];
    for endpoint in ["a", "b"] {
        let labels = [("endpoint", endpoint), ("to", "open"), ("reason", "consecutive_failures")];
        assert_eq!(transitions.get("ccmesh_breaker_transitions_total", &labels), Some(1.0), "{endpoint}");
    }
    assert_eq!(transitions.series("ccmesh_breaker_transitions_total").len(), 2);

    // The scrape's own connection is open; none came past the cap.
    let open = families["ccmesh_connections_open"].get("ccmesh_connections_open", &[]);
    assert!(open >= Some(1.0), "{open:?}");
    let past_cap = &families["ccmesh_connections_past_cap"];
    assert_eq!(past_cap.get("ccmesh_connections_past_cap_total", &[]), Some(0.0));

    // Requests, attempts, failovers (endpoint c).
    let requests = &families["ccmesh_requests"];
    let req = |class| {
        requests.get("ccmesh_requests_total", &[("protocol", "responses"), ("endpoint", "c"), ("status_class", class)])
    };
    assert_eq!((req("2xx"), req("5xx")), (Some(2.0), Some(1.0)));
    let attempts = &families["ccmesh_upstream_attempts"];
    let att = |outcome| attempts.get("ccmesh_upstream_attempts_total", &[("endpoint", "c"), ("outcome", outcome)]);
    assert_eq!((att("success"), att("failure")), (Some(2.0), Some(1.0)));
    let b_failed = attempts.get("ccmesh_upstream_attempts_total", &[("endpoint", "b"), ("outcome", "failure")]);
    assert!(b_failed >= Some(1.0), "the failed-over request's first attempt, on b");
    let moves = &families["ccmesh_failovers"];
    let moved = moves.get("ccmesh_failovers_total", &[("protocol", "responses"), ("from", "b"), ("to", "c")]);
    assert_eq!(moved, Some(1.0));

    // Histograms: cumulative buckets ending in +Inf = _count, and _sum.
    let duration = &families["ccmesh_request_duration_seconds"];
    let p = [("protocol", "responses")];
    assert_eq!(duration.get("ccmesh_request_duration_seconds_count", &p), Some(3.0));
    assert_eq!(duration.get("ccmesh_request_duration_seconds_sum", &p), Some(0.75 + 45.0 + 0.75));
    let bucket = |le| duration.get("ccmesh_request_duration_seconds_bucket", &[("protocol", "responses"), ("le", le)]);
    assert_eq!(
        (bucket("0.5"), bucket("1"), bucket("30"), bucket("60"), bucket("+Inf")),
        (Some(0.0), Some(2.0), Some(2.0), Some(3.0), Some(3.0))
    );
    let mut counts: Vec<(f64, f64)> = duration
        .series("ccmesh_request_duration_seconds_bucket")
        .into_iter()
        .filter(|(l, _)| l["protocol"] == "responses")
        .map(|(l, v)| (l["le"].parse::<f64>().unwrap(), v))
        .collect();
    counts.sort_by(|x, y| x.0.total_cmp(&y.0));
    assert!(counts.windows(2).all(|w| w[0].1 <= w[1].1), "cumulative: {counts:?}");
    let first_byte = &families["ccmesh_first_byte_seconds"];
    assert_eq!(first_byte.get("ccmesh_first_byte_seconds_count", &p), Some(2.0), "only requests that sent a byte");
    let overhead = &families["ccmesh_gateway_overhead_seconds"];
    assert_eq!(overhead.get("ccmesh_gateway_overhead_seconds_count", &p), Some(3.0));
    assert_eq!(
        overhead.get("ccmesh_gateway_overhead_seconds_bucket", &[("protocol", "responses"), ("le", "0.00025")]),
        Some(3.0),
        "0.25 ms is in the 250 µs bucket"
    );

    // Tokens, by configured model; the client's invention is `other`. Cost and unpriced usage.
    let tokens = &families["ccmesh_tokens"];
    let tok = |model, kind| tokens.get("ccmesh_tokens_total", &[("endpoint", "c"), ("model", model), ("kind", kind)]);
    assert_eq!(
        (tok("gpt-c", "input"), tok("gpt-c", "output"), tok("gpt-c", "cache_read")),
        (Some(100.0), Some(20.0), Some(50.0))
    );
    assert_eq!(tok("gpt-c", "cache_write"), None, "unknown is not zero");
    assert_eq!(tok("other", "output"), Some(7.0));
    assert!(!text.contains("a-client-invented-model"));
    assert_eq!(families["ccmesh_cost_usd"].get("ccmesh_cost_usd_total", &[("endpoint", "c")]), Some(0.5));
    assert_eq!(
        families["ccmesh_unpriced_requests"].get("ccmesh_unpriced_requests_total", &[("endpoint", "c")]),
        Some(1.0)
    );

    // Read from the record writer at scrape time (which keeps up here: nothing dropped).
    let dropped = families["ccmesh_records_dropped"].get("ccmesh_records_dropped_total", &[]);
    assert_eq!(dropped, Some(g.gw.events.records().dropped() as f64));
}

/// Real requests end to end: this one depends on the request path's instrumentation
/// (`proxy/trail.rs` filling a `RequestRecord` and handing it to `events.request_completed`).
#[tokio::test]
async fn real_requests_are_counted_and_shown_live() {
    let (g, a, b, _c) = three_endpoints().await;
    let mut events = Events::open(&g).await;
    assert_eq!(events.next().await.unwrap().0, "hello");
    real_traffic(&g, &a, &b).await;

    // Live: one `request` event per client request, in order, among the breaker events.
    let mut requests = Vec::new();
    while requests.len() < 3 {
        let (kind, data) = events.next().await.expect("stream open");
        if kind == "request" {
            requests.push(data);
        }
    }
    let summary: Vec<(Value, Value, Value, Value)> = requests
        .iter()
        .map(|r| (r["endpoint"].clone(), r["status"].clone(), r["failed_over"].clone(), r["attempts"].clone()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (json!("a"), json!(200), json!(false), json!(1)),
            (json!("b"), json!(200), json!(true), json!(2)),
            (json!("b"), json!(429), json!(false), json!(1)),
        ]
    );
    assert!(requests.iter().all(|r| r["protocol"] == "claude" && r["model"] == "m"));

    // Metrics.
    let families = parse_with_prometheus_client(&scrape(&g).await);
    let requests = &families["ccmesh_requests"];
    let req = |endpoint, class| {
        requests
            .get("ccmesh_requests_total", &[("protocol", "claude"), ("endpoint", endpoint), ("status_class", class)])
    };
    assert_eq!((req("a", "2xx"), req("b", "2xx"), req("b", "4xx")), (Some(1.0), Some(1.0), Some(1.0)));
    let attempts = &families["ccmesh_upstream_attempts"];
    let att = |endpoint, outcome| {
        attempts.get("ccmesh_upstream_attempts_total", &[("endpoint", endpoint), ("outcome", outcome)])
    };
    assert_eq!(
        (att("a", "success"), att("a", "failure"), att("b", "success"), att("b", "rate_limited")),
        (Some(1.0), Some(1.0), Some(1.0), Some(1.0))
    );
    let moves = &families["ccmesh_failovers"];
    assert_eq!(moves.get("ccmesh_failovers_total", &[("protocol", "claude"), ("from", "a"), ("to", "b")]), Some(1.0));
    assert_eq!(moves.series("ccmesh_failovers_total").len(), 1);
    let duration = &families["ccmesh_request_duration_seconds"];
    assert_eq!(duration.get("ccmesh_request_duration_seconds_count", &[("protocol", "claude")]), Some(3.0));
    let overhead = &families["ccmesh_gateway_overhead_seconds"];
    assert_eq!(overhead.get("ccmesh_gateway_overhead_seconds_count", &[("protocol", "claude")]), Some(3.0));
}

#[tokio::test]
async fn the_admin_token_guards_metrics_and_events() {
    let token = "metrics-admin-token-0123456789";
    let g = TestGateway::start_with(Options { admin_token: Some(token.into()), ..Options::default() }).await;
    let bare = reqwest::Client::builder().no_proxy().build().unwrap();
    for path in ["/metrics", "/api/events"] {
        let r = bare.get(format!("{}{path}", g.url)).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path} without a token");
        let r = bare.get(format!("{}{path}", g.url)).bearer_auth("wrong-token").send().await.unwrap();
        assert_eq!(r.status(), 401, "{path} with a wrong token");
    }
    // `g.http` sends the token.
    assert!(scrape(&g).await.contains("# TYPE ccmesh_requests_total counter"));
    let mut events = Events::open(&g).await;
    assert_eq!(events.next().await.unwrap().0, "hello");
}

#[tokio::test]
async fn metrics_are_open_without_an_admin_token() {
    let g = TestGateway::start().await;
    let bare = reqwest::Client::builder().no_proxy().build().unwrap();
    let r = bare.get(format!("{}/metrics", g.url)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("\nccmesh_records_dropped_total 0\n"));
}

// ===================================================================== /api/events

#[tokio::test]
async fn live_events_show_config_changes_breaker_transitions_and_requests() {
    let a = MockUpstream::start().await;
    let g = TestGateway::start_manual().await;
    let mut events = Events::open(&g).await;
    let (kind, hello) = events.next().await.unwrap();
    assert_eq!((kind.as_str(), hello), ("hello", json!({"endpoints": []})));

    g.settings(
        json!({"transient_retry_delay_ms": 0, "breaker": {"openai": {"failure_threshold": 1, "timeout_secs": 7}}}),
    )
    .await;
    assert_eq!(events.expect("config").await, json!({"what": "settings"}));
    g.add("a", "openai", &a.url(), json!({})).await;
    assert_eq!(events.expect("config").await, json!({"what": "endpoint_created"}));

    // A 500 trips a's breaker (threshold 1).
    a.push(Reply::openai_error(500, "server_error", "boom"));
    let r =
        g.post("/v1/chat/completions", &json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})).await;
    assert_eq!(r.status(), 500);
    assert_eq!(
        events.expect("breaker").await,
        json!({
            "endpoint": "a",
            "to": "open",
            "reason": "broken",
            "cause": "consecutive_failures",
            "cooldown_ms": 7000,
            "transition": "closed→open/broken (consecutive_failures)",
        })
    );

    // A subscriber arriving now is greeted with the current health.
    let mut late = Events::open(&g).await;
    let (kind, hello) = late.next().await.unwrap();
    assert_eq!(kind, "hello");
    assert_eq!(
        (hello["endpoints"][0]["name"].clone(), hello["endpoints"][0]["circuit"].clone()),
        (json!("a"), json!("open"))
    );

    // An operator's reset.
    let (status, _) = g.api(reqwest::Method::POST, "/api/endpoints/a/reset", None).await;
    assert_eq!(status, 200);
    for sub in [&mut events, &mut late] {
        let reset = sub.expect("breaker").await;
        assert_eq!((reset["to"].clone(), reset["cause"].clone()), (json!("closed"), json!("manual_reset")));
    }

    // A finished request, handed over as the request path does.
    let mut record = synthetic("req-live-1", "openai", "a", 200);
    record.tokens.output = Some(3);
    record.cost_usd = Some(0.001);
    g.gw.events.request_completed(record);
    let summary = events.expect_request("req-live-1").await;
    assert_eq!(
        summary,
        json!({
            "id": "req-live-1",
            "started_at_ms": 1_700_000_000_000u64,
            "protocol": "openai",
            "model": "gpt-c",
            "endpoint": "a",
            "status": 200,
            "stream": false,
            "total_ms": 750.0,
            "attempts": 1,
            "failed_over": false,
            "tokens": {"input": null, "output": 3, "cache_read": null, "cache_write": null},
            "cost_usd": 0.001,
            "error": null,
            "client_key": null,
        })
    );
    assert_eq!(late.expect_request("req-live-1").await["id"], "req-live-1");
}

#[tokio::test]
async fn a_subscriber_that_stops_reading_is_dropped_and_never_slows_the_gateway() {
    let a = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("a", "openai", &a.url(), json!({})).await;
    let mut slow = Events::open(&g).await;
    assert_eq!(slow.next().await.unwrap().0, "hello");

    // `slow` now reads nothing while far more events than the bus keeps are published: 5 times
    // its capacity, 40 MB in all, more than the connection's socket buffers can hold, so the
    // serving thread (which runs concurrently with this loop) cannot keep up by writing them
    // into the socket. The loop has no `.await`: it ending at all shows that publishing never
    // waits for a subscriber.
    let n = 5 * CAPACITY;
    let padding = "x".repeat(8 * 1024);
    for i in 0..n {
        g.gw.events
            .live()
            .publish(LiveEvent { kind: "config", data: json!({"what": "flood", "i": i, "pad": padding}) });
    }

    // The gateway carries on: an admin write and a proxied request complete.
    g.settings(json!({"transient_retry_delay_ms": 0})).await;
    a.push(Reply::openai_chat("still serving"));
    let r =
        g.post("/v1/chat/completions", &json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})).await;
    assert_eq!(r.status(), 200);

    // A fresh subscriber works.
    let mut fresh = Events::open(&g).await;
    assert_eq!(fresh.next().await.unwrap().0, "hello");
    g.gw.events.live().publish(LiveEvent { kind: "config", data: json!({"what": "after"}) });
    assert_eq!(fresh.expect("config").await, json!({"what": "after"}));

    // The slow one, when it finally reads, gets what fitted in the socket, then is told it
    // lagged, and its stream has ended. (The exact count is checked in observe::live's tests;
    // here the serving thread may have written part of the flood before the bus overflowed.)
    let mut delivered = 0;
    let (kind, lagged) = loop {
        let (kind, data) = slow.next().await.unwrap();
        if kind != "config" {
            break (kind, data);
        }
        assert_eq!(data["i"], delivered, "events arrive in order, none skipped before the lag");
        delivered += 1;
    };
    assert_eq!(kind, "lagged");
    let missed = lagged["missed"].as_u64().unwrap();
    assert!(missed > 0 && missed as usize <= n - CAPACITY, "missed {missed} of {n}");
    assert_eq!(slow.next().await, None, "the stream ends after `lagged`");
}
