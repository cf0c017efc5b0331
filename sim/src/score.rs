//! Every verdict scored against the reference: over- and under-admission, latency, throughput, traffic between nodes.

use std::time::Duration;

use hdrhistogram::Histogram;

use crate::faults::FaultReport;
use crate::load::Record;
use crate::scrape::PeerTraffic;
use crate::target::Outcome;
use crate::workloads::{admitted_per_key, reference_per_key, Figures, Plan};

/// Client-side check latency, milliseconds.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
}

/// One key's totals.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct KeyScore {
    pub key: String,
    pub sent: u64,
    pub admitted: u64,
    pub reference: u64,
}

/// Admitted in the trailing window, summed over the watched keys that have
/// sent anything yet and divided by their combined limit: 1.0 is the limit
/// exactly, whether the keys start together or one after another.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Series {
    pub t_s: Vec<f64>,
    pub admitted: Vec<f64>,
    pub reference: Vec<f64>,
    pub window_s: f64,
    pub limit: u64,
    pub keys: usize,
    /// The window edge the plan was aligned to, if any.
    #[serde(default)]
    pub boundary_s: Option<f64>,
}

/// Arrivals per fixed-width bucket from the run's start (retries, for the
/// retry storm).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Buckets {
    pub start_s: f64,
    pub width_s: f64,
    pub counts: Vec<u32>,
}

fn retry_buckets(records: &[Record], start_ns: u64) -> Option<Buckets> {
    let width = crate::workloads::retry_storm::BUCKET.as_nanos() as u64;
    let times: Vec<u64> = records
        .iter()
        .filter(|r| r.attempt == 1)
        .map(|r| r.sent_ns.saturating_sub(start_ns))
        .collect();
    let last = *times.iter().max()?;
    let mut counts = vec![0u32; (last / width + 1) as usize];
    for t in times {
        counts[(t / width) as usize] += 1;
    }
    Some(Buckets {
        start_s: 0.0,
        width_s: width as f64 / 1e9,
        counts,
    })
}

/// After a fault: over-admission set against what the cluster had admitted
/// before it, an upper bound on what the lost node held for each key.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct FaultBound {
    pub keys: usize,
    /// Keys admitted more than the reference.
    pub keys_over: usize,
    /// Keys whose over-admission exceeds what was admitted before the fault.
    pub keys_over_held: usize,
    pub over: u64,
    pub held_before_fault: u64,
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct RunResult {
    pub strategy: String,
    pub workload: String,
    pub variant: String,
    pub nodes: usize,
    pub checks: u64,
    pub admitted: u64,
    pub denied: u64,
    pub unavailable: u64,
    pub failed: u64,
    pub reference_admitted: u64,
    /// Sum over keys of admitted beyond the reference.
    pub over: u64,
    /// Sum over keys of the reference's admissions the cluster refused.
    pub under: u64,
    pub over_pct: f64,
    pub under_pct: f64,
    pub latency: Latency,
    pub elapsed_s: f64,
    /// Checks answered per second of the run.
    pub throughput: f64,
    pub peer: PeerTraffic,
    pub messages_per_check: f64,
    pub bytes_per_check: f64,
    pub figures: Figures,
    pub fault: Option<FaultReport>,
    pub fault_bound: Option<FaultBound>,
    /// Watched keys and the 20 furthest from the reference.
    pub keys: Vec<KeyScore>,
    pub series: Series,
    /// Retry arrivals per 10 ms (retrying workloads only).
    pub buckets: Option<Buckets>,
    pub warnings: Vec<String>,
    /// Set when the run could not happen; every number is then 0.
    pub error: Option<String>,
}

impl RunResult {
    pub fn failed(
        strategy: &str,
        workload: &str,
        variant: &str,
        nodes: usize,
        error: String,
    ) -> Self {
        RunResult {
            strategy: strategy.to_string(),
            workload: workload.to_string(),
            variant: variant.to_string(),
            nodes,
            error: Some(error),
            ..RunResult::default()
        }
    }

    pub fn label(&self) -> String {
        if self.variant.is_empty() {
            self.workload.clone()
        } else {
            format!("{} ({})", self.workload, self.variant)
        }
    }

    pub fn figure(&self, name: &str) -> Option<f64> {
        self.figures.values.get(name).copied()
    }
}

fn latency(records: &[Record]) -> Latency {
    let mut h = Histogram::<u64>::new_with_bounds(1, 120_000_000, 3).expect("static bounds");
    for r in records {
        h.saturating_record((r.latency_ns / 1000).max(1));
    }
    if h.is_empty() {
        return Latency::default();
    }
    let ms = |us: u64| us as f64 / 1000.0;
    Latency {
        p50_ms: ms(h.value_at_quantile(0.5)),
        p99_ms: ms(h.value_at_quantile(0.99)),
        p999_ms: ms(h.value_at_quantile(0.999)),
        max_ms: ms(h.max()),
        mean_ms: h.mean() / 1000.0,
    }
}

/// Trailing-window admitted counts sampled every `step`.
fn series(plan: &Plan, records: &[Record], reference: &[bool], start_ns: u64) -> Series {
    let Some(rule) = plan.rules.get(plan.watched_rule as usize) else {
        return Series::default();
    };
    let watched: std::collections::HashSet<u32> = plan.watched.iter().copied().collect();
    let pick = |ok: &dyn Fn(usize) -> bool| -> Vec<u64> {
        records
            .iter()
            .enumerate()
            .filter(|(i, r)| watched.contains(&r.key) && r.rule == plan.watched_rule && ok(*i))
            .map(|(_, r)| r.sent_ns)
            .collect()
    };
    let actual = pick(&|i| records[i].outcome.is_allowed());
    let refr = pick(&|i| reference[i]);
    let end = records.last().map_or(start_ns, |r| r.sent_ns.max(start_ns));
    let step = Duration::from_millis(50).as_nanos() as u64;
    let w = rule.window.as_nanos() as u64;
    let mut firsts: Vec<u64> = plan
        .watched
        .iter()
        .filter_map(|&k| records.iter().find(|r| r.key == k).map(|r| r.sent_ns))
        .collect();
    firsts.sort_unstable();
    let count = |times: &[u64], t: u64| {
        let started = firsts.partition_point(|&x| x <= t).max(1);
        let hi = times.partition_point(|&x| x <= t);
        let lo = times.partition_point(|&x| x + w <= t);
        (hi - lo) as f64 / (rule.limit * started as u64) as f64
    };
    let mut s = Series {
        window_s: rule.window.as_secs_f64(),
        limit: rule.limit,
        keys: plan.watched.len(),
        boundary_s: plan.align.map(|a| a.boundary_at.as_secs_f64()),
        ..Series::default()
    };
    let mut t = start_ns;
    while t <= end + step {
        s.t_s.push((t - start_ns) as f64 / 1e9);
        s.admitted.push(count(&actual, t));
        s.reference.push(count(&refr, t));
        t += step;
    }
    s
}

fn fault_bound(plan: &Plan, records: &[Record], reference: &[bool], at_ns: u64) -> FaultBound {
    let a = admitted_per_key(plan, records);
    let r = reference_per_key(plan, records, reference);
    let mut held = vec![0u64; plan.keys.len()];
    for rec in records
        .iter()
        .filter(|x| x.sent_ns < at_ns && x.outcome.is_allowed())
    {
        held[rec.key as usize] += 1;
    }
    let mut b = FaultBound {
        keys: plan.keys.len(),
        ..FaultBound::default()
    };
    for k in 0..plan.keys.len() {
        let over = a[k].saturating_sub(r[k]);
        b.over += over;
        b.held_before_fault += held[k];
        b.keys_over += usize::from(over > 0);
        b.keys_over_held += usize::from(over > held[k]);
    }
    b
}

/// Everything the sim reports about one run.
#[allow(clippy::too_many_arguments)]
pub fn score(
    plan: &Plan,
    strategy: &str,
    nodes: usize,
    records: &[Record],
    reference: &[bool],
    start_ns: u64,
    peer: PeerTraffic,
    fault: Option<FaultReport>,
) -> RunResult {
    let count =
        |f: &dyn Fn(Outcome) -> bool| records.iter().filter(|r| f(r.outcome)).count() as u64;
    let checks = records.len() as u64;
    let admitted = count(&|o| o == Outcome::Allowed);
    let a = admitted_per_key(plan, records);
    let r = reference_per_key(plan, records, reference);
    let over: u64 = a.iter().zip(&r).map(|(x, y)| x.saturating_sub(*y)).sum();
    let under: u64 = a.iter().zip(&r).map(|(x, y)| y.saturating_sub(*x)).sum();
    let reference_admitted: u64 = r.iter().sum();
    let first = records.first().map_or(start_ns, |x| x.sent_ns);
    let last = records
        .iter()
        .map(|x| x.sent_ns + x.latency_ns)
        .max()
        .unwrap_or(first);
    let elapsed_s = (last.saturating_sub(first)) as f64 / 1e9;
    let pct = |n: u64| 100.0 * n as f64 / reference_admitted.max(1) as f64;
    let per_check = |v: f64| if checks == 0 { 0.0 } else { v / checks as f64 };

    let mut sent = vec![0u64; plan.keys.len()];
    for x in records {
        sent[x.key as usize] += 1;
    }
    let mut order: Vec<usize> = (0..plan.keys.len()).collect();
    order.sort_by_key(|&k| std::cmp::Reverse(a[k].abs_diff(r[k])));
    let mut shown: Vec<usize> = plan.watched.iter().map(|&k| k as usize).take(50).collect();
    for k in order.into_iter().take(20) {
        if !shown.contains(&k) {
            shown.push(k);
        }
    }
    let keys = shown
        .into_iter()
        .map(|k| KeyScore {
            key: plan.keys[k].clone(),
            sent: sent[k],
            admitted: a[k],
            reference: r[k],
        })
        .collect();

    let mut warnings = Vec::new();
    let failed = count(&|o| o == Outcome::Failed);
    if failed > 0 {
        warnings.push(format!(
            "{failed} checks failed in transport or with an unexpected status"
        ));
    }
    let fault_bound = fault
        .as_ref()
        .filter(|f| f.skipped.is_none() && f.at_unix_ns > 0)
        .map(|f| fault_bound(plan, records, reference, f.at_unix_ns));

    RunResult {
        strategy: strategy.to_string(),
        workload: plan.workload.name().to_string(),
        variant: plan.variant.clone(),
        nodes,
        checks,
        admitted,
        denied: count(&|o| matches!(o, Outcome::Denied { .. })),
        unavailable: count(&|o| o == Outcome::Unavailable),
        failed,
        reference_admitted,
        over,
        under,
        over_pct: pct(over),
        under_pct: pct(under),
        latency: latency(records),
        elapsed_s,
        throughput: if elapsed_s > 0.0 {
            checks as f64 / elapsed_s
        } else {
            0.0
        },
        messages_per_check: per_check(peer.messages),
        bytes_per_check: per_check(peer.bytes),
        peer,
        figures: plan.workload.figures(plan, records, reference),
        fault,
        fault_bound,
        keys,
        series: series(plan, records, reference, start_ns),
        buckets: if plan.retry == crate::workloads::Retry::Never {
            None
        } else {
            retry_buckets(records, start_ns)
        },
        warnings,
        error: None,
    }
}
