//! `--retry-jitter` beyond HTTP: gRPC Check's `retry_after_ms` and the Retry-After an Envoy RLS answer adds are spread over [base, 2 x base] too.

use weir_proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use weir_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use weir_proto::weir::v1::rate_limiter_client::RateLimiterClient;
use weir_proto::weir::v1::{CheckItem, CheckRequest, CheckResult};
use weir_tests::{rls_request, TestNode};

/// One admission per hour: the base wait after it is just under 3,600 s,
/// and a jittered one up to twice that.
const RULES: &str = r#"
[[rule]]
name      = "one-per-hour"
algorithm = "sliding_window_log"
limit     = 1
window    = "1h"
"#;

const BASE_MS: std::ops::RangeInclusive<u64> = 3_590_000..=3_600_000;

/// Asserts `waits` (ms) lie in [base, 2 x base] and are spread, not one
/// base wait seen again and again.
fn assert_spread(waits: &[u64], unit_ms: u64) {
    for &w in waits {
        assert!(
            (BASE_MS.start() - unit_ms..=2 * BASE_MS.end() + unit_ms).contains(&w),
            "wait {w} ms outside [base, 2 x base]"
        );
    }
    let (lo, hi) = (waits.iter().min().unwrap(), waits.iter().max().unwrap());
    // Unjittered, every wait is the base less the few ms the test took;
    // twenty uniform draws over 3,600 s all within 60 s is a 1 in 10^35 event.
    assert!(hi - lo > 60_000, "the waits are not spread: {waits:?}");
}

/// One gRPC Check call of `n` items for one key.
async fn one_key_batch(node: &TestNode, n: usize) -> Vec<CheckResult> {
    let mut client = RateLimiterClient::connect(format!("http://{}", node.node().grpc_addr()))
        .await
        .expect("connect");
    let item = CheckItem {
        key: "k".into(),
        ..CheckItem::default()
    };
    let items = vec![item; n];
    let results = client.check(CheckRequest { items }).await.expect("check");
    results.into_inner().results
}

#[tokio::test]
async fn grpc_check_jitters_each_denied_items_retry_after_ms() {
    let node = TestNode::start(RULES, |c| c.retry_jitter = true).await;
    let results = one_key_batch(&node, 21).await;
    assert!(results[0].allowed);
    assert_eq!(
        results[0].retry_after_ms, 0,
        "an admission has no wait to jitter"
    );
    assert!(results[1..].iter().all(|r| !r.allowed));
    let waits: Vec<u64> = results[1..].iter().map(|r| r.retry_after_ms).collect();
    assert_spread(&waits, 1);
    node.shutdown().await;
}

#[tokio::test]
async fn grpc_check_without_jitter_reports_the_bare_wait() {
    let node = TestNode::start(RULES, |_| {}).await;
    let results = one_key_batch(&node, 5).await;
    for r in &results[1..] {
        assert!(BASE_MS.contains(&r.retry_after_ms), "{r:?}");
    }
    node.shutdown().await;
}

#[tokio::test]
async fn rls_retry_after_is_jittered_in_whole_seconds() {
    let node = TestNode::start(RULES, |c| c.retry_jitter = true).await;
    let mut client = RateLimitServiceClient::connect(format!("http://{}", node.node().grpc_addr()))
        .await
        .expect("connect");
    let request = || rls_request("edge", "k");
    let mut waits = Vec::new();
    for i in 0..21 {
        let resp = client
            .should_rate_limit(request())
            .await
            .expect("ShouldRateLimit")
            .into_inner();
        let retry_after = resp
            .response_headers_to_add
            .iter()
            .find(|h| h.key == "Retry-After")
            .map(|h| h.value.parse::<u64>().expect("whole seconds"));
        if i == 0 {
            assert_eq!(resp.overall_code, Code::Ok as i32);
            assert_eq!(retry_after, None);
            continue;
        }
        assert_eq!(resp.overall_code, Code::OverLimit as i32);
        waits.push(retry_after.expect("a denial carries Retry-After") * 1000);
        // The reset is when the budget is back, not a retry hint: never jittered.
        let reset = resp.statuses[0].duration_until_reset.expect("reset");
        assert!(reset.seconds <= 3600, "{reset:?}");
    }
    assert_spread(&waits, 1000);
    node.shutdown().await;
}
