//! The client against real nodes and misbehaving servers: batching, deadlines, typed errors.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{closed_port, per_client, rules_file};
use tempfile::TempPath;
use tokio::net::TcpListener;
use weir_client::{CheckRequest, Client, ClientError, DEFAULT_IDLE_TIMEOUT};
use weir_node::{Node, ServeConfig};
use weir_proto::check_wire::rate_limiter_server::RateLimiterServer;

/// A node on ephemeral ports, and its rules file, which lives as long as
/// the caller keeps it.
async fn node_with(rules: Option<&str>) -> (Node, Option<TempPath>) {
    let mut config = ServeConfig::ephemeral();
    let file = rules.map(rules_file);
    config.rules_file = file.as_ref().map(|f| f.to_path_buf());
    (Node::start(config).await.expect("node starts"), file)
}

/// The node's own gRPC service, served again on another port behind an
/// interceptor that counts Check calls.
async fn counted_grpc(node: &Node) -> (String, Arc<AtomicU64>) {
    let calls = Arc::new(AtomicU64::new(0));
    let counted = calls.clone();
    let svc = RateLimiterServer::with_interceptor(
        weir_node::grpc::RateLimiterService::new(node.state().clone()),
        move |req| {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok(req)
        },
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    (format!("http://{addr}"), calls)
}

// One thread: the 200 checks are all queued before the batching task's
// next turn, so the count of calls is set by the batch size, not by how
// two threads happened to interleave.
#[tokio::test]
async fn concurrent_checks_share_grpc_calls_and_each_gets_its_own_answer() {
    let (node, _rules) = node_with(Some(&per_client(100))).await;
    let (url, calls) = counted_grpc(&node).await;
    let client = Client::builder()
        .deadline(Duration::from_secs(5))
        .max_batch(50)
        .grpc(&url)
        .unwrap();
    let answers = futures::future::join_all((0..200).map(|_| {
        let client = client.clone();
        tokio::spawn(async move { client.check(CheckRequest::new("hot", "GET /")).await })
    }))
    .await;
    let answers: Vec<_> = answers.into_iter().map(|a| a.unwrap().unwrap()).collect();
    let calls = calls.load(Ordering::SeqCst);
    eprintln!("200 concurrent checks took {calls} gRPC calls");
    // 200 / 50 = 4 full batches; one more when the first check wakes the
    // batching task before the rest are queued.
    assert!(
        calls <= 5,
        "200 checks took {calls} gRPC calls, batches of 50 make 4 (5 at most)"
    );
    // Exactly the limit admitted, each admission a distinct remaining value:
    // no answer lost, duplicated or handed to the wrong caller.
    let mut remaining: Vec<u64> = answers
        .iter()
        .filter(|a| a.allowed)
        .map(|a| a.remaining)
        .collect();
    remaining.sort_unstable();
    assert_eq!(remaining, (0..100).collect::<Vec<_>>());
    assert!(answers
        .iter()
        .filter(|a| !a.allowed)
        .all(|a| a.retry_after > Duration::ZERO && a.rule.as_deref() == Some("per-client")));
    node.shutdown().await;
}

/// Accepts connections and never answers, holding each one open.
async fn silent_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    format!("http://{addr}")
}

async fn assert_times_out(client: Client) {
    let started = Instant::now();
    let outcome = tokio::time::timeout(
        Duration::from_secs(5),
        client.check(CheckRequest::new("k", "GET /")),
    )
    .await
    .expect("the client's own deadline must fire, not the test's");
    assert_eq!(
        outcome,
        Err(ClientError::Timeout(Duration::from_millis(50)))
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn grpc_deadline_fires_against_a_server_that_never_answers() {
    let url = silent_server().await;
    let client = Client::builder()
        .deadline(Duration::from_millis(50))
        .grpc(&url)
        .unwrap();
    assert_times_out(client.clone()).await;
    // And again on the now-open (still silent) connection.
    assert_times_out(client).await;
}

#[tokio::test]
async fn http_deadline_fires_against_a_server_that_never_answers() {
    let url = silent_server().await;
    let client = Client::builder()
        .deadline(Duration::from_millis(50))
        .http(&url)
        .unwrap();
    assert_times_out(client).await;
}

#[tokio::test]
async fn closed_port_is_unavailable_not_a_timeout() {
    let url = format!("http://{}", closed_port().await);
    for client in [
        Client::builder()
            .deadline(Duration::from_secs(2))
            .grpc(&url)
            .unwrap(),
        Client::builder()
            .deadline(Duration::from_secs(2))
            .http(&url)
            .unwrap(),
    ] {
        let err = client
            .check(CheckRequest::new("k", "GET /"))
            .await
            .unwrap_err();
        assert!(
            matches!(err, ClientError::Unavailable(_)),
            "closed port gave {err:?}"
        );
    }
}

#[tokio::test]
async fn grpc_and_http_read_the_same_denial() {
    let (node, _rules) = node_with(Some(&per_client(1))).await;
    let grpc = Client::builder()
        .deadline(Duration::from_secs(2))
        .grpc(&format!("http://{}", node.grpc_addr()))
        .unwrap();
    let http = Client::builder()
        .deadline(Duration::from_secs(2))
        .http(&format!("http://{}", node.http_addr()))
        .unwrap();
    let req = CheckRequest::new("cust_42", "POST /v1/charges");
    let first = grpc.check(req.clone()).await.unwrap();
    assert!(first.allowed && first.limited);
    assert_eq!((first.limit, first.remaining), (1, 0));
    let by_http = http.check(req.clone()).await.unwrap();
    let by_grpc = grpc.check(req).await.unwrap();
    for denied in [&by_http, &by_grpc] {
        assert!(!denied.allowed && denied.limited);
        assert_eq!(denied.limit, 1);
        assert_eq!(denied.rule.as_deref(), Some("per-client"));
        assert!(denied.retry_after > Duration::ZERO);
        assert!(denied.retry_after_secs() >= 1);
        assert!(denied.reset_at_ms > 0);
    }
    assert_eq!(by_http.reset_at_ms, by_grpc.reset_at_ms);
    node.shutdown().await;
}

#[tokio::test]
async fn invalid_arguments_name_the_field() {
    let (node, _rules) = node_with(None).await;
    let grpc = Client::builder()
        .deadline(Duration::from_secs(2))
        .grpc(&format!("http://{}", node.grpc_addr()))
        .unwrap();
    let http = Client::builder()
        .deadline(Duration::from_secs(2))
        .http(&format!("http://{}", node.http_addr()))
        .unwrap();
    let field = |r: Result<_, ClientError>| match r {
        Err(ClientError::InvalidArgument { field, .. }) => field,
        other => panic!("expected InvalidArgument, got {other:?}"),
    };
    for client in [&grpc, &http] {
        // Refused before sending.
        assert_eq!(
            field(client.check(CheckRequest::new("k", "GET /").cost(0)).await),
            "cost"
        );
        assert_eq!(
            field(client.check(CheckRequest::new("", "GET /")).await),
            "key"
        );
        assert_eq!(
            field(
                client
                    .check(CheckRequest::new("k", "GET /").ip("not-an-ip"))
                    .await
            ),
            "ip"
        );
        // Refused by the node: the default per-client rule admits at most 100 at once.
        assert_eq!(
            field(
                client
                    .check(CheckRequest::new("k", "GET /").cost(1_000))
                    .await
            ),
            "cost"
        );
    }
    node.shutdown().await;
}

#[tokio::test]
async fn unlimited_check_is_allowed_without_a_rule() {
    let rules = r#"
        [[rule]]
        name      = "charges"
        route     = "POST /v1/charges"
        algorithm = "fixed_window"
        limit     = 1
        window    = "60s"
    "#;
    let (node, _rules) = node_with(Some(rules)).await;
    for client in [
        Client::grpc(&format!("http://{}", node.grpc_addr())).unwrap(),
        Client::http(&format!("http://{}", node.http_addr())).unwrap(),
    ] {
        let r = client
            .check_within(CheckRequest::new("k", "GET /other"), Duration::from_secs(2))
            .await
            .unwrap();
        assert!(r.allowed && !r.limited && r.rule.is_none());
    }
    node.shutdown().await;
}

#[tokio::test]
async fn bad_endpoint_is_refused_at_build_time() {
    assert!(matches!(
        Client::grpc("not a url"),
        Err(ClientError::Endpoint { .. })
    ));
    assert!(matches!(
        Client::http("::"),
        Err(ClientError::Endpoint { .. })
    ));
}

/// An HTTP/1 server that allows every check on a kept-alive connection,
/// counting the connections it accepted.
async fn counting_http_server() -> (String, Arc<AtomicU64>) {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicU64::new(0));
    let counted = accepted.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut conn = BufReader::new(socket);
                loop {
                    let mut body_len = 0;
                    loop {
                        let mut line = String::new();
                        if conn.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        if let Some((name, value)) = line.split_once(':') {
                            if name.eq_ignore_ascii_case("content-length") {
                                body_len = value.trim().parse().unwrap();
                            }
                        }
                    }
                    let mut body = vec![0; body_len];
                    conn.read_exact(&mut body).await.unwrap();
                    let verdict = r#"{"allowed":true,"limit":10,"remaining":9}"#;
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\n\r\n{verdict}",
                        verdict.len()
                    );
                    conn.get_mut().write_all(answer.as_bytes()).await.unwrap();
                }
            });
        }
    });
    (format!("http://{addr}"), accepted)
}

#[tokio::test]
async fn http_lets_an_idle_connection_go_before_the_node_would_close_it() {
    // The node closes a kept-alive connection idle for its header-read
    // timeout; a pool that kept it longer would sometimes write a check
    // to a connection being closed, and lose it.
    assert!(DEFAULT_IDLE_TIMEOUT < ServeConfig::default().limits.header_read_timeout);

    let (url, accepted) = counting_http_server().await;
    let client = Client::builder()
        .deadline(Duration::from_secs(5))
        .idle_timeout(Duration::from_millis(100))
        .http(&url)
        .unwrap();
    let check = || client.check(CheckRequest::new("k", "GET /"));
    check().await.unwrap();
    check().await.unwrap();
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "busy, it keeps one connection"
    );
    // The idle time is the behaviour under test, not a wait for an event.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(check().await.unwrap().allowed);
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "a connection idle past the timeout is not reused"
    );
}
