//! Black-box tests of the real `ccmesh` binary: `serve` with a temp data dir and a `--config`
//! file, the management CLI against it, graceful shutdown on SIGTERM, and secrets kept out of
//! the logs.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::binary::{BIN, Server};

use crate::support::gateway::{chat_body, claude_body};
use crate::support::mock::{MockUpstream, Reply};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_applies_the_config_file_and_proxies() {
    let up = MockUpstream::start().await;
    up.set_default(Reply::anthropic_message("hello from upstream"));
    let config = format!(
        r#"
[[endpoints]]
name = "primary"
base_url = "{}"
api_key = "${{TEST_PRIMARY_KEY}}"
format = "anthropic"
models = ["claude-*"]
fast = true

[settings]
routing_strategy = "priority"

[settings.breaker.claude]
failure_threshold = 5
"#,
        up.url()
    );
    let server = Server::start(Some(&config), &[("TEST_PRIMARY_KEY", "sk-ant-from-env-123456789")]);
    let http = crate::support::gateway::http_client();
    let r = http
        .post(format!("{}/v1/messages", server.url))
        .json(&claude_body("claude-sonnet-4-5", false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(up.last_request().unwrap().header("x-api-key"), Some("sk-ant-from-env-123456789"));
    let eps: Value = http.get(format!("{}/api/endpoints", server.url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(eps[0]["name"], "primary");
    assert_eq!(eps[0]["fast"], true);
    assert_eq!(eps[0]["api_key"], "sk-…6789");
    let s: Value = http.get(format!("{}/api/settings", server.url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(s["breaker"]["claude"]["failure_threshold"], 5);
    assert_eq!(s["routing_strategy"], "priority");
    // The key never appears in the logs.
    let logs = server.logs.lock().unwrap().join("\n");
    assert!(logs.contains("\"event\":\"listening\""));
    assert!(!logs.contains("sk-ant-from-env-123456789"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_manages_a_running_gateway() {
    let up = MockUpstream::start().await;
    let server = Server::start(None, &[]);
    let (code, out, err) = server.cli(&[
        "endpoint",
        "add",
        "kimi",
        "--base-url",
        &up.url(),
        "--format",
        "openai",
        "--api-key",
        "sk-kimi-0123456789abcd",
        "--model",
        "kimi-*",
        "--map",
        "gpt-4o=kimi-k2",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("added endpoint 'kimi'"), "{out}");
    assert!(out.contains("sk-…abcd") && !out.contains("0123456789"), "{out}");
    server.cli(&["endpoint", "add", "glm", "--base-url", &up.url(), "--format", "openai", "--api-key", "k"]);

    let (code, out, _) = server.cli(&["endpoint", "list"]);
    assert_eq!(code, 0);
    let header = out.lines().next().unwrap();
    assert!(header.starts_with("NAME") && header.contains("FORMAT") && header.contains("BASE URL"), "{out}");
    assert!(out.lines().nth(1).unwrap().starts_with("kimi"), "{out}");

    let (code, out, _) = server.cli(&["endpoint", "list", "--json"]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2);
    assert_eq!(v[0]["model_map"], json!({"gpt-4o": "kimi-k2"}));

    let (code, out, _) = server.cli(&["fast", "set", "glm", "kimi"]);
    assert_eq!(code, 0);
    assert!(out.contains("glm → kimi"), "{out}");
    let (_, out, _) = server.cli(&["endpoint", "show", "glm", "--json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!((v["fast"].clone(), v["fast_sort_order"].clone()), (json!(true), json!(0)));

    let (code, _, _) = server.cli(&["endpoint", "disable", "glm"]);
    assert_eq!(code, 0);
    let (_, out, _) = server.cli(&["endpoint", "edit", "kimi", "--no-fast", "--json"]);
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["fast"], false);

    let (code, out, _) = server.cli(&["health"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("NAME") && out.contains("unknown") && out.contains("test"), "{out}");

    up.push(Reply::openai_chat("pong"));
    let (code, out, err) = server.cli(&["endpoint", "test", "kimi"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("kimi: available in "), "{out}");
    up.push(Reply::openai_error(401, "authentication_error", "bad key"));
    let (code, _, err) = server.cli(&["endpoint", "test", "kimi"]);
    assert_eq!(code, 1);
    assert!(err.contains("unavailable") && err.contains("401"), "{err}");

    let (code, out, _) = server.cli(&["reset", "kimi"]);
    assert_eq!(code, 0);
    assert!(out.contains("reset"), "{out}");

    let (code, out, _) = server.cli(&["failover", "off", "openai"]);
    assert_eq!(code, 0);
    assert!(out.contains("failover off for openai") && out.contains("ccmesh failover on openai"), "{out}");
    let (_, out, _) = server.cli(&["failover", "on", "openai", "--json"]);
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["openai"], true);
    let (code, out, err) = server.cli(&["failover", "off", "gemini", "--json"]);
    assert_eq!(code, 0, "{err}");
    let switches = serde_json::from_str::<Value>(&out).unwrap();
    assert_eq!((switches["gemini"].clone(), switches["openai"].clone()), (json!(false), json!(true)), "{out}");
    let (code, _, err) = server.cli(&["failover", "off", "nonsense"]);
    assert_ne!(code, 0);
    assert!(err.contains("claude") && err.contains("responses") && err.contains("gemini"), "{err}");

    // Errors from the API: non-zero exit and the API's message.
    let (code, _, err) =
        server.cli(&["endpoint", "add", "bad", "--base-url", "nope", "--format", "openai", "--api-key", "k"]);
    assert_eq!(code, 1);
    assert!(err.contains("400") && err.contains("base_url"), "{err}");
    let (code, _, err) = server.cli(&["endpoint", "rm", "ghost"]);
    assert_eq!(code, 1);
    assert!(err.contains("no endpoint named 'ghost'"), "{err}");
    let (code, out, _) = server.cli(&["endpoint", "rm", "glm"]);
    assert_eq!((code, out.trim()), (0, "deleted endpoint 'glm'"));
}

#[test]
fn the_cli_says_clearly_when_no_gateway_answers() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let out = Command::new(BIN).args(["health", "--server", &format!("http://{dead}")]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot reach the gateway") && err.contains("ccmesh serve"), "{err}");
}

#[test]
fn serve_refuses_a_public_address_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--listen", "0.0.0.0:0", "--data-dir"])
        .arg(dir.path())
        .env_remove("CCMESH_ADMIN_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("CCMESH_ADMIN_TOKEN"), "{err}");
    // Nothing was created: validation comes before any side effect.
    assert!(!dir.path().join("ccmesh.db").exists());
}

#[test]
fn serve_rejects_a_bad_config_file_before_binding() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "[[endpoints]]\nname = \"x\"\nbase_url = \"http://127.0.0.1:1\"\nformat = \"vertex\"\n")
        .unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("endpoints[0].format"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_an_in_flight_stream_finish_then_exits() {
    let up = MockUpstream::start().await;
    up.push(Reply::openai_chat_stream(&["a", "b", "c", "d"]).paced(Duration::from_millis(150)));
    let mut server = Server::start(None, &[]);
    let (code, _, err) =
        server.cli(&["endpoint", "add", "o", "--base-url", &up.url(), "--format", "openai", "--api-key", "k"]);
    assert_eq!(code, 0, "{err}");
    let http = crate::support::gateway::http_client();
    let r = http.post(format!("{}/v1/chat/completions", server.url)).json(&chat_body("m", true)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    server.terminate();
    let text = String::from_utf8(r.bytes().await.unwrap().to_vec()).unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "the stream completed: {text}");
    let status = tokio::task::spawn_blocking(move || server.wait_exit()).await.unwrap();
    assert!(status.0.success(), "{:?}", status.0);
    assert!(status.1.contains("shutdown_started") && status.1.contains("\"stopped\""), "{}", status.1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_closes_what_is_still_open_when_the_grace_period_ends() {
    let up = MockUpstream::start().await;
    // Two events, then the upstream goes quiet for good (no idle timeout by default).
    up.push(Reply::openai_chat_stream(&["a", "b"]).stall_after(2));
    let mut server = Server::start_with_grace(None, &[], "0.5");
    let (code, _, err) =
        server.cli(&["endpoint", "add", "o", "--base-url", &up.url(), "--format", "openai", "--api-key", "k"]);
    assert_eq!(code, 0, "{err}");
    let http = crate::support::gateway::http_client();
    let mut r =
        http.post(format!("{}/v1/chat/completions", server.url)).json(&chat_body("m", true)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let first = r.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("data: "), "the stream started");
    server.terminate();
    // The stream is cut when the grace period is over, and the process exits cleanly.
    let mut rest = Vec::new();
    let ended = loop {
        match r.chunk().await {
            Ok(Some(c)) => rest.extend_from_slice(&c),
            Ok(None) => break "eof",
            Err(_) => break "error",
        }
    };
    assert!(!String::from_utf8_lossy(&rest).contains("[DONE]"), "the stalled stream never completed: {ended}");
    let (status, logs) = tokio::task::spawn_blocking(move || server.wait_exit()).await.unwrap();
    assert!(status.success(), "{status:?}");
    assert!(logs.contains("shutdown_forced") && logs.contains("\"stopped\""), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_and_stats_show_what_happened() {
    let up = MockUpstream::start().await;
    up.push(Reply::openai_error(503, "server_error", "first is down"));
    up.set_default(Reply::openai_chat("hello"));
    let server = Server::start(None, &[]);
    for name in ["first", "second"] {
        let (code, _, err) =
            server.cli(&["endpoint", "add", name, "--base-url", &up.url(), "--format", "openai", "--api-key", "k"]);
        assert_eq!(code, 0, "{err}");
    }
    // Follow live events in the background before the traffic.
    let mut follower = Command::new(BIN)
        .args(["logs", "-f", "-n", "1", "--server", &server.url])
        .env_remove("CCMESH_ADMIN_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let follower_out = follower.stdout.take().unwrap();
    let (line_tx, line_rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(follower_out).lines().map_while(Result::ok) {
            let _ = line_tx.send(line);
        }
    });
    // `logs -f` opens the event stream first and then prints its header (once, even with no
    // history): after that line no request is missed.
    let first = line_rx.recv_timeout(Duration::from_secs(20)).unwrap();
    assert!(first.starts_with("STARTED") && first.contains("ENDPOINT"), "{first}");
    let http = crate::support::gateway::http_client();
    let mut id = String::new();
    for _ in 0..50 {
        // Until the follower's subscription is live the request may be missed: repeat requests
        // until one shows up in the follower (bounded).
        let r = http
            .post(format!("{}/v1/chat/completions", server.url))
            .json(&chat_body("gpt-4o", false))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        id = r.headers()["x-ccmesh-request-id"].to_str().unwrap().to_string();
        if let Ok(line) = line_rx.recv_timeout(Duration::from_millis(500)) {
            assert!(line.contains("gpt-4o") && line.contains("200"), "{line}");
            break;
        }
    }
    let _ = follower.kill();
    let _ = follower.wait();

    // Records reach SQLite within the writer's flush interval; poll the list (bounded).
    let mut out = String::new();
    for _ in 0..100 {
        let (code, o, err) = server.cli(&["logs", "--failed-over"]);
        assert_eq!(code, 0, "{err}");
        out = o;
        if out.contains("second") {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let header = out.lines().next().unwrap();
    assert!(header.starts_with("STARTED") && header.contains("TOOK") && header.contains("COST"), "{out}");
    assert!(out.contains("gpt-4o") && out.contains("2↻"), "the failed-over request with its two attempts: {out}");

    let first_request = server.cli(&["logs", "--failed-over", "--json"]).1;
    let first_id = serde_json::from_str::<Value>(first_request.lines().last().unwrap()).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, detail, err) = server.cli(&["logs", "--id", &first_id]);
    assert_eq!(code, 0, "{err}");
    assert!(
        detail.contains("ENDPOINT") && detail.contains("first") && detail.contains("503") && detail.contains("failure"),
        "{detail}"
    );
    assert!(detail.contains("second") && detail.contains("success"), "{detail}");

    let (code, stats, err) = server.cli(&["stats", "--since", "1h"]);
    assert_eq!(code, 0, "{err}");
    assert!(stats.contains("REQUESTS") && stats.contains("second"), "{stats}");
    let (_, json_stats, _) = server.cli(&["stats", "--since", "1h", "--json"]);
    let v: Value = serde_json::from_str(&json_stats).unwrap();
    assert!(v["totals"]["requests"].as_u64().unwrap() >= 1, "{v}");
    assert!(v["totals"]["failovers"].as_u64().unwrap() >= 1, "{v}");
    assert!(!id.is_empty());
}
