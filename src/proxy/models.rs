//! `GET /v1/models` (SPEC §8): the models a client can ask for, answered by the gateway itself
//! from memory — never by calling an upstream on the request path.
//!
//! An entry comes from an enabled endpoint's concrete `models` and `model_map` keys, and, for
//! an endpoint that lists globs or nothing, from its upstream's own list (`catalogue`, fetched
//! in the background) filtered by what the endpoint serves (`Endpoint::serves`: its globs, or
//! everything when it lists none, plus its map keys). Ids are merged case-insensitively, in the
//! global endpoint order, and each entry names every endpoint that serves it in
//! `ccmesh_endpoints` (an extra field the official SDKs ignore). Anthropic's shape when the
//! client looks like an Anthropic SDK, else OpenAI's.
//!
//! With client keys the listing passes the gate like every proxy path (a 401 without a valid
//! key) and shows only what the key may use: its models, on its endpoints.

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::gateway::Gateway;
use crate::protocol::Protocol;
use crate::snapshot::Snapshot;

/// One model a client can ask for, and the endpoints that serve it, in routing order.
#[derive(Debug, PartialEq)]
pub struct Listed {
    pub id: String,
    pub endpoints: Vec<String>,
}

/// What `GET /v1/models` lists for this configuration and these cached upstream lists.
pub fn listed(snapshot: &Snapshot, catalogue: &crate::catalogue::Catalogue) -> Vec<Listed> {
    let mut out: Vec<Listed> = Vec::new();
    for e in snapshot.endpoints.iter().filter(|e| e.config.enabled) {
        let config = &e.config;
        let named = config
            .models
            .iter()
            .filter(|m| !m.is_glob())
            .map(|m| m.as_str().to_string())
            .chain(config.model_map.iter().filter(|(k, _)| !k.is_glob()).map(|(k, _)| k.as_str().to_string()));
        let upstream = catalogue
            .models_of(config)
            .map(|ids| ids.iter().filter(|id| config.serves(id)).cloned().collect::<Vec<_>>())
            .unwrap_or_default();
        for id in named.chain(upstream) {
            match out.iter_mut().find(|l| l.id.eq_ignore_ascii_case(&id)) {
                Some(l) if !l.endpoints.contains(&config.name) => l.endpoints.push(config.name.clone()),
                Some(_) => {}
                None => out.push(Listed { id, endpoints: vec![config.name.clone()] }),
            }
        }
    }
    out
}

pub async fn list_models(State(gw): State<Arc<Gateway>>, headers: HeaderMap, uri: axum::http::Uri) -> Response {
    let snapshot = gw.snapshot_full();
    let anthropic = super::is_anthropic_client(&headers);
    let gate = match super::gate::Gate::open(&gw, &snapshot, &headers, uri.query(), None) {
        Ok(gate) => gate,
        Err(refusal) => {
            let protocol = if anthropic { Protocol::Claude } else { Protocol::Openai };
            return refusal.to_error().into_response(protocol);
        }
    };
    let mut models = listed(&snapshot, &gw.catalogue);
    if let Some(key) = gate.key() {
        models.retain(|m| key.allows_model(&m.id));
        for m in &mut models {
            m.endpoints.retain(|e| key.allows_endpoint(e));
        }
        models.retain(|m| !m.endpoints.is_empty());
    }
    let body = if anthropic {
        let data: Vec<Value> = models
            .iter()
            .map(|m| {
                json!({"type": "model", "id": m.id, "display_name": m.id, "created_at": "1970-01-01T00:00:00Z",
                       "ccmesh_endpoints": m.endpoints})
            })
            .collect();
        json!({
            "data": data,
            "has_more": false,
            "first_id": models.first().map(|m| &m.id),
            "last_id": models.last().map(|m| &m.id),
        })
    } else {
        let data: Vec<Value> = models
            .iter()
            .map(|m| {
                json!({"id": m.id, "object": "model", "created": 0, "owned_by": m.endpoints.first(),
                       "ccmesh_endpoints": m.endpoints})
            })
            .collect();
        json!({"object": "list", "data": data})
    };
    axum::Json(body).into_response()
}
