//! The management CLI as a newcomer meets it, through the real binary: flags that change only
//! what they say, messages that name a command to type, health and statistics that read the
//! same as the dashboard.

use serde_json::{Value, json};

use crate::support::binary::{Launch, Server, run_cli};
use crate::support::mock::{MockUpstream, Reply};

const KEY_A: &str = "sk-ant-first-key-0000AAAA";
const KEY_B: &str = "sk-openai-second-key-BBBB";

fn json(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

/// The README exports CCMESH_ENDPOINT_API_KEY before `endpoint add`; a later `endpoint edit` in
/// the same shell must not quietly put that key on another endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_edit_changes_the_key_only_when_asked() {
    let up = MockUpstream::start().await;
    let server = Server::start(None, &[]);
    let url = up.url();
    let add = ["endpoint", "add", "anthropic", "--base-url", url.as_str(), "--format", "anthropic"];
    let (code, out, err) = server.cli_env(&add, &[("CCMESH_ENDPOINT_API_KEY", KEY_A)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("sk-…AAAA"), "add takes the key from the environment: {out}");

    // The user exported another key for the next endpoint, then edits this one.
    let env_b = [("CCMESH_ENDPOINT_API_KEY", KEY_B)];
    let (code, out, err) =
        server.cli_env(&["endpoint", "edit", "anthropic", "--test-model", "claude-x", "--json"], &env_b);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["api_key"], "sk-…AAAA", "the key is unchanged: {v}");
    assert_eq!(v["test_model"], "claude-x");

    // The key that reaches the upstream is still the first one.
    up.push(Reply::anthropic_message("pong"));
    let (code, _, err) = server.cli(&["endpoint", "test", "anthropic"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(up.last_request().unwrap().header("x-api-key"), Some(KEY_A));

    // Asked explicitly, edit takes the variable.
    let (code, out, err) = server.cli_env(&["endpoint", "edit", "anthropic", "--api-key-from-env", "--json"], &env_b);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["api_key"], "sk-…BBBB");

    // …and says what is missing when the variable is not set, changing nothing.
    let (code, _, err) = server.cli(&["endpoint", "edit", "anthropic", "--api-key-from-env"]);
    assert_eq!(code, 1);
    assert!(err.contains("CCMESH_ENDPOINT_API_KEY") && err.contains("--api-key"), "{err}");
    let (_, out, _) = server.cli(&["endpoint", "show", "anthropic", "--json"]);
    assert_eq!(json(&out)["api_key"], "sk-…BBBB");

    // `--api-key` still works on edit, and the two ways cannot be mixed.
    let (code, out, err) = server.cli(&["endpoint", "edit", "anthropic", "--api-key", KEY_A, "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["api_key"], "sk-…AAAA");
    let (code, _, err) =
        server.cli_env(&["endpoint", "edit", "anthropic", "--api-key", KEY_A, "--api-key-from-env"], &env_b);
    assert_eq!(code, 2, "clap refuses the pair: {err}");
}

fn no_rest_verbs(text: &str) {
    for verb in ["GET /api", "POST /api", "PATCH /api", "PUT /api", "DELETE /api"] {
        assert!(!text.contains(verb), "a REST verb where a command belongs: {text}");
    }
}

/// Every message names what to type, says each cause once, and calls the gateway the gateway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_messages_name_the_fix() {
    let up = MockUpstream::start().await;
    let server = Server::start(None, &[]);
    let url = up.url();

    // `--server` without a scheme just works.
    let bare = server.url.trim_start_matches("http://").to_string();
    let (code, out, err) = run_cli(["endpoint", "list", "--server", bare.as_str()], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("no endpoints yet"), "{out}");

    // Nothing listening: the gateway is not "the upstream", and the cause is said once.
    let (code, _, err) = run_cli(["health", "--server", "127.0.0.1:1"], &[]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot reach the gateway at http://127.0.0.1:1: nothing accepts connections there"), "{err}");
    assert!(!err.contains("upstream"), "{err}");
    let (_, _, err) = run_cli(["health", "--server", "http://gateway.invalid:3999"], &[]);
    assert!(err.contains("could not resolve host gateway.invalid"), "{err}");

    // API errors name CLI commands.
    let (code, _, err) = server.cli(&["endpoint", "show", "nope"]);
    assert_eq!(code, 1);
    assert!(err.contains("no endpoint named 'nope'; list them with `ccmesh endpoint list`"), "{err}");
    no_rest_verbs(&err);
    let add = [
        "endpoint",
        "add",
        "relay",
        "--base-url",
        url.as_str(),
        "--format",
        "anthropic",
        "--api-key",
        KEY_A,
        "--model",
        "claude-*",
    ];
    assert_eq!(server.cli(&add).0, 0);
    let (code, _, err) = server.cli(&add);
    assert_eq!(code, 1);
    assert!(err.contains("change the existing one with `ccmesh endpoint edit"), "{err}");
    no_rest_verbs(&err);

    // A glob-only endpoint is tested through its model list; when that is missing the test
    // says how to test with a real request instead.
    let (code, _, err) = server.cli(&["endpoint", "test", "relay"]);
    assert_eq!(code, 1);
    assert!(err.contains("HTTP 404") && err.contains("`ccmesh endpoint edit relay --test-model MODEL`"), "{err}");
    no_rest_verbs(&err);
    up.set_models(&["claude-sonnet-4-5"]);
    let (code, out, err) = server.cli(&["endpoint", "test", "relay"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("relay: available"), "{out}");

    // A DNS failure is not a refused port.
    let typo = [
        "endpoint",
        "add",
        "typo",
        "--base-url",
        "https://api.openai.invalid",
        "--format",
        "openai",
        "--api-key",
        KEY_B,
    ];
    assert_eq!(server.cli(&typo).0, 0);
    let (code, _, err) = server.cli(&["endpoint", "test", "typo"]);
    assert_eq!(code, 1);
    assert!(err.contains("could not resolve host api.openai.invalid"), "{err}");
    assert!(!err.contains("could not connect"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_token_is_asked_for_by_its_variable() {
    let server = Server::launch(Launch {
        env: &[("CCMESH_ADMIN_TOKEN", "a-long-admin-token-for-this-test-0000")],
        ..Launch::default()
    })
    .unwrap();
    let (code, _, err) = server.cli(&["endpoint", "list"]);
    assert_eq!(code, 1);
    assert!(err.contains("set CCMESH_ADMIN_TOKEN (or pass --admin-token)"), "{err}");
    assert!(!err.contains("Authorization: Bearer"), "{err}");
}

/// `serve` refuses a bad config file with everything that is wrong, each cause once.
#[test]
fn a_bad_config_file_says_everything_at_once() {
    let refused = |config: &str, env: &[(&str, &str)]| match Server::launch(Launch {
        config: Some(config),
        env,
        ..Launch::default()
    }) {
        Ok(_) => panic!("the gateway started with {config}"),
        Err(logs) => logs,
    };
    let two_keys = r#"
[[endpoints]]
name = "a"
base_url = "https://api.anthropic.com"
api_key = "${TEST_UNSET_KEY_A}"
format = "anthropic"

[[endpoints]]
name = "b"
base_url = "https://api.openai.com"
api_key = "${TEST_UNSET_KEY_B}"
format = "openai"
"#;
    let logs = refused(two_keys, &[]);
    assert!(logs.contains("environment variables not set: TEST_UNSET_KEY_A (in endpoints[0].api_key), TEST_UNSET_KEY_B (in endpoints[1].api_key)"), "{logs}");
    let logs = refused(two_keys, &[("TEST_UNSET_KEY_A", ""), ("TEST_UNSET_KEY_B", "sk-b-0000000000")]);
    assert!(logs.contains("environment variable TEST_UNSET_KEY_A (in endpoints[0].api_key) is empty"), "{logs}");

    let misspelt = "[[endpoints]]\nname = \"a\"\nbaseurl = \"https://api.anthropic.com\"\nformat = \"anthropic\"\n";
    let logs = refused(misspelt, &[]);
    assert!(logs.contains("endpoints[0].baseurl: unknown field; did you mean 'base_url'?"), "{logs}");

    let missing = match Server::launch(Launch { args: &["--config", "/nonexistent/ccmesh.toml"], ..Launch::default() })
    {
        Ok(_) => panic!("started without its config file"),
        Err(logs) => logs,
    };
    let cause = std::io::Error::from_raw_os_error(2).to_string();
    assert!(missing.contains("cannot read /nonexistent/ccmesh.toml"), "{missing}");
    assert_eq!(missing.matches(cause.as_str()).count(), 1, "the cause once: {missing}");
}

/// `ccmesh health` reads the API's badge, as the dashboard does; `ccmesh stats` has a true
/// total and names the row of requests that reached no endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_stats_read_the_same_as_the_dashboard() {
    let failing = MockUpstream::start().await;
    failing.set_default(Reply::status(500));
    let fine = MockUpstream::start().await;
    fine.set_default(Reply::anthropic_message("ok"));
    let server = Server::start(None, &[]);
    let http = crate::support::gateway::http_client();
    let api = |method: reqwest::Method, path: &str, body: Value| {
        let http = http.clone();
        let url = format!("{}{path}", server.url);
        async move {
            let r = http.request(method, url).json(&body).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    // claude trips at 20 (so 2 failures only degrade), openai at 1 with no cooldown (open and
    // already cooled down), responses at 1 with a long one.
    let settings = json!({"transient_retry_delay_ms": 0, "breaker": {
        "claude": {"failure_threshold": 20},
        "openai": {"failure_threshold": 1, "timeout_secs": 0},
        "responses": {"failure_threshold": 1, "timeout_secs": 300}}});
    assert_eq!(api(reqwest::Method::PATCH, "/api/settings", settings).await.0, 200);
    for (name, url, models) in [
        ("good", fine.url(), json!(["claude-good"])),
        ("slow", failing.url(), json!(["claude-*"])),
        ("down", failing.url(), json!(["gpt-*"])),
        ("later", failing.url(), json!(["resp-*"])),
    ] {
        let body = json!({"name": name, "base_url": url, "api_key": "sk-test-key-00000000", "format": "anthropic", "models": models});
        assert_eq!(api(reqwest::Method::POST, "/api/endpoints", body).await.0, 201);
    }
    let send = |path: &'static str, body: Value| api(reqwest::Method::POST, path, body);
    assert_eq!(send("/v1/messages", crate::support::gateway::claude_body("claude-good", false)).await.0, 200);
    assert_eq!(send("/v1/messages", crate::support::gateway::claude_body("claude-x", false)).await.0, 500);
    assert_eq!(send("/v1/chat/completions", crate::support::gateway::chat_body("gpt-x", false)).await.0, 500);
    assert_eq!(send("/v1/responses", crate::support::gateway::responses_body("resp-x", false)).await.0, 500);
    // Refused before any endpoint: no endpoint serves the model.
    assert_eq!(send("/v1/messages", crate::support::gateway::claude_body("nobody-serves-this", false)).await.0, 404);

    let (code, out, err) = server.cli(&["health", "--json"]);
    assert_eq!(code, 0, "{err}");
    let health = json(&out);
    let of = |name: &str| health.as_array().unwrap().iter().find(|h| h["name"] == name).unwrap().clone();
    assert_eq!(of("good")["badge"], "healthy");
    assert_eq!(of("slow")["badge"], "degraded");
    let slow_fails = of("slow")["consecutive_failures"].as_u64().unwrap();
    assert!(slow_fails >= 1);
    assert_eq!((of("down")["badge"].clone(), of("down")["probe_due"].clone()), (json!("open"), json!(true)));
    assert_eq!((of("later")["badge"].clone(), of("later")["probe_due"].clone()), (json!("open"), json!(false)));

    let (code, out, err) = server.cli(&["health"]);
    assert_eq!(code, 0, "{err}");
    let line =
        |name: &str| out.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name}: {out}")).to_string();
    assert!(out.lines().next().unwrap().contains("HEALTH"), "{out}");
    assert!(line("good").contains("healthy"), "{out}");
    assert!(line("slow").contains(&format!("degraded ({slow_fails} failure")), "{out}");
    let down = line("down");
    assert!(down.contains("open (broken), cooled down: the next request probes it") && down.contains("over"), "{out}");
    let later = line("later");
    assert!(later.contains("open (broken)") && !later.contains("cooled down") && !later.contains(" over "), "{out}");

    // stats: wait until the writer has the five requests, then the table.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (_, status) = api(reqwest::Method::GET, "/api/records/status", Value::Null).await;
        if json(&status)["written"].as_u64().unwrap_or(0) >= 5 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "records not written: {status}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (code, out, err) = server.cli(&["stats", "--by", "endpoint"]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("(all)"), "{out}");
    let row = |first: &str| {
        out.lines()
            .find(|l| l.starts_with(first))
            .unwrap_or_else(|| panic!("no {first} row: {out}"))
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let unrouted = row("(no endpoint reached)");
    assert_eq!(unrouted[3], "1", "{out}");
    let total = row("TOTAL");
    assert_eq!(total[1], "5", "a true total: {out}");
}

/// `logs` prints what its help says (oldest first), names its two times apart, and `-f` prints
/// one header and keeps live lines under it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_help_and_follow_agree_with_what_they_print() {
    use std::io::{BufRead, BufReader};
    let up = MockUpstream::start().await;
    up.set_default(Reply::anthropic_message("ok"));
    let server = Server::start(None, &[]);
    let (code, help, _) = server.cli(&["logs", "--help"]);
    assert_eq!(code, 0);
    assert!(help.contains("oldest first") && !help.contains("newest first"), "{help}");

    let follow = std::process::Command::new(crate::support::binary::BIN)
        .args(["logs", "-f", "--server", server.url.as_str()])
        .env_remove("CCMESH_ADMIN_TOKEN")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut follow = Kill(follow);
    let mut lines = BufReader::new(follow.0.stdout.take().unwrap()).lines();
    let header = lines.next().unwrap().unwrap();
    assert!(header.starts_with("STARTED") && header.contains("TOOK") && !header.contains("TIME"), "{header}");

    let url = up.url();
    let add = ["endpoint", "add", "a", "--base-url", url.as_str(), "--format", "anthropic", "--api-key", KEY_A];
    assert_eq!(server.cli(&add).0, 0);
    let http = crate::support::gateway::http_client();
    for _ in 0..2 {
        let r = http
            .post(format!("{}/v1/messages", server.url))
            .json(&crate::support::gateway::claude_body("claude-x", false))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    // The header was printed once the event stream was open: both requests arrive live.
    let reading = tokio::task::spawn_blocking(move || lines.take(2).map(|l| l.unwrap()).collect::<Vec<String>>());
    let live =
        tokio::time::timeout(std::time::Duration::from_secs(20), reading).await.expect("two live lines").unwrap();
    let column = |s: &str, what: &str| s.find(what).map(|at| s[..at].chars().count());
    for line in &live {
        assert!(!line.starts_with("STARTED"), "one header only: {live:?}");
        assert_eq!(column(line, " a "), column(&header, " ENDPOINT"), "{header}\n{line}");
    }
    assert!(live.iter().all(|l| l.contains("claude") && l.contains("200")), "{live:?}");
}

/// Text logs written to a file or a pipe carry no colour codes.
#[test]
fn text_logs_off_a_terminal_have_no_colour_codes() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(crate::support::binary::BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--log-format", "text", "--data-dir"])
        .arg(dir.path())
        .env_remove("CCMESH_ADMIN_TOKEN")
        .env_remove("CCMESH_CONFIG")
        .env_remove("NO_COLOR")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut seen = Vec::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines().map_while(Result::ok) {
        let ready = line.contains("ccmesh is ready");
        seen.push(line);
        if ready {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let text = seen.join("\n");
    assert!(text.contains("ccmesh is ready"), "{text}");
    assert!(!text.contains('\u{1b}'), "escape codes in a piped log: {text:?}");
}

/// The README's `glm` had no model list, so it received a `gpt-4o` request: `endpoint add` and
/// `endpoint list` say when an endpoint serves every model, and how to restrict it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_that_serves_every_model_is_pointed_out() {
    let server = Server::start(None, &[]);
    let base = ["--format", "anthropic", "--base-url", "https://open.bigmodel.cn/api/anthropic", "--api-key", KEY_A];
    let add = |name: &str, extra: &[&str]| {
        let args: Vec<&str> =
            ["endpoint", "add", name].iter().chain(base.iter()).chain(extra.iter()).copied().collect();
        server.cli(&args)
    };
    let (code, _, err) = add("glm", &["--map", "claude-sonnet-4-5=glm-4.6"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("warning: endpoint 'glm' serves every model"), "{err}");
    assert!(err.contains("only claude-sonnet-4-5 mapped"), "{err}");
    assert!(err.contains("`ccmesh endpoint edit glm --model 'PATTERN'`") && err.contains("--map '*=MODEL'"), "{err}");
    // Deliberately everything (a `*` map key), or a list: no warning.
    let (_, _, err) = add("deepseek", &["--map", "*=deepseek-chat"]);
    assert!(!err.contains("warning"), "{err}");
    let (_, _, err) = add("listed", &["--model", "glm-*"]);
    assert!(!err.contains("warning"), "{err}");

    let (code, out, _) = server.cli(&["endpoint", "list"]);
    assert_eq!(code, 0);
    let glm = out.lines().find(|l| l.starts_with("glm")).unwrap();
    assert!(glm.contains("* (every model)"), "{out}");
    assert_eq!(out.matches("warning: ").count(), 1, "{out}");
    assert!(out.contains("warning: endpoint 'glm' serves every model"), "{out}");
    let (_, out, _) = server.cli(&["endpoint", "list", "--json"]);
    let v = json(&out);
    assert_eq!(v[0]["serves_every_model"], true);
    assert_eq!(v[1]["serves_every_model"], false);

    let (code, _, err) = server.cli(&["endpoint", "edit", "glm", "--model", "glm-*"]);
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = server.cli(&["endpoint", "list"]);
    assert!(!out.contains("warning"), "{out}");
}
