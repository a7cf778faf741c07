//! The admin REST API (SPEC §10) over real HTTP against a real SQLite file.

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::gateway::{Options, TestGateway};

#[tokio::test]
async fn create_get_patch_delete_round_trip_with_masked_keys() {
    let g = TestGateway::start().await;
    let created = g
        .add(
            "kimi",
            "anthropic",
            "https://api.moonshot.cn/anthropic/",
            json!({"api_key": "sk-kimi-0123456789abcdef", "models": ["kimi-*"]}),
        )
        .await;
    assert_eq!(created["api_key"], "sk-…cdef");
    assert_eq!(created["base_url"], "https://api.moonshot.cn/anthropic");
    assert_eq!(created["test_status"], "untested");
    for key in [
        "name",
        "base_url",
        "api_key",
        "format",
        "models",
        "model_map",
        "enabled",
        "fast",
        "fast_sort_order",
        "sort_order",
        "headers",
        "test_model",
        "test_status",
        "test_at",
        "test_latency_ms",
        "test_error",
    ] {
        assert!(created.get(key).is_some(), "missing {key}");
    }

    let (status, got) = g.api(Method::GET, "/api/endpoints/kimi", None).await;
    assert_eq!(status, 200);
    assert_eq!(got, created);

    let (status, patched) =
        g.api(Method::PATCH, "/api/endpoints/kimi", Some(json!({"enabled": false, "models": ["k2"]}))).await;
    assert_eq!(status, 200, "{patched}");
    assert_eq!(patched["enabled"], false);
    assert_eq!(patched["models"], json!(["k2"]));
    assert_eq!(patched["api_key"], "sk-…cdef");

    // The full key never comes back from any read.
    let (_, list) = g.api(Method::GET, "/api/endpoints", None).await;
    assert!(!list.to_string().contains("0123456789abcdef"));
    let (_, health) = g.api(Method::GET, "/api/health", None).await;
    assert!(!health.to_string().contains("0123456789abcdef"));

    let (status, _) = g.api(Method::DELETE, "/api/endpoints/kimi", None).await;
    assert_eq!(status, 204);
    let (status, body) = g.api(Method::GET, "/api/endpoints/kimi", None).await;
    assert_eq!(status, 404);
    assert!(body["error"]["message"].as_str().unwrap().contains("no endpoint named 'kimi'"));
}

#[tokio::test]
async fn every_invalid_input_is_a_400_naming_the_field() {
    let g = TestGateway::start().await;
    g.add("taken", "openai", "http://127.0.0.1:9", json!({})).await;
    let base = json!({"name": "x", "format": "openai", "base_url": "http://127.0.0.1:9", "api_key": "k"});
    let cases: Vec<(Value, &str)> = vec![
        (json!({"format": "vertex"}), "format"),
        (json!({"base_url": "localhost:9"}), "base_url"),
        (json!({"base_url": "not a url"}), "base_url"),
        (json!({"name": "taken"}), "name"),
        (json!({"name": "TAKEN"}), "name"),
        (json!({"name": "has space"}), "name"),
        (json!({"name": "a/b"}), "name"),
        (json!({"headers": {"x-api-key": "k"}}), "headers"),
        (json!({"models": "gpt-*"}), "models"),
        (json!({"surprise": true}), "surprise"),
    ];
    for (patch, field) in cases {
        let mut body = base.clone();
        for (k, v) in patch.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (status, v) = g.api(Method::POST, "/api/endpoints", Some(body)).await;
        assert_eq!(status, 400, "{patch}: {v}");
        assert_eq!(v["error"]["field"], field, "{patch}: {v}");
        assert!(v["error"]["message"].as_str().unwrap().starts_with(field), "{v}");
    }
    // Malformed JSON is a clear 400 too, and nothing was stored.
    let r = g
        .http
        .post(format!("{}/api/endpoints", g.url))
        .body("{not json")
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("not valid JSON"));
    let (_, list) = g.api(Method::GET, "/api/endpoints", None).await;
    assert_eq!(list.as_array().unwrap().len(), 1);
    // Unknown names are 404 for every per-endpoint route.
    for (m, p) in [
        (Method::PATCH, "/api/endpoints/nope"),
        (Method::DELETE, "/api/endpoints/nope"),
        (Method::POST, "/api/endpoints/nope/reset"),
        (Method::POST, "/api/endpoints/nope/test"),
    ] {
        let (status, _) = g.api(m.clone(), p, Some(json!({}))).await;
        assert_eq!(status, 404, "{m} {p}");
    }
}

#[tokio::test]
async fn settings_get_patch_validate_and_survive_restart_of_the_snapshot() {
    let g = TestGateway::start().await;
    let (status, doc) = g.api(Method::GET, "/api/settings", None).await;
    assert_eq!(status, 200);
    assert_eq!(doc["breaker"]["claude"]["failure_threshold"], 8);
    assert_eq!(doc["breaker"]["openai"]["failure_threshold"], 4);
    assert_eq!(doc["breaker"]["responses"]["min_requests"], 10);
    assert_eq!(doc["timeouts"]["claude"]["idle_timeout_secs"], 180);
    assert_eq!(doc["rate_limit_backoff_budget_secs"], 5);
    assert_eq!(doc["max_body_bytes"], 33554432);

    let (status, doc) =
        g.api(Method::PATCH, "/api/settings", Some(json!({"breaker": {"openai": {"failure_threshold": 3}}}))).await;
    assert_eq!(status, 200);
    assert_eq!(doc["breaker"]["openai"]["failure_threshold"], 3);
    assert_eq!(doc["breaker"]["openai"]["success_threshold"], 2);

    for (patch, needle) in [
        (json!({"breaker": {"openai": {"failure_threshold": 0}}}), "breaker.openai.failure_threshold"),
        (json!({"breaker": {"claude": {"nope": 1}}}), "breaker.claude.nope"),
        (json!({"timeouts": {"claude": {"first_byte_timeout_secs": 601}}}), "timeouts.claude.first_byte_timeout_secs"),
        (json!({"routing_strategy": "fastest"}), "routing_strategy"),
    ] {
        let (status, v) = g.api(Method::PATCH, "/api/settings", Some(patch.clone())).await;
        assert_eq!(status, 400, "{patch}");
        assert!(v["error"]["message"].as_str().unwrap().contains(needle), "{v}");
    }
    // Rejected patches changed nothing; the stored document is what a reload reads.
    g.gw.reload().unwrap();
    let (_, doc) = g.api(Method::GET, "/api/settings", None).await;
    assert_eq!(doc["breaker"]["openai"]["failure_threshold"], 3);
    assert_eq!(doc["routing_strategy"], "sticky");
}

#[tokio::test]
async fn fast_queue_and_order_endpoints() {
    let g = TestGateway::start().await;
    for n in ["a", "b", "c"] {
        g.add(n, "anthropic", "http://127.0.0.1:9", json!({})).await;
    }
    let (status, list) = g.api(Method::PUT, "/api/fast-queue", Some(json!({"endpoints": ["c", "a"]}))).await;
    assert_eq!(status, 200);
    let by = |name: &str| list.as_array().unwrap().iter().find(|e| e["name"] == name).unwrap().clone();
    assert_eq!((by("c")["fast"].clone(), by("c")["fast_sort_order"].clone()), (json!(true), json!(0)));
    assert_eq!((by("a")["fast"].clone(), by("a")["fast_sort_order"].clone()), (json!(true), json!(1)));
    assert_eq!(by("b")["fast"], false);

    // Joining with fast: true and no position goes to the end of the queue.
    let (_, b) = g.api(Method::PATCH, "/api/endpoints/b", Some(json!({"fast": true}))).await;
    assert_eq!(b["fast_sort_order"], 2);

    let (status, list) = g.api(Method::PUT, "/api/order", Some(json!({"endpoints": ["c", "b", "a"]}))).await;
    assert_eq!(status, 200);
    let names: Vec<_> = list.as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(names, ["c", "b", "a"]);

    for body in [json!({"endpoints": ["zzz"]}), json!({"endpoints": ["a", "a"]}), json!({"endpoints": "a"}), json!({})]
    {
        let (status, v) = g.api(Method::PUT, "/api/fast-queue", Some(body.clone())).await;
        assert_eq!(status, 400, "{body}: {v}");
    }
}

#[tokio::test]
async fn current_endpoint_get_and_manual_switch() {
    let g = TestGateway::start().await;
    g.add("a", "anthropic", "http://127.0.0.1:9", json!({})).await;
    g.add("o", "openai", "http://127.0.0.1:9", json!({})).await;
    g.add("off", "anthropic", "http://127.0.0.1:9", json!({"enabled": false})).await;
    let (_, cur) = g.api(Method::GET, "/api/current", None).await;
    // No request yet: nothing remembered, but the next request of each protocol starts at the
    // first enabled endpoint in order.
    let next = json!({"claude": "a", "openai": "a", "responses": "a", "gemini": "a"});
    assert_eq!(cur, json!({"claude": null, "openai": null, "responses": null, "gemini": null, "next": next}));
    let (status, cur) = g.api(Method::PUT, "/api/current", Some(json!({"protocol": "claude", "endpoint": "a"}))).await;
    assert_eq!(status, 200);
    assert_eq!(cur["claude"], "a");
    let (status, cur) = g.api(Method::PUT, "/api/current", Some(json!({"protocol": "openai", "endpoint": "o"}))).await;
    assert_eq!((status, cur["next"]["openai"].clone(), cur["next"]["claude"].clone()), (200, json!("o"), json!("a")));
    // With conversion every format can serve every protocol.
    let (status, cur) = g.api(Method::PUT, "/api/current", Some(json!({"protocol": "claude", "endpoint": "o"}))).await;
    assert_eq!((status, cur["claude"].clone()), (200, json!("o")));
    let (status, cur) = g.api(Method::PUT, "/api/current", Some(json!({"protocol": "gemini", "endpoint": "o"}))).await;
    assert_eq!((status, cur["gemini"].clone(), cur["next"]["gemini"].clone()), (200, json!("o"), json!("o")));
    for (body, want) in [
        (json!({"protocol": "claude", "endpoint": "off"}), 400),
        (json!({"protocol": "kimi", "endpoint": "a"}), 400),
        (json!({"protocol": "claude", "endpoint": "zzz"}), 404),
    ] {
        let (status, _) = g.api(Method::PUT, "/api/current", Some(body.clone())).await;
        assert_eq!(status, want, "{body}");
    }
}

#[tokio::test]
async fn admin_token_is_required_when_set_and_health_stays_open() {
    let g = TestGateway::start_with(Options { admin_token: Some("t0p-secret".into()), ..Options::default() }).await;
    let anon = reqwest::Client::new();
    let r = anon.get(format!("{}/api/endpoints", g.url)).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = anon.get(format!("{}/api/endpoints", g.url)).bearer_auth("t0p-secret-not").send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = anon.get(format!("{}/api/endpoints", g.url)).bearer_auth("t0p-secret").send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = anon.get(format!("{}/health", g.url)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"status": "ok"}));
    // The dashboard at `/` sends a visitor without a session to its login page.
    let page = anon.get(&g.url).send().await.unwrap();
    assert!(page.url().path() == "/login", "{}", page.url());
    assert!(page.text().await.unwrap().contains("Admin token"));
}

#[tokio::test]
async fn unknown_paths_are_404_with_a_hint() {
    let g = TestGateway::start().await;
    let r = g.http.get(format!("{}/wp-admin", g.url)).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.text().await.unwrap().contains("/v1/*"));
    let (status, _) = g.api(Method::GET, "/api/nothing-here", None).await;
    assert_eq!(status, 404);
}
