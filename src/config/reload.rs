//! The reload trigger: how news of a configuration change made somewhere else reaches this
//! gateway's snapshot. Whoever learns of such a change calls `ReloadTrigger::request` — the
//! PostgreSQL change follower (`store::postgres::changes`), and any other carrier of change
//! news (a pub/sub message). `request` never blocks and never touches the database: requests
//! made while a reload is pending or running fold into one more reload, which then reads
//! everything, so none is lost and a burst costs two rebuilds at most.
//!
//! The rebuild itself runs in `reload_loop`, on the server's background runtime, one at a
//! time and under the admin lock, so it never races an admin write's own rebuild (an older
//! reading can never replace a newer snapshot).

use std::sync::Arc;

use crate::gateway::Gateway;

#[derive(Clone, Default)]
pub struct ReloadTrigger(Arc<tokio::sync::Notify>);

impl ReloadTrigger {
    /// Ask for the snapshot to be rebuilt from the database soon. Cheap; callable from any
    /// thread, async or not.
    pub fn request(&self) {
        self.0.notify_one();
    }

    async fn requested(&self) {
        self.0.notified().await;
    }
}

/// After a rebuild that failed (the database went away between the news and the read), the
/// next try; without it the news would be spent and the snapshot stale until the next change.
const RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Rebuild the snapshot whenever the gateway's trigger is pulled. A database that cannot be
/// read leaves the current snapshot in place (and the store reports itself degraded), and the
/// rebuild is tried again every `RETRY_AFTER` until it succeeds.
pub async fn reload_loop(gw: Arc<Gateway>) {
    loop {
        gw.reload_trigger.requested().await;
        let result = {
            let _guard = gw.admin_lock.lock().await;
            let gw2 = gw.clone();
            tokio::task::spawn_blocking(move || gw2.reload()).await
        };
        let error = match result {
            Ok(Ok(())) => {
                tracing::debug!(event = "config_followed", "configuration reloaded after a change elsewhere");
                continue;
            }
            Ok(Err(e)) => e.to_string(),
            Err(e) => e.to_string(),
        };
        tracing::warn!(event = "config_reload_failed", error = %error, "cannot reload the configuration; serving the last one and trying again");
        tokio::time::sleep(RETRY_AFTER).await;
        gw.reload_trigger.request();
    }
}
