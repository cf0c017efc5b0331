//! The HTTP API (axum): checks, limits, cluster view, metrics, health.

mod auth;
mod body;
pub mod check;
pub mod check_input;
pub mod cluster;
pub mod limits;
pub mod ops;
pub mod problem;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio_rustls::TlsAcceptor;

use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;

use crate::accept;
pub use crate::accept::CappedListener;
use crate::state::NodeState;
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

/// How long a TLS handshake may take before the connection is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves until `stop` resolves, then stops accepting and lets every
/// in-flight request finish before returning.
pub async fn serve(
    state: Arc<NodeState>,
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    stop: impl Future<Output = ()> + Send + 'static,
) {
    let stop = stop.shared();
    let mut conns = accept::incoming(
        listener,
        state.config.limits.max_connections,
        tls,
        HANDSHAKE_TIMEOUT,
        stop.clone(),
    );
    let service = TowerToHyperService::new(router(state));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new());
    builder.http2().timer(TokioTimer::new());
    let graceful = GracefulShutdown::new();
    while let Some(conn) = conns.recv().await {
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(conn), service.clone())
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "HTTP connection ended with an error");
            }
        });
    }
    // The stream ends once `stop` resolved and the listener is closed; the
    // connections still open finish what they are answering.
    graceful.shutdown().await;
}
