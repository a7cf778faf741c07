//! The IR to a request for a Chat Completions upstream (OpenAI or one of the many compatible
//! vendors). The body is written from structs that borrow the IR (`body`): a long conversation's
//! text and its tools' schemas are written from where they are, never copied into a `Value` first.

use std::borrow::Cow;

use serde_json::{Value, json};

use super::super::Obj;
use super::body::*;
use crate::convert::ir::*;
use crate::protocol::lenient::{arguments_string, data_url, filename_for_media_type};

/// OpenAI rejects a longer `user` (gateways such as Bifrost drop it for the same reason).
const MAX_USER_LEN: usize = 64;

/// Texts joined by a blank line, borrowed when there is only one.
fn joined<'a>(texts: &[&'a str]) -> Cow<'a, str> {
    match texts {
        [one] => Cow::Borrowed(one),
        many => Cow::Owned(many.join("\n\n")),
    }
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

/// Whether `model`, without a vendor prefix (`openai/gpt-5` → `gpt-5`), starts with one of
/// `prefixes` (lowercase), in any case.
fn bare_model_starts_with(model: &str, prefixes: &[&str]) -> bool {
    let model = model.as_bytes();
    let bare = model.iter().rposition(|&b| b == b'/').map_or(model, |slash| &model[slash + 1..]);
    prefixes.iter().any(|p| bare.get(..p.len()).is_some_and(|head| head.eq_ignore_ascii_case(p.as_bytes())))
}

/// Whether `model` is one of OpenAI's reasoning models, which refuse `max_tokens`.
fn is_openai_reasoning_model(model: &str) -> bool {
    bare_model_starts_with(model, &["o1", "o3", "o4", "gpt-5", "codex-"])
}

/// Whether `model` is one of OpenAI's models without reasoning, which refuse `reasoning_effort`
/// (`gpt-5-chat` is the non-reasoning GPT-5).
fn is_openai_non_reasoning_model(model: &str) -> bool {
    bare_model_starts_with(model, &["gpt-4", "gpt-3.5", "chatgpt-", "gpt-5-chat"])
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
        messages.push(MessageOut::text("system", joined(&system)));
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
                    messages.push(MessageOut::text("system", joined(&texts)));
                }
            }
            Role::User => encode_user_message(i, &m.content, &mut messages, &mut losses)?,
            Role::Assistant => {
                let mut texts: Vec<&str> = Vec::new();
                let mut calls = Vec::new();
                for (j, p) in m.content.iter().enumerate() {
                    let at = || format!("messages[{i}].content[{j}]");
                    match p {
                        Part::Text(t) => texts.push(&t.text),
                        Part::ToolUse { id, name, input, arguments } => calls.push(ToolCallOut {
                            id,
                            name,
                            arguments: arguments_string(input, arguments.as_deref()),
                        }),
                        Part::Thinking { .. } => thinking.add(at()),
                        Part::RedactedThinking { .. } => redacted.add(at()),
                        Part::ReasoningItem { .. } => reasoning_items.add(at()),
                        other => losses.push(Loss::new(
                            format!("{} ({})", at(), part_kind(other)),
                            "dropped: an OpenAI Chat assistant message carries only text and tool calls",
                        )),
                    }
                }
                if texts.is_empty() && calls.is_empty() {
                    continue;
                }
                // An assistant turn's texts are one text, run together as they were streamed.
                let content = match texts.as_slice() {
                    [] => ContentOut::None,
                    [one] => ContentOut::Text(Cow::Borrowed(one)),
                    many => ContentOut::Text(Cow::Owned(many.concat())),
                };
                messages.push(MessageOut {
                    role: "assistant",
                    content,
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

    let tools: Vec<ToolOut<'_>> = req
        .tools
        .iter()
        .map(|t| ToolOut {
            name: &t.name,
            description: t.description.as_deref(),
            parameters: if t.input_schema.is_null() { &NO_PARAMETERS } else { &t.input_schema },
            strict: t.strict,
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
            ToolChoice::Auto => ToolChoiceOut::Mode("auto"),
            ToolChoice::Any => ToolChoiceOut::Mode("required"),
            ToolChoice::None => ToolChoiceOut::Mode("none"),
            ToolChoice::Tool(name) => ToolChoiceOut::Function(name),
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
            losses
                .push(Loss::new("user", format!("dropped: longer than the {MAX_USER_LEN} characters OpenAI accepts")));
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
        stream_options: req.stream.then_some(true),
    };
    Ok(Encoded { body: out.to_json(request_capacity(req)), losses })
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

fn image_part(img: &Image) -> PartOut<'_> {
    let url = match img {
        Image::Base64 { media_type, data } => Cow::Owned(data_url(media_type, data)),
        Image::Url { url } => Cow::Borrowed(url.as_str()),
    };
    PartOut::ImageUrl { url }
}

/// One IR user message → `tool` messages (one per result, first, so they directly follow the
/// assistant turn that called them), then one `user` message with the rest.
fn encode_user_message<'a>(
    i: usize,
    parts: &'a [Part],
    messages: &mut Vec<MessageOut<'a>>,
    losses: &mut Vec<Loss>,
) -> Result<(), ConvertError> {
    let mut moved: Vec<PartOut<'a>> = Vec::new();
    let mut rest: Vec<PartOut<'a>> = Vec::new();
    for (j, p) in parts.iter().enumerate() {
        let at = || format!("messages[{i}].content[{j}]");
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
                let mut s = if texts.is_empty() { Cow::Borrowed("") } else { joined(&texts) };
                if !images.is_empty() {
                    let n = images.len();
                    let note = if n == 1 {
                        "[1 image attached in the next user message]".to_owned()
                    } else {
                        format!("[{n} images attached in the next user message]")
                    };
                    let text = s.to_mut();
                    if !text.is_empty() {
                        text.push_str("\n\n");
                    }
                    text.push_str(&note);
                    moved.push(PartOut::Text { text: Cow::Owned(format!("Image output of tool call {tool_use_id}:")) });
                    moved.extend(images.into_iter().map(image_part));
                    losses.push(Loss::new(
                        format!("{} (tool_result image)", at()),
                        "moved to a user message after the tool messages: Chat tool messages carry only text",
                    ));
                }
                if *is_error {
                    s = Cow::Owned(if s.is_empty() { "Error".to_owned() } else { format!("Error: {s}") });
                }
                messages.push(MessageOut {
                    role: "tool",
                    content: ContentOut::Text(s),
                    tool_calls: None,
                    tool_call_id: Some(tool_use_id),
                });
            }
            Part::Text(t) => rest.push(PartOut::Text { text: Cow::Borrowed(&t.text) }),
            Part::Image(img) => rest.push(image_part(img)),
            Part::Document { source, title } => match source {
                DocumentSource::Base64 { media_type, data } => {
                    let filename = title.as_deref().unwrap_or_else(|| filename_for_media_type(media_type));
                    rest.push(PartOut::File { filename, file_data: data_url(media_type, data) });
                }
                DocumentSource::Text { text } => {
                    let text = match title {
                        Some(title) => Cow::Owned(format!("{title}\n\n{text}")),
                        None => Cow::Borrowed(text.as_str()),
                    };
                    rest.push(PartOut::Text { text });
                    losses.push(Loss::new(
                        format!("{} (document)", at()),
                        "a plain-text document is sent as a text part",
                    ));
                }
                DocumentSource::Url { .. } => {
                    return Err(ConvertError::new(
                        at(),
                        "a document given by URL cannot be sent to an OpenAI Chat endpoint: file parts carry only inline base64 data",
                    ));
                }
            },
            other => losses.push(Loss::new(
                format!("{} ({})", at(), part_kind(other)),
                "dropped: a user message cannot carry it in the OpenAI Chat format",
            )),
        }
    }
    moved.extend(rest);
    if moved.is_empty() {
        return Ok(());
    }
    // Only text: one string, which every OpenAI-compatible vendor accepts.
    let content = if moved.iter().all(|p| matches!(p, PartOut::Text { .. })) {
        let mut texts = moved.into_iter().map(|p| match p {
            PartOut::Text { text } => text,
            _ => Cow::Borrowed(""),
        });
        let first = texts.next().unwrap_or_default();
        ContentOut::Text(texts.fold(first, |mut all, text| {
            let all_text = all.to_mut();
            all_text.push_str("\n\n");
            all_text.push_str(&text);
            all
        }))
    } else {
        ContentOut::Parts(moved)
    };
    messages.push(MessageOut { role: "user", content, tool_calls: None, tool_call_id: None });
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::convert::openai_chat::tests::*;
    use crate::convert::openai_chat::text;
    use insta::{assert_json_snapshot, assert_snapshot};
    use serde_json::{Value, json};

    const CLAUDE_CODE_TURN2: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/clients/claude_code_2.1.197_turn2_tool_result.json"
    ));

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
                    input_schema: t["input_schema"].clone().into(),
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
                    input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}).into(),
                    strict: Some(true),
                    namespace: None,
                },
                Tool {
                    name: "shot".into(),
                    description: None,
                    input_schema: Value::Null.into(),
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
            prompt_cache_key: None,
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

    /// The body's bytes: every member in OpenAI's order, each part and call in its shape, the
    /// kept schema as the client wrote it, text escaped as JSON escapes it.
    #[test]
    fn the_body_is_written_in_order_byte_for_byte() {
        let mut req = feature_request();
        req.model = "gpt-5".into();
        req.user = Some("u\"1".into());
        req.tools[0].input_schema = Schema::Text(SchemaText::parse(r#"{ "type": "object" }"#).unwrap());
        req.messages.truncate(3);
        req.messages[0].content.truncate(5);
        let body = String::from_utf8(encode_request(&req).unwrap().body).unwrap();
        let expected = concat!(
            r#"{"model":"gpt-5","messages":[{"role":"system","content":"You are a helpful assistant.\n\nBe brief."},"#,
            r#"{"role":"user","content":[{"type":"text","text":"<system-reminder>ctx</system-reminder>"},{"type":"text","text":"Describe these."},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}},{"type":"image_url","image_url":{"url":"https://example.com/a.jpg"}},{"type":"file","file":{"filename":"document.pdf","file_data":"data:application/pdf;base64,JVBERi0x"}}]},"#,
            r#"{"role":"assistant","content":"Looking.","tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"read","arguments":"{\"path\":\"a.txt\"}"}},{"id":"toolu_2","type":"function","function":{"name":"shot","arguments":"{ \"full\": true }"}}]},"#,
            r#"{"role":"tool","content":"Error: no such file","tool_call_id":"toolu_1"},"#,
            r#"{"role":"tool","content":"captured\n\n[1 image attached in the next user message]","tool_call_id":"toolu_2"},"#,
            r#"{"role":"user","content":[{"type":"text","text":"Image output of tool call toolu_2:"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},{"type":"text","text":"Thanks, continue."}]}],"#,
            r#""tools":[{"type":"function","function":{"name":"read","description":"Read a file","parameters":{ "type": "object" },"strict":true}},{"type":"function","function":{"name":"shot","parameters":{"properties":{},"type":"object"}}}],"#,
            r#""tool_choice":"required","parallel_tool_calls":false,"max_completion_tokens":4096,"temperature":0.0,"top_p":0.5,"stop":["STOP"],"reasoning_effort":"medium","response_format":{"json_schema":{"name":"response","schema":{"type":"object"},"strict":true},"type":"json_schema"},"user":"u\"1","stream":true,"stream_options":{"include_usage":true}}"#,
        );
        assert_eq!(body, expected);
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
        // Any case, any vendor prefix; a name shorter than a prefix is none of them.
        assert_eq!(
            case("Azure/GPT-5-mini", r(None, Some("low"), false)),
            (Some("low".into()), "max_completion_tokens")
        );
        assert_eq!(case("GPT-4o", r(None, Some("low"), false)), (None, "max_tokens"));
        assert_eq!(case("gpt", r(None, Some("low"), false)), (Some("low".into()), "max_tokens"));
        assert_eq!(case("o3/kimi", None), (None, "max_tokens"));
    }

    #[test]
    fn tool_calls_without_arguments_send_an_empty_object() {
        // This codec sent `""` (and `null` for a missing input), which is not a JSON object;
        // the Responses codec sent `{}`.
        let call = |input: Value, arguments: Option<&str>| {
            let req = Request {
                model: "m".into(),
                messages: vec![
                    msg(Role::User, vec![text("go")]),
                    msg(
                        Role::Assistant,
                        vec![Part::ToolUse {
                            id: "c".into(),
                            name: "f".into(),
                            input,
                            arguments: arguments.map(str::to_owned),
                        }],
                    ),
                ],
                ..Request::default()
            };
            let (b, _) = enc(&req);
            b["messages"][1]["tool_calls"][0]["function"]["arguments"].clone()
        };
        assert_eq!(call(json!({}), Some("")), json!("{}"));
        assert_eq!(call(Value::Null, None), json!("{}"));
        assert_eq!(call(json!({"a": 1}), None), json!("{\"a\":1}"));
        assert_eq!(call(json!({}), Some("{\"a\": 1}")), json!("{\"a\": 1}"));
    }

    #[test]
    fn encode_minimal_and_tool_choice() {
        let f = Tool {
            name: "f".into(),
            description: None,
            input_schema: json!({"type": "object"}).into(),
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
}
