use proptest::prelude::*;
use serde::de::IgnoredAny;
use serde_json::{Map, Value, json};

use super::*;

const WANTED: [&str; 3] = ["model", "stream", "metadata"];

fn scan(text: &str) -> Option<[Option<Range<usize>>; 3]> {
    top_level_members(text, WANTED)
}

/// The wanted members' values as the scan found them, read back as JSON.
fn found_values(text: &str) -> Option<Vec<Option<Value>>> {
    let spans = scan(text)?;
    Some(
        spans
            .iter()
            .map(|s| s.clone().map(|s| serde_json::from_str(&text[s]).expect("a span holds one value")))
            .collect(),
    )
}

fn serde_accepts(text: &str) -> bool {
    serde_json::from_str::<IgnoredAny>(text).is_ok()
}

#[test]
fn finds_the_wanted_members_and_nothing_else() {
    let text = r#"{"messages":[{"role":"user","content":"a \"model\": 1"}],"model":"claude-x",
        "metadata" : { "user_id" : "u1", "model": "inner" } ,"stream":true, "n": -1.5e3}"#;
    let spans = scan(text).unwrap();
    let read: Vec<_> = spans.iter().map(|s| s.clone().map(|s| &text[s])).collect();
    assert_eq!(read, [Some(r#""claude-x""#), Some("true"), Some(r#"{ "user_id" : "u1", "model": "inner" }"#)]);
    assert_eq!(found_values(r#"{"x":[1,{"model":2}]}"#).unwrap(), [None, None, None]);
    assert_eq!(
        found_values(r#"{"stream":[[],{}],"model":null}"#).unwrap(),
        [Some(Value::Null), Some(json!([[], {}])), None]
    );
}

#[test]
fn escapes_across_every_block_boundary() {
    // Each escape, and each run of backslashes, lands on every position of a 64-byte block,
    // including the last (whose escaped byte is the next block's first).
    for value in [r#""a\"b""#, r#""\\""#, r#""\\\"\\""#, r#""\u00e9\n\t\/""#, r#""x\\\\""#] {
        for pad in 0..140 {
            let text = format!(r#"{{"p":"{}","model":{value},"stream":false}}"#, "-".repeat(pad));
            let expected: Value = serde_json::from_str(&text).unwrap();
            let found = found_values(&text).unwrap_or_else(|| panic!("refused {text}"));
            assert_eq!(found[0].as_ref(), expected.get("model"), "{text}");
            assert_eq!(found[1], Some(json!(false)), "{text}");
        }
    }
}

#[test]
fn refuses_what_serde_json_refuses() {
    // Each broken object, at the top level and nested in an object and in an array.
    let objects = [
        "{",
        "}",
        "{]",
        r#"{"a"}"#,
        r#"{"a":}"#,
        r#"{"a":1,}"#,
        r#"{"a" 1}"#,
        r#"{,"a":1}"#,
        r#"{,}"#,
        r#"{:}"#,
        r#"{"a":1 "b":2}"#,
        r#"{"a"::1}"#,
        r#"{"a":1:2}"#,
        r#"{1:2}"#,
        r#"{"a",1}"#,
        r#"{"a":[1,]}"#,
        r#"{"a":[,1]}"#,
        r#"{"a":[1 2]}"#,
        r#"{"a":[:]}"#,
        r#"{"a":{]}"#,
        r#"{"a":[}]}"#,
        r#"{"a":[{]}"#,
        r#"{"a":tru}"#,
        r#"{"a":truex}"#,
        r#"{"a":nul}"#,
        r#"{"a":True}"#,
        r#"{"a":01}"#,
        r#"{"a":-}"#,
        r#"{"a":1.}"#,
        r#"{"a":.5}"#,
        r#"{"a":1e}"#,
        r#"{"a":1e+}"#,
        r#"{"a":+1}"#,
        r#"{"a":0x1}"#,
        r#"{"a":NaN}"#,
        r#"{"a":"b\x"}"#,
        r#"{"a":"\u12"}"#,
        r#"{"a":"\u12g4"}"#,
        "{\"a\":\"b\u{1}\"}",
        "{\"a\":\"b\nc\"}",
        "{\"a\":\u{1}1}",
        r#"{"a":'b'}"#,
        r#"{a:1}"#,
        r#"{"a":\"b"}"#,
        r#"{"a":"x"1}"#,
        r#"{"a":1"x"}"#,
        r#"{"a":1}}"#,
        r#"{"a":[1]]}"#,
        r#"{"a":"x""y"}"#,
    ];
    for object in objects {
        for text in [object.to_owned(), format!(r#"{{"n":{object}}}"#), format!(r#"{{"n":[1,{object}]}}"#)] {
            assert!(!serde_accepts(&text), "serde_json accepts {text:?}");
            assert_eq!(scan(&text), None, "{text:?}");
        }
    }
    // Broken documents.
    let documents = [
        "",
        "{} {}",
        "{},",
        "{\"a\":1}\u{c}",
        "\u{feff}{}",
        r#"{"a":"b"#,
        r#"{"a":"b\"}"#,
        r#"{"a\":1}"#,
        r#"{"a":1}x"#,
        r#"{"a":1}/"#,
        r#"{"a":1}\"#,
        "{\"a\":\"b\\",
    ];
    for text in documents {
        assert!(!serde_accepts(text), "serde_json accepts {text:?}");
        assert_eq!(scan(text), None, "{text:?}");
    }
    for not_an_object in ["[]", "[{}]", "\"x\"", "7", "null"] {
        assert_eq!(scan(not_an_object), None, "{not_an_object:?}");
    }
}

/// Every document of up to six tokens: the scan accepts exactly the objects serde_json accepts.
#[test]
fn the_grammar_agrees_with_serde_json_on_every_short_document() {
    const TOKENS: [&str; 8] = ["{", "}", "[", "]", ":", ",", "\"k\"", "1"];
    let mut sequence: Vec<usize> = Vec::new();
    let mut checked = 0;
    loop {
        let text: String = sequence.iter().map(|&t| TOKENS[t]).collect();
        let serde_object = serde_json::from_str::<Value>(&text).is_ok_and(|v| v.is_object());
        assert_eq!(scan(&text).is_some(), serde_object, "{text:?}");
        checked += 1;
        // The next sequence, in counting order over the tokens.
        let mut i = sequence.len();
        loop {
            if i == 0 {
                if sequence.len() == 6 {
                    assert_eq!(checked, (0..=6).map(|n| 8usize.pow(n)).sum::<usize>());
                    return;
                }
                sequence = vec![0; sequence.len() + 1];
                break;
            }
            i -= 1;
            sequence[i] += 1;
            if sequence[i] < TOKENS.len() {
                break;
            }
            sequence[i] = 0;
        }
    }
}

#[test]
fn accepts_whitespace_numbers_and_literals_where_json_allows_them() {
    let valid = [
        "{}",
        " \t\r\n{ } \n",
        r#"{"a":0}"#,
        r#"{"a":-0.0e-0}"#,
        r#"{"a":12E+3}"#,
        r#"{"a":[true,false,null]}"#,
        r#"{"a":[[[]]],"b":{"c":{}}}"#,
        r#"{"":""}"#,
        "{\"a\" :\n[ 1 , 2 ]\t}",
        r#"{"a":"\u00E9\ud83d\ude00"}"#,
        r#"{"a":"é ☃ 😀 \u2028"}"#,
        r#"{"a":"}{][,:"}"#,
    ];
    for text in valid {
        assert!(serde_accepts(text), "{text:?}");
        assert!(scan(text).is_some(), "{text:?}");
    }
}

#[test]
fn leaves_to_serde_json_what_it_does_not_decide() {
    // An escaped top-level key (serde_json reads "\u006dodel" as "model"), a wanted member given
    // twice (a derived reader refuses it) and nesting deeper than the scan's limit.
    let deep = format!(r#"{{"a":{}{}}}"#, "[".repeat(64), "]".repeat(64));
    for text in [r#"{"\u006dodel":"m"}"#, r#"{"model":"a","model":"b"}"#, deep.as_str()] {
        assert!(serde_accepts(text), "{text}");
        assert_eq!(scan(text), None, "{text}");
    }
    let just_deep_enough = format!(r#"{{"a":{}{}}}"#, "[".repeat(63), "]".repeat(63));
    assert!(scan(&just_deep_enough).is_some());
    // Other members may repeat, as serde_json's readers ignore them.
    assert!(scan(r#"{"x":1,"x":2,"model":"m"}"#).is_some());
}

fn block() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![Just(b'"'), Just(b'\\'), 0u8..0x21, Just(0x7f), Just(0x80), Just(0xff), any::<u8>()];
    proptest::collection::vec(byte, 64)
}

/// Strings with the characters that matter to a JSON scanner: quotes, backslashes, control
/// characters (escaped by serde_json), brackets, multi-byte characters.
fn text() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[a-z\"\\\\/\u{0}-\u{1f}{}\\[\\]:, é☃😀\u{2028}]{0,40}").unwrap()
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e300f64..1e300).prop_map(Value::from),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((text(), inner), 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// An object whose top-level keys need no escape, the wanted ones among them.
fn json_object() -> impl Strategy<Value = Map<String, Value>> {
    let key =
        prop_oneof![Just("model".to_owned()), Just("stream".to_owned()), Just("metadata".to_owned()), "[a-z_]{0,8}"];
    proptest::collection::vec((key, json_value()), 0..8).prop_map(|m| m.into_iter().collect())
}

/// A serialized object, compact or pretty.
fn document() -> impl Strategy<Value = String> {
    (json_object(), any::<bool>()).prop_map(|(object, pretty)| {
        let object = Value::Object(object);
        if pretty { serde_json::to_string_pretty(&object).unwrap() } else { object.to_string() }
    })
}

/// A document with a few bytes inserted, replaced or removed: mostly invalid, in every way.
fn mutated_document() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop::sample::select(&b"\"\\{}[]:,0123456789-+.eEtrufalsn \n\t\x01/x\xc3"[..]);
    let edit = (any::<prop::sample::Index>(), 0..3u8, byte);
    (document(), proptest::collection::vec(edit, 1..4)).prop_map(|(doc, edits)| {
        let mut bytes = doc.into_bytes();
        for (at, kind, byte) in edits {
            let i = at.index(bytes.len() + 1);
            match kind {
                0 => bytes.insert(i, byte),
                1 if i < bytes.len() => bytes[i] = byte,
                _ if i < bytes.len() => {
                    bytes.remove(i);
                }
                _ => bytes.push(byte),
            }
        }
        bytes
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    #[test]
    fn the_simd_masks_are_the_bytewise_masks(bytes in block()) {
        let block: &[u8; 64] = bytes.as_slice().try_into().unwrap();
        prop_assert_eq!(masks(block), masks_bytewise(block));
    }

    /// Every valid object is accepted (none of these has what the scan leaves to serde_json),
    /// and each wanted member's span holds exactly its value.
    #[test]
    fn accepts_every_object_and_finds_its_members(text in document()) {
        let object: Value = serde_json::from_str(&text).unwrap();
        let found = found_values(&text);
        prop_assert!(found.is_some(), "refused {}", text);
        let expected: Vec<Option<Value>> = WANTED.iter().map(|k| object.get(*k).cloned()).collect();
        prop_assert_eq!(found.unwrap(), expected);
    }

    /// What the scan accepts, serde_json accepts: the scan never lets a broken body through.
    #[test]
    fn accepts_nothing_serde_json_refuses(bytes in mutated_document()) {
        if let Ok(text) = std::str::from_utf8(&bytes)
            && scan(text).is_some()
        {
            prop_assert!(serde_accepts(text), "accepted {:?}", text);
        }
    }
}

proptest! {
    /// The lane-wise run ends where a byte-by-byte look finds the first byte to escape.
    #[test]
    fn plain_run_ends_at_the_first_byte_to_escape(
        bytes in proptest::collection::vec(prop_oneof![8 => 0x20u8..0x7f, 1 => Just(b'"'), 1 => Just(b'\\'), 1 => 0u8..0x20, 2 => 0x80u8..=0xff], 0..80),
    ) {
        let expected = bytes.iter().position(|&b| escaped_in_json_string(b)).unwrap_or(bytes.len());
        prop_assert_eq!(plain_run(&bytes), expected);
        // A run that must cross several lanes.
        let long: Vec<u8> = [vec![b'a'; 37], bytes.clone()].concat();
        prop_assert_eq!(plain_run(&long), 37 + expected);
    }

    /// Looked for from `from` on, the bytes before it are never judged, however many of them
    /// need an escape and however short the rest is (its end is read as the slice's last lane).
    #[test]
    fn plain_end_judges_only_the_bytes_from_its_start(
        before in proptest::collection::vec(prop_oneof![1 => 0x20u8..0x7f, 1 => Just(b'"'), 1 => Just(b'\\'), 1 => 0u8..0x20], 0..40),
        bytes in proptest::collection::vec(prop_oneof![8 => 0x20u8..0x7f, 1 => Just(b'"'), 1 => Just(b'\\'), 1 => 0u8..0x20, 2 => 0x80u8..=0xff], 0..40),
    ) {
        let expected = bytes.iter().position(|&b| escaped_in_json_string(b)).unwrap_or(bytes.len());
        let whole = [before.clone(), bytes].concat();
        prop_assert_eq!(plain_end(&whole, before.len()), before.len() + expected);
    }
}
