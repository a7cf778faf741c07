//! Several gateways, one brain (SPEC §13, §15.13): with `--redis URL` the hot state that must
//! agree across nodes lives in Redis, each piece behind the narrow type it already had on one
//! node. docs/cluster.md is the operator's view; this is the code's.
//!
//! | piece | on one node | shared | read on the request path from |
//! | --- | --- | --- | --- |
//! | breaker verdicts (open until, reason; closed; reset) | `breaker` | `hooks` + `sync` | the local breaker, mirrored in the background |
//! | the one half-open probe, its successes | `breaker` | `hooks` (claim), `sync` | one short call when a probe is due |
//! | current endpoint, round-robin counter | `routing::Rotation` | `hooks` + `sync` | the local mirror; one short call per round-robin ticket |
//! | client-key limits and budgets | `keys::MemoryLimiter` | `limiter` | one short call per admission |
//! | session bindings | `affinity::MemoryBindings` | `bindings` | one short call per request with a session |
//! | configuration changes | — | `sync` (version + pub/sub) | nothing: a change reloads the snapshot |
//!
//! **Verdicts, not counters.** Each node counts its own failures; what is shared is the decision
//! — open until when, and why — so a node skips an endpoint another opened without paying the
//! failures again, and no request waits on Redis to read a breaker.
//!
//! **Nothing waits on Redis for long.** A call on the request path has `timeout` (100 ms by
//! default) and passes the fallback breaker (`fallback.rs`); when either says no, the node uses
//! its local state (fail-open) and counts the fallback. Everything else — publishing verdicts,
//! moves, charges, bindings — is queued for the background work (`sync.rs`), which also keeps
//! the local mirrors fresh: pub/sub for news within milliseconds, and a poll every
//! `POLL_EVERY` for what a lost message or a reconnect missed. When Redis comes back the node
//! re-publishes what it holds (open breakers with their remaining time, bindings made meanwhile,
//! the current endpoints), never what has expired.
//!
//! Time: every deadline in Redis is in the Redis server's clock; a node converts with the offset
//! its polls measure, so nodes with skewed clocks agree on when a verdict ends.

pub mod bindings;
pub mod client;
pub mod fallback;
pub mod hooks;
pub mod limiter;
pub mod messages;
pub mod names;
pub mod resp;
pub mod scripts;
pub mod slots;
pub mod sync;

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

use tokio::sync::mpsc;

use crate::breaker::OpenReason;
use crate::clock::Clock;
use crate::endpoint::EndpointId;
use crate::protocol::Protocol;
use client::{Redis, Target};
use fallback::Op;
use names::Names;

/// How often a node polls Redis for what it mirrors (the staleness bound when pub/sub is lost).
pub const POLL_EVERY: Duration = Duration::from_millis(500);
/// The default timeout of a Redis call on the request path.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(100);
/// Background calls (publishing, polling) may take longer: nobody waits for them.
const BACKGROUND_TIMEOUT: Duration = Duration::from_secs(1);
/// Work waiting for the background (publishing, charges, bindings); past it work is dropped and
/// counted (`op="queue"`) rather than memory growing while Redis is slow.
const QUEUE: usize = 8192;

/// `serve --redis`.
#[derive(Clone, Debug)]
pub struct Options {
    pub url: String,
    pub prefix: String,
    /// Timeout of each Redis call on the request path.
    pub timeout: Duration,
}

/// Work for the background, in the order it was queued.
#[derive(Debug)]
pub enum Work {
    Open { endpoint: String, reason: OpenReason, until_ms: i64 },
    Close { endpoint: String, reset: bool },
    ProbeSucceeded { endpoint: String, threshold: u32 },
    ProbeReleased { endpoint: String },
    MoveCurrent { protocol: Protocol, seen: Option<EndpointId>, to: EndpointId },
    SetCurrent { protocol: Protocol, to: EndpointId },
    Release { key: String, member: String },
    Charge { key: String, tokens: u64, usd: f64 },
    Bind { key: crate::affinity::SessionKey, endpoint: EndpointId },
    Unbind { key: crate::affinity::SessionKey, endpoint: EndpointId },
    ClearBindings { protocol: Protocol },
    BumpConfig,
}

/// What every part of the cluster layer shares.
pub struct Core {
    pub redis: Redis,
    pub names: Names,
    /// This node's identity in Redis (probe claims, lease members, config messages).
    pub node: String,
    /// Timeout of a call on the request path.
    pub timeout: Duration,
    pub clock: Arc<dyn Clock>,
    work: mpsc::Sender<Work>,
    fallbacks: [AtomicU64; Op::ALL.len()],
    /// Redis server time minus this node's wall-clock time, in ms, as the last poll measured.
    offset_ms: AtomicI64,
    /// What the background learning says is wrong (a failed poll, the subscription down).
    learning_problem: Mutex<Option<String>>,
    /// The subscription is up.
    pub(crate) subscribed: AtomicBool,
    /// Probes this node holds (refreshed while they run) and probes held elsewhere (not asked
    /// for again until their claim would have run out, or news arrives).
    probes: Mutex<Probes>,
    /// The generation of each protocol's session bindings (a manual switch moves to the next).
    generations: [AtomicI64; Protocol::COUNT],
    /// The newest config version this node has seen (`sync::NEVER_SEEN` before the first poll).
    pub(crate) seen_config: AtomicI64,
    /// Another node changed the configuration: the poller runs the reload hook.
    pub(crate) reload_wanted: Notify,
    /// Poll now rather than at the next tick (the subscription just came back).
    pub(crate) poll_now: Notify,
    /// Redis was away (or lost its data): re-publish what this node holds before the next poll.
    pub(crate) needs_republish: AtomicBool,
}

#[derive(Default)]
struct Probes {
    held: std::collections::HashSet<String>,
    elsewhere: std::collections::HashMap<String, std::time::Instant>,
}

/// The cluster layer of one node: its core, the shared limiter and bindings, and the queue the
/// background work drains.
pub struct Cluster {
    pub core: Arc<Core>,
    pub limiter: Arc<limiter::ClusterLimiter>,
    pub bindings: Arc<bindings::ClusterBindings>,
    queue: Mutex<Option<mpsc::Receiver<Work>>>,
}

impl Cluster {
    /// Set up from `--redis`; nothing is sent yet (`sync::join` does the first poll).
    pub fn new(options: &Options, node: &str, clock: Arc<dyn Clock>) -> Result<Arc<Cluster>, String> {
        let target = Target::parse(&options.url)?;
        let (tx, rx) = mpsc::channel(QUEUE);
        let core = Arc::new(Core {
            redis: Redis::new(target, clock.clone()),
            names: Names::new(&options.prefix),
            node: node.to_string(),
            timeout: options.timeout,
            clock,
            work: tx,
            fallbacks: Default::default(),
            offset_ms: AtomicI64::new(0),
            learning_problem: Mutex::new(None),
            subscribed: AtomicBool::new(false),
            probes: Mutex::new(Probes::default()),
            generations: Default::default(),
            seen_config: sync::new_seen_config(),
            reload_wanted: Notify::new(),
            poll_now: Notify::new(),
            needs_republish: AtomicBool::new(false),
        });
        Ok(Arc::new(Cluster {
            limiter: Arc::new(limiter::ClusterLimiter::new(core.clone())),
            bindings: Arc::new(bindings::ClusterBindings::new(core.clone())),
            core,
            queue: Mutex::new(Some(rx)),
        }))
    }

    /// `None` while Redis works; else what is wrong (`/api/status`, `/health`).
    pub fn problem(&self) -> Option<String> {
        self.core.problem()
    }

    /// `ccmesh_cluster_fallbacks_total`, by op.
    pub fn fallbacks(&self) -> Vec<(&'static str, u64)> {
        Op::ALL.iter().map(|op| (op.as_str(), self.core.fallbacks[op.index()].load(Ordering::Relaxed))).collect()
    }

    /// This node's configuration changed (an admin write): every other node reloads within
    /// `POLL_EVERY` at worst, within milliseconds through the channel.
    pub fn config_changed(&self) {
        self.core.enqueue(Work::BumpConfig);
    }

    /// What `/api/status` says: `ok`, or `degraded: …`.
    pub fn status(&self) -> String {
        match self.problem() {
            None => "ok".to_string(),
            Some(p) => format!("degraded: {p}"),
        }
    }

    /// Where Redis is, without any password.
    pub fn shown_target(&self) -> String {
        self.core.redis.target().shown()
    }

    /// The queue, for the one background worker that drains it.
    pub(crate) fn take_queue(&self) -> Option<mpsc::Receiver<Work>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

impl Core {
    /// Queue background work; a full queue drops it (counted) rather than block or grow.
    pub fn enqueue(&self, work: Work) {
        if self.work.try_send(work).is_err() {
            self.fell_back(Op::Queue);
        }
    }

    pub fn fell_back(&self, op: Op) {
        self.fallbacks[op.index()].fetch_add(1, Ordering::Relaxed);
    }

    pub fn problem(&self) -> Option<String> {
        self.redis.problem().or_else(|| self.learning_problem.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }

    pub(crate) fn set_learning_problem(&self, problem: Option<String>) {
        *self.learning_problem.lock().unwrap_or_else(|p| p.into_inner()) = problem;
    }

    /// This node's wall clock, in unix ms.
    pub fn now_ms(&self) -> i64 {
        crate::keys::now_ms(&*self.clock)
    }

    pub(crate) fn offset_ms(&self) -> i64 {
        self.offset_ms.load(Ordering::Relaxed)
    }

    pub(crate) fn set_offset_ms(&self, offset: i64) {
        self.offset_ms.store(offset, Ordering::Relaxed);
    }

    /// How long until a deadline in Redis server time, from this node's view of now.
    pub(crate) fn remaining(&self, until_redis_ms: i64) -> Duration {
        let left = until_redis_ms - self.offset_ms() - self.now_ms();
        Duration::from_millis(u64::try_from(left).unwrap_or(0))
    }

    pub fn generation(&self, p: Protocol) -> i64 {
        self.generations[p.index()].load(Ordering::Acquire)
    }

    pub(crate) fn set_generation(&self, p: Protocol, generation: i64) {
        self.generations[p.index()].store(generation, Ordering::Release);
    }

    /// A round-robin ticket from the cluster's counter, within the short timeout; `local` when
    /// Redis does not answer.
    pub async fn round_robin_ticket(&self, p: Protocol, local: impl FnOnce() -> u64) -> u64 {
        let command = ["HINCRBY".to_string(), self.names.round_robin(), p.as_str().to_string(), "1".to_string()];
        match self.redis.call(&command, self.timeout).await.ok().and_then(|v| v.int()) {
            Some(n) => u64::try_from(n - 1).unwrap_or(0),
            None => {
                self.fell_back(Op::Rotation);
                local()
            }
        }
    }

    pub(crate) fn background_timeout(&self) -> Duration {
        BACKGROUND_TIMEOUT.max(self.timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn cluster(url: &str, clock: Arc<dyn Clock>) -> Arc<Cluster> {
        let options = Options { url: url.into(), prefix: "t".into(), timeout: Duration::from_millis(200) };
        Cluster::new(&options, "node-1", clock).unwrap()
    }

    #[test]
    fn deadlines_in_redis_time_are_read_through_the_measured_offset() {
        let clock = Arc::new(ManualClock::new());
        let c = cluster("redis://127.0.0.1:6379", Arc::new(clock.clone()));
        let core = &c.core;
        // Redis's clock runs 2.5 s ahead of this node's.
        core.set_offset_ms(2_500);
        let until = core.now_ms() + 2_500 + 10_000;
        assert_eq!(core.remaining(until), Duration::from_secs(10));
        clock.advance(Duration::from_secs(4));
        assert_eq!(core.remaining(until), Duration::from_secs(6));
        clock.advance(Duration::from_secs(7));
        assert_eq!(core.remaining(until), Duration::ZERO, "an ended verdict has no time left, never a negative one");
        // Behind, too.
        core.set_offset_ms(-1_000);
        assert_eq!(core.remaining(core.now_ms() - 1_000 + 500), Duration::from_millis(500));
    }

    #[tokio::test]
    async fn a_redis_that_does_not_answer_is_stopped_being_asked_and_its_password_never_shown() {
        // A port nothing listens on: every call is refused at once.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let c = cluster(&format!("redis://:hunter2-secret@127.0.0.1:{port}"), Arc::new(crate::clock::SystemClock));
        let redis = &c.core.redis;
        assert_eq!(c.problem(), None);
        for _ in 0..fallback::FAILURES_TO_OPEN {
            assert!(matches!(
                redis.call(&["PING"], Duration::from_millis(200)).await,
                Err(client::CallError::Connection(_))
            ));
        }
        assert_eq!(redis.call(&["PING"], Duration::from_millis(200)).await, Err(client::CallError::Unavailable));
        let problem = c.problem().unwrap();
        assert!(problem.contains(&format!("127.0.0.1:{port}")), "{problem}");
        assert!(
            !problem.contains("hunter2") && !c.status().contains("hunter2") && !c.shown_target().contains("hunter2")
        );
        assert!(c.status().starts_with("degraded: "));
    }

    #[tokio::test]
    async fn a_full_queue_drops_work_and_counts_it() {
        let c = cluster("redis://127.0.0.1:6379", Arc::new(crate::clock::SystemClock));
        for _ in 0..QUEUE + 3 {
            c.config_changed();
        }
        let dropped = c.fallbacks().into_iter().find(|(op, _)| *op == "queue").unwrap().1;
        assert_eq!(dropped, 3);
    }
}
