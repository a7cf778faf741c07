//! Prometheus metrics (`GET /metrics`), hand-rolled: a small registry of atomic counters and
//! explicit-bucket histograms keyed by label values, rendered in the text exposition format
//! 0.0.4. (The `metrics` crate family would add a global recorder, a dependency tree and less
//! control over exactly which series exist; what we need is twelve families.)
//!
//! The hot path is `observe_request`, once per finished request: per family a read lock on a
//! map and atomic adds; a write lock only the first time a label set is seen. No lock is ever
//! held across an `.await` (there are none here), and rendering copies the series list out of
//! the lock before formatting.
//!
//! **Labels are bounded.** A time series per distinct label set lives forever, so a label fed
//! from user input is a memory leak and a Prometheus outage. Endpoint names come from the
//! configuration (unknown or absent: `""`). Models are the risky one: `model_sent` is often the
//! client's own string and `model_answered` the upstream's, so only models the operator wrote
//! into an endpoint's configuration (literal `models`, `model_map` keys and values,
//! `test_model`) keep their name, a priced model is labelled by its price-table entry
//! (`claude-sonnet-4-5-20250929` → `claude-sonnet-4-5`), and anything else is `other`. The
//! names come from the configuration snapshot through [`Metrics::configure`]; on top of that,
//! hard caps on distinct endpoint and model values (and on a model's length) keep the registry
//! bounded even before the configuration is known or if the price table matches loosely.
//! Client keys are named by the configuration too (a name no configured key has is `""`), and
//! capped. Everything else (protocol, status class, outcome, breaker state, cause, token kind,
//! refusal reason, budget window) is an enum. The per-key families appear once a key exists.

use std::fmt::{Display, Write as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use arc_swap::ArcSwapOption;

use super::cost::PriceTable;
use super::record::{Classification, RequestRecord};
use crate::breaker::{Circuit, Transition};
use crate::endpoint::valid_name;
use crate::fasthash::{FastMap, FastSet};
use crate::protocol::Protocol;
use crate::snapshot::Snapshot;

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Total request time: LLM calls take from well under a second to many minutes.
pub const REQUEST_BUCKETS: &[f64] = &[0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0];
/// Time to first byte: the model's queueing and prompt processing.
pub const FIRST_BYTE_BUCKETS: &[f64] = &[0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0];
/// The gateway's own time: tens of microseconds when healthy, so the buckets start at 50 µs.
pub const OVERHEAD_BUCKETS: &[f64] =
    &[0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0];

/// The label of a model that is not in the configuration or the price table.
pub const OTHER_MODEL: &str = "other";
/// Distinct endpoint label values kept over the process's life (a rename or a new endpoint adds
/// one); later ones are counted under `""`.
const MAX_ENDPOINTS: usize = 128;
/// Distinct model label values kept; later ones are counted under `other`.
const MAX_MODELS: usize = 64;
/// Longer model names are `other` (a price table matching by prefix would otherwise let a
/// client put kilobytes into a label).
const MAX_MODEL_LEN: usize = 128;

/// Distinct client-key label values kept (keys are few; later ones are counted under `""`).
const MAX_KEYS: usize = 256;

/// Token kinds, in the order they are rendered.
const TOKEN_KINDS: [&str; 4] = ["input", "output", "cache_read", "cache_write"];

// ============================================================== descriptors

struct Desc {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    labels: &'static [&'static str],
}

const REQUESTS: Desc = Desc {
    name: "ccmesh_requests_total",
    help: "Client requests finished, by inbound protocol, final endpoint and status class of the answer.",
    kind: "counter",
    labels: &["protocol", "endpoint", "status_class"],
};
const ATTEMPTS: Desc = Desc {
    name: "ccmesh_upstream_attempts_total",
    help: "Upstream attempts, by endpoint and how the outcome was classified.",
    kind: "counter",
    labels: &["endpoint", "outcome"],
};
const FAILOVERS: Desc = Desc {
    name: "ccmesh_failovers_total",
    help: "Moves from one endpoint to another within a client request (failover and stream resume).",
    kind: "counter",
    labels: &["protocol", "from", "to"],
};
const BREAKER_STATE: Desc = Desc {
    name: "ccmesh_breaker_state",
    help: "Circuit breaker state per endpoint: 0 closed, 1 half-open, 2 open.",
    kind: "gauge",
    labels: &["endpoint"],
};
const TRANSITIONS: Desc = Desc {
    name: "ccmesh_breaker_transitions_total",
    help: "Circuit breaker transitions, by endpoint, new state and cause.",
    kind: "counter",
    labels: &["endpoint", "to", "reason"],
};
const DURATION: Desc = Desc {
    name: "ccmesh_request_duration_seconds",
    help: "Total time of a client request, until its answer (or stream) ended.",
    kind: "histogram",
    labels: &["protocol"],
};
const FIRST_BYTE: Desc = Desc {
    name: "ccmesh_first_byte_seconds",
    help: "Time until the first byte of the answer went to the client.",
    kind: "histogram",
    labels: &["protocol"],
};
const OVERHEAD: Desc = Desc {
    name: "ccmesh_gateway_overhead_seconds",
    help: "Time spent in the gateway itself: total minus upstream time and deliberate waits.",
    kind: "histogram",
    labels: &["protocol"],
};
const TOKENS: Desc = Desc {
    name: "ccmesh_tokens_total",
    help: "Tokens reported by upstreams, by endpoint, model (configured or priced, else other) and kind.",
    kind: "counter",
    labels: &["endpoint", "model", "kind"],
};
const COST: Desc = Desc {
    name: "ccmesh_cost_usd_total",
    help: "Cost of the requests with a known price, in US dollars.",
    kind: "counter",
    labels: &["endpoint"],
};
const UNPRICED: Desc = Desc {
    name: "ccmesh_unpriced_requests_total",
    help: "Requests with known token usage but no price for their model (their cost is unknown).",
    kind: "counter",
    labels: &["endpoint"],
};
const KEY_REQUESTS: Desc = Desc {
    name: "ccmesh_key_requests_total",
    help: "Client requests finished, by client key and status class of the answer.",
    kind: "counter",
    labels: &["key", "status_class"],
};
const KEY_TOKENS: Desc = Desc {
    name: "ccmesh_key_tokens_total",
    help: "Tokens of the requests of each client key, by kind.",
    kind: "counter",
    labels: &["key", "kind"],
};
const KEY_COST: Desc = Desc {
    name: "ccmesh_key_cost_usd_total",
    help: "Cost of the requests of each client key, in US dollars (what its budgets are charged).",
    kind: "counter",
    labels: &["key"],
};
const KEY_REFUSALS: Desc = Desc {
    name: "ccmesh_key_refusals_total",
    help: "Proxy requests refused at the client-key gate, by key (empty: none or an unknown one) and reason.",
    kind: "counter",
    labels: &["key", "reason"],
};
const KEY_SPEND: Desc = Desc {
    name: "ccmesh_key_spend_usd",
    help: "What each client key has spent in its budget windows now (day and month: UTC; 5h: rolling).",
    kind: "gauge",
    labels: &["key", "window"],
};
const KEY_IN_FLIGHT: Desc = Desc {
    name: "ccmesh_key_in_flight",
    help: "Requests of each client key in flight now (its concurrency leases).",
    kind: "gauge",
    labels: &["key"],
};
const CLUSTER_FALLBACKS: Desc = Desc {
    name: "ccmesh_cluster_fallbacks_total",
    help: "Redis calls of the cluster layer that fell back to this node's local state (no answer in time, an error, or Redis's breaker open), by call.",
    kind: "counter",
    labels: &["op"],
};
const DROPPED: Desc = Desc {
    name: "ccmesh_records_dropped_total",
    help: "Request records lost: the record writer could not keep up (full queue) or could not write them.",
    kind: "counter",
    labels: &[],
};
const CONNECTIONS_OPEN: Desc = Desc {
    name: "ccmesh_connections_open",
    help: "Client connections open now, across every serving thread.",
    kind: "gauge",
    labels: &[],
};
const CONNECTIONS_PAST_CAP: Desc = Desc {
    name: "ccmesh_connections_past_cap_total",
    help: "Client connections that came past limits.max_connections (or with the process out of file descriptors): their requests were answered 503, but /health and /api/status.",
    kind: "counter",
    labels: &[],
};

// ============================================================== primitives

/// An `f64` counter: the bits in an `AtomicU64`, added with a compare-and-swap loop.
#[derive(Default)]
struct FloatCounter(AtomicU64);

impl FloatCounter {
    fn add(&self, v: f64) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| Some((f64::from_bits(bits) + v).to_bits()));
    }

    fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
}

/// Explicit buckets; each observation increments exactly one (non-cumulative) slot, the last
/// being `+Inf`; rendering accumulates. `_count` is the sum of the slots, so it always equals
/// the `+Inf` bucket even while observations race a scrape.
struct Histogram {
    bounds: &'static [f64],
    slots: Box<[AtomicU64]>,
    sum: FloatCounter,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self { bounds, slots: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(), sum: FloatCounter::default() }
    }

    fn observe(&self, v: f64) {
        // A NaN or infinite duration is a bug upstream of here; it must not poison `_sum`.
        if !v.is_finite() {
            return;
        }
        let v = v.max(0.0);
        // `le` is inclusive: a value equal to a bound belongs to that bucket.
        let i = self.bounds.iter().position(|b| v <= *b).unwrap_or(self.bounds.len());
        if let Some(slot) = self.slots.get(i) {
            slot.fetch_add(1, Ordering::Relaxed);
        }
        self.sum.add(v);
    }
}

fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|p| p.into_inner())
}

struct Series<V> {
    labels: Vec<String>,
    value: V,
}

/// The series of one metric, keyed by label values.
struct Family<V> {
    series: RwLock<FastMap<String, Arc<Series<V>>>>,
}

impl<V> Family<V> {
    fn new() -> Self {
        Self { series: RwLock::new(FastMap::default()) }
    }

    /// Run `f` on the series of `labels`, creating it with `make` the first time.
    fn with(&self, labels: &[&str], make: impl FnOnce() -> V, f: impl FnOnce(&V)) {
        let map = read(&self.series);
        if let Some(s) = find(&map, labels) {
            f(&s.value);
            return;
        }
        drop(map);
        f(&self.create(labels, make).value);
    }

    /// `series`, but a new series only while the family holds fewer than `max`.
    fn series_bounded(&self, labels: &[&str], max: usize, make: impl FnOnce() -> V) -> Option<Arc<Series<V>>> {
        let map = read(&self.series);
        if let Some(s) = find(&map, labels) {
            return Some(Arc::clone(s));
        }
        let full = map.len() >= max;
        drop(map);
        (!full).then(|| self.create(labels, make))
    }

    /// The series of `labels`, created with `make` the first time.
    fn series(&self, labels: &[&str], make: impl FnOnce() -> V) -> Arc<Series<V>> {
        let found = find(&read(&self.series), labels).cloned();
        found.unwrap_or_else(|| self.create(labels, make))
    }

    fn create(&self, labels: &[&str], make: impl FnOnce() -> V) -> Arc<Series<V>> {
        let mut map = write(&self.series);
        let s = map.entry(series_key(labels)).or_insert_with(|| {
            Arc::new(Series { labels: labels.iter().map(|l| l.to_string()).collect(), value: make() })
        });
        Arc::clone(s)
    }

    /// Every series, ordered by label values (stable output), copied out of the lock.
    fn sorted(&self) -> Vec<Arc<Series<V>>> {
        let mut all: Vec<_> = read(&self.series).values().cloned().collect();
        all.sort_by(|a, b| a.labels.cmp(&b.labels));
        all
    }
}

impl Family<AtomicU64> {
    fn add(&self, labels: &[&str], n: u64) {
        self.with(
            labels,
            || AtomicU64::new(0),
            |c| {
                c.fetch_add(n, Ordering::Relaxed);
            },
        );
    }
}

/// The series a plain request touches (one attempt, at the endpoint it names), found with one
/// lookup instead of the ten or so `observe_request` would make. Each slot is filled the first
/// time a request uses it, through its family, so a bundle never brings a series into being
/// that the families alone would not have.
#[derive(Default)]
struct Plain {
    requests: OnceLock<Arc<Series<AtomicU64>>>,
    attempt: OnceLock<Arc<Series<AtomicU64>>>,
    duration: OnceLock<Arc<Series<Histogram>>>,
    first_byte: OnceLock<Arc<Series<Histogram>>>,
    overhead: OnceLock<Arc<Series<Histogram>>>,
    tokens: [OnceLock<Arc<Series<AtomicU64>>>; 4],
    cost: OnceLock<Arc<Series<FloatCounter>>>,
    unpriced: OnceLock<Arc<Series<AtomicU64>>>,
}

/// Bundles kept before plain requests go the long way too: label values are capped, but their
/// product need not be small.
const MAX_PLAIN_BUNDLES: usize = 1024;

/// The bundles a serving thread used last, by registry. Found by comparing labels, without the
/// key, the hash and the family's lock, whose reader count both serving threads write for every
/// request. A bundle is never removed from its family, so one kept here is the family's.
struct RecentBundle {
    registry: u64,
    bundle: Arc<Series<Plain>>,
}

/// How many bundles a thread keeps: a gateway's busy label sets are few (the endpoints each
/// model goes to); past that the oldest goes.
const RECENT_BUNDLES_KEPT: usize = 8;

thread_local! {
    static RECENT_BUNDLES: std::cell::RefCell<Vec<RecentBundle>> = const { std::cell::RefCell::new(Vec::new()) };
}

static NEXT_REGISTRY_ID: AtomicU64 = AtomicU64::new(0);

/// Fill `slot` from `family` the first time; then the series' value.
fn slot<'a, V>(
    slot: &'a OnceLock<Arc<Series<V>>>,
    family: &Family<V>,
    labels: &[&str],
    make: impl FnOnce() -> V,
) -> &'a V {
    &slot.get_or_init(|| family.series(labels, make)).value
}

/// The series of `labels` in `map`. Its key is built in this thread's scratch buffer: a key
/// allocated and freed for each lookup was a visible part of a request's cost.
fn find<'m, V>(map: &'m FastMap<String, Arc<Series<V>>>, labels: &[&str]) -> Option<&'m Arc<Series<V>>> {
    KEY_SCRATCH.with_borrow_mut(|key| {
        key.clear();
        push_series_key(key, labels);
        map.get(key.as_str())
    })
}

/// Unambiguous whatever the values contain: each is prefixed by its length.
/// Built on every observation, so without `format!` machinery (it was ~10 % of a proxied
/// request's instructions in a profile).
fn series_key(labels: &[&str]) -> String {
    let mut key = String::with_capacity(labels.iter().map(|l| l.len() + 6).sum());
    push_series_key(&mut key, labels);
    key
}

fn push_series_key(key: &mut String, labels: &[&str]) {
    for l in labels {
        push_decimal(key, l.len() as u64);
        key.push(':');
        key.push_str(l);
    }
}

thread_local! {
    static KEY_SCRATCH: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// `n` in decimal, written in place (no `String` of its own, as `to_string` would make).
pub(crate) fn push_decimal(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[i..] {
        out.push(char::from(d));
    }
}

/// Distinct values admitted for one label, up to a cap.
struct Admitted {
    cap: usize,
    seen: RwLock<FastSet<String>>,
}

impl Admitted {
    fn new(cap: usize) -> Self {
        Self { cap, seen: RwLock::new(FastSet::default()) }
    }

    fn admit(&self, value: &str) -> bool {
        if read(&self.seen).contains(value) {
            return true;
        }
        let mut seen = write(&self.seen);
        if seen.contains(value) {
            return true;
        }
        if seen.len() >= self.cap {
            return false;
        }
        seen.insert(value.to_string());
        true
    }
}

// ============================================================== vocabulary

/// The label values the configuration vouches for: endpoint names, and the models the operator
/// wrote down or priced.
pub struct Vocabulary {
    // The fast hasher: these hold configured names, looked up on every request.
    endpoints: FastSet<String>,
    keys: FastSet<String>,
    /// Lowercased → as written (model ids differ in case between providers, and endpoint
    /// patterns match case-insensitively; one spelling per model keeps one series).
    models: FastMap<String, String>,
    prices: Arc<PriceTable>,
}

impl Vocabulary {
    pub fn new(
        endpoints: impl IntoIterator<Item = String>,
        models: impl IntoIterator<Item = String>,
        prices: Arc<PriceTable>,
    ) -> Self {
        let mut by_lower = FastMap::default();
        for m in models {
            // Globs (`claude-*`) match unbounded sets of names: not a vocabulary.
            if !m.contains('*') && !m.is_empty() && m.len() <= MAX_MODEL_LEN {
                by_lower.entry(m.to_lowercase()).or_insert(m);
            }
        }
        Self { endpoints: endpoints.into_iter().collect(), keys: FastSet::default(), models: by_lower, prices }
    }

    /// The client keys' names.
    pub fn with_keys(mut self, keys: impl IntoIterator<Item = String>) -> Self {
        self.keys = keys.into_iter().collect();
        self
    }

    /// From a configuration snapshot: literal `models`, `model_map` keys and values,
    /// `test_model` of every endpoint, plus the price table.
    pub fn of(snapshot: &Snapshot) -> Self {
        let endpoints = snapshot.endpoints.iter().map(|e| e.config.name.clone());
        let models = snapshot.endpoints.iter().flat_map(|e| {
            let c = &e.config;
            c.models
                .iter()
                .map(|p| p.as_str().to_string())
                .chain(c.model_map.iter().flat_map(|(k, v)| [k.as_str().to_string(), v.clone()]))
                .chain(c.test_model.clone())
                .collect::<Vec<_>>()
        });
        Self::new(endpoints, models, snapshot.prices.clone())
            .with_keys(snapshot.keys.all().iter().map(|k| k.name.clone()))
    }

    /// The label for a known model (its configured spelling, or the price entry that prices
    /// it), or `None`.
    fn model(&self, model: &str) -> Option<&str> {
        // Lowercasing allocates: skip it for names that are lowercase already (most of them).
        let lowered = || {
            let already = model.is_ascii() && !model.bytes().any(|b| b.is_ascii_uppercase());
            if already { None } else { self.models.get(&model.to_lowercase()) }
        };
        if let Some(canonical) = self.models.get(model).or_else(lowered) {
            return Some(canonical);
        }
        // Labelled by the price entry, not the name as sent: dated variants
        // (`claude-sonnet-4-5-20250929`) and glob entries (`glm-*`) would otherwise admit
        // unbounded sets of names.
        self.prices.lookup(model).map(|entry| entry.model.as_str())
    }
}

// ============================================================== registry

pub struct Metrics {
    /// `None` until the configuration is first known: endpoint names are then only checked to
    /// be valid names, and models only capped.
    vocabulary: ArcSwapOption<Vocabulary>,
    endpoints_seen: Admitted,
    models_seen: Admitted,
    keys_seen: Admitted,
    key_requests: Family<AtomicU64>,
    key_tokens: Family<AtomicU64>,
    key_cost: Family<FloatCounter>,
    key_refusals: Family<AtomicU64>,
    requests: Family<AtomicU64>,
    attempts: Family<AtomicU64>,
    failovers: Family<AtomicU64>,
    transitions: Family<AtomicU64>,
    duration: Family<Histogram>,
    first_byte: Family<Histogram>,
    overhead: Family<Histogram>,
    tokens: Family<AtomicU64>,
    cost: Family<FloatCounter>,
    unpriced: Family<AtomicU64>,
    /// By protocol, endpoint, status class, outcome and model label: not rendered.
    plain: Family<Plain>,
    /// `MAX_PLAIN_BUNDLES`; tests compare against none.
    max_plain: usize,
    /// Tells this registry's bundles apart in a thread's `RECENT_BUNDLES` from those of another
    /// (tests run many), whatever addresses they get.
    id: u64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// What a scrape reads from the live gateway rather than from counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scrape {
    /// Every configured endpoint with its breaker's current state.
    pub breakers: Vec<(String, Circuit)>,
    pub records_dropped: u64,
    pub connections_open: usize,
    pub connections_past_cap: u64,
    /// Every client key with its use of its windows now.
    pub keys: Vec<(String, crate::keys::KeyUsage)>,
    /// In a cluster: the fallbacks to local state so far, by call (empty without one).
    pub cluster_fallbacks: Vec<(&'static str, u64)>,
}

impl Metrics {
    pub fn new() -> Self {
        Self {
            vocabulary: ArcSwapOption::empty(),
            endpoints_seen: Admitted::new(MAX_ENDPOINTS),
            models_seen: Admitted::new(MAX_MODELS),
            keys_seen: Admitted::new(MAX_KEYS),
            key_requests: Family::new(),
            key_tokens: Family::new(),
            key_cost: Family::new(),
            key_refusals: Family::new(),
            requests: Family::new(),
            attempts: Family::new(),
            failovers: Family::new(),
            transitions: Family::new(),
            duration: Family::new(),
            first_byte: Family::new(),
            overhead: Family::new(),
            tokens: Family::new(),
            cost: Family::new(),
            unpriced: Family::new(),
            plain: Family::new(),
            max_plain: MAX_PLAIN_BUNDLES,
            id: NEXT_REGISTRY_ID.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Learn the label vocabulary of the current configuration. Called at every scrape, and
    /// meant to be called whenever the snapshot is rebuilt, so that labels are right from the
    /// first request.
    pub fn configure(&self, snapshot: &Snapshot) {
        self.set_vocabulary(Vocabulary::of(snapshot));
    }

    pub fn set_vocabulary(&self, vocabulary: Vocabulary) {
        self.vocabulary.store(Some(Arc::new(vocabulary)));
    }

    /// Count a finished request (and its attempts, tokens, cost, latency, overhead).
    pub fn observe_request(&self, record: &RequestRecord) {
        let vocabulary = self.vocabulary.load();
        let vocabulary = vocabulary.as_deref();
        let protocol = protocol_label(&record.protocol);
        let endpoint = self.endpoint_label(vocabulary, record.endpoint.as_deref());

        let t = &record.tokens;
        let counts = [t.input, t.output, t.cache_read, t.cache_write];
        // The model is a label only of the token counts, and only admitted when they are known.
        let model = if counts.iter().any(Option::is_some) {
            self.model_label(vocabulary, record.model_answered.as_deref().or(record.model_sent.as_deref()))
        } else {
            ""
        };
        match record.attempts.as_slice() {
            [only] if record.endpoint.as_deref() == Some(only.endpoint.as_ref()) => {
                self.observe_plain(
                    record,
                    [protocol, endpoint, record.status_class(), outcome_str(only.classification)],
                    model,
                );
            }
            _ => self.observe_each(record, protocol, endpoint, model),
        }
        if let Some(name) = record.client_key.as_deref() {
            let key = self.key_label(vocabulary, name);
            self.key_requests.add(&[key, record.status_class()], 1);
            for (kind, n) in TOKEN_KINDS.iter().zip(counts) {
                if let Some(n) = n {
                    self.key_tokens.add(&[key, kind], n);
                }
            }
            if let Some(usd) = record.cost_usd.filter(|c| c.is_finite()) {
                self.key_cost.with(&[key], FloatCounter::default, |c| c.add(usd));
            }
        }
    }

    /// `observe_each` through the request's bundle (`Plain`): the same series, the same counts.
    fn observe_plain(&self, record: &RequestRecord, labels: [&str; 4], model: &str) {
        let [protocol, endpoint, class, outcome] = labels;
        let key = [protocol, endpoint, class, outcome, model];
        let recent = RECENT_BUNDLES.with_borrow(|recent| {
            let found = recent.iter().find(|r| r.registry == self.id && r.bundle.labels.iter().eq(key.iter()));
            found.map(|r| self.count_plain(&r.bundle.value, record, labels, model)).is_some()
        });
        if recent {
            return;
        }
        let Some(bundle) = self.plain.series_bounded(&key, self.max_plain, Plain::default) else {
            self.observe_each(record, protocol, endpoint, model);
            return;
        };
        self.count_plain(&bundle.value, record, labels, model);
        RECENT_BUNDLES.with_borrow_mut(|recent| {
            if recent.len() >= RECENT_BUNDLES_KEPT {
                recent.remove(0);
            }
            recent.push(RecentBundle { registry: self.id, bundle });
        });
    }

    /// What `observe_each` counts, through the series bundle `b` holds for these labels.
    fn count_plain(&self, b: &Plain, record: &RequestRecord, labels: [&str; 4], model: &str) {
        let [protocol, endpoint, class, outcome] = labels;
        let counter = || AtomicU64::new(0);
        slot(&b.requests, &self.requests, &[protocol, endpoint, class], counter).fetch_add(1, Ordering::Relaxed);
        slot(&b.attempt, &self.attempts, &[endpoint, outcome], counter).fetch_add(1, Ordering::Relaxed);
        let seconds = |ms: f64| ms / 1000.0;
        slot(&b.duration, &self.duration, &[protocol], || Histogram::new(REQUEST_BUCKETS))
            .observe(seconds(record.total_ms));
        if let Some(ms) = record.first_byte_ms {
            slot(&b.first_byte, &self.first_byte, &[protocol], || Histogram::new(FIRST_BYTE_BUCKETS))
                .observe(seconds(ms));
        }
        slot(&b.overhead, &self.overhead, &[protocol], || Histogram::new(OVERHEAD_BUCKETS))
            .observe(seconds(record.overhead_ms));
        let t = &record.tokens;
        let counts = [t.input, t.output, t.cache_read, t.cache_write];
        for ((kind, n), s) in TOKEN_KINDS.iter().zip(counts).zip(&b.tokens) {
            if let Some(n) = n {
                slot(s, &self.tokens, &[endpoint, model, kind], counter).fetch_add(n, Ordering::Relaxed);
            }
        }
        match record.cost_usd {
            Some(usd) if usd.is_finite() => slot(&b.cost, &self.cost, &[endpoint], FloatCounter::default).add(usd),
            Some(_) => {}
            None if t.is_known() => {
                slot(&b.unpriced, &self.unpriced, &[endpoint], counter).fetch_add(1, Ordering::Relaxed);
            }
            None => {}
        }
    }

    /// A request's series (but its client key's), each looked up in its family.
    fn observe_each(&self, record: &RequestRecord, protocol: &str, endpoint: &str, model: &str) {
        let vocabulary = self.vocabulary.load();
        let vocabulary = vocabulary.as_deref();
        self.requests.add(&[protocol, endpoint, record.status_class()], 1);
        for a in &record.attempts {
            self.attempts.add(&[self.endpoint_label(vocabulary, Some(&a.endpoint)), outcome_str(a.classification)], 1);
        }
        for pair in record.attempts.windows(2) {
            if pair[0].endpoint != pair[1].endpoint {
                let from = self.endpoint_label(vocabulary, Some(&pair[0].endpoint));
                let to = self.endpoint_label(vocabulary, Some(&pair[1].endpoint));
                self.failovers.add(&[protocol, from, to], 1);
            }
        }

        let seconds = |ms: f64| ms / 1000.0;
        self.duration.with(&[protocol], || Histogram::new(REQUEST_BUCKETS), |h| h.observe(seconds(record.total_ms)));
        if let Some(ms) = record.first_byte_ms {
            self.first_byte.with(&[protocol], || Histogram::new(FIRST_BYTE_BUCKETS), |h| h.observe(seconds(ms)));
        }
        self.overhead.with(
            &[protocol],
            || Histogram::new(OVERHEAD_BUCKETS),
            |h| h.observe(seconds(record.overhead_ms)),
        );

        let t = &record.tokens;
        let counts = [t.input, t.output, t.cache_read, t.cache_write];
        for (kind, n) in TOKEN_KINDS.iter().zip(counts) {
            if let Some(n) = n {
                self.tokens.add(&[endpoint, model, kind], n);
            }
        }
        match record.cost_usd {
            Some(usd) if usd.is_finite() => self.cost.with(&[endpoint], FloatCounter::default, |c| c.add(usd)),
            Some(_) => {}
            // Unknown usage is not "unpriced": there was nothing to price.
            None if t.is_known() => self.unpriced.add(&[endpoint], 1),
            None => {}
        }
    }

    /// Count a request refused at the client-key gate (`reason`: `keys::Refusal::reason`).
    pub fn observe_key_refusal(&self, key: &str, reason: &'static str) {
        let vocabulary = self.vocabulary.load();
        let key = if key.is_empty() { "" } else { self.key_label(vocabulary.as_deref(), key) };
        self.key_refusals.add(&[key, reason], 1);
    }

    fn key_label<'a>(&self, vocabulary: Option<&Vocabulary>, name: &'a str) -> &'a str {
        let known = match vocabulary {
            Some(v) => v.keys.contains(name),
            None => valid_name(name),
        };
        if known && self.keys_seen.admit(name) { name } else { "" }
    }

    /// Count a breaker transition.
    pub fn observe_transition(&self, endpoint: &str, transition: &Transition) {
        let vocabulary = self.vocabulary.load();
        let endpoint = self.endpoint_label(vocabulary.as_deref(), Some(endpoint));
        self.transitions.add(&[endpoint, transition.to.as_str(), transition.cause.as_str()], 1);
    }

    fn endpoint_label<'a>(&self, vocabulary: Option<&Vocabulary>, name: Option<&'a str>) -> &'a str {
        let Some(name) = name else { return "" };
        let known = match vocabulary {
            Some(v) => v.endpoints.contains(name),
            None => valid_name(name),
        };
        if known && self.endpoints_seen.admit(name) { name } else { "" }
    }

    /// The label is borrowed (from the configuration or the record): a request's metrics
    /// allocate nothing for it.
    fn model_label<'a>(&self, vocabulary: Option<&'a Vocabulary>, model: Option<&'a str>) -> &'a str {
        let Some(model) = model.filter(|m| !m.is_empty()) else { return "" };
        if model.len() > MAX_MODEL_LEN {
            return OTHER_MODEL;
        }
        let label = match vocabulary {
            Some(v) => v.model(model),
            None => Some(model),
        };
        match label {
            Some(l) if self.models_seen.admit(l) => l,
            _ => OTHER_MODEL,
        }
    }

    /// The exposition, with the scrape-time values given.
    pub fn render_scrape(&self, scrape: &Scrape) -> String {
        let mut out = String::with_capacity(8 * 1024);
        counters(&mut out, &REQUESTS, &self.requests);
        counters(&mut out, &ATTEMPTS, &self.attempts);
        counters(&mut out, &FAILOVERS, &self.failovers);

        header(&mut out, &BREAKER_STATE);
        let mut breakers: Vec<_> = scrape.breakers.iter().collect();
        breakers.sort_by(|x, y| x.0.cmp(&y.0));
        for (name, circuit) in breakers {
            let value = match circuit {
                Circuit::Closed => 0,
                Circuit::HalfOpen => 1,
                Circuit::Open => 2,
            };
            sample(&mut out, BREAKER_STATE.name, BREAKER_STATE.labels, &[name.as_str()], None, value);
        }

        counters(&mut out, &TRANSITIONS, &self.transitions);
        histograms(&mut out, &DURATION, &self.duration);
        histograms(&mut out, &FIRST_BYTE, &self.first_byte);
        histograms(&mut out, &OVERHEAD, &self.overhead);
        counters(&mut out, &TOKENS, &self.tokens);

        header(&mut out, &COST);
        for s in self.cost.sorted() {
            sample(&mut out, COST.name, COST.labels, &strs(&s.labels), None, Float(s.value.get()));
        }
        counters(&mut out, &UNPRICED, &self.unpriced);

        // Per-key families once any key exists (a gateway without keys shows none of them).
        let any_key_series = !self.key_requests.sorted().is_empty() || !self.key_refusals.sorted().is_empty();
        if !scrape.keys.is_empty() || any_key_series {
            counters(&mut out, &KEY_REQUESTS, &self.key_requests);
            counters(&mut out, &KEY_TOKENS, &self.key_tokens);
            header(&mut out, &KEY_COST);
            for s in self.key_cost.sorted() {
                sample(&mut out, KEY_COST.name, KEY_COST.labels, &strs(&s.labels), None, Float(s.value.get()));
            }
            counters(&mut out, &KEY_REFUSALS, &self.key_refusals);
            let mut keys: Vec<_> = scrape.keys.iter().collect();
            keys.sort_by(|a, b| a.0.cmp(&b.0));
            header(&mut out, &KEY_SPEND);
            for (name, u) in &keys {
                for (window, usd) in [("day", u.usd_day), ("5h", u.usd_5h), ("month", u.usd_month)] {
                    sample(&mut out, KEY_SPEND.name, KEY_SPEND.labels, &[name.as_str(), window], None, Float(usd));
                }
            }
            header(&mut out, &KEY_IN_FLIGHT);
            for (name, u) in &keys {
                sample(&mut out, KEY_IN_FLIGHT.name, KEY_IN_FLIGHT.labels, &[name.as_str()], None, u.in_flight);
            }
        }

        if !scrape.cluster_fallbacks.is_empty() {
            header(&mut out, &CLUSTER_FALLBACKS);
            for (op, n) in &scrape.cluster_fallbacks {
                sample(&mut out, CLUSTER_FALLBACKS.name, CLUSTER_FALLBACKS.labels, &[op], None, n);
            }
        }
        header(&mut out, &DROPPED);
        sample(&mut out, DROPPED.name, &[], &[], None, scrape.records_dropped);
        header(&mut out, &CONNECTIONS_OPEN);
        sample(&mut out, CONNECTIONS_OPEN.name, &[], &[], None, scrape.connections_open);
        header(&mut out, &CONNECTIONS_PAST_CAP);
        sample(&mut out, CONNECTIONS_PAST_CAP.name, &[], &[], None, scrape.connections_past_cap);
        out
    }
}

// ============================================================== labels

fn protocol_label(protocol: &str) -> &'static str {
    Protocol::parse(protocol).map(Protocol::as_str).unwrap_or("")
}

/// As `Classification` serialises.
pub fn outcome_str(c: Classification) -> &'static str {
    match c {
        Classification::Success => "success",
        Classification::Neutral => "neutral",
        Classification::Failure => "failure",
        Classification::RateLimited => "rate_limited",
        Classification::Transient => "transient",
        Classification::Cancelled => "cancelled",
    }
}

// ============================================================== text format

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// A sample value: Prometheus spells infinities `+Inf`/`-Inf`.
struct Float(f64);

impl Display for Float {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            v if v.is_nan() => f.write_str("NaN"),
            v if v == f64::INFINITY => f.write_str("+Inf"),
            v if v == f64::NEG_INFINITY => f.write_str("-Inf"),
            v => write!(f, "{v}"),
        }
    }
}

fn header(out: &mut String, d: &Desc) {
    let _ = writeln!(out, "# HELP {} {}", d.name, escape_help(d.help));
    let _ = writeln!(out, "# TYPE {} {}", d.name, d.kind);
}

/// `name{a="x",b="y"} value`; `extra` is one more label (a histogram's `le`).
fn sample(
    out: &mut String,
    name: &str,
    names: &[&str],
    values: &[&str],
    extra: Option<(&str, &str)>,
    value: impl Display,
) {
    out.push_str(name);
    let pairs = names.iter().zip(values).map(|(n, v)| (*n, *v)).chain(extra);
    let mut first = true;
    for (n, v) in pairs {
        out.push(if first { '{' } else { ',' });
        first = false;
        let _ = write!(out, "{n}=\"{}\"", escape_label(v));
    }
    if !first {
        out.push('}');
    }
    let _ = writeln!(out, " {value}");
}

fn counters(out: &mut String, d: &Desc, family: &Family<AtomicU64>) {
    header(out, d);
    for s in family.sorted() {
        sample(out, d.name, d.labels, &strs(&s.labels), None, s.value.load(Ordering::Relaxed));
    }
}

fn histograms(out: &mut String, d: &Desc, family: &Family<Histogram>) {
    header(out, d);
    let (bucket, sum, count) = (format!("{}_bucket", d.name), format!("{}_sum", d.name), format!("{}_count", d.name));
    for s in family.sorted() {
        let labels = strs(&s.labels);
        let h = &s.value;
        let mut cumulative = 0u64;
        for (i, slot) in h.slots.iter().enumerate() {
            cumulative += slot.load(Ordering::Relaxed);
            let le = h.bounds.get(i).map_or_else(|| "+Inf".to_string(), |b| Float(*b).to_string());
            sample(out, &bucket, d.labels, &labels, Some(("le", &le)), cumulative);
        }
        sample(out, &sum, d.labels, &labels, None, Float(h.sum.get()));
        sample(out, &count, d.labels, &labels, None, cumulative);
    }
}

/// Label values escape backslash, double quote and newline.
pub fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// HELP text escapes backslash and newline.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::breaker::{OpenReason, TransitionCause};
    use crate::observe::record::{AttemptRecord, Tokens};

    fn attempt(endpoint: &str, classification: Classification) -> AttemptRecord {
        AttemptRecord {
            endpoint: endpoint.to_owned().into(),
            format: "anthropic".into(),
            started_ms: 0.0,
            duration_ms: 1.0,
            status: Some(200),
            error_kind: None,
            error: None,
            classification,
            breaker: None,
            resume: None,
        }
    }

    fn record(protocol: &str, endpoint: &str, status: u16) -> RequestRecord {
        RequestRecord {
            id: "r1".into(),
            started_at_ms: 0,
            protocol: protocol.to_owned().into(),
            method: "POST".into(),
            path: "/v1/messages".into(),
            user_agent: None,
            session_id: None,
            model_requested: Some("m".into()),
            model_sent: Some("m".into()),
            model_answered: None,
            endpoint: Some(endpoint.to_owned().into()),
            stream: false,
            status,
            error: None,
            first_byte_ms: None,
            first_token_ms: None,
            total_ms: 0.0,
            overhead_ms: 0.0,
            tokens: Tokens::default(),
            cost_usd: None,
            attempts: vec![attempt(endpoint, Classification::Success)],
            failed_over: false,
            conversion: None,
            losses: Vec::new(),
            client_key: None,
            affinity: false,
        }
    }

    #[test]
    fn a_decimal_is_written_as_to_string_writes_it() {
        for n in [0, 7, 10, 99, 100, 1_234_567_890, u64::MAX] {
            let mut out = String::from("x");
            push_decimal(&mut out, n);
            assert_eq!(out, format!("x{n}"));
        }
    }

    #[test]
    fn bundled_requests_count_exactly_what_the_families_alone_count() {
        let bundled = Metrics::new();
        let alone = Metrics { max_plain: 0, ..Metrics::new() };
        let mut records = Vec::new();
        for (i, status) in [200u16, 200, 503, 429, 200, 404, 200, 200].into_iter().enumerate() {
            let mut r = record(["claude", "openai", "responses"][i % 3], ["a", "b"][i % 2], status);
            r.total_ms = 10.0 * i as f64;
            r.overhead_ms = 0.25 * i as f64;
            r.first_byte_ms = (i % 3 != 0).then_some(2.0 * i as f64);
            if i % 4 != 1 {
                r.tokens = Tokens {
                    input: Some(i as u64),
                    output: Some(7),
                    cache_read: (i % 2 == 0).then_some(3),
                    cache_write: None,
                };
            }
            r.cost_usd = match i % 4 {
                0 => Some(0.01 * i as f64),
                2 => Some(f64::NAN),
                _ => None,
            };
            r.model_answered = (i % 2 == 0).then(|| format!("model-{}", i % 3).into());
            if status != 200 {
                r.attempts[0].classification = Classification::Failure;
            }
            match i {
                // Failed over: the long way, in both.
                3 => r.attempts.insert(0, attempt("b", Classification::Failure)),
                // One attempt at another endpoint than the record names.
                5 => r.endpoint = Some("c".into()),
                6 => r.client_key = Some("alice".into()),
                _ => {}
            }
            records.push(r);
        }
        // Twice: once creating every series, once through bundles already filled.
        for r in records.iter().chain(&records) {
            bundled.observe_request(r);
            alone.observe_request(r);
        }
        let scrape = Scrape::default();
        assert_eq!(bundled.render_scrape(&scrape), alone.render_scrape(&scrape));
        assert!(!bundled.plain.sorted().is_empty() && alone.plain.sorted().is_empty());
    }

    #[test]
    fn a_thread_keeps_a_few_bundles_and_counts_the_same_past_them() {
        let bundled = Metrics::new();
        let alone = Metrics { max_plain: 0, ..Metrics::new() };
        let endpoints: Vec<String> = (0..RECENT_BUNDLES_KEPT * 2 + 3).map(|i| format!("e{i}")).collect();
        // Cycled so that each label set has gone from the thread's few before it comes back.
        for round in 0..3 {
            for (i, endpoint) in endpoints.iter().enumerate() {
                let mut r = record("claude", endpoint, 200);
                r.total_ms = (round * 100 + i) as f64;
                bundled.observe_request(&r);
                alone.observe_request(&r);
            }
        }
        let scrape = Scrape::default();
        assert_eq!(bundled.render_scrape(&scrape), alone.render_scrape(&scrape));
        RECENT_BUNDLES.with_borrow(|recent| {
            assert_eq!(recent.iter().filter(|r| r.registry == bundled.id).count(), RECENT_BUNDLES_KEPT);
        });
    }

    fn vocabulary(endpoints: &[&str], models: &[&str]) -> Vocabulary {
        Vocabulary::new(
            endpoints.iter().map(|s| s.to_string()),
            models.iter().map(|s| s.to_string()),
            Arc::new(PriceTable::builtin()),
        )
    }

    /// The lines of one family (after its `# TYPE` line).
    fn lines_of(text: &str, prefix: &str) -> Vec<String> {
        text.lines().filter(|l| l.starts_with(prefix)).map(str::to_string).collect()
    }

    #[test]
    fn golden_exposition_of_a_small_registry() {
        let m = Metrics::new();
        m.set_vocabulary(vocabulary(&["a", "b"], &["claude-x"]));
        let mut r = record("claude", "b", 200);
        r.attempts = vec![attempt("a", Classification::Failure), attempt("b", Classification::Success)];
        r.failed_over = true;
        r.total_ms = 1500.0;
        r.first_byte_ms = Some(200.0);
        r.overhead_ms = 0.0625;
        r.model_answered = Some("claude-x".into());
        r.tokens = Tokens { input: Some(10), output: Some(5), cache_read: None, cache_write: Some(0) };
        r.cost_usd = Some(0.25);
        m.observe_request(&r);
        m.observe_transition(
            "a",
            &Transition {
                from: Circuit::Closed,
                to: Circuit::Open,
                reason: Some(OpenReason::Broken),
                cause: TransitionCause::ConsecutiveFailures { count: 1 },
                cooldown: Some(Duration::from_secs(5)),
            },
        );
        let text = m.render_scrape(&Scrape {
            breakers: vec![("b".into(), Circuit::Closed), ("a".into(), Circuit::Open)],
            records_dropped: 3,
            connections_open: 7,
            connections_past_cap: 2,
            keys: Vec::new(),
            cluster_fallbacks: Vec::new(),
        });
        let expected = r#"# HELP ccmesh_requests_total Client requests finished, by inbound protocol, final endpoint and status class of the answer.
# TYPE ccmesh_requests_total counter
ccmesh_requests_total{protocol="claude",endpoint="b",status_class="2xx"} 1
# HELP ccmesh_upstream_attempts_total Upstream attempts, by endpoint and how the outcome was classified.
# TYPE ccmesh_upstream_attempts_total counter
ccmesh_upstream_attempts_total{endpoint="a",outcome="failure"} 1
ccmesh_upstream_attempts_total{endpoint="b",outcome="success"} 1
# HELP ccmesh_failovers_total Moves from one endpoint to another within a client request (failover and stream resume).
# TYPE ccmesh_failovers_total counter
ccmesh_failovers_total{protocol="claude",from="a",to="b"} 1
# HELP ccmesh_breaker_state Circuit breaker state per endpoint: 0 closed, 1 half-open, 2 open.
# TYPE ccmesh_breaker_state gauge
ccmesh_breaker_state{endpoint="a"} 2
ccmesh_breaker_state{endpoint="b"} 0
# HELP ccmesh_breaker_transitions_total Circuit breaker transitions, by endpoint, new state and cause.
# TYPE ccmesh_breaker_transitions_total counter
ccmesh_breaker_transitions_total{endpoint="a",to="open",reason="consecutive_failures"} 1
# HELP ccmesh_request_duration_seconds Total time of a client request, until its answer (or stream) ended.
# TYPE ccmesh_request_duration_seconds histogram
ccmesh_request_duration_seconds_bucket{protocol="claude",le="0.05"} 0
ccmesh_request_duration_seconds_bucket{protocol="claude",le="0.1"} 0
ccmesh_request_duration_seconds_bucket{protocol="claude",le="0.25"} 0
ccmesh_request_duration_seconds_bucket{protocol="claude",le="0.5"} 0
ccmesh_request_duration_seconds_bucket{protocol="claude",le="1"} 0
ccmesh_request_duration_seconds_bucket{protocol="claude",le="2.5"} 1
ccmesh_request_duration_seconds_bucket{protocol="claude",le="5"} 1
ccmesh_request_duration_seconds_bucket{protocol="claude",le="10"} 1
ccmesh_request_duration_seconds_bucket{protocol="claude",le="30"} 1
ccmesh_request_duration_seconds_bucket{protocol="claude",le="60"} 1
ccmesh_request_duration_seconds_bucket{protocol="claude",le="120"} 1
ccmesh_request_duration_seconds_bucket{protocol="claude",le="300"} 1
ccmesh_request_duration_seconds_bucket{protocol="claude",le="600"} 1
ccmesh_request_duration_seconds_bucket{protocol="claude",le="+Inf"} 1
ccmesh_request_duration_seconds_sum{protocol="claude"} 1.5
ccmesh_request_duration_seconds_count{protocol="claude"} 1
# HELP ccmesh_first_byte_seconds Time until the first byte of the answer went to the client.
# TYPE ccmesh_first_byte_seconds histogram
ccmesh_first_byte_seconds_bucket{protocol="claude",le="0.01"} 0
ccmesh_first_byte_seconds_bucket{protocol="claude",le="0.025"} 0
ccmesh_first_byte_seconds_bucket{protocol="claude",le="0.05"} 0
ccmesh_first_byte_seconds_bucket{protocol="claude",le="0.1"} 0
ccmesh_first_byte_seconds_bucket{protocol="claude",le="0.25"} 1
ccmesh_first_byte_seconds_bucket{protocol="claude",le="0.5"} 1
ccmesh_first_byte_seconds_bucket{protocol="claude",le="1"} 1
ccmesh_first_byte_seconds_bucket{protocol="claude",le="2.5"} 1
ccmesh_first_byte_seconds_bucket{protocol="claude",le="5"} 1
ccmesh_first_byte_seconds_bucket{protocol="claude",le="10"} 1
ccmesh_first_byte_seconds_bucket{protocol="claude",le="30"} 1
ccmesh_first_byte_seconds_bucket{protocol="claude",le="60"} 1
ccmesh_first_byte_seconds_bucket{protocol="claude",le="120"} 1
ccmesh_first_byte_seconds_bucket{protocol="claude",le="+Inf"} 1
ccmesh_first_byte_seconds_sum{protocol="claude"} 0.2
ccmesh_first_byte_seconds_count{protocol="claude"} 1
# HELP ccmesh_gateway_overhead_seconds Time spent in the gateway itself: total minus upstream time and deliberate waits.
# TYPE ccmesh_gateway_overhead_seconds histogram
ccmesh_gateway_overhead_seconds_bucket{protocol="claude",le="0.00005"} 0
ccmesh_gateway_overhead_seconds_bucket{protocol="claude",le="0.0001"} 1
ccmesh_gateway_overhead_seconds_bucket{protocol="claude",le="0.00025"} 1
ccmesh_gateway_overhead_seconds_bucket{protocol="claude",le="0.0005"} 1
ccmesh_gateway_overhead_seconds_bucket{protocol="claude",le="0.001"} 1
ccmesh_gateway_overhead_seconds_bucket{protocol="claude",le="0.0025"} 1
ccmesh_gateway_overhead_seconds_bucket{protocol="claude",le="0.005"} 1
ccmesh_gateway_overhead_seconds_bucket{protocol="claude",le="0.01"} 1
ccmesh_gateway_overhead_seconds_bucket{protocol="claude",le="0.025"} 1
ccmesh_gateway_overhead_seconds_bucket{protocol="claude",le="0.05"} 1
ccmesh_gateway_overhead_seconds_bucket{protocol="claude",le="0.1"} 1
ccmesh_gateway_overhead_seconds_bucket{protocol="claude",le="0.25"} 1
ccmesh_gateway_overhead_seconds_bucket{protocol="claude",le="0.5"} 1
ccmesh_gateway_overhead_seconds_bucket{protocol="claude",le="1"} 1
ccmesh_gateway_overhead_seconds_bucket{protocol="claude",le="+Inf"} 1
ccmesh_gateway_overhead_seconds_sum{protocol="claude"} 0.0000625
ccmesh_gateway_overhead_seconds_count{protocol="claude"} 1
# HELP ccmesh_tokens_total Tokens reported by upstreams, by endpoint, model (configured or priced, else other) and kind.
# TYPE ccmesh_tokens_total counter
ccmesh_tokens_total{endpoint="b",model="claude-x",kind="cache_write"} 0
ccmesh_tokens_total{endpoint="b",model="claude-x",kind="input"} 10
ccmesh_tokens_total{endpoint="b",model="claude-x",kind="output"} 5
# HELP ccmesh_cost_usd_total Cost of the requests with a known price, in US dollars.
# TYPE ccmesh_cost_usd_total counter
ccmesh_cost_usd_total{endpoint="b"} 0.25
# HELP ccmesh_unpriced_requests_total Requests with known token usage but no price for their model (their cost is unknown).
# TYPE ccmesh_unpriced_requests_total counter
# HELP ccmesh_records_dropped_total Request records lost: the record writer could not keep up (full queue) or could not write them.
# TYPE ccmesh_records_dropped_total counter
ccmesh_records_dropped_total 3
# HELP ccmesh_connections_open Client connections open now, across every serving thread.
# TYPE ccmesh_connections_open gauge
ccmesh_connections_open 7
# HELP ccmesh_connections_past_cap_total Client connections that came past limits.max_connections (or with the process out of file descriptors): their requests were answered 503, but /health and /api/status.
# TYPE ccmesh_connections_past_cap_total counter
ccmesh_connections_past_cap_total 2
"#;
        assert_eq!(text, expected);
    }

    #[test]
    fn client_keys_have_bounded_series_of_their_own() {
        let m = Metrics::new();
        m.set_vocabulary(vocabulary(&["b"], &[]).with_keys(["alice".to_string()]));
        let mut r = record("claude", "b", 200);
        r.client_key = Some("alice".into());
        r.tokens = Tokens { input: Some(10), output: Some(5), cache_read: None, cache_write: None };
        r.cost_usd = Some(0.5);
        m.observe_request(&r);
        r.client_key = Some("not-a-configured-key".into());
        r.status = 429;
        r.cost_usd = None;
        m.observe_request(&r);
        m.observe_key_refusal("alice", "rpm");
        m.observe_key_refusal("", "missing");
        let usage =
            crate::keys::KeyUsage { usd_day: 0.5, usd_5h: 0.5, usd_month: 1.25, in_flight: 2, ..Default::default() };
        let text = m.render_scrape(&Scrape { keys: vec![("alice".into(), usage)], ..Scrape::default() });
        for line in [
            "ccmesh_key_requests_total{key=\"alice\",status_class=\"2xx\"} 1",
            "ccmesh_key_requests_total{key=\"\",status_class=\"4xx\"} 1",
            "ccmesh_key_tokens_total{key=\"alice\",kind=\"input\"} 10",
            "ccmesh_key_cost_usd_total{key=\"alice\"} 0.5",
            "ccmesh_key_refusals_total{key=\"alice\",reason=\"rpm\"} 1",
            "ccmesh_key_refusals_total{key=\"\",reason=\"missing\"} 1",
            "ccmesh_key_spend_usd{key=\"alice\",window=\"month\"} 1.25",
            "ccmesh_key_in_flight{key=\"alice\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
        assert!(!text.contains("not-a-configured-key"));
        // Without keys, none of these families.
        assert!(!Metrics::new().render_scrape(&Scrape::default()).contains("ccmesh_key_"));
    }

    #[test]
    fn label_values_and_help_are_escaped() {
        assert_eq!(escape_label(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(escape_label("line\nbreak"), "line\\nbreak");
        assert_eq!(escape_label("plain-name.1_x"), "plain-name.1_x");
        assert_eq!(escape_help("a\\b\nc \"q\""), "a\\\\b\\nc \"q\"");
        let mut out = String::new();
        sample(&mut out, "x_total", &["model"], &["we\"ird\\\n"], None, 1);
        assert_eq!(out, "x_total{model=\"we\\\"ird\\\\\\n\"} 1\n");
        let mut out = String::new();
        sample(&mut out, "x_total", &[], &[], None, Float(f64::INFINITY));
        assert_eq!(out, "x_total +Inf\n");
    }

    #[test]
    fn series_keys_do_not_collide() {
        assert_ne!(series_key(&["a:b", "c"]), series_key(&["a", "b:c"]));
        assert_ne!(series_key(&["1:a", ""]), series_key(&["", "1:a"]));
        assert_eq!(series_key(&["x", "y"]), series_key(&["x", "y"]));
        assert_eq!(series_key(&["", "abc", &"m".repeat(1234)]), format!("0:3:abc1234:{}", "m".repeat(1234)));
    }

    #[test]
    fn histogram_buckets_are_inclusive_and_cumulative() {
        let h = Histogram::new(&[0.1, 1.0]);
        for v in [0.0, 0.1, 0.1000001, 1.0, 1.5, 1e9, f64::NAN, f64::INFINITY, -3.0] {
            h.observe(v);
        }
        // 0.0, 0.1 and -3 (clamped to 0) ≤ 0.1; 0.1000001 and 1.0 ≤ 1; 1.5 and 1e9 above; NaN and
        // infinity are not observed.
        let slots: Vec<u64> = h.slots.iter().map(|s| s.load(Ordering::Relaxed)).collect();
        assert_eq!(slots, vec![3, 2, 2]);
        assert!((h.sum.get() - (0.1 + 0.1000001 + 1.0 + 1.5 + 1e9)).abs() < 1e-6);

        let f: Family<Histogram> = Family::new();
        f.with(&["claude"], || Histogram::new(&[0.1, 1.0]), |h| h.observe(0.5));
        let mut out = String::new();
        histograms(&mut out, &DURATION, &f);
        let buckets = lines_of(&out, "ccmesh_request_duration_seconds_");
        assert_eq!(
            buckets,
            vec![
                "ccmesh_request_duration_seconds_bucket{protocol=\"claude\",le=\"0.1\"} 0",
                "ccmesh_request_duration_seconds_bucket{protocol=\"claude\",le=\"1\"} 1",
                "ccmesh_request_duration_seconds_bucket{protocol=\"claude\",le=\"+Inf\"} 1",
                "ccmesh_request_duration_seconds_sum{protocol=\"claude\"} 0.5",
                "ccmesh_request_duration_seconds_count{protocol=\"claude\"} 1",
            ]
        );
    }

    #[test]
    fn bucket_bounds_are_increasing() {
        for bounds in [REQUEST_BUCKETS, FIRST_BYTE_BUCKETS, OVERHEAD_BUCKETS] {
            assert!(bounds.windows(2).all(|w| w[0] < w[1]), "{bounds:?}");
        }
        assert_eq!(OVERHEAD_BUCKETS.first(), Some(&0.00005));
    }

    #[test]
    fn counters_are_kept_per_label_set() {
        let m = Metrics::new();
        m.set_vocabulary(vocabulary(&["a", "b"], &[]));
        for (protocol, endpoint, status) in [
            ("claude", "a", 200),
            ("claude", "a", 201),
            ("claude", "a", 503),
            ("openai", "a", 200),
            ("claude", "b", 429),
            ("responses", "gone", 200),
            ("bogus", "a", 200),
        ] {
            m.observe_request(&record(protocol, endpoint, status));
        }
        let mut r = record("claude", "a", 499);
        r.endpoint = None;
        r.attempts.clear();
        m.observe_request(&r);
        let text = m.render_scrape(&Scrape::default());
        assert_eq!(
            lines_of(&text, "ccmesh_requests_total{"),
            vec![
                // Unknown protocol and unknown or absent endpoint are "".
                "ccmesh_requests_total{protocol=\"\",endpoint=\"a\",status_class=\"2xx\"} 1",
                "ccmesh_requests_total{protocol=\"claude\",endpoint=\"\",status_class=\"4xx\"} 1",
                "ccmesh_requests_total{protocol=\"claude\",endpoint=\"a\",status_class=\"2xx\"} 2",
                "ccmesh_requests_total{protocol=\"claude\",endpoint=\"a\",status_class=\"5xx\"} 1",
                "ccmesh_requests_total{protocol=\"claude\",endpoint=\"b\",status_class=\"4xx\"} 1",
                "ccmesh_requests_total{protocol=\"openai\",endpoint=\"a\",status_class=\"2xx\"} 1",
                "ccmesh_requests_total{protocol=\"responses\",endpoint=\"\",status_class=\"2xx\"} 1",
            ]
        );
        assert_eq!(
            lines_of(&text, "ccmesh_upstream_attempts_total{"),
            vec![
                "ccmesh_upstream_attempts_total{endpoint=\"\",outcome=\"success\"} 1",
                "ccmesh_upstream_attempts_total{endpoint=\"a\",outcome=\"success\"} 5",
                "ccmesh_upstream_attempts_total{endpoint=\"b\",outcome=\"success\"} 1",
            ]
        );
        assert!(lines_of(&text, "ccmesh_failovers_total{").is_empty());
    }

    #[test]
    fn cost_and_unpriced_usage() {
        let m = Metrics::new();
        m.set_vocabulary(vocabulary(&["a"], &[]));
        let priced = |usd| {
            let mut r = record("claude", "a", 200);
            r.tokens.input = Some(1);
            r.cost_usd = Some(usd);
            r
        };
        m.observe_request(&priced(0.1));
        m.observe_request(&priced(0.2));
        let mut unpriced = priced(0.0);
        unpriced.cost_usd = None;
        m.observe_request(&unpriced);
        // Unknown usage (a cut stream): neither priced nor unpriced.
        m.observe_request(&record("claude", "a", 200));
        let text = m.render_scrape(&Scrape::default());
        let cost = lines_of(&text, "ccmesh_cost_usd_total{");
        assert_eq!(cost.len(), 1);
        let value: f64 = cost[0].rsplit(' ').next().unwrap().parse().unwrap();
        assert!((value - 0.3).abs() < 1e-12, "{value}");
        assert_eq!(
            lines_of(&text, "ccmesh_unpriced_requests_total{"),
            vec!["ccmesh_unpriced_requests_total{endpoint=\"a\"} 1"]
        );
        assert_eq!(
            lines_of(&text, "ccmesh_tokens_total{"),
            vec!["ccmesh_tokens_total{endpoint=\"a\",model=\"other\",kind=\"input\"} 3"]
        );
    }

    fn token_models(m: &Metrics) -> Vec<String> {
        let text = m.render_scrape(&Scrape::default());
        let mut models: Vec<String> = lines_of(&text, "ccmesh_tokens_total{")
            .iter()
            .map(|l| l.split("model=\"").nth(1).unwrap().split('"').next().unwrap().to_string())
            .collect();
        models.dedup();
        models
    }

    fn with_model(answered: Option<&str>, sent: Option<&str>) -> RequestRecord {
        let mut r = record("openai", "a", 200);
        r.model_answered = answered.map(|m| m.to_string().into());
        r.model_sent = sent.map(|m| m.to_string().into());
        r.tokens.output = Some(1);
        r
    }

    #[test]
    fn model_labels_are_bounded_by_the_configuration() {
        let m = Metrics::new();
        // Literal names, model_map keys and values count; globs do not.
        let v = Vocabulary::new(
            ["a".to_string()],
            ["gpt-4o".to_string(), "claude-*".to_string(), "GLM-4.6".to_string()],
            Arc::new(PriceTable::builtin()),
        );
        m.set_vocabulary(v);
        m.observe_request(&with_model(Some("gpt-4o"), Some("x")));
        // model_answered wins over model_sent; the configured spelling is the label.
        m.observe_request(&with_model(Some("glm-4.6"), Some("gpt-4o")));
        m.observe_request(&with_model(None, Some("GPT-4O")));
        // A client's invention, a glob match, a huge name: all `other`.
        m.observe_request(&with_model(None, Some("my-own-model-123")));
        m.observe_request(&with_model(Some("claude-anything"), None));
        m.observe_request(&with_model(Some(&"x".repeat(10_000)), None));
        m.observe_request(&with_model(None, None));
        assert_eq!(token_models(&m), vec!["", "GLM-4.6", "gpt-4o", "other"]);
    }

    #[test]
    fn priced_models_are_labelled_by_their_price_entry() {
        use crate::observe::cost::Price;
        let m = Metrics::new();
        let glm = Price { input: 1.0, output: 2.0, cache_read: 0.1, cache_write: 1.0 };
        let prices = Arc::new(PriceTable::with_overrides(vec![("glm-*".to_string(), glm)]));
        m.set_vocabulary(Vocabulary::new(["a".to_string()], Vec::new(), prices));
        m.observe_request(&with_model(Some("claude-sonnet-4-5-20250929"), None));
        m.observe_request(&with_model(Some("claude-sonnet-4-5"), None));
        // A glob entry would admit any name the client makes up: the label is the entry.
        m.observe_request(&with_model(None, Some("glm-4.6-air")));
        m.observe_request(&with_model(None, Some("glm-whatever-i-like")));
        m.observe_request(&with_model(None, Some("unpriced-model")));
        assert_eq!(token_models(&m), vec!["claude-sonnet-4-5", "glm-*", "other"]);
    }

    #[test]
    fn model_labels_are_capped_even_without_a_vocabulary() {
        let m = Metrics::new();
        for i in 0..(MAX_MODELS + 50) {
            m.observe_request(&with_model(None, Some(&format!("client-model-{i}"))));
        }
        let models = token_models(&m);
        assert_eq!(models.len(), MAX_MODELS + 1, "the cap plus `other`");
        assert!(models.contains(&"other".to_string()));
        // An already admitted value keeps its series.
        m.observe_request(&with_model(None, Some("client-model-0")));
        assert_eq!(token_models(&m).len(), MAX_MODELS + 1);
    }

    #[test]
    fn endpoint_labels_without_a_vocabulary_must_be_valid_names_and_are_capped() {
        let m = Metrics::new();
        m.observe_request(&record("claude", "bad name\n\"", 200));
        for i in 0..(MAX_ENDPOINTS + 10) {
            m.observe_request(&record("claude", &format!("e{i}"), 200));
        }
        let text = m.render_scrape(&Scrape::default());
        let lines = lines_of(&text, "ccmesh_requests_total{");
        assert_eq!(lines.len(), MAX_ENDPOINTS + 1);
        assert!(
            lines.contains(
                &"ccmesh_requests_total{protocol=\"claude\",endpoint=\"\",status_class=\"2xx\"} 11".to_string()
            )
        );
    }

    #[test]
    fn transitions_are_counted_by_state_and_cause() {
        let m = Metrics::new();
        let t = |to, cause| Transition { from: Circuit::Closed, to, reason: None, cause, cooldown: None };
        m.observe_transition("a", &t(Circuit::Open, TransitionCause::ErrorRate { failures: 5, total: 10 }));
        m.observe_transition("a", &t(Circuit::HalfOpen, TransitionCause::CooldownElapsed));
        m.observe_transition("a", &t(Circuit::Closed, TransitionCause::ProbesSucceeded { count: 2 }));
        m.observe_transition("a", &t(Circuit::Open, TransitionCause::ErrorRate { failures: 6, total: 10 }));
        m.observe_transition("a", &t(Circuit::Closed, TransitionCause::ManualReset));
        let text = m.render_scrape(&Scrape::default());
        assert_eq!(
            lines_of(&text, "ccmesh_breaker_transitions_total{"),
            vec![
                "ccmesh_breaker_transitions_total{endpoint=\"a\",to=\"closed\",reason=\"manual_reset\"} 1",
                "ccmesh_breaker_transitions_total{endpoint=\"a\",to=\"closed\",reason=\"probes_succeeded\"} 1",
                "ccmesh_breaker_transitions_total{endpoint=\"a\",to=\"half_open\",reason=\"cooldown_elapsed\"} 1",
                "ccmesh_breaker_transitions_total{endpoint=\"a\",to=\"open\",reason=\"error_rate\"} 2",
            ]
        );
    }

    #[test]
    fn outcome_labels_match_the_record_serialisation() {
        use Classification::*;
        for c in [Success, Neutral, Failure, RateLimited, Transient, Cancelled] {
            assert_eq!(serde_json::to_value(c).unwrap(), outcome_str(c));
        }
    }

    #[test]
    fn concurrent_observations_are_all_counted() {
        let m = Arc::new(Metrics::new());
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        m.observe_request(&record("claude", if i % 2 == 0 { "a" } else { "b" }, 200));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let text = m.render_scrape(&Scrape::default());
        assert_eq!(
            lines_of(&text, "ccmesh_requests_total{"),
            vec![
                "ccmesh_requests_total{protocol=\"claude\",endpoint=\"a\",status_class=\"2xx\"} 2000",
                "ccmesh_requests_total{protocol=\"claude\",endpoint=\"b\",status_class=\"2xx\"} 2000",
            ]
        );
        assert!(text.contains("ccmesh_request_duration_seconds_count{protocol=\"claude\"} 4000\n"));
    }

    #[test]
    fn series_first_seen_on_many_threads_at_once_are_all_kept() {
        // New series are made under the family's write lock while other threads read and count.
        let m = Arc::new(Metrics::new());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for i in 0..25 {
                        m.observe_request(&record("claude", &format!("e{t}-{i}"), 200));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let text = m.render_scrape(&Scrape::default());
        let counted = lines_of(&text, "ccmesh_requests_total{");
        assert_eq!(counted.len(), 100, "{counted:?}");
        assert!(counted.iter().all(|l| l.ends_with("} 1")), "{counted:?}");
    }

    #[test]
    fn cluster_fallbacks_appear_only_in_a_cluster() {
        let m = Metrics::new();
        assert!(!m.render_scrape(&Scrape::default()).contains("ccmesh_cluster_fallbacks_total"));
        let text = m.render_scrape(&Scrape { cluster_fallbacks: vec![("admit", 2), ("poll", 0)], ..Scrape::default() });
        assert_eq!(
            lines_of(&text, "ccmesh_cluster_fallbacks_total"),
            ["ccmesh_cluster_fallbacks_total{op=\"admit\"} 2", "ccmesh_cluster_fallbacks_total{op=\"poll\"} 0"]
        );
        assert!(text.contains("# TYPE ccmesh_cluster_fallbacks_total counter"));
    }
}
