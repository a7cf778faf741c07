//! One client connection, and the limits hyper's HTTP/1 server does not enforce on its own.
//!
//! hyper has one timer, `header_read_timeout`, and it also runs while a kept-alive connection
//! waits for its next request, so it cannot tell "slow headers" (10 s) from "idle between
//! requests" (75 s). ccmesh keeps the timers itself, in two small wrappers that share one
//! [`Activity`]:
//! - [`TimedIo`] wraps the socket. Whenever no request is being served it holds a deadline: the
//!   header deadline from when a request's head first has to be waited for (or from the opening
//!   of the connection, so a client that connects and sends nothing is closed too), else the
//!   keep-alive deadline from the end of the last request. It enforces it where hyper waits for
//!   those bytes, in `poll_read`; while a request is served it only keeps its timer armed early
//!   enough for the keep-alive deadline to come: a stream's events read no clock, and the end of
//!   a request notes the time but wakes nothing.
//!   It also gives hyper's automatic rejections (400 for a malformed head, 414, 431), which hyper
//!   writes with an empty body, a short JSON body that says what was wrong.
//! - [`Counted`] wraps the service: it marks a request in flight from the call until its
//!   response body is dropped, bounds the pauses within the request body
//!   (`limits.body_read_timeout_secs`), and on a connection past `limits.max_connections`
//!   answers everything but `/health` and `/api/status` at once with 503 (SPEC §15.8).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::{Request, Response, StatusCode};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::sliced::Sliced;

/// What the socket wrapper and the service wrapper of one connection share.
pub struct Activity {
    /// Requests handed to the service whose response body is not yet dropped.
    in_flight: AtomicU32,
    /// Requests handed to the service so far (wraps; only compared for change).
    calls: AtomicU32,
    /// Times the connection became idle after serving (wraps; only compared for change).
    idled: AtomicU32,
    /// When it last became idle, in nanoseconds after `opened`.
    idle_after: AtomicU64,
    opened: Instant,
}

impl Activity {
    /// A connection's activity, from the moment it opened (now).
    pub fn opened_now() -> Self {
        Activity {
            in_flight: AtomicU32::new(0),
            calls: AtomicU32::new(0),
            idled: AtomicU32::new(0),
            idle_after: AtomicU64::new(0),
            opened: Instant::now(),
        }
    }

    fn became_idle(&self) {
        let after = u64::try_from(self.opened.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.idle_after.store(after, Ordering::Release);
        self.idled.fetch_add(1, Ordering::AcqRel);
    }

    fn idle_since(&self) -> Instant {
        self.opened + Duration::from_nanos(self.idle_after.load(Ordering::Acquire))
    }
}

/// The timers of [`TimedIo`].
#[derive(Clone, Copy, Debug)]
pub struct ConnTimers {
    pub header_read: Duration,
    pub keepalive: Duration,
}

/// The client socket, with the header and keep-alive deadlines (module docs).
///
/// The timer may be armed earlier than the deadline that applies: it then wakes the connection
/// early, and the deadline is worked out again. That is what lets a request end without waking
/// the connection (a wake-up is a whole extra pass through hyper's connection for every
/// request): while a request is served, the timer is kept armed no later than the keep-alive
/// deadline that will follow it, so it fires in time whether or not another request comes.
///
/// A stream's every event passes through `poll_read` (hyper looks for the client closing), so
/// what that reads while a request is served comes first, in this order (`repr(C)`): with many
/// streams open, each cache line it touches is a miss.
#[repr(C)]
pub struct TimedIo<T> {
    io: T,
    activity: Arc<Activity>,
    timer: Option<Pin<Box<Sleep>>>,
    /// The deadline the timer is armed for, and the wait that was added to a past instant to
    /// make it: a wait no longer than `keepalive` proves it no later than any keep-alive
    /// deadline still to come.
    armed: Option<(Instant, Duration)>,
    timers: ConnTimers,
    /// When the connection last became idle (at first: when it opened).
    idle_since: Instant,
    /// Whether a request has been served on it (the first wait is bounded by the header timer).
    served: bool,
    seen_idled: u32,
    /// A request head being read: the call count when its first bytes came, and when a read
    /// first had to wait for more of it (where its header timer starts).
    head: Option<(u32, Option<Instant>)>,
    /// A rewritten automatic rejection still to be written, and how much of it has been.
    rejection: Option<(Bytes, usize)>,
}

impl<T> TimedIo<T> {
    pub fn new(io: T, activity: Arc<Activity>, timers: ConnTimers) -> Self {
        TimedIo {
            io,
            idle_since: activity.opened,
            activity,
            timer: None,
            armed: None,
            timers,
            served: false,
            seen_idled: 0,
            head: None,
            rejection: None,
        }
    }

    /// The deadline of an idle connection (none is being served) and the wait it adds.
    fn idle_deadline(&mut self) -> (Instant, Duration) {
        let idled = self.activity.idled.load(Ordering::Acquire);
        if idled != self.seen_idled {
            self.seen_idled = idled;
            self.served = true;
            self.idle_since = self.activity.idle_since();
        }
        let calls = self.activity.calls.load(Ordering::Acquire);
        match &mut self.head {
            // The head being read has not reached the service yet.
            Some((at_calls, started)) if *at_calls == calls => {
                let started = *started.get_or_insert_with(Instant::now);
                (started + self.timers.header_read, self.timers.header_read)
            }
            _ => {
                self.head = None;
                let wait = if self.served { self.timers.keepalive } else { self.timers.header_read };
                (self.idle_since + wait, wait)
            }
        }
    }

    /// Arm the timer for `deadline`, made by adding `wait` to a past instant.
    fn arm(&mut self, deadline: Instant, wait: Duration) -> Pin<&mut Sleep> {
        let timer = self.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        timer.as_mut().reset(deadline);
        self.armed = Some((deadline, wait));
        timer.as_mut()
    }

    fn timer_fired(&self) -> bool {
        self.timer.as_ref().is_none_or(|t| t.is_elapsed())
    }

    /// The socket has nothing to read: keep the timer right, and time out an idle connection
    /// whose deadline has passed.
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let keepalive = self.timers.keepalive;
        if self.activity.in_flight.load(Ordering::Acquire) > 0 {
            // Serving: no deadline applies, but the one after this request will.
            let in_time = self.armed.is_some_and(|(_, wait)| wait <= keepalive) && !self.timer_fired();
            if !in_time {
                // Polled once so that it wakes this task; it cannot have passed yet.
                let _ = self.arm(Instant::now() + keepalive, keepalive).poll(cx);
            }
            return Poll::Pending;
        }
        let (deadline, wait) = self.idle_deadline();
        let due_sooner = self.armed.is_none_or(|(armed, _)| deadline < armed);
        if due_sooner || self.timer_fired() {
            self.arm(deadline, wait);
        }
        loop {
            let Some(timer) = self.timer.as_mut() else { return Poll::Pending };
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            // Fired: for the deadline, or early for one that has moved later since.
            if self.armed.is_some_and(|(armed, _)| armed >= deadline) {
                let what = if self.head.is_some() || !self.served {
                    "the request headers did not arrive within limits.header_read_timeout_secs"
                } else {
                    "the connection was idle longer than limits.keepalive_timeout_secs"
                };
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, what)));
            }
            self.arm(deadline, wait);
        }
    }

    /// Whether hyper is about to answer a request head it could not parse (it never reached
    /// the service, so nothing else can be writing now).
    fn rejecting_a_head(&self) -> bool {
        let calls = self.activity.calls.load(Ordering::Acquire);
        self.activity.in_flight.load(Ordering::Acquire) == 0 && self.head.is_some_and(|(at_calls, _)| at_calls == calls)
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for TimedIo<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before
                    && this.head.is_none()
                    && this.activity.in_flight.load(Ordering::Acquire) == 0
                {
                    this.head = Some((this.activity.calls.load(Ordering::Acquire), None));
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match this.poll_deadline(cx) {
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                _ => Poll::Pending,
            },
            other => other,
        }
    }
}

impl<T: AsyncWrite + Unpin> TimedIo<T> {
    /// Write what is left of a rewritten rejection; `Ready(Ok)` once it is all out.
    fn poll_rejection(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, written)) = &mut self.rejection {
            if *written >= bytes.len() {
                self.rejection = None;
                break;
            }
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &bytes[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        Poll::Ready(Ok(()))
    }

    /// Replace hyper's empty-bodied automatic rejection by one with a JSON body; `None` when
    /// `head` is not one.
    fn rewrite_rejection(&mut self, head: &[u8]) -> Option<usize> {
        if !self.rejecting_a_head() {
            return None;
        }
        let status = automatic_rejection_status(head)?;
        self.rejection = Some((rejection_response(status), 0));
        Some(head.len())
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for TimedIo<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        ready!(this.poll_rejection(cx))?;
        if let Some(consumed) = this.rewrite_rejection(buf) {
            ready!(this.poll_rejection(cx))?;
            return Poll::Ready(Ok(consumed));
        }
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        ready!(this.poll_rejection(cx))?;
        if let Some(first) = bufs.iter().find(|b| !b.is_empty())
            && this.rewrite_rejection(first).is_some()
        {
            ready!(this.poll_rejection(cx))?;
            return Poll::Ready(Ok(bufs.iter().map(|b| b.len()).sum()));
        }
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_rejection(cx))?;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_rejection(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The status of one of hyper's automatic rejections (a complete head, no body, one of the
/// statuses hyper sends for a request it cannot parse), else `None`.
fn automatic_rejection_status(head: &[u8]) -> Option<u16> {
    let rest = head.strip_prefix(b"HTTP/1.1 ")?;
    let status = std::str::from_utf8(rest.get(..3)?).ok()?.parse::<u16>().ok()?;
    let whole_head = head.ends_with(b"\r\n\r\n");
    let empty = head.windows(19).any(|w| w.eq_ignore_ascii_case(b"content-length: 0\r\n"));
    (matches!(status, 400 | 414 | 431) && whole_head && empty).then_some(status)
}

/// What the client is told when the request line or head is rejected: the reason phrase and a
/// JSON body. The shape is Anthropic's error, which the OpenAI SDKs read too (`error.message`);
/// the protocol is unknown when the head is.
fn rejection(status: u16) -> (&'static str, String) {
    let (reason, message) = match status {
        414 => {
            ("URI Too Long", "the request URI is longer than the gateway accepts (16 KiB); shorten the path or query")
        }
        431 => (
            "Request Header Fields Too Large",
            "the request headers are larger than the gateway accepts (at most 100 headers and 64 KiB); send fewer or smaller headers",
        ),
        _ => (
            "Bad Request",
            "the request is not valid HTTP/1.1 (a malformed request line or header, a control character in a header, or a missing, duplicate or invalid Content-Length); fix the client or proxy that sent it",
        ),
    };
    let body = serde_json::json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}});
    (reason, body.to_string())
}

/// The whole response that replaces one of hyper's empty rejections.
fn rejection_response(status: u16) -> Bytes {
    let (reason, body) = rejection(status);
    Bytes::from(format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ))
}

/// Marks a request in flight until its response body is dropped.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn start(activity: &Arc<Activity>) -> InFlight {
        activity.calls.fetch_add(1, Ordering::AcqRel);
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        crate::thread_load::request_started();
        InFlight(activity.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        crate::thread_load::request_ended();
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.became_idle();
        }
    }
}

/// A response body that keeps its request marked in flight while it is being sent, handed to
/// hyper in slices (`Sliced`) so the connection's write buffer keeps its first size.
pub struct CountedBody<B> {
    body: Sliced<B>,
    _in_flight: InFlight,
}

impl<B> CountedBody<B> {
    fn new(body: B, in_flight: InFlight) -> Self {
        CountedBody { body: Sliced::new(body), _in_flight: in_flight }
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for CountedBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Why a request body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RequestBodyError {
    #[error("the request body paused longer than limits.body_read_timeout_secs ({0:.1} s)")]
    Stalled(f64),
    #[error(transparent)]
    Incoming(#[from] hyper::Error),
}

/// The request body, with a bound on each pause between its pieces.
pub struct TimedBody {
    body: Incoming,
    pause: Duration,
    /// Armed at the first pause, re-armed after each piece that arrives.
    timer: Option<Pin<Box<Sleep>>>,
    progressed: bool,
}

impl Body for TimedBody {
    type Data = Bytes;
    type Error = RequestBodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.progressed = true;
                Poll::Ready(frame.map(|f| f.map_err(RequestBodyError::from)))
            }
            Poll::Pending => {
                let deadline = Instant::now() + this.pause;
                let timer = this.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                if std::mem::take(&mut this.progressed) {
                    timer.as_mut().reset(deadline);
                }
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(RequestBodyError::Stalled(this.pause.as_secs_f64())))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The client's address, on requests outside the proxy paths (the admin API and the dashboard
/// use it; the proxy path does not pay for it).
#[derive(Clone, Copy, Debug)]
pub struct ClientAddr(pub std::net::SocketAddr);

/// The connection's service: in-flight accounting, the body timer, and the overload answer.
pub struct Counted<S> {
    pub inner: S,
    /// The gateway whose proxy paths are served straight from here, past the router
    /// (`server::straight_to_proxy`); `None` sends every request through `inner`.
    pub proxy: Option<Arc<crate::gateway::Gateway>>,
    pub peer: Option<std::net::SocketAddr>,
    pub activity: Arc<Activity>,
    pub body_read_timeout: Duration,
    /// The connection was accepted past `limits.max_connections`.
    pub overloaded: bool,
}

/// Paths that answer even past the connection cap, so the gateway can always be checked on.
fn always_answered(path: &str) -> bool {
    path == "/health" || path == "/api/status"
}

/// The longest request URI the gateway takes (nginx's default line buffer is 8 KiB; API paths
/// and queries are far shorter).
pub const MAX_URI: usize = 16 * 1024;

fn uri_too_long() -> Response<axum::body::Body> {
    let (_, body) = rejection(414);
    let mut response = Response::new(axum::body::Body::from(body));
    *response.status_mut() = StatusCode::URI_TOO_LONG;
    let headers = response.headers_mut();
    headers.insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    headers.insert(hyper::header::CONNECTION, hyper::header::HeaderValue::from_static("close"));
    response
}

fn overloaded_response() -> Response<axum::body::Body> {
    let body = serde_json::json!({"type": "error", "error": {"type": "overloaded_error",
        "message": "the gateway is at limits.max_connections open client connections; retry in a moment"}});
    let mut response = Response::new(axum::body::Body::from(body.to_string()));
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let headers = response.headers_mut();
    headers.insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    headers.insert(hyper::header::RETRY_AFTER, hyper::header::HeaderValue::from_static("1"));
    headers.insert(hyper::header::CONNECTION, hyper::header::HeaderValue::from_static("close"));
    response
}

impl<S> hyper::service::Service<Request<Incoming>> for Counted<S>
where
    S: hyper::service::Service<Request<TimedBody>, Response = Response<axum::body::Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<CountedBody<axum::body::Body>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let in_flight = InFlight::start(&self.activity);
        if request.uri().path_and_query().map_or(0, |pq| pq.as_str().len()) > MAX_URI {
            let response = uri_too_long().map(|body| CountedBody::new(body, in_flight));
            return Box::pin(std::future::ready(Ok(response)));
        }
        if self.overloaded && !always_answered(request.uri().path()) {
            let response = overloaded_response().map(|body| CountedBody::new(body, in_flight));
            return Box::pin(std::future::ready(Ok(response)));
        }
        let pause = self.body_read_timeout;
        let mut request = request.map(|body| TimedBody { body, pause, timer: None, progressed: false });
        if let Some(gw) = &self.proxy
            && crate::server::straight_to_proxy(request.method(), request.uri().path())
        {
            let unstarted = crate::proxy::Unstarted::new(gw.clone(), request.map(axum::body::Body::new));
            // The handler's state lives in the box from the start: its future is created by the
            // box's first poll, inside the box, and this block's own future (as large as all the
            // handler's state) is written into a slot allocated first. Built first and then moved
            // into a box, it would be copied whole.
            let slot = Box::new_uninit();
            let answer: Pin<Box<_>> = Box::into_pin(Box::write(slot, async move {
                let (gw, request) = unstarted.start();
                let response = crate::proxy::handle(axum::extract::State(gw), request).await;
                Ok(response.map(|body| CountedBody::new(body, in_flight)))
            }));
            return answer;
        }
        if let Some(peer) = self.peer
            && !request.uri().path().starts_with("/v1/")
        {
            request.extensions_mut().insert(ClientAddr(peer));
        }
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| CountedBody::new(body, in_flight)))
        })
    }
}

/// Read a whole request body up to `limit` bytes.
pub async fn read_limited(body: axum::body::Body, limit: usize) -> Result<Bytes, ReadBodyError> {
    let mut body = std::pin::pin!(body);
    let mut collected = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(ReadBodyError::from_axum)?;
        if let Ok(data) = frame.into_data() {
            if collected.len() + data.len() > limit {
                return Err(ReadBodyError::TooLarge);
            }
            if collected.is_empty() && body.is_end_stream() {
                return Ok(data);
            }
            collected.extend_from_slice(&data);
        }
    }
    Ok(collected.freeze())
}

/// Why reading a request body failed, as the client should be told.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadBodyError {
    TooLarge,
    /// A pause longer than the body timer.
    Stalled(String),
    /// The client closed the connection before the body was complete: nobody to answer.
    ClientGone,
    /// The framing is broken (bad chunk sizes and the like).
    Malformed(String),
}

impl ReadBodyError {
    fn from_axum(e: axum::Error) -> ReadBodyError {
        let inner = e.into_inner();
        if let Some(e) = inner.downcast_ref::<RequestBodyError>() {
            return match e {
                RequestBodyError::Stalled(_) => ReadBodyError::Stalled(e.to_string()),
                RequestBodyError::Incoming(h) => Self::from_hyper(h),
            };
        }
        if let Some(h) = inner.downcast_ref::<hyper::Error>() {
            return Self::from_hyper(h);
        }
        ReadBodyError::Malformed(inner.to_string())
    }

    fn from_hyper(e: &hyper::Error) -> ReadBodyError {
        if e.is_incomplete_message() || e.is_canceled() || e.is_closed() {
            return ReadBodyError::ClientGone;
        }
        // hyper reports bad chunk framing as an `InvalidData`/`InvalidInput` I/O error; a reset or
        // EOF under the body is the client's connection going away.
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            if let Some(io) = s.downcast_ref::<io::Error>() {
                return match io.kind() {
                    io::ErrorKind::InvalidData | io::ErrorKind::InvalidInput => {
                        ReadBodyError::Malformed(io.to_string())
                    }
                    _ => ReadBodyError::ClientGone,
                };
            }
            source = s.source();
        }
        ReadBodyError::Malformed(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_counts_as_served_on_its_thread_until_its_answer_is_dropped() {
        std::thread::spawn(|| {
            let activity = Arc::new(Activity::opened_now());
            let first = InFlight::start(&activity);
            assert!(crate::thread_load::serving_alone());
            let second = InFlight::start(&activity);
            assert!(!crate::thread_load::serving_alone(), "two requests on the thread");
            drop(second);
            assert!(crate::thread_load::serving_alone());
            drop(first);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn recognises_hypers_automatic_rejections_only() {
        let head = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        assert_eq!(automatic_rejection_status(head), Some(431));
        let head = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(automatic_rejection_status(head), Some(400));
        assert_eq!(automatic_rejection_status(b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\n\r\n"), Some(414));
        // An answer of our own with a body, another status, or an incomplete head is left alone.
        assert_eq!(automatic_rejection_status(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 12\r\n\r\n"), None);
        assert_eq!(automatic_rejection_status(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"), None);
        assert_eq!(automatic_rejection_status(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n"), None);
        assert_eq!(automatic_rejection_status(b"data: HTTP/1.1 400"), None);
    }

    #[test]
    fn the_rewritten_rejection_is_complete_json() {
        let response = rejection_response(431);
        let text = std::str::from_utf8(&response).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 431 "));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert!(json["error"]["message"].as_str().unwrap().contains("headers"));
    }
}

#[cfg(test)]
mod timer_tests {
    use std::task::Waker;

    use tokio::io::{AsyncWriteExt, DuplexStream};

    use super::*;

    use crate::test_waker::{CountWakes, counting_waker};

    /// A connection's socket as hyper drives it: read once, then again only when woken.
    struct Conn {
        io: TimedIo<DuplexStream>,
        activity: Arc<Activity>,
        wakes: Arc<CountWakes>,
        waker: Waker,
        seen_wakes: usize,
        client: DuplexStream,
    }

    impl Conn {
        fn open(header_read: f64, keepalive: f64) -> Conn {
            let (client, server) = tokio::io::duplex(1024);
            let activity = Arc::new(Activity::opened_now());
            let timers = ConnTimers {
                header_read: Duration::from_secs_f64(header_read),
                keepalive: Duration::from_secs_f64(keepalive),
            };
            let (wakes, waker) = counting_waker();
            let io = TimedIo::new(server, activity.clone(), timers);
            Conn { io, activity, wakes, waker, seen_wakes: 0, client }
        }

        fn read(&mut self) -> Poll<io::Result<()>> {
            let mut cx = Context::from_waker(&self.waker);
            let mut space = [0u8; 64];
            let mut buf = ReadBuf::new(&mut space);
            Pin::new(&mut self.io).poll_read(&mut cx, &mut buf)
        }

        /// Whether the connection was woken since this was last asked.
        fn woken(&mut self) -> bool {
            let wakes = self.wakes.count();
            std::mem::replace(&mut self.seen_wakes, wakes) < wakes
        }

        /// hyper's read after a wake-up: why the connection was closed, or `None` (kept open).
        fn read_when_woken(&mut self) -> Option<String> {
            assert!(self.woken(), "the connection was woken to read");
            match self.read() {
                Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::TimedOut => Some(e.to_string()),
                Poll::Pending => None,
                other => panic!("unexpected read: {other:?}"),
            }
        }
    }

    async fn advance(secs: f64) {
        tokio::time::advance(Duration::from_secs_f64(secs)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_ends_without_waking_the_connection_and_its_keepalive_deadline_holds() {
        let mut c = Conn::open(10.0, 75.0);
        // A request arrives with the connection and is served for 5 s.
        let request = InFlight::start(&c.activity);
        assert!(c.read().is_pending());
        advance(5.0).await;
        drop(request);
        assert!(!c.woken(), "the end of a request does not wake the connection");

        // The timer was armed no later than the keep-alive deadline: it fires early (75 s after
        // the request began), and the deadline is worked out again from the end of the request.
        advance(70.0).await;
        assert_eq!(c.read_when_woken(), None, "idle for 70 s of 75");
        advance(4.9).await;
        assert!(!c.woken(), "woken early only once");
        advance(0.1).await;
        let why = c.read_when_woken().expect("closed once idle for 75 s");
        assert!(why.contains("limits.keepalive_timeout_secs"), "{why}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_header_timer_longer_than_the_keepalive_is_cut_back_while_a_request_is_served() {
        let mut c = Conn::open(60.0, 0.5);
        // Nothing sent yet: the header timer (60 s) is armed.
        assert!(c.read().is_pending());
        advance(1.0).await;
        let request = InFlight::start(&c.activity);
        assert!(c.read().is_pending());
        advance(0.2).await;
        drop(request);
        // Idle from 1.2 s: closed at 1.7 s, not 60 s after opening.
        advance(0.4).await;
        assert_eq!(c.read_when_woken(), None, "idle for 0.4 s of 0.5");
        advance(0.1).await;
        let why = c.read_when_woken().expect("closed once idle for 0.5 s");
        assert!(why.contains("limits.keepalive_timeout_secs"), "{why}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_timer_that_fires_during_a_long_request_is_armed_again() {
        let mut c = Conn::open(10.0, 2.0);
        let request = InFlight::start(&c.activity);
        assert!(c.read().is_pending());
        // A stream of 9 s: the timer fires every 2 s and is armed again; nothing times out.
        for _ in 0..4 {
            advance(2.0).await;
            assert_eq!(c.read_when_woken(), None, "served requests have no deadline");
        }
        advance(1.0).await;
        drop(request);
        advance(1.0).await;
        assert_eq!(c.read_when_woken(), None, "idle for 1 s of 2");
        advance(1.0).await;
        assert!(c.read_when_woken().is_some(), "closed once idle for 2 s");
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_that_stops_arriving_is_cut_off_by_the_header_timer() {
        let mut c = Conn::open(10.0, 75.0);
        // A first request, served and ended: the connection is kept alive.
        let request = InFlight::start(&c.activity);
        assert!(c.read().is_pending());
        drop(request);
        advance(1.0).await;
        // The next head's first bytes come, then nothing more.
        c.client.write_all(b"GET / HT").await.unwrap();
        assert!(c.woken(), "bytes to read");
        assert!(c.read().is_ready());
        assert!(c.read().is_pending());
        advance(9.9).await;
        assert!(!c.woken());
        advance(0.1).await;
        let why = c.read_when_woken().expect("closed 10 s after the head began");
        assert!(why.contains("limits.header_read_timeout_secs"), "{why}");
    }
}
