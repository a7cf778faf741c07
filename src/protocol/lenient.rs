//! Tolerant JSON reading, the one toolkit every protocol module uses for what clients and
//! upstreams send: a field of an unexpected type reads as absent instead of failing the whole
//! body or event, and the small wire conventions the three APIs share (data URLs, media types,
//! tool-argument strings, integral counts) are decided once.
//!
//! Two styles of reading use it. The per-event observers (`stream_events`, `observe::usage`)
//! run on the request path for every event, so they parse into small typed structs whose
//! leaves are the lenient types below (`Lenient`, `List`, `Lax`, `NonEmpty`, `Count`, `Text`).
//! So does the Chat stream decoder, which reads every converted event. The other codecs
//! (`convert::*`) parse whole bodies into `serde_json::Value` and read them with the plain
//! functions ([`count`], [`parse_arguments`], ...).

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

// ---------------------------------------------------------------------------------------------
// Fields

/// A field of a JSON object, with `null` read as absent (clients send explicit nulls for unset
/// options).
pub fn get<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    object.get(key).filter(|v| !v.is_null())
}

/// A string field of a JSON object.
pub fn get_str<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    object.get(key).and_then(Value::as_str)
}

// A request decoder owns the body it parsed, so what it keeps (texts, tool inputs, schemas) is
// taken out of it and moved into the IR: a long history is never copied a second time.

/// [`get`], to read in place and take from.
pub fn get_mut<'a>(object: &'a mut Map<String, Value>, key: &str) -> Option<&'a mut Value> {
    object.get_mut(key).filter(|v| !v.is_null())
}

/// [`get`], taken out of the object (`null` is left behind).
pub fn take(object: &mut Map<String, Value>, key: &str) -> Option<Value> {
    object.get_mut(key).map(Value::take).filter(|v| !v.is_null())
}

/// A string taken out of a value; anything else is left where it is.
pub fn take_text(value: &mut Value) -> Option<String> {
    match value {
        Value::String(s) => Some(std::mem::take(s)),
        _ => None,
    }
}

/// [`get_str`], taken out of the object.
pub fn take_str(object: &mut Map<String, Value>, key: &str) -> Option<String> {
    object.get_mut(key).and_then(take_text)
}

// ---------------------------------------------------------------------------------------------
// Numbers

/// `f` as a token count or size: a finite, non-negative, integral float that fits a `u64`
/// (`1024.0` from a vendor that writes counts as floats); `None` otherwise.
///
/// The bound is `f < 2^64`, written `u64::MAX as f64` (which rounds up to exactly 2^64): every
/// integral float below it converts to `u64` exactly, and 2^64 itself does not fit (`as` would
/// saturate it to `u64::MAX`, silently reading a different number). A tighter bound such as
/// 2^53 would refuse large integral floats that are exact, for no gain: above 2^53 a JSON
/// integer written with a fraction or an exponent is already rounded by the parser, whatever
/// this function does. NaN and the infinities fail the comparisons or the fraction test.
pub fn whole_number(f: f64) -> Option<u64> {
    let whole = f >= 0.0 && f.fract() == 0.0 && f < u64::MAX as f64;
    // The checks above make the conversion exact (`-0.0` reads as 0).
    whole.then_some(f as u64)
}

/// A JSON value as a non-negative integer: an unsigned integer, or an integral float
/// ([`whole_number`]). Negative numbers, fractions, strings and the rest are `None`.
pub fn count(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| v.as_f64().and_then(whole_number))
}

/// A token count in a `Value`, read as [`Count`] reads one while parsing: a non-negative integer,
/// an integral float, or a numeric string (as some vendors send). Converters read usage with it,
/// so a converted answer reports the tokens its request record stores.
pub fn token_count(v: &Value) -> Option<u64> {
    count(v).or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
}

// ---------------------------------------------------------------------------------------------
// Text

/// `bytes` as text when they are valid UTF-8: the one check every body and streamed event on the
/// request path goes through. SIMD (`simdutf8`, AVX2 or SSE4.2 chosen at run time): a ~120-byte
/// event data line checks in a fraction of what `str::from_utf8`'s word-at-a-time loop takes.
/// The answer is the same as `str::from_utf8(bytes).ok()`, for any bytes.
pub fn utf8(bytes: &[u8]) -> Option<&str> {
    simdutf8::basic::from_utf8(bytes).ok()
}

/// At most `max_chars` characters of `s` (whole characters: the cut never splits one).
pub fn truncate(s: &str, max_chars: usize) -> &str {
    match s.char_indices().nth(max_chars) {
        Some((end, _)) => s.get(..end).unwrap_or(s),
        None => s,
    }
}

/// [`truncate`], with `…` appended when something was cut, for messages shown to people.
pub fn truncate_marked(s: &str, max_chars: usize) -> String {
    let kept = truncate(s, max_chars);
    if kept.len() == s.len() { kept.to_owned() } else { format!("{kept}…") }
}

/// A body that is not the error shape a codec knows, as the text of an error message: lossy
/// UTF-8, trimmed, at most `max_chars` characters ([`truncate_marked`]); `None` when nothing is
/// left, for the caller to say what happened instead.
pub fn body_text(body: &[u8], max_chars: usize) -> Option<String> {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    (!text.is_empty()).then(|| truncate_marked(text, max_chars))
}

// ---------------------------------------------------------------------------------------------
// Data URLs and media types

/// The media type assumed when a data URL or a file name does not say.
pub const UNKNOWN_MEDIA_TYPE: &str = "application/octet-stream";

/// `data:<media type>[;params];base64,<data>` → (media type, data); `None` when `s` is not a
/// base64 data URL. A data URL without a media type gets [`UNKNOWN_MEDIA_TYPE`]: every target
/// requires one, and an empty string is not a media type.
pub fn parse_data_url(s: &str) -> Option<(String, String)> {
    let rest = s.strip_prefix("data:")?;
    let (meta, data) = rest.split_once(',')?;
    let meta = meta.strip_suffix(";base64")?;
    let media = meta.split(';').next().unwrap_or_default().trim();
    let media = if media.is_empty() { UNKNOWN_MEDIA_TYPE } else { media };
    Some((media.to_owned(), data.to_owned()))
}

/// A base64 data URL.
pub fn data_url(media_type: &str, data: &str) -> String {
    format!("data:{media_type};base64,{data}")
}

/// The media type of a file sent by name only (OpenAI `file` parts carry a file name, Anthropic
/// documents need a media type). An unknown or missing extension is [`UNKNOWN_MEDIA_TYPE`]:
/// claiming PDF (or anything else) for bytes of unknown kind would make the target reject them
/// with a misleading error, or worse, read them as something they are not.
pub fn media_type_for_filename(name: &str) -> &'static str {
    let ext = name.rsplit_once('.').map(|(_, ext)| ext.to_ascii_lowercase());
    match ext.as_deref() {
        Some("pdf") => "application/pdf",
        Some("txt" | "md") => "text/plain",
        Some("json") => "application/json",
        Some("csv") => "text/csv",
        Some("html" | "htm") => "text/html",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("webp") => "image/webp",
        _ => UNKNOWN_MEDIA_TYPE,
    }
}

/// A file name for a document sent by media type only (the OpenAI APIs want a file name, and
/// read the kind of a file from its extension).
pub fn filename_for_media_type(media_type: &str) -> &'static str {
    match media_type {
        "application/pdf" => "document.pdf",
        "text/plain" => "document.txt",
        "text/markdown" => "document.md",
        "text/csv" => "document.csv",
        "text/html" => "document.html",
        "application/json" => "document.json",
        _ => "document",
    }
}

// ---------------------------------------------------------------------------------------------
// Tool arguments

/// Tool-call arguments (a JSON string in the OpenAI APIs) as JSON. An empty string means "no
/// arguments" (`{}`); arguments that do not parse also give `{}`: the raw string stays beside
/// it in `Part::ToolUse.arguments`, which the Chat and Responses encoders send back verbatim,
/// while an Anthropic target needs an object.
pub fn parse_arguments(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(Map::new());
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::Object(Map::new()))
}

/// The argument string to send for a tool call (the OpenAI APIs carry arguments as JSON text):
/// the raw string the source sent, byte for byte, so the model's own text survives; else the
/// compact JSON of `input`. No arguments at all (an empty string, no input) is `{}`: an empty
/// string is not JSON, and the APIs (and vendors' parsers) expect an object.
pub fn arguments_string(input: &Value, raw: Option<&str>) -> String {
    match raw {
        Some(raw) if raw.trim().is_empty() => "{}".to_owned(),
        Some(raw) => raw.to_owned(),
        None => match input {
            Value::Null => "{}".to_owned(),
            other => other.to_string(),
        },
    }
}

/// A tool call's input as a JSON object, for the formats that carry arguments as objects
/// (Anthropic `input`, Gemini `args`). `input` when it is a non-empty object (the decoder
/// parsed the arguments); otherwise the raw `arguments` decide (a Chat decoder gives
/// unparseable arguments as `input: {}` with the raw string kept); `{}` for no arguments at
/// all. `None` when the arguments are not a JSON object.
pub fn arguments_object(input: &Value, arguments: Option<&str>) -> Option<Value> {
    if let Value::Object(o) = input
        && (!o.is_empty() || arguments.is_none())
    {
        return Some(input.clone());
    }
    let parse_object = |s: &str| match serde_json::from_str::<Value>(s) {
        Ok(v @ Value::Object(_)) => Some(v),
        _ => None,
    };
    match (arguments, input) {
        (Some(a), _) if a.trim().is_empty() => Some(Value::Object(Map::new())),
        (Some(a), _) => parse_object(a),
        (None, Value::String(s)) => parse_object(s),
        (None, Value::Null) => Some(Value::Object(Map::new())),
        (None, _) => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Lenient leaves for typed parsing

/// Visitor methods for the scalar JSON types a lenient reader does not care about: each yields
/// `$none`. Arrays and objects are left to the reader (most drain them with [`drain_seq`] and
/// [`drain_map`]).
macro_rules! scalars_read_as {
    ($none:expr) => {
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok($none)
        }
    };
}
pub(crate) use scalars_read_as;

/// Skip the rest of an array.
pub fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

/// Skip the rest of an object.
pub fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

/// An object read as `T`; `null` or any other JSON type reads as `None` instead of failing.
#[derive(Debug)]
pub struct Lenient<T>(pub Option<T>);

impl<T> Default for Lenient<T> {
    fn default() -> Self {
        Lenient(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Lenient<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            scalars_read_as!(Lenient(None));
            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
                Lenient::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                drain_seq(seq).map(|()| Lenient(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(|t| Lenient(Some(t)))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// An array whose elements are read as `T`; an element that is not an object is `None` (kept, so
/// the array's length is the one sent), and anything but an array reads as empty.
#[derive(Debug)]
pub struct List<T>(pub Vec<Option<T>>);

impl<T> Default for List<T> {
    fn default() -> Self {
        List(Vec::new())
    }
}

impl<T> List<T> {
    /// The elements that are objects, in order.
    pub fn objects(&self) -> impl Iterator<Item = &T> {
        self.0.iter().flatten()
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for List<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = List<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array")
            }
            scalars_read_as!(List::default());
            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
                List::deserialize(d)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                drain_map(map).map(|()| List::default())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(16));
                while let Some(Lenient(item)) = seq.next_element::<Lenient<T>>()? {
                    items.push(item);
                }
                Ok(List(items))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// A scalar read leniently: a string (borrowed when unescaped), a non-negative integer (also an
/// integral float), or nothing useful.
#[derive(Debug, Default)]
pub enum Lax<'a> {
    #[default]
    Absent,
    Str(Cow<'a, str>),
    Uint(u64),
    Other,
}

impl Lax<'_> {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Lax::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Lax::Uint(n) => Some(*n),
            _ => None,
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Lax<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<Lax<'a>>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Lax<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Lax<'a>, E> {
                Ok(Lax::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Lax<'a>, E> {
                Ok(Lax::Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Lax<'a>, E> {
                Ok(Lax::Str(Cow::Owned(v)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Lax<'a>, E> {
                Ok(Lax::Uint(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Lax<'a>, E> {
                Ok(u64::try_from(v).map_or(Lax::Other, Lax::Uint))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Lax<'a>, E> {
                Ok(whole_number(v).map_or(Lax::Other, Lax::Uint))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Lax<'a>, E> {
                Ok(Lax::Other)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Lax<'a>, E> {
                Ok(Lax::Absent)
            }
            fn visit_none<E: de::Error>(self) -> Result<Lax<'a>, E> {
                Ok(Lax::Absent)
            }
            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Lax<'a>, D2::Error> {
                Lax::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Lax<'a>, A::Error> {
                drain_seq(seq).map(|()| Lax::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Lax<'a>, A::Error> {
                drain_map(map).map(|()| Lax::Other)
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// `serde_json::from_slice`, faster on text: a body that is valid UTF-8 as a whole (nearly every
/// one) is checked once, word at a time, and parsed as a `str`, so serde_json does not check
/// each string and key again (~100 instructions apiece, a dozen or more per body). Anything else
/// is parsed from the bytes, so the result, errors included, is exactly `from_slice`'s.
pub fn from_json<'a, T: Deserialize<'a>>(body: &'a [u8]) -> serde_json::Result<T> {
    match utf8(body) {
        Some(text) => serde_json::from_str(text),
        None => serde_json::from_slice(body),
    }
}

/// What a JSON body holds, for a reader that wants an object as `T`.
pub enum Object<T> {
    Read(T),
    /// Valid JSON that is not an object.
    NotObject(Value),
    /// Not JSON at all.
    Malformed(serde_json::Error),
}

/// How [`read_object`] may parse. `ViaValue` is for the tests that hold both ways to one answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parse {
    Direct,
    #[cfg(test)]
    ViaValue,
}

/// `body` read as the object `T` (a struct of lenient fields, borrowing from the body).
///
/// Straight from the text when it can (nearly always): a `serde_json::Value` first costs a map
/// and a string per key, about three times the parse. What a derived struct cannot read the way
/// a `Value` does — a key sent twice, which a struct refuses and a `Value` keeps the last of — is
/// read into a `Value` (kept in `slot`, for `T` to borrow) and `T` is read from that, so a caller
/// has one `T` either way and one logic.
pub fn read_object<'a, T: Deserialize<'a>>(text: &'a str, slot: &'a mut Option<Value>, parse: Parse) -> Object<T> {
    if parse == Parse::Direct
        && let Some(t) = read_direct(text)
    {
        return Object::Read(t);
    }
    read_through_value(text, slot)
}

/// The first way of [`read_object`]: `T` straight from the text, when the text is an object
/// that `T` reads. A reader that must know which way was taken calls the two halves itself.
pub fn read_direct<'a, T: Deserialize<'a>>(text: &'a str) -> Option<T> {
    // A derived struct would also read an array, field by position: only an object goes direct.
    if !is_object(text.as_bytes()) {
        return None;
    }
    serde_json::from_str::<T>(text).ok()
}

/// The second way of [`read_object`]: through a `Value`, which keeps the last of a repeated key.
pub fn read_through_value<'a, T: Deserialize<'a>>(text: &'a str, slot: &'a mut Option<Value>) -> Object<T> {
    read_via_value(serde_json::from_str(text), slot)
}

/// [`read_object`] for a body of bytes: one that is not UTF-8 is read as `from_slice` reads it.
pub fn read_object_bytes<'a, T: Deserialize<'a>>(
    body: &'a [u8],
    slot: &'a mut Option<Value>,
    parse: Parse,
) -> Object<T> {
    match utf8(body) {
        Some(text) => read_object(text, slot, parse),
        None => read_via_value(serde_json::from_slice(body), slot),
    }
}

fn read_via_value<'a, T: Deserialize<'a>>(parsed: serde_json::Result<Value>, slot: &'a mut Option<Value>) -> Object<T> {
    let value = match parsed {
        Ok(v) => v,
        Err(e) => return Object::Malformed(e),
    };
    if !value.is_object() {
        return Object::NotObject(value);
    }
    match T::deserialize(&*slot.insert(value)) {
        Ok(t) => Object::Read(t),
        Err(e) => Object::Malformed(e),
    }
}

/// Whether a JSON body is an object (its first non-blank byte is `{`): a derived struct would
/// also read an array, field by position, so a struct read is only meaningful on an object.
pub fn is_object(body: &[u8]) -> bool {
    body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// Whether a key holds anything but `null`; the value itself is skipped unread.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct NotNull(pub bool);

impl<'de> Deserialize<'de> for NotNull {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Option::<IgnoredAny>::deserialize(d).map(|v| NotNull(v.is_some()))
    }
}

/// Whether a value carries anything: false for null, `""`, `[]`, `{}`, `false`.
#[derive(Debug, Default, Clone, Copy)]
pub struct NonEmpty(pub bool);

impl<'de> Deserialize<'de> for NonEmpty {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = NonEmpty;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<NonEmpty, E> {
                Ok(NonEmpty(v))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<NonEmpty, E> {
                Ok(NonEmpty(true))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<NonEmpty, E> {
                Ok(NonEmpty(true))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<NonEmpty, E> {
                Ok(NonEmpty(true))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<NonEmpty, E> {
                Ok(NonEmpty(!v.is_empty()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<NonEmpty, E> {
                Ok(NonEmpty(false))
            }
            fn visit_none<E: de::Error>(self) -> Result<NonEmpty, E> {
                Ok(NonEmpty(false))
            }
            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<NonEmpty, D2::Error> {
                NonEmpty::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NonEmpty, A::Error> {
                let mut any = false;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    any = true;
                }
                Ok(NonEmpty(any))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<NonEmpty, A::Error> {
                let mut any = false;
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
                    any = true;
                }
                Ok(NonEmpty(any))
            }
        }
        d.deserialize_any(V)
    }
}

/// A value read as `T` reads it, together with two facts about the value as sent: whether it was
/// an array, and whether it carries anything ([`NonEmpty`]'s sense). A reader that wants both the
/// value and the facts (the Chat stream decoder, which also classifies the chunk) gets them from
/// one parse. An absent field is the default: `T`'s default, not an array, carrying nothing.
#[derive(Debug, Default)]
pub struct Observed<T> {
    pub value: T,
    pub array: bool,
    pub non_empty: bool,
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Observed<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::IntoDeserializer;
        use serde::de::value::{BorrowedStrDeserializer, SeqAccessDeserializer, StrDeserializer, UnitDeserializer};

        fn scalar<T>(value: T, non_empty: bool) -> Observed<T> {
            Observed { value, array: false, non_empty }
        }
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Observed<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(scalar(T::deserialize(IntoDeserializer::<E>::into_deserializer(v))?, v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(scalar(T::deserialize(IntoDeserializer::<E>::into_deserializer(v))?, true))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(scalar(T::deserialize(IntoDeserializer::<E>::into_deserializer(v))?, true))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(scalar(T::deserialize(IntoDeserializer::<E>::into_deserializer(v))?, true))
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(scalar(T::deserialize(BorrowedStrDeserializer::<E>::new(v))?, !v.is_empty()))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(scalar(T::deserialize(StrDeserializer::<E>::new(v))?, !v.is_empty()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(scalar(T::deserialize(UnitDeserializer::<E>::new())?, false))
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                self.visit_unit()
            }
            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
                Observed::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                let mut counted = CountedSeq { seq, count: 0 };
                let value = T::deserialize(SeqAccessDeserializer::new(&mut counted))?;
                Ok(Observed { value, array: true, non_empty: counted.count > 0 })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                let mut counted = CountedMap { map, count: 0 };
                let value = T::deserialize(MapAccessDeserializer::new(&mut counted))?;
                Ok(Observed { value, array: false, non_empty: counted.count > 0 })
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// A sequence that counts the elements read from it (every reader here reads them all).
struct CountedSeq<A> {
    seq: A,
    count: usize,
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for CountedSeq<A> {
    type Error = A::Error;
    fn next_element_seed<S: de::DeserializeSeed<'de>>(&mut self, seed: S) -> Result<Option<S::Value>, A::Error> {
        let element = self.seq.next_element_seed(seed)?;
        self.count += usize::from(element.is_some());
        Ok(element)
    }
    fn size_hint(&self) -> Option<usize> {
        self.seq.size_hint()
    }
}

/// A map that counts the keys read from it.
struct CountedMap<A> {
    map: A,
    count: usize,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for CountedMap<A> {
    type Error = A::Error;
    fn next_key_seed<K: de::DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, A::Error> {
        let key = self.map.next_key_seed(seed)?;
        self.count += usize::from(key.is_some());
        Ok(key)
    }
    fn next_value_seed<S: de::DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
    fn size_hint(&self) -> Option<usize> {
        self.map.size_hint()
    }
}

/// A token count: a non-negative integer, an integral float, or a numeric string (as some
/// vendors send); anything else is unknown.
#[derive(Clone, Copy, Debug, Default)]
pub struct Count(pub Option<u64>);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a token count")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Count, E> {
                Ok(Count(Some(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Count, E> {
                Ok(Count(u64::try_from(v).ok()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Count, E> {
                Ok(Count(whole_number(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Count, E> {
                Ok(Count(v.trim().parse().ok()))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Count, E> {
                Ok(Count(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Count, E> {
                Ok(Count(None))
            }
            fn visit_none<E: de::Error>(self) -> Result<Count, E> {
                Ok(Count(None))
            }
            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Count, D2::Error> {
                Count::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Count, A::Error> {
                drain_seq(seq).map(|()| Count(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Count, A::Error> {
                drain_map(map).map(|()| Count(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// A string, owned; anything else is absent.
#[derive(Clone, Debug, Default)]
pub struct Text(pub Option<String>);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Text, E> {
                Ok(Text(Some(v.to_string())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Text, E> {
                Ok(Text(Some(v)))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Text, E> {
                Ok(Text(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Text, E> {
                Ok(Text(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Text, E> {
                Ok(Text(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Text, E> {
                Ok(Text(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Text, E> {
                Ok(Text(None))
            }
            fn visit_none<E: de::Error>(self) -> Result<Text, E> {
                Ok(Text(None))
            }
            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Text, D2::Error> {
                Text::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Text, A::Error> {
                drain_seq(seq).map(|()| Text(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Text, A::Error> {
                drain_map(map).map(|()| Text(None))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn whole_number_edge_cases() {
        assert_eq!(whole_number(0.0), Some(0));
        assert_eq!(whole_number(-0.0), Some(0));
        assert_eq!(whole_number(1024.0), Some(1024));
        // Negative, fractional, not a number, infinite: not a count.
        assert_eq!(whole_number(-1.0), None);
        assert_eq!(whole_number(1.5), None);
        assert_eq!(whole_number(f64::NAN), None);
        assert_eq!(whole_number(f64::INFINITY), None);
        assert_eq!(whole_number(f64::NEG_INFINITY), None);
        // Huge: 1e19 fits a u64 (one copy refused everything above 9e15, two above 1.8e19),
        // 1e300 does not.
        assert_eq!(whole_number(1e19), Some(10_000_000_000_000_000_000));
        assert_eq!(whole_number(1e300), None);
        // `u64::MAX as f64` is 2^64, one past the largest u64: refused rather than saturated
        // to u64::MAX (as one copy did). The largest float below it converts exactly.
        assert_eq!(whole_number(u64::MAX as f64), None);
        let below = f64::from_bits((u64::MAX as f64).to_bits() - 1);
        assert_eq!(whole_number(below), Some(18_446_744_073_709_549_568));
    }

    #[test]
    fn count_reads_integers_and_integral_floats_only() {
        assert_eq!(count(&json!(7)), Some(7));
        assert_eq!(count(&json!(u64::MAX)), Some(u64::MAX));
        assert_eq!(count(&json!(7.0)), Some(7));
        assert_eq!(count(&json!(-7)), None);
        assert_eq!(count(&json!(7.5)), None);
        assert_eq!(count(&json!("7")), None);
        assert_eq!(count(&Value::Null), None);
    }

    #[test]
    fn truncate_counts_characters_and_never_splits_one() {
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("exactly", 7), "exactly");
        assert_eq!(truncate("abcdef", 3), "abc");
        assert_eq!(truncate("", 0), "");
        assert_eq!(truncate("abc", 0), "");
        // Characters, not bytes: two copies counted bytes, which cut a non-ASCII message to half
        // (or a third) of the length an ASCII one keeps.
        let accented = "\u{e9}".repeat(10);
        assert_eq!(truncate(&accented, 4), "\u{e9}".repeat(4));
        assert_eq!(truncate("a\u{1F4A5}b", 2), "a\u{1F4A5}");
        assert_eq!(truncate_marked("abcdef", 3), "abc…");
        assert_eq!(truncate_marked("abc", 3), "abc");
        assert_eq!(truncate_marked(&accented, 9).chars().count(), 10);
    }

    #[test]
    fn body_text_for_error_messages() {
        assert_eq!(body_text(b"  <html>Bad Gateway</html>\n", 100).as_deref(), Some("<html>Bad Gateway</html>"));
        assert_eq!(body_text(b"abcdef", 3).as_deref(), Some("abc…"));
        assert_eq!(body_text(b" \n ", 100), None);
        assert_eq!(body_text(b"\xff ok", 100).as_deref(), Some("\u{fffd} ok"));
    }

    #[test]
    fn data_urls() {
        assert_eq!(parse_data_url("data:image/png;base64,AAAA"), Some(("image/png".into(), "AAAA".into())));
        assert_eq!(
            parse_data_url("data:text/plain;charset=utf-8;base64,aGk="),
            Some(("text/plain".into(), "aGk=".into()))
        );
        assert_eq!(parse_data_url("data:image/png,AAAA"), None, "not base64");
        assert_eq!(parse_data_url("https://example.com/a.png"), None);
        assert_eq!(data_url("image/png", "AAAA"), "data:image/png;base64,AAAA");
    }

    #[test]
    fn data_url_without_a_media_type_is_octet_stream() {
        // One copy gave an empty media type, which no target accepts.
        assert_eq!(parse_data_url("data:;base64,AAAA"), Some((UNKNOWN_MEDIA_TYPE.into(), "AAAA".into())));
        assert_eq!(parse_data_url("data:base64,AAAA"), None);
    }

    #[test]
    fn json_file_is_application_json() {
        // One copy read `x.json` as application/octet-stream.
        assert_eq!(media_type_for_filename("x.json"), "application/json");
        assert_eq!(media_type_for_filename("DATA.JSON"), "application/json");
    }

    #[test]
    fn unknown_extension_is_octet_stream_not_pdf() {
        // One copy read anything it did not know (and a missing name) as application/pdf.
        assert_eq!(media_type_for_filename("x.docx"), UNKNOWN_MEDIA_TYPE);
        assert_eq!(media_type_for_filename("no-extension"), UNKNOWN_MEDIA_TYPE);
        assert_eq!(media_type_for_filename(""), UNKNOWN_MEDIA_TYPE);
    }

    #[test]
    fn media_types_both_copies_knew_are_kept() {
        for (name, media_type) in [
            ("a.pdf", "application/pdf"),
            ("a.txt", "text/plain"),
            ("a.md", "text/plain"),
            ("a.csv", "text/csv"),
            ("a.html", "text/html"),
            ("a.htm", "text/html"),
            ("a.png", "image/png"),
            ("a.JPG", "image/jpeg"),
            ("a.jpeg", "image/jpeg"),
            ("a.gif", "image/gif"),
            ("a.webp", "image/webp"),
        ] {
            assert_eq!(media_type_for_filename(name), media_type, "{name}");
        }
    }

    #[test]
    fn file_names_for_media_types_of_either_copy() {
        // One copy lacked markdown, the other JSON.
        assert_eq!(filename_for_media_type("text/markdown"), "document.md");
        assert_eq!(filename_for_media_type("application/json"), "document.json");
        assert_eq!(filename_for_media_type("application/pdf"), "document.pdf");
        assert_eq!(filename_for_media_type("text/plain"), "document.txt");
        assert_eq!(filename_for_media_type("text/csv"), "document.csv");
        assert_eq!(filename_for_media_type("text/html"), "document.html");
        assert_eq!(filename_for_media_type("application/x-unknown"), "document");
        // A name given for a media type reads back as that type (where the name says it).
        for media_type in ["application/pdf", "text/plain", "text/csv", "text/html", "application/json"] {
            assert_eq!(media_type_for_filename(filename_for_media_type(media_type)), media_type);
        }
    }

    #[test]
    fn tool_arguments() {
        assert_eq!(parse_arguments(r#"{"q":"x"}"#), json!({"q": "x"}));
        assert_eq!(parse_arguments(""), json!({}));
        assert_eq!(parse_arguments("  "), json!({}));
        assert_eq!(parse_arguments("{not json"), json!({}));
        assert_eq!(parse_arguments("[1]"), json!([1]));
    }

    #[test]
    fn argument_strings() {
        // The raw string, byte for byte.
        assert_eq!(arguments_string(&json!({}), Some(r#"{ "q": 1 }"#)), r#"{ "q": 1 }"#);
        assert_eq!(arguments_string(&json!({"q": 1}), None), r#"{"q":1}"#);
        // No arguments is `{}`: the Chat copy sent an empty string and, for no input, `null`.
        assert_eq!(arguments_string(&json!({}), Some("")), "{}");
        assert_eq!(arguments_string(&json!({}), Some("  ")), "{}");
        assert_eq!(arguments_string(&Value::Null, None), "{}");
        assert_eq!(parse_arguments(&arguments_string(&Value::Null, None)), json!({}));
    }

    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct Probe<'a> {
        #[serde(borrow)]
        s: Lax<'a>,
        n: Count,
        t: Text,
        e: NonEmpty,
        o: Lenient<Inner>,
        l: List<Inner>,
    }

    #[derive(Deserialize, Default)]
    struct Inner {
        #[serde(default)]
        k: Count,
    }

    fn probe(json: &str) -> Probe<'_> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn lenient_leaves_read_odd_types_as_absent() {
        let p = probe(r#"{"s":"x","n":"12","t":"m","e":[0],"o":{"k":3.0},"l":[{"k":1},2,null,{"k":"x"}]}"#);
        assert_eq!(p.s.as_str(), Some("x"));
        assert_eq!(p.n.0, Some(12));
        assert_eq!(p.t.0.as_deref(), Some("m"));
        assert!(p.e.0);
        assert_eq!(p.o.0.map(|i| i.k.0), Some(Some(3)));
        assert_eq!(p.l.0.len(), 4, "a list keeps the length sent");
        assert_eq!(p.l.objects().map(|i| i.k.0).collect::<Vec<_>>(), [Some(1), None]);

        let p = probe(r#"{"s":4.0,"n":-1,"t":7,"e":{},"o":[{"k":1}],"l":{"k":1}}"#);
        assert_eq!(p.s.as_u64(), Some(4));
        assert_eq!(p.n.0, None);
        assert_eq!(p.t.0, None);
        assert!(!p.e.0);
        assert!(p.o.0.is_none());
        assert!(p.l.0.is_empty());

        let p = probe(r#"{"s":{"a":1},"n":{"a":1},"t":["x"],"e":"","o":"object?"}"#);
        assert!(matches!(p.s, Lax::Other));
        assert_eq!(p.n.0, None);
        assert_eq!(p.t.0, None);
        assert!(!p.e.0);
        assert!(p.o.0.is_none());

        let p = probe(r#"{"s":null,"n":null,"t":null,"e":null,"o":null}"#);
        assert!(matches!(p.s, Lax::Absent));
        assert!(p.o.0.is_none());
    }

    /// An observed value reads as its type reads it, and tells whether the value was an array
    /// and whether it carries anything exactly as `NonEmpty` does, for every kind of JSON value,
    /// read from the text or from a `Value`.
    #[test]
    fn an_observed_value_reads_as_its_type_and_tells_what_non_empty_tells() {
        let samples = [
            "null",
            "true",
            "false",
            "0",
            "-3",
            "2.5",
            r#""""#,
            r#""x""#,
            r#""\u0041""#,
            "[]",
            "[null]",
            "[1,2]",
            "{}",
            r#"{"k":1}"#,
            r#"{"k":null,"j":"x"}"#,
            r#"[{"k":1},2]"#,
        ];
        for text in samples {
            let value: Value = serde_json::from_str(text).unwrap();
            let non_empty = serde_json::from_str::<NonEmpty>(text).unwrap().0;
            let list = serde_json::from_str::<Observed<List<Inner>>>(text).unwrap();
            assert_eq!((list.array, list.non_empty), (value.is_array(), non_empty), "{text}");
            let plain = serde_json::from_str::<List<Inner>>(text).unwrap();
            assert_eq!(list.value.0.len(), plain.0.len(), "{text}");
            let object = serde_json::from_str::<Observed<Lenient<Inner>>>(text).unwrap();
            assert_eq!(object.non_empty, non_empty, "{text}");
            let plain = serde_json::from_str::<Lenient<Inner>>(text).unwrap();
            assert_eq!(object.value.0.map(|i| i.k.0), plain.0.map(|i| i.k.0), "{text}");
            let scalar = serde_json::from_str::<Observed<Lax<'_>>>(text).unwrap();
            assert_eq!(format!("{:?}", scalar.value), format!("{:?}", serde_json::from_str::<Lax<'_>>(text).unwrap()));
            let via_value = Observed::<Lax<'_>>::deserialize(&value).unwrap();
            assert_eq!((via_value.array, via_value.non_empty), (value.is_array(), non_empty), "{text}");
        }
        let absent: Observed<List<Inner>> = Observed::default();
        assert!(!absent.array && !absent.non_empty);
    }

    use proptest::strategy::Strategy as _;

    proptest::proptest! {
        /// The SIMD check says what the standard library says, for any bytes (mostly text, with
        /// stray bytes and cut sequences mixed in) and at every length around its block sizes.
        #[test]
        #[allow(clippy::indexing_slicing)]
        fn utf8_agrees_with_std(
            pieces in proptest::collection::vec(proptest::prop_oneof![
                "[a-z \"{}:,]{0,40}".prop_map(String::into_bytes),
                "\\PC{0,8}".prop_map(String::into_bytes),
                proptest::collection::vec(proptest::num::u8::ANY, 0..4),
            ], 0..12),
        ) {
            let bytes = pieces.concat();
            for end in 0..=bytes.len().min(80) {
                let b = &bytes[..end];
                proptest::prop_assert_eq!(utf8(b), std::str::from_utf8(b).ok());
            }
            proptest::prop_assert_eq!(utf8(&bytes), std::str::from_utf8(&bytes).ok());
        }
    }

    /// A body read through its text is read exactly as from its bytes: the same value, or the
    /// same error (message and position), whatever bytes it holds.
    fn same_as_from_slice(body: &[u8]) {
        let fast = from_json::<Value>(body).map_err(|e| e.to_string());
        let plain = serde_json::from_slice::<Value>(body).map_err(|e| e.to_string());
        assert_eq!(fast, plain, "{}", String::from_utf8_lossy(body));
    }

    #[test]
    fn from_json_reads_as_from_slice() {
        let bodies: &[&[u8]] = &[
            br#"{"model":"m","messages":[{"role":"user","content":"h\u00e9llo \ud83d\ude00"}]}"#,
            "{\"k\u{e9}y\":\"v\u{1F600}\"}".as_bytes(),
            b"{\"a\":\"\xff\"}",
            b"{\"\xc3\":1}",
            b"{\"a\":1,}",
            b"{\"a\":\"unterminated",
            b"\xef\xbb\xbf{}",
            b"",
            b"[1,2]",
            b"{\"a\":\"\x01\"}",
        ];
        for body in bodies {
            same_as_from_slice(body);
        }
    }

    proptest::proptest! {
        #[test]
        fn from_json_reads_any_bytes_as_from_slice(
            pieces in proptest::collection::vec(proptest::sample::select(vec![
                &b"{"[..], b"}", b"[", b"]", b"\"", b":", b",", b"\\", b"u00e9", b"1", b"-2.5e3", b"null",
                b"true", b" ", b"\n", b"\xc3\xa9", b"\xff", b"\xe2\x82", b"\xf0\x9f\x98\x80", b"key", b"\x01",
            ]), 0..24),
        ) {
            let body: Vec<u8> = pieces.concat();
            same_as_from_slice(&body);
        }
    }
}
