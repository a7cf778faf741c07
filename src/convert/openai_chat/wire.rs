//! What the decoders read of a Chat upstream's answer (`chat.completion`) and stream chunks
//! (`chat.completion.chunk`): only the fields they use, borrowed from the body and read
//! leniently (a field of an unexpected type is absent, as `lenient::get_str` and
//! `lenient::count` read it from a `Value`). Both are read with `lenient::read_object`, straight
//! from the text: every converted answer and event is one of these.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::value::SeqAccessDeserializer;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::protocol::lenient::{Count, Lax, Lenient, List, NonEmpty, NotNull, Observed, drain_map};

// ---------------------------------------------------------------------------------------------
// The answer

#[derive(Debug, Default, Deserialize)]
pub(super) struct Completion<'a> {
    #[serde(borrow, default)]
    pub id: Lax<'a>,
    #[serde(borrow, default)]
    pub model: Lax<'a>,
    #[serde(borrow, default)]
    pub created: Lax<'a>,
    #[serde(default)]
    pub error: NotNull,
    #[serde(borrow, default)]
    pub choices: List<CompletionChoice<'a>>,
    #[serde(default)]
    pub usage: Lenient<ChatUsage>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct CompletionChoice<'a> {
    #[serde(borrow, default)]
    pub index: Lax<'a>,
    #[serde(borrow, default)]
    pub message: Lenient<Message<'a>>,
    #[serde(borrow, default)]
    pub finish_reason: Lax<'a>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct Message<'a> {
    #[serde(borrow, default)]
    pub content: Content<'a>,
    #[serde(borrow, default)]
    pub refusal: Lax<'a>,
    #[serde(borrow, default)]
    pub reasoning_content: Lax<'a>,
    #[serde(borrow, default)]
    pub reasoning: Lax<'a>,
    #[serde(borrow, default)]
    pub tool_calls: List<MessageToolCall<'a>>,
    /// The legacy single call.
    #[serde(borrow, default)]
    pub function_call: Lenient<Function<'a>>,
}

/// A message's `content`: a string, or (Mistral) an array of parts.
#[derive(Debug, Default)]
pub(super) enum Content<'a> {
    #[default]
    Other,
    Text(Cow<'a, str>),
    Parts(List<ContentPart<'a>>),
}

impl<'de: 'a, 'a> Deserialize<'de> for Content<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<Content<'a>>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Content<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an array of parts")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Content<'a>, E> {
                Ok(Content::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Content<'a>, E> {
                Ok(Content::Text(Cow::Owned(v.to_owned())))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Content<'a>, E> {
                Ok(Content::Other)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Content<'a>, E> {
                Ok(Content::Other)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Content<'a>, E> {
                Ok(Content::Other)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Content<'a>, E> {
                Ok(Content::Other)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Content<'a>, E> {
                Ok(Content::Other)
            }
            fn visit_none<E: de::Error>(self) -> Result<Content<'a>, E> {
                Ok(Content::Other)
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Content<'a>, E> {
                Ok(Content::Text(Cow::Owned(v)))
            }
            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Content<'a>, D2::Error> {
                Content::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Content<'a>, A::Error> {
                List::deserialize(SeqAccessDeserializer::new(seq)).map(Content::Parts)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Content<'a>, A::Error> {
                drain_map(map).map(|()| Content::Other)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct ContentPart<'a> {
    #[serde(rename = "type", borrow, default)]
    pub kind: Lax<'a>,
    #[serde(borrow, default)]
    pub text: Lax<'a>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct MessageToolCall<'a> {
    #[serde(borrow, default)]
    pub id: Lax<'a>,
    #[serde(borrow, default)]
    pub function: Lenient<MessageFunction<'a>>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct MessageFunction<'a> {
    #[serde(borrow, default)]
    pub name: Lax<'a>,
    /// Nearly always a string of JSON; a vendor that sends the object itself is taken at its word.
    #[serde(default)]
    pub arguments: Option<Value>,
}

// ---------------------------------------------------------------------------------------------
// Usage, of an answer or a stream's usage chunk (read by `response::decode_usage`). Counts are
// read as the request records read them (`lenient::Count`: numeric strings too), so a converted
// answer reports the tokens its record stores.

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ChatUsage {
    pub prompt_tokens: Count,
    pub completion_tokens: Count,
    /// DeepSeek's cache reads.
    pub prompt_cache_hit_tokens: Count,
    /// DeepSeek: `prompt_tokens` = hit + miss; the input when `prompt_tokens` is absent.
    pub prompt_cache_miss_tokens: Count,
    /// Kimi's cache reads.
    pub cached_tokens: Count,
    pub prompt_tokens_details: Lenient<PromptTokensDetails>,
    pub completion_tokens_details: Lenient<CompletionTokensDetails>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct PromptTokensDetails {
    pub cached_tokens: Count,
    pub cache_write_tokens: Count,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct CompletionTokensDetails {
    pub reasoning_tokens: Count,
}

// ---------------------------------------------------------------------------------------------
// Stream chunks

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
    /// Observed: whether `choices` was an array at all is one of the classifier's facts.
    #[serde(borrow, default)]
    pub choices: Observed<List<Choice<'a>>>,
    /// Boxed: it comes once a stream, and inline it would make every chunk ~150 bytes larger.
    /// Observed: whether it carries anything is one of the classifier's facts.
    #[serde(default)]
    pub usage: Observed<Lenient<Box<ChatUsage>>>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct Choice<'a> {
    #[serde(borrow, default)]
    pub index: Lax<'a>,
    #[serde(borrow, default)]
    pub delta: Lenient<Delta<'a>>,
    #[serde(borrow, default)]
    pub finish_reason: Lax<'a>,
    /// Legacy completions-style chunks carry `text`, some providers a whole `message`: the
    /// decoder converts neither, but either makes the chunk content for the classifier.
    #[serde(default)]
    pub text: NonEmpty,
    #[serde(default)]
    pub message: NonEmpty,
}

/// A choice's `delta`. Read by hand rather than derived so that the same pass also answers the
/// classifier's question: does any key other than `role` carry something (`has_content`)?
#[derive(Debug, Default)]
pub(super) struct Delta<'a> {
    pub content: Lax<'a>,
    pub refusal: Lax<'a>,
    pub reasoning_content: Lax<'a>,
    pub reasoning: Lax<'a>,
    pub tool_calls: List<ToolCall<'a>>,
    /// The legacy single call (no `index`, no `id`).
    pub function_call: Lenient<Function<'a>>,
    pub has_content: bool,
}

/// The keys [`Delta`] reads into its fields; its reader marks each one seen by its index here.
const DELTA_KEYS: [&str; 6] = ["content", "refusal", "reasoning_content", "reasoning", "tool_calls", "function_call"];

impl<'de: 'a, 'a> Deserialize<'de> for Delta<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<Delta<'a>>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Delta<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a delta object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Delta<'a>, A::Error> {
                let mut delta = Delta::default();
                // A key sent twice is refused, as a derived struct refuses it: the reader then
                // goes through a `Value`, which keeps the last.
                let mut seen = [false; DELTA_KEYS.len()];
                while let Some(key) = map.next_key::<Lax<'de>>()? {
                    let Some(at) = key.as_str().and_then(|k| DELTA_KEYS.iter().position(|known| *known == k)) else {
                        if key.as_str() == Some("role") {
                            map.next_value::<IgnoredAny>()?;
                        } else {
                            delta.has_content |= map.next_value::<NonEmpty>()?.0;
                        }
                        continue;
                    };
                    if std::mem::replace(&mut seen[at], true) {
                        return Err(de::Error::duplicate_field(DELTA_KEYS[at]));
                    }
                    let non_empty = match at {
                        0..=3 => {
                            let text = map.next_value::<Observed<Lax<'a>>>()?;
                            let slot = match at {
                                0 => &mut delta.content,
                                1 => &mut delta.refusal,
                                2 => &mut delta.reasoning_content,
                                _ => &mut delta.reasoning,
                            };
                            *slot = text.value;
                            text.non_empty
                        }
                        4 => {
                            let calls = map.next_value::<Observed<List<ToolCall<'a>>>>()?;
                            delta.tool_calls = calls.value;
                            calls.non_empty
                        }
                        _ => {
                            let call = map.next_value::<Observed<Lenient<Function<'a>>>>()?;
                            delta.function_call = call.value;
                            call.non_empty
                        }
                    };
                    delta.has_content |= non_empty;
                }
                Ok(delta)
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
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
