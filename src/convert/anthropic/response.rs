//! Complete (non-streaming) answers: an Anthropic upstream's message to the IR, and the IR to a
//! message for an Anthropic client; with the stop reasons and usage the stream shares.

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::convert::ir::*;
use crate::protocol::json_write::JsonObject;
use crate::protocol::lenient::arguments_object;
use crate::protocol::lenient::{get, get_str, token_count};

pub fn stop_reason_from_wire(s: &str) -> Option<StopReason> {
    match s {
        "end_turn" => Some(StopReason::EndTurn),
        "max_tokens" | "model_context_window_exceeded" => Some(StopReason::MaxTokens),
        "stop_sequence" => Some(StopReason::StopSequence),
        "tool_use" => Some(StopReason::ToolUse),
        "refusal" => Some(StopReason::Refusal),
        "pause_turn" => Some(StopReason::PauseTurn),
        _ => None,
    }
}

pub fn stop_reason_to_wire(r: StopReason) -> &'static str {
    match r {
        StopReason::EndTurn => "end_turn",
        StopReason::MaxTokens => "max_tokens",
        StopReason::StopSequence => "stop_sequence",
        StopReason::ToolUse => "tool_use",
        StopReason::Refusal => "refusal",
        StopReason::PauseTurn => "pause_turn",
    }
}

pub(super) fn parse_usage(v: Option<&Value>) -> Usage {
    let Some(u) = v.and_then(Value::as_object) else { return Usage::default() };
    let n = |k: &str| u.get(k).and_then(token_count);
    Usage {
        input: n("input_tokens"),
        output: n("output_tokens"),
        cache_read: n("cache_read_input_tokens"),
        cache_write: n("cache_creation_input_tokens"),
        reasoning: u.get("output_tokens_details").and_then(|d| d.get("thinking_tokens")).and_then(token_count),
    }
}

/// Upstream non-streaming response body (Anthropic message) → IR.
pub fn decode_response(body: &[u8]) -> Result<Response, ConvertError> {
    let obj = parse_object(body)?;
    if get_str(&obj, "type") == Some("error") {
        let msg = obj
            .get("error")
            .and_then(|e| e.get("message"))
            .and_then(Value::as_str)
            .unwrap_or("the upstream answered with an error");
        return Err(ConvertError::new("error", msg));
    }
    let mut content = Vec::new();
    if let Some(Value::Array(blocks)) = get(&obj, "content") {
        for b in blocks {
            let Some(bo) = b.as_object() else { continue };
            match get_str(bo, "type") {
                Some("text") => content.push(Part::Text(TextPart {
                    text: get_str(bo, "text").unwrap_or_default().to_string(),
                    cache_control: None,
                })),
                Some("tool_use") => content.push(Part::ToolUse {
                    id: get_str(bo, "id").unwrap_or_default().to_string(),
                    name: get_str(bo, "name").unwrap_or_default().to_string(),
                    input: get(bo, "input").cloned().unwrap_or_else(|| Value::Object(Map::new())),
                    arguments: None,
                }),
                Some("thinking") => content.push(Part::Thinking {
                    text: get_str(bo, "thinking").unwrap_or_default().to_string(),
                    signature: get_str(bo, "signature").filter(|s| !s.is_empty()).map(str::to_string),
                }),
                Some("redacted_thinking") => {
                    content.push(Part::RedactedThinking { data: get_str(bo, "data").unwrap_or_default().to_string() })
                }
                // Server-tool blocks (web search results, ...) have no IR form.
                _ => {}
            }
        }
    }
    Ok(Response {
        id: get_str(&obj, "id").unwrap_or_default().to_string(),
        model: get_str(&obj, "model").unwrap_or_default().to_string(),
        content,
        stop_reason: get_str(&obj, "stop_reason").and_then(stop_reason_from_wire),
        stop_sequence: get_str(&obj, "stop_sequence").map(str::to_string),
        usage: parse_usage(obj.get("usage")),
        created: None,
    })
}

/// An answer's usage, every count written (0 for one not known).
pub(super) struct UsageOut {
    input_tokens: u64,
    cache_creation_input_tokens: u64,
    cache_read_input_tokens: u64,
    output_tokens: u64,
}

impl UsageOut {
    pub(super) fn from_ir(u: &Usage) -> Self {
        UsageOut {
            input_tokens: u.input.unwrap_or(0),
            cache_creation_input_tokens: u.cache_write.unwrap_or(0),
            cache_read_input_tokens: u.cache_read.unwrap_or(0),
            output_tokens: u.output.unwrap_or(0),
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        let mut json = JsonObject::open(out);
        json.count("input_tokens", self.input_tokens);
        json.count("cache_creation_input_tokens", self.cache_creation_input_tokens);
        json.count("cache_read_input_tokens", self.cache_read_input_tokens);
        json.count("output_tokens", self.output_tokens);
        json.close();
    }
}

/// An output content block.
pub(super) enum BlockOut<'a> {
    Text { text: &'a str },
    Thinking { thinking: Cow<'a, str>, signature: &'a str },
    RedactedThinking { data: &'a str },
    ToolUse { id: Cow<'a, str>, name: &'a str, input: Value },
}

impl BlockOut<'_> {
    /// The block with the official key order (`type` first).
    pub(super) fn write(&self, out: &mut Vec<u8>) {
        let mut json = JsonObject::open(out);
        match self {
            BlockOut::Text { text } => {
                json.text("type", "text");
                json.text("text", text);
            }
            BlockOut::Thinking { thinking, signature } => {
                json.text("type", "thinking");
                json.text("thinking", thinking);
                json.text("signature", signature);
            }
            BlockOut::RedactedThinking { data } => {
                json.text("type", "redacted_thinking");
                json.text("data", data);
            }
            BlockOut::ToolUse { id, name, input } => {
                json.text("type", "tool_use");
                json.text("id", id);
                json.text("name", name);
                json.value("input", input);
            }
        }
        json.close();
    }
}

/// A message: an answer's body, and the `message` of a stream's `message_start`.
pub(super) struct MessageOut<'a> {
    pub(super) id: &'a str,
    pub(super) model: &'a str,
    pub(super) content: Vec<BlockOut<'a>>,
    pub(super) stop_reason: Option<&'static str>,
    pub(super) stop_sequence: Option<&'a str>,
    pub(super) usage: UsageOut,
}

impl MessageOut<'_> {
    /// The message with the official key order.
    pub(super) fn write(&self, out: &mut Vec<u8>) {
        let mut json = JsonObject::open(out);
        json.text("id", self.id);
        json.text("type", "message");
        json.text("role", "assistant");
        json.text("model", self.model);
        let mut content = json.list("content");
        for block in &self.content {
            block.write(content.element());
        }
        content.close();
        json.text_or_null("stop_reason", self.stop_reason);
        json.text_or_null("stop_sequence", self.stop_sequence);
        self.usage.write(json.key("usage"));
        json.close();
    }
}

pub(super) fn message_id<'a>(id: &'a str, ctx: &EncodeContext) -> Cow<'a, str> {
    if id.is_empty() { Cow::Owned(format!("msg_{}", ctx.id_seed)) } else { Cow::Borrowed(id) }
}

pub(super) fn model_name<'a>(model: &'a str, ctx: &'a EncodeContext) -> &'a str {
    if model.is_empty() { &ctx.request_model } else { model }
}

/// A tool-use id for a call the source gave none.
pub(super) fn tool_id<'a>(id: &'a str, ctx: &EncodeContext, n: usize) -> Cow<'a, str> {
    if id.is_empty() { Cow::Owned(format!("toolu_{}_{n}", ctx.id_seed)) } else { Cow::Borrowed(id) }
}

/// The wire stop reason; a turn with tool calls always says `tool_use` (some OpenAI-compatible
/// vendors answer `stop` with tool calls, which would leave an Anthropic client waiting).
pub(super) fn final_stop_reason(r: Option<StopReason>, has_tool_use: bool) -> &'static str {
    match r {
        Some(StopReason::EndTurn) | None if has_tool_use => "tool_use",
        Some(r) => stop_reason_to_wire(r),
        None => "end_turn",
    }
}

/// IR → response body for an Anthropic client.
pub fn encode_response(resp: &Response, ctx: &EncodeContext) -> Vec<u8> {
    let mut content = Vec::with_capacity(resp.content.len());
    let mut tool_n = 0usize;
    for p in &resp.content {
        match p {
            Part::Text(t) => content.push(BlockOut::Text { text: &t.text }),
            Part::ToolUse { id, name, input, arguments } => {
                let id = tool_id(id, ctx, tool_n);
                tool_n += 1;
                // Invalid argument JSON from the model cannot be an Anthropic `input`: `{}`.
                let input = arguments_object(input, arguments.as_deref()).unwrap_or_else(|| Value::Object(Map::new()));
                content.push(BlockOut::ToolUse { id, name, input });
            }
            Part::Thinking { text, signature } => content.push(BlockOut::Thinking {
                thinking: Cow::Borrowed(text),
                signature: signature.as_deref().unwrap_or(""),
            }),
            Part::RedactedThinking { data } => content.push(BlockOut::RedactedThinking { data }),
            // A Responses reasoning summary is shown as (unsigned) thinking.
            Part::ReasoningItem { summary, .. } if !summary.is_empty() => {
                content.push(BlockOut::Thinking { thinking: Cow::Owned(summary.join("\n\n")), signature: "" })
            }
            // Not produced by models in an answer; nothing an Anthropic client could read.
            Part::ReasoningItem { .. } | Part::Image(_) | Part::ToolResult { .. } | Part::Document { .. } => {}
        }
    }
    let id = message_id(&resp.id, ctx);
    let msg = MessageOut {
        id: &id,
        model: model_name(&resp.model, ctx),
        content,
        stop_reason: Some(final_stop_reason(resp.stop_reason, tool_n > 0)),
        stop_sequence: resp.stop_sequence.as_deref(),
        usage: UsageOut::from_ir(&resp.usage),
    };
    let mut out = Vec::with_capacity(answer_capacity(resp));
    msg.write(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::anthropic::tests::*;
    use serde_json::{Value, json};

    const RESPONSE_TOOLS: &str = r#"{
      "id": "msg_01Aq9w938a90dw8q", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
      "content": [
        {"type": "thinking", "thinking": "Need weather for both.", "signature": "EqQBCkYIBxgCKkAf"},
        {"type": "text", "text": "Checking both cities.", "citations": null},
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
        {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_01B", "name": "get_weather", "input": {"city": "Oslo", "units": ["c"]}}
      ],
      "stop_reason": "tool_use", "stop_sequence": null,
      "usage": {"input_tokens": 120, "cache_creation_input_tokens": 2000, "cache_read_input_tokens": 30000, "output_tokens": 95,
                "cache_creation": {"ephemeral_5m_input_tokens": 2000, "ephemeral_1h_input_tokens": 0}, "service_tier": "standard"}
    }"#;

    #[test]
    fn decode_response_tools_thinking_usage() {
        let r = decode_response(RESPONSE_TOOLS.as_bytes()).expect("decodes");
        assert_eq!(
            r.usage,
            Usage {
                input: Some(120),
                output: Some(95),
                cache_read: Some(30000),
                cache_write: Some(2000),
                reasoning: None
            }
        );
        insta::assert_json_snapshot!(response_json(&r));
    }

    #[test]
    fn decode_response_stop_reasons() {
        let mut shown = Vec::new();
        for sr in [
            "end_turn",
            "max_tokens",
            "stop_sequence",
            "tool_use",
            "pause_turn",
            "refusal",
            "model_context_window_exceeded",
            "brand_new",
        ] {
            let body = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x", "content": [{"type": "text", "text": "t"}],
                "stop_reason": sr, "stop_sequence": if sr == "stop_sequence" { json!("###") } else { Value::Null },
                "usage": {"input_tokens": 1, "output_tokens": 2, "output_tokens_details": {"thinking_tokens": 1}}});
            let r = decode_response(&serde_json::to_vec(&body).expect("json")).expect("decodes");
            shown.push(format!("{sr} -> {:?} {:?} {:?}", r.stop_reason, r.stop_sequence, r.usage));
        }
        insta::assert_json_snapshot!(shown);
        assert!(
            decode_response(br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#).is_err()
        );
        assert!(decode_response(b"nope").is_err());
    }

    #[test]
    fn encode_response_each_stop_reason() {
        let mut shown = Vec::new();
        for sr in [
            None,
            Some(StopReason::EndTurn),
            Some(StopReason::MaxTokens),
            Some(StopReason::StopSequence),
            Some(StopReason::ToolUse),
            Some(StopReason::Refusal),
            Some(StopReason::PauseTurn),
        ] {
            let r = Response {
                id: String::new(),
                model: String::new(),
                content: vec![text("Hi")],
                stop_reason: sr,
                stop_sequence: (sr == Some(StopReason::StopSequence)).then(|| "###".to_string()),
                usage: Usage { input: Some(10), output: Some(3), ..Default::default() },
                created: Some(1),
            };
            let v: Value = serde_json::from_slice(&encode_response(&r, &ctx())).expect("json");
            shown.push(json!([format!("{sr:?}"), v["stop_reason"], v["stop_sequence"]]));
        }
        insta::assert_json_snapshot!(shown);
    }

    #[test]
    fn encode_response_full() {
        let r = Response {
            id: "chatcmpl-abc".into(),
            model: "glm-4.6".into(),
            content: vec![
                Part::ReasoningItem {
                    id: Some("rs_1".into()),
                    summary: vec!["Plan".into(), "Act".into()],
                    encrypted_content: Some("gAAA".into()),
                },
                Part::Thinking { text: "unsigned thought".into(), signature: None },
                text("Calling tools."),
                Part::ToolUse {
                    id: "call_1".into(),
                    name: "get_weather".into(),
                    input: json!({"city": "Paris"}),
                    arguments: Some("{\"city\":\"Paris\"}".into()),
                },
                Part::ToolUse {
                    id: String::new(),
                    name: "get_weather".into(),
                    input: Value::Null,
                    arguments: Some("{\"city\": \"Oslo\"}".into()),
                },
                Part::ToolUse {
                    id: "call_3".into(),
                    name: "broken".into(),
                    input: json!({}),
                    arguments: Some("{\"city\": ".into()),
                },
                Part::RedactedThinking { data: "opaque".into() },
            ],
            // Some vendors say `stop` with tool calls: an Anthropic client must see `tool_use`.
            stop_reason: Some(StopReason::EndTurn),
            stop_sequence: None,
            usage: Usage {
                input: Some(100),
                output: Some(50),
                cache_read: Some(900),
                cache_write: None,
                reasoning: Some(20),
            },
            created: Some(1_760_000_000),
        };
        let raw = String::from_utf8(encode_response(&r, &ctx())).expect("utf8");
        // Every block and member in the official order, `type` first.
        let expected = concat!(
            r#"{"id":"chatcmpl-abc","type":"message","role":"assistant","model":"glm-4.6","content":["#,
            r#"{"type":"thinking","thinking":"Plan\n\nAct","signature":""},"#,
            r#"{"type":"thinking","thinking":"unsigned thought","signature":""},"#,
            r#"{"type":"text","text":"Calling tools."},"#,
            r#"{"type":"tool_use","id":"call_1","name":"get_weather","input":{"city":"Paris"}},"#,
            r#"{"type":"tool_use","id":"toolu_seed123_1","name":"get_weather","input":{"city":"Oslo"}},"#,
            r#"{"type":"tool_use","id":"call_3","name":"broken","input":{}},"#,
            r#"{"type":"redacted_thinking","data":"opaque"}],"#,
            r#""stop_reason":"tool_use","stop_sequence":null,"#,
            r#""usage":{"input_tokens":100,"cache_creation_input_tokens":0,"cache_read_input_tokens":900,"output_tokens":50}}"#,
        );
        assert_eq!(raw, expected);
        let v: Value = serde_json::from_slice(raw.as_bytes()).expect("json");
        insta::assert_json_snapshot!(v);
        // Empty id / model: generated id and the requested model.
        let v: Value = serde_json::from_slice(&encode_response(&Response::default(), &ctx())).expect("json");
        assert_eq!((v["id"].as_str(), v["model"].as_str()), (Some("msg_seed123"), Some("claude-opus-4-8")));
        let raw = String::from_utf8(encode_response(&Response::default(), &ctx())).expect("utf8");
        assert!(raw.starts_with(r#"{"id":"msg_seed123","type":"message","role":"assistant","model":"#), "{raw}");
    }
}
