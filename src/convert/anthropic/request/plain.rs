//! A Messages request of the simplest kind, matched instead of parsed. An SDK's chat call
//! (`model`, `max_tokens`, text turns, maybe a text `system`) went through a `serde_json::Value`
//! of the whole body before it was decoded (~4.4 k instructions for a one-line request, more than
//! the rest of its conversion); a match reads it for a fraction of that.
//!
//! The match is exact, as `protocol::plain_json` promises: a request it accepts is valid JSON
//! that `decode_parsed` decodes to the same `Request`. Members may come in any order, with
//! whitespace between tokens (Python's `json.dumps` puts a space after each colon and comma).
//! Anything the grammar below does not cover (a surrogate `\u` escape, content blocks, tools, sampling
//! numbers, a role other than user or assistant, any other member, a member named twice) is left
//! to the parse.
//!
//! ```text
//! request:  {M,...} and nothing after but whitespace
//! M:        "model":S | "messages":[{T,...},...] | "max_tokens":C | "top_k":C
//!           | "stream":true|false|null | "system":S|null
//! T:        "role":"user"|"assistant" | "content":S     (both, once each)
//! ```
//! S: a string whose `\u` escapes name no surrogate; C: a whole number of at most 19 digits, or null. A request
//! needs `model` and at least one turn.

use crate::convert::ir::{Message, Part, Request, Role, TextPart};
use crate::protocol::plain_json::{Cursor, Seen};

pub(super) fn plain_request(body: &str) -> Option<Request> {
    let mut c = Cursor::whole(body);
    let mut seen = Seen::default();
    let mut request = Request::default();
    let mut model = None;
    c.members(|c, key| match key {
        "model" => {
            seen.first(0)?;
            model = Some(c.string_value()?.into_owned());
            Some(())
        }
        "messages" => {
            seen.first(1)?;
            request.messages = turns(c)?;
            Some(())
        }
        "max_tokens" => {
            seen.first(2)?;
            request.max_tokens = c.count()?;
            Some(())
        }
        "top_k" => {
            seen.first(3)?;
            request.top_k = c.count()?;
            Some(())
        }
        "stream" => {
            seen.first(4)?;
            request.stream = c.literal("true").is_some();
            if !request.stream {
                c.literal("false").or_else(|| c.literal("null"))?;
            }
            Some(())
        }
        "system" => {
            seen.first(5)?;
            if c.literal("null").is_none() {
                let text = c.string_value()?;
                if !text.is_empty() {
                    request.system = vec![TextPart { text: text.into_owned(), cache_control: None }];
                }
            }
            Some(())
        }
        _ => None,
    })?;
    if !c.is_done() || request.messages.is_empty() {
        return None;
    }
    request.model = model?;
    Some(request)
}

/// `[{T,...},...]`: the turns, each a role and a text.
fn turns(c: &mut Cursor<'_>) -> Option<Vec<Message>> {
    let mut turns = Vec::new();
    c.elements(|c| {
        let (mut role, mut text) = (None, None);
        c.members(|c, key| match key {
            "role" if role.is_none() => {
                role = Some(match c.plain_string()? {
                    "user" => Role::User,
                    "assistant" => Role::Assistant,
                    _ => return None,
                });
                Some(())
            }
            "content" if text.is_none() => {
                text = Some(c.string_value()?.into_owned());
                Some(())
            }
            _ => None,
        })?;
        turns.push(Message { role: role?, content: vec![Part::Text(TextPart { text: text?, cache_control: None })] });
        Some(())
    })?;
    Some(turns)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use proptest::prelude::*;

    use super::super::decode::decode_parsed;
    use super::*;
    use crate::protocol::plain_json::strategies::{count, one_of, respace, spacing, string};

    fn parsed(body: &str) -> Request {
        decode_parsed(body.as_bytes().into()).unwrap()
    }

    #[test]
    fn requests_as_sdks_write_them_are_matched() {
        let bodies = [
            r#"{"max_tokens":256,"messages":[{"content":"Write a haiku about a gateway.","role":"user"}],"model":"bench-model","stream":false}"#,
            r#"{"model":"claude-sonnet-4-5","max_tokens":1024,"system":"Be brief.\nAnswer in \"French\".","messages":[{"role":"user","content":"Bonjour é 😀"},{"role":"assistant","content":"Salut"},{"role":"user","content":"Ça va ?"}],"stream":true}"#,
            r#"{"model":"m","messages":[{"role":"user","content":""}],"system":"","top_k":5,"max_tokens":null,"stream":null}  "#,
            // Python's `json.dumps` separators.
            r#"{"model": "m", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}"#,
        ];
        for body in bodies {
            let matched = plain_request(body).unwrap_or_else(|| panic!("not matched: {body}"));
            assert_eq!(matched, parsed(body), "{body}");
        }
        let r = plain_request(bodies[1]).unwrap();
        assert_eq!(r.system, vec![TextPart { text: "Be brief.\nAnswer in \"French\".".into(), cache_control: None }]);
        assert_eq!(r.messages.len(), 3);
        assert_eq!(r.messages[1].role, Role::Assistant);
        assert!(r.stream);
        assert_eq!(r.max_tokens, Some(1024));
    }

    #[test]
    fn anything_else_is_left_to_the_parse() {
        for body in [
            // Content blocks, a sampling number, a tool list, a system turn, a member named
            // twice, no model, no turns, a surrogate `\u` escape, trailing text.
            r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}"#,
            r#"{"model":"m","temperature":0.5,"messages":[{"role":"user","content":"hi"}]}"#,
            r#"{"model":"m","tools":[],"messages":[{"role":"user","content":"hi"}]}"#,
            r#"{"model":"m","messages":[{"role":"system","content":"hi"}]}"#,
            r#"{"model":"m","model":"n","messages":[{"role":"user","content":"hi"}]}"#,
            r#"{"model":"m","messages":[{"role":"user","role":"user","content":"hi"}]}"#,
            r#"{"messages":[{"role":"user","content":"hi"}]}"#,
            r#"{"model":"m","messages":[]}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"\ud83d\ude00"}]}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}x"#,
        ] {
            assert_eq!(plain_request(body), None, "{body}");
        }
    }

    /// Requests in the grammar's shape and near it: its members in any order, some left out, now
    /// and then one more; turns with odd roles, content blocks, a member twice or too few.
    fn request() -> impl Strategy<Value = String> {
        let role = one_of(&[r#""user""#, r#""assistant""#, r#""system""#, r#""bot""#, "null", "1"]);
        let content = prop_oneof![6 => string(), 1 => Just(r#"[{"type":"text","text":"x"}]"#.to_owned())];
        let turn =
            (role, content, prop::sample::select(vec![0u8, 0, 0, 0, 1, 2, 3])).prop_map(|(r, c, odd)| match odd {
                1 => format!(r#"{{"content":{c},"role":{r}}}"#),
                2 => format!(r#"{{"role":{r},"content":{c},"role":{r}}}"#),
                3 => format!(r#"{{"role":{r}}}"#),
                _ => format!(r#"{{"role":{r},"content":{c}}}"#),
            });
        let turns = prop::collection::vec(turn, 0..4).prop_map(|t| format!("[{}]", t.join(",")));
        let stream = one_of(&["false", "true", "null", "1", r#""yes""#]);
        let members = (string(), turns, count(), count(), stream, string())
            .prop_map(|(model, turns, max_tokens, top_k, stream, system)| {
                vec![
                    format!(r#""model":{model}"#),
                    format!(r#""messages":{turns}"#),
                    format!(r#""max_tokens":{max_tokens}"#),
                    format!(r#""top_k":{top_k}"#),
                    format!(r#""stream":{stream}"#),
                    format!(r#""system":{system}"#),
                ]
            })
            .boxed();
        let members = prop_oneof![
            2 => members.clone().prop_shuffle(),
            1 => members.prop_flat_map(|m| prop::sample::subsequence(m.clone(), 0..=m.len())),
        ];
        let extra = prop::option::weighted(
            0.2,
            prop::sample::select(vec![
                r#""temperature":1"#,
                r#""metadata":{"user_id":"u"}"#,
                r#""model":"again""#,
                r#""stop_sequences":[]"#,
                r#""thinking":{"type":"disabled"}"#,
            ]),
        );
        (members, extra, spacing()).prop_map(|(mut members, extra, spacing)| {
            members.extend(extra.map(str::to_owned));
            respace(&format!("{{{}}}", members.join(",")), spacing)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]
        /// Whenever the match accepts a request, the parse decodes the same `Request` from it.
        #[test]
        fn a_matched_request_decodes_as_its_parse_would(body in request()) {
            if let Some(matched) = plain_request(&body) {
                prop_assert_eq!(Ok(matched), decode_parsed(body.as_bytes().into()), "{}", body);
            }
        }
    }
}
