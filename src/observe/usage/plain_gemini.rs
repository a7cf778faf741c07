//! A Gemini answer, or a chunk of a Gemini stream, read for its usage and model by matching it
//! instead of parsing it. The API puts `usageMetadata` in every chunk of a stream, so each one
//! was parsed (~5 k instructions for a short chunk); the reading needs two members and skips the
//! candidates. The API spaces its JSON: a space after each colon in a chunk, an answer
//! pretty-printed, and `<`, `>`, `&`, `=` and `'` written as `\u` escapes.
//!
//! The match is exact, as `protocol::plain_json` promises: a body it accepts is valid JSON that
//! the parse (`parsed::<GeminiBody>`) reads to the same usage, model and envelope. Members may
//! come in any order, with whitespace between tokens. Anything the grammar below does not cover
//! (a snake_case spelling, which the parse weighs against the camelCase one; an `error` or
//! `status` member; a count that is not a whole number; values nested deeper than `SKIP_DEPTH`; a
//! field the reading keeps named twice) is left to the parse.
//!
//! ```text
//! body:    {M,...} and nothing around it but whitespace
//! M:       "modelVersion":S-or-null | "usageMetadata":U | "K":V
//!          (not "error", "status", "model_version", "usage_metadata")
//! U:       `protocol::gemini_usage`'s: null or the five counts, no snake_case spelling
//! V:       a string (a `\u` escape naming no surrogate too) | a number | null | true | false
//!          | arrays and objects of those, at most `SKIP_DEPTH` inside one another
//! ```
//! S and K: a string with no escape.

use super::{AnswerRead, Envelope, GeminiUsage, answered_model};
use crate::protocol::gemini_usage::usage_metadata;
use crate::protocol::lenient::Count;
use crate::protocol::plain_json::{Cursor, Seen};
use crate::protocol::stream_events::PlainTextChunk;

/// How deep the skipped members may nest: `candidates` → a candidate → `content` → `parts` → a
/// part → `functionCall` → `args`, then the arguments' own values.
const SKIP_DEPTH: u8 = 12;

/// What the reading keeps of a Gemini body: its model and usage.
pub(super) struct GeminiRead<'a> {
    pub model: Option<&'a str>,
    pub usage: Option<GeminiUsage>,
}

pub(super) fn plain_gemini_answer(body: &str) -> Option<AnswerRead> {
    plain_gemini_body(body).map(|read| AnswerRead {
        tokens: read.usage.map(GeminiUsage::tokens).unwrap_or_default(),
        model: read.model.and_then(answered_model),
        envelope: Some(Envelope { error: false, status: None }),
    })
}

/// A Gemini answer or chunk matched (`body` in the grammar above).
pub(super) fn plain_gemini_body(body: &str) -> Option<GeminiRead<'_>> {
    let mut c = Cursor::whole(body);
    let mut seen = Seen::default();
    let mut read = GeminiRead { model: None, usage: None };
    c.members(|c, key| {
        match key {
            "modelVersion" => read.model = seen.first(0).and_then(|()| c.null_or(Cursor::plain_string))?,
            "usageMetadata" => read.usage = seen.first(1).and_then(|()| usage(c))?,
            "error" | "status" | "model_version" | "usage_metadata" => return None,
            _ => c.skipped_any(SKIP_DEPTH)?,
        }
        Some(())
    })?;
    c.is_done().then_some(read)
}

/// What the reading keeps of a text chunk the stream's own match took (most of a stream's
/// chunks): a walk of the whole chunk is not needed.
pub(super) fn text_chunk_read<'a>(chunk: &PlainTextChunk<'a>) -> GeminiRead<'a> {
    GeminiRead { model: Some(chunk.model), usage: chunk.usage.map(usage_of) }
}

/// `U`: the five counts, the other members checked and skipped.
fn usage(c: &mut Cursor<'_>) -> Option<Option<GeminiUsage>> {
    Some(usage_metadata(c)?.map(usage_of))
}

/// The usage of `usageMetadata`'s five counts.
fn usage_of(counts: [Option<u64>; 5]) -> GeminiUsage {
    GeminiUsage::camel_case(counts.map(|n| n.map(|n| Count(Some(n)))))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::super::plain_tests::{object_of, same};
    use super::super::{GeminiBody, parsed};
    use super::*;
    use crate::observe::record::Tokens;
    use crate::protocol::gemini_usage::strategies::usage_metadata;
    use crate::protocol::plain_json::strategies::{one_of, string};
    use crate::protocol::stream_events::{gemini_text_chunk, plain_text_chunk};
    use proptest::prelude::*;

    fn candidate() -> impl Strategy<Value = String> {
        let part = prop_oneof![
            4 => string().prop_map(|t| format!(r#"{{"text":{t}}}"#)),
            1 => string().prop_map(|t| format!(r#"{{"text":{t},"thought":true}}"#)),
            1 => Just(r#"{"functionCall":{"name":"f","args":{"a":[1,{"b":null}],"c":-0.5}},"thoughtSignature":"CiQB"}"#.to_owned()),
            1 => Just(r#"{"text":"a \u003c b"}"#.to_owned()),
        ];
        (prop::collection::vec(part, 0..3), one_of(&["", r#","finishReason":"STOP""#])).prop_map(|(parts, finish)| {
            format!(r#"{{"content":{{"parts":[{}],"role":"model"}}{finish},"index":0}}"#, parts.join(","))
        })
    }

    /// A body's members: those the API writes, in its order, each as it writes it or changed;
    /// then now and then another member.
    fn members() -> BoxedStrategy<Vec<String>> {
        let written = (
            prop::collection::vec(candidate(), 0..2),
            usage_metadata(),
            prop_oneof![4 => string(), 1 => Just("null".to_owned()), 1 => Just("7".to_owned())],
            string(),
        );
        let extra = prop::collection::vec(
            prop::sample::select(vec![
                r#""error":null"#,
                r#""error":{"code":429,"message":"x","status":"RESOURCE_EXHAUSTED"}"#,
                r#""status":"ok""#,
                r#""modelVersion":"again""#,
                r#""model_version":"snake""#,
                r#""usage_metadata":{"prompt_token_count":3}"#,
                r#""usageMetadata":null"#,
                r#""promptFeedback":{"blockReason":"SAFETY"}"#,
                r#""deep":[[[[[[[[[[[[[1]]]]]]]]]]]]]"#,
            ]),
            0..2,
        );
        (written, extra)
            .prop_map(|((candidates, usage, model, id), extra)| {
                let mut members = vec![
                    format!("\"candidates\":[{}]", candidates.join(",")),
                    format!("\"usageMetadata\":{usage}"),
                    format!("\"modelVersion\":{model}"),
                    format!("\"responseId\":{id}"),
                ];
                members.extend(extra.into_iter().map(str::to_owned));
                members
            })
            .boxed()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]
        /// Whenever the match accepts a body, the parse reads the same usage, model and envelope
        /// from it.
        #[test]
        fn a_matched_body_is_read_as_its_parse_would(body in object_of(members)) {
            if let Some(matched) = plain_gemini_answer(&body) {
                let parsed = parsed::<GeminiBody>(body.as_bytes());
                prop_assert!(same(&matched, &parsed), "{body}\nmatched {matched:?}\nparsed {parsed:?}");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]
        /// A text chunk the stream's own match takes is read as its parse would read it.
        #[test]
        fn a_matched_text_chunk_is_read_as_its_parse_would(chunk in gemini_text_chunk()) {
            if let Some(matched) = plain_text_chunk(&chunk) {
                let read = text_chunk_read(&matched);
                let matched = AnswerRead {
                    tokens: read.usage.map(GeminiUsage::tokens).unwrap_or_default(),
                    model: read.model.and_then(answered_model),
                    envelope: Some(Envelope { error: false, status: None }),
                };
                let parsed = parsed::<GeminiBody>(chunk.as_bytes());
                prop_assert!(same(&matched, &parsed), "{chunk}\nmatched {matched:?}\nparsed {parsed:?}");
            }
        }
    }

    #[test]
    fn bodies_as_the_api_writes_them_are_matched() {
        // A stream's chunks: each carries the usage so far, spaced as the API spaces them.
        let first = r#"{"candidates": [{"content": {"parts": [{"text": "if a \u003c b \u0026\u0026 c:\n"}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 1200,"totalTokenCount": 1200,"promptTokensDetails": [{"modality": "TEXT","tokenCount": 1200}]},"modelVersion": "gemini-2.5-flash","responseId": "r3sp0nse"}"#;
        let read = plain_gemini_body(first).unwrap();
        assert_eq!(read.model, Some("gemini-2.5-flash"));
        assert_eq!(read.usage.map(GeminiUsage::tokens), Some(Tokens { input: Some(1200), ..Tokens::default() }));
        let last = r#"{"candidates": [{"content": {"parts": [{"functionCall": {"name": "get_weather","args": {"city": "Paris"}},"thoughtSignature": "CiQB0e2Kb+/x9A=="}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 1200,"candidatesTokenCount": 40,"totalTokenCount": 1265,"cachedContentTokenCount": 1000,"thoughtsTokenCount": 25,"toolUsePromptTokenCount": 5},"modelVersion": "gemini-2.5-flash","responseId": "r3sp0nse"}"#;
        let tokens = plain_gemini_body(last).unwrap().usage.unwrap().tokens();
        assert_eq!(tokens, Tokens { input: Some(205), output: Some(65), cache_read: Some(1000), cache_write: None });
        for chunk in [first, last] {
            assert!(same(&plain_gemini_answer(chunk).unwrap(), &parsed::<GeminiBody>(chunk.as_bytes())), "{chunk}");
        }
        // An answer, pretty-printed.
        let answer = "{\n  \"candidates\": [\n    {\n      \"content\": {\n        \"parts\": [\n          {\n            \"text\": \"Hello \\u003cworld\\u003e\"\n          }\n        ],\n        \"role\": \"model\"\n      },\n      \"finishReason\": \"STOP\",\n      \"avgLogprobs\": -0.0123\n    }\n  ],\n  \"usageMetadata\": {\n    \"promptTokenCount\": 8,\n    \"candidatesTokenCount\": 3,\n    \"totalTokenCount\": 11\n  },\n  \"modelVersion\": \"gemini-2.5-pro\",\n  \"responseId\": \"abc\"\n}\n";
        let read = plain_gemini_answer(answer).unwrap();
        assert_eq!(read.tokens, Tokens { input: Some(8), output: Some(3), cache_read: None, cache_write: None });
        assert_eq!(read.model.as_deref(), Some("gemini-2.5-pro"));
        assert!(same(&read, &parsed::<GeminiBody>(answer.as_bytes())));
        // A snake_case spelling, an error, a count named twice, a surrogate escape: the parse's.
        for refused in [
            first.replace("\"modelVersion\"", "\"model_version\""),
            first.replace("\"totalTokenCount\"", "\"prompt_token_count\""),
            first.replace("\"responseId\"", "\"error\": null,\"id\""),
            first.replace("\"totalTokenCount\": 1200", "\"promptTokenCount\": 3"),
            first.replace("if a", "\\ud83d\\ude00 if a"),
        ] {
            assert!(plain_gemini_answer(&refused).is_none(), "{refused}");
        }
    }
}
