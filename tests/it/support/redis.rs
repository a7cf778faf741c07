//! A real `redis-server` for the cluster tests: unprivileged, on 127.0.0.1 and a free port, in a
//! temp dir, with nothing persisted (`--save "" --appendonly no`); killed on drop, and restartable
//! on the same port (a Redis outage in the middle of a test).
//!
//! Also a Redis Cluster of three masters (no replicas) made of such servers, for the tests that
//! prove the gateway follows its redirects.
//!
//! Without `redis-server` (and `redis-cli`, for a cluster) on PATH the tests that need it are
//! skipped with a line on stderr — a machine with only Rust still passes `cargo test` — except in
//! CI (`CI` set), where that fails.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
    /// `requirepass`, when the test wants a login.
    password: Option<String>,
    /// More arguments (a cluster node's).
    extra: Vec<String>,
}

/// Where a Redis program is, if anywhere on PATH.
fn program(name: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

fn binary() -> Option<std::path::PathBuf> {
    program("redis-server")
}

/// `true` when the programs are there; else skipped (a line on stderr), or a failure in CI.
fn installed(test: &str, names: &[&str]) -> bool {
    if let Some(missing) = names.iter().find(|n| program(n).is_none()) {
        assert!(std::env::var_os("CI").is_none(), "{test}: {missing} is not installed, and CI is set");
        eprintln!("{test}: skipped: {missing} not installed");
        return false;
    }
    true
}

impl RedisServer {
    /// A running Redis, or `None` when the machine has none (the caller returns: skipped).
    pub fn start(test: &str) -> Option<RedisServer> {
        Self::start_with(test, None)
    }

    /// `start`, with a password clients must log in with.
    pub fn start_with(test: &str, password: Option<&str>) -> Option<RedisServer> {
        if !installed(test, &["redis-server"]) {
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        Some(Self::spawn(port, password, Vec::new()))
    }

    fn spawn(port: u16, password: Option<&str>, extra: Vec<String>) -> RedisServer {
        let password = password.map(str::to_string);
        let mut server = RedisServer { child: None, port, dir: tempfile::tempdir().unwrap(), password, extra };
        server.restart();
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Start it (again) on its port, and wait until it answers `PING`.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let binary = binary().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let child = Command::new(&binary)
                .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .args(["--protected-mode", "yes", "--daemonize", "no", "--loglevel", "warning"])
                .args(self.password.iter().flat_map(|p| ["--requirepass", p.as_str()]))
                .args(&self.extra)
                .arg("--dir")
                .arg(self.dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            self.child = Some(child);
            if self.wait_ready(deadline) {
                return;
            }
            // The port may still be held by the killed one's socket for a moment: try again.
            self.kill();
            assert!(Instant::now() < deadline, "redis-server did not start on port {}", self.port);
        }
    }

    /// Kill it (`SIGKILL`): everything it held is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `true` once it answers `PING`; `false` if it exited or `deadline` passed.
    fn wait_ready(&mut self, deadline: Instant) -> bool {
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut()
                && child.try_wait().ok().flatten().is_some()
            {
                return false;
            }
            // A server with a password answers NOAUTH: it is up all the same.
            if self.command(&["PING"]).is_some_and(|r| r.starts_with("+PONG") || r.starts_with("-NOAUTH")) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// One command, its raw reply (enough for the tests' `PING`, `FLUSHALL`, `HGETALL`).
    pub fn command(&self, args: &[&str]) -> Option<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let mut out = format!("*{}\r\n", args.len());
        for a in args {
            out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        s.write_all(out.as_bytes()).ok()?;
        let mut buf = vec![0u8; 64 * 1024];
        let n = s.read(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Three masters (no replicas) sharing the 16384 slots, each a `RedisServer` in its own dir.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// A cluster whose every node says `cluster_state:ok`, or `None` when the machine has no Redis.
    pub fn start(test: &str) -> Option<RedisCluster> {
        if !installed(test, &["redis-server", "redis-cli"]) {
            return None;
        }
        // `nodes.conf` is written in each server's own `--dir`.
        let cluster_args =
            ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"]
                .map(String::from)
                .to_vec();
        let nodes: Vec<RedisServer> =
            cluster_ports(3).into_iter().map(|p| RedisServer::spawn(p, None, cluster_args.clone())).collect();
        let addresses: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let created = Command::new(program("redis-cli").unwrap())
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            created.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&created.stdout),
            String::from_utf8_lossy(&created.stderr)
        );
        let cluster = RedisCluster { nodes };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !cluster
            .nodes
            .iter()
            .all(|n| n.command(&["CLUSTER", "INFO"]).is_some_and(|i| i.contains("cluster_state:ok")))
        {
            assert!(Instant::now() < deadline, "the Redis Cluster did not reach cluster_state:ok");
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(cluster)
    }

    /// The URL of a node that does not serve `key`'s slot: a gateway given it as its seed is
    /// redirected before it learns where that key lives.
    pub fn url_of_a_node_without(&self, key: &str) -> String {
        let owner = self.owner_of(key);
        self.nodes.iter().enumerate().find(|(i, _)| *i != owner).unwrap().1.url()
    }

    /// The node that serves `key`'s slot (its index in `nodes`).
    pub fn owner_of(&self, key: &str) -> usize {
        let slot = self.nodes[0].command(&["CLUSTER", "KEYSLOT", key]).unwrap();
        let slot: u16 = slot.trim().trim_start_matches(':').parse().unwrap();
        let shards = self.nodes[0].command(&["CLUSTER", "NODES"]).unwrap();
        let port = shards
            .lines()
            .filter(|l| l.contains("master"))
            .find(|l| {
                l.split(' ').skip(8).any(|range| {
                    let (from, to) = range.split_once('-').unwrap_or((range, range));
                    matches!((from.parse::<u16>(), to.parse::<u16>()), (Ok(f), Ok(t)) if f <= slot && slot <= t)
                })
            })
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|a| a.split('@').next())
            .and_then(|a| a.rsplit(':').next())
            .and_then(|p| p.parse::<u16>().ok())
            .unwrap();
        self.nodes.iter().position(|n| n.port == port).unwrap()
    }
}

/// Free ports whose cluster bus port (port + 10000) is free too.
fn cluster_ports(n: usize) -> Vec<u16> {
    let mut ports = Vec::new();
    let mut held = Vec::new();
    for _ in 0..500 {
        if ports.len() == n {
            break;
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        if port <= 55_535
            && let Ok(bus) = std::net::TcpListener::bind(("127.0.0.1", port + 10_000))
        {
            ports.push(port);
            held.push((listener, bus));
        }
    }
    assert_eq!(ports.len(), n, "no free ports for a Redis Cluster");
    ports
}
