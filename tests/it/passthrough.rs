//! Pass-through: the client's bytes reach the upstream unchanged (unless the model is
//! rewritten), credentials are replaced, and the upstream's answer comes back as it was.

use serde_json::{Value, json};

use crate::support::gateway::{TestGateway, chat_body, claude_body};
use crate::support::mock::{self, MockUpstream, Reply};

/// A body with whitespace and key order no serializer would produce, so any re-encoding shows.
fn odd_body(model: &str, stream: bool) -> String {
    format!(
        "{{\n  \"stream\" : {stream},\"model\":\"{model}\",  \"messages\":[{{\"role\":\"user\",\"content\":\"h\\u00e9llo\"}}], \"max_tokens\": 5 }}"
    )
}

#[tokio::test]
async fn all_three_protocols_forward_bytes_unchanged_both_ways() {
    let cases = [
        (
            "anthropic",
            "/v1/messages",
            Reply::anthropic_message("hello"),
            Reply::anthropic_stream(&["hel", "lo"]),
            "/v1/messages",
        ),
        (
            "openai",
            "/v1/chat/completions",
            Reply::openai_chat("hello"),
            Reply::openai_chat_stream(&["hel", "lo"]),
            "/v1/chat/completions",
        ),
        (
            "responses",
            "/v1/responses",
            Reply::responses_message("hello"),
            Reply::responses_stream(&["hel", "lo"]),
            "/v1/responses",
        ),
    ];
    for (format, path, plain, streamed, upstream_path) in cases {
        for (stream, reply) in [(false, plain.clone()), (true, streamed.clone())] {
            let up = MockUpstream::start().await;
            let g = TestGateway::start().await;
            g.add("up", format, &up.url(), json!({})).await;
            up.push(reply.clone());
            let body = odd_body("some-model", stream);
            let r = g
                .http
                .post(format!("{}{path}?beta=true", g.url))
                .header("content-type", "application/json")
                .header("x-api-key", "client-key-must-not-leak")
                .header("authorization", "Bearer client-token-must-not-leak")
                .header("anthropic-beta", "tools-2024")
                .header("connection", "keep-alive, x-hop")
                .header("x-hop", "hop-by-hop")
                .header("cookie", "ccmesh_session=secret")
                .body(body.clone())
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{format} stream={stream}");
            assert_eq!(r.headers()["x-ccmesh-attempts"], "1");
            assert_eq!(r.headers()["x-ccmesh-endpoint"], "up");
            let got = r.bytes().await.unwrap();
            let want = match &reply {
                Reply::Full { body, .. } => body.clone(),
                Reply::Stream { chunks, .. } => chunks.iter().flat_map(|(_, c)| c.to_vec()).collect::<Vec<u8>>().into(),
                _ => unreachable!(),
            };
            assert_eq!(got, want, "{format} stream={stream}: response bytes differ");

            let seen = up.last_request().unwrap();
            assert_eq!(seen.body.as_ref(), body.as_bytes(), "{format}: request bytes differ");
            assert_eq!(seen.path, upstream_path);
            assert_eq!(seen.query.as_deref(), Some("beta=true"));
            assert_eq!(seen.header("anthropic-beta"), Some("tools-2024"));
            assert_eq!(seen.header("x-hop"), None, "headers named in Connection are hop-by-hop");
            assert_eq!(seen.header("cookie"), None);
            let secret = "sk-up-secret-key-0000";
            if format == "anthropic" {
                assert_eq!(seen.header("x-api-key"), Some(secret));
                assert_eq!(seen.header("authorization"), None);
            } else {
                assert_eq!(seen.header("authorization"), Some(format!("Bearer {secret}").as_str()));
                assert_eq!(seen.header("x-api-key"), None);
            }
        }
    }
}

#[tokio::test]
async fn anthropic_version_defaults_only_when_the_client_sent_none() {
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("up", "anthropic", &up.url(), json!({})).await;
    up.set_default(Reply::anthropic_message("ok"));
    g.post("/v1/messages", &claude_body("m", false)).await;
    assert_eq!(up.last_request().unwrap().header("anthropic-version"), Some("2023-06-01"));
    g.post_with("/v1/messages", &claude_body("m", false), &[("anthropic-version", "2026-10-21")]).await;
    assert_eq!(up.last_request().unwrap().header("anthropic-version"), Some("2026-10-21"));
}

#[tokio::test]
async fn model_map_and_at_prefix_rewrite_only_the_model() {
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("glm", "anthropic", &up.url(), json!({"model_map": {"claude-sonnet-4-5": "glm-4.6"}})).await;
    up.set_default(Reply::anthropic_message("ok"));
    let body = odd_body("claude-sonnet-4-5", false);
    let r = g.http.post(format!("{}/v1/messages", g.url)).body(body.clone()).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let sent = up.last_request().unwrap().text();
    assert_eq!(sent, body.replace("claude-sonnet-4-5", "glm-4.6"));

    let body = odd_body("@glm/claude-haiku", false);
    g.http.post(format!("{}/v1/messages", g.url)).body(body.clone()).send().await.unwrap();
    assert_eq!(up.last_request().unwrap().text(), body.replace("@glm/claude-haiku", "claude-haiku"));
}

#[tokio::test]
async fn gateway_errors_are_protocol_native() {
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    // 503 before anything is configured, in each protocol's shape.
    let r = g.post("/v1/messages", &claude_body("m", false)).await;
    assert_eq!(r.status(), 503);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["type"], "error");
    assert!(v["error"]["message"].as_str().unwrap().contains("POST /api/endpoints"));
    let r = g.post("/v1/chat/completions", &chat_body("m", false)).await;
    assert_eq!(r.status(), 503);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "server_error");

    g.add("a", "anthropic", &up.url(), json!({"models": ["claude-*"]})).await;
    g.settings(json!({"max_body_bytes": 2048})).await;
    // Malformed JSON: 400, nothing forwarded.
    let r = g.http.post(format!("{}/v1/messages", g.url)).body("{\"model\": ").send().await.unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(v["error"]["message"].as_str().unwrap().contains("not valid JSON"));
    // Too large: 413.
    let big = json!({"model": "claude-x", "messages": [{"role": "user", "content": "x".repeat(4096)}]});
    let r = g.post("/v1/messages", &big).await;
    assert_eq!(r.status(), 413);
    let v: Value = r.json().await.unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("max_body_bytes"));
    // Unknown model: 404 naming what is served.
    let r = g.post("/v1/messages", &claude_body("gpt-5", false)).await;
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "not_found_error");
    assert_eq!(v["error"]["message"], "no enabled endpoint serves model 'gpt-5'; endpoints serve: a (claude-*)");
    assert_eq!(up.request_count(), 0);
    // The gateway keeps serving.
    up.push(Reply::anthropic_message("fine"));
    assert_eq!(g.post("/v1/messages", &claude_body("claude-x", false)).await.status(), 200);
}

#[tokio::test]
async fn both_anthropic_client_auth_styles_are_accepted_and_replaced() {
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &up.url(), json!({})).await;
    up.set_default(Reply::anthropic_message("ok"));
    for header in [("x-api-key", "client"), ("authorization", "Bearer client")] {
        let r = g.post_with("/v1/messages", &claude_body("m", false), &[header]).await;
        assert_eq!(r.status(), 200);
        let seen = up.last_request().unwrap();
        assert_eq!(seen.header("x-api-key"), Some("sk-a-secret-key-0000"));
        assert_eq!(seen.header("authorization"), None);
    }
}

#[tokio::test]
async fn the_upstream_sees_its_own_host_not_the_gateways() {
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("a", "anthropic", &format!("{}/", up.url()), json!({})).await;
    up.set_default(Reply::anthropic_message("ok"));
    let r = g.post_with("/v1/messages", &claude_body("m", false), &[("host", "gateway.example:9")]).await;
    assert_eq!(r.status(), 200);
    let seen = up.last_request().unwrap();
    assert_eq!(seen.header_all("host"), vec![format!("127.0.0.1:{}", up.addr().port())]);
}

#[tokio::test]
async fn admin_token_is_never_forwarded() {
    let up = MockUpstream::start().await;
    let g = TestGateway::start_with(crate::support::gateway::Options {
        admin_token: Some("admin-t0ken".into()),
        ..Default::default()
    })
    .await;
    g.add("o", "openai", &up.url(), json!({})).await;
    up.set_default(Reply::openai_chat("ok"));
    // The harness client sends the admin token on every request, the proxy included.
    let r = g.post("/v1/chat/completions", &chat_body("m", false)).await;
    assert_eq!(r.status(), 200);
    let seen = up.last_request().unwrap();
    assert!(!format!("{:?}", seen.headers).contains("admin-t0ken"));
}

#[tokio::test]
async fn models_list_in_both_shapes() {
    let g = TestGateway::start().await;
    g.add(
        "a",
        "anthropic",
        "http://127.0.0.1:9",
        json!({"models": ["claude-*", "claude-opus-4-8"], "model_map": {"claude-sonnet-4-5": "glm-4.6"}}),
    )
    .await;
    g.add("o", "openai", "http://127.0.0.1:9", json!({"models": ["gpt-5"]})).await;
    let v: Value = g.http.get(format!("{}/v1/models", g.url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(v["object"], "list");
    let ids: Vec<&str> = v["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["claude-opus-4-8", "claude-sonnet-4-5", "gpt-5"]);
    let v: Value = g
        .http
        .get(format!("{}/v1/models", g.url))
        .header("anthropic-version", "2023-06-01")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["has_more"], false);
    assert_eq!(v["data"][0]["type"], "model");
}

#[tokio::test]
async fn other_v1_paths_pass_through_and_their_404_is_neutral() {
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("o", "openai", &format!("{}/v1", up.url()), json!({})).await;
    up.push(Reply::json(200, json!({"object": "list", "data": [{"embedding": [0.1]}]})));
    let r = g.post("/v1/embeddings", &json!({"model": "text-embedding-3-small", "input": "x"})).await;
    assert_eq!(r.status(), 200);
    assert_eq!(up.last_request().unwrap().path, "/v1/embeddings");
    // Scanners probing unknown paths must not trip anything.
    up.set_default(Reply::status(404));
    for _ in 0..10 {
        let r = g.http.get(format!("{}/v1/no/such/thing", g.url)).send().await.unwrap();
        assert_eq!(r.status(), 404);
        assert_eq!(r.headers()["x-ccmesh-attempts"], "1");
    }
    let h = g.health("o").await;
    assert_eq!(h["circuit"], "closed");
    assert_eq!(h["consecutive_failures"], 0);
}

#[tokio::test]
async fn real_client_fixtures_reach_the_upstream_unchanged() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/clients");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        panic!("fixtures not found at {}", dir.display());
    };
    let mut seen_any = 0;
    for entry in entries {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let fixture: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let up = MockUpstream::start().await;
        let g = TestGateway::start().await;
        let (format, reply) = match fixture["path"].as_str().unwrap() {
            "/v1/messages" => ("anthropic", Reply::anthropic_stream(&["ok"])),
            "/v1/chat/completions" => ("openai", Reply::openai_chat_stream(&["ok"])),
            "/v1/responses" => ("responses", Reply::responses_stream(&["ok"])),
            other => panic!("unexpected fixture path {other}"),
        };
        g.add("up", format, &up.url(), json!({})).await;
        up.push(reply);
        let body = serde_json::to_vec_pretty(&fixture["body"]).unwrap();
        let mut req = g.http.post(format!("{}{}", g.url, fixture["path"].as_str().unwrap())).body(body.clone());
        for (k, v) in fixture["headers"].as_object().unwrap() {
            if !matches!(k.as_str(), "host" | "content-length" | "connection") {
                req = req.header(k.as_str(), v.as_str().unwrap());
            }
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 200, "{}", path.display());
        r.bytes().await.unwrap();
        assert_eq!(up.last_request().unwrap().body.as_ref(), body.as_slice(), "{}", path.display());
        seen_any += 1;
    }
    assert_eq!(seen_any, 5);
    let _ = mock::INPUT_TOKENS;
}

/// Proxy requests go from the connection straight to the proxy handler, past the router
/// (`server::straight_to_proxy`): every request answers exactly as the router would have it —
/// the proxy's paths, and the neighbours the router keeps for itself (the model lists, a bare
/// `/v1/`, `HEAD`).
#[tokio::test]
async fn proxy_requests_answer_alike_straight_from_the_connection_and_through_the_router() {
    use tower_service::Service;
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("up", "anthropic", &up.url(), json!({"models": ["claude-*"]})).await;
    let claude = claude_body("claude-x", false).to_string();
    let gemini = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}).to_string();
    let cases: [(&str, &str, &str); 12] = [
        ("POST", "/v1/messages", &claude),
        ("POST", "/v1/messages", "{not json"),
        ("POST", "/v1/chat/completions", r#"{"model":"gpt-x","messages":[]}"#),
        ("POST", "/v1/messages/count_tokens", &claude),
        ("GET", "/v1/models", ""),
        ("POST", "/v1/models", ""),
        ("GET", "/v1/models/claude-x", ""),
        ("GET", "/v1/", ""),
        ("HEAD", "/v1/messages", ""),
        ("GET", "/v1beta/models", ""),
        ("POST", "/v1beta/models/gemini-x:generateContent", &gemini),
        ("GET", "/v1beta/", ""),
    ];
    // Request ids, and the mock's message ids, differ between any two requests.
    let ids = regex::Regex::new("(req|msg_mock)[0-9a-zA-Z_-]+").unwrap();
    let comparable = |b: &[u8]| ids.replace_all(&String::from_utf8_lossy(b), "$1").into_owned();
    for (method, path, body) in cases {
        let straight = ccmesh::server::straight_to_proxy(&method.parse().unwrap(), path);
        // Through the router, as before: the same gateway, the same request.
        up.push(Reply::anthropic_message("hello"));
        let request = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .header("host", "127.0.0.1")
            .body(axum::body::Body::from(body.to_string()))
            .unwrap();
        let routed = ccmesh::server::router(g.gw.clone()).call(request).await.unwrap();
        let routed_status = routed.status().as_u16();
        let routed_body = axum::body::to_bytes(routed.into_body(), 1 << 20).await.unwrap();
        // From a client connection: straight to the proxy when `straight_to_proxy` says so.
        up.push(Reply::anthropic_message("hello"));
        let served = g
            .http
            .request(method.parse().unwrap(), format!("{}{path}", g.url))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let served_status = served.status().as_u16();
        let served_body = served.bytes().await.unwrap();
        assert_eq!(served_status, routed_status, "{method} {path} (straight to the proxy: {straight})");
        assert_eq!(comparable(&served_body), comparable(&routed_body), "{method} {path}");
    }
    for (method, path, straight) in [
        ("POST", "/v1/messages", true),
        ("POST", "/v1beta/models/g:streamGenerateContent", true),
        ("GET", "/v1/models/claude-x", true),
        ("GET", "/v1/models", false),
        ("GET", "/v1beta/models", false),
        ("GET", "/v1/", false),
        ("GET", "/v1", false),
        ("HEAD", "/v1/messages", false),
        ("GET", "/api/status", false),
        ("GET", "/health", false),
    ] {
        assert_eq!(ccmesh::server::straight_to_proxy(&method.parse().unwrap(), path), straight, "{method} {path}");
    }
}

/// Text of `len` bytes that never repeats within itself, so a slice sent twice, out of place or
/// lost shows in the comparison.
fn unrepeating_text(len: usize) -> String {
    let mut text = String::with_capacity(len + 16);
    let mut i = 0u64;
    while text.len() < len {
        text.push_str(&format!("{i:x}."));
        i += 1;
    }
    text.truncate(len);
    text
}

/// The gateway hands an answer to the client's connection a few KiB at a time (so that the
/// connection's write buffer never grows): answers many times that size, whole or streamed
/// (one event of 200 KB, and a burst of events in one chunk), arrive byte for byte, and the
/// next request is answered after them.
#[tokio::test]
async fn answers_of_many_writes_arrive_whole_and_the_next_request_is_served() {
    let up = MockUpstream::start().await;
    let g = TestGateway::start().await;
    g.add("up", "anthropic", &up.url(), json!({})).await;
    let whole = Reply::anthropic_message(&unrepeating_text(1_000_000));
    let events = mock::anthropic_stream_events(&[
        &unrepeating_text(200_000),
        &unrepeating_text(900),
        &unrepeating_text(1_500),
        &unrepeating_text(3_000),
        &unrepeating_text(5),
    ]);
    // The 2nd to 4th deltas in one chunk: frames that are ready together.
    let burst = events[4..7].concat();
    let mut chunks: Vec<String> = events[..4].to_vec();
    chunks.push(burst);
    chunks.extend_from_slice(&events[7..]);
    let streamed = Reply::sse(chunks).with_header("content-type", "text/event-stream; charset=utf-8");
    for (reply, stream) in [(whole, false), (streamed, true)] {
        up.push(reply.clone());
        let want = match &reply {
            Reply::Full { body, .. } => body.to_vec(),
            Reply::Stream { chunks, .. } => chunks.iter().flat_map(|(_, c)| c.to_vec()).collect(),
            _ => unreachable!(),
        };
        let answer = async {
            let r = g.post("/v1/messages", &claude_body("m", stream)).await;
            assert_eq!(r.status(), 200, "stream={stream}");
            r.bytes().await.unwrap()
        };
        let got = tokio::time::timeout(std::time::Duration::from_secs(30), answer).await.expect("the answer stalled");
        assert_eq!(got.len(), want.len(), "stream={stream}");
        assert!(got == want, "stream={stream}: the bytes differ");
    }
    up.push(Reply::anthropic_message("after"));
    let r = g.post("/v1/messages", &claude_body("m", false)).await;
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("after"));
}
