//! A fast mock LLM upstream for the benchmark harness (`bench/run`), so the gateway, not the
//! upstream, is what is measured.
//!
//! Answers the four protocols — `POST /v1/messages` (Anthropic Messages), `/v1/chat/completions`
//! (OpenAI Chat), `/v1/responses` (OpenAI Responses) and `/v1beta/models/{model}:generateContent`
//! (Gemini) — with realistic bodies: JSON with usage, or an SSE stream when the request body says
//! `"stream": true` (Gemini: when the path is `:streamGenerateContent`). Every stream sends its preamble
//! in the same write as the first content event (so a gateway's preamble hold adds nothing) and
//! its terminal events with the last content event; content events come `--pace-ms` apart.
//!
//! Built to stay out of the way: a multi-threaded hyper server, TCP_NODELAY on every socket,
//! bodies prebuilt at start (a request clones `Bytes` references, it does not format JSON).
//!
//! ```text
//! cargo run --release --example mock_upstream -- --listen 127.0.0.1:9100 \
//!     [--latency-ms N] [--events N] [--pace-ms N] [--body-bytes N] [--delta-bytes N] [--threads N]
//! ```
//!
//! Per-request overrides (request headers, which a gateway forwards): `x-mock-latency-ms`,
//! `x-mock-events`, `x-mock-pace-ms`, `x-mock-body-bytes`, and `x-mock-status` (answer that
//! status with the protocol's error body, e.g. 503 for failover scenarios). `GET /health` → 200.
//! Prints `mock_upstream listening on ADDR` once bound (use port 0 to get a free port).
// A benchmark tool: it reports on stdout and fails loudly on bad arguments.
#![allow(clippy::print_stdout, clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use clap::Parser;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{HeaderMap, Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpSocket;
use tokio::time::{Instant, Sleep};

#[derive(Parser, Debug, Clone)]
#[command(about = "Mock Anthropic/OpenAI upstream for benchmarks")]
struct Args {
    /// Address to listen on (port 0 picks a free port; the chosen address is printed).
    #[arg(long, default_value = "127.0.0.1:9100")]
    listen: SocketAddr,
    /// Delay before the answer (non-streaming) or before the first event (streaming).
    #[arg(long, default_value_t = 0)]
    latency_ms: u64,
    /// Content events per stream (text deltas); at least 1.
    #[arg(long, default_value_t = 64)]
    events: u32,
    /// Time between two content events of a stream.
    #[arg(long, default_value_t = 20)]
    pace_ms: u64,
    /// Length of the answer text of a non-streaming answer.
    #[arg(long, default_value_t = 64)]
    body_bytes: usize,
    /// Length of the text of each streamed delta.
    #[arg(long, default_value_t = 6)]
    delta_bytes: usize,
    /// Runtime worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Proto {
    Anthropic,
    Chat,
    Responses,
    Gemini,
}

const MODEL: &str = "mock-model";

/// Prebuilt answers for one protocol.
struct Prebuilt {
    json: Bytes,
    /// The preamble events (without any content).
    head: Bytes,
    /// One content event (Responses: see `responses_delta`, which numbers events).
    delta: Bytes,
    /// The events after the last content event, through the terminal one.
    tail: Bytes,
    error: Bytes,
}

struct Shared {
    args: Args,
    anthropic: Prebuilt,
    chat: Prebuilt,
    responses: Prebuilt,
    gemini: Prebuilt,
}

impl Shared {
    fn prebuilt(&self, p: Proto) -> &Prebuilt {
        match p {
            Proto::Anthropic => &self.anthropic,
            Proto::Chat => &self.chat,
            Proto::Responses => &self.responses,
            Proto::Gemini => &self.gemini,
        }
    }
}

fn text_of(n: usize) -> String {
    const WORDS: &str = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor ";
    WORDS.chars().cycle().take(n.max(1)).collect()
}

fn sse(event: Option<&str>, data: &str) -> String {
    match event {
        Some(e) => format!("event: {e}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

/// A JSON object's text with its members in the order given. `json!` builds a `serde_json::Map`,
/// which sorts its keys; the APIs write theirs in an order of their own (`type` or `id` first),
/// and the mock stands for them: a gateway that reads the usual shape without a parse must meet
/// the usual shape here, or the benchmarks would measure a shape no upstream sends.
fn object(members: &[(&str, String)]) -> String {
    let mut out = String::from("{");
    for (i, (key, value)) in members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&Value::from(*key).to_string());
        out.push(':');
        out.push_str(value);
    }
    out.push('}');
    out
}

fn array(items: &[String]) -> String {
    format!("[{}]", items.join(","))
}

/// A scalar's JSON text.
fn j(value: impl Into<Value>) -> String {
    value.into().to_string()
}

fn null() -> String {
    "null".to_string()
}

fn anthropic_usage(output_tokens: u64) -> String {
    object(&[
        ("input_tokens", j(25)),
        ("cache_creation_input_tokens", j(0)),
        ("cache_read_input_tokens", j(0)),
        ("output_tokens", j(output_tokens)),
        ("service_tier", j("standard")),
    ])
}

/// A message as the Messages API writes it: its answer, or `message_start`'s (no content yet).
fn anthropic_message(content: String, stop_reason: String, output_tokens: u64) -> String {
    object(&[
        ("id", j("msg_mock0001")),
        ("type", j("message")),
        ("role", j("assistant")),
        ("model", j(MODEL)),
        ("content", content),
        ("stop_reason", stop_reason),
        ("stop_sequence", null()),
        ("usage", anthropic_usage(output_tokens)),
    ])
}

fn anthropic_json(text: &str) -> String {
    let block = object(&[("type", j("text")), ("text", j(text))]);
    anthropic_message(array(&[block]), j("end_turn"), 16)
}

fn chat_usage() -> String {
    object(&[
        ("prompt_tokens", j(25)),
        ("completion_tokens", j(16)),
        ("total_tokens", j(41)),
        ("prompt_tokens_details", object(&[("cached_tokens", j(0)), ("audio_tokens", j(0))])),
        (
            "completion_tokens_details",
            object(&[
                ("reasoning_tokens", j(0)),
                ("audio_tokens", j(0)),
                ("accepted_prediction_tokens", j(0)),
                ("rejected_prediction_tokens", j(0)),
            ]),
        ),
    ])
}

fn chat_json(text: &str) -> String {
    let message =
        object(&[("role", j("assistant")), ("content", j(text)), ("refusal", null()), ("annotations", array(&[]))]);
    let choice = object(&[("index", j(0)), ("message", message), ("logprobs", null()), ("finish_reason", j("stop"))]);
    object(&[
        ("id", j("chatcmpl-mock0001")),
        ("object", j("chat.completion")),
        ("created", j(1_760_000_000)),
        ("model", j(MODEL)),
        ("choices", array(&[choice])),
        ("usage", chat_usage()),
        ("service_tier", j("default")),
        ("system_fingerprint", j("fp_mock")),
    ])
}

/// A Chat stream chunk, in the order of the API's chunks (and of the mock's deltas).
fn chat_chunk(choices: String, usage: String) -> String {
    object(&[
        ("id", j("chatcmpl-mock0001")),
        ("object", j("chat.completion.chunk")),
        ("created", j(1_760_000_000)),
        ("model", j(MODEL)),
        ("service_tier", j("default")),
        ("system_fingerprint", j("fp_mock")),
        ("choices", choices),
        ("usage", usage),
    ])
}

fn responses_usage() -> String {
    object(&[
        ("input_tokens", j(25)),
        ("input_tokens_details", object(&[("cached_tokens", j(0))])),
        ("output_tokens", j(16)),
        ("output_tokens_details", object(&[("reasoning_tokens", j(0))])),
        ("total_tokens", j(41)),
    ])
}

fn responses_object(status: &str, output: String, usage: String) -> String {
    object(&[
        ("id", j("resp_mock0001")),
        ("object", j("response")),
        ("created_at", j(1_760_000_000)),
        ("status", j(status)),
        ("background", j(false)),
        ("error", null()),
        ("incomplete_details", null()),
        ("instructions", null()),
        ("max_output_tokens", null()),
        ("model", j(MODEL)),
        ("output", output),
        ("parallel_tool_calls", j(true)),
        ("previous_response_id", null()),
        ("reasoning", object(&[("effort", null()), ("summary", null())])),
        ("service_tier", j("default")),
        ("store", j(true)),
        ("temperature", j(1.0)),
        ("text", object(&[("format", object(&[("type", j("text"))]))])),
        ("tool_choice", j("auto")),
        ("tools", array(&[])),
        ("top_p", j(1.0)),
        ("truncation", j("disabled")),
        ("usage", usage),
        ("user", null()),
        ("metadata", object(&[])),
    ])
}

fn responses_text_part(text: &str) -> String {
    object(&[("type", j("output_text")), ("annotations", array(&[])), ("logprobs", array(&[])), ("text", j(text))])
}

fn responses_message(status: &str, text: Option<&str>) -> String {
    let content = match text {
        Some(t) => array(&[responses_text_part(t)]),
        None => array(&[]),
    };
    object(&[
        ("id", j("msg_mock0001")),
        ("type", j("message")),
        ("status", j(status)),
        ("content", content),
        ("role", j("assistant")),
    ])
}

fn responses_json(text: &str) -> String {
    responses_object("completed", array(&[responses_message("completed", Some(text))]), responses_usage())
}

/// A Gemini stream chunk as the API writes it: its members in the API's order (which `json!`
/// would sort), a space after each colon, the model version and the usage so far in every chunk;
/// the last chunk (`last`) adds the output's count and a finish reason.
fn gemini_chunk(text: &str, last: bool) -> String {
    let (finish, output) = if last {
        (",\"finishReason\": \"STOP\"", "\"candidatesTokenCount\": 16,\"totalTokenCount\": 41")
    } else {
        ("", "\"totalTokenCount\": 25")
    };
    format!(
        "{{\"candidates\": [{{\"content\": {{\"parts\": [{{\"text\": {}}}],\"role\": \"model\"}}{finish},\"index\": 0}}],\
         \"usageMetadata\": {{\"promptTokenCount\": 25,{output},\
         \"promptTokensDetails\": [{{\"modality\": \"TEXT\",\"tokenCount\": 25}}]}},\
         \"modelVersion\": \"{MODEL}\",\"responseId\": \"mock0001\"}}",
        Value::from(text)
    )
}

/// A Gemini answer as the API writes one: pretty-printed, its members in the API's order.
fn gemini_answer(text: &str) -> String {
    format!(
        "{{\n  \"candidates\": [\n    {{\n      \"content\": {{\n        \"parts\": [\n          {{\n            \"text\": {}\n          }}\n        ],\n        \"role\": \"model\"\n      }},\n      \"finishReason\": \"STOP\",\n      \"avgLogprobs\": -0.0815\n    }}\n  ],\n  \"usageMetadata\": {{\n    \"promptTokenCount\": 25,\n    \"candidatesTokenCount\": 16,\n    \"totalTokenCount\": 41,\n    \"promptTokensDetails\": [\n      {{\n        \"modality\": \"TEXT\",\n        \"tokenCount\": 25\n      }}\n    ]\n  }},\n  \"modelVersion\": \"{MODEL}\",\n  \"responseId\": \"mock0001\"\n}}\n",
        Value::from(text)
    )
}

fn build(p: Proto, body_bytes: usize, delta_bytes: usize) -> Prebuilt {
    let text = text_of(body_bytes);
    let delta_text = text_of(delta_bytes);
    match p {
        Proto::Anthropic => {
            let start = object(&[("type", j("message_start")), ("message", anthropic_message(array(&[]), null(), 1))]);
            let head = [
                sse(Some("message_start"), &start),
                sse(Some("ping"), &object(&[("type", j("ping"))])),
                sse(
                    Some("content_block_start"),
                    &object(&[
                        ("type", j("content_block_start")),
                        ("index", j(0)),
                        ("content_block", object(&[("type", j("text")), ("text", j(""))])),
                    ]),
                ),
            ]
            .concat();
            let delta = sse(
                Some("content_block_delta"),
                &object(&[
                    ("type", j("content_block_delta")),
                    ("index", j(0)),
                    ("delta", object(&[("type", j("text_delta")), ("text", j(delta_text.as_str()))])),
                ]),
            );
            let stop_reason = object(&[("stop_reason", j("end_turn")), ("stop_sequence", null())]);
            let tail = [
                sse(Some("content_block_stop"), &object(&[("type", j("content_block_stop")), ("index", j(0))])),
                sse(
                    Some("message_delta"),
                    &object(&[
                        ("type", j("message_delta")),
                        ("delta", stop_reason),
                        ("usage", object(&[("output_tokens", j(16))])),
                    ]),
                ),
                sse(Some("message_stop"), &object(&[("type", j("message_stop"))])),
            ]
            .concat();
            let error = object(&[("type", j("overloaded_error")), ("message", j("mock upstream error"))]);
            Prebuilt {
                json: Bytes::from(anthropic_json(&text)),
                head: Bytes::from(head),
                delta: Bytes::from(delta),
                tail: Bytes::from(tail),
                error: Bytes::from(object(&[("type", j("error")), ("error", error)])),
            }
        }
        Proto::Chat => {
            let choice = |delta: String, finish: String| {
                object(&[("index", j(0)), ("delta", delta), ("logprobs", null()), ("finish_reason", finish)])
            };
            let first = object(&[("role", j("assistant")), ("content", j("")), ("refusal", null())]);
            let head = sse(None, &chat_chunk(array(&[choice(first, null())]), null()));
            let delta_content = object(&[("content", j(delta_text.as_str()))]);
            let delta = sse(None, &chat_chunk(array(&[choice(delta_content, null())]), null()));
            let tail = [
                sse(None, &chat_chunk(array(&[choice(object(&[]), j("stop"))]), null())),
                sse(None, &chat_chunk(array(&[]), chat_usage())),
                "data: [DONE]\n\n".to_string(),
            ]
            .concat();
            let error = object(&[
                ("message", j("mock upstream error")),
                ("type", j("server_error")),
                ("param", null()),
                ("code", null()),
            ]);
            Prebuilt {
                json: Bytes::from(chat_json(&text)),
                head: Bytes::from(head),
                delta: Bytes::from(delta),
                tail: Bytes::from(tail),
                error: Bytes::from(object(&[("error", error)])),
            }
        }
        Proto::Responses => {
            // Sequence numbers: head 0..=3, deltas 4.., tail numbered at run time (see below).
            // Every event's data begins with its `type` and `sequence_number`, as the API's deltas do.
            let ev = |name: &str, seq: u64, rest: &[(&str, String)]| {
                let mut members = vec![("type", j(name)), ("sequence_number", j(seq))];
                members.extend_from_slice(rest);
                sse(Some(name), &object(&members))
            };
            let in_progress = responses_object("in_progress", array(&[]), null());
            // The members of an event about the message's one text part: where it is, then `key`.
            let in_part = |key: &'static str, value: String| {
                vec![("item_id", j("msg_mock0001")), ("output_index", j(0)), ("content_index", j(0)), (key, value)]
            };
            let part_of = |text: &str| in_part("part", responses_text_part(text));
            let text_of_part = |key: &'static str, text: &str| {
                let mut members = in_part(key, j(text));
                members.push(("logprobs", array(&[])));
                members
            };
            let head = [
                ev("response.created", 0, &[("response", in_progress.clone())]),
                ev("response.in_progress", 1, &[("response", in_progress)]),
                ev(
                    "response.output_item.added",
                    2,
                    &[("output_index", j(0)), ("item", responses_message("in_progress", None))],
                ),
                ev("response.content_part.added", 3, &part_of("")),
            ]
            .concat();
            // Stored with a NUL where the number goes (see `responses_delta`).
            let delta = ev("response.output_text.delta", 0, &text_of_part("delta", &delta_text)).replacen(
                "\"sequence_number\":0",
                "\"sequence_number\":\0",
                1,
            );
            let full = text_of(delta_bytes); // the tail repeats one delta's text: enough for the shape
            let done_item = responses_message("completed", Some(&full));
            let completed = responses_object("completed", array(std::slice::from_ref(&done_item)), responses_usage());
            let tail = [
                ev("response.output_text.done", 0, &text_of_part("text", &full)),
                ev("response.content_part.done", 0, &part_of(&full)),
                ev("response.output_item.done", 0, &[("output_index", j(0)), ("item", done_item)]),
                ev("response.completed", 0, &[("response", completed)]),
            ]
            .concat();
            let error = object(&[
                ("message", j("mock upstream error")),
                ("type", j("server_error")),
                ("param", null()),
                ("code", j("server_error")),
            ]);
            Prebuilt {
                json: Bytes::from(responses_json(&text)),
                head: Bytes::from(head),
                delta: Bytes::from(delta),
                tail: Bytes::from(tail),
                error: Bytes::from(object(&[("error", error)])),
            }
        }
        // No preamble: the first chunk is content; the last content chunk is followed by one
        // that finishes the candidate with the final usage.
        Proto::Gemini => Prebuilt {
            json: Bytes::from(gemini_answer(&text)),
            head: Bytes::new(),
            delta: Bytes::from(format!("data: {}\r\n\r\n", gemini_chunk(&delta_text, false))),
            tail: Bytes::from(format!("data: {}\r\n\r\n", gemini_chunk("", true))),
            error: Bytes::from(object(&[(
                "error",
                object(&[("code", j(503)), ("message", j("mock upstream error")), ("status", j("UNAVAILABLE"))]),
            )])),
        },
    }
}

/// A Responses delta with its sequence number.
fn responses_delta(delta: &Bytes, seq: u64, out: &mut BytesMut) {
    let at = delta.iter().position(|&b| b == 0).unwrap_or(delta.len());
    out.extend_from_slice(&delta[..at]);
    out.extend_from_slice(seq.to_string().as_bytes());
    out.extend_from_slice(delta.get(at + 1..).unwrap_or_default());
}

/// Whether a JSON request body asks for a stream: a top-level-looking `"stream": true` (an
/// escaped `\"stream\"` inside a string does not count).
fn wants_stream(body: &[u8]) -> bool {
    let needle = b"\"stream\"";
    let mut from = 0;
    while let Some(pos) = find(&body[from..], needle) {
        let at = from + pos;
        from = at + needle.len();
        if at > 0 && body[at - 1] == b'\\' {
            continue;
        }
        let rest = &body[from..];
        let rest = trim_ws(rest);
        let Some(rest) = rest.strip_prefix(b":") else { continue };
        return trim_ws(rest).starts_with(b"true");
    }
    false
}

fn trim_ws(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|b| b.is_ascii_whitespace()).count();
    &s[n..]
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn header_u64(h: &HeaderMap, name: &str) -> Option<u64> {
    h.get(name)?.to_str().ok()?.trim().parse().ok()
}

/// The response body: one prebuilt buffer, or a paced stream.
enum MockBody {
    Full(Option<Bytes>),
    Stream(Box<Streaming>),
}

struct Streaming {
    proto: Proto,
    head: Bytes,
    delta: Bytes,
    tail: Bytes,
    events: u32,
    sent: u32,
    pace: Duration,
    next_at: Instant,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Streaming {
    /// Content event `i` (0-based), with the preamble before the first and the terminal events
    /// after the last.
    fn chunk(&self, i: u32) -> Bytes {
        let first = i == 0;
        let last = i + 1 == self.events;
        if self.proto != Proto::Responses {
            return match (first, last) {
                (false, false) => self.delta.clone(),
                _ => {
                    let mut b = BytesMut::with_capacity(self.head.len() + self.delta.len() + self.tail.len());
                    if first {
                        b.extend_from_slice(&self.head);
                    }
                    b.extend_from_slice(&self.delta);
                    if last {
                        b.extend_from_slice(&self.tail);
                    }
                    b.freeze()
                }
            };
        }
        let mut b = BytesMut::with_capacity(
            self.delta.len() + 24 + if first { self.head.len() } else { 0 } + if last { self.tail.len() } else { 0 },
        );
        if first {
            b.extend_from_slice(&self.head);
        }
        responses_delta(&self.delta, 4 + u64::from(i), &mut b);
        if last {
            // The prebuilt tail has placeholder sequence numbers 0; renumber them here (once per stream).
            let seq0 = 4 + u64::from(self.events);
            let tail = std::str::from_utf8(&self.tail).unwrap_or_default();
            let mut n = 0u64;
            for piece in tail.split_inclusive("\"sequence_number\":0") {
                if let Some(stripped) = piece.strip_suffix("\"sequence_number\":0") {
                    b.extend_from_slice(stripped.as_bytes());
                    b.extend_from_slice(format!("\"sequence_number\":{}", seq0 + n).as_bytes());
                    n += 1;
                } else {
                    b.extend_from_slice(piece.as_bytes());
                }
            }
        }
        b.freeze()
    }
}

impl Body for MockBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            MockBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            MockBody::Stream(s) => {
                if s.sent >= s.events {
                    return Poll::Ready(None);
                }
                if s.sent > 0 {
                    let sleep = s.sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(s.next_at)));
                    if sleep.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                }
                let chunk = s.chunk(s.sent);
                s.sent += 1;
                // Fixed schedule (no drift): event i is due at start + i × pace.
                s.next_at += s.pace;
                if let Some(sleep) = s.sleep.as_mut() {
                    sleep.as_mut().reset(s.next_at);
                }
                Poll::Ready(Some(Ok(Frame::data(chunk))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            MockBody::Full(b) => b.is_none(),
            MockBody::Stream(s) => s.sent >= s.events,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            MockBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            MockBody::Full(None) => SizeHint::with_exact(0),
            MockBody::Stream(_) => SizeHint::default(),
        }
    }
}

static JSON: HeaderValue = HeaderValue::from_static("application/json");
static SSE: HeaderValue = HeaderValue::from_static("text/event-stream");

fn plain(status: StatusCode, text: &'static str) -> Response<MockBody> {
    let mut r = Response::new(MockBody::Full(Some(Bytes::from_static(text.as_bytes()))));
    *r.status_mut() = status;
    r
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Response<MockBody>, Infallible> {
    let proto = match (req.method(), req.uri().path()) {
        (&Method::POST, "/v1/messages") => Proto::Anthropic,
        (&Method::POST, "/v1/chat/completions") => Proto::Chat,
        (&Method::POST, "/v1/responses") => Proto::Responses,
        (&Method::POST, path) if path.starts_with("/v1beta/models/") => Proto::Gemini,
        (&Method::GET, "/health") => return Ok(plain(StatusCode::OK, "ok")),
        _ => return Ok(plain(StatusCode::NOT_FOUND, "{\"error\":{\"message\":\"mock: unknown path\"}}")),
    };
    let (parts, body) = req.into_parts();
    let h = &parts.headers;
    let a = &shared.args;
    let latency = Duration::from_millis(header_u64(h, "x-mock-latency-ms").unwrap_or(a.latency_ms));
    let status = header_u64(h, "x-mock-status").and_then(|s| StatusCode::from_u16(s as u16).ok());
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Ok(plain(StatusCode::BAD_REQUEST, "body")),
    };
    let stream = match proto {
        Proto::Gemini => parts.uri.path().ends_with(":streamGenerateContent"),
        _ => wants_stream(&body),
    };
    drop(body);
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let pre = shared.prebuilt(proto);
    if let Some(status) = status.filter(|s| !s.is_success()) {
        let mut r = Response::new(MockBody::Full(Some(pre.error.clone())));
        *r.status_mut() = status;
        r.headers_mut().insert(CONTENT_TYPE, JSON.clone());
        return Ok(r);
    }
    if !stream {
        let json = match header_u64(h, "x-mock-body-bytes") {
            Some(n) => Bytes::from(match proto {
                Proto::Anthropic => anthropic_json(&text_of(n as usize)),
                Proto::Chat => chat_json(&text_of(n as usize)),
                Proto::Responses => responses_json(&text_of(n as usize)),
                Proto::Gemini => gemini_answer(&text_of(n as usize)),
            }),
            None => pre.json.clone(),
        };
        let mut r = Response::new(MockBody::Full(Some(json)));
        r.headers_mut().insert(CONTENT_TYPE, JSON.clone());
        return Ok(r);
    }
    let events = header_u64(h, "x-mock-events").map_or(a.events, |n| n as u32).max(1);
    let pace = Duration::from_millis(header_u64(h, "x-mock-pace-ms").unwrap_or(a.pace_ms));
    let s = Streaming {
        proto,
        head: pre.head.clone(),
        delta: pre.delta.clone(),
        tail: pre.tail.clone(),
        events,
        sent: 0,
        pace,
        next_at: Instant::now(),
        sleep: None,
    };
    let mut r = Response::new(MockBody::Stream(Box::new(s)));
    r.headers_mut().insert(CONTENT_TYPE, SSE.clone());
    r.headers_mut().insert("cache-control", HeaderValue::from_static("no-cache"));
    Ok(r)
}

fn main() {
    let args = Args::parse();
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.threads {
        rt.worker_threads(n.max(1));
    }
    let rt = rt.enable_all().build().expect("runtime");
    rt.block_on(serve(args));
}

async fn serve(args: Args) {
    let shared = Arc::new(Shared {
        anthropic: build(Proto::Anthropic, args.body_bytes, args.delta_bytes),
        chat: build(Proto::Chat, args.body_bytes, args.delta_bytes),
        responses: build(Proto::Responses, args.body_bytes, args.delta_bytes),
        gemini: build(Proto::Gemini, args.body_bytes, args.delta_bytes),
        args: args.clone(),
    });
    let socket = if args.listen.is_ipv4() { TcpSocket::new_v4() } else { TcpSocket::new_v6() }.expect("socket");
    socket.set_reuseaddr(true).expect("reuseaddr");
    socket.bind(args.listen).expect("bind");
    let listener = socket.listen(8192).expect("listen");
    println!("mock_upstream listening on {}", listener.local_addr().expect("addr"));
    loop {
        let (tcp, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors and the like: back off briefly instead of spinning.
                eprintln!("mock_upstream: accept: {e}");
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| handle(shared.clone(), req));
            let _ = http1::Builder::new().keep_alive(true).serve_connection(TokioIo::new(tcp), service).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_flag_detection() {
        assert!(wants_stream(br#"{"model":"m","stream":true}"#));
        assert!(wants_stream(br#"{"model":"m", "stream" : true}"#));
        assert!(!wants_stream(br#"{"model":"m","stream":false}"#));
        assert!(!wants_stream(br#"{"content":"say \"stream\": true","model":"m"}"#));
        assert!(!wants_stream(br#"{"model":"m"}"#));
    }

    #[test]
    fn gemini_bodies_are_spaced_as_the_api_spaces_them() {
        let answer = gemini_answer("hi \"there\"");
        let v: Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(v["candidates"][0]["content"]["parts"][0]["text"], "hi \"there\"");
        assert_eq!(v["usageMetadata"]["candidatesTokenCount"], 16);
        assert!(answer.starts_with("{\n  \"candidates\": [\n    {\n"), "{answer}");
        for last in [false, true] {
            let chunk = gemini_chunk("a", last);
            let v: Value = serde_json::from_str(&chunk).unwrap();
            assert_eq!(v["usageMetadata"]["promptTokenCount"], 25, "{chunk}");
            assert_eq!(v["usageMetadata"].get("candidatesTokenCount").is_some(), last, "{chunk}");
            assert_eq!(v["candidates"][0].get("finishReason").is_some(), last, "{chunk}");
            assert!(chunk.starts_with("{\"candidates\": [{\"content\": {"), "{chunk}");
        }
    }

    /// Each event's data of a stream `proto` sends, with its event name.
    fn events_of(proto: Proto) -> Vec<(Option<String>, String)> {
        let p = build(proto, 10, 4);
        let all = [p.head.as_ref(), p.delta.as_ref(), p.tail.as_ref()].concat();
        let text = String::from_utf8(all).unwrap().replace("\r\n", "\n");
        let text = text.replace('\0', "4");
        text.split("\n\n")
            .filter(|block| !block.is_empty())
            .map(|block| {
                let name = block.lines().find_map(|l| l.strip_prefix("event: ")).map(str::to_string);
                let data = block.lines().find_map(|l| l.strip_prefix("data: ")).unwrap().to_string();
                (name, data)
            })
            .collect()
    }

    #[test]
    fn bodies_and_events_have_the_apis_member_order() {
        assert!(
            anthropic_json("a").starts_with(r#"{"id":"msg_mock0001","type":"message","role":"assistant","model":"#)
        );
        assert!(chat_json("a").starts_with(r#"{"id":"chatcmpl-mock0001","object":"chat.completion","created":"#));
        assert!(responses_json("a").starts_with(r#"{"id":"resp_mock0001","object":"response","created_at":"#));
        for (name, data) in events_of(Proto::Anthropic) {
            let name = name.unwrap();
            assert!(data.starts_with(&format!(r#"{{"type":"{name}""#)), "{data}");
            if name == "message_start" {
                assert!(
                    data.starts_with(r#"{"type":"message_start","message":{"id":"msg_mock0001","type":"message","#)
                );
            }
        }
        for (name, data) in events_of(Proto::Responses) {
            let name = name.unwrap();
            assert!(data.starts_with(&format!(r#"{{"type":"{name}","sequence_number":"#)), "{data}");
        }
        for (_, data) in events_of(Proto::Chat).into_iter().filter(|(_, d)| d != "[DONE]") {
            assert!(
                data.starts_with(r#"{"id":"chatcmpl-mock0001","object":"chat.completion.chunk","created":"#),
                "{data}"
            );
        }
        let error = build(Proto::Anthropic, 1, 1).error;
        assert!(error.starts_with(br#"{"type":"error","error":{"type":"#));
    }

    #[test]
    fn streams_are_valid_sse_with_numbered_responses_events() {
        for proto in [Proto::Anthropic, Proto::Chat, Proto::Responses, Proto::Gemini] {
            let p = build(proto, 10, 4);
            let s = Streaming {
                proto,
                head: p.head.clone(),
                delta: p.delta.clone(),
                tail: p.tail.clone(),
                events: 3,
                sent: 0,
                pace: Duration::ZERO,
                next_at: Instant::now(),
                sleep: None,
            };
            let all: Vec<u8> = (0..3).flat_map(|i| s.chunk(i).to_vec()).collect();
            let text = String::from_utf8(all).unwrap();
            let mut seq = Vec::new();
            for block in text.replace("\r\n", "\n").split("\n\n").filter(|b| !b.is_empty()) {
                let data = block.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
                if data == "[DONE]" {
                    continue;
                }
                let v: Value = serde_json::from_str(data).unwrap_or_else(|e| panic!("{proto:?} {data}: {e}"));
                if let Some(n) = v.get("sequence_number") {
                    seq.push(n.as_u64().unwrap());
                }
            }
            if proto == Proto::Responses {
                assert_eq!(seq, (0..seq.len() as u64).collect::<Vec<_>>());
            }
        }
    }
}
