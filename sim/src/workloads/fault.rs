//! Saturating keys spread over every node, long enough to span a fault and its detection.

use std::time::Duration;

use rand::Rng;

use super::{any_node, per_client_figures, Figures, Params, Plan, Workload};
use crate::load::Record;
use crate::rules::RuleSpec;

pub const LIMIT: u64 = 30;
/// An hour: no run straddles a window edge in practice, so the exact
/// answer is L itself, not L plus a sliver carried over from a previous window.
const WINDOW: Duration = Duration::from_secs(3600);
const KEYS: usize = 20;

pub fn rule() -> RuleSpec {
    RuleSpec::new("fault", "sliding_window_counter", LIMIT, WINDOW)
}

pub fn plan(p: &Params) -> Plan {
    // Long enough for SWIM to notice a dead node (about 6-7 s)
    // and for traffic to meet the keys' new owners afterwards.
    let duration = p.duration_or(Duration::from_secs(15));
    let mut rng = p.rng(Workload::Fault);
    let mut plan = Plan::new(Workload::Fault, vec![rule()], duration);
    // Each key reaches its limit within the first 2 s, well before the
    // fault, so the dead node holds full counters when it goes.
    let rate = LIMIT as f64 / 2.0;
    for i in 0..KEYS {
        let key = plan.add_key(p.key("fault", i));
        plan.watched.push(key);
        let mut t = 0.0;
        loop {
            let u: f64 = rng.random_range(f64::EPSILON..1.0);
            t += -u.ln() / rate;
            if t >= duration.as_secs_f64() {
                break;
            }
            plan.push(
                Duration::from_secs_f64(t),
                any_node(&mut rng, p.nodes),
                key,
                0,
            );
        }
    }
    plan.finish()
}

pub fn figures(plan: &Plan, records: &[Record], reference: &[bool]) -> Figures {
    per_client_figures(plan, records, reference, LIMIT)
}
