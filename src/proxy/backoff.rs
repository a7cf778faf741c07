//! SPEC §2 step 5: what to do when no candidate can take the request right now.
//! Pure: takes the breakers' answers and the clock reading, returns a decision.

use std::time::{Duration, Instant};

use crate::breaker::{Denied, OpenReason};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhenBlocked {
    /// Every blocker is rate-limited and one frees up within the budget: wait until `until`
    /// (or until a breaker changes, e.g. a probe permit comes back), then choose again.
    Wait { until: Instant },
    /// Every blocker is rate-limited but none frees up within the budget: answer 429 at once.
    RateLimited { retry_after_secs: u64 },
    /// At least one blocker is broken: 502 (or the last upstream answer, if there was one).
    AllOpen,
}

/// Decide from the reasons each candidate refused (`denials`, one per candidate).
pub fn when_blocked(denials: &[Denied], now: Instant, budget_deadline: Instant) -> WhenBlocked {
    let rate_limited = |d: &Denied| match d {
        Denied::Open { reason, .. } | Denied::ProbeBusy { reason } => *reason == OpenReason::RateLimited,
    };
    if denials.is_empty() || !denials.iter().all(rate_limited) {
        return WhenBlocked::AllOpen;
    }
    let earliest = denials
        .iter()
        .filter_map(|d| match d {
            Denied::Open { until, .. } => Some(*until),
            Denied::ProbeBusy { .. } => None,
        })
        .min();
    let probe_in_flight = denials.iter().any(|d| matches!(d, Denied::ProbeBusy { .. }));
    match earliest {
        Some(until) if until <= budget_deadline => return WhenBlocked::Wait { until: until.max(now) },
        // A probe to a rate-limited endpoint is in flight: its outcome may admit us, so wait
        // for it while the budget lasts.
        _ if probe_in_flight && now < budget_deadline => return WhenBlocked::Wait { until: budget_deadline },
        _ => {}
    }
    let wait = earliest.map(|u| u.saturating_duration_since(now)).unwrap_or(Duration::ZERO);
    WhenBlocked::RateLimited { retry_after_secs: ceil_secs(wait).max(1) }
}

fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(reason: OpenReason, until: Instant) -> Denied {
        Denied::Open { reason, until }
    }

    #[test]
    fn waits_for_the_earliest_rate_limit_within_budget() {
        let now = Instant::now();
        let budget = now + Duration::from_secs(5);
        let d = [
            open(OpenReason::RateLimited, now + Duration::from_secs(4)),
            open(OpenReason::RateLimited, now + Duration::from_secs(2)),
        ];
        assert_eq!(when_blocked(&d, now, budget), WhenBlocked::Wait { until: now + Duration::from_secs(2) });
        // Exactly at the budget's end is still within it.
        let d = [open(OpenReason::RateLimited, budget)];
        assert_eq!(when_blocked(&d, now, budget), WhenBlocked::Wait { until: budget });
    }

    #[test]
    fn answers_429_with_rounded_up_retry_after_beyond_budget() {
        let now = Instant::now();
        let budget = now + Duration::from_secs(5);
        let d = [open(OpenReason::RateLimited, now + Duration::from_millis(7_200))];
        assert_eq!(when_blocked(&d, now, budget), WhenBlocked::RateLimited { retry_after_secs: 8 });
        // Zero budget: never wait.
        let d = [open(OpenReason::RateLimited, now + Duration::from_millis(300))];
        assert_eq!(when_blocked(&d, now, now), WhenBlocked::RateLimited { retry_after_secs: 1 });
    }

    #[test]
    fn any_broken_blocker_means_502() {
        let now = Instant::now();
        let budget = now + Duration::from_secs(5);
        let d = [
            open(OpenReason::RateLimited, now + Duration::from_secs(1)),
            open(OpenReason::Broken, now + Duration::from_secs(60)),
        ];
        assert_eq!(when_blocked(&d, now, budget), WhenBlocked::AllOpen);
        assert_eq!(
            when_blocked(&[Denied::ProbeBusy { reason: OpenReason::Broken }], now, budget),
            WhenBlocked::AllOpen
        );
        assert_eq!(when_blocked(&[], now, budget), WhenBlocked::AllOpen);
    }

    #[test]
    fn a_busy_rate_limited_probe_is_waited_for_until_the_budget_ends() {
        let now = Instant::now();
        let budget = now + Duration::from_secs(5);
        let d = [
            Denied::ProbeBusy { reason: OpenReason::RateLimited },
            open(OpenReason::RateLimited, now + Duration::from_secs(30)),
        ];
        assert_eq!(when_blocked(&d, now, budget), WhenBlocked::Wait { until: budget });
        assert_eq!(when_blocked(&d, budget, budget), WhenBlocked::RateLimited { retry_after_secs: 25 });
    }
}
