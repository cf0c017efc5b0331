//! A shaping rule (a leaky bucket with a queue) on each edge: `POST /v1/check` honours `max_delay_ms`, and Envoy RLS, which has no field for a delay, decides it as a meter.

use serde_json::json;
use weir_proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use weir_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use weir_tests::{header_u64, parts, rls_request, TestNode};

/// One request per 10 s per client, up to three scheduled ahead.
const PACED: &str = r#"
[[rule]]
name      = "paced"
algorithm = "leaky_bucket"
limit     = 1
window    = "10s"
queue     = 3
"#;

/// The delay a plain HTTP check of `key` is scheduled with now, in ms.
async fn http_delay(node: &TestNode, key: &str) -> u64 {
    let (status, _, body) = parts(node.check(json!({"key": key})).await).await;
    assert_eq!(status, 200, "{body}");
    body["delay_ms"].as_u64().unwrap_or(0)
}

#[tokio::test]
async fn a_delay_past_max_delay_ms_is_a_429_that_schedules_nothing() {
    let node = TestNode::start(PACED, |_| {}).await;
    assert_eq!(http_delay(&node, "k").await, 0);
    let (status, h, body) =
        parts(node.check(json!({"key": "k", "max_delay_ms": 2000})).await).await;
    assert_eq!(status, 429, "{body}");
    let wait = body["retry_after_ms"].as_u64().unwrap();
    assert!(
        (7_000..=8_000).contains(&wait),
        "10 s needed, 2 s offered: {wait}"
    );
    assert_eq!(header_u64(&h, "Retry-After"), wait.div_ceil(1000));
    // Nothing was scheduled for it: the next request is one slot out, not two.
    let next = http_delay(&node, "k").await;
    assert!((9_000..=10_000).contains(&next), "{next}");
    // Within its wait, a scheduled request is admitted with its delay.
    let (status, _, body) = parts(
        node.check(json!({"key": "k", "max_delay_ms": 30_000}))
            .await,
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        (19_000..=20_000).contains(&body["delay_ms"].as_u64().unwrap()),
        "{body}"
    );
}

#[tokio::test]
async fn rls_decides_a_shaping_rule_as_a_meter() {
    let node = TestNode::start(PACED, |_| {}).await;
    let mut client = RateLimitServiceClient::connect(format!("http://{}", node.node().grpc_addr()))
        .await
        .expect("connect");
    let request = || rls_request("edge", "k");
    let ask = |c: &mut RateLimitServiceClient<_>| {
        let mut c = c.clone();
        async move { c.should_rate_limit(request()).await.unwrap().into_inner() }
    };
    let first = ask(&mut client).await;
    assert_eq!(first.overall_code, Code::Ok as i32);
    // Envoy cannot hold a request: one that would have to wait is over the limit.
    for _ in 0..5 {
        let early = ask(&mut client).await;
        assert_eq!(early.overall_code, Code::OverLimit as i32);
        let retry_after = early
            .response_headers_to_add
            .iter()
            .find(|h| h.key == "Retry-After")
            .map(|h| h.value.parse::<u64>().unwrap());
        assert!(
            retry_after.is_some_and(|s| (9..=10).contains(&s)),
            "{early:?}"
        );
    }
    // The refusals scheduled nothing: an HTTP caller, which can wait, is
    // still only one slot behind the first.
    let next = http_delay(&node, "k").await;
    assert!((9_000..=10_000).contains(&next), "{next}");
}
