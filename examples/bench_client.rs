//! The benchmark harness's own client (`bench/run`), for what `wrk` cannot measure.
//!
//! ```text
//! bench_client body --kind small|large|codex|chat|chat-tools|gemini --model M [--stream]   # a request body on stdout
//! bench_client latency --target 'NAME|URL|BODY_FILE[|Header: value...]' ... --n N [--stream]
//!                      [--pre 'NAME|URL'] [--out FILE]
//! bench_client streams --url URL --body FILE [--header 'Name: value'] --streams N --pace-ms P
//!                      [--ramp-ms R] [--rss-pid PID] [--out FILE]
//! ```
//!
//! `latency` sends one request at a time, alternating between the targets (in an order drawn
//! afresh every round, so none always goes first and none always follows the same other one: a
//! request's latency depends on what ran on the machine just before it), each target on its own
//! keep-alive connection, and reports per-target percentiles and each target's difference to the
//! first one: measured interleaved, the machine's noise hits every target alike. With `--stream`
//! it also reports the time to the first body bytes (the first content event: the mock sends its
//! preamble together with it). `--pre` POSTs to a URL (untimed) before each request of that
//! target, e.g. to reset a breaker.
//!
//! `streams` opens N concurrent streams (one connection each, spread over `--ramp-ms`) and
//! reports how many completed with their terminal event, how many stalled (a gap between two
//! arrivals longer than 2 × the pace), time-to-first-bytes and gap percentiles, and, with
//! `--rss-pid`, the resident memory of that process while every stream is open.
// A benchmark tool: it reports on stdout and fails loudly on bad arguments.
#![allow(clippy::print_stdout, clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Parser, Subcommand};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{CONTENT_TYPE, HOST, HeaderName, HeaderValue};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;

#[derive(Parser)]
#[command(about = "Benchmark client for bench/run")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print a request body on stdout (Anthropic Messages; `codex`: a Responses request; `chat`:
    /// an OpenAI Chat request).
    Body {
        /// `small` (one short user turn), `large` (Claude Code turn 2 grown to ~200 KB of history),
        /// `codex` (Codex CLI's turn 2, a Responses request), `chat` (the short turn as an
        /// OpenAI SDK sends it to Chat Completions) or `chat-tools` (Codex CLI 0.80's turn 2 to
        /// Chat Completions, with its six tools).
        #[arg(long)]
        kind: String,
        #[arg(long)]
        model: String,
        #[arg(long)]
        stream: bool,
        /// Target size of the large body, in bytes.
        #[arg(long, default_value_t = 200 * 1024)]
        size: usize,
        /// Directory of the client fixtures.
        #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/clients"))]
        fixtures: String,
    },
    /// Interleaved sequential requests to several targets.
    Latency {
        /// `NAME|URL|BODY_FILE[|Header: value...]`; the first target is the baseline.
        #[arg(long = "target", required = true)]
        targets: Vec<String>,
        /// Measured requests per target.
        #[arg(long, default_value_t = 1000)]
        n: usize,
        /// Unmeasured requests per target first.
        #[arg(long, default_value_t = 100)]
        warmup: usize,
        /// Streaming requests: also measure the time to the first body bytes.
        #[arg(long)]
        stream: bool,
        /// `NAME|URL`: POST to URL (untimed) before each request to target NAME.
        #[arg(long = "pre")]
        pre: Vec<String>,
        /// Give up after this many seconds (the report says so).
        #[arg(long, default_value_t = 300)]
        max_secs: u64,
        /// Pause between two rounds (lets every thread of the target go idle, as between a
        /// user's requests; 0 = back to back).
        #[arg(long, default_value_t = 0)]
        gap_ms: u64,
        #[arg(long)]
        out: Option<String>,
    },
    /// Many concurrent streams: stall-free count, first-bytes time, memory.
    Streams {
        #[arg(long)]
        url: String,
        #[arg(long)]
        body: String,
        #[arg(long = "header")]
        headers: Vec<String>,
        #[arg(long)]
        streams: usize,
        /// The upstream's pace between events; a gap over twice this is a stall.
        #[arg(long, default_value_t = 20)]
        pace_ms: u64,
        /// Open the streams evenly over this time.
        #[arg(long, default_value_t = 1000)]
        ramp_ms: u64,
        /// Sample this process's VmRSS while the streams are open.
        #[arg(long)]
        rss_pid: Option<u32>,
        /// `NAME=PID`: report the CPU time this process spent during the run (repeatable); the
        /// client's own is always reported.
        #[arg(long = "cpu-pid")]
        cpu_pids: Vec<String>,
        /// Give up on streams still running after this many seconds.
        #[arg(long, default_value_t = 60)]
        timeout_secs: u64,
        /// Client runtime threads (one is not enough on a loaded 2-core machine: the client itself
        /// then stalls; check any stall figure against the direct run).
        #[arg(long, default_value_t = 2)]
        threads: usize,
        #[arg(long)]
        out: Option<String>,
    },
}

fn main() {
    match Cli::parse().cmd {
        Cmd::Body { kind, model, stream, size, fixtures } => {
            let body = match kind.as_str() {
                "small" => small_body(&model, stream),
                "large" => long_history(&fixtures, &model, stream, size),
                "codex" => captured_turn(&fixtures, CODEX_TURN, &model, stream),
                "chat-tools" => captured_turn(&fixtures, CODEX_CHAT_TURN, &model, stream),
                "chat" => chat_body(&model, stream),
                "gemini" => gemini_body(),
                other => panic!("unknown body kind {other}"),
            };
            println!("{}", String::from_utf8(body).unwrap());
        }
        Cmd::Latency { targets, n, warmup, stream, pre, max_secs, gap_ms, out } => {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let gap = Duration::from_millis(gap_ms);
            let report = rt.block_on(latency(targets, n, warmup, stream, pre, Duration::from_secs(max_secs), gap));
            emit(&report, out.as_deref());
        }
        Cmd::Streams {
            url,
            body,
            headers,
            streams: count,
            pace_ms,
            ramp_ms,
            rss_pid,
            cpu_pids,
            timeout_secs,
            threads,
            out,
        } => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads.max(1))
                .enable_all()
                .build()
                .unwrap();
            let body = Bytes::from(std::fs::read(&body).expect("body file"));
            let headers = headers.iter().map(|h| parse_header(h)).collect();
            let report = rt.block_on(streams(StreamsArgs {
                url: Url::parse(&url),
                body,
                headers,
                count,
                pace: Duration::from_millis(pace_ms),
                ramp: Duration::from_millis(ramp_ms),
                rss_pid,
                cpu_pids: cpu_pids
                    .iter()
                    .map(|s| {
                        let (name, pid) = s.split_once('=').expect("--cpu-pid NAME=PID");
                        (name.to_string(), pid.parse().expect("--cpu-pid NAME=PID"))
                    })
                    .collect(),
                timeout: Duration::from_secs(timeout_secs),
            }));
            emit(&report, out.as_deref());
        }
    }
}

fn emit(report: &Value, out: Option<&str>) {
    let text = serde_json::to_string_pretty(report).unwrap();
    match out {
        Some(path) => std::fs::write(path, text + "\n").expect("write report"),
        None => println!("{text}"),
    }
}

// ------------------------------------------------------------------ bodies

fn small_body(model: &str, stream: bool) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "model": model,
        "max_tokens": 256,
        "messages": [{"role": "user", "content": "Write a haiku about a gateway."}],
        "stream": stream,
    }))
    .unwrap()
}

/// The short turn as an OpenAI SDK sends it to Chat Completions (asking for usage in a stream,
/// as clients that count tokens do).
fn chat_body(model: &str, stream: bool) -> Vec<u8> {
    let mut body = json!({
        "model": model,
        "max_completion_tokens": 256,
        "messages": [{"role": "user", "content": "Write a haiku about a gateway."}],
        "stream": stream,
    });
    if stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    serde_json::to_vec(&body).unwrap()
}

/// The short turn as Gemini CLI and the Google SDKs send it to `generateContent` (the model and
/// whether to stream are in the path, not the body).
fn gemini_body() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "contents": [{"role": "user", "parts": [{"text": "Write a haiku about a gateway."}]}],
        "generationConfig": {"maxOutputTokens": 256},
    }))
    .unwrap()
}

/// Claude Code's turn-2 request with its history grown to about `target` bytes by repeating
/// realistic tool round trips (as `benches/convert.rs` does, so both measure the same body).
fn long_history(fixtures: &str, model: &str, stream: bool, target: usize) -> Vec<u8> {
    let path = format!("{fixtures}/claude_code_2.1.197_turn2_tool_result.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut body = serde_json::from_str::<Value>(&text).expect("fixture json")["body"].clone();
    let prose = "The build finished; the failing test is in src/routing.rs where the fast queue ordering \
                 breaks ties by name. I will adjust the comparator and run the suite again. "
        .repeat(20);
    let mut n = 0;
    while serde_json::to_vec(&body).unwrap().len() < target {
        let messages = body["messages"].as_array_mut().expect("messages");
        let id = format!("toolu_bench_{n}");
        messages.push(json!({"role": "assistant", "content": [
            {"type": "text", "text": prose},
            {"type": "tool_use", "id": id, "name": "Bash", "input": {"command": format!("cargo test -- case_{n}"), "description": "run one test"}}
        ]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": prose}
        ]}));
        n += 1;
    }
    body["messages"].as_array_mut().unwrap().push(json!({"role": "user", "content": "continue"}));
    body["model"] = json!(model);
    body["stream"] = json!(stream);
    serde_json::to_vec(&body).unwrap()
}

/// Codex CLI's turn-2 Responses request as captured (~12 KB: its instructions, tools and a
/// function call's output), for a gateway that converts what Codex sends.
const CODEX_TURN: &str = "codex_0.171.0_responses_turn2_function_call_output.json";

/// Codex CLI 0.80's turn 2 as it sent it to Chat Completions (its tools and a tool result).
const CODEX_CHAT_TURN: &str = "codex_0.80.0_chat_turn2_tool.json";

/// A captured request body from the fixtures, with the benchmark's model and stream flag.
fn captured_turn(fixtures: &str, file: &str, model: &str, stream: bool) -> Vec<u8> {
    let path = format!("{fixtures}/{file}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut body = serde_json::from_str::<Value>(&text).expect("fixture json")["body"].clone();
    body["model"] = json!(model);
    body["stream"] = json!(stream);
    serde_json::to_vec(&body).unwrap()
}

// ------------------------------------------------------------------ HTTP plumbing

#[derive(Clone, Debug)]
struct Url {
    addr: SocketAddr,
    authority: String,
    path: String,
}

impl Url {
    fn parse(url: &str) -> Url {
        let rest = url.strip_prefix("http://").unwrap_or_else(|| panic!("only http:// URLs: {url}"));
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let host = authority.replace("localhost", "127.0.0.1");
        let addr: SocketAddr = host.parse().unwrap_or_else(|_| panic!("URL needs IP:port: {url}"));
        Url { addr, authority: authority.to_string(), path: path.to_string() }
    }
}

fn parse_header(h: &str) -> (HeaderName, HeaderValue) {
    let (name, value) = h.split_once(':').unwrap_or_else(|| panic!("header must be 'Name: value': {h}"));
    (HeaderName::from_bytes(name.trim().as_bytes()).unwrap(), HeaderValue::from_str(value.trim()).unwrap())
}

async fn connect(addr: SocketAddr) -> std::io::Result<SendRequest<Full<Bytes>>> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let (sender, conn) = http1::handshake(TokioIo::new(tcp)).await.map_err(std::io::Error::other)?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

fn request(url: &Url, body: &Bytes, headers: &[(HeaderName, HeaderValue)]) -> Request<Full<Bytes>> {
    let mut req = Request::builder()
        .method(Method::POST)
        .uri(url.path.as_str())
        .header(HOST, url.authority.as_str())
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(body.clone()))
        .unwrap();
    for (name, value) in headers {
        req.headers_mut().insert(name.clone(), value.clone());
    }
    req
}

/// What ends each protocol's stream, as it appears in SSE bytes: Anthropic, Chat, Responses, Gemini (a finished candidate).
const TERMINALS: [&[u8]; 4] = [b"message_stop", b"[DONE]", b"response.completed", b"\"finishReason\""];

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// One exchange on a kept-alive connection (reconnecting when the server closed it).
struct Conn {
    url: Url,
    sender: Option<SendRequest<Full<Bytes>>>,
}

struct Exchange {
    status: u16,
    /// The start of the body of a non-2xx answer.
    snippet: Option<String>,
    total: Duration,
    first_bytes: Option<Duration>,
    terminal: bool,
    attempts: Option<String>,
}

impl Conn {
    async fn ready(&mut self) -> &mut SendRequest<Full<Bytes>> {
        let usable = match self.sender.as_mut() {
            Some(s) => s.ready().await.is_ok(),
            None => false,
        };
        if !usable {
            self.sender = Some(connect(self.url.addr).await.unwrap_or_else(|e| panic!("connect {:?}: {e}", self.url)));
        }
        self.sender.as_mut().unwrap()
    }

    async fn exchange(&mut self, body: &Bytes, headers: &[(HeaderName, HeaderValue)]) -> Result<Exchange, String> {
        let req = request(&self.url, body, headers);
        let sender = self.ready().await;
        let start = Instant::now();
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let attempts = resp.headers().get("x-ccmesh-attempts").and_then(|v| v.to_str().ok()).map(str::to_string);
        let mut body = resp.into_body();
        let mut first_bytes = None;
        let mut terminal = false;
        let mut snippet: Option<String> = None;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| e.to_string())?;
            if let Some(data) = frame.data_ref()
                && !data.is_empty()
            {
                first_bytes.get_or_insert_with(|| start.elapsed());
                terminal |= TERMINALS.iter().any(|t| contains(data, t));
                if !(200..300).contains(&status) && snippet.is_none() {
                    snippet = Some(String::from_utf8_lossy(&data[..data.len().min(300)]).into_owned());
                }
            }
        }
        Ok(Exchange { status, snippet, total: start.elapsed(), first_bytes, terminal, attempts })
    }
}

// ------------------------------------------------------------------ statistics

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn summary_us(samples: &mut [f64]) -> Value {
    samples.sort_by(|a, b| a.total_cmp(b));
    let mean = if samples.is_empty() { f64::NAN } else { samples.iter().sum::<f64>() / samples.len() as f64 };
    json!({
        "n": samples.len(),
        "min": round1(samples.first().copied().unwrap_or(f64::NAN)),
        "p50": round1(percentile(samples, 50.0)),
        "p90": round1(percentile(samples, 90.0)),
        "p99": round1(percentile(samples, 99.0)),
        "max": round1(samples.last().copied().unwrap_or(f64::NAN)),
        "mean": round1(mean),
    })
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn round1(x: f64) -> Value {
    if x.is_finite() { json!((x * 10.0).round() / 10.0) } else { Value::Null }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

// ------------------------------------------------------------------ latency

/// The order of round `round`'s targets: a permutation of `0..k` drawn from the round's number
/// (the same for every run), every order equally likely. A fixed rotation kept each target
/// behind the same other one in most rounds, and a target measured right after another gateway
/// of the same binary, or right after the floor, starts from different caches.
fn round_order(round: usize, k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..k).collect();
    let mut state = (round as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0xd1b5_4a32_d192_ed03;
    for i in (1..k).rev() {
        // splitmix64
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        order.swap(i, (z % (i as u64 + 1)) as usize);
    }
    order
}

struct Target {
    name: String,
    conn: Conn,
    body: Bytes,
    headers: Vec<(HeaderName, HeaderValue)>,
    pre: Option<Conn>,
    total: Vec<f64>,
    first: Vec<f64>,
    errors: usize,
    non2xx: usize,
    incomplete: usize,
    attempts: std::collections::BTreeMap<String, usize>,
    last_error: Option<String>,
}

async fn latency(
    specs: Vec<String>,
    n: usize,
    warmup: usize,
    stream: bool,
    pre: Vec<String>,
    max: Duration,
    gap: Duration,
) -> Value {
    let mut targets: Vec<Target> = specs
        .iter()
        .map(|spec| {
            let mut parts = spec.split('|');
            let name = parts.next().unwrap().to_string();
            let url = Url::parse(parts.next().expect("target URL"));
            let body_file = parts.next().expect("target body file");
            let body = Bytes::from(std::fs::read(body_file).unwrap_or_else(|e| panic!("{body_file}: {e}")));
            let headers = parts.map(parse_header).collect();
            let pre = pre.iter().find_map(|p| {
                let (n, u) = p.split_once('|').expect("--pre NAME|URL");
                (n == name).then(|| Conn { url: Url::parse(u), sender: None })
            });
            Target {
                name,
                conn: Conn { url, sender: None },
                body,
                headers,
                pre,
                total: Vec::with_capacity(n),
                first: Vec::with_capacity(n),
                errors: 0,
                non2xx: 0,
                incomplete: 0,
                attempts: Default::default(),
                last_error: None,
            }
        })
        .collect();
    let empty = Bytes::new();
    let started = Instant::now();
    let mut rounds = 0usize;
    let mut timed_out = false;
    for round in 0..warmup + n {
        if started.elapsed() > max {
            timed_out = true;
            break;
        }
        let measured = round >= warmup;
        for j in round_order(round, targets.len()) {
            let t = &mut targets[j];
            if let Some(pre) = t.pre.as_mut() {
                let _ = pre.exchange(&empty, &[]).await;
            }
            if !gap.is_zero() {
                tokio::time::sleep(gap).await;
            }
            match t.conn.exchange(&t.body, &t.headers).await {
                Ok(x) => {
                    if !measured {
                        continue;
                    }
                    if !(200..300).contains(&x.status) {
                        t.non2xx += 1;
                        t.last_error = Some(format!("HTTP {}: {}", x.status, x.snippet.unwrap_or_default()));
                        continue;
                    }
                    if stream && !x.terminal {
                        t.incomplete += 1;
                    }
                    *t.attempts.entry(x.attempts.unwrap_or_else(|| "-".into())).or_default() += 1;
                    t.total.push(us(x.total));
                    if let Some(f) = x.first_bytes {
                        t.first.push(us(f));
                    }
                }
                Err(e) => {
                    t.errors += 1;
                    t.last_error = Some(e);
                    t.conn.sender = None;
                }
            }
        }
        if measured {
            rounds += 1;
        }
    }
    let mut out = serde_json::Map::new();
    let mut base: Option<(Value, Value)> = None;
    let mut added = serde_json::Map::new();
    for t in &mut targets {
        let total = summary_us(&mut t.total);
        let first = summary_us(&mut t.first);
        let entry = json!({
            "total_us": total,
            "first_bytes_us": if stream { first.clone() } else { Value::Null },
            "errors": t.errors,
            "non_2xx": t.non2xx,
            "incomplete_streams": t.incomplete,
            "x_ccmesh_attempts": t.attempts,
            "last_error": t.last_error,
        });
        match &base {
            None => base = Some((total, first)),
            Some((bt, bf)) => {
                let diff = |a: &Value, b: &Value, key: &str| match (a[key].as_f64(), b[key].as_f64()) {
                    (Some(x), Some(y)) => round1(x - y),
                    _ => Value::Null,
                };
                let mut d = json!({
                    "p50_us": diff(&total, bt, "p50"),
                    "p99_us": diff(&total, bt, "p99"),
                    "mean_us": diff(&total, bt, "mean"),
                });
                if stream {
                    d["first_bytes_p50_us"] = diff(&first, bf, "p50");
                    d["first_bytes_p99_us"] = diff(&first, bf, "p99");
                }
                added.insert(t.name.clone(), d);
            }
        }
        out.insert(t.name.clone(), entry);
    }
    json!({
        "mode": if stream { "stream" } else { "unary" },
        "rounds": rounds,
        "timed_out": timed_out,
        "seconds": round1(started.elapsed().as_secs_f64()),
        "gap_ms": gap.as_millis() as u64,
        "baseline": targets.first().map(|t| t.name.clone()),
        "targets": out,
        "added_vs_baseline": added,
    })
}

// ------------------------------------------------------------------ streams

struct StreamsArgs {
    url: Url,
    body: Bytes,
    headers: Vec<(HeaderName, HeaderValue)>,
    count: usize,
    pace: Duration,
    ramp: Duration,
    rss_pid: Option<u32>,
    cpu_pids: Vec<(String, u32)>,
    timeout: Duration,
}

/// CPU time (user + system, all threads) a process has used so far, in clock ticks.
fn cpu_ticks(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: count fields after its closing parenthesis.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Clock ticks per second (`getconf CLK_TCK`); 100 on every Linux this runs on.
const TICKS_PER_SECOND: f64 = 100.0;

#[derive(Default)]
struct StreamResult {
    ok: bool,
    error: Option<String>,
    status: u16,
    terminal: bool,
    first_bytes: Option<Duration>,
    max_gap: Duration,
    /// When the largest gap ended.
    max_gap_at: Option<Instant>,
    events: usize,
    snippet: Option<String>,
}

fn vm_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

async fn one_stream(
    url: Url,
    body: Bytes,
    headers: Arc<Vec<(HeaderName, HeaderValue)>>,
    live: Arc<AtomicUsize>,
) -> StreamResult {
    let mut r = StreamResult::default();
    let mut sender = match connect(url.addr).await {
        Ok(s) => s,
        Err(e) => {
            r.error = Some(format!("connect: {e}"));
            return r;
        }
    };
    let req = request(&url, &body, &headers);
    let start = Instant::now();
    let resp = match sender.send_request(req).await {
        Ok(resp) => resp,
        Err(e) => {
            r.error = Some(format!("request: {e}"));
            return r;
        }
    };
    r.status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut last: Option<Instant> = None;
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(f) => f,
            Err(e) => {
                r.error = Some(format!("body: {e}"));
                break;
            }
        };
        let Some(data) = frame.data_ref() else { continue };
        if data.is_empty() {
            continue;
        }
        let now = Instant::now();
        match last {
            None => {
                r.first_bytes = Some(now - start);
                live.fetch_add(1, Ordering::Relaxed);
            }
            Some(prev) if now - prev > r.max_gap => {
                r.max_gap = now - prev;
                r.max_gap_at = Some(now);
            }
            Some(_) => {}
        }
        last = Some(now);
        r.events += data.windows(2).filter(|w| w == b"\n\n").count();
        if !(200..300).contains(&r.status) && r.snippet.is_none() {
            r.snippet = Some(String::from_utf8_lossy(&data[..data.len().min(300)]).into_owned());
        }
        r.terminal |= TERMINALS.iter().any(|t| contains(data, t));
    }
    if r.first_bytes.is_some() {
        live.fetch_sub(1, Ordering::Relaxed);
    }
    r.ok = r.error.is_none() && (200..300).contains(&r.status);
    r
}

async fn streams(a: StreamsArgs) -> Value {
    let headers = Arc::new(a.headers);
    let live = Arc::new(AtomicUsize::new(0));
    let mut cpu_watched: Vec<(String, String)> =
        a.cpu_pids.iter().map(|(name, pid)| (name.clone(), pid.to_string())).collect();
    cpu_watched.push(("client".to_string(), "self".to_string()));
    let cpu_before: Vec<Option<u64>> = cpu_watched.iter().map(|(_, pid)| cpu_ticks(pid)).collect();
    let started = Instant::now();
    let mut handles = Vec::with_capacity(a.count);
    for i in 0..a.count {
        let due = started + a.ramp.mul_f64(i as f64 / a.count.max(1) as f64);
        let (url, body, headers, live) = (a.url.clone(), a.body.clone(), headers.clone(), live.clone());
        handles.push(tokio::spawn(async move {
            tokio::time::sleep_until(due.into()).await;
            one_stream(url, body, headers, live).await
        }));
    }
    // Memory while the streams are open: the resident size at the moment the most streams were
    // open at once (after their first bytes, before their end), and the peak over the run.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (live, stop, pid) = (live.clone(), stop.clone(), a.rss_pid);
        tokio::spawn(async move {
            let (mut at_max_open, mut max_open, mut peak) = (None::<u64>, 0usize, None::<u64>);
            let Some(pid) = pid else { return (None, 0, None) };
            while !stop.load(Ordering::Relaxed) {
                let open = live.load(Ordering::Relaxed);
                let rss = vm_rss_kib(pid);
                if let Some(r) = rss {
                    peak = Some(peak.unwrap_or(0).max(r));
                }
                if open > max_open || at_max_open.is_none() {
                    max_open = max_open.max(open);
                    at_max_open = rss;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (at_max_open, max_open, peak)
        })
    };
    let deadline = tokio::time::Instant::now() + a.timeout + a.ramp;
    let mut results = Vec::with_capacity(a.count);
    let mut timed_out = 0usize;
    for h in handles {
        match tokio::time::timeout_at(deadline, h).await {
            Ok(Ok(r)) => results.push(r),
            Ok(Err(e)) => results.push(StreamResult { error: Some(format!("task: {e}")), ..Default::default() }),
            Err(_) => timed_out += 1,
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu_after: Vec<Option<u64>> = cpu_watched.iter().map(|(_, pid)| cpu_ticks(pid)).collect();
    stop.store(true, Ordering::Relaxed);
    let (rss_at_max_open, max_open, rss_peak) = sampler.await.unwrap_or((None, 0, None));
    let stall_limit = a.pace * 2;
    let completed = results.iter().filter(|r| r.ok && r.terminal).count();
    let stalled = results.iter().filter(|r| r.ok && r.max_gap > stall_limit).count();
    let stall_free = results.iter().filter(|r| r.ok && r.terminal && r.max_gap <= stall_limit).count();
    let mut first: Vec<f64> = results.iter().filter_map(|r| r.first_bytes).map(|d| d.as_secs_f64() * 1e3).collect();
    let mut gaps: Vec<f64> = results.iter().filter(|r| r.ok).map(|r| r.max_gap.as_secs_f64() * 1e3).collect();
    let mut events: Vec<f64> = results.iter().filter(|r| r.ok).map(|r| r.events as f64).collect();
    // When the stalls happened: a stall shared by most streams at one moment is the machine
    // pausing (or the client), not the proxy falling behind.
    let mut stall_times = std::collections::BTreeMap::<u64, usize>::new();
    for r in results.iter().filter(|r| r.ok && r.max_gap > stall_limit) {
        if let Some(at) = r.max_gap_at {
            *stall_times.entry((at - started).as_millis() as u64 / 250 * 250).or_default() += 1;
        }
    }
    // CPU per event relayed, per process, and what all of them together would need with every
    // stream open at once (the end of the ramp): more than the machine's cores, and the
    // streams wait their turn.
    let events_received: usize = results.iter().map(|r| r.events).sum();
    let mut cpu_seconds = serde_json::Map::new();
    let mut cpu_us_per_event = serde_json::Map::new();
    let mut us_per_event_total = 0.0;
    // No event received (every stream failed): no per-event figure.
    for (((name, _), before), after) in cpu_watched.iter().zip(&cpu_before).zip(&cpu_after) {
        if let (Some(b), Some(a), true) = (before, after, events_received > 0) {
            let secs = (a - b) as f64 / TICKS_PER_SECOND;
            let per_event = secs * 1e6 / events_received.max(1) as f64;
            us_per_event_total += per_event;
            cpu_seconds.insert(name.clone(), json!(round2(secs)));
            cpu_us_per_event.insert(name.clone(), json!(round2(per_event)));
        }
    }
    let events_per_second_all_open = a.count as f64 * 1000.0 / a.pace.as_millis().max(1) as f64;
    let demand_cores = (events_received > 0).then(|| round2(us_per_event_total * events_per_second_all_open / 1e6));
    let errors: Vec<&String> = results.iter().filter_map(|r| r.error.as_ref()).collect();
    let first_non2xx = results
        .iter()
        .find(|r| r.error.is_none() && !(200..300).contains(&r.status))
        .map(|r| format!("HTTP {}: {}", r.status, r.snippet.clone().unwrap_or_default()));
    let non2xx = results.iter().filter(|r| r.error.is_none() && !(200..300).contains(&r.status)).count();
    json!({
        "streams": a.count,
        "completed": completed,
        "stall_free": stall_free,
        "stalled": stalled,
        "stall_limit_ms": stall_limit.as_millis() as u64,
        "errors": errors.len(),
        "first_error": errors.first(),
        "first_non_2xx": first_non2xx,
        "non_2xx": non2xx,
        "timed_out": timed_out,
        "seconds": round1(seconds),
        "first_bytes_ms": summary_ms(&mut first),
        "max_gap_ms": summary_ms(&mut gaps),
        "stalls_by_quarter_second": stall_times.iter().map(|(ms, n)| json!([ms, n])).collect::<Vec<_>>(),
        "events_per_stream": summary_ms(&mut events),
        "max_open_at_once": max_open,
        "events_received": events_received,
        "cpu_seconds": cpu_seconds,
        "cpu_us_per_event": cpu_us_per_event,
        "cores_needed_all_open": demand_cores,
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "rss_kib_at_max_open": rss_at_max_open,
        "rss_kib_peak": rss_peak,
    })
}

fn summary_ms(samples: &mut [f64]) -> Value {
    samples.sort_by(|a, b| a.total_cmp(b));
    let r2 = |x: f64| if x.is_finite() { json!((x * 100.0).round() / 100.0) } else { Value::Null };
    json!({
        "p50": r2(percentile(samples, 50.0)),
        "p99": r2(percentile(samples, 99.0)),
        "max": r2(samples.last().copied().unwrap_or(f64::NAN)),
    })
}

#[cfg(test)]
mod tests {
    use super::round_order;

    #[test]
    fn every_round_order_is_a_permutation_and_every_target_follows_each_other_alike() {
        let k = 4;
        let mut orders = std::collections::HashSet::new();
        let mut follows = [[0usize; 4]; 4];
        for round in 0..2400 {
            let order = round_order(round, k);
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, [0, 1, 2, 3], "round {round}: {order:?}");
            for pair in order.windows(2) {
                follows[pair[1]][pair[0]] += 1;
            }
            orders.insert(order);
        }
        assert_eq!(orders.len(), 24, "every order of four targets is drawn");
        // 2400 rounds, three neighbours a round, twelve ordered pairs: 600 each when balanced.
        for (after, row) in follows.iter().enumerate() {
            for (before, &n) in row.iter().enumerate() {
                if after != before {
                    assert!((480..=720).contains(&n), "{after} after {before}: {n} times");
                }
            }
        }
        assert_eq!(round_order(7, k), round_order(7, k), "the same round, the same order");
    }
}
