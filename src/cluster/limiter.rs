//! Client-key limits and budgets shared by every node (SPEC §13, §15.10): one script per
//! admission (`scripts::ADMIT`: every limit checked, then the request counted and its lease
//! taken, in the Redis server's time), one per charge, one per usage read. Each client key's
//! state is hash-tagged by its name, so it sits in one slot of a Redis Cluster.
//!
//! The node keeps its own count too (`MemoryLimiter`, every admission counted there without a
//! check): it is what the node falls back to when Redis does not answer in time — limits then
//! hold per node — and what it shows at scrape time. A lease is named `NODE:ID` in Redis, so a
//! crashed node's leases are its own and expire with their TTL.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::fallback::Op;
use super::resp::Value;
use super::{Core, Work, scripts};
use crate::keys::{ClientKey, KeyLimits, KeyUsage, Lease, LeaseId, Limit, LimitKind, Limiter, MemoryLimiter};

pub struct ClusterLimiter {
    core: Arc<Core>,
    local: MemoryLimiter,
    next: AtomicU64,
}

impl ClusterLimiter {
    pub fn new(core: Arc<Core>) -> ClusterLimiter {
        ClusterLimiter { core, local: MemoryLimiter::new(), next: AtomicU64::new(0) }
    }

    fn keys(&self, key: &str) -> Vec<String> {
        ["requests", "leases", "tokens", "spend"].iter().map(|w| self.core.names.key(key, w)).collect()
    }

    fn member(&self, id: LeaseId) -> String {
        format!("{}:{id}", self.core.node)
    }

    /// Admit a request of `key` cluster-wide (its lease in the guard), or say which limit it hit.
    /// `limiter` is this, as the gateway holds it (the lease gives itself back through it).
    pub async fn admit(
        &self,
        limiter: &Arc<dyn Limiter>,
        key: &ClientKey,
        now_ms: i64,
        lease_ttl_ms: u64,
    ) -> Result<Lease, Limit> {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let args = scripts::admit_args(None, &self.member(id), lease_ttl_ms, &key.limits);
        let shared = self.core.redis.eval(&scripts::ADMIT, &self.keys(&key.name), &args, self.core.timeout).await;
        match shared.map(|v| admission(&v)) {
            Ok(Some(Ok(()))) => {
                // Counted here too, unchecked: the node's own share, for a later fallback.
                let _ = self.local.admit_as(&key.name, &KeyLimits::default(), now_ms, lease_ttl_ms, id);
            }
            Ok(Some(Err(limit))) => return Err(limit),
            Ok(None) | Err(_) => {
                self.core.fell_back(Op::Admit);
                self.local.admit_as(&key.name, &key.limits, now_ms, lease_ttl_ms, id)?;
            }
        }
        Ok(Lease::new(limiter.clone(), &key.name, id))
    }

    /// A key's use of each window, cluster-wide (this node's own when Redis does not answer).
    pub async fn usage_shared(&self, key: &str, now_ms: i64) -> KeyUsage {
        let args = [String::from("0")];
        let reply = self.core.redis.eval(&scripts::USAGE, &self.keys(key), &args, self.core.background_timeout()).await;
        match reply.ok().and_then(|v| usage(&v)) {
            Some(u) => u,
            None => {
                self.core.fell_back(Op::Usage);
                self.local.usage(key, now_ms)
            }
        }
    }

    /// The background's half of `release`.
    pub(crate) async fn release_shared(&self, key: &str, member: &str) {
        let lease_key = self.core.names.key(key, "leases");
        let command = ["ZREM", lease_key.as_str(), member];
        if self.core.redis.call(&command, self.core.background_timeout()).await.is_err() {
            // The lease expires by itself in Redis.
            self.core.fell_back(Op::Charge);
        }
    }

    /// The background's half of `charge`.
    pub(crate) async fn charge_shared(&self, key: &str, tokens: u64, usd: f64) {
        let args = scripts::charge_args(None, tokens, usd);
        let reply =
            self.core.redis.eval(&scripts::CHARGE, &self.keys(key), &args, self.core.background_timeout()).await;
        if reply.is_err() {
            self.core.fell_back(Op::Charge);
        }
    }
}

impl Limiter for ClusterLimiter {
    /// Without Redis: this node's own check-and-count.
    fn admit(&self, key: &str, limits: &KeyLimits, now_ms: i64, lease_ttl_ms: u64) -> Result<LeaseId, Limit> {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.local.admit_as(key, limits, now_ms, lease_ttl_ms, id)
    }

    fn release(&self, key: &str, lease: LeaseId) {
        self.local.release(key, lease);
        self.core.enqueue(Work::Release { key: key.to_string(), member: self.member(lease) });
    }

    fn charge(&self, key: &str, tokens: u64, usd: f64, at_ms: i64) {
        self.local.charge(key, tokens, usd, at_ms);
        self.core.enqueue(Work::Charge { key: key.to_string(), tokens, usd });
    }

    fn usage(&self, key: &str, now_ms: i64) -> KeyUsage {
        self.local.usage(key, now_ms)
    }

    fn retain(&self, keys: &[String]) {
        self.local.retain(keys);
    }

    fn seed(&self, key: &str, tokens: u64, usd: f64, at_ms: i64) {
        self.local.charge(key, tokens, usd, at_ms);
    }
}

/// `scripts::ADMIT`'s answer: admitted, or the limit hit (`None`: not an answer it gives).
pub fn admission(v: &Value) -> Option<Result<(), Limit>> {
    let items = v.items();
    match items.first()?.int()? {
        1 => Some(Ok(())),
        0 => {
            let kind = match items.get(1)?.text()?.as_str() {
                "rpm" => LimitKind::Rpm,
                "tpm" => LimitKind::Tpm,
                "concurrency" => LimitKind::Concurrency,
                "usd_per_day" => LimitKind::UsdPerDay,
                "usd_per_5h" => LimitKind::UsdPer5h,
                "usd_per_month" => LimitKind::UsdPerMonth,
                _ => return None,
            };
            let resets = items.get(5)?.text()?;
            Some(Err(Limit {
                kind,
                limit: items.get(2)?.float()?,
                used: items.get(3)?.float()?,
                retry_after_ms: u64::try_from(items.get(4)?.int()?).unwrap_or(0),
                resets_at_ms: resets.parse().ok(),
            }))
        }
        _ => None,
    }
}

/// `scripts::USAGE`'s answer.
pub fn usage(v: &Value) -> Option<KeyUsage> {
    let i = v.items();
    let int = |n: usize| i.get(n).and_then(Value::int);
    let float = |n: usize| i.get(n).and_then(Value::float);
    Some(KeyUsage {
        requests: u64::try_from(int(0)?).ok()?,
        tokens: u64::try_from(int(1)?).ok()?,
        in_flight: u64::try_from(int(2)?).ok()?,
        usd_day: float(3)?,
        usd_5h: float(4)?,
        usd_month: float(5)?,
        day_resets_at_ms: int(6)?,
        month_resets_at_ms: int(7)?,
        usd_5h_frees_at_ms: i.get(8).and_then(Value::text).and_then(|t| t.parse().ok()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::Bulk(s.as_bytes().to_vec())
    }

    #[test]
    fn admission_answers_read_as_limits() {
        assert_eq!(admission(&Value::Array(vec![Value::Int(1), bulk("1800000000000")])), Some(Ok(())));
        let refused = Value::Array(vec![
            Value::Int(0),
            bulk("usd_per_day"),
            bulk("5"),
            bulk("5.0123"),
            bulk("3600000"),
            bulk("1800003600000"),
            bulk("1800000000000"),
        ]);
        let limit = admission(&refused).unwrap().unwrap_err();
        assert_eq!((limit.kind, limit.limit, limit.retry_after_ms), (LimitKind::UsdPerDay, 5.0, 3_600_000));
        assert_eq!((limit.used, limit.resets_at_ms), (5.0123, Some(1_800_003_600_000)));
        let rpm =
            Value::Array(vec![Value::Int(0), bulk("rpm"), bulk("60"), bulk("60"), bulk("12000"), bulk(""), bulk("1")]);
        assert_eq!(admission(&rpm).unwrap().unwrap_err().resets_at_ms, None);
        assert_eq!(admission(&Value::Nil), None);
        assert_eq!(admission(&Value::Array(vec![Value::Int(0), bulk("surprise")])), None);
    }

    #[test]
    fn usage_answers_read_back() {
        let v = Value::Array(vec![
            Value::Int(3),
            bulk("1200"),
            Value::Int(1),
            bulk("1.25"),
            bulk("0.5"),
            bulk("31.5"),
            bulk("1800057600000"),
            bulk("1801958400000"),
            bulk(""),
            bulk("1800000000000"),
        ]);
        let u = usage(&v).unwrap();
        assert_eq!((u.requests, u.tokens, u.in_flight), (3, 1200, 1));
        assert_eq!((u.usd_day, u.usd_5h, u.usd_month), (1.25, 0.5, 31.5));
        assert_eq!(u.usd_5h_frees_at_ms, None);
        assert_eq!(usage(&Value::Array(vec![])), None);
    }
}
