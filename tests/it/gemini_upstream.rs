//! A Gemini-format endpoint behind the other three inbound protocols, end to end through the
//! real gateway: the URL (`/v1beta/models/{model}:generateContent`, `:streamGenerateContent?alt=sse`,
//! `:countTokens`), the `x-goog-api-key` credential, answers, streams, tool round trips with thought
//! signatures, errors and mid-stream errors converted to each client's own shape.

use serde_json::{Value, json};

use crate::support::gateway::{TestGateway, chat_body, claude_body, responses_body};
use crate::support::mock::{self, MockUpstream, Reply, gemini_chunk, gemini_response};

const KEY: &str = "sk-up-secret-key-0000";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Client {
    Claude,
    Chat,
    Responses,
}

const CLIENTS: [Client; 3] = [Client::Claude, Client::Chat, Client::Responses];

impl Client {
    fn path(self) -> &'static str {
        match self {
            Client::Claude => "/v1/messages",
            Client::Chat => "/v1/chat/completions",
            Client::Responses => "/v1/responses",
        }
    }

    fn body(self, stream: bool) -> Value {
        match self {
            Client::Claude => claude_body("the-model", stream),
            Client::Chat => chat_body("the-model", stream),
            Client::Responses => responses_body("the-model", stream),
        }
    }

    /// The answer's text, model and (input, output) usage in this client's shape.
    fn read_plain(self, v: &Value) -> (String, String, u64, u64) {
        let n = |v: &Value| v.as_u64().unwrap_or(u64::MAX);
        match self {
            Client::Claude => (
                v["content"][0]["text"].as_str().unwrap().into(),
                v["model"].as_str().unwrap().into(),
                n(&v["usage"]["input_tokens"]),
                n(&v["usage"]["output_tokens"]),
            ),
            Client::Chat => (
                v["choices"][0]["message"]["content"].as_str().unwrap().into(),
                v["model"].as_str().unwrap().into(),
                n(&v["usage"]["prompt_tokens"]),
                n(&v["usage"]["completion_tokens"]),
            ),
            Client::Responses => {
                let text = v["output"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|i| i["type"] == "message")
                    .flat_map(|i| i["content"].as_array().unwrap().iter().filter_map(|c| c["text"].as_str()))
                    .collect();
                (
                    text,
                    v["model"].as_str().unwrap().into(),
                    n(&v["usage"]["input_tokens"]),
                    n(&v["usage"]["output_tokens"]),
                )
            }
        }
    }

    /// The text of a stream in this client's shape, whether it ended with its terminal event,
    /// and its error event's data, if any.
    fn read_stream(self, text: &str) -> (String, bool, Option<Value>) {
        let mut out = String::new();
        let (mut terminal, mut error) = (false, None);
        for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
            let name = block.lines().find_map(|l| l.strip_prefix("event: ")).map(str::to_owned);
            let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) else { continue };
            if data == "[DONE]" {
                terminal = true;
                continue;
            }
            let v: Value = serde_json::from_str(data).unwrap();
            match self {
                Client::Claude => match v["type"].as_str() {
                    Some("content_block_delta") => out.push_str(v["delta"]["text"].as_str().unwrap_or("")),
                    Some("message_stop") => terminal = true,
                    Some("error") => error = Some(v),
                    _ => {}
                },
                Client::Chat => {
                    if v.get("error").is_some() {
                        error = Some(v);
                    } else if let Some(t) = v["choices"][0]["delta"]["content"].as_str() {
                        out.push_str(t);
                    }
                }
                Client::Responses => match name.as_deref() {
                    Some("response.output_text.delta") => out.push_str(v["delta"].as_str().unwrap()),
                    Some("response.completed") => terminal = true,
                    Some("response.failed") => error = Some(v),
                    _ => {}
                },
            }
        }
        (out, terminal, error)
    }
}

/// What reached the Gemini upstream: its own path and credential, a Gemini body.
fn check_gemini_request(seen: &mock::RecordedRequest, model: &str, stream: bool) {
    let method = if stream { "streamGenerateContent" } else { "generateContent" };
    assert_eq!(seen.path, format!("/v1beta/models/{model}:{method}"));
    assert_eq!(seen.query.as_deref(), stream.then_some("alt=sse"), "only alt=sse, never the client's query");
    assert_eq!(seen.header("x-goog-api-key"), Some(KEY));
    for foreign in ["authorization", "x-api-key", "anthropic-version"] {
        assert!(seen.header(foreign).is_none(), "{foreign} must not reach a Gemini endpoint");
    }
    let v = seen.json();
    assert!(v.get("model").is_none() && v.get("stream").is_none(), "the model and the method are in the path: {v}");
    assert_eq!(v["contents"].as_array().unwrap().last().unwrap()["role"], "user", "{v}");
}

async fn gemini_gateway(extra: Value) -> (MockUpstream, TestGateway) {
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    let mut extra = extra;
    extra["api_key"] = json!(KEY);
    g.add("gem", "gemini", &up.url(), extra).await;
    (up, g)
}

#[tokio::test]
async fn every_client_gets_plain_and_streamed_answers_from_a_gemini_endpoint() {
    for client in CLIENTS {
        let (up, g) = gemini_gateway(json!({})).await;
        up.push(Reply::gemini_message("hello from gemini"));
        let r =
            g.post_with(client.path(), &client.body(false), &[("x-goog-api-key", "client-key-must-not-leak")]).await;
        assert_eq!(r.status(), 200, "{client:?}");
        let v: Value = r.json().await.unwrap();
        let (text, model, input, output) = client.read_plain(&v);
        assert_eq!(text, "hello from gemini", "{client:?}: {v}");
        assert_eq!(model, mock::GEMINI_MODEL, "the model Gemini says answered");
        assert_eq!((input, output), (mock::INPUT_TOKENS, mock::OUTPUT_TOKENS), "{client:?}: {v}");
        check_gemini_request(&up.last_request().unwrap(), "the-model", false);

        up.push(Reply::gemini_stream(&["str", "eamed ", "answer"]));
        let mut body = client.body(true);
        if client == Client::Chat {
            body["stream_options"] = json!({"include_usage": true});
        }
        let r = g.post(client.path(), &body).await;
        assert_eq!(r.status(), 200, "{client:?}");
        let text = String::from_utf8(r.bytes().await.unwrap().to_vec()).unwrap();
        let (out, terminal, error) = client.read_stream(&text);
        assert_eq!((out.as_str(), terminal, error), ("streamed answer", true, None), "{client:?}: {text}");
        check_gemini_request(&up.last_request().unwrap(), "the-model", true);
        let h = g.health("gem").await;
        assert_eq!((h["requests"].clone(), h["consecutive_failures"].clone()), (json!(2), json!(0)), "{client:?}");
    }
}

#[tokio::test]
async fn the_mapped_model_goes_into_the_path_and_a_versioned_base_url_keeps_its_version() {
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("gem", "gemini", &format!("{}/v1", up.url()), json!({"api_key": KEY, "model_map": {"*": "gemini-2.5-pro"}}))
        .await;
    up.push(Reply::gemini_message("ok"));
    assert_eq!(g.post("/v1/messages", &claude_body("claude-sonnet-4-5", false)).await.status(), 200);
    assert_eq!(up.last_request().unwrap().path, "/v1/models/gemini-2.5-pro:generateContent");
}

#[tokio::test]
async fn gemini_errors_reach_each_client_in_its_own_shape_with_the_status_kept() {
    for client in CLIENTS {
        for (status, rpc, message) in [
            (429u16, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota)."),
            (400, "INVALID_ARGUMENT", "Request contains an invalid argument."),
        ] {
            let (up, g) = gemini_gateway(json!({})).await;
            up.set_default(Reply::gemini_error(status, rpc, message));
            let r = g.post(client.path(), &client.body(false)).await;
            assert_eq!(r.status(), status, "{client:?}");
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["error"]["message"], message, "{client:?}: {v}");
            let want = match (client, status) {
                (Client::Claude, 429) => "rate_limit_error",
                (Client::Claude, _) => "invalid_request_error",
                (_, 429) => "rate_limit_error",
                (_, _) => "invalid_request_error",
            };
            assert_eq!(v["error"]["type"], want, "{client:?}: {v}");
        }
    }
}

#[tokio::test]
async fn a_gemini_error_chunk_mid_stream_becomes_the_clients_error_event() {
    for client in CLIENTS {
        let (up, g) = gemini_gateway(json!({})).await;
        let id = "resp-mid";
        up.push(Reply::sse([
            gemini_chunk(&gemini_response(json!([{"text": "partial "}]), None, None, id)),
            gemini_chunk(
                &json!({"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}),
            ),
        ]));
        let text =
            String::from_utf8(g.post(client.path(), &client.body(true)).await.bytes().await.unwrap().to_vec()).unwrap();
        let (out, terminal, error) = client.read_stream(&text);
        assert_eq!(out, "partial ", "{client:?}: {text}");
        assert!(!terminal, "{client:?}: {text}");
        let error = error.unwrap_or_else(|| panic!("{client:?}: no error event in {text}"));
        assert!(error.to_string().contains("The model is overloaded."), "{client:?}: {error}");
        assert_eq!(g.health("gem").await["consecutive_failures"], 1, "{client:?}");
    }
}

#[tokio::test]
async fn a_gemini_stream_cut_before_its_finish_reason_is_a_failure() {
    let (up, g) = gemini_gateway(json!({})).await;
    up.push(Reply::gemini_stream(&["a", "b", "c"]).truncated(2));
    let text = String::from_utf8(g.post("/v1/messages", &claude_body("m", true)).await.bytes().await.unwrap().to_vec())
        .unwrap();
    let (out, terminal, error) = Client::Claude.read_stream(&text);
    assert_eq!(out, "ab");
    assert!(!terminal && error.is_some(), "{text}");
    assert_eq!(g.health("gem").await["consecutive_failures"], 1);
}

#[tokio::test]
async fn a_blocked_prompt_is_a_successful_refusal() {
    let (up, g) = gemini_gateway(json!({})).await;
    up.push(Reply::json(200, json!({"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 5, "totalTokenCount": 5}, "modelVersion": mock::GEMINI_MODEL})));
    let r = g.post("/v1/messages", &claude_body("m", false)).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["stop_reason"], "refusal", "{v}");
    assert_eq!(g.health("gem").await["consecutive_failures"], 0);
}

#[tokio::test]
async fn a_tool_round_trip_keeps_ids_and_thought_signatures() {
    let (up, g) = gemini_gateway(json!({})).await;
    // Gemini 2.x: a call without an id, with the signature Gemini 3 wants back.
    let call = json!([{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "CiQB0e2Kb+/x9A=="}]);
    up.push(Reply::sse([gemini_chunk(&gemini_response(
        call,
        Some("STOP"),
        Some(json!({"promptTokenCount": 20, "candidatesTokenCount": 5, "totalTokenCount": 25})),
        "r1",
    ))]));
    let tools = json!([{"name": "get_weather", "description": "weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]);
    let turn1 = json!({"model": "m", "max_tokens": 100, "stream": true, "tools": tools, "messages": [{"role": "user", "content": "Weather in Paris?"}]});
    let text = String::from_utf8(g.post("/v1/messages", &turn1).await.bytes().await.unwrap().to_vec()).unwrap();
    let start = text
        .split("\n\n")
        .filter_map(|b| b.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .find(|v| v["content_block"]["type"] == "tool_use")
        .unwrap_or_else(|| panic!("no tool_use block: {text}"));
    let id = start["content_block"]["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("call_") && id.contains("__thought__"), "{id}");
    assert!(text.contains("\"stop_reason\":\"tool_use\""), "{text}");
    let sent = up.last_request().unwrap().json();
    assert_eq!(sent["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"], tools[0]["input_schema"]);

    up.push(Reply::gemini_message("It is sunny."));
    let turn2 = json!({"model": "m", "max_tokens": 100, "tools": tools, "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "sunny"}]}
    ]});
    let v: Value = g.post("/v1/messages", &turn2).await.json().await.unwrap();
    assert_eq!(v["content"][0]["text"], "It is sunny.", "{v}");
    let sent = up.last_request().unwrap().json();
    let model_turn = &sent["contents"][1];
    assert_eq!(model_turn["role"], "model");
    assert_eq!(model_turn["parts"][0]["thoughtSignature"], "CiQB0e2Kb+/x9A==", "the signature goes back: {sent}");
    let call_id = model_turn["parts"][0]["functionCall"]["id"].as_str().unwrap();
    assert_eq!(sent["contents"][2]["parts"][0]["functionResponse"]["id"], call_id);
    assert_eq!(sent["contents"][2]["parts"][0]["functionResponse"]["response"], json!({"output": "sunny"}));
}

#[tokio::test]
async fn count_tokens_is_answered_by_a_gemini_endpoints_count_tokens() {
    let (up, g) = gemini_gateway(json!({})).await;
    up.push(Reply::json(
        200,
        json!({"totalTokens": 31, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 31}]}),
    ));
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "count me"}]});
    let r = g.post("/v1/messages/count_tokens", &body).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("x-ccmesh-token-count").is_none(), "counted by the endpoint, not estimated");
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"input_tokens": 31}));
    let seen = up.last_request().unwrap();
    assert_eq!(seen.path, "/v1beta/models/m:countTokens");
    assert_eq!(seen.json()["generateContentRequest"]["model"], "models/m");
    assert_eq!(seen.json()["generateContentRequest"]["contents"][0]["parts"][0]["text"], "count me");

    // A relay without the method: the gateway estimates, and says so.
    up.push(Reply::gemini_error(404, "NOT_FOUND", "no such method"));
    let r = g.post("/v1/messages/count_tokens", &body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ccmesh-token-count"], "estimated");
    assert_eq!(g.health("gem").await["consecutive_failures"], 0, "a missing count_tokens is neutral");
}

#[tokio::test]
async fn the_connectivity_test_calls_generate_content_with_the_test_model() {
    let (up, g) = gemini_gateway(json!({"test_model": "gemini-2.5-flash"})).await;
    up.push(Reply::gemini_message("pong"));
    let (status, v) = g.api(reqwest::Method::POST, "/api/endpoints/gem/test", None).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["test_status"], "available", "{v}");
    let seen = up.last_request().unwrap();
    assert_eq!(seen.path, "/v1beta/models/gemini-2.5-flash:generateContent");
    assert_eq!(seen.header("x-goog-api-key"), Some(KEY));
    assert_eq!(seen.json()["contents"][0]["parts"][0]["text"], "ping");
}
