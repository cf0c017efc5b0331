//! Clients that round-robin every check over all nodes: the case divide was designed for.

use std::time::Duration;

use super::{per_client_figures, Figures, Params, Plan, Workload};
use crate::load::Record;
use crate::rules::RuleSpec;

pub const LIMIT: u64 = 50;
/// An hour: no run straddles a window edge in practice, so the exact
/// answer is L itself, not L plus a sliver carried over from a previous window.
const WINDOW: Duration = Duration::from_secs(3600);
const CLIENTS: usize = 5;
const DEMAND: u64 = 3 * LIMIT;

pub fn rule() -> RuleSpec {
    RuleSpec::new("spread", "sliding_window_counter", LIMIT, WINDOW)
}

pub fn plan(p: &Params) -> Plan {
    let duration = p.duration_or(Duration::from_secs(3));
    let mut plan = Plan::new(Workload::Spread, vec![rule()], duration);
    for c in 0..CLIENTS {
        let key = plan.add_key(p.key("spread", c));
        plan.watched.push(key);
        let offset = duration.mul_f64(c as f64 / (CLIENTS * DEMAND as usize) as f64);
        for (j, t) in super::spaced(DEMAND as usize, duration).enumerate() {
            plan.push(t + offset, (j + c) % p.nodes.max(1), key, 0);
        }
    }
    plan.finish()
}

/// Admitted per client as a multiple of L.
pub fn figures(plan: &Plan, records: &[Record], reference: &[bool]) -> Figures {
    per_client_figures(plan, records, reference, LIMIT)
}
