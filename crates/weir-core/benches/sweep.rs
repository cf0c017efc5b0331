//! How long a check waits while the idle sweep passes over a full store.
//!
//! A store of 1,000,000 live keys (the default `--max-keys`) under one
//! fixed-window rule. One thread sweeps it, as the node does every second;
//! the main thread checks random held keys meanwhile and times each check.
//! The reference is the same checks, timed in the same run with no sweep.
//! A sweep write-locks one shard at a time for as long as it takes to pass
//! over that shard's keys, and every check on that shard waits it out.
//!
//! Run: `cargo bench -p weir-core --bench sweep`. Results go in
//! docs/performance.md.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_core::store::Counters;
use weir_core::{AlgorithmKind, Policy, NANOS_PER_SEC};

const KEYS: usize = 1_000_000;
const SWEEPS: usize = 20;
/// Checks timed with no sweep running, for the reference.
const QUIET_CHECKS: usize = 2_000_000;
/// A bound on the checks timed while sweeping, whatever the sweeps take.
const MAX_SWEEP_CHECKS: usize = 20_000_000;
const START: u64 = 1_700_000_000 * NANOS_PER_SEC;

fn main() {
    // A limit no key reaches in the bench's few million checks, so every
    // check does the same work.
    let policy = Policy::new(
        AlgorithmKind::FixedWindow,
        1_000_000_000,
        Duration::from_secs(3600),
        None,
        None,
    )
    .expect("bench policy is valid");
    let counters = Arc::new(Counters::new(policy, KEYS));
    let keys: Vec<String> = (0..KEYS).map(|i| format!("cust_{i:07}")).collect();
    for k in &keys {
        counters.consume(k, START, 1).expect("room for every key");
    }
    let now = START + NANOS_PER_SEC;

    let quiet = timed_checks(&counters, &keys, now, QUIET_CHECKS, &|| true);

    let sweeping = Arc::new(AtomicBool::new(true));
    let sweeper = {
        let (counters, sweeping) = (counters.clone(), sweeping.clone());
        std::thread::spawn(move || {
            let mut passes = Vec::with_capacity(SWEEPS);
            for _ in 0..SWEEPS {
                let t = Instant::now();
                let dropped = counters.sweep(now);
                assert_eq!(dropped, 0, "every key is live");
                passes.push(t.elapsed());
            }
            sweeping.store(false, Ordering::Relaxed);
            passes
        })
    };
    let busy = timed_checks(&counters, &keys, now, MAX_SWEEP_CHECKS, &|| {
        sweeping.load(Ordering::Relaxed)
    });
    let mut passes = sweeper.join().expect("the sweeper ends");
    passes.sort();

    println!(
        "{KEYS} keys, {SWEEPS} sweeps: a pass took {:.1}-{:.1} ms (median {:.1})",
        ms(passes[0]),
        ms(passes[SWEEPS - 1]),
        ms(passes[SWEEPS / 2])
    );
    println!(
        "{:>28} {:>10} {:>9} {:>9} {:>9} {:>9}",
        "", "checks", "p50 us", "p99.9 us", "p99.99 us", "max us"
    );
    report("no sweep (reference)", quiet);
    report("while sweeping", busy);
}

/// Times checks of random held keys while `go` holds, at most `max` of them.
fn timed_checks(
    counters: &Counters,
    keys: &[String],
    now: u64,
    max: usize,
    go: &dyn Fn() -> bool,
) -> Vec<Duration> {
    let mut out = Vec::with_capacity(max.min(4_000_000));
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while out.len() < max && go() {
        // xorshift: a random key without a lock or an allocation.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let key = &keys[(x % keys.len() as u64) as usize];
        let t = Instant::now();
        black_box(counters.consume(key, now, 1).expect("held"));
        out.push(t.elapsed());
    }
    out
}

fn report(name: &str, mut times: Vec<Duration>) {
    times.sort();
    let at = |q: f64| us(times[((times.len() as f64 * q) as usize).min(times.len() - 1)]);
    println!(
        "{name:>28} {:>10} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
        times.len(),
        at(0.5),
        at(0.999),
        at(0.9999),
        us(times[times.len() - 1])
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
