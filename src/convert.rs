//! Protocol conversion, so that every inbound protocol can use every endpoint format (SPEC §1):
//! each request to the endpoint's format, and its answer back.
//!
//! Conversion goes through one intermediate representation (`ir`), rich enough to carry what
//! the four APIs have in common and to remember what one of them cannot express (`Loss`):
//! each protocol has one codec (`anthropic`, `openai_chat`, `responses`, `gemini`) that decodes its
//! requests/responses/stream events into the IR and encodes the IR back into its wire format.
//! Pass-through pairs never come here: their bytes are forwarded unchanged.
//!
//! All of it is pure: bytes in, bytes out, no I/O, no clock (ids and timestamps are given).
//! This file only dispatches on the format.

pub mod anthropic;
pub mod count_tokens;
pub mod gemini;
pub mod ir;
pub mod openai_chat;
pub mod responses;

use std::borrow::Cow;

use crate::protocol::Format;
use crate::protocol::errors::ErrorKind;
use crate::protocol::sse::SseEvent;
use crate::protocol::stream_events::{EventKind, PlainTextChunk, StreamContext};
use ir::{ConvertError, EncodeContext, Encoded, ErrorBody, Request, Response, StreamEvent};

pub fn decode_request<'a>(format: Format, body: impl Into<ir::RequestBody<'a>>) -> Result<Request, ConvertError> {
    let body = body.into();
    match format {
        Format::Anthropic => anthropic::decode_request(body),
        Format::Openai => openai_chat::decode_request(body),
        Format::Responses => responses::decode_request(body),
        Format::Gemini => gemini::decode_request(body.bytes),
    }
}

pub fn encode_request(format: Format, request: &Request) -> Result<Encoded, ConvertError> {
    match format {
        Format::Anthropic => anthropic::encode_request(request),
        Format::Openai => openai_chat::encode_request(request),
        Format::Responses => responses::encode_request(request),
        Format::Gemini => gemini::encode_request(request),
    }
}

pub fn decode_response(format: Format, body: &[u8]) -> Result<Response, ConvertError> {
    match format {
        Format::Anthropic => anthropic::decode_response(body),
        Format::Openai => openai_chat::decode_response(body),
        Format::Responses => responses::decode_response(body),
        Format::Gemini => gemini::decode_response(body),
    }
}

/// An answer of the usual kind read without a parse, for the formats that have such a reading
/// (Chat and Gemini). `Some` also says the answer is plainly one: a JSON object whose top-level
/// keys are written without escapes and hold no `error` and no `status`, so nothing that
/// `proxy::outcome::not_an_answer` looks for.
pub fn plain_answer(format: Format, body: &[u8]) -> Option<Response> {
    match format {
        Format::Openai => openai_chat::plain_answer(body),
        Format::Gemini => gemini::plain_answer(body),
        Format::Anthropic | Format::Responses => None,
    }
}

/// [`decode_response`] without the attempt at [`plain_answer`], for an answer it did not match.
pub fn decode_parsed_response(format: Format, body: &[u8]) -> Result<Response, ConvertError> {
    match format {
        Format::Anthropic => anthropic::decode_response(body),
        Format::Openai => openai_chat::decode_parsed_response(body),
        Format::Responses => responses::decode_response(body),
        Format::Gemini => gemini::decode_parsed_response(body),
    }
}

pub fn encode_response(format: Format, response: &Response, ctx: &EncodeContext) -> Vec<u8> {
    match format {
        Format::Anthropic => anthropic::encode_response(response, ctx),
        Format::Openai => openai_chat::encode_response(response, ctx),
        Format::Responses => responses::encode_response(response, ctx),
        Format::Gemini => gemini::encode_response(response, ctx),
    }
}

pub fn decode_error(format: Format, status: u16, body: &[u8]) -> ErrorBody {
    match format {
        Format::Anthropic => anthropic::decode_error(status, body),
        Format::Openai => openai_chat::decode_error(status, body),
        Format::Responses => responses::decode_error(status, body),
        Format::Gemini => gemini::decode_error(status, body),
    }
}

pub fn encode_error(format: Format, error: &ErrorBody) -> Vec<u8> {
    match format {
        Format::Anthropic => anthropic::encode_error(error),
        Format::Openai => openai_chat::encode_error(error),
        Format::Responses => responses::encode_error(error),
        Format::Gemini => gemini::encode_error(error),
    }
}

/// Upstream SSE events → IR events, for any format.
pub enum StreamDecoder {
    Anthropic(anthropic::StreamDecoder),
    Openai(openai_chat::StreamDecoder),
    Responses(responses::StreamDecoder),
    Gemini(gemini::StreamDecoder),
}

impl StreamDecoder {
    pub fn new(format: Format) -> Self {
        match format {
            Format::Anthropic => StreamDecoder::Anthropic(anthropic::StreamDecoder::new()),
            Format::Openai => StreamDecoder::Openai(openai_chat::StreamDecoder::new()),
            Format::Responses => StreamDecoder::Responses(responses::StreamDecoder::new()),
            Format::Gemini => StreamDecoder::Gemini(gemini::StreamDecoder::new()),
        }
    }

    pub fn decode(&mut self, event: &SseEvent<'_>, out: &mut Vec<StreamEvent>) {
        match self {
            StreamDecoder::Anthropic(d) => d.decode(event, out),
            StreamDecoder::Openai(d) => d.decode(event, out),
            StreamDecoder::Responses(d) => d.decode(event, out),
            StreamDecoder::Gemini(d) => d.decode(event, out),
        }
    }

    /// [`decode`](Self::decode), and the event's classification when the decoder's read gives
    /// it (see `openai_chat::StreamDecoder::decode_classified`).
    pub fn decode_classified(
        &mut self,
        event: &SseEvent<'_>,
        out: &mut Vec<StreamEvent>,
        ctx: &mut StreamContext,
    ) -> Option<EventKind> {
        match self {
            StreamDecoder::Openai(d) => d.decode_classified(event, out, ctx),
            StreamDecoder::Gemini(d) => d.decode_classified(event, out, ctx),
            other => {
                other.decode(event, out);
                None
            }
        }
    }

    pub fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        match self {
            StreamDecoder::Anthropic(d) => d.finish(out),
            StreamDecoder::Openai(d) => d.finish(out),
            StreamDecoder::Responses(d) => d.finish(out),
            StreamDecoder::Gemini(d) => d.finish(out),
        }
    }
}

/// IR events → client SSE bytes, for any format.
pub enum StreamEncoder {
    Anthropic(anthropic::StreamEncoder),
    Openai(openai_chat::StreamEncoder),
    Responses(responses::StreamEncoder),
    /// SSE by default; `gemini::StreamEncoder::json_array` for the JSON-array stream.
    Gemini(gemini::StreamEncoder),
}

impl StreamEncoder {
    pub fn new(format: Format, ctx: EncodeContext) -> Self {
        match format {
            Format::Anthropic => StreamEncoder::Anthropic(anthropic::StreamEncoder::new(ctx)),
            Format::Openai => StreamEncoder::Openai(openai_chat::StreamEncoder::new(ctx)),
            Format::Responses => StreamEncoder::Responses(responses::StreamEncoder::new(ctx)),
            Format::Gemini => StreamEncoder::Gemini(gemini::StreamEncoder::new(ctx)),
        }
    }

    pub fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        match self {
            StreamEncoder::Anthropic(e) => e.encode(event, out),
            StreamEncoder::Openai(e) => e.encode(event, out),
            StreamEncoder::Responses(e) => e.encode(event, out),
            StreamEncoder::Gemini(e) => e.encode(event, out),
        }
    }
}

/// A step between decoder and encoder that rewrites the event sequence (a resumed stream's
/// continuation is spliced into the client's stream this way).
pub trait EventSplice: Send {
    fn event(&mut self, event: StreamEvent, out: &mut Vec<StreamEvent>);
}

/// A running stream conversion: feed upstream events, get client bytes.
pub struct StreamConversion {
    mode: Mode,
}

// The large variant is the common one, and the relay already holds the whole conversion boxed.
#[allow(clippy::large_enum_variant)]
enum Mode {
    /// Decoded into IR events and encoded again in the client's format.
    Codec {
        decoder: StreamDecoder,
        encoder: StreamEncoder,
        scratch: Vec<StreamEvent>,
        /// A resumed stream's continuation goes through this between decoder and encoder.
        splice: Splicing,
    },
    /// A Gemini upstream's SSE to a Gemini client's JSON-array stream: the same chunks, framed
    /// differently (`gemini::JsonArrayReframe`).
    GeminiJsonArray(gemini::JsonArrayReframe),
}

impl StreamConversion {
    pub fn new(upstream: Format, client: Format, ctx: EncodeContext) -> Self {
        Self::with_encoder(upstream, StreamEncoder::new(client, ctx))
    }

    /// With an encoder chosen by the caller (a Gemini client's JSON-array stream).
    pub fn with_encoder(upstream: Format, encoder: StreamEncoder) -> Self {
        Self { mode: Mode::Codec { decoder: StreamDecoder::new(upstream), encoder, scratch: Vec::new(), splice: None } }
    }

    /// With `splice` between the upstream's decoder and the client's encoder.
    pub fn spliced(upstream: Format, encoder: StreamEncoder, splice: Box<dyn EventSplice>) -> Self {
        let mode = Mode::Codec {
            decoder: StreamDecoder::new(upstream),
            encoder,
            scratch: Vec::new(),
            splice: Some((splice, Vec::new())),
        };
        Self { mode }
    }

    /// A Gemini upstream's SSE stream as the JSON-array stream, its chunks unchanged.
    pub fn gemini_json_array() -> Self {
        Self { mode: Mode::GeminiJsonArray(gemini::JsonArrayReframe::new()) }
    }

    /// Convert one upstream event, appending the client's bytes to `out`.
    pub fn event(&mut self, event: &SseEvent<'_>, out: &mut Vec<u8>) {
        match &mut self.mode {
            Mode::Codec { decoder, encoder, scratch, splice } => {
                decoder.decode(event, scratch);
                flush(encoder, scratch, splice, out);
            }
            Mode::GeminiJsonArray(r) => r.event(event, out),
        }
    }

    /// [`event`](Self::event), which also classifies the event (as
    /// `stream_events::inspect_and_observe` would) when the decoder's own read of it can: a
    /// Chat upstream's chunk is then parsed once, not twice. `None` leaves it to the classifier.
    pub fn event_classified(
        &mut self,
        event: &SseEvent<'_>,
        out: &mut Vec<u8>,
        ctx: &mut StreamContext,
    ) -> Option<EventKind> {
        match &mut self.mode {
            Mode::Codec { decoder, encoder, scratch, splice } => {
                let kind = decoder.decode_classified(event, scratch, ctx);
                flush(encoder, scratch, splice, out);
                kind
            }
            Mode::GeminiJsonArray(r) => {
                r.event(event, out);
                None
            }
        }
    }

    /// A Gemini text chunk the caller matched (`stream_events::plain_text_chunk`), converted and
    /// classified as [`event_classified`](Self::event_classified) would its event. `None` when
    /// this conversion does not decode Gemini text chunks (or its decoder has ended): the event
    /// is then for `event_classified`.
    pub fn gemini_text_chunk(
        &mut self,
        chunk: &PlainTextChunk<'_>,
        out: &mut Vec<u8>,
        ctx: &mut StreamContext,
    ) -> Option<EventKind> {
        let Mode::Codec { decoder: StreamDecoder::Gemini(decoder), encoder, scratch, splice } = &mut self.mode else {
            return None;
        };
        let kind = decoder.text_chunk(chunk, scratch, Some(ctx))?;
        flush(encoder, scratch, splice, out);
        Some(kind)
    }

    /// The upstream stream ended cleanly.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        match &mut self.mode {
            Mode::Codec { decoder, encoder, scratch, splice } => {
                decoder.finish(scratch);
                flush(encoder, scratch, splice, out);
            }
            Mode::GeminiJsonArray(r) => r.finish(out),
        }
    }

    /// End the client's stream with its protocol's error event.
    pub fn fail(&mut self, kind: ErrorKind, message: &str, out: &mut Vec<u8>) {
        match &mut self.mode {
            Mode::Codec { encoder, .. } => {
                encoder.encode(&StreamEvent::Error { kind, message: message.to_string() }, out);
            }
            Mode::GeminiJsonArray(r) => {
                r.fail(&ErrorBody { kind, message: message.to_string(), code: None, param: None }, out);
            }
        }
    }
}

type Splicing = Option<(Box<dyn EventSplice>, Vec<StreamEvent>)>;

fn flush(encoder: &mut StreamEncoder, scratch: &mut Vec<StreamEvent>, splice: &mut Splicing, out: &mut Vec<u8>) {
    match splice {
        None => {
            for e in scratch.drain(..) {
                encoder.encode(&e, out);
            }
        }
        Some((splice, spliced)) => {
            for e in scratch.drain(..) {
                splice.event(e, spliced);
            }
            for e in spliced.drain(..) {
                encoder.encode(&e, out);
            }
        }
    }
}

/// What the gateway asks an upstream for: an answer (streamed or not), or a token count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Generate { stream: bool },
    CountTokens,
}

/// The upstream path (after the API version: `/v1`, Gemini's `/v1beta`) for a converted
/// request of this format. Gemini names the model and the method in the path, and streams
/// only when asked (`:streamGenerateContent?alt=sse`); the others name the model in the body.
pub fn upstream_path(format: Format, model: &str, call: Call) -> Cow<'static, str> {
    match (format, call) {
        (Format::Anthropic, Call::CountTokens) => Cow::Borrowed("/messages/count_tokens"),
        (Format::Anthropic, Call::Generate { .. }) => Cow::Borrowed("/messages"),
        (Format::Openai, _) => Cow::Borrowed("/chat/completions"),
        (Format::Responses, _) => Cow::Borrowed("/responses"),
        (Format::Gemini, call) => {
            let method = match call {
                Call::Generate { stream: false } => gemini::Method::Generate,
                Call::Generate { stream: true } => gemini::Method::Stream,
                Call::CountTokens => gemini::Method::CountTokens,
            };
            Cow::Owned(gemini::upstream_path(model, method))
        }
    }
}

/// Whether an endpoint of this format counts tokens itself (Anthropic `count_tokens`, Gemini
/// `countTokens`); for the others the gateway estimates (`count_tokens::estimate`).
pub fn counts_tokens(format: Format) -> bool {
    matches!(format, Format::Anthropic | Format::Gemini)
}

/// Fields Anthropic's `count_tokens` takes (it refuses `max_tokens`, `stream` and the other
/// generation settings).
const ANTHROPIC_COUNT_FIELDS: [&str; 6] = ["model", "messages", "system", "tools", "tool_choice", "thinking"];

/// IR → a token-count request for an endpoint of `format` ([`counts_tokens`]).
pub fn encode_count_tokens_request(format: Format, request: &Request) -> Result<Encoded, ConvertError> {
    match format {
        Format::Gemini => gemini::encode_count_tokens_request(request),
        Format::Anthropic => {
            let mut encoded = anthropic::encode_request(request)?;
            let mut body = ir::parse_object(&encoded.body)?;
            body.retain(|k, _| ANTHROPIC_COUNT_FIELDS.contains(&k.as_str()));
            encoded.body = serde_json::to_vec(&body).unwrap_or_default();
            Ok(encoded)
        }
        Format::Openai | Format::Responses => {
            Err(ConvertError::new("body", format!("a {format}-format endpoint has no token-count method")))
        }
    }
}

/// The count in a token-count answer (`input_tokens`, Gemini `totalTokens`).
pub fn decode_count_tokens_response(format: Format, body: &[u8]) -> Option<u64> {
    match format {
        Format::Gemini => gemini::decode_count_tokens_response(body),
        Format::Anthropic | Format::Openai | Format::Responses => {
            let body = ir::parse_object(body).ok()?;
            body.get("input_tokens").and_then(crate::protocol::lenient::count)
        }
    }
}

/// A token-count answer in the client's format.
pub fn encode_count_tokens_response(format: Format, count: u64) -> Vec<u8> {
    match format {
        Format::Gemini => gemini::encode_count_tokens_response(count),
        Format::Anthropic | Format::Openai | Format::Responses => {
            serde_json::to_vec(&serde_json::json!({"input_tokens": count})).unwrap_or_default()
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(crate) mod testkit {
    //! Test helpers that work for every codec through the hub, so a codec's tests need not carry
    //! their own copy.

    use super::*;
    use crate::protocol::lenient::Parse;
    use crate::protocol::sse::{SseEvent, SseScanner};
    use serde_json::Value;

    /// Feed `chunks` (any byte boundaries) through the SSE scanner and `format`'s decoder, then
    /// signal EOF.
    pub(crate) fn decode_stream(format: Format, chunks: &[&[u8]]) -> Vec<StreamEvent> {
        let mut scanner = SseScanner::new();
        let mut decoder = StreamDecoder::new(format);
        let mut out = Vec::new();
        for c in chunks {
            scanner.feed(c, |e| decoder.decode(&e, &mut out));
        }
        decoder.finish(&mut out);
        out
    }

    /// `events` written by `format`'s stream encoder.
    pub(crate) fn encode_stream(format: Format, ctx: EncodeContext, events: &[StreamEvent]) -> String {
        let mut encoder = StreamEncoder::new(format, ctx);
        let mut out = Vec::new();
        for e in events {
            encoder.encode(e, &mut out);
        }
        String::from_utf8(out).unwrap()
    }

    /// A request body given as JSON, decoded.
    pub(crate) fn decode_json(format: Format, body: &Value) -> Result<Request, ConvertError> {
        decode_request(format, &serde_json::to_vec(body).unwrap())
    }

    /// A request encoded, as JSON, with its losses as `field: note`.
    pub(crate) fn encode_json(format: Format, request: &Request) -> (Value, Vec<String>) {
        let e = encode_request(format, request).unwrap();
        (
            serde_json::from_slice(&e.body).unwrap(),
            e.losses.iter().map(|l| format!("{}: {}", l.field, l.note)).collect(),
        )
    }

    /// A stream decoder's way of reading one event, the matched or the parsed way (`parse`).
    pub(crate) type DecodeWith<D> = fn(&mut D, &SseEvent<'_>, &mut Vec<StreamEvent>, Parse);

    /// The IR events of `events` (each one event's data, named `name`) read by a new decoder
    /// with `decode`: the tests of a decoder's matchers compare `Parse::Direct`, which matches
    /// what it can, with `Parse::ViaValue`, which parses everything.
    pub(crate) fn decoded_with<D: Default>(
        events: &[String],
        name: Option<&str>,
        parse: Parse,
        decode: DecodeWith<D>,
    ) -> Vec<StreamEvent> {
        let mut decoder = D::default();
        let mut out = Vec::new();
        for data in events {
            decode(&mut decoder, &SseEvent { event: name, data }, &mut out, parse);
        }
        out
    }

    /// `bytes` split at `cuts` (positions taken modulo the length, in any order).
    pub(crate) fn split_at_cuts(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let mut chunks = Vec::new();
        let mut at = 0;
        for c in cuts {
            chunks.push(bytes[at..c].to_vec());
            at = c;
        }
        chunks.push(bytes[at..].to_vec());
        chunks
    }
}

#[cfg(test)]
mod tests {
    //! Cross-codec properties: for every pair of formats, a request converted on its way to an
    //! upstream, and an answer converted on its way back, keep their text, tool names and tool
    //! arguments; no converter panics on any well-typed input.

    use super::*;
    use ir::{Message, Part, Role, StopReason, TextPart, Tool, Usage};
    use proptest::prelude::*;
    use serde_json::{Value, json};

    const FORMATS: [Format; 4] = Format::ALL;

    fn text(t: &str) -> Part {
        Part::Text(TextPart { text: t.to_string(), cache_control: None })
    }

    fn word() -> impl Strategy<Value = String> {
        "[a-zA-Z][a-zA-Z0-9 ,.!?]{0,30}"
            .prop_map(|s| s.trim_end().to_string())
            .prop_filter("non-empty", |s| !s.is_empty())
    }

    fn args() -> impl Strategy<Value = Value> {
        (word(), 0i64..1000, any::<bool>()).prop_map(|(s, n, b)| json!({"q": s, "n": n, "flag": b}))
    }

    /// A conversation: user text, then rounds of (assistant text + tool call, user tool result + text).
    fn request() -> impl Strategy<Value = ir::Request> {
        (
            word(),
            word(),
            proptest::collection::vec((word(), "[a-z][a-z_]{0,12}", args(), word(), word()), 0..3),
            proptest::option::of(0.0f64..1.0),
        )
            .prop_map(|(system, first, rounds, temperature)| {
                let mut messages = vec![Message { role: Role::User, content: vec![text(&first)] }];
                let mut tools: Vec<Tool> = Vec::new();
                for (i, (say, name, input, result, follow_up)) in rounds.into_iter().enumerate() {
                    let name = format!("{name}_{i}");
                    let id = format!("call_{i}");
                    tools.push(Tool {
                        name: name.clone(),
                        description: Some(format!("tool {i}")),
                        input_schema: json!({"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}, "flag": {"type": "boolean"}}}).into(),
                        strict: None,
                        namespace: None,
                    });
                    messages.push(Message {
                        role: Role::Assistant,
                        content: vec![text(&say), Part::ToolUse { id: id.clone(), name, input, arguments: None }],
                    });
                    messages.push(Message {
                        role: Role::User,
                        content: vec![Part::ToolResult {
                            tool_use_id: id,
                            content: vec![ir::ToolResultContent::Text(result)],
                            is_error: false,
                        }],
                    });
                    messages.push(Message { role: Role::User, content: vec![text(&follow_up)] });
                }
                ir::Request {
                    model: "m".into(),
                    system: vec![TextPart { text: system, cache_control: None }],
                    messages,
                    tools,
                    max_tokens: Some(1000),
                    temperature,
                    ..ir::Request::default()
                }
            })
    }

    /// Every text, in order, and every tool call (name, arguments) of a request.
    fn essence(r: &ir::Request) -> (Vec<String>, Vec<(String, Value)>, Vec<String>) {
        let mut texts = Vec::new();
        let mut calls = Vec::new();
        let mut results = Vec::new();
        for m in &r.messages {
            for p in &m.content {
                match p {
                    Part::Text(t) => texts.push(t.text.clone()),
                    Part::ToolUse { name, input, arguments, .. } => {
                        let args =
                            arguments.as_deref().and_then(|a| serde_json::from_str(a).ok()).unwrap_or(input.clone());
                        calls.push((name.clone(), args));
                    }
                    Part::ToolResult { content, .. } => {
                        for c in content {
                            if let ir::ToolResultContent::Text(t) = c {
                                results.push(t.clone());
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        (texts, calls, results)
    }

    fn system_text(r: &ir::Request) -> String {
        r.system.iter().map(|p| p.text.as_str()).collect::<Vec<_>>().join("\n")
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn requests_keep_text_tools_and_arguments_across_every_pair(req in request()) {
            for client in FORMATS {
                // What the client sends, as the gateway decodes it.
                let sent = encode_request(client, &req).map_err(|e| TestCaseError::fail(format!("{client}: {e}")))?;
                let decoded = decode_request(client, &sent.body).map_err(|e| TestCaseError::fail(format!("{client} decode: {e}")))?;
                for target in FORMATS.into_iter().filter(|t| *t != client) {
                    let upstream = encode_request(target, &decoded).map_err(|e| TestCaseError::fail(format!("{client}→{target}: {e}")))?;
                    let seen = decode_request(target, &upstream.body).map_err(|e| TestCaseError::fail(format!("{target} decode: {e}")))?;
                    let (texts, calls, results) = essence(&seen);
                    let (want_texts, want_calls, want_results) = essence(&req);
                    prop_assert_eq!(&texts, &want_texts, "{}→{}", client, target);
                    prop_assert_eq!(&calls, &want_calls, "{}→{}", client, target);
                    prop_assert_eq!(&results, &want_results, "{}→{}", client, target);
                    prop_assert_eq!(system_text(&seen), system_text(&req));
                    let names: Vec<_> = seen.tools.iter().map(|t| t.name.clone()).collect();
                    let want: Vec<_> = req.tools.iter().map(|t| t.name.clone()).collect();
                    prop_assert_eq!(names, want);
                    prop_assert_eq!(seen.temperature, req.temperature);
                }
            }
        }

        #[test]
        fn answers_keep_text_tool_calls_stop_reason_and_usage_across_every_pair(
            say in word(),
            calls in proptest::collection::vec(("[a-z][a-z_]{0,12}", args()), 0..3),
            input in 0u64..100_000, output in 0u64..10_000, cached in 0u64..1000,
        ) {
            let mut content = vec![text(&say)];
            for (i, (name, input)) in calls.iter().enumerate() {
                content.push(Part::ToolUse { id: format!("call_{i}"), name: format!("{name}_{i}"), input: input.clone(), arguments: None });
            }
            let stop = if calls.is_empty() { StopReason::EndTurn } else { StopReason::ToolUse };
            let resp = ir::Response {
                id: "x".into(),
                model: "upstream-model".into(),
                content,
                stop_reason: Some(stop),
                usage: Usage { input: Some(input), output: Some(output), cache_read: Some(cached), ..Usage::default() },
                ..ir::Response::default()
            };
            let ctx = ir::EncodeContext { id_seed: "t".into(), request_model: "asked".into(), ..ir::EncodeContext::default() };
            for upstream in FORMATS {
                let body = encode_response(upstream, &resp, &ctx);
                let from_upstream = decode_response(upstream, &body).map_err(|e| TestCaseError::fail(format!("{upstream}: {e}")))?;
                for client in FORMATS.into_iter().filter(|c| *c != upstream) {
                    let out = encode_response(client, &from_upstream, &ctx);
                    let got = decode_response(client, &out).map_err(|e| TestCaseError::fail(format!("{upstream}→{client}: {e}")))?;
                    let got_text: String = got.content.iter().filter_map(|p| match p { Part::Text(t) => Some(t.text.as_str()), _ => None }).collect();
                    prop_assert_eq!(got_text, say.clone(), "{}→{}", upstream, client);
                    let got_calls: Vec<(String, Value)> = got.content.iter().filter_map(|p| match p {
                        Part::ToolUse { name, input, arguments, .. } => Some((name.clone(), arguments.as_deref().and_then(|a| serde_json::from_str(a).ok()).unwrap_or(input.clone()))),
                        _ => None,
                    }).collect();
                    let want_calls: Vec<(String, Value)> = calls.iter().enumerate().map(|(i, (n, a))| (format!("{n}_{i}"), a.clone())).collect();
                    prop_assert_eq!(got_calls, want_calls, "{}→{}", upstream, client);
                    prop_assert_eq!(got.stop_reason, Some(stop), "{}→{}", upstream, client);
                    prop_assert_eq!(got.model.as_str(), "upstream-model");
                    prop_assert_eq!((got.usage.input, got.usage.output, got.usage.cache_read.unwrap_or(0)), (Some(input), Some(output), cached), "{}→{}", upstream, client);
                }
            }
        }
    }

    // --- Gemini against every other format, through the hub

    const OTHERS: [Format; 3] = [Format::Anthropic, Format::Openai, Format::Responses];

    fn gemini_fixture(name: &str) -> Vec<u8> {
        let path = format!("{}/tests/fixtures/clients/gemini/{name}", env!("CARGO_MANIFEST_DIR"));
        let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        serde_json::to_vec(&v["body"]).unwrap()
    }

    #[test]
    fn gemini_client_requests_convert_to_every_format() {
        for name in [
            "cli_tool_03_v1beta_streamGenerateContent_gemini-3.8-flash.json",
            "cli_plain_01_v1beta_generateContent_gemini-3.5-flash-lite.json",
            "pysdk_function_manual_06_v1_generateContent_gemini-2.5-flash.json",
            "nodesdk_chat_stream_tool_06_v1_streamGenerateContent_gemini-2.5-flash.json",
        ] {
            let mut req = decode_request(Format::Gemini, &gemini_fixture(name)).unwrap();
            req.model = "target".into();
            for target in OTHERS {
                let sent = encode_request(target, &req).unwrap_or_else(|e| panic!("{name} → {target}: {e}"));
                let seen = decode_request(target, &sent.body).unwrap();
                // Chat joins a user turn's text parts into one text; the words are the same.
                let (texts, calls, results) = essence(&seen);
                let (want_texts, want_calls, want_results) = essence(&req);
                assert_eq!(texts.join("\n\n"), want_texts.join("\n\n"), "{name} → {target}");
                assert_eq!((calls, results), (want_calls, want_results), "{name} → {target}");
                let names: Vec<_> = seen.tools.iter().map(|t| t.name.clone()).collect();
                assert_eq!(names, req.tools.iter().map(|t| t.name.clone()).collect::<Vec<_>>(), "{name} → {target}");
                // Calls and their results still pair up, with the ids the target can hold.
                let ids = |r: &ir::Request| -> Vec<String> {
                    r.messages
                        .iter()
                        .flat_map(|m| &m.content)
                        .filter_map(|p| match p {
                            Part::ToolUse { id, .. } => Some(id.clone()),
                            Part::ToolResult { tool_use_id, .. } => Some(tool_use_id.clone()),
                            _ => None,
                        })
                        .collect()
                };
                let seen_ids = ids(&seen);
                assert!(seen_ids.chunks(2).all(|p| p.len() < 2 || p[0] == p[1]), "{name} → {target}: {seen_ids:?}");
            }
        }
    }

    #[test]
    fn every_format_converts_images_thinking_and_tools_to_gemini_and_back() {
        let req = ir::Request {
            model: "m".into(),
            system: vec![TextPart { text: "sys".into(), cache_control: None }],
            messages: vec![
                Message {
                    role: Role::User,
                    content: vec![
                        text("look"),
                        Part::Image(ir::Image::Base64 { media_type: "image/png".into(), data: "iVBORw0KGgo=".into() }),
                    ],
                },
                Message {
                    role: Role::Assistant,
                    content: vec![
                        text("calling"),
                        Part::ToolUse {
                            id: "call_1".into(),
                            name: "f".into(),
                            input: json!({"a": 1}),
                            arguments: None,
                        },
                    ],
                },
                Message {
                    role: Role::User,
                    content: vec![Part::ToolResult {
                        tool_use_id: "call_1".into(),
                        content: vec![ir::ToolResultContent::Text("done".into())],
                        is_error: false,
                    }],
                },
            ],
            tools: vec![Tool {
                name: "f".into(),
                description: Some("d".into()),
                input_schema: json!({"type": "object", "properties": {"a": {"type": "integer"}}}).into(),
                strict: None,
                namespace: None,
            }],
            max_tokens: Some(4000),
            reasoning: Some(ir::Reasoning { budget_tokens: Some(2048), effort: None, adaptive: false, summary: None }),
            ..ir::Request::default()
        };
        for client in OTHERS {
            let sent = encode_request(client, &req).unwrap();
            let decoded = decode_request(client, &sent.body).unwrap();
            let upstream = encode_request(Format::Gemini, &decoded).unwrap();
            let body: Value = serde_json::from_slice(&upstream.body).unwrap();
            assert_eq!(body["contents"][0]["parts"][1]["inlineData"]["mimeType"], "image/png", "{client}");
            assert_eq!(body["contents"][1]["parts"][1]["functionCall"]["name"], "f", "{client}");
            assert_eq!(body["contents"][2]["parts"][0]["functionResponse"]["response"]["output"], "done", "{client}");
            assert_eq!(
                body["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"]["properties"]["a"]["type"],
                "integer"
            );
            if decoded.reasoning.is_some() {
                assert!(
                    body["generationConfig"]["thinkingConfig"]["thinkingBudget"].as_i64().unwrap() > 0,
                    "{client}: {body}"
                );
            }
            let back = decode_request(Format::Gemini, &upstream.body).unwrap();
            assert_eq!(essence(&back), essence(&req), "{client} → gemini");
        }
    }

    /// A Messages client's tool schema, spaced and with numbers as written, reaches a Chat or a
    /// Responses upstream as the very text the client sent; Gemini gets it without `$schema`.
    #[test]
    fn a_messages_clients_tool_schema_reaches_the_upstream_as_written() {
        let schema = r#"{"$schema": "http://json-schema.org/draft-07/schema#", "type":"object",
            "properties": {"n": {"type": "number", "maximum": 1e2, "multipleOf": 0.50}}}"#;
        let body = format!(
            r#"{{"model": "m", "max_tokens": 9, "messages": [{{"role": "user", "content": "hi"}}],
            "tools": [{{"name": "f", "input_schema": {schema}}}]}}"#
        );
        let req = decode_request(Format::Anthropic, body.as_bytes()).unwrap();
        for target in [Format::Openai, Format::Responses] {
            let sent = String::from_utf8(encode_request(target, &req).unwrap().body).unwrap();
            assert!(sent.contains(&format!(r#""parameters":{schema}"#)), "{target}: {sent}");
        }
        let gemini: Value = serde_json::from_slice(&encode_request(Format::Gemini, &req).unwrap().body).unwrap();
        assert_eq!(
            gemini["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"],
            json!({"type": "object", "properties": {"n": {"type": "number", "maximum": 100.0, "multipleOf": 0.5}}})
        );
    }

    /// A Responses client's function schemas, a namespace's too, reach a Messages or a Chat
    /// upstream as written; Messages gets a `type` added where the schema names none.
    #[test]
    fn a_responses_clients_tool_schemas_reach_the_upstream_as_written() {
        let typed = r#"{"type": "object", "properties": {"cmd": {"type": "string", "maxLength": 1e3}}}"#;
        let untyped = r#"{"properties": {"n": {"type": "integer"}}}"#;
        let body = format!(
            r#"{{"model": "m", "input": "hi", "tools": [{{"type": "function", "name": "a", "parameters": {typed}}},
            {{"type": "namespace", "name": "ns", "tools": [{{"type": "function", "name": "b", "parameters": {untyped}}}]}}]}}"#
        );
        let req = decode_request(Format::Responses, body.as_bytes()).unwrap();
        let to_messages = String::from_utf8(encode_request(Format::Anthropic, &req).unwrap().body).unwrap();
        assert!(to_messages.contains(&format!(r#""input_schema":{typed}"#)), "{to_messages}");
        let sent: Value = serde_json::from_str(&to_messages).unwrap();
        assert_eq!(
            sent["tools"][1]["input_schema"],
            json!({"type": "object", "properties": {"n": {"type": "integer"}}})
        );
        let to_chat = String::from_utf8(encode_request(Format::Openai, &req).unwrap().body).unwrap();
        for schema in [typed, untyped] {
            assert!(to_chat.contains(&format!(r#""parameters":{schema}"#)), "{to_chat}");
        }
    }

    /// A Chat client's function schemas, in `function` or in the flat shape, reach a Responses
    /// or a Messages upstream as written; the nested one wins when a tool has both.
    #[test]
    fn a_chat_clients_tool_schemas_reach_the_upstream_as_written() {
        let nested = r#"{"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}"#;
        let flat = r#"{"type": "object", "properties": {"n": {"type": "number", "minimum": 1.0}}}"#;
        let body = format!(
            r#"{{"model": "m", "messages": [{{"role": "user", "content": "hi"}}], "tools": [
            {{"type": "function", "function": {{"name": "a", "parameters": {nested}}}, "parameters": {{"ignored": true}}}},
            {{"type": "function", "name": "b", "parameters": {flat}}}]}}"#
        );
        let req = decode_request(Format::Openai, body.as_bytes()).unwrap();
        let to_responses = String::from_utf8(encode_request(Format::Responses, &req).unwrap().body).unwrap();
        let to_messages = String::from_utf8(encode_request(Format::Anthropic, &req).unwrap().body).unwrap();
        for schema in [nested, flat] {
            assert!(to_responses.contains(&format!(r#""parameters":{schema}"#)), "{to_responses}");
            assert!(to_messages.contains(&format!(r#""input_schema":{schema}"#)), "{to_messages}");
        }
        assert!(!to_messages.contains("ignored"), "{to_messages}");
    }

    /// Valid JSON that a `Value` cannot hold (nested deeper than `serde_json` builds) is relayed
    /// as it is where the schema is relayed whole, and refused, naming the tool, where it must
    /// be rewritten (Gemini).
    #[test]
    fn a_schema_too_deep_to_rewrite_is_relayed_whole_or_refused_by_name() {
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        let body = format!(
            r#"{{"model": "m", "messages": [{{"role": "user", "content": "hi"}}],
            "tools": [{{"name": "f", "input_schema": {{"default": {deep}}}}}]}}"#
        );
        let req = decode_request(Format::Anthropic, body.as_bytes()).unwrap();
        let sent = encode_request(Format::Openai, &req).unwrap().body;
        assert!(String::from_utf8(sent).unwrap().contains(&deep));
        let refused = encode_request(Format::Gemini, &req).unwrap_err();
        assert_eq!(refused.field, "tools[0].input_schema");
        assert!(refused.message.contains("cannot be converted for a Gemini endpoint"), "{}", refused.message);
    }

    #[test]
    fn answers_streams_and_errors_between_gemini_and_every_format() {
        let ctx =
            ir::EncodeContext { id_seed: "t".into(), request_model: "asked".into(), ..ir::EncodeContext::default() };
        let resp = ir::Response {
            id: "r".into(),
            model: "gemini-2.5-pro".into(),
            content: vec![
                Part::Thinking { text: "hmm".into(), signature: None },
                text("Hello"),
                Part::ToolUse { id: "call_9".into(), name: "f".into(), input: json!({"a": 1}), arguments: None },
            ],
            stop_reason: Some(StopReason::ToolUse),
            usage: Usage {
                input: Some(10),
                output: Some(7),
                cache_read: Some(3),
                reasoning: Some(2),
                ..Usage::default()
            },
            ..ir::Response::default()
        };
        for other in OTHERS {
            // Gemini upstream → other client, and other upstream → Gemini client.
            for (from, to) in [(Format::Gemini, other), (other, Format::Gemini)] {
                let upstream = decode_response(from, &encode_response(from, &resp, &ctx)).unwrap();
                let got = decode_response(to, &encode_response(to, &upstream, &ctx)).unwrap();
                let texts: Vec<_> = got
                    .content
                    .iter()
                    .filter_map(|p| match p {
                        Part::Text(t) => Some(t.text.clone()),
                        _ => None,
                    })
                    .collect();
                assert_eq!(texts, ["Hello"], "{from} → {to}");
                assert!(
                    got.content
                        .iter()
                        .any(|p| matches!(p, Part::ToolUse { name, input, .. } if name == "f" && input["a"] == 1)),
                    "{from} → {to}"
                );
                assert_eq!(got.stop_reason, Some(StopReason::ToolUse), "{from} → {to}");
                assert_eq!((got.usage.input, got.usage.output), (Some(10), Some(7)), "{from} → {to}");
            }
            // Errors keep their kind both ways.
            let e = decode_error(
                Format::Gemini,
                429,
                br#"{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED"}}"#,
            );
            assert_eq!(decode_error(other, 429, &encode_error(other, &e)).kind, ErrorKind::RateLimited);
            let e = decode_error(
                other,
                503,
                &encode_error(
                    other,
                    &ir::ErrorBody { kind: ErrorKind::Overloaded, message: "busy".into(), code: None, param: None },
                ),
            );
            let back: Value = serde_json::from_slice(&encode_error(Format::Gemini, &e)).unwrap();
            assert_eq!(back["error"]["status"], "UNAVAILABLE", "{other}");

            // Streams: the IR events of an answer, written by one codec, converted to the other.
            let events = vec![
                StreamEvent::Start { id: "r".into(), model: "m".into(), usage: Usage::default(), created: None },
                StreamEvent::BlockStart { index: 0, block: ir::BlockStart::Text },
                StreamEvent::TextDelta { index: 0, text: "Hel".into() },
                StreamEvent::TextDelta { index: 0, text: "lo".into() },
                StreamEvent::BlockStop { index: 0 },
                StreamEvent::BlockStart {
                    index: 1,
                    block: ir::BlockStart::ToolUse { id: "call_1".into(), name: "f".into() },
                },
                StreamEvent::ToolArgsDelta { index: 1, partial_json: "{\"a\":1}".into() },
                StreamEvent::BlockStop { index: 1 },
                StreamEvent::Finish {
                    stop_reason: Some(StopReason::ToolUse),
                    stop_sequence: None,
                    usage: Usage { input: Some(5), output: Some(3), ..Usage::default() },
                },
                StreamEvent::End,
            ];
            for (from, to) in [(Format::Gemini, other), (other, Format::Gemini)] {
                let upstream = testkit::encode_stream(from, ctx.clone(), &events);
                let mut conversion = StreamConversion::new(from, to, ctx.clone());
                let mut client = Vec::new();
                let mut scanner = crate::protocol::sse::SseScanner::new();
                scanner.feed(upstream.as_bytes(), |e| conversion.event(&e, &mut client));
                conversion.finish(&mut client);
                let seen = testkit::decode_stream(to, &[&client]);
                let text: String = seen
                    .iter()
                    .filter_map(|e| match e {
                        StreamEvent::TextDelta { text, .. } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect();
                assert_eq!(text, "Hello", "{from} → {to}");
                let args: String = seen
                    .iter()
                    .filter_map(|e| match e {
                        StreamEvent::ToolArgsDelta { partial_json, .. } => Some(partial_json.as_str()),
                        _ => None,
                    })
                    .collect();
                assert_eq!(serde_json::from_str::<Value>(&args).unwrap(), json!({"a": 1}), "{from} → {to}");
                assert!(
                    seen.iter()
                        .any(|e| matches!(e, StreamEvent::Finish { stop_reason: Some(StopReason::ToolUse), .. })),
                    "{from} → {to}: {seen:?}"
                );
                assert_eq!(seen.last(), Some(&StreamEvent::End), "{from} → {to}");
            }
        }
    }

    /// A token count as upstreams send them, well and badly.
    fn arb_count() -> impl Strategy<Value = Value> {
        prop::sample::select(vec![
            json!(0),
            json!(7),
            json!(1200),
            json!(7.0),
            json!(2.5),
            json!(-1),
            json!("7"),
            json!(" 12 "),
            json!("x"),
            Value::Null,
            json!([1]),
        ])
    }

    /// An object with some of `keys`, each a count, and some of `nested` (name, its keys).
    fn arb_counts(
        keys: &'static [&'static str],
        nested: &'static [(&'static str, &'static [&'static str])],
    ) -> BoxedStrategy<Value> {
        let flat = prop::collection::vec(prop::option::weighted(0.6, arb_count()), keys.len());
        let inner = prop::collection::vec(
            prop::option::weighted(0.5, prop::collection::vec(prop::option::weighted(0.6, arb_count()), 3)),
            nested.len(),
        );
        (flat, inner)
            .prop_map(move |(flat, inner)| {
                let mut o = serde_json::Map::new();
                for (k, v) in keys.iter().zip(flat) {
                    if let Some(v) = v {
                        o.insert((*k).to_owned(), v);
                    }
                }
                for ((name, inner_keys), values) in nested.iter().zip(inner) {
                    if let Some(values) = values {
                        let d: serde_json::Map<String, Value> = inner_keys
                            .iter()
                            .zip(values)
                            .filter_map(|(k, v)| v.map(|v| ((*k).to_owned(), v)))
                            .collect();
                        o.insert((*name).to_owned(), Value::Object(d));
                    }
                }
                Value::Object(o)
            })
            .boxed()
    }

    /// An answer of `format` that says "hi" and carries `usage`.
    fn answer_with_usage(format: Format, usage: Value) -> Vec<u8> {
        let body = match format {
            Format::Anthropic => json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn", "usage": usage}),
            Format::Openai => json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
                "usage": usage}),
            Format::Responses => json!({"id": "resp_1", "object": "response", "status": "completed", "model": "m",
                "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]}],
                "usage": usage}),
            Format::Gemini => json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "hi"}]},
                "finishReason": "STOP"}], "modelVersion": "m", "usageMetadata": usage}),
        };
        serde_json::to_vec(&body).unwrap()
    }

    fn arb_usage(format: Format) -> BoxedStrategy<Value> {
        match format {
            Format::Anthropic => arb_counts(
                &["input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"],
                &[],
            ),
            Format::Openai => arb_counts(
                &[
                    "prompt_tokens",
                    "completion_tokens",
                    "prompt_cache_hit_tokens",
                    "prompt_cache_miss_tokens",
                    "cached_tokens",
                ],
                &[
                    ("prompt_tokens_details", &["cached_tokens", "cache_write_tokens", "audio_tokens"]),
                    ("completion_tokens_details", &["reasoning_tokens", "audio_tokens", "accepted_prediction_tokens"]),
                ],
            ),
            Format::Responses => arb_counts(
                &["input_tokens", "output_tokens", "total_tokens"],
                &[
                    ("input_tokens_details", &["cached_tokens", "cache_read_tokens", "cache_write_tokens"]),
                    ("output_tokens_details", &["reasoning_tokens", "x", "y"]),
                ],
            ),
            Format::Gemini => arb_counts(
                &[
                    "promptTokenCount",
                    "candidatesTokenCount",
                    "cachedContentTokenCount",
                    "thoughtsTokenCount",
                    "toolUsePromptTokenCount",
                    // The spelling some relays send; the camelCase one wins where both are set.
                    "prompt_token_count",
                    "candidates_token_count",
                    "cached_content_token_count",
                    "thoughts_token_count",
                    "tool_use_prompt_token_count",
                ],
                &[],
            ),
        }
    }

    fn arb_format_and_usage() -> impl Strategy<Value = (Format, Value)> {
        prop::sample::select(FORMATS.to_vec()).prop_flat_map(|f| (Just(f), arb_usage(f)))
    }

    /// The IR usage as a record's tokens (the fields both have), to compare the two readings.
    fn as_tokens(u: &Usage) -> crate::observe::record::Tokens {
        crate::observe::record::Tokens {
            input: u.input,
            output: u.output,
            cache_read: u.cache_read,
            cache_write: u.cache_write,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// A converted answer reports the tokens its request record stores (`observe::usage`),
        /// whatever types the upstream's counts have: the client and the dashboard agree.
        #[test]
        fn a_converted_answer_reports_the_tokens_its_record_stores((format, usage) in arb_format_and_usage()) {
            let body = answer_with_usage(format, usage);
            let converted = decode_response(format, &body).unwrap().usage;
            let recorded = crate::observe::usage::read_answer(format, &body).tokens;
            prop_assert_eq!(as_tokens(&converted), recorded, "{:?}", format);
        }
    }

    /// An answer of `format` whose model is `model` (left out when `None`; Gemini's in either
    /// spelling of its key).
    fn answer_with_model(format: Format, usage: Value, model: Option<Value>, snake: bool) -> Vec<u8> {
        let mut body: Value = serde_json::from_slice(&answer_with_usage(format, usage)).unwrap();
        let object = body.as_object_mut().unwrap();
        let key = match format {
            Format::Gemini => {
                object.remove("modelVersion");
                if snake { "model_version" } else { "modelVersion" }
            }
            _ => {
                object.remove("model");
                "model"
            }
        };
        if let Some(model) = model {
            object.insert(key.into(), model);
        }
        serde_json::to_vec(&body).unwrap()
    }

    fn arb_model() -> impl Strategy<Value = Option<Value>> {
        prop::sample::select(vec![
            None,
            Some(json!("m")),
            Some(json!(" gpt-5 ")),
            Some(json!("")),
            Some(json!("  ")),
            Some(json!(5)),
            Some(Value::Null),
            Some(json!(["m"])),
        ])
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// A converted answer is decoded once, and the record takes its tokens and model from
        /// that decoding (`proxy::conversion::answer_read`): they are what reading the body for
        /// the record alone gives.
        #[test]
        fn a_decoded_answer_gives_the_record_what_reading_it_gives(
            (format, usage) in arb_format_and_usage(), model in arb_model(), snake in any::<bool>(),
        ) {
            let body = answer_with_model(format, usage, model, snake);
            prop_assert!(crate::proxy::outcome::plainly_an_answer(&body));
            let decoded = crate::proxy::conversion::answer_read(&decode_response(format, &body).unwrap());
            let read = crate::observe::usage::read_answer(format, &body);
            prop_assert_eq!(decoded.tokens, read.tokens, "{:?}", format);
            prop_assert_eq!(decoded.model, read.model, "{:?} {}", format, String::from_utf8_lossy(&body));
            prop_assert_eq!(decoded.envelope, read.envelope.map(|_| Default::default()), "{:?}", format);
        }
    }

    /// A stream of `format` that says "hi" and reports `usage` where that protocol reports it
    /// (Anthropic: the input side in `message_start`, the output in `message_delta`).
    fn stream_with_usage(format: Format, usage: Value) -> String {
        let data = |v: Value| format!("data: {v}\n\n");
        let named = |name: &str, v: Value| format!("event: {name}\ndata: {v}\n\n");
        match format {
            Format::Anthropic => [
                named("message_start", json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
                    "role": "assistant", "model": "m", "content": [], "usage": usage}})),
                named("content_block_start", json!({"type": "content_block_start", "index": 0,
                    "content_block": {"type": "text", "text": ""}})),
                named("content_block_delta", json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": "hi"}})),
                named("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
                named("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                    "usage": {"output_tokens": usage.get("output_tokens")}})),
                named("message_stop", json!({"type": "message_stop"})),
            ]
            .concat(),
            Format::Openai => [
                data(json!({"id": "c1", "object": "chat.completion.chunk", "model": "m",
                    "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}, "finish_reason": null}]})),
                data(json!({"id": "c1", "object": "chat.completion.chunk", "model": "m",
                    "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})),
                data(json!({"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [], "usage": usage})),
                "data: [DONE]\n\n".to_owned(),
            ]
            .concat(),
            Format::Responses => {
                let response = |status: &str, usage: Value| json!({"id": "resp_1", "object": "response",
                    "status": status, "model": "m", "output": [], "usage": usage});
                [
                    named("response.created", json!({"type": "response.created", "sequence_number": 0,
                        "response": response("in_progress", Value::Null)})),
                    named("response.output_text.delta", json!({"type": "response.output_text.delta",
                        "sequence_number": 1, "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "hi"})),
                    named("response.completed", json!({"type": "response.completed", "sequence_number": 2,
                        "response": response("completed", usage)})),
                ]
                .concat()
            }
            Format::Gemini => [
                data(json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "hi"}]}}], "modelVersion": "m"})),
                data(json!({"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": "STOP"}],
                    "modelVersion": "m", "usageMetadata": usage})),
            ]
            .concat(),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// A converted stream's final usage is what its request record stores (`StreamUsage`),
        /// whatever types the upstream's counts have.
        #[test]
        fn a_converted_stream_reports_the_tokens_its_record_stores((format, usage) in arb_format_and_usage()) {
            let stream = stream_with_usage(format, usage);
            let events = testkit::decode_stream(format, &[stream.as_bytes()]);
            let converted = events.iter().find_map(|e| match e {
                StreamEvent::Finish { usage, .. } => Some(*usage),
                _ => None,
            });
            let mut recorded = crate::observe::usage::StreamUsage::default();
            crate::protocol::sse::SseScanner::new().feed(stream.as_bytes(), |e| recorded.observe(format, &e));
            prop_assert_eq!(as_tokens(&converted.unwrap_or_default()), recorded.tokens(), "{:?}: {:?}", format, events);
        }
    }
}
