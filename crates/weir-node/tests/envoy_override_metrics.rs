//! Limits carried in requests (Envoy descriptor and weir.v1 item overrides) are counted under one fixed label, so callers cannot mint metric series.

use weir_node::{Node, ServeConfig};
use weir_proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use weir_proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use weir_proto::envoy::r#type::v3::RateLimitUnit;
use weir_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use weir_proto::envoy::service::ratelimit::v3::RateLimitRequest;
use weir_proto::weir::v1::rate_limiter_client::RateLimiterClient;
use weir_proto::weir::v1::{CheckItem, CheckRequest, ItemLimit};

fn with_override(client: &str, requests_per_unit: u32) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry {
            key: "client".into(),
            value: client.into(),
        }],
        limit: Some(RateLimitOverride {
            requests_per_unit,
            unit: RateLimitUnit::Minute as i32,
        }),
        ..RateLimitDescriptor::default()
    }
}

#[tokio::test]
async fn override_verdicts_share_one_rule_label_whatever_their_limit() {
    let node = Node::start(ServeConfig::ephemeral())
        .await
        .expect("node starts");
    let mut rls = RateLimitServiceClient::connect(format!("http://{}", node.grpc_addr()))
        .await
        .expect("connect");
    // Three distinct overrides (three ad-hoc rules), then one denial.
    for (client, per_unit) in [("a", 1), ("b", 2), ("c", 3), ("a", 1)] {
        rls.should_rate_limit(RateLimitRequest {
            domain: "edge".into(),
            descriptors: vec![with_override(client, per_unit)],
            hits_addend: 1,
        })
        .await
        .expect("a verdict");
    }
    let text = node.state().metrics.render();
    let sample = |series: &str| {
        text.lines().find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .parse::<f64>()
                .ok()
        })
    };
    assert_eq!(
        sample(r#"weir_checks_total{rule="override:*",verdict="allowed"}"#),
        Some(3.0)
    );
    assert_eq!(
        sample(r#"weir_checks_total{rule="override:*",verdict="denied"}"#),
        Some(1.0)
    );
    assert_eq!(sample(r#"weir_keys{rule="override:*"}"#), Some(3.0));
    let per_override: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("override:") && !l.contains("override:*"))
        .collect();
    assert!(per_override.is_empty(), "{per_override:?}");
    node.shutdown().await;
}

/// Distinct overrides sent through weir.v1.RateLimiter/Check.
const OVERRIDES: u64 = 100_000;

fn item(n: u64) -> CheckItem {
    CheckItem {
        key: format!("tenant-{n}"),
        limit: Some(ItemLimit {
            limit: n,
            window_ms: 60_000,
        }),
        ..CheckItem::default()
    }
}

/// Guard: every distinct `ItemLimit` is a rule named after its value
/// (`override:<L>-per-<W>ms`); counted by that name, each minted a
/// `weir_checks_total` series that was never freed. Counted under the one
/// label every carried limit shares, 100,000 of them add no series.
#[tokio::test]
async fn a_hundred_thousand_grpc_overrides_add_no_metric_series() {
    let node = Node::start(ServeConfig::ephemeral())
        .await
        .expect("node starts");
    let mut grpc = RateLimiterClient::connect(format!("http://{}", node.grpc_addr()))
        .await
        .expect("connect");
    let batch = node.state().config.limits.max_batch_items as u64;
    // A lone item takes the handler's path for one; the rest go in full batches.
    let lone = CheckRequest {
        items: vec![item(OVERRIDES + 1)],
    };
    grpc.check(lone).await.expect("a verdict");
    for start in (1..=OVERRIDES).step_by(batch as usize) {
        let items = (start..(start + batch).min(OVERRIDES + 1))
            .map(item)
            .collect();
        let answer = grpc.check(CheckRequest { items }).await.expect("verdicts");
        assert!(answer.into_inner().results.iter().all(|r| r.allowed));
    }
    let text = node.state().metrics.render();
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("weir_checks_total{"))
        .collect();
    assert_eq!(
        series,
        [r#"weir_checks_total{rule="override:*",verdict="allowed"} 100001"#],
        "one series for every override"
    );
    let samples = text.lines().filter(|l| !l.starts_with('#')).count();
    assert!(samples < 200, "{samples} series in all:\n{text}");
    node.shutdown().await;
}
