//! The one enforcement point of client keys on the proxy paths (SPEC §12): every `/v1/*` request
//! passes it before any routing, in two steps the types make unskippable — `Gate::open` (who is
//! asking: 401s, before the body is read, so a stranger cannot make the gateway buffer a body)
//! and `Gate::admit` (may they ask this: the model, the explicit endpoint, the price under a
//! budget — 403s — then the limiter's one atomic check-and-count — 429s), whose `Admitted` is
//! what routing needs to go on. `GET /v1/models` opens the gate too. The decisions are the pure
//! `keys::admit`; this is its shell: it reads the clock, takes the lease, tells the trail, the
//! metrics and the log. None of it touches a breaker.

use std::sync::Arc;

use axum::http::HeaderMap;

use super::trail::Trail;
use crate::gateway::Gateway;
use crate::keys::{self, ClientKey, KeyCharge, Refusal};
use crate::protocol::Protocol;
use crate::snapshot::{LiveEndpoint, Snapshot};

/// A request whose credential was checked.
pub struct Gate {
    key: Option<Arc<ClientKey>>,
}

/// A request allowed through: its key (when keys are enforced), whose endpoint list routing
/// applies.
#[derive(Default)]
pub struct Admitted {
    pub key: Option<Arc<ClientKey>>,
}

impl Gate {
    /// Authenticate the request's credential (`x-api-key`, `Authorization: Bearer`,
    /// `x-goog-api-key` or `?key=`). The credential itself goes nowhere: the trail learns the
    /// key's name.
    pub fn open(
        gw: &Gateway,
        snapshot: &Snapshot,
        headers: &HeaderMap,
        query: Option<&str>,
        trail: Option<&mut Trail>,
    ) -> Result<Gate, Refusal> {
        // A gateway without keys pays nothing here: no credential parsed, no clock read.
        if !snapshot.keys.enforced() {
            return Ok(Gate { key: None });
        }
        let credential = super::request::presented_credential(headers, query);
        let key = keys::admit::authenticate(&snapshot.keys, credential.as_deref(), keys::now_ms(&*gw.clock))
            .inspect_err(|r| refused(gw, r))?;
        if let (Some(k), Some(t)) = (&key, trail) {
            t.set_client_key(&k.name);
        }
        Ok(Gate { key })
    }

    /// The key's name, when one was presented.
    pub fn key(&self) -> Option<&Arc<ClientKey>> {
        self.key.as_ref()
    }

    /// Authorize `model` (after `@name/` removal) and the explicit endpoint, if any, then count
    /// the request against the key's limits. The concurrency lease and what the request will
    /// owe go into the trail, which settles them when the request ends.
    pub async fn admit(
        self,
        gw: &Gateway,
        snapshot: &Snapshot,
        protocol: Protocol,
        model: Option<&str>,
        explicit: Option<&LiveEndpoint>,
        trail: &mut Trail,
    ) -> Result<Admitted, Refusal> {
        let Some(key) = self.key else { return Ok(Admitted::default()) };
        let check = async {
            keys::admit::authorize(&key, model, |m| snapshot.priced(m))?;
            if let Some(e) = explicit
                && !key.allows_endpoint(&e.config.name)
            {
                return Err(Refusal::Endpoint {
                    key: key.name.clone(),
                    endpoint: e.config.name.clone(),
                    allowed: key.endpoints.clone(),
                });
            }
            let timeouts = snapshot.settings.timeouts(protocol);
            let lease_ttl = lease_ttl(timeouts.total, timeouts.max_stream_duration);
            let now = keys::now_ms(&*gw.clock);
            // In a cluster the one check-and-count is Redis's (within the short timeout).
            let lease = match &gw.cluster {
                // Boxed: the Redis call's state would otherwise sit inline in every request's
                // future, clustered or not, and be copied with it (see `proxy::handle`).
                Some(cluster) => Box::pin(cluster.limiter.admit(&gw.limiter, &key, now, lease_ttl)).await,
                None => keys::limiter::admit(&gw.limiter, &key, now, lease_ttl),
            }
            .map_err(|limit| Refusal::Limit { key: key.name.clone(), limit })?;
            Ok::<_, Refusal>(KeyCharge::new(lease, gw.clock.clone()))
        };
        match check.await {
            Ok(charge) => {
                trail.set_charge(charge);
                Ok(Admitted { key: Some(key) })
            }
            Err(refusal) => {
                refused(gw, &refusal);
                Err(refusal)
            }
        }
    }
}

/// How long a concurrency lease lives if its request never gives it back: the request's total
/// deadline and its longest stream (an hour when streams are not capped). In one process every
/// lease is given back when its request ends; the expiry is for a holder that vanished.
pub fn lease_ttl(total: std::time::Duration, max_stream: Option<std::time::Duration>) -> u64 {
    let stream = max_stream.unwrap_or(std::time::Duration::from_secs(3600));
    u64::try_from((total + stream).as_millis()).unwrap_or(u64::MAX)
}

/// Count and log a refusal. A 401 is logged at debug level only: scanners send many.
fn refused(gw: &Gateway, refusal: &Refusal) {
    let reason = refusal.reason();
    let key = refusal.key().unwrap_or("");
    gw.events.metrics().observe_key_refusal(key, reason);
    match refusal {
        Refusal::Missing | Refusal::Unknown => {
            tracing::debug!(event = "client_key_refused", reason, "a proxy request without a valid client key")
        }
        _ => tracing::info!(event = "client_key_refused", key, reason, "a client key's request was refused"),
    }
}

/// SPEC §15.10: the key's endpoint list filters the candidates at §2 step 1. `None` when the
/// key has no list (every endpoint).
pub fn allowed_endpoints(admitted: &Admitted, all: &[Arc<LiveEndpoint>]) -> Option<Vec<Arc<LiveEndpoint>>> {
    let key = admitted.key.as_ref().filter(|k| !k.endpoints.is_empty())?;
    Some(all.iter().filter(|e| key.allows_endpoint(&e.config.name)).cloned().collect())
}

/// The refusal when the key's endpoint list alone leaves no candidate.
pub fn no_allowed_endpoint(gw: &Gateway, admitted: &Admitted) -> Option<Refusal> {
    let key = admitted.key.as_ref()?;
    let refusal = Refusal::NoEndpoint { key: key.name.clone(), allowed: key.endpoints.clone() };
    refused(gw, &refusal);
    Some(refusal)
}
