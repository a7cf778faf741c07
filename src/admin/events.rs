//! `GET /api/events`: the live event stream (SSE) for the dashboard and `ccmesh logs -f`.
//!
//! ```text
//! event: hello          the endpoints' health now, so a client can draw before anything happens
//! event: request        a finished request (summary)
//! event: breaker        a breaker transition
//! event: config         what configuration changed
//! event: lagged         you fell behind and events were lost: reconnect (the stream ends)
//! : keep-alive          every 15 s, so proxies and idle timeouts keep the connection
//! ```
//!
//! The gateway never waits for a subscriber: see `observe::live` for how a slow one is dropped.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderValue;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::{Value, json};

use super::health::endpoint_health;
use crate::gateway::Gateway;
use crate::observe::live::Delivery;

pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

pub async fn stream(State(gw): State<Arc<Gateway>>) -> Response {
    // Subscribe before reading the state for `hello`, so nothing that happens in between is lost
    // (a change may then show twice: in `hello` and as an event; never zero times).
    let subscription = gw.events.live().subscribe();
    let hello = sse_event("hello", &hello(&gw));
    let events = futures_util::stream::once(async move { hello })
        .chain(subscription.into_stream().map(|d| match d {
            Delivery::Event(e) => sse_event(e.kind, &e.data),
            Delivery::Lagged { missed } => sse_event(
                "lagged",
                &json!({
                    "missed": missed,
                    "message": "this subscriber fell behind and events were lost; reconnect to continue",
                }),
            ),
        }))
        .map(Ok::<_, Infallible>);
    let mut response =
        Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE).text("keep-alive")).into_response();
    // Reverse proxies (nginx) buffer responses unless told not to; live events must not wait.
    response.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

fn hello(gw: &Gateway) -> Value {
    let snapshot = gw.snapshot_full();
    json!({"endpoints": snapshot.endpoints.iter().map(|e| endpoint_health(e)).collect::<Vec<_>>()})
}

fn sse_event(kind: &str, data: &Value) -> Event {
    // `Value`'s `Display` is compact JSON: one line, as an SSE `data:` field wants.
    Event::default().event(kind).data(data.to_string())
}
