//! Client keys through the real binary: `serve` refusing to expose an open proxy, keys declared
//! in `--config` with their secret from the environment, and `ccmesh key …` against a running
//! gateway (the holder's `key usage` with the client key alone).

use serde_json::{Value, json};

use crate::support::binary::{Launch, Server};
use crate::support::gateway::claude_body;
use crate::support::mock::{MockUpstream, Reply};

const TOKEN: &str = "an-admin-token-long-enough-0123456789";
const DECLARED: &str = "ccm-declared-in-the-environment-0123456789";

fn json(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

#[test]
fn serve_refuses_a_public_proxy_without_client_keys_unless_told_it_is_open() {
    let env = [("CCMESH_ADMIN_TOKEN", TOKEN)];
    let refused = Server::launch(Launch { listen: "0.0.0.0:0", env: &env, ..Launch::default() });
    let logs = match refused {
        Ok(_) => panic!("a public proxy without client keys started"),
        Err(logs) => logs,
    };
    assert!(logs.contains("refusing to serve the proxy on 0.0.0.0:0 without client keys"), "{logs}");
    assert!(logs.contains("ccmesh key add NAME") && logs.contains("--open-proxy"), "{logs}");

    // Open on purpose: it starts, and says so in the log.
    let open = Server::launch(Launch { listen: "0.0.0.0:0", env: &env, args: &["--open-proxy"], ..Launch::default() })
        .unwrap_or_else(|logs| panic!("did not start: {logs}"));
    let warning = open.wait_for_log(|v| v["fields"]["event"] == "open_proxy");
    assert_eq!(warning["level"], "WARN");
    drop(open);

    // A key declared in the config file is enough.
    let config = "[[keys]]\nname = \"ci\"\nsecret = \"${CCMESH_TEST_KEY}\"\n";
    let env = [("CCMESH_ADMIN_TOKEN", TOKEN), ("CCMESH_TEST_KEY", DECLARED)];
    let keyed = Server::launch(Launch { listen: "0.0.0.0:0", env: &env, config: Some(config), ..Launch::default() })
        .unwrap_or_else(|logs| panic!("did not start: {logs}"));
    assert!(!keyed.log_text().contains("open_proxy"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_keys_and_the_key_commands_work_against_a_running_gateway() {
    let up = MockUpstream::start().await;
    up.set_default(Reply::anthropic_message("hello"));
    let config = format!(
        "[[endpoints]]\nname = \"a\"\nbase_url = \"{}\"\napi_key = \"sk-ant-upstream-0000000000\"\nformat = \"anthropic\"\n\n[[keys]]\nname = \"ci\"\nsecret = \"${{CCMESH_TEST_KEY}}\"\nlimits = {{ rpm = 100 }}\n",
        up.url()
    );
    let server = Server::start(Some(&config), &[("CCMESH_TEST_KEY", DECLARED)]);
    let http = crate::support::gateway::http_client();
    let ask = |key: Option<String>| {
        let (http, url) = (http.clone(), server.url.clone());
        async move {
            let mut req = http.post(format!("{url}/v1/messages")).json(&claude_body("claude-sonnet-4-5", false));
            if let Some(k) = key {
                req = req.header("x-api-key", k);
            }
            req.send().await.unwrap().status().as_u16()
        }
    };
    assert_eq!(ask(None).await, 401, "a declared key turns enforcement on");
    assert_eq!(ask(Some(DECLARED.into())).await, 200, "the secret from the environment works");

    // The commands, as the README shows them.
    let (code, out, err) = server.cli(&[
        "key",
        "add",
        "alice",
        "--description",
        "Alice",
        "--model",
        "claude-*",
        "--rpm",
        "60",
        "--usd-per-day",
        "5",
    ]);
    assert_eq!(code, 0, "{err}");
    let secret = out.lines().find_map(|l| l.strip_prefix("secret: ")).unwrap().to_string();
    assert!(secret.starts_with("ccm-"), "{out}");
    assert!(out.contains("shown this once"), "{out}");
    assert_eq!(ask(Some(secret.clone())).await, 200);

    let (code, out, _) = server.cli(&["key", "list"]);
    assert_eq!(code, 0);
    assert!(out.contains("alice") && out.contains("ci") && out.contains(&secret[..12]), "{out}");
    assert!(!out.contains(&secret), "{out}");
    let (code, out, _) = server.cli(&["key", "show", "alice", "--json"]);
    assert_eq!(code, 0);
    let v = json(&out);
    assert_eq!(v["usage"]["rpm"], json!({"used": 1, "limit": 60, "remaining": 59}));

    let (code, out, err) = server.cli(&["key", "edit", "alice", "--rpm", "none", "--disable", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!((json(&out)["limits"]["rpm"].clone(), json(&out)["enabled"].clone()), (Value::Null, json!(false)));
    assert_eq!(ask(Some(secret.clone())).await, 401);
    let (code, _, _) = server.cli(&["key", "edit", "alice", "--enable"]);
    assert_eq!(code, 0);

    // The holder's view needs only the client key; an unknown key is told so.
    let (code, out, err) = server.cli_env(&["key", "usage"], &[("CCMESH_CLIENT_KEY", &secret)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("alice") && out.contains("usd_per_day") && out.contains("$5.0000"), "{out}");
    let (code, _, err) = server.cli(&["key", "usage", "--key", "ccm-not-a-key"]);
    assert_eq!(code, 1);
    assert!(err.contains("not one this gateway knows"), "{err}");
    let (code, _, err) = server.cli(&["key", "usage"]);
    assert_eq!(code, 1);
    assert!(err.contains("--key") && err.contains("CCMESH_CLIENT_KEY"), "{err}");

    let (code, out, _) = server.cli(&["key", "rotate", "alice"]);
    assert_eq!(code, 0);
    let rotated = out.lines().find_map(|l| l.strip_prefix("secret: ")).unwrap().to_string();
    assert_eq!(ask(Some(secret)).await, 401);
    assert_eq!(ask(Some(rotated)).await, 200);
    let (code, out, _) = server.cli(&["key", "rm", "alice"]);
    assert_eq!((code, out.trim()), (0, "deleted client key 'alice'"));
    let (code, _, err) = server.cli(&["key", "show", "alice"]);
    assert_eq!(code, 1);
    assert!(err.contains("no client key named 'alice'; list them with `ccmesh key list`"), "{err}");
    // No secret in any log line.
    assert!(!server.log_text().contains(DECLARED));
}
