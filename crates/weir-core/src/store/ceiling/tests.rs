//! When a new key may sweep for room, and when it may not.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use super::*;
use crate::store::tests::within;

const SEC: Nanos = NANOS_PER_SEC;
const MS: Nanos = SEC / 1000;

/// A ceiling of `max` keys, all held, the first coming to rest at `rest`.
fn full(max: usize, rest: Nanos) -> Ceiling {
    let c = Ceiling::new(max);
    c.holds(max);
    c.rests_at(rest);
    c
}

/// A sweep that drops `frees` keys, every kept one resting at `next_rest`,
/// and counts its calls in `sweeps`.
fn sweep<'a>(
    sweeps: &'a AtomicUsize,
    frees: usize,
    next_rest: Nanos,
) -> impl FnOnce() -> (usize, Nanos) + 'a {
    move || {
        sweeps.fetch_add(1, Ordering::Relaxed);
        (frees, next_rest)
    }
}

#[test]
fn the_rest_bound_is_the_earliest_rest_written() {
    let c = Ceiling::new(1);
    let bound = || c.earliest_rest.load(Ordering::Relaxed);
    assert_eq!(bound(), Nanos::MAX, "nothing written: no key can rest");
    c.rests_at(50 * SEC);
    assert_eq!(bound(), 50 * SEC);
    c.rests_at(80 * SEC);
    assert_eq!(bound(), 50 * SEC, "a later rest leaves the bound");
    c.rests_at(20 * SEC);
    assert_eq!(bound(), 20 * SEC, "an earlier one lowers it");
}

#[test]
fn a_full_ceiling_whose_keys_are_all_live_refuses_without_a_sweep() {
    let c = full(1000, 10 * SEC);
    let sweeps = AtomicUsize::new(0);
    assert_eq!(c.make_room(9 * SEC, sweep(&sweeps, 1, 10 * SEC)), Err(Full));
    assert_eq!(sweeps.load(Ordering::Relaxed), 0);
    assert_eq!(c.counts().refused_full, 1);
}

/// A full ceiling of `max` keys, one coming to rest each time it is
/// swept: the first new key sweeps, the next finds no room until
/// `spacing` after.
fn sweeps_once_a_spacing(max: usize, spacing: Nanos) {
    let c = full(max, SEC);
    let sweeps = AtomicUsize::new(0);
    assert_eq!(c.make_room(SEC, sweep(&sweeps, 1, SEC)), Ok(()));
    c.added();
    let early = SEC + spacing - 1;
    assert_eq!(
        c.make_room(early, sweep(&sweeps, 1, SEC)),
        Err(Full),
        "a key has come to rest, but a request swept {} ns ago",
        spacing - 1
    );
    assert_eq!(sweeps.load(Ordering::Relaxed), 1);
    assert_eq!(c.make_room(SEC + spacing, sweep(&sweeps, 1, SEC)), Ok(()));
    assert_eq!(sweeps.load(Ordering::Relaxed), 2);
    assert_eq!(c.counts().dropped_at_rest, 2);
}

/// Under a flood of new keys into a table of live ones, each sweep frees
/// only the few keys that came to rest since the last: unspaced, the
/// flood's threads did nothing but sweep.
#[test]
fn a_new_key_sweeps_at_most_once_a_spacing() {
    sweeps_once_a_spacing(1000, 200_000);
}

#[test]
fn the_spacing_grows_with_the_ceiling() {
    sweeps_once_a_spacing(1_000_000, 200 * MS);
}

/// The key about to rest was spent again: the sweep freed nothing, and the
/// next waits a second, not a spacing.
#[test]
fn a_sweep_that_freed_nothing_is_not_tried_again_for_a_second() {
    let c = full(1000, SEC);
    let sweeps = AtomicUsize::new(0);
    assert_eq!(c.make_room(SEC, sweep(&sweeps, 0, SEC)), Err(Full));
    assert_eq!(
        c.make_room(SEC + 999 * MS, sweep(&sweeps, 1, SEC)),
        Err(Full)
    );
    assert_eq!(sweeps.load(Ordering::Relaxed), 1);
    assert_eq!(c.make_room(2 * SEC, sweep(&sweeps, 1, SEC)), Ok(()));
    assert_eq!(sweeps.load(Ordering::Relaxed), 2);
}

/// The idle sweep is passing over the table: a new key neither waits for
/// it (its worker would serve nothing meanwhile) nor sweeps beside it.
#[test]
fn a_new_key_does_not_wait_for_a_sweep_under_way() {
    let c = Arc::new(full(1000, SEC));
    let _idle_sweep = c.sweep_lock();
    let asker = c.clone();
    let answer = within(move || {
        let sweeps = AtomicUsize::new(0);
        let room = asker.make_room(SEC, sweep(&sweeps, 1, SEC));
        (room, sweeps.load(Ordering::Relaxed))
    });
    assert_eq!(answer, (Err(Full), 0));
}
