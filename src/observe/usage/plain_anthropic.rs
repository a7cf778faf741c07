//! A Messages answer of the usual kind, and the two stream events that carry usage
//! (`message_start`, `message_delta`), matched instead of parsed. Nearly every non-streaming
//! answer is an object of plain members around text blocks, and parsing one (~5.5 k
//! instructions for a short answer) cost more than relaying it; the two events cost a stream
//! ~6 k instructions of parsing.
//!
//! The match is exact, as `protocol::plain_json` promises: a body it accepts is valid JSON that
//! the parse (`parsed::<AnthropicMessage>`) reads to the same usage, model and envelope. Members may
//! come in any order (the API's own, or a relay's sorted keys), with whitespace between tokens.
//! Anything the grammar below does not cover (a `\u` escape in a value the reading keeps, a nested
//! input, an `error` or `status` member, a field the reading keeps named twice) is left to the
//! parse.
//!
//! ```text
//! answer:  {M,...} and nothing after but whitespace
//! M:       "model":S | "usage":{U,...} | "content":[{"K":V,...},...] | "K":V   (not "error", "status")
//! U:       "input_tokens":C | "output_tokens":C | "cache_read_input_tokens":C
//!          | "cache_creation_input_tokens":C | "K":V
//! V:       T | a whole number | null | {"K":T-or-number-or-null,...}
//! ```
//! S and K: a string with no escape; T: any string (a `\u` escape naming no surrogate too); C: a
//! whole number of at most 19 digits, or null. `model`, `usage` and each count at most once.
//!
//! ```text
//! event:   {E,...} and nothing after but whitespace
//! E:       "type":S | "message":{M,...} | "usage":{U,...} | "K":V   (each of the three at most once)
//! ```

use super::{AnswerRead, Envelope, answered_model};
use crate::observe::record::Tokens;
use crate::protocol::plain_json::{Cursor, Seen};

pub(super) fn plain_anthropic_answer(body: &str) -> Option<AnswerRead> {
    let mut c = Cursor::whole(body);
    let message = message(&mut c)?;
    c.is_done().then(|| AnswerRead {
        tokens: message.tokens.unwrap_or_default(),
        model: message.model.and_then(answered_model),
        envelope: Some(Envelope { error: false, status: None }),
    })
}

/// A message object's model and usage, as written.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct MessageRead<'a> {
    pub model: Option<&'a str>,
    pub tokens: Option<Tokens>,
}

/// What a stream event's data says of usage: its `type`, its `message` (`message_start`'s) and
/// its own `usage` (`message_delta`'s).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct EventRead<'a> {
    pub kind: Option<&'a str>,
    pub message: Option<MessageRead<'a>>,
    pub usage: Option<Tokens>,
}

pub(super) fn plain_anthropic_event(data: &str) -> Option<EventRead<'_>> {
    let mut c = Cursor::whole(data);
    let mut read = EventRead::default();
    let mut seen = Seen::default();
    c.members(|c, key| {
        match key {
            "type" => {
                seen.first(0)?;
                read.kind = Some(c.plain_string()?);
            }
            "message" => {
                seen.first(1)?;
                read.message = Some(message(c)?);
            }
            "usage" => {
                seen.first(2)?;
                read.usage = Some(usage(c)?);
            }
            _ => c.skipped_value(true)?,
        }
        Some(())
    })?;
    c.is_done().then_some(read)
}

/// A message object: an answer, or `message_start`'s `message`.
fn message<'a>(c: &mut Cursor<'a>) -> Option<MessageRead<'a>> {
    let mut read = MessageRead::default();
    c.members(|c, key| {
        match key {
            "model" if read.model.is_none() => read.model = Some(c.plain_string()?),
            "usage" if read.tokens.is_none() => read.tokens = Some(usage(c)?),
            "model" | "usage" | "error" | "status" => return None,
            "content" => content(c)?,
            _ => c.skipped_value(true)?,
        }
        Some(())
    })?;
    Some(read)
}

/// The content blocks, which the reading skips: objects of plain members.
fn content(c: &mut Cursor<'_>) -> Option<()> {
    c.elements(|c| c.members(|c, _| c.skipped_value(true)))
}

/// The `usage` object: its four counts, the other members checked and skipped.
fn usage(c: &mut Cursor<'_>) -> Option<Tokens> {
    let keys = ["input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"];
    let [input, output, cache_read, cache_write] = c.counts(keys, |c, _| c.skipped_value(true))?;
    Some(Tokens { input, output, cache_read, cache_write })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::super::plain_tests::{object_of, same};
    use super::super::{AnthropicEvent, AnthropicMessage, parsed};
    use super::*;
    use crate::protocol::plain_json::strategies::{count, one_of, string};
    use proptest::prelude::*;

    fn usage_member() -> impl Strategy<Value = String> {
        let counted = prop::sample::select(vec![
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
        ]);
        let other_key = prop::sample::select(vec!["service_tier", "cache_creation", "server_tool_use", "speed"]);
        let other_value = prop_oneof![
            string(),
            count(),
            Just(r#"{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":12}"#.to_owned()),
            Just(r#"{"web_search_requests":1}"#.to_owned()),
            Just("{}".to_owned()),
            Just(r#"{"a":{"b":1}}"#.to_owned()),
            Just(r#"{"a":[1]}"#.to_owned()),
            Just("[1,2]".to_owned()),
            Just("false".to_owned()),
        ];
        prop_oneof![
            3 => (counted, count()).prop_map(|(k, v)| format!("\"{k}\":{v}")),
            1 => (other_key, other_value).prop_map(|(k, v)| format!("\"{k}\":{v}")),
            1 => Just(r#""in\u0070ut_tokens":4"#.to_owned()),
        ]
    }

    fn usage() -> impl Strategy<Value = String> {
        prop_oneof![
            8 => prop::collection::vec(usage_member(), 0..7).prop_map(|m| format!("{{{}}}", m.join(","))),
            1 => Just("null".to_owned()),
            1 => Just("[]".to_owned()),
            1 => Just(r#"{"input_tokens":1,}"#.to_owned()),
            1 => Just(r#"{"input_tokens":1 }"#.to_owned()),
        ]
    }

    fn block() -> impl Strategy<Value = String> {
        prop_oneof![
            6 => string().prop_map(|t| format!(r#"{{"type":"text","text":{t}}}"#)),
            1 => string().prop_map(|t| format!(r#"{{"text":{t},"type":"text","citations":null}}"#)),
            1 => Just(r#"{"type":"tool_use","id":"t1","name":"f","input":{"command":"ls","n":2}}"#.to_owned()),
            1 => Just(r#"{"type":"tool_use","id":"t1","name":"f","input":{"a":{"b":1}}}"#.to_owned()),
            1 => Just(r#"{"type":"text","text":"a",}"#.to_owned()),
            1 => Just("\"text\"".to_owned()),
        ]
    }

    fn string_or_null() -> impl Strategy<Value = String> {
        prop_oneof![string(), Just("null".to_owned())]
    }

    /// An answer's members: those Anthropic writes, in its order, each as it writes it or changed;
    /// then now and then another member.
    fn members() -> BoxedStrategy<Vec<String>> {
        let written = (
            string(),
            one_of(&[r#""message""#, r#""error""#, "null"]),
            one_of(&[r#""assistant""#, r#""user""#]),
            string(),
            prop::collection::vec(block(), 0..4),
            (string_or_null(), string_or_null()),
            usage(),
        );
        let extra = prop::collection::vec(
            prop::sample::select(vec![
                r#""error":null"#,
                r#""error":{"type":"x"}"#,
                r#""status":"ok""#,
                r#""model":"again""#,
                r#""usage":{"output_tokens":9}"#,
                r#""container":null"#,
                r#""context":{"a":1}"#,
                r#""flags":[1]"#,
                r#""ok":true"#,
                r#""content":"text""#,
            ]),
            0..2,
        );
        (written, extra)
            .prop_map(|((id, kind, role, model, blocks, (reason, sequence), usage), extra)| {
                let mut members = vec![
                    format!("\"id\":{id}"),
                    format!("\"type\":{kind}"),
                    format!("\"role\":{role}"),
                    format!("\"model\":{model}"),
                    format!("\"content\":[{}]", blocks.join(",")),
                    format!("\"stop_reason\":{reason}"),
                    format!("\"stop_sequence\":{sequence}"),
                    format!("\"usage\":{usage}"),
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
            if let Some(matched) = plain_anthropic_answer(&body) {
                let parsed = parsed::<AnthropicMessage>(body.as_bytes());
                prop_assert!(same(&matched, &parsed), "{body}\nmatched {matched:?}\nparsed {parsed:?}");
            }
        }
    }

    /// `message_start` and `message_delta` data in the API's shape and near it: the members it
    /// writes, in its order or shuffled, some named twice or of another type, other members.
    fn event() -> impl Strategy<Value = String> {
        let message = prop_oneof![
            4 => members().prop_map(|m| format!("{{{}}}", m.join(","))),
            2 => members().prop_shuffle().prop_map(|m| format!("{{{}}}", m.join(","))),
            1 => Just("null".to_owned()),
            1 => Just("[]".to_owned()),
        ];
        let member = prop_oneof![
            2 => one_of(&[r#""message_start""#, r#""message_delta""#, r#""ping""#, "null", "1"]).prop_map(|t| format!("\"type\":{t}")),
            2 => message.prop_map(|m| format!("\"message\":{m}")),
            2 => usage().prop_map(|u| format!("\"usage\":{u}")),
            1 => one_of(&[
                r#""delta":{"stop_reason":"end_turn","stop_sequence":null}"#,
                r#""delta":{"stop_reason":null,"nested":{"a":1}}"#,
                r#""index":0"#,
                r#""context_management":null"#,
                r#""list":[1]"#,
                r#""ty\u0070e":"message_start""#,
            ]),
        ];
        let ends = (one_of(&["{", " {"]), one_of(&["}", "} ", "}\n", "", "}}", "},"]));
        (prop::collection::vec(member, 0..5), ends)
            .prop_map(|(members, (open, close))| format!("{open}{}{close}", members.join(",")))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]
        /// Whenever the match accepts an event, the parse reads the same type, message and usage.
        #[test]
        fn a_matched_event_is_read_as_its_parse_would(data in event()) {
            if let Some(matched) = plain_anthropic_event(&data) {
                let parsed = serde_json::from_str::<AnthropicEvent>(&data);
                prop_assert!(parsed.is_ok(), "{data}: matched {matched:?}, but the parse fails");
                let parsed = parsed.unwrap();
                prop_assert_eq!(matched, parsed.read(), "{}", data);
            }
        }
    }

    #[test]
    fn usage_events_as_the_api_writes_them_are_matched() {
        let start = r#"{"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":3,"cache_read_input_tokens":7,"output_tokens":1}}}"#;
        let read = plain_anthropic_event(start).unwrap();
        assert_eq!(read.kind, Some("message_start"));
        let message = read.message.unwrap();
        assert_eq!(message.model, Some("claude-sonnet-4-5"));
        assert_eq!(
            message.tokens,
            Some(Tokens { input: Some(25), output: Some(1), cache_read: Some(7), cache_write: Some(3) })
        );
        let delta = r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":16}}"#;
        let read = plain_anthropic_event(delta).unwrap();
        assert_eq!(read.kind, Some("message_delta"));
        assert_eq!(read.usage, Some(Tokens { output: Some(16), ..Tokens::default() }));
        assert_eq!(read.message, None);
        // The benchmark's mock writes its keys sorted, as some relays do.
        let mock = r#"{"message":{"content":[],"id":"msg_mock0001","model":"mock-model","role":"assistant","stop_reason":null,"stop_sequence":null,"type":"message","usage":{"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"input_tokens":25,"output_tokens":1,"service_tier":"standard"}},"type":"message_start"}"#;
        assert_eq!(plain_anthropic_event(mock).unwrap().kind, Some("message_start"));
        // A type named twice is the parse's, which refuses it.
        assert!(plain_anthropic_event(&delta.replace("{\"type\"", "{\"type\":\"ping\",\"type\"")).is_none());
    }

    #[test]
    fn answers_as_the_api_writes_them_are_matched() {
        let api = r#"{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"Hello!\nHow can I \"help\"? é 😀"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":100,"cache_read_input_tokens":2048,"cache_creation":{"ephemeral_5m_input_tokens":100,"ephemeral_1h_input_tokens":0},"output_tokens":6,"service_tier":"standard"}}"#;
        let read = plain_anthropic_answer(api).unwrap();
        let tokens = Tokens { input: Some(12), output: Some(6), cache_read: Some(2048), cache_write: Some(100) };
        assert_eq!(read.tokens, tokens);
        assert_eq!(read.model.as_deref(), Some("claude-sonnet-4-5-20250929"));
        assert!(same(&read, &parsed::<AnthropicMessage>(api.as_bytes())));
        // The benchmark's mock writes its keys sorted (`examples/mock_upstream.rs`), as some relays do.
        let mock = r#"{"content":[{"text":"lorem","type":"text"}],"id":"msg_mock0001","model":"m","role":"assistant","stop_reason":"end_turn","stop_sequence":null,"type":"message","usage":{"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"input_tokens":25,"output_tokens":16,"service_tier":"standard"}}"#;
        let read = plain_anthropic_answer(mock).unwrap();
        assert_eq!(
            read.tokens,
            Tokens { input: Some(25), output: Some(16), cache_read: Some(0), cache_write: Some(0) }
        );
        assert!(same(&read, &parsed::<AnthropicMessage>(mock.as_bytes())));
        // An error member, or a nested tool input, is the parse's.
        let error = api.replace(r#""usage":"#, r#""error":null,"usage":"#);
        assert!(plain_anthropic_answer(&error).is_none());
        let nested = api.replace(r#"[{"type":"text""#, r#"[{"type":"tool_use","input":{"a":{"b":1}}},{"type":"text""#);
        assert!(plain_anthropic_answer(&nested).is_none());
        // A flat tool input is matched: the reading skips content whatever it holds.
        let flat = api.replace(
            r#"[{"type":"text""#,
            r#"[{"type":"tool_use","id":"t","name":"f","input":{"command":"ls"}},{"type":"text""#,
        );
        assert!(same(&plain_anthropic_answer(&flat).unwrap(), &parsed::<AnthropicMessage>(flat.as_bytes())));
    }
}
