//! A real `redis-server` for the cluster tests: unprivileged, on 127.0.0.1 and a free port, in a
//! temp dir, with nothing persisted (`--save "" --appendonly no`); killed on drop, and restartable
//! on the same port (a Redis outage in the middle of a test).
//!
//! Without `redis-server` on PATH the tests that need it are skipped with a line on stderr — a
//! machine with only Rust still passes `cargo test` — except in CI (`CI` set), where that fails.

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
}

/// Where `redis-server` is, if anywhere on PATH.
fn binary() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("redis-server")).find(|p| p.is_file())
}

impl RedisServer {
    /// A running Redis, or `None` when the machine has none (the caller returns: skipped).
    pub fn start(test: &str) -> Option<RedisServer> {
        Self::start_with(test, None)
    }

    /// `start`, with a password clients must log in with.
    pub fn start_with(test: &str, password: Option<&str>) -> Option<RedisServer> {
        if binary().is_none() {
            assert!(std::env::var_os("CI").is_none(), "{test}: redis-server is not installed, and CI is set");
            eprintln!("{test}: skipped: redis-server not installed");
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let password = password.map(str::to_string);
        let mut server = RedisServer { child: None, port, dir: tempfile::tempdir().unwrap(), password };
        server.restart();
        Some(server)
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
