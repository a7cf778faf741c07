//! Admin authentication: when `CCMESH_ADMIN_TOKEN` is set, every `/api/*` call needs
//! `Authorization: Bearer <token>`. The comparison takes the same time wherever the first
//! difference is, so the token cannot be guessed byte by byte from response timings.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ApiError;
use crate::gateway::Gateway;

pub async fn require_admin(State(gw): State<Arc<Gateway>>, request: Request, next: Next) -> Response {
    let Some(token) = gw.admin_token.as_deref() else {
        return next.run(request).await;
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    match presented {
        Some(p) if constant_time_eq(p.as_bytes(), token.as_bytes()) => next.run(request).await,
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

/// Length leaks (it is not secret in practice); contents do not.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_whole_contents() {
        assert!(constant_time_eq(b"secret-token", b"secret-token"));
        assert!(!constant_time_eq(b"secret-token", b"secret-tokem"));
        assert!(!constant_time_eq(b"Secret-token", b"secret-token"));
        assert!(!constant_time_eq(b"short", b"longer"));
        assert!(constant_time_eq(b"", b""));
    }
}
