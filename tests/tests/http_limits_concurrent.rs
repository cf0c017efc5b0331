//! Two admins at once: writes to two tiers on two nodes both land everywhere, and `If-Match` refuses to overwrite a change the caller has not seen.

use serde_json::{json, Value};
use weir_tests::{header, parts, start_cluster, wait_until, TestNode};

const TOKEN: &str = "admin-s3cret";

const RULES: &str = r#"
[[rule]]
name      = "global"
algorithm = "sliding_window_log"
limit     = 100
window    = "1h"
"#;

async fn put(
    node: &TestNode,
    tier: &str,
    if_match: Option<&str>,
    body: &Value,
) -> reqwest::Response {
    let mut req = node
        .client
        .put(node.url(&format!("/v1/limits/{tier}")))
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(tag) = if_match {
        req = req.header("if-match", tag);
    }
    req.send().await.expect("PUT request")
}

/// The `ETag` a GET of `tier` answers with on `node`.
async fn etag(node: &TestNode, tier: &str) -> Option<String> {
    let res = node.get(&format!("/v1/limits/{tier}")).await;
    header(res.headers(), "etag").map(str::to_string)
}

fn tier_rules(name: &str, limit: u64) -> Value {
    json!({"rules": [{
        "name": name,
        "algorithm": "sliding_window_log",
        "limit": limit,
        "window": "1h",
    }]})
}

/// The rule a check in `tier` is decided by on `node`, as the answer names it.
async fn deciding_rule(node: &TestNode, tier: &str) -> Value {
    let (_, _, body) = parts(node.check(json!({"key": "cust_1", "tier": tier})).await).await;
    body["rule"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simultaneous_writes_to_two_tiers_on_two_nodes_are_both_in_force_on_every_node() {
    let nodes = start_cluster(2, RULES, |c| c.admin_token = Some(TOKEN.into())).await;
    let (free, pro) = (tier_rules("free-limit", 5), tier_rules("pro-limit", 50));
    let (a, b) = tokio::join!(
        put(&nodes[0], "free", None, &free),
        put(&nodes[1], "pro", None, &pro)
    );
    let (a, b) = (parts(a).await, parts(b).await);
    assert_eq!((a.0, b.0), (200, 200), "{} / {}", a.2, b.2);
    for node in &nodes {
        wait_until(
            &format!("{} enforces both tiers", node.state().node_id),
            || async {
                deciding_rule(node, "free").await == "free-limit"
                    && deciding_rule(node, "pro").await == "pro-limit"
            },
        )
        .await;
        // And lists them, each at the version its own write produced.
        let listed = node.get_json("/v1/limits/free").await;
        assert_eq!(listed["rules"][0]["limit"], 5);
        assert_eq!(listed["version"], a.2["version"]);
        let listed = node.get_json("/v1/limits/pro").await;
        assert_eq!(listed["rules"][0]["limit"], 50);
        assert_eq!(listed["version"], b.2["version"]);
    }
}

#[tokio::test]
async fn a_put_with_a_stale_if_match_is_412_and_changes_nothing() {
    let node = TestNode::start(RULES, |c| c.admin_token = Some(TOKEN.into())).await;
    let tag = etag(&node, "free").await.expect("GET has an ETag");

    // Someone else writes the tier first.
    let (status, h, first) =
        parts(put(&node, "free", Some(&tag), &tier_rules("free-a", 5)).await).await;
    assert_eq!(status, 200, "{first}");
    let new_tag = header(&h, "etag").expect("PUT has an ETag").to_string();
    assert_ne!(new_tag, tag);
    assert!(
        new_tag.starts_with(&format!("\"{}-", first["version"])),
        "{new_tag}"
    );

    // A write based on what was seen before is refused, naming the header.
    let (status, h, problem) =
        parts(put(&node, "free", Some(&tag), &tier_rules("free-b", 7)).await).await;
    assert_eq!(status, 412, "{problem}");
    assert_eq!(header(&h, "content-type"), Some("application/problem+json"));
    assert_eq!(problem["field"], "If-Match");
    assert!(
        problem["detail"].as_str().unwrap().contains("version"),
        "{problem}"
    );
    let now = node.get_json("/v1/limits/free").await;
    assert_eq!(
        now["rules"][0]["name"], "free-a",
        "the refused write changed nothing"
    );

    // Based on the current tag, or on anything (`*`), it lands.
    assert_eq!(
        put(&node, "free", Some(&new_tag), &tier_rules("free-b", 7))
            .await
            .status(),
        200
    );
    assert_eq!(
        put(&node, "free", Some("*"), &tier_rules("free-c", 9))
            .await
            .status(),
        200
    );
    // A tier's tag does not move when another tier is written.
    let pro_tag = etag(&node, "pro").await.unwrap();
    let free_tag = etag(&node, "free").await.unwrap();
    assert_eq!(
        put(&node, "pro", Some(&pro_tag), &tier_rules("pro-a", 1))
            .await
            .status(),
        200
    );
    assert_eq!(
        put(&node, "free", Some(&free_tag), &tier_rules("free-d", 2))
            .await
            .status(),
        200
    );
}

#[tokio::test]
async fn a_malformed_if_match_is_400_naming_it() {
    let node = TestNode::start(RULES, |c| c.admin_token = Some(TOKEN.into())).await;
    let (status, _, problem) =
        parts(put(&node, "free", Some("7"), &tier_rules("x", 1)).await).await;
    assert_eq!((status, &problem["field"]), (400, &json!("If-Match")));
    assert!(node.get_json("/v1/limits/free").await["rules"]
        .as_array()
        .unwrap()
        .is_empty());
}

/// Guard: every write to one tier is made by one member (the tier's owner
/// on the ring), so of two writes through two nodes on the strength of one
/// `ETag`, exactly one lands and the other is 412; the write that landed
/// is in force on both nodes, and nothing of the other is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_conditional_writes_to_one_tier_on_two_nodes_exactly_one_lands() {
    let nodes = start_cluster(3, RULES, |c| c.admin_token = Some(TOKEN.into())).await;
    // Rounds over several tiers, so the tier's owner is sometimes one of
    // the writers' nodes and sometimes the third.
    for tier in ["free", "pro", "gold", "team", "trial", "edu"] {
        let tag = etag(&nodes[0], tier).await.unwrap();
        let (ra, rb) = (
            tier_rules(&format!("{tier}-a"), 5),
            tier_rules(&format!("{tier}-b"), 7),
        );
        let (a, b) = tokio::join!(
            put(&nodes[0], tier, Some(&tag), &ra),
            put(&nodes[1], tier, Some(&tag), &rb)
        );
        let mut statuses = [a.status().as_u16(), b.status().as_u16()];
        statuses.sort();
        assert_eq!(
            statuses,
            [200, 412],
            "{tier}: one write lands, the other is refused"
        );
        let won = [&a, &b]
            .into_iter()
            .find(|r| r.status() == 200)
            .map(|r| header(r.headers(), "etag").unwrap().to_string())
            .unwrap();
        // The node that wrote answers with the write in force on it.
        for node in &nodes {
            wait_until(
                &format!("{tier}: every node holds the write that landed"),
                || async { etag(node, tier).await.as_deref() == Some(won.as_str()) },
            )
            .await;
        }
    }
}

/// A write through a node that is not the tier's owner is in force on
/// that node when its 200 is sent: a GET right after shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_write_is_in_force_on_the_node_that_answered() {
    let nodes = start_cluster(3, RULES, |c| c.admin_token = Some(TOKEN.into())).await;
    for (i, tier) in ["free", "pro", "gold", "team"].into_iter().enumerate() {
        let node = &nodes[i % nodes.len()];
        let (status, h, _) =
            parts(put(node, tier, None, &tier_rules(&format!("{tier}-r"), 3)).await).await;
        assert_eq!(status, 200);
        assert_eq!(etag(node, tier).await.as_deref(), header(&h, "etag"));
    }
}
