//! Connect and disconnect against real files in temporary homes.

use super::*;

const KEY: &str = "ccm-test-secret-key-4242";

fn home() -> (tempfile::TempDir, Environment, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let env = Environment::with_home(dir.path().join("home"));
    std::fs::create_dir_all(&env.home).unwrap();
    let data = dir.path().join("data");
    (dir, env, data)
}

fn target() -> Target {
    Target { server: "http://127.0.0.1:3999".into(), key: KEY.into() }
}

fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000)
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

/// A settings file with everything a whole-file rewrite has ever destroyed.
pub const CLAUDE_SETTINGS: &str = r#"{
  "$schema": "https://json.schemastore.org/claude-code-settings.json",
  "model": "opus",
  "env": {
    "ANTHROPIC_API_KEY": "sk-ant-api03-user-own-key",
    "BASH_DEFAULT_TIMEOUT_MS": "600000"
  },
  "permissions": {
    "allow": ["Bash(cargo test:*)", "WebFetch(domain:docs.rs)"],
    "deny": ["Read(./.env)"]
  },
  "hooks": {
    "PostToolUse": [
      {"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "cargo fmt -- \"$CLAUDE_FILE_PATHS\""}]}
    ]
  },
  "enabledPlugins": {"rust-analyzer-lsp@claude-plugins-official": true},
  "extraKnownMarketplaces": {"acme": {"source": {"source": "github", "repo": "acme/plugins"}}},
  "mcpServers": {"docs": {"command": "npx", "args": ["-y", "@acme/docs-mcp"], "env": {"TOKEN": "t"}}},
  "statusLine": {"type": "command", "command": "~/.claude/statusline.sh"}
}
"#;

pub const CODEX_CONFIG: &str = r#"# ~/.codex/config.toml, kept by hand
model = "gpt-5.5"          # default model
approval_policy = "on-request"
model_provider = "openai"

[tui]
notifications = true

# Docs over MCP
[mcp_servers.docs]
command = "npx"
args = ["-y", "@acme/docs-mcp"]
env = { "TOKEN" = "t" }

[profiles.fast]
model = "gpt-5.5-mini"
"#;

fn value(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap()
}

#[test]
fn claude_code_connect_changes_only_the_three_keys_and_disconnect_restores_the_bytes() {
    let (_d, env, data) = home();
    let path = claude_code::settings_path(&env);
    write(&path, CLAUDE_SETTINGS);
    let report = connect(ClientKind::ClaudeCode, &env, &data, &target(), now()).unwrap();
    let after = read(&path);
    let mut expected = value(CLAUDE_SETTINGS);
    expected["env"].as_object_mut().unwrap().remove("ANTHROPIC_API_KEY");
    expected["env"]["ANTHROPIC_BASE_URL"] = "http://127.0.0.1:3999".into();
    expected["env"]["ANTHROPIC_AUTH_TOKEN"] = KEY.into();
    assert_eq!(value(&after), expected);
    // Every other line is the original's, in order.
    let kept: Vec<&str> = CLAUDE_SETTINGS.lines().filter(|l| !l.contains("ANTHROPIC_API_KEY")).collect();
    let now_lines: Vec<&str> = after.lines().filter(|l| !l.contains("ANTHROPIC_")).collect();
    assert_eq!(
        kept.iter().filter(|l| !l.contains("BASH_DEFAULT")).collect::<Vec<_>>(),
        now_lines.iter().filter(|l| !l.contains("BASH_DEFAULT")).collect::<Vec<_>>()
    );
    assert_eq!(report.backups.len(), 1);
    assert_eq!(read(Path::new(&report.backups[0])), CLAUDE_SETTINGS);
    assert_eq!(state(ClientKind::ClaudeCode, &env, Some(&data), "http://localhost:3999/").status, Status::Connected);

    let undone = disconnect(ClientKind::ClaudeCode, &env, &data).unwrap();
    assert_eq!(read(&path), CLAUDE_SETTINGS);
    assert_eq!(undone.restored_exactly.len(), 1);
    assert!(!record_dir(&data, ClientKind::ClaudeCode).join("state.json").exists());
    assert_eq!(state(ClientKind::ClaudeCode, &env, Some(&data), "http://127.0.0.1:3999").status, Status::NotConfigured);
}

#[test]
fn no_report_shows_a_key() {
    let (_d, env, data) = home();
    write(&claude_code::settings_path(&env), CLAUDE_SETTINGS);
    write(&codex::config_path(&env), CODEX_CONFIG);
    write(&gemini_cli::env_path(&env), "GEMINI_API_KEY=AIza-user-own-key\n");
    let mut shown = String::new();
    for c in ClientKind::ALL {
        shown += &serde_json::to_string(&connect(c, &env, &data, &target(), now()).unwrap()).unwrap();
    }
    // Someone changes the token after connect: the "kept" report must not show it either.
    let p = claude_code::settings_path(&env);
    write(&p, &read(&p).replace(KEY, "ccm-someone-elses-key-77"));
    for c in ClientKind::ALL {
        shown += &serde_json::to_string(&disconnect(c, &env, &data).unwrap()).unwrap();
    }
    for secret in [KEY, "sk-ant-api03-user-own-key", "AIza-user-own-key", "ccm-someone-elses-key-77"] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
    assert!(shown.contains("(a key)"));
}

#[test]
fn a_file_changed_after_connect_is_restored_key_by_key() {
    let (_d, env, data) = home();
    let path = claude_code::settings_path(&env);
    write(&path, CLAUDE_SETTINGS);
    connect(ClientKind::ClaudeCode, &env, &data, &target(), now()).unwrap();
    // The user (or Claude Code itself) changes another setting meanwhile.
    let edited = json_edit::set(&read(&path), &["model"], Some("\"sonnet\"")).unwrap();
    write(&path, &edited);
    let report = disconnect(ClientKind::ClaudeCode, &env, &data).unwrap();
    assert!(report.restored_exactly.is_empty());
    let after = read(&path);
    assert_eq!(after, json_edit::set(CLAUDE_SETTINGS, &["model"], Some("\"sonnet\"")).unwrap());
    let actions: Vec<(&str, &str)> = report.changes.iter().map(|c| (c.key.as_str(), c.action)).collect();
    assert_eq!(
        actions,
        [
            ("env.ANTHROPIC_BASE_URL", "removed"),
            ("env.ANTHROPIC_AUTH_TOKEN", "removed"),
            ("env.ANTHROPIC_API_KEY", "restored")
        ]
    );
}

#[test]
fn a_value_someone_else_changed_is_reported_not_overwritten() {
    let (_d, env, data) = home();
    let path = claude_code::settings_path(&env);
    write(&path, CLAUDE_SETTINGS);
    connect(ClientKind::ClaudeCode, &env, &data, &target(), now()).unwrap();
    let edited =
        json_edit::set(&read(&path), &["env", "ANTHROPIC_BASE_URL"], Some("\"https://relay.example.com\"")).unwrap();
    write(&path, &edited);
    let report = disconnect(ClientKind::ClaudeCode, &env, &data).unwrap();
    let kept = report.changes.iter().find(|c| c.action == "kept").unwrap();
    assert_eq!(kept.key, "env.ANTHROPIC_BASE_URL");
    assert_eq!(kept.value.as_deref(), Some("https://relay.example.com"));
    assert!(report.notes.iter().any(|n| n.contains("left as they are")));
    let after = read(&path);
    assert_eq!(
        json_edit::get_string(&after, &["env", "ANTHROPIC_BASE_URL"]).unwrap().as_deref(),
        Some("https://relay.example.com")
    );
    assert_eq!(
        json_edit::get_string(&after, &["env", "ANTHROPIC_API_KEY"]).unwrap().as_deref(),
        Some("sk-ant-api03-user-own-key")
    );
    assert_eq!(json_edit::get(&after, &["env", "ANTHROPIC_AUTH_TOKEN"]).unwrap(), None);
}

#[test]
fn connecting_twice_keeps_the_users_values_from_before_the_first_connect() {
    let (_d, env, data) = home();
    let path = claude_code::settings_path(&env);
    write(&path, CLAUDE_SETTINGS);
    connect(ClientKind::ClaudeCode, &env, &data, &target(), now()).unwrap();
    let other = Target { server: "http://127.0.0.1:4000".into(), key: "ccm-second-key-000000".into() };
    connect(ClientKind::ClaudeCode, &env, &data, &other, now() + std::time::Duration::from_secs(60)).unwrap();
    assert_eq!(
        json_edit::get_string(&read(&path), &["env", "ANTHROPIC_BASE_URL"]).unwrap().as_deref(),
        Some("http://127.0.0.1:4000")
    );
    disconnect(ClientKind::ClaudeCode, &env, &data).unwrap();
    assert_eq!(read(&path), CLAUDE_SETTINGS);

    // Also when the file was edited between the two connects.
    connect(ClientKind::ClaudeCode, &env, &data, &target(), now()).unwrap();
    write(&path, &json_edit::set(&read(&path), &["model"], Some("\"haiku\"")).unwrap());
    connect(ClientKind::ClaudeCode, &env, &data, &other, now() + std::time::Duration::from_secs(120)).unwrap();
    disconnect(ClientKind::ClaudeCode, &env, &data).unwrap();
    assert_eq!(read(&path), json_edit::set(CLAUDE_SETTINGS, &["model"], Some("\"haiku\"")).unwrap());
}

#[test]
fn a_missing_file_is_created_and_removed_again() {
    let (_d, env, data) = home();
    let path = claude_code::settings_path(&env);
    let report = connect(ClientKind::ClaudeCode, &env, &data, &target(), now()).unwrap();
    assert!(report.backups.is_empty());
    let v = value(&read(&path));
    assert_eq!(
        v,
        serde_json::json!({"env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:3999", "ANTHROPIC_AUTH_TOKEN": KEY}})
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600, "it holds a key");
    }
    disconnect(ClientKind::ClaudeCode, &env, &data).unwrap();
    assert!(!path.exists());

    // Created, then edited by the user: the file stays, without ccmesh's keys or the `env` it made.
    connect(ClientKind::ClaudeCode, &env, &data, &target(), now()).unwrap();
    write(&path, &json_edit::set(&read(&path), &["model"], Some("\"opus\"")).unwrap());
    disconnect(ClientKind::ClaudeCode, &env, &data).unwrap();
    assert_eq!(value(&read(&path)), serde_json::json!({"model": "opus"}));
}

#[test]
fn invalid_files_are_refused_untouched_and_say_how_to_go_on() {
    let (_d, env, data) = home();
    let path = claude_code::settings_path(&env);
    write(&path, "{\n  \"model\": \"opus\",\n}}\n");
    let e = connect(ClientKind::ClaudeCode, &env, &data, &target(), now()).unwrap_err().to_string();
    assert!(e.contains("~/.claude/settings.json is not valid JSON (line 3"), "{e}");
    assert!(e.contains("`ccmesh connect claude-code`"), "{e}");
    assert_eq!(read(&path), "{\n  \"model\": \"opus\",\n}}\n");
    assert!(load_record(&data, ClientKind::ClaudeCode).unwrap().is_none());
    let e = disconnect(ClientKind::ClaudeCode, &env, &data).unwrap_err();
    assert!(matches!(e, ClientError::NotConnected(ClientKind::ClaudeCode, _)), "{e}");
}

#[test]
fn claude_config_dir_is_honoured() {
    let (d, mut env, data) = home();
    let custom = d.path().join("work-claude");
    env.vars.insert("CLAUDE_CONFIG_DIR".into(), custom.display().to_string());
    connect(ClientKind::ClaudeCode, &env, &data, &target(), now()).unwrap();
    assert!(custom.join("settings.json").is_file());
    assert!(!env.home.join(".claude").exists());
}

#[test]
fn codex_gets_a_provider_table_and_keeps_its_comments() {
    let (_d, env, data) = home();
    let path = codex::config_path(&env);
    write(&path, CODEX_CONFIG);
    connect(ClientKind::Codex, &env, &data, &target(), now()).unwrap();
    let after = read(&path);
    let doc: toml::Table = toml::from_str(&after).unwrap();
    assert_eq!(doc["model_provider"].as_str(), Some("ccmesh"));
    let p = &doc["model_providers"]["ccmesh"];
    assert_eq!(p["base_url"].as_str(), Some("http://127.0.0.1:3999/v1"));
    assert_eq!(p["wire_api"].as_str(), Some("responses"));
    assert_eq!(p["experimental_bearer_token"].as_str(), Some(KEY));
    // Everything but the changed line, verbatim and in order.
    let expected_prefix = CODEX_CONFIG.replace("model_provider = \"openai\"", "model_provider = \"ccmesh\"");
    assert!(after.starts_with(&expected_prefix), "{after}");
    assert_eq!(codex::configured_url(&env).unwrap().as_deref(), Some("http://127.0.0.1:3999/v1"));
    assert_eq!(state(ClientKind::Codex, &env, Some(&data), "http://127.0.0.1:3999").status, Status::Connected);
    disconnect(ClientKind::Codex, &env, &data).unwrap();
    assert_eq!(read(&path), CODEX_CONFIG);

    // Key by key after an edit elsewhere: comments survive, the old provider comes back.
    connect(ClientKind::Codex, &env, &data, &target(), now()).unwrap();
    write(&path, &read(&path).replace("notifications = true", "notifications = false"));
    disconnect(ClientKind::Codex, &env, &data).unwrap();
    assert_eq!(read(&path), CODEX_CONFIG.replace("notifications = true", "notifications = false"));
}

#[test]
fn codex_without_a_config_file() {
    let (_d, env, data) = home();
    connect(ClientKind::Codex, &env, &data, &target(), now()).unwrap();
    let text = read(&codex::config_path(&env));
    assert!(text.starts_with("model_provider = \"ccmesh\"\n"), "{text}");
    assert!(text.contains("[model_providers.ccmesh]\n"), "{text}");
    assert!(!text.contains("[model_providers]\n"), "{text}");
    disconnect(ClientKind::Codex, &env, &data).unwrap();
    assert!(!codex::config_path(&env).exists());
}

#[test]
fn gemini_cli_gets_its_env_file_and_auth_type() {
    let (_d, env, data) = home();
    let env_file = gemini_cli::env_path(&env);
    let settings = gemini_cli::settings_path(&env);
    let original_env = "# mine\nGEMINI_API_KEY=AIza-user-own-key\nGOOGLE_CLOUD_PROJECT=acme\n";
    let original_settings =
        "{\n  \"ui\": {\"theme\": \"GitHub\"},\n  \"mcpServers\": {\"docs\": {\"command\": \"npx\"}}\n}\n";
    write(&env_file, original_env);
    write(&settings, original_settings);
    let report = connect(ClientKind::GeminiCli, &env, &data, &target(), now()).unwrap();
    assert!(report.notes.iter().any(|n| n.contains("trust")), "{:?}", report.notes);
    let e = read(&env_file);
    assert_eq!(dotenv::get_value(&e, "GOOGLE_GEMINI_BASE_URL").as_deref(), Some("http://127.0.0.1:3999"));
    assert_eq!(dotenv::get_value(&e, "GEMINI_API_KEY").as_deref(), Some(KEY));
    assert!(e.starts_with("# mine\n"));
    assert_eq!(dotenv::get_value(&e, "GOOGLE_CLOUD_PROJECT").as_deref(), Some("acme"));
    let s = value(&read(&settings));
    assert_eq!(s["security"]["auth"]["selectedType"], "gemini-api-key");
    assert_eq!(s["mcpServers"]["docs"]["command"], "npx");
    assert_eq!(state(ClientKind::GeminiCli, &env, Some(&data), "http://127.0.0.1:3999").status, Status::Connected);
    disconnect(ClientKind::GeminiCli, &env, &data).unwrap();
    assert_eq!(read(&env_file), original_env);
    assert_eq!(read(&settings), original_settings);

    // With the settings edited meanwhile: the created `security.auth` goes, the edit stays.
    connect(ClientKind::GeminiCli, &env, &data, &target(), now()).unwrap();
    write(&settings, &json_edit::set(&read(&settings), &["ui", "theme"], Some("\"Dracula\"")).unwrap());
    disconnect(ClientKind::GeminiCli, &env, &data).unwrap();
    assert_eq!(read(&settings), original_settings.replace("GitHub", "Dracula"));
    assert_eq!(read(&env_file), original_env);
}

#[test]
fn states_tell_the_four_cases_apart() {
    let (_d, mut env, data) = home();
    let gw = "http://127.0.0.1:3999";
    assert_eq!(state(ClientKind::Codex, &env, Some(&data), gw).status, Status::NotInstalled);
    // On PATH but never configured.
    let bin = env.home.join("bin");
    write(&bin.join("codex"), "#!/bin/sh\n");
    env.vars.insert("PATH".into(), bin.display().to_string());
    assert_eq!(state(ClientKind::Codex, &env, Some(&data), gw).status, Status::NotConfigured);
    write(
        &codex::config_path(&env),
        "model_provider = \"x\"\n[model_providers.x]\nbase_url = \"https://relay.example.com/v1\"\n",
    );
    let s = state(ClientKind::Codex, &env, Some(&data), gw);
    assert_eq!((s.status, s.url.as_deref()), (Status::Elsewhere, Some("https://relay.example.com/v1")));
    write(&claude_code::settings_path(&env), "{\"env\": {\"ANTHROPIC_BASE_URL\": \"http://localhost:3999/\"}}");
    let s = state(ClientKind::ClaudeCode, &env, Some(&data), gw);
    assert_eq!(s.status, Status::Connected);
    assert!(!s.has_record, "pointed there by hand, not by connect");
    write(&claude_code::settings_path(&env), "{ not json");
    assert!(state(ClientKind::ClaudeCode, &env, Some(&data), gw).error.is_some());
}

#[test]
fn gateway_urls_compare_by_what_they_reach() {
    assert!(same_gateway("http://127.0.0.1:3999", "http://localhost:3999/"));
    assert!(same_gateway("http://127.0.0.1:3999/v1", "http://127.0.0.1:3999"));
    assert!(same_gateway("http://[::1]:3999", "http://127.0.0.1:3999"));
    assert!(!same_gateway("http://127.0.0.1:3998", "http://127.0.0.1:3999"));
    assert!(!same_gateway("https://127.0.0.1:3999", "http://127.0.0.1:3999"));
    assert!(!same_gateway("https://api.anthropic.com", "http://127.0.0.1:3999"));
    assert!(!same_gateway("not a url", "http://127.0.0.1:3999"));
}

#[test]
fn parse_accepts_the_usual_spellings() {
    assert_eq!(ClientKind::parse("claude-code"), Some(ClientKind::ClaudeCode));
    assert_eq!(ClientKind::parse("Codex"), Some(ClientKind::Codex));
    assert_eq!(ClientKind::parse("gemini"), Some(ClientKind::GeminiCli));
    assert_eq!(ClientKind::parse("cursor"), None);
    for c in ClientKind::ALL {
        assert_eq!(ClientKind::parse(c.id()), Some(c));
    }
}
