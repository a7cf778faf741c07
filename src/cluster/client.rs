//! A small Redis client over `tokio::net::TcpStream`: the handful of commands the cluster needs
//! (scripts, a few plain commands, pub/sub), each with its own timeout, behind the fallback
//! breaker (`fallback.rs`). Why hand-written rather than the `redis` crate: docs/cluster.md.
//!
//! Connections are pooled per thread: each serving thread runs its own runtime, and a socket is
//! driven by the runtime that opened it, so a call takes an idle connection its own thread
//! opened (or opens one), and gives it back only when the call completed. A call cut short — its timeout, or its request going away — drops its
//! connection with it, so a late reply can never be read as the answer to the next command. No
//! lock is held across an `.await`: the pool and the breaker are locked only to take or put.
//!
//! The URL: `redis://[[user]:password@]host[:port][/db]`. The password is used to log in and
//! never shown: everything this module says about the server names only `host:port`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::fallback::CallBreaker;
use super::resp::{self, Value};
use super::scripts::Script;
use crate::clock::Clock;

/// Connections kept open between calls, per thread; more are opened under load and closed after.
const MAX_IDLE: usize = 32;

/// Where Redis is.
#[derive(Clone)]
pub struct Target {
    host: String,
    port: u16,
    username: Option<String>,
    password: Option<String>,
    db: u32,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        write!(f, "Target({})", self.shown())
    }
}

impl Target {
    pub fn parse(text: &str) -> Result<Target, String> {
        let url = url::Url::parse(text).map_err(|e| format!("--redis: not a URL ({e}); expected redis://host:port"))?;
        match url.scheme() {
            "redis" | "valkey" => {}
            "rediss" | "valkeys" => {
                return Err("--redis: TLS (rediss://) is not supported; reach Redis over a private network or a local TLS tunnel, with redis://".into());
            }
            other => return Err(format!("--redis: unknown scheme '{other}'; expected redis://host:port")),
        }
        let host = url.host_str().filter(|h| !h.is_empty()).ok_or("--redis: the URL names no host")?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        let db = match url.path().trim_start_matches('/') {
            "" => 0,
            n => n.parse().map_err(|_| format!("--redis: the database must be a number, not '{n}'"))?,
        };
        let decode = |s: &str| percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned();
        Ok(Target {
            host,
            port: url.port().unwrap_or(6379),
            username: Some(url.username()).filter(|u| !u.is_empty()).map(decode),
            password: url.password().map(decode),
            db,
        })
    }

    /// What may be shown: `host:port`.
    pub fn shown(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// Why a call did not give an answer.
#[derive(Clone, Debug, PartialEq)]
pub enum CallError {
    /// The fallback breaker is open: not tried.
    Unavailable,
    Timeout,
    /// The connection failed (refused, reset, closed) or spoke something that is not RESP2.
    Connection(String),
    /// Redis answered with an error.
    Reply(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Unavailable => write!(f, "not tried: Redis failed just before"),
            CallError::Timeout => write!(f, "no answer in time"),
            CallError::Connection(e) => write!(f, "{e}"),
            CallError::Reply(e) => write!(f, "Redis answered: {e}"),
        }
    }
}

/// Errors Redis gives when it cannot serve at all (starting, busy in a script, a replica that
/// lost its master): counted against it like a failed connection.
fn reply_means_down(message: &str) -> bool {
    ["LOADING", "BUSY", "MASTERDOWN", "READONLY", "CLUSTERDOWN", "TRYAGAIN"].iter().any(|p| message.starts_with(p))
}

/// One connection.
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    /// Connect and log in (`AUTH`, `SELECT`).
    pub async fn open(target: &Target) -> Result<Conn, CallError> {
        let stream = TcpStream::connect((target.host.as_str(), target.port))
            .await
            .map_err(|e| CallError::Connection(format!("cannot connect to {}: {e}", target.shown())))?;
        let _ = stream.set_nodelay(true);
        let mut conn = Conn { stream, buf: Vec::with_capacity(4096) };
        if let Some(password) = &target.password {
            let reply = match &target.username {
                Some(user) => conn.call(&["AUTH", user, password]).await?,
                None => conn.call(&["AUTH", password]).await?,
            };
            if let Value::Error(e) = reply {
                // Redis's own words, which never repeat the password.
                return Err(CallError::Connection(format!("{} refused the login: {e}", target.shown())));
            }
        }
        if target.db != 0
            && let Value::Error(e) = conn.call(&["SELECT", &target.db.to_string()]).await?
        {
            return Err(CallError::Connection(format!("{}: SELECT {}: {e}", target.shown(), target.db)));
        }
        Ok(conn)
    }

    pub async fn send<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<(), CallError> {
        self.stream.write_all(&resp::encode(args)).await.map_err(|e| CallError::Connection(e.to_string()))
    }

    /// The next reply (pub/sub messages included).
    pub async fn read(&mut self) -> Result<Value, CallError> {
        loop {
            match resp::parse(&self.buf) {
                Ok(Some((value, used))) => {
                    self.buf.drain(..used);
                    return Ok(value);
                }
                Ok(None) => {}
                Err(e) => return Err(CallError::Connection(format!("not a Redis reply: {}", e.0))),
            }
            let mut chunk = [0u8; 8192];
            let n = self.stream.read(&mut chunk).await.map_err(|e| CallError::Connection(e.to_string()))?;
            if n == 0 {
                return Err(CallError::Connection("Redis closed the connection".into()));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Send a command and read its reply (a `-ERR` reply is a value here).
    pub async fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Value, CallError> {
        self.send(args).await?;
        self.read().await
    }
}

/// The pool, the fallback breaker and the last problem, shared by every caller.
pub struct Redis {
    target: Target,
    idle: Mutex<HashMap<ThreadId, Vec<Conn>>>,
    breaker: Mutex<CallBreaker>,
    problem: Mutex<Option<String>>,
    clock: Arc<dyn Clock>,
}

impl Redis {
    pub fn new(target: Target, clock: Arc<dyn Clock>) -> Redis {
        Redis {
            target,
            idle: Mutex::new(HashMap::new()),
            breaker: Mutex::new(CallBreaker::default()),
            problem: Mutex::new(None),
            clock,
        }
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    /// What is wrong with Redis, while its breaker is open.
    pub fn problem(&self) -> Option<String> {
        let open = self.breaker.lock().unwrap_or_else(|p| p.into_inner()).is_open();
        if !open {
            return None;
        }
        let problem = self.problem.lock().unwrap_or_else(|p| p.into_inner()).clone();
        Some(problem.unwrap_or_else(|| "Redis is not answering".into()))
    }

    /// One command, within `timeout` (connecting included).
    pub async fn call<A: AsRef<[u8]> + Sync>(&self, args: &[A], timeout: Duration) -> Result<Value, CallError> {
        if !self.breaker.lock().unwrap_or_else(|p| p.into_inner()).allow(self.clock.now()) {
            return Err(CallError::Unavailable);
        }
        let thread = std::thread::current().id();
        let pooled = self.idle.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&thread).and_then(Vec::pop);
        let attempt = async {
            let mut conn = match pooled {
                Some(conn) => conn,
                None => Conn::open(&self.target).await?,
            };
            let value = conn.call(args).await?;
            Ok::<_, CallError>((conn, value))
        };
        let result = match tokio::time::timeout(timeout, attempt).await {
            Ok(r) => r,
            Err(_) => Err(CallError::Timeout),
        };
        match result {
            Ok((conn, Value::Error(e))) => {
                self.give_back(conn);
                if reply_means_down(&e) {
                    self.failed(&CallError::Reply(e.clone()));
                } else {
                    self.succeeded();
                }
                Err(CallError::Reply(e))
            }
            Ok((conn, value)) => {
                self.give_back(conn);
                self.succeeded();
                Ok(value)
            }
            Err(e) => {
                self.failed(&e);
                Err(e)
            }
        }
    }

    /// Run a script by its digest, sending its text once if Redis does not know it yet (a
    /// restarted Redis forgets every script).
    pub async fn eval(
        &self,
        script: &Script,
        keys: &[String],
        args: &[String],
        timeout: Duration,
    ) -> Result<Value, CallError> {
        let mut command: Vec<&[u8]> = Vec::with_capacity(3 + keys.len() + args.len());
        let numkeys = keys.len().to_string();
        command.push(b"EVALSHA");
        command.push(script.sha().as_bytes());
        command.push(numkeys.as_bytes());
        command.extend(keys.iter().map(|k| k.as_bytes()));
        command.extend(args.iter().map(|a| a.as_bytes()));
        match self.call(&command, timeout).await {
            Err(CallError::Reply(e)) if e.starts_with("NOSCRIPT") => {
                command[0] = b"EVAL";
                command[1] = script.text.as_bytes();
                self.call(&command, timeout).await
            }
            other => other,
        }
    }

    fn give_back(&self, conn: Conn) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let mine = idle.entry(std::thread::current().id()).or_default();
        if mine.len() < MAX_IDLE {
            mine.push(conn);
        }
    }

    fn succeeded(&self) {
        self.breaker.lock().unwrap_or_else(|p| p.into_inner()).success();
    }

    fn failed(&self, e: &CallError) {
        let now = self.clock.now();
        self.breaker.lock().unwrap_or_else(|p| p.into_inner()).failure(now);
        *self.problem.lock().unwrap_or_else(|p| p.into_inner()) = Some(match e {
            CallError::Timeout => format!("{} did not answer in time", self.target.shown()),
            other => other.to_string(),
        });
        // Pooled connections to a server that just failed are likely dead too.
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_read_and_the_password_never_shown() {
        let t = Target::parse("redis://:s3cr%40t@10.0.0.5:6380/2").unwrap();
        assert_eq!((t.host.as_str(), t.port, t.db), ("10.0.0.5", 6380, 2));
        assert_eq!(t.password.as_deref(), Some("s3cr@t"));
        assert_eq!(t.username, None);
        assert_eq!(t.shown(), "10.0.0.5:6380");
        assert!(!format!("{t:?}").contains("s3cr"));
        let t = Target::parse("redis://ops:pw@localhost").unwrap();
        assert_eq!((t.username.as_deref(), t.port), (Some("ops"), 6379));
        assert_eq!(Target::parse("redis://[::1]:7000").unwrap().shown(), "[::1]:7000");
        assert!(Target::parse("rediss://h:1").unwrap_err().contains("TLS"));
        assert!(Target::parse("http://h").is_err());
        assert!(Target::parse("redis://h/x").unwrap_err().contains("number"));
    }

    #[test]
    fn errors_of_a_server_that_cannot_serve_count_against_it() {
        assert!(reply_means_down("LOADING Redis is loading the dataset in memory"));
        assert!(reply_means_down("BUSY Redis is busy running a script"));
        assert!(!reply_means_down("ERR wrong number of arguments"));
        assert!(!reply_means_down("NOSCRIPT No matching script"));
    }
}
