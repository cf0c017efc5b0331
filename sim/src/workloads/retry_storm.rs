//! The retry storm: clients rejected together come back after Retry-After, with and without jitter.

use std::time::Duration;

use super::{Align, Figures, Params, Plan, Retry, Workload};
use crate::load::Record;
use crate::rules::RuleSpec;
use crate::target::Outcome;

/// One admitted check per client per window: the second is always refused.
const LIMIT: u64 = 1;
const WINDOW: Duration = Duration::from_secs(1);
pub const CLIENTS: usize = 500;
/// Arrivals are measured in 10 ms buckets (timer resolution plus skew).
pub const BUCKET: Duration = Duration::from_millis(10);
const BOUNDARY_AT: Duration = Duration::from_millis(100);
const FIRST_AT: Duration = Duration::from_millis(150);
/// Late enough that every first check has landed, early enough that
/// Retry-After rounds up to 1 s and the literal retry lands in the next window.
const SECOND_AT: Duration = Duration::from_millis(450);

pub fn rule() -> RuleSpec {
    RuleSpec::new("retry-storm", "fixed_window", LIMIT, WINDOW)
}

pub fn plan(p: &Params, retry: Retry, variant: &str) -> Plan {
    // Room for two rounds of Retry-After when the server doubles it.
    let mut plan = Plan::new(Workload::RetryStorm, vec![rule()], Duration::from_secs(3));
    plan.variant = variant.to_string();
    plan.retry = retry;
    plan.align = Some(Align {
        window: WINDOW,
        boundary_at: BOUNDARY_AT,
    });
    for c in 0..CLIENTS {
        let key = plan.add_key(p.key(&format!("rs-{variant}"), c));
        // Each client keeps one connection to one node.
        let node = c % p.nodes.max(1);
        plan.push(FIRST_AT, node, key, 0);
        plan.push(SECOND_AT, node, key, 0);
    }
    plan.watched = (0..CLIENTS as u32).collect();
    plan.finish()
}

/// Width of the span holding the middle 98% of `times`, in ns.
pub fn width(times: &mut [u64]) -> u64 {
    if times.len() < 2 {
        return 0;
    }
    times.sort_unstable();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    at(0.99) - at(0.01)
}

/// Most arrivals in one `BUCKET`-long bucket.
pub fn peak_per_bucket(times: &[u64]) -> usize {
    let b = BUCKET.as_nanos() as u64;
    let mut counts = std::collections::HashMap::new();
    for t in times {
        *counts.entry(t / b).or_insert(0usize) += 1;
    }
    counts.values().copied().max().unwrap_or(0)
}

pub fn figures(plan: &Plan, records: &[Record], _reference: &[bool]) -> Figures {
    // The herd is the retries of the second checks, which the limit refuses
    // together. A first check can be refused too, when its owner misses the
    // deadline (refused for now, Retry-After rounded up to 1 s over HTTP):
    // its retry comes 300 ms before the herd and is counted apart, or the
    // herd's width would measure the gap between the two.
    let second = |r: &Record| {
        plan.requests
            .get(r.planned as usize)
            .is_some_and(|p| p.at == SECOND_AT)
    };
    let (herd, early): (Vec<&Record>, Vec<&Record>) = records
        .iter()
        .filter(|r| r.attempt == 1)
        .partition(|r| second(r));
    let mut retries: Vec<u64> = herd.iter().map(|r| r.sent_ns).collect();
    let mut rejected: Vec<u64> = records
        .iter()
        .filter(|r| r.attempt == 0 && matches!(r.outcome, Outcome::Denied { .. }))
        .map(|r| r.sent_ns)
        .collect();
    let peak = peak_per_bucket(&retries);
    let width_ms = width(&mut retries) as f64 / 1e6;
    let rejected_width_ms = width(&mut rejected) as f64 / 1e6;
    let retry_after_s = records
        .iter()
        .filter_map(|r| match r.outcome {
            Outcome::Denied { retry_after_ms } if r.attempt == 0 => Some(retry_after_ms),
            _ => None,
        })
        .max()
        .unwrap_or(0) as f64
        / 1000.0;
    let per_s = peak as f64 / BUCKET.as_secs_f64();
    let mut f = Figures::default();
    f.set("retries", retries.len() as f64);
    f.set("first_check_retries", early.len() as f64);
    f.set("peak_per_10ms", peak as f64);
    f.set("peak_per_s", per_s);
    f.set("retry_width_ms", width_ms);
    f.set("rejection_width_ms", rejected_width_ms);
    f.set("max_retry_after_s", retry_after_s);
    f.note = format!(
        "{} retries, peak {peak}/10ms ({per_s:.0}/s), spread over {width_ms:.0}ms; \
         {} first checks retried",
        retries.len(),
        early.len()
    );
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_counts_the_fullest_bucket() {
        let ms = 1_000_000;
        assert_eq!(peak_per_bucket(&[0, 1, 9 * ms, 10 * ms, 25 * ms]), 3);
        assert_eq!(peak_per_bucket(&[]), 0);
    }

    fn record(planned: usize, attempt: u8, sent_ms: u64, outcome: Outcome) -> Record {
        Record {
            planned: planned as u32,
            attempt,
            outcome,
            ..Record::sent_at(sent_ms * 1_000_000)
        }
    }

    /// A first check refused at a missed deadline is retried 300 ms before
    /// the herd; counted in the herd, it would stretch the herd's width to
    /// the gap between the two.
    #[test]
    fn the_herd_is_the_second_checks_retries_and_first_checks_are_counted_apart() {
        let plan = plan(&Params::new(3, 1), Retry::Literal, "no-jitter");
        let denied = Outcome::Denied {
            retry_after_ms: 1000,
        };
        let mut records = Vec::new();
        let mut early = 0;
        for (i, p) in plan.requests.iter().enumerate() {
            let at = p.at.as_millis() as u64;
            records.push(record(i, 0, at, denied));
            // Every second check's retry lands within 5 ms; one first check
            // in ten is retried too.
            if p.at == SECOND_AT {
                records.push(record(i, 1, at + 1000 + (i % 5) as u64, Outcome::Allowed));
            } else if i % 10 == 0 {
                records.push(record(i, 1, at + 1000, Outcome::Allowed));
                early += 1;
            }
        }
        let f = figures(&plan, &records, &[]);
        assert_eq!(f.get("retries"), Some(CLIENTS as f64));
        assert!(early > 0);
        assert_eq!(f.get("first_check_retries"), Some(early as f64));
        let width = f.get("retry_width_ms").unwrap();
        assert!(
            width < 10.0,
            "the herd's width took in the first checks: {width} ms"
        );
    }
}
