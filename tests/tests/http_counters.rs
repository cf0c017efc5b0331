//! `GET` and `DELETE /v1/counters/{rule}/{key}` over real sockets: one
//! key's counter read without spending, and cleared wherever it is counted
//! (alone, and at its owner and the owner's copy in a cluster).

use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{json, Value};
use weir_cluster::OwnerFailure;
use weir_tests::{client, start_cluster, wait_until, TestNode};

const LIMIT: usize = 5;
const RULES: &str = r#"
[[rule]]
name      = "per-client"
algorithm = "sliding_window_log"
limit     = 5
window    = "60s"
"#;
const ADMIN: &str = "admin-token";

async fn alone() -> TestNode {
    TestNode::start(RULES, |c| c.admin_token = Some(ADMIN.to_string())).await
}

/// The status of one check of `key` through `node`.
async fn status(node: &TestNode, key: &str) -> u16 {
    node.check(json!({"key": key, "route": "GET /x"}))
        .await
        .status()
        .as_u16()
}

async fn admitted(node: &TestNode, key: &str, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        let s = status(node, key).await;
        assert!(s == 200 || s == 429, "a verdict, not {s}");
        ok += usize::from(s == 200);
    }
    ok
}

async fn get_counter(node: &TestNode, rule: &str, key: &str) -> (u16, Value) {
    let res = node.get(&format!("/v1/counters/{rule}/{key}")).await;
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

async fn delete_counter(node: &TestNode, rule: &str, key: &str, token: Option<&str>) -> u16 {
    let mut req = client().delete(node.url(&format!("/v1/counters/{rule}/{key}")));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.send().await.expect("DELETE answered").status().as_u16()
}

#[tokio::test]
async fn get_shows_a_keys_state_and_spends_nothing() {
    let node = alone().await;
    assert_eq!(admitted(&node, "alice", 3).await, 3);
    for _ in 0..3 {
        let (status, doc) = get_counter(&node, "per-client", "alice").await;
        assert_eq!(status, 200);
        assert_eq!(doc["limit"], 5);
        assert_eq!(doc["remaining"], 2);
        assert_eq!(doc["owner"], node.state().node_id.as_str());
        let reset_at = doc["reset_at"].as_u64().expect("reset_at");
        assert!(reset_at > weir_tests::unix_secs() * 1000, "{doc}");
    }
    // A key never seen has the whole limit.
    let (_, doc) = get_counter(&node, "per-client", "nobody").await;
    assert_eq!(doc["remaining"], 5);
    assert_eq!(admitted(&node, "alice", 5).await, 2);
    node.shutdown().await;
}

#[tokio::test]
async fn delete_clears_a_key_so_its_whole_limit_passes_again() {
    let node = alone().await;
    assert_eq!(admitted(&node, "bob", LIMIT + 1).await, LIMIT);
    assert_eq!(
        delete_counter(&node, "per-client", "bob", Some(ADMIN)).await,
        204
    );
    assert_eq!(
        get_counter(&node, "per-client", "bob").await.1["remaining"],
        5
    );
    assert_eq!(admitted(&node, "bob", LIMIT + 1).await, LIMIT);
    node.shutdown().await;
}

/// A key with a slash in it is addressed percent-encoded (`%2F`): the
/// path's segments are decoded after routing.
#[tokio::test]
async fn a_key_with_a_slash_is_addressed_percent_encoded() {
    let node = alone().await;
    assert_eq!(admitted(&node, "team/a b", LIMIT + 1).await, LIMIT);
    let (status, doc) = get_counter(&node, "per-client", "team%2Fa%20b").await;
    assert_eq!(
        (status, doc["key"].as_str()),
        (200, Some("team/a b")),
        "{doc}"
    );
    assert_eq!(doc["remaining"], 0);
    assert_eq!(
        delete_counter(&node, "per-client", "team%2Fa%20b", Some(ADMIN)).await,
        204
    );
    assert_eq!(admitted(&node, "team/a b", LIMIT + 1).await, LIMIT);
    assert_eq!(admitted(&node, "team", 1).await, 1, "another key untouched");
    node.shutdown().await;
}

#[tokio::test]
async fn delete_without_the_token_is_401_and_clears_nothing() {
    let node = alone().await;
    assert_eq!(admitted(&node, "carol", LIMIT).await, LIMIT);
    assert_eq!(
        delete_counter(&node, "per-client", "carol", None).await,
        401
    );
    assert_eq!(
        delete_counter(&node, "per-client", "carol", Some("wrong")).await,
        403
    );
    assert_eq!(admitted(&node, "carol", 1).await, 0);
    node.shutdown().await;
}

#[tokio::test]
async fn an_unknown_rule_is_404() {
    let node = alone().await;
    assert_eq!(get_counter(&node, "no-such-rule", "k").await.0, 404);
    assert_eq!(
        delete_counter(&node, "no-such-rule", "k", Some(ADMIN)).await,
        404
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_through_any_node_clears_the_owner_and_its_copy() {
    let mut nodes = start_cluster(3, RULES, |c| {
        c.admin_token = Some(ADMIN.to_string());
        c.cluster.on_owner_failure = OwnerFailure::Closed;
        c.cluster.replicas = 2;
    })
    .await;
    let cluster = nodes[0].state().engine.cluster().expect("a member");
    let mut owned_by_2 = (0..)
        .map(|i| format!("reset-{i}"))
        .filter(|k| cluster.owner_of(k).is_some_and(|o| o.id == "node-2"));
    let (key, other) = (owned_by_2.next().unwrap(), owned_by_2.next().unwrap());
    // A clear through the gateway that cached the key's denial lifts it
    // there at once.
    assert_eq!(admitted(&nodes[0], &other, LIMIT + 1).await, LIMIT);
    assert_eq!(
        delete_counter(&nodes[0], "per-client", &other, Some(ADMIN)).await,
        204
    );
    assert_eq!(admitted(&nodes[0], &other, LIMIT + 1).await, LIMIT);
    // Filled through node-1, which caches the denial.
    assert_eq!(admitted(&nodes[0], &key, LIMIT + 1).await, LIMIT);
    let (code, doc) = get_counter(&nodes[2], "per-client", &key).await;
    assert_eq!(
        (code, &doc["owner"], &doc["remaining"]),
        (200, &json!("node-2"), &json!(0))
    );
    // Its copy at the replica holder is full too before the clear.
    wait_until("node-2's counts reach its replica holder", || async {
        nodes[1].get_json("/v1/cluster").await["stats"]["replication_pending"] == 0
    })
    .await;

    assert_eq!(
        delete_counter(&nodes[0], "per-client", &key, Some(ADMIN)).await,
        204
    );
    assert_eq!(
        get_counter(&nodes[2], "per-client", &key).await.1["remaining"],
        5
    );
    wait_until("the clear reaches node-2's replica holder", || async {
        nodes[1].get_json("/v1/cluster").await["stats"]["replication_pending"] == 0
    })
    .await;

    // The owner dies: its replica holder decides on its copy, which must
    // be the cleared one (a full copy would admit nothing).
    nodes[1].take().kill();
    let admitted_meanwhile = AtomicUsize::new(0);
    wait_until("node-2 is lost to node-1", || async {
        let s = status(&nodes[0], &key).await;
        assert!(
            matches!(s, 200 | 429 | 503),
            "a verdict or unavailable, not {s}"
        );
        admitted_meanwhile.fetch_add(usize::from(s == 200), Ordering::Relaxed);
        nodes[0].get_json("/v1/cluster").await["fallback"]["active"] == true
    })
    .await;
    let mut ok = admitted_meanwhile.into_inner();
    for i in 0..2 * LIMIT {
        ok += usize::from(status(&nodes[[0, 2][i % 2]], &key).await == 200);
    }
    assert_eq!(ok, LIMIT, "the cleared copy's whole limit, no more");
}
