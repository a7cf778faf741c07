//! IR events to a Gemini client's stream: one `GenerateContentResponse` per chunk, as SSE
//! (`data: {…}`, what `alt=sse` asks for and the Gemini CLI and SDKs use) or as the JSON array
//! `streamGenerateContent` answers without `alt`.

use serde_json::{Map, Value, json};

use super::super::error::error_chunk;
use super::super::response::{call_part, encode_usage, finish_reason, thought_part};
use crate::convert::ir::*;
use crate::protocol::json_write::JsonObject;
use crate::protocol::sse::write_event_with;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Sse,
    /// `[` before the first chunk, `,` between chunks, `]` at the end.
    JsonArray {
        opened: bool,
    },
}

#[derive(Debug)]
enum Open {
    /// Text is sent as it comes; nothing to keep.
    Text,
    /// Thought text is sent as it comes; a signature is sent with the block's end.
    Thought {
        signature: String,
    },
    /// A call is sent whole at its end (Gemini never splits a call).
    Call {
        id: String,
        name: String,
        args: String,
    },
    Ignored,
}

/// Incremental: IR events in, Gemini chunks out, immediately (text and thoughts chunk by chunk;
/// a function call when its arguments are complete).
#[derive(Debug)]
pub struct StreamEncoder {
    ctx: EncodeContext,
    framing: Framing,
    id: String,
    model: String,
    open: Vec<(usize, Open)>,
    usage: Usage,
    finished: bool,
    done: bool,
}

impl StreamEncoder {
    /// The SSE stream (`?alt=sse`).
    pub fn new(ctx: EncodeContext) -> Self {
        Self::with_framing(ctx, Framing::Sse)
    }

    /// The JSON-array stream (`streamGenerateContent` without `alt=sse`).
    pub fn json_array(ctx: EncodeContext) -> Self {
        Self::with_framing(ctx, Framing::JsonArray { opened: false })
    }

    fn with_framing(ctx: EncodeContext, framing: Framing) -> Self {
        let id = ctx.id_seed.to_string();
        let model = ctx.request_model.clone();
        Self { ctx, framing, id, model, open: Vec::new(), usage: Usage::default(), finished: false, done: false }
    }

    pub fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        match event {
            StreamEvent::Start { id, model, usage, .. } => {
                if !id.is_empty() {
                    self.id.clone_from(id);
                }
                if !model.is_empty() {
                    self.model.clone_from(model);
                }
                self.usage.merge(usage);
            }
            StreamEvent::BlockStart { index, block } => {
                let open = match block {
                    BlockStart::Text => Open::Text,
                    BlockStart::Thinking | BlockStart::ReasoningItem { .. } => {
                        Open::Thought { signature: String::new() }
                    }
                    BlockStart::ToolUse { id, name } => {
                        Open::Call { id: id.clone(), name: name.clone(), args: String::new() }
                    }
                    BlockStart::RedactedThinking { .. } => Open::Ignored,
                };
                self.open.push((*index, open));
            }
            StreamEvent::TextDelta { index, text } if !text.is_empty() => {
                if !matches!(self.block(*index), Some(Open::Ignored)) {
                    self.text_chunk(out, text, false);
                }
            }
            StreamEvent::ThinkingDelta { index, text } if !text.is_empty() => {
                if !matches!(self.block(*index), Some(Open::Ignored)) {
                    self.text_chunk(out, text, true);
                }
            }
            StreamEvent::SignatureDelta { index, signature } => {
                if let Some(Open::Thought { signature: s }) = self.block(*index) {
                    s.push_str(signature);
                }
            }
            StreamEvent::ToolArgsDelta { index, partial_json } => {
                if let Some(Open::Call { args, .. }) = self.block(*index) {
                    args.push_str(partial_json);
                }
            }
            StreamEvent::TextDelta { .. } | StreamEvent::ThinkingDelta { .. } => {}
            StreamEvent::BlockStop { index } => {
                if let Some(at) = self.open.iter().position(|(i, _)| i == index) {
                    let (_, open) = self.open.remove(at);
                    self.close(out, open);
                }
            }
            StreamEvent::Finish { stop_reason, usage, .. } => {
                self.usage.merge(usage);
                self.finish(out, *stop_reason);
            }
            StreamEvent::End => {
                self.finish(out, None);
                if let Framing::JsonArray { .. } = self.framing {
                    out.push(b']');
                }
                self.done = true;
            }
            StreamEvent::Error { kind, message } => {
                let e = ErrorBody { kind: *kind, message: message.clone(), code: None, param: None };
                match self.framing {
                    Framing::Sse => error_chunk(&e, out),
                    Framing::JsonArray { opened } => {
                        out.extend_from_slice(if opened { b",\r\n" } else { b"[" });
                        let body = super::super::encode_error(&e);
                        out.extend_from_slice(&body);
                        out.push(b']');
                    }
                }
                self.done = true;
            }
        }
    }

    fn block(&mut self, index: usize) -> Option<&mut Open> {
        self.open.iter_mut().find(|(i, _)| *i == index).map(|(_, o)| o)
    }

    /// A block ended: a call is sent now, whole; a signed thought sends its signature.
    fn close(&mut self, out: &mut Vec<u8>, open: Open) {
        match open {
            Open::Call { id, name, args } => {
                let (part, _) = call_part(&id, &name, &Value::Null, Some(&args));
                self.chunk(out, part);
            }
            Open::Thought { signature } if !signature.is_empty() => {
                let part = thought_part("", Some(&signature));
                if part.get("thoughtSignature").is_some() {
                    self.chunk(out, part);
                }
            }
            Open::Thought { .. } | Open::Text | Open::Ignored => {}
        }
    }

    /// The last chunk: the finish reason and the usage (every open block closed first).
    fn finish(&mut self, out: &mut Vec<u8>, stop: Option<StopReason>) {
        if self.finished {
            return;
        }
        self.finished = true;
        for (_, open) in std::mem::take(&mut self.open) {
            self.close(out, open);
        }
        let candidate =
            json!({"content": {"parts": [], "role": "model"}, "finishReason": finish_reason(stop), "index": 0});
        let mut chunk = self.envelope(candidate);
        chunk.insert("usageMetadata".into(), encode_usage(&self.usage));
        self.write(out, &Value::Object(chunk));
    }

    /// A chunk of text or thought, nearly every chunk of a stream: written by hand, with the
    /// members in the order the other chunks' maps write theirs (sorted).
    fn text_chunk(&mut self, out: &mut Vec<u8>, text: &str, thought: bool) {
        let model = if self.model.is_empty() { self.ctx.request_model.as_str() } else { self.model.as_str() };
        let id = self.id.as_str();
        frame(&mut self.framing, out, |out| {
            let mut json = JsonObject::open(out);
            let mut candidates = json.list("candidates");
            let mut candidate = candidates.object();
            let mut content = candidate.object("content");
            let mut parts = content.list("parts");
            let mut part = parts.object();
            part.text("text", text);
            if thought {
                part.flag("thought", true);
            }
            part.close();
            parts.close();
            content.text("role", "model");
            content.close();
            candidate.count("index", 0);
            candidate.close();
            candidates.close();
            json.text("modelVersion", model);
            json.text("responseId", id);
            json.close();
        });
    }

    fn chunk(&mut self, out: &mut Vec<u8>, part: Value) {
        let candidate = json!({"content": {"parts": [part], "role": "model"}, "index": 0});
        let chunk = Value::Object(self.envelope(candidate));
        self.write(out, &chunk);
    }

    fn envelope(&self, candidate: Value) -> Map<String, Value> {
        let model = if self.model.is_empty() { self.ctx.request_model.as_str() } else { self.model.as_str() };
        let mut m = Map::new();
        m.insert("candidates".into(), Value::Array(vec![candidate]));
        m.insert("modelVersion".into(), json!(model));
        m.insert("responseId".into(), json!(self.id));
        m
    }

    fn write(&mut self, out: &mut Vec<u8>, chunk: &Value) {
        frame(&mut self.framing, out, |out| {
            // A `Value` cannot fail to serialise; an empty object keeps the stream well-formed.
            if serde_json::to_writer(&mut *out, chunk).is_err() {
                out.extend_from_slice(b"{}");
            }
        });
    }
}

/// One chunk, framed: an SSE event, or the next element of the JSON array.
fn frame(framing: &mut Framing, out: &mut Vec<u8>, chunk: impl FnOnce(&mut Vec<u8>)) {
    match framing {
        Framing::Sse => write_event_with(out, None, chunk),
        Framing::JsonArray { opened } => {
            out.extend_from_slice(if *opened { b",\r\n" } else { b"[" });
            *opened = true;
            chunk(out);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::super::super::tests::*;
    use super::*;
    use crate::protocol::errors::ErrorKind;
    use insta::assert_snapshot;

    fn sample() -> Vec<StreamEvent> {
        vec![
            StreamEvent::Start {
                id: "msg_01".into(),
                model: "claude-sonnet-4-5".into(),
                usage: Usage { input: Some(25), ..Usage::default() },
                created: None,
            },
            StreamEvent::BlockStart { index: 0, block: BlockStart::Thinking },
            StreamEvent::ThinkingDelta { index: 0, text: "Two cities.".into() },
            StreamEvent::SignatureDelta { index: 0, signature: "EqQB".into() },
            StreamEvent::BlockStop { index: 0 },
            StreamEvent::BlockStart { index: 1, block: BlockStart::Text },
            StreamEvent::TextDelta { index: 1, text: "Checking ".into() },
            StreamEvent::TextDelta { index: 1, text: "both.".into() },
            StreamEvent::BlockStop { index: 1 },
            StreamEvent::BlockStart {
                index: 2,
                block: BlockStart::ToolUse { id: "toolu_01".into(), name: "get_weather".into() },
            },
            StreamEvent::ToolArgsDelta { index: 2, partial_json: "{\"city\": \"Pa".into() },
            StreamEvent::ToolArgsDelta { index: 2, partial_json: "ris\"}".into() },
            StreamEvent::BlockStop { index: 2 },
            StreamEvent::Finish {
                stop_reason: Some(StopReason::ToolUse),
                stop_sequence: None,
                usage: Usage { output: Some(40), cache_read: Some(100), ..Usage::default() },
            },
            StreamEvent::End,
        ]
    }

    #[test]
    fn stream_encode_sse() {
        assert_snapshot!(encode_events(&sample()));
    }

    #[test]
    fn stream_encode_json_array() {
        let mut e = StreamEncoder::json_array(ctx());
        let mut out = Vec::new();
        for ev in &sample()[5..] {
            e.encode(ev, &mut out);
        }
        let text = String::from_utf8(out).unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v.as_array().map(Vec::len), Some(4));
        assert_snapshot!(text);
    }

    #[test]
    fn stream_encode_midstream_error_is_a_bare_chunk() {
        let evs = [
            StreamEvent::BlockStart { index: 0, block: BlockStart::Text },
            StreamEvent::TextDelta { index: 0, text: "Hel".into() },
            StreamEvent::Error { kind: ErrorKind::Overloaded, message: "upstream overloaded".into() },
            StreamEvent::TextDelta { index: 0, text: "lo".into() },
        ];
        assert_snapshot!(encode_events(&evs), @r#"
        data: {"candidates":[{"content":{"parts":[{"text":"Hel"}],"role":"model"},"index":0}],"modelVersion":"gemini-2.5-flash","responseId":"seed123"}

        {"error":{"code":503,"message":"upstream overloaded","status":"UNAVAILABLE"}}
        "#);
        let mut e = StreamEncoder::json_array(ctx());
        let mut out = Vec::new();
        e.encode(&StreamEvent::Error { kind: ErrorKind::RateLimited, message: "slow".into() }, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"[{"error":{"code":429,"message":"slow","status":"RESOURCE_EXHAUSTED"}}]"#
        );
    }
}
