//! The real `ccmesh` binary as a test subject: `serve` on a free loopback port with a temp data
//! dir, its JSON log lines collected, the management CLI pointed at it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_ccmesh");

pub struct Server {
    pub child: Child,
    pub url: String,
    pub logs: Arc<Mutex<Vec<String>>>,
    /// Notified for every new log line.
    log_signal: Arc<std::sync::Condvar>,
    /// Reads stderr until the process closes it.
    reader: Option<std::thread::JoinHandle<()>>,
    pub dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

impl Server {
    /// Start `ccmesh serve` on a free loopback port and wait for its `listening` event.
    pub fn start(config: Option<&str>, env: &[(&str, &str)]) -> Server {
        Self::start_with_grace(config, env, "10")
    }

    pub fn start_with_grace(config: Option<&str>, env: &[(&str, &str)], grace_secs: &str) -> Server {
        Self::launch(Launch { config, env, grace_secs, ..Launch::default() })
            .unwrap_or_else(|logs| panic!("ccmesh did not start: {logs}"))
    }

    /// Start with every option; `Err` holds the logs of a process that exited (or never said
    /// it listens) instead.
    pub fn launch(launch: Launch<'_>) -> Result<Server, String> {
        let tmp = match launch.data_dir {
            Some(_) => None,
            None => Some(tempfile::tempdir().unwrap()),
        };
        let dir: PathBuf = match (launch.data_dir, &tmp) {
            (Some(d), _) => d.to_path_buf(),
            (None, Some(t)) => t.path().to_path_buf(),
            (None, None) => unreachable!(),
        };
        let mut cmd = match launch.shell_prefix {
            // e.g. `ulimit -n 64; umask 000;` before the gateway starts, in the same process.
            Some(prefix) => {
                let mut c = Command::new("sh");
                c.arg("-c").arg(format!("{prefix} exec \"$0\" \"$@\"")).arg(BIN);
                c
            }
            None => Command::new(BIN),
        };
        if let Some(user) = launch.as_user {
            cmd = {
                let mut c = Command::new("setpriv");
                c.args(["--reuid", user, "--regid", user, "--clear-groups", "--"]).arg(BIN);
                c
            };
        }
        cmd.args([
            "serve",
            "--listen",
            launch.listen,
            "--log-format",
            "json",
            "--shutdown-grace-secs",
            launch.grace_secs,
        ])
        .arg("--data-dir")
        .arg(&dir)
        .args(launch.args)
        .env_remove("CCMESH_ADMIN_TOKEN")
        .env_remove("CCMESH_CONFIG")
        .env_remove("CCMESH_OPEN_PROXY")
        .env_remove("CCMESH_DATABASE_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        if let Some(text) = launch.config {
            let path = launch.config_dir.unwrap_or(&dir).join("ccmesh.toml");
            std::fs::write(&path, text).unwrap();
            cmd.arg("--config").arg(&path);
        }
        for (k, v) in launch.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let logs = Arc::new(Mutex::new(Vec::new()));
        let log_signal = Arc::new(std::sync::Condvar::new());
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = logs.clone();
        let signal = log_signal.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && v["fields"]["event"] == "listening"
                {
                    let _ = tx.send(v["fields"]["addr"].as_str().unwrap_or_default().to_string());
                }
                sink.lock().unwrap().push(line);
                signal.notify_all();
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(addr) => addr,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                let _ = reader.join();
                return Err(logs.lock().unwrap().join("\n"));
            }
        };
        Ok(Server { child, url: format!("http://{addr}"), logs, log_signal, reader: Some(reader), dir, _tmp: tmp })
    }

    /// Wait (up to 20 s) for a log line, from the start, that `matches`; the line.
    pub fn wait_for_log(&self, matches: impl Fn(&Value) -> bool) -> Value {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let mut lines = self.logs.lock().unwrap();
        loop {
            if let Some(v) = lines.iter().filter_map(|l| serde_json::from_str::<Value>(l).ok()).find(|v| matches(v)) {
                return v;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            assert!(!left.is_zero(), "no such log line in:\n{}", lines.join("\n"));
            lines = self.log_signal.wait_timeout(lines, left).unwrap().0;
        }
    }

    /// Every log line so far.
    pub fn log_text(&self) -> String {
        self.logs.lock().unwrap().join("\n")
    }

    pub fn cli(&self, args: &[&str]) -> (i32, String, String) {
        self.cli_env(args, &[])
    }

    /// The CLI pointed at this gateway, with `env` set (and nothing of the test's own
    /// environment that the CLI reads besides it).
    pub fn cli_env(&self, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
        run_cli(args.iter().copied().chain(["--server", self.url.as_str()]), env)
    }

    /// Wait for the process to exit and for every line it logged.
    pub fn wait_exit(mut self) -> (std::process::ExitStatus, String) {
        let status = self.child.wait().unwrap();
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        let logs = self.logs.lock().unwrap().join("\n");
        (status, logs)
    }

    pub fn terminate(&mut self) {
        let status = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status().unwrap();
        assert!(status.success());
    }
}

/// Run the CLI with exactly `args`; `env` on top of an environment without the CLI's own
/// variables (so a developer's shell cannot change what a test sees).
pub fn run_cli<'a>(args: impl IntoIterator<Item = &'a str>, env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    for var in
        ["CCMESH_ADMIN_TOKEN", "CCMESH_ENDPOINT_API_KEY", "CCMESH_SERVER", "CCMESH_CLIENT_KEY", "CCMESH_DATABASE_URL"]
    {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How to start a gateway (`Server::launch`).
pub struct Launch<'a> {
    pub config: Option<&'a str>,
    /// Where the config file is written (default: the data dir).
    pub config_dir: Option<&'a Path>,
    pub env: &'a [(&'a str, &'a str)],
    pub grace_secs: &'a str,
    pub listen: &'a str,
    /// A data dir of the test's (default: a fresh temp dir).
    pub data_dir: Option<&'a Path>,
    /// Shell commands run before the gateway in the same process (`ulimit`, `umask`).
    pub shell_prefix: Option<&'a str>,
    /// Run as this numeric user id (and group), through `setpriv`.
    pub as_user: Option<&'a str>,
    pub args: &'a [&'a str],
}

impl Default for Launch<'_> {
    fn default() -> Self {
        Launch {
            config: None,
            config_dir: None,
            env: &[],
            grace_secs: "10",
            listen: "127.0.0.1:0",
            data_dir: None,
            shell_prefix: None,
            as_user: None,
            args: &[],
        }
    }
}
