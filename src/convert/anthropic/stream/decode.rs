//! An Anthropic upstream's SSE events to IR events, one event at a time.

use serde_json::Value;

use super::super::error::error_kind_from_type;
use super::super::response::{parse_usage, stop_reason_from_wire};
use crate::convert::ir::*;
use crate::protocol::errors::ErrorKind;
use crate::protocol::lenient::{Parse, get_str};
use crate::protocol::plain_json::{Cursor, unescaped};
use crate::protocol::sse::SseEvent;

/// A `content_block_delta` as the API writes it, nearly every event of a stream, matched byte
/// for byte instead of parsed: `{"type":"content_block_delta","index":N,"delta":{"type":D,M:T}}`
/// with the delta type D naming its member M, T a string without a `\u` escape. Returns the
/// block's index, the delta type and T as written. Anything else is left to the parse.
fn plain_block_delta(data: &str) -> Option<(u64, &'static str, &str)> {
    const DELTAS: [(&str, &str); 4] = [
        ("text_delta", r#"text_delta","text":"#),
        ("thinking_delta", r#"thinking_delta","thinking":"#),
        ("input_json_delta", r#"input_json_delta","partial_json":"#),
        ("signature_delta", r#"signature_delta","signature":"#),
    ];
    let mut c = Cursor(data);
    c.literal(r#"{"type":"content_block_delta","index":"#)?;
    let index = c.count()??;
    c.literal(r#","delta":{"type":""#)?;
    let (delta_type, _) = DELTAS.into_iter().find(|(_, head)| c.literal(head).is_some())?;
    let text = c.string_without_unicode_escapes()?;
    c.literal("}}")?;
    c.is_done().then_some((index, delta_type, text))
}

/// One upstream content block: its upstream index and, unless it is a block the IR cannot
/// carry (server-tool blocks), its IR index.
#[derive(Debug, Clone, Copy)]
struct UpBlock {
    upstream: u64,
    ir: Option<usize>,
    open: bool,
}

/// Incremental Anthropic stream decoder.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    started: bool,
    finished: bool,
    ended: bool,
    blocks: Vec<UpBlock>,
    next_index: usize,
    usage: Usage,
    stop_reason: Option<StopReason>,
    stop_sequence: Option<String>,
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    fn ensure_started(&mut self, out: &mut Vec<StreamEvent>) {
        if !self.started {
            self.started = true;
            out.push(StreamEvent::Start {
                id: String::new(),
                model: String::new(),
                usage: Usage::default(),
                created: None,
            });
        }
    }

    fn open_block(&mut self, upstream: u64, block: Option<BlockStart>, out: &mut Vec<StreamEvent>) -> Option<usize> {
        // Anthropic sends one block at a time; a relay that forgets a `content_block_stop` gets
        // it here, so the IR keeps one block open at a time.
        self.close_all(out);
        let ir = block.map(|b| {
            let index = self.next_index;
            self.next_index += 1;
            out.push(StreamEvent::BlockStart { index, block: b });
            index
        });
        self.blocks.push(UpBlock { upstream, ir, open: true });
        ir
    }

    fn lookup(&self, upstream: u64) -> Option<&UpBlock> {
        self.blocks.iter().rev().find(|b| b.upstream == upstream)
    }

    fn close_upstream(&mut self, upstream: u64, out: &mut Vec<StreamEvent>) {
        if let Some(b) = self.blocks.iter_mut().rev().find(|b| b.upstream == upstream && b.open) {
            b.open = false;
            if let Some(index) = b.ir {
                out.push(StreamEvent::BlockStop { index });
            }
        }
    }

    fn close_all(&mut self, out: &mut Vec<StreamEvent>) {
        for b in &mut self.blocks {
            if b.open {
                b.open = false;
                if let Some(index) = b.ir {
                    out.push(StreamEvent::BlockStop { index });
                }
            }
        }
    }

    fn emit_finish(&mut self, out: &mut Vec<StreamEvent>) {
        if !self.finished {
            self.finished = true;
            self.close_all(out);
            out.push(StreamEvent::Finish {
                stop_reason: self.stop_reason,
                stop_sequence: self.stop_sequence.clone(),
                usage: self.usage,
            });
        }
    }

    /// A `content_block_delta` (begun already): `text` is the member its type names (empty when
    /// absent).
    fn block_delta(&mut self, upstream: u64, delta_type: &str, text: &str, out: &mut Vec<StreamEvent>) {
        let index = match self.lookup(upstream) {
            Some(b) if b.open => match b.ir {
                Some(i) => i,
                None => return,
            },
            // A delta without a start (tolerated from relays): open the block it implies.
            _ => match delta_type {
                "text_delta" => match self.open_block(upstream, Some(BlockStart::Text), out) {
                    Some(i) => i,
                    None => return,
                },
                "thinking_delta" => match self.open_block(upstream, Some(BlockStart::Thinking), out) {
                    Some(i) => i,
                    None => return,
                },
                _ => return,
            },
        };
        match delta_type {
            _ if text.is_empty() => {}
            "text_delta" => out.push(StreamEvent::TextDelta { index, text: text.to_owned() }),
            "thinking_delta" => out.push(StreamEvent::ThinkingDelta { index, text: text.to_owned() }),
            "signature_delta" => out.push(StreamEvent::SignatureDelta { index, signature: text.to_owned() }),
            "input_json_delta" => out.push(StreamEvent::ToolArgsDelta { index, partial_json: text.to_owned() }),
            _ => {}
        }
    }

    pub fn decode(&mut self, event: &SseEvent<'_>, out: &mut Vec<StreamEvent>) {
        self.decode_with(event, out, Parse::Direct);
    }

    /// [`decode`](Self::decode); `Parse::ViaValue` (the tests') parses every event.
    fn decode_with(&mut self, event: &SseEvent<'_>, out: &mut Vec<StreamEvent>, parse: Parse) {
        if self.ended {
            return;
        }
        if parse == Parse::Direct
            && let Some((upstream, delta_type, text)) = plain_block_delta(event.data)
        {
            self.ensure_started(out);
            self.block_delta(upstream, delta_type, &unescaped(text), out);
            return;
        }
        let Ok(Value::Object(data)) = serde_json::from_str::<Value>(event.data) else { return };
        let ty = get_str(&data, "type").or(event.event).unwrap_or_default();
        match ty {
            "message_start" => {
                if self.started {
                    return;
                }
                self.started = true;
                let msg = data.get("message").and_then(Value::as_object);
                let usage = parse_usage(msg.and_then(|m| m.get("usage")));
                self.usage.merge(&usage);
                out.push(StreamEvent::Start {
                    id: msg.and_then(|m| get_str(m, "id")).unwrap_or_default().to_string(),
                    model: msg.and_then(|m| get_str(m, "model")).unwrap_or_default().to_string(),
                    usage,
                    created: None,
                });
            }
            "content_block_start" => {
                self.ensure_started(out);
                let upstream = data.get("index").and_then(Value::as_u64).unwrap_or(0);
                let cb = data.get("content_block").and_then(Value::as_object);
                let cb_ty = cb.and_then(|c| get_str(c, "type")).unwrap_or_default();
                let cb_str = |k: &str| cb.and_then(|c| get_str(c, k)).unwrap_or_default().to_string();
                match cb_ty {
                    "text" => {
                        let text = cb_str("text");
                        if let Some(index) = self.open_block(upstream, Some(BlockStart::Text), out)
                            && !text.is_empty()
                        {
                            out.push(StreamEvent::TextDelta { index, text });
                        }
                    }
                    "thinking" => {
                        let (text, sig) = (cb_str("thinking"), cb_str("signature"));
                        if let Some(index) = self.open_block(upstream, Some(BlockStart::Thinking), out) {
                            if !text.is_empty() {
                                out.push(StreamEvent::ThinkingDelta { index, text });
                            }
                            if !sig.is_empty() {
                                out.push(StreamEvent::SignatureDelta { index, signature: sig });
                            }
                        }
                    }
                    "redacted_thinking" => {
                        let data = cb_str("data");
                        self.open_block(upstream, Some(BlockStart::RedactedThinking { data }), out);
                    }
                    "tool_use" => {
                        let (id, name) = (cb_str("id"), cb_str("name"));
                        // Anthropic starts with `input: {}` and streams the arguments; some
                        // relays put the whole input here instead.
                        let input =
                            cb.and_then(|c| c.get("input")).and_then(Value::as_object).filter(|o| !o.is_empty());
                        let partial_json = input.map(|o| Value::Object(o.clone()).to_string());
                        if let Some(index) = self.open_block(upstream, Some(BlockStart::ToolUse { id, name }), out)
                            && let Some(partial_json) = partial_json
                        {
                            out.push(StreamEvent::ToolArgsDelta { index, partial_json });
                        }
                    }
                    // Server-tool blocks and unknown kinds: no IR form, their deltas are ignored.
                    _ => {
                        self.open_block(upstream, None, out);
                    }
                }
            }
            "content_block_delta" => {
                self.ensure_started(out);
                let upstream = data.get("index").and_then(Value::as_u64).unwrap_or(0);
                let Some(delta) = data.get("delta").and_then(Value::as_object) else { return };
                let delta_type = get_str(delta, "type").unwrap_or_default();
                let member = match delta_type {
                    "text_delta" => "text",
                    "thinking_delta" => "thinking",
                    "signature_delta" => "signature",
                    "input_json_delta" => "partial_json",
                    _ => "",
                };
                self.block_delta(upstream, delta_type, get_str(delta, member).unwrap_or_default(), out);
            }
            "content_block_stop" => {
                let upstream = data.get("index").and_then(Value::as_u64).unwrap_or(0);
                self.close_upstream(upstream, out);
            }
            "message_delta" => {
                self.ensure_started(out);
                let usage = parse_usage(data.get("usage"));
                self.usage.merge(&usage);
                if let Some(d) = data.get("delta").and_then(Value::as_object) {
                    if let Some(r) = get_str(d, "stop_reason").and_then(stop_reason_from_wire) {
                        self.stop_reason = Some(r);
                    }
                    if let Some(s) = get_str(d, "stop_sequence") {
                        self.stop_sequence = Some(s.to_string());
                    }
                }
                self.emit_finish(out);
            }
            "message_stop" => {
                self.ensure_started(out);
                self.emit_finish(out);
                self.ended = true;
                out.push(StreamEvent::End);
            }
            "error" => {
                let e = data.get("error");
                let etype = e.and_then(|e| e.get("type")).and_then(Value::as_str).unwrap_or_default();
                let message = e
                    .and_then(|e| e.get("message"))
                    .and_then(Value::as_str)
                    .unwrap_or("the upstream reported an error")
                    .to_string();
                self.ended = true;
                out.push(StreamEvent::Error { kind: error_kind_from_type(etype).unwrap_or(ErrorKind::Api), message });
            }
            // `ping` and anything unknown.
            _ => {}
        }
    }

    /// EOF. An Anthropic stream is complete only with `message_stop` (SPEC §6): a cut stream
    /// gets nothing invented here.
    pub fn finish(&mut self, _out: &mut Vec<StreamEvent>) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::anthropic::tests::*;
    use crate::convert::testkit::decoded_with;

    use proptest::prelude::*;

    #[test]
    fn stream_decode_transcripts() {
        for (name, t) in TRANSCRIPTS {
            let evs = decode_chunks(&[t.as_bytes()]);
            insta::assert_snapshot!(format!("stream_decode_{name}"), events_text(&evs));
        }
    }

    #[test]
    fn stream_decode_every_split_is_identical() {
        for (name, t) in TRANSCRIPTS {
            let bytes = t.as_bytes();
            let whole = decode_chunks(&[bytes]);
            for cut in 0..=bytes.len() {
                let (a, b) = bytes.split_at(cut);
                assert_eq!(decode_chunks(&[a, b]), whole, "{name} split at {cut}");
            }
            // One byte at a time.
            let singles: Vec<&[u8]> = bytes.chunks(1).collect();
            assert_eq!(decode_chunks(&singles), whole, "{name} byte by byte");
        }
    }

    proptest! {
        #[test]
        fn stream_decode_random_splits(which in 0usize..6, cuts in proptest::collection::vec(0usize..4000, 0..12)) {
            let bytes = TRANSCRIPTS[which].1.as_bytes();
            let whole = decode_chunks(&[bytes]);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut prev = 0;
            for c in cuts {
                chunks.push(&bytes[prev..c]);
                prev = c;
            }
            chunks.push(&bytes[prev..]);
            prop_assert_eq!(decode_chunks(&chunks), whole);
        }
    }

    /// Events of a stream: block starts of each kind, and deltas in the API's shape or a step
    /// away from it (another member order, a space, a type naming another member, a number
    /// that is no index, a `\u` escape, text after the object).
    fn stream_event() -> impl Strategy<Value = String> {
        use crate::protocol::plain_json::strategies::{count, one_of, string};
        let delta = (
            one_of(&[
                r#"{"type":"content_block_delta","index":"#,
                r#"{"type":"content_block_delta", "index":"#,
                r#"{"index":1,"type":"content_block_delta","index":"#,
            ]),
            prop_oneof![4 => (0u64..3).prop_map(|n| n.to_string()), 1 => count()],
            one_of(&[
                r#","delta":{"type":"text_delta","text":"#,
                r#","delta":{"type":"thinking_delta","thinking":"#,
                r#","delta":{"type":"input_json_delta","partial_json":"#,
                r#","delta":{"type":"signature_delta","signature":"#,
                r#","delta":{"type":"text_delta","thinking":"#,
                r#","delta":{"type":"citations_delta","text":"#,
            ]),
            string(),
            one_of(&["}}", "} }", "}}x", r#","text":"again"}}"#]),
        )
            .prop_map(|(head, index, kind, text, end)| format!("{head}{index}{kind}{text}{end}"));
        let start = prop::sample::select(vec![
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"thinking","thinking":""}}"#,
            r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"server_tool_use","id":"s","name":"web_search"}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
        ])
        .prop_map(str::to_owned);
        prop_oneof![4 => delta, 1 => start]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]
        /// A delta matched in the API's shape decodes as its parse does; so does one a step
        /// away from that shape, which is parsed.
        #[test]
        fn a_matched_delta_decodes_as_its_parse(events in prop::collection::vec(stream_event(), 1..10)) {
            let decoded = |parse| decoded_with(&events, Some("content_block_delta"), parse, StreamDecoder::decode_with);
            prop_assert_eq!(decoded(Parse::Direct), decoded(Parse::ViaValue));
        }
    }

    #[test]
    fn deltas_as_the_api_writes_them_are_matched() {
        let text = r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi\n\"there\""}}"#;
        assert_eq!(plain_block_delta(text), Some((0, "text_delta", r#"Hi\n\"there\""#)));
        let args =
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}"#;
        assert_eq!(plain_block_delta(args), Some((2, "input_json_delta", r#"{\"a\":"#)));
        let spaced = r#"{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}"#;
        assert_eq!(plain_block_delta(spaced), None);
    }

    #[test]
    fn relay_without_block_stops_keeps_one_block_open() {
        let t = "data: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"x\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n\
data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\n\n\
data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{}}}\n\n\
data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}\n\n\
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":3}}\n\n\
data: {\"type\":\"message_stop\"}\n\n";
        let evs = decode_chunks(&[t.as_bytes()]);
        let kinds: Vec<String> =
            evs.iter().map(|e| format!("{e:?}").split([' ', '{']).next().unwrap_or_default().to_string()).collect();
        assert_eq!(
            kinds,
            [
                "Start",
                "BlockStart",
                "TextDelta",
                "BlockStop",
                "BlockStart",
                "ToolArgsDelta",
                "BlockStop",
                "Finish",
                "End"
            ]
        );
    }

    #[test]
    fn stream_cut_before_message_stop_gets_no_end() {
        let cut = STREAM_TEXT.find("event: message_delta").expect("has delta");
        let evs = decode_chunks(&[&STREAM_TEXT.as_bytes()[..cut]]);
        assert!(!evs.iter().any(|e| matches!(e, StreamEvent::End | StreamEvent::Finish { .. })));
        let cut = STREAM_TEXT.find("event: message_stop").expect("has stop");
        let evs = decode_chunks(&[&STREAM_TEXT.as_bytes()[..cut]]);
        assert!(evs.iter().any(|e| matches!(e, StreamEvent::Finish { .. })));
        assert!(!evs.iter().any(|e| matches!(e, StreamEvent::End)));
    }
}
