//! weir.v1.RateLimiter/Check over a real loopback socket: batches, per-item errors, batch limits.

use tonic::transport::Channel;
use tonic::Code;
use weir_proto::weir::v1::rate_limiter_client::RateLimiterClient;
use weir_proto::weir::v1::{CheckItem, CheckRequest, CheckResult, ErrorCode, ItemLimit};
use weir_tests::TestNode;

const RULES: &str = r#"
[[rule]]
name      = "per-client"
route     = "POST /limited"
by        = "client"
algorithm = "sliding_window_counter"
limit     = 10
window    = "60s"
"#;

const LIMITED: &str = "POST /limited";

/// A node on ephemeral ports enforcing [`RULES`].
async fn start() -> (TestNode, RateLimiterClient<Channel>) {
    let node = TestNode::start(RULES, |_| {}).await;
    let client = RateLimiterClient::connect(format!("http://{}", node.node().grpc_addr()))
        .await
        .expect("connect");
    (node, client)
}

fn item(key: &str) -> CheckItem {
    CheckItem {
        key: key.into(),
        route: LIMITED.into(),
        ..CheckItem::default()
    }
}

async fn check(client: &mut RateLimiterClient<Channel>, items: Vec<CheckItem>) -> Vec<CheckResult> {
    let n = items.len();
    let results = client
        .check(CheckRequest { items })
        .await
        .expect("check succeeds")
        .into_inner()
        .results;
    assert_eq!(results.len(), n, "one result per item");
    results
}

#[tokio::test]
async fn a_batch_of_distinct_keys_is_each_allowed() {
    let (node, mut client) = start().await;
    let items = (0..100).map(|i| item(&format!("client-{i}"))).collect();
    for r in check(&mut client, items).await {
        assert!(r.allowed && r.limited, "{r:?}");
        assert_eq!(r.error, None);
        assert_eq!((r.limit, r.remaining), (10, 9));
        assert_eq!(r.rule, "per-client");
        assert!(r.reset_at_ms > 0);
    }
    assert_eq!(node.state().metrics.checks("per-client", "allowed"), 100);
    node.shutdown().await;
}

#[tokio::test]
async fn one_key_in_a_batch_is_allowed_exactly_its_limit_in_order() {
    let (node, mut client) = start().await;
    let results = check(&mut client, vec![item("hot"); 100]).await;
    for (i, r) in results.iter().enumerate() {
        assert!(r.limited);
        if i < 10 {
            assert!(r.allowed, "item {i} within the limit: {r:?}");
            assert_eq!(r.remaining, 9 - i as u64);
            assert_eq!(r.retry_after_ms, 0);
        } else {
            assert!(!r.allowed, "item {i} past the limit: {r:?}");
            assert_eq!(r.remaining, 0);
            assert!(r.retry_after_ms > 0);
        }
    }
    let m = &node.state().metrics;
    assert_eq!(m.checks("per-client", "allowed"), 10);
    assert_eq!(m.checks("per-client", "denied"), 90);
    node.shutdown().await;
}

#[tokio::test]
async fn a_bad_item_gets_its_own_error_and_the_others_are_decided() {
    let (node, mut client) = start().await;
    let zero = CheckItem {
        cost: Some(0),
        ..item("zero")
    };
    let too_costly = CheckItem {
        cost: Some(11),
        ..item("costly")
    };
    let bad_ip = CheckItem {
        ip: "not-an-ip".into(),
        ..item("bad-ip")
    };
    let absent_tier_and_ip = CheckItem {
        tier: String::new(),
        ip: String::new(),
        ..item("plain")
    };
    let unlimited = CheckItem {
        route: "GET /free".into(),
        ..item("free")
    };
    // Refused before the batch reaches the engine, while it is converted.
    let window_zero = CheckItem {
        limit: Some(ItemLimit {
            limit: 5,
            window_ms: 0,
        }),
        ..item("window-zero")
    };
    let items = vec![
        item("a"),
        zero,
        too_costly,
        bad_ip,
        absent_tier_and_ip,
        unlimited,
        window_zero,
        item("b"),
    ];
    let r = check(&mut client, items).await;

    assert!(r[0].allowed && r[0].limited && r[0].error.is_none());
    let e = r[1].error.as_ref().expect("cost 0 is refused");
    assert_eq!(
        (e.code, e.field.as_str()),
        (ErrorCode::InvalidArgument as i32, "cost")
    );
    assert!(!r[1].allowed);
    let e = r[2].error.as_ref().expect("cost over the limit is refused");
    assert_eq!(
        (e.code, e.field.as_str()),
        (ErrorCode::CostExceedsLimit as i32, "cost")
    );
    let e = r[3].error.as_ref().expect("a malformed ip is refused");
    assert_eq!(
        (e.code, e.field.as_str()),
        (ErrorCode::InvalidArgument as i32, "ip")
    );
    assert!(
        r[4].allowed && r[4].limited && r[4].error.is_none(),
        "{:?}",
        r[4]
    );
    assert!(
        r[5].allowed && !r[5].limited && r[5].error.is_none(),
        "{:?}",
        r[5]
    );
    assert_eq!(r[5].rule, "");
    let e = r[6]
        .error
        .as_ref()
        .expect("a carried limit with no window is refused");
    assert_eq!(
        (e.code, e.field.as_str()),
        (ErrorCode::InvalidArgument as i32, "limit")
    );
    assert!(!r[6].allowed);
    assert!(r[7].allowed && r[7].error.is_none(), "{:?}", r[7]);

    // The refused items consumed nothing.
    let again = check(&mut client, vec![item("zero"), item("costly")]).await;
    assert_eq!(again[0].remaining, 9);
    assert_eq!(again[1].remaining, 9);
    node.shutdown().await;
}

#[tokio::test]
async fn a_batch_over_the_item_limit_is_refused_and_decides_nothing() {
    let (node, mut client) = start().await;
    let max = node.state().config.limits.max_batch_items;
    let status = client
        .check(CheckRequest {
            items: vec![item("over"); max + 1],
        })
        .await
        .expect_err("over the batch limit");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("items"), "{}", status.message());
    assert_eq!(check(&mut client, vec![item("over")]).await[0].remaining, 9);

    // Exactly the limit is accepted.
    let full = check(&mut client, vec![item("full"); max]).await;
    assert_eq!(full.iter().filter(|r| r.allowed).count(), 10);
    node.shutdown().await;
}

#[tokio::test]
async fn an_empty_batch_is_refused() {
    let (node, mut client) = start().await;
    let status = client
        .check(CheckRequest { items: vec![] })
        .await
        .expect_err("empty batch");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("items"), "{}", status.message());
    node.shutdown().await;
}

#[tokio::test]
async fn a_message_larger_than_any_valid_batch_is_refused_while_decoding() {
    let (node, mut client) = start().await;
    let max_bytes = weir_node::grpc::max_message_bytes(node.state().config.limits.max_batch_items);
    // Keys far over the key limit make the message too big long before the
    // item count is reached; the server must not buffer it.
    let huge = item(&"k".repeat(64 * 1024));
    let count = max_bytes / huge.key.len() + 1;
    let status = client
        .check(CheckRequest {
            items: vec![huge; count],
        })
        .await
        .expect_err("oversized message");
    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
    node.shutdown().await;
}
