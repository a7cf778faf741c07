//! A Chat content chunk as OpenAI writes it (and the vendors that copy its shape), matched whole,
//! byte for byte, instead of parsed. Such chunks are nearly all of a Chat stream, and parsing one
//! (~4.5 k instructions) to learn that it is content cost as much as the rest of relaying it.
//! The classifier reads what a match says of the chunk, and the Chat stream decoder reads the
//! delta from it when it converts the stream.
//!
//! The match is exact: every byte of the chunk is accounted for by the shape below, so a chunk it
//! accepts is valid JSON that the parse would read the same way — a content delta with no finish,
//! no usage and no error, naming its model. Anything else (another member order, whitespace, a
//! role or a tool call in the delta, a `\u` escape, a finish reason) is left to the parse.
//!
//! ```text
//! {"id":S,"object":"chat.completion.chunk","created":N,"model":S[,"service_tier":S]
//!  [,"system_fingerprint":S|null],"choices":[{"index":0,"delta":{"content":T},"logprobs":null,
//!  "finish_reason":null}][,"usage":null][,"obfuscation":S]}
//! ```
//! S: a string with no escape; N: a whole number; T: any string without a `\u` escape.

use crate::protocol::plain_json::Cursor;

/// What a matched chunk says. Strings with no escape are their values as written; `content` is
/// the delta's text as written, escapes and all (`plain_json::unescaped` reads it).
#[derive(Debug, PartialEq, Eq)]
pub struct PlainChatDelta<'a> {
    pub id: &'a str,
    /// The digits of `created`.
    pub created: &'a str,
    pub model: &'a str,
    pub content: &'a str,
}

impl PlainChatDelta<'_> {
    /// The delta carries text (a chunk with empty content is a preamble).
    pub fn has_content(&self) -> bool {
        !self.content.is_empty()
    }
}

pub fn plain_chat_delta(data: &str) -> Option<PlainChatDelta<'_>> {
    let mut c = Cursor(data);
    c.literal(r#"{"id":"#)?;
    let id = c.plain_string()?;
    c.literal(r#","object":"chat.completion.chunk","created":"#)?;
    let created = c.digits()?;
    c.literal(r#","model":"#)?;
    let model = c.plain_string()?;
    if c.literal(r#","service_tier":"#).is_some() {
        c.plain_string()?;
    }
    if c.literal(r#","system_fingerprint":"#).is_some() && c.literal("null").is_none() {
        c.plain_string()?;
    }
    c.literal(r#","choices":[{"index":0,"delta":{"content":"#)?;
    let content = c.string_without_unicode_escapes()?;
    c.literal(r#"},"logprobs":null,"finish_reason":null}]"#)?;
    let _ = c.literal(r#","usage":null"#);
    if c.literal(r#","obfuscation":"#).is_some() {
        c.plain_string()?;
    }
    c.literal("}")?;
    c.is_done().then_some(PlainChatDelta { id, created, model, content })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::super::{EventKind, StreamContext, parsed_chat_chunk};
    use super::*;
    use crate::protocol::plain_json::strategies::{one_of, string};
    use proptest::prelude::*;

    /// Chunks in OpenAI's shape and near it: each member as OpenAI writes it or changed.
    fn chunk() -> impl Strategy<Value = String> {
        let head = (
            string(),
            one_of(&[
                r#","object":"chat.completion.chunk""#,
                r#","object":"error""#,
                r#", "object":"chat.completion.chunk""#,
            ]),
            one_of(&["1741570283", "0", "012", "-1", "1.5", "1e3", "\"1\""]),
            string(),
            prop::option::of(string()),
            prop::option::of(prop_oneof![Just("null".to_owned()), string()]),
        );
        let choices = (
            one_of(&[
                r#","choices":[{"index":0,"delta":{"content":"#,
                r#","choices":[{"index":1,"delta":{"content":"#,
                r#","choices":[{"index":0,"delta":{"role":"assistant","content":"#,
                r#","choices":{"index":0,"delta":{"content":"#,
            ]),
            string(),
            one_of(&[
                r#"},"logprobs":null,"finish_reason":null}]"#,
                r#"},"logprobs":null,"finish_reason":"stop"}]"#,
                r#"},"logprobs":null,"finish_reason":""}]"#,
                r#"},"finish_reason":null}]"#,
            ]),
        );
        let tail = (
            prop::option::of(one_of(&[r#","usage":null"#, r#","usage":{"prompt_tokens":3}"#, r#","usage":{}"#])),
            prop::option::of(string()),
            one_of(&["}", "} ", "", r#","error":{"message":"x"}}"#, r#","model":"again"}"#, "}}"]),
        );
        (head, choices, tail).prop_map(
            |((id, object, created, model, tier, fingerprint), (open, content, close), (usage, obfuscation, end))| {
                let mut s = format!("{{\"id\":{id}{object},\"created\":{created},\"model\":{model}");
                if let Some(tier) = tier {
                    s += &format!(",\"service_tier\":{tier}");
                }
                if let Some(fingerprint) = fingerprint {
                    s += &format!(",\"system_fingerprint\":{fingerprint}");
                }
                s += &format!("{open}{content}{close}{}", usage.unwrap_or_default());
                if let Some(o) = obfuscation {
                    s += &format!(",\"obfuscation\":{o}");
                }
                s + &end
            },
        )
    }

    fn parsed(data: &str) -> (EventKind, Option<String>) {
        let mut ctx = StreamContext::default();
        let kind = parsed_chat_chunk(data, &mut ctx);
        (kind, ctx.model)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]
        /// Whenever the match accepts a chunk, the parse classifies it as the match does and
        /// reads the same model.
        #[test]
        fn a_matched_chunk_is_classified_as_its_parse_would(data in chunk()) {
            if let Some(delta) = plain_chat_delta(&data) {
                let kind = if delta.has_content() { EventKind::Content } else { EventKind::Preamble };
                let model = Some(delta.model.to_owned()).filter(|m| !m.is_empty());
                prop_assert_eq!((kind, model), parsed(&data), "{}", data);
            }
        }
    }

    #[test]
    fn chunks_as_the_api_writes_them_are_matched() {
        let openai = r#"{"id":"chatcmpl-B9MB","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_fc9f1d7035","choices":[{"index":0,"delta":{"content":"Bon\"jour\n"},"logprobs":null,"finish_reason":null}],"usage":null}"#;
        let matched = PlainChatDelta {
            id: "chatcmpl-B9MB",
            created: "1741570283",
            model: "gpt-4o-2024-08-06",
            content: r#"Bon\"jour\n"#,
        };
        assert_eq!(plain_chat_delta(openai), Some(matched));
        let deepseek = r#"{"id":"d1","object":"chat.completion.chunk","created":1,"model":"deepseek-chat","system_fingerprint":null,"choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":null}]}"#;
        let matched = PlainChatDelta { id: "d1", created: "1", model: "deepseek-chat", content: "" };
        assert_eq!(plain_chat_delta(deepseek), Some(matched));
        assert_eq!(parsed(deepseek), (EventKind::Preamble, Some("deepseek-chat".to_owned())));
        // The first chunk names the role, the last one finishes: both are parsed.
        let role = openai.replace(r#""delta":{"#, r#""delta":{"role":"assistant","#);
        let finish = openai.replace(r#""finish_reason":null"#, r#""finish_reason":"stop""#);
        assert_eq!(plain_chat_delta(&role), None);
        assert_eq!(plain_chat_delta(&finish), None);
    }
}
