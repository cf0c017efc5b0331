//! The deterministic simulator as CI runs it: a seed replays bit for bit, a fixed range of seeds keeps every promise docs/cluster.md states, and the over-admission a one-copy crash causes is reported, not hidden.

use clap::Parser;
use weir_sim::dst::{run_all, run_seed, DstArgs};

fn args(line: &str) -> DstArgs {
    DstArgs::parse_from(std::iter::once("dst").chain(line.split_whitespace()))
}

/// Every fault kind but `crash`: with two copies, a member killed and
/// restarted under its id before its peers notice is decided from empty
/// memory (docs/cluster.md, "What the simulator checks"), which the seeds
/// of `a_member_restarted_before_its_peers_notice_*` below pin.
const PROMISED: &str = "--faults delay,loss,dup,partition,oneway,pause,leave,join,slow";

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
    for kind in ["partition", "pause", "leave", "join", "slow", "oneway"] {
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

/// Found by the simulator: node-0 killed at 1.35 s and restarted under its
/// id at 2.71 s, before SWIM declared it down; its peers still route its
/// keys to it and it decides them, and its own clients' checks, on the
/// empty memory of the new process: 14 of 12 in one window.
#[test]
#[ignore = "open: a restarted member decides on empty memory until its peers notice (docs/cluster.md)"]
fn a_member_restarted_before_its_peers_notice_admits_at_most_the_limit_seed_1442() {
    let r = run_seed(
        &args("--faults delay,loss,dup,partition,oneway,pause,crash,leave,join,slow"),
        1442,
    );
    assert!(r.violations.is_empty(), "{:?}", r.violations);
}

/// Found by the simulator, without a crash: node-4 leaves at 2.25 s and
/// node-5 joins at 6.05 s; at 6.52 s node-5 decides `both-client/hot1`
/// as its new owner on an empty log while node-2, which still holds the
/// window's 8 units, goes on deciding it for node-1: 9 of 8 in 1.14 s.
#[test]
#[ignore = "open: a joiner decides a key before the old owner's count reached it (docs/cluster.md)"]
fn a_joiner_decides_a_key_only_with_the_old_owners_count_seed_432() {
    let r = run_seed(&args(PROMISED), 432);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
}
