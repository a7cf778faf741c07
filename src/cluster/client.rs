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
//!
//! Redis Cluster: the URL names one node, the seed. A keyed call goes to the node the slot map
//! (`slots.rs`) says serves its key's slot, or to the seed while the map does not know; a
//! `-MOVED` reply teaches the map and the call is sent once more to the named node, an `-ASK`
//! reply sends it there once (after `ASKING`) without teaching the map — at most
//! `MAX_REDIRECTS` per call, within the call's one timeout. Connections are pooled per thread and
//! per node; scripts are cached by each node, so `EVALSHA`'s fallback to `EVAL` happens per node.
//! A node that fails (its timeout included) has its slots forgotten, so after a failover the seed
//! is asked again and redirects to the promoted master. A standalone Redis never redirects: the map stays empty and every call goes to the seed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::fallback::CallBreaker;
use super::resp::{self, Value};
use super::scripts::Script;
use super::slots::{self, Node, Redirect, SlotMap};
use crate::clock::Clock;

/// Connections kept open between calls, per thread and node; more are opened under load and
/// closed after.
const MAX_IDLE: usize = 32;
/// Redirects one call follows (a MOVED, then an ASK while that slot migrates): a cluster whose
/// nodes disagree cannot bounce a call around for its whole timeout.
const MAX_REDIRECTS: usize = 2;

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
        self.seed().to_string()
    }

    /// The node the URL names.
    pub fn seed(&self) -> Node {
        Node { host: self.host.clone(), port: self.port }
    }

    /// The same login, on another node of a Redis Cluster.
    fn on(&self, node: &Node) -> Target {
        Target { host: node.host.clone(), port: node.port, ..self.clone() }
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
            let hint =
                if e.contains("cluster") { " (Redis Cluster has only database 0: drop it from --redis)" } else { "" };
            return Err(CallError::Connection(format!("{}: SELECT {}: {e}{hint}", target.shown(), target.db)));
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

/// Idle connections are this thread's, to this node.
type PoolKey = (ThreadId, Arc<Node>);

/// The pool, the slot map, the fallback breaker and the last problem, shared by every caller.
pub struct Redis {
    target: Target,
    seed: Arc<Node>,
    idle: Mutex<HashMap<PoolKey, Vec<Conn>>>,
    slots: Mutex<SlotMap>,
    breaker: Mutex<CallBreaker>,
    problem: Mutex<Option<String>>,
    clock: Arc<dyn Clock>,
}

impl Redis {
    pub fn new(target: Target, clock: Arc<dyn Clock>) -> Redis {
        Redis {
            seed: Arc::new(target.seed()),
            target,
            idle: Mutex::new(HashMap::new()),
            slots: Mutex::new(SlotMap::default()),
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

    /// One command, within `timeout` (connecting and following redirects included).
    pub async fn call<A: AsRef<[u8]> + Sync>(&self, args: &[A], timeout: Duration) -> Result<Value, CallError> {
        if !self.breaker.lock().unwrap_or_else(|p| p.into_inner()).allow(self.clock.now()) {
            return Err(CallError::Unavailable);
        }
        // The node the call waits on, to forget its slots if it fails (its timeout included).
        let waiting_on = Mutex::new(None);
        let result = match tokio::time::timeout(timeout, self.routed(args, &waiting_on)).await {
            Ok(r) => r,
            Err(_) => Err(CallError::Timeout),
        };
        if result.is_err()
            && let Some(node) = waiting_on.into_inner().unwrap_or_else(|p| p.into_inner())
            && node != self.seed
        {
            self.slots.lock().unwrap_or_else(|p| p.into_inner()).forget(&node);
        }
        match result {
            Ok(Value::Error(e)) => {
                if reply_means_down(&e) {
                    self.failed(&CallError::Reply(e.clone()));
                } else {
                    self.succeeded();
                }
                Err(CallError::Reply(e))
            }
            Ok(value) => {
                self.succeeded();
                Ok(value)
            }
            Err(e) => {
                self.failed(&e);
                Err(e)
            }
        }
    }

    /// Send to the node that serves the command's key, following a bounded number of redirects.
    async fn routed<A: AsRef<[u8]> + Sync>(
        &self,
        args: &[A],
        waiting_on: &Mutex<Option<Arc<Node>>>,
    ) -> Result<Value, CallError> {
        let mut node = self.node_for(args);
        let mut asking = false;
        for _ in 0..=MAX_REDIRECTS {
            *waiting_on.lock().unwrap_or_else(|p| p.into_inner()) = Some(node.clone());
            let value = self.call_on(&node, args, asking).await?;
            *waiting_on.lock().unwrap_or_else(|p| p.into_inner()) = None;
            let Value::Error(e) = &value else { return Ok(value) };
            let Some(redirect) = slots::parse_redirect(e, &node) else { return Ok(value) };
            asking = matches!(redirect, Redirect::Ask { .. });
            if let Redirect::Moved { slot, node: to } = &redirect {
                self.slots.lock().unwrap_or_else(|p| p.into_inner()).learn(*slot, to);
            }
            node = Arc::new(redirect.node().clone());
        }
        Err(CallError::Connection(format!(
            "Redis Cluster redirected a call more than {MAX_REDIRECTS} times (last to {node})"
        )))
    }

    /// Where a command goes first: the owner of its key's slot when the map knows it, else the seed.
    fn node_for<A: AsRef<[u8]>>(&self, args: &[A]) -> Arc<Node> {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if slots.is_empty() {
            return self.seed.clone();
        }
        slots::command_key(args).and_then(|key| slots.owner(slots::key_slot(key))).unwrap_or_else(|| self.seed.clone())
    }

    /// One command on one node, over a connection this thread pooled for it (or a new one). The
    /// connection goes back only once its reply is read: a call cut short drops it.
    async fn call_on<A: AsRef<[u8]>>(&self, node: &Arc<Node>, args: &[A], asking: bool) -> Result<Value, CallError> {
        let pool_key = (std::thread::current().id(), node.clone());
        let pooled = self.idle.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&pool_key).and_then(Vec::pop);
        let mut conn = match pooled {
            Some(conn) => conn,
            None => Conn::open(&self.target.on(node)).await?,
        };
        if asking {
            let reply = conn.call(&["ASKING"]).await?;
            if let Value::Error(_) = reply {
                self.give_back(pool_key, conn);
                return Ok(reply);
            }
        }
        let value = conn.call(args).await?;
        self.give_back(pool_key, conn);
        Ok(value)
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

    fn give_back(&self, pool_key: PoolKey, conn: Conn) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let mine = idle.entry(pool_key).or_default();
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
        // Pooled connections to a server that just failed are likely dead too (every node's: the
        // call's timeout does not say which node it was waiting on).
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

    /// A stand-in cluster node on 127.0.0.1: answers each command with what `reply` says (raw
    /// RESP; nothing: it closes the connection), and logs `(its port, the command, whether ASKING came first on that connection)`.
    type Log = Arc<Mutex<Vec<(u16, String, bool)>>>;

    async fn fake_node(
        listener: tokio::net::TcpListener,
        log: Log,
        reply: impl Fn(&[Vec<u8>], bool) -> String + Send + Sync + 'static,
    ) {
        let port = listener.local_addr().unwrap().port();
        let reply = Arc::new(reply);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (log, reply) = (log.clone(), reply.clone());
                tokio::spawn(async move {
                    let (mut buf, mut asking) = (Vec::new(), false);
                    loop {
                        while let Ok(Some((Value::Array(items), used))) = resp::parse(&buf) {
                            buf.drain(..used);
                            let args: Vec<Vec<u8>> =
                                items.iter().filter_map(|v| v.text()).map(String::into_bytes).collect();
                            let name = String::from_utf8_lossy(&args[0]).to_uppercase();
                            if name == "ASKING" {
                                asking = true;
                                socket.write_all(b"+OK\r\n").await.unwrap();
                                continue;
                            }
                            log.lock().unwrap().push((port, name, asking));
                            let answer = reply(&args, asking);
                            if answer.is_empty() {
                                return; // a node that went away
                            }
                            socket.write_all(answer.as_bytes()).await.unwrap();
                            asking = false;
                        }
                        let mut chunk = [0u8; 4096];
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                });
            }
        });
    }

    async fn listeners() -> (tokio::net::TcpListener, u16, tokio::net::TcpListener, u16) {
        let a = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let b = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (pa, pb) = (a.local_addr().unwrap().port(), b.local_addr().unwrap().port());
        (a, pa, b, pb)
    }

    fn client(port: u16) -> Redis {
        Redis::new(Target::parse(&format!("redis://127.0.0.1:{port}")).unwrap(), Arc::new(crate::clock::SystemClock))
    }

    const T: Duration = Duration::from_secs(2);

    #[tokio::test]
    async fn a_moved_reply_is_followed_and_remembered_and_unkeyed_commands_stay_on_the_seed() {
        let (a, pa, b, pb) = listeners().await;
        let log = Log::default();
        let slot = slots::key_slot(b"ccmesh:{cluster}:x");
        fake_node(a, log.clone(), move |args, _| match args[0].as_slice() {
            b"PING" => "+PONG\r\n".into(),
            _ => format!("-MOVED {slot} 127.0.0.1:{pb}\r\n"),
        })
        .await;
        fake_node(b, log.clone(), |_, _| "$2\r\nok\r\n".into()).await;
        let redis = client(pa);
        for _ in 0..3 {
            assert_eq!(redis.call(&["GET", "ccmesh:{cluster}:x"], T).await, Ok(Value::Bulk(b"ok".to_vec())));
        }
        assert_eq!(redis.call(&["PING"], T).await, Ok(Value::Simple("PONG".into())));
        let seen: Vec<(u16, String)> = log.lock().unwrap().iter().map(|(p, c, _)| (*p, c.clone())).collect();
        let get = |p| (p, "GET".to_string());
        assert_eq!(
            seen,
            [get(pa), get(pb), get(pb), get(pb), (pa, "PING".into())],
            "after one MOVED, straight to the node that serves the slot"
        );
        // Another key of the same tag goes there too.
        assert!(redis.call(&["HGET", "ccmesh:{cluster}:y", "f"], T).await.is_ok());
        assert_eq!(log.lock().unwrap().last().unwrap().0, pb);
        assert_eq!(redis.problem(), None);
    }

    #[tokio::test]
    async fn an_ask_reply_is_followed_once_with_asking_and_not_remembered() {
        let (a, pa, b, pb) = listeners().await;
        let log = Log::default();
        fake_node(a, log.clone(), move |_, _| format!("-ASK 7 127.0.0.1:{pb}\r\n")).await;
        // B serves the key only to a client that said ASKING, as a node importing a slot does.
        fake_node(
            b,
            log.clone(),
            move |_, asking| {
                if asking { ":1\r\n".into() } else { format!("-MOVED 7 127.0.0.1:{pa}\r\n") }
            },
        )
        .await;
        let redis = client(pa);
        for _ in 0..2 {
            assert_eq!(redis.call(&["INCR", "k"], T).await, Ok(Value::Int(1)));
        }
        let seen: Vec<(u16, bool)> = log.lock().unwrap().iter().map(|(p, _, asking)| (*p, *asking)).collect();
        assert_eq!(seen, [(pa, false), (pb, true), (pa, false), (pb, true)], "the map kept the slot on A");
    }

    #[tokio::test]
    async fn nodes_that_redirect_to_each_other_end_the_call_soon_and_count_against_redis() {
        let (a, pa, b, pb) = listeners().await;
        let log = Log::default();
        fake_node(a, log.clone(), move |_, _| format!("-MOVED 7 127.0.0.1:{pb}\r\n")).await;
        fake_node(b, log.clone(), move |_, _| format!("-MOVED 7 127.0.0.1:{pa}\r\n")).await;
        let redis = client(pa);
        let started = std::time::Instant::now();
        match redis.call(&["GET", "k"], T).await {
            Err(CallError::Connection(e)) => assert!(e.contains("redirected"), "{e}"),
            other => panic!("{other:?}"),
        }
        assert!(started.elapsed() < T, "not the whole timeout");
        assert_eq!(log.lock().unwrap().len(), 1 + MAX_REDIRECTS);
    }

    #[tokio::test]
    async fn a_script_unknown_to_the_node_that_serves_its_slot_is_sent_there() {
        let (a, pa, b, pb) = listeners().await;
        let log = Log::default();
        let slot = slots::key_slot(b"{key:alice}:requests");
        fake_node(a, log.clone(), move |_, _| format!("-MOVED {slot} 127.0.0.1:{pb}\r\n")).await;
        fake_node(b, log.clone(), |args, _| match args[0].as_slice() {
            b"EVALSHA" => "-NOSCRIPT No matching script\r\n".into(),
            _ => ":42\r\n".into(),
        })
        .await;
        let redis = client(pa);
        let script = Script::new("return 42");
        let keys = ["{key:alice}:requests".to_string()];
        assert_eq!(redis.eval(&script, &keys, &[], T).await, Ok(Value::Int(42)));
        let seen: Vec<(u16, String)> = log.lock().unwrap().iter().map(|(p, c, _)| (*p, c.clone())).collect();
        assert_eq!(seen, [(pa, "EVALSHA".into()), (pb, "EVALSHA".into()), (pb, "EVAL".into())]);
    }

    #[tokio::test]
    async fn a_node_that_fails_is_forgotten_and_its_slots_asked_of_the_seed_again() {
        let (a, pa, b, pb) = listeners().await;
        let log = Log::default();
        let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen_by_a = asked.clone();
        let slot = slots::key_slot(b"k");
        // A redirects the first call to B; after B has gone (a failover), A serves the slot.
        fake_node(a, log.clone(), move |_, _| {
            if seen_by_a.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 0 {
                format!("-MOVED {slot} 127.0.0.1:{pb}\r\n")
            } else {
                ":2\r\n".into()
            }
        })
        .await;
        let served = Arc::new(std::sync::atomic::AtomicBool::new(false));
        fake_node(b, log.clone(), move |_, _| {
            if served.swap(true, std::sync::atomic::Ordering::Relaxed) { String::new() } else { ":1\r\n".into() }
        })
        .await;
        let redis = client(pa);
        assert_eq!(redis.call(&["INCR", "k"], T).await, Ok(Value::Int(1)));
        assert!(matches!(redis.call(&["INCR", "k"], T).await, Err(CallError::Connection(_))));
        assert_eq!(redis.call(&["INCR", "k"], T).await, Ok(Value::Int(2)), "asked of the seed again");
        let ports: Vec<u16> = log.lock().unwrap().iter().map(|(p, _, _)| *p).collect();
        assert_eq!(ports, [pa, pb, pb, pa]);
    }
}
