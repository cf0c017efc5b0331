//! What a run promised and whether it kept it: the bound on each counter's excess the docs state for the faults the schedule injected, and the checks that must be answered.

use std::collections::BTreeMap;

use weir_core::{AlgorithmKind, Nanos, Rule, RuleSet};

use super::oracle::{self, Score};
use super::rules::RULES;
use super::schedule::{Action, FaultKind, Schedule};
use super::world::{at, Ran};

/// A promise broken.
#[derive(Debug, Clone)]
pub struct Violation {
    pub at: Option<Nanos>,
    /// The key (hash part) at fault, for the replay's trace.
    pub key: Option<String>,
    pub what: String,
}

/// One run, scored and judged.
#[derive(Debug)]
pub struct Report {
    pub seed: u64,
    pub simulated_secs: f64,
    pub checks: u64,
    pub faults: BTreeMap<FaultKind, u64>,
    pub score: Score,
    pub violations: Vec<Violation>,
    pub digest: u64,
}

/// The faults the schedule injected, by kind.
pub fn faults(schedule: &Schedule) -> BTreeMap<FaultKind, u64> {
    let mut out = BTreeMap::new();
    let conditions = [
        (FaultKind::Delay, !schedule.jitter.is_zero()),
        (FaultKind::Loss, schedule.loss > 0.0),
        (FaultKind::Dup, schedule.duplication > 0.0),
    ];
    for (kind, on) in conditions {
        if on {
            *out.entry(kind).or_default() += 1;
        }
    }
    for (_, a) in &schedule.actions {
        if let Some(kind) = a.kind() {
            *out.entry(kind).or_default() += 1;
        }
    }
    out
}

/// The most a counter of `rule` may admit beyond an exact limiter under
/// `schedule`'s faults (docs/cluster.md, "What the simulator checks").
pub fn allowed_excess(schedule: &Schedule, rule: &Rule) -> u64 {
    let limit = rule.limit;
    let has = |f: fn(&Action) -> bool| schedule.actions.iter().any(|(_, a)| f(a));
    let mut bound = 0;
    // Each side of a cut admits at most what was left at the cut: once
    // more, L at worst, per key and window. A bucket is judged over any
    // span, and refills on both sides while the cut lasts: L x T / W more
    // over a cut of T.
    if let Some(cut) = longest_cut(schedule) {
        bound += limit;
        if matches!(
            rule.algorithm,
            AlgorithmKind::TokenBucket | AlgorithmKind::LeakyBucket
        ) {
            let w = rule.window.as_nanos().max(1);
            bound += (u128::from(limit) * cut.as_nanos()).div_ceil(w) as u64;
        }
    }
    // One copy: the dead owner's keys restart from a fresh budget (one more
    // L), and until detection the fallback decides (N-1) x ceil(L/N) more.
    // Two copies are both lost when their two holders crash, together or
    // one after the other (a restarted holder gets copies back only of the
    // keys decided since): a run that crashes two members is held to the
    // one-copy bound.
    // Members paused or crashed at the same time are as many failures at
    // once: with as many as there are copies, a key can find every copy
    // out of reach, and the fallback decides it as with one copy.
    let copies_lost =
        has(|a| matches!(a, Action::Crash(_))) && crashed_members(schedule) >= schedule.replicas;
    // A cut that takes as many members as there are copies can take every
    // copy of a key away from the side left: that side decides it as with
    // one copy, beside the far side's L above.
    let copies_cut = schedule
        .actions
        .iter()
        .any(|(_, a)| matches!(a, Action::Partition { side } if side.len() >= schedule.replicas));
    if copies_lost || copies_cut || most_down_at_once(schedule) >= schedule.replicas {
        let n = schedule.nodes as u64;
        bound += limit + (n - 1) * limit.div_ceil(n);
    }
    bound
}

/// Scores `ran` and judges it against the promises for `schedule`.
pub fn judge(schedule: &Schedule, ran: Ran) -> Report {
    let score = oracle::score(&ran.outcomes);
    let rules = RuleSet::from_toml(RULES).expect("the simulator's rules parse");
    let mut violations = Vec::new();
    if let Some(e) = &ran.error {
        violations.push(Violation {
            at: None,
            key: None,
            what: format!("the run stopped: {e}"),
        });
    }
    for c in &ran.unanswered {
        violations.push(Violation {
            at: None,
            key: Some(c.key.clone()),
            what: format!(
                "check of {} on {} sent at {:?} was never answered",
                c.key, c.route, c.at
            ),
        });
    }
    for e in &score.excesses {
        let bound = rules
            .get(&e.counter.rule)
            .map_or(0, |(_, r)| allowed_excess(schedule, r));
        if e.excess > bound {
            violations.push(Violation {
                at: Some(e.at),
                key: Some(e.counter.key.clone()),
                what: format!(
                    "{}/{} admitted {} over an exact limiter (bound {bound})",
                    e.counter.rule, e.counter.key, e.excess
                ),
            });
        }
    }
    Report {
        seed: schedule.seed,
        simulated_secs: ran.simulated.as_secs_f64(),
        checks: score.checks,
        faults: faults(schedule),
        score,
        violations,
        digest: ran.digest,
    }
}

/// The longest a partition or one-way cut lasted, to its heal (or the end
/// of the run).
/// How many distinct members the schedule crashes.
fn crashed_members(schedule: &Schedule) -> usize {
    let crashed: std::collections::BTreeSet<usize> = schedule
        .actions
        .iter()
        .filter_map(|(_, a)| match a {
            Action::Crash(n) => Some(*n),
            _ => None,
        })
        .collect();
    crashed.len()
}

/// The most members stopped at one time, paused or crashed and not yet
/// resumed or restarted.
fn most_down_at_once(schedule: &Schedule) -> usize {
    let mut actions: Vec<_> = schedule.actions.iter().collect();
    actions.sort_by_key(|(t, _)| *t);
    let mut down = std::collections::BTreeSet::new();
    let mut most = 0;
    for (_, a) in actions {
        match a {
            Action::Pause(n) | Action::Crash(n) => {
                down.insert(*n);
            }
            Action::Resume(n) | Action::Restart(n) => {
                down.remove(n);
            }
            _ => {}
        }
        most = most.max(down.len());
    }
    most
}

fn longest_cut(schedule: &Schedule) -> Option<std::time::Duration> {
    let mut longest = None;
    let mut since = None;
    for (t, a) in &schedule.actions {
        match a {
            Action::Partition { .. } | Action::CutOneWay { .. } => {
                since = since.or(Some(*t));
            }
            Action::Heal => {
                if let Some(s) = since.take() {
                    longest = longest.max(Some(*t - s));
                }
            }
            _ => {}
        }
    }
    if let Some(s) = since {
        longest = longest.max(Some(schedule.duration.saturating_sub(s)));
    }
    longest
}

impl Violation {
    /// One line: the seed, the moment, what broke.
    pub fn line(&self, seed: u64) -> String {
        let when = self.at.map(at).unwrap_or_else(|| "end".into());
        format!("VIOLATION seed {seed} {when}: {}", self.what)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn cut_for(secs: u64) -> Schedule {
        Schedule {
            seed: 1,
            nodes: 5,
            replicas: 2,
            duration: Duration::from_secs(10),
            jitter: Duration::ZERO,
            loss: 0.0,
            duplication: 0.0,
            actions: vec![
                (Duration::from_secs(1), Action::Partition { side: vec![0] }),
                (Duration::from_secs(1 + secs), Action::Heal),
            ],
            checks: Vec::new(),
        }
    }

    #[test]
    fn a_cut_allows_l_per_window_and_a_bucket_its_refill_on_both_sides_too() {
        let rules = RuleSet::from_toml(RULES).unwrap();
        let rule = |name: &str| rules.get(name).unwrap().1.clone();
        // 10 per 2 s: a 2 s cut lets the far side refill 10 more.
        assert_eq!(allowed_excess(&cut_for(2), &rule("tb")), 20);
        assert_eq!(allowed_excess(&cut_for(2), &rule("gcra")), 20);
        // Judged within a window, or per aligned window: L in each.
        assert_eq!(allowed_excess(&cut_for(2), &rule("log")), 10);
        assert_eq!(allowed_excess(&cut_for(2), &rule("fw")), 10);
        let calm = Schedule {
            actions: Vec::new(),
            ..cut_for(0)
        };
        assert_eq!(allowed_excess(&calm, &rule("tb")), 0);
    }

    fn crashes(members: &[usize], replicas: usize) -> Schedule {
        let actions = members
            .iter()
            .enumerate()
            .map(|(i, &n)| (Duration::from_secs(1 + i as u64), Action::Crash(n)))
            .collect();
        Schedule {
            replicas,
            actions,
            ..cut_for(0)
        }
    }

    #[test]
    fn one_crashed_member_keeps_two_copies_exact_and_two_lose_both_copies() {
        let rules = RuleSet::from_toml(RULES).unwrap();
        let fw = rules.get("fw").unwrap().1.clone();
        // 10 + 4 x ceil(10 / 5): a fresh budget and the fallback's shares.
        let one_copy = 18;
        assert_eq!(allowed_excess(&crashes(&[2], 2), &fw), 0);
        assert_eq!(
            allowed_excess(&crashes(&[2, 2], 2), &fw),
            0,
            "one member twice"
        );
        assert_eq!(allowed_excess(&crashes(&[2, 3], 2), &fw), one_copy);
        assert_eq!(allowed_excess(&crashes(&[2], 1), &fw), one_copy);
    }

    #[test]
    fn a_cut_taking_both_copies_away_adds_the_one_copy_bound() {
        let rules = RuleSet::from_toml(RULES).unwrap();
        let fw = rules.get("fw").unwrap().1.clone();
        let pair = Schedule {
            actions: vec![
                (
                    Duration::from_secs(1),
                    Action::Partition { side: vec![0, 4] },
                ),
                (Duration::from_secs(3), Action::Heal),
            ],
            ..cut_for(0)
        };
        // L for the cut, and L + (N-1) x ceil(L/N) for the side with no copy.
        assert_eq!(allowed_excess(&pair, &fw), 10 + 18);
        assert_eq!(allowed_excess(&cut_for(2), &fw), 10, "one member cut off");
    }

    fn pauses(spans: &[(usize, u64, u64)], replicas: usize) -> Schedule {
        let mut actions = Vec::new();
        for &(n, from, to) in spans {
            actions.push((Duration::from_millis(from), Action::Pause(n)));
            actions.push((Duration::from_millis(to), Action::Resume(n)));
        }
        Schedule {
            replicas,
            actions,
            ..cut_for(0)
        }
    }

    #[test]
    fn pauses_cost_exactness_only_when_as_many_members_as_copies_are_stopped_at_once() {
        let rules = RuleSet::from_toml(RULES).unwrap();
        let fw = rules.get("fw").unwrap().1.clone();
        let one_copy = 18;
        let one = pauses(&[(2, 1_000, 3_000)], 2);
        assert_eq!(allowed_excess(&one, &fw), 0);
        let in_turn = pauses(&[(2, 1_000, 2_000), (3, 2_500, 4_000)], 2);
        assert_eq!(allowed_excess(&in_turn, &fw), 0, "one after the other");
        // Listed out of time order, as the schedule lists its episodes.
        let overlapping = pauses(&[(2, 1_000, 3_000), (0, 1_500, 2_000)], 2);
        assert_eq!(allowed_excess(&overlapping, &fw), one_copy);
        assert_eq!(allowed_excess(&one, &fw), 0);
        assert_eq!(
            allowed_excess(&pauses(&[(2, 1_000, 3_000)], 1), &fw),
            one_copy
        );
    }
}
