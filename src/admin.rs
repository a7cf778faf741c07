//! The admin REST API under `/api` (SPEC §10): endpoints, fast queue, order, health, current
//! endpoint, settings. Every write goes to SQLite, then the in-memory snapshot is rebuilt and
//! swapped; the request path never waits on any of this.

pub mod auth;
pub mod clients;
pub mod connectivity;
pub mod events;
pub mod health;
pub mod keys;
pub mod login_limit;
pub mod prices;
pub mod requests;
pub mod session;

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::config::authoritative::Section;
use crate::endpoint::{Endpoint, EndpointDraft, FieldError};
use crate::gateway::Gateway;
use crate::protocol::Protocol;
use crate::store::StoreError;

pub fn router(gw: Arc<Gateway>) -> Router<Arc<Gateway>> {
    Router::new()
        .route("/api/endpoints", get(list_endpoints).post(create_endpoint))
        .route("/api/endpoints/{name}", get(get_endpoint).patch(patch_endpoint).delete(delete_endpoint))
        .route("/api/endpoints/{name}/reset", post(reset_breaker))
        .route("/api/endpoints/{name}/test", post(connectivity::test_endpoint))
        .route("/api/fast-queue", put(put_fast_queue))
        .route("/api/order", put(put_order))
        .route("/api/health", get(health::get_health))
        .route("/api/events", get(events::stream))
        .route("/api/current", get(get_current).put(put_current))
        .route("/api/settings", get(get_settings).patch(patch_settings))
        .route("/api/requests", get(requests::list_requests))
        .route("/api/requests/{id}", get(requests::get_request))
        .route("/api/stats", get(requests::get_stats))
        .route("/api/records/status", get(requests::get_records_status))
        .route("/api/status", get(get_status))
        .route("/api/clients", get(clients::list))
        .route("/api/clients/{client}/connect", post(clients::connect))
        .route("/api/clients/{client}/disconnect", post(clients::disconnect))
        .route("/api/presets", get(list_presets))
        .route("/api/prices", get(prices::list_prices))
        .route("/api/prices/{model}", put(prices::put_price).delete(prices::delete_price))
        .route("/api/keys", get(keys::list_keys).post(keys::create_key))
        .route("/api/keys/{name}", get(keys::get_key).patch(keys::patch_key).delete(keys::delete_key))
        .route("/api/keys/{name}/rotate", post(keys::rotate_key))
        .fallback(api_not_found)
        .layer(axum::middleware::from_fn_with_state(gw, auth::require_admin))
}

/// An admin API error: a status and a message that says what is wrong and what to do.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub field: Option<String>,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self { status: StatusCode::BAD_REQUEST, message: message.into(), field: None }
    }
    pub fn not_found(name: &str) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message: format!("no endpoint named '{name}'; list them with GET /api/endpoints"),
            field: None,
        }
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self { status: StatusCode::INTERNAL_SERVER_ERROR, message: message.into(), field: None }
    }
    /// 409: the authoritative config file owns what this write would change.
    pub fn file_rules(message: String) -> Self {
        Self { status: StatusCode::CONFLICT, message, field: None }
    }
}

/// Refuse a write to `section` when an authoritative config file declares it.
pub fn check_file_rules(gw: &Gateway, section: Section) -> ApiResult<()> {
    match gw.config_source.get().and_then(|s| s.refusal(section)) {
        Some(message) => Err(ApiError::file_rules(message)),
        None => Ok(()),
    }
}

impl From<FieldError> for ApiError {
    fn from(e: FieldError) -> Self {
        Self { status: StatusCode::BAD_REQUEST, message: format!("{}: {}", e.field, e.message), field: Some(e.field) }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Duplicate(name) => Self {
                status: StatusCode::BAD_REQUEST,
                message: format!(
                    "name: an endpoint named '{name}' already exists; choose another name or PATCH the existing one"
                ),
                field: Some("name".into()),
            },
            StoreError::NotFound(name) => ApiError::not_found(&name),
            // A shared database that went away: the change can be made again once it is back.
            StoreError::Unavailable(why) => Self {
                status: StatusCode::SERVICE_UNAVAILABLE,
                message: format!("the database is unreachable ({why}); nothing was changed, try again when it is back"),
                field: None,
            },
            other => {
                tracing::error!(event = "store_error", error = %other, "database error in the admin API");
                ApiError::internal(format!("{other}"))
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let kind = match self.status {
            StatusCode::BAD_REQUEST => "invalid_request",
            StatusCode::NOT_FOUND => "not_found",
            StatusCode::UNAUTHORIZED => "unauthorized",
            StatusCode::FORBIDDEN => "forbidden",
            StatusCode::CONFLICT => "conflict",
            StatusCode::SERVICE_UNAVAILABLE => "unavailable",
            _ => "internal_error",
        };
        (self.status, Json(json!({"error": {"type": kind, "message": self.message, "field": self.field}})))
            .into_response()
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// `GET /api/status` (SPEC §15.8): what state the gateway is in beyond liveness.
async fn get_status(State(gw): State<Arc<Gateway>>) -> Json<Value> {
    let storage = match gw.storage_problem() {
        None => "ok".to_string(),
        Some(problem) => format!("degraded: {problem}"),
    };
    let limits = gw.snapshot().settings.limits.clone();
    Json(json!({
        "storage": storage,
        "database": gw.store.summary(),
        "cluster": gw.cluster.as_ref().map_or_else(|| "off".to_string(), |c| c.status()),
        "version": env!("CARGO_PKG_VERSION"),
        "instance_id": gw.instance_id,
        "connections": gw.open_connections.load(std::sync::atomic::Ordering::Relaxed),
        "connections_per_thread": gw.serving_threads.get().map(|b| b.counts()).unwrap_or_default(),
        "max_connections": limits.max_connections,
        "connections_past_cap": gw.connection_cap.connections_past_cap(),
        "records": gw.events.records().stats(),
    }))
}

/// Parse a JSON body ourselves so that malformed JSON gets our error shape, not axum's text.
pub fn parse_body(bytes: &[u8]) -> ApiResult<Value> {
    serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

/// Endpoint JSON as the API shows it: the key masked, always.
pub fn endpoint_json(e: &Endpoint) -> Value {
    json!({
        "name": e.name,
        "base_url": e.base_url,
        "api_key": e.masked_key(),
        "format": e.format.as_str(),
        "models": e.models.iter().map(|m| m.as_str()).collect::<Vec<_>>(),
        "model_map": e.model_map.iter().map(|(k, v)| (k.as_str().to_string(), Value::from(v.as_str()))).collect::<serde_json::Map<_, _>>(),
        "enabled": e.enabled,
        "fast": e.fast,
        "fast_sort_order": e.fast_sort_order,
        "sort_order": e.sort_order,
        "headers": e.headers,
        "test_model": e.test_model,
        "test_status": e.test.status.as_str(),
        "test_at": e.test.at,
        "test_latency_ms": e.test.latency_ms,
        "test_error": e.test.error.as_deref().map(crate::redact::scrub),
        "price_multiplier": e.price_multiplier,
        "serves_every_model": e.serves_every_model(),
    })
}

/// Run a blocking store operation, then rebuild the snapshot; writes are serialised.
pub async fn write<T: Send + 'static>(
    gw: &Arc<Gateway>,
    what: &'static str,
    op: impl FnOnce(&Gateway) -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    let _guard = gw.admin_lock.lock().await;
    let gw2 = gw.clone();
    let result = tokio::task::spawn_blocking(move || {
        let value = op(&gw2)?;
        gw2.reload()?;
        Ok::<T, ApiError>(value)
    })
    .await
    .map_err(|e| ApiError::internal(format!("admin task failed: {e}")))??;
    gw.events.config_changed(what);
    if let Some(cluster) = &gw.cluster {
        cluster.config_changed();
    }
    Ok(result)
}

async fn read<T: Send + 'static>(
    gw: &Arc<Gateway>,
    op: impl FnOnce(&crate::store::Store) -> Result<T, StoreError> + Send + 'static,
) -> ApiResult<T> {
    let store = gw.store.clone();
    Ok(tokio::task::spawn_blocking(move || op(&store))
        .await
        .map_err(|e| ApiError::internal(format!("admin task failed: {e}")))??)
}

async fn list_endpoints(State(gw): State<Arc<Gateway>>) -> ApiResult<Json<Value>> {
    let snapshot = gw.snapshot_full();
    Ok(Json(Value::Array(snapshot.endpoints.iter().map(|e| endpoint_json(&e.config)).collect())))
}

async fn get_endpoint(State(gw): State<Arc<Gateway>>, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    let snapshot = gw.snapshot_full();
    let e = snapshot.find(&name).ok_or_else(|| ApiError::not_found(&name))?;
    Ok(Json(endpoint_json(&e.config)))
}

/// SPEC §8: an endpoint that points back at this gateway would send every request round in a
/// circle.
fn refuse_self(gw: &Gateway, base_url: &str) -> ApiResult<()> {
    match gw.listen_addr.get() {
        Some(listen) if crate::hosts::points_at(base_url, *listen) => Err(ApiError {
            status: StatusCode::BAD_REQUEST,
            message: format!(
                "base_url: {base_url} is this gateway's own address ({listen}); every request to it would come back here — give the upstream's URL"
            ),
            field: Some("base_url".into()),
        }),
        _ => Ok(()),
    }
}

async fn create_endpoint(State(gw): State<Arc<Gateway>>, body: axum::body::Bytes) -> ApiResult<Response> {
    check_file_rules(&gw, Section::Endpoints)?;
    let draft = EndpointDraft::create(&parse_body(&body)?)?;
    refuse_self(&gw, &draft.base_url)?;
    let created = write(&gw, "endpoint_created", move |g| Ok(g.store.insert_endpoint(&draft)?)).await?;
    Ok((StatusCode::CREATED, Json(endpoint_json(&created))).into_response())
}

async fn patch_endpoint(
    State(gw): State<Arc<Gateway>>,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult<Json<Value>> {
    let patch = parse_body(&body)?;
    if let Some(message) = gw.config_source.get().and_then(|s| s.endpoint_patch_refusal(&name, &patch)) {
        return Err(ApiError::file_rules(message));
    }
    let current = {
        let n = name.clone();
        read(&gw, move |s| s.get_endpoint(&n)).await?
    };
    let mut draft = current.to_draft();
    let had_fast_order = patch.get("fast_sort_order").is_some();
    draft.apply(&patch)?;
    refuse_self(&gw, &draft.base_url)?;
    // Joining the fast queue without a position means "at the end" (SPEC §10).
    if draft.fast && !current.fast && !had_fast_order {
        draft.fast_sort_order = None;
    }
    let updated = write(&gw, "endpoint_updated", move |g| Ok(g.store.update_endpoint(&name, &draft)?)).await?;
    Ok(Json(endpoint_json(&updated)))
}

async fn delete_endpoint(State(gw): State<Arc<Gateway>>, Path(name): Path<String>) -> ApiResult<StatusCode> {
    check_file_rules(&gw, Section::Endpoints)?;
    write(&gw, "endpoint_deleted", move |g| Ok(g.store.delete_endpoint(&name)?)).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn reset_breaker(State(gw): State<Arc<Gateway>>, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    let snapshot = gw.snapshot_full();
    let e = snapshot.find(&name).ok_or_else(|| ApiError::not_found(&name))?;
    e.breaker.reset(&name);
    Ok(Json(health::endpoint_health(e)))
}

/// `{"endpoints": ["a", "b"]}` with no duplicates.
fn name_list(body: &[u8]) -> ApiResult<Vec<String>> {
    let v = parse_body(body)?;
    let Some(items) = v.get("endpoints").and_then(Value::as_array) else {
        return Err(ApiError {
            status: StatusCode::BAD_REQUEST,
            message: "endpoints: expected {\"endpoints\": [\"name\", ...]}".into(),
            field: Some("endpoints".into()),
        });
    };
    let mut names: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let name =
            item.as_str().ok_or_else(|| ApiError::bad_request("endpoints: every entry must be an endpoint name"))?;
        if names.iter().any(|n| n == name) {
            return Err(ApiError::bad_request(format!("endpoints: '{name}' is listed twice")));
        }
        names.push(name.to_string());
    }
    Ok(names)
}

fn unknown_names_are_bad_requests(e: ApiError) -> ApiError {
    if e.status == StatusCode::NOT_FOUND {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            field: Some("endpoints".into()),
            message: format!("endpoints: {}", e.message),
        }
    } else {
        e
    }
}

async fn put_fast_queue(State(gw): State<Arc<Gateway>>, body: axum::body::Bytes) -> ApiResult<Json<Value>> {
    check_file_rules(&gw, Section::Endpoints)?;
    let names = name_list(&body)?;
    write(&gw, "fast_queue", move |g| Ok(g.store.set_fast_queue(&names)?))
        .await
        .map_err(unknown_names_are_bad_requests)?;
    list_endpoints(State(gw)).await
}

async fn put_order(State(gw): State<Arc<Gateway>>, body: axum::body::Bytes) -> ApiResult<Json<Value>> {
    check_file_rules(&gw, Section::Endpoints)?;
    let names = name_list(&body)?;
    write(&gw, "order", move |g| Ok(g.store.set_order(&names)?)).await.map_err(unknown_names_are_bad_requests)?;
    list_endpoints(State(gw)).await
}

/// `GET /api/current`: SPEC §10's remembered current endpoint per protocol, and, under `next`,
/// where the next request of each protocol will start (what the dashboard shows as "current"
/// before any failover has happened).
fn current_json(gw: &Gateway) -> Value {
    let snapshot = gw.snapshot();
    let mut next = serde_json::Map::new();
    for p in Protocol::ALL {
        let name = next_endpoint(gw, &snapshot, p).map(|e| Value::from(e.config.name.as_str())).unwrap_or(Value::Null);
        next.insert(p.as_str().into(), name);
    }
    let mut out = serde_json::Map::new();
    for p in Protocol::ALL {
        let name = gw
            .rotation
            .current(p)
            .and_then(|id| snapshot.endpoints.iter().find(|e| e.config.id == id))
            .map(|e| Value::from(e.config.name.as_str()))
            .unwrap_or(Value::Null);
        out.insert(p.as_str().into(), name);
    }
    out.insert("next".into(), Value::Object(next));
    Value::Object(out)
}

/// The endpoint a request of protocol `p` would start at now, for a model every candidate
/// serves (the model filter is the request's; this is the rest of SPEC §2–3): the routable
/// list, without the endpoints whose breaker is open and cooling down (unless failover is off,
/// which skips that filter), then the strategy's start — the one-shot manual start, the
/// remembered current endpoint (`sticky`), the first (`priority`), or the round-robin ticket.
/// Read-only: no ticket or manual start is used up.
pub fn next_endpoint<'a>(
    gw: &Gateway,
    snapshot: &'a crate::snapshot::Snapshot,
    p: Protocol,
) -> Option<&'a Arc<crate::snapshot::LiveEndpoint>> {
    let routable = crate::routing::list_routable(&snapshot.endpoints, crate::protocol::Route::Protocol(p));
    let settings = &snapshot.settings;
    let live: Vec<_> = if settings.failover_enabled(p) {
        routable.into_iter().filter(|e| e.breaker.routable().is_ok()).collect()
    } else {
        routable
    };
    let ids: Vec<crate::endpoint::EndpointId> = live.iter().map(|e| e.config.id).collect();
    let start = crate::routing::start_index(
        settings.routing_strategy,
        &ids,
        gw.rotation.current(p),
        gw.rotation.peek_manual(p),
        gw.rotation.peek_round_robin(p),
    );
    live.get(start).copied()
}

async fn get_current(State(gw): State<Arc<Gateway>>) -> Json<Value> {
    Json(current_json(&gw))
}

async fn put_current(State(gw): State<Arc<Gateway>>, body: axum::body::Bytes) -> ApiResult<Json<Value>> {
    let v = parse_body(&body)?;
    let protocol = v
        .get("protocol")
        .and_then(Value::as_str)
        .and_then(Protocol::parse)
        .ok_or_else(|| ApiError::bad_request("protocol: must be \"claude\", \"openai\" or \"responses\""))?;
    let name = v
        .get("endpoint")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad_request("endpoint: must be an endpoint name"))?;
    let snapshot = gw.snapshot_full();
    let e = snapshot.find(name).ok_or_else(|| ApiError::not_found(name))?;
    if !e.config.enabled {
        return Err(ApiError::bad_request(format!("endpoint: '{name}' is disabled; enable it first")));
    }
    // Any enabled endpoint can be made current: every format serves every protocol (SPEC §1).
    gw.rotation.set_manual(protocol, e.config.id);
    // The operator's switch wins over remembered sessions (SPEC §15.10).
    gw.sessions.clear_protocol(protocol);
    gw.events.config_changed("current");
    Ok(Json(current_json(&gw)))
}

async fn list_presets() -> Json<Value> {
    Json(Value::Array(crate::presets::all().iter().map(crate::presets::Preset::to_json).collect()))
}

async fn get_settings(State(gw): State<Arc<Gateway>>) -> Json<Value> {
    Json(gw.snapshot().settings.to_document())
}

async fn patch_settings(State(gw): State<Arc<Gateway>>, body: axum::body::Bytes) -> ApiResult<Json<Value>> {
    check_file_rules(&gw, Section::Settings)?;
    let patch = parse_body(&body)?;
    // Read-modify-write under the admin lock, so concurrent PATCHes cannot lose each other.
    let doc = write(&gw, "settings", move |g| {
        let next = g.snapshot().settings.patched(&patch).map_err(|e| ApiError::bad_request(e.0))?;
        let doc = next.to_document();
        g.store.save_settings(&doc)?;
        Ok(doc)
    })
    .await?;
    Ok(Json(doc))
}

async fn api_not_found(uri: axum::http::Uri) -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        message: format!("no admin API route {}; see docs/api.md", uri.path()),
        field: None,
    }
}
