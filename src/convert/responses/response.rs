//! Complete (non-streaming) answers: a Responses upstream's `response` object to the IR, and the
//! IR to a `response` object for a Responses client; with the output items, usage and stop
//! reasons the stream shares.

use serde_json::{Value, json};

use super::{
    REDACTED_BLOB, SUMMARY_SEPARATOR, THINKING_BLOB, flat_tool_name, get_str, is_set, reasoning_part, text_part,
};
use crate::convert::ir::*;
use crate::protocol::lenient::{arguments_string, parse_arguments, token_count};

pub(super) fn decode_usage(u: &Value) -> Usage {
    let tokens = |v: &Value, key: &str| v.get(key).and_then(token_count);
    let details = u.get("input_tokens_details");
    let cached = details.and_then(|d| tokens(d, "cached_tokens").or_else(|| tokens(d, "cache_read_tokens")));
    let cache_write = details.and_then(|d| tokens(d, "cache_write_tokens"));
    let input = tokens(u, "input_tokens")
        .map(|t| t.saturating_sub(cached.unwrap_or(0)).saturating_sub(cache_write.unwrap_or(0)));
    Usage {
        input,
        output: tokens(u, "output_tokens"),
        cache_read: cached,
        cache_write,
        reasoning: u.get("output_tokens_details").and_then(|d| tokens(d, "reasoning_tokens")),
    }
}

/// Stop reason from a response's status.
pub(super) fn stop_reason(
    status: Option<&str>,
    incomplete_reason: Option<&str>,
    tool_calls: bool,
    refusal: bool,
) -> StopReason {
    match status {
        Some("incomplete") => match incomplete_reason {
            Some("content_filter") => StopReason::Refusal,
            _ => StopReason::MaxTokens,
        },
        _ if tool_calls => StopReason::ToolUse,
        _ if refusal => StopReason::Refusal,
        _ => StopReason::EndTurn,
    }
}

/// One output item of a complete response, appended to `content`; returns (tool call, refusal).
fn decode_output_item(item: &Value, content: &mut Vec<Part>) -> (bool, bool) {
    let mut tool = false;
    let mut refusal = false;
    match get_str(item, "type") {
        Some("message") => {
            for c in item.get("content").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
                match get_str(c, "type") {
                    Some("output_text" | "text") => {
                        let t = get_str(c, "text").unwrap_or_default();
                        if !t.is_empty() {
                            content.push(Part::Text(text_part(t)));
                        }
                    }
                    Some("refusal") => {
                        refusal = true;
                        let t = get_str(c, "refusal").unwrap_or_default();
                        if !t.is_empty() {
                            content.push(Part::Text(text_part(t)));
                        }
                    }
                    _ => {}
                }
            }
        }
        Some("function_call") => {
            tool = true;
            let name = get_str(item, "name").unwrap_or_default();
            let name = match get_str(item, "namespace").filter(|ns| !ns.is_empty()) {
                Some(ns) => flat_tool_name(ns, name),
                None => name.to_owned(),
            };
            let raw = match item.get("arguments") {
                Some(Value::String(s)) => s.clone(),
                None | Some(Value::Null) => String::new(),
                Some(other) => other.to_string(),
            };
            let id = get_str(item, "call_id").or_else(|| get_str(item, "id")).unwrap_or_default().to_owned();
            content.push(Part::ToolUse { id, name, input: parse_arguments(&raw), arguments: Some(raw) });
        }
        Some("reasoning") => match reasoning_part(item) {
            Part::ReasoningItem { id, summary, encrypted_content } => {
                // Another client shows the summary, as thinking. The encrypted content is useless
                // outside OpenAI, but an Anthropic client keeps a thinking block's signature and
                // sends it back: carried there, the reasoning reaches this API again next turn.
                let signature = encrypted_content.as_deref().map(|enc| reasoning_signature(id.as_deref(), enc));
                let mut texts: Vec<String> = summary;
                if texts.is_empty() {
                    texts = item
                        .get("content")
                        .and_then(Value::as_array)
                        .map(|c| c.iter().filter_map(|p| get_str(p, "text")).map(str::to_owned).collect())
                        .unwrap_or_default();
                }
                let text = texts.join(SUMMARY_SEPARATOR);
                if !text.is_empty() || signature.is_some() {
                    content.push(Part::Thinking { text, signature });
                }
            }
            other => content.push(other),
        },
        _ => {}
    }
    (tool, refusal)
}

/// Upstream non-streaming response body (Responses) → IR.
pub fn decode_response(body: &[u8]) -> Result<Response, ConvertError> {
    let root: Value = crate::protocol::lenient::from_json(body)
        .map_err(|e| ConvertError::new("body", format!("the upstream response is not valid JSON: {e}")))?;
    if !root.is_object() {
        return Err(ConvertError::new("body", "the upstream response is not a JSON object"));
    }
    let status = get_str(&root, "status");
    let failed = status == Some("failed") || (status.is_none() && is_set(root.get("error")));
    if failed {
        let err = root.get("error").cloned().unwrap_or(Value::Null);
        let msg = get_str(&err, "message").unwrap_or("the upstream response failed");
        return Err(ConvertError::new("error", format!("upstream response failed: {msg}")));
    }
    match status {
        Some("in_progress" | "queued") => {
            return Err(ConvertError::new("status", "the upstream response is not finished (background mode)"));
        }
        Some("cancelled") => return Err(ConvertError::new("status", "the upstream response was cancelled")),
        _ => {}
    }
    let mut content = Vec::new();
    let mut tool = false;
    let mut refusal = false;
    for item in root.get("output").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
        let (t, r) = decode_output_item(item, &mut content);
        tool |= t;
        refusal |= r;
    }
    let incomplete = root.get("incomplete_details").and_then(|d| get_str(d, "reason"));
    Ok(Response {
        id: get_str(&root, "id").unwrap_or_default().to_owned(),
        model: get_str(&root, "model").unwrap_or_default().to_owned(),
        content,
        stop_reason: Some(stop_reason(status, incomplete, tool, refusal)),
        stop_sequence: None,
        usage: root.get("usage").map(decode_usage).unwrap_or_default(),
        created: root.get("created_at").and_then(Value::as_f64).filter(|f| *f >= 0.0).map(|f| f as u64),
    })
}

fn encode_usage(u: &Usage) -> Value {
    let cached = u.cache_read.unwrap_or(0);
    let cache_write = u.cache_write.unwrap_or(0);
    // OpenAI counts cached (read and written) input inside input_tokens.
    let input = u.input.unwrap_or(0).saturating_add(cached).saturating_add(cache_write);
    let output = u.output.unwrap_or(0);
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": cache_write},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": u.reasoning.unwrap_or(0)},
        "total_tokens": input.saturating_add(output),
    })
}

/// How a response ended: `status`, `incomplete_details`, `error`.
pub(super) struct Outcome {
    pub(super) status: &'static str,
    incomplete_details: Value,
    error: Value,
}

impl Outcome {
    pub(super) fn in_progress() -> Self {
        Self { status: "in_progress", incomplete_details: Value::Null, error: Value::Null }
    }

    pub(super) fn failed(error: Value) -> Self {
        Self { status: "failed", incomplete_details: Value::Null, error }
    }

    /// Status for a stop reason: `incomplete` for max tokens and refusals.
    pub(super) fn for_stop(stop: Option<StopReason>) -> Self {
        let (status, incomplete_details) = match stop {
            Some(StopReason::MaxTokens) => ("incomplete", json!({"reason": "max_output_tokens"})),
            Some(StopReason::Refusal) => ("incomplete", json!({"reason": "content_filter"})),
            _ => ("completed", Value::Null),
        };
        Self { status, incomplete_details, error: Value::Null }
    }
}

/// The ids this codec invents for a response and its output items.
fn response_id(ctx: &EncodeContext) -> String {
    match &ctx.kept_ids.response {
        Some(id) => id.clone(),
        None => format!("resp_{}", ctx.id_seed),
    }
}

pub(super) fn item_id(prefix: &str, ctx: &EncodeContext, output_index: usize) -> String {
    match ctx.kept_ids.items.iter().find(|(i, _)| *i == output_index) {
        Some((_, id)) => id.clone(),
        None => format!("{prefix}_{}_{output_index}", ctx.id_seed),
    }
}

/// (name, namespace) as the client declared the tool.
fn client_tool_name<'a>(ctx: &'a EncodeContext, name: &'a str) -> (&'a str, Option<&'a str>) {
    match ctx.namespaced_tools.iter().find(|(flat, _, _)| flat == name) {
        Some((_, ns, orig)) => (orig.as_str(), Some(ns.as_str())),
        None => (name, None),
    }
}

pub(super) fn function_call_item(
    ctx: &EncodeContext,
    id: &str,
    status: &str,
    call_id: &str,
    name: &str,
    arguments: &str,
) -> Value {
    let (name, ns) = client_tool_name(ctx, name);
    let mut item = json!({
        "id": id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    });
    if let (Some(ns), Some(obj)) = (ns, item.as_object_mut()) {
        obj.insert("namespace".to_owned(), Value::String(ns.to_owned()));
    }
    item
}

pub(super) fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

pub(super) fn message_item(id: &str, status: &str, content: Vec<Value>) -> Value {
    json!({"id": id, "type": "message", "status": status, "role": "assistant", "content": content})
}

pub(super) fn reasoning_item(id: &str, summary: &[String], encrypted: Option<&str>) -> Value {
    let summary: Vec<Value> = summary.iter().map(|s| json!({"type": "summary_text", "text": s})).collect();
    json!({"id": id, "type": "reasoning", "summary": summary, "encrypted_content": encrypted})
}

/// The encrypted content handed to a Responses client for a thinking block: the Anthropic
/// signature (or redacted data) behind a ccmesh prefix, only when the client asked for it.
pub(super) fn thinking_blob(ctx: &EncodeContext, signature: Option<&str>) -> Option<String> {
    let sig = signature.filter(|s| !s.is_empty())?;
    ctx.include_encrypted_reasoning.then(|| format!("{THINKING_BLOB}{sig}"))
}

/// The complete `response` object.
pub(super) fn response_object(
    ctx: &EncodeContext,
    created: u64,
    model: &str,
    outcome: Outcome,
    output: Vec<Value>,
    usage: Option<&Usage>,
) -> Value {
    let Outcome { status, incomplete_details, error } = outcome;
    let model = if model.is_empty() { ctx.request_model.as_str() } else { model };
    json!({
        "id": response_id(ctx),
        "object": "response",
        "created_at": created,
        "status": status,
        "background": false,
        "error": error,
        "incomplete_details": incomplete_details,
        "instructions": null,
        "max_output_tokens": null,
        "max_tool_calls": null,
        "model": model,
        "output": output,
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "reasoning": {"effort": null, "summary": null},
        "service_tier": "default",
        "store": false,
        "temperature": null,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_logprobs": null,
        "top_p": null,
        "truncation": "disabled",
        "usage": usage.map(encode_usage),
        "user": null,
        "metadata": {},
    })
}

/// IR → response body for a Responses client.
pub fn encode_response(resp: &Response, ctx: &EncodeContext) -> Vec<u8> {
    let mut output: Vec<Value> = Vec::new();
    let mut texts: Vec<Value> = Vec::new();
    fn flush_texts(ctx: &EncodeContext, output: &mut Vec<Value>, texts: &mut Vec<Value>) {
        if !texts.is_empty() {
            let id = item_id("msg", ctx, output.len());
            output.push(message_item(&id, "completed", std::mem::take(texts)));
        }
    }
    for part in &resp.content {
        match part {
            Part::Text(t) => texts.push(output_text(&t.text)),
            Part::ToolUse { id, name, input, arguments } => {
                flush_texts(ctx, &mut output, &mut texts);
                let fid = item_id("fc", ctx, output.len());
                let args = arguments_string(input, arguments.as_deref());
                output.push(function_call_item(ctx, &fid, "completed", id, name, &args));
            }
            Part::Thinking { text, signature } => {
                flush_texts(ctx, &mut output, &mut texts);
                let rid = item_id("rs", ctx, output.len());
                let summary: Vec<String> = if text.is_empty() { Vec::new() } else { vec![text.clone()] };
                output.push(reasoning_item(&rid, &summary, thinking_blob(ctx, signature.as_deref()).as_deref()));
            }
            Part::RedactedThinking { data } => {
                if ctx.include_encrypted_reasoning {
                    flush_texts(ctx, &mut output, &mut texts);
                    let rid = item_id("rs", ctx, output.len());
                    output.push(reasoning_item(&rid, &[], Some(&format!("{REDACTED_BLOB}{data}"))));
                }
            }
            Part::ReasoningItem { id, summary, encrypted_content } => {
                flush_texts(ctx, &mut output, &mut texts);
                let rid = id.clone().unwrap_or_else(|| item_id("rs", ctx, output.len()));
                let enc = encrypted_content.as_deref().filter(|_| ctx.include_encrypted_reasoning);
                output.push(reasoning_item(&rid, summary, enc));
            }
            Part::Image(_) | Part::ToolResult { .. } | Part::Document { .. } => {}
        }
    }
    flush_texts(ctx, &mut output, &mut texts);
    let created = resp.created.unwrap_or(ctx.created);
    let obj =
        response_object(ctx, created, &resp.model, Outcome::for_stop(resp.stop_reason), output, Some(&resp.usage));
    answer_json(&obj, resp)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::convert::responses::tests::*;
    use serde_json::{Value, json};

    fn upstream_response(status: &str, output: Value, usage: Value, incomplete: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "id": "resp_abc", "object": "response", "created_at": 1741476777, "status": status,
            "error": null, "incomplete_details": incomplete, "model": "gpt-5-2025-08-07",
            "output": output, "parallel_tool_calls": true, "tool_choice": "auto", "tools": [], "usage": usage
        }))
        .unwrap()
    }

    #[test]
    fn decode_response_cases() {
        let usage = json!({"input_tokens": 1200, "input_tokens_details": {"cached_tokens": 1000}, "output_tokens": 300,
            "output_tokens_details": {"reasoning_tokens": 200}, "total_tokens": 1500});
        let text_body = upstream_response(
            "completed",
            json!([
                {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "**Plan**"}, {"type": "summary_text", "text": "Then act."}], "encrypted_content": "gAAAA"},
                {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant", "content": [{"type": "output_text", "text": "Hi!", "annotations": []}]}
            ]),
            usage.clone(),
            Value::Null,
        );
        let r = decode_response(&text_body).unwrap();
        assert_eq!(r.stop_reason, Some(StopReason::EndTurn));
        assert_eq!(
            r.usage,
            Usage {
                input: Some(200),
                output: Some(300),
                cache_read: Some(1000),
                cache_write: None,
                reasoning: Some(200)
            }
        );
        // The encrypted reasoning rides in the signature, for an Anthropic client to send back.
        assert_eq!(
            r.content[0],
            Part::Thinking {
                text: "**Plan**\n\nThen act.".into(),
                signature: Some(reasoning_signature(Some("rs_1"), "gAAAA"))
            }
        );
        assert_eq!(
            parse_reasoning_signature("ccmesh.openai-reasoning.v1:rs_1:gAAAA"),
            Some((Some("rs_1".into()), "gAAAA".into()))
        );
        assert_eq!(parse_reasoning_signature("EqQBCkYsig"), None, "Anthropic's own signatures are not carriers");
        assert_eq!(r.model, "gpt-5-2025-08-07");
        assert_eq!(r.created, Some(1741476777));

        let tools = upstream_response(
            "completed",
            json!([
                {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
                {"id": "fc_2", "type": "function_call", "status": "completed", "call_id": "call_2", "name": "spawn_agent", "namespace": "multi_agent_v1", "arguments": "{}"}
            ]),
            usage.clone(),
            Value::Null,
        );
        let r = decode_response(&tools).unwrap();
        assert_eq!(r.stop_reason, Some(StopReason::ToolUse));
        assert_eq!(r.content[1], tool_use("call_2", "multi_agent_v1__spawn_agent", "{}"));

        let max = upstream_response("incomplete", json!([]), usage.clone(), json!({"reason": "max_output_tokens"}));
        assert_eq!(decode_response(&max).unwrap().stop_reason, Some(StopReason::MaxTokens));
        let filtered = upstream_response("incomplete", json!([]), usage.clone(), json!({"reason": "content_filter"}));
        assert_eq!(decode_response(&filtered).unwrap().stop_reason, Some(StopReason::Refusal));
        let refusal = upstream_response(
            "completed",
            json!([{"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
                "content": [{"type": "refusal", "refusal": "I can't help with that."}]}]),
            usage,
            Value::Null,
        );
        let r = decode_response(&refusal).unwrap();
        assert_eq!(r.stop_reason, Some(StopReason::Refusal));
        assert_eq!(r.content, vec![text("I can't help with that.")]);

        let failed = upstream_response("failed", json!([]), Value::Null, Value::Null);
        assert!(decode_response(&failed).is_err());
        assert!(decode_response(b"nope").is_err());
        insta::assert_snapshot!("decode_response_text", format!("{:#?}", decode_response(&text_body).unwrap()));
        insta::assert_snapshot!("decode_response_tools", format!("{:#?}", decode_response(&tools).unwrap()));
    }

    #[test]
    fn decode_response_cache_write_tokens() {
        let body = upstream_response(
            "completed",
            json!([]),
            json!({"input_tokens": 5000, "input_tokens_details": {"cached_tokens": 1000, "cache_write_tokens": 3000},
                "output_tokens": 10, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 5010}),
            Value::Null,
        );
        let u = decode_response(&body).unwrap().usage;
        assert_eq!((u.input, u.cache_read, u.cache_write), (Some(1000), Some(1000), Some(3000)));
    }

    #[test]
    fn encode_response_cases() {
        let body: Value = serde_json::from_slice(&encode_response(&sample_response(), &ctx())).unwrap();
        assert_eq!(body["usage"]["input_tokens"], 1325);
        assert_eq!(body["usage"]["input_tokens_details"]["cached_tokens"], 1000);
        assert_eq!(body["output"][3]["namespace"], "multi_agent_v1");
        assert_eq!(body["output"][3]["name"], "spawn_agent");
        assert_eq!(body["output"][0]["encrypted_content"], Value::Null, "no signature without include");
        insta::assert_json_snapshot!("encode_response_tools", body);

        let mut c = ctx();
        c.include_encrypted_reasoning = true;
        let body: Value = serde_json::from_slice(&encode_response(&sample_response(), &c)).unwrap();
        assert_eq!(body["output"][0]["encrypted_content"], format!("{THINKING_BLOB}EqQBCkYsig"));

        for (stop, status, reason) in [
            (StopReason::MaxTokens, "incomplete", json!({"reason": "max_output_tokens"})),
            (StopReason::Refusal, "incomplete", json!({"reason": "content_filter"})),
            (StopReason::EndTurn, "completed", Value::Null),
            (StopReason::StopSequence, "completed", Value::Null),
            (StopReason::PauseTurn, "completed", Value::Null),
        ] {
            let r = Response { content: vec![text("x")], stop_reason: Some(stop), ..Response::default() };
            let body: Value = serde_json::from_slice(&encode_response(&r, &ctx())).unwrap();
            assert_eq!(body["status"], status);
            assert_eq!(body["incomplete_details"], reason);
            assert_eq!(body["model"], "gpt-5", "request model when the upstream names none");
            assert_eq!(body["created_at"], 1_700_000_000);
        }
    }
}
