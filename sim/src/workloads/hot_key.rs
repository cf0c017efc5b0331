//! One key carrying half of all traffic, over a background of quiet keys.

use std::time::Duration;

use rand::Rng;

use super::{
    admitted_per_key, any_node, p99_ms, reference_per_key, Figures, Params, Plan, Workload,
};
use crate::load::Record;
use crate::rules::RuleSpec;

const LIMIT: u64 = 100;
const WINDOW: Duration = Duration::from_secs(10);
const RATE_PER_S: f64 = 400.0;
const HOT_SHARE: f64 = 0.5;
const COLD_KEYS: usize = 200;

pub fn rule() -> RuleSpec {
    RuleSpec::new("hot-key", "sliding_window_counter", LIMIT, WINDOW)
}

pub fn plan(p: &Params) -> Plan {
    let duration = p.duration_or(Duration::from_secs(4));
    let mut rng = p.rng(Workload::HotKey);
    let mut plan = Plan::new(Workload::HotKey, vec![rule()], duration);
    let hot = plan.add_key(p.key("hot", 0));
    plan.watched.push(hot);
    let cold: Vec<u32> = (0..COLD_KEYS)
        .map(|i| plan.add_key(p.key("cold", i)))
        .collect();
    let mut t = 0.0;
    loop {
        let u: f64 = rng.random_range(f64::EPSILON..1.0);
        t += -u.ln() / RATE_PER_S;
        if t >= duration.as_secs_f64() {
            break;
        }
        let key = if rng.random_bool(HOT_SHARE) {
            hot
        } else {
            cold[rng.random_range(0..cold.len())]
        };
        let node = any_node(&mut rng, p.nodes);
        plan.push(Duration::from_secs_f64(t), node, key, 0);
    }
    plan.finish()
}

/// The hot key against the reference, and its latency against the rest:
/// under owner every hot check meets one node.
pub fn figures(plan: &Plan, records: &[Record], reference: &[bool]) -> Figures {
    let a = admitted_per_key(plan, records);
    let r = reference_per_key(plan, records, reference);
    let ratio = a[0] as f64 / r[0].max(1) as f64;
    let (hot, cold): (Vec<&Record>, Vec<&Record>) = records.iter().partition(|x| x.key == 0);
    let (hot, cold) = (p99_ms(hot), p99_ms(cold));
    let mut f = Figures::default();
    f.set("hot_admitted_vs_reference", ratio);
    f.set("hot_p99_ms", hot);
    f.set("cold_p99_ms", cold);
    f.note = format!("hot key {ratio:.2}x ref; p99 hot {hot:.1}ms, cold {cold:.1}ms");
    f
}
