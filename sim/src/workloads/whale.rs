//! One whale key carrying most of the traffic from every node, cold keys beside it, under each of the chapter's relief valves (seed 10).
//!
//! Four plans, one per rule: `off` (every check to the whale's owner),
//! `lease` (the owner leases slices of the budget to the gateways),
//! `shard` (eight sub-counters of L/8 on their own owners) and `local`
//! (each gateway alone against L/N). The whale's budget runs out half way
//! through, so both directions of error show.

use std::time::Duration;

use rand::Rng;

use super::{admitted_per_key, any_node, reference_per_key, Figures, Params, Plan, Workload};
use crate::load::Record;
use crate::rules::RuleSpec;

/// Checks per second over the whole cluster: as many as two shared cores
/// sustain through five nodes without the generator falling behind.
const RATE_PER_S: f64 = 2_500.0;
const WHALE_SHARE: f64 = 0.9;
const COLD_KEYS: usize = 100;
/// Spent by the whale in about half the run.
pub const LIMIT: u64 = 7_000;
const WINDOW: Duration = Duration::from_secs(3600);
pub const SHARDS: u32 = 8;

/// The valves, as rule settings: (variant, `hot`, `shards`).
pub const VALVES: [(&str, &str, Option<u32>); 4] = [
    ("off", "off", None),
    ("lease", "lease", None),
    ("shard", "shard", Some(SHARDS)),
    ("local", "local", None),
];

fn rule_for(variant: &str, hot: &'static str, shards: Option<u32>) -> RuleSpec {
    RuleSpec::new(
        &format!("whale-{variant}"),
        "sliding_window_counter",
        LIMIT,
        WINDOW,
    )
    .hot(hot, shards)
}

/// The cold keys' own rule, so that what the whale's rule forwards is the
/// whale's alone.
fn cold_rule() -> RuleSpec {
    RuleSpec::new("whale-cold", "sliding_window_counter", LIMIT, WINDOW).hot("off", None)
}

pub fn rules() -> Vec<RuleSpec> {
    VALVES
        .iter()
        .map(|(v, hot, shards)| rule_for(v, hot, *shards))
        .chain([cold_rule()])
        .collect()
}

pub fn plans(p: &Params) -> Vec<Plan> {
    VALVES
        .iter()
        .map(|(v, hot, shards)| plan(p, v, rule_for(v, hot, *shards)))
        .collect()
}

fn plan(p: &Params, variant: &str, rule: RuleSpec) -> Plan {
    let duration = p.duration_or(Duration::from_secs(6));
    let mut rng = p.rng(Workload::Whale);
    let mut plan = Plan::new(Workload::Whale, vec![rule, cold_rule()], duration);
    plan.variant = variant.to_string();
    let whale = plan.add_key(p.key(&format!("whale-{variant}"), 0));
    plan.watched.push(whale);
    let cold: Vec<u32> = (0..COLD_KEYS)
        .map(|i| plan.add_key(p.key(&format!("cold-{variant}"), i)))
        .collect();
    let mut t = 0.0;
    loop {
        let u: f64 = rng.random_range(f64::EPSILON..1.0);
        t += -u.ln() / RATE_PER_S;
        if t >= duration.as_secs_f64() {
            break;
        }
        let (key, rule) = if rng.random_bool(WHALE_SHARE) {
            (whale, 0)
        } else {
            (cold[rng.random_range(0..cold.len())], 1)
        };
        plan.push(
            Duration::from_secs_f64(t),
            any_node(&mut rng, p.nodes),
            key,
            rule,
        );
    }
    plan.finish()
}

fn p99_ms(records: &[Record], whale: bool) -> f64 {
    let mut v: Vec<u64> = records
        .iter()
        .filter(|x| (x.key == 0) == whale)
        .map(|x| x.latency_ns)
        .collect();
    v.sort_unstable();
    v.get((v.len() as f64 * 0.99) as usize)
        .or(v.last())
        .map_or(0.0, |&ns| ns as f64 / 1e6)
}

/// The whale against the reference (as a share of L), and its latency
/// against the cold keys'.
pub fn figures(plan: &Plan, records: &[Record], reference: &[bool]) -> Figures {
    let a = admitted_per_key(plan, records);
    let r = reference_per_key(plan, records, reference);
    let of_l = |n: u64| 100.0 * n as f64 / LIMIT as f64;
    let over = of_l(a[0].saturating_sub(r[0]));
    let under = of_l(r[0].saturating_sub(a[0]));
    let (hot, cold) = (p99_ms(records, true), p99_ms(records, false));
    let mut f = Figures::default();
    f.set("whale_over_pct_of_l", over);
    f.set("whale_under_pct_of_l", under);
    f.set(
        "whale_checks",
        records.iter().filter(|x| x.key == 0).count() as f64,
    );
    f.set("hot_p99_ms", hot);
    f.set("cold_p99_ms", cold);
    f.note = format!(
        "whale {} of {} (ref {}): over {over:.1}% under {under:.1}% of L; p99 whale {hot:.1}ms, cold {cold:.1}ms",
        a[0], LIMIT, r[0]
    );
    f
}

/// What the chapter predicts for the valves that split the budget: k
/// sub-counters (shard) or N gateways (local), each taking a random share
/// of the whale's checks, fill unevenly; the spread of one part's count is
/// sqrt(n (1/k) (1 - 1/k)) for n checks over k parts (seed 8A, 10).
pub fn binomial_spread(checks: f64, parts: f64) -> f64 {
    let q = 1.0 / parts;
    (checks * q * (1.0 - q)).sqrt()
}
