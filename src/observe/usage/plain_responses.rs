//! A Responses answer of the usual kind, and the lifecycle events of a Responses stream that
//! carry the response object, read for usage, model and envelope by matching them instead of
//! parsing them. The response object echoes the request's settings (instructions, tools, their
//! schemas), so a parse of it cost as much as a long answer; the reading needs four members.
//!
//! The match is exact, as `protocol::plain_json` promises: a body it accepts is valid JSON that
//! the parse (`parsed::<ResponseObject>`, or `ResponsesEvent` for an event) reads to the same
//! usage, model and envelope. Members may come in any order, with whitespace between tokens.
//! Anything the grammar below does not cover (a `\u` escape in a value the reading keeps, values
//! nested deeper than `SKIP_DEPTH`, a field the reading keeps named twice) is left to the parse.
//!
//! ```text
//! answer:  {M,...} and nothing after but whitespace
//! M:       "model":S | "usage":U | "error":V | "status":S-or-null | "K":V
//! U:       null | {"input_tokens":C | "output_tokens":C
//!          | "input_tokens_details":null-or-{"cached_tokens":C | "cache_read_tokens":C
//!            | "cache_write_tokens":C | "K":V,...}
//!          | "K":V,...}
//! event:   {"response":answer-or-null | "K":V,...}
//! V:       a string (a `\u` escape naming no surrogate too) | a number | null | true | false
//!          | arrays and objects of those, at most `SKIP_DEPTH` inside one another
//! ```
//! S and K: a string with no escape; C: a whole number of at most 19 digits, or null. Each member
//! the reading keeps at most once.

use super::{AnswerRead, Envelope, ResponsesInputDetails, ResponsesUsage, answered_model};
use crate::protocol::lenient::{Count, Lenient};
use crate::protocol::plain_json::{Cursor, Seen};

/// How deep the skipped members may nest: the echoed tools' JSON schemas go deepest.
const SKIP_DEPTH: u8 = 12;

/// What the reading keeps of a response object.
pub(super) struct ResponseRead<'a> {
    pub model: Option<&'a str>,
    pub usage: Option<ResponsesUsage>,
    pub error: bool,
    pub status: Option<&'a str>,
}

impl ResponseRead<'_> {
    pub fn into_answer(self) -> AnswerRead {
        AnswerRead {
            tokens: self.usage.map(|u| u.tokens()).unwrap_or_default(),
            model: self.model.and_then(answered_model),
            envelope: Some(Envelope { error: self.error, status: self.status.map(str::to_owned) }),
        }
    }
}

pub(super) fn plain_responses_answer(body: &str) -> Option<AnswerRead> {
    let mut c = Cursor::whole(body);
    let read = response(&mut c)?;
    c.is_done().then(|| read.into_answer())
}

/// A lifecycle event's data matched: its response object (`None` when it is `null` or absent).
pub(super) fn plain_responses_event(data: &str) -> Option<Option<ResponseRead<'_>>> {
    let mut c = Cursor::whole(data);
    let mut seen = Seen::default();
    let mut read = None;
    c.members(|c, key| {
        match key {
            "response" => {
                seen.first(0)?;
                if c.literal("null").is_none() {
                    read = Some(response(c)?);
                }
            }
            _ => c.skipped_any(SKIP_DEPTH)?,
        }
        Some(())
    })?;
    c.is_done().then_some(read)
}

/// `answer`: a response object.
fn response<'a>(c: &mut Cursor<'a>) -> Option<ResponseRead<'a>> {
    let mut seen = Seen::default();
    let mut read = ResponseRead { model: None, usage: None, error: false, status: None };
    c.members(|c, key| {
        match key {
            "model" => read.model = Some(seen.first(0).and_then(|()| c.plain_string())?),
            "usage" => read.usage = seen.first(1).and_then(|()| usage(c))?,
            "error" => {
                seen.first(2)?;
                read.error = c.literal("null").is_none();
                if read.error {
                    c.skipped_any(SKIP_DEPTH)?;
                }
            }
            "status" => {
                seen.first(3)?;
                if c.literal("null").is_none() {
                    read.status = Some(c.plain_string()?);
                }
            }
            _ => c.skipped_any(SKIP_DEPTH)?,
        }
        Some(())
    })?;
    Some(read)
}

/// `U`: the counts the reading keeps, in the parse's own structure.
fn usage(c: &mut Cursor<'_>) -> Option<Option<ResponsesUsage>> {
    c.null_or(|c| {
        let mut details = None;
        let [input, output] = c.counts(["input_tokens", "output_tokens"], |c, key| match key {
            "input_tokens_details" if details.is_none() => {
                details = Some(input_details(c)?);
                Some(())
            }
            "input_tokens_details" => None,
            _ => c.skipped_any(SKIP_DEPTH),
        })?;
        Some(ResponsesUsage {
            input_tokens: Count(input),
            output_tokens: Count(output),
            input_tokens_details: details.unwrap_or_default(),
        })
    })
}

/// `input_tokens_details`: `null` (absent to the parse) or its counts.
fn input_details(c: &mut Cursor<'_>) -> Option<Lenient<ResponsesInputDetails>> {
    let details = c.null_or(|c| {
        let keys = ["cached_tokens", "cache_read_tokens", "cache_write_tokens"];
        let [cached, read, written] = c.counts(keys, |c, _| c.skipped_any(SKIP_DEPTH))?;
        Some(ResponsesInputDetails {
            cached_tokens: Count(cached),
            cache_read_tokens: Count(read),
            cache_write_tokens: Count(written),
        })
    })?;
    Some(Lenient(details))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::super::plain_tests::{object_of, same};
    use super::super::{ResponseObject, ResponsesEvent, parsed};
    use super::*;
    use crate::protocol::plain_json::strategies::{count, one_of, string};
    use proptest::prelude::*;

    fn details() -> impl Strategy<Value = String> {
        let keys =
            prop::sample::select(vec!["cached_tokens", "cache_read_tokens", "cache_write_tokens", "audio_tokens"]);
        let member = (keys, count()).prop_map(|(k, v)| format!("\"{k}\":{v}"));
        prop_oneof![
            6 => prop::collection::vec(member, 0..4).prop_map(|m| format!("{{{}}}", m.join(","))),
            1 => Just("null".to_owned()),
            1 => Just("[]".to_owned()),
        ]
    }

    fn usage() -> impl Strategy<Value = String> {
        let member = prop_oneof![
            4 => (prop::sample::select(vec!["input_tokens", "output_tokens", "total_tokens"]), count())
                .prop_map(|(k, v)| format!("\"{k}\":{v}")),
            2 => details().prop_map(|d| format!("\"input_tokens_details\":{d}")),
            1 => Just(r#""output_tokens_details":{"reasoning_tokens":0}"#.to_owned()),
            1 => Just(r#""inp\u0075t_tokens":4"#.to_owned()),
        ];
        prop_oneof![
            8 => prop::collection::vec(member, 0..6).prop_map(|m| format!("{{{}}}", m.join(","))),
            1 => Just("null".to_owned()),
            1 => Just("7".to_owned()),
        ]
    }

    /// A response object's members: those OpenAI writes, in its order, each as it writes it or
    /// changed; then now and then another member.
    fn members() -> BoxedStrategy<Vec<String>> {
        let written = (
            string(),
            one_of(&[r#""completed""#, r#""in_progress""#, "null", "1"]),
            one_of(&["null", r#"{"code":"server_error","message":"x"}"#, r#""e""#, "false"]),
            string(),
            usage(),
            one_of(&["1.0", "0.7", "null", "-1e-2"]),
        );
        let extra = prop::collection::vec(
            prop::sample::select(vec![
                r#""model":"again""#,
                r#""usage":null"#,
                r#""status":"failed""#,
                r#""error":null"#,
                r#""tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{"a":{"type":"array","items":{"type":"string"}}}}}]"#,
                r#""deep":[[[[[[[[[[[[[1]]]]]]]]]]]]]"#,
            ]),
            0..2,
        );
        (written, extra)
            .prop_map(|((id, status, error, model, usage, temperature), extra)| {
                let mut members = vec![
                    format!("\"id\":{id}"),
                    r#""object":"response""#.to_owned(),
                    r#""created_at":1760000000"#.to_owned(),
                    format!("\"status\":{status}"),
                    r#""background":false"#.to_owned(),
                    format!("\"error\":{error}"),
                    format!("\"model\":{model}"),
                    r#""output":[{"type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"hi"}],"role":"assistant"}]"#.to_owned(),
                    r#""reasoning":{"effort":null,"summary":null}"#.to_owned(),
                    format!("\"temperature\":{temperature}"),
                    r#""text":{"format":{"type":"text"}}"#.to_owned(),
                    format!("\"usage\":{usage}"),
                    r#""metadata":{}"#.to_owned(),
                ];
                members.extend(extra.into_iter().map(str::to_owned));
                members
            })
            .boxed()
    }

    fn object() -> impl Strategy<Value = String> {
        object_of(members)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]
        /// Whenever the match accepts an answer, the parse reads the same usage, model and
        /// envelope from it.
        #[test]
        fn a_matched_answer_is_read_as_its_parse_would(body in object()) {
            if let Some(matched) = plain_responses_answer(&body) {
                let parsed = parsed::<ResponseObject>(body.as_bytes());
                prop_assert!(same(&matched, &parsed), "{body}\nmatched {matched:?}\nparsed {parsed:?}");
            }
        }

        /// Whenever the match accepts an event, the parse reads the same response from it.
        #[test]
        fn a_matched_event_is_read_as_its_parse_would(
            response in prop_oneof![3 => object(), 1 => Just("null".to_owned()), 1 => Just("[]".to_owned())],
            kind in one_of(&[r#""type":"response.completed""#, r#""type":"response.created","response":null"#]),
        ) {
            let data = format!(r#"{{{kind},"sequence_number":3,"response":{response}}}"#);
            if let Some(matched) = plain_responses_event(&data) {
                let parsed = serde_json::from_str::<ResponsesEvent>(&data);
                prop_assert!(parsed.is_ok(), "{data}: matched, but the parse fails");
                let parsed = parsed.unwrap().response.0.map(|r| {
                    use super::super::Answer;
                    r.into_read()
                });
                let matched = matched.map(ResponseRead::into_answer);
                prop_assert_eq!(matched.is_some(), parsed.is_some(), "{}", data);
                if let (Some(m), Some(p)) = (matched, parsed) {
                    prop_assert!(same(&m, &p), "{data}\nmatched {m:?}\nparsed {p:?}");
                }
            }
        }
    }

    #[test]
    fn answers_and_events_as_the_api_writes_them_are_matched() {
        let api = r#"{"id":"resp_1","object":"response","created_at":1741476542,"status":"completed","error":null,"incomplete_details":null,"instructions":"You are Codex.\nBe brief.","max_output_tokens":null,"model":"gpt-5-codex","output":[{"type":"reasoning","id":"rs_1","summary":[]},{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hi \"there\"","annotations":[],"logprobs":[]}]}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":"medium","summary":null},"store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[{"type":"function","name":"shell","description":"Runs a command","strict":false,"parameters":{"type":"object","properties":{"command":{"type":"array","items":{"type":"string"}},"timeout_ms":{"type":"number"}},"required":["command"],"additionalProperties":false}}],"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":3000,"input_tokens_details":{"cached_tokens":2048},"output_tokens":52,"output_tokens_details":{"reasoning_tokens":40},"total_tokens":3052},"user":null,"metadata":{}}"#;
        let read = plain_responses_answer(api).unwrap();
        assert_eq!((read.tokens.input, read.tokens.cache_read, read.tokens.output), (Some(952), Some(2048), Some(52)));
        assert_eq!(read.model.as_deref(), Some("gpt-5-codex"));
        assert_eq!(read.envelope, Some(Envelope { error: false, status: Some("completed".to_owned()) }));
        assert!(same(&read, &parsed::<ResponseObject>(api.as_bytes())));
        let event = format!(r#"{{"type":"response.completed","sequence_number":41,"response":{api}}}"#);
        let read = plain_responses_event(&event).unwrap().unwrap();
        assert_eq!(read.model, Some("gpt-5-codex"));
        // A failed response: its error read as present.
        let failed = api.replace(r#""error":null"#, r#""error":{"code":"server_error","message":"boom"}"#);
        assert!(plain_responses_answer(&failed).unwrap().envelope.unwrap().error);
        // A model named twice, or a `\u` escape in it: the parse's.
        for refused in
            [api.replace(r#""user":null"#, r#""model":"x""#), api.replace(r#""gpt-5-codex""#, r#""gpt-5-\u0063odex""#)]
        {
            assert!(plain_responses_answer(&refused).is_none(), "{refused}");
        }
    }
}
