//! A member joining two others while a handoff to it takes long, for the
//! tests of what the old owner decides meanwhile.

use std::time::Duration;

use weir_cluster::memory::MemoryNet;

use super::*;

/// Two members with `spent` of a key spent, then node-3 joining through
/// node-1, each handoff to it held 1.5 s (more than the late window) and
/// every delivery taking `latency`: returns once the rings of node-3 and
/// node-2 hold all three.
pub async fn joining_with_a_long_handoff(
    spent: usize,
    latency: Duration,
) -> (MemoryNet, Vec<TestNode>, TestNode, String) {
    let (net, nodes) = paused_members(2, RULES, |_| {}).await;
    let key = taken_from_node_1_by_node_3("held");
    let both: Vec<&TestNode> = nodes.iter().collect();
    assert_eq!(admitted_round_robin(&both, &key, spent).await, spent);
    let joiner = TestNode::start_in(&net, "node-3", &[nodes[0].gossip()], RULES, defaults).await;
    net.slow_handoffs_to(joiner.host(), Duration::from_millis(1500));
    net.set_latency(latency);
    wait_until("node-3's and node-2's rings hold all three", || {
        joiner.ring_ids().len() == 3 && nodes[1].ring_ids().len() == 3
    })
    .await;
    (net, nodes, joiner, key)
}

/// `joiner` admits the rest of the key's limit, `spent` of it spent.
pub async fn the_rest_is_admitted(joiner: &TestNode, key: &str, spent: usize) {
    let admitted = admitted_round_robin(&[joiner], key, 2 * LIMIT).await;
    let stats = joiner.cluster.stats();
    assert_eq!(
        spent + admitted,
        LIMIT,
        "{admitted} admitted after {spent}: {stats:?}"
    );
}
