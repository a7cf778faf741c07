//! Complete (non-streaming) answers: a Chat upstream's `chat.completion` to the IR, and the IR to
//! a `chat.completion` for a Chat client; with the stop reasons and usage the stream shares.

use serde::Serialize;
use serde_json::Value;

use super::wire::{ChatUsage, Completion, Content};
use super::{Obj, text};
use crate::convert::ir::*;
use crate::protocol::lenient::{Object, Parse, arguments_string, get, get_str, parse_arguments, read_object_bytes};

/// Chat `finish_reason` → IR, with two repairs common among compatible vendors: `stop` after
/// tool calls means `tool_calls`, and `stop` after a refusal is a refusal.
pub(super) fn stop_reason(raw: Option<&str>, saw_tool: bool, saw_refusal: bool) -> Option<StopReason> {
    match raw? {
        "stop" | "end_turn" | "eos" if saw_tool => Some(StopReason::ToolUse),
        "stop" if saw_refusal => Some(StopReason::Refusal),
        "stop" | "end_turn" | "eos" => Some(StopReason::EndTurn),
        "length" | "max_tokens" => Some(StopReason::MaxTokens),
        "tool_calls" | "function_call" | "tool_use" => Some(StopReason::ToolUse),
        "content_filter" | "refusal" => Some(StopReason::Refusal),
        "stop_sequence" => Some(StopReason::StopSequence),
        _ => None,
    }
}

/// Chat usage → IR. `prompt_tokens` counts every input token, including cache reads (OpenAI
/// `prompt_tokens_details.cached_tokens`, DeepSeek `prompt_cache_hit_tokens`, Kimi top-level
/// `cached_tokens`) and cache writes (`prompt_tokens_details.cache_write_tokens`); the IR's
/// `input` is what remains (DeepSeek's `prompt_cache_miss_tokens` when `prompt_tokens` is absent),
/// as the request record counts it (`observe::usage`; a property test holds the two together).
pub(super) fn decode_usage(u: &ChatUsage) -> Usage {
    let prompt_details = u.prompt_tokens_details.0.as_ref();
    let cached = prompt_details.and_then(|d| d.cached_tokens.0).or(u.prompt_cache_hit_tokens.0).or(u.cached_tokens.0);
    let written = prompt_details.and_then(|d| d.cache_write_tokens.0);
    let input = u.prompt_tokens.0.map(|p| p.saturating_sub(cached.unwrap_or(0)).saturating_sub(written.unwrap_or(0)));
    Usage {
        input: input.or(u.prompt_cache_miss_tokens.0),
        output: u.completion_tokens.0,
        cache_read: cached,
        cache_write: written,
        reasoning: u.completion_tokens_details.0.as_ref().and_then(|d| d.reasoning_tokens.0),
    }
}

/// Upstream non-streaming response body (this protocol) -> IR.
pub fn decode_response(body: &[u8]) -> Result<Response, ConvertError> {
    if let Some(matched) = plain_answer(body) {
        return Ok(matched);
    }
    decode_parsed_response(body)
}

/// The answer when it is of the usual kind, read without a parse (`plain_answer`); `None` for
/// anything else, which [`decode_parsed_response`] reads.
pub fn plain_answer(body: &[u8]) -> Option<Response> {
    crate::protocol::lenient::utf8(body).and_then(super::plain_answer::plain_chat_answer)
}

/// [`decode_response`] through a parse, whatever the answer's shape.
pub fn decode_parsed_response(body: &[u8]) -> Result<Response, ConvertError> {
    decode_response_with(body, Parse::Direct)
}

pub(super) fn decode_response_with(body: &[u8], parse: Parse) -> Result<Response, ConvertError> {
    let mut slot = None;
    let o: Completion<'_> = match read_object_bytes(body, &mut slot, parse) {
        Object::Read(o) => o,
        Object::NotObject(_) => return Err(ConvertError::new("body", "the upstream response is not a JSON object")),
        Object::Malformed(e) => {
            return Err(ConvertError::new("body", format!("the upstream response is not valid JSON: {e}")));
        }
    };
    if o.error.0 {
        return Err(ConvertError::new("error", error_message(body)));
    }
    let choice = o
        .choices
        .objects()
        .find(|c| c.index.as_u64().unwrap_or(0) == 0)
        .ok_or_else(|| ConvertError::new("choices", "the upstream response has no choices"))?;
    let id = o.id.as_str().unwrap_or_default().to_owned();
    let mut content = Vec::new();
    let mut saw_refusal = false;
    if let Some(msg) = &choice.message.0 {
        let reasoning = msg.reasoning_content.as_str().filter(|s| !s.is_empty());
        if let Some(r) = reasoning.or_else(|| msg.reasoning.as_str().filter(|s| !s.is_empty())) {
            content.push(Part::Thinking { text: r.to_owned(), signature: None });
        }
        match &msg.content {
            Content::Text(s) if !s.is_empty() => content.push(text(s.as_ref())),
            // Some vendors (Mistral) answer with content parts.
            Content::Parts(items) => {
                for item in items.objects() {
                    if matches!(item.kind.as_str(), Some("text") | None)
                        && let Some(t) = item.text.as_str().filter(|t| !t.is_empty())
                    {
                        content.push(text(t));
                    }
                }
            }
            _ => {}
        }
        if let Some(r) = msg.refusal.as_str().filter(|s| !s.is_empty()) {
            saw_refusal = true;
            content.push(text(r));
        }
        for (j, c) in msg.tool_calls.objects().enumerate() {
            let f = c.function.0.as_ref();
            let name = f.and_then(|f| f.name.as_str()).unwrap_or_default();
            let (input, arguments) = match f.and_then(|f| f.arguments.as_ref()) {
                Some(Value::String(raw)) => (parse_arguments(raw), Some(raw.clone())),
                Some(v) => (v.clone(), None),
                None => (Value::Object(Obj::new()), Some(String::new())),
            };
            let call_id = c.id.as_str().filter(|s| !s.is_empty()).map_or_else(|| synth_call_id(&id, j), str::to_owned);
            content.push(Part::ToolUse { id: call_id, name: name.to_owned(), input, arguments });
        }
        if let Some(fc) = &msg.function_call.0 {
            let raw = fc.arguments.as_str().unwrap_or_default();
            content.push(Part::ToolUse {
                id: synth_call_id(&id, msg.tool_calls.0.len()),
                name: fc.name.as_str().unwrap_or_default().to_owned(),
                input: parse_arguments(raw),
                arguments: Some(raw.to_owned()),
            });
        }
    }
    let saw_tool = content.iter().any(|p| matches!(p, Part::ToolUse { .. }));
    Ok(Response {
        id,
        model: o.model.as_str().unwrap_or_default().to_owned(),
        stop_reason: stop_reason(choice.finish_reason.as_str().filter(|r| !r.is_empty()), saw_tool, saw_refusal),
        stop_sequence: None,
        usage: o.usage.0.as_ref().map(decode_usage).unwrap_or_default(),
        created: o.created.as_u64(),
        content,
    })
}

/// The message of an answer that is an error (rare, so read from a `Value`).
fn error_message(body: &[u8]) -> String {
    let v: Option<Value> = crate::protocol::lenient::from_json(body).ok();
    let err = v.as_ref().and_then(Value::as_object).and_then(|o| get(o, "error"));
    err.and_then(|e| e.as_object().and_then(|e| get_str(e, "message")).or_else(|| e.as_str()))
        .unwrap_or("the upstream returned an error")
        .to_owned()
}

pub(super) fn synth_call_id(response_id: &str, n: usize) -> String {
    let clean: String = response_id.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').collect();
    if clean.is_empty() { format!("call_{n}") } else { format!("call_{clean}_{n}") }
}

#[derive(Serialize)]
struct CompletionOut<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [CompletionChoiceOut; 1],
    usage: UsageOut,
}

#[derive(Serialize)]
struct CompletionChoiceOut {
    index: u32,
    message: CompletionMessageOut,
    logprobs: Option<()>,
    finish_reason: &'static str,
}

#[derive(Serialize)]
struct CompletionMessageOut {
    role: &'static str,
    content: Option<String>,
    refusal: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<ToolCallOut>>,
    /// Thinking, DeepSeek-style (OpenAI SDKs ignore the extra field; DeepSeek-aware clients show it).
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<String>,
}

#[derive(Serialize)]
struct ToolCallOut {
    id: String,
    r#type: &'static str,
    function: FunctionOut,
}

#[derive(Serialize)]
struct FunctionOut {
    name: String,
    arguments: String,
}

#[derive(Serialize)]
pub(super) struct UsageOut {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
    prompt_tokens_details: PromptDetailsOut,
    completion_tokens_details: CompletionDetailsOut,
}

#[derive(Serialize)]
struct PromptDetailsOut {
    cached_tokens: u64,
    /// Only when the source reported cache writes (Anthropic `cache_creation_input_tokens`).
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_write_tokens: Option<u64>,
}

#[derive(Serialize)]
struct CompletionDetailsOut {
    reasoning_tokens: u64,
}

/// IR usage → Chat: `prompt_tokens` counts every input token — uncached, cache reads and
/// cache writes (billed input too) — `cached_tokens` the cache reads and `cache_write_tokens`
/// the cache writes.
pub(super) fn usage_out(u: &Usage) -> UsageOut {
    let cached = u.cache_read.unwrap_or(0);
    let prompt = u.input.unwrap_or(0).saturating_add(cached).saturating_add(u.cache_write.unwrap_or(0));
    let completion = u.output.unwrap_or(0);
    UsageOut {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: prompt.saturating_add(completion),
        prompt_tokens_details: PromptDetailsOut { cached_tokens: cached, cache_write_tokens: u.cache_write },
        completion_tokens_details: CompletionDetailsOut { reasoning_tokens: u.reasoning.unwrap_or(0) },
    }
}

pub(super) fn finish_reason(stop: Option<StopReason>, has_tool_calls: bool) -> &'static str {
    match stop {
        Some(StopReason::EndTurn | StopReason::StopSequence | StopReason::PauseTurn) | None if has_tool_calls => {
            "tool_calls"
        }
        Some(StopReason::EndTurn | StopReason::StopSequence | StopReason::PauseTurn) | None => "stop",
        Some(StopReason::MaxTokens) => "length",
        Some(StopReason::ToolUse) => "tool_calls",
        Some(StopReason::Refusal) => "content_filter",
    }
}

/// IR -> response body for a client of this protocol.
pub fn encode_response(resp: &Response, ctx: &EncodeContext) -> Vec<u8> {
    let mut content = String::new();
    let mut reasoning: Vec<&str> = Vec::new();
    let mut calls = Vec::new();
    for p in &resp.content {
        match p {
            Part::Text(t) => content.push_str(&t.text),
            Part::Thinking { text, .. } => reasoning.push(text),
            Part::ReasoningItem { summary, .. } => reasoning.extend(summary.iter().map(String::as_str)),
            Part::ToolUse { id, name, input, arguments } => calls.push(ToolCallOut {
                id: id.clone(),
                r#type: "function",
                function: FunctionOut { name: name.clone(), arguments: arguments_string(input, arguments.as_deref()) },
            }),
            _ => {}
        }
    }
    let id = if resp.id.is_empty() { format!("chatcmpl-{}", ctx.id_seed) } else { resp.id.clone() };
    let model = if resp.model.is_empty() { ctx.request_model.as_str() } else { resp.model.as_str() };
    let has_calls = !calls.is_empty();
    let out = CompletionOut {
        id: &id,
        object: "chat.completion",
        created: resp.created.unwrap_or(ctx.created),
        model,
        choices: [CompletionChoiceOut {
            index: 0,
            message: CompletionMessageOut {
                role: "assistant",
                content: if content.is_empty() && has_calls { None } else { Some(content) },
                refusal: None,
                tool_calls: has_calls.then_some(calls),
                reasoning_content: (!reasoning.is_empty()).then(|| reasoning.join("\n\n")),
            },
            logprobs: None,
            finish_reason: finish_reason(resp.stop_reason, has_calls),
        }],
        usage: usage_out(&resp.usage),
    };
    answer_json(&out, resp)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::convert::openai_chat::tests::*;
    use insta::assert_json_snapshot;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn arb_completion() -> BoxedStrategy<Value> {
        let part = prop_oneof![
            4 => arb_object(vec![
                ("type", prop_oneof![Just(json!("text")), Just(json!("image_url")), arb_scalar()].boxed()),
                ("text", arb_text().boxed()),
            ]),
            1 => arb_scalar(),
        ];
        let content = prop_oneof![
            3 => arb_text(),
            1 => prop::collection::vec(part, 0..3).prop_map(Value::Array),
        ];
        let arguments = prop_oneof![
            Just(json!("{\"city\":\"Paris\"}")),
            Just(json!("not json")),
            Just(json!({"city": "Rome"})),
            arb_scalar(),
        ];
        let function = prop_oneof![
            4 => arb_object(vec![("name", arb_text().boxed()), ("arguments", arguments.boxed())]),
            1 => arb_scalar(),
        ];
        let id = prop_oneof![Just(json!("call_a")), Just(json!("")), arb_scalar()];
        let call =
            prop_oneof![4 => arb_object(vec![("id", id.boxed()), ("function", function.boxed())]), 1 => arb_scalar()];
        let message = prop_oneof![
            5 => arb_object(vec![
                ("content", content.boxed()),
                ("refusal", arb_text().boxed()),
                ("reasoning_content", arb_text().boxed()),
                ("reasoning", arb_text().boxed()),
                ("tool_calls", prop_oneof![3 => prop::collection::vec(call, 0..3).prop_map(Value::Array), 1 => arb_scalar()].boxed()),
                ("function_call", arb_function()),
            ]),
            1 => arb_scalar(),
        ];
        let reason = prop_oneof![Just(json!("stop")), Just(json!("tool_calls")), Just(json!("")), arb_scalar()];
        let choice = prop_oneof![
            5 => arb_object(vec![("index", arb_count().boxed()), ("message", message.boxed()), ("finish_reason", reason.boxed())]),
            1 => arb_scalar(),
        ];
        let usage = arb_chat_usage();
        let error =
            prop_oneof![Just(json!({"message": "quota"})), Just(json!("plain error")), Just(json!({"code": 1})),];
        arb_object(vec![
            ("id", prop_oneof![Just(json!("chatcmpl-9")), arb_scalar()].boxed()),
            ("model", prop_oneof![Just(json!("gpt-4.1")), arb_scalar()].boxed()),
            ("created", arb_count().boxed()),
            (
                "choices",
                prop_oneof![4 => prop::collection::vec(choice, 0..3).prop_map(Value::Array), 1 => arb_scalar()].boxed(),
            ),
            ("usage", usage.boxed()),
            ("error", prop::option::weighted(0.1, error).prop_map(|e| e.unwrap_or(Value::Null)).boxed()),
        ])
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        /// The direct read of an answer and the read through a `Value` decode alike (the same
        /// answer or the same error), whatever types its fields have.
        #[test]
        fn an_answer_read_directly_decodes_as_one_read_through_a_value(answer in arb_completion()) {
            let body = serde_json::to_vec(&answer).unwrap();
            prop_assert_eq!(decode_response_with(&body, Parse::Direct), decode_response_with(&body, Parse::ViaValue));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        /// The usage a converted answer reports is the usage its record stores
        /// (`observe::usage`): the client and the dashboard never disagree on the tokens.
        #[test]
        fn a_converted_answer_reports_the_usage_its_record_stores(usage in arb_chat_usage()) {
            let body = serde_json::to_vec(&json!({
                "id": "chatcmpl-u", "model": "m",
                "choices": [{"index": 0, "message": {"content": "hi"}, "finish_reason": "stop"}],
                "usage": usage,
            })).unwrap();
            let converted = decode_response(&body).unwrap().usage;
            let recorded = crate::observe::usage::read_answer(crate::protocol::Format::Openai, &body).tokens;
            prop_assert_eq!(
                (converted.input, converted.output, converted.cache_read, converted.cache_write),
                (recorded.input, recorded.output, recorded.cache_read, recorded.cache_write)
            );
        }
    }

    #[test]
    fn an_answer_with_a_key_twice_reads_its_last_as_a_value_does() {
        let body = br#"{"id":"a","choices":[{"index":0,"message":{"content":"first"}}],"choices":[{"index":0,"message":{"content":"last"}}]}"#;
        let r = decode_response(body).unwrap();
        assert_eq!(r.content, vec![text("last")]);
        let mut slot = None;
        let plain = br#"{"id":"a","choices":[{"index":0,"message":{"content":"hi"}}]}"#;
        assert!(matches!(read_object_bytes::<Completion<'_>>(plain, &mut slot, Parse::Direct), Object::Read(_)));
        assert!(slot.is_none(), "a plain answer must not build a Value");
    }

    fn dresp(v: Value) -> Response {
        decode_response(&serde_json::to_vec(&v).unwrap()).unwrap()
    }

    #[test]
    fn decode_response_text_with_cache() {
        let r = dresp(json!({
            "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG", "object": "chat.completion", "created": 1741570283,
            "model": "gpt-4o-2024-08-06",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello there.", "refusal": null, "annotations": []}, "logprobs": null, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1117, "completion_tokens": 46, "total_tokens": 1163,
                      "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
                      "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
            "service_tier": "default", "system_fingerprint": "fp_fc9f1d7035"
        }));
        assert_eq!(r.usage.input, Some(93));
        assert_eq!(r.usage.cache_read, Some(1024));
        assert_json_snapshot!("decode_response_text_cache", j_resp(&r));
    }

    #[test]
    fn decode_response_tool_calls() {
        let r = dresp(json!({
            "id": "chatcmpl-abc", "object": "chat.completion", "created": 1699896916, "model": "gpt-4.1",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": "{\"tz\":\"Europe/Paris\"}"}}
            ]}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99}
        }));
        assert_json_snapshot!("decode_response_tool_calls", j_resp(&r));
    }

    #[test]
    fn decode_response_deepseek_reasoning() {
        let r = dresp(json!({
            "id": "930c60df-bf64-41c9-a88e-3ec75f81e00e", "object": "chat.completion", "created": 1737000000, "model": "deepseek-reasoner",
            "choices": [{"index": 0, "message": {"role": "assistant", "reasoning_content": "9.11 < 9.8 because 0.11 < 0.8.", "content": "9.8 is greater."}, "logprobs": null, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 200, "completion_tokens": 120, "total_tokens": 320,
                      "prompt_tokens_details": {"cached_tokens": 128}, "prompt_cache_hit_tokens": 128, "prompt_cache_miss_tokens": 72,
                      "completion_tokens_details": {"reasoning_tokens": 100}}
        }));
        assert_json_snapshot!("decode_response_deepseek_reasoning", j_resp(&r));
        // OpenAI's cache writes are part of prompt_tokens too.
        let r = dresp(json!({"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 600, "cache_write_tokens": 300}}}));
        assert_eq!((r.usage.input, r.usage.cache_read, r.usage.cache_write), (Some(100), Some(600), Some(300)));
        // DeepSeek's own counters alone are enough.
        let r = dresp(json!({"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 200, "completion_tokens": 1, "prompt_cache_hit_tokens": 150, "prompt_cache_miss_tokens": 50}}));
        assert_eq!((r.usage.input, r.usage.cache_read), (Some(50), Some(150)));
    }

    #[test]
    fn decode_response_finish_reasons() {
        let stop = |reason: Value, message: Value| {
            dresp(json!({"id": "x", "model": "m", "choices": [{"index": 0, "message": message, "finish_reason": reason}]})).stop_reason
        };
        let plain = json!({"role": "assistant", "content": "x"});
        let with_tool = json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]});
        assert_eq!(stop(json!("stop"), plain.clone()), Some(StopReason::EndTurn));
        assert_eq!(stop(json!("length"), plain.clone()), Some(StopReason::MaxTokens));
        assert_eq!(stop(json!("tool_calls"), with_tool.clone()), Some(StopReason::ToolUse));
        assert_eq!(
            stop(json!("stop"), with_tool.clone()),
            Some(StopReason::ToolUse),
            "vendors that say stop after tool calls"
        );
        assert_eq!(stop(json!("content_filter"), plain.clone()), Some(StopReason::Refusal));
        assert_eq!(
            stop(json!("function_call"), json!({"content": null, "function_call": {"name": "f", "arguments": "{}"}})),
            Some(StopReason::ToolUse)
        );
        assert_eq!(stop(json!("stop"), json!({"content": null, "refusal": "I can't."})), Some(StopReason::Refusal));
        assert_eq!(stop(json!("insufficient_system_resource"), plain.clone()), None);
        assert_eq!(stop(Value::Null, plain), None);
    }

    #[test]
    fn decode_response_errors() {
        let e = decode_response(br#"{"error":{"message":"boom","type":"server_error"}}"#).unwrap_err();
        assert_eq!((e.field.as_str(), e.message.as_str()), ("error", "boom"));
        assert_eq!(decode_response(br#"{"choices":[]}"#).unwrap_err().field, "choices");
        assert_eq!(decode_response(b"nope").unwrap_err().field, "body");
        // Unparseable arguments keep the raw string; input becomes {}.
        let r = dresp(
            json!({"choices": [{"message": {"tool_calls": [{"function": {"name": "f", "arguments": "{\"a\":"}}]}, "finish_reason": "tool_calls"}]}),
        );
        assert_eq!(
            j_part(&r.content[0]),
            json!({"tool_use": {"id": "call_0", "name": "f", "input": {}, "arguments": "{\"a\":"}})
        );
    }

    fn eresp(r: &Response, c: &EncodeContext) -> Value {
        serde_json::from_slice(&encode_response(r, c)).unwrap()
    }

    #[test]
    fn encode_response_text_and_cache_usage() {
        let r = Response {
            id: "msg_01XFDUDYJgAACzvnptvVoYEL".into(),
            model: "claude-sonnet-4-5-20250929".into(),
            content: vec![text("Hello, "), text("world.")],
            stop_reason: Some(StopReason::EndTurn),
            stop_sequence: None,
            usage: Usage {
                input: Some(25),
                output: Some(12),
                cache_read: Some(1000),
                cache_write: Some(200),
                reasoning: None,
            },
            created: None,
        };
        let v = eresp(&r, &ctx());
        assert_eq!(v["usage"]["prompt_tokens"], 1225);
        assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 1000);
        assert_json_snapshot!("encode_response_text_cache", v);
    }

    #[test]
    fn encode_response_tools_and_thinking() {
        let r = Response {
            id: "msg_1".into(),
            model: "claude-opus-4-1".into(),
            content: vec![
                Part::Thinking { text: "Need the weather.".into(), signature: Some("sig".into()) },
                Part::ToolUse {
                    id: "toolu_1".into(),
                    name: "get_weather".into(),
                    input: json!({"city": "Paris"}),
                    arguments: None,
                },
                Part::ToolUse {
                    id: "toolu_2".into(),
                    name: "get_time".into(),
                    input: json!({"tz": "CET"}),
                    arguments: Some("{\"tz\": \"CET\"}".into()),
                },
            ],
            stop_reason: Some(StopReason::ToolUse),
            usage: Usage { input: Some(10), output: Some(30), ..Usage::default() },
            ..Response::default()
        };
        let v = eresp(&r, &ctx());
        assert_eq!(v["choices"][0]["message"]["content"], Value::Null);
        assert_json_snapshot!("encode_response_tools_thinking", v);
    }

    #[test]
    fn encode_response_defaults_and_finish_reasons() {
        let base = Response { content: vec![text("x")], ..Response::default() };
        let v = eresp(&base, &ctx());
        assert_eq!(v["id"], "chatcmpl-seed123");
        assert_eq!(v["model"], "client-model");
        assert_eq!(v["created"], 1_700_000_000);
        assert_json_snapshot!("encode_response_defaults", v);
        let reason = |s: Option<StopReason>| {
            let r = Response { stop_reason: s, ..base.clone() };
            eresp(&r, &ctx())["choices"][0]["finish_reason"].as_str().unwrap().to_owned()
        };
        assert_eq!(reason(Some(StopReason::EndTurn)), "stop");
        assert_eq!(reason(Some(StopReason::StopSequence)), "stop");
        assert_eq!(reason(Some(StopReason::PauseTurn)), "stop");
        assert_eq!(reason(Some(StopReason::MaxTokens)), "length");
        assert_eq!(reason(Some(StopReason::ToolUse)), "tool_calls");
        assert_eq!(reason(Some(StopReason::Refusal)), "content_filter");
        assert_eq!(reason(None), "stop");
    }
}
