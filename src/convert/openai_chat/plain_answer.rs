//! A `chat.completion` of the usual kind, matched instead of parsed. Converting a Chat upstream's
//! answer for an Anthropic client read it through serde (~10 k instructions for a short answer,
//! more than the rest of its conversion); nearly every answer is one choice of text with a usage
//! object, which a match reads for a fraction of that.
//!
//! The match is exact, as `protocol::plain_json` promises: an answer it accepts is valid JSON that
//! `decode_response`'s parse reads to the same `Response`. Members may come in any order, with
//! whitespace between tokens. Anything the grammar below does not cover (a surrogate `\u` escape in a
//! value the parse reads, tool calls, content parts, more than one choice, an `error` or `status`
//! member, a field the parse reads named twice) is left to the parse. So a matched answer is also
//! one that `proxy::outcome::not_an_answer` would pass: an object with no `error` and no `status`.
//!
//! ```text
//! answer:  {M,...} and nothing after but whitespace
//! M:       "id":S | "model":S | "created":C | "choices":[{H,...}] | "usage":U | "K":V   (not "error", "status")
//! H:       "index":0 | "finish_reason":S | "message":{G,...} | "K":V
//! G:       "content":S | "refusal":S | "reasoning_content":S | "reasoning":S | "tool_calls":[]
//!          | "function_call":null | "K":V
//! U:       null | {"prompt_tokens":C | "completion_tokens":C | "prompt_cache_hit_tokens":C
//!          | "prompt_cache_miss_tokens":C | "cached_tokens":C
//!          | "prompt_tokens_details":null-or-{"cached_tokens":C | "cache_write_tokens":C | "K":V,...}
//!          | "completion_tokens_details":null-or-{"reasoning_tokens":C | "K":V,...} | "K":V,...}
//! V:       a string (a `\u` escape naming no surrogate too) | a whole number | null
//!          | {"K":that,...} | []
//! ```
//! S: a string whose `\u` escapes name no surrogate, or null; K: a key with no escape; C: a whole number of at
//! most 19 digits, or null. The members the parse reads, each at most once.

use std::borrow::Cow;

use super::response::{decode_usage, stop_reason};
use super::text;
use super::wire::{ChatUsage, CompletionTokensDetails, PromptTokensDetails};
use crate::convert::ir::{Part, Response};
use crate::protocol::lenient::{Count, Lenient};
use crate::protocol::plain_json::{Cursor, Seen};

pub(super) fn plain_chat_answer(body: &str) -> Option<Response> {
    let mut c = Cursor::whole(body);
    let mut seen = Seen::default();
    let (mut id, mut model, mut created, mut choice, mut usage) = (None, None, None, None, None);
    c.members(|c, key| {
        match key {
            "id" => id = seen.first(0).and_then(|()| optional_string(c))?,
            "model" => model = seen.first(1).and_then(|()| optional_string(c))?,
            "created" => created = seen.first(2).and_then(|()| c.count())?,
            "choices" => choice = Some(seen.first(3).and_then(|()| only_choice(c))?),
            "usage" => usage = seen.first(4).and_then(|()| chat_usage(c))?,
            "error" | "status" => return None,
            _ => skipped(c)?,
        }
        Some(())
    })?;
    let choice = choice?;
    if !c.is_done() {
        return None;
    }
    let id = id.map(Cow::into_owned).unwrap_or_default();
    let mut content = Vec::new();
    let reasoning = choice.reasoning_content.filter(|r| !r.is_empty());
    if let Some(r) = reasoning.or(choice.reasoning.filter(|r| !r.is_empty())) {
        content.push(Part::Thinking { text: r.into_owned(), signature: None });
    }
    if let Some(t) = choice.content.filter(|t| !t.is_empty()) {
        content.push(text(t));
    }
    let refusal = choice.refusal.filter(|r| !r.is_empty());
    let saw_refusal = refusal.is_some();
    if let Some(r) = refusal {
        content.push(text(r));
    }
    Some(Response {
        id,
        model: model.map(Cow::into_owned).unwrap_or_default(),
        stop_reason: stop_reason(choice.finish_reason.as_deref().filter(|r| !r.is_empty()), false, saw_refusal),
        stop_sequence: None,
        usage: usage.as_ref().map(decode_usage).unwrap_or_default(),
        created,
        content,
    })
}

/// What the decoding reads of the one choice.
#[derive(Default)]
struct Choice<'a> {
    finish_reason: Option<Cow<'a, str>>,
    content: Option<Cow<'a, str>>,
    refusal: Option<Cow<'a, str>>,
    reasoning_content: Option<Cow<'a, str>>,
    reasoning: Option<Cow<'a, str>>,
}

/// `[{H,...}]`: exactly one choice, whose index is 0 or not given.
fn only_choice<'a>(c: &mut Cursor<'a>) -> Option<Choice<'a>> {
    let mut only = None;
    c.elements(|c| {
        // A second choice is left to the parse.
        if only.is_some() {
            return None;
        }
        let mut choice = Choice::default();
        let mut seen = Seen::default();
        c.members(|c, key| {
            match key {
                // A number going on after the 0 ends neither at `,` nor at `}`: not matched.
                "index" => seen.first(0).and_then(|()| c.literal("0"))?,
                "finish_reason" => choice.finish_reason = seen.first(1).and_then(|()| optional_string(c))?,
                "message" => seen.first(2).and_then(|()| message(c, &mut choice))?,
                _ => skipped(c)?,
            }
            Some(())
        })?;
        only = Some(choice);
        Some(())
    })?;
    only
}

/// `{G,...}`: a message of text (or a refusal, or reasoning), without tool calls.
fn message<'a>(c: &mut Cursor<'a>, choice: &mut Choice<'a>) -> Option<()> {
    let mut seen = Seen::default();
    c.members(|c, key| {
        let (slot, field) = match key {
            "content" => (0, &mut choice.content),
            "refusal" => (1, &mut choice.refusal),
            "reasoning_content" => (2, &mut choice.reasoning_content),
            "reasoning" => (3, &mut choice.reasoning),
            "tool_calls" => return seen.first(4).and_then(|()| c.literal("[]")),
            "function_call" => return seen.first(5).and_then(|()| c.literal("null")),
            _ => return skipped(c),
        };
        *field = seen.first(slot).and_then(|()| optional_string(c))?;
        Some(())
    })
}

/// `U`: the counts `decode_usage` reads, in the parse's own structure.
fn chat_usage(c: &mut Cursor<'_>) -> Option<Option<ChatUsage>> {
    if c.literal("null").is_some() {
        return Some(None);
    }
    let mut u = ChatUsage::default();
    let mut seen = Seen::default();
    c.members(|c, key| {
        let (slot, field) = match key {
            "prompt_tokens" => (0, &mut u.prompt_tokens),
            "completion_tokens" => (1, &mut u.completion_tokens),
            "prompt_cache_hit_tokens" => (2, &mut u.prompt_cache_hit_tokens),
            "prompt_cache_miss_tokens" => (3, &mut u.prompt_cache_miss_tokens),
            "cached_tokens" => (4, &mut u.cached_tokens),
            "prompt_tokens_details" => {
                u.prompt_tokens_details = seen.first(5).and_then(|()| details(c, prompt_details))?;
                return Some(());
            }
            "completion_tokens_details" => {
                u.completion_tokens_details = seen.first(6).and_then(|()| details(c, completion_details))?;
                return Some(());
            }
            _ => return skipped(c),
        };
        *field = Count(seen.first(slot).and_then(|()| c.count())?);
        Some(())
    })?;
    Some(Some(u))
}

/// A details object (or `null`, which the parse reads as absent).
fn details<T>(c: &mut Cursor<'_>, read: fn(&mut Cursor<'_>) -> Option<T>) -> Option<Lenient<T>> {
    if c.literal("null").is_some() {
        return Some(Lenient(None));
    }
    read(c).map(|t| Lenient(Some(t)))
}

fn prompt_details(c: &mut Cursor<'_>) -> Option<PromptTokensDetails> {
    let mut d = PromptTokensDetails::default();
    let mut seen = Seen::default();
    c.members(|c, key| {
        let (slot, field) = match key {
            "cached_tokens" => (0, &mut d.cached_tokens),
            "cache_write_tokens" => (1, &mut d.cache_write_tokens),
            _ => return skipped(c),
        };
        *field = Count(seen.first(slot).and_then(|()| c.count())?);
        Some(())
    })?;
    Some(d)
}

fn completion_details(c: &mut Cursor<'_>) -> Option<CompletionTokensDetails> {
    let mut d = CompletionTokensDetails::default();
    let mut seen = Seen::default();
    c.members(|c, key| {
        match key {
            "reasoning_tokens" => d.reasoning_tokens = Count(seen.first(0).and_then(|()| c.count())?),
            _ => skipped(c)?,
        }
        Some(())
    })?;
    Some(d)
}

/// `S`: a string's value, or `null` (absent to the parse).
fn optional_string<'a>(c: &mut Cursor<'a>) -> Option<Option<Cow<'a, str>>> {
    if c.literal("null").is_some() {
        return Some(None);
    }
    c.string_value().map(Some)
}

/// `V`: a member the decoding does not read (`annotations` is written as `[]`).
fn skipped(c: &mut Cursor<'_>) -> Option<()> {
    if c.literal("[]").is_some() {
        return Some(());
    }
    c.skipped_value(true)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::super::response::decode_response_with;
    use super::*;
    use crate::convert::ir::{StopReason, Usage};
    use crate::protocol::lenient::Parse;
    use crate::protocol::plain_json::strategies::{count, one_of, respace, spacing, string};
    use proptest::prelude::*;

    fn string_or_null() -> impl Strategy<Value = String> {
        prop_oneof![4 => string(), 1 => Just("null".to_owned()), 1 => Just("\"\"".to_owned())]
    }

    /// `"key":value` for one of `keys`, or now and then a member the decoding skips.
    fn counted(keys: &'static [&'static str]) -> impl Strategy<Value = String> {
        let other_key = prop::sample::select(vec!["total_tokens", "audio_tokens", "accepted_prediction_tokens"]);
        prop_oneof![
            4 => (prop::sample::select(keys.to_vec()), count()).prop_map(|(k, v)| format!("\"{k}\":{v}")),
            1 => (other_key, count()).prop_map(|(k, v)| format!("\"{k}\":{v}")),
        ]
    }

    fn object(members: impl Strategy<Value = String>, most: usize) -> impl Strategy<Value = String> {
        prop::collection::vec(members, 0..most).prop_map(|m| format!("{{{}}}", m.join(",")))
    }

    fn usage() -> BoxedStrategy<String> {
        let prompt = prop_oneof![
            4 => object(counted(&["cached_tokens", "cache_write_tokens"]), 4),
            1 => Just("null".to_owned()),
            1 => Just("7".to_owned()),
        ];
        let completion = prop_oneof![
            4 => object(counted(&["reasoning_tokens"]), 4),
            1 => Just("null".to_owned()),
            1 => Just("[]".to_owned()),
        ];
        let member = prop_oneof![
            6 => counted(&[
                "prompt_tokens",
                "completion_tokens",
                "prompt_cache_hit_tokens",
                "prompt_cache_miss_tokens",
                "cached_tokens",
            ]),
            1 => prompt.prop_map(|v| format!("\"prompt_tokens_details\":{v}")),
            1 => completion.prop_map(|v| format!("\"completion_tokens_details\":{v}")),
        ];
        let written = (count(), count(), count(), count()).prop_map(|(p, c, cached, reasoning)| {
            format!(
                r#"{{"prompt_tokens":{p},"completion_tokens":{c},"total_tokens":9,"prompt_tokens_details":{{"cached_tokens":{cached},"audio_tokens":0}},"completion_tokens_details":{{"reasoning_tokens":{reasoning},"audio_tokens":0}}}}"#
            )
        });
        prop_oneof![
            8 => written,
            4 => object(member, 8),
            1 => Just("null".to_owned()),
            1 => Just(r#"{"prompt_tokens":1,}"#.to_owned()),
            1 => Just(r#"{"prompt_tokens": 1}"#.to_owned()),
        ]
        .boxed()
    }

    fn message() -> BoxedStrategy<String> {
        let member = prop_oneof![
            3 => string_or_null().prop_map(|v| format!("\"content\":{v}")),
            1 => one_of(&[r#""assistant""#, "null", "3"]).prop_map(|v| format!("\"role\":{v}")),
            1 => string_or_null().prop_map(|v| format!("\"refusal\":{v}")),
            1 => string_or_null().prop_map(|v| format!("\"reasoning_content\":{v}")),
            1 => string_or_null().prop_map(|v| format!("\"reasoning\":{v}")),
            1 => one_of(&["[]", "[1]", "{}"]).prop_map(|v| format!("\"annotations\":{v}")),
            1 => one_of(&["[]", "null", r#"[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]"#])
                .prop_map(|v| format!("\"tool_calls\":{v}")),
            1 => one_of(&["null", r#"{"name":"f","arguments":"{}"}"#]).prop_map(|v| format!("\"function_call\":{v}")),
            1 => one_of(&[r#"[{"type":"text","text":"part"}]"#, r#"{"a":1}"#]).prop_map(|v| format!("\"content\":{v}")),
        ];
        let written = (string_or_null(), string_or_null()).prop_map(|(content, refusal)| {
            format!(r#"{{"role":"assistant","content":{content},"refusal":{refusal},"annotations":[]}}"#)
        });
        let reasoning = (string_or_null(), string_or_null(), string_or_null()).prop_map(|(c, r, rc)| {
            format!(r#"{{"role":"assistant","content":{c},"reasoning":{r},"reasoning_content":{rc}}}"#)
        });
        prop_oneof![
            12 => written,
            4 => reasoning,
            4 => object(member, 6),
            1 => Just("null".to_owned()),
            1 => Just("\"text\"".to_owned()),
        ]
        .boxed()
    }

    fn choice() -> BoxedStrategy<String> {
        let member = prop_oneof![
            2 => one_of(&["0", "1", "null", "00", "0.0", "\"0\""]).prop_map(|v| format!("\"index\":{v}")),
            4 => message().prop_map(|v| format!("\"message\":{v}")),
            2 => one_of(&[r#""stop""#, r#""length""#, r#""tool_calls""#, r#""content_filter""#, r#""""#, "null", "4"])
                .prop_map(|v| format!("\"finish_reason\":{v}")),
            1 => one_of(&["null", r#"{"content":null}"#]).prop_map(|v| format!("\"logprobs\":{v}")),
        ];
        let reason = one_of(&[r#""stop""#, r#""length""#, r#""content_filter""#, "null"]);
        let written = (message(), reason)
            .prop_map(|(m, r)| format!(r#"{{"index":0,"message":{m},"logprobs":null,"finish_reason":{r}}}"#));
        prop_oneof![6 => written, 1 => object(member, 5)].boxed()
    }

    /// The members of an answer as OpenAI writes them, each as it is written or changed.
    fn written() -> BoxedStrategy<Vec<String>> {
        let choices = prop_oneof![
            12 => choice().prop_map(|c| format!("[{c}]")),
            1 => (choice(), choice()).prop_map(|(a, b)| format!("[{a},{b}]")),
            1 => one_of(&["[]", "null", "[1]"]),
        ];
        (string_or_null(), string_or_null(), count(), choices, usage())
            .prop_map(|(id, model, created, choices, usage)| {
                vec![
                    format!("\"id\":{id}"),
                    r#""object":"chat.completion""#.to_owned(),
                    format!("\"created\":{created}"),
                    format!("\"model\":{model}"),
                    format!("\"choices\":{choices}"),
                    format!("\"usage\":{usage}"),
                    r#""service_tier":"default""#.to_owned(),
                    r#""system_fingerprint":null"#.to_owned(),
                ]
            })
            .boxed()
    }

    /// Answers in OpenAI's shape and near it: its members in its order, shuffled (as a relay that
    /// sorts keys writes them) or some left out; now and then one more (the parse's own or
    /// another); the object's ends as written or changed.
    fn answer() -> impl Strategy<Value = String> {
        let extra = prop::collection::vec(
            prop::sample::select(vec![
                r#""error":null"#,
                r#""error":{"message":"quota"}"#,
                r#""status":"failed""#,
                r#""id":"again""#,
                r#""usage":null"#,
                r#""choices":[]"#,
                r#""created":5"#,
                r#""model":"again""#,
                r#""note":[1]"#,
            ])
            .prop_map(str::to_owned),
            0..2,
        );
        let extra = prop::option::weighted(0.2, extra).prop_map(Option::unwrap_or_default);
        let members = prop_oneof![
            3 => written(),
            2 => written().prop_shuffle(),
            1 => written().prop_flat_map(|m| prop::sample::subsequence(m.clone(), 0..=m.len())),
        ];
        let ends = prop_oneof![
            6 => Just(("{".to_owned(), "}".to_owned())),
            1 => (one_of(&["{", "{ ", " {", "[{"]), one_of(&["}", "}\n", "} ", "", "}}", "},", "} x"])),
        ];
        (members, extra, ends, spacing()).prop_map(|(mut members, extra, (open, close), spacing)| {
            members.extend(extra);
            respace(&format!("{open}{}{close}", members.join(",")), spacing)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]
        /// Whenever the match accepts an answer, the parse decodes the same `Response` from it.
        #[test]
        fn a_matched_answer_decodes_as_its_parse_would(body in answer()) {
            if let Some(matched) = plain_chat_answer(&body) {
                let parsed = decode_response_with(body.as_bytes(), Parse::Direct);
                prop_assert_eq!(Ok(matched), parsed, "{}", body);
            }
        }
    }

    #[test]
    fn answers_as_the_api_writes_them_are_matched() {
        let api = r#"{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion","created":1741570283,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":"Hello!\nHow can I \"help\"? é 😀","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1117,"completion_tokens":46,"total_tokens":1163,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":12,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default","system_fingerprint":"fp_f33640a400"}"#;
        let matched = plain_chat_answer(api).unwrap();
        assert_eq!(matched.content, vec![text("Hello!\nHow can I \"help\"? é 😀")]);
        assert_eq!(matched.stop_reason, Some(StopReason::EndTurn));
        assert_eq!(matched.created, Some(1_741_570_283));
        let usage =
            Usage { input: Some(93), output: Some(46), cache_read: Some(1024), cache_write: None, reasoning: Some(12) };
        assert_eq!(matched.usage, usage);
        assert_eq!(Ok(matched), decode_response_with(api.as_bytes(), Parse::Direct));
        // Pretty-printed, as some relays write it.
        let pretty = serde_json::to_string_pretty(&serde_json::from_str::<serde_json::Value>(api).unwrap()).unwrap();
        assert_eq!(Ok(plain_chat_answer(&pretty).unwrap()), decode_response_with(pretty.as_bytes(), Parse::Direct));
        // DeepSeek's reasoning and cache counts, keys sorted as a relay writes them.
        let deepseek = r#"{"choices":[{"finish_reason":"length","index":0,"message":{"content":"4","reasoning_content":"2+2","role":"assistant"}}],"created":1,"id":"x","model":"deepseek-reasoner","usage":{"completion_tokens":9,"prompt_cache_hit_tokens":64,"prompt_cache_miss_tokens":6,"prompt_tokens":70}}"#;
        let matched = plain_chat_answer(deepseek).unwrap();
        assert_eq!(matched.content, vec![Part::Thinking { text: "2+2".into(), signature: None }, text("4")]);
        assert_eq!(Ok(matched), decode_response_with(deepseek.as_bytes(), Parse::Direct));
    }

    #[test]
    fn what_the_match_leaves_to_the_parse_is_left() {
        for body in [
            // A tool call, content parts, two choices, an error, a status, a surrogate \u escape,
            // a key twice.
            r#"{"choices":[{"index":0,"message":{"content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"message":{"content":[{"type":"text","text":"a"}]}}]}"#,
            r#"{"choices":[{"index":0,"message":{"content":"a"}},{"index":1,"message":{"content":"b"}}]}"#,
            r#"{"error":{"message":"quota"},"choices":[{"index":0,"message":{"content":"a"}}]}"#,
            r#"{"status":"failed","choices":[{"index":0,"message":{"content":"a"}}]}"#,
            r#"{"choices":[{"index":0,"message":{"content":"caf\ud83d\ude00"}}]}"#,
            r#"{"model":"a","model":"b","choices":[{"index":0,"message":{"content":"a"}}]}"#,
            r#"{"choices":[{"index":1,"message":{"content":"a"}}]}"#,
        ] {
            assert!(plain_chat_answer(body).is_none(), "{body}");
        }
    }
}
