//! Decision-path micro-benchmark, against the added-latency budget: what the gateway spends per
//! request deciding where to send it (candidates, breaker filter, start of rotation, breaker permit
//! and its success record), classifying an upstream result, and per upstream event observing a
//! stream (SSE scanning, terminal/error watch, usage). Conversion per event is in
//! `benches/convert.rs`.
//!
//! Inputs are built through the crate's public API as the running gateway builds them: a
//! `Snapshot` of `LiveEndpoint`s behind an `ArcSwap`, breaker cells from `Breakers` on the
//! system clock, `Rotation`, the default `Settings`. The decision follows what
//! `proxy::prepare` (SPEC §2 steps 0–3) and the first pass of `proxy::attempt::run` (step 4,
//! start index, permit) do for a request whose first attempt succeeds, calling the same
//! `routing`, `breaker` and `classify` functions in the same order. Not included: reading the
//! body, peeking its model, the decision trail, and converting the body for candidates of
//! another format (the endpoints here speak the client's format; see `benches/convert.rs`).
//!
//! No benchmark framework, as in `benches/convert.rs`: each case runs for a fixed time budget
//! after a warm-up and reports the median of several rounds. Prints a Markdown table (copied
//! into BENCHMARKS.md).
//!
//! Run: `cargo bench --bench decision`
// A benchmark fails loudly on broken fixtures.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::print_stdout)]

mod support;
use support::measure;

use std::collections::BTreeMap;
use std::error::Error;
use std::fmt;
use std::hint::black_box;
use std::io;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use bytes::Bytes;
use serde_json::json;

use ccmesh::breaker::Breakers;
use ccmesh::breaker::retry_after::parse_retry_after;
use ccmesh::clock::SystemClock;
use ccmesh::config::{RoutingStrategy, Settings};
use ccmesh::endpoint::{Endpoint, EndpointId, ModelPattern, TestResult};
use ccmesh::observe::cost::PriceTable;
use ccmesh::observe::events::Events;
use ccmesh::observe::usage::StreamUsage;
use ccmesh::protocol::sse::{SseEvent, SseScanner};
use ccmesh::protocol::stream_events::{StreamContext, inspect_and_observe};
use ccmesh::protocol::{Format, Protocol, Route};
use ccmesh::proxy::observer::{StreamObserver, StreamWatch, Transform};
use ccmesh::proxy::outcome::{AttemptOutcome, classify_network_error, classify_status};
use ccmesh::routing;
use ccmesh::routing::Rotation;
use ccmesh::snapshot::{LiveEndpoint, Snapshot};

fn fmt(d: Duration) -> String {
    fmt_ns(d.as_nanos() as f64)
}

/// `total` divided over `n` calls or events, without rounding to whole nanoseconds.
fn fmt_per(total: Duration, n: usize) -> String {
    fmt_ns(total.as_nanos() as f64 / n as f64)
}

fn fmt_ns(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1} µs", ns / 1e3)
    } else if ns >= 100.0 {
        format!("{ns:.0} ns")
    } else {
        format!("{ns:.1} ns")
    }
}

// ---------------------------------------------------------------------------------------------
// Routing + breaker decision per request
// ---------------------------------------------------------------------------------------------

const CLAUDE: Route = Route::Protocol(Protocol::Claude);
const MODEL: &str = "claude-sonnet-4-5-20250929";

fn endpoint(id: i64, name: &str, format: Format, models: &[&str], map: &[(&str, &str)]) -> Endpoint {
    Endpoint {
        id: EndpointId(id),
        name: name.into(),
        base_url: format!("https://{name}.example.com/api"),
        api_key: format!("sk-bench-{name}-0123456789abcdef"),
        format,
        models: models.iter().map(|m| ModelPattern::new(*m)).collect(),
        model_map: map.iter().map(|(k, v)| (ModelPattern::new(*k), (*v).to_string())).collect(),
        enabled: true,
        fast: false,
        fast_sort_order: 0,
        sort_order: id,
        headers: BTreeMap::new(),
        test_model: None,
        test: TestResult::default(),
        price_multiplier: 1.0,
    }
}

/// Three Anthropic-format endpoints as a Claude Code user configures them: the official API
/// and two compatible relays that map Claude models onto their own.
fn three_endpoints() -> Vec<Endpoint> {
    vec![
        endpoint(1, "anthropic", Format::Anthropic, &["claude-*"], &[]),
        endpoint(2, "glm", Format::Anthropic, &["glm-4.6", "glm-4.5-air"], &[("claude-*", "glm-4.6")]),
        endpoint(3, "kimi", Format::Anthropic, &["kimi-k2-*"], &[("claude-sonnet-*", "kimi-k2-turbo-preview")]),
    ]
}

/// Fifty endpoints of all three formats with model globs and maps; every seventh is disabled;
/// about a third serve `MODEL` (directly or through a map), the first of them at position 3.
fn fifty_endpoints() -> Vec<Endpoint> {
    (0..50)
        .map(|i| {
            let name = format!("relay-{i:02}");
            let format = Format::ALL[(i % 3) as usize];
            let mut e = match i % 6 {
                0 => endpoint(i + 1, &name, format, &["gpt-5*", "o4-mini"], &[]),
                1 => endpoint(i + 1, &name, format, &["deepseek-*"], &[("claude-haiku-*", "deepseek-chat")]),
                2 => endpoint(i + 1, &name, format, &["glm-4.6"], &[("claude-opus-*", "glm-4.6")]),
                3 => endpoint(i + 1, &name, format, &["claude-*"], &[]),
                4 => endpoint(i + 1, &name, format, &["kimi-k2-*", "qwen3-coder-*"], &[("claude-sonnet-*", "kimi-k2")]),
                _ => endpoint(i + 1, &name, format, &["claude-sonnet-4-5-20250929", "claude-opus-4-1"], &[]),
            };
            e.enabled = i % 7 != 6;
            e
        })
        .collect()
}

/// The snapshot the request path reads, with one breaker cell per endpoint from `breakers`.
fn snapshot(endpoints: Vec<Endpoint>, breakers: &Breakers, strategy: RoutingStrategy) -> Snapshot {
    let endpoints = endpoints
        .into_iter()
        .map(|config| {
            let breaker = breakers.cell(config.id);
            Arc::new(LiveEndpoint::new(config, breaker))
        })
        .collect();
    let mut settings = Settings::default();
    settings.routing_strategy = strategy;
    Snapshot {
        endpoints,
        settings: Arc::new(settings),
        prices: Arc::new(PriceTable::builtin()),
        keys: Arc::new(ccmesh::keys::KeySet::default()),
    }
}

/// One request's decision, its first attempt answering 200: the candidate list
/// (`proxy::prepare`), the breaker filter, start index and permit (`attempt::run`), then the
/// classification and success record of the answer. Returns the chosen endpoint's id.
fn decide(snapshots: &ArcSwap<Snapshot>, rotation: &Rotation, route: Route, header: Option<&str>, model: &str) -> i64 {
    let snapshot = snapshots.load_full();
    let protocol = route.protocol();
    let settings = snapshot.settings.clone();

    // proxy::prepare: SPEC §2 steps 0–3.
    let explicit = routing::resolve_explicit(&snapshot.endpoints, route, header, None, Some(model)).expect("explicit");
    let model = explicit.model.as_deref().map(str::to_string);
    let (candidates, is_explicit): (Vec<Arc<LiveEndpoint>>, bool) = match explicit.endpoint {
        Some(e) => (vec![e.clone()], true),
        None => {
            let routable = routing::list_routable(&snapshot.endpoints, route);
            assert!(!routable.is_empty(), "{}", routing::nothing_configured(route).message);
            let serving = match &model {
                Some(m) => routing::filter_by_model(routable, &snapshot.endpoints, route, m).expect("served"),
                None => routable,
            };
            (serving.into_iter().cloned().collect(), false)
        }
    };

    // attempt::run, first pass: SPEC §2 step 4, the start index (SPEC §3), the permit.
    let seen_current = rotation.current(protocol);
    let live: Vec<&Arc<LiveEndpoint>> = if is_explicit {
        candidates.iter().collect()
    } else {
        candidates.iter().filter(|e| e.breaker.routable().is_ok()).collect()
    };
    let cap = routing::attempt_cap(live.len(), is_explicit);
    let ids: Vec<EndpointId> = live.iter().map(|e| e.config.id).collect();
    let manual = rotation.take_manual(protocol);
    let ticket =
        if settings.routing_strategy == RoutingStrategy::RoundRobin { rotation.next_round_robin(protocol) } else { 0 };
    let start = routing::start_index(settings.routing_strategy, &ids, seen_current, manual, ticket);
    let endpoint = live[start];
    let permit = endpoint.breaker.try_acquire(endpoint.record_name.clone(), is_explicit).expect("permit");

    // The answer: 200, classified and recorded on the breaker.
    let class = classify_status(200, route, settings.auth_errors_fail_over);
    let transition = permit.record(class.breaker(), None, settings.breaker(protocol));
    debug_assert!(transition.is_none());
    black_box(cap);
    endpoint.config.id.0
}

fn decision_cases(rows: &mut Vec<[String; 4]>) {
    let events = Events::default();
    let breakers = Breakers::new(Arc::new(SystemClock), Arc::new(events));
    let rotation = Rotation::default();
    let cases = [
        ("3 endpoints, sticky", three_endpoints(), RoutingStrategy::Sticky, None, MODEL),
        ("50 endpoints, sticky", fifty_endpoints(), RoutingStrategy::Sticky, None, MODEL),
        ("50 endpoints, round robin", fifty_endpoints(), RoutingStrategy::RoundRobin, None, MODEL),
        (
            "50 endpoints, `x-ccmesh-endpoint` header",
            fifty_endpoints(),
            RoutingStrategy::Sticky,
            Some("relay-33"),
            MODEL,
        ),
        (
            "50 endpoints, `@name/model` prefix",
            fifty_endpoints(),
            RoutingStrategy::Sticky,
            None,
            "@relay-33/claude-opus-4-1",
        ),
    ];
    for (label, endpoints, strategy, header, model) in cases {
        let n = endpoints.len();
        let snapshots = ArcSwap::from_pointee(snapshot(endpoints, &breakers, strategy));
        let served = {
            let s = snapshots.load();
            routing::filter_by_model(routing::list_routable(&s.endpoints, CLAUDE), &s.endpoints, CLAUDE, MODEL)
                .expect("served")
                .len()
        };
        let t = measure(|| {
            black_box(decide(&snapshots, &rotation, CLAUDE, black_box(header), black_box(model)));
        });
        rows.push([
            format!("request decision: {label}"),
            format!("{n} configured, {served} serve `{MODEL}`"),
            fmt(t),
            "per request".into(),
        ]);
    }

    // The 50-endpoint sticky decision by part.
    let snapshots = ArcSwap::from_pointee(snapshot(fifty_endpoints(), &breakers, RoutingStrategy::Sticky));
    let s = snapshots.load_full();
    let t = measure(|| {
        let explicit = routing::resolve_explicit(&s.endpoints, CLAUDE, None, None, Some(black_box(MODEL))).expect("x");
        let routable = routing::list_routable(&s.endpoints, CLAUDE);
        let serving =
            routing::filter_by_model(routable, &s.endpoints, CLAUDE, explicit.model.as_deref().expect("model"))
                .expect("served");
        black_box(serving.into_iter().cloned().collect::<Vec<Arc<LiveEndpoint>>>());
    });
    rows.push([
        "  part: candidates (explicit, routable, model globs)".into(),
        "50 endpoints".into(),
        fmt(t),
        "per request".into(),
    ]);
    let candidates: Vec<Arc<LiveEndpoint>> =
        routing::filter_by_model(routing::list_routable(&s.endpoints, CLAUDE), &s.endpoints, CLAUDE, MODEL)
            .expect("served")
            .into_iter()
            .cloned()
            .collect();
    let t = measure(|| {
        let live: Vec<&Arc<LiveEndpoint>> = candidates.iter().filter(|e| e.breaker.routable().is_ok()).collect();
        let ids: Vec<EndpointId> = live.iter().map(|e| e.config.id).collect();
        let start = routing::start_index(
            RoutingStrategy::Sticky,
            &ids,
            rotation.current(Protocol::Claude),
            rotation.take_manual(Protocol::Claude),
            0,
        );
        black_box(routing::advance(start, ids.len()));
    });
    rows.push([
        "  part: breaker filter + start index".into(),
        format!("{} candidates", candidates.len()),
        fmt(t),
        "per request".into(),
    ]);
    let endpoint = &candidates[0];
    let settings = s.settings.breaker(Protocol::Claude);
    let t = measure(|| {
        let permit = endpoint.breaker.try_acquire(endpoint.record_name.clone(), false).expect("permit");
        black_box(permit.record(AttemptOutcome::SUCCESS.breaker(), None, settings));
    });
    rows.push([
        "  part: `try_acquire` + `record(Success)`".into(),
        "closed breaker".into(),
        fmt(t),
        "per attempt".into(),
    ]);
}

// ---------------------------------------------------------------------------------------------
// Classification
// ---------------------------------------------------------------------------------------------

/// A library error wrapping its cause, as reqwest and hyper-util wrap a connect failure.
#[derive(Debug)]
struct Wrapped {
    message: &'static str,
    source: Box<dyn Error + Send + Sync + 'static>,
}

impl fmt::Display for Wrapped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message)
    }
}

impl Error for Wrapped {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.source)
    }
}

fn classification_cases(rows: &mut Vec<[String; 4]>) {
    let statuses: [u16; 16] = [200, 200, 200, 200, 200, 200, 201, 400, 401, 404, 413, 429, 500, 502, 503, 529];
    let routes = [
        CLAUDE,
        Route::Protocol(Protocol::Openai),
        Route::CountTokens(Protocol::Claude),
        Route::PassThrough { anthropic: true },
    ];
    let t = measure(|| {
        for route in routes {
            for s in statuses {
                black_box(classify_status(black_box(s), route, false).breaker());
            }
        }
    });
    rows.push([
        "`classify_status` + `breaker()`".into(),
        "16 statuses × 4 routes".into(),
        fmt_per(t, statuses.len() * routes.len()),
        "per call".into(),
    ]);

    let refused = Wrapped {
        message: "error sending request for url (https://relay.example.com/v1/messages)",
        source: Box::new(Wrapped {
            message: "client error (Connect)",
            source: Box::new(io::Error::new(io::ErrorKind::ConnectionRefused, "tcp connect error: Connection refused")),
        }),
    };
    let t = measure(|| {
        black_box(classify_network_error(black_box(&refused)));
    });
    rows.push([
        "`classify_network_error`".into(),
        "connection refused, 3-level chain".into(),
        fmt(t),
        "per call".into(),
    ]);
    let unknown = Wrapped {
        message: "error decoding response body",
        source: Box::new(Wrapped {
            message: "body error",
            source: Box::new(io::Error::other("unrecognised transport failure")),
        }),
    };
    let t = measure(|| {
        black_box(classify_network_error(black_box(&unknown)));
    });
    rows.push([
        "`classify_network_error`".into(),
        "unrecognised, whole 3-level chain walked".into(),
        fmt(t),
        "per call".into(),
    ]);

    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_790_000_000);
    for (label, value) in
        [("delta seconds `30`", "30"), ("fractional `1.5`", "1.5"), ("HTTP-date", "Tue, 01 Dec 2026 08:49:37 GMT")]
    {
        assert!(parse_retry_after(value, now).is_some(), "{value}");
        let t = measure(|| {
            black_box(parse_retry_after(black_box(value), now));
        });
        rows.push(["`parse_retry_after`".into(), label.into(), fmt(t), "per call".into()]);
    }
}

// ---------------------------------------------------------------------------------------------
// Streams
// ---------------------------------------------------------------------------------------------

/// Text as models stream it: a few characters to a few words per delta, with punctuation,
/// quotes, newlines and code.
const PIECES: [&str; 12] = [
    "The",
    " failing test",
    " is in `src/routing.rs`",
    ", where",
    " the fast queue",
    " breaks ties by name.\n\n",
    "```rust\n",
    "fn cmp(a: &E, b: &E) -> Ordering {\n",
    "    (a.sort_order, &a.name).cmp(&(b.sort_order, &b.name))\n}\n```\n",
    " I will \"fix\" the comparator",
    " and run",
    " the suite again.",
];

/// A realistic Anthropic Messages stream with `n` text deltas.
fn anthropic_stream(n: usize) -> String {
    let mut s = String::new();
    let mut ev = |name: &str, data: String| s.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    ev(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant",
            "model": MODEL, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 2095, "cache_creation_input_tokens": 1024, "cache_read_input_tokens": 31542,
                      "cache_creation": {"ephemeral_5m_input_tokens": 1024, "ephemeral_1h_input_tokens": 0},
                      "output_tokens": 1, "service_tier": "standard"}}}).to_string(),
    );
    ev(
        "content_block_start",
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}).to_string(),
    );
    ev("ping", json!({"type": "ping"}).to_string());
    // The deltas as the API writes them, `type` first (`json!` would sort the keys).
    for i in 0..n {
        let text = serde_json::to_string(PIECES[i % PIECES.len()]).unwrap();
        ev(
            "content_block_delta",
            format!(r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":{text}}}}}"#),
        );
    }
    ev("content_block_stop", json!({"type": "content_block_stop", "index": 0}).to_string());
    ev(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
               "usage": {"input_tokens": 2095, "cache_creation_input_tokens": 1024, "cache_read_input_tokens": 31542, "output_tokens": 6120}}).to_string(),
    );
    ev("message_stop", json!({"type": "message_stop"}).to_string());
    s
}

/// A realistic OpenAI Chat Completions stream with `n` content chunks and a usage chunk.
fn chat_stream(n: usize) -> String {
    let mut s = String::new();
    let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
        json!({"id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT", "object": "chat.completion.chunk", "created": 1_764_460_800,
               "model": "gpt-5-2025-08-07", "service_tier": "default", "system_fingerprint": "fp_f33640a400",
               "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
    };
    s.push_str(&format!(
        "data: {}\n\n",
        chunk(json!({"role": "assistant", "content": "", "refusal": null}), json!(null))
    ));
    for i in 0..n {
        s.push_str(&format!("data: {}\n\n", chunk(json!({"content": PIECES[i % PIECES.len()]}), json!(null))));
    }
    s.push_str(&format!("data: {}\n\n", chunk(json!({}), json!("stop"))));
    let usage = json!({"id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT", "object": "chat.completion.chunk", "created": 1_764_460_800,
        "model": "gpt-5-2025-08-07", "choices": [],
        "usage": {"prompt_tokens": 34661, "completion_tokens": 6120, "total_tokens": 40781,
                  "prompt_tokens_details": {"cached_tokens": 31542, "audio_tokens": 0},
                  "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0}}});
    s.push_str(&format!("data: {usage}\n\n"));
    s.push_str("data: [DONE]\n\n");
    s
}

/// Number of events in `bytes`.
fn count_events(bytes: &[u8]) -> usize {
    let mut n = 0;
    SseScanner::new().feed(bytes, |_| n += 1);
    n
}

/// A per-event row; with `bytes`, also the throughput over the stream's bytes.
fn per_event(
    rows: &mut Vec<[String; 4]>,
    case: &str,
    input: String,
    total: Duration,
    events: usize,
    bytes: Option<usize>,
) {
    let unit = match bytes {
        Some(b) => format!("per event ({:.0} MB/s)", b as f64 / total.as_secs_f64() / 1e6),
        None => "per event".into(),
    };
    rows.push([case.into(), input, fmt_per(total, events), unit]);
}

/// The events of `bytes`, owned, to replay without scanning.
fn scanned(bytes: &str) -> Vec<(Option<String>, String)> {
    let mut owned = Vec::new();
    SseScanner::new().feed(bytes.as_bytes(), |e| owned.push((e.event.map(str::to_string), e.data.to_string())));
    owned
}

fn borrowed(owned: &[(Option<String>, String)]) -> Vec<SseEvent<'_>> {
    owned.iter().map(|(e, d)| SseEvent { event: e.as_deref(), data: d }).collect()
}

fn stream_cases(rows: &mut Vec<[String; 4]>) {
    let n = 2000;
    let anthropic = anthropic_stream(n);
    let chat = chat_stream(n);
    let a_events = count_events(anthropic.as_bytes());
    let c_events = count_events(chat.as_bytes());
    let a_kb = anthropic.len() / 1024;

    // SseScanner::feed alone, in network-sized chunks and as one buffer.
    for (label, size) in [("1400-byte chunks", 1400), ("one buffer", anthropic.len())] {
        let chunks: Vec<&[u8]> = anthropic.as_bytes().chunks(size).collect();
        let t = measure(|| {
            let mut scanner = SseScanner::new();
            let mut seen = 0usize;
            for c in &chunks {
                scanner.feed(black_box(c), |e| seen += e.data.len());
            }
            black_box(seen);
        });
        per_event(
            rows,
            "`SseScanner::feed`",
            format!("anthropic, {a_events} events, {a_kb} KB, {label}"),
            t,
            a_events,
            Some(anthropic.len()),
        );
    }

    // StreamUsage::observe alone, on the events the scanner produced.
    for (format, bytes, events) in [(Format::Anthropic, &anthropic, a_events), (Format::Openai, &chat, c_events)] {
        let owned = scanned(bytes);
        let parsed = borrowed(&owned);
        let t = measure(|| {
            let mut usage = StreamUsage::default();
            for e in &parsed {
                usage.observe(format, black_box(e));
            }
            black_box(usage.tokens());
        });
        let mut check = StreamUsage::default();
        parsed.iter().for_each(|e| check.observe(format, e));
        assert!(check.tokens().output.is_some(), "usage found in the {format} stream");
        per_event(
            rows,
            "`StreamUsage::observe`",
            format!("{format}, {events} events (scanned beforehand)"),
            t,
            events,
            None,
        );
    }

    // The terminal/error watch and the stream context, as the relay calls them (one parse).
    for (format, bytes, events) in [(Format::Anthropic, &anthropic, a_events), (Format::Openai, &chat, c_events)] {
        let owned = scanned(bytes);
        let parsed = borrowed(&owned);
        let t = measure(|| {
            let mut context = StreamContext::default();
            let mut watch = StreamWatch::default();
            for e in &parsed {
                watch.observe(&inspect_and_observe(format, black_box(e), &mut context));
            }
            black_box((context, watch));
        });
        per_event(
            rows,
            "`inspect_and_observe` (one parse)",
            format!("{format}, {events} events (scanned beforehand)"),
            t,
            events,
            None,
        );
    }

    // The pass-through relay's per-chunk work: scan, stream context, terminal/error watch,
    // usage (`StreamObserver::chunk` with `Transform::Pass`).
    for (format, bytes, events) in [(Format::Anthropic, &anthropic, a_events), (Format::Openai, &chat, c_events)] {
        let chunks: Vec<Bytes> = bytes.as_bytes().chunks(1400).map(Bytes::copy_from_slice).collect();
        let t = measure(|| {
            let mut observer = StreamObserver::new(format, format, Transform::Pass, u64::MAX);
            for c in &chunks {
                black_box(observer.chunk(c.clone()));
            }
            black_box(observer.clean_end());
        });
        let mut check = StreamObserver::new(format, format, Transform::Pass, u64::MAX);
        chunks.iter().for_each(|c| {
            check.chunk(c.clone());
        });
        assert!(check.watch.terminal && check.usage.tokens().output.is_some(), "{format} stream complete");
        per_event(
            rows,
            "pass-through observer (`StreamObserver::chunk`)",
            format!("{format}, {events} events, {} KB, 1400-byte chunks", bytes.len() / 1024),
            t,
            events,
            Some(bytes.len()),
        );
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let mut rows: Vec<[String; 4]> = Vec::new();
    decision_cases(&mut rows);
    classification_cases(&mut rows);
    stream_cases(&mut rows);
    let mut out = String::from("| case | input | time | unit |\n| --- | --- | ---: | --- |\n");
    for r in &rows {
        out.push_str(&format!("| {} | {} | {} | {} |\n", r[0], r[1], r[2], r[3]));
    }
    use std::io::Write;
    let _ = std::io::stdout().write_all(out.as_bytes());
}
