//! Redis Cluster's routing, the pure part: which of the 16384 slots a key lives in, what a
//! `-MOVED` / `-ASK` reply says, and the map of slot → node a client learns from those replies.
//!
//! A key's slot is CRC16 (XMODEM) of its hash tag — the part between the first `{` and the next
//! `}`, when that is not empty; else the whole key — modulo 16384. Every key one call sends
//! carries the same tag (`names.rs`), so one call is one slot, and one node serves it.
//!
//! On a standalone Redis none of this matters: it never redirects, the map stays empty, and every
//! call goes to the one server.

use std::collections::HashMap;
use std::sync::Arc;

/// How many slots Redis Cluster splits keys into.
pub const SLOTS: usize = 16384;

/// Distinct nodes the map remembers; past it the map starts afresh (a cluster that keeps
/// changing addresses is relearned, and memory stays bounded).
const MAX_NODES: usize = 1024;

/// One Redis server: where to connect. Shown as `host:port` (`[v6]:port`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    pub host: String,
    pub port: u16,
}

impl std::fmt::Display for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// CRC16/XMODEM (polynomial 0x1021, initial value 0, no reflection), the checksum the Redis
/// Cluster specification hashes keys with, one table lookup per byte.
pub fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &b| (crc << 8) ^ CRC16_TABLE[usize::from((crc >> 8) as u8 ^ b)])
}

/// The CRC of every byte value, computed at compile time from the polynomial.
const CRC16_TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// The part of a key Redis Cluster hashes: between the first `{` and the next `}`, when that is
/// not empty; else the whole key.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{')
        && let Some(len) = key[open + 1..].iter().position(|&b| b == b'}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

/// The slot a key lives in.
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key)) % SLOTS as u16
}

/// Commands that name no key: they go to the seed node.
const UNKEYED: [&str; 12] =
    ["PING", "TIME", "ECHO", "INFO", "CLUSTER", "AUTH", "SELECT", "HELLO", "ASKING", "PUBLISH", "SUBSCRIBE", "SCRIPT"];

/// The key a command is routed by: the first key of `EVAL`/`EVALSHA` (the keys of one call share
/// a slot), none for the commands above, else the first argument (`GET k`, `HINCRBY k …`).
pub fn command_key<A: AsRef<[u8]>>(args: &[A]) -> Option<&[u8]> {
    let name = args.first()?.as_ref();
    let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
    if is("EVAL") || is("EVALSHA") {
        let numkeys: usize = std::str::from_utf8(args.get(2)?.as_ref()).ok()?.parse().ok()?;
        return if numkeys > 0 { args.get(3).map(AsRef::as_ref) } else { None };
    }
    if UNKEYED.iter().any(|n| is(n)) {
        return None;
    }
    args.get(1).map(AsRef::as_ref)
}

/// What a redirecting error reply says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Redirect {
    /// The slot lives on `node` now: remember it, and send there from now on.
    Moved { slot: u16, node: Node },
    /// The slot is migrating: this one key is on `node`; ask there once (after `ASKING`), and
    /// keep the map as it is.
    Ask { slot: u16, node: Node },
}

impl Redirect {
    pub fn node(&self) -> &Node {
        match self {
            Redirect::Moved { node, .. } | Redirect::Ask { node, .. } => node,
        }
    }
}

/// Reads `MOVED <slot> <host>:<port>` / `ASK <slot> <host>:<port>` (the error's text, without the
/// `-`). An empty host means the host of the node that answered (`replied`), as Redis says when
/// it does not know its own address. Anything else is not a redirect.
pub fn parse_redirect(message: &str, replied: &Node) -> Option<Redirect> {
    let mut words = message.split_ascii_whitespace();
    let kind = words.next()?;
    let slot: u16 = words.next()?.parse().ok().filter(|s| usize::from(*s) < SLOTS)?;
    let (host, port) = words.next()?.rsplit_once(':')?;
    let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let host = if host.is_empty() { replied.host.clone() } else { host.to_string() };
    let node = Node { host, port };
    match kind {
        "MOVED" => Some(Redirect::Moved { slot, node }),
        "ASK" => Some(Redirect::Ask { slot, node }),
        _ => None,
    }
}

/// Which node serves each slot, as far as redirects have told.
pub struct SlotMap {
    /// Per slot: 0 when unknown, else the index + 1 of its node in `nodes`.
    owners: Box<[u16]>,
    nodes: Vec<Arc<Node>>,
    index: HashMap<Arc<Node>, u16>,
}

impl Default for SlotMap {
    fn default() -> SlotMap {
        SlotMap { owners: vec![0; SLOTS].into_boxed_slice(), nodes: Vec::new(), index: HashMap::new() }
    }
}

impl SlotMap {
    /// Nothing learned yet (always, on a standalone Redis).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn owner(&self, slot: u16) -> Option<Arc<Node>> {
        let at = usize::from(*self.owners.get(usize::from(slot))?);
        at.checked_sub(1).map(|i| self.nodes[i].clone())
    }

    /// `slot` lives on `node` now.
    pub fn learn(&mut self, slot: u16, node: &Node) {
        if usize::from(slot) >= SLOTS {
            return;
        }
        let at = match self.index.get(node) {
            Some(at) => *at,
            None => {
                if self.nodes.len() >= MAX_NODES {
                    *self = SlotMap::default();
                }
                let node = Arc::new(node.clone());
                self.nodes.push(node.clone());
                let at = self.nodes.len() as u16;
                self.index.insert(node, at);
                at
            }
        };
        self.owners[usize::from(slot)] = at;
    }

    /// `node` failed: its slots are unknown again, so the next calls ask the seed, which
    /// redirects to whoever serves them now (a replica promoted in its place).
    pub fn forget(&mut self, node: &Node) {
        if let Some(at) = self.index.get(node).copied() {
            self.owners.iter_mut().filter(|o| **o == at).for_each(|o| *o = 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: u16) -> Node {
        Node { host: host.into(), port }
    }

    #[test]
    fn crc16_is_xmodem() {
        // The check value of CRC16/XMODEM, the one the Redis Cluster specification gives.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b""), 0);
        assert_eq!(crc16(b"A"), 0x58E5);
        // Table-driven equals bit by bit, for every single byte.
        for b in 0..=255u8 {
            let mut crc = u16::from(b) << 8;
            for _ in 0..8 {
                crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
            }
            assert_eq!(crc16(&[b]), crc, "byte {b}");
        }
    }

    #[test]
    fn slots_of_known_keys() {
        // 0x31C3 is 12739, below 16384: the slot is the CRC itself.
        assert_eq!(key_slot(b"123456789"), 12739);
        // Values `CLUSTER KEYSLOT` gives.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b""), 0);
        assert!((0..5000).all(|i| usize::from(key_slot(format!("k{i}").as_bytes())) < SLOTS));
    }

    #[test]
    fn hash_tags_follow_redis_cluster_rules() {
        assert_eq!(hash_tag(b"a{b}c"), b"b");
        assert_eq!(hash_tag(b"a{}c{d}"), b"a{}c{d}", "an empty tag hashes the whole key");
        assert_eq!(hash_tag(b"{}"), b"{}");
        assert_eq!(hash_tag(b"plain"), b"plain");
        assert_eq!(hash_tag(b"{x}{y}"), b"x", "the first tag only");
        assert_eq!(hash_tag(b"a{b"), b"a{b", "an unclosed brace is no tag");
        assert_eq!(hash_tag(b"a}b{c}"), b"c", "a closing brace before the first opening one does not count");
        assert_eq!(hash_tag(b"{{x}}"), b"{x", "from the first opening brace to the next closing one");
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"{user1000}.followers"));
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"), "an empty first tag: the whole key");
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
    }

    #[test]
    fn commands_are_routed_by_their_first_key() {
        assert_eq!(command_key(&["HINCRBY", "ccmesh:{cluster}:rr", "claude", "1"]), Some(&b"ccmesh:{cluster}:rr"[..]));
        assert_eq!(command_key(&["getex", "k", "PX", "1"]), Some(&b"k"[..]));
        assert_eq!(command_key(&["EVALSHA", "abc", "2", "k1", "k2", "arg"]), Some(&b"k1"[..]));
        assert_eq!(command_key(&["EVAL", "return 1", "0", "arg"]), None, "a script without keys");
        assert_eq!(command_key(&["EVAL", "return 1", "x"]), None);
        assert_eq!(command_key(&["EVAL", "return 1", "1"]), None, "a key promised but not sent");
        for unkeyed in [&["PING"][..], &["TIME"], &["ping"], &["PUBLISH", "ch", "m"], &["CLUSTER", "INFO"]] {
            assert_eq!(command_key(unkeyed), None, "{unkeyed:?}");
        }
        assert_eq!(command_key::<&str>(&[]), None);
    }

    #[test]
    fn redirects_are_read() {
        let seed = node("10.0.0.1", 7000);
        assert_eq!(
            parse_redirect("MOVED 3999 127.0.0.1:6381", &seed),
            Some(Redirect::Moved { slot: 3999, node: node("127.0.0.1", 6381) })
        );
        assert_eq!(
            parse_redirect("ASK 12739 redis-2.internal:7001", &seed),
            Some(Redirect::Ask { slot: 12739, node: node("redis-2.internal", 7001) })
        );
        assert_eq!(
            parse_redirect("MOVED 1 ::1:7002", &seed).unwrap().node(),
            &node("::1", 7002),
            "IPv6, as Redis writes it"
        );
        assert_eq!(parse_redirect("MOVED 1 [::1]:7002", &seed).unwrap().node(), &node("::1", 7002));
        assert_eq!(
            parse_redirect("MOVED 5 :7003", &seed).unwrap().node(),
            &node("10.0.0.1", 7003),
            "no host: the one that answered"
        );
        for not in [
            "ERR unknown command",
            "MOVED",
            "MOVED x 1.2.3.4:1",
            "MOVED 16384 1.2.3.4:1",
            "MOVED 1 1.2.3.4",
            "MOVED 1 1.2.3.4:0",
            "MOVED 1 1.2.3.4:99999",
            "NOSCRIPT No matching script",
            "CLUSTERDOWN The cluster is down",
        ] {
            assert_eq!(parse_redirect(not, &seed), None, "{not}");
        }
        assert_eq!(node("::1", 1).to_string(), "[::1]:1");
        assert_eq!(node("h", 2).to_string(), "h:2");
    }

    #[test]
    fn the_map_remembers_what_moved_redirects_say() {
        let mut map = SlotMap::default();
        assert!(map.is_empty());
        assert_eq!(map.owner(0), None);
        map.learn(12739, &node("127.0.0.1", 7001));
        map.learn(0, &node("127.0.0.1", 7000));
        map.learn(16383, &node("127.0.0.1", 7001));
        assert!(!map.is_empty());
        assert_eq!(map.owner(12739).as_deref(), Some(&node("127.0.0.1", 7001)));
        assert_eq!(map.owner(16383).as_deref(), Some(&node("127.0.0.1", 7001)));
        assert_eq!(map.owner(0).as_deref(), Some(&node("127.0.0.1", 7000)));
        assert_eq!(map.owner(1), None);
        assert_eq!(map.nodes.len(), 2, "a node is stored once");
        // A failover: the slot moves.
        map.learn(12739, &node("127.0.0.1", 7005));
        assert_eq!(map.owner(12739).as_deref(), Some(&node("127.0.0.1", 7005)));
        // A node that failed is forgotten: its slots are asked of the seed again.
        map.forget(&node("127.0.0.1", 7001));
        assert_eq!(map.owner(16383), None);
        assert_eq!(map.owner(0).as_deref(), Some(&node("127.0.0.1", 7000)));
        map.forget(&node("never-heard-of", 1));
        // Out of range is ignored, never a panic.
        map.learn(16384, &node("x", 1));
        assert_eq!(map.owner(16384), None);
    }

    #[test]
    fn the_map_stays_bounded_however_many_nodes_it_hears_of() {
        let mut map = SlotMap::default();
        for i in 0..(MAX_NODES as u16 + 10) {
            map.learn(i, &node("10.0.0.1", 10_000 + i));
        }
        assert!(map.nodes.len() <= MAX_NODES);
        let last = MAX_NODES as u16 + 9;
        assert_eq!(map.owner(last).as_deref(), Some(&node("10.0.0.1", 10_000 + last)));
    }
}
