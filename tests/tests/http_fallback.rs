//! The local fallback is bounded by the node's --max-keys like its own counters.

use serde_json::json;
use weir_node::ServeConfig;
use weir_tests::{cluster_member, settled, wait_until, TestNode};

const RULES: &str = r#"
[[rule]]
name      = "per-client"
algorithm = "sliding_window_log"
limit     = 5
window    = "1h"
"#;

/// One copy of each counter: with two, a lost owner's keys are decided on
/// its copy, not the fallback.
fn member(c: &mut ServeConfig, id: &str, seed: Option<std::net::SocketAddr>) {
    cluster_member(c, id, seed);
    c.max_keys_per_rule = 1;
    c.cluster.replicas = 1;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fallback_holds_at_most_max_keys_per_rule() {
    let first = TestNode::start(RULES, |c| member(c, "node-1", None)).await;
    let seed = first.state().config.gossip;
    let mut second = TestNode::start(RULES, |c| member(c, "node-2", Some(seed))).await;
    wait_until("node-1 sees node-2", || async {
        first.metric(r#"weir_members{state="alive"}"#).await == Some(2.0)
    })
    .await;
    settled(&second).await;
    let cluster = first.state().engine.cluster().unwrap().clone();
    let mut keys = (0..).map(|i| format!("k-{i}"));
    let mut lost_owner_keys = keys
        .by_ref()
        .filter(|k| cluster.owner_of(k).unwrap().id == "node-2");
    let (a, b) = (
        lost_owner_keys.next().unwrap(),
        lost_owner_keys.next().unwrap(),
    );
    second.take().kill();

    let status = |key: String| {
        let first = &first;
        async move { first.check(json!({"key": key})).await.status().as_u16() }
    };
    assert_eq!(status(a.clone()).await, 200, "decided on the fallback");
    assert_eq!(
        first.metric("weir_fallback_active").await,
        Some(1.0),
        "the owner is in fallback"
    );
    assert_eq!(
        status(b).await,
        503,
        "a second key does not fit a fallback table of --max-keys 1"
    );
    assert_eq!(status(a).await, 200, "the key it holds still decides");
}
