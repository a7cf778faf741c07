//! OpenAI Chat Completions codec: `POST /v1/chat/completions` requests, `chat.completion`
//! responses, `chat.completion.chunk` streams (ending in `data: [DONE]`) and
//! `{"error":{"message","type","param","code"}}` error bodies, to and from the IR.
//!
//! The mapping tables, and the reason for every lossy or refused case, are in
//! `docs/protocols/openai_chat.md`. The decisions that shape the code:
//!
//! - **Decoding a client request** keeps everything the IR can hold and records a [`Loss`] for
//!   what it cannot (sampling hints such as `seed`, `logit_bias`, `store`); it refuses with a
//!   [`ConvertError`] only what would change the answer's meaning: `n > 1`, audio in or out,
//!   files by `file_id`, the deprecated `functions` API (the answer could not be returned in
//!   its `function_call` shape), custom (grammar) tool calls.
//! - **Consecutive assistant messages are merged** (Codex CLI 0.80 sends the tool call and its
//!   preamble text as two assistant messages before the `tool` message); the merged turn keeps
//!   the text before the tool calls, as one Chat assistant message would.
//! - **Encoding for a Chat upstream** aims at the widest set of OpenAI-compatible vendors
//!   (DeepSeek, GLM, Kimi, Qwen, vLLM): `system` rather than `developer`, string content when a
//!   message is only text, `max_tokens` unless the model is an OpenAI reasoning model, no
//!   `reasoning_content` in the history.
//! - **Streams** are translated chunk by chunk; the only state is the open blocks, the
//!   tool-call index map and the usage seen so far.
//!
//! One concern per file, as in every codec: `request` (`decode`, `encode`), `response`, `stream`
//! (`decode`, `encode`), `error`; `wire` holds what the two decoders read of an upstream's answer
//! and chunks. This file holds the little that several of them use.
//!
//! [`Loss`]: super::ir::Loss
//! [`ConvertError`]: super::ir::ConvertError

mod error;
mod plain_answer;
mod request;
mod response;
mod stream;
mod wire;

pub use error::{decode_error, encode_error};
pub use request::{decode_request, encode_request};
pub use response::{decode_parsed_response, decode_response, encode_response, plain_answer};
pub use stream::{StreamDecoder, StreamEncoder};

use serde_json::{Map, Value};

use super::ir::{Part, TextPart};

type Obj = Map<String, Value>;

fn text(t: impl Into<String>) -> Part {
    Part::Text(TextPart { text: t.into(), cache_control: None })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    //! Helpers every test of this codec uses, and the properties that span its files: round
    //! trips and no panic on any well-typed input.

    use super::*;
    use crate::convert::ir::*;
    use crate::protocol::errors::ErrorKind;
    use crate::protocol::sse::{SseEvent, SseScanner};
    use proptest::prelude::*;
    use serde_json::{Value, json};

    pub(super) fn body_of(fixture: &str) -> Value {
        serde_json::from_str::<Value>(fixture).unwrap()["body"].clone()
    }

    pub(super) fn dec(v: &Value) -> Request {
        decode_request(&serde_json::to_vec(v).unwrap()).unwrap()
    }

    pub(super) fn dec_err(v: &Value) -> ConvertError {
        decode_request(&serde_json::to_vec(v).unwrap()).unwrap_err()
    }

    pub(super) fn enc(req: &Request) -> (Value, Vec<Loss>) {
        let e = encode_request(req).unwrap();
        (serde_json::from_slice(&e.body).unwrap(), e.losses)
    }

    pub(super) fn ctx() -> EncodeContext {
        EncodeContext {
            request_model: "client-model".into(),
            include_usage: true,
            created: 1_700_000_000,
            id_seed: "seed123".into(),
            ..EncodeContext::default()
        }
    }

    pub(super) fn j_image(i: &Image) -> Value {
        match i {
            Image::Base64 { media_type, data } => json!({"base64": {"media_type": media_type, "data": data}}),
            Image::Url { url } => json!({"url": url}),
        }
    }

    pub(super) fn j_part(p: &Part) -> Value {
        match p {
            Part::Text(t) => match &t.cache_control {
                Some(c) => json!({"text": t.text, "cache_control": c}),
                None => json!({"text": t.text}),
            },
            Part::Image(i) => json!({"image": j_image(i)}),
            Part::ToolUse { id, name, input, arguments } => {
                json!({"tool_use": {"id": id, "name": name, "input": input, "arguments": arguments}})
            }
            Part::ToolResult { tool_use_id, content, is_error } => {
                let content: Vec<Value> = content
                    .iter()
                    .map(|c| match c {
                        ToolResultContent::Text(t) => json!({"text": t}),
                        ToolResultContent::Image(i) => json!({"image": j_image(i)}),
                    })
                    .collect();
                json!({"tool_result": {"tool_use_id": tool_use_id, "is_error": is_error, "content": content}})
            }
            Part::Thinking { text, signature } => json!({"thinking": {"text": text, "signature": signature}}),
            Part::RedactedThinking { data } => json!({"redacted_thinking": data}),
            Part::ReasoningItem { id, summary, encrypted_content } => {
                json!({"reasoning_item": {"id": id, "summary": summary, "encrypted_content": encrypted_content}})
            }
            Part::Document { source, title } => {
                let source = match source {
                    DocumentSource::Base64 { media_type, data } => {
                        json!({"base64": {"media_type": media_type, "data": data}})
                    }
                    DocumentSource::Url { url } => json!({"url": url}),
                    DocumentSource::Text { text } => json!({"text": text}),
                };
                json!({"document": {"source": source, "title": title}})
            }
        }
    }

    pub(super) fn j_usage(u: &Usage) -> Value {
        json!({"input": u.input, "output": u.output, "cache_read": u.cache_read, "cache_write": u.cache_write, "reasoning": u.reasoning})
    }

    pub(super) fn j_losses(l: &[Loss]) -> Value {
        Value::Array(l.iter().map(|l| json!({"field": l.field, "note": l.note})).collect())
    }

    pub(super) fn j_req(r: &Request) -> Value {
        let role = |r: Role| match r {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::System => "system",
        };
        json!({
            "model": r.model,
            "system": r.system.iter().map(|t| j_part(&Part::Text(t.clone()))).collect::<Vec<_>>(),
            "messages": r.messages.iter().map(|m| json!({"role": role(m.role), "content": m.content.iter().map(j_part).collect::<Vec<_>>()})).collect::<Vec<_>>(),
            "tools": r.tools.iter().map(|t| json!({"name": t.name, "description": t.description, "input_schema": *t.input_schema.value().unwrap(), "strict": t.strict, "namespace": t.namespace})).collect::<Vec<_>>(),
            "tool_choice": r.tool_choice.as_ref().map(|c| format!("{c:?}")),
            "parallel_tool_calls": r.parallel_tool_calls,
            "max_tokens": r.max_tokens,
            "temperature": r.temperature,
            "top_p": r.top_p,
            "top_k": r.top_k,
            "stop": r.stop,
            "stream": r.stream,
            "include_usage": r.include_usage,
            "reasoning": r.reasoning.as_ref().map(|x| json!({"budget_tokens": x.budget_tokens, "effort": x.effort, "adaptive": x.adaptive, "summary": x.summary})),
            "user": r.user,
            "output_format": r.output_format.as_ref().map(|f| match f {
                OutputFormat::Text => json!("text"),
                OutputFormat::JsonObject => json!("json_object"),
                OutputFormat::JsonSchema { name, schema, strict, description } => json!({"json_schema": {"name": name, "schema": schema, "strict": strict, "description": description}}),
            }),
            "include_encrypted_reasoning": r.include_encrypted_reasoning,
            "losses": j_losses(&r.losses),
        })
    }

    pub(super) fn j_resp(r: &Response) -> Value {
        json!({
            "id": r.id,
            "model": r.model,
            "content": r.content.iter().map(j_part).collect::<Vec<_>>(),
            "stop_reason": r.stop_reason.map(|s| format!("{s:?}")),
            "stop_sequence": r.stop_sequence,
            "usage": j_usage(&r.usage),
            "created": r.created,
        })
    }

    pub(super) fn j_event(e: &StreamEvent) -> Value {
        match e {
            StreamEvent::Start { id, model, usage, created } => {
                json!({"start": {"id": id, "model": model, "usage": j_usage(usage), "created": created}})
            }
            StreamEvent::BlockStart { index, block } => {
                json!({"block_start": {"index": index, "block": format!("{block:?}")}})
            }
            StreamEvent::TextDelta { index, text } => json!({"text": {"index": index, "text": text}}),
            StreamEvent::ThinkingDelta { index, text } => json!({"thinking": {"index": index, "text": text}}),
            StreamEvent::SignatureDelta { index, signature } => {
                json!({"signature": {"index": index, "signature": signature}})
            }
            StreamEvent::ToolArgsDelta { index, partial_json } => {
                json!({"args": {"index": index, "partial_json": partial_json}})
            }
            StreamEvent::BlockStop { index } => json!({"block_stop": index}),
            StreamEvent::Finish { stop_reason, stop_sequence, usage } => {
                json!({"finish": {"stop_reason": stop_reason.map(|s| format!("{s:?}")), "stop_sequence": stop_sequence, "usage": j_usage(usage)}})
            }
            StreamEvent::End => json!("end"),
            StreamEvent::Error { kind, message } => json!({"error": {"kind": format!("{kind:?}"), "message": message}}),
        }
    }

    pub(super) fn j_events(evs: &[StreamEvent]) -> Value {
        Value::Array(evs.iter().map(j_event).collect())
    }

    /// Feeds the chunks through the SSE scanner and the decoder, then signals EOF.
    pub(super) fn decode_chunks(chunks: &[&[u8]]) -> Vec<StreamEvent> {
        let mut scanner = SseScanner::new();
        let mut d = StreamDecoder::new();
        let mut out = Vec::new();
        for c in chunks {
            scanner.feed(c, |e| d.decode(&e, &mut out));
        }
        d.finish(&mut out);
        out
    }

    pub(super) fn encode_events(evs: &[StreamEvent], ctx: EncodeContext) -> String {
        let mut e = StreamEncoder::new(ctx);
        let mut out = Vec::new();
        for ev in evs {
            e.encode(ev, &mut out);
        }
        String::from_utf8(out).unwrap()
    }

    pub(super) fn tp(t: &str) -> TextPart {
        TextPart { text: t.into(), cache_control: None }
    }

    pub(super) fn msg(role: Role, content: Vec<Part>) -> Message {
        Message { role, content }
    }

    /// A conversation view that survives Chat encoding: per message, the role, the text joined
    /// as the encoder joins it, tool calls (id, name, input) and tool results (id, text).
    pub(super) fn view(req: &Request) -> Value {
        let msgs: Vec<Value> = req
            .messages
            .iter()
            .map(|m| {
                let sep = if m.role == Role::Assistant { "" } else { "\n\n" };
                let texts: Vec<&str> = m
                    .content
                    .iter()
                    .filter_map(|p| match p {
                        Part::Text(t) => Some(t.text.as_str()),
                        _ => None,
                    })
                    .collect();
                let calls: Vec<Value> = m
                    .content
                    .iter()
                    .filter_map(|p| match p {
                        Part::ToolUse { id, name, input, .. } => Some(json!([id, name, input])),
                        _ => None,
                    })
                    .collect();
                let results: Vec<Value> = m
                    .content
                    .iter()
                    .filter_map(|p| match p {
                        Part::ToolResult { tool_use_id, content, is_error } => {
                            let t: Vec<&str> = content
                                .iter()
                                .filter_map(|c| match c {
                                    ToolResultContent::Text(t) => Some(t.as_str()),
                                    ToolResultContent::Image(_) => None,
                                })
                                .collect();
                            let t = t.join("\n\n");
                            let t = if *is_error { if t.is_empty() { "Error".into() } else { format!("Error: {t}") } } else { t };
                            Some(json!([tool_use_id, t]))
                        }
                        _ => None,
                    })
                    .collect();
                json!({"role": format!("{:?}", m.role), "text": if texts.is_empty() { Value::Null } else { json!(texts.join(sep)) }, "calls": calls, "results": results})
            })
            .collect();
        let system: Vec<&str> = req.system.iter().map(|t| t.text.as_str()).collect();
        json!({
            "system": if system.is_empty() { Value::Null } else { json!(system.join("\n\n")) },
            "messages": msgs,
            "tools": req.tools.iter().map(|t| json!([t.name, t.description, *t.input_schema.value().unwrap()])).collect::<Vec<_>>(),
        })
    }

    pub(super) fn arb_scalar() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<i32>().prop_map(|n| json!(n)),
            "[a-zA-Z \u{e9}\u{1F600}\"\\\\]{0,8}".prop_map(Value::String),
            any::<bool>().prop_map(Value::Bool),
            Just(Value::Null),
        ]
    }

    pub(super) fn arb_input() -> impl Strategy<Value = Value> {
        prop::collection::btree_map("[a-z]{1,6}", arb_scalar(), 0..4)
            .prop_map(|m| Value::Object(m.into_iter().collect()))
    }

    #[derive(Clone, Debug)]
    pub(super) struct TurnSpec {
        user: Vec<String>,
        assistant: Option<String>,
        calls: Vec<(String, Value, bool, String, bool)>,
    }

    pub(super) fn arb_turn() -> impl Strategy<Value = TurnSpec> {
        (
            prop::collection::vec("[a-zA-Z0-9 ,.!?\n\u{e9}\u{1F600}]{0,16}", 1..3),
            prop::option::of("[a-zA-Z0-9 ,.!?\u{e9}]{1,16}"),
            prop::collection::vec(
                ("[a-z_]{1,8}", arb_input(), any::<bool>(), "[a-zA-Z0-9 ]{0,12}", any::<bool>()),
                0..3,
            ),
        )
            .prop_map(|(user, assistant, calls)| TurnSpec { user, assistant, calls })
    }

    /// temperature, top_p, max_tokens, stop, stream, user.
    pub(super) type Params = (Option<f64>, Option<f64>, Option<u64>, Vec<String>, bool, Option<String>);

    pub(super) fn build_request(
        system: Vec<String>,
        turns: Vec<TurnSpec>,
        tools: Vec<(String, Option<String>)>,
        params: Params,
    ) -> Request {
        let mut messages = Vec::new();
        let mut n = 0;
        for t in turns {
            messages.push(msg(Role::User, t.user.into_iter().map(text).collect()));
            let mut a = Vec::new();
            if let Some(s) = t.assistant {
                a.push(text(s));
            }
            let mut results = Vec::new();
            for (name, input, raw, result, is_error) in t.calls {
                n += 1;
                let id = format!("call_{n}");
                let arguments = raw.then(|| serde_json::to_string_pretty(&input).unwrap());
                a.push(Part::ToolUse { id: id.clone(), name, input, arguments });
                results.push(Part::ToolResult {
                    tool_use_id: id,
                    content: vec![ToolResultContent::Text(result)],
                    is_error,
                });
            }
            if a.is_empty() {
                a.push(text("ok"));
            }
            messages.push(msg(Role::Assistant, a));
            if !results.is_empty() {
                messages.push(msg(Role::User, results));
            }
        }
        let (temperature, top_p, max_tokens, stop, stream, user) = params;
        Request {
            model: "deepseek-chat".into(),
            system: system.iter().map(|s| tp(s)).collect(),
            messages,
            tools: tools
                .into_iter()
                .map(|(name, description)| Tool {
                    name,
                    description,
                    input_schema: json!({"type": "object", "properties": {"a": {"type": "string"}}}).into(),
                    strict: None,
                    namespace: None,
                })
                .collect(),
            temperature,
            top_p,
            max_tokens,
            stop,
            stream,
            user,
            ..Request::default()
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn request_round_trip(
            system in prop::collection::vec("[a-zA-Z .]{0,12}", 0..3),
            turns in prop::collection::vec(arb_turn(), 1..4),
            tools in prop::collection::vec(("[a-z_]{1,8}", prop::option::of("[a-z ]{0,10}")), 0..3),
            temperature in prop::option::of(prop_oneof![Just(0.0f64), 0.0f64..2.0]),
            top_p in prop::option::of(0.0f64..1.0),
            max_tokens in prop::option::of(1u64..200_000),
            stop in prop::collection::vec("[a-z]{1,4}", 0..3),
            stream in any::<bool>(),
            user in prop::option::of("[a-z0-9]{1,20}"),
            choice in prop::option::of(prop_oneof![Just(ToolChoice::Auto), Just(ToolChoice::Any), Just(ToolChoice::None), "[a-z]{1,5}".prop_map(ToolChoice::Tool)]),
        ) {
            let mut req = build_request(system, turns, tools, (temperature, top_p, max_tokens, stop, stream, user));
            req.tool_choice = choice;
            let encoded = encode_request(&req).unwrap();
            let back = decode_request(&encoded.body).unwrap();
            prop_assert_eq!(view(&back), view(&req));
            // serde_json parses floats to within one ulp (its `float_roundtrip` feature is off).
            prop_assert!(close(back.temperature, req.temperature));
            prop_assert!(close(back.top_p, req.top_p));
            prop_assert_eq!(back.max_tokens, req.max_tokens);
            prop_assert_eq!(&back.stop, &req.stop);
            prop_assert_eq!(back.stream, req.stream);
            prop_assert_eq!(back.include_usage, req.stream);
            prop_assert_eq!(&back.user, &req.user);
            let want_choice = if req.tools.is_empty() { None } else { req.tool_choice.clone() };
            prop_assert_eq!(&back.tool_choice, &want_choice);
            // Tool call arguments travel verbatim when the source had them.
            for (a, b) in req.messages.iter().zip(&back.messages) {
                for (p, q) in a.content.iter().filter(|p| matches!(p, Part::ToolUse { .. })).zip(b.content.iter().filter(|p| matches!(p, Part::ToolUse { .. }))) {
                    if let (Part::ToolUse { arguments: Some(x), .. }, Part::ToolUse { arguments: Some(y), .. }) = (p, q) {
                        prop_assert_eq!(x, y);
                    }
                }
            }
        }
    }

    pub(super) fn close(a: Option<f64>, b: Option<f64>) -> bool {
        match (a, b) {
            (Some(a), Some(b)) => (a - b).abs() <= 1e-12 * b.abs().max(1.0),
            (a, b) => a == b,
        }
    }

    pub(super) fn arb_stop() -> impl Strategy<Value = StopReason> {
        prop_oneof![
            Just(StopReason::EndTurn),
            Just(StopReason::MaxTokens),
            Just(StopReason::ToolUse),
            Just(StopReason::Refusal)
        ]
    }

    pub(super) fn arb_usage() -> impl Strategy<Value = Usage> {
        let n = || prop::option::of(0u64..1_000_000);
        (n(), n(), n(), n(), n()).prop_map(|(input, output, cache_read, cache_write, reasoning)| Usage {
            input,
            output,
            cache_read,
            cache_write,
            reasoning,
        })
    }

    /// What a Chat client can see of a usage (absent counts are reported as 0).
    pub(super) fn seen_usage(u: &Usage) -> [u64; 5] {
        [
            u.input.unwrap_or(0),
            u.output.unwrap_or(0),
            u.cache_read.unwrap_or(0),
            u.cache_write.unwrap_or(0),
            u.reasoning.unwrap_or(0),
        ]
    }

    pub(super) fn expected_stop(s: StopReason, has_calls: bool) -> StopReason {
        match s {
            StopReason::EndTurn if has_calls => StopReason::ToolUse,
            s => s,
        }
    }

    #[derive(Clone, Debug)]
    pub(super) struct AnswerSpec {
        thinking: Option<String>,
        text: String,
        calls: Vec<(String, Value)>,
        stop: StopReason,
        usage: Usage,
        id: String,
    }

    pub(super) fn arb_answer() -> impl Strategy<Value = AnswerSpec> {
        (
            prop::option::of("[a-zA-Z .\u{e9}]{1,20}"),
            "[a-zA-Z0-9 ,.!?\n\u{e9}\u{1F600}]{0,24}",
            prop::collection::vec(("[a-z_]{1,8}", arb_input()), 0..3),
            arb_stop(),
            arb_usage(),
            "[a-z0-9]{0,8}",
        )
            .prop_map(|(thinking, text, calls, stop, usage, id)| AnswerSpec {
                thinking,
                text,
                calls,
                stop,
                usage,
                id,
            })
    }

    pub(super) fn answer_response(a: &AnswerSpec) -> Response {
        let mut content = Vec::new();
        if let Some(t) = &a.thinking {
            content.push(Part::Thinking { text: t.clone(), signature: Some("s".into()) });
        }
        if !a.text.is_empty() {
            content.push(text(a.text.clone()));
        }
        for (k, (name, input)) in a.calls.iter().enumerate() {
            content.push(Part::ToolUse {
                id: format!("toolu_{k}"),
                name: name.clone(),
                input: input.clone(),
                arguments: None,
            });
        }
        Response {
            id: a.id.clone(),
            model: "upstream-model".into(),
            content,
            stop_reason: Some(a.stop),
            usage: a.usage,
            ..Response::default()
        }
    }

    pub(super) fn answer_events(a: &AnswerSpec, pieces: usize) -> Vec<StreamEvent> {
        let mut evs = vec![StreamEvent::Start {
            id: a.id.clone(),
            model: "upstream-model".into(),
            usage: Usage {
                input: a.usage.input,
                cache_read: a.usage.cache_read,
                cache_write: a.usage.cache_write,
                ..Usage::default()
            },
            created: Some(42),
        }];
        let mut index = 0;
        if let Some(t) = &a.thinking {
            evs.push(StreamEvent::BlockStart { index, block: BlockStart::Thinking });
            evs.push(StreamEvent::ThinkingDelta { index, text: t.clone() });
            evs.push(StreamEvent::BlockStop { index });
            index += 1;
        }
        if !a.text.is_empty() {
            evs.push(StreamEvent::BlockStart { index, block: BlockStart::Text });
            let chars: Vec<char> = a.text.chars().collect();
            for piece in chars.chunks(chars.len().div_ceil(pieces.max(1))) {
                evs.push(StreamEvent::TextDelta { index, text: piece.iter().collect() });
            }
            evs.push(StreamEvent::BlockStop { index });
            index += 1;
        }
        for (k, (name, input)) in a.calls.iter().enumerate() {
            evs.push(StreamEvent::BlockStart {
                index,
                block: BlockStart::ToolUse { id: format!("toolu_{k}"), name: name.clone() },
            });
            let args: Vec<char> = serde_json::to_string(input).unwrap().chars().collect();
            for piece in args.chunks(args.len().div_ceil(pieces.max(1))) {
                evs.push(StreamEvent::ToolArgsDelta { index, partial_json: piece.iter().collect() });
            }
            evs.push(StreamEvent::BlockStop { index });
            index += 1;
        }
        evs.push(StreamEvent::Finish {
            stop_reason: Some(a.stop),
            stop_sequence: None,
            usage: Usage { output: a.usage.output, reasoning: a.usage.reasoning, ..Usage::default() },
        });
        evs.push(StreamEvent::End);
        evs
    }

    /// Collects (thinking, text, [(id, name, args)], stop, usage, ended) from IR events.
    #[allow(clippy::type_complexity)]
    pub(super) fn collect(
        evs: &[StreamEvent],
    ) -> (String, String, Vec<(String, String, String)>, Option<StopReason>, Usage, bool) {
        let mut thinking = String::new();
        let mut text = String::new();
        let mut tools: Vec<(usize, String, String, String)> = Vec::new();
        let mut stop = None;
        let mut usage = Usage::default();
        let mut ended = false;
        for e in evs {
            match e {
                StreamEvent::ThinkingDelta { text: t, .. } => thinking.push_str(t),
                StreamEvent::TextDelta { text: t, .. } => text.push_str(t),
                StreamEvent::BlockStart { index, block: BlockStart::ToolUse { id, name } } => {
                    tools.push((*index, id.clone(), name.clone(), String::new()));
                }
                StreamEvent::ToolArgsDelta { index, partial_json } => {
                    tools.iter_mut().find(|t| t.0 == *index).unwrap().3.push_str(partial_json);
                }
                StreamEvent::Finish { stop_reason, usage: u, .. } => {
                    stop = *stop_reason;
                    usage = *u;
                }
                StreamEvent::End => ended = true,
                _ => {}
            }
        }
        (thinking, text, tools.into_iter().map(|t| (t.1, t.2, t.3)).collect(), stop, usage, ended)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn response_round_trip(a in arb_answer()) {
            let resp = answer_response(&a);
            let back = decode_response(&encode_response(&resp, &ctx())).unwrap();
            let texts: String = back.content.iter().filter_map(|p| if let Part::Text(t) = p { Some(t.text.as_str()) } else { None }).collect();
            prop_assert_eq!(&texts, &a.text);
            let thinking: Vec<&str> = back.content.iter().filter_map(|p| if let Part::Thinking { text, .. } = p { Some(text.as_str()) } else { None }).collect();
            prop_assert_eq!(thinking.first().copied(), a.thinking.as_deref());
            let calls: Vec<(String, String, Value)> = back.content.iter().filter_map(|p| if let Part::ToolUse { id, name, input, .. } = p { Some((id.clone(), name.clone(), input.clone())) } else { None }).collect();
            let want: Vec<(String, String, Value)> = a.calls.iter().enumerate().map(|(k, (n, i))| (format!("toolu_{k}"), n.clone(), i.clone())).collect();
            prop_assert_eq!(calls, want);
            prop_assert_eq!(back.stop_reason, Some(expected_stop(a.stop, !a.calls.is_empty())));
            prop_assert_eq!(seen_usage(&back.usage), seen_usage(&a.usage));
            prop_assert_eq!(back.model.as_str(), "upstream-model");
            let want_id = if a.id.is_empty() { "chatcmpl-seed123".to_owned() } else { a.id.clone() };
            prop_assert_eq!(back.id, want_id);
        }

        #[test]
        fn stream_round_trip(a in arb_answer(), pieces in 1usize..4, include_usage in any::<bool>()) {
            let evs = answer_events(&a, pieces);
            let sse = encode_events(&evs, EncodeContext { include_usage, ..ctx() });
            let back = decode_chunks(&[sse.as_bytes()]);
            let (thinking, text, tools, stop, usage, ended) = collect(&back);
            prop_assert!(ended);
            prop_assert_eq!(thinking, a.thinking.clone().unwrap_or_default());
            prop_assert_eq!(text, a.text.clone());
            let want: Vec<(String, String, String)> = a.calls.iter().enumerate().map(|(k, (n, i))| (format!("toolu_{k}"), n.clone(), serde_json::to_string(i).unwrap())).collect();
            prop_assert_eq!(tools, want);
            prop_assert_eq!(stop, Some(expected_stop(a.stop, !a.calls.is_empty())));
            if include_usage {
                prop_assert_eq!(seen_usage(&usage), seen_usage(&a.usage));
            } else {
                prop_assert_eq!(usage, Usage::default());
            }
            // The decoder's own invariants: Start first, blocks opened before deltas, closed once.
            let starts = matches!(back.first(), Some(StreamEvent::Start { .. }));
            prop_assert!(starts);
            check_block_discipline(&back);
        }
    }

    /// BlockStart before deltas, BlockStop once, all closed before Finish; indexes 0, 1, 2, ...
    pub(super) fn check_block_discipline(evs: &[StreamEvent]) {
        let mut open: Vec<usize> = Vec::new();
        let mut next = 0;
        let mut finished = false;
        for e in evs {
            match e {
                StreamEvent::BlockStart { index, .. } => {
                    assert_eq!(*index, next);
                    next += 1;
                    open.push(*index);
                }
                StreamEvent::TextDelta { index, .. }
                | StreamEvent::ThinkingDelta { index, .. }
                | StreamEvent::SignatureDelta { index, .. }
                | StreamEvent::ToolArgsDelta { index, .. } => assert!(open.contains(index), "delta for closed {index}"),
                StreamEvent::BlockStop { index } => {
                    let pos = open.iter().position(|i| i == index).expect("stop of an open block");
                    open.remove(pos);
                }
                StreamEvent::Finish { .. } => {
                    assert!(open.is_empty(), "blocks open at Finish");
                    assert!(!finished);
                    finished = true;
                }
                _ => {}
            }
        }
    }

    pub(super) const KEYS: &[&str] = &[
        "model",
        "messages",
        "role",
        "content",
        "type",
        "text",
        "image_url",
        "url",
        "detail",
        "tool_calls",
        "id",
        "function",
        "name",
        "arguments",
        "tool_call_id",
        "choices",
        "delta",
        "message",
        "finish_reason",
        "usage",
        "prompt_tokens",
        "completion_tokens",
        "prompt_tokens_details",
        "cached_tokens",
        "index",
        "error",
        "code",
        "reasoning_content",
        "refusal",
        "tools",
        "tool_choice",
        "stop",
        "n",
        "file",
        "file_data",
        "file_id",
        "max_tokens",
        "temperature",
        "stream",
        "stream_options",
        "include_usage",
        "response_format",
        "json_schema",
        "schema",
        "allowed_tools",
        "mode",
        "parameters",
        "function_call",
        "object",
        "modalities",
        "reasoning_effort",
    ];

    // Chat wire shapes with fields of any type, for the properties that hold the direct read
    // of an answer or chunk to the read through a `Value`.

    pub(super) fn arb_text() -> impl Strategy<Value = Value> {
        prop_oneof![
            3 => prop::sample::select(vec!["", "Hi", "caf\u{e9} \"q\"", "{\"city\":", "\\n"]).prop_map(|s| json!(s)),
            1 => arb_scalar(),
            1 => Just(json!([1])),
            1 => Just(json!({"a": 1})),
        ]
    }

    pub(super) fn arb_count() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(json!(0)),
            Just(json!(1)),
            Just(json!(0.0)),
            Just(json!(2.5)),
            Just(json!(-1)),
            Just(json!("0")),
            Just(json!(" 12 ")),
            Just(Value::Null),
        ]
    }

    /// An object with some of `fields` (each from its strategy), in the order given.
    pub(super) fn arb_object(fields: Vec<(&'static str, BoxedStrategy<Value>)>) -> BoxedStrategy<Value> {
        let parts: Vec<_> = fields
            .into_iter()
            .map(|(key, value)| prop::option::weighted(0.7, value).prop_map(move |v| v.map(|v| (key, v))))
            .collect();
        parts.prop_map(|kv| Value::Object(kv.into_iter().flatten().map(|(k, v)| (k.to_owned(), v)).collect())).boxed()
    }

    pub(super) fn arb_chat_usage() -> BoxedStrategy<Value> {
        let prompt_details = prop_oneof![
            3 => arb_object(vec![("cached_tokens", arb_count().boxed()), ("cache_write_tokens", arb_count().boxed())]),
            1 => arb_scalar(),
        ];
        let completion_details =
            prop_oneof![3 => arb_object(vec![("reasoning_tokens", arb_count().boxed())]), 1 => arb_scalar()];
        let usage = arb_object(vec![
            ("prompt_tokens", prop_oneof![Just(json!(1200)), arb_count()].boxed()),
            ("completion_tokens", prop_oneof![Just(json!(40)), arb_count()].boxed()),
            ("prompt_cache_hit_tokens", arb_count().boxed()),
            ("prompt_cache_miss_tokens", arb_count().boxed()),
            ("cached_tokens", arb_count().boxed()),
            ("prompt_tokens_details", prompt_details.boxed()),
            ("completion_tokens_details", completion_details.boxed()),
        ]);
        prop_oneof![4 => usage, 1 => arb_scalar()].boxed()
    }

    pub(super) fn arb_function() -> BoxedStrategy<Value> {
        prop_oneof![4 => arb_object(vec![("name", arb_text().boxed()), ("arguments", arb_text().boxed())]), 1 => arb_scalar()]
            .boxed()
    }

    pub(super) fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<u64>().prop_map(|n| json!(n)),
            any::<f64>().prop_map(|f| json!(f)),
            "[a-z_ ]{0,8}".prop_map(Value::String),
            prop::sample::select(vec![
                "text",
                "image_url",
                "file",
                "assistant",
                "user",
                "tool",
                "system",
                "developer",
                "function",
                "stop",
                "tool_calls",
                "length",
                "data:image/png;base64,AAAA",
                "data:x",
                "[DONE]",
                "{",
                "{\"a\":1}",
                "auto",
                "required",
                "none",
                "json_schema",
                "json_object",
                "allowed_tools",
                "refusal",
                "error",
                "audio",
            ])
            .prop_map(|s| Value::String(s.to_owned())),
        ];
        leaf.prop_recursive(5, 96, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(prop::sample::select(KEYS.to_vec()).prop_map(str::to_owned), inner, 0..8)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    pub(super) fn arb_image() -> impl Strategy<Value = Image> {
        prop_oneof![
            ("[a-z/]{0,10}", "[A-Za-z0-9+/=]{0,8}").prop_map(|(media_type, data)| Image::Base64 { media_type, data }),
            "[a-z:/.]{0,12}".prop_map(|url| Image::Url { url }),
        ]
    }

    pub(super) fn arb_part() -> impl Strategy<Value = Part> {
        prop_oneof![
            "[a-z \n]{0,8}".prop_map(text),
            arb_image().prop_map(Part::Image),
            ("[a-z_]{0,6}", "[a-z_]{0,6}", arb_json(), prop::option::of("[{}a-z\":]{0,8}"))
                .prop_map(|(id, name, input, arguments)| Part::ToolUse { id, name, input, arguments }),
            (
                "[a-z_]{0,6}",
                prop::collection::vec(
                    prop_oneof![
                        "[a-z ]{0,6}".prop_map(ToolResultContent::Text),
                        arb_image().prop_map(ToolResultContent::Image)
                    ],
                    0..3
                ),
                any::<bool>()
            )
                .prop_map(|(tool_use_id, content, is_error)| Part::ToolResult {
                    tool_use_id,
                    content,
                    is_error
                }),
            ("[a-z ]{0,6}", prop::option::of("[a-z]{0,4}"))
                .prop_map(|(text, signature)| Part::Thinking { text, signature }),
            "[a-z]{0,6}".prop_map(|data| Part::RedactedThinking { data }),
            (
                prop::option::of("[a-z]{0,4}"),
                prop::collection::vec("[a-z ]{0,6}", 0..2),
                prop::option::of("[a-z]{0,4}")
            )
                .prop_map(|(id, summary, encrypted_content)| Part::ReasoningItem {
                    id,
                    summary,
                    encrypted_content
                }),
            (
                prop_oneof![
                    ("[a-z/]{0,10}", "[a-z]{0,6}")
                        .prop_map(|(media_type, data)| DocumentSource::Base64 { media_type, data }),
                    "[a-z]{0,6}".prop_map(|text| DocumentSource::Text { text }),
                ],
                prop::option::of("[a-z]{0,6}")
            )
                .prop_map(|(source, title)| Part::Document { source, title }),
        ]
    }

    pub(super) fn arb_role() -> impl Strategy<Value = Role> {
        prop_oneof![Just(Role::User), Just(Role::Assistant), Just(Role::System)]
    }

    pub(super) fn arb_any_request() -> impl Strategy<Value = Request> {
        (
            prop::collection::vec((arb_role(), prop::collection::vec(arb_part(), 0..4)), 0..5),
            prop::option::of((
                prop::option::of(any::<u64>()),
                prop::option::of("[a-z]{0,5}"),
                any::<bool>(),
                prop::option::of("[a-z]{0,5}"),
            )),
            prop::option::of(prop_oneof![
                Just(OutputFormat::Text),
                Just(OutputFormat::JsonObject),
                ("[a-z]{0,4}", arb_json(), prop::option::of(any::<bool>()), prop::option::of("[a-z]{0,4}")).prop_map(
                    |(name, schema, strict, description)| OutputFormat::JsonSchema {
                        name,
                        schema,
                        strict,
                        description
                    }
                ),
            ]),
            (
                prop::option::of(any::<f64>()),
                prop::option::of(any::<u64>()),
                prop::option::of(any::<u64>()),
                any::<bool>(),
                "[a-z0-9-]{0,80}",
            ),
            prop::collection::vec(("[a-z]{0,5}", arb_json()), 0..3),
        )
            .prop_map(
                |(messages, reasoning, output_format, (temperature, max_tokens, top_k, stream, model), tools)| {
                    Request {
                        model,
                        system: vec![tp("s")],
                        messages: messages.into_iter().map(|(role, content)| msg(role, content)).collect(),
                        tools: tools
                            .into_iter()
                            .map(|(name, input_schema)| Tool {
                                name,
                                description: None,
                                input_schema: input_schema.into(),
                                strict: None,
                                namespace: None,
                            })
                            .collect(),
                        reasoning: reasoning.map(|(budget_tokens, effort, adaptive, summary)| Reasoning {
                            budget_tokens,
                            effort,
                            adaptive,
                            summary,
                        }),
                        output_format,
                        temperature,
                        max_tokens,
                        top_k,
                        stream,
                        user: Some("u".repeat(70)),
                        ..Request::default()
                    }
                },
            )
    }

    pub(super) fn arb_event() -> impl Strategy<Value = StreamEvent> {
        let idx = 0usize..4;
        prop_oneof![
            ("[a-z]{0,4}", "[a-z]{0,4}", arb_usage(), prop::option::of(any::<u64>()))
                .prop_map(|(id, model, usage, created)| StreamEvent::Start { id, model, usage, created }),
            (
                idx.clone(),
                prop_oneof![
                    Just(BlockStart::Text),
                    Just(BlockStart::Thinking),
                    "[a-z]{0,3}".prop_map(|data| BlockStart::RedactedThinking { data }),
                    ("[a-z]{0,3}", "[a-z]{0,3}").prop_map(|(id, name)| BlockStart::ToolUse { id, name }),
                    Just(BlockStart::ReasoningItem { id: None, encrypted_content: None }),
                ]
            )
                .prop_map(|(index, block)| StreamEvent::BlockStart { index, block }),
            (idx.clone(), "[a-z ]{0,4}").prop_map(|(index, text)| StreamEvent::TextDelta { index, text }),
            (idx.clone(), "[a-z ]{0,4}").prop_map(|(index, text)| StreamEvent::ThinkingDelta { index, text }),
            (idx.clone(), "[a-z]{0,4}").prop_map(|(index, signature)| StreamEvent::SignatureDelta { index, signature }),
            (idx.clone(), "[{}a-z\"]{0,4}")
                .prop_map(|(index, partial_json)| StreamEvent::ToolArgsDelta { index, partial_json }),
            idx.prop_map(|index| StreamEvent::BlockStop { index }),
            (prop::option::of(arb_stop()), arb_usage()).prop_map(|(stop_reason, usage)| StreamEvent::Finish {
                stop_reason,
                stop_sequence: None,
                usage
            }),
            Just(StreamEvent::End),
            "[a-z ]{0,6}".prop_map(|message| StreamEvent::Error { kind: ErrorKind::Api, message }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn decoders_never_panic(v in arb_json(), w in arb_json(), status in any::<u16>()) {
            let _ = decode_request(&serde_json::to_vec(&v).unwrap());
            let _ = decode_request(&serde_json::to_vec(&json!({"model": "m", "messages": [v.clone(), w.clone()], "tools": [w.clone()], "tool_choice": v.clone()})).unwrap());
            let _ = decode_response(&serde_json::to_vec(&v).unwrap());
            let _ = decode_response(&serde_json::to_vec(&json!({"choices": [{"message": v.clone(), "finish_reason": w.clone()}], "usage": w.clone()})).unwrap());
            let _ = decode_error(status, &serde_json::to_vec(&v).unwrap());
            let mut d = StreamDecoder::new();
            let mut out = Vec::new();
            for data in [serde_json::to_string(&v).unwrap(), serde_json::to_string(&json!({"choices": [{"delta": w.clone(), "finish_reason": v.clone()}], "usage": v.clone()})).unwrap(), "[DONE]".to_owned()] {
                d.decode(&SseEvent { event: None, data: &data }, &mut out);
            }
            d.finish(&mut out);
        }

        #[test]
        fn decoders_never_panic_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..64), status in any::<u16>()) {
            let _ = decode_request(&bytes);
            let _ = decode_response(&bytes);
            let _ = decode_error(status, &bytes);
            let mut d = StreamDecoder::new();
            let mut out = Vec::new();
            let mut scanner = SseScanner::new();
            scanner.feed(&bytes, |e| d.decode(&e, &mut out));
            d.finish(&mut out);
        }

        #[test]
        fn encoders_never_panic(req in arb_any_request(), parts in prop::collection::vec(arb_part(), 0..6), stop in prop::option::of(arb_stop()), usage in arb_usage(), evs in prop::collection::vec(arb_event(), 0..16), include_usage in any::<bool>()) {
            let _ = encode_request(&req);
            let resp = Response { content: parts, stop_reason: stop, usage, ..Response::default() };
            let body = encode_response(&resp, &ctx());
            prop_assert!(serde_json::from_slice::<Value>(&body).is_ok());
            let sse = encode_events(&evs, EncodeContext { include_usage, ..ctx() });
            // Whatever the event order, the output is well-formed SSE of JSON chunks.
            let mut scanner = SseScanner::new();
            let mut ok = true;
            scanner.feed(sse.as_bytes(), |e| ok &= e.data == "[DONE]" || serde_json::from_str::<Value>(e.data).is_ok());
            prop_assert!(ok);
            let _ = encode_error(&ErrorBody { kind: ErrorKind::Api, message: "x".into(), code: None, param: None });
        }
    }
}
