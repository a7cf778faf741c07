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

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on. Anything but loopback requires CCMESH_ADMIN_TOKEN.
    #[arg(long, env = "CCMESH_LISTEN", default_value = "127.0.0.1:3999")]
    pub listen: SocketAddr,
    /// Directory for the SQLite database (default: the platform data directory + ccmesh).
    #[arg(long, env = "CCMESH_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// TOML file whose endpoints and settings are upserted by name at start.
    #[arg(long, env = "CCMESH_CONFIG")]
    pub config: Option<String>,
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
    /// Log format: `text` or `json`.
    #[arg(long, env = "CCMESH_LOG_FORMAT", default_value = "text")]
    pub log_format: String,
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
            eprintln!("ccmesh: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CCMESH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
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

pub fn default_data_dir() -> anyhow::Result<PathBuf> {
    let base = dirs::data_dir().context("cannot find the platform data directory; pass --data-dir")?;
    Ok(base.join("ccmesh"))
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let token = args.admin_token.clone().filter(|t| !t.is_empty());
    check_listen(&args.listen, token.as_deref())?;
    if !(0.0..=3600.0).contains(&args.shutdown_grace_secs) {
        bail!("--shutdown-grace-secs must be between 0 and 3600");
    }
    let config = match &args.config {
        Some(path) => Some((path.clone(), crate::config::file::load(path, &|name| std::env::var(name).ok())?)),
        None => None,
    };
    let data_dir = match args.data_dir {
        Some(d) => d,
        None => default_data_dir()?,
    };
    std::fs::create_dir_all(&data_dir).with_context(|| format!("cannot create data dir {}", data_dir.display()))?;
    let db_path = data_dir.join("ccmesh.db");
    let store = Store::open(&db_path).with_context(|| format!("cannot open database {}", db_path.display()))?;
    if let Some((path, file)) = &config {
        file.apply(path, &store)?;
        tracing::info!(event = "config_applied", path = %path, endpoints = file.endpoints.len(), "config file applied");
    }
    let client = crate::proxy::upstream::UpstreamClient::new().context("cannot build the HTTP client")?;
    let clock: Arc<dyn crate::clock::Clock> = Arc::new(SystemClock);
    let writer_config = crate::observe::writer::WriterConfig::new(clock.clone());
    let (records, writer) = crate::observe::writer::start(&db_path, writer_config)
        .with_context(|| format!("cannot start the request-record writer on {}", db_path.display()))?;
    let gw = Gateway::new(store, clock, client, token, records)?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let local = listener.local_addr()?;
    let _ = gw.local.set(crate::admin::clients::LocalHost {
        listen: local,
        data_dir: data_dir.clone(),
        env: crate::clients::Environment::from_process(),
        service_managed: crate::admin::clients::started_by_service_manager(|k| std::env::var(k).ok()),
    });
    tracing::info!(event = "listening", addr = %local, data_dir = %data_dir.display(), endpoints = gw.snapshot().endpoints.len(), "ccmesh is ready");
    let workers = args.workers.filter(|n| *n > 0).unwrap_or_else(crate::server::default_workers);
    let grace = Duration::from_secs_f64(args.shutdown_grace_secs);
    crate::server::serve_with(listener, gw, shutdown_signal(), grace, workers).await?;
    // The requests that finished during the grace period are still queued: write them.
    writer.shutdown();
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
}
