//! The config file as the source of truth (`[config] authoritative = true`): it replaces what
//! it declares at start and whenever it changes, the admin API refuses with 409 to change what
//! it declares, runtime state stays writable, and an invalid file keeps the running
//! configuration.

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::gateway::{Options, TestGateway, claude_body};
use crate::support::mock::{MockUpstream, Reply};

fn file(endpoints: &[(&str, &str, &str)], extra: &str) -> String {
    let mut text = String::from("[config]\nauthoritative = true\n");
    for (name, url, models) in endpoints {
        text.push_str(&format!(
            "\n[[endpoints]]\nname = \"{name}\"\nbase_url = \"{url}\"\napi_key = \"sk-{name}-key-00000000\"\nformat = \"anthropic\"\nmodels = [{models}]\n"
        ));
    }
    text.push_str(extra);
    text
}

const SETTINGS: &str =
    "\n[settings]\ntransient_retry_delay_ms = 0\n\n[settings.breaker.claude]\nfailure_threshold = 5\n";

async fn names(g: &TestGateway) -> Vec<String> {
    let (_, v) = g.api(Method::GET, "/api/endpoints", None).await;
    v.as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap().to_string()).collect()
}

async fn start(text: String) -> TestGateway {
    TestGateway::start_with(Options { authoritative_config: Some(text), ..Options::default() }).await
}

#[tokio::test]
async fn the_file_replaces_the_database_and_reloads_when_it_changes() {
    let up = MockUpstream::start().await;
    let url = up.url();
    let g = start(file(&[("a", &url, "\"claude-*\""), ("b", &url, "\"claude-*\"")], SETTINGS)).await;
    assert_eq!(names(&g).await, ["a", "b"]);
    let (_, s) = g.api(Method::GET, "/api/settings", None).await;
    assert_eq!(s["breaker"]["claude"]["failure_threshold"], 5);

    // A failure on `a`, so its breaker has something to lose.
    up.push(Reply::status(500));
    up.push(Reply::anthropic_message("ok"));
    let r = g.post("/v1/messages", &claude_body("claude-sonnet-4-5", false)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(g.health("a").await["consecutive_failures"], 1);

    // Rewrite: `b` goes, `c` comes, `a` changes its models, a setting changes.
    let changed = file(
        &[("c", &url, "\"glm-*\""), ("a", &url, "\"claude-opus-*\"")],
        &SETTINGS.replace("failure_threshold = 5", "failure_threshold = 3"),
    );
    g.rewrite_config(&changed).await;
    assert_eq!(names(&g).await, ["c", "a"], "the file's endpoints, in the file's order");
    let (_, a) = g.api(Method::GET, "/api/endpoints/a", None).await;
    assert_eq!(a["models"], json!(["claude-opus-*"]));
    let (_, s) = g.api(Method::GET, "/api/settings", None).await;
    assert_eq!(s["breaker"]["claude"]["failure_threshold"], 3);
    // Applied like an admin change: `a` kept its identity and its breaker.
    assert_eq!(g.health("a").await["consecutive_failures"], 1, "no breaker reset");

    // An invalid file is refused and the running configuration stays.
    g.rewrite_config("[[endpoints]]\nname = \"broken\"\nbase_url = \"nope\"\n").await;
    assert_eq!(names(&g).await, ["c", "a"]);
    g.rewrite_config("this is = = not toml").await;
    assert_eq!(names(&g).await, ["c", "a"]);
    // Fixed again, it applies.
    g.rewrite_config(&file(&[("a", &url, "\"claude-*\"")], SETTINGS)).await;
    assert_eq!(names(&g).await, ["a"]);
}

#[tokio::test]
async fn writes_to_what_the_file_declares_are_refused_and_runtime_state_is_not() {
    let up = MockUpstream::start().await;
    let url = up.url();
    let prices = "\n[[prices]]\nmodel = \"glm-4.6\"\ninput = 1\noutput = 2\n";
    let g =
        start(file(&[("a", &url, "\"claude-x\""), ("b", &url, "\"claude-x\"")], &format!("{SETTINGS}{prices}"))).await;
    let refused: Vec<(Method, &str, Option<Value>)> = vec![
        (Method::POST, "/api/endpoints", Some(json!({"name": "z", "base_url": url, "format": "openai"}))),
        (Method::PATCH, "/api/endpoints/a", Some(json!({"models": ["gpt-*"]}))),
        (Method::PATCH, "/api/endpoints/a", Some(json!({"enabled": false, "test_model": "x"}))),
        (Method::DELETE, "/api/endpoints/b", None),
        (Method::PUT, "/api/order", Some(json!({"endpoints": ["b", "a"]}))),
        (Method::PUT, "/api/fast-queue", Some(json!({"endpoints": ["a"]}))),
        (Method::PATCH, "/api/settings", Some(json!({"routing_strategy": "priority"}))),
        (Method::PUT, "/api/prices/glm-4.6", Some(json!({"input": 9, "output": 9}))),
        (Method::DELETE, "/api/prices/glm-4.6", None),
    ];
    for (method, path, body) in refused {
        let (status, v) = g.api(method.clone(), path, body).await;
        assert_eq!(status, 409, "{method} {path}: {v}");
        assert_eq!(v["error"]["type"], "conflict");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains("ccmesh.toml is authoritative for"), "{message}");
    }
    assert_eq!(names(&g).await, ["a", "b"], "nothing changed");

    // Runtime state stays writable: the current endpoint, a reset, a test, the enable switch
    // (the file does not pin `enabled`).
    let (status, v) = g.api(Method::PUT, "/api/current", Some(json!({"protocol": "claude", "endpoint": "b"}))).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(g.api(Method::POST, "/api/endpoints/a/reset", None).await.0, 200);
    up.push(Reply::anthropic_message("pong"));
    let (status, v) = g.api(Method::POST, "/api/endpoints/a/test", None).await;
    assert_eq!((status, v["test_status"].as_str()), (200, Some("available")), "{v}");
    let (status, v) = g.api(Method::PATCH, "/api/endpoints/a", Some(json!({"enabled": false}))).await;
    assert_eq!((status, v["enabled"].as_bool()), (200, Some(false)), "{v}");
    // A reload keeps the operator's switch and the test result.
    g.rewrite_config(&file(&[("a", &url, "\"claude-y\""), ("b", &url, "\"claude-x\"")], SETTINGS)).await;
    let (_, a) = g.api(Method::GET, "/api/endpoints/a", None).await;
    assert_eq!(
        (a["enabled"].as_bool(), a["test_status"].as_str(), a["models"].clone()),
        (Some(false), Some("available"), json!(["claude-y"]))
    );
    // The new file declares no prices: they are writable again.
    assert_eq!(g.api(Method::PUT, "/api/prices/glm-4.6", Some(json!({"input": 9, "output": 9}))).await.0, 200);
}

/// The real binary: `serve --config-authoritative` reloads on SIGHUP. The rewritten file keeps
/// its length and modification time, so only the signal can have made the gateway read it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_file_in_the_binary() {
    use crate::support::binary::{Launch, Server};
    let url = "http://127.0.0.1:9";
    let config = file(&[("alpha", url, "\"claude-*\"")], "").replace("[config]\nauthoritative = true\n", "");
    let server =
        Server::launch(Launch { config: Some(&config), args: &["--config-authoritative"], ..Launch::default() })
            .unwrap();
    server.wait_for_log(|v| v["fields"]["event"] == "config_applied" && v["fields"]["authoritative"] == true);
    let path = server.dir.join("ccmesh.toml");
    let http = crate::support::gateway::http_client();
    let names = || async {
        let v: Value = http.get(format!("{}/api/endpoints", server.url)).send().await.unwrap().json().await.unwrap();
        v.as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap().to_string()).collect::<Vec<_>>()
    };
    assert_eq!(names().await, ["alpha"]);

    let rewrite = |text: &str| {
        let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
        assert_eq!(text.len() as u64, std::fs::metadata(&path).unwrap().len(), "same length");
        std::fs::write(&path, text).unwrap();
        std::fs::File::options().write(true).open(&path).unwrap().set_modified(modified).unwrap();
    };
    let signal = || {
        let status =
            std::process::Command::new("kill").arg("-HUP").arg(server.child.id().to_string()).status().unwrap();
        assert!(status.success());
    };
    rewrite(&config.replace("alpha", "gamma"));
    signal();
    server.wait_for_log(|v| v["fields"]["event"] == "config_reloaded" && v["fields"]["trigger"] == "sighup");
    assert_eq!(names().await, ["gamma"]);
    let (code, _, err) = server.cli(&["endpoint", "rm", "gamma"]);
    assert_eq!(code, 1);
    assert!(err.contains("409") && err.contains("is authoritative for endpoints"), "{err}");

    // An invalid file: reported, the running configuration kept.
    rewrite(&config.replace("alpha", "gamma").replace("format = \"anthropic\"", "format = \"gemini1\"  "));
    signal();
    let line = server.wait_for_log(|v| v["fields"]["event"] == "config_invalid");
    assert!(line["fields"]["error"].as_str().unwrap().contains("format"), "{line}");
    assert_eq!(names().await, ["gamma"]);
}
