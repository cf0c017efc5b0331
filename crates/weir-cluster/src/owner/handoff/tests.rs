//! What a received handoff adds, whatever this node did with its copy of the counter first.

use std::time::Duration;

use super::*;
use crate::owner::moves::Move;
use crate::owner::replica::{Admitted, StandIn};
use weir_core::{AlgorithmKind, Decision, FakeClock, LimiterConfig, Nanos, RuleSet};

#[test]
fn a_handed_over_counter_keeps_its_spent_budget() {
    let rules = RuleSet::from_toml(
        "[[rule]]\nname = \"r\"\nalgorithm = \"sliding_window_log\"\nlimit = 5\nwindow = \"60s\"\n",
    )
    .unwrap();
    let clock = Arc::new(FakeClock::at_secs(1000.0));
    let old = Limiter::new(rules.clone(), clock.clone(), LimiterConfig::default());
    let new = Limiter::new(rules, clock, LimiterConfig::default());
    for _ in 0..3 {
        assert!(old.consume("r", "k", 1, old.now()).unwrap().allowed);
    }
    // The new owner already admitted one on a fresh counter.
    assert!(new.consume("r", "k", 1, new.now()).unwrap().allowed);
    let copies = Replicas::new(&new);
    let replicator = Replicator::new(true);
    assert_eq!(
        absorb(
            &new,
            &copies,
            &replicator,
            &sender("old", 1, &new),
            sent(&old)
        )
        .accepted,
        1
    );
    // Its sender keeps no copy of it: it is copied from here.
    assert_eq!(replicator.pending(), 1, "marked for its holder's copy");
    let d = new.consume("r", "k", 1, new.now()).unwrap();
    assert!(d.allowed);
    assert_eq!(d.remaining, 0, "3 + 1 + this one = 5");
    assert!(!new.consume("r", "k", 1, new.now()).unwrap().allowed);
}

#[test]
fn counters_of_unknown_rules_and_garbage_are_dropped() {
    let clock = Arc::new(FakeClock::at_secs(1000.0));
    let l = Limiter::new(RuleSet::empty(), clock, LimiterConfig::default());
    let garbage = CounterState {
        carried: None,
        rule: "r".into(),
        key: "k".into(),
        state: vec![0xff, 0xff, 0xff],
    };
    assert_eq!(
        absorb(
            &l,
            &Replicas::new(&l),
            &Replicator::new(true),
            &sender("peer", 1, &l),
            vec![garbage]
        ),
        Absorbed {
            accepted: 0,
            refused: 1
        }
    );
}

/// A handoff's sender, whose counters are in `l`.
fn sender<'a>(node: &'a str, boot: u64, l: &Limiter) -> Sender<'a> {
    Sender {
        node,
        boot,
        at: l.now(),
    }
}

/// Every counter `l` holds, taken as a leaving node takes them.
fn sent(l: &Limiter) -> Vec<CounterState> {
    l.take_unless(|_| false)
        .iter()
        .filter_map(wire::snapshot_to_wire)
        .collect()
}

const LIMIT: usize = 20;
const OWNER: &str = "n3";
const BOOT: u64 = 7;
const ME: &str = "n1";

/// A key `n3` owned, with `n1` holding its copy: once `n3` leaves, `n1`
/// owns it.
struct Scene {
    clock: Arc<FakeClock>,
    /// `n3`'s counters.
    owner: Limiter,
    /// `n1`'s counters and its copies of `n3`'s.
    main: Limiter,
    copies: Replicas,
    /// The ring with n3, which n1 takes copies by.
    with_owner: Ring,
    rule: &'static str,
    key: String,
}

impl Scene {
    /// `n3` has admitted `copied` for the key and streamed that count to
    /// `n1`.
    fn new(kind: AlgorithmKind, copied: usize) -> Scene {
        let s = Scene::uncopied(kind);
        s.owner_admits(copied);
        let copy = s.owner.snapshot(s.rule, &s.key).unwrap();
        assert_eq!(s.take(s.owner.now(), copy), 1);
        s
    }

    /// No copy of the key has reached `n1` yet.
    fn uncopied(kind: AlgorithmKind) -> Scene {
        let rule = kind.as_str();
        let burst = if kind == AlgorithmKind::LeakyBucket {
            format!("burst = {LIMIT}\n")
        } else {
            String::new()
        };
        let toml = format!(
            "[[rule]]\nname = \"{rule}\"\nalgorithm = \"{rule}\"\nlimit = {LIMIT}\nwindow = \"60s\"\n{burst}"
        );
        let rules = RuleSet::from_toml(&toml).unwrap();
        let clock = Arc::new(FakeClock::at_secs(9_000.0));
        let owner = Limiter::new(rules.clone(), clock.clone(), LimiterConfig::default());
        let main = Limiter::new(rules, clock.clone(), LimiterConfig::default());
        let copies = Replicas::new(&main);
        let with_owner = Ring::with_default_vnodes(&[node(ME), node("n2"), node(OWNER)]);
        let after = Ring::with_default_vnodes(&[node(ME), node("n2")]);
        let key = (0..)
            .map(|i| format!("k{i}"))
            .find(|k| with_owner.owner_id(k) == Some(OWNER) && after.owner_id(k) == Some(ME))
            .unwrap();
        Scene {
            clock,
            owner,
            main,
            copies,
            with_owner,
            rule,
            key,
        }
    }

    /// A copy n3 took at `taken_at` reaches n1.
    fn take(&self, taken_at: Nanos, copy: CounterSnapshot) -> u32 {
        self.copies
            .take(OWNER, BOOT, taken_at, vec![copy], &self.with_owner)
    }

    /// `n3` admits `n` more, a millisecond on; returns when.
    fn owner_admits(&self, n: usize) -> Nanos {
        self.clock.advance(Duration::from_millis(1));
        let at = self.owner.now();
        for _ in 0..n {
            let d = self.owner.consume(self.rule, &self.key, 1, at).unwrap();
            assert!(d.allowed, "{}: {d:?}", self.rule);
        }
        at
    }

    /// A gateway reports to `me` that `n3` admitted `n` at `at`; how many
    /// were added.
    fn reported(&self, n: usize, at: Nanos, me: &str) -> usize {
        let a = Admitted {
            owner: OWNER,
            rule: self.rule,
            hash_part: &self.key,
            cost: 1,
            at,
        };
        (0..n)
            .filter(|_| {
                self.copies
                    .admitted_by(&a, &self.main, &self.with_owner, me)
            })
            .count()
    }

    /// `n1`'s ring drops `n3`: the copy becomes `n1`'s counter. Returns
    /// how many copies were promoted.
    fn ring_drops_the_owner(&self) -> usize {
        let after = Ring::with_default_vnodes(&[node(ME), node("n2")]);
        let (promoted, theirs) = self.copies.on_ring(&after, ME, &self.main);
        assert!(theirs.is_empty());
        promoted
    }

    /// `n3`'s handoff, from the process `boot`, reaches `n1`.
    fn handoff_arrives(&self, boot: u64) {
        let counters = sent(&self.owner);
        let from = sender(OWNER, boot, &self.owner);
        assert_eq!(
            absorb(
                &self.main,
                &self.copies,
                &Replicator::new(true),
                &from,
                counters
            )
            .accepted,
            1
        );
    }

    /// `n1` stands in for `n3` on the key, for a gateway that lost `n3`:
    /// on its copy, or with none, on its counters, as its callers do.
    fn stand_in(&self) -> StandIn<Decision> {
        let here = || self.main.consume(self.rule, &self.key, 1, self.main.now());
        match self.copies.stand_in(self.rule, &self.key, 1, here).unwrap() {
            StandIn::Here(d) => StandIn::Here(d.unwrap()),
            StandIn::Copy(d) => StandIn::Copy(d),
        }
    }

    /// A stand-in that must be decided on the copy.
    fn on_the_copy(&self) -> Decision {
        match self.stand_in() {
            StandIn::Copy(d) => d,
            here => panic!("{}: decided on n1's counters: {here:?}", self.rule),
        }
    }

    /// What `n1` still admits for the key.
    fn left(&self) -> usize {
        let now = self.main.now();
        (0..2 * LIMIT)
            .filter(|_| {
                let d = self.main.consume(self.rule, &self.key, 1, now).unwrap();
                d.allowed
            })
            .count()
    }
}

/// A member, every one's process [`BOOT`].
pub(super) fn node(id: &str) -> NodeIdentity {
    let addr = "127.0.0.1:1".parse().unwrap();
    NodeIdentity {
        boot: BOOT,
        ..NodeIdentity::new(id, addr, addr)
    }
}

/// Guard: a handoff that lands after the receiver's ring dropped its sender
/// finds the copy promoted already, with an admission a gateway reported
/// charged onto it; only what the owner spent past the copy is added.
/// Merged whole, the key counted 30 of 20 and denied for a window.
#[test]
fn a_handoff_after_the_copy_was_promoted_adds_only_what_the_owner_spent_past_it() {
    for kind in AlgorithmKind::ALL {
        let s = Scene::new(kind, 13);
        let at = s.owner_admits(1);
        s.owner_admits(1);
        assert_eq!(s.ring_drops_the_owner(), 1);
        // A gateway n3 answered reports its 14th admission; its 15th
        // (n3's own, say) only the handoff carries.
        assert_eq!(s.reported(1, at, ME), 1);
        s.handoff_arrives(BOOT);
        assert_eq!(s.left(), LIMIT - 15, "{kind:?}");
    }
}

/// Guard: a copy whose owner came back on the ring as another process
/// (restarted with its id, before any ring dropped it) goes to that
/// process, which holds none of the key's count; a ring with the owner's
/// own process keeps it. Kept as a live owner's copy, the restarted owner
/// granted the key a fresh window: the sim's restart fault read 9% over.
#[test]
fn a_copy_of_an_owner_that_restarted_goes_to_the_restarted_owner() {
    let with = |boot| {
        let owner = NodeIdentity {
            boot,
            ..node(OWNER)
        };
        Ring::with_default_vnodes(&[node(ME), node("n2"), owner])
    };
    let s = Scene::new(AlgorithmKind::SlidingWindowLog, 5);
    let (promoted, theirs) = s.copies.on_ring(&with(BOOT), ME, &s.main);
    assert_eq!((promoted, theirs.len()), (0, 0), "the same process");
    let (promoted, theirs) = s.copies.on_ring(&with(BOOT + 1), ME, &s.main);
    assert_eq!(promoted, 0);
    let keys: Vec<&str> = theirs.iter().map(|c| c.hash_part.as_str()).collect();
    assert_eq!(keys, [s.key.as_str()], "for the restarted owner");
}

/// Guard: `n3` admitted the key and crashed before any copy of it
/// reached `n1`. The admissions its gateways report start a copy, which
/// the ring change promotes: the key's next owner does not grant them
/// again. Dropped, as they were, the key admitted 20 more.
#[test]
fn admissions_made_before_the_first_copy_are_counted_by_the_next_owner() {
    for kind in AlgorithmKind::ALL {
        let s = Scene::uncopied(kind);
        let at = s.owner_admits(5);
        assert_eq!(s.reported(5, at, ME), 5, "{kind:?}");
        assert_eq!(s.ring_drops_the_owner(), 1, "{kind:?}");
        assert_eq!(s.left(), LIMIT - 5, "{kind:?}");
    }
}

/// Guard: with no copy of the key, `n1` stood in for `n3` on its own
/// counters (a check it decided for itself) before a gateway's report of
/// what `n3` admitted arrived. The report is added to those counters:
/// started as a copy beside them, it decided the next stand-ins without
/// the first, and the ring's drop of `n3` added both (16 admitted after
/// the crash, and a count of 21 of 20).
#[test]
fn admissions_reported_after_a_stand_in_on_this_nodes_counters_join_them() {
    for kind in AlgorithmKind::ALL {
        let s = Scene::uncopied(kind);
        let at = s.owner_admits(5);
        let first = s.stand_in();
        assert!(
            matches!(first, StandIn::Here(ref d) if d.allowed),
            "{first:?}"
        );
        assert_eq!(s.reported(5, at, ME), 5, "{kind:?}");
        let more = (0..2 * LIMIT)
            .filter(|_| matches!(s.stand_in(), StandIn::Here(d) if d.allowed))
            .count();
        assert_eq!(more, LIMIT - 6, "5 reported, 1 stood in: {kind:?}");
        assert_eq!(s.ring_drops_the_owner(), 0, "no copy: {kind:?}");
        assert_eq!(s.left(), 0, "{kind:?}");
    }
}

/// A copy `n3` took before the reported admissions, landing after their
/// report, replaces the started copy and keeps them on top; one it took
/// after them already holds them.
#[test]
fn a_copy_landing_after_the_report_keeps_only_what_it_lacks() {
    for kind in AlgorithmKind::ALL {
        let s = Scene::uncopied(kind);
        s.owner_admits(2);
        let (early, early_at) = (s.owner.snapshot(s.rule, &s.key).unwrap(), s.owner.now());
        let at = s.owner_admits(3);
        assert_eq!(s.reported(3, at, ME), 3, "{kind:?}");
        assert_eq!(s.take(early_at, early), 1, "{kind:?}");
        assert_eq!(s.ring_drops_the_owner(), 1, "{kind:?}");
        assert_eq!(s.left(), LIMIT - 5, "2 in the copy, 3 reported: {kind:?}");

        let s = Scene::uncopied(kind);
        let at = s.owner_admits(3);
        assert_eq!(s.reported(3, at, ME), 3, "{kind:?}");
        s.owner_admits(1);
        let late = s.owner.snapshot(s.rule, &s.key).unwrap();
        assert_eq!(s.take(s.owner.now(), late), 1, "{kind:?}");
        assert_eq!(s.ring_drops_the_owner(), 1, "{kind:?}");
        assert_eq!(s.left(), LIMIT - 4, "the copy holds all four: {kind:?}");
    }
}

/// Guard: `n3` left gracefully and handed the key over before any copy
/// of it reached `n1`; a gateway's report of what it admitted before the
/// handoff then starts no copy, which the ring change would promote on
/// top of the handed count.
#[test]
fn admissions_reported_after_their_handoff_are_not_counted_again() {
    for kind in AlgorithmKind::ALL {
        let s = Scene::uncopied(kind);
        let at = s.owner_admits(4);
        s.handoff_arrives(BOOT);
        assert_eq!(s.reported(4, at, ME), 0, "{kind:?}");
        assert_eq!(s.ring_drops_the_owner(), 0, "{kind:?}");
        assert_eq!(s.left(), LIMIT - 4, "{kind:?}");
    }
}

/// A report that lands before the handoff starts a copy, and the handoff
/// supersedes it: the admissions count once.
#[test]
fn admissions_reported_before_their_handoff_count_once() {
    for kind in AlgorithmKind::ALL {
        let s = Scene::uncopied(kind);
        let at = s.owner_admits(4);
        assert_eq!(s.reported(4, at, ME), 4, "{kind:?}");
        s.handoff_arrives(BOOT);
        assert_eq!(s.ring_drops_the_owner(), 0, "{kind:?}");
        assert_eq!(s.left(), LIMIT - 4, "{kind:?}");
    }
}

/// Guard: once `n3` handed its counters over, what it sent on to `n1`
/// as it left was decided here, on the handed count. A gateway that
/// called `n3` reports that admission as `n3`'s, at `n1`'s decision time,
/// later than the handoff: it must start no copy, which the ring change
/// would promote on top of the count that holds it already.
#[test]
fn an_admission_sent_on_by_a_leaving_owner_is_not_counted_again() {
    for kind in AlgorithmKind::ALL {
        let s = Scene::uncopied(kind);
        s.owner_admits(4);
        s.handoff_arrives(BOOT);
        s.clock.advance(Duration::from_millis(1));
        let at = s.main.now();
        assert!(s.main.consume(s.rule, &s.key, 1, at).unwrap().allowed);
        assert_eq!(s.reported(1, at, ME), 0, "{kind:?}");
        assert_eq!(s.ring_drops_the_owner(), 0, "{kind:?}");
        assert_eq!(s.left(), LIMIT - 5, "{kind:?}");
    }
}

/// Guard: only the key's holder on this node's ring starts a copy. On
/// `n2`, which holds none of `n3`'s copies of this key, a report starts
/// nothing that a later ring change could promote.
#[test]
fn a_node_that_is_not_the_keys_holder_starts_no_copy() {
    let s = Scene::uncopied(AlgorithmKind::TokenBucket);
    let at = s.owner_admits(2);
    assert_eq!(s.reported(2, at, "n2"), 0);
    assert_eq!(s.copies.holder_of(s.rule, &s.key), None);
}

/// Guard: a handoff that lands first supersedes the copy, so a ring
/// change after it has nothing to promote on top of the handed count.
#[test]
fn a_handoff_before_the_ring_change_leaves_no_copy_to_promote() {
    for kind in AlgorithmKind::ALL {
        let s = Scene::new(kind, 14);
        s.owner_admits(1);
        s.handoff_arrives(BOOT);
        assert_eq!(s.ring_drops_the_owner(), 0, "{kind:?}");
        assert_eq!(s.left(), LIMIT - 15, "{kind:?}");
    }
}

/// A sender that restarted since the copy was taken holds none of it:
/// its count is added whole to the promoted copy.
#[test]
fn a_handoff_from_a_restarted_owner_is_added_whole() {
    for kind in AlgorithmKind::ALL {
        let s = Scene::new(kind, 14);
        assert_eq!(s.ring_drops_the_owner(), 1);
        // The restarted n3 began empty and admitted two.
        s.owner.take_unless(|_| false);
        s.owner_admits(2);
        s.handoff_arrives(BOOT + 1);
        assert_eq!(s.left(), LIMIT - 16, "{kind:?}");
    }
}

/// Admissions n1 decided on the copy while n3 was unreachable, and never
/// charged to it, are in the promoted copy but not in n3's count: they
/// stay counted when the handoff settles the key.
#[test]
fn stand_in_admissions_the_owner_never_got_stay_counted() {
    for kind in AlgorithmKind::ALL {
        let s = Scene::new(kind, 10);
        for _ in 0..2 {
            let d = s.on_the_copy();
            assert!(d.allowed, "{kind:?}: {d:?}");
        }
        s.owner_admits(3);
        assert_eq!(s.ring_drops_the_owner(), 1);
        s.handoff_arrives(BOOT);
        assert_eq!(s.left(), LIMIT - 15, "10 + 3 at n3, 2 at n1: {kind:?}");
    }
}

/// Guard: n3, full, is charged past its limit (gateways reporting what they
/// admitted on their fallback) before its handoff. Its log keeps the newest
/// L and drops the copy's oldest entries, so it holds as many as the copy
/// and still spent since. Once the copy's entries leave the window, n1 must
/// still count the charged ones: counted as the difference alone, it lent
/// them again (20 of 20 left, not 17).
#[test]
fn a_full_owner_charged_past_its_limit_hands_over_what_it_was_charged() {
    let s = Scene::new(AlgorithmKind::SlidingWindowLog, LIMIT);
    assert_eq!(s.ring_drops_the_owner(), 1);
    s.clock.advance(Duration::from_millis(1));
    s.owner.charge(s.rule, &s.key, 3).unwrap();
    s.handoff_arrives(BOOT);
    assert_eq!(s.left(), 0, "the window is full");
    // The copy's entries have left the window; the charged ones have not.
    s.clock.advance(Duration::from_millis(59_999));
    assert_eq!(s.left(), LIMIT - 3);
}

/// Guard: a copy n3 took before its handoff, carried by a replication call
/// still in flight, lands after the handoff. Taken, it was promoted on the
/// ring change on top of the handed count (15 + 15 of 20, the rolling
/// restart that denied for a window). A copy n3 takes later is taken.
#[test]
fn a_copy_older_than_the_handoff_is_refused() {
    for kind in AlgorithmKind::ALL {
        let s = Scene::new(kind, 14);
        let taken_at = s.owner_admits(1);
        let in_flight = s.owner.snapshot(s.rule, &s.key).unwrap();
        s.handoff_arrives(BOOT);
        assert_eq!(s.take(taken_at, in_flight.clone()), 0);
        assert_eq!(s.ring_drops_the_owner(), 0, "{kind:?}");
        assert_eq!(s.left(), LIMIT - 15, "{kind:?}");

        s.clock.advance(Duration::from_millis(1));
        let later = s.owner.now();
        assert_eq!(s.take(later, in_flight), 1, "{kind:?}");
    }
}

/// Guard: a copy from a new process of `n3` (restarted under its id)
/// that `n1`'s ring does not list yet is refused. Taken, it replaced the
/// old process's copy, 12 spent, with the new one's 2, and the ring
/// taking the new process in handed it back its own count: the key lent
/// the old process's 12 again.
#[test]
fn a_copy_from_a_process_the_ring_does_not_list_is_refused() {
    for kind in AlgorithmKind::ALL {
        let s = Scene::new(kind, 12);
        let rules = (*s.owner.rules()).clone();
        let restarted = Limiter::new(rules, s.clock.clone(), LimiterConfig::default());
        for _ in 0..2 {
            restarted.consume(s.rule, &s.key, 1, s.owner.now()).unwrap();
        }
        let copy = restarted.snapshot(s.rule, &s.key).unwrap();
        let at = restarted.now();
        let taken = s
            .copies
            .take(OWNER, BOOT + 1, at, vec![copy], &s.with_owner);
        assert_eq!(taken, 0, "{kind:?}");
        assert_eq!(s.ring_drops_the_owner(), 1, "{kind:?}");
        assert_eq!(s.left(), LIMIT - 12, "the old process's count: {kind:?}");
    }
}

/// Guard: a copy of a key its sender does not own on this node's ring is
/// refused. One x sent before a join moved the key to n lands after the
/// ring change that dropped the copy held here; kept, it would be handed
/// to n on top of n's count were x to die.
#[test]
fn a_copy_from_a_node_that_no_longer_owns_the_key_is_refused() {
    let s = Scene::new(AlgorithmKind::SlidingWindowCounter, 5);
    let copy = s.owner.snapshot(s.rule, &s.key).unwrap();
    let moved = Ring::with_default_vnodes(&[node(ME), node("n2")]);
    let at = s.owner.now();
    assert_eq!(
        s.copies.take(OWNER, BOOT, at, vec![copy.clone()], &moved),
        0
    );
    assert_eq!(s.take(at, copy), 1);
}

/// Guard: n3, leaving, has handed the full key over; a gateway whose ring
/// still lists n3 asks n1 to stand in for it (n3 had answered that it
/// could not decide). The copy is settled into n1's counters, so the op
/// goes there. Decided on a fresh copy in its place, it was admitted on a
/// second budget.
#[test]
fn a_stand_in_after_the_handoff_goes_to_the_handed_count() {
    for kind in AlgorithmKind::ALL {
        let s = Scene::new(kind, 14);
        s.owner_admits(LIMIT - 14);
        s.handoff_arrives(BOOT);
        let here = s.stand_in();
        assert!(
            matches!(here, StandIn::Here(ref d) if !d.allowed),
            "{here:?}"
        );
        assert_eq!(s.left(), 0, "{kind:?}");
    }
}

/// Guard: the same once n1's ring has dropped n3 and promoted the copy,
/// for a gateway whose ring has not.
#[test]
fn a_stand_in_after_the_promotion_goes_to_the_promoted_count() {
    for kind in AlgorithmKind::ALL {
        let s = Scene::new(kind, LIMIT);
        assert_eq!(s.ring_drops_the_owner(), 1);
        let here = s.stand_in();
        assert!(
            matches!(here, StandIn::Here(ref d) if !d.allowed),
            "{here:?}"
        );
        assert_eq!(s.left(), 0, "{kind:?}");
    }
}

/// A stand-in admission refunded after the handoff settled it into n1's
/// counters is given back there: it was counted there.
#[test]
fn a_stand_in_refunded_after_the_handoff_is_given_back_where_it_was_counted() {
    let s = Scene::new(AlgorithmKind::FixedWindow, 10);
    let d = s.on_the_copy();
    assert!(d.allowed, "{d:?}");
    s.owner_admits(3);
    s.handoff_arrives(BOOT);
    s.copies.refund(s.rule, &s.key, d.at, 1, &s.main);
    assert_eq!(s.left(), LIMIT - 13, "10 + 3 at n3; n1's one refunded");
}

/// This node (`ME`), on a host of its own on `net`, with `OWNER` (on the
/// host `owner`) on its ring: its handoff, its counters, its host, and a
/// key `OWNER` owns.
pub(super) struct Holder {
    pub(super) handoff: Handoff,
    pub(super) local: Arc<Local>,
    pub(super) host: std::net::IpAddr,
    pub(super) key: String,
}

fn holder_of_strays(net: &crate::memory::MemoryNet, owner: std::net::IpAddr) -> Holder {
    let (host, link) = net.link();
    // Calls are routed by host; the port is not looked at.
    let addr = std::net::SocketAddr::new(owner, 1);
    let ring = Ring::with_default_vnodes(&[node(ME), NodeIdentity::new(OWNER, addr, addr)]);
    let key = (0..)
        .map(|i| format!("k{i}"))
        .find(|k| ring.owner_id(k) == Some(OWNER))
        .unwrap();
    let limiter = stray_limiter(net);
    let local = Arc::new(Local::new(limiter.clone()));
    let handoff = Handoff::new(
        local.clone(),
        Arc::new(Routing::new(ME.into(), ring)),
        link,
        Arc::new(Stats::default()),
        Arc::new(Replicas::new(&limiter)),
        BOOT,
        Arc::new(Moves::new(ME)),
    );
    Holder {
        handoff,
        local,
        host,
        key,
    }
}

impl Holder {
    /// Spends `n` of the key here, each admitted.
    pub(super) fn spend(&self, n: usize) {
        let l = self.local.limiter();
        for _ in 0..n {
            assert!(l.consume("r", &self.key, 1, l.now()).unwrap().allowed);
        }
    }
}

/// `n3` started on `net` (its counters returned too), and `n1` holding
/// strays of `n3`'s.
pub(super) async fn owner_and_holder(
    net: &crate::memory::MemoryNet,
) -> (crate::Cluster, Arc<Limiter>, Holder) {
    let owner_limiter = stray_limiter(net);
    let config = crate::ClusterConfig {
        secret: Some("handoff-test".into()),
        ..crate::ClusterConfig::default()
    };
    let owner = net
        .start(OWNER, config, owner_limiter.clone())
        .await
        .unwrap();
    let holder = holder_of_strays(net, owner.identity().grpc.ip());
    (owner, owner_limiter, holder)
}

/// Counters on `net`'s clock under one rule, `r`: 5 a minute, exact.
fn stray_limiter(net: &crate::memory::MemoryNet) -> Arc<Limiter> {
    let rules = RuleSet::from_toml(
        "[[rule]]\nname = \"r\"\nalgorithm = \"sliding_window_log\"\nlimit = 5\nwindow = \"60s\"\n",
    )
    .unwrap();
    Arc::new(Limiter::new(rules, net.clock(), LimiterConfig::default()))
}

/// How many of 10 checks of `key` `l` admits.
pub(super) fn admits(l: &Limiter, key: &str) -> usize {
    (0..10)
        .filter(|_| l.consume("r", key, 1, l.now()).unwrap().allowed)
        .count()
}

/// Guard: one rebalance at a time. A ring change and a stray sweep at once
/// each offered the same counter, and its owner counted it twice (2 + 2
/// of 5 spent, and a window of denials).
#[tokio::test(start_paused = true)]
async fn two_rebalances_at_once_hand_a_counter_over_once() {
    let net = crate::memory::MemoryNet::new();
    let (_owner, owner_limiter, h) = owner_and_holder(&net).await;
    let limiter = h.local.limiter();
    h.spend(2);
    tokio::join!(h.handoff.rebalance(), h.handoff.rebalance());
    assert_eq!(admits(&owner_limiter, &h.key), 3, "2 of 5 spent, once");
    assert!(
        h.local.take_strays(),
        "the second is left to the next sweep"
    );
    h.handoff.rebalance().await;
    assert!(
        !limiter.holds("r", &h.key),
        "settled: nothing was spent since"
    );
}

/// The ring change that gave `key` to its owner now, as `before_ring`
/// records it: from a ring of this node alone.
fn moved_to_its_owner(handoff: &Handoff, key: &str) -> Arc<Move> {
    let moves = handoff.moves();
    moves.begin(
        Arc::new(Ring::with_default_vnodes(&[node(ME)])),
        handoff.routing.ring(),
    );
    let owner = handoff.routing.ring().owner_id(key).unwrap().to_string();
    moves.took(key, &owner).expect("the change took the key")
}

/// Guard: the sweep after a ring change lands it, naming what stayed
/// here. Checks peers still send here for a key it took wait for the
/// landing, then go to the key's owner, which has its count by then.
#[tokio::test(start_paused = true)]
async fn a_sweep_lands_the_ring_change_that_took_its_keys() {
    let net = crate::memory::MemoryNet::new();
    let (_owner, owner_limiter, h) = owner_and_holder(&net).await;
    let took = moved_to_its_owner(&h.handoff, &h.key);
    assert_eq!(admits(h.local.limiter(), &h.key), 5);
    let (landed, ()) = tokio::join!(took.landed(), h.handoff.rebalance());
    assert!(landed.delivered("r", &h.key, false));
    assert_eq!(
        admits(&owner_limiter, &h.key),
        0,
        "the owner had the count first"
    );
}

/// Guard: a counter this node holds for another owner stays whole here
/// while the handoff to its owner is in flight, and after it fails. Taken
/// out for the call, a check decided here meanwhile (one a leaving owner
/// forwarded, say) found the key empty and admitted past its limit.
#[tokio::test(start_paused = true)]
async fn a_stray_stays_whole_here_until_its_owner_has_it() {
    let net = crate::memory::MemoryNet::new();
    let (there, _) = net.link();
    let Holder {
        handoff,
        local,
        host,
        key,
    } = holder_of_strays(&net, there);
    let took = moved_to_its_owner(&handoff, &key);
    // The owner does not answer: the call waits out its deadline.
    net.partition(&[host], &[there]);
    let limiter = local.limiter();
    assert_eq!(admits(limiter, &key), 5);
    let during = async {
        tokio::time::sleep(HANDOFF_DEADLINE / 2).await;
        admits(limiter, &key)
    };
    let ((), during) = tokio::join!(handoff.rebalance(), during);
    assert_eq!(
        during, 0,
        "the key is whole here while its handoff is in flight"
    );
    assert_eq!(admits(limiter, &key), 0, "and once it failed");
    assert!(local.take_strays(), "the next sweep tries again");
    let landed = took.landed().await;
    assert!(
        !landed.delivered("r", &key, false),
        "its checks are decided here: {landed:?}"
    );
}

/// Guard: what this node decided on a counter after its copy was taken
/// is handed to the owner by the next sweep. Left for the next ring
/// change, the owner decided the key without it until then, which may be
/// after the window it counts in.
#[tokio::test(start_paused = true)]
async fn what_was_spent_here_after_the_copy_reaches_the_owner_with_the_next_sweep() {
    let net = crate::memory::MemoryNet::new();
    let (owner, owner_limiter, h) = owner_and_holder(&net).await;
    net.slow_handoffs_to(owner.identity().grpc.ip(), Duration::from_millis(100));
    let limiter = h.local.limiter();
    let spend = || limiter.consume("r", &h.key, 1, limiter.now()).unwrap();
    assert!(spend().allowed && spend().allowed);
    // Not a wait for a condition: on the paused clock, halfway through
    // the 100 ms the handoff is held, so after the copy (taken before the
    // call goes out) and before the owner has it.
    let meanwhile = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        spend()
    };
    let ((), meanwhile) = tokio::join!(h.handoff.rebalance(), meanwhile);
    assert!(
        meanwhile.allowed,
        "decided here while the copy was on its way"
    );
    assert!(
        h.local.take_strays(),
        "the one spent since the copy is left for the next sweep"
    );
    h.handoff.rebalance().await;
    assert_eq!(admits(&owner_limiter, &h.key), 2, "2 + 1 of 5 spent");
    assert!(!limiter.holds("r", &h.key), "nothing left here");
}

/// Guard: a sweep copies a counter only once the checks that took their
/// in-flight mark before it have decided, as a check routed here by the
/// ring before it changed has. Copied first, that check's admission
/// stayed behind here and the owner decided without it.
#[tokio::test(start_paused = true)]
async fn a_sweep_waits_for_the_checks_under_way_before_it_copies() {
    let net = crate::memory::MemoryNet::new();
    let (_owner, owner_limiter, h) = owner_and_holder(&net).await;
    let (entered_tx, entered) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let check = {
        let (local, key) = (h.local.clone(), h.key.clone());
        std::thread::spawn(move || {
            local.guarded(|_| {
                entered_tx.send(()).unwrap();
                released.recv().unwrap();
                let limiter = local.limiter();
                limiter.consume("r", &key, 1, limiter.now()).unwrap()
            })
        })
    };
    entered.recv().unwrap();
    let releasing = async {
        tokio::task::yield_now().await;
        release.send(()).unwrap();
    };
    tokio::join!(h.handoff.rebalance(), releasing);
    assert!(check.join().unwrap().allowed);
    assert!(!h.local.take_strays(), "nothing was left behind");
    assert_eq!(admits(&owner_limiter, &h.key), 4, "the owner has the one");
    assert!(!h.local.limiter().holds("r", &h.key));
}

/// A holder ([`owner_and_holder`]) whose ring holds the owner as a
/// member waiting for its word, which it could not say (the member
/// refused it): the member (kept running) and its identity.
async fn holder_with_an_untold_member(
    net: &crate::memory::MemoryNet,
) -> (crate::Cluster, Holder, NodeIdentity) {
    let (owner, _, h) = owner_and_holder(net).await;
    let joiner = owner.identity();
    let ring = Ring::with_default_vnodes(&[node(ME), joiner.clone()]);
    h.handoff.routing.install(Arc::new(ring));
    net.refuse_handoffs_to(joiner.grpc.ip());
    let ring = h.handoff.routing.ring();
    h.handoff
        .say_swept(vec![joiner.clone()], &[], &ring, HANDOFF_DEADLINE)
        .await;
    assert_eq!(h.handoff.unsaid.lock().len(), 1, "untold");
    (owner, h, joiner)
}

/// Guard: a member this node could not tell that its sweeps were over is
/// told by the next maintenance tick without a sweep ([`Handoff::retell`]),
/// under whatever incarnation the ring lists its process by then (a
/// rejoin moves it, and its wait goes on), and not once its wait has
/// ended. Matched by whole identity, a member that had rejoined was
/// dropped untold; untold, it asked this node about its keys' checks
/// until its wait ended.
#[tokio::test(start_paused = true)]
async fn an_untold_member_is_told_later_while_it_may_wait() {
    let net = crate::memory::MemoryNet::new();
    let (_owner, h, joiner) = holder_with_an_untold_member(&net).await;
    let untold = || {
        h.handoff
            .unsaid
            .lock()
            .iter()
            .map(|(j, _)| j.clone())
            .collect::<Vec<_>>()
    };
    let rejoined = NodeIdentity {
        incarnation: joiner.incarnation + 1,
        ..joiner.clone()
    };
    let ring = Ring::with_default_vnodes(&[node(ME), rejoined.clone()]);
    h.handoff.routing.install(Arc::new(ring));
    h.handoff.retell().await;
    assert_eq!(untold(), std::slice::from_ref(&rejoined), "still due it");
    net.slow_handoffs_to(joiner.grpc.ip(), Duration::ZERO);
    h.handoff.retell().await;
    assert!(untold().is_empty(), "told");

    net.refuse_handoffs_to(joiner.grpc.ip());
    let ring = h.handoff.routing.ring();
    h.handoff
        .say_swept(vec![rejoined], &[], &ring, HANDOFF_DEADLINE)
        .await;
    // Not a wait for a condition: the member's wait, on the paused clock,
    // runs out.
    tokio::time::sleep(arrivals::WAIT).await;
    h.handoff.retell().await;
    assert!(untold().is_empty(), "its wait is over");
}

/// Guard: with a stray waiting for the next sweep, the word is left to
/// that sweep, which knows whether the stray is the member's. Told
/// without it, a member stopped asking about a key whose count was
/// still kept here, and decided it on nothing.
#[tokio::test(start_paused = true)]
async fn a_stray_leaves_the_word_to_the_next_sweep() {
    let net = crate::memory::MemoryNet::new();
    let (_owner, h, joiner) = holder_with_an_untold_member(&net).await;
    net.slow_handoffs_to(joiner.grpc.ip(), Duration::ZERO);
    h.local.mark_stray();
    h.handoff.retell().await;
    assert_eq!(h.handoff.unsaid.lock().len(), 1, "left to the sweep");
    assert!(h.local.take_strays(), "the sweep is still due");
    h.handoff.retell().await;
    assert!(h.handoff.unsaid.lock().is_empty());
}

/// Guard: a word said again to a member that does not answer holds off
/// the sweeps (a ring change's among them) for a moment only. Waited for
/// as long as a handoff, the member's silence held them off two seconds
/// at every tick of its wait.
#[tokio::test(start_paused = true)]
async fn a_word_said_again_to_a_silent_member_holds_the_sweeps_off_briefly() {
    let net = crate::memory::MemoryNet::new();
    let (_owner, h, joiner) = holder_with_an_untold_member(&net).await;
    net.slow_handoffs_to(joiner.grpc.ip(), HANDOFF_DEADLINE);
    let started = tokio::time::Instant::now();
    h.handoff.retell().await;
    assert!(
        started.elapsed() <= RETELL_DEADLINE * 2,
        "{:?}",
        started.elapsed()
    );
    assert_eq!(h.handoff.unsaid.lock().len(), 1, "asked again next time");
}
