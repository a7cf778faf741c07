//! Hostile and careless use of the real binary: descriptors run out, a second gateway on the
//! same data dir, a careless umask, a read-only data dir, keys echoed by upstreams into logs.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::binary::{Launch, Server};
use crate::support::gateway::{claude_body, http_client};
use crate::support::mock::{MockUpstream, Reply};

/// One request on a new connection; the status, or 0 when the connection failed.
async fn status_on_new_connection(url: &str, request: &str) -> (u16, TcpStream) {
    let addr = url.trim_start_matches("http://");
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 8192];
    let n = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut buf)).await.map_or(0, |r| r.unwrap_or(0));
    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, tcp)
}

const MODELS: &str = "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
const HEALTH: &str = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_out_of_descriptors_never_silences_health_and_service_resumes() {
    // Long timers: the held connections keep their descriptors for the whole test.
    let config = "[settings.limits]\nheader_read_timeout_secs = 60\nkeepalive_timeout_secs = 120\n";
    let server = Server::launch(Launch {
        config: Some(config),
        shell_prefix: Some("ulimit -n 64;"),
        args: &["--workers", "1"],
        ..Launch::default()
    })
    .unwrap();
    // Fill the descriptor table with kept-alive client connections until one is turned away.
    let mut held = Vec::new();
    let mut turned_away = false;
    for _ in 0..200 {
        let (status, tcp) = status_on_new_connection(&server.url, MODELS).await;
        if status == 503 {
            turned_away = true;
            break;
        }
        assert_eq!(status, 200, "before the limit every connection is served");
        held.push(tcp);
    }
    assert!(turned_away, "the descriptor limit was reached after {} connections", held.len());
    // The log line is written by the gateway, read by a thread here: wait for it, don't race it.
    server.wait_for_log(|line| line.to_string().contains("out of file descriptors"));
    server.wait_for_log(|v| {
        v["fields"]["event"] == "connection_cap_reached" && v["fields"]["reason"] == "file_descriptors"
    });
    // Every descriptor is taken by the held connections: health still answers.
    for _ in 0..3 {
        let (status, _) = status_on_new_connection(&server.url, HEALTH).await;
        assert_eq!(status, 200, "health answers with the reserve descriptor");
    }
    drop(held);
    // Once the descriptors are freed, the gateway serves again.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _) = status_on_new_connection(&server.url, MODELS).await;
        if status == 200 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "still refusing: {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Shedding load at the connection cap is told to whoever runs the gateway: one warning when it
/// begins, however many connections come past the cap, one line when there is room again, and a
/// count in `/api/status` and `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_at_the_connection_cap_is_logged_once_each_way_and_counted() {
    let config =
        "[settings.limits]\nmax_connections = 2\nheader_read_timeout_secs = 60\nkeepalive_timeout_secs = 120\n";
    let server = Server::launch(Launch { config: Some(config), ..Launch::default() }).unwrap();
    let mut held = Vec::new();
    for _ in 0..2 {
        let (status, tcp) = status_on_new_connection(&server.url, MODELS).await;
        assert_eq!(status, 200, "within the cap");
        held.push(tcp);
    }
    // Each is answered and closed by the gateway, which only brings the count back to the cap.
    for _ in 0..3 {
        let (status, _) = status_on_new_connection(&server.url, MODELS).await;
        assert_eq!(status, 503, "past the cap");
    }
    let status = status_page(&server.url).await;
    assert_eq!(status["connections_past_cap"], 4, "{status}");
    assert_eq!(status["max_connections"], 2, "{status}");
    drop(held);
    let cleared = server.wait_for_log(|v| v["fields"]["event"] == "connection_cap_cleared");
    assert_eq!(cleared["fields"]["past_cap"], 4, "{cleared}");
    // The lines come in order: every warning of the episode was written before this line.
    let logs = server.log_text();
    let reached: Vec<Value> = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["fields"]["event"] == "connection_cap_reached")
        .collect();
    assert_eq!(reached.len(), 1, "{logs}");
    assert_eq!(reached[0]["level"], "WARN", "{logs}");
    assert_eq!(reached[0]["fields"]["reason"], "max_connections");
    assert_eq!(reached[0]["fields"]["max_connections"], 2);
    assert!(reached[0]["fields"]["message"].as_str().unwrap().contains("limits.max_connections"));
    let metrics = http_client().get(format!("{}/metrics", server.url)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("\nccmesh_connections_past_cap_total 4\n"), "{metrics}");
}

/// `GET /api/status` on a connection of its own, read to its close: the JSON.
async fn status_page(url: &str) -> Value {
    let mut tcp = TcpStream::connect(url.trim_start_matches("http://")).await.unwrap();
    tcp.write_all(b"GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut text = String::new();
    tokio::time::timeout(Duration::from_secs(10), tcp.read_to_string(&mut text)).await.unwrap().unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    serde_json::from_str(text.split_once("\r\n\r\n").unwrap().1).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_soft_open_files_limit_is_raised_to_the_hard_limit() {
    let server = Server::launch(Launch { shell_prefix: Some("ulimit -S -n 256;"), ..Launch::default() }).unwrap();
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", server.child.id())).unwrap();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap();
    let numbers: Vec<&str> = line.split_whitespace().filter(|w| w.chars().all(|c| c.is_ascii_digit())).collect();
    assert_eq!(numbers.len(), 2, "{line}");
    assert_eq!(numbers[0], numbers[1], "soft = hard: {line}");
    assert_ne!(numbers[0], "256");
}

/// A process's soft open-files limit and descriptor-table size, from `/proc`.
fn descriptor_table(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap();
    let soft = line.split_whitespace().find_map(|w| w.parse().ok()).unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let size = status.lines().find_map(|l| l.strip_prefix("FDSize:")).unwrap().trim().parse().unwrap();
    (soft, size)
}

/// The descriptor table is grown once at start for `limits.max_connections` (two descriptors a
/// connection, and 256 more), so that no accept or upstream connect waits for it to grow under
/// load; never past the open-files limit, which a gateway that cannot raise it still starts with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_descriptor_table_is_sized_for_max_connections_at_start() {
    let server = Server::start(None, &[]);
    let (soft, size) = descriptor_table(server.child.id());
    let wanted = (4096 * 2 + 256).min(soft);
    assert!(size >= wanted, "FDSize {size} for the default 4096 connections (open-files limit {soft})");

    let config = "[settings.limits]\nmax_connections = 100\n";
    let small = Server::start(Some(config), &[]);
    let (soft, size) = descriptor_table(small.child.id());
    assert!(size >= (100 * 2 + 256).min(soft), "FDSize {size} for 100 connections");
    assert!(size < 4096 * 2, "FDSize {size}: sized by the setting, not the default");

    let capped = Server::launch(Launch { shell_prefix: Some("ulimit -n 300;"), ..Launch::default() }).unwrap();
    let (soft, size) = descriptor_table(capped.child.id());
    assert_eq!(soft, 300);
    assert!((300..4096).contains(&size), "FDSize {size} under a hard limit of 300");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_gateway_on_the_same_data_dir_is_refused_with_the_holders_pid() {
    let first = Server::launch(Launch::default()).unwrap();
    let logs = Server::launch(Launch { data_dir: Some(&first.dir), ..Launch::default() }).err().expect("refused");
    assert!(logs.contains(&format!("pid {}", first.child.id())), "{logs}");
    assert!(logs.contains("--data-dir"), "{logs}");
    // The first one is unharmed.
    let r = http_client().get(format!("{}/health", first.url)).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_at_rest_are_private_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let up = MockUpstream::start().await;
    up.set_default(Reply::anthropic_message("hi"));
    let server = Server::launch(Launch { shell_prefix: Some("umask 000;"), ..Launch::default() }).unwrap();
    let http = http_client();
    let endpoint =
        json!({"name": "a", "format": "anthropic", "base_url": up.url(), "api_key": "sk-at-rest-0123456789"});
    let r = http.post(format!("{}/api/endpoints", server.url)).json(&endpoint).send().await.unwrap();
    assert_eq!(r.status(), 201);
    let r =
        http.post(format!("{}/v1/messages", server.url)).json(&claude_body("claude-x", false)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let mode = |name: &str| std::fs::metadata(server.dir.join(name)).unwrap().permissions().mode() & 0o777;
    assert_eq!(std::fs::metadata(&server.dir).unwrap().permissions().mode() & 0o777, 0o700);
    for file in ["ccmesh.db", "ccmesh.db-wal", "ccmesh.db-shm", "ccmesh.lock"] {
        assert_eq!(mode(file), 0o600, "{file}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_data_dir_serves_with_a_warning_and_says_so_in_health() {
    use std::os::unix::fs::PermissionsExt;
    let up = MockUpstream::start().await;
    up.set_default(Reply::anthropic_message("from the stored endpoint"));
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("data");
    // A first run stores an endpoint, as a user would have before the disk went read-only.
    {
        let mut server = Server::launch(Launch { data_dir: Some(&dir), ..Launch::default() }).unwrap();
        let endpoint = json!({"name": "a", "format": "anthropic", "base_url": up.url(), "api_key": "sk-ro-0123456789"});
        let r = http_client().post(format!("{}/api/endpoints", server.url)).json(&endpoint).send().await.unwrap();
        assert_eq!(r.status(), 201);
        server.terminate();
        let (status, _) = server.wait_exit();
        assert!(status.success());
    }
    // Now owned by root and not writable for the user the gateway runs as (root ignores modes).
    std::fs::set_permissions(parent.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    for entry in std::fs::read_dir(&dir).unwrap() {
        std::fs::set_permissions(entry.unwrap().path(), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let server = Server::launch(Launch { data_dir: Some(&dir), as_user: Some("65534"), ..Launch::default() })
        .unwrap_or_else(|logs| panic!("refused to start read-only: {logs}"));
    let logs = server.log_text();
    assert!(logs.contains("storage_degraded") && logs.contains("not writable"), "{logs}");
    let http = http_client();
    let health: Value = http.get(format!("{}/health", server.url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(health["status"], "ok");
    assert!(health["storage"].as_str().unwrap().starts_with("degraded: "), "{health}");
    let r =
        http.post(format!("{}/v1/messages", server.url)).json(&claude_body("claude-x", false)).send().await.unwrap();
    assert_eq!(r.status(), 200, "the stored configuration serves");
    assert!(r.text().await.unwrap().contains("from the stored endpoint"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_echoed_by_upstreams_never_reach_the_logs_and_short_tokens_are_warned_about() {
    let key = "dGhpcyBpcyBhIGtleSB3aXRoIG5vIHByZWZpeA==";
    let token = "short-token";
    let up = MockUpstream::start().await;
    up.set_default(Reply::anthropic_error(500, "api_error", &format!("upstream rejected {key}")));
    let server =
        Server::launch(Launch { env: &[("CCMESH_ADMIN_TOKEN", token), ("CCMESH_LOG", "debug")], ..Launch::default() })
            .unwrap();
    let http = http_client();
    let endpoint = json!({"name": "a", "format": "anthropic", "base_url": up.url(), "api_key": key});
    let r = http.post(format!("{}/api/endpoints", server.url)).bearer_auth(token).json(&endpoint).send().await.unwrap();
    assert_eq!(r.status(), 201);
    for _ in 0..2 {
        let r = http
            .post(format!("{}/v1/messages", server.url))
            .json(&claude_body("claude-x", false))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 500);
        assert!(!r.text().await.unwrap().contains(key));
    }
    let logs = server.log_text();
    assert!(logs.contains("admin_token_short"), "{logs}");
    assert!(!logs.contains(key), "a key reached the logs");
    assert!(!logs.contains(&format!("\"{token}\"")), "the admin token reached the logs");
}
