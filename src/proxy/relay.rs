//! The streaming relay (SPEC §6): forwards the upstream's bytes chunk by chunk as they arrive
//! (unchanged when no conversion applies; converted event by event otherwise — never buffered
//! beyond the held preamble) while an observer checks for the protocol's terminal event,
//! upstream error events and silence. The stream's outcome goes to the endpoint's breaker when
//! it ends; a client that goes away drops the relay, which cancels the upstream request and
//! records a neutral outcome.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame};
use tokio::time::{Instant, Sleep};

use crate::breaker::Permit;
use crate::config::BreakerSettings;
use crate::convert::StreamConversion;
use crate::gateway::Gateway;
use crate::observe::usage::StreamUsage;
use crate::protocol::Format;
use crate::protocol::errors::{ErrorKind, stream_error_event};
use crate::protocol::sse::SseScanner;
use crate::protocol::stream_events::{EventKind, StreamContext, inspect_and_observe};
use crate::routing::RotationUpdate;
use crate::snapshot::Snapshot;

use super::outcome::{self, StreamEnd, classify_network_error};
use super::respond;
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
                self.scanner.feed(&chunk, |event| {
                    watch.observe(&inspect_and_observe(format, &event, context));
                    usage.observe(format, &event);
                });
                Some(chunk)
            }
            Transform::Convert(conversion) => {
                let mut out = Vec::new();
                self.scanner.feed(&chunk, |event| {
                    watch.observe(&inspect_and_observe(format, &event, context));
                    usage.observe(format, &event);
                    conversion.event(&event, &mut out);
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

struct RelayState {
    c: Committed,
    pending: VecDeque<Bytes>,
    /// The permit, until the outcome is recorded.
    permit: Option<Permit>,
    done: bool,
}

pub fn relay<B>(mut committed: Committed, permit: Permit, upstream: B) -> Relay<B>
where
    B: Body<Data = Bytes, Error = hyper::Error> + Send + Unpin + 'static,
{
    let pending: VecDeque<Bytes> = std::mem::take(&mut committed.held).into();
    let idle = committed.idle_timeout.map(IdleWatch::new);
    let cap = committed.max_duration.map(|d| (d, Box::pin(tokio::time::sleep(d))));
    Relay {
        s: RelayState { c: committed, pending, permit: Some(permit), done: false },
        upstream,
        idle,
        cap,
        after_terminal: None,
    }
}

/// The client's side of a committed stream: the upstream's chunks as they arrive (observed,
/// maybe converted), then the outcome recorded when it ends. It is the response body itself
/// (the upstream body polled directly, no stream adapters in between: every layer is paid on
/// every event of every stream).
pub struct Relay<B> {
    s: RelayState,
    upstream: B,
    idle: Option<IdleWatch>,
    /// The stream's longest allowed duration and its timer, when capped.
    cap: Option<(Duration, Pin<Box<Sleep>>)>,
    /// Armed when the terminal event has gone to the client: how long the upstream may still
    /// take to close before the client's stream ends anyway.
    after_terminal: Option<Pin<Box<Sleep>>>,
}

/// After its terminal event an upstream normally closes at once (its connection then goes back
/// to the pool); one that keeps it open must not keep the client waiting on a finished answer.
const AFTER_TERMINAL_GRACE: Duration = Duration::from_secs(1);

/// The idle timeout without a timer operation per chunk: a chunk only notes the time; the one
/// timer is re-armed when it fires early (at most once per idle period). Arming a timer per
/// chunk cost a timer-wheel insert and removal for every event of every stream.
struct IdleWatch {
    limit: Duration,
    last_data: Instant,
    timer: Pin<Box<Sleep>>,
    /// The waker the armed timer will wake: while it is the task's and the timer has not fired,
    /// polling the timer again would only re-register the same waker (once per event).
    armed_for: Option<Waker>,
}

impl IdleWatch {
    fn new(limit: Duration) -> Self {
        let now = Instant::now();
        Self { limit, last_data: now, timer: Box::pin(tokio::time::sleep_until(now + limit)), armed_for: None }
    }

    /// `Ready` once no data came for `limit`; otherwise `Pending` with the timer armed.
    fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let armed = self.armed_for.as_ref().is_some_and(|w| w.will_wake(cx.waker()));
        if armed && !self.timer.is_elapsed() {
            return Poll::Pending;
        }
        loop {
            if self.timer.as_mut().poll(cx).is_pending() {
                self.armed_for = Some(cx.waker().clone());
                return Poll::Pending;
            }
            let deadline = self.last_data + self.limit;
            if Instant::now() >= deadline {
                return Poll::Ready(());
            }
            self.timer.as_mut().reset(deadline);
        }
    }
}

impl<B> Body for Relay<B>
where
    B: Body<Data = Bytes, Error = hyper::Error> + Unpin,
{
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        let s = &mut this.s;
        loop {
            if let Some(chunk) = s.pending.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(chunk))));
            }
            if s.done {
                return Poll::Ready(None);
            }
            let polled = Pin::new(&mut this.upstream).poll_frame(cx);
            if polled.is_pending()
                && let Some(grace) = &mut this.after_terminal
                && grace.as_mut().poll(cx).is_ready()
            {
                s.finish();
                continue;
            }
            if let Some((limit, timer)) = &mut this.cap {
                let over = if polled.is_pending() { timer.as_mut().poll(cx).is_ready() } else { timer.is_elapsed() };
                if over {
                    let limit = limit.as_secs_f64();
                    this.cap = None;
                    s.fail(format!("the stream lasted longer than max_stream_duration_secs ({limit:.0} s)"));
                    continue;
                }
            }
            let next = match polled {
                Poll::Ready(next) => {
                    if let Some(idle) = &mut this.idle {
                        idle.last_data = Instant::now();
                    }
                    next
                }
                Poll::Pending => match &mut this.idle {
                    Some(idle) => {
                        ready!(idle.poll_expired(cx));
                        let limit = idle.limit.as_secs_f64();
                        s.fail(format!("the upstream stream was idle for more than {limit:.1} s"));
                        continue;
                    }
                    None => return Poll::Pending,
                },
            };
            match next {
                Some(Ok(frame)) => {
                    // Trailers carry nothing a client of these protocols reads.
                    let Ok(chunk) = frame.into_data() else { continue };
                    let out = s.c.observer.chunk(chunk);
                    if let Some(problem) = s.c.observer.watch.malformed.clone() {
                        // The chunk completing the problem is not relayed: the client gets the
                        // stream up to here, then its protocol's error event.
                        s.fail(problem);
                        continue;
                    }
                    if s.c.observer.watch.terminal && this.after_terminal.is_none() {
                        // The protocol's terminal event goes to the client now: the answer is
                        // complete, whatever the client does next (the OpenAI SDK closes the
                        // connection as soon as it reads `data: [DONE]`).
                        s.complete();
                        this.after_terminal = Some(Box::pin(tokio::time::sleep(AFTER_TERMINAL_GRACE)));
                    }
                    if let Some(out) = out {
                        return Poll::Ready(Some(Ok(Frame::data(out))));
                    }
                }
                Some(Err(e)) => {
                    if s.c.observer.watch.terminal {
                        s.finish();
                        continue;
                    }
                    let kind = classify_network_error(&e);
                    s.fail(format!("{} mid-stream", kind.describe()));
                }
                None => match s.c.observer.clean_end() {
                    Some(tail) => {
                        s.finish();
                        if !tail.is_empty() {
                            s.pending.push_back(tail);
                        }
                    }
                    None => s.fail("the upstream stream ended without its terminal event".to_string()),
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.s.done && self.s.pending.is_empty()
    }
}

impl Drop for RelayState {
    /// The client went away mid-stream (a stream that ended has given its trail up already): its
    /// record keeps the usage of what was delivered, which is what its client key is charged.
    fn drop(&mut self) {
        if let Some(trail) = self.c.trail.take() {
            respond::stream_cut_by_client(trail, &self.c.snapshot, &self.c.observer.usage);
        }
    }
}

impl RelayState {
    /// Record the stream's outcome: success unless the upstream reported an error in it.
    fn finish(&mut self) {
        self.done = true;
        self.complete();
    }

    /// Record the outcome of a stream that reached its end (once; later calls do nothing).
    fn complete(&mut self) {
        if self.permit.is_none() {
            return;
        }
        let error = self.c.observer.watch.error.clone();
        let note = error.as_ref().map(|e| format!("upstream stream error: {}", e.message));
        let outcome = outcome::stream_end(error.map(|e| e.rate_limited), StreamEnd::Complete);
        self.settle(outcome, note.as_deref());
    }

    /// Record the stream's outcome in the breaker and the trail; after a success elsewhere
    /// than where the request started, move the current endpoint (SPEC §3).
    fn settle(&mut self, outcome: outcome::AttemptOutcome, note: Option<&str>) {
        let Some(permit) = self.permit.take() else { return };
        let transition = permit.record(outcome.breaker(), note, &self.c.breaker_settings);
        if outcome.is_success()
            && let Some(update) = self.c.rotation
        {
            update.apply(&self.c.gw.rotation);
        }
        if let Some(trail) = self.c.trail.take() {
            let usage = &self.c.observer.usage;
            respond::stream_ended(trail, &self.c.snapshot, outcome.classification(), note, transition.as_ref(), usage);
        }
    }

    /// A failure after bytes reached the client: end the stream with the protocol's own error
    /// event (unless the upstream already sent one) and record a failure.
    fn fail(&mut self, message: String) {
        self.done = true;
        if self.c.observer.watch.terminal {
            // The client already has the whole answer; what the upstream does after its
            // terminal event changes nothing.
            self.complete();
            return;
        }
        let outcome =
            outcome::stream_end(self.c.observer.watch.error.as_ref().map(|e| e.rate_limited), StreamEnd::Broken);
        self.settle(outcome, Some(&message));
        if self.c.observer.watch.error.is_none() {
            let event = self.c.observer.error_event(&message);
            self.pending.push_back(event);
        }
    }
}
