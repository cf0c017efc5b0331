//! The deterministic simulator as CI runs it: a seed replays bit for bit, a fixed range of seeds keeps every promise docs/cluster.md states, and the over-admission a one-copy crash causes is reported, not hidden.

use clap::Parser;
use weir_sim::dst::{run_all, run_seed, DstArgs};

fn args(line: &str) -> DstArgs {
    DstArgs::parse_from(std::iter::once("dst").chain(line.split_whitespace()))
}

/// Every fault kind but `crash` and `pause`. The seeds below keep every promise; wider
/// ranges still find the open defects the ignored tests at the end replay
/// (docs/cluster.md, "What the simulator checks"), so a change that makes
/// any of these seeds over-admit has broken something that held.
const PROMISED: &str = "--faults delay,loss,dup,partition,oneway,leave,slow,join";

#[test]
fn a_seed_replays_bit_for_bit_and_another_seed_differs() {
    // Seed 517 pauses a member, then kills and restarts another: the
    // faults whose wake-ups and blocking work once ran in another order.
    let a = args("--faults delay,loss,pause,crash");
    let first = run_seed(&a, 517);
    let again = run_seed(&a, 517);
    let other = run_seed(&a, 518);
    assert_eq!(
        first.digest, again.digest,
        "same seed, same messages and answers"
    );
    assert_eq!(first.checks, again.checks);
    assert_eq!(
        (first.score.over, first.score.under),
        (again.score.over, again.score.under)
    );
    assert_ne!(first.digest, other.digest);
}

#[test]
fn a_seed_replays_the_same_on_any_number_of_threads() {
    let one = args("--seeds 40..46 --jobs 1 -q");
    let two = args("--seeds 40..46 --jobs 2 -q");
    let (a, b) = (
        run_all(&one, one.seeds.clone()),
        run_all(&two, two.seeds.clone()),
    );
    assert_eq!(a.digests.len(), 6);
    assert_eq!(a.digests, b.digests);
    assert_eq!((a.checks, a.over, a.under), (b.checks, b.over, b.under));
}

/// The seeds CI tries on every change: each fault kind the promise covers,
/// at the defaults (two copies, a 5 ms owner deadline, LAN gossip).
#[test]
fn the_ci_seeds_keep_every_promise() {
    let a = args(&format!("--seeds 1..301 -q {PROMISED}"));
    let total = run_all(&a, a.seeds.clone());
    assert_eq!(total.runs, 300);
    assert!(total.checks > 100_000, "{} checks", total.checks);
    for kind in ["partition", "leave", "slow", "oneway"] {
        let n = total
            .faults
            .iter()
            .find(|(k, _)| k.name() == kind)
            .map_or(0, |(_, n)| *n);
        assert!(n > 10, "{kind} injected {n} times");
    }
    assert_eq!(total.violations, 0, "see the VIOLATION lines above");
}

#[test]
fn a_one_copy_crash_over_admits_within_its_bound_and_says_so() {
    let a = args("--seeds 1..41 -q --replicas 1 --faults crash");
    let total = run_all(&a, a.seeds.clone());
    assert!(
        total.over > 0,
        "a dead owner's keys restart fresh: over-admission shows"
    );
    assert_eq!(total.violations, 0, "within L + (N-1) x ceil(L/N) per key");
}

/// A seed the simulator found over-admitting, replayed: it keeps every
/// promise once the defect it shows is fixed.
fn replays_exact(faults: &str, seed: u64) {
    let r = run_seed(&args(&format!("--faults {faults}")), seed);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
}

/// node-2 killed and restarted under its id before SWIM declared it down:
/// its peers still route its keys to it, and the new process decides them
/// and its own clients' checks on empty counters.
#[test]
fn a_member_restarted_before_its_peers_notice_admits_at_most_the_limit() {
    replays_exact(
        "delay,loss,dup,partition,oneway,pause,crash,leave,join,slow",
        1568,
    );
}

/// A member crashed and restarted under its id: gateways that took it for
/// lost stood in on its keys' copy, the copy went to the new process, and
/// the stand-ins went on. Seed 42: a gateway's breaker, opened on the old
/// process, kept the new one's keys on the holder (closed when the ring
/// takes the new process in). Seed 353: the holder decided a stand-in on
/// its own counters after its copy went to the new process (sent on to it
/// now). Either way the key had two counts.
#[test]
fn a_restarted_owner_is_the_only_count_of_its_keys() {
    for seed in [42, 353] {
        replays_exact("delay,loss,dup,crash", seed);
    }
}

/// node-6 joins on a lossy network (19% of datagrams lost) and learns the
/// members one by one: on its partial ring it owned `fw/hot0` and decided
/// it on an empty window while the key's owner on the full ring decided it
/// too.
#[test]
fn a_joiner_on_a_partial_view_admits_at_most_the_limit() {
    replays_exact("join,delay,loss", 1994);
}

/// A joiner whose seed's answer (the member list) was lost heard of the
/// members one by one, and joined on the first: it now joins once a member
/// has sent it the list. Both seeds over-admit with a joiner that joins on
/// a partial view.
#[test]
fn a_joiner_joins_once_a_member_sent_it_the_member_list() {
    for seed in [35, 73] {
        replays_exact("delay,loss,dup,join", seed);
    }
}

/// A joiner asked its seed, as the key's previous owner on its partial
/// view, about a key the seed's ring gives a third member: the seed sends
/// it on to that owner. Answered "not the previous owner", the joiner
/// decided the key on nothing.
#[test]
fn an_asked_member_sends_on_a_key_a_third_member_owns() {
    replays_exact("delay,loss,dup,join", 67);
}

/// node-2 crashed and restarted under its id before its peers noticed.
/// Its keys' holder, holding no copy of `both-client/hot1` (the owner died
/// before replicating it), stood in on its own counters. Asked back by the
/// new process, it answered "handed to you" by the sweep that placed the
/// key there when the cluster formed, and the new process decided the key
/// on nothing: a count decided here since a landing is the newest, and is
/// decided on here.
#[test]
fn a_count_decided_since_a_handoff_landed_is_not_taken_for_handed() {
    replays_exact("delay,loss,dup,crash", 869);
}

/// node-0 and then node-2 leave; node-2's ring still lists node-0, which
/// turns node-2's handoff away: node-2 hands its counters to the owners
/// on a ring without node-0 instead of dropping them, as a leave did when
/// its one handoff failed.
#[test]
fn a_leave_hands_on_what_a_leaving_member_turned_away() {
    replays_exact("delay,loss,dup,leave", 398);
}

/// Three overlapping partitions: node-0 suspected node-3 and kept the
/// suspicion after every heal, its countdown lost, so the ring never
/// settled: a suspicion that outlives its countdown is raised again.
#[test]
fn a_suspicion_that_outlived_its_countdown_is_raised_again() {
    replays_exact("delay,loss,dup,partition", 938);
}

/// node-2, owner of `hot1`, paused 2.8 s: its copy decides meanwhile,
/// and the resumed owner decides on its own count before the stand-ins are
/// charged to it.
#[test]
#[ignore = "open: a resumed owner does not learn what its copy admitted (docs/cluster.md)"]
fn an_owner_resumed_after_a_pause_admits_at_most_the_limit() {
    replays_exact("delay,loss,dup,pause", 327);
}
