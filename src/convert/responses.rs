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

use serde_json::{Map, Value, json};

use super::ir::*;
use crate::protocol::errors::{ErrorKind, OpenAiError, response_failed_event, to_value};
use crate::protocol::lenient::{
    count, data_url, filename_for_media_type, media_type_for_filename, parse_arguments, parse_data_url, truncate_marked,
};
use crate::protocol::sse::{SseEvent, write_event};

/// `encrypted_content` prefix of a reasoning item that carries an Anthropic thinking signature.
const THINKING_BLOB: &str = "ccmesh.anthropic-thinking.v1:";
/// `encrypted_content` prefix of a reasoning item that carries Anthropic redacted thinking.
const REDACTED_BLOB: &str = "ccmesh.anthropic-redacted.v1:";
/// The Responses API rejects `max_output_tokens` below this.
const MIN_MAX_OUTPUT_TOKENS: u64 = 16;
/// Separator between the summary parts of one reasoning item when shown as one thinking text.
const SUMMARY_SEPARATOR: &str = "\n\n";
/// Separator between system parts joined into `instructions`.
const INSTRUCTIONS_SEPARATOR: &str = "\n\n";
/// Longest `user` value passed on unchanged; longer ids are replaced by a stable digest.
const MAX_USER_LEN: usize = 64;
/// Longest error message kept from an unparseable upstream error body, in characters.
const MAX_ERROR_TEXT: usize = 1000;

// ---------------------------------------------------------------------------------------------
// Small JSON helpers
// ---------------------------------------------------------------------------------------------

fn get_str<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
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
    format!("{}__{}", namespace.trim_end_matches('_'), name.trim_start_matches('_'))
}

/// The argument string to send for a tool call: the raw string when the IR kept it, else the
/// compact JSON of `input` (`{}` for a missing input).
fn arguments_string(input: &Value, arguments: Option<&String>) -> String {
    match arguments {
        Some(raw) if raw.trim().is_empty() => "{}".to_owned(),
        Some(raw) => raw.clone(),
        None => match input {
            Value::Null => "{}".to_owned(),
            other => other.to_string(),
        },
    }
}

/// `data:image/png;base64,AAAA` → base64 image; anything else is a URL.
fn image_from_url(url: &str) -> Image {
    if let Some((media_type, data)) = parse_data_url(url) {
        return Image::Base64 { media_type, data };
    }
    Image::Url { url: url.to_owned() }
}

fn image_url(image: &Image) -> String {
    match image {
        Image::Base64 { media_type, data } => data_url(media_type, data),
        Image::Url { url } => url.clone(),
    }
}

/// A stable, URL-safe 32-hex-digit digest (two FNV-1a 64 passes), for ids that are too long.
fn digest(s: &str) -> String {
    let fnv = |seed: u64| {
        let mut h = seed;
        for b in s.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h
    };
    format!("{:016x}{:016x}", fnv(0xcbf2_9ce4_8422_2325), fnv(0x6c62_272e_07bb_0142))
}

// ---------------------------------------------------------------------------------------------
// Requests: Responses → IR
// ---------------------------------------------------------------------------------------------

/// Collects IR messages, merging consecutive items of the same role into one message (the
/// Responses input is a flat item list; the IR, like Anthropic, alternates roles).
#[derive(Default)]
struct MessageBuilder {
    system: Vec<TextPart>,
    messages: Vec<Message>,
    /// A user / assistant / tool item has been seen: later system/developer messages stay in
    /// place as `Role::System` messages.
    in_conversation: bool,
}

impl MessageBuilder {
    fn push(&mut self, role: Role, part: Part) {
        if role != Role::System {
            self.in_conversation = true;
        }
        match self.messages.last_mut() {
            Some(last) if last.role == role => last.content.push(part),
            _ => self.messages.push(Message { role, content: vec![part] }),
        }
    }
}

#[derive(Default)]
struct RequestDecoder {
    losses: Vec<Loss>,
}

impl RequestDecoder {
    fn loss(&mut self, field: impl Into<String>, note: impl Into<String>) {
        self.losses.push(Loss::new(field, note));
    }

    /// Content parts of a user / assistant message (string or part list).
    fn content_parts(&mut self, field: &str, content: Option<&Value>) -> Result<Vec<Part>, ConvertError> {
        let mut out = Vec::new();
        match content {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => {
                if !s.is_empty() {
                    out.push(Part::Text(text_part(s.clone())));
                }
            }
            Some(Value::Array(parts)) => {
                for (j, p) in parts.iter().enumerate() {
                    let pf = format!("{field}.content[{j}]");
                    if let Some(part) = self.content_part(&pf, p)? {
                        out.push(part);
                    }
                }
            }
            Some(_) => {
                return Err(ConvertError::new(
                    format!("{field}.content"),
                    "message content must be a string or an array of content parts",
                ));
            }
        }
        Ok(out)
    }

    fn content_part(&mut self, field: &str, p: &Value) -> Result<Option<Part>, ConvertError> {
        let ty = get_str(p, "type").unwrap_or_default();
        match ty {
            "input_text" | "output_text" | "text" => {
                let text = get_str(p, "text").unwrap_or_default();
                Ok((!text.is_empty()).then(|| Part::Text(text_part(text))))
            }
            "refusal" => {
                let text = get_str(p, "refusal").unwrap_or_default();
                Ok((!text.is_empty()).then(|| Part::Text(text_part(text))))
            }
            "input_image" => Ok(Some(Part::Image(decode_input_image(field, p)?))),
            "input_file" => Ok(Some(decode_input_file(field, p)?)),
            "input_audio" => Err(ConvertError::new(
                field,
                "input_audio cannot be converted: the target endpoint format has no audio input",
            )),
            other => Err(ConvertError::new(
                field,
                format!("unsupported content part type `{other}` cannot be converted to another endpoint format"),
            )),
        }
    }

    /// Texts of a system / developer message; other parts are dropped with a loss.
    fn system_texts(&mut self, field: &str, content: Option<&Value>) -> Result<Vec<TextPart>, ConvertError> {
        let mut out = Vec::new();
        match content {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => {
                if !s.is_empty() {
                    out.push(text_part(s.clone()));
                }
            }
            Some(Value::Array(parts)) => {
                for (j, p) in parts.iter().enumerate() {
                    match get_str(p, "type") {
                        Some("input_text" | "output_text" | "text") => {
                            let t = get_str(p, "text").unwrap_or_default();
                            if !t.is_empty() {
                                out.push(text_part(t));
                            }
                        }
                        other => self.loss(
                            format!("{field}.content[{j}]"),
                            format!(
                                "dropped: a `{}` part in a system/developer message has no equivalent in a system prompt",
                                other.unwrap_or("untyped")
                            ),
                        ),
                    }
                }
            }
            Some(_) => {
                return Err(ConvertError::new(
                    format!("{field}.content"),
                    "message content must be a string or an array of content parts",
                ));
            }
        }
        Ok(out)
    }

    fn input_item(&mut self, b: &mut MessageBuilder, i: usize, item: &Value) -> Result<(), ConvertError> {
        let field = format!("input[{i}]");
        if !item.is_object() {
            return Err(ConvertError::new(field, "each input item must be an object"));
        }
        let ty = get_str(item, "type");
        match ty {
            Some("message") | None => {
                let Some(role) = get_str(item, "role") else {
                    return Err(ConvertError::new(field, "input item has neither a `type` nor a `role`"));
                };
                match role {
                    "system" | "developer" => {
                        let texts = self.system_texts(&field, item.get("content"))?;
                        if b.in_conversation {
                            for t in texts {
                                b.push(Role::System, Part::Text(t));
                            }
                        } else {
                            b.system.extend(texts);
                        }
                    }
                    "user" | "assistant" => {
                        let role = if role == "user" { Role::User } else { Role::Assistant };
                        for part in self.content_parts(&field, item.get("content"))? {
                            b.push(role, part);
                        }
                    }
                    other => {
                        return Err(ConvertError::new(format!("{field}.role"), format!("unsupported role `{other}`")));
                    }
                }
            }
            Some("function_call") => {
                let call_id = get_str(item, "call_id").or_else(|| get_str(item, "id"));
                let Some(call_id) = call_id else {
                    return Err(ConvertError::new(format!("{field}.call_id"), "function_call without call_id"));
                };
                let Some(name) = get_str(item, "name") else {
                    return Err(ConvertError::new(format!("{field}.name"), "function_call without name"));
                };
                let name = match get_str(item, "namespace").filter(|ns| !ns.is_empty()) {
                    Some(ns) => flat_tool_name(ns, name),
                    None => name.to_owned(),
                };
                let raw = match item.get("arguments") {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                };
                b.push(
                    Role::Assistant,
                    Part::ToolUse { id: call_id.to_owned(), name, input: parse_arguments(&raw), arguments: Some(raw) },
                );
            }
            Some("function_call_output") => {
                let Some(call_id) = get_str(item, "call_id") else {
                    return Err(ConvertError::new(format!("{field}.call_id"), "function_call_output without call_id"));
                };
                // Older Codex versions wrote a failed call as `{"content": "...", "success": false}`.
                let (output, is_error) = match item.get("output") {
                    Some(o @ Value::Object(_)) if o.get("content").is_some() => {
                        (o.get("content"), o.get("success").and_then(Value::as_bool) == Some(false))
                    }
                    other => (other, false),
                };
                let content = self.tool_output(&format!("{field}.output"), output)?;
                b.push(Role::User, Part::ToolResult { tool_use_id: call_id.to_owned(), content, is_error });
            }
            Some("reasoning") => {
                b.push(Role::Assistant, reasoning_part(item));
            }
            Some("item_reference") => {
                // Resolving the reference needs the stored item, which only OpenAI (or a gateway
                // item cache) has. The Vercel AI SDK sends these by default (store: true) for its
                // own earlier reasoning and text, so refusing would break every tool loop: drop it.
                let id = get_str(item, "id").unwrap_or_default();
                let what = if id.starts_with("rs_") {
                    "a reasoning item (harmless: the target would drop it anyway)"
                } else if id.starts_with("msg_") {
                    "an earlier assistant message, whose text the target does not see"
                } else {
                    "a stored item"
                };
                self.loss(
                    format!("{field} (item_reference {id})"),
                    format!("dropped: it points at {what}; only a Responses endpoint can resolve stored items (Vercel AI SDK: set providerOptions.openai.store = false to send the items themselves)"),
                );
            }
            Some("custom_tool_call") => {
                // Custom (freeform) tools are dropped from `tools`; keep the exchange readable.
                let name = get_str(item, "name").unwrap_or("custom_tool");
                let input = get_str(item, "input").unwrap_or_default();
                b.push(
                    Role::Assistant,
                    Part::Text(text_part(format!("[called custom tool `{name}` with input]\n{input}"))),
                );
                self.loss(
                    field,
                    "converted to text: custom (freeform) tool calls have no equivalent in the target format",
                );
            }
            Some("custom_tool_call_output") => {
                let output = match item.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                    None => String::new(),
                };
                b.push(Role::User, Part::Text(text_part(format!("[custom tool output]\n{output}"))));
                self.loss(
                    field,
                    "converted to text: custom (freeform) tool outputs have no equivalent in the target format",
                );
            }
            Some(other) => {
                self.loss(
                    format!("{field} ({other})"),
                    format!(
                        "dropped: `{other}` items belong to built-in tools or server-side state of the Responses API"
                    ),
                );
            }
        }
        Ok(())
    }

    fn tool_output(&mut self, field: &str, output: Option<&Value>) -> Result<Vec<ToolResultContent>, ConvertError> {
        let mut out = Vec::new();
        match output {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => {
                if !s.is_empty() {
                    out.push(ToolResultContent::Text(s.clone()));
                }
            }
            Some(Value::Array(parts)) => {
                for (j, p) in parts.iter().enumerate() {
                    let pf = format!("{field}[{j}]");
                    match get_str(p, "type") {
                        Some("input_text" | "output_text" | "text") => {
                            let t = get_str(p, "text").unwrap_or_default();
                            if !t.is_empty() {
                                out.push(ToolResultContent::Text(t.to_owned()));
                            }
                        }
                        Some("input_image") => out.push(ToolResultContent::Image(decode_input_image(&pf, p)?)),
                        other => self.loss(
                            pf,
                            format!(
                                "dropped: a `{}` part in a tool output has no equivalent in the target format",
                                other.unwrap_or("untyped")
                            ),
                        ),
                    }
                }
            }
            Some(other) => out.push(ToolResultContent::Text(other.to_string())),
        }
        Ok(out)
    }

    fn tools(&mut self, tools: &[Value]) -> Result<Vec<Tool>, ConvertError> {
        let mut out: Vec<Tool> = Vec::new();
        for (i, t) in tools.iter().enumerate() {
            let field = format!("tools[{i}]");
            match get_str(t, "type") {
                Some("function") => out.push(function_tool(&field, t, None)?),
                Some("namespace") => {
                    let Some(ns) = get_str(t, "name") else {
                        return Err(ConvertError::new(format!("{field}.name"), "namespace tool without name"));
                    };
                    let nested = t.get("tools").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
                    for (j, nt) in nested.iter().enumerate() {
                        let nf = format!("{field}.tools[{j}]");
                        match get_str(nt, "type") {
                            Some("function") => out.push(function_tool(&nf, nt, Some(ns))?),
                            other => {
                                let other = other.unwrap_or("untyped");
                                self.loss(
                                    format!("{nf} ({other})"),
                                    format!("dropped: `{other}` tools inside a namespace have no equivalent in the target format"),
                                );
                            }
                        }
                    }
                    if is_set(t.get("description")) {
                        self.loss(
                            format!("{field} (namespace {ns})"),
                            format!(
                                "flattened to `{}<name>` functions; the namespace description is not carried",
                                flat_tool_name(ns, "")
                            ),
                        );
                    }
                }
                Some("custom") => {
                    let name = get_str(t, "name").unwrap_or("custom");
                    self.loss(
                        format!("{field} (custom {name})"),
                        "dropped: custom (freeform input) tools exist only on the Responses API",
                    );
                }
                other => {
                    let other = other.unwrap_or("untyped");
                    self.loss(
                        format!("{field} ({other})"),
                        format!("dropped: the built-in tool `{other}` exists only on the Responses API"),
                    );
                }
            }
        }
        for (i, t) in out.iter().enumerate() {
            if out.iter().skip(i + 1).any(|u| u.name == t.name) {
                return Err(ConvertError::new(
                    "tools",
                    format!("duplicate tool name `{}` (after flattening namespace tools)", t.name),
                ));
            }
        }
        Ok(out)
    }

    fn tool_choice(&mut self, v: &Value) -> Result<Option<ToolChoice>, ConvertError> {
        let field = "tool_choice";
        Ok(match v {
            Value::Null => None,
            Value::String(s) => match s.as_str() {
                "auto" => Some(ToolChoice::Auto),
                "none" => Some(ToolChoice::None),
                "required" => Some(ToolChoice::Any),
                other => return Err(ConvertError::new(field, format!("unknown tool_choice `{other}`"))),
            },
            Value::Object(_) => match get_str(v, "type") {
                Some("function") => {
                    let Some(name) = get_str(v, "name") else {
                        return Err(ConvertError::new("tool_choice.name", "tool_choice of type function needs a name"));
                    };
                    let name = match get_str(v, "namespace").filter(|ns| !ns.is_empty()) {
                        Some(ns) => flat_tool_name(ns, name),
                        None => name.to_owned(),
                    };
                    Some(ToolChoice::Tool(name))
                }
                Some("allowed_tools") => {
                    self.loss(
                        field,
                        "the allowed_tools restriction is not carried: every declared tool stays callable",
                    );
                    match get_str(v, "mode") {
                        Some("required") => Some(ToolChoice::Any),
                        _ => Some(ToolChoice::Auto),
                    }
                }
                other => {
                    self.loss(
                        field,
                        format!(
                            "`{}` tool choice dropped (its tool exists only on the Responses API): auto",
                            other.unwrap_or("untyped")
                        ),
                    );
                    Some(ToolChoice::Auto)
                }
            },
            _ => return Err(ConvertError::new(field, "tool_choice must be a string or an object")),
        })
    }
}

fn function_tool(field: &str, t: &Value, namespace: Option<&str>) -> Result<Tool, ConvertError> {
    let Some(name) = get_str(t, "name") else {
        return Err(ConvertError::new(format!("{field}.name"), "function tool without name"));
    };
    let input_schema = match t.get("parameters") {
        None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
        Some(p) => p.clone(),
    };
    let (flat, ns) = match namespace {
        Some(ns) => (flat_tool_name(ns, name), Some((ns.to_owned(), name.to_owned()))),
        None => (name.to_owned(), None),
    };
    Ok(Tool {
        name: flat,
        description: get_str(t, "description").map(str::to_owned),
        input_schema,
        strict: t.get("strict").and_then(Value::as_bool),
        namespace: ns,
    })
}

fn decode_input_image(field: &str, p: &Value) -> Result<Image, ConvertError> {
    if let Some(url) = p.get("image_url").and_then(|u| u.as_str().or_else(|| get_str(u, "url"))) {
        return Ok(image_from_url(url));
    }
    if is_set(p.get("file_id")) {
        return Err(ConvertError::new(
            format!("{field}.file_id"),
            "input_image with file_id cannot be converted: file ids refer to OpenAI file storage, which another endpoint format cannot read; send the image as a URL or data URL",
        ));
    }
    Err(ConvertError::new(field, "input_image needs an image_url"))
}

fn decode_input_file(field: &str, p: &Value) -> Result<Part, ConvertError> {
    let filename = get_str(p, "filename");
    let title = filename.map(str::to_owned);
    if let Some(data) = get_str(p, "file_data") {
        let source = match parse_data_url(data) {
            Some((media_type, data)) => DocumentSource::Base64 { media_type, data },
            None => DocumentSource::Base64 {
                media_type: media_type_for_filename(filename.unwrap_or_default()).to_owned(),
                data: data.to_owned(),
            },
        };
        return Ok(Part::Document { source, title });
    }
    if let Some(url) = get_str(p, "file_url") {
        return Ok(Part::Document { source: DocumentSource::Url { url: url.to_owned() }, title });
    }
    if is_set(p.get("file_id")) {
        return Err(ConvertError::new(
            format!("{field}.file_id"),
            "input_file with file_id cannot be converted: file ids refer to OpenAI file storage, which another endpoint format cannot read; send file_data or file_url",
        ));
    }
    Err(ConvertError::new(field, "input_file needs file_data or file_url"))
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

/// Client request body (Responses) → IR.
pub fn decode_request(body: &[u8]) -> Result<Request, ConvertError> {
    let root: Value = serde_json::from_slice(body)
        .map_err(|e| ConvertError::new("body", format!("the body is not valid JSON: {e}")))?;
    if !root.is_object() {
        return Err(ConvertError::new("body", "the request body must be a JSON object"));
    }
    let mut d = RequestDecoder::default();
    let mut req = Request::default();

    // Server-side state that only OpenAI holds.
    if is_set(root.get("previous_response_id")) {
        return Err(ConvertError::new(
            "previous_response_id",
            "previous_response_id requires a Responses endpoint: the gateway cannot rebuild server-side conversation state for another endpoint format; send the whole conversation in `input` instead",
        ));
    }
    if is_set(root.get("conversation")) {
        return Err(ConvertError::new(
            "conversation",
            "conversation requires a Responses endpoint: the gateway cannot rebuild server-side conversation state for another endpoint format; send the whole conversation in `input` instead",
        ));
    }
    if is_set(root.get("prompt")) {
        return Err(ConvertError::new(
            "prompt",
            "prompt (a stored prompt template) requires a Responses endpoint: another endpoint format cannot read prompts stored by OpenAI",
        ));
    }
    if root.get("background").and_then(Value::as_bool) == Some(true) {
        return Err(ConvertError::new(
            "background",
            "background mode requires a Responses endpoint: another endpoint format cannot queue and store a response for later retrieval",
        ));
    }

    req.model = match root.get("model") {
        Some(Value::String(m)) => m.clone(),
        None | Some(Value::Null) => return Err(ConvertError::new("model", "model is required")),
        Some(_) => return Err(ConvertError::new("model", "model must be a string")),
    };

    let mut b = MessageBuilder::default();
    match root.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            if !s.is_empty() {
                b.system.push(text_part(s.clone()));
            }
        }
        Some(Value::Array(items)) => {
            // Newer API: instructions as a list of input messages (system/developer text).
            for (i, item) in items.iter().enumerate() {
                let texts = d.system_texts(&format!("instructions[{i}]"), item.get("content"))?;
                b.system.extend(texts);
            }
        }
        Some(_) => return Err(ConvertError::new("instructions", "instructions must be a string")),
    }
    match root.get("input") {
        Some(Value::String(s)) => b.push(Role::User, Part::Text(text_part(s.clone()))),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                d.input_item(&mut b, i, item)?;
            }
        }
        None | Some(Value::Null) => return Err(ConvertError::new("input", "input is required")),
        Some(_) => return Err(ConvertError::new("input", "input must be a string or an array of items")),
    }
    req.system = b.system;
    req.messages = b.messages;

    match root.get("tools") {
        None | Some(Value::Null) => {}
        Some(Value::Array(tools)) => req.tools = d.tools(tools)?,
        Some(_) => return Err(ConvertError::new("tools", "tools must be an array")),
    }
    if let Some(tc) = root.get("tool_choice") {
        req.tool_choice = d.tool_choice(tc)?;
    }
    req.parallel_tool_calls = root.get("parallel_tool_calls").and_then(Value::as_bool);

    match root.get("max_output_tokens") {
        None | Some(Value::Null) => {}
        Some(v) => match count(v) {
            Some(n) => req.max_tokens = Some(n),
            None => {
                return Err(ConvertError::new("max_output_tokens", "max_output_tokens must be a non-negative integer"));
            }
        },
    }
    req.temperature = root.get("temperature").and_then(Value::as_f64);
    req.top_p = root.get("top_p").and_then(Value::as_f64);
    req.stream = root.get("stream").and_then(Value::as_bool).unwrap_or(false);

    if let Some(r) = root.get("reasoning").filter(|r| r.is_object()) {
        let effort = get_str(r, "effort").map(str::to_owned);
        let summary = get_str(r, "summary").or_else(|| get_str(r, "generate_summary")).map(str::to_owned);
        // An empty reasoning object configures nothing.
        if effort.is_some() || summary.is_some() {
            req.reasoning = Some(Reasoning { budget_tokens: None, effort, adaptive: false, summary });
        }
    }

    if let Some(text) = root.get("text").filter(|t| t.is_object()) {
        if let Some(format) = text.get("format").filter(|f| f.is_object()) {
            req.output_format = match get_str(format, "type") {
                Some("text") | None => Some(OutputFormat::Text),
                Some("json_object") => Some(OutputFormat::JsonObject),
                Some("json_schema") => Some(OutputFormat::JsonSchema {
                    name: get_str(format, "name").unwrap_or("response").to_owned(),
                    schema: format.get("schema").cloned().unwrap_or_else(|| json!({})),
                    strict: format.get("strict").and_then(Value::as_bool),
                    description: get_str(format, "description").map(str::to_owned),
                }),
                Some(other) => {
                    return Err(ConvertError::new("text.format.type", format!("unsupported text format `{other}`")));
                }
            };
        }
        if is_set(text.get("verbosity")) {
            d.loss("text.verbosity", "dropped: the target format has no verbosity setting");
        }
    }

    req.user = get_str(&root, "safety_identifier").or_else(|| get_str(&root, "user")).map(str::to_owned);

    if let Some(include) = root.get("include").and_then(Value::as_array) {
        for (i, inc) in include.iter().enumerate() {
            match inc.as_str() {
                Some("reasoning.encrypted_content") => req.include_encrypted_reasoning = true,
                Some(other) => {
                    d.loss(format!("include[{i}]"), format!("ignored: `{other}` is only produced by the Responses API"))
                }
                None => {}
            }
        }
    }
    if root.get("store").and_then(Value::as_bool) == Some(true) {
        d.loss("store", "not stored: the target endpoint format keeps no server-side copy of responses");
    }
    if let Some(tier) = get_str(&root, "service_tier").filter(|t| *t != "auto" && *t != "default") {
        d.loss("service_tier", format!("dropped: service tier `{tier}` has no equivalent in the target format"));
    }
    if get_str(&root, "truncation") == Some("auto") {
        d.loss(
            "truncation",
            "dropped: the gateway does not truncate the conversation; an over-long input fails upstream",
        );
    }
    if is_set(root.get("top_logprobs")) {
        d.loss("top_logprobs", "dropped: log probabilities are not converted");
    }
    if is_set(root.get("max_tool_calls")) {
        d.loss("max_tool_calls", "dropped: it limits built-in tool calls, which the target format does not have");
    }
    // Ignored on purpose (no effect on the answer): prompt_cache_key, prompt_cache_retention,
    // client_metadata, metadata, stream_options, store: false, service_tier auto/default,
    // truncation: disabled, parallel tool-call ordering hints.
    req.losses = d.losses;
    Ok(req)
}

// ---------------------------------------------------------------------------------------------
// Requests: IR → Responses (the Responses API as the upstream)
// ---------------------------------------------------------------------------------------------

#[derive(Default)]
struct RequestEncoder {
    losses: Vec<Loss>,
    items: Vec<Value>,
    thinking_dropped: usize,
    reasoning_dropped: usize,
    kept_encrypted_reasoning: bool,
}

impl RequestEncoder {
    fn loss(&mut self, field: impl Into<String>, note: impl Into<String>) {
        self.losses.push(Loss::new(field, note));
    }

    fn flush(&mut self, role: &str, content: &mut Vec<Value>) {
        if content.is_empty() {
            return;
        }
        self.items.push(json!({"type": "message", "role": role, "content": std::mem::take(content)}));
    }

    fn input_part(&mut self, field: String, part: &Part) -> Option<Value> {
        match part {
            Part::Text(t) => Some(json!({"type": "input_text", "text": t.text})),
            Part::Image(img) => Some(json!({"type": "input_image", "image_url": image_url(img), "detail": "auto"})),
            Part::Document { source, title } => Some(match source {
                DocumentSource::Base64 { media_type, data } => json!({
                    "type": "input_file",
                    "filename": title.clone().unwrap_or_else(|| filename_for_media_type(media_type).to_owned()),
                    "file_data": data_url(media_type, data),
                }),
                DocumentSource::Url { url } => json!({"type": "input_file", "file_url": url}),
                DocumentSource::Text { text } => {
                    let text = match title {
                        Some(t) if !t.is_empty() => format!("{t}\n\n{text}"),
                        _ => text.clone(),
                    };
                    json!({"type": "input_text", "text": text})
                }
            }),
            Part::ToolUse { .. } | Part::ToolResult { .. } => {
                self.loss(
                    field,
                    "dropped: a tool call or result in this position has no equivalent in the Responses format",
                );
                None
            }
            Part::Thinking { .. } | Part::RedactedThinking { .. } => {
                self.thinking_dropped += 1;
                None
            }
            Part::ReasoningItem { .. } => {
                self.reasoning_dropped += 1;
                None
            }
        }
    }

    fn user_message(&mut self, mi: usize, msg: &Message) {
        let mut content = Vec::new();
        for (pi, part) in msg.content.iter().enumerate() {
            if let Part::ToolResult { tool_use_id, content: result, is_error } = part {
                self.flush("user", &mut content);
                let output = tool_output_value(result, *is_error);
                self.items.push(json!({"type": "function_call_output", "call_id": tool_use_id, "output": output}));
                continue;
            }
            if let Some(v) = self.input_part(format!("messages[{mi}].content[{pi}]"), part) {
                content.push(v);
            }
        }
        self.flush("user", &mut content);
    }

    fn assistant_message(&mut self, mi: usize, msg: &Message) {
        let mut content = Vec::new();
        for (pi, part) in msg.content.iter().enumerate() {
            let field = format!("messages[{mi}].content[{pi}]");
            match part {
                Part::Text(t) => {
                    if !t.text.is_empty() {
                        content.push(json!({"type": "output_text", "text": t.text}));
                    }
                }
                Part::ToolUse { id, name, input, arguments } => {
                    self.flush("assistant", &mut content);
                    self.items.push(json!({
                        "type": "function_call",
                        "call_id": id,
                        "name": name,
                        "arguments": arguments_string(input, arguments.as_ref()),
                    }));
                }
                Part::Thinking { .. } | Part::RedactedThinking { .. } => self.thinking_dropped += 1,
                Part::ReasoningItem { id, summary, encrypted_content } => match encrypted_content {
                    Some(enc) if !enc.starts_with(THINKING_BLOB) && !enc.starts_with(REDACTED_BLOB) => {
                        self.flush("assistant", &mut content);
                        let summary: Vec<Value> =
                            summary.iter().map(|s| json!({"type": "summary_text", "text": s})).collect();
                        let mut item = json!({"type": "reasoning", "summary": summary, "encrypted_content": enc});
                        if let (Some(id), Some(obj)) = (id, item.as_object_mut()) {
                            obj.insert("id".to_owned(), Value::String(id.clone()));
                        }
                        self.items.push(item);
                        self.kept_encrypted_reasoning = true;
                    }
                    _ => self.reasoning_dropped += 1,
                },
                Part::Image(_) | Part::Document { .. } => {
                    self.loss(field, "dropped: an assistant message in the Responses format carries only text");
                }
                Part::ToolResult { .. } => {
                    self.loss(
                        field,
                        "dropped: a tool result inside an assistant message has no equivalent in the Responses format",
                    );
                }
            }
        }
        self.flush("assistant", &mut content);
    }

    fn system_message(&mut self, mi: usize, msg: &Message) {
        let mut content = Vec::new();
        for (pi, part) in msg.content.iter().enumerate() {
            match part {
                Part::Text(t) => content.push(json!({"type": "input_text", "text": t.text})),
                _ => self.loss(
                    format!("messages[{mi}].content[{pi}]"),
                    "dropped: a system message in the Responses format carries only text",
                ),
            }
        }
        self.flush("system", &mut content);
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

/// Anthropic thinking budget → Responses effort (documented table).
fn effort_for_budget(budget: u64) -> &'static str {
    if budget < 8_192 {
        "low"
    } else if budget < 24_576 {
        "medium"
    } else {
        "high"
    }
}

/// IR → request body for a Responses upstream.
pub fn encode_request(req: &Request) -> Result<Encoded, ConvertError> {
    let mut e = RequestEncoder::default();
    let mut body = Map::new();
    body.insert("model".to_owned(), Value::String(req.model.clone()));

    let instructions: Vec<&str> = req.system.iter().map(|t| t.text.as_str()).filter(|t| !t.is_empty()).collect();
    if !instructions.is_empty() {
        body.insert("instructions".to_owned(), Value::String(instructions.join(INSTRUCTIONS_SEPARATOR)));
    }

    for (mi, msg) in req.messages.iter().enumerate() {
        match msg.role {
            Role::User => e.user_message(mi, msg),
            Role::Assistant => e.assistant_message(mi, msg),
            Role::System => e.system_message(mi, msg),
        }
    }
    if e.thinking_dropped > 0 {
        let n = e.thinking_dropped;
        e.loss(
            "messages[*].content (thinking)",
            format!("removed {n} thinking block(s): signed Anthropic thinking cannot be sent to a Responses endpoint"),
        );
    }
    if e.reasoning_dropped > 0 {
        let n = e.reasoning_dropped;
        e.loss(
            "messages[*].content (reasoning)",
            format!("removed {n} reasoning item(s) without encrypted content: with store=false the endpoint cannot look them up"),
        );
    }
    body.insert("input".to_owned(), Value::Array(std::mem::take(&mut e.items)));

    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                let mut tool = json!({
                    "type": "function",
                    "name": t.name,
                    "parameters": t.input_schema,
                    // The Responses API defaults `strict` to true, which rejects most schemas
                    // written for other APIs: say false unless the source asked for strict.
                    "strict": t.strict.unwrap_or(false),
                });
                if let (Some(d), Some(obj)) = (&t.description, tool.as_object_mut()) {
                    obj.insert("description".to_owned(), Value::String(d.clone()));
                }
                tool
            })
            .collect();
        body.insert("tools".to_owned(), Value::Array(tools));
    }
    if let Some(tc) = &req.tool_choice {
        let v = match tc {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::Any => json!("required"),
            ToolChoice::None => json!("none"),
            ToolChoice::Tool(name) => json!({"type": "function", "name": name}),
        };
        body.insert("tool_choice".to_owned(), v);
    }
    if let Some(p) = req.parallel_tool_calls {
        body.insert("parallel_tool_calls".to_owned(), Value::Bool(p));
    }
    if let Some(max) = req.max_tokens {
        let sent = if max < MIN_MAX_OUTPUT_TOKENS {
            e.loss("max_tokens", format!("raised from {max} to {MIN_MAX_OUTPUT_TOKENS}, the Responses API minimum"));
            MIN_MAX_OUTPUT_TOKENS
        } else {
            max
        };
        body.insert("max_output_tokens".to_owned(), json!(sent));
    }
    if let Some(t) = req.temperature {
        body.insert("temperature".to_owned(), json!(t));
    }
    if let Some(p) = req.top_p {
        body.insert("top_p".to_owned(), json!(p));
    }
    if req.top_k.is_some() {
        e.loss("top_k", "dropped: the Responses API has no top_k");
    }
    if !req.stop.is_empty() {
        e.loss("stop", "dropped: the Responses API has no stop sequences");
    }
    if let Some(r) = &req.reasoning {
        let mut reasoning = Map::new();
        let effort = match r.effort.as_deref() {
            Some(e @ ("none" | "minimal" | "low" | "medium" | "high" | "xhigh")) => Some(e.to_owned()),
            Some("max") => {
                e.loss("reasoning.effort", "effort `max` sent as `xhigh`, the highest Responses effort");
                Some("xhigh".to_owned())
            }
            Some(other) => {
                e.loss("reasoning.effort", format!("dropped: unknown effort `{other}`"));
                None
            }
            None => r.budget_tokens.map(|b| effort_for_budget(b).to_owned()),
        };
        let disabled = effort.as_deref() == Some("none");
        if let Some(effort) = effort {
            reasoning.insert("effort".to_owned(), Value::String(effort));
        }
        if !disabled {
            // Ask for a summary so the client sees the reasoning (as thinking text).
            let summary = r.summary.clone().unwrap_or_else(|| "auto".to_owned());
            reasoning.insert("summary".to_owned(), Value::String(summary));
        }
        body.insert("reasoning".to_owned(), Value::Object(reasoning));
    }
    if let Some(format) = &req.output_format {
        let f = match format {
            OutputFormat::Text => json!({"type": "text"}),
            OutputFormat::JsonObject => json!({"type": "json_object"}),
            OutputFormat::JsonSchema { name, schema, strict, description } => {
                let mut f = json!({"type": "json_schema", "name": name, "schema": schema});
                if let Some(obj) = f.as_object_mut() {
                    if let Some(s) = strict {
                        obj.insert("strict".to_owned(), Value::Bool(*s));
                    }
                    if let Some(d) = description {
                        obj.insert("description".to_owned(), Value::String(d.clone()));
                    }
                }
                f
            }
        };
        body.insert("text".to_owned(), json!({"format": f}));
    }
    if let Some(user) = &req.user {
        let sent = if user.chars().count() > MAX_USER_LEN {
            e.loss("user", format!("longer than {MAX_USER_LEN} characters: sent as a stable digest"));
            format!("u_{}", digest(user))
        } else {
            user.clone()
        };
        body.insert("user".to_owned(), Value::String(sent));
    }
    body.insert("stream".to_owned(), Value::Bool(req.stream));
    // A gateway must not make the upstream store conversations the client never asked it to.
    body.insert("store".to_owned(), Value::Bool(false));
    if req.include_encrypted_reasoning || e.kept_encrypted_reasoning {
        body.insert("include".to_owned(), json!(["reasoning.encrypted_content"]));
    }

    let bytes = serde_json::to_vec(&Value::Object(body))
        .map_err(|err| ConvertError::new("body", format!("cannot serialize the request: {err}")))?;
    Ok(Encoded { body: bytes, losses: e.losses })
}

// ---------------------------------------------------------------------------------------------
// Responses: Responses → IR
// ---------------------------------------------------------------------------------------------

fn decode_usage(u: &Value) -> Usage {
    let details = u.get("input_tokens_details");
    let cached = details.and_then(|d| get_u64(d, "cache_read_tokens").or_else(|| get_u64(d, "cached_tokens")));
    let cache_write = details.and_then(|d| get_u64(d, "cache_write_tokens"));
    let input = get_u64(u, "input_tokens")
        .map(|t| t.saturating_sub(cached.unwrap_or(0)).saturating_sub(cache_write.unwrap_or(0)));
    Usage {
        input,
        output: get_u64(u, "output_tokens"),
        cache_read: cached,
        cache_write,
        reasoning: u.get("output_tokens_details").and_then(|d| get_u64(d, "reasoning_tokens")),
    }
}

/// Stop reason from a response's status.
fn stop_reason(status: Option<&str>, incomplete_reason: Option<&str>, tool_calls: bool, refusal: bool) -> StopReason {
    match status {
        Some("incomplete") => match incomplete_reason {
            Some("content_filter") => StopReason::Refusal,
            _ => StopReason::MaxTokens,
        },
        _ if tool_calls => StopReason::ToolUse,
        _ if refusal => StopReason::Refusal,
        _ => StopReason::EndTurn,
    }
}

fn error_kind_for_code(code: Option<&str>) -> ErrorKind {
    match code.unwrap_or_default() {
        "rate_limit_exceeded" | "insufficient_quota" | "rate_limit_error" | "requests" | "tokens" => {
            ErrorKind::RateLimited
        }
        "server_is_overloaded" | "slow_down" | "overloaded_error" => ErrorKind::Overloaded,
        "invalid_api_key" | "authentication_error" => ErrorKind::Authentication,
        "permission_denied" | "permission_error" => ErrorKind::Permission,
        "model_not_found" | "not_found_error" => ErrorKind::NotFound,
        "context_length_exceeded"
        | "invalid_prompt"
        | "invalid_request_error"
        | "invalid_image"
        | "invalid_image_format"
        | "invalid_base64_image"
        | "invalid_image_url"
        | "image_too_large"
        | "image_too_small"
        | "image_parse_error"
        | "image_content_policy_violation"
        | "invalid_image_mode"
        | "image_file_too_large"
        | "unsupported_image_media_type"
        | "empty_image_file"
        | "failed_to_download_image"
        | "image_file_not_found"
        | "bio_policy" => ErrorKind::InvalidRequest,
        _ => ErrorKind::Api,
    }
}

/// One output item of a complete response, appended to `content`; returns (tool call, refusal).
fn decode_output_item(item: &Value, content: &mut Vec<Part>) -> (bool, bool) {
    let mut tool = false;
    let mut refusal = false;
    match get_str(item, "type") {
        Some("message") => {
            for c in item.get("content").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
                match get_str(c, "type") {
                    Some("output_text" | "text") => {
                        let t = get_str(c, "text").unwrap_or_default();
                        if !t.is_empty() {
                            content.push(Part::Text(text_part(t)));
                        }
                    }
                    Some("refusal") => {
                        refusal = true;
                        let t = get_str(c, "refusal").unwrap_or_default();
                        if !t.is_empty() {
                            content.push(Part::Text(text_part(t)));
                        }
                    }
                    _ => {}
                }
            }
        }
        Some("function_call") => {
            tool = true;
            let name = get_str(item, "name").unwrap_or_default();
            let name = match get_str(item, "namespace").filter(|ns| !ns.is_empty()) {
                Some(ns) => flat_tool_name(ns, name),
                None => name.to_owned(),
            };
            let raw = match item.get("arguments") {
                Some(Value::String(s)) => s.clone(),
                None | Some(Value::Null) => String::new(),
                Some(other) => other.to_string(),
            };
            let id = get_str(item, "call_id").or_else(|| get_str(item, "id")).unwrap_or_default().to_owned();
            content.push(Part::ToolUse { id, name, input: parse_arguments(&raw), arguments: Some(raw) });
        }
        Some("reasoning") => match reasoning_part(item) {
            Part::ReasoningItem { summary, .. } => {
                // Another client can only show the summary, as thinking; the encrypted content
                // is useless outside OpenAI.
                let mut texts: Vec<String> = summary;
                if texts.is_empty() {
                    texts = item
                        .get("content")
                        .and_then(Value::as_array)
                        .map(|c| c.iter().filter_map(|p| get_str(p, "text")).map(str::to_owned).collect())
                        .unwrap_or_default();
                }
                let text = texts.join(SUMMARY_SEPARATOR);
                if !text.is_empty() {
                    content.push(Part::Thinking { text, signature: None });
                }
            }
            other => content.push(other),
        },
        _ => {}
    }
    (tool, refusal)
}

/// Upstream non-streaming response body (Responses) → IR.
pub fn decode_response(body: &[u8]) -> Result<Response, ConvertError> {
    let root: Value = serde_json::from_slice(body)
        .map_err(|e| ConvertError::new("body", format!("the upstream response is not valid JSON: {e}")))?;
    if !root.is_object() {
        return Err(ConvertError::new("body", "the upstream response is not a JSON object"));
    }
    let status = get_str(&root, "status");
    let failed = status == Some("failed") || (status.is_none() && is_set(root.get("error")));
    if failed {
        let err = root.get("error").cloned().unwrap_or(Value::Null);
        let msg = get_str(&err, "message").unwrap_or("the upstream response failed");
        return Err(ConvertError::new("error", format!("upstream response failed: {msg}")));
    }
    match status {
        Some("in_progress" | "queued") => {
            return Err(ConvertError::new("status", "the upstream response is not finished (background mode)"));
        }
        Some("cancelled") => return Err(ConvertError::new("status", "the upstream response was cancelled")),
        _ => {}
    }
    let mut content = Vec::new();
    let mut tool = false;
    let mut refusal = false;
    for item in root.get("output").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
        let (t, r) = decode_output_item(item, &mut content);
        tool |= t;
        refusal |= r;
    }
    let incomplete = root.get("incomplete_details").and_then(|d| get_str(d, "reason"));
    Ok(Response {
        id: get_str(&root, "id").unwrap_or_default().to_owned(),
        model: get_str(&root, "model").unwrap_or_default().to_owned(),
        content,
        stop_reason: Some(stop_reason(status, incomplete, tool, refusal)),
        stop_sequence: None,
        usage: root.get("usage").map(decode_usage).unwrap_or_default(),
        created: root.get("created_at").and_then(Value::as_f64).filter(|f| *f >= 0.0).map(|f| f as u64),
    })
}

// ---------------------------------------------------------------------------------------------
// Responses: IR → Responses (a Responses client)
// ---------------------------------------------------------------------------------------------

fn encode_usage(u: &Usage) -> Value {
    let cached = u.cache_read.unwrap_or(0);
    let cache_write = u.cache_write.unwrap_or(0);
    // OpenAI counts cached (read and written) input inside input_tokens.
    let input = u.input.unwrap_or(0).saturating_add(cached).saturating_add(cache_write);
    let output = u.output.unwrap_or(0);
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": cache_write},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": u.reasoning.unwrap_or(0)},
        "total_tokens": input.saturating_add(output),
    })
}

/// How a response ended: `status`, `incomplete_details`, `error`.
struct Outcome {
    status: &'static str,
    incomplete_details: Value,
    error: Value,
}

impl Outcome {
    fn in_progress() -> Self {
        Self { status: "in_progress", incomplete_details: Value::Null, error: Value::Null }
    }

    fn failed(error: Value) -> Self {
        Self { status: "failed", incomplete_details: Value::Null, error }
    }

    /// Status for a stop reason: `incomplete` for max tokens and refusals.
    fn for_stop(stop: Option<StopReason>) -> Self {
        let (status, incomplete_details) = match stop {
            Some(StopReason::MaxTokens) => ("incomplete", json!({"reason": "max_output_tokens"})),
            Some(StopReason::Refusal) => ("incomplete", json!({"reason": "content_filter"})),
            _ => ("completed", Value::Null),
        };
        Self { status, incomplete_details, error: Value::Null }
    }
}

fn error_code_for(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidRequest => "invalid_request_error",
        ErrorKind::Authentication => "invalid_api_key",
        ErrorKind::Permission => "permission_denied",
        ErrorKind::NotFound => "model_not_found",
        ErrorKind::RequestTooLarge => "context_length_exceeded",
        ErrorKind::RateLimited => "rate_limit_exceeded",
        ErrorKind::Overloaded => "server_is_overloaded",
        ErrorKind::Api | ErrorKind::BadGateway => "server_error",
    }
}

/// The ids this codec invents for a response and its output items.
fn response_id(ctx: &EncodeContext) -> String {
    format!("resp_{}", ctx.id_seed)
}

fn item_id(prefix: &str, ctx: &EncodeContext, output_index: usize) -> String {
    format!("{prefix}_{}_{output_index}", ctx.id_seed)
}

/// (name, namespace) as the client declared the tool.
fn client_tool_name<'a>(ctx: &'a EncodeContext, name: &'a str) -> (&'a str, Option<&'a str>) {
    match ctx.namespaced_tools.iter().find(|(flat, _, _)| flat == name) {
        Some((_, ns, orig)) => (orig.as_str(), Some(ns.as_str())),
        None => (name, None),
    }
}

fn function_call_item(
    ctx: &EncodeContext,
    id: &str,
    status: &str,
    call_id: &str,
    name: &str,
    arguments: &str,
) -> Value {
    let (name, ns) = client_tool_name(ctx, name);
    let mut item = json!({
        "id": id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    });
    if let (Some(ns), Some(obj)) = (ns, item.as_object_mut()) {
        obj.insert("namespace".to_owned(), Value::String(ns.to_owned()));
    }
    item
}

fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

fn message_item(id: &str, status: &str, content: Vec<Value>) -> Value {
    json!({"id": id, "type": "message", "status": status, "role": "assistant", "content": content})
}

fn reasoning_item(id: &str, summary: &[String], encrypted: Option<&str>) -> Value {
    let summary: Vec<Value> = summary.iter().map(|s| json!({"type": "summary_text", "text": s})).collect();
    json!({"id": id, "type": "reasoning", "summary": summary, "encrypted_content": encrypted})
}

/// The encrypted content handed to a Responses client for a thinking block: the Anthropic
/// signature (or redacted data) behind a ccmesh prefix, only when the client asked for it.
fn thinking_blob(ctx: &EncodeContext, signature: Option<&str>) -> Option<String> {
    let sig = signature.filter(|s| !s.is_empty())?;
    ctx.include_encrypted_reasoning.then(|| format!("{THINKING_BLOB}{sig}"))
}

/// The complete `response` object.
fn response_object(
    ctx: &EncodeContext,
    created: u64,
    model: &str,
    outcome: Outcome,
    output: Vec<Value>,
    usage: Option<&Usage>,
) -> Value {
    let Outcome { status, incomplete_details, error } = outcome;
    let model = if model.is_empty() { ctx.request_model.as_str() } else { model };
    json!({
        "id": response_id(ctx),
        "object": "response",
        "created_at": created,
        "status": status,
        "background": false,
        "error": error,
        "incomplete_details": incomplete_details,
        "instructions": null,
        "max_output_tokens": null,
        "max_tool_calls": null,
        "model": model,
        "output": output,
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "reasoning": {"effort": null, "summary": null},
        "service_tier": "default",
        "store": false,
        "temperature": null,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_logprobs": null,
        "top_p": null,
        "truncation": "disabled",
        "usage": usage.map(encode_usage),
        "user": null,
        "metadata": {},
    })
}

/// IR → response body for a Responses client.
pub fn encode_response(resp: &Response, ctx: &EncodeContext) -> Vec<u8> {
    let mut output: Vec<Value> = Vec::new();
    let mut texts: Vec<Value> = Vec::new();
    fn flush_texts(ctx: &EncodeContext, output: &mut Vec<Value>, texts: &mut Vec<Value>) {
        if !texts.is_empty() {
            let id = item_id("msg", ctx, output.len());
            output.push(message_item(&id, "completed", std::mem::take(texts)));
        }
    }
    for part in &resp.content {
        match part {
            Part::Text(t) => texts.push(output_text(&t.text)),
            Part::ToolUse { id, name, input, arguments } => {
                flush_texts(ctx, &mut output, &mut texts);
                let fid = item_id("fc", ctx, output.len());
                let args = arguments_string(input, arguments.as_ref());
                output.push(function_call_item(ctx, &fid, "completed", id, name, &args));
            }
            Part::Thinking { text, signature } => {
                flush_texts(ctx, &mut output, &mut texts);
                let rid = item_id("rs", ctx, output.len());
                let summary: Vec<String> = if text.is_empty() { Vec::new() } else { vec![text.clone()] };
                output.push(reasoning_item(&rid, &summary, thinking_blob(ctx, signature.as_deref()).as_deref()));
            }
            Part::RedactedThinking { data } => {
                if ctx.include_encrypted_reasoning {
                    flush_texts(ctx, &mut output, &mut texts);
                    let rid = item_id("rs", ctx, output.len());
                    output.push(reasoning_item(&rid, &[], Some(&format!("{REDACTED_BLOB}{data}"))));
                }
            }
            Part::ReasoningItem { id, summary, encrypted_content } => {
                flush_texts(ctx, &mut output, &mut texts);
                let rid = id.clone().unwrap_or_else(|| item_id("rs", ctx, output.len()));
                let enc = encrypted_content.as_deref().filter(|_| ctx.include_encrypted_reasoning);
                output.push(reasoning_item(&rid, summary, enc));
            }
            Part::Image(_) | Part::ToolResult { .. } | Part::Document { .. } => {}
        }
    }
    flush_texts(ctx, &mut output, &mut texts);
    let created = resp.created.unwrap_or(ctx.created);
    let obj =
        response_object(ctx, created, &resp.model, Outcome::for_stop(resp.stop_reason), output, Some(&resp.usage));
    serde_json::to_vec(&obj).unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Streams: Responses SSE → IR
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
enum DecItem {
    /// A message item; its content parts, each (content_index, IR block index once opened).
    Message {
        parts: Vec<(u64, Option<usize>, bool)>,
    },
    FunctionCall {
        block: usize,
        args_seen: bool,
        open: bool,
    },
    Reasoning {
        block: Option<usize>,
        last_summary: Option<u64>,
        text_seen: bool,
    },
    Other,
}

/// Incremental Responses SSE → IR events.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    started: bool,
    ended: bool,
    next_block: usize,
    /// (output_index, item id, state), in the order the items were added.
    items: Vec<(u64, Option<String>, DecItem)>,
    tool_calls: bool,
    refusal: bool,
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    fn start(&mut self, response: Option<&Value>, out: &mut Vec<StreamEvent>) {
        if self.started {
            return;
        }
        self.started = true;
        let r = response.cloned().unwrap_or(Value::Null);
        out.push(StreamEvent::Start {
            id: get_str(&r, "id").unwrap_or_default().to_owned(),
            model: get_str(&r, "model").unwrap_or_default().to_owned(),
            usage: r.get("usage").map(decode_usage).unwrap_or_default(),
            created: r.get("created_at").and_then(Value::as_f64).filter(|f| *f >= 0.0).map(|f| f as u64),
        });
    }

    fn open_block(&mut self, block: BlockStart, out: &mut Vec<StreamEvent>) -> usize {
        let index = self.next_block;
        self.next_block += 1;
        out.push(StreamEvent::BlockStart { index, block });
        index
    }

    /// Position in `items` of the item an event refers to (by output_index, else item_id).
    fn find(&self, ev: &Value) -> Option<usize> {
        if let Some(oi) = get_u64(ev, "output_index")
            && let Some(p) = self.items.iter().position(|(o, _, _)| *o == oi)
        {
            return Some(p);
        }
        let id = get_str(ev, "item_id")?;
        self.items.iter().position(|(_, i, _)| i.as_deref() == Some(id))
    }

    /// Like `find`, but registers an item that was never announced (lenient upstreams).
    fn find_or_add(&mut self, ev: &Value, make: fn() -> DecItem) -> usize {
        if let Some(p) = self.find(ev) {
            return p;
        }
        let oi = get_u64(ev, "output_index").unwrap_or(self.items.len() as u64);
        self.items.push((oi, get_str(ev, "item_id").map(str::to_owned), make()));
        self.items.len() - 1
    }

    fn item_added(&mut self, ev: &Value, out: &mut Vec<StreamEvent>) {
        let Some(item) = ev.get("item") else { return };
        let oi = get_u64(ev, "output_index").unwrap_or(self.items.len() as u64);
        let id = get_str(item, "id").map(str::to_owned);
        let state = match get_str(item, "type") {
            Some("message") => DecItem::Message { parts: Vec::new() },
            Some("function_call") => {
                self.tool_calls = true;
                let name = get_str(item, "name").unwrap_or_default();
                let name = match get_str(item, "namespace").filter(|ns| !ns.is_empty()) {
                    Some(ns) => flat_tool_name(ns, name),
                    None => name.to_owned(),
                };
                let call_id = get_str(item, "call_id").or(id.as_deref()).unwrap_or_default().to_owned();
                let block = self.open_block(BlockStart::ToolUse { id: call_id, name }, out);
                let args = get_str(item, "arguments").unwrap_or_default();
                if !args.is_empty() {
                    out.push(StreamEvent::ToolArgsDelta { index: block, partial_json: args.to_owned() });
                }
                DecItem::FunctionCall { block, args_seen: !args.is_empty(), open: true }
            }
            Some("reasoning") => DecItem::Reasoning { block: None, last_summary: None, text_seen: false },
            _ => DecItem::Other,
        };
        self.items.push((oi, id, state));
    }

    /// A piece of message text for (item, content_index).
    fn text(&mut self, pos: usize, ci: u64, text: &str, out: &mut Vec<StreamEvent>) {
        if text.is_empty() {
            return;
        }
        let next = self.next_block;
        let mut opened = None;
        let mut index = None;
        if let Some((_, _, DecItem::Message { parts })) = self.items.get_mut(pos) {
            match parts.iter_mut().find(|(c, _, _)| *c == ci) {
                Some((_, Some(b), open)) if *open => index = Some(*b),
                Some((_, b @ None, open)) => {
                    *b = Some(next);
                    *open = true;
                    opened = Some(next);
                }
                Some(_) => {}
                None => {
                    parts.push((ci, Some(next), true));
                    opened = Some(next);
                }
            }
        }
        if let Some(b) = opened {
            self.next_block += 1;
            out.push(StreamEvent::BlockStart { index: b, block: BlockStart::Text });
            index = Some(b);
        }
        if let Some(index) = index {
            out.push(StreamEvent::TextDelta { index, text: text.to_owned() });
        }
    }

    /// Whether (item, content_index) already has text.
    fn part_has_text(&self, pos: usize, ci: u64) -> bool {
        matches!(self.items.get(pos), Some((_, _, DecItem::Message { parts }))
            if parts.iter().any(|(c, b, _)| *c == ci && b.is_some()))
    }

    fn close_part(&mut self, pos: usize, ci: u64, out: &mut Vec<StreamEvent>) {
        if let Some((_, _, DecItem::Message { parts })) = self.items.get_mut(pos)
            && let Some((_, Some(b), open)) = parts.iter_mut().find(|(c, _, _)| *c == ci)
            && *open
        {
            *open = false;
            out.push(StreamEvent::BlockStop { index: *b });
        }
    }

    fn thinking(&mut self, pos: usize, si: u64, text: &str, out: &mut Vec<StreamEvent>) {
        if text.is_empty() {
            return;
        }
        let next = self.next_block;
        let mut open_new = false;
        let mut emit = Vec::new();
        if let Some((_, _, DecItem::Reasoning { block, last_summary, text_seen })) = self.items.get_mut(pos) {
            let index = match block {
                Some(b) => *b,
                None => {
                    *block = Some(next);
                    open_new = true;
                    next
                }
            };
            if *text_seen && *last_summary != Some(si) {
                emit.push(SUMMARY_SEPARATOR.to_owned());
            }
            *last_summary = Some(si);
            *text_seen = true;
            emit.push(text.to_owned());
            if open_new {
                self.next_block += 1;
                out.push(StreamEvent::BlockStart { index, block: BlockStart::Thinking });
            }
            for t in emit {
                out.push(StreamEvent::ThinkingDelta { index, text: t });
            }
        }
    }

    /// Whether a reasoning item already showed text for summary `si`.
    fn summary_has_text(&self, pos: usize, si: u64) -> bool {
        matches!(self.items.get(pos), Some((_, _, DecItem::Reasoning { last_summary, text_seen, .. }))
            if *text_seen && *last_summary >= Some(si))
    }

    fn item_done(&mut self, pos: usize, item: Option<&Value>, out: &mut Vec<StreamEvent>) {
        let Some((_, _, state)) = self.items.get(pos) else { return };
        match state {
            DecItem::Message { .. } => {
                // Content that never streamed (no deltas) comes from the finished item.
                if let Some(content) = item.and_then(|i| i.get("content")).and_then(Value::as_array) {
                    for (ci, c) in content.iter().enumerate() {
                        let ci = ci as u64;
                        if self.part_has_text(pos, ci) {
                            continue;
                        }
                        let text = match get_str(c, "type") {
                            Some("refusal") => {
                                self.refusal = true;
                                get_str(c, "refusal")
                            }
                            _ => get_str(c, "text"),
                        };
                        self.text(pos, ci, text.unwrap_or_default(), out);
                    }
                }
                let cis: Vec<u64> = match self.items.get(pos) {
                    Some((_, _, DecItem::Message { parts })) => parts.iter().map(|(c, _, _)| *c).collect(),
                    _ => Vec::new(),
                };
                for ci in cis {
                    self.close_part(pos, ci, out);
                }
            }
            DecItem::FunctionCall { block, args_seen, open } => {
                let (block, args_seen, open) = (*block, *args_seen, *open);
                if !open {
                    return;
                }
                if !args_seen {
                    let args = item.and_then(|i| get_str(i, "arguments")).unwrap_or_default();
                    if !args.is_empty() {
                        out.push(StreamEvent::ToolArgsDelta { index: block, partial_json: args.to_owned() });
                    }
                }
                out.push(StreamEvent::BlockStop { index: block });
                if let Some((_, _, DecItem::FunctionCall { open, args_seen, .. })) = self.items.get_mut(pos) {
                    *open = false;
                    *args_seen = true;
                }
            }
            DecItem::Reasoning { text_seen, .. } => {
                if !*text_seen
                    && let Some(item) = item
                    && let Part::ReasoningItem { summary, .. } = reasoning_part(item)
                {
                    for (si, s) in summary.iter().enumerate() {
                        self.thinking(pos, si as u64, s, out);
                    }
                }
                if let Some((_, _, DecItem::Reasoning { block, .. })) = self.items.get_mut(pos)
                    && let Some(b) = block.take()
                {
                    out.push(StreamEvent::BlockStop { index: b });
                }
            }
            DecItem::Other => {}
        }
    }

    fn close_all(&mut self, out: &mut Vec<StreamEvent>) {
        for pos in 0..self.items.len() {
            self.item_done(pos, None, out);
        }
    }

    /// One upstream SSE event in, zero or more IR events out.
    pub fn decode(&mut self, event: &SseEvent<'_>, out: &mut Vec<StreamEvent>) {
        if self.ended {
            return;
        }
        let Ok(ev) = serde_json::from_str::<Value>(event.data) else {
            return;
        };
        let ty = get_str(&ev, "type").or(event.event).unwrap_or_default().to_owned();
        if ty == "error" {
            let err = ev.get("error").filter(|e| e.is_object()).unwrap_or(&ev);
            let code = get_str(err, "code").or_else(|| get_str(err, "type"));
            let message = get_str(err, "message").unwrap_or("the upstream reported an error").to_owned();
            out.push(StreamEvent::Error { kind: error_kind_for_code(code), message });
            self.ended = true;
            return;
        }
        self.start(ev.get("response"), out);
        match ty.as_str() {
            "response.output_item.added" => self.item_added(&ev, out),
            "response.content_part.added"
                // Opened lazily with the first text, so that empty parts make no empty blocks.
                if get_str(ev.get("part").unwrap_or(&Value::Null), "type") == Some("refusal") => {
                    self.refusal = true;
                }
            "response.output_text.delta" | "response.refusal.delta" => {
                if ty == "response.refusal.delta" {
                    self.refusal = true;
                }
                let pos = self.find_or_add(&ev, || DecItem::Message { parts: Vec::new() });
                let ci = get_u64(&ev, "content_index").unwrap_or(0);
                let delta = get_str(&ev, "delta").unwrap_or_default().to_owned();
                self.text(pos, ci, &delta, out);
            }
            "response.output_text.done" | "response.refusal.done" => {
                let pos = self.find_or_add(&ev, || DecItem::Message { parts: Vec::new() });
                let ci = get_u64(&ev, "content_index").unwrap_or(0);
                if !self.part_has_text(pos, ci) {
                    let text = get_str(&ev, "text").or_else(|| get_str(&ev, "refusal")).unwrap_or_default().to_owned();
                    self.text(pos, ci, &text, out);
                }
            }
            "response.content_part.done" => {
                if let Some(pos) = self.find(&ev) {
                    let ci = get_u64(&ev, "content_index").unwrap_or(0);
                    if !self.part_has_text(pos, ci) {
                        let part = ev.get("part").cloned().unwrap_or(Value::Null);
                        let text = get_str(&part, "text").or_else(|| get_str(&part, "refusal")).unwrap_or_default().to_owned();
                        self.text(pos, ci, &text, out);
                    }
                    self.close_part(pos, ci, out);
                }
            }
            "response.function_call_arguments.delta" => {
                if let Some(pos) = self.find(&ev)
                    && let Some((_, _, DecItem::FunctionCall { block, args_seen, open: true })) = self.items.get_mut(pos) {
                        let delta = get_str(&ev, "delta").unwrap_or_default();
                        if !delta.is_empty() {
                            *args_seen = true;
                            out.push(StreamEvent::ToolArgsDelta { index: *block, partial_json: delta.to_owned() });
                        }
                    }
            }
            "response.function_call_arguments.done" => {
                if let Some(pos) = self.find(&ev)
                    && let Some((_, _, DecItem::FunctionCall { block, args_seen, open: true })) = self.items.get_mut(pos) {
                        let args = get_str(&ev, "arguments").unwrap_or_default();
                        if !*args_seen && !args.is_empty() {
                            *args_seen = true;
                            out.push(StreamEvent::ToolArgsDelta { index: *block, partial_json: args.to_owned() });
                        }
                    }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let pos = self.find_or_add(&ev, || DecItem::Reasoning { block: None, last_summary: None, text_seen: false });
                let si = get_u64(&ev, "summary_index").or_else(|| get_u64(&ev, "content_index")).unwrap_or(0);
                let delta = get_str(&ev, "delta").unwrap_or_default().to_owned();
                self.thinking(pos, si, &delta, out);
            }
            "response.reasoning_summary_text.done" | "response.reasoning_text.done" => {
                if let Some(pos) = self.find(&ev) {
                    let si = get_u64(&ev, "summary_index").or_else(|| get_u64(&ev, "content_index")).unwrap_or(0);
                    if !self.summary_has_text(pos, si) {
                        let text = get_str(&ev, "text").unwrap_or_default().to_owned();
                        self.thinking(pos, si, &text, out);
                    }
                }
            }
            "response.output_item.done" => {
                let pos = match self.find(&ev) {
                    Some(p) => Some(p),
                    None => {
                        // A finished item that was never announced.
                        self.item_added(&ev, out);
                        self.items.len().checked_sub(1)
                    }
                };
                if let Some(pos) = pos {
                    if let Some((_, _, DecItem::FunctionCall { .. })) = self.items.get(pos) {
                        self.tool_calls = true;
                    }
                    self.item_done(pos, ev.get("item"), out);
                }
            }
            "response.completed" | "response.incomplete" => {
                self.close_all(out);
                let r = ev.get("response").cloned().unwrap_or(Value::Null);
                let status = get_str(&r, "status")
                    .or(if ty == "response.incomplete" { Some("incomplete") } else { Some("completed") });
                let reason = r.get("incomplete_details").and_then(|d| get_str(d, "reason"));
                out.push(StreamEvent::Finish {
                    stop_reason: Some(stop_reason(status, reason, self.tool_calls, self.refusal)),
                    stop_sequence: None,
                    usage: r.get("usage").map(decode_usage).unwrap_or_default(),
                });
                out.push(StreamEvent::End);
                self.ended = true;
            }
            "response.failed" => {
                let err = ev.get("response").and_then(|r| r.get("error")).cloned().unwrap_or(Value::Null);
                let code = get_str(&err, "code").or_else(|| get_str(&err, "type"));
                let message = get_str(&err, "message").unwrap_or("the upstream response failed").to_owned();
                out.push(StreamEvent::Error { kind: error_kind_for_code(code), message });
                self.ended = true;
            }
            _ => {}
        }
    }

    /// EOF. A Responses stream is complete only with its terminal event, which already produced
    /// `End`: nothing is invented here.
    pub fn finish(&mut self, _out: &mut Vec<StreamEvent>) {}
}

// ---------------------------------------------------------------------------------------------
// Streams: IR → Responses SSE (a Responses client)
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
enum EncBlock {
    /// A text block: a content part of the current message item.
    Text {
        content_index: usize,
        text: String,
    },
    Reasoning {
        output_index: usize,
        id: String,
        text: String,
        part_open: bool,
        signature: Option<String>,
        encrypted: Option<String>,
    },
    Tool {
        output_index: usize,
        id: String,
        call_id: String,
        name: String,
        args: String,
    },
    /// Not shown to the client (redacted thinking without include).
    Hidden,
}

/// The message item that text blocks write into; kept open across consecutive text blocks.
#[derive(Debug)]
struct OpenMessage {
    output_index: usize,
    id: String,
    parts: Vec<String>,
}

/// Incremental IR events → Responses SSE bytes.
#[derive(Debug)]
pub struct StreamEncoder {
    ctx: EncodeContext,
    seq: u64,
    started: bool,
    done: bool,
    model: String,
    created: u64,
    usage: Usage,
    stop_reason: Option<StopReason>,
    /// Finished output items by output_index (None while still open).
    output: Vec<Option<Value>>,
    message: Option<OpenMessage>,
    blocks: Vec<(usize, EncBlock)>,
    /// Text blocks closed early because another kind of block started while they were open;
    /// a later delta reopens them in a new message item.
    interrupted_text: Vec<usize>,
}

impl StreamEncoder {
    pub fn new(ctx: EncodeContext) -> Self {
        let created = ctx.created;
        Self {
            ctx,
            seq: 0,
            started: false,
            done: false,
            model: String::new(),
            created,
            usage: Usage::default(),
            stop_reason: None,
            output: Vec::new(),
            message: None,
            blocks: Vec::new(),
            interrupted_text: Vec::new(),
        }
    }

    fn emit(&mut self, out: &mut Vec<u8>, ty: &str, mut data: Value) {
        if let Some(obj) = data.as_object_mut() {
            obj.insert("type".to_owned(), Value::String(ty.to_owned()));
            obj.insert("sequence_number".to_owned(), json!(self.seq));
        }
        self.seq += 1;
        write_event(out, Some(ty), &data);
    }

    fn response(&self, outcome: Outcome, usage: Option<&Usage>) -> Value {
        let output: Vec<Value> = self.output.iter().flatten().cloned().collect();
        response_object(&self.ctx, self.created, &self.model, outcome, output, usage)
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        let r = self.response(Outcome::in_progress(), None);
        self.emit(out, "response.created", json!({"response": r}));
        self.emit(out, "response.in_progress", json!({"response": r}));
    }

    fn new_output_index(&mut self) -> usize {
        self.output.push(None);
        self.output.len() - 1
    }

    fn close_message(&mut self, out: &mut Vec<u8>) {
        if self.message.is_none() {
            return;
        }
        // Text blocks still open (a decoder that interleaves) are finished first.
        let open: Vec<usize> =
            self.blocks.iter().filter(|(_, b)| matches!(b, EncBlock::Text { .. })).map(|(i, _)| *i).collect();
        for index in open {
            self.block_stop(index, out);
            self.interrupted_text.push(index);
        }
        let Some(m) = self.message.take() else { return };
        let content: Vec<Value> = m.parts.iter().map(|t| output_text(t)).collect();
        let item = message_item(&m.id, "completed", content);
        self.emit(out, "response.output_item.done", json!({"output_index": m.output_index, "item": item}));
        if let Some(slot) = self.output.get_mut(m.output_index) {
            *slot = Some(item);
        }
    }

    fn block_start(&mut self, index: usize, block: &BlockStart, out: &mut Vec<u8>) {
        // A block index reused without a stop: finish the old block first.
        self.block_stop(index, out);
        if !matches!(block, BlockStart::Text) {
            self.close_message(out);
        }
        let state = match block {
            BlockStart::Text => {
                if self.message.is_none() {
                    let oi = self.new_output_index();
                    let id = item_id("msg", &self.ctx, oi);
                    let item = message_item(&id, "in_progress", Vec::new());
                    self.emit(out, "response.output_item.added", json!({"output_index": oi, "item": item}));
                    self.message = Some(OpenMessage { output_index: oi, id, parts: Vec::new() });
                }
                let (oi, id, ci) = match self.message.as_mut() {
                    Some(m) => {
                        m.parts.push(String::new());
                        (m.output_index, m.id.clone(), m.parts.len() - 1)
                    }
                    None => return,
                };
                self.emit(
                    out,
                    "response.content_part.added",
                    json!({"item_id": id, "output_index": oi, "content_index": ci, "part": output_text("")}),
                );
                EncBlock::Text { content_index: ci, text: String::new() }
            }
            BlockStart::Thinking | BlockStart::ReasoningItem { .. } => {
                let oi = self.new_output_index();
                let (id, encrypted) = match block {
                    BlockStart::ReasoningItem { id, encrypted_content } => (
                        id.clone().unwrap_or_else(|| item_id("rs", &self.ctx, oi)),
                        encrypted_content.clone().filter(|_| self.ctx.include_encrypted_reasoning),
                    ),
                    _ => (item_id("rs", &self.ctx, oi), None),
                };
                let item = reasoning_item(&id, &[], None);
                self.emit(out, "response.output_item.added", json!({"output_index": oi, "item": item}));
                EncBlock::Reasoning {
                    output_index: oi,
                    id,
                    text: String::new(),
                    part_open: false,
                    signature: None,
                    encrypted,
                }
            }
            BlockStart::RedactedThinking { data } => {
                if self.ctx.include_encrypted_reasoning {
                    let oi = self.new_output_index();
                    let id = item_id("rs", &self.ctx, oi);
                    let item = reasoning_item(&id, &[], None);
                    self.emit(out, "response.output_item.added", json!({"output_index": oi, "item": item}));
                    EncBlock::Reasoning {
                        output_index: oi,
                        id,
                        text: String::new(),
                        part_open: false,
                        signature: None,
                        encrypted: Some(format!("{REDACTED_BLOB}{data}")),
                    }
                } else {
                    EncBlock::Hidden
                }
            }
            BlockStart::ToolUse { id, name } => {
                let oi = self.new_output_index();
                let fid = item_id("fc", &self.ctx, oi);
                let item = function_call_item(&self.ctx, &fid, "in_progress", id, name, "");
                self.emit(out, "response.output_item.added", json!({"output_index": oi, "item": item}));
                EncBlock::Tool {
                    output_index: oi,
                    id: fid,
                    call_id: id.clone(),
                    name: name.clone(),
                    args: String::new(),
                }
            }
        };
        self.blocks.push((index, state));
    }

    fn block_mut(&mut self, index: usize) -> Option<&mut EncBlock> {
        self.blocks.iter_mut().find(|(i, _)| *i == index).map(|(_, b)| b)
    }

    fn text_delta(&mut self, index: usize, delta: &str, out: &mut Vec<u8>) {
        if delta.is_empty() {
            return;
        }
        if let Some(p) = self.interrupted_text.iter().position(|i| *i == index) {
            self.interrupted_text.swap_remove(p);
            self.block_start(index, &BlockStart::Text, out);
        }
        let Some((oi, id)) = self.message.as_ref().map(|m| (m.output_index, m.id.clone())) else { return };
        let ci = match self.block_mut(index) {
            Some(EncBlock::Text { content_index, text }) => {
                text.push_str(delta);
                *content_index
            }
            _ => return,
        };
        if let Some(part) = self.message.as_mut().and_then(|m| m.parts.get_mut(ci)) {
            part.push_str(delta);
        }
        self.emit(
            out,
            "response.output_text.delta",
            json!({"item_id": id, "output_index": oi, "content_index": ci, "delta": delta, "logprobs": []}),
        );
    }

    fn thinking_delta(&mut self, index: usize, delta: &str, out: &mut Vec<u8>) {
        if delta.is_empty() {
            return;
        }
        let (oi, id, first) = match self.block_mut(index) {
            Some(EncBlock::Reasoning { output_index, id, text, part_open, .. }) => {
                let first = !*part_open;
                *part_open = true;
                text.push_str(delta);
                (*output_index, id.clone(), first)
            }
            _ => return,
        };
        if first {
            self.emit(
                out,
                "response.reasoning_summary_part.added",
                json!({"item_id": id, "output_index": oi, "summary_index": 0, "part": {"type": "summary_text", "text": ""}}),
            );
        }
        self.emit(
            out,
            "response.reasoning_summary_text.delta",
            json!({"item_id": id, "output_index": oi, "summary_index": 0, "delta": delta}),
        );
    }

    fn args_delta(&mut self, index: usize, delta: &str, out: &mut Vec<u8>) {
        if delta.is_empty() {
            return;
        }
        let (oi, id) = match self.block_mut(index) {
            Some(EncBlock::Tool { output_index, id, args, .. }) => {
                args.push_str(delta);
                (*output_index, id.clone())
            }
            _ => return,
        };
        self.emit(
            out,
            "response.function_call_arguments.delta",
            json!({"item_id": id, "output_index": oi, "delta": delta}),
        );
    }

    fn block_stop(&mut self, index: usize, out: &mut Vec<u8>) {
        self.interrupted_text.retain(|i| *i != index);
        let Some(pos) = self.blocks.iter().position(|(i, _)| *i == index) else { return };
        let (_, block) = self.blocks.remove(pos);
        match block {
            EncBlock::Text { content_index, text } => {
                let Some((oi, id)) = self.message.as_ref().map(|m| (m.output_index, m.id.clone())) else { return };
                self.emit(
                    out,
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": oi, "content_index": content_index, "text": text, "logprobs": []}),
                );
                self.emit(
                    out,
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": oi, "content_index": content_index, "part": output_text(&text)}),
                );
                // The message item stays open for a following text block.
            }
            EncBlock::Reasoning { output_index, id, text, part_open, signature, encrypted } => {
                if part_open {
                    self.emit(
                        out,
                        "response.reasoning_summary_text.done",
                        json!({"item_id": id, "output_index": output_index, "summary_index": 0, "text": text}),
                    );
                    self.emit(
                        out,
                        "response.reasoning_summary_part.done",
                        json!({"item_id": id, "output_index": output_index, "summary_index": 0, "part": {"type": "summary_text", "text": text}}),
                    );
                }
                let encrypted = encrypted.or_else(|| thinking_blob(&self.ctx, signature.as_deref()));
                let summary: Vec<String> = if text.is_empty() { Vec::new() } else { vec![text] };
                let item = reasoning_item(&id, &summary, encrypted.as_deref());
                self.emit(out, "response.output_item.done", json!({"output_index": output_index, "item": item}));
                if let Some(slot) = self.output.get_mut(output_index) {
                    *slot = Some(item);
                }
            }
            EncBlock::Tool { output_index, id, call_id, name, mut args } => {
                if args.is_empty() {
                    // A call without arguments still needs valid JSON arguments.
                    args = "{}".to_owned();
                    self.emit(
                        out,
                        "response.function_call_arguments.delta",
                        json!({"item_id": id, "output_index": output_index, "delta": args}),
                    );
                }
                self.emit(
                    out,
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": output_index, "arguments": args}),
                );
                let item = function_call_item(&self.ctx, &id, "completed", &call_id, &name, &args);
                self.emit(out, "response.output_item.done", json!({"output_index": output_index, "item": item}));
                if let Some(slot) = self.output.get_mut(output_index) {
                    *slot = Some(item);
                }
            }
            EncBlock::Hidden => {}
        }
    }

    fn close_all(&mut self, out: &mut Vec<u8>) {
        let open: Vec<usize> = self.blocks.iter().map(|(i, _)| *i).collect();
        for index in open {
            self.block_stop(index, out);
        }
        self.close_message(out);
    }

    /// IR event in, Responses SSE bytes out.
    pub fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        if let StreamEvent::Start { model, usage, created, .. } = event {
            if !self.started {
                self.model = model.clone();
                if let Some(c) = created {
                    self.created = *c;
                }
                self.usage.merge(usage);
            }
            self.start(out);
            return;
        }
        self.start(out);
        match event {
            StreamEvent::Start { .. } => {}
            StreamEvent::BlockStart { index, block } => self.block_start(*index, block, out),
            StreamEvent::TextDelta { index, text } => self.text_delta(*index, text, out),
            StreamEvent::ThinkingDelta { index, text } => self.thinking_delta(*index, text, out),
            StreamEvent::SignatureDelta { index, signature } => {
                if let Some(EncBlock::Reasoning { signature: s, .. }) = self.block_mut(*index) {
                    s.get_or_insert_with(String::new).push_str(signature);
                }
            }
            StreamEvent::ToolArgsDelta { index, partial_json } => self.args_delta(*index, partial_json, out),
            StreamEvent::BlockStop { index } => self.block_stop(*index, out),
            StreamEvent::Finish { stop_reason, usage, .. } => {
                if stop_reason.is_some() {
                    self.stop_reason = *stop_reason;
                }
                self.usage.merge(usage);
            }
            StreamEvent::End => {
                self.close_all(out);
                let outcome = Outcome::for_stop(self.stop_reason);
                let ty = if outcome.status == "incomplete" { "response.incomplete" } else { "response.completed" };
                let usage = self.usage;
                let r = self.response(outcome, Some(&usage));
                self.emit(out, ty, json!({"response": r}));
                self.done = true;
            }
            StreamEvent::Error { kind, message } => {
                let error = json!({"code": kind.failed_response_code(), "message": message});
                let usage = self.usage;
                let r = self.response(Outcome::failed(error), Some(&usage));
                response_failed_event(out, self.seq, r);
                self.seq += 1;
                self.done = true;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

fn kind_for_status(status: u16) -> ErrorKind {
    match status {
        400 | 422 => ErrorKind::InvalidRequest,
        401 => ErrorKind::Authentication,
        403 => ErrorKind::Permission,
        404 => ErrorKind::NotFound,
        413 => ErrorKind::RequestTooLarge,
        429 => ErrorKind::RateLimited,
        503 | 529 => ErrorKind::Overloaded,
        _ if (400..500).contains(&status) => ErrorKind::InvalidRequest,
        _ => ErrorKind::Api,
    }
}

/// Upstream error body (any status) → IR. Never fails.
pub fn decode_error(status: u16, body: &[u8]) -> ErrorBody {
    let kind = kind_for_status(status);
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let err = parsed.as_ref().and_then(|v| v.get("error")).filter(|e| e.is_object());
    if let Some(err) = err {
        let code = match err.get("code") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => get_str(err, "type").map(str::to_owned),
        };
        let message =
            get_str(err, "message").map(str::to_owned).unwrap_or_else(|| format!("upstream returned HTTP {status}"));
        return ErrorBody { kind, message, code, param: get_str(err, "param").map(str::to_owned) };
    }
    // Some upstreams answer `{"error": "text"}` or `{"message": "..."}`.
    let message = parsed
        .as_ref()
        .and_then(|v| get_str(v, "error").or_else(|| get_str(v, "message")).map(str::to_owned))
        .unwrap_or_else(|| {
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            if text.is_empty() {
                format!("upstream returned HTTP {status}")
            } else {
                truncate_marked(text, MAX_ERROR_TEXT)
            }
        });
    ErrorBody { kind, message, code: None, param: None }
}

/// IR error → `{"error":{"message","type","param","code"}}`.
pub fn encode_error(err: &ErrorBody) -> Vec<u8> {
    let code = err.code.as_deref().unwrap_or_else(|| error_code_for(err.kind));
    let body = OpenAiError::new(&err.message, err.kind.openai_type(), err.param.as_deref(), Some(code));
    // Through a `Value`, like every document this codec writes (keys sorted).
    serde_json::to_vec(&to_value(&body)).unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::protocol::sse::SseScanner;
    use proptest::prelude::*;

    const CODEX_TURN1: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/clients/codex_0.171.0_responses_turn1.json"
    ));
    const CODEX_TURN2: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/clients/codex_0.171.0_responses_turn2_function_call_output.json"
    ));

    fn fixture_body(fixture: &str) -> Vec<u8> {
        let v: Value = serde_json::from_str(fixture).unwrap();
        serde_json::to_vec(&v["body"]).unwrap()
    }

    fn dec(v: Value) -> Result<Request, ConvertError> {
        decode_request(&serde_json::to_vec(&v).unwrap())
    }

    fn enc(req: &Request) -> (Value, Vec<Loss>) {
        let e = encode_request(req).unwrap();
        (serde_json::from_slice(&e.body).unwrap(), e.losses)
    }

    fn ctx() -> EncodeContext {
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
        }
    }

    fn text(s: &str) -> Part {
        Part::Text(text_part(s))
    }

    fn tool_use(id: &str, name: &str, args: &str) -> Part {
        Part::ToolUse { id: id.into(), name: name.into(), input: parse_arguments(args), arguments: Some(args.into()) }
    }

    fn user(parts: Vec<Part>) -> Message {
        Message { role: Role::User, content: parts }
    }

    fn assistant(parts: Vec<Part>) -> Message {
        Message { role: Role::Assistant, content: parts }
    }

    /// SSE bytes → (event name, data JSON) pairs.
    fn parse_sse(bytes: &[u8]) -> Vec<(Option<String>, Value)> {
        let mut s = SseScanner::new();
        let mut out = Vec::new();
        s.feed(bytes, |e| out.push((e.event.map(str::to_owned), serde_json::from_str(e.data).unwrap())));
        assert_eq!(s.pending_bytes(), 0, "incomplete SSE event");
        out
    }

    /// Feeds a transcript through the scanner and the decoder in the given chunks.
    fn decode_stream_chunks(chunks: &[&[u8]]) -> Vec<StreamEvent> {
        let mut scanner = SseScanner::new();
        let mut dec = StreamDecoder::new();
        let mut out = Vec::new();
        for c in chunks {
            scanner.feed(c, |e| dec.decode(&e, &mut out));
        }
        dec.finish(&mut out);
        out
    }

    fn decode_stream(t: &str) -> Vec<StreamEvent> {
        decode_stream_chunks(&[t.as_bytes()])
    }

    fn encode_stream(events: &[StreamEvent], ctx: EncodeContext) -> Vec<u8> {
        let mut enc = StreamEncoder::new(ctx);
        let mut out = Vec::new();
        for e in events {
            enc.encode(e, &mut out);
        }
        out
    }

    // -----------------------------------------------------------------------------------------
    // Stream validator: what the official SDKs' accumulators check (openai-python
    // `ResponseStreamState`, the AI SDK chunk schema, Codex's `process_sse`).
    // -----------------------------------------------------------------------------------------

    #[derive(Debug, Default)]
    struct VItem {
        ty: String,
        id: String,
        parts: Vec<(String, bool)>,
        summary: Vec<(String, bool)>,
        args: String,
        done: Option<Value>,
    }

    /// Checks a Responses SSE transcript produced by the encoder; returns the terminal event.
    fn validate_stream(bytes: &[u8]) -> Value {
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

    // -----------------------------------------------------------------------------------------
    // decode_request
    // -----------------------------------------------------------------------------------------

    #[test]
    fn codex_turn1_decodes() {
        let req = decode_request(&fixture_body(CODEX_TURN1)).unwrap();
        assert_eq!(req.model, "gpt-5");
        assert!(req.stream);
        assert!(req.include_encrypted_reasoning);
        assert_eq!(req.system.len(), 3, "two developer messages, three text parts");
        assert_eq!(req.messages.len(), 1);
        assert_eq!(req.messages[0].role, Role::User);
        let spawn = req.tools.iter().find(|t| t.name == "multi_agent_v1__spawn_agent").unwrap();
        assert_eq!(spawn.namespace, Some(("multi_agent_v1".into(), "spawn_agent".into())));
        assert!(req.tools.iter().all(|t| t.name != "web_search"));
        assert!(req.losses.iter().any(|l| l.field.contains("web_search")));
        assert_eq!(req.tool_choice, Some(ToolChoice::Auto));
        assert_eq!(req.parallel_tool_calls, Some(true));
        assert_eq!(req.reasoning.as_ref().unwrap().summary.as_deref(), Some("auto"));
        insta::assert_snapshot!("codex_turn1_ir", format!("{req:#?}"));
    }

    #[test]
    fn codex_turn2_decodes() {
        let req = decode_request(&fixture_body(CODEX_TURN2)).unwrap();
        assert_eq!(req.messages.len(), 3);
        let a = &req.messages[1];
        assert_eq!(a.role, Role::Assistant);
        assert!(
            matches!(&a.content[0], Part::ReasoningItem { encrypted_content: Some(e), .. } if e.starts_with("gAAAA"))
        );
        assert!(matches!(&a.content[1], Part::Text(t) if t.text == "Calling exec_command."));
        match &a.content[2] {
            Part::ToolUse { id, name, input, arguments } => {
                assert_eq!(id, "call_mocke38f0fe3a88f47629c688fce");
                assert_eq!(name, "exec_command");
                assert_eq!(input["cmd"], "echo hello-from-tool");
                assert_eq!(arguments.as_deref(), Some("{\"cmd\": \"echo hello-from-tool\"}"));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(&req.messages[2].content[0],
            Part::ToolResult { tool_use_id, is_error: false, .. } if tool_use_id == "call_mocke38f0fe3a88f47629c688fce"));
        insta::assert_snapshot!("codex_turn2_ir", format!("{req:#?}"));
    }

    #[test]
    fn codex_turns_reencode_for_a_responses_upstream() {
        // Responses → IR → Responses is never used by the gateway (pass-through), but it shows
        // that the encoder accepts everything the decoder produces.
        let req = decode_request(&fixture_body(CODEX_TURN2)).unwrap();
        let (body, losses) = enc(&req);
        assert_eq!(body["store"], false);
        assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(body["input"][1]["type"], "reasoning");
        assert!(losses.is_empty(), "{losses:?}");
        insta::assert_json_snapshot!("codex_turn2_reencoded", body);
    }

    #[test]
    fn input_file_without_data_url_takes_its_media_type_from_the_name() {
        // This codec read an unknown or missing file name as application/pdf; the Chat codec
        // as application/octet-stream, which is what is known about such bytes.
        for (filename, want) in [
            (Some("x.docx"), "application/octet-stream"),
            (None, "application/octet-stream"),
            (Some("x.json"), "application/json"),
            (Some("x.pdf"), "application/pdf"),
        ] {
            let mut file = json!({"type": "input_file", "file_data": "JVBERi0="});
            if let Some(name) = filename {
                file["filename"] = json!(name);
            }
            let req =
                dec(json!({"model": "gpt-5", "input": [{"role": "user", "content": [file]}]})).expect("decodes");
            let Part::Document { source: DocumentSource::Base64 { media_type, .. }, .. } = &req.messages[0].content[0]
            else {
                panic!("not a document: {:?}", req.messages[0].content[0]);
            };
            assert_eq!(media_type, want, "{filename:?}");
        }
    }

    #[test]
    fn data_url_without_media_type_reads_as_octet_stream() {
        // This codec kept an empty media type; the Chat codec gave application/octet-stream.
        let file = json!({"type": "input_file", "filename": "x", "file_data": "data:;base64,JVBERi0="});
        let req = dec(json!({"model": "gpt-5", "input": [{"role": "user", "content": [file]}]})).expect("decodes");
        let Part::Document { source: DocumentSource::Base64 { media_type, .. }, .. } = &req.messages[0].content[0] else {
            panic!("not a document: {:?}", req.messages[0].content[0]);
        };
        assert_eq!(media_type, "application/octet-stream");
    }

    #[test]
    fn decode_request_features() {
        let req = dec(json!({
            "model": "gpt-4.1",
            "instructions": "Be terse.",
            "input": [
                {"role": "developer", "content": "Leading developer text."},
                {"role": "user", "content": [
                    {"type": "input_text", "text": "Look:"},
                    {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "high"},
                    {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="},
                    {"type": "input_file", "filename": "report.pdf", "file_data": "data:application/pdf;base64,JVBERi0="},
                    {"type": "input_file", "file_url": "https://example.com/a.pdf"}
                ]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Seen.", "annotations": []}]},
                {"type": "function_call", "call_id": "call_1", "name": "spawn_agent", "namespace": "multi_agent_v1", "arguments": "{\"task\":\"x\"}"},
                {"type": "function_call", "call_id": "call_2", "name": "get_goal", "arguments": ""},
                {"type": "function_call_output", "call_id": "call_1", "output": "spawned"},
                {"type": "function_call_output", "call_id": "call_2", "output": [
                    {"type": "input_text", "text": "goal:"},
                    {"type": "input_image", "image_url": "data:image/jpeg;base64,/9j/"}
                ]},
                {"role": "system", "content": [{"type": "input_text", "text": "Mid-conversation system note."}]},
                {"role": "user", "content": "Thanks"}
            ],
            "tools": [
                {"type": "function", "name": "get_goal", "parameters": null, "strict": true},
                {"type": "namespace", "name": "multi_agent_v1", "description": "Agents.", "tools": [
                    {"type": "function", "name": "spawn_agent", "description": "Spawn.", "parameters": {"type": "object", "properties": {"task": {"type": "string"}}}}
                ]},
                {"type": "file_search", "vector_store_ids": ["vs_1"]},
                {"type": "custom", "name": "apply_patch"}
            ],
            "tool_choice": {"type": "function", "name": "get_goal"},
            "parallel_tool_calls": false,
            "max_output_tokens": 1024,
            "temperature": 0,
            "top_p": 0.5,
            "reasoning": {"effort": "high", "summary": "detailed"},
            "text": {"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"}, "strict": true}, "verbosity": "low"},
            "safety_identifier": "user-123",
            "store": true,
            "truncation": "auto",
            "include": ["reasoning.encrypted_content", "message.output_text.logprobs"],
            "metadata": {"k": "v"},
            "prompt_cache_key": "abc"
        }))
        .unwrap();
        assert_eq!(req.temperature, Some(0.0), "temperature 0 is a value");
        assert_eq!(req.top_p, Some(0.5));
        assert_eq!(req.max_tokens, Some(1024));
        assert_eq!(
            req.system.iter().map(|t| t.text.as_str()).collect::<Vec<_>>(),
            ["Be terse.", "Leading developer text."]
        );
        assert_eq!(req.tool_choice, Some(ToolChoice::Tool("get_goal".into())));
        assert_eq!(req.user.as_deref(), Some("user-123"));
        assert!(req.messages.iter().any(|m| m.role == Role::System));
        insta::assert_snapshot!("decode_request_features", format!("{req:#?}"));
    }

    #[test]
    fn decode_request_string_input_and_bare_messages() {
        let req = dec(json!({"model": "m", "input": "Hello"})).unwrap();
        assert_eq!(req.messages, vec![user(vec![text("Hello")])]);
        assert!(!req.stream);
        let req =
            dec(json!({"model": "m", "input": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}))
                .unwrap();
        assert_eq!(req.messages, vec![user(vec![text("a"), text("b")])], "consecutive items of one role merge");
        let req = dec(json!({"model": "m", "reasoning": {}, "input": [
            {"type": "function_call_output", "call_id": "c", "output": {"content": "boom", "success": false}}
        ]}))
        .unwrap();
        assert_eq!(
            req.messages[0].content[0],
            Part::ToolResult {
                tool_use_id: "c".into(),
                content: vec![ToolResultContent::Text("boom".into())],
                is_error: true
            }
        );
        assert!(req.reasoning.is_none(), "an empty reasoning object configures nothing");
    }

    #[test]
    fn decode_request_tool_choices() {
        let choice = |tc: Value| dec(json!({"model": "m", "input": "x", "tool_choice": tc})).unwrap();
        assert_eq!(choice(json!("auto")).tool_choice, Some(ToolChoice::Auto));
        assert_eq!(choice(json!("none")).tool_choice, Some(ToolChoice::None));
        assert_eq!(choice(json!("required")).tool_choice, Some(ToolChoice::Any));
        let r = choice(json!({"type": "allowed_tools", "mode": "required", "tools": []}));
        assert_eq!(r.tool_choice, Some(ToolChoice::Any));
        assert_eq!(r.losses.len(), 1);
        let r = choice(json!({"type": "web_search_preview"}));
        assert_eq!(r.tool_choice, Some(ToolChoice::Auto));
        assert_eq!(r.losses.len(), 1);
        assert!(dec(json!({"model": "m", "input": "x", "tool_choice": "sometimes"})).is_err());
    }

    #[test]
    fn decode_request_refusals() {
        let cases = [
            (json!({"model": "m", "input": "x", "previous_response_id": "resp_1"}), "previous_response_id"),
            (json!({"model": "m", "input": "x", "conversation": "conv_1"}), "conversation"),
            (json!({"model": "m", "input": "x", "prompt": {"id": "pmpt_1"}}), "prompt"),
            (json!({"model": "m", "input": "x", "background": true}), "background"),
            (
                json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]}]}),
                "input[0].content[0].file_id",
            ),
            (
                json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]}]}),
                "input[0].content[0].file_id",
            ),
            (
                json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]}),
                "input[0].content[0]",
            ),
            (json!({"model": "m", "input": [{"role": "tool", "content": "x"}]}), "input[0].role"),
            (json!({"model": "m"}), "input"),
            (json!({"input": "x"}), "model"),
            (json!({"model": "m", "input": "x", "max_output_tokens": -1}), "max_output_tokens"),
            (json!([1, 2]), "body"),
        ];
        let mut messages = Vec::new();
        for (body, field) in cases {
            let e = dec(body).unwrap_err();
            assert_eq!(e.field, field, "{e:?}");
            messages.push(format!("{}: {}", e.field, e.message));
        }
        let e = decode_request(b"{not json").unwrap_err();
        assert_eq!(e.field, "body");
        // A null previous_response_id (what some SDKs send) is no state.
        assert!(dec(json!({"model": "m", "input": "x", "previous_response_id": null})).is_ok());
        insta::assert_snapshot!("decode_request_refusals", messages.join("\n"));
    }

    #[test]
    fn decode_request_restores_ccmesh_thinking() {
        let req = dec(json!({"model": "claude-sonnet-4-5", "input": [
            {"role": "user", "content": "hi"},
            {"type": "reasoning", "id": "rs_seed_0", "summary": [{"type": "summary_text", "text": "Let me think."}],
             "encrypted_content": format!("{THINKING_BLOB}EqQBCkYIBRgCIkB")},
            {"type": "reasoning", "id": "rs_seed_1", "summary": [], "encrypted_content": format!("{REDACTED_BLOB}EmwKAhgBEgy")},
            {"type": "function_call", "call_id": "toolu_1", "name": "f", "arguments": "{}"}
        ]}))
        .unwrap();
        assert_eq!(
            req.messages[1].content[..2],
            [
                Part::Thinking { text: "Let me think.".into(), signature: Some("EqQBCkYIBRgCIkB".into()) },
                Part::RedactedThinking { data: "EmwKAhgBEgy".into() },
            ]
        );
    }

    #[test]
    fn decode_request_history_builtin_items() {
        let req = dec(json!({"model": "m", "input": [
            {"role": "user", "content": "patch it"},
            {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** Begin Patch"},
            {"type": "custom_tool_call_output", "call_id": "c1", "output": "Done"},
            {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "q"}},
            {"type": "compaction", "encrypted_content": "xyz"},
            {"type": "item_reference", "id": "msg_1"}
        ]}))
        .unwrap();
        assert_eq!(req.messages.len(), 3);
        assert_eq!(req.losses.len(), 5, "{:?}", req.losses);
    }

    /// Second requests of a Vercel AI SDK 6 (`@ai-sdk/openai` 3) tool loop, captured against
    /// this codec's own answers: with the default `store: true` (item references) and with
    /// `store: false` (full items).
    #[test]
    fn decode_request_ai_sdk_tool_loop() {
        let tools = json!([
            {"type": "function", "name": "get_weather", "description": "w", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
            {"type": "function", "name": "spawn_agent", "description": "s", "parameters": {"type": "object", "properties": {"task": {"type": "string"}}}}
        ]);
        let tail = json!([
            {"type": "function_call", "call_id": "toolu_01", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call", "call_id": "toolu_02", "name": "spawn_agent", "arguments": "{\"task\":\"weather\"}", "namespace": "multi_agent_v1"},
            {"type": "function_call_output", "call_id": "toolu_01", "output": "{\"temp\":21}"},
            {"type": "function_call_output", "call_id": "toolu_02", "output": "spawned"}
        ]);
        let head = vec![
            json!({"role": "developer", "content": "Be brief."}),
            json!({"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]}),
        ];
        let stored = [
            json!({"type": "item_reference", "id": "rs_seed1_0"}),
            json!({"type": "item_reference", "id": "msg_seed1_1"}),
        ];
        let unstored = [
            json!({"role": "assistant", "content": [{"type": "output_text", "text": "Let me check."}], "id": "msg_seed1_1"}),
            json!({"role": "assistant", "content": [{"type": "output_text", "text": " Right away."}], "id": "msg_seed1_1"}),
        ];
        for (store, middle) in [(true, &stored), (false, &unstored)] {
            let mut input = head.clone();
            input.extend(middle.iter().cloned());
            input.extend(tail.as_array().unwrap().iter().cloned());
            let req =
                dec(json!({"model": "gpt-5", "input": input, "store": store, "tools": tools, "tool_choice": "auto",
                "include": ["reasoning.encrypted_content"]}))
                .unwrap();
            assert_eq!(req.system, vec![text_part("Be brief.")]);
            let a = &req.messages[1];
            assert_eq!(a.role, Role::Assistant);
            let calls: Vec<&str> = a
                .content
                .iter()
                .filter_map(|p| match p {
                    Part::ToolUse { name, .. } => Some(name.as_str()),
                    _ => None,
                })
                .collect();
            assert_eq!(calls, ["get_weather", "multi_agent_v1__spawn_agent"]);
            assert_eq!(req.messages[2].content.len(), 2);
            if store {
                assert!(req.losses.iter().any(|l| l.field.contains("item_reference")));
            } else {
                assert_eq!(a.content[0], text("Let me check."));
            }
        }
    }

    #[test]
    fn decode_request_duplicate_flat_name_is_refused() {
        let e = dec(json!({"model": "m", "input": "x", "tools": [
            {"type": "function", "name": "ns__a", "parameters": {}},
            {"type": "namespace", "name": "ns", "description": "", "tools": [{"type": "function", "name": "a"}]}
        ]}))
        .unwrap_err();
        assert_eq!(e.field, "tools");
    }

    // -----------------------------------------------------------------------------------------
    // encode_request
    // -----------------------------------------------------------------------------------------

    /// An IR request shaped like a Claude Code turn 2 (decoded from Anthropic).
    fn claude_code_like() -> Request {
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
                    input_schema: json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
                    strict: None,
                    namespace: None,
                },
                Tool { name: "Read".into(), description: None, input_schema: json!({"type": "object"}), strict: Some(true), namespace: None },
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
            losses: Vec::new(),
        }
    }

    #[test]
    fn encode_request_claude_code_like() {
        let (body, losses) = enc(&claude_code_like());
        assert_eq!(body["temperature"], json!(0.0));
        assert_eq!(body["store"], false);
        assert_eq!(body["tools"][0]["strict"], false, "the Responses default (strict) must be overridden");
        assert_eq!(body["tools"][1]["strict"], true);
        assert_eq!(body["reasoning"], json!({"effort": "high", "summary": "auto"}));
        assert_eq!(body["tool_choice"], "required");
        assert!(body.get("include").is_none());
        assert!(body["user"].as_str().unwrap().len() <= MAX_USER_LEN);
        let fields: Vec<&str> = losses.iter().map(|l| l.field.as_str()).collect();
        assert_eq!(fields, ["messages[*].content (thinking)", "top_k", "stop", "user"]);
        insta::assert_json_snapshot!("encode_request_claude_code_like", body);
        insta::assert_debug_snapshot!("encode_request_claude_code_like_losses", losses);
    }

    #[test]
    fn encode_request_features() {
        let mut req = Request {
            model: "o4-mini".into(),
            messages: vec![
                user(vec![text("hi")]),
                assistant(vec![
                    Part::ReasoningItem {
                        id: Some("rs_1".into()),
                        summary: vec!["sum".into()],
                        encrypted_content: Some("gAAAAenc".into()),
                    },
                    Part::ReasoningItem { id: Some("rs_2".into()), summary: vec![], encrypted_content: None },
                    text("hello"),
                ]),
                user(vec![Part::ToolResult {
                    tool_use_id: "call_9".into(),
                    content: vec![ToolResultContent::Image(Image::Url { url: "https://x/y.png".into() })],
                    is_error: true,
                }]),
            ],
            max_tokens: Some(5),
            reasoning: Some(Reasoning {
                budget_tokens: None,
                effort: Some("minimal".into()),
                adaptive: false,
                summary: Some("concise".into()),
            }),
            output_format: Some(OutputFormat::JsonSchema {
                name: "out".into(),
                schema: json!({"type": "object"}),
                strict: Some(true),
                description: Some("d".into()),
            }),
            tool_choice: Some(ToolChoice::Tool("f".into())),
            ..Request::default()
        };
        let (body, losses) = enc(&req);
        assert_eq!(body["max_output_tokens"], 16);
        assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(body["input"][1]["type"], "reasoning");
        assert_eq!(body["input"][3]["output"][0], json!({"type": "input_text", "text": "Error"}));
        assert_eq!(losses.len(), 2, "{losses:?}");
        insta::assert_json_snapshot!("encode_request_features", body);

        req.output_format = Some(OutputFormat::JsonObject);
        req.reasoning =
            Some(Reasoning { budget_tokens: None, effort: Some("none".into()), adaptive: false, summary: None });
        req.tool_choice = Some(ToolChoice::None);
        let (body, _) = enc(&req);
        assert_eq!(body["text"], json!({"format": {"type": "json_object"}}));
        assert_eq!(body["reasoning"], json!({"effort": "none"}));
        assert_eq!(body["tool_choice"], "none");
    }

    #[test]
    fn effort_table() {
        assert_eq!(effort_for_budget(1024), "low");
        assert_eq!(effort_for_budget(4000), "low");
        assert_eq!(effort_for_budget(10_000), "medium");
        assert_eq!(effort_for_budget(31_999), "high");
    }

    // -----------------------------------------------------------------------------------------
    // decode_response / encode_response
    // -----------------------------------------------------------------------------------------

    fn upstream_response(status: &str, output: Value, usage: Value, incomplete: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "id": "resp_abc", "object": "response", "created_at": 1741476777, "status": status,
            "error": null, "incomplete_details": incomplete, "model": "gpt-5-2025-08-07",
            "output": output, "parallel_tool_calls": true, "tool_choice": "auto", "tools": [], "usage": usage
        }))
        .unwrap()
    }

    #[test]
    fn decode_response_cases() {
        let usage = json!({"input_tokens": 1200, "input_tokens_details": {"cached_tokens": 1000}, "output_tokens": 300,
            "output_tokens_details": {"reasoning_tokens": 200}, "total_tokens": 1500});
        let text_body = upstream_response(
            "completed",
            json!([
                {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "**Plan**"}, {"type": "summary_text", "text": "Then act."}], "encrypted_content": "gAAAA"},
                {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant", "content": [{"type": "output_text", "text": "Hi!", "annotations": []}]}
            ]),
            usage.clone(),
            Value::Null,
        );
        let r = decode_response(&text_body).unwrap();
        assert_eq!(r.stop_reason, Some(StopReason::EndTurn));
        assert_eq!(
            r.usage,
            Usage {
                input: Some(200),
                output: Some(300),
                cache_read: Some(1000),
                cache_write: None,
                reasoning: Some(200)
            }
        );
        assert_eq!(r.content[0], Part::Thinking { text: "**Plan**\n\nThen act.".into(), signature: None });
        assert_eq!(r.model, "gpt-5-2025-08-07");
        assert_eq!(r.created, Some(1741476777));

        let tools = upstream_response(
            "completed",
            json!([
                {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
                {"id": "fc_2", "type": "function_call", "status": "completed", "call_id": "call_2", "name": "spawn_agent", "namespace": "multi_agent_v1", "arguments": "{}"}
            ]),
            usage.clone(),
            Value::Null,
        );
        let r = decode_response(&tools).unwrap();
        assert_eq!(r.stop_reason, Some(StopReason::ToolUse));
        assert_eq!(r.content[1], tool_use("call_2", "multi_agent_v1__spawn_agent", "{}"));

        let max = upstream_response("incomplete", json!([]), usage.clone(), json!({"reason": "max_output_tokens"}));
        assert_eq!(decode_response(&max).unwrap().stop_reason, Some(StopReason::MaxTokens));
        let filtered = upstream_response("incomplete", json!([]), usage.clone(), json!({"reason": "content_filter"}));
        assert_eq!(decode_response(&filtered).unwrap().stop_reason, Some(StopReason::Refusal));
        let refusal = upstream_response(
            "completed",
            json!([{"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
                "content": [{"type": "refusal", "refusal": "I can't help with that."}]}]),
            usage,
            Value::Null,
        );
        let r = decode_response(&refusal).unwrap();
        assert_eq!(r.stop_reason, Some(StopReason::Refusal));
        assert_eq!(r.content, vec![text("I can't help with that.")]);

        let failed = upstream_response("failed", json!([]), Value::Null, Value::Null);
        assert!(decode_response(&failed).is_err());
        assert!(decode_response(b"nope").is_err());
        insta::assert_snapshot!("decode_response_text", format!("{:#?}", decode_response(&text_body).unwrap()));
        insta::assert_snapshot!("decode_response_tools", format!("{:#?}", decode_response(&tools).unwrap()));
    }

    #[test]
    fn decode_response_cache_write_tokens() {
        let body = upstream_response(
            "completed",
            json!([]),
            json!({"input_tokens": 5000, "input_tokens_details": {"cached_tokens": 1000, "cache_write_tokens": 3000},
                "output_tokens": 10, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 5010}),
            Value::Null,
        );
        let u = decode_response(&body).unwrap().usage;
        assert_eq!((u.input, u.cache_read, u.cache_write), (Some(1000), Some(1000), Some(3000)));
    }

    fn sample_response() -> Response {
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

    #[test]
    fn encode_response_cases() {
        let body: Value = serde_json::from_slice(&encode_response(&sample_response(), &ctx())).unwrap();
        assert_eq!(body["usage"]["input_tokens"], 1325);
        assert_eq!(body["usage"]["input_tokens_details"]["cached_tokens"], 1000);
        assert_eq!(body["output"][3]["namespace"], "multi_agent_v1");
        assert_eq!(body["output"][3]["name"], "spawn_agent");
        assert_eq!(body["output"][0]["encrypted_content"], Value::Null, "no signature without include");
        insta::assert_json_snapshot!("encode_response_tools", body);

        let mut c = ctx();
        c.include_encrypted_reasoning = true;
        let body: Value = serde_json::from_slice(&encode_response(&sample_response(), &c)).unwrap();
        assert_eq!(body["output"][0]["encrypted_content"], format!("{THINKING_BLOB}EqQBCkYsig"));

        for (stop, status, reason) in [
            (StopReason::MaxTokens, "incomplete", json!({"reason": "max_output_tokens"})),
            (StopReason::Refusal, "incomplete", json!({"reason": "content_filter"})),
            (StopReason::EndTurn, "completed", Value::Null),
            (StopReason::StopSequence, "completed", Value::Null),
            (StopReason::PauseTurn, "completed", Value::Null),
        ] {
            let r = Response { content: vec![text("x")], stop_reason: Some(stop), ..Response::default() };
            let body: Value = serde_json::from_slice(&encode_response(&r, &ctx())).unwrap();
            assert_eq!(body["status"], status);
            assert_eq!(body["incomplete_details"], reason);
            assert_eq!(body["model"], "gpt-5", "request model when the upstream names none");
            assert_eq!(body["created_at"], 1_700_000_000);
        }
    }

    // -----------------------------------------------------------------------------------------
    // Stream decoding
    // -----------------------------------------------------------------------------------------

    fn sse(events: &[Value]) -> String {
        let mut s = String::new();
        for (i, e) in events.iter().enumerate() {
            let mut e = e.clone();
            e["sequence_number"] = json!(i);
            s.push_str(&format!("event: {}\ndata: {}\n\n", e["type"].as_str().unwrap(), e));
        }
        s
    }

    fn created(id: &str) -> Vec<Value> {
        let r = json!({"id": id, "object": "response", "created_at": 1741290958, "status": "in_progress", "model": "gpt-5-2025-08-07", "output": [], "usage": null});
        vec![json!({"type": "response.created", "response": r}), json!({"type": "response.in_progress", "response": r})]
    }

    fn completed(status: &str, incomplete: Value) -> Value {
        let ty = if status == "incomplete" { "response.incomplete" } else { "response.completed" };
        json!({"type": ty, "response": {"id": "resp_1", "object": "response", "status": status, "model": "gpt-5-2025-08-07",
            "incomplete_details": incomplete, "output": [],
            "usage": {"input_tokens": 3000, "input_tokens_details": {"cached_tokens": 2048}, "output_tokens": 120,
                      "output_tokens_details": {"reasoning_tokens": 64}, "total_tokens": 3120}}})
    }

    /// Two function calls (one namespaced), arguments in several deltas.
    fn tools_transcript() -> String {
        let mut ev = created("resp_1");
        ev.extend([
            json!({"type": "response.output_item.added", "output_index": 0, "item": {"id": "fc_1", "type": "function_call", "status": "in_progress", "arguments": "", "call_id": "call_A", "name": "get_weather"}}),
            json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 0, "delta": "{\"city\":"}),
            json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 0, "delta": "\"Paris\"}"}),
            json!({"type": "response.function_call_arguments.done", "item_id": "fc_1", "output_index": 0, "arguments": "{\"city\":\"Paris\"}"}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": {"id": "fc_1", "type": "function_call", "status": "completed", "arguments": "{\"city\":\"Paris\"}", "call_id": "call_A", "name": "get_weather"}}),
            json!({"type": "response.output_item.added", "output_index": 1, "item": {"id": "fc_2", "type": "function_call", "status": "in_progress", "arguments": "", "call_id": "call_B", "name": "spawn_agent", "namespace": "multi_agent_v1"}}),
            json!({"type": "response.function_call_arguments.delta", "item_id": "fc_2", "output_index": 1, "delta": ""}),
            json!({"type": "response.function_call_arguments.delta", "item_id": "fc_2", "output_index": 1, "delta": "{\"task\":\"é 😀\"}"}),
            json!({"type": "response.function_call_arguments.done", "item_id": "fc_2", "output_index": 1, "arguments": "{\"task\":\"é 😀\"}"}),
            json!({"type": "response.output_item.done", "output_index": 1, "item": {"id": "fc_2", "type": "function_call", "status": "completed", "arguments": "{\"task\":\"é 😀\"}", "call_id": "call_B", "name": "spawn_agent", "namespace": "multi_agent_v1"}}),
            completed("completed", Value::Null),
        ]);
        sse(&ev)
    }

    /// Reasoning with two summary parts, then text; cut by max_output_tokens.
    fn reasoning_transcript() -> String {
        let mut ev = created("resp_2");
        ev.extend([
            json!({"type": "response.output_item.added", "output_index": 0, "item": {"id": "rs_1", "type": "reasoning", "summary": []}}),
            json!({"type": "response.reasoning_summary_part.added", "item_id": "rs_1", "output_index": 0, "summary_index": 0, "part": {"type": "summary_text", "text": ""}}),
            json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": 0, "summary_index": 0, "delta": "**Planning**"}),
            json!({"type": "response.reasoning_summary_text.done", "item_id": "rs_1", "output_index": 0, "summary_index": 0, "text": "**Planning**"}),
            json!({"type": "response.reasoning_summary_part.done", "item_id": "rs_1", "output_index": 0, "summary_index": 0, "part": {"type": "summary_text", "text": "**Planning**"}}),
            json!({"type": "response.reasoning_summary_part.added", "item_id": "rs_1", "output_index": 0, "summary_index": 1, "part": {"type": "summary_text", "text": ""}}),
            json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": 0, "summary_index": 1, "delta": "Answer briefly."}),
            json!({"type": "response.reasoning_summary_part.done", "item_id": "rs_1", "output_index": 0, "summary_index": 1, "part": {"type": "summary_text", "text": "Answer briefly."}}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "**Planning**"}, {"type": "summary_text", "text": "Answer briefly."}], "encrypted_content": "gAAAA"}}),
            json!({"type": "response.output_item.added", "output_index": 1, "item": {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant", "content": []}}),
            json!({"type": "response.content_part.added", "item_id": "msg_1", "output_index": 1, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
            json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 1, "content_index": 0, "delta": "The answer", "logprobs": []}),
            json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 1, "content_index": 0, "delta": "", "logprobs": []}),
            json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 1, "content_index": 0, "delta": " is", "logprobs": []}),
            json!({"type": "response.output_text.done", "item_id": "msg_1", "output_index": 1, "content_index": 0, "text": "The answer is", "logprobs": []}),
            json!({"type": "response.content_part.done", "item_id": "msg_1", "output_index": 1, "content_index": 0, "part": {"type": "output_text", "text": "The answer is", "annotations": []}}),
            json!({"type": "response.output_item.done", "output_index": 1, "item": {"id": "msg_1", "type": "message", "status": "incomplete", "role": "assistant", "content": [{"type": "output_text", "text": "The answer is", "annotations": []}]}}),
            completed("incomplete", json!({"reason": "max_output_tokens"})),
        ]);
        sse(&ev)
    }

    fn error_transcripts() -> (String, String) {
        let mut a = created("resp_3");
        a.push(json!({"type": "error", "code": "rate_limit_exceeded", "message": "Rate limit reached. Please try again in 20s.", "param": null}));
        let mut b = created("resp_4");
        b.extend([
            json!({"type": "response.output_item.added", "output_index": 0, "item": {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant", "content": []}}),
            json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "Par"}),
            json!({"type": "response.failed", "response": {"id": "resp_4", "status": "failed", "error": {"code": "server_error", "message": "The server had an error."}}}),
        ]);
        (sse(&a), sse(&b))
    }

    #[test]
    fn stream_decode_text() {
        let evs = decode_stream(crate::protocol::sse::tests::RESPONSES);
        assert_eq!(
            evs,
            vec![
                StreamEvent::Start {
                    id: "resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654".into(),
                    model: "gpt-4.1-2025-04-14".into(),
                    usage: Usage::default(),
                    created: Some(1741290958),
                },
                StreamEvent::BlockStart { index: 0, block: BlockStart::Text },
                StreamEvent::TextDelta { index: 0, text: "Hi".into() },
                StreamEvent::TextDelta { index: 0, text: " th\u{e9}re \u{1F30D}".into() },
                StreamEvent::BlockStop { index: 0 },
                StreamEvent::Finish {
                    stop_reason: Some(StopReason::EndTurn),
                    stop_sequence: None,
                    usage: Usage {
                        input: Some(37),
                        output: Some(11),
                        cache_read: None,
                        cache_write: None,
                        reasoning: Some(0)
                    },
                },
                StreamEvent::End,
            ]
        );
    }

    #[test]
    fn stream_decode_tools_reasoning_errors() {
        let tools = decode_stream(&tools_transcript());
        assert!(tools.contains(&StreamEvent::BlockStart {
            index: 1,
            block: BlockStart::ToolUse { id: "call_B".into(), name: "multi_agent_v1__spawn_agent".into() }
        }));
        assert!(matches!(tools[tools.len() - 2], StreamEvent::Finish { stop_reason: Some(StopReason::ToolUse), .. }));
        insta::assert_snapshot!("stream_decode_tools", format!("{tools:#?}"));

        let reasoning = decode_stream(&reasoning_transcript());
        assert!(reasoning.contains(&StreamEvent::ThinkingDelta { index: 0, text: "\n\n".into() }));
        assert!(matches!(
            reasoning[reasoning.len() - 2],
            StreamEvent::Finish {
                stop_reason: Some(StopReason::MaxTokens),
                usage: Usage { input: Some(952), cache_read: Some(2048), .. },
                ..
            }
        ));
        insta::assert_snapshot!("stream_decode_reasoning", format!("{reasoning:#?}"));

        let (a, b) = error_transcripts();
        let a = decode_stream(&a);
        assert_eq!(
            a.last(),
            Some(&StreamEvent::Error {
                kind: ErrorKind::RateLimited,
                message: "Rate limit reached. Please try again in 20s.".into()
            })
        );
        let b = decode_stream(&b);
        assert_eq!(
            b.last(),
            Some(&StreamEvent::Error { kind: ErrorKind::Api, message: "The server had an error.".into() })
        );
        assert!(!b.contains(&StreamEvent::End));
        insta::assert_snapshot!("stream_decode_errors", format!("{a:#?}\n{b:#?}"));
    }

    #[test]
    fn stream_decode_without_deltas_uses_done_items() {
        // Some Responses-compatible servers send only the finished items.
        let mut ev = created("resp_5");
        ev.extend([
            json!({"type": "response.output_item.done", "output_index": 0, "item": {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "Think."}]}}),
            json!({"type": "response.output_item.done", "output_index": 1, "item": {"id": "msg_1", "type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]}}),
            json!({"type": "response.output_item.done", "output_index": 2, "item": {"id": "fc_1", "type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"a\":1}"}}),
            completed("completed", Value::Null),
        ]);
        let evs = decode_stream(&sse(&ev));
        let agg = aggregate(&evs);
        assert_eq!(agg.thinking, ["Think."]);
        assert_eq!(agg.texts, ["Done."]);
        assert_eq!(agg.tools, [("c1".to_owned(), "f".to_owned(), "{\"a\":1}".to_owned())]);
        assert_eq!(agg.stop, Some(StopReason::ToolUse));
    }

    #[test]
    fn stream_decode_lenient_shapes() {
        // Deltas for items that were never announced, and the nested `error` event shape.
        let ev = vec![
            json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_9", "output_index": 0, "summary_index": 0, "delta": "Hm"}),
            json!({"type": "response.output_text.delta", "item_id": "msg_9", "output_index": 1, "content_index": 0, "delta": "Yes"}),
            json!({"type": "error", "error": {"type": "server_error", "code": "server_is_overloaded", "message": "busy"}}),
        ];
        let evs = decode_stream(&sse(&ev));
        assert_eq!(
            evs[1..],
            [
                StreamEvent::BlockStart { index: 0, block: BlockStart::Thinking },
                StreamEvent::ThinkingDelta { index: 0, text: "Hm".into() },
                StreamEvent::BlockStart { index: 1, block: BlockStart::Text },
                StreamEvent::TextDelta { index: 1, text: "Yes".into() },
                StreamEvent::Error { kind: ErrorKind::Overloaded, message: "busy".into() },
            ]
        );
    }

    #[test]
    fn stream_decode_eof_without_terminal_event_invents_nothing() {
        let t = tools_transcript();
        let cut = t.find("event: response.completed").unwrap();
        let evs = decode_stream(&t[..cut]);
        assert!(!evs.iter().any(|e| matches!(e, StreamEvent::End | StreamEvent::Finish { .. })));
    }

    fn transcripts() -> Vec<(&'static str, String)> {
        let (a, b) = error_transcripts();
        vec![
            ("text", crate::protocol::sse::tests::RESPONSES.to_owned()),
            ("tools", tools_transcript()),
            ("reasoning", reasoning_transcript()),
            ("error", a),
            ("failed", b),
        ]
    }

    #[test]
    fn stream_decode_split_at_every_byte() {
        for (name, t) in transcripts() {
            let whole = decode_stream(&t);
            let bytes = t.as_bytes();
            for k in 0..=bytes.len() {
                assert_eq!(decode_stream_chunks(&[&bytes[..k], &bytes[k..]]), whole, "{name} split at {k}");
            }
            // CRLF line endings and keep-alive comments change nothing.
            let crlf = format!(": keep-alive\n\n{}", t.replace('\n', "\r\n"));
            assert_eq!(decode_stream(&crlf), whole, "{name} crlf");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn stream_decode_random_splits(cuts in proptest::collection::vec(0usize..10_000, 0..12), which in 0usize..5) {
            let (_, t) = transcripts().swap_remove(which);
            let bytes = t.as_bytes();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut prev = 0;
            for c in cuts {
                chunks.push(&bytes[prev..c]);
                prev = c;
            }
            chunks.push(&bytes[prev..]);
            prop_assert_eq!(decode_stream_chunks(&chunks), decode_stream(&t));
        }
    }

    // -----------------------------------------------------------------------------------------
    // Stream encoding
    // -----------------------------------------------------------------------------------------

    /// The IR events of a response, as a decoder would emit them (text split in pieces).
    fn response_events(r: &Response) -> Vec<StreamEvent> {
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
                    let args = arguments_string(input, arguments.as_ref());
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
    struct Agg {
        texts: Vec<String>,
        thinking: Vec<String>,
        tools: Vec<(String, String, String)>,
        stop: Option<StopReason>,
        usage: Option<Usage>,
        ended: bool,
    }

    /// What a client sees of a decoded stream: block contents, stop reason, usage.
    fn aggregate(evs: &[StreamEvent]) -> Agg {
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
    fn expected_agg(r: &Response) -> Agg {
        let mut agg = Agg { ended: true, ..Agg::default() };
        for p in &r.content {
            match p {
                Part::Text(t) if !t.text.is_empty() => agg.texts.push(t.text.clone()),
                Part::Thinking { text, .. } if !text.is_empty() => agg.thinking.push(text.clone()),
                Part::ReasoningItem { summary, .. } if !summary.join(SUMMARY_SEPARATOR).is_empty() => {
                    agg.thinking.push(summary.join(SUMMARY_SEPARATOR));
                }
                Part::ToolUse { id, name, input, arguments } => {
                    agg.tools.push((id.clone(), name.clone(), arguments_string(input, arguments.as_ref())));
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

    #[test]
    fn stream_encode_transcript() {
        let r = sample_response();
        let bytes = encode_stream(&response_events(&r), ctx());
        let terminal = validate_stream(&bytes);
        assert_eq!(terminal["type"], "response.completed");
        assert_eq!(terminal["response"]["output"][3]["namespace"], "multi_agent_v1");
        insta::assert_snapshot!("stream_encode_tools", String::from_utf8(bytes.clone()).unwrap());
        // Decoding our own output gives back what went in.
        assert_eq!(aggregate(&decode_stream(std::str::from_utf8(&bytes).unwrap())), expected_agg(&r));
    }

    #[test]
    fn stream_encode_thinking_signature_with_include() {
        let mut c = ctx();
        c.include_encrypted_reasoning = true;
        let r = Response {
            content: vec![
                Part::Thinking { text: "Hmm.".into(), signature: Some("sig".into()) },
                Part::RedactedThinking { data: "opaque".into() },
                text("Hi"),
            ],
            stop_reason: Some(StopReason::MaxTokens),
            ..Response::default()
        };
        let bytes = encode_stream(&response_events(&r), c.clone());
        let terminal = validate_stream(&bytes);
        assert_eq!(terminal["type"], "response.incomplete");
        assert_eq!(terminal["response"]["incomplete_details"]["reason"], "max_output_tokens");
        let out = &terminal["response"]["output"];
        assert_eq!(out[0]["encrypted_content"], format!("{THINKING_BLOB}sig"));
        assert_eq!(out[1]["encrypted_content"], format!("{REDACTED_BLOB}opaque"));
        // The client replays these items: they turn back into signed Anthropic thinking.
        let replay =
            dec(json!({"model": "m", "input": [{"role": "user", "content": "q"}, out[0], out[1], out[2]]})).unwrap();
        assert_eq!(
            replay.messages[1].content[0],
            Part::Thinking { text: "Hmm.".into(), signature: Some("sig".into()) }
        );
        assert_eq!(replay.messages[1].content[1], Part::RedactedThinking { data: "opaque".into() });
        insta::assert_snapshot!("stream_encode_thinking_include", String::from_utf8(bytes).unwrap());
        // Without include the redacted block is invisible and no signature leaks out.
        let bytes = encode_stream(&response_events(&r), ctx());
        let terminal = validate_stream(&bytes);
        assert_eq!(terminal["response"]["output"].as_array().unwrap().len(), 2);
        assert_eq!(terminal["response"]["output"][0]["encrypted_content"], Value::Null);
    }

    #[test]
    fn stream_encode_error_and_edge_cases() {
        // Error mid-stream → response.failed with the error.
        let evs = vec![
            StreamEvent::Start { id: "x".into(), model: "claude".into(), usage: Usage::default(), created: Some(5) },
            StreamEvent::BlockStart { index: 0, block: BlockStart::Text },
            StreamEvent::TextDelta { index: 0, text: "Par".into() },
            StreamEvent::Error { kind: ErrorKind::Overloaded, message: "Overloaded".into() },
            StreamEvent::End,
        ];
        let bytes = encode_stream(&evs, ctx());
        let terminal = validate_stream(&bytes);
        assert_eq!(terminal["type"], "response.failed");
        assert_eq!(terminal["response"]["error"], json!({"code": "server_error", "message": "Overloaded"}));
        insta::assert_snapshot!("stream_encode_error", String::from_utf8(bytes).unwrap());

        // An error before anything else still opens the response first.
        let bytes =
            encode_stream(&[StreamEvent::Error { kind: ErrorKind::RateLimited, message: "slow down".into() }], ctx());
        assert_eq!(validate_stream(&bytes)["response"]["error"]["code"], "rate_limit_exceeded");

        // Interleaved tool calls (a Chat upstream), a tool call without arguments, no Finish.
        let evs = vec![
            StreamEvent::Start { id: "x".into(), model: String::new(), usage: Usage::default(), created: None },
            StreamEvent::BlockStart { index: 0, block: BlockStart::ToolUse { id: "call_1".into(), name: "a".into() } },
            StreamEvent::BlockStart { index: 1, block: BlockStart::ToolUse { id: "call_2".into(), name: "b".into() } },
            StreamEvent::ToolArgsDelta { index: 1, partial_json: "{\"y\":".into() },
            StreamEvent::ToolArgsDelta { index: 1, partial_json: "2}".into() },
            StreamEvent::TextDelta { index: 7, text: "ignored: unknown block".into() },
            StreamEvent::BlockStop { index: 0 },
            StreamEvent::BlockStop { index: 1 },
            StreamEvent::End,
        ];
        let bytes = encode_stream(&evs, ctx());
        let terminal = validate_stream(&bytes);
        assert_eq!(terminal["response"]["output"][0]["arguments"], "{}");
        assert_eq!(terminal["response"]["output"][1]["arguments"], "{\"y\":2}");
        assert_eq!(terminal["response"]["model"], "gpt-5");
    }

    // -----------------------------------------------------------------------------------------
    // Errors
    // -----------------------------------------------------------------------------------------

    #[test]
    fn errors() {
        let e = decode_error(
            429,
            br#"{"error":{"message":"Rate limit reached for gpt-4o","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#,
        );
        assert_eq!(
            e,
            ErrorBody {
                kind: ErrorKind::RateLimited,
                message: "Rate limit reached for gpt-4o".into(),
                code: Some("rate_limit_exceeded".into()),
                param: None
            }
        );
        let e = decode_error(400, br#"{"error":{"message":"Invalid 'input[0]'","type":"invalid_request_error","param":"input[0]","code":null}}"#);
        assert_eq!(
            (e.kind, e.code.as_deref(), e.param.as_deref()),
            (ErrorKind::InvalidRequest, Some("invalid_request_error"), Some("input[0]"))
        );
        assert_eq!(decode_error(401, b"").message, "upstream returned HTTP 401");
        assert_eq!(decode_error(401, b"").kind, ErrorKind::Authentication);
        assert_eq!(decode_error(502, b"<html>Bad gateway</html>").message, "<html>Bad gateway</html>");
        assert_eq!(decode_error(503, br#"{"error":"overloaded"}"#).message, "overloaded");
        assert_eq!(decode_error(529, b"x").kind, ErrorKind::Overloaded);
        let long = "é".repeat(5000);
        assert_eq!(decode_error(500, long.as_bytes()).message.chars().count(), MAX_ERROR_TEXT + 1);

        let mut bodies = Vec::new();
        for kind in [
            ErrorKind::InvalidRequest,
            ErrorKind::Authentication,
            ErrorKind::Permission,
            ErrorKind::NotFound,
            ErrorKind::RequestTooLarge,
            ErrorKind::RateLimited,
            ErrorKind::Overloaded,
            ErrorKind::Api,
        ] {
            let b = encode_error(&ErrorBody { kind, message: format!("{kind:?} happened"), code: None, param: None });
            let v: Value = serde_json::from_slice(&b).unwrap();
            // Round trip through our own decoder keeps the message and the kind's code.
            let back = decode_error(400, &b);
            assert_eq!(back.message, format!("{kind:?} happened"));
            bodies.push(v);
        }
        bodies.push(
            serde_json::from_slice(&encode_error(&ErrorBody {
                kind: ErrorKind::InvalidRequest,
                message: "prompt is too long".into(),
                code: Some("invalid_request_error".into()),
                param: Some("input".into()),
            }))
            .unwrap(),
        );
        insta::assert_json_snapshot!("encode_errors", bodies);
    }

    // -----------------------------------------------------------------------------------------
    // Round trips and properties
    // -----------------------------------------------------------------------------------------

    /// What a request conversion must keep: system text, message texts, tool calls, tool
    /// results, tool declarations.
    fn request_view(r: &Request) -> Vec<String> {
        let mut v =
            vec![format!("system: {}", r.system.iter().map(|t| t.text.as_str()).collect::<Vec<_>>().join("\n\n"))];
        for m in &r.messages {
            for p in &m.content {
                match p {
                    Part::Text(t) if !t.text.is_empty() => v.push(format!("{:?} text: {}", m.role, t.text)),
                    Part::ToolUse { id, name, input, arguments } => {
                        v.push(format!("call {id} {name} {}", arguments_string(input, arguments.as_ref())));
                    }
                    Part::ToolResult { tool_use_id, content, is_error } => {
                        v.push(format!("result {tool_use_id} {}", tool_output_value(content, *is_error)));
                    }
                    _ => {}
                }
            }
        }
        for t in &r.tools {
            v.push(format!("tool {} {:?} {}", t.name, t.description, t.input_schema));
        }
        v.push(format!(
            "{:?} {:?} {:?} {:?} {:?} {:?}",
            r.tool_choice, r.parallel_tool_calls, r.temperature, r.top_p, r.stream, r.output_format
        ));
        v
    }

    fn arb_text() -> impl Strategy<Value = String> {
        "[a-z0-9 é😀{}\"\\\\\n]{0,12}"
    }

    fn arb_json() -> impl Strategy<Value = Value> {
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

    fn arb_usage() -> impl Strategy<Value = Usage> {
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

    fn arb_stop() -> impl Strategy<Value = Option<StopReason>> {
        proptest::option::of(prop_oneof![
            Just(StopReason::EndTurn),
            Just(StopReason::MaxTokens),
            Just(StopReason::StopSequence),
            Just(StopReason::ToolUse),
            Just(StopReason::Refusal),
            Just(StopReason::PauseTurn),
        ])
    }

    fn arb_image() -> impl Strategy<Value = Image> {
        prop_oneof![
            ("[a-z/]{0,10}", "[A-Za-z0-9+/=]{0,8}").prop_map(|(media_type, data)| Image::Base64 { media_type, data }),
            arb_text().prop_map(|url| Image::Url { url }),
        ]
    }

    fn arb_tool_name() -> impl Strategy<Value = String> {
        prop_oneof!["[a-z_]{1,8}", Just("multi_agent_v1__spawn_agent".to_owned()), Just("ns__tool".to_owned()),]
    }

    /// Assistant output parts (what upstreams produce).
    fn arb_output_part() -> impl Strategy<Value = Part> {
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

    fn arb_any_part() -> impl Strategy<Value = Part> {
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

    fn arb_response() -> impl Strategy<Value = Response> {
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
    fn arb_request(any_parts: bool) -> impl Strategy<Value = Request> {
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
                input_schema: json!({"type": "object"}),
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
                        losses: vec![],
                    }
                },
            )
    }

    fn prop_ctx() -> EncodeContext {
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
