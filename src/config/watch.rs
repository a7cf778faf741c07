//! Reloading an authoritative config file: on SIGHUP, and when the file changes (its
//! modification time and length, looked at every `ConfigSource::poll_every` on the gateway's
//! background runtime — never on the request path). A reload is applied like an admin change
//! (one write under the admin lock, then the snapshot is rebuilt; breakers keep their state,
//! SPEC §5). A file that does not parse or validate is reported (`config_invalid`) and the
//! running configuration stays.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::SystemTime;

use super::authoritative::{self, Declared, SharedSource, stamp};
use crate::gateway::Gateway;

type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What the server's background work runs for `source`: the poll, and the SIGHUP handler when
/// the source asks for one.
pub fn tasks(gw: Arc<Gateway>, source: SharedSource) -> Vec<Task> {
    let mut tasks: Vec<Task> = vec![Box::pin(poll(gw.clone(), source.clone()))];
    #[cfg(unix)]
    if source.on_sighup {
        tasks.push(Box::pin(on_sighup(gw, source)));
    }
    tasks
}

async fn poll(gw: Arc<Gateway>, source: SharedSource) {
    let path = source.path.clone();
    let mut last: Option<(SystemTime, u64)> = source.first_stamp;
    let mut ticks = tokio::time::interval(source.poll_every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let path = path.clone();
        let now = tokio::task::spawn_blocking(move || stamp(&path)).await.ok().flatten();
        if now != last {
            last = now;
            reload(&gw, &source, "file_changed").await;
        }
    }
}

/// Take over SIGHUP now (its default action ends the process), before the gateway says it is
/// ready: a signal that arrives before the watcher runs is then ignored instead of fatal.
pub fn claim_sighup() {
    #[cfg(unix)]
    if let Err(e) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        tracing::warn!(event = "config_invalid", error = %e, "cannot listen for SIGHUP; the config file still reloads when it changes");
    }
}

#[cfg(unix)]
async fn on_sighup(gw: Arc<Gateway>, source: SharedSource) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(event = "config_invalid", error = %e, "cannot listen for SIGHUP; the config file still reloads when it changes");
            return;
        }
    };
    while hangups.recv().await.is_some() {
        reload(&gw, &source, "sighup").await;
    }
}

/// Read the file again and, when it is valid and differs from what was read last (or a SIGHUP
/// asks), apply it. Never fails: problems are logged and the running configuration stays.
pub async fn reload(gw: &Arc<Gateway>, source: &SharedSource, trigger: &'static str) {
    apply_file(gw, source, trigger).await;
    source.reloaded();
}

async fn apply_file(gw: &Arc<Gateway>, source: &SharedSource, trigger: &'static str) {
    let path = source.path.clone();
    let shown = path.display().to_string();
    let read = tokio::task::spawn_blocking(move || std::fs::read(&path)).await;
    let bytes = match read {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(e)) => return invalid(&shown, &format!("cannot read it ({e})")),
        Err(e) => return invalid(&shown, &format!("cannot read it ({e})")),
    };
    if !source.is_new(&bytes) && trigger != "sighup" {
        return;
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let file = match super::file::parse(&shown, &text, &|name| std::env::var(name).ok()) {
        Ok(file) => file,
        Err(e) => return invalid(&shown, &e.to_string()),
    };
    if !file.authoritative {
        // The mode is chosen at start (`--config-authoritative` or the file's own switch); a
        // file that turns it off takes effect at the next start, not half-way now.
        tracing::debug!(event = "config_reloaded", path = %shown, "the file no longer says authoritative = true; still applied as authoritative until restart");
    }
    let declared = Declared::of(&file);
    let endpoints = file.endpoints.len();
    let path_for_write = shown.clone();
    let applied = crate::admin::write(gw, "config_file", move |g| {
        let refused = |e: super::file::ConfigFileError| crate::admin::ApiError::bad_request(e.to_string());
        authoritative::claim_shared(&g.store, &path_for_write, &bytes, true).map_err(refused)?;
        authoritative::apply(&file, &path_for_write, &g.store).map_err(refused)
    })
    .await;
    match applied {
        Ok(()) => {
            source.set_declared(declared);
            tracing::info!(event = "config_reloaded", path = %shown, trigger, endpoints, "config file applied");
        }
        Err(e) => invalid(&shown, &e.message),
    }
}

fn invalid(path: &str, error: &str) {
    tracing::error!(
        event = "config_invalid",
        path,
        error,
        "the config file was not applied; the running configuration stays"
    );
}
