//! Property tests for every parser that sees untrusted bytes (a client's request, an upstream's
//! answer or stream, a header): whatever the input, none may panic, and the ones with an
//! invariant keep it. Two kinds of input: arbitrary bytes, and JSON trees built from the
//! protocols' own keys and values, which get past the JSON parse into the decoders' logic.
//!
//! `CCMESH_FUZZ_CASES` sets the cases per property (default 64, enough for every test run);
//! `bench/fuzz` runs them longer, in release, for a bounded time.

use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{Map, Value};

use crate::protocol::Format;
use crate::protocol::sse::{SseEvent, SseScanner};

const FORMATS: [Format; 4] = [Format::Anthropic, Format::Openai, Format::Responses, Format::Gemini];

fn config() -> Config {
    let cases = std::env::var("CCMESH_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64);
    Config { cases, failure_persistence: None, ..Config::default() }
}

/// Keys and strings the four protocols use, so generated documents look like theirs.
const KEYS: &[&str] = &[
    "model",
    "stream",
    "messages",
    "role",
    "content",
    "type",
    "text",
    "system",
    "tools",
    "tool_choice",
    "name",
    "input",
    "id",
    "tool_use_id",
    "tool_call_id",
    "tool_calls",
    "function",
    "arguments",
    "parameters",
    "input_schema",
    "max_tokens",
    "thinking",
    "signature",
    "data",
    "source",
    "image_url",
    "url",
    "usage",
    "input_tokens",
    "output_tokens",
    "choices",
    "delta",
    "finish_reason",
    "stop_reason",
    "index",
    "error",
    "message",
    "code",
    "status",
    "output",
    "item",
    "response",
    "contents",
    "parts",
    "functionCall",
    "functionResponse",
    "candidates",
    "finishReason",
    "usageMetadata",
    "promptTokenCount",
    "generationConfig",
    "systemInstruction",
    "inlineData",
    "mimeType",
    "call_id",
    "instructions",
    "reasoning",
    "summary",
    "encrypted_content",
    "previous_response_id",
    "content_block",
    "cache_control",
    "metadata",
    "user_id",
];
const WORDS: &[&str] = &[
    "user",
    "assistant",
    "system",
    "tool",
    "model",
    "function",
    "developer",
    "text",
    "image",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "message",
    "function_call",
    "function_call_output",
    "input_text",
    "output_text",
    "reasoning",
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "text_delta",
    "input_json_delta",
    "thinking_delta",
    "signature_delta",
    "response.created",
    "response.output_text.delta",
    "response.completed",
    "stop",
    "end_turn",
    "tool_calls",
    "length",
    "STOP",
    "MAX_TOKENS",
    "SAFETY",
    "auto",
    "none",
    "required",
    "",
    "{\"a\":",
    "\u{0}",
    "é😀",
];

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        prop::sample::select(WORDS).prop_map(|w| Value::String(w.to_string())),
        ".{0,24}".prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 96, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..8)
                .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect::<Map<_, _>>())),
        ]
    })
}

/// A JSON document as bytes: mostly an object (what every API sends), sometimes anything.
fn json_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::collection::vec((prop::sample::select(KEYS), json_value()), 0..10).prop_map(|kv| {
            let map: Map<String, Value> = kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            serde_json::to_vec(&Value::Object(map)).unwrap_or_default()
        }),
        1 => json_value().prop_map(|v| serde_json::to_vec(&v).unwrap_or_default()),
        1 => any::<Vec<u8>>(),
    ]
}

/// Bytes that look like an SSE stream: event and data lines, comments, CR / LF / CRLF endings,
/// split anywhere, plus raw noise.
fn sse_bytes() -> impl Strategy<Value = Vec<u8>> {
    let line = prop_oneof![
        prop::sample::select(WORDS).prop_map(|w| format!("event: {w}")),
        json_value().prop_map(|v| format!("data: {v}")),
        ".{0,16}".prop_map(|s| format!("data:{s}")),
        Just("data: [DONE]".to_string()),
        Just(": keep-alive".to_string()),
        Just(String::new()),
        ".{0,12}".prop_map(|s| s),
    ];
    let ending = prop::sample::select(&["\n", "\r\n", "\r", "\n\n"][..]);
    prop_oneof![
        5 => prop::collection::vec((line, ending), 0..24)
            .prop_map(|ls| ls.into_iter().flat_map(|(l, e)| [l, e.to_string()]).collect::<String>().into_bytes()),
        1 => any::<Vec<u8>>(),
    ]
}

/// Cut `bytes` into chunks at the given points.
fn chunks(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.sort_unstable();
    let mut out = Vec::new();
    let mut at = 0;
    for p in points {
        out.push(bytes[at..p].to_vec());
        at = p;
    }
    out.push(bytes[at..].to_vec());
    out
}

fn scan_all(chunks: &[Vec<u8>], limit: Option<usize>) -> (Vec<(Option<String>, String)>, bool) {
    let mut scanner = limit.map_or_else(SseScanner::new, SseScanner::with_limit);
    let mut events = Vec::new();
    for c in chunks {
        scanner.feed(c, |e| events.push((e.event.map(str::to_string), e.data.to_string())));
    }
    (events, scanner.overflowed())
}

proptest! {
    #![proptest_config(config())]

    /// The SSE scanner: the same events however the bytes are split, and a size limit that holds.
    #[test]
    fn fuzz_sse_scanner_is_split_independent(bytes in sse_bytes(), cuts in prop::collection::vec(any::<usize>(), 0..8)) {
        let whole = scan_all(std::slice::from_ref(&bytes), None);
        let split = scan_all(&chunks(&bytes, &cuts), None);
        prop_assert_eq!(&whole, &split);
        let (events, overflowed) = scan_all(&chunks(&bytes, &cuts), Some(64));
        prop_assert!(events.iter().all(|(_, d)| d.len() <= 64 + 8) || overflowed);
    }

    #[test]
    fn fuzz_retry_after(value in prop_oneof![".{0,40}", "[0-9.]{0,30}", "[A-Za-z]{3}, [0-9]{2} [A-Za-z]{3} [0-9]{4} [0-9:]{8} GMT"]) {
        let now = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
        let _ = crate::breaker::retry_after::parse_retry_after(&value, now);
    }

    /// The request peek: never panics; a model span, when found, is the model's JSON string,
    /// and replacing it keeps the document valid JSON.
    #[test]
    fn fuzz_request_peek_and_model_splice(body in json_bytes(), model in ".{0,20}") {
        if let Ok(peek) = crate::proxy::request::peek(&body)
            && let Some(span) = peek.model_span.clone()
        {
            prop_assert!(span.end <= body.len());
            let spliced = crate::proxy::request::splice_model(&bytes::Bytes::from(body.clone()), span, &model);
            let v: Value = serde_json::from_slice(&spliced).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(v.get("model").and_then(Value::as_str), Some(model.as_str()));
        }
    }

    /// The request peek reads every body as serde_json does, the fast scan included; and what
    /// the scan accepts, serde_json accepts.
    #[test]
    fn fuzz_request_peek_scan_against_serde(body in json_bytes()) {
        if let Ok(text) = std::str::from_utf8(&body)
            && crate::protocol::json_scan::top_level_members(text, ["model", "metadata"]).is_some()
        {
            prop_assert!(serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok());
        }
        if crate::protocol::lenient::is_object(&body) {
            let (scanned, parsed) = (crate::proxy::request::peek(&body), crate::proxy::request::peek_parsed(&body));
            match (scanned, parsed) {
                (Ok(a), Ok(b)) => {
                    prop_assert!(crate::proxy::request::tests::tools_span_is_where_serde_finds_tools(&body, &a.tools_span));
                    prop_assert_eq!(crate::proxy::request::Peek { tools_span: None, ..a }, b);
                }
                (Err(a), Err(b)) => prop_assert_eq!((a.code, a.message), (b.code, b.message)),
                (a, b) => prop_assert!(false, "{:?} against {:?}", a.map(|_| ()), b.map(|_| ())),
            }
        }
    }

    /// The explicit-endpoint selectors: header, query string and `@name/model`.
    #[test]
    fn fuzz_explicit_endpoint(header in proptest::option::of(".{0,20}"), query in proptest::option::of(".{0,40}"), model in proptest::option::of("@?.{0,20}")) {
        let all = crate::routing::tests::endpoints(&["kimi", "glm", "a/b"]);
        let route = crate::protocol::Route::Protocol(crate::protocol::Protocol::Claude);
        let _ = crate::proxy::endpoint_selector(query.as_deref());
        let _ = crate::routing::resolve_explicit(&all, route, header.as_deref(), query.as_deref(), model.as_deref());
    }

    /// Every protocol's decoders: requests, answers, errors, token counts.
    #[test]
    fn fuzz_decoders(body in json_bytes(), status in 100u16..600) {
        for format in FORMATS {
            let _ = crate::convert::decode_request(format, &body);
            let _ = crate::convert::decode_response(format, &body);
            let _ = crate::convert::decode_error(format, status, &body);
            let _ = crate::convert::decode_count_tokens_response(format, &body);
            let _ = crate::observe::usage::from_body(format, &body);
            let read = crate::observe::usage::read_answer(format, &body);
            let _ = crate::proxy::outcome::not_an_answer(&body, read.envelope.as_ref());
        }
        let _ = crate::proxy::outcome::model_unknown(status, &body, &["claude-x", ""]);
        let _ = crate::proxy::outcome::context_window_exceeded(status, &body);
    }

    /// A decoded request re-encoded for every format (what a converted request goes through).
    #[test]
    fn fuzz_request_conversion(body in json_bytes()) {
        for from in FORMATS {
            if let Ok(request) = crate::convert::decode_request(from, &body) {
                for to in FORMATS {
                    let _ = crate::convert::encode_request(to, &request);
                }
            }
        }
    }

    /// Every stream decoder, classifier, usage reader and converter, event by event; and the
    /// resume's rebuild of what a client received.
    #[test]
    fn fuzz_stream_events(events in prop::collection::vec((proptest::option::of(prop::sample::select(WORDS)), json_value()), 0..16), noise in sse_bytes()) {
        let data: Vec<(Option<&str>, String)> = events.iter().map(|(n, v)| (*n, v.to_string())).collect();
        for format in FORMATS {
            let mut decoder = crate::convert::StreamDecoder::new(format);
            let mut ctx = crate::protocol::stream_events::StreamContext::default();
            let mut usage = crate::observe::usage::StreamUsage::default();
            let mut out = Vec::new();
            for to in FORMATS {
                let mut conversion = crate::convert::StreamConversion::new(format, to, Default::default());
                let mut bytes = Vec::new();
                for (name, d) in &data {
                    let ev = SseEvent { event: *name, data: d };
                    conversion.event(&ev, &mut bytes);
                }
                conversion.finish(&mut bytes);
            }
            for (name, d) in &data {
                let ev = SseEvent { event: *name, data: d };
                let _ = crate::protocol::stream_events::inspect_and_observe(format, &ev, &mut ctx);
                usage.observe(format, &ev);
                decoder.decode(&ev, &mut out);
            }
            let _ = crate::proxy::resume::Delivered::from_client_bytes(format, &noise);
            let _ = crate::proxy::resume::continuation_body(format, &noise, "the delivered text ", true);
        }
    }
}
