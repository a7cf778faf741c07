//! Explicit endpoints (header, query, `@name/`), the model filter, the per-protocol fast queue
//! and health (SPEC §2, §7).

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::gateway::{TestGateway, chat_body, claude_body};
use crate::support::mock::{MockUpstream, Reply};

#[tokio::test]
async fn three_explicit_forms_bypass_fast_queue_model_filter_and_breaker() {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    let g = TestGateway::start_manual().await;
    g.settings(
        json!({"transient_retry_delay_ms": 0, "breaker": {"claude": {"failure_threshold": 1, "timeout_secs": 60}}}),
    )
    .await;
    g.add("a", "anthropic", &a.url(), json!({"fast": true, "models": ["claude-*"]})).await;
    g.add("b", "anthropic", &b.url(), json!({"models": ["glm-*"]})).await;
    b.set_default(Reply::anthropic_message("b"));

    // b is outside the fast queue and does not list the model; every explicit form reaches it.
    let by_header = g.post_with("/v1/messages", &claude_body("claude-x", false), &[("x-ccmesh-endpoint", "b")]).await;
    let by_query = g
        .http
        .post(format!("{}/v1/messages?endpoint=b&beta=true", g.url))
        .json(&claude_body("claude-x", false))
        .send()
        .await
        .unwrap();
    let by_model = g.post("/v1/messages", &claude_body("@b/claude-x", false)).await;
    for r in [by_header, by_query, by_model] {
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["x-ccmesh-endpoint"], "b");
    }
    let sent = b.requests();
    assert_eq!(sent.len(), 3);
    assert!(sent.iter().all(|r| r.header("x-ccmesh-endpoint").is_none()));
    assert_eq!(sent[1].query.as_deref(), Some("beta=true"), "the endpoint selector is not forwarded");
    assert_eq!(sent[2].json()["model"], "claude-x", "the @b/ prefix is removed");

    // Trip b; explicit requests still reach it (no permit, never skipped) and its failures
    // are recorded without restarting the cooldown.
    b.set_default(Reply::anthropic_error(500, "api_error", "b down"));
    let r = g.post("/v1/messages", &claude_body("@b/m", false)).await;
    assert_eq!(r.status(), 500);
    assert_eq!(r.headers()["x-ccmesh-attempts"], "3", "explicit cap is 3");
    assert_eq!(g.health("b").await["circuit"], "open");
    g.clock().advance(Duration::from_secs(30));
    b.set_default(Reply::anthropic_message("b is back"));
    let r = g.post("/v1/messages", &claude_body("@b/m", false)).await;
    assert_eq!(r.status(), 200);
    let h = g.health("b").await;
    assert_eq!(h["circuit"], "open", "an explicit success leaves an open breaker open");
    assert_eq!(h["cooldown_remaining_ms"], 30_000, "and explicit traffic never restarts the cooldown");
    assert_eq!(h["consecutive_failures"], 0);
}

#[tokio::test]
async fn explicit_errors_are_400_in_the_client_protocol() {
    let g = TestGateway::start().await;
    g.add("a", "anthropic", "http://127.0.0.1:9", json!({})).await;
    g.add("off", "anthropic", "http://127.0.0.1:9", json!({"enabled": false})).await;
    g.add("o", "openai", "http://127.0.0.1:9", json!({})).await;
    #[allow(clippy::type_complexity)]
    let cases: [(&str, Vec<(&str, &str)>, &str, &str); 5] = [
        ("/v1/messages", vec![("x-ccmesh-endpoint", "ghost")], "m", "ghost"),
        ("/v1/messages", vec![("x-ccmesh-endpoint", "off")], "m", "disabled"),
        ("/v1/messages", vec![], "@off/m", "disabled"),
        // Pass-through paths are not converted: an Anthropic-family path needs an Anthropic endpoint.
        (
            "/v1/messages/batches",
            vec![("x-ccmesh-endpoint", "o"), ("anthropic-version", "2023-06-01")],
            "m",
            "cannot serve claude",
        ),
        ("/v1/messages", vec![("x-ccmesh-endpoint", "a")], "@o/m", "names endpoint 'a' but"),
    ];
    for (path, headers, model, needle) in cases {
        let r = g.post_with(path, &claude_body(model, false), &headers).await;
        assert_eq!(r.status(), 400, "{headers:?} {model}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(v["error"]["message"].as_str().unwrap().contains(needle), "{v}");
    }
    // An @prefix that names no endpoint is an ordinary model.
    let r = g.post("/v1/chat/completions", &chat_body("@cf/meta/llama-3", false)).await;
    assert_ne!(r.status(), 400);
}

#[tokio::test]
async fn the_fast_queue_orders_candidates_and_the_404_names_hidden_endpoints() {
    let (slow, fast1, fast2) = (MockUpstream::start().await, MockUpstream::start().await, MockUpstream::start().await);
    let g = TestGateway::start().await;
    g.add("slow-o", "openai", &slow.url(), json!({"models": ["gpt-*"]})).await;
    slow.set_default(Reply::openai_chat("slow"));
    assert_eq!(
        g.post("/v1/chat/completions", &chat_body("gpt-5", false)).await.headers()["x-ccmesh-endpoint"],
        "slow-o"
    );
    // Once endpoints are fast, only fast ones serve, in fast_sort_order.
    g.add("fast-2", "openai", &fast2.url(), json!({"fast": true, "fast_sort_order": 2, "models": ["o3"]})).await;
    g.add("fast-1", "openai", &fast1.url(), json!({"fast": true, "fast_sort_order": 1, "models": ["o3"]})).await;
    fast1.set_default(Reply::openai_chat("fast"));
    g.settings(json!({"routing_strategy": "priority"})).await;
    assert_eq!(g.post("/v1/chat/completions", &chat_body("o3", false)).await.headers()["x-ccmesh-endpoint"], "fast-1");
    let r = g.post("/v1/chat/completions", &chat_body("gpt-5", false)).await;
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["error"]["message"],
        "no endpoint in the fast queue serves model 'gpt-5'; 'slow-o' serves it but is not in the queue (add it with PUT /api/fast-queue or `ccmesh fast set`)"
    );
    // Editing the queue takes effect on the next request.
    g.api(reqwest::Method::PUT, "/api/fast-queue", Some(json!({"endpoints": ["fast-1", "slow-o"]}))).await;
    assert_eq!(g.post("/v1/chat/completions", &chat_body("gpt-5", false)).await.status(), 200);
}

#[tokio::test]
async fn the_fast_queue_of_one_pass_through_family_does_not_empty_the_other() {
    // Pass-through paths go only to their own family; an Anthropic endpoint in the fast queue
    // must not hide the OpenAI-family endpoints from /v1/embeddings.
    let (a, o) = (MockUpstream::start().await, MockUpstream::start().await);
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &a.url(), json!({"fast": true})).await;
    g.add("o", "openai", &o.url(), json!({})).await;
    o.push(Reply::json(200, json!({"object": "list", "data": []})));
    let r = g.post("/v1/embeddings", &json!({"model": "text-embedding-3-small", "input": "x"})).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ccmesh-endpoint"], "o");
}

#[tokio::test]
async fn health_reports_live_state_or_the_last_test() {
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("a", "openai", &up.url(), json!({"models": ["gpt-5"]})).await;
    g.add("b", "openai", &up.url(), json!({"test_model": "gpt-4o"})).await;
    g.add("c", "openai", &up.url(), json!({})).await;
    // No traffic yet: the last connectivity test speaks ("untested" → unknown).
    let h = g.health("a").await;
    assert_eq!((h["status"].clone(), h["source"].clone()), (json!("unknown"), json!("test")));
    // Run the test: a minimal real request with the test model and max_tokens 1.
    up.push(Reply::openai_chat("pong"));
    let (status, e) = g.api(reqwest::Method::POST, "/api/endpoints/b/test", None).await;
    assert_eq!(status, 200, "{e}");
    assert_eq!(e["test_status"], "available");
    assert!(e["test_at"].as_str().unwrap().ends_with('Z'));
    let sent = up.last_request().unwrap().json();
    assert_eq!((sent["model"].clone(), sent["max_tokens"].clone()), (json!("gpt-4o"), json!(1)));
    assert_eq!(g.health("b").await["status"], "healthy");
    up.push(Reply::openai_error(401, "authentication_error", "bad key"));
    let (_, e) = g.api(reqwest::Method::POST, "/api/endpoints/a/test", None).await;
    assert_eq!(e["test_status"], "unavailable");
    assert!(e["test_error"].as_str().unwrap().contains("401"));
    assert_eq!(g.api(reqwest::Method::GET, "/api/endpoints/a", None).await.1["test_model"], Value::Null);
    assert_eq!(up.last_request().unwrap().json()["model"], "gpt-5", "first concrete model");
    let h = g.health("a").await;
    assert_eq!((h["status"].clone(), h["circuit"].clone()), (json!("unhealthy"), json!("open")));
    // c lists no model and has no test_model: the test asks for the model list instead
    // (tests/it/connectivity.rs has the rest of that).
    up.set_models(&["gpt-5"]);
    let (status, e) = g.api(reqwest::Method::POST, "/api/endpoints/c/test", None).await;
    assert_eq!(status, 200, "{e}");
    assert_eq!(e["test_status"], "available");

    // Live traffic replaces the test result.
    up.set_default(Reply::openai_chat("ok"));
    g.post_with("/v1/chat/completions", &chat_body("gpt-5", false), &[("x-ccmesh-endpoint", "a")]).await;
    let h = g.health("a").await;
    assert_eq!(h["source"], "live");
    assert_eq!(h["status"], "healthy");
    assert_eq!(h["requests"], 1);
    assert_eq!(h["success_rate"], 1.0);
    assert!(h["last_success_at"].as_str().unwrap().ends_with('Z'));
    for key in [
        "name",
        "status",
        "circuit",
        "open_reason",
        "consecutive_failures",
        "success_rate",
        "requests",
        "last_error",
        "last_failure_at",
        "last_success_at",
        "cooldown_remaining_ms",
        "source",
    ] {
        assert!(h.get(key).is_some(), "health lacks {key}");
    }
}
