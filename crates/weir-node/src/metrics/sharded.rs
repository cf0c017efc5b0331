//! The per-check metrics, kept in per-thread shards and summed when scraped.
//!
//! Every check bumps a (rule, verdict) counter and observes the decision
//! histogram. Shared by all threads, each is a cache line that crosses
//! between cores on every check, and prometheus-client's histogram also
//! takes a lock per observation (a 100-item batch took it 100 times). Here
//! a thread writes only its own shard; a scrape adds the shards up, so it
//! reads every count the checks before it wrote.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use super::CheckLabels;

/// Shards per metric: more than the threads that serve checks on a
/// typical node, so two of them rarely share one.
const SHARDS: usize = 16;

/// A value alone on its cache lines (two of 64 bytes: adjacent-line
/// prefetch pairs them), so shards of different threads never share one.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded<T>(T);

/// This thread's shard index, handed out round-robin at its first check.
fn shard_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: Cell<Option<usize>> = const { Cell::new(None) };
    }
    INDEX.with(|i| match i.get() {
        Some(n) => n,
        None => {
            let n = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
            i.set(Some(n));
            n
        }
    })
}

/// A check's verdict label. A shard counts each at its index
/// (`as usize`), so a check counts itself without comparing strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Allowed,
    Denied,
    Unlimited,
    Unavailable,
    Invalid,
}

/// How many verdict labels there are: a shard's counts per rule.
const OUTCOMES: usize = Outcome::ALL.len();

impl Outcome {
    /// Every label, in the order of a shard's counts.
    const ALL: [Outcome; 5] = [
        Outcome::Allowed,
        Outcome::Denied,
        Outcome::Unlimited,
        Outcome::Unavailable,
        Outcome::Invalid,
    ];

    /// The label value the metric carries.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::Unlimited => "unlimited",
            Outcome::Unavailable => "unavailable",
            Outcome::Invalid => "invalid",
        }
    }

    /// The label read back by name; None for a label no check is counted
    /// under.
    fn named(label: &str) -> Option<Outcome> {
        Outcome::ALL.into_iter().find(|o| o.label() == label)
    }
}

type RuleCounts = HashMap<Arc<str>, [u64; OUTCOMES], weir_core::determinism::HashState>;

/// `weir_checks_total`: checks by rule and verdict. The rules are names
/// from the rule set (or the fixed override and empty labels), so the
/// series stay bounded by the rules whatever callers send.
#[derive(Debug, Clone, Default)]
pub struct CheckCounts {
    shards: Arc<[Padded<Mutex<RuleCounts>>; SHARDS]>,
}

impl CheckCounts {
    /// `n` more checks of `rule` with `verdict`. The rule's name is
    /// cloned only the first time this shard sees it.
    pub fn add(&self, rule: &Arc<str>, verdict: Outcome, n: u64) {
        let v = verdict as usize;
        let mut counts = self.shards[shard_index()].0.lock();
        match counts.get_mut(&**rule) {
            Some(c) => c[v] += n,
            None => {
                let mut c = [0; OUTCOMES];
                c[v] = n;
                counts.insert(rule.clone(), c);
            }
        }
    }

    /// Every shard's counts added up, by rule.
    pub(super) fn totals(&self) -> BTreeMap<Arc<str>, [u64; OUTCOMES]> {
        let mut all = BTreeMap::<Arc<str>, [u64; OUTCOMES]>::new();
        for shard in self.shards.iter() {
            // One shard locked at a time, and nothing else touched meanwhile.
            for (rule, counts) in shard.0.lock().iter() {
                let sum = all.entry(rule.clone()).or_default();
                for (s, c) in sum.iter_mut().zip(counts) {
                    *s += c;
                }
            }
        }
        all
    }

    pub fn get(&self, rule: &str, verdict: &str) -> u64 {
        let Some(v) = Outcome::named(verdict).map(|o| o as usize) else {
            return 0;
        };
        self.shards
            .iter()
            .map(|s| s.0.lock().get(rule).map_or(0, |c| c[v]))
            .sum()
    }
}

impl EncodeMetric for CheckCounts {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (rule, counts) in self.totals() {
            for (verdict, n) in Outcome::ALL.into_iter().zip(counts) {
                if n == 0 {
                    continue;
                }
                let labels = CheckLabels {
                    rule: rule.clone(),
                    verdict: verdict.label(),
                };
                encoder
                    .encode_family(&labels)?
                    .encode_counter::<NoLabelSet, _, u64>(&n, None)?;
            }
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }

    fn is_empty(&self) -> bool {
        self.shards.iter().all(|s| s.0.lock().is_empty())
    }
}

/// One shard of a histogram: a count per bucket (the last is +Inf) and
/// the sum in nanoseconds.
#[derive(Debug)]
struct HistogramShard<const B: usize> {
    counts: [AtomicU64; B],
    sum_nanos: AtomicU64,
}

impl<const B: usize> Default for HistogramShard<B> {
    fn default() -> Self {
        HistogramShard {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_nanos: AtomicU64::new(0),
        }
    }
}

/// A Prometheus histogram of durations over fixed upper bounds
/// (nanoseconds, exported in seconds), `B` = bounds + 1 for +Inf.
#[derive(Debug, Clone)]
pub struct Histogram<const B: usize> {
    bounds: &'static [u64],
    shards: Arc<[Padded<HistogramShard<B>>; SHARDS]>,
}

impl<const B: usize> Histogram<B> {
    pub fn new(bounds: &'static [u64]) -> Self {
        assert_eq!(bounds.len() + 1, B, "one count per bound, and +Inf");
        Histogram {
            bounds,
            shards: Arc::new(std::array::from_fn(|_| Padded::default())),
        }
    }

    /// `n` observations of `elapsed` each: two relaxed adds on this
    /// thread's shard, no lock.
    pub fn observe(&self, elapsed: Duration, n: u64) {
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        // A bucket holds the values at or below its bound (Prometheus `le`).
        let bucket = self.bounds.partition_point(|&b| b < nanos);
        let shard = &self.shards[shard_index()].0;
        shard.counts[bucket].fetch_add(n, Ordering::Relaxed);
        shard
            .sum_nanos
            .fetch_add(nanos.saturating_mul(n), Ordering::Relaxed);
    }
}

impl<const B: usize> EncodeMetric for Histogram<B> {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let mut counts = [0u64; B];
        let mut sum_nanos = 0u64;
        for s in self.shards.iter() {
            for (c, a) in counts.iter_mut().zip(&s.0.counts) {
                *c += a.load(Ordering::Relaxed);
            }
            sum_nanos = sum_nanos.wrapping_add(s.0.sum_nanos.load(Ordering::Relaxed));
        }
        super::encode_latency(
            encoder,
            self.bounds,
            &counts,
            Duration::from_nanos(sum_nanos),
        )
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guard: a shard counts a verdict at its discriminant and the metric
    /// reads it back at its place in `ALL`; the two orders must agree, or
    /// every count would carry another verdict's label.
    #[test]
    fn each_verdict_is_counted_and_read_back_under_its_own_label() {
        let c = CheckCounts::default();
        let rule: Arc<str> = Arc::from("r");
        for (n, o) in Outcome::ALL.into_iter().enumerate() {
            c.add(&rule, o, n as u64 + 1);
        }
        for (n, o) in Outcome::ALL.into_iter().enumerate() {
            assert_eq!(c.get("r", o.label()), n as u64 + 1, "{o:?}");
        }
        // The n-th label of `ALL` is read from the n-th count.
        assert_eq!(c.totals()["r"], [1, 2, 3, 4, 5]);
    }

    #[test]
    fn counts_from_every_thread_add_up() {
        let c = CheckCounts::default();
        let rule: Arc<str> = Arc::from("r");
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        c.add(&rule, Outcome::Allowed, 1);
                    }
                    c.add(&rule, Outcome::Denied, 5);
                });
            }
        });
        assert_eq!(c.get("r", "allowed"), 4000);
        assert_eq!(c.get("r", "denied"), 20);
        assert_eq!(c.get("r", "invalid"), 0);
        assert_eq!(c.get("other", "allowed"), 0);
    }

    #[test]
    fn a_value_on_a_bound_lands_in_that_bound_bucket() {
        static BOUNDS: [u64; 2] = [1_000_000, 10_000_000];
        let h = Histogram::<3>::new(&BOUNDS);
        h.observe(Duration::from_millis(1), 2);
        h.observe(Duration::from_millis(5), 1);
        h.observe(Duration::from_secs(1), 1);
        let counts: Vec<u64> = h.shards.iter().fold(vec![0; 3], |mut acc, s| {
            for (a, c) in acc.iter_mut().zip(&s.0.counts) {
                *a += c.load(Ordering::Relaxed);
            }
            acc
        });
        assert_eq!(counts, [2, 1, 1]);
    }
}
