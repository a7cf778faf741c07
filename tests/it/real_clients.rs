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
//! Gemini CLI: the gateway does not speak Gemini yet, so its test proves the other half — that the
//! CLI, started with no variable, honours the `.env` and auth type `connect` writes — by connecting
//! it to a stand-in that answers `/health` and Gemini's stream. Once the gateway accepts Gemini,
//! `gemini_cli_answers_through_the_gateway` is [`ClientRun`] with the gateway as the server and a
//! `gemini` endpoint in front of the same reply.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::clients::Home;
use crate::support::gateway::TestGateway;
use crate::support::mock::{MockUpstream, Reply, sse_data};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_honours_the_files_connect_writes() {
    // The stand-in gateway: /health for `connect`, then Gemini's stream for the CLI.
    let stand_in = MockUpstream::start().await;
    stand_in.push(Reply::json(200, json!({"status": "ok"})));
    stand_in.push(Reply::status(404)); // GET /api/clients: not a ccmesh, no warnings to learn
    let chunk = json!({
        "candidates": [{"content": {"role": "model", "parts": [{"text": ANSWER}]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 3, "totalTokenCount": 8},
        "modelVersion": "gemini-2.5-flash"
    });
    stand_in.set_default(Reply::sse([sse_data(&chunk)]));
    let home = Home::new();
    let settings = home.write(".gemini/settings.json", GEMINI_SETTINGS);
    let env_file = home.write(".gemini/.env", "# kept by hand\nGOOGLE_CLOUD_PROJECT=acme-dev\n");
    let env_before = std::fs::read_to_string(&env_file).unwrap();

    let (ok, out) =
        home.ccmesh(&["connect", "gemini-cli", "--server", &stand_in.url(), "--key", "ccm-gemini-test-key-77"]);
    assert!(ok, "{out}");
    assert!(out.contains("trust"), "connect says how folder trust applies: {out}");
    let run = ClientRun {
        bin: "gemini",
        args: ["-m", "gemini-2.5-flash", "-p", "Reply with the word PONG."].map(String::from).to_vec(),
        // The trust switch: ~/.gemini/.env is read only in a trusted folder.
        env: vec![("GEMINI_CLI_TRUST_WORKSPACE", "true")],
    };
    let (ok, output) = run.run(&home);
    assert!(ok, "gemini failed:\n{output}");
    assert!(output.contains(ANSWER), "{output}");
    let got = stand_in.requests();
    let r = got.iter().find(|r| r.path_and_query().contains(":streamGenerateContent")).expect("a Gemini request");
    assert_eq!(r.header("x-goog-api-key"), Some("ccm-gemini-test-key-77"), "the key from ~/.gemini/.env");
    assert!(r.path_and_query().starts_with("/v1beta/models/gemini-2.5-flash"), "{}", r.path_and_query());

    let (ok, out) = home.ccmesh(&["disconnect", "gemini-cli"]);
    assert!(ok, "{out}");
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), GEMINI_SETTINGS);
    assert_eq!(std::fs::read_to_string(&env_file).unwrap(), env_before);
}
