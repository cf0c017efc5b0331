//! POST /v1/check over a real socket: verdicts, headers, shadow rules, jitter, 503.

use reqwest::header::HeaderMap;
use serde_json::{json, Value};
use weir_tests::{header, header_u64, parts, unix_secs, TestNode};

/// Exact (sliding log) and an hour long, so nothing refills during a test.
const THREE_PER_HOUR: &str = r#"
[[rule]]
name      = "three-per-hour"
route     = "POST /charges"
algorithm = "sliding_window_log"
limit     = 3
window    = "1h"
"#;

const RATE_HEADERS: [&str; 8] = [
    "RateLimit-Limit",
    "RateLimit-Remaining",
    "RateLimit-Reset",
    "X-RateLimit-Limit",
    "X-RateLimit-Remaining",
    "X-RateLimit-Reset",
    "RateLimit-Policy",
    "RateLimit",
];

fn charge(key: &str) -> Value {
    json!({"key": key, "route": "POST /charges"})
}

/// Every header of both families present and agreeing with the body.
fn assert_rate_headers(h: &HeaderMap, body: &Value) {
    for name in RATE_HEADERS {
        assert!(header(h, name).is_some(), "missing {name}");
    }
    let remaining = body["remaining"].as_u64().unwrap();
    assert_eq!(header_u64(h, "RateLimit-Limit"), 3);
    assert_eq!(header_u64(h, "X-RateLimit-Limit"), 3);
    assert_eq!(header_u64(h, "RateLimit-Remaining"), remaining);
    assert_eq!(header_u64(h, "X-RateLimit-Remaining"), remaining);
    // RateLimit-Reset is seconds from now, X-RateLimit-Reset a unix time.
    // reset_at is whole milliseconds rounded up, so a reset just under the
    // hour away can read 3601 after rounding up again to seconds.
    let reset_in = header_u64(h, "RateLimit-Reset");
    assert!(
        (3590..=3601).contains(&reset_in),
        "RateLimit-Reset {reset_in}"
    );
    let reset_unix = header_u64(h, "X-RateLimit-Reset");
    let now = unix_secs();
    assert!(
        reset_unix >= now && reset_unix <= now + 3601,
        "X-RateLimit-Reset {reset_unix} is not within the hour after {now}"
    );
    assert_eq!(
        reset_unix,
        body["reset_at"].as_u64().unwrap().div_ceil(1000),
        "X-RateLimit-Reset is reset_at in seconds, rounded up"
    );
    assert_eq!(
        header(h, "RateLimit-Policy"),
        Some("\"three-per-hour\";q=3;w=3600")
    );
    assert_eq!(
        header(h, "RateLimit"),
        Some(format!("\"three-per-hour\";r={remaining};t={reset_in}").as_str())
    );
}

#[tokio::test]
async fn allowed_then_denied_with_every_header_consistent() {
    let node = TestNode::start(THREE_PER_HOUR, |_| {}).await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let (status, h, body) = parts(node.check(charge("cust_1")).await).await;
        assert_eq!(status, 200);
        assert_eq!(header(&h, "content-type"), Some("application/json"));
        assert_eq!(header(&h, "Retry-After"), None, "no Retry-After on a 200");
        assert_rate_headers(&h, &body);
        assert_eq!(body["allowed"], true);
        assert_eq!(body["rule"], "three-per-hour");
        assert_eq!(body["retry_after_ms"], 0);
        seen.push(body["remaining"].as_u64().unwrap());
    }
    assert_eq!(seen, [2, 1, 0], "remaining counts down to zero");

    let (status, h, body) = parts(node.check(charge("cust_1")).await).await;
    assert_eq!(status, 429);
    assert_eq!(header(&h, "content-type"), Some("application/problem+json"));
    assert_rate_headers(&h, &body);
    assert_eq!(body["allowed"], false);
    assert_eq!(body["remaining"], 0);
    assert_eq!(body["rule"], "three-per-hour");
    assert_eq!(body["status"], 429);
    let retry_after = header_u64(&h, "Retry-After");
    let retry_ms = body["retry_after_ms"].as_u64().unwrap();
    assert!(retry_ms > 0);
    assert!(
        retry_after >= retry_ms.div_ceil(1000) && retry_after >= 1,
        "Retry-After {retry_after} must round {retry_ms} ms up"
    );

    // Another caller has its own budget.
    let (status, _, body) = parts(node.check(charge("cust_2")).await).await;
    assert_eq!((status, body["remaining"].as_u64()), (200, Some(2)));
}

#[tokio::test]
async fn request_no_rule_matches_is_unlimited_without_rate_limit_headers() {
    let node = TestNode::start(THREE_PER_HOUR, |_| {}).await;
    for _ in 0..5 {
        let (status, h, body) = parts(
            node.check(json!({"key": "cust_1", "route": "GET /elsewhere"}))
                .await,
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(body, json!({"allowed": true, "rule": null}));
        for name in RATE_HEADERS.iter().chain(&["Retry-After"]) {
            assert!(header(&h, name).is_none(), "unexpected {name}");
        }
    }
    let unlimited = node
        .metric(r#"weir_checks_total{rule="",verdict="unlimited"}"#)
        .await;
    assert_eq!(unlimited, Some(5.0));
}

#[tokio::test]
async fn shadow_rule_never_denies_and_is_counted_as_would_deny() {
    let rules = r#"
    [[rule]]
    name      = "generous"
    algorithm = "sliding_window_log"
    limit     = 100
    window    = "1h"

    [[rule]]
    name      = "strict-shadow"
    algorithm = "sliding_window_log"
    limit     = 2
    window    = "1h"
    shadow    = true
    "#;
    let node = TestNode::start(rules, |_| {}).await;
    for i in 0..5u64 {
        let (status, h, body) = parts(node.check(json!({"key": "cust_1"})).await).await;
        assert_eq!(status, 200, "request {i}");
        assert_eq!(
            body["rule"], "generous",
            "a shadow rule is never the one shown"
        );
        assert_eq!(body["remaining"].as_u64(), Some(99 - i));
        assert_eq!(header(&h, "Retry-After"), None);
    }
    let would_deny = node
        .metric(r#"weir_shadow_would_deny_total{rule="strict-shadow"}"#)
        .await;
    assert_eq!(
        would_deny,
        Some(3.0),
        "requests 3, 4 and 5 were over the shadow limit"
    );
}

#[tokio::test]
async fn retry_jitter_spreads_the_wait_between_base_and_twice_base_in_milliseconds() {
    let rules = r#"
    [[rule]]
    name      = "one-per-hour"
    algorithm = "sliding_window_log"
    limit     = 1
    window    = "1h"
    "#;
    let node = TestNode::start(rules, |c| c.retry_jitter = true).await;
    assert_eq!(node.check(json!({"key": "k"})).await.status(), 200);
    // The one admitted entry expires an hour after it was taken: the base
    // wait is just under 3,600 s, and a jittered one up to twice that.
    let mut values = Vec::new();
    for _ in 0..20 {
        let (status, h, body) = parts(node.check(json!({"key": "k"})).await).await;
        assert_eq!(status, 429);
        let ms = body["retry_after_ms"].as_u64().unwrap();
        assert!(
            (3_590_000..=7_200_000).contains(&ms),
            "retry_after_ms {ms} outside [base, 2 x base]"
        );
        assert_eq!(header_u64(&h, "Retry-After"), ms.div_ceil(1000));
        values.push(ms);
    }
    values.sort();
    values.dedup();
    // Whole seconds over a 3,600 s spread would repeat now and then; the
    // body's milliseconds should not.
    assert!(
        values.len() > 15,
        "jitter must vary retry_after_ms: {values:?}"
    );
}

#[tokio::test]
async fn scheduling_leaky_bucket_reports_the_delay() {
    let rules = r#"
    [[rule]]
    name      = "paced"
    algorithm = "leaky_bucket"
    limit     = 1
    window    = "10s"
    queue     = 3
    "#;
    let node = TestNode::start(rules, |_| {}).await;
    let (_, _, first) = parts(node.check(json!({"key": "k"})).await).await;
    assert_eq!(first["allowed"], true);
    assert!(
        first.get("delay_ms").is_none(),
        "a conforming request waits for nothing"
    );
    let (status, _, second) = parts(node.check(json!({"key": "k"})).await).await;
    assert_eq!(status, 200);
    let delay = second["delay_ms"]
        .as_u64()
        .expect("a scheduled request carries delay_ms");
    assert!(
        (9_000..=10_000).contains(&delay),
        "delay {delay} ms for one 10 s slot"
    );
}

#[tokio::test]
async fn full_store_is_503_never_429() {
    let node = TestNode::start(THREE_PER_HOUR, |c| c.max_keys_per_rule = 1).await;
    assert_eq!(node.check(charge("first")).await.status(), 200);
    let (status, h, body) = parts(node.check(charge("second")).await).await;
    assert_eq!(status, 503);
    assert_eq!(header(&h, "content-type"), Some("application/problem+json"));
    assert!(header(&h, "Retry-After").is_none());
    assert_eq!(body["status"], 503);
    // The caller already known keeps being served.
    assert_eq!(node.check(charge("first")).await.status(), 200);
    let unavailable = node
        .metric(r#"weir_checks_total{rule="",verdict="unavailable"}"#)
        .await;
    assert_eq!(unavailable, Some(1.0));
}
