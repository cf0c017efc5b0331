//! `grpc.health.v1.Health` on the gRPC port, answering what `/readyz` does:
//! SERVING only when the node is ready, NOT_SERVING while it starts, joins
//! or leaves (Kubernetes gRPC probes, Envoy's gRPC health checks and
//! grpc_health_probe ask it).

use std::future::Future;
use std::sync::Arc;

use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::readiness::Readiness;
use crate::state::NodeState;

/// The names a health check may ask about: "" for the whole server, and
/// each service a client calls on this port.
pub const SERVICES: [&str; 3] = [
    "",
    "weir.v1.RateLimiter",
    "envoy.service.ratelimit.v3.RateLimitService",
];

/// The health service, and the task that keeps its answer on the node's
/// readiness until `stop`.
pub fn service(
    state: Arc<NodeState>,
    stop: impl Future<Output = ()> + Send + 'static,
) -> (
    tonic_health::pb::health_server::HealthServer<impl tonic_health::pb::health_server::Health>,
    impl Future<Output = ()> + Send + 'static,
) {
    let (reporter, server) = tonic_health::server::health_reporter();
    (server, follow(state, reporter, stop))
}

/// Sets every name's status from the node's readiness, again whenever its
/// stage changes or its join ends.
async fn follow(state: Arc<NodeState>, reporter: HealthReporter, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    let mut stages = state.lifecycle.subscribe();
    loop {
        stages.borrow_and_update();
        let readiness = state.readiness();
        let status = if readiness.is_ready() {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        for name in SERVICES {
            reporter.set_service_status(name, status).await;
        }
        let joined = async {
            match state.engine.cluster() {
                Some(c) if readiness == Readiness::Joining => c.until_joined().await,
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = &mut stop => return,
            changed = stages.changed() => if changed.is_err() { return },
            _ = joined => {}
        }
    }
}
