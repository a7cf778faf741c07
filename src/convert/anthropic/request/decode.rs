//! An Anthropic Messages request (Claude Code's, an SDK's) to the IR. Everything the IR can hold
//! is kept; what it cannot is a `Loss`; only what would change the answer's meaning is refused.

use std::fmt;

use serde_json::{Map, Value, json};

use super::super::{as_object, as_object_mut, shown};
use super::plain::plain_request;
use crate::convert::ir::*;
use crate::protocol::lenient::{count, get, get_mut, get_str, take, take_str, take_text};

/// Where a request's tool schemas are, kept as the client's text (`ir::schema`).
const TOOL_SCHEMAS: SchemaPlaces = SchemaPlaces { list: "tools", member: "input_schema", nested: false, wrapper: None };

/// The first bytes of Claude Code's attribution line in `system[0]`.
const BILLING_HEADER_PREFIX: &str = "x-anthropic-billing-header:";

fn opt_u64(obj: &Map<String, Value>, key: &str) -> Result<Option<u64>, ConvertError> {
    u64_member(get(obj, key), key)
}

/// A top-level count: absent, or a non-negative integer.
fn u64_member(v: Option<&Value>, key: &str) -> Result<Option<u64>, ConvertError> {
    match v {
        None => Ok(None),
        Some(v) => {
            count(v).map(Some).ok_or_else(|| ConvertError::new(key, format!("`{key}` must be a non-negative integer")))
        }
    }
}

/// A top-level number: absent, or any JSON number.
fn f64_member(v: Option<&Value>, key: &str) -> Result<Option<f64>, ConvertError> {
    match v {
        None => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or_else(|| ConvertError::new(key, format!("`{key}` must be a number"))),
    }
}

/// The top-level members the decoder reads, found in one walk over the body instead of a map
/// lookup each (about twenty, most of them for members a request leaves out). `null` reads as
/// absent, as `lenient::get` has it.
#[derive(Default)]
struct Members<'a> {
    model: Option<&'a mut Value>,
    system: Option<&'a mut Value>,
    messages: Option<&'a mut Value>,
    tools: Option<&'a mut Value>,
    tool_choice: Option<&'a Value>,
    output_config: Option<&'a Value>,
    thinking: Option<&'a Value>,
    output_format: Option<&'a Value>,
    stop_sequences: Option<&'a Value>,
    metadata: Option<&'a Value>,
    max_tokens: Option<&'a Value>,
    temperature: Option<&'a Value>,
    top_p: Option<&'a Value>,
    top_k: Option<&'a Value>,
    stream: Option<&'a Value>,
    /// Anthropic-only features the request names: each is a loss.
    context_management: bool,
    mcp_servers: bool,
    container: bool,
    service_tier: bool,
}

impl<'a> Members<'a> {
    fn of(obj: &'a mut Map<String, Value>) -> Self {
        let mut m = Members::default();
        for (key, value) in obj.iter_mut().filter(|(_, v)| !v.is_null()) {
            match key.as_str() {
                "model" => m.model = Some(value),
                "system" => m.system = Some(value),
                "messages" => m.messages = Some(value),
                "tools" => m.tools = Some(value),
                "tool_choice" => m.tool_choice = Some(value),
                "output_config" => m.output_config = Some(value),
                "thinking" => m.thinking = Some(value),
                "output_format" => m.output_format = Some(value),
                "stop_sequences" => m.stop_sequences = Some(value),
                "metadata" => m.metadata = Some(value),
                "max_tokens" => m.max_tokens = Some(value),
                "temperature" => m.temperature = Some(value),
                "top_p" => m.top_p = Some(value),
                "top_k" => m.top_k = Some(value),
                "stream" => m.stream = Some(value),
                "context_management" => m.context_management = true,
                "mcp_servers" => m.mcp_servers = true,
                "container" => m.container = true,
                "service_tier" => m.service_tier = true,
                _ => {}
            }
        }
        m
    }
}

/// `prefix.key` (or `key` at the top level), built only for an error message.
fn field_name(prefix: &(impl fmt::Display + ?Sized), key: &str) -> String {
    let prefix = prefix.to_string();
    if prefix.is_empty() { key.to_string() } else { format!("{prefix}.{key}") }
}

fn opt_bool(
    obj: &Map<String, Value>,
    key: &str,
    prefix: &(impl fmt::Display + ?Sized),
) -> Result<Option<bool>, ConvertError> {
    match get(obj, key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => {
            let field = field_name(prefix, key);
            Err(ConvertError::new(&field, format!("`{field}` must be a boolean")))
        }
    }
}

fn not_a_string(prefix: &(impl fmt::Display + ?Sized), key: &str) -> ConvertError {
    let field = field_name(prefix, key);
    ConvertError::new(&field, format!("`{field}` must be a string"))
}

fn req_str<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    prefix: &(impl fmt::Display + ?Sized),
) -> Result<&'a str, ConvertError> {
    get_str(obj, key).ok_or_else(|| not_a_string(prefix, key))
}

fn req_string(
    obj: &mut Map<String, Value>,
    key: &str,
    prefix: &(impl fmt::Display + ?Sized),
) -> Result<String, ConvertError> {
    take_str(obj, key).ok_or_else(|| not_a_string(prefix, key))
}

/// Client request body (Anthropic Messages) → IR.
pub fn decode_request<'a>(body: impl Into<RequestBody<'a>>) -> Result<Request, ConvertError> {
    let body = body.into();
    if let Some(request) = body.text().and_then(plain_request) {
        return Ok(request);
    }
    decode_parsed(body)
}

/// `decode_request` through a parse of the whole body (for every request `plain_request` does
/// not match, and for the words of every error).
pub(super) fn decode_parsed(body: RequestBody<'_>) -> Result<Request, ConvertError> {
    let ObjectWithSchemas { object: mut obj, mut schemas } = parse_object_keeping_schemas(body, TOOL_SCHEMAS)?;
    let mut losses = Vec::new();
    let m = Members::of(&mut obj);

    let model = match m.model {
        Some(Value::String(s)) => std::mem::take(s),
        Some(_) => return Err(ConvertError::new("model", "`model` must be a string")),
        None => return Err(ConvertError::new("model", "`model` is required")),
    };

    let system = decode_system(m.system, &mut losses)?;

    let messages_v = m.messages.ok_or_else(|| ConvertError::new("messages", "`messages` is required"))?;
    let messages_arr =
        messages_v.as_array_mut().ok_or_else(|| ConvertError::new("messages", "`messages` must be an array"))?;
    let mut messages = Vec::with_capacity(messages_arr.len());
    for (i, m) in messages_arr.iter_mut().enumerate() {
        let field = Path::Index(&Path::Key("messages"), i);
        let mo = as_object_mut(m, &field, "an object")?;
        let role = match get_str(mo, "role") {
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            Some("system") => Role::System,
            Some(other) => return Err(ConvertError::new(format!("{field}.role"), format!("unknown role '{other}'"))),
            None => return Err(ConvertError::new(format!("{field}.role"), "`role` is required")),
        };
        let content_field = Path::Member(&field, "content");
        let content = match get_mut(mo, "content") {
            Some(c) => decode_content(c, &content_field, &mut losses)?,
            None => return Err(ConvertError::new(content_field.to_string(), "`content` is required")),
        };
        messages.push(Message { role, content });
    }

    let tools = match m.tools {
        None => Vec::new(),
        Some(Value::Array(a)) => decode_tools(a, &mut schemas, &mut losses)?,
        Some(_) => return Err(ConvertError::new("tools", "`tools` must be an array")),
    };

    let (tool_choice, parallel_tool_calls) = match m.tool_choice {
        None => (None, None),
        Some(tc) => decode_tool_choice(tc)?,
    };

    let output_config = match m.output_config {
        None => None,
        Some(v) => Some(as_object(v, "output_config", "an object")?),
    };
    let effort = match output_config.and_then(|o| get(o, "effort")) {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(ConvertError::new("output_config.effort", "`output_config.effort` must be a string")),
    };
    let reasoning = decode_thinking(m.thinking, effort, &mut losses)?;

    let mut output_format = None;
    if let Some(f) = output_config.and_then(|o| get(o, "format")) {
        output_format = Some(decode_output_format(f, "output_config.format")?);
    } else if let Some(f) = m.output_format {
        // The structured-outputs beta (`structured-outputs-2025-11-13`) put it at the top level.
        output_format = Some(decode_output_format(f, "output_format")?);
    }

    let stop = match m.stop_sequences {
        None => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|s| s.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| ConvertError::new("stop_sequences", "`stop_sequences` must be an array of strings"))?,
        Some(_) => return Err(ConvertError::new("stop_sequences", "`stop_sequences` must be an array of strings")),
    };

    let user = match m.metadata {
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

    if m.context_management {
        losses.push(Loss::new(
            "context_management",
            "dropped: context management (server-side clearing of old thinking / tool results, compaction) only exists on Anthropic",
        ));
    }
    if m.mcp_servers {
        losses.push(Loss::new(
            "mcp_servers",
            "dropped: Anthropic's MCP connector (server-side MCP tools) has no equivalent",
        ));
    }
    if m.container {
        losses.push(Loss::new("container", "dropped: Anthropic code-execution containers have no equivalent"));
    }
    if m.service_tier {
        losses.push(Loss::new("service_tier", "dropped: Anthropic service tiers do not translate"));
    }

    Ok(Request {
        model,
        system,
        messages,
        tools,
        tool_choice,
        parallel_tool_calls,
        max_tokens: u64_member(m.max_tokens, "max_tokens")?,
        temperature: f64_member(m.temperature, "temperature")?,
        top_p: f64_member(m.top_p, "top_p")?,
        top_k: u64_member(m.top_k, "top_k")?,
        stop,
        stream: match m.stream {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(ConvertError::new("stream", "`stream` must be a boolean")),
        },
        include_usage: false,
        reasoning,
        user,
        output_format,
        include_encrypted_reasoning: false,
        prompt_cache_key: None,
        losses,
    })
}

fn decode_system(v: Option<&mut Value>, losses: &mut Vec<Loss>) -> Result<Vec<TextPart>, ConvertError> {
    let mut out = Vec::new();
    match v {
        None => {}
        Some(Value::String(s)) if s.is_empty() => {}
        Some(Value::String(s)) => out.push(TextPart { text: std::mem::take(s), cache_control: None }),
        Some(Value::Array(blocks)) => {
            for (i, b) in blocks.iter_mut().enumerate() {
                let field = Path::Index(&Path::Key("system"), i);
                let bo = as_object_mut(b, &field, "a text block")?;
                if get_str(bo, "type") != Some("text") {
                    return Err(ConvertError::new(field.to_string(), "system blocks must be text blocks"));
                }
                let text = req_string(bo, "text", &field)?;
                if text.starts_with(BILLING_HEADER_PREFIX) {
                    losses.push(Loss::new(
                        field.to_string(),
                        "dropped: Claude Code's attribution line (x-anthropic-billing-header) is meaningful only to Anthropic and would break the target's prompt-cache prefix",
                    ));
                    continue;
                }
                out.push(TextPart { text, cache_control: take(bo, "cache_control") });
            }
        }
        Some(_) => return Err(ConvertError::new("system", "`system` must be a string or an array of text blocks")),
    }
    Ok(out)
}

fn decode_content(v: &mut Value, field: &Path<'_>, losses: &mut Vec<Loss>) -> Result<Vec<Part>, ConvertError> {
    match v {
        Value::String(s) => Ok(vec![Part::Text(TextPart { text: std::mem::take(s), cache_control: None })]),
        Value::Array(blocks) => {
            let mut out = Vec::with_capacity(blocks.len());
            for (j, b) in blocks.iter_mut().enumerate() {
                if let Some(p) = decode_block(b, &Path::Index(field, j), losses)? {
                    out.push(p);
                }
            }
            Ok(out)
        }
        _ => Err(ConvertError::new(field.to_string(), "`content` must be a string or an array of content blocks")),
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

fn decode_block(b: &mut Value, field: &Path<'_>, losses: &mut Vec<Loss>) -> Result<Option<Part>, ConvertError> {
    let bo = as_object_mut(b, field, "a content block object")?;
    let ty = req_string(bo, "type", field)?;
    let part = match ty.as_str() {
        "text" => {
            Part::Text(TextPart { text: req_string(bo, "text", field)?, cache_control: take(bo, "cache_control") })
        }
        "image" => Part::Image(decode_image(bo, field)?),
        "document" => {
            let title = take_str(bo, "title");
            let source = decode_document_source(bo, field, losses)?;
            Part::Document { source, title }
        }
        "tool_use" => Part::ToolUse {
            id: req_string(bo, "id", field)?,
            name: req_string(bo, "name", field)?,
            input: take(bo, "input").unwrap_or_else(|| Value::Object(Map::new())),
            arguments: None,
        },
        "tool_result" => {
            let tool_use_id = req_string(bo, "tool_use_id", field)?;
            let content = match get_mut(bo, "content") {
                None => Vec::new(),
                Some(c) => decode_tool_result_content(c, &Path::Member(field, "content"), losses)?,
            };
            let is_error = opt_bool(bo, "is_error", field)?.unwrap_or(false);
            Part::ToolResult { tool_use_id, content, is_error }
        }
        "thinking" => {
            let text = take_str(bo, "thinking").unwrap_or_default();
            let signature = take_str(bo, "signature").filter(|s| !s.is_empty());
            match signature.as_deref().and_then(parse_reasoning_signature) {
                // Reasoning a Responses endpoint produced (its signature is ccmesh's carrier):
                // a reasoning item again, which only the Responses API receives.
                Some((id, encrypted)) => Part::ReasoningItem {
                    id,
                    summary: if text.is_empty() { Vec::new() } else { vec![text] },
                    encrypted_content: Some(encrypted),
                },
                None => Part::Thinking { text, signature },
            }
        }
        "redacted_thinking" => Part::RedactedThinking { data: req_string(bo, "data", field)? },
        "compaction" => {
            // Anthropic's compaction summary of the earlier conversation: keep its text.
            let text = take_str(bo, "content").unwrap_or_default();
            losses.push(Loss::new(field.to_string(), "compaction block kept as plain text"));
            if text.is_empty() {
                return Ok(None);
            }
            Part::Text(TextPart { text, cache_control: None })
        }
        "search_result" => {
            losses.push(Loss::new(
                field.to_string(),
                "search_result block kept as plain text (its citation metadata is lost)",
            ));
            Part::Text(TextPart { text: search_result_text(bo), cache_control: None })
        }
        t if SERVER_BLOCKS.contains(&t) => {
            losses
                .push(Loss::new(format!("{field} ({t})"), "dropped: Anthropic server-tool history has no equivalent"));
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

/// A block's `source` object, to take from.
fn source_of<'a>(bo: &'a mut Map<String, Value>, sf: &Path<'_>) -> Result<&'a mut Map<String, Value>, ConvertError> {
    match bo.get_mut("source") {
        Some(Value::Object(src)) => Ok(src),
        _ => Err(ConvertError::new(sf.to_string(), format!("`{sf}` must be an object"))),
    }
}

fn decode_image(bo: &mut Map<String, Value>, field: &Path<'_>) -> Result<Image, ConvertError> {
    let sf = Path::Member(field, "source");
    let src = source_of(bo, &sf)?;
    let kind = take_str(src, "type");
    match kind.as_deref() {
        Some("base64") => {
            Ok(Image::Base64 { media_type: req_string(src, "media_type", &sf)?, data: req_string(src, "data", &sf)? })
        }
        Some("url") => Ok(Image::Url { url: req_string(src, "url", &sf)? }),
        Some("file") => Err(ConvertError::new(
            sf.to_string(),
            "image source type 'file' (an Anthropic Files API file_id) cannot be converted: the target cannot read Anthropic files",
        )),
        other => {
            Err(ConvertError::new(format!("{sf}.type"), format!("unsupported image source type {}", shown(other))))
        }
    }
}

fn decode_document_source(
    bo: &mut Map<String, Value>,
    field: &Path<'_>,
    losses: &mut Vec<Loss>,
) -> Result<DocumentSource, ConvertError> {
    let sf = Path::Member(field, "source");
    let src = source_of(bo, &sf)?;
    let kind = take_str(src, "type");
    match kind.as_deref() {
        Some("base64") => Ok(DocumentSource::Base64 {
            media_type: req_string(src, "media_type", &sf)?,
            data: req_string(src, "data", &sf)?,
        }),
        Some("text") => Ok(DocumentSource::Text { text: req_string(src, "data", &sf)? }),
        Some("url") => Ok(DocumentSource::Url { url: req_string(src, "url", &sf)? }),
        Some("content") => {
            // Custom content documents: a list of text (and image) blocks.
            let mut texts = Vec::new();
            match get_mut(src, "content") {
                Some(Value::String(s)) => texts.push(std::mem::take(s)),
                Some(Value::Array(items)) => {
                    for (k, it) in items.iter_mut().enumerate() {
                        match it.get("type").and_then(Value::as_str) {
                            Some("text") => texts.push(it.get_mut("text").and_then(take_text).unwrap_or_default()),
                            _ => losses.push(Loss::new(
                                format!("{sf}.content[{k}]"),
                                "dropped: only the text blocks of a content document are kept",
                            )),
                        }
                    }
                }
                _ => {
                    return Err(ConvertError::new(
                        format!("{sf}.content"),
                        "`content` must be a string or an array of blocks",
                    ));
                }
            }
            Ok(DocumentSource::Text { text: texts.join("\n") })
        }
        Some("file") => Err(ConvertError::new(
            sf.to_string(),
            "document source type 'file' (an Anthropic Files API file_id) cannot be converted: the target cannot read Anthropic files",
        )),
        other => {
            Err(ConvertError::new(format!("{sf}.type"), format!("unsupported document source type {}", shown(other))))
        }
    }
}

fn decode_tool_result_content(
    v: &mut Value,
    field: &Path<'_>,
    losses: &mut Vec<Loss>,
) -> Result<Vec<ToolResultContent>, ConvertError> {
    match v {
        Value::String(s) => Ok(vec![ToolResultContent::Text(std::mem::take(s))]),
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (k, it) in items.iter_mut().enumerate() {
                let f = Path::Index(field, k);
                let io = as_object_mut(it, &f, "a content block object")?;
                let kind = take_str(io, "type");
                match kind.as_deref() {
                    Some("text") => out.push(ToolResultContent::Text(req_string(io, "text", &f)?)),
                    Some("image") => out.push(ToolResultContent::Image(decode_image(io, &f)?)),
                    Some("document") => match decode_document_source(io, &f, losses)? {
                        DocumentSource::Text { text } => out.push(ToolResultContent::Text(text)),
                        _ => losses.push(Loss::new(
                            f.to_string(),
                            "dropped: a non-text document inside a tool result has no equivalent (tool results carry text and images)",
                        )),
                    },
                    Some("search_result") => {
                        losses.push(Loss::new(f.to_string(), "search_result kept as plain text (its citation metadata is lost)"));
                        out.push(ToolResultContent::Text(search_result_text(io)));
                    }
                    other => losses.push(Loss::new(f.to_string(), format!("dropped: unsupported tool result block {}", shown(other)))),
                }
            }
            Ok(out)
        }
        _ => Err(ConvertError::new(field.to_string(), "tool result `content` must be a string or an array of blocks")),
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

fn decode_tools(arr: &mut [Value], schemas: &mut Schemas, losses: &mut Vec<Loss>) -> Result<Vec<Tool>, ConvertError> {
    let mut tools = Vec::with_capacity(arr.len());
    for (i, t) in arr.iter_mut().enumerate() {
        let field = Path::Index(&Path::Key("tools"), i);
        let to = as_object_mut(t, &field, "an object")?;
        let name = take_str(to, "name");
        let kind = take_str(to, "type");
        match kind.as_deref() {
            None | Some("custom") => {
                let name = name.ok_or_else(|| not_a_string(&field, "name"))?;
                let input_schema = match schemas.take(Place::Element(i), to.get_mut("input_schema")) {
                    Some(s) if s.is_object() => s,
                    Some(_) => {
                        return Err(ConvertError::new(
                            format!("{field}.input_schema"),
                            "`input_schema` must be an object",
                        ));
                    }
                    None => NO_PARAMETERS.clone(),
                };
                let description = take_str(to, "description");
                let strict = opt_bool(to, "strict", &field)?;
                tools.push(Tool { name, description, input_schema, strict, namespace: None });
            }
            Some(ty) if ty.starts_with("bash_") => {
                losses.push(Loss::new(
                    format!("{field} ({ty})"),
                    "converted to a function tool with the documented bash tool input schema",
                ));
                tools.push(Tool {
                    name: name.unwrap_or_else(|| "bash".to_string()),
                    description: Some("Run commands in a bash shell. State persists across calls; set `restart` to true to restart the shell.".to_string()),
                    input_schema: bash_tool_schema().into(),
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
                    name: name.unwrap_or_else(|| default_name.to_string()),
                    description: Some("View, create and edit text files: `view` a file or directory, `create` a file, `str_replace` an exact unique string, `insert` text after a line.".to_string()),
                    input_schema: text_editor_tool_schema(version).into(),
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
        other => {
            return Err(ConvertError::new("tool_choice.type", format!("unknown tool_choice type {}", shown(other))));
        }
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
        other => {
            Err(ConvertError::new(format!("{field}.type"), format!("unsupported output format type {}", shown(other))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::anthropic::tests::*;
    use serde_json::{Value, json};

    const CC_TURN1: &str =
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/clients/claude_code_2.1.197_turn1.json"));

    /// Errors and losses deep in a history name the exact place, written out from the path only
    /// when one is reported.
    #[test]
    fn errors_and_losses_name_their_place_in_the_request() {
        let image = |source: Value| json!({"type": "image", "source": source});
        let body = |blocks: Value| {
            serde_json::to_vec(&json!({"model": "m", "max_tokens": 10, "messages": [
                {"role": "user", "content": "hi"},
                {"role": "user", "content": [{"type": "text", "text": "x"},
                    {"type": "tool_result", "tool_use_id": "t1", "content": blocks}]}
            ]}))
            .unwrap()
        };
        let bad_image = body(json!([{"type": "text", "text": "a"}, image(json!({"type": "ftp"}))]));
        let e = decode_request(&bad_image).unwrap_err();
        assert_eq!(e.field, "messages[1].content[1].content[1].source.type");
        let no_text = body(json!([{"type": "text"}]));
        assert_eq!(decode_request(&no_text).unwrap_err().field, "messages[1].content[1].content[0].text");
        let odd = body(json!([{"type": "text", "text": "a"}, {"type": "video"}]));
        let losses = decode_request(&odd).unwrap().losses;
        assert_eq!(losses.iter().map(|l| l.field.as_str()).collect::<Vec<_>>(), ["messages[1].content[1].content[1]"]);
        let tools =
            serde_json::to_vec(&json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}],
            "tools": [{"name": "a", "input_schema": {"type": "object"}}, {"input_schema": {}}]}))
            .unwrap();
        assert_eq!(decode_request(&tools).unwrap_err().field, "tools[1].name");
    }

    #[test]
    fn decode_claude_code_turn1() {
        let body = fixture_body(CC_TURN1);
        let req = decode_request(&body).expect("decodes");
        // Tool schemas are kept intact, as the text the client sent.
        let raw: Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(req.tools.len(), 24);
        for (t, rt) in req.tools.iter().zip(raw["tools"].as_array().expect("tools")) {
            assert_eq!(*t.input_schema.value().unwrap(), rt["input_schema"]);
            assert!(matches!(t.input_schema, Schema::Text(_)), "{}: kept as the client's text", t.name);
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

    /// Every top-level member the decoder reads lands where it belongs; `null` reads as absent.
    #[test]
    fn every_top_level_member_is_read_and_null_is_absent() {
        let r = dec(json!({
            "model": "m", "messages": [{"role": "user", "content": "hi"}], "system": "be brief",
            "tools": [{"name": "t", "input_schema": {"type": "object"}}], "tool_choice": {"type": "any"},
            "output_config": {"effort": "high"}, "thinking": {"type": "enabled", "budget_tokens": 1024},
            "output_format": {"type": "json_schema", "schema": {"type": "object"}}, "stop_sequences": ["###"],
            "metadata": {"user_id": "u1"}, "max_tokens": 100, "temperature": 0.5, "top_p": 0.9, "top_k": 40,
            "stream": true, "context_management": {}, "mcp_servers": [], "container": "c", "service_tier": "auto"
        }));
        assert_eq!((r.model.as_str(), r.system[0].text.as_str(), r.messages.len()), ("m", "be brief", 1));
        assert_eq!((r.tools.len(), r.tool_choice), (1, Some(ToolChoice::Any)));
        let reasoning = r.reasoning.expect("reasoning");
        assert_eq!((reasoning.budget_tokens, reasoning.effort.as_deref()), (Some(1024), Some("high")));
        assert!(matches!(r.output_format, Some(OutputFormat::JsonSchema { .. })));
        assert_eq!((r.stop, r.user.as_deref()), (vec!["###".to_string()], Some("u1")));
        assert_eq!(
            (r.max_tokens, r.temperature, r.top_p, r.top_k, r.stream),
            (Some(100), Some(0.5), Some(0.9), Some(40), true)
        );
        let lost: Vec<&str> = r.losses.iter().map(|l| l.field.as_str()).collect();
        assert_eq!(lost, ["context_management", "mcp_servers", "container", "service_tier"]);

        let r = dec(json!({
            "model": "m", "messages": [], "system": null, "tools": null, "tool_choice": null,
            "output_config": null, "thinking": null, "output_format": null, "stop_sequences": null,
            "metadata": null, "max_tokens": null, "temperature": null, "top_p": null, "top_k": null,
            "stream": null, "context_management": null, "mcp_servers": null, "container": null, "service_tier": null
        }));
        assert!(r.system.is_empty() && r.tools.is_empty() && r.stop.is_empty() && r.losses.is_empty());
        assert_eq!((r.tool_choice, r.reasoning, r.output_format, r.user), (None, None, None, None));
        assert_eq!((r.max_tokens, r.temperature, r.top_p, r.top_k, r.stream), (None, None, None, None, false));
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
            dec_err(json!({"model": "m", "messages": [], "stream": "yes"})),
            dec_err(json!({"model": "m", "messages": [], "top_p": "high"})),
            dec_err(json!({"model": "m", "messages": [], "top_k": -1})),
            dec_err(json!({"model": "m", "messages": [], "stop_sequences": "###"})),
            dec_err(json!({"model": "m", "messages": [], "metadata": {"user_id": 7}})),
            dec_err(json!({"model": "m", "messages": [], "output_format": {"type": "text"}})),
            dec_err(json!({"model": "m", "messages": [], "tools": {}})),
            dec_err(json!({"model": "m", "messages": {}})),
            dec_err(json!({"model": null, "messages": []})),
            dec_err(json!({"model": 4, "messages": []})),
            dec_err(json!({"model": "m", "messages": [], "output_config": {"effort": 3}})),
        ];
        let shown: Vec<String> = errs.iter().map(|e| format!("{}: {}", e.field, e.message)).collect();
        insta::assert_json_snapshot!(shown);
        assert!(decode_request(b"{not json").is_err());
        assert!(decode_request(b"[1,2]").is_err());
    }

    #[test]
    fn a_thinking_block_carrying_responses_reasoning_becomes_that_reasoning_item() {
        let carried = reasoning_signature(Some("rs_7"), "gAAAAenc");
        let r = dec(json!({"model": "m", "max_tokens": 5, "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Plan the answer.", "signature": carried},
                {"type": "thinking", "thinking": "", "signature": reasoning_signature(None, "gAAAAtwo")},
                {"type": "thinking", "thinking": "Anthropic's own.", "signature": "EqQBCkYsig"},
                {"type": "text", "text": "Hello."}]},
            {"role": "user", "content": "again"}]}));
        assert_eq!(
            r.messages[1].content[..3],
            [
                Part::ReasoningItem {
                    id: Some("rs_7".into()),
                    summary: vec!["Plan the answer.".into()],
                    encrypted_content: Some("gAAAAenc".into())
                },
                Part::ReasoningItem { id: None, summary: Vec::new(), encrypted_content: Some("gAAAAtwo".into()) },
                Part::Thinking { text: "Anthropic's own.".into(), signature: Some("EqQBCkYsig".into()) },
            ]
        );
    }

    #[test]
    fn decode_system_string_and_empty_signature() {
        let r = dec(json!({"model": "m", "max_tokens": 5, "system": "be brief", "messages": [
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": ""}]},
        ]}));
        assert_eq!(r.system, vec![TextPart { text: "be brief".into(), cache_control: None }]);
        assert_eq!(r.messages[0].content, vec![Part::Thinking { text: "t".into(), signature: None }]);
    }
}
