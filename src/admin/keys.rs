//! Client keys over HTTP (SPEC §12): `GET|POST /api/keys`, `GET|PATCH|DELETE /api/keys/{name}`,
//! `POST /api/keys/{name}/rotate` (admin API), and `GET /api/me` (authenticated by the client
//! key itself, from any `Host`: SPEC §15.7). A secret is answered once, when it is made; every
//! other answer shows its prefix only. Usage and what remains per window come from the limiter
//! (memory), never from the database.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{ApiError, ApiResult, check_file_rules, parse_body, write};
use crate::config::authoritative::Section;
use crate::gateway::Gateway;
use crate::keys::secret::{self, SecretHash};
use crate::keys::{ClientKey, KeyDraft, KeyUsage};
use crate::store::StoreError;
use crate::timefmt::rfc3339_ms;

fn key_not_found(name: &str) -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        message: format!("no client key named '{name}'; list them with GET /api/keys"),
        field: None,
    }
}

fn store_error(e: StoreError) -> ApiError {
    match e {
        StoreError::KeyNotFound(name) => key_not_found(&name),
        StoreError::KeyDuplicate(name) => ApiError {
            status: StatusCode::BAD_REQUEST,
            message: format!("name: a client key named '{name}' already exists; choose another name"),
            field: Some("name".into()),
        },
        other => other.into(),
    }
}

/// What a key has used of each limit, and what remains.
pub fn usage_json(key: &ClientKey, u: &KeyUsage) -> Value {
    let l = &key.limits;
    let count = |used: u64, limit: Option<u64>| json!({"used": used, "limit": limit, "remaining": limit.map(|l| l.saturating_sub(used))});
    let usd = |used: f64, limit: Option<f64>, resets: Option<i64>| {
        json!({"used": used, "limit": limit, "remaining": limit.map(|l| (l - used).max(0.0)),
               "resets_at": resets.map(rfc3339_ms)})
    };
    json!({
        "rpm": count(u.requests, l.rpm),
        "tpm": count(u.tokens, l.tpm),
        "concurrency": count(u.in_flight, l.concurrency),
        "usd_per_day": usd(u.usd_day, l.usd_per_day, Some(u.day_resets_at_ms)),
        "usd_per_5h": usd(u.usd_5h, l.usd_per_5h, u.usd_5h_frees_at_ms),
        "usd_per_month": usd(u.usd_month, l.usd_per_month, Some(u.month_resets_at_ms)),
    })
}

/// A key as the API shows it: its fields and, under `usage`, each window now.
pub fn key_json(gw: &Gateway, key: &ClientKey) -> Value {
    let now = crate::keys::now_ms(&*gw.clock);
    let mut v = key.to_json(now);
    v["usage"] = usage_json(key, &gw.limiter.usage(&key.name, now));
    v
}

/// `key_json`, with the usage of the whole cluster when there is one (one short Redis read).
pub async fn key_json_shared(gw: &Gateway, key: &ClientKey) -> Value {
    let Some(cluster) = &gw.cluster else { return key_json(gw, key) };
    let now = crate::keys::now_ms(&*gw.clock);
    let mut v = key.to_json(now);
    v["usage"] = usage_json(key, &cluster.limiter.usage_shared(&key.name, now).await);
    v
}

/// Endpoint names in `draft.endpoints` must exist now (a typo would silently allow nothing).
fn check_endpoints(gw: &Gateway, draft: &KeyDraft) -> ApiResult<()> {
    let snapshot = gw.snapshot();
    for name in &draft.endpoints {
        if !snapshot.endpoints.iter().any(|e| e.config.name.eq_ignore_ascii_case(name)) {
            return Err(ApiError {
                status: StatusCode::BAD_REQUEST,
                message: format!("endpoints: no endpoint named '{name}'; list them with GET /api/endpoints"),
                field: Some("endpoints".into()),
            });
        }
    }
    Ok(())
}

fn new_secret() -> ApiResult<(String, SecretHash, String)> {
    let s = secret::generate().ok_or_else(|| {
        ApiError::internal("the operating system's random source failed; no key was made (try again)")
    })?;
    let (hash, prefix) = (SecretHash::of(&s), secret::prefix(&s));
    Ok((s, hash, prefix))
}

pub async fn list_keys(State(gw): State<Arc<Gateway>>) -> Json<Value> {
    let snapshot = gw.snapshot_full();
    Json(Value::Array(snapshot.keys.all().iter().map(|k| key_json(&gw, k)).collect()))
}

pub async fn get_key(State(gw): State<Arc<Gateway>>, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    let snapshot = gw.snapshot_full();
    let key = snapshot.keys.find(&name).ok_or_else(|| key_not_found(&name))?;
    Ok(Json(key_json_shared(&gw, key).await))
}

pub async fn create_key(State(gw): State<Arc<Gateway>>, body: axum::body::Bytes) -> ApiResult<Response> {
    check_file_rules(&gw, Section::Keys)?;
    let draft = KeyDraft::create(&parse_body(&body)?)?;
    check_endpoints(&gw, &draft)?;
    let (secret, hash, prefix) = new_secret()?;
    let now = crate::keys::now_ms(&*gw.clock);
    let created =
        write(&gw, "key_created", move |g| g.store.insert_key(&draft, hash, &prefix, false, now).map_err(store_error))
            .await?;
    let mut v = key_json(&gw, &created);
    v["secret"] = Value::String(secret);
    Ok((StatusCode::CREATED, Json(v)).into_response())
}

pub async fn patch_key(
    State(gw): State<Arc<Gateway>>,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult<Json<Value>> {
    check_file_rules(&gw, Section::Keys)?;
    let patch = parse_body(&body)?;
    let current = gw.snapshot().keys.find(&name).cloned().ok_or_else(|| key_not_found(&name))?;
    let mut draft = current.to_draft();
    draft.apply(&patch)?;
    check_endpoints(&gw, &draft)?;
    let stored = current.name.clone();
    let updated = write(&gw, "key_updated", move |g| g.store.update_key(&stored, &draft).map_err(store_error)).await?;
    Ok(Json(key_json(&gw, &updated)))
}

pub async fn delete_key(State(gw): State<Arc<Gateway>>, Path(name): Path<String>) -> ApiResult<StatusCode> {
    check_file_rules(&gw, Section::Keys)?;
    write(&gw, "key_deleted", move |g| g.store.delete_key(&name).map_err(store_error)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A new secret; the old one stops working at once. Limits, spend and records stay the key's.
pub async fn rotate_key(State(gw): State<Arc<Gateway>>, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    check_file_rules(&gw, Section::Keys)?;
    let (secret, hash, prefix) = new_secret()?;
    let rotated =
        write(&gw, "key_rotated", move |g| g.store.set_key_secret(&name, hash, &prefix).map_err(store_error)).await?;
    let mut v = key_json(&gw, &rotated);
    v["secret"] = Value::String(secret);
    Ok(Json(v))
}

/// A key named after a client (`ccmesh connect` from the dashboard): made, or, when one of that
/// name exists from an earlier connect, given a new secret. Returns the secret.
pub async fn mint_for_client(gw: &Arc<Gateway>, name: &'static str, description: String) -> ApiResult<String> {
    check_file_rules(gw, Section::Keys)?;
    let (secret, hash, prefix) = new_secret()?;
    let now = crate::keys::now_ms(&*gw.clock);
    let exists = gw.snapshot().keys.find(name).is_some();
    write(gw, "key_minted", move |g| {
        if exists {
            g.store.set_key_secret(name, hash, &prefix).map_err(store_error)
        } else {
            let draft = KeyDraft::create(&json!({"name": name, "description": description}))?;
            g.store.insert_key(&draft, hash, &prefix, false, now).map_err(store_error)
        }
    })
    .await?;
    Ok(secret)
}

/// `GET /api/me`: the presented client key's limits, spend and what remains — what a key holder
/// may see of the gateway, and nothing else.
pub async fn me(State(gw): State<Arc<Gateway>>, headers: HeaderMap, uri: Uri) -> Response {
    let snapshot = gw.snapshot_full();
    let credential = crate::proxy::request::presented_credential(&headers, uri.query());
    let now = crate::keys::now_ms(&*gw.clock);
    let refused = |message: String| ApiError { status: StatusCode::UNAUTHORIZED, message, field: None }.into_response();
    match crate::keys::admit::authenticate(&snapshot.keys, credential.as_deref(), now) {
        Ok(Some(key)) => Json(key_json_shared(&gw, &key).await).into_response(),
        Ok(None) => refused(
            "this gateway uses no client keys, so there is no key to describe; GET /api/me answers the holder of a client key".into(),
        ),
        Err(refusal) => refused(refusal.to_error().message),
    }
}
