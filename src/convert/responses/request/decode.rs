//! A Responses request (Codex CLI's, an SDK's) to the IR: `instructions` and `input` items to
//! system parts and messages, namespaced tools flattened, ccmesh's own reasoning carriers
//! restored to signed thinking.

use serde_json::{Value, json};

use super::super::{flat_tool_name, get_str, is_set, reasoning_part, take_str, text_part};
use crate::convert::ir::*;
use crate::protocol::lenient::{count, media_type_for_filename, parse_arguments, parse_data_url};

/// Where a request's tool schemas are, kept as the client's text (`ir::schema`): each function
/// tool's `parameters`, a namespace's functions' too.
const TOOL_SCHEMAS: SchemaPlaces = SchemaPlaces { list: "tools", member: "parameters", nested: true, wrapper: None };

/// `data:image/png;base64,AAAA` → base64 image; anything else is a URL.
fn image_from_url(url: &str) -> Image {
    if let Some((media_type, data)) = parse_data_url(url) {
        return Image::Base64 { media_type, data };
    }
    Image::Url { url: url.to_owned() }
}

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
    fn content_parts(&mut self, field: &Path<'_>, content: Option<&mut Value>) -> Result<Vec<Part>, ConvertError> {
        let mut out = Vec::new();
        match content {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => {
                if !s.is_empty() {
                    out.push(Part::Text(text_part(std::mem::take(s))));
                }
            }
            Some(Value::Array(parts)) => {
                for (j, p) in parts.iter_mut().enumerate() {
                    let pf = Path::Index(&Path::Member(field, "content"), j);
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

    fn content_part(&mut self, field: &Path<'_>, p: &mut Value) -> Result<Option<Part>, ConvertError> {
        let text_key = match get_str(p, "type").unwrap_or_default() {
            "input_text" | "output_text" | "text" => Some("text"),
            "refusal" => Some("refusal"),
            _ => None,
        };
        if let Some(key) = text_key {
            let text = take_str(p, key).unwrap_or_default();
            return Ok((!text.is_empty()).then(|| Part::Text(text_part(text))));
        }
        match get_str(p, "type").unwrap_or_default() {
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
    fn system_texts(&mut self, field: &Path<'_>, content: Option<&mut Value>) -> Result<Vec<TextPart>, ConvertError> {
        let mut out = Vec::new();
        match content {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => {
                if !s.is_empty() {
                    out.push(text_part(std::mem::take(s)));
                }
            }
            Some(Value::Array(parts)) => {
                for (j, p) in parts.iter_mut().enumerate() {
                    match get_str(p, "type") {
                        Some("input_text" | "output_text" | "text") => {
                            let t = take_str(p, "text").unwrap_or_default();
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

    fn input_item(&mut self, b: &mut MessageBuilder, i: usize, item: &mut Value) -> Result<(), ConvertError> {
        let field = Path::Index(&Path::Key("input"), i);
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
                        let texts = self.system_texts(&field, item.get_mut("content"))?;
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
                        for part in self.content_parts(&field, item.get_mut("content"))? {
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
                let Some(call_id) = call_id.map(str::to_owned) else {
                    return Err(ConvertError::new(format!("{field}.call_id"), "function_call without call_id"));
                };
                let Some(name) = get_str(item, "name") else {
                    return Err(ConvertError::new(format!("{field}.name"), "function_call without name"));
                };
                let name = match get_str(item, "namespace").filter(|ns| !ns.is_empty()) {
                    Some(ns) => flat_tool_name(ns, name),
                    None => name.to_owned(),
                };
                let raw = match item.get_mut("arguments") {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(s)) => std::mem::take(s),
                    Some(other) => other.to_string(),
                };
                b.push(
                    Role::Assistant,
                    Part::ToolUse { id: call_id, name, input: parse_arguments(&raw), arguments: Some(raw) },
                );
            }
            Some("function_call_output") => {
                let Some(call_id) = get_str(item, "call_id").map(str::to_owned) else {
                    return Err(ConvertError::new(format!("{field}.call_id"), "function_call_output without call_id"));
                };
                // Older Codex versions wrote a failed call as `{"content": "...", "success": false}`.
                let (output, is_error) = match item.get_mut("output") {
                    Some(Value::Object(o)) if o.contains_key("content") => {
                        let failed = o.get("success").and_then(Value::as_bool) == Some(false);
                        (o.get_mut("content"), failed)
                    }
                    other => (other, false),
                };
                let content = self.tool_output(&Path::Member(&field, "output"), output)?;
                b.push(Role::User, Part::ToolResult { tool_use_id: call_id, content, is_error });
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

    fn tool_output(
        &mut self,
        field: &Path<'_>,
        output: Option<&mut Value>,
    ) -> Result<Vec<ToolResultContent>, ConvertError> {
        let mut out = Vec::new();
        match output {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => {
                if !s.is_empty() {
                    out.push(ToolResultContent::Text(std::mem::take(s)));
                }
            }
            Some(Value::Array(parts)) => {
                for (j, p) in parts.iter_mut().enumerate() {
                    let pf = Path::Index(field, j);
                    match get_str(p, "type") {
                        Some("input_text" | "output_text" | "text") => {
                            let t = take_str(p, "text").unwrap_or_default();
                            if !t.is_empty() {
                                out.push(ToolResultContent::Text(t));
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

    fn tools(&mut self, tools: &mut [Value], schemas: &mut Schemas) -> Result<Vec<Tool>, ConvertError> {
        let mut out: Vec<Tool> = Vec::new();
        for (i, t) in tools.iter_mut().enumerate() {
            let field = Path::Index(&Path::Key("tools"), i);
            match get_str(t, "type") {
                Some("function") => {
                    let schema = schemas.take(Place::Element(i), t.get_mut("parameters"));
                    out.push(function_tool(&field, t, schema, None)?);
                }
                Some("namespace") => {
                    let Some(ns) = get_str(t, "name").map(str::to_owned) else {
                        return Err(ConvertError::new(format!("{field}.name"), "namespace tool without name"));
                    };
                    let ns = ns.as_str();
                    let nested =
                        t.get_mut("tools").and_then(Value::as_array_mut).map(Vec::as_mut_slice).unwrap_or_default();
                    for (j, nt) in nested.iter_mut().enumerate() {
                        let nf = Path::Index(&Path::Member(&field, "tools"), j);
                        match get_str(nt, "type") {
                            Some("function") => {
                                let schema = schemas.take(Place::Nested(i, j), nt.get_mut("parameters"));
                                out.push(function_tool(&nf, nt, schema, Some(ns))?);
                            }
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

/// A function tool, `parameters` being its schema taken out of it.
fn function_tool(
    field: &Path<'_>,
    t: &mut Value,
    parameters: Option<Schema>,
    namespace: Option<&str>,
) -> Result<Tool, ConvertError> {
    let Some(name) = take_str(t, "name") else {
        return Err(ConvertError::new(format!("{field}.name"), "function tool without name"));
    };
    let input_schema = parameters.unwrap_or_else(|| NO_PARAMETERS.clone());
    let (flat, ns) = match namespace {
        Some(ns) => (flat_tool_name(ns, &name), Some((ns.to_owned(), name))),
        None => (name, None),
    };
    Ok(Tool {
        name: flat,
        description: take_str(t, "description"),
        input_schema,
        strict: t.get("strict").and_then(Value::as_bool),
        namespace: ns,
    })
}

fn decode_input_image(field: &Path<'_>, p: &Value) -> Result<Image, ConvertError> {
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

fn decode_input_file(field: &Path<'_>, p: &Value) -> Result<Part, ConvertError> {
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

/// Client request body (Responses) → IR.
pub fn decode_request<'a>(body: impl Into<RequestBody<'a>>) -> Result<Request, ConvertError> {
    let ObjectWithSchemas { object, mut schemas } = parse_object_keeping_schemas(body.into(), TOOL_SCHEMAS)?;
    let mut root = Value::Object(object);
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
    match root.get_mut("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            if !s.is_empty() {
                b.system.push(text_part(std::mem::take(s)));
            }
        }
        Some(Value::Array(items)) => {
            // Newer API: instructions as a list of input messages (system/developer text).
            for (i, item) in items.iter_mut().enumerate() {
                let texts = d.system_texts(&Path::Index(&Path::Key("instructions"), i), item.get_mut("content"))?;
                b.system.extend(texts);
            }
        }
        Some(_) => return Err(ConvertError::new("instructions", "instructions must be a string")),
    }
    match root.get_mut("input") {
        Some(Value::String(s)) => b.push(Role::User, Part::Text(text_part(std::mem::take(s)))),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter_mut().enumerate() {
                d.input_item(&mut b, i, item)?;
            }
        }
        None | Some(Value::Null) => return Err(ConvertError::new("input", "input is required")),
        Some(_) => return Err(ConvertError::new("input", "input must be a string or an array of items")),
    }
    req.system = b.system;
    req.messages = b.messages;

    match root.get_mut("tools") {
        None | Some(Value::Null) => {}
        Some(Value::Array(tools)) => req.tools = d.tools(tools, &mut schemas)?,
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
    req.prompt_cache_key = get_str(&root, "prompt_cache_key").filter(|k| !k.is_empty()).map(str::to_owned);

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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::convert::responses::tests::*;
    use crate::convert::responses::{REDACTED_BLOB, THINKING_BLOB};
    use serde_json::{Value, json};

    /// Errors and losses deep in a request name the exact place, each path written out from
    /// its parts only when it is reported.
    #[test]
    fn errors_and_losses_name_their_place_in_the_request() {
        let r = dec(json!({
            "model": "m",
            "instructions": [{"role": "developer", "content": [{"type": "input_text", "text": "be brief"}, {"type": "input_image"}]}],
            "input": [
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "ok"}, {"type": "input_audio"}]},
                {"role": "user", "content": [{"type": "input_text", "text": "go"}, {"type": "input_file", "file_id": "file_1"}]}
            ],
            "tools": [{"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "g"}, {"type": "web_search"}]}]
        }));
        let err = r.expect_err("a file id cannot be converted");
        assert_eq!(err.field, "input[2].content[1].file_id");
        let r = dec(json!({
            "model": "m",
            "instructions": [{"role": "developer", "content": [{"type": "input_text", "text": "be brief"}, {"type": "input_image"}]}],
            "input": [
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "ok"}, {"type": "input_audio"}]}
            ],
            "tools": [{"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "g"}, {"type": "web_search"}]}]
        }))
        .expect("decodes");
        let lost: Vec<&str> = r.losses.iter().map(|l| l.field.as_str()).collect();
        for place in ["instructions[0].content[1]", "input[1].output[1]", "tools[0].tools[1] (web_search)"] {
            assert!(lost.contains(&place), "{place} not in {lost:?}");
        }
        let err = dec(json!({"model": "m", "input": [{"role": "user", "content": 5}]})).expect_err("bad content");
        assert_eq!(err.field, "input[0].content");
    }

    const CODEX_TURN1: &str =
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/clients/codex_0.171.0_responses_turn1.json"));

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
        // Every function's schema, a namespace's too, is kept as the text Codex sent.
        let body: Value = serde_json::from_slice(&fixture_body(CODEX_TURN2)).unwrap();
        let mut sent = Vec::new();
        for t in body["tools"].as_array().unwrap() {
            match t["type"].as_str() {
                Some("function") => sent.push(&t["parameters"]),
                Some("namespace") => sent.extend(t["tools"].as_array().unwrap().iter().map(|nt| &nt["parameters"])),
                _ => {}
            }
        }
        assert_eq!(req.tools.len(), sent.len());
        for (tool, sent) in req.tools.iter().zip(sent) {
            assert!(matches!(tool.input_schema, Schema::Text(_)), "{}", tool.name);
            assert_eq!(*tool.input_schema.value().unwrap(), *sent, "{}", tool.name);
        }
        insta::assert_snapshot!("codex_turn2_ir", format!("{req:#?}"));
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
            let req = dec(json!({"model": "gpt-5", "input": [{"role": "user", "content": [file]}]})).expect("decodes");
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
        let Part::Document { source: DocumentSource::Base64 { media_type, .. }, .. } = &req.messages[0].content[0]
        else {
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
}
