//! Real clients: the official `anthropic` and `openai` Python SDKs call the gateway (in front of a
//! scripted mock upstream) and must parse every answer, errors included, into their normal
//! objects and exceptions.
//!
//! Each test scripts its mock upstreams in the order the Python script (`tests/sdk/*.py`) makes
//! its requests, runs the script once for several scenarios (a Python start costs about a second
//! or two: the SDKs import slowly), then checks what reached the upstream. The script records the
//! exact bytes the SDK sent (an httpx event hook), so "forwarded unchanged" is checked against the
//! SDK's real output, not a re-encoding. The interpreter comes from `support::python` (a venv in
//! `target/test-venv`, built on first use).
// The helpers below run outside `#[test]` functions, where clippy wants no unwrap or panic; in
// test support, failing loudly is the point.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::support::gateway::TestGateway;
use crate::support::mock::{self, MockUpstream, RecordedRequest, Reply};
use crate::support::python::python;

/// Ceiling for one script run, enforced by the script itself (Python's `faulthandler` dumps every
/// thread's traceback and exits), so a hung request shows where it hung. The venv is built before.
const SCRIPT_TIMEOUT_SECS: u64 = 120;

/// One request as the SDK sent it (from the script's capture file).
#[derive(Debug)]
pub(crate) struct Sent {
    scenario: String,
    method: String,
    pub(crate) path: String,
    pub(crate) body: Vec<u8>,
}

pub(crate) struct ScriptRun {
    stdout: String,
    sent: Vec<Sent>,
}

impl ScriptRun {
    /// The requests the SDK sent during one scenario, in order.
    pub(crate) fn sent_in(&self, scenario: &str) -> Vec<&Sent> {
        self.sent.iter().filter(|s| s.scenario == scenario).collect()
    }
}

/// Runs `tests/sdk/{script}` against the gateway for `scenarios` (in order); fails the test with
/// the script's output unless it exits 0 having passed every scenario.
async fn run_script(script: &str, base_url: &str, scenarios: &[&str]) -> ScriptRun {
    run_script_with(script, base_url, scenarios, &[]).await
}

/// [`run_script`] with extra environment variables for the script.
pub(crate) async fn run_script_with(
    script: &str,
    base_url: &str,
    scenarios: &[&str],
    env: &[(&str, String)],
) -> ScriptRun {
    let interpreter = match tokio::task::spawn_blocking(python).await {
        Ok(path) => path,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("{e}"),
    };
    let dir = tempfile::tempdir().unwrap();
    let capture = dir.path().join("sent.jsonl");
    let sdk_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests").join("sdk");
    let mut cmd = Command::new(&interpreter);
    cmd.arg("-B") // no __pycache__ in the source tree
        .arg(sdk_dir.join(script))
        .arg(base_url)
        .args(scenarios)
        .current_dir(&sdk_dir)
        .env("SDK_CAPTURE", &capture)
        .env("SDK_SCRIPT_TIMEOUT", SCRIPT_TIMEOUT_SECS.to_string())
        .env("PYTHONUNBUFFERED", "1")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    // Nothing from the environment may redirect or reconfigure the SDKs.
    for (key, _) in std::env::vars_os() {
        let upper = key.to_string_lossy().to_ascii_uppercase();
        if upper.starts_with("ANTHROPIC_") || upper.starts_with("OPENAI_") || upper.ends_with("_PROXY") {
            cmd.env_remove(&key);
        }
    }
    // The gateway and the mocks run on this test's runtime: wait for the script off it.
    let out = match tokio::task::spawn_blocking(move || cmd.output()).await.unwrap() {
        Ok(out) => out,
        Err(e) => panic!("cannot run {} {script}: {e}", interpreter.display()),
    };
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report =
        format!("{script} {scenarios:?} exited with {}\n--- stdout\n{stdout}\n--- stderr\n{stderr}", out.status);
    assert!(out.status.success(), "{report}");
    for scenario in scenarios {
        assert!(stdout.lines().any(|l| l == format!("ok: {scenario}")), "scenario {scenario} did not pass: {report}");
    }
    let sent = std::fs::read_to_string(&capture)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).unwrap();
            Sent {
                scenario: v["scenario"].as_str().unwrap().to_owned(),
                method: v["method"].as_str().unwrap().to_owned(),
                path: v["path"].as_str().unwrap().to_owned(),
                body: from_hex(v["body_hex"].as_str().unwrap()),
            }
        })
        .collect();
    ScriptRun { stdout, sent }
}

fn from_hex(hex: &str) -> Vec<u8> {
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
}

/// The upstream received exactly what the SDK sent (bytes, method, path), request by request.
fn assert_forwarded_unchanged(sent: &[&Sent], received: &[RecordedRequest], what: &str) {
    assert_eq!(sent.len(), received.len(), "{what}: the SDK sent {sent:?}");
    for (i, (s, r)) in sent.iter().zip(received).enumerate() {
        assert_eq!((s.method.as_str(), s.path.as_str()), (r.method.as_str(), r.path.as_str()), "{what} #{i}");
        assert!(
            s.body == r.body.as_ref(),
            "{what} #{i}: the upstream got other bytes than the SDK sent\n  sdk:      {}\n  upstream: {}",
            String::from_utf8_lossy(&s.body),
            r.text()
        );
    }
}

// ================================================================================== Anthropic

const TOOL_USE_ID: &str = "toolu_01A09q90qw90lq917835lq9";

/// A Messages answer that calls `get_weather` (text block, then `tool_use`; `stop_reason: tool_use`).
fn anthropic_tool_use_reply() -> Reply {
    let mut body = mock::anthropic_message_body("");
    body["content"] = json!([
        {"type": "text", "text": "I'll check the weather in Paris."},
        {"type": "tool_use", "id": TOOL_USE_ID, "name": "get_weather", "input": {"city": "Paris", "unit": "celsius"}},
    ]);
    body["stop_reason"] = json!("tool_use");
    Reply::json(200, body).with_header("request-id", &mock::mock_id("req_"))
}

#[tokio::test]
async fn sdk_anthropic_messages() {
    let main = MockUpstream::start().await;
    let limited = MockUpstream::start().await;
    let g = TestGateway::start().await;
    // GET /v1/models lists what the upstream lists, filtered by the endpoint's glob.
    main.set_models(&["claude-sonnet-4-5-20250929", "claude-opus-4-1", "gpt-4o"]);
    g.add("claude-main", "anthropic", &main.url(), json!({"models": ["claude-*"]})).await;
    g.add("claude-limited", "anthropic", &limited.url(), json!({"models": ["limited-*"]})).await;
    // A Responses endpoint for thinking models: the SDK's thinking must survive conversion.
    let thinker = MockUpstream::start().await;
    g.add("thinker", "responses", &thinker.url(), json!({"models": ["thinker-*"]})).await;
    g.model_lists_stored(3).await;
    thinker.push(Reply::sse(mock::responses_reasoning_stream_events(
        "Plan a short greeting.",
        Some(ENCRYPTED_REASONING),
        "Hello there.",
    )));
    thinker.push(Reply::responses_message("Hello again."));
    g.settings(json!({"breaker": {"claude": {"failure_threshold": 1}}})).await;

    main.push(Reply::anthropic_message("Hello from ccmesh"));
    main.push(Reply::anthropic_stream(&["Hel", "lo, ", "wörld"]).with_end(mock::StreamEnd::silent_stall()));
    main.push(anthropic_tool_use_reply());
    main.push(Reply::anthropic_message("It is 18°C and sunny in Paris."));
    main.push(Reply::anthropic_error(
        400,
        "invalid_request_error",
        "max_tokens: Input should be greater than or equal to 1",
    ));
    // unknown_model never reaches an upstream.
    main.push(Reply::anthropic_stream(&["Hel", "lo"]).cut_after(4));
    limited.set_default(
        Reply::anthropic_error(
            429,
            "rate_limit_error",
            "Number of request tokens has exceeded your per-minute rate limit",
        )
        .with_header("retry-after", "30"),
    );

    let run = run_script(
        "anthropic_messages.py",
        &g.url,
        &[
            "thinking_via_responses",
            "models_list",
            "message",
            "stream",
            "tool_use",
            "bad_request",
            "unknown_model",
            "rate_limited",
            "cut_stream",
        ],
    )
    .await;
    eprintln!("{}", run.stdout);
    assert_streams_complete(&g, &[ANTHROPIC_SDK_MODEL]).await;

    let got = main.requests();
    let sent: Vec<&Sent> =
        ["message", "stream", "tool_use", "bad_request", "cut_stream"].iter().flat_map(|s| run.sent_in(s)).collect();
    assert_forwarded_unchanged(&sent, &got, "claude-main");
    for r in &got {
        assert_eq!(r.header("x-api-key"), Some("sk-claude-main-secret-key-0000"));
        assert_eq!(r.header("authorization"), None);
    }
    assert_eq!(got[1].json()["stream"], true);

    // The tool_result turn, as the SDK wrote it, reached the upstream as it was.
    let turn = got[3].json();
    assert_eq!(turn["messages"][1]["role"], "assistant");
    assert_eq!(turn["messages"][1]["content"][1]["type"], "tool_use");
    assert_eq!(turn["messages"][1]["content"][1]["id"], TOOL_USE_ID);
    assert_eq!(turn["messages"][1]["content"][1]["input"], json!({"city": "Paris", "unit": "celsius"}));
    assert_eq!(
        turn["messages"][2],
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": TOOL_USE_ID, "content": "18°C, sunny"}]})
    );

    // The unknown model was answered by the gateway; the rate-limited endpoint was asked once.
    assert_eq!(run.sent_in("unknown_model").len(), 1);
    assert_eq!(run.sent_in("rate_limited").len(), 2);
    assert_forwarded_unchanged(&run.sent_in("rate_limited")[..1], &limited.requests(), "claude-limited");
    let h = g.health("claude-limited").await;
    assert_eq!((h["circuit"].as_str(), h["open_reason"].as_str()), (Some("open"), Some("rate_limited")), "{h}");
    let h = g.health("claude-main").await;
    assert!(h["last_error"].as_str().unwrap_or_default().contains("mid-stream"), "{h}");

    // Thinking through a Responses endpoint: the encrypted reasoning was asked for, carried in
    // the thinking block's signature, and sent back as the reasoning item next turn.
    let turns = thinker.requests();
    assert_eq!(turns.len(), 2, "{turns:?}");
    let first = turns[0].json();
    assert_eq!(first["include"], json!(["reasoning.encrypted_content"]), "{first}");
    assert_eq!(first["store"], false);
    assert_eq!(first["reasoning"]["summary"], "auto");
    let second = turns[1].json();
    let reasoning: Vec<&Value> =
        second["input"].as_array().unwrap().iter().filter(|i| i["type"] == "reasoning").collect();
    assert_eq!(reasoning.len(), 1, "{second}");
    assert_eq!(reasoning[0]["encrypted_content"], ENCRYPTED_REASONING);
    assert_eq!(reasoning[0]["id"], "rs_mock_reasoning");
    assert_eq!(reasoning[0]["summary"], json!([{"type": "summary_text", "text": "Plan a short greeting."}]));
}

const ANTHROPIC_SDK_MODEL: &str = "claude-sonnet-4-5";
const RESPONSES_SDK_MODEL: &str = "gpt-4.1";

/// Each model's streamed request is recorded as a success with its usage: the client read it
/// to its terminal event, whatever it did with the connection after that.
async fn assert_streams_complete(g: &TestGateway, models: &[&str]) {
    g.flush_records().await;
    let (_, list) = g.api(reqwest::Method::GET, "/api/requests?limit=100", None).await;
    let streams: Vec<&Value> = list["requests"].as_array().unwrap().iter().filter(|r| r["stream"] == true).collect();
    for model in models {
        let done = streams
            .iter()
            .find(|r| r["model_requested"] == *model && r["status"] == 200 && r["error"].is_null())
            .unwrap_or_else(|| panic!("no complete stream record for {model}: {streams:#?}"));
        assert_eq!(
            (done["tokens"]["input"].as_u64(), done["tokens"]["output"].as_u64()),
            (Some(12), Some(8)),
            "{done}"
        );
        assert!(done["cost_usd"].is_number() || done["cost_usd"].is_null(), "{done}");
    }
}
/// What the Responses mock returns as a reasoning item's `encrypted_content`.
const ENCRYPTED_REASONING: &str = "gAAAAABmock-encrypted-reasoning-0123456789";

// ======================================================================= OpenAI Chat Completions

const CHAT_CALL_ID: &str = "call_Xq4bZ0cS1mW8mQ3kC2pT7aNd";

/// A Chat Completions answer that calls `get_weather` (`tool_calls`, `finish_reason: tool_calls`).
fn chat_tool_calls_reply() -> Reply {
    let mut body = mock::openai_chat_body("");
    body["choices"][0]["message"] = json!({
        "role": "assistant",
        "content": null,
        "tool_calls": [{
            "id": CHAT_CALL_ID,
            "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\",\"unit\":\"celsius\"}"},
        }],
        "refusal": null,
        "annotations": [],
    });
    body["choices"][0]["finish_reason"] = json!("tool_calls");
    Reply::json(200, body).with_header("x-request-id", &mock::mock_id("req_"))
}

#[tokio::test]
async fn sdk_openai_chat_completions() {
    let main = MockUpstream::start().await;
    let limited = MockUpstream::start().await;
    let g = TestGateway::start().await;
    main.set_models(&["gpt-4o-mini-2024-07-18", "o3", "gpt-4o"]);
    g.add("chat-main", "openai", &main.url(), json!({"models": ["gpt-*"]})).await;
    g.add("chat-limited", "openai", &limited.url(), json!({"models": ["limited-*"]})).await;
    let anthropic = MockUpstream::start().await;
    g.add("chat-from-anthropic", "anthropic", &anthropic.url(), json!({"models": ["claude-via-chat"]})).await;
    // Upstreams that keep the connection open after their terminal event: only the client's
    // close ends these streams.
    anthropic.push(Reply::anthropic_stream(&["Converted ", "hello"]).with_end(mock::StreamEnd::stall()));
    g.model_lists_stored(2).await;
    g.settings(json!({"breaker": {"openai": {"failure_threshold": 1}}})).await;

    main.push(Reply::openai_chat("Hello from ccmesh"));
    main.push(Reply::openai_chat_stream(&["Hel", "lo, ", "wörld"]).with_end(mock::StreamEnd::stall()));
    main.push(chat_tool_calls_reply());
    main.push(Reply::openai_chat("It is 18°C and sunny in Paris."));
    main.push(Reply::openai_error(400, "invalid_request_error", "Invalid 'temperature': decimal above maximum value."));
    // unknown_model never reaches an upstream.
    main.push(Reply::openai_chat_stream(&["Hel", "lo"]).cut_after(2));
    limited.set_default(
        Reply::openai_error(429, "rate_limit_exceeded", "Rate limit reached for gpt-4o-mini on requests per min (RPM)")
            .with_header("retry-after", "30"),
    );

    let run = run_script(
        "openai_chat.py",
        &g.url,
        &[
            "models_list",
            "completion",
            "stream",
            "tool_calls",
            "bad_request",
            "unknown_model",
            "rate_limited",
            "cut_stream",
            "stream_converted",
        ],
    )
    .await;
    eprintln!("{}", run.stdout);

    // The SDK closes the connection the moment it reads `data: [DONE]`: a stream read to its end
    // is a success with its usage and cost, passed through or converted.
    assert_streams_complete(&g, &["gpt-4o-mini", "claude-via-chat"]).await;

    let got = main.requests();
    let sent: Vec<&Sent> = ["completion", "stream", "tool_calls", "bad_request", "cut_stream"]
        .iter()
        .flat_map(|s| run.sent_in(s))
        .collect();
    assert_forwarded_unchanged(&sent, &got, "chat-main");
    for r in &got {
        assert_eq!(r.path, "/v1/chat/completions");
        assert_eq!(r.header("authorization"), Some("Bearer sk-chat-main-secret-key-0000"));
    }
    assert_eq!(got[1].json()["stream_options"], json!({"include_usage": true}));

    // The tool turn, as the SDK wrote it, reached the upstream as it was.
    let turn = got[3].json();
    assert_eq!(turn["messages"][1]["role"], "assistant");
    assert_eq!(turn["messages"][1]["tool_calls"][0]["id"], CHAT_CALL_ID);
    assert_eq!(turn["messages"][1]["tool_calls"][0]["function"]["name"], "get_weather");
    assert_eq!(turn["messages"][2], json!({"role": "tool", "tool_call_id": CHAT_CALL_ID, "content": "18°C, sunny"}));

    assert_eq!(run.sent_in("unknown_model").len(), 1);
    assert_eq!(run.sent_in("rate_limited").len(), 2);
    assert_forwarded_unchanged(&run.sent_in("rate_limited")[..1], &limited.requests(), "chat-limited");
    let h = g.health("chat-limited").await;
    assert_eq!((h["circuit"].as_str(), h["open_reason"].as_str()), (Some("open"), Some("rate_limited")), "{h}");
    let h = g.health("chat-main").await;
    assert!(h["last_error"].as_str().unwrap_or_default().contains("mid-stream"), "{h}");
}

// ============================================================================= OpenAI Responses

const RESPONSES_CALL_ID: &str = "call_Rk2pW9vYh3cLq8nT5sDf1eZa";

/// A Responses answer whose only output item is a `function_call` to `get_weather`.
fn responses_function_call_reply() -> Reply {
    let mut body = mock::responses_body("");
    body["output"] = json!([{
        "type": "function_call",
        "id": mock::mock_id("fc_"),
        "call_id": RESPONSES_CALL_ID,
        "name": "get_weather",
        "arguments": "{\"city\":\"Paris\",\"unit\":\"celsius\"}",
        "status": "completed",
    }]);
    body["tools"] = json!([{
        "type": "function",
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": false,
        },
        "strict": true,
    }]);
    Reply::json(200, body).with_header("x-request-id", &mock::mock_id("req_"))
}

#[tokio::test]
async fn sdk_openai_responses() {
    let main = MockUpstream::start().await;
    let limited = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("resp-main", "responses", &main.url(), json!({"models": ["gpt-*"]})).await;
    g.add("resp-limited", "responses", &limited.url(), json!({"models": ["limited-*"]})).await;
    g.settings(json!({"breaker": {"responses": {"failure_threshold": 1}}})).await;

    main.push(Reply::responses_message("Hello from ccmesh"));
    main.push(Reply::responses_stream(&["Hel", "lo, ", "wörld"]).with_end(mock::StreamEnd::silent_stall()));
    main.push(responses_function_call_reply());
    main.push(Reply::responses_message("It is 18°C and sunny in Paris."));
    main.push(Reply::openai_error(400, "invalid_request_error", "Invalid 'temperature': decimal above maximum value."));
    // unknown_model never reaches an upstream.
    main.push(Reply::responses_stream(&["Hel", "lo"]).cut_after(5));
    limited.set_default(
        Reply::openai_error(429, "rate_limit_exceeded", "Rate limit reached for gpt-4.1 on tokens per min (TPM)")
            .with_header("retry-after", "30"),
    );

    let run = run_script(
        "openai_responses.py",
        &g.url,
        &["response", "stream", "function_call", "bad_request", "unknown_model", "rate_limited", "cut_stream"],
    )
    .await;
    eprintln!("{}", run.stdout);
    assert_streams_complete(&g, &[RESPONSES_SDK_MODEL]).await;

    let got = main.requests();
    let sent: Vec<&Sent> = ["response", "stream", "function_call", "bad_request", "cut_stream"]
        .iter()
        .flat_map(|s| run.sent_in(s))
        .collect();
    assert_forwarded_unchanged(&sent, &got, "resp-main");
    for r in &got {
        assert_eq!(r.path, "/v1/responses");
        assert_eq!(r.header("authorization"), Some("Bearer sk-resp-main-secret-key-0000"));
    }
    assert_eq!(got[1].json()["stream"], true);

    // The function_call_output turn, as the SDK wrote it, reached the upstream as it was.
    let turn = got[3].json();
    let input = turn["input"].as_array().unwrap();
    assert_eq!(input.len(), 3, "{turn}");
    assert_eq!(input[1]["type"], "function_call");
    assert_eq!(input[1]["call_id"], RESPONSES_CALL_ID);
    assert_eq!(input[1]["arguments"], "{\"city\":\"Paris\",\"unit\":\"celsius\"}");
    assert_eq!(
        input[2],
        json!({"type": "function_call_output", "call_id": RESPONSES_CALL_ID, "output": "18°C, sunny"})
    );

    assert_eq!(run.sent_in("unknown_model").len(), 1);
    assert_eq!(run.sent_in("rate_limited").len(), 2);
    assert_forwarded_unchanged(&run.sent_in("rate_limited")[..1], &limited.requests(), "resp-limited");
    let h = g.health("resp-limited").await;
    assert_eq!((h["circuit"].as_str(), h["open_reason"].as_str()), (Some("open"), Some("rate_limited")), "{h}");
    let h = g.health("resp-main").await;
    assert!(h["last_error"].as_str().unwrap_or_default().contains("mid-stream"), "{h}");
}

// ================================================================================ client keys

/// The gateway's client-key refusals are the SDKs' own exceptions (SPEC §12): both SDKs in one
/// process each, every refusal a scenario step.
#[tokio::test]
async fn sdk_client_key_refusals_are_the_sdks_own_exceptions() {
    let upstream = MockUpstream::start().await;
    upstream.set_default(Reply::anthropic_message("Hello from ccmesh"));
    let g = TestGateway::start().await;
    g.add("claude", "anthropic", &upstream.url(), json!({"models": ["claude-*"]})).await;
    let key = |body: Value| {
        let g = &g;
        async move {
            let (status, v) = g.api(reqwest::Method::POST, "/api/keys", Some(body)).await;
            assert_eq!(status, 201, "{v}");
            v["secret"].as_str().unwrap().to_string()
        }
    };
    let ok = key(json!({"name": "ok", "models": ["claude-*", "gpt-*"]})).await;
    let slow = key(json!({"name": "slow", "limits": {"rpm": 1}})).await;
    let broke = key(json!({"name": "broke", "limits": {"usd_per_day": 0}})).await;
    // The slow key's one request this minute.
    let r = g
        .post_with("/v1/messages", &crate::support::gateway::claude_body("claude-x", false), &[("x-api-key", &slow)])
        .await;
    assert_eq!(r.status(), 200);
    let env = [("SDK_KEY_OK", ok.clone()), ("SDK_KEY_SLOW", slow.clone()), ("SDK_KEY_BROKE", broke.clone())];
    let run = run_script_with("client_keys.py", &g.url, &["anthropic_refusals", "openai_refusals"], &env).await;
    // A spent budget is not retried (x-should-retry: false), though the client allows retries.
    assert_eq!(run.sent_in("anthropic_refusals").len(), 5, "{:?}", run.sent_in("anthropic_refusals"));
    assert_eq!(run.sent_in("openai_refusals").len(), 4, "{:?}", run.sent_in("openai_refusals"));
    assert_eq!(upstream.request_count(), 2, "only the admitted requests reached the upstream");
}
