//! The Anthropic Messages codec (`POST /v1/messages`): requests, responses, stream events and
//! errors, to and from the IR (`super::ir`). `docs/protocols/anthropic.md` has the mapping table.
//!
//! Direction names: *decode* reads the Anthropic wire format (a Claude Code request, an
//! Anthropic upstream's answer); *encode* writes it (a request for an Anthropic upstream, an
//! answer for an Anthropic client).
//!
//! One concern per file, as in every codec: `request` (`decode`, `encode`), `response`, `stream`
//! (`decode`, `encode`), `error`. This file holds the little that several of them read.

mod error;
mod request;
mod response;
mod stream;

pub use error::{decode_error, encode_error};
pub use request::{decode_request, encode_request};
pub use response::{decode_response, encode_response};
pub use stream::{StreamDecoder, StreamEncoder};

use serde_json::{Map, Value};

use super::ir::ConvertError;

fn as_object<'a>(
    v: &'a Value,
    field: &(impl std::fmt::Display + ?Sized),
    what: &str,
) -> Result<&'a Map<String, Value>, ConvertError> {
    v.as_object().ok_or_else(|| ConvertError::new(field.to_string(), format!("`{field}` must be {what}")))
}

fn as_object_mut<'a>(
    v: &'a mut Value,
    field: &(impl std::fmt::Display + ?Sized),
    what: &str,
) -> Result<&'a mut Map<String, Value>, ConvertError> {
    v.as_object_mut().ok_or_else(|| ConvertError::new(field.to_string(), format!("`{field}` must be {what}")))
}

/// `'value'`, or `(missing)`, for error messages.
fn shown(v: Option<&str>) -> String {
    v.map_or_else(|| "(missing)".to_string(), |s| format!("'{s}'"))
}

#[cfg(test)]
pub(crate) mod tests {
    //! Helpers every test of this codec uses, and the properties that span its files: round
    //! trips and no panic on any well-typed input.

    use super::request::DEFAULT_MAX_TOKENS;
    use super::*;
    use crate::convert::ir::*;
    use crate::protocol::errors::ErrorKind;
    use crate::protocol::sse::{SseEvent, SseScanner};
    use proptest::prelude::*;
    use serde_json::json;

    pub(crate) fn short(s: &str) -> String {
        if s.chars().count() > 80 {
            format!("{}… ({} chars)", s.chars().take(60).collect::<String>(), s.len())
        } else {
            s.to_string()
        }
    }

    pub(crate) fn image_json(i: &Image) -> Value {
        match i {
            Image::Base64 { media_type, data } => json!({"base64": media_type, "data": short(data)}),
            Image::Url { url } => json!({"url": url}),
        }
    }

    pub(crate) fn part_json(p: &Part) -> Value {
        match p {
            Part::Text(t) => json!({"text": short(&t.text), "cache_control": t.cache_control}),
            Part::Image(i) => json!({"image": image_json(i)}),
            Part::ToolUse { id, name, input, arguments } => {
                json!({"tool_use": {"id": id, "name": name, "input": input, "arguments": arguments}})
            }
            Part::ToolResult { tool_use_id, content, is_error } => json!({"tool_result": {
                "tool_use_id": tool_use_id,
                "is_error": is_error,
                "content": content.iter().map(|c| match c {
                    ToolResultContent::Text(t) => json!({"text": short(t)}),
                    ToolResultContent::Image(i) => json!({"image": image_json(i)}),
                }).collect::<Vec<_>>(),
            }}),
            Part::Thinking { text, signature } => json!({"thinking": short(text), "signature": signature}),
            Part::RedactedThinking { data } => json!({"redacted_thinking": short(data)}),
            Part::ReasoningItem { id, summary, encrypted_content } => {
                json!({"reasoning_item": {"id": id, "summary": summary, "encrypted_content": encrypted_content}})
            }
            Part::Document { source, title } => json!({"document": {
                "title": title,
                "source": match source {
                    DocumentSource::Base64 { media_type, data } => json!({"base64": media_type, "data": short(data)}),
                    DocumentSource::Url { url } => json!({"url": url}),
                    DocumentSource::Text { text } => json!({"text": short(text)}),
                },
            }}),
        }
    }

    pub(crate) fn request_json(r: &Request, full_schemas: bool) -> Value {
        json!({
            "model": r.model,
            "system": r.system.iter().map(|t| json!({"text": short(&t.text), "cache_control": t.cache_control})).collect::<Vec<_>>(),
            "messages": r.messages.iter().map(|m| json!({
                "role": format!("{:?}", m.role),
                "content": m.content.iter().map(part_json).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "tools": r.tools.iter().map(|t| json!({
                "name": t.name,
                "description": t.description.as_deref().map(short),
                "input_schema": if full_schemas { json!(*t.input_schema.value().expect("a readable schema")) } else {
                    let schema = t.input_schema.value().expect("a readable schema");
                    json!(format!("<{} properties>", schema.get("properties").and_then(Value::as_object).map_or(0, Map::len)))
                },
                "strict": t.strict,
            })).collect::<Vec<_>>(),
            "tool_choice": r.tool_choice.as_ref().map(|c| format!("{c:?}")),
            "parallel_tool_calls": r.parallel_tool_calls,
            "max_tokens": r.max_tokens,
            "temperature": r.temperature,
            "top_p": r.top_p,
            "top_k": r.top_k,
            "stop": r.stop,
            "stream": r.stream,
            "reasoning": r.reasoning.as_ref().map(|x| format!("{x:?}")),
            "user": r.user,
            "output_format": r.output_format.as_ref().map(|x| format!("{x:?}")),
            "losses": r.losses.iter().map(|l| format!("{}: {}", l.field, l.note)).collect::<Vec<_>>(),
        })
    }

    pub(crate) fn response_json(r: &Response) -> Value {
        json!({
            "id": r.id, "model": r.model,
            "content": r.content.iter().map(part_json).collect::<Vec<_>>(),
            "stop_reason": r.stop_reason.map(|s| format!("{s:?}")),
            "stop_sequence": r.stop_sequence,
            "usage": format!("{:?}", r.usage),
        })
    }

    pub(super) fn enc(req: &Request) -> (Value, Vec<String>) {
        let e = encode_request(req).expect("encodes");
        (
            serde_json::from_slice(&e.body).expect("json"),
            e.losses.iter().map(|l| format!("{}: {}", l.field, l.note)).collect(),
        )
    }

    pub(super) fn fixture_body(text: &str) -> Vec<u8> {
        let v: Value = serde_json::from_str(text).expect("fixture json");
        serde_json::to_vec(&v["body"]).expect("body")
    }

    pub(super) fn text(t: &str) -> Part {
        Part::Text(TextPart { text: t.to_string(), cache_control: None })
    }

    pub(super) fn msg(role: Role, content: Vec<Part>) -> Message {
        Message { role, content }
    }

    pub(super) fn base_request(messages: Vec<Message>) -> Request {
        Request { model: "claude-sonnet-4-5".into(), messages, ..Default::default() }
    }

    pub(super) fn weather_tool() -> Tool {
        Tool {
            name: "get_weather".into(),
            description: Some("Weather for a city".into()),
            input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
                .into(),
            strict: None,
            namespace: None,
        }
    }

    pub(super) fn ctx() -> EncodeContext {
        EncodeContext {
            request_model: "claude-opus-4-8".into(),
            id_seed: "seed123".into(),
            created: 1_760_000_000,
            ..Default::default()
        }
    }

    pub(super) const CC_TURN2: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/clients/claude_code_2.1.197_turn2_tool_result.json"
    ));

    pub(super) fn dec(v: Value) -> Request {
        decode_request(&serde_json::to_vec(&v).expect("json")).expect("decodes")
    }

    pub(super) fn dec_err(v: Value) -> ConvertError {
        decode_request(&serde_json::to_vec(&v).expect("json")).expect_err("must fail")
    }

    pub(super) const STREAM_TEXT: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01XFDUDYJgAACzvnptvVoYEL\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5-20250929\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":472,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":2048,\"output_tokens\":2}}}\n\n\
event: ping\ndata: {\"type\": \"ping\"}\n\n\
: keep-alive\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\", w\u{f6}rld \u{2713}\"}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":15}}\n\n\
event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

    pub(super) const STREAM_TOOLS: &str = "event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_014p7gG3wDgGV9EUtLvnow3U\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-opus-4-8\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":472,\"output_tokens\":2},\"content\":[],\"stop_reason\":null}}\r\n\r\n\
event: content_block_start\r\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\r\n\r\n\
event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Checking both.\"}}\r\n\r\n\
event: content_block_stop\r\ndata: {\"type\":\"content_block_stop\",\"index\":0}\r\n\r\n\
event: content_block_start\r\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_01T1x1fJ34qAmk2tNTrN7Up6\",\"name\":\"get_weather\",\"input\":{}}}\r\n\r\n\
event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\r\n\r\n\
event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"city\\\": \\\"Pa\"}}\r\n\r\n\
event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"ris\\\"}\"}}\r\n\r\n\
event: content_block_stop\r\ndata: {\"type\":\"content_block_stop\",\"index\":1}\r\n\r\n\
event: content_block_start\r\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_02\",\"name\":\"get_weather\",\"input\":{}}}\r\n\r\n\
event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"city\\\": \\\"Oslo\\\"}\"}}\r\n\r\n\
event: content_block_stop\r\ndata: {\"type\":\"content_block_stop\",\"index\":2}\r\n\r\n\
event: message_delta\r\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"input_tokens\":472,\"cache_creation_input_tokens\":100,\"cache_read_input_tokens\":9000,\"output_tokens\":89}}\r\n\r\n\
event: message_stop\r\ndata: {\"type\":\"message_stop\"}\r\n\r\n";

    pub(super) const STREAM_THINKING: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01T\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-opus-4-8\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":12,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":1}}}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Let me solve this step by step:\\n\\n1. \"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"27 * 453 = 12231\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds\"}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"redacted_thinking\",\"data\":\"EmwKAhgBEgy3va3pzix\"}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"text_delta\",\"text\":\"12,231\"}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":230,\"output_tokens_details\":{\"thinking_tokens\":200}}}\n\n\
event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

    /// A server-tool turn: the web search blocks have no IR form, so the text is renumbered.
    pub(super) const STREAM_SERVER_TOOL: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_S\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"server_tool_use\",\"id\":\"srvtoolu_1\",\"name\":\"web_search\",\"input\":{}}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"query\\\":\\\"x\\\"}\"}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"web_search_tool_result\",\"tool_use_id\":\"srvtoolu_1\",\"content\":[]}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"text\",\"text\":\"Found \"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"citations_delta\",\"citation\":{\"type\":\"web_search_result_location\",\"cited_text\":\"c\",\"url\":\"u\",\"title\":\"t\",\"encrypted_index\":\"e\"}}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"text_delta\",\"text\":\"it.\"}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"pause_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":40,\"server_tool_use\":{\"web_search_requests\":1}}}\n\n\
event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

    pub(super) const STREAM_ERROR: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_E\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n\
event: ping\ndata: {\"type\": \"ping\"}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Partial\"}}\n\n\
event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";

    /// A stop-sequence stop, with no `event:` lines (some relays omit them).
    pub(super) const STREAM_NO_EVENT_NAMES: &str = "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_N\",\"model\":\"glm-4.6\",\"usage\":{\"input_tokens\":0,\"output_tokens\":0}}}\n\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"no start\"}}\n\n\
data: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"call_9\",\"name\":\"f\",\"input\":{\"a\":1}}}\n\n\
data: {\"type\":\"content_block_stop\",\"index\":1}\n\n\
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"stop_sequence\",\"stop_sequence\":\"###\"},\"usage\":{\"input_tokens\":30,\"cache_read_input_tokens\":null,\"output_tokens\":7}}\n\n\
data: {\"type\":\"message_stop\"}\n\n";

    pub(super) const TRANSCRIPTS: &[(&str, &str)] = &[
        ("text", STREAM_TEXT),
        ("tools", STREAM_TOOLS),
        ("thinking", STREAM_THINKING),
        ("server_tool", STREAM_SERVER_TOOL),
        ("error", STREAM_ERROR),
        ("no_event_names", STREAM_NO_EVENT_NAMES),
    ];

    pub(super) fn decode_chunks(chunks: &[&[u8]]) -> Vec<StreamEvent> {
        let mut scanner = SseScanner::new();
        let mut dec = StreamDecoder::new();
        let mut out = Vec::new();
        for c in chunks {
            scanner.feed(c, |ev| dec.decode(&ev, &mut out));
        }
        dec.finish(&mut out);
        out
    }

    pub(super) fn events_text(evs: &[StreamEvent]) -> String {
        evs.iter().map(|e| format!("{e:?}")).collect::<Vec<_>>().join("\n")
    }

    pub(super) fn encode_events(evs: &[StreamEvent]) -> String {
        let mut enc = StreamEncoder::new(ctx());
        let mut out = Vec::new();
        for e in evs {
            enc.encode(e, &mut out);
        }
        String::from_utf8(out).expect("utf8")
    }

    pub(super) fn u(
        input: Option<u64>,
        output: Option<u64>,
        cache_read: Option<u64>,
        cache_write: Option<u64>,
    ) -> Usage {
        Usage { input, output, cache_read, cache_write, reasoning: None }
    }

    /// Every encoder output is a valid Anthropic event sequence: JSON data whose `type` equals
    /// the event name, message_start first, block indexes started before use and stopped once,
    /// message_delta before message_stop, nothing after message_stop / error.
    pub(super) fn assert_valid_anthropic_sse(s: &str) {
        let mut scanner = SseScanner::new();
        let mut seen: Vec<(String, Value)> = Vec::new();
        scanner.feed(s.as_bytes(), |ev| {
            let v: Value = serde_json::from_str(ev.data).expect("event data is JSON");
            seen.push((ev.event.unwrap_or_default().to_string(), v));
        });
        assert_eq!(scanner.pending_bytes(), 0, "complete events only");
        let mut started = std::collections::BTreeMap::new();
        let mut terminal = false;
        for (i, (name, v)) in seen.iter().enumerate() {
            assert!(!terminal, "event after the terminal event: {name}");
            assert_eq!(v["type"].as_str(), Some(name.as_str()));
            if i == 0 {
                assert!(name == "message_start" || name == "error", "first event {name}");
            }
            match name.as_str() {
                "content_block_start" => {
                    let idx = v["index"].as_u64().expect("index");
                    assert_eq!(idx as usize, started.len(), "indexes in order");
                    started.insert(idx, true);
                }
                "content_block_delta" => assert_eq!(started.get(&v["index"].as_u64().expect("index")), Some(&true)),
                "content_block_stop" => {
                    let idx = v["index"].as_u64().expect("index");
                    assert_eq!(started.insert(idx, false), Some(true), "stopped once");
                }
                "message_delta" => {
                    assert!(started.values().all(|open| !open), "blocks closed before message_delta");
                    assert!(v["usage"]["output_tokens"].is_u64());
                    assert!(v["delta"]["stop_reason"].is_string());
                }
                "message_stop" | "error" => terminal = true,
                _ => {}
            }
        }
    }

    pub(super) fn word() -> impl Strategy<Value = String> {
        "[A-Za-z][A-Za-z0-9 .,!?é✓\"\\\\\n]{0,16}"
    }

    pub(super) fn ident() -> impl Strategy<Value = String> {
        "[a-z][a-z0-9_]{0,10}"
    }

    pub(super) fn small_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i32>().prop_map(Value::from),
            word().prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(ident(), inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    pub(super) fn json_object() -> impl Strategy<Value = Value> {
        proptest::collection::btree_map(ident(), small_json(), 0..4)
            .prop_map(|m| Value::Object(m.into_iter().collect()))
    }

    /// A well-formed conversation: user / assistant alternate; assistant turns may call tools,
    /// answered by the next user turn.
    pub(super) fn conversation() -> impl Strategy<Value = (Vec<Message>, Vec<Tool>)> {
        let turn = (word(), proptest::collection::vec((ident(), json_object()), 0..3), word());
        (proptest::collection::vec(turn, 1..4), word()).prop_map(|(turns, last)| {
            let mut messages = Vec::new();
            let mut names = std::collections::BTreeSet::new();
            let mut pending: Vec<String> = Vec::new();
            for (n, (user_text, calls, answer)) in turns.into_iter().enumerate() {
                let mut user = pending
                    .drain(..)
                    .map(|id| Part::ToolResult {
                        tool_use_id: id.clone(),
                        content: vec![ToolResultContent::Text(format!("result of {id}"))],
                        is_error: n % 2 == 0,
                    })
                    .collect::<Vec<_>>();
                user.push(text(&user_text));
                messages.push(msg(Role::User, user));
                let mut assistant = vec![text(&answer)];
                for (k, (name, input)) in calls.into_iter().enumerate() {
                    let id = format!("toolu_{n}_{k}");
                    names.insert(name.clone());
                    assistant.push(Part::ToolUse { id: id.clone(), name, input, arguments: None });
                    pending.push(id);
                }
                messages.push(msg(Role::Assistant, assistant));
            }
            let mut user: Vec<Part> = pending
                .drain(..)
                .map(|id| Part::ToolResult {
                    tool_use_id: id,
                    content: vec![ToolResultContent::Text("done".into())],
                    is_error: false,
                })
                .collect();
            user.push(text(&last));
            messages.push(msg(Role::User, user));
            let tools = names
                .into_iter()
                .map(|name| Tool {
                    name,
                    description: Some("d".into()),
                    input_schema: json!({"type": "object", "properties": {}}).into(),
                    strict: None,
                    namespace: None,
                })
                .collect();
            (messages, tools)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

        #[test]
        fn request_round_trip((messages, tools) in conversation(), temp in proptest::option::of(0.0f64..=1.0), max in proptest::option::of(1u64..100_000), stop in proptest::collection::vec(word(), 0..3), user in proptest::option::of(word()), system in proptest::option::of(word())) {
            let req = Request {
                model: "claude-x".into(),
                system: system.into_iter().map(|t| TextPart { text: t, cache_control: None }).collect(),
                messages,
                tool_choice: (!tools.is_empty()).then_some(ToolChoice::Auto),
                tools,
                max_tokens: max,
                temperature: temp,
                stop,
                user,
                stream: true,
                ..Default::default()
            };
            let encoded = encode_request(&req).expect("encodes");
            prop_assert!(encoded.losses.is_empty(), "{:?}", encoded.losses);
            let back = decode_request(&encoded.body).expect("decodes");
            prop_assert_eq!(&back.messages, &req.messages);
            prop_assert_eq!(&back.tools, &req.tools);
            prop_assert_eq!(&back.system, &req.system);
            prop_assert_eq!(back.tool_choice, req.tool_choice);
            prop_assert_eq!(back.max_tokens, Some(req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)));
            // serde_json's default float parser may be 1 ulp off (no `float_roundtrip` feature).
            prop_assert_eq!(back.temperature.is_some(), req.temperature.is_some());
            prop_assert!((back.temperature.unwrap_or(0.0) - req.temperature.unwrap_or(0.0)).abs() < 1e-12);
            prop_assert_eq!(back.stop, req.stop);
            prop_assert_eq!(back.user, req.user);
            prop_assert!(back.stream);
        }

        #[test]
        fn response_round_trip(id in "msg_[a-zA-Z0-9]{1,10}", model in ident(), thinking in proptest::option::of((word(), "[A-Za-z0-9+/=]{1,20}")), answer in word(), calls in proptest::collection::vec((ident(), json_object()), 0..3), sr in 0usize..6, seq in proptest::option::of(word()), usage in (0u64..1_000_000, 0u64..100_000, 0u64..100_000, 0u64..100_000)) {
            let mut content = Vec::new();
            if let Some((t, sig)) = thinking {
                content.push(Part::Thinking { text: t, signature: Some(sig) });
            }
            content.push(text(&answer));
            let has_calls = !calls.is_empty();
            for (k, (name, input)) in calls.into_iter().enumerate() {
                content.push(Part::ToolUse { id: format!("toolu_{k}"), name, input, arguments: None });
            }
            let reasons = [StopReason::EndTurn, StopReason::MaxTokens, StopReason::StopSequence, StopReason::ToolUse, StopReason::Refusal, StopReason::PauseTurn];
            let mut stop_reason = reasons[sr];
            if has_calls && stop_reason == StopReason::EndTurn {
                stop_reason = StopReason::ToolUse;
            }
            let resp = Response {
                id, model, content, stop_reason: Some(stop_reason), stop_sequence: seq,
                usage: Usage { input: Some(usage.0), output: Some(usage.1), cache_read: Some(usage.2), cache_write: Some(usage.3), reasoning: None },
                created: None,
            };
            let back = decode_response(&encode_response(&resp, &ctx())).expect("decodes");
            prop_assert_eq!(back, resp.clone());

            // The same answer as a stream: encode the IR events, decode the bytes.
            let mut evs = vec![StreamEvent::Start { id: resp.id.clone(), model: resp.model.clone(), usage: Usage { output: Some(1), ..resp.usage }, created: None }];
            for (index, p) in resp.content.iter().enumerate() {
                match p {
                    Part::Thinking { text, signature } => {
                        evs.push(StreamEvent::BlockStart { index, block: BlockStart::Thinking });
                        evs.push(StreamEvent::ThinkingDelta { index, text: text.clone() });
                        evs.push(StreamEvent::SignatureDelta { index, signature: signature.clone().unwrap_or_default() });
                    }
                    Part::Text(t) => {
                        evs.push(StreamEvent::BlockStart { index, block: BlockStart::Text });
                        evs.push(StreamEvent::TextDelta { index, text: t.text.clone() });
                    }
                    Part::ToolUse { id, name, input, .. } => {
                        evs.push(StreamEvent::BlockStart { index, block: BlockStart::ToolUse { id: id.clone(), name: name.clone() } });
                        if input.as_object().is_some_and(|o| !o.is_empty()) {
                            evs.push(StreamEvent::ToolArgsDelta { index, partial_json: input.to_string() });
                        }
                    }
                    _ => {}
                }
                evs.push(StreamEvent::BlockStop { index });
            }
            evs.push(StreamEvent::Finish { stop_reason: resp.stop_reason, stop_sequence: resp.stop_sequence.clone(), usage: resp.usage });
            evs.push(StreamEvent::End);
            let sse = encode_events(&evs);
            assert_valid_anthropic_sse(&sse);
            prop_assert_eq!(decode_chunks(&[sse.as_bytes()]), evs);
        }
    }

    // --- no panics on anything well-typed

    pub(super) fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            "[a-z_]{0,8}".prop_map(Value::from),
            prop_oneof![
                Just("user"),
                Just("assistant"),
                Just("system"),
                Just("text"),
                Just("image"),
                Just("tool_use"),
                Just("tool_result"),
                Just("thinking"),
                Just("document"),
                Just("base64"),
                Just("url"),
                Just("enabled"),
                Just("adaptive"),
                Just("json_schema"),
                Just("message_start"),
                Just("content_block_start"),
                Just("content_block_delta"),
                Just("text_delta"),
                Just("input_json_delta"),
                Just("message_delta"),
                Just("message_stop"),
                Just("error"),
                Just("tool"),
                Just("auto"),
                Just("custom"),
                Just("bash_20250124"),
            ]
            .prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            let keys = prop_oneof![
                Just("type".to_string()),
                Just("role".to_string()),
                Just("content".to_string()),
                Just("text".to_string()),
                Just("model".to_string()),
                Just("messages".to_string()),
                Just("source".to_string()),
                Just("index".to_string()),
                Just("delta".to_string()),
                Just("usage".to_string()),
                Just("input".to_string()),
                Just("tools".to_string()),
                Just("thinking".to_string()),
                Just("system".to_string()),
                Just("error".to_string()),
                Just("message".to_string()),
                Just("content_block".to_string()),
                Just("tool_choice".to_string()),
                Just("name".to_string()),
                "[a-z]{1,4}",
            ];
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                proptest::collection::btree_map(keys, inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    pub(super) fn arb_image() -> impl Strategy<Value = Image> {
        prop_oneof![
            (word(), word()).prop_map(|(media_type, data)| Image::Base64 { media_type, data }),
            word().prop_map(|url| Image::Url { url }),
        ]
    }

    pub(super) fn arb_part() -> impl Strategy<Value = Part> {
        prop_oneof![
            word().prop_map(|t| text(&t)),
            Just(text("  ")),
            arb_image().prop_map(Part::Image),
            (word(), ident(), arb_json(), proptest::option::of(word()))
                .prop_map(|(id, name, input, arguments)| Part::ToolUse { id, name, input, arguments }),
            (
                word(),
                proptest::collection::vec(
                    prop_oneof![
                        word().prop_map(ToolResultContent::Text),
                        arb_image().prop_map(ToolResultContent::Image)
                    ],
                    0..3
                ),
                any::<bool>()
            )
                .prop_map(|(tool_use_id, content, is_error)| Part::ToolResult {
                    tool_use_id,
                    content,
                    is_error
                }),
            (word(), proptest::option::of(word())).prop_map(|(text, signature)| Part::Thinking { text, signature }),
            word().prop_map(|data| Part::RedactedThinking { data }),
            (proptest::option::of(word()), proptest::collection::vec(word(), 0..2), proptest::option::of(word()))
                .prop_map(|(id, summary, encrypted_content)| Part::ReasoningItem { id, summary, encrypted_content }),
            (
                prop_oneof![Just("application/pdf".to_string()), Just("text/plain".to_string()), word()],
                "[A-Za-z0-9+/=]{0,12}",
                proptest::option::of(word())
            )
                .prop_map(|(media_type, data, title)| Part::Document {
                    source: DocumentSource::Base64 { media_type, data },
                    title
                }),
            word().prop_map(|text| Part::Document { source: DocumentSource::Text { text }, title: None }),
        ]
    }

    pub(super) fn arb_request() -> impl Strategy<Value = Request> {
        let role = prop_oneof![Just(Role::User), Just(Role::Assistant), Just(Role::System)];
        let message =
            (role, proptest::collection::vec(arb_part(), 0..4)).prop_map(|(role, content)| Message { role, content });
        let tool = (ident(), proptest::option::of(word()), arb_json(), proptest::option::of(any::<bool>())).prop_map(
            |(name, description, input_schema, strict)| Tool {
                name,
                description,
                input_schema: input_schema.into(),
                strict,
                namespace: None,
            },
        );
        let choice = prop_oneof![
            Just(ToolChoice::Auto),
            Just(ToolChoice::Any),
            Just(ToolChoice::None),
            ident().prop_map(ToolChoice::Tool)
        ];
        let effort = prop_oneof![
            Just("none"),
            Just("minimal"),
            Just("low"),
            Just("medium"),
            Just("high"),
            Just("xhigh"),
            Just("max"),
            Just("??")
        ];
        let reasoning = (proptest::option::of(0u64..100_000), proptest::option::of(effort), any::<bool>()).prop_map(
            |(budget_tokens, effort, adaptive)| Reasoning {
                budget_tokens,
                effort: effort.map(Into::into),
                adaptive,
                summary: None,
            },
        );
        let format = prop_oneof![
            Just(OutputFormat::Text),
            Just(OutputFormat::JsonObject),
            (ident(), arb_json(), proptest::option::of(any::<bool>()), proptest::option::of(word())).prop_map(
                |(name, schema, strict, description)| OutputFormat::JsonSchema { name, schema, strict, description }
            ),
        ];
        (
            (
                proptest::collection::vec(message, 0..6),
                proptest::collection::vec(tool, 0..3),
                proptest::option::of(choice),
                proptest::option::of(any::<bool>()),
            ),
            (
                proptest::option::of(0u64..200_000),
                proptest::option::of(-1.0f64..3.0),
                proptest::option::of(0.0f64..1.0),
                proptest::option::of(0u64..100),
            ),
            (
                proptest::collection::vec(prop_oneof![word(), Just(" ".to_string())], 0..3),
                proptest::option::of(reasoning),
                proptest::option::of(format),
                any::<bool>(),
            ),
        )
            .prop_map(
                |(
                    (messages, tools, tool_choice, parallel_tool_calls),
                    (max_tokens, temperature, top_p, top_k),
                    (stop, reasoning, output_format, stream),
                )| Request {
                    model: "m".into(),
                    system: vec![TextPart { text: "sys".into(), cache_control: None }],
                    messages,
                    tools,
                    tool_choice,
                    parallel_tool_calls,
                    max_tokens,
                    temperature,
                    top_p,
                    top_k,
                    stop,
                    stream,
                    reasoning,
                    output_format,
                    ..Default::default()
                },
            )
    }

    pub(super) fn arb_stream_event() -> impl Strategy<Value = StreamEvent> {
        let index = 0usize..4;
        let block = prop_oneof![
            Just(BlockStart::Text),
            Just(BlockStart::Thinking),
            word().prop_map(|data| BlockStart::RedactedThinking { data }),
            (word(), ident()).prop_map(|(id, name)| BlockStart::ToolUse { id, name }),
            Just(BlockStart::ReasoningItem { id: None, encrypted_content: None }),
        ];
        let kind = prop_oneof![Just(ErrorKind::Overloaded), Just(ErrorKind::Api), Just(ErrorKind::RateLimited)];
        prop_oneof![
            (word(), word()).prop_map(|(id, model)| StreamEvent::Start {
                id,
                model,
                usage: Usage::default(),
                created: None
            }),
            (index.clone(), block).prop_map(|(index, block)| StreamEvent::BlockStart { index, block }),
            (index.clone(), word()).prop_map(|(index, text)| StreamEvent::TextDelta { index, text }),
            (index.clone(), word()).prop_map(|(index, text)| StreamEvent::ThinkingDelta { index, text }),
            (index.clone(), word()).prop_map(|(index, signature)| StreamEvent::SignatureDelta { index, signature }),
            (index.clone(), word())
                .prop_map(|(index, partial_json)| StreamEvent::ToolArgsDelta { index, partial_json }),
            index.prop_map(|index| StreamEvent::BlockStop { index }),
            proptest::option::of(0u64..100).prop_map(|o| StreamEvent::Finish {
                stop_reason: None,
                stop_sequence: None,
                usage: Usage { output: o, ..Default::default() }
            }),
            Just(StreamEvent::End),
            (kind, word()).prop_map(|(kind, message)| StreamEvent::Error { kind, message }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn decoders_never_panic(v in arb_json(), status in 100u16..600) {
            let bytes = serde_json::to_vec(&v).expect("json");
            let _ = decode_request(&bytes);
            let _ = decode_response(&bytes);
            let _ = decode_error(status, &bytes);
            let mut dec = StreamDecoder::new();
            let mut out = Vec::new();
            let data = String::from_utf8(bytes).expect("utf8");
            for name in [None, Some("content_block_delta")] {
                dec.decode(&SseEvent { event: name, data: &data }, &mut out);
            }
            dec.finish(&mut out);
        }

        #[test]
        fn wrapped_messages_never_panic(msgs in proptest::collection::vec(arb_json(), 0..4), tools in arb_json(), thinking in arb_json()) {
            let body = json!({"model": "m", "max_tokens": 10, "messages": msgs, "tools": tools, "thinking": thinking});
            let _ = decode_request(&serde_json::to_vec(&body).expect("json"));
        }

        #[test]
        fn stream_decoder_never_panics_on_event_soup(evs in proptest::collection::vec(arb_json(), 0..12)) {
            let mut dec = StreamDecoder::new();
            let mut out = Vec::new();
            for e in &evs {
                let data = e.to_string();
                dec.decode(&SseEvent { event: None, data: &data }, &mut out);
            }
            dec.finish(&mut out);
        }

        #[test]
        fn encoders_never_panic(req in arb_request()) {
            if let Ok(e) = encode_request(&req) {
                let v: Value = serde_json::from_slice(&e.body).expect("valid JSON");
                // Whatever was encoded is acceptable to Anthropic's structural rules.
                let msgs = v["messages"].as_array().expect("messages");
                prop_assert!(!msgs.is_empty());
                for w in msgs.windows(2) {
                    prop_assert_ne!(&w[0]["role"], &w[1]["role"]);
                }
                if let Some(b) = v["thinking"]["budget_tokens"].as_u64() {
                    prop_assert!(b >= 1024 && b < v["max_tokens"].as_u64().expect("max_tokens"));
                }
                if v.get("thinking").is_some() {
                    prop_assert!(v.get("top_k").is_none());
                    prop_assert!(v.get("temperature").is_none_or(|t| *t == 1.0));
                }
                prop_assert!(v["max_tokens"].is_u64());
            }
        }

        #[test]
        fn stream_encoder_never_panics_and_stays_valid(evs in proptest::collection::vec(arb_stream_event(), 0..16)) {
            let s = encode_events(&evs);
            assert_valid_anthropic_sse(&s);
        }

        #[test]
        fn response_encoder_never_panics(parts in proptest::collection::vec(arb_part(), 0..6), id in proptest::option::of(word())) {
            let r = Response { id: id.unwrap_or_default(), content: parts, ..Default::default() };
            let v: Value = serde_json::from_slice(&encode_response(&r, &ctx())).expect("json");
            prop_assert!(v["content"].is_array());
        }
    }
}
