//! `GET /ui`: the dashboard's files come from the binary, its document gathers every member over the peer service, no secret shows, and `--ui false` turns it off.

use serde_json::{json, Value};
use weir_tests::{header, start_cluster, wait_until, TestNode};

const RULES: &str = r#"
[[rule]]
name      = "per-client"
algorithm = "sliding_window_log"
limit     = 3
window    = "1h"

[[rule]]
name      = "per-ip-dark"
by        = "ip"
algorithm = "fixed_window"
limit     = 1
window    = "1h"
shadow    = true
"#;

const ADMIN_TOKEN: &str = "admin-token-7f3c9e1d";
const CLUSTER_SECRET: &str = "cluster-secret-b81a44";

async fn document(node: &TestNode) -> Value {
    node.get_json("/ui/api/cluster?seconds=60").await
}

/// Checks counted in the document's activity for `rule`: allowed, denied, shadow-denied.
fn counted(doc: &Value, rule: &str) -> [u64; 3] {
    let mut sum = [0; 3];
    for second in doc["activity"].as_array().expect("activity") {
        if let Some(t) = second["rules"][rule].as_array() {
            for (i, n) in t.iter().enumerate() {
                sum[i] += n.as_u64().expect("a count");
            }
        }
    }
    sum
}

fn member<'a>(doc: &'a Value, id: &str) -> &'a Value {
    doc["members"]
        .as_array()
        .expect("members")
        .iter()
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("{id} missing from {doc}"))
}

#[tokio::test]
async fn the_page_and_its_files_come_from_the_binary_under_a_strict_policy() {
    let node = TestNode::start(RULES, |_| {}).await;
    let page = node.get("/ui").await;
    assert_eq!(page.status(), 200);
    assert_eq!(
        header(page.headers(), "content-type"),
        Some("text/html; charset=utf-8")
    );
    let csp = header(page.headers(), "content-security-policy")
        .expect("a content security policy")
        .to_string();
    assert!(csp.contains("default-src 'none'") && csp.contains("script-src 'self'"));
    let html = page.text().await.unwrap();
    // Every file the page loads is one of the node's own.
    let linked: Vec<&str> = html
        .split(['"', '\''])
        .filter(|s| s.starts_with('/') || s.contains("://"))
        .collect();
    assert!(!linked.is_empty());
    for target in &linked {
        assert!(target.starts_with("/ui/"), "the page loads {target}");
        let res = node.get(target).await;
        assert_eq!(res.status(), 200, "{target}");
    }
    let slash = node.get("/ui/").await;
    assert_eq!(slash.status(), 200, "/ui/ leads to the page");
    assert_eq!(slash.url().path(), "/ui");
    for (path, kind) in [
        ("/ui/dashboard.js", "text/javascript; charset=utf-8"),
        ("/ui/dashboard.css", "text/css; charset=utf-8"),
    ] {
        let res = node.get(path).await;
        assert_eq!(header(res.headers(), "content-type"), Some(kind));
        assert_eq!(
            header(res.headers(), "x-content-type-options"),
            Some("nosniff")
        );
    }
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_asks_every_member_and_shows_a_silent_one_as_unknown_then_down() {
    let mut nodes = start_cluster(3, RULES, |c| {
        c.cluster.secret = Some(CLUSTER_SECRET.into());
    })
    .await;
    let doc = document(&nodes[0]).await;
    assert_eq!(doc["node_id"], "node-1");
    assert_eq!(doc["strategy"], "owner");
    for id in ["node-1", "node-2", "node-3"] {
        let m = member(&doc, id);
        assert_eq!(m["state"], "alive", "{m}");
        assert_eq!(
            m["reply"], "answered",
            "{m}: asked over the authenticated peer service"
        );
        assert_eq!(m["summary"]["rules_version"], doc["rules"]["version"]);
        assert_eq!(m["summary"]["fallback"]["active"], false);
    }
    assert_eq!(member(&doc, "node-1")["self"], true);

    // Checks through two gateways: the cluster-wide figures add them up.
    for n in &nodes[..2] {
        for _ in 0..4 {
            n.check(json!({"key": format!("via-{}", n.state().node_id), "ip": "192.0.2.7"}))
                .await;
        }
    }
    let mut shadow = 0.0;
    for n in &nodes {
        shadow += n
            .metric(r#"weir_shadow_would_deny_total{rule="per-ip-dark"}"#)
            .await
            .unwrap_or(0.0);
    }
    assert!(shadow > 0.0, "the shadow rule would have denied");
    wait_until("both gateways' checks are in node-1's document", || async {
        let doc = document(&nodes[0]).await;
        counted(&doc, "per-client")[..2] == [6, 2]
            && counted(&doc, "per-ip-dark")[2] == shadow as u64
    })
    .await;

    nodes[2].take().kill();
    let doc = document(&nodes[0]).await;
    let gone = member(&doc, "node-3");
    assert!(
        gone["reply"] == "no_answer" || gone["reply"] == "down",
        "a killed member is never shown as answering: {gone}"
    );
    wait_until("node-3 is down in node-1's document", || async {
        member(&document(&nodes[0]).await, "node-3")["state"] == "down"
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_or_token_is_ever_shown() {
    let nodes = start_cluster(2, RULES, |c| {
        c.admin_token = Some(ADMIN_TOKEN.into());
        c.cluster.secret = Some(CLUSTER_SECRET.into());
    })
    .await;
    let n = &nodes[0];
    n.check(json!({"key": "k"})).await;
    let mut seen = String::new();
    for path in [
        "/ui",
        "/ui/dashboard.js",
        "/ui/dashboard.css",
        "/ui/api/cluster",
        "/v1/cluster",
        "/metrics",
    ] {
        let res = n.get(path).await;
        assert_eq!(res.status(), 200, "{path}");
        seen.push_str(&res.text().await.unwrap());
    }
    assert!(seen.contains("node-2"), "the peer answered");
    for secret in [ADMIN_TOKEN, CLUSTER_SECRET] {
        assert!(!seen.contains(secret), "{secret} is shown");
    }
}

#[tokio::test]
async fn ui_false_turns_the_dashboard_off() {
    let node = TestNode::start(RULES, |c| c.ui = false).await;
    for path in ["/ui", "/ui/dashboard.js", "/ui/api/cluster"] {
        let res = node.get(path).await;
        assert_eq!(res.status(), 404, "{path}");
        assert_eq!(
            header(res.headers(), "content-type"),
            Some("application/problem+json")
        );
    }
    assert_eq!(node.get("/v1/cluster").await.status(), 200);
    node.shutdown().await;
}

#[tokio::test]
async fn a_window_past_what_nodes_keep_is_refused_naming_seconds() {
    let node = TestNode::start(RULES, |_| {}).await;
    for query in ["seconds=0", "seconds=301", "seconds=soon"] {
        let res = node.get(&format!("/ui/api/cluster?{query}")).await;
        assert_eq!(res.status(), 400, "{query}");
        let body: Value = res.json().await.unwrap();
        assert_eq!(body["field"], "seconds", "{query}");
    }
    node.shutdown().await;
}
