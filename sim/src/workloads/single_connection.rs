//! One client per node, each on one long-lived connection: all of its traffic lands on one node.

use std::time::Duration;

use super::{per_client_figures, Figures, Params, Plan, Workload};
use crate::load::Record;
use crate::rules::RuleSpec;

pub const LIMIT: u64 = 50;
/// An hour: no run straddles a window edge in practice, so the exact
/// answer is L itself, not L plus a sliver carried over from a previous window.
const WINDOW: Duration = Duration::from_secs(3600);
/// Each client asks for three times its limit.
const DEMAND: u64 = 3 * LIMIT;

pub fn rule() -> RuleSpec {
    RuleSpec::new("single-connection", "sliding_window_counter", LIMIT, WINDOW)
}

pub fn plan(p: &Params) -> Plan {
    let duration = p.duration_or(Duration::from_secs(3));
    let mut plan = Plan::new(Workload::SingleConnection, vec![rule()], duration);
    for c in 0..p.nodes {
        let key = plan.add_key(p.key("single", c));
        plan.watched.push(key);
        // Staggered a little so the clients do not all fire together.
        let offset = duration.mul_f64(c as f64 / (p.nodes * DEMAND as usize) as f64);
        for t in super::spaced(DEMAND as usize, duration) {
            plan.push(t + offset, c, key, 0);
        }
    }
    plan.finish()
}

/// Admitted per client as a multiple of L: divide gives 1/N here.
pub fn figures(plan: &Plan, records: &[Record], reference: &[bool]) -> Figures {
    per_client_figures(plan, records, reference, LIMIT)
}
