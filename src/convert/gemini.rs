//! The Google Gemini codec (`generateContent`, `streamGenerateContent`, `countTokens`): requests,
//! `GenerateContentResponse`s, their SSE stream and `{"error":{"code","message","status"}}`
//! bodies, to and from the IR (`super::ir`). `docs/protocols/gemini.md` has the mapping table.
//!
//! Direction names, as in every codec: *decode* reads the Gemini wire format (a Gemini CLI or
//! Google GenAI SDK request, a Gemini upstream's answer); *encode* writes it.
//!
//! Design points worth knowing before reading the code:
//! - **The model and streaming are not in the body**: they are in the URL path
//!   (`models/{model}:generateContent` / `:streamGenerateContent?alt=sse`). `decode_request`
//!   leaves `model` empty (or takes a `model` field when the body has one, as `countTokens`'
//!   `generateContentRequest` does) and `stream` false; the inbound side sets both from the path.
//!   [`upstream_path`] builds the path for an upstream.
//! - **Function-call ids**: Gemini 2.x often gives none, the other formats require one. A call
//!   without an id gets one derived from its name, its arguments and its place
//!   ([`synth_call_id`]), so the same answer or the same history always gives the same id; a
//!   `functionResponse` without an id is matched to the open call of the same name.
//! - **Thought signatures** (`thoughtSignature`, required back on the function calls of the
//!   current turn by Gemini 3) ride inside the tool-call id: `{id}__thought__{signature}`, with
//!   the base64 signature in its URL-safe spelling so the id stays within Anthropic's id pattern.
//!   Every client format echoes tool-call ids, so the signature comes back whatever the client;
//!   the encoder splits it off again. A model turn whose calls carry no signature (history from
//!   another vendor) gets Google's documented placeholder ([`PLACEHOLDER_SIGNATURE`]). A
//!   signature on a text or thought part is not carried (Gemini does not require it).
//! - **Anthropic thinking signatures** shown to a Gemini client ride in a thought part's
//!   `thoughtSignature` behind a base64 ccmesh prefix ([`ANTHROPIC_SIGNATURE_LEAD`]), so a
//!   Gemini client's history can go back to an Anthropic endpoint with its signed thinking.
//! - **Schemas**: function declarations carry either `parametersJsonSchema` (JSON Schema, kept
//!   as it is) or `parameters` (Google's OpenAPI subset, `type` in UPPERCASE, `nullable`), which
//!   [`openapi_to_json_schema`] turns into JSON Schema. The encoder always writes
//!   `parametersJsonSchema` / `responseJsonSchema`, which the API takes as they are.
//! - **snake_case**: the Python SDK writes some nested keys in snake_case
//!   (`function_declarations`, `thinking_config`, `parameters_json_schema`); [`field`] reads
//!   either spelling.
//!
//! One concern per file, as in every codec: `request` (`decode`, `encode`), `response`, `stream`
//! (`decode`, `encode`), `error`. This file holds the little that several of them use.

mod error;
mod plain_answer;
mod request;
mod response;
mod stream;

pub use error::{decode_error, encode_error, error_chunk};
pub use request::{decode_count_tokens_request, decode_request, encode_count_tokens_request, encode_request};
pub use response::{
    decode_count_tokens_response, decode_parsed_response, decode_response, encode_count_tokens_response,
    encode_response, plain_answer,
};
pub use stream::{JsonArrayReframe, StreamDecoder, StreamEncoder};

use serde_json::{Map, Value};

use crate::protocol::lenient::get;

type Obj = Map<String, Value>;

/// Separates a Gemini call id from the thought signature carried with it.
const SIGNATURE_MARK: &str = "__thought__";

/// The `thoughtSignature` Google documents for function calls whose real signature is unknown
/// (a conversation that started with another model): it makes Gemini 3 skip the validation
/// that would otherwise refuse the turn.
pub const PLACEHOLDER_SIGNATURE: &str = "skip_thought_signature_validator";

/// `base64("ccmesh.anthropic.sig:")` (21 bytes, so no padding): a `thoughtSignature` that
/// starts with it carries an Anthropic thinking signature (the rest, itself base64), not a
/// Gemini one. The concatenation is valid base64, as a Gemini client holding the signature as
/// bytes (the Python SDK) needs.
const ANTHROPIC_SIGNATURE_LEAD: &str = "Y2NtZXNoLmFudGhyb3BpYy5zaWc6";

/// A key of a Gemini object in its camelCase (REST) or snake_case (Python SDK) spelling.
fn field<'a>(o: &'a Obj, camel: &str, snake: &str) -> Option<&'a Value> {
    get(o, camel).or_else(|| get(o, snake))
}

fn field_str<'a>(o: &'a Obj, camel: &str, snake: &str) -> Option<&'a str> {
    field(o, camel, snake).and_then(Value::as_str)
}

/// The path after the API version for a request to a Gemini upstream: the model as a resource
/// name ([`model_resource`]) and the method. `stream` asks for SSE (`alt=sse`), the only stream
/// form the gateway reads.
pub fn upstream_path(model: &str, method: Method) -> String {
    let mut path = model_resource(model);
    path.push_str(match method {
        Method::Generate => ":generateContent",
        Method::Stream => ":streamGenerateContent?alt=sse",
        Method::CountTokens => ":countTokens",
    });
    path
}

/// `/models/{model}`, or `/{model}` when the name already is a resource name (`tunedModels/x`),
/// characters outside `[A-Za-z0-9._~/-]` percent-encoded.
pub fn model_resource(model: &str) -> String {
    let model = model.trim();
    let mut path = String::with_capacity(model.len() + 40);
    path.push('/');
    if !model.contains('/') {
        path.push_str("models/");
    }
    for b in model.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => path.push(char::from(b)),
            _ => path.push_str(&format!("%{b:02X}")),
        }
    }
    path
}

impl Method {
    /// The method's name in a path (`models/x:generateContent`).
    pub fn name(self) -> &'static str {
        match self {
            Method::Generate => "generateContent",
            Method::Stream => "streamGenerateContent",
            Method::CountTokens => "countTokens",
        }
    }

    /// The method a path names.
    pub fn parse(name: &str) -> Option<Method> {
        [Method::Generate, Method::Stream, Method::CountTokens].into_iter().find(|m| m.name() == name)
    }
}

/// The three methods of a Gemini model the gateway calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Generate,
    Stream,
    CountTokens,
}

/// An id for a function call that came without one: derived from its name, its arguments and
/// its ordinal `n`, so the same call always gets the same id (in a body and in a stream, in an
/// answer and when the history comes back). FNV-1a: stable across runs and builds.
fn synth_call_id(name: &str, args: &Value, n: usize) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let args = args.to_string();
    let n = u64::try_from(n).unwrap_or(u64::MAX);
    for b in name.bytes().chain([0]).chain(args.bytes()).chain(n.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("call_{h:016x}")
}

/// The IR id of a Gemini call: its id, with its thought signature (if any) carried behind
/// [`SIGNATURE_MARK`] in URL-safe base64.
fn call_id_with_signature(id: &str, signature: Option<&str>) -> String {
    match signature.filter(|s| !s.is_empty() && *s != PLACEHOLDER_SIGNATURE) {
        None => id.to_owned(),
        Some(sig) => {
            let url_safe: String = sig
                .chars()
                .filter(|c| *c != '=')
                .map(|c| match c {
                    '+' => '-',
                    '/' => '_',
                    c => c,
                })
                .collect();
            format!("{id}{SIGNATURE_MARK}{url_safe}")
        }
    }
}

/// An IR tool-call id split into the Gemini call id and the thought signature it carries
/// (standard base64 again, padded).
fn split_call_id(id: &str) -> (&str, Option<String>) {
    let Some((base, sig)) = id.split_once(SIGNATURE_MARK) else { return (id, None) };
    if sig.is_empty() {
        return (base, None);
    }
    let mut standard: String = sig
        .chars()
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .collect();
    while !standard.len().is_multiple_of(4) {
        standard.push('=');
    }
    (base, Some(standard))
}

/// An Anthropic thinking signature as a Gemini `thoughtSignature` (`None` when the signature
/// is not plain base64, which a Gemini client could not hold as bytes).
fn anthropic_signature_out(signature: &str) -> Option<String> {
    let plain = !signature.is_empty()
        && signature.len().is_multiple_of(4)
        && signature.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='));
    plain.then(|| format!("{ANTHROPIC_SIGNATURE_LEAD}{signature}"))
}

/// The Anthropic signature a `thoughtSignature` carries, if it is one of ours. The Python SDK
/// holds a signature as bytes and writes it back in base64's URL-safe alphabet; Anthropic's are
/// in the standard one, so `-` and `_` are turned back.
fn anthropic_signature_in(signature: &str) -> Option<String> {
    let carried = signature.strip_prefix(ANTHROPIC_SIGNATURE_LEAD).filter(|s| !s.is_empty())?;
    Some(carried.replace('-', "+").replace('_', "/"))
}

// ---------------------------------------------------------------------------------------------
// Schemas: Google's OpenAPI subset → JSON Schema

/// Schema keys the Python SDK may write in snake_case, with their camelCase names.
const SCHEMA_SNAKE: &[(&str, &str)] = &[
    ("any_of", "anyOf"),
    ("min_items", "minItems"),
    ("max_items", "maxItems"),
    ("min_length", "minLength"),
    ("max_length", "maxLength"),
    ("min_properties", "minProperties"),
    ("max_properties", "maxProperties"),
    ("property_ordering", "propertyOrdering"),
];

/// A Gemini `Schema` (OpenAPI 3.0 subset: `type` as `STRING`/`OBJECT`/…, `nullable`,
/// `propertyOrdering`) as JSON Schema: types in lower case (`TYPE_UNSPECIFIED` dropped),
/// `nullable: true` as a `"null"` type (or an `anyOf` branch), `propertyOrdering` dropped (it
/// only orders the output), sub-schemas converted recursively, other keys kept.
pub fn openapi_to_json_schema(schema: &Value) -> Value {
    let Value::Object(o) = schema else { return schema.clone() };
    let mut out = Map::with_capacity(o.len());
    let mut nullable = false;
    for (key, value) in o {
        let key = SCHEMA_SNAKE.iter().find(|(snake, _)| snake == key).map_or(key.as_str(), |(_, camel)| camel);
        match key {
            "type" => match value.as_str().map(str::to_ascii_lowercase) {
                Some(t) if t == "type_unspecified" => {}
                Some(t) => {
                    out.insert("type".into(), Value::String(t));
                }
                None => {
                    out.insert("type".into(), value.clone());
                }
            },
            "nullable" => nullable = value.as_bool() == Some(true),
            "propertyOrdering" => {}
            "properties" => {
                let props = value
                    .as_object()
                    .map(|p| p.iter().map(|(k, v)| (k.clone(), openapi_to_json_schema(v))).collect::<Map<_, _>>());
                out.insert("properties".into(), props.map_or_else(|| value.clone(), Value::Object));
            }
            "items" => {
                out.insert("items".into(), openapi_to_json_schema(value));
            }
            "anyOf" => {
                let list = value.as_array().map(|l| l.iter().map(openapi_to_json_schema).collect::<Vec<_>>());
                out.insert("anyOf".into(), list.map_or_else(|| value.clone(), Value::Array));
            }
            _ => {
                out.insert(key.to_owned(), value.clone());
            }
        }
    }
    if nullable {
        match out.get_mut("type") {
            Some(Value::String(t)) => {
                let t = std::mem::take(t);
                out.insert("type".into(), Value::Array(vec![Value::String(t), Value::String("null".into())]));
            }
            _ => {
                if let Some(Value::Array(any)) = out.get_mut("anyOf") {
                    any.push(serde_json::json!({"type": "null"}));
                }
            }
        }
    }
    Value::Object(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
pub(crate) mod tests {
    //! Helpers every test of this codec uses, and the properties that span its files: round
    //! trips, byte-boundary stream splits and no panic on any input.

    use super::*;
    use crate::convert::ir::*;
    use crate::convert::testkit;
    use crate::protocol::Format;
    use crate::protocol::errors::ErrorKind;
    use crate::protocol::sse::SseEvent;
    use proptest::prelude::*;
    use serde_json::json;

    /// A captured client request (`tests/fixtures/clients/gemini/`).
    macro_rules! fixture {
        ($name:literal) => {
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/clients/gemini/", $name))
        };
    }
    pub(crate) use fixture;

    /// The `body` of a captured request, as bytes.
    pub(crate) fn fixture_body(text: &str) -> Vec<u8> {
        let v: Value = serde_json::from_str(text).unwrap();
        serde_json::to_vec(&v["body"]).unwrap()
    }

    pub(crate) fn dec(v: &Value) -> Request {
        testkit::decode_json(Format::Gemini, v).unwrap()
    }

    pub(crate) fn dec_err(v: &Value) -> ConvertError {
        testkit::decode_json(Format::Gemini, v).unwrap_err()
    }

    pub(crate) fn enc(req: &Request) -> (Value, Vec<String>) {
        testkit::encode_json(Format::Gemini, req)
    }

    pub(crate) fn text(t: &str) -> Part {
        Part::Text(TextPart { text: t.to_owned(), cache_control: None })
    }

    pub(crate) fn msg(role: Role, content: Vec<Part>) -> Message {
        Message { role, content }
    }

    pub(crate) fn ctx() -> EncodeContext {
        EncodeContext {
            request_model: "gemini-2.5-flash".into(),
            id_seed: "seed123".into(),
            created: 1_760_000_000,
            ..EncodeContext::default()
        }
    }

    pub(crate) fn weather_tool() -> Tool {
        Tool {
            name: "get_weather".into(),
            description: Some("Weather for a city".into()),
            input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
                .into(),
            strict: None,
            namespace: None,
        }
    }

    /// Readable views of IR values for snapshots: the Anthropic codec's, shared.
    pub(crate) use crate::convert::anthropic::tests::{request_json, response_json};

    pub(crate) fn decode_chunks(chunks: &[&[u8]]) -> Vec<StreamEvent> {
        testkit::decode_stream(Format::Gemini, chunks)
    }

    pub(crate) fn encode_events(evs: &[StreamEvent]) -> String {
        testkit::encode_stream(Format::Gemini, ctx(), evs)
    }

    /// A Gemini 2.5 stream: thoughts, text in pieces, a call without id but with a signature,
    /// usage with cached and thought tokens on the last chunk.
    pub(crate) const STREAM_TOOLS: &str = "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"**Planning** the call\",\"thought\": true}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 120,\"totalTokenCount\": 120},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"r3sp0nse\"}\r\n\r\n\
data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Let me check \"}],\"role\": \"model\"},\"index\": 0}],\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"r3sp0nse\"}\r\n\r\n\
data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"the w\u{f6}ather.\"}],\"role\": \"model\"},\"index\": 0}],\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"r3sp0nse\"}\r\n\r\n\
data: {\"candidates\": [{\"content\": {\"parts\": [{\"functionCall\": {\"name\": \"get_weather\",\"args\": {\"city\": \"Paris\"}},\"thoughtSignature\": \"CiQB0e2Kb+/x9A==\"}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 120,\"candidatesTokenCount\": 30,\"cachedContentTokenCount\": 100,\"thoughtsTokenCount\": 12,\"totalTokenCount\": 162},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"r3sp0nse\"}\r\n\r\n";

    // --- properties across the files

    fn word() -> impl Strategy<Value = String> {
        "[a-zA-Z][a-zA-Z0-9 ,.!?\u{e9}]{0,20}"
            .prop_map(|s| s.trim_end().to_owned())
            .prop_filter("non-empty", |s| !s.is_empty())
    }

    fn ident() -> impl Strategy<Value = String> {
        "[a-z][a-z_]{0,10}"
    }

    pub(crate) fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            "[a-z_]{0,8}".prop_map(Value::from),
            prop::sample::select(vec![
                "user",
                "model",
                "function",
                "STOP",
                "MAX_TOKENS",
                "SAFETY",
                "AUTO",
                "ANY",
                "NONE",
                "OBJECT",
                "STRING",
                "image/png",
                "application/pdf",
                "audio/wav",
                "application/json",
                "LOW",
                "HIGH",
                "INVALID_ARGUMENT",
                "RESOURCE_EXHAUSTED",
                "files/abc",
                "x__thought__AbC-_",
            ])
            .prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            let keys = prop::sample::select(vec![
                "contents",
                "parts",
                "role",
                "text",
                "thought",
                "thoughtSignature",
                "inlineData",
                "fileData",
                "mimeType",
                "data",
                "fileUri",
                "functionCall",
                "functionResponse",
                "id",
                "name",
                "args",
                "response",
                "tools",
                "functionDeclarations",
                "parameters",
                "parametersJsonSchema",
                "type",
                "properties",
                "items",
                "nullable",
                "toolConfig",
                "functionCallingConfig",
                "mode",
                "allowedFunctionNames",
                "generationConfig",
                "thinkingConfig",
                "thinkingBudget",
                "thinkingLevel",
                "includeThoughts",
                "candidateCount",
                "responseSchema",
                "responseMimeType",
                "systemInstruction",
                "candidates",
                "content",
                "finishReason",
                "usageMetadata",
                "promptTokenCount",
                "promptFeedback",
                "blockReason",
                "error",
                "code",
                "message",
                "status",
                "generateContentRequest",
                "totalTokens",
                "anyOf",
            ])
            .prop_map(str::to_owned);
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map(keys, inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn arb_part() -> impl Strategy<Value = Part> {
        prop_oneof![
            word().prop_map(|t| text(&t)),
            ("[a-z]{1,6}", "[A-Za-z0-9+/]{0,8}")
                .prop_map(|(m, data)| Part::Image(Image::Base64 { media_type: format!("image/{m}"), data })),
            word().prop_map(|url| Part::Image(Image::Url { url })),
            (word(), ident(), arb_json(), prop::option::of(word()))
                .prop_map(|(id, name, input, arguments)| Part::ToolUse { id, name, input, arguments }),
            (word(), prop::collection::vec(word().prop_map(ToolResultContent::Text), 0..3), any::<bool>())
                .prop_map(|(tool_use_id, content, is_error)| Part::ToolResult { tool_use_id, content, is_error }),
            (word(), prop::option::of("[A-Za-z0-9+/]{4,12}"))
                .prop_map(|(text, signature)| Part::Thinking { text, signature }),
            word().prop_map(|data| Part::RedactedThinking { data }),
            (prop::option::of(word()), prop::collection::vec(word(), 0..2), prop::option::of(word()))
                .prop_map(|(id, summary, encrypted_content)| Part::ReasoningItem { id, summary, encrypted_content }),
            word().prop_map(|text| Part::Document { source: DocumentSource::Text { text }, title: None }),
        ]
    }

    fn arb_request() -> impl Strategy<Value = Request> {
        let role = prop_oneof![Just(Role::User), Just(Role::Assistant), Just(Role::System)];
        let message =
            (role, prop::collection::vec(arb_part(), 0..4)).prop_map(|(role, content)| Message { role, content });
        let tool = (ident(), prop::option::of(word()), arb_json()).prop_map(|(name, description, input_schema)| Tool {
            name,
            description,
            input_schema: input_schema.into(),
            strict: None,
            namespace: None,
        });
        let choice = prop_oneof![
            Just(ToolChoice::Auto),
            Just(ToolChoice::Any),
            Just(ToolChoice::None),
            ident().prop_map(ToolChoice::Tool)
        ];
        let effort = prop::sample::select(vec!["none", "minimal", "low", "medium", "high", "xhigh", "??"]);
        let reasoning = (prop::option::of(0u64..50_000), prop::option::of(effort), any::<bool>()).prop_map(
            |(budget_tokens, effort, adaptive)| Reasoning {
                budget_tokens,
                effort: effort.map(Into::into),
                adaptive,
                summary: None,
            },
        );
        (
            prop::collection::vec(message, 0..6),
            prop::collection::vec(tool, 0..3),
            prop::option::of(choice),
            prop::option::of(reasoning),
            (prop::option::of(0u64..100_000), prop::option::of(-1.0f64..3.0), prop::collection::vec(word(), 0..7)),
        )
            .prop_map(|(messages, tools, tool_choice, reasoning, (max_tokens, temperature, stop))| Request {
                model: "m".into(),
                system: vec![TextPart { text: "sys".into(), cache_control: None }],
                messages,
                tools,
                tool_choice,
                reasoning,
                max_tokens,
                temperature,
                stop,
                ..Request::default()
            })
    }

    fn arb_event() -> impl Strategy<Value = StreamEvent> {
        let index = 0usize..4;
        let block = prop_oneof![
            Just(BlockStart::Text),
            Just(BlockStart::Thinking),
            word().prop_map(|data| BlockStart::RedactedThinking { data }),
            (word(), ident()).prop_map(|(id, name)| BlockStart::ToolUse { id, name }),
        ];
        prop_oneof![
            (word(), word()).prop_map(|(id, model)| StreamEvent::Start {
                id,
                model,
                usage: Usage::default(),
                created: None
            }),
            (index.clone(), block).prop_map(|(index, block)| StreamEvent::BlockStart { index, block }),
            (index.clone(), word()).prop_map(|(index, text)| StreamEvent::TextDelta { index, text }),
            (index.clone(), word()).prop_map(|(index, text)| StreamEvent::ThinkingDelta { index, text }),
            (index.clone(), "[A-Za-z0-9]{4}")
                .prop_map(|(index, signature)| StreamEvent::SignatureDelta { index, signature }),
            (index.clone(), "[{}a-z\":]{0,6}")
                .prop_map(|(index, partial_json)| StreamEvent::ToolArgsDelta { index, partial_json }),
            index.prop_map(|index| StreamEvent::BlockStop { index }),
            prop::option::of(0u64..100).prop_map(|o| StreamEvent::Finish {
                stop_reason: Some(StopReason::EndTurn),
                stop_sequence: None,
                usage: Usage { output: o, ..Usage::default() }
            }),
            Just(StreamEvent::End),
            word().prop_map(|message| StreamEvent::Error { kind: ErrorKind::RateLimited, message }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn decoders_never_panic(v in arb_json(), w in arb_json(), status in 100u16..600) {
            let bytes = serde_json::to_vec(&v).unwrap();
            let _ = decode_request(&bytes);
            let _ = decode_request(&serde_json::to_vec(&json!({"contents": [v.clone(), {"role": "model", "parts": [w.clone()]}], "tools": [{"functionDeclarations": [w.clone()]}], "generationConfig": v.clone(), "toolConfig": w.clone()})).unwrap());
            let _ = decode_count_tokens_request(&bytes);
            let _ = decode_response(&bytes);
            let _ = decode_response(&serde_json::to_vec(&json!({"candidates": [{"content": {"parts": [v.clone()]}, "finishReason": w.clone()}], "usageMetadata": w.clone()})).unwrap());
            let _ = decode_count_tokens_response(&bytes);
            let _ = decode_error(status, &bytes);
            let mut d = StreamDecoder::new();
            let mut out = Vec::new();
            for data in [v.to_string(), json!({"candidates": [{"content": {"parts": [w.clone()]}, "finishReason": v.clone()}]}).to_string()] {
                d.decode(&SseEvent { event: None, data: &data }, &mut out);
            }
            d.finish(&mut out);
        }

        #[test]
        fn encoders_never_panic_and_write_json(req in arb_request(), parts in prop::collection::vec(arb_part(), 0..6), evs in prop::collection::vec(arb_event(), 0..16)) {
            if let Ok(e) = encode_request(&req) {
                let v: Value = serde_json::from_slice(&e.body).unwrap();
                let contents = v["contents"].as_array().unwrap();
                prop_assert!(!contents.is_empty());
                // Roles alternate and every function call has its signature.
                for w in contents.windows(2) {
                    prop_assert_ne!(&w[0]["role"], &w[1]["role"]);
                }
                // The request decodes again.
                prop_assert!(decode_request(&e.body).is_ok());
            }
            let _ = encode_count_tokens_request(&req);
            let r = Response { content: parts, ..Response::default() };
            let body = encode_response(&r, &ctx());
            prop_assert!(decode_response(&body).is_ok());
            let sse = encode_events(&evs);
            // Every data line is JSON; an error is the bare JSON object the Gemini CLI reads.
            for line in sse.lines().filter(|l| !l.is_empty()) {
                let json = line.strip_prefix("data: ").unwrap_or(line);
                prop_assert!(serde_json::from_str::<Value>(json).is_ok(), "{}", line);
            }
        }

        #[test]
        fn answers_round_trip(say in word(), think in prop::option::of(word()), calls in prop::collection::vec((ident(), prop::collection::btree_map("[a-z]{1,4}", word(), 0..3)), 0..3), input in 0u64..10_000, output in 0u64..1000, cached in 0u64..100) {
            let mut content = Vec::new();
            if let Some(t) = &think {
                content.push(Part::Thinking { text: t.clone(), signature: None });
            }
            content.push(text(&say));
            for (i, (name, args)) in calls.iter().enumerate() {
                content.push(Part::ToolUse { id: format!("call_{i}"), name: name.clone(), input: json!(args), arguments: None });
            }
            let stop = if calls.is_empty() { StopReason::EndTurn } else { StopReason::ToolUse };
            let r = Response {
                id: "rid".into(),
                model: "gemini-2.5-pro".into(),
                content,
                stop_reason: Some(stop),
                usage: Usage { input: Some(input), output: Some(output), cache_read: Some(cached), ..Usage::default() },
                ..Response::default()
            };
            let back = decode_response(&encode_response(&r, &ctx())).unwrap();
            prop_assert_eq!(&back.content, &r.content);
            prop_assert_eq!(back.stop_reason, Some(stop));
            // Gemini omits a zero cached count.
            prop_assert_eq!((back.usage.input, back.usage.output, back.usage.cache_read.unwrap_or(0)), (Some(input), Some(output), cached));
            prop_assert_eq!(back.model.as_str(), "gemini-2.5-pro");
        }

        #[test]
        fn streams_split_anywhere_decode_the_same(cuts in prop::collection::vec(0usize..2000, 0..8)) {
            let bytes = STREAM_TOOLS.as_bytes();
            let chunks = testkit::split_at_cuts(bytes, &cuts);
            let chunks: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
            prop_assert_eq!(decode_chunks(&chunks), decode_chunks(&[bytes]));
        }

        #[test]
        fn encoded_streams_decode_back(say in prop::collection::vec(word(), 1..4), think in prop::option::of(word()), call in prop::option::of((ident(), prop::collection::btree_map("[a-z]{1,4}", word(), 0..3)))) {
            let mut evs = vec![StreamEvent::Start { id: "rid".into(), model: "gemini-2.5-flash".into(), usage: Usage::default(), created: None }];
            let mut index = 0;
            if let Some(t) = &think {
                evs.extend([StreamEvent::BlockStart { index, block: BlockStart::Thinking }, StreamEvent::ThinkingDelta { index, text: t.clone() }, StreamEvent::BlockStop { index }]);
                index += 1;
            }
            evs.push(StreamEvent::BlockStart { index, block: BlockStart::Text });
            for s in &say {
                evs.push(StreamEvent::TextDelta { index, text: s.clone() });
            }
            evs.push(StreamEvent::BlockStop { index });
            index += 1;
            if let Some((name, args)) = &call {
                evs.extend([
                    StreamEvent::BlockStart { index, block: BlockStart::ToolUse { id: "call_1".into(), name: name.clone() } },
                    StreamEvent::ToolArgsDelta { index, partial_json: json!(args).to_string() },
                    StreamEvent::BlockStop { index },
                ]);
            }
            let stop = if call.is_some() { StopReason::ToolUse } else { StopReason::EndTurn };
            let usage = Usage { input: Some(10), output: Some(5), cache_read: None, cache_write: None, reasoning: None };
            evs.push(StreamEvent::Finish { stop_reason: Some(stop), stop_sequence: None, usage });
            evs.push(StreamEvent::End);
            let sse = encode_events(&evs);
            let back = decode_chunks(&[sse.as_bytes()]);
            prop_assert_eq!(back, evs);
        }
    }
}
