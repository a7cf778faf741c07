//! The chaos soak (not in the default run; BENCHMARKS.md has its last result):
//!
//! ```sh
//! cargo test --release --test it -- --ignored soak --nocapture     # SOAK_SECS=150 by default
//! ```
//!
//! The real binary in front of three fault-injecting upstreams (errors, resets, cut and stalled
//! streams, slow answers, bodies over the limit), driven by clients that misbehave too (slow
//! bodies, bodies abandoned half way, requests sent and closed at once, streams abandoned half
//! way, idle connections). It asserts that every answer a client read is complete or a
//! protocol-native error, that the gateway's memory stays bounded, and that every request that
//! reached it left exactly one record.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::binary::{Launch, Server};
use crate::support::gateway::{chat_body, claude_body, http_client};
use crate::support::mock::{MockUpstream, Reply, StreamEnd};

/// A small deterministic generator, so a failing soak can be replayed with the same seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn fault(rng: &mut Rng, anthropic: bool) -> Reply {
    let ok = |stream: bool| match (anthropic, stream) {
        (true, false) => Reply::anthropic_message("soak answer"),
        (true, true) => Reply::anthropic_stream(&["so", "ak", " answer"]),
        (false, false) => Reply::openai_chat("soak answer"),
        (false, true) => Reply::openai_chat_stream(&["so", "ak", " answer"]),
    };
    let stream = rng.below(2) == 0;
    match rng.below(12) {
        0 => Reply::status(500),
        1 => Reply::status(429).with_header("retry-after", "1"),
        2 => Reply::Reset,
        3 => Reply::Close,
        4 => ok(true).cut_after(2),
        5 => ok(true).truncated(2).with_end(StreamEnd::silent_stall()),
        6 => ok(stream).after(Duration::from_millis(rng.below(300))),
        7 => Reply::Generated {
            status: 200,
            headers: vec![("content-type".into(), "application/json".into())],
            chunk: bytes::Bytes::from(vec![b'x'; 64 * 1024]),
            total: 8 * 1024 * 1024,
            declared: rng.below(2) == 0,
        },
        _ => ok(stream),
    }
}

/// A native error body of the client's protocol, or a complete answer. The mock's plain
/// statuses have empty bodies, which the gateway relays as they are (SPEC §3: the last upstream
/// answer); the mock may also answer a stream request whole, or the reverse, which is still a
/// complete answer.
fn check_answer(claude: bool, status: u16, body: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(body);
    if status >= 400 {
        if body.is_empty() && matches!(status, 429 | 500 | 503) {
            return Ok(());
        }
        let v: Value = serde_json::from_slice(body).map_err(|_| format!("{status}: not JSON: {text}"))?;
        let native = if claude {
            v["type"] == "error" && v["error"]["message"].is_string()
        } else {
            v["error"]["message"].is_string()
        };
        return if native { Ok(()) } else { Err(format!("{status}: not a native error: {text}")) };
    }
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        let complete = if claude { v["content"].is_array() } else { v["choices"].is_array() };
        return if complete { Ok(()) } else { Err(format!("incomplete answer: {text}")) };
    }
    let complete =
        if claude { text.contains("event: message_stop") } else { text.trim_end().ends_with("data: [DONE]") };
    let native_error = if claude { text.contains("event: error") } else { text.contains("\"error\"") };
    if complete || native_error { Ok(()) } else { Err(format!("a stream ended without its end or an error: {text}")) }
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The models of the requests read whole, of the streams walked away from and of the requests
/// sent and closed at once (Claude's, Chat's).
const CASE_MODELS: [[&str; 2]; 3] =
    [["claude-soak", "gpt-soak"], ["claude-soak-walk", "gpt-soak-walk"], ["claude-soak-close", "gpt-soak-close"]];

#[derive(Default)]
struct Tally {
    /// Requests whose head reached the gateway (each must leave one record).
    reached: AtomicU64,
    /// Of those: bodies abandoned half way, streams walked away from after their first chunk,
    /// requests sent whole and closed at once (the gateway may see the close before it begins on
    /// one: such a record has no model), and the rest (answers read whole). Told apart in the records by their models
    /// (`CASE_MODELS`), so that a shortfall says which kind of request lost its record.
    abandoned_bodies: AtomicU64,
    walked_away: AtomicU64,
    closed_at_once: AtomicU64,
    read_whole: AtomicU64,
    answers: AtomicU64,
    idle: AtomicU64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a 2-3 minute soak; run with --ignored soak"]
async fn soak_chaos_keeps_answers_well_formed_memory_bounded_and_records_complete() {
    let secs: u64 = std::env::var("SOAK_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(150);
    let seed: u64 = std::env::var("SOAK_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_cafe);
    let mut rng = Rng(seed);
    let ups = [MockUpstream::start().await, MockUpstream::start().await, MockUpstream::start().await];
    for (i, up) in ups.iter().enumerate() {
        for _ in 0..60_000 {
            up.push(fault(&mut rng, i < 2));
        }
        up.set_default(Reply::status(503));
    }
    let config = "[settings]\ntransient_retry_delay_ms = 0\n[settings.limits]\nheader_read_timeout_secs = 1\nbody_read_timeout_secs = 1\nkeepalive_timeout_secs = 5\nmax_upstream_body_bytes = 1048576\n[settings.timeouts.claude]\nfirst_byte_timeout_secs = 2\nidle_timeout_secs = 1\ntotal_timeout_secs = 5\n[settings.timeouts.openai]\nfirst_byte_timeout_secs = 2\nidle_timeout_secs = 1\ntotal_timeout_secs = 5\n[settings.breaker.claude]\ntimeout_secs = 1\n[settings.breaker.openai]\ntimeout_secs = 1\n";
    let server = Server::launch(Launch { config: Some(config), ..Launch::default() }).unwrap();
    let http = http_client();
    for (i, up) in ups.iter().enumerate() {
        let format = if i < 2 { "anthropic" } else { "openai" };
        let e = json!({"name": format!("up{i}"), "format": format, "base_url": up.url(), "api_key": format!("sk-soak-{i}-0123456789")});
        assert_eq!(http.post(format!("{}/api/endpoints", server.url)).json(&e).send().await.unwrap().status(), 201);
    }
    let pid = server.child.id();
    let start_rss = rss_kib(pid);
    let tally = Arc::new(Tally::default());
    let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let until = Instant::now() + Duration::from_secs(secs);
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..24u64 {
        let (url, tally, failures) = (server.url.clone(), tally.clone(), failures.clone());
        let http = http.clone();
        let mut rng = Rng(seed ^ (c + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        clients.spawn(async move {
            while Instant::now() < until {
                let claude = rng.below(2) == 0;
                let stream = rng.below(2) == 0;
                let case = rng.below(10);
                let walking_away = case == 2 && stream;
                let kind = if walking_away { 1 } else if case == 3 { 2 } else { 0 };
                let [claude_model, chat_model] = CASE_MODELS[kind];
                let (path, body) = if claude {
                    ("/v1/messages", claude_body(claude_model, stream))
                } else {
                    ("/v1/chat/completions", chat_body(chat_model, stream))
                };
                match case {
                    // Abandon the body half way.
                    0 => {
                        let addr = url.trim_start_matches("http://").to_string();
                        if let Ok(mut tcp) = TcpStream::connect(&addr).await {
                            let head = format!("POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{{\"model\":");
                            if tcp.write_all(head.as_bytes()).await.is_ok() {
                                tally.reached.fetch_add(1, Ordering::SeqCst);
                                tally.abandoned_bodies.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    }
                    // Send the whole request and close at once.
                    3 => {
                        let addr = url.trim_start_matches("http://").to_string();
                        if let Ok(mut tcp) = TcpStream::connect(&addr).await {
                            let body = body.to_string();
                            let request = format!(
                                "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                                body.len()
                            );
                            if tcp.write_all(request.as_bytes()).await.is_ok() {
                                tally.reached.fetch_add(1, Ordering::SeqCst);
                                tally.closed_at_once.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    }
                    // Connect and say nothing: the header timer closes it.
                    1 => {
                        let addr = url.trim_start_matches("http://").to_string();
                        if let Ok(mut tcp) = TcpStream::connect(&addr).await {
                            let mut buf = [0u8; 16];
                            let _ = tokio::time::timeout(Duration::from_secs(3), tcp.read(&mut buf)).await;
                            tally.idle.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    // Read the first chunk of a stream, then walk away.
                    2 if stream => {
                        tally.reached.fetch_add(1, Ordering::SeqCst);
                        tally.walked_away.fetch_add(1, Ordering::SeqCst);
                        match http.post(format!("{url}{path}")).json(&body).send().await {
                            Ok(mut r) => {
                                let _ = tokio::time::timeout(Duration::from_secs(3), r.chunk()).await;
                            }
                            Err(e) => failures.lock().unwrap().push(format!("a stream got no answer at all: {e:?}")),
                        }
                    }
                    _ => {
                        tally.reached.fetch_add(1, Ordering::SeqCst);
                        tally.read_whole.fetch_add(1, Ordering::SeqCst);
                        let sent = http.post(format!("{url}{path}")).json(&body).timeout(Duration::from_secs(30)).send().await;
                        let Ok(r) = sent else {
                            failures.lock().unwrap().push("a request got no answer at all".into());
                            continue;
                        };
                        let status = r.status().as_u16();
                        match r.bytes().await {
                            Ok(bytes) => {
                                tally.answers.fetch_add(1, Ordering::SeqCst);
                                if let Err(e) = check_answer(claude, status, &bytes) {
                                    failures.lock().unwrap().push(e);
                                }
                            }
                            Err(e) => failures.lock().unwrap().push(format!("the answer broke off: {e}")),
                        }
                    }
                }
            }
        });
    }
    let mut peak = start_rss;
    while !clients.is_empty() {
        tokio::select! {
            _ = clients.join_next() => {}
            () = tokio::time::sleep(Duration::from_secs(2)) => peak = peak.max(rss_kib(pid)),
        }
    }
    peak = peak.max(rss_kib(pid));
    // Every request that reached the gateway leaves one record.
    let reached = tally.reached.load(Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        let s: Value =
            http.get(format!("{}/api/records/status", server.url)).send().await.unwrap().json().await.unwrap();
        if s["queued"] == 0 && s["written"].as_u64().unwrap_or(0) + s["dropped"].as_u64().unwrap_or(0) >= reached {
            break s;
        }
        if Instant::now() >= deadline {
            let by_model: Value = http
                .get(format!("{}/api/stats?since=1d&group_by=model", server.url))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            panic!(
                "records did not catch up: {s}, {reached} requests: {} bodies abandoned (no model), {} streams walked away from ({:?}), {} sent and closed at once ({:?}, or no model), {} read whole ({:?}); records by model: {}; failures: {:?}",
                tally.abandoned_bodies.load(Ordering::SeqCst),
                tally.walked_away.load(Ordering::SeqCst),
                CASE_MODELS[1],
                tally.closed_at_once.load(Ordering::SeqCst),
                CASE_MODELS[2],
                tally.read_whole.load(Ordering::SeqCst),
                CASE_MODELS[0],
                by_model["groups"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|g| format!("{}: {}", g["key"], g["totals"]["requests"]))
                    .collect::<Vec<_>>()
                    .join(", "),
                failures.lock().unwrap()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let failures = failures.lock().unwrap().clone();
    eprintln!(
        "soak: {secs} s, {reached} requests ({} answers read, {} idle connections), records {status}, RSS {start_rss} KiB at start, {peak} KiB peak, {} failures",
        tally.answers.load(Ordering::SeqCst),
        tally.idle.load(Ordering::SeqCst),
        failures.len()
    );
    assert!(failures.is_empty(), "{} bad answers, e.g. {:?}", failures.len(), &failures[..failures.len().min(5)]);
    assert_eq!(status["written"].as_u64().unwrap(), reached, "records = requests that reached the gateway");
    assert_eq!(status["dropped"], 0);
    assert!(peak < 256 * 1024, "RSS peaked at {peak} KiB");
    let health = http.get(format!("{}/health", server.url)).send().await.unwrap();
    assert_eq!(health.status(), 200, "still serving");
}
