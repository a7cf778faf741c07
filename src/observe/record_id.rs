//! Request record ids: unique across every gateway writing to one database, and ordered by time.
//!
//! An id is the start time (unix ms, 12 hex digits), this process's node number (6 hex digits)
//! and a process-wide counter (8 hex digits). Within a process the counter makes ids unique;
//! across processes the node number does. A gateway on a shared PostgreSQL database takes its
//! node number from a database sequence at start (`store::postgres`), so no two gateways there
//! ever hold the same one; otherwise it is random, which only a second process on the same
//! SQLite file could collide with — and the data dir's lock keeps that from happening.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Node numbers have 24 bits.
const NODE_MASK: u32 = 0x00ff_ffff;

/// Zero until set or first used; then this process's number.
static NODE: AtomicU32 = AtomicU32::new(0);
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Use `n` (its low 24 bits) as this process's node number from now on.
pub fn set_node(n: u64) {
    // The top bit marks "set": a node number may be zero.
    NODE.store(((n as u32) & NODE_MASK) | 0x8000_0000, Ordering::Relaxed);
}

fn node() -> u32 {
    let n = NODE.load(Ordering::Relaxed);
    if n != 0 {
        return n & NODE_MASK;
    }
    let random = random_node();
    // Another thread may have set it meanwhile: the first value stored wins.
    match NODE.compare_exchange(0, random | 0x8000_0000, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => random,
        Err(current) => current & NODE_MASK,
    }
}

fn random_node() -> u32 {
    use ring::rand::SecureRandom;
    let mut buf = [0u8; 4];
    // The system RNG does not fail where ccmesh runs; a zero node only matters on a shared
    // database, where the node number comes from the database instead.
    let _ = ring::rand::SystemRandom::new().fill(&mut buf);
    u32::from_le_bytes(buf) & NODE_MASK
}

/// A new id for a request that started at `unix_ms`.
pub fn new_id(unix_ms: u64) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed) & 0xffff_ffff;
    let mut id = String::with_capacity(26);
    push_hex(&mut id, unix_ms, 12);
    push_hex(&mut id, u64::from(node()), 6);
    push_hex(&mut id, n, 8);
    id
}

/// The low `digits` hex digits of `n`, zero-padded (what `{n:0digits$x}` gives for values that
/// fit), without `format!` on the request path. (Written to a byte buffer and appended at once,
/// the digits cost more: the buffer's UTF-8 check outweighs the pushes it saves.)
pub fn push_hex(out: &mut String, n: u64, digits: u32) {
    for shift in (0..digits).rev() {
        let nibble = ((n >> (shift * 4)) & 0xf) as u32;
        out.push(char::from_digit(nibble, 16).unwrap_or('0'));
    }
}

/// How many hex digits `n` has (`{n:x}`'s length; one for zero).
pub fn hex_len(n: u64) -> u32 {
    (16 - n.leading_zeros() / 4).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn hex_written_by_hand_is_what_format_writes() {
        for n in [0u64, 1, 0xf, 0x10, 0xfff_ffff, 0x1_0000_0000, 1_764_820_000, u64::MAX >> 4, u64::MAX] {
            let mut plain = String::new();
            push_hex(&mut plain, n, hex_len(n));
            assert_eq!(plain, format!("{n:x}"));
            let mut padded = String::new();
            push_hex(&mut padded, n, hex_len(n).max(8));
            assert_eq!(padded, format!("{n:08x}"));
        }
    }

    /// One test, because the node number is process-wide.
    #[test]
    fn ids_are_time_ordered_unique_and_carry_the_node() {
        set_node(0xabcdef);
        let a = new_id(1_700_000_000_000);
        let b = new_id(1_700_000_000_000);
        let c = new_id(1_700_000_000_001);
        assert!(a < b && b < c, "{a} {b} {c}");
        assert_eq!(a.len(), 26);
        assert!(a.starts_with(&format!("{:012x}abcdef", 1_700_000_000_000u64)), "{a}");
        // Ids made by many threads at once never repeat.
        let all: Vec<String> = std::thread::scope(|s| {
            let handles: Vec<_> =
                (0..4).map(|_| s.spawn(|| (0..2_000).map(|_| new_id(1)).collect::<Vec<_>>())).collect();
            handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(all.iter().collect::<HashSet<_>>().len(), all.len());

        // Two processes at the same millisecond and the same counter value: only the node
        // differs, and it is in the id.
        let at = 1_700_000_000_000;
        let id = |node: u64, n: u64| {
            let mut s = String::new();
            push_hex(&mut s, at, 12);
            push_hex(&mut s, node & u64::from(NODE_MASK), 6);
            push_hex(&mut s, n, 8);
            s
        };
        assert_ne!(id(1, 0), id(2, 0));
        set_node(0x1_000_002);
        assert_eq!(&new_id(at)[12..18], "000002", "only the low 24 bits are kept");
    }

    #[test]
    fn hex_is_written_as_format_would() {
        for (n, digits) in [(0u64, 8), (0xdead_beef, 8), (1_700_000_000_000, 12), (15, 3), (u64::MAX, 16), (7, 1)] {
            let mut out = String::from("id-");
            push_hex(&mut out, n, digits);
            assert_eq!(out, format!("id-{n:0width$x}", width = digits as usize));
        }
        let mut low = String::new();
        push_hex(&mut low, 0x1234_5678, 4);
        assert_eq!(low, "5678", "only the low digits are written");
    }
}
