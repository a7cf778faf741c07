//! A Responses upstream's SSE events to IR events, one event at a time.

use serde_json::Value;

use super::super::error::error_kind_for_code;
use super::super::response::{decode_usage, stop_reason};
use super::super::{SUMMARY_SEPARATOR, flat_tool_name, get_str, get_u64, reasoning_part};
use crate::convert::ir::*;
use crate::protocol::lenient::Parse;
use crate::protocol::plain_json::{Cursor, unescaped};
use crate::protocol::sse::SseEvent;

/// Which output item an event is about: its `output_index`, else its `item_id`.
#[derive(Clone, Copy)]
struct ItemRef<'a> {
    output_index: Option<u64>,
    item_id: Option<&'a str>,
}

impl<'a> ItemRef<'a> {
    fn of(ev: &'a Value) -> Self {
        ItemRef { output_index: get_u64(ev, "output_index"), item_id: get_str(ev, "item_id") }
    }
}

/// The three delta events nearly every event of a stream is.
#[derive(Debug, PartialEq, Eq)]
enum PlainDelta {
    Text { content_index: u64 },
    Arguments,
    Summary { summary_index: u64 },
}

/// A delta event as the API writes it, matched byte for byte instead of parsed:
/// `{"type":T,"sequence_number":N,"item_id":S,"output_index":N`, then `"content_index":N` (text)
/// or `"summary_index":N` (a reasoning summary), `"delta":D`, `"logprobs":[]` (text), and an
/// optional `"obfuscation":S`. S: a string with no escape; D: one without a `\u` escape, returned
/// as written. Anything else is left to the parse.
fn plain_delta(data: &str) -> Option<(PlainDelta, &str, u64, &str)> {
    let mut c = Cursor(data);
    c.literal(r#"{"type":"response."#)?;
    let text = c.literal(r#"output_text.delta""#).is_some();
    let arguments = !text && c.literal(r#"function_call_arguments.delta""#).is_some();
    if !text && !arguments {
        c.literal(r#"reasoning_summary_text.delta""#)?;
    }
    c.literal(r#","sequence_number":"#)?;
    c.digits()?;
    c.literal(r#","item_id":"#)?;
    let item_id = c.plain_string()?;
    c.literal(r#","output_index":"#)?;
    let output_index = c.count()??;
    let kind = if text {
        c.literal(r#","content_index":"#)?;
        PlainDelta::Text { content_index: c.count()?? }
    } else if arguments {
        PlainDelta::Arguments
    } else {
        c.literal(r#","summary_index":"#)?;
        PlainDelta::Summary { summary_index: c.count()?? }
    };
    c.literal(r#","delta":"#)?;
    let delta = c.string_without_unicode_escapes()?;
    if text {
        c.literal(r#","logprobs":[]"#)?;
    }
    if c.literal(r#","obfuscation":"#).is_some() {
        c.plain_string()?;
    }
    c.literal("}")?;
    c.is_done().then_some((kind, item_id, output_index, delta))
}

#[derive(Debug)]
enum DecItem {
    /// A message item; its content parts, each (content_index, IR block index once opened).
    Message {
        parts: Vec<(u64, Option<usize>, bool)>,
    },
    FunctionCall {
        block: usize,
        args_seen: bool,
        open: bool,
    },
    Reasoning {
        block: Option<usize>,
        last_summary: Option<u64>,
        text_seen: bool,
    },
    Other,
}

/// Incremental Responses SSE → IR events.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    started: bool,
    ended: bool,
    next_block: usize,
    /// (output_index, item id, state), in the order the items were added.
    items: Vec<(u64, Option<String>, DecItem)>,
    tool_calls: bool,
    refusal: bool,
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    fn start(&mut self, response: Option<&Value>, out: &mut Vec<StreamEvent>) {
        if self.started {
            return;
        }
        self.started = true;
        let r = response.cloned().unwrap_or(Value::Null);
        out.push(StreamEvent::Start {
            id: get_str(&r, "id").unwrap_or_default().to_owned(),
            model: get_str(&r, "model").unwrap_or_default().to_owned(),
            usage: r.get("usage").map(decode_usage).unwrap_or_default(),
            created: r.get("created_at").and_then(Value::as_f64).filter(|f| *f >= 0.0).map(|f| f as u64),
        });
    }

    fn open_block(&mut self, block: BlockStart, out: &mut Vec<StreamEvent>) -> usize {
        let index = self.next_block;
        self.next_block += 1;
        out.push(StreamEvent::BlockStart { index, block });
        index
    }

    /// Position in `items` of the item an event refers to (by output_index, else item_id).
    fn find(&self, item: ItemRef<'_>) -> Option<usize> {
        if let Some(oi) = item.output_index
            && let Some(p) = self.items.iter().position(|(o, _, _)| *o == oi)
        {
            return Some(p);
        }
        let id = item.item_id?;
        self.items.iter().position(|(_, i, _)| i.as_deref() == Some(id))
    }

    /// Like `find`, but registers an item that was never announced (lenient upstreams).
    fn find_or_add(&mut self, item: ItemRef<'_>, make: fn() -> DecItem) -> usize {
        if let Some(p) = self.find(item) {
            return p;
        }
        let oi = item.output_index.unwrap_or(self.items.len() as u64);
        self.items.push((oi, item.item_id.map(str::to_owned), make()));
        self.items.len() - 1
    }

    fn item_added(&mut self, ev: &Value, out: &mut Vec<StreamEvent>) {
        let Some(item) = ev.get("item") else { return };
        let oi = get_u64(ev, "output_index").unwrap_or(self.items.len() as u64);
        let id = get_str(item, "id").map(str::to_owned);
        let state = match get_str(item, "type") {
            Some("message") => DecItem::Message { parts: Vec::new() },
            Some("function_call") => {
                self.tool_calls = true;
                let name = get_str(item, "name").unwrap_or_default();
                let name = match get_str(item, "namespace").filter(|ns| !ns.is_empty()) {
                    Some(ns) => flat_tool_name(ns, name),
                    None => name.to_owned(),
                };
                let call_id = get_str(item, "call_id").or(id.as_deref()).unwrap_or_default().to_owned();
                let block = self.open_block(BlockStart::ToolUse { id: call_id, name }, out);
                let args = get_str(item, "arguments").unwrap_or_default();
                if !args.is_empty() {
                    out.push(StreamEvent::ToolArgsDelta { index: block, partial_json: args.to_owned() });
                }
                DecItem::FunctionCall { block, args_seen: !args.is_empty(), open: true }
            }
            Some("reasoning") => DecItem::Reasoning { block: None, last_summary: None, text_seen: false },
            _ => DecItem::Other,
        };
        self.items.push((oi, id, state));
    }

    /// A piece of message text for (item, content_index).
    fn text(&mut self, pos: usize, ci: u64, text: &str, out: &mut Vec<StreamEvent>) {
        if text.is_empty() {
            return;
        }
        let next = self.next_block;
        let mut opened = None;
        let mut index = None;
        if let Some((_, _, DecItem::Message { parts })) = self.items.get_mut(pos) {
            match parts.iter_mut().find(|(c, _, _)| *c == ci) {
                Some((_, Some(b), open)) if *open => index = Some(*b),
                Some((_, b @ None, open)) => {
                    *b = Some(next);
                    *open = true;
                    opened = Some(next);
                }
                Some(_) => {}
                None => {
                    parts.push((ci, Some(next), true));
                    opened = Some(next);
                }
            }
        }
        if let Some(b) = opened {
            self.next_block += 1;
            out.push(StreamEvent::BlockStart { index: b, block: BlockStart::Text });
            index = Some(b);
        }
        if let Some(index) = index {
            out.push(StreamEvent::TextDelta { index, text: text.to_owned() });
        }
    }

    /// Whether (item, content_index) already has text.
    fn part_has_text(&self, pos: usize, ci: u64) -> bool {
        matches!(self.items.get(pos), Some((_, _, DecItem::Message { parts }))
            if parts.iter().any(|(c, b, _)| *c == ci && b.is_some()))
    }

    fn close_part(&mut self, pos: usize, ci: u64, out: &mut Vec<StreamEvent>) {
        if let Some((_, _, DecItem::Message { parts })) = self.items.get_mut(pos)
            && let Some((_, Some(b), open)) = parts.iter_mut().find(|(c, _, _)| *c == ci)
            && *open
        {
            *open = false;
            out.push(StreamEvent::BlockStop { index: *b });
        }
    }

    fn thinking(&mut self, pos: usize, si: u64, text: &str, out: &mut Vec<StreamEvent>) {
        if text.is_empty() {
            return;
        }
        let next = self.next_block;
        let mut open_new = false;
        let mut emit = Vec::new();
        if let Some((_, _, DecItem::Reasoning { block, last_summary, text_seen })) = self.items.get_mut(pos) {
            let index = match block {
                Some(b) => *b,
                None => {
                    *block = Some(next);
                    open_new = true;
                    next
                }
            };
            if *text_seen && *last_summary != Some(si) {
                emit.push(SUMMARY_SEPARATOR.to_owned());
            }
            *last_summary = Some(si);
            *text_seen = true;
            emit.push(text.to_owned());
            if open_new {
                self.next_block += 1;
                out.push(StreamEvent::BlockStart { index, block: BlockStart::Thinking });
            }
            for t in emit {
                out.push(StreamEvent::ThinkingDelta { index, text: t });
            }
        }
    }

    /// Whether a reasoning item already showed text for summary `si`.
    fn summary_has_text(&self, pos: usize, si: u64) -> bool {
        matches!(self.items.get(pos), Some((_, _, DecItem::Reasoning { last_summary, text_seen, .. }))
            if *text_seen && *last_summary >= Some(si))
    }

    fn item_done(&mut self, pos: usize, item: Option<&Value>, out: &mut Vec<StreamEvent>) {
        let Some((_, _, state)) = self.items.get(pos) else { return };
        match state {
            DecItem::Message { .. } => {
                // Content that never streamed (no deltas) comes from the finished item.
                if let Some(content) = item.and_then(|i| i.get("content")).and_then(Value::as_array) {
                    for (ci, c) in content.iter().enumerate() {
                        let ci = ci as u64;
                        if self.part_has_text(pos, ci) {
                            continue;
                        }
                        let text = match get_str(c, "type") {
                            Some("refusal") => {
                                self.refusal = true;
                                get_str(c, "refusal")
                            }
                            _ => get_str(c, "text"),
                        };
                        self.text(pos, ci, text.unwrap_or_default(), out);
                    }
                }
                let cis: Vec<u64> = match self.items.get(pos) {
                    Some((_, _, DecItem::Message { parts })) => parts.iter().map(|(c, _, _)| *c).collect(),
                    _ => Vec::new(),
                };
                for ci in cis {
                    self.close_part(pos, ci, out);
                }
            }
            DecItem::FunctionCall { block, args_seen, open } => {
                let (block, args_seen, open) = (*block, *args_seen, *open);
                if !open {
                    return;
                }
                if !args_seen {
                    let args = item.and_then(|i| get_str(i, "arguments")).unwrap_or_default();
                    if !args.is_empty() {
                        out.push(StreamEvent::ToolArgsDelta { index: block, partial_json: args.to_owned() });
                    }
                }
                out.push(StreamEvent::BlockStop { index: block });
                if let Some((_, _, DecItem::FunctionCall { open, args_seen, .. })) = self.items.get_mut(pos) {
                    *open = false;
                    *args_seen = true;
                }
            }
            DecItem::Reasoning { text_seen, .. } => {
                let text_seen = *text_seen;
                let (summary, signature) = match item.map(reasoning_part) {
                    Some(Part::ReasoningItem { id, summary, encrypted_content }) => {
                        (summary, encrypted_content.map(|enc| reasoning_signature(id.as_deref(), &enc)))
                    }
                    _ => (Vec::new(), None),
                };
                if !text_seen {
                    for (si, s) in summary.iter().enumerate() {
                        self.thinking(pos, si as u64, s, out);
                    }
                }
                // The encrypted reasoning (asked for with `include`) arrives with the finished
                // item: it ends the thinking block as its signature, opening one if the item
                // showed no summary text.
                let next = self.next_block;
                if let Some((_, _, DecItem::Reasoning { block, .. })) = self.items.get_mut(pos) {
                    if let Some(signature) = signature {
                        let index = match *block {
                            Some(b) => b,
                            None => {
                                self.next_block += 1;
                                out.push(StreamEvent::BlockStart { index: next, block: BlockStart::Thinking });
                                next
                            }
                        };
                        *block = Some(index);
                        out.push(StreamEvent::SignatureDelta { index, signature });
                    }
                    if let Some(b) = block.take() {
                        out.push(StreamEvent::BlockStop { index: b });
                    }
                }
            }
            DecItem::Other => {}
        }
    }

    fn close_all(&mut self, out: &mut Vec<StreamEvent>) {
        for pos in 0..self.items.len() {
            self.item_done(pos, None, out);
        }
    }

    /// A text delta of a message item's content part.
    fn text_delta(&mut self, item: ItemRef<'_>, ci: u64, delta: &str, out: &mut Vec<StreamEvent>) {
        let pos = self.find_or_add(item, || DecItem::Message { parts: Vec::new() });
        self.text(pos, ci, delta, out);
    }

    /// A delta of a function call's arguments (an item announced and still open only).
    fn arguments_delta(&mut self, item: ItemRef<'_>, delta: &str, out: &mut Vec<StreamEvent>) {
        if let Some(pos) = self.find(item)
            && let Some((_, _, DecItem::FunctionCall { block, args_seen, open: true })) = self.items.get_mut(pos)
            && !delta.is_empty()
        {
            *args_seen = true;
            out.push(StreamEvent::ToolArgsDelta { index: *block, partial_json: delta.to_owned() });
        }
    }

    /// A delta of a reasoning item's summary (or of its text).
    fn summary_delta(&mut self, item: ItemRef<'_>, si: u64, delta: &str, out: &mut Vec<StreamEvent>) {
        let pos = self.find_or_add(item, || DecItem::Reasoning { block: None, last_summary: None, text_seen: false });
        self.thinking(pos, si, delta, out);
    }

    /// One upstream SSE event in, zero or more IR events out.
    pub fn decode(&mut self, event: &SseEvent<'_>, out: &mut Vec<StreamEvent>) {
        self.decode_with(event, out, Parse::Direct);
    }

    /// [`decode`](Self::decode); `Parse::ViaValue` (the tests') parses every event.
    fn decode_with(&mut self, event: &SseEvent<'_>, out: &mut Vec<StreamEvent>, parse: Parse) {
        if self.ended {
            return;
        }
        if parse == Parse::Direct
            && let Some((kind, item_id, output_index, delta)) = plain_delta(event.data)
        {
            self.start(None, out);
            let item = ItemRef { output_index: Some(output_index), item_id: Some(item_id) };
            let delta = unescaped(delta);
            match kind {
                PlainDelta::Text { content_index } => self.text_delta(item, content_index, &delta, out),
                PlainDelta::Arguments => self.arguments_delta(item, &delta, out),
                PlainDelta::Summary { summary_index } => self.summary_delta(item, summary_index, &delta, out),
            }
            return;
        }
        let Ok(ev) = serde_json::from_str::<Value>(event.data) else {
            return;
        };
        let ty = get_str(&ev, "type").or(event.event).unwrap_or_default().to_owned();
        if ty == "error" {
            let err = ev.get("error").filter(|e| e.is_object()).unwrap_or(&ev);
            let code = get_str(err, "code").or_else(|| get_str(err, "type"));
            let message = get_str(err, "message").unwrap_or("the upstream reported an error").to_owned();
            out.push(StreamEvent::Error { kind: error_kind_for_code(code), message });
            self.ended = true;
            return;
        }
        self.start(ev.get("response"), out);
        match ty.as_str() {
            "response.output_item.added" => self.item_added(&ev, out),
            "response.content_part.added"
                // Opened lazily with the first text, so that empty parts make no empty blocks.
                if get_str(ev.get("part").unwrap_or(&Value::Null), "type") == Some("refusal") => {
                    self.refusal = true;
                }
            "response.output_text.delta" | "response.refusal.delta" => {
                if ty == "response.refusal.delta" {
                    self.refusal = true;
                }
                let ci = get_u64(&ev, "content_index").unwrap_or(0);
                self.text_delta(ItemRef::of(&ev), ci, get_str(&ev, "delta").unwrap_or_default(), out);
            }
            "response.output_text.done" | "response.refusal.done" => {
                let pos = self.find_or_add(ItemRef::of(&ev), || DecItem::Message { parts: Vec::new() });
                let ci = get_u64(&ev, "content_index").unwrap_or(0);
                if !self.part_has_text(pos, ci) {
                    let text = get_str(&ev, "text").or_else(|| get_str(&ev, "refusal")).unwrap_or_default().to_owned();
                    self.text(pos, ci, &text, out);
                }
            }
            "response.content_part.done" => {
                if let Some(pos) = self.find(ItemRef::of(&ev)) {
                    let ci = get_u64(&ev, "content_index").unwrap_or(0);
                    if !self.part_has_text(pos, ci) {
                        let part = ev.get("part").cloned().unwrap_or(Value::Null);
                        let text = get_str(&part, "text").or_else(|| get_str(&part, "refusal")).unwrap_or_default().to_owned();
                        self.text(pos, ci, &text, out);
                    }
                    self.close_part(pos, ci, out);
                }
            }
            "response.function_call_arguments.delta" => {
                self.arguments_delta(ItemRef::of(&ev), get_str(&ev, "delta").unwrap_or_default(), out);
            }
            "response.function_call_arguments.done" => {
                if let Some(pos) = self.find(ItemRef::of(&ev))
                    && let Some((_, _, DecItem::FunctionCall { block, args_seen, open: true })) = self.items.get_mut(pos) {
                        let args = get_str(&ev, "arguments").unwrap_or_default();
                        if !*args_seen && !args.is_empty() {
                            *args_seen = true;
                            out.push(StreamEvent::ToolArgsDelta { index: *block, partial_json: args.to_owned() });
                        }
                    }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let si = get_u64(&ev, "summary_index").or_else(|| get_u64(&ev, "content_index")).unwrap_or(0);
                self.summary_delta(ItemRef::of(&ev), si, get_str(&ev, "delta").unwrap_or_default(), out);
            }
            "response.reasoning_summary_text.done" | "response.reasoning_text.done" => {
                if let Some(pos) = self.find(ItemRef::of(&ev)) {
                    let si = get_u64(&ev, "summary_index").or_else(|| get_u64(&ev, "content_index")).unwrap_or(0);
                    if !self.summary_has_text(pos, si) {
                        let text = get_str(&ev, "text").unwrap_or_default().to_owned();
                        self.thinking(pos, si, &text, out);
                    }
                }
            }
            "response.output_item.done" => {
                let pos = match self.find(ItemRef::of(&ev)) {
                    Some(p) => Some(p),
                    None => {
                        // A finished item that was never announced.
                        self.item_added(&ev, out);
                        self.items.len().checked_sub(1)
                    }
                };
                if let Some(pos) = pos {
                    if let Some((_, _, DecItem::FunctionCall { .. })) = self.items.get(pos) {
                        self.tool_calls = true;
                    }
                    self.item_done(pos, ev.get("item"), out);
                }
            }
            "response.completed" | "response.incomplete" => {
                self.close_all(out);
                let r = ev.get("response").cloned().unwrap_or(Value::Null);
                let status = get_str(&r, "status")
                    .or(if ty == "response.incomplete" { Some("incomplete") } else { Some("completed") });
                let reason = r.get("incomplete_details").and_then(|d| get_str(d, "reason"));
                out.push(StreamEvent::Finish {
                    stop_reason: Some(stop_reason(status, reason, self.tool_calls, self.refusal)),
                    stop_sequence: None,
                    usage: r.get("usage").map(decode_usage).unwrap_or_default(),
                });
                out.push(StreamEvent::End);
                self.ended = true;
            }
            "response.failed" => {
                let err = ev.get("response").and_then(|r| r.get("error")).cloned().unwrap_or(Value::Null);
                let code = get_str(&err, "code").or_else(|| get_str(&err, "type"));
                let message = get_str(&err, "message").unwrap_or("the upstream response failed").to_owned();
                out.push(StreamEvent::Error { kind: error_kind_for_code(code), message });
                self.ended = true;
            }
            _ => {}
        }
    }

    /// EOF. A Responses stream is complete only with its terminal event, which already produced
    /// `End`: nothing is invented here.
    pub fn finish(&mut self, _out: &mut Vec<StreamEvent>) {}
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::convert::responses::tests::*;
    use crate::convert::testkit::decoded_with;
    use crate::protocol::errors::ErrorKind;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    /// Events of a stream: its items announced and one done, and deltas in the API's shape or
    /// a step away from it (a space, another item, a number that is no index, a `\u` escape,
    /// an escaped obfuscation, a member more).
    fn stream_event() -> impl Strategy<Value = String> {
        use crate::protocol::plain_json::strategies::{count, one_of, string};
        let delta = (
            0..3usize,
            prop_oneof![4 => (0u64..100).prop_map(|n| n.to_string()), 1 => count()],
            prop_oneof![3 => prop::sample::select(vec![r#""msg_1""#, r#""fc_1""#, r#""rs_1""#]).prop_map(str::to_owned), 1 => string()],
            prop_oneof![4 => (0u64..3).prop_map(|n| n.to_string()), 1 => count()],
            prop_oneof![4 => (0u64..2).prop_map(|n| n.to_string()), 1 => count()],
            string(),
            one_of(&["", r#","obfuscation":"ab""#, r#","obfuscation":"a\"b""#]),
            one_of(&["}", " }", r#","x":1}"#, "}x"]),
        )
            .prop_map(|(kind, seq, id, oi, index, delta, obfuscation, end)| {
                let head = |ty: &str| format!(r#"{{"type":"response.{ty}","sequence_number":{seq},"item_id":{id},"output_index":{oi}"#);
                match kind {
                    0 => format!(r#"{},"content_index":{index},"delta":{delta},"logprobs":[]{obfuscation}{end}"#, head("output_text.delta")),
                    1 => format!(r#"{},"delta":{delta}{obfuscation}{end}"#, head("function_call_arguments.delta")),
                    _ => format!(r#"{},"summary_index":{index},"delta":{delta}{obfuscation}{end}"#, head("reasoning_summary_text.delta")),
                }
            });
        let item = prop::sample::select(vec![
            r#"{"type":"response.output_item.added","output_index":0,"item":{"type":"message","id":"msg_1","role":"assistant","content":[]}}"#,
            r#"{"type":"response.output_item.added","output_index":1,"item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"f","arguments":""}}"#,
            r#"{"type":"response.output_item.added","output_index":2,"item":{"type":"reasoning","id":"rs_1","summary":[]}}"#,
            r#"{"type":"response.output_item.done","output_index":1,"item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"f","arguments":"{}"}}"#,
        ])
        .prop_map(str::to_owned);
        prop_oneof![4 => delta, 1 => item]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]
        /// A delta matched in the API's shape decodes as its parse does; so does one a step
        /// away from that shape, which is parsed.
        #[test]
        fn a_matched_delta_decodes_as_its_parse(events in prop::collection::vec(stream_event(), 1..10)) {
            let decoded = |parse| decoded_with(&events, None, parse, StreamDecoder::decode_with);
            prop_assert_eq!(decoded(Parse::Direct), decoded(Parse::ViaValue));
        }
    }

    #[test]
    fn deltas_as_the_api_writes_them_are_matched() {
        let text = r#"{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi\n","logprobs":[],"obfuscation":"x2"}"#;
        assert_eq!(plain_delta(text), Some((PlainDelta::Text { content_index: 0 }, "msg_1", 0, r#"Hi\n"#)));
        let args = r#"{"type":"response.function_call_arguments.delta","sequence_number":9,"item_id":"fc_1","output_index":1,"delta":"{\"a\""}"#;
        assert_eq!(plain_delta(args), Some((PlainDelta::Arguments, "fc_1", 1, r#"{\"a\""#)));
        let summary = r#"{"type":"response.reasoning_summary_text.delta","sequence_number":2,"item_id":"rs_1","output_index":0,"summary_index":1,"delta":"Plan"}"#;
        assert_eq!(plain_delta(summary), Some((PlainDelta::Summary { summary_index: 1 }, "rs_1", 0, "Plan")));
        assert_eq!(plain_delta(&text.replace(",\"logprobs\":[]", "")), None);
    }

    /// Two function calls (one namespaced), arguments in several deltas.
    fn tools_transcript() -> String {
        let mut ev = created("resp_1");
        ev.extend([
            json!({"type": "response.output_item.added", "output_index": 0, "item": {"id": "fc_1", "type": "function_call", "status": "in_progress", "arguments": "", "call_id": "call_A", "name": "get_weather"}}),
            json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 0, "delta": "{\"city\":"}),
            json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 0, "delta": "\"Paris\"}"}),
            json!({"type": "response.function_call_arguments.done", "item_id": "fc_1", "output_index": 0, "arguments": "{\"city\":\"Paris\"}"}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": {"id": "fc_1", "type": "function_call", "status": "completed", "arguments": "{\"city\":\"Paris\"}", "call_id": "call_A", "name": "get_weather"}}),
            json!({"type": "response.output_item.added", "output_index": 1, "item": {"id": "fc_2", "type": "function_call", "status": "in_progress", "arguments": "", "call_id": "call_B", "name": "spawn_agent", "namespace": "multi_agent_v1"}}),
            json!({"type": "response.function_call_arguments.delta", "item_id": "fc_2", "output_index": 1, "delta": ""}),
            json!({"type": "response.function_call_arguments.delta", "item_id": "fc_2", "output_index": 1, "delta": "{\"task\":\"é 😀\"}"}),
            json!({"type": "response.function_call_arguments.done", "item_id": "fc_2", "output_index": 1, "arguments": "{\"task\":\"é 😀\"}"}),
            json!({"type": "response.output_item.done", "output_index": 1, "item": {"id": "fc_2", "type": "function_call", "status": "completed", "arguments": "{\"task\":\"é 😀\"}", "call_id": "call_B", "name": "spawn_agent", "namespace": "multi_agent_v1"}}),
            completed("completed", Value::Null),
        ]);
        sse(&ev)
    }

    /// Reasoning with two summary parts, then text; cut by max_output_tokens.
    fn reasoning_transcript() -> String {
        let mut ev = created("resp_2");
        ev.extend([
            json!({"type": "response.output_item.added", "output_index": 0, "item": {"id": "rs_1", "type": "reasoning", "summary": []}}),
            json!({"type": "response.reasoning_summary_part.added", "item_id": "rs_1", "output_index": 0, "summary_index": 0, "part": {"type": "summary_text", "text": ""}}),
            json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": 0, "summary_index": 0, "delta": "**Planning**"}),
            json!({"type": "response.reasoning_summary_text.done", "item_id": "rs_1", "output_index": 0, "summary_index": 0, "text": "**Planning**"}),
            json!({"type": "response.reasoning_summary_part.done", "item_id": "rs_1", "output_index": 0, "summary_index": 0, "part": {"type": "summary_text", "text": "**Planning**"}}),
            json!({"type": "response.reasoning_summary_part.added", "item_id": "rs_1", "output_index": 0, "summary_index": 1, "part": {"type": "summary_text", "text": ""}}),
            json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": 0, "summary_index": 1, "delta": "Answer briefly."}),
            json!({"type": "response.reasoning_summary_part.done", "item_id": "rs_1", "output_index": 0, "summary_index": 1, "part": {"type": "summary_text", "text": "Answer briefly."}}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "**Planning**"}, {"type": "summary_text", "text": "Answer briefly."}], "encrypted_content": "gAAAA"}}),
            json!({"type": "response.output_item.added", "output_index": 1, "item": {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant", "content": []}}),
            json!({"type": "response.content_part.added", "item_id": "msg_1", "output_index": 1, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
            json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 1, "content_index": 0, "delta": "The answer", "logprobs": []}),
            json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 1, "content_index": 0, "delta": "", "logprobs": []}),
            json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 1, "content_index": 0, "delta": " is", "logprobs": []}),
            json!({"type": "response.output_text.done", "item_id": "msg_1", "output_index": 1, "content_index": 0, "text": "The answer is", "logprobs": []}),
            json!({"type": "response.content_part.done", "item_id": "msg_1", "output_index": 1, "content_index": 0, "part": {"type": "output_text", "text": "The answer is", "annotations": []}}),
            json!({"type": "response.output_item.done", "output_index": 1, "item": {"id": "msg_1", "type": "message", "status": "incomplete", "role": "assistant", "content": [{"type": "output_text", "text": "The answer is", "annotations": []}]}}),
            completed("incomplete", json!({"reason": "max_output_tokens"})),
        ]);
        sse(&ev)
    }

    fn error_transcripts() -> (String, String) {
        let mut a = created("resp_3");
        a.push(json!({"type": "error", "code": "rate_limit_exceeded", "message": "Rate limit reached. Please try again in 20s.", "param": null}));
        let mut b = created("resp_4");
        b.extend([
            json!({"type": "response.output_item.added", "output_index": 0, "item": {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant", "content": []}}),
            json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "Par"}),
            json!({"type": "response.failed", "response": {"id": "resp_4", "status": "failed", "error": {"code": "server_error", "message": "The server had an error."}}}),
        ]);
        (sse(&a), sse(&b))
    }

    #[test]
    fn stream_decode_text() {
        let evs = decode_stream(crate::protocol::sse::tests::RESPONSES);
        assert_eq!(
            evs,
            vec![
                StreamEvent::Start {
                    id: "resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654".into(),
                    model: "gpt-4.1-2025-04-14".into(),
                    usage: Usage::default(),
                    created: Some(1741290958),
                },
                StreamEvent::BlockStart { index: 0, block: BlockStart::Text },
                StreamEvent::TextDelta { index: 0, text: "Hi".into() },
                StreamEvent::TextDelta { index: 0, text: " th\u{e9}re \u{1F30D}".into() },
                StreamEvent::BlockStop { index: 0 },
                StreamEvent::Finish {
                    stop_reason: Some(StopReason::EndTurn),
                    stop_sequence: None,
                    usage: Usage {
                        input: Some(37),
                        output: Some(11),
                        cache_read: None,
                        cache_write: None,
                        reasoning: Some(0)
                    },
                },
                StreamEvent::End,
            ]
        );
    }

    #[test]
    fn encrypted_reasoning_without_a_summary_still_makes_a_signed_block() {
        let mut ev = created("resp_3");
        ev.extend([
            json!({"type": "response.output_item.added", "output_index": 0, "item": {"id": "rs_2", "type": "reasoning", "summary": []}}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": {"id": "rs_2", "type": "reasoning", "summary": [], "encrypted_content": "gAAAAquiet"}}),
            json!({"type": "response.output_item.added", "output_index": 1, "item": {"id": "msg_1", "type": "message", "role": "assistant", "content": []}}),
            json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 1, "content_index": 0, "delta": "Hi"}),
            json!({"type": "response.output_item.done", "output_index": 1, "item": {"id": "msg_1", "type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hi"}]}}),
            completed("completed", Value::Null),
        ]);
        let t = sse(&ev);
        let events = decode_stream(&t);
        let at = events
            .iter()
            .position(|e| matches!(e, StreamEvent::BlockStart { block: BlockStart::Thinking, .. }))
            .unwrap();
        assert_eq!(
            events[at..at + 3],
            [
                StreamEvent::BlockStart { index: 0, block: BlockStart::Thinking },
                StreamEvent::SignatureDelta { index: 0, signature: reasoning_signature(Some("rs_2"), "gAAAAquiet") },
                StreamEvent::BlockStop { index: 0 },
            ]
        );
        assert!(events.contains(&StreamEvent::TextDelta { index: 1, text: "Hi".into() }), "{events:#?}");
    }

    #[test]
    fn stream_decode_tools_reasoning_errors() {
        let tools = decode_stream(&tools_transcript());
        assert!(tools.contains(&StreamEvent::BlockStart {
            index: 1,
            block: BlockStart::ToolUse { id: "call_B".into(), name: "multi_agent_v1__spawn_agent".into() }
        }));
        assert!(matches!(tools[tools.len() - 2], StreamEvent::Finish { stop_reason: Some(StopReason::ToolUse), .. }));
        insta::assert_snapshot!("stream_decode_tools", format!("{tools:#?}"));

        let reasoning = decode_stream(&reasoning_transcript());
        assert!(reasoning.contains(&StreamEvent::ThinkingDelta { index: 0, text: "\n\n".into() }));
        assert!(matches!(
            reasoning[reasoning.len() - 2],
            StreamEvent::Finish {
                stop_reason: Some(StopReason::MaxTokens),
                usage: Usage { input: Some(952), cache_read: Some(2048), .. },
                ..
            }
        ));
        insta::assert_snapshot!("stream_decode_reasoning", format!("{reasoning:#?}"));
        // The encrypted reasoning ends the thinking block as its signature, for the client to
        // send back next turn.
        assert!(reasoning.contains(&StreamEvent::SignatureDelta {
            index: 0,
            signature: reasoning_signature(Some("rs_1"), "gAAAA")
        }));

        let (a, b) = error_transcripts();
        let a = decode_stream(&a);
        assert_eq!(
            a.last(),
            Some(&StreamEvent::Error {
                kind: ErrorKind::RateLimited,
                message: "Rate limit reached. Please try again in 20s.".into()
            })
        );
        let b = decode_stream(&b);
        assert_eq!(
            b.last(),
            Some(&StreamEvent::Error { kind: ErrorKind::Api, message: "The server had an error.".into() })
        );
        assert!(!b.contains(&StreamEvent::End));
        insta::assert_snapshot!("stream_decode_errors", format!("{a:#?}\n{b:#?}"));
    }

    #[test]
    fn stream_decode_without_deltas_uses_done_items() {
        // Some Responses-compatible servers send only the finished items.
        let mut ev = created("resp_5");
        ev.extend([
            json!({"type": "response.output_item.done", "output_index": 0, "item": {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "Think."}]}}),
            json!({"type": "response.output_item.done", "output_index": 1, "item": {"id": "msg_1", "type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]}}),
            json!({"type": "response.output_item.done", "output_index": 2, "item": {"id": "fc_1", "type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"a\":1}"}}),
            completed("completed", Value::Null),
        ]);
        let evs = decode_stream(&sse(&ev));
        let agg = aggregate(&evs);
        assert_eq!(agg.thinking, ["Think."]);
        assert_eq!(agg.texts, ["Done."]);
        assert_eq!(agg.tools, [("c1".to_owned(), "f".to_owned(), "{\"a\":1}".to_owned())]);
        assert_eq!(agg.stop, Some(StopReason::ToolUse));
    }

    #[test]
    fn stream_decode_lenient_shapes() {
        // Deltas for items that were never announced, and the nested `error` event shape.
        let ev = vec![
            json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_9", "output_index": 0, "summary_index": 0, "delta": "Hm"}),
            json!({"type": "response.output_text.delta", "item_id": "msg_9", "output_index": 1, "content_index": 0, "delta": "Yes"}),
            json!({"type": "error", "error": {"type": "server_error", "code": "server_is_overloaded", "message": "busy"}}),
        ];
        let evs = decode_stream(&sse(&ev));
        assert_eq!(
            evs[1..],
            [
                StreamEvent::BlockStart { index: 0, block: BlockStart::Thinking },
                StreamEvent::ThinkingDelta { index: 0, text: "Hm".into() },
                StreamEvent::BlockStart { index: 1, block: BlockStart::Text },
                StreamEvent::TextDelta { index: 1, text: "Yes".into() },
                StreamEvent::Error { kind: ErrorKind::Overloaded, message: "busy".into() },
            ]
        );
    }

    #[test]
    fn stream_decode_eof_without_terminal_event_invents_nothing() {
        let t = tools_transcript();
        let cut = t.find("event: response.completed").unwrap();
        let evs = decode_stream(&t[..cut]);
        assert!(!evs.iter().any(|e| matches!(e, StreamEvent::End | StreamEvent::Finish { .. })));
    }

    fn transcripts() -> Vec<(&'static str, String)> {
        let (a, b) = error_transcripts();
        vec![
            ("text", crate::protocol::sse::tests::RESPONSES.to_owned()),
            ("tools", tools_transcript()),
            ("reasoning", reasoning_transcript()),
            ("error", a),
            ("failed", b),
        ]
    }

    #[test]
    fn stream_decode_split_at_every_byte() {
        for (name, t) in transcripts() {
            let whole = decode_stream(&t);
            let bytes = t.as_bytes();
            for k in 0..=bytes.len() {
                assert_eq!(decode_stream_chunks(&[&bytes[..k], &bytes[k..]]), whole, "{name} split at {k}");
            }
            // CRLF line endings and keep-alive comments change nothing.
            let crlf = format!(": keep-alive\n\n{}", t.replace('\n', "\r\n"));
            assert_eq!(decode_stream(&crlf), whole, "{name} crlf");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn stream_decode_random_splits(cuts in proptest::collection::vec(0usize..10_000, 0..12), which in 0usize..5) {
            let (_, t) = transcripts().swap_remove(which);
            let bytes = t.as_bytes();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut prev = 0;
            for c in cuts {
                chunks.push(&bytes[prev..c]);
                prev = c;
            }
            chunks.push(&bytes[prev..]);
            prop_assert_eq!(decode_stream_chunks(&chunks), decode_stream(&t));
        }
    }
}
