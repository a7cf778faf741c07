//! The connection cap as an operator sees it. Past `limits.max_connections` (or out of file
//! descriptors) the gateway answers a new connection's requests with 503, all but `/health` and
//! `/api/status`: load is being shed, and whoever runs the gateway should learn it from a metric
//! and a log line, not from clients' complaints. The connections that came past the cap are
//! counted, and each episode of running at the cap is logged once when it begins and once when
//! the gateway has room again, not once per connection, so a gateway hovering at its cap does
//! not flood its log.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Whether `open` connections leave room again after an episode past a cap of `max`: a tenth
/// of the cap free, and at least one connection. The margin is what keeps a gateway at its cap
/// from ending and beginning an episode with every connection: one that came past the cap is
/// answered and closed, which by itself only brings the count back to the cap.
fn has_room_again(open: usize, max: usize) -> bool {
    open + (max / 10).max(1) <= max
}

/// The count of connections past the cap, and whether an episode is on.
#[derive(Default)]
pub struct CapWatch {
    past_cap: AtomicU64,
    reached: AtomicBool,
}

impl CapWatch {
    /// A connection came past the cap: counted. True when it begins an episode (log it).
    pub fn past_cap(&self) -> bool {
        self.past_cap.fetch_add(1, Ordering::Relaxed);
        !self.reached.swap(true, Ordering::AcqRel)
    }

    /// A connection closed, leaving `open` under a cap of `max`: true when this ends an episode
    /// (log it). Only one of the closes that find room again ends it.
    pub fn closed(&self, open: usize, max: usize) -> bool {
        has_room_again(open, max) && self.reached.load(Ordering::Relaxed) && self.reached.swap(false, Ordering::AcqRel)
    }

    /// Connections that came past the cap since the gateway started.
    pub fn connections_past_cap(&self) -> u64 {
        self.past_cap.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_again_is_a_tenth_of_the_cap_free_and_at_least_one_connection() {
        assert!(has_room_again(3687, 4096));
        assert!(!has_room_again(3688, 4096));
        assert!(has_room_again(90, 100));
        assert!(!has_room_again(91, 100));
        // Under ten, one connection free is room.
        assert!(has_room_again(2, 3));
        assert!(!has_room_again(3, 3));
        assert!(has_room_again(0, 1));
        assert!(!has_room_again(1, 1));
        assert!(!has_room_again(0, 0));
    }

    #[test]
    fn an_episode_is_told_once_at_its_start_and_once_at_its_end() {
        let watch = CapWatch::default();
        assert!(!watch.closed(0, 100), "no episode to end");
        assert!(watch.past_cap(), "the first connection past the cap begins one");
        assert!(!watch.past_cap(), "the next ones are counted only");
        assert!(!watch.past_cap());
        assert_eq!(watch.connections_past_cap(), 3);
        assert!(!watch.closed(100, 100), "at the cap is not room again");
        assert!(!watch.closed(91, 100));
        assert!(watch.closed(90, 100), "a tenth free ends it");
        assert!(!watch.closed(80, 100), "once");
        assert!(watch.past_cap(), "a new episode");
        assert_eq!(watch.connections_past_cap(), 4, "the count goes on across episodes");
    }
}
