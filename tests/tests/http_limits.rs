//! GET/PUT /v1/limits/{tier}: the admin token, validation, and the set in force.

use serde_json::{json, Value};
use weir_tests::{header, parts, TestNode};

const TOKEN: &str = "admin-s3cret";

const RULES: &str = r#"
[[rule]]
name      = "global"
algorithm = "sliding_window_log"
limit     = 100
window    = "1h"

[[rule]]
name      = "free-per-client"
tier      = "free"
algorithm = "sliding_window_log"
limit     = 2
window    = "1h"
"#;

async fn start() -> TestNode {
    TestNode::start(RULES, |c| c.admin_token = Some(TOKEN.into())).await
}

async fn put(node: &TestNode, tier: &str, auth: Option<&str>, body: String) -> reqwest::Response {
    let mut req = node
        .client
        .put(node.url(&format!("/v1/limits/{tier}")))
        .header("content-type", "application/json")
        .body(body);
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    req.send().await.expect("PUT request")
}

fn free_rules(limit: u64) -> String {
    json!({"rules": [{
        "name": "free-per-client",
        "algorithm": "sliding_window_log",
        "limit": limit,
        "window": "1h",
    }]})
    .to_string()
}

fn names(doc: &Value) -> Vec<&str> {
    doc["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect()
}

async fn free_check(node: &TestNode, key: &str) -> (u16, Value) {
    let (status, _, body) = parts(node.check(json!({"key": key, "tier": "free"})).await).await;
    (status, body)
}

#[tokio::test]
async fn get_lists_a_tier_and_star_lists_the_rules_for_any_tier() {
    let node = start().await;
    let free = node.get_json("/v1/limits/free").await;
    assert_eq!(names(&free), ["free-per-client"]);
    assert_eq!(free["rules"][0]["tier"], "free");
    assert_eq!(free["rules"][0]["limit"], 2);
    let any = node.get_json("/v1/limits/*").await;
    assert_eq!(names(&any), ["global"]);
    assert_eq!(any["version"], free["version"]);
    assert!(names(&node.get_json("/v1/limits/gold").await).is_empty());
}

#[tokio::test]
async fn put_with_the_token_replaces_the_tier_and_get_shows_it() {
    let node = start().await;
    let before = node.get_json("/v1/limits/free").await["version"]
        .as_u64()
        .unwrap();
    let (status, _, doc) = parts(
        put(
            &node,
            "free",
            Some(&format!("Bearer {TOKEN}")),
            free_rules(3),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{doc}");
    assert_eq!(doc["version"].as_u64(), Some(before + 1));
    assert_eq!(doc["rules"][0]["limit"], 3);
    assert_eq!(
        node.get_json("/v1/limits/free").await,
        doc,
        "GET reads back what PUT set"
    );
    // The other tiers are untouched.
    assert_eq!(names(&node.get_json("/v1/limits/*").await), ["global"]);
    // And checks follow the new limit at once.
    for remaining in [2, 1, 0] {
        let (status, body) = free_check(&node, "cust_1").await;
        assert_eq!((status, body["remaining"].as_u64()), (200, Some(remaining)));
    }
    assert_eq!(free_check(&node, "cust_1").await.0, 429);
}

#[tokio::test]
async fn put_without_a_token_is_401_with_a_bearer_challenge() {
    let node = start().await;
    let res = put(&node, "free", None, free_rules(50)).await;
    assert_eq!(res.status(), 401);
    assert_eq!(header(res.headers(), "www-authenticate"), Some("Bearer"));
    assert_eq!(
        header(res.headers(), "content-type"),
        Some("application/problem+json")
    );
    let res = put(
        &node,
        "free",
        Some(&format!("Basic {TOKEN}")),
        free_rules(50),
    )
    .await;
    assert_eq!(
        res.status(),
        401,
        "only the Bearer scheme carries the token"
    );
    assert_eq!(
        node.get_json("/v1/limits/free").await["rules"][0]["limit"],
        2
    );
}

#[tokio::test]
async fn put_with_a_wrong_token_is_403_and_changes_nothing() {
    let node = start().await;
    for wrong in ["Bearer admin-s3cre", "Bearer admin-s3cret2", "Bearer x"] {
        let res = put(&node, "free", Some(wrong), free_rules(50)).await;
        assert_eq!(res.status(), 403, "{wrong}");
    }
    assert_eq!(
        node.get_json("/v1/limits/free").await["rules"][0]["limit"],
        2
    );
}

#[tokio::test]
async fn the_token_is_checked_before_the_body_is_read() {
    let node = TestNode::start(RULES, |c| {
        c.admin_token = Some(TOKEN.into());
        c.limits.max_body_bytes = 64;
    })
    .await;
    // Oversized and malformed: an unauthenticated caller still only learns 401.
    let res = put(&node, "free", None, "x".repeat(10_000)).await;
    assert_eq!(res.status(), 401);
    let res = put(
        &node,
        "free",
        Some(&format!("Bearer {TOKEN}")),
        "x".repeat(10_000),
    )
    .await;
    assert_eq!(res.status(), 413);
}

#[tokio::test]
async fn writes_are_refused_when_the_node_has_no_admin_token() {
    let node = TestNode::start(RULES, |_| {}).await;
    let (status, _, problem) =
        parts(put(&node, "free", Some("Bearer anything"), free_rules(50)).await).await;
    assert_eq!(status, 403);
    assert!(
        problem["detail"].as_str().unwrap().contains("disabled"),
        "{problem}"
    );
}

#[tokio::test]
async fn invalid_rule_set_is_422_naming_rule_and_field_and_the_old_set_stays() {
    let node = start().await;
    let auth = format!("Bearer {TOKEN}");
    let old = node.get_json("/v1/limits/free").await;
    let bad = json!({"rules": [
        {"name": "ok", "algorithm": "fixed_window", "limit": 10, "window": "1m"},
        {"name": "broken", "algorithm": "fixed_window", "limit": 0, "window": "1m"},
    ]});
    let (status, h, problem) = parts(put(&node, "free", Some(&auth), bad.to_string()).await).await;
    assert_eq!(status, 422);
    assert_eq!(header(&h, "content-type"), Some("application/problem+json"));
    assert_eq!(problem["rule"], "broken");
    assert_eq!(problem["field"], "limit");
    assert!(problem["detail"].as_str().unwrap().contains("limit"));

    let unknown_algorithm = json!({"rules": [
        {"name": "odd", "algorithm": "magic", "limit": 1, "window": "1m"},
    ]});
    let (status, _, problem) =
        parts(put(&node, "free", Some(&auth), unknown_algorithm.to_string()).await).await;
    assert_eq!((status, &problem["field"]), (422, &json!("algorithm")));

    assert_eq!(
        node.get_json("/v1/limits/free").await,
        old,
        "the last good set stays"
    );
    // Checks still follow the old limit of 2.
    assert_eq!(free_check(&node, "cust_9").await.0, 200);
    assert_eq!(free_check(&node, "cust_9").await.0, 200);
    assert_eq!(free_check(&node, "cust_9").await.0, 429);
}

#[tokio::test]
async fn malformed_json_body_is_400_naming_body() {
    let node = start().await;
    let auth = format!("Bearer {TOKEN}");
    let (status, _, problem) =
        parts(put(&node, "free", Some(&auth), "{\"rules\":".into()).await).await;
    assert_eq!((status, &problem["field"]), (400, &json!("body")));
}

/// Guard: `{"rules":[]}` to a tier with rules is refused naming the field
/// (an empty body is more often a mistake than a wish to lift every limit
/// of the tier); with `"allow_empty": true` it empties the tier.
#[tokio::test]
async fn put_that_would_empty_a_tier_is_422_unless_it_says_allow_empty() {
    let node = start().await;
    let auth = format!("Bearer {TOKEN}");
    let empty = json!({"rules": []}).to_string();
    let (status, _, problem) = parts(put(&node, "free", Some(&auth), empty).await).await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(problem["field"], "rules");
    assert!(
        problem["detail"].as_str().unwrap().contains("allow_empty"),
        "{problem}"
    );
    assert_eq!(
        names(&node.get_json("/v1/limits/free").await),
        ["free-per-client"]
    );
    let meant = json!({"rules": [], "allow_empty": true}).to_string();
    let (status, _, doc) = parts(put(&node, "free", Some(&auth), meant).await).await;
    assert_eq!(status, 200, "{doc}");
    assert!(names(&doc).is_empty());
    // A tier with no rules may be written empty without saying so.
    let (status, _, _) =
        parts(put(&node, "gold", Some(&auth), json!({"rules": []}).to_string()).await).await;
    assert_eq!(status, 200);
}
