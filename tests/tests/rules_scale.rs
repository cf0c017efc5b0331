//! A cluster with thousands of rules: every member ready and agreed, a rewritten file picked up everywhere, each check matched to its own tenant's rule.

use serde_json::json;
use weir_tests::{parts, start_cluster, wait_until, TestNode};

const TENANTS: usize = 5_000;

/// One rule per tenant route; `extra` more tenants past [`TENANTS`], and
/// tenant 7's limit `limit7`.
fn rules(extra: usize, limit7: u64) -> String {
    let mut text = String::new();
    for i in 0..TENANTS + extra {
        let limit = if i == 7 { limit7 } else { 1_000 };
        text.push_str(&format!(
            "[[rule]]\nname = \"tenant-{i}\"\nroute = \"GET /t/{i}\"\n\
             algorithm = \"fixed_window\"\nlimit = {limit}\nwindow = \"1h\"\n"
        ));
    }
    text
}

/// The rule a check of `route` matched on `node`, and its status.
async fn matched(node: &TestNode, key: &str, route: &str) -> (u16, Option<String>) {
    let (status, _, body) = parts(node.check(json!({"key": key, "route": route})).await).await;
    (status, body["rule"].as_str().map(str::to_string))
}

async fn alive(node: &TestNode) -> usize {
    let doc = node.get_json("/v1/cluster").await;
    doc["members"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["state"] == "alive").count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_with_five_thousand_rules_is_ready_and_follows_a_rewritten_file() {
    let nodes = start_cluster(3, &rules(0, 3), |_| {}).await;
    for node in &nodes {
        let any = node.get_json("/v1/limits/*").await;
        assert_eq!(any["rules"].as_array().map(Vec::len), Some(TENANTS));
    }
    // Each check finds its own tenant's rule among thousands, whichever
    // node it reaches, and one tenant's limit holds across the cluster.
    for (i, node) in nodes.iter().enumerate() {
        let route = format!("GET /t/{}", 4_321 + i);
        let want = format!("tenant-{}", 4_321 + i);
        assert_eq!(matched(node, "k", &route).await, (200, Some(want)));
    }
    for node in &nodes {
        assert_eq!(matched(node, "spread", "GET /t/7").await.0, 200);
    }
    assert_eq!(matched(&nodes[1], "spread", "GET /t/7").await.0, 429);

    // An atomic rewrite of one node's file: a new tenant, a new limit for
    // tenant 7. Every member takes it from that node.
    nodes[0].replace_rules(&rules(1, 5));
    for node in &nodes {
        wait_until(
            &format!("{} matches the new tenant's rule", node.state().node_id),
            || async {
                matched(node, "k", &format!("GET /t/{TENANTS}")).await.1
                    == Some(format!("tenant-{TENANTS}"))
            },
        )
        .await;
    }
    for node in &nodes {
        let seven = node.get_json("/v1/limits/*").await["rules"][7].clone();
        assert_eq!(
            (seven["name"].as_str(), seven["limit"].as_u64()),
            (Some("tenant-7"), Some(5))
        );
        assert_eq!(
            alive(node).await,
            3,
            "no member was taken for down meanwhile"
        );
    }
    assert_eq!(
        matched(&nodes[2], "other", "GET /t/4999").await,
        (200, Some("tenant-4999".into()))
    );
}
