//! The layer around a plain tower `service_fn` served by hyper, and around a tonic gRPC server.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use common::{limiter, per_client, RATE_LIMIT_HEADERS};
use http::{Request, Response};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tower::{Service, ServiceBuilder, ServiceExt};
use weir_client::{KeyExtractor, RateLimitLayer};
use weir_proto::weir::v1::rate_limiter_client::RateLimiterClient;
use weir_proto::weir::v1::rate_limiter_server::{RateLimiter, RateLimiterServer};
use weir_proto::weir::v1::{CheckItem, CheckRequest, CheckResponse};

/// Serves `layer` around a counting hello-world `service_fn` with hyper,
/// giving each request its peer address as a `SocketAddr` extension.
async fn serve_hyper(layer: RateLimitLayer) -> (SocketAddr, Arc<AtomicU64>) {
    let calls = Arc::new(AtomicU64::new(0));
    let counted = calls.clone();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, peer) = listener.accept().await.unwrap();
            let counted = counted.clone();
            let svc = ServiceBuilder::new()
                .map_request(move |mut req: Request<Incoming>| {
                    req.extensions_mut().insert(peer);
                    req
                })
                .layer(layer.clone())
                .service_fn(move |_req: Request<Incoming>| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("hello")))) }
                });
            tokio::spawn(async move {
                let svc = hyper_util::service::TowerToHyperService::new(svc);
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (addr, calls)
}

#[tokio::test]
async fn hyper_service_gets_headers_on_allowed_and_never_sees_a_denied_request() {
    let layer = RateLimitLayer::new(limiter(&per_client(2)), KeyExtractor::PeerIp);
    let (addr, calls) = serve_hyper(layer).await;
    let http = reqwest::Client::new();
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let res = http.get(format!("http://{addr}/")).send().await.unwrap();
        for h in RATE_LIMIT_HEADERS {
            assert!(res.headers().contains_key(h), "{} lacks {h}", res.status());
        }
        assert_eq!(
            res.headers().contains_key("retry-after"),
            res.status() == 429
        );
        statuses.push(res.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 429, 429]);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn tower_service_called_directly_is_limited() {
    // No server at all: the layer is an ordinary tower Service.
    let calls = Arc::new(AtomicU64::new(0));
    let counted = calls.clone();
    let mut svc = ServiceBuilder::new()
        .layer(RateLimitLayer::new(
            limiter(&per_client(1)),
            KeyExtractor::header("x-key"),
        ))
        .service_fn(move |_req: Request<Empty<Bytes>>| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new())) }
        });
    let req = || {
        Request::get("/x")
            .header("x-key", "k")
            .body(Empty::new())
            .unwrap()
    };
    let first = svc.ready().await.unwrap().call(req()).await.unwrap();
    assert_eq!(first.status(), 200);
    let second = svc.ready().await.unwrap().call(req()).await.unwrap();
    assert_eq!(second.status(), 429);
    let body = second.into_body().collect().await.unwrap().to_bytes();
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(json["rule"], "per-client");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// A RateLimiter service that only counts its calls: the thing being protected.
#[derive(Clone, Default)]
struct Counting(Arc<AtomicU64>);

#[tonic::async_trait]
impl RateLimiter for Counting {
    async fn check(
        &self,
        _: tonic::Request<CheckRequest>,
    ) -> Result<tonic::Response<CheckResponse>, tonic::Status> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(tonic::Response::new(CheckResponse::default()))
    }
}

#[tokio::test]
async fn tonic_server_denial_is_resource_exhausted_and_never_reaches_the_service() {
    let layer = RateLimitLayer::new(limiter(&per_client(2)), KeyExtractor::header("x-client-id"));
    let inner = Counting::default();
    let calls = inner.0.clone();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .layer(layer)
            .add_service(RateLimiterServer::new(inner))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    let mut client = RateLimiterClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let call = |mut c: RateLimiterClient<_>| async move {
        let mut req = tonic::Request::new(CheckRequest {
            items: vec![CheckItem::default()],
        });
        req.metadata_mut()
            .insert("x-client-id", "svc-a".parse().unwrap());
        c.check(req).await
    };
    for _ in 0..2 {
        let ok = call(client.clone()).await.unwrap();
        assert!(ok.metadata().get("ratelimit-limit").is_some());
    }
    let denied = call(client.clone()).await.unwrap_err();
    assert_eq!(denied.code(), tonic::Code::ResourceExhausted);
    assert!(denied.metadata().get("retry-after").is_some());
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // Without the key the layer answers INVALID_ARGUMENT itself.
    let bad = client
        .check(CheckRequest { items: vec![] })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}
