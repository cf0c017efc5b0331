//! Refund items (`CheckItem.refund`) on weir.v1.RateLimiter/Check over a
//! real loopback socket: the cost given back, never past the whole limit,
//! and a refund beside checks in one batch.

use tonic::transport::Channel;
use weir_proto::weir::v1::rate_limiter_client::RateLimiterClient;
use weir_proto::weir::v1::{CheckItem, CheckRequest, CheckResult};
use weir_tests::TestNode;

/// 5 a minute, exact: a log ages nothing out for the minute a test takes.
const RULES: &str = r#"
[[rule]]
name      = "per-client"
algorithm = "sliding_window_log"
limit     = 5
window    = "1m"
"#;

type Client = RateLimiterClient<Channel>;

async fn start() -> (TestNode, Client) {
    let node = TestNode::start(RULES, |_| {}).await;
    let client = RateLimiterClient::connect(format!("http://{}", node.node().grpc_addr()))
        .await
        .expect("connect");
    (node, client)
}

fn item(key: &str, cost: u64, refund: bool) -> CheckItem {
    CheckItem {
        key: key.into(),
        route: "GET /x".into(),
        cost: Some(cost),
        refund,
        ..CheckItem::default()
    }
}

async fn call(client: &mut Client, items: Vec<CheckItem>) -> Vec<CheckResult> {
    let res = client
        .check(CheckRequest { items })
        .await
        .expect("Check answered");
    res.into_inner().results
}

async fn admitted(client: &mut Client, key: &str, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        ok += usize::from(call(client, vec![item(key, 1, false)]).await[0].allowed);
    }
    ok
}

#[tokio::test]
async fn a_refund_item_gives_its_cost_back_and_never_past_the_limit() {
    let (node, mut client) = start().await;
    assert_eq!(admitted(&mut client, "alice", 6).await, 5);
    let refunded = call(&mut client, vec![item("alice", 2, true)]).await;
    assert!(
        refunded[0].allowed && refunded[0].error.is_none(),
        "{refunded:?}"
    );
    assert_eq!(refunded[0].rule, "", "a refund shows no rule");
    assert_eq!(admitted(&mut client, "alice", 5).await, 2);
    // Past what was spent: the whole limit back, no more.
    call(&mut client, vec![item("alice", 100, true)]).await;
    assert_eq!(admitted(&mut client, "alice", 10).await, 5);
    node.shutdown().await;
}

#[tokio::test]
async fn a_refund_beside_checks_in_one_batch_is_taken_in_order() {
    let (node, mut client) = start().await;
    assert_eq!(admitted(&mut client, "bob", 5).await, 5);
    let results = call(
        &mut client,
        vec![
            item("bob", 1, false),
            item("bob", 1, true),
            item("bob", 1, false),
        ],
    )
    .await;
    let allowed: Vec<bool> = results.iter().map(|r| r.allowed).collect();
    assert_eq!(allowed, [false, true, true]);
    assert_eq!(admitted(&mut client, "bob", 1).await, 0);
    node.shutdown().await;
}
