//! A peer connection against a bare HTTP/2 server on loopback.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tower::{Service, ServiceExt};

use super::*;

const CONFIG: ConnConfig = ConnConfig {
    connect_timeout: Duration::from_secs(1),
    keepalive: Duration::from_secs(2),
};

/// Serves one connection that answers every request with its path, until
/// `close` fires or is dropped; then the connection is dropped.
async fn one_connection_server() -> (SocketAddr, oneshot::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (close, closed) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let answer = service_fn(|req: http::Request<hyper::body::Incoming>| async move {
            let path = Bytes::copy_from_slice(req.uri().path().as_bytes());
            Ok::<_, Infallible>(http::Response::new(Full::new(path)))
        });
        let serve = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .serve_connection(TokioIo::new(tcp), answer);
        tokio::select! {
            _ = serve => {}
            _ = closed => {}
        }
    });
    (addr, close)
}

fn request(addr: SocketAddr, path: &str) -> http::Request<Body> {
    http::Request::post(format!("http://{addr}{path}"))
        .body(Body::empty())
        .unwrap()
}

/// Polls `done` until it holds, for at most five seconds.
pub(in crate::net) async fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn calls_from_every_clone_go_over_the_one_connection() {
    let (addr, _close) = one_connection_server().await;
    let conn = PeerConn::dial(addr, CONFIG);
    // The server accepts one connection only: a second dial would hang.
    for (i, mut c) in [conn.clone(), conn.clone(), conn].into_iter().enumerate() {
        let path = format!("/call/{i}");
        let response = c.ready().await.unwrap().call(request(addr, &path)).await;
        let body = response.unwrap().into_body().collect().await.unwrap();
        assert_eq!(body.to_bytes(), path.as_bytes());
    }
}

#[tokio::test]
async fn a_failed_dial_fails_its_calls_and_reads_closed() {
    // A port just freed: nothing listens on it.
    let addr = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let mut conn = PeerConn::dial(addr, CONFIG);
    let err = conn.call(request(addr, "/x")).await.unwrap_err();
    assert!(err.to_string().contains("refused"), "{err}");
    assert!(conn.is_closed());
}

#[tokio::test]
async fn a_connection_the_peer_drops_reads_closed() {
    let (addr, close) = one_connection_server().await;
    let mut conn = PeerConn::dial(addr, CONFIG);
    conn.call(request(addr, "/first")).await.unwrap();
    assert!(!conn.is_closed());
    drop(close);
    eventually("the dropped connection reads closed", || conn.is_closed()).await;
}
