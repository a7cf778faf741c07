//! `ccmesh import cc-switch|ccmesh` against databases made here from the public schemas (both
//! cc-switch failover-queue versions and the ccMesh desktop app's), into a running gateway: what
//! lands, that a second import changes nothing new, that the source is never written, and that
//! no key is ever printed.

use std::path::Path;
use std::process::Command;

use rusqlite::{Connection, params};
use serde_json::{Value, json};

use crate::support::gateway::TestGateway;

const BIN: &str = env!("CARGO_BIN_EXE_ccmesh");

const KEYS: [&str; 5] = [
    "sk-glm-7f3a9c2e5b1d4f60",
    "sk-kimi-a1b2c3d4e5f60718",
    "sk-relay-0a9b8c7d6e5f4a3b",
    "sk-ds-11223344556677889900",
    "AIzaSyD-gemini-key-0000000",
];

fn claude_settings(base: &str, key_var: &str, key: &str, extra: Value) -> String {
    let mut env = json!({"ANTHROPIC_BASE_URL": base, key_var: key});
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        env[k] = v;
    }
    json!({"env": env, "permissions": {"allow": []}}).to_string()
}

fn codex_settings(base: &str, key: &str, wire: &str, model: &str) -> String {
    let config = format!(
        "model_provider = \"relay\"\nmodel = \"{model}\"\nmodel_reasoning_effort = \"high\"\n\n[model_providers.relay]\nname = \"relay\"\nbase_url = \"{base}\"\nwire_api = \"{wire}\"\nrequires_openai_auth = true\n"
    );
    json!({"auth": {"OPENAI_API_KEY": key}, "config": config}).to_string()
}

/// The providers both schema versions share: two Claude relays, one Codex relay, an official
/// Claude login (no base URL: skipped), a Gemini key, a takeover entry pointing at cc-switch's
/// own proxy, and an app ccmesh has no use for.
fn insert_providers(c: &Connection, queue_column: bool) {
    let rows: Vec<(&str, &str, &str, String, i64, bool, bool)> = vec![
        (
            "p-glm",
            "claude",
            "智谱 GLM",
            claude_settings(
                "https://open.bigmodel.cn/api/anthropic",
                "ANTHROPIC_AUTH_TOKEN",
                KEYS[0],
                json!({"ANTHROPIC_MODEL": "glm-4.6", "ANTHROPIC_DEFAULT_HAIKU_MODEL": "glm-4.5-air"}),
            ),
            2,
            false,
            true,
        ),
        (
            "p-kimi",
            "claude",
            "Kimi (Moonshot)",
            claude_settings(
                "https://api.moonshot.cn/anthropic",
                "ANTHROPIC_API_KEY",
                KEYS[1],
                json!({"ANTHROPIC_DEFAULT_SONNET_MODEL": "kimi-k2-turbo-preview"}),
            ),
            1,
            true,
            true,
        ),
        ("p-official", "claude", "Claude Official", json!({"env": {}}).to_string(), 0, false, false),
        (
            "p-proxy",
            "claude",
            "local takeover",
            claude_settings("http://127.0.0.1:15721", "ANTHROPIC_AUTH_TOKEN", "x", json!({})),
            3,
            false,
            false,
        ),
        (
            "c-relay",
            "codex",
            "Kimi (Moonshot)",
            codex_settings("https://relay.example.com/v1", KEYS[2], "responses", "gpt-5.5"),
            1,
            true,
            true,
        ),
        (
            "c-ds",
            "codex",
            "DeepSeek",
            codex_settings("https://api.deepseek.com/v1", KEYS[3], "chat", "deepseek-chat"),
            2,
            false,
            false,
        ),
        (
            "g-key",
            "gemini",
            "Gemini",
            json!({"env": {"GEMINI_API_KEY": KEYS[4], "GEMINI_MODEL": "gemini-2.5-pro"}}).to_string(),
            1,
            true,
            false,
        ),
        ("o-1", "opencode", "OpenCode thing", "{}".into(), 1, true, false),
    ];
    for (id, app, name, settings, sort, current, queued) in rows {
        if queue_column {
            c.execute(
                "INSERT INTO providers (id, app_type, name, settings_config, sort_index, is_current, in_failover_queue, meta) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, '{}')",
                params![id, app, name, settings, sort, current, queued],
            )
            .unwrap();
        } else {
            c.execute(
                "INSERT INTO providers (id, app_type, name, settings_config, sort_index, is_current, meta) VALUES (?1, ?2, ?3, ?4, ?5, ?6, '{}')",
                params![id, app, name, settings, sort, current],
            )
            .unwrap();
            if queued {
                // The queue table keeps its own order: GLM before Kimi, unlike sort_index.
                let order = if id == "p-glm" { 1 } else { 2 };
                c.execute(
                    "INSERT INTO failover_queue (app_type, provider_id, queue_order, enabled, created_at) VALUES (?1, ?2, ?3, 1, 0)",
                    params![app, id, order],
                )
                .unwrap();
            }
        }
    }
}

/// cc-switch with `providers.in_failover_queue` and a `proxy_config` row per app.
fn cc_switch_queue_column(path: &Path) {
    let c = Connection::open(path).unwrap();
    c.execute_batch(
        "CREATE TABLE providers (id TEXT NOT NULL, app_type TEXT NOT NULL, name TEXT NOT NULL, settings_config TEXT NOT NULL,
             website_url TEXT, category TEXT, created_at INTEGER, sort_index INTEGER, notes TEXT, icon TEXT, icon_color TEXT,
             meta TEXT NOT NULL DEFAULT '{}', is_current BOOLEAN NOT NULL DEFAULT 0, in_failover_queue BOOLEAN NOT NULL DEFAULT 0,
             PRIMARY KEY (id, app_type));
         CREATE TABLE proxy_config (app_type TEXT PRIMARY KEY, proxy_enabled INTEGER NOT NULL DEFAULT 0,
             listen_address TEXT NOT NULL DEFAULT '127.0.0.1', listen_port INTEGER NOT NULL DEFAULT 15721,
             enable_logging INTEGER NOT NULL DEFAULT 1, enabled INTEGER NOT NULL DEFAULT 0, auto_failover_enabled INTEGER NOT NULL DEFAULT 0,
             max_retries INTEGER NOT NULL DEFAULT 3, streaming_first_byte_timeout INTEGER NOT NULL DEFAULT 60,
             streaming_idle_timeout INTEGER NOT NULL DEFAULT 120, non_streaming_timeout INTEGER NOT NULL DEFAULT 600,
             circuit_failure_threshold INTEGER NOT NULL DEFAULT 4, circuit_success_threshold INTEGER NOT NULL DEFAULT 2,
             circuit_timeout_seconds INTEGER NOT NULL DEFAULT 60, circuit_error_rate_threshold REAL NOT NULL DEFAULT 0.6,
             circuit_min_requests INTEGER NOT NULL DEFAULT 10);
         INSERT INTO proxy_config (app_type, auto_failover_enabled, max_retries, streaming_first_byte_timeout, streaming_idle_timeout,
             non_streaming_timeout, circuit_failure_threshold, circuit_success_threshold, circuit_timeout_seconds,
             circuit_error_rate_threshold, circuit_min_requests) VALUES ('claude', 1, 6, 90, 180, 600, 6, 3, 90, 0.7, 15);
         INSERT INTO proxy_config (app_type, auto_failover_enabled, max_retries, streaming_first_byte_timeout, streaming_idle_timeout,
             non_streaming_timeout, circuit_failure_threshold, circuit_success_threshold, circuit_timeout_seconds,
             circuit_error_rate_threshold, circuit_min_requests) VALUES ('codex', 0, 3, 45, 120, 300, 4, 2, 60, 0.5, 10);
         INSERT INTO proxy_config (app_type, auto_failover_enabled, circuit_failure_threshold, streaming_first_byte_timeout)
             VALUES ('gemini', 1, 7, 50);
         PRAGMA user_version = 17;",
    )
    .unwrap();
    insert_providers(&c, true);
}

/// cc-switch 3.8: the `failover_queue` table, one-row `proxy_config` and `circuit_breaker_config`.
fn cc_switch_queue_table(path: &Path) {
    let c = Connection::open(path).unwrap();
    c.execute_batch(
        "CREATE TABLE providers (id TEXT NOT NULL, app_type TEXT NOT NULL, name TEXT NOT NULL, settings_config TEXT NOT NULL,
             website_url TEXT, category TEXT, created_at INTEGER, sort_index INTEGER, notes TEXT, icon TEXT, icon_color TEXT,
             meta TEXT NOT NULL DEFAULT '{}', is_current BOOLEAN NOT NULL DEFAULT 0, is_proxy_target BOOLEAN NOT NULL DEFAULT 0,
             PRIMARY KEY (id, app_type));
         CREATE TABLE failover_queue (id INTEGER PRIMARY KEY AUTOINCREMENT, app_type TEXT NOT NULL, provider_id TEXT NOT NULL,
             queue_order INTEGER NOT NULL, enabled INTEGER NOT NULL DEFAULT 1, created_at INTEGER NOT NULL, UNIQUE (app_type, provider_id));
         CREATE TABLE proxy_config (id INTEGER PRIMARY KEY CHECK (id = 1), enabled INTEGER NOT NULL DEFAULT 0,
             listen_address TEXT NOT NULL DEFAULT '127.0.0.1', listen_port INTEGER NOT NULL DEFAULT 15721,
             max_retries INTEGER NOT NULL DEFAULT 3, request_timeout INTEGER NOT NULL DEFAULT 300, enable_logging INTEGER NOT NULL DEFAULT 1,
             target_app TEXT NOT NULL DEFAULT 'claude');
         INSERT INTO proxy_config (id, max_retries, request_timeout) VALUES (1, 5, 240);
         CREATE TABLE circuit_breaker_config (id INTEGER PRIMARY KEY CHECK (id = 1), failure_threshold INTEGER NOT NULL DEFAULT 5,
             success_threshold INTEGER NOT NULL DEFAULT 2, timeout_seconds INTEGER NOT NULL DEFAULT 60,
             error_rate_threshold REAL NOT NULL DEFAULT 0.5, min_requests INTEGER NOT NULL DEFAULT 10);
         INSERT INTO circuit_breaker_config (id) VALUES (1);
         PRAGMA user_version = 2;",
    )
    .unwrap();
    insert_providers(&c, false);
}

/// The ccMesh desktop app, at a schema with the fast queue and archiving.
fn ccmesh_desktop(path: &Path) {
    let c = Connection::open(path).unwrap();
    c.execute_batch(
        "CREATE TABLE endpoints (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE, api_url TEXT NOT NULL,
             api_key TEXT NOT NULL DEFAULT '', auth_mode TEXT NOT NULL DEFAULT 'api_key', enabled INTEGER NOT NULL DEFAULT 1,
             transformer TEXT NOT NULL DEFAULT 'claude', model TEXT NOT NULL DEFAULT '', remark TEXT NOT NULL DEFAULT '',
             sort_order INTEGER NOT NULL DEFAULT 0, test_status TEXT NOT NULL DEFAULT 'unknown', models TEXT NOT NULL DEFAULT '[]',
             use_proxy INTEGER NOT NULL DEFAULT 0, model_mappings TEXT NOT NULL DEFAULT '[]', active_models TEXT NOT NULL DEFAULT '[]',
             fast INTEGER NOT NULL DEFAULT 0, fast_sort_order INTEGER NOT NULL DEFAULT 0, archived INTEGER NOT NULL DEFAULT 0);
         CREATE TABLE app_config (key TEXT PRIMARY KEY, value TEXT NOT NULL);",
    )
    .unwrap();
    // name, api_url, api_key, enabled, transformer, model, models, model_mappings, sort_order,
    // fast, fast_sort_order, archived
    type Row<'a> = (&'a str, &'a str, &'a str, i64, &'a str, &'a str, &'a str, &'a str, i64, i64, i64, i64);
    let rows: Vec<Row> = vec![
        (
            "GLM Coding",
            "https://open.bigmodel.cn/api/anthropic",
            KEYS[0],
            1,
            "claude",
            "",
            "[\"glm-4.6\",\"glm-4.5-air\"]",
            "[{\"from\":\"claude-sonnet-4-5\",\"to\":\"glm-4.6\"}]",
            2,
            1,
            2,
            0,
        ),
        ("relay", "https://relay.example.com/v1", KEYS[2], 1, "codex", "gpt-5.5", "[]", "[]", 1, 1, 1, 0),
        (
            "kimi",
            "https://api.moonshot.cn/v1",
            KEYS[1],
            0,
            "openai",
            "",
            "[\"kimi-k2\",\"moonshot-v1-8k\"]",
            "[]",
            3,
            0,
            0,
            0,
        ),
        ("old one", "https://old.example.com", KEYS[3], 1, "claude", "", "[]", "[]", 4, 0, 0, 1),
    ];
    for (name, url, key, enabled, transformer, model, models, maps, sort, fast, fast_order, archived) in rows {
        c.execute(
            "INSERT INTO endpoints (name, api_url, api_key, enabled, transformer, model, models, model_mappings, sort_order, fast, fast_sort_order, archived)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            params![name, url, key, enabled, transformer, model, models, maps, sort, fast, fast_order, archived],
        )
        .unwrap();
    }
}

fn run(args: &[&str], server: &str) -> (bool, String) {
    let out =
        Command::new(BIN).args(args).args(["--server", server]).env_remove("CCMESH_ADMIN_TOKEN").output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    for k in KEYS {
        assert!(!text.contains(k), "a key was printed: {text}");
    }
    (out.status.success(), text)
}

async fn endpoints(g: &TestGateway) -> Vec<Value> {
    let (_, v) = g.api(reqwest::Method::GET, "/api/endpoints", None).await;
    v.as_array().unwrap().clone()
}

fn by_name<'a>(list: &'a [Value], name: &str) -> &'a Value {
    list.iter().find(|e| e["name"] == name).unwrap_or_else(|| panic!("no endpoint {name} in {list:?}"))
}

fn fast_queue(list: &[Value]) -> Vec<String> {
    let mut fast: Vec<(i64, String)> = list
        .iter()
        .filter(|e| e["fast"] == true)
        .map(|e| (e["fast_sort_order"].as_i64().unwrap(), e["name"].as_str().unwrap().to_string()))
        .collect();
    fast.sort();
    fast.into_iter().map(|(_, n)| n).collect()
}

fn digest(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

#[tokio::test]
async fn cc_switch_with_the_queue_column_imports_idempotently_and_never_prints_a_key() {
    let g = TestGateway::start().await;
    g.add("mine", "anthropic", "https://api.anthropic.com", json!({"fast": true})).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cc-switch.db");
    cc_switch_queue_column(&db);
    let before = digest(&db);
    let db_arg = db.display().to_string();

    let (ok, dry) = run(&["import", "cc-switch", "--db", &db_arg, "--dry-run"], &g.url);
    assert!(ok, "{dry}");
    assert!(dry.contains("dry run, nothing changed"), "{dry}");
    assert!(dry.contains("would create"), "{dry}");
    assert!(dry.contains("schema with providers.in_failover_queue"), "{dry}");
    assert_eq!(endpoints(&g).await.len(), 1, "a dry run writes nothing");

    let (ok, first) = run(&["import", "cc-switch", "--db", &db_arg], &g.url);
    assert!(ok, "{first}");
    let list = endpoints(&g).await;
    let glm = by_name(&list, "GLM");
    assert_eq!(glm["format"], "anthropic");
    assert_eq!(glm["base_url"], "https://open.bigmodel.cn/api/anthropic");
    assert_eq!(glm["model_map"], json!({"claude-*": "glm-4.6", "claude-*haiku*": "glm-4.5-air"}));
    assert_eq!(glm["models"], json!(["claude-*"]));
    let kimi = by_name(&list, "Kimi-Moonshot");
    assert_eq!(kimi["model_map"], json!({"claude-*sonnet*": "kimi-k2-turbo-preview"}));
    // Same display name in two apps: the second gets the app as a suffix.
    let relay = by_name(&list, "Kimi-Moonshot-codex");
    assert_eq!((relay["format"].as_str(), relay["model_map"]["*"].as_str()), (Some("responses"), Some("gpt-5.5")));
    assert_eq!(by_name(&list, "DeepSeek")["format"], "openai");
    // cc-switch's gemini app: a gemini-format endpoint on Google's API, its model as the map.
    let gemini = by_name(&list, "Gemini");
    assert_eq!(gemini["format"], "gemini");
    assert_eq!(gemini["base_url"], "https://generativelanguage.googleapis.com");
    assert_eq!(gemini["model_map"], json!({"*": "gemini-2.5-pro"}));
    for skipped in ["Claude Official", "local takeover", "OpenCode"] {
        assert!(first.lines().any(|l| l.starts_with("skipped") && l.contains(skipped)), "{skipped}: {first}");
    }
    assert!(first.contains("cc-switch's own local proxy") || first.contains("local proxy"), "{first}");
    // The user's fast entry stays first; claude's queue (sort_index order), then codex's.
    assert_eq!(fast_queue(&list), ["mine", "Kimi-Moonshot", "GLM", "Kimi-Moonshot-codex"]);
    let (_, settings) = g.api(reqwest::Method::GET, "/api/settings", None).await;
    assert_eq!(settings["breaker"]["claude"]["failure_threshold"], 6);
    assert_eq!(settings["breaker"]["responses"]["error_rate_threshold"], 0.5);
    assert_eq!(settings["timeouts"]["responses"]["first_byte_timeout_secs"], 45.0);
    assert_eq!(settings["timeouts"]["responses"]["request_timeout_secs"], 300.0);
    assert!(first.contains("max_retries = 6"), "{first}");
    assert!(first.contains("failover_enabled.responses = false"), "{first}");
    assert_eq!(settings["failover_enabled"]["responses"], false, "codex's automatic failover was off");
    assert_eq!(settings["failover_enabled"]["claude"], true);
    // cc-switch's gemini app's numbers are the gemini protocol's.
    assert_eq!(settings["breaker"]["gemini"]["failure_threshold"], 7);
    assert_eq!(settings["timeouts"]["gemini"]["first_byte_timeout_secs"], 50.0);
    assert_eq!(settings["failover_enabled"]["gemini"], true);

    let (ok, second) = run(&["import", "cc-switch", "--db", &db_arg], &g.url);
    assert!(ok, "{second}");
    assert!(second.contains("updated") && !second.contains("created"), "{second}");
    let again = endpoints(&g).await;
    assert_eq!(again.len(), list.len(), "a second import adds nothing");
    assert_eq!(fast_queue(&again), fast_queue(&list));
    assert_eq!(digest(&db), before, "the source database is never written");
}

#[tokio::test]
async fn cc_switch_with_the_queue_table_keeps_the_queue_order_and_global_numbers() {
    let g = TestGateway::start().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cc-switch.db");
    cc_switch_queue_table(&db);
    let before = digest(&db);
    let (ok, out) = run(&["import", "cc-switch", "--db", &db.display().to_string()], &g.url);
    assert!(ok, "{out}");
    assert!(out.contains("schema with the failover_queue table"), "{out}");
    let list = endpoints(&g).await;
    // queue_order, not sort_index: GLM first.
    assert_eq!(fast_queue(&list), ["GLM", "Kimi-Moonshot", "Kimi-Moonshot-codex"]);
    let (_, settings) = g.api(reqwest::Method::GET, "/api/settings", None).await;
    for p in ["claude", "openai", "responses", "gemini"] {
        assert_eq!(settings["breaker"][p]["failure_threshold"], 5, "{p}");
        assert_eq!(settings["breaker"][p]["error_rate_threshold"], 0.5, "{p}");
        assert_eq!(settings["timeouts"][p]["request_timeout_secs"], 240.0, "{p}");
    }
    assert!(out.contains("max_retries = 5"), "{out}");
    assert_eq!(digest(&db), before);
}

#[tokio::test]
async fn a_provider_pointing_at_this_gateway_is_skipped() {
    let g = TestGateway::start().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cc-switch.db");
    cc_switch_queue_column(&db);
    let c = Connection::open(&db).unwrap();
    c.execute(
        "INSERT INTO providers (id, app_type, name, settings_config, sort_index) VALUES ('loop', 'claude', 'ccmesh', ?1, 9)",
        [claude_settings(&g.url.replace("127.0.0.1", "localhost"), "ANTHROPIC_AUTH_TOKEN", "ccmesh-no-client-key", json!({}))],
    )
    .unwrap();
    drop(c);
    let (ok, out) = run(&["import", "cc-switch", "--db", &db.display().to_string()], &g.url);
    assert!(ok, "{out}");
    assert!(out.lines().any(|l| l.starts_with("skipped") && l.contains("is this gateway")), "{out}");
    assert!(endpoints(&g).await.iter().all(|e| e["name"] != "ccmesh"));
}

#[tokio::test]
async fn ccmesh_desktop_endpoints_import_with_their_models_maps_and_fast_queue() {
    let g = TestGateway::start().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ccmesh.db");
    ccmesh_desktop(&db);
    let before = digest(&db);
    let db_arg = db.display().to_string();
    let (ok, out) = run(&["import", "ccmesh", "--db", &db_arg], &g.url);
    assert!(ok, "{out}");
    let list = endpoints(&g).await;
    assert_eq!(list.len(), 3, "the archived one is skipped: {out}");
    let glm = by_name(&list, "GLM-Coding");
    assert_eq!(glm["models"], json!(["glm-4.6", "glm-4.5-air"]));
    assert_eq!(glm["model_map"], json!({"claude-sonnet-4-5": "glm-4.6"}));
    assert_eq!(by_name(&list, "relay")["model_map"], json!({"*": "gpt-5.5"}));
    assert_eq!(by_name(&list, "kimi")["enabled"], false);
    assert_eq!(fast_queue(&list), ["relay", "GLM-Coding"]);
    assert!(out.contains("archived"), "{out}");
    let (ok, again) = run(&["import", "ccmesh", "--db", &db_arg], &g.url);
    assert!(ok && again.contains("updated"), "{again}");
    assert_eq!(endpoints(&g).await.len(), 3);
    assert_eq!(digest(&db), before);
}

#[tokio::test]
async fn a_missing_or_foreign_database_is_refused_with_the_flag_to_use() {
    let g = TestGateway::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (ok, out) = run(&["import", "cc-switch", "--db", &dir.path().join("nope.db").display().to_string()], &g.url);
    assert!(!ok && out.contains("--db PATH"), "{out}");
    let other = dir.path().join("other.db");
    Connection::open(&other).unwrap().execute_batch("CREATE TABLE t (x);").unwrap();
    let (ok, out) = run(&["import", "cc-switch", "--db", &other.display().to_string()], &g.url);
    assert!(!ok && out.contains("not a cc-switch database"), "{out}");
    let (ok, out) = run(&["import", "ccmesh", "--db", &other.display().to_string()], &g.url);
    assert!(!ok && out.contains("not a ccMesh desktop database"), "{out}");
}
