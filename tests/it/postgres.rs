//! Gateways on a real PostgreSQL (`--database postgres://…`): one serving and recording; three
//! sharing endpoints, keys, prices and records, a change on one reaching the others' routing
//! within a second; `ccmesh migrate` from a real SQLite data dir; the database going away and
//! coming back under traffic; and the authoritative file every node must share.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::binary::{Launch, Server, run_cli};
use crate::support::gateway::{claude_body, http_client};
use crate::support::mock::{MockUpstream, Reply};
use crate::support::postgres::{PASSWORD, Postgres};

/// How long a cluster check may take in a test (the design aims at 1 s; CI machines are slow).
const BOUND: Duration = Duration::from_secs(3);

fn endpoint_config(name: &str, url: &str) -> String {
    format!(
        "[[endpoints]]\nname = \"{name}\"\nbase_url = \"{url}\"\napi_key = \"sk-ant-upstream-{name}-0123456789\"\nformat = \"anthropic\"\nmodels = [\"claude-*\"]\n"
    )
}

fn on(url: &str, config: Option<&str>) -> Server {
    let args = ["--database", url];
    Server::launch(Launch { config, args: &args, ..Launch::default() })
        .unwrap_or_else(|logs| panic!("ccmesh on PostgreSQL did not start: {logs}"))
}

async fn get(server: &Server, path: &str) -> Value {
    let r = http_client().get(format!("{}{path}", server.url)).send().await.unwrap();
    let status = r.status();
    let v: Value = r.json().await.unwrap_or(Value::Null);
    assert!(status.is_success(), "GET {path}: {status} {v}");
    v
}

async fn send(server: &Server, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
    let r = http_client().request(method, format!("{}{path}", server.url)).json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// A proxied request; its status.
async fn ask(server: &Server, key: Option<&str>) -> u16 {
    let mut req =
        http_client().post(format!("{}/v1/messages", server.url)).json(&claude_body("claude-sonnet-4-5", false));
    if let Some(k) = key {
        req = req.header("x-api-key", k);
    }
    req.send().await.unwrap().status().as_u16()
}

/// Poll `check` until it gives a value, failing after `within`.
async fn eventually<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn records(server: &Server, query: &str) -> Vec<Value> {
    get(server, &format!("/api/requests?limit=200{query}")).await["requests"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_on_postgres_serves_records_and_names_its_database_without_the_password() {
    let Some(pg) = Postgres::start() else { return };
    let url = pg.database("single");
    let up = MockUpstream::start().await;
    up.set_default(Reply::anthropic_message("hello"));
    let server = on(&url, Some(&endpoint_config("a", &up.url())));
    let server = &server;
    for _ in 0..3 {
        assert_eq!(ask(server, None).await, 200);
    }
    let list = eventually("three records", Duration::from_secs(10), || async move {
        let list = records(server, "&endpoint=a&status=200").await;
        (list.len() == 3).then_some(list)
    })
    .await;
    assert!(records(server, "&endpoint=nowhere").await.is_empty(), "the filters run on PostgreSQL");
    let detail = get(server, &format!("/api/requests/{}", list[0]["id"].as_str().unwrap())).await;
    assert_eq!(detail["endpoint"], "a");
    assert!(!detail["attempts"].as_array().unwrap().is_empty(), "the decision trail is stored: {detail}");
    let stats = get(server, "/api/stats?group_by=endpoint").await;
    assert_eq!(stats["totals"]["requests"], 3, "{stats}");
    assert_eq!(stats["groups"][0]["key"], "a", "{stats}");

    let status = get(server, "/api/status").await;
    assert_eq!(status["storage"], "ok", "{status}");
    assert_eq!(status["database"]["backend"], "postgres", "{status}");
    let location = status["database"]["location"].as_str().unwrap();
    assert!(location.starts_with("postgres://ccmesh:***@127.0.0.1:") && location.ends_with("/single"), "{location}");
    assert!(!status.to_string().contains(PASSWORD));
    let logs = server.log_text();
    assert!(!logs.contains(PASSWORD), "the password is never logged");
    for trouble in ["\"WARN\"", "\"ERROR\""] {
        assert!(!logs.contains(trouble), "retention, the writer and the follower ran cleanly: {logs}");
    }
    let migrated = pg.psql("single", "SELECT version FROM schema_version").1;
    assert_eq!(migrated, "7", "PostgreSQL's migrations are versioned like SQLite's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_gateways_on_one_database_share_endpoints_keys_prices_and_records() {
    let Some(pg) = Postgres::start() else { return };
    let url = pg.database("shared");
    let up = MockUpstream::start().await;
    up.set_default(Reply::anthropic_message("hello"));
    // C is told its database through the environment, as a container would be.
    let by_env = Server::launch(Launch { env: &[("CCMESH_DATABASE_URL", &url)], ..Launch::default() }).unwrap();
    let nodes = [on(&url, None), on(&url, None), by_env];
    let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);
    assert_ne!(ask(c, None).await, 200, "no endpoint yet");

    // An endpoint added on B is routed by C.
    let body =
        json!({"name": "shared", "base_url": up.url(), "api_key": "sk-ant-upstream-0123456789", "format": "anthropic"});
    let (status, created) = send(b, reqwest::Method::POST, "/api/endpoints", body).await;
    assert_eq!(status, 201, "{created}");
    let added = Instant::now();
    eventually("C routes to the endpoint B added", BOUND, || async move { (ask(c, None).await == 200).then_some(()) })
        .await;
    let took = added.elapsed();
    eprintln!("PostgreSQL change propagation: an endpoint added on B was routed by C after {} ms", took.as_millis());
    assert!(took < BOUND, "{took:?}");

    // Prices set on A are C's.
    let price = json!({"input": 1.5, "output": 7.5, "cache_read": 0.15, "cache_write": 1.875});
    let (status, _) = send(a, reqwest::Method::PUT, "/api/prices/claude-sonnet-4-5", price).await;
    assert_eq!(status, 200);
    eventually("C has A's price", BOUND, || async move {
        let prices = get(c, "/api/prices").await;
        prices.as_array().unwrap().iter().any(|p| p["model"] == "claude-sonnet-4-5" && p["input"] == 1.5).then_some(())
    })
    .await;

    // A key made on A is enforced and accepted by B.
    let (status, key) = send(a, reqwest::Method::POST, "/api/keys", json!({"name": "team"})).await;
    assert_eq!(status, 201, "{key}");
    let secret = key["secret"].as_str().unwrap().to_string();
    eventually("B enforces A's key", BOUND, || async move { (ask(b, None).await == 401).then_some(()) }).await;
    assert_eq!(ask(b, Some(&secret)).await, 200);
    assert_eq!(ask(c, Some(&secret)).await, 200);
    assert_eq!(ask(a, Some(&secret)).await, 200);

    // Every node's records in one list, ids unique across nodes.
    let list = eventually("the keyed records of all three nodes", Duration::from_secs(10), || async move {
        let list = records(b, "&key=team&status=200").await;
        (list.len() == 3).then_some(list)
    })
    .await;
    let ids: std::collections::HashSet<&str> = list.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 3, "{list:?}");
    let nodes: std::collections::HashSet<&str> = ids.iter().map(|id| &id[12..18]).collect();
    assert_eq!(nodes.len(), 3, "each gateway has its own node number in its ids: {ids:?}");
    let all = records(a, "").await;
    assert_eq!(records(c, "").await.len(), all.len(), "every node lists the same records");

    // A change whose notification never came (made by hand here, as one lost while a node's
    // listening connection was down would be) is caught by the version poll.
    let (ok, out) = pg.psql(
        "shared",
        "UPDATE endpoints SET enabled = FALSE WHERE name = 'shared'; UPDATE config_version SET version = version + 1",
    );
    assert!(ok, "{out}");
    let changed = Instant::now();
    eventually("C sees the unannounced change", BOUND, || async move {
        (get(c, "/api/endpoints").await[0]["enabled"] == false).then_some(())
    })
    .await;
    eprintln!("PostgreSQL change propagation without a notification (the poll): {} ms", changed.elapsed().as_millis());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_moves_an_sqlite_installation_and_refuses_a_non_empty_target() {
    let Some(pg) = Postgres::start() else { return };
    let url = pg.database("moved");
    let up = MockUpstream::start().await;
    up.set_default(Reply::anthropic_message("hello"));

    // An installation on SQLite with something of everything.
    let data = tempfile::tempdir().unwrap();
    let mut old = Server::launch(Launch {
        config: Some(&endpoint_config("legacy", &up.url())),
        data_dir: Some(data.path()),
        ..Launch::default()
    })
    .unwrap();
    let (status, key) = send(&old, reqwest::Method::POST, "/api/keys", json!({"name": "alice"})).await;
    assert_eq!(status, 201);
    let secret = key["secret"].as_str().unwrap().to_string();
    let price = json!({"input": 2.0, "output": 8.0, "cache_read": 0.2, "cache_write": 2.5});
    assert_eq!(send(&old, reqwest::Method::PUT, "/api/prices/claude-sonnet-4-5", price).await.0, 200);
    assert_eq!(send(&old, reqwest::Method::PATCH, "/api/settings", json!({"retention_days": 9})).await.0, 200);
    assert_eq!(ask(&old, Some(&secret)).await, 200);
    assert_eq!(ask(&old, Some(&secret)).await, 200);
    let from = format!("sqlite:{}", data.path().display());
    let (code, _, err) = run_cli(["migrate", "--from", &from, "--to", &url], &[]);
    assert_ne!(code, 0, "a data dir a gateway still serves is not moved");
    assert!(err.contains("is already serving the data dir") && err.contains("stop it first"), "{err}");
    let running = &old;
    let before = eventually("two records", Duration::from_secs(10), || async move {
        let list = records(running, "").await;
        (list.len() == 2).then_some(list)
    })
    .await;
    old.terminate();
    let (exit, _) = old.wait_exit();
    assert!(exit.success());

    let (code, out, err) = run_cli(["migrate", "--from", &from, "--to", &url], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("1 endpoints") && out.contains("1 client keys") && out.contains("2 requests"), "{out}");
    assert!(!out.contains(PASSWORD) && !err.contains(PASSWORD), "{out}{err}");
    // The copied records' periods, which endpoint, model and protocol filters walk.
    let periods = pg.psql("moved", "SELECT string_agg(DISTINCT dimension || '=' || value, ',') FROM request_periods").1;
    assert!(periods.contains("endpoint=legacy") && periods.contains("protocol=claude"), "{periods}");

    // A second run changes nothing and says why.
    let (code, out, err) = run_cli(["migrate", "--from", &from, "--to", &url], &[]);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("not empty") && err.contains("1 endpoints") && err.contains("nothing was copied"), "{err}");
    assert!(!err.contains(PASSWORD), "{err}");

    // A gateway on PostgreSQL now has the installation.
    let moved = on(&url, None);
    let moved = &moved;
    let endpoints = get(moved, "/api/endpoints").await;
    assert_eq!(endpoints[0]["name"], "legacy", "{endpoints}");
    assert_eq!(get(moved, "/api/settings").await["retention_days"], 9);
    let prices = get(moved, "/api/prices").await;
    assert!(prices.as_array().unwrap().iter().any(|p| p["model"] == "claude-sonnet-4-5" && p["input"] == 2.0));
    assert_eq!(ask(moved, None).await, 401, "the key came along, so keys are enforced");
    assert_eq!(ask(moved, Some(&secret)).await, 200, "and its secret still works");
    let after = eventually("the two moved records and a new one", Duration::from_secs(10), || async move {
        let list = records(moved, "&key=alice").await;
        (list.len() == 3).then_some(list)
    })
    .await;
    for r in &before {
        assert!(after.iter().any(|a| a["id"] == r["id"] && a["client_key"] == "alice"), "{r} moved with its id");
    }
    assert_eq!(after[0]["client_key"], "alice");
    assert!(!before.iter().any(|r| r["id"] == after[0]["id"]), "the newest is the new one: {after:?}");
    // A moved record is found by its endpoint, and its detail has its row's fields and trail.
    let by_endpoint = records(moved, "&endpoint=legacy").await;
    assert_eq!(by_endpoint.len(), 3, "{by_endpoint:?}");
    let id = before[0]["id"].as_str().unwrap();
    let detail = get(moved, &format!("/api/requests/{id}")).await;
    assert_eq!((detail["id"].as_str(), detail["endpoint"].as_str()), (Some(id), Some("legacy")), "{detail}");
    assert_eq!(detail["attempts"].as_array().map(Vec::len), Some(1), "{detail}");
}

async fn metric(server: &Server, name: &str) -> f64 {
    let text = http_client().get(format!("{}/metrics", server.url)).send().await.unwrap().text().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_keep_succeeding_while_postgres_is_away_and_storage_recovers_after() {
    let Some(mut pg) = Postgres::start() else { return };
    let url = pg.database("outage");
    let up = MockUpstream::start().await;
    up.set_default(Reply::anthropic_message("hello"));
    let server = on(&url, Some(&endpoint_config("a", &up.url())));
    let server = &server;
    assert_eq!(ask(server, None).await, 200);
    eventually("the first record", Duration::from_secs(10), || async move {
        (records(server, "").await.len() == 1).then_some(())
    })
    .await;

    pg.stop();
    let started = Instant::now();
    for _ in 0..20 {
        assert_eq!(ask(server, None).await, 200, "the request path never waits for the database");
    }
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    let health = eventually("health says storage is degraded", Duration::from_secs(10), || async move {
        let h = get(server, "/health").await;
        h["storage"].as_str().is_some_and(|s| s.starts_with("degraded")).then_some(h)
    })
    .await;
    assert_eq!(health["status"], "ok", "{health}");
    assert!(!health.to_string().contains(PASSWORD), "{health}");
    eventually("records that cannot be written are dropped and counted", Duration::from_secs(20), || async move {
        (metric(server, "ccmesh_records_dropped_total").await > 0.0).then_some(())
    })
    .await;
    let (status, refused) = send(server, reqwest::Method::PATCH, "/api/settings", json!({"retention_days": 3})).await;
    assert_eq!(status, 503, "a change that cannot be stored says so: {refused}");

    pg.resume();
    // Health recovers once the database answers and a record batch is written again.
    eventually("health recovers", Duration::from_secs(10), || async move {
        assert_eq!(ask(server, None).await, 200);
        get(server, "/health").await.get("storage").is_none().then_some(())
    })
    .await;
    eventually("records are written again", Duration::from_secs(20), || async move {
        let list = records(server, "").await;
        (list.len() >= 2).then_some(())
    })
    .await;
    assert!(!server.log_text().contains(PASSWORD), "the password is never logged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_that_stops_answering_never_holds_up_requests() {
    let Some(pg) = Postgres::start() else { return };
    let url = pg.database("frozen");
    let up = MockUpstream::start().await;
    up.set_default(Reply::anthropic_message("hello"));
    let server = on(&url, Some(&endpoint_config("a", &up.url())));
    let server = &server;
    assert_eq!(ask(server, None).await, 200);

    pg.freeze();
    let started = Instant::now();
    for _ in 0..20 {
        assert_eq!(ask(server, None).await, 200);
    }
    let took = started.elapsed();
    assert!(took < Duration::from_secs(3), "requests waited for a database that does not answer: {took:?}");
    eventually("health says storage is degraded", Duration::from_secs(10), || async move {
        let h = get(server, "/health").await;
        h["storage"].as_str().is_some_and(|s| s.contains("unreachable")).then_some(())
    })
    .await;

    pg.thaw();
    eventually("health recovers", Duration::from_secs(40), || async move {
        assert_eq!(ask(server, None).await, 200);
        get(server, "/health").await.get("storage").is_none().then_some(())
    })
    .await;
}

#[test]
fn a_gateway_whose_database_cannot_be_reached_refuses_to_start_and_hides_the_password() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("postgres://ccmesh:{PASSWORD}@127.0.0.1:{closed}/nowhere");
    let args = ["--database", url.as_str()];
    let logs = match Server::launch(Launch { args: &args, ..Launch::default() }) {
        Ok(_) => panic!("started without its database"),
        Err(logs) => logs,
    };
    assert!(
        logs.contains(&format!("cannot open the database postgres://ccmesh:***@127.0.0.1:{closed}/nowhere")),
        "{logs}"
    );
    assert!(!logs.contains(PASSWORD), "{logs}");
    let (code, _, err) = run_cli(["migrate", "--from", "sqlite:/no/such/dir", "--to", &url], &[]);
    assert_ne!(code, 0);
    assert!(!err.contains(PASSWORD), "{err}");
}

#[test]
fn every_authoritative_gateway_on_one_database_loads_the_same_file() {
    let Some(pg) = Postgres::start() else { return };
    let url = pg.database("authoritative");
    let file = |model: &str| {
        format!(
            "[config]\nauthoritative = true\n\n[settings]\nrouting_strategy = \"priority\"\n\n[[prices]]\nmodel = \"{model}\"\ninput = 1.0\noutput = 2.0\ncache_read = 0.1\ncache_write = 1.25\n"
        )
    };
    let first = on(&url, Some(&file("claude-sonnet-4-5")));
    let same = on(&url, Some(&file("claude-sonnet-4-5")));
    let args = ["--database", url.as_str()];
    let other = file("claude-opus-4-1");
    let refused = Server::launch(Launch { config: Some(&other), args: &args, ..Launch::default() });
    let logs = match refused {
        Ok(_) => panic!("a gateway with a different authoritative file joined"),
        Err(logs) => logs,
    };
    assert!(logs.contains("every gateway on a shared database must load the same file"), "{logs}");
    assert!(!logs.contains(PASSWORD), "{logs}");

    // The rollout: the new file on a running gateway, SIGHUP, and it is the reference.
    std::fs::write(first.dir.join("ccmesh.toml"), &other).unwrap();
    let hup = std::process::Command::new("kill").args(["-HUP", &first.child.id().to_string()]).status().unwrap();
    assert!(hup.success());
    first.wait_for_log(|v| v["fields"]["event"] == "config_reloaded");
    let joined = on(&url, Some(&other));
    let stale = Server::launch(Launch { config: Some(&file("claude-sonnet-4-5")), args: &args, ..Launch::default() });
    assert!(stale.is_err(), "the old file is refused once the new one is the reference");
    drop((first, same, joined));
}

/// Every page of `filter`'s list, as ids.
fn all_ids(store: &ccmesh::store::Store, filter: &ccmesh::store::records::Filter) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cursor = None;
    loop {
        let page = store.list_records(filter, cursor, 97).unwrap();
        ids.extend(page.requests.iter().map(|r| r.id.clone()));
        match page.next_cursor {
            Some(c) => cursor = Some(ccmesh::store::records::Cursor::decode(&c).unwrap()),
            None => return ids,
        }
    }
}

#[test]
fn postgres_stores_lists_counts_and_prunes_records_as_sqlite_does() {
    use ccmesh::store::Store;
    use ccmesh::store::records::{Bucket, Filter, GroupBy, StatsQuery};
    let Some(pg) = Postgres::start() else { return };
    let shared = Store::open_postgres(&pg.database("records")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let local = Store::open(&dir.path().join("ccmesh.db")).unwrap();
    let batch: Vec<_> = (0..1200).map(|i| crate::records::synthetic(i, 1_700_000_000_000 + i * 60_000)).collect();
    for store in [&shared, &local] {
        let mut writer = store.record_writer().unwrap();
        assert_eq!(writer.insert_batch(&batch).unwrap(), 1200, "more than one statement's worth, in one batch");
        assert_eq!(writer.insert_batch(&batch[..3]).unwrap(), 0, "a stored id is skipped, not an error");
    }
    let filters = [
        Filter::default(),
        Filter { endpoint: Some("alpha".into()), ..Default::default() },
        Filter { failed_over: Some(true), ..Default::default() },
        Filter { failed_over: Some(false), protocol: Some("openai".into()), ..Default::default() },
        Filter { status_class: Some(5), ..Default::default() },
        Filter { text: Some("OVERLOADED".into()), ..Default::default() },
        Filter { since_ms: Some(1_700_000_000_000 + 600 * 60_000), model: Some("gpt-5".into()), ..Default::default() },
    ];
    for f in &filters {
        let ids = all_ids(&shared, f);
        assert!(!ids.is_empty(), "{f:?}");
        assert_eq!(ids, all_ids(&local, f), "{f:?}");
    }
    for group_by in [None, Some(GroupBy::Endpoint), Some(GroupBy::Model)] {
        let q = StatsQuery {
            since_ms: 1_700_000_000_000,
            until_ms: 1_700_000_000_000 + 1200 * 60_000,
            group_by,
            bucket: Some(Bucket::Hour),
        };
        assert_eq!(shared.record_stats(&q).unwrap(), local.record_stats(&q).unwrap(), "{group_by:?}");
    }
    let id = &batch[10].id;
    assert_eq!(shared.get_record(id).unwrap(), local.get_record(id).unwrap());

    // Retention: the oldest first, a chunk at a time, details with them.
    let mut writer = shared.record_writer().unwrap();
    let cutoff: i64 = 1_700_000_000_000 + 5 * 60_000;
    assert_eq!(writer.prune_chunk(cutoff, 2).unwrap(), 2);
    assert_eq!(writer.prune_chunk(cutoff, 10).unwrap(), 3);
    assert_eq!(writer.prune_chunk(cutoff, 10).unwrap(), 0);
    assert_eq!(shared.count_records().unwrap(), 1195);
    assert!(shared.get_record(&batch[4].id).unwrap().is_none());
    assert!(shared.get_record(&batch[5].id).unwrap().is_some());
    assert_eq!(pg.psql("records", "SELECT COUNT(*) FROM request_records").1, "1195");
}

/// Every configuration write of the admin API, on one backend; what the tables then hold, and
/// the errors along the way, as text.
fn exercise_configuration(store: &ccmesh::store::Store) -> Vec<String> {
    use ccmesh::endpoint::{EndpointDraft, TestResult, TestStatus};
    use ccmesh::keys::key::KeyDraft;
    use ccmesh::keys::secret::SecretHash;
    use ccmesh::observe::cost::Price;
    let mut seen = Vec::new();
    let draft = |v: Value| EndpointDraft::create(&v).unwrap();
    let ep = |name: &str, extra: Value| {
        let mut v = json!({"name": name, "base_url": "https://api.example.com", "api_key": "sk-0123456789abcdef", "format": "anthropic"});
        v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        draft(v)
    };
    store.insert_endpoint(&ep("a", json!({"models": ["claude-*"], "headers": {"x-team": "1"}}))).unwrap();
    store.insert_endpoint(&ep("b", json!({"fast": true, "price_multiplier": 0.5}))).unwrap();
    store.insert_endpoint(&ep("c", json!({"enabled": false, "model_map": {"claude-*": "glm-4.6"}}))).unwrap();
    seen.push(format!("{:?}", store.insert_endpoint(&ep("A", json!({})))));
    let mut renamed = store.get_endpoint("c").unwrap().to_draft();
    renamed.name = "see".into();
    renamed.fast = true;
    store.update_endpoint("c", &renamed).unwrap();
    seen.push(format!("{:?}", store.update_endpoint("nope", &renamed)));
    store.set_fast_queue(&["see".into(), "b".into()]).unwrap();
    store.set_order(&["b".into()]).unwrap();
    seen.push(format!("{:?}", store.set_order(&["zzz".into()])));
    let test = TestResult {
        status: TestStatus::parse("ok"),
        at: Some("2026-01-01T00:00:00Z".into()),
        latency_ms: Some(42),
        error: None,
    };
    store.save_test_result("b", &test).unwrap();
    store.delete_endpoint("a").unwrap();
    seen.push(format!("{:?}", store.delete_endpoint("a")));
    for e in store.list_endpoints().unwrap() {
        // Ids are the engines' own; everything else must match.
        seen.push(format!("{:?}", ccmesh::endpoint::Endpoint { id: ccmesh::endpoint::EndpointId(0), ..e }));
    }

    store.save_settings(&json!({"retention_days": 4})).unwrap();
    store.save_settings(&json!({"retention_days": 5})).unwrap();
    seen.push(format!("{:?}", store.load_settings().unwrap()));

    let price = Price { input: 1.0, output: 2.0, cache_read: 0.1, cache_write: 1.25 };
    store.upsert_price("Model-X", &price).unwrap();
    store.upsert_price("model-x", &Price { input: 3.0, ..price }).unwrap();
    store.upsert_price("other", &price).unwrap();
    seen.push(format!("{:?} {}", store.list_prices().unwrap(), store.delete_price("OTHER").unwrap()));

    let key =
        |name: &str| KeyDraft::create(&json!({"name": name, "models": ["claude-*"], "limits": {"rpm": 5}})).unwrap();
    store.insert_key(&key("alice"), SecretHash::of("secret-alice-000000000000"), "ccm-ali", false, 1).unwrap();
    seen.push(format!("{:?}", store.insert_key(&key("ALICE"), SecretHash::of("another"), "p", false, 1)));
    seen.push(format!(
        "{:?}",
        store.insert_key(&key("bob"), SecretHash::of("secret-alice-000000000000"), "p", false, 1)
    ));
    store.update_key("alice", &KeyDraft::create(&json!({"name": "alice", "enabled": false})).unwrap()).unwrap();
    store.set_key_secret("Alice", SecretHash::of("rotated-000000000000"), "ccm-rot").unwrap();
    store.upsert_declared_key(&key("carol"), SecretHash::of("declared-0000000000"), "ccm-car", 2).unwrap();
    store.upsert_declared_key(&key("carol"), SecretHash::of("declared-1111111111"), "ccm-car", 3).unwrap();
    store.delete_key("bob").unwrap_err();
    for k in store.list_keys().unwrap() {
        seen.push(format!("{:?}", ccmesh::keys::key::ClientKey { id: 0, ..k }));
    }
    seen.push(format!("{}", store.count_keys().unwrap()));
    seen
}

#[test]
fn the_configuration_tables_behave_alike_on_both_backends() {
    let Some(pg) = Postgres::start() else { return };
    let shared = ccmesh::store::Store::open_postgres(&pg.database("config")).unwrap();
    let local = ccmesh::store::Store::open_in_memory().unwrap();
    let (on_pg, on_sqlite) = (exercise_configuration(&shared), exercise_configuration(&local));
    for (a, b) in on_pg.iter().zip(&on_sqlite) {
        assert_eq!(a, b);
    }
    assert_eq!(on_pg.len(), on_sqlite.len());
    let version: i64 = pg.psql("config", "SELECT version FROM config_version").1.parse().unwrap();
    assert!(version >= 15, "every write bumped the configuration version: {version}");
}
