//! A Chat upstream's stream chunks to IR events, one chunk at a time.

use serde_json::Value;

use super::super::error::{ErrorFields, MAX_ERROR_TEXT, error_kind, find_error};
use super::super::response::{decode_usage, stop_reason, synth_call_id};
use super::super::{Obj, count_field};
use crate::convert::ir::*;
use crate::protocol::errors::ErrorKind;
use crate::protocol::lenient::{get, get_str, truncate_marked};
use crate::protocol::sse::SseEvent;

/// The stream key of a legacy `delta.function_call` (it has no `index`).
const FUNCTION_CALL_KEY: u64 = u64::MAX;

/// One tool call of the upstream stream: its Chat key (`tool_calls[].index`) and IR block.
#[derive(Debug)]
struct ToolSlot {
    key: u64,
    index: usize,
    id: String,
    open: bool,
}

/// Incremental: one upstream SSE event in, zero or more IR events out, immediately (never buffer the
/// stream; only small per-block state like open-block indexes, tool-call index maps, usage so far).
#[derive(Debug, Default)]
pub struct StreamDecoder {
    started: bool,
    id: String,
    next_index: usize,
    text: Option<usize>,
    thinking: Option<usize>,
    tools: Vec<ToolSlot>,
    /// The Chat key of the last tool-call delta (for vendors that omit `index`).
    last_tool_key: Option<u64>,
    /// A `finish_reason` arrived (its raw value).
    finish_reason: Option<String>,
    saw_refusal: bool,
    usage: Usage,
    finished: bool,
    ended: bool,
    failed: bool,
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn decode(&mut self, event: &SseEvent<'_>, out: &mut Vec<StreamEvent>) {
        if self.ended || self.failed {
            return;
        }
        let data = event.data.trim();
        if data.is_empty() {
            return;
        }
        if data == "[DONE]" {
            self.start(out, String::new(), String::new(), None);
            self.emit_finish(out);
            out.push(StreamEvent::End);
            self.ended = true;
            return;
        }
        let v: Value = match serde_json::from_str(data) {
            Ok(v) => v,
            Err(_) => {
                self.fail(
                    out,
                    ErrorKind::Api,
                    format!("the upstream sent a malformed stream chunk: {}", truncate_marked(data, MAX_ERROR_TEXT)),
                );
                return;
            }
        };
        let Value::Object(chunk) = v else {
            // Gemini's OpenAI layer reports errors as `[{"error":{...}}]`.
            let (kind, message) = match find_error(&v) {
                Some(f) => (error_kind(None, &f), f.message),
                None => (ErrorKind::Api, None),
            };
            let message = message.unwrap_or_else(|| {
                format!("the upstream sent an unexpected stream chunk: {}", truncate_marked(data, MAX_ERROR_TEXT))
            });
            self.fail(out, kind, message);
            return;
        };
        let is_error = get(&chunk, "error").is_some()
            || get_str(&chunk, "object") == Some("error")
            || get_str(&chunk, "type") == Some("error")
            || event.event == Some("error");
        if is_error {
            let f = find_error(&Value::Object(chunk)).unwrap_or(ErrorFields {
                message: None,
                kind_label: None,
                code: None,
                param: None,
            });
            let kind = error_kind(None, &f);
            self.fail(
                out,
                kind,
                f.message.unwrap_or_else(|| "the upstream reported an error in the stream".to_owned()),
            );
            return;
        }

        let choices = get(&chunk, "choices").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let usage = get(&chunk, "usage").and_then(Value::as_object);
        let model = get_str(&chunk, "model").unwrap_or_default();
        if !self.started && choices.is_empty() && usage.is_none() && model.is_empty() {
            // Azure's leading `prompt_filter_results` chunk: no id, model or content yet.
            return;
        }
        self.start(
            out,
            get_str(&chunk, "id").unwrap_or_default().to_owned(),
            model.to_owned(),
            count_field(&chunk, "created"),
        );
        if let Some(u) = usage {
            self.usage.merge(&decode_usage(u));
        }
        if self.finished {
            // Only a late usage chunk or [DONE] can follow the Finish.
            return;
        }
        for choice in choices.iter().filter_map(Value::as_object) {
            if count_field(choice, "index").unwrap_or(0) != 0 {
                continue;
            }
            if let Some(delta) = get(choice, "delta").and_then(Value::as_object) {
                self.delta(delta, out);
            }
            // Some vendors send `""` on every chunk: only a real reason ends the turn.
            if let Some(reason) = get_str(choice, "finish_reason").filter(|r| !r.is_empty()) {
                self.finish_reason = Some(reason.to_owned());
                self.close_all(out);
            }
        }
        // OpenAI's usage chunk (`choices: []`) follows the finish chunk: the turn is complete.
        if self.finish_reason.is_some() && choices.is_empty() && usage.is_some() {
            self.emit_finish(out);
        }
    }

    pub fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        if self.ended || self.failed {
            return;
        }
        // A finish_reason makes the stream complete even without `data: [DONE]`; a stream
        // cut before it is not (the gateway reports that).
        if self.finish_reason.is_some() {
            self.emit_finish(out);
            out.push(StreamEvent::End);
            self.ended = true;
        }
    }

    fn start(&mut self, out: &mut Vec<StreamEvent>, id: String, model: String, created: Option<u64>) {
        if self.started {
            return;
        }
        self.started = true;
        self.id.clone_from(&id);
        out.push(StreamEvent::Start { id, model, usage: Usage::default(), created });
    }

    fn fail(&mut self, out: &mut Vec<StreamEvent>, kind: ErrorKind, message: String) {
        self.failed = true;
        out.push(StreamEvent::Error { kind, message });
    }

    /// The block `open` names, or a new one of `block` (after closing the others) when none is.
    fn open_unless(&mut self, open: Option<usize>, block: BlockStart, out: &mut Vec<StreamEvent>) -> usize {
        if let Some(index) = open {
            return index;
        }
        self.close_all(out);
        self.open(out, block)
    }

    fn delta(&mut self, d: &Obj, out: &mut Vec<StreamEvent>) {
        let reasoning = get_str(d, "reasoning_content").filter(|s| !s.is_empty());
        if let Some(r) = reasoning.or_else(|| get_str(d, "reasoning").filter(|s| !s.is_empty())) {
            let index = self.open_unless(self.thinking, BlockStart::Thinking, out);
            self.thinking = Some(index);
            out.push(StreamEvent::ThinkingDelta { index, text: r.to_owned() });
        }
        let content = get_str(d, "content").filter(|s| !s.is_empty());
        let refusal = get_str(d, "refusal").filter(|s| !s.is_empty());
        self.saw_refusal |= refusal.is_some();
        for t in [content, refusal].into_iter().flatten() {
            let index = self.open_unless(self.text, BlockStart::Text, out);
            self.text = Some(index);
            out.push(StreamEvent::TextDelta { index, text: t.to_owned() });
        }
        if let Some(calls) = get(d, "tool_calls").and_then(Value::as_array) {
            for c in calls.iter().filter_map(Value::as_object) {
                let f = get(c, "function").and_then(Value::as_object);
                let name = f.and_then(|f| get_str(f, "name"));
                let args = f.and_then(|f| get_str(f, "arguments")).unwrap_or_default();
                let key = count_field(c, "index");
                self.tool_delta(key, get_str(c, "id"), name, args, out);
            }
        }
        if let Some(fc) = get(d, "function_call").and_then(Value::as_object) {
            let args = get_str(fc, "arguments").unwrap_or_default();
            self.tool_delta(Some(FUNCTION_CALL_KEY), None, get_str(fc, "name"), args, out);
        }
    }

    fn tool_delta(
        &mut self,
        key: Option<u64>,
        id: Option<&str>,
        name: Option<&str>,
        args: &str,
        out: &mut Vec<StreamEvent>,
    ) {
        let id = id.filter(|s| !s.is_empty());
        let new_key = || {
            self.tools.iter().map(|t| t.key.saturating_add(1)).filter(|k| *k != FUNCTION_CALL_KEY).max().unwrap_or(0)
        };
        let mut key = match key {
            Some(k) => k,
            // No `index`: a new id starts a new call, otherwise it continues the last one.
            None => match (id, self.last_tool_key) {
                (Some(id), _) if !self.tools.iter().any(|t| t.id == id) => new_key(),
                (Some(id), _) => self.tools.iter().find(|t| t.id == id).map_or(0, |t| t.key),
                (None, Some(k)) => k,
                (None, None) => 0,
            },
        };
        // Some vendors send every complete call with the same `index`: a different id is a new call.
        if let (Some(id), Some(slot)) = (id, self.tools.iter().find(|t| t.key == key))
            && slot.id != id
            && self.tools.iter().all(|t| t.id != id)
        {
            key = new_key();
        }
        self.last_tool_key = Some(key);
        if let Some(slot) = self.tools.iter().find(|t| t.key == key) {
            // A delta for a call already closed (text came in between) cannot be delivered.
            if slot.open && !args.is_empty() {
                out.push(StreamEvent::ToolArgsDelta { index: slot.index, partial_json: args.to_owned() });
            }
            return;
        }
        self.close_text_and_thinking(out);
        let call_id = id.map_or_else(|| synth_call_id(&self.id, self.tools.len()), str::to_owned);
        let index =
            self.open(out, BlockStart::ToolUse { id: call_id.clone(), name: name.unwrap_or_default().to_owned() });
        self.tools.push(ToolSlot { key, index, id: call_id, open: true });
        if !args.is_empty() {
            out.push(StreamEvent::ToolArgsDelta { index, partial_json: args.to_owned() });
        }
    }

    fn open(&mut self, out: &mut Vec<StreamEvent>, block: BlockStart) -> usize {
        let index = self.next_index;
        self.next_index += 1;
        out.push(StreamEvent::BlockStart { index, block });
        index
    }

    fn close_text_and_thinking(&mut self, out: &mut Vec<StreamEvent>) {
        for slot in [&mut self.text, &mut self.thinking] {
            if let Some(index) = slot.take() {
                out.push(StreamEvent::BlockStop { index });
            }
        }
    }

    /// Closes every open block, in index order.
    fn close_all(&mut self, out: &mut Vec<StreamEvent>) {
        let mut open: Vec<usize> = Vec::new();
        open.extend(self.text.take());
        open.extend(self.thinking.take());
        for t in self.tools.iter_mut().filter(|t| t.open) {
            t.open = false;
            open.push(t.index);
        }
        open.sort_unstable();
        out.extend(open.into_iter().map(|index| StreamEvent::BlockStop { index }));
    }

    fn emit_finish(&mut self, out: &mut Vec<StreamEvent>) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.close_all(out);
        let saw_tool = !self.tools.is_empty();
        let stop = match self.finish_reason.as_deref() {
            Some(raw) => stop_reason(Some(raw), saw_tool, self.saw_refusal),
            // `[DONE]` without a finish_reason: the turn is complete; say how it most likely ended.
            None if saw_tool => Some(StopReason::ToolUse),
            None => Some(StopReason::EndTurn),
        };
        out.push(StreamEvent::Finish { stop_reason: stop, stop_sequence: None, usage: self.usage });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::convert::openai_chat::tests::*;
    use insta::assert_json_snapshot;
    use proptest::prelude::*;

    const T_PARALLEL_TOOLS: &str = concat!(
        "data: {\"id\":\"chatcmpl-P1\",\"object\":\"chat.completion.chunk\",\"created\":1741570300,\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
        "data: {\"id\":\"chatcmpl-P1\",\"object\":\"chat.completion.chunk\",\"created\":1741570300,\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Checking both.\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
        "data: {\"id\":\"chatcmpl-P1\",\"object\":\"chat.completion.chunk\",\"created\":1741570300,\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_paris\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
        "data: {\"id\":\"chatcmpl-P1\",\"object\":\"chat.completion.chunk\",\"created\":1741570300,\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_rome\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
        "data: {\"id\":\"chatcmpl-P1\",\"object\":\"chat.completion.chunk\",\"created\":1741570300,\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"city\\\":\"}}]},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
        "data: {\"id\":\"chatcmpl-P1\",\"object\":\"chat.completion.chunk\",\"created\":1741570300,\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"arguments\":\"{\\\"city\\\":\\\"Rome\\\"}\"}}]},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
        ": keep-alive\n\n",
        "data: {\"id\":\"chatcmpl-P1\",\"object\":\"chat.completion.chunk\",\"created\":1741570300,\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"Paris\\\"}\"}}]},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
        "data: {\"id\":\"chatcmpl-P1\",\"object\":\"chat.completion.chunk\",\"created\":1741570300,\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"tool_calls\"}],\"usage\":null}\n\n",
        "data: {\"id\":\"chatcmpl-P1\",\"object\":\"chat.completion.chunk\",\"created\":1741570300,\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[],\"usage\":{\"prompt_tokens\":1200,\"completion_tokens\":40,\"total_tokens\":1240,\"prompt_tokens_details\":{\"cached_tokens\":1152,\"audio_tokens\":0},\"completion_tokens_details\":{\"reasoning_tokens\":0,\"audio_tokens\":0,\"accepted_prediction_tokens\":0,\"rejected_prediction_tokens\":0}}}\n\n",
        "data: [DONE]\n\n",
    );

    const T_DEEPSEEK_REASONING: &str = concat!(
        "data: {\"id\":\"5b1d6f2e\",\"object\":\"chat.completion.chunk\",\"created\":1737000001,\"model\":\"deepseek-reasoner\",\"system_fingerprint\":\"fp_7e73fd9a08\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"5b1d6f2e\",\"object\":\"chat.completion.chunk\",\"created\":1737000001,\"model\":\"deepseek-reasoner\",\"system_fingerprint\":\"fp_7e73fd9a08\",\"choices\":[{\"index\":0,\"delta\":{\"content\":null,\"reasoning_content\":\"Compare 9.11\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"5b1d6f2e\",\"object\":\"chat.completion.chunk\",\"created\":1737000001,\"model\":\"deepseek-reasoner\",\"system_fingerprint\":\"fp_7e73fd9a08\",\"choices\":[{\"index\":0,\"delta\":{\"content\":null,\"reasoning_content\":\" and 9.8 — \u{e9}gal?\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"5b1d6f2e\",\"object\":\"chat.completion.chunk\",\"created\":1737000001,\"model\":\"deepseek-reasoner\",\"system_fingerprint\":\"fp_7e73fd9a08\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"9.8 is\",\"reasoning_content\":null},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"5b1d6f2e\",\"object\":\"chat.completion.chunk\",\"created\":1737000001,\"model\":\"deepseek-reasoner\",\"system_fingerprint\":\"fp_7e73fd9a08\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" larger \u{1F600}\",\"reasoning_content\":null},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"5b1d6f2e\",\"object\":\"chat.completion.chunk\",\"created\":1737000001,\"model\":\"deepseek-reasoner\",\"system_fingerprint\":\"fp_7e73fd9a08\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\",\"reasoning_content\":null},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":150,\"total_tokens\":170,\"prompt_tokens_details\":{\"cached_tokens\":0},\"completion_tokens_details\":{\"reasoning_tokens\":140},\"prompt_cache_hit_tokens\":0,\"prompt_cache_miss_tokens\":20}}\n\n",
        "data: [DONE]\n\n",
    );

    /// Content and finish_reason in one chunk, usage on it, and no `[DONE]` (some vendors).
    const T_LENGTH_NO_DONE: &str = concat!(
        "data: {\"id\":\"cmpl-q1\",\"object\":\"chat.completion.chunk\",\"created\":1737000002,\"model\":\"qwen3-max\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Once upon\"},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"cmpl-q1\",\"object\":\"chat.completion.chunk\",\"created\":1737000002,\"model\":\"qwen3-max\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a time\"},\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4,\"total_tokens\":13}}\n\n",
    );

    const T_ERROR: &str = concat!(
        "data: {\"id\":\"chatcmpl-E1\",\"object\":\"chat.completion.chunk\",\"created\":1741570400,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-E1\",\"object\":\"chat.completion.chunk\",\"created\":1741570400,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Partial\"},\"finish_reason\":null}]}\n\n",
        "data: {\"error\":{\"message\":\"The server is overloaded, please retry.\",\"type\":\"server_error\",\"param\":null,\"code\":\"server_is_overloaded\"}}\n\n",
        "data: {\"id\":\"chatcmpl-E1\",\"object\":\"chat.completion.chunk\",\"created\":1741570400,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ignored\"},\"finish_reason\":null}]}\n\n",
    );

    /// Whole tool calls in one chunk each, all with `index` 0 (or none), and `stop` as the reason.
    const T_WHOLE_CALLS: &str = concat!(
        "data: {\"id\":\"g-1\",\"object\":\"chat.completion.chunk\",\"created\":1737000003,\"model\":\"gemini-2.5-pro\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[{\"index\":0,\"id\":\"call_x\",\"type\":\"function\",\"function\":{\"name\":\"ls\",\"arguments\":\"{\\\"dir\\\":\\\".\\\"}\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"g-1\",\"object\":\"chat.completion.chunk\",\"created\":1737000003,\"model\":\"gemini-2.5-pro\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_y\",\"type\":\"function\",\"function\":{\"name\":\"pwd\",\"arguments\":\"{}\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"g-1\",\"object\":\"chat.completion.chunk\",\"created\":1737000003,\"model\":\"gemini-2.5-pro\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"id\":\"call_z\",\"type\":\"function\",\"function\":{\"name\":\"date\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"g-1\",\"object\":\"chat.completion.chunk\",\"created\":1737000003,\"model\":\"gemini-2.5-pro\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":50,\"completion_tokens\":20,\"total_tokens\":70}}\n\n",
        "data: [DONE]\n\n",
    );

    /// Azure's leading content-filter chunk (no id / model / choices) before the answer.
    const T_AZURE: &str = concat!(
        "data: {\"choices\":[],\"created\":0,\"id\":\"\",\"model\":\"\",\"object\":\"\",\"prompt_filter_results\":[{\"prompt_index\":0,\"content_filter_results\":{}}]}\n\n",
        "data: {\"choices\":[{\"content_filter_results\":{},\"delta\":{\"content\":\"\",\"refusal\":null,\"role\":\"assistant\"},\"finish_reason\":null,\"index\":0,\"logprobs\":null}],\"created\":1741570500,\"id\":\"chatcmpl-AZ\",\"model\":\"gpt-4o-2024-11-20\",\"object\":\"chat.completion.chunk\",\"system_fingerprint\":\"fp_b705f0c291\"}\n\n",
        "data: {\"choices\":[{\"content_filter_results\":{},\"delta\":{\"content\":\"Hi!\"},\"finish_reason\":null,\"index\":0,\"logprobs\":null}],\"created\":1741570500,\"id\":\"chatcmpl-AZ\",\"model\":\"gpt-4o-2024-11-20\",\"object\":\"chat.completion.chunk\",\"system_fingerprint\":\"fp_b705f0c291\"}\n\n",
        "data: {\"choices\":[{\"content_filter_results\":{},\"delta\":{},\"finish_reason\":\"stop\",\"index\":0,\"logprobs\":null}],\"created\":1741570500,\"id\":\"chatcmpl-AZ\",\"model\":\"gpt-4o-2024-11-20\",\"object\":\"chat.completion.chunk\",\"system_fingerprint\":\"fp_b705f0c291\"}\n\n",
        "data: [DONE]\n\n",
    );

    /// A stream cut before any finish_reason.
    const T_CUT: &str = concat!(
        "data: {\"id\":\"chatcmpl-C\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-C\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Half a sen\"},\"finish_reason\":null}]}\n\n",
    );

    fn transcripts() -> Vec<(&'static str, String)> {
        let mut v = vec![
            ("openai_sdk_sample", crate::protocol::sse::tests::OPENAI.to_owned()),
            ("parallel_tools", T_PARALLEL_TOOLS.to_owned()),
            ("deepseek_reasoning", T_DEEPSEEK_REASONING.to_owned()),
            ("length_no_done", T_LENGTH_NO_DONE.to_owned()),
            ("error", T_ERROR.to_owned()),
            ("whole_calls", T_WHOLE_CALLS.to_owned()),
            ("azure", T_AZURE.to_owned()),
            ("cut", T_CUT.to_owned()),
        ];
        v.push(("parallel_tools_crlf", T_PARALLEL_TOOLS.replace('\n', "\r\n")));
        v
    }

    #[test]
    fn stream_decode_snapshots() {
        for (name, t) in transcripts() {
            if name.ends_with("_crlf") {
                continue;
            }
            let evs = decode_chunks(&[t.as_bytes()]);
            assert_json_snapshot!(format!("stream_decode_{name}"), j_events(&evs));
        }
    }

    #[test]
    fn stream_decode_structure() {
        let evs = decode_chunks(&[T_PARALLEL_TOOLS.as_bytes()]);
        // Start, text block 0, tool blocks 1 and 2 open together, closed before one Finish, End.
        assert!(matches!(evs.first(), Some(StreamEvent::Start { .. })));
        assert!(matches!(evs.last(), Some(StreamEvent::End)));
        let finishes: Vec<_> = evs.iter().filter(|e| matches!(e, StreamEvent::Finish { .. })).collect();
        assert_eq!(finishes.len(), 1);
        let StreamEvent::Finish { stop_reason, usage, .. } = finishes[0] else { unreachable!() };
        assert_eq!(*stop_reason, Some(StopReason::ToolUse));
        assert_eq!(
            *usage,
            Usage { input: Some(48), output: Some(40), cache_read: Some(1152), cache_write: None, reasoning: Some(0) }
        );
        let args = |i: usize| -> String {
            evs.iter()
                .filter_map(|e| match e {
                    StreamEvent::ToolArgsDelta { index, partial_json } if *index == i => Some(partial_json.as_str()),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(args(1), "{\"city\":\"Paris\"}");
        assert_eq!(args(2), "{\"city\":\"Rome\"}");
        // Cut stream: no Finish, no End.
        let cut = decode_chunks(&[T_CUT.as_bytes()]);
        assert!(!cut.iter().any(|e| matches!(e, StreamEvent::Finish { .. } | StreamEvent::End)));
        // Error shapes of other vendors: a Gemini array, a vLLM object, a malformed chunk.
        for (data, kind, message) in [
            (
                "[{\"error\":{\"code\":429,\"message\":\"Resource exhausted\",\"status\":\"RESOURCE_EXHAUSTED\"}}]",
                ErrorKind::RateLimited,
                "Resource exhausted",
            ),
            (
                "{\"object\":\"error\",\"message\":\"bad\",\"type\":\"BadRequestError\",\"code\":400}",
                ErrorKind::InvalidRequest,
                "bad",
            ),
            ("{\"choices\":[", ErrorKind::Api, "the upstream sent a malformed stream chunk: {\"choices\":["),
        ] {
            let mut d = StreamDecoder::new();
            let mut out = Vec::new();
            d.decode(&SseEvent { event: None, data }, &mut out);
            d.decode(&SseEvent { event: None, data: "[DONE]" }, &mut out);
            d.finish(&mut out);
            assert_eq!(out, vec![StreamEvent::Error { kind, message: message.into() }], "{data}");
        }
        // `finish_reason: ""` is no finish.
        let t = concat!(
            "data: {\"id\":\"a\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":\"\"}]}\n\n",
            "data: {\"id\":\"a\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"y\"},\"finish_reason\":\"\"}]}\n\n",
        );
        let evs = decode_chunks(&[t.as_bytes()]);
        assert_eq!(evs.len(), 4, "{evs:?}");
        // No [DONE] but a finish_reason: complete.
        let evs = decode_chunks(&[T_LENGTH_NO_DONE.as_bytes()]);
        assert!(matches!(evs.last(), Some(StreamEvent::End)));
    }

    #[test]
    fn stream_split_at_every_byte_boundary() {
        for (name, t) in transcripts() {
            let input = t.as_bytes();
            let whole = decode_chunks(&[input]);
            assert!(whole.len() >= 3, "{name}");
            for k in 0..=input.len() {
                let (a, b) = input.split_at(k);
                assert_eq!(decode_chunks(&[a, b]), whole, "{name} split at {k}");
            }
        }
    }

    proptest! {
        #[test]
        fn stream_random_splits(which in 0usize..9, cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12)) {
            let all = transcripts();
            let (name, t) = &all[which % all.len()];
            let input = t.as_bytes();
            let whole = decode_chunks(&[input]);
            let mut points: Vec<usize> = cuts.iter().map(|i| i.index(input.len() + 1)).collect();
            points.sort_unstable();
            let mut chunks = Vec::new();
            let mut last = 0;
            for p in points {
                chunks.push(&input[last..p]);
                last = p;
            }
            chunks.push(&input[last..]);
            prop_assert_eq!(decode_chunks(&chunks), whole, "{}", name);
        }
    }

    #[test]
    fn transcripts_keep_block_discipline() {
        for (name, t) in transcripts() {
            let evs = decode_chunks(&[t.as_bytes()]);
            assert!(matches!(evs.first(), Some(StreamEvent::Start { .. }) | Some(StreamEvent::Error { .. })), "{name}");
            check_block_discipline(&evs);
        }
    }
}
