//! The reload trigger: how news of a configuration change made somewhere else reaches this
//! gateway's snapshot. Whoever learns of such a change calls `ReloadTrigger::request` — the
//! PostgreSQL change follower (`store::postgres::changes`), and any other carrier of change
//! news (a pub/sub message). `request` never blocks and never touches the database: requests
//! made while a reload is pending or running fold into one more reload, which then reads
//! everything, so none is lost and a burst costs two rebuilds at most.
//!
//! The rebuild itself runs in the server's background work (`server::background`), one at a
//! time and under the admin lock, so it never races an admin write's own rebuild (an older
//! reading can never replace a newer snapshot).

use std::sync::Arc;

#[derive(Clone, Default)]
pub struct ReloadTrigger(Arc<tokio::sync::Notify>);

impl ReloadTrigger {
    /// Ask for the snapshot to be rebuilt from the database soon. Cheap; callable from any
    /// thread, async or not.
    pub fn request(&self) {
        self.0.notify_one();
    }

    /// Resolves at the next request (or at once, if one came since the last wait).
    pub async fn requested(&self) {
        self.0.notified().await;
    }
}
