//! The OpenAI Responses API codec (`POST /v1/responses`): requests, `response` objects,
//! stream events and error bodies to and from the conversion IR (`super::ir`).
//!
//! Mapping tables, refusals and deviations: `docs/protocols/responses.md`.
//!
//! Design points worth knowing before reading the code:
//! - Codex `namespace` tools are flattened to `{namespace}__{name}` (Codex's own canonical flat
//!   name: underscores around the delimiter are trimmed), both in `tools` and in history
//!   `function_call` items that carry a `namespace`; the encoders turn a call to a flat name
//!   back into `{"name": name, "namespace": ns}` with `EncodeContext::namespaced_tools`.
//! - Server-side state (`previous_response_id`, `conversation`, stored prompts, item references,
//!   file ids, background mode) cannot be rebuilt for another protocol: `ConvertError`.
//! - Upstream `reasoning` items become `Thinking` (their summary text), so Chat and Anthropic
//!   clients see the reasoning; their encrypted content is useless outside OpenAI.
//! - For a Responses client that asked for `reasoning.encrypted_content`, a signed Anthropic
//!   thinking block is handed out as a `reasoning` item whose `encrypted_content` carries the
//!   signature behind a `ccmesh` prefix; when the client replays the item, `decode_request`
//!   restores the signed `Thinking` block, so Anthropic's tool loop with thinking keeps working.
//!
//! One concern per file, as in every codec: `request` (`decode`, `encode`), `response`, `stream`
//! (`decode`, `encode`), `error`. This file holds the little that several of them use.

mod error;
mod request;
mod response;
mod stream;

pub use error::{decode_error, encode_error};
pub use request::{decode_request, encode_request};
pub use response::{decode_response, encode_response};
pub use stream::{StreamDecoder, StreamEncoder};

use serde_json::{Value, json};

use super::ir::*;
use crate::protocol::lenient::{count, data_url};

/// `encrypted_content` prefix of a reasoning item that carries an Anthropic thinking signature.
const THINKING_BLOB: &str = "ccmesh.anthropic-thinking.v1:";

/// `encrypted_content` prefix of a reasoning item that carries Anthropic redacted thinking.
const REDACTED_BLOB: &str = "ccmesh.anthropic-redacted.v1:";

/// Separator between the summary parts of one reasoning item when shown as one thinking text.
const SUMMARY_SEPARATOR: &str = "\n\n";

fn get_str<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// `lenient::take_str` on a value that should be an object.
fn take_str(v: &mut Value, key: &str) -> Option<String> {
    v.as_object_mut().and_then(|o| crate::protocol::lenient::take_str(o, key))
}

fn get_u64(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(count)
}

fn is_set(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) => !s.is_empty(),
        Some(_) => true,
    }
}

fn text_part(text: impl Into<String>) -> TextPart {
    TextPart { text: text.into(), cache_control: None }
}

/// Codex's canonical flat name for a namespaced tool (`codex-rs/protocol/src/tool_name.rs`).
fn flat_tool_name(namespace: &str, name: &str) -> String {
    let (namespace, name) = (namespace.trim_end_matches('_'), name.trim_start_matches('_'));
    // Built by hand: `format!` costs several times as much, once per namespaced tool per request.
    let mut flat = String::with_capacity(namespace.len() + 2 + name.len());
    flat.push_str(namespace);
    flat.push_str("__");
    flat.push_str(name);
    flat
}

fn image_url(image: &Image) -> String {
    match image {
        Image::Base64 { media_type, data } => data_url(media_type, data),
        Image::Url { url } => url.clone(),
    }
}

/// A `reasoning` item (input history or upstream output) as an IR part: ccmesh's own carriers
/// of Anthropic thinking turn back into signed thinking; anything else is a reasoning item.
fn reasoning_part(item: &Value) -> Part {
    let summary: Vec<String> = item
        .get("summary")
        .and_then(Value::as_array)
        .map(|parts| parts.iter().filter_map(|p| get_str(p, "text")).map(str::to_owned).collect())
        .unwrap_or_default();
    let encrypted = get_str(item, "encrypted_content");
    if let Some(sig) = encrypted.and_then(|e| e.strip_prefix(THINKING_BLOB)) {
        return Part::Thinking {
            text: summary.join(SUMMARY_SEPARATOR),
            signature: (!sig.is_empty()).then(|| sig.to_owned()),
        };
    }
    if let Some(data) = encrypted.and_then(|e| e.strip_prefix(REDACTED_BLOB)) {
        return Part::RedactedThinking { data: data.to_owned() };
    }
    Part::ReasoningItem {
        id: get_str(item, "id").map(str::to_owned),
        summary,
        encrypted_content: encrypted.map(str::to_owned),
    }
}

/// A tool result as `function_call_output.output`: a string for text, or an input content list
/// when it holds images. The Responses format has no error flag: an error result is prefixed
/// with `Error: ` (unless its text already says so).
fn tool_output_value(content: &[ToolResultContent], is_error: bool) -> Value {
    let has_image = content.iter().any(|c| matches!(c, ToolResultContent::Image(_)));
    let mark = |text: &str| -> String {
        if is_error && !text.starts_with("Error") { format!("Error: {text}") } else { text.to_owned() }
    };
    if !has_image {
        let joined: Vec<&str> = content
            .iter()
            .filter_map(|c| match c {
                ToolResultContent::Text(t) => Some(t.as_str()),
                ToolResultContent::Image(_) => None,
            })
            .collect();
        let text = joined.join("\n");
        return Value::String(if is_error { mark(&text) } else { text });
    }
    let mut parts = Vec::new();
    if is_error && !content.iter().any(|c| matches!(c, ToolResultContent::Text(_))) {
        parts.push(json!({"type": "input_text", "text": "Error"}));
    }
    let mut first_text = true;
    for c in content {
        match c {
            ToolResultContent::Text(t) => {
                let text = if first_text && is_error { mark(t) } else { t.clone() };
                first_text = false;
                parts.push(json!({"type": "input_text", "text": text}));
            }
            ToolResultContent::Image(img) => {
                parts.push(json!({"type": "input_image", "image_url": image_url(img), "detail": "auto"}));
            }
        }
    }
    Value::Array(parts)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    //! Helpers every test of this codec uses, and the properties that span its files: round
    //! trips, stream validity, and no panic on any well-typed input.

    use super::*;
    use crate::protocol::errors::ErrorKind;
    use crate::protocol::lenient::{arguments_string, parse_arguments};
    use crate::protocol::sse::{SseEvent, SseScanner};
    use proptest::prelude::*;

    pub(super) const CODEX_TURN2: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/clients/codex_0.171.0_responses_turn2_function_call_output.json"
    ));

    pub(super) fn fixture_body(fixture: &str) -> Vec<u8> {
        let v: Value = serde_json::from_str(fixture).unwrap();
        serde_json::to_vec(&v["body"]).unwrap()
    }

    pub(super) fn dec(v: Value) -> Result<Request, ConvertError> {
        decode_request(&serde_json::to_vec(&v).unwrap())
    }

    pub(super) fn enc(req: &Request) -> (Value, Vec<Loss>) {
        let e = encode_request(req).unwrap();
        (serde_json::from_slice(&e.body).unwrap(), e.losses)
    }

    pub(super) fn ctx() -> EncodeContext {
        EncodeContext {
            request_model: "gpt-5".into(),
            include_usage: false,
            namespaced_tools: vec![(
                "multi_agent_v1__spawn_agent".into(),
                "multi_agent_v1".into(),
                "spawn_agent".into(),
            )],
            created: 1_700_000_000,
            id_seed: "seed1".into(),
            include_encrypted_reasoning: false,
            kept_ids: Default::default(),
        }
    }

    pub(super) fn text(s: &str) -> Part {
        Part::Text(text_part(s))
    }

    pub(super) fn tool_use(id: &str, name: &str, args: &str) -> Part {
        Part::ToolUse { id: id.into(), name: name.into(), input: parse_arguments(args), arguments: Some(args.into()) }
    }

    pub(super) fn user(parts: Vec<Part>) -> Message {
        Message { role: Role::User, content: parts }
    }

    pub(super) fn assistant(parts: Vec<Part>) -> Message {
        Message { role: Role::Assistant, content: parts }
    }

    /// SSE bytes → (event name, data JSON) pairs.
    pub(super) fn parse_sse(bytes: &[u8]) -> Vec<(Option<String>, Value)> {
        let mut s = SseScanner::new();
        let mut out = Vec::new();
        s.feed(bytes, |e| out.push((e.event.map(str::to_owned), serde_json::from_str(e.data).unwrap())));
        assert_eq!(s.pending_bytes(), 0, "incomplete SSE event");
        out
    }

    /// Feeds a transcript through the scanner and the decoder in the given chunks.
    pub(super) fn decode_stream_chunks(chunks: &[&[u8]]) -> Vec<StreamEvent> {
        let mut scanner = SseScanner::new();
        let mut dec = StreamDecoder::new();
        let mut out = Vec::new();
        for c in chunks {
            scanner.feed(c, |e| dec.decode(&e, &mut out));
        }
        dec.finish(&mut out);
        out
    }

    pub(super) fn decode_stream(t: &str) -> Vec<StreamEvent> {
        decode_stream_chunks(&[t.as_bytes()])
    }

    pub(super) fn encode_stream(events: &[StreamEvent], ctx: EncodeContext) -> Vec<u8> {
        let mut enc = StreamEncoder::new(ctx);
        let mut out = Vec::new();
        for e in events {
            enc.encode(e, &mut out);
        }
        out
    }

    // `ResponseStreamState`, the AI SDK chunk schema, Codex's `process_sse`).

    #[derive(Debug, Default)]
    pub(super) struct VItem {
        pub(super) ty: String,
        pub(super) id: String,
        pub(super) parts: Vec<(String, bool)>,
        pub(super) summary: Vec<(String, bool)>,
        pub(super) args: String,
        pub(super) done: Option<Value>,
    }

    /// Checks a Responses SSE transcript produced by the encoder; returns the terminal event.
    pub(super) fn validate_stream(bytes: &[u8]) -> Value {
        let evs = parse_sse(bytes);
        assert!(evs.len() >= 3, "too few events: {evs:?}");
        let mut items: Vec<VItem> = Vec::new();
        let mut resp_id = String::new();
        for (i, (name, data)) in evs.iter().enumerate() {
            let ty = data["type"].as_str().unwrap();
            assert_eq!(name.as_deref(), Some(ty), "event name and type differ");
            assert_eq!(data["sequence_number"].as_u64(), Some(i as u64), "sequence_number at {i}");
            let oi = data["output_index"].as_u64().map(|o| o as usize);
            match (i, ty) {
                (0, t) => {
                    assert_eq!(t, "response.created");
                    assert_eq!(data["response"]["status"], "in_progress");
                    assert_eq!(data["response"]["output"], json!([]));
                    resp_id = data["response"]["id"].as_str().unwrap().to_owned();
                    for k in
                        ["id", "object", "created_at", "model", "output", "parallel_tool_calls", "tool_choice", "tools"]
                    {
                        assert!(data["response"].get(k).is_some(), "response.{k} missing");
                    }
                }
                (1, t) => {
                    assert_eq!(t, "response.in_progress");
                    assert_eq!(data["response"]["id"], resp_id.as_str());
                }
                (_, "response.output_item.added") => {
                    let oi = oi.unwrap();
                    assert_eq!(oi, items.len(), "output_index not contiguous");
                    let item = &data["item"];
                    let ty = item["type"].as_str().unwrap().to_owned();
                    let id = item["id"].as_str().unwrap().to_owned();
                    match ty.as_str() {
                        "message" => {
                            assert_eq!(item["role"], "assistant");
                            assert_eq!(item["content"], json!([]));
                        }
                        "function_call" => {
                            assert!(item["call_id"].is_string() && item["name"].is_string());
                            assert_eq!(item["arguments"], "");
                        }
                        "reasoning" => assert!(item["summary"].is_array()),
                        other => panic!("unexpected item type {other}"),
                    }
                    items.push(VItem { ty, id, ..VItem::default() });
                }
                (_, "response.content_part.added") => {
                    let it = &mut items[oi.unwrap()];
                    assert_eq!(it.ty, "message");
                    assert_eq!(data["item_id"], it.id.as_str());
                    assert_eq!(data["content_index"].as_u64(), Some(it.parts.len() as u64));
                    assert_eq!(data["part"]["text"], "");
                    assert_eq!(data["part"]["annotations"], json!([]));
                    it.parts.push((String::new(), false));
                }
                (_, "response.output_text.delta") => {
                    let it = &mut items[oi.unwrap()];
                    assert_eq!(data["item_id"], it.id.as_str());
                    assert!(data["logprobs"].is_array());
                    let p = &mut it.parts[data["content_index"].as_u64().unwrap() as usize];
                    assert!(!p.1, "delta after part done");
                    p.0.push_str(data["delta"].as_str().unwrap());
                }
                (_, "response.output_text.done") => {
                    let it = &items[oi.unwrap()];
                    assert_eq!(data["item_id"], it.id.as_str());
                    let p = &it.parts[data["content_index"].as_u64().unwrap() as usize];
                    assert_eq!(data["text"], p.0.as_str());
                }
                (_, "response.content_part.done") => {
                    let it = &mut items[oi.unwrap()];
                    assert_eq!(data["item_id"], it.id.as_str());
                    let p = &mut it.parts[data["content_index"].as_u64().unwrap() as usize];
                    assert_eq!(data["part"]["text"], p.0.as_str());
                    p.1 = true;
                }
                (_, "response.reasoning_summary_part.added") => {
                    let it = &mut items[oi.unwrap()];
                    assert_eq!(it.ty, "reasoning");
                    assert_eq!(data["item_id"], it.id.as_str());
                    assert_eq!(data["summary_index"].as_u64(), Some(it.summary.len() as u64));
                    it.summary.push((String::new(), false));
                }
                (_, "response.reasoning_summary_text.delta") => {
                    let it = &mut items[oi.unwrap()];
                    assert_eq!(data["item_id"], it.id.as_str());
                    let s = &mut it.summary[data["summary_index"].as_u64().unwrap() as usize];
                    assert!(!s.1);
                    s.0.push_str(data["delta"].as_str().unwrap());
                }
                (_, "response.reasoning_summary_text.done") => {
                    let it = &items[oi.unwrap()];
                    assert_eq!(data["text"], it.summary[data["summary_index"].as_u64().unwrap() as usize].0.as_str());
                }
                (_, "response.reasoning_summary_part.done") => {
                    let it = &mut items[oi.unwrap()];
                    let s = &mut it.summary[data["summary_index"].as_u64().unwrap() as usize];
                    assert_eq!(data["part"]["text"], s.0.as_str());
                    s.1 = true;
                }
                (_, "response.function_call_arguments.delta") => {
                    let it = &mut items[oi.unwrap()];
                    assert_eq!(it.ty, "function_call");
                    assert_eq!(data["item_id"], it.id.as_str());
                    assert!(it.done.is_none());
                    it.args.push_str(data["delta"].as_str().unwrap());
                }
                (_, "response.function_call_arguments.done") => {
                    let it = &items[oi.unwrap()];
                    assert_eq!(data["item_id"], it.id.as_str());
                    assert_eq!(data["arguments"], it.args.as_str());
                }
                (_, "response.output_item.done") => {
                    let it = &mut items[oi.unwrap()];
                    let item = &data["item"];
                    assert!(it.done.is_none(), "item done twice");
                    assert_eq!(item["id"], it.id.as_str());
                    assert_eq!(item["type"], it.ty.as_str());
                    match it.ty.as_str() {
                        "message" => {
                            assert_eq!(item["status"], "completed");
                            let texts: Vec<&str> = item["content"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .map(|c| c["text"].as_str().unwrap())
                                .collect();
                            let want: Vec<&str> = it.parts.iter().map(|p| p.0.as_str()).collect();
                            assert_eq!(texts, want);
                            assert!(it.parts.iter().all(|p| p.1), "message done with an open part");
                        }
                        "function_call" => {
                            assert_eq!(item["status"], "completed");
                            assert_eq!(item["arguments"], it.args.as_str());
                            assert!(!it.args.is_empty());
                        }
                        _ => {
                            let texts: Vec<&str> = item["summary"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .map(|c| c["text"].as_str().unwrap())
                                .collect();
                            let want: Vec<&str> = it.summary.iter().map(|p| p.0.as_str()).collect();
                            assert_eq!(texts, want);
                        }
                    }
                    it.done = Some(item.clone());
                }
                (_, "response.completed" | "response.incomplete" | "response.failed") => {
                    assert_eq!(i, evs.len() - 1, "events after the terminal event");
                    let r = &data["response"];
                    assert_eq!(r["id"], resp_id.as_str());
                    let status = ty.trim_start_matches("response.");
                    assert_eq!(r["status"], status);
                    if ty != "response.failed" {
                        assert!(items.iter().all(|it| it.done.is_some()), "unfinished items at completion");
                        let done: Vec<Value> = items.iter().map(|it| it.done.clone().unwrap()).collect();
                        assert_eq!(r["output"], Value::Array(done));
                        let u = &r["usage"];
                        for k in ["input_tokens", "output_tokens", "total_tokens"] {
                            assert!(u[k].is_u64(), "usage.{k}");
                        }
                        assert!(u["input_tokens_details"]["cached_tokens"].is_u64());
                        assert!(u["output_tokens_details"]["reasoning_tokens"].is_u64());
                    } else {
                        assert!(r["error"]["message"].is_string());
                        assert!(r["error"]["code"].is_string());
                    }
                    return data.clone();
                }
                (_, other) => panic!("unexpected event {other}"),
            }
        }
        panic!("no terminal event");
    }

    /// An IR request shaped like a Claude Code turn 2 (decoded from Anthropic).
    pub(super) fn claude_code_like() -> Request {
        Request {
            model: "gpt-5".into(),
            system: vec![
                text_part("x-anthropic-billing-header: cc_version=2.1.197"),
                text_part("You are Claude Code, Anthropic's official CLI for Claude."),
            ],
            messages: vec![
                user(vec![text("<system-reminder>context</system-reminder>"), text("List the files.")]),
                Message { role: Role::System, content: vec![text("Mid-conversation system note.")] },
                assistant(vec![
                    Part::Thinking { text: "I should run ls.".into(), signature: Some("EqQBsig".into()) },
                    Part::RedactedThinking { data: "EmwKAhgB".into() },
                    text("Running ls."),
                    Part::ToolUse { id: "toolu_01".into(), name: "Bash".into(), input: json!({"command": "ls"}), arguments: None },
                    Part::ToolUse { id: "toolu_02".into(), name: "Read".into(), input: json!({"file_path": "/a"}), arguments: None },
                ]),
                user(vec![
                    Part::ToolResult { tool_use_id: "toolu_01".into(), content: vec![ToolResultContent::Text("a.txt\nb.txt".into())], is_error: false },
                    Part::ToolResult {
                        tool_use_id: "toolu_02".into(),
                        content: vec![ToolResultContent::Text("File does not exist.".into())],
                        is_error: true,
                    },
                    text("Now describe this image."),
                    Part::Image(Image::Base64 { media_type: "image/png".into(), data: "iVBORw0KGgo=".into() }),
                    Part::Document {
                        source: DocumentSource::Base64 { media_type: "application/pdf".into(), data: "JVBERi0=".into() },
                        title: None,
                    },
                    Part::Document { source: DocumentSource::Text { text: "plain doc".into() }, title: Some("notes".into()) },
                ]),
            ],
            tools: vec![
                Tool {
                    name: "Bash".into(),
                    description: Some("Run a command".into()),
                    input_schema: json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}).into(),
                    strict: None,
                    namespace: None,
                },
                Tool { name: "Read".into(), description: None, input_schema: json!({"type": "object"}).into(), strict: Some(true), namespace: None },
            ],
            tool_choice: Some(ToolChoice::Any),
            parallel_tool_calls: Some(false),
            max_tokens: Some(64000),
            temperature: Some(0.0),
            top_p: None,
            top_k: Some(40),
            stop: vec!["\n\nHuman:".into()],
            stream: true,
            include_usage: false,
            reasoning: Some(Reasoning { budget_tokens: Some(31999), effort: None, adaptive: false, summary: None }),
            user: Some(r#"{"device_id":"4919455c86b761be3029337b7158aae0bf90b07f27f8c4250c7736e917107fec","account_uuid":"","session_id":"c5afce96"}"#.into()),
            output_format: None,
            include_encrypted_reasoning: false,
            prompt_cache_key: None,
            losses: Vec::new(),
        }
    }

    pub(super) fn sample_response() -> Response {
        Response {
            id: "msg_01XFDUDYJgAACzvnptvVoYEL".into(),
            model: "claude-sonnet-4-5-20250929".into(),
            content: vec![
                Part::Thinking { text: "The user wants the weather.".into(), signature: Some("EqQBCkYsig".into()) },
                text("Let me check."),
                text(" Right away."),
                Part::ToolUse {
                    id: "toolu_01".into(),
                    name: "get_weather".into(),
                    input: json!({"city": "Paris"}),
                    arguments: None,
                },
                tool_use("toolu_02", "multi_agent_v1__spawn_agent", "{\"task\": \"weather\"}"),
            ],
            stop_reason: Some(StopReason::ToolUse),
            stop_sequence: None,
            usage: Usage {
                input: Some(25),
                output: Some(89),
                cache_read: Some(1000),
                cache_write: Some(300),
                reasoning: None,
            },
            created: None,
        }
    }

    pub(super) fn sse(events: &[Value]) -> String {
        let mut s = String::new();
        for (i, e) in events.iter().enumerate() {
            let mut e = e.clone();
            e["sequence_number"] = json!(i);
            s.push_str(&format!("event: {}\ndata: {}\n\n", e["type"].as_str().unwrap(), e));
        }
        s
    }

    pub(super) fn created(id: &str) -> Vec<Value> {
        let r = json!({"id": id, "object": "response", "created_at": 1741290958, "status": "in_progress", "model": "gpt-5-2025-08-07", "output": [], "usage": null});
        vec![json!({"type": "response.created", "response": r}), json!({"type": "response.in_progress", "response": r})]
    }

    pub(super) fn completed(status: &str, incomplete: Value) -> Value {
        let ty = if status == "incomplete" { "response.incomplete" } else { "response.completed" };
        json!({"type": ty, "response": {"id": "resp_1", "object": "response", "status": status, "model": "gpt-5-2025-08-07",
            "incomplete_details": incomplete, "output": [],
            "usage": {"input_tokens": 3000, "input_tokens_details": {"cached_tokens": 2048}, "output_tokens": 120,
                      "output_tokens_details": {"reasoning_tokens": 64}, "total_tokens": 3120}}})
    }

    /// The IR events of a response, as a decoder would emit them (text split in pieces).
    pub(super) fn response_events(r: &Response) -> Vec<StreamEvent> {
        let mut out = vec![StreamEvent::Start {
            id: r.id.clone(),
            model: r.model.clone(),
            usage: Usage { input: r.usage.input, ..Usage::default() },
            created: r.created,
        }];
        let pieces = |s: &str| -> Vec<String> {
            let chars: Vec<char> = s.chars().collect();
            chars.chunks(5).map(|c| c.iter().collect()).collect()
        };
        for (index, part) in r.content.iter().enumerate() {
            match part {
                Part::Text(t) => {
                    out.push(StreamEvent::BlockStart { index, block: BlockStart::Text });
                    out.extend(pieces(&t.text).into_iter().map(|text| StreamEvent::TextDelta { index, text }));
                }
                Part::Thinking { text, signature } => {
                    out.push(StreamEvent::BlockStart { index, block: BlockStart::Thinking });
                    out.extend(pieces(text).into_iter().map(|text| StreamEvent::ThinkingDelta { index, text }));
                    if let Some(s) = signature {
                        out.push(StreamEvent::SignatureDelta { index, signature: s.clone() });
                    }
                }
                Part::RedactedThinking { data } => {
                    out.push(StreamEvent::BlockStart {
                        index,
                        block: BlockStart::RedactedThinking { data: data.clone() },
                    });
                }
                Part::ReasoningItem { id, summary, encrypted_content } => {
                    out.push(StreamEvent::BlockStart {
                        index,
                        block: BlockStart::ReasoningItem {
                            id: id.clone(),
                            encrypted_content: encrypted_content.clone(),
                        },
                    });
                    let text = summary.join(SUMMARY_SEPARATOR);
                    out.extend(pieces(&text).into_iter().map(|text| StreamEvent::ThinkingDelta { index, text }));
                }
                Part::ToolUse { id, name, input, arguments } => {
                    out.push(StreamEvent::BlockStart {
                        index,
                        block: BlockStart::ToolUse { id: id.clone(), name: name.clone() },
                    });
                    let args = arguments_string(input, arguments.as_deref());
                    out.extend(
                        pieces(&args)
                            .into_iter()
                            .map(|partial_json| StreamEvent::ToolArgsDelta { index, partial_json }),
                    );
                }
                _ => continue,
            }
            out.push(StreamEvent::BlockStop { index });
        }
        out.push(StreamEvent::Finish { stop_reason: r.stop_reason, stop_sequence: None, usage: r.usage });
        out.push(StreamEvent::End);
        out
    }

    #[derive(Debug, Default, PartialEq)]
    pub(super) struct Agg {
        pub(super) texts: Vec<String>,
        pub(super) thinking: Vec<String>,
        pub(super) tools: Vec<(String, String, String)>,
        pub(super) stop: Option<StopReason>,
        pub(super) usage: Option<Usage>,
        pub(super) ended: bool,
    }

    /// What a client sees of a decoded stream: block contents, stop reason, usage.
    pub(super) fn aggregate(evs: &[StreamEvent]) -> Agg {
        #[derive(PartialEq)]
        enum K {
            T,
            R,
            U,
        }
        let mut blocks: Vec<(usize, K, String, String, String)> = Vec::new();
        let mut agg = Agg::default();
        for e in evs {
            match e {
                StreamEvent::BlockStart { index, block } => {
                    assert!(!blocks.iter().any(|b| b.0 == *index), "index reused");
                    let (k, id, name) = match block {
                        BlockStart::Text => (K::T, String::new(), String::new()),
                        BlockStart::ToolUse { id, name } => (K::U, id.clone(), name.clone()),
                        _ => (K::R, String::new(), String::new()),
                    };
                    blocks.push((*index, k, id, name, String::new()));
                }
                StreamEvent::TextDelta { index, text } | StreamEvent::ThinkingDelta { index, text } => {
                    blocks.iter_mut().find(|b| b.0 == *index).expect("delta before start").4.push_str(text);
                }
                StreamEvent::ToolArgsDelta { index, partial_json } => {
                    blocks.iter_mut().find(|b| b.0 == *index).expect("delta before start").4.push_str(partial_json);
                }
                StreamEvent::Finish { stop_reason, usage, .. } => {
                    agg.stop = *stop_reason;
                    agg.usage = Some(*usage);
                }
                StreamEvent::End => agg.ended = true,
                _ => {}
            }
        }
        for (_, k, id, name, content) in blocks {
            match k {
                K::T if !content.is_empty() => agg.texts.push(content),
                K::R if !content.is_empty() => agg.thinking.push(content),
                K::U => agg.tools.push((id, name, content)),
                _ => {}
            }
        }
        agg
    }

    /// What the client of a Responses stream should see for an IR response.
    pub(super) fn expected_agg(r: &Response) -> Agg {
        let mut agg = Agg { ended: true, ..Agg::default() };
        for p in &r.content {
            match p {
                Part::Text(t) if !t.text.is_empty() => agg.texts.push(t.text.clone()),
                Part::Thinking { text, .. } if !text.is_empty() => agg.thinking.push(text.clone()),
                Part::ReasoningItem { summary, .. } if !summary.join(SUMMARY_SEPARATOR).is_empty() => {
                    agg.thinking.push(summary.join(SUMMARY_SEPARATOR));
                }
                Part::ToolUse { id, name, input, arguments } => {
                    agg.tools.push((id.clone(), name.clone(), arguments_string(input, arguments.as_deref())));
                }
                _ => {}
            }
        }
        agg.stop = Some(match r.stop_reason {
            Some(StopReason::MaxTokens) => StopReason::MaxTokens,
            Some(StopReason::Refusal) => StopReason::Refusal,
            _ if !agg.tools.is_empty() => StopReason::ToolUse,
            _ => StopReason::EndTurn,
        });
        let u = r.usage;
        agg.usage = Some(Usage {
            input: Some(u.input.unwrap_or(0)),
            output: Some(u.output.unwrap_or(0)),
            cache_read: Some(u.cache_read.unwrap_or(0)),
            cache_write: Some(u.cache_write.unwrap_or(0)),
            reasoning: Some(u.reasoning.unwrap_or(0)),
        });
        agg
    }

    /// What a request conversion must keep: system text, message texts, tool calls, tool
    /// results, tool declarations.
    pub(super) fn request_view(r: &Request) -> Vec<String> {
        let mut v =
            vec![format!("system: {}", r.system.iter().map(|t| t.text.as_str()).collect::<Vec<_>>().join("\n\n"))];
        for m in &r.messages {
            for p in &m.content {
                match p {
                    Part::Text(t) if !t.text.is_empty() => v.push(format!("{:?} text: {}", m.role, t.text)),
                    Part::ToolUse { id, name, input, arguments } => {
                        v.push(format!("call {id} {name} {}", arguments_string(input, arguments.as_deref())));
                    }
                    Part::ToolResult { tool_use_id, content, is_error } => {
                        v.push(format!("result {tool_use_id} {}", tool_output_value(content, *is_error)));
                    }
                    _ => {}
                }
            }
        }
        for t in &r.tools {
            v.push(format!("tool {} {:?} {}", t.name, t.description, t.input_schema.text()));
        }
        v.push(format!(
            "{:?} {:?} {:?} {:?} {:?} {:?}",
            r.tool_choice, r.parallel_tool_calls, r.temperature, r.top_p, r.stream, r.output_format
        ));
        v
    }

    pub(super) fn arb_text() -> impl Strategy<Value = String> {
        "[a-z0-9 é😀{}\"\\\\\n]{0,12}"
    }

    pub(super) fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| json!(f)),
            arb_text().prop_map(Value::String),
            prop_oneof![
                Just("message"),
                Just("function_call"),
                Just("function_call_output"),
                Just("reasoning"),
                Just("input_text"),
                Just("input_image"),
                Just("output_text"),
                Just("user"),
                Just("assistant"),
                Just("developer"),
                Just("response.completed"),
                Just("response.output_item.added"),
                Just("response.output_text.delta"),
                Just("response.failed"),
                Just("error"),
                Just("namespace"),
                Just("function"),
                Just("incomplete"),
                Just("completed"),
                Just("data:image/png;base64,AA"),
            ]
            .prop_map(|s| Value::String(s.to_owned())),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                proptest::collection::vec(
                    (
                        prop_oneof![
                            Just("type"),
                            Just("role"),
                            Just("content"),
                            Just("text"),
                            Just("input"),
                            Just("model"),
                            Just("output"),
                            Just("tools"),
                            Just("name"),
                            Just("arguments"),
                            Just("call_id"),
                            Just("namespace"),
                            Just("summary"),
                            Just("usage"),
                            Just("input_tokens"),
                            Just("status"),
                            Just("item"),
                            Just("output_index"),
                            Just("content_index"),
                            Just("delta"),
                            Just("response"),
                            Just("error"),
                            Just("image_url"),
                            Just("parameters"),
                            Just("tool_choice"),
                            Just("x"),
                        ],
                        inner,
                    ),
                    0..6,
                )
                .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
            ]
        })
    }

    pub(super) fn arb_usage() -> impl Strategy<Value = Usage> {
        let n = proptest::option::of(0u64..1_000_000_000);
        (n.clone(), n.clone(), n.clone(), n.clone(), n).prop_map(
            |(input, output, cache_read, cache_write, reasoning)| Usage {
                input,
                output,
                cache_read,
                cache_write,
                reasoning,
            },
        )
    }

    pub(super) fn arb_stop() -> impl Strategy<Value = Option<StopReason>> {
        proptest::option::of(prop_oneof![
            Just(StopReason::EndTurn),
            Just(StopReason::MaxTokens),
            Just(StopReason::StopSequence),
            Just(StopReason::ToolUse),
            Just(StopReason::Refusal),
            Just(StopReason::PauseTurn),
        ])
    }

    pub(super) fn arb_image() -> impl Strategy<Value = Image> {
        prop_oneof![
            ("[a-z/]{0,10}", "[A-Za-z0-9+/=]{0,8}").prop_map(|(media_type, data)| Image::Base64 { media_type, data }),
            arb_text().prop_map(|url| Image::Url { url }),
        ]
    }

    pub(super) fn arb_tool_name() -> impl Strategy<Value = String> {
        prop_oneof!["[a-z_]{1,8}", Just("multi_agent_v1__spawn_agent".to_owned()), Just("ns__tool".to_owned()),]
    }

    /// Assistant output parts (what upstreams produce).
    pub(super) fn arb_output_part() -> impl Strategy<Value = Part> {
        prop_oneof![
            4 => arb_text().prop_map(|t| Part::Text(text_part(t))),
            3 => ("[a-zA-Z0-9_]{1,10}", arb_tool_name(), arb_text(), any::<bool>()).prop_map(|(id, name, args, raw)| {
                if raw {
                    Part::ToolUse { id, name, input: parse_arguments(&args), arguments: Some(args) }
                } else {
                    Part::ToolUse { id, name, input: json!({"q": args}), arguments: None }
                }
            }),
            2 => (arb_text(), proptest::option::of("[A-Za-z0-9]{1,8}")).prop_map(|(text, signature)| Part::Thinking { text, signature }),
            1 => "[A-Za-z0-9]{0,8}".prop_map(|data| Part::RedactedThinking { data }),
            1 => (proptest::option::of("rs_[a-z0-9]{1,5}"), proptest::collection::vec(arb_text(), 0..3), proptest::option::of("[A-Za-z0-9]{1,8}"))
                .prop_map(|(id, summary, encrypted_content)| Part::ReasoningItem { id, summary, encrypted_content }),
        ]
    }

    pub(super) fn arb_any_part() -> impl Strategy<Value = Part> {
        prop_oneof![
            4 => arb_output_part(),
            1 => arb_image().prop_map(Part::Image),
            1 => ("[a-zA-Z0-9_]{1,10}", proptest::collection::vec(prop_oneof![
                    arb_text().prop_map(ToolResultContent::Text),
                    arb_image().prop_map(ToolResultContent::Image),
                ], 0..3), any::<bool>())
                .prop_map(|(tool_use_id, content, is_error)| Part::ToolResult { tool_use_id, content, is_error }),
            1 => (prop_oneof![
                    ("[a-z/]{0,10}", "[A-Za-z0-9]{0,8}").prop_map(|(media_type, data)| DocumentSource::Base64 { media_type, data }),
                    arb_text().prop_map(|url| DocumentSource::Url { url }),
                    arb_text().prop_map(|text| DocumentSource::Text { text }),
                ], proptest::option::of(arb_text()))
                .prop_map(|(source, title)| Part::Document { source, title }),
        ]
    }

    pub(super) fn arb_response() -> impl Strategy<Value = Response> {
        (
            proptest::collection::vec(arb_output_part(), 0..6),
            arb_stop(),
            arb_usage(),
            arb_text(),
            proptest::option::of(0u64..2_000_000_000),
        )
            .prop_map(|(content, stop_reason, usage, model, created)| Response {
                id: "up_1".into(),
                model,
                content,
                stop_reason,
                stop_sequence: None,
                usage,
                created,
            })
    }

    /// Requests as the Anthropic and Chat decoders produce them (no thinking kept).
    pub(super) fn arb_request(any_parts: bool) -> impl Strategy<Value = Request> {
        let part = if any_parts { arb_any_part().boxed() } else { arb_output_part().boxed() };
        let user_part = prop_oneof![
            3 => arb_text().prop_map(|t| Part::Text(text_part(t))),
            1 => ("[a-zA-Z0-9_]{1,10}", proptest::collection::vec(arb_text().prop_map(ToolResultContent::Text), 0..3), any::<bool>())
                .prop_map(|(tool_use_id, content, is_error)| Part::ToolResult { tool_use_id, content, is_error }),
        ];
        let user_part = if any_parts { arb_any_part().boxed() } else { user_part.boxed() };
        let msg = prop_oneof![
            proptest::collection::vec(user_part, 1..4).prop_map(|content| Message { role: Role::User, content }),
            proptest::collection::vec(part, 1..4).prop_map(|content| Message { role: Role::Assistant, content }),
        ];
        let tool = (arb_tool_name(), proptest::option::of(arb_text()), proptest::option::of(any::<bool>())).prop_map(
            |(name, description, strict)| Tool {
                name,
                description,
                input_schema: json!({"type": "object"}).into(),
                strict,
                namespace: None,
            },
        );
        let choice = proptest::option::of(prop_oneof![
            Just(ToolChoice::Auto),
            Just(ToolChoice::Any),
            Just(ToolChoice::None),
            arb_tool_name().prop_map(ToolChoice::Tool),
        ]);
        (
            proptest::collection::vec(arb_text(), 0..3),
            proptest::collection::vec(msg, 0..5),
            proptest::collection::vec(tool, 0..3),
            choice,
            proptest::option::of(any::<bool>()),
            proptest::option::of(0u64..100_000),
            // Short decimals, as clients send them (serde_json without `float_roundtrip` may be off by
            // one ulp on 17-digit mantissas).
            proptest::option::of((0u32..200).prop_map(|n| f64::from(n) / 100.0)),
            any::<bool>(),
            proptest::option::of((proptest::option::of(0u64..50_000), proptest::option::of("[a-z]{0,7}"))),
            proptest::option::of(arb_text()),
        )
            .prop_map(
                |(
                    system,
                    messages,
                    mut tools,
                    tool_choice,
                    parallel,
                    max_tokens,
                    temperature,
                    stream,
                    reasoning,
                    user,
                )| {
                    let mut seen = std::collections::HashSet::new();
                    tools.retain(|t: &Tool| seen.insert(t.name.clone()));
                    Request {
                        model: "m".into(),
                        system: system.into_iter().map(text_part).collect(),
                        messages,
                        tools,
                        tool_choice,
                        parallel_tool_calls: parallel,
                        max_tokens,
                        temperature,
                        top_p: temperature.map(|t| t / 2.0),
                        top_k: max_tokens,
                        stop: vec![],
                        stream,
                        include_usage: false,
                        reasoning: reasoning.map(|(budget_tokens, effort)| Reasoning {
                            budget_tokens,
                            effort,
                            adaptive: false,
                            summary: None,
                        }),
                        user,
                        output_format: None,
                        include_encrypted_reasoning: stream,
                        prompt_cache_key: None,
                        losses: vec![],
                    }
                },
            )
    }

    pub(super) fn prop_ctx() -> EncodeContext {
        EncodeContext {
            namespaced_tools: vec![
                ("multi_agent_v1__spawn_agent".into(), "multi_agent_v1".into(), "spawn_agent".into()),
                ("ns__tool".into(), "ns".into(), "tool".into()),
            ],
            ..ctx()
        }
    }

    #[test]
    fn request_round_trip_table() {
        let mut req = claude_code_like();
        // Fields Responses cannot carry are left out of the comparison.
        req.top_k = None;
        req.stop.clear();
        let back = decode_request(&encode_request(&req).unwrap().body).unwrap();
        let mut want = request_view(&req);
        // Documents arrive as input_file / text; the text document gains its title line.
        want.retain(|l| !l.contains("plain doc"));
        let got: Vec<String> = request_view(&back).into_iter().filter(|l| !l.contains("plain doc")).collect();
        assert_eq!(got, want);
        assert_eq!(back.reasoning.unwrap().effort.as_deref(), Some("high"));
        assert_eq!(back.max_tokens, Some(64000));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn request_round_trip(req in arb_request(false)) {
            let encoded = encode_request(&req).unwrap();
            let back = decode_request(&encoded.body).unwrap();
            let mut want = request_view(&req);
            // Consecutive system / role boundaries and empty texts are not preserved exactly;
            // compare per role the ordered contents.
            let got = request_view(&back);
            want.retain(|l| !l.starts_with("system"));
            let got: Vec<String> = got.into_iter().filter(|l| !l.starts_with("system")).collect();
            prop_assert_eq!(got, want);
            let sys: Vec<&str> = req.system.iter().map(|t| t.text.as_str()).filter(|t| !t.is_empty()).collect();
            prop_assert_eq!(back.system.iter().map(|t| t.text.clone()).collect::<Vec<_>>().join("\n\n"), sys.join("\n\n"));
        }

        #[test]
        fn response_round_trip(resp in arb_response()) {
            let c = prop_ctx();
            let back = decode_response(&encode_response(&resp, &c)).unwrap();
            let mut want = expected_agg(&resp);
            // Non-streamed: the same view, built from the parts.
            let mut got = Agg { ended: true, ..Agg::default() };
            for p in &back.content {
                match p {
                    Part::Text(t) => got.texts.push(t.text.clone()),
                    Part::Thinking { text, .. } if !text.is_empty() => got.thinking.push(text.clone()),
                    Part::ToolUse { id, name, arguments, .. } => got.tools.push((id.clone(), name.clone(), arguments.clone().unwrap())),
                    _ => {}
                }
            }
            got.stop = back.stop_reason;
            got.usage = Some(back.usage);
            // A thinking block's empty text is dropped either way.
            want.thinking.retain(|t| !t.is_empty());
            prop_assert_eq!(got, want);
            prop_assert_eq!(back.model, if resp.model.is_empty() { "gpt-5".to_owned() } else { resp.model.clone() });
        }

        #[test]
        fn stream_round_trip(resp in arb_response(), split in 1usize..64) {
            let c = prop_ctx();
            let bytes = encode_stream(&response_events(&resp), c);
            validate_stream(&bytes);
            let chunks: Vec<&[u8]> = bytes.chunks(split).collect();
            let evs = decode_stream_chunks(&chunks);
            prop_assert_eq!(aggregate(&evs), expected_agg(&resp));
            let starts = matches!(evs.first(), Some(StreamEvent::Start { .. }));
            prop_assert!(starts, "Start first");
        }

        #[test]
        fn decoders_never_panic(v in arb_json(), status in 0u16..700) {
            let bytes = serde_json::to_vec(&v).unwrap();
            let _ = decode_request(&bytes);
            let _ = decode_response(&bytes);
            let _ = decode_error(status, &bytes);
            let mut d = StreamDecoder::new();
            let mut out = Vec::new();
            let data = serde_json::to_string(&v).unwrap();
            for name in [None, Some("response.output_text.delta")] {
                d.decode(&SseEvent { event: name, data: &data }, &mut out);
            }
            // Wrapped as a plausible event too.
            for ty in ["response.output_item.added", "response.output_text.delta", "response.function_call_arguments.delta",
                       "response.reasoning_summary_text.delta", "response.output_item.done", "response.completed"] {
                let ev = json!({"type": ty, "output_index": 0, "content_index": 0, "item_id": "x", "item": v, "delta": v, "response": v});
                d.decode(&SseEvent { event: None, data: &ev.to_string() }, &mut out);
            }
            d.finish(&mut out);
        }

        #[test]
        fn encoders_never_panic(req in arb_request(true), resp in arb_response(), kind_pick in 0usize..8,
                                events in proptest::collection::vec((0usize..6, 0usize..4, arb_text()), 0..24)) {
            let _ = encode_request(&req).unwrap();
            let c = prop_ctx();
            let _ = encode_response(&resp, &c);
            // Arbitrary (even out-of-contract) event orders.
            let kinds = [ErrorKind::InvalidRequest, ErrorKind::Authentication, ErrorKind::Permission, ErrorKind::NotFound,
                         ErrorKind::RequestTooLarge, ErrorKind::RateLimited, ErrorKind::Overloaded, ErrorKind::Api];
            let mut enc = StreamEncoder::new(c);
            let mut out = Vec::new();
            for (k, index, t) in events {
                let e = match k {
                    0 => StreamEvent::BlockStart { index, block: match index { 0 => BlockStart::Text, 1 => BlockStart::Thinking,
                        2 => BlockStart::ToolUse { id: t.clone(), name: t.clone() }, _ => BlockStart::RedactedThinking { data: t.clone() } } },
                    1 => StreamEvent::TextDelta { index, text: t },
                    2 => StreamEvent::ThinkingDelta { index, text: t },
                    3 => StreamEvent::ToolArgsDelta { index, partial_json: t },
                    4 => StreamEvent::BlockStop { index },
                    _ => StreamEvent::Finish { stop_reason: Some(StopReason::MaxTokens), stop_sequence: None, usage: Usage::default() },
                };
                enc.encode(&e, &mut out);
            }
            // Even out-of-contract orders give a stream the SDKs accept.
            if kind_pick % 2 == 0 {
                enc.encode(&StreamEvent::Error { kind: kinds[kind_pick], message: "m".into() }, &mut out);
            }
            enc.encode(&StreamEvent::End, &mut out);
            validate_stream(&out);
            let _ = encode_error(&ErrorBody { kind: kinds[kind_pick], message: "m".into(), code: None, param: None });
        }
    }
}
