//! The store's promises: one atomic read-modify-write per key, bounded keys.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::algorithm::AlgorithmKind;

const SEC: u64 = crate::clock::NANOS_PER_SEC;

fn counters(kind: AlgorithmKind, limit: u64, max_keys: usize) -> Counters {
    let p = Policy::new(kind, limit, Duration::from_secs(60), None, None).unwrap();
    Counters::new(p, max_keys)
}

#[test]
fn concurrent_spenders_admit_exactly_the_capacity() {
    // The lock: 16 threads x 1,500 calls against a capacity of 500.
    for kind in [
        AlgorithmKind::TokenBucket,
        AlgorithmKind::SlidingWindowCounter,
        AlgorithmKind::FixedWindow,
    ] {
        let c = Arc::new(counters(kind, 500, 10));
        let threads: Vec<_> = (0..16)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || {
                    (0..1500)
                        .filter(|_| c.consume("hot", 1_000 * SEC, 1).unwrap().allowed)
                        .count()
                })
            })
            .collect();
        let admitted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(admitted, 500, "{kind}");
    }
}

#[test]
fn new_keys_beyond_the_ceiling_are_refused_until_idle_ones_go() {
    let c = counters(AlgorithmKind::FixedWindow, 5, 3);
    let t = 600 * SEC;
    for k in ["a", "b", "c"] {
        assert!(c.consume(k, t, 1).is_ok());
    }
    assert_eq!(c.consume("d", t, 1), Err(Full));
    assert!(c.consume("a", t, 1).is_ok(), "existing keys still decide");
    assert_eq!(c.len(), 3);
    // A window later a, b, c are idle; the next new key sweeps them out.
    assert!(c.consume("d", t + 60 * SEC, 1).is_ok());
    assert_eq!(c.len(), 1);
}

#[test]
fn sweep_drops_only_idle_keys() {
    let c = counters(AlgorithmKind::SlidingWindowCounter, 5, 100);
    let t = 60_000 * SEC;
    c.consume("old", t, 1).unwrap();
    c.consume("new", t + 90 * SEC, 1).unwrap();
    assert_eq!(c.sweep(t + 125 * SEC), 1);
    assert_eq!(c.len(), 1);
    // "new" still remembers its spend.
    assert_eq!(c.consume("new", t + 125 * SEC, 1).unwrap().remaining, 3);
}

#[test]
fn taken_counters_absorbed_elsewhere_keep_their_spend() {
    let here = counters(AlgorithmKind::SlidingWindowLog, 5, 100);
    let there = counters(AlgorithmKind::SlidingWindowLog, 5, 100);
    let t = 500 * SEC;
    for _ in 0..4 {
        here.consume("moving", t, 1).unwrap();
    }
    here.consume("staying", t, 1).unwrap();
    let moved = here.take_unless(|k| k == "staying");
    assert_eq!(moved.len(), 1);
    assert_eq!(here.len(), 1);
    there.consume("moving", t, 1).unwrap(); // traffic that reached the new owner first
    for (k, s) in moved {
        assert_eq!(there.absorb(&k, s, t), Ok(()));
    }
    assert!(
        !there.consume("moving", t, 1).unwrap().allowed,
        "4 + 1 of 5 spent"
    );
}

#[test]
fn absorb_refuses_another_algorithms_state() {
    let a = counters(AlgorithmKind::FixedWindow, 5, 10);
    let b = counters(AlgorithmKind::TokenBucket, 5, 10);
    a.consume("k", SEC, 1).unwrap();
    let (k, s) = a.take_unless(|_| false).pop().unwrap();
    assert_eq!(b.absorb(&k, s, SEC), Err(AbsorbError::OtherAlgorithm));
    assert_eq!(b.len(), 0);
}

#[test]
fn a_full_store_of_live_keys_refuses_and_counts_without_dropping_any() {
    let c = counters(AlgorithmKind::SlidingWindowLog, 5, 2);
    let t = 600 * SEC;
    c.consume("a", t, 1).unwrap();
    c.consume("b", t + 30 * SEC, 1).unwrap();
    assert_eq!(c.consume("c", t + 59 * SEC, 1), Err(Full));
    // "a" rests at t + 60 s; "b" is still live, so only "a" goes.
    assert!(c.consume("c", t + 61 * SEC, 1).is_ok());
    assert_eq!(
        c.counts(),
        StoreCounts {
            dropped_at_rest: 1,
            refused_full: 1
        }
    );
    assert_eq!(c.consume("b", t + 61 * SEC, 1).unwrap().remaining, 3);
}

fn state(json: serde_json::Value) -> State {
    serde_json::from_value(json).unwrap()
}

#[test]
fn absorb_refuses_states_no_honest_node_holds_and_clamps_future_times() {
    let t = 600 * SEC;
    let log = counters(AlgorithmKind::SlidingWindowLog, 5, 10);
    // `used` that is not the sum of the entries would wrap when they age out.
    let lying = state(serde_json::json!({"SlidingLog": {"entries": [[t, 1]], "used": 0}}));
    assert_eq!(log.absorb("k", lying, t), Err(AbsorbError::Invalid));
    let too_many =
        state(serde_json::json!({"SlidingLog": {"entries": [[t, 3], [t, 3]], "used": 6}}));
    assert_eq!(log.absorb("k", too_many, t), Err(AbsorbError::Invalid));
    let fixed = counters(AlgorithmKind::FixedWindow, 5, 10);
    let over = state(serde_json::json!({"FixedWindow": {"idx": t / (60 * SEC), "count": 6}}));
    assert_eq!(fixed.absorb("k", over, t), Err(AbsorbError::Invalid));
    let bucket = counters(AlgorithmKind::TokenBucket, 5, 10);
    // A bucket holds at most one bucket of debt (what charges for
    // admissions decided elsewhere leave); deeper is no honest state.
    let deep = state(serde_json::json!({"TokenBucket": {"tokens": -11.0, "ts": t}}));
    assert_eq!(bucket.absorb("k", deep, t), Err(AbsorbError::Invalid));
    assert_eq!(
        log.len() + fixed.len() + bucket.len(),
        0,
        "nothing refused was kept"
    );

    // A window far in the future is this one: the key is free again a
    // minute on, not in a thousand years.
    let far = state(serde_json::json!({"FixedWindow": {"idx": u64::MAX / (60 * SEC), "count": 5}}));
    assert_eq!(fixed.absorb("k", far, t), Ok(()));
    assert!(!fixed.consume("k", t, 1).unwrap().allowed);
    assert!(fixed.consume("k", t + 60 * SEC, 1).unwrap().allowed);
}

#[test]
fn absorb_of_a_new_key_respects_the_ceiling() {
    let here = counters(AlgorithmKind::FixedWindow, 5, 1);
    let t = 600 * SEC;
    here.consume("held", t, 1).unwrap();
    let spent = state(serde_json::json!({"FixedWindow": {"idx": t / (60 * SEC), "count": 2}}));
    assert_eq!(here.absorb("new", spent.clone(), t), Err(AbsorbError::Full));
    assert_eq!(here.len(), 1);
    assert_eq!(
        here.absorb("held", spent, t),
        Ok(()),
        "a held key still merges"
    );
    assert_eq!(here.consume("held", t, 1).unwrap().remaining, 1);
}

/// Runs `f` on a thread of its own and fails if it has not returned within
/// ten seconds: a DashMap guard held across another access of its own map
/// deadlocks the thread on its own shard lock (or a caller waits on a lock
/// it should not), which would otherwise hang the test instead of failing
/// it.
pub(super) fn within<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, result) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(f());
    });
    result
        .recv_timeout(Duration::from_secs(10))
        .expect("returned instead of waiting on a lock")
}

// Each path that makes room on a full table sweeps the whole map, which
// write-locks every shard: no guard of that map may be alive meanwhile.

#[test]
fn a_new_key_at_the_ceiling_sweeps_with_no_guard_held() {
    let c = Arc::new(counters(AlgorithmKind::FixedWindow, 5, 4));
    within(move || {
        for k in ["a", "b", "c", "d"] {
            c.consume(k, 0, 1).unwrap();
        }
        // A minute on, all four rest: the new key sweeps on this thread.
        assert!(c.consume("e", 60 * SEC, 1).unwrap().allowed);
        assert_eq!(c.len(), 1);
    });
}

#[test]
fn a_handed_over_key_at_the_ceiling_sweeps_with_no_guard_held() {
    let c = Arc::new(counters(AlgorithmKind::FixedWindow, 5, 1));
    within(move || {
        c.consume("held", 0, 1).unwrap();
        let t = 60 * SEC;
        let spent = state(serde_json::json!({"FixedWindow": {"idx": 1, "count": 2}}));
        assert_eq!(c.absorb("new", spent, t), Ok(()));
        assert_eq!(c.len(), 1, "the key at rest made room");
    });
}

#[test]
fn a_carried_key_at_the_ceiling_sweeps_with_no_guard_held() {
    let carried = Arc::new(Carried::new(2));
    within(move || {
        let p = Policy::new(
            AlgorithmKind::SlidingWindowCounter,
            5,
            Duration::from_secs(1),
            None,
            None,
        )
        .unwrap();
        let name: std::sync::Arc<str> = std::sync::Arc::from("override:5-per-second");
        carried.consume(&name, &p, "a", 0, 1).unwrap();
        carried.consume(&name, &p, "b", 0, 1).unwrap();
        assert!(carried.consume(&name, &p, "c", 3 * SEC, 1).unwrap().allowed);
        assert_eq!(carried.len(), 1);
    });
}

/// Warming reads and nothing else: states, the key count and the answers
/// that follow are those of a table never warmed, and a key it does not
/// hold is not created.
#[test]
fn warming_keys_changes_nothing() {
    let c = counters(AlgorithmKind::SlidingWindowCounter, 5, 100);
    let t = 60_000 * SEC;
    c.consume("a", t, 2).unwrap();
    c.consume("b", t, 1).unwrap();
    let before = (c.get("a"), c.get("b"), c.len());
    assert_eq!(c.warm(["a", "missing", "b", "a"].into_iter()), 3);
    assert_eq!((c.get("a"), c.get("b"), c.len()), before);
    assert!(!c.contains("missing"));
    assert_eq!(c.consume("a", t, 1).unwrap().remaining, 2);
}

#[test]
fn by_shard_orders_items_by_shard_keeping_their_order_within_one() {
    let items = [(2, 'a'), (0, 'b'), (2, 'c'), (3, 'd'), (0, 'e')];
    let (ordered, starts) = by_shard(&items, 4);
    assert_eq!(ordered, ['b', 'e', 'a', 'c', 'd']);
    assert_eq!(starts, [0, 2, 2, 4, 5], "shard 1 is an empty run");
    let (none, starts) = by_shard::<char>(&[], 2);
    assert!(none.is_empty());
    assert_eq!(starts, [0, 0, 0]);
}

/// Warming looks each key up where the map keeps it: across every shard,
/// it finds every key held (hashed or sharded otherwise, it would find
/// none and warm nothing, with no answer changing).
#[test]
fn warming_finds_every_held_key_in_every_shard() {
    let c = counters(AlgorithmKind::FixedWindow, 5, 10_000);
    let keys: Vec<String> = (0..1_000).map(|i| format!("caller-{i}")).collect();
    for k in &keys {
        c.consume(k, SEC, 1).unwrap();
    }
    assert_eq!(c.warm(keys.iter().map(String::as_str)), keys.len());
    assert_eq!(c.warm(["nobody"].into_iter()), 0);
}

/// A pass over the keys (the idle sweep, a shard's table growing)
/// write-locks a shard for the whole of it, and a check on that shard
/// waits. At the default ceiling of a million keys, DashMap's default of
/// four shards a core put 125,000 keys under one lock on two cores.
#[test]
fn a_store_at_a_million_keys_holds_no_more_than_its_share_under_one_lock() {
    for max_keys in [1_000_000, 3_000_000] {
        for kind in AlgorithmKind::ALL {
            let shards = counters(kind, 10, max_keys).shard_count();
            assert!(
                max_keys.div_ceil(shards) <= KEYS_PER_SHARD,
                "{kind} at {max_keys}: {shards} shards"
            );
        }
        let shards = Carried::new(max_keys).shard_count();
        assert!(
            max_keys.div_ceil(shards) <= KEYS_PER_SHARD,
            "carried: {shards}"
        );
    }
}

#[test]
fn shards_are_a_power_of_two_between_the_cores_and_the_cap() {
    let least = shards_for(1);
    assert!(least >= 2 && least.is_power_of_two(), "{least}");
    assert_eq!(
        shards_for(10),
        least,
        "a small store keeps the cores' spread"
    );
    assert_eq!(shards_for(1_000_000), least.max(128));
    assert_eq!(shards_for(usize::MAX), least.max(MAX_SHARDS), "capped");
    assert_eq!(
        counters(AlgorithmKind::TokenBucket, 10, 10).shard_count(),
        least
    );
}

/// Guard: a rule's table is made at its first write, so a set of many
/// idle rules holds no empty maps; reads of it find nothing until then.
#[test]
fn a_table_is_made_at_its_first_write_and_reads_before_find_nothing() {
    let c = counters(AlgorithmKind::FixedWindow, 5, 1_000_000);
    assert!(c.made().is_none(), "no table for a rule never written");
    assert_eq!((c.len(), c.get("k"), c.contains("k")), (0, None, false));
    assert_eq!(c.sweep(SEC), 0);
    c.refund("k", SEC, 1);
    assert!(c.unkept(&mut |_| false, true).is_empty());
    assert!(c.made().is_none(), "reads and refunds make no table");
    assert!(c.consume("k", SEC, 1).unwrap().allowed);
    assert!(c.made().is_some());
    assert_eq!(c.len(), 1);
    // A resized table of a counting rule never written is still unmade.
    let idle = counters(AlgorithmKind::SlidingWindowCounter, 5, 10);
    let p = Policy::new(
        AlgorithmKind::SlidingWindowCounter,
        9,
        Duration::from_secs(60),
        None,
        None,
    )
    .unwrap();
    let resized = idle.resized(p, 10, SEC).expect("same algorithm");
    assert!(resized.made().is_none());
    let bucket = counters(AlgorithmKind::TokenBucket, 5, 10);
    let p = Policy::new(
        AlgorithmKind::TokenBucket,
        9,
        Duration::from_secs(60),
        None,
        None,
    )
    .unwrap();
    assert!(
        bucket.resized(p, 10, SEC).is_none(),
        "a bucket is never resized"
    );
}
