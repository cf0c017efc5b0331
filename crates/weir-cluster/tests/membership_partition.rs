//! Membership across a partition and its heal, on the in-memory network under a paused clock.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::time::Instant;
use weir_cluster::membership::{MemberState, Membership, MembershipConfig, NodeIdentity};
use weir_cluster::memory::MemoryNet;

/// Virtual time allowed for the sides to split and, after the heal, to merge.
const DEADLINE: Duration = Duration::from_secs(30);

fn start(net: &MemoryNet, name: &str, seeds: &[SocketAddr], foca: foca::Config) -> Membership {
    let socket = net.gossip_socket();
    let addr = socket.local_addr();
    let identity = NodeIdentity::new(name, addr, SocketAddr::new(addr.ip(), 1));
    let mut config =
        MembershipConfig::fast(identity, seeds.to_vec()).with_secret(b"partition".to_vec());
    config.foca = foca;
    Membership::start_on(config, socket).expect("membership starts")
}

fn state_of(m: &Membership, id: &str) -> Option<MemberState> {
    m.members()
        .into_iter()
        .find(|x| x.identity.id == id)
        .map(|x| x.state)
}

fn sees(m: &Membership, ids: &[&str], state: MemberState) -> bool {
    ids.iter().all(|id| state_of(m, id) == Some(state))
}

fn host(m: &Membership) -> IpAddr {
    m.local_addr().ip()
}

/// Polls `cond` every 50 ms of virtual time; panics naming `what` after
/// `DEADLINE`.
async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !cond() {
        assert!(
            started.elapsed() < DEADLINE,
            "{what}: not within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    started.elapsed()
}

/// A node cut off from the rest suspects them; the rest declare it down,
/// and after the heal it rejoins under a new identity. Suspicions it raised
/// under the old one must not outlive the heal: nobody could hear them
/// across the cut, so nobody refuted them, and foca drops their countdowns
/// with the old identity. They are raised again under the new one.
#[tokio::test(start_paused = true)]
async fn suspicions_raised_while_cut_off_do_not_outlive_the_heal() {
    let net = MemoryNet::new();
    // The defaults, less the periodic announce: its Feed also carries the
    // suspicions, but only when it happens to pick the rejoined node (at
    // the defaults, one member every 10 s), which took 20-30 s in the sim.
    let config = || foca::Config {
        periodic_announce: None,
        ..MembershipConfig::lan_foca_config()
    };
    let a = start(&net, "a", &[], config());
    let b = start(&net, "b", &[a.local_addr()], config());
    // c's suspicions outlast the cut, so they are still pending when it
    // rejoins, as happens when a cut is healed within one suspicion period.
    let patient = foca::Config {
        suspect_to_down_after: Duration::from_secs(600),
        ..config()
    };
    let c = start(&net, "c", &[a.local_addr()], patient);
    let all = [&a, &b, &c];
    wait_until("three members form", || {
        all.iter()
            .all(|m| sees(m, &["a", "b", "c"], MemberState::Alive))
    })
    .await;

    net.partition(&[host(&c)], &[host(&a), host(&b)]);
    wait_until("the sides split", || {
        sees(&a, &["c"], MemberState::Down)
            && sees(&b, &["c"], MemberState::Down)
            && sees(&c, &["a", "b"], MemberState::Suspect)
    })
    .await;
    // Every transmission of c's suspicions has gone into the cut.
    wait_until("c has sent on all it knows", || {
        c.stats().updates_backlog == 0
    })
    .await;
    assert!(sees(&c, &["a", "b"], MemberState::Suspect));

    net.heal();
    let took = wait_until("every member sees every other alive after the heal", || {
        all.iter()
            .all(|m| sees(m, &["a", "b", "c"], MemberState::Alive))
    })
    .await;
    println!("whole again {took:?} after the heal");
    assert!(
        took < Duration::from_secs(10),
        "the heal took {took:?} of virtual time"
    );
}
