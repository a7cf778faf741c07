//! The faults an independent failover benchmark scripts, one by one, through the scripted mock
//! upstream (SPEC §3, §4, §6, §15): what the client receives — a whole, well-formed answer whose
//! text is what the upstreams produced, or a native error — and how many attempts each upstream
//! saw. Two Anthropic endpoints, `a` first; the client streams unless a case says otherwise.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::gateway::{TestGateway, chat_body, claude_body};
use crate::support::mock::{self, MockUpstream, Reply, StreamEnd};

async fn two_endpoints(settings: Value) -> (TestGateway, MockUpstream, MockUpstream) {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    let g = TestGateway::start().await;
    if settings != Value::Null {
        g.settings(settings).await;
    }
    g.add("a", "anthropic", &a.url(), json!({})).await;
    g.add("b", "anthropic", &b.url(), json!({})).await;
    b.set_default(Reply::anthropic_stream(&["from b"]));
    (g, a, b)
}

/// What a streaming Anthropic client got: the status, the text, and whether the stream was whole
/// (one message_start, one message_stop, no error event).
async fn stream(g: &TestGateway) -> (u16, String, bool, reqwest::header::HeaderMap) {
    let r = g.post("/v1/messages", &claude_body("m", true)).await;
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let body = String::from_utf8(r.bytes().await.unwrap().to_vec()).unwrap();
    let mut text = String::new();
    let (mut starts, mut stops, mut errors) = (0, 0, 0);
    for block in body.split("\n\n") {
        let data = block.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or("");
        match block.lines().find_map(|l| l.strip_prefix("event: ")) {
            Some("message_start") => starts += 1,
            Some("message_stop") => stops += 1,
            Some("error") => errors += 1,
            Some("content_block_delta") => {
                let v: Value = serde_json::from_str(data).unwrap();
                text.push_str(v["delta"]["text"].as_str().unwrap_or(""));
            }
            _ => {}
        }
    }
    if status != 200 {
        text = body;
    }
    (status, text, starts == 1 && stops == 1 && errors == 0, headers)
}

fn words(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("w{i} ")).collect()
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[tokio::test]
async fn fault_429_with_retry_after_is_waited_out_then_the_same_endpoint_answers() {
    let a = MockUpstream::start().await;
    let g = TestGateway::start_manual().await;
    g.add("a", "anthropic", &a.url(), json!({})).await;
    a.push(Reply::anthropic_error(429, "rate_limit_error", "slow down").with_header("retry-after", "1"));
    a.push(Reply::anthropic_stream(&["after the wait"]));
    let request = tokio::spawn({
        let (url, http) = (g.url.clone(), g.http.clone());
        async move { http.post(format!("{url}/v1/messages")).json(&claude_body("m", true)).send().await.unwrap() }
    });
    // The gateway waits on its clock; nothing is resent into the same limit meanwhile.
    g.clock().wait_for_sleepers(1).await;
    assert_eq!(a.request_count(), 1);
    g.clock().advance(Duration::from_secs(1));
    let r = request.await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("after the wait"));
    assert_eq!(a.request_count(), 2);
}

#[tokio::test]
async fn fault_500_once_is_answered_by_the_next_endpoint() {
    let (g, a, b) = two_endpoints(Value::Null).await;
    a.push(Reply::anthropic_error(500, "api_error", "boom"));
    let (status, text, whole, headers) = stream(&g).await;
    assert_eq!((status, text.as_str(), whole), (200, "from b", true));
    assert_eq!(headers["x-ccmesh-attempts"], "2");
    assert_eq!((a.request_count(), b.request_count()), (1, 1));
}

#[tokio::test]
async fn fault_503_persistent_costs_one_attempt_then_traffic_stays_on_the_next_endpoint() {
    let (g, a, b) = two_endpoints(Value::Null).await;
    a.set_default(Reply::anthropic_error(503, "overloaded_error", "down"));
    for _ in 0..3 {
        let (status, text, whole, _) = stream(&g).await;
        assert_eq!((status, text.as_str(), whole), (200, "from b", true));
    }
    assert_eq!((a.request_count(), b.request_count()), (1, 3));
}

#[tokio::test]
async fn fault_tcp_reset_before_the_headers_is_retried_once_then_moves_on() {
    let (g, a, b) = two_endpoints(json!({"transient_retry_delay_ms": 0})).await;
    a.set_default(Reply::Reset);
    let (status, text, whole, _) = stream(&g).await;
    assert_eq!((status, text.as_str(), whole), (200, "from b", true));
    assert_eq!((a.request_count(), b.request_count()), (2, 1));
}

#[tokio::test]
async fn fault_silent_upstream_costs_one_timeout_not_two() {
    let (g, a, b) = two_endpoints(json!({"timeouts": {"claude": {"first_byte_timeout_secs": 0.3}}})).await;
    a.set_default(Reply::Stall);
    let (status, text, whole, _) = stream(&g).await;
    assert_eq!((status, text.as_str(), whole), (200, "from b", true));
    assert_eq!((a.request_count(), b.request_count()), (1, 1));
}

#[tokio::test]
async fn fault_slow_first_token_fails_over_invisibly_after_the_preamble() {
    let settings = json!({"timeouts": {"claude": {"first_byte_timeout_secs": 30, "first_token_timeout_secs": 0.3}}});
    let (g, a, b) = two_endpoints(settings).await;
    // message_start and ping at once, then nothing.
    a.push(Reply::anthropic_stream(&["late"]).stall_after(2));
    let (status, text, whole, headers) = stream(&g).await;
    assert_eq!((status, text.as_str(), whole), (200, "from b", true));
    assert_eq!((a.request_count(), b.request_count()), (1, 1));
    let id = headers["x-ccmesh-request-id"].to_str().unwrap();
    let record = g.record(id).await;
    assert_eq!(record["attempts"][0]["error_kind"], "first_token_timeout", "{record}");
    assert!(record["first_token_ms"].as_f64().is_some(), "{record}");
}

#[tokio::test]
async fn fault_stream_cut_after_40_chunks_is_resumed_on_the_next_endpoint() {
    let (g, a, b) = two_endpoints(Value::Null).await;
    let said = words(60);
    // message_start, ping, content_block_start, then 40 deltas.
    a.push(Reply::anthropic_stream(&refs(&said)).cut_after(3 + 40));
    let (status, text, whole, _) = stream(&g).await;
    assert_eq!(status, 200);
    assert_eq!(text, format!("{}from b", said[..40].concat()));
    assert!(whole);
    assert_eq!((a.request_count(), b.request_count()), (1, 1));
}

#[tokio::test]
async fn fault_stalled_stream_is_cut_by_the_idle_timeout_and_resumed() {
    let (g, a, b) = two_endpoints(json!({"timeouts": {"claude": {"idle_timeout_secs": 0.3}}})).await;
    let said = words(20);
    a.push(Reply::anthropic_stream(&refs(&said)).stall_after(3 + 10));
    let (status, text, whole, _) = stream(&g).await;
    assert_eq!((status, text, whole), (200, format!("{}from b", said[..10].concat()), true));
    assert_eq!((a.request_count(), b.request_count()), (1, 1));
}

#[tokio::test]
async fn fault_malformed_chunk_is_not_relayed_and_the_answer_is_resumed() {
    let (g, a, b) = two_endpoints(Value::Null).await;
    let said = words(5);
    let mut events = mock::anthropic_stream_events(&refs(&said));
    events.truncate(3 + 5);
    events.push(
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_del\n\n"
            .into(),
    );
    a.push(Reply::sse(events));
    let (status, text, whole, _) = stream(&g).await;
    assert_eq!((status, text, whole), (200, format!("{}from b", said.concat()), true));

    // Before any content, the same damage fails over invisibly.
    assert_eq!((a.request_count(), b.request_count()), (1, 1));
    let (g, a, b) = two_endpoints(Value::Null).await;
    let mut events = mock::anthropic_stream_events(&["x"]);
    events.truncate(2);
    events.push("event: content_block_start\ndata: {not json at all}}\n\n".into());
    a.push(Reply::sse(events));
    let (status, text, whole, _) = stream(&g).await;
    assert_eq!((status, text.as_str(), whole), (200, "from b", true));
    assert_eq!((a.request_count(), b.request_count()), (1, 1));
}

#[tokio::test]
async fn fault_stream_without_its_terminal_event() {
    // Closed cleanly in the middle of the text: resumed.
    let (g, a, b) = two_endpoints(Value::Null).await;
    let said = words(6);
    let mut events = mock::anthropic_stream_events(&refs(&said));
    events.truncate(3 + 6);
    a.push(Reply::sse(events));
    let (status, text, whole, _) = stream(&g).await;
    assert_eq!((status, text, whole), (200, format!("{}from b", said.concat()), true));
    assert_eq!(b.request_count(), 1);

    // Closed after the answer finished (stop reason sent), only message_stop missing: the answer
    // is not continued (it has ended), and the client learns the stream was incomplete.
    let (g, a, b) = two_endpoints(Value::Null).await;
    let mut events = mock::anthropic_stream_events(&["all of it"]);
    events.pop();
    a.push(Reply::sse(events));
    let (status, text, whole, _) = stream(&g).await;
    assert_eq!((status, text.as_str(), whole), (200, "all of it", false));
    assert_eq!(b.request_count(), 0);
    assert_eq!(g.health("a").await["consecutive_failures"], 1);
}

#[tokio::test]
async fn fault_context_length_exceeded_moves_on_without_counting_against_the_endpoint() {
    let (g, a, _b) = two_endpoints(Value::Null).await;
    a.push(Reply::anthropic_error(400, "invalid_request_error", "prompt is too long: 250000 tokens > 200000 maximum"));
    let (status, text, whole, _) = stream(&g).await;
    assert_eq!((status, text.as_str(), whole), (200, "from b", true));
    assert_eq!(g.health("a").await["consecutive_failures"], 0);

    // When no endpoint can take the prompt, the client gets the first such answer unchanged.
    let (g, a, b) = two_endpoints(Value::Null).await;
    let too_long = |m: &str| {
        Reply::json(
            400,
            json!({"error": {"message": m, "type": "invalid_request_error", "code": "context_length_exceeded"}}),
        )
    };
    a.push(too_long("first: too long"));
    b.push(too_long("second: too long"));
    let r = g.post("/v1/messages", &claude_body("m", true)).await;
    assert_eq!(r.status(), 400);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["message"], "first: too long");
    assert_eq!((a.request_count(), b.request_count()), (1, 1));
    for e in ["a", "b"] {
        assert_eq!(g.health(e).await["consecutive_failures"], 0, "{e}");
    }

    // With the fallback off, the first 400 is the answer.
    let (g, a, b) = two_endpoints(json!({"context_window_fallback": false})).await;
    a.push(too_long("too long"));
    let r = g.post("/v1/messages", &claude_body("m", true)).await;
    assert_eq!(r.status(), 400);
    assert_eq!(b.request_count(), 0);
}

#[tokio::test]
async fn a_mistyped_model_opens_no_breaker_and_the_first_404_is_returned() {
    let (g, a, b) = two_endpoints(json!({"breaker": {"claude": {"failure_threshold": 1}}})).await;
    let not_found =
        |who: &str| Reply::anthropic_error(404, "not_found_error", &format!("model: claude-sonet-4-5 ({who})"));
    a.set_default(not_found("a"));
    b.set_default(not_found("b"));
    for _ in 0..3 {
        let r = g.post("/v1/messages", &claude_body("claude-sonet-4-5", false)).await;
        assert_eq!(r.status(), 404);
        let v: Value = r.json().await.unwrap();
        assert!(v["error"]["message"].as_str().unwrap().ends_with("(a)"), "{v}");
    }
    for e in ["a", "b"] {
        let h = g.health(e).await;
        assert_eq!((h["circuit"].clone(), h["consecutive_failures"].clone()), (json!("closed"), json!(0)), "{e}");
    }
    // Each endpoint was asked once per request: out of the rest of the request after its 404.
    assert_eq!((a.request_count(), b.request_count()), (3, 3));
}

#[tokio::test]
async fn fault_content_filter_is_a_success_returned_unchanged() {
    let (g, a, b) = two_endpoints(Value::Null).await;
    let mut events = mock::anthropic_stream_events(&["I can't help with that."]);
    for e in &mut events {
        *e = e.replace("\"end_turn\"", "\"refusal\"");
    }
    a.push(Reply::sse(events));
    let (status, text, whole, _) = stream(&g).await;
    assert_eq!((status, text.as_str(), whole), (200, "I can't help with that.", true));
    assert_eq!((a.request_count(), b.request_count()), (1, 0));

    // A Chat client in front of an OpenAI endpoint that filtered the answer.
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("o", "openai", &up.url(), json!({})).await;
    let mut events = mock::openai_chat_stream_events(&["partial"]);
    for e in &mut events {
        *e = e.replace("\"finish_reason\":\"stop\"", "\"finish_reason\":\"content_filter\"");
    }
    up.push(Reply::sse(events.clone()));
    let r = g.post("/v1/chat/completions", &chat_body("m", true)).await;
    assert_eq!(r.status(), 200);
    let body = r.text().await.unwrap();
    assert_eq!(body, events.concat(), "relayed unchanged");
    assert_eq!(g.health("o").await["consecutive_failures"], 0);
}

#[tokio::test]
async fn fault_flapping_primary_under_priority_gets_traffic_back_once_its_probe_succeeds() {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    let g = TestGateway::start_manual().await;
    g.settings(json!({
        "routing_strategy": "priority",
        "breaker": {"claude": {"failure_threshold": 1, "success_threshold": 1, "timeout_secs": 10}},
    }))
    .await;
    g.add("a", "anthropic", &a.url(), json!({})).await;
    g.add("b", "anthropic", &b.url(), json!({})).await;
    a.set_default(Reply::anthropic_stream(&["from a"]));
    b.set_default(Reply::anthropic_stream(&["from b"]));
    for round in 0..2 {
        a.push(Reply::anthropic_error(500, "api_error", "flap"));
        assert_eq!(stream(&g).await.1, "from b", "round {round}: a fails, b answers");
        assert_eq!(g.health("a").await["circuit"], "open");
        assert_eq!(stream(&g).await.1, "from b", "round {round}: a is open and cooling down");
        g.clock().advance(Duration::from_secs(10));
        assert_eq!(stream(&g).await.1, "from a", "round {round}: the probe succeeds, traffic is back");
        assert_eq!(g.health("a").await["circuit"], "closed");
    }
}

#[tokio::test]
async fn failover_accounting_counts_each_move_and_the_trail_holds_every_attempt() {
    let (g, a, b) = two_endpoints(Value::Null).await;
    a.push(Reply::anthropic_error(500, "api_error", "boom"));
    let (_, _, _, headers) = stream(&g).await;
    // Now b is current: a stream from b cut mid-way resumes on a.
    b.push(Reply::anthropic_stream(&["half ", "never"]).cut_after(4));
    a.push(Reply::anthropic_stream(&["and the rest"]));
    let (_, text, whole, resumed) = stream(&g).await;
    assert_eq!((text.as_str(), whole), ("half and the rest", true));

    let record = g.record(headers["x-ccmesh-request-id"].to_str().unwrap()).await;
    let trail: Vec<_> = record["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["endpoint"].clone(), a["status"].clone(), a["classification"].clone()))
        .collect();
    assert_eq!(trail, [(json!("a"), json!(500), json!("failure")), (json!("b"), json!(200), json!("success"))]);
    let record = g.record(resumed["x-ccmesh-request-id"].to_str().unwrap()).await;
    assert_eq!(record["attempts"].as_array().unwrap().len(), 2, "{record}");

    let (_, metrics) = g.api(reqwest::Method::GET, "/metrics", None).await;
    let metrics = metrics.as_str().unwrap().to_string();
    for line in [
        "ccmesh_failovers_total{protocol=\"claude\",from=\"a\",to=\"b\"} 1",
        "ccmesh_failovers_total{protocol=\"claude\",from=\"b\",to=\"a\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} missing in\n{metrics}");
    }
}

#[tokio::test]
async fn retry_rules_decide_before_the_built_in_table() {
    // A relay that says "model busy" with a 400: a rule sends it to the next endpoint, neutral.
    let rules = json!({"retry_rules": [
        {"status": 400, "body": "model busy", "action": "next", "breaker": "neutral"},
        {"status": "500-599", "body": {"regex": "quota.*exceeded"}, "action": "return", "breaker": "failure"},
    ]});
    let (g, a, _b) = two_endpoints(rules.clone()).await;
    a.push(Reply::anthropic_error(400, "invalid_request_error", "model busy, try later"));
    let (status, text, whole, _) = stream(&g).await;
    assert_eq!((status, text.as_str(), whole), (200, "from b", true));
    assert_eq!(g.health("a").await["consecutive_failures"], 0);

    // A 503 that the second rule returns as it is (the built-in table would fail over).
    let (g, a, b) = two_endpoints(rules.clone()).await;
    a.push(Reply::anthropic_error(503, "api_error", "daily quota was exceeded"));
    let r = g.post("/v1/messages", &claude_body("m", true)).await;
    assert_eq!(r.status(), 503);
    assert_eq!(b.request_count(), 0);
    assert_eq!(g.health("a").await["consecutive_failures"], 1);

    // A rule's `same` retries the same endpoint.
    let (g, a, b) = two_endpoints(json!({
        "transient_retry_delay_ms": 0,
        "retry_rules": [{"status": 409, "action": "same", "breaker": "neutral"}],
    }))
    .await;
    a.push(Reply::anthropic_error(409, "invalid_request_error", "conflict"));
    a.push(Reply::anthropic_stream(&["second try"]));
    let (status, text, _, _) = stream(&g).await;
    assert_eq!((status, text.as_str()), (200, "second try"));
    assert_eq!((a.request_count(), b.request_count()), (2, 0));

    // Invalid rules are refused with a message naming the problem.
    let (status, v) = g
        .api(
            reqwest::Method::PATCH,
            "/api/settings",
            Some(json!({"retry_rules": [{"status": 400, "action": "sideways"}]})),
        )
        .await;
    assert_eq!(status, 400, "{v}");
    assert!(v.to_string().contains("action"), "{v}");
}

#[tokio::test]
async fn a_stream_end_cut_keeps_b_in_reserve_when_the_answer_is_already_complete() {
    // Cut after the terminal event: nothing to rescue, nothing resent.
    let (g, a, b) = two_endpoints(Value::Null).await;
    a.push(Reply::anthropic_stream(&["whole"]).with_end(StreamEnd::Cut));
    let (status, text, whole, _) = stream(&g).await;
    assert_eq!((status, text.as_str(), whole), (200, "whole", true));
    assert_eq!(b.request_count(), 0);
}

/// A JSON answer whose head arrives at once and whose body comes as `parts`, each after its delay.
fn json_in_parts(parts: Vec<(Duration, String)>, end: StreamEnd) -> Reply {
    Reply::Stream {
        status: 200,
        headers: vec![("content-type".to_owned(), "application/json".to_owned())],
        head_delay: Duration::ZERO,
        chunks: parts.into_iter().map(|(delay, part)| (delay, part.into())).collect(),
        end,
    }
}

#[tokio::test]
async fn fault_a_body_that_stops_after_the_head_costs_one_request_timeout() {
    let (g, a, b) = two_endpoints(json!({"timeouts": {"claude": {"request_timeout_secs": 0.3}}})).await;
    b.set_default(Reply::json(200, mock::anthropic_message_body("from b")));
    let whole = mock::anthropic_message_body("from a").to_string();
    let half = whole[..whole.len() / 2].to_owned();
    a.set_default(json_in_parts(vec![(Duration::ZERO, half)], StreamEnd::silent_stall()));
    let r = g.post("/v1/messages", &claude_body("m", false)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ccmesh-endpoint"], "b");
    let id = r.headers()["x-ccmesh-request-id"].to_str().unwrap().to_owned();
    let record = g.record(&id).await;
    assert_eq!(record["attempts"][0]["error_kind"], "timeout", "{record}");
    assert!(record["attempts"][0]["error"].as_str().unwrap().contains("body did not complete in time"), "{record}");
    assert_eq!((a.request_count(), b.request_count()), (1, 1));
}

/// A streaming request answered with a whole JSON body: the head comes within the first-byte
/// timeout, and the body then has the request's timeout, not the first byte's.
#[tokio::test]
async fn fault_a_stream_answered_as_json_reads_its_body_under_the_request_timeout() {
    let settings = json!({"timeouts": {"claude": {"first_byte_timeout_secs": 0.2, "request_timeout_secs": 30}}});
    let (g, a, b) = two_endpoints(settings).await;
    let whole = mock::anthropic_message_body("from a").to_string();
    let (first, rest) = whole.split_at(whole.len() / 2);
    a.set_default(json_in_parts(
        vec![(Duration::ZERO, first.to_owned()), (Duration::from_millis(600), rest.to_owned())],
        StreamEnd::Complete,
    ));
    let r = g.post("/v1/messages", &claude_body("m", true)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ccmesh-endpoint"], "a");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["content"][0]["text"], "from a", "{body}");
    assert_eq!((a.request_count(), b.request_count()), (1, 0));
}
