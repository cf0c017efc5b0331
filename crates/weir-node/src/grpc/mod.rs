//! The gRPC APIs (tonic): weir.v1.RateLimiter and Envoy's RateLimitService.

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;

use crate::state::NodeState;

pub async fn serve(
    state: Arc<NodeState>,
    listener: TcpListener,
    stop: impl Future<Output = ()> + Send + 'static,
) {
    let _ = state;
    let incoming = TcpIncoming::from(listener);
    let server = Server::builder().add_routes(tonic::service::Routes::default());
    if let Err(e) = server.serve_with_incoming_shutdown(incoming, stop).await {
        tracing::error!(error = %e, "gRPC server failed");
    }
}
