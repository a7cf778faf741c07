//! `POST /api/endpoints/{name}/test`: a minimal real request (one output token) with the
//! endpoint's own key and test model; the result is stored as `test_*` and feeds health when
//! there is no live traffic. It does not touch the breaker.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use serde_json::{Value, json};

use super::{ApiError, ApiResult, endpoint_json, write};
use crate::endpoint::{TestResult, TestStatus};
use crate::gateway::Gateway;
use crate::protocol::Format;
use crate::proxy::upstream::{join_url, request_headers};
use crate::timefmt::rfc3339;

const TEST_TIMEOUT: Duration = Duration::from_secs(30);

pub async fn test_endpoint(State(gw): State<Arc<Gateway>>, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    let snapshot = gw.snapshot_full();
    let endpoint = snapshot.find(&name).ok_or_else(|| ApiError::not_found(&name))?.clone();
    let model = endpoint.config.probe_model().map(str::to_string).ok_or_else(|| ApiError {
        status: axum::http::StatusCode::BAD_REQUEST,
        message: format!(
            "test_model: endpoint '{name}' lists no concrete model to test with; set test_model (PATCH /api/endpoints/{name})"
        ),
        field: Some("test_model".into()),
    })?;
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
                crate::convert::upstream_path(Format::Gemini, &model, crate::convert::Call::Generate { stream: false });
            (
                gemini_path.as_ref(),
                json!({"contents": [{"role": "user", "parts": [{"text": "ping"}]}], "generationConfig": {"maxOutputTokens": 16}}),
            )
        }
    };
    let url = join_url(&endpoint.config.base_url, endpoint.config.format, rest, None);
    let mut headers = request_headers(&axum::http::HeaderMap::new(), &endpoint, &gw.hop_header);
    headers.insert(axum::http::header::CONTENT_TYPE, axum::http::HeaderValue::from_static("application/json"));
    let started = tokio::time::Instant::now();
    let sent = tokio::time::timeout(
        TEST_TIMEOUT,
        gw.client.send(axum::http::Method::POST, &url, headers, bytes::Bytes::from(body.to_string())),
    )
    .await;
    let latency_ms = started.elapsed().as_millis() as u64;
    let (status, error) = match sent {
        Ok(Ok(r)) if r.status().is_success() => (TestStatus::Available, None),
        Ok(Ok(r)) => {
            let code = r.status().as_u16();
            let text = tokio::time::timeout(TEST_TIMEOUT, crate::proxy::upstream::read_body(r.into_body(), 64 * 1024))
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default();
            // Masked before the cut, so the cut cannot leave part of a key behind: upstreams
            // that reject a key often quote it.
            let text = String::from_utf8_lossy(&text);
            let snippet: String =
                crate::redact::current().scrub(&text, Some(&endpoint.config.api_key)).chars().take(300).collect();
            (TestStatus::Unavailable, Some(format!("HTTP {code}: {snippet}")))
        }
        Ok(Err(e)) => {
            let kind = crate::proxy::classify::classify_network_error(&e);
            (TestStatus::Unavailable, Some(kind.describe().to_string()))
        }
        Err(_) => {
            (TestStatus::Unavailable, Some(crate::proxy::classify::NetworkErrorKind::Timeout.describe().to_string()))
        }
    };
    let result = TestResult { status, at: Some(rfc3339(gw.clock.wall())), latency_ms: Some(latency_ms), error };
    let saved = write(&gw, "endpoint_tested", move |g| {
        g.store.save_test_result(&name, &result)?;
        Ok(g.store.get_endpoint(&name)?)
    })
    .await?;
    Ok(Json(endpoint_json(&saved)))
}
