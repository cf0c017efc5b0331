//! A node embedded with NodeBuilder: it serves like `weir serve`, its engine backs the layer, and it joins a cluster.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use common::{counting_app, eventually, header, per_client, rules_file, serve};
use weir_client::{CheckRequest, Client, KeyExtractor, RateLimitLayer};
use weir_cluster::GossipProfile;
use weir_node::embed::NodeBuilder;
use weir_node::{Node, ServeConfig};

#[tokio::test]
async fn embedded_node_serves_checks_and_backs_the_layer_with_the_same_counters() {
    let rules = rules_file(&per_client(3));
    let node = NodeBuilder::new()
        .node_id("embedded")
        .rules_file(rules.to_path_buf())
        .start()
        .await
        .unwrap();
    let req = CheckRequest::new("cust_42", "GET /hello");
    let grpc = Client::builder()
        .deadline(Duration::from_secs(2))
        .grpc(&format!("http://{}", node.grpc_addr()))
        .unwrap();
    let http = Client::builder()
        .deadline(Duration::from_secs(2))
        .http(&format!("http://{}", node.http_addr()))
        .unwrap();
    assert_eq!(grpc.check(req.clone()).await.unwrap().remaining, 2);
    assert_eq!(http.check(req).await.unwrap().remaining, 1);

    // The service in the same process decides through the node's engine:
    // the budget the network callers spent is gone for it too.
    let layer = RateLimitLayer::new(
        Arc::clone(&node.state().engine),
        KeyExtractor::header("x-client-id"),
    );
    let (app, calls) = counting_app();
    let addr = serve(app.layer(layer)).await;
    let client = reqwest::Client::new();
    let get = || {
        client
            .get(format!("http://{addr}/hello"))
            .header("x-client-id", "cust_42")
            .send()
    };
    let res = get().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(header(&res, "ratelimit-remaining"), Some("0"));
    let res = get().await.unwrap();
    assert_eq!(res.status(), 429);
    assert!(header(&res, "retry-after").is_some());
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    node.shutdown().await;
}

#[tokio::test]
async fn builder_ports_default_to_free_loopback_ports() {
    let a = NodeBuilder::new().start().await.unwrap();
    let b = NodeBuilder::new().start().await.unwrap();
    for n in [&a, &b] {
        assert!(n.http_addr().ip().is_loopback() && n.http_addr().port() != 0);
        assert!(n.grpc_addr().ip().is_loopback() && n.grpc_addr().port() != 0);
    }
    assert_ne!(a.http_addr(), b.http_addr());
    a.shutdown().await;
    b.shutdown().await;
}

const SECRET: &str = "embed-test-secret";

fn member(id: &str, seeds: &[SocketAddr], rules: &Path) -> ServeConfig {
    let mut config = ServeConfig::ephemeral();
    config.node_id = Some(id.into());
    config.cluster.seeds = seeds.iter().map(|s| s.to_string()).collect();
    config.cluster.secret = Some(SECRET.into());
    config.cluster.gossip_profile = GossipProfile::Fast;
    config.rules_file = Some(rules.to_path_buf());
    // Generous, so a slow debug build never falls back to deciding locally.
    config.cluster.owner_deadline = Duration::from_secs(1);
    config
}

/// `ring_share` of `id` in `node`'s GET /v1/cluster, when it is listed alive.
async fn share_of(http: &reqwest::Client, node: SocketAddr, id: &str) -> Option<f64> {
    let doc: serde_json::Value = http
        .get(format!("http://{node}/v1/cluster"))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    doc["members"]
        .as_array()?
        .iter()
        .find(|m| m["id"] == id && m["state"] == "alive")?["ring_share"]
        .as_f64()
}

#[tokio::test]
async fn embedded_node_joins_a_cluster_of_served_nodes_and_owns_keys() {
    let rules = rules_file(&per_client(2));
    let a = Node::start(member("node-a", &[], &rules)).await.unwrap();
    let seed = a.state().config.gossip;
    assert_ne!(seed.port(), 0, "the node reports its bound gossip port");
    let b = Node::start(member("node-b", &[seed], &rules))
        .await
        .unwrap();
    let embedded = NodeBuilder::new()
        .node_id("embedded")
        .seeds([seed.to_string()])
        .cluster_secret(SECRET)
        .gossip_profile(GossipProfile::Fast)
        .owner_deadline(Duration::from_secs(1))
        .rules_file(rules.to_path_buf())
        .start()
        .await
        .unwrap();
    let http = reqwest::Client::new();
    for other in [a.http_addr(), b.http_addr()] {
        assert!(
            eventually(Duration::from_secs(20), || async {
                share_of(&http, other, "embedded")
                    .await
                    .is_some_and(|s| s > 0.0)
            })
            .await,
            "{other} never listed the embedded node alive with a ring share"
        );
    }

    // A key the embedded node owns is one counter for the whole cluster:
    // one check through node-a's HTTP API and one through the service's
    // own layer use up its limit of 2, wherever the third comes from.
    let cluster = a.state().engine.cluster().expect("a cluster member");
    let key = (0..)
        .map(|i| format!("cust-{i}"))
        .find(|k| cluster.owner_of(k).is_some_and(|o| o.id == "embedded"))
        .unwrap();
    let via_a = Client::builder()
        .deadline(Duration::from_secs(2))
        .http(&format!("http://{}", a.http_addr()))
        .unwrap();
    assert!(
        via_a
            .check(CheckRequest::new(key.as_str(), "GET /hello"))
            .await
            .unwrap()
            .allowed
    );
    let layer = RateLimitLayer::new(
        Arc::clone(&embedded.state().engine),
        KeyExtractor::header("x-client-id"),
    );
    let (app, calls) = counting_app();
    let addr = serve(app.layer(layer)).await;
    let get = || {
        http.get(format!("http://{addr}/hello"))
            .header("x-client-id", key.as_str())
            .send()
    };
    assert_eq!(get().await.unwrap().status(), 200);
    assert_eq!(get().await.unwrap().status(), 429);
    let third = via_a
        .check(CheckRequest::new(key.as_str(), "GET /hello"))
        .await
        .unwrap();
    assert!(!third.allowed, "node-a admitted past the shared limit");
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    embedded.shutdown().await;
    b.shutdown().await;
    a.shutdown().await;
}
