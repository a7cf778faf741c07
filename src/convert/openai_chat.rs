//! OpenAI Chat Completions codec: `POST /v1/chat/completions` requests, `chat.completion`
//! responses, `chat.completion.chunk` streams (ending in `data: [DONE]`) and
//! `{"error":{"message","type","param","code"}}` error bodies, to and from the IR.
//!
//! The mapping tables, and the reason for every lossy or refused case, are in
//! `docs/protocols/openai_chat.md`. The decisions that shape the code:
//!
//! - **Decoding a client request** keeps everything the IR can hold and records a [`Loss`] for
//!   what it cannot (sampling hints such as `seed`, `logit_bias`, `store`); it refuses with a
//!   [`ConvertError`] only what would change the answer's meaning: `n > 1`, audio in or out,
//!   files by `file_id`, the deprecated `functions` API (the answer could not be returned in
//!   its `function_call` shape), custom (grammar) tool calls.
//! - **Consecutive assistant messages are merged** (Codex CLI 0.80 sends the tool call and its
//!   preamble text as two assistant messages before the `tool` message); the merged turn keeps
//!   the text before the tool calls, as one Chat assistant message would.
//! - **Encoding for a Chat upstream** aims at the widest set of OpenAI-compatible vendors
//!   (DeepSeek, GLM, Kimi, Qwen, vLLM): `system` rather than `developer`, string content when a
//!   message is only text, `max_tokens` unless the model is an OpenAI reasoning model, no
//!   `reasoning_content` in the history.
//! - **Streams** are translated chunk by chunk; the only state is the open blocks, the
//!   tool-call index map and the usage seen so far.

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::ir::*;
use crate::protocol::errors::{ErrorKind, OpenAiError, chat_error_chunk};
use crate::protocol::lenient::{
    count, data_url, get, get_str, filename_for_media_type, media_type_for_filename, parse_arguments, parse_data_url, truncate_marked,
};
use crate::protocol::sse::{SseEvent, write_event};

type Obj = Map<String, Value>;

/// Longest error-message excerpt taken from an unparseable upstream body, in characters.
const MAX_ERROR_TEXT: usize = 512;
/// OpenAI rejects a longer `user` (gateways such as Bifrost drop it for the same reason).
const MAX_USER_LEN: usize = 64;
/// The stream key of a legacy `delta.function_call` (it has no `index`).
const FUNCTION_CALL_KEY: u64 = u64::MAX;

// ---------------------------------------------------------------------------------------------
// Small JSON helpers
// ---------------------------------------------------------------------------------------------

fn count_field(o: &Obj, key: &str) -> Option<u64> {
    get(o, key).and_then(count)
}

fn text(t: impl Into<String>) -> Part {
    Part::Text(TextPart { text: t.into(), cache_control: None })
}

// ---------------------------------------------------------------------------------------------
// decode_request
// ---------------------------------------------------------------------------------------------

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

/// Client request body (this protocol) -> IR. Malformed or unsupported-in-a-meaning-changing-way input
/// -> ConvertError naming the field (the gateway answers 400 with it).
pub fn decode_request(body: &[u8]) -> Result<Request, ConvertError> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| ConvertError::new("body", format!("the request body is not valid JSON: {e}")))?;
    let Value::Object(o) = v else {
        return Err(ConvertError::new("body", "the request body must be a JSON object"));
    };
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
    let messages = match get(&o, "messages") {
        Some(Value::Array(a)) => a,
        Some(_) => return Err(ConvertError::new("messages", "`messages` must be an array")),
        None => return Err(ConvertError::new("messages", "`messages` is required")),
    };
    let mut md = MessageDecoder::default();
    for (i, m) in messages.iter().enumerate() {
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
    if let Some(t) = get(&o, "tools") {
        let Some(list) = t.as_array() else {
            return Err(ConvertError::new("tools", "`tools` must be an array"));
        };
        for (k, tool) in list.iter().enumerate() {
            if let Some(t) = decode_tool(k, tool, &mut losses)? {
                req.tools.push(t);
            }
        }
    }
    if let Some(tc) = get(&o, "tool_choice") {
        req.tool_choice = Some(decode_tool_choice(tc, &mut req.tools)?);
    }
    if let Some(p) = get(&o, "parallel_tool_calls") {
        req.parallel_tool_calls =
            Some(p.as_bool().ok_or_else(|| ConvertError::new("parallel_tool_calls", "`parallel_tool_calls` must be a boolean"))?);
    }

    // Reasoning and output format.
    if let Some(e) = get(&o, "reasoning_effort") {
        let e = e.as_str().ok_or_else(|| ConvertError::new("reasoning_effort", "`reasoning_effort` must be a string"))?;
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
    fn message(&mut self, i: usize, m: &Value, losses: &mut Vec<Loss>) -> Result<(), ConvertError> {
        let at = format!("messages[{i}]");
        let Some(o) = m.as_object() else {
            return Err(ConvertError::new(at, "each message must be an object"));
        };
        let role =
            get_str(o, "role").ok_or_else(|| ConvertError::new(format!("{at}.role"), "each message needs a string `role`"))?;
        if get(o, "name").is_some() && matches!(role, "system" | "developer" | "user" | "assistant") {
            losses.push(Loss::new(format!("{at}.name"), "dropped: participant names have no equivalent"));
        }
        let tool_results = self.last_is_tool_results;
        self.last_is_tool_results = false;
        match role {
            "system" | "developer" => {
                let parts = system_parts(get(o, "content"), &format!("{at}.content"))?;
                if self.conversation_started {
                    let content = parts.into_iter().map(Part::Text).collect();
                    self.out.push(Message { role: Role::System, content });
                } else {
                    self.system.extend(parts);
                }
            }
            "user" => {
                self.conversation_started = true;
                let content = user_parts(get(o, "content"), &format!("{at}.content"), losses)?;
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
                let id = get_str(o, "tool_call_id").ok_or_else(|| {
                    ConvertError::new(format!("{at}.tool_call_id"), "a `tool` message needs a string `tool_call_id`")
                })?;
                let content = tool_result_content(get(o, "content"), &format!("{at}.content"))?;
                self.push_result(
                    tool_results,
                    Part::ToolResult { tool_use_id: id.to_owned(), content, is_error: false },
                );
            }
            "function" => {
                self.conversation_started = true;
                let name = get_str(o, "name")
                    .ok_or_else(|| ConvertError::new(format!("{at}.name"), "a `function` message needs a string `name`"))?;
                let pos = self.function_calls.iter().rposition(|(n, _)| n == name).ok_or_else(|| {
                    ConvertError::new(
                        at.clone(),
                        format!("a `function` message for '{name}' must follow an assistant `function_call`"),
                    )
                })?;
                let (_, id) = self.function_calls.remove(pos);
                let content = tool_result_content(get(o, "content"), &format!("{at}.content"))?;
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

    fn assistant_parts(&mut self, o: &Obj, at: &str) -> Result<Vec<Part>, ConvertError> {
        let mut parts = Vec::new();
        // DeepSeek / Qwen `reasoning_content` (vLLM and OpenRouter say `reasoning`): unsigned thinking.
        let reasoning = get_str(o, "reasoning_content").filter(|s| !s.is_empty());
        if let Some(r) = reasoning.or_else(|| get_str(o, "reasoning").filter(|s| !s.is_empty())) {
            parts.push(Part::Thinking { text: r.to_owned(), signature: None });
        }
        match get(o, "content") {
            Some(Value::String(s)) if !s.is_empty() => parts.push(text(s.clone())),
            None | Some(Value::String(_)) => {}
            Some(Value::Array(items)) => {
                for (j, item) in items.iter().enumerate() {
                    let f = format!("{at}.content[{j}]");
                    let io = item.as_object().ok_or_else(|| ConvertError::new(f.clone(), "content parts must be objects"))?;
                    let t = match get_str(io, "type") {
                        Some("text") => get_str(io, "text"),
                        Some("refusal") => get_str(io, "refusal"),
                        Some(other) => {
                            return Err(ConvertError::new(f, format!("unsupported assistant content part type '{other}'")));
                        }
                        None => return Err(ConvertError::new(f, "content parts need a `type`")),
                    };
                    let t = t.ok_or_else(|| ConvertError::new(f, "the content part has no text"))?;
                    if !t.is_empty() {
                        parts.push(text(t));
                    }
                }
            }
            Some(_) => return Err(ConvertError::new(format!("{at}.content"), "`content` must be a string, an array or null")),
        }
        if let Some(r) = get_str(o, "refusal").filter(|s| !s.is_empty()) {
            parts.push(text(r));
        }
        if let Some(calls) = get(o, "tool_calls") {
            let list =
                calls.as_array().ok_or_else(|| ConvertError::new(format!("{at}.tool_calls"), "`tool_calls` must be an array"))?;
            for (j, c) in list.iter().enumerate() {
                parts.push(decode_history_tool_call(c, &format!("{at}.tool_calls[{j}]"))?);
            }
        }
        if let Some(fc) = get(o, "function_call").and_then(Value::as_object) {
            let name = get_str(fc, "name")
                .ok_or_else(|| ConvertError::new(format!("{at}.function_call.name"), "`function_call` needs a `name`"))?;
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

fn decode_history_tool_call(c: &Value, at: &str) -> Result<Part, ConvertError> {
    let co = c.as_object().ok_or_else(|| ConvertError::new(at, "tool calls must be objects"))?;
    if let Some(t) = get_str(co, "type")
        && t != "function"
    {
        return Err(ConvertError::new(
            format!("{at}.type"),
            format!("tool calls of type '{t}' cannot be converted: only function tool calls have an equivalent"),
        ));
    }
    let id = get_str(co, "id").ok_or_else(|| ConvertError::new(format!("{at}.id"), "a tool call needs a string `id`"))?;
    let f = get(co, "function")
        .and_then(Value::as_object)
        .ok_or_else(|| ConvertError::new(format!("{at}.function"), "a tool call needs a `function` object"))?;
    let name = get_str(f, "name").ok_or_else(|| ConvertError::new(format!("{at}.function.name"), "a tool call needs a `name`"))?;
    let (input, arguments) = match get(f, "arguments") {
        None => (Value::Object(Obj::new()), Some(String::new())),
        Some(Value::String(raw)) => (parse_arguments(raw), Some(raw.clone())),
        // Not OpenAI, but some clients send the arguments as an object.
        Some(v) => (v.clone(), None),
    };
    Ok(Part::ToolUse { id: id.to_owned(), name: name.to_owned(), input, arguments })
}

/// `system` / `developer` content: a string or text parts.
fn system_parts(content: Option<&Value>, at: &str) -> Result<Vec<TextPart>, ConvertError> {
    match content {
        None => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![TextPart { text: s.clone(), cache_control: None }]),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(j, item)| {
                let f = format!("{at}[{j}]");
                let io = item.as_object().ok_or_else(|| ConvertError::new(f.clone(), "content parts must be objects"))?;
                match get_str(io, "type") {
                    Some("text") => {
                        let t = get_str(io, "text").ok_or_else(|| ConvertError::new(f, "a text part needs `text`"))?;
                        Ok(TextPart { text: t.to_owned(), cache_control: get(io, "cache_control").cloned() })
                    }
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

fn user_parts(content: Option<&Value>, at: &str, losses: &mut Vec<Loss>) -> Result<Vec<Part>, ConvertError> {
    let items = match content {
        None => return Ok(Vec::new()),
        Some(Value::String(s)) => return Ok(vec![text(s.clone())]),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(ConvertError::new(at, "`content` must be a string or an array of content parts")),
    };
    let mut parts = Vec::with_capacity(items.len());
    for (j, item) in items.iter().enumerate() {
        let f = format!("{at}[{j}]");
        let io = item.as_object().ok_or_else(|| ConvertError::new(f.clone(), "content parts must be objects"))?;
        match get_str(io, "type") {
            Some("text") => {
                let t = get_str(io, "text").ok_or_else(|| ConvertError::new(f, "a text part needs `text`"))?;
                // OpenRouter-style `cache_control` on Chat parts, kept for an Anthropic target.
                parts.push(Part::Text(TextPart {
                    text: t.to_owned(),
                    cache_control: get(io, "cache_control").cloned(),
                }));
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
            get_str(iu, "url").ok_or_else(|| ConvertError::new(format!("{at}.image_url.url"), "an image needs a `url`"))?,
            get_str(iu, "detail"),
        ),
        _ => return Err(ConvertError::new(format!("{at}.image_url"), "an `image_url` part needs an `image_url` object")),
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
        let (media_type, data) = parse_data_url(url)
            .ok_or_else(|| ConvertError::new(at, "an image data URL must be base64-encoded (`data:<type>;base64,...`)"))?;
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
fn tool_result_content(content: Option<&Value>, at: &str) -> Result<Vec<ToolResultContent>, ConvertError> {
    match content {
        None => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![ToolResultContent::Text(s.clone())]),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(j, item)| {
                let f = format!("{at}[{j}]");
                let io = item.as_object().ok_or_else(|| ConvertError::new(f.clone(), "content parts must be objects"))?;
                match get_str(io, "type") {
                    Some("text") => {
                        let t = get_str(io, "text").ok_or_else(|| ConvertError::new(f, "a text part needs `text`"))?;
                        Ok(ToolResultContent::Text(t.to_owned()))
                    }
                    Some("image_url") => {
                        let mut ignored = Vec::new();
                        Ok(ToolResultContent::Image(decode_image_part(io, &f, &mut ignored)?))
                    }
                    other => {
                        Err(ConvertError::new(f, format!("unsupported tool message content part type '{}'", other.unwrap_or("?"))))
                    }
                }
            })
            .collect(),
        Some(_) => Err(ConvertError::new(at, "`content` must be a string or an array of text parts")),
    }
}

fn decode_tool(k: usize, tool: &Value, losses: &mut Vec<Loss>) -> Result<Option<Tool>, ConvertError> {
    let at = format!("tools[{k}]");
    let o = tool.as_object().ok_or_else(|| ConvertError::new(at.clone(), "each tool must be an object"))?;
    let kind = get_str(o, "type").unwrap_or("function");
    if kind != "function" {
        let name = get(o, kind).and_then(Value::as_object).and_then(|c| get_str(c, "name"));
        let label = name.map_or_else(|| kind.to_owned(), |n| format!("{kind} '{n}'"));
        losses
            .push(Loss::new(format!("{at} ({label})"), format!("dropped: '{kind}' tools have no equivalent on the target")));
        return Ok(None);
    }
    // Chat nests the definition in `function`; Codex 0.80 also repeats `name` at the top level,
    // and some clients send the flat (Responses-style) shape. Nested fields win.
    let f = get(o, "function").and_then(Value::as_object);
    let get = |key: &str| f.and_then(|f| get(f, key)).or_else(|| get(o, key));
    let name = get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ConvertError::new(format!("{at}.function.name"), "a function tool needs a `name`"))?;
    let description = get("description").and_then(Value::as_str).map(str::to_owned);
    let input_schema = get("parameters").cloned().unwrap_or_else(|| json!({"type": "object", "properties": {}}));
    let strict = get("strict").and_then(Value::as_bool);
    Ok(Some(Tool { name: name.to_owned(), description, input_schema, strict, namespace: None }))
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
                    .ok_or_else(|| ConvertError::new("tool_choice.function.name", "a named tool_choice needs `function.name`"))?;
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
    let o = rf.as_object().ok_or_else(|| ConvertError::new("response_format", "`response_format` must be an object"))?;
    match get_str(o, "type") {
        Some("text") => Ok(OutputFormat::Text),
        Some("json_object") => Ok(OutputFormat::JsonObject),
        Some("json_schema") => {
            let js = get(o, "json_schema").and_then(Value::as_object).ok_or_else(|| {
                ConvertError::new("response_format.json_schema", "a json_schema response_format needs a `json_schema` object")
            })?;
            Ok(OutputFormat::JsonSchema {
                name: get_str(js, "name").unwrap_or("response").to_owned(),
                schema: get(js, "schema").cloned().unwrap_or_else(|| json!({})),
                strict: get(js, "strict").and_then(Value::as_bool),
                description: get_str(js, "description").map(str::to_owned),
            })
        }
        Some(other) => Err(ConvertError::new("response_format.type", format!("unknown response_format type '{other}'"))),
        None => Err(ConvertError::new("response_format.type", "`response_format` needs a `type`")),
    }
}

// ---------------------------------------------------------------------------------------------
// encode_request
// ---------------------------------------------------------------------------------------------

#[derive(Serialize)]
struct ChatRequestOut<'a> {
    model: &'a str,
    messages: Vec<MessageOut>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    stop: Vec<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<Value>,
}

#[derive(Serialize)]
struct MessageOut {
    role: &'static str,
    /// `null` for an assistant message that only calls tools.
    content: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<String>,
}

/// Counts removed replayed-reasoning parts, reported as one `Loss` per kind.
#[derive(Default)]
struct Removed {
    first: Option<String>,
    count: usize,
}

impl Removed {
    fn add(&mut self, at: String) {
        self.first.get_or_insert(at);
        self.count += 1;
    }

    fn report(self, kind: &str, losses: &mut Vec<Loss>) {
        if let Some(first) = self.first {
            let more = if self.count > 1 { format!(" ({} in the conversation)", self.count) } else { String::new() };
            losses.push(Loss::new(
                format!("{first} ({kind})"),
                format!("removed{more}: an OpenAI Chat endpoint does not accept replayed reasoning"),
            ));
        }
    }
}

/// The model name without a vendor prefix (`openai/gpt-5` → `gpt-5`), lowercased.
fn bare_model(model: &str) -> String {
    model.rsplit('/').next().unwrap_or(model).to_ascii_lowercase()
}

/// Whether `model` is one of OpenAI's reasoning models, which refuse `max_tokens`.
fn is_openai_reasoning_model(model: &str) -> bool {
    let m = bare_model(model);
    ["o1", "o3", "o4", "gpt-5", "codex-"].iter().any(|p| m.starts_with(p))
}

/// Whether `model` is one of OpenAI's models without reasoning, which refuse `reasoning_effort`
/// (`gpt-5-chat` is the non-reasoning GPT-5).
fn is_openai_non_reasoning_model(model: &str) -> bool {
    let m = bare_model(model);
    ["gpt-4", "gpt-3.5", "chatgpt-", "gpt-5-chat"].iter().any(|p| m.starts_with(p))
}

/// Anthropic thinking budget → Chat `reasoning_effort`. Claude Code's budgets (4 000 "think",
/// 10 000 "think hard", 31 999 "ultrathink") land on low / medium / high.
fn effort_for_budget(budget: u64) -> &'static str {
    match budget {
        0..=4096 => "low",
        4097..=16384 => "medium",
        _ => "high",
    }
}

/// IR -> request body for an upstream of this protocol. `req.model` is already the model to send.
/// Anything the IR carries that this protocol cannot express: harmless -> dropped + a `Loss`;
/// meaning-changing -> ConvertError naming the feature and this format.
/// (The gateway always wants usage in streams: a Chat encoder sets stream_options.include_usage=true when streaming.)
pub fn encode_request(req: &Request) -> Result<Encoded, ConvertError> {
    let mut losses = Vec::new();
    let mut messages = Vec::new();

    let system: Vec<&str> = req.system.iter().map(|p| p.text.as_str()).collect();
    if !system.is_empty() {
        messages.push(MessageOut {
            role: "system",
            content: Value::String(system.join("\n\n")),
            tool_calls: None,
            tool_call_id: None,
        });
    }

    let mut thinking = Removed::default();
    let mut redacted = Removed::default();
    let mut reasoning_items = Removed::default();
    for (i, m) in req.messages.iter().enumerate() {
        match m.role {
            Role::System => {
                let mut texts = Vec::new();
                for (j, p) in m.content.iter().enumerate() {
                    match p {
                        Part::Text(t) => texts.push(t.text.as_str()),
                        other => losses.push(Loss::new(
                            format!("messages[{i}].content[{j}] ({})", part_kind(other)),
                            "dropped: a system message carries only text",
                        )),
                    }
                }
                if !texts.is_empty() {
                    messages.push(MessageOut {
                        role: "system",
                        content: Value::String(texts.join("\n\n")),
                        tool_calls: None,
                        tool_call_id: None,
                    });
                }
            }
            Role::User => encode_user_message(i, &m.content, &mut messages, &mut losses)?,
            Role::Assistant => {
                let mut texts = String::new();
                let mut calls = Vec::new();
                for (j, p) in m.content.iter().enumerate() {
                    let at = format!("messages[{i}].content[{j}]");
                    match p {
                        Part::Text(t) => texts.push_str(&t.text),
                        Part::ToolUse { id, name, input, arguments } => calls.push(json!({
                            "id": id,
                            "type": "function",
                            "function": {"name": name, "arguments": arguments_string(input, arguments.as_deref())},
                        })),
                        Part::Thinking { .. } => thinking.add(at),
                        Part::RedactedThinking { .. } => redacted.add(at),
                        Part::ReasoningItem { .. } => reasoning_items.add(at),
                        other => losses.push(Loss::new(
                            format!("{at} ({})", part_kind(other)),
                            "dropped: an OpenAI Chat assistant message carries only text and tool calls",
                        )),
                    }
                }
                if texts.is_empty() && calls.is_empty() {
                    continue;
                }
                messages.push(MessageOut {
                    role: "assistant",
                    content: if texts.is_empty() { Value::Null } else { Value::String(texts) },
                    tool_calls: (!calls.is_empty()).then_some(calls),
                    tool_call_id: None,
                });
            }
        }
    }
    thinking.report("thinking", &mut losses);
    redacted.report("redacted_thinking", &mut losses);
    reasoning_items.report("reasoning item", &mut losses);
    if req.messages.last().is_some_and(|m| m.role == Role::Assistant) {
        losses.push(Loss::new(
            format!("messages[{}]", req.messages.len().saturating_sub(1)),
            "an assistant prefill is sent as a finished assistant turn: OpenAI Chat does not continue it",
        ));
    }

    let tools: Vec<Value> = req
        .tools
        .iter()
        .map(|t| {
            let mut f = Obj::new();
            f.insert("name".into(), Value::String(t.name.clone()));
            if let Some(d) = &t.description {
                f.insert("description".into(), Value::String(d.clone()));
            }
            let schema = match &t.input_schema {
                Value::Null => json!({"type": "object", "properties": {}}),
                s => s.clone(),
            };
            f.insert("parameters".into(), schema);
            if let Some(s) = t.strict {
                f.insert("strict".into(), Value::Bool(s));
            }
            json!({"type": "function", "function": f})
        })
        .collect();

    // OpenAI rejects `tool_choice` without `tools` (e.g. when every tool was a dropped built-in).
    let tool_choice = match (&req.tool_choice, tools.is_empty()) {
        (None, _) | (Some(ToolChoice::Auto | ToolChoice::None), true) => None,
        (Some(c @ (ToolChoice::Any | ToolChoice::Tool(_))), true) => {
            losses.push(Loss::new("tool_choice", format!("dropped: {c:?} but no tool is left to call")));
            None
        }
        (Some(c), false) => Some(match c {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::Any => json!("required"),
            ToolChoice::None => json!("none"),
            ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
        }),
    };
    // OpenAI rejects `parallel_tool_calls` without `tools`; without tools it means nothing.
    let parallel_tool_calls = if tools.is_empty() { None } else { req.parallel_tool_calls };

    if req.top_k.is_some() {
        losses.push(Loss::new("top_k", "dropped: the OpenAI Chat format has no top_k"));
    }

    let mut reasoning_effort = None;
    if let Some(r) = &req.reasoning {
        if let Some(e) = &r.effort {
            reasoning_effort = Some(if e == "max" {
                losses.push(Loss::new("reasoning.effort", "effort 'max' is sent as reasoning_effort 'high'"));
                "high".to_owned()
            } else {
                e.clone()
            });
        } else if let Some(b) = r.budget_tokens {
            let e = effort_for_budget(b);
            losses.push(Loss::new(
                "reasoning.budget_tokens",
                format!("a thinking budget of {b} tokens is sent as reasoning_effort '{e}'"),
            ));
            reasoning_effort = Some(e.to_owned());
        }
        // Adaptive thinking with no effort: the model decides, which is what omitting
        // `reasoning_effort` asks for (and models without reasoning keep working).
        if r.summary.is_some() {
            losses.push(Loss::new("reasoning.summary", "dropped: OpenAI Chat returns no reasoning summaries"));
        }
    }
    if req.include_encrypted_reasoning {
        losses.push(Loss::new("include", "dropped: OpenAI Chat returns no encrypted reasoning"));
    }
    if let Some(e) = &reasoning_effort
        && is_openai_non_reasoning_model(&req.model)
    {
        losses.push(Loss::new(
            "reasoning",
            format!("dropped: reasoning_effort '{e}' is refused by '{}', which does not reason", req.model),
        ));
        reasoning_effort = None;
    }
    // OpenAI's reasoning models accept only `max_completion_tokens`; DeepSeek, GLM, Kimi, Qwen and
    // most other compatible vendors read only `max_tokens` (and ignore the other, falling back to
    // a small default), as do OpenAI's older models. Claude Code always sends an effort, so the
    // choice follows the model, not the presence of reasoning.
    let (max_tokens, max_completion_tokens) =
        if is_openai_reasoning_model(&req.model) { (None, req.max_tokens) } else { (req.max_tokens, None) };

    let response_format = req.output_format.as_ref().map(|f| match f {
        OutputFormat::Text => json!({"type": "text"}),
        OutputFormat::JsonObject => json!({"type": "json_object"}),
        OutputFormat::JsonSchema { name, schema, strict, description } => {
            let mut js = Obj::new();
            js.insert("name".into(), Value::String(if name.is_empty() { "response".into() } else { name.clone() }));
            if let Some(d) = description {
                js.insert("description".into(), Value::String(d.clone()));
            }
            js.insert("schema".into(), schema.clone());
            if let Some(s) = strict {
                js.insert("strict".into(), Value::Bool(*s));
            }
            json!({"type": "json_schema", "json_schema": js})
        }
    });

    let user = match req.user.as_deref() {
        Some(u) if u.chars().count() > MAX_USER_LEN => {
            losses.push(Loss::new("user", format!("dropped: longer than the {MAX_USER_LEN} characters OpenAI accepts")));
            None
        }
        u => u,
    };

    let out = ChatRequestOut {
        model: &req.model,
        messages,
        tools,
        tool_choice,
        parallel_tool_calls,
        max_tokens,
        max_completion_tokens,
        temperature: req.temperature,
        top_p: req.top_p,
        stop: req.stop.iter().map(String::as_str).collect(),
        reasoning_effort,
        response_format,
        user,
        stream: req.stream,
        stream_options: req.stream.then(|| json!({"include_usage": true})),
    };
    let body = serde_json::to_vec(&out).map_err(|e| ConvertError::new("body", format!("cannot serialize the request: {e}")))?;
    Ok(Encoded { body, losses })
}

fn part_kind(p: &Part) -> &'static str {
    match p {
        Part::Text(_) => "text",
        Part::Image(_) => "image",
        Part::ToolUse { .. } => "tool_use",
        Part::ToolResult { .. } => "tool_result",
        Part::Thinking { .. } => "thinking",
        Part::RedactedThinking { .. } => "redacted_thinking",
        Part::ReasoningItem { .. } => "reasoning item",
        Part::Document { .. } => "document",
    }
}

/// The raw argument string when the source had one, else the compact JSON of `input`.
fn arguments_string(input: &Value, raw: Option<&str>) -> String {
    match raw {
        Some(r) => r.to_owned(),
        None => serde_json::to_string(input).unwrap_or_else(|_| "{}".to_owned()),
    }
}

fn image_part(img: &Image) -> Value {
    let url = match img {
        Image::Base64 { media_type, data } => data_url(media_type, data),
        Image::Url { url } => url.clone(),
    };
    json!({"type": "image_url", "image_url": {"url": url}})
}

/// One IR user message → `tool` messages (one per result, first, so they directly follow the
/// assistant turn that called them), then one `user` message with the rest.
fn encode_user_message(
    i: usize,
    parts: &[Part],
    messages: &mut Vec<MessageOut>,
    losses: &mut Vec<Loss>,
) -> Result<(), ConvertError> {
    let mut moved: Vec<Value> = Vec::new();
    let mut rest: Vec<Value> = Vec::new();
    for (j, p) in parts.iter().enumerate() {
        let at = format!("messages[{i}].content[{j}]");
        match p {
            Part::ToolResult { tool_use_id, content, is_error } => {
                let mut texts = Vec::new();
                let mut images = Vec::new();
                for c in content {
                    match c {
                        ToolResultContent::Text(t) => texts.push(t.as_str()),
                        ToolResultContent::Image(img) => images.push(img),
                    }
                }
                let mut s = texts.join("\n\n");
                if !images.is_empty() {
                    let n = images.len();
                    let note = if n == 1 {
                        "[1 image attached in the next user message]".to_owned()
                    } else {
                        format!("[{n} images attached in the next user message]")
                    };
                    if !s.is_empty() {
                        s.push_str("\n\n");
                    }
                    s.push_str(&note);
                    moved.push(json!({"type": "text", "text": format!("Image output of tool call {tool_use_id}:")}));
                    moved.extend(images.into_iter().map(image_part));
                    losses.push(Loss::new(
                        format!("{at} (tool_result image)"),
                        "moved to a user message after the tool messages: Chat tool messages carry only text",
                    ));
                }
                if *is_error {
                    s = if s.is_empty() { "Error".to_owned() } else { format!("Error: {s}") };
                }
                messages.push(MessageOut {
                    role: "tool",
                    content: Value::String(s),
                    tool_calls: None,
                    tool_call_id: Some(tool_use_id.clone()),
                });
            }
            Part::Text(t) => rest.push(json!({"type": "text", "text": t.text})),
            Part::Image(img) => rest.push(image_part(img)),
            Part::Document { source, title } => match source {
                DocumentSource::Base64 { media_type, data } => {
                    let filename = title.clone().unwrap_or_else(|| filename_for_media_type(media_type).to_owned());
                    rest.push(json!({"type": "file", "file": {"filename": filename, "file_data": data_url(media_type, data)}}));
                }
                DocumentSource::Text { text } => {
                    let t = match title {
                        Some(title) => format!("{title}\n\n{text}"),
                        None => text.clone(),
                    };
                    rest.push(json!({"type": "text", "text": t}));
                    losses.push(Loss::new(format!("{at} (document)"), "a plain-text document is sent as a text part"));
                }
                DocumentSource::Url { .. } => {
                    return Err(ConvertError::new(
                        at,
                        "a document given by URL cannot be sent to an OpenAI Chat endpoint: file parts carry only inline base64 data",
                    ));
                }
            },
            other => losses.push(Loss::new(
                format!("{at} ({})", part_kind(other)),
                "dropped: a user message cannot carry it in the OpenAI Chat format",
            )),
        }
    }
    moved.extend(rest);
    if moved.is_empty() {
        return Ok(());
    }
    let all_text: Option<Vec<&str>> =
        moved.iter().map(|p| if p.get("type")? == "text" { p.get("text")?.as_str() } else { None }).collect();
    // Only text: one string, which every OpenAI-compatible vendor accepts.
    let content = match all_text {
        Some(texts) => Value::String(texts.join("\n\n")),
        None => Value::Array(moved),
    };
    messages.push(MessageOut { role: "user", content, tool_calls: None, tool_call_id: None });
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Responses: decode
// ---------------------------------------------------------------------------------------------

/// Chat `finish_reason` → IR, with two repairs common among compatible vendors: `stop` after
/// tool calls means `tool_calls`, and `stop` after a refusal is a refusal.
fn stop_reason(raw: Option<&str>, saw_tool: bool, saw_refusal: bool) -> Option<StopReason> {
    match raw? {
        "stop" | "end_turn" | "eos" if saw_tool => Some(StopReason::ToolUse),
        "stop" if saw_refusal => Some(StopReason::Refusal),
        "stop" | "end_turn" | "eos" => Some(StopReason::EndTurn),
        "length" | "max_tokens" => Some(StopReason::MaxTokens),
        "tool_calls" | "function_call" | "tool_use" => Some(StopReason::ToolUse),
        "content_filter" | "refusal" => Some(StopReason::Refusal),
        "stop_sequence" => Some(StopReason::StopSequence),
        _ => None,
    }
}

/// Chat usage → IR. `prompt_tokens` counts every input token, including cache reads (OpenAI
/// `prompt_tokens_details.cached_tokens`, DeepSeek `prompt_cache_hit_tokens`, Kimi top-level
/// `cached_tokens`) and cache writes (`prompt_tokens_details.cache_write_tokens`); the IR's
/// `input` is what remains.
fn decode_usage(u: &Obj) -> Usage {
    let details = |k: &str| get(u, k).and_then(Value::as_object);
    let prompt_details = details("prompt_tokens_details");
    let cached = prompt_details
        .and_then(|d| count_field(d, "cached_tokens"))
        .or_else(|| count_field(u, "prompt_cache_hit_tokens"))
        .or_else(|| count_field(u, "cached_tokens"));
    let written = prompt_details.and_then(|d| count_field(d, "cache_write_tokens"));
    let prompt = count_field(u, "prompt_tokens");
    Usage {
        input: prompt.map(|p| p.saturating_sub(cached.unwrap_or(0)).saturating_sub(written.unwrap_or(0))),
        output: count_field(u, "completion_tokens"),
        cache_read: cached,
        cache_write: written,
        reasoning: details("completion_tokens_details").and_then(|d| count_field(d, "reasoning_tokens")),
    }
}

/// Upstream non-streaming response body (this protocol) -> IR.
pub fn decode_response(body: &[u8]) -> Result<Response, ConvertError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ConvertError::new("body", format!("the upstream response is not valid JSON: {e}")))?;
    let Value::Object(o) = v else {
        return Err(ConvertError::new("body", "the upstream response is not a JSON object"));
    };
    if let Some(err) = get(&o, "error") {
        let message = err
            .as_object()
            .and_then(|e| get_str(e, "message"))
            .or_else(|| err.as_str())
            .unwrap_or("the upstream returned an error");
        return Err(ConvertError::new("error", message.to_owned()));
    }
    let choices = get(&o, "choices").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let choice = choices
        .iter()
        .filter_map(Value::as_object)
        .find(|c| count_field(c, "index").unwrap_or(0) == 0)
        .ok_or_else(|| ConvertError::new("choices", "the upstream response has no choices"))?;
    let id = get_str(&o, "id").unwrap_or_default().to_owned();
    let mut content = Vec::new();
    let mut saw_refusal = false;
    if let Some(msg) = get(choice, "message").and_then(Value::as_object) {
        let reasoning = get_str(msg, "reasoning_content").filter(|s| !s.is_empty());
        if let Some(r) = reasoning.or_else(|| get_str(msg, "reasoning").filter(|s| !s.is_empty())) {
            content.push(Part::Thinking { text: r.to_owned(), signature: None });
        }
        match get(msg, "content") {
            Some(Value::String(s)) if !s.is_empty() => content.push(text(s.clone())),
            Some(Value::Array(items)) => {
                // Some vendors (Mistral) answer with content parts.
                for item in items.iter().filter_map(Value::as_object) {
                    match get_str(item, "type") {
                        Some("text") | None => {
                            if let Some(t) = get_str(item, "text").filter(|t| !t.is_empty()) {
                                content.push(text(t));
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        if let Some(r) = get_str(msg, "refusal").filter(|s| !s.is_empty()) {
            saw_refusal = true;
            content.push(text(r));
        }
        let calls = get(msg, "tool_calls").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        for (j, c) in calls.iter().filter_map(Value::as_object).enumerate() {
            let f = get(c, "function").and_then(Value::as_object);
            let name = f.and_then(|f| get_str(f, "name")).unwrap_or_default();
            let (input, arguments) = match f.and_then(|f| get(f, "arguments")) {
                Some(Value::String(raw)) => (parse_arguments(raw), Some(raw.clone())),
                Some(v) => (v.clone(), None),
                None => (Value::Object(Obj::new()), Some(String::new())),
            };
            let call_id =
                get_str(c, "id").filter(|s| !s.is_empty()).map_or_else(|| synth_call_id(&id, j), str::to_owned);
            content.push(Part::ToolUse { id: call_id, name: name.to_owned(), input, arguments });
        }
        if let Some(fc) = get(msg, "function_call").and_then(Value::as_object) {
            let raw = get_str(fc, "arguments").unwrap_or_default();
            content.push(Part::ToolUse {
                id: synth_call_id(&id, calls.len()),
                name: get_str(fc, "name").unwrap_or_default().to_owned(),
                input: parse_arguments(raw),
                arguments: Some(raw.to_owned()),
            });
        }
    }
    let saw_tool = content.iter().any(|p| matches!(p, Part::ToolUse { .. }));
    Ok(Response {
        id,
        model: get_str(&o, "model").unwrap_or_default().to_owned(),
        stop_reason: stop_reason(get_str(choice, "finish_reason").filter(|r| !r.is_empty()), saw_tool, saw_refusal),
        stop_sequence: None,
        usage: get(&o, "usage").and_then(Value::as_object).map(decode_usage).unwrap_or_default(),
        created: count_field(&o, "created"),
        content,
    })
}

fn synth_call_id(response_id: &str, n: usize) -> String {
    let clean: String = response_id.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').collect();
    if clean.is_empty() { format!("call_{n}") } else { format!("call_{clean}_{n}") }
}

// ---------------------------------------------------------------------------------------------
// Responses: encode
// ---------------------------------------------------------------------------------------------

#[derive(Serialize)]
struct CompletionOut<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [CompletionChoiceOut; 1],
    usage: UsageOut,
}

#[derive(Serialize)]
struct CompletionChoiceOut {
    index: u32,
    message: CompletionMessageOut,
    logprobs: Option<()>,
    finish_reason: &'static str,
}

#[derive(Serialize)]
struct CompletionMessageOut {
    role: &'static str,
    content: Option<String>,
    refusal: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<ToolCallOut>>,
    /// Thinking, DeepSeek-style (OpenAI SDKs ignore the extra field; DeepSeek-aware clients show it).
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<String>,
}

#[derive(Serialize)]
struct ToolCallOut {
    id: String,
    r#type: &'static str,
    function: FunctionOut,
}

#[derive(Serialize)]
struct FunctionOut {
    name: String,
    arguments: String,
}

#[derive(Serialize)]
struct UsageOut {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
    prompt_tokens_details: PromptDetailsOut,
    completion_tokens_details: CompletionDetailsOut,
}

#[derive(Serialize)]
struct PromptDetailsOut {
    cached_tokens: u64,
    /// Only when the source reported cache writes (Anthropic `cache_creation_input_tokens`).
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_write_tokens: Option<u64>,
}

#[derive(Serialize)]
struct CompletionDetailsOut {
    reasoning_tokens: u64,
}

/// IR usage → Chat: `prompt_tokens` counts every input token — uncached, cache reads and
/// cache writes (billed input too) — `cached_tokens` the cache reads and `cache_write_tokens`
/// the cache writes.
fn usage_out(u: &Usage) -> UsageOut {
    let cached = u.cache_read.unwrap_or(0);
    let prompt = u.input.unwrap_or(0).saturating_add(cached).saturating_add(u.cache_write.unwrap_or(0));
    let completion = u.output.unwrap_or(0);
    UsageOut {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: prompt.saturating_add(completion),
        prompt_tokens_details: PromptDetailsOut { cached_tokens: cached, cache_write_tokens: u.cache_write },
        completion_tokens_details: CompletionDetailsOut { reasoning_tokens: u.reasoning.unwrap_or(0) },
    }
}

fn finish_reason(stop: Option<StopReason>, has_tool_calls: bool) -> &'static str {
    match stop {
        Some(StopReason::EndTurn | StopReason::StopSequence | StopReason::PauseTurn) | None if has_tool_calls => {
            "tool_calls"
        }
        Some(StopReason::EndTurn | StopReason::StopSequence | StopReason::PauseTurn) | None => "stop",
        Some(StopReason::MaxTokens) => "length",
        Some(StopReason::ToolUse) => "tool_calls",
        Some(StopReason::Refusal) => "content_filter",
    }
}

/// IR -> response body for a client of this protocol.
pub fn encode_response(resp: &Response, ctx: &EncodeContext) -> Vec<u8> {
    let mut content = String::new();
    let mut reasoning: Vec<&str> = Vec::new();
    let mut calls = Vec::new();
    for p in &resp.content {
        match p {
            Part::Text(t) => content.push_str(&t.text),
            Part::Thinking { text, .. } => reasoning.push(text),
            Part::ReasoningItem { summary, .. } => reasoning.extend(summary.iter().map(String::as_str)),
            Part::ToolUse { id, name, input, arguments } => calls.push(ToolCallOut {
                id: id.clone(),
                r#type: "function",
                function: FunctionOut { name: name.clone(), arguments: arguments_string(input, arguments.as_deref()) },
            }),
            _ => {}
        }
    }
    let id = if resp.id.is_empty() { format!("chatcmpl-{}", ctx.id_seed) } else { resp.id.clone() };
    let model = if resp.model.is_empty() { ctx.request_model.as_str() } else { resp.model.as_str() };
    let has_calls = !calls.is_empty();
    let out = CompletionOut {
        id: &id,
        object: "chat.completion",
        created: resp.created.unwrap_or(ctx.created),
        model,
        choices: [CompletionChoiceOut {
            index: 0,
            message: CompletionMessageOut {
                role: "assistant",
                content: if content.is_empty() && has_calls { None } else { Some(content) },
                refusal: None,
                tool_calls: has_calls.then_some(calls),
                reasoning_content: (!reasoning.is_empty()).then(|| reasoning.join("\n\n")),
            },
            logprobs: None,
            finish_reason: finish_reason(resp.stop_reason, has_calls),
        }],
        usage: usage_out(&resp.usage),
    };
    serde_json::to_vec(&out).unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

fn kind_from_status(status: u16) -> Option<ErrorKind> {
    Some(match status {
        400 | 409 | 422 => ErrorKind::InvalidRequest,
        401 => ErrorKind::Authentication,
        402 | 403 => ErrorKind::Permission,
        404 => ErrorKind::NotFound,
        413 => ErrorKind::RequestTooLarge,
        429 => ErrorKind::RateLimited,
        503 | 529 => ErrorKind::Overloaded,
        405..=499 => ErrorKind::InvalidRequest,
        500..=599 => ErrorKind::Api,
        _ => return None,
    })
}

fn kind_from_label(label: &str) -> Option<ErrorKind> {
    Some(match label {
        "invalid_request_error" | "context_length_exceeded" | "invalid_value" | "BadRequestError" => {
            ErrorKind::InvalidRequest
        }
        "authentication_error" | "invalid_api_key" | "AuthenticationError" => ErrorKind::Authentication,
        "permission_error" | "permission_denied" | "PermissionDeniedError" | "billing_error" => ErrorKind::Permission,
        "not_found_error" | "model_not_found" | "NotFoundError" => ErrorKind::NotFound,
        "request_too_large" => ErrorKind::RequestTooLarge,
        "rate_limit_error"
        | "rate_limit_exceeded"
        | "insufficient_quota"
        | "requests"
        | "tokens"
        | "RateLimitError" => ErrorKind::RateLimited,
        "overloaded_error"
        | "server_is_overloaded"
        | "engine_overloaded"
        | "slow_down"
        | "service_unavailable_error" => ErrorKind::Overloaded,
        "server_error" | "api_error" | "internal_error" | "InternalServerError" => ErrorKind::Api,
        _ => return None,
    })
}

/// The fields of an error object: message, type, code (string or number), param.
struct ErrorFields {
    message: Option<String>,
    kind_label: Option<String>,
    code: Option<String>,
    param: Option<String>,
}

fn error_fields(e: &Obj) -> ErrorFields {
    let code = match get(e, "code") {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    ErrorFields {
        message: get_str(e, "message").map(str::to_owned),
        kind_label: get_str(e, "type").filter(|s| !s.is_empty()).map(str::to_owned),
        code,
        param: get_str(e, "param").map(str::to_owned),
    }
}

/// Finds the error object in the shapes vendors use: `{"error":{...}}`, `{"error":"text"}`,
/// `[{"error":{...}}]` (Gemini), or a top-level `{"object":"error","message":...}` (vLLM).
fn find_error(v: &Value) -> Option<ErrorFields> {
    let v = match v {
        Value::Array(a) => a.first()?,
        v => v,
    };
    let o = v.as_object()?;
    match get(o, "error") {
        Some(Value::Object(e)) => Some(error_fields(e)),
        Some(Value::String(s)) => {
            let mut f = error_fields(o);
            f.message = Some(s.clone());
            Some(f)
        }
        _ if get_str(o, "message").is_some() || get_str(o, "detail").is_some() => {
            let mut f = error_fields(o);
            if f.message.is_none() {
                f.message = get_str(o, "detail").map(str::to_owned);
            }
            Some(f)
        }
        _ => None,
    }
}

fn error_kind(status: Option<u16>, f: &ErrorFields) -> ErrorKind {
    let labelled = f
        .code
        .as_deref()
        .and_then(|c| kind_from_label(c).or_else(|| c.parse::<u16>().ok().and_then(kind_from_status)))
        .or_else(|| f.kind_label.as_deref().and_then(kind_from_label));
    match status.and_then(kind_from_status) {
        // A 5xx that says it is overloaded is overloaded; otherwise the status decides.
        Some(ErrorKind::Api) if labelled == Some(ErrorKind::Overloaded) => ErrorKind::Overloaded,
        Some(k) => k,
        None => labelled.unwrap_or(ErrorKind::Api),
    }
}

/// Upstream error body of this protocol (any status) -> IR. Never fails: unknown shapes become
/// ErrorKind from the status with the body text (truncated) as message.
pub fn decode_error(status: u16, body: &[u8]) -> ErrorBody {
    let found = serde_json::from_slice::<Value>(body).ok().as_ref().and_then(find_error);
    match found {
        Some(f) => {
            let kind = error_kind(Some(status), &f);
            let message = f.message.clone().unwrap_or_else(|| truncate_marked(&String::from_utf8_lossy(body), MAX_ERROR_TEXT));
            ErrorBody { kind, message, code: f.code.or(f.kind_label), param: f.param }
        }
        None => {
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            let message = if text.is_empty() {
                format!("the upstream answered {status} with no body")
            } else {
                truncate_marked(text, MAX_ERROR_TEXT)
            };
            ErrorBody { kind: kind_from_status(status).unwrap_or(ErrorKind::Api), message, code: None, param: None }
        }
    }
}

/// Chat's error body. The OpenAI type of the kind, except that authentication and permission
/// failures, and an exhausted quota, are named as such: the many Chat-compatible vendors and
/// their clients know these types.
fn error_out(err: &ErrorBody) -> OpenAiError<'_> {
    let code = match (err.kind, err.code.as_deref()) {
        (ErrorKind::RateLimited, None | Some("rate_limit_error")) => Some("rate_limit_exceeded"),
        (_, c) => c,
    };
    let ty = match err.kind {
        ErrorKind::Authentication => "authentication_error",
        ErrorKind::Permission => "permission_error",
        ErrorKind::RateLimited if code == Some("insufficient_quota") => "insufficient_quota",
        kind => kind.openai_type(),
    };
    OpenAiError::new(&err.message, ty, err.param.as_deref(), code)
}

/// IR error -> this protocol's error body (the gateway keeps the upstream status).
pub fn encode_error(err: &ErrorBody) -> Vec<u8> {
    serde_json::to_vec(&error_out(err)).unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Stream decoding
// ---------------------------------------------------------------------------------------------

/// One tool call of the upstream stream: its Chat key (`tool_calls[].index`) and IR block.
#[derive(Debug)]
struct ToolSlot {
    key: u64,
    index: usize,
    id: String,
    open: bool,
}

/// Incremental: one upstream SSE event in, zero or more IR events out, immediately (never buffer the
/// stream; only small per-block state like open-block indexes, tool-call index maps, usage so far).
#[derive(Debug, Default)]
pub struct StreamDecoder {
    started: bool,
    id: String,
    next_index: usize,
    text: Option<usize>,
    thinking: Option<usize>,
    tools: Vec<ToolSlot>,
    /// The Chat key of the last tool-call delta (for vendors that omit `index`).
    last_tool_key: Option<u64>,
    /// A `finish_reason` arrived (its raw value).
    finish_reason: Option<String>,
    saw_refusal: bool,
    usage: Usage,
    finished: bool,
    ended: bool,
    failed: bool,
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn decode(&mut self, event: &SseEvent<'_>, out: &mut Vec<StreamEvent>) {
        if self.ended || self.failed {
            return;
        }
        let data = event.data.trim();
        if data.is_empty() {
            return;
        }
        if data == "[DONE]" {
            self.start(out, String::new(), String::new(), None);
            self.emit_finish(out);
            out.push(StreamEvent::End);
            self.ended = true;
            return;
        }
        let v: Value = match serde_json::from_str(data) {
            Ok(v) => v,
            Err(_) => {
                self.fail(
                    out,
                    ErrorKind::Api,
                    format!("the upstream sent a malformed stream chunk: {}", truncate_marked(data, MAX_ERROR_TEXT)),
                );
                return;
            }
        };
        let Value::Object(chunk) = v else {
            // Gemini's OpenAI layer reports errors as `[{"error":{...}}]`.
            let (kind, message) = match find_error(&v) {
                Some(f) => (error_kind(None, &f), f.message),
                None => (ErrorKind::Api, None),
            };
            let message = message.unwrap_or_else(|| {
                format!("the upstream sent an unexpected stream chunk: {}", truncate_marked(data, MAX_ERROR_TEXT))
            });
            self.fail(out, kind, message);
            return;
        };
        let is_error = get(&chunk, "error").is_some()
            || get_str(&chunk, "object") == Some("error")
            || get_str(&chunk, "type") == Some("error")
            || event.event == Some("error");
        if is_error {
            let f = find_error(&Value::Object(chunk)).unwrap_or(ErrorFields {
                message: None,
                kind_label: None,
                code: None,
                param: None,
            });
            let kind = error_kind(None, &f);
            self.fail(
                out,
                kind,
                f.message.unwrap_or_else(|| "the upstream reported an error in the stream".to_owned()),
            );
            return;
        }

        let choices = get(&chunk, "choices").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let usage = get(&chunk, "usage").and_then(Value::as_object);
        let model = get_str(&chunk, "model").unwrap_or_default();
        if !self.started && choices.is_empty() && usage.is_none() && model.is_empty() {
            // Azure's leading `prompt_filter_results` chunk: no id, model or content yet.
            return;
        }
        self.start(
            out,
            get_str(&chunk, "id").unwrap_or_default().to_owned(),
            model.to_owned(),
            count_field(&chunk, "created"),
        );
        if let Some(u) = usage {
            self.usage.merge(&decode_usage(u));
        }
        if self.finished {
            // Only a late usage chunk or [DONE] can follow the Finish.
            return;
        }
        for choice in choices.iter().filter_map(Value::as_object) {
            if count_field(choice, "index").unwrap_or(0) != 0 {
                continue;
            }
            if let Some(delta) = get(choice, "delta").and_then(Value::as_object) {
                self.delta(delta, out);
            }
            // Some vendors send `""` on every chunk: only a real reason ends the turn.
            if let Some(reason) = get_str(choice, "finish_reason").filter(|r| !r.is_empty()) {
                self.finish_reason = Some(reason.to_owned());
                self.close_all(out);
            }
        }
        // OpenAI's usage chunk (`choices: []`) follows the finish chunk: the turn is complete.
        if self.finish_reason.is_some() && choices.is_empty() && usage.is_some() {
            self.emit_finish(out);
        }
    }

    pub fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        if self.ended || self.failed {
            return;
        }
        // A finish_reason makes the stream complete even without `data: [DONE]`; a stream
        // cut before it is not (the gateway reports that).
        if self.finish_reason.is_some() {
            self.emit_finish(out);
            out.push(StreamEvent::End);
            self.ended = true;
        }
    }

    fn start(&mut self, out: &mut Vec<StreamEvent>, id: String, model: String, created: Option<u64>) {
        if self.started {
            return;
        }
        self.started = true;
        self.id.clone_from(&id);
        out.push(StreamEvent::Start { id, model, usage: Usage::default(), created });
    }

    fn fail(&mut self, out: &mut Vec<StreamEvent>, kind: ErrorKind, message: String) {
        self.failed = true;
        out.push(StreamEvent::Error { kind, message });
    }

    fn delta(&mut self, d: &Obj, out: &mut Vec<StreamEvent>) {
        let reasoning = get_str(d, "reasoning_content").filter(|s| !s.is_empty());
        if let Some(r) = reasoning.or_else(|| get_str(d, "reasoning").filter(|s| !s.is_empty())) {
            let index = match self.thinking {
                Some(i) => i,
                None => {
                    self.close_all(out);
                    let i = self.open(out, BlockStart::Thinking);
                    self.thinking = Some(i);
                    i
                }
            };
            out.push(StreamEvent::ThinkingDelta { index, text: r.to_owned() });
        }
        let content = get_str(d, "content").filter(|s| !s.is_empty());
        let refusal = get_str(d, "refusal").filter(|s| !s.is_empty());
        self.saw_refusal |= refusal.is_some();
        for t in [content, refusal].into_iter().flatten() {
            let index = match self.text {
                Some(i) => i,
                None => {
                    self.close_all(out);
                    let i = self.open(out, BlockStart::Text);
                    self.text = Some(i);
                    i
                }
            };
            out.push(StreamEvent::TextDelta { index, text: t.to_owned() });
        }
        if let Some(calls) = get(d, "tool_calls").and_then(Value::as_array) {
            for c in calls.iter().filter_map(Value::as_object) {
                let f = get(c, "function").and_then(Value::as_object);
                let name = f.and_then(|f| get_str(f, "name"));
                let args = f.and_then(|f| get_str(f, "arguments")).unwrap_or_default();
                let key = count_field(c, "index");
                self.tool_delta(key, get_str(c, "id"), name, args, out);
            }
        }
        if let Some(fc) = get(d, "function_call").and_then(Value::as_object) {
            let args = get_str(fc, "arguments").unwrap_or_default();
            self.tool_delta(Some(FUNCTION_CALL_KEY), None, get_str(fc, "name"), args, out);
        }
    }

    fn tool_delta(
        &mut self,
        key: Option<u64>,
        id: Option<&str>,
        name: Option<&str>,
        args: &str,
        out: &mut Vec<StreamEvent>,
    ) {
        let id = id.filter(|s| !s.is_empty());
        let new_key = || {
            self.tools.iter().map(|t| t.key.saturating_add(1)).filter(|k| *k != FUNCTION_CALL_KEY).max().unwrap_or(0)
        };
        let mut key = match key {
            Some(k) => k,
            // No `index`: a new id starts a new call, otherwise it continues the last one.
            None => match (id, self.last_tool_key) {
                (Some(id), _) if !self.tools.iter().any(|t| t.id == id) => new_key(),
                (Some(id), _) => self.tools.iter().find(|t| t.id == id).map_or(0, |t| t.key),
                (None, Some(k)) => k,
                (None, None) => 0,
            },
        };
        // Some vendors send every complete call with the same `index`: a different id is a new call.
        if let (Some(id), Some(slot)) = (id, self.tools.iter().find(|t| t.key == key))
            && slot.id != id
            && self.tools.iter().all(|t| t.id != id)
        {
            key = new_key();
        }
        self.last_tool_key = Some(key);
        if let Some(slot) = self.tools.iter().find(|t| t.key == key) {
            // A delta for a call already closed (text came in between) cannot be delivered.
            if slot.open && !args.is_empty() {
                out.push(StreamEvent::ToolArgsDelta { index: slot.index, partial_json: args.to_owned() });
            }
            return;
        }
        self.close_text_and_thinking(out);
        let call_id = id.map_or_else(|| synth_call_id(&self.id, self.tools.len()), str::to_owned);
        let index =
            self.open(out, BlockStart::ToolUse { id: call_id.clone(), name: name.unwrap_or_default().to_owned() });
        self.tools.push(ToolSlot { key, index, id: call_id, open: true });
        if !args.is_empty() {
            out.push(StreamEvent::ToolArgsDelta { index, partial_json: args.to_owned() });
        }
    }

    fn open(&mut self, out: &mut Vec<StreamEvent>, block: BlockStart) -> usize {
        let index = self.next_index;
        self.next_index += 1;
        out.push(StreamEvent::BlockStart { index, block });
        index
    }

    fn close_text_and_thinking(&mut self, out: &mut Vec<StreamEvent>) {
        for slot in [&mut self.text, &mut self.thinking] {
            if let Some(index) = slot.take() {
                out.push(StreamEvent::BlockStop { index });
            }
        }
    }

    /// Closes every open block, in index order.
    fn close_all(&mut self, out: &mut Vec<StreamEvent>) {
        let mut open: Vec<usize> = Vec::new();
        open.extend(self.text.take());
        open.extend(self.thinking.take());
        for t in self.tools.iter_mut().filter(|t| t.open) {
            t.open = false;
            open.push(t.index);
        }
        open.sort_unstable();
        out.extend(open.into_iter().map(|index| StreamEvent::BlockStop { index }));
    }

    fn emit_finish(&mut self, out: &mut Vec<StreamEvent>) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.close_all(out);
        let saw_tool = !self.tools.is_empty();
        let stop = match self.finish_reason.as_deref() {
            Some(raw) => stop_reason(Some(raw), saw_tool, self.saw_refusal),
            // `[DONE]` without a finish_reason: the turn is complete; say how it most likely ended.
            None if saw_tool => Some(StopReason::ToolUse),
            None => Some(StopReason::EndTurn),
        };
        out.push(StreamEvent::Finish { stop_reason: stop, stop_sequence: None, usage: self.usage });
    }
}

// ---------------------------------------------------------------------------------------------
// Stream encoding
// ---------------------------------------------------------------------------------------------

#[derive(Serialize)]
struct ChunkOut<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: Vec<ChunkChoiceOut<'a>>,
    /// Absent unless the client asked for usage; then `null` on every chunk but the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Option<UsageOut>>,
}

#[derive(Serialize)]
struct ChunkChoiceOut<'a> {
    index: u32,
    delta: DeltaOut<'a>,
    logprobs: Option<()>,
    finish_reason: Option<&'static str>,
}

#[derive(Default, Serialize)]
struct DeltaOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    /// Thinking, DeepSeek-style.
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<[ToolCallDeltaOut<'a>; 1]>,
}

#[derive(Serialize)]
struct ToolCallDeltaOut<'a> {
    index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    r#type: Option<&'static str>,
    function: FunctionDeltaOut<'a>,
}

#[derive(Serialize)]
struct FunctionDeltaOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    arguments: &'a str,
}

/// Incremental: IR events in, this protocol's SSE bytes out (complete events, `event:`/`data:` lines
/// exactly as the official API sends them), immediately.
#[derive(Debug)]
pub struct StreamEncoder {
    ctx: EncodeContext,
    id: String,
    model: String,
    created: u64,
    started: bool,
    /// IR block index → Chat `tool_calls[].index`, in the order the calls started.
    tool_calls: Vec<(usize, usize)>,
    usage: Usage,
    finished: bool,
    done: bool,
}

impl StreamEncoder {
    pub fn new(ctx: EncodeContext) -> Self {
        let id = format!("chatcmpl-{}", ctx.id_seed);
        let model = ctx.request_model.clone();
        let created = ctx.created;
        Self {
            ctx,
            id,
            model,
            created,
            started: false,
            tool_calls: Vec::new(),
            usage: Usage::default(),
            finished: false,
            done: false,
        }
    }

    pub fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        match event {
            StreamEvent::Start { id, model, usage, created } => {
                if self.started {
                    return;
                }
                if !id.is_empty() {
                    self.id.clone_from(id);
                }
                if !model.is_empty() {
                    self.model.clone_from(model);
                }
                if let Some(c) = created {
                    self.created = *c;
                }
                self.usage.merge(usage);
                self.ensure_started(out);
            }
            StreamEvent::BlockStart { index, block: BlockStart::ToolUse { id, name } } => {
                self.ensure_started(out);
                let n = self.tool_calls.len();
                self.tool_calls.push((*index, n));
                let delta = DeltaOut {
                    tool_calls: Some([ToolCallDeltaOut {
                        index: n,
                        id: Some(id),
                        r#type: Some("function"),
                        function: FunctionDeltaOut { name: Some(name), arguments: "" },
                    }]),
                    ..DeltaOut::default()
                };
                self.chunk(out, delta, None);
            }
            StreamEvent::BlockStart { .. } | StreamEvent::BlockStop { .. } | StreamEvent::SignatureDelta { .. } => {
                self.ensure_started(out);
            }
            StreamEvent::TextDelta { text, .. } => {
                self.ensure_started(out);
                if !text.is_empty() {
                    self.chunk(out, DeltaOut { content: Some(text), ..DeltaOut::default() }, None);
                }
            }
            StreamEvent::ThinkingDelta { text, .. } => {
                self.ensure_started(out);
                if !text.is_empty() {
                    self.chunk(out, DeltaOut { reasoning_content: Some(text), ..DeltaOut::default() }, None);
                }
            }
            StreamEvent::ToolArgsDelta { index, partial_json } => {
                self.ensure_started(out);
                let Some(&(_, n)) = self.tool_calls.iter().find(|(i, _)| i == index) else {
                    return;
                };
                if !partial_json.is_empty() {
                    let delta = DeltaOut {
                        tool_calls: Some([ToolCallDeltaOut {
                            index: n,
                            id: None,
                            r#type: None,
                            function: FunctionDeltaOut { name: None, arguments: partial_json },
                        }]),
                        ..DeltaOut::default()
                    };
                    self.chunk(out, delta, None);
                }
            }
            StreamEvent::Finish { stop_reason, usage, .. } => {
                self.ensure_started(out);
                self.usage.merge(usage);
                self.finish_chunks(out, *stop_reason);
            }
            StreamEvent::End => {
                self.ensure_started(out);
                self.finish_chunks(out, None);
                out.extend_from_slice(b"data: [DONE]\n\n");
                self.done = true;
            }
            StreamEvent::Error { kind, message } => {
                let err = ErrorBody { kind: *kind, message: message.clone(), code: None, param: None };
                chat_error_chunk(out, &error_out(&err));
                self.done = true;
            }
        }
    }

    /// The role chunk, once, before anything else.
    fn ensure_started(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        self.chunk(out, DeltaOut { role: Some("assistant"), content: Some(""), ..DeltaOut::default() }, None);
    }

    /// The finish chunk and, when the client asked for it, the usage chunk (once).
    fn finish_chunks(&mut self, out: &mut Vec<u8>, stop: Option<StopReason>) {
        if self.finished {
            return;
        }
        self.finished = true;
        let reason = finish_reason(stop, !self.tool_calls.is_empty());
        self.chunk(out, DeltaOut::default(), Some(reason));
        if self.ctx.include_usage {
            let chunk = ChunkOut {
                id: &self.id,
                object: "chat.completion.chunk",
                created: self.created,
                model: &self.model,
                choices: Vec::new(),
                usage: Some(Some(usage_out(&self.usage))),
            };
            write_event(out, None, &chunk);
        }
    }

    fn chunk(&self, out: &mut Vec<u8>, delta: DeltaOut<'_>, finish_reason: Option<&'static str>) {
        let chunk = ChunkOut {
            id: &self.id,
            object: "chat.completion.chunk",
            created: self.created,
            model: &self.model,
            choices: vec![ChunkChoiceOut { index: 0, delta, logprobs: None, finish_reason }],
            usage: self.ctx.include_usage.then_some(None),
        };
        write_event(out, None, &chunk);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::protocol::sse::SseScanner;
    use insta::{assert_json_snapshot, assert_snapshot};
    use proptest::prelude::*;

    const CODEX_080: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/clients/codex_0.80.0_chat_turn2_tool.json"
    ));
    const CLAUDE_CODE_TURN2: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/clients/claude_code_2.1.197_turn2_tool_result.json"
    ));

    // -----------------------------------------------------------------------------------------
    // Helpers: IR → JSON (for readable snapshots), decoding and encoding shortcuts.
    // -----------------------------------------------------------------------------------------

    fn body_of(fixture: &str) -> Value {
        serde_json::from_str::<Value>(fixture).unwrap()["body"].clone()
    }

    fn dec(v: &Value) -> Request {
        decode_request(&serde_json::to_vec(v).unwrap()).unwrap()
    }

    fn dec_err(v: &Value) -> ConvertError {
        decode_request(&serde_json::to_vec(v).unwrap()).unwrap_err()
    }

    fn enc(req: &Request) -> (Value, Vec<Loss>) {
        let e = encode_request(req).unwrap();
        (serde_json::from_slice(&e.body).unwrap(), e.losses)
    }

    fn ctx() -> EncodeContext {
        EncodeContext {
            request_model: "client-model".into(),
            include_usage: true,
            created: 1_700_000_000,
            id_seed: "seed123".into(),
            ..EncodeContext::default()
        }
    }

    fn j_image(i: &Image) -> Value {
        match i {
            Image::Base64 { media_type, data } => json!({"base64": {"media_type": media_type, "data": data}}),
            Image::Url { url } => json!({"url": url}),
        }
    }

    fn j_part(p: &Part) -> Value {
        match p {
            Part::Text(t) => match &t.cache_control {
                Some(c) => json!({"text": t.text, "cache_control": c}),
                None => json!({"text": t.text}),
            },
            Part::Image(i) => json!({"image": j_image(i)}),
            Part::ToolUse { id, name, input, arguments } => {
                json!({"tool_use": {"id": id, "name": name, "input": input, "arguments": arguments}})
            }
            Part::ToolResult { tool_use_id, content, is_error } => {
                let content: Vec<Value> = content
                    .iter()
                    .map(|c| match c {
                        ToolResultContent::Text(t) => json!({"text": t}),
                        ToolResultContent::Image(i) => json!({"image": j_image(i)}),
                    })
                    .collect();
                json!({"tool_result": {"tool_use_id": tool_use_id, "is_error": is_error, "content": content}})
            }
            Part::Thinking { text, signature } => json!({"thinking": {"text": text, "signature": signature}}),
            Part::RedactedThinking { data } => json!({"redacted_thinking": data}),
            Part::ReasoningItem { id, summary, encrypted_content } => {
                json!({"reasoning_item": {"id": id, "summary": summary, "encrypted_content": encrypted_content}})
            }
            Part::Document { source, title } => {
                let source = match source {
                    DocumentSource::Base64 { media_type, data } => {
                        json!({"base64": {"media_type": media_type, "data": data}})
                    }
                    DocumentSource::Url { url } => json!({"url": url}),
                    DocumentSource::Text { text } => json!({"text": text}),
                };
                json!({"document": {"source": source, "title": title}})
            }
        }
    }

    fn j_usage(u: &Usage) -> Value {
        json!({"input": u.input, "output": u.output, "cache_read": u.cache_read, "cache_write": u.cache_write, "reasoning": u.reasoning})
    }

    fn j_losses(l: &[Loss]) -> Value {
        Value::Array(l.iter().map(|l| json!({"field": l.field, "note": l.note})).collect())
    }

    fn j_req(r: &Request) -> Value {
        let role = |r: Role| match r {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::System => "system",
        };
        json!({
            "model": r.model,
            "system": r.system.iter().map(|t| j_part(&Part::Text(t.clone()))).collect::<Vec<_>>(),
            "messages": r.messages.iter().map(|m| json!({"role": role(m.role), "content": m.content.iter().map(j_part).collect::<Vec<_>>()})).collect::<Vec<_>>(),
            "tools": r.tools.iter().map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema, "strict": t.strict, "namespace": t.namespace})).collect::<Vec<_>>(),
            "tool_choice": r.tool_choice.as_ref().map(|c| format!("{c:?}")),
            "parallel_tool_calls": r.parallel_tool_calls,
            "max_tokens": r.max_tokens,
            "temperature": r.temperature,
            "top_p": r.top_p,
            "top_k": r.top_k,
            "stop": r.stop,
            "stream": r.stream,
            "include_usage": r.include_usage,
            "reasoning": r.reasoning.as_ref().map(|x| json!({"budget_tokens": x.budget_tokens, "effort": x.effort, "adaptive": x.adaptive, "summary": x.summary})),
            "user": r.user,
            "output_format": r.output_format.as_ref().map(|f| match f {
                OutputFormat::Text => json!("text"),
                OutputFormat::JsonObject => json!("json_object"),
                OutputFormat::JsonSchema { name, schema, strict, description } => json!({"json_schema": {"name": name, "schema": schema, "strict": strict, "description": description}}),
            }),
            "include_encrypted_reasoning": r.include_encrypted_reasoning,
            "losses": j_losses(&r.losses),
        })
    }

    fn j_resp(r: &Response) -> Value {
        json!({
            "id": r.id,
            "model": r.model,
            "content": r.content.iter().map(j_part).collect::<Vec<_>>(),
            "stop_reason": r.stop_reason.map(|s| format!("{s:?}")),
            "stop_sequence": r.stop_sequence,
            "usage": j_usage(&r.usage),
            "created": r.created,
        })
    }

    fn j_event(e: &StreamEvent) -> Value {
        match e {
            StreamEvent::Start { id, model, usage, created } => {
                json!({"start": {"id": id, "model": model, "usage": j_usage(usage), "created": created}})
            }
            StreamEvent::BlockStart { index, block } => {
                json!({"block_start": {"index": index, "block": format!("{block:?}")}})
            }
            StreamEvent::TextDelta { index, text } => json!({"text": {"index": index, "text": text}}),
            StreamEvent::ThinkingDelta { index, text } => json!({"thinking": {"index": index, "text": text}}),
            StreamEvent::SignatureDelta { index, signature } => {
                json!({"signature": {"index": index, "signature": signature}})
            }
            StreamEvent::ToolArgsDelta { index, partial_json } => {
                json!({"args": {"index": index, "partial_json": partial_json}})
            }
            StreamEvent::BlockStop { index } => json!({"block_stop": index}),
            StreamEvent::Finish { stop_reason, stop_sequence, usage } => {
                json!({"finish": {"stop_reason": stop_reason.map(|s| format!("{s:?}")), "stop_sequence": stop_sequence, "usage": j_usage(usage)}})
            }
            StreamEvent::End => json!("end"),
            StreamEvent::Error { kind, message } => json!({"error": {"kind": format!("{kind:?}"), "message": message}}),
        }
    }

    fn j_events(evs: &[StreamEvent]) -> Value {
        Value::Array(evs.iter().map(j_event).collect())
    }

    /// Feeds the chunks through the SSE scanner and the decoder, then signals EOF.
    fn decode_chunks(chunks: &[&[u8]]) -> Vec<StreamEvent> {
        let mut scanner = SseScanner::new();
        let mut d = StreamDecoder::new();
        let mut out = Vec::new();
        for c in chunks {
            scanner.feed(c, |e| d.decode(&e, &mut out));
        }
        d.finish(&mut out);
        out
    }

    fn encode_events(evs: &[StreamEvent], ctx: EncodeContext) -> String {
        let mut e = StreamEncoder::new(ctx);
        let mut out = Vec::new();
        for ev in evs {
            e.encode(ev, &mut out);
        }
        String::from_utf8(out).unwrap()
    }

    fn tp(t: &str) -> TextPart {
        TextPart { text: t.into(), cache_control: None }
    }

    fn msg(role: Role, content: Vec<Part>) -> Message {
        Message { role, content }
    }

    /// A small test-only reading of an Anthropic Messages body into the IR, so that the real
    /// Claude Code fixture can drive the Chat encoder (the real Anthropic codec lives elsewhere).
    fn anthropic_fixture_to_ir(b: &Value) -> Request {
        let blocks = |c: &Value| -> Vec<Part> {
            match c {
                Value::String(s) => vec![text(s.clone())],
                Value::Array(a) => a
                    .iter()
                    .map(|blk| match blk["type"].as_str().unwrap() {
                        "text" => Part::Text(TextPart {
                            text: blk["text"].as_str().unwrap().into(),
                            cache_control: blk.get("cache_control").cloned(),
                        }),
                        "thinking" => Part::Thinking {
                            text: blk["thinking"].as_str().unwrap().into(),
                            signature: blk["signature"].as_str().map(str::to_owned),
                        },
                        "tool_use" => Part::ToolUse {
                            id: blk["id"].as_str().unwrap().into(),
                            name: blk["name"].as_str().unwrap().into(),
                            input: blk["input"].clone(),
                            arguments: None,
                        },
                        "tool_result" => Part::ToolResult {
                            tool_use_id: blk["tool_use_id"].as_str().unwrap().into(),
                            content: vec![ToolResultContent::Text(blk["content"].as_str().unwrap().into())],
                            is_error: blk["is_error"].as_bool().unwrap_or(false),
                        },
                        other => panic!("fixture block {other}"),
                    })
                    .collect(),
                _ => panic!("fixture content"),
            }
        };
        Request {
            model: "deepseek-chat".into(),
            system: b["system"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| TextPart {
                    text: s["text"].as_str().unwrap().into(),
                    cache_control: s.get("cache_control").cloned(),
                })
                .collect(),
            messages: b["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| {
                    let role = match m["role"].as_str().unwrap() {
                        "user" => Role::User,
                        "assistant" => Role::Assistant,
                        _ => Role::System,
                    };
                    msg(role, blocks(&m["content"]))
                })
                .collect(),
            tools: b["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| Tool {
                    name: t["name"].as_str().unwrap().into(),
                    description: t["description"].as_str().map(str::to_owned),
                    input_schema: t["input_schema"].clone(),
                    strict: None,
                    namespace: None,
                })
                .collect(),
            max_tokens: b["max_tokens"].as_u64(),
            stream: true,
            reasoning: Some(Reasoning {
                budget_tokens: None,
                effort: b["output_config"]["effort"].as_str().map(str::to_owned),
                adaptive: true,
                summary: None,
            }),
            user: b["metadata"]["user_id"].as_str().map(str::to_owned),
            ..Request::default()
        }
    }

    // -----------------------------------------------------------------------------------------
    // decode_request
    // -----------------------------------------------------------------------------------------

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

    // -----------------------------------------------------------------------------------------
    // encode_request
    // -----------------------------------------------------------------------------------------

    #[test]
    fn encode_claude_code_fixture() {
        let ir = anthropic_fixture_to_ir(&body_of(CLAUDE_CODE_TURN2));
        let (body, losses) = enc(&ir);
        let msgs = body["messages"].as_array().unwrap();
        assert_eq!(msgs[0]["role"], "system");
        assert_eq!(msgs[2]["role"], "system", "Claude Code's in-conversation system entry stays in place");
        assert_eq!(
            msgs[3]["tool_calls"][0]["function"]["arguments"],
            "{\"command\":\"echo hello-from-tool\",\"description\":\"echo test\"}"
        );
        assert_eq!(msgs[4]["role"], "tool");
        assert_eq!(body["max_tokens"], 64000);
        assert_eq!(body["reasoning_effort"], "high");
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(body["tools"].as_array().unwrap().len(), 24);
        assert_json_snapshot!("encode_request_claude_code_turn2", json!({"body": body, "losses": j_losses(&losses)}));
    }

    fn feature_request() -> Request {
        Request {
            model: "glm-4.6".into(),
            system: vec![tp("You are a helpful assistant."), tp("Be brief.")],
            messages: vec![
                msg(
                    Role::User,
                    vec![
                        text("<system-reminder>ctx</system-reminder>"),
                        text("Describe these."),
                        Part::Image(Image::Base64 { media_type: "image/png".into(), data: "iVBORw0KGgo=".into() }),
                        Part::Image(Image::Url { url: "https://example.com/a.jpg".into() }),
                        Part::Document {
                            source: DocumentSource::Base64 {
                                media_type: "application/pdf".into(),
                                data: "JVBERi0x".into(),
                            },
                            title: None,
                        },
                        Part::Document {
                            source: DocumentSource::Text { text: "plain doc".into() },
                            title: Some("Notes".into()),
                        },
                    ],
                ),
                msg(
                    Role::Assistant,
                    vec![
                        Part::Thinking { text: "Let me look.".into(), signature: Some("sig".into()) },
                        Part::RedactedThinking { data: "opaque".into() },
                        text("Looking."),
                        Part::ToolUse {
                            id: "toolu_1".into(),
                            name: "read".into(),
                            input: json!({"path": "a.txt"}),
                            arguments: None,
                        },
                        Part::ToolUse {
                            id: "toolu_2".into(),
                            name: "shot".into(),
                            input: json!({}),
                            arguments: Some("{ \"full\": true }".into()),
                        },
                    ],
                ),
                msg(
                    Role::User,
                    vec![
                        Part::ToolResult {
                            tool_use_id: "toolu_1".into(),
                            content: vec![ToolResultContent::Text("no such file".into())],
                            is_error: true,
                        },
                        Part::ToolResult {
                            tool_use_id: "toolu_2".into(),
                            content: vec![
                                ToolResultContent::Text("captured".into()),
                                ToolResultContent::Image(Image::Base64 {
                                    media_type: "image/png".into(),
                                    data: "AAAA".into(),
                                }),
                            ],
                            is_error: false,
                        },
                        text("Thanks, continue."),
                    ],
                ),
                msg(Role::System, vec![text("Reminder: be brief.")]),
                msg(Role::Assistant, vec![Part::Thinking { text: "only thinking".into(), signature: None }]),
                msg(Role::User, vec![text("Go on.")]),
            ],
            tools: vec![
                Tool {
                    name: "read".into(),
                    description: Some("Read a file".into()),
                    input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
                    strict: Some(true),
                    namespace: None,
                },
                Tool {
                    name: "shot".into(),
                    description: None,
                    input_schema: Value::Null,
                    strict: None,
                    namespace: None,
                },
            ],
            tool_choice: Some(ToolChoice::Any),
            parallel_tool_calls: Some(false),
            max_tokens: Some(4096),
            temperature: Some(0.0),
            top_p: Some(0.5),
            top_k: Some(20),
            stop: vec!["STOP".into()],
            stream: true,
            include_usage: false,
            reasoning: Some(Reasoning { budget_tokens: Some(10_000), effort: None, adaptive: false, summary: None }),
            user: Some("{\"device_id\":\"4919455c86b761be3029337b7158aae0bf90b07f27f8c4250c7736e917107fec\"}".into()),
            output_format: Some(OutputFormat::JsonSchema {
                name: String::new(),
                schema: json!({"type": "object"}),
                strict: Some(true),
                description: None,
            }),
            include_encrypted_reasoning: false,
            losses: vec![],
        }
    }

    #[test]
    fn encode_features() {
        let (body, losses) = enc(&feature_request());
        let msgs = body["messages"].as_array().unwrap();
        // tool messages right after the assistant turn, then the moved image and the user text.
        let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "tool", "user", "system", "user"]);
        assert_eq!(msgs[3]["content"], "Error: no such file");
        assert_eq!(body["temperature"], 0.0);
        assert_eq!(body["max_tokens"], 4096);
        assert!(body.get("max_completion_tokens").is_none());
        assert_json_snapshot!("encode_request_features", json!({"body": body, "losses": j_losses(&losses)}));
    }

    #[test]
    fn encode_document_by_url_is_refused() {
        let mut req = feature_request();
        req.messages = vec![msg(
            Role::User,
            vec![Part::Document { source: DocumentSource::Url { url: "https://x/a.pdf".into() }, title: None }],
        )];
        let e = encode_request(&req).unwrap_err();
        assert_eq!(e.field, "messages[0].content[0]");
        assert_snapshot!("encode_request_document_url_refused", e.message);
    }

    #[test]
    fn encode_reasoning_and_token_parameter_table() {
        let case = |model: &str, reasoning: Option<Reasoning>| {
            let req = Request { model: model.into(), max_tokens: Some(100), reasoning, ..Request::default() };
            let (b, _) = enc(&req);
            let which = if b.get("max_tokens").is_some() { "max_tokens" } else { "max_completion_tokens" };
            (b.get("reasoning_effort").and_then(Value::as_str).map(str::to_owned), which)
        };
        let r = |budget: Option<u64>, effort: Option<&str>, adaptive: bool| {
            Some(Reasoning { budget_tokens: budget, effort: effort.map(str::to_owned), adaptive, summary: None })
        };
        assert_eq!(case("deepseek-chat", None), (None, "max_tokens"));
        assert_eq!(case("deepseek-reasoner", r(Some(4000), None, false)), (Some("low".into()), "max_tokens"));
        assert_eq!(case("glm-4.6", r(Some(10_000), None, false)), (Some("medium".into()), "max_tokens"));
        assert_eq!(case("kimi-k2", r(Some(31_999), None, false)), (Some("high".into()), "max_tokens"));
        assert_eq!(case("qwen3-max", r(None, None, true)), (None, "max_tokens"));
        assert_eq!(case("qwen3-max", r(None, Some("max"), true)), (Some("high".into()), "max_tokens"));
        assert_eq!(case("gpt-5", r(None, Some("minimal"), false)), (Some("minimal".into()), "max_completion_tokens"));
        assert_eq!(case("openai/o3-mini", None), (None, "max_completion_tokens"));
        assert_eq!(case("gpt-4o", r(Some(2048), None, false)), (None, "max_tokens"));
        assert_eq!(case("gpt-4.1", r(None, Some("high"), true)), (None, "max_tokens"));
    }

    #[test]
    fn encode_minimal_and_tool_choice() {
        let f = Tool {
            name: "f".into(),
            description: None,
            input_schema: json!({"type": "object"}),
            strict: None,
            namespace: None,
        };
        let req = Request {
            model: "m".into(),
            messages: vec![msg(Role::User, vec![text("hi")])],
            tools: vec![f],
            tool_choice: Some(ToolChoice::Tool("f".into())),
            parallel_tool_calls: Some(true),
            ..Request::default()
        };
        let (b, losses) = enc(&req);
        assert_eq!(
            b,
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                   "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
                   "tool_choice": {"type": "function", "function": {"name": "f"}}, "parallel_tool_calls": true})
        );
        assert!(losses.is_empty());
        let mut req = req;
        req.tool_choice = Some(ToolChoice::None);
        req.messages.push(msg(Role::Assistant, vec![text("Sure")]));
        let (b, losses) = enc(&req);
        assert_eq!(b["tool_choice"], "none");
        assert_eq!(losses[0].field, "messages[1]", "prefill noted");
        // Without tools, tool_choice and parallel_tool_calls are not sent (OpenAI refuses them).
        req.tools.clear();
        let (b, _) = enc(&req);
        assert!(b.get("tool_choice").is_none() && b.get("parallel_tool_calls").is_none());
        req.tool_choice = Some(ToolChoice::Any);
        let (b, losses) = enc(&req);
        assert!(b.get("tool_choice").is_none());
        assert!(losses.iter().any(|l| l.field == "tool_choice"));
    }

    // -----------------------------------------------------------------------------------------
    // decode_response
    // -----------------------------------------------------------------------------------------

    fn dresp(v: Value) -> Response {
        decode_response(&serde_json::to_vec(&v).unwrap()).unwrap()
    }

    #[test]
    fn decode_response_text_with_cache() {
        let r = dresp(json!({
            "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG", "object": "chat.completion", "created": 1741570283,
            "model": "gpt-4o-2024-08-06",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello there.", "refusal": null, "annotations": []}, "logprobs": null, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1117, "completion_tokens": 46, "total_tokens": 1163,
                      "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
                      "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
            "service_tier": "default", "system_fingerprint": "fp_fc9f1d7035"
        }));
        assert_eq!(r.usage.input, Some(93));
        assert_eq!(r.usage.cache_read, Some(1024));
        assert_json_snapshot!("decode_response_text_cache", j_resp(&r));
    }

    #[test]
    fn decode_response_tool_calls() {
        let r = dresp(json!({
            "id": "chatcmpl-abc", "object": "chat.completion", "created": 1699896916, "model": "gpt-4.1",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": "{\"tz\":\"Europe/Paris\"}"}}
            ]}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99}
        }));
        assert_json_snapshot!("decode_response_tool_calls", j_resp(&r));
    }

    #[test]
    fn decode_response_deepseek_reasoning() {
        let r = dresp(json!({
            "id": "930c60df-bf64-41c9-a88e-3ec75f81e00e", "object": "chat.completion", "created": 1737000000, "model": "deepseek-reasoner",
            "choices": [{"index": 0, "message": {"role": "assistant", "reasoning_content": "9.11 < 9.8 because 0.11 < 0.8.", "content": "9.8 is greater."}, "logprobs": null, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 200, "completion_tokens": 120, "total_tokens": 320,
                      "prompt_tokens_details": {"cached_tokens": 128}, "prompt_cache_hit_tokens": 128, "prompt_cache_miss_tokens": 72,
                      "completion_tokens_details": {"reasoning_tokens": 100}}
        }));
        assert_json_snapshot!("decode_response_deepseek_reasoning", j_resp(&r));
        // OpenAI's cache writes are part of prompt_tokens too.
        let r = dresp(json!({"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 600, "cache_write_tokens": 300}}}));
        assert_eq!((r.usage.input, r.usage.cache_read, r.usage.cache_write), (Some(100), Some(600), Some(300)));
        // DeepSeek's own counters alone are enough.
        let r = dresp(json!({"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 200, "completion_tokens": 1, "prompt_cache_hit_tokens": 150, "prompt_cache_miss_tokens": 50}}));
        assert_eq!((r.usage.input, r.usage.cache_read), (Some(50), Some(150)));
    }

    #[test]
    fn decode_response_finish_reasons() {
        let stop = |reason: Value, message: Value| {
            dresp(json!({"id": "x", "model": "m", "choices": [{"index": 0, "message": message, "finish_reason": reason}]})).stop_reason
        };
        let plain = json!({"role": "assistant", "content": "x"});
        let with_tool = json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]});
        assert_eq!(stop(json!("stop"), plain.clone()), Some(StopReason::EndTurn));
        assert_eq!(stop(json!("length"), plain.clone()), Some(StopReason::MaxTokens));
        assert_eq!(stop(json!("tool_calls"), with_tool.clone()), Some(StopReason::ToolUse));
        assert_eq!(
            stop(json!("stop"), with_tool.clone()),
            Some(StopReason::ToolUse),
            "vendors that say stop after tool calls"
        );
        assert_eq!(stop(json!("content_filter"), plain.clone()), Some(StopReason::Refusal));
        assert_eq!(
            stop(json!("function_call"), json!({"content": null, "function_call": {"name": "f", "arguments": "{}"}})),
            Some(StopReason::ToolUse)
        );
        assert_eq!(stop(json!("stop"), json!({"content": null, "refusal": "I can't."})), Some(StopReason::Refusal));
        assert_eq!(stop(json!("insufficient_system_resource"), plain.clone()), None);
        assert_eq!(stop(Value::Null, plain), None);
    }

    #[test]
    fn decode_response_errors() {
        let e = decode_response(br#"{"error":{"message":"boom","type":"server_error"}}"#).unwrap_err();
        assert_eq!((e.field.as_str(), e.message.as_str()), ("error", "boom"));
        assert_eq!(decode_response(br#"{"choices":[]}"#).unwrap_err().field, "choices");
        assert_eq!(decode_response(b"nope").unwrap_err().field, "body");
        // Unparseable arguments keep the raw string; input becomes {}.
        let r = dresp(
            json!({"choices": [{"message": {"tool_calls": [{"function": {"name": "f", "arguments": "{\"a\":"}}]}, "finish_reason": "tool_calls"}]}),
        );
        assert_eq!(
            j_part(&r.content[0]),
            json!({"tool_use": {"id": "call_0", "name": "f", "input": {}, "arguments": "{\"a\":"}})
        );
    }

    // -----------------------------------------------------------------------------------------
    // encode_response
    // -----------------------------------------------------------------------------------------

    fn eresp(r: &Response, c: &EncodeContext) -> Value {
        serde_json::from_slice(&encode_response(r, c)).unwrap()
    }

    #[test]
    fn encode_response_text_and_cache_usage() {
        let r = Response {
            id: "msg_01XFDUDYJgAACzvnptvVoYEL".into(),
            model: "claude-sonnet-4-5-20250929".into(),
            content: vec![text("Hello, "), text("world.")],
            stop_reason: Some(StopReason::EndTurn),
            stop_sequence: None,
            usage: Usage {
                input: Some(25),
                output: Some(12),
                cache_read: Some(1000),
                cache_write: Some(200),
                reasoning: None,
            },
            created: None,
        };
        let v = eresp(&r, &ctx());
        assert_eq!(v["usage"]["prompt_tokens"], 1225);
        assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 1000);
        assert_json_snapshot!("encode_response_text_cache", v);
    }

    #[test]
    fn encode_response_tools_and_thinking() {
        let r = Response {
            id: "msg_1".into(),
            model: "claude-opus-4-1".into(),
            content: vec![
                Part::Thinking { text: "Need the weather.".into(), signature: Some("sig".into()) },
                Part::ToolUse {
                    id: "toolu_1".into(),
                    name: "get_weather".into(),
                    input: json!({"city": "Paris"}),
                    arguments: None,
                },
                Part::ToolUse {
                    id: "toolu_2".into(),
                    name: "get_time".into(),
                    input: json!({"tz": "CET"}),
                    arguments: Some("{\"tz\": \"CET\"}".into()),
                },
            ],
            stop_reason: Some(StopReason::ToolUse),
            usage: Usage { input: Some(10), output: Some(30), ..Usage::default() },
            ..Response::default()
        };
        let v = eresp(&r, &ctx());
        assert_eq!(v["choices"][0]["message"]["content"], Value::Null);
        assert_json_snapshot!("encode_response_tools_thinking", v);
    }

    #[test]
    fn encode_response_defaults_and_finish_reasons() {
        let base = Response { content: vec![text("x")], ..Response::default() };
        let v = eresp(&base, &ctx());
        assert_eq!(v["id"], "chatcmpl-seed123");
        assert_eq!(v["model"], "client-model");
        assert_eq!(v["created"], 1_700_000_000);
        assert_json_snapshot!("encode_response_defaults", v);
        let reason = |s: Option<StopReason>| {
            let r = Response { stop_reason: s, ..base.clone() };
            eresp(&r, &ctx())["choices"][0]["finish_reason"].as_str().unwrap().to_owned()
        };
        assert_eq!(reason(Some(StopReason::EndTurn)), "stop");
        assert_eq!(reason(Some(StopReason::StopSequence)), "stop");
        assert_eq!(reason(Some(StopReason::PauseTurn)), "stop");
        assert_eq!(reason(Some(StopReason::MaxTokens)), "length");
        assert_eq!(reason(Some(StopReason::ToolUse)), "tool_calls");
        assert_eq!(reason(Some(StopReason::Refusal)), "content_filter");
        assert_eq!(reason(None), "stop");
    }

    // -----------------------------------------------------------------------------------------
    // Stream transcripts (upstream Chat SSE) and the decoder
    // -----------------------------------------------------------------------------------------

    const T_PARALLEL_TOOLS: &str = concat!(
        "data: {\"id\":\"chatcmpl-P1\",\"object\":\"chat.completion.chunk\",\"created\":1741570300,\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
        "data: {\"id\":\"chatcmpl-P1\",\"object\":\"chat.completion.chunk\",\"created\":1741570300,\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Checking both.\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
        "data: {\"id\":\"chatcmpl-P1\",\"object\":\"chat.completion.chunk\",\"created\":1741570300,\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_paris\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
        "data: {\"id\":\"chatcmpl-P1\",\"object\":\"chat.completion.chunk\",\"created\":1741570300,\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_rome\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
        "data: {\"id\":\"chatcmpl-P1\",\"object\":\"chat.completion.chunk\",\"created\":1741570300,\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"city\\\":\"}}]},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
        "data: {\"id\":\"chatcmpl-P1\",\"object\":\"chat.completion.chunk\",\"created\":1741570300,\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"arguments\":\"{\\\"city\\\":\\\"Rome\\\"}\"}}]},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
        ": keep-alive\n\n",
        "data: {\"id\":\"chatcmpl-P1\",\"object\":\"chat.completion.chunk\",\"created\":1741570300,\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"Paris\\\"}\"}}]},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
        "data: {\"id\":\"chatcmpl-P1\",\"object\":\"chat.completion.chunk\",\"created\":1741570300,\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"tool_calls\"}],\"usage\":null}\n\n",
        "data: {\"id\":\"chatcmpl-P1\",\"object\":\"chat.completion.chunk\",\"created\":1741570300,\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[],\"usage\":{\"prompt_tokens\":1200,\"completion_tokens\":40,\"total_tokens\":1240,\"prompt_tokens_details\":{\"cached_tokens\":1152,\"audio_tokens\":0},\"completion_tokens_details\":{\"reasoning_tokens\":0,\"audio_tokens\":0,\"accepted_prediction_tokens\":0,\"rejected_prediction_tokens\":0}}}\n\n",
        "data: [DONE]\n\n",
    );

    const T_DEEPSEEK_REASONING: &str = concat!(
        "data: {\"id\":\"5b1d6f2e\",\"object\":\"chat.completion.chunk\",\"created\":1737000001,\"model\":\"deepseek-reasoner\",\"system_fingerprint\":\"fp_7e73fd9a08\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"5b1d6f2e\",\"object\":\"chat.completion.chunk\",\"created\":1737000001,\"model\":\"deepseek-reasoner\",\"system_fingerprint\":\"fp_7e73fd9a08\",\"choices\":[{\"index\":0,\"delta\":{\"content\":null,\"reasoning_content\":\"Compare 9.11\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"5b1d6f2e\",\"object\":\"chat.completion.chunk\",\"created\":1737000001,\"model\":\"deepseek-reasoner\",\"system_fingerprint\":\"fp_7e73fd9a08\",\"choices\":[{\"index\":0,\"delta\":{\"content\":null,\"reasoning_content\":\" and 9.8 — \u{e9}gal?\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"5b1d6f2e\",\"object\":\"chat.completion.chunk\",\"created\":1737000001,\"model\":\"deepseek-reasoner\",\"system_fingerprint\":\"fp_7e73fd9a08\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"9.8 is\",\"reasoning_content\":null},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"5b1d6f2e\",\"object\":\"chat.completion.chunk\",\"created\":1737000001,\"model\":\"deepseek-reasoner\",\"system_fingerprint\":\"fp_7e73fd9a08\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" larger \u{1F600}\",\"reasoning_content\":null},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"5b1d6f2e\",\"object\":\"chat.completion.chunk\",\"created\":1737000001,\"model\":\"deepseek-reasoner\",\"system_fingerprint\":\"fp_7e73fd9a08\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\",\"reasoning_content\":null},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":150,\"total_tokens\":170,\"prompt_tokens_details\":{\"cached_tokens\":0},\"completion_tokens_details\":{\"reasoning_tokens\":140},\"prompt_cache_hit_tokens\":0,\"prompt_cache_miss_tokens\":20}}\n\n",
        "data: [DONE]\n\n",
    );

    /// Content and finish_reason in one chunk, usage on it, and no `[DONE]` (some vendors).
    const T_LENGTH_NO_DONE: &str = concat!(
        "data: {\"id\":\"cmpl-q1\",\"object\":\"chat.completion.chunk\",\"created\":1737000002,\"model\":\"qwen3-max\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Once upon\"},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"cmpl-q1\",\"object\":\"chat.completion.chunk\",\"created\":1737000002,\"model\":\"qwen3-max\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a time\"},\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4,\"total_tokens\":13}}\n\n",
    );

    const T_ERROR: &str = concat!(
        "data: {\"id\":\"chatcmpl-E1\",\"object\":\"chat.completion.chunk\",\"created\":1741570400,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-E1\",\"object\":\"chat.completion.chunk\",\"created\":1741570400,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Partial\"},\"finish_reason\":null}]}\n\n",
        "data: {\"error\":{\"message\":\"The server is overloaded, please retry.\",\"type\":\"server_error\",\"param\":null,\"code\":\"server_is_overloaded\"}}\n\n",
        "data: {\"id\":\"chatcmpl-E1\",\"object\":\"chat.completion.chunk\",\"created\":1741570400,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ignored\"},\"finish_reason\":null}]}\n\n",
    );

    /// Whole tool calls in one chunk each, all with `index` 0 (or none), and `stop` as the reason.
    const T_WHOLE_CALLS: &str = concat!(
        "data: {\"id\":\"g-1\",\"object\":\"chat.completion.chunk\",\"created\":1737000003,\"model\":\"gemini-2.5-pro\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[{\"index\":0,\"id\":\"call_x\",\"type\":\"function\",\"function\":{\"name\":\"ls\",\"arguments\":\"{\\\"dir\\\":\\\".\\\"}\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"g-1\",\"object\":\"chat.completion.chunk\",\"created\":1737000003,\"model\":\"gemini-2.5-pro\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_y\",\"type\":\"function\",\"function\":{\"name\":\"pwd\",\"arguments\":\"{}\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"g-1\",\"object\":\"chat.completion.chunk\",\"created\":1737000003,\"model\":\"gemini-2.5-pro\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"id\":\"call_z\",\"type\":\"function\",\"function\":{\"name\":\"date\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"g-1\",\"object\":\"chat.completion.chunk\",\"created\":1737000003,\"model\":\"gemini-2.5-pro\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":50,\"completion_tokens\":20,\"total_tokens\":70}}\n\n",
        "data: [DONE]\n\n",
    );

    /// Azure's leading content-filter chunk (no id / model / choices) before the answer.
    const T_AZURE: &str = concat!(
        "data: {\"choices\":[],\"created\":0,\"id\":\"\",\"model\":\"\",\"object\":\"\",\"prompt_filter_results\":[{\"prompt_index\":0,\"content_filter_results\":{}}]}\n\n",
        "data: {\"choices\":[{\"content_filter_results\":{},\"delta\":{\"content\":\"\",\"refusal\":null,\"role\":\"assistant\"},\"finish_reason\":null,\"index\":0,\"logprobs\":null}],\"created\":1741570500,\"id\":\"chatcmpl-AZ\",\"model\":\"gpt-4o-2024-11-20\",\"object\":\"chat.completion.chunk\",\"system_fingerprint\":\"fp_b705f0c291\"}\n\n",
        "data: {\"choices\":[{\"content_filter_results\":{},\"delta\":{\"content\":\"Hi!\"},\"finish_reason\":null,\"index\":0,\"logprobs\":null}],\"created\":1741570500,\"id\":\"chatcmpl-AZ\",\"model\":\"gpt-4o-2024-11-20\",\"object\":\"chat.completion.chunk\",\"system_fingerprint\":\"fp_b705f0c291\"}\n\n",
        "data: {\"choices\":[{\"content_filter_results\":{},\"delta\":{},\"finish_reason\":\"stop\",\"index\":0,\"logprobs\":null}],\"created\":1741570500,\"id\":\"chatcmpl-AZ\",\"model\":\"gpt-4o-2024-11-20\",\"object\":\"chat.completion.chunk\",\"system_fingerprint\":\"fp_b705f0c291\"}\n\n",
        "data: [DONE]\n\n",
    );

    /// A stream cut before any finish_reason.
    const T_CUT: &str = concat!(
        "data: {\"id\":\"chatcmpl-C\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-C\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Half a sen\"},\"finish_reason\":null}]}\n\n",
    );

    fn transcripts() -> Vec<(&'static str, String)> {
        let mut v = vec![
            ("openai_sdk_sample", crate::protocol::sse::tests::OPENAI.to_owned()),
            ("parallel_tools", T_PARALLEL_TOOLS.to_owned()),
            ("deepseek_reasoning", T_DEEPSEEK_REASONING.to_owned()),
            ("length_no_done", T_LENGTH_NO_DONE.to_owned()),
            ("error", T_ERROR.to_owned()),
            ("whole_calls", T_WHOLE_CALLS.to_owned()),
            ("azure", T_AZURE.to_owned()),
            ("cut", T_CUT.to_owned()),
        ];
        v.push(("parallel_tools_crlf", T_PARALLEL_TOOLS.replace('\n', "\r\n")));
        v
    }

    #[test]
    fn stream_decode_snapshots() {
        for (name, t) in transcripts() {
            if name.ends_with("_crlf") {
                continue;
            }
            let evs = decode_chunks(&[t.as_bytes()]);
            assert_json_snapshot!(format!("stream_decode_{name}"), j_events(&evs));
        }
    }

    #[test]
    fn stream_decode_structure() {
        let evs = decode_chunks(&[T_PARALLEL_TOOLS.as_bytes()]);
        // Start, text block 0, tool blocks 1 and 2 open together, closed before one Finish, End.
        assert!(matches!(evs.first(), Some(StreamEvent::Start { .. })));
        assert!(matches!(evs.last(), Some(StreamEvent::End)));
        let finishes: Vec<_> = evs.iter().filter(|e| matches!(e, StreamEvent::Finish { .. })).collect();
        assert_eq!(finishes.len(), 1);
        let StreamEvent::Finish { stop_reason, usage, .. } = finishes[0] else { unreachable!() };
        assert_eq!(*stop_reason, Some(StopReason::ToolUse));
        assert_eq!(
            *usage,
            Usage { input: Some(48), output: Some(40), cache_read: Some(1152), cache_write: None, reasoning: Some(0) }
        );
        let args = |i: usize| -> String {
            evs.iter()
                .filter_map(|e| match e {
                    StreamEvent::ToolArgsDelta { index, partial_json } if *index == i => Some(partial_json.as_str()),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(args(1), "{\"city\":\"Paris\"}");
        assert_eq!(args(2), "{\"city\":\"Rome\"}");
        // Cut stream: no Finish, no End.
        let cut = decode_chunks(&[T_CUT.as_bytes()]);
        assert!(!cut.iter().any(|e| matches!(e, StreamEvent::Finish { .. } | StreamEvent::End)));
        // Error shapes of other vendors: a Gemini array, a vLLM object, a malformed chunk.
        for (data, kind, message) in [
            (
                "[{\"error\":{\"code\":429,\"message\":\"Resource exhausted\",\"status\":\"RESOURCE_EXHAUSTED\"}}]",
                ErrorKind::RateLimited,
                "Resource exhausted",
            ),
            (
                "{\"object\":\"error\",\"message\":\"bad\",\"type\":\"BadRequestError\",\"code\":400}",
                ErrorKind::InvalidRequest,
                "bad",
            ),
            ("{\"choices\":[", ErrorKind::Api, "the upstream sent a malformed stream chunk: {\"choices\":["),
        ] {
            let mut d = StreamDecoder::new();
            let mut out = Vec::new();
            d.decode(&SseEvent { event: None, data }, &mut out);
            d.decode(&SseEvent { event: None, data: "[DONE]" }, &mut out);
            d.finish(&mut out);
            assert_eq!(out, vec![StreamEvent::Error { kind, message: message.into() }], "{data}");
        }
        // `finish_reason: ""` is no finish.
        let t = concat!(
            "data: {\"id\":\"a\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":\"\"}]}\n\n",
            "data: {\"id\":\"a\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"y\"},\"finish_reason\":\"\"}]}\n\n",
        );
        let evs = decode_chunks(&[t.as_bytes()]);
        assert_eq!(evs.len(), 4, "{evs:?}");
        // No [DONE] but a finish_reason: complete.
        let evs = decode_chunks(&[T_LENGTH_NO_DONE.as_bytes()]);
        assert!(matches!(evs.last(), Some(StreamEvent::End)));
    }

    #[test]
    fn stream_split_at_every_byte_boundary() {
        for (name, t) in transcripts() {
            let input = t.as_bytes();
            let whole = decode_chunks(&[input]);
            assert!(whole.len() >= 3, "{name}");
            for k in 0..=input.len() {
                let (a, b) = input.split_at(k);
                assert_eq!(decode_chunks(&[a, b]), whole, "{name} split at {k}");
            }
        }
    }

    proptest! {
        #[test]
        fn stream_random_splits(which in 0usize..9, cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12)) {
            let all = transcripts();
            let (name, t) = &all[which % all.len()];
            let input = t.as_bytes();
            let whole = decode_chunks(&[input]);
            let mut points: Vec<usize> = cuts.iter().map(|i| i.index(input.len() + 1)).collect();
            points.sort_unstable();
            let mut chunks = Vec::new();
            let mut last = 0;
            for p in points {
                chunks.push(&input[last..p]);
                last = p;
            }
            chunks.push(&input[last..]);
            prop_assert_eq!(decode_chunks(&chunks), whole, "{}", name);
        }
    }

    // -----------------------------------------------------------------------------------------
    // StreamEncoder
    // -----------------------------------------------------------------------------------------

    fn sample_events() -> Vec<StreamEvent> {
        vec![
            StreamEvent::Start {
                id: "msg_01XFDUDYJgAACzvnptvVoYEL".into(),
                model: "claude-sonnet-4-5-20250929".into(),
                usage: Usage {
                    input: Some(25),
                    output: Some(1),
                    cache_read: Some(100),
                    cache_write: Some(50),
                    reasoning: None,
                },
                created: None,
            },
            StreamEvent::BlockStart { index: 0, block: BlockStart::Thinking },
            StreamEvent::ThinkingDelta { index: 0, text: "Weather for two cities.".into() },
            StreamEvent::SignatureDelta { index: 0, signature: "EqQBCgIYAhIM".into() },
            StreamEvent::BlockStop { index: 0 },
            StreamEvent::BlockStart { index: 1, block: BlockStart::Text },
            StreamEvent::TextDelta { index: 1, text: "Checking ".into() },
            StreamEvent::TextDelta { index: 1, text: String::new() },
            StreamEvent::TextDelta { index: 1, text: "both \u{e9}.".into() },
            StreamEvent::BlockStop { index: 1 },
            StreamEvent::BlockStart {
                index: 2,
                block: BlockStart::ToolUse { id: "toolu_A".into(), name: "get_weather".into() },
            },
            StreamEvent::ToolArgsDelta { index: 2, partial_json: "{\"city\": \"Pa".into() },
            StreamEvent::ToolArgsDelta { index: 2, partial_json: "ris\"}".into() },
            StreamEvent::BlockStop { index: 2 },
            StreamEvent::BlockStart {
                index: 3,
                block: BlockStart::ToolUse { id: "toolu_B".into(), name: "get_weather".into() },
            },
            StreamEvent::ToolArgsDelta { index: 3, partial_json: "{\"city\": \"Rome\"}".into() },
            StreamEvent::BlockStop { index: 3 },
            StreamEvent::Finish {
                stop_reason: Some(StopReason::ToolUse),
                stop_sequence: None,
                usage: Usage { output: Some(89), ..Usage::default() },
            },
            StreamEvent::End,
        ]
    }

    #[test]
    fn stream_encode_with_usage() {
        let sse = encode_events(&sample_events(), ctx());
        assert!(sse.ends_with("data: [DONE]\n\n"));
        assert_snapshot!("stream_encode_with_usage", sse);
    }

    #[test]
    fn stream_encode_without_usage() {
        let sse = encode_events(&sample_events(), EncodeContext { include_usage: false, ..ctx() });
        assert!(!sse.contains("\"usage\""));
        assert_snapshot!("stream_encode_without_usage", sse);
    }

    #[test]
    fn stream_encode_error() {
        let evs = vec![
            StreamEvent::Start { id: String::new(), model: String::new(), usage: Usage::default(), created: None },
            StreamEvent::BlockStart { index: 0, block: BlockStart::Text },
            StreamEvent::TextDelta { index: 0, text: "Partial".into() },
            StreamEvent::Error { kind: ErrorKind::Overloaded, message: "Overloaded".into() },
            StreamEvent::End,
        ];
        let sse = encode_events(&evs, EncodeContext { include_usage: false, ..ctx() });
        assert!(!sse.contains("[DONE]"));
        assert_snapshot!("stream_encode_error", sse);
    }

    /// Every chunk the encoder writes is one `data:` line that the official shapes accept.
    #[test]
    fn stream_encode_shape() {
        let sse = encode_events(&sample_events(), ctx());
        let mut scanner = SseScanner::new();
        let mut datas = Vec::new();
        scanner.feed(sse.as_bytes(), |e| {
            assert!(e.event.is_none());
            datas.push(e.data.to_owned());
        });
        assert_eq!(datas.last().map(String::as_str), Some("[DONE]"));
        let chunks: Vec<Value> = datas[..datas.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
        assert_eq!(chunks[0]["choices"][0]["delta"], json!({"role": "assistant", "content": ""}));
        for c in &chunks {
            assert_eq!(c["object"], "chat.completion.chunk");
            assert_eq!(c["id"], "msg_01XFDUDYJgAACzvnptvVoYEL");
            assert_eq!(c["created"], 1_700_000_000);
        }
        let usage = chunks.last().unwrap();
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(usage["usage"]["prompt_tokens"], 175);
        assert_eq!(usage["usage"]["completion_tokens"], 89);
        let finish = &chunks[chunks.len() - 2];
        assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
        // Tool call deltas: index 0 then 1, the first of each with id, type and name.
        let calls: Vec<&Value> = chunks.iter().filter_map(|c| c["choices"][0]["delta"].get("tool_calls")).collect();
        assert_eq!(
            calls[0][0],
            json!({"index": 0, "id": "toolu_A", "type": "function", "function": {"name": "get_weather", "arguments": ""}})
        );
        assert_eq!(
            calls[3][0],
            json!({"index": 1, "id": "toolu_B", "type": "function", "function": {"name": "get_weather", "arguments": ""}})
        );
    }

    // -----------------------------------------------------------------------------------------
    // Errors
    // -----------------------------------------------------------------------------------------

    #[test]
    fn decode_error_table() {
        let cases: Vec<(u16, &[u8])> = vec![
            (401, br#"{"error":{"message":"Incorrect API key provided: sk-abc***.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#),
            (429, br#"{"error":{"message":"Rate limit reached for gpt-4o on tokens per min (TPM).","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#),
            (429, br#"{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#),
            (404, br#"{"error":{"message":"The model `gpt-9` does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}"#),
            (400, br#"{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#),
            (500, br#"{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}"#),
            (500, br#"{"error":{"message":"overloaded","type":"server_error","code":"server_is_overloaded"}}"#),
            (503, br#"{"error":{"message":"Service Unavailable","type":"service_unavailable_error"}}"#),
            (402, br#"{"error":{"message":"Insufficient Balance","type":"unknown_error","param":null,"code":"invalid_request_error"}}"#),
            (403, br#"{"error":{"message":"Country, region, or territory not supported","type":"request_forbidden","code":"unsupported_country_region_territory"}}"#),
            (413, br#"{"error":"Request too large"}"#),
            (400, br#"[{"error":{"code":400,"message":"Invalid JSON payload received.","status":"INVALID_ARGUMENT"}}]"#),
            (400, br#"{"object":"error","message":"max_tokens is too large","type":"BadRequestError","param":null,"code":400}"#),
            (422, br#"{"detail":"Field required"}"#),
            (502, b"<html><body>Bad Gateway</body></html>"),
            (504, b""),
            (200, br#"{"error":{"message":"mid-stream","type":"rate_limit_error"}}"#),
        ];
        let got: Vec<Value> = cases
            .iter()
            .map(|(status, body)| {
                let e = decode_error(*status, body);
                json!({"status": status, "kind": format!("{:?}", e.kind), "message": e.message, "code": e.code, "param": e.param})
            })
            .collect();
        assert_json_snapshot!("decode_error_table", got);
        let long = "x".repeat(2000);
        assert!(decode_error(500, long.as_bytes()).message.chars().count() <= MAX_ERROR_TEXT + 1);
    }

    #[test]
    fn encode_error_table() {
        let kinds = [
            (ErrorKind::InvalidRequest, None, Some("messages")),
            (ErrorKind::Authentication, Some("invalid_api_key"), None),
            (ErrorKind::Permission, None, None),
            (ErrorKind::NotFound, Some("not_found_error"), None),
            (ErrorKind::RequestTooLarge, None, None),
            (ErrorKind::RateLimited, None, None),
            (ErrorKind::RateLimited, Some("insufficient_quota"), None),
            (ErrorKind::Overloaded, Some("overloaded_error"), None),
            (ErrorKind::Api, None, None),
        ];
        let got: Vec<Value> = kinds
            .iter()
            .map(|(kind, code, param)| {
                let e = ErrorBody {
                    kind: *kind,
                    message: format!("{kind:?} happened"),
                    code: code.map(str::to_owned),
                    param: param.map(str::to_owned),
                };
                serde_json::from_slice::<Value>(&encode_error(&e)).unwrap()
            })
            .collect();
        assert_json_snapshot!("encode_error_table", got);
        // Round trip through our own decoder keeps kind, message and code.
        for (kind, code, _) in kinds {
            let e = ErrorBody { kind, message: "m".into(), code: code.map(str::to_owned), param: None };
            let back = decode_error(200, &encode_error(&e));
            assert_eq!(back.message, "m");
            let same_family = match kind {
                ErrorKind::NotFound | ErrorKind::RequestTooLarge => ErrorKind::InvalidRequest,
                ErrorKind::Overloaded => ErrorKind::Overloaded,
                k => k,
            };
            assert!(back.kind == kind || back.kind == same_family, "{kind:?} → {:?}", back.kind);
        }
    }

    // -----------------------------------------------------------------------------------------
    // Round trips
    // -----------------------------------------------------------------------------------------

    /// A conversation view that survives Chat encoding: per message, the role, the text joined
    /// as the encoder joins it, tool calls (id, name, input) and tool results (id, text).
    fn view(req: &Request) -> Value {
        let msgs: Vec<Value> = req
            .messages
            .iter()
            .map(|m| {
                let sep = if m.role == Role::Assistant { "" } else { "\n\n" };
                let texts: Vec<&str> = m
                    .content
                    .iter()
                    .filter_map(|p| match p {
                        Part::Text(t) => Some(t.text.as_str()),
                        _ => None,
                    })
                    .collect();
                let calls: Vec<Value> = m
                    .content
                    .iter()
                    .filter_map(|p| match p {
                        Part::ToolUse { id, name, input, .. } => Some(json!([id, name, input])),
                        _ => None,
                    })
                    .collect();
                let results: Vec<Value> = m
                    .content
                    .iter()
                    .filter_map(|p| match p {
                        Part::ToolResult { tool_use_id, content, is_error } => {
                            let t: Vec<&str> = content
                                .iter()
                                .filter_map(|c| match c {
                                    ToolResultContent::Text(t) => Some(t.as_str()),
                                    ToolResultContent::Image(_) => None,
                                })
                                .collect();
                            let t = t.join("\n\n");
                            let t = if *is_error { if t.is_empty() { "Error".into() } else { format!("Error: {t}") } } else { t };
                            Some(json!([tool_use_id, t]))
                        }
                        _ => None,
                    })
                    .collect();
                json!({"role": format!("{:?}", m.role), "text": if texts.is_empty() { Value::Null } else { json!(texts.join(sep)) }, "calls": calls, "results": results})
            })
            .collect();
        let system: Vec<&str> = req.system.iter().map(|t| t.text.as_str()).collect();
        json!({
            "system": if system.is_empty() { Value::Null } else { json!(system.join("\n\n")) },
            "messages": msgs,
            "tools": req.tools.iter().map(|t| json!([t.name, t.description, t.input_schema])).collect::<Vec<_>>(),
        })
    }

    fn arb_scalar() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<i32>().prop_map(|n| json!(n)),
            "[a-zA-Z \u{e9}\u{1F600}\"\\\\]{0,8}".prop_map(Value::String),
            any::<bool>().prop_map(Value::Bool),
            Just(Value::Null),
        ]
    }

    fn arb_input() -> impl Strategy<Value = Value> {
        prop::collection::btree_map("[a-z]{1,6}", arb_scalar(), 0..4)
            .prop_map(|m| Value::Object(m.into_iter().collect()))
    }

    #[derive(Clone, Debug)]
    struct TurnSpec {
        user: Vec<String>,
        assistant: Option<String>,
        calls: Vec<(String, Value, bool, String, bool)>,
    }

    fn arb_turn() -> impl Strategy<Value = TurnSpec> {
        (
            prop::collection::vec("[a-zA-Z0-9 ,.!?\n\u{e9}\u{1F600}]{0,16}", 1..3),
            prop::option::of("[a-zA-Z0-9 ,.!?\u{e9}]{1,16}"),
            prop::collection::vec(
                ("[a-z_]{1,8}", arb_input(), any::<bool>(), "[a-zA-Z0-9 ]{0,12}", any::<bool>()),
                0..3,
            ),
        )
            .prop_map(|(user, assistant, calls)| TurnSpec { user, assistant, calls })
    }

    /// temperature, top_p, max_tokens, stop, stream, user.
    type Params = (Option<f64>, Option<f64>, Option<u64>, Vec<String>, bool, Option<String>);

    fn build_request(
        system: Vec<String>,
        turns: Vec<TurnSpec>,
        tools: Vec<(String, Option<String>)>,
        params: Params,
    ) -> Request {
        let mut messages = Vec::new();
        let mut n = 0;
        for t in turns {
            messages.push(msg(Role::User, t.user.into_iter().map(text).collect()));
            let mut a = Vec::new();
            if let Some(s) = t.assistant {
                a.push(text(s));
            }
            let mut results = Vec::new();
            for (name, input, raw, result, is_error) in t.calls {
                n += 1;
                let id = format!("call_{n}");
                let arguments = raw.then(|| serde_json::to_string_pretty(&input).unwrap());
                a.push(Part::ToolUse { id: id.clone(), name, input, arguments });
                results.push(Part::ToolResult {
                    tool_use_id: id,
                    content: vec![ToolResultContent::Text(result)],
                    is_error,
                });
            }
            if a.is_empty() {
                a.push(text("ok"));
            }
            messages.push(msg(Role::Assistant, a));
            if !results.is_empty() {
                messages.push(msg(Role::User, results));
            }
        }
        let (temperature, top_p, max_tokens, stop, stream, user) = params;
        Request {
            model: "deepseek-chat".into(),
            system: system.iter().map(|s| tp(s)).collect(),
            messages,
            tools: tools
                .into_iter()
                .map(|(name, description)| Tool {
                    name,
                    description,
                    input_schema: json!({"type": "object", "properties": {"a": {"type": "string"}}}),
                    strict: None,
                    namespace: None,
                })
                .collect(),
            temperature,
            top_p,
            max_tokens,
            stop,
            stream,
            user,
            ..Request::default()
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn request_round_trip(
            system in prop::collection::vec("[a-zA-Z .]{0,12}", 0..3),
            turns in prop::collection::vec(arb_turn(), 1..4),
            tools in prop::collection::vec(("[a-z_]{1,8}", prop::option::of("[a-z ]{0,10}")), 0..3),
            temperature in prop::option::of(prop_oneof![Just(0.0f64), 0.0f64..2.0]),
            top_p in prop::option::of(0.0f64..1.0),
            max_tokens in prop::option::of(1u64..200_000),
            stop in prop::collection::vec("[a-z]{1,4}", 0..3),
            stream in any::<bool>(),
            user in prop::option::of("[a-z0-9]{1,20}"),
            choice in prop::option::of(prop_oneof![Just(ToolChoice::Auto), Just(ToolChoice::Any), Just(ToolChoice::None), "[a-z]{1,5}".prop_map(ToolChoice::Tool)]),
        ) {
            let mut req = build_request(system, turns, tools, (temperature, top_p, max_tokens, stop, stream, user));
            req.tool_choice = choice;
            let encoded = encode_request(&req).unwrap();
            let back = decode_request(&encoded.body).unwrap();
            prop_assert_eq!(view(&back), view(&req));
            // serde_json parses floats to within one ulp (its `float_roundtrip` feature is off).
            prop_assert!(close(back.temperature, req.temperature));
            prop_assert!(close(back.top_p, req.top_p));
            prop_assert_eq!(back.max_tokens, req.max_tokens);
            prop_assert_eq!(&back.stop, &req.stop);
            prop_assert_eq!(back.stream, req.stream);
            prop_assert_eq!(back.include_usage, req.stream);
            prop_assert_eq!(&back.user, &req.user);
            let want_choice = if req.tools.is_empty() { None } else { req.tool_choice.clone() };
            prop_assert_eq!(&back.tool_choice, &want_choice);
            // Tool call arguments travel verbatim when the source had them.
            for (a, b) in req.messages.iter().zip(&back.messages) {
                for (p, q) in a.content.iter().filter(|p| matches!(p, Part::ToolUse { .. })).zip(b.content.iter().filter(|p| matches!(p, Part::ToolUse { .. }))) {
                    if let (Part::ToolUse { arguments: Some(x), .. }, Part::ToolUse { arguments: Some(y), .. }) = (p, q) {
                        prop_assert_eq!(x, y);
                    }
                }
            }
        }
    }

    fn close(a: Option<f64>, b: Option<f64>) -> bool {
        match (a, b) {
            (Some(a), Some(b)) => (a - b).abs() <= 1e-12 * b.abs().max(1.0),
            (a, b) => a == b,
        }
    }

    fn arb_stop() -> impl Strategy<Value = StopReason> {
        prop_oneof![
            Just(StopReason::EndTurn),
            Just(StopReason::MaxTokens),
            Just(StopReason::ToolUse),
            Just(StopReason::Refusal)
        ]
    }

    fn arb_usage() -> impl Strategy<Value = Usage> {
        let n = || prop::option::of(0u64..1_000_000);
        (n(), n(), n(), n(), n()).prop_map(|(input, output, cache_read, cache_write, reasoning)| Usage {
            input,
            output,
            cache_read,
            cache_write,
            reasoning,
        })
    }

    /// What a Chat client can see of a usage (absent counts are reported as 0).
    fn seen_usage(u: &Usage) -> [u64; 5] {
        [
            u.input.unwrap_or(0),
            u.output.unwrap_or(0),
            u.cache_read.unwrap_or(0),
            u.cache_write.unwrap_or(0),
            u.reasoning.unwrap_or(0),
        ]
    }

    fn expected_stop(s: StopReason, has_calls: bool) -> StopReason {
        match s {
            StopReason::EndTurn if has_calls => StopReason::ToolUse,
            s => s,
        }
    }

    #[derive(Clone, Debug)]
    struct AnswerSpec {
        thinking: Option<String>,
        text: String,
        calls: Vec<(String, Value)>,
        stop: StopReason,
        usage: Usage,
        id: String,
    }

    fn arb_answer() -> impl Strategy<Value = AnswerSpec> {
        (
            prop::option::of("[a-zA-Z .\u{e9}]{1,20}"),
            "[a-zA-Z0-9 ,.!?\n\u{e9}\u{1F600}]{0,24}",
            prop::collection::vec(("[a-z_]{1,8}", arb_input()), 0..3),
            arb_stop(),
            arb_usage(),
            "[a-z0-9]{0,8}",
        )
            .prop_map(|(thinking, text, calls, stop, usage, id)| AnswerSpec {
                thinking,
                text,
                calls,
                stop,
                usage,
                id,
            })
    }

    fn answer_response(a: &AnswerSpec) -> Response {
        let mut content = Vec::new();
        if let Some(t) = &a.thinking {
            content.push(Part::Thinking { text: t.clone(), signature: Some("s".into()) });
        }
        if !a.text.is_empty() {
            content.push(text(a.text.clone()));
        }
        for (k, (name, input)) in a.calls.iter().enumerate() {
            content.push(Part::ToolUse {
                id: format!("toolu_{k}"),
                name: name.clone(),
                input: input.clone(),
                arguments: None,
            });
        }
        Response {
            id: a.id.clone(),
            model: "upstream-model".into(),
            content,
            stop_reason: Some(a.stop),
            usage: a.usage,
            ..Response::default()
        }
    }

    fn answer_events(a: &AnswerSpec, pieces: usize) -> Vec<StreamEvent> {
        let mut evs = vec![StreamEvent::Start {
            id: a.id.clone(),
            model: "upstream-model".into(),
            usage: Usage {
                input: a.usage.input,
                cache_read: a.usage.cache_read,
                cache_write: a.usage.cache_write,
                ..Usage::default()
            },
            created: Some(42),
        }];
        let mut index = 0;
        if let Some(t) = &a.thinking {
            evs.push(StreamEvent::BlockStart { index, block: BlockStart::Thinking });
            evs.push(StreamEvent::ThinkingDelta { index, text: t.clone() });
            evs.push(StreamEvent::BlockStop { index });
            index += 1;
        }
        if !a.text.is_empty() {
            evs.push(StreamEvent::BlockStart { index, block: BlockStart::Text });
            let chars: Vec<char> = a.text.chars().collect();
            for piece in chars.chunks(chars.len().div_ceil(pieces.max(1))) {
                evs.push(StreamEvent::TextDelta { index, text: piece.iter().collect() });
            }
            evs.push(StreamEvent::BlockStop { index });
            index += 1;
        }
        for (k, (name, input)) in a.calls.iter().enumerate() {
            evs.push(StreamEvent::BlockStart {
                index,
                block: BlockStart::ToolUse { id: format!("toolu_{k}"), name: name.clone() },
            });
            let args: Vec<char> = serde_json::to_string(input).unwrap().chars().collect();
            for piece in args.chunks(args.len().div_ceil(pieces.max(1))) {
                evs.push(StreamEvent::ToolArgsDelta { index, partial_json: piece.iter().collect() });
            }
            evs.push(StreamEvent::BlockStop { index });
            index += 1;
        }
        evs.push(StreamEvent::Finish {
            stop_reason: Some(a.stop),
            stop_sequence: None,
            usage: Usage { output: a.usage.output, reasoning: a.usage.reasoning, ..Usage::default() },
        });
        evs.push(StreamEvent::End);
        evs
    }

    /// Collects (thinking, text, [(id, name, args)], stop, usage, ended) from IR events.
    #[allow(clippy::type_complexity)]
    fn collect(
        evs: &[StreamEvent],
    ) -> (String, String, Vec<(String, String, String)>, Option<StopReason>, Usage, bool) {
        let mut thinking = String::new();
        let mut text = String::new();
        let mut tools: Vec<(usize, String, String, String)> = Vec::new();
        let mut stop = None;
        let mut usage = Usage::default();
        let mut ended = false;
        for e in evs {
            match e {
                StreamEvent::ThinkingDelta { text: t, .. } => thinking.push_str(t),
                StreamEvent::TextDelta { text: t, .. } => text.push_str(t),
                StreamEvent::BlockStart { index, block: BlockStart::ToolUse { id, name } } => {
                    tools.push((*index, id.clone(), name.clone(), String::new()));
                }
                StreamEvent::ToolArgsDelta { index, partial_json } => {
                    tools.iter_mut().find(|t| t.0 == *index).unwrap().3.push_str(partial_json);
                }
                StreamEvent::Finish { stop_reason, usage: u, .. } => {
                    stop = *stop_reason;
                    usage = *u;
                }
                StreamEvent::End => ended = true,
                _ => {}
            }
        }
        (thinking, text, tools.into_iter().map(|t| (t.1, t.2, t.3)).collect(), stop, usage, ended)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn response_round_trip(a in arb_answer()) {
            let resp = answer_response(&a);
            let back = decode_response(&encode_response(&resp, &ctx())).unwrap();
            let texts: String = back.content.iter().filter_map(|p| if let Part::Text(t) = p { Some(t.text.as_str()) } else { None }).collect();
            prop_assert_eq!(&texts, &a.text);
            let thinking: Vec<&str> = back.content.iter().filter_map(|p| if let Part::Thinking { text, .. } = p { Some(text.as_str()) } else { None }).collect();
            prop_assert_eq!(thinking.first().copied(), a.thinking.as_deref());
            let calls: Vec<(String, String, Value)> = back.content.iter().filter_map(|p| if let Part::ToolUse { id, name, input, .. } = p { Some((id.clone(), name.clone(), input.clone())) } else { None }).collect();
            let want: Vec<(String, String, Value)> = a.calls.iter().enumerate().map(|(k, (n, i))| (format!("toolu_{k}"), n.clone(), i.clone())).collect();
            prop_assert_eq!(calls, want);
            prop_assert_eq!(back.stop_reason, Some(expected_stop(a.stop, !a.calls.is_empty())));
            prop_assert_eq!(seen_usage(&back.usage), seen_usage(&a.usage));
            prop_assert_eq!(back.model.as_str(), "upstream-model");
            let want_id = if a.id.is_empty() { "chatcmpl-seed123".to_owned() } else { a.id.clone() };
            prop_assert_eq!(back.id, want_id);
        }

        #[test]
        fn stream_round_trip(a in arb_answer(), pieces in 1usize..4, include_usage in any::<bool>()) {
            let evs = answer_events(&a, pieces);
            let sse = encode_events(&evs, EncodeContext { include_usage, ..ctx() });
            let back = decode_chunks(&[sse.as_bytes()]);
            let (thinking, text, tools, stop, usage, ended) = collect(&back);
            prop_assert!(ended);
            prop_assert_eq!(thinking, a.thinking.clone().unwrap_or_default());
            prop_assert_eq!(text, a.text.clone());
            let want: Vec<(String, String, String)> = a.calls.iter().enumerate().map(|(k, (n, i))| (format!("toolu_{k}"), n.clone(), serde_json::to_string(i).unwrap())).collect();
            prop_assert_eq!(tools, want);
            prop_assert_eq!(stop, Some(expected_stop(a.stop, !a.calls.is_empty())));
            if include_usage {
                prop_assert_eq!(seen_usage(&usage), seen_usage(&a.usage));
            } else {
                prop_assert_eq!(usage, Usage::default());
            }
            // The decoder's own invariants: Start first, blocks opened before deltas, closed once.
            let starts = matches!(back.first(), Some(StreamEvent::Start { .. }));
            prop_assert!(starts);
            check_block_discipline(&back);
        }
    }

    /// BlockStart before deltas, BlockStop once, all closed before Finish; indexes 0, 1, 2, ...
    fn check_block_discipline(evs: &[StreamEvent]) {
        let mut open: Vec<usize> = Vec::new();
        let mut next = 0;
        let mut finished = false;
        for e in evs {
            match e {
                StreamEvent::BlockStart { index, .. } => {
                    assert_eq!(*index, next);
                    next += 1;
                    open.push(*index);
                }
                StreamEvent::TextDelta { index, .. }
                | StreamEvent::ThinkingDelta { index, .. }
                | StreamEvent::SignatureDelta { index, .. }
                | StreamEvent::ToolArgsDelta { index, .. } => assert!(open.contains(index), "delta for closed {index}"),
                StreamEvent::BlockStop { index } => {
                    let pos = open.iter().position(|i| i == index).expect("stop of an open block");
                    open.remove(pos);
                }
                StreamEvent::Finish { .. } => {
                    assert!(open.is_empty(), "blocks open at Finish");
                    assert!(!finished);
                    finished = true;
                }
                _ => {}
            }
        }
    }

    #[test]
    fn transcripts_keep_block_discipline() {
        for (name, t) in transcripts() {
            let evs = decode_chunks(&[t.as_bytes()]);
            assert!(matches!(evs.first(), Some(StreamEvent::Start { .. }) | Some(StreamEvent::Error { .. })), "{name}");
            check_block_discipline(&evs);
        }
    }

    // -----------------------------------------------------------------------------------------
    // No panics on any input
    // -----------------------------------------------------------------------------------------

    const KEYS: &[&str] = &[
        "model",
        "messages",
        "role",
        "content",
        "type",
        "text",
        "image_url",
        "url",
        "detail",
        "tool_calls",
        "id",
        "function",
        "name",
        "arguments",
        "tool_call_id",
        "choices",
        "delta",
        "message",
        "finish_reason",
        "usage",
        "prompt_tokens",
        "completion_tokens",
        "prompt_tokens_details",
        "cached_tokens",
        "index",
        "error",
        "code",
        "reasoning_content",
        "refusal",
        "tools",
        "tool_choice",
        "stop",
        "n",
        "file",
        "file_data",
        "file_id",
        "max_tokens",
        "temperature",
        "stream",
        "stream_options",
        "include_usage",
        "response_format",
        "json_schema",
        "schema",
        "allowed_tools",
        "mode",
        "parameters",
        "function_call",
        "object",
        "modalities",
        "reasoning_effort",
    ];

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<u64>().prop_map(|n| json!(n)),
            any::<f64>().prop_map(|f| json!(f)),
            "[a-z_ ]{0,8}".prop_map(Value::String),
            prop::sample::select(vec![
                "text",
                "image_url",
                "file",
                "assistant",
                "user",
                "tool",
                "system",
                "developer",
                "function",
                "stop",
                "tool_calls",
                "length",
                "data:image/png;base64,AAAA",
                "data:x",
                "[DONE]",
                "{",
                "{\"a\":1}",
                "auto",
                "required",
                "none",
                "json_schema",
                "json_object",
                "allowed_tools",
                "refusal",
                "error",
                "audio",
            ])
            .prop_map(|s| Value::String(s.to_owned())),
        ];
        leaf.prop_recursive(5, 96, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(prop::sample::select(KEYS.to_vec()).prop_map(str::to_owned), inner, 0..8)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn arb_image() -> impl Strategy<Value = Image> {
        prop_oneof![
            ("[a-z/]{0,10}", "[A-Za-z0-9+/=]{0,8}").prop_map(|(media_type, data)| Image::Base64 { media_type, data }),
            "[a-z:/.]{0,12}".prop_map(|url| Image::Url { url }),
        ]
    }

    fn arb_part() -> impl Strategy<Value = Part> {
        prop_oneof![
            "[a-z \n]{0,8}".prop_map(text),
            arb_image().prop_map(Part::Image),
            ("[a-z_]{0,6}", "[a-z_]{0,6}", arb_json(), prop::option::of("[{}a-z\":]{0,8}"))
                .prop_map(|(id, name, input, arguments)| Part::ToolUse { id, name, input, arguments }),
            (
                "[a-z_]{0,6}",
                prop::collection::vec(
                    prop_oneof![
                        "[a-z ]{0,6}".prop_map(ToolResultContent::Text),
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
            ("[a-z ]{0,6}", prop::option::of("[a-z]{0,4}"))
                .prop_map(|(text, signature)| Part::Thinking { text, signature }),
            "[a-z]{0,6}".prop_map(|data| Part::RedactedThinking { data }),
            (
                prop::option::of("[a-z]{0,4}"),
                prop::collection::vec("[a-z ]{0,6}", 0..2),
                prop::option::of("[a-z]{0,4}")
            )
                .prop_map(|(id, summary, encrypted_content)| Part::ReasoningItem {
                    id,
                    summary,
                    encrypted_content
                }),
            (
                prop_oneof![
                    ("[a-z/]{0,10}", "[a-z]{0,6}")
                        .prop_map(|(media_type, data)| DocumentSource::Base64 { media_type, data }),
                    "[a-z]{0,6}".prop_map(|text| DocumentSource::Text { text }),
                ],
                prop::option::of("[a-z]{0,6}")
            )
                .prop_map(|(source, title)| Part::Document { source, title }),
        ]
    }

    fn arb_role() -> impl Strategy<Value = Role> {
        prop_oneof![Just(Role::User), Just(Role::Assistant), Just(Role::System)]
    }

    fn arb_any_request() -> impl Strategy<Value = Request> {
        (
            prop::collection::vec((arb_role(), prop::collection::vec(arb_part(), 0..4)), 0..5),
            prop::option::of((
                prop::option::of(any::<u64>()),
                prop::option::of("[a-z]{0,5}"),
                any::<bool>(),
                prop::option::of("[a-z]{0,5}"),
            )),
            prop::option::of(prop_oneof![
                Just(OutputFormat::Text),
                Just(OutputFormat::JsonObject),
                ("[a-z]{0,4}", arb_json(), prop::option::of(any::<bool>()), prop::option::of("[a-z]{0,4}")).prop_map(
                    |(name, schema, strict, description)| OutputFormat::JsonSchema {
                        name,
                        schema,
                        strict,
                        description
                    }
                ),
            ]),
            (
                prop::option::of(any::<f64>()),
                prop::option::of(any::<u64>()),
                prop::option::of(any::<u64>()),
                any::<bool>(),
                "[a-z0-9-]{0,80}",
            ),
            prop::collection::vec(("[a-z]{0,5}", arb_json()), 0..3),
        )
            .prop_map(
                |(messages, reasoning, output_format, (temperature, max_tokens, top_k, stream, model), tools)| {
                    Request {
                        model,
                        system: vec![tp("s")],
                        messages: messages.into_iter().map(|(role, content)| msg(role, content)).collect(),
                        tools: tools
                            .into_iter()
                            .map(|(name, input_schema)| Tool {
                                name,
                                description: None,
                                input_schema,
                                strict: None,
                                namespace: None,
                            })
                            .collect(),
                        reasoning: reasoning.map(|(budget_tokens, effort, adaptive, summary)| Reasoning {
                            budget_tokens,
                            effort,
                            adaptive,
                            summary,
                        }),
                        output_format,
                        temperature,
                        max_tokens,
                        top_k,
                        stream,
                        user: Some("u".repeat(70)),
                        ..Request::default()
                    }
                },
            )
    }

    fn arb_event() -> impl Strategy<Value = StreamEvent> {
        let idx = 0usize..4;
        prop_oneof![
            ("[a-z]{0,4}", "[a-z]{0,4}", arb_usage(), prop::option::of(any::<u64>()))
                .prop_map(|(id, model, usage, created)| StreamEvent::Start { id, model, usage, created }),
            (
                idx.clone(),
                prop_oneof![
                    Just(BlockStart::Text),
                    Just(BlockStart::Thinking),
                    "[a-z]{0,3}".prop_map(|data| BlockStart::RedactedThinking { data }),
                    ("[a-z]{0,3}", "[a-z]{0,3}").prop_map(|(id, name)| BlockStart::ToolUse { id, name }),
                    Just(BlockStart::ReasoningItem { id: None, encrypted_content: None }),
                ]
            )
                .prop_map(|(index, block)| StreamEvent::BlockStart { index, block }),
            (idx.clone(), "[a-z ]{0,4}").prop_map(|(index, text)| StreamEvent::TextDelta { index, text }),
            (idx.clone(), "[a-z ]{0,4}").prop_map(|(index, text)| StreamEvent::ThinkingDelta { index, text }),
            (idx.clone(), "[a-z]{0,4}").prop_map(|(index, signature)| StreamEvent::SignatureDelta { index, signature }),
            (idx.clone(), "[{}a-z\"]{0,4}")
                .prop_map(|(index, partial_json)| StreamEvent::ToolArgsDelta { index, partial_json }),
            idx.prop_map(|index| StreamEvent::BlockStop { index }),
            (prop::option::of(arb_stop()), arb_usage()).prop_map(|(stop_reason, usage)| StreamEvent::Finish {
                stop_reason,
                stop_sequence: None,
                usage
            }),
            Just(StreamEvent::End),
            "[a-z ]{0,6}".prop_map(|message| StreamEvent::Error { kind: ErrorKind::Api, message }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn decoders_never_panic(v in arb_json(), w in arb_json(), status in any::<u16>()) {
            let _ = decode_request(&serde_json::to_vec(&v).unwrap());
            let _ = decode_request(&serde_json::to_vec(&json!({"model": "m", "messages": [v.clone(), w.clone()], "tools": [w.clone()], "tool_choice": v.clone()})).unwrap());
            let _ = decode_response(&serde_json::to_vec(&v).unwrap());
            let _ = decode_response(&serde_json::to_vec(&json!({"choices": [{"message": v.clone(), "finish_reason": w.clone()}], "usage": w.clone()})).unwrap());
            let _ = decode_error(status, &serde_json::to_vec(&v).unwrap());
            let mut d = StreamDecoder::new();
            let mut out = Vec::new();
            for data in [serde_json::to_string(&v).unwrap(), serde_json::to_string(&json!({"choices": [{"delta": w.clone(), "finish_reason": v.clone()}], "usage": v.clone()})).unwrap(), "[DONE]".to_owned()] {
                d.decode(&SseEvent { event: None, data: &data }, &mut out);
            }
            d.finish(&mut out);
        }

        #[test]
        fn decoders_never_panic_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..64), status in any::<u16>()) {
            let _ = decode_request(&bytes);
            let _ = decode_response(&bytes);
            let _ = decode_error(status, &bytes);
            let mut d = StreamDecoder::new();
            let mut out = Vec::new();
            let mut scanner = SseScanner::new();
            scanner.feed(&bytes, |e| d.decode(&e, &mut out));
            d.finish(&mut out);
        }

        #[test]
        fn encoders_never_panic(req in arb_any_request(), parts in prop::collection::vec(arb_part(), 0..6), stop in prop::option::of(arb_stop()), usage in arb_usage(), evs in prop::collection::vec(arb_event(), 0..16), include_usage in any::<bool>()) {
            let _ = encode_request(&req);
            let resp = Response { content: parts, stop_reason: stop, usage, ..Response::default() };
            let body = encode_response(&resp, &ctx());
            prop_assert!(serde_json::from_slice::<Value>(&body).is_ok());
            let sse = encode_events(&evs, EncodeContext { include_usage, ..ctx() });
            // Whatever the event order, the output is well-formed SSE of JSON chunks.
            let mut scanner = SseScanner::new();
            let mut ok = true;
            scanner.feed(sse.as_bytes(), |e| ok &= e.data == "[DONE]" || serde_json::from_str::<Value>(e.data).is_ok());
            prop_assert!(ok);
            let _ = encode_error(&ErrorBody { kind: ErrorKind::Api, message: "x".into(), code: None, param: None });
        }
    }
}
