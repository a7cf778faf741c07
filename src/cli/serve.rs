//! `ccmesh serve`: validate everything first (config file, listen address vs admin token), then
//! open the database, bind, and serve until SIGINT/SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;

use crate::clock::SystemClock;
use crate::gateway::Gateway;
use crate::store::Store;
use crate::store::data_dir::DataDir;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on. Anything but loopback requires CCMESH_ADMIN_TOKEN.
    #[arg(long, env = "CCMESH_LISTEN", default_value = "127.0.0.1:3999")]
    pub listen: SocketAddr,
    /// Directory for the SQLite database (default: the platform data directory + ccmesh).
    #[arg(long, env = "CCMESH_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Keep endpoints, settings, prices, client keys and request records in PostgreSQL
    /// (`postgres://user:password@host:port/database`) instead of the data dir's SQLite file,
    /// so several gateways share them. The password is never logged or shown.
    #[arg(long, env = "CCMESH_DATABASE_URL", hide_env_values = true)]
    pub database: Option<String>,
    /// TOML file whose endpoints and settings are upserted by name at start.
    #[arg(long, env = "CCMESH_CONFIG")]
    pub config: Option<String>,
    /// Make the config file the source of truth (as `[config] authoritative = true` in it does):
    /// its endpoints, settings and prices replace the database's at start and whenever it
    /// changes or SIGHUP arrives, and the admin API refuses to change them.
    #[arg(long, requires = "config")]
    pub config_authoritative: bool,
    /// Token required by the admin API (Authorization: Bearer ...).
    #[arg(long = "admin-token", env = "CCMESH_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Seconds in-flight requests get to finish after SIGINT/SIGTERM.
    #[arg(long, env = "CCMESH_SHUTDOWN_GRACE_SECS", default_value_t = 30.0)]
    pub shutdown_grace_secs: f64,
    /// Serving threads, each with its own runtime and upstream connection pool (default: one per
    /// CPU core).
    #[arg(long, env = "CCMESH_WORKERS")]
    pub workers: Option<usize>,
    /// A host name (or name:port) besides the loopback ones that may open the admin API and the
    /// dashboard without an admin token (repeatable; also the `allowed_hosts` setting).
    #[arg(long = "allowed-host", value_name = "HOST")]
    pub allowed_hosts: Vec<String>,
    /// Log format: `text` or `json`.
    #[arg(long, env = "CCMESH_LOG_FORMAT", default_value = "text")]
    pub log_format: String,
    /// Serve the proxy paths to anyone who can reach a non-loopback --listen address, without
    /// client keys (they then spend the endpoints' keys). Without this flag such a start is
    /// refused until a client key exists or require_client_key is on.
    #[arg(long, env = "CCMESH_OPEN_PROXY")]
    pub open_proxy: bool,
    /// Share breaker verdicts, the rotation, client-key limits and session bindings with the
    /// other gateways using this Redis (or Valkey): `redis://[:password@]host:port[/db]`
    /// (docs/cluster.md). The password is never logged or shown.
    #[arg(long, env = "CCMESH_REDIS_URL", hide_env_values = true)]
    pub redis: Option<String>,
    /// What every Redis key of this deployment starts with (several deployments, one Redis).
    #[arg(long, env = "CCMESH_REDIS_PREFIX", default_value = crate::cluster::names::DEFAULT_PREFIX)]
    pub redis_prefix: String,
    /// How long a request waits for Redis before it uses this node's local state instead.
    #[arg(long, env = "CCMESH_REDIS_TIMEOUT_MS", default_value_t = 100)]
    pub redis_timeout_ms: u64,
}

pub fn run(args: ServeArgs) -> ExitCode {
    init_logging(&args.log_format);
    // This runtime accepts connections and runs the background work; the serving threads have
    // their own (server::serve_with).
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ccmesh: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ccmesh: {}", super::error_text(&e));
            ExitCode::FAILURE
        }
    }
}

fn init_logging(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CCMESH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Every line passes through the redactor: no code path can log a key by accident.
    let writer = || crate::redact::RedactingWriter(std::io::stderr());
    // Colours only for a person at a terminal: redirected to a file or a journal, escape codes
    // are noise in every line.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer).with_ansi(ansi);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Refuse to expose an unauthenticated admin API beyond this machine.
pub fn check_listen(listen: &SocketAddr, token: Option<&str>) -> anyhow::Result<()> {
    if !listen.ip().is_loopback() && token.is_none_or(str::is_empty) {
        bail!(
            "refusing to listen on {listen} without an admin token: anyone who can reach it could \
             read and change the configuration. Set one with CCMESH_ADMIN_TOKEN=<long random string> \
             (or --admin-token), or listen on 127.0.0.1"
        );
    }
    Ok(())
}

/// SPEC §12, §15.10: on an address other machines can reach, the proxy paths need client keys
/// (any key exists, or `require_client_key` is on) unless the operator says `--open-proxy`.
/// `Ok(true)`: open on purpose, worth a warning.
pub fn check_open_proxy(
    listen: &SocketAddr,
    keys_exist: bool,
    keys_required: bool,
    open_proxy: bool,
) -> anyhow::Result<bool> {
    if listen.ip().is_loopback() || keys_exist || keys_required {
        return Ok(false);
    }
    if open_proxy {
        return Ok(true);
    }
    bail!(
        "refusing to serve the proxy on {listen} without client keys: anyone who can reach it would spend your \
         endpoints' API keys. Make a key first (`ccmesh key add NAME` against a loopback gateway, or [[keys]] in \
         the config file), set require_client_key = true, or pass --open-proxy to serve it open on purpose"
    );
}

pub fn default_data_dir() -> anyhow::Result<PathBuf> {
    let base = dirs::data_dir().context("cannot find the platform data directory; pass --data-dir")?;
    Ok(base.join("ccmesh"))
}

/// Raise the soft limit on open files to the hard limit: every client connection and every
/// upstream connection is a descriptor, and the common soft default (1024) is reached long before
/// the gateway's own `limits.max_connections`.
fn raise_open_files_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let current = getrlimit(Resource::Nofile);
    if current.current == current.maximum {
        return;
    }
    let raised = Rlimit { current: current.maximum, maximum: current.maximum };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => tracing::debug!(limit = ?current.maximum, "raised the open-files limit to the hard limit"),
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the open-files limit; the gateway may run out of descriptors early")
        }
    }
}

/// Descriptors beyond two per client connection (its own and its upstream's): the store's
/// files, the listeners, Redis and PostgreSQL sockets, the dashboard's event streams.
const DESCRIPTOR_HEADROOM: usize = 256;

/// Grow the process's descriptor table now to hold what `max_connections` client connections
/// need (within the open-files limit). The kernel grows it by doubling as descriptors are
/// opened, and in a threaded process each growth waits for an RCU grace period (10–20 ms on a
/// small VM) while every thread opening a descriptor (an accept, an upstream connect) waits
/// with it: the first burst of several hundred streams stalled every stream on both serving
/// threads. Opening one descriptor at the top makes the kernel grow the table once, here; it
/// never shrinks, and a slot costs the kernel 8 bytes.
fn reserve_descriptor_table(max_connections: usize) {
    use rustix::process::{Resource, getrlimit};
    let limit = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    let wanted = max_connections.saturating_mul(2).saturating_add(DESCRIPTOR_HEADROOM) as u64;
    let Ok(top) = i32::try_from(wanted.min(limit).saturating_sub(1)) else { return };
    let reserved = std::fs::File::open("/dev/null").and_then(|null| Ok(rustix::io::fcntl_dupfd_cloexec(&null, top)?));
    match reserved {
        // Closed at once: the slot's table stays.
        Ok(descriptor) => drop(descriptor),
        Err(e) => tracing::debug!(error = %e, top, "could not size the descriptor table ahead; it grows as needed"),
    }
}

/// Below this an admin token can be guessed by an attacker who can reach the port.
const SHORT_TOKEN: usize = 24;

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let token = args.admin_token.clone().filter(|t| !t.is_empty());
    check_listen(&args.listen, token.as_deref())?;
    if token.as_ref().is_some_and(|t| t.chars().count() < SHORT_TOKEN) {
        tracing::warn!(
            event = "admin_token_short",
            "the admin token is shorter than {SHORT_TOKEN} characters; use a long random one (e.g. `openssl rand -hex 24`)"
        );
    }
    raise_open_files_limit();
    if !(0.0..=3600.0).contains(&args.shutdown_grace_secs) {
        bail!("--shutdown-grace-secs must be between 0 and 3600");
    }
    let env = |name: &str| std::env::var(name).ok();
    let config = match &args.config {
        Some(path) => Some((path.clone(), crate::config::file::load(path, &env)?)),
        None => None,
    };
    let authoritative = args.config_authoritative || config.as_ref().is_some_and(|(_, f)| f.authoritative);
    let data_dir = match args.data_dir {
        Some(d) => d,
        None => default_data_dir()?,
    };
    let data_dir = DataDir::open(&data_dir)?;
    let db_path = data_dir.path().join("ccmesh.db");
    let postgres = args.database.as_deref().map(str::trim).filter(|u| !u.is_empty());
    let storage_problem = match (postgres, data_dir.writable(&db_path)) {
        (Some(_), _) | (None, Ok(())) => None,
        (None, Err(e)) => {
            let problem = format!("the data dir {} is not writable ({e})", data_dir.path().display());
            tracing::warn!(event = "storage_degraded", problem = %problem, "the gateway serves with the stored configuration, but cannot keep records or changes");
            Some(problem)
        }
    };
    let store = if let Some(url) = postgres {
        let shown = crate::store::postgres::address::redact(url);
        // The password joins the log redactor's secrets before anything can log it (the
        // gateway's own entry takes over once it exists).
        if let Ok(parsed) = crate::store::postgres::PgUrl::parse(url) {
            crate::redact::install(0, parsed.password().map(str::to_string).into_iter().collect());
        }
        let store = Store::open_postgres(url).with_context(|| format!("cannot open the database {shown}"))?;
        tracing::info!(event = "database_opened", database = %store.describe(), node = store.postgres().map_or(0, |pg| pg.node()), "configuration and records are in PostgreSQL, shared with every gateway on it");
        store
    } else if storage_problem.is_some() {
        Store::open_read_only(&db_path)
            .with_context(|| format!("cannot open the database {} read-only", db_path.display()))?
    } else {
        data_dir.prepare_database(&db_path);
        let store = Store::open(&db_path).with_context(|| format!("cannot open database {}", db_path.display()))?;
        data_dir.prepare_database(&db_path);
        store
    };
    let mut config_source = None;
    match &config {
        Some((path, _)) if authoritative => {
            // Read again: what is applied and watched is one reading of the file.
            let (file, source) = crate::config::authoritative::load_and_apply(
                std::path::Path::new(path),
                &store,
                &env,
                crate::config::authoritative::POLL_EVERY,
                true,
            )?;
            tracing::info!(event = "config_applied", path = %path, endpoints = file.endpoints.len(), authoritative = true, "config file applied; it is the source of truth for what it declares");
            crate::config::watch::claim_sighup();
            config_source = Some(Arc::new(source));
        }
        Some((path, file)) => {
            file.apply(path, &store)?;
            tracing::info!(event = "config_applied", path = %path, endpoints = file.endpoints.len(), authoritative = false, "config file applied");
        }
        None => {}
    }
    let keys_exist = store.count_keys()? > 0;
    let stored_settings = store.load_settings()?.and_then(|doc| crate::config::Settings::default().patched(&doc).ok());
    let keys_required = stored_settings.as_ref().is_some_and(|s| s.require_client_key);
    reserve_descriptor_table(stored_settings.unwrap_or_default().limits.max_connections);
    if check_open_proxy(&args.listen, keys_exist, keys_required, args.open_proxy)? {
        tracing::warn!(
            event = "open_proxy",
            listen = %args.listen,
            "serving the proxy paths without client keys on a non-loopback address (--open-proxy): anyone who can reach it spends the endpoints' keys"
        );
    }
    let client = crate::proxy::upstream::UpstreamClient::new().context("cannot build the HTTP client")?;
    let clock: Arc<dyn crate::clock::Clock> = Arc::new(SystemClock);
    let writer_config = crate::observe::writer::WriterConfig::new(clock.clone());
    let (records, writer) = if storage_problem.is_some() {
        (crate::observe::writer::RecordSink::disabled(), None)
    } else {
        let (records, writer) = crate::observe::writer::start_on(&store, writer_config)
            .with_context(|| format!("cannot start the request-record writer on {}", store.describe()))?;
        (records, Some(writer))
    };
    if let Some(problem) = storage_problem {
        records.report_problem(problem);
    }
    let cluster = match &args.redis {
        Some(url) if !url.is_empty() => {
            let options = crate::cluster::Options {
                url: url.clone(),
                prefix: args.redis_prefix.clone(),
                timeout: Duration::from_millis(args.redis_timeout_ms.clamp(1, 10_000)),
            };
            let node = crate::gateway::random_hex(8);
            Some(crate::cluster::Cluster::new(&options, &node, clock.clone()).map_err(anyhow::Error::msg)?)
        }
        _ => None,
    };
    let gw = Gateway::in_cluster(store, clock, client, token, records, cluster)?;
    if let Some(cluster) = &gw.cluster {
        crate::cluster::sync::join(&*gw, cluster).await;
    }
    if let Some(source) = config_source {
        let _ = gw.config_source.set(source);
    }
    let _ = gw.allowed_hosts.set(args.allowed_hosts.iter().map(|h| h.trim().to_ascii_lowercase()).collect());
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let local = listener.local_addr()?;
    let _ = gw.local.set(crate::clients::host::LocalHost {
        listen: local,
        data_dir: data_dir.path().to_path_buf(),
        env: crate::clients::Environment::from_process(),
        service_managed: crate::clients::host::started_by_service_manager(|k| std::env::var(k).ok()),
    });
    if let Some(e) = gw.snapshot().endpoints.iter().find(|e| crate::hosts::points_at(&e.config.base_url, local)) {
        bail!(
            "endpoint '{}' has base_url {} — this gateway's own address, so every request to it would come back here; change it (ccmesh endpoint edit {} --base-url URL) or remove it from the config file",
            e.config.name,
            e.config.base_url,
            e.config.name
        );
    }
    tracing::info!(event = "listening", addr = %local, data_dir = %data_dir.path().display(), endpoints = gw.snapshot().endpoints.len(), "ccmesh is ready");
    let workers = args.workers.filter(|n| *n > 0).unwrap_or_else(crate::server::default_workers);
    let grace = Duration::from_secs_f64(args.shutdown_grace_secs);
    crate::server::serve_with(listener, gw, shutdown_signal(), grace, workers).await?;
    // The requests that finished during the grace period are still queued: write them.
    if let Some(writer) = writer {
        writer.shutdown();
    }
    tracing::info!(event = "stopped", "ccmesh stopped");
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_loopback_needs_a_token() {
        let any: SocketAddr = "0.0.0.0:3999".parse().unwrap();
        let lo: SocketAddr = "127.0.0.1:3999".parse().unwrap();
        let lo6: SocketAddr = "[::1]:3999".parse().unwrap();
        let err = check_listen(&any, None).unwrap_err().to_string();
        assert!(err.contains("CCMESH_ADMIN_TOKEN"), "{err}");
        assert!(check_listen(&any, Some("")).is_err());
        assert!(check_listen(&any, Some("t0ken")).is_ok());
        assert!(check_listen(&lo, None).is_ok());
        assert!(check_listen(&lo6, None).is_ok());
    }

    #[test]
    fn a_public_proxy_needs_client_keys_or_says_it_is_open() {
        let any: SocketAddr = "0.0.0.0:3999".parse().unwrap();
        let lo: SocketAddr = "127.0.0.1:3999".parse().unwrap();
        let err = check_open_proxy(&any, false, false, false).unwrap_err().to_string();
        assert!(
            err.contains("ccmesh key add") && err.contains("--open-proxy") && err.contains("require_client_key"),
            "{err}"
        );
        assert!(!check_open_proxy(&any, true, false, false).unwrap());
        assert!(!check_open_proxy(&any, false, true, false).unwrap());
        assert!(check_open_proxy(&any, false, false, true).unwrap(), "open on purpose: a warning");
        assert!(!check_open_proxy(&lo, false, false, false).unwrap());
    }
}
