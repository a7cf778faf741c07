//! A Chat completion of the usual kind, or a chunk of a Chat stream, read for its usage and model
//! by matching it instead of parsing it. A Chat answer passed through was read with serde (~9 k
//! instructions for a short answer of OpenAI's ~40 members, the largest single step of such a
//! request), and a stream's first chunk (for its model) and usage chunk ~5 k each; the reading
//! needs only `model` and `usage`, and skips the rest.
//!
//! The match is exact, as `protocol::plain_json` promises: a body it accepts is valid JSON that
//! the parse (`parsed::<ChatBody>`) reads to the same usage, model and envelope. Members may come
//! in any order, with whitespace between tokens. Anything the grammar below does not cover (a
//! `\u` escape in a value the reading keeps, a count that is not a whole number, values nested
//! deeper than a tool call's `function`, an `error` or `status` member, a field the reading keeps
//! named twice) is left to the parse.
//!
//! ```text
//! answer:  {M,...} and nothing after but whitespace
//! M:       "model":S | "usage":U | "K":V   (not "error", "status")
//! U:       null | {"prompt_tokens":C | "completion_tokens":C | "prompt_cache_hit_tokens":C
//!          | "prompt_cache_miss_tokens":C | "cached_tokens":C
//!          | "prompt_tokens_details":null-or-{"cached_tokens":C | "cache_write_tokens":C | "K":V,...}
//!          | "K":V,...}
//! V:       a string (a `\u` escape naming no surrogate too) | a number | null | true | false
//!          | arrays and objects of those, at most `SKIP_DEPTH` inside one another
//! ```
//! S and K: a string with no escape; C: a whole number of at most 19 digits, or null. `model`,
//! `usage` and each count at most once.

use super::{AnswerRead, ChatPromptDetails, ChatUsage, Envelope, answered_model};
use crate::protocol::lenient::{Count, Lenient};
use crate::protocol::plain_json::{Cursor, Seen};

/// How deep the skipped members may nest: `choices` → a choice → `message` → `tool_calls` → a
/// call → `function`.
const SKIP_DEPTH: u8 = 6;

pub(super) fn plain_chat_answer(body: &str) -> Option<AnswerRead> {
    plain_chat_body(body).map(|read| AnswerRead {
        tokens: read.usage.map(|u| u.tokens()).unwrap_or_default(),
        model: read.model.and_then(answered_model),
        envelope: Some(Envelope { error: false, status: None }),
    })
}

/// What the reading keeps of a Chat body, an answer or a stream's chunk: its model and usage.
pub(super) struct ChatRead<'a> {
    pub model: Option<&'a str>,
    pub usage: Option<ChatUsage>,
}

/// A Chat answer or chunk matched (`answer` in the grammar above).
pub(super) fn plain_chat_body(body: &str) -> Option<ChatRead<'_>> {
    let mut c = Cursor::whole(body);
    let mut seen = Seen::default();
    let mut read = ChatRead { model: None, usage: None };
    c.members(|c, key| {
        match key {
            "model" => read.model = Some(seen.first(0).and_then(|()| c.plain_string())?),
            "usage" => read.usage = seen.first(1).and_then(|()| chat_usage(c))?,
            "error" | "status" => return None,
            _ => c.skipped_any(SKIP_DEPTH)?,
        }
        Some(())
    })?;
    c.is_done().then_some(read)
}

/// `U`: the counts the reading keeps, in the parse's own structure.
fn chat_usage(c: &mut Cursor<'_>) -> Option<Option<ChatUsage>> {
    c.null_or(|c| {
        let mut details = None;
        let keys = [
            "prompt_tokens",
            "completion_tokens",
            "prompt_cache_hit_tokens",
            "prompt_cache_miss_tokens",
            "cached_tokens",
        ];
        let [prompt, completion, hit, miss, cached] = c.counts(keys, |c, key| match key {
            "prompt_tokens_details" if details.is_none() => {
                details = Some(prompt_details(c)?);
                Some(())
            }
            "prompt_tokens_details" => None,
            _ => c.skipped_any(SKIP_DEPTH),
        })?;
        Some(ChatUsage {
            prompt_tokens: Count(prompt),
            completion_tokens: Count(completion),
            prompt_tokens_details: details.unwrap_or_default(),
            prompt_cache_hit_tokens: Count(hit),
            prompt_cache_miss_tokens: Count(miss),
            cached_tokens: Count(cached),
        })
    })
}

/// `prompt_tokens_details`: `null` (absent to the parse) or its two counts.
fn prompt_details(c: &mut Cursor<'_>) -> Option<Lenient<ChatPromptDetails>> {
    let details = c.null_or(|c| {
        let [cached, written] = c.counts(["cached_tokens", "cache_write_tokens"], |c, _| c.skipped_any(SKIP_DEPTH))?;
        Some(ChatPromptDetails { cached_tokens: Count(cached), cache_write_tokens: Count(written) })
    })?;
    Some(Lenient(details))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::super::plain_tests::{object_of, same};
    use super::super::{ChatBody, parsed};
    use super::*;
    use crate::protocol::plain_json::strategies::{count, one_of, string};
    use proptest::prelude::*;

    fn counts() -> impl Strategy<Value = String> {
        let counted = prop::sample::select(vec![
            "prompt_tokens",
            "completion_tokens",
            "prompt_cache_hit_tokens",
            "prompt_cache_miss_tokens",
            "cached_tokens",
            "total_tokens",
        ]);
        (counted, count()).prop_map(|(k, v)| format!("\"{k}\":{v}"))
    }

    fn details() -> impl Strategy<Value = String> {
        let member = prop_oneof![
            3 => (one_of(&["cached_tokens", "cache_write_tokens", "audio_tokens"]), count())
                .prop_map(|(k, v)| format!("\"{k}\":{v}")),
            1 => Just(r#""nested":{"a":[1]}"#.to_owned()),
        ];
        prop_oneof![
            6 => prop::collection::vec(member, 0..4).prop_map(|m| format!("{{{}}}", m.join(","))),
            1 => Just("null".to_owned()),
            1 => Just("[]".to_owned()),
            1 => Just("7".to_owned()),
        ]
    }

    fn usage() -> impl Strategy<Value = String> {
        let member = prop_oneof![
            6 => counts(),
            2 => details().prop_map(|d| format!("\"prompt_tokens_details\":{d}")),
            1 => Just(r#""completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0}"#.to_owned()),
            1 => Just(r#""pr\u006fmpt_tokens":4"#.to_owned()),
        ];
        prop_oneof![
            8 => prop::collection::vec(member, 0..8).prop_map(|m| format!("{{{}}}", m.join(","))),
            1 => Just("null".to_owned()),
            1 => Just("[]".to_owned()),
            1 => Just(r#""none""#.to_owned()),
            1 => Just(r#"{"prompt_tokens":1,}"#.to_owned()),
        ]
    }

    fn choice() -> impl Strategy<Value = String> {
        let message = prop_oneof![
            4 => string().prop_map(|t| format!(
                r#"{{"role":"assistant","content":{t},"refusal":null,"annotations":[]}}"#
            )),
            1 => Just(r#"{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}"#.to_owned()),
            1 => Just(r#"{"role":"assistant","content":"a","deep":[[[[[[1]]]]]]}"#.to_owned()),
            1 => Just(r#"{"role":"assistant","content":"a","logprob":-0.5}"#.to_owned()),
        ];
        // A stream chunk's choice carries a delta instead of a message.
        let delta = prop_oneof![
            string().prop_map(|t| format!(r#"{{"content":{t}}}"#)),
            Just(r#"{"role":"assistant","content":"","refusal":null}"#.to_owned()),
            Just("{}".to_owned()),
        ];
        let body = prop_oneof![
            3 => message.prop_map(|m| format!(r#""message":{m}"#)),
            2 => delta.prop_map(|d| format!(r#""delta":{d}"#)),
        ];
        (body, one_of(&[r#""stop""#, r#""length""#, "null"]))
            .prop_map(|(b, reason)| format!(r#"{{"index":0,{b},"logprobs":null,"finish_reason":{reason}}}"#))
    }

    /// An answer's members: those OpenAI writes, in its order, each as it writes it or changed;
    /// then now and then another member.
    fn members() -> BoxedStrategy<Vec<String>> {
        let written = (
            string(),
            string(),
            prop::collection::vec(choice(), 0..3),
            usage(),
            one_of(&["true", "false"]),
            one_of(&[r#""chat.completion""#, r#""chat.completion.chunk""#]),
        );
        let extra = prop::collection::vec(
            prop::sample::select(vec![
                r#""error":null"#,
                r#""error":{"message":"x"}"#,
                r#""status":"ok""#,
                r#""model":"again""#,
                r#""usage":null"#,
                r#""system_fingerprint":null"#,
                r#""flags":[1,{"a":[]}]"#,
                r#""ratio":0.5"#,
            ]),
            0..2,
        );
        (written, extra)
            .prop_map(|((id, model, choices, usage, flag, object), extra)| {
                let mut members = vec![
                    format!("\"id\":{id}"),
                    format!("\"object\":{object}"),
                    r#""created":1760000000"#.to_owned(),
                    format!("\"model\":{model}"),
                    format!("\"choices\":[{}]", choices.join(",")),
                    format!("\"usage\":{usage}"),
                    r#""service_tier":"default""#.to_owned(),
                    format!("\"stored\":{flag}"),
                ];
                members.extend(extra.into_iter().map(str::to_owned));
                members
            })
            .boxed()
    }

    fn answer() -> impl Strategy<Value = String> {
        object_of(members)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]
        /// Whenever the match accepts an answer, the parse reads the same usage, model and
        /// envelope from it.
        #[test]
        fn a_matched_answer_is_read_as_its_parse_would(body in answer()) {
            if let Some(matched) = plain_chat_answer(&body) {
                let parsed = parsed::<ChatBody>(body.as_bytes());
                prop_assert!(same(&matched, &parsed), "{body}\nmatched {matched:?}\nparsed {parsed:?}");
            }
        }
    }

    #[test]
    fn answers_as_the_api_writes_them_are_matched() {
        let api = r#"{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion","created":1741570283,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":"Hello!\nHow can I \"help\"? é 😀","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1117,"completion_tokens":46,"total_tokens":1163,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default","system_fingerprint":"fp_fc9f1d7035"}"#;
        let read = plain_chat_answer(api).unwrap();
        assert_eq!(
            read.tokens,
            crate::observe::record::Tokens {
                input: Some(93),
                output: Some(46),
                cache_read: Some(1024),
                cache_write: None
            }
        );
        assert_eq!(read.model.as_deref(), Some("gpt-4o-2024-08-06"));
        assert!(same(&read, &parsed::<ChatBody>(api.as_bytes())));
        // A tool call's answer, and DeepSeek's cache counts.
        let tool = r#"{"id":"c","object":"chat.completion","created":1,"model":"deepseek-chat","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_0","type":"function","function":{"name":"shell","arguments":"{\"command\":[\"ls\"]}"}}]},"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":30,"completion_tokens":9,"total_tokens":39,"prompt_cache_hit_tokens":20,"prompt_cache_miss_tokens":10}}"#;
        let read = plain_chat_answer(tool).unwrap();
        assert_eq!(read.tokens.cache_read, Some(20));
        assert_eq!(read.tokens.input, Some(10));
        assert!(same(&read, &parsed::<ChatBody>(tool.as_bytes())));
        // The benchmark's mock, as serde_json writes its `json!` (keys sorted).
        let mock = r#"{"choices":[{"finish_reason":"stop","index":0,"logprobs":null,"message":{"annotations":[],"content":"lorem","refusal":null,"role":"assistant"}}],"created":1760000000,"id":"chatcmpl-mock0001","model":"m","object":"chat.completion","service_tier":"default","system_fingerprint":"fp_mock","usage":{"completion_tokens":16,"completion_tokens_details":{"accepted_prediction_tokens":0,"audio_tokens":0,"reasoning_tokens":0,"rejected_prediction_tokens":0},"prompt_tokens":25,"prompt_tokens_details":{"audio_tokens":0,"cached_tokens":0},"total_tokens":41}}"#;
        assert!(same(&plain_chat_answer(mock).unwrap(), &parsed::<ChatBody>(mock.as_bytes())));
        // A stream's chunks: the first (its model), a content chunk, the usage chunk.
        let first = r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}"#;
        let read = plain_chat_body(first).unwrap();
        assert_eq!(read.model, Some("gpt-4o-2024-08-06"));
        assert!(read.usage.is_none());
        let content = r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}]}"#;
        assert!(plain_chat_body(content).is_some());
        let last = r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0}}}"#;
        let usage = plain_chat_body(last).unwrap().usage.unwrap().tokens();
        assert_eq!((usage.input, usage.output, usage.cache_read), (Some(9), Some(2), Some(0)));
        // Log probabilities (fractions, nested) are skipped like any other member.
        let logprobs = api.replace(
            r#""logprobs":null"#,
            r#""logprobs":{"content":[{"token":"Hi","logprob":-0.25,"bytes":[72,105]}]}"#,
        );
        assert!(same(&plain_chat_answer(&logprobs).unwrap(), &parsed::<ChatBody>(logprobs.as_bytes())));
        // An error or status member, a count named twice, a count with a fraction: the parse's.
        for refused in [
            api.replace(r#""usage":"#, r#""error":null,"usage":"#),
            api.replace(r#""usage":"#, r#""status":"completed","usage":"#),
            api.replace(r#""completion_tokens":46"#, r#""completion_tokens":46,"completion_tokens":3"#),
            api.replace(r#""completion_tokens":46"#, r#""completion_tokens":46.0"#),
        ] {
            assert!(plain_chat_answer(&refused).is_none(), "{refused}");
        }
    }
}
