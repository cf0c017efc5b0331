//! Copies of counters that move with a ring change: a member copies every counter it owns to its new holder, many more than one peer message holds, a round at a time, and copies the counters handed to it too, whose sender kept none; under tokio's paused clock at the defaults.

mod common;

use std::time::Duration;

use common::*;

/// Counters node-1 holds before node-2 joins it.
const KEYS: usize = 200_000;

/// Guard: the copies a join calls for go in rounds of a bounded number of
/// counters, each call under the peer message ceiling, until none is
/// pending. Taken whole, node-1's half of the counters made one call over
/// the ceiling (here scaled down with the counters: a node of a million
/// counters kept half a million at a join, tens of megabytes against
/// 16 MiB), refused at every retry, and no counter was copied again.
#[tokio::test(start_paused = true)]
async fn a_join_over_more_counters_than_one_message_holds_copies_them_all() {
    let (net, mut nodes) = paused_members(1, ROOMY_RULES, |_| {}).await;
    net.set_message_ceiling(2 << 20);
    let first = &nodes[0];
    let limiter = first.engine.limiter();
    for i in 0..KEYS {
        assert!(
            limiter
                .consume("r", &format!("k-{i}"), 1, limiter.now())
                .unwrap()
                .allowed
        );
    }
    let joiner = TestNode::start_in(&net, "node-2", &[first.gossip()], ROOMY_RULES, defaults).await;
    nodes.push(joiner);
    wait_until("node-1 has handed node-2 its keys", || {
        nodes[1].engine.limiter().keys() > 0 && nodes[0].engine.limiter().keys() < KEYS
    })
    .await;
    wait_until_showing(
        "node-1's counters are all copied to node-2",
        || {
            let stats = nodes[0].cluster.stats();
            let held = nodes[0].engine.limiter().keys() as u64;
            stats.replication_pending == 0 && stats.replicated >= held
        },
        || {
            let stats = nodes[0].cluster.stats();
            format!(
                ": {} pending, {} copied, {} held, {} at node-2",
                stats.replication_pending,
                stats.replicated,
                nodes[0].engine.limiter().keys(),
                nodes[1].engine.limiter().keys()
            )
        },
    )
    .await;
    let largest = net.largest_replicate_call();
    assert!(
        largest > 0 && largest <= 4096,
        "{largest} counters in one call"
    );
    drop(net);
}

/// Spent of each key before the join.
const SPENT: u64 = 7;

/// Guard: the counters a joiner took over by its holder's handoff are
/// copied back to that holder (the key's replica holder is mostly its old
/// owner), so the joiner's crash right after the join loses none of them:
/// the holder promotes its copy. The old owner keeps no copy of what it
/// handed over, and the joiner marked for copying only what changed
/// later, so the crash started every key it had not seen a check for
/// over, with its whole limit.
#[tokio::test(start_paused = true)]
async fn counters_a_joiner_took_over_outlive_its_crash() {
    let (net, mut nodes) = paused_members(1, ROOMY_RULES, |_| {}).await;
    let limiter = nodes[0].engine.limiter().clone();
    let keys: Vec<String> = (0..200).map(|i| format!("k-{i}")).collect();
    for key in &keys {
        for _ in 0..SPENT {
            assert!(limiter.consume("r", key, 1, limiter.now()).unwrap().allowed);
        }
    }
    let joiner =
        TestNode::start_in(&net, "node-2", &[nodes[0].gossip()], ROOMY_RULES, defaults).await;
    // The handoff lands after the joiner's own ring took node-1 in, as
    // it does between processes: the joiner's ring change marked what it
    // held then (nothing).
    net.slow_handoffs_to(joiner.host(), Duration::from_millis(500));
    nodes.push(joiner);
    let (first, joiner) = (&nodes[0], &nodes[1]);
    wait_until("node-1 holds the joiner on its ring", || {
        first.ring_ids().len() == 2
    })
    .await;
    let taken: Vec<&String> = keys
        .iter()
        .filter(|k| first.cluster.owner_of(k).is_some_and(|o| o.id == "node-2"))
        .collect();
    assert!(!taken.is_empty(), "the joiner takes some of the keys");
    wait_until("the joiner holds its keys and has no copy pending", || {
        let stats = joiner.cluster.stats();
        joiner.engine.limiter().keys() == taken.len() && stats.replication_pending == 0
    })
    .await;
    let joiner = nodes.pop().unwrap();
    joiner.kill().await;
    let first = &nodes[0];
    wait_until("node-1's ring drops the joiner", || {
        first.ring_ids().len() == 1
    })
    .await;
    let limit = 1000;
    for key in taken {
        assert_eq!(
            first.engine.limiter().remaining("r", key),
            Some(limit - SPENT),
            "{key}: its count outlived the joiner"
        );
    }
    drop(net);
}

/// Guard: a join's handoff starts before the old owner marks what it
/// keeps for copying. The joiner's keys' checks wait for the handoff, and
/// their gateways give up at the owner deadline; marked first, a million
/// counters held put 0.6 s of reading every key (2-vCPU host) before the
/// first handoff call. Here the handoff is held at the joiner, and while
/// it is, node-1 has copied nothing: marked first, its own counters were
/// copied to the joiner meanwhile.
#[tokio::test(start_paused = true)]
async fn a_joins_handoff_goes_out_before_the_old_owner_marks_what_it_keeps() {
    let (net, mut nodes) = paused_members(1, ROOMY_RULES, |_| {}).await;
    let limiter = nodes[0].engine.limiter().clone();
    for i in 0..2_000 {
        assert!(
            limiter
                .consume("r", &format!("k-{i}"), 1, limiter.now())
                .unwrap()
                .allowed
        );
    }
    let joiner =
        TestNode::start_in(&net, "node-2", &[nodes[0].gossip()], ROOMY_RULES, defaults).await;
    let hold = Duration::from_millis(1500);
    net.slow_handoffs_to(joiner.host(), hold);
    nodes.push(joiner);
    let (first, joiner) = (&nodes[0], &nodes[1]);
    wait_until("node-1 holds the joiner on its ring", || {
        first.ring_ids().len() == 2
    })
    .await;
    // Not a wait for something to happen: the window, inside the hold, in
    // which node-1 must copy nothing.
    tokio::time::sleep(hold / 2).await;
    assert_eq!(
        joiner.engine.limiter().keys(),
        0,
        "the handoff is still held"
    );
    assert_eq!(
        first.cluster.stats().replicated,
        0,
        "node-1 copied counters before its handoff went out"
    );
    wait_until(
        "node-1 copies what it kept once its handoff is done",
        || {
            let held = first.engine.limiter().keys() as u64;
            held > 0 && first.cluster.stats().replicated >= held
        },
    )
    .await;
    drop(net);
}
