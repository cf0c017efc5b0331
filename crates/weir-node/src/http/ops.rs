//! Operations endpoints: `/metrics`, `/healthz`, `/readyz`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::metrics;
use crate::state::NodeState;

pub async fn metrics(State(state): State<Arc<NodeState>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(metrics::CONTENT_TYPE),
        )],
        state.metrics.render(),
    )
        .into_response()
}

/// Alive for as long as the process answers.
pub async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready while every listener is up, the node has joined the cluster its
/// seeds lead to, and shutdown has not begun: a rollout sends no traffic
/// to a node whose checks would wait for its join, and a load balancer
/// stops sending before the node hands its counters away and stops answering.
pub async fn readyz(State(state): State<Arc<NodeState>>) -> (StatusCode, &'static str) {
    let readiness = state.readiness();
    let status = if readiness.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, readiness.reason())
}
