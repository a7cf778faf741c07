//! Conversion micro-benchmark, so the cost of converting stays visible: a realistic large request
//! (Claude Code's turn with 24 tools, and the same turn with a ~200 KB history) converted to each
//! other format, and long streams converted event by event. No benchmark framework: each case runs
//! for a fixed time budget after a warm-up and reports the median of several rounds, so `cargo
//! bench` adds no compile-time dependency. Prints a Markdown table (copied into BENCHMARKS.md).
//!
//! Run: `cargo bench --bench convert`
// A benchmark fails loudly on broken fixtures.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::print_stdout)]

mod support;
use support::measure;

use std::hint::black_box;
use std::time::Duration;

use ccmesh::convert::{self, StreamConversion, ir::EncodeContext};
use ccmesh::protocol::Format;
use ccmesh::protocol::sse::SseScanner;
use serde_json::{Value, json};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/clients");

fn fixture(name: &str) -> Value {
    let text = std::fs::read_to_string(format!("{FIXTURES}/{name}")).expect("fixture");
    serde_json::from_str::<Value>(&text).expect("json")["body"].clone()
}

/// The Claude Code turn-2 request with its history grown to about `target` bytes by repeating
/// realistic tool round trips (prose of a few KB per turn, as real sessions have).
fn long_history(target: usize) -> Vec<u8> {
    let mut body = fixture("claude_code_2.1.197_turn2_tool_result.json");
    let prose = "The build finished; the failing test is in src/routing.rs where the fast queue ordering \
                 breaks ties by name. I will adjust the comparator and run the suite again. "
        .repeat(20);
    let mut n = 0;
    while serde_json::to_vec(&body).expect("json").len() < target {
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
    // End with a user turn, as a real request does.
    body["messages"].as_array_mut().expect("messages").push(json!({"role": "user", "content": "continue"}));
    serde_json::to_vec(&body).expect("json")
}

fn fmt(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns >= 1_000_000 {
        format!("{:.2} ms", ns as f64 / 1e6)
    } else if ns >= 1_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else {
        format!("{ns} ns")
    }
}

fn request_case(rows: &mut Vec<[String; 4]>, label: &str, from: Format, body: &[u8], to: Format) {
    let t = measure(|| {
        let mut req = convert::decode_request(from, black_box(body)).expect("decode");
        req.model = "target-model".into();
        black_box(convert::encode_request(to, &req).expect("encode"));
    });
    rows.push([label.into(), format!("{from} → {to}"), format!("{} KB", body.len() / 1024), fmt(t)]);
}

/// A long upstream stream of `n` text deltas in `format`, as SSE bytes.
fn long_stream(format: Format, n: usize) -> String {
    let word = "token ";
    let mut s = String::new();
    match format {
        Format::Openai => {
            let chunk = |delta: Value, finish: Value| {
                json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            };
            s.push_str(&format!("data: {}\n\n", chunk(json!({"role": "assistant", "content": ""}), Value::Null)));
            for _ in 0..n {
                s.push_str(&format!("data: {}\n\n", chunk(json!({"content": word}), Value::Null)));
            }
            s.push_str(&format!("data: {}\n\n", chunk(json!({}), json!("stop"))));
            s.push_str("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":5,\"total_tokens\":15}}\n\n");
            s.push_str("data: [DONE]\n\n");
        }
        Format::Anthropic => {
            s.push_str("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n");
            s.push_str("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
            for _ in 0..n {
                s.push_str(&format!(
                    "event: content_block_delta\ndata: {}\n\n",
                    json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": word}})
                ));
            }
            s.push_str("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n");
            s.push_str("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":5}}\n\n");
            s.push_str("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
        }
        Format::Responses => {
            let mut seq = 0;
            let mut ev = |s: &mut String, v: Value| {
                let mut v = v;
                v["sequence_number"] = json!(seq);
                seq += 1;
                s.push_str(&format!("event: {}\ndata: {}\n\n", v["type"].as_str().unwrap_or(""), v));
            };
            let response = json!({"id": "resp_1", "object": "response", "created_at": 1, "status": "in_progress", "model": "m", "output": []});
            ev(&mut s, json!({"type": "response.created", "response": response}));
            ev(
                &mut s,
                json!({"type": "response.output_item.added", "output_index": 0, "item": {"id": "msg_1", "type": "message", "role": "assistant", "status": "in_progress", "content": []}}),
            );
            ev(
                &mut s,
                json!({"type": "response.content_part.added", "item_id": "msg_1", "output_index": 0, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
            );
            for _ in 0..n {
                ev(
                    &mut s,
                    json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": word}),
                );
            }
            let mut done = response.clone();
            done["status"] = json!("completed");
            done["usage"] = json!({"input_tokens": 10, "output_tokens": 5, "total_tokens": 15});
            ev(&mut s, json!({"type": "response.completed", "response": done}));
        }
        Format::Gemini => {
            let chunk = |part: Value| json!({"candidates": [{"content": {"parts": [part], "role": "model"}, "index": 0}], "modelVersion": "m", "responseId": "r"});
            for _ in 0..n {
                s.push_str(&format!("data: {}\r\n\r\n", chunk(json!({"text": word}))));
            }
            s.push_str("data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"\"}],\"role\":\"model\"},\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":10,\"candidatesTokenCount\":5,\"totalTokenCount\":15},\"modelVersion\":\"m\",\"responseId\":\"r\"}\r\n\r\n");
        }
    }
    s
}

fn stream_case(rows: &mut Vec<[String; 4]>, from: Format, to: Format, n: usize) {
    let bytes = long_stream(from, n);
    let chunks: Vec<&[u8]> = bytes.as_bytes().chunks(512).collect();
    let t = measure(|| {
        let mut conv =
            StreamConversion::new(from, to, EncodeContext { id_seed: "bench".into(), ..EncodeContext::default() });
        let mut scanner = SseScanner::new();
        let mut out = Vec::with_capacity(bytes.len() * 2);
        for c in &chunks {
            scanner.feed(black_box(c), |e| conv.event(&e, &mut out));
        }
        conv.finish(&mut out);
        black_box(out);
    });
    rows.push([
        format!("stream of {n} text deltas"),
        format!("{from} → {to}"),
        format!("{} KB", bytes.len() / 1024),
        format!("{} per event ({} total)", fmt(t / n as u32), fmt(t)),
    ]);
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let mut rows: Vec<[String; 4]> = Vec::new();
    let turn = serde_json::to_vec(&fixture("claude_code_2.1.197_turn2_tool_result.json")).expect("json");
    let long = long_history(200 * 1024);
    let codex = serde_json::to_vec(&fixture("codex_0.171.0_responses_turn2_function_call_output.json")).expect("json");
    let chat = serde_json::to_vec(&fixture("codex_0.80.0_chat_turn2_tool.json")).expect("json");
    request_case(&mut rows, "Claude Code turn (24 tools)", Format::Anthropic, &turn, Format::Openai);
    request_case(&mut rows, "Claude Code turn (24 tools)", Format::Anthropic, &turn, Format::Responses);
    request_case(&mut rows, "Claude Code turn, long history", Format::Anthropic, &long, Format::Openai);
    request_case(&mut rows, "Claude Code turn, long history", Format::Anthropic, &long, Format::Responses);
    request_case(&mut rows, "Codex CLI turn (Responses)", Format::Responses, &codex, Format::Anthropic);
    request_case(&mut rows, "Codex CLI turn (Responses)", Format::Responses, &codex, Format::Openai);
    request_case(&mut rows, "Codex 0.80 turn (Chat)", Format::Openai, &chat, Format::Anthropic);
    request_case(&mut rows, "Claude Code turn (24 tools)", Format::Anthropic, &turn, Format::Gemini);
    let cli = serde_json::to_vec(&fixture("gemini/cli_tool_03_v1beta_streamGenerateContent_gemini-3.8-flash.json"))
        .expect("json");
    request_case(&mut rows, "Gemini CLI turn", Format::Gemini, &cli, Format::Anthropic);
    for (from, to) in [
        (Format::Openai, Format::Anthropic),
        (Format::Responses, Format::Anthropic),
        (Format::Anthropic, Format::Openai),
        (Format::Anthropic, Format::Responses),
        (Format::Openai, Format::Responses),
        (Format::Responses, Format::Openai),
        (Format::Gemini, Format::Anthropic),
        (Format::Anthropic, Format::Gemini),
    ] {
        stream_case(&mut rows, from, to, 2000);
    }
    let mut out = String::from("| case | conversion | size | time |\n| --- | --- | --- | --- |\n");
    for r in &rows {
        out.push_str(&format!("| {} | {} | {} | {} |\n", r[0], r[1], r[2], r[3]));
    }
    use std::io::Write;
    let _ = std::io::stdout().write_all(out.as_bytes());
}
