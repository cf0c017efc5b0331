//! The bare reference servers: an HTTP/1.1 responder sending weir's admitted verdict canned, and a tonic RateLimiter that answers without deciding.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use weir_proto::weir::v1::rate_limiter_server::{RateLimiter, RateLimiterServer};
use weir_proto::weir::v1::{CheckRequest, CheckResponse, CheckResult};

use super::http1::read_message;

/// A 200 with the headers and body weir sends for an admitted check.
fn canned() -> Vec<u8> {
    let body = r#"{"allowed":true,"limit":1000000000,"remaining":999999999,"reset_at":1795981980000,"retry_after_ms":0,"rule":"bench"}"#;
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nratelimit-limit: 1000000000\r\n\
         ratelimit-remaining: 999999999\r\nratelimit-reset: 120\r\nx-ratelimit-limit: 1000000000\r\n\
         x-ratelimit-remaining: 999999999\r\nx-ratelimit-reset: 1795981980\r\n\
         ratelimit-policy: \"bench\";q=1000000000;w=60\r\nratelimit: \"bench\";r=999999999;t=120\r\n\
         content-length: {}\r\ndate: Sun, 29 Nov 2026 19:51:39 GMT\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Serves the canned answer to every request on 127.0.0.1; its address.
pub async fn bare_http() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let canned: Arc<[u8]> = canned().into();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let canned = canned.clone();
            let _ = s.set_nodelay(true);
            tokio::spawn(async move {
                let mut buf = Vec::with_capacity(4096);
                while read_message(&mut s, &mut buf).await.is_ok() {
                    if s.write_all(&canned).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

struct Bare;

#[tonic::async_trait]
impl RateLimiter for Bare {
    async fn check(
        &self,
        request: tonic::Request<CheckRequest>,
    ) -> Result<tonic::Response<CheckResponse>, tonic::Status> {
        let results = request
            .into_inner()
            .items
            .iter()
            .map(|_| CheckResult {
                allowed: true,
                limit: 1_000_000_000,
                remaining: 999_999_999,
                reset_at_ms: 1_795_981_980_000,
                rule: "bench".into(),
                limited: true,
                ..Default::default()
            })
            .collect();
        Ok(tonic::Response::new(CheckResponse { results }))
    }
}

/// Serves `Bare` on 127.0.0.1; its URL. The listener is bound before this
/// returns, so the first call cannot beat the server to its port.
pub async fn bare_grpc() -> String {
    let incoming = TcpIncoming::bind("127.0.0.1:0".parse().expect("address"))
        .expect("bind")
        .with_nodelay(Some(true));
    let addr = incoming.local_addr().expect("address");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RateLimiterServer::new(Bare))
            .serve_with_incoming(incoming),
    );
    format!("http://{addr}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::http1::status_of;

    #[tokio::test]
    async fn the_canned_answer_is_one_framed_200() {
        let canned = canned();
        let mut wire = canned.clone();
        wire.extend_from_slice(&canned);
        let mut buf = Vec::new();
        let mut stream = wire.as_slice();
        for _ in 0..2 {
            let first = read_message(&mut stream, &mut buf).await.expect("framed");
            assert_eq!(status_of(&first), 200);
        }
        assert!(buf.is_empty() && stream.is_empty());
    }
}
