//! IR events to SSE for a Responses client, one event at a time: the lifecycle events, one output
//! item per block, and `response.completed` (or `.incomplete`, `.failed`) with the whole
//! response at the end.

use serde_json::{Value, json};

use super::super::REDACTED_BLOB;
use super::super::response::{
    Outcome, function_call_item, item_id, message_item, output_text, reasoning_item, response_object, thinking_blob,
};
use crate::convert::ir::*;
use crate::protocol::errors::response_failed_event;
use crate::protocol::json_write::JsonObject;
use crate::protocol::sse::{write_event, write_event_with};

#[derive(Debug)]
enum EncBlock {
    /// A text block: a content part of the current message item.
    Text {
        content_index: usize,
        text: String,
    },
    Reasoning {
        output_index: usize,
        id: String,
        text: String,
        part_open: bool,
        signature: Option<String>,
        encrypted: Option<String>,
    },
    Tool {
        output_index: usize,
        id: String,
        call_id: String,
        name: String,
        args: String,
    },
    /// Not shown to the client (redacted thinking without include).
    Hidden,
}

/// The message item that text blocks write into; kept open across consecutive text blocks.
#[derive(Debug)]
struct OpenMessage {
    output_index: usize,
    id: String,
    parts: Vec<String>,
}

/// Where a delta goes: the three delta events, which are nearly all of a stream.
#[derive(Clone, Copy)]
enum DeltaOf {
    /// `response.output_text.delta`, of a message's content part.
    Text { content_index: usize },
    /// `response.reasoning_summary_text.delta`, of a reasoning item's (only) summary part.
    Summary,
    /// `response.function_call_arguments.delta`.
    Arguments,
}

/// A delta event, written by hand with its members in the order `emit`'s map writes every other
/// event's: sorted by name.
fn write_delta(out: &mut Vec<u8>, seq: u64, of: DeltaOf, item_id: &str, output_index: usize, delta: &str) {
    let ty = match of {
        DeltaOf::Text { .. } => "response.output_text.delta",
        DeltaOf::Summary => "response.reasoning_summary_text.delta",
        DeltaOf::Arguments => "response.function_call_arguments.delta",
    };
    write_event_with(out, Some(ty), |out| {
        let mut json = JsonObject::open(out);
        if let DeltaOf::Text { content_index } = of {
            json.count("content_index", content_index as u64);
        }
        json.text("delta", delta);
        json.text("item_id", item_id);
        if let DeltaOf::Text { .. } = of {
            json.raw("logprobs", "[]");
        }
        json.count("output_index", output_index as u64);
        json.count("sequence_number", seq);
        if let DeltaOf::Summary = of {
            json.count("summary_index", 0);
        }
        json.text("type", ty);
        json.close();
    });
}

/// Incremental IR events → Responses SSE bytes.
#[derive(Debug)]
pub struct StreamEncoder {
    ctx: EncodeContext,
    seq: u64,
    started: bool,
    done: bool,
    model: String,
    created: u64,
    usage: Usage,
    stop_reason: Option<StopReason>,
    /// Finished output items by output_index (None while still open).
    output: Vec<Option<Value>>,
    message: Option<OpenMessage>,
    blocks: Vec<(usize, EncBlock)>,
    /// Text blocks closed early because another kind of block started while they were open;
    /// a later delta reopens them in a new message item.
    interrupted_text: Vec<usize>,
}

impl StreamEncoder {
    pub fn new(ctx: EncodeContext) -> Self {
        let created = ctx.created;
        Self {
            ctx,
            seq: 0,
            started: false,
            done: false,
            model: String::new(),
            created,
            usage: Usage::default(),
            stop_reason: None,
            output: Vec::new(),
            message: None,
            blocks: Vec::new(),
            interrupted_text: Vec::new(),
        }
    }

    /// The next event's `sequence_number`.
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq - 1
    }

    fn emit(&mut self, out: &mut Vec<u8>, ty: &str, mut data: Value) {
        if let Some(obj) = data.as_object_mut() {
            obj.insert("type".to_owned(), Value::String(ty.to_owned()));
            obj.insert("sequence_number".to_owned(), json!(self.seq));
        }
        self.seq += 1;
        write_event(out, Some(ty), &data);
    }

    fn response(&self, outcome: Outcome, usage: Option<&Usage>) -> Value {
        let output: Vec<Value> = self.output.iter().flatten().cloned().collect();
        response_object(&self.ctx, self.created, &self.model, outcome, output, usage)
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        let r = self.response(Outcome::in_progress(), None);
        self.emit(out, "response.created", json!({"response": r}));
        self.emit(out, "response.in_progress", json!({"response": r}));
    }

    fn new_output_index(&mut self) -> usize {
        self.output.push(None);
        self.output.len() - 1
    }

    fn close_message(&mut self, out: &mut Vec<u8>) {
        if self.message.is_none() {
            return;
        }
        // Text blocks still open (a decoder that interleaves) are finished first.
        let open: Vec<usize> =
            self.blocks.iter().filter(|(_, b)| matches!(b, EncBlock::Text { .. })).map(|(i, _)| *i).collect();
        for index in open {
            self.block_stop(index, out);
            self.interrupted_text.push(index);
        }
        let Some(m) = self.message.take() else { return };
        let content: Vec<Value> = m.parts.iter().map(|t| output_text(t)).collect();
        let item = message_item(&m.id, "completed", content);
        self.emit(out, "response.output_item.done", json!({"output_index": m.output_index, "item": item}));
        if let Some(slot) = self.output.get_mut(m.output_index) {
            *slot = Some(item);
        }
    }

    fn block_start(&mut self, index: usize, block: &BlockStart, out: &mut Vec<u8>) {
        // A block index reused without a stop: finish the old block first.
        self.block_stop(index, out);
        if !matches!(block, BlockStart::Text) {
            self.close_message(out);
        }
        let state = match block {
            BlockStart::Text => {
                if self.message.is_none() {
                    let oi = self.new_output_index();
                    let id = item_id("msg", &self.ctx, oi);
                    let item = message_item(&id, "in_progress", Vec::new());
                    self.emit(out, "response.output_item.added", json!({"output_index": oi, "item": item}));
                    self.message = Some(OpenMessage { output_index: oi, id, parts: Vec::new() });
                }
                let (oi, id, ci) = match self.message.as_mut() {
                    Some(m) => {
                        m.parts.push(String::new());
                        (m.output_index, m.id.clone(), m.parts.len() - 1)
                    }
                    None => return,
                };
                self.emit(
                    out,
                    "response.content_part.added",
                    json!({"item_id": id, "output_index": oi, "content_index": ci, "part": output_text("")}),
                );
                EncBlock::Text { content_index: ci, text: String::new() }
            }
            BlockStart::Thinking => self.open_reasoning(None, None, out),
            BlockStart::ReasoningItem { id, encrypted_content } => {
                let encrypted = encrypted_content.clone().filter(|_| self.ctx.include_encrypted_reasoning);
                self.open_reasoning(id.clone(), encrypted, out)
            }
            BlockStart::RedactedThinking { data } => {
                if self.ctx.include_encrypted_reasoning {
                    self.open_reasoning(None, Some(format!("{REDACTED_BLOB}{data}")), out)
                } else {
                    EncBlock::Hidden
                }
            }
            BlockStart::ToolUse { id, name } => {
                let oi = self.new_output_index();
                let fid = item_id("fc", &self.ctx, oi);
                let item = function_call_item(&self.ctx, &fid, "in_progress", id, name, "");
                self.emit(out, "response.output_item.added", json!({"output_index": oi, "item": item}));
                EncBlock::Tool {
                    output_index: oi,
                    id: fid,
                    call_id: id.clone(),
                    name: name.clone(),
                    args: String::new(),
                }
            }
        };
        self.blocks.push((index, state));
    }

    /// A reasoning output item, announced now and filled by later deltas; `id` when the source
    /// had one (else one is made up), `encrypted` when the client may see it.
    fn open_reasoning(&mut self, id: Option<String>, encrypted: Option<String>, out: &mut Vec<u8>) -> EncBlock {
        let oi = self.new_output_index();
        let id = id.unwrap_or_else(|| item_id("rs", &self.ctx, oi));
        let item = reasoning_item(&id, &[], None);
        self.emit(out, "response.output_item.added", json!({"output_index": oi, "item": item}));
        EncBlock::Reasoning { output_index: oi, id, text: String::new(), part_open: false, signature: None, encrypted }
    }

    fn block_mut(&mut self, index: usize) -> Option<&mut EncBlock> {
        self.blocks.iter_mut().find(|(i, _)| *i == index).map(|(_, b)| b)
    }

    fn text_delta(&mut self, index: usize, delta: &str, out: &mut Vec<u8>) {
        if delta.is_empty() {
            return;
        }
        if let Some(p) = self.interrupted_text.iter().position(|i| *i == index) {
            self.interrupted_text.swap_remove(p);
            self.block_start(index, &BlockStart::Text, out);
        }
        if self.message.is_none() {
            return;
        }
        let ci = match self.block_mut(index) {
            Some(EncBlock::Text { content_index, text }) => {
                text.push_str(delta);
                *content_index
            }
            _ => return,
        };
        let seq = self.next_seq();
        let Some(m) = self.message.as_mut() else { return };
        if let Some(part) = m.parts.get_mut(ci) {
            part.push_str(delta);
        }
        write_delta(out, seq, DeltaOf::Text { content_index: ci }, &m.id, m.output_index, delta);
    }

    fn thinking_delta(&mut self, index: usize, delta: &str, out: &mut Vec<u8>) {
        if delta.is_empty() {
            return;
        }
        let (oi, id, first) = match self.block_mut(index) {
            Some(EncBlock::Reasoning { output_index, id, text, part_open, .. }) => {
                let first = !*part_open;
                *part_open = true;
                text.push_str(delta);
                (*output_index, id.clone(), first)
            }
            _ => return,
        };
        if first {
            self.emit(
                out,
                "response.reasoning_summary_part.added",
                json!({"item_id": id, "output_index": oi, "summary_index": 0, "part": {"type": "summary_text", "text": ""}}),
            );
        }
        let seq = self.next_seq();
        write_delta(out, seq, DeltaOf::Summary, &id, oi, delta);
    }

    fn args_delta(&mut self, index: usize, delta: &str, out: &mut Vec<u8>) {
        if delta.is_empty() {
            return;
        }
        if !matches!(self.block_mut(index), Some(EncBlock::Tool { .. })) {
            return;
        }
        let seq = self.next_seq();
        let Some(EncBlock::Tool { output_index, id, args, .. }) = self.block_mut(index) else { return };
        args.push_str(delta);
        write_delta(out, seq, DeltaOf::Arguments, id, *output_index, delta);
    }

    fn block_stop(&mut self, index: usize, out: &mut Vec<u8>) {
        self.interrupted_text.retain(|i| *i != index);
        let Some(pos) = self.blocks.iter().position(|(i, _)| *i == index) else { return };
        let (_, block) = self.blocks.remove(pos);
        match block {
            EncBlock::Text { content_index, text } => {
                let Some((oi, id)) = self.message.as_ref().map(|m| (m.output_index, m.id.clone())) else { return };
                self.emit(
                    out,
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": oi, "content_index": content_index, "text": text, "logprobs": []}),
                );
                self.emit(
                    out,
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": oi, "content_index": content_index, "part": output_text(&text)}),
                );
                // The message item stays open for a following text block.
            }
            EncBlock::Reasoning { output_index, id, text, part_open, signature, encrypted } => {
                if part_open {
                    self.emit(
                        out,
                        "response.reasoning_summary_text.done",
                        json!({"item_id": id, "output_index": output_index, "summary_index": 0, "text": text}),
                    );
                    self.emit(
                        out,
                        "response.reasoning_summary_part.done",
                        json!({"item_id": id, "output_index": output_index, "summary_index": 0, "part": {"type": "summary_text", "text": text}}),
                    );
                }
                let encrypted = encrypted.or_else(|| thinking_blob(&self.ctx, signature.as_deref()));
                let summary: Vec<String> = if text.is_empty() { Vec::new() } else { vec![text] };
                let item = reasoning_item(&id, &summary, encrypted.as_deref());
                self.emit(out, "response.output_item.done", json!({"output_index": output_index, "item": item}));
                if let Some(slot) = self.output.get_mut(output_index) {
                    *slot = Some(item);
                }
            }
            EncBlock::Tool { output_index, id, call_id, name, mut args } => {
                if args.is_empty() {
                    // A call without arguments still needs valid JSON arguments.
                    args = "{}".to_owned();
                    self.emit(
                        out,
                        "response.function_call_arguments.delta",
                        json!({"item_id": id, "output_index": output_index, "delta": args}),
                    );
                }
                self.emit(
                    out,
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": output_index, "arguments": args}),
                );
                let item = function_call_item(&self.ctx, &id, "completed", &call_id, &name, &args);
                self.emit(out, "response.output_item.done", json!({"output_index": output_index, "item": item}));
                if let Some(slot) = self.output.get_mut(output_index) {
                    *slot = Some(item);
                }
            }
            EncBlock::Hidden => {}
        }
    }

    fn close_all(&mut self, out: &mut Vec<u8>) {
        let open: Vec<usize> = self.blocks.iter().map(|(i, _)| *i).collect();
        for index in open {
            self.block_stop(index, out);
        }
        self.close_message(out);
    }

    /// IR event in, Responses SSE bytes out.
    pub fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        if let StreamEvent::Start { model, usage, created, .. } = event {
            if !self.started {
                self.model = model.clone();
                if let Some(c) = created {
                    self.created = *c;
                }
                self.usage.merge(usage);
            }
            self.start(out);
            return;
        }
        self.start(out);
        match event {
            StreamEvent::Start { .. } => {}
            StreamEvent::BlockStart { index, block } => self.block_start(*index, block, out),
            StreamEvent::TextDelta { index, text } => self.text_delta(*index, text, out),
            StreamEvent::ThinkingDelta { index, text } => self.thinking_delta(*index, text, out),
            StreamEvent::SignatureDelta { index, signature } => {
                if let Some(EncBlock::Reasoning { signature: s, .. }) = self.block_mut(*index) {
                    s.get_or_insert_with(String::new).push_str(signature);
                }
            }
            StreamEvent::ToolArgsDelta { index, partial_json } => self.args_delta(*index, partial_json, out),
            StreamEvent::BlockStop { index } => self.block_stop(*index, out),
            StreamEvent::Finish { stop_reason, usage, .. } => {
                if stop_reason.is_some() {
                    self.stop_reason = *stop_reason;
                }
                self.usage.merge(usage);
            }
            StreamEvent::End => {
                self.close_all(out);
                let outcome = Outcome::for_stop(self.stop_reason);
                let ty = if outcome.status == "incomplete" { "response.incomplete" } else { "response.completed" };
                let usage = self.usage;
                let r = self.response(outcome, Some(&usage));
                self.emit(out, ty, json!({"response": r}));
                self.done = true;
            }
            StreamEvent::Error { kind, message } => {
                let error = json!({"code": kind.failed_response_code(), "message": message});
                let usage = self.usage;
                let r = self.response(Outcome::failed(error), Some(&usage));
                response_failed_event(out, self.seq, r);
                self.seq += 1;
                self.done = true;
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::convert::responses::THINKING_BLOB;
    use crate::convert::responses::tests::*;
    use crate::protocol::errors::ErrorKind;
    use serde_json::{Value, json};

    #[test]
    fn stream_encode_transcript() {
        let r = sample_response();
        let bytes = encode_stream(&response_events(&r), ctx());
        let terminal = validate_stream(&bytes);
        assert_eq!(terminal["type"], "response.completed");
        assert_eq!(terminal["response"]["output"][3]["namespace"], "multi_agent_v1");
        insta::assert_snapshot!("stream_encode_tools", String::from_utf8(bytes.clone()).unwrap());
        // Decoding our own output gives back what went in.
        assert_eq!(aggregate(&decode_stream(std::str::from_utf8(&bytes).unwrap())), expected_agg(&r));
    }

    #[test]
    fn stream_encode_thinking_signature_with_include() {
        let mut c = ctx();
        c.include_encrypted_reasoning = true;
        let r = Response {
            content: vec![
                Part::Thinking { text: "Hmm.".into(), signature: Some("sig".into()) },
                Part::RedactedThinking { data: "opaque".into() },
                text("Hi"),
            ],
            stop_reason: Some(StopReason::MaxTokens),
            ..Response::default()
        };
        let bytes = encode_stream(&response_events(&r), c.clone());
        let terminal = validate_stream(&bytes);
        assert_eq!(terminal["type"], "response.incomplete");
        assert_eq!(terminal["response"]["incomplete_details"]["reason"], "max_output_tokens");
        let out = &terminal["response"]["output"];
        assert_eq!(out[0]["encrypted_content"], format!("{THINKING_BLOB}sig"));
        assert_eq!(out[1]["encrypted_content"], format!("{REDACTED_BLOB}opaque"));
        // The client replays these items: they turn back into signed Anthropic thinking.
        let replay =
            dec(json!({"model": "m", "input": [{"role": "user", "content": "q"}, out[0], out[1], out[2]]})).unwrap();
        assert_eq!(
            replay.messages[1].content[0],
            Part::Thinking { text: "Hmm.".into(), signature: Some("sig".into()) }
        );
        assert_eq!(replay.messages[1].content[1], Part::RedactedThinking { data: "opaque".into() });
        insta::assert_snapshot!("stream_encode_thinking_include", String::from_utf8(bytes).unwrap());
        // Without include the redacted block is invisible and no signature leaks out.
        let bytes = encode_stream(&response_events(&r), ctx());
        let terminal = validate_stream(&bytes);
        assert_eq!(terminal["response"]["output"].as_array().unwrap().len(), 2);
        assert_eq!(terminal["response"]["output"][0]["encrypted_content"], Value::Null);
    }

    #[test]
    fn stream_encode_error_and_edge_cases() {
        // Error mid-stream → response.failed with the error.
        let evs = vec![
            StreamEvent::Start { id: "x".into(), model: "claude".into(), usage: Usage::default(), created: Some(5) },
            StreamEvent::BlockStart { index: 0, block: BlockStart::Text },
            StreamEvent::TextDelta { index: 0, text: "Par".into() },
            StreamEvent::Error { kind: ErrorKind::Overloaded, message: "Overloaded".into() },
            StreamEvent::End,
        ];
        let bytes = encode_stream(&evs, ctx());
        let terminal = validate_stream(&bytes);
        assert_eq!(terminal["type"], "response.failed");
        assert_eq!(terminal["response"]["error"], json!({"code": "server_error", "message": "Overloaded"}));
        insta::assert_snapshot!("stream_encode_error", String::from_utf8(bytes).unwrap());

        // An error before anything else still opens the response first.
        let bytes =
            encode_stream(&[StreamEvent::Error { kind: ErrorKind::RateLimited, message: "slow down".into() }], ctx());
        assert_eq!(validate_stream(&bytes)["response"]["error"]["code"], "rate_limit_exceeded");

        // Interleaved tool calls (a Chat upstream), a tool call without arguments, no Finish.
        let evs = vec![
            StreamEvent::Start { id: "x".into(), model: String::new(), usage: Usage::default(), created: None },
            StreamEvent::BlockStart { index: 0, block: BlockStart::ToolUse { id: "call_1".into(), name: "a".into() } },
            StreamEvent::BlockStart { index: 1, block: BlockStart::ToolUse { id: "call_2".into(), name: "b".into() } },
            StreamEvent::ToolArgsDelta { index: 1, partial_json: "{\"y\":".into() },
            StreamEvent::ToolArgsDelta { index: 1, partial_json: "2}".into() },
            StreamEvent::TextDelta { index: 7, text: "ignored: unknown block".into() },
            StreamEvent::BlockStop { index: 0 },
            StreamEvent::BlockStop { index: 1 },
            StreamEvent::End,
        ];
        let bytes = encode_stream(&evs, ctx());
        let terminal = validate_stream(&bytes);
        assert_eq!(terminal["response"]["output"][0]["arguments"], "{}");
        assert_eq!(terminal["response"]["output"][1]["arguments"], "{\"y\":2}");
        assert_eq!(terminal["response"]["model"], "gpt-5");
    }
}
