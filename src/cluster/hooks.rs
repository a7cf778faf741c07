//! Where the breakers and the rotation hand their decisions to the cluster (`breaker::Shared`,
//! `routing::rotation::SharedRotation`). Everything is queued for the background work, except the
//! half-open probe's claim: the one call a request waits for, and only when a probe is due.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::fallback::Op;
use super::{Core, Work, scripts};
use crate::breaker::OpenReason;
use crate::endpoint::EndpointId;
use crate::protocol::Protocol;

/// A probe claim's expiry in Redis. It is refreshed every `PROBE_REFRESH` while the probe runs
/// (so a probe may take as long as its own timeouts allow), and a prober that crashed gives the
/// permit back by expiry within this time.
pub const PROBE_CLAIM: Duration = Duration::from_secs(5);
pub const PROBE_REFRESH: Duration = Duration::from_millis(1500);

pub struct Hooks(pub Arc<Core>);

impl crate::breaker::Shared for Hooks {
    fn opened(&self, endpoint: &str, reason: OpenReason, until_ms: i64) {
        self.0.forget_probe(endpoint);
        self.0.enqueue(Work::Open { endpoint: endpoint.to_string(), reason, until_ms });
    }

    fn closed(&self, endpoint: &str, reset: bool) {
        self.0.forget_probe(endpoint);
        self.0.enqueue(Work::Close { endpoint: endpoint.to_string(), reset });
    }

    fn probe_succeeded(&self, endpoint: &str, threshold: u32) {
        self.0.forget_probe(endpoint);
        self.0.enqueue(Work::ProbeSucceeded { endpoint: endpoint.to_string(), threshold });
    }

    fn probe_released(&self, endpoint: &str) {
        self.0.forget_probe(endpoint);
        self.0.enqueue(Work::ProbeReleased { endpoint: endpoint.to_string() });
    }

    fn claim_probe<'a>(&'a self, endpoint: &'a str) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        Box::pin(self.0.claim_probe(endpoint))
    }
}

impl crate::routing::rotation::SharedRotation for Hooks {
    fn moved(&self, protocol: Protocol, seen: Option<EndpointId>, to: EndpointId) {
        self.0.enqueue(Work::MoveCurrent { protocol, seen, to });
    }

    fn switched(&self, protocol: Protocol, to: EndpointId) {
        self.0.enqueue(Work::SetCurrent { protocol, to });
    }
}

impl Core {
    async fn claim_probe(&self, endpoint: &str) -> bool {
        let now = self.clock.now();
        {
            let mut probes = self.probes.lock().unwrap_or_else(|p| p.into_inner());
            match probes.elsewhere.get(endpoint) {
                Some(until) if *until > now => return false,
                Some(_) => {
                    probes.elsewhere.remove(endpoint);
                }
                None => {}
            }
        }
        let keys = [self.names.probe(endpoint)];
        let args = [self.node.clone(), PROBE_CLAIM.as_millis().to_string()];
        match self.redis.eval(&scripts::CLAIM_PROBE, &keys, &args, self.timeout).await.map(|v| v.int()) {
            Ok(Some(0)) => {
                self.probes.lock().unwrap_or_else(|p| p.into_inner()).held.insert(endpoint.to_string());
                true
            }
            Ok(Some(left)) => {
                let until = now + Duration::from_millis(u64::try_from(left).unwrap_or(1));
                self.probes.lock().unwrap_or_else(|p| p.into_inner()).elsewhere.insert(endpoint.to_string(), until);
                false
            }
            // Fail-open: a probe per node is better than none while Redis cannot say.
            Ok(None) | Err(_) => {
                self.fell_back(Op::Probe);
                true
            }
        }
    }

    /// This node's probe of `endpoint` ended.
    fn forget_probe(&self, endpoint: &str) {
        self.probes.lock().unwrap_or_else(|p| p.into_inner()).held.remove(endpoint);
    }

    /// News about `endpoint` (opened, closed, reset): a claim seen elsewhere is over.
    pub(crate) fn probe_news(&self, endpoint: &str) {
        self.probes.lock().unwrap_or_else(|p| p.into_inner()).elsewhere.remove(endpoint);
    }

    /// The probes this node holds now (to refresh their claims).
    pub(crate) fn held_probes(&self) -> Vec<String> {
        self.probes.lock().unwrap_or_else(|p| p.into_inner()).held.iter().cloned().collect()
    }
}
