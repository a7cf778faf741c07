//! The inbound `gemini` protocol end to end through the real gateway (SPEC §11): a Gemini client
//! (the paths, headers and bodies the Gemini CLI and the Google GenAI SDKs send — the captured
//! fixtures replayed) against an endpoint of every format; the model and the method from the
//! path; pass-through byte for byte; the JSON-array stream; errors the gateway makes and
//! upstream errors, in Gemini's shape; the mid-stream error chunk; `countTokens`; models.

use serde_json::{Value, json};

use crate::support::gateway::TestGateway;
use crate::support::mock::{self, MockUpstream, Reply, gemini_chunk, gemini_response};

const UPSTREAM_KEY: &str = "sk-up-secret-key-0000";
const CLIENT_KEY: &str = "AIzaSy-client-key-must-not-leak";
const FORMATS: [&str; 4] = ["anthropic", "openai", "responses", "gemini"];

/// A captured request of a real Gemini client (`tests/fixtures/clients/gemini/`).
struct Fixture {
    name: &'static str,
    path: String,
    query: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

fn fixture(name: &'static str) -> Fixture {
    let path = format!("{}/tests/fixtures/clients/gemini/{name}", env!("CARGO_MANIFEST_DIR"));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    // Headers a client sends about itself; the transport's own are the HTTP client's business.
    let keep = ["user-agent", "x-goog-api-client", "content-type", "x-gemini-api-privileged-user-id"];
    let headers = v["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h[0].as_str().unwrap().to_ascii_lowercase(), h[1].as_str().unwrap().to_string()))
        .filter(|(k, _)| keep.contains(&k.as_str()))
        .collect();
    Fixture {
        name,
        path: v["path"].as_str().unwrap().into(),
        query: v["query"].as_str().unwrap_or("").into(),
        headers,
        body: serde_json::to_vec(&v["body"]).unwrap(),
    }
}

const CLI_FIXTURES: [&str; 8] = [
    "cli_plain_01_v1beta_generateContent_gemini-3.5-flash-lite.json",
    "cli_plain_02_v1beta_streamGenerateContent_gemini-3.8-flash.json",
    "cli_tool_01_v1beta_generateContent_gemini-3.5-flash-lite.json",
    "cli_tool_02_v1beta_streamGenerateContent_gemini-3.8-flash.json",
    "cli_tool_03_v1beta_streamGenerateContent_gemini-3.8-flash.json",
    "cli_tool_fcid_01_v1beta_generateContent_gemini-3.5-flash-lite.json",
    "cli_tool_fcid_02_v1beta_streamGenerateContent_gemini-3.8-flash.json",
    "cli_tool_fcid_03_v1beta_streamGenerateContent_gemini-3.8-flash.json",
];

const SDK_FIXTURES: [&str; 6] = [
    "pysdk_generate_03_v1_generateContent_gemini-2.5-flash.json",
    "pysdk_function_manual_06_v1_generateContent_gemini-2.5-flash.json",
    "pysdk_chat_stream_tool_10_v1_streamGenerateContent_gemini-2.5-flash.json",
    "nodesdk_generate_01_v1_generateContent_gemini-2.5-flash.json",
    "nodesdk_function_manual_04_v1_generateContent_gemini-2.5-flash.json",
    "nodesdk_chat_stream_tool_06_v1_streamGenerateContent_gemini-2.5-flash.json",
];

impl TestGateway {
    /// Send a fixture's request with the client's key, as the client sent it: `x-goog-api-key`,
    /// plus `?key=` when `key_in_query`.
    async fn replay(&self, f: &Fixture, key_in_query: bool) -> reqwest::Response {
        let mut query = f.query.clone();
        if key_in_query {
            query = if query.is_empty() { format!("key={CLIENT_KEY}") } else { format!("{query}&key={CLIENT_KEY}") };
        }
        let url = if query.is_empty() {
            format!("{}{}", self.url, f.path)
        } else {
            format!("{}{}?{query}", self.url, f.path)
        };
        let mut req = self.http.post(url).body(f.body.clone()).header("x-goog-api-key", CLIENT_KEY);
        for (k, v) in &f.headers {
            req = req.header(k, v);
        }
        req.send().await.unwrap()
    }

    async fn gemini_post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.post_with(path, body, &[("x-goog-api-key", CLIENT_KEY)]).await
    }

    async fn gemini_get(&self, path: &str) -> (u16, Value) {
        let r = self.http.get(format!("{}{path}", self.url)).header("x-goog-api-key", CLIENT_KEY).send().await.unwrap();
        (r.status().as_u16(), r.json().await.unwrap())
    }
}

/// A plain answer in the endpoint's format.
fn message(format: &str, text: &str) -> Reply {
    match format {
        "anthropic" => Reply::anthropic_message(text),
        "openai" => Reply::openai_chat(text),
        "responses" => Reply::responses_message(text),
        _ => Reply::gemini_message(text),
    }
}

/// A streamed answer in the endpoint's format.
fn stream(format: &str, parts: &[&str]) -> Reply {
    match format {
        "anthropic" => Reply::anthropic_stream(parts),
        "openai" => Reply::openai_chat_stream(parts),
        "responses" => Reply::responses_stream(parts),
        _ => Reply::gemini_stream(parts),
    }
}

/// An error answer in the endpoint's format.
fn error(format: &str, status: u16, message: &str) -> Reply {
    match (format, status) {
        ("anthropic", 429) => Reply::anthropic_error(429, "rate_limit_error", message),
        ("anthropic", _) => Reply::anthropic_error(status, "invalid_request_error", message),
        ("openai" | "responses", 429) => Reply::openai_error(429, "rate_limit_error", message),
        ("openai" | "responses", _) => Reply::openai_error(status, "invalid_request_error", message),
        (_, 429) => Reply::gemini_error(429, "RESOURCE_EXHAUSTED", message),
        _ => Reply::gemini_error(status, "INVALID_ARGUMENT", message),
    }
}

/// The path a converted request reaches on an endpoint of `format`.
fn upstream_path(format: &str, model: &str, stream: bool) -> String {
    match format {
        "anthropic" => "/v1/messages".into(),
        "openai" => "/v1/chat/completions".into(),
        "responses" => "/v1/responses".into(),
        _ => format!("/v1beta/models/{model}:{}", if stream { "streamGenerateContent" } else { "generateContent" }),
    }
}

async fn gateway_with(format: &str, extra: Value) -> (MockUpstream, TestGateway) {
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    let mut extra = extra;
    extra["api_key"] = json!(UPSTREAM_KEY);
    g.add("up", format, &up.url(), extra).await;
    (up, g)
}

/// No client credential reaches an upstream; the endpoint's own does.
fn check_credentials(seen: &mock::RecordedRequest, format: &str) {
    assert!(!seen.text().contains(CLIENT_KEY) && !seen.path_and_query().contains(CLIENT_KEY), "{seen:?}");
    assert!(seen.headers.iter().all(|(_, v)| !v.contains(CLIENT_KEY)), "the client's key leaked: {:?}", seen.headers);
    let auth = match format {
        "anthropic" => seen.header("x-api-key").map(str::to_owned),
        "gemini" => seen.header("x-goog-api-key").map(str::to_owned),
        _ => seen.header("authorization").map(str::to_owned),
    };
    assert!(auth.is_some_and(|a| a.ends_with(UPSTREAM_KEY)), "{format}: {:?}", seen.headers);
    if format != "gemini" {
        for h in ["x-goog-api-client", "x-gemini-api-privileged-user-id"] {
            assert!(seen.header(h).is_none(), "{h} must not reach a {format} endpoint");
        }
    }
}

/// The text of a Gemini answer (a body, or the chunks of a stream).
fn gemini_text(v: &Value) -> String {
    v["candidates"][0]["content"]["parts"]
        .as_array()
        .map(|parts| parts.iter().filter(|p| p["thought"] != true).filter_map(|p| p["text"].as_str()).collect())
        .unwrap_or_default()
}

/// An SSE stream a Gemini client reads: its chunks, and a bare `{"error": …}` line if any.
fn read_sse(text: &str) -> (Vec<Value>, Option<Value>) {
    let mut chunks = Vec::new();
    let mut error = None;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(data) = line.strip_prefix("data: ") {
            chunks.push(serde_json::from_str(data).unwrap());
        } else if line.starts_with('{') {
            error = Some(serde_json::from_str(line).unwrap());
        }
    }
    (chunks, error)
}

fn stream_text(chunks: &[Value]) -> String {
    chunks.iter().map(gemini_text).collect()
}

fn finished(chunks: &[Value]) -> bool {
    chunks.iter().any(|c| c["candidates"][0]["finishReason"].is_string())
}

#[tokio::test]
async fn a_gemini_client_gets_answers_from_an_endpoint_of_every_format() {
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    for format in FORMATS {
        let (up, g) = gateway_with(format, json!({})).await;
        for version in ["v1beta", "v1"] {
            // generateContent
            up.push(message(format, "plain answer"));
            let r = g.gemini_post(&format!("/{version}/models/the-model:generateContent"), &body).await;
            assert_eq!(r.status(), 200, "{format} {version}");
            assert_eq!(r.headers()["x-ccmesh-endpoint"], "up");
            let v: Value = r.json().await.unwrap();
            assert_eq!(gemini_text(&v), "plain answer", "{format}: {v}");
            assert_eq!(v["candidates"][0]["finishReason"], "STOP", "{format}: {v}");
            assert!(v["usageMetadata"]["promptTokenCount"].as_u64().unwrap() > 0, "{format}: {v}");
            let seen = up.last_request().unwrap();
            assert_eq!(seen.path, upstream_path(format, "the-model", false), "{format}");
            check_credentials(&seen, format);
            if format != "gemini" {
                let sent = seen.json();
                assert_eq!(sent["model"], "the-model", "{format}: the model from the path: {sent}");
            }

            // streamGenerateContent?alt=sse, the key in the query as some clients send it
            up.push(stream(format, &["str", "eamed"]));
            let url = format!("{}/{version}/models/the-model:streamGenerateContent?alt=sse&key={CLIENT_KEY}", g.url);
            let r = g.http.post(url).json(&body).send().await.unwrap();
            assert_eq!(r.status(), 200, "{format}");
            assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
            let text = r.text().await.unwrap();
            let (chunks, err) = read_sse(&text);
            assert_eq!(
                (stream_text(&chunks).as_str(), finished(&chunks), err),
                ("streamed", true, None),
                "{format}: {text}"
            );
            let seen = up.last_request().unwrap();
            assert_eq!(seen.path, upstream_path(format, "the-model", true), "{format}");
            check_credentials(&seen, format);
            if format == "gemini" {
                assert_eq!(seen.query.as_deref(), Some("alt=sse"), "the key never goes upstream");
            } else {
                assert_eq!(seen.json()["stream"], true, "{format}: the stream flag from the method");
            }

            // streamGenerateContent without alt: one JSON array, written as the chunks come (the
            // credential as a bearer token, the third form a Gemini client may use)
            up.push(stream(format, &["json ", "array"]));
            let path = format!("/{version}/models/the-model:streamGenerateContent");
            let r = g.post_with(&path, &body, &[("authorization", &format!("Bearer {CLIENT_KEY}"))]).await;
            assert_eq!(r.status(), 200, "{format}");
            assert!(r.headers()["content-type"].to_str().unwrap().starts_with("application/json"), "{format}");
            let v: Value = r.json().await.unwrap();
            let chunks = v.as_array().unwrap_or_else(|| panic!("{format}: not an array: {v}"));
            assert_eq!((stream_text(chunks).as_str(), finished(chunks)), ("json array", true), "{format}: {v}");
            let seen = up.last_request().unwrap();
            check_credentials(&seen, format);
            if format == "gemini" {
                assert_eq!(seen.query.as_deref(), Some("alt=sse"), "asked for as SSE");
            }
        }
        let h = g.health("up").await;
        assert_eq!((h["requests"].clone(), h["consecutive_failures"].clone()), (json!(6), json!(0)), "{format}");
    }
}

#[tokio::test]
async fn captured_gemini_client_requests_pass_through_byte_for_byte() {
    let (up, g) = gateway_with("gemini", json!({})).await;
    for name in CLI_FIXTURES
        .iter()
        .chain(&SDK_FIXTURES)
        .chain(&["nodesdk_count_tokens_07_v1_countTokens_gemini-2.5-flash.json"])
    {
        let f = fixture(name);
        let streaming = f.path.contains(":streamGenerateContent");
        // What the upstream answers, byte for byte what the client must get.
        let answer: String = if streaming {
            mock::gemini_stream_events(&["pass", "ed"]).concat()
        } else if f.path.ends_with(":countTokens") {
            json!({"totalTokens": 7}).to_string()
        } else {
            mock::gemini_body("passed").to_string()
        };
        let content_type = if streaming { "text/event-stream" } else { "application/json; charset=UTF-8" };
        up.push(Reply::full(200, vec![("content-type".into(), content_type.into())], answer.clone()));
        let r = g.replay(&f, true).await;
        assert_eq!(r.status(), 200, "{}", f.name);
        let text = r.text().await.unwrap();
        assert_eq!(text, answer, "{}: the answer is relayed unchanged", f.name);
        let seen = up.last_request().unwrap();
        assert_eq!(seen.body.as_ref(), f.body.as_slice(), "{}: the body is forwarded unchanged", f.name);
        // The version follows the endpoint's base URL: `/v1beta` for a bare one.
        let rest = f.path.strip_prefix("/v1beta").or_else(|| f.path.strip_prefix("/v1")).unwrap();
        assert_eq!(seen.path, format!("/v1beta{rest}"), "{}", f.name);
        assert_eq!(seen.query.as_deref().unwrap_or(""), f.query, "{}: the query without the key", f.name);
        for (k, v) in &f.headers {
            assert_eq!(seen.header(k), Some(v.as_str()), "{}: {k} passes", f.name);
        }
        check_credentials(&seen, "gemini");
    }
}

#[tokio::test]
async fn captured_gemini_client_requests_convert_to_every_other_format() {
    for format in ["anthropic", "openai", "responses"] {
        let (up, g) = gateway_with(format, json!({})).await;
        for name in CLI_FIXTURES.iter().chain(&SDK_FIXTURES) {
            let f = fixture(name);
            let streaming = f.path.contains(":streamGenerateContent");
            up.push(if streaming { stream(format, &["conv", "erted"]) } else { message(format, "converted") });
            let r = g.replay(&f, false).await;
            assert_eq!(r.status(), 200, "{} → {format}", f.name);
            let text = r.text().await.unwrap();
            let got = if streaming {
                let (chunks, err) = read_sse(&text);
                assert!(err.is_none() && finished(&chunks), "{} → {format}: {text}", f.name);
                stream_text(&chunks)
            } else {
                gemini_text(&serde_json::from_str(&text).unwrap())
            };
            assert_eq!(got, "converted", "{} → {format}: {text}", f.name);
            let seen = up.last_request().unwrap();
            let model = f.path.rsplit_once("/models/").unwrap().1.split(':').next().unwrap();
            let sent = seen.json();
            assert_eq!(sent["model"], model, "{} → {format}", f.name);
            assert_eq!(sent["stream"].as_bool().unwrap_or(false), streaming, "{} → {format}", f.name);
            check_credentials(&seen, format);
            // The tools and the conversation went along.
            let source: Value = serde_json::from_slice(&f.body).unwrap();
            if let Some(decls) = source["tools"][0]["functionDeclarations"].as_array() {
                let n = sent["tools"].as_array().map_or(0, Vec::len);
                assert_eq!(n, decls.len(), "{} → {format}: every declaration is a tool", f.name);
            }
        }
    }
}

#[tokio::test]
async fn the_model_in_the_path_is_mapped_filtered_and_can_name_an_endpoint() {
    let up = MockUpstream::start().await;
    let other = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add(
        "gem",
        "gemini",
        &up.url(),
        json!({"models": ["gemini-*"], "model_map": {"gemini-fast": "gemini-2.5-flash"}}),
    )
    .await;
    g.add("claude", "anthropic", &other.url(), json!({"models": ["claude-*"]})).await;
    let body = json!({"contents": [{"parts": [{"text": "hi"}]}]});

    // model_map rewrites the path of a pass-through request; the body stays the client's.
    up.push(Reply::gemini_message("ok"));
    let r = g.gemini_post("/v1beta/models/gemini-fast:generateContent", &body).await;
    assert_eq!(r.status(), 200);
    let seen = up.last_request().unwrap();
    assert_eq!(seen.path, "/v1beta/models/gemini-2.5-flash:generateContent");
    assert_eq!(seen.json(), body);

    // The model filter picks the endpoint that serves the model; a converted request carries it.
    other.push(Reply::anthropic_message("from claude"));
    let r = g.gemini_post("/v1beta/models/claude-sonnet-4-5:generateContent", &body).await;
    assert_eq!(r.headers()["x-ccmesh-endpoint"], "claude");
    assert_eq!(other.last_request().unwrap().json()["model"], "claude-sonnet-4-5");

    // `@NAME/model`, raw or percent-encoded: an explicit endpoint, the prefix removed.
    for path in [
        "/v1beta/models/@claude/gemini-2.5-flash:generateContent",
        "/v1/models/@claude%2Fgemini-2.5-flash:generateContent",
    ] {
        other.push(Reply::anthropic_message("explicit"));
        let r = g.gemini_post(path, &body).await;
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(r.headers()["x-ccmesh-endpoint"], "claude", "{path}");
        assert_eq!(other.last_request().unwrap().json()["model"], "gemini-2.5-flash", "{path}");
    }
    up.push(Reply::gemini_message("explicit"));
    let r = g.gemini_post("/v1beta/models/@gem%2Fgemini-3-pro:streamGenerateContent?alt=sse", &body).await;
    assert_eq!(r.status(), 200);
    let seen = up.last_request().unwrap();
    assert_eq!(seen.path_and_query(), "/v1beta/models/gemini-3-pro:streamGenerateContent?alt=sse");

    // No endpoint serves it: a Gemini NOT_FOUND.
    let r = g.gemini_post("/v1beta/models/gpt-5:generateContent", &body).await;
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["status"], "NOT_FOUND", "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("gpt-5"), "{v}");
}

#[tokio::test]
async fn gateway_errors_are_in_geminis_shape() {
    let g = TestGateway::start().await;
    let body = json!({"contents": [{"parts": [{"text": "hi"}]}]});
    // Nothing configured.
    let r = g.gemini_post("/v1beta/models/m:generateContent", &body).await;
    assert_eq!(r.status(), 503);
    let v: Value = r.json().await.unwrap();
    assert_eq!((v["error"]["code"].clone(), v["error"]["status"].clone()), (json!(503), json!("UNAVAILABLE")), "{v}");

    let up = MockUpstream::start().await;
    g.add("gem", "gemini", &up.url(), json!({})).await;
    // Not JSON.
    let r = g.http.post(format!("{}/v1beta/models/m:generateContent", g.url)).body("{nope").send().await.unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["status"], "INVALID_ARGUMENT");
    // An unknown endpoint named by the query.
    let r = g.gemini_post("/v1beta/models/m:generateContent?endpoint=nope", &body).await;
    assert_eq!(r.status(), 400);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["status"], "INVALID_ARGUMENT");
    // Too large.
    g.settings(json!({"max_body_bytes": 1024})).await;
    let big = json!({"contents": [{"parts": [{"text": "x".repeat(4096)}]}]});
    let r = g.gemini_post("/v1beta/models/m:generateContent", &big).await;
    assert_eq!(r.status(), 413);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["status"], "INVALID_ARGUMENT");
    g.settings(json!({"max_body_bytes": 33554432})).await;
    // An upstream that cannot be reached: 502 UNAVAILABLE.
    let dead = TestGateway::start().await;
    dead.add("gone", "anthropic", "http://127.0.0.1:9", json!({})).await;
    let r = dead.gemini_post("/v1beta/models/m:generateContent", &body).await;
    assert_eq!(r.status(), 502);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["status"], "UNAVAILABLE");
    // Every candidate rate-limited past the budget: 429 RESOURCE_EXHAUSTED with Retry-After.
    g.settings(json!({"rate_limit_backoff_budget_secs": 0, "breaker": {"gemini": {"failure_threshold": 1, "rate_limit_timeout_secs": 30}}})).await;
    up.push(Reply::gemini_error(429, "RESOURCE_EXHAUSTED", "quota"));
    let r = g.gemini_post("/v1beta/models/m:generateContent", &body).await;
    assert_eq!(r.status(), 429, "the upstream's own 429 first");
    let r = g.gemini_post("/v1beta/models/m:generateContent", &body).await;
    assert_eq!(r.status(), 429);
    assert!(r.headers().get("retry-after").is_some());
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["status"], "RESOURCE_EXHAUSTED", "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("rate-limited"), "{v}");
    // An unknown path under /v1beta.
    let r = g.gemini_post("/v1beta/models/m:embedContent", &body).await;
    assert_eq!(r.status(), 404);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["status"], "NOT_FOUND");
}

#[tokio::test]
async fn upstream_errors_reach_a_gemini_client_in_its_shape_with_the_status_kept() {
    let body = json!({"contents": [{"parts": [{"text": "hi"}]}]});
    for format in FORMATS {
        for (status, want) in [(400u16, "INVALID_ARGUMENT"), (429, "RESOURCE_EXHAUSTED")] {
            let (up, g) = gateway_with(format, json!({})).await;
            up.set_default(error(format, status, "the upstream said no"));
            let r = g.gemini_post("/v1beta/models/m:generateContent", &body).await;
            assert_eq!(r.status(), status, "{format}");
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["error"]["status"], want, "{format}: {v}");
            assert_eq!(v["error"]["message"], "the upstream said no", "{format}: {v}");
        }
    }
}

#[tokio::test]
async fn a_failure_mid_stream_ends_a_gemini_stream_with_the_bare_error_chunk() {
    let body = json!({"contents": [{"parts": [{"text": "hi"}]}]});
    for format in FORMATS {
        let (up, g) = gateway_with(format, json!({})).await;
        // The stream is cut right after the event that carries its first text.
        let cut = || {
            let events = match format {
                "anthropic" => mock::anthropic_stream_events(&["partial ", "never"]),
                "openai" => mock::openai_chat_stream_events(&["partial ", "never"]),
                "responses" => mock::responses_stream_events(&["partial ", "never"]),
                _ => mock::gemini_stream_events(&["partial ", "never"]),
            };
            let keep = events.iter().position(|e| e.contains("partial ")).unwrap() + 1;
            Reply::sse(events).with_header("content-type", "text/event-stream").cut_after(keep)
        };
        up.push(cut());
        let r = g.gemini_post("/v1beta/models/m:streamGenerateContent?alt=sse", &body).await;
        let text = r.text().await.unwrap();
        let (chunks, err) = read_sse(&text);
        assert_eq!(stream_text(&chunks), "partial ", "{format}: {text}");
        assert!(!finished(&chunks), "{format}: {text}");
        let err = err.unwrap_or_else(|| panic!("{format}: no bare error line in {text:?}"));
        assert!(err["error"]["code"].is_u64() && err["error"]["status"].is_string(), "{format}: {err}");
        assert!(text.ends_with("}\n"), "{format}: a line of its own: {text:?}");
        assert_eq!(g.health("up").await["consecutive_failures"], 1, "{format}");

        // The JSON-array stream ends with the error as its last element, and stays valid JSON.
        up.push(cut());
        let r = g.gemini_post("/v1beta/models/m:streamGenerateContent", &body).await;
        let v: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
        let items = v.as_array().unwrap();
        assert_eq!(stream_text(&items[..items.len() - 1]), "partial ", "{format}: {v}");
        assert!(items.last().unwrap()["error"]["status"].is_string(), "{format}: {v}");
    }
}

#[tokio::test]
async fn an_upstream_error_event_mid_stream_reaches_a_gemini_client_as_the_bare_chunk() {
    // A Gemini endpoint that reports the error as an SSE event: the Gemini CLI ignores that form,
    // so the gateway adds the bare chunk after it.
    let (up, g) = gateway_with("gemini", json!({})).await;
    up.push(Reply::sse([
        gemini_chunk(&gemini_response(json!([{"text": "partial "}]), None, None, "r")),
        gemini_chunk(&json!({"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}})),
    ]));
    let body = json!({"contents": [{"parts": [{"text": "hi"}]}]});
    let text = g.gemini_post("/v1beta/models/m:streamGenerateContent?alt=sse", &body).await.text().await.unwrap();
    let (chunks, err) = read_sse(&text);
    assert_eq!(stream_text(&chunks), "partial ", "{text}");
    let err = err.unwrap_or_else(|| panic!("no bare error line in {text:?}"));
    assert_eq!(err["error"]["message"], "The model is overloaded.", "{err}");
    assert_eq!(err["error"]["status"], "UNAVAILABLE");
    assert_eq!(g.health("up").await["consecutive_failures"], 1);
}

#[tokio::test]
async fn a_gemini_stream_without_a_finish_reason_is_incomplete() {
    let (up, g) = gateway_with("gemini", json!({})).await;
    up.push(Reply::gemini_stream(&["a", "b", "c"]).truncated(2));
    let body = json!({"contents": [{"parts": [{"text": "hi"}]}]});
    let text = g.gemini_post("/v1beta/models/m:streamGenerateContent?alt=sse", &body).await.text().await.unwrap();
    let (chunks, err) = read_sse(&text);
    assert_eq!(stream_text(&chunks), "ab");
    assert!(err.is_some(), "{text}");
    assert_eq!(g.health("up").await["consecutive_failures"], 1);
}

#[tokio::test]
async fn count_tokens_is_counted_by_anthropic_and_gemini_endpoints_and_estimated_otherwise() {
    let f = fixture("pysdk_count_tokens_11_v1_countTokens_gemini-2.5-flash.json");
    // An Anthropic endpoint counts with its count_tokens.
    let (up, g) = gateway_with("anthropic", json!({})).await;
    up.push(Reply::json(200, json!({"input_tokens": 12})));
    let r = g.replay(&f, false).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("x-ccmesh-token-count").is_none());
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"totalTokens": 12}));
    let seen = up.last_request().unwrap();
    assert_eq!(seen.path, "/v1/messages/count_tokens");
    let sent = seen.json();
    assert_eq!(sent["model"], "gemini-2.5-flash");
    assert!(sent["messages"][0]["content"].to_string().contains("how many tokens"), "{sent}");
    check_credentials(&seen, "anthropic");
    // One without the method: estimated, and said so.
    up.push(Reply::anthropic_error(404, "not_found_error", "no count_tokens here"));
    let r = g.replay(&f, false).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ccmesh-token-count"], "estimated");
    assert!(r.json::<Value>().await.unwrap()["totalTokens"].as_u64().unwrap() > 0);
    assert_eq!(g.health("up").await["consecutive_failures"], 0);

    // A Gemini endpoint: passed through to its countTokens.
    let (up, g) = gateway_with("gemini", json!({})).await;
    up.push(Reply::json(200, json!({"totalTokens": 9})));
    let r = g.replay(&f, false).await;
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"totalTokens": 9}));
    let seen = up.last_request().unwrap();
    assert_eq!(seen.path, "/v1beta/models/gemini-2.5-flash:countTokens");
    assert_eq!(seen.body.as_ref(), f.body.as_slice());

    // OpenAI-family endpoints have no token count: estimated, nothing sent.
    for format in ["openai", "responses"] {
        let (up, g) = gateway_with(format, json!({})).await;
        let r = g.replay(&f, false).await;
        assert_eq!(r.status(), 200, "{format}");
        assert_eq!(r.headers()["x-ccmesh-token-count"], "estimated", "{format}");
        let n = r.json::<Value>().await.unwrap()["totalTokens"].as_u64().unwrap();
        assert!((3..40).contains(&n), "{format}: {n}");
        assert_eq!(up.request_count(), 0, "{format}");
    }
}

#[tokio::test]
async fn models_are_listed_and_got_in_geminis_shape() {
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("gem", "gemini", &up.url(), json!({"models": ["gemini-2.5-flash", "gemini-2.5-pro", "gemini-3-pro"]})).await;
    g.add("kimi", "anthropic", &up.url(), json!({"models": ["kimi-k2"], "model_map": {"gemini-2.5-flash": "kimi-k2"}}))
        .await;

    // A Gemini client on /v1/models (the SDKs' list, paged) and on /v1beta/models.
    let (status, first) = g.gemini_get("/v1/models?pageSize=2").await;
    assert_eq!(status, 200, "{first}");
    let names: Vec<&str> = first["models"].as_array().unwrap().iter().map(|m| m["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["models/gemini-2.5-flash", "models/gemini-2.5-pro"]);
    assert_eq!(first["models"][0]["ccmesh_endpoints"], json!(["gem", "kimi"]));
    assert!(first["models"][0]["supportedGenerationMethods"].as_array().unwrap().contains(&json!("generateContent")));
    let token = first["nextPageToken"].as_str().unwrap();
    let (_, next) = g.gemini_get(&format!("/v1/models?pageSize=2&pageToken={token}")).await;
    let names: Vec<&str> = next["models"].as_array().unwrap().iter().map(|m| m["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["models/gemini-3-pro", "models/kimi-k2"]);
    assert!(next.get("nextPageToken").is_none(), "{next}");
    let r = g.http.get(format!("{}/v1beta/models", g.url)).send().await.unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["models"].as_array().unwrap().len(), 4, "/v1beta is Gemini's");
    let r = g.http.get(format!("{}/v1/models?key={CLIENT_KEY}", g.url)).send().await.unwrap();
    assert!(r.json::<Value>().await.unwrap()["models"].is_array(), "?key= marks a Gemini client");
    // The credential is checked first: an x-api-key client with a Google key is a Gemini client.
    let r = g
        .http
        .get(format!("{}/v1/models", g.url))
        .header("x-goog-api-key", CLIENT_KEY)
        .header("anthropic-version", "2023-06-01")
        .send()
        .await
        .unwrap();
    assert!(r.json::<Value>().await.unwrap()["models"].is_array());
    // Others still get their own shapes.
    let r = g.http.get(format!("{}/v1/models", g.url)).send().await.unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["object"], "list");

    // models.get
    for path in ["/v1beta/models/gemini-2.5-pro", "/v1/models/gemini-2.5-pro"] {
        let (status, m) = g.gemini_get(path).await;
        assert_eq!((status, m["name"].as_str()), (200, Some("models/gemini-2.5-pro")), "{path}: {m}");
    }
    let (status, m) = g.gemini_get("/v1beta/models/gpt-5").await;
    assert_eq!(status, 404);
    assert_eq!(m["error"]["status"], "NOT_FOUND", "{m}");
    assert_eq!(up.request_count(), 0, "answered by the gateway itself");
}

#[tokio::test]
async fn gemini_requests_use_geminis_own_settings_queue_and_current_endpoint() {
    let a = MockUpstream::start().await;
    let b = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("a", "gemini", &a.url(), json!({})).await;
    g.add("b", "anthropic", &b.url(), json!({})).await;
    let body = json!({"contents": [{"parts": [{"text": "hi"}]}]});

    // a fails: the request fails over to b, which becomes gemini's current endpoint only.
    a.push(Reply::gemini_error(500, "INTERNAL", "boom"));
    b.push(Reply::anthropic_message("from b"));
    let r = g.gemini_post("/v1beta/models/m:generateContent", &body).await;
    assert_eq!(r.headers()["x-ccmesh-endpoint"], "b");
    let (_, current) = g.api(reqwest::Method::GET, "/api/current", None).await;
    assert_eq!(current["gemini"], "b", "{current}");
    assert_eq!(current["claude"], Value::Null, "{current}");

    // Failover off for gemini: a's failure is the answer.
    g.settings(json!({"failover_enabled": {"gemini": false}})).await;
    let (_, c) =
        g.api(reqwest::Method::PUT, "/api/current", Some(json!({"protocol": "gemini", "endpoint": "a"}))).await;
    assert_eq!(c["gemini"], "a", "{c}");
    a.push(Reply::gemini_error(500, "INTERNAL", "boom"));
    let r = g.gemini_post("/v1beta/models/m:generateContent", &body).await;
    assert_eq!(r.status(), 500);
    assert_eq!(b.request_count(), 1);

    // Records and stats carry the protocol.
    let sink = g.gw.events.records().clone();
    let deadline = std::time::Duration::from_secs(10);
    assert!(tokio::task::spawn_blocking(move || sink.flush(deadline)).await.unwrap());
    let (_, stats) = g.api(reqwest::Method::GET, "/api/stats?group_by=protocol", None).await;
    let groups = stats["groups"].as_array().unwrap();
    assert!(groups.iter().any(|gr| gr["key"] == "gemini" && gr["totals"]["requests"] == 2), "{stats}");
    let (_, page) = g.api(reqwest::Method::GET, "/api/requests?protocol=gemini", None).await;
    assert_eq!(page["requests"].as_array().unwrap().len(), 2, "{page}");
    let metrics = g.http.get(format!("{}/metrics", g.url)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("ccmesh_requests_total{protocol=\"gemini\",endpoint=\"b\""), "{metrics}");
    assert!(metrics.contains("ccmesh_failovers_total{protocol=\"gemini\",from=\"a\",to=\"b\"} 1"), "{metrics}");
}
