//! Malformed checks: each refused with a 4xx problem naming its field, and none moves a counter.

use serde_json::{json, Value};
use weir_tests::{header, parts, raw_exchange, TestNode};

const FIVE_PER_HOUR: &str = r#"
[[rule]]
name      = "five-per-hour"
algorithm = "sliding_window_log"
limit     = 5
window    = "1h"
"#;

const MAX_BODY: usize = 1024;

async fn start() -> TestNode {
    TestNode::start(FIVE_PER_HOUR, |c| c.limits.max_body_bytes = MAX_BODY).await
}

/// Sends `body` raw and checks the refusal: status, problem+json, the field.
async fn assert_refused(node: &TestNode, body: String, status: u16, field: &str) -> Value {
    let (got, h, problem) = parts(node.check_raw(body.clone()).await).await;
    assert_eq!(got, status, "status for {body:.80}");
    assert_eq!(
        header(&h, "content-type"),
        Some("application/problem+json"),
        "content type for {body:.80}"
    );
    assert_eq!(problem["field"], field, "field for {body:.80}: {problem}");
    assert_eq!(problem["status"], status);
    assert!(problem["title"].is_string() && problem["type"].is_string());
    assert!(
        problem["detail"].as_str().is_some_and(|d| !d.is_empty()),
        "a detail saying what was wrong"
    );
    assert!(header(&h, "RateLimit-Remaining").is_none());
    problem
}

#[tokio::test]
async fn every_malformed_check_is_a_problem_naming_its_field_and_changes_nothing() {
    let node = start().await;
    let key = "cust_1";
    let with_cost = |cost: &str| format!(r#"{{"key":"{key}","cost":{cost}}}"#);
    let cases: Vec<(String, u16, &str)> = vec![
        (format!(r#"{{"key":"{key}""#), 400, "body"),
        ("not json".into(), 400, "body"),
        (r#"["cust_1"]"#.into(), 400, "body"),
        (r#"{"route":"GET /"}"#.into(), 400, "key"),
        (r#"{"key":""}"#.into(), 400, "key"),
        (r#"{"key":42}"#.into(), 400, "key"),
        (with_cost("0"), 400, "cost"),
        (with_cost("-1"), 400, "cost"),
        (with_cost("1.5"), 400, "cost"),
        (with_cost("1e30"), 400, "cost"),
        (with_cost("18446744073709551616"), 400, "cost"),
        (with_cost("\"1\""), 400, "cost"),
        (with_cost("6"), 400, "cost"),
        (format!(r#"{{"key":"{key}","ip":"not-an-ip"}}"#), 400, "ip"),
        (format!(r#"{{"key":"{key}","tier":7}}"#), 400, "tier"),
        (
            format!(r#"{{"key":"{key}","colour":"red"}}"#),
            400,
            "colour",
        ),
        (json!({"key": "k".repeat(257)}).to_string(), 400, "key"),
        (
            json!({"key": key, "route": "x".repeat(MAX_BODY)}).to_string(),
            413,
            "body",
        ),
    ];
    for (body, status, field) in &cases {
        assert_refused(&node, body.clone(), *status, field).await;
    }

    // Nothing above consumed budget: the same key still has all of it.
    let (status, _, body) = parts(node.check(json!({"key": key})).await).await;
    assert_eq!(status, 200);
    assert_eq!(body["remaining"], 4, "only this check has been counted");
    assert_eq!(
        node.state().engine.limiter().keys(),
        1,
        "no refused key was stored"
    );

    let metrics = node.metrics().await;
    let refused: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("weir_rejected_inputs_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(refused, cases.len() as f64, "every refusal is counted");
}

#[tokio::test]
async fn cost_above_the_limit_is_400_naming_cost_and_rule_never_429() {
    let node = start().await;
    let problem = assert_refused(
        &node,
        json!({"key": "k", "cost": 6}).to_string(),
        400,
        "cost",
    )
    .await;
    assert_eq!(problem["rule"], "five-per-hour");
    // A cost equal to the limit is possible, and takes the whole budget.
    let (status, _, body) = parts(node.check(json!({"key": "k", "cost": 5})).await).await;
    assert_eq!((status, body["remaining"].as_u64()), (200, Some(0)));
}

#[tokio::test]
async fn chunked_body_over_the_limit_is_cut_off_while_reading() {
    let node = start().await;
    // A chunked body declares no length; the cap must hold while reading.
    let chunk = " ".repeat(MAX_BODY + 1);
    let request = format!(
        "POST /v1/check HTTP/1.1\r\nHost: weir\r\nConnection: close\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n\
         {:x}\r\n{chunk}\r\n0\r\n\r\n",
        chunk.len()
    );
    let response = raw_exchange(node.node().http_addr(), &request).await;
    assert!(response.starts_with("HTTP/1.1 413"), "{response:.200}");
    assert!(response.contains("application/problem+json"));
    assert!(response.contains(r#""field":"body""#));
}

#[tokio::test]
async fn unknown_paths_and_methods_answer_with_problems() {
    let node = start().await;
    let res = node.get("/v1/nothing-here").await;
    assert_eq!(res.status(), 404);
    assert_eq!(
        header(res.headers(), "content-type"),
        Some("application/problem+json")
    );
    let res = node.get("/v1/check").await;
    assert_eq!(res.status(), 405);
    assert_eq!(
        header(res.headers(), "content-type"),
        Some("application/problem+json")
    );
}
