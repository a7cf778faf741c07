//! The cluster's Lua scripts against a real `redis-server`: each atomic step means what
//! `src/cluster/scripts.rs` says — a later breaker deadline wins and an earlier one never does,
//! one probe owner, half-open successes counted to the threshold, the compare-and-set of the
//! current endpoint, and a client key's windows (sliding minute, leases that expire, the UTC day
//! and month) at explicit times.

use std::sync::Arc;
use std::time::Duration;

use ccmesh::cluster::client::{Redis, Target};
use ccmesh::cluster::names::Names;
use ccmesh::cluster::resp::Value;
use ccmesh::cluster::{limiter, scripts};
use ccmesh::keys::{KeyLimits, LimitKind};

use crate::support::redis::RedisServer;

const T: Duration = Duration::from_secs(2);

fn client(redis: &RedisServer) -> Redis {
    Redis::new(Target::parse(&redis.url()).unwrap(), Arc::new(ccmesh::clock::SystemClock))
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

fn until_of(v: &Value) -> i64 {
    let stored = v.items()[1].text().unwrap();
    stored.rsplit(':').next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn breaker_verdicts_probes_and_the_current_endpoint() {
    let Some(server) = RedisServer::start("cluster scripts: verdicts") else { return };
    let redis = client(&server);
    let n = Names::new("t");
    let channel = n.channel();
    let keys = [n.verdicts(), n.half_open(), n.probe("a")];
    let open = |reason: &str, remaining: i64| strings(&["a", reason, &remaining.to_string(), &channel]);

    let first = redis.eval(&scripts::OPEN, &keys, &open("broken", 10_000), T).await.unwrap();
    assert_eq!(first.items()[0], Value::Int(1));
    let until = until_of(&first);
    // An earlier deadline is kept out, and the later one stays.
    let earlier = redis.eval(&scripts::OPEN, &keys, &open("rate_limited", 5_000), T).await.unwrap();
    assert_eq!((earlier.items()[0].clone(), until_of(&earlier)), (Value::Int(0), until));
    // A later one replaces it.
    let later = redis.eval(&scripts::OPEN, &keys, &open("rate_limited", 20_000), T).await.unwrap();
    assert!(later.items()[0] == Value::Int(1) && until_of(&later) > until);
    // An expired verdict is never stored.
    let expired = redis.eval(&scripts::OPEN, &keys, &open("broken", 0), T).await.unwrap();
    assert_eq!(expired, Value::Array(vec![Value::Int(0)]));

    // One probe owner; the other is told how long the claim has left.
    let probe = [n.probe("a")];
    let claim = |node: &str| strings(&[node, "5000"]);
    assert_eq!(redis.eval(&scripts::CLAIM_PROBE, &probe, &claim("n1"), T).await.unwrap(), Value::Int(0));
    let other = redis.eval(&scripts::CLAIM_PROBE, &probe, &claim("n2"), T).await.unwrap().int().unwrap();
    assert!(other > 4_000 && other <= 5_000, "{other}");
    assert_eq!(
        redis.eval(&scripts::CLAIM_PROBE, &probe, &claim("n1"), T).await.unwrap(),
        Value::Int(0),
        "the owner again"
    );
    assert_eq!(redis.eval(&scripts::REFRESH_PROBE, &probe, &claim("n2"), T).await.unwrap(), Value::Int(0));
    assert_eq!(redis.eval(&scripts::RELEASE_PROBE, &probe, &strings(&["n2"]), T).await.unwrap(), Value::Int(0));
    assert_eq!(redis.eval(&scripts::RELEASE_PROBE, &probe, &strings(&["n1"]), T).await.unwrap(), Value::Int(1));
    assert_eq!(redis.eval(&scripts::CLAIM_PROBE, &probe, &claim("n2"), T).await.unwrap(), Value::Int(0));

    // Two successes of a threshold of 2 close it for everyone: the verdict goes.
    let success_keys = [n.half_open(), n.probe("a"), n.verdicts()];
    let success = |node: &str| strings(&["a", node, "2", &channel]);
    let one = redis.eval(&scripts::PROBE_SUCCEEDED, &success_keys, &success("n2"), T).await.unwrap();
    assert_eq!(one, Value::Array(vec![Value::Int(0), Value::Int(1)]));
    assert_eq!(
        redis.call(&["GET", n.probe("a").as_str()], T).await.unwrap(),
        Value::Nil,
        "the claim went back for the next probe"
    );
    let two = redis.eval(&scripts::PROBE_SUCCEEDED, &success_keys, &success("n1"), T).await.unwrap();
    assert_eq!(two, Value::Array(vec![Value::Int(1), Value::Int(2)]));
    assert_eq!(redis.call(&["HGET", n.verdicts().as_str(), "a"], T).await.unwrap(), Value::Nil);

    // SPEC §3's compare-and-set: only a request that saw the current endpoint moves it.
    let current = [n.current()];
    let mv = |seen: &str, to: &str| strings(&["claude", seen, to, &channel]);
    let text = |v: Value| v.text().unwrap();
    assert_eq!(text(redis.eval(&scripts::MOVE_CURRENT, &current, &mv("", "a"), T).await.unwrap()), "a");
    assert_eq!(
        text(redis.eval(&scripts::MOVE_CURRENT, &current, &mv("", "b"), T).await.unwrap()),
        "a",
        "saw none: too late"
    );
    assert_eq!(text(redis.eval(&scripts::MOVE_CURRENT, &current, &mv("a", "b"), T).await.unwrap()), "b");
    // Re-publishing after an outage sets a current endpoint only where none is.
    let set = |to: &str, only_if_unset: &str| strings(&["claude", to, &channel, only_if_unset]);
    assert_eq!(redis.eval(&scripts::SET_CURRENT, &current, &set("a", "1"), T).await.unwrap(), Value::Int(0));
    assert_eq!(redis.eval(&scripts::SET_CURRENT, &current, &set("a", "0"), T).await.unwrap(), Value::Int(1));
}

#[tokio::test]
async fn a_client_keys_windows_at_explicit_times() {
    let Some(server) = RedisServer::start("cluster scripts: limits") else { return };
    let redis = client(&server);
    let n = Names::new("t");
    let keys: Vec<String> = ["requests", "leases", "tokens", "spend"].iter().map(|w| n.key("k", w)).collect();
    let admit = |now: i64, member: &str, lease: u64, limits: &KeyLimits| {
        let args = scripts::admit_args(Some(now), member, lease, limits);
        let (redis, keys) = (&redis, &keys);
        async move { limiter::admission(&redis.eval(&scripts::ADMIT, keys, &args, T).await.unwrap()).unwrap() }
    };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;

    // A sliding minute.
    let rpm = KeyLimits { rpm: Some(2), ..KeyLimits::default() };
    assert_eq!(admit(now, "n:1", 1, &rpm).await, Ok(()));
    assert_eq!(admit(now + 1_000, "n:2", 1, &rpm).await, Ok(()));
    let refused = admit(now + 2_000, "n:3", 1, &rpm).await.unwrap_err();
    assert_eq!((refused.kind, refused.retry_after_ms), (LimitKind::Rpm, 58_000));
    assert_eq!(admit(now + 60_001, "n:4", 1, &rpm).await, Ok(()), "the first admission left the window");

    // Leases: held until given back or expired.
    let conc = KeyLimits { concurrency: Some(1), ..KeyLimits::default() };
    let t = now + 120_000;
    assert_eq!(admit(t, "n:5", 1_000, &conc).await, Ok(()));
    assert_eq!(admit(t + 10, "n:6", 1_000, &conc).await.unwrap_err().kind, LimitKind::Concurrency);
    assert_eq!(admit(t + 1_001, "n:7", 1_000, &conc).await, Ok(()), "a vanished holder's lease expired");
    redis.call(&["ZREM", keys[1].as_str(), "n:7"], T).await.unwrap();
    assert_eq!(admit(t + 1_002, "n:8", 1_000, &conc).await, Ok(()), "a lease given back frees its slot");

    // The UTC day and month, across a month's end (2026-02-01T00:00:00Z).
    let feb = 1_769_904_000_000_i64;
    let charge = scripts::charge_args(Some(feb - 60_000), 100, 1.0);
    redis.eval(&scripts::CHARGE, &keys, &charge, T).await.unwrap();
    let usage = |at: i64| {
        let (redis, keys) = (&redis, &keys);
        async move { limiter::usage(&redis.eval(&scripts::USAGE, keys, &[at.to_string()], T).await.unwrap()).unwrap() }
    };
    let jan = usage(feb - 1_000).await;
    assert_eq!((jan.usd_day, jan.usd_month, jan.month_resets_at_ms, jan.day_resets_at_ms), (1.0, 1.0, feb, feb));
    let budget = KeyLimits { usd_per_day: Some(1.0), ..KeyLimits::default() };
    let spent = admit(feb - 500, "n:9", 1, &budget).await.unwrap_err();
    assert_eq!((spent.kind, spent.resets_at_ms, spent.retry_after_ms), (LimitKind::UsdPerDay, Some(feb), 500));
    let month = KeyLimits { usd_per_month: Some(1.0), usd_per_5h: Some(5.0), ..KeyLimits::default() };
    assert_eq!(admit(feb + 1_000, "n:10", 1, &month).await, Ok(()), "a new month, a new budget");
    let february = usage(feb + 1_000).await;
    assert_eq!(
        (february.usd_day, february.usd_month, february.usd_5h),
        (0.0, 0.0, 1.0),
        "the last 5 hours reach into January"
    );
    assert_eq!(february.month_resets_at_ms, feb + 28 * 86_400_000);
}
