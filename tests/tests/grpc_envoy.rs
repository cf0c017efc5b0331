//! Envoy RLS ShouldRateLimit over a real loopback socket, as Envoy would call it.

use tonic::transport::Channel;
use tonic::Code as GrpcCode;
use weir_proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use weir_proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use weir_proto::envoy::r#type::v3::RateLimitUnit;
use weir_proto::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use weir_proto::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use weir_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use weir_proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use weir_tests::TestNode;

/// The route of a descriptor with no route entry is its domain, so this
/// rule limits every descriptor of domain "edge" and nothing else.
const RULES: &str = r#"
[[rule]]
name      = "edge-per-client"
route     = "edge"
by        = "client"
algorithm = "sliding_window_counter"
limit     = 3
window    = "1m"
"#;

type Client = RateLimitServiceClient<Channel>;

async fn start() -> (TestNode, Client) {
    let node = TestNode::start(RULES, |_| {}).await;
    let client = RateLimitServiceClient::connect(format!("http://{}", node.node().grpc_addr()))
        .await
        .expect("connect");
    (node, client)
}

fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

fn client_desc(client: &str) -> RateLimitDescriptor {
    desc(&[("client", client)])
}

fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

async fn ask(client: &mut Client, req: RateLimitRequest) -> RateLimitResponse {
    let n = req.descriptors.len();
    let resp = client
        .should_rate_limit(req)
        .await
        .expect("ShouldRateLimit succeeds")
        .into_inner();
    assert_eq!(resp.statuses.len(), n, "one status per descriptor");
    resp
}

async fn refused(client: &mut Client, req: RateLimitRequest) -> tonic::Status {
    client
        .should_rate_limit(req)
        .await
        .expect_err("request refused")
}

/// (code, limit_remaining) of the only descriptor of a one-descriptor call.
async fn one(client: &mut Client, d: RateLimitDescriptor) -> (Code, u32) {
    let resp = ask(client, request("edge", vec![d])).await;
    let s = &resp.statuses[0];
    assert_eq!(resp.overall_code, s.code);
    (
        Code::try_from(s.code).expect("known code"),
        s.limit_remaining,
    )
}

fn header<'a>(resp: &'a RateLimitResponse, name: &str) -> Option<&'a str> {
    resp.response_headers_to_add
        .iter()
        .find(|h| h.key == name)
        .map(|h| h.value.as_str())
}

fn assert_limit(s: &DescriptorStatus, name: &str, requests_per_unit: u32, unit: Unit) {
    let limit = s.current_limit.as_ref().expect("current_limit set");
    assert_eq!(limit.name, name);
    assert_eq!(limit.requests_per_unit, requests_per_unit);
    assert_eq!(limit.unit, unit as i32);
}

#[tokio::test]
async fn a_descriptor_goes_from_ok_to_over_limit_after_its_limit() {
    let (node, mut client) = start().await;
    for expected_remaining in [2, 1, 0] {
        let resp = ask(&mut client, request("edge", vec![client_desc("alice")])).await;
        assert_eq!(resp.overall_code, Code::Ok as i32);
        let s = &resp.statuses[0];
        assert_eq!(s.code, Code::Ok as i32);
        assert_limit(s, "edge-per-client", 3, Unit::Minute);
        assert_eq!(s.limit_remaining, expected_remaining);
        let reset = s.duration_until_reset.expect("duration_until_reset set");
        assert!(reset.seconds > 0 || reset.nanos > 0, "{reset:?}");
        // A sliding counter is fully refilled once the current window has
        // become the previous one and slid out too: at most two windows.
        assert!(reset.seconds <= 120, "{reset:?}");
        let remaining = expected_remaining.to_string();
        assert_eq!(
            header(&resp, "RateLimit-Remaining"),
            Some(remaining.as_str())
        );
        assert_eq!(header(&resp, "Retry-After"), None);
    }
    let resp = ask(&mut client, request("edge", vec![client_desc("alice")])).await;
    assert_eq!(resp.overall_code, Code::OverLimit as i32);
    let s = &resp.statuses[0];
    assert_eq!(s.code, Code::OverLimit as i32);
    assert_limit(s, "edge-per-client", 3, Unit::Minute);
    assert_eq!(s.limit_remaining, 0);
    assert_eq!(header(&resp, "RateLimit-Limit"), Some("3"));
    let retry: u64 = header(&resp, "Retry-After")
        .expect("Retry-After on OVER_LIMIT")
        .parse()
        .expect("whole seconds");
    assert!(retry >= 1);
    let m = &node.state().metrics;
    assert_eq!(m.checks("edge-per-client", "allowed"), 3);
    assert_eq!(m.checks("edge-per-client", "denied"), 1);
    node.shutdown().await;
}

#[tokio::test]
async fn hits_addend_consumes_that_many() {
    let (node, mut client) = start().await;
    let mut req = request("edge", vec![client_desc("bob")]);
    req.hits_addend = 2;
    assert_eq!(
        ask(&mut client, req.clone()).await.statuses[0].limit_remaining,
        1
    );
    // The descriptor's own hits win over the request's.
    req.descriptors[0].hits_addend = Some(1);
    assert_eq!(
        ask(&mut client, req.clone()).await.statuses[0].limit_remaining,
        0
    );
    assert_eq!(
        one(&mut client, client_desc("bob")).await,
        (Code::OverLimit, 0)
    );

    // More hits than the limit can ever admit is bad input, not OVER_LIMIT.
    let mut costly = client_desc("carl");
    costly.hits_addend = Some(4);
    let status = refused(&mut client, request("edge", vec![costly])).await;
    assert_eq!(status.code(), GrpcCode::InvalidArgument);
    assert!(
        status.message().contains("descriptors[0].cost"),
        "{}",
        status.message()
    );
    assert_eq!(one(&mut client, client_desc("carl")).await, (Code::Ok, 2));
    node.shutdown().await;
}

fn with_override(client: &str, requests_per_unit: u32, unit: RateLimitUnit) -> RateLimitDescriptor {
    RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit,
            unit: unit as i32,
        }),
        ..client_desc(client)
    }
}

#[tokio::test]
async fn a_limit_override_is_enforced_at_its_own_limit() {
    let (node, mut client) = start().await;
    // Above the rule set's 3: five pass, the sixth does not.
    for expected_remaining in (0..5).rev() {
        let resp = ask(
            &mut client,
            request("edge", vec![with_override("erin", 5, RateLimitUnit::Hour)]),
        )
        .await;
        let s = &resp.statuses[0];
        assert_eq!(s.code, Code::Ok as i32);
        assert_limit(s, "override:5-per-hour", 5, Unit::Hour);
        assert_eq!(s.limit_remaining, expected_remaining);
        assert!(s.duration_until_reset.is_some());
    }
    let d = with_override("erin", 5, RateLimitUnit::Hour);
    assert_eq!(one(&mut client, d).await, (Code::OverLimit, 0));
    // The override kept its own counter: the rule set's is untouched.
    assert_eq!(one(&mut client, client_desc("erin")).await, (Code::Ok, 2));

    // Below the rule set's 3: one passes.
    let d = with_override("fay", 1, RateLimitUnit::Day);
    assert_eq!(one(&mut client, d.clone()).await, (Code::Ok, 0));
    assert_eq!(one(&mut client, d).await, (Code::OverLimit, 0));

    let status = refused(
        &mut client,
        request("edge", vec![with_override("gus", 0, RateLimitUnit::Second)]),
    )
    .await;
    assert_eq!(status.code(), GrpcCode::InvalidArgument);
    assert!(status.message().contains("descriptors[0].limit"));
    node.shutdown().await;
}

/// A lone descriptor of the rule set is validated by its decision, not
/// before it as several are: it is refused all the same, naming its field,
/// counted as invalid input, and it consumes nothing.
#[tokio::test]
async fn a_lone_bad_descriptor_is_refused_naming_its_field() {
    let (node, mut client) = start().await;
    let long_client = "c".repeat(257);
    let bad_ip = desc(&[("client", "hal"), ("ip", "not-an-ip")]);
    for (d, field) in [
        (client_desc(&long_client), "descriptors[0].key"),
        (bad_ip, "descriptors[0].ip"),
    ] {
        let status = refused(&mut client, request("edge", vec![d])).await;
        assert_eq!(status.code(), GrpcCode::InvalidArgument);
        assert!(status.message().contains(field), "{}", status.message());
    }
    assert_eq!(node.state().metrics.checks("", "invalid"), 2);
    assert_eq!(one(&mut client, client_desc("hal")).await, (Code::Ok, 2));
    node.shutdown().await;
}

#[tokio::test]
async fn request_level_fields_are_validated() {
    let (node, mut client) = start().await;
    let status = refused(&mut client, request("", vec![client_desc("x")])).await;
    assert_eq!(status.code(), GrpcCode::InvalidArgument);
    assert!(status.message().contains("domain"), "{}", status.message());

    let status = refused(&mut client, request("edge", vec![])).await;
    assert_eq!(status.code(), GrpcCode::InvalidArgument);
    assert!(status.message().contains("descriptors"));

    let max = node.state().config.limits.max_batch_items;
    let status = refused(
        &mut client,
        request("edge", vec![client_desc("x"); max + 1]),
    )
    .await;
    assert_eq!(status.code(), GrpcCode::InvalidArgument);
    assert!(status.message().contains("descriptors"));
    // None of the refused requests counted for "x".
    assert_eq!(one(&mut client, client_desc("x")).await, (Code::Ok, 2));
    node.shutdown().await;
}

#[tokio::test]
async fn a_bad_descriptor_refuses_the_request_and_consumes_nothing() {
    let (node, mut client) = start().await;
    let bad_ip = desc(&[("client", "hal"), ("remote_address", "not-an-ip")]);
    let status = refused(
        &mut client,
        request("edge", vec![client_desc("ivy"), bad_ip]),
    )
    .await;
    assert_eq!(status.code(), GrpcCode::InvalidArgument);
    assert!(
        status.message().contains("descriptors[1].ip"),
        "{}",
        status.message()
    );

    // Only the rule set knows this cost is too high; it is still checked
    // before the first descriptor is decided.
    let mut costly = client_desc("jan");
    costly.hits_addend = Some(4);
    let status = refused(
        &mut client,
        request("edge", vec![client_desc("ivy"), costly]),
    )
    .await;
    assert_eq!(status.code(), GrpcCode::InvalidArgument);
    assert!(
        status.message().contains("descriptors[1].cost"),
        "{}",
        status.message()
    );

    assert_eq!(one(&mut client, client_desc("ivy")).await, (Code::Ok, 2));
    node.shutdown().await;
}

#[tokio::test]
async fn descriptors_without_a_client_entry_get_a_counter_each() {
    let (node, mut client) = start().await;
    let a = desc(&[("destination_cluster", "a")]);
    for _ in 0..3 {
        assert_eq!(one(&mut client, a.clone()).await.0, Code::Ok);
    }
    assert_eq!(one(&mut client, a).await, (Code::OverLimit, 0));
    let b = desc(&[("destination_cluster", "b")]);
    assert_eq!(one(&mut client, b).await, (Code::Ok, 2));
    node.shutdown().await;
}

#[tokio::test]
async fn an_unlimited_descriptor_is_ok_without_a_current_limit() {
    let (node, mut client) = start().await;
    let resp = ask(&mut client, request("elsewhere", vec![client_desc("kim")])).await;
    assert_eq!(resp.overall_code, Code::Ok as i32);
    assert_eq!(resp.statuses[0].code, Code::Ok as i32);
    assert_eq!(resp.statuses[0].current_limit, None);
    assert!(resp.response_headers_to_add.is_empty());

    // One descriptor over its limit makes the whole request OVER_LIMIT, and
    // every status still answers its own descriptor.
    let capped = with_override("lee", 1, RateLimitUnit::Minute);
    ask(&mut client, request("edge", vec![capped.clone()])).await;
    let free = desc(&[("client", "lee"), ("route", "unlimited")]);
    let resp = ask(&mut client, request("edge", vec![free, capped])).await;
    assert_eq!(resp.overall_code, Code::OverLimit as i32);
    assert_eq!(resp.statuses[0].code, Code::Ok as i32);
    assert_eq!(resp.statuses[0].current_limit, None);
    assert_eq!(resp.statuses[1].code, Code::OverLimit as i32);
    node.shutdown().await;
}
