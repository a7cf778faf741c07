//! Session bindings shared by every node (SPEC §12, §13): one Redis key per binding, holding the
//! endpoint's name, with the binding's hour as its expiry (`GETEX … PX` refreshes it on use). A
//! manual switch drops a protocol's bindings by moving to its next generation: old keys are no
//! longer looked at and expire on their own.
//!
//! A request looks its session up in Redis within the short timeout; binding and unbinding are
//! queued for the background. While Redis is away the node binds in memory, and re-publishes
//! those bindings when it is back — only where Redis has none for the session (`SET NX`), so a
//! newer binding made by another node is not overwritten.

use std::sync::Arc;

use super::fallback::Op;
use super::resp::Value;
use super::{Core, Work};
use crate::affinity::{Affinity, BINDING_TTL_MS, MemoryBindings, SessionBindings, SessionKey};
use crate::endpoint::EndpointId;
use crate::protocol::Protocol;
use crate::snapshot::Snapshot;

pub struct ClusterBindings {
    core: Arc<Core>,
    /// What this node bound while Redis did not answer.
    local: MemoryBindings,
}

impl ClusterBindings {
    pub fn new(core: Arc<Core>) -> ClusterBindings {
        ClusterBindings { core, local: MemoryBindings::new() }
    }

    fn redis_key(&self, key: &SessionKey) -> String {
        self.core.names.binding(self.core.generation(key.protocol), key.protocol, &key.client, &key.session)
    }

    /// A request's session, looked up cluster-wide (refreshing its binding). `this` is these
    /// bindings as the gateway holds them.
    pub async fn look_up(this: &Arc<ClusterBindings>, key: SessionKey, snapshot: &Snapshot) -> Affinity {
        let command = ["GETEX".to_string(), this.redis_key(&key), "PX".to_string(), BINDING_TTL_MS.to_string()];
        let bound = match this.core.redis.call(&command, this.core.timeout).await {
            Ok(Value::Bulk(name)) => snapshot.find(&String::from_utf8_lossy(&name)).map(|e| e.config.id),
            Ok(_) => this.local.bound(&key, this.core.now_ms()),
            Err(_) => {
                this.core.fell_back(Op::Binding);
                this.local.bound(&key, this.core.now_ms())
            }
        };
        Affinity::found(this.clone(), key, bound, this.core.clock.clone())
    }

    /// The background's half of `bind`; `endpoint` is the name.
    pub(crate) async fn bind_shared(&self, key: &SessionKey, endpoint: EndpointId, name: &str) {
        let command =
            ["SET".to_string(), self.redis_key(key), name.to_string(), "PX".into(), BINDING_TTL_MS.to_string()];
        if self.core.redis.call(&command, self.core.background_timeout()).await.is_err() {
            self.core.fell_back(Op::Binding);
            self.local.bind(key, endpoint, self.core.now_ms());
        }
    }

    pub(crate) async fn unbind_shared(&self, key: &SessionKey, name: &str) {
        let keys = [self.redis_key(key)];
        let args = [name.to_string()];
        let timeout = self.core.background_timeout();
        if self.core.redis.eval(&super::scripts::UNBIND, &keys, &args, timeout).await.is_err() {
            self.core.fell_back(Op::Binding);
        }
    }

    pub(crate) async fn clear_shared(&self, protocol: Protocol) {
        let keys = [self.core.names.binding_generation()];
        let args = [protocol.as_str().to_string(), self.core.names.channel()];
        let timeout = self.core.background_timeout();
        match self.core.redis.eval(&super::scripts::NEXT_BINDING_GENERATION, &keys, &args, timeout).await {
            Ok(v) => {
                if let Some(g) = v.int() {
                    self.core.set_generation(protocol, g);
                }
            }
            Err(_) => self.core.fell_back(Op::Binding),
        }
    }

    /// Redis is back: what was bound meanwhile goes there, unless the session has a binding there.
    pub(crate) async fn republish(&self, name_of: impl Fn(EndpointId) -> Option<String>) {
        let now = self.core.now_ms();
        for (key, endpoint, expires) in self.local.drain(now) {
            let Some(name) = name_of(endpoint) else { continue };
            let left = (expires - now).max(1).to_string();
            let command = ["SET".to_string(), self.redis_key(&key), name, "PX".into(), left, "NX".into()];
            if self.core.redis.call(&command, self.core.background_timeout()).await.is_err() {
                self.local.bind(&key, endpoint, now);
            }
        }
    }
}

impl SessionBindings for ClusterBindings {
    /// Only what this node bound while Redis was away (the shared look-up is `look_up`).
    fn bound(&self, key: &SessionKey, now_ms: i64) -> Option<EndpointId> {
        self.local.bound(key, now_ms)
    }

    fn bind(&self, key: &SessionKey, endpoint: EndpointId, now_ms: i64) {
        if self.core.redis.problem().is_some() {
            self.local.bind(key, endpoint, now_ms);
        } else {
            self.core.enqueue(Work::Bind { key: key.clone(), endpoint });
        }
    }

    fn unbind(&self, key: &SessionKey, endpoint: EndpointId) {
        self.local.unbind(key, endpoint);
        self.core.enqueue(Work::Unbind { key: key.clone(), endpoint });
    }

    fn clear_protocol(&self, protocol: Protocol) {
        self.local.clear_protocol(protocol);
        self.core.enqueue(Work::ClearBindings { protocol });
    }
}
