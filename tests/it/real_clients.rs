//! The real coding agents, pointed at the gateway by `ccmesh connect` and nothing else: each runs
//! in a temporary HOME with an environment holding no base URL and no key (only the client's
//! telemetry and trust switches, and a dead proxy that any traffic not bound for 127.0.0.1 would
//! hit), answers a prompt from the scripted upstream behind the gateway, and after
//! `ccmesh disconnect` its settings files are byte for byte what they were.
//!
//! The gateways use client keys (another key exists), so `connect` mints a key named after the
//! client and writes it where the client reads its token (Claude Code's `ANTHROPIC_AUTH_TOKEN`,
//! Codex's provider `experimental_bearer_token`): the clients run with a real `ccm-` key, and
//! the records name it.
//!
//! One process per client (SPEC §15.16: the CI budget), installed from
//! `tests/clients/package-lock.json` by `support::node::client_modules`.
//!
//! Gemini CLI: `connect` writes `~/.gemini/.env` and the auth type; the CLI then runs a tool round
//! trip (its own `list_directory`) through the gateway in front of an endpoint of each format, and
//! reports the gateway's mid-stream error chunk and a 429.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::clients::Home;
use crate::support::gateway::TestGateway;
use crate::support::mock::{self, MockUpstream, RecordedRequest, Reply, sse_data, sse_event};
use crate::support::node::client_modules;

const ANSWER: &str = "PONG-FROM-THE-UPSTREAM";
/// A port nothing listens on: with it as HTTP(S)_PROXY, a request to any host but loopback fails
/// fast instead of leaving the machine.
const DEAD_PROXY: &str = "http://127.0.0.1:9";

/// One run of a real client.
struct ClientRun<'a> {
    /// `node_modules/.bin/NAME`.
    bin: &'a str,
    args: Vec<String>,
    /// Telemetry and trust switches only.
    env: Vec<(&'a str, &'a str)>,
}

impl ClientRun<'_> {
    /// Run it in `home`'s HOME and a project folder inside it; stdout and stderr together.
    fn run(&self, home: &Home) -> (bool, String) {
        let bin = client_modules().join(".bin").join(self.bin);
        let project = home.home.join("project");
        std::fs::create_dir_all(&project).unwrap();
        let tmp = home.home.join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        let node_dir =
            which("node").and_then(|n| n.parent().map(Path::to_path_buf)).unwrap_or_else(|| "/usr/bin".into());
        let mut cmd = Command::new(&bin);
        cmd.args(&self.args)
            .current_dir(&project)
            .env_clear()
            .env("HOME", &home.home)
            .env("PATH", format!("{}:/usr/local/bin:/usr/bin:/bin", node_dir.display()))
            .env("TMPDIR", &tmp)
            .env("HTTPS_PROXY", DEAD_PROXY)
            .env("HTTP_PROXY", DEAD_PROXY)
            .env("NO_PROXY", "127.0.0.1,localhost")
            .stdin(Stdio::null());
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
        let out = wait_with_timeout(child, Duration::from_secs(120));
        let text =
            format!("{}\n--- stderr\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    }
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var("PATH").ok()?).map(|d| d.join(name)).find(|p| p.is_file())
}

/// The client's output, or a failure after `limit` (a hung client must not hang the suite).
fn wait_with_timeout(mut child: std::process::Child, limit: Duration) -> std::process::Output {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    let killer = std::thread::spawn(move || {
        if rx.recv_timeout(limit).is_err() {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        }
    });
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let read = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out_t = read(stdout.map(|s| Box::new(s) as Box<dyn std::io::Read + Send>));
    let err_t = read(stderr.map(|s| Box::new(s) as Box<dyn std::io::Read + Send>));
    let status = child.wait().unwrap();
    let _ = tx.send(());
    let _ = killer.join();
    std::process::Output { status, stdout: out_t.join().unwrap(), stderr: err_t.join().unwrap() }
}

/// Make the gateway one that uses client keys: a key exists (not the client's).
async fn uses_client_keys(g: &TestGateway) {
    let (status, v) = g.api(reqwest::Method::POST, "/api/keys", Some(json!({"name": "someone-else"}))).await;
    assert_eq!(status, 201, "{v}");
}

/// The stored records of the requests made with the key `name`.
async fn key_records(g: &TestGateway, name: &str) -> Vec<Value> {
    let sink = g.gw.events.records().clone();
    assert!(tokio::task::spawn_blocking(move || sink.flush(Duration::from_secs(10))).await.unwrap());
    let (status, page) = g.api(reqwest::Method::GET, &format!("/api/requests?key={name}&limit=500"), None).await;
    assert_eq!(status, 200, "{page}");
    page["requests"].as_array().cloned().unwrap_or_default()
}

async fn detail(g: &TestGateway, summary: &Value) -> Value {
    let id = summary["id"].as_str().unwrap();
    g.api(reqwest::Method::GET, &format!("/api/requests/{id}"), None).await.1
}

/// Settings with what whole-file rewrites have destroyed before: hooks, permissions, a status
/// line, an MCP server (plugins are in the unit tests: enabling one here would make Claude Code
/// fetch its marketplace).
const CLAUDE_SETTINGS: &str = r#"{
  "$schema": "https://json.schemastore.org/claude-code-settings.json",
  "env": {
    "ANTHROPIC_API_KEY": "sk-ant-the-users-own-key-0001",
    "BASH_DEFAULT_TIMEOUT_MS": "600000"
  },
  "permissions": {"allow": ["Bash(cargo test:*)"], "deny": ["Read(./.env)"]},
  "hooks": {
    "PostToolUse": [{"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "true"}]}]
  },
  "statusLine": {"type": "command", "command": "echo ccmesh"},
  "mcpServers": {"docs": {"command": "/nonexistent/docs-mcp", "args": ["--stdio"]}},
  "cleanupPeriodDays": 30
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_answers_through_the_gateway_with_only_what_connect_wrote() {
    let upstream = MockUpstream::start().await;
    upstream.set_default(Reply::anthropic_stream(&[ANSWER]));
    let g = TestGateway::start().await;
    g.add("claude-upstream", "anthropic", &upstream.url(), json!({})).await;
    uses_client_keys(&g).await;
    let home = Home::new();
    let settings = home.write(".claude/settings.json", CLAUDE_SETTINGS);

    let (ok, out) = home.ccmesh(&["connect", "claude-code", "--server", &g.url]);
    assert!(ok, "{out}");
    assert!(out.contains("with a client key made for it"), "{out}");
    let written = std::fs::read_to_string(&settings).unwrap();
    assert!(written.contains("\"ANTHROPIC_AUTH_TOKEN\": \"ccm-"), "{written}");
    let run = ClientRun {
        bin: "claude",
        args: vec!["-p".into(), "Reply with the word PONG.".into()],
        env: vec![
            ("DISABLE_TELEMETRY", "1"),
            ("DISABLE_ERROR_REPORTING", "1"),
            ("DISABLE_AUTOUPDATER", "1"),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ],
    };
    // Blocking here is fine: the gateway and the upstream run on the runtime's worker threads.
    let (ok, output) = run.run(&home);
    assert!(ok, "claude failed:\n{output}");
    assert!(output.contains(ANSWER), "the answer came from the upstream behind the gateway:\n{output}");
    let got = upstream.requests();
    assert!(!got.is_empty(), "the upstream saw the request");
    let r = got.iter().find(|r| r.path_and_query().starts_with("/v1/messages")).expect("a Messages request");
    assert_eq!(
        r.header("x-api-key"),
        Some("sk-claude-upstream-secret-key-0000"),
        "the endpoint's key, not the client's"
    );
    assert!(r.header("user-agent").unwrap_or("").starts_with("claude-cli/"), "{:?}", r.header("user-agent"));
    // Every request came with the minted key, and the records name it with Claude Code's session.
    let records = key_records(&g, "claude-code").await;
    assert!(records.iter().any(|r| r["status"] == 200), "{records:?}");
    let record = detail(&g, records.iter().find(|r| r["status"] == 200).unwrap()).await;
    assert!(record["session_id"].as_str().is_some_and(|s| !s.is_empty()), "{record}");
    assert_eq!(key_records(&g, "someone-else").await.len(), 0);

    let (ok, out) = home.ccmesh(&["disconnect", "claude-code"]);
    assert!(ok, "{out}");
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), CLAUDE_SETTINGS, "settings.json byte for byte");
}

const CODEX_CONFIG: &str = r#"# Codex, configured by hand
model = "gpt-5.5"  # the model this user asks for
approval_policy = "never"

# Docs over MCP (a command that does not exist: Codex reports it and goes on)
[mcp_servers.docs]
command = "/nonexistent/docs-mcp"

[tui]
notifications = false
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_answers_through_the_gateway_with_only_what_connect_wrote() {
    let upstream = MockUpstream::start().await;
    upstream.set_default(Reply::responses_stream(&[ANSWER]));
    let g = TestGateway::start().await;
    g.add("codex-upstream", "responses", &upstream.url(), json!({})).await;
    uses_client_keys(&g).await;
    let home = Home::new();
    let config = home.write(".codex/config.toml", CODEX_CONFIG);

    let (ok, out) = home.ccmesh(&["connect", "codex", "--server", &g.url]);
    assert!(ok, "{out}");
    assert!(out.contains("with a client key made for it"), "{out}");
    assert!(std::fs::read_to_string(&config).unwrap().contains("experimental_bearer_token = \"ccm-"));
    let run = ClientRun {
        bin: "codex",
        args: ["exec", "--skip-git-repo-check", "Reply with the word PONG."].map(String::from).to_vec(),
        env: vec![],
    };
    let (ok, output) = run.run(&home);
    assert!(ok, "codex failed:\n{output}");
    assert!(output.contains(ANSWER), "{output}");
    assert!(output.contains("provider: ccmesh"), "{output}");
    let got = upstream.requests();
    let r = got.iter().find(|r| r.path_and_query().starts_with("/v1/responses")).expect("a Responses request");
    assert_eq!(r.header("authorization"), Some("Bearer sk-codex-upstream-secret-key-0000"));
    assert_eq!(r.json()["model"], "gpt-5.5", "the user's own model setting, untouched");
    let records = key_records(&g, "codex").await;
    assert!(records.iter().any(|r| r["status"] == 200), "{records:?}");
    let record = detail(&g, records.iter().find(|r| r["status"] == 200).unwrap()).await;
    assert!(record["session_id"].as_str().is_some_and(|s| !s.is_empty()), "Codex's prompt_cache_key: {record}");

    let (ok, out) = home.ccmesh(&["disconnect", "codex"]);
    assert!(ok, "{out}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), CODEX_CONFIG, "config.toml byte for byte");
}

/// The telemetry and update switches Gemini CLI 0.61 needs to stay offline.
const GEMINI_SETTINGS: &str = r#"{
  "privacy": {"usageStatisticsEnabled": false},
  "general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false},
  "mcpServers": {"docs": {"command": "/nonexistent/docs-mcp"}}
}
"#;

/// The file the Gemini CLI's `list_directory` finds in its project folder, and the answer after it.
const MARKER_FILE: &str = "ccmesh-marker-file.txt";
const TOOL_ANSWER: &str = "THE-FOLDER-HOLDS-THE-MARKER";

/// A streamed answer of `format` that calls `name` with `args` (and says nothing else).
fn tool_call_stream(format: &str, name: &str, args: &serde_json::Value) -> Reply {
    let id = "call_cli_0001";
    let events: Vec<String> = match format {
        "anthropic" => vec![
            sse_event(
                "message_start",
                &json!({"type": "message_start", "message": {"id": "msg_cli", "type": "message",
                "role": "assistant", "model": mock::ANTHROPIC_MODEL, "content": [], "stop_reason": null,
                "stop_sequence": null, "usage": {"input_tokens": 10, "output_tokens": 1}}}),
            ),
            sse_event(
                "content_block_start",
                &json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "tool_use", "id": "toolu_cli_0001", "name": name, "input": {}}}),
            ),
            sse_event(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": args.to_string()}}),
            ),
            sse_event("content_block_stop", &json!({"type": "content_block_stop", "index": 0})),
            sse_event(
                "message_delta",
                &json!({"type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 9}}),
            ),
            sse_event("message_stop", &json!({"type": "message_stop"})),
        ],
        "openai" => {
            let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
                sse_data(&json!({"id": "chatcmpl-cli", "object": "chat.completion.chunk", "created": 1_767_225_600,
                    "model": mock::OPENAI_CHAT_MODEL, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}))
            };
            vec![
                chunk(
                    json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0, "id": id, "type": "function",
                    "function": {"name": name, "arguments": ""}}]}),
                    json!(null),
                ),
                chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": args.to_string()}}]}), json!(null)),
                chunk(json!({}), json!("tool_calls")),
                "data: [DONE]\n\n".to_owned(),
            ]
        }
        "responses" => {
            let item = json!({"id": "fc_cli", "type": "function_call", "status": "completed", "call_id": id,
                "name": name, "arguments": args.to_string()});
            let response = |status: &str, output: serde_json::Value| {
                json!({"id": "resp_cli", "object": "response", "created_at": 1_767_225_600, "status": status,
                    "model": mock::RESPONSES_MODEL, "output": output,
                    "usage": {"input_tokens": 10, "output_tokens": 9, "total_tokens": 19}})
            };
            vec![
                sse_event(
                    "response.created",
                    &json!({"type": "response.created", "sequence_number": 0,
                    "response": response("in_progress", json!([]))}),
                ),
                sse_event(
                    "response.output_item.added",
                    &json!({"type": "response.output_item.added",
                    "sequence_number": 1, "output_index": 0, "item": {"id": "fc_cli", "type": "function_call",
                    "status": "in_progress", "call_id": id, "name": name, "arguments": ""}}),
                ),
                sse_event(
                    "response.function_call_arguments.delta",
                    &json!({"type": "response.function_call_arguments.delta",
                    "sequence_number": 2, "item_id": "fc_cli", "output_index": 0, "delta": args.to_string()}),
                ),
                sse_event(
                    "response.function_call_arguments.done",
                    &json!({"type": "response.function_call_arguments.done",
                    "sequence_number": 3, "item_id": "fc_cli", "output_index": 0, "arguments": args.to_string()}),
                ),
                sse_event(
                    "response.output_item.done",
                    &json!({"type": "response.output_item.done",
                    "sequence_number": 4, "output_index": 0, "item": item}),
                ),
                sse_event(
                    "response.completed",
                    &json!({"type": "response.completed", "sequence_number": 5,
                    "response": response("completed", json!([item]))}),
                ),
            ]
        }
        // Gemini 2.x style: a call without an id (the CLI makes one up), with the signature
        // Gemini 3 wants back.
        _ => vec![mock::gemini_chunk(&mock::gemini_response(
            json!([{"functionCall": {"name": name, "args": args}, "thoughtSignature": "CiQB0e2Kb+/x9A=="}]),
            Some("STOP"),
            Some(json!({"promptTokenCount": 10, "candidatesTokenCount": 9, "totalTokenCount": 19})),
            "resp-cli",
        ))],
    };
    Reply::sse(events).with_header("content-type", "text/event-stream")
}

/// A streamed text answer of `format`.
fn text_stream(format: &str, text: &str) -> Reply {
    match format {
        "anthropic" => Reply::anthropic_stream(&[text]),
        "openai" => Reply::openai_chat_stream(&[text]),
        "responses" => Reply::responses_stream(&[text]),
        _ => Reply::gemini_stream(&[text]),
    }
}

/// Where a converted (or passed-through) Gemini CLI request lands on an endpoint of `format`,
/// and the endpoint's credential there.
fn landed(format: &str, r: &RecordedRequest) {
    let (path, auth, key) = match format {
        "anthropic" => ("/v1/messages", "x-api-key", "sk-up-secret-key-0000".to_owned()),
        "openai" => ("/v1/chat/completions", "authorization", "Bearer sk-up-secret-key-0000".to_owned()),
        "responses" => ("/v1/responses", "authorization", "Bearer sk-up-secret-key-0000".to_owned()),
        _ => (
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
            "x-goog-api-key",
            "sk-up-secret-key-0000".to_owned(),
        ),
    };
    assert_eq!(r.path, path, "{format}");
    assert_eq!(r.header(auth), Some(key.as_str()), "{format}: the endpoint's key, not the client's");
    if format != "gemini" {
        assert!(r.header("x-goog-api-key").is_none() && r.header("x-goog-api-client").is_none(), "{format}");
        assert_eq!(r.json()["model"], "gemini-2.5-flash", "{format}: the model from the CLI's path");
    }
}

/// A gateway with one endpoint of `format` in front of `upstream`, and a HOME whose Gemini CLI
/// `connect` pointed at it; the files as they were before.
async fn gemini_cli_setup(format: &str) -> (MockUpstream, TestGateway, Home, Vec<(PathBuf, String)>) {
    let upstream = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("up", format, &upstream.url(), json!({"api_key": "sk-up-secret-key-0000"})).await;
    let home = Home::new();
    let files = vec![
        (home.write(".gemini/settings.json", GEMINI_SETTINGS), GEMINI_SETTINGS.to_owned()),
        (home.write(".gemini/.env", GEMINI_ENV), GEMINI_ENV.to_owned()),
    ];
    let (ok, out) = home.ccmesh(&["connect", "gemini-cli", "--server", &g.url]);
    assert!(ok, "{out}");
    assert!(out.contains("trust"), "connect says how folder trust applies: {out}");
    (upstream, g, home, files)
}

/// `disconnect`, then the files are what they were, byte for byte.
fn gemini_cli_disconnect(home: &Home, files: &[(PathBuf, String)]) {
    let (ok, out) = home.ccmesh(&["disconnect", "gemini-cli"]);
    assert!(ok, "{out}");
    for (path, before) in files {
        assert_eq!(&std::fs::read_to_string(path).unwrap(), before, "{} byte for byte", path.display());
    }
}

const GEMINI_ENV: &str = "# kept by hand\nGOOGLE_CLOUD_PROJECT=acme-dev\n";

/// The Gemini CLI, started with no variable but its trust switch, in a folder whose listing the
/// upstream asks for.
fn gemini_cli(prompt: &str) -> ClientRun<'static> {
    ClientRun {
        bin: "gemini",
        args: ["-m", "gemini-2.5-flash", "-p", prompt].map(String::from).to_vec(),
        // The trust switch: ~/.gemini/.env is read only in a trusted folder.
        env: vec![("GEMINI_CLI_TRUST_WORKSPACE", "true")],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_runs_a_tool_round_trip_through_the_gateway_in_front_of_every_format() {
    for format in ["gemini", "anthropic", "openai", "responses"] {
        let (upstream, _g, home, files) = gemini_cli_setup(format).await;
        let project = home.home.join("project");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::write(project.join(MARKER_FILE), "hello\n").unwrap();
        upstream.push(tool_call_stream(format, "list_directory", &json!({"dir_path": project.display().to_string()})));
        upstream.push(text_stream(format, TOOL_ANSWER));

        let started = std::time::Instant::now();
        let (ok, output) = gemini_cli("List the files in this folder.").run(&home);
        assert!(ok, "{format}: gemini failed:\n{output}");
        assert!(output.contains(TOOL_ANSWER), "{format}: the answer after the tool result:\n{output}");
        let got = upstream.requests();
        assert_eq!(got.len(), 2, "{format}: the call, then the answer to its result:\n{output}");
        for r in &got {
            landed(format, r);
        }
        // The CLI ran the tool and its result reached the upstream, in the upstream's format.
        let second = got[1].text();
        let result = match format {
            "anthropic" => "\"tool_result\"",
            "openai" => "\"role\":\"tool\"",
            "responses" => "\"function_call_output\"",
            _ => "\"functionResponse\"",
        };
        assert!(second.contains(result) && !got[0].text().contains(result), "{format}: the tool's result: {second}");
        assert!(
            second.contains("Directory listing for") && second.contains(MARKER_FILE),
            "{format}: the listing went back: {second}"
        );
        if format == "gemini" {
            assert!(second.contains("CiQB0e2Kb+/x9A=="), "the thought signature went back: {second}");
        }
        gemini_cli_disconnect(&home, &files);
        eprintln!("gemini cli: {format}: tool round trip in {:.1} s", started.elapsed().as_secs_f64());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_reports_a_mid_stream_error_and_a_429_from_the_gateway() {
    // A converted stream cut after its first text: the gateway ends it with the bare error chunk,
    // which the CLI reports (it retries the turn first, as it does for a broken stream).
    let (upstream, g, home, files) = gemini_cli_setup("anthropic").await;
    g.settings(json!({"stream_resume": false})).await;
    let events = crate::support::mock::anthropic_stream_events(&["PARTIAL-ANSWER ", "never sent"]);
    let keep = events.iter().position(|e| e.contains("PARTIAL-ANSWER")).unwrap() + 1;
    upstream.set_default(Reply::sse(events).with_header("content-type", "text/event-stream").cut_after(keep));
    let (ok, output) = gemini_cli("Reply with the word PONG.").run(&home);
    assert!(!ok, "the CLI fails:\n{output}");
    assert!(output.contains("PARTIAL-ANSWER"), "{output}");
    assert!(
        output.contains("ApiError") && output.contains("mid-stream"),
        "the CLI reports the gateway's error:\n{output}"
    );
    assert!(!output.contains("never sent"), "{output}");
    gemini_cli_disconnect(&home, &files);

    // Google's quota error, passed through a Gemini endpoint: the CLI reports it at once.
    let (upstream, _g, home, files) = gemini_cli_setup("gemini").await;
    let quota = "You exceeded your current quota. Quota exceeded for metric: \
                 generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 0, model: gemini-2.5-flash";
    upstream.set_default(Reply::gemini_error(429, "RESOURCE_EXHAUSTED", quota));
    let (ok, output) = gemini_cli("Reply with the word PONG.").run(&home);
    assert!(!ok, "the CLI fails:\n{output}");
    assert!(output.contains("TerminalQuotaError") && output.contains("limit: 0"), "the CLI reports the 429:\n{output}");
    assert!(output.contains("429"), "{output}");
    gemini_cli_disconnect(&home, &files);
}
