//! A Chat Completions request (Codex CLI's, an SDK's) to the IR.

use serde_json::{Value, json};

use super::super::{Obj, text};
use crate::convert::ir::*;
use crate::protocol::lenient::{
    count, get, get_mut, get_str, media_type_for_filename, parse_arguments, parse_data_url, take, take_str,
};

/// Top-level request fields this decoder reads or deliberately drops; anything else is dropped
/// with a `Loss` saying it is unknown.
const KNOWN_REQUEST_FIELDS: &[&str] = &[
    "model",
    "messages",
    "max_completion_tokens",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "stop",
    "n",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning_effort",
    "response_format",
    "stream",
    "stream_options",
    "user",
    "safety_identifier",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "metadata",
    "store",
    "service_tier",
    "prediction",
    "web_search_options",
    "modalities",
    "audio",
    "functions",
    "function_call",
    "verbosity",
    "prompt_cache_key",
    "prompt_cache_retention",
];

/// Where a request's tool schemas are, kept as the client's text (`ir::schema`): `parameters` in
/// a tool's `function`, or beside it in the flat shape some clients send.
const TOOL_SCHEMAS: SchemaPlaces =
    SchemaPlaces { list: "tools", member: "parameters", nested: false, wrapper: Some("function") };

/// Client request body (this protocol) -> IR. Malformed or unsupported-in-a-meaning-changing-way input
/// -> ConvertError naming the field (the gateway answers 400 with it).
pub fn decode_request<'a>(body: impl Into<RequestBody<'a>>) -> Result<Request, ConvertError> {
    let ObjectWithSchemas { object: mut o, mut schemas } = parse_object_keeping_schemas(body.into(), TOOL_SCHEMAS)?;
    let mut req = Request::default();
    let mut losses: Vec<Loss> = Vec::new();

    req.model = match get(&o, "model") {
        Some(Value::String(m)) => m.clone(),
        Some(_) => return Err(ConvertError::new("model", "`model` must be a string")),
        None => return Err(ConvertError::new("model", "`model` is required")),
    };

    // Meaning-changing features first, so the 400 names the real obstacle.
    if let Some(n) = get(&o, "n") {
        match count(n) {
            Some(1) => {}
            Some(n) => {
                return Err(ConvertError::new(
                    "n",
                    format!(
                        "`n` = {n} asks for {n} choices; a converted request yields exactly one choice, so `n` must be 1 or absent"
                    ),
                ));
            }
            None => return Err(ConvertError::new("n", "`n` must be a positive integer")),
        }
    }
    if let Some(m) = get(&o, "modalities") {
        let Some(list) = m.as_array() else {
            return Err(ConvertError::new("modalities", "`modalities` must be an array of strings"));
        };
        if list.iter().any(|x| x.as_str() == Some("audio")) {
            return Err(ConvertError::new(
                "modalities",
                "audio output (`modalities: [\"audio\"]`) cannot be converted: only OpenAI Chat endpoints produce audio",
            ));
        }
    }
    if get(&o, "audio").is_some() {
        return Err(ConvertError::new(
            "audio",
            "audio output (`audio`) cannot be converted: only OpenAI Chat endpoints produce audio",
        ));
    }
    if get(&o, "functions").is_some() || get(&o, "function_call").is_some() {
        let name = if get(&o, "functions").is_some() { "functions" } else { "function_call" };
        return Err(ConvertError::new(
            name,
            format!(
                "the deprecated `{name}` parameter cannot be converted: the answer could not be returned as a `function_call`; use `tools` and `tool_choice`"
            ),
        ));
    }

    // Messages.
    let messages = match get_mut(&mut o, "messages") {
        Some(Value::Array(a)) => a,
        Some(_) => return Err(ConvertError::new("messages", "`messages` must be an array")),
        None => return Err(ConvertError::new("messages", "`messages` is required")),
    };
    let mut md = MessageDecoder::default();
    for (i, m) in messages.iter_mut().enumerate() {
        md.message(i, m, &mut losses)?;
    }
    req.system = md.system;
    req.messages = md.out;

    // Sampling and limits.
    let max = get(&o, "max_completion_tokens").map(|v| ("max_completion_tokens", v));
    let max = max.or_else(|| get(&o, "max_tokens").map(|v| ("max_tokens", v)));
    if let Some((name, v)) = max {
        req.max_tokens =
            Some(count(v).ok_or_else(|| ConvertError::new(name, format!("`{name}` must be a non-negative integer")))?);
    }
    for (name, slot) in [("temperature", &mut req.temperature), ("top_p", &mut req.top_p)] {
        if let Some(v) = get(&o, name) {
            *slot = Some(v.as_f64().ok_or_else(|| ConvertError::new(name, format!("`{name}` must be a number")))?);
        }
    }
    if let Some(v) = get(&o, "top_k") {
        // Not OpenAI, but vLLM, Qwen and other Chat-compatible servers accept it.
        req.top_k = Some(count(v).ok_or_else(|| ConvertError::new("top_k", "`top_k` must be a non-negative integer"))?);
    }
    req.stop = match get(&o, "stop") {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|s| {
                s.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| ConvertError::new("stop", "`stop` must be a string or an array of strings"))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(ConvertError::new("stop", "`stop` must be a string or an array of strings")),
    };

    // Tools.
    if let Some(t) = get_mut(&mut o, "tools") {
        let Some(list) = t.as_array_mut() else {
            return Err(ConvertError::new("tools", "`tools` must be an array"));
        };
        for (k, tool) in list.iter_mut().enumerate() {
            if let Some(t) = decode_tool(k, tool, &mut schemas, &mut losses)? {
                req.tools.push(t);
            }
        }
    }
    if let Some(tc) = get(&o, "tool_choice") {
        req.tool_choice = Some(decode_tool_choice(tc, &mut req.tools)?);
    }
    if let Some(p) = get(&o, "parallel_tool_calls") {
        req.parallel_tool_calls = Some(
            p.as_bool()
                .ok_or_else(|| ConvertError::new("parallel_tool_calls", "`parallel_tool_calls` must be a boolean"))?,
        );
    }

    // Reasoning and output format.
    if let Some(e) = get(&o, "reasoning_effort") {
        let e =
            e.as_str().ok_or_else(|| ConvertError::new("reasoning_effort", "`reasoning_effort` must be a string"))?;
        req.reasoning =
            Some(Reasoning { budget_tokens: None, effort: Some(e.to_owned()), adaptive: false, summary: None });
    }
    if let Some(rf) = get(&o, "response_format") {
        req.output_format = Some(decode_response_format(rf)?);
    }

    // Streaming.
    if let Some(s) = get(&o, "stream") {
        req.stream = s.as_bool().ok_or_else(|| ConvertError::new("stream", "`stream` must be a boolean"))?;
    }
    req.include_usage = get(&o, "stream_options")
        .and_then(Value::as_object)
        .and_then(|so| get(so, "include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);

    // End user: `safety_identifier` is the newer name of `user`.
    req.user = get_str(&o, "safety_identifier").or_else(|| get_str(&o, "user")).map(str::to_owned);
    req.prompt_cache_key = get_str(&o, "prompt_cache_key").filter(|k| !k.is_empty()).map(str::to_owned);
    if get_str(&o, "safety_identifier").is_some() && get_str(&o, "user").is_some() {
        losses.push(Loss::new("user", "dropped: `safety_identifier` is sent as the end-user id"));
    }

    // Harmless fields the IR cannot carry.
    let dropped: &[(&str, &str)] = &[
        ("seed", "dropped: sampling seed (best-effort determinism) is not carried across formats"),
        ("presence_penalty", "dropped: no equivalent outside OpenAI Chat"),
        ("frequency_penalty", "dropped: no equivalent outside OpenAI Chat"),
        ("logit_bias", "dropped: token ids are model-specific"),
        ("top_logprobs", "dropped: log probabilities are not returned by converted endpoints"),
        ("prediction", "dropped: predicted outputs only speed up OpenAI Chat"),
        ("web_search_options", "dropped: the built-in web search is not available on the target endpoint"),
        ("verbosity", "dropped: no equivalent in the intermediate representation"),
        ("prompt_cache_key", "dropped: a caching hint only"),
        ("prompt_cache_retention", "dropped: a caching hint only"),
    ];
    for (name, note) in dropped {
        if get(&o, name).is_some() {
            losses.push(Loss::new(*name, *note));
        }
    }
    if get(&o, "logprobs").and_then(Value::as_bool) == Some(true) {
        losses.push(Loss::new("logprobs", "dropped: log probabilities are not returned by converted endpoints"));
    }
    if get(&o, "store").and_then(Value::as_bool) == Some(true) {
        losses.push(Loss::new("store", "dropped: the completion is not stored by a converted endpoint"));
    }
    if get(&o, "metadata").and_then(Value::as_object).is_some_and(|m| !m.is_empty()) {
        losses.push(Loss::new("metadata", "dropped: stored-completion metadata has no equivalent"));
    }
    if let Some(tier) = get_str(&o, "service_tier")
        && tier != "auto"
        && tier != "default"
    {
        losses.push(Loss::new("service_tier", format!("dropped: service tier '{tier}' has no equivalent")));
    }
    for key in o.keys() {
        if !KNOWN_REQUEST_FIELDS.contains(&key.as_str()) && !o.get(key).is_some_and(Value::is_null) {
            losses.push(Loss::new(key.clone(), "dropped: not an OpenAI Chat field the converter knows"));
        }
    }

    req.losses = losses;
    Ok(req)
}

/// Turns Chat messages into IR messages, one at a time.
#[derive(Default)]
struct MessageDecoder {
    system: Vec<TextPart>,
    out: Vec<Message>,
    /// A non-system message was seen: later system/developer messages stay in place.
    conversation_started: bool,
    /// The last IR message holds the results of `tool` messages (more may be appended).
    last_is_tool_results: bool,
    /// Legacy assistant `function_call`s: (name, synthesized id), for the `function` replies.
    function_calls: Vec<(String, String)>,
}

impl MessageDecoder {
    fn message(&mut self, i: usize, m: &mut Value, losses: &mut Vec<Loss>) -> Result<(), ConvertError> {
        let at = format!("messages[{i}]");
        let Some(o) = m.as_object_mut() else {
            return Err(ConvertError::new(at, "each message must be an object"));
        };
        let role = get_str(o, "role")
            .ok_or_else(|| ConvertError::new(format!("{at}.role"), "each message needs a string `role`"))?;
        if get(o, "name").is_some() && matches!(role, "system" | "developer" | "user" | "assistant") {
            losses.push(Loss::new(format!("{at}.name"), "dropped: participant names have no equivalent"));
        }
        let tool_results = self.last_is_tool_results;
        self.last_is_tool_results = false;
        match role {
            "system" | "developer" => {
                let parts = system_parts(get_mut(o, "content"), &format!("{at}.content"))?;
                if self.conversation_started {
                    let content = parts.into_iter().map(Part::Text).collect();
                    self.out.push(Message { role: Role::System, content });
                } else {
                    self.system.extend(parts);
                }
            }
            "user" => {
                self.conversation_started = true;
                let content = user_parts(get_mut(o, "content"), &format!("{at}.content"), losses)?;
                self.out.push(Message { role: Role::User, content });
            }
            "assistant" => {
                self.conversation_started = true;
                if get(o, "audio").is_some() {
                    losses.push(Loss::new(
                        format!("{at}.audio"),
                        "dropped: a reference to an earlier audio answer has no equivalent",
                    ));
                }
                let parts = self.assistant_parts(o, &at)?;
                if parts.is_empty() {
                    return Ok(());
                }
                match self.out.last_mut() {
                    Some(prev) if prev.role == Role::Assistant => {
                        // Codex CLI 0.80 shape: one turn split over two assistant messages.
                        let mut all = std::mem::take(&mut prev.content);
                        all.extend(parts);
                        let (tools, other): (Vec<Part>, Vec<Part>) =
                            all.into_iter().partition(|p| matches!(p, Part::ToolUse { .. }));
                        prev.content = other.into_iter().chain(tools).collect();
                    }
                    _ => self.out.push(Message { role: Role::Assistant, content: parts }),
                }
            }
            "tool" => {
                self.conversation_started = true;
                let id = get_str(o, "tool_call_id").map(str::to_owned).ok_or_else(|| {
                    ConvertError::new(format!("{at}.tool_call_id"), "a `tool` message needs a string `tool_call_id`")
                })?;
                let content = tool_result_content(get_mut(o, "content"), &format!("{at}.content"))?;
                self.push_result(tool_results, Part::ToolResult { tool_use_id: id, content, is_error: false });
            }
            "function" => {
                self.conversation_started = true;
                let name = get_str(o, "name").map(str::to_owned).ok_or_else(|| {
                    ConvertError::new(format!("{at}.name"), "a `function` message needs a string `name`")
                })?;
                let pos = self.function_calls.iter().rposition(|(n, _)| *n == name).ok_or_else(|| {
                    ConvertError::new(
                        at.clone(),
                        format!("a `function` message for '{name}' must follow an assistant `function_call`"),
                    )
                })?;
                let (_, id) = self.function_calls.remove(pos);
                let content = tool_result_content(get_mut(o, "content"), &format!("{at}.content"))?;
                self.push_result(tool_results, Part::ToolResult { tool_use_id: id, content, is_error: false });
            }
            other => return Err(ConvertError::new(format!("{at}.role"), format!("unknown role '{other}'"))),
        }
        Ok(())
    }

    /// Consecutive `tool` messages become one user message with several results.
    fn push_result(&mut self, append: bool, part: Part) {
        match self.out.last_mut() {
            Some(prev) if append && prev.role == Role::User => prev.content.push(part),
            _ => self.out.push(Message { role: Role::User, content: vec![part] }),
        }
        self.last_is_tool_results = true;
    }

    fn assistant_parts(&mut self, o: &mut Obj, at: &str) -> Result<Vec<Part>, ConvertError> {
        let mut parts = Vec::new();
        // DeepSeek / Qwen `reasoning_content` (vLLM and OpenRouter say `reasoning`): unsigned thinking.
        let reasoning = take_str(o, "reasoning_content").filter(|s| !s.is_empty());
        if let Some(r) = reasoning.or_else(|| take_str(o, "reasoning").filter(|s| !s.is_empty())) {
            parts.push(Part::Thinking { text: r, signature: None });
        }
        match get_mut(o, "content") {
            Some(Value::String(s)) if !s.is_empty() => parts.push(text(std::mem::take(s))),
            None | Some(Value::String(_)) => {}
            Some(Value::Array(items)) => {
                for (j, item) in items.iter_mut().enumerate() {
                    let f = format!("{at}.content[{j}]");
                    let io = part_object(item, &f)?;
                    let t = match get_str(io, "type") {
                        Some("text") => take_str(io, "text"),
                        Some("refusal") => take_str(io, "refusal"),
                        Some(other) => {
                            return Err(ConvertError::new(
                                f,
                                format!("unsupported assistant content part type '{other}'"),
                            ));
                        }
                        None => return Err(ConvertError::new(f, "content parts need a `type`")),
                    };
                    let t = t.ok_or_else(|| ConvertError::new(f, "the content part has no text"))?;
                    if !t.is_empty() {
                        parts.push(text(t));
                    }
                }
            }
            Some(_) => {
                return Err(ConvertError::new(format!("{at}.content"), "`content` must be a string, an array or null"));
            }
        }
        if let Some(r) = take_str(o, "refusal").filter(|s| !s.is_empty()) {
            parts.push(text(r));
        }
        if let Some(calls) = get_mut(o, "tool_calls") {
            let list = calls
                .as_array_mut()
                .ok_or_else(|| ConvertError::new(format!("{at}.tool_calls"), "`tool_calls` must be an array"))?;
            for (j, c) in list.iter_mut().enumerate() {
                parts.push(decode_history_tool_call(c, &format!("{at}.tool_calls[{j}]"))?);
            }
        }
        if let Some(fc) = get(o, "function_call").and_then(Value::as_object) {
            let name = get_str(fc, "name").ok_or_else(|| {
                ConvertError::new(format!("{at}.function_call.name"), "`function_call` needs a `name`")
            })?;
            let raw = get_str(fc, "arguments").unwrap_or_default();
            let id = format!("call_fn_{}", self.function_calls.len());
            self.function_calls.push((name.to_owned(), id.clone()));
            parts.push(Part::ToolUse {
                id,
                name: name.to_owned(),
                input: parse_arguments(raw),
                arguments: Some(raw.to_owned()),
            });
        }
        Ok(parts)
    }
}

fn decode_history_tool_call(c: &mut Value, at: &str) -> Result<Part, ConvertError> {
    let co = c.as_object_mut().ok_or_else(|| ConvertError::new(at, "tool calls must be objects"))?;
    if let Some(t) = get_str(co, "type")
        && t != "function"
    {
        return Err(ConvertError::new(
            format!("{at}.type"),
            format!("tool calls of type '{t}' cannot be converted: only function tool calls have an equivalent"),
        ));
    }
    let id = get_str(co, "id")
        .map(str::to_owned)
        .ok_or_else(|| ConvertError::new(format!("{at}.id"), "a tool call needs a string `id`"))?;
    let f = get_mut(co, "function")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| ConvertError::new(format!("{at}.function"), "a tool call needs a `function` object"))?;
    let name = get_str(f, "name")
        .map(str::to_owned)
        .ok_or_else(|| ConvertError::new(format!("{at}.function.name"), "a tool call needs a `name`"))?;
    let (input, arguments) = match get_mut(f, "arguments") {
        None => (Value::Object(Obj::new()), Some(String::new())),
        Some(Value::String(raw)) => {
            let raw = std::mem::take(raw);
            (parse_arguments(&raw), Some(raw))
        }
        // Not OpenAI, but some clients send the arguments as an object.
        Some(v) => (v.take(), None),
    };
    Ok(Part::ToolUse { id, name, input, arguments })
}

/// One element of a content array, which must be an object; `f` names it in errors.
fn part_object<'a>(item: &'a mut Value, f: &str) -> Result<&'a mut Obj, ConvertError> {
    item.as_object_mut().ok_or_else(|| ConvertError::new(f, "content parts must be objects"))
}

/// The `text` of a text content part, taken out of it.
fn part_text(io: &mut Obj, f: &str) -> Result<String, ConvertError> {
    take_str(io, "text").ok_or_else(|| ConvertError::new(f, "a text part needs `text`"))
}

/// `system` / `developer` content: a string or text parts.
fn system_parts(content: Option<&mut Value>, at: &str) -> Result<Vec<TextPart>, ConvertError> {
    match content {
        None => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![TextPart { text: std::mem::take(s), cache_control: None }]),
        Some(Value::Array(items)) => items
            .iter_mut()
            .enumerate()
            .map(|(j, item)| {
                let f = format!("{at}[{j}]");
                let io = part_object(item, &f)?;
                match get_str(io, "type") {
                    Some("text") => Ok(TextPart { text: part_text(io, &f)?, cache_control: take(io, "cache_control") }),
                    other => Err(ConvertError::new(
                        f,
                        format!(
                            "system and developer messages may only contain text parts (got '{}')",
                            other.unwrap_or("?")
                        ),
                    )),
                }
            })
            .collect(),
        Some(_) => Err(ConvertError::new(at, "`content` must be a string or an array of text parts")),
    }
}

fn user_parts(content: Option<&mut Value>, at: &str, losses: &mut Vec<Loss>) -> Result<Vec<Part>, ConvertError> {
    let items = match content {
        None => return Ok(Vec::new()),
        Some(Value::String(s)) => return Ok(vec![text(std::mem::take(s))]),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(ConvertError::new(at, "`content` must be a string or an array of content parts")),
    };
    let mut parts = Vec::with_capacity(items.len());
    for (j, item) in items.iter_mut().enumerate() {
        let f = format!("{at}[{j}]");
        let io = part_object(item, &f)?;
        match get_str(io, "type") {
            Some("text") => {
                // OpenRouter-style `cache_control` on Chat parts, kept for an Anthropic target.
                parts.push(Part::Text(TextPart { text: part_text(io, &f)?, cache_control: take(io, "cache_control") }));
            }
            Some("image_url") => parts.push(Part::Image(decode_image_part(io, &f, losses)?)),
            Some("file") => parts.push(decode_file_part(io, &f)?),
            Some("input_audio") => {
                return Err(ConvertError::new(
                    f,
                    "audio input (`input_audio`) cannot be converted: the target format accepts no audio",
                ));
            }
            Some(other) => return Err(ConvertError::new(f, format!("unsupported content part type '{other}'"))),
            None => return Err(ConvertError::new(f, "content parts need a `type`")),
        }
    }
    Ok(parts)
}

fn decode_image_part(io: &Obj, at: &str, losses: &mut Vec<Loss>) -> Result<Image, ConvertError> {
    let (url, detail) = match get(io, "image_url") {
        Some(Value::String(u)) => (u.as_str(), None),
        Some(Value::Object(iu)) => (
            get_str(iu, "url")
                .ok_or_else(|| ConvertError::new(format!("{at}.image_url.url"), "an image needs a `url`"))?,
            get_str(iu, "detail"),
        ),
        _ => {
            return Err(ConvertError::new(
                format!("{at}.image_url"),
                "an `image_url` part needs an `image_url` object",
            ));
        }
    };
    if let Some(d) = detail
        && d != "auto"
    {
        losses.push(Loss::new(format!("{at}.image_url.detail"), format!("dropped: detail '{d}' has no equivalent")));
    }
    image_from_url(url, &format!("{at}.image_url.url"))
}

fn image_from_url(url: &str, at: &str) -> Result<Image, ConvertError> {
    if url.starts_with("data:") {
        let (media_type, data) = parse_data_url(url).ok_or_else(|| {
            ConvertError::new(at, "an image data URL must be base64-encoded (`data:<type>;base64,...`)")
        })?;
        Ok(Image::Base64 { media_type, data })
    } else {
        Ok(Image::Url { url: url.to_owned() })
    }
}

fn decode_file_part(io: &Obj, at: &str) -> Result<Part, ConvertError> {
    let file = get(io, "file")
        .and_then(Value::as_object)
        .ok_or_else(|| ConvertError::new(format!("{at}.file"), "a `file` part needs a `file` object"))?;
    let filename = get_str(file, "filename").map(str::to_owned);
    if let Some(data) = get_str(file, "file_data") {
        let (media_type, data) = match parse_data_url(data) {
            Some(x) => x,
            // Raw base64 without the data-URL prefix: guess the type from the file name.
            None => (media_type_for_filename(filename.as_deref().unwrap_or_default()).to_owned(), data.to_owned()),
        };
        if media_type.starts_with("image/") {
            return Ok(Part::Image(Image::Base64 { media_type, data }));
        }
        return Ok(Part::Document { source: DocumentSource::Base64 { media_type, data }, title: filename });
    }
    if get(file, "file_id").is_some() {
        return Err(ConvertError::new(
            format!("{at}.file.file_id"),
            "a file given by `file_id` cannot be converted: it lives in OpenAI's file storage; send `file_data` instead",
        ));
    }
    Err(ConvertError::new(format!("{at}.file"), "a `file` part needs `file_data`"))
}

/// `tool` message content: a string or text parts (images accepted too, for lenient clients).
fn tool_result_content(content: Option<&mut Value>, at: &str) -> Result<Vec<ToolResultContent>, ConvertError> {
    match content {
        None => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![ToolResultContent::Text(std::mem::take(s))]),
        Some(Value::Array(items)) => items
            .iter_mut()
            .enumerate()
            .map(|(j, item)| {
                let f = format!("{at}[{j}]");
                let io = part_object(item, &f)?;
                match get_str(io, "type") {
                    Some("text") => Ok(ToolResultContent::Text(part_text(io, &f)?)),
                    Some("image_url") => {
                        let mut ignored = Vec::new();
                        Ok(ToolResultContent::Image(decode_image_part(io, &f, &mut ignored)?))
                    }
                    other => Err(ConvertError::new(
                        f,
                        format!("unsupported tool message content part type '{}'", other.unwrap_or("?")),
                    )),
                }
            })
            .collect(),
        Some(_) => Err(ConvertError::new(at, "`content` must be a string or an array of text parts")),
    }
}

fn decode_tool(
    k: usize,
    tool: &mut Value,
    schemas: &mut Schemas,
    losses: &mut Vec<Loss>,
) -> Result<Option<Tool>, ConvertError> {
    let at = format!("tools[{k}]");
    let o = tool.as_object_mut().ok_or_else(|| ConvertError::new(at.clone(), "each tool must be an object"))?;
    let kind = get_str(o, "type").unwrap_or("function");
    if kind != "function" {
        let name = get(o, kind).and_then(Value::as_object).and_then(|c| get_str(c, "name"));
        let label = name.map_or_else(|| kind.to_owned(), |n| format!("{kind} '{n}'"));
        losses.push(Loss::new(
            format!("{at} ({label})"),
            format!("dropped: '{kind}' tools have no equivalent on the target"),
        ));
        return Ok(None);
    }
    // Chat nests the definition in `function`; Codex 0.80 also repeats `name` at the top level,
    // and some clients send the flat (Responses-style) shape. Nested fields win.
    let f = get(o, "function").and_then(Value::as_object);
    let field = |key: &str| f.and_then(|f| get(f, key)).or_else(|| get(o, key));
    let name = field("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| ConvertError::new(format!("{at}.function.name"), "a function tool needs a `name`"))?;
    let description = field("description").and_then(Value::as_str).map(str::to_owned);
    let strict = field("strict").and_then(Value::as_bool);
    let in_function = get_mut(o, "function").and_then(Value::as_object_mut).and_then(|f| f.get_mut("parameters"));
    let input_schema = match schemas.take(Place::Wrapped(k), in_function) {
        Some(nested) => nested,
        None => schemas.take(Place::Element(k), o.get_mut("parameters")).unwrap_or_else(|| NO_PARAMETERS.clone()),
    };
    Ok(Some(Tool { name, description, input_schema, strict, namespace: None }))
}

fn decode_tool_choice(tc: &Value, tools: &mut Vec<Tool>) -> Result<ToolChoice, ConvertError> {
    match tc {
        Value::String(s) => match s.as_str() {
            "auto" => Ok(ToolChoice::Auto),
            "none" => Ok(ToolChoice::None),
            "required" => Ok(ToolChoice::Any),
            other => Err(ConvertError::new("tool_choice", format!("unknown tool_choice '{other}'"))),
        },
        Value::Object(o) => match get_str(o, "type") {
            Some("function") => {
                let name = get(o, "function")
                    .and_then(Value::as_object)
                    .and_then(|f| get_str(f, "name"))
                    .or_else(|| get_str(o, "name"))
                    .ok_or_else(|| {
                        ConvertError::new("tool_choice.function.name", "a named tool_choice needs `function.name`")
                    })?;
                Ok(ToolChoice::Tool(name.to_owned()))
            }
            Some("allowed_tools") => {
                // Restricting the callable tools is the same as offering only those tools.
                let at = get(o, "allowed_tools").and_then(Value::as_object).ok_or_else(|| {
                    ConvertError::new("tool_choice.allowed_tools", "`allowed_tools` needs an `allowed_tools` object")
                })?;
                let names: Vec<&str> = get(at, "tools")
                    .and_then(Value::as_array)
                    .map(|l| {
                        l.iter()
                            .filter_map(Value::as_object)
                            .filter_map(|t| {
                                get(t, "function")
                                    .and_then(Value::as_object)
                                    .and_then(|f| get_str(f, "name"))
                                    .or_else(|| get_str(t, "name"))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                tools.retain(|t| names.contains(&t.name.as_str()));
                match get_str(at, "mode") {
                    Some("required") => Ok(ToolChoice::Any),
                    _ => Ok(ToolChoice::Auto),
                }
            }
            Some(other) => Err(ConvertError::new(
                "tool_choice",
                format!("tool_choice of type '{other}' cannot be converted: only function tools have an equivalent"),
            )),
            None => Err(ConvertError::new("tool_choice", "an object tool_choice needs a `type`")),
        },
        _ => Err(ConvertError::new("tool_choice", "`tool_choice` must be a string or an object")),
    }
}

fn decode_response_format(rf: &Value) -> Result<OutputFormat, ConvertError> {
    let o =
        rf.as_object().ok_or_else(|| ConvertError::new("response_format", "`response_format` must be an object"))?;
    match get_str(o, "type") {
        Some("text") => Ok(OutputFormat::Text),
        Some("json_object") => Ok(OutputFormat::JsonObject),
        Some("json_schema") => {
            let js = get(o, "json_schema").and_then(Value::as_object).ok_or_else(|| {
                ConvertError::new(
                    "response_format.json_schema",
                    "a json_schema response_format needs a `json_schema` object",
                )
            })?;
            Ok(OutputFormat::JsonSchema {
                name: get_str(js, "name").unwrap_or("response").to_owned(),
                schema: get(js, "schema").cloned().unwrap_or_else(|| json!({})),
                strict: get(js, "strict").and_then(Value::as_bool),
                description: get_str(js, "description").map(str::to_owned),
            })
        }
        Some(other) => {
            Err(ConvertError::new("response_format.type", format!("unknown response_format type '{other}'")))
        }
        None => Err(ConvertError::new("response_format.type", "`response_format` needs a `type`")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::convert::openai_chat::tests::*;
    use insta::assert_json_snapshot;
    use serde_json::{Value, json};

    const CODEX_080: &str =
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/clients/codex_0.80.0_chat_turn2_tool.json"));

    #[test]
    fn decode_codex_080_fixture() {
        let req = dec(&body_of(CODEX_080));
        // The tool call and its preamble text (two assistant messages) become one turn, text first.
        assert_eq!(req.messages.len(), 5);
        let turn = &req.messages[3];
        assert_eq!(turn.role, Role::Assistant);
        assert!(matches!(&turn.content[0], Part::Text(t) if t.text == "Calling shell."));
        assert!(matches!(&turn.content[1], Part::ToolUse { name, .. } if name == "shell"));
        assert!(
            matches!(&req.messages[4].content[0], Part::ToolResult { tool_use_id, .. } if tool_use_id == "call_mockee1ccc8dd07141b28abf7cba")
        );
        assert_eq!(req.tools.len(), 6);
        assert_eq!(req.tools[0].strict, Some(false));
        // Every function's schema is kept as the text Codex sent.
        assert!(req.tools.iter().all(|t| matches!(t.input_schema, Schema::Text(_))), "{:?}", req.tools);
        assert_json_snapshot!("decode_request_codex_080", j_req(&req));
    }

    #[test]
    fn decode_system_and_developer() {
        let req = dec(&json!({
            "model": "gpt-4o",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "developer", "content": [{"type": "text", "text": "Answer in French."}, {"type": "text", "text": "No emoji."}]},
                {"role": "user", "content": "Hi", "name": "alice"},
                {"role": "developer", "content": "From now on, answer in German."},
                {"role": "user", "content": "Hallo"}
            ]
        }));
        assert_eq!(req.system.len(), 3);
        assert_eq!(req.messages[1].role, Role::System);
        assert_json_snapshot!("decode_request_system_developer", j_req(&req));
    }

    #[test]
    fn decode_user_parts() {
        let req = dec(&json!({
            "model": "gpt-4o",
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "What is in these?", "cache_control": {"type": "ephemeral"}},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "high"}},
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ", "detail": "auto"}},
                {"type": "file", "file": {"filename": "report.pdf", "file_data": "data:application/pdf;base64,JVBERi0x"}},
                {"type": "file", "file": {"filename": "notes.txt", "file_data": "aGVsbG8="}}
            ]}]
        }));
        assert_json_snapshot!("decode_request_user_parts", j_req(&req));
    }

    #[test]
    fn file_part_without_data_url_takes_its_media_type_from_the_name() {
        // This codec read `x.json` as application/octet-stream; the Responses codec knew JSON.
        for (filename, want) in [("x.json", "application/json"), ("x.docx", "application/octet-stream")] {
            let req = dec(&json!({
                "model": "gpt-4o",
                "messages": [{"role": "user", "content": [
                    {"type": "file", "file": {"filename": filename, "file_data": "e30="}}
                ]}]
            }));
            let Part::Document { source: DocumentSource::Base64 { media_type, .. }, .. } = &req.messages[0].content[0]
            else {
                panic!("not a document: {:?}", req.messages[0].content[0]);
            };
            assert_eq!(media_type, want, "{filename}");
        }
    }

    #[test]
    fn decode_assistant_variants() {
        let req = dec(&json!({
            "model": "deepseek-reasoner",
            "messages": [
                {"role": "user", "content": "Weather in Paris and Rome?"},
                {"role": "assistant", "reasoning_content": "Two cities, two calls.", "content": "", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\""}},
                    {"id": "call_3", "type": "function", "function": {"name": "now", "arguments": ""}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
                {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "bad"}, {"type": "text", "text": " arguments"}]},
                {"role": "tool", "tool_call_id": "call_3", "content": "12:00"},
                {"role": "user", "content": "And?"},
                {"role": "assistant", "content": [{"type": "text", "text": "I "}, {"type": "refusal", "refusal": "cannot help with that."}]},
                {"role": "assistant", "content": null, "refusal": "Still no."}
            ]
        }));
        // Consecutive tool messages: one user message with three results.
        assert_eq!(req.messages[2].content.len(), 3);
        assert_eq!(req.messages.len(), 5);
        assert_json_snapshot!("decode_request_assistant_variants", j_req(&req));
    }

    #[test]
    fn decode_legacy_function_history() {
        let req = dec(&json!({
            "model": "gpt-4o",
            "messages": [
                {"role": "user", "content": "2+2?"},
                {"role": "assistant", "content": null, "function_call": {"name": "calc", "arguments": "{\"expr\":\"2+2\"}"}},
                {"role": "function", "name": "calc", "content": "4"}
            ]
        }));
        assert_json_snapshot!("decode_request_legacy_function", j_req(&req));
    }

    #[test]
    fn decode_params() {
        let req = dec(&json!({
            "model": "gpt-5",
            "messages": [{"role": "user", "content": "Give me JSON."}],
            "max_completion_tokens": 1000,
            "max_tokens": 5,
            "temperature": 0,
            "top_p": 0.9,
            "stop": "END",
            "n": 1,
            "tools": [{"type": "function", "function": {"name": "lookup", "description": "Look up", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"], "additionalProperties": false}, "strict": true}},
                      {"type": "function", "function": {"name": "no_params"}},
                      {"type": "custom", "custom": {"name": "apply_patch", "format": {"type": "grammar"}}}],
            "tool_choice": {"type": "function", "function": {"name": "lookup"}},
            "parallel_tool_calls": false,
            "reasoning_effort": "low",
            "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "description": "The answer", "schema": {"type": "object", "properties": {"a": {"type": "string"}}}, "strict": true}},
            "stream": true,
            "stream_options": {"include_usage": true},
            "user": "u-1",
            "safety_identifier": "hash-1",
            "seed": 7,
            "presence_penalty": 0.1,
            "frequency_penalty": 0.2,
            "logit_bias": {"50256": -100},
            "logprobs": true,
            "top_logprobs": 2,
            "metadata": {"k": "v"},
            "store": true,
            "service_tier": "flex",
            "prediction": {"type": "content", "content": "x"},
            "web_search_options": {},
            "modalities": ["text"],
            "verbosity": "low",
            "prompt_cache_key": "abc",
            "top_k": 40,
            "enable_thinking": true,
            "frequency": null
        }));
        assert_eq!(req.temperature, Some(0.0));
        assert_eq!(req.max_tokens, Some(1000));
        assert_json_snapshot!("decode_request_params", j_req(&req));
    }

    #[test]
    fn decode_tool_choice_variants() {
        let base = |tc: Value| {
            json!({"model": "m", "messages": [], "tool_choice": tc, "tools": [
                {"type": "function", "function": {"name": "a"}},
                {"type": "function", "function": {"name": "b"}}
            ]})
        };
        assert_eq!(dec(&base(json!("auto"))).tool_choice, Some(ToolChoice::Auto));
        assert_eq!(dec(&base(json!("none"))).tool_choice, Some(ToolChoice::None));
        assert_eq!(dec(&base(json!("required"))).tool_choice, Some(ToolChoice::Any));
        assert_eq!(
            dec(&base(json!({"type": "function", "function": {"name": "b"}}))).tool_choice,
            Some(ToolChoice::Tool("b".into()))
        );
        let r = dec(&base(
            json!({"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [{"type": "function", "function": {"name": "b"}}]}}),
        ));
        assert_eq!(r.tool_choice, Some(ToolChoice::Any));
        assert_eq!(r.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["b"]);
        assert_eq!(dec(&json!({"model": "m", "messages": [], "stop": ["a", "b"]})).stop, ["a", "b"]);
        assert_eq!(dec(&json!({"model": "m", "messages": [], "max_tokens": 64.0})).max_tokens, Some(64));
        assert!(
            dec(&json!({"model": "m", "messages": [], "response_format": {"type": "json_object"}})).output_format
                == Some(OutputFormat::JsonObject)
        );
        assert!(
            dec(&json!({"model": "m", "messages": [], "response_format": {"type": "text"}})).output_format
                == Some(OutputFormat::Text)
        );
    }

    #[test]
    fn decode_request_refusals() {
        let m = |extra: Value| {
            let mut v = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]});
            for (k, x) in extra.as_object().unwrap() {
                v[k] = x.clone();
            }
            v
        };
        let user = |part: Value| json!({"model": "m", "messages": [{"role": "user", "content": [part]}]});
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("not json", b"{".to_vec()),
            ("not an object", b"[]".to_vec()),
            ("no model", serde_json::to_vec(&json!({"messages": []})).unwrap()),
            ("no messages", serde_json::to_vec(&json!({"model": "m"})).unwrap()),
            ("n > 1", serde_json::to_vec(&m(json!({"n": 2}))).unwrap()),
            ("audio modality", serde_json::to_vec(&m(json!({"modalities": ["text", "audio"]}))).unwrap()),
            ("audio", serde_json::to_vec(&m(json!({"audio": {"voice": "alloy", "format": "mp3"}}))).unwrap()),
            ("functions", serde_json::to_vec(&m(json!({"functions": [{"name": "f"}]}))).unwrap()),
            ("function_call", serde_json::to_vec(&m(json!({"function_call": "auto"}))).unwrap()),
            ("input_audio", serde_json::to_vec(&user(json!({"type": "input_audio", "input_audio": {"data": "AAA", "format": "wav"}}))).unwrap()),
            ("file_id", serde_json::to_vec(&user(json!({"type": "file", "file": {"file_id": "file-abc"}}))).unwrap()),
            ("non-base64 data url", serde_json::to_vec(&user(json!({"type": "image_url", "image_url": {"url": "data:image/svg+xml,%3Csvg%3E"}}))).unwrap()),
            ("unknown part", serde_json::to_vec(&user(json!({"type": "video", "video": {}}))).unwrap()),
            ("unknown role", serde_json::to_vec(&json!({"model": "m", "messages": [{"role": "critic", "content": "x"}]})).unwrap()),
            ("tool without id", serde_json::to_vec(&json!({"model": "m", "messages": [{"role": "tool", "content": "x"}]})).unwrap()),
            ("custom tool call", serde_json::to_vec(&json!({"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "custom", "custom": {"name": "p", "input": "x"}}]}]})).unwrap()),
            ("orphan function message", serde_json::to_vec(&json!({"model": "m", "messages": [{"role": "function", "name": "f", "content": "x"}]})).unwrap()),
            ("custom tool_choice", serde_json::to_vec(&m(json!({"tool_choice": {"type": "custom", "custom": {"name": "p"}}}))).unwrap()),
            ("bad temperature", serde_json::to_vec(&m(json!({"temperature": "hot"}))).unwrap()),
            ("image in system", serde_json::to_vec(&json!({"model": "m", "messages": [{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "https://x"}}]}]})).unwrap()),
        ];
        let got: Vec<Value> = cases
            .iter()
            .map(|(name, body)| {
                let e = decode_request(body).unwrap_err();
                json!({"case": name, "field": e.field, "message": e.message})
            })
            .collect();
        assert_json_snapshot!("decode_request_refusals", got);
        assert_eq!(dec_err(&m(json!({"n": 3}))).field, "n");
    }
}
