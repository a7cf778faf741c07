//! Every Redis key and channel the cluster uses, in one place (docs/cluster.md has the table).
//!
//! - Everything starts with the prefix (`ccmesh`, or `--redis-prefix`), so several deployments
//!   can share one Redis.
//! - Breaker and routing state is small and read together by one poll: it shares the hash tag
//!   `{cluster}`, so on Redis Cluster it lives in one slot and a script may touch all of it.
//! - A client key's limit state is tagged by the key's name (`{key:NAME}`): one slot per key, so
//!   its one atomic admission script works on Redis Cluster, and keys spread over the slots.
//! - A session binding is one key on its own (no script touches two), its session id hashed: the
//!   id is the client's string, and a key name must stay short and plain.
//! - Endpoints are named, never numbered: ids are per database, names are what every node of a
//!   cluster shares.
//!
//! Pure, and nothing here carries a secret: client keys appear by name only.

use crate::protocol::Protocol;

#[derive(Clone, Debug)]
pub struct Names {
    prefix: String,
}

/// The prefix when none is given.
pub const DEFAULT_PREFIX: &str = "ccmesh";

impl Names {
    pub fn new(prefix: &str) -> Names {
        let prefix = prefix.trim_end_matches(':');
        Names { prefix: if prefix.is_empty() { DEFAULT_PREFIX.to_string() } else { prefix.to_string() } }
    }

    fn shared(&self, what: &str) -> String {
        format!("{}:{{cluster}}:{what}", self.prefix)
    }

    /// HASH endpoint name → `reason:open_until_ms` (Redis server time).
    pub fn verdicts(&self) -> String {
        self.shared("verdicts")
    }

    /// HASH endpoint name → half-open successes counted so far.
    pub fn half_open(&self) -> String {
        self.shared("half_open")
    }

    /// STRING: the node that holds an endpoint's half-open probe (with an expiry).
    pub fn probe(&self, endpoint: &str) -> String {
        self.shared(&format!("probe:{endpoint}"))
    }

    /// HASH protocol → the current endpoint's name.
    pub fn current(&self) -> String {
        self.shared("current")
    }

    /// HASH protocol → the round-robin counter.
    pub fn round_robin(&self) -> String {
        self.shared("round_robin")
    }

    /// HASH protocol → the generation of its session bindings (a manual switch bumps it).
    pub fn binding_generation(&self) -> String {
        self.shared("binding_generation")
    }

    /// STRING: the configuration version every admin write bumps.
    pub fn config_version(&self) -> String {
        self.shared("config_version")
    }

    /// The pub/sub channel of every change above.
    pub fn channel(&self) -> String {
        self.shared("events")
    }

    /// A client key's limit state (`requests`, `leases`, `tokens`, `spend`), tagged by the key.
    pub fn key(&self, client_key: &str, what: &str) -> String {
        format!("{}:{{key:{client_key}}}:{what}", self.prefix)
    }

    /// One session binding: (generation, protocol, client key name or `-`, session id).
    pub fn binding(&self, generation: i64, protocol: Protocol, client: &str, session: &str) -> String {
        format!("{}:binding:{generation}:{}:{client}:{}", self.prefix, protocol.as_str(), session_digest(session))
    }
}

/// 128 bits of the session id's SHA-256, in hex.
fn session_digest(session: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, session.as_bytes());
    digest.as_ref()[..16].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::slots::{hash_tag, key_slot};

    #[test]
    fn breaker_and_routing_state_share_one_slot() {
        let n = Names::new("ccmesh");
        let shared = [
            n.verdicts(),
            n.half_open(),
            n.probe("kimi"),
            n.current(),
            n.round_robin(),
            n.binding_generation(),
            n.config_version(),
        ];
        for key in &shared {
            assert!(key.starts_with("ccmesh:{cluster}:"), "{key}");
            assert_eq!(hash_tag(key.as_bytes()), b"cluster");
            assert_eq!(key_slot(key.as_bytes()), key_slot(b"cluster"), "one slot: one node serves it");
        }
        assert_eq!(n.probe("kimi"), "ccmesh:{cluster}:probe:kimi", "endpoints by name");
    }

    #[test]
    fn a_client_keys_state_shares_a_slot_of_its_own() {
        let n = Names::new("team-a:");
        let keys: Vec<String> = ["requests", "leases", "tokens", "spend"].iter().map(|w| n.key("alice", w)).collect();
        assert_eq!(keys[0], "team-a:{key:alice}:requests");
        assert!(keys.iter().all(|k| hash_tag(k.as_bytes()) == b"key:alice"));
        assert_ne!(hash_tag(n.key("bob", "requests").as_bytes()), hash_tag(keys[0].as_bytes()));
    }

    #[test]
    fn bindings_hash_the_session_and_carry_the_generation() {
        let n = Names::new("");
        let k = n.binding(3, Protocol::Claude, "alice", "a session id\twith anything");
        assert!(k.starts_with("ccmesh:binding:3:claude:alice:"), "{k}");
        let digest = k.rsplit(':').next().unwrap();
        assert_eq!(digest.len(), 32);
        assert!(digest.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(k, n.binding(4, Protocol::Claude, "alice", "a session id\twith anything"));
        assert_ne!(k, n.binding(3, Protocol::Claude, "alice", "another"));
    }
}
