//! The layer on a remote node through the client: verdicts, and failing open or closed when the node is gone.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{closed_port, counting_app, eventually, header, per_client, rules_file, serve};
use weir_client::{Client, FailureMode, KeyExtractor, RateLimitLayer};
use weir_node::{Node, ServeConfig};

fn client(url: &str) -> Client {
    // Generous for a loaded test machine; the deadline itself is tested elsewhere.
    Client::builder()
        .deadline(Duration::from_millis(500))
        .grpc(url)
        .unwrap()
}

async fn status(http: &reqwest::Client, addr: std::net::SocketAddr) -> reqwest::Response {
    http.get(format!("http://{addr}/hello"))
        .header("x-client-id", "cust_42")
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn remote_denial_is_a_429_with_headers_and_never_reaches_the_service() {
    let mut config = ServeConfig::ephemeral();
    let rules = rules_file(&per_client(2));
    config.rules_file = Some(rules.to_path_buf());
    let node = Node::start(config).await.unwrap();
    let layer = RateLimitLayer::new(
        client(&format!("http://{}", node.grpc_addr())),
        KeyExtractor::header("x-client-id"),
    );
    let (app, calls) = counting_app();
    let addr = serve(app.layer(layer)).await;
    let http = reqwest::Client::new();
    for remaining in ["1", "0"] {
        let res = status(&http, addr).await;
        assert_eq!(res.status(), 200);
        assert_eq!(header(&res, "ratelimit-remaining"), Some(remaining));
        for h in common::RATE_LIMIT_HEADERS {
            assert!(header(&res, h).is_some(), "allowed response lacks {h}");
        }
    }
    let res = status(&http, addr).await;
    assert_eq!(res.status(), 429);
    for h in common::RATE_LIMIT_HEADERS {
        assert!(header(&res, h).is_some(), "429 lacks {h}");
    }
    assert!(header(&res, "retry-after").unwrap().parse::<u64>().unwrap() >= 1);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    node.shutdown().await;
}

#[tokio::test]
async fn unreachable_node_fails_open_and_is_counted() {
    let layer = RateLimitLayer::new(
        client(&format!("http://{}", closed_port().await)),
        KeyExtractor::header("x-client-id"),
    );
    let stats = layer.stats();
    let (app, calls) = counting_app();
    let addr = serve(app.layer(layer)).await;
    let res = status(&reqwest::Client::new(), addr).await;
    assert_eq!(res.status(), 200);
    assert_eq!(
        header(&res, "ratelimit-limit"),
        None,
        "no verdict, no limit to show"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let s = stats.snapshot();
    assert_eq!(
        (s.unavailable_open, s.unavailable_closed, s.allowed),
        (1, 0, 0)
    );
}

#[tokio::test]
async fn unreachable_node_fails_closed_with_503_never_429() {
    let layer = RateLimitLayer::new(
        client(&format!("http://{}", closed_port().await)),
        KeyExtractor::header("x-client-id"),
    )
    .failure_mode(FailureMode::Closed);
    let stats = layer.stats();
    let (app, calls) = counting_app();
    let addr = serve(app.layer(layer)).await;
    let res = status(&reqwest::Client::new(), addr).await;
    assert_eq!(res.status(), 503);
    assert_eq!(
        header(&res, "content-type"),
        Some("application/problem+json")
    );
    assert_eq!(header(&res, "retry-after"), None);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(stats.snapshot().unavailable_closed, 1);
}

#[tokio::test]
async fn node_stopped_mid_test_flips_the_layer_to_its_failure_mode() {
    let node = Node::start(ServeConfig::ephemeral()).await.unwrap();
    let remote = client(&format!("http://{}", node.grpc_addr()));
    let closed = RateLimitLayer::new(remote.clone(), KeyExtractor::header("x-client-id"))
        .failure_mode(FailureMode::Closed);
    let open = RateLimitLayer::new(remote, KeyExtractor::header("x-client-id"));
    let (closed_stats, open_stats) = (closed.stats(), open.stats());
    let (app, _) = counting_app();
    let closed_addr = serve(app.layer(closed)).await;
    let (app, open_calls) = counting_app();
    let open_addr = serve(app.layer(open)).await;
    let http = reqwest::Client::new();

    for addr in [closed_addr, open_addr] {
        let res = status(&http, addr).await;
        assert_eq!(res.status(), 200);
        assert!(
            header(&res, "ratelimit-limit").is_some(),
            "decided by the node"
        );
    }
    node.shutdown().await;

    // The channel notices the node is gone on its next call; poll, not sleep.
    assert!(
        eventually(Duration::from_secs(10), || async {
            status(&http, closed_addr).await.status() == 503
        })
        .await,
        "fail-closed layer never answered 503 after the node stopped"
    );
    let res = status(&http, open_addr).await;
    assert_eq!(res.status(), 200);
    assert_eq!(header(&res, "ratelimit-limit"), None);
    assert!(closed_stats.snapshot().unavailable_closed >= 1);
    assert_eq!(open_stats.snapshot().unavailable_open, 1);
    assert_eq!(open_calls.load(Ordering::SeqCst), 2);
}
