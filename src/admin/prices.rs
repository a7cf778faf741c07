//! `/api/prices`: the effective price table (built-in merged with overrides) and the overrides.
//! Reads come from the snapshot; writes go to SQLite and rebuild it (`admin::write`).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::Value;

use super::{ApiError, ApiResult, parse_body, write};
use crate::gateway::Gateway;
use crate::observe::cost::{Price, validate_model};

/// `GET /api/prices`: every entry, sorted by model, each with `"source": "builtin" | "custom"`.
pub async fn list_prices(State(gw): State<Arc<Gateway>>) -> Json<Value> {
    let snapshot = gw.snapshot_full();
    Json(Value::Array(snapshot.prices.entries().iter().map(|e| e.to_json()).collect()))
}

/// `PUT /api/prices/{model}` with `{"input", "output", "cache_read", "cache_write"}` (USD per
/// million tokens; cache prices default to the input price). `{model}` may be a `*` glob.
pub async fn put_price(
    State(gw): State<Arc<Gateway>>,
    Path(model): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult<Json<Value>> {
    super::check_file_rules(&gw, crate::config::authoritative::Section::Prices)?;
    let model = validate_model(&model)?;
    let price = Price::from_json(&parse_body(&body)?, &[])?;
    let stored = model.clone();
    write(&gw, "prices", move |g| Ok(g.store.upsert_price(&stored, &price)?)).await?;
    let snapshot = gw.snapshot_full();
    let entry = snapshot
        .prices
        .custom(&model)
        .ok_or_else(|| ApiError::internal(format!("the price of '{model}' was saved but is not in the table")))?;
    Ok(Json(entry.to_json()))
}

/// `DELETE /api/prices/{model}`: back to the built-in price (or none); 404 when there is no
/// override of that name.
pub async fn delete_price(State(gw): State<Arc<Gateway>>, Path(model): Path<String>) -> ApiResult<StatusCode> {
    super::check_file_rules(&gw, crate::config::authoritative::Section::Prices)?;
    let model = validate_model(&model)?;
    let no_override = || ApiError {
        status: StatusCode::NOT_FOUND,
        message: format!(
            "no custom price for '{model}'; built-in prices cannot be deleted, only overridden (list them with GET /api/prices)"
        ),
        field: None,
    };
    // The snapshot mirrors the table (every write rebuilds it): nothing to delete, nothing to
    // write and no config-changed event.
    if gw.snapshot().prices.custom(&model).is_none() {
        return Err(no_override());
    }
    let name = model.clone();
    let deleted = write(&gw, "prices", move |g| Ok(g.store.delete_price(&name)?)).await?;
    if deleted { Ok(StatusCode::NO_CONTENT) } else { Err(no_override()) }
}
