//! `ccmesh connect|disconnect|clients|service install|presets`, `endpoint add --preset`, and
//! `/api/clients`: the real binary and the admin API against a real gateway, temporary homes.

use std::path::{Path, PathBuf};
use std::process::Command;

use ccmesh::clients::Environment;
use ccmesh::clients::host::LocalHost;
use reqwest::Method;
use serde_json::{Value, json};

use crate::support::gateway::TestGateway;

const BIN: &str = env!("CARGO_BIN_EXE_ccmesh");
const KEY: &str = "ccm-given-client-key-5150";

/// A temporary home and data directory.
pub struct Home {
    _dir: tempfile::TempDir,
    pub home: PathBuf,
    pub data: PathBuf,
}

impl Home {
    pub fn new() -> Home {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let data = dir.path().join("data");
        std::fs::create_dir_all(&home).unwrap();
        Home { home, data, _dir: dir }
    }

    /// The `ccmesh` binary with this home (and no variables from the test's own environment
    /// that would point clients or ccmesh elsewhere).
    pub fn ccmesh(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new(BIN)
            .args(args)
            .env("HOME", &self.home)
            .env("CCMESH_DATA_DIR", &self.data)
            .env_remove("CLAUDE_CONFIG_DIR")
            .env_remove("CODEX_HOME")
            .env_remove("CCMESH_ADMIN_TOKEN")
            .env_remove("CCMESH_SERVER")
            .env_remove("INVOCATION_ID")
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    }

    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.home.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.home.join(rel)).unwrap()
    }
}

fn local(g: &TestGateway, home: &Home, listen: Option<&str>) {
    let listen = listen.map(str::to_string).unwrap_or_else(|| g.url.trim_start_matches("http://").to_string());
    g.gw.local
        .set(LocalHost {
            listen: listen.parse().unwrap(),
            data_dir: home.data.clone(),
            env: Some(Environment::with_home(&home.home)),
            service_managed: false,
        })
        .unwrap();
}

fn settings_json(home: &Home) -> Value {
    serde_json::from_str(&home.read(".claude/settings.json")).unwrap()
}

const SETTINGS: &str =
    "{\n  \"model\": \"opus\",\n  \"env\": {\"ANTHROPIC_API_KEY\": \"sk-ant-users-own-key-1\"},\n  \"hooks\": {}\n}\n";

#[tokio::test]
async fn the_api_connects_and_disconnects_the_gateway_users_clients() {
    let g = TestGateway::start().await;
    let home = Home::new();
    local(&g, &home, None);
    home.write(".claude/settings.json", SETTINGS);
    std::fs::create_dir_all(home.home.join(".codex")).unwrap();

    let (status, list) = g.api(Method::GET, "/api/clients", None).await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["can_edit"], true);
    assert_eq!(list["server"], g.url);
    let state = |v: &Value, c: &str| {
        v["clients"].as_array().unwrap().iter().find(|s| s["client"] == c).unwrap()["status"].clone()
    };
    assert_eq!(state(&list, "claude-code"), "not_configured");
    assert_eq!(state(&list, "codex"), "not_configured");
    assert_eq!(state(&list, "gemini-cli"), "not_installed");

    let (status, done) = g.api(Method::POST, "/api/clients/claude-code/connect", Some(json!({"key": KEY}))).await;
    assert_eq!(status, 200, "{done}");
    assert!(!done.to_string().contains(KEY), "the answer shows no key: {done}");
    assert!(!done.to_string().contains("sk-ant-users-own-key-1"), "{done}");
    assert_eq!(done["state"]["status"], "connected");
    let s = settings_json(&home);
    assert_eq!(s["env"], json!({"ANTHROPIC_BASE_URL": g.url, "ANTHROPIC_AUTH_TOKEN": KEY}));
    assert_eq!(s["model"], "opus");

    let (status, undone) = g.api(Method::POST, "/api/clients/claude-code/disconnect", None).await;
    assert_eq!(status, 200, "{undone}");
    assert_eq!(home.read(".claude/settings.json"), SETTINGS);
    let (status, again) = g.api(Method::POST, "/api/clients/claude-code/disconnect", None).await;
    assert_eq!(status, 400, "{again}");
    assert!(again["error"]["message"].as_str().unwrap().contains("nothing to undo"), "{again}");

    // Without a key the placeholder goes in.
    let (status, _) = g.api(Method::POST, "/api/clients/codex/connect", None).await;
    assert_eq!(status, 200);
    assert!(home.read(".codex/config.toml").contains("experimental_bearer_token = \"ccmesh-no-client-key\""));
    let (status, e) = g.api(Method::POST, "/api/clients/cursor/connect", None).await;
    assert_eq!(status, 404, "{e}");
}

#[tokio::test]
async fn a_gateway_listening_beyond_loopback_edits_nothing() {
    let g = TestGateway::start().await;
    let home = Home::new();
    local(&g, &home, Some("0.0.0.0:3999"));
    home.write(".claude/settings.json", SETTINGS);
    let (status, list) = g.api(Method::GET, "/api/clients", None).await;
    assert_eq!((status, &list["can_edit"]), (200, &json!(false)));
    let (status, e) = g.api(Method::POST, "/api/clients/claude-code/connect", None).await;
    assert_eq!(status, 403, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("`ccmesh connect CLIENT`"), "{e}");
    assert_eq!(home.read(".claude/settings.json"), SETTINGS);
}

#[tokio::test]
async fn the_cli_connects_only_to_a_gateway_that_answers_and_never_prints_the_key() {
    let g = TestGateway::start().await;
    let home = Home::new();
    home.write(".claude/settings.json", SETTINGS);

    // A dead port: refused, nothing written, and the message says how to go on.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let (ok, out) = home.ccmesh(&["connect", "claude-code", "--server", &dead_url, "--key", KEY]);
    assert!(!ok, "{out}");
    assert!(out.contains("Nothing was changed") && out.contains("ccmesh serve"), "{out}");
    assert_eq!(home.read(".claude/settings.json"), SETTINGS);

    let (ok, out) = home.ccmesh(&["connect", "claude-code", "--server", &g.url, "--key", KEY]);
    assert!(ok, "{out}");
    assert!(!out.contains(KEY) && !out.contains("sk-ant-users-own-key-1"), "{out}");
    assert!(out.contains("does not run as a service") && out.contains("ccmesh service install"), "{out}");
    assert!(out.contains("no enabled endpoint") && out.contains("--preset"), "{out}");
    assert!(out.contains("ccmesh disconnect claude-code"), "{out}");
    assert_eq!(settings_json(&home)["env"]["ANTHROPIC_AUTH_TOKEN"], KEY);

    let (ok, table) = home.ccmesh(&["clients", "--server", &g.url]);
    assert!(ok, "{table}");
    let line = table.lines().find(|l| l.starts_with("claude-code")).unwrap();
    assert!(line.contains("connected to this gateway"), "{table}");
    assert!(table.lines().any(|l| l.starts_with("gemini-cli") && l.contains("not installed")), "{table}");

    let (ok, out) = home.ccmesh(&["disconnect", "claude-code"]);
    assert!(ok, "{out}");
    assert!(out.contains("restored exactly"), "{out}");
    assert_eq!(home.read(".claude/settings.json"), SETTINGS);
    let (ok, out) = home.ccmesh(&["disconnect", "claude-code"]);
    assert!(!ok && out.contains("was not connected by `ccmesh connect`"), "{out}");
    let (ok, out) = home.ccmesh(&["connect", "cursor", "--server", &g.url]);
    assert!(!ok && out.contains("choose claude-code, codex or gemini-cli"), "{out}");
}

/// `systemd-analyze verify` is the linter for units; CI has it (systemd is on the machine even
/// where it is not PID 1).
fn systemd_verify(unit: &Path) {
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(unit)
        .output()
        .unwrap_or_else(|e| panic!("cannot run systemd-analyze ({e}); apt-get install systemd"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "systemd-analyze verify: {text}");
    assert!(!text.contains(&unit.display().to_string()), "warnings about the unit: {text}");
}

#[test]
fn service_install_writes_a_unit_that_lints_and_a_plist_that_parses() {
    let home = Home::new();
    let (ok, out) = home.ccmesh(&["service", "install", "--listen", "127.0.0.1:4001"]);
    assert!(ok, "{out}");
    assert!(out.contains("systemctl --user daemon-reload && systemctl --user enable --now ccmesh"), "{out}");
    let unit = home.home.join(".config/systemd/user/ccmesh.service");
    let text = std::fs::read_to_string(&unit).unwrap();
    assert!(
        text.contains(&format!("ExecStart={BIN} serve --listen 127.0.0.1:4001 --data-dir {}", home.data.display())),
        "{text}"
    );
    systemd_verify(&unit);
    let (ok, out) = home.ccmesh(&["service", "install"]);
    assert!(!ok && out.contains("--force"), "{out}");

    // The launchd agent, generated here and parsed by Python's plistlib (there is no launchd to
    // load it into on Linux).
    let spec = ccmesh::clients::service::ServiceSpec {
        binary: BIN.into(),
        listen: "127.0.0.1:3999".into(),
        data_dir: home.data.join("with space & <chars>"),
    };
    let plist = home.home.join("agent.plist");
    std::fs::write(&plist, ccmesh::clients::service::launchd_plist(&spec)).unwrap();
    let out = Command::new("python3")
        .args(["-c", "import plistlib, sys, json; print(json.dumps(plistlib.load(open(sys.argv[1], 'rb'))))"])
        .arg(&plist)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let parsed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(parsed["Label"], "dev.ccmesh.gateway");
    assert_eq!(parsed["ProgramArguments"][5], home.data.join("with space & <chars>").display().to_string());
    assert_eq!(parsed["RunAtLoad"], true);
}

#[tokio::test]
async fn endpoint_add_from_a_preset_and_the_preset_list() {
    let g = TestGateway::start().await;
    let home = Home::new();
    let (ok, out) = home.ccmesh(&[
        "endpoint",
        "add",
        "ds",
        "--preset",
        "deepseek",
        "--api-key",
        "sk-deepseek-0000000001",
        "--server",
        &g.url,
    ]);
    assert!(ok, "{out}");
    assert!(!out.contains("sk-deepseek-0000000001"), "{out}");
    let (_, e) = g.api(Method::GET, "/api/endpoints/ds", None).await;
    assert_eq!(e["base_url"], "https://api.deepseek.com/anthropic");
    assert_eq!(e["format"], "anthropic");
    assert_eq!(e["model_map"]["claude-*haiku*"], "deepseek-flash");
    // An explicit flag beats the preset.
    let (ok, out) = home.ccmesh(&[
        "endpoint",
        "add",
        "kimi-intl",
        "--preset",
        "kimi",
        "--base-url",
        "https://api.moonshot.ai/anthropic",
        "--api-key",
        "sk-kimi-000000000002",
        "--server",
        &g.url,
    ]);
    assert!(ok, "{out}");
    let (_, e) = g.api(Method::GET, "/api/endpoints/kimi-intl", None).await;
    assert_eq!(
        (e["base_url"].as_str(), e["model_map"]["*"].as_str()),
        (Some("https://api.moonshot.ai/anthropic"), Some("kimi-k2.6"))
    );
    let (ok, out) = home.ccmesh(&["endpoint", "add", "x", "--preset", "nope", "--server", &g.url]);
    assert!(!ok && out.contains("ccmesh presets"), "{out}");
    // Google's native API is an endpoint format now.
    let (ok, out) = home.ccmesh(&[
        "endpoint",
        "add",
        "g",
        "--preset",
        "gemini",
        "--api-key",
        "AIzaSy-test-key-0000000",
        "--server",
        &g.url,
    ]);
    assert!(ok, "{out}");
    let (_, e) = g.api(Method::GET, "/api/endpoints/g", None).await;
    assert_eq!(
        (e["format"].as_str(), e["base_url"].as_str(), e["test_model"].as_str()),
        (Some("gemini"), Some("https://generativelanguage.googleapis.com"), Some("gemini-2.5-flash"))
    );
    let (ok, list) = home.ccmesh(&["presets"]);
    assert!(ok, "{list}");
    for id in [
        "anthropic",
        "openai",
        "deepseek",
        "glm",
        "kimi",
        "qwen",
        "minimax",
        "openrouter",
        "siliconflow",
        "ark",
        "gemini-openai",
        "gemini",
    ] {
        assert!(list.lines().any(|l| l.split_whitespace().next() == Some(id)), "{id} in {list}");
    }
    let (status, presets) = g.api(Method::GET, "/api/presets", None).await;
    assert_eq!(status, 200);
    assert!(presets.as_array().unwrap().iter().all(|p| p["source"].as_str().unwrap().starts_with("https://")));
}
