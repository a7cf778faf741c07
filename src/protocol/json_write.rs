//! JSON written by hand, for the bodies written once per request, per event or per record: a
//! derived serde serializer checks every key for characters to escape and goes through its
//! formatter for every punctuation mark, which costs several times what the bytes themselves
//! do. Here a key is one of the writer's own names, copied as it is, and a string is copied in
//! runs found 16 bytes at a time. Numbers and `Value`s are left to serde_json.

use serde::Serialize;
use serde_json::Value;

use crate::protocol::json_scan::{plain_end, plain_run};

/// A JSON object being written to `out`; `close` writes its `}`.
pub struct JsonObject<'a> {
    out: &'a mut Vec<u8>,
    /// No member written yet.
    empty: bool,
}

impl<'a> JsonObject<'a> {
    pub fn open(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        JsonObject { out, empty: true }
    }

    pub fn close(self) {
        self.out.push(b'}');
    }

    /// The comma before a member, unless it is the first.
    fn comma(&mut self) {
        if self.empty {
            self.empty = false;
        } else {
            self.out.push(b',');
        }
    }

    /// A member's name and colon; its value is written next. `name` is the writer's own: it
    /// must need no escape.
    pub fn key(&mut self, name: &'static str) -> &mut Vec<u8> {
        debug_assert_eq!(plain_run(name.as_bytes()), name.len(), "a key that needs escaping: {name:?}");
        self.comma();
        self.out.push(b'"');
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(b"\":");
        self.out
    }

    pub fn text(&mut self, name: &'static str, text: &str) {
        push_json_string(self.key(name), text);
    }

    /// A string member, left out when there is none.
    pub fn text_if(&mut self, name: &'static str, text: Option<&str>) {
        if let Some(text) = text {
            self.text(name, text);
        }
    }

    /// A string member, `null` when there is none.
    pub fn text_or_null(&mut self, name: &'static str, text: Option<&str>) {
        match text {
            Some(text) => self.text(name, text),
            None => self.key(name).extend_from_slice(b"null"),
        }
    }

    /// A member written as it is: `json` must be one JSON value (a literal, a number, text the
    /// caller wrote itself).
    pub fn raw(&mut self, name: &'static str, json: &str) {
        self.key(name).extend_from_slice(json.as_bytes());
    }

    pub fn flag(&mut self, name: &'static str, flag: bool) {
        self.raw(name, if flag { "true" } else { "false" });
    }

    pub fn count(&mut self, name: &'static str, n: u64) {
        push_count(self.key(name), n);
    }

    /// A member serde_json writes: numbers, `Value`s, the callers' own small types.
    pub fn value(&mut self, name: &'static str, value: &impl Serialize) {
        push_value(self.key(name), value);
    }

    /// A member that is an object; close it before writing the next member.
    pub fn object(&mut self, name: &'static str) -> JsonObject<'_> {
        JsonObject::open(self.key(name))
    }

    /// A member that is a list; close it before writing the next member.
    pub fn list(&mut self, name: &'static str) -> JsonList<'_> {
        JsonList::open(self.key(name))
    }
}

/// A JSON list being written to `out`; `close` writes its `]`.
pub struct JsonList<'a> {
    out: &'a mut Vec<u8>,
    /// No element written yet.
    empty: bool,
}

impl<'a> JsonList<'a> {
    pub fn open(out: &'a mut Vec<u8>) -> Self {
        out.push(b'[');
        JsonList { out, empty: true }
    }

    pub fn close(self) {
        self.out.push(b']');
    }

    /// Where the next element is written (after its comma).
    pub fn element(&mut self) -> &mut Vec<u8> {
        if self.empty {
            self.empty = false;
        } else {
            self.out.push(b',');
        }
        self.out
    }

    /// An element that is an object; close it before writing the next element.
    pub fn object(&mut self) -> JsonObject<'_> {
        JsonObject::open(self.element())
    }
}

/// A JSON string, escaped as serde_json escapes it. The runs between characters that need an
/// escape (a quote, a backslash, a control character) are found 16 bytes at a time and copied
/// whole; serde_json looks up every byte in a table, which costs several times more on the long
/// texts of a conversation.
pub fn push_json_string(out: &mut Vec<u8>, text: &str) {
    let mut rest = text.as_bytes();
    out.reserve(rest.len() + 2);
    out.push(b'"');
    // Most strings written are short (ids, names, models, kinds) and need no escape: copied first,
    // one lane read at the end of `out` checks them. One that needs an escape is taken back.
    if rest.len() < 16 {
        let start = out.len();
        out.extend_from_slice(rest);
        if plain_end(out, start) == out.len() {
            out.push(b'"');
            return;
        }
        out.truncate(start);
    }
    loop {
        let run = plain_run(rest);
        out.extend_from_slice(&rest[..run]);
        let Some((&byte, after)) = rest[run..].split_first() else { break };
        push_escape(out, byte);
        rest = after;
    }
    out.push(b'"');
}

/// The escape of a byte that needs one, in serde_json's spelling (`\u00XX` in lowercase hex for
/// a control character without a short form).
fn push_escape(out: &mut Vec<u8>, byte: u8) {
    let short = match byte {
        b'"' => b'"',
        b'\\' => b'\\',
        b'\n' => b'n',
        b'\r' => b'r',
        b'\t' => b't',
        0x08 => b'b',
        0x0c => b'f',
        _ => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0xf)],
            ]);
            return;
        }
    };
    out.extend_from_slice(&[b'\\', short]);
}

/// A `Value` as serde_json writes it (compact, an object's members in the map's order), with
/// its strings copied in runs ([`push_json_string`]): a conversation built as a `Value` is mostly
/// text.
pub fn push_json_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => push_value(out, n),
        Value::String(s) => push_json_string(out, s),
        Value::Array(items) => {
            let mut list = JsonList::open(out);
            for item in items {
                push_json_value(list.element(), item);
            }
            list.close();
        }
        Value::Object(members) => push_json_members(out, members.iter(), |_| {}),
    }
}

/// An object of `members`, then whatever `more` writes: each of its members after a comma
/// (`more` is given whether one has been written), then the closing brace.
pub fn push_json_members<'a>(
    out: &mut Vec<u8>,
    members: impl Iterator<Item = (&'a String, &'a Value)>,
    more: impl FnOnce(&mut JsonObject<'_>),
) {
    let mut json = JsonObject::open(out);
    for (name, value) in members {
        json.comma();
        push_json_string(json.out, name);
        json.out.push(b':');
        push_json_value(json.out, value);
    }
    more(&mut json);
    json.close();
}

/// A non-negative integer, as JSON writes it.
pub fn push_count(out: &mut Vec<u8>, n: u64) {
    if n < 10 {
        out.push(b'0' + n as u8);
    } else {
        push_value(out, &n);
    }
}

/// A value serde_json writes. Numbers, strings and `Value`s cannot fail to serialise; `null`
/// keeps the text well-formed if one of the callers' own types ever did.
fn push_value(out: &mut Vec<u8>, value: &(impl Serialize + ?Sized)) {
    let at = out.len();
    if serde_json::to_writer(&mut *out, value).is_err() {
        out.truncate(at);
        out.extend_from_slice(b"null");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn written(write: impl FnOnce(&mut Vec<u8>)) -> Value {
        let mut out = Vec::new();
        write(&mut out);
        serde_json::from_slice(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out)))
    }

    #[test]
    fn objects_lists_and_members_nest_with_their_commas() {
        let value = written(|out| {
            let mut top = JsonObject::open(out);
            top.text("id", "msg_1");
            top.text_if("absent", None);
            top.text_if("present", Some("yes"));
            top.text_or_null("stop", None);
            top.text_or_null("reason", Some("end"));
            top.raw("flag", "true");
            top.flag("yes", true);
            top.flag("no", false);
            top.count("small", 7);
            top.count("large", u64::MAX);
            top.value("ratio", &0.5);
            let mut list = top.list("blocks");
            let mut first = list.object();
            first.text("type", "text");
            first.close();
            list.object().close();
            push_count(list.element(), 12);
            list.close();
            top.object("empty").close();
            let mut usage = top.object("usage");
            usage.count("input_tokens", 3);
            usage.close();
            top.close();
        });
        assert_eq!(
            value,
            json!({
                "id": "msg_1", "present": "yes", "stop": null, "reason": "end", "flag": true, "yes": true, "no": false,
                "small": 7, "large": u64::MAX, "ratio": 0.5,
                "blocks": [{"type": "text"}, {}, 12], "empty": {}, "usage": {"input_tokens": 3}
            })
        );
    }

    #[test]
    fn an_empty_list_and_object_are_well_formed() {
        assert_eq!(written(|out| JsonList::open(out).close()), json!([]));
        assert_eq!(written(|out| JsonObject::open(out).close()), json!({}));
    }

    #[test]
    fn a_value_that_fails_to_serialise_is_null_and_leaves_nothing_behind() {
        /// Fails halfway, after writing part of a list.
        struct Fails;
        impl Serialize for Fails {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeSeq;
                let mut list = serializer.serialize_seq(None)?;
                list.serialize_element(&1)?;
                Err(serde::ser::Error::custom("no"))
            }
        }
        let value = written(|out| {
            let mut top = JsonObject::open(out);
            top.value("broken", &vec![json!(1), json!(2)]);
            top.value("failed", &Fails);
            top.close();
        });
        assert_eq!(value, json!({"broken": [1, 2], "failed": null}));
    }

    /// JSON values of every kind, nested a few levels, with keys and text that need escapes.
    fn any_value() -> impl Strategy<Value = Value> {
        let text = "[a\"\\\\\n\u{1}é😀 ]{0,12}";
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            text.prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(text, inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// A `Value` is written as serde_json writes it, byte for byte.
        #[test]
        fn a_value_is_written_as_serde_json_writes_it(value in any_value()) {
            let mut out = Vec::new();
            push_json_value(&mut out, &value);
            prop_assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string(&value).unwrap());
        }

        /// Every string and count is written as serde_json writes it, escapes and all.
        #[test]
        fn strings_and_counts_are_written_as_serde_json_writes_them(text in any::<String>(), n in any::<u64>()) {
            let mut out = Vec::new();
            push_json_string(&mut out, &text);
            prop_assert_eq!(&out, &serde_json::to_vec(&text).unwrap());
            out.clear();
            push_count(&mut out, n);
            prop_assert_eq!(&out, &serde_json::to_vec(&n).unwrap());
        }

        /// A string written after other output (a short one is checked in place, at the end of
        /// `out`) is written the same, whatever came before it.
        #[test]
        fn a_string_is_written_the_same_after_anything(before in "[a\"\\\\\n\u{0}é]{0,40}", text in "[a\"\\\\\n\u{0}\u{1f}é ]{0,20}") {
            let mut out = before.clone().into_bytes();
            push_json_string(&mut out, &text);
            prop_assert_eq!(&out[..before.len()], before.as_bytes());
            prop_assert_eq!(&out[before.len()..], &serde_json::to_vec(&text).unwrap()[..]);
        }

        /// The same for text made of the characters JSON escapes, among plain ones.
        #[test]
        fn text_that_needs_escapes_is_escaped(text in "[a\"\\\n\r\t\u{0}\u{8}\u{c}\u{1f}\u{7f}é\u{2028}]{0,40}") {
            let mut out = Vec::new();
            push_json_string(&mut out, &text);
            prop_assert_eq!(&out, &serde_json::to_vec(&text).unwrap());
        }
    }
}
