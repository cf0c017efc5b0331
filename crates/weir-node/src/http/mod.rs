//! The HTTP API (axum): checks, limits, cluster view, metrics, health.

mod auth;
mod body;
pub mod check;
pub mod check_input;
pub mod cluster;
pub mod limits;
mod listener;
pub mod ops;
pub mod problem;

use std::future::Future;
use std::sync::Arc;

use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;

use crate::state::NodeState;
pub use listener::CappedListener;
use problem::Problem;

/// Every endpoint. Handlers turn the wire format into one core request and
/// hand it to the engine; no limiting logic lives in them.
pub fn router(state: Arc<NodeState>) -> Router {
    Router::new()
        .route("/v1/check", post(check::check))
        .route(
            "/v1/limits/{tier}",
            get(limits::get_limits).put(limits::put_limits),
        )
        .route("/v1/cluster", get(cluster::get_cluster))
        .route("/metrics", get(ops::metrics))
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .fallback(|| async { Problem::not_found("no such endpoint").into_response() })
        .method_not_allowed_fallback(|| async { Problem::method_not_allowed().into_response() })
        .with_state(state)
}

/// Serves until `stop` resolves, then stops accepting and lets every
/// in-flight request finish before returning.
pub async fn serve(
    state: Arc<NodeState>,
    listener: TcpListener,
    stop: impl Future<Output = ()> + Send + 'static,
) {
    let listener = CappedListener::new(listener, state.config.limits.max_connections);
    let app = router(state);
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await
    {
        tracing::error!(error = %e, "HTTP server failed");
    }
}
