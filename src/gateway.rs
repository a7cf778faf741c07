//! The shared state of a running gateway: the configuration snapshot the request path reads
//! (swapped atomically on every change: no database read per request), breakers, rotation.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use arc_swap::ArcSwap;
use axum::http::{HeaderMap, HeaderName, HeaderValue};

use crate::breaker::{BreakerCell, Breakers};
use crate::clock::Clock;
use crate::config::Settings;
use crate::endpoint::{Endpoint, EndpointId};
use crate::events::Events;
use crate::observe::cost::PriceTable;
use crate::observe::writer::RecordSink;
use crate::protocol::Format;
use crate::protocol::Protocol;
use crate::store::{Store, StoreError};

/// An endpoint as the request path sees it: its configuration plus everything precomputed
/// so that a request does no parsing, formatting or lookups for it.
pub struct LiveEndpoint {
    pub config: Endpoint,
    pub breaker: Arc<BreakerCell>,
    /// `x-api-key` or `authorization: Bearer`, marked sensitive so it never prints.
    pub auth: (HeaderName, HeaderValue),
    /// The endpoint's extra headers, validated at write time.
    pub extra_headers: HeaderMap,
    /// The `Host` header its requests carry (host, and port unless the scheme's default), built
    /// once here rather than by the HTTP client from the URL on every request.
    pub host: Option<HeaderValue>,
}

impl AsRef<Endpoint> for LiveEndpoint {
    fn as_ref(&self) -> &Endpoint {
        &self.config
    }
}

impl AsRef<Endpoint> for Arc<LiveEndpoint> {
    fn as_ref(&self) -> &Endpoint {
        &self.config
    }
}

/// Immutable configuration, replaced as a whole.
pub struct Snapshot {
    /// Ordered by `sort_order`, then name.
    pub endpoints: Vec<Arc<LiveEndpoint>>,
    pub settings: Arc<Settings>,
    /// Model prices (built-in table with the stored overrides).
    pub prices: Arc<PriceTable>,
}

impl Snapshot {
    pub fn find(&self, name: &str) -> Option<&Arc<LiveEndpoint>> {
        self.endpoints.iter().find(|e| e.config.name == name)
    }
}

/// SPEC §3: the current endpoint per inbound protocol, by identity (0 = none yet), the
/// round-robin counters, and the one-shot start set by `PUT /api/current`.
#[derive(Default)]
pub struct Rotation {
    current: [AtomicI64; 3],
    manual_next: [AtomicI64; 3],
    round_robin: [AtomicU64; 3],
}

impl Rotation {
    pub fn current(&self, p: Protocol) -> Option<EndpointId> {
        id(self.current[p.index()].load(Ordering::Acquire))
    }

    /// Move the current endpoint to `to` only if it is still `seen` (what this request saw
    /// when it started), so concurrent requests never leapfrog each other.
    pub fn compare_and_set(&self, p: Protocol, seen: Option<EndpointId>, to: EndpointId) -> bool {
        self.current[p.index()].compare_exchange(raw(seen), to.0, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// A manual switch: the current endpoint, and the next request's start under every strategy.
    pub fn set_manual(&self, p: Protocol, to: EndpointId) {
        self.current[p.index()].store(to.0, Ordering::Release);
        self.manual_next[p.index()].store(to.0, Ordering::Release);
    }

    pub fn take_manual(&self, p: Protocol) -> Option<EndpointId> {
        let slot = &self.manual_next[p.index()];
        if slot.load(Ordering::Relaxed) == 0 {
            return None;
        }
        id(slot.swap(0, Ordering::AcqRel))
    }

    pub fn next_round_robin(&self, p: Protocol) -> u64 {
        self.round_robin[p.index()].fetch_add(1, Ordering::Relaxed)
    }

    /// Forget a deleted endpoint.
    pub fn forget(&self, gone: EndpointId) {
        for slot in self.current.iter().chain(self.manual_next.iter()) {
            let _ = slot.compare_exchange(gone.0, 0, Ordering::AcqRel, Ordering::Acquire);
        }
    }
}

fn id(v: i64) -> Option<EndpointId> {
    (v != 0).then_some(EndpointId(v))
}

fn raw(id: Option<EndpointId>) -> i64 {
    id.map(|i| i.0).unwrap_or(0)
}

pub struct Gateway {
    snapshot: ArcSwap<Snapshot>,
    pub breakers: Breakers,
    pub rotation: Rotation,
    pub clock: Arc<dyn Clock>,
    pub events: Events,
    pub store: Store,
    pub client: crate::proxy::upstream::UpstreamClient,
    pub admin_token: Option<String>,
    /// Serialises admin writes so snapshot rebuilds never race each other.
    pub admin_lock: tokio::sync::Mutex<()>,
    /// Where this gateway listens and keeps its data, and whose home it runs in: set once it is
    /// bound, for the client settings the admin API may edit (`/api/clients`).
    pub local: std::sync::OnceLock<crate::admin::clients::LocalHost>,
    /// This instance's identity in the loop-detection header (SPEC §8), random per start.
    pub instance_id: String,
    /// `x-ccmesh-hop: <instance_id>`, for requests that arrive with no hop header of their own.
    pub hop_header: HeaderValue,
    /// Host names given with `serve --allowed-host` (besides the `allowed_hosts` setting).
    pub allowed_hosts: std::sync::OnceLock<Vec<String>>,
    /// Failed dashboard logins per client address.
    pub login_limit: crate::admin::login_limit::LoginLimit,
    /// Client connections open now, across every serving thread.
    pub open_connections: Arc<std::sync::atomic::AtomicUsize>,
    /// The address this gateway listens on, once bound (for refusing endpoints that point at it).
    pub listen_addr: std::sync::OnceLock<std::net::SocketAddr>,
    /// This gateway's entry in the process-wide set of secrets to redact.
    redact_owner: u64,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        crate::redact::uninstall(self.redact_owner);
    }
}

/// A random identifier, as lower-case hex.
pub fn random_hex(bytes: usize) -> String {
    use ring::rand::SecureRandom;
    let mut buf = vec![0u8; bytes];
    // The system RNG does not fail on the platforms ccmesh runs on; a zero id only weakens
    // loop detection between two such instances.
    let _ = ring::rand::SystemRandom::new().fill(&mut buf);
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

impl Gateway {
    pub fn new(
        store: Store,
        clock: Arc<dyn Clock>,
        client: crate::proxy::upstream::UpstreamClient,
        admin_token: Option<String>,
        records: RecordSink,
    ) -> Result<Arc<Gateway>, StoreError> {
        let events = Events::new(records);
        let instance_id = random_hex(8);
        let hop_header = HeaderValue::from_str(&instance_id).unwrap_or_else(|_| HeaderValue::from_static("0"));
        let gateway = Gateway {
            snapshot: ArcSwap::from_pointee(Snapshot {
                endpoints: Vec::new(),
                settings: Arc::new(Settings::default()),
                prices: Arc::new(PriceTable::builtin()),
            }),
            breakers: Breakers::new(clock.clone(), events.clone()),
            rotation: Rotation::default(),
            clock,
            events,
            store,
            client,
            admin_token,
            admin_lock: tokio::sync::Mutex::new(()),
            instance_id,
            hop_header,
            listen_addr: std::sync::OnceLock::new(),
            open_connections: Arc::default(),
            allowed_hosts: std::sync::OnceLock::new(),
            login_limit: Default::default(),
            redact_owner: {
                static OWNERS: AtomicU64 = AtomicU64::new(1);
                OWNERS.fetch_add(1, Ordering::Relaxed)
            },
            local: std::sync::OnceLock::new(),
        };
        gateway.reload()?;
        Ok(Arc::new(gateway))
    }

    /// `None` while storage works; else what is wrong (SPEC §15.8).
    pub fn storage_problem(&self) -> Option<String> {
        self.events.records().problem()
    }

    /// A short-lived view of the configuration (do not hold across an `.await`).
    pub fn snapshot(&self) -> arc_swap::Guard<Arc<Snapshot>> {
        self.snapshot.load()
    }

    /// The configuration as an owned `Arc`, for work that spans `.await`s.
    pub fn snapshot_full(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    /// Rebuild the snapshot from the database and swap it in. Breakers and rotation survive
    /// because they are keyed by endpoint id.
    pub fn reload(&self) -> Result<(), StoreError> {
        let endpoints = self.store.list_endpoints()?;
        let settings = match self.store.load_settings()? {
            Some(doc) => Settings::default().patched(&doc).unwrap_or_else(|e| {
                tracing::error!(event = "settings_invalid", error = %e, "stored settings are invalid; using defaults");
                Settings::default()
            }),
            None => Settings::default(),
        };
        let secrets = endpoints.iter().map(|e| e.api_key.clone()).chain(self.admin_token.clone()).collect();
        crate::redact::install(self.redact_owner, secrets);
        let ids: Vec<EndpointId> = endpoints.iter().map(|e| e.id).collect();
        let old = self.snapshot.load();
        for gone in old.endpoints.iter().map(|e| e.config.id).filter(|id| !ids.contains(id)) {
            self.rotation.forget(gone);
        }
        self.breakers.retain(&ids);
        let live = endpoints
            .into_iter()
            .map(|config| {
                let breaker = self.breakers.cell(config.id);
                Arc::new(LiveEndpoint {
                    auth: auth_header(&config),
                    extra_headers: extra_headers(&config),
                    host: host_header(&config.base_url),
                    breaker,
                    config,
                })
            })
            .collect();
        let prices = Arc::new(PriceTable::load(&self.store)?);
        self.snapshot.store(Arc::new(Snapshot { endpoints: live, settings: Arc::new(settings), prices }));
        // Metric labels are bounded by the configuration: tell the registry what is configured.
        self.events.metrics().configure(&self.snapshot.load());
        Ok(())
    }
}

/// The credential header an endpoint gets: `x-api-key` (Anthropic), `authorization: Bearer`
/// (OpenAI, Responses), `x-goog-api-key` (Gemini); marked sensitive.
pub fn auth_header(e: &Endpoint) -> (HeaderName, HeaderValue) {
    let (name, value) = match e.format {
        Format::Anthropic => (HeaderName::from_static("x-api-key"), HeaderValue::from_str(&e.api_key)),
        Format::Openai | Format::Responses => {
            (axum::http::header::AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {}", e.api_key)))
        }
        Format::Gemini => (HeaderName::from_static("x-goog-api-key"), HeaderValue::from_str(&e.api_key)),
    };
    // Keys are validated to hold no control characters; an unusable one sends no credential
    // rather than failing every request.
    let mut value = value.unwrap_or_else(|_| HeaderValue::from_static(""));
    value.set_sensitive(true);
    (name, value)
}

/// What hyper-util's client would put in `Host` for a request to `base_url`: the host, with the
/// port only when it is not the scheme's default. `None` when the URL has no host (the client
/// then reports the bad URL as before).
pub fn host_header(base_url: &str) -> Option<HeaderValue> {
    let uri: axum::http::Uri = base_url.parse().ok()?;
    let host = uri.host()?;
    let secure = matches!(uri.scheme_str(), Some("https" | "wss"));
    let value = match uri.port_u16() {
        Some(443) if secure => host.to_string(),
        Some(80) if !secure => host.to_string(),
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    };
    HeaderValue::from_str(&value).ok()
}

fn extra_headers(e: &Endpoint) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (k, v) in &e.headers {
        if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(k.as_bytes()), HeaderValue::from_str(v)) {
            map.insert(name, value);
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::host_header;

    #[test]
    fn the_host_header_carries_the_port_only_when_it_is_not_the_schemes_default() {
        let host = |url: &str| host_header(url).map(|v| v.to_str().unwrap().to_string());
        assert_eq!(host("http://127.0.0.1:8080").as_deref(), Some("127.0.0.1:8080"));
        assert_eq!(host("https://api.anthropic.com").as_deref(), Some("api.anthropic.com"));
        assert_eq!(host("https://relay.example.com/api/v1").as_deref(), Some("relay.example.com"));
        assert_eq!(host("http://relay.example.com:80/x").as_deref(), Some("relay.example.com"));
        assert_eq!(host("https://relay.example.com:443").as_deref(), Some("relay.example.com"));
        assert_eq!(host("https://relay.example.com:8443").as_deref(), Some("relay.example.com:8443"));
        assert_eq!(host("http://relay.example.com:443").as_deref(), Some("relay.example.com:443"));
        assert_eq!(host("http://[::1]:9000").as_deref(), Some("[::1]:9000"));
        assert_eq!(host("not a url"), None);
    }
}
