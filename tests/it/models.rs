//! `GET /v1/models` lists what a client can ask for: the concrete models and map keys the
//! endpoints name, and for glob-only (or list-less) endpoints the upstream's own list, fetched
//! in the background and filtered by the endpoint's globs; each entry names its endpoints.

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::gateway::TestGateway;
use crate::support::mock::MockUpstream;

async fn models(g: &TestGateway, anthropic: bool) -> Value {
    let mut req = g.http.get(format!("{}/v1/models", g.url));
    if anthropic {
        req = req.header("anthropic-version", "2023-06-01");
    }
    let r = req.send().await.unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

fn entries(v: &Value) -> Vec<(String, Vec<String>)> {
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let names = m["ccmesh_endpoints"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string());
            (m["id"].as_str().unwrap().to_string(), names.collect())
        })
        .collect()
}

fn entry(id: &str, endpoints: &[&str]) -> (String, Vec<String>) {
    (id.to_string(), endpoints.iter().map(|e| e.to_string()).collect())
}

#[tokio::test]
async fn glob_only_endpoints_list_their_upstreams_models() {
    let claude = MockUpstream::start().await;
    claude.set_models(&["claude-sonnet-4-5", "claude-haiku-4-5", "not-a-claude"]);
    let open = MockUpstream::start().await;
    open.set_models(&["gpt-4o", "o3", "dall-e-3"]);
    let g = TestGateway::start().await;
    // The README's shape: globs only, and a vendor with a map and no list.
    g.add("anthropic", "anthropic", &claude.url(), json!({"models": ["claude-*"]})).await;
    g.add("openai", "openai", &open.url(), json!({"models": ["gpt-*", "o*"]})).await;
    g.add(
        "glm",
        "anthropic",
        "http://127.0.0.1:9",
        json!({"models": ["glm-4.6"], "model_map": {"claude-sonnet-4-5": "glm-4.6"}}),
    )
    .await;
    g.model_lists_stored(2).await;

    let v = models(&g, false).await;
    assert_eq!(v["object"], "list");
    assert_eq!(
        entries(&v),
        [
            entry("claude-sonnet-4-5", &["anthropic", "glm"]),
            entry("claude-haiku-4-5", &["anthropic"]),
            entry("gpt-4o", &["openai"]),
            entry("o3", &["openai"]),
            entry("glm-4.6", &["glm"]),
        ],
        "{v}"
    );
    assert_eq!(v["data"][0]["owned_by"], "anthropic");
    // Anthropic's shape carries the same.
    let v = models(&g, true).await;
    assert_eq!(v["data"][1]["type"], "model");
    assert_eq!(v["data"][1]["id"], "claude-haiku-4-5");
    assert_eq!(v["data"][1]["ccmesh_endpoints"], json!(["anthropic"]));
    assert_eq!(v["first_id"], "claude-sonnet-4-5");

    // Asked with the endpoints' keys, never on the request path: listing again sends nothing.
    let sent = claude.model_list_requests();
    assert_eq!(sent[0].header("x-api-key"), Some("sk-anthropic-secret-key-0000"));
    assert_eq!(open.model_list_requests()[0].header("authorization"), Some("Bearer sk-openai-secret-key-0000"));
    let (before_claude, before_open) = (claude.model_list_requests().len(), open.model_list_requests().len());
    for _ in 0..3 {
        models(&g, false).await;
    }
    assert_eq!((claude.model_list_requests().len(), open.model_list_requests().len()), (before_claude, before_open));
}

#[tokio::test]
async fn an_endpoint_change_refreshes_its_list() {
    let up = MockUpstream::start().await;
    up.set_models(&["m-1", "m-2"]);
    let g = TestGateway::start().await;
    g.add("any", "openai", &up.url(), json!({})).await;
    g.model_lists_stored(1).await;
    assert_eq!(entries(&models(&g, false).await), [entry("m-1", &["any"]), entry("m-2", &["any"])]);

    // A new key: the old list no longer speaks for the endpoint; the new one is fetched at once.
    up.set_models(&["m-3"]);
    let (status, _) =
        g.api(Method::PATCH, "/api/endpoints/any", Some(json!({"api_key": "sk-another-key-0000000"}))).await;
    assert_eq!(status, 200);
    g.model_lists_stored(2).await;
    assert_eq!(entries(&models(&g, false).await), [entry("m-3", &["any"])]);
    assert_eq!(up.model_list_requests().last().unwrap().header("authorization"), Some("Bearer sk-another-key-0000000"));

    // Globs filter the upstream's list.
    let (status, _) = g.api(Method::PATCH, "/api/endpoints/any", Some(json!({"models": ["m-*"]}))).await;
    assert_eq!(status, 200);
    up.set_models(&["m-4", "x-1"]);
    // A models edit keeps the source (URL, key), so the list is refreshed when due, not now:
    // what is cached is filtered by the new globs at once.
    assert_eq!(entries(&models(&g, false).await), [entry("m-3", &["any"])]);

    // Disabled endpoints are not listed.
    let (status, _) = g.api(Method::PATCH, "/api/endpoints/any", Some(json!({"enabled": false}))).await;
    assert_eq!(status, 200);
    assert_eq!(entries(&models(&g, false).await), []);
}
