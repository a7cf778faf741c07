//! Complete answers: a Gemini upstream's `GenerateContentResponse` to the IR, and the IR to one
//! for a Gemini client; with the content parts, function-call ids, finish reasons and usage the
//! requests and the stream share, and the `countTokens` answer.

use serde_json::{Map, Value, json};

use super::{
    Obj, anthropic_signature_in, anthropic_signature_out, call_id_with_signature, field, field_str, split_call_id,
    synth_call_id,
};
use crate::convert::ir::*;
use crate::protocol::gemini_usage::{COUNTED, COUNTED_SNAKE};
use crate::protocol::lenient::{arguments_object, count, get, get_str, token_count};

// ---------------------------------------------------------------------------------------------
// Finish reasons

/// Gemini `finishReason` → IR. Every content-policy stop is a refusal (SPEC §15.4: returned
/// unchanged as a success); the tool-call stops that end a turn without a usable call end it.
pub(super) fn stop_reason(reason: &str) -> Option<StopReason> {
    Some(match reason {
        "STOP" => StopReason::EndTurn,
        "MAX_TOKENS" => StopReason::MaxTokens,
        "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT"
        | "IMAGE_RECITATION" => StopReason::Refusal,
        "MALFORMED_FUNCTION_CALL"
        | "UNEXPECTED_TOOL_CALL"
        | "TOO_MANY_TOOL_CALLS"
        | "LANGUAGE"
        | "OTHER"
        | "IMAGE_OTHER"
        | "NO_IMAGE" => StopReason::EndTurn,
        _ => return None,
    })
}

/// IR → Gemini `finishReason`. Gemini ends a function-calling turn with `STOP`.
pub(super) fn finish_reason(stop: Option<StopReason>) -> &'static str {
    match stop {
        Some(StopReason::MaxTokens) => "MAX_TOKENS",
        Some(StopReason::Refusal) => "SAFETY",
        Some(StopReason::EndTurn | StopReason::StopSequence | StopReason::ToolUse | StopReason::PauseTurn) | None => {
            "STOP"
        }
    }
}

/// A turn that ended normally with function calls in it is a tool-use turn for the other formats.
pub(super) fn with_tool_use(stop: Option<StopReason>, has_calls: bool) -> Option<StopReason> {
    match stop {
        Some(StopReason::EndTurn) | None if has_calls => Some(StopReason::ToolUse),
        other => other,
    }
}

// ---------------------------------------------------------------------------------------------
// Usage

/// `usageMetadata` → IR. `promptTokenCount` includes cached content (subtracted) and not the
/// tool-use prompt (added: it is billed as input); thoughts are billed as output, so output is
/// candidates + thoughts, with the thoughts also in `reasoning`.
pub(super) fn decode_usage(u: &Obj) -> Usage {
    let counts = std::array::from_fn(|i| field(u, COUNTED[i], COUNTED_SNAKE[i]).and_then(token_count));
    usage_of_counts(counts)
}

/// The usage `usageMetadata`'s five counts give, in `gemini_usage::COUNTED`'s order.
pub(super) fn usage_of_counts([prompt, cached, tool_prompt, candidates, thoughts]: [Option<u64>; 5]) -> Usage {
    let output = match (candidates, thoughts) {
        (None, None) => None,
        (c, t) => Some(c.unwrap_or(0).saturating_add(t.unwrap_or(0))),
    };
    Usage {
        input: prompt.map(|p| p.saturating_sub(cached.unwrap_or(0)).saturating_add(tool_prompt.unwrap_or(0))),
        output,
        cache_read: cached,
        cache_write: None,
        reasoning: thoughts,
    }
}

/// IR → `usageMetadata` (cache writes, which Gemini does not report apart, count as prompt).
pub(super) fn encode_usage(u: &Usage) -> Value {
    let cached = u.cache_read.unwrap_or(0);
    let prompt = u.input.unwrap_or(0).saturating_add(cached).saturating_add(u.cache_write.unwrap_or(0));
    let output = u.output.unwrap_or(0);
    let thoughts = u.reasoning.unwrap_or(0).min(output);
    let mut m = Map::new();
    m.insert("promptTokenCount".into(), json!(prompt));
    m.insert("candidatesTokenCount".into(), json!(output - thoughts));
    if cached > 0 {
        m.insert("cachedContentTokenCount".into(), json!(cached));
    }
    if thoughts > 0 {
        m.insert("thoughtsTokenCount".into(), json!(thoughts));
    }
    m.insert("totalTokenCount".into(), json!(prompt.saturating_add(output)));
    Value::Object(m)
}

// ---------------------------------------------------------------------------------------------
// Content parts, both ways

/// The function calls of the content being decoded, so that responses find their call.
#[derive(Debug, Default)]
pub(super) struct Calls {
    /// Calls in the current model turn (for ids made from a call's place).
    in_turn: usize,
    /// Calls not answered yet: (Gemini id, IR id, name).
    open: Vec<(String, String, String)>,
}

impl Calls {
    /// A new model turn starts (ids made from a call's place count within their turn, so a
    /// call gets the same id in the answer and when its history comes back).
    pub(super) fn new_turn(&mut self) {
        self.in_turn = 0;
    }

    /// A `functionCall` → IR tool use, with its id (made when absent) and thought signature.
    pub(super) fn call(&mut self, fc: &Obj, signature: Option<&str>) -> Part {
        let name = get_str(fc, "name").unwrap_or_default().to_owned();
        let args = match get(fc, "args") {
            Some(a @ Value::Object(_)) => a.clone(),
            _ => Value::Object(Map::new()),
        };
        let gemini_id = match get_str(fc, "id").filter(|s| !s.is_empty()) {
            Some(id) => id.to_owned(),
            None => synth_call_id(&name, &args, self.in_turn),
        };
        self.in_turn += 1;
        let id = call_id_with_signature(&gemini_id, signature);
        self.open.push((gemini_id, id.clone(), name.clone()));
        Part::ToolUse { id, name, input: args, arguments: None }
    }

    /// The IR id a `functionResponse` answers: its call's by id, else the first open call of
    /// the same name, else the first open call; its own id (or one made from its name) when
    /// there is no open call at all.
    pub(super) fn answer(&mut self, id: Option<&str>, name: &str) -> String {
        let found = match id {
            Some(id) => self.open.iter().position(|(g, ir, _)| g == id || ir == id),
            None => self.open.iter().position(|(_, _, n)| n == name).or((!self.open.is_empty()).then_some(0)),
        };
        match (found, id) {
            (Some(i), _) => self.open.remove(i).1,
            (None, Some(id)) => id.to_owned(),
            (None, None) => synth_call_id(name, &Value::Null, 0),
        }
    }
}

/// A `functionResponse.response` as tool-result content: Gemini's convention is
/// `{"output": …}` for a result and `{"error": …}` for a failure; anything else is the JSON.
fn response_content(response: Option<&Value>) -> (Vec<ToolResultContent>, bool) {
    let as_text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match response {
        None => (Vec::new(), false),
        Some(Value::Object(o)) if o.len() == 1 && o.contains_key("output") => {
            (o.get("output").map(|v| vec![ToolResultContent::Text(as_text(v))]).unwrap_or_default(), false)
        }
        Some(Value::Object(o)) if o.len() == 1 && o.contains_key("error") => {
            (o.get("error").map(|v| vec![ToolResultContent::Text(as_text(v))]).unwrap_or_default(), true)
        }
        Some(v) => (vec![ToolResultContent::Text(as_text(v))], false),
    }
}

/// `inlineData` / `fileData` → an IR image or document; `Err(mime type)` for media the IR
/// cannot hold (audio, video).
pub(super) fn media_part(p: &Obj) -> Option<Result<Part, String>> {
    if let Some(d) = field(p, "inlineData", "inline_data").and_then(Value::as_object) {
        let media_type = field_str(d, "mimeType", "mime_type").unwrap_or("application/octet-stream").to_owned();
        let data = get_str(d, "data").unwrap_or_default().to_owned();
        return Some(if media_type.starts_with("image/") {
            Ok(Part::Image(Image::Base64 { media_type, data }))
        } else if media_type == "application/pdf" || media_type.starts_with("text/") {
            Ok(Part::Document { source: DocumentSource::Base64 { media_type, data }, title: None })
        } else {
            Err(media_type)
        });
    }
    if let Some(d) = field(p, "fileData", "file_data").and_then(Value::as_object) {
        let media_type = field_str(d, "mimeType", "mime_type").unwrap_or_default();
        let url = field_str(d, "fileUri", "file_uri").unwrap_or_default().to_owned();
        return Some(if media_type.starts_with("image/") {
            Ok(Part::Image(Image::Url { url }))
        } else if media_type.is_empty() || media_type == "application/pdf" || media_type.starts_with("text/") {
            Ok(Part::Document { source: DocumentSource::Url { url }, title: None })
        } else {
            Err(media_type.to_owned())
        });
    }
    None
}

/// What a part of the content is, for the IR. `Skip` parts carry nothing the IR can hold (an
/// empty text that only carries a signature, code-execution history).
pub(super) enum Decoded {
    Part(Part),
    Skip,
    /// Code execution history (`executableCode`, `codeExecutionResult`): server-side tool turns.
    ServerTool,
    /// Media of a type the IR cannot hold.
    Media(String),
    Unknown,
}

/// One content part → IR.
pub(super) fn decode_part(p: &Obj, calls: &mut Calls) -> Decoded {
    let signature = field_str(p, "thoughtSignature", "thought_signature");
    let thought = get(p, "thought").and_then(Value::as_bool) == Some(true);
    if let Some(t) = get_str(p, "text") {
        return if thought {
            let signature = signature.and_then(anthropic_signature_in);
            Decoded::Part(Part::Thinking { text: t.to_owned(), signature })
        } else if t.is_empty() {
            Decoded::Skip
        } else {
            Decoded::Part(Part::Text(TextPart { text: t.to_owned(), cache_control: None }))
        };
    }
    if let Some(fc) = field(p, "functionCall", "function_call").and_then(Value::as_object) {
        return Decoded::Part(calls.call(fc, signature));
    }
    if let Some(fr) = field(p, "functionResponse", "function_response").and_then(Value::as_object) {
        let name = get_str(fr, "name").unwrap_or_default();
        let tool_use_id = calls.answer(get_str(fr, "id").filter(|s| !s.is_empty()), name);
        let (mut content, is_error) = response_content(get(fr, "response"));
        // Gemini 3's multimodal function responses: images beside the JSON.
        for sub in get(fr, "parts").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_object) {
            if let Some(Ok(Part::Image(i))) = media_part(sub) {
                content.push(ToolResultContent::Image(i));
            }
        }
        return Decoded::Part(Part::ToolResult { tool_use_id, content, is_error });
    }
    if let Some(media) = media_part(p) {
        return match media {
            Ok(part) => Decoded::Part(part),
            Err(mime) => Decoded::Media(mime),
        };
    }
    if field(p, "executableCode", "executable_code").is_some()
        || field(p, "codeExecutionResult", "code_execution_result").is_some()
    {
        return Decoded::ServerTool;
    }
    if thought && signature.is_some() {
        // A signature alone on a thought part: ours (Anthropic's, carried) or Gemini's.
        return match signature.and_then(anthropic_signature_in) {
            Some(sig) => Decoded::Part(Part::Thinking { text: String::new(), signature: Some(sig) }),
            None => Decoded::Skip,
        };
    }
    Decoded::Unknown
}

/// An IR tool call as a Gemini `functionCall` part: the id split from the thought signature it
/// carries, the arguments as an object (`{}` when they are not one).
pub(super) fn call_part(id: &str, name: &str, input: &Value, arguments: Option<&str>) -> (Value, bool) {
    let (gemini_id, signature) = split_call_id(id);
    let args = arguments_object(input, arguments);
    let valid = args.is_some();
    let mut fc = Map::new();
    if !gemini_id.is_empty() {
        fc.insert("id".into(), json!(gemini_id));
    }
    fc.insert("name".into(), json!(name));
    fc.insert("args".into(), args.unwrap_or_else(|| Value::Object(Map::new())));
    let mut part = Map::new();
    part.insert("functionCall".into(), Value::Object(fc));
    if let Some(sig) = signature {
        part.insert("thoughtSignature".into(), json!(sig));
    }
    (Value::Object(part), valid)
}

fn media_out(media_type: &str, data: &str) -> Value {
    json!({"inlineData": {"mimeType": media_type, "data": data}})
}

/// A file by URL; the media type from its extension (Gemini wants one), `fallback` when that
/// says nothing useful.
fn file_part(url: &str, fallback: Option<&'static str>) -> Value {
    let by_name = crate::protocol::lenient::media_type_for_filename(url.split('?').next().unwrap_or(url));
    let media_type = match fallback {
        Some(f) if !by_name.starts_with("image/") => f,
        _ => by_name,
    };
    json!({"fileData": {"mimeType": media_type, "fileUri": url}})
}

pub(super) fn image_part(i: &Image) -> Value {
    match i {
        Image::Base64 { media_type, data } => media_out(media_type, data),
        Image::Url { url } => file_part(url, Some("image/jpeg")),
    }
}

pub(super) fn document_part(source: &DocumentSource) -> Value {
    match source {
        DocumentSource::Base64 { media_type, data } => media_out(media_type, data),
        DocumentSource::Url { url } => file_part(url, None),
        DocumentSource::Text { text } => json!({"text": text}),
    }
}

/// A thought part for a Gemini client, with an Anthropic signature carried.
pub(super) fn thought_part(text: &str, signature: Option<&str>) -> Value {
    let mut part = Map::new();
    part.insert("text".into(), json!(text));
    part.insert("thought".into(), json!(true));
    if let Some(sig) = signature.and_then(anthropic_signature_out) {
        part.insert("thoughtSignature".into(), json!(sig));
    }
    Value::Object(part)
}

// ---------------------------------------------------------------------------------------------
// Answers

/// Upstream `GenerateContentResponse` → IR (the first candidate; the gateway asks for one).
pub fn decode_response(body: &[u8]) -> Result<Response, ConvertError> {
    if let Some(matched) = plain_answer(body) {
        return Ok(matched);
    }
    decode_parsed_response(body)
}

/// The answer when it is of the usual kind, read without a parse (`plain_answer`); `None` for
/// anything else, which [`decode_parsed_response`] reads.
pub fn plain_answer(body: &[u8]) -> Option<Response> {
    crate::protocol::lenient::utf8(body).and_then(super::plain_answer::plain_gemini_answer)
}

/// [`decode_response`] through a parse, whatever the answer's shape.
pub fn decode_parsed_response(body: &[u8]) -> Result<Response, ConvertError> {
    let obj = parse_object(body)?;
    if let Some(e) = get(&obj, "error") {
        let message = e.get("message").and_then(Value::as_str).unwrap_or("the upstream answered with an error");
        return Err(ConvertError::new("error", message));
    }
    let mut response = Response {
        id: field_str(&obj, "responseId", "response_id").unwrap_or_default().to_owned(),
        model: field_str(&obj, "modelVersion", "model_version").unwrap_or_default().to_owned(),
        ..Response::default()
    };
    if let Some(u) = field(&obj, "usageMetadata", "usage_metadata").and_then(Value::as_object) {
        response.usage = decode_usage(u);
    }
    let candidate =
        get(&obj, "candidates").and_then(Value::as_array).and_then(|c| c.first()).and_then(Value::as_object);
    let Some(candidate) = candidate else {
        // No candidate: the prompt itself was blocked (a content-filter answer, SPEC §15.4).
        if field(&obj, "promptFeedback", "prompt_feedback")
            .and_then(|f| field_str(f.as_object()?, "blockReason", "block_reason"))
            .is_some()
        {
            response.stop_reason = Some(StopReason::Refusal);
        }
        return Ok(response);
    };
    let mut calls = Calls::default();
    let parts = get(candidate, "content").and_then(|c| c.get("parts")).and_then(Value::as_array);
    for p in parts.into_iter().flatten().filter_map(Value::as_object) {
        if let Decoded::Part(part) = decode_part(p, &mut calls) {
            response.content.push(part);
        }
    }
    let has_calls = response.content.iter().any(|p| matches!(p, Part::ToolUse { .. }));
    let stop = field_str(candidate, "finishReason", "finish_reason").and_then(stop_reason);
    response.stop_reason = with_tool_use(stop, has_calls);
    Ok(response)
}

/// The model-turn parts of an answer for a Gemini client.
pub(super) fn answer_parts(content: &[Part]) -> Vec<Value> {
    let mut parts = Vec::new();
    for p in content {
        match p {
            Part::Text(t) if !t.text.is_empty() => parts.push(json!({"text": t.text})),
            Part::Thinking { text, signature } => parts.push(thought_part(text, signature.as_deref())),
            Part::ReasoningItem { summary, .. } if !summary.is_empty() => {
                parts.push(thought_part(&summary.join("\n\n"), None));
            }
            Part::ToolUse { id, name, input, arguments } => {
                parts.push(call_part(id, name, input, arguments.as_deref()).0)
            }
            Part::Image(i) => parts.push(image_part(i)),
            _ => {}
        }
    }
    parts
}

/// IR → a `GenerateContentResponse` for a Gemini client.
pub fn encode_response(response: &Response, ctx: &EncodeContext) -> Vec<u8> {
    let parts = answer_parts(&response.content);
    let mut candidate = Map::new();
    if !parts.is_empty() || response.stop_reason != Some(StopReason::Refusal) {
        candidate.insert("content".into(), json!({"parts": parts, "role": "model"}));
    }
    candidate.insert("finishReason".into(), json!(finish_reason(response.stop_reason)));
    candidate.insert("index".into(), json!(0));
    let made_up_id = response.id.is_empty().then(|| ctx.id_seed.to_string());
    let body = json!({
        "candidates": [Value::Object(candidate)],
        "usageMetadata": encode_usage(&response.usage),
        "modelVersion": if response.model.is_empty() { ctx.request_model.as_str() } else { response.model.as_str() },
        "responseId": made_up_id.as_deref().unwrap_or(&response.id),
    });
    answer_json(&body, response)
}

/// A `countTokens` answer (`{"totalTokens": N}`) → the count.
pub fn decode_count_tokens_response(body: &[u8]) -> Option<u64> {
    let obj = parse_object(body).ok()?;
    field(&obj, "totalTokens", "total_tokens").and_then(count)
}

/// The count as a `countTokens` answer.
pub fn encode_count_tokens_response(total: u64) -> Vec<u8> {
    serde_json::to_vec(&json!({"totalTokens": total})).unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::super::tests::*;
    use super::*;
    use insta::assert_json_snapshot;

    #[test]
    fn decode_response_text_thoughts_calls_and_usage() {
        let body = json!({
            "candidates": [{
                "content": {"role": "model", "parts": [
                    {"text": "Thinking about it", "thought": true},
                    {"text": "Checking."},
                    {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "CiQB0e2Kb+/x9A=="},
                    {"functionCall": {"id": "fc_2", "name": "get_weather", "args": {"city": "Oslo"}}},
                    {"text": "", "thoughtSignature": "AAAA"}
                ]},
                "finishReason": "STOP", "index": 0
            }],
            "usageMetadata": {"promptTokenCount": 1200, "cachedContentTokenCount": 1000, "candidatesTokenCount": 40, "thoughtsTokenCount": 25, "totalTokenCount": 1265},
            "modelVersion": "gemini-2.5-pro", "responseId": "abc"
        });
        let r = decode_response(&serde_json::to_vec(&body).unwrap()).unwrap();
        assert_json_snapshot!(response_json(&r));
        // The signature comes back out of the id, padded again.
        let (part, valid) = match &r.content[2] {
            Part::ToolUse { id, name, input, arguments } => call_part(id, name, input, arguments.as_deref()),
            _ => unreachable!(),
        };
        assert!(valid);
        assert_eq!(part["thoughtSignature"], "CiQB0e2Kb+/x9A==");
        assert_eq!(part["functionCall"]["id"], "call_b7f07150b5890f5a");
    }

    #[test]
    fn finish_reasons_both_ways() {
        let table: Vec<(&str, Option<StopReason>, &str)> = [
            "STOP",
            "MAX_TOKENS",
            "SAFETY",
            "RECITATION",
            "BLOCKLIST",
            "PROHIBITED_CONTENT",
            "SPII",
            "IMAGE_SAFETY",
            "MALFORMED_FUNCTION_CALL",
            "UNEXPECTED_TOOL_CALL",
            "TOO_MANY_TOOL_CALLS",
            "LANGUAGE",
            "OTHER",
            "FINISH_REASON_UNSPECIFIED",
        ]
        .into_iter()
        .map(|r| (r, stop_reason(r), finish_reason(stop_reason(r))))
        .collect();
        assert_json_snapshot!(table.iter().map(|(r, s, back)| format!("{r} → {s:?} → {back}")).collect::<Vec<_>>(), @r#"
        [
          "STOP → Some(EndTurn) → STOP",
          "MAX_TOKENS → Some(MaxTokens) → MAX_TOKENS",
          "SAFETY → Some(Refusal) → SAFETY",
          "RECITATION → Some(Refusal) → SAFETY",
          "BLOCKLIST → Some(Refusal) → SAFETY",
          "PROHIBITED_CONTENT → Some(Refusal) → SAFETY",
          "SPII → Some(Refusal) → SAFETY",
          "IMAGE_SAFETY → Some(Refusal) → SAFETY",
          "MALFORMED_FUNCTION_CALL → Some(EndTurn) → STOP",
          "UNEXPECTED_TOOL_CALL → Some(EndTurn) → STOP",
          "TOO_MANY_TOOL_CALLS → Some(EndTurn) → STOP",
          "LANGUAGE → Some(EndTurn) → STOP",
          "OTHER → Some(EndTurn) → STOP",
          "FINISH_REASON_UNSPECIFIED → None → STOP"
        ]
        "#);
    }

    #[test]
    fn a_blocked_prompt_is_a_refusal_and_encodes_back_without_content() {
        let body = br#"{"promptFeedback":{"blockReason":"SAFETY","safetyRatings":[]},"usageMetadata":{"promptTokenCount":8,"totalTokenCount":8},"modelVersion":"gemini-2.5-flash"}"#;
        let r = decode_response(body).unwrap();
        assert_eq!(r.stop_reason, Some(StopReason::Refusal));
        assert!(r.content.is_empty());
        assert_eq!(r.usage.input, Some(8));
        let out: Value = serde_json::from_slice(&encode_response(&r, &ctx())).unwrap();
        assert_eq!(out["candidates"][0], json!({"finishReason": "SAFETY", "index": 0}));
    }

    #[test]
    fn encode_response_for_a_gemini_client() {
        let r = Response {
            id: "msg_01".into(),
            model: "claude-sonnet-4-5".into(),
            content: vec![
                Part::Thinking { text: "Plan.".into(), signature: Some("EqQBCgIYAhIM".into()) },
                text("Checking."),
                Part::ToolUse {
                    id: "toolu_01".into(),
                    name: "get_weather".into(),
                    input: json!({}),
                    arguments: Some("{\"city\":\"Paris\"}".into()),
                },
            ],
            stop_reason: Some(StopReason::ToolUse),
            usage: Usage {
                input: Some(10),
                output: Some(20),
                cache_read: Some(5),
                cache_write: Some(2),
                reasoning: Some(4),
            },
            ..Response::default()
        };
        let body = encode_response(&r, &ctx());
        insta::assert_snapshot!(String::from_utf8(body.clone()).unwrap(), @r#"{"candidates":[{"content":{"parts":[{"text":"Plan.","thought":true,"thoughtSignature":"Y2NtZXNoLmFudGhyb3BpYy5zaWc6EqQBCgIYAhIM"},{"text":"Checking."},{"functionCall":{"args":{"city":"Paris"},"id":"toolu_01","name":"get_weather"}}],"role":"model"},"finishReason":"STOP","index":0}],"modelVersion":"claude-sonnet-4-5","responseId":"msg_01","usageMetadata":{"cachedContentTokenCount":5,"candidatesTokenCount":16,"promptTokenCount":17,"thoughtsTokenCount":4,"totalTokenCount":37}}"#);
        // The Anthropic signature comes back when the client replays the thought.
        let back = decode_response(&body).unwrap();
        assert_eq!(back.content[0], r.content[0]);
        // Also when the client is the Python SDK, which writes the bytes back URL-safe.
        let signature = "EqQB+/Cg==";
        let lead_and_signature =
            format!("Y2NtZXNoLmFudGhyb3BpYy5zaWc6{}", signature.replace('+', "-").replace('/', "_"));
        let body = json!({"candidates": [{"content": {"role": "model", "parts": [
            {"text": "Plan.", "thought": true, "thought_signature": lead_and_signature}]}}]});
        let back = decode_response(&serde_json::to_vec(&body).unwrap()).unwrap();
        assert_eq!(back.content[0], Part::Thinking { text: "Plan.".into(), signature: Some(signature.into()) });
    }

    #[test]
    fn count_tokens_answers() {
        assert_eq!(decode_count_tokens_response(br#"{"totalTokens": 31, "promptTokensDetails": []}"#), Some(31));
        assert_eq!(decode_count_tokens_response(br#"{"error": {}}"#), None);
        assert_eq!(encode_count_tokens_response(7), br#"{"totalTokens":7}"#);
    }

    #[test]
    fn function_responses_find_their_call() {
        let mut calls = Calls::default();
        let a = calls.call(json!({"name": "read", "args": {"p": 1}}).as_object().unwrap(), Some("c2ln"));
        let b = calls.call(json!({"name": "list", "args": {}}).as_object().unwrap(), None);
        let Part::ToolUse { id: a_id, .. } = a else { panic!() };
        let Part::ToolUse { id: b_id, .. } = b else { panic!() };
        // By name (no ids anywhere), whatever the order of the responses.
        assert_eq!(calls.answer(None, "list"), b_id);
        assert_eq!(calls.answer(None, "read"), a_id);
        // By the Gemini id, which the signature-carrying IR id starts with.
        let c = calls.call(json!({"id": "x1", "name": "read", "args": {}}).as_object().unwrap(), Some("c2ln"));
        let Part::ToolUse { id: c_id, .. } = c else { panic!() };
        assert_eq!(c_id, "x1__thought__c2ln");
        assert_eq!(calls.answer(Some("x1"), "read"), c_id);
        assert_eq!(calls.answer(Some("x9"), "read"), "x9");
    }
}
