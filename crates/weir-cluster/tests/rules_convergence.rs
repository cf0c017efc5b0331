//! Rule sets converge: a write on one node is in force on every node, and a late joiner pulls it.

mod common;

use std::time::Duration;

use common::*;
use weir_core::RuleSet;

const RAISED: &str = r#"{"rules":[{"name":"per-client","algorithm":"sliding_window_log","limit":3,"window":"60s"}]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_write_on_one_node_is_in_force_on_every_node() {
    let nodes = cluster(3, RULES, |c| {
        c.rules_sync_interval = Duration::from_secs(60)
    })
    .await;
    let rules = RuleSet::parse_tier_json(None, RAISED).unwrap();
    let set = nodes[0].engine.replace_tier(None, rules).unwrap();
    let version = set.version();
    let took = wait_until("every node runs the new version", || {
        nodes.iter().all(|n| n.engine.rules().version() == version)
    })
    .await;
    println!("pushed to every node in {took:?}");
    // In force, not just stored: node-3 enforces the new limit of 3 on a
    // key it owns itself.
    let key = key_owned_by(&nodes[2], "node-3", "rules");
    assert_eq!(admitted_round_robin(&[&nodes[2]], &key, 10).await, 3);
    wait_until("both pushes acknowledged", || {
        nodes[0].cluster.stats().rules_pushed == 2
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_joins_late_pulls_the_rules_in_force() {
    let nodes = cluster(2, RULES, |_| {}).await;
    let rules = RuleSet::parse_tier_json(None, RAISED).unwrap();
    let version = nodes[1].engine.replace_tier(None, rules).unwrap().version();
    wait_until("node-1 has it", || {
        nodes[0].engine.rules().version() == version
    })
    .await;

    let late = TestNode::start("node-3", &[nodes[0].gossip()], RULES, |_| {}).await;
    wait_until("the late joiner pulls it", || {
        late.engine.rules().version() == version
    })
    .await;
    assert_eq!(late.engine.rules().rules()[0].limit, 3);
    // Counted once the set is installed: a moment after it is in force.
    wait_until("the adoption is counted", || {
        late.cluster.stats().rules_adopted >= 1
    })
    .await;
    assert_eq!(late.cluster.stats().rules_adopted, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_of_one_version_settle_on_one_set_everywhere() {
    let net = weir_cluster::memory::MemoryNet::new();
    let nodes = memory_cluster(&net, 3, RULES, |c| {
        c.rules_sync_interval = Duration::from_millis(200)
    })
    .await;
    let a = RuleSet::parse_tier_json(None, RAISED).unwrap();
    let b = RuleSet::parse_tier_json(None, &RAISED.replace("\"limit\":3", "\"limit\":4")).unwrap();
    // Cut node-1 and node-3 off from each other while both write, so neither
    // hears the other's push first: both build on the same version.
    nodes[0].partition_from(&[&nodes[2]]);
    let va = nodes[0].engine.replace_tier(None, a).unwrap().version();
    let vb = nodes[2].engine.replace_tier(None, b).unwrap().version();
    assert_eq!(va, vb, "both wrote the same next version");
    net.heal();
    wait_until("one set everywhere", || {
        nodes.iter().all(|n| n.engine.rules().rules()[0].limit == 4)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_to_two_tiers_on_two_nodes_at_once_are_both_in_force_everywhere() {
    let net = weir_cluster::memory::MemoryNet::new();
    let nodes = memory_cluster(&net, 3, RULES, |c| {
        c.rules_sync_interval = Duration::from_millis(200)
    })
    .await;
    let tier = |t: &str, limit: u64| {
        let body = format!(
            r#"{{"rules":[{{"name":"{t}-limit","algorithm":"sliding_window_log","limit":{limit},"window":"60s"}}]}}"#
        );
        RuleSet::parse_tier_json(Some(t), &body).unwrap()
    };
    // Cut node-1 and node-3 off from each other while both write, so
    // neither hears the other's push first: both build on one version.
    nodes[0].partition_from(&[&nodes[2]]);
    let free = nodes[0]
        .engine
        .replace_tier(Some("free"), tier("free", 5))
        .unwrap();
    let pro = nodes[2]
        .engine
        .replace_tier(Some("pro"), tier("pro", 50))
        .unwrap();
    assert_eq!(
        free.version(),
        pro.version(),
        "both wrote the same next version"
    );
    net.heal();
    wait_until("both tiers in force on every node", || {
        nodes.iter().all(|n| {
            let rules = n.engine.rules();
            rules.get("free-limit").is_some_and(|(_, r)| r.limit == 5)
                && rules.get("pro-limit").is_some_and(|(_, r)| r.limit == 50)
        })
    })
    .await;
    for n in &nodes {
        let rules = n.engine.rules();
        assert_eq!(rules.tier_version(Some("free")), free.version());
        assert_eq!(rules.tier_version(Some("pro")), pro.version());
    }
}
