//! Token usage from the upstream's own fields, for all three protocols, streaming and not,
//! normalised to [`Tokens`]: `input` EXCLUDES cached input (read and written), whatever the
//! protocol's own convention.
//!
//! | format | where | input | cache read | cache write | output |
//! | --- | --- | --- | --- | --- | --- |
//! | Anthropic | body `usage`; stream `message_start.message.usage` then `message_delta.usage` | `input_tokens` | `cache_read_input_tokens` | `cache_creation_input_tokens` | `output_tokens` |
//! | Chat | body `usage`; stream: the usage chunk (`choices: []`) or usage on the finish chunk | `prompt_tokens` − read − write (DeepSeek: `prompt_cache_miss_tokens` when `prompt_tokens` is absent) | `prompt_tokens_details.cached_tokens`, else DeepSeek `prompt_cache_hit_tokens`, else Kimi top-level `cached_tokens` | `prompt_tokens_details.cache_write_tokens` | `completion_tokens` |
//! | Responses | body `usage`; stream `response.completed` / `.incomplete` / `.failed` | `input_tokens` − read − write | `input_tokens_details.cached_tokens` (or `cache_read_tokens`) | `input_tokens_details.cache_write_tokens` | `output_tokens` |
//! | Gemini | body and every stream chunk `usageMetadata` (the last one has the totals; snake_case keys too) | `promptTokenCount` − read + `toolUsePromptTokenCount` | `cachedContentTokenCount` | — | `candidatesTokenCount` + `thoughtsTokenCount` (Gemini bills thoughts as output) |
//!
//! The subtraction matches the converters (`convert::openai_chat`, `convert::responses`), which
//! count cache writes inside OpenAI's prompt total, so converted and native traffic agree; the
//! converters also read each count as [`Count`] does (`lenient::token_count`), and a property test
//! (`convert::tests::a_converted_answer_reports_the_tokens_its_record_stores`) holds the two
//! readings of every format's answer to the same tokens.
//!
//! Unknown is `None`, never 0: a stream cut before its usage event reports nothing. Anthropic's
//! `message_start` carries the real input side but only a placeholder `output_tokens` (1), so
//! output stays unknown until `message_delta` arrives; a stream cut between the two reports its
//! input and cache tokens with output unknown.
//!
//! Cost: [`StreamUsage::observe`] runs for every event of every stream on the request path.
//! Events that cannot carry usage are skipped by their name or by a substring check for a
//! `"usage": {` key (a quoted key can only occur structurally: inside a JSON string its quotes
//! are escaped) before anything is parsed, and parsing goes into small typed structs that skip
//! unknown fields and read a field of an unexpected type as absent. A Messages, Chat or Responses
//! body (or event) of the usual shape is matched instead (`plain_anthropic`, `plain_chat`,
//! `plain_responses`, `plain_gemini`), each held by property tests to read what the parse reads.

use memchr::memmem::Finder;
use serde::Deserialize;

use super::record::Tokens;
use crate::protocol::Format;
use crate::protocol::finder::finder;
use crate::protocol::lenient::{Count, Lenient, NotNull, Text};
use crate::protocol::sse::SseEvent;
use crate::protocol::stream_events::{PlainTextChunk, plain_text_chunk};

mod plain_anthropic;
mod plain_chat;
mod plain_gemini;
mod plain_responses;
use plain_anthropic::{EventRead, MessageRead, plain_anthropic_answer, plain_anthropic_event};
use plain_chat::{plain_chat_answer, plain_chat_body};
use plain_gemini::{plain_gemini_answer, plain_gemini_body, text_chunk_read};
use plain_responses::{plain_responses_answer, plain_responses_event};

/// What the matchers' property tests share: bodies made of an API's members, and the comparison
/// of a match with the parse.
#[cfg(test)]
mod plain_tests {
    use super::AnswerRead;
    use crate::protocol::plain_json::strategies::{one_of, respace, spacing};
    use proptest::prelude::*;

    /// An object of `members` in the API's order, shuffled (as a relay that sorts keys writes
    /// them) or with some left out, its ends as written or changed, compact or spaced.
    pub fn object_of(members: impl Fn() -> BoxedStrategy<Vec<String>>) -> impl Strategy<Value = String> {
        let members = prop_oneof![
            3 => members(),
            2 => members().prop_shuffle(),
            1 => members().prop_flat_map(|m| prop::sample::subsequence(m.clone(), 0..=m.len())),
        ];
        let ends = (one_of(&["{", "{ ", " {", "[{"]), one_of(&["}", "}\n", "} ", "", "}}", "},", "} x"]));
        (members, ends, spacing()).prop_map(|(members, (open, close), spacing)| {
            respace(&format!("{open}{}{close}", members.join(",")), spacing)
        })
    }

    /// Whether a match read what the parse read.
    pub fn same(a: &AnswerRead, b: &AnswerRead) -> bool {
        a.tokens == b.tokens && a.model == b.model && a.envelope == b.envelope
    }
}

/// Usage and the answering model from a complete (non-streaming) answer body. A body that is
/// not the format's answer (an error, not JSON) gives unknown tokens and no model.
pub fn from_body(format: Format, body: &[u8]) -> (Tokens, Option<String>) {
    let read = read_answer(format, body);
    (read.tokens, read.model)
}

/// What one read of a non-streaming answer gives: its usage and model, and the top-level keys
/// that say whether it is an answer at all (`proxy::outcome::not_an_answer` decides).
#[derive(Debug, Default)]
pub struct AnswerRead {
    pub tokens: Tokens,
    pub model: Option<String>,
    /// `None` unless the body read as one JSON object (anything else is left to a full reading).
    pub envelope: Option<Envelope>,
}

/// An answer's top-level `error` (present and not `null`) and `status`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Envelope {
    pub error: bool,
    pub status: Option<String>,
}

/// Read a non-streaming answer once (`format` = the upstream's format): a body that is not
/// JSON, or not an object, gives no usage and no envelope.
pub fn read_answer(format: Format, body: &[u8]) -> AnswerRead {
    if !crate::protocol::lenient::is_object(body) {
        return AnswerRead::default();
    }
    match format {
        Format::Anthropic => matched_or_parsed::<AnthropicMessage>(body, plain_anthropic_answer),
        Format::Openai => matched_or_parsed::<ChatBody>(body, plain_chat_answer),
        Format::Responses => matched_or_parsed::<ResponseObject>(body, plain_responses_answer),
        Format::Gemini => matched_or_parsed::<GeminiBody>(body, plain_gemini_answer),
    }
}

/// An answer of the usual shape read by `matched`, any other parsed as `T`; its UTF-8 is checked
/// once, for the match and for the parse it may fall back to.
fn matched_or_parsed<'a, T: Deserialize<'a> + Answer>(
    body: &'a [u8],
    matched: fn(&'a str) -> Option<AnswerRead>,
) -> AnswerRead {
    match crate::protocol::lenient::utf8(body) {
        Some(text) => matched(text).unwrap_or_else(|| read(serde_json::from_str::<T>(text))),
        None => parsed::<T>(body),
    }
}

/// An answer read by parsing it as the format's answer body `T`.
fn parsed<'a, T: Deserialize<'a> + Answer>(body: &'a [u8]) -> AnswerRead {
    read(crate::protocol::lenient::from_json::<T>(body))
}

/// What a parse of an answer gives: nothing when the body is not the format's answer.
fn read<T: Answer>(parse: serde_json::Result<T>) -> AnswerRead {
    parse.map(Answer::into_read).unwrap_or_default()
}

/// The answer body of each format, as one read sees it.
trait Answer {
    fn into_read(self) -> AnswerRead;
}

macro_rules! answer_body {
    ($body:ty) => {
        impl Answer for $body {
            fn into_read(self) -> AnswerRead {
                AnswerRead {
                    tokens: self.usage.0.map(|u| u.tokens()).unwrap_or_default(),
                    model: model_name(self.model),
                    envelope: Some(Envelope { error: self.error.0, status: self.status.0 }),
                }
            }
        }
    };
}
answer_body!(AnthropicMessage);
answer_body!(ChatBody);
answer_body!(ResponseObject);

impl Answer for GeminiBody {
    fn into_read(mut self) -> AnswerRead {
        AnswerRead {
            tokens: self.usage().map(GeminiUsage::tokens).unwrap_or_default(),
            model: model_name(self.model()),
            envelope: Some(Envelope { error: self.error.0, status: self.status.0 }),
        }
    }
}

/// A Chat stream's model is on every chunk; it is read from the first chunks only, so a vendor
/// that never names its model does not cost a parse per chunk for the whole stream.
const MODEL_TRIES: u8 = 4;

/// Usage and model collected from a stream's events as they pass. Later numbers win field by
/// field (a field an event omits keeps its earlier value).
#[derive(Clone, Debug, Default)]
pub struct StreamUsage {
    tokens: Tokens,
    model: Option<String>,
    /// Parses spent looking for the model alone (Chat, Responses).
    model_tries: u8,
}

impl StreamUsage {
    /// Look at one event of the upstream's stream (`format` = the upstream's format).
    pub fn observe(&mut self, format: Format, event: &SseEvent<'_>) {
        match format {
            Format::Anthropic => self.observe_anthropic(event),
            Format::Openai => self.observe_chat(event),
            Format::Responses => self.observe_responses(event),
            Format::Gemini => self.observe_gemini(event),
        }
    }

    pub fn tokens(&self) -> Tokens {
        self.tokens
    }

    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    fn observe_anthropic(&mut self, ev: &SseEvent<'_>) {
        match ev.event {
            Some("message_start" | "message_delta") => {}
            // content_block_*, ping, message_stop, error: never usage.
            Some(_) => return,
            // Some relays drop event names; both usage events have a usage object.
            None if !has_usage_object(ev.data) => return,
            None => {}
        }
        if let Some(read) = plain_anthropic_event(ev.data) {
            return self.note_anthropic_event(ev, read);
        }
        let Ok(e) = serde_json::from_str::<AnthropicEvent>(ev.data) else { return };
        self.note_anthropic_event(ev, e.read());
    }

    /// What a `message_start` or `message_delta` says, matched or parsed.
    fn note_anthropic_event(&mut self, ev: &SseEvent<'_>, read: EventRead<'_>) {
        match read.kind.or(ev.event) {
            Some("message_start") => {
                if let Some(m) = read.message {
                    if let Some(model) = m.model.and_then(answered_model) {
                        self.model = Some(model);
                    }
                    if let Some(tokens) = m.tokens {
                        // `output_tokens` here is a placeholder (usually 1): output stays
                        // unknown until message_delta says how many were generated.
                        merge(&mut self.tokens, Tokens { output: None, ..tokens });
                    }
                }
            }
            Some("message_delta") => {
                if let Some(tokens) = read.usage {
                    merge(&mut self.tokens, tokens);
                }
            }
            _ => {}
        }
    }

    /// The model is known, or no longer looked for (the first tries are spent).
    fn model_settled(&self) -> bool {
        self.model.is_some() || self.model_tries >= MODEL_TRIES
    }

    /// Whether an event of a Chat or Responses stream is worth parsing: it has a usage object,
    /// or it may name the model still looked for.
    fn worth_parsing(&mut self, data: &str, model_key: &Finder<'_>) -> bool {
        has_usage_object(data) || self.model_wanted(data, &[model_key])
    }

    /// Whether an event may name the model: it is still unknown, the first tries are not spent,
    /// and one of `keys` (those that hold the model) occurs in the event (which spends a try).
    fn model_wanted(&mut self, data: &str, keys: &[&Finder<'_>]) -> bool {
        if self.model_settled() || keys.iter().all(|key| key.find(data.as_bytes()).is_none()) {
            return false;
        }
        self.model_tries += 1;
        true
    }

    fn observe_chat(&mut self, ev: &SseEvent<'_>) {
        // Most chunks of a stream whose client asked for usage end with a null one (it comes in
        // a last chunk of its own). Such a chunk has nothing to tell once the model is known,
        // and seeing that costs less than searching it for a usage object. (While the model is
        // unknown, a chunk parsed for a usage object nested elsewhere still names it.)
        if self.model.is_some() && ends_with_null_usage(ev.data) {
            return;
        }
        self.observe_chat_searched(ev);
    }

    fn observe_chat_searched(&mut self, ev: &SseEvent<'_>) {
        if !self.worth_parsing(ev.data, finder!("\"model\"")) {
            return;
        }
        let (model, usage) = match plain_chat_body(ev.data) {
            Some(read) => (read.model.and_then(answered_model), read.usage),
            None => match serde_json::from_str::<ChatBody>(ev.data) {
                Ok(chunk) => (model_name(chunk.model), chunk.usage.0),
                Err(_) => return,
            },
        };
        if self.model.is_none() {
            self.model = model;
        }
        if let Some(u) = usage {
            merge(&mut self.tokens, u.tokens());
        }
    }

    fn observe_responses(&mut self, ev: &SseEvent<'_>) {
        // Only the lifecycle events (`response.created`, `.in_progress`, `.completed`,
        // `.incomplete`, `.failed`, `.queued`) carry the response object; the many
        // `response.<part>.<action>` events never do.
        if let Some(name) = ev.event
            && name.strip_prefix("response.").is_none_or(|rest| rest.contains('.'))
        {
            return;
        }
        if !self.worth_parsing(ev.data, finder!("\"response\"")) {
            return;
        }
        let (model, usage) = match plain_responses_event(ev.data) {
            Some(Some(read)) => (read.model.and_then(answered_model), read.usage),
            Some(None) => return,
            None => match serde_json::from_str::<ResponsesEvent>(ev.data) {
                Ok(ResponsesEvent { response: Lenient(Some(r)) }) => (model_name(r.model), r.usage.0),
                _ => return,
            },
        };
        if let Some(model) = model {
            self.model = Some(model);
        }
        if let Some(u) = usage {
            merge(&mut self.tokens, u.tokens());
        }
    }

    /// Every Gemini chunk may carry `usageMetadata` (the running totals; the last chunk has the
    /// final ones) and names its model (`modelVersion`); either in snake_case from some relays.
    /// The API puts usage in every chunk, so a chunk is matched before anything looks for it:
    /// as a text chunk in the API's shape (most of a stream), else as a body of any order.
    fn observe_gemini(&mut self, ev: &SseEvent<'_>) {
        let read =
            plain_text_chunk(ev.data).map(|chunk| text_chunk_read(&chunk)).or_else(|| plain_gemini_body(ev.data));
        if let Some(read) = read {
            self.observe_gemini_read(read);
            return;
        }
        // Its usage is under a key of its own (a Chat-style `usage` is not read here).
        let wanted = finder!("\"usageMetadata\"").find(ev.data.as_bytes()).is_some()
            || finder!("\"usage_metadata\"").find(ev.data.as_bytes()).is_some()
            || self.model_wanted(ev.data, &[finder!("\"modelVersion\""), finder!("\"model_version\"")]);
        if !wanted {
            return;
        }
        let Ok(mut chunk) = serde_json::from_str::<GeminiBody>(ev.data) else { return };
        if self.model.is_none() {
            self.model = model_name(chunk.model());
        }
        if let Some(u) = chunk.usage() {
            merge(&mut self.tokens, u.tokens());
        }
    }
}

impl StreamUsage {
    /// A Gemini text chunk in the API's shape, matched by whoever read the event first (the
    /// observer reads it once for its kind and its usage): what [`Self::observe`] reads of it.
    pub fn observe_gemini_text_chunk(&mut self, chunk: &PlainTextChunk<'_>) {
        self.observe_gemini_read(text_chunk_read(chunk));
    }

    fn observe_gemini_read(&mut self, read: plain_gemini::GeminiRead<'_>) {
        if self.model.is_none() {
            self.model = read.model.and_then(answered_model);
        }
        if let Some(u) = read.usage {
            merge(&mut self.tokens, u.tokens());
        }
    }
}

/// Field by field: what the newer numbers say wins, what they omit keeps its value.
fn merge(into: &mut Tokens, new: Tokens) {
    into.input = new.input.or(into.input);
    into.output = new.output.or(into.output);
    into.cache_read = new.cache_read.or(into.cache_read);
    into.cache_write = new.cache_write.or(into.cache_write);
}

/// Does the JSON text have a `"usage"` key whose value is an object (not `null`)? A quoted key
/// cannot occur inside a JSON string (its quotes would be escaped), so a match is structural.
fn has_usage_object(data: &str) -> bool {
    const KEY: &str = "\"usage\"";
    let mut rest = data;
    while let Some(at) = finder!(KEY).find(rest.as_bytes()) {
        rest = rest.get(at + KEY.len()..).unwrap_or_default();
        let after = rest.trim_start();
        if let Some(value) = after.strip_prefix(':')
            && value.trim_start().starts_with('{')
        {
            return true;
        }
    }
    false
}

/// Whether the text ends with a top-level `"usage":null`: in valid JSON, a key (an unescaped
/// quoted string followed by a colon) whose object the text's last brace closes is the
/// outermost object's, so its usage is null. Any other `usage` in the chunk would then be nested
/// (which the reader ignores) or the same key again (which fails its parse): either way the
/// chunk has no usage to read. Text that is not valid JSON fails the parse too.
fn ends_with_null_usage(data: &str) -> bool {
    const TAIL: &str = "\"usage\":null}";
    data.strip_suffix(TAIL).is_some_and(|before| !before.ends_with('\\'))
}

/// `input` minus cache reads and writes, for protocols whose input total includes them.
fn uncached(total: Option<u64>, read: Option<u64>, write: Option<u64>) -> Option<u64> {
    total.map(|t| t.saturating_sub(read.unwrap_or(0)).saturating_sub(write.unwrap_or(0)))
}

// ---------------------------------------------------------------------------------------------
// Wire shapes (only the fields read; everything else is skipped)
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize, Default)]
#[serde(default)]
struct AnthropicUsage {
    input_tokens: Count,
    output_tokens: Count,
    cache_read_input_tokens: Count,
    cache_creation_input_tokens: Count,
}

impl AnthropicUsage {
    fn tokens(&self) -> Tokens {
        Tokens {
            input: self.input_tokens.0,
            output: self.output_tokens.0,
            cache_read: self.cache_read_input_tokens.0,
            cache_write: self.cache_creation_input_tokens.0,
        }
    }
}

/// A Messages answer body, and `message_start`'s `message`.
#[derive(Deserialize, Default)]
#[serde(default)]
struct AnthropicMessage {
    model: Text,
    usage: Lenient<AnthropicUsage>,
    /// Read for `Envelope`.
    error: NotNull,
    status: Text,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct AnthropicEvent {
    #[serde(rename = "type")]
    kind: Text,
    message: Lenient<AnthropicMessage>,
    usage: Lenient<AnthropicUsage>,
}

impl AnthropicEvent {
    /// What the parse read, in the form the match gives.
    fn read(&self) -> EventRead<'_> {
        EventRead {
            kind: self.kind.0.as_deref(),
            message: self.message.0.as_ref().map(|m| MessageRead {
                model: m.model.0.as_deref(),
                tokens: m.usage.0.as_ref().map(AnthropicUsage::tokens),
            }),
            usage: self.usage.0.as_ref().map(AnthropicUsage::tokens),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ChatPromptDetails {
    cached_tokens: Count,
    cache_write_tokens: Count,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ChatUsage {
    prompt_tokens: Count,
    completion_tokens: Count,
    prompt_tokens_details: Lenient<ChatPromptDetails>,
    /// DeepSeek.
    prompt_cache_hit_tokens: Count,
    /// DeepSeek: `prompt_tokens` = hit + miss.
    prompt_cache_miss_tokens: Count,
    /// Kimi (Moonshot) reports cache hits at the top level.
    cached_tokens: Count,
}

impl ChatUsage {
    fn tokens(&self) -> Tokens {
        let details = self.prompt_tokens_details.0.as_ref();
        let read = details.and_then(|d| d.cached_tokens.0).or(self.prompt_cache_hit_tokens.0).or(self.cached_tokens.0);
        let write = details.and_then(|d| d.cache_write_tokens.0);
        let input = uncached(self.prompt_tokens.0, read, write).or(self.prompt_cache_miss_tokens.0);
        Tokens { input, output: self.completion_tokens.0, cache_read: read, cache_write: write }
    }
}

/// A Chat completion body or a streamed chunk.
#[derive(Deserialize, Default)]
#[serde(default)]
struct ChatBody {
    model: Text,
    usage: Lenient<ChatUsage>,
    /// Read for `Envelope`.
    error: NotNull,
    status: Text,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ResponsesInputDetails {
    cached_tokens: Count,
    cache_read_tokens: Count,
    cache_write_tokens: Count,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ResponsesUsage {
    input_tokens: Count,
    output_tokens: Count,
    input_tokens_details: Lenient<ResponsesInputDetails>,
}

impl ResponsesUsage {
    fn tokens(&self) -> Tokens {
        let details = self.input_tokens_details.0.as_ref();
        let read = details.and_then(|d| d.cached_tokens.0.or(d.cache_read_tokens.0));
        let write = details.and_then(|d| d.cache_write_tokens.0);
        Tokens {
            input: uncached(self.input_tokens.0, read, write),
            output: self.output_tokens.0,
            cache_read: read,
            cache_write: write,
        }
    }
}

/// A Responses answer body, and the `response` of lifecycle events.
#[derive(Deserialize, Default)]
#[serde(default)]
struct ResponseObject {
    model: Text,
    usage: Lenient<ResponsesUsage>,
    /// Read for `Envelope`.
    error: NotNull,
    status: Text,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ResponsesEvent {
    response: Lenient<ResponseObject>,
}

/// Gemini's counts under the REST API's camelCase names or the snake_case ones some relays send
/// (as distinct fields: a serde alias would refuse a body with both). As the converters read
/// them: the camelCase one when it is there and not `null`, else the snake_case one.
#[derive(Deserialize, Default)]
#[serde(default)]
struct GeminiUsage {
    #[serde(rename = "promptTokenCount")]
    prompt: Option<Count>,
    #[serde(rename = "prompt_token_count")]
    prompt_snake: Option<Count>,
    #[serde(rename = "cachedContentTokenCount")]
    cached: Option<Count>,
    #[serde(rename = "cached_content_token_count")]
    cached_snake: Option<Count>,
    #[serde(rename = "toolUsePromptTokenCount")]
    tool_prompt: Option<Count>,
    #[serde(rename = "tool_use_prompt_token_count")]
    tool_prompt_snake: Option<Count>,
    #[serde(rename = "candidatesTokenCount")]
    candidates: Option<Count>,
    #[serde(rename = "candidates_token_count")]
    candidates_snake: Option<Count>,
    #[serde(rename = "thoughtsTokenCount")]
    thoughts: Option<Count>,
    #[serde(rename = "thoughts_token_count")]
    thoughts_snake: Option<Count>,
}

impl GeminiUsage {
    /// The counts under their camelCase names only (`gemini_usage::COUNTED`'s order).
    fn camel_case([prompt, cached, tool_prompt, candidates, thoughts]: [Option<Count>; 5]) -> Self {
        GeminiUsage { prompt, cached, tool_prompt, candidates, thoughts, ..GeminiUsage::default() }
    }

    fn tokens(self) -> Tokens {
        // The camelCase field when it is set (not `null`), else the snake_case one.
        let count = |camel: Option<Count>, snake: Option<Count>| camel.or(snake).and_then(|c| c.0);
        let prompt = count(self.prompt, self.prompt_snake);
        let cached = count(self.cached, self.cached_snake);
        let tool_prompt = count(self.tool_prompt, self.tool_prompt_snake);
        let output = match (count(self.candidates, self.candidates_snake), count(self.thoughts, self.thoughts_snake)) {
            (None, None) => None,
            (c, t) => Some(c.unwrap_or(0).saturating_add(t.unwrap_or(0))),
        };
        let input = uncached(prompt, cached, None).map(|i| i.saturating_add(tool_prompt.unwrap_or(0)));
        Tokens { input, output, cache_read: cached, cache_write: None }
    }
}

/// A `GenerateContentResponse`: a body or a streamed chunk, its keys in either spelling.
#[derive(Deserialize, Default)]
#[serde(default)]
struct GeminiBody {
    #[serde(rename = "modelVersion")]
    model: Option<Text>,
    #[serde(rename = "model_version")]
    model_snake: Option<Text>,
    #[serde(rename = "usageMetadata")]
    usage: Option<Lenient<GeminiUsage>>,
    #[serde(rename = "usage_metadata")]
    usage_snake: Option<Lenient<GeminiUsage>>,
    /// Read for `Envelope`.
    error: NotNull,
    status: Text,
}

impl GeminiBody {
    fn model(&mut self) -> Text {
        self.model.take().or(self.model_snake.take()).unwrap_or_default()
    }

    fn usage(&mut self) -> Option<GeminiUsage> {
        self.usage.take().or(self.usage_snake.take()).and_then(|u| u.0)
    }
}

/// The model name, if the upstream gave a non-empty one.
fn model_name(text: Text) -> Option<String> {
    text.0.as_deref().and_then(answered_model)
}

/// The answering model as a record names it: the upstream's name trimmed, none when empty.
pub fn answered_model(name: &str) -> Option<String> {
    Some(name.trim()).filter(|s| !s.is_empty()).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::sse::SseScanner;

    fn t(input: Option<u64>, output: Option<u64>, cache_read: Option<u64>, cache_write: Option<u64>) -> Tokens {
        Tokens { input, output, cache_read, cache_write }
    }

    /// Run a transcript through the real SSE scanner in `chunk`-byte pieces (any boundary).
    fn stream(format: Format, transcript: &str, chunk: usize) -> StreamUsage {
        let mut scanner = SseScanner::new();
        let mut usage = StreamUsage::default();
        for piece in transcript.as_bytes().chunks(chunk) {
            scanner.feed(piece, |ev| usage.observe(format, &ev));
        }
        usage
    }

    /// Same result whatever the chunking.
    fn stream_all(format: Format, transcript: &str) -> (Tokens, Option<String>) {
        let whole = stream(format, transcript, usize::MAX);
        for size in [1, 7, 64] {
            let other = stream(format, transcript, size);
            assert_eq!(other.tokens(), whole.tokens(), "chunk size {size}");
            assert_eq!(other.model(), whole.model(), "chunk size {size}");
        }
        (whole.tokens(), whole.model().map(str::to_string))
    }

    /// Cut a transcript just before the first occurrence of `marker`.
    fn cut_before<'a>(transcript: &'a str, marker: &str) -> &'a str {
        &transcript[..transcript.find(marker).unwrap()]
    }

    // -- Gemini ---------------------------------------------------------------------------

    const GEMINI_STREAM: &str = "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"The \\\"usageMetadata\\\": {\\\"candidatesTokenCount\\\": 999}\"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 1200,\"totalTokenCount\": 1200},\"modelVersion\": \"gemini-2.5-pro\"}\r\n\r\n\
data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \" done\"}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 1200,\"cachedContentTokenCount\": 1000,\"candidatesTokenCount\": 40,\"thoughtsTokenCount\": 25,\"totalTokenCount\": 1265},\"modelVersion\": \"gemini-2.5-pro\"}\r\n\r\n";

    #[test]
    fn gemini_body_counts_thoughts_as_output_and_subtracts_the_cache() {
        let body = br#"{"candidates":[{"content":{"parts":[{"text":"Hi"}],"role":"model"},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":1200,"cachedContentTokenCount":1000,"toolUsePromptTokenCount":5,"candidatesTokenCount":40,"thoughtsTokenCount":25,"totalTokenCount":1270},"modelVersion":"gemini-2.5-pro","responseId":"x"}"#;
        let (tokens, model) = from_body(Format::Gemini, body);
        assert_eq!(tokens, t(Some(205), Some(65), Some(1000), None));
        assert_eq!(model.as_deref(), Some("gemini-2.5-pro"));
        assert_eq!(from_body(Format::Gemini, br#"{"error":{"code":429}}"#), (Tokens::default(), None));
    }

    #[test]
    fn gemini_usage_and_model_are_read_in_either_spelling() {
        let snake = br#"{"candidates":[],"usage_metadata":{"prompt_token_count":100,"cached_content_token_count":40,"candidates_token_count":7,"thoughts_token_count":3},"model_version":"gemini-2.5-flash"}"#;
        let (tokens, model) = from_body(Format::Gemini, snake);
        assert_eq!(tokens, t(Some(60), Some(10), Some(40), None));
        assert_eq!(model.as_deref(), Some("gemini-2.5-flash"));
        // Both spellings: the camelCase one wins, field by field where it is set and not null.
        let both = br#"{"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":null},"usage_metadata":{"prompt_token_count":1},"modelVersion":null,"model_version":"m"}"#;
        assert_eq!(from_body(Format::Gemini, both), (t(Some(9), None, None, None), Some("m".to_owned())));
        let mixed =
            br#"{"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":null,"candidates_token_count":4}}"#;
        assert_eq!(from_body(Format::Gemini, mixed).0, t(Some(9), Some(4), None, None));
        let stream = "data: {\"usage_metadata\":{\"prompt_token_count\":5,\"candidates_token_count\":2},\"model_version\":\"g\"}\r\n\r\n";
        assert_eq!(stream_all(Format::Gemini, stream), (t(Some(5), Some(2), None, None), Some("g".to_owned())));
        // Usage after the model is known, in a chunk of its own.
        let stream =
            "data: {\"model_version\":\"g\"}\r\n\r\ndata: {\"usage_metadata\":{\"prompt_token_count\":5}}\r\n\r\n";
        assert_eq!(stream_all(Format::Gemini, stream), (t(Some(5), None, None, None), Some("g".to_owned())));
        let stream = "data: {\"modelVersion\":\"g\"}\r\n\r\ndata: {\"usageMetadata\":{\"promptTokenCount\":5}}\r\n\r\n";
        assert_eq!(stream_all(Format::Gemini, stream), (t(Some(5), None, None, None), Some("g".to_owned())));
    }

    #[test]
    fn gemini_stream_takes_the_last_usage() {
        let (tokens, model) = stream_all(Format::Gemini, GEMINI_STREAM);
        assert_eq!(tokens, t(Some(200), Some(65), Some(1000), None));
        assert_eq!(model.as_deref(), Some("gemini-2.5-pro"));
        // Cut before the last chunk: the prompt side is known, the output is not.
        let cut = cut_before(GEMINI_STREAM, "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \" done");
        assert_eq!(stream_all(Format::Gemini, cut).0, t(Some(1200), None, None, None));
    }

    // -- Anthropic ------------------------------------------------------------------------

    /// A Claude Code turn against api.anthropic.com: cache write and read, and the newer API's
    /// `message_delta` repeating the input side.
    const ANTHROPIC_CACHED_STREAM: &str = "event: message_start\n\
data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01Wq1fVbpSVB9C2ab4tjZ3Nq\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5-20250929\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":4,\"cache_creation_input_tokens\":1532,\"cache_read_input_tokens\":17839,\"cache_creation\":{\"ephemeral_5m_input_tokens\":1532,\"ephemeral_1h_input_tokens\":0},\"output_tokens\":1,\"service_tier\":\"standard\"}}}\n\
\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\
\n\
event: ping\n\
data: {\"type\": \"ping\"}\n\
\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"The \\\"usage\\\": {\\\"output_tokens\\\": 999} key is how\"}}\n\
\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" the API reports tokens.\"}}\n\
\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":0}\n\
\n\
event: message_delta\n\
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"input_tokens\":4,\"cache_creation_input_tokens\":1532,\"cache_read_input_tokens\":17839,\"output_tokens\":152}}\n\
\n\
event: message_stop\n\
data: {\"type\":\"message_stop\"}\n\
\n";

    /// The API reference's streaming example: `message_delta` carries only `output_tokens`.
    const ANTHROPIC_PLAIN_STREAM: &str = "event: message_start\n\
data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01XFDUDYJgAACzvnptvVoYEL\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-opus-4-1-20250805\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\
\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_01T1x1fJ34qAmk2tNTrN7Up6\",\"name\":\"get_weather\",\"input\":{}}}\n\
\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"location\\\": \\\"San Francisco\\\"}\"}}\n\
\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":0}\n\
\n\
event: message_delta\n\
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":89}}\n\
\n\
event: message_stop\n\
data: {\"type\":\"message_stop\"}\n\
\n";

    /// An Anthropic-compatible vendor (GLM / Kimi style): `message_start` reports zeros and
    /// `message_delta` the real counts, including cache reads.
    const ANTHROPIC_VENDOR_STREAM: &str = "event: message_start\n\
data: {\"type\":\"message_start\",\"message\":{\"id\":\"20251130094500abc\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"glm-4.6\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":0,\"output_tokens\":0}}}\n\
\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\
\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\
\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":0}\n\
\n\
event: message_delta\n\
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"input_tokens\":1200,\"output_tokens\":40,\"cache_read_input_tokens\":1024}}\n\
\n\
event: message_stop\n\
data: {\"type\":\"message_stop\"}\n\
\n";

    #[test]
    fn anthropic_body_with_cache_read_and_write() {
        let body = br#"{"id":"msg_013Zva2CMHLNnXjNJJKqJ2EF","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":1532,"cache_read_input_tokens":17839,"cache_creation":{"ephemeral_5m_input_tokens":1532,"ephemeral_1h_input_tokens":0},"output_tokens":152,"service_tier":"standard"}}"#;
        let (tokens, model) = from_body(Format::Anthropic, body);
        assert_eq!(tokens, t(Some(12), Some(152), Some(17839), Some(1532)));
        assert_eq!(model.as_deref(), Some("claude-sonnet-4-5-20250929"));
    }

    #[test]
    fn anthropic_body_without_cache_fields_leaves_them_unknown() {
        let body = br#"{"type":"message","model":"claude-haiku-4-5","content":[],"usage":{"input_tokens":25,"output_tokens":10}}"#;
        assert_eq!(from_body(Format::Anthropic, body).0, t(Some(25), Some(10), None, None));
    }

    #[test]
    fn anthropic_stream_with_cache_tokens() {
        let (tokens, model) = stream_all(Format::Anthropic, ANTHROPIC_CACHED_STREAM);
        // The escaped "usage" inside the text delta is text, not usage.
        assert_eq!(tokens, t(Some(4), Some(152), Some(17839), Some(1532)));
        assert_eq!(model.as_deref(), Some("claude-sonnet-4-5-20250929"));
    }

    #[test]
    fn anthropic_stream_keeps_input_from_message_start() {
        let (tokens, model) = stream_all(Format::Anthropic, ANTHROPIC_PLAIN_STREAM);
        assert_eq!(tokens, t(Some(25), Some(89), None, None));
        assert_eq!(model.as_deref(), Some("claude-opus-4-1-20250805"));
    }

    #[test]
    fn anthropic_vendor_stream_later_numbers_win() {
        let (tokens, model) = stream_all(Format::Anthropic, ANTHROPIC_VENDOR_STREAM);
        assert_eq!(tokens, t(Some(1200), Some(40), Some(1024), None));
        assert_eq!(model.as_deref(), Some("glm-4.6"));
    }

    #[test]
    fn anthropic_stream_without_event_names() {
        let unnamed: String =
            ANTHROPIC_CACHED_STREAM.lines().filter(|l| !l.starts_with("event:")).map(|l| format!("{l}\n")).collect();
        let (tokens, model) = stream_all(Format::Anthropic, &unnamed);
        assert_eq!(tokens, t(Some(4), Some(152), Some(17839), Some(1532)));
        assert_eq!(model.as_deref(), Some("claude-sonnet-4-5-20250929"));
    }

    #[test]
    fn anthropic_cut_streams_report_unknown_not_zero() {
        // Cut before message_delta: the input side is real, the output is unknown (not the
        // placeholder 1 of message_start).
        let cut = cut_before(ANTHROPIC_CACHED_STREAM, "event: message_delta");
        let (tokens, model) = stream_all(Format::Anthropic, cut);
        assert_eq!(tokens, t(Some(4), None, Some(17839), Some(1532)));
        assert!(tokens.is_known());
        assert_eq!(model.as_deref(), Some("claude-sonnet-4-5-20250929"));
        // Cut inside message_start: nothing is known.
        let cut = &ANTHROPIC_CACHED_STREAM[..60];
        let (tokens, model) = stream_all(Format::Anthropic, cut);
        assert_eq!(tokens, Tokens::default());
        assert!(!tokens.is_known());
        assert_eq!(model, None);
    }

    #[test]
    fn anthropic_error_body_and_error_event_are_unknown() {
        let body = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(from_body(Format::Anthropic, body), (Tokens::default(), None));
        let events = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
        assert_eq!(stream_all(Format::Anthropic, events), (Tokens::default(), None));
    }

    // -- OpenAI Chat ----------------------------------------------------------------------

    /// The Chat Completions streaming example with `stream_options.include_usage`: `usage: null`
    /// on every chunk, then a usage chunk with empty `choices`.
    const CHAT_STREAM: &str = "data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_fc9f1d7035\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\
\n\
data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_fc9f1d7035\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Bonjour\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\
\n\
data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_fc9f1d7035\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":null}\n\
\n\
data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_fc9f1d7035\",\"choices\":[],\"usage\":{\"prompt_tokens\":2006,\"completion_tokens\":17,\"total_tokens\":2023,\"prompt_tokens_details\":{\"cached_tokens\":1920,\"audio_tokens\":0},\"completion_tokens_details\":{\"reasoning_tokens\":0,\"audio_tokens\":0,\"accepted_prediction_tokens\":0,\"rejected_prediction_tokens\":0}}}\n\
\n\
data: [DONE]\n\
\n";

    #[test]
    fn chat_body_subtracts_cached_from_prompt_tokens() {
        let body = br#"{"id":"chatcmpl-abc","object":"chat.completion","created":1741569952,"model":"gpt-4.1-2025-04-14","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":2006,"completion_tokens":300,"total_tokens":2306,"prompt_tokens_details":{"cached_tokens":1920,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}"#;
        let (tokens, model) = from_body(Format::Openai, body);
        assert_eq!(tokens, t(Some(86), Some(300), Some(1920), None));
        assert_eq!(model.as_deref(), Some("gpt-4.1-2025-04-14"));
    }

    #[test]
    fn chat_stream_usage_chunk() {
        let (tokens, model) = stream_all(Format::Openai, CHAT_STREAM);
        assert_eq!(tokens, t(Some(86), Some(17), Some(1920), None));
        assert_eq!(model.as_deref(), Some("gpt-4o-2024-08-06"));
    }

    #[test]
    fn chat_stream_cut_before_usage_chunk_is_unknown() {
        let cut = cut_before(
            CHAT_STREAM,
            "data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_fc9f1d7035\",\"choices\":[]",
        );
        let (tokens, model) = stream_all(Format::Openai, cut);
        assert_eq!(tokens, Tokens::default());
        assert_eq!(model.as_deref(), Some("gpt-4o-2024-08-06"));
    }

    #[test]
    fn chat_stream_usage_on_the_finish_chunk() {
        // Some vendors (no include_usage chunk) put usage on the chunk with finish_reason.
        let events = "data: {\"id\":\"1\",\"model\":\"qwen-plus\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"1\",\"model\":\"qwen-plus\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":5,\"total_tokens\":15}}\n\n\
data: [DONE]\n\n";
        let (tokens, model) = stream_all(Format::Openai, events);
        assert_eq!(tokens, t(Some(10), Some(5), None, None));
        assert_eq!(model.as_deref(), Some("qwen-plus"));
    }

    #[test]
    fn chat_stream_running_usage_last_wins() {
        let events = "data: {\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":1}}\n\n\
data: {\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"}}],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2}}\n\n\
data: {\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":3}}\n\n";
        assert_eq!(stream_all(Format::Openai, events).0, t(Some(10), Some(3), None, None));
    }

    #[test]
    fn chat_deepseek_cache_hit_and_miss() {
        // Current DeepSeek: both the OpenAI details and its own hit/miss split.
        let body = br#"{"id":"x","object":"chat.completion","model":"deepseek-chat","choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":50,"total_tokens":1050,"prompt_tokens_details":{"cached_tokens":768},"prompt_cache_hit_tokens":768,"prompt_cache_miss_tokens":232}}"#;
        assert_eq!(from_body(Format::Openai, body).0, t(Some(232), Some(50), Some(768), None));
        // Older DeepSeek: only the hit/miss split.
        let body = br#"{"model":"deepseek-chat","usage":{"prompt_tokens":1000,"completion_tokens":50,"prompt_cache_hit_tokens":768,"prompt_cache_miss_tokens":232}}"#;
        assert_eq!(from_body(Format::Openai, body).0, t(Some(232), Some(50), Some(768), None));
        // No prompt total at all: the misses are the uncached input.
        let body = br#"{"model":"deepseek-chat","usage":{"completion_tokens":50,"prompt_cache_hit_tokens":768,"prompt_cache_miss_tokens":232}}"#;
        assert_eq!(from_body(Format::Openai, body).0, t(Some(232), Some(50), Some(768), None));
    }

    #[test]
    fn chat_kimi_top_level_cached_tokens() {
        let body = br#"{"id":"chatcmpl-6810567267ee141b4630dccb","object":"chat.completion","model":"kimi-k2-0905-preview","choices":[],"usage":{"prompt_tokens":500,"completion_tokens":20,"total_tokens":520,"cached_tokens":256}}"#;
        assert_eq!(from_body(Format::Openai, body).0, t(Some(244), Some(20), Some(256), None));
    }

    #[test]
    fn chat_cache_write_tokens_from_a_relay() {
        // OpenRouter-style details for an Anthropic model behind a Chat API.
        let body = br#"{"model":"anthropic/claude-sonnet-4.5","usage":{"prompt_tokens":2000,"completion_tokens":30,"prompt_tokens_details":{"cached_tokens":0,"cache_write_tokens":1800}}}"#;
        assert_eq!(from_body(Format::Openai, body).0, t(Some(200), Some(30), Some(0), Some(1800)));
    }

    #[test]
    fn chat_without_usage_is_unknown() {
        let body = br#"{"model":"local-llama","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}]}"#;
        assert_eq!(from_body(Format::Openai, body), (Tokens::default(), Some("local-llama".into())));
        assert_eq!(from_body(Format::Openai, b"not json"), (Tokens::default(), None));
    }

    #[test]
    fn chat_azure_first_chunk_without_model() {
        // Azure's prompt_filter_results chunk has an empty model; the next chunk names it.
        let events = "data: {\"choices\":[],\"created\":0,\"id\":\"\",\"model\":\"\",\"object\":\"\",\"prompt_filter_results\":[{\"prompt_index\":0,\"content_filter_results\":{}}]}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}],\"id\":\"c1\",\"model\":\"gpt-4o-2024-11-20\",\"object\":\"chat.completion.chunk\"}\n\n\
data: [DONE]\n\n";
        assert_eq!(stream_all(Format::Openai, events).1.as_deref(), Some("gpt-4o-2024-11-20"));
    }

    #[test]
    fn chat_model_is_looked_for_in_the_first_chunks_only() {
        let mut usage = StreamUsage::default();
        let nameless = SseEvent {
            event: None,
            data: "{\"model\":\"\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}",
        };
        for _ in 0..100 {
            usage.observe(Format::Openai, &nameless);
        }
        assert_eq!(usage.model_tries, MODEL_TRIES);
        // A usage chunk is still read (and may name the model).
        usage.observe(
            Format::Openai,
            &SseEvent {
                event: None,
                data: "{\"model\":\"late\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}",
            },
        );
        assert_eq!(usage.tokens(), t(Some(3), Some(4), None, None));
        assert_eq!(usage.model(), Some("late"));
    }

    // -- Responses ------------------------------------------------------------------------

    const RESPONSES_STREAM: &str = "event: response.created\n\
data: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654\",\"object\":\"response\",\"created_at\":1741290958,\"status\":\"in_progress\",\"error\":null,\"model\":\"gpt-5-2025-08-07\",\"output\":[],\"usage\":null,\"metadata\":{}}}\n\
\n\
event: response.in_progress\n\
data: {\"type\":\"response.in_progress\",\"sequence_number\":1,\"response\":{\"id\":\"resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654\",\"object\":\"response\",\"status\":\"in_progress\",\"model\":\"gpt-5-2025-08-07\",\"output\":[],\"usage\":null}}\n\
\n\
event: response.output_item.added\n\
data: {\"type\":\"response.output_item.added\",\"sequence_number\":2,\"output_index\":0,\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}}\n\
\n\
event: response.output_text.delta\n\
data: {\"type\":\"response.output_text.delta\",\"sequence_number\":3,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"Hi there\"}\n\
\n\
event: response.output_text.done\n\
data: {\"type\":\"response.output_text.done\",\"sequence_number\":4,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"text\":\"Hi there\"}\n\
\n\
event: response.completed\n\
data: {\"type\":\"response.completed\",\"sequence_number\":5,\"response\":{\"id\":\"resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654\",\"object\":\"response\",\"created_at\":1741290958,\"status\":\"completed\",\"error\":null,\"model\":\"gpt-5-2025-08-07\",\"output\":[{\"id\":\"msg_1\",\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Hi there\",\"annotations\":[]}]}],\"usage\":{\"input_tokens\":3000,\"input_tokens_details\":{\"cached_tokens\":2048},\"output_tokens\":120,\"output_tokens_details\":{\"reasoning_tokens\":64},\"total_tokens\":3120},\"metadata\":{}}}\n\
\n";

    #[test]
    fn responses_body_subtracts_cached_input() {
        let body = br#"{"id":"resp_1","object":"response","status":"completed","model":"gpt-4.1-2025-04-14","output":[],"usage":{"input_tokens":3000,"input_tokens_details":{"cached_tokens":2048},"output_tokens":120,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":3120}}"#;
        let (tokens, model) = from_body(Format::Responses, body);
        assert_eq!(tokens, t(Some(952), Some(120), Some(2048), None));
        assert_eq!(model.as_deref(), Some("gpt-4.1-2025-04-14"));
    }

    #[test]
    fn responses_body_with_cache_write_tokens() {
        // What ccmesh's own Responses encoder (and some relays) send for Anthropic models.
        let body = br#"{"model":"claude-sonnet-4-5","usage":{"input_tokens":5000,"input_tokens_details":{"cached_tokens":1000,"cache_write_tokens":3000},"output_tokens":7}}"#;
        assert_eq!(from_body(Format::Responses, body).0, t(Some(1000), Some(7), Some(1000), Some(3000)));
    }

    #[test]
    fn responses_stream_completed() {
        let (tokens, model) = stream_all(Format::Responses, RESPONSES_STREAM);
        assert_eq!(tokens, t(Some(952), Some(120), Some(2048), None));
        assert_eq!(model.as_deref(), Some("gpt-5-2025-08-07"));
    }

    #[test]
    fn responses_stream_incomplete_and_failed_carry_usage() {
        for kind in ["response.incomplete", "response.failed"] {
            let events = RESPONSES_STREAM.replace("response.completed", kind);
            let (tokens, _) = stream_all(Format::Responses, &events);
            assert_eq!(tokens, t(Some(952), Some(120), Some(2048), None), "{kind}");
        }
    }

    #[test]
    fn responses_stream_without_event_names() {
        let unnamed: String =
            RESPONSES_STREAM.lines().filter(|l| !l.starts_with("event:")).map(|l| format!("{l}\n")).collect();
        assert_eq!(stream_all(Format::Responses, &unnamed), stream_all(Format::Responses, RESPONSES_STREAM));
    }

    #[test]
    fn responses_stream_cut_before_completed_is_unknown() {
        let cut = cut_before(RESPONSES_STREAM, "event: response.completed");
        let (tokens, model) = stream_all(Format::Responses, cut);
        assert_eq!(tokens, Tokens::default());
        assert_eq!(model.as_deref(), Some("gpt-5-2025-08-07"));
    }

    // -- Leniency -------------------------------------------------------------------------

    #[test]
    fn odd_values_read_as_unknown_without_losing_the_rest() {
        let body = br#"{"model":"m","usage":{"prompt_tokens":"120","completion_tokens":7.0,"prompt_tokens_details":"n/a","cached_tokens":-3}}"#;
        assert_eq!(from_body(Format::Openai, body), (t(Some(120), Some(7), None, None), Some("m".into())));
        let body = br#"{"model":42,"usage":"lots"}"#;
        assert_eq!(from_body(Format::Openai, body), (Tokens::default(), None));
        let body =
            br#"{"model":"  ","usage":{"input_tokens":1.5,"output_tokens":[1],"cache_read_input_tokens":{"a":1}}}"#;
        assert_eq!(from_body(Format::Anthropic, body), (Tokens::default(), None));
        let body = br#"{"model":"x","usage":{"input_tokens":null,"output_tokens":true}}"#;
        assert_eq!(from_body(Format::Responses, body), (Tokens::default(), Some("x".into())));
    }

    #[test]
    fn usage_object_detection_is_structural() {
        assert!(has_usage_object(r#"{"usage":{"a":1}}"#));
        assert!(has_usage_object(r#"{"usage" :  {}}"#));
        assert!(has_usage_object("{\"usage\":\n{}}"));
        assert!(has_usage_object(r#"{"usage":null,"x":{"usage":{}}}"#));
        assert!(!has_usage_object(r#"{"usage":null}"#));
        assert!(!has_usage_object(r#"{"usage":"{"}"#));
        assert!(!has_usage_object(r#"{"text":"the \"usage\": {} key"}"#));
        assert!(!has_usage_object(r#"{"usage""#));
        assert!(!has_usage_object(""));
    }

    mod null_usage_tail {
        use super::*;
        use proptest::prelude::*;

        /// Chat chunks with their usage in every place and form: null last, an object last,
        /// the key twice, a usage nested in a choice, a key that only ends in `usage`, a model or
        /// none, a chunk cut short.
        fn chunk() -> impl Strategy<Value = String> {
            let model = prop::sample::select(vec![r#","model":"m1""#, r#","model":"""#, r#","model":null"#, ""]);
            let choices = prop::sample::select(vec![
                r#","choices":[{"delta":{"content":"x"}}]"#,
                r#","choices":[{"delta":{},"usage":{"prompt_tokens":9}}]"#,
                "",
            ]);
            // Each usage object counts differently, so passing one over would show.
            let member = prop_oneof![
                Just(r#","usage":null"#.to_owned()),
                (1u32..1000).prop_map(|n| format!(r#","usage":{{"prompt_tokens":{n},"completion_tokens":4}}"#)),
                Just(r#","a\"usage":null"#.to_owned()),
                Just(r#","usage": null"#.to_owned()),
            ];
            let end = prop::sample::select(vec!["}", "}", "}", "} ", ""]);
            (model, choices, prop::collection::vec(member, 0..3), end).prop_map(|(model, choices, members, end)| {
                format!("{{\"id\":\"c\"{model}{choices}{}{end}", members.concat())
            })
        }

        proptest! {
            /// Passing over a chunk that ends with a null usage once the model is known reads
            /// every stream as searching each chunk does.
            #[test]
            fn a_chunk_passed_over_had_nothing_to_tell(chunks in prop::collection::vec(chunk(), 1..8)) {
                let (mut quick, mut searching) = (StreamUsage::default(), StreamUsage::default());
                for data in &chunks {
                    let ev = SseEvent { event: None, data };
                    quick.observe(Format::Openai, &ev);
                    searching.observe_chat_searched(&ev);
                    prop_assert_eq!(quick.tokens(), searching.tokens(), "{}", data);
                    prop_assert_eq!(quick.model(), searching.model(), "{}", data);
                }
            }
        }

        /// Once the model tries are spent without a model, a chunk ending with a null usage
        /// still names the model when a usage nested in a choice gets it parsed.
        #[test]
        fn a_null_usage_tail_is_passed_over_only_once_the_model_is_known() {
            let chunks = [
                r#"{"id":"c","model":""}"#,
                r#"{"id":"c","model":""}"#,
                r#"{"id":"c","model":"m1","choices":[{"delta":{"content":"x"}}]"#,
                r#"{"id":"c","model":""}"#,
                r#"{"id":"c","model":"m1","choices":[{"delta":{},"usage":{"prompt_tokens":9}}],"usage":null}"#,
            ];
            let mut usage = StreamUsage::default();
            for data in chunks {
                usage.observe(Format::Openai, &SseEvent { event: None, data });
            }
            assert_eq!(usage.model(), Some("m1"));
        }

        #[test]
        fn only_a_top_level_null_usage_at_the_very_end_counts() {
            assert!(ends_with_null_usage(r#"{"model":"m","choices":[],"usage":null}"#));
            assert!(!ends_with_null_usage(r#"{"model":"m","usage":null} "#));
            assert!(!ends_with_null_usage(r#"{"model":"m","usage": null}"#));
            assert!(!ends_with_null_usage(r#"{"a\"usage":null}"#));
            assert!(!ends_with_null_usage(r#"{"usage":{"prompt_tokens":1}}"#));
        }
    }
}
