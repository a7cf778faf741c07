//! Programmable mock upstream for the integration tests.
//!
//! A [`MockUpstream`] is a real HTTP/1.1 server on `127.0.0.1:<random port>`
//! (keep-alive on, `TCP_NODELAY` on). A test scripts what it answers with
//! [`Reply`]s, points the gateway at [`MockUpstream::url`], and afterwards looks
//! at what reached it ([`MockUpstream::requests`]) and whether the gateway walked
//! away from a reply in progress ([`MockUpstream::cancellations`]).
//!
//! ```ignore
//! let up = MockUpstream::start().await;
//! up.push(Reply::status(503));                          // 1st request
//! up.push(Reply::anthropic_stream(&["Hel", "lo"]));     // 2nd request
//! up.set_default(Reply::Stall);                          // every later one
//! // ... send through the gateway ...
//! up.wait_for_requests(2).await;
//! assert_eq!(up.requests()[1].json()["model"], "claude-x");
//! ```
//!
//! Replies are taken from the queue in the order the requests' bodies finish
//! arriving (one reply per request, any method and path); when the queue is
//! empty the default reply (initially `200 {"ok":true}`) is used.
//!
//! One exception: a model list (`GET …/models`, what the gateway asks an
//! endpoint in the background to learn what it serves, and for the
//! connectivity test of an endpoint without a concrete model) is answered by
//! [`MockUpstream::set_models`]' reply (initially a 404) and recorded apart
//! ([`MockUpstream::model_list_requests`]), so the gateway's background
//! refreshes never take a scripted reply or show in [`MockUpstream::requests`].
//!
//! Failure modes are real connection-level behaviour:
//! * [`Reply::Reset`]: the TCP connection is dropped with `SO_LINGER=0`, so the
//!   client gets a RST (`connection reset by peer`) instead of a response;
//!   [`Reply::Close`] does the same with an orderly FIN (`connection closed
//!   before message completed`).
//! * [`StreamEnd::Cut`]: the chunks sent so far arrive, then the connection is
//!   closed without the terminating chunk, so the client sees an incomplete
//!   chunked body. (The body stream yields an error, on which hyper aborts the
//!   connection; it does so only after hyper has handed every earlier chunk to
//!   the socket, which the connection's IO wrapper observes through hyper's
//!   `poll_flush`, so buffered chunks are never lost to the cut.)
//! * [`Reply::Stall`] / [`StreamEnd::Stall`]: nothing more is ever sent.
//!
//! Cancellation detection: every reply in progress owns a guard that is marked
//! complete when the reply has been handed over in full; if it is dropped
//! before that (hyper dropped the service future or the body because the peer
//! went away), one cancellation is counted. hyper's HTTP/1 server (with
//! `half_close(false)`, the default, set explicitly here) watches the socket for
//! EOF while a response is pending ("unexpected EOF on busy connection") and
//! then drops the connection, the in-flight service future and the response
//! body; that is what makes a silent stall notice a departed peer. The tests
//! `stall_notices_raw_tcp_close` and `stall_notices_half_close` prove it with a
//! raw socket (with `half_close(true)` they, and the other silent-stall tests,
//! time out). Shutting the mock down does not count as a cancellation.
//!
//! The tests of this module use reqwest as built by ccmesh (`rustls-no-provider`),
//! so they install rustls' ring provider before building a client.
//!
//! No sleeps are used for synchronisation: the only timers are the scripted
//! delays, the keep-alive interval and the safety deadline of the `wait_for_*`
//! helpers ([`WAIT_TIMEOUT`], real time: do not use them under a paused tokio
//! clock, which would auto-advance past the deadline while waiting on sockets).
#![allow(dead_code)]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderName, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::task::{JoinHandle, JoinSet};

/// How long `wait_for_requests` / `wait_for_cancellations` wait before failing
/// the test (instead of hanging it).
pub const WAIT_TIMEOUT: Duration = Duration::from_secs(10);

/// Default interval of the SSE keep-alive comment sent by [`StreamEnd::stall`].
pub const KEEP_ALIVE_INTERVAL: Duration = Duration::from_millis(50);

/// The SSE comment sent while a [`StreamEnd::Stall`] with a keep-alive waits.
pub const KEEP_ALIVE_COMMENT: &str = ": keep-alive\n\n";

/// Model names used by the canned protocol answers.
pub const ANTHROPIC_MODEL: &str = "claude-sonnet-4-5-20250929";
pub const OPENAI_CHAT_MODEL: &str = "gpt-4o-mini-2024-07-18";
pub const RESPONSES_MODEL: &str = "gpt-4.1-2025-04-14";
pub const GEMINI_MODEL: &str = "gemini-2.5-flash";

/// Token usage reported by every canned protocol answer.
pub const INPUT_TOKENS: u64 = 12;
pub const OUTPUT_TOKENS: u64 = 8;

// ===================================================================== server

/// A scripted upstream HTTP/1.1 server. Dropping it shuts the server down:
/// the listener and every open connection are closed.
pub struct MockUpstream {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: Option<JoinHandle<()>>,
}

impl MockUpstream {
    /// Binds `127.0.0.1:0` and starts serving. Must be called inside a tokio runtime.
    #[allow(clippy::panic)]
    pub async fn start() -> MockUpstream {
        match Self::try_start_at(SocketAddr::from(([127, 0, 0, 1], 0))).await {
            Ok(mock) => mock,
            Err(e) => panic!("mock upstream: cannot bind 127.0.0.1:0: {e}"),
        }
    }

    /// Binds a given address, e.g. the address of a mock that was just shut
    /// down with [`MockUpstream::shutdown`] (an endpoint coming back).
    pub async fn try_start_at(addr: SocketAddr) -> io::Result<MockUpstream> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::new());
        let task = tokio::spawn(accept_loop(listener, shared.clone()));
        Ok(MockUpstream { addr, shared, task: Some(task) })
    }

    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues a reply for the next request that has no queued reply yet.
    pub fn push(&self, reply: Reply) {
        self.shared.lock().queue.push_back(reply);
    }

    /// Queues `n` copies of `reply`.
    pub fn push_n(&self, n: usize, reply: Reply) {
        let mut state = self.shared.lock();
        for _ in 0..n {
            state.queue.push_back(reply.clone());
        }
    }

    /// The reply used when the queue is empty (initially `200 {"ok":true}`).
    pub fn set_default(&self, reply: Reply) {
        self.shared.lock().default = reply;
    }

    /// Answer model lists (`GET …/models`) with these ids, OpenAI's shape (which Anthropic's
    /// `data[].id` shares).
    pub fn set_models(&self, ids: &[&str]) {
        let data: Vec<Value> =
            ids.iter().map(|id| json!({"id": id, "object": "model", "type": "model", "created": 0})).collect();
        self.set_models_reply(Reply::json(200, json!({"object": "list", "data": data, "has_more": false})));
    }

    /// Answer model lists with `reply`.
    pub fn set_models_reply(&self, reply: Reply) {
        self.shared.lock().models = reply;
    }

    /// Every model-list request so far.
    pub fn model_list_requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().model_lists.clone()
    }

    /// Resolves once at least `n` model-list requests arrived. Fails the test after
    /// [`WAIT_TIMEOUT`].
    #[allow(clippy::panic)]
    pub async fn wait_for_model_lists(&self, n: usize) {
        let mut rx = self.shared.model_list_count.subscribe();
        let reached = tokio::time::timeout(WAIT_TIMEOUT, async { rx.wait_for(|c| *c >= n).await.is_ok() }).await;
        if reached != Ok(true) {
            panic!("mock upstream {}: waited {:?} for {n} model-list request(s)", self.addr, WAIT_TIMEOUT);
        }
    }

    /// How many queued replies have not been used yet.
    pub fn queued(&self) -> usize {
        self.shared.lock().queue.len()
    }

    /// Drops every queued reply (the default stays).
    pub fn clear_queue(&self) {
        self.shared.lock().queue.clear();
    }

    /// Every request received so far, in arrival order (complete bodies).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().log.clone()
    }

    /// The most recent request, if any.
    pub fn last_request(&self) -> Option<RecordedRequest> {
        self.shared.lock().log.last().cloned()
    }

    pub fn request_count(&self) -> usize {
        self.shared.lock().log.len()
    }

    /// How many TCP connections have been accepted so far.
    /// Bytes of generated bodies (`Reply::Generated`) handed to the connection so far.
    pub fn generated_bytes(&self) -> u64 {
        self.shared.generated.load(Ordering::SeqCst)
    }

    pub fn connection_count(&self) -> u64 {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Resolves once at least `n` requests have been received (their bodies
    /// read completely). Fails the test after [`WAIT_TIMEOUT`].
    #[allow(clippy::panic)]
    pub async fn wait_for_requests(&self, n: usize) {
        let mut rx = self.shared.requests.subscribe();
        let reached = tokio::time::timeout(WAIT_TIMEOUT, async {
            // The `Ref` is dropped at once: never hold it across an await.
            rx.wait_for(|count| *count >= n).await.is_ok()
        })
        .await;
        if reached != Ok(true) {
            panic!(
                "mock upstream {}: waited {:?} for {n} request(s), received {}",
                self.addr,
                WAIT_TIMEOUT,
                self.request_count()
            );
        }
    }

    /// Resolves once at least `n` replies in progress were abandoned by the
    /// peer (connection closed during a stall or a delay, or while a streamed
    /// body was still being sent); returns the number so far. Fails the test
    /// after [`WAIT_TIMEOUT`].
    #[allow(clippy::panic)]
    pub async fn wait_for_cancellations(&self, n: usize) -> usize {
        let mut rx = self.shared.cancellations.subscribe();
        let reached =
            tokio::time::timeout(WAIT_TIMEOUT, async { rx.wait_for(|count| *count >= n).await.is_ok() }).await;
        if reached != Ok(true) {
            panic!(
                "mock upstream {}: waited {:?} for {n} cancellation(s), saw {}",
                self.addr,
                WAIT_TIMEOUT,
                self.cancellations()
            );
        }
        self.cancellations()
    }

    /// Replies in progress abandoned by the peer so far.
    pub fn cancellations(&self) -> usize {
        *self.shared.cancellations.borrow()
    }

    /// Stops the server and waits until its listener and connections are
    /// closed, so the same address can be bound again at once.
    pub async fn shutdown(mut self) {
        self.shared.shutting_down.store(true, Ordering::SeqCst);
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for MockUpstream {
    fn drop(&mut self) {
        self.shared.shutting_down.store(true, Ordering::SeqCst);
        if let Some(task) = self.task.take() {
            // Aborting the accept loop drops the listener and its JoinSet,
            // which aborts every connection task.
            task.abort();
        }
    }
}

impl std::fmt::Debug for MockUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockUpstream").field("addr", &self.addr).finish_non_exhaustive()
    }
}

/// One request as received: method, path, raw query string, headers (names
/// lowercased, in arrival order except that repeated names are grouped at
/// their first occurrence) and the exact body bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    /// Which accepted connection (0, 1, ...) carried the request: equal values
    /// mean the client reused a keep-alive connection.
    pub connection: u64,
}

impl RecordedRequest {
    /// First value of a header (name case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// Every value of a header, in order.
    pub fn header_all(&self, name: &str) -> Vec<&str> {
        self.headers.iter().filter(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str()).collect()
    }

    /// The body parsed as JSON; fails the test if it is not JSON.
    #[allow(clippy::panic)]
    pub fn json(&self) -> Value {
        match serde_json::from_slice(&self.body) {
            Ok(v) => v,
            Err(e) => panic!(
                "mock upstream: body of {} {} is not JSON ({e}): {:?}",
                self.method,
                self.path,
                String::from_utf8_lossy(&self.body)
            ),
        }
    }

    /// The body as text (lossy UTF-8).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// `path` plus `?query` when there is one.
    pub fn path_and_query(&self) -> String {
        match &self.query {
            Some(q) => format!("{}?{q}", self.path),
            None => self.path.clone(),
        }
    }
}

// ==================================================================== replies

/// What the mock answers to one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// A complete response (`content-length` set by hyper).
    Full { status: u16, headers: Vec<(String, String)>, body: Bytes },
    /// A streamed response (chunked transfer encoding): the head after
    /// `head_delay`, then each chunk after its own delay, then `end`.
    Stream {
        status: u16,
        headers: Vec<(String, String)>,
        head_delay: Duration,
        chunks: Vec<(Duration, Bytes)>,
        end: StreamEnd,
    },
    /// Once the request (head and body) is read, drop the connection with a
    /// TCP RST (`SO_LINGER=0`) without answering.
    Reset,
    /// Like `Reset` but with an orderly close (FIN): the client sees an
    /// unexpected EOF instead of a reset.
    Close,
    /// Never answer; hold the connection until the peer goes away (counted as
    /// a cancellation) or the mock is dropped.
    Stall,
    /// Wait `delay`, then answer with `reply`. A peer leaving during the
    /// delay counts as a cancellation.
    Delayed { delay: Duration, reply: Box<Reply> },
    /// A body of `total` bytes made of `chunk` repeated, generated as hyper
    /// asks for it (never held whole), with `content-length` when `declared`.
    /// Every byte handed to hyper is counted in [`MockUpstream::generated_bytes`],
    /// so a test sees how much of a huge body the gateway really read.
    Generated { status: u16, headers: Vec<(String, String)>, chunk: Bytes, total: u64, declared: bool },
}

/// How a [`Reply::Stream`] ends after its chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamEnd {
    /// The terminating chunk is sent: a well-formed body.
    Complete,
    /// The connection is closed without the terminating chunk (after the
    /// previous chunks were handed to the socket): an incomplete chunked body.
    Cut,
    /// The body stays open forever. With `keep_alive: Some(d)` the SSE comment
    /// [`KEEP_ALIVE_COMMENT`] is sent every `d` (a departed peer is then also
    /// noticed by a failing write); with `None` nothing is sent (a departed
    /// peer is noticed by EOF on the socket). Either way the peer going away
    /// counts as a cancellation.
    Stall { keep_alive: Option<Duration> },
}

impl StreamEnd {
    /// Stall with a keep-alive comment every [`KEEP_ALIVE_INTERVAL`].
    pub fn stall() -> StreamEnd {
        StreamEnd::Stall { keep_alive: Some(KEEP_ALIVE_INTERVAL) }
    }

    /// Stall without sending anything.
    pub fn silent_stall() -> StreamEnd {
        StreamEnd::Stall { keep_alive: None }
    }

    /// Stall with a keep-alive comment every `every`.
    pub fn stall_with_keep_alive(every: Duration) -> StreamEnd {
        StreamEnd::Stall { keep_alive: Some(every) }
    }
}

fn h(k: &str, v: &str) -> (String, String) {
    (k.to_owned(), v.to_owned())
}

impl Reply {
    /// A full reply with the given status, headers and body.
    pub fn full(status: u16, headers: Vec<(String, String)>, body: impl Into<Bytes>) -> Reply {
        Reply::Full { status, headers, body: body.into() }
    }

    /// A JSON reply (`content-type: application/json`).
    pub fn json(status: u16, value: Value) -> Reply {
        Reply::full(status, vec![h("content-type", "application/json")], value.to_string())
    }

    /// A reply with this status and an empty body.
    pub fn status(status: u16) -> Reply {
        Reply::full(status, Vec::new(), Bytes::new())
    }

    /// A `text/plain` reply.
    pub fn text(status: u16, text: impl Into<String>) -> Reply {
        Reply::full(status, vec![h("content-type", "text/plain; charset=utf-8")], text.into())
    }

    /// A complete `200 text/event-stream` reply sending each element as its
    /// own chunk, without delays. Elements are sent verbatim: include the
    /// blank-line terminators (see [`sse_event`], [`sse_data`]).
    pub fn sse<I, S>(events: I) -> Reply
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Reply::Stream {
            status: 200,
            headers: vec![h("content-type", "text/event-stream"), h("cache-control", "no-cache")],
            head_delay: Duration::ZERO,
            chunks: events.into_iter().map(|e| (Duration::ZERO, Bytes::from(e.into()))).collect(),
            end: StreamEnd::Complete,
        }
    }

    /// Like [`Reply::sse`], each chunk sent `pace` after the previous one (the
    /// first `pace` after the head, which is sent at once).
    pub fn sse_paced<I, S>(events: I, pace: Duration) -> Reply
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Reply::sse(events).paced(pace)
    }

    /// Adds (or replaces, name case-insensitive) a response header. No effect
    /// on `Reset`, `Close`, `Stall`; applies to the inner reply of `Delayed`.
    pub fn with_header(mut self, name: &str, value: &str) -> Reply {
        match &mut self {
            Reply::Full { headers, .. } | Reply::Stream { headers, .. } => {
                headers.retain(|(k, _)| !k.eq_ignore_ascii_case(name));
                headers.push(h(name, value));
            }
            Reply::Delayed { reply, .. } => {
                let inner = std::mem::replace(reply.as_mut(), Reply::Stall);
                **reply = inner.with_header(name, value);
            }
            Reply::Reset | Reply::Close | Reply::Stall | Reply::Generated { .. } => {}
        }
        self
    }

    /// Changes the status of a `Full` or `Stream` reply (or the inner one of `Delayed`).
    pub fn with_status(mut self, code: u16) -> Reply {
        match &mut self {
            Reply::Full { status, .. } | Reply::Stream { status, .. } => *status = code,
            Reply::Delayed { reply, .. } => {
                let inner = std::mem::replace(reply.as_mut(), Reply::Stall);
                **reply = inner.with_status(code);
            }
            Reply::Reset | Reply::Close | Reply::Stall | Reply::Generated { .. } => {}
        }
        self
    }

    /// Answers after `delay` (any reply; a peer leaving meanwhile is a cancellation).
    pub fn after(self, delay: Duration) -> Reply {
        Reply::Delayed { delay, reply: Box::new(self) }
    }

    /// `Stream`: sends the head only after `delay` (time to first byte).
    /// Other replies: same as [`Reply::after`].
    pub fn with_head_delay(self, delay: Duration) -> Reply {
        match self {
            Reply::Stream { status, headers, chunks, end, .. } => {
                Reply::Stream { status, headers, head_delay: delay, chunks, end }
            }
            other => other.after(delay),
        }
    }

    /// `Stream`: every chunk is sent `pace` after the previous one.
    pub fn paced(self, pace: Duration) -> Reply {
        self.map_stream(|chunks, _| {
            for chunk in chunks.iter_mut() {
                chunk.0 = pace;
            }
        })
    }

    /// `Stream`: how the body ends after its chunks.
    pub fn with_end(self, new_end: StreamEnd) -> Reply {
        self.map_stream(|_, end| *end = new_end)
    }

    /// `Stream`: keeps only the first `n` chunks.
    pub fn truncated(self, n: usize) -> Reply {
        self.map_stream(|chunks, _| chunks.truncate(n))
    }

    /// `Stream`: sends the first `n` chunks, then cuts the connection.
    pub fn cut_after(self, n: usize) -> Reply {
        self.truncated(n).with_end(StreamEnd::Cut)
    }

    /// `Stream`: sends the first `n` chunks, then stalls silently.
    pub fn stall_after(self, n: usize) -> Reply {
        self.truncated(n).with_end(StreamEnd::silent_stall())
    }

    fn map_stream(mut self, f: impl FnOnce(&mut Vec<(Duration, Bytes)>, &mut StreamEnd)) -> Reply {
        match &mut self {
            Reply::Stream { chunks, end, .. } => f(chunks, end),
            Reply::Delayed { reply, .. } => {
                let inner = std::mem::replace(reply.as_mut(), Reply::Stall);
                **reply = inner.map_stream(f);
            }
            Reply::Full { .. } | Reply::Reset | Reply::Close | Reply::Stall | Reply::Generated { .. } => {}
        }
        self
    }

    // ----------------------------------------------------- canned protocol

    /// A non-streaming Anthropic Messages answer with `text`.
    pub fn anthropic_message(text: &str) -> Reply {
        Reply::json(200, anthropic_message_body(text)).with_header("request-id", &mock_id("req_"))
    }

    /// A streaming Anthropic Messages answer, one text delta per part.
    pub fn anthropic_stream(parts: &[&str]) -> Reply {
        Reply::sse(anthropic_stream_events(parts))
            .with_header("content-type", "text/event-stream; charset=utf-8")
            .with_header("request-id", &mock_id("req_"))
    }

    /// An Anthropic error answer: `{"type":"error","error":{"type":..,"message":..}}`.
    pub fn anthropic_error(status: u16, error_type: &str, message: &str) -> Reply {
        let request_id = mock_id("req_");
        Reply::json(
            status,
            json!({
                "type": "error",
                "error": {"type": error_type, "message": message},
                "request_id": request_id,
            }),
        )
        .with_header("request-id", &request_id)
    }

    /// A non-streaming OpenAI Chat Completions answer with `text`.
    pub fn openai_chat(text: &str) -> Reply {
        Reply::json(200, openai_chat_body(text)).with_header("x-request-id", &mock_id("req_"))
    }

    /// A streaming OpenAI Chat Completions answer (role chunk, one content
    /// chunk per part, finish chunk, usage chunk, `data: [DONE]`).
    pub fn openai_chat_stream(parts: &[&str]) -> Reply {
        Reply::sse(openai_chat_stream_events(parts))
            .with_header("content-type", "text/event-stream; charset=utf-8")
            .with_header("x-request-id", &mock_id("req_"))
    }

    /// An OpenAI error answer: `{"error":{"message":..,"type":..,"param":null,"code":null}}`.
    pub fn openai_error(status: u16, error_type: &str, message: &str) -> Reply {
        Reply::json(status, json!({"error": {"message": message, "type": error_type, "param": null, "code": null}}))
            .with_header("x-request-id", &mock_id("req_"))
    }

    /// A non-streaming OpenAI Responses answer with `text`.
    pub fn responses_message(text: &str) -> Reply {
        Reply::json(200, responses_body(text)).with_header("x-request-id", &mock_id("req_"))
    }

    /// A streaming OpenAI Responses answer, one `response.output_text.delta` per part.
    pub fn responses_stream(parts: &[&str]) -> Reply {
        Reply::sse(responses_stream_events(parts))
            .with_header("content-type", "text/event-stream; charset=utf-8")
            .with_header("x-request-id", &mock_id("req_"))
    }

    /// A non-streaming Gemini `generateContent` answer with `text`.
    pub fn gemini_message(text: &str) -> Reply {
        Reply::json(200, gemini_body(text))
    }

    /// A Gemini `streamGenerateContent?alt=sse` answer: one chunk per part, the last with
    /// `finishReason` and the usage, framed as the API frames them (`\r\n\r\n`).
    pub fn gemini_stream(parts: &[&str]) -> Reply {
        Reply::sse(gemini_stream_events(parts)).with_header("content-type", "text/event-stream")
    }

    /// A Gemini error answer: `{"error":{"code":..,"message":..,"status":..}}`.
    pub fn gemini_error(status: u16, rpc_status: &str, message: &str) -> Reply {
        Reply::json(status, json!({"error": {"code": status, "message": message, "status": rpc_status}}))
    }
}

// ============================================================ canned bodies

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh id like `msg_mock0000000000000042` (unique within the process).
pub fn mock_id(prefix: &str) -> String {
    format!("{prefix}mock{:016}", NEXT_ID.fetch_add(1, Ordering::Relaxed))
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// One SSE event: `event: NAME\ndata: JSON\n\n`.
pub fn sse_event(name: &str, data: &Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// One SSE data-only event: `data: JSON\n\n`.
pub fn sse_data(data: &Value) -> String {
    format!("data: {data}\n\n")
}

fn anthropic_usage(output_tokens: u64) -> Value {
    json!({
        "input_tokens": INPUT_TOKENS,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output_tokens,
        "service_tier": "standard",
    })
}

/// The body of a non-streaming Anthropic Messages answer.
pub fn anthropic_message_body(text: &str) -> Value {
    json!({
        "id": mock_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": ANTHROPIC_MODEL,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": null,
        "usage": anthropic_usage(OUTPUT_TOKENS),
    })
}

/// The events of a streaming Anthropic Messages answer: message_start, ping,
/// content_block_start, content_block_delta per part, content_block_stop,
/// message_delta (stop_reason, usage), message_stop.
pub fn anthropic_stream_events(parts: &[&str]) -> Vec<String> {
    let mut events = vec![
        sse_event(
            "message_start",
            &json!({
                "type": "message_start",
                "message": {
                    "id": mock_id("msg_"),
                    "type": "message",
                    "role": "assistant",
                    "model": ANTHROPIC_MODEL,
                    "content": [],
                    "stop_reason": null,
                    "stop_sequence": null,
                    "usage": anthropic_usage(1),
                },
            }),
        ),
        sse_event("ping", &json!({"type": "ping"})),
        sse_event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
    ];
    for part in parts {
        events.push(sse_event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": part}}),
        ));
    }
    events.push(sse_event("content_block_stop", &json!({"type": "content_block_stop", "index": 0})));
    events.push(sse_event(
        "message_delta",
        &json!({
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": null},
            "usage": {"output_tokens": OUTPUT_TOKENS},
        }),
    ));
    events.push(sse_event("message_stop", &json!({"type": "message_stop"})));
    events
}

/// An Anthropic in-stream error event (`event: error`), e.g. `overloaded_error`.
pub fn anthropic_stream_error_event(error_type: &str, message: &str) -> String {
    sse_event("error", &json!({"type": "error", "error": {"type": error_type, "message": message}}))
}

fn openai_chat_usage() -> Value {
    json!({
        "prompt_tokens": INPUT_TOKENS,
        "completion_tokens": OUTPUT_TOKENS,
        "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    })
}

/// The body of a non-streaming OpenAI Chat Completions answer.
pub fn openai_chat_body(text: &str) -> Value {
    json!({
        "id": mock_id("chatcmpl-"),
        "object": "chat.completion",
        "created": unix_now(),
        "model": OPENAI_CHAT_MODEL,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text, "refusal": null, "annotations": []},
            "logprobs": null,
            "finish_reason": "stop",
        }],
        "usage": openai_chat_usage(),
        "service_tier": "default",
        "system_fingerprint": "fp_mock",
    })
}

/// The events of a streaming OpenAI Chat Completions answer (as sent with
/// `stream_options.include_usage`): role chunk, one content chunk per part,
/// finish chunk, usage chunk (`choices: []`), then `data: [DONE]`.
pub fn openai_chat_stream_events(parts: &[&str]) -> Vec<String> {
    let id = mock_id("chatcmpl-");
    let created = unix_now();
    let chunk = |choices: Value, usage: Value| {
        sse_data(&json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": OPENAI_CHAT_MODEL,
            "service_tier": "default",
            "system_fingerprint": "fp_mock",
            "choices": choices,
            "usage": usage,
        }))
    };
    let mut events = vec![chunk(
        json!([{"index": 0, "delta": {"role": "assistant", "content": "", "refusal": null}, "logprobs": null, "finish_reason": null}]),
        Value::Null,
    )];
    for part in parts {
        events.push(chunk(
            json!([{"index": 0, "delta": {"content": part}, "logprobs": null, "finish_reason": null}]),
            Value::Null,
        ));
    }
    events.push(chunk(json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": "stop"}]), Value::Null));
    events.push(chunk(json!([]), openai_chat_usage()));
    events.push("data: [DONE]\n\n".to_owned());
    events
}

fn responses_usage() -> Value {
    json!({
        "input_tokens": INPUT_TOKENS,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": OUTPUT_TOKENS,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS,
    })
}

fn responses_object(id: &str, created_at: u64, status: &str, output: Value, usage: Value) -> Value {
    json!({
        "id": id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "background": false,
        "error": null,
        "incomplete_details": null,
        "instructions": null,
        "max_output_tokens": null,
        "model": RESPONSES_MODEL,
        "output": output,
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "reasoning": {"effort": null, "summary": null},
        "service_tier": "default",
        "store": true,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage,
        "user": null,
        "metadata": {},
    })
}

fn output_text_part(text: &str) -> Value {
    json!({"type": "output_text", "annotations": [], "logprobs": [], "text": text})
}

fn output_message(id: &str, status: &str, content: Value) -> Value {
    json!({"id": id, "type": "message", "status": status, "content": content, "role": "assistant"})
}

/// The body of a non-streaming OpenAI Responses answer.
/// A Responses stream that reasons first: a `reasoning` item with one summary part and, when the
/// request asked for it with `include`, its `encrypted_content`; then a message with `text`.
pub fn responses_reasoning_stream_events(summary: &str, encrypted: Option<&str>, text: &str) -> Vec<String> {
    let resp_id = mock_id("resp_");
    let rs_id = "rs_mock_reasoning";
    let msg_id = mock_id("msg_");
    let created_at = unix_now();
    let mut events = Vec::new();
    let mut seq = 0u64;
    let mut push = |name: &str, mut data: Value| {
        if let Some(obj) = data.as_object_mut() {
            obj.insert("type".to_owned(), json!(name));
            obj.insert("sequence_number".to_owned(), json!(seq));
        }
        seq += 1;
        events.push(sse_event(name, &data));
    };
    let in_progress = responses_object(&resp_id, created_at, "in_progress", json!([]), Value::Null);
    push("response.created", json!({"response": in_progress}));
    push("response.in_progress", json!({"response": in_progress}));
    push(
        "response.output_item.added",
        json!({"output_index": 0, "item": {"id": rs_id, "type": "reasoning", "summary": []}}),
    );
    let part = json!({"type": "summary_text", "text": summary});
    push(
        "response.reasoning_summary_part.added",
        json!({"item_id": rs_id, "output_index": 0, "summary_index": 0, "part": {"type": "summary_text", "text": ""}}),
    );
    push(
        "response.reasoning_summary_text.delta",
        json!({"item_id": rs_id, "output_index": 0, "summary_index": 0, "delta": summary}),
    );
    push(
        "response.reasoning_summary_text.done",
        json!({"item_id": rs_id, "output_index": 0, "summary_index": 0, "text": summary}),
    );
    push(
        "response.reasoning_summary_part.done",
        json!({"item_id": rs_id, "output_index": 0, "summary_index": 0, "part": part}),
    );
    let mut reasoning = json!({"id": rs_id, "type": "reasoning", "summary": [part]});
    if let Some(enc) = encrypted {
        reasoning["encrypted_content"] = json!(enc);
    }
    push("response.output_item.done", json!({"output_index": 0, "item": reasoning}));
    push(
        "response.output_item.added",
        json!({"output_index": 1, "item": output_message(&msg_id, "in_progress", json!([]))}),
    );
    push(
        "response.content_part.added",
        json!({"item_id": msg_id, "output_index": 1, "content_index": 0, "part": output_text_part("")}),
    );
    push(
        "response.output_text.delta",
        json!({"item_id": msg_id, "output_index": 1, "content_index": 0, "delta": text, "logprobs": []}),
    );
    push(
        "response.output_text.done",
        json!({"item_id": msg_id, "output_index": 1, "content_index": 0, "text": text, "logprobs": []}),
    );
    push(
        "response.content_part.done",
        json!({"item_id": msg_id, "output_index": 1, "content_index": 0, "part": output_text_part(text)}),
    );
    let done_item = output_message(&msg_id, "completed", json!([output_text_part(text)]));
    push("response.output_item.done", json!({"output_index": 1, "item": done_item}));
    let completed =
        responses_object(&resp_id, created_at, "completed", json!([reasoning, done_item]), responses_usage());
    push("response.completed", json!({"response": completed}));
    events
}

pub fn responses_body(text: &str) -> Value {
    let msg_id = mock_id("msg_");
    responses_object(
        &mock_id("resp_"),
        unix_now(),
        "completed",
        json!([output_message(&msg_id, "completed", json!([output_text_part(text)]))]),
        responses_usage(),
    )
}

/// The events of a streaming OpenAI Responses answer, each with its
/// `sequence_number` (0, 1, ...): response.created, response.in_progress,
/// response.output_item.added, response.content_part.added,
/// response.output_text.delta per part, response.output_text.done,
/// response.content_part.done, response.output_item.done, response.completed.
pub fn responses_stream_events(parts: &[&str]) -> Vec<String> {
    let resp_id = mock_id("resp_");
    let msg_id = mock_id("msg_");
    let created_at = unix_now();
    let full: String = parts.concat();
    let mut events = Vec::new();
    let mut seq = 0u64;
    let mut push = |name: &str, mut data: Value| {
        if let Some(obj) = data.as_object_mut() {
            obj.insert("type".to_owned(), json!(name));
            obj.insert("sequence_number".to_owned(), json!(seq));
        }
        seq += 1;
        events.push(sse_event(name, &data));
    };
    let in_progress = responses_object(&resp_id, created_at, "in_progress", json!([]), Value::Null);
    push("response.created", json!({"response": in_progress}));
    push("response.in_progress", json!({"response": in_progress}));
    push(
        "response.output_item.added",
        json!({"output_index": 0, "item": output_message(&msg_id, "in_progress", json!([]))}),
    );
    push(
        "response.content_part.added",
        json!({"item_id": msg_id, "output_index": 0, "content_index": 0, "part": output_text_part("")}),
    );
    for part in parts {
        push(
            "response.output_text.delta",
            json!({"item_id": msg_id, "output_index": 0, "content_index": 0, "delta": part, "logprobs": []}),
        );
    }
    push(
        "response.output_text.done",
        json!({"item_id": msg_id, "output_index": 0, "content_index": 0, "text": full, "logprobs": []}),
    );
    push(
        "response.content_part.done",
        json!({"item_id": msg_id, "output_index": 0, "content_index": 0, "part": output_text_part(&full)}),
    );
    let done_item = output_message(&msg_id, "completed", json!([output_text_part(&full)]));
    push("response.output_item.done", json!({"output_index": 0, "item": done_item}));
    let completed = responses_object(&resp_id, created_at, "completed", json!([done_item]), responses_usage());
    push("response.completed", json!({"response": completed}));
    events
}

// ================================================================ internals

struct Shared {
    state: Mutex<State>,
    /// Number of recorded requests.
    requests: watch::Sender<usize>,
    /// Number of model-list requests.
    model_list_count: watch::Sender<usize>,
    /// Number of replies abandoned by the peer.
    cancellations: watch::Sender<usize>,
    /// Becomes true once the accept loop (listener, connections) is gone.
    stopped: watch::Sender<bool>,
    shutting_down: AtomicBool,
    connections: AtomicU64,
    /// Bytes of `Reply::Generated` bodies handed to hyper.
    generated: Arc<AtomicU64>,
}

struct State {
    queue: VecDeque<Reply>,
    default: Reply,
    log: Vec<RecordedRequest>,
    /// The reply to model lists, and those requests.
    models: Reply,
    model_lists: Vec<RecordedRequest>,
}

impl Shared {
    fn new() -> Shared {
        Shared {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                default: Reply::json(200, json!({"ok": true})),
                log: Vec::new(),
                models: Reply::json(
                    404,
                    json!({"error": {"type": "not_found_error", "message": "this mock lists no models"}}),
                ),
                model_lists: Vec::new(),
            }),
            model_list_count: watch::Sender::new(0),
            requests: watch::Sender::new(0),
            cancellations: watch::Sender::new(0),
            stopped: watch::Sender::new(false),
            shutting_down: AtomicBool::new(false),
            connections: AtomicU64::new(0),
            generated: Arc::new(AtomicU64::new(0)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking test thread must not poison the mock for the others.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a request and picks its reply, atomically.
    fn record(&self, request: RecordedRequest) -> Reply {
        let mut state = self.lock();
        if request.method == "GET" && request.path.ends_with("/models") {
            state.model_lists.push(request);
            self.model_list_count.send_replace(state.model_lists.len());
            return state.models.clone();
        }
        state.log.push(request);
        let reply = match state.queue.pop_front() {
            Some(reply) => reply,
            None => state.default.clone(),
        };
        // Published under the lock so the count never goes backwards.
        self.requests.send_replace(state.log.len());
        reply
    }
}

/// Counts a cancellation when dropped before `complete()`.
struct CancelGuard {
    shared: Arc<Shared>,
    done: bool,
}

impl CancelGuard {
    fn complete(&mut self) {
        self.done = true;
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if !self.done && !self.shared.shutting_down.load(Ordering::SeqCst) {
            self.shared.cancellations.send_modify(|n| *n += 1);
        }
    }
}

/// Marks the server stopped when the accept loop's future is dropped.
struct StoppedOnDrop(Arc<Shared>);

impl Drop for StoppedOnDrop {
    fn drop(&mut self) {
        self.0.stopped.send_replace(true);
    }
}

/// Per-connection control: lets a reply kill its own connection.
struct ConnCtl {
    id: u64,
    kill: Notify,
    rst: AtomicBool,
    /// True when hyper's write buffer is known to be empty: hyper calls
    /// `poll_flush` on the IO only after handing all its buffered bytes to it.
    flushed: AtomicBool,
    flush_notify: Notify,
}

impl ConnCtl {
    /// Waits until everything hyper buffered so far has reached the socket.
    /// Only valid while hyper cannot buffer more (the body is pending).
    async fn wait_flushed(&self) {
        self.flushed.store(false, Ordering::SeqCst);
        while !self.flushed.load(Ordering::SeqCst) {
            self.flush_notify.notified().await;
        }
    }
}

/// The TCP stream as hyper sees it, reporting completed flushes to `ConnCtl`.
struct TrackedIo {
    stream: TcpStream,
    ctl: Arc<ConnCtl>,
}

impl tokio::io::AsyncRead for TrackedIo {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut tokio::io::ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for TrackedIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = std::task::ready!(Pin::new(&mut this.stream).poll_flush(cx));
        if result.is_ok() && !this.ctl.flushed.swap(true, Ordering::SeqCst) {
            this.ctl.flush_notify.notify_one();
        }
        Poll::Ready(result)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

type MockBody = UnsyncBoxBody<Bytes, io::Error>;

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    // Declaration order = reverse drop order: when this future is dropped the
    // connection tasks are aborted and the listener is closed before `stopped`
    // is signalled.
    let _stopped = StoppedOnDrop(shared.clone());
    let listener = listener;
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    let _ = stream.set_nodelay(true);
                    let id = shared.connections.fetch_add(1, Ordering::SeqCst);
                    connections.spawn(serve_connection(stream, shared.clone(), id));
                }
                // e.g. EMFILE: let other tasks run, then try again.
                Err(_) => tokio::task::yield_now().await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve_connection(stream: TcpStream, shared: Arc<Shared>, id: u64) {
    let ctl = Arc::new(ConnCtl {
        id,
        kill: Notify::new(),
        rst: AtomicBool::new(false),
        flushed: AtomicBool::new(true),
        flush_notify: Notify::new(),
    });
    let io = TokioIo::new(TrackedIo { stream, ctl: ctl.clone() });
    let service = {
        let ctl = ctl.clone();
        service_fn(move |req| handle(shared.clone(), ctl.clone(), req))
    };
    let mut conn = http1::Builder::new()
        .keep_alive(true)
        // false (hyper's default) makes hyper treat EOF from the peer while a
        // response is pending as the end of the connection: the pending
        // service future / body is dropped, which is how stalls notice it.
        .half_close(false)
        .serve_connection(io, service);
    let killed = tokio::select! {
        _ = &mut conn => false,
        () = ctl.kill.notified() => true,
    };
    if killed {
        // Take the socket back from hyper without letting it write anything.
        let parts = conn.into_parts();
        if ctl.rst.load(Ordering::SeqCst) {
            let _ = parts.io.inner().stream.set_zero_linger();
        }
        drop(parts);
    }
}

async fn handle(
    shared: Arc<Shared>,
    ctl: Arc<ConnCtl>,
    req: Request<Incoming>,
) -> Result<Response<MockBody>, Infallible> {
    let (head, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            return Ok(plain_response(400, "mock upstream: could not read the request body"));
        }
    };
    let headers = head
        .headers
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect();
    let mut reply = shared.record(RecordedRequest {
        method: head.method.to_string(),
        path: head.uri.path().to_owned(),
        query: head.uri.query().map(str::to_owned),
        headers,
        body,
        connection: ctl.id,
    });
    let mut guard = CancelGuard { shared, done: false };
    loop {
        match reply {
            Reply::Delayed { delay, reply: inner } => {
                tokio::time::sleep(delay).await;
                reply = *inner;
            }
            Reply::Full { status, headers, body } => {
                guard.complete();
                let body = Full::new(body).map_err(|never| match never {}).boxed_unsync();
                return Ok(build_response(status, &headers, body));
            }
            Reply::Stream { status, headers, head_delay, chunks, end } => {
                if !head_delay.is_zero() {
                    tokio::time::sleep(head_delay).await;
                }
                return Ok(build_response(status, &headers, stream_body(chunks, end, guard, ctl)));
            }
            Reply::Reset | Reply::Close => {
                guard.complete();
                ctl.rst.store(matches!(reply, Reply::Reset), Ordering::SeqCst);
                ctl.kill.notify_one();
                let never: Infallible = std::future::pending().await;
                match never {}
            }
            Reply::Generated { status, headers, chunk, total, declared } => {
                guard.complete();
                let counter = guard.shared.generated.clone();
                let mut headers = headers;
                if declared {
                    headers.push(h("content-length", &total.to_string()));
                }
                let frames = futures_util::stream::unfold(0u64, move |sent| {
                    let chunk = chunk.clone();
                    let counter = counter.clone();
                    async move {
                        if sent >= total || chunk.is_empty() {
                            return None;
                        }
                        let n = (total - sent).min(chunk.len() as u64) as usize;
                        counter.fetch_add(n as u64, Ordering::SeqCst);
                        Some((Ok::<_, io::Error>(Frame::data(chunk.slice(..n))), sent + n as u64))
                    }
                });
                return Ok(build_response(status, &headers, StreamBody::new(frames).boxed_unsync()));
            }
            Reply::Stall => {
                // `guard` is dropped with this future when the peer leaves.
                let never: Infallible = std::future::pending().await;
                match never {}
            }
        }
    }
}

fn plain_response(status: u16, text: &'static str) -> Response<MockBody> {
    let body = Full::new(Bytes::from_static(text.as_bytes())).map_err(|never| match never {}).boxed_unsync();
    build_response(status, &[h("x-mock-error", "1")], body)
}

fn build_response(status: u16, headers: &[(String, String)], body: MockBody) -> Response<MockBody> {
    let mut response = Response::new(body);
    let mut invalid = None;
    match StatusCode::from_u16(status) {
        Ok(code) => *response.status_mut() = code,
        Err(_) => invalid = Some(format!("status {status}")),
    }
    for (name, value) in headers {
        match (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) {
            (Ok(name), Ok(value)) => {
                response.headers_mut().append(name, value);
            }
            _ => invalid = Some(format!("header {name:?}: {value:?}")),
        }
    }
    if let Some(what) = invalid {
        // A broken script must not look like a plausible upstream answer.
        let text = format!("mock upstream: invalid scripted reply ({what})");
        let body = Full::new(Bytes::from(text)).map_err(|never| match never {}).boxed_unsync();
        let mut response = Response::new(body);
        *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        response.headers_mut().insert("x-mock-error", HeaderValue::from_static("1"));
        return response;
    }
    response
}

struct StreamState {
    chunks: std::vec::IntoIter<(Duration, Bytes)>,
    end: StreamEnd,
    guard: CancelGuard,
    ctl: Arc<ConnCtl>,
}

fn stream_body(chunks: Vec<(Duration, Bytes)>, end: StreamEnd, guard: CancelGuard, ctl: Arc<ConnCtl>) -> MockBody {
    let state = StreamState { chunks: chunks.into_iter(), end, guard, ctl };
    let frames = futures_util::stream::unfold(Some(state), |state| async move {
        let mut st = state?;
        if let Some((delay, data)) = st.chunks.next() {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            return Some((Ok(Frame::data(data)), Some(st)));
        }
        match st.end {
            StreamEnd::Complete => {
                st.guard.complete();
                None
            }
            StreamEnd::Cut => {
                st.guard.complete();
                // While this body is pending hyper keeps flushing what it has
                // buffered; the error (hyper aborts the connection on it, without
                // the terminating chunk) comes only once all of it is in the socket.
                st.ctl.wait_flushed().await;
                let err = io::Error::new(io::ErrorKind::ConnectionAborted, "mock upstream: scripted cut");
                Some((Err(err), None))
            }
            StreamEnd::Stall { keep_alive: Some(every) } => {
                tokio::time::sleep(every.max(Duration::from_millis(1))).await;
                Some((Ok(Frame::data(Bytes::from_static(KEEP_ALIVE_COMMENT.as_bytes()))), Some(st)))
            }
            StreamEnd::Stall { keep_alive: None } => {
                // `st.guard` is dropped with the body when the peer leaves.
                let never: Infallible = std::future::pending().await;
                match never {}
            }
        }
    });
    StreamBody::new(frames).boxed_unsync()
}

// ====================================================================== tests

fn gemini_usage() -> Value {
    json!({
        "promptTokenCount": INPUT_TOKENS,
        "candidatesTokenCount": OUTPUT_TOKENS,
        "totalTokenCount": INPUT_TOKENS + OUTPUT_TOKENS,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": INPUT_TOKENS}],
    })
}

/// One Gemini stream chunk, framed as the API frames it.
pub fn gemini_chunk(chunk: &Value) -> String {
    format!("data: {chunk}\r\n\r\n")
}

/// A `GenerateContentResponse` whose candidate has `parts` (and `finishReason`, when given).
pub fn gemini_response(parts: Value, finish: Option<&str>, usage: Option<Value>, response_id: &str) -> Value {
    let mut candidate = json!({"content": {"parts": parts, "role": "model"}, "index": 0});
    if let Some(f) = finish {
        candidate["finishReason"] = json!(f);
    }
    let mut body = json!({"candidates": [candidate], "modelVersion": GEMINI_MODEL, "responseId": response_id});
    if let Some(u) = usage {
        body["usageMetadata"] = u;
    }
    body
}

/// The body of a non-streaming Gemini answer.
pub fn gemini_body(text: &str) -> Value {
    gemini_response(json!([{"text": text}]), Some("STOP"), Some(gemini_usage()), &mock_id("gr"))
}

/// The chunks of a streamed Gemini answer: one text part each, the last with the finish reason
/// and the usage (Gemini ends a stream with no event of its own).
pub fn gemini_stream_events(parts: &[&str]) -> Vec<String> {
    let id = mock_id("gr");
    let n = parts.len();
    parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let last = i + 1 == n;
            let usage = if last {
                gemini_usage()
            } else {
                json!({"promptTokenCount": INPUT_TOKENS, "totalTokenCount": INPUT_TOKENS})
            };
            gemini_chunk(&gemini_response(json!([{"text": p}]), last.then_some("STOP"), Some(usage), &id))
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use std::time::Instant;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn client() -> reqwest::Client {
        // ccmesh builds reqwest with `rustls-no-provider`: building a client
        // panics unless a process-wide crypto provider is installed (even for
        // plain http). Installing twice is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::builder().no_proxy().build().unwrap()
    }

    /// Reads the whole body, returning what arrived and whether it ended in an error.
    async fn read_body(mut resp: reqwest::Response) -> (Vec<u8>, Option<reqwest::Error>) {
        let mut out = Vec::new();
        loop {
            match resp.chunk().await {
                Ok(Some(chunk)) => out.extend_from_slice(&chunk),
                Ok(None) => return (out, None),
                Err(e) => return (out, Some(e)),
            }
        }
    }

    /// Minimal SSE parser (WHATWG rules for `event`, `data`, comments).
    fn parse_sse(text: &str) -> Vec<(Option<String>, String)> {
        let mut events = Vec::new();
        let mut event: Option<String> = None;
        let mut data: Vec<String> = Vec::new();
        let text = text.replace("\r\n", "\n");
        for line in text.split('\n') {
            if line.is_empty() {
                if !data.is_empty() {
                    events.push((event.take(), data.join("\n")));
                }
                event = None;
                data.clear();
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                None => (line, ""),
            };
            match field {
                "event" => event = Some(value.to_owned()),
                "data" => data.push(value.to_owned()),
                _ => {}
            }
        }
        assert!(data.is_empty(), "SSE stream ended inside an event");
        events
    }

    async fn fetch_text(mock: &MockUpstream, path: &str) -> (reqwest::StatusCode, reqwest::header::HeaderMap, String) {
        let resp = client().post(format!("{}{path}", mock.url())).body("{}").send().await.unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let (body, err) = read_body(resp).await;
        assert!(err.is_none(), "body error: {err:?}");
        (status, headers, String::from_utf8(body).unwrap())
    }

    /// Reads one Content-Length-framed response from a raw socket.
    async fn read_raw_response(stream: &mut TcpStream) -> (String, Vec<u8>) {
        let mut buf = Vec::new();
        let mut tmp = [0u8; 4096];
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8(buf[..end].to_vec()).unwrap();
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap())
                    })
                    .unwrap();
                while buf.len() < end + 4 + len {
                    let n = stream.read(&mut tmp).await.unwrap();
                    assert!(n > 0, "EOF inside body");
                    buf.extend_from_slice(&tmp[..n]);
                }
                return (head, buf[end + 4..end + 4 + len].to_vec());
            }
            let n = stream.read(&mut tmp).await.unwrap();
            assert!(n > 0, "EOF inside head");
            buf.extend_from_slice(&tmp[..n]);
        }
    }

    #[tokio::test]
    async fn full_reply_and_default() {
        let mock = MockUpstream::start().await;
        assert!(mock.url().starts_with("http://127.0.0.1:"));
        mock.push(Reply::json(201, json!({"a": 1})).with_header("X-Test", "yes"));
        let c = client();
        let r = c.post(format!("{}/v1/x", mock.url())).body("hi").send().await.unwrap();
        assert_eq!(r.status(), 201);
        assert_eq!(r.headers()["x-test"], "yes");
        assert_eq!(r.headers()["content-type"], "application/json");
        assert_eq!(r.headers()["content-length"], "7");
        assert_eq!(serde_json::from_str::<Value>(&r.text().await.unwrap()).unwrap(), json!({"a": 1}));
        // Queue empty: the initial default.
        let r = c.get(format!("{}/anything", mock.url())).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.text().await.unwrap(), r#"{"ok":true}"#);
        assert_eq!(mock.request_count(), 2);
        assert_eq!(mock.cancellations(), 0);
    }

    #[tokio::test]
    async fn queue_is_consumed_in_order_then_default() {
        let mock = MockUpstream::start().await;
        mock.push(Reply::status(500));
        mock.push(Reply::status(429).with_header("retry-after", "3"));
        mock.push_n(2, Reply::text(503, "busy"));
        mock.push(Reply::status(201));
        mock.set_default(Reply::status(204));
        assert_eq!(mock.queued(), 5);
        let c = client();
        let mut seen = Vec::new();
        for i in 0..7 {
            let r = c.post(format!("{}/n/{i}", mock.url())).send().await.unwrap();
            seen.push(r.status().as_u16());
            if i == 1 {
                assert_eq!(r.headers()["retry-after"], "3");
            }
            if i == 2 {
                assert_eq!(r.text().await.unwrap(), "busy");
            }
        }
        assert_eq!(seen, [500, 429, 503, 503, 201, 204, 204]);
        assert_eq!(mock.queued(), 0);
        let paths: Vec<String> = mock.requests().into_iter().map(|r| r.path).collect();
        assert_eq!(paths, (0..7).map(|i| format!("/n/{i}")).collect::<Vec<_>>());
        // All on one keep-alive connection.
        assert_eq!(mock.connection_count(), 1);
        assert!(mock.requests().iter().all(|r| r.connection == 0));
    }

    #[tokio::test]
    async fn recorded_requests_are_byte_exact() {
        let mock = MockUpstream::start().await;
        let body = "{\n  \"model\" :  \"m\" ,\t\"messages\":[ ]\r\n}\n  ";
        let c = client();
        c.post(format!("{}/v1/messages?beta=true&x=%20y", mock.url()))
            .header("X-Api-Key", "sk-1")
            .header("anthropic-version", "2023-06-01")
            .header("X-Odd", "two  spaces\tand tab")
            .body(body)
            .send()
            .await
            .unwrap();
        let binary: Vec<u8> = vec![0, 255, 13, 10, 32, 0, 128];
        c.put(format!("{}/bin", mock.url())).body(binary.clone()).send().await.unwrap();

        let reqs = mock.requests();
        assert_eq!(reqs.len(), 2);
        let r = &reqs[0];
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/v1/messages");
        assert_eq!(r.query.as_deref(), Some("beta=true&x=%20y"));
        assert_eq!(r.path_and_query(), "/v1/messages?beta=true&x=%20y");
        assert_eq!(r.body, Bytes::from(body));
        assert_eq!(r.header("x-api-key"), Some("sk-1"));
        assert_eq!(r.header("X-API-KEY"), Some("sk-1"));
        assert_eq!(r.header("x-odd"), Some("two  spaces\tand tab"));
        assert_eq!(r.header("content-length"), Some(body.len().to_string().as_str()));
        assert!(r.headers.iter().all(|(k, _)| *k == k.to_ascii_lowercase()));
        assert_eq!(r.json(), json!({"model": "m", "messages": []}));
        assert_eq!(reqs[1].method, "PUT");
        assert_eq!(reqs[1].query, None);
        assert_eq!(reqs[1].body.as_ref(), binary.as_slice());
        assert_eq!(mock.last_request().unwrap(), reqs[1]);
    }

    #[tokio::test]
    async fn raw_requests_keep_header_order_and_connection() {
        let mock = MockUpstream::start().await;
        let mut s = TcpStream::connect(mock.addr()).await.unwrap();
        s.write_all(
            b"POST /p?q=1 HTTP/1.1\r\nHost: x\r\nZeta: 1\r\nAlpha: 2\r\nX-Dup: a\r\nBeta: 3\r\nx-dup: b\r\nContent-Length: 5\r\n\r\nhello",
        )
        .await
        .unwrap();
        let (head, body) = read_raw_response(&mut s).await;
        assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
        assert_eq!(body, br#"{"ok":true}"#);
        s.write_all(b"GET /second HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        read_raw_response(&mut s).await;
        let reqs = mock.requests();
        let names: Vec<&str> = reqs[0].headers.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["host", "zeta", "alpha", "x-dup", "x-dup", "beta", "content-length"]);
        assert_eq!(reqs[0].header_all("X-Dup"), ["a", "b"]);
        assert_eq!(reqs[0].body, Bytes::from_static(b"hello"));
        assert_eq!((reqs[0].connection, reqs[1].connection), (0, 0));
        assert_eq!(reqs[1].body.len(), 0);
        // A second socket is a second connection.
        let mut s2 = TcpStream::connect(mock.addr()).await.unwrap();
        s2.write_all(b"GET /third HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        read_raw_response(&mut s2).await;
        assert_eq!(mock.last_request().unwrap().connection, 1);
        assert_eq!(mock.connection_count(), 2);
    }

    #[tokio::test]
    async fn stream_complete_is_chunked_and_paced() {
        let mock = MockUpstream::start().await;
        mock.push(Reply::sse_paced(["data: a\n\n", "data: b\n\n", "data: c\n\n"], Duration::from_millis(30)));
        let started = Instant::now();
        let r = client().post(mock.url()).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], "text/event-stream");
        assert_eq!(r.headers()["transfer-encoding"], "chunked");
        assert!(r.headers().get("content-length").is_none());
        let mut r = r;
        let mut pieces = Vec::new();
        while let Some(chunk) = r.chunk().await.unwrap() {
            pieces.push(chunk);
        }
        assert!(started.elapsed() >= Duration::from_millis(90));
        assert!(pieces.len() >= 2, "paced chunks arrive separately: {pieces:?}");
        assert_eq!(pieces.concat(), b"data: a\n\ndata: b\n\ndata: c\n\n");
        assert_eq!(mock.cancellations(), 0);
    }

    #[tokio::test]
    async fn stream_cut_gives_body_error_after_the_chunks() {
        let mock = MockUpstream::start().await;
        mock.push(Reply::sse(["data: a\n\n", "data: b\n\n", "data: never\n\n"]).cut_after(2));
        let r = client().post(mock.url()).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let (body, err) = read_body(r).await;
        assert_eq!(body, b"data: a\n\ndata: b\n\n");
        let err = err.expect("a cut body must end in an error");
        assert!(err.is_body() || err.is_decode(), "{err:?}");
        // Paced chunks, then cut; and the mock keeps serving afterwards.
        mock.push(Reply::sse_paced(["x", "y"], Duration::from_millis(10)).with_end(StreamEnd::Cut));
        let (body, err) = read_body(client().post(mock.url()).send().await.unwrap()).await;
        assert_eq!(body, b"xy");
        assert!(err.is_some());
        assert_eq!(client().get(mock.url()).send().await.unwrap().status(), 200);
        assert_eq!(mock.cancellations(), 0, "a scripted cut is not a cancellation");
    }

    /// Big chunks right before the cut still all reach the client.
    async fn cut_after_large_chunks() {
        let mock = MockUpstream::start().await;
        let chunk = Bytes::from(vec![b'x'; 256 * 1024]);
        for _ in 0..2 {
            mock.push(Reply::Stream {
                status: 200,
                headers: vec![],
                head_delay: Duration::ZERO,
                chunks: vec![(Duration::ZERO, chunk.clone()); 8],
                end: StreamEnd::Cut,
            });
            let r = client().post(mock.url()).send().await.unwrap();
            // A slow reader: the socket buffers fill up before the cut.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let (body, err) = read_body(r).await;
            assert_eq!(body.len(), 8 * chunk.len());
            assert!(err.is_some());
        }
    }

    #[tokio::test]
    async fn cut_after_large_chunks_current_thread() {
        cut_after_large_chunks().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cut_after_large_chunks_multi_thread() {
        cut_after_large_chunks().await;
    }

    #[tokio::test]
    async fn reset_and_close_fail_the_request() {
        let mock = MockUpstream::start().await;
        mock.push(Reply::Reset);
        mock.push(Reply::Close);
        let c = client();
        let err = c.post(mock.url()).body("x").send().await.unwrap_err();
        assert!(err.is_request(), "{err:?}");
        assert_eq!(mock.request_count(), 1, "the client must not have retried");
        let err = c.post(mock.url()).body("y").send().await.unwrap_err();
        assert!(err.is_request(), "{err:?}");
        assert_eq!(mock.request_count(), 2);
        assert_eq!(mock.requests()[1].body, Bytes::from_static(b"y"));
        // The server is still fine.
        assert_eq!(c.get(mock.url()).send().await.unwrap().status(), 200);
        assert_eq!(mock.cancellations(), 0);
    }

    #[tokio::test]
    async fn reset_is_a_tcp_reset() {
        let mock = MockUpstream::start().await;
        mock.push(Reply::Reset);
        mock.push(Reply::Close);
        let mut s = TcpStream::connect(mock.addr()).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 64];
        let err = s.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset);
        let mut s = TcpStream::connect(mock.addr()).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        assert_eq!(s.read(&mut buf).await.unwrap(), 0, "Close is a clean EOF");
    }

    #[tokio::test]
    async fn stall_then_client_drop_is_a_cancellation() {
        let mock = MockUpstream::start().await;
        mock.push(Reply::Stall);
        let (c, url) = (client(), mock.url());
        let task = tokio::spawn(async move { c.post(url).body("x").send().await });
        mock.wait_for_requests(1).await;
        assert_eq!(mock.cancellations(), 0);
        task.abort();
        assert_eq!(mock.wait_for_cancellations(1).await, 1);
    }

    #[tokio::test]
    async fn stall_notices_raw_tcp_close() {
        let mock = MockUpstream::start().await;
        mock.set_default(Reply::Stall);
        let mut s = TcpStream::connect(mock.addr()).await.unwrap();
        s.write_all(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}").await.unwrap();
        mock.wait_for_requests(1).await;
        assert_eq!(mock.cancellations(), 0);
        drop(s);
        assert_eq!(mock.wait_for_cancellations(1).await, 1);
    }

    #[tokio::test]
    async fn stall_notices_half_close() {
        let mock = MockUpstream::start().await;
        mock.set_default(Reply::Stall);
        let mut s = TcpStream::connect(mock.addr()).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        mock.wait_for_requests(1).await;
        s.shutdown().await.unwrap(); // FIN, socket still open for reading
        assert_eq!(mock.wait_for_cancellations(1).await, 1);
        let mut buf = [0u8; 16];
        assert_eq!(s.read(&mut buf).await.unwrap(), 0, "the mock closed without answering");
    }

    #[tokio::test]
    async fn stream_stall_with_keep_alive_then_drop_is_a_cancellation() {
        let mock = MockUpstream::start().await;
        mock.push(
            Reply::sse(["data: first\n\n"]).with_end(StreamEnd::stall_with_keep_alive(Duration::from_millis(20))),
        );
        let mut r = client().post(mock.url()).send().await.unwrap();
        let mut got = Vec::new();
        let want = b"data: first\n\n: keep-alive\n\n: keep-alive\n\n";
        while got.len() < want.len() {
            got.extend_from_slice(&r.chunk().await.unwrap().unwrap());
        }
        assert_eq!(&got[..want.len()], want);
        assert_eq!(mock.cancellations(), 0);
        drop(r);
        assert_eq!(mock.wait_for_cancellations(1).await, 1);
    }

    #[tokio::test]
    async fn stream_silent_stall_then_drop_is_a_cancellation() {
        let mock = MockUpstream::start().await;
        mock.push(Reply::anthropic_stream(&["a", "b"]).stall_after(3));
        let mut r = client().post(mock.url()).send().await.unwrap();
        let mut got = String::new();
        while parse_sse(&got).len() < 3 || !got.ends_with("\n\n") {
            got.push_str(std::str::from_utf8(&r.chunk().await.unwrap().unwrap()).unwrap());
        }
        let names: Vec<_> = parse_sse(&got).into_iter().map(|(e, _)| e.unwrap()).collect();
        assert_eq!(names, ["message_start", "ping", "content_block_start"]);
        // Nothing else comes (a window, not synchronisation).
        assert!(tokio::time::timeout(Duration::from_millis(100), r.chunk()).await.is_err());
        assert_eq!(mock.cancellations(), 0);
        drop(r);
        assert_eq!(mock.wait_for_cancellations(1).await, 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn paced_stream_dropped_midway_is_a_cancellation() {
        let mock = MockUpstream::start().await;
        let events: Vec<String> = (0..50).map(|i| format!("data: {i}\n\n")).collect();
        mock.push(Reply::sse_paced(events, Duration::from_millis(20)));
        let mut r = client().post(mock.url()).send().await.unwrap();
        let first = r.chunk().await.unwrap().unwrap();
        assert!(first.starts_with(b"data: 0\n\n"));
        assert_eq!(mock.cancellations(), 0);
        drop(r);
        assert_eq!(mock.wait_for_cancellations(1).await, 1);
    }

    #[tokio::test]
    async fn leaving_during_a_delay_is_a_cancellation() {
        let mock = MockUpstream::start().await;
        mock.push(Reply::sse(["data: x\n\n"]).with_head_delay(Duration::from_secs(60)));
        mock.push(Reply::openai_chat("late").after(Duration::from_secs(60)));
        for n in 1..=2 {
            let (c, url) = (client(), mock.url());
            let task = tokio::spawn(async move { c.post(url).send().await });
            mock.wait_for_requests(n).await;
            task.abort();
            assert_eq!(mock.wait_for_cancellations(n).await, n);
        }
        // A delay that is waited out is not a cancellation.
        mock.push(Reply::status(202).after(Duration::from_millis(50)));
        let started = Instant::now();
        assert_eq!(client().get(mock.url()).send().await.unwrap().status(), 202);
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert_eq!(mock.cancellations(), 2);
    }

    #[tokio::test]
    async fn wait_for_requests_with_concurrent_clients() {
        let mock = MockUpstream::start().await;
        mock.set_default(Reply::Stall);
        let mut tasks = JoinSet::new();
        for i in 0..8 {
            let url = format!("{}/c/{i}", mock.url());
            // One client each: eight simultaneous connections.
            tasks.spawn(async move { client().post(url).body(i.to_string()).send().await });
        }
        let early = tokio::time::timeout(Duration::from_millis(50), mock.wait_for_requests(9)).await;
        mock.wait_for_requests(8).await;
        assert!(early.is_err(), "only 8 requests were sent");
        assert_eq!(mock.request_count(), 8);
        let mut conns: Vec<u64> = mock.requests().iter().map(|r| r.connection).collect();
        conns.sort_unstable();
        conns.dedup();
        assert_eq!(conns.len(), 8);
        let mut bodies: Vec<String> = mock.requests().iter().map(RecordedRequest::text).collect();
        bodies.sort();
        assert_eq!(bodies, (0..8).map(|i| i.to_string()).collect::<Vec<_>>());
        tasks.abort_all();
        assert_eq!(mock.wait_for_cancellations(8).await, 8);

        // Concurrent waiters and concurrent completed requests.
        let mock = MockUpstream::start().await;
        let waiters = (mock.wait_for_requests(5), mock.wait_for_requests(3));
        let requests = futures_util::future::join_all((0..5).map(|_| {
            let url = mock.url();
            async move { client().get(url).send().await.unwrap().status().as_u16() }
        }));
        let ((_, _), statuses) = tokio::join!(async { tokio::join!(waiters.0, waiters.1) }, requests);
        assert_eq!(statuses, [200; 5]);
        assert_eq!(mock.request_count(), 5);
    }

    #[tokio::test]
    async fn canned_anthropic_transcripts() {
        let mock = MockUpstream::start().await;
        mock.push(Reply::anthropic_stream(&["Hel", "lo", " \"wörld\"\n"]));
        mock.push(Reply::anthropic_message("Hi there"));
        mock.push(Reply::anthropic_error(529, "overloaded_error", "Overloaded"));

        let (status, headers, text) = fetch_text(&mock, "/v1/messages").await;
        assert_eq!(status, 200);
        assert_eq!(headers["content-type"], "text/event-stream; charset=utf-8");
        assert!(headers.contains_key("request-id"));
        let events = parse_sse(&text);
        let names: Vec<String> = events.iter().map(|(e, _)| e.clone().unwrap()).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "ping",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        let datas: Vec<Value> = events.iter().map(|(_, d)| serde_json::from_str(d).unwrap()).collect();
        for ((name, _), data) in events.iter().zip(&datas) {
            assert_eq!(data["type"], name.clone().unwrap());
        }
        let msg = &datas[0]["message"];
        assert!(msg["id"].as_str().unwrap().starts_with("msg_"));
        assert_eq!(msg["role"], "assistant");
        assert_eq!(msg["content"], json!([]));
        assert_eq!(msg["usage"]["input_tokens"], INPUT_TOKENS);
        let streamed: String = datas[3..6].iter().map(|d| d["delta"]["text"].as_str().unwrap()).collect();
        assert_eq!(streamed, "Hello \"wörld\"\n");
        assert_eq!(datas[3]["delta"]["type"], "text_delta");
        assert_eq!(datas[7]["delta"]["stop_reason"], "end_turn");
        assert_eq!(datas[7]["usage"]["output_tokens"], OUTPUT_TOKENS);

        let (status, headers, text) = fetch_text(&mock, "/v1/messages").await;
        assert_eq!(status, 200);
        assert_eq!(headers["content-type"], "application/json");
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["type"], "message");
        assert_eq!(body["content"][0], json!({"type": "text", "text": "Hi there"}));
        assert_eq!(body["stop_reason"], "end_turn");
        assert_eq!(body["usage"]["output_tokens"], OUTPUT_TOKENS);

        let (status, _, text) = fetch_text(&mock, "/v1/messages").await;
        assert_eq!(status, 529);
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"], json!({"type": "overloaded_error", "message": "Overloaded"}));

        let err = parse_sse(&anthropic_stream_error_event("overloaded_error", "x"));
        assert_eq!(err[0].0.as_deref(), Some("error"));
    }

    #[tokio::test]
    async fn canned_openai_chat_transcripts() {
        let mock = MockUpstream::start().await;
        mock.push(Reply::openai_chat_stream(&["Hel", "lo"]));
        mock.push(Reply::openai_chat("Hi there"));
        mock.push(Reply::openai_error(429, "rate_limit_exceeded", "Slow down").with_header("retry-after", "1"));

        let (status, headers, text) = fetch_text(&mock, "/v1/chat/completions").await;
        assert_eq!(status, 200);
        assert_eq!(headers["content-type"], "text/event-stream; charset=utf-8");
        let events = parse_sse(&text);
        assert!(events.iter().all(|(e, _)| e.is_none()), "chat completions events are unnamed");
        assert_eq!(events.len(), 6);
        assert_eq!(events[5].1, "[DONE]");
        let chunks: Vec<Value> = events[..5].iter().map(|(_, d)| serde_json::from_str(d).unwrap()).collect();
        let id = chunks[0]["id"].as_str().unwrap();
        assert!(id.starts_with("chatcmpl-"));
        for c in &chunks {
            assert_eq!(c["object"], "chat.completion.chunk");
            assert_eq!(c["id"], id);
            assert_eq!(c["model"], OPENAI_CHAT_MODEL);
        }
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        let content: String =
            chunks[..3].iter().map(|c| c["choices"][0]["delta"]["content"].as_str().unwrap()).collect();
        assert_eq!(content, "Hello");
        assert_eq!(chunks[3]["choices"][0]["finish_reason"], "stop");
        assert_eq!(chunks[3]["choices"][0]["delta"], json!({}));
        assert_eq!(chunks[4]["choices"], json!([]));
        assert_eq!(chunks[4]["usage"]["total_tokens"], INPUT_TOKENS + OUTPUT_TOKENS);
        assert!(chunks[..4].iter().all(|c| c["usage"].is_null()));

        let (_, _, text) = fetch_text(&mock, "/v1/chat/completions").await;
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(body["choices"][0]["message"]["content"], "Hi there");
        assert_eq!(body["choices"][0]["finish_reason"], "stop");
        assert_eq!(body["usage"]["prompt_tokens"], INPUT_TOKENS);

        let (status, headers, text) = fetch_text(&mock, "/v1/chat/completions").await;
        assert_eq!(status, 429);
        assert_eq!(headers["retry-after"], "1");
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["error"]["type"], "rate_limit_exceeded");
        assert_eq!(body["error"]["message"], "Slow down");
    }

    #[tokio::test]
    async fn canned_responses_transcripts() {
        let mock = MockUpstream::start().await;
        mock.push(Reply::responses_stream(&["Hel", "lo", "!"]));
        mock.push(Reply::responses_message("Hi there"));

        let (status, headers, text) = fetch_text(&mock, "/v1/responses").await;
        assert_eq!(status, 200);
        assert_eq!(headers["content-type"], "text/event-stream; charset=utf-8");
        let events = parse_sse(&text);
        let names: Vec<String> = events.iter().map(|(e, _)| e.clone().unwrap()).collect();
        assert_eq!(
            names,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed"
            ]
        );
        let datas: Vec<Value> = events.iter().map(|(_, d)| serde_json::from_str(d).unwrap()).collect();
        for (i, ((name, _), data)) in events.iter().zip(&datas).enumerate() {
            assert_eq!(data["type"], name.clone().unwrap());
            assert_eq!(data["sequence_number"], i);
        }
        let resp_id = datas[0]["response"]["id"].as_str().unwrap();
        assert!(resp_id.starts_with("resp_"));
        assert_eq!(datas[0]["response"]["status"], "in_progress");
        let item_id = datas[2]["item"]["id"].as_str().unwrap();
        let deltas: String = datas[4..7]
            .iter()
            .map(|d| {
                assert_eq!(d["item_id"], item_id);
                d["delta"].as_str().unwrap()
            })
            .collect();
        assert_eq!(deltas, "Hello!");
        assert_eq!(datas[7]["text"], "Hello!");
        assert_eq!(datas[8]["part"]["text"], "Hello!");
        assert_eq!(datas[9]["item"]["status"], "completed");
        let done = &datas[10]["response"];
        assert_eq!(done["id"], resp_id);
        assert_eq!(done["status"], "completed");
        assert_eq!(done["output"][0]["content"][0]["text"], "Hello!");
        assert_eq!(done["usage"]["output_tokens"], OUTPUT_TOKENS);

        let (_, _, text) = fetch_text(&mock, "/v1/responses").await;
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["object"], "response");
        assert_eq!(body["status"], "completed");
        assert_eq!(body["output"][0]["type"], "message");
        assert_eq!(body["output"][0]["content"][0]["type"], "output_text");
        assert_eq!(body["output"][0]["content"][0]["text"], "Hi there");
        assert_eq!(body["usage"]["total_tokens"], INPUT_TOKENS + OUTPUT_TOKENS);
    }

    #[tokio::test]
    async fn reply_builders() {
        let r = Reply::anthropic_stream(&["a"]).paced(Duration::from_millis(5)).cut_after(2);
        match &r {
            Reply::Stream { chunks, end, headers, .. } => {
                assert_eq!(chunks.len(), 2);
                assert!(chunks.iter().all(|(d, _)| *d == Duration::from_millis(5)));
                assert_eq!(*end, StreamEnd::Cut);
                assert_eq!(headers.iter().filter(|(k, _)| k == "content-type").count(), 1);
            }
            other => panic!("{other:?}"),
        }
        let r = Reply::status(200).after(Duration::from_millis(1)).with_header("x", "1").with_status(418);
        assert_eq!(
            r,
            Reply::Delayed {
                delay: Duration::from_millis(1),
                reply: Box::new(Reply::Full { status: 418, headers: vec![h("x", "1")], body: Bytes::new() }),
            }
        );
        assert_eq!(Reply::Stall.with_header("x", "1"), Reply::Stall);
        // An invalid script is answered with a loud 500.
        let mock = MockUpstream::start().await;
        mock.push(Reply::status(200).with_header("bad header", "x"));
        let resp = client().get(mock.url()).send().await.unwrap();
        assert_eq!(resp.status(), 500);
        assert!(resp.text().await.unwrap().contains("invalid scripted reply"));
    }

    #[tokio::test]
    async fn drop_shuts_the_server_down() {
        let mock = MockUpstream::start().await;
        let addr = mock.addr();
        let shared = mock.shared.clone();
        let mut stopped = shared.stopped.subscribe();
        mock.set_default(Reply::Stall);
        let c = client();
        let url = mock.url();
        let pending = tokio::spawn(async move { c.get(url).send().await });
        mock.wait_for_requests(1).await;
        drop(mock);
        stopped.wait_for(|s| *s).await.unwrap();
        // In-flight connections are closed, and that is not a cancellation.
        assert!(pending.await.unwrap().is_err());
        assert_eq!(*shared.cancellations.borrow(), 0);
        let err = TcpStream::connect(addr).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);
    }

    #[tokio::test]
    async fn shutdown_then_restart_on_the_same_port() {
        let mock = MockUpstream::start().await;
        let addr = mock.addr();
        assert_eq!(client().get(mock.url()).send().await.unwrap().status(), 200);
        mock.shutdown().await;
        assert!(client().get(format!("http://{addr}")).send().await.is_err());
        let mock = MockUpstream::try_start_at(addr).await.unwrap();
        assert_eq!(mock.addr(), addr);
        mock.push(Reply::status(204));
        assert_eq!(client().get(mock.url()).send().await.unwrap().status(), 204);
    }
}
