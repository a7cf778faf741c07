//! The management CLI as a newcomer meets it, through the real binary: flags that change only
//! what they say, messages that name a command to type, health and statistics that read the
//! same as the dashboard.

use serde_json::Value;

use crate::support::binary::Server;
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
    let (code, out, err) = server.cli_env(&["endpoint", "edit", "anthropic", "--test-model", "claude-x", "--json"], &env_b);
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
    let (code, _, err) = server.cli_env(&["endpoint", "edit", "anthropic", "--api-key", KEY_A, "--api-key-from-env"], &env_b);
    assert_eq!(code, 2, "clap refuses the pair: {err}");
}
