//! Prices through the admin API (`/api/prices`) and the per-endpoint price multiplier, against a
//! real gateway and a real SQLite file.

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::gateway::{Options, TestGateway, http_client};

fn find<'a>(list: &'a Value, model: &str) -> Vec<&'a Value> {
    list.as_array().unwrap().iter().filter(|e| e["model"] == model).collect()
}

#[tokio::test]
async fn the_effective_table_lists_builtin_prices() {
    let g = TestGateway::start().await;
    let (status, list) = g.api(Method::GET, "/api/prices", None).await;
    assert_eq!(status, 200, "{list}");
    let sonnet = find(&list, "claude-sonnet-4-5");
    assert_eq!(sonnet.len(), 1);
    assert_eq!(
        sonnet[0],
        &json!({"model": "claude-sonnet-4-5", "input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75, "source": "builtin"})
    );
    assert!(list.as_array().unwrap().iter().all(|e| e["source"] == "builtin"));
    assert!(!find(&list, "gpt-4o").is_empty());
}

#[tokio::test]
async fn an_override_replaces_the_builtin_price_until_deleted() {
    let g = TestGateway::start().await;
    let custom = json!({"input": 1.5, "output": 7.5, "cache_read": 0.15, "cache_write": 1.875});
    let (status, entry) = g.api(Method::PUT, "/api/prices/claude-sonnet-4-5", Some(custom)).await;
    assert_eq!(status, 200, "{entry}");
    assert_eq!(
        entry,
        json!({"model": "claude-sonnet-4-5", "input": 1.5, "output": 7.5, "cache_read": 0.15, "cache_write": 1.875, "source": "custom"})
    );
    // The snapshot the request path reads has it, dated names included.
    let price = g.gw.snapshot().prices.price("claude-sonnet-4-5-20250929").unwrap();
    assert_eq!(price.input, 1.5);
    // One row per model in the listing, marked custom.
    let (_, list) = g.api(Method::GET, "/api/prices", None).await;
    let rows = find(&list, "claude-sonnet-4-5");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["source"], "custom");
    assert_eq!(g.gw.store.list_prices().unwrap().len(), 1);

    // Back to the built-in price.
    let (status, _) = g.api(Method::DELETE, "/api/prices/claude-sonnet-4-5", None).await;
    assert_eq!(status, 204);
    assert_eq!(g.gw.snapshot().prices.price("claude-sonnet-4-5").unwrap().input, 3.0);
    let (_, list) = g.api(Method::GET, "/api/prices", None).await;
    assert_eq!(find(&list, "claude-sonnet-4-5")[0]["source"], "builtin");
    // Nothing left to delete: 404, for a built-in model and for an unknown one alike.
    for model in ["claude-sonnet-4-5", "no-such-model"] {
        let (status, body) = g.api(Method::DELETE, &format!("/api/prices/{model}"), None).await;
        assert_eq!(status, 404, "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("no custom price"), "{body}");
    }
}

#[tokio::test]
async fn new_models_globs_and_names_with_slashes() {
    let g = TestGateway::start().await;
    // Unknown until priced.
    assert_eq!(g.gw.snapshot().prices.price("my-relay-large"), None);
    let (status, entry) = g.api(Method::PUT, "/api/prices/my-relay-*", Some(json!({"input": 2, "output": 6}))).await;
    assert_eq!(status, 200, "{entry}");
    // Omitted cache prices are the input price.
    assert_eq!((entry["cache_read"].as_f64(), entry["cache_write"].as_f64()), (Some(2.0), Some(2.0)));
    assert_eq!(g.gw.snapshot().prices.price("my-relay-large").unwrap().output, 6.0);
    // A model name containing '/' travels percent-encoded.
    let (status, entry) =
        g.api(Method::PUT, "/api/prices/openrouter%2Fqwen-max", Some(json!({"input": 1, "output": 3}))).await;
    assert_eq!(status, 200, "{entry}");
    assert_eq!(entry["model"], "openrouter/qwen-max");
    assert!(g.gw.snapshot().prices.price("OpenRouter/Qwen-Max").is_some());
    // Re-putting a name in another case replaces it (names match case-insensitively).
    let (status, _) = g.api(Method::PUT, "/api/prices/MY-RELAY-*", Some(json!({"input": 3, "output": 6}))).await;
    assert_eq!(status, 200);
    let models: Vec<String> = g.gw.store.list_prices().unwrap().into_iter().map(|(m, _)| m).collect();
    assert_eq!(models, ["MY-RELAY-*", "openrouter/qwen-max"]);
    assert_eq!(g.gw.snapshot().prices.price("my-relay-large").unwrap().input, 3.0);
}

#[tokio::test]
async fn invalid_prices_are_400s_naming_the_field() {
    let g = TestGateway::start().await;
    let cases: Vec<(Value, &str)> = vec![
        (json!({"input": -1, "output": 1}), "input"),
        (json!({"input": 1}), "output"),
        (json!({"input": 1, "output": "15"}), "output"),
        (json!({"input": 1, "output": 1, "cache_read": -0.1}), "cache_read"),
        (json!({"input": 1, "output": 1, "cache_write": null}), "cache_write"),
        (json!({"input": 1, "output": 1, "cache": 1}), "cache"),
        (json!([1, 2]), "body"),
    ];
    for (body, field) in cases {
        let (status, err) = g.api(Method::PUT, "/api/prices/x", Some(body.clone())).await;
        assert_eq!(status, 400, "{body}: {err}");
        assert_eq!(err["error"]["field"], field, "{body}: {err}");
        assert!(err["error"]["message"].as_str().unwrap().starts_with(field), "{err}");
    }
    let r = g.http.put(format!("{}/api/prices/x", g.url)).body("{not json").send().await.unwrap();
    assert_eq!(r.status(), 400);
    let (status, err) = g.api(Method::PUT, "/api/prices/%20", Some(json!({"input": 1, "output": 1}))).await;
    assert_eq!((status, err["error"]["field"].as_str()), (400, Some("model")), "{err}");
    // Nothing was stored.
    assert!(g.gw.store.list_prices().unwrap().is_empty());
}

#[tokio::test]
async fn the_admin_token_guards_prices() {
    let g =
        TestGateway::start_with(Options { admin_token: Some("t0ken-for-prices".into()), ..Options::default() }).await;
    let anonymous = http_client();
    let r = anonymous.get(format!("{}/api/prices", g.url)).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r =
        anonymous.put(format!("{}/api/prices/x", g.url)).json(&json!({"input": 1, "output": 1})).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(g.gw.store.list_prices().unwrap().is_empty());
    let (status, _) = g.api(Method::GET, "/api/prices", None).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn price_multiplier_is_validated_shown_and_persisted() {
    let g = TestGateway::start().await;
    let plain = g.add("plain", "anthropic", "http://127.0.0.1:9", json!({})).await;
    assert_eq!(plain["price_multiplier"], 1.0);
    let relay = g.add("relay", "openai", "http://127.0.0.1:9", json!({"price_multiplier": 1.5})).await;
    assert_eq!(relay["price_multiplier"], 1.5);

    for bad in [json!(0), json!(-1), json!(100.5), json!("2"), Value::Null] {
        let (status, err) =
            g.api(Method::PATCH, "/api/endpoints/relay", Some(json!({"price_multiplier": bad.clone()}))).await;
        assert_eq!(status, 400, "{bad}: {err}");
        assert_eq!(err["error"]["field"], "price_multiplier", "{err}");
    }
    let (status, patched) = g.api(Method::PATCH, "/api/endpoints/relay", Some(json!({"price_multiplier": 2}))).await;
    assert_eq!(status, 200, "{patched}");
    assert_eq!(patched["price_multiplier"], 2.0);
    // Other edits keep it.
    let (_, patched) = g.api(Method::PATCH, "/api/endpoints/relay", Some(json!({"enabled": false}))).await;
    assert_eq!(patched["price_multiplier"], 2.0);
    // The request path's snapshot and the database agree.
    assert_eq!(g.gw.snapshot().find("relay").unwrap().config.price_multiplier, 2.0);
    assert_eq!(g.gw.store.get_endpoint("relay").unwrap().price_multiplier, 2.0);
    let (_, got) = g.api(Method::GET, "/api/endpoints/plain", None).await;
    assert_eq!(got["price_multiplier"], 1.0);
}

/// A record is priced by the model that answered; a name the price table does not know (a
/// relay's own, say) falls back to the model sent, then to the one asked for, then to the
/// default price, and with none of them the cost is unknown rather than 0.
#[tokio::test]
async fn a_record_is_priced_by_the_answered_then_the_sent_then_the_asked_model_then_the_default() {
    use crate::support::gateway::claude_body;
    use crate::support::mock::{INPUT_TOKENS, MockUpstream, Reply, anthropic_message_body};

    let upstream = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &upstream.url(), json!({"model_map": {"alias-x": "p-sent", "p-asked": "not-priced"}}))
        .await;
    // Input-only prices that say which one applied: $1, $2, $4 (and $8 by default) per million.
    for (model, input) in [("p-answered", 1.0), ("p-sent", 2.0), ("p-asked", 4.0)] {
        let price = json!({"input": input, "output": 0, "cache_read": 0, "cache_write": 0});
        let (status, body) = g.api(Method::PUT, &format!("/api/prices/{model}"), Some(price)).await;
        assert_eq!(status, 200, "{body}");
    }
    let cost_of = |input: f64| INPUT_TOKENS as f64 * input / 1e6;
    let priced = |asked: &'static str, answered: &'static str| {
        let mut answer = anthropic_message_body("hi");
        answer["model"] = json!(answered);
        upstream.push(Reply::json(200, answer));
        let g = &g;
        async move {
            let r = g.post("/v1/messages", &claude_body(asked, false)).await;
            assert_eq!(r.status(), 200);
            let id = r.headers()["x-ccmesh-request-id"].to_str().unwrap().to_string();
            let _ = r.bytes().await.unwrap();
            g.record(&id).await["cost_usd"].as_f64()
        }
    };
    assert_eq!(priced("alias-x", "p-answered").await, Some(cost_of(1.0)), "the model that answered");
    assert_eq!(priced("alias-x", "relay-name").await, Some(cost_of(2.0)), "then the model sent");
    assert_eq!(priced("p-asked", "relay-name").await, Some(cost_of(4.0)), "then the model asked for");
    assert_eq!(priced("nothing-known", "relay-name").await, None, "no price: the cost is unknown");
    g.settings(json!({"default_price": {"input": 8, "output": 0}})).await;
    assert_eq!(priced("nothing-known", "relay-name").await, Some(cost_of(8.0)), "then the default price");
}
