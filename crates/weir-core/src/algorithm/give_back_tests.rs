//! Refunds tied to no decision (`REFUND_SPENT`, an Envoy `is_negative_hits`
//! descriptor): what each algorithm gives back, and that it never gives
//! more than was spent.

use super::tests::{burst, policy_full, SEC};
use super::*;

const KINDS: [AlgorithmKind; 5] = AlgorithmKind::ALL;

#[test]
fn refund_of_spent_admits_exactly_that_many_more() {
    for kind in KINDS {
        let p = policy_full(kind, 5, 60);
        let mut s = p.fresh();
        let t = 1_000 * SEC;
        assert_eq!(burst(&p, &mut s, t, 6), 5, "{kind:?} fills");
        p.refund(&mut s, REFUND_SPENT, 2);
        assert_eq!(burst(&p, &mut s, t, 5), 2, "{kind:?} after a refund of 2");
    }
}

#[test]
fn refund_of_spent_never_passes_the_full_budget() {
    for kind in KINDS {
        let p = policy_full(kind, 5, 60);
        let mut s = p.fresh();
        let t = 1_000 * SEC;
        assert_eq!(burst(&p, &mut s, t, 1), 1);
        p.refund(&mut s, REFUND_SPENT, 100);
        assert_eq!(
            burst(&p, &mut s, t, 10),
            5,
            "{kind:?} after a refund of 100"
        );
        // Nothing spent: a refund gives nothing.
        let mut fresh = p.fresh();
        p.refund(&mut fresh, REFUND_SPENT, 3);
        assert_eq!(burst(&p, &mut fresh, t, 10), 5, "{kind:?} fresh");
    }
}

#[test]
fn sliding_log_refund_of_spent_takes_the_newest_entries() {
    let p = policy_full(AlgorithmKind::SlidingWindowLog, 5, 60);
    let mut s = p.fresh();
    let t0 = 1_000 * SEC;
    for i in 0..5 {
        assert_eq!(burst(&p, &mut s, t0 + i * SEC, 1), 1);
    }
    // The entry at t0 + 4 s goes; the one at t0 stays, and ages out first.
    p.refund(&mut s, REFUND_SPENT, 1);
    assert_eq!(burst(&p, &mut s, t0 + 5 * SEC, 2), 1);
    // At t0 + 60.5 s only the entry of t0 has aged out: one slot. Had the
    // oldest been taken, none would have yet (t0 + 1 s leaves at 61 s).
    assert_eq!(burst(&p, &mut s, t0 + 60 * SEC + SEC / 2, 3), 1);
}

#[test]
fn sliding_log_refund_of_spent_cuts_an_entry_it_does_not_take_whole() {
    let p = policy_full(AlgorithmKind::SlidingWindowLog, 5, 60);
    let mut s = p.fresh();
    let t0 = 1_000 * SEC;
    assert!(p.decide(&mut s, t0, 4).unwrap().allowed);
    p.refund(&mut s, REFUND_SPENT, 3);
    // 1 of the 4 stays spent.
    assert_eq!(burst(&p, &mut s, t0, 10), 4);
}

#[test]
fn sliding_counter_refund_of_spent_comes_off_the_current_window_first() {
    let p = policy_full(AlgorithmKind::SlidingWindowCounter, 5, 60);
    let mut s = p.fresh();
    let w0 = 1_020 * SEC; // a window boundary (1020 = 17 x 60)
    assert_eq!(burst(&p, &mut s, w0, 5), 5);
    // Half way through the next window: est = 5 x 0.5 + curr.
    let mid = w0 + 90 * SEC;
    assert_eq!(burst(&p, &mut s, mid, 5), 2);
    p.refund(&mut s, REFUND_SPENT, 2);
    // Off `curr`: est back to 2.5, two more. Off `prev` it would be 3.5.
    assert_eq!(burst(&p, &mut s, mid, 5), 2);
}
