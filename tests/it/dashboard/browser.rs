//! The dashboard in a real headless Chromium (Debian's `/usr/bin/chromium`, driven by npm
//! `playwright-core` from `tests/browser/*.mjs`) against a real gateway and mock upstreams:
//!
//! - `flow.mjs`: add an endpoint through the form (a validation error shown at its field first),
//!   toggle it, drag endpoints into the fast queue and reorder it by mouse and keyboard (checked
//!   through `GET /api/endpoints`), change settings (one refused at its field, then applied; an
//!   edit kept through another client's save), send traffic and watch the live feed and a health
//!   badge go degraded → unhealthy → healthy, open a decision trail, filter the requests, draw the
//!   statistics.
//! - `login.mjs`: with an admin token — the login page, the session cookie (HttpOnly, not the
//!   token), live events through the cookie, a CSRF-protected write from the page, logout.
//! - `keys.mjs`: the Keys page adds a key (a refusal at its field first), shows its secret once,
//!   counts its requests live, edits, disables, rotates and deletes it.
//! - `clients.mjs`: the Clients page connects and disconnects Claude Code in a temporary home
//!   (the file is byte for byte the original afterwards), and the add form fills an endpoint
//!   from a preset.
//! - `overview.mjs`: the overview's feed opens with the last recorded requests and appends live
//!   ones without duplicates; "current endpoint" names where each protocol's next request starts
//!   before any failover (`next` of `GET /api/current`).
//! - `perf.mjs`: page load and live-update cost of the overview with 50 endpoints and ~10
//!   requests/s (numbers reported, not asserted).
//!
//! Every script fails on any request to a host but the gateway (Playwright request interception)
//! and on any script error in the page. `screenshots` (ignored; `scripts/screenshots`) renders
//! every page into `docs/screenshots/`.
//!
//! `tests/browser/node_modules` is installed on first use with `npm ci` from the committed lock
//! file, the same way `support/node.rs` installs `tests/js` (a stamp inside `node_modules`; a file
//! lock across test processes). A missing Chromium, Node or npm fails the test with what to
//! install; these tests are never skipped silently.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::gateway::{Options, TestGateway, claude_body};
use crate::support::mock::{MockUpstream, Reply};

pub const CHROMIUM: &str = "/usr/bin/chromium";
const STAMP: &str = ".ccmesh-package-lock.stamp";
const HOW_TO_INSTALL: &str = "the dashboard browser tests need Debian's chromium (`apt-get install chromium`; \
     .ci/run installs it), Node.js >= 20 and npm on PATH, and npm must reach its registry to install \
     tests/browser/package-lock.json";
/// Ceiling for one script (it has its own watchdog too).
const SCRIPT_TIMEOUT_SECS: u64 = 180;

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("browser")
}

/// `tests/browser/node_modules`, installed and current; panics (failing the test) otherwise.
#[allow(clippy::panic)]
fn node_modules() -> PathBuf {
    static MODULES: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match MODULES.get_or_init(install_if_needed) {
        Ok(p) => p.clone(),
        Err(message) => panic!("{message}"),
    }
}

fn install_if_needed() -> Result<PathBuf, String> {
    if !Path::new(CHROMIUM).exists() {
        return Err(format!("{CHROMIUM} is missing; {HOW_TO_INSTALL}"));
    }
    let dir = browser_dir();
    let lock = std::fs::read_to_string(dir.join("package-lock.json"))
        .map_err(|e| format!("cannot read the lock file: {e}"))?;
    let modules = dir.join("node_modules");
    let current = |m: &Path| std::fs::read_to_string(m.join(STAMP)).is_ok_and(|s| s == lock);
    if current(&modules) {
        return Ok(modules);
    }
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("target");
    std::fs::create_dir_all(&target).map_err(|e| format!("cannot create {}: {e}", target.display()))?;
    let lock_file =
        File::create(target.join("tests-browser-npm.lock")).map_err(|e| format!("cannot create the npm lock: {e}"))?;
    lock_file.lock().map_err(|e| format!("cannot take the npm lock: {e}"))?;
    if current(&modules) {
        return Ok(modules);
    }
    let started = Instant::now();
    eprintln!("dashboard: npm ci in {} (first use or changed package-lock.json)", dir.display());
    let out = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund"])
        .current_dir(&dir)
        .env("CI", "true")
        .output()
        .map_err(|e| format!("cannot run npm ({e}); {HOW_TO_INSTALL}"))?;
    if !out.status.success() {
        return Err(format!(
            "npm ci in {} failed ({}); {HOW_TO_INSTALL}\n{}\n{}",
            dir.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    std::fs::write(modules.join(STAMP), &lock).map_err(|e| format!("cannot write the stamp: {e}"))?;
    eprintln!("dashboard: {} ready after {:.1} s", modules.display(), started.elapsed().as_secs_f64());
    drop(lock_file);
    Ok(modules)
}

/// Run `tests/browser/<script> <gateway>` with `env`; the script's output, whatever it says.
async fn run(script: &str, gateway: &str, env: Vec<(String, String)>) -> Output {
    match tokio::task::spawn_blocking(node_modules).await {
        Ok(_) => {}
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("{e}"),
    }
    let dir = browser_dir();
    let mut cmd = Command::new("node");
    cmd.arg(dir.join(script)).arg(gateway).current_dir(&dir).stdin(Stdio::null());
    cmd.env("CHROMIUM", CHROMIUM).env("SCRIPT_TIMEOUT_SECS", SCRIPT_TIMEOUT_SECS.to_string());
    for (k, v) in env {
        cmd.env(k, v);
    }
    // The gateway and the mocks run on this test's runtime: wait for the process off it.
    match tokio::task::spawn_blocking(move || cmd.output()).await.unwrap() {
        Ok(out) => out,
        Err(e) => panic!("cannot run node {script}: {e}; {HOW_TO_INSTALL}"),
    }
}

/// Fail the test with the script's whole output unless it succeeded; return its `RESULT` line.
fn check(script: &str, out: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("--- {script} stdout\n{stdout}--- {script} stderr\n{stderr}");
    assert!(out.status.success(), "{script} failed ({})", out.status);
    stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("RESULT "))
        .map(|l| serde_json::from_str(l).unwrap())
        .unwrap_or(Value::Null)
}

async fn endpoint(g: &TestGateway, name: &str) -> Value {
    let (status, v) = g.api(Method::GET, &format!("/api/endpoints/{name}"), None).await;
    assert_eq!(status, 200, "{name}: {v}");
    v
}

#[tokio::test]
async fn dashboard_flow_in_chromium() {
    let started = Instant::now();
    let g = TestGateway::start().await;
    let anthropic = MockUpstream::start().await;
    anthropic.set_default(Reply::anthropic_message("Hello from the mock."));
    let flaky = MockUpstream::start().await;
    // Two requests' worth of failures (two sends each, the only candidate), then success.
    flaky.push_n(4, Reply::openai_error(500, "server_error", "the mock is down"));
    flaky.set_default(Reply::openai_chat("back again"));
    let a = anthropic.url();
    g.add("alpha", "anthropic", &a, json!({"models": ["claude-*"], "test_model": "claude-sonnet-4-5"})).await;
    g.add("beta", "anthropic", &a, json!({"models": ["claude-*"]})).await;
    g.add("flaky", "openai", &flaky.url(), json!({"models": ["flaky-*"]})).await;

    let out = run("flow.mjs", &g.url, vec![("MOCK_ANTHROPIC".into(), a.clone())]).await;
    let result = check("flow.mjs", &out);

    // What the page did, as the API sees it.
    let gamma = endpoint(&g, "gamma").await;
    assert_eq!(gamma["base_url"], a);
    assert_eq!(gamma["models"], json!(["claude-*"]));
    assert_eq!(gamma["api_key"], "sk-…7890", "the key was saved, and is shown masked");
    assert_eq!(gamma["enabled"], true);
    let names: Vec<String> = g
        .api(Method::GET, "/api/endpoints", None)
        .await
        .1
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(result["order"], json!(names), "the global order the page showed last");
    let (_, settings) = g.api(Method::GET, "/api/settings", None).await;
    assert_eq!(settings["breaker"]["openai"]["timeout_secs"], 2);
    assert_eq!(settings["breaker"]["openai"]["success_threshold"], 1);
    assert_eq!(settings["breaker"]["claude"]["failure_threshold"], 8, "the refused value was not saved");
    assert_eq!(g.health("flaky").await["status"], "healthy");
    assert!(flaky.request_count() >= 5);
    eprintln!("dashboard flow in Chromium: {:.1} s", started.elapsed().as_secs_f64());
}

/// `overview.mjs`: the overview opens with the recorded requests and names each protocol's next
/// endpoint before any failover has happened.
#[tokio::test]
async fn dashboard_overview_history_in_chromium() {
    let g = TestGateway::start().await;
    let anthropic = MockUpstream::start().await;
    anthropic.set_default(Reply::anthropic_message("Hello from the mock."));
    g.add("alpha", "anthropic", &anthropic.url(), json!({"models": ["claude-*"]})).await;
    g.add("beta", "anthropic", &anthropic.url(), json!({"models": ["claude-*"]})).await;
    g.add("wide", "anthropic", &anthropic.url(), json!({"model_map": {"claude-sonnet-4-5": "glm-4.6"}})).await;
    for _ in 0..3 {
        assert_eq!(g.post("/v1/messages", &claude_body("claude-sonnet-4-5", false)).await.status(), 200);
    }
    let out = run("overview.mjs", &g.url, Vec::new()).await;
    let result = check("overview.mjs", &out);
    assert_eq!(result["rows"], 4);
    assert_eq!(g.api(Method::GET, "/api/current", None).await.1["responses"], "beta");
}

#[tokio::test]
async fn dashboard_login_in_chromium() {
    let token = "browser-test-admin-token-4242";
    let g = TestGateway::start_with(Options { admin_token: Some(token.into()), ..Options::default() }).await;
    let anthropic = MockUpstream::start().await;
    anthropic.set_default(Reply::anthropic_message("hi"));
    g.add("alpha", "anthropic", &anthropic.url(), json!({})).await;
    let out = run("login.mjs", &g.url, vec![("ADMIN_TOKEN".into(), token.into())]).await;
    check("login.mjs", &out);
    // The endpoint the logged-in page added (with its CSRF token).
    assert_eq!(endpoint(&g, "from-the-page").await["format"], "openai");
}

#[tokio::test]
async fn dashboard_performance_in_chromium() {
    let g = TestGateway::start().await;
    let upstream = MockUpstream::start().await;
    upstream.set_default(Reply::anthropic_message("fast answer").after(Duration::from_millis(5)));
    let url = upstream.url();
    for i in 0..50 {
        g.add(&format!("endpoint-{i:02}"), "anthropic", &url, json!({"models": ["claude-*"]})).await;
    }
    // Some history for the cards and a few non-green badges.
    for _ in 0..20 {
        assert_eq!(g.post("/v1/messages", &claude_body("claude-sonnet-4-5", false)).await.status(), 200);
    }
    let out = run("perf.mjs", &g.url, vec![("RATE".into(), "10".into()), ("SECONDS".into(), "15".into())]).await;
    let r = check("perf.mjs", &out);
    eprintln!(
        "dashboard performance (50 endpoints, {} requests at ~{}/s while measuring):\n{}",
        r["live"]["requests_sent"],
        r["live"]["rate"],
        serde_json::to_string_pretty(&r).unwrap()
    );
    assert_eq!(r["load"]["health_items"], 50);
    assert!(r["live"]["feed_rows"].as_u64().unwrap() <= 100, "the feed is capped");
}

/// `scripts/screenshots`: every page, light and dark, laptop and phone width, into
/// `docs/screenshots/` (or `$SCREENSHOT_DIR`), from a gateway with a realistic history.
#[tokio::test]
#[ignore = "regenerates docs/screenshots; run scripts/screenshots"]
async fn screenshots() {
    let g = TestGateway::start().await;
    let ok_a = MockUpstream::start().await;
    ok_a.set_default(Reply::anthropic_message("Sure — here is the summary.").after(Duration::from_millis(40)));
    let ok_o = MockUpstream::start().await;
    ok_o.set_default(Reply::openai_chat("Done.").after(Duration::from_millis(25)));
    let slow = MockUpstream::start().await;
    slow.set_default(Reply::anthropic_message("Eventually.").after(Duration::from_millis(300)));
    let broken = MockUpstream::start().await;
    broken.set_default(Reply::anthropic_error(503, "overloaded_error", "Overloaded"));
    let limited = MockUpstream::start().await;
    limited.set_default(
        Reply::openai_error(429, "rate_limit_exceeded", "Rate limit reached").with_header("retry-after", "240"),
    );
    let flaky = MockUpstream::start().await;
    flaky.set_default(Reply::anthropic_message("ok"));

    // The fast queue: kimi (broken) first, so the first request fails over.
    g.add("kimi", "anthropic", &broken.url(), json!({"models": ["claude-*", "kimi-*"], "fast": true})).await;
    g.add(
        "anthropic",
        "anthropic",
        &ok_a.url(),
        json!({"models": ["claude-*"], "test_model": "claude-sonnet-4-5", "fast": true}),
    )
    .await;
    g.add("glm", "anthropic", &slow.url(), json!({"model_map": {"claude-sonnet-4-5": "glm-4.6"}, "fast": true})).await;
    g.add("relay", "anthropic", &flaky.url(), json!({"models": ["claude-*"], "price_multiplier": 1.5})).await;
    g.add("openai", "openai", &ok_o.url(), json!({"models": ["gpt-*", "o*"]})).await;
    g.add(
        "deepseek",
        "openai",
        &limited.url(),
        json!({"models": ["deepseek-*"], "model_map": {"gpt-*": "deepseek-chat"}}),
    )
    .await;
    g.add("codex-relay", "responses", "http://127.0.0.1:9", json!({"models": ["gpt-5*"], "enabled": false})).await;
    g.add("backup", "anthropic", "http://127.0.0.1:9", json!({"models": ["claude-*"]})).await;
    g.settings(json!({"breaker": {"claude": {"failure_threshold": 5}}})).await;
    g.api(Method::PUT, "/api/prices/glm-4.6", Some(json!({"input": 0.6, "output": 2.2, "cache_read": 0.11}))).await;

    // History: a failover (kimi fails, anthropic answers and becomes current), successes,
    // kimi tripped open (broken), deepseek open (rate-limited), relay failing but not tripped
    // (degraded), conversions through glm.
    let r = g.post("/v1/messages", &claude_body("claude-sonnet-4-5", false)).await;
    let detail_id = r.headers().get("x-ccmesh-request-id").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    for i in 0..40 {
        let model = if i % 3 == 0 { "claude-haiku-4-5" } else { "claude-sonnet-4-5" };
        g.post("/v1/messages", &claude_body(model, false)).await;
    }
    for _ in 0..3 {
        g.post_with("/v1/messages", &claude_body("claude-sonnet-4-5", false), &[("x-ccmesh-endpoint", "kimi")]).await;
    }
    for i in 0..8 {
        let model = if i % 2 == 0 { "gpt-4o-mini" } else { "gpt-4.1" };
        let body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
        g.post_with("/v1/chat/completions", &body, &[("x-ccmesh-endpoint", "openai")]).await;
    }
    for _ in 0..4 {
        g.post("/v1/chat/completions", &json!({"model": "glm-4.6", "messages": [{"role": "user", "content": "hi"}]}))
            .await;
    }
    for _ in 0..2 {
        let body = json!({"model": "deepseek-chat", "messages": [{"role": "user", "content": "hi"}]});
        g.post_with("/v1/chat/completions", &body, &[("x-ccmesh-endpoint", "deepseek")]).await;
    }
    flaky.push_n(3, Reply::anthropic_error(500, "api_error", "Internal server error"));
    g.post_with("/v1/messages", &claude_body("claude-sonnet-4-5", false), &[("x-ccmesh-endpoint", "relay")]).await;

    // The Keys page: made after the history (once a key exists, every request needs one), with
    // some of alice's budget spent.
    let (_, alice) = g
        .api(
            Method::POST,
            "/api/keys",
            Some(json!({"name": "alice", "description": "Claude Code on her laptop", "models": ["claude-*"],
                "limits": {"rpm": 60, "usd_per_day": 5.0, "usd_per_month": 50.0}})),
        )
        .await;
    let (_, ci) = g
        .api(
            Method::POST,
            "/api/keys",
            Some(json!({"name": "ci", "description": "nightly evals", "limits": {"rpm": 600, "concurrency": 4}})),
        )
        .await;
    let ci = ci["secret"].as_str().unwrap_or_default().to_string();
    let alice = alice["secret"].as_str().unwrap_or_default().to_string();
    for _ in 0..12 {
        g.post_with("/v1/messages", &claude_body("claude-sonnet-4-5", false), &[("x-api-key", alice.as_str())]).await;
    }
    tokio::time::sleep(Duration::from_millis(600)).await; // the record writer batches

    // The Clients page: a home where Codex is connected and Claude Code is installed.
    let home = crate::clients::Home::new();
    std::fs::create_dir_all(home.home.join(".claude")).unwrap();
    let env = ccmesh::clients::Environment::with_home(&home.home);
    let target = ccmesh::clients::Target { server: g.url.clone(), key: ccmesh::clients::PLACEHOLDER_KEY.into() };
    ccmesh::clients::connect(
        ccmesh::clients::ClientKind::Codex,
        &env,
        &home.data,
        &target,
        std::time::SystemTime::now(),
    )
    .unwrap();
    g.gw.local
        .set(ccmesh::clients::host::LocalHost {
            listen: g.url.trim_start_matches("http://").parse().unwrap(),
            data_dir: home.data.clone(),
            env: Some(env),
            service_managed: false,
        })
        .unwrap();

    let dir = std::env::var("SCREENSHOT_DIR")
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/screenshots").display().to_string());
    // The login page needs a gateway with a token (its requests are to that gateway only).
    let with_token =
        TestGateway::start_with(Options { admin_token: Some("demo-token".into()), ..Options::default() }).await;
    let out = run(
        "screenshots.mjs",
        &g.url,
        vec![
            ("SCREENSHOT_DIR".into(), dir),
            ("DETAIL_ID".into(), detail_id),
            ("LOGIN_URL".into(), with_token.url.clone()),
            ("CLIENT_KEY".into(), ci),
        ],
    )
    .await;
    check("screenshots.mjs", &out);
}

#[tokio::test]
async fn dashboard_clients_page_in_chromium() {
    let g = TestGateway::start().await;
    let home = crate::clients::Home::new();
    let original = "{\n  \"env\": {\"ANTHROPIC_API_KEY\": \"sk-ant-the-users-own-0001\"},\n  \"hooks\": {}\n}\n";
    let settings = home.write(".claude/settings.json", original);
    g.gw.local
        .set(ccmesh::clients::host::LocalHost {
            listen: g.url.trim_start_matches("http://").parse().unwrap(),
            data_dir: home.data.clone(),
            env: Some(ccmesh::clients::Environment::with_home(&home.home)),
            service_managed: false,
        })
        .unwrap();
    let out = run("clients.mjs", &g.url, Vec::new()).await;
    check("clients.mjs", &out);
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), original, "connect then disconnect from the page");
    let e = endpoint(&g, "ds-from-preset").await;
    assert_eq!(e["base_url"], "https://api.deepseek.com/anthropic");
    assert_eq!(e["model_map"]["*"], "deepseek-v4-pro");
}

#[tokio::test]
async fn dashboard_keys_page_in_chromium() {
    let upstream = MockUpstream::start().await;
    upstream.set_default(Reply::anthropic_message("ok"));
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &upstream.url(), json!({"models": ["claude-*"]})).await;
    let out = run("keys.mjs", &g.url, Vec::new()).await;
    check("keys.mjs", &out);
}
