//! What a flood of new keys costs a store at its ceiling.
//!
//! A store of 1,000,000 keys (the default `--max-keys`), each spent once,
//! so that they come to rest one after another, 20,000 a second of real
//! time. Two threads, as a node's two workers would, send new keys as fast
//! as they can for a few seconds: each new key needs room, and room comes
//! only from keys at rest. The bench reports how many new keys got in, how
//! many were refused, and how much of the threads' time went to sweeping
//! the table for room. The reference is the same flood into a store with
//! room to spare, in the same run.
//!
//! Run: `cargo bench -p weir-core --bench ceiling`. Results go in
//! docs/performance.md.

use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_core::store::Counters;
use weir_core::{AlgorithmKind, Nanos, Policy, NANOS_PER_SEC};

const KEYS: usize = 1_000_000;
/// How far apart the held keys were spent, and so came to rest.
const SPACING: Nanos = 50_000;
/// A key spent once rests this long after (one token of a bucket of one).
const REST: Duration = Duration::from_secs(10);
const FLOOD_THREADS: usize = 2;
const FLOOD_FOR: Duration = Duration::from_secs(3);
/// A bound on each flooding thread's calls, whatever the store answers.
const MAX_CALLS: usize = 12_000_000;
const START: Nanos = 1_700_000_000 * NANOS_PER_SEC;
/// A call slower than this was a sweep's (a new key with room takes about
/// a microsecond).
const SLOW: Duration = Duration::from_micros(100);

fn main() {
    let policy = Policy::new(AlgorithmKind::TokenBucket, 1, REST, None, None)
        .expect("bench policy is valid");

    let roomy = Arc::new(Counters::new(policy, KEYS * 16));
    let reference = flood(&roomy, Instant::now(), "room");
    drop(roomy);

    let full = Arc::new(Counters::new(policy, KEYS));
    for i in 0..KEYS {
        let at = START + i as Nanos * SPACING;
        full.consume(&format!("held_{i:07}"), at, 1)
            .expect("room for every held key");
    }
    // Held key i rests at START + REST + i * SPACING: from here on, in
    // step with the wall clock, 1 / SPACING of them a second.
    let at_ceiling = flood(&full, Instant::now(), "ceiling");
    let counts = full.counts();

    println!(
        "{KEYS} keys coming to rest {}/s, {FLOOD_THREADS} threads of new keys for {FLOOD_FOR:?}",
        NANOS_PER_SEC / SPACING
    );
    println!(
        "{:>22} {:>9} {:>10} {:>9} {:>8} {:>8} {:>9} {:>10}",
        "", "calls", "admitted/s", "refused", "p50 us", "p99 us", "max ms", "slow share"
    );
    report("with room (reference)", &reference);
    report("at the ceiling", &at_ceiling);
    println!(
        "at the ceiling: {} held keys dropped at rest, {} new keys refused",
        counts.dropped_at_rest, counts.refused_full
    );
}

struct Flood {
    times: Vec<Duration>,
    admitted: usize,
    refused: usize,
    took: Duration,
}

/// New keys from `FLOOD_THREADS` threads until `FLOOD_FOR` has passed or
/// each has made `MAX_CALLS` calls; the store's clock runs with the wall's.
fn flood(counters: &Arc<Counters>, began: Instant, name: &str) -> Flood {
    let threads: Vec<_> = (0..FLOOD_THREADS)
        .map(|t| {
            let counters = counters.clone();
            let name = format!("{name}_{t}");
            std::thread::spawn(move || {
                let mut out = Flood {
                    times: Vec::with_capacity(MAX_CALLS),
                    admitted: 0,
                    refused: 0,
                    took: Duration::ZERO,
                };
                while out.times.len() < MAX_CALLS && began.elapsed() < FLOOD_FOR {
                    let now =
                        START + REST.as_nanos() as Nanos + began.elapsed().as_nanos() as Nanos;
                    let key = format!("{name}_{}", out.times.len());
                    let t = Instant::now();
                    let got = counters.consume(&key, now, 1);
                    let took = t.elapsed();
                    out.times.push(took);
                    match got {
                        Ok(_) => out.admitted += 1,
                        Err(_) => out.refused += 1,
                    }
                }
                out.took = began.elapsed();
                out
            })
        })
        .collect();
    let mut all = Flood {
        times: Vec::new(),
        admitted: 0,
        refused: 0,
        took: Duration::ZERO,
    };
    for t in threads {
        let one = t.join().expect("a flooding thread ends");
        all.times.extend(one.times);
        all.admitted += one.admitted;
        all.refused += one.refused;
        all.took += one.took;
    }
    all
}

fn report(name: &str, f: &Flood) {
    let mut times = f.times.clone();
    times.sort();
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    let slow: Duration = times.iter().filter(|t| **t > SLOW).sum();
    println!(
        "{name:>22} {:>9} {:>10.0} {:>9} {:>8.1} {:>8.1} {:>9.1} {:>9.1}%",
        times.len(),
        f.admitted as f64 / (f.took.as_secs_f64() / FLOOD_THREADS as f64),
        f.refused,
        at(0.5).as_secs_f64() * 1e6,
        at(0.99).as_secs_f64() * 1e6,
        times[times.len() - 1].as_secs_f64() * 1e3,
        100.0 * slow.as_secs_f64() / f.took.as_secs_f64(),
    );
}
