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

/// Guard: an owner that left the ring while an op was on its way to it
/// (its port closed once no member listed it) is succeeded, not stood in
/// for: the op goes to the key's owner on the ring now. Standing in, the
/// gateway decided it on a copy of that owner's counts, or on counts of
/// its own that the owner never sees.
#[tokio::test(start_paused = true)]
async fn an_op_whose_owner_left_the_ring_goes_to_the_keys_owner_now() {
    let net = MemoryNet::new();
    let a = member(&net, "a", Vec::new()).await;
    let b = member(&net, "b", vec![a.identity().gossip.to_string()]).await;
    for _ in 0..500 {
        if a.ring().len() == 2 && b.ring().len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(a.ring().len(), 2, "a and b see each other");
    let (host, _) = net.link();
    net.crash(host);
    let addr = SocketAddr::new(host, 1);
    let gone = NodeIdentity::new("gone", addr, addr);
    let remote = a
        .strategy()
        .as_any()
        .downcast_ref::<OwnerStrategy>()
        .expect("an owner-strategy node")
        .gateway()
        .remote();
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
