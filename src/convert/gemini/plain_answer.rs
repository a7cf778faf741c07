//! A Gemini answer of the usual kind, matched instead of parsed. Converting a Gemini upstream's
//! answer for another client read it into a `serde_json::Value` first (~14 k instructions for a
//! short pretty-printed answer, most of the conversion's cost); nearly every answer is one
//! candidate of text parts with a usage object, which a match reads for a fraction of that.
//!
//! The match is exact, as `protocol::plain_json` promises: an answer it accepts is valid JSON
//! that `decode_parsed_response` reads to the same `Response`. Members may come in any order,
//! with whitespace between tokens (the API pretty-prints its answers). Anything the grammar below
//! does not cover (a surrogate `\u` escape in a value the decoding reads, a function call, a thought
//! signature, any part but text, more or fewer than one candidate, an `error` or `status` member,
//! a snake_case spelling of a member the decoding reads, a member it reads named twice) is left to
//! the parse. So a matched answer is also one that `proxy::outcome::not_an_answer` would pass: an
//! object with no `error` and no `status`.
//!
//! ```text
//! answer:    {M,...}
//! M:         "candidates":[C] | "usageMetadata":U | "modelVersion":S | "responseId":S | "K":V
//!            (not "error", "status", "usage_metadata", "model_version", "response_id")
//! C:         {"content":{"parts":[P,...] | "K":V,...} | "finishReason":S | "K":V,...}
//!            (not "finish_reason")
//! P:         {"text":T | "thought":true|false|null}   (text required)
//! ```
//! S: a string whose `\u` escapes name no surrogate (the API writes `<`, `>`, `&`, `=` and `'`
//! that way), or null; T: the same, not null; U: as
//! `protocol::gemini_usage` matches it; V: any value `Cursor::skipped_any` skips.

use std::borrow::Cow;

use super::response::{stop_reason, usage_of_counts};
use crate::convert::ir::{Part, Response, TextPart};
use crate::protocol::gemini_usage::usage_metadata;
use crate::protocol::plain_json::{Cursor, Seen};

/// How deep the skipped members may nest (a candidate's safety ratings and citations).
const SKIP_DEPTH: u8 = 8;

pub(super) fn plain_gemini_answer(body: &str) -> Option<Response> {
    let mut c = Cursor::whole(body);
    let mut seen = Seen::default();
    let (mut id, mut model, mut usage, mut candidate) = (None, None, None, None);
    c.members(|c, key| {
        match key {
            "candidates" => candidate = Some(seen.first(0).and_then(|()| only_candidate(c))?),
            "usageMetadata" => usage = seen.first(1).and_then(|()| usage_metadata(c))?,
            "modelVersion" => model = seen.first(2).and_then(|()| optional_string(c))?,
            "responseId" => id = seen.first(3).and_then(|()| optional_string(c))?,
            "error" | "status" | "usage_metadata" | "model_version" | "response_id" => return None,
            _ => c.skipped_any(SKIP_DEPTH)?,
        }
        Some(())
    })?;
    let Candidate { content, finish } = candidate?;
    if !c.is_done() {
        return None;
    }
    Some(Response {
        id: id.map(Cow::into_owned).unwrap_or_default(),
        model: model.map(Cow::into_owned).unwrap_or_default(),
        content,
        stop_reason: finish.as_deref().and_then(stop_reason),
        usage: usage.map(usage_of_counts).unwrap_or_default(),
        ..Response::default()
    })
}

/// What the decoding keeps of the one candidate.
struct Candidate<'a> {
    content: Vec<Part>,
    finish: Option<Cow<'a, str>>,
}

/// `[C]`: exactly one candidate.
fn only_candidate<'a>(c: &mut Cursor<'a>) -> Option<Candidate<'a>> {
    let mut only = None;
    c.elements(|c| {
        // A second candidate is left to the parse.
        if only.is_some() {
            return None;
        }
        let mut candidate = Candidate { content: Vec::new(), finish: None };
        let mut seen = Seen::default();
        c.members(|c, key| {
            match key {
                "content" => candidate.content = seen.first(0).and_then(|()| content(c))?,
                "finishReason" => candidate.finish = seen.first(1).and_then(|()| optional_string(c))?,
                "finish_reason" => return None,
                _ => c.skipped_any(SKIP_DEPTH)?,
            }
            Some(())
        })?;
        only = Some(candidate);
        Some(())
    })?;
    only
}

/// `{"parts":[P,...],...}`: the parts, as `decode_part` makes them of text parts.
fn content(c: &mut Cursor<'_>) -> Option<Vec<Part>> {
    let mut parts = None;
    c.members(|c, key| match key {
        "parts" if parts.is_none() => {
            let mut kept = Vec::new();
            c.elements(|c| {
                kept.extend(text_part(c)?);
                Some(())
            })?;
            parts = Some(kept);
            Some(())
        }
        "parts" => None,
        _ => c.skipped_any(SKIP_DEPTH),
    })?;
    Some(parts.unwrap_or_default())
}

/// `P`: a thought's text, a text, or nothing for an empty text.
fn text_part(c: &mut Cursor<'_>) -> Option<Option<Part>> {
    let (mut text, mut thought) = (None, None);
    c.members(|c, key| match key {
        "text" if text.is_none() => {
            text = Some(c.string_value()?);
            Some(())
        }
        "thought" if thought.is_none() => {
            thought = Some(c.literal("true").is_some());
            if thought == Some(false) {
                c.literal("false").or_else(|| c.literal("null"))?;
            }
            Some(())
        }
        _ => None,
    })?;
    let text = text?;
    Some(if thought == Some(true) {
        Some(Part::Thinking { text: text.into_owned(), signature: None })
    } else if text.is_empty() {
        None
    } else {
        Some(Part::Text(TextPart { text: text.into_owned(), cache_control: None }))
    })
}

/// `S`: a string's value, or `null` (absent to the parse).
fn optional_string<'a>(c: &mut Cursor<'a>) -> Option<Option<Cow<'a, str>>> {
    c.null_or(Cursor::string_value)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::super::response::decode_parsed_response;
    use super::*;
    use crate::convert::ir::{StopReason, Usage};
    use crate::protocol::gemini_usage::strategies::usage_metadata;
    use crate::protocol::plain_json::strategies::{one_of, respace, spacing, string};
    use proptest::prelude::*;

    fn part() -> impl Strategy<Value = String> {
        prop_oneof![
            6 => string().prop_map(|t| format!(r#"{{"text":{t}}}"#)),
            2 => (string(), one_of(&["true", "false", "null", "1"])).prop_map(|(t, f)| format!(r#"{{"text":{t},"thought":{f}}}"#)),
            1 => Just(r#"{"text":"a","thoughtSignature":"CiQB"}"#.to_owned()),
            1 => Just(r#"{"functionCall":{"name":"f","args":{"a":1}}}"#.to_owned()),
            1 => Just(r#"{"thought":true}"#.to_owned()),
            1 => Just(r#"{"text":"a","text":"b"}"#.to_owned()),
        ]
    }

    fn candidate() -> impl Strategy<Value = String> {
        let content = prop_oneof![
            6 => prop::collection::vec(part(), 0..4).prop_map(|p| format!(r#"{{"parts":[{}],"role":"model"}}"#, p.join(","))),
            1 => Just("{}".to_owned()),
            1 => Just(r#"{"parts":null}"#.to_owned()),
            1 => Just("null".to_owned()),
        ];
        let finish = one_of(&[r#""STOP""#, r#""MAX_TOKENS""#, r#""SAFETY""#, r#""NEW_REASON""#, "null", "3"]);
        let extra = one_of(&[
            "",
            r#","avgLogprobs":-0.0815"#,
            r#","safetyRatings":[{"category":"HARM_CATEGORY_HARASSMENT","probability":"NEGLIGIBLE"}]"#,
            r#","finish_reason":"STOP""#,
        ]);
        (content, finish, extra).prop_map(|(content, finish, extra)| {
            format!(r#"{{"content":{content},"finishReason":{finish},"index":0{extra}}}"#)
        })
    }

    /// An answer's members: those the API writes, in its order, each as it writes it or changed;
    /// then now and then another member.
    fn members() -> BoxedStrategy<Vec<String>> {
        let candidates = prop_oneof![
            6 => candidate().prop_map(|c| format!("[{c}]")),
            1 => (candidate(), candidate()).prop_map(|(a, b)| format!("[{a},{b}]")),
            1 => Just("[]".to_owned()),
        ];
        let written = (candidates, usage_metadata(), string(), string());
        let extra = prop::collection::vec(
            prop::sample::select(vec![
                r#""error":{"code":500,"message":"x"}"#,
                r#""status":"failed""#,
                r#""modelVersion":"again""#,
                r#""model_version":"snake""#,
                r#""response_id":"snake""#,
                r#""usage_metadata":{"prompt_token_count":3}"#,
                r#""promptFeedback":{"blockReason":"SAFETY"}"#,
            ]),
            0..2,
        );
        let extra = prop::option::weighted(0.2, extra).prop_map(Option::unwrap_or_default);
        (written, extra)
            .prop_map(|((candidates, usage, model, id), extra)| {
                let mut members = vec![
                    format!("\"candidates\":{candidates}"),
                    format!("\"usageMetadata\":{usage}"),
                    format!("\"modelVersion\":{model}"),
                    format!("\"responseId\":{id}"),
                ];
                members.extend(extra.into_iter().map(str::to_owned));
                members
            })
            .boxed()
    }

    fn answer() -> impl Strategy<Value = String> {
        let members = prop_oneof![
            3 => members(),
            2 => members().prop_shuffle(),
            1 => members().prop_flat_map(|m| prop::sample::subsequence(m.clone(), 0..=m.len())),
        ];
        let ends = prop_oneof![
            6 => Just(("{".to_owned(), "}".to_owned())),
            1 => (one_of(&["{", "{ ", "[{"]), one_of(&["}", "}\n", "", "}}", "} x"])),
        ];
        (members, ends, spacing()).prop_map(|(members, (open, close), spacing)| {
            respace(&format!("{open}{}{close}", members.join(",")), spacing)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]
        /// Whenever the match accepts an answer, the parse decodes the same `Response` from it.
        #[test]
        fn a_matched_answer_decodes_as_its_parse_would(body in answer()) {
            if let Some(matched) = plain_gemini_answer(&body) {
                prop_assert_eq!(Ok(matched), decode_parsed_response(body.as_bytes()), "{}", body);
            }
        }
    }

    #[test]
    fn answers_as_the_api_writes_them_are_matched() {
        let api = "{\n  \"candidates\": [\n    {\n      \"content\": {\n        \"parts\": [\n          {\n            \"text\": \"Let me think.\",\n            \"thought\": true\n          },\n          {\n            \"text\": \"Hello \\\"there\\\"\\n\"\n          }\n        ],\n        \"role\": \"model\"\n      },\n      \"finishReason\": \"STOP\",\n      \"avgLogprobs\": -0.0815\n    }\n  ],\n  \"usageMetadata\": {\n    \"promptTokenCount\": 1200,\n    \"candidatesTokenCount\": 40,\n    \"totalTokenCount\": 1265,\n    \"cachedContentTokenCount\": 1000,\n    \"thoughtsTokenCount\": 25,\n    \"promptTokensDetails\": [\n      {\n        \"modality\": \"TEXT\",\n        \"tokenCount\": 1200\n      }\n    ]\n  },\n  \"modelVersion\": \"gemini-2.5-pro\",\n  \"responseId\": \"abc\"\n}\n";
        let matched = plain_gemini_answer(api).unwrap();
        assert_eq!(
            matched.content,
            vec![
                Part::Thinking { text: "Let me think.".into(), signature: None },
                Part::Text(TextPart { text: "Hello \"there\"\n".into(), cache_control: None }),
            ]
        );
        assert_eq!(matched.stop_reason, Some(StopReason::EndTurn));
        let usage = Usage {
            input: Some(200),
            output: Some(65),
            cache_read: Some(1000),
            cache_write: None,
            reasoning: Some(25),
        };
        assert_eq!(matched.usage, usage);
        assert_eq!((matched.id.as_str(), matched.model.as_str()), ("abc", "gemini-2.5-pro"));
        assert_eq!(Ok(matched), decode_parsed_response(api.as_bytes()));
        // Code, as the API escapes it.
        let code = api.replace("Hello", "if a \\u003c b \\u0026\\u0026 c \\u003d\\u003d 'x':");
        let matched = plain_gemini_answer(&code).unwrap();
        assert_eq!(
            matched.content[1],
            Part::Text(TextPart { text: "if a < b && c == 'x': \"there\"\n".into(), cache_control: None })
        );
        assert_eq!(Ok(matched), decode_parsed_response(code.as_bytes()));
        // A function call, a thought signature, a surrogate `\u` escape in the text, an error, a
        // status, two candidates, a member the decoding reads in snake_case: the parse's.
        for refused in [
            api.replace(r#""responseId""#, r#""response_id""#),
            api.replace(r#""modelVersion""#, r#""model_version""#),
            api.replace(r#""usageMetadata""#, r#""usage_metadata""#),
            api.replace(r#""finishReason""#, r#""finish_reason""#),
            api.replace(r#""text": "Hello"#, r#""functionCall": {"name": "f","args": {}},"x": "Hello"#),
            api.replace(r#""thought": true"#, r#""thought": true,"thoughtSignature": "CiQB""#),
            api.replace("Hello", "\\ud83d\\ude00Hello"),
            api.replace(r#""responseId""#, r#""error": {"code": 500},"id""#),
            api.replace(r#""responseId""#, r#""status": "failed","id""#),
            api.replace("  ],\n  \"usageMetadata\"", "  ,{}],\n  \"usageMetadata\""),
        ] {
            assert!(plain_gemini_answer(&refused).is_none(), "{refused}");
        }
    }
}
