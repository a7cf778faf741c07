//! The background work of the cluster layer, on the server's background runtime (never a serving
//! thread, never the request path):
//!
//! - **the worker** drains the queue of what this node decided (verdicts, moves, charges,
//!   bindings, config bumps) and sends each to Redis, in order;
//! - **the subscriber** holds a `SUBSCRIBE` connection and applies other nodes' news within
//!   milliseconds;
//! - **the poller** reads everything mirrored in one round trip every `POLL_EVERY`, for what a
//!   lost message or a reconnect missed, measures the Redis server's clock offset, and after an
//!   outage re-publishes what this node holds before applying what Redis says;
//! - **the refresher** extends this node's half-open probe claims while the probes run.
//!
//! Configuration changes: an admin write on any node bumps the shared version
//! (`Cluster::config_changed`), and every other node, told by a message or by the poll, calls
//! `Node::config_changed_elsewhere` — the gateway pulls its reload trigger, and its snapshot is
//! rebuilt from its store (on a shared PostgreSQL, the change itself; on SQLite per node, each
//! node's own file).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use super::client::{CallError, Conn};
use super::fallback::Op;
use super::hooks::{PROBE_CLAIM, PROBE_REFRESH};
use super::messages::{self, Message};
use super::resp::Value;
use super::{Cluster, Core, POLL_EVERY, Work, scripts};
use crate::endpoint::EndpointId;
use crate::protocol::Protocol;
use crate::routing::Rotation;
use crate::snapshot::Snapshot;

pub type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What the background work needs of the node it runs in (the `Gateway` implements it, so this
/// module does not import the gateway that holds it).
pub trait Node: Send + Sync + 'static {
    /// The configuration now (endpoint names ↔ ids, the breakers).
    fn configuration(&self) -> Arc<Snapshot>;
    fn rotation(&self) -> &Rotation;
    /// Another node changed the configuration (to `version`): have this node's snapshot rebuilt
    /// from wherever the configuration lives. Must not block: the gateway pulls its reload
    /// trigger (`config::reload`), whose loop rebuilds off the request path.
    fn config_changed_elsewhere(&self, version: i64);
}

/// How long the subscriber waits before connecting again after losing its connection.
const RESUBSCRIBE_AFTER: Duration = Duration::from_millis(200);
/// A subscription silent this long is pinged; silent for as long again, it is replaced.
const SUBSCRIPTION_QUIET: Duration = Duration::from_secs(5);

/// The background tasks of a node of `cluster`.
pub fn tasks(gw: Arc<dyn Node>, cluster: Arc<Cluster>) -> Vec<Task> {
    let mut tasks: Vec<Task> = Vec::new();
    if let Some(queue) = cluster.take_queue() {
        tasks.push(Box::pin(worker(gw.clone(), cluster.clone(), queue)));
    }
    tasks.push(Box::pin(subscriber(gw.clone(), cluster.clone())));
    tasks.push(Box::pin(poller(gw.clone(), cluster.clone())));
    tasks.push(Box::pin(refresher(cluster)));
    tasks
}

/// The first poll, before serving: a node that starts (or restarts) learns the cluster's
/// verdicts — with their remaining time — before its first request. Redis not answering is
/// logged, not fatal: the node serves with local state and the poller keeps trying.
pub async fn join(gw: &dyn Node, cluster: &Cluster) {
    match poll_once(gw, &cluster.core).await {
        Ok(()) => {
            tracing::info!(event = "cluster_joined", redis = %cluster.core.redis.target().shown(), node = %cluster.core.node, "joined the cluster")
        }
        Err(e) => {
            tracing::warn!(event = "cluster_degraded", redis = %cluster.core.redis.target().shown(), error = %e, "Redis does not answer; serving with local state until it does")
        }
    }
}

/// Charges and lease returns in flight at once: they are most of the work (two per request with
/// a key) and their order does not matter, so they go side by side; everything else is sent in
/// the order it was decided (an open before its close).
const UNORDERED_IN_FLIGHT: usize = 32;

async fn worker(gw: Arc<dyn Node>, cluster: Arc<Cluster>, mut queue: tokio::sync::mpsc::Receiver<Work>) {
    // Owned here: dropping the worker (the server's stop) ends them too.
    let mut unordered = tokio::task::JoinSet::new();
    while let Some(work) = queue.recv().await {
        while unordered.try_join_next().is_some() {}
        match work {
            Work::Charge { .. } | Work::Release { .. } => {
                while unordered.len() >= UNORDERED_IN_FLIGHT {
                    unordered.join_next().await;
                }
                let (gw, cluster) = (gw.clone(), cluster.clone());
                unordered.spawn(async move { perform(&*gw, &cluster, work).await });
            }
            ordered => perform(&*gw, &cluster, ordered).await,
        }
    }
}

/// Send one piece of this node's work to Redis.
async fn perform(gw: &dyn Node, cluster: &Cluster, work: Work) {
    let core = &cluster.core;
    let names = &core.names;
    let timeout = core.background_timeout();
    let channel = names.channel();
    let name_of =
        |id: EndpointId| gw.configuration().endpoints.iter().find(|e| e.config.id == id).map(|e| e.config.name.clone());
    let verdict_keys = |endpoint: &str| [names.verdicts(), names.half_open(), names.probe(endpoint)];
    let failed = |op: Op, e: CallError| {
        core.fell_back(op);
        tracing::debug!(event = "cluster_call_failed", op = op.as_str(), error = %e, "a Redis call of the background failed");
    };
    match work {
        Work::Open { endpoint, reason, until_ms } => {
            let remaining = until_ms - core.now_ms();
            let args = [endpoint.clone(), reason.as_str().to_string(), remaining.to_string(), channel];
            if let Err(e) = core.redis.eval(&scripts::OPEN, &verdict_keys(&endpoint), &args, timeout).await {
                failed(Op::Verdict, e);
            }
        }
        Work::Close { endpoint, reset } => {
            let args = [endpoint.clone(), channel, if reset { "reset" } else { "closed" }.to_string()];
            if let Err(e) = core.redis.eval(&scripts::CLOSE, &verdict_keys(&endpoint), &args, timeout).await {
                failed(Op::Verdict, e);
            }
        }
        Work::ProbeSucceeded { endpoint, threshold } => {
            let keys = [names.half_open(), names.probe(&endpoint), names.verdicts()];
            let args = [endpoint, core.node.clone(), threshold.max(1).to_string(), channel];
            if let Err(e) = core.redis.eval(&scripts::PROBE_SUCCEEDED, &keys, &args, timeout).await {
                failed(Op::Verdict, e);
            }
        }
        Work::ProbeReleased { endpoint } => {
            let keys = [names.probe(&endpoint)];
            if let Err(e) =
                core.redis.eval(&scripts::RELEASE_PROBE, &keys, std::slice::from_ref(&core.node), timeout).await
            {
                failed(Op::Probe, e);
            }
        }
        Work::MoveCurrent { protocol, seen, to } => {
            let Some(to_name) = name_of(to) else { return };
            let seen_name = seen.and_then(name_of).unwrap_or_default();
            let args = [protocol.as_str().to_string(), seen_name, to_name, channel];
            match core.redis.eval(&scripts::MOVE_CURRENT, &[names.current()], &args, timeout).await {
                // Redis's answer is the cluster's current endpoint, whoever moved it.
                Ok(v) => mirror_current(gw, protocol, &v.text().unwrap_or_default()),
                Err(e) => failed(Op::Rotation, e),
            }
        }
        Work::SetCurrent { protocol, to } => {
            let Some(to_name) = name_of(to) else { return };
            let args = [protocol.as_str().to_string(), to_name, channel, "0".to_string()];
            if let Err(e) = core.redis.eval(&scripts::SET_CURRENT, &[names.current()], &args, timeout).await {
                failed(Op::Rotation, e);
            }
        }
        Work::Release { key, member } => cluster.limiter.release_shared(&key, &member).await,
        Work::Charge { key, tokens, usd } => cluster.limiter.charge_shared(&key, tokens, usd).await,
        Work::Bind { key, endpoint } => {
            if let Some(name) = name_of(endpoint) {
                cluster.bindings.bind_shared(&key, endpoint, &name).await;
            }
        }
        Work::Unbind { key, endpoint } => {
            if let Some(name) = name_of(endpoint) {
                cluster.bindings.unbind_shared(&key, &name).await;
            }
        }
        Work::ClearBindings { protocol } => cluster.bindings.clear_shared(protocol).await,
        Work::BumpConfig => {
            let args = [channel, core.node.clone()];
            match core.redis.eval(&scripts::BUMP_CONFIG, &[names.config_version()], &args, timeout).await {
                Ok(v) => {
                    // This node's own change: no reload for it when the poll sees it.
                    if let Some(version) = v.int() {
                        core.seen_config.fetch_max(version, Ordering::AcqRel);
                    }
                }
                Err(e) => failed(Op::Config, e),
            }
        }
    }
}

/// The current endpoint the cluster names, as this node's mirror.
fn mirror_current(gw: &dyn Node, protocol: Protocol, name: &str) {
    let snapshot = gw.configuration();
    let id = snapshot.find(name).map(|e| e.config.id);
    if name.is_empty() || id.is_some() {
        gw.rotation().mirror_current(protocol, id);
    }
}

/// Apply one message from another node (or this one's own, which changes nothing).
fn apply(gw: &dyn Node, core: &Core, message: Message) {
    match message {
        Message::Open { endpoint, reason, until_ms } => {
            core.probe_news(&endpoint);
            if let Some(e) = gw.configuration().find(&endpoint) {
                let remaining = core.remaining(until_ms);
                if !remaining.is_zero() {
                    e.breaker.apply_open(&endpoint, reason, remaining);
                }
            }
        }
        Message::Closed { endpoint } => closed(gw, core, &endpoint, false),
        Message::Reset { endpoint } => closed(gw, core, &endpoint, true),
        Message::Current { protocol, endpoint } => mirror_current(gw, protocol, &endpoint),
        Message::Bindings { protocol, generation } => core.set_generation(protocol, generation),
        Message::Config { version, node } => {
            if node != core.node
                && let Ok(v) = version.parse::<i64>()
            {
                config_version_seen(core, v);
            }
        }
    }
}

fn closed(gw: &dyn Node, core: &Core, endpoint: &str, reset: bool) {
    core.probe_news(endpoint);
    if let Some(e) = gw.configuration().find(endpoint) {
        e.breaker.apply_closed(endpoint, reset);
    }
}

/// A config version learned from Redis: newer than what this node has seen → reload.
fn config_version_seen(core: &Core, version: i64) {
    let before = core.seen_config.fetch_max(version, Ordering::AcqRel);
    if before < version && before != NEVER_SEEN {
        core.reload_wanted.notify_one();
    }
}

/// `seen_config` before the first poll: the version found then is the one this node started with.
pub(crate) const NEVER_SEEN: i64 = i64::MIN;

async fn subscriber(gw: Arc<dyn Node>, cluster: Arc<Cluster>) {
    let core = &cluster.core;
    loop {
        match subscribe(core).await {
            Ok(mut conn) => {
                core.subscribed.store(true, Ordering::Release);
                // What was said while nobody listened is the next poll's to catch up.
                core.poll_now.notify_one();
                let mut pinged = false;
                loop {
                    // A quiet channel is asked for a PONG: a connection that a network failure
                    // left half-open (no reset ever arrives) is noticed and replaced.
                    let read = match tokio::time::timeout(SUBSCRIPTION_QUIET, conn.read()).await {
                        Ok(read) => read,
                        Err(_) if pinged => Err(CallError::Timeout),
                        Err(_) => {
                            pinged = true;
                            match conn.send(&["PING"]).await {
                                Ok(()) => continue,
                                Err(e) => Err(e),
                            }
                        }
                    };
                    match read {
                        Ok(v) => {
                            pinged = false;
                            let items = v.items();
                            if items.first().and_then(Value::text).as_deref() == Some("message")
                                && let Some(m) = items.get(2).and_then(Value::text).and_then(|p| messages::parse(&p))
                            {
                                apply(&*gw, core, m);
                            }
                        }
                        Err(e) => {
                            tracing::debug!(event = "cluster_subscription_lost", error = %e, "the cluster subscription was lost");
                            break;
                        }
                    }
                }
                core.subscribed.store(false, Ordering::Release);
            }
            Err(e) => {
                tracing::debug!(event = "cluster_subscribe_failed", error = %e, "cannot subscribe to the cluster's channel")
            }
        }
        core.needs_republish.store(true, Ordering::Release);
        tokio::time::sleep(RESUBSCRIBE_AFTER).await;
    }
}

async fn subscribe(core: &Core) -> Result<Conn, CallError> {
    let timeout = core.background_timeout();
    let connect = async {
        let mut conn = Conn::open(core.redis.target()).await?;
        let reply = conn.call(&["SUBSCRIBE", core.names.channel().as_str()]).await?;
        if let Value::Error(e) = reply {
            return Err(CallError::Reply(e));
        }
        Ok(conn)
    };
    tokio::time::timeout(timeout, connect).await.unwrap_or(Err(CallError::Timeout))
}

async fn poller(gw: Arc<dyn Node>, cluster: Arc<Cluster>) {
    let core = &cluster.core;
    loop {
        if core.needs_republish.swap(false, Ordering::AcqRel) && republish(&*gw, &cluster).await.is_err() {
            core.needs_republish.store(true, Ordering::Release);
        }
        let result = poll_once(&*gw, core).await;
        let problem = match (&result, core.subscribed.load(Ordering::Acquire)) {
            (Err(e), _) => Some(format!("cannot read the shared state: {e}")),
            (Ok(()), false) => Some("not subscribed to the cluster's changes".to_string()),
            (Ok(()), true) => None,
        };
        if result.is_err() {
            core.fell_back(Op::Poll);
            core.needs_republish.store(true, Ordering::Release);
        }
        if problem.is_some() != core.problem().is_some() {
            match &problem {
                Some(p) => {
                    tracing::warn!(event = "cluster_degraded", problem = %p, "the cluster state is degraded: serving with local state")
                }
                None => tracing::info!(event = "cluster_recovered", "the cluster state is shared again"),
            }
        }
        core.set_learning_problem(problem);
        tokio::select! {
            _ = tokio::time::sleep(POLL_EVERY) => {}
            _ = core.poll_now.notified() => {}
            _ = core.reload_wanted.notified() => gw.config_changed_elsewhere(core.seen_config.load(Ordering::Acquire)),
        }
    }
}

/// One poll: the server's time, every verdict, the current endpoints, the bindings' generations
/// and the config version, applied to this node's mirrors.
async fn poll_once(gw: &dyn Node, core: &Core) -> Result<(), CallError> {
    let names = &core.names;
    let keys = [names.verdicts(), names.current(), names.binding_generation(), names.config_version()];
    let before = core.now_ms();
    let reply = core.redis.eval(&scripts::POLL, &keys, &[] as &[String], core.background_timeout()).await?;
    let after = core.now_ms();
    let items = reply.items();
    let (Some(secs), Some(micros)) = (items.first().and_then(Value::int), items.get(1).and_then(Value::int)) else {
        return Err(CallError::Connection("an unexpected answer to the poll".into()));
    };
    core.set_offset_ms(offset(secs, micros, before, after));
    let verdicts: std::collections::HashMap<String, String> =
        items.get(2).map(Value::pairs).unwrap_or_default().into_iter().collect();
    let snapshot = gw.configuration();
    for e in &snapshot.endpoints {
        let name = &e.config.name;
        match verdicts.get(name).and_then(|v| messages::parse_verdict(v)) {
            Some((reason, until_ms)) => {
                let remaining = core.remaining(until_ms);
                if !remaining.is_zero() {
                    e.breaker.apply_open(name, reason, remaining);
                }
            }
            None => {
                // Closed elsewhere (a lost message), or Redis lost it: what this node learned
                // from the cluster goes with it; its own verdicts stay until they end.
                let view = e.breaker.view();
                if view.from_cluster && view.circuit != crate::breaker::Circuit::Closed {
                    e.breaker.apply_closed(name, false);
                }
            }
        }
    }
    for (protocol, name) in items.get(3).map(Value::pairs).unwrap_or_default() {
        if let Some(p) = Protocol::parse(&protocol) {
            mirror_current(gw, p, &name);
        }
    }
    for (protocol, generation) in items.get(4).map(Value::pairs).unwrap_or_default() {
        if let (Some(p), Ok(g)) = (Protocol::parse(&protocol), generation.parse()) {
            core.set_generation(p, g);
        }
    }
    let version = items.get(5).and_then(Value::int).unwrap_or(0);
    if core.seen_config.load(Ordering::Acquire) == NEVER_SEEN {
        core.seen_config.store(version, Ordering::Release);
    } else {
        config_version_seen(core, version);
    }
    Ok(())
}

/// The Redis server's clock minus this node's, from a reply's `TIME` and the node's clock read
/// before and after the call (the server read its clock somewhere in between: the midpoint).
pub fn offset(secs: i64, micros: i64, before_ms: i64, after_ms: i64) -> i64 {
    let server = secs * 1000 + micros / 1000;
    server - (before_ms + (after_ms - before_ms) / 2)
}

/// Redis is back (or was restarted empty): tell it what this node holds and still stands — open
/// breakers with their remaining time (a later deadline there wins), the current endpoints
/// where none is set, bindings made meanwhile where the session has none. Nothing expired is
/// sent.
async fn republish(gw: &dyn Node, cluster: &Cluster) -> Result<(), CallError> {
    let core = &cluster.core;
    let names = &core.names;
    let timeout = core.background_timeout();
    let snapshot = gw.configuration();
    for e in &snapshot.endpoints {
        let view = e.breaker.view();
        if view.circuit != crate::breaker::Circuit::Open || view.cooldown_remaining.is_zero() {
            continue;
        }
        let name = &e.config.name;
        let reason = view.open_reason.unwrap_or(crate::breaker::OpenReason::Broken);
        let keys = [names.verdicts(), names.half_open(), names.probe(name)];
        let args = [
            name.clone(),
            reason.as_str().to_string(),
            view.cooldown_remaining.as_millis().to_string(),
            names.channel(),
        ];
        core.redis.eval(&scripts::OPEN, &keys, &args, timeout).await?;
    }
    for p in Protocol::ALL {
        let Some(current) = gw.rotation().current(p) else { continue };
        let Some(e) = snapshot.endpoints.iter().find(|e| e.config.id == current) else { continue };
        let args = [p.as_str().to_string(), e.config.name.clone(), names.channel(), "1".to_string()];
        core.redis.eval(&scripts::SET_CURRENT, &[names.current()], &args, timeout).await?;
    }
    let name_of = |id: EndpointId| snapshot.endpoints.iter().find(|e| e.config.id == id).map(|e| e.config.name.clone());
    cluster.bindings.republish(name_of).await;
    tracing::info!(
        event = "cluster_republished",
        "re-published this node's open breakers, current endpoints and bindings"
    );
    Ok(())
}

async fn refresher(cluster: Arc<Cluster>) {
    let core = &cluster.core;
    let expiry = PROBE_CLAIM.as_millis().to_string();
    loop {
        tokio::time::sleep(PROBE_REFRESH).await;
        for endpoint in core.held_probes() {
            let keys = [core.names.probe(&endpoint)];
            let args = [core.node.clone(), expiry.clone()];
            if core.redis.eval(&scripts::REFRESH_PROBE, &keys, &args, core.background_timeout()).await.is_err() {
                core.fell_back(Op::Probe);
            }
        }
    }
}

/// Where the last seen config version is kept (`Core::seen_config`).
pub(crate) fn new_seen_config() -> AtomicI64 {
    AtomicI64::new(NEVER_SEEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_is_measured_from_the_midpoint_of_the_call() {
        // Server at 1_000.500 s; the node read 990 ms before and 1010 ms after: in step.
        assert_eq!(offset(1, 0, 990, 1010), 0);
        // A server 2.5 s ahead, microseconds rounded down to the millisecond.
        assert_eq!(offset(3, 500_999, 1_000, 1_002), 2_499);
        // And one behind.
        assert_eq!(offset(0, 0, 1_000, 1_000), -1_000);
    }
}
