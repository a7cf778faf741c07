//! The cluster layer's Redis client against a real Redis Cluster of three masters, given one
//! node: keys of every slot reach the node that serves them (MOVED followed, then remembered),
//! each node learns the scripts it is sent, unkeyed commands stay on the seed, and a slot in the
//! middle of a migration is served through ASK.

use std::sync::Arc;
use std::time::Duration;

use ccmesh::cluster::client::{Redis, Target};
use ccmesh::cluster::limiter;
use ccmesh::cluster::names::Names;
use ccmesh::cluster::resp::Value;
use ccmesh::cluster::scripts;
use ccmesh::keys::KeyLimits;

use crate::support::redis::RedisCluster;

const T: Duration = Duration::from_secs(2);

/// A bulk reply's text, as `RedisServer::command` returns it raw (`$N\r\ntext\r\n`).
fn bulk_text(raw: &str) -> &str {
    raw.split("\r\n").nth(1).unwrap_or("")
}

#[tokio::test]
async fn the_client_given_one_node_reaches_every_slot_of_a_redis_cluster() {
    let Some(cluster) = RedisCluster::start("client on a redis cluster") else { return };
    let redis = Redis::new(Target::parse(&cluster.nodes[0].url()).unwrap(), Arc::new(ccmesh::clock::SystemClock));
    let n = Names::new("rc");

    // Plain commands on keys spread over every node; each value is where the cluster keeps it.
    let keys: Vec<String> = (0..30).map(|i| n.key(&format!("k{i}"), "requests")).collect();
    let owners: std::collections::HashSet<usize> = keys.iter().map(|k| cluster.owner_of(k)).collect();
    assert_eq!(owners.len(), 3, "the keys span every node");
    for k in &keys {
        assert_eq!(redis.call(&["SET", k.as_str(), k.as_str()], T).await, Ok(Value::Simple("OK".into())));
        assert_eq!(redis.call(&["GET", k.as_str()], T).await, Ok(Value::Bulk(k.clone().into_bytes())));
        let stored = cluster.nodes[cluster.owner_of(k)].command(&["GET", k]).unwrap();
        assert_eq!(bulk_text(&stored), k, "on the node that serves its slot");
    }

    // Scripts: every node learns them once (EVALSHA, NOSCRIPT, EVAL), then EVALSHA answers.
    let limits = KeyLimits { rpm: Some(1), ..KeyLimits::default() };
    let args = scripts::admit_args(None, "m", 1_000, &limits);
    for name in ["alice", "bob", "carol", "dave", "erin", "frank"] {
        let keys: Vec<String> = ["requests", "leases", "tokens", "spend"].iter().map(|w| n.key(name, w)).collect();
        let first = redis.eval(&scripts::ADMIT, &keys, &args, T).await.unwrap();
        assert_eq!(limiter::admission(&first), Some(Ok(())), "{name}: {first:?}");
        let second = redis.eval(&scripts::ADMIT, &keys, &args, T).await.unwrap();
        assert!(matches!(limiter::admission(&second), Some(Err(_))), "{name}: one a minute: {second:?}");
    }
    let poll = [n.verdicts(), n.current(), n.binding_generation(), n.config_version()];
    let polled = redis.eval(&scripts::POLL, &poll, &[] as &[String], T).await.unwrap();
    assert!(polled.items().first().and_then(Value::int).is_some(), "{polled:?}");

    // Unkeyed commands.
    assert_eq!(redis.call(&["PING"], T).await, Ok(Value::Simple("PONG".into())));
    assert_eq!(redis.call(&["TIME"], T).await.unwrap().items().len(), 2);

    // A slot in the middle of a migration: a new key of it lives on the importing node, reached
    // through ASK (and the map, which still says the old owner, is not changed by it).
    let key = n.key("migrating", "requests");
    let slot = bulk_or_int(&cluster.nodes[0].command(&["CLUSTER", "KEYSLOT", &key]).unwrap());
    let from = cluster.owner_of(&key);
    let to = (from + 1) % 3;
    let id = |i: usize| bulk_text(&cluster.nodes[i].command(&["CLUSTER", "MYID"]).unwrap()).to_string();
    let (from_id, to_id) = (id(from), id(to));
    assert!(
        cluster.nodes[to].command(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]).unwrap().starts_with("+OK")
    );
    assert!(
        cluster.nodes[from].command(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]).unwrap().starts_with("+OK")
    );
    for _ in 0..2 {
        assert_eq!(redis.call(&["SET", key.as_str(), "moving"], T).await, Ok(Value::Simple("OK".into())));
        assert_eq!(redis.call(&["GET", key.as_str()], T).await, Ok(Value::Bulk(b"moving".to_vec())));
    }
    let count = |i: usize| cluster.nodes[i].command(&["CLUSTER", "COUNTKEYSINSLOT", &slot]).unwrap().trim().to_string();
    assert_eq!(
        (count(from), count(to)),
        (":0".to_string(), ":1".to_string()),
        "the new key went to the importing node"
    );
    assert_eq!(redis.problem(), None);
}

/// `:N` (or a bulk) as text.
fn bulk_or_int(raw: &str) -> String {
    raw.trim().trim_start_matches(':').to_string()
}
