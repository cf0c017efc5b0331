//! The old owner of a joiner's keys as a gateway, while its handoff to the
//! joiner is on its way: whole members on the in-memory network under
//! tokio's paused clock, at the node's default settings.
//!
//! Each test says which guard it covers: remove that guard and it fails.

mod common;

use std::time::Duration;

use common::joining::*;
use common::*;
use weir_cluster::owner::peers::LATE_WINDOW;

/// Spent before the join, through both members.
const SPENT: usize = 12;
const FIVE_MS: Duration = Duration::from_millis(5);

/// Waits until node-1's ring holds node-3: its checks of the keys node-3
/// took go to node-3 from then on, or are decided by node-1 itself.
async fn node_1_routes_to_node_3(nodes: &[TestNode]) {
    wait_until("node-1's ring holds node-3", || {
        nodes[0].ring_ids().len() == 3
    })
    .await;
}

/// `gateway`'s check of `key` is admitted at once (no delivery, each 5
/// ms here, on the way), on the key's whole count: `spent` and this one.
async fn admitted_at_once(gateway: &TestNode, key: &str, spent: usize) {
    let started = tokio::time::Instant::now();
    let v = gateway.check(key).await.expect("a verdict");
    let took = started.elapsed();
    let stats = gateway.cluster.stats();
    assert!(v.allowed, "refused: {stats:?}");
    assert_eq!(took, Duration::ZERO, "decided where it came in");
    let remaining = v.applied[0].decision.remaining as usize;
    assert_eq!(remaining, LIMIT - spent - 1, "on the whole count");
}

/// Guard: a check reaching the old owner as a gateway, of a key its
/// handoff to the joiner still carries, is decided there on the count it
/// holds whole, as the joiner would have it asked; and what it spent
/// reaches the joiner with the rest. Sent to the joiner, the check came
/// back as the joiner's question, four deliveries of 5 ms here, past the
/// default 5 ms owner deadline, and was refused for now. Here each
/// handoff to the joiner is held 1.5 s.
#[tokio::test(start_paused = true)]
async fn the_old_owners_own_check_of_a_key_on_its_way_is_decided_there() {
    let (net, nodes, joiner, key) = joining_with_a_long_handoff(SPENT, FIVE_MS).await;
    node_1_routes_to_node_3(&nodes).await;
    assert_eq!(joiner.engine.limiter().keys(), 0, "the count is on its way");
    admitted_at_once(&nodes[0], &key, SPENT).await;
    assert_eq!(joiner.cluster.stats().asked_back, 0, "node-3 never saw it");
    wait_until("node-3 heard node-1's sweep is over", || {
        joiner.cluster.awaiting().is_empty()
    })
    .await;
    the_rest_is_admitted(&joiner, &key, SPENT + 1).await;
    drop(net);
}

/// Guard: the joiner says, answering each handoff call, that it still
/// asks the old owner, which goes on deciding the keys on their way
/// after the first answer. Here the handoff's first call has been
/// answered and the pass that follows it (what the old owner spent
/// meanwhile) is still on its way: the sweep has not landed.
#[tokio::test(start_paused = true)]
async fn the_old_owner_decides_them_while_the_joiner_says_it_asks() {
    let (net, nodes, joiner, key) = joining_with_a_long_handoff(SPENT, FIVE_MS).await;
    node_1_routes_to_node_3(&nodes).await;
    admitted_at_once(&nodes[0], &key, SPENT).await;
    wait_until("node-1's first handoff call was answered", || {
        nodes[0].cluster.stats().handoffs_sent >= 1
    })
    .await;
    assert_eq!(joiner.cluster.stats().handoffs_received, 1, "not landed");
    admitted_at_once(&nodes[0], &key, SPENT + 1).await;
    drop(net);
}

/// Guard: once the joiner says, answering a handoff call, that it no
/// longer asks the old owner (here it stopped: the old owner's answers to
/// its questions take longer than the late window), the old owner sends
/// the checks of the keys on their way to the joiner, which decides them
/// on what it holds, as it decides every other check of them. Decided by
/// the old owner meanwhile on its own count, each key had two counts, and
/// both admitted. Here the pass after the handoff's first call is still
/// on its way: the sweep has not landed.
#[tokio::test(start_paused = true)]
async fn the_old_owner_sends_them_to_the_joiner_once_it_says_it_asks_no_more() {
    let (net, nodes, joiner, key) = joining_with_a_long_handoff(SPENT, Duration::ZERO).await;
    node_1_routes_to_node_3(&nodes).await;
    net.slow_answers_from(nodes[0].host(), LATE_WINDOW * 2);
    // Asked of node-1, which decides it (and so has a pass to send after
    // the handoff) but whose answer comes too late: node-3 asks no more.
    joiner.check(&key).await.expect("a verdict");
    let awaiting = joiner.cluster.awaiting();
    assert!(
        !awaiting.contains(&"node-1".into()),
        "node-3 gave up asking"
    );
    wait_until("node-1's first handoff call was answered", || {
        nodes[0].cluster.stats().handoffs_sent >= 1
    })
    .await;
    assert_eq!(joiner.cluster.stats().handoffs_received, 1, "not landed");
    let other = taken_from_node_1_by_node_3("other");
    assert!(nodes[0].check(&other).await.expect("a verdict").allowed);
    assert!(
        joiner.engine.limiter().holds("per-client", &other),
        "decided by node-3"
    );
    assert!(!nodes[0].engine.limiter().holds("per-client", &other));
    drop(net);
}
