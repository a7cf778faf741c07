//! Watching an upstream's stream as it passes (SPEC §6): which of its events are preamble,
//! content, the terminal event or an upstream error; its usage and model; and what the client
//! receives — the same bytes, or the events converted to the client's protocol. The relay
//! (`relay.rs`) drives it chunk by chunk; the preamble hold (`exchange.rs`) uses it before a
//! stream is committed.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::config::BreakerSettings;
use crate::convert::StreamConversion;
use crate::gateway::Gateway;
use crate::observe::usage::StreamUsage;
use crate::protocol::Format;
use crate::protocol::errors::{ErrorKind, gemini_repeat_error, stream_error_event};
use crate::protocol::sse::{SseEvent, SseScanner};
use crate::protocol::stream_events::{
    EventKind, StreamContext, inspect_and_observe, note_first_model, plain_text_chunk, skip_plain_deltas,
};
use crate::routing::RotationUpdate;
use crate::snapshot::Snapshot;

use super::trail::Trail;

/// An error event an upstream put in its stream.
#[derive(Clone, Debug)]
pub struct UpstreamError {
    /// A rate-limit error (the breaker opens as RateLimited).
    pub rate_limited: bool,
    pub message: String,
}

/// What the observer has seen so far in a stream. The flags every event reads first
/// (`repr(C)`; see `relay::Relay`).
#[derive(Clone, Debug, Default)]
#[repr(C)]
pub struct StreamWatch {
    pub terminal: bool,
    /// OpenAI Chat: a `finish_reason` arrived (a clean close after it is complete).
    pub finish: bool,
    /// Any event other than preamble arrived.
    pub content: bool,
    /// The first upstream error event.
    pub error: Option<UpstreamError>,
    /// The stream cannot be read as its protocol's events (an event over the size limit).
    pub malformed: Option<String>,
}

impl StreamWatch {
    pub fn observe(&mut self, kind: &EventKind) {
        match kind {
            EventKind::Terminal => {
                self.terminal = true;
                self.content = true;
            }
            EventKind::ContentWithFinish => {
                self.finish = true;
                self.content = true;
            }
            EventKind::UpstreamError { rate_limited, message, .. } => {
                if self.error.is_none() {
                    self.error = Some(UpstreamError { rate_limited: *rate_limited, message: message.clone() });
                }
            }
            EventKind::Content => self.content = true,
            EventKind::Preamble => {}
            EventKind::Malformed => {
                if self.malformed.is_none() {
                    self.malformed = Some("an upstream stream event is not valid JSON".into());
                }
            }
        }
    }
}

/// Pass the upstream's bytes through, or convert them to the client's protocol.
pub enum Transform {
    Pass,
    Convert(Box<StreamConversion>),
}

/// Watches an upstream stream and produces what the client receives. What a passed-through
/// content delta reads comes first, in this order (`repr(C)`; see `relay::Relay`).
#[repr(C)]
pub struct StreamObserver {
    /// The upstream's format.
    pub format: Format,
    /// The client's format.
    pub client: Format,
    transform: Transform,
    pub watch: StreamWatch,
    scanner: SseScanner,
    context: StreamContext,
    /// Token usage and the answering model, from the upstream's own events.
    pub usage: StreamUsage,
}

impl StreamObserver {
    /// `max_event`: the largest single event accepted (`limits.max_sse_event_bytes`).
    pub fn new(format: Format, client: Format, transform: Transform, max_event: u64) -> Self {
        Self {
            format,
            client,
            scanner: SseScanner::with_limit(usize::try_from(max_event).unwrap_or(usize::MAX)),
            context: StreamContext::default(),
            watch: StreamWatch::default(),
            usage: StreamUsage::default(),
            transform,
        }
    }

    /// Whether the client gets converted events (not the upstream's bytes).
    pub fn converts(&self) -> bool {
        matches!(self.transform, Transform::Convert(_))
    }

    /// Observe one upstream chunk; returns the bytes for the client (possibly none).
    pub fn chunk(&mut self, chunk: Bytes) -> Option<Bytes> {
        let out = self.scan(chunk);
        if self.scanner.overflowed() && self.watch.malformed.is_none() {
            self.watch.malformed = Some("an upstream stream event is larger than limits.max_sse_event_bytes".into());
        }
        out
    }

    fn scan(&mut self, chunk: Bytes) -> Option<Bytes> {
        let (format, watch, context, usage) = (self.format, &mut self.watch, &mut self.context, &mut self.usage);
        match &mut self.transform {
            Transform::Pass => {
                let gemini_client = self.client == Format::Gemini;
                let mut repeated = Vec::new();
                let (deltas, rest) = skip_plain_deltas(format, &self.scanner, &chunk, context);
                if deltas > 0 {
                    watch.observe(&EventKind::Content);
                }
                self.scanner.feed(rest, |event| {
                    let kind = read_event(format, &event, context, usage);
                    if gemini_client && watch.error.is_none() && matches!(kind, EventKind::UpstreamError { .. }) {
                        gemini_repeat_error(&mut repeated, event.data);
                    }
                    watch.observe(&kind);
                });
                if repeated.is_empty() {
                    return Some(chunk);
                }
                let mut out = chunk.to_vec();
                out.extend_from_slice(&repeated);
                Some(Bytes::from(out))
            }
            Transform::Convert(conversion) => {
                // Sized for what the chunk converts to (a protocol's framing of the same text can
                // be twice another's), so the encoders write without growing the buffer.
                let mut out = Vec::with_capacity(chunk.len().saturating_mul(2).saturating_add(64));
                self.scanner.feed(&chunk, |event| {
                    watch.observe(&convert_event(format, &event, conversion, &mut out, context, usage));
                });
                (!out.is_empty()).then(|| Bytes::from(out))
            }
        }
    }

    /// The upstream ended cleanly. `Some(bytes)` = the stream is complete (after these final
    /// bytes, possibly empty); `None` = it ended without its terminal event.
    pub fn clean_end(&mut self) -> Option<Bytes> {
        // Tolerance for real upstreams: a Chat stream that delivered its finish_reason and
        // closed cleanly is complete.
        let chat_finished = self.format == Format::Openai && self.watch.finish && self.scanner.pending_bytes() == 0;
        if !self.watch.terminal && !chat_finished {
            return None;
        }
        match &mut self.transform {
            Transform::Pass if !self.watch.terminal => Some(Bytes::from_static(b"data: [DONE]\n\n")),
            Transform::Pass => Some(Bytes::new()),
            Transform::Convert(conversion) => {
                let mut out = Vec::new();
                conversion.finish(&mut out);
                Some(Bytes::from(out))
            }
        }
    }

    /// The client protocol's error event ending the stream.
    pub fn error_event(&mut self, message: &str) -> Bytes {
        match &mut self.transform {
            Transform::Pass => Bytes::from(stream_error_event(self.client, message, &self.context)),
            Transform::Convert(conversion) => {
                let mut out = Vec::new();
                conversion.fail(ErrorKind::Api, message, &mut out);
                Bytes::from(out)
            }
        }
    }
}

/// What an upstream event means, noted in `context`, and its usage, noted in `usage`. A Gemini
/// text chunk in the API's shape (nearly every chunk of a Gemini stream) is matched once for both,
/// where the classifier would search it for five keys and the usage reader match it again.
fn read_event(format: Format, event: &SseEvent<'_>, context: &mut StreamContext, usage: &mut StreamUsage) -> EventKind {
    if format == Format::Gemini
        && let Some(chunk) = plain_text_chunk(event.data)
    {
        note_first_model(Some(chunk.model), context);
        usage.observe_gemini_text_chunk(&chunk);
        return EventKind::Content;
    }
    let kind = inspect_and_observe(format, event, context);
    usage.observe(format, event);
    kind
}

/// [`read_event`] for a converted stream: the event converted into `out` as well. The decoder's
/// own read of an event classifies it when it can (`StreamConversion::event_classified`); a
/// Gemini text chunk is matched once, here, for its usage and for the decoder.
fn convert_event(
    format: Format,
    event: &SseEvent<'_>,
    conversion: &mut StreamConversion,
    out: &mut Vec<u8>,
    context: &mut StreamContext,
    usage: &mut StreamUsage,
) -> EventKind {
    let classified = |conversion: &mut StreamConversion, out: &mut Vec<u8>, context: &mut StreamContext| {
        conversion.event_classified(event, out, context).unwrap_or_else(|| inspect_and_observe(format, event, context))
    };
    if format == Format::Gemini
        && let Some(chunk) = plain_text_chunk(event.data)
    {
        usage.observe_gemini_text_chunk(&chunk);
        return match conversion.gemini_text_chunk(&chunk, out, context) {
            Some(kind) => kind,
            None => classified(conversion, out, context),
        };
    }
    let kind = classified(conversion, out, context);
    usage.observe(format, event);
    kind
}

/// A stream that reached its first content event and now belongs to the client.
///
/// The observer, which every event reads, first (`repr(C)`; see `relay::Relay`).
#[repr(C)]
pub struct Committed {
    pub observer: StreamObserver,
    pub gw: Arc<Gateway>,
    pub snapshot: Arc<Snapshot>,
    pub breaker_settings: BreakerSettings,
    pub idle_timeout: Option<Duration>,
    /// `timeouts.<protocol>.max_stream_duration_secs`, counted from the commit.
    pub max_duration: Option<Duration>,
    pub held: Vec<Bytes>,
    pub rotation: Option<RotationUpdate>,
    /// The request's decision trail, closed when the stream ends (or dropped with it, which
    /// records the client going away).
    pub trail: Option<Box<Trail>>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    /// Anthropic stream events as the API sends them, and the near misses of a content delta's
    /// usual shape (spaced, CRLF, a trailing space, cut JSON, several data lines).
    const ANTHROPIC_PIECES: [&str; 14] = [
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n",
        "event: ping\ndata: {\"type\": \"ping\"}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi \\u00e9\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"\u{e9}\u{1F600}\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\": \"content_block_delta\", \"index\": 0}\n\n",
        "event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"index\":0}\r\n\r\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0} \n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\ndata: \"index\":0}\n\n",
        ": keep-alive\n\n",
        "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    ];

    /// A Gemini stream's chunks as the API writes them (a text chunk with the usage so far, most
    /// of all) and others the classifier and the usage reader must each read.
    const GEMINI_PIECES: [&str; 11] = [
        "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Hel\"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 9,\"totalTokenCount\": 9},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"r1\"}\r\n\r\n",
        "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"lo \\\"x\\\"\\n\"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 9,\"candidatesTokenCount\": 2,\"totalTokenCount\": 11,\"promptTokensDetails\": [{\"modality\": \"TEXT\",\"tokenCount\": 9}]},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"r1\"}\r\n\r\n",
        "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \" there\"}],\"role\": \"model\"},\"index\": 0}],\"modelVersion\": \"gemini-2.5-flash\"}\r\n\r\n",
        "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"!\"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 9,\"thoughtsTokenCount\": 4},\"modelVersion\": \"gemini-2.5-pro\",\"responseId\": \"r1\"}\r\n\r\n",
        "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}],\"role\":\"model\"},\"index\":0}],\"modelVersion\":\"\"}\r\n\r\n",
        "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"hm\",\"thought\": true}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 9},\"modelVersion\": \"gemini-2.5-flash\"}\r\n\r\n",
        "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"\"}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 9,\"candidatesTokenCount\": 5,\"cachedContentTokenCount\": 3,\"totalTokenCount\": 14},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"r1\"}\r\n\r\n",
        "data: {\"error\": {\"code\": 429,\"message\": \"Resource exhausted\",\"status\": \"RESOURCE_EXHAUSTED\"}}\r\n\r\n",
        "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"s\"}],\"role\": \"model\"},\"index\": 0}],\"usage_metadata\": {\"prompt_token_count\": 7},\"model_version\": \"snake\"}\r\n\r\n",
        "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"u\"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"prompt_token_count\": 7},\"modelVersion\": \"gemini-2.5-flash\"}\r\n\r\n",
        "data: {\"candidates\": [{\"content\": \r\n\r\n",
    ];

    /// Responses stream events as the API sends them, and the near misses of a delta's usual
    /// shape (a leading zero, a number past `u64`, spaced, CRLF, a trailing space, cut JSON).
    const RESPONSES_PIECES: [&str; 15] = [
        "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"created_at\":1741290958,\"status\":\"in_progress\",\"model\":\"gpt-5-codex\",\"output\":[]}}\n\n",
        "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":2,\"output_index\":0,\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[]}}\n\n",
        "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":5,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"Hi \\u00e9\",\"logprobs\":[]}\n\n",
        "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":17,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"\u{e9}\u{1F600}\"}\n\n",
        "event: response.function_call_arguments.delta\ndata: {\"type\":\"response.function_call_arguments.delta\",\"sequence_number\":9,\"item_id\":\"fc_1\",\"output_index\":1,\"delta\":\"{\\\"path\\\"\"}\n\n",
        "event: response.reasoning_summary_text.delta\ndata: {\"type\":\"response.reasoning_summary_text.delta\",\"sequence_number\":3}\n\n",
        "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":08,\"delta\":\"x\"}\n\n",
        "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":99999999999999999999,\"delta\":\"x\"}\n\n",
        "event: response.output_text.delta\ndata: {\"type\": \"response.output_text.delta\", \"sequence_number\": 21, \"delta\": \"x\"}\n\n",
        "event: response.output_text.delta\r\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":22,\"delta\":\"x\"}\r\n\r\n",
        "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":23,\"delta\":\"x\"} \n\n",
        "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":24,\"delta\":\n\n",
        ": keep-alive\n\n",
        "event: error\ndata: {\"type\":\"error\",\"sequence_number\":30,\"code\":\"server_error\",\"message\":\"Overloaded\"}\n\n",
        "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":31,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"created_at\":1741290958,\"status\":\"completed\",\"model\":\"gpt-5-codex\",\"output\":[],\"usage\":{\"input_tokens\":37,\"output_tokens\":11,\"total_tokens\":48}}}\n\n",
    ];

    /// What the observer tells after a chunk: its watch, usage and model, and what it keeps
    /// for an error event of its own.
    #[derive(Debug, PartialEq)]
    struct Verdict {
        terminal: bool,
        finish: bool,
        content: bool,
        error: Option<String>,
        malformed: Option<String>,
        tokens: crate::observe::record::Tokens,
        model: Option<String>,
        context: (Option<String>, Option<u64>, Option<String>, Option<u64>),
    }

    /// `Ok` when the observer's verdict after `chunk` is the reference's, else what differs.
    fn same_verdict(seen: Verdict, expected: Verdict, chunk: &[u8]) -> Result<(), String> {
        if seen == expected {
            return Ok(());
        }
        Err(format!("after {:?}: {seen:?}, reading every event: {expected:?}", String::from_utf8_lossy(chunk)))
    }

    fn verdict(watch: &StreamWatch, usage: &StreamUsage, context: &StreamContext) -> Verdict {
        Verdict {
            terminal: watch.terminal,
            finish: watch.finish,
            content: watch.content,
            error: watch.error.as_ref().map(|e| e.message.clone()),
            malformed: watch.malformed.clone(),
            tokens: usage.tokens(),
            model: usage.model().map(str::to_string),
            context: (
                context.response_id.clone(),
                context.last_sequence_number,
                context.model.clone(),
                context.created_at,
            ),
        }
    }

    /// The reference: every event read and classified, none passed over unread.
    struct EveryEvent {
        format: Format,
        scanner: SseScanner,
        context: StreamContext,
        watch: StreamWatch,
        usage: StreamUsage,
    }

    impl EveryEvent {
        fn chunk(&mut self, chunk: &[u8]) -> Verdict {
            let (format, context, watch, usage) = (self.format, &mut self.context, &mut self.watch, &mut self.usage);
            self.scanner.feed(chunk, |event| {
                watch.observe(&inspect_and_observe(format, &event, context));
                usage.observe(format, &event);
            });
            if self.scanner.overflowed() && self.watch.malformed.is_none() {
                self.watch.malformed =
                    Some("an upstream stream event is larger than limits.max_sse_event_bytes".into());
            }
            verdict(&self.watch, &self.usage, &self.context)
        }
    }

    /// Chunks as upstreams send them, mostly whole events (several to a chunk, or one),
    /// sometimes an event cut in two: `(piece, how, where)`, `how` 0 = with the chunk before,
    /// 1 = a chunk of its own, 2 = cut at `where`.
    fn chunks_of(pieces: &[&str], picks: &[(usize, u8, usize)]) -> Vec<Vec<u8>> {
        let mut chunks: Vec<Vec<u8>> = vec![Vec::new()];
        for &(i, how, at) in picks {
            let piece = pieces[i % pieces.len()].as_bytes();
            match how {
                0 => chunks.last_mut().unwrap().extend_from_slice(piece),
                1 => chunks.push(piece.to_vec()),
                _ => {
                    let (a, b) = piece.split_at(at.min(piece.len()));
                    chunks.last_mut().unwrap().extend_from_slice(a);
                    chunks.push(b.to_vec());
                }
            }
        }
        chunks.retain(|c| !c.is_empty());
        chunks
    }

    /// Feeds a pass-through observer and the reference the same chunks; the verdicts after
    /// each chunk, and the client's bytes (the upstream's), must agree.
    fn agrees_with_reading_every_event(format: Format, chunks: &[Vec<u8>], limit: u64) -> Result<(), String> {
        let mut observer = StreamObserver::new(format, format, Transform::Pass, limit);
        let mut reference = EveryEvent {
            format,
            scanner: SseScanner::with_limit(usize::try_from(limit).unwrap_or(usize::MAX)),
            context: StreamContext::default(),
            watch: StreamWatch::default(),
            usage: StreamUsage::default(),
        };
        for chunk in chunks {
            let out = observer.chunk(Bytes::copy_from_slice(chunk));
            // A Gemini client gets an upstream error event repeated after it, in the form its SDK
            // reads (`gemini_repeat_error`).
            let kept = out.as_deref() == Some(&chunk[..])
                || (format == Format::Gemini && out.as_deref().is_some_and(|out| out.starts_with(chunk)));
            if !kept {
                return Err(format!("the client's bytes changed: {out:?}"));
            }
            same_verdict(verdict(&observer.watch, &observer.usage, &observer.context), reference.chunk(chunk), chunk)?;
        }
        Ok(())
    }

    proptest::proptest! {
        /// A pass-through stream tells, after every chunk, what reading each of its events tells
        /// (the deltas it passes over unread, and the Gemini text chunks it matches once for
        /// both readers, included), and the client gets the upstream's bytes.
        #[test]
        fn passing_deltas_over_tells_what_reading_them_does(
            which in 0u8..3,
            picks in proptest::collection::vec((0usize..16, 0u8..3, 1usize..200), 0..24),
            limit in proptest::prop_oneof![proptest::strategy::Just(u64::MAX), 60u64..400],
        ) {
            let (format, pieces) = match which {
                0 => (Format::Responses, &RESPONSES_PIECES[..]),
                1 => (Format::Gemini, &GEMINI_PIECES[..]),
                _ => (Format::Anthropic, &ANTHROPIC_PIECES[..]),
            };
            let agreed = agrees_with_reading_every_event(format, &chunks_of(pieces, &picks), limit);
            proptest::prop_assert!(agreed.is_ok(), "{}", agreed.unwrap_err());
        }
    }

    /// Feeds a converting observer (Gemini upstream, `client`'s stream) and a reference that lets
    /// the decoder read every event and the usage reader read it again; the client's bytes and
    /// the verdicts after each chunk must agree.
    fn converting_agrees_with_reading_every_event(client: Format, chunks: &[Vec<u8>]) -> Result<(), String> {
        use crate::convert::StreamConversion;
        use crate::convert::ir::EncodeContext;
        let ctx = || EncodeContext { request_model: "m".into(), id_seed: "seed".into(), ..EncodeContext::default() };
        let mut observer = StreamObserver::new(
            Format::Gemini,
            client,
            Transform::Convert(Box::new(StreamConversion::new(Format::Gemini, client, ctx()))),
            u64::MAX,
        );
        let mut conversion = StreamConversion::new(Format::Gemini, client, ctx());
        let (mut scanner, mut context) = (SseScanner::new(), StreamContext::default());
        let (mut watch, mut usage) = (StreamWatch::default(), StreamUsage::default());
        for chunk in chunks {
            let seen = observer.chunk(Bytes::copy_from_slice(chunk)).unwrap_or_default();
            let mut expected = Vec::new();
            scanner.feed(chunk, |event| {
                let kind = match conversion.event_classified(&event, &mut expected, &mut context) {
                    Some(kind) => kind,
                    None => inspect_and_observe(Format::Gemini, &event, &mut context),
                };
                watch.observe(&kind);
                usage.observe(Format::Gemini, &event);
            });
            if seen[..] != expected[..] {
                return Err(format!(
                    "after {:?}: the client got {:?}, reading every event gives {:?}",
                    String::from_utf8_lossy(chunk),
                    String::from_utf8_lossy(&seen),
                    String::from_utf8_lossy(&expected)
                ));
            }
            same_verdict(
                verdict(&observer.watch, &observer.usage, &observer.context),
                verdict(&watch, &usage, &context),
                chunk,
            )?;
        }
        Ok(())
    }

    proptest::proptest! {
        /// A converted Gemini stream, its text chunks matched once for the decoder and the usage
        /// reader, tells what reading each event with both tells, and the client gets the same
        /// bytes.
        #[test]
        fn a_converted_gemini_chunk_matched_once_tells_what_reading_it_twice_does(
            client in proptest::sample::select(vec![Format::Anthropic, Format::Openai, Format::Responses]),
            picks in proptest::collection::vec((0usize..16, 0u8..3, 1usize..200), 0..24),
        ) {
            let agreed = converting_agrees_with_reading_every_event(client, &chunks_of(&GEMINI_PIECES, &picks));
            proptest::prop_assert!(agreed.is_ok(), "{}", agreed.unwrap_err());
        }
    }

    #[test]
    fn deltas_passed_over_unread_make_a_stream_content() {
        let mut observer = StreamObserver::new(Format::Anthropic, Format::Anthropic, Transform::Pass, u64::MAX);
        observer.chunk(Bytes::from_static(ANTHROPIC_PIECES[0].as_bytes()));
        assert!(!observer.watch.content, "message_start is preamble");
        observer.chunk(Bytes::from([ANTHROPIC_PIECES[3], ANTHROPIC_PIECES[4]].concat()));
        assert!(observer.watch.content);
        assert!(!observer.watch.terminal);
        observer.chunk(Bytes::from([ANTHROPIC_PIECES[3], ANTHROPIC_PIECES[12], ANTHROPIC_PIECES[13]].concat()));
        assert!(observer.watch.terminal);
        assert_eq!(observer.usage.tokens().output, Some(15));
    }

    #[test]
    fn responses_deltas_passed_over_note_their_sequence_numbers() {
        let mut observer = StreamObserver::new(Format::Responses, Format::Responses, Transform::Pass, u64::MAX);
        observer.chunk(Bytes::from_static(RESPONSES_PIECES[0].as_bytes()));
        assert!(!observer.watch.content, "response.created is preamble");
        // Deltas of two kinds in one chunk, the highest number in the middle.
        observer.chunk(Bytes::from([RESPONSES_PIECES[2], RESPONSES_PIECES[3], RESPONSES_PIECES[4]].concat()));
        assert!(observer.watch.content);
        assert_eq!(observer.context.last_sequence_number, Some(17));
    }
}
