//! Rotation and attempts (SPEC §3) and classification (SPEC §4) end to end.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::gateway::{TestGateway, chat_body, claude_body};
use crate::support::mock::{MockUpstream, Reply};

async fn current(g: &TestGateway) -> Value {
    g.api(reqwest::Method::GET, "/api/current", None).await.1
}

#[tokio::test]
async fn a_5xx_fails_over_and_the_winner_becomes_current() {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &a.url(), json!({})).await;
    g.add("b", "anthropic", &b.url(), json!({})).await;
    a.push(Reply::anthropic_error(503, "overloaded_error", "busy"));
    b.set_default(Reply::anthropic_message("from b"));
    let r = g.post("/v1/messages", &claude_body("m", false)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ccmesh-attempts"], "2");
    assert_eq!(r.headers()["x-ccmesh-endpoint"], "b");
    assert_eq!(current(&g).await["claude"], "b");
    // Sticky: the next request starts at b, a is not tried.
    a.set_default(Reply::anthropic_message("from a"));
    let r = g.post("/v1/messages", &claude_body("m", false)).await;
    assert_eq!(r.headers()["x-ccmesh-endpoint"], "b");
    assert_eq!(a.request_count(), 1);
    // Other protocols keep their own current endpoint.
    assert_eq!(current(&g).await["openai"], Value::Null);
}

#[tokio::test]
async fn client_errors_are_returned_unchanged_without_retry_and_are_neutral() {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    let g = TestGateway::start().await;
    g.add("a", "openai", &a.url(), json!({})).await;
    g.add("b", "openai", &b.url(), json!({})).await;
    for status in [400u16, 401, 413, 422] {
        a.push(Reply::openai_error(status, "invalid_request_error", "bad").with_header("x-upstream", "a"));
        let r = g.post("/v1/chat/completions", &chat_body("m", false)).await;
        assert_eq!(r.status(), status);
        assert_eq!(r.headers()["x-upstream"], "a");
        assert_eq!(r.headers()["x-ccmesh-attempts"], "1");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["message"], "bad");
    }
    assert_eq!(b.request_count(), 0);
    let h = g.health("a").await;
    assert_eq!(h["consecutive_failures"], 0);
    assert_eq!(h["circuit"], "closed");
    // A rejected key is visible in health even though it is neutral.
    assert_eq!(h["last_error"], "upstream rejected the API key (401)");
}

#[tokio::test]
async fn auth_errors_fail_over_when_configured() {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    let g = TestGateway::start().await;
    g.settings(json!({"auth_errors_fail_over": true})).await;
    g.add("a", "openai", &a.url(), json!({})).await;
    g.add("b", "openai", &b.url(), json!({})).await;
    a.push(Reply::openai_error(401, "authentication_error", "revoked"));
    b.push(Reply::openai_chat("ok"));
    let r = g.post("/v1/chat/completions", &chat_body("m", false)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ccmesh-endpoint"], "b");
    assert_eq!(g.health("a").await["consecutive_failures"], 1);
}

#[tokio::test]
async fn attempts_are_capped_at_twice_the_candidates_and_the_last_answer_is_returned() {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &a.url(), json!({})).await;
    g.add("b", "anthropic", &b.url(), json!({})).await;
    a.set_default(Reply::anthropic_error(500, "api_error", "a broke"));
    b.set_default(Reply::anthropic_error(502, "api_error", "b broke"));
    let r = g.post("/v1/messages", &claude_body("m", false)).await;
    assert_eq!(r.status(), 502);
    assert_eq!(r.headers()["x-ccmesh-attempts"], "4");
    assert_eq!(r.headers()["x-ccmesh-endpoint"], "b");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["message"], "b broke", "the client sees the real upstream error");
    assert_eq!((a.request_count(), b.request_count()), (2, 2));
    // A request that fails everywhere leaves the current endpoint unchanged.
    assert_eq!(current(&g).await["claude"], Value::Null);
}

#[tokio::test]
async fn transient_network_errors_retry_the_same_endpoint_after_the_delay_then_move_on() {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    let g = TestGateway::start_manual().await;
    g.add("a", "anthropic", &a.url(), json!({})).await;
    g.add("b", "anthropic", &b.url(), json!({})).await;
    a.push_n(2, Reply::Reset);
    b.push(Reply::anthropic_message("b"));
    let request = tokio::spawn({
        let (url, http) = (g.url.clone(), g.http.clone());
        async move { http.post(format!("{url}/v1/messages")).json(&claude_body("m", false)).send().await.unwrap() }
    });
    // The first reset puts the request to sleep for exactly the retry delay before trying a again.
    let clock = g.clock();
    clock.wait_for_sleepers(1).await;
    assert_eq!(a.request_count(), 1);
    clock.advance(Duration::from_millis(299));
    assert_eq!(clock.sleepers(), 1);
    assert_eq!(a.request_count(), 1);
    clock.advance(Duration::from_millis(1));
    // Second reset on a: two in a row, so the request moves on to b without another pause.
    let r = request.await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ccmesh-attempts"], "3");
    assert_eq!(r.headers()["x-ccmesh-endpoint"], "b");
    assert_eq!(a.request_count(), 2);
}

#[tokio::test]
async fn connection_refused_everywhere_is_a_502_naming_the_network_error() {
    // A port with nothing listening: bind, note the port, drop.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let g = TestGateway::start().await;
    g.add("dead", "openai", &format!("http://{dead}"), json!({})).await;
    let r = g.post("/v1/chat/completions", &chat_body("m", false)).await;
    assert_eq!(r.status(), 502);
    // A refused connection is not retried (SPEC §3, second round): it cost 300 ms per failover.
    assert_eq!(r.headers()["x-ccmesh-attempts"], "1");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "server_error");
    assert!(v["error"]["message"].as_str().unwrap().contains("could not connect"), "{v}");
    let h = g.health("dead").await;
    assert_eq!(h["consecutive_failures"], 1);
    assert_eq!(h["last_error"], "could not connect to the upstream");
}

#[tokio::test]
async fn a_slow_upstream_hits_the_request_timeout_and_fails_over() {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    let g = TestGateway::start().await;
    g.settings(json!({"timeouts": {"openai": {"request_timeout_secs": 0.2}}})).await;
    g.add("a", "openai", &a.url(), json!({})).await;
    g.add("b", "openai", &b.url(), json!({})).await;
    a.set_default(Reply::Stall);
    b.push(Reply::openai_chat("b"));
    let r = g.post("/v1/chat/completions", &chat_body("m", false)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ccmesh-endpoint"], "b");
    // A timeout moves on at once (SPEC §3, second round): a silent endpoint costs one timeout.
    assert_eq!(r.headers()["x-ccmesh-attempts"], "2", "a timed out once, then b");
    // The timed-out attempt's connection was dropped, cancelling it upstream.
    a.wait_for_cancellations(1).await;
}

#[tokio::test]
async fn routing_strategies_choose_the_start() {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    let g = TestGateway::start().await;
    g.add("a", "openai", &a.url(), json!({})).await;
    g.add("b", "openai", &b.url(), json!({})).await;
    a.set_default(Reply::openai_chat("a"));
    b.set_default(Reply::openai_chat("b"));
    let endpoint = |r: &reqwest::Response| r.headers()["x-ccmesh-endpoint"].to_str().unwrap().to_string();

    g.settings(json!({"routing_strategy": "round_robin"})).await;
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(endpoint(&g.post("/v1/chat/completions", &chat_body("m", false)).await));
    }
    assert_eq!(seen, ["a", "b", "a", "b"]);

    // Manual switch: the next request starts there, whatever the strategy.
    g.settings(json!({"routing_strategy": "priority"})).await;
    g.api(reqwest::Method::PUT, "/api/current", Some(json!({"protocol": "openai", "endpoint": "b"}))).await;
    assert_eq!(endpoint(&g.post("/v1/chat/completions", &chat_body("m", false)).await), "b");
    // Priority: back to the first candidate.
    assert_eq!(endpoint(&g.post("/v1/chat/completions", &chat_body("m", false)).await), "a");

    // Sticky honours the manual switch for every later request.
    g.settings(json!({"routing_strategy": "sticky"})).await;
    g.api(reqwest::Method::PUT, "/api/current", Some(json!({"protocol": "openai", "endpoint": "b"}))).await;
    for _ in 0..3 {
        assert_eq!(endpoint(&g.post("/v1/chat/completions", &chat_body("m", false)).await), "b");
    }
}

#[tokio::test]
async fn concurrent_failovers_do_not_leapfrog_the_current_endpoint() {
    let (a, b, c) = (MockUpstream::start().await, MockUpstream::start().await, MockUpstream::start().await);
    let g = TestGateway::start().await;
    g.settings(json!({"breaker": {"openai": {"failure_threshold": 20, "min_requests": 100}}})).await;
    g.add("a", "openai", &a.url(), json!({})).await;
    g.add("b", "openai", &b.url(), json!({})).await;
    g.add("c", "openai", &c.url(), json!({})).await;
    a.set_default(Reply::openai_error(500, "server_error", "a down"));
    b.set_default(Reply::openai_chat("b"));
    c.set_default(Reply::openai_chat("c"));
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let (url, http) = (g.url.clone(), g.http.clone());
        tasks.push(tokio::spawn(async move {
            http.post(format!("{url}/v1/chat/completions")).json(&chat_body("m", false)).send().await.unwrap().status()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    // Every request started at a (none had moved yet) and succeeded at b; b is current, not c.
    assert_eq!(current(&g).await["openai"], "b");
    assert_eq!(c.request_count(), 0);
}

#[tokio::test]
async fn network_failures_are_classified_by_kind_not_message() {
    for (reply, want) in [
        (Reply::Reset, "the upstream reset the connection"),
        (Reply::Close, "the upstream closed the connection before answering completely"),
    ] {
        let up = MockUpstream::start().await;
        let g = TestGateway::start().await;
        g.add("a", "openai", &up.url(), json!({})).await;
        up.push_n(2, reply);
        let r = g.post("/v1/chat/completions", &chat_body("m", false)).await;
        assert_eq!(r.status(), 502);
        assert_eq!(r.headers()["x-ccmesh-attempts"], "2");
        assert_eq!(g.health("a").await["last_error"], want);
    }
}

#[tokio::test]
async fn count_tokens_404_is_neutral_not_retried_and_answered_locally() {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &a.url(), json!({})).await;
    g.add("b", "anthropic", &b.url(), json!({})).await;
    a.push(Reply::anthropic_error(404, "not_found_error", "no count_tokens here"));
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "Hello, world!"}]});
    let r = g.post("/v1/messages/count_tokens", &body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ccmesh-token-count"], "estimated");
    let v: Value = r.json().await.unwrap();
    // 3 (priming) + 3 (message) + 4 ("Hello, world!" in o200k).
    assert_eq!(v, json!({"input_tokens": 10}));
    assert_eq!(a.last_request().unwrap().path, "/v1/messages/count_tokens");
    assert_eq!(b.request_count(), 0);
    assert_eq!(g.health("a").await["consecutive_failures"], 0);
    // An upstream that counts is believed.
    a.push(Reply::json(200, json!({"input_tokens": 123})));
    let r = g.post("/v1/messages/count_tokens", &body).await;
    assert!(r.headers().get("x-ccmesh-token-count").is_none());
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"input_tokens": 123}));
    // The same 404 on /v1/messages is an endpoint failure and fails over.
    a.push(Reply::anthropic_error(404, "not_found_error", "wrong base_url"));
    b.push(Reply::anthropic_message("b"));
    let r = g.post("/v1/messages", &claude_body("m", false)).await;
    assert_eq!(r.headers()["x-ccmesh-endpoint"], "b");
    assert_eq!(g.health("a").await["consecutive_failures"], 1);
}

#[tokio::test]
async fn count_tokens_without_an_anthropic_endpoint_is_estimated_without_a_request() {
    let o = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("o", "openai", &o.url(), json!({})).await;
    let body = json!({"model": "m", "system": "Be brief.", "messages": [{"role": "user", "content": "Hello, world!"}]});
    let r = g.post("/v1/messages/count_tokens", &body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ccmesh-token-count"], "estimated");
    let n = r.json::<Value>().await.unwrap()["input_tokens"].as_u64().unwrap();
    assert!(n > 10, "{n}");
    assert_eq!(o.request_count(), 0);
}

/// Seed 001's switch: with failover off a request stays on the endpoint the strategy starts at.
#[tokio::test]
async fn with_failover_off_a_request_stays_on_its_starting_endpoint() {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    let g = TestGateway::start().await;
    g.add("a", "openai", &a.url(), json!({"models": ["m"]})).await;
    g.add("b", "openai", &b.url(), json!({"models": ["m"]})).await;
    b.set_default(Reply::openai_chat("from b"));
    let s = g
        .settings(json!({"failover_enabled": {"openai": false}, "breaker": {"openai": {"failure_threshold": 1}}}))
        .await;
    assert_eq!(s["failover_enabled"], json!({"claude": true, "openai": false, "responses": true, "gemini": true}));

    // An HTTP failure comes back at once; nothing goes to b; the failure still counts.
    a.push(Reply::openai_error(500, "server_error", "a is down"));
    let r = g.post("/v1/chat/completions", &chat_body("m", false)).await;
    assert_eq!(r.status(), 500);
    assert_eq!(r.headers()["x-ccmesh-attempts"], "1");
    assert_eq!(b.request_count(), 0);
    let h = g.health("a").await;
    assert_eq!(h["circuit"], "open", "the failure tripped the breaker (threshold 1): {h}");

    // An open breaker does not move the request either (no breaker filter), and a transient
    // error is retried on the same endpoint.
    a.push(Reply::Reset);
    a.push(Reply::openai_chat("a again"));
    let r = g.post("/v1/chat/completions", &chat_body("m", false)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ccmesh-endpoint"], "a");
    assert_eq!(r.headers()["x-ccmesh-attempts"], "2");
    assert_eq!(b.request_count(), 0);

    // Other protocols keep failing over.
    let (c, d) = (MockUpstream::start().await, MockUpstream::start().await);
    g.add("c", "anthropic", &c.url(), json!({"models": ["claude-*"]})).await;
    g.add("d", "anthropic", &d.url(), json!({"models": ["claude-*"]})).await;
    c.push(Reply::anthropic_error(500, "api_error", "c is down"));
    d.set_default(Reply::anthropic_message("from d"));
    let r = g.post("/v1/messages", &claude_body("claude-m", false)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ccmesh-endpoint"], "d");

    // Back on: the same failure moves on to b.
    g.settings(json!({"failover_enabled": {"openai": true}})).await;
    g.api(reqwest::Method::POST, "/api/endpoints/a/reset", None).await;
    a.push(Reply::openai_error(500, "server_error", "a is down"));
    let r = g.post("/v1/chat/completions", &chat_body("m", false)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ccmesh-endpoint"], "b");
}
