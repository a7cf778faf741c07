//! Gemini's `usageMetadata` matched with `plain_json`'s cursor: the five counts the gateway reads,
//! for the usage reader (`observe::usage::plain_gemini`) and the stream converter
//! (`stream_events::plain_gemini`, a text chunk as the API writes it). The API puts this object in every chunk of a stream.
//!
//! ```text
//! U:  null | {"promptTokenCount":C | "cachedContentTokenCount":C | "toolUsePromptTokenCount":C
//!     | "candidatesTokenCount":C | "thoughtsTokenCount":C | "K":V,...}
//! ```
//! C: a whole number of at most 19 digits, or null, each count at most once; K: any other key
//! but those five in snake_case, which both readers weigh against the camelCase ones (so an
//! object holding one is left to their parse); V: any value `Cursor::skipped_any` skips, at most
//! three deep (`promptTokensDetails` is an array of objects).

use super::plain_json::Cursor;

/// The counts read, in the order [`usage_metadata`] gives them.
pub const COUNTED: [&str; 5] = [
    "promptTokenCount",
    "cachedContentTokenCount",
    "toolUsePromptTokenCount",
    "candidatesTokenCount",
    "thoughtsTokenCount",
];

/// Their snake_case spellings.
pub const COUNTED_SNAKE: [&str; 5] = [
    "prompt_token_count",
    "cached_content_token_count",
    "tool_use_prompt_token_count",
    "candidates_token_count",
    "thoughts_token_count",
];

/// How deep the other members' values may nest.
const SKIP_DEPTH: u8 = 3;

/// `U`: `None` for `null`, else the counts in [`COUNTED`]'s order (`None` for one not given, or
/// given as `null`).
pub(crate) fn usage_metadata(c: &mut Cursor<'_>) -> Option<Option<[Option<u64>; 5]>> {
    c.null_or(|c| {
        c.counts(COUNTED, |c, key| match COUNTED_SNAKE.contains(&key) {
            true => None,
            false => c.skipped_any(SKIP_DEPTH),
        })
    })
}

/// Inputs for the property tests of this matcher's readers.
#[cfg(test)]
pub(crate) mod strategies {
    use super::{COUNTED, COUNTED_SNAKE};
    use crate::protocol::plain_json::strategies::count;
    use proptest::prelude::*;

    /// `usageMetadata` as the API writes it (its counts, other members) and near it: a count in
    /// snake_case, an escaped key, not an object.
    pub fn usage_metadata() -> impl Strategy<Value = String> {
        let counted = prop::sample::select([COUNTED.as_slice(), &["totalTokenCount"]].concat());
        let member = prop_oneof![
            6 => (counted, count()).prop_map(|(k, v)| format!("\"{k}\":{v}")),
            1 => (prop::sample::select(COUNTED_SNAKE.to_vec()), count()).prop_map(|(k, v)| format!("\"{k}\":{v}")),
            1 => Just(r#""promptTokensDetails":[{"modality":"TEXT","tokenCount":8}]"#.to_owned()),
            1 => Just(r#""trafficType":"ON_DEMAND""#.to_owned()),
            1 => Just(r#""pr\u006fmptTokenCount":4"#.to_owned()),
        ];
        prop_oneof![
            8 => prop::collection::vec(member, 0..7).prop_map(|m| format!("{{{}}}", m.join(","))),
            1 => Just("null".to_owned()),
            1 => Just("[]".to_owned()),
            1 => Just("7".to_owned()),
        ]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_five_counts_are_read_in_their_order() {
        let text = r#"{"promptTokenCount": 1200,"candidatesTokenCount": 40,"totalTokenCount": 1265,"cachedContentTokenCount": 1000,"thoughtsTokenCount": 25,"toolUsePromptTokenCount": 5,"promptTokensDetails": [{"modality": "TEXT","tokenCount": 1200}]}"#;
        let mut c = Cursor(text);
        assert_eq!(usage_metadata(&mut c), Some(Some([Some(1200), Some(1000), Some(5), Some(40), Some(25)])));
        assert!(c.is_done());
        assert_eq!(usage_metadata(&mut Cursor("null")), Some(None));
        assert_eq!(usage_metadata(&mut Cursor(r#"{"promptTokenCount":null}"#)), Some(Some([None; 5])));
        // A snake_case count, a count twice, a fraction, nesting too deep: left to the parse.
        for text in [
            r#"{"prompt_token_count": 3}"#,
            r#"{"promptTokenCount": 3,"promptTokenCount": 4}"#,
            r#"{"promptTokenCount": 3.0}"#,
            r#"{"details": [[[[1]]]]}"#,
        ] {
            assert_eq!(usage_metadata(&mut Cursor(text)), None, "{text}");
        }
    }
}
