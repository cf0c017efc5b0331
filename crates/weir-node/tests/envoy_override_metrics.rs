//! Envoy limit overrides are counted under one fixed label, so callers cannot mint metric series.

use weir_node::{Node, ServeConfig};
use weir_proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use weir_proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use weir_proto::envoy::r#type::v3::RateLimitUnit;
use weir_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use weir_proto::envoy::service::ratelimit::v3::RateLimitRequest;

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
