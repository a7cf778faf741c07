//! Following the configuration changes other gateways make on the shared database.
//!
//! Every configuration write bumps `config_version` and sends `NOTIFY ccmesh_config` in its
//! transaction (`Pg::write`). The follower holds one connection that `LISTEN`s, and also reads
//! the version every `POLL_EVERY`: a notification is the fast path (milliseconds), the poll
//! catches one lost while the connection was down or being replaced. Either way a version it
//! has not seen pulls the reload trigger, and the gateway rebuilds its snapshot off the
//! request path (`config::reload`).
//!
//! It runs on the store's own runtime (`Pg`'s thread), so a slow or unreachable PostgreSQL
//! only ever delays the follower; it also keeps the store's "unreachable" state current, which
//! is what `/health` reports, within about a poll interval of the server going away or coming
//! back.

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::{AsyncMessage, NoTls};

use super::{CHANNEL, CONNECT_TIMEOUT, Pg};
use crate::config::reload::ReloadTrigger;
use crate::store::StoreError;

/// The version is read at least this often (notifications make it faster).
pub const POLL_EVERY: Duration = Duration::from_millis(500);
/// The follower's own deadline for one query: short, so a server that stopped answering is
/// reported within seconds.
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// The running follower; dropping it stops it.
pub struct Follower {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Pg {
    /// Start following changes: `trigger` is pulled for every version not seen yet (and once
    /// at start, for a change made between the gateway's first load and now).
    pub fn follow(self: &Arc<Self>, trigger: ReloadTrigger) -> Follower {
        let pg = self.clone();
        Follower { task: self.runtime.handle.spawn(follow(pg, trigger)) }
    }
}

async fn follow(pg: Arc<Pg>, trigger: ReloadTrigger) {
    let mut seen: Option<i64> = None;
    loop {
        if let Err(e) = session(&pg, &trigger, &mut seen).await {
            pg.note::<()>(&Err(e));
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// One connection's life: listen, then read the version on every notification and every
/// `POLL_EVERY`, until the connection fails.
async fn session(pg: &Pg, trigger: &ReloadTrigger, seen: &mut Option<i64>) -> Result<(), StoreError> {
    let config = pg.url.config(CONNECT_TIMEOUT);
    let (client, mut connection) = timed(config.connect(NoTls)).await?;
    let (notified, mut notifications) = tokio::sync::mpsc::unbounded_channel::<()>();
    // The connection's socket, driven here so its notifications can be read.
    let driver = tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(_))) => {
                    let _ = notified.send(());
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => break,
            }
        }
    });
    let _stop_driver = AbortOnDrop(driver);
    timed(client.batch_execute(&format!("LISTEN {CHANNEL}"))).await?;
    loop {
        let row = timed(client.query_one("SELECT version FROM config_version", &[])).await?;
        let version: i64 = row.try_get(0).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        pg.note::<()>(&Ok(()));
        if *seen != Some(version) {
            *seen = Some(version);
            trigger.request();
        }
        tokio::select! {
            got = notifications.recv() => {
                if got.is_none() {
                    return Err(StoreError::Unavailable("the notification connection closed".into()));
                }
                // Several notifications at once need one read.
                while notifications.try_recv().is_ok() {}
            }
            () = tokio::time::sleep(POLL_EVERY) => {}
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn timed<T>(f: impl Future<Output = Result<T, tokio_postgres::Error>>) -> Result<T, StoreError> {
    match tokio::time::timeout(QUERY_TIMEOUT, f).await {
        Ok(result) => result.map_err(super::pg_error),
        Err(_) => Err(StoreError::Unavailable(format!("no answer within {}s", QUERY_TIMEOUT.as_secs()))),
    }
}
