//! The gRPC APIs (tonic): weir.v1.RateLimiter, Envoy's RateLimitService, and weir.v1.Peer.

mod envoy;
pub mod envoy_map;
mod ratelimiter;

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;
use weir_core::{MAX_IP_LEN, MAX_KEY_LEN, MAX_ROUTE_LEN, MAX_TIER_LEN};
use weir_proto::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use weir_proto::weir::v1::rate_limiter_server::RateLimiterServer;

pub use envoy::EnvoyRls;
pub use ratelimiter::RateLimiterService;

use crate::state::NodeState;

/// Wire bytes one batch item may take beyond its strings: field tags,
/// length prefixes, the cost varint and the item's own framing.
const ITEM_FRAMING_BYTES: usize = 64;
/// Room for the request's own fields (an RLS domain, hits_addend).
const REQUEST_OVERHEAD_BYTES: usize = 4 * 1024;

/// The largest message a full batch of well-formed items can need: every
/// string at its validated maximum. A bigger message cannot be a valid
/// batch, so it is refused while decoding (OUT_OF_RANGE) instead of being
/// buffered whole; one item past the batch limit still decodes, so the
/// caller hears INVALID_ARGUMENT naming `items` rather than a size error.
pub fn max_message_bytes(max_batch_items: usize) -> usize {
    let item = MAX_KEY_LEN + MAX_ROUTE_LEN + MAX_TIER_LEN + MAX_IP_LEN + ITEM_FRAMING_BYTES;
    max_batch_items
        .saturating_add(1)
        .saturating_mul(item)
        .saturating_add(REQUEST_OVERHEAD_BYTES)
}

pub async fn serve(
    state: Arc<NodeState>,
    listener: TcpListener,
    stop: impl Future<Output = ()> + Send + 'static,
) {
    let max_bytes = max_message_bytes(state.config.limits.max_batch_items);
    let weir = RateLimiterServer::new(RateLimiterService::new(state.clone()))
        .max_decoding_message_size(max_bytes);
    // weir.v1.Peer: node-to-node forwarding, behind the cluster secret.
    let peer = state.engine.cluster().map(|c| c.peer_service());
    let envoy =
        RateLimitServiceServer::new(EnvoyRls::new(state)).max_decoding_message_size(max_bytes);
    // tonic sets TCP_NODELAY only on listeners it binds itself; without it
    // a small answer (a forwarded check's) can wait on a delayed ACK.
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let server = Server::builder()
        .add_service(weir)
        .add_service(envoy)
        .add_optional_service(peer);
    if let Err(e) = server.serve_with_incoming_shutdown(incoming, stop).await {
        tracing::error!(error = %e, "gRPC server failed");
    }
}
