//! The hand-written HTTP/1.1 responder: weir's answer to an admitted check, canned, with no JSON read and nothing decided.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use crate::bench::http1::read_message;

/// A 200 with the headers and body weir sends for an admitted check.
pub(super) fn canned() -> Vec<u8> {
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

/// Serves the canned answer to every request on `listener`.
pub async fn serve(listener: TcpListener) {
    let canned: Arc<[u8]> = canned().into();
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
}

/// Serves the canned answer on 127.0.0.1; its address.
pub async fn bare_http() -> SocketAddr {
    super::on_loopback(serve).await
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
