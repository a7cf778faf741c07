//! Live events for `GET /api/events` (SSE): request-completed summaries, breaker transitions,
//! configuration changes. SKELETON: the API is fixed; the bus lands with issue 4's events work.

use serde_json::Value;

/// One live event: its SSE event name and JSON payload.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveEvent {
    /// `request`, `breaker`, `config`.
    pub kind: &'static str,
    pub data: Value,
}

#[derive(Default)]
pub struct LiveBus {}

impl LiveBus {
    pub fn new() -> Self {
        Self {}
    }

    /// Publish to every subscriber; never blocks, never waits for a slow subscriber.
    pub fn publish(&self, _event: LiveEvent) {}
}
