//! Stream resume (SPEC §6, §15.3): when a stream breaks after content reached the client and
//! what the client has is text, the answer is continued on another attempt and relayed into the
//! same client stream. Pure: what the client has received (rebuilt from the bytes relayed to
//! it), whether that can be continued, the continuation request, and the splice that turns the
//! continuation's events into the rest of the client's stream.
//!
//! The splice works on IR events: the continuation's events (any format) are decoded, then
//! - its preamble is dropped (the client has one),
//! - its first text block continues the text block the client has open (same index), or
//!   starts the next index; its thinking blocks are dropped (the client has its thinking);
//! - the text it restates is trimmed: the longest overlap, of at least [`MIN_OVERLAP`]
//!   characters, between the end of the delivered text and the start of the continuation;
//! - its usage is added to what the broken attempt reported;
//!
//! and encoded by the client's encoder, first brought to where the client's stream stands by
//! replaying the delivered events through it (its output then discarded). One terminal event,
//! one message id, indices continuing.

use bytes::Bytes;
use serde_json::{Value, json};

use crate::convert::ir::{BlockStart, KeptIds, StreamEvent, Usage};
use crate::convert::{StreamDecoder, StreamEncoder};
use crate::protocol::Format;
use crate::protocol::sse::SseScanner;

/// A resume in progress: what the client has, and how the delivered text is sent on.
pub struct Resuming {
    pub delivered: std::sync::Arc<Delivered>,
    /// A prefill may be tried (until an endpoint refuses one).
    pub prefill: bool,
    /// The attempt being sent carries a prefill.
    pub prefilled: bool,
    /// The endpoint just refused the prefill: the same endpoint once more, as a user turn,
    /// within the same attempt.
    pub retry_without_prefill: bool,
}

impl Resuming {
    pub fn new(delivered: std::sync::Arc<Delivered>) -> Resuming {
        Resuming { delivered, prefill: true, prefilled: false, retry_without_prefill: false }
    }
}

/// Overlaps shorter than this are coincidence, not restatement.
pub const MIN_OVERLAP: usize = 16;
/// How much continuation text is held back to look for a restatement of the delivered text.
const OVERLAP_WINDOW: usize = 512;
/// The most of a stream kept for a resume, per stream; a longer answer is not resumed. A long
/// text answer (32k tokens) is about 150 KB of events.
pub const MAX_DELIVERED_BYTES: usize = 1024 * 1024;

/// What the client has received of its stream.
#[derive(Debug, Default)]
pub struct Delivered {
    /// The events the client's bytes decode to.
    pub events: Vec<StreamEvent>,
    /// All text of the answer so far (text blocks only), in order.
    pub text: String,
    /// The text block still open when the stream broke.
    pub open_text: Option<usize>,
    /// The index the next block would take.
    pub next_index: usize,
    /// Why the answer cannot be continued, if it cannot.
    pub refusal: Option<&'static str>,
    pub usage: Usage,
    /// Ids the client holds that the IR does not carry (Responses item ids).
    pub kept_ids: KeptIds,
}

impl Delivered {
    /// Rebuild what the client has from the bytes relayed to it (`client` = its format).
    pub fn from_client_bytes(client: Format, bytes: &[u8]) -> Delivered {
        let mut scanner = SseScanner::new();
        let mut decoder = StreamDecoder::new(client);
        let mut events = Vec::new();
        let mut kept = KeptIds::default();
        scanner.feed(bytes, |event| {
            if client == Format::Responses {
                keep_responses_ids(event.event, event.data, &mut kept);
            }
            decoder.decode(&event, &mut events);
        });
        Delivered { kept_ids: kept, ..Delivered::from_events(events) }
    }

    pub fn from_events(events: Vec<StreamEvent>) -> Delivered {
        let mut d = Delivered::default();
        let mut open: Vec<(usize, &'static str)> = Vec::new();
        for event in &events {
            match event {
                // A start's output count is a placeholder (Anthropic says 1): output stays
                // unknown until a finish reports it, as in the record (`observe::usage`).
                StreamEvent::Start { usage, .. } => d.usage.merge(&Usage { output: None, ..*usage }),
                StreamEvent::Finish { usage, .. } => {
                    // The answer ended (only the terminal event is missing): nothing to continue.
                    d.usage.merge(usage);
                    d.refusal = Some("the answer had finished");
                }
                StreamEvent::BlockStart { index, block } => {
                    let kind = match block {
                        BlockStart::Text => "text",
                        BlockStart::ToolUse { .. } => {
                            d.refusal = Some("a tool call had started");
                            "tool"
                        }
                        _ => "thinking",
                    };
                    open.push((*index, kind));
                    d.next_index = d.next_index.max(index + 1);
                }
                StreamEvent::TextDelta { text, .. } => d.text.push_str(text),
                StreamEvent::ToolArgsDelta { .. } => d.refusal = Some("a tool call had started"),
                StreamEvent::BlockStop { index } => open.retain(|(i, _)| i != index),
                StreamEvent::End => d.refusal = Some("the answer was complete"),
                _ => {}
            }
        }
        if open.iter().any(|(_, kind)| *kind == "thinking") {
            d.refusal = d.refusal.or(Some("a thinking block was unfinished"));
        }
        d.open_text = open.iter().rev().find(|(_, kind)| *kind == "text").map(|(i, _)| *i);
        d.events = events;
        d
    }
}

/// A Responses client holds the response id and every output item's id: the continuation must
/// use the same ones (the SDK checks an item's identity from `added` to `done`).
fn keep_responses_ids(name: Option<&str>, data: &str, kept: &mut KeptIds) {
    let (Some("response.created" | "response.output_item.added"), Ok(v)) = (name, serde_json::from_str::<Value>(data))
    else {
        return;
    };
    if let Some(id) = v.pointer("/response/id").and_then(Value::as_str) {
        kept.response = Some(id.to_string());
    }
    if let (Some(index), Some(id)) =
        (v.get("output_index").and_then(Value::as_u64), v.pointer("/item/id").and_then(Value::as_str))
    {
        kept.items.push((index as usize, id.to_string()));
    }
}

/// The user turn that asks for the rest of a cut answer, quoting its end.
fn continue_prompt(delivered: &str) -> String {
    let tail: String = {
        let chars: Vec<char> = delivered.chars().collect();
        chars[chars.len().saturating_sub(300)..].iter().collect()
    };
    format!(
        "Your previous answer was cut off. Continue it exactly where it stopped: do not repeat anything, do not add an introduction or a note, begin with the very next characters after this ending:\n\n{tail}"
    )
}

/// Whether an Anthropic request body asks for extended thinking (Anthropic refuses an assistant
/// prefill then).
pub fn anthropic_thinking(body: &Value) -> bool {
    matches!(body.get("thinking").and_then(|t| t.get("type")).and_then(Value::as_str), Some("enabled" | "adaptive"))
}

/// The request that continues a cut answer, in the endpoint's own format: `body` is what the
/// endpoint was (or would be) sent for the original request; the delivered text follows as an
/// assistant turn — as a prefill the model continues (`prefill`, Anthropic only), or followed
/// by a user turn that asks to continue it.
pub fn continuation_body(format: Format, body: &[u8], delivered: &str, prefill: bool) -> Result<Bytes, String> {
    let mut v: Value = serde_json::from_slice(body).map_err(|e| format!("the request body is not JSON: {e}"))?;
    let prefill = prefill && format == Format::Anthropic;
    // Anthropic refuses a final assistant turn that ends in whitespace; the continuation brings
    // it back (the overlap splice drops what it restates).
    let said = if prefill { delivered.trim_end() } else { delivered };
    let obj = v.as_object_mut().ok_or("the request body is not a JSON object")?;
    if delivered.is_empty() {
        // Only finished thinking reached the client: the same request again, its thinking dropped
        // by the splice.
    } else {
        match format {
            Format::Anthropic | Format::Openai => {
                let messages =
                    obj.get_mut("messages").and_then(Value::as_array_mut).ok_or("the request has no messages array")?;
                if !said.is_empty() {
                    push_assistant_text(messages, said);
                }
                if !prefill {
                    messages.push(json!({"role": "user", "content": continue_prompt(delivered)}));
                }
            }
            Format::Responses => {
                let input = obj.entry("input").or_insert(json!([]));
                if let Value::String(s) = input {
                    *input = json!([{"role": "user", "content": s.clone()}]);
                }
                let items = input.as_array_mut().ok_or("the request's input is neither text nor a list")?;
                if !said.is_empty() {
                    items.push(json!({"role": "assistant", "content": said}));
                }
                items.push(json!({"role": "user", "content": continue_prompt(delivered)}));
                // The continuation is a new turn of its own.
                obj.remove("previous_response_id");
            }
            Format::Gemini => {
                let contents =
                    obj.get_mut("contents").and_then(Value::as_array_mut).ok_or("the request has no contents array")?;
                if !said.is_empty() {
                    contents.push(json!({"role": "model", "parts": [{"text": said}]}));
                }
                contents.push(json!({"role": "user", "parts": [{"text": continue_prompt(delivered)}]}));
            }
        }
    }
    if format != Format::Gemini {
        obj.insert("stream".into(), Value::Bool(true));
    }
    serde_json::to_vec(&v).map(Bytes::from).map_err(|e| e.to_string())
}

/// Add assistant text to a Messages / Chat list: to a last assistant turn when there is one (two
/// assistant turns in a row are refused), else as a new turn.
fn push_assistant_text(messages: &mut Vec<Value>, text: &str) {
    if let Some(last) = messages.last_mut()
        && last.get("role").and_then(Value::as_str) == Some("assistant")
    {
        match last.get_mut("content") {
            Some(Value::String(s)) => s.push_str(text),
            Some(Value::Array(parts)) => parts.push(json!({"type": "text", "text": text})),
            _ => last["content"] = json!(text),
        }
        return;
    }
    messages.push(json!({"role": "assistant", "content": text}));
}

/// How many characters at the start of `continuation` restate the end of `delivered`: the
/// longest such overlap of at least [`MIN_OVERLAP`] characters, else 0.
pub fn overlap(delivered: &str, continuation: &str) -> usize {
    let d: Vec<char> = delivered.chars().collect();
    let c: Vec<char> = continuation.chars().collect();
    let most = d.len().min(c.len());
    (MIN_OVERLAP..=most).rev().find(|&k| d[d.len() - k..] == c[..k]).unwrap_or(0)
}

/// Turns a continuation's events into the rest of the client's stream (module docs).
pub struct Splice {
    /// The end of the delivered text, to find restatements in.
    delivered_tail: String,
    /// The delivered text ended in whitespace that a prefill left out.
    delivered_ends_in_space: bool,
    /// The client's open text block, for the continuation's first text.
    open_text: Option<usize>,
    next_index: usize,
    /// Continuation block index → client block index (`None`: dropped).
    map: Vec<(usize, Option<usize>)>,
    /// Continuation text held back while looking for a restatement.
    pending: String,
    pending_index: Option<usize>,
    /// Whether the first text has been matched against the delivered text.
    trimmed: bool,
    /// The broken attempt's usage, added to the continuation's.
    carried: Usage,
    /// The continuation's own usage, its start and finish merged as any stream's are.
    continued: Usage,
}

impl Splice {
    pub fn new(delivered: &Delivered) -> Splice {
        let tail: String = {
            let chars: Vec<char> = delivered.text.chars().collect();
            chars[chars.len().saturating_sub(OVERLAP_WINDOW)..].iter().collect()
        };
        Splice {
            delivered_ends_in_space: delivered.text.ends_with(char::is_whitespace),
            delivered_tail: tail,
            open_text: delivered.open_text,
            next_index: delivered.next_index,
            map: Vec::new(),
            pending: String::new(),
            pending_index: None,
            trimmed: delivered.text.is_empty(),
            carried: delivered.usage,
            continued: Usage::default(),
        }
    }

    fn mapped(&self, index: usize) -> Option<usize> {
        self.map.iter().find(|(i, _)| *i == index).and_then(|(_, to)| *to)
    }

    /// Release held text: trim what restates the delivered text, then pass the rest on.
    fn release(&mut self, out: &mut Vec<StreamEvent>) {
        let Some(index) = self.pending_index else { return };
        let mut text = std::mem::take(&mut self.pending);
        if !self.trimmed {
            self.trimmed = true;
            let k = overlap(&self.delivered_tail, &text);
            text = text.chars().skip(k).collect();
            if k == 0 && self.delivered_ends_in_space {
                text = text.trim_start().to_string();
            }
        }
        if !text.is_empty() {
            out.push(StreamEvent::TextDelta { index, text });
        }
    }

    /// One continuation event in, the client's events out.
    pub fn event(&mut self, event: StreamEvent, out: &mut Vec<StreamEvent>) {
        match event {
            StreamEvent::Start { usage, .. } => self.continued.merge(&usage),
            StreamEvent::BlockStart { index, block } => match block {
                BlockStart::Text if self.open_text.is_some() => {
                    let to = self.open_text.take();
                    self.map.push((index, to));
                }
                BlockStart::Thinking | BlockStart::RedactedThinking { .. } | BlockStart::ReasoningItem { .. } => {
                    self.map.push((index, None));
                }
                block => {
                    // A new block also ends the search for a restatement.
                    self.release(out);
                    self.trimmed = true;
                    let to = self.next_index;
                    self.next_index += 1;
                    self.map.push((index, Some(to)));
                    out.push(StreamEvent::BlockStart { index: to, block });
                }
            },
            StreamEvent::TextDelta { index, text } => {
                let Some(to) = self.mapped(index) else { return };
                if self.trimmed {
                    out.push(StreamEvent::TextDelta { index: to, text });
                    return;
                }
                self.pending_index = Some(to);
                self.pending.push_str(&text);
                if self.pending.chars().count() >= OVERLAP_WINDOW.min(self.delivered_tail.chars().count()) {
                    self.release(out);
                }
            }
            StreamEvent::ThinkingDelta { .. } | StreamEvent::SignatureDelta { .. } => {}
            StreamEvent::ToolArgsDelta { index, partial_json } => {
                if let Some(to) = self.mapped(index) {
                    out.push(StreamEvent::ToolArgsDelta { index: to, partial_json });
                }
            }
            StreamEvent::BlockStop { index } => {
                if let Some(to) = self.mapped(index) {
                    self.release(out);
                    out.push(StreamEvent::BlockStop { index: to });
                }
            }
            StreamEvent::Finish { stop_reason, stop_sequence, usage } => {
                self.release(out);
                self.continued.merge(&usage);
                out.push(StreamEvent::Finish {
                    stop_reason,
                    stop_sequence,
                    usage: add(&self.carried, &self.continued),
                });
            }
            StreamEvent::End => {
                self.release(out);
                out.push(StreamEvent::End);
            }
            StreamEvent::Error { kind, message } => {
                self.release(out);
                out.push(StreamEvent::Error { kind, message });
            }
        }
    }
}

impl crate::convert::EventSplice for Splice {
    fn event(&mut self, event: StreamEvent, out: &mut Vec<StreamEvent>) {
        Splice::event(self, event, out);
    }
}

/// Two attempts' usage together (an unknown side counts as nothing).
pub fn add(a: &Usage, b: &Usage) -> Usage {
    let sum = |x: Option<u64>, y: Option<u64>| match (x, y) {
        (None, None) => None,
        (x, y) => Some(x.unwrap_or(0) + y.unwrap_or(0)),
    };
    Usage {
        input: sum(a.input, b.input),
        output: sum(a.output, b.output),
        cache_read: sum(a.cache_read, b.cache_read),
        cache_write: sum(a.cache_write, b.cache_write),
        reasoning: sum(a.reasoning, b.reasoning),
    }
}

/// The client's encoder, brought to where its stream stands: the delivered events go through it
/// and what it writes is dropped (the client has those bytes).
pub fn primed_encoder(mut encoder: StreamEncoder, delivered: &Delivered) -> StreamEncoder {
    let mut discard = Vec::new();
    for event in &delivered.events {
        encoder.encode(event, &mut discard);
        discard.clear();
    }
    encoder
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::ir::StopReason;

    fn text(index: usize, t: &str) -> StreamEvent {
        StreamEvent::TextDelta { index, text: t.into() }
    }

    fn start() -> StreamEvent {
        StreamEvent::Start {
            id: "msg_1".into(),
            model: "m".into(),
            usage: Usage { input: Some(100), ..Usage::default() },
            created: None,
        }
    }

    #[test]
    fn overlap_is_the_longest_restatement_of_at_least_sixteen_characters() {
        let delivered = "The quick brown fox jumps over the lazy dog";
        assert_eq!(overlap(delivered, "jumps over the lazy dog and runs"), "jumps over the lazy dog".chars().count());
        assert_eq!(overlap(delivered, "over the lazy dog and runs"), "over the lazy dog".chars().count());
        assert_eq!(overlap(delivered, "lazy dog and runs"), 0, "8 characters are coincidence");
        assert_eq!(overlap(delivered, " and then it ran off"), 0);
        assert_eq!(overlap("é".repeat(40).as_str(), "é".repeat(20).as_str()), 20, "by characters, not bytes");
        assert_eq!(overlap("", "anything at all here"), 0);
    }

    #[test]
    fn what_was_delivered_decides_whether_it_can_be_continued() {
        let open_text = Delivered::from_events(vec![
            start(),
            StreamEvent::BlockStart { index: 0, block: BlockStart::Thinking },
            StreamEvent::BlockStop { index: 0 },
            StreamEvent::BlockStart { index: 1, block: BlockStart::Text },
            text(1, "Hello "),
            text(1, "wor"),
        ]);
        assert_eq!((open_text.refusal, open_text.open_text, open_text.next_index), (None, Some(1), 2));
        assert_eq!(open_text.text, "Hello wor");
        let tool = Delivered::from_events(vec![
            start(),
            StreamEvent::BlockStart { index: 0, block: BlockStart::ToolUse { id: "t".into(), name: "f".into() } },
        ]);
        assert_eq!(tool.refusal, Some("a tool call had started"));
        let thinking =
            Delivered::from_events(vec![start(), StreamEvent::BlockStart { index: 0, block: BlockStart::Thinking }]);
        assert_eq!(thinking.refusal, Some("a thinking block was unfinished"));
        let done = Delivered::from_events(vec![start(), StreamEvent::End]);
        assert!(done.refusal.is_some());
    }

    fn splice_all(delivered: &Delivered, continuation: Vec<StreamEvent>) -> Vec<StreamEvent> {
        let mut splice = Splice::new(delivered);
        let mut out = Vec::new();
        for e in continuation {
            splice.event(e, &mut out);
        }
        out
    }

    #[test]
    fn the_continuation_continues_the_open_block_without_repeating_itself() {
        let delivered = Delivered::from_events(vec![
            start(),
            StreamEvent::BlockStart { index: 0, block: BlockStart::Text },
            text(0, "Rust is a language empowering everyone to build reliable"),
        ]);
        let out = splice_all(
            &delivered,
            vec![
                start(),
                StreamEvent::BlockStart { index: 0, block: BlockStart::Thinking },
                StreamEvent::ThinkingDelta { index: 0, text: "hm".into() },
                StreamEvent::BlockStop { index: 0 },
                StreamEvent::BlockStart { index: 1, block: BlockStart::Text },
                text(1, "everyone to build reli"),
                text(1, "able and efficient software."),
                StreamEvent::BlockStop { index: 1 },
                StreamEvent::Finish {
                    stop_reason: Some(StopReason::EndTurn),
                    stop_sequence: None,
                    usage: Usage { output: Some(7), ..Usage::default() },
                },
                StreamEvent::End,
            ],
        );
        assert_eq!(
            out,
            vec![
                text(0, " and efficient software."),
                StreamEvent::BlockStop { index: 0 },
                StreamEvent::Finish {
                    stop_reason: Some(StopReason::EndTurn),
                    stop_sequence: None,
                    usage: Usage { input: Some(200), output: Some(7), ..Usage::default() },
                },
                StreamEvent::End,
            ],
            "no second preamble, no thinking, the restated words trimmed, usage summed"
        );
    }

    #[test]
    fn after_a_closed_block_the_continuation_takes_the_next_index() {
        let delivered = Delivered::from_events(vec![
            start(),
            StreamEvent::BlockStart { index: 0, block: BlockStart::Text },
            text(0, "First part."),
            StreamEvent::BlockStop { index: 0 },
        ]);
        let out = splice_all(
            &delivered,
            vec![
                start(),
                StreamEvent::BlockStart { index: 0, block: BlockStart::Text },
                text(0, "Second part."),
                StreamEvent::BlockStop { index: 0 },
                StreamEvent::BlockStart { index: 1, block: BlockStart::ToolUse { id: "c".into(), name: "f".into() } },
                StreamEvent::ToolArgsDelta { index: 1, partial_json: "{}".into() },
                StreamEvent::BlockStop { index: 1 },
            ],
        );
        assert_eq!(
            out,
            vec![
                StreamEvent::BlockStart { index: 1, block: BlockStart::Text },
                text(1, "Second part."),
                StreamEvent::BlockStop { index: 1 },
                StreamEvent::BlockStart { index: 2, block: BlockStart::ToolUse { id: "c".into(), name: "f".into() } },
                StreamEvent::ToolArgsDelta { index: 2, partial_json: "{}".into() },
                StreamEvent::BlockStop { index: 2 },
            ]
        );
    }

    #[test]
    fn continuation_requests_in_each_format() {
        let anthropic = br#"{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"hi"}],"stream":true}"#;
        let v: Value =
            serde_json::from_slice(&continuation_body(Format::Anthropic, anthropic, "Hello wor ", true).unwrap())
                .unwrap();
        assert_eq!(
            v["messages"][1],
            json!({"role": "assistant", "content": "Hello wor"}),
            "a prefill, trailing space trimmed"
        );
        assert_eq!(v["messages"].as_array().unwrap().len(), 2);
        let v: Value =
            serde_json::from_slice(&continuation_body(Format::Anthropic, anthropic, "Hello wor", false).unwrap())
                .unwrap();
        assert_eq!(v["messages"][2]["role"], "user");
        assert!(v["messages"][2]["content"].as_str().unwrap().ends_with("Hello wor"));
        let chat = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}"#;
        let v: Value =
            serde_json::from_slice(&continuation_body(Format::Openai, chat, "Hello", true).unwrap()).unwrap();
        assert_eq!(
            (v["messages"][1]["role"].as_str(), v["messages"][2]["role"].as_str()),
            (Some("assistant"), Some("user")),
            "no prefill outside Anthropic"
        );
        let responses = br#"{"model":"m","input":"hi","stream":true,"previous_response_id":"r"}"#;
        let v: Value =
            serde_json::from_slice(&continuation_body(Format::Responses, responses, "Hello", false).unwrap()).unwrap();
        assert_eq!(v["input"][0], json!({"role": "user", "content": "hi"}));
        assert_eq!(v["input"][1], json!({"role": "assistant", "content": "Hello"}));
        assert!(v.get("previous_response_id").is_none());
        let gemini = br#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#;
        let v: Value =
            serde_json::from_slice(&continuation_body(Format::Gemini, gemini, "Hello", false).unwrap()).unwrap();
        assert_eq!(v["contents"][1], json!({"role": "model", "parts": [{"text": "Hello"}]}));
        // A client's own prefill is extended, not followed by a second assistant turn.
        let prefilled = br#"{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"{"}]}"#;
        let v: Value =
            serde_json::from_slice(&continuation_body(Format::Anthropic, prefilled, "\"a\": 1", true).unwrap())
                .unwrap();
        assert_eq!(v["messages"][1]["content"], "{\"a\": 1");
    }

    #[test]
    fn thinking_requests_are_recognised() {
        assert!(anthropic_thinking(&json!({"thinking": {"type": "adaptive"}})));
        assert!(anthropic_thinking(&json!({"thinking": {"type": "enabled", "budget_tokens": 1024}})));
        assert!(!anthropic_thinking(&json!({"thinking": {"type": "disabled"}})));
        assert!(!anthropic_thinking(&json!({})));
    }
}
