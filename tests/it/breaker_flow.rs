//! The circuit breaker end to end (SPEC §2 steps 4–5, §5), with the gateway's clock under the
//! test's control so cooldowns are exact.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::gateway::{TestGateway, chat_body, claude_body};
use crate::support::mock::{MockUpstream, Reply};

async fn send_chat(g: &TestGateway) -> reqwest::Response {
    g.post("/v1/chat/completions", &chat_body("m", false)).await
}

#[tokio::test]
async fn trip_skip_single_probe_under_concurrency_close_and_reopen() {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    let g = TestGateway::start_manual().await;
    g.settings(json!({
        "routing_strategy": "priority",
        "transient_retry_delay_ms": 0,
        "breaker": {"openai": {"failure_threshold": 2, "success_threshold": 2, "timeout_secs": 10, "min_requests": 100}}
    }))
    .await;
    g.add("a", "openai", &a.url(), json!({})).await;
    g.add("b", "openai", &b.url(), json!({})).await;
    b.set_default(Reply::openai_chat("b"));
    a.set_default(Reply::openai_error(503, "server_error", "a down"));

    // Two failures in a row trip a (each request fails over to b invisibly).
    for _ in 0..2 {
        let r = send_chat(&g).await;
        assert_eq!((r.status().as_u16(), r.headers()["x-ccmesh-endpoint"].to_str().unwrap()), (200, "b"));
    }
    let h = g.health("a").await;
    assert_eq!(
        (h["status"].clone(), h["circuit"].clone(), h["open_reason"].clone()),
        (json!("unhealthy"), json!("open"), json!("broken"))
    );
    assert_eq!(h["cooldown_remaining_ms"], 10_000);
    assert_eq!(h["source"], "live");

    // While open, a is skipped without an attempt.
    let r = send_chat(&g).await;
    assert_eq!(r.headers()["x-ccmesh-attempts"], "1");
    assert_eq!(a.request_count(), 2);

    // Cooldown over: exactly one probe at a time reaches a, even under 20 concurrent requests.
    g.clock().advance(Duration::from_secs(10));
    a.set_default(Reply::openai_chat("a").after(Duration::from_secs(1)));
    let b_before = b.request_count();
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let (url, http) = (g.url.clone(), g.http.clone());
        tasks.push(tokio::spawn(async move {
            let r = http.post(format!("{url}/v1/chat/completions")).json(&chat_body("m", false)).send().await.unwrap();
            (r.status().as_u16(), r.headers()["x-ccmesh-endpoint"].to_str().unwrap().to_string())
        }));
    }
    let mut by_a = 0;
    for t in tasks {
        let (status, endpoint) = t.await.unwrap();
        assert_eq!(status, 200);
        by_a += usize::from(endpoint == "a");
    }
    assert_eq!(by_a, 1, "exactly one probe");
    assert_eq!(a.request_count(), 3);
    assert_eq!(b.request_count() - b_before, 19);
    let h = g.health("a").await;
    assert_eq!((h["status"].clone(), h["circuit"].clone()), (json!("recovering"), json!("half_open")));

    // The second successful probe closes it.
    a.set_default(Reply::openai_chat("a"));
    let r = send_chat(&g).await;
    assert_eq!(r.headers()["x-ccmesh-endpoint"], "a");
    assert_eq!(g.health("a").await["circuit"], "closed");

    // Trip again; a failed probe reopens at once with a fresh cooldown.
    a.set_default(Reply::openai_error(500, "server_error", "down again"));
    send_chat(&g).await;
    send_chat(&g).await;
    assert_eq!(g.health("a").await["circuit"], "open");
    g.clock().advance(Duration::from_secs(10));
    let r = send_chat(&g).await;
    assert_eq!(r.headers()["x-ccmesh-attempts"], "2", "probe to a failed, then b");
    let h = g.health("a").await;
    assert_eq!(h["circuit"], "open");
    assert_eq!(h["cooldown_remaining_ms"], 10_000);

    // Manual reset closes it at once.
    let (status, h) = g.api(reqwest::Method::POST, "/api/endpoints/a/reset", None).await;
    assert_eq!(status, 200);
    assert_eq!(h["circuit"], "closed");
}

#[tokio::test]
async fn the_only_candidate_still_gets_a_single_probe() {
    let a = MockUpstream::start().await;
    let g = TestGateway::start_manual().await;
    g.settings(json!({"transient_retry_delay_ms": 0, "breaker": {"openai": {"failure_threshold": 1, "success_threshold": 1, "timeout_secs": 5}}})).await;
    g.add("a", "openai", &a.url(), json!({})).await;
    a.push(Reply::openai_error(500, "server_error", "x"));
    let r = send_chat(&g).await;
    assert_eq!(r.status(), 500, "the real upstream error, not a gateway 502");
    // Open: a gateway 502 without touching the upstream.
    let r = send_chat(&g).await;
    assert_eq!(r.status(), 502);
    let v: Value = r.json().await.unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("circuit-open"));
    assert_eq!(a.request_count(), 1);
    g.clock().advance(Duration::from_secs(5));
    a.set_default(Reply::openai_chat("ok").after(Duration::from_millis(500)));
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let (url, http) = (g.url.clone(), g.http.clone());
        tasks.push(tokio::spawn(async move {
            http.post(format!("{url}/v1/chat/completions"))
                .json(&chat_body("m", false))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }));
    }
    let statuses: Vec<u16> = futures_util::future::join_all(tasks).await.into_iter().map(|r| r.unwrap()).collect();
    assert_eq!(a.request_count(), 2, "one probe only: {statuses:?}");
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 1);
    assert!(statuses.iter().all(|s| *s == 200 || *s == 502), "{statuses:?}");
}

#[tokio::test]
async fn rate_limited_backoff_succeeds_within_the_budget() {
    let a = MockUpstream::start().await;
    let g = TestGateway::start_manual().await;
    g.settings(json!({"breaker": {"claude": {"failure_threshold": 1}}})).await;
    g.add("a", "anthropic", &a.url(), json!({})).await;
    // The 429 that trips the breaker is the upstream's own answer, returned as it was.
    a.push(Reply::anthropic_error(429, "rate_limit_error", "slow down").with_header("retry-after", "2"));
    let r = g.post("/v1/messages", &claude_body("m", false)).await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "2");
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["message"], "slow down");
    let h = g.health("a").await;
    assert_eq!(
        (h["circuit"].clone(), h["open_reason"].clone(), h["cooldown_remaining_ms"].clone()),
        (json!("open"), json!("rate_limited"), json!(2000))
    );

    // The next request finds every candidate rate-limited and waits inside the gateway for the
    // 2 s cooldown (within the 5 s budget), then probes and succeeds.
    a.push(Reply::anthropic_message("after the wait"));
    let request = tokio::spawn({
        let (url, http) = (g.url.clone(), g.http.clone());
        async move { http.post(format!("{url}/v1/messages")).json(&claude_body("m", false)).send().await.unwrap() }
    });
    g.clock().wait_for_sleepers(1).await;
    assert_eq!(a.request_count(), 1);
    g.clock().advance(Duration::from_secs(2));
    let r = request.await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ccmesh-attempts"], "1");
    assert_eq!(a.request_count(), 2);
}

#[tokio::test]
async fn a_probe_answered_429_again_keeps_waiting_within_the_budget() {
    let a = MockUpstream::start().await;
    let g = TestGateway::start_manual().await;
    g.settings(json!({"breaker": {"claude": {"failure_threshold": 1, "success_threshold": 1}}})).await;
    g.add("a", "anthropic", &a.url(), json!({})).await;
    a.push(Reply::anthropic_error(429, "rate_limit_error", "slow down").with_header("retry-after", "1"));
    assert_eq!(g.post("/v1/messages", &claude_body("m", false)).await.status(), 429);

    a.push(Reply::anthropic_error(429, "rate_limit_error", "still busy").with_header("retry-after", "1"));
    a.push(Reply::anthropic_message("finally"));
    let request = tokio::spawn({
        let (url, http) = (g.url.clone(), g.http.clone());
        async move { http.post(format!("{url}/v1/messages")).json(&claude_body("m", false)).send().await.unwrap() }
    });
    let clock = g.clock();
    clock.wait_for_sleepers(1).await;
    clock.advance(Duration::from_secs(1));
    // The probe gets 429 again: the breaker reopens for 1 s and the request waits again.
    a.wait_for_requests(2).await;
    clock.wait_for_sleepers(1).await;
    clock.advance(Duration::from_secs(1));
    let r = request.await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ccmesh-attempts"], "2");
    assert_eq!(g.health("a").await["circuit"], "closed");
}

#[tokio::test]
async fn rate_limited_past_the_budget_is_a_429_with_retry_after() {
    let a = MockUpstream::start().await;
    let g = TestGateway::start_manual().await;
    g.settings(json!({"breaker": {"claude": {"failure_threshold": 1}}})).await;
    g.add("a", "anthropic", &a.url(), json!({})).await;
    a.push(Reply::anthropic_error(429, "rate_limit_error", "slow down").with_header("retry-after", "30"));
    let r = g.post("/v1/messages", &claude_body("m", false)).await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "30");
    // Later requests get a gateway 429 at once, with the remaining time, without an attempt.
    g.clock().advance(Duration::from_millis(10_500));
    let r = g.post("/v1/messages", &claude_body("m", false)).await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "20");
    assert_eq!(r.headers()["x-ccmesh-attempts"], "0");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert!(v["error"]["message"].as_str().unwrap().contains("rate-limited"), "{v}");
    assert_eq!(a.request_count(), 1);
    // Retry-After is capped by max_rate_limit_timeout (60 s); the probe's 429 re-enters the
    // backoff, which cannot wait 60 s within the budget: a gateway 429 at once.
    g.clock().advance(Duration::from_secs(20));
    a.push(Reply::anthropic_error(429, "rate_limit_error", "go away").with_header("retry-after", "86400"));
    let r = g.post("/v1/messages", &claude_body("m", false)).await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "60");
}

#[tokio::test]
async fn a_broken_endpoint_among_the_blocked_means_502() {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    let g = TestGateway::start_manual().await;
    g.settings(json!({"breaker": {"openai": {"failure_threshold": 1}}, "transient_retry_delay_ms": 0})).await;
    g.add("a", "openai", &a.url(), json!({})).await;
    g.add("b", "openai", &b.url(), json!({})).await;
    a.push(Reply::openai_error(429, "rate_limit_error", "slow").with_header("retry-after", "1"));
    b.push(Reply::openai_error(503, "server_error", "down"));
    // First request: a 429 (rate-limited), b 503 (broken); the last real answer comes back.
    let r = send_chat(&g).await;
    assert_eq!(r.status(), 503);
    // Now both are open and one is broken: 502, not a wait and not a 429.
    let r = send_chat(&g).await;
    assert_eq!(r.status(), 502);
    assert_eq!(g.clock().sleepers(), 0);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "circuit_open");
}

#[tokio::test]
async fn thresholds_follow_the_inbound_protocol_of_each_outcome() {
    // One endpoint (pass-through /v1/* uses claude settings for Anthropic-family clients).
    let a = MockUpstream::start().await;
    let g = TestGateway::start_manual().await;
    g.settings(
        json!({"transient_retry_delay_ms": 0, "breaker": {"claude": {"failure_threshold": 8, "min_requests": 100}}}),
    )
    .await;
    g.add("a", "anthropic", &a.url(), json!({})).await;
    a.set_default(Reply::anthropic_error(500, "api_error", "x"));
    // 5 claude failures (2 attempts each would double-count: use explicit to keep one attempt
    // per request? No: a single candidate gets 2 attempts) — count what health says.
    for _ in 0..3 {
        g.post("/v1/messages", &claude_body("m", false)).await;
    }
    let h = g.health("a").await;
    assert_eq!(h["consecutive_failures"], 6);
    assert_eq!(h["circuit"], "closed", "6 < claude's 8");
    // Lower claude's threshold at run time: the next outcome is judged by the new number,
    // and the counters were not reset by the change.
    g.settings(json!({"breaker": {"claude": {"failure_threshold": 7}}})).await;
    assert_eq!(g.health("a").await["consecutive_failures"], 6);
    let r = g.post("/v1/messages", &claude_body("m", false)).await;
    assert_eq!(r.status(), 500);
    let h = g.health("a").await;
    assert_eq!(h["circuit"], "open");
    assert_eq!(h["cooldown_remaining_ms"], 90_000, "claude's cooldown");
}

#[tokio::test]
async fn a_probe_whose_client_went_away_returns_its_permit() {
    let a = MockUpstream::start().await;
    let g = TestGateway::start_manual().await;
    g.settings(json!({"transient_retry_delay_ms": 0, "breaker": {"openai": {"failure_threshold": 1, "success_threshold": 1, "timeout_secs": 5}}})).await;
    g.add("a", "openai", &a.url(), json!({})).await;
    a.push(Reply::openai_error(500, "server_error", "x"));
    send_chat(&g).await;
    g.clock().advance(Duration::from_secs(5));
    // The probe hangs upstream; its client gives up.
    a.push(Reply::Stall);
    let probe = tokio::spawn({
        let (url, http) = (g.url.clone(), g.http.clone());
        async move { http.post(format!("{url}/v1/chat/completions")).json(&chat_body("m", false)).send().await }
    });
    a.wait_for_requests(2).await;
    assert_eq!(send_chat(&g).await.status(), 502, "the probe permit is taken");
    probe.abort();
    a.wait_for_cancellations(1).await;
    // The cancelled probe was neutral: the permit is free again and the next request probes.
    a.push(Reply::openai_chat("back"));
    let r = send_chat(&g).await;
    assert_eq!(r.status(), 200);
    assert_eq!(g.health("a").await["circuit"], "closed");
}
