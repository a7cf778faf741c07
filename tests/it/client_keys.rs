//! Client keys end to end (SPEC §12, §15.10): the admin API, the one gate on every proxy path
//! with each refusal in each protocol's native shape, limits under real concurrency, budgets
//! charged exactly what the records say, session affinity across a failover and back.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::gateway::{TestGateway, chat_body, claude_body, responses_body};
use crate::support::mock::{INPUT_TOKENS, MockUpstream, OUTPUT_TOKENS, Reply};

/// Make a key; returns its JSON and its secret.
pub async fn make_key(g: &TestGateway, body: Value) -> (Value, String) {
    let (status, v) = g.api(Method::POST, "/api/keys", Some(body)).await;
    assert_eq!(status, 201, "{v}");
    let secret = v["secret"].as_str().unwrap().to_string();
    (v, secret)
}

async fn send(
    g: &TestGateway,
    path: &str,
    body: &Value,
    key: Option<&str>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut req = g.http.post(format!("{}{path}", g.url)).json(body);
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let r = req.send().await.unwrap();
    let (status, headers) = (r.status().as_u16(), r.headers().clone());
    let text = r.text().await.unwrap();
    (status, headers, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// Wait until the writer has stored what was submitted.
async fn flush(g: &TestGateway) {
    let sink = g.gw.events.records().clone();
    assert!(tokio::task::spawn_blocking(move || sink.flush(Duration::from_secs(10))).await.unwrap());
}

#[tokio::test]
async fn keys_are_made_listed_edited_rotated_and_their_secret_is_shown_once() {
    let upstream = MockUpstream::start().await;
    upstream.set_default(Reply::anthropic_message("hi"));
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &upstream.url(), json!({})).await;
    let (created, secret) = make_key(
        &g,
        json!({"name": "alice", "description": "Alice's laptop", "models": ["claude-*"], "endpoints": ["a"],
               "limits": {"rpm": 60, "usd_per_day": 5}}),
    )
    .await;
    assert!(secret.starts_with("ccm-") && secret.len() == 47, "{secret}");
    assert_eq!(created["prefix"].as_str().unwrap(), format!("{}…", &secret[..12]));
    assert_eq!(created["usage"]["rpm"], json!({"used": 0, "limit": 60, "remaining": 60}));
    assert_eq!(created["usage"]["usd_per_day"]["remaining"], 5.0);

    let (status, list) = g.api(Method::GET, "/api/keys", None).await;
    assert_eq!(status, 200);
    let text = list.to_string();
    assert!(!text.contains(&secret) && !text.contains(&secret[12..]), "no secret in the list: {text}");
    assert_eq!(list[0]["name"], "alice");
    assert!(list[0].get("secret").is_none());

    // The key works; a PATCH changes what it may do; its name cannot change.
    assert_eq!(send(&g, "/v1/messages", &claude_body("claude-sonnet-4-5", false), Some(&secret)).await.0, 200);
    let (status, v) = g.api(Method::PATCH, "/api/keys/alice", Some(json!({"limits": {"rpm": null}}))).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["limits"]["rpm"], Value::Null);
    assert_eq!(v["usage"]["rpm"]["used"], 1, "the request counted");
    let (status, v) = g.api(Method::PATCH, "/api/keys/alice", Some(json!({"name": "bob"}))).await;
    assert_eq!((status, v["error"]["field"].as_str()), (400, Some("name")));
    let (status, v) = g.api(Method::PATCH, "/api/keys/alice", Some(json!({"endpoints": ["nope"]}))).await;
    assert_eq!(status, 400);
    assert!(v["error"]["message"].as_str().unwrap().contains("no endpoint named 'nope'"), "{v}");
    let (status, _) = g.api(Method::POST, "/api/keys", Some(json!({"name": "ALICE"}))).await;
    assert_eq!(status, 400, "names are unique whatever their case");

    // Rotation: a new secret once, the old one stops at once, the spend stays.
    let (status, rotated) = g.api(Method::POST, "/api/keys/alice/rotate", None).await;
    assert_eq!(status, 200);
    let new_secret = rotated["secret"].as_str().unwrap().to_string();
    assert_ne!(new_secret, secret);
    assert_eq!(send(&g, "/v1/messages", &claude_body("claude-sonnet-4-5", false), Some(&secret)).await.0, 401);
    assert_eq!(send(&g, "/v1/messages", &claude_body("claude-sonnet-4-5", false), Some(&new_secret)).await.0, 200);
    let (_, shown) = g.api(Method::GET, "/api/keys/alice", None).await;
    assert_eq!(shown["usage"]["rpm"]["used"], 2);
    assert!(shown.get("secret").is_none());

    let (status, _) = g.api(Method::DELETE, "/api/keys/alice", None).await;
    assert_eq!(status, 204);
    assert_eq!(g.api(Method::GET, "/api/keys/alice", None).await.0, 404);
    // The last key gone: the proxy is open again.
    assert_eq!(send(&g, "/v1/messages", &claude_body("claude-sonnet-4-5", false), None).await.0, 200);
}

/// The error type (Anthropic) or type and code (OpenAI) of a gateway error body.
fn shape(protocol: &str, v: &Value) -> (String, String) {
    let s = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or("").to_string();
    match protocol {
        "claude" => {
            assert_eq!(v["type"], "error", "{v}");
            (s("/error/type"), String::new())
        }
        _ => (s("/error/type"), s("/error/code")),
    }
}

#[tokio::test]
async fn every_refusal_speaks_each_protocols_native_shape_and_touches_no_breaker() {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    a.set_default(Reply::anthropic_message("from a"));
    b.set_default(Reply::openai_chat("from b"));
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &a.url(), json!({"models": ["claude-*"]})).await;
    g.add("b", "openai", &b.url(), json!({"models": ["gpt-*"]})).await;
    g.api(Method::PUT, "/api/prices/claude-x", Some(json!({"input": 1, "output": 1}))).await;
    let (_, ok) = make_key(&g, json!({"name": "ok"})).await;
    let (_, off) = make_key(&g, json!({"name": "off", "enabled": false})).await;
    let (_, old) = make_key(&g, json!({"name": "old", "expires_at": "2020-01-01T00:00:00Z"})).await;
    let (_, only_claude) =
        make_key(&g, json!({"name": "only-claude", "models": ["claude-*"], "endpoints": ["a"]})).await;
    let (_, budget) = make_key(&g, json!({"name": "budget", "limits": {"usd_per_day": 0}})).await;
    let (_, unpriced) = make_key(&g, json!({"name": "unpriced", "limits": {"usd_per_month": 10}})).await;
    let (_, slow) = make_key(&g, json!({"name": "slow", "limits": {"rpm": 1}})).await;
    let (_, b_only) = make_key(&g, json!({"name": "b-only", "endpoints": ["b"]})).await;

    struct Case<'a> {
        what: &'a str,
        key: Option<&'a str>,
        model: &'a str,
        headers: Vec<(&'a str, &'a str)>,
        status: u16,
        claude: &'a str,
        openai: (&'a str, &'a str),
        says: &'a str,
    }
    let cases = [
        Case {
            what: "missing",
            key: None,
            model: "claude-x",
            headers: vec![],
            status: 401,
            claude: "authentication_error",
            openai: ("invalid_request_error", "invalid_api_key"),
            says: "requires a client key",
        },
        Case {
            what: "unknown",
            key: Some("ccm-not-a-key"),
            model: "claude-x",
            headers: vec![],
            status: 401,
            claude: "authentication_error",
            openai: ("invalid_request_error", "invalid_api_key"),
            says: "not one this gateway knows",
        },
        Case {
            what: "disabled",
            key: Some(&off),
            model: "claude-x",
            headers: vec![],
            status: 401,
            claude: "authentication_error",
            openai: ("invalid_request_error", "invalid_api_key"),
            says: "client key 'off' is disabled",
        },
        Case {
            what: "expired",
            key: Some(&old),
            model: "claude-x",
            headers: vec![],
            status: 401,
            claude: "authentication_error",
            openai: ("invalid_request_error", "invalid_api_key"),
            says: "expired at 2020-01-01T00:00:00Z",
        },
        Case {
            what: "model",
            key: Some(&only_claude),
            model: "gpt-4o",
            headers: vec![],
            status: 403,
            claude: "permission_error",
            openai: ("invalid_request_error", "permission_denied"),
            says: "may not use model 'gpt-4o'; it may use: claude-*",
        },
        Case {
            what: "explicit endpoint",
            key: Some(&only_claude),
            model: "claude-x",
            headers: vec![("x-ccmesh-endpoint", "b")],
            status: 403,
            claude: "permission_error",
            openai: ("invalid_request_error", "permission_denied"),
            says: "may not use endpoint 'b'; it may use: a",
        },
        Case {
            what: "no allowed endpoint",
            key: Some(&b_only),
            model: "claude-x",
            headers: vec![],
            status: 403,
            claude: "permission_error",
            openai: ("invalid_request_error", "permission_denied"),
            says: "may use only the endpoints b",
        },
        Case {
            what: "unpriced",
            key: Some(&unpriced),
            model: "gpt-unpriced",
            headers: vec![],
            status: 403,
            claude: "permission_error",
            openai: ("invalid_request_error", "permission_denied"),
            says: "has no price",
        },
        Case {
            what: "budget",
            key: Some(&budget),
            model: "claude-x",
            headers: vec![],
            status: 429,
            claude: "rate_limit_error",
            openai: ("insufficient_quota", "insufficient_quota"),
            says: "usd_per_day",
        },
    ];
    for (protocol, path) in [
        ("claude", "/v1/messages"),
        ("openai", "/v1/chat/completions"),
        ("responses", "/v1/responses"),
        ("gemini", "/v1beta/models/{model}:generateContent"),
    ] {
        for c in &cases {
            let body = match protocol {
                "claude" => claude_body(c.model, false),
                "openai" => chat_body(c.model, false),
                "gemini" => json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
                _ => responses_body(c.model, false),
            };
            let path = path.replace("{model}", c.model);
            let mut req = g.http.post(format!("{}{path}", g.url)).json(&body);
            if let Some(k) = c.key {
                // Each protocol's own credential header.
                req = match protocol {
                    "claude" => req.header("x-api-key", k),
                    "gemini" => req.header("x-goog-api-key", k),
                    _ => req.bearer_auth(k),
                };
            }
            for (h, v) in &c.headers {
                req = req.header(*h, *v);
            }
            let r = req.send().await.unwrap();
            let status = r.status().as_u16();
            let headers = r.headers().clone();
            let v: Value = r.json().await.unwrap();
            assert_eq!(status, c.status, "{protocol} {}: {v}", c.what);
            let (ty, code) = shape(protocol, &v);
            if protocol == "gemini" {
                let want = match c.status {
                    401 => "UNAUTHENTICATED",
                    403 => "PERMISSION_DENIED",
                    _ => "RESOURCE_EXHAUSTED",
                };
                assert_eq!(v["error"]["status"], want, "{protocol} {}: {v}", c.what);
                assert_eq!(v["error"]["code"], c.status, "{protocol} {}: {v}", c.what);
            } else if protocol == "claude" {
                assert_eq!(ty, c.claude, "{protocol} {}: {v}", c.what);
            } else {
                assert_eq!((ty.as_str(), code.as_str()), c.openai, "{protocol} {}: {v}", c.what);
            }
            let message = v.pointer("/error/message").and_then(Value::as_str).unwrap();
            assert!(message.contains(c.says), "{protocol} {}: {message}", c.what);
            if c.what == "budget" {
                assert_eq!(headers["x-should-retry"], "false");
                let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
                assert!(retry > 0 && retry <= 86_400, "{retry}");
                assert!(message.contains("the window resets at"), "{message}");
            }
        }
    }
    // A rate limit: Retry-After and the limit's name.
    assert_eq!(send(&g, "/v1/messages", &claude_body("claude-x", false), Some(&slow)).await.0, 200);
    let (status, headers, v) = send(&g, "/v1/chat/completions", &chat_body("claude-x", false), Some(&slow)).await;
    assert_eq!(status, 429);
    assert_eq!(
        (v["error"]["type"].as_str(), v["error"]["code"].as_str()),
        (Some("rate_limit_error"), Some("rate_limit_exceeded"))
    );
    assert!(v["error"]["message"].as_str().unwrap().contains("rpm limit (1 requests per minute)"), "{v}");
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    assert!(headers.get("x-should-retry").is_none());

    // Only the one admitted request reached an upstream; no refusal touched a breaker.
    assert_eq!(a.request_count() + b.request_count(), 1);
    for name in ["a", "b"] {
        let h = g.health(name).await;
        assert_eq!((h["consecutive_failures"].as_u64(), h["circuit"].as_str()), (Some(0), Some("closed")), "{h}");
    }
    // The allowed requests pass: the endpoint list filters the candidates (b-only goes to b).
    assert_eq!(send(&g, "/v1/chat/completions", &chat_body("gpt-4o", false), Some(&b_only)).await.0, 200);
    assert_eq!(send(&g, "/v1/messages", &claude_body("claude-x", false), Some(&ok)).await.0, 200);
    assert_eq!(b.request_count(), 1);

    // The records name the key, never its secret.
    flush(&g).await;
    let (_, page) = g.api(Method::GET, "/api/requests?key=only-claude&limit=50", None).await;
    // Two refusals (model, explicit endpoint) in each of the four protocols.
    assert_eq!(page["requests"].as_array().unwrap().len(), 8, "{page}");
    assert!(
        page["requests"].as_array().unwrap().iter().all(|r| r["client_key"] == "only-claude" && r["status"] == 403)
    );
    let (_, all) = g.api(Method::GET, "/api/requests?limit=500", None).await;
    for secret in [&ok, &off, &old, &only_claude, &budget, &unpriced, &slow, &b_only] {
        assert!(!all.to_string().contains(secret.as_str()));
    }
}

#[tokio::test]
async fn an_rpm_of_60_admits_exactly_60_of_200_concurrent_requests() {
    let upstream = MockUpstream::start().await;
    upstream.set_default(Reply::anthropic_message("ok"));
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &upstream.url(), json!({})).await;
    let (_, secret) = make_key(&g, json!({"name": "storm", "limits": {"rpm": 60}})).await;
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(200));
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let (url, secret, barrier) = (g.url.clone(), secret.clone(), barrier.clone());
            // A client per request: 200 connections at once, not a pool's few.
            let http = crate::support::gateway::http_client();
            tokio::spawn(async move {
                barrier.wait().await;
                let r = http
                    .post(format!("{url}/v1/messages"))
                    .header("x-api-key", secret)
                    .json(&claude_body("claude-x", false))
                    .send()
                    .await
                    .unwrap();
                r.status().as_u16()
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap());
    }
    let admitted = statuses.iter().filter(|s| **s == 200).count();
    let limited = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!((admitted, limited), (60, 140), "{statuses:?}");
    assert_eq!(upstream.request_count(), 60);
}

#[tokio::test]
async fn a_budget_spent_by_streams_is_charged_exactly_what_the_records_cost() {
    let upstream = MockUpstream::start().await;
    upstream.set_default(Reply::anthropic_stream(&["Hel", "lo"]));
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &upstream.url(), json!({})).await;
    // $1000 per million tokens each way: one answer (12 in, 8 out) costs $0.02.
    let (status, _) = g
        .api(
            Method::PUT,
            "/api/prices/claude-sonnet-4-5",
            Some(json!({"input": 1000, "output": 1000, "cache_read": 0, "cache_write": 0})),
        )
        .await;
    assert_eq!(status, 200);
    let (_, secret) = make_key(&g, json!({"name": "budgeted", "limits": {"usd_per_day": 0.05}})).await;
    let per_request = (INPUT_TOKENS + OUTPUT_TOKENS) as f64 * 1000.0 / 1e6;
    // Admitted while anything remains: $0, $0.02, $0.04 spent; then $0.06 ≥ $0.05.
    for i in 0..3 {
        let (status, _, body) = send(&g, "/v1/messages", &claude_body("claude-sonnet-4-5", true), Some(&secret)).await;
        assert_eq!(status, 200, "request {i}");
        assert!(body.as_str().unwrap().contains("message_stop"), "a whole stream");
    }
    let (status, headers, v) = send(&g, "/v1/messages", &claude_body("claude-sonnet-4-5", true), Some(&secret)).await;
    assert_eq!(status, 429, "{v}");
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert_eq!(headers["x-should-retry"], "false");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("spent its daily (UTC day) budget (usd_per_day: $0.0600 of $0.0500)"), "{message}");

    // What the key was charged is what its records cost, to the last bit.
    flush(&g).await;
    let (_, page) = g.api(Method::GET, "/api/requests?key=budgeted", None).await;
    let costs: Vec<f64> = page["requests"].as_array().unwrap().iter().filter_map(|r| r["cost_usd"].as_f64()).collect();
    assert_eq!(costs.len(), 3, "{page}");
    let recorded: f64 = costs.iter().rev().sum();
    let (_, key) = g.api(Method::GET, "/api/keys/budgeted", None).await;
    let charged = key["usage"]["usd_per_day"]["used"].as_f64().unwrap();
    assert_eq!(charged, recorded, "charged {charged}, recorded {recorded}");
    assert!((charged - 3.0 * per_request).abs() < 1e-12, "{charged}");
    assert_eq!(key["usage"]["usd_per_day"]["remaining"], 0.0);
    assert!((key["usage"]["usd_per_5h"]["used"].as_f64().unwrap() - charged).abs() < 1e-12);
    assert!((key["usage"]["usd_per_month"]["used"].as_f64().unwrap() - charged).abs() < 1e-12);
    assert_eq!(key["usage"]["tpm"]["used"], 3 * (INPUT_TOKENS + OUTPUT_TOKENS));
    // The statistics per key say the same.
    let (_, stats) = g.api(Method::GET, "/api/stats?group_by=key", None).await;
    let group = stats["groups"].as_array().unwrap().iter().find(|gr| gr["key"] == "budgeted").unwrap().clone();
    assert_eq!(group["totals"]["requests"], 4);
    assert!((group["totals"]["cost_usd"].as_f64().unwrap() - charged).abs() < 1e-12, "{group}");
    // And the metrics.
    let text = g.http.get(format!("{}/metrics", g.url)).send().await.unwrap().text().await.unwrap();
    assert!(text.contains("ccmesh_key_requests_total{key=\"budgeted\",status_class=\"2xx\"} 3"), "{text}");
    assert!(text.contains("ccmesh_key_refusals_total{key=\"budgeted\",reason=\"usd_per_day\"} 1"), "{text}");
    assert!(text.contains("ccmesh_key_spend_usd{key=\"budgeted\",window=\"day\"}"), "{text}");
}

#[tokio::test]
async fn a_restart_does_not_hand_out_a_spent_budget_again() {
    let upstream = MockUpstream::start().await;
    upstream.set_default(Reply::anthropic_message("ok"));
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &upstream.url(), json!({})).await;
    g.api(Method::PUT, "/api/prices/claude-sonnet-4-5", Some(json!({"input": 1000, "output": 1000}))).await;
    let (_, secret) = make_key(&g, json!({"name": "k", "limits": {"usd_per_month": 1}})).await;
    assert_eq!(send(&g, "/v1/messages", &claude_body("claude-sonnet-4-5", false), Some(&secret)).await.0, 200);
    flush(&g).await;
    // A second gateway on the same database: the budget is seeded from the records.
    let store = ccmesh::store::Store::open(&g._dir.path().join("ccmesh.db")).unwrap();
    let clock: std::sync::Arc<dyn ccmesh::clock::Clock> = std::sync::Arc::new(ccmesh::clock::SystemClock);
    let client = ccmesh::proxy::upstream::UpstreamClient::new().unwrap();
    let again =
        ccmesh::gateway::Gateway::new(store, clock, client, None, ccmesh::observe::writer::RecordSink::disabled())
            .unwrap();
    let spent = again.limiter.usage("k", ccmesh::keys::now_ms(&*again.clock)).usd_month;
    assert!((spent - 0.02).abs() < 1e-12, "{spent}");
}

#[tokio::test]
async fn concurrency_leases_are_held_by_a_stream_and_returned_when_it_ends() {
    let upstream = MockUpstream::start().await;
    // A stream that takes a while: the second request arrives while it is in flight.
    upstream.push(Reply::anthropic_stream(&["a", "b", "c", "d"]).paced(Duration::from_millis(150)));
    upstream.set_default(Reply::anthropic_message("ok"));
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &upstream.url(), json!({})).await;
    let (_, secret) = make_key(&g, json!({"name": "one-at-a-time", "limits": {"concurrency": 1}})).await;
    let first = g
        .http
        .post(format!("{}/v1/messages", g.url))
        .header("x-api-key", &secret)
        .json(&claude_body("m", true))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200, "the stream is committed, its lease held");
    let (status, headers, v) = send(&g, "/v1/messages", &claude_body("m", false), Some(&secret)).await;
    assert_eq!(status, 429, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("concurrency limit"), "{v}");
    assert_eq!(headers["retry-after"], "1");
    let (_, key) = g.api(Method::GET, "/api/keys/one-at-a-time", None).await;
    assert_eq!(key["usage"]["concurrency"], json!({"used": 1, "limit": 1, "remaining": 0}));
    let text = first.text().await.unwrap();
    assert!(text.contains("message_stop"));
    // The stream's end gave the lease back (the trail closes just after the last bytes).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (_, key) = g.api(Method::GET, "/api/keys/one-at-a-time", None).await;
        if key["usage"]["concurrency"]["used"] == 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the lease did not come back: {key}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(send(&g, "/v1/messages", &claude_body("m", false), Some(&secret)).await.0, 200);
}

#[tokio::test]
async fn pass_through_paths_models_and_count_tokens_pass_the_same_gate() {
    let (oa, an) = (MockUpstream::start().await, MockUpstream::start().await);
    oa.set_default(Reply::json(
        200,
        json!({"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.1]}]}),
    ));
    an.set_default(Reply::json(200, json!({"input_tokens": 5})));
    let g = TestGateway::start().await;
    g.add("oa", "openai", &oa.url(), json!({"models": ["text-embedding-3-small", "gpt-4o"]})).await;
    g.add("an", "anthropic", &an.url(), json!({"models": ["claude-x"]})).await;
    let (_, secret) = make_key(&g, json!({"name": "emb", "models": ["text-embedding-*", "claude-x"]})).await;
    let body = json!({"model": "text-embedding-3-small", "input": "hello"});
    let (status, _, v) = send(&g, "/v1/embeddings", &body, None).await;
    assert_eq!(status, 401, "{v}");
    assert_eq!(v["error"]["code"], "invalid_api_key");
    assert_eq!(oa.request_count(), 0, "nothing passed through without a key");
    let (status, _, v) = send(&g, "/v1/embeddings", &body, Some(&secret)).await;
    assert_eq!(status, 200, "{v}");
    let got = oa.last_request().unwrap();
    assert_eq!(
        got.header("authorization"),
        Some("Bearer sk-oa-secret-key-0000"),
        "the endpoint's key, not the client's"
    );
    // The model list is the key's view; without a key, a 401.
    let (status, _, _) = {
        let r = g.http.get(format!("{}/v1/models", g.url)).send().await.unwrap();
        (r.status().as_u16(), (), ())
    };
    assert_eq!(status, 401);
    let v: Value =
        g.http.get(format!("{}/v1/models", g.url)).bearer_auth(&secret).send().await.unwrap().json().await.unwrap();
    let ids: Vec<&str> = v["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["text-embedding-3-small", "claude-x"]);
    // count_tokens too, the key in ?key= this time.
    let r = g
        .http
        .post(format!("{}/v1/messages/count_tokens", g.url))
        .json(&claude_body("claude-x", false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = g
        .http
        .post(format!("{}/v1/messages/count_tokens?key={secret}", g.url))
        .json(&claude_body("claude-x", false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(!an.last_request().unwrap().path_and_query().contains("key="), "the credential is not forwarded");
}

#[tokio::test]
async fn keys_can_be_required_before_any_exists_and_the_admin_token_is_not_one() {
    let upstream = MockUpstream::start().await;
    upstream.set_default(Reply::anthropic_message("ok"));
    let token = "an-admin-token-long-enough-0123456789";
    let g = TestGateway::start_with(crate::support::gateway::Options {
        admin_token: Some(token.into()),
        ..Default::default()
    })
    .await;
    g.add("a", "anthropic", &upstream.url(), json!({})).await;
    g.settings(json!({"require_client_key": true})).await;
    let plain = crate::support::gateway::http_client();
    let r = plain.post(format!("{}/v1/messages", g.url)).json(&claude_body("m", false)).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = plain
        .post(format!("{}/v1/messages", g.url))
        .header("x-api-key", token)
        .json(&claude_body("m", false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "the admin token opens the admin API, not the proxy");
    let (_, secret) = make_key(&g, json!({"name": "me", "limits": {"rpm": 10, "usd_per_day": 3}})).await;
    // GET /api/me: the key's own view, authenticated by the key, whatever the Host.
    let r = plain
        .get(format!("{}/api/me", g.url))
        .header("host", "gateway.example.com")
        .bearer_auth(&secret)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let me: Value = r.json().await.unwrap();
    assert_eq!(me["name"], "me");
    assert_eq!(me["usage"]["rpm"]["limit"], 10);
    assert_eq!(me["usage"]["usd_per_day"]["remaining"], 3.0);
    let r = plain.get(format!("{}/api/me", g.url)).bearer_auth("ccm-wrong").send().await.unwrap();
    assert_eq!(r.status(), 401);
    // The rest of the admin API stays the admin token's.
    let r = plain.get(format!("{}/api/keys", g.url)).bearer_auth(&secret).send().await.unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn a_session_keeps_its_endpoint_across_a_failover_and_back() {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    a.set_default(Reply::anthropic_message("from a"));
    b.set_default(Reply::anthropic_message("from b"));
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &a.url(), json!({})).await;
    g.add("b", "anthropic", &b.url(), json!({})).await;
    let (_, secret) = make_key(&g, json!({"name": "dev"})).await;
    let ask = |session: &'static str| {
        let (url, http, secret) = (g.url.clone(), g.http.clone(), secret.clone());
        async move {
            let r = http
                .post(format!("{url}/v1/messages"))
                .header("x-api-key", secret)
                .header("x-claude-code-session-id", session)
                .json(&claude_body("claude-x", false))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            (
                r.headers()["x-ccmesh-endpoint"].to_str().unwrap().to_string(),
                r.headers()["x-ccmesh-request-id"].to_str().unwrap().to_string(),
            )
        }
    };
    // Session one is served by a (the first candidate) and bound there.
    assert_eq!(ask("one").await.0, "a");
    // a fails: session one fails over to b, which now holds it (and becomes current).
    a.push(Reply::anthropic_error(503, "overloaded_error", "busy"));
    assert_eq!(ask("one").await.0, "b");
    // A new session starts where rotation says (b, the current one) …
    assert_eq!(ask("two").await.0, "b");
    // … and a manual switch back to a sends new sessions there, and drops the bindings.
    let (status, _) = g.api(Method::PUT, "/api/current", Some(json!({"protocol": "claude", "endpoint": "a"}))).await;
    assert_eq!(status, 200);
    let (endpoint, _) = ask("three").await;
    assert_eq!(endpoint, "a");
    // Session three is bound to a; when b fails now, session one (bound to b) fails back to a.
    assert_eq!(ask("one").await.0, "a", "the switch dropped one's binding: it starts at current a");
    assert_eq!(ask("one").await.0, "a");
    // Session four fails over from a to b and is bound there (b becomes current); then session
    // five fails over from b to a (a becomes current again).
    a.push(Reply::anthropic_error(503, "overloaded_error", "busy"));
    assert_eq!(ask("four").await.0, "b");
    b.push(Reply::anthropic_error(503, "overloaded_error", "busy"));
    assert_eq!(ask("five").await.0, "a");
    let (endpoint, id_four_on_b) = ask("four").await;
    assert_eq!(endpoint, "b", "four keeps b although the current endpoint is a");
    // b fails for four: its binding goes, failover goes on as usual, and a holds it now.
    b.push(Reply::anthropic_error(503, "overloaded_error", "busy"));
    let (endpoint, id_back) = ask("four").await;
    assert_eq!(endpoint, "a", "back to a");
    assert_eq!(ask("four").await.0, "a", "and a holds the session now");
    // The records say when affinity decided the start.
    flush(&g).await;
    let (_, rec) = g.api(Method::GET, &format!("/api/requests/{id_four_on_b}"), None).await;
    assert_eq!(rec["affinity"], true, "{rec}");
    assert_eq!(rec["session_id"], "four");
    assert_eq!(rec["client_key"], "dev");
    let (_, rec) = g.api(Method::GET, &format!("/api/requests/{id_back}"), None).await;
    assert_eq!(rec["affinity"], true, "it started at b, its bound endpoint");
    assert_eq!(rec["attempts"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn priority_ignores_affinity_and_round_robin_honours_it() {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    a.set_default(Reply::anthropic_message("from a"));
    b.set_default(Reply::anthropic_message("from b"));
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &a.url(), json!({})).await;
    g.add("b", "anthropic", &b.url(), json!({})).await;
    let ask = |session: &'static str| {
        let (url, http) = (g.url.clone(), g.http.clone());
        async move {
            let r = http
                .post(format!("{url}/v1/messages"))
                .header("x-claude-code-session-id", session)
                .json(&claude_body("claude-x", false))
                .send()
                .await
                .unwrap();
            r.headers()["x-ccmesh-endpoint"].to_str().unwrap().to_string()
        }
    };
    g.settings(json!({"routing_strategy": "round_robin"})).await;
    let first = ask("s").await;
    // Round robin would alternate; the session keeps its endpoint.
    for _ in 0..4 {
        assert_eq!(ask("s").await, first);
    }
    // Another session is spread as usual.
    let others: Vec<String> = [ask("t1").await, ask("t2").await].to_vec();
    assert_ne!(others[0], others[1], "{others:?}");
    // Under priority the first endpoint always starts, whatever the session.
    g.settings(json!({"routing_strategy": "priority"})).await;
    a.push(Reply::anthropic_error(503, "overloaded_error", "busy"));
    assert_eq!(ask("p").await, "b");
    assert_eq!(ask("p").await, "a", "back to the first, no affinity");
}

#[tokio::test]
async fn a_responses_endpoint_receives_the_session_as_prompt_cache_key() {
    let upstream = MockUpstream::start().await;
    upstream.set_default(Reply::responses_message("ok"));
    let g = TestGateway::start().await;
    g.add("r", "responses", &upstream.url(), json!({})).await;
    let r = g
        .post_with("/v1/messages", &claude_body("gpt-5", false), &[("x-claude-code-session-id", "c5afce96-session")])
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(upstream.last_request().unwrap().json()["prompt_cache_key"], "c5afce96-session");
    // A Chat client's own key wins over its session header.
    let mut body = chat_body("gpt-5", false);
    body["prompt_cache_key"] = json!("the-clients-own");
    let r = g.post_with("/v1/chat/completions", &body, &[("session_id", "codex-session")]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(upstream.last_request().unwrap().json()["prompt_cache_key"], "the-clients-own");
}
