//! Bursts either side of a fixed-window boundary: the fixed window admits 2L in moments, the sliding counter about L.

use std::time::Duration;

use super::{any_node, Align, Figures, Params, Plan, Workload};
use crate::load::Record;
use crate::rules::RuleSpec;

const LIMIT: u64 = 10;
const WINDOW: Duration = Duration::from_secs(2);
const KEYS_PER_RULE: usize = 10;
/// Where the boundary sits in the plan, and how far either side the bursts fall.
const BOUNDARY_AT: Duration = Duration::from_millis(500);
const BURST_GAP: Duration = Duration::from_millis(100);
const BURST_SPAN: Duration = Duration::from_millis(50);

pub fn rules() -> [RuleSpec; 2] {
    [
        RuleSpec::new("boundary-fixed", "fixed_window", LIMIT, WINDOW),
        RuleSpec::new("boundary-sliding", "sliding_window_counter", LIMIT, WINDOW),
    ]
}

pub fn plan(p: &Params) -> Plan {
    let mut rng = p.rng(Workload::Boundary);
    let mut plan = Plan::new(Workload::Boundary, rules().to_vec(), BOUNDARY_AT * 2);
    plan.align = Some(Align {
        window: WINDOW,
        boundary_at: BOUNDARY_AT,
    });
    for rule in 0..2u8 {
        for i in 0..KEYS_PER_RULE {
            let stem = if rule == 0 {
                "bnd-fixed"
            } else {
                "bnd-sliding"
            };
            let key = plan.add_key(p.key(stem, i));
            if rule == 0 {
                plan.watched.push(key);
            }
            // L just before the boundary and L just after: each burst alone
            // is within the limit of the window it lands in.
            let before = BOUNDARY_AT - BURST_GAP - BURST_SPAN;
            let after = BOUNDARY_AT + BURST_GAP;
            for start in [before, after] {
                for t in super::spaced(LIMIT as usize, BURST_SPAN) {
                    let node = any_node(&mut rng, p.nodes);
                    plan.push(start + t, node, key, rule);
                }
            }
        }
    }
    plan.finish()
}

/// Most checks admitted for one key in any interval shorter than `window`.
pub fn peak_in_window(times: &mut [u64], window: Duration) -> usize {
    times.sort_unstable();
    let w = window.as_nanos() as u64;
    let mut best = 0;
    let mut lo = 0;
    for hi in 0..times.len() {
        while times[hi] - times[lo] >= w {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best
}

/// The largest count admitted in any window-long span, per rule, as a
/// multiple of L: the count bound (2 for the fixed window).
pub fn figures(plan: &Plan, records: &[Record], reference: &[bool]) -> Figures {
    let mut f = Figures::default();
    let mut notes = Vec::new();
    for (rule, name) in [(0u8, "fixed"), (1u8, "sliding")] {
        let peak = |admitted: &dyn Fn(usize) -> bool| {
            (0..plan.keys.len() as u32)
                .map(|k| {
                    let mut times: Vec<u64> = records
                        .iter()
                        .enumerate()
                        .filter(|(i, r)| r.key == k && r.rule == rule && admitted(*i))
                        .map(|(_, r)| r.sent_ns)
                        .collect();
                    peak_in_window(&mut times, WINDOW)
                })
                .max()
                .unwrap_or(0) as f64
                / LIMIT as f64
        };
        let actual = peak(&|i| records[i].outcome.is_allowed());
        let refr = peak(&|i| reference[i]);
        f.set(&format!("{name}_peak_per_window_x_limit"), actual);
        f.set(&format!("{name}_peak_per_window_x_limit_reference"), refr);
        notes.push(format!("{name} {actual:.1}xL (ref {refr:.1})"));
    }
    f.note = format!("most in any window: {}", notes.join(", "));
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_counts_only_spans_shorter_than_the_window() {
        let s = 1_000_000_000;
        let mut t = vec![0, s / 2, s, 2 * s, 2 * s + 1];
        assert_eq!(peak_in_window(&mut t, Duration::from_secs(1)), 2);
        assert_eq!(peak_in_window(&mut t, Duration::from_secs(3)), 5);
    }
}
