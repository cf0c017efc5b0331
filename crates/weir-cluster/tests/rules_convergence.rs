//! Rule sets converge: a write on one node is in force on every node, and a late joiner pulls it.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use weir_cluster::memory::NetEvent;
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

/// One rule per tenant route; tenant 7's limit is `limit7`.
/// Installs on the first node the file of `n` tenants with tenant 7's
/// limit raised to 600, and waits until every node decides by it.
async fn edit_tenant_7(nodes: &[TestNode], n: usize) {
    let edited = RuleSet::from_toml(&tenants(n, 600)).unwrap();
    let version = nodes[0].engine.install(edited).unwrap().version();
    wait_until("every node decides tenant 7 by the new limit", || {
        nodes.iter().all(|node| {
            let rules = node.engine.rules();
            rules.version() == version && rules.get("tenant-7").unwrap().1.limit == 600
        })
    })
    .await;
}

fn tenants(n: usize, limit7: u64) -> String {
    let mut text = String::new();
    for i in 0..n {
        let limit = if i == 7 { limit7 } else { 1_000 };
        text.push_str(&format!(
            "[[rule]]\nname = \"tenant-{i}\"\nroute = \"GET /t/{i}\"\n\
             algorithm = \"fixed_window\"\nlimit = {limit}\nwindow = \"1h\"\n"
        ));
    }
    text
}

/// Guard: a rules file edited to change one limit of a large tier sends
/// peers that one rule, not the tier again. Every push_rules request is
/// counted in bytes on the in-memory network.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_rule_edit_of_a_large_file_travels_as_that_rule() {
    const TENANTS: usize = 2_000;
    let net = weir_cluster::memory::MemoryNet::new();
    let nodes = memory_cluster(&net, 3, &tenants(TENANTS, 500), |c| {
        c.rules_sync_interval = Duration::from_secs(60)
    })
    .await;
    let pushed = Arc::new(Mutex::new(Vec::new()));
    let seen = pushed.clone();
    net.tap(Arc::new(move |e: &NetEvent<'_>| {
        if e.what == "push_rules" {
            seen.lock().unwrap().push(e.bytes.len());
        }
    }));
    // As the file reloader installs an edited file.
    edit_tenant_7(&nodes, TENANTS).await;
    let whole = weir_core::rules::rules_json(nodes[0].engine.rules().rules()).len();
    let pushed = pushed.lock().unwrap().clone();
    assert_eq!(pushed.len(), 2, "one push to each peer: {pushed:?}");
    assert!(
        pushed.iter().all(|b| b * 100 < whole),
        "pushes of {pushed:?} bytes; the whole tier is {whole}"
    );
    // The rebuilt write is the writer's: nothing differs on a later pull.
    for n in &nodes[1..] {
        assert_eq!(
            n.engine.rules().tier_write(None).unwrap().digest(),
            nodes[0].engine.rules().tier_write(None).unwrap().digest()
        );
    }
}

/// Guard: a peer that does not hold the write an edit was made from says
/// so, and is sent the tier whole; the others get the edit alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_without_the_edits_base_is_sent_the_tier_whole() {
    const TENANTS: usize = 2_000;
    let net = weir_cluster::memory::MemoryNet::new();
    let nodes = memory_cluster(&net, 3, &tenants(TENANTS, 500), |c| {
        c.rules_sync_interval = Duration::from_secs(60)
    })
    .await;
    // node-3 holds another write of the tier, as a node whose own file
    // differed would, unknown to the others.
    let other = RuleSet::from_toml(&tenants(TENANTS, 499)).unwrap();
    nodes[2].engine.limiter().install(other);
    let pushed = Arc::new(Mutex::new(Vec::new()));
    let seen = pushed.clone();
    net.tap(Arc::new(move |e: &NetEvent<'_>| {
        if e.what == "push_rules" {
            seen.lock().unwrap().push((e.to, e.bytes.len()));
        }
    }));
    edit_tenant_7(&nodes, TENANTS).await;
    let whole = weir_core::rules::rules_json(nodes[0].engine.rules().rules()).len();
    let pushed = pushed.lock().unwrap().clone();
    let to = |host| -> Vec<usize> {
        pushed
            .iter()
            .filter(|(to, _)| *to == host)
            .map(|(_, b)| *b)
            .collect()
    };
    let (to_2, to_3) = (to(nodes[1].host()), to(nodes[2].host()));
    assert!(to_2.len() == 1 && to_2[0] * 100 < whole, "{to_2:?}");
    assert!(
        to_3.len() == 2 && to_3[0] * 100 < whole && to_3[1] >= whole,
        "the edit, then the tier whole: {to_3:?}"
    );
}
