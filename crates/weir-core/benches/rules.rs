//! Rule sets at scale: loading, reloading and the memory of 1k, 10k and 100k rules, and one check's cost at 10 rules against 100k.
//!
//! The set is one rule per tenant route (`route = "GET /t/{i}"`), as an
//! operator with a rule per tenant writes it. Each size is loaded in a
//! child process of its own, so no size inherits another's freed memory:
//! the child times `RuleSet::from_toml` and `Limiter::new` (parse,
//! validate, index, tables), then a reload that changes one limit (the
//! file parsed again, the changed tier found and written, the set
//! installed), and counts live heap bytes with a wrapper around the
//! system allocator: what the loaded set holds, and the peak while
//! loading (the file's text and its parsed TOML included). The text is
//! built before the first reading.
//!
//! The check is timed on two limiters in this process, 10 rules and
//! 100,000, for the same key and the same matched rule: alternating
//! rounds, the median of each, so drift on a shared machine hits both.
//!
//! Run: `cargo bench -p weir-core --bench rules`. Results go in
//! docs/performance.md ("Rule sets at scale").

use std::hint::black_box;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use weir_core::{CheckRequest, FakeClock, Limiter, LimiterConfig, RuleSet, NANOS_PER_SEC};

#[path = "common/counting.rs"]
mod counting;
use counting::{Counting, LIVE, PEAK};

#[global_allocator]
static ALLOC: Counting = Counting;

const SIZES: [usize; 3] = [1_000, 10_000, 100_000];
/// A limit no round of checks reaches, so every check is an admission.
const HIGH: u64 = 1_000_000_000_000;

/// `n` rules, one per tenant route; rule 7's limit is `limit7`.
fn rules_file(n: usize, limit7: u64) -> String {
    let mut text = String::with_capacity(n * 110);
    for i in 0..n {
        let limit = if i == 7 { limit7 } else { HIGH };
        text.push_str(&format!(
            "[[rule]]\nname = \"tenant-{i}\"\nroute = \"GET /t/{i}\"\n\
             algorithm = \"fixed_window\"\nlimit = {limit}\nwindow = \"60s\"\n"
        ));
    }
    text
}

fn limiter(set: RuleSet) -> Limiter {
    let clock = Arc::new(FakeClock::new(1_700_000_000 * NANOS_PER_SEC));
    Limiter::new(set, clock, LimiterConfig::default())
}

fn mb(bytes: usize) -> f64 {
    bytes as f64 / 1e6
}

/// One size loaded and reloaded in this process; prints
/// `n load_ms reload_ms held_bytes peak_bytes`.
fn child(n: usize) {
    let (text, edited) = (rules_file(n, HIGH), rules_file(n, HIGH - 1));
    let live0 = LIVE.load(Ordering::Relaxed);
    PEAK.store(live0, Ordering::Relaxed);
    let t = Instant::now();
    let set = RuleSet::from_toml(&text).expect("a valid set");
    let lim = limiter(set.clone());
    let load = t.elapsed();
    let (held, peak) = (
        LIVE.load(Ordering::Relaxed) - live0,
        PEAK.load(Ordering::Relaxed) - live0,
    );
    // A reload as the node's file watcher makes it: parse the new text,
    // write the tiers the edit changed over the set in force, install.
    let t = Instant::now();
    let next = RuleSet::from_toml(&edited).expect("a valid set");
    let current = lim.rules();
    let version = current.next_version().expect("below the ceiling");
    let written = current
        .with_shared_tiers(set.shared_tier_changes(&next), version)
        .expect("a valid edit");
    lim.install(written);
    let reload = t.elapsed();
    assert_eq!(
        lim.rules().get("tenant-7").map(|(_, r)| r.limit),
        Some(HIGH - 1)
    );
    println!(
        "{n} {:.1} {:.1} {held} {peak}",
        load.as_secs_f64() * 1e3,
        reload.as_secs_f64() * 1e3
    );
    black_box((lim, set, next));
}

/// Nanoseconds per check over `iters` checks of `req`.
fn time_checks(lim: &Limiter, req: &CheckRequest, iters: u32) -> f64 {
    let t = Instant::now();
    for _ in 0..iters {
        let v = lim.check(black_box(req)).expect("a valid check");
        black_box(v.allowed);
    }
    t.elapsed().as_nanos() as f64 / f64::from(iters)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One check of the same key against the same rule, in a set of 10 and of
/// 100,000: alternating rounds, median of each.
fn check_cost() {
    let small = limiter(RuleSet::from_toml(&rules_file(10, HIGH)).expect("valid"));
    let large = limiter(RuleSet::from_toml(&rules_file(100_000, HIGH)).expect("valid"));
    let req = CheckRequest::new("cust_42", "GET /t/7");
    for lim in [&small, &large] {
        let v = lim.check(&req).expect("valid");
        assert_eq!(
            &*v.applied[0].rule.name, "tenant-7",
            "the same rule matched"
        );
        time_checks(lim, &req, 200_000);
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..21 {
        a.push(time_checks(&small, &req, 200_000));
        b.push(time_checks(&large, &req, 200_000));
    }
    let (a, b) = (median(a), median(b));
    println!();
    println!("one check, same key and rule (median of 21 alternating rounds of 200,000)");
    println!("{:>10} {:>12}", "rules", "ns/check");
    println!("{:>10} {:>12.1}", 10, a);
    println!("{:>10} {:>12.1}", 100_000, b);
    println!("100k / 10 = {:.3}", b / a);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        child(args[i + 1].parse().expect("a size"));
        return;
    }
    let exe = std::env::current_exe().expect("own path");
    println!(
        "{:>8} {:>10} {:>11} {:>9} {:>13} {:>9}",
        "rules", "load ms", "reload ms", "held MB", "bytes/rule", "peak MB"
    );
    for n in SIZES {
        let out = Command::new(&exe)
            .args(["--child", &n.to_string()])
            .output()
            .expect("child runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = String::from_utf8_lossy(&out.stdout);
        let f: Vec<f64> = line
            .split_whitespace()
            .map(|x| x.parse().expect("a number"))
            .collect();
        println!(
            "{:>8} {:>10.1} {:>11.1} {:>9.1} {:>13.0} {:>9.1}",
            n,
            f[1],
            f[2],
            mb(f[3] as usize),
            f[3] / n as f64,
            mb(f[4] as usize)
        );
    }
    check_cost();
}
