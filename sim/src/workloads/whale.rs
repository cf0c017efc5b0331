//! One whale key carrying most of the traffic from every node, cold keys beside it, under each of the relief valves of docs/cluster.md ("Hot keys").
//!
//! Four plans, one per rule: `off` (every check to the whale's owner),
//! `lease` (the owner leases slices of the budget to the gateways),
//! `shard` (eight sub-counters of L/8 on their own owners) and `local`
//! (each gateway alone against L/N). The whale's budget runs out half way
//! through, so both directions of error show.

use std::time::Duration;

use rand::Rng;

use super::{
    admitted_per_key, any_node, p99_ms, reference_per_key, Figures, Params, Plan, Workload,
};
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

/// The whale against the reference (as a share of L), and its latency
/// against the cold keys'.
pub fn figures(plan: &Plan, records: &[Record], reference: &[bool]) -> Figures {
    let a = admitted_per_key(plan, records);
    let r = reference_per_key(plan, records, reference);
    let of_l = |n: u64| 100.0 * n as f64 / LIMIT as f64;
    let over = of_l(a[0].saturating_sub(r[0]));
    let under = of_l(r[0].saturating_sub(a[0]));
    let (whale, cold): (Vec<&Record>, Vec<&Record>) = records.iter().partition(|x| x.key == 0);
    let (hot, cold) = (p99_ms(whale), p99_ms(cold));
    // Denied while the exact reference still had budget: where the valves
    // that split L into parts err, one part running dry before the others.
    let early = records
        .iter()
        .zip(reference)
        .filter(|(x, &ok)| x.key == 0 && ok && !x.outcome.is_allowed())
        .count() as u64;
    let early = of_l(early);
    let mut f = Figures::default();
    f.set("whale_over_pct_of_l", over);
    f.set("whale_under_pct_of_l", under);
    f.set("whale_early_denied_pct_of_l", early);
    f.set(
        "whale_checks",
        records.iter().filter(|x| x.key == 0).count() as f64,
    );
    f.set("hot_p99_ms", hot);
    f.set("cold_p99_ms", cold);
    let predicted = match parts(plan) {
        Some(k) => {
            let p = 100.0 * expected_shortfall(LIMIT as f64, k) / LIMIT as f64;
            f.set("whale_early_denied_predicted_pct_of_l", p);
            format!(" (binomial {p:.1}% for {k} parts)")
        }
        None => String::new(),
    };
    f.note = format!(
        "whale {} of {} (ref {}): over {over:.1}% under {under:.1}% of L, denied with budget left {early:.1}%{predicted}; p99 whale {hot:.1}ms, cold {cold:.1}ms",
        a[0], LIMIT, r[0]
    );
    f
}

/// How many parts a valve splits the whale's budget into: the shards, or
/// one per gateway for the local tier; None when it is not split.
fn parts(plan: &Plan) -> Option<u32> {
    match plan.variant.as_str() {
        "shard" => Some(SHARDS),
        "local" => plan.requests.iter().map(|r| r.node as u32 + 1).max(),
        _ => None,
    }
}

/// The expected error for a budget split into `k` parts of L/k, each
/// check going to one part at random: when L checks have arrived (the
/// moment an exact counter runs out), part i has seen X_i ~ Bin(L, 1/k)
/// with mean L/k, and denied max(0, X_i - L/k) of them. Summed over the
/// parts, E = k * sigma / sqrt(2 pi) with sigma the binomial spread.
pub fn expected_shortfall(limit: f64, k: u32) -> f64 {
    let k = f64::from(k);
    k * binomial_spread(limit, k) / (2.0 * std::f64::consts::PI).sqrt()
}

/// What binomial arithmetic predicts for the valves that split the budget: k
/// sub-counters (shard) or N gateways (local), each taking a random share
/// of the whale's checks, fill unevenly; the spread of one part's count is
/// sqrt(n (1/k) (1 - 1/k)) for n checks over k parts.
pub fn binomial_spread(checks: f64, parts: f64) -> f64 {
    let q = 1.0 / parts;
    (checks * q * (1.0 - q)).sqrt()
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    /// Splits `limit` checks over `k` parts of limit/k at random and counts
    /// what the full parts denied, `trials` times: the mean shortfall.
    fn simulated_shortfall(limit: u64, k: u32, trials: u32) -> f64 {
        let mut rng = StdRng::seed_from_u64(7);
        let cap = limit / u64::from(k);
        let mut denied = 0u64;
        for _ in 0..trials {
            let mut seen = vec![0u64; k as usize];
            for _ in 0..limit {
                seen[rng.random_range(0..k as usize)] += 1;
            }
            denied += seen.iter().map(|&n| n.saturating_sub(cap)).sum::<u64>();
        }
        denied as f64 / f64::from(trials)
    }

    #[test]
    fn the_predicted_shortfall_matches_a_random_split() {
        for k in [SHARDS, 5] {
            let predicted = expected_shortfall(LIMIT as f64, k);
            let seen = simulated_shortfall(LIMIT, k, 200);
            assert!(
                (predicted - seen).abs() < 0.1 * seen,
                "k {k}: predicted {predicted:.1}, simulated {seen:.1}"
            );
        }
    }

    #[test]
    fn only_the_splitting_valves_have_parts() {
        let p = Params::new(5, 1);
        let by_variant: Vec<(String, Option<u32>)> = plans(&p)
            .iter()
            .map(|plan| (plan.variant.clone(), parts(plan)))
            .collect();
        assert_eq!(
            by_variant,
            [
                ("off".to_string(), None),
                ("lease".to_string(), None),
                ("shard".to_string(), Some(SHARDS)),
                ("local".to_string(), Some(5)),
            ]
        );
    }
}
