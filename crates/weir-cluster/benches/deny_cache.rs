//! What a full deny cache costs the answer that brings it a new denial.
//!
//! A gateway's deny cache at its default bound, 100,000 hash parts, every
//! one a live denial (a flood of denied keys). Each new denial that finds
//! the cache full may sweep it on the request's path; the cache allows
//! that once in 250 ms. Timed here: one sweep of the full cache, and new
//! denials at the full cache, against the same inserts into a cache with
//! room, in the same run.
//!
//! Run: `cargo bench -p weir-cluster --bench deny_cache`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_cluster::owner::deny_cache::DenyCache;
use weir_core::{Decision, NANOS_PER_MS, NANOS_PER_SEC};

const BOUND: usize = 100_000;
const SWEEPS: usize = 10;
/// New denials timed against each cache, within one 250 ms interval.
const INSERTS: usize = 100_000;
const START: u64 = 1_700_000_000 * NANOS_PER_SEC;

fn main() {
    let rule: Arc<str> = Arc::from("per-client");
    let denial = Decision::deny_until(10, Duration::from_secs(3600), 0, START);
    let full = |bound| {
        let c = DenyCache::new(bound);
        for i in 0..BOUND {
            c.insert(
                (&rule, &format!("held-{i:07}")),
                1,
                &denial,
                START,
                Duration::MAX,
            );
        }
        c
    };

    let c = full(BOUND);
    let mut sweeps: Vec<Duration> = (0..SWEEPS)
        .map(|i| {
            let t = Instant::now();
            c.purge(START + i as u64);
            t.elapsed()
        })
        .collect();
    sweeps.sort();
    println!(
        "a sweep of {BOUND} live denials: {:.2}-{:.2} ms (median {:.2}, {SWEEPS} sweeps)",
        ms(sweeps[0]),
        ms(sweeps[SWEEPS - 1]),
        ms(sweeps[SWEEPS / 2])
    );

    let new_keys: Vec<String> = (0..INSERTS).map(|i| format!("new-{i:07}")).collect();
    // The reference: the same cache contents with room for every new key.
    let roomy = full(BOUND + INSERTS);
    let at_room = time_inserts(&roomy, &rule, &denial, &new_keys);
    // A sweep is due at first (the last one was at START), then not for
    // 250 ms: every insert here is well within that.
    let at_bound = time_inserts(&full(BOUND), &rule, &denial, &new_keys);
    println!("{:>24} {:>10} {:>12}", "", "inserts", "mean us");
    println!(
        "{:>24} {:>10} {:>12.3}",
        "with room (reference)", INSERTS, at_room
    );
    println!("{:>24} {:>10} {:>12.3}", "at the bound", INSERTS, at_bound);
}

/// Mean microseconds per new denial of `keys`, all within 250 ms of the
/// cache's clock.
fn time_inserts(c: &DenyCache, rule: &Arc<str>, d: &Decision, keys: &[String]) -> f64 {
    let later = START + 300 * NANOS_PER_MS;
    let t = Instant::now();
    for (i, k) in keys.iter().enumerate() {
        c.insert((rule, k), 1, d, later + i as u64, Duration::MAX);
    }
    t.elapsed().as_secs_f64() * 1e6 / keys.len() as f64
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
