//! Streams (SPEC §6): relayed as they arrive, preamble held back so early failures fail over
//! invisibly, protocol-native error events after that, terminal events required.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;

use crate::support::gateway::{TestGateway, chat_body, claude_body, responses_body};
use crate::support::mock::{self, MockUpstream, Reply, StreamEnd};

async fn body_text(r: reqwest::Response) -> String {
    String::from_utf8(r.bytes().await.unwrap().to_vec()).unwrap()
}

#[tokio::test]
async fn chunks_are_relayed_as_they_arrive() {
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("a", "openai", &up.url(), json!({})).await;
    // The fourth event is scripted to come 10 s after the third; the client must see the first
    // content before that, i.e. nothing is buffered behind the slow event.
    let mut events = mock::openai_chat_stream_events(&["one", "two", "three"]);
    let tail = events.split_off(3);
    let mut chunks: Vec<(Duration, bytes::Bytes)> = events.into_iter().map(|e| (Duration::ZERO, e.into())).collect();
    chunks.extend(
        tail.into_iter()
            .enumerate()
            .map(|(i, e)| (if i == 0 { Duration::from_secs(10) } else { Duration::ZERO }, e.into())),
    );
    up.push(Reply::Stream {
        status: 200,
        headers: vec![("content-type".into(), "text/event-stream".into())],
        head_delay: Duration::ZERO,
        chunks,
        end: StreamEnd::Complete,
    });
    let r = g.post("/v1/chat/completions", &chat_body("m", true)).await;
    assert_eq!(r.status(), 200);
    let mut stream = r.bytes_stream();
    let mut seen = String::new();
    while !seen.contains("\"two\"") {
        let chunk = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("content arrives before the slow event")
            .unwrap()
            .unwrap();
        seen.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert!(!seen.contains("[DONE]"));
}

#[tokio::test]
async fn a_cut_after_the_preamble_fails_over_invisibly() {
    for (format, path, body, reply, parts_in_preamble) in [
        ("anthropic", "/v1/messages", claude_body("m", true), Reply::anthropic_stream(&["x", "y"]), 2usize),
        ("openai", "/v1/chat/completions", chat_body("m", true), Reply::openai_chat_stream(&["x", "y"]), 1),
        ("responses", "/v1/responses", responses_body("m", true), Reply::responses_stream(&["x", "y"]), 2),
    ] {
        let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
        let g = TestGateway::start().await;
        g.add("a", format, &a.url(), json!({})).await;
        g.add("b", format, &b.url(), json!({})).await;
        a.set_default(reply.clone().cut_after(parts_in_preamble));
        b.push(reply.clone());
        let r = g.post(path, &body).await;
        assert_eq!(r.status(), 200, "{format}");
        assert_eq!(r.headers()["x-ccmesh-endpoint"], "b", "{format}");
        let text = body_text(r).await;
        let want: String = match &reply {
            Reply::Stream { chunks, .. } => {
                chunks.iter().map(|(_, c)| String::from_utf8(c.to_vec()).unwrap()).collect()
            }
            _ => unreachable!(),
        };
        assert_eq!(text, want, "{format}: the client sees exactly b's stream, nothing of a's");
    }
}

#[tokio::test]
async fn an_error_event_right_after_the_preamble_fails_over() {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &a.url(), json!({})).await;
    g.add("b", "anthropic", &b.url(), json!({})).await;
    let mut events = mock::anthropic_stream_events(&["x"]);
    events.truncate(2);
    events.push(mock::anthropic_stream_error_event("overloaded_error", "Overloaded"));
    a.push(Reply::sse(events));
    b.push(Reply::anthropic_stream(&["from b"]));
    let r = g.post("/v1/messages", &claude_body("m", true)).await;
    assert_eq!(r.headers()["x-ccmesh-endpoint"], "b");
    let text = body_text(r).await;
    assert!(text.contains("from b") && !text.contains("Overloaded"));
    assert_eq!(g.health("a").await["consecutive_failures"], 1);
}

#[tokio::test]
async fn a_first_byte_timeout_fails_over_invisibly() {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    let g = TestGateway::start().await;
    g.settings(json!({"timeouts": {"responses": {"first_byte_timeout_secs": 0.2}}})).await;
    g.add("a", "responses", &a.url(), json!({})).await;
    g.add("b", "responses", &b.url(), json!({})).await;
    // Headers at once, then silence.
    a.set_default(Reply::responses_stream(&["x"]).stall_after(0));
    b.push(Reply::responses_stream(&["from b"]));
    let r = g.post("/v1/responses", &responses_body("m", true)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ccmesh-endpoint"], "b");
    assert!(body_text(r).await.contains("from b"));
}

#[tokio::test]
async fn a_mid_stream_cut_ends_with_the_protocol_error_event_and_counts_as_failure() {
    for (format, path, body, reply, keep, needle) in [
        (
            "anthropic",
            "/v1/messages",
            claude_body("m", true),
            Reply::anthropic_stream(&["x", "y", "z"]),
            4usize,
            "event: error\ndata: {\"error\":{\"message\":",
        ),
        (
            "openai",
            "/v1/chat/completions",
            chat_body("m", true),
            Reply::openai_chat_stream(&["x", "y", "z"]),
            2,
            "data: {\"error\":{\"code\":\"upstream_stream_error\"",
        ),
        (
            "responses",
            "/v1/responses",
            responses_body("m", true),
            Reply::responses_stream(&["x", "y", "z"]),
            5,
            "event: response.failed",
        ),
    ] {
        let up = MockUpstream::start().await;
        let g = TestGateway::start().await;
        g.add("a", format, &up.url(), json!({})).await;
        up.push(reply.cut_after(keep));
        let r = g.post(path, &body).await;
        assert_eq!(r.status(), 200, "{format}");
        let text = body_text(r).await;
        assert!(text.contains(needle), "{format}: {text}");
        assert!(!text.contains("[DONE]"), "{format}");
        let h = g.health("a").await;
        assert_eq!(h["consecutive_failures"], 1, "{format}");
        assert!(h["last_error"].as_str().unwrap().contains("mid-stream"), "{format}: {h}");
    }
}

#[tokio::test]
async fn a_stream_without_its_terminal_event_is_a_failure_but_chat_finish_is_tolerated() {
    // Anthropic stream that closes cleanly before message_stop.
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &up.url(), json!({})).await;
    let mut events = mock::anthropic_stream_events(&["x"]);
    events.pop();
    up.push(Reply::sse(events));
    let text = body_text(g.post("/v1/messages", &claude_body("m", true)).await).await;
    assert!(text.contains("event: error"), "{text}");
    assert_eq!(g.health("a").await["consecutive_failures"], 1);

    // Chat stream that delivered finish_reason and closed without [DONE]: complete.
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("o", "openai", &up.url(), json!({})).await;
    let events: Vec<String> =
        mock::openai_chat_stream_events(&["x"]).into_iter().filter(|e| !e.contains("[DONE]")).collect();
    up.push(Reply::sse(events));
    let text = body_text(g.post("/v1/chat/completions", &chat_body("m", true)).await).await;
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let h = g.health("o").await;
    assert_eq!((h["consecutive_failures"].clone(), h["requests"].clone()), (json!(0), json!(1)));
}

#[tokio::test]
async fn an_idle_stream_is_ended_with_an_error_event() {
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.settings(json!({"timeouts": {"claude": {"idle_timeout_secs": 0.2}}})).await;
    g.add("a", "anthropic", &up.url(), json!({})).await;
    up.push(Reply::anthropic_stream(&["x", "y"]).stall_after(4));
    let text = body_text(g.post("/v1/messages", &claude_body("m", true)).await).await;
    assert!(text.contains("event: error") && text.contains("idle"), "{text}");
    up.wait_for_cancellations(1).await;
}

#[tokio::test]
async fn the_idle_timeout_counts_from_the_last_chunk_not_from_the_start() {
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    // Chunks 0.1 s apart for ~0.8 s in all: four times the idle limit, never idle for it.
    g.settings(json!({"timeouts": {"claude": {"idle_timeout_secs": 0.2}}})).await;
    g.add("a", "anthropic", &up.url(), json!({})).await;
    up.push(Reply::anthropic_stream(&["a", "b", "c", "d", "e"]).paced(Duration::from_millis(100)));
    let text = body_text(g.post("/v1/messages", &claude_body("m", true)).await).await;
    assert!(text.contains("event: message_stop") && !text.contains("event: error"), "{text}");
    for part in ["a", "b", "c", "d", "e"] {
        assert!(text.contains(&format!("\"text\":\"{part}\"")), "{part} in {text}");
    }
}

#[tokio::test]
async fn a_client_that_goes_away_cancels_the_upstream_request() {
    // Before any byte reached the client.
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &up.url(), json!({})).await;
    up.push(Reply::Stall);
    let request = tokio::spawn({
        let (url, http) = (g.url.clone(), g.http.clone());
        async move { http.post(format!("{url}/v1/messages")).json(&claude_body("m", true)).send().await }
    });
    up.wait_for_requests(1).await;
    request.abort();
    assert_eq!(up.wait_for_cancellations(1).await, 1);

    // In the middle of a stream.
    up.push(Reply::anthropic_stream(&["x", "y"]).stall_after(4));
    let r = g.post("/v1/messages", &claude_body("m", true)).await;
    let mut stream = r.bytes_stream();
    stream.next().await.unwrap().unwrap();
    drop(stream);
    assert_eq!(up.wait_for_cancellations(2).await, 2);
    // Neutral: the breaker saw no failure.
    let h = g.health("a").await;
    assert_eq!(h["consecutive_failures"], 0);
}

#[tokio::test]
async fn hundreds_of_concurrent_streams_to_one_endpoint_do_not_queue() {
    // HTTP/1.1 with a large pool: 256 simultaneous streams to one upstream. Every upstream
    // stream stalls after its first event, so the only way all 256 requests can reach the
    // upstream is if none waits behind another (an HTTP/2 connection capped at 100 streams, or a
    // small pool, would hold the rest back).
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("a", "openai", &up.url(), json!({})).await;
    up.set_default(Reply::openai_chat_stream(&["x"]).stall_after(2));
    let n = 256;
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (url, http) = (g.url.clone(), g.http.clone());
        tasks.push(tokio::spawn(async move {
            let r = http.post(format!("{url}/v1/chat/completions")).json(&chat_body("m", true)).send().await.unwrap();
            let mut stream = r.bytes_stream();
            stream.next().await.unwrap().unwrap();
            stream
        }));
    }
    up.wait_for_requests(n).await;
    let mut streams = Vec::new();
    for t in tasks {
        streams.push(t.await.unwrap());
    }
    assert!(up.connection_count() >= n as u64);
    drop(streams);
    up.wait_for_cancellations(n).await;
}
