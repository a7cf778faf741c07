//! The streaming relay (SPEC §6): forwards the upstream's bytes chunk by chunk as they arrive
//! (unchanged when no conversion applies; converted event by event otherwise — never buffered
//! beyond the held preamble) while an observer checks for the protocol's terminal event,
//! upstream error events and silence. The stream's outcome goes to the endpoint's breaker when
//! it ends; a client that goes away drops the relay, which cancels the upstream request and
//! records a neutral outcome. A stream cut before its end may be continued on another endpoint
//! into the same client stream (`resume.rs`): the relay then runs the request's attempt loop
//! again and, when a continuation commits, relays it in place of the broken upstream.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame};
use tokio::time::{Instant, Sleep};

use crate::breaker::Permit;
use crate::endpoint::EndpointId;
use crate::observe::record::Tokens;

use super::observer::Committed;
use super::outcome::{self, StreamEnd, classify_network_error};
use super::resume::{self, Delivered};
use super::run::{Ended, Run};

/// Laid out in this order (`repr(C)`): what every event reads first, then the committed
/// stream with its observer at the front; see [`Relay`].
#[repr(C)]
struct RelayState {
    pending: VecDeque<Bytes>,
    done: bool,
    c: Committed,
    /// The permit, until the outcome is recorded.
    permit: Option<Permit>,
    /// Usage of the attempts this stream continues (cut, then resumed).
    carried: Tokens,
}

/// What continuing a cut stream needs: the request's attempt loop, moved here from the handler,
/// and the bytes the client has received.
///
/// `delivered`, which every event writes, first (`repr(C)`); see [`Relay`].
#[repr(C)]
pub(super) struct ResumePlan {
    /// The client's bytes so far; `None` once over [`resume::MAX_DELIVERED_BYTES`].
    delivered: Option<Vec<u8>>,
    run: Option<Box<Run>>,
    /// Attempts a resume may still spend (`stream_resume_attempts`).
    attempts_left: u32,
    /// The endpoint whose stream is being relayed.
    endpoint: EndpointId,
    /// Why the stream was cut, while a continuation is being looked for.
    cut: Option<String>,
    /// The request's attempt count when the continuation search began.
    attempts_before: usize,
    /// The client's bytes of the chunk that carried an upstream error event, held back while a
    /// continuation is looked for: the client gets them if none is found.
    withheld: Option<Bytes>,
}

impl ResumePlan {
    pub fn new(run: Box<Run>, endpoint: EndpointId, attempts: u32) -> Self {
        ResumePlan {
            delivered: Some(Vec::new()),
            run: Some(run),
            attempts_left: attempts,
            endpoint,
            cut: None,
            attempts_before: 0,
            withheld: None,
        }
    }

    fn note_delivered(&mut self, chunk: &[u8]) {
        if let Some(d) = &mut self.delivered {
            if d.len() + chunk.len() > resume::MAX_DELIVERED_BYTES {
                self.delivered = None;
            } else {
                d.extend_from_slice(chunk);
            }
        }
    }
}

/// The attempt loop looking for a continuation, and the loop given back with how it ended.
type Continuing = Pin<Box<dyn Future<Output = (Box<Run>, Ended)> + Send>>;

pub(super) fn relay(
    mut committed: Committed,
    permit: Permit,
    upstream: super::upstream::UpstreamBody,
    resume: Option<ResumePlan>,
) -> Relay {
    let pending: VecDeque<Bytes> = std::mem::take(&mut committed.held).into();
    let idle = committed.idle_timeout.map(IdleWatch::new);
    let cap = committed.max_duration.map(|d| (d, Box::pin(tokio::time::sleep(d))));
    Relay {
        s: RelayState { pending, done: false, c: committed, permit: Some(permit), carried: Tokens::default() },
        upstream,
        idle,
        cap,
        after_terminal: None,
        resume,
        continuing: None,
    }
}

/// The client's side of a committed stream: the upstream's chunks as they arrive (observed,
/// maybe converted), then the outcome recorded when it ends. It is the response body itself
/// (the upstream body polled directly, no stream adapters in between: every layer is paid on
/// every event of every stream).
///
/// With a thousand streams open, an event's cost is mostly the cache lines it touches that
/// another stream's events evicted since. So the fields each event reads come first and
/// together, in this order (`repr(C)`; Rust's own layout sorts fields by alignment and
/// scattered them over the struct's 22 lines): the upstream body, the timers, the resume's
/// byte count, then the state with the observer.
#[repr(C)]
pub struct Relay {
    upstream: super::upstream::UpstreamBody,
    idle: Option<IdleWatch>,
    /// The stream's longest allowed duration and its timer, when capped.
    cap: Option<(Duration, Pin<Box<Sleep>>)>,
    /// Armed when the terminal event has gone to the client: how long the upstream may still
    /// take to close before the client's stream ends anyway.
    after_terminal: Option<Pin<Box<Sleep>>>,
    continuing: Option<Continuing>,
    /// How the stream may be continued if it is cut (`None`: it may not).
    resume: Option<ResumePlan>,
    s: RelayState,
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
    /// A chunk came since the last `poll_expired` (`last_data` is that chunk's time).
    fresh: bool,
    /// What the timer is set for, kept here so that an event need not read the timer.
    deadline: Instant,
    timer: Pin<Box<Sleep>>,
    /// The waker the armed timer will wake: while it is the task's and the timer has not fired,
    /// polling the timer again would only re-register the same waker (once per event).
    armed_for: Option<Waker>,
}

impl IdleWatch {
    fn new(limit: Duration) -> Self {
        let now = Instant::now();
        let deadline = now + limit;
        let timer = Box::pin(tokio::time::sleep_until(deadline));
        Self { limit, last_data: now, fresh: false, deadline, timer, armed_for: None }
    }

    /// A chunk came now.
    fn data(&mut self) {
        self.last_data = Instant::now();
        self.fresh = true;
    }

    /// `Ready` once no data came for `limit`; otherwise `Pending` with the timer armed.
    fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let armed = self.armed_for.as_ref().is_some_and(|w| w.will_wake(cx.waker()));
        // Right after a chunk, a deadline still ahead of the chunk's time means the timer had
        // not fired by then, so it need not be read (it lives in a block of its own: with many
        // streams open, a cache miss per event). Should it fire after that, its wake-up polls
        // again without a fresh chunk, and the timer is read then.
        let fresh = std::mem::take(&mut self.fresh);
        if armed && ((fresh && self.deadline > self.last_data) || !self.timer.is_elapsed()) {
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
            self.deadline = deadline;
            self.timer.as_mut().reset(deadline);
        }
    }
}

impl Relay {
    /// The stream broke before its end: continue it elsewhere if it can be, else end it with
    /// the protocol's error event.
    fn cut(&mut self, message: String) {
        match self.start_resume(&message) {
            Some(continuing) => self.continuing = Some(continuing),
            None => self.s.fail(message),
        }
    }

    /// Settle the cut attempt and start the attempt loop on the rest of the candidates, when
    /// what the client has is text that can be continued (SPEC §6, §15.3).
    fn start_resume(&mut self, message: &str) -> Option<Continuing> {
        let plan = self.resume.as_mut()?;
        if plan.attempts_left == 0 || self.s.c.observer.watch.terminal || self.s.permit.is_none() {
            return None;
        }
        let refusal = match &plan.delivered {
            None => Some("the answer was longer than a resume keeps"),
            Some(bytes) => {
                let delivered = Delivered::from_client_bytes(self.s.c.observer.client, bytes);
                match delivered.refusal {
                    None => {
                        plan.cut = Some(message.to_string());
                        return self.s.hand_over(plan, message, delivered);
                    }
                    why => why,
                }
            }
        };
        if let (Some(why), Some(t)) = (refusal, self.s.c.trail.as_mut()) {
            t.note_resume(&format!("not resumed: {why}"));
        }
        self.resume = None;
        None
    }

    /// The continuation search ended: relay the continuation, or end the client's stream.
    fn resumed(&mut self, mut run: Box<Run>, ended: Ended) {
        let Some(plan) = self.resume.as_mut() else { return };
        let cut = plan.cut.take().unwrap_or_default();
        match ended {
            Ended::Stream(stream) => {
                let stream = *stream;
                let mut trail = run.trail.take();
                if let Some(t) = trail.as_mut() {
                    t.stream_committed(stream.status.as_u16());
                }
                let spent = run.attempts_made().saturating_sub(plan.attempts_before);
                plan.attempts_left = plan.attempts_left.saturating_sub(u32::try_from(spent).unwrap_or(u32::MAX));
                plan.endpoint = stream.endpoint_id;
                plan.run = Some(run);
                let mut committed = stream.committed;
                committed.trail = trail;
                self.s.pending.extend(std::mem::take(&mut committed.held));
                self.idle = committed.idle_timeout.map(IdleWatch::new);
                self.s.c = committed;
                self.s.permit = Some(stream.permit);
                self.upstream = stream.upstream;
            }
            Ended::Answer(_) => {
                // No continuation: the client's stream ends as it would have without one.
                self.s.c.trail = run.trail.take();
                let withheld = plan.withheld.take();
                self.resume = None;
                self.s.end_cut(&format!("{cut}; continuing the answer on another endpoint failed"), withheld);
            }
        }
    }
}

impl Body for Relay {
    type Data = Bytes;
    /// Never produced (a broken upstream ends the stream with the protocol's error event); axum's
    /// own error type lets `respond` hand the relay to axum without an error-mapping layer.
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        loop {
            if let Some(chunk) = this.s.pending.pop_front() {
                if let Some(plan) = &mut this.resume {
                    plan.note_delivered(&chunk);
                }
                return Poll::Ready(Some(Ok(Frame::data(chunk))));
            }
            if let Some(continuing) = &mut this.continuing {
                let (run, ended) = ready!(continuing.as_mut().poll(cx));
                this.continuing = None;
                this.resumed(run, ended);
                continue;
            }
            if this.s.done {
                return Poll::Ready(None);
            }
            let polled = this.upstream.poll_data(cx);
            if polled.is_pending()
                && let Some(grace) = &mut this.after_terminal
                && grace.as_mut().poll(cx).is_ready()
            {
                this.s.finish();
                continue;
            }
            if let Some((limit, timer)) = &mut this.cap {
                let over = if polled.is_pending() { timer.as_mut().poll(cx).is_ready() } else { timer.is_elapsed() };
                if over {
                    // The configured ceiling ends the stream; it is not continued elsewhere.
                    let limit = limit.as_secs_f64();
                    this.cap = None;
                    this.s.fail(format!("the stream lasted longer than max_stream_duration_secs ({limit:.0} s)"));
                    continue;
                }
            }
            let next = match polled {
                Poll::Ready(next) => {
                    if let Some(idle) = &mut this.idle {
                        idle.data();
                    }
                    next
                }
                Poll::Pending => match &mut this.idle {
                    Some(idle) => {
                        ready!(idle.poll_expired(cx));
                        let limit = idle.limit.as_secs_f64();
                        this.cut(format!("the upstream stream was idle for more than {limit:.1} s"));
                        continue;
                    }
                    None => return Poll::Pending,
                },
            };
            let s = &mut this.s;
            match next {
                Some(Ok(chunk)) => {
                    let out = s.c.observer.chunk(chunk);
                    if let Some(problem) = s.c.observer.watch.malformed.clone() {
                        // The chunk completing the problem is not relayed: the client gets the
                        // stream up to here, then its protocol's error event.
                        this.cut(problem);
                        continue;
                    }
                    if let Some(error) = &s.c.observer.watch.error
                        && !s.c.observer.watch.terminal
                        && this.resume.is_some()
                    {
                        // An error event mid-stream: with a resume possible, the chunk that
                        // carries it is held back (what the client has is rebuilt from what it
                        // was sent, so nothing before the error in it is lost).
                        let message = format!("upstream stream error: {}", error.message);
                        if let Some(continuing) = this.start_resume(&message) {
                            this.continuing = Some(continuing);
                            if let Some(plan) = &mut this.resume {
                                plan.withheld = out;
                            }
                            continue;
                        }
                    }
                    let s = &mut this.s;
                    if s.c.observer.watch.terminal && this.after_terminal.is_none() {
                        // The protocol's terminal event goes to the client now: the answer is
                        // complete, whatever the client does next (the OpenAI SDK closes the
                        // connection as soon as it reads `data: [DONE]`).
                        s.complete();
                        this.after_terminal = Some(Box::pin(tokio::time::sleep(AFTER_TERMINAL_GRACE)));
                    }
                    if let Some(out) = out {
                        if let Some(plan) = &mut this.resume {
                            plan.note_delivered(&out);
                        }
                        return Poll::Ready(Some(Ok(Frame::data(out))));
                    }
                }
                Some(Err(e)) => {
                    if s.c.observer.watch.terminal {
                        s.finish();
                        continue;
                    }
                    let kind = classify_network_error(&e);
                    this.cut(format!("{} mid-stream", kind.describe()));
                }
                None => match s.c.observer.clean_end() {
                    Some(tail) => {
                        s.finish();
                        if !tail.is_empty() {
                            s.pending.push_back(tail);
                        }
                    }
                    None => this.cut("the upstream stream ended without its terminal event".to_string()),
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.s.done && self.s.pending.is_empty() && self.continuing.is_none()
    }
}

impl Drop for RelayState {
    /// The client went away mid-stream (a stream that ended has given its trail up already): its
    /// record keeps the usage of what was delivered, which is what its client key is charged.
    fn drop(&mut self) {
        if let Some(trail) = self.c.trail.take() {
            let usage = &self.c.observer.usage;
            let model = usage.model().map(str::to_string);
            trail.cut_by_client(self.carried.plus(usage.tokens()), model, &self.c.snapshot);
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
        if let Some(mut trail) = self.c.trail.take() {
            let usage = &self.c.observer.usage;
            trail.stream_ended(outcome.classification(), note, transition.as_ref());
            trail.close_stream(&self.c.snapshot, note, self.carried.plus(usage.tokens()), usage.model());
        }
    }

    /// Settle the cut attempt as a failure and give the request's record and loop what a
    /// continuation needs; the loop runs as the returned future.
    fn hand_over(&mut self, plan: &mut ResumePlan, message: &str, delivered: Delivered) -> Option<Continuing> {
        let mut run = plan.run.take()?;
        let error = self.c.observer.watch.error.as_ref().map(|e| e.rate_limited);
        let outcome = outcome::stream_end(error, StreamEnd::Broken);
        let transition = self
            .permit
            .take()
            .and_then(|permit| permit.record(outcome.breaker(), Some(message), &self.c.breaker_settings));
        self.carried = self.carried.plus(self.c.observer.usage.tokens());
        plan.attempts_before = run.attempts_made();
        let mut trail = self.c.trail.take();
        if let Some(t) = trail.as_mut() {
            t.note_resume(&format!("cut: {message}; the answer goes on elsewhere"));
            t.stream_ended(outcome.classification(), Some(message), transition.as_ref());
        }
        run.trail = trail;
        run.prepare_resume(std::sync::Arc::new(delivered), plan.endpoint, plan.attempts_left);
        let cut = plan.endpoint;
        Some(Box::pin(async move {
            let ended = run.attempts(Some(cut)).await;
            (run, ended)
        }))
    }

    /// A cut stream that could not be continued: its protocol's error event (or the upstream's
    /// own, `withheld`), the record closed.
    fn end_cut(&mut self, message: &str, withheld: Option<Bytes>) {
        self.done = true;
        let event = withheld.unwrap_or_else(|| self.c.observer.error_event(message));
        self.pending.push_back(event);
        if let Some(trail) = self.c.trail.take() {
            trail.close_stream(&self.c.snapshot, Some(message), self.carried, self.c.observer.usage.model());
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

#[cfg(test)]
mod tests {
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    use super::IdleWatch;
    use crate::test_waker::counting_waker;

    fn poll(idle: &mut IdleWatch, waker: &Waker) -> Poll<()> {
        idle.poll_expired(&mut Context::from_waker(waker))
    }

    async fn advance_ms(ms: u64) {
        tokio::time::advance(Duration::from_millis(ms)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn chunks_keep_a_stream_alive_and_silence_for_the_limit_ends_it() {
        let mut idle = IdleWatch::new(Duration::from_secs(10));
        let (_, waker) = counting_waker();
        assert!(poll(&mut idle, &waker).is_pending());
        // A chunk every 4 s for 40 s: four times the limit, never silent for it.
        for _ in 0..10 {
            advance_ms(4_000).await;
            idle.data();
            assert!(poll(&mut idle, &waker).is_pending());
            assert!(poll(&mut idle, &waker).is_pending(), "the wake-up of a timer that fired early");
        }
        advance_ms(9_999).await;
        assert!(poll(&mut idle, &waker).is_pending());
        advance_ms(1).await;
        assert!(poll(&mut idle, &waker).is_ready());
    }

    #[tokio::test(start_paused = true)]
    async fn a_timer_that_fires_just_after_a_chunk_is_read_on_its_own_wake_up() {
        let mut idle = IdleWatch::new(Duration::from_secs(10));
        let (wakes, waker) = counting_waker();
        assert!(poll(&mut idle, &waker).is_pending());
        advance_ms(9_999).await;
        idle.data();
        advance_ms(2).await;
        assert_eq!(wakes.count(), 1, "the timer fired at 10 s");
        // The poll right after the chunk does not look at the timer; its wake-up's poll does,
        // and sets it for ten seconds after the chunk.
        assert!(poll(&mut idle, &waker).is_pending());
        assert!(poll(&mut idle, &waker).is_pending());
        advance_ms(9_997).await;
        assert_eq!(wakes.count(), 1);
        assert!(poll(&mut idle, &waker).is_pending());
        advance_ms(1).await;
        assert_eq!(wakes.count(), 2, "the timer was set again for 19.999 s");
        assert!(poll(&mut idle, &waker).is_ready());
    }

    #[tokio::test(start_paused = true)]
    async fn a_timer_that_fired_before_a_chunk_is_set_again_by_the_poll_after_it() {
        let mut idle = IdleWatch::new(Duration::from_secs(10));
        let (wakes, waker) = counting_waker();
        assert!(poll(&mut idle, &waker).is_pending());
        advance_ms(10_500).await;
        assert_eq!(wakes.count(), 1);
        // The wake-up's poll finds a chunk first: the timer has fired, and only reading it
        // shows that it must be set again (nothing else would wake the stream).
        idle.data();
        assert!(poll(&mut idle, &waker).is_pending());
        advance_ms(10_000).await;
        assert_eq!(wakes.count(), 2, "the timer was set again for 20.5 s");
        assert!(poll(&mut idle, &waker).is_ready());
    }
}
