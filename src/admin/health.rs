//! `GET /api/health` (SPEC §7): live breaker state per endpoint, or — for an endpoint with no
//! traffic since the gateway started — the last connectivity test, marked `"source": "test"`.
//!
//! `badge` is the one reading the CLI and the dashboard both show (seed 002's tiers): `healthy`
//! (closed, no failure in a row), `degraded` (closed, failing but not tripped), `open`,
//! `recovering` (half-open), `unknown` (no live data; the last test is in `test_status`).
//! `probe_due` says an open endpoint's cooldown has passed: it is no longer skipped, and the
//! next request that reaches it is its probe.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use crate::breaker::Circuit;
use crate::endpoint::TestStatus;
use crate::gateway::Gateway;
use crate::snapshot::LiveEndpoint;
use crate::timefmt::rfc3339;

pub async fn get_health(State(gw): State<Arc<Gateway>>) -> Json<Value> {
    let snapshot = gw.snapshot_full();
    Json(Value::Array(snapshot.endpoints.iter().map(|e| endpoint_health(e)).collect()))
}

pub fn endpoint_health(e: &LiveEndpoint) -> Value {
    let v = e.breaker.view();
    // A verdict learned from the cluster is state, even on a node that has sent nothing yet.
    if !v.has_data && !v.from_cluster {
        let (status, circuit) = match e.config.test.status {
            TestStatus::Available => ("healthy", "closed"),
            TestStatus::Unavailable => ("unhealthy", "open"),
            TestStatus::Untested => ("unknown", "closed"),
        };
        return json!({
            "name": e.config.name,
            "status": status,
            "circuit": circuit,
            "open_reason": null,
            "consecutive_failures": 0,
            "success_rate": null,
            "requests": 0,
            "last_error": e.config.test.error.as_deref().map(crate::redact::scrub),
            "last_failure_at": null,
            "last_success_at": null,
            "cooldown_remaining_ms": 0,
            "badge": "unknown",
            "probe_due": false,
            "source": "test",
            "test_status": e.config.test.status.as_str(),
            "test_at": e.config.test.at,
        });
    }
    let (status, circuit) = match v.circuit {
        Circuit::Closed => ("healthy", "closed"),
        Circuit::Open => ("unhealthy", "open"),
        Circuit::HalfOpen => ("recovering", "half_open"),
    };
    let decided = v.successes + v.failures;
    let success_rate = if decided == 0 { 1.0 } else { v.successes as f64 / decided as f64 };
    json!({
        "name": e.config.name,
        "status": status,
        "circuit": circuit,
        "open_reason": v.open_reason.map(crate::breaker::OpenReason::as_str),
        "consecutive_failures": v.consecutive_failures,
        "success_rate": success_rate,
        "requests": v.requests,
        "last_error": v.last_error.as_deref().map(crate::redact::scrub),
        "last_failure_at": v.last_failure_at.map(rfc3339),
        "last_success_at": v.last_success_at.map(rfc3339),
        "cooldown_remaining_ms": v.cooldown_remaining.as_millis() as u64,
        "badge": badge(v.circuit, v.consecutive_failures),
        "probe_due": v.circuit == Circuit::Open && v.cooldown_remaining.is_zero(),
        // SPEC §15.13: a state learned from another node of the cluster says so.
        "source": if v.from_cluster { "cluster" } else { "live" },
    })
}

/// SPEC §7's badge of live breaker state.
pub fn badge(circuit: Circuit, consecutive_failures: u32) -> &'static str {
    match circuit {
        Circuit::Closed if consecutive_failures > 0 => "degraded",
        Circuit::Closed => "healthy",
        Circuit::Open => "open",
        Circuit::HalfOpen => "recovering",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_badge_has_seed_002s_tiers() {
        assert_eq!(badge(Circuit::Closed, 0), "healthy");
        assert_eq!(badge(Circuit::Closed, 2), "degraded");
        assert_eq!(badge(Circuit::Open, 0), "open");
        assert_eq!(badge(Circuit::Open, 9), "open");
        assert_eq!(badge(Circuit::HalfOpen, 1), "recovering");
    }
}
