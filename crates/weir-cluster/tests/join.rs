//! A member joining while peers still route by the ring before it, and ops for keys a member's ring gives another, deterministically: whole members on the in-memory network under tokio's paused clock, at the node's default settings.
//!
//! Each test says which guard it covers: remove that guard and it fails.

mod common;

use std::time::Duration;

use common::*;
use weir_cluster::memory::MemoryNet;
use weir_cluster::wire::{self, Answer};
use weir_cluster::ClusterConfig;
use weir_proto::weir::v1::{CounterOp, OpResult};

/// Spent before the join, through both members.
const SPENT: usize = 12;

/// Two members with [`SPENT`] of the key spent, then node-3 joining
/// through node-1, each handoff to it `held` on its way; every member at
/// the defaults, then `tweak`.
async fn joining(
    held: Duration,
    tweak: fn(&mut ClusterConfig),
) -> (MemoryNet, Vec<TestNode>, TestNode, String) {
    let (net, nodes) = paused_members(2, RULES, tweak).await;
    let key = taken_from_node_1_by_node_3("taken");
    let both: Vec<&TestNode> = nodes.iter().collect();
    assert_eq!(admitted_round_robin(&both, &key, SPENT).await, SPENT);
    let joiner = TestNode::start_in(&net, "node-3", &[nodes[0].gossip()], RULES, |c| {
        defaults(c);
        tweak(c);
    })
    .await;
    net.slow_handoffs_to(joiner.host(), held);
    (net, nodes, joiner, key)
}

/// `op` for node-1, sent by a gateway played by hand as node-2, whose ring
/// lacks node-3: node-1's answer.
async fn sent_to_node_1(net: &MemoryNet, nodes: &[TestNode], op: CounterOp) -> OpResult {
    let to = nodes[0].cluster.identity();
    decided_by_hand(net, &to, op, "node-2").await.0
}

/// When the check reaches the old owner.
struct Sent {
    /// How long after the old owner's ring holds the joiner (each handoff
    /// to the joiner is held this long and more on its way).
    after: Duration,
    /// Whether the key's count is with the joiner by then.
    landed: bool,
}

/// A check of `key` sent to node-1 by node-2 while node-2's ring lacks
/// node-3, as `sent` says: decided on the key's whole count, then the
/// rest of the window through node-3 alone, once node-3 holds the count.
/// Exactly the limit.
async fn a_check_from_behind_the_join(sent: Sent, tweak: fn(&mut ClusterConfig)) {
    let held = sent.after * 4;
    let (net, nodes, joiner, key) = joining(held, tweak).await;
    wait_until("node-1's ring holds node-3", || {
        nodes[0].ring_ids().len() == 3
    })
    .await;
    tokio::time::sleep(sent.after).await;
    let landed = joiner.engine.limiter().keys() == 1;
    assert_eq!(landed, sent.landed, "whether the count had landed");
    let rule = per_client(&nodes[0]);
    let op = wire::consume(&rule, &key, 1, false);
    let (answer, _) = tokio::join!(
        sent_to_node_1(&net, &nodes, op),
        wait_until("node-3 holds the key's count", || {
            joiner.engine.limiter().keys() == 1
        })
    );
    match wire::answer(answer, &rule, 1) {
        Answer::Decided(d) => {
            assert!(d.allowed, "{d:?}");
            assert_eq!(
                d.remaining as usize,
                LIMIT - SPENT - 1,
                "on the whole count"
            );
        }
        other => panic!("decided: {other:?}"),
    }
    let after = admitted_round_robin(&[&joiner], &key, LIMIT).await;
    assert_eq!(SPENT + 1 + after, LIMIT, "{after} admitted after it");
    drop(net);
}

/// Guard: a check a peer still sends to the key's old owner, after its
/// handoff to the joiner, goes on to the joiner. Decided on what the old
/// owner kept (nothing: the count had left), it was admitted as the first
/// of a fresh window, and the window read one over its limit. Without
/// copies, so that no copy from the joiner sends it on instead (at the
/// defaults that covers the check once the first copy has landed).
#[tokio::test(start_paused = true)]
async fn a_check_reaching_the_old_owner_after_its_handoff_goes_to_the_joiner() {
    let sent = Sent {
        after: Duration::ZERO,
        landed: true,
    };
    a_check_from_behind_the_join(sent, |c| c.replicas = 1).await;
}

/// Guard: a check that reaches the old owner while its handoff is on the
/// way waits for it, then goes on to the joiner. Decided there on the count
/// it still held, its admission reached the joiner only with the next
/// sweep, and the joiner admitted one too many meanwhile; sent on at once,
/// the joiner decided it before it held the count.
#[tokio::test(start_paused = true)]
async fn a_check_reaching_the_old_owner_during_its_handoff_waits_for_it() {
    let sent = Sent {
        after: Duration::from_millis(50),
        landed: false,
    };
    a_check_from_behind_the_join(sent, |_| {}).await;
}

/// Guard: a check for a key whose handoff to the joiner failed is decided
/// on the count that stayed with the old owner. Sent on, the joiner
/// decided it on nothing.
#[tokio::test(start_paused = true)]
async fn a_check_for_a_key_whose_handoff_failed_is_decided_where_its_count_stayed() {
    let (net, nodes, joiner, key) = joining(Duration::ZERO, |_| {}).await;
    net.refuse_handoffs_to(joiner.host());
    wait_until("node-1's ring holds node-3", || {
        nodes[0].ring_ids().len() == 3
    })
    .await;
    wait_until("node-1's handoff failed", || {
        nodes[0].cluster.stats().handoffs_failed > 0
    })
    .await;
    let rule = per_client(&nodes[0]);
    let op = wire::consume(&rule, &key, 1, false);
    match wire::answer(sent_to_node_1(&net, &nodes, op).await, &rule, 1) {
        Answer::Decided(d) => assert_eq!(d.remaining as usize, LIMIT - SPENT - 1, "{d:?}"),
        other => panic!("decided: {other:?}"),
    }
    assert_eq!(joiner.engine.limiter().keys(), 0, "nothing was sent on");
    drop(net);
}

/// Guard: a refund that reaches the old owner after its handoff goes to
/// the joiner, which holds the admission it gives back. Applied at the
/// old owner, which holds nothing of the key by then, it was lost, and
/// the window admitted one less than its limit. Without copies, as above.
#[tokio::test(start_paused = true)]
async fn a_refund_reaching_the_old_owner_after_its_handoff_goes_to_the_joiner() {
    let (net, nodes, joiner, key) = joining(Duration::ZERO, |c| c.replicas = 1).await;
    wait_until("node-3 holds the key's count", || {
        joiner.engine.limiter().keys() == 1
    })
    .await;
    let rule = per_client(&nodes[0]);
    let op = wire::consume(&rule, &key, 1, false);
    let admitted = match wire::answer(sent_to_node_1(&net, &nodes, op).await, &rule, 1) {
        Answer::Decided(d) if d.allowed => d,
        other => panic!("admitted: {other:?}"),
    };
    let refund = wire::refund(&rule.name, &key, 1, admitted.at);
    sent_to_node_1(&net, &nodes, refund).await;
    wait_until("node-3 took the refund", || {
        joiner.engine.limiter().remaining(&rule.name, &key) == Some((LIMIT - SPENT) as u64)
    })
    .await;
    assert_eq!(
        admitted_round_robin(&[&joiner], &key, LIMIT).await,
        LIMIT - SPENT
    );
    drop(net);
}

/// A charge of `cost` on `key` as a gateway sends it.
fn charge(nodes: &[TestNode], key: &str, cost: usize) -> CounterOp {
    wire::charge(&per_client(&nodes[0]).name, key, cost as u64)
}

/// Whether node-1 answered that it applied `charge`, sent to it by a
/// gateway played by hand as node-2.
async fn charged_at_node_1(net: &MemoryNet, nodes: &[TestNode], charge: CounterOp) -> bool {
    wire::answer_charge(sent_to_node_1(net, nodes, charge).await).is_some()
}

/// Guard: a charge (what a gateway admitted without the owner) that
/// reaches the old owner after its handoff goes to the joiner, and the
/// joiner has counted it by the time the charge is answered. Applied at
/// the old owner, it counted nowhere: the window admitted `COST` over its
/// limit. Without copies, as above.
#[tokio::test(start_paused = true)]
async fn a_charge_reaching_the_old_owner_after_its_handoff_goes_to_the_joiner() {
    const COST: usize = 3;
    let (net, nodes, joiner, key) = joining(Duration::ZERO, |c| c.replicas = 1).await;
    wait_until("node-3 holds the key's count", || {
        joiner.engine.limiter().keys() == 1
    })
    .await;
    let op = charge(&nodes, &key, COST);
    assert!(charged_at_node_1(&net, &nodes, op).await);
    let rule = per_client(&nodes[0]);
    assert_eq!(
        joiner.engine.limiter().remaining(&rule.name, &key),
        Some((LIMIT - SPENT - COST) as u64),
        "counted at the joiner when answered"
    );
    assert_eq!(
        admitted_round_robin(&[&joiner], &key, LIMIT).await,
        LIMIT - SPENT - COST
    );
    drop(net);
}

/// Guard: a charge decided at a member for a key its ring gives another
/// (here one sent on to it already, by a member whose ring disagreed) is
/// swept to the key's owner with the next sweep, as a stray check is.
/// Left where it was decided, the owner never counted it.
#[tokio::test(start_paused = true)]
async fn a_charge_decided_for_a_key_another_member_owns_reaches_it_with_the_next_sweep() {
    const COST: usize = 4;
    let (net, nodes) = paused_members(2, RULES, |_| {}).await;
    let key = key_owned_by(&nodes[0], "node-2", "theirs");
    let sent_on = CounterOp {
        sent_on: true,
        ..charge(&nodes, &key, COST)
    };
    assert!(charged_at_node_1(&net, &nodes, sent_on).await);
    let rule = per_client(&nodes[0]);
    wait_until("node-2 counted the charge", || {
        nodes[1].engine.limiter().remaining(&rule.name, &key) == Some((LIMIT - COST) as u64)
    })
    .await;
    let both: Vec<&TestNode> = nodes.iter().collect();
    assert_eq!(admitted_round_robin(&both, &key, LIMIT).await, LIMIT - COST);
    drop(net);
}
