//! Client keys (SPEC §12, §15.10): who may use the gateway, for which models and endpoints, how
//! fast and for how many dollars. docs/keys.md is the user's view; this is the code's.
//!
//! - `key`: the key (`ClientKey`), its limits and the validation of every write.
//! - `secret`: minting (`ccm-` + base62 of 32 random bytes), hashing (SHA-256: the only form
//!   stored), the prefix lists show.
//! - `admit`: the pure decision at the one enforcement point — authentication (401) and
//!   authorization (403) — and the native errors of every refusal.
//! - `limiter`: rate limits, concurrency leases and budgets behind the `Limiter` trait (one
//!   atomic check-and-increment per request; in memory now).
//!
//! The shell: `proxy::handle` (every `/v1/*` path) and `proxy::models` (`GET /v1/models`) call
//! `admit` and the limiter before routing; the request's `Trail` carries the `KeyCharge` and
//! settles it with the record's own cost when the request ends; `admin/keys.rs` serves
//! `/api/keys` and `/api/me`; the keys live in the configuration snapshot, so a request looks
//! its key up in memory.

pub mod admit;
pub mod key;
pub mod limiter;
pub mod secret;

use std::sync::Arc;
use std::time::UNIX_EPOCH;

pub use admit::{Admission, KeySet, Refusal};
pub use key::{ClientKey, KeyDraft, KeyLimits};
pub use limiter::{KeyUsage, Lease, LeaseId, Limit, LimitKind, Limiter, MemoryLimiter};

use crate::clock::Clock;
use crate::observe::record::Tokens;

/// Wall-clock unix milliseconds: the time every window and budget is counted in (a cluster's
/// shared limiter counts in its server's time, which a monotonic clock could not be compared
/// with).
pub fn now_ms(clock: &dyn Clock) -> i64 {
    clock.wall().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// What an admitted request owes its key when it ends: its cost, charged by `settle` with the
/// record's own numbers, and its concurrency lease, given back when this is dropped.
pub struct KeyCharge {
    lease: Lease,
    clock: Arc<dyn Clock>,
}

impl KeyCharge {
    pub fn new(lease: Lease, clock: Arc<dyn Clock>) -> KeyCharge {
        KeyCharge { lease, clock }
    }

    pub fn key(&self) -> &str {
        self.lease.key()
    }

    /// Charge the request's tokens (input + output, for `tpm`) and cost (for the budgets).
    pub fn settle(self, tokens: &Tokens, cost_usd: Option<f64>) {
        let n = tokens.input.unwrap_or(0).saturating_add(tokens.output.unwrap_or(0));
        let usd = cost_usd.filter(|c| c.is_finite() && *c > 0.0).unwrap_or(0.0);
        if n > 0 || usd > 0.0 {
            self.lease.limiter().charge(self.lease.key(), n, usd, now_ms(&*self.clock));
        }
    }
}

impl std::fmt::Debug for KeyCharge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyCharge").field("lease", &self.lease).finish()
    }
}
