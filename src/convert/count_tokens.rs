//! A local estimate for `POST /v1/messages/count_tokens`, used when no Anthropic endpoint can
//! count (the endpoint is OpenAI-format, or an Anthropic-compatible relay answers 404/405/501).
//!
//! Text, tool names, descriptions and JSON schemas are counted with the `o200k_base` BPE (the
//! tokenizer of current OpenAI models; Claude's own tokenizer is not public, and o200k is a
//! close, usually slightly low, proxy for English and code). Images and documents cannot be
//! measured without decoding them, so they get a fixed allowance (documented in
//! docs/protocols.md). The answer is marked `x-ccmesh-token-count: estimated`.

use std::sync::OnceLock;

use super::ir::{DocumentSource, Part, Request, ToolResultContent};

/// Anthropic's published cost of an image at its largest default size (~1.15 megapixels:
/// width × height / 750 ≈ 1,600 tokens). Smaller images cost less; we cannot see the size.
pub const IMAGE_TOKENS: u64 = 1_600;
/// Per-message framing (role markers, separators), as in OpenAI's published counting recipe.
pub const MESSAGE_OVERHEAD: u64 = 3;
/// Per-tool framing around name, description and schema.
pub const TOOL_OVERHEAD: u64 = 8;
/// A document (PDF) we cannot open: a conservative per-document allowance plus its text.
pub const DOCUMENT_TOKENS: u64 = 1_500;

fn bpe() -> Option<&'static tiktoken_rs::CoreBPE> {
    static BPE: OnceLock<Option<tiktoken_rs::CoreBPE>> = OnceLock::new();
    BPE.get_or_init(|| tiktoken_rs::o200k_base().ok()).as_ref()
}

fn text_tokens(text: &str) -> u64 {
    match bpe() {
        Some(b) => b.encode_ordinary(text).len() as u64,
        // Without the tokenizer (cannot happen with the embedded vocabulary), ~4 chars a token.
        None => (text.chars().count() as u64).div_ceil(4),
    }
}

pub fn estimate(request: &Request) -> u64 {
    let mut total = 3; // reply priming
    for part in &request.system {
        total += text_tokens(&part.text);
    }
    if !request.system.is_empty() {
        total += MESSAGE_OVERHEAD;
    }
    for message in &request.messages {
        total += MESSAGE_OVERHEAD;
        for part in &message.content {
            total += part_tokens(part);
        }
    }
    for tool in &request.tools {
        total += TOOL_OVERHEAD + text_tokens(&tool.name);
        if let Some(d) = &tool.description {
            total += text_tokens(d);
        }
        total += text_tokens(&tool.input_schema.text());
    }
    total
}

fn part_tokens(part: &Part) -> u64 {
    match part {
        Part::Text(t) => text_tokens(&t.text),
        Part::Image(_) => IMAGE_TOKENS,
        Part::ToolUse { name, input, arguments, .. } => {
            text_tokens(name) + arguments.as_deref().map(text_tokens).unwrap_or_else(|| text_tokens(&input.to_string()))
        }
        Part::ToolResult { content, .. } => content
            .iter()
            .map(|c| match c {
                ToolResultContent::Text(t) => text_tokens(t),
                ToolResultContent::Image(_) => IMAGE_TOKENS,
            })
            .sum(),
        Part::Thinking { text, .. } => text_tokens(text),
        Part::RedactedThinking { .. } | Part::ReasoningItem { .. } => 0,
        Part::Document { source, title } => {
            let t = title.as_deref().map(text_tokens).unwrap_or(0);
            t + match source {
                DocumentSource::Text { text } => text_tokens(text),
                DocumentSource::Base64 { .. } | DocumentSource::Url { .. } => DOCUMENT_TOKENS,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::ir::{Image, Message, Role, TextPart, Tool};
    use serde_json::json;

    fn text(t: &str) -> Part {
        Part::Text(TextPart { text: t.into(), cache_control: None })
    }

    #[test]
    fn counts_text_with_the_real_tokenizer() {
        // "Hello, world!" is 4 o200k tokens.
        assert_eq!(text_tokens("Hello, world!"), 4);
        let req = Request {
            messages: vec![Message { role: Role::User, content: vec![text("Hello, world!")] }],
            ..Request::default()
        };
        assert_eq!(estimate(&req), 3 + MESSAGE_OVERHEAD + 4);
    }

    #[test]
    fn images_tools_and_system_add_up() {
        let req = Request {
            system: vec![TextPart { text: "Be brief.".into(), cache_control: None }],
            messages: vec![Message {
                role: Role::User,
                content: vec![text("hi"), Part::Image(Image::Url { url: "https://x/y.png".into() })],
            }],
            tools: vec![Tool {
                name: "get_weather".into(),
                description: Some("Weather for a city".into()),
                input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}}}).into(),
                strict: None,
                namespace: None,
            }],
            ..Request::default()
        };
        let schema = text_tokens(&req.tools[0].input_schema.text());
        let want = 3
            + text_tokens("Be brief.")
            + MESSAGE_OVERHEAD
            + MESSAGE_OVERHEAD
            + text_tokens("hi")
            + IMAGE_TOKENS
            + TOOL_OVERHEAD
            + text_tokens("get_weather")
            + text_tokens("Weather for a city")
            + schema;
        assert_eq!(estimate(&req), want);
    }
}
