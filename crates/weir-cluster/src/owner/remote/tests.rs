//! Where a limit goes when the owner it was sent to cannot decide it, and what a check decided here after such a wait owes the key's owner now: members on the in-memory network under tokio's paused clock.

use std::net::SocketAddr;
use std::time::Duration;

use weir_core::{LimiterConfig, RuleSet};
use weir_proto::weir::v1::DecideRequest;

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

/// [`RULES`]' one rule, as `c` has it.
fn rule_r(c: &Cluster) -> Arc<Rule> {
    c.limiter().rules().get("r").unwrap().1.clone()
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
    let rule = &rule_r(&a);
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

/// Members a and b, and `gone`: an owner no longer on their ring, at an
/// address nothing answers from.
async fn a_pair_and_an_owner_gone(net: &MemoryNet) -> (Cluster, Cluster, NodeIdentity) {
    let (a, b, vanished) = pair_and_an_empty_address(net).await;
    net.partition(&[a.identity().grpc.ip()], &[vanished.ip()]);
    (a, b, NodeIdentity::new("gone", vanished, vanished))
}

/// The first key named `{prefix}-{owner}-{i}` that `owner` owns on a's ring.
fn key_of(a: &Cluster, owner: &str, prefix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}-{owner}-{i}"))
        .find(|k| a.ring().owner_id(k) == Some(owner))
        .unwrap()
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
    let (a, b, gone) = a_pair_and_an_owner_gone(&net).await;
    let remote = remote_of(&a);
    let rule = &rule_r(&a);
    for (owner, counts) in [("a", &a), ("b", &b)] {
        let key = key_of(&a, owner, "refund");
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

/// Guard: an answer heard after the late window is given back only where
/// it was counted. Here its owner has left the ring, and the key's owner
/// now (this node, or `b`) never counted the admission: given back there,
/// it would be one admission too many.
#[tokio::test(start_paused = true)]
async fn a_refund_heard_past_the_late_window_goes_nowhere_but_its_owner() {
    let net = MemoryNet::new();
    let (a, b, gone) = a_pair_and_an_owner_gone(&net).await;
    let remote = remote_of(&a);
    let rule = &rule_r(&a);
    for (owner, counts) in [("a", &a), ("b", &b)] {
        let key = key_of(&a, owner, "very-late");
        let now = counts.limiter().now();
        let at = counts.limiter().consume("r", &key, 1, now).unwrap().at;
        let counter = (&rule.name, key.as_str());
        remote
            .refunds()
            .give_back_where_counted(&gone, counter, 1, at, Duration::from_millis(5))
            .await;
        assert_eq!(
            counts.limiter().remaining("r", &key),
            Some(4),
            "{owner} gave back nothing it was not given"
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
    let rule = &rule_r(&a);
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

/// Members a and b, then c joining them with every handoff to it held
/// far longer than a test runs, so c asks a key's previous owner about
/// each check of a key it took; that owner's answers come later than the
/// late window, so each asking ends unanswered and c decides the check
/// itself. Returns c, the key, and a ring on which a member `d` has
/// taken the key from c (a join during the asking).
async fn a_joiner_asking_back(net: &MemoryNet) -> (Vec<Cluster>, String, Ring) {
    let (a, b, _) = pair_and_an_empty_address(net).await;
    let c = member(net, "c", vec![a.identity().gossip.to_string()]).await;
    net.slow_handoffs_to(c.identity().grpc.ip(), Duration::from_secs(60));
    for _ in 0..500 {
        if c.ring().len() == 3 && c.awaiting().len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(c.awaiting().len(), 2, "c waits for a's and b's handoffs");
    let d = NodeIdentity::new(
        "d",
        "127.0.0.9:1".parse().unwrap(),
        "127.0.0.9:2".parse().unwrap(),
    );
    let mut members = c.ring().members().to_vec();
    members.push(d);
    let with_d = Ring::with_default_vnodes(&members);
    let key = (0..)
        .map(|i| format!("moving-{i}"))
        .find(|k| c.ring().owner_id(k) == Some("c") && with_d.owner_id(k) == Some("d"))
        .unwrap();
    let previous = c.ring().replica_of(&key).unwrap().grpc.ip();
    net.slow_answers_from(previous, LATE_WINDOW);
    (vec![a, b, c], key, with_d)
}

/// Waits until `c` has asked the key's previous owner, then has its ring
/// take in `with_d`, as its membership does when a member joins.
async fn taken_by_d_while_asking(c: &Cluster, with_d: Ring) {
    for _ in 0..500 {
        if c.stats().asked_back == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(c.stats().asked_back, 1, "c asked the previous owner");
    remote_of(c).routing.install(Arc::new(with_d));
}

/// The check of `key` was counted at `c`, as a stray for the next sweep
/// to carry to the key's owner now.
fn counted_at_c_as_a_stray(c: &Cluster, key: &str) {
    assert_eq!(c.limiter().remaining("r", key), Some(4), "counted at c");
    assert_eq!(c.stats().strays, 1, "to be swept to d");
}

/// Guard: a gateway's own check of a key its ring gave it, decided here
/// after asking the key's previous owner went unanswered, is a stray when
/// a ring change during the asking moved the key on: that change's sweep
/// has copied the counters already, so only the next stray sweep carries
/// the admission to the key's owner. Taken for owned on the ring read
/// before the asking, it stayed here, and the owner never counted it.
#[tokio::test(start_paused = true)]
async fn a_check_whose_key_moved_on_while_its_previous_owner_was_asked_is_a_stray() {
    let net = MemoryNet::new();
    let (nodes, key, with_d) = a_joiner_asking_back(&net).await;
    let c = &nodes[2];
    let rule = &rule_r(c);
    let (decided, ()) = tokio::join!(
        remote_of(c).decide_owned(rule, &key, 1, false),
        taken_by_d_while_asking(c, with_d)
    );
    let (d, via) = decided.expect("c is not leaving").unwrap();
    assert!(d.allowed && matches!(via, Via::Local), "{d:?} via {via:?}");
    counted_at_c_as_a_stray(c, &key);
}

/// Guard: the same for an op a peer sent c as the key's owner.
#[tokio::test(start_paused = true)]
async fn an_op_whose_key_moved_on_while_its_previous_owner_was_asked_is_a_stray() {
    let net = MemoryNet::new();
    let (nodes, key, with_d) = a_joiner_asking_back(&net).await;
    let c = &nodes[2];
    let rule = &rule_r(c);
    let req = DecideRequest {
        ops: vec![wire::consume(rule, &key, 1, false)],
        rules_version: 0,
        from_node: "b".into(),
    };
    let (_, gateway) = net.link();
    let (answer, ()) = tokio::join!(
        gateway.decide(&c.identity(), req, Duration::from_secs(5)),
        taken_by_d_while_asking(c, with_d)
    );
    let result = answer.unwrap().results.remove(0);
    match wire::answer(result, rule, 1) {
        Answer::Decided(d) => assert!(d.allowed, "{d:?}"),
        other => panic!("decided: {other:?}"),
    }
    counted_at_c_as_a_stray(c, &key);
}
