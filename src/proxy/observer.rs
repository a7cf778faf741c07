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
use crate::protocol::sse::SseScanner;
use crate::protocol::stream_events::{EventKind, StreamContext, inspect_and_observe};
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

/// What the observer has seen so far in a stream.
#[derive(Clone, Debug, Default)]
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

/// Watches an upstream stream and produces what the client receives.
pub struct StreamObserver {
    /// The upstream's format.
    pub format: Format,
    /// The client's format.
    pub client: Format,
    scanner: SseScanner,
    context: StreamContext,
    pub watch: StreamWatch,
    /// Token usage and the answering model, from the upstream's own events.
    pub usage: StreamUsage,
    transform: Transform,
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
                self.scanner.feed(&chunk, |event| {
                    let kind = inspect_and_observe(format, &event, context);
                    if gemini_client && watch.error.is_none() && matches!(kind, EventKind::UpstreamError { .. }) {
                        gemini_repeat_error(&mut repeated, event.data);
                    }
                    watch.observe(&kind);
                    usage.observe(format, &event);
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
                    let kind = match conversion.event_classified(&event, &mut out, context) {
                        Some(kind) => kind,
                        None => inspect_and_observe(format, &event, context),
                    };
                    watch.observe(&kind);
                    usage.observe(format, &event);
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

/// A stream that reached its first content event and now belongs to the client.
pub struct Committed {
    pub gw: Arc<Gateway>,
    pub snapshot: Arc<Snapshot>,
    pub breaker_settings: BreakerSettings,
    pub idle_timeout: Option<Duration>,
    /// `timeouts.<protocol>.max_stream_duration_secs`, counted from the commit.
    pub max_duration: Option<Duration>,
    pub held: Vec<Bytes>,
    pub observer: StreamObserver,
    pub rotation: Option<RotationUpdate>,
    /// The request's decision trail, closed when the stream ends (or dropped with it, which
    /// records the client going away).
    pub trail: Option<Trail>,
}
