//! The connectivity test (`POST /api/endpoints/{name}/test`, `ccmesh endpoint test`) on the
//! endpoints a newcomer writes: globs only, no test model. It asks for the upstream's model
//! list then, which needs no model.

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::gateway::TestGateway;
use crate::support::mock::{MockUpstream, Reply};

async fn test(g: &TestGateway, name: &str) -> Value {
    let (status, e) = g.api(Method::POST, &format!("/api/endpoints/{name}/test"), None).await;
    assert_eq!(status, 200, "{e}");
    e
}

#[tokio::test]
async fn a_glob_only_endpoint_is_tested_with_its_model_list() {
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("anthropic", "anthropic", &up.url(), json!({"models": ["claude-*"]})).await;
    up.set_models(&["claude-sonnet-4-5"]);
    let before = up.model_list_requests().len();
    let e = test(&g, "anthropic").await;
    assert_eq!(e["test_status"], "available", "{e}");
    assert_eq!(e["test_error"], Value::Null);
    // One model-list request, the Anthropic way (path, key, version); nothing else was sent.
    let lists = up.model_list_requests();
    let sent = lists.last().unwrap();
    assert!(lists.len() > before);
    assert_eq!(sent.path_and_query(), "/v1/models?limit=1000");
    assert_eq!(sent.header("x-api-key"), Some("sk-anthropic-secret-key-0000"));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(up.request_count(), 0, "no real request without a model");

    // A rejected key says so.
    up.set_models_reply(Reply::anthropic_error(401, "authentication_error", "invalid x-api-key"));
    let e = test(&g, "anthropic").await;
    assert_eq!(e["test_status"], "unavailable");
    let error = e["test_error"].as_str().unwrap();
    assert!(error.starts_with("key rejected (HTTP 401"), "{error}");
    up.set_models_reply(Reply::openai_error(403, "permission_error", "no access"));
    assert!(test(&g, "anthropic").await["test_error"].as_str().unwrap().starts_with("key rejected (HTTP 403"));
    // Any other status: unavailable, with it.
    up.set_models_reply(Reply::text(500, "upstream broke"));
    let e = test(&g, "anthropic").await;
    let error = e["test_error"].as_str().unwrap();
    assert!(error.starts_with("HTTP 500 to GET") && error.contains("upstream broke"), "{error}");
    assert!(error.contains("test_model"), "names the way to a real request: {error}");
    // The test changes no breaker.
    assert_eq!(g.health("anthropic").await["source"], "test");
}

#[tokio::test]
async fn the_list_path_and_auth_follow_the_endpoints_format() {
    let up = MockUpstream::start().await;
    up.set_models(&["gpt-4o"]);
    let g = TestGateway::start().await;
    // OpenAI-family bases are joined as SPEC §8 joins every path.
    g.add("openai", "openai", &up.url(), json!({"models": ["gpt-*"]})).await;
    g.add("relay", "responses", &format!("{}/openai/v1", up.url()), json!({})).await;
    for (name, path) in [("openai", "/v1/models"), ("relay", "/openai/v1/models")] {
        let e = test(&g, name).await;
        assert_eq!(e["test_status"], "available", "{name}: {e}");
        let sent = up.model_list_requests().into_iter().rev().find(|r| r.path == path).unwrap();
        assert_eq!(sent.header("authorization"), Some(format!("Bearer sk-{name}-secret-key-0000").as_str()));
        assert_eq!(sent.header("x-api-key"), None);
    }
    assert_eq!(up.request_count(), 0);

    // With a concrete model known, the test is a real request again.
    let (status, _) = g.api(Method::PATCH, "/api/endpoints/openai", Some(json!({"test_model": "gpt-4o-mini"}))).await;
    assert_eq!(status, 200);
    up.push(Reply::openai_chat("pong"));
    assert_eq!(test(&g, "openai").await["test_status"], "available");
    let sent = up.last_request().unwrap();
    assert_eq!((sent.method.as_str(), sent.path.as_str()), ("POST", "/v1/chat/completions"));
    assert_eq!(sent.json()["model"], "gpt-4o-mini");
}

#[tokio::test]
async fn a_host_that_does_not_resolve_says_so() {
    let g = TestGateway::start().await;
    g.add("typo", "openai", "https://api.openai.invalid", json!({"models": ["gpt-*"]})).await;
    g.add("refused", "openai", "http://127.0.0.1:1", json!({"models": ["gpt-*"]})).await;
    let e = test(&g, "typo").await;
    assert_eq!(e["test_status"], "unavailable");
    assert_eq!(e["test_error"], "could not resolve host api.openai.invalid");
    let e = test(&g, "refused").await;
    let error = e["test_error"].as_str().unwrap();
    assert!(!error.contains("resolve"), "a refused port is not a DNS failure: {error}");
    assert!(error.contains("could not connect"), "{error}");
}
