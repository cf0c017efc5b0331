//! The HTTP API (axum): checks, limits, cluster view, dashboard, metrics, health.

mod auth;
mod body;
pub mod check;
pub mod check_input;
pub mod cluster;
pub mod counters;
pub mod dashboard;
pub mod hot;
mod if_match;
pub mod limits;
pub mod ops;
pub mod problem;
pub mod ui;

use std::future::Future;
use std::sync::Arc;

use axum::extract::Request;
use futures::FutureExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use axum::routing::{get, post};
use axum::serve::Listener;
use axum::Router;
use tokio::net::TcpListener;

use crate::accept;
pub use crate::accept::CappedListener;
use crate::state::NodeState;
use problem::{Problem, ProblemResponse};

/// Every endpoint. Handlers turn the wire format into one core request and
/// hand it to the engine; no limiting logic lives in them.
pub fn router(state: Arc<NodeState>) -> Router {
    let mut app = Router::new()
        .route("/v1/check", post(check::check))
        .route(
            "/v1/limits/{tier}",
            get(limits::get_limits).put(limits::put_limits),
        )
        .route("/v1/cluster", get(cluster::get_cluster))
        .route("/v1/hot", get(hot::get_hot))
        .route(
            "/v1/counters/{rule}/{key}",
            get(counters::get_counter).delete(counters::delete_counter),
        )
        .route("/metrics", get(ops::metrics))
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz));
    // With `--ui false` the dashboard's paths are no endpoint at all: 404.
    if state.config.ui {
        app = app.merge(ui::routes());
    }
    app.fallback(|| async { Problem::not_found("no such endpoint").into_response() })
        .method_not_allowed_fallback(|| async { Problem::method_not_allowed().into_response() })
        .with_state(state)
}

/// Serves until `stop` resolves, then stops accepting and lets every
/// in-flight request finish before returning: on the HTTP threads
/// (`crate::cores`), or on the caller's runtime when there are none.
///
/// Thread-per-core for HTTP/2's sake, as the gRPC port: on the
/// multi-thread runtime hyper's task per HTTP/2 stream made every answer
/// a write of its own (0.92 `writev` per h2c check, 8 x 8 streams); on one
/// thread the answers ready in one turn leave in one write. HTTP/1.1
/// answers from the connection's task either way.
///
/// A client holds a connection slot only while it keeps up: its TLS
/// handshake and each request head must arrive within the header read
/// timeout, and each body within the body read timeout (`body.rs`).
pub async fn serve(
    state: Arc<NodeState>,
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    stop: impl Future<Output = ()> + Send + 'static,
) {
    let stop = stop.shared();
    let slots = accept::slots(state.config.limits.max_connections);
    let threads = state.config.http_threads();
    if threads == 0 {
        let listener = accept::CappedListener::new(listener, slots);
        return serve_on(state, listener, tls, stop).await;
    }
    let shares = match accept::deal(listener, slots, threads, stop.clone()) {
        Ok(shares) => shares,
        Err(e) => return tracing::error!(error = %e, "HTTP listener failed"),
    };
    let serve = move |share| serve_on(state.clone(), share, tls.clone(), stop.clone());
    if let Err(e) = crate::cores::serve("weir-http", shares, serve).await {
        tracing::error!(error = %e, "cannot start the HTTP threads");
    }
}

/// Serves the connections `listener` accepts until `stop`, then lets
/// those open finish what they are answering.
async fn serve_on<L>(
    state: Arc<NodeState>,
    listener: L,
    tls: Option<TlsAcceptor>,
    stop: impl Future<Output = ()> + Send + 'static,
) where
    L: Listener<Io = accept::CappedStream, Addr = std::net::SocketAddr> + Send + 'static,
{
    let limits = state.config.limits;
    let tls = tls.map(accept::Handshake::Fixed);
    let mut conns = accept::incoming(listener, tls, None, limits.timeouts(), stop);
    let app = router(state);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // The connection watch (`accept/watch.rs`) holds every connection to
    // its deadlines: an HTTP/1 connection with no request in flight to
    // the head timeout, from when it opened or its last request ended (so
    // a head that is slow to come, or a kept-alive connection left idle,
    // ends); an HTTP/2 one to a late start, or no request for the idle
    // timeout. hyper's own HTTP/1 head timer is off: it read the clock and
    // reset a timer on the wheel's shared lock for every request, 1,500-
    // 2,000 instructions of an HTTP check (`bench/server-count.sh`,
    // docs/performance.md). No pings on
    // HTTP/2, as on the gRPC port.
    builder.http1().header_read_timeout(None);
    builder.http2().timer(TokioTimer::new());
    let graceful = GracefulShutdown::new();
    while let Some(conn) = conns.recv().await {
        let activity = conn.activity();
        let service = {
            let app = app.clone();
            service_fn(move |req: Request<Incoming>| {
                let busy = activity.begin();
                let answer = app.clone().oneshot(req);
                async move {
                    let out = answer.await;
                    drop(busy);
                    out
                }
            })
        };
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(conn), service)
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
