//! The HTTP server: one router for the proxy (`/v1/*`), the admin API (`/api/*`), liveness
//! (`/health`) and the dashboard (`/`); TCP_NODELAY on every accepted socket; one serving thread
//! per core; graceful shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{any, get};
use std::sync::atomic::{AtomicUsize, Ordering};

use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinSet;

use crate::config::Limits;
use crate::gateway::Gateway;
use crate::{admin, dashboard, proxy};

pub mod background;
pub mod balance;
pub mod cap;
pub mod conn;
mod sliced;
mod stop;
use balance::Balance;
use conn::{Activity, ConnTimers, Counted, TimedIo};
use stop::{Stop, StopSignal};

/// What every serving thread needs to admit a connection: the limits in force now (read from
/// the live settings for each new connection), the count of client connections open across
/// all threads, and each thread's share of them (`balance.rs`).
#[derive(Clone)]
pub struct Admission {
    limits: Arc<dyn Fn() -> Limits + Send + Sync>,
    open: Arc<AtomicUsize>,
    cap: Arc<cap::CapWatch>,
    balance: Arc<Balance>,
}

impl Admission {
    /// For one serving thread.
    pub fn new(limits: impl Fn() -> Limits + Send + Sync + 'static) -> Admission {
        Admission {
            limits: Arc::new(limits),
            open: Arc::new(AtomicUsize::new(0)),
            cap: Arc::default(),
            balance: Arc::new(Balance::new(1)),
        }
    }

    fn for_gateway(gw: &Arc<Gateway>, threads: usize) -> Admission {
        let open = gw.open_connections.clone();
        let cap = gw.connection_cap.clone();
        let balance = gw.serving_threads.get_or_init(|| Arc::new(Balance::new(threads))).clone();
        let gw = gw.clone();
        Admission { limits: Arc::new(move || gw.snapshot().settings.limits.clone()), open, cap, balance }
    }
}

/// One open client connection in the count; dropped when the connection closes, when it may
/// end an episode at the cap (`cap.rs`).
struct Open {
    open: Arc<AtomicUsize>,
    cap: Arc<cap::CapWatch>,
    max_connections: usize,
}

impl Drop for Open {
    fn drop(&mut self) {
        let left = self.open.fetch_sub(1, Ordering::AcqRel) - 1;
        if self.cap.closed(left, self.max_connections) {
            tracing::info!(
                event = "connection_cap_cleared",
                connections = left,
                max_connections = self.max_connections,
                past_cap = self.cap.connections_past_cap(),
                "room for connections again; new connections are served"
            );
        }
    }
}

/// Whether a request goes from the connection straight to `proxy::handle` instead of through
/// the router: the same requests the router's `/v1/{*rest}` and `/v1beta/{*rest}` routes give
/// it (every method but `HEAD`, whose body the router strips), so nothing answers differently,
/// but a proxy request does not pay for the route match, its path parameters and the boxed
/// handler future (~4 k instructions of a request that costs ~90 k).
pub fn straight_to_proxy(method: &axum::http::Method, path: &str) -> bool {
    let rest = match path.strip_prefix("/v1/") {
        Some(rest) => rest,
        None => match path.strip_prefix("/v1beta/") {
            Some(rest) => rest,
            None => return false,
        },
    };
    !rest.is_empty() && rest != "models" && method != axum::http::Method::HEAD
}

pub fn router(gw: Arc<Gateway>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route(
            "/metrics",
            get(metrics).route_layer(axum::middleware::from_fn_with_state(gw.clone(), admin::auth::require_admin)),
        )
        .route("/v1/models", get(proxy::models::list_models))
        // Authenticated by the client key, from any Host (SPEC §15.7): outside the admin guard.
        .route("/api/me", get(admin::keys::me))
        .route("/v1/{*rest}", any(proxy::handle))
        .route("/v1beta/models", get(proxy::models::list_models))
        .route("/v1beta/{*rest}", any(proxy::handle))
        .merge(admin::router(gw.clone()))
        .merge(dashboard::router(gw.clone()))
        .fallback(proxy::not_found)
        .with_state(gw)
}

/// `GET /metrics`: the Prometheus exposition, with what is read at scrape time (breaker states,
/// dropped records) taken from the live gateway.
async fn metrics(axum::extract::State(gw): axum::extract::State<Arc<Gateway>>) -> axum::response::Response {
    use crate::observe::metrics::{CONTENT_TYPE, Scrape};
    use axum::response::IntoResponse;
    // Requests answered a moment ago are counted once their records come (`promises_kept`).
    gw.events.records().promises_kept(Duration::from_millis(100)).await;
    let snapshot = gw.snapshot();
    let metrics = gw.events.metrics();
    // The vocabulary of bounded labels follows the configuration.
    metrics.configure(&snapshot);
    let breakers = snapshot.endpoints.iter().map(|e| (e.config.name.clone(), e.breaker.view().circuit)).collect();
    let now = crate::keys::now_ms(&*gw.clock);
    let keys = snapshot.keys.all().iter().map(|k| (k.name.clone(), gw.limiter.usage(&k.name, now))).collect();
    let cluster_fallbacks = gw.cluster.as_ref().map(|c| c.fallbacks()).unwrap_or_default();
    let body = metrics.render_scrape(&Scrape {
        breakers,
        records_dropped: gw.events.records().dropped(),
        connections_open: gw.open_connections.load(Ordering::Relaxed),
        connections_past_cap: gw.connection_cap.connections_past_cap(),
        keys,
        cluster_fallbacks,
    });
    ([(axum::http::header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response()
}

/// Liveness (SPEC §15.8): always 200 while the gateway serves; storage trouble is named, so a
/// monitor sees it, without turning the gateway "down" while the proxy works.
async fn health(axum::extract::State(gw): axum::extract::State<Arc<Gateway>>) -> axum::Json<serde_json::Value> {
    let mut body = serde_json::json!({"status": "ok"});
    if let Some(problem) = gw.storage_problem() {
        body["storage"] = serde_json::Value::String(format!("degraded: {problem}"));
    }
    if gw.cluster.as_ref().is_some_and(|c| c.problem().is_some()) {
        body["cluster"] = serde_json::Value::String("degraded".into());
    }
    axum::Json(body)
}

/// What an idle serving thread does, and when, counted from its last connection closing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IdleStep {
    /// Give the memory of the work just done back to the system (`idle_memory`).
    ReleaseMemory,
    /// Every pooled upstream connection of this thread has now been unused for the pool's idle
    /// timeout: close them all now (hyper would sweep them only at its next check, up to another
    /// timeout later). Their tasks end on this thread's next turns; the next step then returns
    /// what they held.
    CloseIdleUpstreams,
}

/// The idle schedule. After its last step a thread is not woken again until it next serves a
/// connection.
const IDLE_STEPS: [(Duration, IdleStep); 3] = [
    (Duration::from_secs(1), IdleStep::ReleaseMemory),
    (crate::proxy::upstream::POOL_IDLE_TIMEOUT, IdleStep::CloseIdleUpstreams),
    (crate::proxy::upstream::POOL_IDLE_TIMEOUT.saturating_add(Duration::from_secs(1)), IdleStep::ReleaseMemory),
];

/// Serving threads when none are configured: one per CPU core.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// Serve until `shutdown` resolves, then stop accepting and give in-flight requests (streams
/// included) up to `grace` to finish. One serving thread per core (see `serve_with`).
pub async fn serve(
    listener: TcpListener,
    gw: Arc<Gateway>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    serve_with(listener, gw, shutdown, grace, default_workers()).await
}

/// Thread per core: `workers` serving threads, each with its own single-threaded runtime and its
/// own upstream connection pool, accept connections from the one listening socket and serve
/// them. A request, its upstream exchange and its answer then run on one thread without waking
/// another: on a 2-vCPU VM the multi-threaded scheduler's cross-thread wake-ups cost ~30 µs per
/// request at concurrency 1, and handing each accepted connection from an acceptor to a serving
/// thread cost a wake-up of both per connection (BENCHMARKS.md). Every serving thread waits on
/// the listener; the first to take a new connection serves it, so a busy thread leaves new
/// connections to an idle one.
pub async fn serve_with(
    listener: TcpListener,
    gw: Arc<Gateway>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
    workers: usize,
) -> std::io::Result<()> {
    let gw_events = gw.events.clone();
    let admission = Admission::for_gateway(&gw, workers.max(1));
    let app = App { router: router(gw.clone()), proxy: Some(gw.clone()) };
    let stop = StopSignal::new();
    // However this function ends (even dropped mid-wait), no serving thread outlives it.
    let _stop_all = StopNowOnDrop(stop.clone());
    if let Ok(addr) = listener.local_addr() {
        let _ = gw.listen_addr.set(addr);
    }
    let listener = listener.into_std()?;
    let mut pool = Vec::new();
    for n in 0..admission.balance.threads() {
        pool.push(Worker::start(
            n,
            listener.try_clone()?,
            app.clone(),
            admission.clone(),
            gw.client.clone(),
            stop.clone(),
        )?);
    }
    drop(listener);
    let background = background::Background::start(&gw);

    shutdown.await;
    background.stop().await;
    stop.set(Stop::Draining);
    // Each thread closes its handle on the listening socket as it sees the stop: once all have,
    // new connections are refused.
    for worker in &mut pool {
        let _ = (&mut worker.not_listening).await;
    }
    tracing::info!(
        event = "shutdown_started",
        grace_secs = grace.as_secs_f64(),
        "no longer accepting connections; waiting for in-flight requests"
    );
    // Live-event streams never end on their own: close them so they do not hold the drain.
    gw_events.live().close();
    let finished: Vec<_> = pool.into_iter().map(|w| w.done).collect();
    let drained = tokio::time::timeout(grace, futures_util::future::join_all(finished)).await;
    if drained.is_err() {
        tracing::warn!(event = "shutdown_forced", "grace period over; closing remaining connections");
        stop.set(Stop::Now);
    }
    Ok(())
}

struct StopNowOnDrop(Arc<StopSignal>);

impl Drop for StopNowOnDrop {
    fn drop(&mut self) {
        self.0.set(Stop::Now);
    }
}

fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind as K;
    matches!(e.kind(), K::ConnectionRefused | K::ConnectionAborted | K::ConnectionReset)
}

/// What a connection is served by: the router, and the gateway whose proxy paths skip it
/// (`straight_to_proxy`; `None` in tests that serve a plain router).
#[derive(Clone)]
struct App {
    router: Router,
    proxy: Option<Arc<Gateway>>,
}

/// One serving thread, as `serve_with` sees it.
struct Worker {
    /// Resolves once the thread has closed its handle on the listening socket.
    not_listening: oneshot::Receiver<()>,
    /// Resolves once every connection of the thread has closed.
    done: oneshot::Receiver<()>,
}

impl Worker {
    fn start(
        n: usize,
        listener: std::net::TcpListener,
        app: App,
        admission: Admission,
        client: crate::proxy::upstream::UpstreamClient,
        stop: Arc<StopSignal>,
    ) -> std::io::Result<Worker> {
        let (not_listening_tx, not_listening) = oneshot::channel();
        let (done_tx, done) = oneshot::channel();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        std::thread::Builder::new().name(format!("ccmesh-worker-{n}")).spawn(move || {
            client.install_on_this_thread();
            let on_idle = move |step: IdleStep| match step {
                IdleStep::ReleaseMemory => crate::idle_memory::release(),
                IdleStep::CloseIdleUpstreams => client.close_idle_connections_on_this_thread(),
            };
            runtime.block_on(async move {
                match TcpListener::from_std(listener) {
                    Ok(listener) => {
                        serve_connections(listener, n, app, admission, stop, not_listening_tx, on_idle).await
                    }
                    Err(e) => {
                        tracing::error!(event = "accept_failed", error = %e, "a serving thread cannot use the listener");
                    }
                }
            });
            let _ = done_tx.send(());
        })?;
        Ok(Worker { not_listening, done })
    }
}

/// Accept and serve connections until the stop, then finish the ones open (`Stop::Draining`) or
/// drop them (`Stop::Now`).
async fn serve_connections(
    listener: TcpListener,
    thread: usize,
    app: App,
    admission: Admission,
    stop: Arc<StopSignal>,
    not_listening: oneshot::Sender<()>,
    mut on_idle: impl FnMut(IdleStep),
) {
    let mut tasks = JoinSet::new();
    // The idle schedule (`IDLE_STEPS`): armed when the last connection closes, disarmed by the
    // next one.
    let mut idle_since: Option<tokio::time::Instant> = None;
    let mut steps_done = 0;
    let idle_timer = tokio::time::sleep(Duration::ZERO);
    let mut idle_timer = std::pin::pin!(idle_timer);
    let mut watch = stop.watch();
    // A file descriptor kept in reserve: when the process runs out, it is given up to accept one
    // more connection, which is answered (`/health`, or 503) and closed, so running out of
    // descriptors never silences the gateway.
    let mut reserve = reserve_descriptor();
    while stop.get() == Stop::Running {
        if reserve.is_none() {
            reserve = reserve_descriptor();
        }
        // Holding more than its share, the thread leaves new connections to the others until a
        // count changes (looked at again after starting to wait, so no change is missed).
        let balance = &admission.balance;
        let rebalanced = (!balance.may_accept(thread)).then(|| balance.changed(thread));
        let rebalanced = rebalanced.filter(|_| !balance.may_accept(thread));
        let accepting = rebalanced.is_none();
        let rebalanced = futures_util::future::OptionFuture::from(rebalanced);
        tokio::select! {
            accepted = listener.accept(), if accepting => match accepted {
                Ok((tcp, _)) => {
                    idle_since = None;
                    // Counted at once, not when the task first runs: a burst is accepted in one go.
                    let on_thread = admission.balance.opened(thread);
                    tasks.spawn(serve_connection(tcp, on_thread, app.clone(), admission.clone(), false, stop.clone()));
                }
                // The connection died before it was accepted: nothing to do.
                Err(e) if is_connection_error(&e) => {}
                Err(e) if out_of_descriptors(&e) && reserve.is_some() => {
                    tracing::warn!(event = "accept_failed", error = %e, "out of file descriptors; answering with the reserve descriptor");
                    drop(reserve.take());
                    if let Ok((tcp, _)) = listener.accept().await {
                        idle_since = None;
                        let on_thread = admission.balance.opened(thread);
                        tasks.spawn(serve_connection(tcp, on_thread, app.clone(), admission.clone(), true, stop.clone()));
                    }
                }
                // Out of descriptors with the reserve in use, or similar: wait a little instead
                // of spinning on the error; closing connections frees descriptors meanwhile.
                Err(e) => {
                    tracing::error!(event = "accept_failed", error = %e, "cannot accept connections; retrying shortly");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = rebalanced, if !accepting => {}
            _ = watch.changed_from(Stop::Running) => {}
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {
                if tasks.is_empty() {
                    let now = tokio::time::Instant::now();
                    idle_since = Some(now);
                    steps_done = 0;
                    idle_timer.as_mut().reset(now + IDLE_STEPS[0].0);
                }
            }
            () = idle_timer.as_mut(), if idle_since.is_some() => {
                if let Some((_, step)) = IDLE_STEPS.get(steps_done) {
                    on_idle(*step);
                }
                steps_done += 1;
                match (idle_since, IDLE_STEPS.get(steps_done)) {
                    (Some(since), Some((after, _))) => idle_timer.as_mut().reset(since + *after),
                    _ => idle_since = None,
                }
            }
        }
    }
    drop(listener);
    let _ = not_listening.send(());
    // Drain until every connection has closed, or drop them all at `Stop::Now`.
    while stop.get() != Stop::Now {
        tokio::select! {
            next = tasks.join_next() => if next.is_none() { return },
            _ = watch.changed_from(Stop::Draining) => {}
        }
    }
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
}

fn out_of_descriptors(e: &std::io::Error) -> bool {
    // EMFILE (the process's limit) and ENFILE (the system's).
    matches!(e.raw_os_error(), Some(24 | 23))
}

fn reserve_descriptor() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

/// Serve one connection. `past_descriptors`: accepted with the reserve descriptor, so it is
/// treated as past the connection cap whatever the count says.
async fn serve_connection(
    tcp: TcpStream,
    _on_thread: balance::OpenOnThread,
    app: App,
    admission: Admission,
    past_descriptors: bool,
    stop: Arc<StopSignal>,
) {
    let _ = tcp.set_nodelay(true);
    let tcp_peer = tcp.peer_addr().ok();
    let limits = (admission.limits)();
    let open = admission.open.fetch_add(1, Ordering::AcqRel) + 1;
    let _open =
        Open { open: admission.open.clone(), cap: admission.cap.clone(), max_connections: limits.max_connections };
    let overloaded = past_descriptors || open > limits.max_connections;
    if overloaded && admission.cap.past_cap() {
        tracing::warn!(
            event = "connection_cap_reached",
            connections = open,
            max_connections = limits.max_connections,
            reason = if past_descriptors { "file_descriptors" } else { "max_connections" },
            "at the connection cap: new connections get 503 (but /health and /api/status) until some close; raise limits.max_connections if this load is expected"
        );
    }
    let activity = Arc::new(Activity::opened_now());
    let timers = ConnTimers { header_read: limits.header_read_timeout, keepalive: limits.keepalive_timeout };
    let io = TimedIo::new(tcp, activity.clone(), timers);
    let service = Counted {
        inner: TowerToHyperService::new(app.router),
        proxy: app.proxy,
        peer: tcp_peer,
        activity,
        body_read_timeout: limits.body_read_timeout,
        overloaded,
    };
    let mut builder = http1::Builder::new();
    // hyper's own limits sit above the gateway's (100 headers, 64 KiB), which hyper enforces
    // with a 431 that `TimedIo` gives a JSON body.
    builder.max_headers(100).max_buf_size(64 * 1024);
    // A connection over the cap is answered and closed, not kept.
    builder.keep_alive(!overloaded);
    // One flat buffer and one `write` per flush, not hyper's queue of buffers and `writev`: less
    // CPU per request and per streamed event (BENCHMARKS.md). The answer's body is handed over in
    // slices (`CountedBody`), so that buffer never grows past its first 8 KiB.
    builder.writev(false);
    let connection = builder.serve_connection(TokioIo::new(io), service);
    let mut connection = std::pin::pin!(connection.with_upgrades());
    let mut watch = stop.watch();
    let mut draining = false;
    // Checked on every wake-up of the connection (for a stream: every event), hence `StopWatch`.
    std::future::poll_fn(|cx| {
        if !draining && watch.poll_get(cx) != Stop::Running {
            draining = true;
            connection.as_mut().graceful_shutdown();
        }
        connection.as_mut().poll(cx).map(|_| ())
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client connection to `addr` whose end the test can wait for: it sends nothing, closes
    /// its sending side, and reads until the server has closed the connection too.
    async fn connect_and_close(addr: std::net::SocketAddr) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut client = TcpStream::connect(addr).await.unwrap();
        client.shutdown().await.unwrap();
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
    }

    /// Limits that let an idle test connection stay open for the whole test.
    fn patient() -> Admission {
        let hour = Duration::from_secs(3600);
        Admission::new(move || Limits { header_read_timeout: hour, keepalive_timeout: hour, ..Limits::default() })
    }

    /// The schedule in virtual time: nothing while a connection is open however long it lasts;
    /// once the last one closes, each step of `IDLE_STEPS` at its time and then silence; the next
    /// connection starts the schedule again.
    #[tokio::test(start_paused = true)]
    async fn an_idle_serving_thread_follows_the_idle_schedule_then_sleeps() {
        use tokio::io::AsyncWriteExt;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = StopSignal::new();
        let (not_listening_tx, not_listening) = oneshot::channel();
        let app = App { router: Router::new().route("/", get(|| async { "ok" })), proxy: None };
        let steps = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = steps.clone();
        let on_idle = move |step| seen.lock().unwrap().push(step);
        let serving =
            tokio::spawn(serve_connections(listener, 0, app, patient(), stop.clone(), not_listening_tx, on_idle));
        let taken = || steps.lock().unwrap().clone();

        // Never busy yet: nothing to give back, however long nothing happens.
        tokio::time::sleep(Duration::from_secs(1000)).await;
        assert_eq!(taken(), []);

        let mut client = TcpStream::connect(addr).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1000)).await;
        assert_eq!(taken(), [], "a connection is open: the thread is not idle");

        client.shutdown().await.unwrap();
        let mut rest = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut client, &mut rest).await.unwrap();
        let closed = tokio::time::Instant::now();
        for (i, (after, step)) in IDLE_STEPS.iter().enumerate() {
            tokio::time::sleep_until(closed + *after - Duration::from_millis(1)).await;
            assert_eq!(taken().len(), i, "not before {after:?} idle");
            tokio::time::sleep_until(closed + *after + Duration::from_millis(1)).await;
            assert_eq!(taken().last(), Some(step), "at {after:?} idle");
        }
        tokio::time::sleep(Duration::from_secs(10_000)).await;
        let all: Vec<IdleStep> = IDLE_STEPS.iter().map(|(_, s)| *s).collect();
        assert_eq!(taken(), all, "then the thread sleeps");

        // A connection that comes and goes starts the schedule again.
        connect_and_close(addr).await;
        tokio::time::sleep(IDLE_STEPS[0].0 + Duration::from_millis(1)).await;
        assert_eq!(taken().len(), IDLE_STEPS.len() + 1);
        assert_eq!(taken().last(), Some(&IdleStep::ReleaseMemory));

        // The stop: the thread lets go of the listener, and new connections are refused.
        stop.set(Stop::Draining);
        not_listening.await.unwrap();
        serving.await.unwrap();
        assert!(TcpStream::connect(addr).await.is_err(), "no longer listening");
    }
}
