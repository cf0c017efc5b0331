//! The cluster secret: a node without it never becomes a member and its peer calls are refused.

mod common;

use common::*;
use tonic::metadata::MetadataValue;
use weir_cluster::net::auth::PEER_AUTH_HEADER;
use weir_proto::weir::v1::peer_client::PeerClient;
use weir_proto::weir::v1::{CounterOp, DecideRequest, OpKind, PullRulesRequest};

fn secret(s: &str) -> impl Fn(&mut weir_cluster::ClusterConfig) + '_ {
    move |c| c.secret = Some(s.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_the_secret_is_never_a_member_and_its_peer_calls_are_refused() {
    let nodes = cluster(3, RULES, secret("s3cret")).await;
    let seed = nodes[0].gossip();
    let no_secret = TestNode::start("intruder-a", &[seed], RULES, |c| {
        c.secret = None;
        c.insecure_open = true;
    })
    .await;
    let wrong = TestNode::start("intruder-b", &[seed], RULES, secret("guess")).await;

    // Their announces reach the seed and are dropped for a bad tag.
    wait_until("the seed drops both intruders' gossip", || {
        nodes[0].cluster.gossip_stats().bad_mac_dropped >= 4
    })
    .await;
    for n in &nodes {
        assert_eq!(n.ring_ids(), ["node-1", "node-2", "node-3"]);
    }
    assert_eq!(no_secret.ring_ids(), ["intruder-a"]);
    assert_eq!(wrong.ring_ids(), ["intruder-b"]);

    // Peer calls straight to a member's port: refused without the token,
    // with a token from the wrong secret, and accepted with the right one.
    let mut client = PeerClient::connect(format!("http://{}", nodes[1].grpc()))
        .await
        .unwrap();
    let decide = || DecideRequest {
        ops: vec![CounterOp {
            rule: "per-client".into(),
            key: "victim".into(),
            cost: 1,
            kind: OpKind::Consume as i32,
            ..Default::default()
        }],
        rules_version: 0,
        from_node: "intruder".into(),
    };
    let e = client.decide(decide()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    let e = client
        .pull_rules(PullRulesRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    let mut forged = tonic::Request::new(decide());
    forged
        .metadata_mut()
        .insert(PEER_AUTH_HEADER, MetadataValue::from_static("s3cret"));
    assert_eq!(
        client.decide(forged).await.unwrap_err().code(),
        tonic::Code::Unauthenticated,
        "the raw secret is not the token"
    );
    assert_eq!(nodes[1].cluster.stats().unauthenticated, 3);
    assert_eq!(nodes[1].engine.limiter().keys(), 0, "nothing was consumed");

    // The intruders' own gateways cannot forward into the cluster either:
    // they never learn its members, so they decide alone.
    assert_eq!(no_secret.cluster.stats().peer_calls, 0);

    // Members talk to each other fine.
    let key = key_owned_by(&nodes[0], "node-2", "auth");
    assert!(nodes[0].check(&key).await.unwrap().allowed);
    assert!(nodes[0].cluster.stats().peer_calls >= 1);
    assert_eq!(nodes[0].cluster.stats().peer_failures, 0);
}
