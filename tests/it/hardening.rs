//! Hostile and careless use, in process: slow and idle clients, the connection cap, huge upstream
//! answers, keys in error bodies, foreign `Host` headers, open redirects, loops, dot segments,
//! the total deadline, malformed HTTP and broken storage. Each test fails if its hole reopens.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::gateway::{Options, TestGateway, chat_body, claude_body};
use crate::support::mock::{MockUpstream, Reply, StreamEnd, anthropic_stream_events};

/// Generous bound for "the gateway closed the connection": the timers under test are well below.
const CLOSE_WITHIN: Duration = Duration::from_secs(8);

fn addr(g: &TestGateway) -> String {
    g.url.trim_start_matches("http://").to_string()
}

/// Read until the peer closes; `None` if it is still open after `CLOSE_WITHIN`.
async fn read_until_closed(tcp: &mut TcpStream) -> Option<Vec<u8>> {
    let mut all = Vec::new();
    let read = tokio::time::timeout(CLOSE_WITHIN, async {
        let mut buf = [0u8; 4096];
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => all.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    read.ok().map(|()| all)
}

/// Send raw bytes as a request; the whole answer once the gateway closes the connection.
async fn raw(g: &TestGateway, request: &[u8]) -> String {
    let mut tcp = TcpStream::connect(addr(g)).await.unwrap();
    tcp.write_all(request).await.unwrap();
    let answer = read_until_closed(&mut tcp).await.expect("the gateway closes the connection");
    String::from_utf8_lossy(&answer).into_owned()
}

fn status_of(answer: &str) -> u16 {
    answer.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

fn body_of(answer: &str) -> Value {
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {answer:?}"))
}

async fn timers(g: &TestGateway, header: f64, body: f64, keepalive: f64) {
    g.settings(json!({"limits": {"header_read_timeout_secs": header, "body_read_timeout_secs": body, "keepalive_timeout_secs": keepalive}}))
        .await;
}

#[tokio::test]
async fn a_client_that_connects_and_sends_nothing_is_closed_by_the_header_timer() {
    let g = TestGateway::start().await;
    timers(&g, 0.3, 30.0, 60.0).await;
    let mut tcp = TcpStream::connect(addr(&g)).await.unwrap();
    let answer = read_until_closed(&mut tcp).await.expect("closed, not held open");
    assert!(answer.is_empty(), "nothing to answer: {answer:?}");
}

#[tokio::test]
async fn headers_trickling_in_are_cut_off_by_the_header_timer() {
    let g = TestGateway::start().await;
    timers(&g, 0.5, 30.0, 60.0).await;
    let mut tcp = TcpStream::connect(addr(&g)).await.unwrap();
    let request =
        b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let mut sent = 0;
    let closed = tokio::time::timeout(CLOSE_WITHIN, async {
        for byte in request {
            // One byte every 100 ms: the whole head would take ~9 s.
            tokio::time::sleep(Duration::from_millis(100)).await;
            if tcp.write_all(&[*byte]).await.is_err() {
                return true;
            }
            sent += 1;
        }
        let mut buf = [0u8; 64];
        matches!(tcp.read(&mut buf).await, Ok(0) | Err(_))
    })
    .await;
    assert_eq!(closed, Ok(true), "the connection was closed");
    assert!(sent < request.len(), "cut off before the head was complete ({sent} of {} bytes)", request.len());
}

#[tokio::test]
async fn a_body_that_pauses_too_long_gets_408_in_the_protocols_shape() {
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &up.url(), json!({})).await;
    timers(&g, 10.0, 0.3, 60.0).await;
    let mut tcp = TcpStream::connect(addr(&g)).await.unwrap();
    tcp.write_all(b"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\":").await.unwrap();
    let answer = String::from_utf8_lossy(&read_until_closed(&mut tcp).await.expect("answered and closed")).into_owned();
    assert_eq!(status_of(&answer), 408, "{answer}");
    let body = body_of(&answer);
    assert_eq!(body["type"], "error");
    assert!(body["error"]["message"].as_str().unwrap().contains("limits.body_read_timeout_secs"), "{body}");
    assert_eq!(up.request_count(), 0);
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed_by_the_keepalive_timer_not_before() {
    let g = TestGateway::start().await;
    // The header timer is long: only the keep-alive timer can close this connection in time.
    timers(&g, 60.0, 30.0, 0.5).await;
    let mut tcp = TcpStream::connect(addr(&g)).await.unwrap();
    for _ in 0..2 {
        tcp.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = tcp.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"), "kept alive between requests");
    }
    let rest = read_until_closed(&mut tcp).await.expect("closed once idle past the keep-alive timeout");
    assert!(rest.is_empty());
}

#[tokio::test]
async fn past_the_connection_cap_only_health_and_status_are_served() {
    let g = TestGateway::start().await;
    g.settings(json!({"limits": {"max_connections": 3}})).await;
    let count = g.gw.open_connections.clone();
    let open_now = || count.load(std::sync::atomic::Ordering::SeqCst);
    // The test client's own kept-alive connection counts too.
    let before = open_now();
    // Connections that are open and idle fill the cap (it counts connections, not requests).
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(TcpStream::connect(addr(&g)).await.unwrap());
    }
    tokio::time::timeout(CLOSE_WITHIN, async {
        while open_now() < before + 3 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the gateway counts the held connections");
    let health = raw(&g, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").await;
    assert_eq!(status_of(&health), 200, "{health}");
    let api = raw(&g, b"GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").await;
    assert_eq!(status_of(&api), 200, "{api}");
    assert!(body_of(&api)["connections"].as_u64().unwrap() > 3, "{api}");
    // Counted past the cap: the held connections beyond it (`before` of them: the cap is 3),
    // the health check's and this one's.
    let past_cap = (before + 2) as u64;
    assert_eq!(body_of(&api)["connections_past_cap"], past_cap, "{api}");
    let other = raw(&g, b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await;
    assert_eq!(status_of(&other), 503, "{other}");
    assert!(other.to_ascii_lowercase().contains("retry-after: 1"), "{other}");
    assert!(body_of(&other)["error"]["message"].as_str().unwrap().contains("limits.max_connections"));
    drop(held);
    tokio::time::timeout(CLOSE_WITHIN, async {
        while open_now() > before {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("closed connections leave the count");
    let again = raw(&g, b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").await;
    assert_eq!(status_of(&again), 200, "served again once connections are freed: {again}");
    let metrics = raw(&g, b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").await;
    assert!(metrics.contains(&format!("\nccmesh_connections_past_cap_total {}\n", past_cap + 1)), "{metrics}");
    assert!(metrics.contains("\nccmesh_connections_open "), "{metrics}");
}

// ------------------------------------------------------------------------------ memory bounds

async fn limited(up: &MockUpstream) -> TestGateway {
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &up.url(), json!({})).await;
    g.settings(json!({"limits": {"max_upstream_body_bytes": 1048576, "max_sse_event_bytes": 1048576}})).await;
    g
}

const TWO_GIB: u64 = 2 * 1024 * 1024 * 1024;

fn huge(declared: bool, content_type: &str) -> Reply {
    Reply::Generated {
        status: 200,
        headers: vec![("content-type".into(), content_type.into())],
        chunk: bytes::Bytes::from(vec![b'x'; 64 * 1024]),
        total: TWO_GIB,
        declared,
    }
}

#[tokio::test]
async fn a_huge_upstream_body_is_refused_without_being_read() {
    for declared in [true, false] {
        let up = MockUpstream::start().await;
        up.set_default(huge(declared, "application/json"));
        let g = limited(&up).await;
        let r = g.post("/v1/messages", &claude_body("claude-x", false)).await;
        assert_eq!(r.status(), 502, "declared={declared}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["type"], "api_error");
        assert!(body["error"]["message"].as_str().unwrap().contains("limits.max_upstream_body_bytes"), "{body}");
        // What left the mock is bounded by the limit plus socket buffers, not by the body.
        let sent = up.generated_bytes();
        assert!(sent < 64 * 1024 * 1024, "declared={declared}: the mock produced {sent} bytes");
        assert_eq!(g.health("a").await["consecutive_failures"], 1, "a failure of that endpoint");
        assert_eq!(up.request_count(), 1, "an answer that cannot be used is not asked for again");
    }
}

#[tokio::test]
async fn an_sse_line_that_never_ends_fails_the_stream_without_filling_memory() {
    let up = MockUpstream::start().await;
    up.set_default(huge(false, "text/event-stream"));
    let g = limited(&up).await;
    let r = g.post("/v1/messages", &claude_body("claude-x", true)).await;
    // The held preamble gives up at 64 KiB and commits; the stream then ends with the error.
    assert_eq!(r.status(), 200);
    let text = tokio::time::timeout(CLOSE_WITHIN, r.text()).await.expect("the stream ends").unwrap();
    assert!(
        text.contains("event: error") && text.contains("limits.max_sse_event_bytes"),
        "{}",
        &text[text.len().saturating_sub(500)..]
    );
    assert!(text.len() < 2 * 1024 * 1024, "{} bytes relayed", text.len());
    assert!(up.generated_bytes() < 64 * 1024 * 1024, "{} bytes", up.generated_bytes());
    assert_eq!(g.health("a").await["consecutive_failures"], 1);
}

#[tokio::test]
async fn an_oversized_event_after_content_ends_the_stream_with_an_error_event() {
    let up = MockUpstream::start().await;
    let mut events = anthropic_stream_events(&["Hello"]);
    events.truncate(4);
    events.push(format!("event: content_block_delta\ndata: {}\n\n", "y".repeat(2 * 1024 * 1024)));
    up.set_default(Reply::sse(events));
    let g = limited(&up).await;
    let r = g.post("/v1/messages", &claude_body("claude-x", true)).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(text.contains("Hello"), "what came before is relayed");
    assert!(
        text.contains("event: error") && text.contains("limits.max_sse_event_bytes"),
        "{}",
        &text[..text.len().min(2000)]
    );
    assert!(text.len() < 1024 * 1024, "the oversized event is not relayed");
    let records = records(&g).await;
    assert_eq!(records[0]["attempts"][0]["classification"], "failure", "{}", records[0]);
}

async fn records(g: &TestGateway) -> Vec<Value> {
    g.flush_records().await;
    let (status, list) = g.api(reqwest::Method::GET, "/api/requests?limit=50", None).await;
    assert_eq!(status, 200);
    let ids: Vec<String> =
        list["requests"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap().to_string()).collect();
    let mut out = Vec::new();
    for id in ids {
        let (_, r) = g.api(reqwest::Method::GET, &format!("/api/requests/{id}"), None).await;
        out.push(r);
    }
    out
}

#[tokio::test]
async fn a_huge_model_name_is_capped_in_the_record() {
    let up = MockUpstream::start().await;
    up.set_default(Reply::anthropic_message("hi"));
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &up.url(), json!({})).await;
    let db = g._dir.path().join("ccmesh.db");
    let model = "m".repeat(5 * 1024 * 1024);
    let before = std::fs::metadata(&db).unwrap().len();
    let r = g.post("/v1/messages", &claude_body(&model, false)).await;
    assert_eq!(r.status(), 200);
    let records = records(&g).await;
    let kept = records[0]["model_requested"].as_str().unwrap();
    assert!(kept.len() <= 256, "{} bytes kept", kept.len());
    let wal = g._dir.path().join("ccmesh.db-wal");
    let after = std::fs::metadata(&db).unwrap().len() + std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    assert!(after < before + 1024 * 1024, "the database grew by {} bytes", after - before);
}

// --------------------------------------------------------------------------------- redaction

/// Keys of every shape a provider hands out; none may come back in any output.
const KEYS: [&str; 4] = ["sk-ant-api03-Zx9QwErTyUiOp", "dGhpcyBpcyBhIGJhc2U2NCBrZXk9PQ==", "a1b2c3d4e5f6", "k8secret"];

#[tokio::test]
async fn no_key_comes_back_in_bodies_records_health_tests_or_events() {
    let g = TestGateway::start().await;
    let mut ups = Vec::new();
    for (i, key) in KEYS.iter().enumerate() {
        // Every upstream echoes the key it was given in its errors (as real ones do on a 401).
        let up = MockUpstream::start().await;
        up.set_default(Reply::anthropic_error(500, "api_error", &format!("invalid x-api-key {key}")));
        g.add(&format!("e{i}"), "anthropic", &up.url(), json!({"api_key": key, "test_model": "claude-x"})).await;
        ups.push(up);
    }
    let up = &ups[0];
    let mut events = g.http.get(format!("{}/api/events", g.url)).send().await.unwrap();
    let r = g.post("/v1/messages", &claude_body("claude-x", false)).await;
    assert_eq!(r.status(), 500);
    let relayed = r.text().await.unwrap();
    // A 401 is returned as it is (no failover): the client gets it, masked.
    up.push(Reply::anthropic_error(401, "authentication_error", &format!("invalid x-api-key {}", KEYS[0])));
    let r = g.post_with("/v1/messages", &claude_body("claude-x", false), &[("x-ccmesh-endpoint", "e0")]).await;
    assert_eq!(r.status(), 401);
    let relayed_401 = r.text().await.unwrap();
    // Connectivity tests store the upstream's words.
    for (i, key) in KEYS.iter().enumerate() {
        ups[i].push(Reply::anthropic_error(401, "authentication_error", &format!("bad key {key}")));
        let (status, _) = g.api(reqwest::Method::POST, &format!("/api/endpoints/e{i}/test"), None).await;
        assert_eq!(status, 200);
    }
    let mut outputs = vec![relayed, relayed_401];
    for path in ["/api/endpoints", "/api/health", "/api/requests", "/metrics", "/api/stats"] {
        outputs.push(g.api(reqwest::Method::GET, path, None).await.1.to_string());
    }
    for record in records(&g).await {
        outputs.push(record.to_string());
    }
    let mut live = String::new();
    while !live.contains("event: request") {
        let chunk = tokio::time::timeout(CLOSE_WITHIN, events.chunk()).await.unwrap().unwrap().unwrap();
        live.push_str(&String::from_utf8_lossy(&chunk));
    }
    outputs.push(live);
    let all = outputs.join("\n");
    for key in KEYS {
        assert!(!all.contains(key), "{key} leaked");
    }
    assert!(all.contains("sk-…uiOp") || all.contains("sk-…UiOp"), "keys are shown masked");
    assert!(all.contains("invalid x-api-key"), "the rest of the message survives");
}

// ------------------------------------------------------------------------------ host checks

async fn with_host(g: &TestGateway, method: reqwest::Method, path: &str, host: &str, body: Option<Value>) -> u16 {
    let mut req = g
        .http
        .request(method, format!("{}{path}", g.url))
        .header("host", host)
        .header("origin", format!("http://{host}"));
    if let Some(b) = body {
        req = req.json(&b);
    }
    req.send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn a_rebinding_page_cannot_drive_a_tokenless_gateway() {
    let up = MockUpstream::start().await;
    up.set_default(Reply::anthropic_message("hi"));
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &up.url(), json!({})).await;
    let evil = "evil.example:3999";
    let endpoint =
        json!({"name": "steal", "format": "anthropic", "base_url": "http://127.0.0.1:9", "api_key": "k-0123456789"});
    assert_eq!(with_host(&g, reqwest::Method::POST, "/api/endpoints", evil, Some(endpoint.clone())).await, 403);
    assert_eq!(
        with_host(&g, reqwest::Method::PATCH, "/api/settings", evil, Some(json!({"retention_days": 2}))).await,
        403
    );
    assert_eq!(with_host(&g, reqwest::Method::GET, "/api/endpoints", evil, None).await, 403);
    assert_eq!(with_host(&g, reqwest::Method::GET, "/", evil, None).await, 403);
    assert_eq!(with_host(&g, reqwest::Method::GET, "/login", evil, None).await, 403);
    assert_eq!(g.api(reqwest::Method::GET, "/api/endpoints", None).await.1.as_array().unwrap().len(), 1);
    // Loopback names in every form pass.
    for host in ["127.0.0.1:3999", "localhost:3999", "[::1]:3999", "localhost"] {
        assert_eq!(with_host(&g, reqwest::Method::GET, "/api/endpoints", host, None).await, 200, "{host}");
    }
    // The proxy paths answer for any Host.
    let r = g
        .http
        .post(format!("{}/v1/messages", g.url))
        .header("host", evil)
        .json(&claude_body("claude-x", false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // A name the operator allows.
    g.settings(json!({"allowed_hosts": ["gw.internal"]})).await;
    assert_eq!(with_host(&g, reqwest::Method::GET, "/api/endpoints", "gw.internal:3999", None).await, 200);
    assert_eq!(with_host(&g, reqwest::Method::GET, "/", "gw.internal", None).await, 200);
    assert_eq!(with_host(&g, reqwest::Method::GET, "/api/endpoints", evil, None).await, 403);
}

#[tokio::test]
async fn with_a_token_the_bearer_works_from_any_host_and_a_cookie_only_from_loopback() {
    let token = "a-long-admin-token-for-host-tests-0123";
    let g = TestGateway::start_with(Options { admin_token: Some(token.into()), ..Options::default() }).await;
    assert_eq!(with_host(&g, reqwest::Method::GET, "/api/endpoints", "evil.example", None).await, 200);
    // Log in over loopback, then replay the cookie with a foreign Host.
    let plain = reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let r = plain
        .post(format!("{}/login", g.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[("token", token), ("next", "/")]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let cookie = r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let by_cookie = |host: &'static str| {
        let plain = plain.clone();
        let cookie = cookie.clone();
        let url = g.url.clone();
        async move {
            plain
                .get(format!("{url}/api/endpoints"))
                .header("cookie", cookie)
                .header("host", host)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(by_cookie("127.0.0.1").await, 200);
    assert_eq!(by_cookie("evil.example").await, 403);
    // The bearer scheme in any case (RFC 9110).
    let r = plain
        .get(format!("{}/api/endpoints", g.url))
        .header("authorization", format!("BEARER {token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

// ------------------------------------------------------------------------------------ login

fn form(pairs: &[(&str, &str)]) -> String {
    let mut out = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        out.append_pair(k, v);
    }
    out.finish()
}

#[tokio::test]
async fn login_redirects_stay_on_the_site_and_failures_are_limited() {
    let token = "another-long-admin-token-0123456789";
    let g = TestGateway::start_with(Options { admin_token: Some(token.into()), ..Options::default() }).await;
    let plain = reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    for next in ["/\t/evil.example", "//evil.example", "/\\evil.example", "/\u{1}x", "https://evil.example"] {
        let r = plain
            .post(format!("{}/login", g.url))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form(&[("token", token), ("next", next)]))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 303, "{next:?}");
        assert_eq!(r.headers()["location"], "/", "{next:?}");
    }
    let r = plain.get(format!("{}/login?next=/%01", g.url)).send().await.unwrap();
    assert_eq!(r.status(), 200, "not a 500");
    assert!(!r.text().await.unwrap().contains("%01"));
    let r = plain
        .post(format!("{}/login", g.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[("token", token), ("next", "/endpoints?x=1")]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["location"], "/endpoints?x=1", "a real path on the site is kept");

    for i in 0..5 {
        let r = plain
            .post(format!("{}/login", g.url))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form(&[("token", "wrong"), ("next", "/")]))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "failure {i}");
    }
    let r = plain
        .post(format!("{}/login", g.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[("token", token), ("next", "/")]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429, "even the right token waits after five failures");
    let wait: u64 = r.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
}

// ------------------------------------------------------------------------------------ loops

#[tokio::test]
async fn an_endpoint_pointing_at_the_gateway_is_refused_and_a_loop_is_cut_at_once() {
    let g = TestGateway::start().await;
    let port = g.url.rsplit(':').next().unwrap().to_string();
    for base in [g.url.clone(), format!("http://localhost:{port}"), format!("http://[::1]:{port}/v1")] {
        let body = json!({"name": "self", "format": "anthropic", "base_url": base, "api_key": "k-0123456789"});
        let (status, err) = g.api(reqwest::Method::POST, "/api/endpoints", Some(body)).await;
        assert_eq!(status, 400, "{base}: {err}");
        assert_eq!(err["error"]["field"], "base_url");
    }
    // Written behind the API's back (another name for this host, an old database): the hop
    // header stops the loop at its first return.
    let up = MockUpstream::start().await;
    up.set_default(Reply::anthropic_message("hi"));
    g.add("loop", "anthropic", &up.url(), json!({"models": ["claude-*"]})).await;
    let looping = g.gw.store.get_endpoint("loop").unwrap();
    let mut draft = looping.to_draft();
    draft.base_url = g.url.clone();
    g.gw.store.update_endpoint("loop", &draft).unwrap();
    g.gw.reload().unwrap();
    let r = g.post("/v1/messages", &claude_body("claude-x", false)).await;
    assert_eq!(r.status(), 508);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["type"], "error");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("endpoint loop points back at this gateway"), "{message}");
    assert_eq!(up.request_count(), 0);
    let records = records(&g).await;
    assert_eq!(records.len(), 2, "the request and its one return, no more");
}

#[tokio::test]
async fn upstream_requests_carry_the_hop_header_and_too_many_hops_are_refused() {
    let up = MockUpstream::start().await;
    up.set_default(Reply::openai_chat("hi"));
    let g = TestGateway::start().await;
    g.add("a", "openai", &up.url(), json!({})).await;
    let r = g.post_with("/v1/chat/completions", &chat_body("gpt-x", false), &[("x-ccmesh-hop", "peer1, peer2")]).await;
    assert_eq!(r.status(), 200);
    let hop = up.last_request().unwrap().header("x-ccmesh-hop").unwrap().to_string();
    assert_eq!(hop, format!("{}, peer1, peer2", g.gw.instance_id));
    let r = g.post_with("/v1/chat/completions", &chat_body("gpt-x", false), &[("x-ccmesh-hop", "a, b, c, d, e")]).await;
    assert_eq!(r.status(), 508);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "loop_detected");
    assert_eq!(up.request_count(), 1);
}

// ------------------------------------------------------------------------------ dot segments

#[tokio::test]
async fn paths_with_dot_segments_are_refused_before_any_upstream_sees_them() {
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("a", "openai", &up.url(), json!({})).await;
    for path in [
        "/v1/../../admin/keys",
        "/v1/%2e%2e/%2E%2E/admin",
        "/v1/embeddings/.%2e/x",
        "/v1/a/..%2fadmin",
        "/v1/./embeddings",
    ] {
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
        );
        let answer = raw(&g, request.as_bytes()).await;
        assert_eq!(status_of(&answer), 400, "{path}: {answer}");
        assert!(body_of(&answer)["error"]["message"].as_str().unwrap().contains("'..' segment"), "{path}");
    }
    assert_eq!(up.request_count(), 0);
}

// --------------------------------------------------------------------------- total deadline

#[tokio::test]
async fn the_total_deadline_bounds_a_request_across_attempts() {
    let up = MockUpstream::start().await;
    up.set_default(Reply::Stall);
    let g = TestGateway::start().await;
    for name in ["a", "b", "c", "d", "e"] {
        g.add(name, "openai", &up.url(), json!({})).await;
    }
    g.settings(json!({"timeouts": {"openai": {"request_timeout_secs": 0.5, "total_timeout_secs": 1.2}}})).await;
    let r = g.post("/v1/chat/completions", &chat_body("gpt-x", false)).await;
    assert_eq!(r.status(), 504);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "timeout");
    assert!(body["error"]["message"].as_str().unwrap().contains("total_timeout_secs"), "{body}");
    // Without the deadline the cap would allow 10 attempts.
    let attempts = up.request_count();
    assert!((2..=3).contains(&attempts), "{attempts} attempts");
    // The attempt the deadline cut short is neutral: at most the full attempts count.
    let failures: u64 = futures_util::future::join_all(["a", "b", "c", "d", "e"].map(|n| g.health(n)))
        .await
        .iter()
        .map(|h| h["consecutive_failures"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(failures as usize, attempts - 1, "the cut attempt did not count");
}

#[tokio::test]
async fn past_the_deadline_the_last_upstream_answer_is_returned() {
    let up = MockUpstream::start().await;
    up.push(Reply::openai_error(500, "server_error", "boom"));
    up.set_default(Reply::Stall);
    let g = TestGateway::start().await;
    g.add("a", "openai", &up.url(), json!({})).await;
    g.add("b", "openai", &up.url(), json!({})).await;
    g.settings(json!({"timeouts": {"openai": {"total_timeout_secs": 1}}})).await;
    let r = g.post("/v1/chat/completions", &chat_body("gpt-x", false)).await;
    assert_eq!(r.status(), 500);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["message"], "boom");
}

#[tokio::test]
async fn an_explicit_endpoint_that_stalls_costs_one_deadline_not_three_timeouts() {
    let up = MockUpstream::start().await;
    up.set_default(Reply::Stall);
    let g = TestGateway::start().await;
    g.add("slow", "openai", &up.url(), json!({})).await;
    g.settings(json!({"timeouts": {"openai": {"request_timeout_secs": 10, "total_timeout_secs": 1}}})).await;
    let r = g.post_with("/v1/chat/completions", &chat_body("gpt-x", false), &[("x-ccmesh-endpoint", "slow")]).await;
    assert_eq!(r.status(), 504);
    assert_eq!(up.request_count(), 1);
    assert_eq!(g.health("slow").await["consecutive_failures"], 0, "cut by the deadline: neutral");
}

#[tokio::test]
async fn a_stream_longer_than_max_stream_duration_ends_with_an_error_event() {
    let up = MockUpstream::start().await;
    // A stream that keeps going (no terminal event yet) past the cap.
    up.set_default(Reply::anthropic_stream(&["a"]).truncated(4).with_end(StreamEnd::stall()));
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &up.url(), json!({})).await;
    g.settings(json!({"timeouts": {"claude": {"max_stream_duration_secs": 1}}})).await;
    let r = g.post("/v1/messages", &claude_body("claude-x", true)).await;
    assert_eq!(r.status(), 200);
    let text = tokio::time::timeout(CLOSE_WITHIN, r.text()).await.expect("the cap ends the stream").unwrap();
    assert!(text.contains("event: error") && text.contains("max_stream_duration_secs"), "{text}");
}

// ------------------------------------------------------------------------ malformed HTTP

#[tokio::test]
async fn malformed_requests_get_a_json_answer_that_names_the_problem() {
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &up.url(), json!({})).await;
    let many_headers: String = (0..200).map(|i| format!("X-H{i}: v\r\n")).collect();
    let cases: Vec<(String, Vec<u8>, u16, &str)> = vec![
        ("bad chunk framing".into(), b"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\nzz\r\n{}\r\n0\r\n\r\n".to_vec(), 400, "framing"),
        ("too many headers".into(), format!("GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n{many_headers}\r\n").into_bytes(), 431, "headers"),
        ("a long URI".into(), format!("GET /v1/models?q={} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "a".repeat(20_000)).into_bytes(), 414, "URI"),
        ("NUL in a header".into(), b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Bad: a\0b\r\n\r\n".to_vec(), 400, "HTTP/1.1"),
        ("duplicate Content-Length".into(), b"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}".to_vec(), 400, "Content-Length"),
        ("negative Content-Length".into(), b"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -2\r\n\r\n{}".to_vec(), 400, "Content-Length"),
    ];
    for (what, request, status, mentions) in cases {
        let answer = raw(&g, &request).await;
        assert_eq!(status_of(&answer), status, "{what}: {answer}");
        let body = body_of(&answer);
        assert!(body["error"]["message"].as_str().unwrap().contains(mentions), "{what}: {body}");
    }
    assert_eq!(up.request_count(), 0);
    let records = records(&g).await;
    let framing = records.iter().find(|r| r["error"]["kind"] == "malformed_body").expect("recorded as what it was");
    assert_eq!(framing["status"], 400);
    assert!(records.iter().all(|r| r["error"]["kind"] != "request_too_large"));
}

#[tokio::test]
async fn a_client_that_aborts_mid_body_is_recorded_as_gone_not_as_too_large() {
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &up.url(), json!({})).await;
    let mut tcp = TcpStream::connect(addr(&g)).await.unwrap();
    tcp.write_all(b"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n{\"model\":")
        .await
        .unwrap();
    drop(tcp);
    let records = tokio::time::timeout(CLOSE_WITHIN, async {
        loop {
            let r = records(&g).await;
            if !r.is_empty() {
                return r;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .unwrap();
    assert_eq!(records[0]["status"], 499, "{}", records[0]);
    assert_eq!(records[0]["error"]["kind"], "client_closed");
}

/// Clients that send a whole request without a body and close at once. When the gateway reads
/// the request and the close together, the server drops the request's handler before it ever
/// runs (a few in a hundred, on loopback); such a request must still leave its record. A
/// handler that did run refuses the empty body (400); one that never ran records the client as
/// gone (499).
#[tokio::test]
async fn requests_sent_and_closed_at_once_are_all_recorded() {
    const SENT: usize = 300;
    const BATCH: usize = 50;
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &up.url(), json!({})).await;
    // Connected first, then each sent and closed in one go: the gateway's threads, busy with the
    // first few, come to most of the others when both the request and the close are there.
    for _ in 0..SENT / BATCH {
        let mut batch = Vec::new();
        for _ in 0..BATCH {
            batch.push(TcpStream::connect(addr(&g)).await.unwrap());
        }
        for mut tcp in batch {
            tcp.write_all(b"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n").await.unwrap();
        }
    }
    let count = || async {
        g.flush_records().await;
        let (_, stats) = g.api(reqwest::Method::GET, "/api/stats?since=1d", None).await;
        stats
    };
    // Records come as the gateway notices each close: look until all are there, or until they
    // can no longer be on their way.
    let deadline = std::time::Instant::now() + CLOSE_WITHIN;
    let stats = loop {
        let stats = count().await;
        if stats["totals"]["requests"].as_u64() >= Some(SENT as u64) || std::time::Instant::now() > deadline {
            break stats;
        }
        tokio::task::yield_now().await;
    };
    assert_eq!(stats["totals"]["requests"], SENT, "{stats}");
    let (_, gone) = g.api(reqwest::Method::GET, "/api/requests?status=499&limit=1", None).await;
    let gone = &gone["requests"][0];
    assert!(gone["error"].as_str().is_some_and(|e| e.contains("client closed")), "some handlers never ran: {gone}");
    assert_eq!(gone["protocol"], "claude", "{gone}");
    assert_eq!(up.request_count(), 0);
    up.set_default(Reply::anthropic_message("hi"));
    assert_eq!(g.post("/v1/messages", &claude_body("claude-x", false)).await.status(), 200, "still serving");
}

#[tokio::test]
async fn two_different_endpoint_selectors_in_the_query_are_refused() {
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("a", "openai", &up.url(), json!({})).await;
    g.add("b", "openai", &up.url(), json!({})).await;
    let r = g.post("/v1/chat/completions?endpoint=a&endpoint=b", &chat_body("gpt-x", false)).await;
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["param"], "endpoint");
    assert_eq!(up.request_count(), 0);
    up.set_default(Reply::openai_chat("hi"));
    let r = g.post("/v1/chat/completions?endpoint=b&endpoint=b", &chat_body("gpt-x", false)).await;
    assert_eq!(r.status(), 200, "the same name twice agrees");
    assert_eq!(r.headers()["x-ccmesh-endpoint"], "b");
}

// -------------------------------------------------------------------------------- storage

#[tokio::test]
async fn broken_storage_shows_in_health_while_the_proxy_keeps_serving() {
    let up = MockUpstream::start().await;
    up.set_default(Reply::openai_chat("hi"));
    let g = TestGateway::start().await;
    g.add("a", "openai", &up.url(), json!({})).await;
    let health =
        || async { g.http.get(format!("{}/health", g.url)).send().await.unwrap().json::<Value>().await.unwrap() };
    assert_eq!(health().await, json!({"status": "ok"}));
    // The disk refuses writes to the records table (as a full disk would).
    let db = rusqlite::Connection::open(g._dir.path().join("ccmesh.db")).unwrap();
    db.execute_batch("CREATE TRIGGER full BEFORE INSERT ON request_records BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END;").unwrap();
    let r = g.post("/v1/chat/completions", &chat_body("gpt-x", false)).await;
    assert_eq!(r.status(), 200, "the proxy serves");
    g.flush_records().await;
    let h = health().await;
    assert_eq!(h["status"], "ok");
    assert!(h["storage"].as_str().unwrap().starts_with("degraded: "), "{h}");
    let (_, status) = g.api(reqwest::Method::GET, "/api/status", None).await;
    assert!(status["storage"].as_str().unwrap().contains("disk is full"), "{status}");
    assert_eq!(status["cluster"], "off");
    db.execute_batch("DROP TRIGGER full").unwrap();
    let r = g.post("/v1/chat/completions", &chat_body("gpt-x", false)).await;
    assert_eq!(r.status(), 200);
    g.flush_records().await;
    assert_eq!(health().await, json!({"status": "ok"}), "recovered");
}
