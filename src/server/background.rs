//! The gateway's background work, on the runtime that runs `serve_with` (never a serving
//! thread, never the request path): the model-list refresher, the rebuilds the reload trigger
//! asks for (and, on PostgreSQL, the follower that pulls it), in a cluster the sync with Redis
//! (`cluster::sync`) and, in the authoritative-config mode, the config file's watcher. Owned by
//! the server: `stop` (or dropping it) ends every
//! task, so nothing outlives the gateway that started it.

use std::sync::Arc;

use tokio::task::JoinSet;

use crate::gateway::Gateway;

pub struct Background {
    tasks: JoinSet<()>,
    /// On a shared PostgreSQL database: the follower of other gateways' changes (it runs on
    /// the store's own thread; dropping it stops it).
    _follower: Option<crate::store::postgres::changes::Follower>,
}

impl Background {
    pub fn start(gw: &Arc<Gateway>) -> Background {
        let mut tasks = JoinSet::new();
        let lists = gw.clone();
        tasks.spawn(async move {
            let up = crate::catalogue::Upstream { client: &lists.client, hop: &lists.hop_header };
            crate::catalogue::refresh_loop(&lists.catalogue, up, || lists.snapshot_full()).await;
        });
        tasks.spawn(reload_loop(gw.clone()));
        let follower = gw.store.postgres().map(|pg| pg.follow(gw.reload_trigger.clone()));
        if let Some(cluster) = &gw.cluster {
            for task in crate::cluster::sync::tasks(gw.clone(), cluster.clone()) {
                tasks.spawn(task);
            }
        }
        if let Some(source) = gw.config_source.get() {
            for task in crate::config::watch::tasks(gw.clone(), source.clone()) {
                tasks.spawn(task);
            }
        }
        Background { tasks, _follower: follower }
    }

    /// End every task and wait until they are gone. Their work is safe to cut at any point: a
    /// model list is re-read next start, and a config file is applied in one admin write.
    pub async fn stop(mut self) {
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
    }
}

/// After a rebuild that failed (the database went away between the news and the read), the
/// next try; without it the news would be spent and the snapshot stale until the next change.
const RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Rebuild the snapshot whenever the gateway's trigger is pulled. A database that cannot be
/// read leaves the current snapshot in place (and the store reports itself degraded), and the
/// rebuild is tried again every `RETRY_AFTER` until it succeeds.
async fn reload_loop(gw: Arc<Gateway>) {
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
