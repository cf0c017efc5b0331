//! One check per algorithm, hot key and a million keys, against governor's keyed limiter.
//!
//! Every contender reads the same fake time: one shared tick that moves
//! `STEP` forward before each check (governor through a `Clock` impl of its
//! own over the same atomic), so refills and window rolls happen and both
//! sides pay the same for time. Keys are built before anything is measured.
//!
//! Workloads (limits per one-second window, 100 checks per fake second on the
//! hot key):
//! - `hot_admitted`: limit 1000/s, every check admitted.
//! - `hot_denied`: limit 10/s, about 90% of checks denied (an abusive caller).
//! - `spread_1m`: limit 1000/s, 1,000,000 pre-populated keys visited in a
//!   fixed pseudo-random order; a key comes round every 10,000 fake seconds,
//!   so every check refills or rolls and is admitted.
//! - `decide_only`: the algorithm on a state outside any map, against
//!   governor's direct limiter, limit 1000/s: the arithmetic without the store.
//! - `limiter_check`: the whole `Limiter::check` on the hot key, two rules;
//!   `hot_two_threads` splits the checks between two threads on one key, on
//!   the system clock, as two server cores do under a single caller: what
//!   the key's shared cache lines cost when they cross between cores.
//!
//! `governor_keyed` is governor's `DashMapStateStore<String>`, the store of
//! `DefaultKeyedRateLimiter<String>`, on the shared tick: the reference.
//! `governor_keyed_quanta` is `RateLimiter::keyed` as users get it, on its
//! real clock, so its hot key runs at millions of checks per real second and
//! is denied; it shows what the fake clock does not cost.
//!
//! The admitted share each bench saw is printed after it, so the claims above
//! are checked on every run. Results go in docs/performance.md.

use std::cell::OnceCell;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use governor::clock::Clock as GovClock;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::DashMapStateStore;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use weir_core::store::Counters;
use weir_core::{
    AlgorithmKind, CheckRequest, Limiter, LimiterConfig, Policy, RuleSet, SystemClock,
};

/// Fake time advanced per check: 10 ms, so the hot key sees 100 checks/s.
const STEP: u64 = 10_000_000;
/// 2023-11-14 in unix ns: window algorithms see epoch-aligned time.
const START: u64 = 1_700_000_000_000_000_000;
const SPREAD_KEYS: usize = 1_000_000;
const HOT_KEY: &str = "cust_000123";
const WINDOW: Duration = Duration::from_secs(1);
const ADMIT_LIMIT: u32 = 1000;
const DENY_LIMIT: u32 = 10;

static TICK: AtomicU64 = AtomicU64::new(START);

/// The one time source of every contender.
#[derive(Debug, Clone, Copy, Default)]
struct Ticker;

impl Ticker {
    fn step() {
        TICK.store(TICK.load(Ordering::Relaxed) + STEP, Ordering::Relaxed);
    }
}

impl weir_core::Clock for Ticker {
    fn now(&self) -> u64 {
        TICK.load(Ordering::Relaxed)
    }
}

impl GovClock for Ticker {
    type Instant = Nanos;
    fn now(&self) -> Self::Instant {
        TICK.load(Ordering::Relaxed).into()
    }
}

/// governor's keyed limiter over the store of `DefaultKeyedRateLimiter<String>`.
type Governor<C> =
    RateLimiter<String, DashMapStateStore<String>, C, NoOpMiddleware<<C as GovClock>::Instant>>;
/// The reference: driven by the shared tick.
type GovKeyed = Governor<Ticker>;
/// `RateLimiter::keyed` exactly as a user gets it: the quanta clock.
type GovDefault = DefaultKeyedRateLimiter<String>;
type Group<'c> = BenchmarkGroup<'c, WallTime>;

fn policy(kind: AlgorithmKind, limit: u32) -> Policy {
    let limit = u64::from(limit);
    // Leaky bucket gets governor's burst (a quota's burst is its rate), so
    // the GCRA comparison is like for like; the token bucket's capacity
    // already defaults to the limit.
    let burst = (kind == AlgorithmKind::LeakyBucket).then_some(limit);
    Policy::new(kind, limit, WINDOW, burst, None).expect("bench policy is valid")
}

fn quota(limit: u32) -> Quota {
    Quota::per_second(NonZeroU32::new(limit).expect("limit is not zero"))
}

fn spread_keys() -> Vec<String> {
    let mut keys: Vec<String> = (0..SPREAD_KEYS).map(|i| format!("cust_{i:06}")).collect();
    keys.shuffle(&mut StdRng::seed_from_u64(0x5eed));
    // Reallocated in visiting order, so reading the next key's bytes is a
    // sequential read: a request's key arrives in a hot buffer, and the
    // random access measured should be the store's, not the key list's.
    keys.iter().map(|k| k.as_str().to_owned()).collect()
}

/// Tallies verdicts inside the measured loop; one add per check on every side.
#[derive(Default)]
struct Tally {
    admitted: u64,
    total: u64,
}

impl Tally {
    fn add(&mut self, allowed: bool) {
        self.admitted += u64::from(allowed);
        self.total += 1;
    }

    fn report(&self, group: &str, name: &str) {
        if self.total == 0 {
            return; // filtered out
        }
        let pct = 100.0 * self.admitted as f64 / self.total.max(1) as f64;
        println!(
            "{group}/{name}: admitted {pct:.1}% of {} checks",
            self.total
        );
    }
}

/// Benches `make()`'s store over `keys`. The store and the keys are built on
/// the first call only, so a filtered-out bench costs no memory or time.
fn bench_weir<'k>(
    g: &mut Group<'_>,
    group: &str,
    kind: AlgorithmKind,
    make: impl Fn(&[String]) -> Counters,
    keys: impl Fn() -> &'k [String],
) {
    let name = kind.as_str();
    let mut store = None;
    let mut tally = Tally::default();
    let mut i = 0usize;
    g.bench_function(name, |b| {
        let keys = keys();
        let c = store.get_or_insert_with(|| make(keys));
        b.iter(|| {
            let key = keys[i].as_str();
            i = if i + 1 == keys.len() { 0 } else { i + 1 };
            Ticker::step();
            let now = weir_core::Clock::now(&Ticker);
            let d = c.consume(black_box(key), now, 1).expect("store has room");
            tally.add(d.allowed);
            d
        })
    });
    tally.report(group, name);
}

fn bench_governor<'k, C>(
    g: &mut Group<'_>,
    group: &str,
    name: &str,
    make: impl Fn(&[String]) -> Governor<C>,
    keys: impl Fn() -> &'k [String],
) where
    C: GovClock,
{
    let mut store = None;
    let mut tally = Tally::default();
    let mut i = 0usize;
    g.bench_function(name, |b| {
        let keys = keys();
        let lim = store.get_or_insert_with(|| make(keys));
        b.iter(|| {
            let key = &keys[i];
            i = if i + 1 == keys.len() { 0 } else { i + 1 };
            Ticker::step();
            let r = lim.check_key(black_box(key));
            tally.add(r.is_ok());
            r
        })
    });
    tally.report(group, name);
}

fn hot(c: &mut Criterion, name: &'static str, limit: u32) {
    let key = [HOT_KEY.to_string()];
    let mut g = c.benchmark_group(name);
    for kind in AlgorithmKind::ALL {
        let make = |_: &[String]| Counters::new(policy(kind, limit), SPREAD_KEYS * 2);
        bench_weir(&mut g, name, kind, make, || &key);
    }
    let make = |_: &[String]| -> GovKeyed { RateLimiter::dashmap_with_clock(quota(limit), Ticker) };
    bench_governor(&mut g, name, "governor_keyed", make, || &key);
    let make = |_: &[String]| -> GovDefault { RateLimiter::keyed(quota(limit)) };
    bench_governor(&mut g, name, "governor_keyed_quanta", make, || &key);
    g.finish();
}

fn hot_admitted(c: &mut Criterion) {
    hot(c, "hot_admitted", ADMIT_LIMIT);
}

fn hot_denied(c: &mut Criterion) {
    hot(c, "hot_denied", DENY_LIMIT);
}

/// Every key checked once, so the bench starts from a full store.
fn populated(kind: AlgorithmKind, keys: &[String]) -> Counters {
    let counters = Counters::new(policy(kind, ADMIT_LIMIT), SPREAD_KEYS * 2);
    for k in keys {
        Ticker::step();
        counters
            .consume(k, weir_core::Clock::now(&Ticker), 1)
            .expect("store has room");
    }
    counters
}

fn spread(c: &mut Criterion) {
    let keys = OnceCell::new();
    let keys = || keys.get_or_init(spread_keys).as_slice();
    let mut g = c.benchmark_group("spread_1m");
    // Each store lives only through its own bench: six million-key maps at
    // once would leave each bench a different share of the caches and memory.
    for kind in AlgorithmKind::ALL {
        bench_weir(&mut g, "spread_1m", kind, |k| populated(kind, k), keys);
    }
    let make = |keys: &[String]| -> GovKeyed {
        let gov = RateLimiter::dashmap_with_clock(quota(ADMIT_LIMIT), Ticker);
        for k in keys {
            Ticker::step();
            let _ = gov.check_key(k);
        }
        gov
    };
    bench_governor(&mut g, "spread_1m", "governor_keyed", make, keys);
    let make = |keys: &[String]| -> GovDefault {
        let gov = RateLimiter::keyed(quota(ADMIT_LIMIT));
        for k in keys {
            let _ = gov.check_key(k);
        }
        gov
    };
    bench_governor(&mut g, "spread_1m", "governor_keyed_quanta", make, keys);
    g.finish();
}

/// The algorithm alone on a state held outside any map, against governor's
/// direct (unkeyed) limiter: what a check costs before hashing and locking.
fn decide_only(c: &mut Criterion) {
    let mut g = c.benchmark_group("decide_only");
    for kind in AlgorithmKind::ALL {
        let p = policy(kind, ADMIT_LIMIT);
        let mut state = p.fresh();
        let mut tally = Tally::default();
        g.bench_function(kind.as_str(), |b| {
            b.iter(|| {
                Ticker::step();
                let now = weir_core::Clock::now(&Ticker);
                let d = p
                    .decide(black_box(&mut state), now, 1)
                    .expect("state of the policy's own algorithm");
                tally.add(d.allowed);
                d
            })
        });
        tally.report("decide_only", kind.as_str());
    }
    let gov = RateLimiter::direct_with_clock(quota(ADMIT_LIMIT), Ticker);
    let mut tally = Tally::default();
    g.bench_function("governor_direct", |b| {
        b.iter(|| {
            Ticker::step();
            let r = black_box(&gov).check();
            tally.add(r.is_ok());
            r
        })
    });
    tally.report("decide_only", "governor_direct");
    g.finish();
}

const RULES: &str = r#"
[[rule]]
name = "per-client"
algorithm = "token_bucket"
limit = 1000
window = "1s"

[[rule]]
name = "per-ip"
by = "ip"
algorithm = "sliding_window_counter"
limit = 1000
window = "1s"
"#;

const ADMIT_ALL: &str = r#"
[[rule]]
name = "per-client"
algorithm = "sliding_window_counter"
limit = 1000000000
window = "60s"
"#;

/// The whole `Limiter::check`: validation, rule selection and both consumes.
fn limiter_check(c: &mut Criterion) {
    let rules = RuleSet::from_toml(RULES).expect("bench rules parse");
    let limiter = Limiter::new(rules, Arc::new(Ticker), LimiterConfig::default());
    let req = CheckRequest::new(HOT_KEY, "POST /v1/charges").ip("203.0.113.9");
    let v = limiter.check(&req).expect("bench request is valid");
    assert_eq!(v.applied.len(), 2, "per-client and per-ip both apply");

    let mut g = c.benchmark_group("limiter_check");
    let mut tally = Tally::default();
    g.bench_function("hot_two_rules", |b| {
        b.iter(|| {
            Ticker::step();
            let v = limiter
                .check(black_box(&req))
                .expect("bench request is valid");
            tally.add(v.allowed);
            v
        })
    });
    tally.report("limiter_check", "hot_two_rules");

    // Every check admitted, as in bench/requests/rules.toml: the real
    // clock would otherwise deny almost all of them.
    let limiter = Limiter::new(
        RuleSet::from_toml(ADMIT_ALL).expect("bench rules parse"),
        Arc::new(SystemClock::new()),
        LimiterConfig::default(),
    );
    g.bench_function("hot_two_threads", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            std::thread::scope(|s| {
                for _ in 0..2 {
                    s.spawn(|| {
                        for _ in 0..iters.div_ceil(2) {
                            black_box(limiter.check(black_box(&req)).expect("valid"));
                        }
                    });
                }
            });
            start.elapsed()
        })
    });
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
}

criterion_group! {
    name = benches;
    config = config();
    targets = hot_admitted, hot_denied, spread, decide_only, limiter_check
}
criterion_main!(benches);
