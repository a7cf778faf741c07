//! IR events to SSE for an Anthropic client, one event at a time.

use std::borrow::Cow;

use super::super::response::{BlockOut, MessageOut, UsageOut, final_stop_reason, message_id, model_name, tool_id};
use serde_json::{Map, Value};

use crate::convert::ir::*;
use crate::protocol::errors::{AnthropicError, anthropic_error_event};
use crate::protocol::json_write::JsonObject;
use crate::protocol::sse::write_event_with;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Thinking,
    Redacted,
    Tool,
}

#[derive(Debug, Clone, Copy)]
struct OutBlock {
    ir: usize,
    out: usize,
    kind: Kind,
    open: bool,
}

/// A `content_block_delta`'s delta: its type, and the member that carries the text.
#[derive(Clone, Copy)]
enum DeltaOut {
    Text,
    Thinking,
    Signature,
    InputJson,
}

impl DeltaOut {
    fn type_and_member(self) -> (&'static str, &'static str) {
        match self {
            DeltaOut::Text => ("text_delta", "text"),
            DeltaOut::Thinking => ("thinking_delta", "thinking"),
            DeltaOut::Signature => ("signature_delta", "signature"),
            DeltaOut::InputJson => ("input_json_delta", "partial_json"),
        }
    }
}

/// An event that names only its type and an index (`content_block_stop`), or only its type
/// (`index` `None`: `ping`, `message_stop`).
fn write_plain_event(out: &mut Vec<u8>, ty: &'static str, index: Option<usize>) {
    write_event_with(out, Some(ty), |out| {
        let mut json = JsonObject::open(out);
        json.text("type", ty);
        if let Some(index) = index {
            json.count("index", index as u64);
        }
        json.close();
    });
}

/// Incremental Anthropic stream encoder.
#[derive(Debug)]
pub struct StreamEncoder {
    ctx: EncodeContext,
    started: bool,
    finished: bool,
    done: bool,
    /// Blocks sent so far (few per answer): IR index → output index, kind, still open.
    blocks: Vec<OutBlock>,
    next_out: usize,
    tool_n: usize,
    saw_tool_use: bool,
    usage: Usage,
}

impl StreamEncoder {
    pub fn new(ctx: EncodeContext) -> Self {
        Self {
            ctx,
            started: false,
            finished: false,
            done: false,
            blocks: Vec::new(),
            next_out: 0,
            tool_n: 0,
            saw_tool_use: false,
            usage: Usage::default(),
        }
    }

    /// `message_start` (with the input usage known so far: a Chat upstream reports it only at
    /// the end, so 0 here and the real numbers in `message_delta`), then a `ping` as the API does.
    fn start(&mut self, id: &str, model: &str, usage: &Usage, out: &mut Vec<u8>) {
        self.started = true;
        self.usage.merge(usage);
        let id = message_id(id, &self.ctx);
        let message = MessageOut {
            id: &id,
            model: model_name(model, &self.ctx),
            content: Vec::new(),
            stop_reason: None,
            stop_sequence: None,
            usage: UsageOut::from_ir(&self.usage),
        };
        write_event_with(out, Some("message_start"), |out| {
            let mut json = JsonObject::open(out);
            json.text("type", "message_start");
            message.write(json.key("message"));
            json.close();
        });
        write_plain_event(out, "ping", None);
    }

    fn ensure_started(&mut self, out: &mut Vec<u8>) {
        if !self.started {
            self.start("", "", &Usage::default(), out);
        }
    }

    fn open_block(&mut self, ir: usize, block: &BlockStart, out: &mut Vec<u8>) -> OutBlock {
        self.ensure_started(out);
        // A second start for an IR index still open closes the first.
        self.close_ir(ir, out);
        let index = self.next_out;
        self.next_out += 1;
        let (kind, content_block) = match block {
            BlockStart::Text => (Kind::Text, BlockOut::Text { text: "" }),
            BlockStart::Thinking | BlockStart::ReasoningItem { .. } => {
                (Kind::Thinking, BlockOut::Thinking { thinking: Cow::Borrowed(""), signature: "" })
            }
            BlockStart::RedactedThinking { data } => (Kind::Redacted, BlockOut::RedactedThinking { data }),
            BlockStart::ToolUse { id, name } => {
                let id = tool_id(id, &self.ctx, self.tool_n);
                self.tool_n += 1;
                self.saw_tool_use = true;
                (Kind::Tool, BlockOut::ToolUse { id, name, input: Value::Object(Map::new()) })
            }
        };
        write_event_with(out, Some("content_block_start"), |out| {
            let mut json = JsonObject::open(out);
            json.text("type", "content_block_start");
            json.count("index", index as u64);
            content_block.write(json.key("content_block"));
            json.close();
        });
        let b = OutBlock { ir, out: index, kind, open: true };
        self.blocks.push(b);
        b
    }

    fn close_ir(&mut self, ir: usize, out: &mut Vec<u8>) {
        if let Some(b) = self.blocks.iter_mut().rev().find(|b| b.ir == ir && b.open) {
            b.open = false;
            write_plain_event(out, "content_block_stop", Some(b.out));
        }
    }

    fn close_all(&mut self, out: &mut Vec<u8>) {
        for b in self.blocks.iter_mut().filter(|b| b.open) {
            b.open = false;
            write_plain_event(out, "content_block_stop", Some(b.out));
        }
    }

    /// The open block for an IR index, or a new one of the kind the delta implies.
    fn block_for(&mut self, ir: usize, implied: Option<BlockStart>, out: &mut Vec<u8>) -> Option<OutBlock> {
        if let Some(b) = self.blocks.iter().rev().find(|b| b.ir == ir && b.open) {
            return Some(*b);
        }
        implied.map(|block| self.open_block(ir, &block, out))
    }

    fn delta(index: usize, delta: DeltaOut, text: &str, out: &mut Vec<u8>) {
        let (ty, member) = delta.type_and_member();
        write_event_with(out, Some("content_block_delta"), |out| {
            let mut json = JsonObject::open(out);
            json.text("type", "content_block_delta");
            json.count("index", index as u64);
            let mut delta = json.object("delta");
            delta.text("type", ty);
            delta.text(member, text);
            delta.close();
            json.close();
        });
    }

    fn finish(
        &mut self,
        stop_reason: Option<StopReason>,
        stop_sequence: Option<&str>,
        usage: &Usage,
        out: &mut Vec<u8>,
    ) {
        self.ensure_started(out);
        self.close_all(out);
        self.finished = true;
        self.usage.merge(usage);
        let u = &self.usage;
        let stop_reason = final_stop_reason(stop_reason, self.saw_tool_use);
        write_event_with(out, Some("message_delta"), |out| {
            let mut json = JsonObject::open(out);
            json.text("type", "message_delta");
            let mut delta = json.object("delta");
            delta.text("stop_reason", stop_reason);
            delta.text_or_null("stop_sequence", stop_sequence);
            delta.close();
            // Cumulative; only the numbers known are sent (the SDKs keep the `message_start`
            // values for absent ones), `output_tokens` always.
            let mut usage = json.object("usage");
            let known = [
                ("input_tokens", u.input),
                ("cache_creation_input_tokens", u.cache_write),
                ("cache_read_input_tokens", u.cache_read),
            ];
            for (name, count) in known {
                if let Some(count) = count {
                    usage.count(name, count);
                }
            }
            usage.count("output_tokens", u.output.unwrap_or(0));
            usage.close();
            json.close();
        });
    }

    pub fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        match event {
            StreamEvent::Start { id, model, usage, .. } => {
                if !self.started {
                    self.start(id, model, usage, out);
                }
            }
            StreamEvent::BlockStart { index, block } => {
                if !self.finished {
                    self.open_block(*index, block, out);
                }
            }
            StreamEvent::TextDelta { index, text } | StreamEvent::ThinkingDelta { index, text } => {
                if text.is_empty() || self.finished {
                    return;
                }
                let implied = if matches!(event, StreamEvent::TextDelta { .. }) {
                    BlockStart::Text
                } else {
                    BlockStart::Thinking
                };
                // The delta type follows the block actually open (the Anthropic SDKs drop a
                // text_delta aimed at a thinking block).
                match self.block_for(*index, Some(implied), out) {
                    Some(b) if b.kind == Kind::Text => Self::delta(b.out, DeltaOut::Text, text, out),
                    Some(b) if b.kind == Kind::Thinking => Self::delta(b.out, DeltaOut::Thinking, text, out),
                    _ => {}
                }
            }
            StreamEvent::SignatureDelta { index, signature } => {
                if signature.is_empty() || self.finished {
                    return;
                }
                if let Some(b) = self.block_for(*index, None, out)
                    && b.kind == Kind::Thinking
                {
                    Self::delta(b.out, DeltaOut::Signature, signature, out);
                }
            }
            StreamEvent::ToolArgsDelta { index, partial_json } => {
                if partial_json.is_empty() || self.finished {
                    return;
                }
                if let Some(b) = self.block_for(*index, None, out)
                    && b.kind == Kind::Tool
                {
                    Self::delta(b.out, DeltaOut::InputJson, partial_json, out);
                }
            }
            StreamEvent::BlockStop { index } => self.close_ir(*index, out),
            StreamEvent::Finish { stop_reason, stop_sequence, usage } => {
                if !self.finished {
                    self.finish(*stop_reason, stop_sequence.as_deref(), usage, out);
                }
            }
            StreamEvent::End => {
                if !self.finished {
                    self.finish(None, None, &Usage::default(), out);
                }
                write_plain_event(out, "message_stop", None);
                self.done = true;
            }
            StreamEvent::Error { kind, message } => {
                anthropic_error_event(out, &AnthropicError::new(kind.anthropic_type(), message));
                self.done = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::anthropic::tests::*;
    use crate::protocol::errors::ErrorKind;

    #[test]
    fn stream_encode_text_from_chat_usage_at_end() {
        // What a Chat decoder produces: no id usage at start, usage only in Finish.
        let evs = vec![
            StreamEvent::Start {
                id: "chatcmpl-9".into(),
                model: "gpt-5".into(),
                usage: Usage::default(),
                created: Some(1),
            },
            StreamEvent::BlockStart { index: 0, block: BlockStart::Text },
            StreamEvent::TextDelta { index: 0, text: "Hel".into() },
            StreamEvent::TextDelta { index: 0, text: String::new() },
            StreamEvent::TextDelta { index: 0, text: "lo \"quoted\"\n".into() },
            StreamEvent::BlockStop { index: 0 },
            StreamEvent::Finish {
                stop_reason: Some(StopReason::StopSequence),
                stop_sequence: None,
                usage: u(Some(80), Some(5), Some(1024), None),
            },
            StreamEvent::End,
        ];
        insta::assert_snapshot!(encode_events(&evs));
    }

    #[test]
    fn stream_encode_interleaved_tool_calls() {
        // A Chat upstream interleaving two tool calls by index; both stay open until Finish.
        let evs = vec![
            StreamEvent::Start { id: String::new(), model: String::new(), usage: Usage::default(), created: None },
            StreamEvent::BlockStart {
                index: 0,
                block: BlockStart::ToolUse { id: "call_a".into(), name: "get_weather".into() },
            },
            StreamEvent::ToolArgsDelta { index: 0, partial_json: "{\"city\":".into() },
            StreamEvent::BlockStart {
                index: 1,
                block: BlockStart::ToolUse { id: String::new(), name: "get_time".into() },
            },
            StreamEvent::ToolArgsDelta { index: 1, partial_json: "{\"tz\":\"UTC\"}".into() },
            StreamEvent::ToolArgsDelta { index: 0, partial_json: "\"Paris\"}".into() },
            StreamEvent::BlockStop { index: 0 },
            StreamEvent::BlockStop { index: 1 },
            StreamEvent::Finish { stop_reason: None, stop_sequence: None, usage: u(Some(50), Some(20), None, None) },
            StreamEvent::End,
        ];
        insta::assert_snapshot!(encode_events(&evs));
    }

    #[test]
    fn stream_encode_thinking_and_error() {
        let evs = vec![
            StreamEvent::Start {
                id: "resp_1".into(),
                model: "o3".into(),
                usage: u(Some(10), None, Some(0), Some(0)),
                created: None,
            },
            StreamEvent::BlockStart {
                index: 0,
                block: BlockStart::ReasoningItem { id: Some("rs_1".into()), encrypted_content: None },
            },
            StreamEvent::ThinkingDelta { index: 0, text: "summary".into() },
            StreamEvent::BlockStop { index: 0 },
            StreamEvent::BlockStart { index: 1, block: BlockStart::Thinking },
            StreamEvent::ThinkingDelta { index: 1, text: "think".into() },
            StreamEvent::SignatureDelta { index: 1, signature: "sig".into() },
            StreamEvent::BlockStop { index: 1 },
            StreamEvent::BlockStart { index: 2, block: BlockStart::RedactedThinking { data: "opaque".into() } },
            StreamEvent::BlockStop { index: 2 },
            // A delta before its block start opens the block it implies.
            StreamEvent::TextDelta { index: 3, text: "Answer".into() },
            StreamEvent::Error { kind: ErrorKind::Overloaded, message: "upstream overloaded".into() },
            StreamEvent::TextDelta { index: 3, text: "ignored after the error".into() },
        ];
        insta::assert_snapshot!(encode_events(&evs));
    }

    #[test]
    fn stream_encode_end_without_finish_and_no_start() {
        let evs = vec![
            StreamEvent::BlockStart { index: 0, block: BlockStart::Text },
            StreamEvent::TextDelta { index: 0, text: "x".into() },
            StreamEvent::End,
        ];
        insta::assert_snapshot!(encode_events(&evs));
    }

    #[test]
    fn encoder_outputs_are_valid_sequences() {
        for (_, t) in TRANSCRIPTS {
            let evs = decode_chunks(&[t.as_bytes()]);
            assert_valid_anthropic_sse(&encode_events(&evs));
        }
    }
}
