//! A slow client loses its connection: request heads, bodies, TLS handshakes and gRPC prefaces each have a deadline.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_proto::weir::v1::rate_limiter_client::RateLimiterClient;
use weir_proto::weir::v1::{CheckItem, CheckRequest};
use weir_tests::{TestNode, DEADLINE};

const RULES: &str = r#"
[[rule]]
name      = "per-client"
algorithm = "sliding_window_log"
limit     = 5
window    = "1h"
"#;

/// Short, so the node gives up long before the test's own deadline.
const TIMEOUT: Duration = Duration::from_millis(300);

async fn node() -> TestNode {
    TestNode::start(RULES, |c| {
        c.limits.header_read_timeout = TIMEOUT;
        c.limits.body_read_timeout = TIMEOUT;
    })
    .await
}

/// Writes `sent`, then waits for the node to close the connection; returns
/// what it answered. Panics if it is still open at the test deadline.
async fn held(node: &TestNode, sent: &[u8]) -> String {
    let mut stream = TcpStream::connect(node.node().http_addr()).await.unwrap();
    stream.write_all(sent).await.unwrap();
    let mut out = Vec::new();
    let read = tokio::time::timeout(DEADLINE, stream.read_to_end(&mut out)).await;
    assert!(read.is_ok(), "still connected after {DEADLINE:?}");
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn half_a_request_line_is_disconnected() {
    let node = node().await;
    held(&node, b"POST /v1/che").await;
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_disconnected() {
    let node = node().await;
    held(&node, b"").await;
}

#[tokio::test]
async fn half_an_http2_preface_is_disconnected() {
    let node = node().await;
    held(&node, b"PRI * HTTP/2.0\r\n").await;
}

#[tokio::test]
async fn a_body_that_stops_arriving_is_answered_408() {
    let node = node().await;
    let answer = held(
        &node,
        b"POST /v1/check HTTP/1.1\r\nHost: weir\r\nContent-Type: application/json\r\n\
          Content-Length: 100\r\nConnection: close\r\n\r\n{\"key\":",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"field\":\"body\""), "{answer}");
}

/// A kept-alive HTTP/1 connection that sends no next request is closed
/// one head timeout after its last answer, long before the idle timeout
/// (60 s, over the test's deadline).
#[tokio::test]
async fn a_kept_alive_connection_left_idle_is_disconnected() {
    let node = node().await;
    let body = r#"{"key":"k"}"#;
    let request = format!(
        "POST /v1/check HTTP/1.1\r\nHost: weir\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let answer = held(&node, request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test]
async fn a_prompt_client_is_answered_as_before() {
    let node = node().await;
    let res = node.check(serde_json::json!({"key": "k"})).await;
    assert_eq!(res.status(), 200);
}

#[tokio::test]
async fn a_stalled_tls_handshake_is_disconnected() {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    let node = TestNode::start(RULES, |c| {
        c.limits.header_read_timeout = TIMEOUT;
        c.tls = Some(weir_node::tls::TlsFiles { cert, key });
        c.peer_grpc = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    // The first bytes of a TLS record header, and then nothing.
    held(&node, &[0x16, 0x03]).await;
}

#[tokio::test]
async fn a_silent_grpc_connection_gives_its_slot_back() {
    let node = TestNode::start(RULES, |c| {
        c.limits.header_read_timeout = TIMEOUT;
        c.limits.max_connections = 1;
    })
    .await;
    let addr = node.node().grpc_addr();
    // Takes the only slot and sends half a preface.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    silent.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    gives_its_slot_back(addr, &mut silent, "silent").await;
}

/// One item for key "k".
fn one_check() -> CheckRequest {
    CheckRequest {
        items: vec![CheckItem {
            key: "k".into(),
            ..CheckItem::default()
        }],
    }
}

/// Whether a new client's check at `addr` is allowed; an error if it is not
/// answered within [`DEADLINE`] (the only slot stays taken) or fails.
async fn served(addr: SocketAddr) -> Result<bool, Box<dyn std::error::Error>> {
    let check = async {
        let mut client = RateLimiterClient::connect(format!("http://{addr}")).await?;
        let r = client.check(one_check()).await?;
        Ok::<_, Box<dyn std::error::Error>>(r.into_inner().results[0].allowed)
    };
    tokio::time::timeout(DEADLINE, check).await?
}

/// The only slot, held by the `what` connection (read from `held`), is
/// given back: a new client at `addr` is served and the held connection is
/// closed, each within [`DEADLINE`].
async fn gives_its_slot_back(addr: SocketAddr, held: &mut (impl AsyncRead + Unpin), what: &str) {
    let allowed = served(addr)
        .await
        .unwrap_or_else(|e| panic!("served once the {what} connection is closed: {e}"));
    assert!(allowed, "allowed");
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(DEADLINE, held.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the {what} connection was closed");
}

/// The node sends no pings of its own: a client that keeps its connection
/// alive with pings but starts no request is closed after the idle timeout,
/// and its slot serves the next client.
#[tokio::test]
async fn an_idle_grpc_connection_gives_its_slot_back() {
    use tonic::transport::Endpoint;
    let node = TestNode::start(RULES, |c| {
        c.limits.idle_timeout = TIMEOUT;
        c.limits.max_connections = 1;
    })
    .await;
    let addr = node.node().grpc_addr();
    let idle = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .http2_keep_alive_interval(Duration::from_millis(50))
        .keep_alive_while_idle(true)
        .connect()
        .await
        .unwrap();
    let mut idle = RateLimiterClient::new(idle);
    assert!(idle.check(one_check()).await.unwrap().into_inner().results[0].allowed);
    // The only slot is held by `idle` until the node closes it.
    assert!(
        served(addr)
            .await
            .expect("served once the idle connection is closed"),
        "allowed"
    );
}

/// Frames of a gRPC request that never sends its body: the preface, an
/// empty SETTINGS, and HEADERS (literal fields, no Huffman, END_HEADERS
/// without END_STREAM) for stream 1.
fn stalled_grpc_request() -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/weir.v1.RateLimiter/Check"),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ] {
        // Literal header field without indexing, new name (RFC 7541 6.2.2).
        block.push(0x00);
        block.push(name.len() as u8);
        block.extend_from_slice(name.as_bytes());
        block.push(value.len() as u8);
        block.extend_from_slice(value.as_bytes());
    }
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend_from_slice(&frame(0x4, 0, 0, &[]));
    out.extend_from_slice(&frame(0x1, 0x4, 1, &block));
    out
}

/// One HTTP/2 frame (RFC 9113 4.1).
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = len.to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[kind, flags]);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A request opened and never finished holds its connection's slot only
/// for the stall timeout (`--body-read-timeout`), though the client keeps
/// pinging.
#[tokio::test]
async fn a_grpc_request_whose_body_never_comes_gives_its_slot_back() {
    let node = TestNode::start(RULES, |c| {
        // The watch's first look comes at the head deadline; by then the
        // request is in flight, so the idle timeout (60 s) never applies.
        c.limits.header_read_timeout = Duration::from_secs(1);
        c.limits.body_read_timeout = TIMEOUT;
        c.limits.max_connections = 1;
    })
    .await;
    let addr = node.node().grpc_addr();
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    stalled.write_all(&stalled_grpc_request()).await.unwrap();
    let (mut from_node, mut to_node) = stalled.into_split();
    // Pings keep bytes coming from the client; they are not progress.
    let pinger = tokio::spawn(async move {
        for _ in 0..300 {
            let ping = frame(0x6, 0, 0, &[0; 8]);
            if to_node.write_all(&ping).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    gives_its_slot_back(addr, &mut from_node, "stalled").await;
    pinger.abort();
}
