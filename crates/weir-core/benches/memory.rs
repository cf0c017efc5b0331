//! Bytes a key costs in the store, per algorithm, against governor's keyed limiter.
//!
//! Each store gets 1,000,000 keys like `cust_000123`, one check each, in a
//! child process of its own so no store inherits another's freed memory. The
//! child counts live heap bytes with a wrapper around the system allocator
//! and reads its resident set from /proc; both deltas are divided by the key
//! count. Key strings are built before the first reading, so what is counted
//! is what the store itself holds: map slots, keys and state.
//!
//! Run: `cargo bench -p weir-core --bench memory`. Results go in
//! docs/performance.md.

use std::hint::black_box;
use std::mem::size_of;
use std::num::NonZeroU32;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;

use compact_str::CompactString;
use governor::state::keyed::DashMapStateStore;
use governor::state::InMemoryState;
use governor::{Quota, RateLimiter};
use weir_core::algorithm::{
    FixedWindowState, LeakyBucketState, SlidingCounterState, SlidingLogState, TokenBucketState,
};
use weir_core::store::Counters;
use weir_core::{AlgorithmKind, Policy, NANOS_PER_SEC};

const KEYS: usize = 1_000_000;
const START: u64 = 1_700_000_000 * NANOS_PER_SEC;

#[path = "common/counting.rs"]
mod counting;
use counting::{Counting, LIVE, PEAK};

#[global_allocator]
static ALLOC: Counting = Counting;

/// Resident bytes, from /proc (Linux); 0 where it cannot be read.
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

const STORES: [&str; 6] = [
    "token_bucket",
    "leaky_bucket",
    "fixed_window",
    "sliding_window_log",
    "sliding_window_counter",
    "governor_keyed",
];

/// One store filled in this process; prints `name live peak rss` in bytes per key.
fn measure(name: &str) {
    let keys: Vec<String> = (0..KEYS).map(|i| format!("cust_{i:06}")).collect();
    let (live0, rss0) = (LIVE.load(Ordering::Relaxed), rss());
    PEAK.store(live0, Ordering::Relaxed);
    let held: Box<dyn std::any::Any> = if name == "governor_keyed" {
        let quota = Quota::per_second(NonZeroU32::new(1000).expect("not zero"));
        let gov = RateLimiter::<String, DashMapStateStore<String>, _>::keyed(quota);
        for k in &keys {
            let _ = gov.check_key(k);
        }
        Box::new(gov)
    } else {
        let kind: AlgorithmKind = name.parse().expect("a known algorithm");
        let policy =
            Policy::new(kind, 1000, Duration::from_secs(1), None, None).expect("valid policy");
        let counters = Counters::new(policy, KEYS * 2);
        for (i, k) in keys.iter().enumerate() {
            counters
                .consume(k, START + i as u64, 1)
                .expect("store has room");
        }
        assert_eq!(counters.len(), KEYS);
        Box::new(counters)
    };
    let (live1, peak, rss1) = (
        LIVE.load(Ordering::Relaxed),
        PEAK.load(Ordering::Relaxed),
        rss(),
    );
    black_box(&held);
    let per = |a: usize, b: usize| a.saturating_sub(b) as f64 / KEYS as f64;
    println!(
        "{name} {:.1} {:.1} {:.1}",
        per(live1, live0),
        per(peak, live0),
        per(rss1, rss0)
    );
}

fn state_size(name: &str) -> usize {
    match name {
        "token_bucket" => size_of::<TokenBucketState>(),
        "leaky_bucket" => size_of::<LeakyBucketState>(),
        "fixed_window" => size_of::<FixedWindowState>(),
        "sliding_window_log" => size_of::<SlidingLogState>(),
        "sliding_window_counter" => size_of::<SlidingCounterState>(),
        _ => size_of::<InMemoryState>(),
    }
}

fn key_size(name: &str) -> usize {
    if name == "governor_keyed" {
        size_of::<String>()
    } else {
        size_of::<CompactString>()
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--one") {
        measure(&args[i + 1]);
        return;
    }
    let exe = std::env::current_exe().expect("own path");
    println!("{KEYS} keys, one check each; bytes per key (heap counted by a global allocator; RSS from /proc)");
    println!(
        "{:<24} {:>8} {:>8} {:>10} {:>10} {:>10}",
        "store", "state", "key", "live/key", "peak/key", "rss/key"
    );
    for name in STORES {
        let out = Command::new(&exe)
            .args(["--one", name])
            .output()
            .expect("child runs");
        assert!(out.status.success(), "{name}: {out:?}");
        let line = String::from_utf8_lossy(&out.stdout);
        let f: Vec<&str> = line.split_whitespace().collect();
        println!(
            "{:<24} {:>8} {:>8} {:>10} {:>10} {:>10}",
            name,
            state_size(name),
            key_size(name),
            f[1],
            f[2],
            f[3]
        );
    }
}
