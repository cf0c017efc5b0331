//! The cluster's counters in GET /metrics: deny cache, fallback, members, gossip, on two in-process nodes.

use serde_json::json;
use weir_tests::{cluster_member, metric_value, settled, wait_until, TestNode, ONE_PER_HOUR};

/// Two nodes that both list each other as alive, as their metrics say,
/// their join [`settled`].
async fn two_nodes() -> Vec<TestNode> {
    two_nodes_with(2).await
}

/// Two members keeping `replicas` copies of each counter.
async fn two_nodes_with(replicas: usize) -> Vec<TestNode> {
    let member = |id, seed| {
        move |c: &mut weir_node::ServeConfig| {
            cluster_member(c, id, seed);
            c.cluster.replicas = replicas;
        }
    };
    let first = TestNode::start(ONE_PER_HOUR, member("node-1", None)).await;
    let seed = first.state().config.gossip;
    let second = TestNode::start(ONE_PER_HOUR, member("node-2", Some(seed))).await;
    let nodes = vec![first, second];
    for n in &nodes {
        wait_until("weir_members shows two alive", || async {
            n.metric(r#"weir_members{state="alive"}"#).await == Some(2.0)
        })
        .await;
        settled(n).await;
    }
    nodes
}

fn key_owned_by(n: &TestNode, owner: &str) -> String {
    let cluster = n.state().engine.cluster().expect("a cluster member");
    (0..)
        .map(|i| format!("k-{i}"))
        .find(|k| cluster.owner_of(k).unwrap().id == owner)
        .unwrap()
}

async fn status(n: &TestNode, key: &str) -> u16 {
    n.check(json!({"key": key})).await.status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_cache_hit_moves_its_counter_and_peer_calls_are_counted() {
    let nodes = two_nodes().await;
    let gateway = &nodes[0];
    let key = key_owned_by(gateway, "node-2");
    let text = gateway.metrics().await;
    assert_eq!(metric_value(&text, "weir_deny_cache_hits_total"), Some(0.0));
    let calls_before = metric_value(&text, "weir_peer_calls_total").unwrap();

    assert_eq!(status(gateway, &key).await, 200);
    assert_eq!(status(gateway, &key).await, 429, "denied by the owner");
    assert_eq!(status(gateway, &key).await, 429, "denied from the cache");
    let text = gateway.metrics().await;
    assert_eq!(metric_value(&text, "weir_deny_cache_hits_total"), Some(1.0));
    // The owner strategy sends no count syncs.
    assert_eq!(metric_value(&text, "weir_sync_messages_total"), Some(0.0));
    assert_eq!(
        metric_value(&text, "weir_peer_calls_total"),
        Some(calls_before + 2.0),
        "the cached denial cost no call"
    );
    assert_eq!(
        metric_value(&text, "weir_fallback_entered_total"),
        Some(0.0)
    );
    assert!(metric_value(&text, "weir_gossip_packets_total{direction=\"in\"}") > Some(0.0));
    assert_eq!(
        metric_value(&text, "weir_gossip_bad_mac_dropped_total"),
        Some(0.0)
    );
    // The owner holds the key; the gateway does not.
    assert_eq!(
        nodes[1].metric(r#"weir_keys{rule="per-client"}"#).await,
        Some(1.0)
    );
    assert_eq!(
        gateway.metric(r#"weir_keys{rule="per-client"}"#).await,
        Some(0.0)
    );
    assert_eq!(gateway.metric("weir_max_keys").await, Some(1_000_000.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_lost_moves_the_fallback_metrics() {
    // One copy: with two, the gateway holds the lost owner's copy and
    // decides on it, which the next test shows.
    let mut nodes = two_nodes_with(1).await;
    let gateway = &nodes[0];
    let key = key_owned_by(gateway, "node-2");
    assert_eq!(gateway.metric("weir_fallback_active").await, Some(0.0));
    nodes[1].take().kill();

    let s = status(&nodes[0], &key).await;
    assert!(s == 200 || s == 429, "a verdict, not {s}");
    let text = nodes[0].metrics().await;
    assert_eq!(
        metric_value(&text, "weir_fallback_entered_total"),
        Some(1.0)
    );
    assert_eq!(metric_value(&text, "weir_fallback_active"), Some(1.0));
    assert!(metric_value(&text, "weir_fallback_decisions_total") >= Some(1.0));
    assert!(metric_value(&text, "weir_peer_failures_total") >= Some(1.0));

    wait_until("the lost owner is down and out of fallback", || async {
        let text = nodes[0].metrics().await;
        metric_value(&text, r#"weir_members{state="alive"}"#) == Some(1.0)
            && metric_value(&text, "weir_fallback_active") == Some(0.0)
    })
    .await;
    assert_eq!(nodes[0].metric("weir_fallback_left_total").await, Some(1.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_copies_a_lost_owners_keys_are_decided_on_the_copy_and_counted() {
    let mut nodes = two_nodes().await;
    let key = key_owned_by(&nodes[0], "node-2");
    assert_eq!(status(&nodes[0], &key).await, 200);
    // A copy is what node-1 stands in on; with none held it decides on its
    // own counters, which is not a replica decision.
    wait_until("node-2 copied the key to node-1", || async {
        nodes[1].metric("weir_replicated_total").await >= Some(1.0)
            && nodes[1].metric("weir_replication_pending").await == Some(0.0)
    })
    .await;
    nodes[1].take().kill();
    wait_until("a check decided on node-2's copy", || async {
        let s = status(&nodes[0], &key).await;
        assert!(s == 200 || s == 429, "a verdict, not {s}");
        nodes[0]
            .metric(r#"weir_decisions_without_owner_total{how="replica"}"#)
            .await
            >= Some(1.0)
    })
    .await;
    let text = nodes[0].metrics().await;
    assert_eq!(
        metric_value(&text, "weir_fallback_decisions_total"),
        Some(0.0)
    );
    assert_eq!(
        metric_value(&text, r#"weir_breaker_open{member="node-2"}"#),
        Some(1.0)
    );
}
