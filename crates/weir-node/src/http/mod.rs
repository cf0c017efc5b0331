//! The HTTP API (axum): checks, limits, cluster view, metrics, health.

use std::future::Future;
use std::sync::Arc;

use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;

use crate::state::NodeState;

pub fn router(state: Arc<NodeState>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .with_state(state)
}

pub async fn serve(
    state: Arc<NodeState>,
    listener: TcpListener,
    stop: impl Future<Output = ()> + Send + 'static,
) {
    let app = router(state);
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await
    {
        tracing::error!(error = %e, "HTTP server failed");
    }
}
