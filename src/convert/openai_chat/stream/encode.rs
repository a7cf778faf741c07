//! IR events to `chat.completion.chunk` events for a Chat client, one event at a time.

use super::super::error::error_out;
use super::super::response::{finish_reason, usage_out};
use crate::convert::ir::*;
use crate::protocol::errors::chat_error_chunk;
use crate::protocol::json_write::JsonObject;
use crate::protocol::sse::write_event_with;

/// A chunk's `delta`: the members a chunk carries, in the order the API writes them.
#[derive(Default)]
struct DeltaOut<'a> {
    role: Option<&'static str>,
    content: Option<&'a str>,
    /// Thinking, DeepSeek-style.
    reasoning_content: Option<&'a str>,
    tool_calls: Option<ToolCallDeltaOut<'a>>,
}

impl DeltaOut<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        let mut json = JsonObject::open(out);
        json.text_if("role", self.role);
        json.text_if("content", self.content);
        json.text_if("reasoning_content", self.reasoning_content);
        if let Some(call) = &self.tool_calls {
            let mut calls = json.list("tool_calls");
            call.write(calls.element());
            calls.close();
        }
        json.close();
    }
}

/// One call's delta: its index, and on its first chunk its id, type and name.
struct ToolCallDeltaOut<'a> {
    index: usize,
    /// The id and name, on the call's first chunk only.
    start: Option<(&'a str, &'a str)>,
    arguments: &'a str,
}

impl ToolCallDeltaOut<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        let mut json = JsonObject::open(out);
        json.count("index", self.index as u64);
        if let Some((id, _)) = self.start {
            json.text("id", id);
            json.text("type", "function");
        }
        let mut function = json.object("function");
        if let Some((_, name)) = self.start {
            function.text("name", name);
        }
        function.text("arguments", self.arguments);
        function.close();
        json.close();
    }
}

/// Incremental: IR events in, this protocol's SSE bytes out (complete events, `event:`/`data:` lines
/// exactly as the official API sends them), immediately.
#[derive(Debug)]
pub struct StreamEncoder {
    ctx: EncodeContext,
    id: String,
    model: String,
    created: u64,
    started: bool,
    /// IR block index → Chat `tool_calls[].index`, in the order the calls started.
    tool_calls: Vec<(usize, usize)>,
    usage: Usage,
    finished: bool,
    done: bool,
}

impl StreamEncoder {
    pub fn new(ctx: EncodeContext) -> Self {
        let id = format!("chatcmpl-{}", ctx.id_seed);
        let model = ctx.request_model.clone();
        let created = ctx.created;
        Self {
            ctx,
            id,
            model,
            created,
            started: false,
            tool_calls: Vec::new(),
            usage: Usage::default(),
            finished: false,
            done: false,
        }
    }

    pub fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        match event {
            StreamEvent::Start { id, model, usage, created } => {
                if self.started {
                    return;
                }
                if !id.is_empty() {
                    self.id.clone_from(id);
                }
                if !model.is_empty() {
                    self.model.clone_from(model);
                }
                if let Some(c) = created {
                    self.created = *c;
                }
                self.usage.merge(usage);
                self.ensure_started(out);
            }
            StreamEvent::BlockStart { index, block: BlockStart::ToolUse { id, name } } => {
                self.ensure_started(out);
                let n = self.tool_calls.len();
                self.tool_calls.push((*index, n));
                let delta = DeltaOut {
                    tool_calls: Some(ToolCallDeltaOut { index: n, start: Some((id, name)), arguments: "" }),
                    ..DeltaOut::default()
                };
                self.chunk(out, delta, None);
            }
            StreamEvent::BlockStart { .. } | StreamEvent::BlockStop { .. } | StreamEvent::SignatureDelta { .. } => {
                self.ensure_started(out);
            }
            StreamEvent::TextDelta { text, .. } => {
                self.ensure_started(out);
                if !text.is_empty() {
                    self.chunk(out, DeltaOut { content: Some(text), ..DeltaOut::default() }, None);
                }
            }
            StreamEvent::ThinkingDelta { text, .. } => {
                self.ensure_started(out);
                if !text.is_empty() {
                    self.chunk(out, DeltaOut { reasoning_content: Some(text), ..DeltaOut::default() }, None);
                }
            }
            StreamEvent::ToolArgsDelta { index, partial_json } => {
                self.ensure_started(out);
                let Some(&(_, n)) = self.tool_calls.iter().find(|(i, _)| i == index) else {
                    return;
                };
                if !partial_json.is_empty() {
                    let delta = DeltaOut {
                        tool_calls: Some(ToolCallDeltaOut { index: n, start: None, arguments: partial_json }),
                        ..DeltaOut::default()
                    };
                    self.chunk(out, delta, None);
                }
            }
            StreamEvent::Finish { stop_reason, usage, .. } => {
                self.ensure_started(out);
                self.usage.merge(usage);
                self.finish_chunks(out, *stop_reason);
            }
            StreamEvent::End => {
                self.ensure_started(out);
                self.finish_chunks(out, None);
                out.extend_from_slice(b"data: [DONE]\n\n");
                self.done = true;
            }
            StreamEvent::Error { kind, message } => {
                let err = ErrorBody { kind: *kind, message: message.clone(), code: None, param: None };
                chat_error_chunk(out, &error_out(&err));
                self.done = true;
            }
        }
    }

    /// The role chunk, once, before anything else.
    fn ensure_started(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        self.chunk(out, DeltaOut { role: Some("assistant"), content: Some(""), ..DeltaOut::default() }, None);
    }

    /// The finish chunk and, when the client asked for it, the usage chunk (once).
    fn finish_chunks(&mut self, out: &mut Vec<u8>, stop: Option<StopReason>) {
        if self.finished {
            return;
        }
        self.finished = true;
        let reason = finish_reason(stop, !self.tool_calls.is_empty());
        self.chunk(out, DeltaOut::default(), Some(reason));
        if self.ctx.include_usage {
            write_event_with(out, None, |out| {
                let mut json = self.chunk_head(out);
                json.raw("choices", "[]");
                json.value("usage", &usage_out(&self.usage));
                json.close();
            });
        }
    }

    /// A chunk's members before its choices.
    fn chunk_head<'o>(&self, out: &'o mut Vec<u8>) -> JsonObject<'o> {
        let mut json = JsonObject::open(out);
        json.text("id", &self.id);
        json.text("object", "chat.completion.chunk");
        json.count("created", self.created);
        json.text("model", &self.model);
        json
    }

    fn chunk(&self, out: &mut Vec<u8>, delta: DeltaOut<'_>, finish_reason: Option<&'static str>) {
        write_event_with(out, None, |out| {
            let mut json = self.chunk_head(out);
            let mut choices = json.list("choices");
            let mut choice = choices.object();
            choice.count("index", 0);
            delta.write(choice.key("delta"));
            choice.raw("logprobs", "null");
            choice.text_or_null("finish_reason", finish_reason);
            choice.close();
            choices.close();
            // Absent unless the client asked for usage; then `null` on every chunk but the last.
            if self.ctx.include_usage {
                json.raw("usage", "null");
            }
            json.close();
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::convert::openai_chat::tests::*;
    use crate::protocol::errors::ErrorKind;
    use crate::protocol::sse::SseScanner;
    use insta::assert_snapshot;
    use serde_json::{Value, json};

    fn sample_events() -> Vec<StreamEvent> {
        vec![
            StreamEvent::Start {
                id: "msg_01XFDUDYJgAACzvnptvVoYEL".into(),
                model: "claude-sonnet-4-5-20250929".into(),
                usage: Usage {
                    input: Some(25),
                    output: Some(1),
                    cache_read: Some(100),
                    cache_write: Some(50),
                    reasoning: None,
                },
                created: None,
            },
            StreamEvent::BlockStart { index: 0, block: BlockStart::Thinking },
            StreamEvent::ThinkingDelta { index: 0, text: "Weather for two cities.".into() },
            StreamEvent::SignatureDelta { index: 0, signature: "EqQBCgIYAhIM".into() },
            StreamEvent::BlockStop { index: 0 },
            StreamEvent::BlockStart { index: 1, block: BlockStart::Text },
            StreamEvent::TextDelta { index: 1, text: "Checking ".into() },
            StreamEvent::TextDelta { index: 1, text: String::new() },
            StreamEvent::TextDelta { index: 1, text: "both \u{e9}.".into() },
            StreamEvent::BlockStop { index: 1 },
            StreamEvent::BlockStart {
                index: 2,
                block: BlockStart::ToolUse { id: "toolu_A".into(), name: "get_weather".into() },
            },
            StreamEvent::ToolArgsDelta { index: 2, partial_json: "{\"city\": \"Pa".into() },
            StreamEvent::ToolArgsDelta { index: 2, partial_json: "ris\"}".into() },
            StreamEvent::BlockStop { index: 2 },
            StreamEvent::BlockStart {
                index: 3,
                block: BlockStart::ToolUse { id: "toolu_B".into(), name: "get_weather".into() },
            },
            StreamEvent::ToolArgsDelta { index: 3, partial_json: "{\"city\": \"Rome\"}".into() },
            StreamEvent::BlockStop { index: 3 },
            StreamEvent::Finish {
                stop_reason: Some(StopReason::ToolUse),
                stop_sequence: None,
                usage: Usage { output: Some(89), ..Usage::default() },
            },
            StreamEvent::End,
        ]
    }

    #[test]
    fn stream_encode_with_usage() {
        let sse = encode_events(&sample_events(), ctx());
        assert!(sse.ends_with("data: [DONE]\n\n"));
        assert_snapshot!("stream_encode_with_usage", sse);
    }

    #[test]
    fn stream_encode_without_usage() {
        let sse = encode_events(&sample_events(), EncodeContext { include_usage: false, ..ctx() });
        assert!(!sse.contains("\"usage\""));
        assert_snapshot!("stream_encode_without_usage", sse);
    }

    #[test]
    fn stream_encode_error() {
        let evs = vec![
            StreamEvent::Start { id: String::new(), model: String::new(), usage: Usage::default(), created: None },
            StreamEvent::BlockStart { index: 0, block: BlockStart::Text },
            StreamEvent::TextDelta { index: 0, text: "Partial".into() },
            StreamEvent::Error { kind: ErrorKind::Overloaded, message: "Overloaded".into() },
            StreamEvent::End,
        ];
        let sse = encode_events(&evs, EncodeContext { include_usage: false, ..ctx() });
        assert!(!sse.contains("[DONE]"));
        assert_snapshot!("stream_encode_error", sse);
    }

    /// Every chunk the encoder writes is one `data:` line that the official shapes accept.
    #[test]
    fn stream_encode_shape() {
        let sse = encode_events(&sample_events(), ctx());
        let mut scanner = SseScanner::new();
        let mut datas = Vec::new();
        scanner.feed(sse.as_bytes(), |e| {
            assert!(e.event.is_none());
            datas.push(e.data.to_owned());
        });
        assert_eq!(datas.last().map(String::as_str), Some("[DONE]"));
        let chunks: Vec<Value> = datas[..datas.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
        assert_eq!(chunks[0]["choices"][0]["delta"], json!({"role": "assistant", "content": ""}));
        for c in &chunks {
            assert_eq!(c["object"], "chat.completion.chunk");
            assert_eq!(c["id"], "msg_01XFDUDYJgAACzvnptvVoYEL");
            assert_eq!(c["created"], 1_700_000_000);
        }
        let usage = chunks.last().unwrap();
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(usage["usage"]["prompt_tokens"], 175);
        assert_eq!(usage["usage"]["completion_tokens"], 89);
        let finish = &chunks[chunks.len() - 2];
        assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
        // Tool call deltas: index 0 then 1, the first of each with id, type and name.
        let calls: Vec<&Value> = chunks.iter().filter_map(|c| c["choices"][0]["delta"].get("tool_calls")).collect();
        assert_eq!(
            calls[0][0],
            json!({"index": 0, "id": "toolu_A", "type": "function", "function": {"name": "get_weather", "arguments": ""}})
        );
        assert_eq!(
            calls[3][0],
            json!({"index": 1, "id": "toolu_B", "type": "function", "function": {"name": "get_weather", "arguments": ""}})
        );
    }
}
