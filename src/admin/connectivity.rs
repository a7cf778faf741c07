//! `POST /api/endpoints/{name}/test`: is the endpoint reachable with its key? The result is
//! stored as `test_*` and feeds health when there is no live traffic. It does not touch the
//! breaker.
//!
//! With a model to ask for (`test_model`, else the first concrete model the endpoint lists or
//! maps to) the test is a minimal real request (one output token; Responses: 16, the API's
//! minimum). Without one — an endpoint that lists only globs, or nothing — it asks for the
//! upstream's model list (`GET {base}/v1/models` with the endpoint's key, the path and auth of
//! its format), which needs no model: 2xx → available, 401/403 → unavailable "key rejected",
//! anything else → unavailable with the status.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::{ApiError, ApiResult, endpoint_json, write};
use crate::catalogue::{ListError, get_page, list_url, network_text, snippet};
use crate::endpoint::{TestResult, TestStatus};
use crate::gateway::Gateway;
use crate::protocol::Format;
use crate::proxy::upstream::{join_url, request_headers};
use crate::snapshot::LiveEndpoint;
use crate::timefmt::rfc3339;

const TEST_TIMEOUT: Duration = Duration::from_secs(30);

pub async fn test_endpoint(State(gw): State<Arc<Gateway>>, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    let snapshot = gw.snapshot_full();
    let endpoint = snapshot.find(&name).ok_or_else(|| ApiError::not_found(&name))?.clone();
    let started = tokio::time::Instant::now();
    let probe = async {
        match endpoint.config.probe_model() {
            Some(model) => real_request(&gw, &endpoint, model).await,
            None => model_list(&gw, &endpoint).await,
        }
    };
    let outcome = tokio::time::timeout(TEST_TIMEOUT, probe)
        .await
        .unwrap_or_else(|_| Err(crate::proxy::outcome::NetworkErrorKind::Timeout.describe().to_string()));
    let latency_ms = started.elapsed().as_millis() as u64;
    let (status, error) = match outcome {
        Ok(()) => (TestStatus::Available, None),
        Err(why) => (TestStatus::Unavailable, Some(why)),
    };
    let result = TestResult { status, at: Some(rfc3339(gw.clock.wall())), latency_ms: Some(latency_ms), error };
    let saved = write(&gw, "endpoint_tested", move |g| {
        g.store.save_test_result(&name, &result)?;
        Ok(g.store.get_endpoint(&name)?)
    })
    .await?;
    Ok(Json(endpoint_json(&saved)))
}

/// A one-token request for `model`.
async fn real_request(gw: &Gateway, endpoint: &LiveEndpoint, model: &str) -> Result<(), String> {
    let gemini_path;
    let (rest, body) = match endpoint.config.format {
        Format::Anthropic => {
            ("/messages", json!({"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": "ping"}]}))
        }
        Format::Openai => (
            "/chat/completions",
            json!({"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": "ping"}]}),
        ),
        // The Responses API rejects max_output_tokens below 16.
        Format::Responses => ("/responses", json!({"model": model, "max_output_tokens": 16, "input": "ping"})),
        // The model is in the path; thinking models spend a small output budget on thoughts.
        Format::Gemini => {
            gemini_path =
                crate::convert::upstream_path(Format::Gemini, model, crate::convert::Call::Generate { stream: false });
            (
                gemini_path.as_ref(),
                json!({"contents": [{"role": "user", "parts": [{"text": "ping"}]}], "generationConfig": {"maxOutputTokens": 16}}),
            )
        }
    };
    let url = join_url(&endpoint.config.base_url, endpoint.config.format, rest, None);
    let mut headers = request_headers(&axum::http::HeaderMap::new(), endpoint, &gw.hop_header, false);
    headers.insert(axum::http::header::CONTENT_TYPE, axum::http::HeaderValue::from_static("application/json"));
    let answer = gw
        .client
        .send(
            axum::http::Method::POST,
            url.clone(),
            endpoint.origin.as_ref(),
            headers,
            bytes::Bytes::from(body.to_string()),
        )
        .await
        .map_err(|e| network_text(&e, &url))?;
    if answer.status().is_success() {
        return Ok(());
    }
    let code = answer.status().as_u16();
    let text = crate::proxy::upstream::read_body(answer.into_body(), 64 * 1024).await.unwrap_or_default();
    // Masked before the cut, so the cut cannot leave part of a key behind: upstreams that
    // reject a key often quote it.
    Err(format!("HTTP {code}: {}", snippet(&endpoint.config, &text)))
}

/// The upstream's model list: no model needed.
async fn model_list(gw: &Gateway, endpoint: &LiveEndpoint) -> Result<(), String> {
    let url = list_url(&endpoint.config, None);
    let up = crate::catalogue::Upstream { client: &gw.client, hop: &gw.hop_header };
    match get_page(up, endpoint, &url).await {
        Ok((status, _)) if status.is_success() => Ok(()),
        Ok((status @ (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN), body)) => {
            Err(format!("key rejected (HTTP {} to GET {url}): {}", status.as_u16(), snippet(&endpoint.config, &body)))
        }
        Ok((status, body)) => Err(format!(
            "HTTP {} to GET {url}: {} (the endpoint names no concrete model, so the test asked for its model list; to test with a real request instead, set one with test_model (PATCH /api/endpoints/{} {{\"test_model\": \"MODEL\"}}))",
            status.as_u16(),
            snippet(&endpoint.config, &body),
            endpoint.config.name
        )),
        Err(ListError::Network(why)) => Err(why),
        Err(other) => Err(other.to_string()),
    }
}
