//! The rules file is watched: a good edit takes effect, a broken one is refused and counted.

use serde_json::json;
use weir_tests::{parts, wait_until, TestNode};

fn rules(limit: u64) -> String {
    format!(
        r#"
[[rule]]
name      = "per-client"
algorithm = "sliding_window_log"
limit     = {limit}
window    = "1h"
"#
    )
}

async fn version(node: &TestNode) -> u64 {
    node.get_json("/v1/limits/*").await["version"]
        .as_u64()
        .expect("version")
}

async fn limit(node: &TestNode) -> u64 {
    node.get_json("/v1/limits/*").await["rules"][0]["limit"]
        .as_u64()
        .expect("limit")
}

async fn wait_for_limit(node: &TestNode, want: u64) {
    wait_until(&format!("GET /v1/limits shows limit {want}"), || async {
        limit(node).await == want
    })
    .await;
}

#[tokio::test]
async fn a_rules_file_replaced_by_rename_is_reloaded() {
    let node = TestNode::start(&rules(1), |_| {}).await;
    let v0 = version(&node).await;
    node.replace_rules(&rules(3));
    wait_for_limit(&node, 3).await;
    assert!(version(&node).await > v0, "a reload takes a newer version");
    // Checks follow the new limit.
    for remaining in [2, 1, 0] {
        let (status, _, body) = parts(node.check(json!({"key": "k"})).await).await;
        assert_eq!((status, body["remaining"].as_u64()), (200, Some(remaining)));
    }
    assert!(node.metric("weir_rules_reloads_total").await >= Some(1.0));
}

#[tokio::test]
async fn a_rules_file_rewritten_in_place_is_reloaded() {
    let node = TestNode::start(&rules(1), |_| {}).await;
    node.write_rules(&rules(4));
    wait_for_limit(&node, 4).await;
    // And again: the watch survives the first reload.
    node.write_rules(&rules(6));
    wait_for_limit(&node, 6).await;
}

#[tokio::test]
async fn a_broken_rules_file_keeps_the_old_rules_and_counts_the_failure() {
    let node = TestNode::start(&rules(2), |_| {}).await;
    let before = node.get_json("/v1/limits/*").await;
    node.replace_rules(&rules(0));
    wait_until("the reload failure is counted in /metrics", || async {
        node.metric("weir_rules_reload_failures_total").await >= Some(1.0)
    })
    .await;
    assert_eq!(
        node.get_json("/v1/limits/*").await,
        before,
        "the last good set stays"
    );
    assert_eq!(node.check(json!({"key": "k"})).await.status(), 200);
    assert_eq!(node.check(json!({"key": "k"})).await.status(), 200);
    assert_eq!(
        node.check(json!({"key": "k"})).await.status(),
        429,
        "limit 2 still holds"
    );

    // Syntax errors are refused the same way, and a fixed file loads again.
    node.replace_rules("[[rule]\nname = ");
    wait_until("the syntax error is counted", || async {
        node.metric("weir_rules_reload_failures_total").await >= Some(2.0)
    })
    .await;
    assert_eq!(limit(&node).await, 2);
    node.replace_rules(&rules(9));
    wait_for_limit(&node, 9).await;
}

/// A Kubernetes ConfigMap volume: the file is a symlink through `..data`,
/// and an update swaps `..data` to a new directory by renaming a new
/// symlink over it. No event in the watched directory names `rules.toml`.
#[cfg(unix)]
#[tokio::test]
async fn a_configmap_style_symlink_swap_is_reloaded() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir(root.join("..data_v1")).unwrap();
    std::fs::write(root.join("..data_v1/rules.toml"), rules(1)).unwrap();
    symlink("..data_v1", root.join("..data")).unwrap();
    symlink("..data/rules.toml", root.join("rules.toml")).unwrap();
    let path = root.join("rules.toml");
    let node = TestNode::start(&rules(1), |c| c.rules_file = Some(path)).await;
    assert_eq!(limit(&node).await, 1);
    let v0 = version(&node).await;

    std::fs::create_dir(root.join("..data_v2")).unwrap();
    std::fs::write(root.join("..data_v2/rules.toml"), rules(3)).unwrap();
    symlink("..data_v2", root.join("..data_tmp")).unwrap();
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    std::fs::remove_dir_all(root.join("..data_v1")).unwrap();
    wait_for_limit(&node, 3).await;
    assert!(version(&node).await > v0);
}

/// Guard: a rules file truncated while its rules are in force (`: >
/// rules.toml`) is refused, counted and logged; every limit stays.
#[tokio::test]
async fn a_rules_file_truncated_to_nothing_keeps_the_rules_and_counts_the_failure() {
    let node = TestNode::start(&rules(1), |_| {}).await;
    node.write_rules("");
    wait_until("the refusal is counted in /metrics", || async {
        node.metric("weir_rules_reload_failures_total").await >= Some(1.0)
    })
    .await;
    assert_eq!(limit(&node).await, 1, "the rules stay in force");
    assert_eq!(node.check(json!({"key": "k"})).await.status(), 200);
    assert_eq!(node.check(json!({"key": "k"})).await.status(), 429);
    // Said explicitly, no rules is what the file means.
    node.write_rules("allow_empty = true\n");
    wait_until("the rules are removed", || async {
        node.get_json("/v1/limits/*").await["rules"]
            .as_array()
            .is_some_and(|r| r.is_empty())
    })
    .await;
}
