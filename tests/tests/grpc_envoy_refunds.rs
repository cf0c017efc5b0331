//! Envoy refunds (`is_negative_hits`, Envoy 1.38) over a real loopback
//! socket, sent by a client generated from Envoy's own messages
//! (`tests/proto/`): alone and in a cluster, where the refund reaches the
//! key's owner.

use tonic::transport::Channel;
use weir_tests::upstream::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use weir_tests::upstream::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use weir_tests::upstream::envoy::service::ratelimit::v3::rate_limit_response::Code;
use weir_tests::upstream::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use weir_tests::upstream::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use weir_tests::{start_cluster, TestNode};

/// 5 a minute, exact: a log ages nothing out for the minute a test takes.
const RULES: &str = r#"
[[rule]]
name      = "edge-per-client"
route     = "edge"
by        = "client"
algorithm = "sliding_window_log"
limit     = 5
window    = "1m"
"#;

type Client = RateLimitServiceClient<Channel>;

async fn client_of(node: &TestNode) -> Client {
    RateLimitServiceClient::connect(format!("http://{}", node.node().grpc_addr()))
        .await
        .expect("connect")
}

fn descriptor(client: &str, hits: Option<u64>, refund: bool) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry {
            key: "client".into(),
            value: client.into(),
        }],
        limit: None,
        hits_addend: hits,
        is_negative_hits: refund,
    }
}

async fn ask(client: &mut Client, descriptors: Vec<RateLimitDescriptor>) -> RateLimitResponse {
    let req = RateLimitRequest {
        domain: "edge".into(),
        descriptors,
        hits_addend: 0,
    };
    client
        .should_rate_limit(req)
        .await
        .expect("ShouldRateLimit succeeds")
        .into_inner()
}

/// (allowed, remaining) of one check of `key`.
async fn check(client: &mut Client, key: &str) -> (bool, u32) {
    let resp = ask(client, vec![descriptor(key, None, false)]).await;
    let s = &resp.statuses[0];
    (s.code == Code::Ok as i32, s.limit_remaining)
}

/// How many of `n` checks of `key` are admitted.
async fn admitted(client: &mut Client, key: &str, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        ok += usize::from(check(client, key).await.0);
    }
    ok
}

/// Refunds `hits` of `key`; a refund is answered OK however full the key is.
async fn refund(client: &mut Client, key: &str, hits: u64) {
    let resp = ask(client, vec![descriptor(key, Some(hits), true)]).await;
    assert_eq!(resp.overall_code, Code::Ok as i32, "{resp:?}");
    assert_eq!(resp.statuses[0].code, Code::Ok as i32);
}

#[tokio::test]
async fn a_refund_of_two_admits_exactly_two_more() {
    let node = TestNode::start(RULES, |_| {}).await;
    let mut client = client_of(&node).await;
    assert_eq!(admitted(&mut client, "alice", 6).await, 5);
    refund(&mut client, "alice", 2).await;
    assert_eq!(admitted(&mut client, "alice", 5).await, 2);
    node.shutdown().await;
}

#[tokio::test]
async fn a_refund_larger_than_what_was_spent_clamps_at_the_limit() {
    let node = TestNode::start(RULES, |_| {}).await;
    let mut client = client_of(&node).await;
    assert_eq!(check(&mut client, "bob").await, (true, 4));
    refund(&mut client, "bob", 100).await;
    // Back to the whole limit, never past it.
    assert_eq!(check(&mut client, "bob").await, (true, 4));
    assert_eq!(admitted(&mut client, "bob", 10).await, 4);
    node.shutdown().await;
}

#[tokio::test]
async fn a_refund_beside_a_check_in_one_call_is_answered_ok_and_the_check_decided() {
    let node = TestNode::start(RULES, |_| {}).await;
    let mut client = client_of(&node).await;
    assert_eq!(admitted(&mut client, "carol", 5).await, 5);
    let resp = ask(
        &mut client,
        vec![
            descriptor("carol", None, false),
            descriptor("carol", Some(1), true),
        ],
    )
    .await;
    // The check came first and met a full key; the refund after it is OK.
    assert_eq!(resp.statuses[0].code, Code::OverLimit as i32);
    assert_eq!(resp.statuses[1].code, Code::Ok as i32);
    assert_eq!(admitted(&mut client, "carol", 3).await, 1);
    node.shutdown().await;
}

#[tokio::test]
async fn a_refund_reaches_the_keys_owner_in_a_cluster() {
    let nodes = start_cluster(3, RULES, |_| {}).await;
    let cluster = nodes[0].state().engine.cluster().expect("a member");
    let key = (0..)
        .map(|i| format!("remote-{i}"))
        .find(|k| cluster.owner_of(k).is_some_and(|o| o.id == "node-2"))
        .unwrap();
    // Through node-1, which owns nothing of the key and caches its denial.
    let mut gateway = client_of(&nodes[0]).await;
    assert_eq!(admitted(&mut gateway, &key, 6).await, 5);
    refund(&mut gateway, &key, 2).await;
    assert_eq!(admitted(&mut gateway, &key, 5).await, 2);
    // Through node-3: a refund past what was spent gives the limit back,
    // no more. (Checked through node-3 too: node-1 holds its cached denial
    // until it lapses, as docs/envoy.md says of a refund sent elsewhere.)
    let mut other = client_of(&nodes[2]).await;
    refund(&mut other, &key, 100).await;
    assert_eq!(check(&mut other, &key).await, (true, 4));
    assert_eq!(admitted(&mut other, &key, 10).await, 4);
    for n in nodes {
        n.shutdown().await;
    }
}
