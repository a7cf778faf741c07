//! The dashboard over real HTTP: pages and assets with their content types and security headers,
//! the login session (a signed, expiring, HttpOnly cookie — never the token), the cookie on
//! `/api/*` and `/api/events`, CSRF on cookie-authenticated writes, logout. The browser tests in
//! a real headless Chromium are in `dashboard/browser.rs`.

mod browser;

use std::time::Duration;

use futures_util::StreamExt;
use reqwest::header::{CONTENT_TYPE, LOCATION, SET_COOKIE};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::gateway::{Options, TestGateway};

const TOKEN: &str = "dashboard-test-admin-token-0123456789";

/// A client like a browser's first visit: no bearer token, no redirects followed, no cookies
/// kept (the tests pass them by hand).
fn browser_client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

async fn start_with_token(manual_clock: bool) -> TestGateway {
    TestGateway::start_with(Options { manual_clock, admin_token: Some(TOKEN.into()), ..Options::default() }).await
}

/// Log in; returns the session cookie's `name=value` and the whole `Set-Cookie` header.
async fn login(g: &TestGateway, c: &reqwest::Client) -> (String, String) {
    let r = c
        .post(format!("{}/login", g.url))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("token={TOKEN}&next=%2Fendpoints"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()[LOCATION], "/endpoints");
    let set = r.headers()[SET_COOKIE].to_str().unwrap().to_string();
    let pair = set.split(';').next().unwrap().trim().to_string();
    (pair, set)
}

/// The CSRF token the page embeds for this session.
async fn page_csrf(g: &TestGateway, c: &reqwest::Client, cookie: &str) -> String {
    let html =
        c.get(format!("{}/settings", g.url)).header("cookie", cookie).send().await.unwrap().text().await.unwrap();
    let at = html.find("name=\"ccmesh-csrf\" content=\"").expect("csrf meta") + "name=\"ccmesh-csrf\" content=\"".len();
    let token = &html[at..at + html[at..].find('"').unwrap()];
    assert_eq!(token.len(), 64, "{token}");
    token.to_string()
}

#[tokio::test]
async fn pages_and_assets_are_served_with_their_types_and_a_strict_policy() {
    let g = TestGateway::start().await;
    g.add("alpha", "anthropic", "http://127.0.0.1:9", json!({})).await;
    let c = browser_client();
    for path in ["/", "/endpoints", "/requests", "/requests/0000019ace5f0c000000", "/stats", "/settings"] {
        let r = c.get(format!("{}{path}", g.url)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(r.headers()[CONTENT_TYPE], "text/html; charset=utf-8", "{path}");
        let csp = r.headers()["content-security-policy"].to_str().unwrap().to_string();
        assert!(csp.contains("default-src 'none'") && csp.contains("script-src 'self'"), "{csp}");
        assert_eq!(r.headers()["x-frame-options"], "DENY");
        let html = r.text().await.unwrap();
        assert!(html.starts_with("<!doctype html>"), "{path}");
        // Nothing from another host: no absolute URL in any src or href.
        assert!(!html.contains("src=\"http") && !html.contains("href=\"http"), "{path}");
        assert!(!html.contains("/logout"), "no logout without a token: {path}");
    }
    // The settings page shows ranges and seed defaults, filled with the current values.
    let html = c.get(format!("{}/settings", g.url)).send().await.unwrap().text().await.unwrap();
    assert!(html.contains("name=\"breaker.claude.failure_threshold\""));
    assert!(html.contains("<small class=\"default\">default 8</small>"));
    assert!(html.contains("name=\"transient_retry_delay_ms\" id=\"f-transient_retry_delay_ms\" inputmode=\"decimal\" step=\"1\" data-step=\"1\" min=\"0\" max=\"10000\" value=\"0\""), "the test gateway's 0 ms retry delay is shown");
    // The requests page lists the endpoints in its filter.
    let html = c.get(format!("{}/requests", g.url)).send().await.unwrap().text().await.unwrap();
    assert!(html.contains("<option value=\"alpha\">alpha</option>"));

    let mut assets = 0;
    for (name, content_type, bytes) in ccmesh::dashboard::ASSETS {
        let r = c.get(format!("{}/assets/{name}", g.url)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{name}");
        assert_eq!(r.headers()[CONTENT_TYPE], *content_type, "{name}");
        let etag = r.headers()["etag"].to_str().unwrap().to_string();
        assert_eq!(r.bytes().await.unwrap().as_ref(), *bytes);
        let again = c.get(format!("{}/assets/{name}", g.url)).header("if-none-match", &etag).send().await.unwrap();
        assert_eq!(again.status(), 304, "{name}");
        if name.ends_with(".js") {
            let text = std::str::from_utf8(bytes).unwrap();
            // Modules import each other by relative path only; nothing from the network.
            let without_namespace = text.replace("http://www.w3.org/2000/svg", "");
            assert!(
                !without_namespace.contains("http://") && !without_namespace.contains("https://"),
                "{name} names a URL"
            );
        }
        assets += 1;
    }
    assert!(assets >= 9);
    assert_eq!(c.get(format!("{}/assets/nope.js", g.url)).send().await.unwrap().status(), 404);
    assert_eq!(c.get(format!("{}/favicon.ico", g.url)).send().await.unwrap().headers()[CONTENT_TYPE], "image/svg+xml");
    // Without a token there is nothing to log in to.
    let r = c.get(format!("{}/login?next=%2Fstats", g.url)).send().await.unwrap();
    assert_eq!((r.status(), r.headers()[LOCATION].to_str().unwrap()), (StatusCode::SEE_OTHER, "/stats"));
}

#[tokio::test]
async fn without_a_token_cross_site_writes_are_refused_and_others_pass() {
    let g = TestGateway::start().await;
    let c = browser_client();
    let host = g.url.trim_start_matches("http://").to_string();
    let body = json!({"name": "x", "format": "anthropic", "base_url": "http://127.0.0.1:9"}).to_string();
    let post = |headers: &[(&str, &str)]| {
        let mut r = c.post(format!("{}/api/endpoints", g.url)).body(body.clone());
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r.send()
    };
    let r = post(&[("origin", "https://evil.example"), ("content-type", "text/plain")]).await.unwrap();
    assert_eq!(r.status(), 403);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "forbidden");
    assert_eq!(post(&[("sec-fetch-site", "cross-site")]).await.unwrap().status(), 403);
    // Reads stay open; the page itself (same origin) and non-browser clients may write.
    let r = c.get(format!("{}/api/endpoints", g.url)).header("origin", "https://evil.example").send().await.unwrap();
    assert_eq!(r.status(), 200);
    let origin = format!("http://{host}");
    assert_eq!(post(&[("origin", &origin), ("sec-fetch-site", "same-origin")]).await.unwrap().status(), 201);
    assert_eq!(g.api(Method::DELETE, "/api/endpoints/x", None).await.0, 204);
}

#[tokio::test]
async fn with_a_token_pages_redirect_to_the_login_and_a_wrong_token_is_refused() {
    let g = start_with_token(false).await;
    let c = browser_client();
    let r = c.get(format!("{}/", g.url)).send().await.unwrap();
    assert_eq!((r.status(), r.headers()[LOCATION].to_str().unwrap()), (StatusCode::SEE_OTHER, "/login"));
    let r = c.get(format!("{}/settings?x=1", g.url)).send().await.unwrap();
    assert_eq!(r.headers()[LOCATION], "/login?next=%2Fsettings%3Fx%3D1");
    let r = c.get(format!("{}/login?next=%2Fsettings", g.url)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()[CONTENT_TYPE], "text/html; charset=utf-8");
    let html = r.text().await.unwrap();
    assert!(html.contains("name=\"next\" value=\"/settings\""));
    assert!(html.contains("type=\"password\""));
    // Assets are public: the login page needs its stylesheet.
    assert_eq!(c.get(format!("{}/assets/style.css", g.url)).send().await.unwrap().status(), 200);

    for token in ["wrong", "", &TOKEN[..TOKEN.len() - 1]] {
        let r = c
            .post(format!("{}/login", g.url))
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(format!("token={token}&next=%2F"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{token:?}");
        assert!(r.headers().get(SET_COOKIE).is_none());
        assert!(r.text().await.unwrap().contains("id=\"login-error\""));
    }
    // `next` never leaves the site.
    let r = c
        .post(format!("{}/login", g.url))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("token={TOKEN}&next=%2F%2Fevil.example"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()[LOCATION], "/");
}

#[tokio::test]
async fn the_session_cookie_is_signed_httponly_and_works_on_the_api_and_events() {
    let g = start_with_token(false).await;
    let c = browser_client();
    let (cookie, set) = login(&g, &c).await;
    assert!(set.contains("HttpOnly"), "{set}");
    assert!(set.contains("SameSite=Strict"), "{set}");
    assert!(set.contains("Path=/"), "{set}");
    assert!(set.contains("Max-Age=43200"), "12 hours: {set}");
    assert!(!set.contains(TOKEN), "the cookie must not carry the token: {set}");
    assert!(cookie.starts_with("ccmesh_session=v1."), "{cookie}");

    // Pages open, with a logout form and the page's CSRF token.
    let r = c.get(format!("{}/", g.url)).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let html = r.text().await.unwrap();
    assert!(html.contains("action=\"/logout\""));
    assert!(!html.contains(TOKEN));
    let csrf = page_csrf(&g, &c, &cookie).await;
    // Logged in already: /login goes to next.
    let r = c.get(format!("{}/login?next=%2Fstats", g.url)).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(r.headers()[LOCATION], "/stats");

    // Reads with the cookie.
    for path in ["/api/endpoints", "/api/health", "/api/settings", "/api/stats", "/metrics"] {
        let r = c.get(format!("{}{path}", g.url)).header("cookie", &cookie).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    // The EventSource: the stream opens with `hello`.
    let r = c.get(format!("{}/api/events", g.url)).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()[CONTENT_TYPE].to_str().unwrap().starts_with("text/event-stream"));
    let mut stream = r.bytes_stream();
    let first = tokio::time::timeout(Duration::from_secs(5), stream.next()).await.unwrap().unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("event: hello"), "{first:?}");
    drop(stream);

    // Without any credential, or with the bearer token, everything is as before.
    assert_eq!(c.get(format!("{}/api/endpoints", g.url)).send().await.unwrap().status(), 401);
    assert_eq!(c.get(format!("{}/api/events", g.url)).send().await.unwrap().status(), 401);
    let (status, _) = g.api(Method::GET, "/api/endpoints", None).await;
    assert_eq!(status, 200);

    // Writes: every state-changing method needs the CSRF header with the cookie.
    let endpoint = json!({"name": "alpha", "format": "anthropic", "base_url": "http://127.0.0.1:9"});
    let send = |method: Method, path: &str, body: Option<Value>, csrf: Option<&str>| {
        let mut r = c.request(method, format!("{}{path}", g.url)).header("cookie", &cookie);
        if let Some(b) = body {
            r = r.header(CONTENT_TYPE, "application/json").body(b.to_string());
        }
        if let Some(t) = csrf {
            r = r.header("x-ccmesh-csrf", t);
        }
        r.send()
    };
    let wrong = "0".repeat(64);
    let cases: Vec<(Method, &str, Option<Value>, StatusCode)> = vec![
        (Method::POST, "/api/endpoints", Some(endpoint.clone()), StatusCode::CREATED),
        (Method::PATCH, "/api/endpoints/alpha", Some(json!({"enabled": false})), StatusCode::OK),
        (Method::PUT, "/api/fast-queue", Some(json!({"endpoints": ["alpha"]})), StatusCode::OK),
        (Method::PATCH, "/api/settings", Some(json!({"retention_days": 7})), StatusCode::OK),
        (Method::DELETE, "/api/endpoints/alpha", None, StatusCode::NO_CONTENT),
    ];
    for (method, path, body, ok) in cases {
        for bad in [None, Some(""), Some(wrong.as_str())] {
            let r = send(method.clone(), path, body.clone(), bad).await.unwrap();
            assert_eq!(r.status(), 403, "{method} {path} with csrf {bad:?}");
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["error"]["type"], "forbidden");
            assert!(v["error"]["message"].as_str().unwrap().contains("x-ccmesh-csrf"));
        }
        let r = send(method.clone(), path, body.clone(), Some(&csrf)).await.unwrap();
        assert_eq!(r.status(), ok, "{method} {path}: {}", r.text().await.unwrap());
    }
    let (_, settings) = g.api(Method::GET, "/api/settings", None).await;
    assert_eq!(settings["retention_days"], 7);

    // Another session's CSRF token does not fit this one.
    let (other_cookie, _) = login(&g, &c).await;
    let other_csrf = page_csrf(&g, &c, &other_cookie).await;
    assert_ne!(other_csrf, csrf);
    let r = send(Method::PATCH, "/api/settings", Some(json!({"retention_days": 8})), Some(&other_csrf)).await.unwrap();
    assert_eq!(r.status(), 403);
}

#[tokio::test]
async fn tampered_foreign_and_expired_cookies_are_refused() {
    let g = start_with_token(true).await;
    let c = browser_client();
    let (cookie, _) = login(&g, &c).await;
    let value = cookie.trim_start_matches("ccmesh_session=");
    let parts: Vec<&str> = value.split('.').collect();
    assert_eq!(parts.len(), 4, "{value}");
    let later: u64 = parts[1].parse::<u64>().unwrap() + 365 * 86_400;
    let mut flipped = parts[3].to_string().into_bytes();
    flipped[0] = if flipped[0] == b'a' { b'b' } else { b'a' };
    let tampered = [
        format!("ccmesh_session=v1.{later}.{}.{}", parts[2], parts[3]),
        format!("ccmesh_session=v1.{}.{}.{}", parts[1], parts[2], String::from_utf8(flipped).unwrap()),
        format!("ccmesh_session=v1.{}.{}.{}", parts[1], "f".repeat(32), parts[3]),
        format!("ccmesh_session={TOKEN}"),
        "ccmesh_session=".to_string(),
    ];
    for bad in &tampered {
        let r = c.get(format!("{}/api/endpoints", g.url)).header("cookie", bad).send().await.unwrap();
        assert_eq!(r.status(), 401, "{bad}");
        let r = c.get(format!("{}/endpoints", g.url)).header("cookie", bad).send().await.unwrap();
        assert_eq!(r.status(), 303, "{bad}");
        assert!(r.headers()[SET_COOKIE].to_str().unwrap().contains("Max-Age=0"), "a bad cookie is cleared");
    }
    // A cookie from a gateway with another token is worthless here.
    let other =
        TestGateway::start_with(Options { admin_token: Some("another-token".into()), ..Options::default() }).await;
    let r = c
        .post(format!("{}/login", other.url))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body("token=another-token")
        .send()
        .await
        .unwrap();
    let foreign = r.headers()[SET_COOKIE].to_str().unwrap().split(';').next().unwrap().to_string();
    assert_eq!(
        c.get(format!("{}/api/health", other.url)).header("cookie", &foreign).send().await.unwrap().status(),
        200
    );
    assert_eq!(c.get(format!("{}/api/health", g.url)).header("cookie", &foreign).send().await.unwrap().status(), 401);

    // Valid until 12 hours have passed.
    assert_eq!(c.get(format!("{}/api/health", g.url)).header("cookie", &cookie).send().await.unwrap().status(), 200);
    g.clock().advance(Duration::from_secs(12 * 3600 - 60));
    assert_eq!(c.get(format!("{}/api/health", g.url)).header("cookie", &cookie).send().await.unwrap().status(), 200);
    g.clock().advance(Duration::from_secs(60));
    let r = c.get(format!("{}/api/health", g.url)).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let v: Value = r.json().await.unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("expired"), "{v}");
    assert_eq!(c.get(format!("{}/api/events", g.url)).header("cookie", &cookie).send().await.unwrap().status(), 401);
    let r = c.get(format!("{}/", g.url)).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(r.headers()[LOCATION], "/login");
}

#[tokio::test]
async fn logout_revokes_the_session_and_clears_the_cookie() {
    let g = start_with_token(false).await;
    let c = browser_client();
    let (cookie, _) = login(&g, &c).await;
    let csrf = page_csrf(&g, &c, &cookie).await;
    // Logout is a state change too: without the page's token it is refused.
    let r = c
        .post(format!("{}/logout", g.url))
        .header("cookie", &cookie)
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body("csrf=nope")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(c.get(format!("{}/api/health", g.url)).header("cookie", &cookie).send().await.unwrap().status(), 200);

    let r = c
        .post(format!("{}/logout", g.url))
        .header("cookie", &cookie)
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()[LOCATION], "/login");
    let set = r.headers()[SET_COOKIE].to_str().unwrap();
    assert!(set.starts_with("ccmesh_session=;") && set.contains("Max-Age=0"), "{set}");
    // A copy of the cookie no longer works either.
    let r = c.get(format!("{}/api/health", g.url)).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let v: Value = r.json().await.unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("logged out"), "{v}");
    assert_eq!(c.get(format!("{}/", g.url)).header("cookie", &cookie).send().await.unwrap().status(), 303);
}
