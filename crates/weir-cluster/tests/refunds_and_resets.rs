//! Envoy refunds and counter clears through each strategy's engine: at
//! the key's owner under `owner` (a carried limit's too), on the receiving
//! node's own count under `divide` and `gossip`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{cluster, key_owned_by, wait_until_async};
use weir_cluster::strategy::CounterAction;
use weir_cluster::{Engine, StrategyKind};
use weir_core::{CheckRequest, Rule};

/// Day-long fixed windows: no test straddles a boundary.
const RULES: &str = r#"
[[rule]]
name = "per-client"
algorithm = "fixed_window"
limit = 20
window = "24h"
"#;

async fn admitted(engine: &Engine, req: &CheckRequest, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        ok += usize::from(engine.check(req).await.expect("a verdict").allowed);
    }
    ok
}

fn refund_of(req: &CheckRequest, cost: u64) -> CheckRequest {
    CheckRequest {
        cost,
        ..req.clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_carried_limits_refund_reaches_its_owner() {
    let nodes = cluster(2, RULES, |_| {}).await;
    let key = key_owned_by(&nodes[0], &nodes[1].id, "carried");
    // An hour-long window: the carried limit counts in a sliding window
    // counter, which a test must not see roll.
    let rule = Rule::carried("override:5-per-hour", 5, Duration::from_secs(3600)).unwrap();
    let req = CheckRequest {
        limit: Some(Arc::new(rule)),
        ..CheckRequest::new(key, "edge")
    };
    let gateway = &nodes[0].engine;
    assert_eq!(admitted(gateway, &req, 6).await, 5);
    gateway
        .refund(&refund_of(&req, 2))
        .await
        .expect("given back");
    assert_eq!(admitted(gateway, &req, 5).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn divide_and_gossip_refund_and_clear_the_receiving_nodes_own_count() {
    for (strategy, share) in [(StrategyKind::Divide, 10), (StrategyKind::Gossip, 20)] {
        let nodes = cluster(2, RULES, |c| c.strategy = strategy).await;
        let engine = &nodes[0].engine;
        wait_until_async("the share follows the ring", || async {
            let peek = engine.counter("per-client", "probe", CounterAction::Peek);
            let (d, _) = peek.await.unwrap().unwrap();
            d.limit == share as u64
        })
        .await;
        let req = CheckRequest::new("k", "GET /");
        assert_eq!(
            admitted(engine, &req, share + 1).await,
            share,
            "{strategy:?}"
        );
        engine
            .refund(&refund_of(&req, 3))
            .await
            .expect("given back");
        assert_eq!(admitted(engine, &req, 5).await, 3, "{strategy:?}");

        let peek = engine.counter("per-client", "k", CounterAction::Peek).await;
        let (d, owner) = peek.unwrap().expect("a known rule");
        assert_eq!((d.remaining, owner), (0, None), "{strategy:?}");
        engine
            .counter("per-client", "k", CounterAction::Reset)
            .await
            .unwrap();
        assert_eq!(
            admitted(engine, &req, share + 1).await,
            share,
            "{strategy:?}"
        );
        let unknown = engine.counter("no-rule", "k", CounterAction::Peek).await;
        assert!(unknown.unwrap().is_none());
    }
}

/// Guard: a reset through one member clears the denial another member's
/// gateway cached for the key. Cached until the day-long window's end, it
/// would refuse the key there for the rest of the day.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_anywhere_clears_every_gateways_cached_denial() {
    let nodes = cluster(3, RULES, |_| {}).await;
    let key = key_owned_by(&nodes[0], &nodes[1].id, "reset-everywhere");
    let req = CheckRequest::new(key.clone(), "GET /");
    let (gateway, elsewhere) = (&nodes[0].engine, &nodes[2].engine);
    assert_eq!(admitted(gateway, &req, 21).await, 20);
    let hits = nodes[0].cluster.stats().deny_cache_hits;
    assert_eq!(admitted(gateway, &req, 1).await, 0);
    assert_eq!(
        nodes[0].cluster.stats().deny_cache_hits,
        hits + 1,
        "the gateway answers the key from its cached denial"
    );

    let (state, owner) = elsewhere
        .counter("per-client", &key, CounterAction::Reset)
        .await
        .unwrap()
        .expect("a known rule");
    assert_eq!(
        (state.remaining, owner.as_deref()),
        (20, Some(&*nodes[1].id))
    );
    assert_eq!(admitted(gateway, &req, 21).await, 20);
}
