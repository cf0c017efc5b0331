//! Three `weir serve` nodes as one limiter, over their public APIs: exact limits, rule writes, leaving.

use serde_json::{json, Value};
use tonic::transport::Channel;
use weir_cluster::OwnerFailure;
use weir_node::ServeConfig;
use weir_proto::weir::v1::rate_limiter_client::RateLimiterClient;
use weir_proto::weir::v1::{CheckItem, CheckRequest};
use weir_tests::{cluster_member, settled, wait_until, TestNode};

const LIMIT: usize = 20;
const RULES: &str = r#"
[[rule]]
name      = "per-client"
algorithm = "sliding_window_log"
limit     = 20
window    = "60s"
"#;
const ADMIN: &str = "admin-token";

fn member_failing(
    c: &mut ServeConfig,
    id: &str,
    seed: Option<std::net::SocketAddr>,
    on_failure: OwnerFailure,
    replicas: usize,
) {
    cluster_member(c, id, seed);
    c.cluster.on_owner_failure = on_failure;
    c.cluster.replicas = replicas;
    c.admin_token = Some(ADMIN.to_string());
}

/// Three nodes at the defaults but the harness's 1 s owner deadline
/// ([`cluster_member`]; `weir-node/tests/owner_accuracy.rs` holds the
/// counts at the binary's own 5 ms), joined through the first; returns
/// once every node lists all three as alive.
async fn three_nodes() -> Vec<TestNode> {
    let defaults = weir_cluster::ClusterConfig::default();
    three_nodes_failing(defaults.on_owner_failure, defaults.replicas).await
}

async fn three_nodes_failing(on_failure: OwnerFailure, replicas: usize) -> Vec<TestNode> {
    three_nodes_with(on_failure, replicas, false).await
}

async fn three_nodes_with(
    on_failure: OwnerFailure,
    replicas: usize,
    grpc_only: bool,
) -> Vec<TestNode> {
    let member = |id, seed| {
        move |c: &mut ServeConfig| {
            member_failing(c, id, seed, on_failure, replicas);
            c.cluster.grpc_only = grpc_only;
        }
    };
    let first = TestNode::start(RULES, member("node-1", None)).await;
    let seed = first.state().config.gossip;
    let mut nodes = vec![first];
    for id in ["node-2", "node-3"] {
        nodes.push(TestNode::start(RULES, member(id, Some(seed))).await);
    }
    for n in &nodes {
        wait_until("every node lists three live members", || async {
            let doc = n.get_json("/v1/cluster").await;
            let alive = doc["members"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["state"] == "alive")
                .count();
            alive == 3
        })
        .await;
        settled(n).await;
    }
    nodes
}

fn owner_of(n: &TestNode, key: &str) -> String {
    let cluster = n.state().engine.cluster().expect("a cluster member");
    cluster.owner_of(key).unwrap().id
}

fn key_owned_by(n: &TestNode, owner: &str, prefix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .find(|k| owner_of(n, k) == owner)
        .unwrap()
}

async fn http_allowed(n: &TestNode, key: &str) -> bool {
    let res = n.check(json!({"key": key, "route": "GET /x"})).await;
    match res.status().as_u16() {
        200 => true,
        429 => false,
        s => panic!("{}: status {s}", n.base),
    }
}

async fn grpc_allowed(client: &mut RateLimiterClient<Channel>, key: &str) -> bool {
    let items = vec![CheckItem {
        key: key.into(),
        route: "GET /x".into(),
        ..CheckItem::default()
    }];
    let res = client.check(CheckRequest { items }).await.unwrap();
    let r = &res.get_ref().results[0];
    assert!(r.error.is_none(), "{:?}", r.error);
    r.allowed
}

/// Direct peer connections each node has accepted.
async fn direct_connections(nodes: &[TestNode]) -> Vec<u64> {
    let mut accepted = Vec::new();
    for n in nodes {
        let doc = n.get_json("/v1/cluster").await;
        accepted.push(doc["stats"]["direct_connections"].as_u64().unwrap());
    }
    accepted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_round_robin_over_every_node_gets_exactly_its_limit() {
    let nodes = three_nodes().await;
    round_robin_over(&nodes).await;
    // Each node owns a key the two others forwarded: both dialled it.
    let accepted = direct_connections(&nodes).await;
    assert!(accepted.iter().all(|&n| n >= 2), "{accepted:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_over_grpc_only_gets_exactly_the_limit_too() {
    let defaults = weir_cluster::ClusterConfig::default();
    let nodes = three_nodes_with(defaults.on_owner_failure, defaults.replicas, true).await;
    round_robin_over(&nodes).await;
    assert_eq!(direct_connections(&nodes).await, [0, 0, 0]);
}

/// Checks for a key of each owner, round robin over every node and
/// alternating HTTP and gRPC: each key admits exactly its limit.
async fn round_robin_over(nodes: &[TestNode]) {
    let mut grpc = Vec::new();
    for n in nodes {
        let url = format!("http://{}", n.node().grpc_addr());
        grpc.push(RateLimiterClient::connect(url).await.unwrap());
    }
    for owner in ["node-1", "node-2", "node-3"] {
        let key = key_owned_by(&nodes[0], owner, "rr");
        let mut admitted = 0;
        for i in 0..3 * LIMIT {
            // HTTP and gRPC alternate too: both APIs share the one check path.
            let node = i % 3;
            let allowed = if i % 2 == 0 {
                http_allowed(&nodes[node], &key).await
            } else {
                grpc_allowed(&mut grpc[node], &key).await
            };
            admitted += usize::from(allowed);
        }
        assert_eq!(admitted, LIMIT, "key owned by {owner}");
    }
    let doc = nodes[0].get_json("/v1/cluster").await;
    assert_eq!(doc["strategy"], "owner");
    assert_eq!(doc["fallback"]["active"], false);
    let shares: f64 = doc["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["ring_share"].as_f64().unwrap())
        .sum();
    assert!((shares - 1.0).abs() < 1e-9, "ring shares sum to {shares}");
    assert!(doc["stats"]["peer_ops"].as_u64().unwrap() > 0);
    assert!(doc["stats"]["deny_cache_hits"].as_u64().unwrap() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rules_put_on_node_one_is_in_force_on_node_three() {
    let nodes = three_nodes().await;
    let body = json!({"rules": [{
        "name": "per-client",
        "algorithm": "sliding_window_log",
        "limit": 4,
        "window": "60s",
    }]});
    let res = nodes[0]
        .client
        .put(nodes[0].url("/v1/limits/*"))
        .bearer_auth(ADMIN)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let version = res.json::<Value>().await.unwrap()["version"]
        .as_u64()
        .unwrap();
    let third = &nodes[2];
    wait_until("node-3 serves the new version", || async {
        third.get_json("/v1/limits/*").await["version"].as_u64() == Some(version)
    })
    .await;
    assert_eq!(third.get_json("/v1/limits/*").await["rules"][0]["limit"], 4);
    assert_eq!(
        third.get_json("/v1/cluster").await["rules_version"],
        version
    );
    // In force at node-3 for a key node-3 decides itself.
    let key = key_owned_by(third, "node-3", "put");
    let mut admitted = 0;
    for _ in 0..10 {
        admitted += usize::from(http_allowed(third, &key).await);
    }
    assert_eq!(admitted, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_shut_down_gracefully_hands_its_counters_over() {
    let mut nodes = three_nodes().await;
    let key = key_owned_by(&nodes[0], "node-3", "bye");
    for i in 0..15 {
        assert!(http_allowed(&nodes[i % 3], &key).await);
    }
    nodes.pop().unwrap().shutdown().await;
    for n in &nodes {
        let doc = n.get_json("/v1/cluster").await;
        let live: Vec<&str> = doc["members"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["state"] != "down")
            .map(|m| m["id"].as_str().unwrap())
            .collect();
        assert_eq!(
            live,
            ["node-1", "node-2"],
            "peers dropped node-3 before it stopped"
        );
    }
    let mut admitted = 0;
    for i in 0..2 * LIMIT {
        admitted += usize::from(http_allowed(&nodes[i % 2], &key).await);
    }
    assert_eq!(
        admitted,
        LIMIT - 15,
        "15 + {admitted}: the window's total stays the limit"
    );
}

async fn status(n: &TestNode, key: &str) -> u16 {
    n.check(json!({"key": key, "route": "GET /x"}))
        .await
        .status()
        .as_u16()
}

fn live(doc: &Value) -> Vec<&str> {
    doc["members"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["state"] != "down")
        .map(|m| m["id"].as_str().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_in_process_costs_no_5xx_and_shows_as_lost_until_dropped() {
    let mut nodes = three_nodes().await;
    let key = key_owned_by(&nodes[0], "node-3", "kill");
    assert_eq!(status(&nodes[0], &key).await, 200);
    nodes[2].take().kill();
    nodes.pop();

    // A check or two may only miss the deadline before the refused
    // connection (or SWIM) shows node-3 gone; every one gets a verdict.
    wait_until("node-3's breaker opens", || async {
        let s = status(&nodes[0], &key).await;
        assert!(s == 200 || s == 429, "a verdict, not {s}");
        nodes[0].get_json("/v1/cluster").await["fallback"]["active"] == true
    })
    .await;
    let doc = nodes[0].get_json("/v1/cluster").await;
    assert_eq!(doc["fallback"]["owners"], json!(["node-3"]));
    assert_eq!(doc["fallback"]["entered_total"], 1);

    for n in &nodes {
        wait_until("node-3 is dropped from every ring", || async {
            live(&n.get_json("/v1/cluster").await) == ["node-1", "node-2"]
        })
        .await;
    }
    let doc = nodes[0].get_json("/v1/cluster").await;
    assert_eq!(doc["fallback"]["active"], false);
    assert_eq!(doc["stats"]["fallback_left"], 1);
    for n in &nodes {
        let s = status(n, &key).await;
        assert!(s == 200 || s == 429, "a verdict, not {s}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_closed_with_one_copy_a_lost_owner_is_503_never_429() {
    let mut nodes = three_nodes_failing(OwnerFailure::Closed, 1).await;
    let key = key_owned_by(&nodes[0], "node-2", "closed");
    let local = key_owned_by(&nodes[0], "node-1", "closed");
    nodes[1].take().kill();
    for _ in 0..5 {
        assert_eq!(status(&nodes[0], &key).await, 503);
        // Keys the gateway owns itself are unaffected.
        assert_eq!(status(&nodes[0], &local).await, 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_closed_with_two_copies_the_replica_holder_decides_a_lost_owners_keys() {
    let mut nodes = three_nodes_failing(OwnerFailure::Closed, 2).await;
    let key = key_owned_by(&nodes[0], "node-2", "closed2");
    for i in [0, 2, 0] {
        assert_eq!(status(&nodes[i], &key).await, 200);
    }
    wait_until("node-2's counts reach its replica holder", || async {
        nodes[1].get_json("/v1/cluster").await["stats"]["replication_pending"] == 0
    })
    .await;
    nodes[1].take().kill();
    // Checks while node-1 notices: a miss is 503 (closed), a stand-in's
    // admission counts against the key like any other.
    let admitted = std::sync::atomic::AtomicUsize::new(0);
    wait_until("node-2 is lost to node-1", || async {
        let s = status(&nodes[0], &key).await;
        assert!(s == 200 || s == 503, "a verdict or unavailable, not {s}");
        admitted.fetch_add(usize::from(s == 200), std::sync::atomic::Ordering::Relaxed);
        nodes[0].get_json("/v1/cluster").await["fallback"]["active"] == true
    })
    .await;
    // The stand-in has the three spent before the kill.
    let mut admitted = admitted.into_inner();
    for i in 0..2 * LIMIT {
        admitted += usize::from(status(&nodes[[0, 2][i % 2]], &key).await == 200);
    }
    assert_eq!(
        admitted,
        LIMIT - 3,
        "the replica holder's count, not a fresh one"
    );
}
