//! Prometheus metrics (`GET /metrics`). SKELETON: the API is fixed; the registry and rendering
//! land with issue 4's metrics work.

use super::record::RequestRecord;
use crate::breaker::Transition;

#[derive(Default)]
pub struct Metrics {}

impl Metrics {
    pub fn new() -> Self {
        Self {}
    }

    /// Count a finished request (and its attempts, tokens, cost, latency, overhead).
    pub fn observe_request(&self, _record: &RequestRecord) {}

    /// Count a breaker transition.
    pub fn observe_transition(&self, _endpoint: &str, _transition: &Transition) {}
}
