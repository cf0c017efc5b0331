//! The gRPC APIs (tonic): weir.v1.RateLimiter, Envoy's RateLimitService,
//! weir.v1.Peer, health and reflection.

mod envoy;
pub mod envoy_map;
pub mod health;
mod ratelimiter;
mod reflection;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::serve::Listener;
use futures::FutureExt;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use weir_cluster::net::peer_tls::PeerTls;

use crate::accept::Handshake;
use tonic::transport::Server;
use tower::layer::util::{Identity, Stack};
use weir_cluster::net::direct::DirectServer;
use weir_core::{MAX_IP_LEN, MAX_KEY_LEN, MAX_ROUTE_LEN, MAX_TIER_LEN};
use weir_proto::check_wire::rate_limiter_server::RateLimiterServer;
use weir_proto::rls_wire::rate_limit_service_server::RateLimitServiceServer;

pub use envoy::EnvoyRls;
pub use ratelimiter::RateLimiterService;

use crate::accept;
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

/// Serves weir.v1.RateLimiter, Envoy's RLS, health and reflection (over
/// TLS when `tls` is set), and weir.v1.Peer: on `peer_listener` when there
/// is one, else on this port too. With `peer_tls` the port that serves the
/// peers speaks mutual TLS only.
///
/// The servers send no HTTP/2 pings: the connection watch closes a
/// connection that starts no request for the idle timeout, which also
/// frees the slot of a client whose host vanished. Pings were a second
/// way to the same end, paid on every frame: hyper then takes a lock and
/// reads the clock per frame received. Without them an RLS request took
/// 13.7-14.4 us of node CPU instead of 14.7-15.1 (docs/performance.md).
pub async fn serve(
    state: Arc<NodeState>,
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    peer_listener: Option<TcpListener>,
    peer_tls: Option<Arc<PeerTls>>,
    stop: impl Future<Output = ()> + Send + 'static,
) {
    let stop = stop.shared();
    let max_bytes = max_message_bytes(state.config.limits.max_batch_items);
    let weir = RateLimiterServer::new(RateLimiterService::new(state.clone()))
        .max_decoding_message_size(max_bytes);
    let envoy = RateLimitServiceServer::new(EnvoyRls::new(state.clone()))
        .max_decoding_message_size(max_bytes);
    // weir.v1.Peer: node-to-node forwarding, behind the cluster secret.
    let peer = state.engine.cluster().map(|c| c.peer_service());
    // weir.v1.Regions: other regions' calls, beside the peer service and
    // behind the same secret.
    let regions = state.engine.cluster().and_then(|c| c.regions_service());
    let (shared_peer, shared_regions, own_port) = match peer_listener {
        Some(l) => (None, None, peer.map(|p| (p, regions, l))),
        None => (peer, regions, None),
    };
    // Direct Decide connections come to whichever listener serves the
    // peers, when it is plain (peers dial it without TLS).
    let direct = state.engine.cluster().map(|c| c.direct_server());
    let shared_direct = if own_port.is_none() && tls.is_none() {
        direct.clone()
    } else {
        None
    };
    let peer_handshake = peer_tls.map(Handshake::Peers);
    // Client TLS needs a peer port of its own (`ServeConfig::validate`), so
    // a port shared with the peers has at most the peers' TLS.
    let handshake = match tls {
        Some(a) => Some(Handshake::Fixed(a)),
        None if own_port.is_none() => peer_handshake.clone(),
        None => None,
    };
    let peer_task = own_port.map(|(peer, regions, l)| {
        let routes = Server::builder()
            .layer(CountRequests)
            .add_service(peer)
            .add_optional_service(regions);
        tokio::spawn(serve_routes(
            state.clone(),
            routes,
            l,
            peer_handshake,
            direct,
            stop.clone(),
        ))
    });
    let (health, follow_readiness) = health::service(state.clone(), stop.clone());
    let health_task = tokio::spawn(follow_readiness);
    let (reflection_v1, reflection_v1alpha) = reflection::services().unzip();
    let routes = Server::builder()
        .layer(CountRequests)
        .add_service(weir)
        .add_service(envoy)
        .add_service(health)
        .add_optional_service(reflection_v1)
        .add_optional_service(reflection_v1alpha)
        .add_optional_service(shared_peer)
        .add_optional_service(shared_regions);
    serve_routes(state, routes, listener, handshake, shared_direct, stop).await;
    if let Some(t) = peer_task {
        let _ = t.await;
    }
    let _ = health_task.await;
}

/// The services of one listener, each request counted on its connection.
type Routes = tonic::transport::server::Router<Stack<CountRequests, Identity>>;

/// Serves `routes` on `listener` until `stop`: on the gRPC threads
/// (`crate::cores`), or on the caller's runtime when there are none.
async fn serve_routes<F>(
    state: Arc<NodeState>,
    routes: Routes,
    listener: TcpListener,
    tls: Option<Handshake>,
    direct: Option<DirectServer>,
    stop: F,
) where
    F: Future<Output = ()> + Clone + Send + Sync + 'static,
{
    let threads = state.config.grpc_threads();
    let slots = accept::slots(state.config.limits.max_connections);
    if threads == 0 {
        let listener = accept::CappedListener::new(listener, slots);
        let conns = incoming(&state, listener, tls, direct, stop.clone());
        if let Err(e) = routes.serve_with_incoming_shutdown(conns, stop).await {
            tracing::error!(error = %e, "gRPC server failed");
        }
        return;
    }
    let shares = match accept::deal(listener, slots, threads, stop.clone()) {
        Ok(shares) => shares,
        Err(e) => return tracing::error!(error = %e, "gRPC listener failed"),
    };
    let serve = move |share| {
        let conns = incoming(&state, share, tls.clone(), direct.clone(), stop.clone());
        let (routes, stop) = (routes.clone(), stop.clone());
        async move {
            if let Err(e) = routes.serve_with_incoming_shutdown(conns, stop).await {
                tracing::error!(error = %e, "gRPC server failed");
            }
        }
    };
    if let Err(e) = crate::cores::serve("weir-grpc", shares, serve).await {
        tracing::error!(error = %e, "cannot start the gRPC threads");
    }
}

/// Accepted connections as the stream tonic serves from.
fn incoming<L>(
    state: &NodeState,
    listener: L,
    tls: Option<Handshake>,
    direct: Option<DirectServer>,
    stop: impl Future<Output = ()> + Send + 'static,
) -> impl futures::Stream<Item = Result<accept::Conn, std::io::Error>>
where
    L: Listener<Io = accept::CappedStream, Addr = std::net::SocketAddr> + Send + 'static,
{
    let limits = &state.config.limits;
    let mut rx = accept::incoming(listener, tls, direct, limits.timeouts(), stop);
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|c| c.map(Ok)))
}

/// Counts each gRPC request on its connection's activity, so a connection
/// that carries requests is never closed as idle and one that carries none is.
#[derive(Clone, Copy)]
struct CountRequests;

impl<S> tower::Layer<S> for CountRequests {
    type Service = Counted<S>;
    fn layer(&self, inner: S) -> Counted<S> {
        Counted(inner)
    }
}

#[derive(Clone)]
struct Counted<S>(S);

impl<S, B> tower::Service<http::Request<B>> for Counted<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = CountedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let busy = req
            .extensions()
            .get::<accept::ConnInfo>()
            .map(|c| c.activity.begin());
        CountedFuture {
            answer: self.0.call(req),
            busy,
        }
    }
}

pin_project_lite::pin_project! {
    /// A request's answer, in flight on its connection until it is ready.
    /// Not boxed: this wraps every gRPC request.
    struct CountedFuture<F> {
        #[pin]
        answer: F,
        busy: Option<accept::Busy>,
    }
}

impl<F: Future> Future for CountedFuture<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let out = std::task::ready!(this.answer.poll(cx));
        this.busy.take();
        Poll::Ready(out)
    }
}

/// `decide` on `request`'s message, under an edge span named `edge` when
/// the node exports traces: the child of the W3C `traceparent` the caller
/// sent in its metadata (Envoy sends it when its tracing is on). With no
/// traces the metadata is read for nothing and dropped at once.
async fn traced<T, F: Future>(
    state: &NodeState,
    edge: &'static str,
    request: tonic::Request<T>,
    decide: impl FnOnce(T) -> F,
) -> F::Output {
    let (metadata, _, call) = request.into_parts();
    let parent = state.traces.as_ref().and_then(|_| {
        let value = metadata.get("traceparent")?.to_str().ok()?;
        Some(value.to_owned())
    });
    drop(metadata);
    crate::traces::traced(state.traces.as_ref(), edge, || parent, decide(call)).await
}
