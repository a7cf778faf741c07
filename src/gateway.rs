//! The shared state of a running gateway: the configuration snapshot the request path reads
//! (`snapshot.rs`, swapped atomically on every change: no database read per request), the
//! breakers, the rotation, the client keys' limiter and the session bindings (each behind a
//! narrow trait a cluster can implement on shared state), and the gateway's identity and
//! connection accounting.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use axum::http::HeaderValue;

use crate::breaker::Breakers;
use crate::clock::Clock;
use crate::config::Settings;
use crate::endpoint::EndpointId;
use crate::observe::cost::PriceTable;
use crate::observe::events::Events;
use crate::observe::writer::RecordSink;
use crate::routing::Rotation;
use crate::snapshot::{LiveEndpoint, Snapshot};
use crate::store::{Store, StoreError};

pub struct Gateway {
    snapshot: ArcSwap<Snapshot>,
    pub breakers: Breakers,
    pub rotation: Rotation,
    /// The client keys' rate limits, leases and budgets; state keyed by key name, kept across
    /// snapshot swaps.
    pub limiter: Arc<dyn crate::keys::Limiter>,
    /// Session affinity's bindings.
    pub sessions: Arc<dyn crate::affinity::SessionBindings>,
    pub clock: Arc<dyn Clock>,
    pub events: Events,
    pub store: Store,
    pub client: crate::proxy::upstream::UpstreamClient,
    pub admin_token: Option<String>,
    /// Serialises admin writes so snapshot rebuilds never race each other.
    pub admin_lock: tokio::sync::Mutex<()>,
    /// Where this gateway listens and keeps its data, and whose home it runs in: set once it is
    /// bound, for the client settings the admin API may edit (`/api/clients`).
    pub local: std::sync::OnceLock<crate::clients::host::LocalHost>,
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
    /// The connections that came past `limits.max_connections`, and whether the gateway is at
    /// its cap now.
    pub connection_cap: Arc<crate::server::cap::CapWatch>,
    /// Each serving thread's share of them, once the server runs.
    pub serving_threads: std::sync::OnceLock<Arc<crate::server::balance::Balance>>,
    /// The address this gateway listens on, once bound (for refusing endpoints that point at it).
    pub listen_addr: std::sync::OnceLock<std::net::SocketAddr>,
    /// The upstreams' model lists (`GET /v1/models`), refreshed by the server's background work.
    pub catalogue: crate::catalogue::Catalogue,
    /// The config file, when it is authoritative (`config::authoritative`): what it declares is
    /// read-only in the admin API, and the server's background work reloads it.
    pub config_source: std::sync::OnceLock<crate::config::authoritative::SharedSource>,
    /// Pulled when the configuration changed somewhere else (another gateway on a shared
    /// database, or news through Redis); the server's background work then rebuilds the snapshot
    /// (`config::reload`).
    pub reload_trigger: crate::config::reload::ReloadTrigger,
    /// The cluster layer (`serve --redis`): shared breakers, rotation, limits and bindings.
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
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
        Gateway::in_cluster(store, clock, client, admin_token, records, None)
    }

    /// `new`, as a node of `cluster` when there is one: the limiter and the session bindings are
    /// the cluster's, and the breakers and the rotation hand their decisions to it.
    pub fn in_cluster(
        store: Store,
        clock: Arc<dyn Clock>,
        client: crate::proxy::upstream::UpstreamClient,
        admin_token: Option<String>,
        records: RecordSink,
        cluster: Option<Arc<crate::cluster::Cluster>>,
    ) -> Result<Arc<Gateway>, StoreError> {
        let events = Events::new(records);
        let instance_id = random_hex(8);
        let hop_header = HeaderValue::from_str(&instance_id).unwrap_or_else(|_| HeaderValue::from_static("0"));
        let gateway = Gateway {
            snapshot: ArcSwap::from_pointee(Snapshot {
                endpoints: Vec::new(),
                settings: Arc::new(Settings::default()),
                prices: Arc::new(PriceTable::builtin()),
                keys: Arc::default(),
            }),
            breakers: Breakers::new(clock.clone(), Arc::new(events.clone())),
            rotation: Rotation::default(),
            limiter: match &cluster {
                Some(c) => c.limiter.clone(),
                None => Arc::new(crate::keys::MemoryLimiter::new()),
            },
            sessions: match &cluster {
                Some(c) => c.bindings.clone(),
                None => Arc::new(crate::affinity::MemoryBindings::new()),
            },
            clock,
            events,
            store,
            client,
            admin_token,
            admin_lock: tokio::sync::Mutex::new(()),
            instance_id,
            hop_header,
            listen_addr: std::sync::OnceLock::new(),
            catalogue: Default::default(),
            config_source: std::sync::OnceLock::new(),
            open_connections: Arc::default(),
            connection_cap: Arc::default(),
            serving_threads: std::sync::OnceLock::new(),
            allowed_hosts: std::sync::OnceLock::new(),
            login_limit: Default::default(),
            redact_owner: {
                static OWNERS: AtomicU64 = AtomicU64::new(1);
                OWNERS.fetch_add(1, Ordering::Relaxed)
            },
            local: std::sync::OnceLock::new(),
            reload_trigger: Default::default(),
            cluster: cluster.clone(),
        };
        if let Some(c) = &cluster {
            let hooks = Arc::new(crate::cluster::hooks::Hooks(c.core.clone()));
            gateway.breakers.share(hooks.clone());
            gateway.rotation.share(hooks);
        }
        gateway.reload()?;
        gateway.seed_budgets();
        Ok(Arc::new(gateway))
    }

    /// Charge the keys' budgets with what their recorded requests of the current windows cost
    /// (the UTC month, and the last 5 hours when that reaches into the month before), so a
    /// restart does not hand out a spent budget again. Records the writer had not stored yet
    /// when the process stopped, and records older than `retention_days`, are not counted.
    fn seed_budgets(&self) {
        let now = crate::keys::now_ms(&*self.clock);
        let since = crate::timefmt::utc_month_bounds(now).0.min(now - 5 * 3_600_000);
        match self.store.recorded_charges(since) {
            Ok(charges) => {
                let snapshot = self.snapshot();
                for (key, at, tokens, usd) in charges {
                    if let Some(k) = snapshot.keys.find(&key) {
                        self.limiter.seed(&k.name, tokens, usd, at);
                    }
                }
            }
            Err(e) => tracing::warn!(
                event = "budgets_not_seeded",
                error = %e,
                "cannot read the request records; client-key budgets start from zero"
            ),
        }
    }

    /// `None` while storage works; else what is wrong (SPEC §15.8).
    pub fn storage_problem(&self) -> Option<String> {
        self.store.problem().or_else(|| self.events.records().problem())
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
        let secrets = endpoints
            .iter()
            .map(|e| e.api_key.clone())
            .chain(self.admin_token.clone())
            .chain(self.store.secrets())
            .collect();
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
                Arc::new(LiveEndpoint::new(config, breaker))
            })
            .collect();
        let prices = Arc::new(PriceTable::load(&self.store)?);
        let keys = self.store.list_keys()?;
        let names: Vec<String> = keys.iter().map(|k| k.name.clone()).collect();
        self.limiter.retain(&names);
        let keys = Arc::new(crate::keys::KeySet::new(keys, settings.require_client_key));
        self.snapshot.store(Arc::new(Snapshot { endpoints: live, settings: Arc::new(settings), prices, keys }));
        // Metric labels are bounded by the configuration: tell the registry what is configured.
        self.events.metrics().configure(&self.snapshot.load());
        self.catalogue.endpoints_changed();
        Ok(())
    }
}

/// What the cluster's background work needs of this node (`cluster::sync`).
impl crate::cluster::sync::Node for Gateway {
    fn configuration(&self) -> Arc<Snapshot> {
        self.snapshot_full()
    }

    fn rotation(&self) -> &Rotation {
        &self.rotation
    }

    fn config_changed_elsewhere(&self, version: i64) {
        tracing::info!(
            event = "cluster_config_changed",
            version,
            "another node changed the configuration; rebuilding the snapshot"
        );
        self.reload_trigger.request();
    }
}
