//! The dashboard, served by the binary at `/`: server-rendered pages (layout, navigation, forms,
//! the settings form with its ranges and defaults) plus small hand-written ES modules that fetch
//! the admin API and listen to `/api/events`. Every asset is compiled into the binary
//! (`include_str!`/`include_bytes!`); no page loads anything from another host, and the
//! Content-Security-Policy on every page says so to the browser too.
//!
//! Pages: `/` overview, `/endpoints`, `/requests`, `/requests/{id}` (decision trail), `/stats`,
//! `/settings`, `/keys` (client keys), `/clients` (point Claude Code, Codex, Gemini CLI at the gateway), `/login` (only when an admin token is set), `POST /logout`.
//!
//! Access: without an admin token the pages are open (the gateway then listens on loopback
//! only). With one, every page needs the signed session cookie of `admin::session`; without a
//! valid one a page redirects to `/login?next=<page>`. The page embeds its session's CSRF token
//! (`<meta name="ccmesh-csrf">`), which the scripts send as `x-ccmesh-csrf` on every
//! state-changing call.

mod assets;
mod pages;
mod settings_form;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};

use crate::admin::session;
use crate::gateway::Gateway;

pub use assets::ASSETS;

/// Sent with every page: scripts, styles, images and connections from this origin only.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

pub fn router(gw: Arc<Gateway>) -> Router<Arc<Gateway>> {
    Router::new()
        .route("/", get(overview))
        .route("/endpoints", get(endpoints))
        .route("/requests", get(requests))
        .route("/requests/{id}", get(request_detail))
        .route("/stats", get(stats))
        .route("/settings", get(settings))
        .route("/clients", get(clients))
        .route("/keys", get(keys))
        .route("/login", get(login_page).post(login_submit))
        .route("/logout", post(logout))
        .route("/assets/{file}", get(assets::serve))
        .route("/favicon.ico", get(assets::favicon))
        .layer(axum::middleware::from_fn_with_state(gw, guard_host))
}

/// SPEC §15.7: without an admin token, or for a page opened with the session cookie, only the
/// loopback names (and `allowed_hosts`) may load the dashboard.
async fn guard_host(
    State(gw): State<Arc<Gateway>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let by_cookie = session::cookie(request.headers(), session::SESSION_COOKIE).is_some();
    if (gw.admin_token.is_none() || by_cookie) && crate::admin::auth::foreign_host(&gw, request.headers()) {
        return crate::admin::auth::foreign_host_refusal(request.headers());
    }
    next.run(request).await
}

pub(crate) mod html {
    /// Escape text for HTML element content and double-quoted attributes.
    pub fn escape(s: &str) -> String {
        let mut out = String::with_capacity(s.len());
        for c in s.chars() {
            match c {
                '&' => out.push_str("&amp;"),
                '<' => out.push_str("&lt;"),
                '>' => out.push_str("&gt;"),
                '"' => out.push_str("&quot;"),
                '\'' => out.push_str("&#39;"),
                c => out.push(c),
            }
        }
        out
    }
}

/// Who is looking at a page.
enum Viewer {
    /// No admin token is set: the pages are open.
    Open,
    /// Logged in; the page carries this CSRF token.
    Session { csrf: String },
}

/// The viewer of a page, or the redirect to the login page.
fn viewer(gw: &Gateway, headers: &HeaderMap, uri: &Uri) -> Result<Viewer, Box<Response>> {
    let Some(token) = gw.admin_token.as_deref() else { return Ok(Viewer::Open) };
    match session::from_request(gw, headers) {
        Ok(Some(s)) => Ok(Viewer::Session { csrf: session::csrf_token(token, &s) }),
        Ok(None) | Err(_) => {
            let next = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
            let target = if next == "/" {
                "/login".to_string()
            } else {
                format!("/login?next={}", url::form_urlencoded::byte_serialize(next.as_bytes()).collect::<String>())
            };
            let mut response = Redirect::to(&target).into_response();
            if headers.contains_key(header::COOKIE) && session::cookie(headers, session::SESSION_COOKIE).is_some() {
                // A stale cookie: drop it so the browser stops sending it.
                response.headers_mut().insert(header::SET_COOKIE, session::clear_cookie(headers));
            }
            Err(Box::new(response))
        }
    }
}

/// Headers every dashboard HTML response carries.
fn secure_headers(response: &mut Response) {
    let h = response.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

fn html_response(status: StatusCode, body: String) -> Response {
    let mut response = (status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response();
    secure_headers(&mut response);
    response
}

fn page(gw: &Gateway, headers: &HeaderMap, uri: &Uri, p: pages::Page) -> Response {
    match viewer(gw, headers, uri) {
        Err(redirect) => *redirect,
        Ok(v) => {
            let (csrf, logged_in) = match &v {
                Viewer::Open => (String::new(), false),
                Viewer::Session { csrf } => (csrf.clone(), true),
            };
            html_response(StatusCode::OK, pages::layout(&p, &csrf, logged_in))
        }
    }
}

async fn overview(State(gw): State<Arc<Gateway>>, headers: HeaderMap, uri: Uri) -> Response {
    page(&gw, &headers, &uri, pages::overview())
}

async fn endpoints(State(gw): State<Arc<Gateway>>, headers: HeaderMap, uri: Uri) -> Response {
    page(&gw, &headers, &uri, pages::endpoints())
}

async fn requests(State(gw): State<Arc<Gateway>>, headers: HeaderMap, uri: Uri) -> Response {
    let endpoints: Vec<String> = gw.snapshot().endpoints.iter().map(|e| e.config.name.clone()).collect();
    page(&gw, &headers, &uri, pages::requests(&endpoints))
}

async fn request_detail(
    State(gw): State<Arc<Gateway>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    page(&gw, &headers, &uri, pages::request_detail(&id))
}

async fn stats(State(gw): State<Arc<Gateway>>, headers: HeaderMap, uri: Uri) -> Response {
    page(&gw, &headers, &uri, pages::stats())
}

async fn settings(State(gw): State<Arc<Gateway>>, headers: HeaderMap, uri: Uri) -> Response {
    let current = gw.snapshot().settings.to_document();
    page(&gw, &headers, &uri, pages::settings(&settings_form::render(&current)))
}

async fn keys(State(gw): State<Arc<Gateway>>, headers: HeaderMap, uri: Uri) -> Response {
    page(&gw, &headers, &uri, pages::keys())
}

async fn clients(State(gw): State<Arc<Gateway>>, headers: HeaderMap, uri: Uri) -> Response {
    page(&gw, &headers, &uri, pages::clients())
}

/// Only a path on this site: it starts with a single `/` and holds no control character,
/// backslash, space or non-ASCII byte. Browsers drop tabs and newlines from URLs and read `\` as
/// `/`, so `/<tab>/evil.example` or `/\evil.example` would send the user to another host.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with('/') && !n.starts_with("//") && n.bytes().all(|b| b.is_ascii_graphic() && b != b'\\') =>
        {
            n.to_string()
        }
        _ => "/".to_string(),
    }
}

fn query_param(raw: Option<&str>, name: &str) -> Option<String> {
    url::form_urlencoded::parse(raw.unwrap_or("").as_bytes()).find(|(k, _)| k == name).map(|(_, v)| v.into_owned())
}

async fn login_page(State(gw): State<Arc<Gateway>>, headers: HeaderMap, RawQuery(raw): RawQuery) -> Response {
    let next = safe_next(query_param(raw.as_deref(), "next").as_deref());
    if gw.admin_token.is_none() || matches!(session::from_request(&gw, &headers), Ok(Some(_))) {
        // Nothing to log in to, or already logged in.
        return Redirect::to(&next).into_response();
    }
    html_response(StatusCode::OK, pages::login(&next, None))
}

async fn login_submit(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    client: Option<axum::Extension<crate::server::conn::ClientAddr>>,
    body: axum::body::Bytes,
) -> Response {
    let form: Vec<(String, String)> =
        url::form_urlencoded::parse(&body).map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
    let field = |name: &str| form.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let next = safe_next(field("next"));
    let Some(token) = gw.admin_token.as_deref() else { return Redirect::to(&next).into_response() };
    let addr = client.map(|c| c.0.0.ip()).unwrap_or(std::net::IpAddr::from([0, 0, 0, 0]));
    let now = gw.clock.now();
    if let Err(wait) = gw.login_limit.check(addr, now) {
        let secs = wait.as_secs().max(1);
        tracing::warn!(event = "dashboard_login_limited", client = %addr, "too many failed dashboard logins");
        let message = format!("Too many failed logins from your address; try again in {secs} s.");
        let mut response = html_response(StatusCode::TOO_MANY_REQUESTS, pages::login(&next, Some(&message)));
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        return response;
    }
    let presented = field("token").unwrap_or("").trim();
    if !crate::secrets::constant_time_eq(presented.as_bytes(), token.as_bytes()) {
        gw.login_limit.failed(addr, now);
        tracing::warn!(event = "dashboard_login_failed", client = %addr, "dashboard login with a wrong admin token");
        let message = if presented.is_empty() { "Enter the admin token." } else { "That is not the admin token." };
        return html_response(StatusCode::UNAUTHORIZED, pages::login(&next, Some(message)));
    }
    let Some((_, cookie)) = session::login(&gw) else {
        return html_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            pages::login(
                &next,
                Some("The gateway cannot create sessions (no OS randomness); use the API with the token."),
            ),
        );
    };
    gw.login_limit.succeeded(addr);
    tracing::info!(event = "dashboard_login", "dashboard session started");
    let mut response = Redirect::to(&next).into_response();
    response.headers_mut().insert(header::SET_COOKIE, session::set_cookie(&headers, &cookie));
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// `POST /logout` with the page's CSRF token as the form field `csrf`: revokes the session and
/// clears the cookie. Without a token configured there is nothing to log out of.
async fn logout(State(gw): State<Arc<Gateway>>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    let Some(token) = gw.admin_token.as_deref() else { return Redirect::to("/").into_response() };
    let csrf = url::form_urlencoded::parse(&body).find(|(k, _)| k == "csrf").map(|(_, v)| v.into_owned());
    let csrf = csrf.or_else(|| headers.get(session::CSRF_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string));
    if let Ok(Some(s)) = session::from_request(&gw, &headers) {
        if !session::csrf_ok(token, &s, csrf.as_deref().unwrap_or("")) {
            return (StatusCode::FORBIDDEN, "logout needs the page's CSRF token; reload the page and try again")
                .into_response();
        }
        session::logout(&gw, &s);
        tracing::info!(event = "dashboard_logout", "dashboard session ended");
    }
    let mut response = Redirect::to("/login").into_response();
    response.headers_mut().insert(header::SET_COOKIE, session::clear_cookie(&headers));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_stays_on_this_site() {
        assert_eq!(safe_next(Some("/endpoints?x=1")), "/endpoints?x=1");
        for bad in [
            "//evil.example",
            "/\\evil.example",
            "https://evil.example",
            "endpoints",
            "",
            "/a\r\nSet-Cookie: x",
            "/\t/evil.example",
            "/\u{1}",
            "/a\\b",
            "/caf\u{e9}",
        ] {
            assert_eq!(safe_next(Some(bad)), "/", "{bad}");
        }
        assert_eq!(safe_next(None), "/");
    }

    #[test]
    fn escaping() {
        assert_eq!(html::escape("<a href=\"x\">'&'</a>"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
    }
}
