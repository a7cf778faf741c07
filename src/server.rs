//! The HTTP server: one router for the proxy (`/v1/*`), the admin API (`/api/*`), liveness
//! (`/health`) and the dashboard (`/`); TCP_NODELAY on every accepted socket; one serving thread
//! per core; graceful shutdown.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::{any, get};
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;

use crate::gateway::Gateway;
use crate::{admin, dashboard, proxy};

pub fn router(gw: Arc<Gateway>) -> Router {
    Router::new()
        .route("/health", get(|| async { axum::Json(serde_json::json!({"status": "ok"})) }))
        .route(
            "/metrics",
            get(crate::observe::metrics::scrape)
                .route_layer(axum::middleware::from_fn_with_state(gw.clone(), admin::auth::require_admin)),
        )
        .route("/v1/models", get(proxy::list_models))
        .route("/v1/{*rest}", any(proxy::handle))
        .merge(admin::router(gw.clone()))
        .merge(dashboard::router())
        .fallback(proxy::not_found)
        .with_state(gw)
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

/// Thread per core: this task accepts; `workers` threads, each with its own single-threaded
/// runtime and its own upstream connection pool, serve the connections dealt to them (to the
/// one with the fewest open). A request, its upstream exchange and its answer then run on one
/// thread without waking another: on a 2-vCPU VM the multi-threaded scheduler's cross-thread
/// wake-ups cost ~30 µs per request at concurrency 1 (BENCHMARKS.md).
pub async fn serve_with(
    listener: TcpListener,
    gw: Arc<Gateway>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
    workers: usize,
) -> std::io::Result<()> {
    let gw_events = gw.events.clone();
    let app = router(gw.clone());
    let (stop_tx, stop_rx) = watch::channel(Stop::Running);
    let mut pool = Vec::new();
    for n in 0..workers.max(1) {
        pool.push(Worker::start(n, app.clone(), gw.client.clone(), stop_rx.clone())?);
    }

    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        match accepted {
            Ok((tcp, _)) => {
                let _ = tcp.set_nodelay(true);
                let Ok(tcp) = tcp.into_std() else { continue };
                let open: Vec<usize> = pool.iter().map(|w| w.open.load(Ordering::Relaxed)).collect();
                if let Some(w) = least_loaded(&open).and_then(|i| pool.get(i)) {
                    w.open.fetch_add(1, Ordering::Relaxed);
                    let _ = w.connections.send(tcp);
                }
            }
            // The connection died before it was accepted: nothing to do.
            Err(e) if is_connection_error(&e) => {}
            // Out of file descriptors or similar: wait instead of spinning on the error.
            Err(e) => {
                tracing::error!(event = "accept_failed", error = %e, "cannot accept connections; retrying in 1 s");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    drop(listener);
    tracing::info!(
        event = "shutdown_started",
        grace_secs = grace.as_secs_f64(),
        "no longer accepting connections; waiting for in-flight requests"
    );
    // Live-event streams never end on their own: close them so they do not hold the drain.
    gw_events.live().close();
    let _ = stop_tx.send(Stop::Draining);
    let finished: Vec<_> = pool.into_iter().map(Worker::finish).collect();
    let drained = tokio::time::timeout(grace, futures_util::future::join_all(finished)).await;
    if drained.is_err() {
        tracing::warn!(event = "shutdown_forced", "grace period over; closing remaining connections");
        let _ = stop_tx.send(Stop::Now);
    }
    Ok(())
}

/// The serving thread with the fewest open connections (the first of equals).
fn least_loaded(open: &[usize]) -> Option<usize> {
    open.iter().enumerate().min_by_key(|&(i, n)| (*n, i)).map(|(i, _)| i)
}

fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind as K;
    matches!(e.kind(), K::ConnectionRefused | K::ConnectionAborted | K::ConnectionReset)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stop {
    Running,
    /// Finish the requests in flight, accept no new ones on kept-alive connections.
    Draining,
    /// The grace period is over: drop every connection.
    Now,
}

/// One serving thread, as the acceptor sees it.
struct Worker {
    connections: mpsc::UnboundedSender<std::net::TcpStream>,
    open: Arc<AtomicUsize>,
    done: oneshot::Receiver<()>,
}

impl Worker {
    fn start(
        n: usize,
        app: Router,
        client: crate::proxy::upstream::UpstreamClient,
        stop: watch::Receiver<Stop>,
    ) -> std::io::Result<Worker> {
        let (connections, incoming) = mpsc::unbounded_channel();
        let open = Arc::new(AtomicUsize::new(0));
        let (done_tx, done) = oneshot::channel();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let counter = open.clone();
        std::thread::Builder::new().name(format!("ccmesh-worker-{n}")).spawn(move || {
            client.install_on_this_thread();
            let on_idle = move |step: IdleStep| match step {
                IdleStep::ReleaseMemory => crate::idle_memory::release(),
                IdleStep::CloseIdleUpstreams => client.close_idle_connections_on_this_thread(),
            };
            runtime.block_on(serve_connections(incoming, app, stop, counter, on_idle));
            let _ = done_tx.send(());
        })?;
        Ok(Worker { connections, open, done })
    }

    /// Resolves once every connection of this worker has closed.
    async fn finish(self) {
        drop(self.connections);
        let _ = self.done.await;
    }
}

async fn serve_connections(
    mut incoming: mpsc::UnboundedReceiver<std::net::TcpStream>,
    app: Router,
    mut stop: watch::Receiver<Stop>,
    open: Arc<AtomicUsize>,
    mut on_idle: impl FnMut(IdleStep),
) {
    let mut tasks = JoinSet::new();
    // The idle schedule (`IDLE_STEPS`): armed when the last connection closes, disarmed by the
    // next one.
    let mut idle_since: Option<tokio::time::Instant> = None;
    let mut steps_done = 0;
    let idle_timer = tokio::time::sleep(Duration::ZERO);
    let mut idle_timer = std::pin::pin!(idle_timer);
    loop {
        tokio::select! {
            tcp = incoming.recv() => match tcp {
                Some(tcp) => {
                    match TcpStream::from_std(tcp) {
                        Ok(tcp) => {
                            idle_since = None;
                            tasks.spawn(serve_connection(tcp, app.clone(), stop.clone(), open.clone()));
                        }
                        Err(_) => {
                            open.fetch_sub(1, Ordering::Relaxed);
                        }
                    }
                }
                // The acceptor stopped: drain.
                None => break,
            },
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
    loop {
        tokio::select! {
            next = tasks.join_next() => if next.is_none() { return },
            changed = stop.changed() => if changed.is_err() || *stop.borrow() == Stop::Now {
                tasks.abort_all();
                while tasks.join_next().await.is_some() {}
                return;
            },
        }
    }
}

async fn serve_connection(tcp: TcpStream, app: Router, mut stop: watch::Receiver<Stop>, open: Arc<AtomicUsize>) {
    let service = TowerToHyperService::new(app);
    let connection = http1::Builder::new().serve_connection(TokioIo::new(tcp), service);
    let mut connection = std::pin::pin!(connection.with_upgrades());
    let mut draining = *stop.borrow() != Stop::Running;
    if draining {
        connection.as_mut().graceful_shutdown();
    }
    loop {
        tokio::select! {
            _ = connection.as_mut() => break,
            changed = stop.changed(), if !draining => {
                draining = true;
                if changed.is_ok() {
                    connection.as_mut().graceful_shutdown();
                }
            }
        }
    }
    open.fetch_sub(1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_go_to_the_serving_thread_with_the_fewest_open() {
        assert_eq!(least_loaded(&[]), None);
        assert_eq!(least_loaded(&[0]), Some(0));
        assert_eq!(least_loaded(&[3, 1, 2]), Some(1));
        // Ties go to the first, so an idle gateway fills its threads in turn.
        assert_eq!(least_loaded(&[2, 1, 1]), Some(1));
        let mut open = vec![0usize; 4];
        for _ in 0..10 {
            let i = least_loaded(&open).unwrap();
            open[i] += 1;
        }
        assert_eq!(open, vec![3, 3, 2, 2]);
    }

    /// A loopback connection as the acceptor hands it over (non-blocking, counted as open).
    fn connection(open: &AtomicUsize) -> (std::net::TcpStream, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (served, _) = listener.accept().unwrap();
        served.set_nonblocking(true).unwrap();
        open.fetch_add(1, Ordering::SeqCst);
        (client, served)
    }

    async fn until_closed(open: &AtomicUsize) {
        while open.load(Ordering::SeqCst) > 0 {
            tokio::task::yield_now().await;
        }
    }

    /// The schedule in virtual time: nothing while a connection is open however long it lasts;
    /// once the last one closes, each step of `IDLE_STEPS` at its time and then silence; the next
    /// connection starts the schedule again.
    #[tokio::test(start_paused = true)]
    async fn an_idle_serving_thread_follows_the_idle_schedule_then_sleeps() {
        let (tx, rx) = mpsc::unbounded_channel();
        let (_stop_tx, stop) = watch::channel(Stop::Running);
        let open = Arc::new(AtomicUsize::new(0));
        let app = Router::new().route("/", get(|| async { "ok" }));
        let steps = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = steps.clone();
        let on_idle = move |step| seen.lock().unwrap().push(step);
        let serving = tokio::spawn(serve_connections(rx, app, stop, open.clone(), on_idle));
        let taken = || steps.lock().unwrap().clone();

        // Never busy yet: nothing to give back, however long nothing happens.
        tokio::time::sleep(Duration::from_secs(1000)).await;
        assert_eq!(taken(), []);

        let (client, served) = connection(&open);
        tx.send(served).unwrap();
        tokio::time::sleep(Duration::from_secs(1000)).await;
        assert_eq!(taken(), [], "a connection is open: the thread is not idle");

        drop(client);
        until_closed(&open).await;
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
        let (client, served) = connection(&open);
        tx.send(served).unwrap();
        drop(client);
        until_closed(&open).await;
        tokio::time::sleep(IDLE_STEPS[0].0 + Duration::from_millis(1)).await;
        assert_eq!(taken().len(), IDLE_STEPS.len() + 1);
        assert_eq!(taken().last(), Some(&IdleStep::ReleaseMemory));

        drop(tx);
        serving.await.unwrap();
    }
}
