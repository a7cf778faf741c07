//! A tool's JSON Schema, and the parse that keeps a request's schemas as the client wrote them.
//!
//! Chat, Responses and Messages upstreams take a tool's schema unchanged, and a coding agent's
//! schemas are a large part of each of its requests (Claude Code's two dozen tools: 12.4 KB of a
//! 22.8 KB turn). Building them into `Value`s only to write them out again was the largest part
//! of converting such a request, so the request decoders keep them as their text (Gemini's aside),
//! validated JSON, and only an encoder that must read inside a schema parses it (Gemini's, which
//! rewrites it; the Messages one, for a schema that names no `type`).

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::{ConvertError, parse_object};
use crate::protocol::json_scan::top_level_members;
use crate::protocol::json_skip::ShownObject;
use crate::protocol::json_write::push_json_value;
use cut::{Cut, Placeholders};

mod cut;

/// A tool's schema: parsed, or the client's text of it (never `null`: an absent schema is
/// decoded to a default one).
#[derive(Clone)]
pub enum Schema {
    Value(Value),
    Text(SchemaText),
}

/// A schema's JSON text as the client wrote it: valid JSON, as serde_json's parse or the request's
/// scan showed it to be.
#[derive(Clone, PartialEq, Eq)]
pub struct SchemaText(Box<str>);

impl SchemaText {
    pub fn get(&self) -> &str {
        &self.0
    }

    /// `text` if it is one JSON value (whitespace around it left out).
    pub fn parse(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str::<&RawValue>(text).map(Self::of)
    }

    fn of(raw: &RawValue) -> Self {
        SchemaText(raw.get().into())
    }
}

impl Schema {
    /// The schema as a `Value`, parsed when it is text. Text is valid JSON, but may hold what
    /// `serde_json` builds no `Value` of (nesting past 128 levels, a number beyond `f64`, a lone
    /// surrogate escape); that is the error.
    pub fn value(&self) -> Result<Cow<'_, Value>, serde_json::Error> {
        match self {
            Schema::Value(v) => Ok(Cow::Borrowed(v)),
            Schema::Text(t) => serde_json::from_str(t.get()).map(Cow::Owned),
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Schema::Value(Value::Null))
    }

    pub fn is_object(&self) -> bool {
        match self {
            Schema::Value(v) => v.is_object(),
            Schema::Text(t) => t.get().starts_with('{'),
        }
    }

    /// Whether the schema is an object with a member `key`, read without building it: the
    /// first member's name is compared first (`"type"` leads most schemas), and only when that
    /// is not it are the other members' names read.
    pub fn has_member(&self, key: &str) -> bool {
        let text = match self {
            Schema::Value(v) => return v.as_object().is_some_and(|o| o.contains_key(key)),
            Schema::Text(t) => t.get(),
        };
        let Some(members) = text.strip_prefix('{') else { return false };
        let first = members.trim_start_matches(JSON_WHITESPACE);
        let first_is_key = first
            .strip_prefix('"')
            .and_then(|s| s.strip_prefix(key))
            .and_then(|s| s.strip_prefix('"'))
            .is_some_and(|s| s.trim_start_matches(JSON_WHITESPACE).starts_with(':'));
        if first_is_key {
            return true;
        }
        // The request's scan finds top-level members at a few instructions a byte; a parse of the
        // names skips every value at serde_json's pace. It decides what the scan cannot (a key
        // written with an escape, one given twice).
        match top_level_members(text, [key]) {
            Some([found]) => found.is_some(),
            None => serde_json::from_str::<MemberNames>(text).is_ok_and(|names| names.0.iter().any(|n| n == key)),
        }
    }

    /// The schema as JSON text, for counting its tokens.
    pub fn text(&self) -> Cow<'_, str> {
        match self {
            Schema::Value(v) => Cow::Owned(v.to_string()),
            Schema::Text(t) => Cow::Borrowed(t.get()),
        }
    }

    /// The schema as JSON, written into `out`: text as it is.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        match self {
            Schema::Value(v) => push_json_value(out, v),
            Schema::Text(t) => out.extend_from_slice(t.get().as_bytes()),
        }
    }

    /// Text that is `null` (a client's "no schema") as absent, like a `null` member.
    fn text_unless_null(text: &RawValue) -> Option<Schema> {
        (text.get() != "null").then(|| Schema::Text(SchemaText::of(text)))
    }
}

const JSON_WHITESPACE: [char; 4] = [' ', '\t', '\n', '\r'];

/// The names of an object's members, their values skipped.
struct MemberNames(Vec<String>);

impl<'de> Deserialize<'de> for MemberNames {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Names;
        impl<'de> Visitor<'de> for Names {
            type Value = MemberNames;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MemberNames, A::Error> {
                let mut names = Vec::new();
                while let Some(name) = map.next_key::<String>()? {
                    map.next_value::<de::IgnoredAny>()?;
                    names.push(name);
                }
                Ok(MemberNames(names))
            }
        }
        deserializer.deserialize_map(Names)
    }
}

impl From<Value> for Schema {
    fn from(v: Value) -> Self {
        Schema::Value(v)
    }
}

/// Two schemas are equal when they say the same, whichever form each is in.
impl PartialEq for Schema {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Schema::Text(a), Schema::Text(b)) if a.get() == b.get() => true,
            _ => matches!((self.value(), other.value()), (Ok(a), Ok(b)) if a == b),
        }
    }
}

/// Shown as the `Value` it holds, so that the IR reads the same whichever way it was decoded.
impl fmt::Debug for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.value() {
            Ok(v) => v.fmt(f),
            Err(_) => write!(f, "Text({})", self.text()),
        }
    }
}

/// Where a protocol's requests hold their tools' schemas: the member `member` of each object in
/// the body's array `list`; with `nested`, of each object in such an object's own `list` too (a
/// Responses namespace tool's `tools`); with `wrapper`, of the object such an object holds under
/// that name too (a Chat tool's `function`).
#[derive(Clone, Copy, Debug)]
pub struct SchemaPlaces {
    pub list: &'static str,
    pub member: &'static str,
    pub nested: bool,
    pub wrapper: Option<&'static str>,
}

/// Where a kept schema was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// In the `i`-th element of the list.
    Element(usize),
    /// In the `j`-th element of the `i`-th element's own list.
    Nested(usize, usize),
    /// In the `i`-th element's wrapper object.
    Wrapped(usize),
}

/// A request body's object, with the schemas at its [`SchemaPlaces`] taken out as text into
/// `schemas` (one that is `null` is left in place).
pub struct ObjectWithSchemas {
    pub object: Map<String, Value>,
    pub schemas: Schemas,
}

/// The schemas taken out of a body, by [`Place`].
#[derive(Default)]
pub struct Schemas {
    /// The list's elements' schemas by index, up to the last element that has one; `None` for
    /// an element without one (or `null`) or that is not an object. Grown only when a schema is
    /// kept, so a long list of anything else costs nothing here.
    own: Vec<Option<Schema>>,
    /// The nested lists' elements' schemas, in the order of their places.
    nested: Vec<((usize, usize), Option<Schema>)>,
    /// The elements' wrapper objects' schemas by index, like `own`.
    wrapped: Vec<Option<Schema>>,
}

/// `slots[i]`, the slots before it added (empty) if they are not there yet.
fn slot(slots: &mut Vec<Option<Schema>>, i: usize) -> &mut Option<Schema> {
    if slots.len() <= i {
        slots.resize_with(i + 1, || None);
    }
    &mut slots[i]
}

impl Schemas {
    /// The schema at `place`, if it was kept as text; otherwise `member`, the schema member
    /// still in its element, if any (a `null` one is absent), as when a body is parsed whole.
    pub fn take(&mut self, place: Place, member: Option<&mut Value>) -> Option<Schema> {
        let kept = match place {
            Place::Element(i) => self.own.get_mut(i).and_then(Option::take),
            Place::Nested(i, j) => match self.nested.binary_search_by_key(&(i, j), |(at, _)| *at) {
                Ok(k) => self.nested[k].1.take(),
                Err(_) => None,
            },
            Place::Wrapped(i) => self.wrapped.get_mut(i).and_then(Option::take),
        };
        kept.or_else(|| member.map(Value::take).filter(|v| !v.is_null()).map(Schema::Value))
    }

    /// Keeps `schema` for `place`, in place of one kept there before.
    fn keep(&mut self, place: Place, schema: Option<Schema>) {
        match place {
            Place::Element(i) => *slot(&mut self.own, i) = schema,
            Place::Nested(i, j) => match self.nested.last_mut() {
                // A nested element's places come last while it is read.
                Some((at, kept)) if *at == (i, j) => *kept = schema,
                _ => self.nested.push(((i, j), schema)),
            },
            Place::Wrapped(i) => *slot(&mut self.wrapped, i) = schema,
        }
    }
}

/// A client's request body as a decoder gets it: its bytes and, when the request's peek has shown
/// it to be a JSON object, that showing, so that the decoder need not validate again what it
/// only steps over.
#[derive(Clone)]
pub struct RequestBody<'a> {
    pub bytes: &'a [u8],
    shown: Option<ShownObject<'a>>,
}

impl<'a> RequestBody<'a> {
    pub fn shown(json: ShownObject<'a>) -> Self {
        RequestBody { bytes: json.text().as_bytes(), shown: Some(json) }
    }

    /// The body as text, if it is UTF-8: checked already when the body was shown to be an object.
    pub fn text(&self) -> Option<&'a str> {
        self.shown.as_ref().map(ShownObject::text).or_else(|| crate::protocol::lenient::utf8(self.bytes))
    }
}

impl<'a> From<&'a [u8]> for RequestBody<'a> {
    fn from(bytes: &'a [u8]) -> Self {
        RequestBody { bytes, shown: None }
    }
}

impl<'a, const N: usize> From<&'a [u8; N]> for RequestBody<'a> {
    fn from(bytes: &'a [u8; N]) -> Self {
        RequestBody { bytes, shown: None }
    }
}

impl<'a> From<&'a Vec<u8>> for RequestBody<'a> {
    fn from(bytes: &'a Vec<u8>) -> Self {
        RequestBody { bytes, shown: None }
    }
}

/// [`parse_object`], keeping the schemas at `places` as text. A body this parse refuses gets
/// `parse_object`'s own answer, so what is refused, and the words that say why, are the same as
/// without it.
///
/// A body shown to be a JSON object (by the request's peek, or by the scan here) has its object
/// schemas cut out of its text before the parse (`Cut`), which then only meets a placeholder
/// for each: stepping over a schema's text costs serde_json ~10 instructions a byte, as it
/// validates it again; cutting it out costs a copy.
pub fn parse_object_keeping_schemas(
    body: RequestBody<'_>,
    places: SchemaPlaces,
) -> Result<ObjectWithSchemas, ConvertError> {
    let bytes = body.bytes;
    // A body that never names the list has no schema to keep: it is parsed the plain way.
    if memchr::memmem::find(bytes, places.list.as_bytes()).is_none() {
        return parse_object(bytes).map(|object| ObjectWithSchemas { object, schemas: Schemas::default() });
    }
    // Bytes that are not UTF-8 are left to `parse_object`, which reads them as `from_slice` does.
    let Some(text) = body.text() else {
        return parse_object(bytes).map(|object| ObjectWithSchemas { object, schemas: Schemas::default() });
    };
    if let Some(shown) = body.shown.or_else(|| ShownObject::scan(text, places.list))
        && let Some(cut) = Cut::of(shown, places)
        && let Some(parsed) = cut.parse(places)
    {
        return Ok(parsed);
    }
    match parse_capturing(text, places, None) {
        Some(parsed) => Ok(parsed),
        None => parse_object(bytes).map(|object| ObjectWithSchemas { object, schemas: Schemas::default() }),
    }
}

/// `text` parsed with the schemas at `places` kept; `cut`: the schemas cut out of it, if it is a
/// cut text. `None` when the parse fails.
fn parse_capturing(text: &str, places: SchemaPlaces, cut: Option<&mut Placeholders<'_>>) -> Option<ObjectWithSchemas> {
    let mut schemas = Schemas::default();
    let seed = Capture { level: Level::Body, places, schemas: &mut schemas, cut };
    let mut de = serde_json::Deserializer::from_str(text);
    match seed.deserialize(&mut de).and_then(|value| de.end().map(|()| value)) {
        Ok(Value::Object(object)) => Some(ObjectWithSchemas { object, schemas }),
        _ => None,
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Level {
    /// The body's object.
    Body,
    /// The array at `list`; in the element at this index of the outer one, if nested.
    List(Option<usize>),
    /// An object that may hold a schema: one of its elements, or an element's wrapper.
    Element(Place),
}

/// Builds the `Value` that `Value::deserialize` would, except at the levels it takes over: the
/// body's members, the lists' elements and an element's schema member.
struct Capture<'s, 't> {
    level: Level,
    places: SchemaPlaces,
    schemas: &'s mut Schemas,
    /// When the text parsed is a cut one: its cut schemas.
    cut: Option<&'s mut Placeholders<'t>>,
}

impl<'t> Capture<'_, 't> {
    fn at(&mut self, level: Level) -> Capture<'_, 't> {
        Capture { level, places: self.places, schemas: self.schemas, cut: self.cut.as_deref_mut() }
    }

    /// The schema for the value `raw` read at a schema's place (`None` for `null`).
    fn schema(&mut self, raw: &RawValue) -> Result<Option<Schema>, &'static str> {
        match self.cut.as_deref_mut() {
            Some(cut) => cut.schema(raw),
            None => Ok(Schema::text_unless_null(raw)),
        }
    }
}

impl<'de> DeserializeSeed<'de> for Capture<'_, '_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Capture<'_, '_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        let SchemaPlaces { list, member, nested, wrapper } = self.places;
        match self.level {
            Level::Body => {
                while let Some(key) = map.next_key::<String>()? {
                    let value = if key == list {
                        // A member named twice counts as its last (as in `Value`).
                        *self.schemas = Schemas::default();
                        map.next_value_seed(self.at(Level::List(None)))?
                    } else {
                        map.next_value()?
                    };
                    object.insert(key, value);
                }
            }
            Level::Element(place) => {
                let nested_from = self.schemas.nested.len();
                while let Some(key) = map.next_key::<String>()? {
                    if key == member {
                        // A `null` stays a member, as in `Value`, and is read as absent.
                        let schema = self.schema(map.next_value::<&RawValue>()?).map_err(de::Error::custom)?;
                        match schema {
                            Some(_) => object.remove(&key),
                            None => object.insert(key, Value::Null),
                        };
                        self.schemas.keep(place, schema);
                        continue;
                    }
                    let value = match place {
                        Place::Element(i) if nested && key == list => {
                            self.schemas.nested.truncate(nested_from);
                            map.next_value_seed(self.at(Level::List(Some(i))))?
                        }
                        Place::Element(i) if wrapper == Some(key.as_str()) => {
                            if let Some(kept) = self.schemas.wrapped.get_mut(i) {
                                *kept = None;
                            }
                            map.next_value_seed(self.at(Level::Element(Place::Wrapped(i))))?
                        }
                        _ => map.next_value()?,
                    };
                    object.insert(key, value);
                }
            }
            Level::List(_) => return Value::deserialize(MapAccessDeserializer::new(map)),
        }
        Ok(Value::Object(object))
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Value, A::Error> {
        let Level::List(outer) = self.level else {
            return Value::deserialize(SeqAccessDeserializer::new(seq));
        };
        let mut elements = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        loop {
            let place = match outer {
                None => Place::Element(elements.len()),
                Some(i) => Place::Nested(i, elements.len()),
            };
            match seq.next_element_seed(self.at(Level::Element(place)))? {
                Some(element) => elements.push(element),
                None => break,
            }
        }
        Ok(Value::Array(elements))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    const MESSAGES: SchemaPlaces = SchemaPlaces { list: "tools", member: "input_schema", nested: false, wrapper: None };
    const NESTED: SchemaPlaces = SchemaPlaces { nested: true, ..MESSAGES };
    const WRAPPED: SchemaPlaces = SchemaPlaces { wrapper: Some("function"), ..MESSAGES };

    fn parse(body: &str) -> Result<ObjectWithSchemas, ConvertError> {
        parse_object_keeping_schemas(body.as_bytes().into(), MESSAGES)
    }

    /// The schemas at `places`, taken, as their text.
    fn taken_texts(parsed: &mut ObjectWithSchemas, places: &[Place]) -> Vec<Option<String>> {
        places.iter().map(|&place| parsed.schemas.take(place, None).map(|s| s.text().into_owned())).collect()
    }

    fn text_schema(s: &str) -> Schema {
        Schema::Text(SchemaText::parse(s).unwrap())
    }

    fn texts(parsed: &ObjectWithSchemas) -> Vec<Option<&str>> {
        fn text(s: &Schema) -> &str {
            match s {
                Schema::Text(t) => t.get(),
                Schema::Value(_) => panic!("a parsed schema among the kept ones"),
            }
        }
        parsed.schemas.own.iter().map(|s| s.as_ref().map(text)).collect()
    }

    #[test]
    fn schemas_are_kept_as_the_clients_text_and_the_rest_is_parsed() {
        let body = r#"{"model": "m", "tools": [
            {"name": "a", "input_schema": {"type":"object", "properties": {"n": {"type": "number", "maximum": 1e2}}}},
            {"name": "b"},
            7,
            {"name": "c", "input_schema": null},
            {"name": "d", "input_schema": {"type": "object"}, "input_schema": {"required": []}}
        ], "max_tokens": 5}"#;
        let parsed = parse(body).unwrap();
        assert_eq!(
            texts(&parsed),
            [
                Some(r#"{"type":"object", "properties": {"n": {"type": "number", "maximum": 1e2}}}"#),
                None,
                None,
                None,
                Some(r#"{"required": []}"#)
            ]
        );
        // What is left is what a whole parse gives, less the schemas kept; a `null` one stays.
        assert_eq!(
            Value::Object(parsed.object),
            json!({"model": "m", "max_tokens": 5, "tools": [
                {"name": "a"}, {"name": "b"}, 7, {"name": "c", "input_schema": null}, {"name": "d"}
            ]})
        );
    }

    #[test]
    fn elements_after_the_last_schema_take_no_room() {
        let body = format!(r#"{{"tools": [{{"input_schema": {{}}}}{}]}}"#, ", {}".repeat(1000));
        let parsed = parse_object_keeping_schemas(body.as_bytes().into(), WRAPPED).unwrap();
        assert_eq!((parsed.schemas.own.len(), parsed.schemas.wrapped.len()), (1, 0));
    }

    #[test]
    fn a_list_named_twice_keeps_the_schemas_of_the_last() {
        let parsed =
            parse(r#"{"tools": [{"input_schema": {"a": 1}}], "tools": [{"x": 1}, {"input_schema": {"b": 2}}]}"#)
                .unwrap();
        assert_eq!(texts(&parsed), [None, Some(r#"{"b": 2}"#)]);
        assert_eq!(Value::Object(parsed.object), json!({"tools": [{"x": 1}, {}]}));
    }

    #[test]
    fn a_schema_named_null_after_text_is_absent_and_text_after_null_is_kept() {
        let mut parsed = parse(r#"{"tools": [{"input_schema": {"a": 1}, "input_schema": null}, {"input_schema": null, "input_schema": {"b": 2}}]}"#).unwrap();
        assert_eq!(texts(&parsed), [None, Some(r#"{"b": 2}"#)]);
        let Some(Value::Array(tools)) = parsed.object.get_mut("tools") else { panic!("tools") };
        let [first, second] = &mut tools[..] else { panic!("two tools") };
        let (first, second) = (first.as_object_mut().unwrap(), second.as_object_mut().unwrap());
        assert_eq!((first.get("input_schema"), second.get("input_schema")), (Some(&Value::Null), None));
        assert_eq!(parsed.schemas.take(Place::Element(0), first.get_mut("input_schema")), None);
        assert_eq!(
            parsed.schemas.take(Place::Element(1), second.get_mut("input_schema")),
            Some(json!({"b": 2}).into())
        );
    }

    #[test]
    fn the_schemas_of_an_elements_own_list_are_kept_by_place() {
        // Element 0: its own schema, and a list with a schema named twice, an element without
        // one, and one with a list of its own (not taken apart: one level of nesting only).
        // Element 1: a list named twice, the first longer; its last element's schema `null`.
        let body = r#"{"tools": [
            {"input_schema": {"a": 1}, "tools": [
                {"input_schema": {"b": 2}, "input_schema": {"b": 3}},
                {"x": 0},
                {"input_schema": {"c": 3}, "tools": [{"input_schema": {"deep": 1}}]}
            ]},
            {"tools": [{"input_schema": {"d": 4}}, {"input_schema": {"e": 5}}],
             "tools": [{"input_schema": {"f": 6}}, {"input_schema": {"g": 7}, "input_schema": null}]}
        ]}"#;
        let mut parsed = parse_object_keeping_schemas(body.as_bytes().into(), NESTED).unwrap();
        assert_eq!(
            Value::Object(parsed.object.clone()),
            json!({"tools": [
                {"tools": [{}, {"x": 0}, {"tools": [{"input_schema": {"deep": 1}}]}]},
                {"tools": [{}, {"input_schema": null}]}
            ]})
        );
        let places = [
            Place::Element(0),
            Place::Nested(0, 0),
            Place::Nested(0, 1),
            Place::Nested(0, 2),
            Place::Element(1),
            Place::Nested(1, 0),
            Place::Nested(1, 1),
        ];
        let kept = taken_texts(&mut parsed, &places);
        let text = |s: &str| Some(s.to_owned());
        assert_eq!(
            kept,
            [text(r#"{"a": 1}"#), text(r#"{"b": 3}"#), None, text(r#"{"c": 3}"#), None, text(r#"{"f": 6}"#), None]
        );
        // Taken once: a second take finds the member left in the element, here none.
        assert_eq!(parsed.schemas.take(Place::Nested(0, 0), None), None);
        // Without `nested`, an element's own list is an ordinary member.
        let flat = parse(body).unwrap();
        assert!(flat.schemas.nested.is_empty());
        assert_eq!(flat.object["tools"][0]["tools"][0], json!({"input_schema": {"b": 3}}));
    }

    #[test]
    fn a_wrappers_schema_is_kept_apart_from_the_elements_own() {
        // Element 0: a schema of its own and one in its wrapper. Element 1: a wrapper named
        // twice, the first with a schema. Element 2: a wrapper that is not an object. Element 3:
        // a wrapper in a wrapper (one level only).
        let body = r#"{"tools": [
            {"input_schema": {"own": 1}, "function": {"name": "f", "input_schema": {"wrapped": 1}}},
            {"function": {"input_schema": {"first": 1}}, "function": {"name": "g"}},
            {"function": [{"input_schema": {"x": 1}}], "input_schema": null},
            {"function": {"function": {"input_schema": {"deep": 1}}}}
        ]}"#;
        let mut parsed = parse_object_keeping_schemas(body.as_bytes().into(), WRAPPED).unwrap();
        assert_eq!(
            Value::Object(parsed.object.clone()),
            json!({"tools": [
                {"function": {"name": "f"}},
                {"function": {"name": "g"}},
                {"function": [{"input_schema": {"x": 1}}], "input_schema": null},
                {"function": {"function": {"input_schema": {"deep": 1}}}}
            ]})
        );
        let places = [
            Place::Element(0),
            Place::Wrapped(0),
            Place::Element(1),
            Place::Wrapped(1),
            Place::Element(2),
            Place::Wrapped(2),
            Place::Wrapped(3),
        ];
        let kept = taken_texts(&mut parsed, &places);
        let text = |s: &str| Some(s.to_owned());
        assert_eq!(kept, [text(r#"{"own": 1}"#), text(r#"{"wrapped": 1}"#), None, None, None, None, None]);
    }

    #[test]
    fn what_the_parse_refuses_gets_the_whole_parses_answer() {
        for body in ["{\"tools\": [{\"input_schema\": {\"a\": }}]}", "[1]", "{\"a\": 1} x", "{\"tools\": [\u{1}]}", ""]
        {
            let refused = parse(body).err().expect(body);
            assert_eq!(refused, parse_object(body.as_bytes()).unwrap_err(), "{body}");
        }
        // Bytes that are not UTF-8 are read as `from_slice` reads them.
        assert_eq!(
            parse_object_keeping_schemas(b"{\"a\": \"\xff\"}".into(), MESSAGES).err(),
            parse_object(b"{\"a\": \"\xff\"}").err()
        );
    }

    #[test]
    fn a_schema_too_deep_for_a_value_is_kept_and_says_so_when_read() {
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        let parsed = parse(&format!(r#"{{"tools": [{{"input_schema": {{"a": {deep}}}}}]}}"#)).unwrap();
        let schema = parsed.schemas.own[0].as_ref().unwrap();
        assert_eq!(schema.text(), format!(r#"{{"a": {deep}}}"#));
        assert!(schema.value().is_err());
        assert!(parse_object(format!(r#"{{"a": {deep}}}"#).as_bytes()).is_err(), "a Value is refused this deep");
    }

    #[test]
    fn schemas_compare_by_what_they_say() {
        let text = text_schema;
        assert_eq!(text(r#"{"a": [1, 2]}"#), Schema::from(json!({"a": [1, 2]})));
        assert_eq!(text(r#"{"b":1,"a":2}"#), text(r#"{"a": 2, "b": 1}"#));
        assert_ne!(text(r#"{"a": 1}"#), Schema::from(json!({"a": 2})));
        assert_eq!(format!("{:?}", text(r#"{"a": 1}"#)), format!("{:?}", json!({"a": 1})));
        assert!(text("{}").is_object() && !text("[]").is_object() && !text("\"{\"").is_object());
    }

    #[test]
    fn a_member_is_found_in_text_as_in_a_value() {
        let text = text_schema;
        for (schema, has_type) in [
            (r#"{"type":"object"}"#, true),
            ("{ \n \"type\" : 1}", true),
            (r#"{"properties": {}, "type": "object"}"#, true),
            (r#"{"typ\u0065": 1}"#, true),
            (r#"{"type\"": 1}"#, false),
            (r#"{"types": 1, "a": "type"}"#, false),
            (r#"{"properties": {"type": 1}}"#, false),
            (r#"[{"type": 1}]"#, false),
            (r#""{\"type\": 1}""#, false),
            ("{}", false),
        ] {
            assert_eq!(text(schema).has_member("type"), has_type, "{schema}");
            let value: Value = serde_json::from_str(schema).unwrap();
            assert_eq!(Schema::from(value).has_member("type"), has_type, "{schema}");
        }
    }

    /// JSON texts: compact or spaced, now and then broken or not JSON at all.
    fn json_text() -> BoxedStrategy<String> {
        let leaf = prop_oneof![
            Just("null".to_owned()),
            Just("true".to_owned()),
            "-?[0-9]{1,3}(\\.[0-9]{1,2})?(e[0-9])?".boxed(),
            crate::protocol::plain_json::strategies::string().boxed(),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            let space = prop_oneof![Just(""), Just(" "), Just("\n  ")];
            prop_oneof![
                (prop::collection::vec(inner.clone(), 0..4), space.clone())
                    .prop_map(|(items, sp)| format!("[{sp}{}]", items.join(&format!(",{sp}")))),
                (
                    prop::collection::vec(
                        (prop_oneof![Just("input_schema"), Just("tools"), Just("function"), Just("k")], inner),
                        0..4
                    ),
                    space
                )
                    .prop_map(|(members, sp)| {
                        let members: Vec<String> = members.iter().map(|(k, v)| format!("\"{k}\":{sp}{v}")).collect();
                        format!("{{{sp}{}}}", members.join(","))
                    }),
            ]
        })
        .boxed()
    }

    /// Request bodies around the shapes the parse takes over: tools lists of objects with
    /// schemas, named twice, not lists, with elements that are not objects; and broken ends.
    fn body() -> impl Strategy<Value = String> {
        // An object holding a schema: a wrapper, or an element of a nested list.
        let holder = || {
            prop::collection::vec(json_text(), 1..3)
                .prop_map(|v| format!("{{\"input_schema\": {}}}", v.join(", \"input_schema\": ")))
        };
        let value = prop_oneof![
            4 => json_text(),
            1 => holder(),
            1 => prop::collection::vec(holder(), 0..3).prop_map(|h| format!("[{}]", h.join(","))),
        ];
        let element = prop_oneof![
            4 => prop::collection::vec(
                (prop_oneof![Just("input_schema"), Just("name"), Just("tools"), Just("function")], value),
                0..4,
            )
            .prop_map(|members| {
                let members: Vec<String> = members.iter().map(|(k, v)| format!("\"{k}\": {v}")).collect();
                format!("{{{}}}", members.join(", "))
            }),
            1 => json_text(),
        ];
        let tools = prop_oneof![
            4 => prop::collection::vec(element, 0..4).prop_map(|e| format!("[{}]", e.join(", "))),
            1 => json_text(),
        ];
        let member = prop_oneof![
            3 => tools.prop_map(|t| format!("\"tools\": {t}")),
            1 => json_text().prop_map(|v| format!("\"model\": {v}")),
        ];
        let end = prop_oneof![8 => Just(""), 1 => Just(" "), 1 => Just("x"), 1 => Just("}")];
        (prop::collection::vec(member, 0..3), end).prop_map(|(m, end)| format!("{{{}}}{end}", m.join(", ")))
    }

    /// Every kept schema's text, by place.
    fn kept_texts(parsed: &ObjectWithSchemas) -> Vec<(Place, Option<String>)> {
        let text = |s: &Option<Schema>| s.as_ref().map(|s| s.text().into_owned());
        let own = parsed.schemas.own.iter().enumerate().map(|(i, s)| (Place::Element(i), text(s)));
        let inner = parsed.schemas.nested.iter().map(|((i, j), s)| (Place::Nested(*i, *j), text(s)));
        let wrapped = parsed.schemas.wrapped.iter().enumerate().map(|(i, s)| (Place::Wrapped(i), text(s)));
        own.chain(inner).chain(wrapped).collect()
    }

    #[test]
    fn a_shown_body_has_its_object_schemas_cut_out_before_the_parse() {
        let body = r#"{"model":"m","tools":[{"name":"a","input_schema":{"type":"object","properties":{"s":{"type":"string","description":"a \"quoted\" }"}}}},
            {"name":"b","input_schema":null},{"name":"c","input_schema" : [1]},{"name":"d","input_schema":{}}],"messages":[{"role":"user","content":"{\"input_schema\":1}"}]}"#;
        let cut = Cut::of(ShownObject::scan(body, "tools").unwrap(), MESSAGES).unwrap();
        assert_eq!(cut.placeholders.at.len(), 2, "the two object schemas");
        assert_eq!(
            cut.text,
            r#"{"model":"m","tools":[{"name":"a","input_schema":0},
            {"name":"b","input_schema":null},{"name":"c","input_schema" : [1]},{"name":"d","input_schema":0}],"messages":[{"role":"user","content":"{\"input_schema\":1}"}]}"#
        );
        let parsed = cut.parse(MESSAGES).unwrap();
        let whole = parse_capturing(body, MESSAGES, None).unwrap();
        assert_eq!(kept_texts(&parsed), kept_texts(&whole));
        assert_eq!(parsed.object, whole.object);
        assert_eq!(
            kept_texts(&parsed)[0].1.as_deref(),
            Some(r#"{"type":"object","properties":{"s":{"type":"string","description":"a \"quoted\" }"}}}"#)
        );
    }

    #[test]
    fn a_key_written_with_an_escape_is_left_to_the_parse() {
        let body = r#"{"tools":[{"input\u005fschema":{"a":1},"input_schema":{"b":2}}]}"#;
        assert!(Cut::of(ShownObject::scan(body, "tools").unwrap(), MESSAGES).is_none());
        let mut parsed = parse(body).unwrap();
        assert_eq!(taken_texts(&mut parsed, &[Place::Element(0)]), [Some(r#"{"b":2}"#.to_owned())]);
    }

    /// Text that is not JSON, said to be: the walk checks the punctuation around each value it
    /// steps over, so a placeholder always stands alone (`{}.5` would have become `0.5`), and the
    /// parse refuses the body.
    #[test]
    fn text_that_is_not_json_said_to_be_is_refused_all_the_same() {
        for body in [
            r#"{"tools":[{"input_schema":{}.5}]}"#,
            r#"{"tools":[{"input_schema" {}}]}"#,
            r#"{"tools":[{"input_schema":{}]}"#,
        ] {
            assert!(Cut::of(ShownObject::accepted_by_peek(body, None), MESSAGES).is_none(), "{body}");
            assert!(
                parse_object_keeping_schemas(RequestBody::shown(ShownObject::accepted_by_peek(body, None)), MESSAGES)
                    .is_err()
            );
        }
    }

    /// A placeholder the parse never meets as a schema sends the body to the parse of its own text.
    #[test]
    fn a_placeholder_the_parse_does_not_meet_undoes_the_cut() {
        let body = r#"{"tools":[{"input_schema":{"a":1}}]}"#;
        let mut cut = Cut::of(ShownObject::scan(body, "tools").unwrap(), MESSAGES).unwrap();
        cut.placeholders.at.push((cut.text.len() + 10, 0..1));
        assert!(cut.parse(MESSAGES).is_none());
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn a_member_is_found_in_any_text_as_in_its_value(text in json_text(), key in prop_oneof![Just("k"), Just("tools")]) {
            if let (Ok(raw), Ok(value)) = (SchemaText::parse(&text), serde_json::from_str::<Value>(&text)) {
                prop_assert_eq!(Schema::Text(raw).has_member(key), Schema::Value(value).has_member(key));
            }
        }

        /// A body cut by the walk parses to what its own text does: every placeholder met, the
        /// same object, the same schemas by place.
        #[test]
        fn a_cut_body_parses_as_its_own_text(body in body(), places in prop_oneof![Just(MESSAGES), Just(NESTED), Just(WRAPPED)]) {
            // The walk from the list the scan found, and from the body's start, cut the same.
            let Some(scanned) = ShownObject::scan(&body, "tools") else { return Ok(()) };
            let (from_list, from_start) = (Cut::of(scanned, places), Cut::of(ShownObject::accepted_by_peek(&body, None), places));
            prop_assert_eq!(
                from_list.as_ref().map(|cut| &cut.placeholders.at),
                from_start.as_ref().map(|cut| &cut.placeholders.at)
            );
            for cut in [from_list, from_start].into_iter().flatten() {
                // Both refuse what a `Value` cannot hold (a lone surrogate escape) outside a schema.
                match (cut.parse(places), parse_capturing(&body, places, None)) {
                    (Some(parsed), Some(whole)) => {
                        prop_assert_eq!(kept_texts(&parsed), kept_texts(&whole));
                        prop_assert_eq!(parsed.object, whole.object);
                    }
                    (parsed, whole) => prop_assert_eq!(parsed.is_some(), whole.is_some(), "{}", body),
                }
            }
        }

        /// For each kind of places: the kept schemas, put back where they were, give the whole parse's object; what one
        /// refuses, the other refuses with the same words. The one difference: a schema holding
        /// what a `Value` cannot (here a lone surrogate escape; also nesting deeper than 128 and
        /// numbers beyond `f64`) is valid JSON, kept as it is, where a whole parse refuses it.
        #[test]
        fn the_parse_agrees_with_a_whole_parse(body in body(), places in prop_oneof![Just(MESSAGES), Just(NESTED), Just(WRAPPED)]) {
            let whole = parse_object(body.as_bytes());
            match (parse_object_keeping_schemas(body.as_bytes().into(), places), whole) {
                (Err(refused), whole) => prop_assert_eq!(Err(refused), whole.map(|_| ())),
                (Ok(_), Err(_)) => prop_assert!(body.contains(r"\ud800"), "only a Value's limits refuse more"),
                (Ok(mut parsed), Ok(whole)) => {
                    prop_assert!(places.nested || parsed.schemas.nested.is_empty());
                    prop_assert!(places.wrapper.is_some() || parsed.schemas.wrapped.iter().all(Option::is_none));
                    let own = parsed.schemas.own.iter().enumerate().map(|(i, s)| (Place::Element(i), s));
                    let inner = parsed.schemas.nested.iter().map(|((i, j), s)| (Place::Nested(*i, *j), s));
                    let wrapped = parsed.schemas.wrapped.iter().enumerate().map(|(i, s)| (Place::Wrapped(i), s));
                    let mut kept = Vec::new();
                    for (place, schema) in own.chain(inner).chain(wrapped) {
                        if let Some(schema) = schema {
                            prop_assert!(body.contains(schema.text().as_ref()), "kept text is the client's");
                            kept.push((place, schema.value().unwrap().into_owned()));
                        }
                    }
                    for (place, value) in kept {
                        let tools = &mut parsed.object["tools"];
                        let holder = match place {
                            Place::Element(i) => &mut tools[i],
                            Place::Nested(i, j) => &mut tools[i]["tools"][j],
                            Place::Wrapped(i) => &mut tools[i]["function"],
                        };
                        holder.as_object_mut().unwrap().insert("input_schema".into(), value);
                    }
                    prop_assert_eq!(parsed.object, whole);
                }
            }
        }
    }
}
