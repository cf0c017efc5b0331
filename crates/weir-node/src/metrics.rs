//! The node's Prometheus metrics, held per node (not in a process-global
//! registry) so several nodes in one test process keep separate counts.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use weir_core::{CheckError, Verdict};

pub mod scrape;

/// The `rule` label of every check decided by a limit carried in the request
/// (an Envoy descriptor override). Each override is a rule of its own, named
/// after its limit, so labelling by name would let a caller mint a series
/// per value; `*` cannot occur in a rule name, so this label never collides.
pub const OVERRIDE_LABEL: &str = "override:*";

/// Upper bounds of the decision latency histogram, in microseconds.
const LATENCY_BUCKETS_US: [u64; 12] = [
    5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 50_000,
];

#[derive(Default)]
pub struct Metrics {
    /// (rule, verdict) -> count; rule "" for unlimited and refused checks.
    checks: DashMap<(Arc<str>, &'static str), AtomicU64>,
    shadow_would_deny: DashMap<Arc<str>, AtomicU64>,
    /// Refused inputs by the field at fault.
    rejected_inputs: DashMap<&'static str, AtomicU64>,
    latency_buckets: [AtomicU64; LATENCY_BUCKETS_US.len()],
    latency_sum_ns: AtomicU64,
    latency_count: AtomicU64,
    pub rules_reloads: AtomicU64,
    pub rules_reload_failures: AtomicU64,
}

fn bump<K: std::hash::Hash + Eq>(map: &DashMap<K, AtomicU64>, key: K) {
    bump_by(map, key, 1);
}

fn bump_by<K: std::hash::Hash + Eq>(map: &DashMap<K, AtomicU64>, key: K, n: u64) {
    if let Some(c) = map.get(&key) {
        c.fetch_add(n, Ordering::Relaxed);
        return;
    }
    map.entry(key).or_default().fetch_add(n, Ordering::Relaxed);
}

/// The (rule, verdict) label of a decided check.
fn check_label(verdict: &Verdict) -> (Arc<str>, &'static str) {
    match verdict.binding() {
        Some(a) if verdict.allowed => (a.rule.name.clone(), "allowed"),
        Some(a) => (a.rule.name.clone(), "denied"),
        None => (UNLABELLED.clone(), "unlimited"),
    }
}

/// The empty rule label, allocated once rather than per unlimited check.
static UNLABELLED: std::sync::LazyLock<Arc<str>> = std::sync::LazyLock::new(|| Arc::from(""));

impl Metrics {
    pub fn record_verdict(&self, verdict: &Verdict, elapsed: Duration) {
        self.observe(elapsed, 1);
        bump(&self.checks, check_label(verdict));
        for a in verdict.shadow_denials() {
            bump(&self.shadow_would_deny, a.rule.name.clone());
        }
    }

    /// A batch of verdicts decided in one pass, each taking `per_item`.
    /// Counted per distinct label rather than per check: a batch of a
    /// hundred checks of one rule touches the shared counters once.
    pub fn record_verdicts<'a>(
        &self,
        verdicts: impl IntoIterator<Item = &'a Verdict>,
        per_item: Duration,
    ) {
        let mut counts: Vec<((Arc<str>, &'static str), u64)> = Vec::new();
        let mut n = 0;
        for v in verdicts {
            n += 1;
            let label = check_label(v);
            match counts.iter_mut().find(|(l, _)| *l == label) {
                Some((_, c)) => *c += 1,
                None => counts.push((label, 1)),
            }
            for a in v.shadow_denials() {
                bump(&self.shadow_would_deny, a.rule.name.clone());
            }
        }
        self.observe(per_item, n);
        for (label, c) in counts {
            bump_by(&self.checks, label, c);
        }
    }

    /// A check decided by a limit the request carried (an Envoy override),
    /// counted under [`OVERRIDE_LABEL`] whatever the override's name.
    pub fn record_override_verdict(&self, verdict: &Verdict, elapsed: Duration) {
        self.observe(elapsed, 1);
        let v = if verdict.allowed { "allowed" } else { "denied" };
        bump(&self.checks, (Arc::from(OVERRIDE_LABEL), v));
    }

    pub fn record_failure(&self, failure: &CheckError, elapsed: Duration) {
        self.observe(elapsed, 1);
        if failure.is_input() {
            bump(&self.checks, (Arc::from(""), "invalid"));
            bump(&self.rejected_inputs, failure.field().unwrap_or("request"));
        } else {
            bump(&self.checks, (Arc::from(""), "unavailable"));
        }
    }

    /// A request refused at the edge (bad JSON, oversized body...).
    pub fn record_rejected_input(&self, field: &'static str) {
        bump(&self.checks, (Arc::from(""), "invalid"));
        bump(&self.rejected_inputs, field);
    }

    /// `n` checks that took `elapsed` each.
    fn observe(&self, elapsed: Duration, n: u64) {
        if n == 0 {
            return;
        }
        let us = elapsed.as_micros() as u64;
        if let Some(i) = LATENCY_BUCKETS_US.iter().position(|&b| us <= b) {
            self.latency_buckets[i].fetch_add(n, Ordering::Relaxed);
        }
        self.latency_sum_ns
            .fetch_add(elapsed.as_nanos() as u64 * n, Ordering::Relaxed);
        self.latency_count.fetch_add(n, Ordering::Relaxed);
    }

    /// Checks counted for (rule, verdict); for tests and the sim.
    pub fn checks(&self, rule: &str, verdict: &str) -> u64 {
        self.checks
            .iter()
            .filter(|e| &*e.key().0 == rule && e.key().1 == verdict)
            .map(|e| e.value().load(Ordering::Relaxed))
            .sum()
    }

    pub fn shadow_would_deny(&self, rule: &str) -> u64 {
        self.shadow_would_deny
            .get(rule)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Prometheus text exposition of this node's own counters; `extra` is
    /// appended (gauges the caller computes at scrape time).
    pub fn render(&self, extra: &str) -> String {
        let mut out = String::new();
        out.push_str("# HELP weir_checks_total Checks decided, by rule and verdict.\n");
        out.push_str("# TYPE weir_checks_total counter\n");
        for e in self.checks.iter() {
            let ((rule, verdict), n) = (e.key(), e.value().load(Ordering::Relaxed));
            let _ = writeln!(
                out,
                "weir_checks_total{{rule=\"{rule}\",verdict=\"{verdict}\"}} {n}"
            );
        }
        out.push_str(
            "# HELP weir_shadow_would_deny_total Requests a shadow rule would have denied.\n",
        );
        out.push_str("# TYPE weir_shadow_would_deny_total counter\n");
        for e in self.shadow_would_deny.iter() {
            let _ = writeln!(
                out,
                "weir_shadow_would_deny_total{{rule=\"{}\"}} {}",
                e.key(),
                e.value().load(Ordering::Relaxed)
            );
        }
        out.push_str(
            "# HELP weir_rejected_inputs_total Requests refused as malformed, by field.\n",
        );
        out.push_str("# TYPE weir_rejected_inputs_total counter\n");
        for e in self.rejected_inputs.iter() {
            let _ = writeln!(
                out,
                "weir_rejected_inputs_total{{field=\"{}\"}} {}",
                e.key(),
                e.value().load(Ordering::Relaxed)
            );
        }
        out.push_str("# HELP weir_decision_seconds Time to decide a check.\n");
        out.push_str("# TYPE weir_decision_seconds histogram\n");
        let mut cumulative = 0;
        for (i, b) in LATENCY_BUCKETS_US.iter().enumerate() {
            cumulative += self.latency_buckets[i].load(Ordering::Relaxed);
            let le = *b as f64 / 1e6;
            let _ = writeln!(
                out,
                "weir_decision_seconds_bucket{{le=\"{le}\"}} {cumulative}"
            );
        }
        let count = self.latency_count.load(Ordering::Relaxed);
        let _ = writeln!(out, "weir_decision_seconds_bucket{{le=\"+Inf\"}} {count}");
        let sum = self.latency_sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "weir_decision_seconds_sum {sum}");
        let _ = writeln!(out, "weir_decision_seconds_count {count}");
        out.push_str("# TYPE weir_rules_reloads_total counter\n");
        let _ = writeln!(
            out,
            "weir_rules_reloads_total {}",
            self.rules_reloads.load(Ordering::Relaxed)
        );
        out.push_str("# TYPE weir_rules_reload_failures_total counter\n");
        let _ = writeln!(
            out,
            "weir_rules_reload_failures_total {}",
            self.rules_reload_failures.load(Ordering::Relaxed)
        );
        out.push_str(extra);
        out
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use weir_core::{CheckRequest, FakeClock, Limiter, LimiterConfig, RuleSet};

    use super::{bump, bump_by, AtomicU64, DashMap, Metrics, Ordering};

    #[test]
    fn a_batch_is_counted_per_label_and_timed_per_check() {
        let rules = RuleSet::from_toml(
            "[[rule]]\nname = \"r\"\nroute = \"GET /a\"\nalgorithm = \"fixed_window\"\nlimit = 1\nwindow = \"60s\"\n",
        )
        .unwrap();
        let limiter = Limiter::new(
            rules,
            Arc::new(FakeClock::at_secs(60.0)),
            LimiterConfig::default(),
        );
        let verdicts: Vec<_> = [
            ("k1", "GET /a"),
            ("k1", "GET /a"),
            ("k2", "GET /a"),
            ("k3", "GET /b"),
        ]
        .iter()
        .map(|(k, r)| limiter.check(&CheckRequest::new(*k, *r)).unwrap())
        .collect();
        let m = Metrics::default();
        m.record_verdicts(&verdicts, Duration::from_micros(20));
        assert_eq!(m.checks("r", "allowed"), 2);
        assert_eq!(m.checks("r", "denied"), 1);
        assert_eq!(m.checks("", "unlimited"), 1);
        let text = m.render("");
        assert!(text.contains("weir_decision_seconds_count 4\n"), "{text}");
        assert!(
            text.contains("weir_decision_seconds_bucket{le=\"0.000025\"} 4\n"),
            "{text}"
        );
    }

    /// `bump_by` reads the counter and, for a label never seen, takes the
    /// map's entry: the read's guard must be gone by then, or the thread
    /// deadlocks on its own shard lock.
    #[test]
    fn a_new_label_is_counted_with_no_guard_held_across_the_insert() {
        let (done, result) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let map: DashMap<&'static str, AtomicU64> = DashMap::new();
            bump(&map, "key");
            bump(&map, "key");
            bump_by(&map, "ip", 3);
            let _ = done.send((map.get("key").unwrap().load(Ordering::Relaxed), map.len()));
        });
        let got = result
            .recv_timeout(Duration::from_secs(10))
            .expect("returned instead of deadlocking");
        assert_eq!(got, (2, 2));
    }
}
