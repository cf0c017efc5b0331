//! Membership over real UDP sockets on loopback: join, retry, crash, restart, leave, secrets.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use weir_cluster::membership::{
    MemberState, Membership, MembershipConfig, MembershipError, NodeIdentity,
};

/// Every node sees every other within this long after start (fast config).
const CONVERGE: Duration = Duration::from_secs(10);
/// Stated bound for crash detection with the fast config (probe 250 ms,
/// suspicion 1 s): expected ~1.5-2.5 s, asserted with slack for a loaded CI.
const CRASH_DETECT: Duration = Duration::from_secs(6);

fn loopback0() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn ident(name: &str) -> NodeIdentity {
    // The gRPC address is only carried, never dialled, here.
    NodeIdentity::new(name, loopback0(), "127.0.0.1:1".parse().unwrap())
}

/// Members share a secret unless a test gives them another.
fn config(name: &str, seeds: &[SocketAddr]) -> MembershipConfig {
    MembershipConfig::fast(ident(name), seeds.to_vec()).with_secret(b"membership-test".to_vec())
}

async fn start(name: &str, seeds: &[SocketAddr]) -> Membership {
    Membership::start(config(name, seeds), loopback0())
        .await
        .unwrap()
}

/// Polls `cond` every 20 ms until it holds or `limit` passes; returns how
/// long it took, or `None` on timeout.
async fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if cond() {
            return Some(start.elapsed());
        }
        if start.elapsed() >= limit {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn live_ids(m: &Membership) -> BTreeSet<String> {
    m.view().members.into_iter().map(|i| i.id).collect()
}

fn state_of(m: &Membership, id: &str) -> Option<MemberState> {
    m.members()
        .into_iter()
        .find(|x| x.identity.id == id)
        .map(|x| x.state)
}

fn ids(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

async fn cluster(names: &[&str]) -> Vec<Membership> {
    let seed = start(names[0], &[]).await;
    let seed_addr = seed.local_addr();
    let mut nodes = vec![seed];
    for name in &names[1..] {
        nodes.push(start(name, &[seed_addr]).await);
    }
    let all = ids(names);
    let took = wait_until(CONVERGE, || nodes.iter().all(|n| live_ids(n) == all))
        .await
        .unwrap_or_else(|| panic!("{} nodes did not converge within {CONVERGE:?}", names.len()));
    println!("{} nodes converged in {took:?}", names.len());
    nodes
}

#[tokio::test]
async fn five_nodes_join_through_one_seed_and_converge() {
    let names = ["a", "b", "c", "d", "e"];
    let seed = start("a", &[]).await;
    let mut views = seed.subscribe();
    let first_epoch = views.borrow().epoch;
    let seed_addr = seed.local_addr();
    let mut nodes = vec![seed];
    for name in &names[1..] {
        nodes.push(start(name, &[seed_addr]).await);
    }
    let all = ids(&names);
    let took = wait_until(CONVERGE, || nodes.iter().all(|n| live_ids(n) == all)).await;
    println!("5 nodes converged in {took:?}");
    assert!(took.is_some(), "no convergence within {CONVERGE:?}");

    for n in &nodes {
        let members = n.members();
        assert_eq!(members.len(), 5);
        assert!(members.iter().all(|m| m.state == MemberState::Alive));
        // Self is listed, with the address actually bound.
        let me = n.identity();
        assert_eq!(me.gossip, n.local_addr());
        assert!(members.iter().any(|m| m.identity == me));
        // The view is sorted and identical everywhere.
        let view = n.view();
        assert!(view.members.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(view.members, nodes[0].view().members);
    }
    // The watch fired and its epoch grew with every change.
    assert!(views.has_changed().unwrap());
    let latest = views.borrow_and_update().clone();
    assert!(latest.epoch >= first_epoch + 4, "epoch {}", latest.epoch);
    assert_eq!(latest.members.len(), 5);
    let stats = nodes[0].stats();
    assert!(stats.packets_in > 0 && stats.packets_out > 0 && stats.bytes_in > 0);
}

#[tokio::test]
async fn joiner_keeps_announcing_until_a_late_seed_starts() {
    // Learn a free port for the seed, then release it so the seed can bind it
    // later.
    let seed_addr = std::net::UdpSocket::bind(loopback0())
        .unwrap()
        .local_addr()
        .unwrap();
    let joiner = start("joiner", &[seed_addr]).await;
    // The joiner announces into the void a few times before the seed exists.
    let early = wait_until(Duration::from_secs(5), || joiner.stats().packets_out >= 3).await;
    assert!(early.is_some(), "joiner did not retry its announce");
    assert_eq!(live_ids(&joiner), ids(&["joiner"]));

    let seed = Membership::start(config("seed", &[]), seed_addr)
        .await
        .unwrap();
    let both = ids(&["joiner", "seed"]);
    let took = wait_until(CONVERGE, || {
        live_ids(&joiner) == both && live_ids(&seed) == both
    })
    .await;
    println!("late seed joined in {took:?}");
    assert!(took.is_some(), "late seed never joined");
}

/// Time until every node in `observers` lists `id` as Down and not live.
async fn time_until_down(observers: &[Membership], id: &str, limit: Duration) -> Option<Duration> {
    wait_until(limit, || {
        observers
            .iter()
            .all(|n| state_of(n, id) == Some(MemberState::Down) && !live_ids(n).contains(id))
    })
    .await
}

#[tokio::test]
async fn crash_is_detected_and_a_restart_with_the_same_identity_rejoins() {
    let mut nodes = cluster(&["a", "b", "c", "d"]).await;
    let victim = nodes.pop().unwrap();
    let old = victim.identity();
    let addr = victim.local_addr();
    victim.abort();
    drop(victim);

    let detected = time_until_down(&nodes, "d", CRASH_DETECT).await;
    println!("crash detected by all survivors in {detected:?} (bound {CRASH_DETECT:?})");
    assert!(
        detected.is_some(),
        "crash not detected within {CRASH_DETECT:?}"
    );

    // Restart with exactly the old identity (same id, address, incarnation):
    // the cluster still holds it as Down, so this exercises the automatic
    // renew-and-rejoin path. The aborted task releases the port
    // asynchronously, so retry the bind briefly.
    let cfg = MembershipConfig::fast(old.clone(), vec![nodes[0].local_addr()])
        .with_secret(b"membership-test".to_vec());
    let deadline = Instant::now() + Duration::from_secs(5);
    let restarted = loop {
        match Membership::start(cfg.clone(), addr).await {
            Ok(m) => break m,
            Err(MembershipError::Bind { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("could not restart on {addr}: {e}"),
        }
    };

    let all = ids(&["a", "b", "c", "d"]);
    let took = wait_until(CONVERGE, || {
        nodes.iter().all(|n| {
            live_ids(n) == all
                && n.view()
                    .members
                    .iter()
                    .any(|m| m.id == "d" && m.incarnation > old.incarnation)
        }) && live_ids(&restarted) == all
    })
    .await;
    println!("restarted node alive everywhere again in {took:?}");
    assert!(took.is_some(), "restarted node not seen alive again");
    assert!(restarted.identity().incarnation > old.incarnation);
    assert_eq!(restarted.local_addr(), addr);
}

#[tokio::test]
async fn graceful_leave_is_noticed_faster_than_a_crash() {
    let mut nodes = cluster(&["a", "b", "c", "d", "e"]).await;

    let leaver = nodes.pop().unwrap();
    leaver.leave_gracefully().await.unwrap();
    assert!(!leaver.is_running());
    assert!(matches!(
        leaver.leave_gracefully().await,
        Err(MembershipError::Stopped)
    ));
    let left = time_until_down(&nodes, "e", CRASH_DETECT)
        .await
        .expect("leave not noticed");

    let crashed = nodes.pop().unwrap();
    drop(crashed);
    let crash = time_until_down(&nodes, "d", CRASH_DETECT)
        .await
        .expect("crash not noticed");
    println!("graceful leave noticed in {left:?}; crash in {crash:?}");
    assert!(
        left < crash,
        "leave {left:?} not faster than crash {crash:?}"
    );
    // Down members stay listed (for /v1/cluster) but leave the live view.
    for n in &nodes {
        assert_eq!(live_ids(n), ids(&["a", "b", "c"]));
        assert_eq!(n.members().len(), 5);
    }
}

#[tokio::test]
async fn nodes_without_the_secret_never_join() {
    let secret = b"correct horse battery staple".to_vec();
    let a = Membership::start(config("a", &[]).with_secret(secret.clone()), loopback0())
        .await
        .unwrap();
    let b = Membership::start(
        config("b", &[a.local_addr()]).with_secret(secret),
        loopback0(),
    )
    .await
    .unwrap();
    let ab = ids(&["a", "b"]);
    assert!(
        wait_until(CONVERGE, || live_ids(&a) == ab && live_ids(&b) == ab)
            .await
            .is_some(),
        "nodes sharing the secret did not join"
    );

    let wrong = Membership::start(
        config("wrong", &[a.local_addr()]).with_secret(b"guess".to_vec()),
        loopback0(),
    )
    .await
    .unwrap();
    let mut open = config("plain", &[a.local_addr()]).insecure_open();
    open.secret = None;
    let none = Membership::start(open, loopback0()).await.unwrap();
    // Each intruder announces every 200 ms; wait for several rejections.
    let rejected = wait_until(Duration::from_secs(10), || a.stats().bad_mac_dropped >= 10).await;
    assert!(
        rejected.is_some(),
        "seed did not count bad tags: {:?}",
        a.stats()
    );

    for n in [&a, &b] {
        assert_eq!(live_ids(n), ab);
        assert!(n
            .members()
            .iter()
            .all(|m| m.identity.id != "wrong" && m.identity.id != "plain"));
    }
    assert_eq!(live_ids(&wrong), ids(&["wrong"]));
    assert_eq!(live_ids(&none), ids(&["plain"]));
    assert_eq!(wrong.members().len(), 1);
    assert_eq!(
        b.stats().bad_mac_dropped,
        0,
        "b is never contacted by intruders"
    );
}

#[tokio::test]
async fn default_lan_config_detects_a_crash_in_a_few_seconds() {
    // The production profile (probe 500 ms, suspicion 2 s): expected ~3 s.
    const BOUND: Duration = Duration::from_secs(8);
    let lan = |name: &str, seeds: Vec<SocketAddr>| {
        MembershipConfig::new(ident(name), seeds).with_secret(b"membership-test".to_vec())
    };
    let seed = Membership::start(lan("a", vec![]), loopback0())
        .await
        .unwrap();
    let mut nodes = vec![seed];
    for name in ["b", "c", "d"] {
        let cfg = lan(name, vec![nodes[0].local_addr()]);
        nodes.push(Membership::start(cfg, loopback0()).await.unwrap());
    }
    let all = ids(&["a", "b", "c", "d"]);
    assert!(
        wait_until(CONVERGE, || nodes.iter().all(|n| live_ids(n) == all))
            .await
            .is_some(),
        "no convergence"
    );
    drop(nodes.pop());
    let detected = time_until_down(&nodes, "d", BOUND).await;
    println!("default LAN config: crash detected in {detected:?} (bound {BOUND:?})");
    assert!(detected.is_some(), "crash not detected within {BOUND:?}");
}

#[tokio::test]
async fn fire_and_forget_leave_still_says_goodbye() {
    let mut nodes = cluster(&["a", "b"]).await;
    nodes.pop().unwrap().leave();
    // Well under the crash bound: only the goodbye can explain it.
    let took = time_until_down(&nodes, "b", Duration::from_millis(900)).await;
    println!("fire-and-forget leave noticed in {took:?}");
    assert!(took.is_some(), "leave() did not announce the departure");
}

#[tokio::test]
async fn a_node_without_a_secret_that_was_not_opened_takes_no_gossip() {
    let alone = Membership::start(MembershipConfig::fast(ident("alone"), vec![]), loopback0())
        .await
        .unwrap();
    let mut open =
        MembershipConfig::fast(ident("knocker"), vec![alone.local_addr()]).insecure_open();
    open.secret = None;
    let knocker = Membership::start(open, loopback0()).await.unwrap();
    let dropped = wait_until(Duration::from_secs(10), || {
        alone.stats().bad_mac_dropped >= 3
    })
    .await;
    assert!(
        dropped.is_some(),
        "announces were not dropped: {:?}",
        alone.stats()
    );
    assert_eq!(live_ids(&alone), ids(&["alone"]));
    assert_eq!(live_ids(&knocker), ids(&["knocker"]));
}
