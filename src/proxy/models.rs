//! `GET /v1/models` (SPEC §8): the models a client can ask for, answered by the gateway itself
//! from memory — never by calling an upstream on the request path.
//!
//! An entry comes from an enabled endpoint's concrete `models` and `model_map` keys, and, for
//! an endpoint that lists globs or nothing, from its upstream's own list (`catalogue`, fetched
//! in the background) filtered by what the endpoint serves (`Endpoint::serves`: its globs, or
//! everything when it lists none, plus its map keys). Ids are merged case-insensitively, in the
//! global endpoint order, and each entry names every endpoint that serves it in
//! `ccmesh_endpoints` (an extra field the official SDKs ignore). Gemini's shape on `/v1beta` and
//! when the client presented a Google credential (`x-goog-api-key`, `?key=`; checked first),
//! paged with `pageSize` / `pageToken`; Anthropic's shape when the client looks like an
//! Anthropic SDK; else OpenAI's.
//!
//! With client keys the listing passes the gate like every proxy path (a 401 without a valid
//! key) and shows only what the key may use: its models, on its endpoints.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::gateway::Gateway;
use crate::protocol::Protocol;
use crate::protocol::errors::{ErrorKind, GatewayError};
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

pub async fn list_models(State(gw): State<Arc<Gateway>>, uri: Uri, headers: HeaderMap) -> Response {
    let snapshot = gw.snapshot_full();
    let query = uri.query();
    let gemini = uri.path().starts_with("/v1beta") || super::gemini::is_gemini_client(&headers, query);
    let anthropic = super::request::is_anthropic_client(&headers);
    let protocol = if gemini {
        Protocol::Gemini
    } else if anthropic {
        Protocol::Claude
    } else {
        Protocol::Openai
    };
    let models = match visible(&gw, &snapshot, &headers, query) {
        Ok(models) => models,
        Err(e) => return e.into_response(protocol),
    };
    if gemini {
        return match gemini_page(&models, query) {
            Ok(body) => axum::Json(body).into_response(),
            Err(e) => e.into_response(Protocol::Gemini),
        };
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

/// The models the request may see: all that are served, or, with a client key, only the key's
/// models on the key's endpoints (the same gate as every proxy path).
fn visible(
    gw: &Gateway,
    snapshot: &Snapshot,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Result<Vec<Listed>, GatewayError> {
    let gate = super::gate::Gate::open(gw, snapshot, headers, query, None).map_err(|r| r.to_error())?;
    let mut models = listed(snapshot, &gw.catalogue);
    if let Some(key) = gate.key() {
        models.retain(|m| key.allows_model(&m.id));
        for m in &mut models {
            m.endpoints.retain(|e| key.allows_endpoint(e));
        }
        models.retain(|m| !m.endpoints.is_empty());
    }
    Ok(models)
}

/// Google's default page size for `models.list`, and its largest.
const GEMINI_PAGE_SIZE: usize = 50;
const GEMINI_MAX_PAGE_SIZE: usize = 1000;

/// One model in Gemini's shape (`Model`): its resource name, and the methods the gateway serves
/// for it.
fn gemini_model(m: &Listed) -> Value {
    let name = if m.id.contains('/') { m.id.clone() } else { format!("models/{}", m.id) };
    json!({
        "name": name,
        "baseModelId": m.id,
        "version": "ccmesh",
        "displayName": m.id,
        "description": format!("served by {}", m.endpoints.join(", ")),
        "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"],
        "ccmesh_endpoints": m.endpoints,
    })
}

/// `models.list` in Gemini's shape: `{"models": […], "nextPageToken"}`, `pageSize` per page (50
/// by default, at most 1000); the page token is the offset of the next page.
fn gemini_page(models: &[Listed], query: Option<&str>) -> Result<Value, GatewayError> {
    let mut size = GEMINI_PAGE_SIZE;
    let mut offset = 0usize;
    for (k, v) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        let bad = |what: &str| {
            GatewayError::new(ErrorKind::InvalidRequest, "invalid_argument", format!("{k} must be {what}, not '{v}'"))
        };
        match k.as_ref() {
            "pageSize" | "page_size" => {
                let n: usize = v.parse().map_err(|_| bad("a whole number"))?;
                size = if n == 0 { GEMINI_PAGE_SIZE } else { n.min(GEMINI_MAX_PAGE_SIZE) };
            }
            "pageToken" | "page_token" if !v.is_empty() => {
                offset = v.parse().map_err(|_| bad("a token from an earlier page's nextPageToken"))?;
            }
            _ => {}
        }
    }
    let page: Vec<Value> = models.iter().skip(offset).take(size).map(gemini_model).collect();
    let mut body = json!({"models": page});
    let next = offset.saturating_add(size);
    if next < models.len() {
        body["nextPageToken"] = json!(next.to_string());
    }
    Ok(body)
}

/// `GET /v1beta/models/{model}` (and `/v1/models/{model}` from a Gemini client): the model in
/// Gemini's shape when an enabled endpoint serves it, else a Gemini `NOT_FOUND`.
pub fn get_gemini_model(gw: &Gateway, model: &str, headers: &HeaderMap, query: Option<&str>) -> Response {
    let snapshot = gw.snapshot_full();
    let models = match visible(gw, &snapshot, headers, query) {
        Ok(models) => models,
        Err(e) => return e.into_response(Protocol::Gemini),
    };
    let gate = super::gate::Gate::open(gw, &snapshot, headers, query, None).ok();
    let key = gate.as_ref().and_then(|g| g.key());
    let found = models.into_iter().find(|m| m.id.eq_ignore_ascii_case(model)).or_else(|| {
        if key.is_some_and(|k| !k.allows_model(model)) {
            return None;
        }
        let serving: Vec<String> = snapshot
            .endpoints
            .iter()
            .filter(|e| e.config.enabled && e.config.serves(model))
            .filter(|e| key.is_none_or(|k| k.allows_endpoint(&e.config.name)))
            .map(|e| e.config.name.clone())
            .collect();
        (!serving.is_empty()).then(|| Listed { id: model.to_string(), endpoints: serving })
    });
    match found {
        Some(m) => axum::Json(gemini_model(&m)).into_response(),
        None => {
            let message = format!(
                "no enabled endpoint serves model '{model}'; list the models with GET /v1beta/models, or add one that serves it"
            );
            GatewayError::new(ErrorKind::NotFound, "model_not_found", message).into_response(Protocol::Gemini)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn models(n: usize) -> Vec<Listed> {
        (0..n).map(|i| Listed { id: format!("gemini-{i}"), endpoints: vec!["gem".into()] }).collect()
    }

    #[test]
    fn gemini_pages_follow_page_size_and_tokens() {
        let all = models(5);
        let first = gemini_page(&all, Some("pageSize=2")).unwrap();
        assert_eq!(first["models"].as_array().unwrap().len(), 2);
        assert_eq!(first["models"][0]["name"], "models/gemini-0");
        assert_eq!(first["nextPageToken"], "2");
        let last = gemini_page(&all, Some("pageSize=2&pageToken=4")).unwrap();
        assert_eq!(last["models"][0]["name"], "models/gemini-4");
        assert!(last.get("nextPageToken").is_none(), "{last}");
        let whole = gemini_page(&all, None).unwrap();
        assert_eq!(whole["models"].as_array().unwrap().len(), 5);
        assert!(whole.get("nextPageToken").is_none());
        assert_eq!(gemini_page(&all, Some("pageToken=abc")).unwrap_err().kind, ErrorKind::InvalidRequest);
        assert_eq!(gemini_page(&all, Some("pageSize=99999")).unwrap()["models"].as_array().unwrap().len(), 5);
    }
}
