//! Counters move with their keys: a graceful leave and a join never hand out a fresh budget.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use weir_cluster::ClusterConfig;
use weir_core::{CheckRequest, Rule};

/// Starts node-3 (with `tweak`), joining through node-1; returns once
/// every ring holds it.
async fn join_node_3(nodes: &[TestNode], tweak: fn(&mut ClusterConfig)) -> TestNode {
    let joiner = TestNode::start("node-3", &[nodes[0].gossip()], RULES, tweak).await;
    every_ring_holds(nodes, joiner).await
}

/// `joiner`, once every ring of `nodes` and its own holds it.
async fn every_ring_holds(nodes: &[TestNode], joiner: TestNode) -> TestNode {
    wait_until("every ring holds node-3", || {
        nodes
            .iter()
            .chain([&joiner])
            .all(|n| n.ring_ids().len() == 3)
    })
    .await;
    joiner
}

/// An Envoy override of 10 an hour, as a request carries it.
fn carried() -> Arc<Rule> {
    Arc::new(Rule::carried("override:10-per-hour", 10, Duration::from_secs(3600)).unwrap())
}

/// Checks of `key` against the carried limit, round robin over `nodes`;
/// returns how many were admitted.
async fn carried_round_robin(nodes: &[&TestNode], key: &str, n: usize) -> usize {
    let rule = carried();
    let mut admitted = 0;
    for i in 0..n {
        let req = CheckRequest::new(key, "GET /").carrying(rule.clone());
        let v = nodes[i % nodes.len()].engine.check(&req).await.unwrap();
        admitted += usize::from(v.allowed);
    }
    admitted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_leave_hands_counters_over_so_the_window_total_stays_the_limit() {
    let mut nodes = cluster(3, RULES, |_| {}).await;
    let key = key_owned_by(&nodes[0], "node-3", "leave");
    let all: Vec<&TestNode> = nodes.iter().collect();
    assert_eq!(admitted_round_robin(&all, &key, 15).await, 15);

    let leaving = nodes.pop().unwrap();
    let before = nodes[0].cluster.stats().keys_moved_in + nodes[1].cluster.stats().keys_moved_in;
    leaving.leave().await;
    let survivors: Vec<&TestNode> = nodes.iter().collect();
    // The leave waited until no peer listed it: the rings are already updated.
    for n in &survivors {
        assert_eq!(n.ring_ids(), ["node-1", "node-2"]);
        assert!(!n.cluster.fallback_status().active);
    }
    let moved_in = nodes[0].cluster.stats().keys_moved_in + nodes[1].cluster.stats().keys_moved_in;
    assert!(
        moved_in > before,
        "the leaving node handed its counters over"
    );

    let admitted = admitted_round_robin(&survivors, &key, 3 * LIMIT).await;
    // The survivors' figures say which path a wrong count came by (stand-ins,
    // strays, late refunds), should this ever fail.
    let stats: Vec<_> = survivors.iter().map(|n| n.cluster.stats()).collect();
    assert_eq!(
        admitted,
        LIMIT - 15,
        "15 + {admitted} in the window, not 15 + a fresh {LIMIT}; survivors: {stats:?}"
    );
}

/// With the harness's 1 s owner deadline no answer is late, so the
/// window is exact at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_racing_a_graceful_leave_are_neither_lost_nor_double_granted() {
    race_a_graceful_leave(|_| {}, Settled::AtOnce).await;
}

/// The same race at every setting's default: a 5 ms owner deadline, so a
/// busy machine's owner answers some checks late (refused at the gateway,
/// refunded at the owner), and LAN gossip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_racing_a_graceful_leave_at_the_defaults_are_neither_lost_nor_double_granted() {
    race_a_graceful_leave(defaults, Settled::OnceRefundsLand).await;
}

/// Two clients, each checking `key` `LIMIT` times through `nodes[0]` and
/// `nodes[1]`, `pace` apart (none: yielding in between), adding what is
/// admitted to `admitted`.
fn two_clients(
    nodes: &Arc<Vec<TestNode>>,
    key: &str,
    admitted: &Arc<AtomicUsize>,
    pace: Duration,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..2)
        .map(|i| {
            let (nodes, admitted, key) = (nodes.clone(), admitted.clone(), key.to_string());
            tokio::spawn(async move {
                for _ in 0..LIMIT {
                    let v = nodes[i].check(&key).await.expect("a verdict");
                    admitted.fetch_add(usize::from(v.allowed), Ordering::Relaxed);
                    if pace.is_zero() {
                        tokio::task::yield_now().await;
                    } else {
                        tokio::time::sleep(pace).await;
                    }
                }
            })
        })
        .collect()
}

/// When the window must read exactly its limit.
enum Settled {
    AtOnce,
    /// A check refused because its owner answered late is refunded at the
    /// owner; until the refund lands the window is short by it.
    OnceRefundsLand,
}

/// Two clients check one key through the survivors while its owner leaves;
/// then the survivors check it until the window is spent. The window
/// admits its limit and never more.
async fn race_a_graceful_leave(tweak: fn(&mut ClusterConfig), settled: Settled) {
    let mut nodes = cluster(3, RULES, tweak).await;
    let key = key_owned_by(&nodes[0], "node-3", "race");
    let leaving = nodes.pop().unwrap();
    let nodes = Arc::new(nodes);
    let admitted = Arc::new(AtomicUsize::new(0));
    // Two clients keep checking through the survivors while node-3 leaves.
    let clients = two_clients(&nodes, &key, &admitted, Duration::ZERO);
    leaving.leave().await;
    for c in clients {
        c.await.unwrap();
    }
    let survivors: Vec<&TestNode> = nodes.iter().collect();
    let after = admitted_round_robin(&survivors, &key, LIMIT).await;
    let mut total = admitted.load(Ordering::Relaxed) + after;
    // As in the test above: the survivors' figures say which path a wrong
    // count came by (substitutes, stand-ins, strays, late answers).
    let stats = || -> Vec<_> { survivors.iter().map(|n| n.cluster.stats()).collect() };
    assert!(total <= LIMIT, "{total} admitted; survivors: {:?}", stats());
    if let Settled::OnceRefundsLand = settled {
        // Polled, a check every 10 ms, until the refunds have made room
        // for the rest of the limit.
        let started = Instant::now();
        for turn in 0.. {
            if total == LIMIT {
                break;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "{total} admitted after {DEADLINE:?}; survivors: {:?}",
                stats()
            );
            let v = survivors[turn % survivors.len()].check(&key).await;
            if v.expect("a verdict").allowed {
                total += 1;
            } else {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    let more = admitted_round_robin(&survivors, &key, survivors.len()).await;
    assert_eq!(
        (total, more),
        (LIMIT, 0),
        "the window admits exactly its limit across the leave; survivors: {:?}",
        stats()
    );
}

// Checks racing a join, at every default and through every member, are
// the simulator's: `weir-sim dst --faults join` runs thousands of seeded
// joins under two to four clients and scores every check
// (sim/tests/dst.rs), where a race test on sockets caught the rare
// interleaving only by luck.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_node_receives_the_counters_of_the_keys_it_now_owns() {
    let nodes = cluster(2, RULES, |_| {}).await;
    let key = taken_from_node_1_by_node_3("join");
    let pair: Vec<&TestNode> = nodes.iter().collect();
    assert_eq!(admitted_round_robin(&pair, &key, 12).await, 12);

    let joiner = join_node_3(&nodes, |_| {}).await;
    let all: Vec<&TestNode> = nodes.iter().chain([&joiner]).collect();
    wait_until("the counter reaches node-3", || {
        joiner.engine.limiter().keys() == 1
    })
    .await;

    let admitted = admitted_round_robin(&all, &key, 3 * LIMIT).await;
    assert_eq!(admitted, LIMIT - 12);
    assert!(joiner.cluster.stats().keys_moved_in >= 1);
    // The sender counts what it handed over: at least the key and rule names.
    let sent: u64 = nodes.iter().map(|n| n.cluster.stats().handoff_bytes).sum();
    assert!(
        sent >= (key.len() + "per-client".len()) as u64,
        "{sent} bytes handed over"
    );
}

/// Guard: a leave hands the carried limits' counters over with the rule
/// set's. Without it a rolling restart gives every override a fresh budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_leave_hands_carried_limits_over_too() {
    let mut nodes = cluster(3, RULES, |_| {}).await;
    let key = key_owned_by(&nodes[0], "node-3", "override");
    let all: Vec<&TestNode> = nodes.iter().collect();
    assert_eq!(carried_round_robin(&all, &key, 6).await, 6);
    assert_eq!(
        nodes[2].engine.limiter().adhoc_keys(),
        1,
        "the owner holds it"
    );

    let leaving = nodes.pop().unwrap();
    leaving.leave().await;
    let survivors: Vec<&TestNode> = nodes.iter().collect();
    assert_eq!(
        carried_round_robin(&survivors, &key, 20).await,
        4,
        "6 + 4 in the window, not 6 + a fresh 10"
    );
}

/// The other half of a rolling restart: a node that joins receives the
/// carried limits' counters of the keys it now owns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_node_receives_the_carried_limits_of_the_keys_it_now_owns() {
    let nodes = cluster(2, RULES, |_| {}).await;
    let key = taken_from_node_1_by_node_3("join-override");
    let pair: Vec<&TestNode> = nodes.iter().collect();
    assert_eq!(carried_round_robin(&pair, &key, 7).await, 7);

    let joiner = join_node_3(&nodes, |_| {}).await;
    let all: Vec<&TestNode> = nodes.iter().chain([&joiner]).collect();
    wait_until("the carried counter reaches node-3", || {
        joiner.engine.limiter().adhoc_keys() == 1
    })
    .await;
    assert_eq!(carried_round_robin(&all, &key, 20).await, 3);
}

/// Counters the leaving member holds in the leave tests: node-2's share
/// fills several handoff calls (about a megabyte each).
const LEAVING_KEYS: usize = 250_000;

/// Two members with one copy per counter (no copy stands in for what a
/// leave does not hand over), tweaked by `tweak`; the second, holding
/// `keys` counters, leaves while each handoff to the first takes `hold`.
/// Returns the counters it held, counted lost, and delivered.
async fn a_leave_with_slow_handoffs(
    keys: usize,
    hold: Duration,
    tweak: fn(&mut ClusterConfig),
) -> (usize, usize, usize) {
    let (net, mut nodes) = paused_members(2, RULES, |c| {
        c.replicas = 1;
        tweak(c);
    })
    .await;
    let leaving = nodes.pop().unwrap();
    let stays = &nodes[0];
    let limiter = leaving.engine.limiter();
    for i in 0..keys {
        let key = format!("k-{i}");
        limiter
            .consume("per-client", &key, 1, limiter.now())
            .unwrap();
    }
    let held = limiter.keys();
    net.slow_handoffs_to(stays.host(), hold);
    let cluster = leaving.cluster.clone();
    leaving.leave().await;
    let lost = cluster.stats().keys_lost as usize;
    let delivered = stays.engine.limiter().keys();
    drop(net);
    (held, lost, delivered)
}

/// Guard: a leave that runs out of time part way through its handover
/// counts as lost only the counters its successor did not get: each
/// handoff call waits no later than the leave's bound, and none starts
/// after it. Cut off whole at the bound, a leave over more counters than
/// the bound hands over (half a million in three seconds on the 2-vCPU
/// host) counted every one of them lost, those delivered too. Here the
/// bound is 3 s and each handoff takes 1.2 s of it (under a handoff
/// call's own deadline, so every call that ends is delivered).
#[tokio::test(start_paused = true)]
async fn a_leave_cut_short_counts_lost_only_what_it_did_not_deliver() {
    let three_seconds = |c: &mut ClusterConfig| c.leave_timeout = Duration::from_secs(3);
    let (held, lost, delivered) =
        a_leave_with_slow_handoffs(LEAVING_KEYS, Duration::from_millis(1200), three_seconds).await;
    assert!(
        lost > 0 && delivered > 0,
        "{lost} lost, {delivered} delivered"
    );
    assert_eq!(lost + delivered, held, "every counter lost or delivered");
}

/// Guard: at the default bound (`--leave-timeout`, 10 s) a leave whose
/// handover takes several seconds delivers every counter. Under the
/// earlier 3 s bound, a leave of half a million counters on the 2-vCPU
/// host (3.3 s) lost 14,259 of them. Here each of the handoff calls takes
/// 0.9 s, some 7 s in all.
#[tokio::test(start_paused = true)]
async fn a_leave_of_several_seconds_delivers_every_counter_at_the_default_bound() {
    let (held, lost, delivered) =
        a_leave_with_slow_handoffs(LEAVING_KEYS, Duration::from_millis(900), |_| {}).await;
    assert_eq!((lost, delivered), (0, held), "{lost} lost");
}

/// Guard: a leave's handoff call that timed out but landed is not counted
/// lost: the leaving node asks its successor what became of it before it
/// goes. Here the call (one, of 100 counters) takes 2.5 s to arrive,
/// past its 2 s deadline and well within the leave's 10 s; counted lost,
/// every counter was both lost and delivered.
#[tokio::test(start_paused = true)]
async fn a_leave_whose_handoff_landed_late_counts_none_lost() {
    let (held, lost, delivered) =
        a_leave_with_slow_handoffs(100, Duration::from_millis(2500), |_| {}).await;
    assert_eq!((lost, delivered), (0, held), "{lost} lost");
}
