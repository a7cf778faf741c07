//! The IR to a request for a Responses upstream (the Responses API as the endpoint). The body is
//! written from structs that borrow the IR: a long conversation's text and its tools' schemas
//! are serialized from where they are, never copied into a `Value` first.

use std::borrow::Cow;

use serde_json::{Value, json};

use super::super::{REDACTED_BLOB, THINKING_BLOB, image_url, tool_output_value};
use super::body::*;
use crate::convert::ir::*;
use crate::protocol::lenient::{arguments_string, data_url, filename_for_media_type};

/// The Responses API rejects `max_output_tokens` below this.
const MIN_MAX_OUTPUT_TOKENS: u64 = 16;

/// Separator between system parts joined into `instructions`.
const INSTRUCTIONS_SEPARATOR: &str = "\n\n";

/// Longest `user` value passed on unchanged; longer ids are replaced by a stable digest.
const MAX_USER_LEN: usize = 64;

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

#[derive(Default)]
struct RequestEncoder<'a> {
    losses: Vec<Loss>,
    items: Vec<ItemOut<'a>>,
    thinking_dropped: usize,
    reasoning_dropped: usize,
    kept_encrypted_reasoning: bool,
}

impl<'a> RequestEncoder<'a> {
    fn loss(&mut self, field: impl Into<String>, note: impl Into<String>) {
        self.losses.push(Loss::new(field, note));
    }

    fn flush(&mut self, role: &'static str, content: &mut Vec<PartOut<'a>>) {
        if content.is_empty() {
            return;
        }
        self.items.push(ItemOut::Message { role, content: std::mem::take(content) });
    }

    fn input_part(&mut self, field: impl FnOnce() -> String, part: &'a Part) -> Option<PartOut<'a>> {
        match part {
            Part::Text(t) => Some(PartOut::InputText { text: Cow::Borrowed(&t.text) }),
            Part::Image(img) => Some(PartOut::InputImage { image_url: image_url(img), detail: "auto" }),
            Part::Document { source, title } => Some(match source {
                DocumentSource::Base64 { media_type, data } => PartOut::InputFile {
                    filename: Some(title.as_deref().unwrap_or_else(|| filename_for_media_type(media_type))),
                    file_data: Some(data_url(media_type, data)),
                    file_url: None,
                },
                DocumentSource::Url { url } => {
                    PartOut::InputFile { filename: None, file_data: None, file_url: Some(url) }
                }
                DocumentSource::Text { text } => {
                    let text = match title {
                        Some(t) if !t.is_empty() => Cow::Owned(format!("{t}\n\n{text}")),
                        _ => Cow::Borrowed(text.as_str()),
                    };
                    PartOut::InputText { text }
                }
            }),
            Part::ToolUse { .. } | Part::ToolResult { .. } => {
                self.loss(
                    field(),
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

    fn user_message(&mut self, mi: usize, msg: &'a Message) {
        let mut content = Vec::new();
        for (pi, part) in msg.content.iter().enumerate() {
            if let Part::ToolResult { tool_use_id, content: result, is_error } = part {
                self.flush("user", &mut content);
                let output = tool_output_value(result, *is_error);
                self.items.push(ItemOut::FunctionCallOutput { call_id: tool_use_id, output });
                continue;
            }
            if let Some(v) = self.input_part(|| format!("messages[{mi}].content[{pi}]"), part) {
                content.push(v);
            }
        }
        self.flush("user", &mut content);
    }

    fn assistant_message(&mut self, mi: usize, msg: &'a Message) {
        let mut content = Vec::new();
        for (pi, part) in msg.content.iter().enumerate() {
            let field = || format!("messages[{mi}].content[{pi}]");
            match part {
                Part::Text(t) => {
                    if !t.text.is_empty() {
                        content.push(PartOut::OutputText { text: &t.text });
                    }
                }
                Part::ToolUse { id, name, input, arguments } => {
                    self.flush("assistant", &mut content);
                    self.items.push(ItemOut::FunctionCall {
                        call_id: id,
                        name,
                        arguments: arguments_string(input, arguments.as_deref()),
                    });
                }
                Part::Thinking { .. } | Part::RedactedThinking { .. } => self.thinking_dropped += 1,
                Part::ReasoningItem { id, summary, encrypted_content } => match encrypted_content {
                    Some(enc) if !enc.starts_with(THINKING_BLOB) && !enc.starts_with(REDACTED_BLOB) => {
                        self.flush("assistant", &mut content);
                        self.items.push(ItemOut::Reasoning {
                            id: id.as_deref(),
                            summary: summary.iter().map(String::as_str).collect(),
                            encrypted_content: enc,
                        });
                        self.kept_encrypted_reasoning = true;
                    }
                    _ => self.reasoning_dropped += 1,
                },
                Part::Image(_) | Part::Document { .. } => {
                    self.loss(field(), "dropped: an assistant message in the Responses format carries only text");
                }
                Part::ToolResult { .. } => {
                    self.loss(
                        field(),
                        "dropped: a tool result inside an assistant message has no equivalent in the Responses format",
                    );
                }
            }
        }
        self.flush("assistant", &mut content);
    }

    fn system_message(&mut self, mi: usize, msg: &'a Message) {
        let mut content = Vec::new();
        for (pi, part) in msg.content.iter().enumerate() {
            match part {
                Part::Text(t) => content.push(PartOut::InputText { text: Cow::Borrowed(&t.text) }),
                _ => self.loss(
                    format!("messages[{mi}].content[{pi}]"),
                    "dropped: a system message in the Responses format carries only text",
                ),
            }
        }
        self.flush("system", &mut content);
    }
}

/// IR → request body for a Responses upstream.
pub fn encode_request(req: &Request) -> Result<Encoded, ConvertError> {
    let mut e = RequestEncoder::default();

    let instructions: Vec<&str> = req.system.iter().map(|t| t.text.as_str()).filter(|t| !t.is_empty()).collect();
    let instructions = (!instructions.is_empty()).then(|| instructions.join(INSTRUCTIONS_SEPARATOR));

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

    let tools = req
        .tools
        .iter()
        .map(|t| ToolOut {
            name: &t.name,
            description: t.description.as_deref(),
            parameters: &t.input_schema,
            // The Responses API defaults `strict` to true, which rejects most schemas written
            // for other APIs: say false unless the source asked for strict.
            strict: t.strict.unwrap_or(false),
        })
        .collect();
    let tool_choice = req.tool_choice.as_ref().map(|tc| match tc {
        ToolChoice::Auto => ToolChoiceOut::Mode("auto"),
        ToolChoice::Any => ToolChoiceOut::Mode("required"),
        ToolChoice::None => ToolChoiceOut::Mode("none"),
        ToolChoice::Tool(name) => ToolChoiceOut::Function(name),
    });
    let max_output_tokens = req.max_tokens.map(|max| {
        if max < MIN_MAX_OUTPUT_TOKENS {
            e.loss("max_tokens", format!("raised from {max} to {MIN_MAX_OUTPUT_TOKENS}, the Responses API minimum"));
            MIN_MAX_OUTPUT_TOKENS
        } else {
            max
        }
    });
    if req.top_k.is_some() {
        e.loss("top_k", "dropped: the Responses API has no top_k");
    }
    if !req.stop.is_empty() {
        e.loss("stop", "dropped: the Responses API has no stop sequences");
    }
    let mut reasoning_on = false;
    let reasoning = req.reasoning.as_ref().map(|r| {
        let effort = match r.effort.as_deref() {
            Some(e @ ("none" | "minimal" | "low" | "medium" | "high" | "xhigh")) => Some(e),
            Some("max") => {
                e.loss("reasoning.effort", "effort `max` sent as `xhigh`, the highest Responses effort");
                Some("xhigh")
            }
            Some(other) => {
                e.loss("reasoning.effort", format!("dropped: unknown effort `{other}`"));
                None
            }
            None => r.budget_tokens.map(effort_for_budget),
        };
        let disabled = effort == Some("none");
        reasoning_on = !disabled;
        // Ask for a summary so the client sees the reasoning (as thinking text).
        let summary = (!disabled).then(|| r.summary.as_deref().unwrap_or("auto"));
        ReasoningOut { effort, summary }
    });
    let text_format = req.output_format.as_ref().map(|format| match format {
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
    });
    let user = req.user.as_deref().map(|user| {
        if user.chars().count() > MAX_USER_LEN {
            e.loss("user", format!("longer than {MAX_USER_LEN} characters: sent as a stable digest"));
            Cow::Owned(format!("u_{}", digest(user)))
        } else {
            Cow::Borrowed(user)
        }
    });
    // The reasoning itself, encrypted, so it can be sent back next turn: with store=false the
    // endpoint keeps nothing, and a client that asked for thinking (an Anthropic client gets it
    // as its thinking blocks' signature) expects its reasoning to carry over, as Codex's does.
    let include = (req.include_encrypted_reasoning || e.kept_encrypted_reasoning || reasoning_on)
        .then_some("reasoning.encrypted_content");

    let out = ResponsesRequestOut {
        model: &req.model,
        instructions,
        input: std::mem::take(&mut e.items),
        tools,
        tool_choice,
        parallel_tool_calls: req.parallel_tool_calls,
        max_output_tokens,
        temperature: req.temperature,
        top_p: req.top_p,
        reasoning,
        text_format,
        user,
        prompt_cache_key: req.prompt_cache_key.as_deref(),
        stream: req.stream,
        // A gateway must not make the upstream store conversations the client never asked it to.
        store: false,
        include,
    };
    Ok(Encoded { body: out.to_json(request_capacity(req)), losses: e.losses })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::convert::responses::tests::*;
    use serde_json::json;

    #[test]
    fn encrypted_reasoning_is_asked_for_only_with_reasoning() {
        let mut req = claude_code_like();
        req.reasoning = None;
        assert!(enc(&req).0.get("include").is_none(), "no thinking, no encrypted reasoning");
        req.reasoning = Some(Reasoning { effort: Some("none".into()), ..Reasoning::default() });
        assert!(enc(&req).0.get("include").is_none(), "thinking turned off");
        req.reasoning = Some(Reasoning { budget_tokens: Some(4096), ..Reasoning::default() });
        let (body, _) = enc(&req);
        assert_eq!(
            (body["include"].clone(), body["store"].clone()),
            (json!(["reasoning.encrypted_content"]), json!(false))
        );
    }

    #[test]
    fn a_carried_reasoning_item_goes_back_as_itself() {
        // What the Anthropic decoder makes of a thinking block whose signature carries a
        // Responses reasoning item (next turn of an Anthropic client).
        let mut req = claude_code_like();
        req.messages = vec![
            Message {
                role: Role::User,
                content: vec![Part::Text(TextPart { text: "hi".into(), cache_control: None })],
            },
            Message {
                role: Role::Assistant,
                content: vec![
                    Part::ReasoningItem {
                        id: Some("rs_1".into()),
                        summary: vec!["Plan.".into()],
                        encrypted_content: Some("gAAAA".into()),
                    },
                    Part::Text(TextPart { text: "Hello.".into(), cache_control: None }),
                ],
            },
        ];
        let (body, losses) = enc(&req);
        assert_eq!(
            body["input"][1],
            json!({"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Plan."}], "encrypted_content": "gAAAA"})
        );
        assert!(losses.iter().all(|l| !l.field.contains("thinking")), "{losses:?}");
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
        // Thinking was asked for: its encrypted reasoning comes back to be sent next turn.
        assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
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
}
