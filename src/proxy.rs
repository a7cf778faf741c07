//! The request path: ingress (parse, limits, protocol), candidate choice (SPEC §2), the attempt
//! loop (SPEC §3–4), and the streaming relay (SPEC §6). See docs/request-lifecycle.md.

pub mod attempt;
pub mod backoff;
pub mod classify;
pub mod conversion;
pub mod relay;
pub mod request;
pub mod trail;
pub mod upstream;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, Method, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use crate::gateway::{Gateway, LiveEndpoint, Snapshot};
use crate::protocol::errors::{ErrorKind, GatewayError};
use crate::protocol::{Protocol, Route};
use crate::routing;
use trail::Trail;

/// Everything about the client's request that the attempts need, read once.
pub struct Inbound {
    pub route: Route,
    pub method: Method,
    /// The path after `/v1` (`/messages`, `/chat/completions`, `/embeddings`, ...).
    pub rest: String,
    /// The query string to forward (without `endpoint=`).
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The requested model after `@name/` removal (what routing and `model_map` see).
    pub model: Option<String>,
    /// Whether the body's model must be replaced even without a map (an `@name/` prefix).
    pub model_prefixed: bool,
    /// Where the model value sits in `body`, for rewriting.
    pub model_span: Option<std::ops::Range<usize>>,
    pub stream: bool,
}

// Header names looked up on every request, parsed once (a lookup by `&str` parses the name).
pub(crate) const ANTHROPIC_VERSION: HeaderName = HeaderName::from_static("anthropic-version");
const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");
const X_CCMESH_ENDPOINT: HeaderName = HeaderName::from_static("x-ccmesh-endpoint");

/// Decide the route from the path. `None` = not a proxied path.
pub fn route_for(method: &Method, path: &str, headers: &HeaderMap) -> Option<Route> {
    let rest = path.strip_prefix("/v1/")?;
    Some(match (method, rest.trim_end_matches('/')) {
        (&Method::POST, "messages") => Route::Protocol(Protocol::Claude),
        (&Method::POST, "chat/completions") => Route::Protocol(Protocol::Openai),
        (&Method::POST, "responses") => Route::Protocol(Protocol::Responses),
        (&Method::POST, "messages/count_tokens") => Route::CountTokens,
        _ => Route::PassThrough { anthropic: is_anthropic_client(headers) },
    })
}

/// Whether the client looks like an Anthropic SDK: it sends `anthropic-version` or `x-api-key`.
fn is_anthropic_client(headers: &HeaderMap) -> bool {
    headers.contains_key(ANTHROPIC_VERSION) || headers.contains_key(X_API_KEY)
}

/// axum handler for every `/v1/*` request other than `GET /v1/models`.
pub async fn handle(State(gw): State<Arc<Gateway>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Some(route) = route_for(&parts.method, parts.uri.path(), &parts.headers) else {
        return GatewayError::new(ErrorKind::NotFound, "not_found", format!("unknown path {}", parts.uri.path()))
            .into_response(Protocol::Openai);
    };
    let protocol = route.protocol();
    let snapshot = gw.snapshot_full();
    let mut trail = Trail::start(
        gw.events.clone(),
        gw.clock.wall(),
        protocol.as_str(),
        parts.method.as_str(),
        parts.uri.path(),
        &parts.headers,
    );
    match prepare(&snapshot, route, parts, body, &mut trail).await {
        Ok((inbound, candidates, is_explicit)) => {
            attempt::run(gw, snapshot, inbound, candidates, is_explicit, trail).await
        }
        // Refused before any attempt: the client's request is wrong, or nothing can serve it.
        Err(error) => {
            let status = error.kind.status().as_u16();
            trail.set_error("gateway", Some(error.code), &error.message, None);
            let mut response = error.into_response(protocol);
            trail.tag_response(response.headers_mut());
            trail.finish(status, Default::default(), None, &snapshot);
            response
        }
    }
}

/// Read and check the request, and choose its candidates (SPEC §2 steps 0–3).
async fn prepare(
    snapshot: &Snapshot,
    route: Route,
    parts: axum::http::request::Parts,
    body: axum::body::Body,
    trail: &mut Trail,
) -> Result<(Inbound, Vec<Arc<LiveEndpoint>>, bool), GatewayError> {
    let limit = snapshot.settings.max_body_bytes;
    let too_large = || {
        GatewayError::new(
            ErrorKind::RequestTooLarge,
            "request_too_large",
            format!(
                "the request body is larger than max_body_bytes ({limit} bytes); shorten it or raise max_body_bytes in the settings"
            ),
        )
    };
    let declared = parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let body =
        axum::body::to_bytes(body, usize::try_from(limit).unwrap_or(usize::MAX)).await.map_err(|_| too_large())?;

    let query = parts.uri.query();
    let endpoint_query =
        query.and_then(|q| q.split('&').find_map(|pair| pair.strip_prefix("endpoint=")).map(|v| v.to_string()));
    let endpoint_header = match parts.headers.get(X_CCMESH_ENDPOINT).map(|v| v.to_str()) {
        None => None,
        Some(Ok(v)) => Some(v.to_string()),
        Some(Err(_)) => {
            return Err(GatewayError::new(
                ErrorKind::InvalidRequest,
                "invalid_header",
                "x-ccmesh-endpoint must be ASCII",
            ));
        }
    };

    // The three protocols carry JSON; other paths only when they say so.
    let is_json = match route {
        Route::Protocol(_) | Route::CountTokens => true,
        Route::PassThrough { .. } => {
            !body.is_empty()
                && parts
                    .headers
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.contains("json"))
        }
    };
    let peek = if is_json { Some(request::peek(&body)?) } else { None };
    let requested_model = peek.as_ref().and_then(|p| p.model.as_deref());
    let stream = peek.as_ref().is_some_and(|p| p.stream);
    trail.set_request(requested_model, stream);

    let explicit = routing::resolve_explicit(
        &snapshot.endpoints,
        route,
        endpoint_header.as_deref(),
        endpoint_query.as_deref(),
        requested_model,
    )?;
    let model = explicit.model.as_deref().map(str::to_string);
    let model_prefixed = model.as_deref() != requested_model;

    let (candidates, is_explicit): (Vec<Arc<LiveEndpoint>>, bool) = match explicit.endpoint {
        Some(e) => (vec![e.clone()], true),
        None => {
            let routable = routing::list_routable(&snapshot.endpoints, route);
            if routable.is_empty() {
                return Err(routing::nothing_configured(route));
            }
            let serving = match &model {
                Some(m) => routing::filter_by_model(routable, &snapshot.endpoints, route, m)?,
                None => routable,
            };
            (serving.into_iter().cloned().collect(), false)
        }
    };
    let model_span = peek.as_ref().and_then(|p| p.model_span(&body));
    drop(peek);

    let inbound = Inbound {
        route,
        method: parts.method,
        rest: parts.uri.path().trim_start_matches("/v1").to_string(),
        query: upstream::forwarded_query(query),
        headers: parts.headers,
        body,
        model,
        model_prefixed,
        model_span,
        stream,
    };
    Ok((inbound, candidates, is_explicit))
}

/// `GET /v1/models`, answered from the endpoints' model lists (SPEC §8): Anthropic's shape when
/// the client looks like an Anthropic SDK, else OpenAI's.
pub async fn list_models(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    let anthropic = is_anthropic_client(&headers);
    let snapshot = gw.snapshot_full();
    let mut models: Vec<(String, String)> = Vec::new();
    for e in snapshot.endpoints.iter().filter(|e| e.config.enabled) {
        let concrete = e
            .config
            .models
            .iter()
            .filter(|m| !m.is_glob())
            .map(|m| m.as_str())
            .chain(e.config.model_map.iter().filter(|(k, _)| !k.is_glob()).map(|(k, _)| k.as_str()));
        for m in concrete {
            if !models.iter().any(|(id, _)| id.eq_ignore_ascii_case(m)) {
                models.push((m.to_string(), e.config.name.clone()));
            }
        }
    }
    let body = if anthropic {
        let data: Vec<_> = models
            .iter()
            .map(|(id, _)| {
                serde_json::json!({"type": "model", "id": id, "display_name": id, "created_at": "1970-01-01T00:00:00Z"})
            })
            .collect();
        serde_json::json!({
            "data": data,
            "has_more": false,
            "first_id": models.first().map(|m| &m.0),
            "last_id": models.last().map(|m| &m.0),
        })
    } else {
        let data: Vec<_> = models
            .iter()
            .map(|(id, owner)| serde_json::json!({"id": id, "object": "model", "created": 0, "owned_by": owner}))
            .collect();
        serde_json::json!({"object": "list", "data": data})
    };
    axum::Json(body).into_response()
}

/// Paths the gateway does not serve.
pub async fn not_found(request: Request) -> Response {
    let message = format!(
        "ccmesh has no route {} {}; the proxy serves /v1/*, the admin API /api/*, the dashboard /",
        request.method(),
        request.uri().path()
    );
    GatewayError::new(ErrorKind::NotFound, "not_found", message).into_response(Protocol::Openai)
}
