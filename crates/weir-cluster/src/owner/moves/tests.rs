//! Which keys a ring change took from this node, and how its sweep ended.

use std::time::Duration;

use super::*;
use crate::topology::membership::NodeIdentity;
use weir_core::{FakeClock, Limiter, LimiterConfig, RuleSet};

/// Members by id, each the same process in every ring built here.
fn ring(ids: &[&str]) -> Arc<Ring> {
    let addr = "127.0.0.1:1".parse().unwrap();
    let members: Vec<_> = ids
        .iter()
        .map(|id| NodeIdentity {
            boot: 1,
            ..NodeIdentity::new(*id, addr, addr)
        })
        .collect();
    Arc::new(Ring::with_default_vnodes(&members))
}

fn id(key: &str) -> CounterId {
    ("r".into(), key.into(), false)
}

/// n1's view as n3 joins n1 and n2: the two rings, and a key of each kind.
struct Join {
    moves: Moves,
    before: Arc<Ring>,
    after: Arc<Ring>,
    /// n1's before, n3's after.
    taken: String,
    /// n2's before, n3's after.
    not_mine: String,
    /// n1's before and after.
    kept: String,
}

fn join() -> Join {
    let (before, after) = (ring(&["n1", "n2"]), ring(&["n1", "n2", "n3"]));
    let key = |was: &str, is: &str| {
        (0..)
            .map(|i| format!("k{i}"))
            .find(|k| before.owner_id(k) == Some(was) && after.owner_id(k) == Some(is))
            .unwrap()
    };
    let moves = Moves::new("n1");
    moves.begin(before.clone(), after.clone());
    Join {
        taken: key("n1", "n3"),
        not_mine: key("n2", "n3"),
        kept: key("n1", "n1"),
        moves,
        before,
        after,
    }
}

#[test]
fn a_ring_change_took_the_keys_it_moved_from_this_node_to_their_owner_now() {
    let j = join();
    assert!(j.moves.took(&j.taken, "n3").is_some());
    assert!(j.moves.took(&j.not_mine, "n3").is_none(), "n2's before");
    assert!(j.moves.took(&j.kept, "n1").is_none(), "still n1's");
    assert!(
        j.moves.took(&j.taken, "n2").is_none(),
        "an owner the change did not give it to"
    );
}

#[test]
fn a_sweep_lands_the_changes_begun_before_its_ring_was_routed_by() {
    let j = join();
    let later = ring(&["n1", "n2", "n3", "n4"]);
    // Begun (the ring is about to be routed by) after the sweep read its ring.
    j.moves.begin(j.after.clone(), later.clone());
    assert_eq!(j.moves.pending(&j.after).len(), 1, "not the one from it");
    assert_eq!(j.moves.pending(&later).len(), 2);
    Landing::new(j.moves.pending(&j.after)).land(HashSet::new());
    assert_eq!(j.moves.pending(&later).len(), 1, "landed once");
}

#[test]
fn a_change_that_only_drops_members_takes_nothing_and_its_sweep_lands_the_join_before() {
    let j = join();
    let lost = ring(&["n1", "n3"]);
    j.moves.begin(j.after.clone(), lost.clone());
    assert_eq!(j.moves.recent.lock().len(), 1, "not recorded");
    assert_eq!(j.moves.pending(&lost).len(), 1, "the join's");
}

#[test]
fn a_members_new_process_is_recorded_for_its_word_and_takes_no_keys() {
    let j = join();
    let restarted: Vec<NodeIdentity> = j
        .after
        .members()
        .iter()
        .map(|m| match &*m.id {
            "n2" => NodeIdentity {
                boot: 2,
                ..m.clone()
            },
            _ => m.clone(),
        })
        .collect();
    let restarted = Arc::new(Ring::with_default_vnodes(&restarted));
    j.moves.begin(j.after.clone(), restarted.clone());
    let pending = j.moves.pending(&restarted);
    let joined: Vec<&str> = pending[1].joined().map(|m| &*m.id).collect();
    assert_eq!(joined, ["n2"]);
    // The newest change that took the key is still the join.
    let took = j.moves.took(&j.taken, "n3").unwrap();
    assert!(Arc::ptr_eq(&took, &pending[0]));
}

#[test]
fn a_landing_names_the_counters_that_stayed_and_a_dropped_one_kept_them_all() {
    let j = join();
    let taken = j.moves.took(&j.taken, "n3").unwrap();
    Landing::new(j.moves.pending(&j.after)).land(HashSet::from([id("stayed")]));
    let landed = taken.landed.get().unwrap();
    assert!(landed.delivered("r", &j.taken, false));
    assert!(!landed.delivered("r", "stayed", false));

    let j = join();
    let taken = j.moves.took(&j.taken, "n3").unwrap();
    drop(Landing::new(j.moves.pending(&j.after)));
    assert_eq!(taken.landed.get(), Some(&Landed::Kept));
    // The first landing counts.
    taken.land(Landed::Delivered {
        kept: HashSet::new(),
    });
    assert_eq!(taken.landed.get(), Some(&Landed::Kept));
}

/// The counter of rule `r` and `key`, one spent.
fn counter(key: &str) -> CounterSnapshot {
    let rules =
        "[[rule]]\nname = \"r\"\nalgorithm = \"fixed_window\"\nlimit = 5\nwindow = \"60s\"\n";
    let limiter = Limiter::new(
        RuleSet::from_toml(rules).unwrap(),
        Arc::new(FakeClock::at_secs(1_000.0)),
        LimiterConfig::default(),
    );
    limiter.consume("r", key, 1, limiter.now()).unwrap();
    limiter.snapshot("r", key).unwrap()
}

#[test]
fn a_counter_its_sweep_kept_is_with_its_owner_once_a_later_sweep_delivers_it() {
    let j = join();
    let taken = j.moves.took(&j.taken, "n3").unwrap();
    assert!(!taken.delivered("r", &j.taken, false), "not landed yet");
    Landing::new(j.moves.pending(&j.after)).land(HashSet::from([id(&j.taken), id("other")]));
    assert!(!taken.delivered("r", &j.taken, false), "kept");
    j.moves.delivered_later(&[counter(&j.taken)]);
    assert!(taken.delivered("r", &j.taken, false));
    assert!(!taken.delivered("r", "other", false), "still kept");
    assert!(taken.kept_any());
    j.moves.delivered_later(&[counter("other")]);
    assert!(taken.delivered("r", "other", false));
    assert!(!taken.kept_any(), "every kept counter delivered since");

    // Kept whole (its sweep dropped): each counter it gave the joiner as
    // it is delivered, and no other (a key it left with n1, delivered
    // after a later change moved it, is not the move's to record).
    let j = join();
    let taken = j.moves.took(&j.taken, "n3").unwrap();
    drop(Landing::new(j.moves.pending(&j.after)));
    j.moves
        .delivered_later(&[counter(&j.taken), counter(&j.kept)]);
    assert!(taken.delivered("r", &j.taken, false));
    assert!(!taken.delivered("r", "other", false));
    assert!(!taken.delivered("r", &j.kept, false));
    assert_eq!(taken.delivered_later.lock().len(), 1);
}

#[test]
fn the_change_that_took_a_process_in_is_found_after_its_sweep_landed() {
    let j = join();
    let n3 = j.after.members().iter().find(|m| m.id == "n3").unwrap();
    let taking = j.moves.taking_in("n3", n3.boot).unwrap();
    Landing::new(j.moves.pending(&j.after)).land(HashSet::from([id("stayed")]));
    let landed = j.moves.taking_in("n3", n3.boot).unwrap();
    assert!(Arc::ptr_eq(&taking, &landed));
    assert!(!landed.delivered("r", "stayed", false));
    assert!(
        j.moves.taking_in("n3", n3.boot + 1).is_none(),
        "another process"
    );
}

#[tokio::test(start_paused = true)]
async fn a_check_waiting_on_a_move_resumes_when_it_lands() {
    let j = join();
    let taken = j.moves.took(&j.taken, "n3").unwrap();
    let waiting = tokio::time::timeout(Duration::from_millis(10), taken.landed()).await;
    assert!(waiting.is_err(), "not landed yet");
    let landing = Landing::new(j.moves.pending(&j.after));
    let (landed, ()) = tokio::join!(taken.landed(), async {
        tokio::task::yield_now().await;
        landing.land(HashSet::new());
    });
    assert!(landed.delivered("r", &j.taken, false));
}

#[test]
fn only_the_newest_changes_are_remembered() {
    let j = join();
    let other = ring(&["n1", "n4"]);
    for _ in 1..REMEMBERED {
        j.moves.begin(j.before.clone(), other.clone());
    }
    assert!(j.moves.took(&j.taken, "n3").is_some());
    j.moves.begin(j.before.clone(), other.clone());
    assert!(j.moves.took(&j.taken, "n3").is_none(), "the oldest dropped");
}
