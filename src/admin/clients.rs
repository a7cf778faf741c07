//! `GET /api/clients`, `POST /api/clients/{client}/connect|disconnect`: the dashboard's Clients
//! page, acting on the settings files of the user the gateway runs as.
//!
//! Who may write: only a gateway listening on a loopback address. A socket bound to 127.0.0.1 or
//! ::1 accepts connections from this machine only, so every request it serves comes from
//! loopback too, and "this machine's user" is the one whose files are edited. A gateway that
//! listens on the network answers 403: a remote browser must never rewrite the settings of the
//! machine the gateway runs on (`ccmesh connect` on that machine does it instead). The admin
//! token, the session cookie with its CSRF token and the cross-site check of `auth.rs` apply as
//! to every other admin call.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::{ApiError, ApiResult};
use crate::clients::host::LocalHost;
use crate::clients::{self, ClientError, ClientKind, Target};
use crate::gateway::Gateway;

fn local(gw: &Gateway) -> ApiResult<&LocalHost> {
    gw.local.get().ok_or_else(|| ApiError {
        status: StatusCode::FORBIDDEN,
        message: "this gateway was not started by `ccmesh serve`, so it does not know its client settings; run `ccmesh connect CLIENT` instead".into(),
        field: None,
    })
}

fn client(name: &str) -> ApiResult<ClientKind> {
    ClientKind::parse(name).ok_or_else(|| ApiError {
        status: StatusCode::NOT_FOUND,
        message: format!("no client named '{name}'; the clients are claude-code, codex and gemini-cli"),
        field: None,
    })
}

pub async fn list(State(gw): State<Arc<Gateway>>) -> ApiResult<Json<Value>> {
    let endpoints = gw.snapshot().endpoints.iter().filter(|e| e.config.enabled).count();
    let Some(host) = gw.local.get().cloned() else {
        return Ok(Json(json!({
            "server": null, "can_edit": false, "endpoints": endpoints, "clients": [],
            "reason": "this gateway was not started by `ccmesh serve`",
            "service": {"managed": false, "installed": null},
        })));
    };
    let states = tokio::task::spawn_blocking(move || {
        let url = host.url();
        let states: Vec<clients::ClientState> = match &host.env {
            Some(env) => ClientKind::ALL.iter().map(|c| clients::state(*c, env, Some(&host.data_dir), &url)).collect(),
            None => Vec::new(),
        };
        let installed = host.env.as_ref().and_then(|e| clients::service::installed(&e.home).map(|p| e.display(&p)));
        json!({
            "server": url,
            "can_edit": host.refusal().is_none(),
            "reason": host.refusal(),
            "endpoints": endpoints,
            "service": {"managed": host.service_managed, "installed": installed},
            "clients": states,
        })
    })
    .await
    .map_err(|e| ApiError::internal(format!("admin task failed: {e}")))?;
    Ok(Json(states))
}

fn client_error(e: ClientError) -> ApiError {
    match e {
        ClientError::Refused(m) => ApiError::bad_request(m),
        ClientError::NotConnected(c, _) => {
            ApiError::bad_request(format!("{} was not connected by ccmesh: there is nothing to undo", c.display_name()))
        }
        io @ ClientError::Io { .. } => ApiError::internal(io.to_string()),
    }
}

async fn act(gw: Arc<Gateway>, name: String, key: Option<String>, connect: bool) -> ApiResult<Json<Value>> {
    let client = client(&name)?;
    let host = local(&gw)?.clone();
    if let Some(reason) = host.refusal() {
        return Err(ApiError { status: StatusCode::FORBIDDEN, message: reason, field: None });
    }
    let now = gw.clock.wall();
    // SPEC §15.10: without a key given, a gateway that uses client keys makes one for the client.
    let key = match key {
        None if connect && gw.snapshot().keys.enforced() => {
            let description = format!("{} on this machine (dashboard connect)", client.display_name());
            Some(super::keys::mint_for_client(&gw, client.id(), description).await?)
        }
        other => other,
    };
    let result = tokio::task::spawn_blocking(move || {
        let env = host.env.clone().ok_or_else(|| ClientError::Refused("no home directory".into()))?;
        let url = host.url();
        let report = if connect {
            let key = key.unwrap_or_else(|| clients::PLACEHOLDER_KEY.to_string());
            clients::connect(client, &env, &host.data_dir, &Target { server: url.clone(), key }, now)?
        } else {
            clients::disconnect(client, &env, &host.data_dir)?
        };
        let state = clients::state(client, &env, Some(&host.data_dir), &url);
        Ok::<_, ClientError>(json!({"report": report, "state": state}))
    })
    .await
    .map_err(|e| ApiError::internal(format!("admin task failed: {e}")))?
    .map_err(client_error)?;
    gw.events.config_changed(if connect { "client_connected" } else { "client_disconnected" });
    Ok(Json(result))
}

pub async fn connect(
    State(gw): State<Arc<Gateway>>,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult<Json<Value>> {
    let key = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        let v = super::parse_body(&body)?;
        match v.get("key") {
            None | Some(Value::Null) => None,
            Some(Value::String(k)) if !k.trim().is_empty() => Some(k.trim().to_string()),
            Some(_) => return Err(ApiError::bad_request("key: must be a non-empty string (a client key)")),
        }
    };
    act(gw, name, key, true).await
}

pub async fn disconnect(State(gw): State<Arc<Gateway>>, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    act(gw, name, None, false).await
}
