//! `Peer/Summary`: every member's own state for a dashboard, asked all at once, behind the cluster secret, with a silent member shown as unknown.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use weir_cluster::link::PeerFailure;
use weir_cluster::memory::MemoryNet;
use weir_cluster::summary::{ActivitySource, MemberSummary, Reply, MAX_SUMMARY_SECONDS};
use weir_proto::weir::v1::peer_client::PeerClient;
use weir_proto::weir::v1::{ActivitySecond, BreakerState, RuleActivity, SummaryRequest};

/// Reports one second of made-up activity and remembers what it was asked.
#[derive(Default)]
struct Recorded {
    asked: Mutex<Vec<u32>>,
}

impl ActivitySource for Recorded {
    fn recent(&self, seconds: u32) -> Vec<ActivitySecond> {
        self.asked.lock().unwrap().push(seconds);
        vec![ActivitySecond {
            unix_s: 1_767_225_600,
            rules: vec![RuleActivity {
                rule: "per-client".into(),
                allowed: 7,
                denied: 2,
                shadow_denied: 0,
            }],
            ..ActivitySecond::default()
        }]
    }
}

fn reply_of<'a>(all: &'a [MemberSummary], id: &str) -> &'a Reply {
    &all.iter()
        .find(|m| m.member.id == id)
        .unwrap_or_else(|| panic!("{id} missing"))
        .reply
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summaries_travel_over_grpc_only_with_the_cluster_secret() {
    let nodes = cluster(2, RULES, |c| c.secret = Some("s3cret".into())).await;
    let source = Arc::new(Recorded::default());
    nodes[1].cluster.report_activity(source.clone());

    let all = nodes[0].cluster.summaries(60, Duration::from_secs(1)).await;
    assert_eq!(all.len(), 2);
    let Reply::Answered(me) = reply_of(&all, "node-1") else {
        panic!("this node answers for itself");
    };
    assert_eq!(me.node, "node-1");
    assert!(me.activity.is_empty(), "node-1 reports no activity source");
    let Reply::Answered(peer) = reply_of(&all, "node-2") else {
        panic!("node-2 answers over the authenticated peer service");
    };
    assert_eq!(peer.strategy, "owner");
    assert_eq!(peer.activity[0].rules[0].allowed, 7);
    assert_eq!(*source.asked.lock().unwrap(), [60]);
    // An owner-strategy node keeps its breakers and what its copies decided.
    assert_eq!(peer.replica_decisions, Some(0));
    let breakers = peer.breakers.as_ref().expect("an owner node's breakers");
    assert_eq!(breakers.owners.len(), 1);
    assert_eq!(breakers.owners[0].owner, "node-1");
    assert_eq!(breakers.owners[0].state, BreakerState::Closed as i32);
    // And its hot keys: none yet, since no check reached it.
    let hot = peer.hot_keys.as_ref().expect("an owner node's hot keys");
    assert!(hot.keys.is_empty(), "no check, no hot key");

    let mut stranger = PeerClient::connect(format!("http://{}", nodes[1].grpc()))
        .await
        .unwrap();
    let refused = stranger
        .summary(SummaryRequest { seconds: 60 })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);
    assert_eq!(nodes[1].cluster.stats().unauthenticated, 1);
}

#[tokio::test(start_paused = true)]
async fn a_member_that_does_not_answer_in_time_is_unknown_then_down() {
    let net = MemoryNet::new();
    let nodes = memory_cluster(&net, 3, RULES, |_| {}).await;
    let source = Arc::new(Recorded::default());
    nodes[1].cluster.report_activity(source.clone());
    nodes[2].partition_from(&[&nodes[0], &nodes[1]]);

    let deadline = Duration::from_millis(400);
    let started = tokio::time::Instant::now();
    let all = nodes[0].cluster.summaries(u32::MAX, deadline).await;
    assert!(
        started.elapsed() <= deadline + Duration::from_millis(1),
        "one deadline for all"
    );
    assert!(matches!(reply_of(&all, "node-2"), Reply::Answered(_)));
    assert_eq!(
        *reply_of(&all, "node-3"),
        Reply::NoAnswer(PeerFailure::Timeout(deadline))
    );
    assert_eq!(
        *source.asked.lock().unwrap(),
        [MAX_SUMMARY_SECONDS],
        "a node sends at most what it keeps"
    );

    wait_until_async("node-1 has node-3 down, and does not ask it", || async {
        let all = nodes[0].cluster.summaries(10, deadline).await;
        *reply_of(&all, "node-3") == Reply::Down
    })
    .await;
}
