//! The HTTP server: one router for the proxy (`/v1/*`), the admin API (`/api/*`), liveness
//! (`/health`) and the dashboard (`/`); TCP_NODELAY on every accepted socket; graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{any, get};
use tokio::net::TcpListener;

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

/// Serve until `shutdown` resolves, then stop accepting and give in-flight requests (streams
/// included) up to `grace` to finish.
pub async fn serve(
    listener: TcpListener,
    gw: Arc<Gateway>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    let gw_events = gw.events.clone();
    let app = router(gw);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = axum::serve(
        axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        }),
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async move {
        let _ = stop_rx.await;
    });
    let mut server = std::pin::pin!(server.into_future());
    tokio::select! {
        result = &mut server => return result,
        () = shutdown => {}
    }
    tracing::info!(
        event = "shutdown_started",
        grace_secs = grace.as_secs_f64(),
        "no longer accepting connections; waiting for in-flight requests"
    );
    // Live-event streams never end on their own: close them so they do not hold the drain.
    gw_events.live().close();
    let _ = stop_tx.send(());
    match tokio::time::timeout(grace, server).await {
        Ok(result) => result,
        Err(_) => {
            tracing::warn!(event = "shutdown_forced", "grace period over; closing remaining connections");
            Ok(())
        }
    }
}
