//! A Gemini text chunk as the API writes it, matched whole, byte for byte, instead of parsed.
//! Such chunks are nearly all of a Gemini stream. The Gemini stream decoder parsed each into a
//! `Value` (~15 k instructions a chunk with its usage, most of a converted stream's cost per
//! event), and the usage reader walked each for its usage; both read this match instead, and the
//! decoder tells the classifier what it says. Anything else — a finish, a thought, a call,
//! another member order — is parsed.
//!
//! The match is exact: every byte of the chunk is accounted for by the shape below, so a chunk
//! it accepts is valid JSON that the parse would read the same way.
//!
//! ```text
//! {"candidates": [{"content": {"parts": [{"text": T}],"role": "model"},"index": 0}],
//!  ["usageMetadata": U,]"modelVersion": S[,"responseId": S]}
//! ```
//! Each colon followed by one space, as the API writes it, or by none; S: a string with no
//! escape; T: any string whose `\u` escapes name no surrogate (the API writes `<`, `>`, `&`,
//! `=` and `'` that way); U: as `protocol::gemini_usage` matches it. The
//! API puts the usage so far in every chunk.

use crate::protocol::gemini_usage::usage_metadata;
use crate::protocol::plain_json::Cursor;

/// What a matched chunk says. `text` is the part's text as written, escapes and all
/// (`plain_json::unescaped` reads it); `usage`, `usageMetadata`'s counts when it is there and
/// not `null`.
#[derive(Debug, PartialEq, Eq)]
pub struct PlainTextChunk<'a> {
    pub text: &'a str,
    pub model: &'a str,
    pub id: Option<&'a str>,
    pub usage: Option<[Option<u64>; 5]>,
}

/// A key and its colon, with or without the space after it.
fn key(c: &mut Cursor<'_>, name: &str) -> Option<()> {
    c.literal("\"")?;
    c.literal(name)?;
    c.literal("\":")?;
    let _ = c.literal(" ");
    Some(())
}

pub fn plain_text_chunk(data: &str) -> Option<PlainTextChunk<'_>> {
    let mut c = Cursor(data);
    c.literal("{")?;
    key(&mut c, "candidates")?;
    c.literal("[{")?;
    key(&mut c, "content")?;
    c.literal("{")?;
    key(&mut c, "parts")?;
    c.literal("[{")?;
    key(&mut c, "text")?;
    let text = c.string_text()?;
    c.literal("}],")?;
    key(&mut c, "role")?;
    c.literal("\"model\"},")?;
    key(&mut c, "index")?;
    c.literal("0}],")?;
    let mut usage = None;
    let mut at_usage = Cursor(c.0);
    if key(&mut at_usage, "usageMetadata").is_some() {
        c = at_usage;
        usage = usage_metadata(&mut c)?;
        c.literal(",")?;
    }
    key(&mut c, "modelVersion")?;
    let model = c.plain_string()?;
    let id = match c.literal(",") {
        Some(()) => {
            key(&mut c, "responseId")?;
            Some(c.plain_string()?)
        }
        None => None,
    };
    c.literal("}")?;
    c.is_done().then_some(PlainTextChunk { text, model, id, usage })
}

/// Inputs for the property tests of the readers of this match.
#[cfg(test)]
pub(crate) mod strategies {
    use crate::protocol::gemini_usage::strategies::usage_metadata;

    /// Text chunks in the API's shape (most of them, with the usage so far or without) and near
    /// it, now and then one that finishes.
    pub fn text_chunk() -> impl proptest::strategy::Strategy<Value = String> {
        use crate::protocol::plain_json::strategies::string;
        use proptest::prelude::*;
        let pick = |usual: &'static [&'static str], other: &'static [&'static str]| prop_oneof![4 => proptest::sample::select(usual), 1 => proptest::sample::select(other)];
        (
            pick(
                &[
                    r#"{"candidates": [{"content": {"parts": [{"text": "#,
                    r#"{"candidates":[{"content":{"parts":[{"text":"#,
                ],
                &[
                    r#"{"candidates": [{"content": {"parts": [{"text" : "#,
                    r#"{"candidates": [{"content": {"parts": [{"thought": true,"text": "#,
                ],
            ),
            prop_oneof![3 => "[a-z ]{0,6}".prop_map(|t| format!("\"{t}\"")), 2 => string()],
            pick(
                &[r#"}],"role": "model"},"index": 0}]"#, r#"}],"role":"model"},"index":0}]"#],
                &[
                    r#"}],"role": "user"},"index": 0}]"#,
                    r#"}],"role": "model"},"index": 1}]"#,
                    r#"}],"role": "model"},"finishReason": "STOP","index": 0}]"#,
                ],
            ),
            prop_oneof![
                4 => proptest::sample::select(&[r#","modelVersion": "#, r#","modelVersion":"#][..]).prop_map(str::to_owned),
                4 => usage_metadata().prop_map(|u| format!(r#","usageMetadata": {u},"modelVersion": "#)),
            ],
            prop_oneof![3 => Just(r#""gemini-2.5-flash""#.to_owned()), 1 => string()],
            prop::option::of(prop_oneof![3 => Just(r#""r3sp0nse""#.to_owned()), 1 => string()]),
            pick(&["}"], &["} ", "", "}}", r#","error": {"code": 500}}"#]),
        )
            .prop_map(|(open, text, close, model_key, model, id, end)| {
                let id = id.map(|id| format!(r#","responseId": {id}"#)).unwrap_or_default();
                format!("{open}{text}{close}{model_key}{model}{id}{end}")
            })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn text_chunks_as_the_api_writes_them_are_matched() {
        let api = r#"{"candidates": [{"content": {"parts": [{"text": "the w\u00f6ather\n"}],"role": "model"},"index": 0}],"modelVersion": "gemini-2.5-flash","responseId": "r3sp0nse"}"#;
        // A `\u` escape stays in the text as written; its reader resolves it.
        let escaped = plain_text_chunk(api).unwrap();
        assert_eq!(crate::protocol::plain_json::unescaped(escaped.text), "the w\u{f6}ather\n");
        let api = api.replace(r"\u00f6", "\u{f6}");
        let matched =
            PlainTextChunk { text: r"the wöather\n", model: "gemini-2.5-flash", id: Some("r3sp0nse"), usage: None };
        assert_eq!(plain_text_chunk(&api), Some(matched));
        let compact =
            r#"{"candidates":[{"content":{"parts":[{"text":"Hi"}],"role":"model"},"index":0}],"modelVersion":"m"}"#;
        assert_eq!(plain_text_chunk(compact), Some(PlainTextChunk { text: "Hi", model: "m", id: None, usage: None }));
        // The usage so far, as the API puts it in every chunk.
        let with_usage = api.replace(
            r#","modelVersion""#,
            r#","usageMetadata": {"promptTokenCount": 3,"totalTokenCount": 3,"promptTokensDetails": [{"modality": "TEXT","tokenCount": 3}]},"modelVersion""#,
        );
        assert_eq!(plain_text_chunk(&with_usage).unwrap().usage, Some([Some(3), None, None, None, None]));
        // With a finish, a thought, usage in snake_case, a surrogate escape, the chunk is parsed.
        for other in [
            api.replace("the w", "\\ud83d\\ude00 the w"),
            api.replace(r#","modelVersion""#, r#","usageMetadata": {"prompt_token_count": 3},"modelVersion""#),
            api.replace(r#","modelVersion""#, r#","usageMetadata": 3,"modelVersion""#),
            api.replace(r#""index": 0"#, r#""finishReason": "STOP","index": 0"#),
            api.replace(r#"{"text": "#, r#"{"thought": true,"text": "#),
            api.replace(r#""role": "model""#, r#""role": "user""#),
            format!("{api} "),
        ] {
            assert_eq!(plain_text_chunk(&other), None, "{other}");
        }
    }
}
