use super::*;

fn at(base: Instant, secs: u64) -> Instant {
    base + Duration::from_secs(secs)
}

#[test]
fn the_most_recently_returned_connection_is_taken_first() {
    let t0 = Instant::now();
    let mut idle = IdleList::default();
    idle.put(1, t0);
    idle.put(2, at(t0, 1));
    idle.put(3, at(t0, 2));
    assert_eq!(idle.take(at(t0, 3), |_| true), Some(3));
    assert_eq!(idle.take(at(t0, 3), |_| true), Some(2));
    assert_eq!(idle.len(), 1);
}

#[test]
fn unusable_connections_met_on_the_way_are_dropped() {
    let t0 = Instant::now();
    let mut idle = IdleList::default();
    for n in 1..=4 {
        idle.put(n, t0);
    }
    // 4 and 3 are closed: both go, 2 is taken, 1 stays.
    assert_eq!(idle.take(t0, |n| *n <= 2), Some(2));
    assert_eq!(idle.len(), 1);
    assert_eq!(idle.take(t0, |_| false), None);
    assert_eq!(idle.len(), 0);
}

#[test]
fn a_connection_idle_for_the_timeout_is_not_used_again() {
    let t0 = Instant::now();
    // "old" returned at t0, "recent" a minute later.
    let old_and_recent = || {
        let mut idle = IdleList::default();
        idle.put("old", t0);
        idle.put("recent", at(t0, 60));
        idle
    };
    let just_before = t0 + POOL_IDLE_TIMEOUT - Duration::from_millis(1);
    let mut only_old = IdleList::default();
    only_old.put("old", t0);
    assert_eq!(only_old.take(just_before, |_| true), Some("old"), "not yet expired");
    // At the timeout "old" expires (and goes without being offered); "recent" is still good.
    let mut idle = old_and_recent();
    assert_eq!(idle.take(t0 + POOL_IDLE_TIMEOUT, |c| *c == "old"), None);
    assert_eq!(idle.len(), 0, "the unusable recent one was dropped too");
    let mut idle = old_and_recent();
    assert_eq!(idle.take(t0 + POOL_IDLE_TIMEOUT, |_| true), Some("recent"));
    assert_eq!(idle.len(), 0, "the expired one is gone");
}

#[test]
fn the_idle_list_keeps_at_most_the_cap_and_the_newest() {
    let t0 = Instant::now();
    let mut idle = IdleList::default();
    for n in 0..MAX_IDLE_PER_HOST + 10 {
        idle.put(n, t0);
    }
    assert_eq!(idle.len(), MAX_IDLE_PER_HOST);
    assert_eq!(idle.take(t0, |_| true), Some(MAX_IDLE_PER_HOST + 9));
    let mut oldest = None;
    while let Some(n) = idle.take(t0, |_| true) {
        oldest = Some(n);
    }
    assert_eq!(oldest, Some(10), "the ten oldest were let go");
}

#[test]
fn host_headers_leave_out_the_default_port() {
    let host = |u: &str| host_header(&u.parse().unwrap()).unwrap();
    assert_eq!(host("http://127.0.0.1:8080/v1"), "127.0.0.1:8080");
    assert_eq!(host("http://example.test:80/x"), "example.test");
    assert_eq!(host("https://example.test:443/x"), "example.test");
    assert_eq!(host("https://example.test:8443"), "example.test:8443");
    assert_eq!(host("http://[::1]:9/"), "[::1]:9");
}

#[test]
fn the_request_target_is_the_path_and_query() {
    let target = |u: &str| origin_form(&u.parse().unwrap()).to_string();
    assert_eq!(target("http://h:1/v1/messages?beta=true"), "/v1/messages?beta=true");
    assert_eq!(target("http://h:1"), "/");
    assert_eq!(target("http://h:1/"), "/");
}

#[test]
fn a_sweep_forgets_origins_left_without_idle_connections() {
    let t0 = Instant::now();
    let mut origins = Origins::default();
    let host = HeaderValue::from_static("h");
    for name in ["a:1", "b:2"] {
        let key: Arc<str> = Arc::from(name);
        origins.http.insert(key.clone(), Origin { key, host: host.clone(), idle: IdleList::default() });
    }
    origins.sweep(t0);
    assert!(origins.http.is_empty());
    assert_eq!(origins.last_sweep, Some(t0));
    // Within the timeout of the last sweep nothing is walked again.
    let key: Arc<str> = Arc::from("c:3");
    origins.http.insert(key.clone(), Origin { key, host, idle: IdleList::default() });
    origins.sweep(t0 + POOL_IDLE_TIMEOUT - Duration::from_secs(1));
    assert_eq!(origins.http.len(), 1);
    origins.sweep(t0 + POOL_IDLE_TIMEOUT);
    assert!(origins.http.is_empty());
}
