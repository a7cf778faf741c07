//! Admin authentication: when `CCMESH_ADMIN_TOKEN` is set, every `/api/*` call needs
//! `Authorization: Bearer <token>`. The comparison takes the same time wherever the first
//! difference is, so the token cannot be guessed byte by byte from response timings.
//!
//! The dashboard's pages authenticate with their signed session cookie instead (SPEC §10; see
//! `session.rs`); a state-changing call authenticated that way must also carry the session's
//! CSRF token in `x-ccmesh-csrf`. A request with an `Authorization` header is judged by the
//! bearer token alone, exactly as before. Without a token (loopback), a state-changing call that
//! a browser marks as coming from another site is refused, so a web page cannot drive the
//! admin API of a gateway on the visitor's machine.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{ApiError, session};
use crate::gateway::Gateway;

/// SPEC §15.7: the `Host` is not one this gateway answers the admin API and the dashboard for
/// (a DNS-rebinding page sends its own domain).
pub fn foreign_host(gw: &Gateway, headers: &HeaderMap) -> bool {
    let host = headers.get(header::HOST).map(|v| v.to_str().unwrap_or("\u{0}"));
    let snapshot = gw.snapshot();
    !crate::hosts::host_allowed(host, &snapshot.settings.allowed_hosts)
        && !crate::hosts::host_allowed(host, gw.allowed_hosts.get().map_or(&[], Vec::as_slice))
}

/// The refusal of a request with a foreign `Host`, saying how to allow it.
pub fn foreign_host_refusal(headers: &HeaderMap) -> Response {
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("?");
    forbidden(&format!(
        "refused: Host '{host}' is not a loopback name of this gateway; open it as http://127.0.0.1:<port>/, or allow the name with `ccmesh serve --allowed-host {host}` (or the allowed_hosts setting)"
    ))
}

pub async fn require_admin(State(gw): State<Arc<Gateway>>, request: Request, next: Next) -> Response {
    let Some(token) = gw.admin_token.as_deref() else {
        if foreign_host(&gw, request.headers()) {
            return foreign_host_refusal(request.headers());
        }
        if changes_state(request.method()) && cross_site(request.headers()) {
            return forbidden(
                "refused a state-changing admin call sent by another web site; use the dashboard on this gateway, or the API without a browser",
            );
        }
        return next.run(request).await;
    };
    // The dashboard's session cookie, when no bearer token is presented.
    if !request.headers().contains_key(header::AUTHORIZATION)
        && session::cookie(request.headers(), session::SESSION_COOKIE).is_some()
    {
        if foreign_host(&gw, request.headers()) {
            return foreign_host_refusal(request.headers());
        }
        return match session_refusal(&gw, token, &request) {
            None => next.run(request).await,
            Some(refusal) => refusal,
        };
    }
    let presented =
        request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(crate::proxy::bearer_token);
    match presented {
        Some(p) if crate::secrets::constant_time_eq(p.as_bytes(), token.as_bytes()) => next.run(request).await,
        Some(_) => ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: "the admin token is wrong; send Authorization: Bearer <CCMESH_ADMIN_TOKEN>".into(),
            field: None,
        }
        .into_response(),
        None => ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: "this gateway requires an admin token; send Authorization: Bearer <CCMESH_ADMIN_TOKEN>".into(),
            field: None,
        }
        .into_response(),
    }
}

/// `None` for a valid session (and, on a state-changing call, its CSRF token); else the refusal.
fn session_refusal(gw: &Gateway, token: &str, request: &Request) -> Option<Response> {
    let session = match session::from_request(gw, request.headers()) {
        Ok(Some(s)) => s,
        Ok(None) => return Some(unauthorized(session::Refused::Invalid.message())),
        Err(refused) => return Some(unauthorized(refused.message())),
    };
    if changes_state(request.method()) {
        let presented = request.headers().get(session::CSRF_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("");
        if !session::csrf_ok(token, &session, presented) {
            return Some(forbidden(
                "a state-changing call authenticated by the dashboard session needs the page's CSRF token in x-ccmesh-csrf; reload the page",
            ));
        }
    }
    None
}

fn changes_state(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The browser says the request comes from another site (`Sec-Fetch-Site`), or its `Origin`
/// is not the host it is sent to. Non-browser clients send neither header.
fn cross_site(headers: &HeaderMap) -> bool {
    let fetch_site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if matches!(fetch_site, Some("cross-site" | "same-site")) {
        return true;
    }
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else { return false };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    let origin_host = crate::hosts::after_scheme(origin);
    origin == "null" || !origin_host.eq_ignore_ascii_case(host)
}

fn unauthorized(message: &str) -> Response {
    ApiError { status: StatusCode::UNAUTHORIZED, message: message.into(), field: None }.into_response()
}

fn forbidden(message: &str) -> Response {
    ApiError { status: StatusCode::FORBIDDEN, message: message.into(), field: None }.into_response()
}
