//! The streaming relay (SPEC §6): forwards the upstream's bytes chunk by chunk as they arrive
//! (no re-encoding, no buffering beyond the held preamble) while an observer checks for the
//! protocol's terminal event, upstream error events and silence. The stream's outcome goes to
//! the endpoint's breaker when it ends; a client that goes away drops the relay, which cancels
//! the upstream request and records a neutral outcome.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};

use crate::breaker::{Outcome, Permit};
use crate::config::BreakerSettings;
use crate::endpoint::{EndpointId, Format};
use crate::gateway::{Gateway, LiveEndpoint};
use crate::protocol::Protocol;
use crate::protocol::sse::SseScanner;
use crate::protocol::stream_events::{EventKind, StreamContext, error_event, inspect};

use super::classify::classify_network_error;

/// What the observer has seen so far in a stream.
#[derive(Clone, Debug, Default)]
pub struct StreamWatch {
    pub terminal: bool,
    /// OpenAI Chat: a `finish_reason` arrived (a clean close after it is complete).
    pub finish: bool,
    /// The first upstream error event: (rate limited, message).
    pub error: Option<(bool, String)>,
}

impl StreamWatch {
    pub fn observe(&mut self, kind: &EventKind) {
        match kind {
            EventKind::Terminal => self.terminal = true,
            EventKind::ContentWithFinish => self.finish = true,
            EventKind::UpstreamError { rate_limited, message, .. } => {
                if self.error.is_none() {
                    self.error = Some((*rate_limited, message.clone()));
                }
            }
            EventKind::Preamble | EventKind::Content => {}
        }
    }
}

/// SPEC §3: after a success elsewhere, move the current endpoint (compare-and-set).
#[derive(Clone, Copy, Debug)]
pub struct RotationUpdate {
    pub protocol: Protocol,
    pub seen: Option<EndpointId>,
    pub to: EndpointId,
}

impl RotationUpdate {
    pub fn apply(self, gw: &Gateway) {
        gw.rotation.compare_and_set(self.protocol, self.seen, self.to);
    }
}

/// A stream that reached its first content event and now belongs to the client.
pub struct Committed {
    pub gw: Arc<Gateway>,
    pub protocol: Protocol,
    pub format: Format,
    pub endpoint: Arc<LiveEndpoint>,
    pub breaker_settings: BreakerSettings,
    pub idle_timeout: Option<Duration>,
    pub held: Vec<Bytes>,
    pub scanner: SseScanner,
    pub context: StreamContext,
    pub watch: StreamWatch,
    pub rotation: Option<RotationUpdate>,
}

struct RelayState<S> {
    c: Committed,
    upstream: S,
    pending: VecDeque<Bytes>,
    /// The permit, until the outcome is recorded.
    permit: Option<Permit>,
    done: bool,
}

pub fn relay<S>(
    mut committed: Committed,
    permit: Permit,
    upstream: S,
) -> impl Stream<Item = Result<Bytes, io::Error>> + Send + 'static
where
    S: Stream<Item = Result<Bytes, reqwest::Error>> + Send + Unpin + 'static,
{
    let pending: VecDeque<Bytes> = std::mem::take(&mut committed.held).into();
    let state = RelayState { c: committed, upstream, pending, permit: Some(permit), done: false };
    futures_util::stream::unfold(state, |mut s| async move {
        if let Some(chunk) = s.pending.pop_front() {
            return Some((Ok(chunk), s));
        }
        if s.done {
            return None;
        }
        let next = match s.c.idle_timeout {
            Some(idle) => match tokio::time::timeout(idle, s.upstream.next()).await {
                Ok(n) => n,
                Err(_) => {
                    let message = format!("the upstream stream was idle for more than {:.1} s", idle.as_secs_f64());
                    return s.fail_with_event(message);
                }
            },
            None => s.upstream.next().await,
        };
        match next {
            Some(Ok(chunk)) => {
                let (format, watch, context) = (s.c.format, &mut s.c.watch, &mut s.c.context);
                s.c.scanner.feed(&chunk, |event| {
                    context.observe(format, &event);
                    watch.observe(&inspect(format, &event));
                });
                Some((Ok(chunk), s))
            }
            Some(Err(e)) => {
                if s.c.watch.terminal {
                    s.finish();
                    return None;
                }
                let kind = classify_network_error(&e);
                s.fail_with_event(format!("{} mid-stream", kind.describe()))
            }
            None => {
                if s.c.watch.terminal {
                    s.finish();
                    return None;
                }
                // Tolerance for real upstreams: a Chat stream that delivered its finish_reason
                // and closed cleanly is complete; the client still gets its `[DONE]`.
                if s.c.format == Format::Openai && s.c.watch.finish && s.c.scanner.pending_bytes() == 0 {
                    s.finish();
                    return Some((Ok(Bytes::from_static(b"data: [DONE]\n\n")), s));
                }
                s.fail_with_event("the upstream stream ended without its terminal event".to_string())
            }
        }
    })
}

impl<S> RelayState<S> {
    /// Record the stream's outcome: success unless the upstream reported an error in it.
    fn finish(&mut self) {
        self.done = true;
        let Some(permit) = self.permit.take() else { return };
        match self.c.watch.error.clone() {
            Some((rate_limited, message)) => {
                let outcome = if rate_limited { Outcome::RateLimited { retry_after: None } } else { Outcome::Broken };
                permit.record(outcome, Some(&format!("upstream stream error: {message}")), &self.c.breaker_settings);
            }
            None => {
                permit.record(Outcome::Success, None, &self.c.breaker_settings);
                if let Some(update) = self.c.rotation {
                    update.apply(&self.c.gw);
                }
            }
        }
    }

    /// A failure after bytes reached the client: end the stream with the protocol's own error
    /// event (unless the upstream already sent one) and record a failure.
    fn fail_with_event(mut self, message: String) -> Option<(Result<Bytes, io::Error>, Self)> {
        self.done = true;
        if let Some(permit) = self.permit.take() {
            permit.record(Outcome::Broken, Some(&message), &self.c.breaker_settings);
        }
        if self.c.watch.error.is_some() {
            return None;
        }
        // The client's protocol decides the shape of the error event.
        let event = error_event(Format::native_to(self.c.protocol), &message, &self.c.context);
        Some((Ok(Bytes::from(event)), self))
    }
}
