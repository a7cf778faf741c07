//! A Gemini upstream's stream (`streamGenerateContent?alt=sse`: one `GenerateContentResponse`
//! per `data:` event) to IR events, one chunk at a time.

use serde_json::Value;

use super::super::error::error_fields;
use super::super::response::{Calls, Decoded, decode_part, decode_usage, stop_reason, usage_of_counts, with_tool_use};
use super::super::{Obj, field, field_str};
use crate::convert::ir::*;
use crate::protocol::errors::ErrorKind;
use crate::protocol::lenient::{get, truncate_marked};
use crate::protocol::plain_json::unescaped;
use crate::protocol::sse::SseEvent;
use crate::protocol::stream_events::{EventKind, PlainTextChunk, StreamContext, note_first_model, plain_text_chunk};

/// Longest excerpt of a malformed chunk quoted in the error event, in characters.
const MAX_CHUNK_TEXT: usize = 512;

/// Incremental: one upstream event in, zero or more IR events out, immediately. Gemini sends
/// whole parts per chunk (a function call arrives complete), so the only state is the open
/// text or thought block, the calls so far and the usage.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    started: bool,
    next_index: usize,
    /// The open block: its index and whether it is a thought.
    open: Option<(usize, bool)>,
    calls: Calls,
    has_calls: bool,
    /// A `finishReason` (or a prompt block) arrived: the stream is complete.
    stop: Option<Option<StopReason>>,
    usage: Usage,
    ended: bool,
    failed: bool,
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn decode(&mut self, event: &SseEvent<'_>, out: &mut Vec<StreamEvent>) {
        self.decode_with(event, out, None);
    }

    /// [`decode`](Self::decode), which also classifies the event as
    /// `stream_events::inspect_and_observe` would (noting its model in `ctx`) when it is a text
    /// chunk matched rather than parsed: content, with no finish, error or block. `None` leaves
    /// the event to the classifier.
    pub fn decode_classified(
        &mut self,
        event: &SseEvent<'_>,
        out: &mut Vec<StreamEvent>,
        ctx: &mut StreamContext,
    ) -> Option<EventKind> {
        self.decode_with(event, out, Some(ctx))
    }

    fn decode_with(
        &mut self,
        event: &SseEvent<'_>,
        out: &mut Vec<StreamEvent>,
        classify: Option<&mut StreamContext>,
    ) -> Option<EventKind> {
        if self.ended || self.failed {
            return None;
        }
        let data = event.data.trim();
        if data.is_empty() {
            return None;
        }
        let Some(chunk) = plain_text_chunk(data) else {
            self.parsed(data, out);
            return None;
        };
        self.text_chunk(&chunk, out, classify)
    }

    /// A text chunk matched rather than parsed, here or by the caller (the observer matches a
    /// Gemini chunk once for its usage and this): what `parsed` makes of the same chunk, and,
    /// when `classify` asks, its classification (content; its model noted). `None` once the
    /// stream has ended or failed: the chunk is then left alone, as `decode` leaves it.
    pub fn text_chunk(
        &mut self,
        chunk: &PlainTextChunk<'_>,
        out: &mut Vec<StreamEvent>,
        classify: Option<&mut StreamContext>,
    ) -> Option<EventKind> {
        if self.ended || self.failed {
            return None;
        }
        self.plain_text(chunk, out);
        let ctx = classify?;
        note_first_model(Some(chunk.model), ctx);
        Some(EventKind::Content)
    }

    /// A text chunk matched rather than parsed: what `parsed` makes of the same chunk.
    fn plain_text(&mut self, chunk: &PlainTextChunk<'_>, out: &mut Vec<StreamEvent>) {
        if !self.started {
            self.start(chunk.id, Some(chunk.model), out);
        }
        if let Some(counts) = chunk.usage {
            self.usage.merge(&usage_of_counts(counts));
        }
        // After the finish only usage counts; an empty text is no part.
        if self.stop.is_some() || chunk.text.is_empty() {
            return;
        }
        self.text(unescaped(chunk.text).into_owned(), out);
    }

    /// The stream's start, before its first chunk's events: the response id and model it names.
    fn start(&mut self, id: Option<&str>, model: Option<&str>, out: &mut Vec<StreamEvent>) {
        self.started = true;
        out.push(StreamEvent::Start {
            id: id.unwrap_or_default().to_owned(),
            model: model.unwrap_or_default().to_owned(),
            usage: Usage::default(),
            created: None,
        });
    }

    /// Text, in the open text block (opened if need be).
    fn text(&mut self, text: String, out: &mut Vec<StreamEvent>) {
        let index = self.open_block(false, out);
        out.push(StreamEvent::TextDelta { index, text });
    }

    fn parsed(&mut self, data: &str, out: &mut Vec<StreamEvent>) {
        let chunk = match serde_json::from_str::<Value>(data) {
            Ok(Value::Object(o)) => o,
            // The JSON-array stream's error form, `[{"error": …}]`, if a relay sends it here.
            Ok(Value::Array(items)) if items.first().and_then(|i| i.get("error")).is_some() => {
                let e = items.first().and_then(Value::as_object).cloned().unwrap_or_default();
                self.error(&e, out);
                return;
            }
            _ => {
                let message =
                    format!("the upstream sent a malformed stream chunk: {}", truncate_marked(data, MAX_CHUNK_TEXT));
                self.fail(out, ErrorKind::Api, message);
                return;
            }
        };
        if get(&chunk, "error").is_some() {
            self.error(&chunk, out);
            return;
        }
        if !self.started {
            self.start(
                field_str(&chunk, "responseId", "response_id"),
                field_str(&chunk, "modelVersion", "model_version"),
                out,
            );
        }
        if let Some(u) = field(&chunk, "usageMetadata", "usage_metadata").and_then(Value::as_object) {
            self.usage.merge(&decode_usage(u));
        }
        if self.stop.is_some() {
            // Only usage can follow the finish.
            return;
        }
        let candidate =
            get(&chunk, "candidates").and_then(Value::as_array).and_then(|c| c.first()).and_then(Value::as_object);
        let Some(candidate) = candidate else {
            let blocked = field(&chunk, "promptFeedback", "prompt_feedback")
                .and_then(Value::as_object)
                .and_then(|f| field_str(f, "blockReason", "block_reason"))
                .is_some();
            if blocked {
                self.stop = Some(Some(StopReason::Refusal));
            }
            return;
        };
        let parts = get(candidate, "content").and_then(|c| c.get("parts")).and_then(Value::as_array);
        for p in parts.into_iter().flatten().filter_map(Value::as_object) {
            self.part(p, out);
        }
        if let Some(reason) = field_str(candidate, "finishReason", "finish_reason").filter(|r| !r.is_empty()) {
            self.close(out);
            self.stop = Some(stop_reason(reason));
        }
    }

    /// The upstream's stream ended. Gemini has no terminal event beyond the `finishReason`: a
    /// stream that delivered one is complete; one cut before it is not (the gateway reports that).
    pub fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        if self.ended || self.failed {
            return;
        }
        if let Some(stop) = self.stop {
            out.push(StreamEvent::Finish {
                stop_reason: with_tool_use(stop, self.has_calls),
                stop_sequence: None,
                usage: self.usage,
            });
            out.push(StreamEvent::End);
            self.ended = true;
        }
    }

    fn part(&mut self, p: &Obj, out: &mut Vec<StreamEvent>) {
        match decode_part(p, &mut self.calls) {
            Decoded::Part(Part::Text(t)) => self.text(t.text, out),
            Decoded::Part(Part::Thinking { text, signature }) => {
                let index = self.open_block(true, out);
                if !text.is_empty() {
                    out.push(StreamEvent::ThinkingDelta { index, text });
                }
                if let Some(signature) = signature {
                    out.push(StreamEvent::SignatureDelta { index, signature });
                }
            }
            Decoded::Part(Part::ToolUse { id, name, input, .. }) => {
                self.close(out);
                self.has_calls = true;
                let index = self.next_index;
                self.next_index += 1;
                out.push(StreamEvent::BlockStart { index, block: BlockStart::ToolUse { id, name } });
                out.push(StreamEvent::ToolArgsDelta { index, partial_json: input.to_string() });
                out.push(StreamEvent::BlockStop { index });
            }
            // Images and the rest have no stream event; a streamed answer is text and calls.
            _ => {}
        }
    }

    /// The open text (or thought) block, opening one after closing the other kind.
    fn open_block(&mut self, thought: bool, out: &mut Vec<StreamEvent>) -> usize {
        if let Some((index, t)) = self.open
            && t == thought
        {
            return index;
        }
        self.close(out);
        let index = self.next_index;
        self.next_index += 1;
        self.open = Some((index, thought));
        let block = if thought { BlockStart::Thinking } else { BlockStart::Text };
        out.push(StreamEvent::BlockStart { index, block });
        index
    }

    fn close(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some((index, _)) = self.open.take() {
            out.push(StreamEvent::BlockStop { index });
        }
    }

    fn error(&mut self, chunk: &Obj, out: &mut Vec<StreamEvent>) {
        let e = get(chunk, "error").and_then(Value::as_object).cloned().unwrap_or_default();
        let (kind, message, _) = error_fields(&e, ErrorKind::Api);
        self.fail(out, kind, message.unwrap_or_else(|| "the upstream reported an error in the stream".to_owned()));
    }

    fn fail(&mut self, out: &mut Vec<StreamEvent>, kind: ErrorKind, message: String) {
        self.failed = true;
        out.push(StreamEvent::Error { kind, message });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::super::super::tests::*;
    use super::*;
    use crate::protocol::stream_events::gemini_text_chunk as text_chunk;
    use insta::assert_json_snapshot;
    use serde_json::json;

    fn events(evs: &[StreamEvent]) -> Vec<String> {
        evs.iter().map(|e| format!("{e:?}")).collect()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]
        /// A stream decodes to the same events whether its text chunks are matched or parsed.
        #[test]
        fn matched_text_chunks_decode_as_their_parse_would(chunks in proptest::collection::vec(text_chunk(), 1..5)) {
            let (mut matched, mut parsed) = (StreamDecoder::new(), StreamDecoder::new());
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for data in &chunks {
                matched.decode(&SseEvent { event: None, data }, &mut a);
                // What `decode` does before it tries the match.
                if !(parsed.ended || parsed.failed || data.trim().is_empty()) {
                    parsed.parsed(data.trim(), &mut b);
                }
            }
            matched.finish(&mut a);
            parsed.finish(&mut b);
            proptest::prop_assert_eq!(a, b, "{:?}", chunks);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]
        /// Whenever the decoder classifies a chunk it matched, the classifier would have said the
        /// same and noted the same model; and classifying does not change what it decodes.
        #[test]
        fn a_chunk_the_decoder_classifies_is_classified_as_the_classifier_would(
            chunks in proptest::collection::vec(text_chunk(), 1..5),
        ) {
            use crate::protocol::Format;
            use crate::protocol::stream_events::inspect_and_observe;
            let (mut classifying, mut plain, mut handed) = (StreamDecoder::new(), StreamDecoder::new(), StreamDecoder::new());
            let (mut decoder_ctx, mut classifier_ctx, mut handed_ctx) =
                (StreamContext::default(), StreamContext::default(), StreamContext::default());
            for data in &chunks {
                let event = SseEvent { event: None, data };
                let (mut out, mut plain_out, mut handed_out) = (Vec::new(), Vec::new(), Vec::new());
                let by_decoder = classifying.decode_classified(&event, &mut out, &mut decoder_ctx);
                plain.decode(&event, &mut plain_out);
                proptest::prop_assert_eq!(&out, &plain_out);
                // A chunk the observer matched and handed over, as the observer does it.
                let by_hand = match plain_text_chunk(data) {
                    Some(chunk) => handed.text_chunk(&chunk, &mut handed_out, Some(&mut handed_ctx)),
                    None => None,
                };
                let by_hand = match by_hand {
                    Some(kind) => Some(kind),
                    None => handed.decode_classified(&event, &mut handed_out, &mut handed_ctx),
                };
                proptest::prop_assert_eq!(&handed_out, &out);
                proptest::prop_assert_eq!(&by_hand, &by_decoder);
                let by_classifier = inspect_and_observe(Format::Gemini, &event, &mut classifier_ctx);
                match by_decoder {
                    Some(kind) => proptest::prop_assert_eq!(kind, by_classifier, "{}", data),
                    // What the observer does with an event the decoder leaves alone.
                    None => drop(inspect_and_observe(Format::Gemini, &event, &mut decoder_ctx)),
                }
                proptest::prop_assert_eq!(&decoder_ctx.model, &classifier_ctx.model, "{}", data);
                if by_hand.is_none() {
                    drop(inspect_and_observe(Format::Gemini, &event, &mut handed_ctx));
                }
                proptest::prop_assert_eq!(&handed_ctx.model, &classifier_ctx.model, "{}", data);
            }
        }
    }

    #[test]
    fn stream_decode_thoughts_text_and_a_call() {
        assert_json_snapshot!(events(&decode_chunks(&[STREAM_TOOLS.as_bytes()])));
    }

    #[test]
    fn stream_decode_errors_blocks_and_cuts() {
        let error = "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Hel\"}],\"role\": \"model\"}}]}\n\ndata: {\"error\": {\"code\": 429, \"message\": \"Resource exhausted\", \"status\": \"RESOURCE_EXHAUSTED\"}}\n\n";
        let blocked = "data: {\"promptFeedback\": {\"blockReason\": \"PROHIBITED_CONTENT\"}, \"usageMetadata\": {\"promptTokenCount\": 9}}\n\n";
        let cut = "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Hel\"}],\"role\": \"model\"}}]}\n\n";
        let malformed = "data: {\"candidates\": [\n\n";
        let max = "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"long\"}],\"role\": \"model\"},\"finishReason\": \"MAX_TOKENS\"}]}\n\ndata: {\"usageMetadata\": {\"promptTokenCount\": 3, \"candidatesTokenCount\": 4}}\n\n";
        let got = json!({
            "error": events(&decode_chunks(&[error.as_bytes()])),
            "blocked": events(&decode_chunks(&[blocked.as_bytes()])),
            "cut": events(&decode_chunks(&[cut.as_bytes()])),
            "malformed": events(&decode_chunks(&[malformed.as_bytes()])),
            "max_tokens_then_usage": events(&decode_chunks(&[max.as_bytes()])),
        });
        assert_json_snapshot!(got);
    }

    #[test]
    fn stream_decode_is_the_same_at_every_byte_boundary() {
        let whole = decode_chunks(&[STREAM_TOOLS.as_bytes()]);
        let bytes = STREAM_TOOLS.as_bytes();
        for cut in 0..=bytes.len() {
            assert_eq!(decode_chunks(&[&bytes[..cut], &bytes[cut..]]), whole, "cut at {cut}");
        }
        let single: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(decode_chunks(&single), whole);
    }

    #[test]
    fn stream_and_body_give_a_call_the_same_id() {
        let stream_id = decode_chunks(&[STREAM_TOOLS.as_bytes()]).into_iter().find_map(|e| match e {
            StreamEvent::BlockStart { block: BlockStart::ToolUse { id, .. }, .. } => Some(id),
            _ => None,
        });
        let body = json!({"candidates": [{"content": {"parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "CiQB0e2Kb+/x9A=="}]}, "finishReason": "STOP"}]});
        let r = super::super::super::decode_response(&serde_json::to_vec(&body).unwrap()).unwrap();
        let Part::ToolUse { id, .. } = &r.content[0] else { panic!() };
        assert_eq!(stream_id.as_deref(), Some(id.as_str()));
    }
}
