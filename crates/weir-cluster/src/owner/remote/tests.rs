//! Where a limit goes when the owner it was sent to cannot decide it: members on the in-memory network under tokio's paused clock.

use std::net::SocketAddr;
use std::time::Duration;

use weir_core::{LimiterConfig, RuleSet};

use super::*;
use crate::config::GossipProfile;
use crate::memory::MemoryNet;
use crate::strategy::owner::OwnerStrategy;
use crate::{Cluster, ClusterConfig};

const RULES: &str =
    "[[rule]]\nname = \"r\"\nalgorithm = \"fixed_window\"\nlimit = 5\nwindow = \"60s\"\n";

async fn member(net: &MemoryNet, id: &str, seeds: Vec<String>) -> Cluster {
    let config = ClusterConfig {
        secret: Some("remote-test".into()),
        gossip_profile: GossipProfile::Fast,
        seeds,
        ..ClusterConfig::default()
    };
    let limiter = Arc::new(Limiter::new(
        RuleSet::from_toml(RULES).unwrap(),
        net.clock(),
        LimiterConfig::default(),
    ));
    net.start(id, config, limiter).await.unwrap()
}

/// Members a and b, seeing each other, and an address on a host of its
/// own with no member on it.
async fn pair_and_an_empty_address(net: &MemoryNet) -> (Cluster, Cluster, SocketAddr) {
    let a = member(net, "a", Vec::new()).await;
    let b = member(net, "b", vec![a.identity().gossip.to_string()]).await;
    for _ in 0..500 {
        if a.ring().len() == 2 && b.ring().len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(a.ring().len(), 2, "a and b see each other");
    let (host, _) = net.link();
    (a, b, SocketAddr::new(host, 1))
}

fn remote_of(c: &Cluster) -> &Remote {
    c.strategy()
        .as_any()
        .downcast_ref::<OwnerStrategy>()
        .expect("an owner-strategy node")
        .gateway()
        .remote()
}

/// Guard: an owner that left the ring while an op was on its way to it
/// (its port closed once no member listed it) is succeeded, not stood in
/// for: the op goes to the key's owner on the ring now. Standing in, the
/// gateway decided it on a copy of that owner's counts, or on counts of
/// its own that the owner never sees.
#[tokio::test(start_paused = true)]
async fn an_op_whose_owner_left_the_ring_goes_to_the_keys_owner_now() {
    let net = MemoryNet::new();
    let (a, b, dead) = pair_and_an_empty_address(&net).await;
    net.crash(dead.ip());
    let gone = NodeIdentity::new("gone", dead, dead);
    let remote = remote_of(&a);
    let rules = a.limiter().rules();
    let (_, rule) = rules.get("r").unwrap();
    for (owner, counts) in [("a", &a), ("b", &b)] {
        let key = (0..)
            .map(|i| format!("{owner}-{i}"))
            .find(|k| a.ring().owner_id(k) == Some(owner))
            .unwrap();
        let (d, via) = remote
            .decide(rule, &key, 1, gone.clone(), false)
            .await
            .unwrap();
        assert!(d.allowed, "{owner}: {d:?}");
        match (owner, &via) {
            ("a", Via::Local) => {}
            ("b", Via::Owner(o)) if o.id == "b" => {}
            _ => panic!("a key {owner} owns was decided via {via:?}"),
        }
        assert_eq!(
            counts.limiter().remaining("r", &key),
            Some(4),
            "{owner} counted it"
        );
    }
    assert_eq!(a.stats().replica_decisions, 0);
}

/// Guard: a refund of an admission by an owner that has since left the
/// ring goes to the key's owner now, which was handed the count (here a
/// peer, or this node). Sent to the owner that left, it was lost with it,
/// and the window admitted less than its limit. Here the host it left
/// from is gone too: a call to it goes unanswered, which is no proof it
/// was not taken, so only the ring can say where the refund goes.
#[tokio::test(start_paused = true)]
async fn a_refund_for_an_owner_that_left_goes_to_the_keys_owner_now() {
    let net = MemoryNet::new();
    let (a, b, vanished) = pair_and_an_empty_address(&net).await;
    net.partition(&[a.identity().grpc.ip()], &[vanished.ip()]);
    let gone = NodeIdentity::new("gone", vanished, vanished);
    let remote = remote_of(&a);
    let rules = a.limiter().rules();
    let (_, rule) = rules.get("r").unwrap();
    for (owner, counts) in [("a", &a), ("b", &b)] {
        let key = (0..)
            .map(|i| format!("refund-{owner}-{i}"))
            .find(|k| a.ring().owner_id(k) == Some(owner))
            .unwrap();
        // Two admissions the key's owner now counts, as a handoff would
        // have brought them.
        let mut at = 0;
        for _ in 0..2 {
            let now = counts.limiter().now();
            at = counts.limiter().consume("r", &key, 1, now).unwrap().at;
        }
        assert_eq!(counts.limiter().remaining("r", &key), Some(3));
        let counter = (&rule.name, key.as_str());
        let wait = Duration::from_millis(5);
        remote
            .refunds()
            .give_back(&gone, counter, 1, at, wait)
            .await;
        assert_eq!(
            counts.limiter().remaining("r", &key),
            Some(4),
            "{owner} was given one back"
        );
    }
}

/// Guard: a refund the owner did not take (no decision there: its port
/// closed) goes to the key's owner now when that is another node; here
/// an owner still listed as `b`, at an address that no longer answers,
/// for a key that `a` counts now.
#[tokio::test(start_paused = true)]
async fn a_refund_its_owner_did_not_take_goes_to_the_keys_owner_now() {
    let net = MemoryNet::new();
    let (a, _b, dead) = pair_and_an_empty_address(&net).await;
    net.crash(dead.ip());
    let remote = remote_of(&a);
    let rules = a.limiter().rules();
    let (_, rule) = rules.get("r").unwrap();
    let key = (0..)
        .map(|i| format!("untaken-{i}"))
        .find(|k| a.ring().owner_id(k) == Some("a"))
        .unwrap();
    let now = a.limiter().now();
    let d = a.limiter().consume("r", &key, 1, now).unwrap();
    assert_eq!(a.limiter().remaining("r", &key), Some(4));
    let b_closed = NodeIdentity::new("b", dead, dead);
    let counter = (&rule.name, key.as_str());
    let wait = Duration::from_millis(5);
    remote
        .refunds()
        .give_back(&b_closed, counter, 1, d.at, wait)
        .await;
    assert_eq!(a.limiter().remaining("r", &key), Some(5));
}
