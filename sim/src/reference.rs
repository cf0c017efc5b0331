//! The exact reference: one weir-core limiter on a fake clock, fed every check in the order and at the time it was sent.

use std::sync::Arc;

use weir_core::{CheckRequest, FakeClock, Limiter, LimiterConfig, RuleSet};

use crate::load::Record;
use crate::rules::rules_toml;
use crate::workloads::Plan;

/// One process, one counter per key: the single-counter ideal every
/// distributed strategy is scored against.
///
/// The reference verdict for each record, in the records' order (which is
/// send order: the driver sorts by send time).
pub fn replay(plan: &Plan, records: &[Record]) -> Vec<bool> {
    let rules =
        RuleSet::from_toml(&rules_toml(&plan.rules)).expect("the sim's own rules are valid");
    let clock = Arc::new(FakeClock::new(0));
    let limiter = Limiter::new(rules, clock.clone(), LimiterConfig::default());
    records
        .iter()
        .map(|r| {
            // Every check sent counts, whatever the cluster answered: the
            // ideal limiter would have decided it too.
            clock.set(r.sent_ns);
            let key = &plan.keys[r.key as usize];
            let route = &plan.rules[r.rule as usize].route;
            limiter
                .check(&CheckRequest::new(key, route))
                .map(|v| v.allowed)
                .unwrap_or(false)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::rules::RuleSpec;
    use crate::workloads::Workload;

    fn record(key: u32, sent_ns: u64) -> Record {
        Record {
            key,
            ..Record::sent_at(sent_ns)
        }
    }

    #[test]
    fn reference_admits_exactly_the_limit_per_fixed_window() {
        let rule = RuleSpec::new("t", "fixed_window", 3, Duration::from_secs(1));
        let mut plan = Plan::new(Workload::Steady, vec![rule], Duration::from_secs(2));
        plan.add_key("a".into());
        plan.add_key("b".into());
        let s = 1_000_000_000u64 * 1_000_000;
        // 5 for "a" and 2 for "b" in one window, then 2 for "a" in the next.
        let mut recs: Vec<Record> = (0..5).map(|i| record(0, s + i * 1000)).collect();
        recs.extend((0..2).map(|i| record(1, s + 10_000 + i)));
        recs.extend((0..2).map(|i| record(0, s + 1_000_000_000 + i)));
        let verdicts = replay(&plan, &recs);
        assert_eq!(
            verdicts,
            vec![true, true, true, false, false, true, true, true, true]
        );
    }
}
