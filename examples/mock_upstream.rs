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
use serde_json::{Value, json};
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

fn sse(event: Option<&str>, data: &Value) -> String {
    match event {
        Some(e) => format!("event: {e}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

fn anthropic_json(text: &str) -> Value {
    json!({
        "id": "msg_mock0001", "type": "message", "role": "assistant", "model": MODEL,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 25, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                  "output_tokens": 16, "service_tier": "standard"}
    })
}

fn chat_json(text: &str) -> Value {
    json!({
        "id": "chatcmpl-mock0001", "object": "chat.completion", "created": 1_760_000_000, "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": null, "annotations": []},
                     "logprobs": null, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 25, "completion_tokens": 16, "total_tokens": 41,
                  "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                  "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
        "service_tier": "default", "system_fingerprint": "fp_mock"
    })
}

fn responses_usage() -> Value {
    json!({"input_tokens": 25, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 16,
           "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 41})
}

fn responses_object(status: &str, output: Value, usage: Value) -> Value {
    json!({
        "id": "resp_mock0001", "object": "response", "created_at": 1_760_000_000, "status": status,
        "background": false, "error": null, "incomplete_details": null, "instructions": null,
        "max_output_tokens": null, "model": MODEL, "output": output, "parallel_tool_calls": true,
        "previous_response_id": null, "reasoning": {"effort": null, "summary": null},
        "service_tier": "default", "store": true, "temperature": 1.0, "text": {"format": {"type": "text"}},
        "tool_choice": "auto", "tools": [], "top_p": 1.0, "truncation": "disabled", "usage": usage,
        "user": null, "metadata": {}
    })
}

fn responses_message(status: &str, text: Option<&str>) -> Value {
    let content = match text {
        Some(t) => json!([{"type": "output_text", "annotations": [], "logprobs": [], "text": t}]),
        None => json!([]),
    };
    json!({"id": "msg_mock0001", "type": "message", "status": status, "content": content, "role": "assistant"})
}

fn responses_json(text: &str) -> Value {
    responses_object("completed", json!([responses_message("completed", Some(text))]), responses_usage())
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
            let head = [
                sse(
                    Some("message_start"),
                    &json!({"type": "message_start", "message": {
                        "id": "msg_mock0001", "type": "message", "role": "assistant", "model": MODEL,
                        "content": [], "stop_reason": null, "stop_sequence": null,
                        "usage": {"input_tokens": 25, "cache_creation_input_tokens": 0,
                                  "cache_read_input_tokens": 0, "output_tokens": 1, "service_tier": "standard"}}}),
                ),
                sse(Some("ping"), &json!({"type": "ping"})),
                // In the API's member order, `type` first (`json!` would sort the keys).
                "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\
                 \"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
                    .to_string(),
            ]
            .concat();
            // `type` first, as the API writes its deltas (`json!` would sort the keys).
            let delta = format!(
                "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":{}}}}}\n\n",
                Value::String(delta_text.clone())
            );
            let tail = concat!(
                "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
                "event: message_delta\ndata: {\"type\":\"message_delta\",\
                 \"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":16}}\n\n",
                "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
            )
            .to_string();
            Prebuilt {
                json: Bytes::from(anthropic_json(&text).to_string()),
                head: Bytes::from(head),
                delta: Bytes::from(delta),
                tail: Bytes::from(tail),
                error: Bytes::from(
                    json!({"type": "error", "error": {"type": "overloaded_error", "message": "mock upstream error"}})
                        .to_string(),
                ),
            }
        }
        Proto::Chat => {
            let chunk = |choices: Value, usage: Value| {
                sse(
                    None,
                    &json!({"id": "chatcmpl-mock0001", "object": "chat.completion.chunk", "created": 1_760_000_000,
                            "model": MODEL, "service_tier": "default", "system_fingerprint": "fp_mock",
                            "choices": choices, "usage": usage}),
                )
            };
            let head = chunk(
                json!([{"index": 0, "delta": {"role": "assistant", "content": "", "refusal": null},
                        "logprobs": null, "finish_reason": null}]),
                Value::Null,
            );
            // In OpenAI's member order (`json!` would sort the keys), as the API streams it.
            let delta = format!(
                "data: {{\"id\":\"chatcmpl-mock0001\",\"object\":\"chat.completion.chunk\",\"created\":1760000000,\
                 \"model\":{},\"service_tier\":\"default\",\"system_fingerprint\":\"fp_mock\",\
                 \"choices\":[{{\"index\":0,\"delta\":{{\"content\":{}}},\"logprobs\":null,\"finish_reason\":null}}],\
                 \"usage\":null}}\n\n",
                Value::from(MODEL),
                Value::String(delta_text.clone())
            );
            let tail = [
                chunk(json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": "stop"}]), Value::Null),
                chunk(json!([]), chat_json("")["usage"].clone()),
                "data: [DONE]\n\n".to_string(),
            ]
            .concat();
            Prebuilt {
                json: Bytes::from(chat_json(&text).to_string()),
                head: Bytes::from(head),
                delta: Bytes::from(delta),
                tail: Bytes::from(tail),
                error: Bytes::from(
                    json!({"error": {"message": "mock upstream error", "type": "server_error", "param": null,
                                     "code": null}})
                    .to_string(),
                ),
            }
        }
        Proto::Responses => {
            // Sequence numbers: head 0..=3, deltas 4.., tail numbered at run time (see below).
            let in_progress = responses_object("in_progress", json!([]), Value::Null);
            let ev = |name: &str, seq: u64, mut data: Value| {
                data["type"] = json!(name);
                data["sequence_number"] = json!(seq);
                sse(Some(name), &data)
            };
            let head = [
                ev("response.created", 0, json!({"response": in_progress})),
                ev("response.in_progress", 1, json!({"response": in_progress})),
                ev(
                    "response.output_item.added",
                    2,
                    json!({"output_index": 0, "item": responses_message("in_progress", None)}),
                ),
                ev(
                    "response.content_part.added",
                    3,
                    json!({"item_id": "msg_mock0001", "output_index": 0, "content_index": 0,
                           "part": {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}}),
                ),
            ]
            .concat();
            // In the API's order, `sequence_number` second; stored with a NUL where the number
            // goes (see `responses_delta`).
            let delta = format!(
                "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"sequence_number\":\0,\"item_id\":\"msg_mock0001\",\"output_index\":0,\"content_index\":0,\"delta\":{},\"logprobs\":[]}}\n\n",
                json!(delta_text)
            );
            let full = text_of(delta_bytes); // the tail repeats one delta's text: enough for the shape
            let done_item = responses_message("completed", Some(&full));
            let tail = [
                ev(
                    "response.output_text.done",
                    0,
                    json!({"item_id": "msg_mock0001", "output_index": 0, "content_index": 0, "text": full, "logprobs": []}),
                ),
                ev(
                    "response.content_part.done",
                    0,
                    json!({"item_id": "msg_mock0001", "output_index": 0, "content_index": 0,
                           "part": {"type": "output_text", "annotations": [], "logprobs": [], "text": full}}),
                ),
                ev("response.output_item.done", 0, json!({"output_index": 0, "item": done_item})),
                ev(
                    "response.completed",
                    0,
                    json!({"response": responses_object("completed", json!([done_item]), responses_usage())}),
                ),
            ]
            .concat();
            Prebuilt {
                json: Bytes::from(responses_json(&text).to_string()),
                head: Bytes::from(head),
                delta: Bytes::from(delta),
                tail: Bytes::from(tail),
                error: Bytes::from(
                    json!({"error": {"message": "mock upstream error", "type": "server_error", "param": null,
                                     "code": "server_error"}})
                    .to_string(),
                ),
            }
        }
        // No preamble: the first chunk is content; the last content chunk is followed by one
        // that finishes the candidate with the final usage.
        Proto::Gemini => Prebuilt {
            json: Bytes::from(gemini_answer(&text)),
            head: Bytes::new(),
            delta: Bytes::from(format!("data: {}\r\n\r\n", gemini_chunk(&delta_text, false))),
            tail: Bytes::from(format!("data: {}\r\n\r\n", gemini_chunk("", true))),
            error: Bytes::from(
                json!({"error": {"code": 503, "message": "mock upstream error", "status": "UNAVAILABLE"}}).to_string(),
            ),
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
                Proto::Anthropic => anthropic_json(&text_of(n as usize)).to_string(),
                Proto::Chat => chat_json(&text_of(n as usize)).to_string(),
                Proto::Responses => responses_json(&text_of(n as usize)).to_string(),
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
