//! Steady Poisson traffic over many keys, most clients at 30% of their limit.

use std::time::Duration;

use rand::Rng;

use super::{admitted_per_key, any_node, reference_per_key, Figures, Params, Plan, Workload};
use crate::load::Record;
use crate::rules::RuleSpec;

const LIMIT: u64 = 10;
const WINDOW: Duration = Duration::from_secs(2);
const KEYS: usize = 300;
/// One client in ten is heavy; the rest are median clients.
const HEAVY_EVERY: usize = 10;
/// The median client uses 30 of its allowed 100.
const LIGHT_SHARE: f64 = 0.3;
const HEAVY_SHARE: f64 = 2.0;

pub fn rule() -> RuleSpec {
    RuleSpec::new("steady", "sliding_window_counter", LIMIT, WINDOW)
}

fn is_heavy(i: usize) -> bool {
    i % HEAVY_EVERY == 0
}

pub fn plan(p: &Params) -> Plan {
    let duration = p.duration_or(Duration::from_secs(4));
    let mut rng = p.rng(Workload::Steady);
    let mut plan = Plan::new(Workload::Steady, vec![rule()], duration);
    for i in 0..KEYS {
        let key = plan.add_key(p.key("steady", i));
        let share = if is_heavy(i) {
            HEAVY_SHARE
        } else {
            LIGHT_SHARE
        };
        let rate = share * LIMIT as f64 / WINDOW.as_secs_f64();
        if is_heavy(i) {
            plan.watched.push(key);
        }
        // Poisson arrivals: exponential gaps, each check to a random node
        // (a fresh connection through a load balancer).
        let mut t = 0.0;
        loop {
            let u: f64 = rng.random_range(f64::EPSILON..1.0);
            t += -u.ln() / rate;
            if t >= duration.as_secs_f64() {
                break;
            }
            let node = any_node(&mut rng, p.nodes);
            plan.push(Duration::from_secs_f64(t), node, key, 0);
        }
    }
    plan.finish()
}

/// The share of light clients denied at least once: the reference denies
/// none of them, so every one is a client the limiter wrongly noticed.
pub fn figures(plan: &Plan, records: &[Record], reference: &[bool]) -> Figures {
    let mut denied = vec![false; plan.keys.len()];
    let mut ref_denied = vec![false; plan.keys.len()];
    for (r, &ok) in records.iter().zip(reference) {
        denied[r.key as usize] |= !r.outcome.is_allowed();
        ref_denied[r.key as usize] |= !ok;
    }
    let light: Vec<usize> = (0..plan.keys.len()).filter(|&i| !is_heavy(i)).collect();
    let share = |d: &[bool]| {
        100.0 * light.iter().filter(|&&i| d[i]).count() as f64 / light.len().max(1) as f64
    };
    let heavy: Vec<usize> = (0..plan.keys.len()).filter(|&i| is_heavy(i)).collect();
    let a = admitted_per_key(plan, records);
    let rf = reference_per_key(plan, records, reference);
    let heavy_ratio = heavy.iter().map(|&i| a[i]).sum::<u64>() as f64
        / heavy.iter().map(|&i| rf[i]).sum::<u64>().max(1) as f64;
    let mut f = Figures::default();
    f.set("light_clients_denied_pct", share(&denied));
    f.set("light_clients_denied_pct_reference", share(&ref_denied));
    f.set("heavy_admitted_vs_reference", heavy_ratio);
    f.note = format!(
        "light clients denied {:.0}% (ref {:.0}%), heavy {:.2}x ref",
        share(&denied),
        share(&ref_denied),
        heavy_ratio
    );
    f
}
