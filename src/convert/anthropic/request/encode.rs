//! The IR to a request for an Anthropic upstream (or an Anthropic-compatible relay).

use serde_json::{Map, Value, json};

use super::{DEFAULT_MAX_TOKENS, MAX_DEFAULT_MAX_TOKENS, MIN_THINKING_BUDGET};
use crate::convert::ir::*;
use crate::protocol::json_write::{JsonObject, push_json_members, push_json_string, push_json_value};
use crate::protocol::lenient::arguments_object;

/// Anthropic tool-use ids must match `^[a-zA-Z0-9_-]+$`; some OpenAI-compatible vendors use
/// ids such as `functions.bash:0`. The same mapping is applied to `tool_use.id` and
/// `tool_result.tool_use_id`, so pairs still match.
fn sanitize_tool_id(id: &str) -> String {
    if id.is_empty() {
        return "toolu_missing_id".to_string();
    }
    id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
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

struct Turn {
    role: &'static str,
    blocks: Vec<Value>,
}

fn block_type(b: &Value) -> Option<&str> {
    b.get("type").and_then(Value::as_str)
}

fn image_block(img: &Image) -> Value {
    object([("type", Value::from("image")), ("source", image_source(img))])
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
        return Err(ConvertError::new(
            "messages",
            "the anthropic format needs at least one user or assistant message with content",
        ));
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
        Value::Array(
            turns
                .into_iter()
                .map(|t| object([("role", Value::from(t.role)), ("content", Value::Array(t.blocks))]))
                .collect(),
        ),
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

    // --- tools, written from the IR (`ToolOut`) rather than copied into the body
    let tools: Vec<ToolOut<'_>> = req.tools.iter().map(ToolOut::of).collect();
    if !req.tools.is_empty() {
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
                losses.push(Loss::new(
                    "output_format.description",
                    "dropped: Anthropic's output format has no description",
                ));
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

    let mut out = Vec::with_capacity(request_capacity(req));
    let mut written = Ok(());
    push_json_members(&mut out, body.iter(), |json| {
        if !tools.is_empty() {
            let mut list = json.list("tools");
            written = tools.iter().try_for_each(|tool| tool.write(list.object()));
            list.close();
        }
    });
    written.map_err(|e| ConvertError::new("body", e.to_string()))?;
    Ok(Encoded { body: out, losses })
}

struct ToolOut<'a> {
    name: &'a str,
    description: Option<&'a str>,
    input_schema: &'a Schema,
    /// Written only when true.
    strict: bool,
}

impl<'a> ToolOut<'a> {
    fn of(t: &'a Tool) -> Self {
        ToolOut {
            name: &t.name,
            description: t.description.as_deref(),
            input_schema: &t.input_schema,
            strict: t.strict == Some(true),
        }
    }

    fn write(&self, mut json: JsonObject<'_>) -> Result<(), serde_json::Error> {
        json.text("name", self.name);
        json.text_if("description", self.description);
        write_input_schema(self.input_schema, json.key("input_schema"))?;
        if self.strict {
            json.flag("strict", true);
        }
        json.close();
        Ok(())
    }
}

/// A tool's schema as Anthropic requires it, an object schema with `type: "object"` (added when
/// the schema names no type), written from the IR's schema without copying it. Text that names
/// its type goes as it is; anything else is read to be completed.
fn write_input_schema(schema: &Schema, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
    if let Schema::Text(_) = schema
        && schema.has_member("type")
    {
        schema.write_json(out);
        return Ok(());
    }
    let value = schema.value()?;
    match &*value {
        Value::Object(o) if o.contains_key("type") => push_json_value(out, &value),
        Value::Object(o) => {
            out.extend_from_slice(br#"{"type":"object""#);
            for (key, member) in o {
                out.push(b',');
                push_json_string(out, key);
                out.push(b':');
                push_json_value(out, member);
            }
            out.push(b'}');
        }
        _ => NO_PARAMETERS.write_json(out),
    }
    Ok(())
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
        Part::Image(img) => blocks.push(image_block(img)),
        Part::ToolUse { id, name, input, arguments } => {
            if tools_as_text {
                let args = arguments.clone().unwrap_or_else(|| input.to_string());
                blocks.push(text_block(&format!("[tool call {name} (id {id})] {args}"), None));
                return Ok(());
            }
            let input = match arguments_object(input, arguments.as_deref()) {
                Some(v) => v,
                None => {
                    losses.push(Loss::new(
                        field(),
                        "tool call arguments were not a JSON object; sent as {} (Anthropic tool input must be an object)",
                    ));
                    Value::Object(Map::new())
                }
            };
            blocks.push(object([
                ("type", Value::from("tool_use")),
                ("id", Value::from(sanitize_tool_id(id))),
                ("name", Value::from(name.as_str())),
                ("input", input),
            ]));
        }
        Part::ToolResult { tool_use_id, content, is_error } => {
            if tools_as_text {
                let err_note = if *is_error { " (error)" } else { "" };
                let text = tool_result_text(content);
                blocks.push(text_block(&format!("[tool result for {tool_use_id}{err_note}] {text}"), None));
                for c in content {
                    if let ToolResultContent::Image(img) = c {
                        blocks.push(image_block(img));
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
                            ToolResultContent::Image(img) => Some(image_block(img)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::anthropic::tests::*;
    use serde_json::{Value, json};

    const CODEX_CHAT: &str =
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/clients/codex_0.80.0_chat_turn2_tool.json"));

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
                input_schema: t["function"]["parameters"].clone().into(),
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
        assert_eq!(body["tools"][0]["input_schema"], *req.tools[0].input_schema.value().unwrap());
        assert!(body["tools"][0].get("strict").is_none());
        let mut shown = body.clone();
        shown["tools"] =
            json!(body["tools"].as_array().expect("tools").iter().map(|t| t["name"].clone()).collect::<Vec<_>>());
        insta::assert_json_snapshot!(json!({"body": shown, "losses": losses}));
    }

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
                input_schema: Value::Null.into(),
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
    fn tool_schemas_are_object_schemas_with_a_type_and_otherwise_sent_as_they_are() {
        let tool = |name: &str, input_schema: Value| Tool {
            name: name.into(),
            description: None,
            input_schema: input_schema.into(),
            strict: None,
            namespace: None,
        };
        let mut req = base_request(vec![msg(Role::User, vec![text("hi")])]);
        req.tools = vec![
            tool("untyped", json!({"properties": {"path": {"type": "string"}}, "required": ["path"]})),
            tool("typed", json!({"type": "object", "properties": {}, "additionalProperties": false})),
            tool("none", Value::Null),
        ];
        let (body, _) = enc(&req);
        assert_eq!(
            body["tools"][0]["input_schema"],
            json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
        );
        assert_eq!(body["tools"][1]["input_schema"], *req.tools[1].input_schema.value().unwrap());
        assert_eq!(body["tools"][2]["input_schema"], json!({"type": "object", "properties": {}}));
        assert!(body["tools"][0].get("strict").is_none(), "strict is sent only when the client asked for it");
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
}
