//! The Anthropic Messages codec (`POST /v1/messages`): requests, responses, stream events and
//! errors, to and from the IR (`super::ir`). `docs/protocols/anthropic.md` has the mapping table.
//!
//! Direction names: *decode* reads the Anthropic wire format (a Claude Code request, an
//! Anthropic upstream's answer); *encode* writes it (a request for an Anthropic upstream, an
//! answer for an Anthropic client).

use std::borrow::Cow;

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::ir::*;
use crate::protocol::errors::{AnthropicError, ErrorKind, anthropic_error_event};
use crate::protocol::lenient::{count, get, get_str, truncate_marked};
use crate::protocol::sse::{SseEvent, write_event};

/// `max_tokens` sent when the IR has none (Anthropic requires it). 8192 is accepted by every
/// current Claude model and by the common Anthropic-compatible relays.
pub const DEFAULT_MAX_TOKENS: u64 = 8192;
/// Upper bound for a `max_tokens` the encoder has to invent for thinking (Claude Opus 4 / 4.1
/// accept at most 32000 output tokens; newer models more).
pub const MAX_DEFAULT_MAX_TOKENS: u64 = 32000;
/// Anthropic's minimum `thinking.budget_tokens`.
pub const MIN_THINKING_BUDGET: u64 = 1024;

/// Reasoning effort (Chat `reasoning_effort`, Responses `reasoning.effort`) → Anthropic
/// `thinking.budget_tokens`. `none` turns thinking off.
pub fn effort_budget(effort: &str) -> Option<u64> {
    match effort {
        "minimal" => Some(1024),
        "low" => Some(2048),
        "medium" => Some(8192),
        "high" => Some(16384),
        "xhigh" | "max" => Some(24576),
        _ => None,
    }
}

/// The first bytes of Claude Code's attribution line in `system[0]`.
const BILLING_HEADER_PREFIX: &str = "x-anthropic-billing-header:";

// ---------------------------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------------------------

fn opt_u64(obj: &Map<String, Value>, key: &str) -> Result<Option<u64>, ConvertError> {
    match get(obj, key) {
        None => Ok(None),
        Some(v) => count(v).map(Some).ok_or_else(|| ConvertError::new(key, format!("`{key}` must be a non-negative integer"))),
    }
}

fn opt_f64(obj: &Map<String, Value>, key: &str) -> Result<Option<f64>, ConvertError> {
    match get(obj, key) {
        None => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or_else(|| ConvertError::new(key, format!("`{key}` must be a number"))),
    }
}

/// `prefix.key` (or `key` at the top level), built only for an error message.
fn field_name(prefix: &str, key: &str) -> String {
    if prefix.is_empty() { key.to_string() } else { format!("{prefix}.{key}") }
}

fn opt_bool(obj: &Map<String, Value>, key: &str, prefix: &str) -> Result<Option<bool>, ConvertError> {
    match get(obj, key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => {
            let field = field_name(prefix, key);
            Err(ConvertError::new(&field, format!("`{field}` must be a boolean")))
        }
    }
}

fn req_str<'a>(obj: &'a Map<String, Value>, key: &str, prefix: &str) -> Result<&'a str, ConvertError> {
    get_str(obj, key).ok_or_else(|| {
        let field = field_name(prefix, key);
        ConvertError::new(&field, format!("`{field}` must be a string"))
    })
}

fn as_object<'a>(v: &'a Value, field: &str, what: &str) -> Result<&'a Map<String, Value>, ConvertError> {
    v.as_object().ok_or_else(|| ConvertError::new(field, format!("`{field}` must be {what}")))
}

/// `'value'`, or `(missing)`, for error messages.
fn shown(v: Option<&str>) -> String {
    v.map_or_else(|| "(missing)".to_string(), |s| format!("'{s}'"))
}

fn parse_body(body: &[u8]) -> Result<Map<String, Value>, ConvertError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ConvertError::new("body", "the body must be a JSON object")),
        Err(e) => Err(ConvertError::new("body", format!("the body is not valid JSON: {e}"))),
    }
}

/// Anthropic tool-use ids must match `^[a-zA-Z0-9_-]+$`; some OpenAI-compatible vendors use
/// ids such as `functions.bash:0`. The same mapping is applied to `tool_use.id` and
/// `tool_result.tool_use_id`, so pairs still match.
fn sanitize_tool_id(id: &str) -> String {
    if id.is_empty() {
        return "toolu_missing_id".to_string();
    }
    id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
}

/// A tool call's input as a JSON object. `input` when it is a non-empty object (the decoder
/// parsed the arguments); otherwise the raw `arguments` decide (a Chat decoder gives
/// unparseable arguments as `input: {}` with the raw string kept); `{}` for no arguments at
/// all. `None` when the arguments are not a JSON object.
fn tool_input_object(input: &Value, arguments: Option<&str>) -> Option<Value> {
    if let Value::Object(o) = input
        && (!o.is_empty() || arguments.is_none())
    {
        return Some(input.clone());
    }
    let parse_object = |s: &str| match serde_json::from_str::<Value>(s) {
        Ok(v @ Value::Object(_)) => Some(v),
        _ => None,
    };
    match (arguments, input) {
        (Some(a), _) if a.trim().is_empty() => Some(Value::Object(Map::new())),
        (Some(a), _) => parse_object(a),
        (None, Value::String(s)) => parse_object(s),
        (None, Value::Null) => Some(Value::Object(Map::new())),
        (None, _) => None,
    }
}

/// Standard base64 (RFC 4648, padding and whitespace tolerated); `None` if malformed.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    let mut acc: u32 = 0;
    let mut bits = 0u32;
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            b'=' | b' ' | b'\n' | b'\r' | b'\t' => continue,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

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

/// An error kind from an Anthropic `error.type` (OpenAI type/code strings are understood too,
/// for relays that answer in the other shape).
fn error_kind_from_type(t: &str) -> Option<ErrorKind> {
    Some(match t {
        "invalid_request_error" => ErrorKind::InvalidRequest,
        "authentication_error" | "invalid_api_key" => ErrorKind::Authentication,
        "permission_error" | "billing_error" => ErrorKind::Permission,
        "not_found_error" | "model_not_found" => ErrorKind::NotFound,
        "request_too_large" => ErrorKind::RequestTooLarge,
        "rate_limit_error" | "rate_limit_exceeded" | "insufficient_quota" => ErrorKind::RateLimited,
        "overloaded_error" => ErrorKind::Overloaded,
        "api_error" | "server_error" | "timeout_error" => ErrorKind::Api,
        _ => return None,
    })
}

fn error_kind_from_status(status: u16) -> ErrorKind {
    match status {
        401 => ErrorKind::Authentication,
        402 | 403 => ErrorKind::Permission,
        404 => ErrorKind::NotFound,
        413 => ErrorKind::RequestTooLarge,
        429 => ErrorKind::RateLimited,
        503 | 529 => ErrorKind::Overloaded,
        400..=499 => ErrorKind::InvalidRequest,
        _ => ErrorKind::Api,
    }
}

fn parse_usage(v: Option<&Value>) -> Usage {
    let Some(u) = v.and_then(Value::as_object) else { return Usage::default() };
    let n = |k: &str| u.get(k).and_then(count);
    Usage {
        input: n("input_tokens"),
        output: n("output_tokens"),
        cache_read: n("cache_read_input_tokens"),
        cache_write: n("cache_creation_input_tokens"),
        reasoning: u.get("output_tokens_details").and_then(|d| d.get("thinking_tokens")).and_then(count),
    }
}

// ---------------------------------------------------------------------------------------------
// Requests: Anthropic → IR
// ---------------------------------------------------------------------------------------------

/// Client request body (Anthropic Messages) → IR.
pub fn decode_request(body: &[u8]) -> Result<Request, ConvertError> {
    let obj = parse_body(body)?;
    let mut losses = Vec::new();

    let model = match get(&obj, "model") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(ConvertError::new("model", "`model` must be a string")),
        None => return Err(ConvertError::new("model", "`model` is required")),
    };

    let system = decode_system(get(&obj, "system"), &mut losses)?;

    let messages_v = get(&obj, "messages").ok_or_else(|| ConvertError::new("messages", "`messages` is required"))?;
    let messages_arr = messages_v.as_array().ok_or_else(|| ConvertError::new("messages", "`messages` must be an array"))?;
    let mut messages = Vec::with_capacity(messages_arr.len());
    for (i, m) in messages_arr.iter().enumerate() {
        let field = format!("messages[{i}]");
        let mo = as_object(m, &field, "an object")?;
        let role = match get_str(mo, "role") {
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            Some("system") => Role::System,
            Some(other) => return Err(ConvertError::new(format!("{field}.role"), format!("unknown role '{other}'"))),
            None => return Err(ConvertError::new(format!("{field}.role"), "`role` is required")),
        };
        let content_field = format!("{field}.content");
        let content = match get(mo, "content") {
            Some(c) => decode_content(c, &content_field, &mut losses)?,
            None => return Err(ConvertError::new(content_field, "`content` is required")),
        };
        messages.push(Message { role, content });
    }

    let tools = match get(&obj, "tools") {
        None => Vec::new(),
        Some(Value::Array(a)) => decode_tools(a, &mut losses)?,
        Some(_) => return Err(ConvertError::new("tools", "`tools` must be an array")),
    };

    let (tool_choice, parallel_tool_calls) = match get(&obj, "tool_choice") {
        None => (None, None),
        Some(tc) => decode_tool_choice(tc)?,
    };

    let output_config = match get(&obj, "output_config") {
        None => None,
        Some(v) => Some(as_object(v, "output_config", "an object")?),
    };
    let effort = match output_config.and_then(|o| get(o, "effort")) {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(ConvertError::new("output_config.effort", "`output_config.effort` must be a string")),
    };
    let reasoning = decode_thinking(get(&obj, "thinking"), effort, &mut losses)?;

    let mut output_format = None;
    if let Some(f) = output_config.and_then(|o| get(o, "format")) {
        output_format = Some(decode_output_format(f, "output_config.format")?);
    } else if let Some(f) = get(&obj, "output_format") {
        // The structured-outputs beta (`structured-outputs-2025-11-13`) put it at the top level.
        output_format = Some(decode_output_format(f, "output_format")?);
    }

    let stop = match get(&obj, "stop_sequences") {
        None => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|s| s.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| ConvertError::new("stop_sequences", "`stop_sequences` must be an array of strings"))?,
        Some(_) => return Err(ConvertError::new("stop_sequences", "`stop_sequences` must be an array of strings")),
    };

    let user = match get(&obj, "metadata") {
        None => None,
        Some(m) => {
            let m = as_object(m, "metadata", "an object")?;
            match get(m, "user_id") {
                None => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(_) => return Err(ConvertError::new("metadata.user_id", "`metadata.user_id` must be a string")),
            }
        }
    };

    if get(&obj, "context_management").is_some() {
        losses.push(Loss::new(
            "context_management",
            "dropped: context management (server-side clearing of old thinking / tool results, compaction) only exists on Anthropic",
        ));
    }
    if get(&obj, "mcp_servers").is_some() {
        losses
            .push(Loss::new("mcp_servers", "dropped: Anthropic's MCP connector (server-side MCP tools) has no equivalent"));
    }
    if get(&obj, "container").is_some() {
        losses.push(Loss::new("container", "dropped: Anthropic code-execution containers have no equivalent"));
    }
    if get(&obj, "service_tier").is_some() {
        losses.push(Loss::new("service_tier", "dropped: Anthropic service tiers do not translate"));
    }

    Ok(Request {
        model,
        system,
        messages,
        tools,
        tool_choice,
        parallel_tool_calls,
        max_tokens: opt_u64(&obj, "max_tokens")?,
        temperature: opt_f64(&obj, "temperature")?,
        top_p: opt_f64(&obj, "top_p")?,
        top_k: opt_u64(&obj, "top_k")?,
        stop,
        stream: opt_bool(&obj, "stream", "")?.unwrap_or(false),
        include_usage: false,
        reasoning,
        user,
        output_format,
        include_encrypted_reasoning: false,
        losses,
    })
}

fn decode_system(v: Option<&Value>, losses: &mut Vec<Loss>) -> Result<Vec<TextPart>, ConvertError> {
    let mut out = Vec::new();
    match v {
        None => {}
        Some(Value::String(s)) if s.is_empty() => {}
        Some(Value::String(s)) => out.push(TextPart { text: s.clone(), cache_control: None }),
        Some(Value::Array(blocks)) => {
            for (i, b) in blocks.iter().enumerate() {
                let field = format!("system[{i}]");
                let bo = as_object(b, &field, "a text block")?;
                if get_str(bo, "type") != Some("text") {
                    return Err(ConvertError::new(field, "system blocks must be text blocks"));
                }
                let text = req_str(bo, "text", &field)?;
                if text.starts_with(BILLING_HEADER_PREFIX) {
                    losses.push(Loss::new(
                        field,
                        "dropped: Claude Code's attribution line (x-anthropic-billing-header) is meaningful only to Anthropic and would break the target's prompt-cache prefix",
                    ));
                    continue;
                }
                out.push(TextPart { text: text.to_string(), cache_control: get(bo, "cache_control").cloned() });
            }
        }
        Some(_) => return Err(ConvertError::new("system", "`system` must be a string or an array of text blocks")),
    }
    Ok(out)
}

fn decode_content(v: &Value, field: &str, losses: &mut Vec<Loss>) -> Result<Vec<Part>, ConvertError> {
    match v {
        Value::String(s) => Ok(vec![Part::Text(TextPart { text: s.clone(), cache_control: None })]),
        Value::Array(blocks) => {
            let mut out = Vec::with_capacity(blocks.len());
            for (j, b) in blocks.iter().enumerate() {
                if let Some(p) = decode_block(b, &format!("{field}[{j}]"), losses)? {
                    out.push(p);
                }
            }
            Ok(out)
        }
        _ => Err(ConvertError::new(field, "`content` must be a string or an array of content blocks")),
    }
}

/// Anthropic server-side tool blocks replayed in a history: they have no IR form.
const SERVER_BLOCKS: &[&str] = &[
    "server_tool_use",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "code_execution_tool_result",
    "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result",
    "tool_search_tool_result",
    "mcp_tool_use",
    "mcp_tool_result",
    "container_upload",
];

fn decode_block(b: &Value, field: &str, losses: &mut Vec<Loss>) -> Result<Option<Part>, ConvertError> {
    let bo = as_object(b, field, "a content block object")?;
    let ty = req_str(bo, "type", field)?;
    let part = match ty {
        "text" => Part::Text(TextPart {
            text: req_str(bo, "text", field)?.to_string(),
            cache_control: get(bo, "cache_control").cloned(),
        }),
        "image" => Part::Image(decode_image(bo, field)?),
        "document" => {
            let title = get_str(bo, "title").map(str::to_string);
            let source = decode_document_source(bo, field, losses)?;
            Part::Document { source, title }
        }
        "tool_use" => Part::ToolUse {
            id: req_str(bo, "id", field)?.to_string(),
            name: req_str(bo, "name", field)?.to_string(),
            input: get(bo, "input").cloned().unwrap_or_else(|| Value::Object(Map::new())),
            arguments: None,
        },
        "tool_result" => {
            let tool_use_id = req_str(bo, "tool_use_id", field)?.to_string();
            let content = match get(bo, "content") {
                None => Vec::new(),
                Some(c) => decode_tool_result_content(c, &format!("{field}.content"), losses)?,
            };
            let is_error = opt_bool(bo, "is_error", field)?.unwrap_or(false);
            Part::ToolResult { tool_use_id, content, is_error }
        }
        "thinking" => Part::Thinking {
            text: get_str(bo, "thinking").unwrap_or_default().to_string(),
            signature: get_str(bo, "signature").filter(|s| !s.is_empty()).map(str::to_string),
        },
        "redacted_thinking" => Part::RedactedThinking { data: req_str(bo, "data", field)?.to_string() },
        "compaction" => {
            // Anthropic's compaction summary of the earlier conversation: keep its text.
            let text = get_str(bo, "content").unwrap_or_default();
            losses.push(Loss::new(field, "compaction block kept as plain text"));
            if text.is_empty() {
                return Ok(None);
            }
            Part::Text(TextPart { text: text.to_string(), cache_control: None })
        }
        "search_result" => {
            losses.push(Loss::new(field, "search_result block kept as plain text (its citation metadata is lost)"));
            Part::Text(TextPart { text: search_result_text(bo), cache_control: None })
        }
        t if SERVER_BLOCKS.contains(&t) => {
            losses.push(Loss::new(format!("{field} ({t})"), "dropped: Anthropic server-tool history has no equivalent"));
            return Ok(None);
        }
        t => {
            losses.push(Loss::new(format!("{field} ({t})"), "dropped: unknown content block type"));
            return Ok(None);
        }
    };
    Ok(Some(part))
}

fn search_result_text(bo: &Map<String, Value>) -> String {
    let mut parts = Vec::new();
    if let Some(t) = get_str(bo, "title") {
        parts.push(t.to_string());
    }
    if let Some(s) = get_str(bo, "source") {
        parts.push(s.to_string());
    }
    if let Some(Value::Array(c)) = get(bo, "content") {
        for b in c {
            if let Some(t) = b.get("text").and_then(Value::as_str) {
                parts.push(t.to_string());
            }
        }
    }
    parts.join("\n")
}

fn decode_image(bo: &Map<String, Value>, field: &str) -> Result<Image, ConvertError> {
    let sf = format!("{field}.source");
    let src = as_object(get(bo, "source").unwrap_or(&Value::Null), &sf, "an object")?;
    match get_str(src, "type") {
        Some("base64") => Ok(Image::Base64 {
            media_type: req_str(src, "media_type", &sf)?.to_string(),
            data: req_str(src, "data", &sf)?.to_string(),
        }),
        Some("url") => Ok(Image::Url { url: req_str(src, "url", &sf)?.to_string() }),
        Some("file") => Err(ConvertError::new(
            sf,
            "image source type 'file' (an Anthropic Files API file_id) cannot be converted: the target cannot read Anthropic files",
        )),
        other => Err(ConvertError::new(format!("{sf}.type"), format!("unsupported image source type {}", shown(other)))),
    }
}

fn decode_document_source(
    bo: &Map<String, Value>,
    field: &str,
    losses: &mut Vec<Loss>,
) -> Result<DocumentSource, ConvertError> {
    let sf = format!("{field}.source");
    let src = as_object(get(bo, "source").unwrap_or(&Value::Null), &sf, "an object")?;
    match get_str(src, "type") {
        Some("base64") => Ok(DocumentSource::Base64 {
            media_type: req_str(src, "media_type", &sf)?.to_string(),
            data: req_str(src, "data", &sf)?.to_string(),
        }),
        Some("text") => Ok(DocumentSource::Text { text: req_str(src, "data", &sf)?.to_string() }),
        Some("url") => Ok(DocumentSource::Url { url: req_str(src, "url", &sf)?.to_string() }),
        Some("content") => {
            // Custom content documents: a list of text (and image) blocks.
            let mut texts = Vec::new();
            match get(src, "content") {
                Some(Value::String(s)) => texts.push(s.clone()),
                Some(Value::Array(items)) => {
                    for (k, it) in items.iter().enumerate() {
                        match it.get("type").and_then(Value::as_str) {
                            Some("text") => {
                                texts.push(it.get("text").and_then(Value::as_str).unwrap_or_default().to_string())
                            }
                            _ => losses.push(Loss::new(
                                format!("{sf}.content[{k}]"),
                                "dropped: only the text blocks of a content document are kept",
                            )),
                        }
                    }
                }
                _ => return Err(ConvertError::new(format!("{sf}.content"), "`content` must be a string or an array of blocks")),
            }
            Ok(DocumentSource::Text { text: texts.join("\n") })
        }
        Some("file") => Err(ConvertError::new(
            sf,
            "document source type 'file' (an Anthropic Files API file_id) cannot be converted: the target cannot read Anthropic files",
        )),
        other => Err(ConvertError::new(format!("{sf}.type"), format!("unsupported document source type {}", shown(other)))),
    }
}

fn decode_tool_result_content(
    v: &Value,
    field: &str,
    losses: &mut Vec<Loss>,
) -> Result<Vec<ToolResultContent>, ConvertError> {
    match v {
        Value::String(s) => Ok(vec![ToolResultContent::Text(s.clone())]),
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (k, it) in items.iter().enumerate() {
                let f = format!("{field}[{k}]");
                let io = as_object(it, &f, "a content block object")?;
                match get_str(io, "type") {
                    Some("text") => out.push(ToolResultContent::Text(req_str(io, "text", &f)?.to_string())),
                    Some("image") => out.push(ToolResultContent::Image(decode_image(io, &f)?)),
                    Some("document") => match decode_document_source(io, &f, losses)? {
                        DocumentSource::Text { text } => out.push(ToolResultContent::Text(text)),
                        _ => losses.push(Loss::new(
                            f,
                            "dropped: a non-text document inside a tool result has no equivalent (tool results carry text and images)",
                        )),
                    },
                    Some("search_result") => {
                        losses.push(Loss::new(&f, "search_result kept as plain text (its citation metadata is lost)"));
                        out.push(ToolResultContent::Text(search_result_text(io)));
                    }
                    other => losses.push(Loss::new(f, format!("dropped: unsupported tool result block {}", shown(other)))),
                }
            }
            Ok(out)
        }
        _ => Err(ConvertError::new(field, "tool result `content` must be a string or an array of blocks")),
    }
}

fn bash_tool_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The bash command to run. Required unless the tool is being restarted."},
            "restart": {"type": "boolean", "description": "Specifying true will restart this tool. Otherwise, leave this unspecified."}
        }
    })
}

fn text_editor_tool_schema(version: &str) -> Value {
    // 2025-04-29 and later (Claude 4) removed `undo_edit` and insert with `insert_text`.
    let claude4 = version >= "20250429";
    let commands: Vec<&str> = if claude4 {
        vec!["view", "create", "str_replace", "insert"]
    } else {
        vec!["view", "create", "str_replace", "insert", "undo_edit"]
    };
    let mut props = json!({
        "command": {"type": "string", "enum": commands, "description": "The command to run."},
        "path": {"type": "string", "description": "Absolute path to the file or directory."},
        "file_text": {"type": "string", "description": "Required for `create`: the content of the file to be created."},
        "old_str": {"type": "string", "description": "Required for `str_replace`: the exact text to replace."},
        "new_str": {"type": "string", "description": if claude4 {
            "Required for `str_replace`: the new text."
        } else {
            "For `str_replace`: the new text; for `insert`: the text to insert."
        }},
        "insert_line": {"type": "integer", "description": "Required for `insert`: the line after which to insert the text."},
        "view_range": {"type": "array", "items": {"type": "integer"}, "description": "Optional for `view`: [start_line, end_line] (-1 for the end of the file)."}
    });
    if claude4 && let Some(p) = props.as_object_mut() {
        p.insert(
            "insert_text".to_string(),
            json!({"type": "string", "description": "Required for `insert`: the text to insert."}),
        );
    }
    json!({"type": "object", "properties": props, "required": ["command", "path"]})
}

fn decode_tools(arr: &[Value], losses: &mut Vec<Loss>) -> Result<Vec<Tool>, ConvertError> {
    let mut tools = Vec::with_capacity(arr.len());
    for (i, t) in arr.iter().enumerate() {
        let field = format!("tools[{i}]");
        let to = as_object(t, &field, "an object")?;
        let name = get_str(to, "name");
        match get_str(to, "type") {
            None | Some("custom") => {
                let name = req_str(to, "name", &field)?.to_string();
                let input_schema = match get(to, "input_schema") {
                    Some(s @ Value::Object(_)) => s.clone(),
                    Some(_) => return Err(ConvertError::new(format!("{field}.input_schema"), "`input_schema` must be an object")),
                    None => json!({"type": "object", "properties": {}}),
                };
                let description = get_str(to, "description").map(str::to_string);
                let strict = opt_bool(to, "strict", &field)?;
                tools.push(Tool { name, description, input_schema, strict, namespace: None });
            }
            Some(ty) if ty.starts_with("bash_") => {
                losses.push(Loss::new(
                    format!("{field} ({ty})"),
                    "converted to a function tool with the documented bash tool input schema",
                ));
                tools.push(Tool {
                    name: name.unwrap_or("bash").to_string(),
                    description: Some("Run commands in a bash shell. State persists across calls; set `restart` to true to restart the shell.".to_string()),
                    input_schema: bash_tool_schema(),
                    strict: None,
                    namespace: None,
                });
            }
            Some(ty) if ty.starts_with("text_editor_") => {
                let version = ty.trim_start_matches("text_editor_");
                let default_name =
                    if version >= "20250429" { "str_replace_based_edit_tool" } else { "str_replace_editor" };
                losses.push(Loss::new(
                    format!("{field} ({ty})"),
                    "converted to a function tool with the documented text editor tool input schema",
                ));
                tools.push(Tool {
                    name: name.unwrap_or(default_name).to_string(),
                    description: Some("View, create and edit text files: `view` a file or directory, `create` a file, `str_replace` an exact unique string, `insert` text after a line.".to_string()),
                    input_schema: text_editor_tool_schema(version),
                    strict: None,
                    namespace: None,
                });
            }
            Some(ty) => {
                losses.push(Loss::new(
                    format!("{field} ({ty})"),
                    "dropped: an Anthropic server / built-in tool that cannot be expressed as a function tool",
                ));
            }
        }
    }
    Ok(tools)
}

fn decode_tool_choice(v: &Value) -> Result<(Option<ToolChoice>, Option<bool>), ConvertError> {
    let o = as_object(v, "tool_choice", "an object")?;
    let choice = match get_str(o, "type") {
        Some("auto") => ToolChoice::Auto,
        Some("any") => ToolChoice::Any,
        Some("none") => ToolChoice::None,
        Some("tool") => ToolChoice::Tool(req_str(o, "name", "tool_choice")?.to_string()),
        other => return Err(ConvertError::new("tool_choice.type", format!("unknown tool_choice type {}", shown(other)))),
    };
    let disable = opt_bool(o, "disable_parallel_tool_use", "tool_choice")?;
    Ok((Some(choice), disable.map(|d| !d)))
}

fn decode_thinking(
    v: Option<&Value>,
    effort: Option<String>,
    losses: &mut Vec<Loss>,
) -> Result<Option<Reasoning>, ConvertError> {
    let Some(v) = v else {
        return Ok(effort.map(|e| Reasoning { budget_tokens: None, effort: Some(e), adaptive: false, summary: None }));
    };
    let o = as_object(v, "thinking", "an object")?;
    match get_str(o, "type") {
        Some("enabled") => {
            let budget = opt_u64(o, "budget_tokens").map_err(|_| {
                ConvertError::new("thinking.budget_tokens", "`thinking.budget_tokens` must be a non-negative integer")
            })?;
            Ok(Some(Reasoning { budget_tokens: budget, effort, adaptive: false, summary: None }))
        }
        Some("adaptive") => Ok(Some(Reasoning { budget_tokens: None, effort, adaptive: true, summary: None })),
        Some("disabled") => {
            if effort.is_some() {
                losses.push(Loss::new("output_config.effort", "dropped: effort with thinking disabled"));
            }
            Ok(None)
        }
        other => Err(ConvertError::new("thinking.type", format!("unknown thinking type {}", shown(other)))),
    }
}

fn decode_output_format(v: &Value, field: &str) -> Result<OutputFormat, ConvertError> {
    let o = as_object(v, field, "an object")?;
    match get_str(o, "type") {
        Some("json_schema") => {
            let schema = match get(o, "schema") {
                Some(s @ Value::Object(_)) => s.clone(),
                _ => return Err(ConvertError::new(format!("{field}.schema"), "`schema` must be a JSON Schema object")),
            };
            // Anthropic's format has no name; "response" is what most SDKs use by default.
            Ok(OutputFormat::JsonSchema { name: "response".to_string(), schema, strict: None, description: None })
        }
        other => Err(ConvertError::new(format!("{field}.type"), format!("unsupported output format type {}", shown(other)))),
    }
}

// ---------------------------------------------------------------------------------------------
// Requests: IR → Anthropic
// ---------------------------------------------------------------------------------------------

struct Turn {
    role: &'static str,
    blocks: Vec<Value>,
}

fn block_type(b: &Value) -> Option<&str> {
    b.get("type").and_then(Value::as_str)
}

fn image_source(img: &Image) -> Value {
    match img {
        Image::Base64 { media_type, data } => json!({"type": "base64", "media_type": media_type, "data": data}),
        Image::Url { url } => json!({"type": "url", "url": url}),
    }
}

fn text_block(text: &str, cache_control: Option<&Value>) -> Value {
    let mut m = Map::new();
    m.insert("type".into(), Value::from("text"));
    m.insert("text".into(), Value::from(text));
    if let Some(cc) = cache_control {
        m.insert("cache_control".into(), cc.clone());
    }
    Value::Object(m)
}

/// Anthropic rejects empty and whitespace-only text blocks.
fn is_blank(s: &str) -> bool {
    s.trim().is_empty()
}

/// IR → request body for an Anthropic upstream.
pub fn encode_request(req: &Request) -> Result<Encoded, ConvertError> {
    let mut losses = Vec::new();
    let mut body = Map::new();
    body.insert("model".into(), Value::from(req.model.as_str()));

    // --- messages (and mid-conversation system messages folded into `system`)
    let tools_as_text = req.tools.is_empty()
        && req
            .messages
            .iter()
            .any(|m| m.content.iter().any(|p| matches!(p, Part::ToolUse { .. } | Part::ToolResult { .. })));
    if tools_as_text {
        losses.push(Loss::new(
            "messages",
            "tool calls and tool results rendered as text: the anthropic format requires tool definitions for tool_use / tool_result blocks and the request has none",
        ));
    }
    let mut extra_system: Vec<&TextPart> = Vec::new();
    let mut turns: Vec<Turn> = Vec::new();
    let mut unsigned_thinking = 0usize;
    let mut reasoning_items = 0usize;
    for (i, m) in req.messages.iter().enumerate() {
        let role = match m.role {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::System => {
                for (j, p) in m.content.iter().enumerate() {
                    match p {
                        Part::Text(t) => extra_system.push(t),
                        _ => losses.push(Loss::new(
                            format!("messages[{i}].content[{j}]"),
                            "dropped: only text can move from a system message into the anthropic system prompt",
                        )),
                    }
                }
                losses.push(Loss::new(
                    format!("messages[{i}]"),
                    "system message moved to the end of the top-level system prompt (the anthropic format has no system role inside messages)",
                ));
                continue;
            }
        };
        let mut blocks = Vec::with_capacity(m.content.len());
        for (j, p) in m.content.iter().enumerate() {
            encode_part(
                p,
                (i, j),
                tools_as_text,
                &mut blocks,
                &mut losses,
                &mut unsigned_thinking,
                &mut reasoning_items,
            )?;
        }
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            // Anthropic needs alternating roles: consecutive same-role messages become one turn.
            Some(last) if last.role == role => last.blocks.extend(blocks),
            _ => turns.push(Turn { role, blocks }),
        }
    }
    if unsigned_thinking > 0 {
        losses.push(Loss::new(
            "messages (thinking)",
            format!("dropped {unsigned_thinking} thinking block(s) without an Anthropic signature (Anthropic rejects unsigned thinking)"),
        ));
    }
    if reasoning_items > 0 {
        losses.push(Loss::new(
            "messages (reasoning)",
            format!(
                "dropped {reasoning_items} OpenAI reasoning item(s): Anthropic cannot accept encrypted OpenAI reasoning"
            ),
        ));
    }
    for t in &mut turns {
        if t.role == "user" {
            // Tool results must come first in their user turn, in order.
            let (mut first, rest): (Vec<Value>, Vec<Value>) =
                t.blocks.drain(..).partition(|b| block_type(b) == Some("tool_result"));
            first.extend(rest);
            t.blocks = first;
        } else {
            // Text (and thinking) precede the tool calls of an assistant turn.
            let (mut first, rest): (Vec<Value>, Vec<Value>) =
                t.blocks.drain(..).partition(|b| block_type(b) != Some("tool_use"));
            first.extend(rest);
            t.blocks = first;
        }
    }
    if turns.is_empty() {
        return Err(ConvertError::new("messages", "the anthropic format needs at least one user or assistant message with content"));
    }
    // A final (prefill) assistant turn may not end with whitespace.
    if let Some(last) = turns.last_mut()
        && last.role == "assistant"
        && let Some(Value::Object(b)) = last.blocks.last_mut()
        && let Some(Value::String(t)) = b.get_mut("text")
    {
        let trimmed = t.trim_end().len();
        t.truncate(trimmed);
    }

    // --- system
    let system_parts: Vec<&TextPart> =
        req.system.iter().chain(extra_system.iter().copied()).filter(|t| !is_blank(&t.text)).collect();
    match system_parts.as_slice() {
        [] => {}
        [only] if only.cache_control.is_none() => {
            body.insert("system".into(), Value::from(only.text.as_str()));
        }
        parts => {
            body.insert(
                "system".into(),
                Value::Array(parts.iter().map(|t| text_block(&t.text, t.cache_control.as_ref())).collect()),
            );
        }
    }

    // --- thinking (decides max_tokens too)
    let (thinking, effort_out, max_tokens) = plan_thinking(req, &turns, &mut losses);
    let thinking_on = thinking.is_some();

    body.insert("max_tokens".into(), Value::from(max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)));
    body.insert(
        "messages".into(),
        Value::Array(turns.into_iter().map(|t| json!({"role": t.role, "content": t.blocks})).collect()),
    );

    if let Some(t) = thinking {
        body.insert("thinking".into(), t);
    }

    // --- sampling
    if let Some(t) = req.temperature {
        if thinking_on && t != 1.0 {
            losses.push(Loss::new(
                "temperature",
                format!("dropped ({t}): Anthropic accepts only temperature 1 with thinking"),
            ));
        } else if !(0.0..=1.0).contains(&t) {
            let c = t.clamp(0.0, 1.0);
            losses.push(Loss::new("temperature", format!("clamped from {t} to {c} (Anthropic's range is 0..1)")));
            body.insert("temperature".into(), Value::from(c));
        } else {
            body.insert("temperature".into(), Value::from(t));
        }
    }
    if let Some(p) = req.top_p {
        if thinking_on && !(0.95..=1.0).contains(&p) {
            losses.push(Loss::new(
                "top_p",
                format!("dropped ({p}): with thinking Anthropic accepts top_p only between 0.95 and 1"),
            ));
        } else if body.contains_key("temperature") {
            // Claude Opus 4.1 and later reject both together; temperature is the one kept.
            // top_p 1 truncates nothing, so dropping it is lossless.
            if p < 1.0 {
                losses.push(Loss::new(
                    "top_p",
                    format!("dropped ({p}): current Claude models reject temperature and top_p together; temperature is kept"),
                ));
            }
        } else {
            body.insert("top_p".into(), Value::from(p));
        }
    }
    if let Some(k) = req.top_k {
        if thinking_on {
            losses.push(Loss::new("top_k", format!("dropped ({k}): Anthropic does not accept top_k with thinking")));
        } else {
            body.insert("top_k".into(), Value::from(k));
        }
    }
    let mut stops = Vec::with_capacity(req.stop.len());
    for (i, s) in req.stop.iter().enumerate() {
        if is_blank(s) {
            losses.push(Loss::new(format!("stop[{i}]"), "dropped: Anthropic rejects whitespace-only stop sequences"));
        } else {
            stops.push(Value::from(s.as_str()));
        }
    }
    if !stops.is_empty() {
        body.insert("stop_sequences".into(), Value::Array(stops));
    }

    // --- tools
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req.tools.iter().map(encode_tool).collect();
        body.insert("tools".into(), Value::Array(tools));
        let disable_parallel = req.parallel_tool_calls == Some(false);
        let tc = match &req.tool_choice {
            None if disable_parallel => Some(json!({"type": "auto"})),
            None => None,
            Some(ToolChoice::Auto) => Some(json!({"type": "auto"})),
            Some(ToolChoice::Any) => Some(json!({"type": "any"})),
            Some(ToolChoice::None) => Some(json!({"type": "none"})),
            Some(ToolChoice::Tool(name)) => Some(json!({"type": "tool", "name": name})),
        };
        if let Some(mut tc) = tc {
            if disable_parallel
                && block_type(&tc) != Some("none")
                && let Some(o) = tc.as_object_mut()
            {
                o.insert("disable_parallel_tool_use".into(), Value::Bool(true));
            }
            body.insert("tool_choice".into(), tc);
        }
    } else if matches!(req.tool_choice, Some(ToolChoice::Any | ToolChoice::Tool(_))) {
        losses.push(Loss::new("tool_choice", "dropped: the request defines no tools"));
    }

    // --- metadata, structured output, stream
    if let Some(u) = &req.user {
        body.insert("metadata".into(), json!({"user_id": u}));
    }
    let mut output_config = Map::new();
    if let Some(e) = effort_out {
        output_config.insert("effort".into(), Value::from(e));
    }
    match &req.output_format {
        None | Some(OutputFormat::Text) => {}
        Some(OutputFormat::JsonObject) => losses.push(Loss::new(
            "output_format",
            "dropped: the anthropic format has no JSON mode without a schema (the prompt still asks for JSON)",
        )),
        Some(OutputFormat::JsonSchema { schema, description, .. }) => {
            if description.is_some() {
                losses.push(Loss::new("output_format.description", "dropped: Anthropic's output format has no description"));
            }
            output_config.insert("format".into(), json!({"type": "json_schema", "schema": schema}));
        }
    }
    if !output_config.is_empty() {
        body.insert("output_config".into(), Value::Object(output_config));
    }
    if req.stream {
        body.insert("stream".into(), Value::Bool(true));
    }

    let body = serde_json::to_vec(&Value::Object(body)).map_err(|e| ConvertError::new("body", e.to_string()))?;
    Ok(Encoded { body, losses })
}

/// Anthropic `thinking`, `output_config.effort` and `max_tokens` for the IR's reasoning:
/// - adaptive → `{"type": "adaptive"}`; an explicit budget → `enabled` with it; an OpenAI
///   effort → `enabled` with the [`effort_budget`] table (`none` → off);
/// - `output_config.effort` only with an Anthropic-style request (adaptive, or an explicit
///   budget plus effort): older Claude models and most Anthropic-compatible relays reject it;
/// - off (with a loss) where Anthropic would reject the request: a forced tool choice, or a
///   tool loop whose last assistant turn has no signed thinking;
/// - the budget is at least 1024 and below `max_tokens` (shrunk to half of a client's
///   `max_tokens`, or off below 1025); with no `max_tokens`, budget + 8192 (capped at 32000
///   when that still leaves room).
fn plan_thinking<'r>(
    req: &'r Request,
    turns: &[Turn],
    losses: &mut Vec<Loss>,
) -> (Option<Value>, Option<&'r str>, Option<u64>) {
    let max_tokens = req.max_tokens;
    let Some(r) = &req.reasoning else { return (None, None, max_tokens) };
    let mut budget = if r.adaptive {
        None
    } else if let Some(b) = r.budget_tokens {
        Some(b)
    } else {
        match r.effort.as_deref() {
            None | Some("none") => return (None, None, max_tokens),
            Some(e) => match effort_budget(e) {
                Some(b) => Some(b),
                None => {
                    losses.push(Loss::new("reasoning.effort", format!("dropped: unknown reasoning effort '{e}'")));
                    return (None, None, max_tokens);
                }
            },
        }
    };
    let forced_tool = matches!(req.tool_choice, Some(ToolChoice::Any | ToolChoice::Tool(_))) && !req.tools.is_empty();
    if forced_tool {
        losses.push(Loss::new(
            "reasoning",
            "thinking turned off: Anthropic does not allow thinking with a forced tool choice (any / a named tool)",
        ));
        return (None, None, max_tokens);
    }
    if last_tool_turn_lacks_thinking(turns) {
        losses.push(Loss::new(
            "reasoning",
            "thinking turned off for this request: the assistant turn answered by the last tool results carries no signed thinking block, which Anthropic requires when thinking is on",
        ));
        return (None, None, max_tokens);
    }
    let mut max_out = max_tokens;
    if let Some(b) = budget.as_mut() {
        if *b < MIN_THINKING_BUDGET {
            losses.push(Loss::new(
                "reasoning.budget_tokens",
                format!("raised from {b} to Anthropic's minimum of {MIN_THINKING_BUDGET}"),
            ));
            *b = MIN_THINKING_BUDGET;
        }
        match max_tokens {
            Some(m) if *b >= m && m <= MIN_THINKING_BUDGET => {
                losses.push(Loss::new(
                    "reasoning",
                    format!("thinking turned off: max_tokens {m} leaves no room for Anthropic's minimum thinking budget of {MIN_THINKING_BUDGET}"),
                ));
                return (None, None, max_tokens);
            }
            Some(m) if *b >= m => {
                let nb = (m / 2).max(MIN_THINKING_BUDGET);
                losses.push(Loss::new(
                    "reasoning.budget_tokens",
                    format!("thinking budget {b} reduced to {nb} to stay below max_tokens {m}"),
                ));
                *b = nb;
            }
            Some(_) => {}
            None => {
                let m = (*b + DEFAULT_MAX_TOKENS).clamp(DEFAULT_MAX_TOKENS, MAX_DEFAULT_MAX_TOKENS);
                max_out = Some(if m > *b { m } else { *b + DEFAULT_MAX_TOKENS });
            }
        }
    }
    let thinking = match budget {
        None => json!({"type": "adaptive"}),
        Some(b) => json!({"type": "enabled", "budget_tokens": b}),
    };
    let keep_effort = r.adaptive || r.budget_tokens.is_some();
    (Some(thinking), if keep_effort { r.effort.as_deref() } else { None }, max_out)
}

/// True when thinking would be rejected: the final assistant turn made tool calls answered by
/// the last user turn, and does not start with a (redacted) thinking block.
fn last_tool_turn_lacks_thinking(turns: &[Turn]) -> bool {
    let Some(k) = turns.iter().rposition(|t| t.role == "assistant") else { return false };
    let Some(assistant) = turns.get(k) else { return false };
    let has_tool_use = assistant.blocks.iter().any(|b| block_type(b) == Some("tool_use"));
    let answered = turns.get(k + 1).is_some_and(|u| u.blocks.iter().any(|b| block_type(b) == Some("tool_result")));
    let starts_with_thinking =
        assistant.blocks.first().is_some_and(|b| matches!(block_type(b), Some("thinking" | "redacted_thinking")));
    has_tool_use && answered && !starts_with_thinking
}

fn encode_tool(t: &Tool) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), Value::from(t.name.as_str()));
    if let Some(d) = &t.description {
        m.insert("description".into(), Value::from(d.as_str()));
    }
    // Anthropic requires an object schema with `type: "object"`.
    let schema = match &t.input_schema {
        Value::Object(o) => {
            let mut o = o.clone();
            if !o.contains_key("type") {
                o.insert("type".into(), Value::from("object"));
            }
            Value::Object(o)
        }
        _ => json!({"type": "object", "properties": {}}),
    };
    m.insert("input_schema".into(), schema);
    if t.strict == Some(true) {
        m.insert("strict".into(), Value::Bool(true));
    }
    Value::Object(m)
}

fn tool_result_text(content: &[ToolResultContent]) -> String {
    content
        .iter()
        .filter_map(|c| match c {
            ToolResultContent::Text(t) => Some(t.as_str()),
            ToolResultContent::Image(_) => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[allow(clippy::too_many_arguments)]
fn encode_part(
    p: &Part,
    at: (usize, usize),
    tools_as_text: bool,
    blocks: &mut Vec<Value>,
    losses: &mut Vec<Loss>,
    unsigned_thinking: &mut usize,
    reasoning_items: &mut usize,
) -> Result<(), ConvertError> {
    let field = || format!("messages[{}].content[{}]", at.0, at.1);
    match p {
        Part::Text(t) => {
            if !is_blank(&t.text) {
                blocks.push(text_block(&t.text, t.cache_control.as_ref()));
            }
        }
        Part::Image(img) => blocks.push(json!({"type": "image", "source": image_source(img)})),
        Part::ToolUse { id, name, input, arguments } => {
            if tools_as_text {
                let args = arguments.clone().unwrap_or_else(|| input.to_string());
                blocks.push(text_block(&format!("[tool call {name} (id {id})] {args}"), None));
                return Ok(());
            }
            let input = match tool_input_object(input, arguments.as_deref()) {
                Some(v) => v,
                None => {
                    losses.push(Loss::new(
                        field(),
                        "tool call arguments were not a JSON object; sent as {} (Anthropic tool input must be an object)",
                    ));
                    Value::Object(Map::new())
                }
            };
            blocks.push(json!({"type": "tool_use", "id": sanitize_tool_id(id), "name": name, "input": input}));
        }
        Part::ToolResult { tool_use_id, content, is_error } => {
            if tools_as_text {
                let err_note = if *is_error { " (error)" } else { "" };
                let text = tool_result_text(content);
                blocks.push(text_block(&format!("[tool result for {tool_use_id}{err_note}] {text}"), None));
                for c in content {
                    if let ToolResultContent::Image(img) = c {
                        blocks.push(json!({"type": "image", "source": image_source(img)}));
                    }
                }
                return Ok(());
            }
            let mut m = Map::new();
            m.insert("type".into(), Value::from("tool_result"));
            m.insert("tool_use_id".into(), Value::from(sanitize_tool_id(tool_use_id)));
            // Empty output (a command that printed nothing) is sent without `content`:
            // Anthropic rejects empty text.
            match content.as_slice() {
                [] => {}
                [ToolResultContent::Text(t)] if is_blank(t) => {}
                [ToolResultContent::Text(t)] => {
                    m.insert("content".into(), Value::from(t.as_str()));
                }
                items => {
                    let arr: Vec<Value> = items
                        .iter()
                        .filter_map(|c| match c {
                            ToolResultContent::Text(t) if is_blank(t) => None,
                            ToolResultContent::Text(t) => Some(text_block(t, None)),
                            ToolResultContent::Image(img) => {
                                Some(json!({"type": "image", "source": image_source(img)}))
                            }
                        })
                        .collect();
                    if !arr.is_empty() {
                        m.insert("content".into(), Value::Array(arr));
                    }
                }
            }
            if *is_error {
                m.insert("is_error".into(), Value::Bool(true));
            }
            blocks.push(Value::Object(m));
        }
        Part::Thinking { text, signature } => match signature {
            Some(sig) if !sig.is_empty() => {
                blocks.push(json!({"type": "thinking", "thinking": text, "signature": sig}));
            }
            _ => *unsigned_thinking += 1,
        },
        Part::RedactedThinking { data } => blocks.push(json!({"type": "redacted_thinking", "data": data})),
        Part::ReasoningItem { .. } => *reasoning_items += 1,
        Part::Document { source, title } => {
            let src = match source {
                DocumentSource::Base64 { media_type, data } if media_type == "application/pdf" => {
                    json!({"type": "base64", "media_type": media_type, "data": data})
                }
                DocumentSource::Base64 { media_type, data } if media_type.starts_with("text/") => {
                    match base64_decode(data).and_then(|b| String::from_utf8(b).ok()) {
                        Some(text) => json!({"type": "text", "media_type": "text/plain", "data": text}),
                        None => {
                            return Err(ConvertError::new(
                                field(),
                                format!(
                                    "the {media_type} document is not valid base64 UTF-8 text, so it cannot be sent to the anthropic format"
                                ),
                            ));
                        }
                    }
                }
                DocumentSource::Base64 { media_type, .. } => {
                    return Err(ConvertError::new(
                        field(),
                        format!(
                            "documents of type {media_type} are not supported by the anthropic format (PDF and plain text only)"
                        ),
                    ));
                }
                DocumentSource::Url { url } => json!({"type": "url", "url": url}),
                DocumentSource::Text { text } => json!({"type": "text", "media_type": "text/plain", "data": text}),
            };
            let mut m = Map::new();
            m.insert("type".into(), Value::from("document"));
            m.insert("source".into(), src);
            if let Some(t) = title {
                m.insert("title".into(), Value::from(t.as_str()));
            }
            blocks.push(Value::Object(m));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------------------------

/// Upstream non-streaming response body (Anthropic message) → IR.
pub fn decode_response(body: &[u8]) -> Result<Response, ConvertError> {
    let obj = parse_body(body)?;
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

#[derive(Serialize)]
struct UsageOut {
    input_tokens: u64,
    cache_creation_input_tokens: u64,
    cache_read_input_tokens: u64,
    output_tokens: u64,
}

impl UsageOut {
    fn from_ir(u: &Usage) -> Self {
        UsageOut {
            input_tokens: u.input.unwrap_or(0),
            cache_creation_input_tokens: u.cache_write.unwrap_or(0),
            cache_read_input_tokens: u.cache_read.unwrap_or(0),
            output_tokens: u.output.unwrap_or(0),
        }
    }
}

/// An output content block, serialized with the official key order (`type` first).
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockOut<'a> {
    Text { text: &'a str },
    Thinking { thinking: Cow<'a, str>, signature: &'a str },
    RedactedThinking { data: &'a str },
    ToolUse { id: Cow<'a, str>, name: &'a str, input: Value },
}

#[derive(Serialize)]
struct MessageOut<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    ty: &'static str,
    role: &'static str,
    model: &'a str,
    content: Vec<BlockOut<'a>>,
    stop_reason: Option<&'static str>,
    stop_sequence: Option<&'a str>,
    usage: UsageOut,
}

fn message_id(id: &str, ctx: &EncodeContext) -> String {
    if id.is_empty() { format!("msg_{}", ctx.id_seed) } else { id.to_string() }
}

fn model_name<'a>(model: &'a str, ctx: &'a EncodeContext) -> &'a str {
    if model.is_empty() { &ctx.request_model } else { model }
}

/// A tool-use id for a call the source gave none.
fn tool_id<'a>(id: &'a str, ctx: &EncodeContext, n: usize) -> Cow<'a, str> {
    if id.is_empty() { Cow::Owned(format!("toolu_{}_{n}", ctx.id_seed)) } else { Cow::Borrowed(id) }
}

/// The wire stop reason; a turn with tool calls always says `tool_use` (some OpenAI-compatible
/// vendors answer `stop` with tool calls, which would leave an Anthropic client waiting).
fn final_stop_reason(r: Option<StopReason>, has_tool_use: bool) -> &'static str {
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
                let input = tool_input_object(input, arguments.as_deref()).unwrap_or_else(|| Value::Object(Map::new()));
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
        ty: "message",
        role: "assistant",
        model: model_name(&resp.model, ctx),
        content,
        stop_reason: Some(final_stop_reason(resp.stop_reason, tool_n > 0)),
        stop_sequence: resp.stop_sequence.as_deref(),
        usage: UsageOut::from_ir(&resp.usage),
    };
    serde_json::to_vec(&msg).unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Stream decoding: Anthropic SSE → IR events
// ---------------------------------------------------------------------------------------------

/// One upstream content block: its upstream index and, unless it is a block the IR cannot
/// carry (server-tool blocks), its IR index.
#[derive(Debug, Clone, Copy)]
struct UpBlock {
    upstream: u64,
    ir: Option<usize>,
    open: bool,
}

/// Incremental Anthropic stream decoder.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    started: bool,
    finished: bool,
    ended: bool,
    blocks: Vec<UpBlock>,
    next_index: usize,
    usage: Usage,
    stop_reason: Option<StopReason>,
    stop_sequence: Option<String>,
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    fn ensure_started(&mut self, out: &mut Vec<StreamEvent>) {
        if !self.started {
            self.started = true;
            out.push(StreamEvent::Start {
                id: String::new(),
                model: String::new(),
                usage: Usage::default(),
                created: None,
            });
        }
    }

    fn open_block(&mut self, upstream: u64, block: Option<BlockStart>, out: &mut Vec<StreamEvent>) -> Option<usize> {
        // Anthropic sends one block at a time; a relay that forgets a `content_block_stop` gets
        // it here, so the IR keeps one block open at a time.
        self.close_all(out);
        let ir = block.map(|b| {
            let index = self.next_index;
            self.next_index += 1;
            out.push(StreamEvent::BlockStart { index, block: b });
            index
        });
        self.blocks.push(UpBlock { upstream, ir, open: true });
        ir
    }

    fn lookup(&self, upstream: u64) -> Option<&UpBlock> {
        self.blocks.iter().rev().find(|b| b.upstream == upstream)
    }

    fn close_upstream(&mut self, upstream: u64, out: &mut Vec<StreamEvent>) {
        if let Some(b) = self.blocks.iter_mut().rev().find(|b| b.upstream == upstream && b.open) {
            b.open = false;
            if let Some(index) = b.ir {
                out.push(StreamEvent::BlockStop { index });
            }
        }
    }

    fn close_all(&mut self, out: &mut Vec<StreamEvent>) {
        for b in &mut self.blocks {
            if b.open {
                b.open = false;
                if let Some(index) = b.ir {
                    out.push(StreamEvent::BlockStop { index });
                }
            }
        }
    }

    fn emit_finish(&mut self, out: &mut Vec<StreamEvent>) {
        if !self.finished {
            self.finished = true;
            self.close_all(out);
            out.push(StreamEvent::Finish {
                stop_reason: self.stop_reason,
                stop_sequence: self.stop_sequence.clone(),
                usage: self.usage,
            });
        }
    }

    pub fn decode(&mut self, event: &SseEvent<'_>, out: &mut Vec<StreamEvent>) {
        if self.ended {
            return;
        }
        let Ok(Value::Object(data)) = serde_json::from_str::<Value>(event.data) else { return };
        let ty = get_str(&data, "type").or(event.event).unwrap_or_default();
        match ty {
            "message_start" => {
                if self.started {
                    return;
                }
                self.started = true;
                let msg = data.get("message").and_then(Value::as_object);
                let usage = parse_usage(msg.and_then(|m| m.get("usage")));
                self.usage.merge(&usage);
                out.push(StreamEvent::Start {
                    id: msg.and_then(|m| get_str(m, "id")).unwrap_or_default().to_string(),
                    model: msg.and_then(|m| get_str(m, "model")).unwrap_or_default().to_string(),
                    usage,
                    created: None,
                });
            }
            "content_block_start" => {
                self.ensure_started(out);
                let upstream = data.get("index").and_then(Value::as_u64).unwrap_or(0);
                let cb = data.get("content_block").and_then(Value::as_object);
                let cb_ty = cb.and_then(|c| get_str(c, "type")).unwrap_or_default();
                let cb_str = |k: &str| cb.and_then(|c| get_str(c, k)).unwrap_or_default().to_string();
                match cb_ty {
                    "text" => {
                        let text = cb_str("text");
                        if let Some(index) = self.open_block(upstream, Some(BlockStart::Text), out)
                            && !text.is_empty()
                        {
                            out.push(StreamEvent::TextDelta { index, text });
                        }
                    }
                    "thinking" => {
                        let (text, sig) = (cb_str("thinking"), cb_str("signature"));
                        if let Some(index) = self.open_block(upstream, Some(BlockStart::Thinking), out) {
                            if !text.is_empty() {
                                out.push(StreamEvent::ThinkingDelta { index, text });
                            }
                            if !sig.is_empty() {
                                out.push(StreamEvent::SignatureDelta { index, signature: sig });
                            }
                        }
                    }
                    "redacted_thinking" => {
                        let data = cb_str("data");
                        self.open_block(upstream, Some(BlockStart::RedactedThinking { data }), out);
                    }
                    "tool_use" => {
                        let (id, name) = (cb_str("id"), cb_str("name"));
                        // Anthropic starts with `input: {}` and streams the arguments; some
                        // relays put the whole input here instead.
                        let input =
                            cb.and_then(|c| c.get("input")).and_then(Value::as_object).filter(|o| !o.is_empty());
                        let partial_json = input.map(|o| Value::Object(o.clone()).to_string());
                        if let Some(index) = self.open_block(upstream, Some(BlockStart::ToolUse { id, name }), out)
                            && let Some(partial_json) = partial_json
                        {
                            out.push(StreamEvent::ToolArgsDelta { index, partial_json });
                        }
                    }
                    // Server-tool blocks and unknown kinds: no IR form, their deltas are ignored.
                    _ => {
                        self.open_block(upstream, None, out);
                    }
                }
            }
            "content_block_delta" => {
                self.ensure_started(out);
                let upstream = data.get("index").and_then(Value::as_u64).unwrap_or(0);
                let Some(delta) = data.get("delta").and_then(Value::as_object) else { return };
                let dty = get_str(delta, "type").unwrap_or_default();
                let s = |k: &str| get_str(delta, k).unwrap_or_default();
                let index = match self.lookup(upstream) {
                    Some(b) if b.open => match b.ir {
                        Some(i) => i,
                        None => return,
                    },
                    // A delta without a start (tolerated from relays): open the block it implies.
                    _ => match dty {
                        "text_delta" => match self.open_block(upstream, Some(BlockStart::Text), out) {
                            Some(i) => i,
                            None => return,
                        },
                        "thinking_delta" => match self.open_block(upstream, Some(BlockStart::Thinking), out) {
                            Some(i) => i,
                            None => return,
                        },
                        _ => return,
                    },
                };
                match dty {
                    "text_delta" if !s("text").is_empty() => {
                        out.push(StreamEvent::TextDelta { index, text: s("text").to_string() })
                    }
                    "thinking_delta" if !s("thinking").is_empty() => {
                        out.push(StreamEvent::ThinkingDelta { index, text: s("thinking").to_string() })
                    }
                    "signature_delta" if !s("signature").is_empty() => {
                        out.push(StreamEvent::SignatureDelta { index, signature: s("signature").to_string() })
                    }
                    "input_json_delta" if !s("partial_json").is_empty() => {
                        out.push(StreamEvent::ToolArgsDelta { index, partial_json: s("partial_json").to_string() })
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                let upstream = data.get("index").and_then(Value::as_u64).unwrap_or(0);
                self.close_upstream(upstream, out);
            }
            "message_delta" => {
                self.ensure_started(out);
                let usage = parse_usage(data.get("usage"));
                self.usage.merge(&usage);
                if let Some(d) = data.get("delta").and_then(Value::as_object) {
                    if let Some(r) = get_str(d, "stop_reason").and_then(stop_reason_from_wire) {
                        self.stop_reason = Some(r);
                    }
                    if let Some(s) = get_str(d, "stop_sequence") {
                        self.stop_sequence = Some(s.to_string());
                    }
                }
                self.emit_finish(out);
            }
            "message_stop" => {
                self.ensure_started(out);
                self.emit_finish(out);
                self.ended = true;
                out.push(StreamEvent::End);
            }
            "error" => {
                let e = data.get("error");
                let etype = e.and_then(|e| e.get("type")).and_then(Value::as_str).unwrap_or_default();
                let message = e
                    .and_then(|e| e.get("message"))
                    .and_then(Value::as_str)
                    .unwrap_or("the upstream reported an error")
                    .to_string();
                self.ended = true;
                out.push(StreamEvent::Error { kind: error_kind_from_type(etype).unwrap_or(ErrorKind::Api), message });
            }
            // `ping` and anything unknown.
            _ => {}
        }
    }

    /// EOF. An Anthropic stream is complete only with `message_stop` (SPEC §6): a cut stream
    /// gets nothing invented here.
    pub fn finish(&mut self, _out: &mut Vec<StreamEvent>) {}
}

// ---------------------------------------------------------------------------------------------
// Stream encoding: IR events → Anthropic SSE
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Thinking,
    Redacted,
    Tool,
}

#[derive(Debug, Clone, Copy)]
struct OutBlock {
    ir: usize,
    out: usize,
    kind: Kind,
    open: bool,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[allow(clippy::enum_variant_names)]
enum DeltaOut<'a> {
    TextDelta { text: &'a str },
    ThinkingDelta { thinking: &'a str },
    SignatureDelta { signature: &'a str },
    InputJsonDelta { partial_json: &'a str },
}

#[derive(Serialize)]
struct MessageStartEvent<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    message: MessageOut<'a>,
}

#[derive(Serialize)]
struct BlockStartEvent<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    index: usize,
    content_block: BlockOut<'a>,
}

#[derive(Serialize)]
struct BlockDeltaEvent<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    index: usize,
    delta: DeltaOut<'a>,
}

#[derive(Serialize)]
struct BlockStopEvent {
    #[serde(rename = "type")]
    ty: &'static str,
    index: usize,
}

#[derive(Serialize)]
struct MessageDeltaBody<'a> {
    stop_reason: &'static str,
    stop_sequence: Option<&'a str>,
}

/// `message_delta` usage: cumulative; only the numbers known are sent (the SDKs keep the
/// `message_start` values for absent fields), `output_tokens` always.
#[derive(Serialize)]
struct MessageDeltaUsage {
    #[serde(skip_serializing_if = "Option::is_none")]
    input_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_creation_input_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_read_input_tokens: Option<u64>,
    output_tokens: u64,
}

#[derive(Serialize)]
struct MessageDeltaEvent<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    delta: MessageDeltaBody<'a>,
    usage: MessageDeltaUsage,
}

#[derive(Serialize)]
struct TypeOnly {
    #[serde(rename = "type")]
    ty: &'static str,
}

/// Incremental Anthropic stream encoder.
#[derive(Debug)]
pub struct StreamEncoder {
    ctx: EncodeContext,
    started: bool,
    finished: bool,
    done: bool,
    /// Blocks sent so far (few per answer): IR index → output index, kind, still open.
    blocks: Vec<OutBlock>,
    next_out: usize,
    tool_n: usize,
    saw_tool_use: bool,
    usage: Usage,
}

impl StreamEncoder {
    pub fn new(ctx: EncodeContext) -> Self {
        Self {
            ctx,
            started: false,
            finished: false,
            done: false,
            blocks: Vec::new(),
            next_out: 0,
            tool_n: 0,
            saw_tool_use: false,
            usage: Usage::default(),
        }
    }

    /// `message_start` (with the input usage known so far: a Chat upstream reports it only at
    /// the end, so 0 here and the real numbers in `message_delta`), then a `ping` as the API does.
    fn start(&mut self, id: &str, model: &str, usage: &Usage, out: &mut Vec<u8>) {
        self.started = true;
        self.usage.merge(usage);
        let id = message_id(id, &self.ctx);
        let ev = MessageStartEvent {
            ty: "message_start",
            message: MessageOut {
                id: &id,
                ty: "message",
                role: "assistant",
                model: model_name(model, &self.ctx),
                content: Vec::new(),
                stop_reason: None,
                stop_sequence: None,
                usage: UsageOut::from_ir(&self.usage),
            },
        };
        write_event(out, Some("message_start"), &ev);
        write_event(out, Some("ping"), &TypeOnly { ty: "ping" });
    }

    fn ensure_started(&mut self, out: &mut Vec<u8>) {
        if !self.started {
            self.start("", "", &Usage::default(), out);
        }
    }

    fn open_block(&mut self, ir: usize, block: &BlockStart, out: &mut Vec<u8>) -> OutBlock {
        self.ensure_started(out);
        // A second start for an IR index still open closes the first.
        self.close_ir(ir, out);
        let index = self.next_out;
        self.next_out += 1;
        let (kind, content_block) = match block {
            BlockStart::Text => (Kind::Text, BlockOut::Text { text: "" }),
            BlockStart::Thinking | BlockStart::ReasoningItem { .. } => {
                (Kind::Thinking, BlockOut::Thinking { thinking: Cow::Borrowed(""), signature: "" })
            }
            BlockStart::RedactedThinking { data } => (Kind::Redacted, BlockOut::RedactedThinking { data }),
            BlockStart::ToolUse { id, name } => {
                let id = tool_id(id, &self.ctx, self.tool_n);
                self.tool_n += 1;
                self.saw_tool_use = true;
                (Kind::Tool, BlockOut::ToolUse { id, name, input: Value::Object(Map::new()) })
            }
        };
        write_event(out, Some("content_block_start"), &BlockStartEvent { ty: "content_block_start", index, content_block });
        let b = OutBlock { ir, out: index, kind, open: true };
        self.blocks.push(b);
        b
    }

    fn close_ir(&mut self, ir: usize, out: &mut Vec<u8>) {
        if let Some(b) = self.blocks.iter_mut().rev().find(|b| b.ir == ir && b.open) {
            b.open = false;
            write_event(out, Some("content_block_stop"), &BlockStopEvent { ty: "content_block_stop", index: b.out });
        }
    }

    fn close_all(&mut self, out: &mut Vec<u8>) {
        for b in self.blocks.iter_mut().filter(|b| b.open) {
            b.open = false;
            write_event(out, Some("content_block_stop"), &BlockStopEvent { ty: "content_block_stop", index: b.out });
        }
    }

    /// The open block for an IR index, or a new one of the kind the delta implies.
    fn block_for(&mut self, ir: usize, implied: Option<BlockStart>, out: &mut Vec<u8>) -> Option<OutBlock> {
        if let Some(b) = self.blocks.iter().rev().find(|b| b.ir == ir && b.open) {
            return Some(*b);
        }
        implied.map(|block| self.open_block(ir, &block, out))
    }

    fn delta(index: usize, delta: DeltaOut<'_>, out: &mut Vec<u8>) {
        write_event(out, Some("content_block_delta"), &BlockDeltaEvent { ty: "content_block_delta", index, delta });
    }

    fn finish(
        &mut self,
        stop_reason: Option<StopReason>,
        stop_sequence: Option<&str>,
        usage: &Usage,
        out: &mut Vec<u8>,
    ) {
        self.ensure_started(out);
        self.close_all(out);
        self.finished = true;
        self.usage.merge(usage);
        let u = &self.usage;
        let ev = MessageDeltaEvent {
            ty: "message_delta",
            delta: MessageDeltaBody { stop_reason: final_stop_reason(stop_reason, self.saw_tool_use), stop_sequence },
            usage: MessageDeltaUsage {
                input_tokens: u.input,
                cache_creation_input_tokens: u.cache_write,
                cache_read_input_tokens: u.cache_read,
                output_tokens: u.output.unwrap_or(0),
            },
        };
        write_event(out, Some("message_delta"), &ev);
    }

    pub fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        match event {
            StreamEvent::Start { id, model, usage, .. } => {
                if !self.started {
                    self.start(id, model, usage, out);
                }
            }
            StreamEvent::BlockStart { index, block } => {
                if !self.finished {
                    self.open_block(*index, block, out);
                }
            }
            StreamEvent::TextDelta { index, text } | StreamEvent::ThinkingDelta { index, text } => {
                if text.is_empty() || self.finished {
                    return;
                }
                let implied = if matches!(event, StreamEvent::TextDelta { .. }) {
                    BlockStart::Text
                } else {
                    BlockStart::Thinking
                };
                // The delta type follows the block actually open (the Anthropic SDKs drop a
                // text_delta aimed at a thinking block).
                match self.block_for(*index, Some(implied), out) {
                    Some(b) if b.kind == Kind::Text => Self::delta(b.out, DeltaOut::TextDelta { text }, out),
                    Some(b) if b.kind == Kind::Thinking => {
                        Self::delta(b.out, DeltaOut::ThinkingDelta { thinking: text }, out)
                    }
                    _ => {}
                }
            }
            StreamEvent::SignatureDelta { index, signature } => {
                if signature.is_empty() || self.finished {
                    return;
                }
                if let Some(b) = self.block_for(*index, None, out)
                    && b.kind == Kind::Thinking
                {
                    Self::delta(b.out, DeltaOut::SignatureDelta { signature }, out);
                }
            }
            StreamEvent::ToolArgsDelta { index, partial_json } => {
                if partial_json.is_empty() || self.finished {
                    return;
                }
                if let Some(b) = self.block_for(*index, None, out)
                    && b.kind == Kind::Tool
                {
                    Self::delta(b.out, DeltaOut::InputJsonDelta { partial_json }, out);
                }
            }
            StreamEvent::BlockStop { index } => self.close_ir(*index, out),
            StreamEvent::Finish { stop_reason, stop_sequence, usage } => {
                if !self.finished {
                    self.finish(*stop_reason, stop_sequence.as_deref(), usage, out);
                }
            }
            StreamEvent::End => {
                if !self.finished {
                    self.finish(None, None, &Usage::default(), out);
                }
                write_event(out, Some("message_stop"), &TypeOnly { ty: "message_stop" });
                self.done = true;
            }
            StreamEvent::Error { kind, message } => {
                anthropic_error_event(out, &AnthropicError::new(kind.anthropic_type(), message));
                self.done = true;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// Longest error message kept from an upstream's error body, in characters.
const MAX_ERROR_MESSAGE: usize = 2000;

/// Upstream error body (any status) → IR. Understands Anthropic's shape and, for relays that
/// answer in it, OpenAI's; anything else keeps the (truncated) body text.
pub fn decode_error(status: u16, body: &[u8]) -> ErrorBody {
    let by_status = error_kind_from_status(status);
    if let Ok(Value::Object(obj)) = serde_json::from_slice::<Value>(body) {
        let e = obj.get("error");
        let inner = e.and_then(Value::as_object);
        let etype = inner.and_then(|i| get_str(i, "type")).filter(|t| !t.is_empty());
        let ecode = inner.and_then(|i| i.get("code")).and_then(|c| match c {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        });
        let message = inner
            .and_then(|i| get_str(i, "message"))
            .or_else(|| e.and_then(Value::as_str))
            .or_else(|| get_str(&obj, "message"));
        if let Some(message) = message {
            let kind = etype
                .and_then(error_kind_from_type)
                .or_else(|| ecode.as_deref().and_then(error_kind_from_type))
                .unwrap_or(by_status);
            return ErrorBody {
                kind,
                message: truncate_marked(message, MAX_ERROR_MESSAGE),
                // OpenAI's `code` (e.g. `rate_limit_exceeded`) is the more specific; Anthropic
                // bodies have none, their `type` is the code.
                code: ecode.or_else(|| etype.map(str::to_string)),
                param: inner.and_then(|i| get_str(i, "param")).map(str::to_string),
            };
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let message =
        if text.is_empty() { format!("upstream answered HTTP {status}") } else { truncate_marked(text, MAX_ERROR_MESSAGE) };
    ErrorBody { kind: by_status, message, code: None, param: None }
}

/// IR error → Anthropic error body.
pub fn encode_error(e: &ErrorBody) -> Vec<u8> {
    // An upstream's own Anthropic type (e.g. `billing_error`, `timeout_error`) is kept when it
    // is one; otherwise the kind decides.
    let ty = match e.code.as_deref() {
        Some(
            t @ ("invalid_request_error"
            | "authentication_error"
            | "billing_error"
            | "permission_error"
            | "not_found_error"
            | "request_too_large"
            | "rate_limit_error"
            | "timeout_error"
            | "api_error"
            | "overloaded_error"),
        ) if error_kind_from_type(t) == Some(e.kind) => t,
        _ => e.kind.anthropic_type(),
    };
    serde_json::to_vec(&AnthropicError::new(ty, &e.message)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::sse::SseScanner;
    use proptest::prelude::*;

    // -----------------------------------------------------------------------------------------
    // Helpers: readable JSON views of IR values for snapshots
    // -----------------------------------------------------------------------------------------

    fn short(s: &str) -> String {
        if s.chars().count() > 80 {
            format!("{}… ({} chars)", s.chars().take(60).collect::<String>(), s.len())
        } else {
            s.to_string()
        }
    }

    fn image_json(i: &Image) -> Value {
        match i {
            Image::Base64 { media_type, data } => json!({"base64": media_type, "data": short(data)}),
            Image::Url { url } => json!({"url": url}),
        }
    }

    fn part_json(p: &Part) -> Value {
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

    fn request_json(r: &Request, full_schemas: bool) -> Value {
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
                "input_schema": if full_schemas { t.input_schema.clone() } else {
                    json!(format!("<{} properties>", t.input_schema.get("properties").and_then(Value::as_object).map_or(0, Map::len)))
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

    fn response_json(r: &Response) -> Value {
        json!({
            "id": r.id, "model": r.model,
            "content": r.content.iter().map(part_json).collect::<Vec<_>>(),
            "stop_reason": r.stop_reason.map(|s| format!("{s:?}")),
            "stop_sequence": r.stop_sequence,
            "usage": format!("{:?}", r.usage),
        })
    }

    fn enc(req: &Request) -> (Value, Vec<String>) {
        let e = encode_request(req).expect("encodes");
        (
            serde_json::from_slice(&e.body).expect("json"),
            e.losses.iter().map(|l| format!("{}: {}", l.field, l.note)).collect(),
        )
    }

    fn fixture_body(text: &str) -> Vec<u8> {
        let v: Value = serde_json::from_str(text).expect("fixture json");
        serde_json::to_vec(&v["body"]).expect("body")
    }

    fn text(t: &str) -> Part {
        Part::Text(TextPart { text: t.to_string(), cache_control: None })
    }

    fn msg(role: Role, content: Vec<Part>) -> Message {
        Message { role, content }
    }

    fn base_request(messages: Vec<Message>) -> Request {
        Request { model: "claude-sonnet-4-5".into(), messages, ..Default::default() }
    }

    fn weather_tool() -> Tool {
        Tool {
            name: "get_weather".into(),
            description: Some("Weather for a city".into()),
            input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
            strict: None,
            namespace: None,
        }
    }

    fn ctx() -> EncodeContext {
        EncodeContext {
            request_model: "claude-opus-4-8".into(),
            id_seed: "seed123".into(),
            created: 1_760_000_000,
            ..Default::default()
        }
    }

    // -----------------------------------------------------------------------------------------
    // Requests: real client fixtures
    // -----------------------------------------------------------------------------------------

    const CC_TURN1: &str =
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/clients/claude_code_2.1.197_turn1.json"));
    const CC_TURN2: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/clients/claude_code_2.1.197_turn2_tool_result.json"
    ));
    const CODEX_CHAT: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/clients/codex_0.80.0_chat_turn2_tool.json"
    ));

    #[test]
    fn decode_claude_code_turn1() {
        let body = fixture_body(CC_TURN1);
        let req = decode_request(&body).expect("decodes");
        // Tool schemas are kept intact.
        let raw: Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(req.tools.len(), 24);
        for (t, rt) in req.tools.iter().zip(raw["tools"].as_array().expect("tools")) {
            assert_eq!(t.input_schema, rt["input_schema"]);
            assert_eq!(Some(t.name.as_str()), rt["name"].as_str());
        }
        assert_eq!(req.messages[1].role, Role::System);
        assert_eq!(req.user.as_deref(), raw["metadata"]["user_id"].as_str());
        insta::assert_json_snapshot!(request_json(&req, false));
    }

    #[test]
    fn decode_claude_code_turn2_tool_result() {
        let req = decode_request(&fixture_body(CC_TURN2)).expect("decodes");
        insta::assert_json_snapshot!(request_json(&req, false));
    }

    #[test]
    fn claude_code_turn2_reencodes_for_anthropic() {
        // Anthropic → IR → Anthropic (what a test upstream would receive if the gateway ever
        // converted it): the thinking signature, tool_use and tool_result survive; the
        // mid-conversation system message moves into `system`.
        let req = decode_request(&fixture_body(CC_TURN2)).expect("decodes");
        let (body, losses) = enc(&req);
        let mut body = body;
        body["tools"] = json!(format!("<{} tools>", body["tools"].as_array().map_or(0, Vec::len)));
        insta::assert_json_snapshot!(json!({"body": body, "losses": losses}));
    }

    /// The IR a Chat decoder produces from Codex 0.80's Chat request (built here from the
    /// fixture, without the Chat codec): leading system → `system`, the assistant message with
    /// `tool_calls` and `content: null`, then a second assistant text message, then the tool result.
    fn codex_chat_ir() -> Request {
        let v: Value = serde_json::from_str(CODEX_CHAT).expect("fixture");
        let b = &v["body"];
        let mut req =
            Request { model: b["model"].as_str().unwrap_or_default().into(), stream: true, ..Default::default() };
        for m in b["messages"].as_array().expect("messages") {
            let content = m["content"].as_str().map(text);
            match m["role"].as_str() {
                Some("system") => req
                    .system
                    .push(TextPart { text: m["content"].as_str().unwrap_or_default().into(), cache_control: None }),
                Some("user") => req.messages.push(msg(Role::User, content.into_iter().collect())),
                Some("assistant") => {
                    let mut parts: Vec<Part> = content.into_iter().collect();
                    for tc in m["tool_calls"].as_array().into_iter().flatten() {
                        let args = tc["function"]["arguments"].as_str().unwrap_or_default();
                        parts.push(Part::ToolUse {
                            id: tc["id"].as_str().unwrap_or_default().into(),
                            name: tc["function"]["name"].as_str().unwrap_or_default().into(),
                            input: serde_json::from_str(args).unwrap_or(Value::Null),
                            arguments: Some(args.into()),
                        });
                    }
                    req.messages.push(msg(Role::Assistant, parts));
                }
                Some("tool") => req.messages.push(msg(
                    Role::User,
                    vec![Part::ToolResult {
                        tool_use_id: m["tool_call_id"].as_str().unwrap_or_default().into(),
                        content: vec![ToolResultContent::Text(m["content"].as_str().unwrap_or_default().into())],
                        is_error: false,
                    }],
                )),
                _ => {}
            }
        }
        for t in b["tools"].as_array().expect("tools") {
            req.tools.push(Tool {
                name: t["function"]["name"].as_str().unwrap_or_default().into(),
                description: t["function"]["description"].as_str().map(Into::into),
                input_schema: t["function"]["parameters"].clone(),
                strict: t["function"]["strict"].as_bool(),
                namespace: None,
            });
        }
        req
    }

    #[test]
    fn encode_codex_chat_turn2_for_anthropic() {
        let req = codex_chat_ir();
        let (body, losses) = enc(&req);
        let msgs = body["messages"].as_array().expect("messages");
        // Alternation: the three user messages merge; the two assistant messages merge with
        // the text first; the tool result is the next user turn.
        let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap_or_default()).collect();
        assert_eq!(roles, ["user", "assistant", "user"]);
        assert_eq!(msgs[1]["content"][0]["type"], "text");
        assert_eq!(msgs[1]["content"][1]["type"], "tool_use");
        assert_eq!(msgs[1]["content"][1]["input"], json!({"command": ["echo", "hello-from-tool"]}));
        assert_eq!(msgs[2]["content"][0]["type"], "tool_result");
        assert_eq!(msgs[2]["content"][0]["tool_use_id"], msgs[1]["content"][1]["id"]);
        assert_eq!(body["max_tokens"], DEFAULT_MAX_TOKENS);
        // Tool schemas intact; `strict: false` is Anthropic's default and is not sent.
        assert_eq!(body["tools"][0]["input_schema"], req.tools[0].input_schema);
        assert!(body["tools"][0].get("strict").is_none());
        let mut shown = body.clone();
        shown["tools"] =
            json!(body["tools"].as_array().expect("tools").iter().map(|t| t["name"].clone()).collect::<Vec<_>>());
        insta::assert_json_snapshot!(json!({"body": shown, "losses": losses}));
    }

    // -----------------------------------------------------------------------------------------
    // Requests: decode features
    // -----------------------------------------------------------------------------------------

    fn dec(v: Value) -> Request {
        decode_request(&serde_json::to_vec(&v).expect("json")).expect("decodes")
    }

    fn dec_err(v: Value) -> ConvertError {
        decode_request(&serde_json::to_vec(&v).expect("json")).expect_err("must fail")
    }

    #[test]
    fn decode_request_features() {
        let req = dec(json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 2048,
            "system": "You are terse.",
            "temperature": 0,
            "top_p": 0.9,
            "top_k": 40,
            "stop_sequences": ["\n\nHuman:", "END"],
            "metadata": {"user_id": "user-42"},
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
            "tools": [
                {"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
                {"type": "custom", "name": "strict_tool", "input_schema": {"type": "object"}, "strict": true, "cache_control": {"type": "ephemeral"}},
                {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
                {"type": "bash_20250124", "name": "bash"},
                {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
                {"type": "code_execution_20250825", "name": "code_execution"},
                {"type": "computer_20250124", "name": "computer", "display_width_px": 1024, "display_height_px": 768}
            ],
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "Look:"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
                    {"type": "document", "title": "Spec", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x"}},
                    {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "plain doc"}},
                    {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}},
                    {"type": "document", "source": {"type": "content", "content": [{"type": "text", "text": "chunk 1"}, {"type": "text", "text": "chunk 2"}]}}
                ]},
                {"role": "assistant", "content": [
                    {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
                    {"type": "thinking", "thinking": "hmm", "signature": "sig=="},
                    {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}},
                    {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Oslo"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18°C"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true, "content": [
                        {"type": "text", "text": "city not found"},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}}
                    ]},
                    {"type": "text", "text": "And tomorrow?"}
                ]},
                {"role": "assistant", "content": "Prefill"}
            ]
        }));
        insta::assert_json_snapshot!(request_json(&req, true));
    }

    #[test]
    fn integral_float_counts_are_read_up_to_u64() {
        // This codec refused integral floats above 9e15, the others read them up to 1.8e19 or
        // 2^64: every codec now reads what fits a u64.
        let r = dec(json!({"model": "m", "max_tokens": 1e16, "messages": [{"role": "user", "content": "hi"}]}));
        assert_eq!(r.max_tokens, Some(10_000_000_000_000_000));
        let e = dec_err(json!({"model": "m", "max_tokens": 1.5, "messages": [{"role": "user", "content": "hi"}]}));
        assert_eq!(e.field, "max_tokens");
    }

    #[test]
    fn decode_thinking_variants() {
        let base = |thinking: Value, oc: Value| {
            let mut v = json!({"model": "m", "max_tokens": 64000, "messages": [{"role": "user", "content": "hi"}]});
            if !thinking.is_null() {
                v["thinking"] = thinking;
            }
            if !oc.is_null() {
                v["output_config"] = oc;
            }
            dec(v)
        };
        let r = base(json!({"type": "adaptive"}), json!({"effort": "high"}));
        assert_eq!(
            r.reasoning,
            Some(Reasoning { budget_tokens: None, effort: Some("high".into()), adaptive: true, summary: None })
        );
        let r = base(json!({"type": "enabled", "budget_tokens": 10000}), Value::Null);
        assert_eq!(
            r.reasoning,
            Some(Reasoning { budget_tokens: Some(10000), effort: None, adaptive: false, summary: None })
        );
        let r = base(json!({"type": "disabled"}), json!({"effort": "low"}));
        assert_eq!(r.reasoning, None);
        assert_eq!(r.losses.len(), 1);
        let r = base(Value::Null, json!({"effort": "medium"}));
        assert_eq!(r.reasoning.and_then(|x| x.effort).as_deref(), Some("medium"));
        let r = base(
            Value::Null,
            json!({"format": {"type": "json_schema", "schema": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": false}}}),
        );
        assert!(
            matches!(r.output_format, Some(OutputFormat::JsonSchema { ref name, ref schema, .. }) if name == "response" && schema["required"] == json!(["a"]))
        );
        // The structured-outputs beta's top-level `output_format`.
        let mut v = json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
        v["output_format"] = json!({"type": "json_schema", "schema": {"type": "object"}});
        assert!(matches!(dec(v).output_format, Some(OutputFormat::JsonSchema { .. })));
    }

    #[test]
    fn decode_tool_choice_variants() {
        let with = |tc: Value| {
            dec(
                json!({"model": "m", "max_tokens": 1, "tool_choice": tc, "messages": [{"role": "user", "content": "x"}]}),
            )
        };
        let r = with(json!({"type": "auto"}));
        assert_eq!((r.tool_choice, r.parallel_tool_calls), (Some(ToolChoice::Auto), None));
        let r = with(json!({"type": "auto", "disable_parallel_tool_use": false}));
        assert_eq!((r.tool_choice, r.parallel_tool_calls), (Some(ToolChoice::Auto), Some(true)));
        let r = with(json!({"type": "none"}));
        assert_eq!(r.tool_choice, Some(ToolChoice::None));
        let r = with(json!({"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true}));
        assert_eq!((r.tool_choice, r.parallel_tool_calls), (Some(ToolChoice::Tool("get_weather".into())), Some(false)));
    }

    #[test]
    fn decode_request_errors_name_the_field() {
        let errs = [
            dec_err(json!({"messages": []})),
            dec_err(json!({"model": "m", "max_tokens": 1})),
            dec_err(json!({"model": "m", "max_tokens": "many", "messages": []})),
            dec_err(json!({"model": "m", "messages": [{"role": "tool", "content": "x"}]})),
            dec_err(
                json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "file_1"}}]}]}),
            ),
            dec_err(
                json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "document", "source": {"type": "file", "file_id": "file_1"}}]}]}),
            ),
            dec_err(json!({"model": "m", "messages": [{"role": "user", "content": 5}]})),
            dec_err(json!({"model": "m", "messages": [], "thinking": {"type": "sometimes"}})),
            dec_err(json!({"model": "m", "messages": [], "tool_choice": {"type": "tool"}})),
            dec_err(json!({"model": "m", "messages": [], "temperature": "hot"})),
            dec_err(json!({"model": "m", "messages": [], "system": [{"type": "image"}]})),
            dec_err(json!({"model": "m", "messages": [], "output_config": {"format": {"type": "json_schema"}}})),
            dec_err(json!({"model": "m", "messages": [], "tools": [{"description": "no name"}]})),
        ];
        let shown: Vec<String> = errs.iter().map(|e| format!("{}: {}", e.field, e.message)).collect();
        insta::assert_json_snapshot!(shown);
        assert!(decode_request(b"{not json").is_err());
        assert!(decode_request(b"[1,2]").is_err());
    }

    #[test]
    fn decode_system_string_and_empty_signature() {
        let r = dec(json!({"model": "m", "max_tokens": 5, "system": "be brief", "messages": [
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": ""}]},
        ]}));
        assert_eq!(r.system, vec![TextPart { text: "be brief".into(), cache_control: None }]);
        assert_eq!(r.messages[0].content, vec![Part::Thinking { text: "t".into(), signature: None }]);
    }

    // -----------------------------------------------------------------------------------------
    // Requests: encode features
    // -----------------------------------------------------------------------------------------

    #[test]
    fn encode_basic_fields_and_defaults() {
        let mut req = base_request(vec![msg(Role::User, vec![text("Hi")])]);
        req.system = vec![TextPart { text: "Be brief.".into(), cache_control: None }];
        req.temperature = Some(0.0);
        req.top_p = Some(0.5);
        req.top_k = Some(7);
        req.stop = vec!["END".into(), "  ".into()];
        req.user = Some("u-1".into());
        req.stream = true;
        req.include_usage = true;
        let (body, losses) = enc(&req);
        insta::assert_json_snapshot!(json!({"body": body, "losses": losses}));
        assert_eq!(body["temperature"], json!(0.0), "temperature 0 is a value");
        assert!(body.get("top_p").is_none(), "not with temperature");
        req.temperature = None;
        let (body, losses) = enc(&req);
        assert_eq!((body["top_p"].as_f64(), losses.len()), (Some(0.5), 1));
    }

    #[test]
    fn encode_tool_choice_and_parallel() {
        let mut req = base_request(vec![msg(Role::User, vec![text("Weather?")])]);
        req.tools = vec![weather_tool()];
        let cases = [
            (None, None, Value::Null),
            (None, Some(false), json!({"type": "auto", "disable_parallel_tool_use": true})),
            (Some(ToolChoice::Auto), Some(true), json!({"type": "auto"})),
            (Some(ToolChoice::Any), Some(false), json!({"type": "any", "disable_parallel_tool_use": true})),
            (Some(ToolChoice::None), Some(false), json!({"type": "none"})),
            (Some(ToolChoice::Tool("get_weather".into())), None, json!({"type": "tool", "name": "get_weather"})),
        ];
        for (tc, par, want) in cases {
            req.tool_choice = tc.clone();
            req.parallel_tool_calls = par;
            let (body, _) = enc(&req);
            assert_eq!(body.get("tool_choice").cloned().unwrap_or(Value::Null), want, "{tc:?} {par:?}");
        }
        // No tools: no tool_choice at all (Anthropic rejects it), a forced choice is a loss.
        let mut req = base_request(vec![msg(Role::User, vec![text("x")])]);
        req.tool_choice = Some(ToolChoice::Any);
        let (body, losses) = enc(&req);
        assert!(body.get("tool_choice").is_none());
        assert_eq!(losses.len(), 1);
    }

    #[test]
    fn encode_reasoning_effort_table() {
        let mut shown = Vec::new();
        for effort in ["none", "minimal", "low", "medium", "high", "xhigh", "weird"] {
            let mut req = base_request(vec![msg(Role::User, vec![text("Think")])]);
            req.reasoning =
                Some(Reasoning { budget_tokens: None, effort: Some(effort.into()), adaptive: false, summary: None });
            let (body, losses) = enc(&req);
            shown.push(json!({"effort": effort, "thinking": body.get("thinking"), "max_tokens": body["max_tokens"], "output_config": body.get("output_config"), "losses": losses}));
        }
        insta::assert_json_snapshot!(shown);
    }

    #[test]
    fn encode_thinking_constraints() {
        let mut shown = Vec::new();
        // 1. Sampling parameters Anthropic rejects with thinking are dropped (temperature 1 stays).
        let mut req = base_request(vec![msg(Role::User, vec![text("x")])]);
        req.reasoning =
            Some(Reasoning { budget_tokens: None, effort: Some("high".into()), adaptive: false, summary: None });
        req.temperature = Some(0.2);
        req.top_p = Some(0.5);
        req.top_k = Some(5);
        req.max_tokens = Some(4000);
        shown.push(enc(&req));
        req.temperature = Some(1.0);
        req.top_p = Some(0.97);
        req.max_tokens = Some(1000);
        shown.push(enc(&req));
        // 2. A forced tool choice wins over thinking.
        let mut req = base_request(vec![msg(Role::User, vec![text("x")])]);
        req.tools = vec![weather_tool()];
        req.tool_choice = Some(ToolChoice::Tool("get_weather".into()));
        req.reasoning = Some(Reasoning { budget_tokens: Some(5000), effort: None, adaptive: false, summary: None });
        shown.push(enc(&req));
        // 3. Mid tool loop whose assistant turn has no signed thinking (e.g. from Chat): off.
        let mut req = base_request(vec![
            msg(Role::User, vec![text("Weather in Paris?")]),
            msg(
                Role::Assistant,
                vec![
                    Part::Thinking { text: "unsigned, from a Chat vendor".into(), signature: None },
                    Part::ToolUse {
                        id: "call_1".into(),
                        name: "get_weather".into(),
                        input: json!({"city": "Paris"}),
                        arguments: None,
                    },
                ],
            ),
            msg(
                Role::User,
                vec![Part::ToolResult {
                    tool_use_id: "call_1".into(),
                    content: vec![ToolResultContent::Text("18".into())],
                    is_error: false,
                }],
            ),
        ]);
        req.tools = vec![weather_tool()];
        req.reasoning =
            Some(Reasoning { budget_tokens: None, effort: Some("low".into()), adaptive: false, summary: None });
        shown.push(enc(&req));
        // 4. ... but a signed thinking block keeps it on; adaptive keeps its effort.
        if let Some(Part::Thinking { signature, .. }) = req.messages[1].content.get_mut(0) {
            *signature = Some("EqQBCkYIBxgCKkA".into());
        }
        req.reasoning =
            Some(Reasoning { budget_tokens: None, effort: Some("max".into()), adaptive: true, summary: None });
        req.max_tokens = Some(64000);
        shown.push(enc(&req));
        let shown: Vec<Value> = shown
            .into_iter()
            .map(|(mut b, l)| {
                if let Some(o) = b.as_object_mut() {
                    o.remove("tools");
                }
                json!({"body": b, "losses": l})
            })
            .collect();
        insta::assert_json_snapshot!(shown);
    }

    #[test]
    fn encode_budget_and_max_tokens() {
        let run = |budget: Option<u64>, effort: Option<&str>, max: Option<u64>| {
            let mut req = base_request(vec![msg(Role::User, vec![text("x")])]);
            req.reasoning = Some(Reasoning {
                budget_tokens: budget,
                effort: effort.map(Into::into),
                adaptive: false,
                summary: None,
            });
            req.max_tokens = max;
            let (b, l) = enc(&req);
            (b["thinking"]["budget_tokens"].as_u64(), b["max_tokens"].as_u64(), l.len())
        };
        assert_eq!(run(Some(500), None, Some(4000)), (Some(1024), Some(4000), 1));
        assert_eq!(run(Some(50000), None, None), (Some(50000), Some(58192), 0));
        assert_eq!(run(Some(10000), None, Some(6000)), (Some(3000), Some(6000), 1));
        assert_eq!(run(Some(10000), None, Some(1024)), (None, Some(1024), 1));
        assert_eq!(run(None, Some("high"), None), (Some(16384), Some(24576), 0));
        assert_eq!(run(None, Some("max"), None), (Some(24576), Some(32000), 0));
        // Every encoded budget is valid: >= 1024 and < max_tokens.
        for max in [1025u64, 1500, 2048, 9000, 100_000] {
            for e in ["minimal", "low", "medium", "high", "xhigh"] {
                let (b, m, _) = run(None, Some(e), Some(max));
                let (b, m) = (b.expect("budget"), m.expect("max"));
                assert!(b >= 1024 && b < m, "{e} {max}: {b} {m}");
            }
        }
    }

    #[test]
    fn encode_messages_shapes() {
        let mut req = base_request(vec![
            msg(
                Role::User,
                vec![
                    text("Describe"),
                    Part::Image(Image::Base64 { media_type: "image/png".into(), data: "iVBOR".into() }),
                    Part::Image(Image::Url { url: "https://example.com/x.png".into() }),
                    Part::Document {
                        source: DocumentSource::Base64 {
                            media_type: "application/pdf".into(),
                            data: "JVBERi0x".into(),
                        },
                        title: Some("Spec".into()),
                    },
                    Part::Document {
                        source: DocumentSource::Base64 {
                            media_type: "text/markdown".into(),
                            data: "IyBUaXRsZQpib2R5".into(),
                        },
                        title: None,
                    },
                    Part::Document {
                        source: DocumentSource::Url { url: "https://example.com/a.pdf".into() },
                        title: None,
                    },
                    Part::Document { source: DocumentSource::Text { text: "inline".into() }, title: None },
                    text("   "),
                ],
            ),
            msg(Role::System, vec![text("Now answer in French.")]),
            msg(
                Role::Assistant,
                vec![
                    Part::ReasoningItem {
                        id: Some("rs_1".into()),
                        summary: vec!["s".into()],
                        encrypted_content: Some("gAAAA".into()),
                    },
                    Part::ToolUse {
                        id: "functions.get_weather:0".into(),
                        name: "get_weather".into(),
                        input: Value::Null,
                        arguments: Some("{\"city\":\"Paris\"}".into()),
                    },
                    Part::ToolUse {
                        id: "call_2".into(),
                        name: "get_weather".into(),
                        input: json!({}),
                        arguments: Some("not json".into()),
                    },
                ],
            ),
            msg(Role::Assistant, vec![text("Checking.")]),
            msg(Role::User, vec![text("Also this")]),
            msg(
                Role::User,
                vec![
                    Part::ToolResult {
                        tool_use_id: "functions.get_weather:0".into(),
                        content: vec![ToolResultContent::Text("18°C".into())],
                        is_error: false,
                    },
                    Part::ToolResult {
                        tool_use_id: "call_2".into(),
                        content: vec![
                            ToolResultContent::Text("bad args".into()),
                            ToolResultContent::Image(Image::Url { url: "https://example.com/err.png".into() }),
                        ],
                        is_error: true,
                    },
                    Part::ToolResult { tool_use_id: "call_3".into(), content: vec![], is_error: false },
                ],
            ),
        ]);
        req.tools = vec![
            weather_tool(),
            Tool {
                name: "no_params".into(),
                description: None,
                input_schema: Value::Null,
                strict: Some(true),
                namespace: None,
            },
        ];
        req.output_format = Some(OutputFormat::JsonSchema {
            name: "answer".into(),
            schema: json!({"type": "object"}),
            strict: Some(true),
            description: Some("d".into()),
        });
        let (body, losses) = enc(&req);
        insta::assert_json_snapshot!(json!({"body": body, "losses": losses}));
    }

    #[test]
    fn encode_refuses_what_would_change_meaning() {
        let req = base_request(vec![msg(
            Role::User,
            vec![Part::Document {
                source: DocumentSource::Base64 {
                    media_type: "application/vnd.openxmlformats-officedocument.wordprocessingml.document".into(),
                    data: "UEsDB".into(),
                },
                title: None,
            }],
        )]);
        let e = encode_request(&req).expect_err("docx");
        assert_eq!(e.field, "messages[0].content[0]");
        assert!(e.message.contains("anthropic format"), "{}", e.message);
        let e = encode_request(&base_request(vec![])).expect_err("empty");
        assert_eq!(e.field, "messages");
        let e = encode_request(&base_request(vec![msg(Role::User, vec![text(" ")])])).expect_err("blank");
        assert_eq!(e.field, "messages");
    }

    #[test]
    fn encode_tools_as_text_without_definitions() {
        let req = base_request(vec![
            msg(Role::User, vec![text("Hi")]),
            msg(
                Role::Assistant,
                vec![Part::ToolUse {
                    id: "c1".into(),
                    name: "f".into(),
                    input: json!({"a": 1}),
                    arguments: Some("{\"a\":1}".into()),
                }],
            ),
            msg(
                Role::User,
                vec![Part::ToolResult {
                    tool_use_id: "c1".into(),
                    content: vec![ToolResultContent::Text("ok".into())],
                    is_error: true,
                }],
            ),
        ]);
        let (body, losses) = enc(&req);
        insta::assert_json_snapshot!(json!({"messages": body["messages"], "losses": losses}));
    }

    #[test]
    fn encode_json_object_and_temperature_clamp() {
        let mut req = base_request(vec![msg(Role::User, vec![text("JSON please")])]);
        req.output_format = Some(OutputFormat::JsonObject);
        req.temperature = Some(1.7);
        req.top_p = Some(1.0);
        let (body, losses) = enc(&req);
        assert_eq!(body["temperature"], json!(1.0));
        assert!(body.get("output_config").is_none());
        assert_eq!(losses.len(), 2);
    }

    #[test]
    fn final_assistant_prefill_is_trimmed() {
        let req =
            base_request(vec![msg(Role::User, vec![text("Q")]), msg(Role::Assistant, vec![text("The answer is ")])]);
        let (body, _) = enc(&req);
        assert_eq!(body["messages"][1]["content"][0]["text"], "The answer is");
    }

    #[test]
    fn system_cache_control_kept() {
        let mut req = base_request(vec![msg(Role::User, vec![text("x")])]);
        req.system = vec![TextPart { text: "cached".into(), cache_control: Some(json!({"type": "ephemeral"})) }];
        let (body, _) = enc(&req);
        assert_eq!(body["system"], json!([{"type": "text", "text": "cached", "cache_control": {"type": "ephemeral"}}]));
    }

    // -----------------------------------------------------------------------------------------
    // Responses
    // -----------------------------------------------------------------------------------------

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
        let v: Value = serde_json::from_slice(&encode_response(&r, &ctx())).expect("json");
        insta::assert_json_snapshot!(v);
        // Empty id / model: generated id and the requested model.
        let v: Value = serde_json::from_slice(&encode_response(&Response::default(), &ctx())).expect("json");
        assert_eq!((v["id"].as_str(), v["model"].as_str()), (Some("msg_seed123"), Some("claude-opus-4-8")));
        let raw = String::from_utf8(encode_response(&Response::default(), &ctx())).expect("utf8");
        assert!(raw.starts_with(r#"{"id":"msg_seed123","type":"message","role":"assistant","model":"#), "{raw}");
    }

    // -----------------------------------------------------------------------------------------
    // Streams
    // -----------------------------------------------------------------------------------------

    const STREAM_TEXT: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01XFDUDYJgAACzvnptvVoYEL\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5-20250929\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":472,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":2048,\"output_tokens\":2}}}\n\n\
event: ping\ndata: {\"type\": \"ping\"}\n\n\
: keep-alive\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\", w\u{f6}rld \u{2713}\"}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":15}}\n\n\
event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

    const STREAM_TOOLS: &str = "event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_014p7gG3wDgGV9EUtLvnow3U\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-opus-4-8\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":472,\"output_tokens\":2},\"content\":[],\"stop_reason\":null}}\r\n\r\n\
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

    const STREAM_THINKING: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01T\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-opus-4-8\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":12,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":1}}}\n\n\
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
    const STREAM_SERVER_TOOL: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_S\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n\
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

    const STREAM_ERROR: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_E\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n\
event: ping\ndata: {\"type\": \"ping\"}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Partial\"}}\n\n\
event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";

    /// A stop-sequence stop, with no `event:` lines (some relays omit them).
    const STREAM_NO_EVENT_NAMES: &str = "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_N\",\"model\":\"glm-4.6\",\"usage\":{\"input_tokens\":0,\"output_tokens\":0}}}\n\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"no start\"}}\n\n\
data: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"call_9\",\"name\":\"f\",\"input\":{\"a\":1}}}\n\n\
data: {\"type\":\"content_block_stop\",\"index\":1}\n\n\
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"stop_sequence\",\"stop_sequence\":\"###\"},\"usage\":{\"input_tokens\":30,\"cache_read_input_tokens\":null,\"output_tokens\":7}}\n\n\
data: {\"type\":\"message_stop\"}\n\n";

    const TRANSCRIPTS: &[(&str, &str)] = &[
        ("text", STREAM_TEXT),
        ("tools", STREAM_TOOLS),
        ("thinking", STREAM_THINKING),
        ("server_tool", STREAM_SERVER_TOOL),
        ("error", STREAM_ERROR),
        ("no_event_names", STREAM_NO_EVENT_NAMES),
    ];

    fn decode_chunks(chunks: &[&[u8]]) -> Vec<StreamEvent> {
        let mut scanner = SseScanner::new();
        let mut dec = StreamDecoder::new();
        let mut out = Vec::new();
        for c in chunks {
            scanner.feed(c, |ev| dec.decode(&ev, &mut out));
        }
        dec.finish(&mut out);
        out
    }

    fn events_text(evs: &[StreamEvent]) -> String {
        evs.iter().map(|e| format!("{e:?}")).collect::<Vec<_>>().join("\n")
    }

    #[test]
    fn stream_decode_transcripts() {
        for (name, t) in TRANSCRIPTS {
            let evs = decode_chunks(&[t.as_bytes()]);
            insta::assert_snapshot!(format!("stream_decode_{name}"), events_text(&evs));
        }
    }

    #[test]
    fn stream_decode_every_split_is_identical() {
        for (name, t) in TRANSCRIPTS {
            let bytes = t.as_bytes();
            let whole = decode_chunks(&[bytes]);
            for cut in 0..=bytes.len() {
                let (a, b) = bytes.split_at(cut);
                assert_eq!(decode_chunks(&[a, b]), whole, "{name} split at {cut}");
            }
            // One byte at a time.
            let singles: Vec<&[u8]> = bytes.chunks(1).collect();
            assert_eq!(decode_chunks(&singles), whole, "{name} byte by byte");
        }
    }

    proptest! {
        #[test]
        fn stream_decode_random_splits(which in 0usize..6, cuts in proptest::collection::vec(0usize..4000, 0..12)) {
            let bytes = TRANSCRIPTS[which].1.as_bytes();
            let whole = decode_chunks(&[bytes]);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut prev = 0;
            for c in cuts {
                chunks.push(&bytes[prev..c]);
                prev = c;
            }
            chunks.push(&bytes[prev..]);
            prop_assert_eq!(decode_chunks(&chunks), whole);
        }
    }

    #[test]
    fn relay_without_block_stops_keeps_one_block_open() {
        let t = "data: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"x\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n\
data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\n\n\
data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{}}}\n\n\
data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}\n\n\
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":3}}\n\n\
data: {\"type\":\"message_stop\"}\n\n";
        let evs = decode_chunks(&[t.as_bytes()]);
        let kinds: Vec<String> =
            evs.iter().map(|e| format!("{e:?}").split([' ', '{']).next().unwrap_or_default().to_string()).collect();
        assert_eq!(
            kinds,
            [
                "Start",
                "BlockStart",
                "TextDelta",
                "BlockStop",
                "BlockStart",
                "ToolArgsDelta",
                "BlockStop",
                "Finish",
                "End"
            ]
        );
    }

    #[test]
    fn empty_tool_output_is_sent_without_content() {
        let mut req = base_request(vec![
            msg(Role::User, vec![text("run")]),
            msg(
                Role::Assistant,
                vec![Part::ToolUse { id: "c".into(), name: "get_weather".into(), input: json!({}), arguments: None }],
            ),
            msg(
                Role::User,
                vec![Part::ToolResult {
                    tool_use_id: "c".into(),
                    content: vec![ToolResultContent::Text(String::new())],
                    is_error: false,
                }],
            ),
        ]);
        req.tools = vec![weather_tool()];
        let (body, losses) = enc(&req);
        assert_eq!(body["messages"][2]["content"][0], json!({"type": "tool_result", "tool_use_id": "c"}));
        assert!(losses.is_empty());
    }

    #[test]
    fn stream_cut_before_message_stop_gets_no_end() {
        let cut = STREAM_TEXT.find("event: message_delta").expect("has delta");
        let evs = decode_chunks(&[&STREAM_TEXT.as_bytes()[..cut]]);
        assert!(!evs.iter().any(|e| matches!(e, StreamEvent::End | StreamEvent::Finish { .. })));
        let cut = STREAM_TEXT.find("event: message_stop").expect("has stop");
        let evs = decode_chunks(&[&STREAM_TEXT.as_bytes()[..cut]]);
        assert!(evs.iter().any(|e| matches!(e, StreamEvent::Finish { .. })));
        assert!(!evs.iter().any(|e| matches!(e, StreamEvent::End)));
    }

    fn encode_events(evs: &[StreamEvent]) -> String {
        let mut enc = StreamEncoder::new(ctx());
        let mut out = Vec::new();
        for e in evs {
            enc.encode(e, &mut out);
        }
        String::from_utf8(out).expect("utf8")
    }

    fn u(input: Option<u64>, output: Option<u64>, cache_read: Option<u64>, cache_write: Option<u64>) -> Usage {
        Usage { input, output, cache_read, cache_write, reasoning: None }
    }

    #[test]
    fn stream_encode_text_from_chat_usage_at_end() {
        // What a Chat decoder produces: no id usage at start, usage only in Finish.
        let evs = vec![
            StreamEvent::Start {
                id: "chatcmpl-9".into(),
                model: "gpt-5".into(),
                usage: Usage::default(),
                created: Some(1),
            },
            StreamEvent::BlockStart { index: 0, block: BlockStart::Text },
            StreamEvent::TextDelta { index: 0, text: "Hel".into() },
            StreamEvent::TextDelta { index: 0, text: String::new() },
            StreamEvent::TextDelta { index: 0, text: "lo \"quoted\"\n".into() },
            StreamEvent::BlockStop { index: 0 },
            StreamEvent::Finish {
                stop_reason: Some(StopReason::StopSequence),
                stop_sequence: None,
                usage: u(Some(80), Some(5), Some(1024), None),
            },
            StreamEvent::End,
        ];
        insta::assert_snapshot!(encode_events(&evs));
    }

    #[test]
    fn stream_encode_interleaved_tool_calls() {
        // A Chat upstream interleaving two tool calls by index; both stay open until Finish.
        let evs = vec![
            StreamEvent::Start { id: String::new(), model: String::new(), usage: Usage::default(), created: None },
            StreamEvent::BlockStart {
                index: 0,
                block: BlockStart::ToolUse { id: "call_a".into(), name: "get_weather".into() },
            },
            StreamEvent::ToolArgsDelta { index: 0, partial_json: "{\"city\":".into() },
            StreamEvent::BlockStart {
                index: 1,
                block: BlockStart::ToolUse { id: String::new(), name: "get_time".into() },
            },
            StreamEvent::ToolArgsDelta { index: 1, partial_json: "{\"tz\":\"UTC\"}".into() },
            StreamEvent::ToolArgsDelta { index: 0, partial_json: "\"Paris\"}".into() },
            StreamEvent::BlockStop { index: 0 },
            StreamEvent::BlockStop { index: 1 },
            StreamEvent::Finish { stop_reason: None, stop_sequence: None, usage: u(Some(50), Some(20), None, None) },
            StreamEvent::End,
        ];
        insta::assert_snapshot!(encode_events(&evs));
    }

    #[test]
    fn stream_encode_thinking_and_error() {
        let evs = vec![
            StreamEvent::Start {
                id: "resp_1".into(),
                model: "o3".into(),
                usage: u(Some(10), None, Some(0), Some(0)),
                created: None,
            },
            StreamEvent::BlockStart {
                index: 0,
                block: BlockStart::ReasoningItem { id: Some("rs_1".into()), encrypted_content: None },
            },
            StreamEvent::ThinkingDelta { index: 0, text: "summary".into() },
            StreamEvent::BlockStop { index: 0 },
            StreamEvent::BlockStart { index: 1, block: BlockStart::Thinking },
            StreamEvent::ThinkingDelta { index: 1, text: "think".into() },
            StreamEvent::SignatureDelta { index: 1, signature: "sig".into() },
            StreamEvent::BlockStop { index: 1 },
            StreamEvent::BlockStart { index: 2, block: BlockStart::RedactedThinking { data: "opaque".into() } },
            StreamEvent::BlockStop { index: 2 },
            // A delta before its block start opens the block it implies.
            StreamEvent::TextDelta { index: 3, text: "Answer".into() },
            StreamEvent::Error { kind: ErrorKind::Overloaded, message: "upstream overloaded".into() },
            StreamEvent::TextDelta { index: 3, text: "ignored after the error".into() },
        ];
        insta::assert_snapshot!(encode_events(&evs));
    }

    #[test]
    fn stream_encode_end_without_finish_and_no_start() {
        let evs = vec![
            StreamEvent::BlockStart { index: 0, block: BlockStart::Text },
            StreamEvent::TextDelta { index: 0, text: "x".into() },
            StreamEvent::End,
        ];
        insta::assert_snapshot!(encode_events(&evs));
    }

    /// Every encoder output is a valid Anthropic event sequence: JSON data whose `type` equals
    /// the event name, message_start first, block indexes started before use and stopped once,
    /// message_delta before message_stop, nothing after message_stop / error.
    fn assert_valid_anthropic_sse(s: &str) {
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

    #[test]
    fn encoder_outputs_are_valid_sequences() {
        for (_, t) in TRANSCRIPTS {
            let evs = decode_chunks(&[t.as_bytes()]);
            assert_valid_anthropic_sse(&encode_events(&evs));
        }
    }

    // -----------------------------------------------------------------------------------------
    // Errors
    // -----------------------------------------------------------------------------------------

    #[test]
    fn decode_errors() {
        let cases: Vec<(u16, &str)> = vec![
            (
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"},"request_id":"req_1"}"#,
            ),
            (401, r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#),
            (402, r#"{"type":"error","error":{"type":"billing_error","message":"credit balance too low"}}"#),
            (403, r#"{"type":"error","error":{"type":"permission_error","message":"no access"}}"#),
            (404, r#"{"type":"error","error":{"type":"not_found_error","message":"model: claude-x"}}"#),
            (
                413,
                r#"{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum size"}}"#,
            ),
            (429, r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#),
            (500, r#"{"type":"error","error":{"type":"api_error","message":"Internal server error"}}"#),
            (504, r#"{"type":"error","error":{"type":"timeout_error","message":"timed out"}}"#),
            (529, r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#),
            (
                429,
                r#"{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#,
            ),
            (
                400,
                r#"{"error":{"message":"bad param","type":"invalid_request_error","param":"temperature","code":null}}"#,
            ),
            (502, "<html>Bad Gateway</html>"),
            (503, ""),
            (418, r#"{"detail":"teapot"}"#),
        ];
        let shown: Vec<String> =
            cases.iter().map(|(s, b)| format!("{s}: {:?}", decode_error(*s, b.as_bytes()))).collect();
        insta::assert_json_snapshot!(shown);
        let long = "x".repeat(10_000);
        assert!(decode_error(500, long.as_bytes()).message.len() < 2100);
    }

    #[test]
    fn long_error_messages_are_cut_by_characters() {
        // This codec and the Chat one counted bytes, the Responses one characters: a message
        // in a non-Latin script kept half (or a third) of what an English one keeps.
        let long = "\u{e9}".repeat(5000);
        let message = decode_error(500, long.as_bytes()).message;
        assert_eq!(message.chars().count(), MAX_ERROR_MESSAGE + 1);
        assert!(message.ends_with('…'));
    }

    #[test]
    fn encode_errors() {
        let kinds = [
            ErrorKind::InvalidRequest,
            ErrorKind::Authentication,
            ErrorKind::Permission,
            ErrorKind::NotFound,
            ErrorKind::RequestTooLarge,
            ErrorKind::RateLimited,
            ErrorKind::Overloaded,
            ErrorKind::Api,
        ];
        let shown: Vec<String> = kinds
            .iter()
            .map(|k| {
                String::from_utf8(encode_error(&ErrorBody {
                    kind: *k,
                    message: format!("{k:?} \"msg\""),
                    code: None,
                    param: None,
                }))
                .expect("utf8")
            })
            .collect();
        insta::assert_json_snapshot!(shown);
        // An upstream's own Anthropic type survives when consistent with the kind.
        let b = encode_error(&ErrorBody {
            kind: ErrorKind::Permission,
            message: "m".into(),
            code: Some("billing_error".into()),
            param: None,
        });
        assert_eq!(serde_json::from_slice::<Value>(&b).expect("json")["error"]["type"], "billing_error");
        let b = encode_error(&ErrorBody {
            kind: ErrorKind::RateLimited,
            message: "m".into(),
            code: Some("insufficient_quota".into()),
            param: None,
        });
        assert_eq!(serde_json::from_slice::<Value>(&b).expect("json")["error"]["type"], "rate_limit_error");
        for k in kinds {
            let e = ErrorBody { kind: k, message: "m".into(), code: None, param: None };
            assert_eq!(decode_error(400, &encode_error(&e)).kind, k);
        }
    }

    // -----------------------------------------------------------------------------------------
    // Round trips and properties
    // -----------------------------------------------------------------------------------------

    fn word() -> impl Strategy<Value = String> {
        "[A-Za-z][A-Za-z0-9 .,!?é✓\"\\\\\n]{0,16}"
    }

    fn ident() -> impl Strategy<Value = String> {
        "[a-z][a-z0-9_]{0,10}"
    }

    fn small_json() -> impl Strategy<Value = Value> {
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

    fn json_object() -> impl Strategy<Value = Value> {
        proptest::collection::btree_map(ident(), small_json(), 0..4)
            .prop_map(|m| Value::Object(m.into_iter().collect()))
    }

    /// A well-formed conversation: user / assistant alternate; assistant turns may call tools,
    /// answered by the next user turn.
    fn conversation() -> impl Strategy<Value = (Vec<Message>, Vec<Tool>)> {
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
                    input_schema: json!({"type": "object", "properties": {}}),
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

    fn arb_json() -> impl Strategy<Value = Value> {
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

    fn arb_image() -> impl Strategy<Value = Image> {
        prop_oneof![
            (word(), word()).prop_map(|(media_type, data)| Image::Base64 { media_type, data }),
            word().prop_map(|url| Image::Url { url }),
        ]
    }

    fn arb_part() -> impl Strategy<Value = Part> {
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

    fn arb_request() -> impl Strategy<Value = Request> {
        let role = prop_oneof![Just(Role::User), Just(Role::Assistant), Just(Role::System)];
        let message =
            (role, proptest::collection::vec(arb_part(), 0..4)).prop_map(|(role, content)| Message { role, content });
        let tool = (ident(), proptest::option::of(word()), arb_json(), proptest::option::of(any::<bool>())).prop_map(
            |(name, description, input_schema, strict)| Tool {
                name,
                description,
                input_schema,
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

    fn arb_stream_event() -> impl Strategy<Value = StreamEvent> {
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
