use super::*;

/// A member that started at `incarnation` (milliseconds).
fn member(id: &str, incarnation: u64) -> NodeIdentity {
    let addr = "127.0.0.1:1".parse().unwrap();
    NodeIdentity {
        incarnation,
        ..NodeIdentity::new(id, addr, addr)
    }
}

fn ring(members: &[&NodeIdentity]) -> Ring {
    let members: Vec<NodeIdentity> = members.iter().map(|m| (*m).clone()).collect();
    Ring::with_default_vnodes(&members)
}

/// A key `owner` owns on `ring` whose owner without it is `previous`.
fn key_from(ring: &Ring, owner: &str, previous: &str) -> String {
    (0..)
        .map(|i| format!("k{i}"))
        .find(|k| {
            ring.owner_id(k) == Some(owner) && ring.replica_of(k).is_some_and(|p| p.id == previous)
        })
        .unwrap()
}

/// node-3, joining at 300, whose ring takes in node-1 (started at 100):
/// the two rings, and a key node-3 took from node-1.
fn joined() -> (Ring, Ring, String) {
    let (old, me) = (member("node-1", 100), member("node-3", 300));
    let (alone, both) = (ring(&[&me]), ring(&[&old, &me]));
    let key = key_from(&both, "node-3", "node-1");
    (alone, both, key)
}

/// [`joined`], with node-3 waiting for node-1's word.
fn waiting() -> (Arrivals, Ring, Ring, String) {
    let (alone, both, key) = joined();
    let arrivals = Arrivals::default();
    arrivals.ring_changed("node-3", &alone, &both);
    (arrivals, alone, both, key)
}

#[test]
fn of_two_members_exactly_one_is_the_older() {
    let (a, b) = (member("node-1", 100), member("node-2", 200));
    assert!(older(&a, &b) && !older(&b, &a));
    // Started in the same millisecond: the id decides.
    let (c, d) = (member("node-1", 100), member("node-2", 100));
    assert!(older(&c, &d) && !older(&d, &c));
    assert!(!older(&a, &a));
}

/// Guard: an older member that enters the ring is asked about the keys
/// this node took from it, and only those.
#[tokio::test(start_paused = true)]
async fn an_older_member_is_asked_about_the_keys_taken_from_it() {
    let (alone, both, key) = joined();
    let arrivals = Arrivals::default();
    assert!(arrivals.asks(&both, &key).is_none(), "nothing entered yet");
    arrivals.ring_changed("node-3", &alone, &both);
    assert_eq!(arrivals.asks(&both, &key).map(|m| &*m.id), Some("node-1"));
}

/// Guard: a member that started after this node holds nothing of its
/// keys and is not asked (it may not know this node, and would decide the
/// key as its own on nothing).
#[tokio::test(start_paused = true)]
async fn a_younger_member_is_not_asked() {
    let (me, young) = (member("node-1", 100), member("node-3", 300));
    let both = ring(&[&me, &young]);
    let key = key_from(&both, "node-1", "node-3");
    let arrivals = Arrivals::default();
    arrivals.ring_changed("node-1", &ring(&[&me]), &both);
    assert!(arrivals.asks(&both, &key).is_none());
}

/// Guard: once the member says its handoff is done, it is not asked.
#[tokio::test(start_paused = true)]
async fn a_member_whose_handoff_is_done_is_not_asked() {
    let (arrivals, _, both, key) = waiting();
    arrivals.arrived("node-1");
    assert!(arrivals.asks(&both, &key).is_none());
}

/// Guard: a member that said so before this node's ring took it in (its
/// own ring took this node in first) is not waited for when it enters.
#[tokio::test(start_paused = true)]
async fn a_member_that_said_so_before_it_entered_is_not_asked() {
    let (alone, both, key) = joined();
    let arrivals = Arrivals::default();
    arrivals.arrived("node-1");
    arrivals.ring_changed("node-3", &alone, &both);
    assert!(arrivals.asks(&both, &key).is_none());
}

/// Guard: a member that never says (its handoff failed, or it does not
/// know this node is new) is asked for [`WAIT`] at most.
#[tokio::test(start_paused = true)]
async fn a_member_is_asked_for_the_wait_at_most() {
    let (arrivals, _, both, key) = waiting();
    tokio::time::sleep(WAIT - Duration::from_millis(1)).await;
    assert!(arrivals.asks(&both, &key).is_some(), "within the wait");
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(arrivals.asks(&both, &key).is_none(), "after it");
}

/// Guard: each handoff call from a member still waited for starts the
/// wait again, so a sweep longer than [`WAIT`] is waited out; once its
/// calls stop, the wait ends [`WAIT`] after the last.
#[tokio::test(start_paused = true)]
async fn a_member_whose_sweep_is_still_coming_is_asked_past_the_wait() {
    let (arrivals, _, both, key) = waiting();
    tokio::time::sleep(WAIT - Duration::from_secs(1)).await;
    arrivals.heard_from("node-1");
    arrivals.heard_from("node-2");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(arrivals.asks(&both, &key).is_some(), "its sweep still came");
    tokio::time::sleep(WAIT - Duration::from_secs(2)).await;
    assert!(
        arrivals.asks(&both, &key).is_none(),
        "a wait after its last call"
    );
    arrivals.heard_from("node-1");
    assert!(
        arrivals.asks(&both, &key).is_none(),
        "an ended wait stays ended"
    );
}

/// Guard: a member that leaves the ring is no longer waited for (a
/// leaving member hands its counters over before it goes).
#[tokio::test(start_paused = true)]
async fn a_member_that_left_is_not_asked() {
    let (arrivals, alone, both, key) = waiting();
    arrivals.ring_changed("node-3", &both, &alone);
    assert!(arrivals.asks(&both, &key).is_none());
    // Back: it may hold counts again (a healed partition), and is waited
    // for again.
    arrivals.ring_changed("node-3", &alone, &both);
    assert!(arrivals.asks(&both, &key).is_some());
}

/// Guard: a member given up on (an asked op went unanswered) is asked no
/// more, but, unlike one that said its handoff was done, is waited for
/// again when it enters the ring again.
#[tokio::test(start_paused = true)]
async fn a_member_given_up_on_is_not_asked_until_it_enters_again() {
    let (arrivals, alone, both, key) = waiting();
    arrivals.give_up("node-1");
    assert!(arrivals.asks(&both, &key).is_none());
    arrivals.ring_changed("node-3", &both, &alone);
    arrivals.ring_changed("node-3", &alone, &both);
    assert!(arrivals.asks(&both, &key).is_some());
}
