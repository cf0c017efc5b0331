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
    Landing::new(j.moves.pending(&j.after)).land(HashSet::default());
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
    Landing::new(j.moves.pending(&j.after))
        .land([id("stayed")].into_iter().collect::<HashSet<_>>());
    let landed = taken.landed.get().unwrap();
    assert!(landed.delivered("r", &j.taken, false));
    assert!(!landed.delivered("r", "stayed", false));

    let j = join();
    let taken = j.moves.took(&j.taken, "n3").unwrap();
    drop(Landing::new(j.moves.pending(&j.after)));
    assert_eq!(taken.landed.get(), Some(&Landed::Kept));
    // The first landing counts.
    taken.land(Landed::Delivered {
        kept: HashSet::default(),
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
    Landing::new(j.moves.pending(&j.after)).land(
        [id(&j.taken), id("other")]
            .into_iter()
            .collect::<HashSet<_>>(),
    );
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
    Landing::new(j.moves.pending(&j.after))
        .land([id("stayed")].into_iter().collect::<HashSet<_>>());
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
        landing.land(HashSet::default());
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

/// Guard: a check of a key the change took, reaching this node as a
/// gateway while the handoff is on its way, is decided here while the
/// joiner asks this node about it; neither another's key nor one it
/// kept, nor once the sweep has landed.
#[tokio::test(start_paused = true)]
async fn a_key_on_its_way_is_decided_here_until_its_sweep_lands() {
    let j = join();
    assert!(j.moves.deciding_for(&j.taken, "n3").is_some());
    assert!(j.moves.deciding_for(&j.not_mine, "n3").is_none());
    assert!(j.moves.deciding_for(&j.kept, "n1").is_none());
    // A later change, still to land, does not keep this one deciding.
    j.moves
        .begin(j.after.clone(), ring(&["n1", "n2", "n3", "n4"]));
    Landing::new(j.moves.pending(&j.after)).land(HashSet::default());
    assert!(j.moves.deciding_for(&j.taken, "n3").is_none(), "landed");
}

/// Members by id, each started at the incarnation given.
fn ring_started(members: &[(&str, u64)]) -> Arc<Ring> {
    let addr = "127.0.0.1:1".parse().unwrap();
    let members: Vec<_> = members
        .iter()
        .map(|(id, incarnation)| NodeIdentity {
            boot: 1,
            incarnation: *incarnation,
            ..NodeIdentity::new(*id, addr, addr)
        })
        .collect();
    Arc::new(Ring::with_default_vnodes(&members))
}

/// Guard: a joiner that started before this node does not wait for its
/// word, and never asks it: it decides the keys it took itself, so a
/// check of one is sent there from the first.
#[tokio::test(start_paused = true)]
async fn a_joiner_that_started_first_is_not_foreseen_to_ask() {
    let before = ring_started(&[("n1", 20), ("n2", 30)]);
    let after = ring_started(&[("n1", 20), ("n2", 30), ("n3", 10)]);
    let key = (0..)
        .map(|i| format!("k{i}"))
        .find(|k| before.owner_id(k) == Some("n1") && after.owner_id(k) == Some("n3"))
        .unwrap();
    let moves = Moves::new("n1");
    moves.begin(before, after);
    assert!(moves.took(&key, "n3").is_some());
    assert!(moves.deciding_for(&key, "n3").is_none());
}

/// Guard: a joiner's word, with a handoff call's answer, that it no
/// longer asks this node (it stopped waiting, or took this node for
/// lost) sends the checks of its keys to it from then on; its word that
/// it does brings them back.
#[tokio::test(start_paused = true)]
async fn a_joiners_word_that_it_asks_no_more_sends_its_keys_to_it() {
    let j = join();
    j.moves.told("n3", false, Instant::now());
    assert!(j.moves.deciding_for(&j.taken, "n3").is_none());
    j.moves.told("n3", true, Instant::now());
    assert!(j.moves.deciding_for(&j.taken, "n3").is_some());
}

/// Guard: a joiner's word lapses well before its own wait could have
/// ended without another handoff call: it may have stopped asking.
#[tokio::test(start_paused = true)]
async fn a_joiners_word_lapses_unless_a_handoff_call_renews_it() {
    let j = join();
    tokio::time::advance(ASKED_FOR).await;
    assert!(j.moves.deciding_for(&j.taken, "n3").is_none(), "foreseen");
    let sent = Instant::now();
    j.moves.told("n3", true, sent);
    assert!(j.moves.deciding_for(&j.taken, "n3").is_some());
    tokio::time::advance(ASKED_FOR).await;
    assert!(j.moves.deciding_for(&j.taken, "n3").is_none(), "told");
    assert!(ASKED_FOR < arrivals::WAIT);
}

/// Guard: the count a gateway reads before looking for a move falls
/// back to nothing once every move landed or took nobody in, so that a
/// cluster at rest never looks.
#[test]
fn moves_count_as_unlanded_only_until_they_land() {
    let unlanded = |m: &Moves| m.unlanded.load(Ordering::Relaxed);
    let j = join();
    assert_eq!(unlanded(&j.moves), 1);
    let shrunk = ring(&["n1"]);
    j.moves.begin(j.after.clone(), shrunk);
    assert_eq!(unlanded(&j.moves), 1, "a change that took nobody in");
    Landing::new(j.moves.pending(&j.after)).land(HashSet::default());
    assert_eq!(unlanded(&j.moves), 0);
    let other = ring(&["n1", "n4"]);
    j.moves.begin(j.before.clone(), other);
    drop(Landing::new(j.moves.pending(&j.after)));
    assert_eq!(unlanded(&j.moves), 0, "a sweep dropped lands it as kept");
}
