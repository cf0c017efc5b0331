//! Hot keys at the node's defaults on the in-memory network under a paused clock: leases, sharded counters and the local tier.
//!
//! Each test says which guard it covers: remove that guard and it fails.

mod common;

use std::time::Duration;

use common::*;
use proptest::prelude::*;
use weir_cluster::memory::MemoryNet;
use weir_cluster::wire;
use weir_core::{CheckRequest, NANOS_PER_SEC};
use weir_proto::weir::v1::op_result::Outcome;
use weir_proto::weir::v1::{DecideRequest, Lease};

const L: usize = 1_000;
/// A fixed window of an hour: the virtual clock starts on an hour, so no
/// test here crosses a window edge and L is the exact answer.
const RULES: &str = r#"
[[rule]]
name = "whale"
algorithm = "fixed_window"
limit = 1000
window = "1h"

[[rule]]
name = "big"
client = "big"
algorithm = "token_bucket"
limit = 1000000
window = "1h"

[[rule]]
name = "sharded"
client = "sharded"
algorithm = "fixed_window"
limit = 100
window = "1h"
hot = "shard"
shards = 4

[[rule]]
name = "tier"
client = "tier"
algorithm = "fixed_window"
limit = 90
window = "1h"
hot = "local"
"#;

/// Sends one check through each of `via` every `gap` of virtual time,
/// `rounds` times; returns the admissions per gateway.
async fn paced(via: &[&TestNode], key: &str, rounds: usize, gap: Duration) -> Vec<usize> {
    let mut admitted = vec![0; via.len()];
    for _ in 0..rounds {
        for (i, n) in via.iter().enumerate() {
            let v = n.check(key).await.expect("a verdict");
            admitted[i] += usize::from(v.allowed);
        }
        tokio::time::sleep(gap).await;
    }
    admitted
}

/// Guard: leases. A key hot at its owner is leased to the gateways sending
/// it, which then decide it without a call, and the cluster still admits
/// exactly L: never more (leased units count as spent at the owner), and
/// no less once the leases' unused units came back. Without leases every
/// check is a call.
#[tokio::test(start_paused = true)]
async fn a_hot_key_is_decided_from_leases_and_admits_exactly_its_limit() {
    let (_net, nodes) = paused_members(3, RULES, |_| {}).await;
    let key = key_owned_by(&nodes[0], "node-3", "whale");
    let gateways = [&nodes[0], &nodes[1]];
    // 500 checks a second from each gateway, for four seconds: twice L.
    let during = paced(&gateways, &key, 2_000, Duration::from_millis(2)).await;
    let total: usize = during.iter().sum();
    assert!(total <= L, "{total} admitted against {L}");
    // The unused part of the last leases comes back at the end of their term.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after: usize = paced(&gateways, &key, 200, Duration::from_millis(2))
        .await
        .iter()
        .sum();
    println!("admitted {during:?} then {after}");
    assert_eq!(total + after, L, "exactly L once the leases came back");
    let from_lease: u64 = gateways
        .iter()
        .map(|n| n.cluster.stats().lease_decisions)
        .sum();
    assert!(from_lease > 0, "the gateways decided from leases");
    assert!(nodes[2].cluster.stats().leases_granted > 0);
}

/// Guard: only a key's owner leases it. After a join, a gateway whose ring
/// is behind asks the key's old owner for its next lease. Leased from
/// what the old owner kept after its handoff (nothing spent), it was a
/// fresh budget; the joiner, which holds the count, leases it.
#[tokio::test(start_paused = true)]
async fn a_keys_old_owner_leases_none_of_it_after_a_join() {
    let (net, nodes) = paused_members(2, RULES, |_| {}).await;
    let key = taken_from_node_1_by_node_3("whale");
    let spent = paced(&[&nodes[1]], &key, 100, Duration::from_millis(2)).await;
    assert_eq!(spent, [100]);
    let joiner = TestNode::start_in(&net, "node-3", &[nodes[0].gossip()], RULES, defaults).await;
    wait_until("node-3 holds the key's count", || {
        joiner.engine.limiter().keys() == 1
    })
    .await;
    assert_eq!(
        lease_asked_of(&net, &nodes[0], &key).await,
        None,
        "the old owner"
    );
    assert!(
        lease_asked_of(&net, &joiner, &key).await.is_some(),
        "the owner leases it"
    );
    drop(net);
}

/// The next lease of `key` that node-2, playing a gateway by hand, asks of
/// `to`, reporting half a second of its checks decided from leases.
async fn lease_asked_of(net: &MemoryNet, to: &TestNode, key: &str) -> Option<Lease> {
    let op = wire::lease("whale", key, 250, 250);
    decided_by_hand(net, &to.cluster.identity(), op, "node-2")
        .await
        .0
        .lease
}

/// Guard: leases take the calls off a hot key. A whale far under its
/// limit, once its owner has seen it hot for a second, costs its gateways
/// at most one message per twenty checks (renewals and returns).
#[tokio::test(start_paused = true)]
async fn a_leased_whale_costs_under_a_message_per_twenty_checks() {
    let (_net, nodes) = paused_members(3, RULES, |_| {}).await;
    let owner = nodes[0].cluster.owner_of("big").unwrap().id;
    let gateways: Vec<&TestNode> = nodes.iter().filter(|n| n.id != owner).collect();
    let ops = |g: &[&TestNode]| -> u64 { g.iter().map(|n| n.cluster.stats().peer_ops).sum() };
    // One second to be seen hot, then three measured.
    paced(&gateways, "big", 500, Duration::from_millis(2)).await;
    let before = ops(&gateways);
    let admitted: usize = paced(&gateways, "big", 1_500, Duration::from_millis(2))
        .await
        .iter()
        .sum();
    let sent = ops(&gateways) - before;
    println!("{admitted} admitted, {sent} messages for {} checks", 3_000);
    assert_eq!(admitted, 3_000, "far under its limit: every check admitted");
    assert!(sent * 20 <= 3_000, "{sent} messages for 3000 checks");
}

/// Guard: a gateway's deny cache holds a denial of a leased key for a
/// lease term at most. One gateway spends the budget while another still
/// holds a lease and then falls quiet; the first is refused. The quiet
/// one's unused units come back at the end of its term, and the refused
/// gateway, whose cached denial has ended by then rather than at the
/// window's end, admits them: the cluster still admits exactly L.
#[tokio::test(start_paused = true)]
async fn units_a_quiet_gateway_gives_back_reach_a_gateway_that_was_refused() {
    let (_net, nodes) = paused_members(3, RULES, |_| {}).await;
    let key = key_owned_by(&nodes[0], "node-3", "returned");
    let (busy, quiet) = (&nodes[0], &nodes[1]);
    let both: usize = paced(&[busy, quiet], &key, 300, Duration::from_millis(2))
        .await
        .iter()
        .sum();
    assert!(
        quiet.cluster.stats().lease_decisions > 0,
        "node-2 held a lease"
    );
    let alone = paced(&[busy], &key, 1_000, Duration::from_millis(1)).await[0];
    let refused = busy.check(&key).await.expect("a verdict");
    assert!(!refused.allowed, "the budget is spent or leased out");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = paced(&[busy], &key, 200, Duration::from_millis(2)).await[0];
    println!("{both} by both, {alone} by one, then {after}");
    assert!(after > 0, "the returned units are admitted");
    assert_eq!(both + alone + after, L, "exactly L");
}

/// Guard: a lease dies with its gateway. A gateway that crashes with a
/// lease takes its unused units along: they stay counted at the owner, so
/// the survivors never admit more than L together with what the dead one
/// did.
#[tokio::test(start_paused = true)]
async fn a_crashed_gateways_lease_is_never_granted_twice() {
    let (_net, mut nodes) = paused_members(3, RULES, |_| {}).await;
    let key = key_owned_by(&nodes[0], "node-3", "crash");
    let both = [&nodes[0], &nodes[1]];
    let before: usize = paced(&both, &key, 600, Duration::from_millis(2))
        .await
        .iter()
        .sum();
    assert!(
        nodes[1].cluster.stats().lease_decisions > 0,
        "node-2 held a lease"
    );
    let dead = nodes.remove(1);
    dead.kill().await;
    let after: usize = paced(&[&nodes[0]], &key, 3_000, Duration::from_millis(2))
        .await
        .iter()
        .sum();
    println!("{before} before the crash, {after} after");
    assert!(
        before + after <= L,
        "{} admitted against {L}",
        before + after
    );
}

/// Guard: the shard valve. Sub-counters of L/k summing to L, each on the
/// owner of its own key: the cluster never admits more than L, and the
/// checks spread over several owners.
#[tokio::test(start_paused = true)]
async fn a_sharded_rule_never_admits_more_than_its_limit() {
    let (_net, nodes) = paused_members(3, RULES, |_| {}).await;
    let all: Vec<&TestNode> = nodes.iter().collect();
    let admitted: usize = paced(&all, "sharded", 100, Duration::from_millis(5))
        .await
        .iter()
        .sum();
    println!("sharded: {admitted} of 100 admitted over 300 checks");
    assert!(admitted <= 100);
    assert!(
        admitted >= 90,
        "4 shards of 25 with 300 checks fill all but a few"
    );
}

/// Guard: the local tier. Every gateway decides alone against L/N: none
/// makes a call for the rule, and each admits at most its share.
#[tokio::test(start_paused = true)]
async fn a_local_tier_rule_is_decided_by_each_gateway_against_its_share() {
    let (_net, nodes) = paused_members(3, RULES, |_| {}).await;
    let all: Vec<&TestNode> = nodes.iter().collect();
    let admitted = paced(&all, "tier", 60, Duration::from_millis(5)).await;
    assert_eq!(admitted, vec![30, 30, 30], "90 / 3 each");
    for n in &nodes {
        let s = n.cluster.stats();
        assert_eq!(s.peer_ops, 0, "{}: no call", n.id);
        assert_eq!(s.tier_decisions, 60);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    /// Guard: whatever the arrival pattern, and whichever gateway dies
    /// when, leases never let the cluster admit more than L.
    #[test]
    fn leases_never_let_the_cluster_exceed_its_limit(
        bursts in prop::collection::vec((0usize..2, 1usize..400, 0u64..20), 1..12),
        crash_after in prop::option::of(0usize..12),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        let total = rt.block_on(async {
            let (_net, mut nodes) = paused_members(3, RULES, |_| {}).await;
            let key = key_owned_by(&nodes[0], "node-3", "prop");
            let mut total = 0;
            let mut crashed = false;
            for (i, (gateway, checks, gap_ms)) in bursts.iter().enumerate() {
                if crash_after == Some(i) && !crashed {
                    nodes.remove(1).kill().await;
                    crashed = true;
                }
                let via = if crashed { &nodes[0] } else { &nodes[*gateway] };
                total += paced(&[via], &key, *checks, Duration::from_millis(*gap_ms)).await[0];
            }
            total
        });
        prop_assert!(total <= L, "{} admitted against {}", total, L);
    }
}

/// What the fixed window of an hour leaves of itself at `now` (unix ns):
/// the wait the algorithm gives a denial.
fn rest_of_the_hour(now: u64) -> Duration {
    let hour = 3_600 * NANOS_PER_SEC;
    Duration::from_nanos(hour - now % hour)
}

/// Guard: heat counts checks, and a denial keeps the algorithm's wait.
/// One check of cost 1,000 spends a 1,000-an-hour window; the next check's
/// denial says to wait for the rest of the hour. Counted in units, that one
/// check made the key hot, and its denial said 1 s.
#[tokio::test(start_paused = true)]
async fn a_costly_check_leaves_the_next_denial_its_whole_wait() {
    let (_net, nodes) = paused_members(2, RULES, |_| {}).await;
    let key = key_owned_by(&nodes[0], "node-2", "costly");
    let costly = CheckRequest {
        cost: 1_000,
        ..CheckRequest::new(&key, "GET /")
    };
    assert!(nodes[0].engine.check(&costly).await.unwrap().allowed);
    let denied = nodes[0].check(&key).await.unwrap();
    assert!(!denied.allowed);
    let wait = denied.binding().unwrap().decision.retry_after;
    let rest = rest_of_the_hour(nodes[1].engine.limiter().now());
    assert!(
        wait >= rest && wait <= rest + Duration::from_millis(50),
        "told {wait:?}, the window ends in {rest:?}"
    );
}

/// Guard: a denial of a hot leased key keeps the algorithm's wait. The key
/// is hot at its owner (a hundred checks in its second), then spent; the
/// owner's denial says to wait for the rest of the hour. Cut to a lease
/// term, it sent callers back within a second, and again and again, to a
/// window that was closed for the hour.
#[tokio::test(start_paused = true)]
async fn a_hot_keys_denial_says_the_whole_wait_the_algorithm_gives() {
    let (net, nodes) = paused_members(2, RULES, |_| {}).await;
    let key = key_owned_by(&nodes[0], "node-2", "hot");
    let owner = nodes[1].cluster.identity();
    let rules = nodes[1].engine.limiter().rules();
    let whale = rules.get("whale").unwrap().1.clone();
    let (_, gateway) = net.link();
    let decide = |ops| DecideRequest {
        ops,
        rules_version: 0,
        from_node: "node-1".into(),
    };
    let hot: Vec<_> = (0..100)
        .map(|_| wire::consume(&whale, &key, 1, false))
        .collect();
    let made_hot = gateway
        .decide(&owner, decide(hot), Duration::from_secs(1))
        .await
        .unwrap();
    let leased = made_hot.results.iter().any(|r| r.lease.is_some());
    assert!(leased, "hot at its owner, which leased it");
    // What is left once the hundred checks and any lease they drew are spent.
    let Some(Outcome::Decision(last)) = &made_hot.results[99].outcome else {
        panic!("a decision: {made_hot:?}");
    };
    let left = last.remaining - made_hot.results[99].lease.as_ref().map_or(0, |l| l.units);
    let spend = vec![
        wire::consume(&whale, &key, left, false),
        wire::consume(&whale, &key, 1, false),
    ];
    let answer = gateway
        .decide(&owner, decide(spend), Duration::from_secs(1))
        .await
        .unwrap();
    let Some(Outcome::Decision(d)) = &answer.results[1].outcome else {
        panic!("a decision: {answer:?}");
    };
    assert!(!d.allowed, "{d:?}");
    let rest = rest_of_the_hour(d.at);
    assert_eq!(Duration::from_nanos(d.retry_after_ns), rest);
}
