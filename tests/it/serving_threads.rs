//! Client connections spread over the serving threads: a burst of connects is not all taken by
//! whichever thread woke first.

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::binary::{Launch, Server};
use crate::support::gateway::http_client;

const HEALTH: &[u8] = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

/// One kept-alive request on `tcp`: returns once its whole answer has arrived.
async fn one_request(tcp: &mut TcpStream) {
    tcp.write_all(HEALTH).await.unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&seen).contains("\"ok\"") {
        let n = tcp.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before the answer: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_connections_is_shared_by_the_serving_threads() {
    let server = Server::launch(Launch { args: &["--workers", "2"], ..Launch::default() }).unwrap();
    let addr = server.url.trim_start_matches("http://").to_string();
    // All connect at once, as `wrk` does, and only then speak: each is held by the thread that
    // accepted it.
    let connects = (0..64).map(|_| TcpStream::connect(addr.clone()));
    let mut held: Vec<TcpStream> =
        futures_util::future::join_all(connects).await.into_iter().map(Result::unwrap).collect();
    futures_util::future::join_all(held.iter_mut().map(one_request)).await;
    let status: Value =
        http_client().get(format!("{}/api/status", server.url)).send().await.unwrap().json().await.unwrap();
    let counts: Vec<u64> =
        status["connections_per_thread"].as_array().unwrap().iter().map(|n| n.as_u64().unwrap()).collect();
    assert_eq!(counts.len(), 2, "{status}");
    // The 64 held and the status request's own connection.
    assert_eq!(counts.iter().sum::<u64>(), 65, "{status}");
    // Within the slack (one more than the other may accept) plus the status connection.
    assert!(counts[0].abs_diff(counts[1]) <= 3, "one thread took most of the burst: {counts:?}");
    drop(held);
}
