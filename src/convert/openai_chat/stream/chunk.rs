//! A Chat stream chunk as the decoder reads it: the few fields it uses, borrowed from the event's
//! text and read leniently (a field of an unexpected type is absent, as `lenient::get_str` and
//! `lenient::count` read it from a `Value`).
//!
//! Every converted event is one of these, so it is parsed straight from the text: building a
//! `serde_json::Value` first (a map and a string per key) cost about three times as much. What a
//! derived struct cannot read the way a `Value` does — an object with a key twice, of which a
//! `Value` keeps the last — goes through a `Value` and is then read from it by the same struct, so
//! both ways give one `Chunk` and the decoder has one logic.

use serde::Deserialize;
use serde_json::Value;

use super::super::Obj;
use crate::protocol::lenient::{Lax, Lenient, List, NotNull, is_object};

#[derive(Debug, Default, Deserialize)]
pub(super) struct Chunk<'a> {
    #[serde(borrow, default)]
    pub id: Lax<'a>,
    #[serde(borrow, default)]
    pub object: Lax<'a>,
    #[serde(rename = "type", borrow, default)]
    pub kind: Lax<'a>,
    #[serde(borrow, default)]
    pub model: Lax<'a>,
    #[serde(borrow, default)]
    pub created: Lax<'a>,
    #[serde(default)]
    pub error: NotNull,
    #[serde(borrow, default)]
    pub choices: List<Choice<'a>>,
    /// Once a stream at most, so read whole for `decode_usage`.
    #[serde(default)]
    pub usage: Lenient<Obj>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct Choice<'a> {
    #[serde(borrow, default)]
    pub index: Lax<'a>,
    #[serde(borrow, default)]
    pub delta: Lenient<Delta<'a>>,
    #[serde(borrow, default)]
    pub finish_reason: Lax<'a>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct Delta<'a> {
    #[serde(borrow, default)]
    pub content: Lax<'a>,
    #[serde(borrow, default)]
    pub refusal: Lax<'a>,
    #[serde(borrow, default)]
    pub reasoning_content: Lax<'a>,
    #[serde(borrow, default)]
    pub reasoning: Lax<'a>,
    #[serde(borrow, default)]
    pub tool_calls: List<ToolCall<'a>>,
    /// The legacy single call (no `index`, no `id`).
    #[serde(borrow, default)]
    pub function_call: Lenient<Function<'a>>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct ToolCall<'a> {
    #[serde(borrow, default)]
    pub index: Lax<'a>,
    #[serde(borrow, default)]
    pub id: Lax<'a>,
    #[serde(borrow, default)]
    pub function: Lenient<Function<'a>>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct Function<'a> {
    #[serde(borrow, default)]
    pub name: Lax<'a>,
    #[serde(borrow, default)]
    pub arguments: Lax<'a>,
}

/// What an event's data is.
pub(super) enum Read<'a> {
    Chunk(Chunk<'a>),
    /// Valid JSON that is not an object (Gemini's OpenAI layer sends errors as an array).
    NotObject(Value),
    /// Not JSON.
    Malformed,
}

/// How `read` may parse: `Direct` from the text when it can; `ViaValue` always through a `Value`
/// (the fallback, chosen directly by the tests that hold both ways to one answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Parse {
    Direct,
    #[cfg(test)]
    ViaValue,
}

/// `data` as a chunk; `slot` keeps the `Value` a fallback parse builds, for the chunk to borrow.
pub(super) fn read<'a>(data: &'a str, slot: &'a mut Option<Value>, parse: Parse) -> Read<'a> {
    // A derived struct would also read an array, field by position: only an object goes direct.
    if parse == Parse::Direct
        && is_object(data.as_bytes())
        && let Ok(chunk) = serde_json::from_str::<Chunk<'a>>(data)
    {
        return Read::Chunk(chunk);
    }
    let value: Value = match serde_json::from_str(data) {
        Ok(v) => v,
        Err(_) => return Read::Malformed,
    };
    if !value.is_object() {
        return Read::NotObject(value);
    }
    let value = slot.insert(value);
    // Every field is lenient, so reading an object's `Value` cannot fail.
    Chunk::deserialize(&*value).map_or(Read::Malformed, Read::Chunk)
}
