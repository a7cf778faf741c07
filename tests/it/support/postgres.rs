//! A real PostgreSQL server for a test: `initdb` into a temp dir, `postgres` on a free
//! loopback port (Unix sockets in the temp dir, `fsync=off`: nothing here needs to survive a
//! power cut), password authentication for a `ccmesh` superuser. PostgreSQL refuses to run as
//! root, so as root the server runs as `nobody` (through `setpriv`, which also stops it if the
//! test's thread dies). Stopped on drop.
//!
//! No PostgreSQL installed: with `CI` set that fails the test (CI installs it); otherwise the
//! test says "skipped" and returns, so a machine with only Rust still passes `cargo test`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const PASSWORD: &str = "pg-test-password-5f1e";
const UNPRIVILEGED: u32 = 65534;

pub struct Postgres {
    bin: PathBuf,
    dir: tempfile::TempDir,
    pub port: u16,
    child: Option<Child>,
}

/// The newest installed server's binaries (Debian keeps them under /usr/lib/postgresql/N/bin).
fn binaries() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").is_file().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Postgres {
    /// A fresh server, or `None` (the test should return) when PostgreSQL is not installed.
    pub fn start() -> Option<Postgres> {
        let Some(bin) = binaries() else {
            assert!(std::env::var_os("CI").is_none(), "PostgreSQL is not installed (CI installs Debian's postgresql)");
            eprintln!("skipped: postgresql not installed");
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let pwfile = dir.path().join("pw");
        std::fs::write(&pwfile, PASSWORD).unwrap();
        if is_root() {
            for path in [dir.path(), &pwfile] {
                std::os::unix::fs::chown(path, Some(UNPRIVILEGED), Some(UNPRIVILEGED)).unwrap();
            }
        }
        let out = Self::command(&bin, "initdb")
            .arg("-D")
            .arg(dir.path().join("data"))
            .args(["-U", "ccmesh", "--auth=scram-sha-256", "--no-sync", "--no-instructions"])
            .arg(format!("--pwfile={}", pwfile.display()))
            .output()
            .unwrap();
        assert!(out.status.success(), "initdb failed: {}", String::from_utf8_lossy(&out.stderr));
        let mut pg = Postgres { bin, dir, port: free_port(), child: None };
        pg.resume();
        Some(pg)
    }

    /// `program` from the server's binaries, as the unprivileged user when we are root.
    fn command(bin: &Path, program: &str) -> Command {
        if is_root() {
            let mut c = Command::new("setpriv");
            let id = UNPRIVILEGED.to_string();
            c.args(["--reuid", &id, "--regid", &id, "--clear-groups", "--pdeathsig", "INT", "--"])
                .arg(bin.join(program));
            c
        } else {
            Command::new(bin.join(program))
        }
    }

    /// Start the server (again, on the same port and data) and wait until it answers.
    pub fn resume(&mut self) {
        assert!(self.child.is_none(), "already running");
        let child = Self::command(&self.bin, "postgres")
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-p", &self.port.to_string(), "-c", "listen_addresses=127.0.0.1"])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", self.dir.path().display()))
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"])
            .args(["-c", "max_connections=100", "-c", "shared_buffers=16MB"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.psql("postgres", "SELECT 1").0 {
            assert!(Instant::now() < deadline, "PostgreSQL did not start on port {}", self.port);
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stop the server (a fast shutdown: connections are cut, as when the database host goes
    /// away) and wait until it is gone.
    pub fn stop(&mut self) {
        // A frozen server (a test that failed half-way) could not act on the signal.
        self.thaw();
        let Some(mut child) = self.child.take() else { return };
        let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if child.try_wait().unwrap().is_some() {
                return;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The URL of database `db` (with the password).
    pub fn url(&self, db: &str) -> String {
        format!("postgres://ccmesh:{PASSWORD}@127.0.0.1:{}/{db}", self.port)
    }

    /// A new, empty database; its URL.
    pub fn database(&self, name: &str) -> String {
        let (ok, out) = self.psql("postgres", &format!("CREATE DATABASE {name}"));
        assert!(ok, "CREATE DATABASE {name}: {out}");
        self.url(name)
    }

    /// Run `sql` with psql over TCP: whether it worked, and what it printed (rows unaligned,
    /// without headers: `a|b`).
    pub fn psql(&self, db: &str, sql: &str) -> (bool, String) {
        let out = Command::new(self.bin.join("psql"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "ccmesh", "-d", db])
            .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .env("PGPASSWORD", PASSWORD)
            .env("PGCONNECT_TIMEOUT", "2")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text.trim().to_string())
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Postgres {
    /// The postmaster's process id.
    fn postmaster(&self) -> Option<String> {
        self.child.as_ref().map(|c| c.id().to_string())
    }

    /// The postmaster's children (its backends and helpers), by id.
    fn children(&self, postmaster: &str) -> Vec<String> {
        let out = Command::new("pgrep").args(["-P", postmaster]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_string).collect()
    }

    fn signal(signal: &str, pid: &str) {
        let _ = Command::new("kill").args([signal, pid]).status();
    }

    /// Freeze the server (SIGSTOP to each of its processes): connections stay open but nothing
    /// answers, as with a database host that hangs. `thaw` undoes it. The postmaster stops
    /// first and its children are listed after: listed before, a backend it forked in between
    /// (a gateway connecting at that moment) would stay awake and keep answering.
    pub fn freeze(&self) {
        let Some(postmaster) = self.postmaster() else { return };
        Self::signal("-STOP", &postmaster);
        for pid in self.children(&postmaster) {
            Self::signal("-STOP", &pid);
        }
    }

    pub fn thaw(&self) {
        let Some(postmaster) = self.postmaster() else { return };
        for pid in self.children(&postmaster) {
            Self::signal("-CONT", &pid);
        }
        Self::signal("-CONT", &postmaster);
    }
}
