//! The weaker strategies against their predicted numbers: divide admits L/N on
//! one node, gossip admits up to N x L in a burst before a sync and
//! converges after one.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{cluster, paused_members, TestNode};
use weir_cluster::memory::MemoryNet;
use weir_cluster::strategy::gossip::GossipStrategy;
use weir_cluster::{Engine, StrategyKind};
use weir_core::CheckRequest;

/// Fixed windows a day long: the gossip strategy counts in aligned windows,
/// and a test must not straddle a boundary.
const RULES: &str = r#"
[[rule]]
name = "per-client"
algorithm = "fixed_window"
limit = 20
window = "24h"
"#;
const L: usize = 20;

fn engine(node: &TestNode, strategy: StrategyKind) -> Arc<Engine> {
    assert_eq!(node.engine.strategy(), strategy.as_str());
    node.engine.clone()
}

/// What a gossip node last heard its peers admit for `key`.
fn heard(node: &TestNode, key: &str) -> u64 {
    heard_for(node, "per-client", key)
}

/// What a gossip node last heard its peers admit for `key` under `rule`.
fn heard_for(node: &TestNode, rule: &str, key: &str) -> u64 {
    let gossip = node
        .cluster
        .strategy()
        .as_any()
        .downcast_ref::<GossipStrategy>();
    gossip.expect("a gossip node").heard(rule, key)
}

/// Waits until `engine` enforces L/`n`: the ring changes before the
/// divided limits follow it (a rules pull comes in between), so a member
/// count seen on the ring says nothing yet about the share.
async fn until_divided_by(engine: &Engine, n: usize) {
    let share = L.div_ceil(n) as u64;
    common::wait_until_async("the divided limit follows the ring", || async {
        let v = engine
            .check(&CheckRequest::new("share-probe", "GET /"))
            .await
            .unwrap();
        v.binding().unwrap().decision.limit == share
    })
    .await;
}

async fn admitted(engine: &Engine, key: &str, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        if engine
            .check(&CheckRequest::new(key, "GET /"))
            .await
            .unwrap()
            .allowed
        {
            ok += 1;
        }
    }
    ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn divide_gives_one_connection_a_fifth_of_the_limit_at_five_nodes() {
    let nodes = cluster(5, RULES, |c| c.strategy = StrategyKind::Divide).await;
    let engines: Vec<_> = nodes
        .iter()
        .map(|n| engine(n, StrategyKind::Divide))
        .collect();
    for e in &engines {
        until_divided_by(e, 5).await;
    }
    // Single connection: every request lands on node 1. L/N = 4, a 5x
    // under-admission on the best-behaved client shape.
    assert_eq!(admitted(&engines[0], "one-conn", 3 * L).await, L / 5);
    // Spread evenly over every node the same client gets its L back.
    let mut spread = 0;
    for e in &engines {
        spread += admitted(e, "spread", L).await;
    }
    assert_eq!(spread, L);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn divide_keeps_what_a_client_spent_when_a_member_joins() {
    let mut nodes = cluster(2, RULES, |c| c.strategy = StrategyKind::Divide).await;
    let first = engine(&nodes[0], StrategyKind::Divide);
    until_divided_by(&first, 2).await;
    // L/2 = 10 on node 1, all of it spent.
    assert_eq!(admitted(&first, "steady", 3 * L).await, L / 2);
    let seed = nodes[0].gossip();
    nodes.push(
        TestNode::start("node-3", &[seed], RULES, |c| {
            c.strategy = StrategyKind::Divide
        })
        .await,
    );
    common::wait_until("node 1 sees three members", || {
        nodes[0].ring_ids().len() == 3
    })
    .await;
    // The divided limit follows the ring right after it; a probe key shows it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let v = first
            .check(&CheckRequest::new("probe", "GET /"))
            .await
            .unwrap();
        if v.binding().unwrap().decision.limit == 7 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the limit never became L/3"
        );
        tokio::task::yield_now().await;
    }
    // L/3 = 7 now, and the 10 already spent count against it: nothing more.
    // Resizing used to restart the counters and hand out 7 more.
    assert_eq!(admitted(&first, "steady", L).await, 0);
    // A client new to node 1 gets the new share.
    assert_eq!(admitted(&first, "new", L).await, 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gossip_burst_admits_above_l_never_above_n_l_and_converges_after_a_sync() {
    let n = 3;
    let nodes = cluster(n, RULES, |c| {
        c.strategy = StrategyKind::Gossip;
        c.sync_interval = Duration::from_millis(200);
    })
    .await;
    let engines: Vec<_> = nodes
        .iter()
        .map(|n| engine(n, StrategyKind::Gossip))
        .collect();
    // A burst on every node before any of them hears the others: each
    // admits its full L locally.
    let bursts = engines.iter().map(|e| admitted(e, "burst", 2 * L));
    let total: usize = futures::future::join_all(bursts).await.into_iter().sum();
    assert!(total > L, "gossip admitted only {total}");
    assert!(total <= n * L, "gossip admitted {total} > N x L");
    // Steady traffic converges: what one node admits, the others learn at
    // the next sync, so a node that admitted nothing for the key denies it.
    assert_eq!(admitted(&engines[0], "steady", L).await, L);
    common::wait_until("node 2 hears node 1's spend", || {
        heard(&nodes[1], "steady") == L as u64
    })
    .await;
    assert_eq!(admitted(&engines[1], "steady", 5).await, 0);
    assert!(nodes[0].cluster.stats().sync_messages > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gossip_keeps_its_own_counters_when_the_ring_changes() {
    let mut nodes = cluster(3, RULES, |c| {
        c.strategy = StrategyKind::Gossip;
        c.sync_interval = Duration::from_secs(3600);
    })
    .await;
    let engines: Vec<_> = nodes
        .iter()
        .map(|n| engine(n, StrategyKind::Gossip))
        .collect();
    // A key node-2 owns on the ring: under the owner strategy its counter
    // would be handed to node-2 on any ring change.
    let key = common::key_owned_by(&nodes[0], "node-2", "mine");
    assert_eq!(admitted(&engines[0], &key, 2 * L).await, L);
    let gone = nodes.pop().unwrap();
    gone.kill().await;
    common::wait_until("node-1's ring drops node-3", || {
        nodes[0].ring_ids().len() == 2
    })
    .await;
    // The view change that shrank the ring is also what would have moved
    // the counter away (the owner strategy's rebalance); it has run by now.
    assert_eq!(
        admitted(&engines[0], &key, 5).await,
        0,
        "node-1 forgot its own spend"
    );
    assert_eq!(nodes[0].cluster.stats().keys_moved_out, 0);
}

/// Two gossip members on the in-memory network under a paused clock,
/// syncing every 100 ms.
async fn gossip_pair(rules: &str) -> (MemoryNet, Vec<TestNode>) {
    paused_members(2, rules, |c| {
        c.strategy = StrategyKind::Gossip;
        c.sync_interval = Duration::from_millis(100);
    })
    .await
}

/// Guard: the gossip strategy weighs a sliding window counter's previous
/// window in, peers' counts included. Counting the current window alone
/// made it a fixed window at every boundary: L on one node just before,
/// and another L on a second node just after.
#[tokio::test(start_paused = true)]
async fn gossip_keeps_a_sliding_counter_sliding_across_a_window_boundary() {
    let rules = r#"
    [[rule]]
    name = "per-client"
    algorithm = "sliding_window_counter"
    limit = 20
    window = "10s"
    "#;
    let (_net, nodes) = gossip_pair(rules).await;
    let engines: Vec<_> = nodes
        .iter()
        .map(|n| engine(n, StrategyKind::Gossip))
        .collect();
    let window = Duration::from_secs(10).as_nanos() as u64;
    let until_boundary = || {
        let now = engines[0].limiter().now();
        Duration::from_nanos(window - now % window)
    };
    // L on node 1 half a second before a boundary, heard by node 2.
    tokio::time::advance(until_boundary() - Duration::from_millis(500)).await;
    assert_eq!(admitted(&engines[0], "edge", 2 * L).await, L);
    common::wait_until("node 2 hears node 1's L", || {
        heard(&nodes[1], "edge") == L as u64
    })
    .await;
    let left = until_boundary();
    assert!(
        left < Duration::from_millis(500),
        "still before the boundary"
    );
    // A tenth of a second into the next window, node 2 asks: the previous
    // window's L still weighs 99% of itself.
    tokio::time::advance(left + Duration::from_millis(100)).await;
    assert_eq!(
        admitted(&engines[1], "edge", L).await,
        0,
        "L before the boundary and L after it is the fixed window's 2 L"
    );
    // Near the end of the window the previous count has slid out and the
    // budget is back.
    tokio::time::advance(Duration::from_secs(9)).await;
    assert!(admitted(&engines[1], "edge", L).await >= L - 3);
}

/// Guard: a shadow limit's denials are not reported to peers as spend.
/// They consumed nothing where they were decided; counted by peers, they
/// made the shadow limit deny there before its limit was reached.
#[tokio::test(start_paused = true)]
async fn gossip_reports_what_a_shadow_limit_admitted_not_what_it_denied() {
    let rules = r#"
    [[rule]]
    name = "per-client"
    algorithm = "fixed_window"
    limit = 20
    window = "24h"

    [[rule]]
    name = "dark"
    algorithm = "fixed_window"
    limit = 5
    window = "24h"
    shadow = true
    "#;
    let (_net, nodes) = gossip_pair(rules).await;
    let engine = engine(&nodes[0], StrategyKind::Gossip);
    // Four of cost 1, then one of cost 3 that the shadow limit would deny
    // (4 + 3 > 5) and the enforcing one admits: 7 spent on per-client, 4
    // on the shadow limit.
    assert_eq!(admitted(&engine, "shady", 4).await, 4);
    let heavy = CheckRequest {
        cost: 3,
        ..CheckRequest::new("shady", "GET /")
    };
    let v = engine.check(&heavy).await.unwrap();
    assert!(v.allowed && v.shadow_denials().count() == 1, "{v:?}");
    common::wait_until("node 2 hears node 1's seven", || {
        heard(&nodes[1], "shady") == 7
    })
    .await;
    assert_eq!(heard_for(&nodes[1], "dark", "shady"), 4);
}
