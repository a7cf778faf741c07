//! The dashboard's static files, compiled into the binary. They are public (the login page needs
//! its stylesheet; none holds data) and revalidated on every use (`no-cache` + `ETag`): ES
//! modules import each other by plain URL, so a versioned URL would not reach the imports, and a
//! 304 on loopback costs nothing.

use std::sync::OnceLock;

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// (file name, content type, bytes).
pub const ASSETS: &[(&str, &str, &[u8])] = &[
    ("style.css", "text/css; charset=utf-8", include_bytes!("assets/style.css")),
    ("app.js", "text/javascript; charset=utf-8", include_bytes!("assets/app.js")),
    ("charts.js", "text/javascript; charset=utf-8", include_bytes!("assets/charts.js")),
    ("overview.js", "text/javascript; charset=utf-8", include_bytes!("assets/overview.js")),
    ("endpoints.js", "text/javascript; charset=utf-8", include_bytes!("assets/endpoints.js")),
    ("requests.js", "text/javascript; charset=utf-8", include_bytes!("assets/requests.js")),
    ("request.js", "text/javascript; charset=utf-8", include_bytes!("assets/request.js")),
    ("stats.js", "text/javascript; charset=utf-8", include_bytes!("assets/stats.js")),
    ("settings.js", "text/javascript; charset=utf-8", include_bytes!("assets/settings.js")),
    ("clients.js", "text/javascript; charset=utf-8", include_bytes!("assets/clients.js")),
    ("keys.js", "text/javascript; charset=utf-8", include_bytes!("assets/keys.js")),
    ("logo.svg", "image/svg+xml", include_bytes!("assets/logo.svg")),
];

/// FNV-1a of every asset, computed once: the ETags.
fn etags() -> &'static Vec<String> {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    TAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|(_, _, bytes)| {
                let hash = bytes
                    .iter()
                    .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3));
                format!("\"{hash:016x}\"")
            })
            .collect()
    })
}

fn respond(index: usize, headers: &HeaderMap) -> Response {
    let (_, content_type, bytes) = ASSETS[index];
    let etag = &etags()[index];
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, content_type)], bytes).into_response()
    };
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

pub async fn serve(Path(file): Path<String>, headers: HeaderMap) -> Response {
    match ASSETS.iter().position(|(name, _, _)| *name == file) {
        Some(i) => respond(i, &headers),
        None => {
            (StatusCode::NOT_FOUND, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], "no such dashboard asset")
                .into_response()
        }
    }
}

/// Browsers ask for `/favicon.ico` on their own; answer with the logo.
pub async fn favicon(headers: HeaderMap) -> Response {
    match ASSETS.iter().position(|(name, _, _)| *name == "logo.svg") {
        Some(i) => respond(i, &headers),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}
