//! Stream resume (SPEC §6, §15.3): a stream cut after content reached the client is continued on
//! the next candidate and relayed into the same client stream — one preamble, one terminal
//! event, the delivered text never repeated, usage summed — or, when it cannot be, ended with
//! the protocol's error event as before.

use serde_json::{Value, json};

use crate::sdk_clients::run_script_with;
use crate::support::gateway::{TestGateway, chat_body, claude_body, responses_body};
use crate::support::mock::{self, INPUT_TOKENS, MockUpstream, OUTPUT_TOKENS, Reply};

/// The first upstream's part of the answer, and the continuation that restates its end.
const SAID: [&str; 2] = ["The quick brown fox ", "jumps over the lazy dog, "];
const CONTINUATION: &str = "over the lazy dog, and then it runs far away into the woods.";
const WHOLE: &str = "The quick brown fox jumps over the lazy dog, and then it runs far away into the woods.";

/// Events of a stream before its text deltas, per format (the cut keeps them and `SAID`).
fn preamble_events(format: &str) -> usize {
    match format {
        "anthropic" => 3, // message_start, ping, content_block_start
        "openai" => 1,    // the role chunk
        "responses" => 4, // created, in_progress, output_item.added, content_part.added
        _ => unreachable!(),
    }
}

/// A stream of `format` that sends `SAID` and is cut there.
fn cut_stream(format: &str) -> Reply {
    let reply = match format {
        "anthropic" => Reply::anthropic_stream(&[SAID[0], SAID[1], "never sent"]),
        "openai" => Reply::openai_chat_stream(&[SAID[0], SAID[1], "never sent"]),
        "responses" => Reply::responses_stream(&[SAID[0], SAID[1], "never sent"]),
        _ => unreachable!(),
    };
    reply.cut_after(preamble_events(format) + 2)
}

fn continuation(format: &str) -> Reply {
    match format {
        "anthropic" => Reply::anthropic_stream(&[CONTINUATION]),
        "openai" => Reply::openai_chat_stream(&[CONTINUATION]),
        "responses" => Reply::responses_stream(&[CONTINUATION]),
        _ => unreachable!(),
    }
}

async fn gateway_with(format: &str, settings: Value) -> (TestGateway, MockUpstream, MockUpstream) {
    let (a, b) = (MockUpstream::start().await, MockUpstream::start().await);
    let g = TestGateway::start().await;
    if settings != Value::Null {
        g.settings(settings).await;
    }
    g.add("a", format, &a.url(), json!({})).await;
    g.add("b", format, &b.url(), json!({})).await;
    (g, a, b)
}

/// The SSE events of a client stream, as (event name, data).
fn sse_events(text: &str) -> Vec<(Option<String>, Value)> {
    let mut out = Vec::new();
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let mut name = None;
        let mut data = String::new();
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("event: ") {
                name = Some(v.to_string());
            } else if let Some(v) = line.strip_prefix("data: ") {
                data.push_str(v);
            }
        }
        let value = if data == "[DONE]" { json!("[DONE]") } else { serde_json::from_str(&data).unwrap() };
        out.push((name, value));
    }
    out
}

/// The text of an Anthropic client stream, and every delta's block index.
fn anthropic_text(events: &[(Option<String>, Value)]) -> (String, Vec<u64>) {
    let mut text = String::new();
    let mut indices = Vec::new();
    for (name, data) in events {
        if name.as_deref() == Some("content_block_delta") {
            text.push_str(data["delta"]["text"].as_str().unwrap());
            indices.push(data["index"].as_u64().unwrap());
        }
    }
    (text, indices)
}

fn count(events: &[(Option<String>, Value)], name: &str) -> usize {
    events.iter().filter(|(n, _)| n.as_deref() == Some(name)).count()
}

async fn request_id_and_text(r: reqwest::Response) -> (String, String) {
    assert_eq!(r.status(), 200);
    let id = r.headers()["x-ccmesh-request-id"].to_str().unwrap().to_string();
    (id, String::from_utf8(r.bytes().await.unwrap().to_vec()).unwrap())
}

#[tokio::test]
async fn a_cut_anthropic_stream_is_continued_on_the_next_endpoint_with_a_prefill() {
    let (g, a, b) = gateway_with("anthropic", Value::Null).await;
    a.push(cut_stream("anthropic"));
    b.push(continuation("anthropic"));
    let (id, text) = request_id_and_text(g.post("/v1/messages", &claude_body("m", true)).await).await;

    let events = sse_events(&text);
    let (said, indices) = anthropic_text(&events);
    assert_eq!(said, WHOLE, "{text}");
    assert!(indices.iter().all(|i| *i == 0), "the continuation goes on in the open block: {indices:?}");
    assert_eq!((count(&events, "message_start"), count(&events, "message_stop")), (1, 1), "{text}");
    assert_eq!(count(&events, "error"), 0, "{text}");
    assert_eq!(count(&events, "content_block_start"), 1, "{text}");
    let delta = events.iter().find(|(n, _)| n.as_deref() == Some("message_delta")).unwrap();
    // Usage summed: the cut attempt's input and the continuation's; the cut attempt never said
    // how much output it made (message_start's count is a placeholder).
    assert_eq!(delta.1["usage"]["input_tokens"], 2 * INPUT_TOKENS, "{text}");
    assert_eq!(delta.1["usage"]["output_tokens"], OUTPUT_TOKENS, "{text}");

    // The continuation request: the original turn, then the delivered text as an assistant
    // prefill (trailing space dropped: Anthropic refuses it).
    let sent = b.last_request().unwrap().json();
    let messages = sent["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{sent}");
    assert_eq!(messages[0], json!({"role": "user", "content": "hi"}));
    assert_eq!(messages[1], json!({"role": "assistant", "content": "The quick brown fox jumps over the lazy dog,"}));
    assert_eq!(sent["stream"], true);
    assert_eq!((a.request_count(), b.request_count()), (1, 1));

    // The trail: the cut attempt a failure, the continuation the success that served it.
    let record = g.record(&id).await;
    let attempts = record["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{record}");
    assert_eq!(
        (attempts[0]["endpoint"].as_str(), attempts[0]["classification"].as_str()),
        (Some("a"), Some("failure"))
    );
    assert!(attempts[0]["resume"].as_str().unwrap().starts_with("cut: "), "{record}");
    assert_eq!(
        (attempts[1]["endpoint"].as_str(), attempts[1]["classification"].as_str()),
        (Some("b"), Some("success"))
    );
    let note = attempts[1]["resume"].as_str().unwrap();
    assert!(note.contains("45 characters") && note.contains("assistant prefill"), "{note}");
    assert_eq!(record["endpoint"], "b");
    assert_eq!(record["status"], 200);
    assert_eq!(record["error"], Value::Null, "{record}");
    assert_eq!(record["tokens"]["input"], 2 * INPUT_TOKENS, "{record}");
    assert_eq!(record["tokens"]["output"], OUTPUT_TOKENS, "{record}");
    assert_eq!(g.health("a").await["consecutive_failures"], 1);
    assert_eq!(g.health("b").await["consecutive_failures"], 0);
    // b served the answer: the current endpoint moves to it (SPEC §3).
    let (_, current) = g.api(reqwest::Method::GET, "/api/current", None).await;
    assert_eq!(current["claude"], "b", "{current}");
}

#[tokio::test]
async fn chat_and_responses_streams_are_continued_with_a_user_turn() {
    for (format, path, body) in [
        ("openai", "/v1/chat/completions", chat_body("m", true)),
        ("responses", "/v1/responses", responses_body("m", true)),
    ] {
        let (g, a, b) = gateway_with(format, Value::Null).await;
        a.push(cut_stream(format));
        b.push(continuation(format));
        let (_, text) = request_id_and_text(g.post(path, &body).await).await;
        let events = sse_events(&text);
        let said: String = events
            .iter()
            .filter_map(|(_, d)| match format {
                "openai" => d["choices"][0]["delta"]["content"].as_str(),
                _ => d["delta"].as_str().filter(|_| d["type"] == "response.output_text.delta"),
            })
            .collect();
        assert_eq!(said, WHOLE, "{format}: {text}");
        if format == "openai" {
            let finishes = events.iter().filter(|(_, d)| d["choices"][0]["finish_reason"].is_string()).count();
            assert_eq!(finishes, 1, "{text}");
            assert_eq!(events.last().unwrap().1, json!("[DONE]"));
            let ids: std::collections::HashSet<_> =
                events.iter().filter_map(|(_, d)| d["id"].as_str().map(str::to_string)).collect();
            assert_eq!(ids.len(), 1, "one message id: {ids:?}");
        } else {
            assert_eq!((count(&events, "response.created"), count(&events, "response.completed")), (1, 1), "{text}");
            let done = events.iter().find(|(n, _)| n.as_deref() == Some("response.completed")).unwrap();
            let output = &done.1["response"]["output"][0]["content"][0]["text"];
            assert_eq!(output, WHOLE, "{text}");
        }
        // The continuation request: the delivered text as an assistant turn, then a user turn
        // quoting its end and asking for the rest.
        let sent = b.last_request().unwrap().json();
        let turns = if format == "openai" { &sent["messages"] } else { &sent["input"] };
        let turns = turns.as_array().unwrap();
        let n = turns.len();
        assert_eq!(turns[n - 2]["role"], "assistant", "{sent}");
        assert_eq!(turns[n - 2]["content"], "The quick brown fox jumps over the lazy dog, ", "{sent}");
        assert_eq!(turns[n - 1]["role"], "user", "{sent}");
        let ask = turns[n - 1]["content"].as_str().unwrap();
        assert!(ask.contains("cut off") && ask.ends_with("over the lazy dog, "), "{ask}");
    }
}

#[tokio::test]
async fn a_request_with_thinking_is_continued_without_a_prefill() {
    let (g, a, b) = gateway_with("anthropic", Value::Null).await;
    a.push(cut_stream("anthropic"));
    b.push(continuation("anthropic"));
    let mut body = claude_body("m", true);
    body["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
    let (_, text) = request_id_and_text(g.post("/v1/messages", &body).await).await;
    assert_eq!(anthropic_text(&sse_events(&text)).0, WHOLE, "{text}");
    let sent = b.last_request().unwrap().json();
    let messages = sent["messages"].as_array().unwrap();
    assert_eq!(messages.last().unwrap()["role"], "user", "{sent}");
    assert_eq!(messages[1]["role"], "assistant", "{sent}");
}

#[tokio::test]
async fn a_refused_prefill_is_retried_once_as_a_user_turn_within_one_attempt() {
    let (g, a, b) = gateway_with("anthropic", Value::Null).await;
    a.push(cut_stream("anthropic"));
    b.push(Reply::anthropic_error(
        400,
        "invalid_request_error",
        "This model does not support assistant message prefill. The conversation must end with a user message.",
    ));
    b.push(continuation("anthropic"));
    let (id, text) = request_id_and_text(g.post("/v1/messages", &claude_body("m", true)).await).await;
    assert_eq!(anthropic_text(&sse_events(&text)).0, WHOLE, "{text}");

    let sent = b.requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].json()["messages"].as_array().unwrap().last().unwrap()["role"], "assistant");
    assert_eq!(sent[1].json()["messages"].as_array().unwrap().last().unwrap()["role"], "user");
    // Neutral for b; the two together one attempt of the request.
    assert_eq!(g.health("b").await["consecutive_failures"], 0);
    let record = g.record(&id).await;
    let attempts = record["attempts"].as_array().unwrap();
    let summary: Vec<_> =
        attempts.iter().map(|a| (a["endpoint"].clone(), a["status"].clone(), a["classification"].clone())).collect();
    assert_eq!(
        summary,
        [
            (json!("a"), json!(200), json!("failure")),
            (json!("b"), json!(400), json!("neutral")),
            (json!("b"), json!(200), json!("success")),
        ],
        "{record}"
    );
    assert!(attempts[2]["resume"].as_str().unwrap().contains("user turn"), "{record}");
}

#[tokio::test]
async fn a_stream_that_had_started_a_tool_call_is_not_resumed() {
    let (g, a, b) = gateway_with("anthropic", Value::Null).await;
    let tool_start = mock::sse_event(
        "content_block_start",
        &json!({"type": "content_block_start", "index": 1,
                "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}}),
    );
    let mut events_sent = mock::anthropic_stream_events(&["Let me check."]);
    events_sent.truncate(5); // message_start, ping, block 0 start, its delta, block 0 stop
    events_sent.push(tool_start);
    a.push(Reply::sse(events_sent).with_end(mock::StreamEnd::Cut));
    b.set_default(continuation("anthropic"));
    let (id, text) = request_id_and_text(g.post("/v1/messages", &claude_body("m", true)).await).await;
    let events = sse_events(&text);
    assert_eq!(count(&events, "error"), 1, "{text}");
    assert_eq!(count(&events, "message_stop"), 0, "{text}");
    assert_eq!(b.request_count(), 0, "nothing is sent to continue a tool call");
    let record = g.record(&id).await;
    assert_eq!(record["attempts"].as_array().unwrap().len(), 1, "{record}");
    assert_eq!(record["attempts"][0]["resume"], "not resumed: a tool call had started", "{record}");
}

#[tokio::test]
async fn no_resume_with_failover_off_an_explicit_endpoint_or_the_setting_off() {
    for (settings, explicit) in [
        (json!({"failover_enabled": {"claude": false}}), false),
        (Value::Null, true),
        (json!({"stream_resume": false}), false),
        (json!({"stream_resume_attempts": 0}), false),
    ] {
        let (g, a, b) = gateway_with("anthropic", settings.clone()).await;
        a.push(cut_stream("anthropic"));
        b.set_default(continuation("anthropic"));
        let headers: &[(&str, &str)] = if explicit { &[("x-ccmesh-endpoint", "a")] } else { &[] };
        let r = g.post_with("/v1/messages", &claude_body("m", true), headers).await;
        let (_, text) = request_id_and_text(r).await;
        let events = sse_events(&text);
        assert_eq!(count(&events, "error"), 1, "{settings} {explicit}: {text}");
        assert_eq!(anthropic_text(&events).0, SAID.concat(), "{settings}");
        assert_eq!(b.request_count(), 0, "{settings} {explicit}");
    }
}

#[tokio::test]
async fn when_the_continuation_fails_too_the_stream_ends_with_the_error_event() {
    let (g, a, b) = gateway_with("anthropic", Value::Null).await;
    a.push(cut_stream("anthropic"));
    b.push(Reply::anthropic_error(529, "overloaded_error", "Overloaded"));
    let (id, text) = request_id_and_text(g.post("/v1/messages", &claude_body("m", true)).await).await;
    let events = sse_events(&text);
    assert_eq!(anthropic_text(&events).0, SAID.concat());
    let errors: Vec<_> = events.iter().filter(|(n, _)| n.as_deref() == Some("error")).collect();
    assert_eq!(errors.len(), 1, "{text}");
    let message = errors[0].1["error"]["message"].as_str().unwrap();
    assert!(message.contains("mid-stream") && message.contains("another endpoint failed"), "{message}");
    let record = g.record(&id).await;
    assert_eq!(record["attempts"].as_array().unwrap().len(), 2, "{record}");
    assert!(record["error"]["message"].as_str().unwrap().contains("another endpoint failed"), "{record}");
    assert_eq!(g.health("b").await["consecutive_failures"], 1);
}

#[tokio::test]
async fn an_error_event_or_a_stall_mid_stream_is_resumed_too() {
    // An in-band error event after content: the chunk carrying it is not relayed.
    let (g, a, b) = gateway_with("anthropic", Value::Null).await;
    let mut sent = mock::anthropic_stream_events(&SAID);
    sent.truncate(preamble_events("anthropic") + 2);
    sent.push(mock::anthropic_stream_error_event("overloaded_error", "Overloaded"));
    a.push(Reply::sse(sent));
    b.push(continuation("anthropic"));
    let (_, text) = request_id_and_text(g.post("/v1/messages", &claude_body("m", true)).await).await;
    let events = sse_events(&text);
    assert_eq!(anthropic_text(&events).0, WHOLE, "{text}");
    assert_eq!(count(&events, "error"), 0, "{text}");

    // A stream that goes silent after content: the idle timeout cuts it, the answer goes on.
    let (g, a, b) = gateway_with("anthropic", json!({"timeouts": {"claude": {"idle_timeout_secs": 0.2}}})).await;
    a.push(Reply::anthropic_stream(&[SAID[0], SAID[1], "never"]).stall_after(preamble_events("anthropic") + 2));
    b.push(continuation("anthropic"));
    let (id, text) = request_id_and_text(g.post("/v1/messages", &claude_body("m", true)).await).await;
    assert_eq!(anthropic_text(&sse_events(&text)).0, WHOLE, "{text}");
    let record = g.record(&id).await;
    assert!(record["attempts"][0]["error"].as_str().unwrap().contains("idle"), "{record}");
    a.wait_for_cancellations(1).await;
}

#[tokio::test]
async fn a_converted_stream_is_resumed_across_formats() {
    // A Chat client in front of Anthropic endpoints: the delivered text is rebuilt from the
    // Chat bytes the client got, the continuation goes as an Anthropic prefill.
    let (g, a, b) = gateway_with("anthropic", Value::Null).await;
    a.push(cut_stream("anthropic"));
    b.push(continuation("anthropic"));
    let (_, text) = request_id_and_text(g.post("/v1/chat/completions", &chat_body("m", true)).await).await;
    let said: String =
        sse_events(&text).iter().filter_map(|(_, d)| d["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(said, WHOLE, "{text}");
    let sent = b.last_request().unwrap().json();
    assert_eq!(sent["messages"].as_array().unwrap().last().unwrap()["role"], "assistant", "{sent}");
}

/// The official SDKs accumulate a resumed stream into exactly the whole answer.
#[tokio::test]
async fn the_official_sdks_read_a_resumed_stream_as_one_answer() {
    // (client, endpoint format): pass-through for each protocol, and converted both ways.
    for (client, format) in [
        ("anthropic", "anthropic"),
        ("chat", "openai"),
        ("responses", "responses"),
        ("chat", "anthropic"),
        ("anthropic", "openai"),
    ] {
        let (g, a, b) = gateway_with(format, Value::Null).await;
        a.push(cut_stream(format));
        b.push(continuation(format));
        // A cut stream never reported its output: the continuation's is the known output.
        let expect = json!({"text": WHOLE, "output_tokens": OUTPUT_TOKENS}).to_string();
        run_script_with("resume_client.py", &g.url, &[client], &[("RESUME_EXPECT", expect)]).await;
        assert_eq!((a.request_count(), b.request_count()), (1, 1), "{client} → {format}");
    }
}

#[tokio::test]
async fn a_gemini_sse_client_gets_its_stream_resumed_and_a_json_array_stream_is_not() {
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    let text_of = |text: &str| -> (String, usize) {
        let mut said = String::new();
        let mut finishes = 0;
        for (_, d) in sse_events(text) {
            for part in d["candidates"][0]["content"]["parts"].as_array().into_iter().flatten() {
                said.push_str(part["text"].as_str().unwrap_or(""));
            }
            finishes += usize::from(d["candidates"][0]["finishReason"].is_string());
        }
        (said, finishes)
    };
    let (g, a, b) = gateway_with("anthropic", Value::Null).await;
    a.push(cut_stream("anthropic"));
    b.push(continuation("anthropic"));
    let r = g.post("/v1beta/models/m:streamGenerateContent?alt=sse", &body).await;
    let (_, text) = request_id_and_text(r).await;
    assert_eq!(text_of(&text), (WHOLE.to_string(), 1), "{text}");

    // Without alt=sse the client reads one JSON array: not read back, not resumed.
    let (g, a, b) = gateway_with("anthropic", Value::Null).await;
    a.push(cut_stream("anthropic"));
    b.set_default(continuation("anthropic"));
    let r = g.post("/v1beta/models/m:streamGenerateContent", &body).await;
    let (_, text) = request_id_and_text(r).await;
    assert!(text.contains("error"), "{text}");
    assert_eq!(b.request_count(), 0);
}
