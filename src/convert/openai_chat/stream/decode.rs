//! A Chat upstream's stream chunks to IR events, one chunk at a time.

use serde_json::Value;

use super::super::error::{ErrorFields, MAX_ERROR_TEXT, error_kind, find_error};
use super::super::response::{decode_usage, stop_reason, synth_call_id};
use super::super::wire::{Chunk, Delta};
use crate::convert::ir::*;
use crate::protocol::errors::ErrorKind;
use crate::protocol::lenient::{Object, Parse, read_direct, read_through_value, truncate_marked};
use crate::protocol::plain_json::unescaped;
use crate::protocol::sse::SseEvent;
use crate::protocol::stream_events::{
    ChatChunkFacts, EventKind, PlainChatDelta, StreamContext, chat_chunk_kind, note_first_model, plain_chat_delta,
};

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

/// The classifier's facts of a chunk that is not an error (`stream_events::ChatChunkFacts`).
fn chunk_facts(chunk: &Chunk<'_>) -> ChatChunkFacts {
    let choices = chunk.choices.value.objects();
    let (mut finish, mut content) = (false, false);
    for c in choices {
        finish |= c.finish_reason.as_str().is_some_and(|r| !r.is_empty());
        content |= c.delta.0.as_ref().is_some_and(|d| d.has_content) || c.text.0 || c.message.0;
    }
    ChatChunkFacts { choices_array: chunk.choices.array, finish, content, usage: chunk.usage.non_empty }
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
        self.decode_with(event, out, Parse::Direct, None);
    }

    /// [`decode`](Self::decode), which also classifies the event as
    /// `stream_events::inspect_and_observe` would (noting its model in `ctx`) when its own read
    /// of the chunk tells: a chunk read straight from the text that is not an error. `None`
    /// leaves the event to the classifier.
    pub fn decode_classified(
        &mut self,
        event: &SseEvent<'_>,
        out: &mut Vec<StreamEvent>,
        ctx: &mut StreamContext,
    ) -> Option<EventKind> {
        self.decode_with(event, out, Parse::Direct, Some(ctx))
    }

    fn decode_with(
        &mut self,
        event: &SseEvent<'_>,
        out: &mut Vec<StreamEvent>,
        parse: Parse,
        classify: Option<&mut StreamContext>,
    ) -> Option<EventKind> {
        if self.ended || self.failed {
            return None;
        }
        let data = event.data.trim();
        if data.is_empty() {
            return None;
        }
        if data == "[DONE]" {
            self.start(out, String::new(), String::new(), None);
            self.emit_finish(out);
            out.push(StreamEvent::End);
            self.ended = true;
            return None;
        }
        if let Parse::Direct = parse
            && event.event != Some("error")
            && let Some(delta) = plain_chat_delta(data)
            && let Ok(created) = delta.created.parse::<u64>()
        {
            return self.plain_delta(&delta, created, out, classify);
        }
        let mut slot = None;
        let direct = match parse {
            Parse::Direct => read_direct::<Chunk<'_>>(data),
            #[cfg(test)]
            Parse::ViaValue => None,
        };
        // Read straight from the text, the chunk was also a valid read for the classifier's own
        // struct, whose fields and nested fields this one holds: it would have classified it.
        let classified_here = direct.is_some();
        let read = match direct {
            Some(chunk) => Object::Read(chunk),
            None => read_through_value(data, &mut slot),
        };
        let chunk: Chunk<'_> = match read {
            Object::Read(chunk) => chunk,
            Object::Malformed(_) => {
                self.fail(
                    out,
                    ErrorKind::Api,
                    format!("the upstream sent a malformed stream chunk: {}", truncate_marked(data, MAX_ERROR_TEXT)),
                );
                return None;
            }
            Object::NotObject(v) => {
                // Gemini's OpenAI layer reports errors as `[{"error":{...}}]`.
                let (kind, message) = match find_error(&v) {
                    Some(f) => (error_kind(None, &f), f.message),
                    None => (ErrorKind::Api, None),
                };
                let message = message.unwrap_or_else(|| {
                    format!("the upstream sent an unexpected stream chunk: {}", truncate_marked(data, MAX_ERROR_TEXT))
                });
                self.fail(out, kind, message);
                return None;
            }
        };
        let is_error = chunk.error.0
            || chunk.object.as_str() == Some("error")
            || chunk.kind.as_str() == Some("error")
            || event.event == Some("error");
        if is_error {
            // Rare: the whole error object is read from a `Value`.
            let f = serde_json::from_str::<Value>(data).ok().and_then(|v| find_error(&v)).unwrap_or(ErrorFields {
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
            return None;
        }
        let kind = match classify {
            Some(ctx) if classified_here => {
                note_first_model(chunk.model.as_str(), ctx);
                Some(chat_chunk_kind(&chunk_facts(&chunk)))
            }
            _ => None,
        };
        self.decode_chunk(&chunk, out);
        kind
    }

    /// A content chunk in OpenAI's shape (`stream_events::plain_chat_delta`), read as
    /// `decode_chunk` reads its parse: one choice of text, no finish, no usage.
    fn plain_delta(
        &mut self,
        delta: &PlainChatDelta<'_>,
        created: u64,
        out: &mut Vec<StreamEvent>,
        classify: Option<&mut StreamContext>,
    ) -> Option<EventKind> {
        let kind = classify.map(|ctx| {
            note_first_model(Some(delta.model), ctx);
            let facts =
                ChatChunkFacts { choices_array: true, finish: false, content: delta.has_content(), usage: false };
            chat_chunk_kind(&facts)
        });
        self.start(out, delta.id.to_owned(), delta.model.to_owned(), Some(created));
        if !self.finished && delta.has_content() {
            self.text_delta(unescaped(delta.content).into_owned(), out);
        }
        kind
    }

    fn decode_chunk(&mut self, chunk: &Chunk<'_>, out: &mut Vec<StreamEvent>) {
        let choices = &chunk.choices.value.0;
        let usage = chunk.usage.value.0.as_ref();
        let model = chunk.model.as_str().unwrap_or_default();
        if !self.started && choices.is_empty() && usage.is_none() && model.is_empty() {
            // Azure's leading `prompt_filter_results` chunk: no id, model or content yet.
            return;
        }
        self.start(out, chunk.id.as_str().unwrap_or_default().to_owned(), model.to_owned(), chunk.created.as_u64());
        if let Some(u) = usage {
            self.usage.merge(&decode_usage(u));
        }
        if self.finished {
            // Only a late usage chunk or [DONE] can follow the Finish.
            return;
        }
        for choice in chunk.choices.value.objects() {
            if choice.index.as_u64().unwrap_or(0) != 0 {
                continue;
            }
            if let Some(delta) = &choice.delta.0 {
                self.delta(delta, out);
            }
            // Some vendors send `""` on every chunk: only a real reason ends the turn.
            if let Some(reason) = choice.finish_reason.as_str().filter(|r| !r.is_empty()) {
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

    fn delta(&mut self, d: &Delta<'_>, out: &mut Vec<StreamEvent>) {
        let reasoning = d.reasoning_content.as_str().filter(|s| !s.is_empty());
        if let Some(r) = reasoning.or_else(|| d.reasoning.as_str().filter(|s| !s.is_empty())) {
            let index = self.open_unless(self.thinking, BlockStart::Thinking, out);
            self.thinking = Some(index);
            out.push(StreamEvent::ThinkingDelta { index, text: r.to_owned() });
        }
        let content = d.content.as_str().filter(|s| !s.is_empty());
        let refusal = d.refusal.as_str().filter(|s| !s.is_empty());
        self.saw_refusal |= refusal.is_some();
        for t in [content, refusal].into_iter().flatten() {
            self.text_delta(t.to_owned(), out);
        }
        for c in d.tool_calls.objects() {
            let f = c.function.0.as_ref();
            let name = f.and_then(|f| f.name.as_str());
            let args = f.and_then(|f| f.arguments.as_str()).unwrap_or_default();
            self.tool_delta(c.index.as_u64(), c.id.as_str(), name, args, out);
        }
        if let Some(fc) = &d.function_call.0 {
            let args = fc.arguments.as_str().unwrap_or_default();
            self.tool_delta(Some(FUNCTION_CALL_KEY), None, fc.name.as_str(), args, out);
        }
    }

    /// Text of the answer (not empty), in the open text block or a new one.
    fn text_delta(&mut self, text: String, out: &mut Vec<StreamEvent>) {
        let index = self.open_unless(self.text, BlockStart::Text, out);
        self.text = Some(index);
        out.push(StreamEvent::TextDelta { index, text });
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
    use crate::protocol::Format;
    use crate::protocol::lenient::read_object;
    use crate::protocol::stream_events::inspect_and_observe;
    use insta::assert_json_snapshot;
    use proptest::prelude::*;
    use serde_json::json;

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

    /// One decoder's events for `chunks` (each a data line's JSON), parsed as `parse` says.
    fn decode_values(chunks: &[Value], done: bool, parse: Parse) -> Vec<StreamEvent> {
        let mut d = StreamDecoder::new();
        let mut out = Vec::new();
        let texts: Vec<String> = chunks.iter().map(Value::to_string).collect();
        for data in texts.iter().map(String::as_str).chain(done.then_some("[DONE]")) {
            d.decode_with(&SseEvent { event: None, data }, &mut out, parse, None);
        }
        d.finish(&mut out);
        out
    }

    fn arb_delta() -> BoxedStrategy<Value> {
        let id = prop_oneof![prop::sample::select(vec!["call_a", "call_b", ""]).prop_map(|s| json!(s)), arb_scalar()];
        let call = prop_oneof![
            4 => arb_object(vec![("index", arb_count().boxed()), ("id", id.boxed()), ("function", arb_function())]),
            1 => arb_scalar(),
        ];
        let calls = prop_oneof![3 => prop::collection::vec(call, 0..3).prop_map(Value::Array), 1 => arb_scalar()];
        let delta = arb_object(vec![
            ("content", arb_text().boxed()),
            ("refusal", arb_text().boxed()),
            ("reasoning_content", arb_text().boxed()),
            ("reasoning", arb_text().boxed()),
            ("tool_calls", calls.boxed()),
            ("function_call", arb_function()),
        ]);
        prop_oneof![5 => delta, 1 => arb_scalar()].boxed()
    }

    fn arb_chunk() -> BoxedStrategy<Value> {
        let reason = prop_oneof![
            prop::sample::select(vec!["", "stop", "tool_calls", "length", "content_filter"]).prop_map(|s| json!(s)),
            arb_scalar(),
        ];
        let choice = prop_oneof![
            5 => arb_object(vec![("index", arb_count().boxed()), ("delta", arb_delta()), ("finish_reason", reason.boxed())]),
            1 => arb_scalar(),
        ];
        let choices = prop_oneof![4 => prop::collection::vec(choice, 0..3).prop_map(Value::Array), 1 => arb_scalar()];
        let usage = arb_chat_usage();
        let object =
            prop_oneof![9 => Just(json!("chat.completion.chunk")), 1 => Just(json!("error")), 1 => arb_scalar()];
        let error = prop_oneof![Just(Value::Null), Just(json!({"message": "slow down", "type": "rate_limit_error"}))];
        arb_object(vec![
            ("id", prop_oneof![Just(json!("chatcmpl-1")), arb_scalar()].boxed()),
            ("object", object.boxed()),
            ("model", prop_oneof![Just(json!("gpt-4.1")), arb_scalar()].boxed()),
            ("created", arb_count().boxed()),
            ("choices", choices.boxed()),
            ("usage", usage.boxed()),
            ("error", prop::option::weighted(0.1, error).prop_map(|e| e.unwrap_or(Value::Null)).boxed()),
        ])
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        /// The direct read of a chunk and the read through a `Value` decode to the same events,
        /// whatever types the fields have.
        #[test]
        fn a_chunk_read_directly_decodes_as_one_read_through_a_value(
            chunks in prop::collection::vec(arb_chunk(), 1..6),
            done in any::<bool>(),
        ) {
            prop_assert_eq!(decode_values(&chunks, done, Parse::Direct), decode_values(&chunks, done, Parse::ViaValue));
        }
    }

    fn decode_texts(texts: &[String], parse: Parse) -> Vec<StreamEvent> {
        let mut d = StreamDecoder::new();
        let mut out = Vec::new();
        for data in texts {
            d.decode_with(&SseEvent { event: None, data }, &mut out, parse, None);
        }
        d.finish(&mut out);
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]
        /// A chunk in OpenAI's shape, read from a match, decodes as its read through a `Value`
        /// does; so does one a member away from that shape, which is parsed.
        #[test]
        fn an_openai_shaped_chunk_decodes_as_its_parse(
            chunks in prop::collection::vec(prop_oneof![4 => openai_shaped_chunk(), 1 => arb_chunk_text()], 1..8),
        ) {
            prop_assert_eq!(decode_texts(&chunks, Parse::Direct), decode_texts(&chunks, Parse::ViaValue));
        }
    }

    #[test]
    fn the_mock_and_openai_content_chunks_are_matched() {
        let openai = r#"{"id":"chatcmpl-B9MB","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o","service_tier":"default","system_fingerprint":"fp_fc9f1d7035","choices":[{"index":0,"delta":{"content":"Bon\"jour\n"},"logprobs":null,"finish_reason":null}],"usage":null}"#;
        assert!(plain_chat_delta(openai).is_some());
        let mut out = Vec::new();
        StreamDecoder::new().decode(&SseEvent { event: None, data: openai }, &mut out);
        assert_eq!(
            out,
            [
                StreamEvent::Start {
                    id: "chatcmpl-B9MB".into(),
                    model: "gpt-4o".into(),
                    created: Some(1741570283),
                    usage: Usage::default()
                },
                StreamEvent::BlockStart { index: 0, block: BlockStart::Text },
                StreamEvent::TextDelta { index: 0, text: "Bon\"jour\n".into() },
            ]
        );
        // Content after the turn finished (a finish, then the usage chunk) is not the answer's.
        let finish = openai.replace(r#""finish_reason":null"#, r#""finish_reason":"stop""#);
        let usage = r#"{"id":"chatcmpl-B9MB","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#;
        let mut d = StreamDecoder::new();
        let mut out = Vec::new();
        for data in [finish.as_str(), usage, openai] {
            d.decode(&SseEvent { event: None, data }, &mut out);
        }
        let after_finish = out.iter().skip_while(|e| !matches!(e, StreamEvent::Finish { .. })).skip(1);
        assert_eq!(after_finish.count(), 0, "{out:?}");
    }

    #[test]
    fn a_plain_chunk_is_read_without_a_value_and_a_repeated_key_keeps_the_last() {
        let plain = r#"{"id":"c1","model":"m","choices":[{"index":0,"delta":{"content":"Hi"}}]}"#;
        let mut slot = None;
        assert!(matches!(read_object::<Chunk<'_>>(plain, &mut slot, Parse::Direct), Object::Read(_)));
        assert!(slot.is_none(), "a plain chunk must not build a Value");

        // A Value keeps the last of a repeated key; so must the chunk read through one.
        let twice = r#"{"id":"c1","model":"m","choices":[{"index":0,"delta":{"content":"first"}}],"choices":[{"index":0,"delta":{"content":"last"}}]}"#;
        let mut out = Vec::new();
        StreamDecoder::new().decode(&SseEvent { event: None, data: twice }, &mut out);
        let texts: Vec<&str> = out
            .iter()
            .filter_map(|e| match e {
                StreamEvent::TextDelta { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(texts, ["last"]);
    }

    #[test]
    fn transcripts_keep_block_discipline() {
        for (name, t) in transcripts() {
            let evs = decode_chunks(&[t.as_bytes()]);
            assert!(matches!(evs.first(), Some(StreamEvent::Start { .. }) | Some(StreamEvent::Error { .. })), "{name}");
            check_block_discipline(&evs);
        }
    }

    // -----------------------------------------------------------------------------------------
    // The decoder's classification of the chunks it reads, held to the classifier's

    /// JSON written by hand, so that an object can hold a key twice (a `Value` cannot).
    #[derive(Clone, Debug)]
    enum Doc {
        Value(Value),
        Object(Vec<(&'static str, Doc)>),
        Array(Vec<Doc>),
    }

    impl Doc {
        fn write(&self, out: &mut String) {
            match self {
                Doc::Value(v) => out.push_str(&v.to_string()),
                Doc::Object(members) => {
                    out.push('{');
                    for (i, (key, value)) in members.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        out.push_str(&json!(key).to_string());
                        out.push(':');
                        value.write(out);
                    }
                    out.push('}');
                }
                Doc::Array(items) => {
                    out.push('[');
                    for (i, item) in items.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        item.write(out);
                    }
                    out.push(']');
                }
            }
        }
    }

    fn value(v: impl Strategy<Value = Value> + 'static) -> BoxedStrategy<Doc> {
        v.prop_map(Doc::Value).boxed()
    }

    /// An object of some of `keys` (each value from `member`), usually each key once and
    /// sometimes one of them twice.
    fn doc_object(keys: &'static [&'static str], member: fn(&'static str) -> BoxedStrategy<Doc>) -> BoxedStrategy<Doc> {
        let pair = prop::sample::select(keys).prop_flat_map(move |k| member(k).prop_map(move |v| (k, v)));
        (prop::collection::vec(pair, 0..7), prop::bool::weighted(0.8))
            .prop_map(|(mut members, once)| {
                if once {
                    let mut seen = Vec::new();
                    members.retain(|(k, _)| {
                        let new = !seen.contains(k);
                        seen.push(*k);
                        new
                    });
                }
                Doc::Object(members)
            })
            .boxed()
    }

    fn something() -> BoxedStrategy<Doc> {
        value(prop_oneof![
            arb_text(),
            Just(json!([])),
            Just(json!({})),
            Just(json!([null])),
            Just(json!({"type": "url_citation"})),
            Just(json!(false)),
            Just(json!(true)),
            Just(json!(0)),
            Just(json!(-2.5)),
        ])
    }

    fn delta_member(key: &'static str) -> BoxedStrategy<Doc> {
        match key {
            "tool_calls" => prop_oneof![
                3 => prop::collection::vec(
                    value(prop_oneof![
                        3 => arb_object(vec![("index", arb_count().boxed()), ("id", arb_scalar().boxed()), ("function", arb_function())]),
                        1 => arb_scalar(),
                    ]),
                    0..3
                )
                .prop_map(Doc::Array),
                1 => something(),
            ]
            .boxed(),
            "function_call" => value(arb_function()),
            "role" => value(prop_oneof![Just(json!("assistant")), arb_scalar()]),
            _ => something(),
        }
    }

    fn choice_member(key: &'static str) -> BoxedStrategy<Doc> {
        const DELTA_KEYS: &[&str] = &[
            "role",
            "content",
            "refusal",
            "reasoning_content",
            "reasoning",
            "tool_calls",
            "function_call",
            "audio",
            "annotations",
        ];
        match key {
            "index" => value(arb_count()),
            "delta" => prop_oneof![
                4 => doc_object(DELTA_KEYS, delta_member),
                // The preamble's shapes: a role, and nothing that carries anything.
                2 => value(prop_oneof![
                    Just(json!({"role": "assistant"})),
                    Just(json!({"role": "assistant", "content": "", "refusal": null})),
                    Just(json!({"role": "", "tool_calls": [], "audio": {}})),
                    Just(json!({})),
                ]),
                1 => something(),
            ]
            .boxed(),
            "finish_reason" => value(prop_oneof![
                prop::sample::select(vec!["", "stop", "tool_calls", "length"]).prop_map(|s| json!(s)),
                arb_scalar(),
            ]),
            _ => something(),
        }
    }

    fn chunk_member(key: &'static str) -> BoxedStrategy<Doc> {
        const CHOICE_KEYS: &[&str] = &["index", "delta", "finish_reason", "text", "message", "logprobs"];
        match key {
            "choices" => prop_oneof![
                4 => prop::collection::vec(prop_oneof![4 => doc_object(CHOICE_KEYS, choice_member), 1 => something()], 0..3)
                    .prop_map(Doc::Array),
                1 => something(),
            ]
            .boxed(),
            "usage" => prop_oneof![3 => value(arb_chat_usage()), 1 => something()].boxed(),
            "model" => value(prop_oneof![Just(json!("gpt-4.1")), Just(json!("")), arb_scalar()]),
            "object" => value(prop_oneof![4 => Just(json!("chat.completion.chunk")), 1 => Just(json!("error")), 1 => arb_scalar()]),
            "type" => value(prop_oneof![Just(json!("error")), arb_scalar()]),
            "error" => value(prop_oneof![
                3 => Just(Value::Null),
                1 => Just(json!({})),
                1 => Just(json!({"message": "slow down", "type": "rate_limit_error"})),
            ]),
            "created" => value(arb_count()),
            _ => value(arb_scalar()),
        }
    }

    /// A content chunk written as OpenAI writes it, member for member, which the decoder reads
    /// from a match (`stream_events::plain_chat_delta`), or one member away from that shape.
    fn openai_shaped_chunk() -> BoxedStrategy<String> {
        use crate::protocol::plain_json::strategies::{one_of, string};
        let head = (
            prop_oneof![4 => Just(r#""chatcmpl-1""#.to_owned()), 1 => string()],
            prop_oneof![8 => (0u64..2_000_000_000).prop_map(|n| n.to_string()), 1 => crate::protocol::plain_json::strategies::count()],
            prop_oneof![4 => Just(r#""gpt-4.1""#.to_owned()), 1 => Just(r#""""#.to_owned()), 1 => string()],
        );
        let tail = (
            string(),
            one_of(&[
                r#"},"logprobs":null,"finish_reason":null}]"#,
                r#"},"logprobs":null,"finish_reason":"stop"}]"#,
                r#"},"finish_reason":null}]"#,
            ]),
            one_of(&[r#","usage":null"#, "", r#","usage":{"prompt_tokens":3,"completion_tokens":1}"#]),
            one_of(&["}", r#","obfuscation":"x1"}"#, r#","model":"again"}"#, r#","error":{"message":"x"}}"#]),
        );
        (head, one_of(&["", r#""role":"assistant","#]), tail)
            .prop_map(|((id, created, model), role, (content, choice_end, usage, end))| {
                format!(
                    r#"{{"id":{id},"object":"chat.completion.chunk","created":{created},"model":{model},"service_tier":"default","system_fingerprint":null,"choices":[{{"index":0,"delta":{{{role}"content":{content}{choice_end}{usage}{end}"#
                )
            })
            .boxed()
    }

    /// A chunk's data: mostly an object, now and then something else the stream may carry.
    fn arb_chunk_text() -> BoxedStrategy<String> {
        const CHUNK_KEYS: &[&str] =
            &["id", "object", "model", "created", "choices", "usage", "error", "type", "system_fingerprint"];
        prop_oneof![
            12 => doc_object(CHUNK_KEYS, chunk_member).prop_map(|d| {
                let mut text = String::new();
                d.write(&mut text);
                text
            }),
            6 => openai_shaped_chunk(),
            1 => Just("[DONE]".to_owned()),
            1 => Just("{\"choices\":[".to_owned()),
            1 => Just("[{\"error\":{\"message\":\"quota\"}}]".to_owned()),
            1 => Just(String::new()),
        ]
        .boxed()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]
        /// Whenever the decoder classifies a chunk it read, the classifier would have said the
        /// same and noted the same model; and classifying does not change what it decodes.
        #[test]
        fn a_chunk_the_decoder_classifies_is_classified_as_the_classifier_would(
            chunks in prop::collection::vec((arb_chunk_text(), prop::bool::weighted(0.05)), 1..6),
        ) {
            let (mut classifying, mut plain) = (StreamDecoder::new(), StreamDecoder::new());
            let (mut decoder_ctx, mut classifier_ctx) = (StreamContext::default(), StreamContext::default());
            for (data, named_error) in &chunks {
                let event = SseEvent { event: named_error.then_some("error"), data };
                let (mut out, mut plain_out) = (Vec::new(), Vec::new());
                let by_decoder = classifying.decode_classified(&event, &mut out, &mut decoder_ctx);
                plain.decode(&event, &mut plain_out);
                prop_assert_eq!(&out, &plain_out);
                let by_classifier = inspect_and_observe(Format::Openai, &event, &mut classifier_ctx);
                match by_decoder {
                    Some(kind) => prop_assert_eq!(kind, by_classifier, "{}", data),
                    // What the observer does with an event the decoder leaves alone.
                    None => drop(inspect_and_observe(Format::Openai, &event, &mut decoder_ctx)),
                }
                prop_assert_eq!(&decoder_ctx.model, &classifier_ctx.model, "{}", data);
            }
        }
    }

    #[test]
    fn real_chunks_are_classified_by_the_decoder_and_the_rest_left_to_the_classifier() {
        let mut scanner = crate::protocol::sse::SseScanner::new();
        let (mut d, mut ctx) = (StreamDecoder::new(), StreamContext::default());
        let mut kinds = Vec::new();
        scanner.feed(T_PARALLEL_TOOLS.as_bytes(), |e| kinds.push(d.decode_classified(&e, &mut Vec::new(), &mut ctx)));
        let (last, chunks) = kinds.split_last().expect("events");
        assert_eq!(*last, None, "[DONE] is the classifier's");
        assert!(chunks.iter().all(Option::is_some), "{kinds:?}");
        assert_eq!(chunks.first(), Some(&Some(EventKind::Preamble)), "a role-only first chunk");
        assert_eq!(ctx.model.as_deref(), Some("gpt-4.1-2025-04-14"));

        let twice = r#"{"model":"m","choices":[{"delta":{"content":"a","content":"b"}}]}"#;
        let kind = StreamDecoder::new().decode_classified(
            &SseEvent { event: None, data: twice },
            &mut Vec::new(),
            &mut StreamContext::default(),
        );
        assert_eq!(kind, None, "a chunk read through a Value is the classifier's");
    }
}
