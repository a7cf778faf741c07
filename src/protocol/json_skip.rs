//! Walking JSON that has already been shown valid. A request body is validated once, by the
//! request's peek (`json_scan`, or serde_json where the scan declines); a reader that then only
//! needs to step over parts of it (a converter stepping over tool schemas it relays as they are)
//! need not validate them a second time at serde_json's pace.

use crate::protocol::json_scan::{plain_run, top_level_members};

/// Text shown to be one JSON object, by `json_scan`'s scan here or by the request's peek.
#[derive(Clone, Copy, Debug)]
pub struct ShownObject<'a>(&'a str);

impl<'a> ShownObject<'a> {
    /// `text`, when `json_scan` shows it to be a JSON object.
    pub fn scan(text: &'a str) -> Option<Self> {
        top_level_members(text, []).map(|_| ShownObject(text))
    }

    /// `text`, which the request's peek accepted: `proxy::request::peek` refuses any body that
    /// is not one JSON object, validating all of it.
    pub fn accepted_by_peek(text: &'a str) -> Self {
        ShownObject(text)
    }

    pub fn text(self) -> &'a str {
        self.0
    }
}

/// Where the JSON value starting at `at` ends (the index after it), in text shown to be JSON:
/// strings are stepped over in runs found 16 bytes at a time, nothing is validated. On text that
/// is not JSON the answer means nothing, but it comes without a panic; `None` when the text ends
/// first.
pub fn value_end(bytes: &[u8], at: usize) -> Option<usize> {
    match *bytes.get(at)? {
        b'"' => string_end(bytes, at),
        b'{' | b'[' => container_end(bytes, at),
        _ => {
            let rest = bytes.get(at..)?;
            let len = rest.iter().position(|&b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'));
            Some(at + len.unwrap_or(rest.len()))
        }
    }
}

/// The index after the string whose opening quote is at `at`.
pub fn string_end(bytes: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    loop {
        i += plain_run(bytes.get(i..)?);
        match *bytes.get(i)? {
            b'"' => return Some(i + 1),
            b'\\' => i += 2,
            // A control character, which JSON text would not hold.
            _ => i += 1,
        }
    }
}

/// The index after the object or array that opens at `at`.
fn container_end(bytes: &[u8], at: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = at;
    loop {
        match *bytes.get(i)? {
            b'"' => {
                i = string_end(bytes, i)?;
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;

    fn any_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
            "[a\"\\\\/{}\\[\\],: \n\t\u{0}\u{1f}é]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec(("[a\"{}\\\\]{0,6}", inner), 0..6)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    /// Pretty-printed too, so that whitespace sits between every token.
    fn written(value: &Value, pretty: bool) -> String {
        if pretty { serde_json::to_string_pretty(value).unwrap() } else { value.to_string() }
    }

    proptest! {
        #[test]
        fn a_value_ends_where_its_text_ends(value in any_value(), pretty in any::<bool>(), after in prop::sample::select(vec!["", ",1", "]", "}", " ,"])) {
            let text = written(&value, pretty);
            let framed = format!("{text}{after}");
            prop_assert_eq!(value_end(framed.as_bytes(), 0), Some(text.len()), "{}", framed);
        }

        #[test]
        fn every_member_of_an_object_is_stepped_over_whole(members in prop::collection::vec(any_value(), 1..6)) {
            let text = Value::Array(members.clone()).to_string();
            let bytes = text.as_bytes();
            let mut at = 1;
            for member in &members {
                let end = value_end(bytes, at).unwrap();
                prop_assert_eq!(serde_json::from_str::<Value>(&text[at..end]).unwrap(), member.clone());
                at = end + 1;
            }
            prop_assert_eq!(at, text.len());
        }

        /// Text that is not JSON gets some answer, within the text, or none.
        #[test]
        fn any_bytes_get_an_answer_within_them(bytes in prop::collection::vec(prop::sample::select(b"{}[]\"\\ ,:a1".to_vec()), 0..40), at in 0usize..40) {
            if let Some(end) = value_end(&bytes, at) {
                prop_assert!(end >= at && end <= bytes.len());
            }
        }
    }

    #[test]
    fn a_value_cut_short_has_no_end() {
        for text in [r#"{"a":"b"#, r#"["a\"#, r#"{"a":[1,2]"#, r#""abc"#, ""] {
            assert_eq!(value_end(text.as_bytes(), 0), None, "{text}");
        }
    }

    #[test]
    fn only_an_object_is_shown_by_the_scan() {
        assert!(ShownObject::scan(r#"{"a":[1,{"b":null}]}"#).is_some());
        for text in [r#"[1]"#, r#"{"a":}"#, r#"{"a":1"#, "1", r#"{"a":"\x"}"#] {
            assert!(ShownObject::scan(text).is_none(), "{text}");
        }
    }
}
