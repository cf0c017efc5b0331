//! The owner path over real sockets: one owner per key, exact limits across gateways, the deny cache.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use rand::Rng;
use weir_core::{CheckRequest, Rule};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_names_the_same_owner_for_ten_thousand_random_keys() {
    let nodes = cluster(5, RULES, |_| {}).await;
    let mut rng = rand::rng();
    let mut per_owner = std::collections::BTreeMap::<String, usize>::new();
    for _ in 0..10_000 {
        let len = rng.random_range(1..40);
        let key: String = (0..len).map(|_| rng.random_range(' '..='~')).collect();
        let owners: Vec<String> = nodes
            .iter()
            .map(|n| n.cluster.owner_of(&key).expect("a non-empty ring").id)
            .collect();
        assert!(
            owners.iter().all(|o| *o == owners[0]),
            "nodes disagree on the owner of {key:?}: {owners:?}"
        );
        *per_owner.entry(owners[0].clone()).or_default() += 1;
    }
    println!("keys per owner: {per_owner:?}");
    assert_eq!(per_owner.len(), 5, "every member owns some keys");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_spread_over_every_node_gets_exactly_its_limit() {
    let nodes = cluster(3, RULES, |_| {}).await;
    let all: Vec<&TestNode> = nodes.iter().collect();
    // One key per possible owner, so forwarded and local decisions both count.
    for owner in &nodes {
        let key = key_owned_by(&nodes[0], &owner.id, "spread");
        let admitted = admitted_round_robin(&all, &key, 3 * LIMIT).await;
        assert_eq!(admitted, LIMIT, "key owned by {}", owner.id);
    }
    let forwarded: u64 = nodes.iter().map(|n| n.cluster.stats().peer_ops).sum();
    assert!(forwarded > 0, "some checks must have been forwarded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_client_is_answered_from_the_deny_cache_with_no_peer_call() {
    let nodes = cluster(3, RULES, |_| {}).await;
    let (gateway, owner) = (&nodes[0], &nodes[1]);
    let key = key_owned_by(gateway, &owner.id, "denied");
    assert_eq!(
        admitted_round_robin(&[gateway], &key, LIMIT + 1).await,
        LIMIT
    );

    let before = gateway.cluster.stats();
    let owner_keys_before = owner.engine.limiter().keys();
    for _ in 0..50 {
        let v = gateway.check(&key).await.unwrap();
        assert!(!v.allowed);
        let d = v.binding().unwrap().decision;
        assert!(
            !d.retry_after.is_zero(),
            "a cached denial still says when to retry"
        );
    }
    let after = gateway.cluster.stats();
    assert_eq!(
        after.peer_calls, before.peer_calls,
        "no Decide call for a cached denial"
    );
    assert_eq!(after.peer_ops, before.peer_ops);
    assert_eq!(after.deny_cache_hits - before.deny_cache_hits, 50);
    assert_eq!(owner.engine.limiter().keys(), owner_keys_before);

    // Another gateway has no cached denial: it asks the owner, once.
    let other = &nodes[2];
    let before = other.cluster.stats();
    assert!(!other.check(&key).await.unwrap().allowed);
    assert!(!other.check(&key).await.unwrap().allowed);
    let after = other.cluster.stats();
    assert_eq!(after.peer_ops - before.peer_ops, 1);
    assert_eq!(after.deny_cache_hits - before.deny_cache_hits, 1);
}

const TWO_LIMITS: &str = r#"
[[rule]]
name = "per-client"
algorithm = "sliding_window_log"
limit = 5
window = "60s"

[[rule]]
name = "per-ip"
by = "ip"
algorithm = "sliding_window_log"
limit = 2
window = "60s"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_one_limit_denies_consumes_nothing_from_the_others() {
    let nodes = cluster(3, TWO_LIMITS, |_| {}).await;
    let gateway = &nodes[0];
    // The client's counter and the IPs' counters on other owners than the gateway.
    let client = key_owned_by(gateway, &nodes[1].id, "client");
    let ip_on = |owner: &str| {
        (1..=250)
            .map(|i| format!("10.0.{}.{}", i / 250, i % 250))
            .find(|ip| gateway.cluster.owner_of(ip).is_some_and(|o| o.id == owner))
            .expect("some IP lands on every member")
    };
    let (ip1, ip2, ip3) = (
        ip_on(&nodes[2].id),
        ip_on(&nodes[1].id),
        ip_on(&nodes[0].id),
    );
    let check = |ip: String| {
        let client = client.clone();
        async move {
            let r = CheckRequest::new(&client, "GET /").ip(ip);
            gateway.engine.check(&r).await.unwrap().allowed
        }
    };
    let mut from_ip1 = 0;
    for _ in 0..10 {
        from_ip1 += usize::from(check(ip1.clone()).await);
    }
    assert_eq!(from_ip1, 2, "the IP limit");
    // The eight refused requests consumed none of the client's 5.
    let mut rest = 0;
    for ip in [ip2, ip3] {
        for _ in 0..4 {
            rest += usize::from(check(ip.clone()).await);
        }
    }
    assert_eq!(rest, 3, "2 + 3 = the client's 5");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_checks_for_one_owner_share_decide_calls() {
    let nodes = cluster(2, RULES, |_| {}).await;
    let gateway = &nodes[0];
    let keys: Vec<String> = (0..200)
        .map(|i| key_owned_by(gateway, &nodes[1].id, &format!("batch{i}")))
        .collect();
    let reqs: Vec<CheckRequest> = keys.iter().map(|k| CheckRequest::new(k, "GET /")).collect();
    let before = gateway.cluster.stats();
    let verdicts = gateway.engine.check_many(&reqs).await;
    assert!(verdicts.iter().all(|v| v.as_ref().unwrap().allowed));
    let after = gateway.cluster.stats();
    let (calls, ops) = (
        after.peer_calls - before.peer_calls,
        after.peer_ops - before.peer_ops,
    );
    println!("200 forwarded checks took {calls} Decide calls");
    assert_eq!(ops, 200);
    // Every op sends its key and rule name, so the bytes counted are at
    // least their sum.
    let bytes = after.peer_bytes - before.peer_bytes;
    let least: usize = keys.iter().map(|k| k.len() + "per-client".len()).sum();
    assert!(bytes >= least as u64, "{bytes} bytes for 200 ops");
    // Unbatched, 200 ops are 200 calls (the next test). How many batches
    // form depends on scheduling (4 calls may be in flight per owner), so
    // the bound is a mean batch of at least 10, not an exact count.
    assert!(calls <= 20, "{calls} calls for 200 ops: not batched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_batching_off_each_op_is_its_own_call() {
    let nodes = cluster(2, RULES, |c| {
        c.batch = weir_cluster::BatchConfig::unbatched(64)
    })
    .await;
    let gateway = &nodes[0];
    let keys: Vec<String> = (0..50)
        .map(|i| key_owned_by(gateway, &nodes[1].id, &format!("solo{i}")))
        .collect();
    let reqs: Vec<CheckRequest> = keys.iter().map(|k| CheckRequest::new(k, "GET /")).collect();
    let verdicts = gateway.engine.check_many(&reqs).await;
    assert!(verdicts.iter().all(|v| v.as_ref().unwrap().allowed));
    let s = gateway.cluster.stats();
    assert_eq!(s.peer_calls, s.peer_ops);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_local_and_remote_keys_answers_each_in_order_forwarding_only_the_remote() {
    let nodes = cluster(2, RULES, |_| {}).await;
    let gateway = &nodes[0];
    // Alternate owners, and send each key LIMIT + 1 times so one of each
    // key's checks is denied wherever it is decided.
    let keys: Vec<String> = (0..10)
        .map(|i| key_owned_by(gateway, &nodes[i % 2].id, &format!("mixed{i}")))
        .collect();
    let mut reqs = Vec::new();
    for _ in 0..=LIMIT {
        reqs.extend(keys.iter().map(|k| CheckRequest::new(k, "GET /")));
    }
    let before = gateway.cluster.stats();
    let verdicts = gateway.engine.check_many(&reqs).await;
    assert_eq!(verdicts.len(), reqs.len());
    let mut admitted = std::collections::HashMap::new();
    for (i, (req, v)) in reqs.iter().zip(&verdicts).enumerate() {
        let v = v.as_ref().unwrap();
        let applied = v.binding().unwrap();
        assert_eq!(applied.hash_part, req.key, "answer {i} is for another key");
        *admitted.entry(req.key.clone()).or_insert(0) += usize::from(v.allowed);
    }
    // Concurrent calls to one owner may be decided in any order, so which
    // of a key's checks is the one too many is not fixed; how many is.
    for k in &keys {
        assert_eq!(admitted[k], LIMIT, "{k}");
    }
    let after = gateway.cluster.stats();
    let remote = reqs.len() / 2;
    // The local half was decided in place; the deny cache may answer some
    // remote denials, so at most the remote half was forwarded.
    let forwarded = after.peer_ops - before.peer_ops;
    assert!(forwarded >= (remote - keys.len() / 2) as u64, "{forwarded}");
    assert!(
        forwarded <= remote as u64,
        "{forwarded} ops for {remote} remote checks"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_the_request_carries_is_decided_by_its_owner_exactly_across_gateways() {
    let nodes = cluster(3, RULES, |_| {}).await;
    let owner = &nodes[2];
    let key = key_owned_by(&nodes[0], &owner.id, "carried");
    let rule =
        Arc::new(Rule::carried("override:5-per-minute", 5, Duration::from_secs(60)).unwrap());
    let mut admitted = 0;
    for i in 0..12 {
        let gateway = &nodes[i % 2];
        let req = CheckRequest::new(&key, "").carrying(rule.clone());
        admitted += usize::from(gateway.engine.check(&req).await.unwrap().allowed);
    }
    // Decided at each gateway, two gateways would admit 5 each.
    assert_eq!(admitted, 5);
    assert_eq!(owner.engine.limiter().adhoc_keys(), 1);
    for gateway in &nodes[..2] {
        assert_eq!(
            gateway.engine.limiter().adhoc_keys(),
            0,
            "{} kept a counter",
            gateway.id
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_mixing_carried_limits_and_the_rule_sets_answers_each_item_with_its_own() {
    // One node owns every key, so only the carried items take a detour.
    let nodes = cluster(1, RULES, |_| {}).await;
    let rule =
        Arc::new(Rule::carried("override:3-per-minute", 3, Duration::from_secs(60)).unwrap());
    let mut reqs = Vec::new();
    for _ in 0..=LIMIT {
        reqs.push(CheckRequest::new("ruled", "GET /"));
        reqs.push(CheckRequest::new("carried", "GET /").carrying(rule.clone()));
    }
    let verdicts = nodes[0].engine.check_many(&reqs).await;
    assert_eq!(verdicts.len(), reqs.len());
    let (mut ruled, mut carried) = (0, 0);
    for (i, (req, v)) in reqs.iter().zip(&verdicts).enumerate() {
        let v = v.as_ref().unwrap();
        let shown = v.binding().unwrap();
        assert_eq!(shown.hash_part, req.key, "answer {i} is for another key");
        let expected = if req.limit.is_some() {
            "override:3-per-minute"
        } else {
            "per-client"
        };
        assert_eq!(&*shown.rule.name, expected, "answer {i} is another item's");
        *(if req.limit.is_some() {
            &mut carried
        } else {
            &mut ruled
        }) += usize::from(v.allowed);
    }
    assert_eq!((ruled, carried), (LIMIT, 3));
}

/// Guard: ops of limits carried in requests are tallied under the one
/// label every carried limit shares (`Rule::label`). Tallied by name, each
/// distinct override a gateway forwarded kept an entry and a
/// `weir_forwarded_ops_total` series of its own.
#[tokio::test(start_paused = true)]
async fn forwarded_overrides_are_tallied_under_one_label_whatever_their_limit() {
    let (_net, nodes) = paused_members(2, RULES, |_| {}).await;
    let key = key_owned_by(&nodes[0], "node-2", "carried");
    for limit in 1..=1_000 {
        let rule = Rule::carried(
            &format!("override:{limit}-per-60000ms"),
            limit,
            Duration::from_secs(60),
        )
        .unwrap();
        let req = CheckRequest::new(&key, "GET /").carrying(Arc::new(rule));
        assert!(nodes[0].engine.check(&req).await.unwrap().allowed);
    }
    let tallied: Vec<(String, u64)> = nodes[0]
        .cluster
        .forwarded_by_rule()
        .into_iter()
        .map(|(r, n)| (r.to_string(), n))
        .collect();
    assert_eq!(
        tallied,
        [
            ("override:*".to_string(), 1_000),
            ("per-client".to_string(), 0)
        ]
    );
}
