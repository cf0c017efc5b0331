//! A synchronized burst: every node receives twice the limit for the same key at the same instant (gossip's worst case).

use std::time::Duration;

use super::{admitted_per_key, mean, reference_per_key, Figures, Params, Plan, Workload};
use crate::load::Record;
use crate::rules::RuleSpec;

pub const LIMIT: u64 = 20;
/// An hour: no run straddles a window edge in practice, so the exact
/// answer is L itself, not L plus a sliver carried over from a previous window.
const WINDOW: Duration = Duration::from_secs(3600);
const BURSTS: usize = 5;
/// Far longer than a sync interval, so each burst starts on fresh remote counts.
const BURST_EVERY: Duration = Duration::from_millis(400);

pub fn rule() -> RuleSpec {
    RuleSpec::new("burst", "sliding_window_counter", LIMIT, WINDOW)
}

pub fn plan(p: &Params) -> Plan {
    let mut plan = Plan::new(
        Workload::Burst,
        vec![rule()],
        BURST_EVERY * (BURSTS as u32 + 1),
    );
    for k in 0..BURSTS {
        let key = plan.add_key(p.key("burst", k));
        plan.watched.push(key);
        let at = BURST_EVERY / 4 + BURST_EVERY * k as u32;
        // Node-interleaved, so every node's share leaves at once rather
        // than node 1's whole share first. Twice the limit to every node:
        // N x L is then a bound the cluster has to enforce, not merely the
        // number of requests sent.
        for _ in 0..2 * LIMIT {
            for node in 0..p.nodes {
                plan.push(at, node, key, 0);
            }
        }
    }
    plan.finish()
}

/// Admitted per key as a multiple of L; gossip's bound is N.
pub fn figures(plan: &Plan, records: &[Record], reference: &[bool]) -> Figures {
    let x = |v: Vec<u64>| -> Vec<f64> { v.iter().map(|&n| n as f64 / LIMIT as f64).collect() };
    let a = x(admitted_per_key(plan, records));
    let r = x(reference_per_key(plan, records, reference));
    let max = a.iter().copied().fold(0.0, f64::max);
    let nodes = records.iter().map(|r| r.node).max().map_or(0, |n| n + 1);
    let mut f = Figures::default();
    f.set("admitted_per_key_x_limit", mean(&a));
    f.set("admitted_per_key_x_limit_max", max);
    f.set("admitted_per_key_x_limit_reference", mean(&r));
    f.set("bound_x_limit", f64::from(nodes));
    f.note = format!(
        "per key {:.2}xL, max {:.2}xL (bound NxL = {nodes}xL)",
        mean(&a),
        max
    );
    f
}
