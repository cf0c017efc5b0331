//! The node's Prometheus metrics through `prometheus-client`, in a registry
//! per node (not a process-global one) so several nodes in one test process
//! keep separate counts.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{prometheus_text, EncodeLabelSet, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use weir_cluster::stats::{LATENCY_BOUNDS_NS, LATENCY_BUCKETS};
use weir_core::{CheckError, Verdict};

mod process;
pub mod scrape;
mod sharded;

use sharded::{CheckCounts, Histogram, Outcome};

/// The `Content-Type` of what [`Metrics::render`] writes: the Prometheus
/// text format, version 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// The `rule` label of every check decided by a limit carried in the request
/// (a gRPC item's or an Envoy descriptor's override): [`weir_core::Rule::label`]'s.
pub const OVERRIDE_LABEL: &str = weir_core::CARRIED_LABEL;

/// `weir_checks_total`'s labels. The rule is a name from the rule set,
/// [`OVERRIDE_LABEL`] (every carried limit's, [`weir_core::Rule::label`])
/// or empty, and the verdict one of five words, so the series are bounded
/// by the rules, whatever callers send.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CheckLabels {
    rule: Arc<str>,
    verdict: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleLabels {
    rule: Arc<str>,
}

/// A field name from the parsers' fixed list, never caller text.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FieldLabels {
    field: &'static str,
}

/// The decision histogram: a count per bound of [`LATENCY_BOUNDS_NS`] and +Inf.
type DecisionSeconds = Histogram<LATENCY_BUCKETS>;

/// `weir_build_info`'s labels: the crate's version, and the commit it was
/// built from (`unknown` outside a git checkout; build.rs).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    commit: &'static str,
}

/// A duration histogram in the text format: `counts[i]` durations at or
/// under `bounds_ns[i]` and above the bound before (the last count: past
/// every bound, +Inf), and their `sum`; bounds and sum in seconds.
pub(crate) fn encode_latency(
    mut encoder: MetricEncoder,
    bounds_ns: &[u64],
    counts: &[u64],
    sum: Duration,
) -> std::fmt::Result {
    let buckets: Vec<(f64, u64)> = bounds_ns
        .iter()
        // Exact: both are integers, and IEEE division rounds once, so
        // 5000 ns is the same f64 as the literal 5e-6.
        .map(|&ns| ns as f64 / 1e9)
        .chain(std::iter::once(f64::INFINITY))
        .zip(counts.iter().copied())
        .collect();
    let count = counts.iter().sum();
    encoder.encode_histogram::<NoLabelSet>(sum.as_secs_f64(), count, &buckets, None)
}

pub struct Metrics {
    registry: Registry,
    checks: CheckCounts,
    shadow_would_deny: Family<RuleLabels, Counter>,
    rejected_inputs: Family<FieldLabels, Counter>,
    decision_seconds: DecisionSeconds,
    rules_reloads: Counter,
    rules_reload_failures: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new(None)
    }
}

/// The (rule, verdict) label of a decided check, borrowed: cloning the
/// rule's name would touch its shared reference count on every check.
fn check_label(verdict: &Verdict) -> (&Arc<str>, Outcome) {
    match verdict.binding() {
        Some(a) if verdict.allowed => (a.rule.label(), Outcome::Allowed),
        Some(a) => (a.rule.label(), Outcome::Denied),
        None => (&UNLABELLED, Outcome::Unlimited),
    }
}

/// Two labels of one batch, compared by address first: the checks of one
/// rule share its name, and comparing the bytes was two memcmp calls per
/// check. Two names alike at different addresses are the same label too.
fn same_label(a: (&Arc<str>, Outcome), b: (&Arc<str>, Outcome)) -> bool {
    a.1 == b.1 && (Arc::ptr_eq(a.0, b.0) || a.0 == b.0)
}

/// The empty rule label, allocated once rather than per unlimited check.
static UNLABELLED: std::sync::LazyLock<Arc<str>> = std::sync::LazyLock::new(|| Arc::from(""));

impl Metrics {
    /// The node's own counters, and `scrape` (figures read from the
    /// limiter and the cluster when scraped) beside them.
    pub fn new(scrape: Option<Box<dyn Collector>>) -> Self {
        let checks = CheckCounts::default();
        let shadow_would_deny = Family::<RuleLabels, Counter>::default();
        let rejected_inputs = Family::<FieldLabels, Counter>::default();
        let decision_seconds = DecisionSeconds::new(&LATENCY_BOUNDS_NS);
        let rules_reloads = Counter::default();
        let rules_reload_failures = Counter::default();
        // The registry ends each help with a period itself.
        let mut registry = Registry::default();
        // Counter names without `_total`: the library appends it.
        registry.register(
            "weir_checks",
            "Checks decided, by rule and verdict",
            checks.clone(),
        );
        registry.register(
            "weir_shadow_would_deny",
            "Requests a shadow rule would have denied",
            shadow_would_deny.clone(),
        );
        registry.register(
            "weir_rejected_inputs",
            "Requests refused as malformed, by field",
            rejected_inputs.clone(),
        );
        registry.register(
            "weir_decision_seconds",
            "Time to decide a check",
            decision_seconds.clone(),
        );
        registry.register(
            "weir_rules_reloads",
            "Rules file reloads installed",
            rules_reloads.clone(),
        );
        registry.register(
            "weir_rules_reload_failures",
            "Rules file reloads refused; the previous set stays",
            rules_reload_failures.clone(),
        );
        let build = Family::<BuildLabels, Gauge>::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
                commit: env!("WEIR_COMMIT"),
            })
            .set(1);
        registry.register(
            "weir_build_info",
            "1, labelled with the version and the commit this node was built from",
            build,
        );
        registry.register_collector(Box::new(process::ProcessCollector));
        if let Some(c) = scrape {
            registry.register_collector(c);
        }
        Metrics {
            registry,
            checks,
            shadow_would_deny,
            rejected_inputs,
            decision_seconds,
            rules_reloads,
            rules_reload_failures,
        }
    }

    pub fn record_verdict(&self, verdict: &Verdict, elapsed: Duration) {
        self.decision_seconds.observe(elapsed, 1);
        let (rule, v) = check_label(verdict);
        self.checks.add(rule, v, 1);
        for a in verdict.shadow_denials() {
            self.shadow_denied(a.rule.label());
        }
    }

    /// A batch of verdicts decided in one pass, each taking `per_item`.
    /// Counted per distinct label rather than per check: a batch of a
    /// hundred checks of one rule touches the counters once.
    pub fn record_verdicts<'a>(
        &self,
        verdicts: impl IntoIterator<Item = &'a Verdict>,
        per_item: Duration,
    ) {
        let mut counts: Vec<((&Arc<str>, Outcome), u64)> = Vec::new();
        let mut n = 0;
        for v in verdicts {
            n += 1;
            let label = check_label(v);
            match counts.iter_mut().find(|(l, _)| same_label(*l, label)) {
                Some((_, c)) => *c += 1,
                None => counts.push((label, 1)),
            }
            for a in v.shadow_denials() {
                self.shadow_denied(a.rule.label());
            }
        }
        self.decision_seconds.observe(per_item, n);
        for ((rule, verdict), c) in counts {
            self.checks.add(rule, verdict, c);
        }
    }

    pub fn record_failure(&self, failure: &CheckError, elapsed: Duration) {
        self.decision_seconds.observe(elapsed, 1);
        if failure.is_input() {
            self.record_rejected_input(failure.field().unwrap_or("request"));
        } else {
            self.checks.add(&UNLABELLED, Outcome::Unavailable, 1);
        }
    }

    /// A request refused at the edge (bad JSON, oversized body...).
    pub fn record_rejected_input(&self, field: &'static str) {
        self.checks.add(&UNLABELLED, Outcome::Invalid, 1);
        self.rejected_inputs
            .get_or_create(&FieldLabels { field })
            .inc();
    }

    pub fn record_reload(&self) {
        self.rules_reloads.inc();
    }

    pub fn record_reload_failure(&self) {
        self.rules_reload_failures.inc();
    }

    fn shadow_denied(&self, rule: &Arc<str>) {
        self.shadow_would_deny
            .get_or_create(&RuleLabels { rule: rule.clone() })
            .inc();
    }

    /// Checks counted for (rule, verdict) since start.
    pub fn checks(&self, rule: &str, verdict: &'static str) -> u64 {
        self.checks.get(rule, verdict)
    }

    /// Allowed, denied and shadow-denied checks since start of every rule
    /// that has any: one pass over the check counts, so what it costs
    /// follows the rules that saw checks, not the rules in force (a node
    /// with 100,000 rules asked for each, every second, spent a fifth of
    /// its CPU on it). `shadow` names the shadow rules to look up.
    pub fn rule_totals<'a>(
        &self,
        shadow: impl Iterator<Item = &'a Arc<str>>,
    ) -> Vec<(Arc<str>, [u64; 3])> {
        let mut all: std::collections::BTreeMap<Arc<str>, [u64; 3]> = self
            .checks
            .totals()
            .into_iter()
            .filter(|(rule, _)| !rule.is_empty())
            .map(|(rule, c)| {
                let t = [c[Outcome::Allowed as usize], c[Outcome::Denied as usize], 0];
                (rule, t)
            })
            .collect();
        for rule in shadow {
            let n = self.shadow_would_deny(rule);
            if n > 0 {
                all.entry(rule.clone()).or_default()[2] = n;
            }
        }
        all.into_iter().collect()
    }

    /// Requests the shadow rule `rule` would have denied since start.
    pub fn shadow_would_deny(&self, rule: &str) -> u64 {
        let label = RuleLabels {
            rule: Arc::from(rule),
        };
        self.shadow_would_deny.get(&label).map_or(0, |c| c.get())
    }

    pub fn rules_reloads(&self) -> u64 {
        self.rules_reloads.get()
    }

    pub fn rules_reload_failures(&self) -> u64 {
        self.rules_reload_failures.get()
    }

    /// The Prometheus text exposition (version 0.0.4) of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_text::encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests;
