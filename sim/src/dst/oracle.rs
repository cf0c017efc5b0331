//! Every check scored: the exact reference fed the checks in the order they were sent, and each counter's admissions held to what an exact limiter can admit, whatever the order the owner decided them in.

use std::collections::BTreeMap;
use std::sync::Arc;

use weir_core::{CheckRequest, Clock, FakeClock, Limiter, LimiterConfig, Nanos, Rule, RuleSet};

use super::rules::{most_in_span, window_of, RULES};

/// What became of one client check.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub sent: Nanos,
    pub answered: Nanos,
    pub req: CheckRequest,
    /// The counters the cluster charged, when it admitted the check.
    pub admitted: Option<Vec<Counter>>,
}

/// One counter: a rule and the hash part it is keyed on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Counter {
    pub rule: Arc<str>,
    pub key: String,
}

/// A counter that admitted more than an exact limiter could have, by
/// `excess` units, around `at`.
#[derive(Debug, Clone)]
pub struct Excess {
    pub counter: Counter,
    pub at: Nanos,
    pub excess: u64,
}

/// A run's score.
#[derive(Debug, Default, Clone)]
pub struct Score {
    pub checks: u64,
    /// Units admitted beyond what the reference admitted, summed over counters.
    pub over: u64,
    /// Units the reference admitted and the cluster did not.
    pub under: u64,
    /// Each counter's worst excess over an exact limiter's promise.
    pub excesses: Vec<Excess>,
}

/// Scores `outcomes` (in any order).
pub fn score(outcomes: &[Outcome]) -> Score {
    let rules = RuleSet::from_toml(RULES).expect("the simulator's rules parse");
    let mut by_counter: BTreeMap<Counter, Vec<(Nanos, Nanos, u64)>> = BTreeMap::new();
    let mut cluster: BTreeMap<Counter, u64> = BTreeMap::new();
    for o in outcomes {
        for c in o.admitted.iter().flatten() {
            by_counter
                .entry(c.clone())
                .or_default()
                .push((o.sent, o.answered, o.req.cost));
            *cluster.entry(c.clone()).or_default() += o.req.cost;
        }
    }
    let reference = reference_admitted(&rules, outcomes);
    let mut score = Score {
        checks: outcomes.len() as u64,
        ..Score::default()
    };
    let counters: std::collections::BTreeSet<&Counter> =
        cluster.keys().chain(reference.keys()).collect();
    for c in counters {
        let got = cluster.get(c).copied().unwrap_or(0);
        let exact = reference.get(c).copied().unwrap_or(0);
        score.over += got.saturating_sub(exact);
        score.under += exact.saturating_sub(got);
    }
    for (counter, events) in &by_counter {
        let Some((_, rule)) = rules.get(&counter.rule) else {
            continue;
        };
        if let Some((at, excess)) = worst_excess(rule, events) {
            score.excesses.push(Excess {
                counter: counter.clone(),
                at,
                excess,
            });
        }
    }
    score
}

/// What the exact reference admits of the same checks, each decided at
/// the moment it was sent, in the order they were sent.
fn reference_admitted(rules: &RuleSet, outcomes: &[Outcome]) -> BTreeMap<Counter, u64> {
    let clock = Arc::new(FakeClock::new(0));
    let limiter = Limiter::new(
        rules.clone(),
        clock.clone() as Arc<dyn Clock>,
        LimiterConfig::default(),
    );
    let mut order: Vec<&Outcome> = outcomes.iter().collect();
    order.sort_by_key(|o| o.sent);
    let mut admitted: BTreeMap<Counter, u64> = BTreeMap::new();
    for o in order {
        clock.set(o.sent);
        if let Ok(v) = limiter.check(&o.req) {
            if v.allowed {
                for a in &v.applied {
                    let c = Counter {
                        rule: a.rule.name.clone(),
                        key: a.hash_part.to_string(),
                    };
                    *admitted.entry(c).or_default() += o.req.cost;
                }
            }
        }
    }
    admitted
}

/// The most a counter's admissions exceed what an exact limiter could have
/// admitted, and when. Each admission was decided somewhere between its
/// sending and its answer: only an excess that no such placement explains
/// counts, so timing alone never reads as over-admission.
fn worst_excess(rule: &Rule, events: &[(Nanos, Nanos, u64)]) -> Option<(Nanos, u64)> {
    let limit = rule.limit;
    let mut worst: Option<(Nanos, u64)> = None;
    let mut note = |at: Nanos, excess: u64| {
        if excess > 0 && worst.is_none_or(|(_, w)| excess > w) {
            worst = Some((at, excess));
        }
    };
    if window_of(rule, 0).is_some() {
        // Admissions surely inside one aligned window: at most L there.
        let mut windows: BTreeMap<u64, (Nanos, u64)> = BTreeMap::new();
        for &(s, r, cost) in events {
            let (ws, wr) = (window_of(rule, s), window_of(rule, r));
            if let (Some(ws), Some(wr)) = (ws, wr) {
                if ws == wr {
                    let e = windows.entry(ws).or_insert((s, 0));
                    e.1 += cost;
                }
            }
        }
        for (_, (at, sum)) in windows {
            note(at, sum.saturating_sub(limit));
        }
        return worst;
    }
    // Every admission sent at or after `start` and answered by `end` was
    // decided within [start, end]: at most most_in_span(end - start).
    let mut sorted: Vec<(Nanos, Nanos, u64)> = events.to_vec();
    sorted.sort_unstable();
    for (i, &(start, ..)) in sorted.iter().enumerate() {
        let mut later: Vec<(Nanos, u64)> = sorted[i..].iter().map(|&(_, r, c)| (r, c)).collect();
        later.sort_unstable();
        let mut sum = 0u64;
        for &(end, cost) in &later {
            sum += cost;
            if let Some(most) = most_in_span(rule, end.saturating_sub(start)) {
                let excess = (sum as f64 - most).floor();
                if excess >= 1.0 {
                    note(start, excess as u64);
                }
            }
        }
    }
    worst
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::NANOS_PER_MS;

    fn outcome(key: &str, route: &str, sent_ms: u64, answered_ms: u64, allowed: bool) -> Outcome {
        let rules = RuleSet::from_toml(RULES).unwrap();
        let req = CheckRequest::new(key, route);
        let sel = rules
            .rules()
            .iter()
            .filter(|r| r.route.as_ref().is_some_and(|p| p.as_str() == route))
            .map(|r| Counter {
                rule: r.name.clone(),
                key: key.into(),
            })
            .collect();
        Outcome {
            sent: sent_ms * NANOS_PER_MS,
            answered: answered_ms * NANOS_PER_MS,
            req,
            admitted: allowed.then_some(sel),
        }
    }

    #[test]
    fn an_exact_cluster_scores_nothing_over_or_under() {
        // 15 checks 10 ms apart on a fixed window of 10: the first 10 admitted.
        let runs: Vec<Outcome> = (0..15)
            .map(|i| outcome("a", "GET /fw", 10 + i * 10, 11 + i * 10, i < 10))
            .collect();
        let s = score(&runs);
        assert_eq!((s.over, s.under), (0, 0));
        assert!(s.excesses.is_empty());
    }

    #[test]
    fn an_eleventh_admission_in_one_window_is_an_excess_of_one() {
        let runs: Vec<Outcome> = (0..15)
            .map(|i| outcome("a", "GET /fw", 10 + i * 10, 11 + i * 10, i < 11))
            .collect();
        let s = score(&runs);
        assert_eq!(s.over, 1);
        assert_eq!(s.excesses.len(), 1);
        assert_eq!(s.excesses[0].excess, 1);
    }

    #[test]
    fn an_admission_that_may_have_been_decided_in_the_next_window_is_no_excess() {
        // The 11th was sent in window 0 but answered in window 1 (2 s).
        let mut runs: Vec<Outcome> = (0..10)
            .map(|i| outcome("a", "GET /fw", 10 + i * 10, 11 + i * 10, true))
            .collect();
        runs.push(outcome("a", "GET /fw", 1_999, 2_001, true));
        assert!(score(&runs).excesses.is_empty());
    }

    #[test]
    fn a_sliding_log_holds_l_in_any_window_and_a_bucket_its_capacity_plus_refill() {
        // 11 admissions within 500 ms: one too many for the log (10 per 2 s).
        let log: Vec<Outcome> = (0..11)
            .map(|i| outcome("a", "GET /log", 1_000 + i * 40, 1_001 + i * 40, true))
            .collect();
        assert_eq!(score(&log).excesses[0].excess, 1);
        // The bucket holds 10 and refills 5/s: 13 within 361 ms is one
        // over 10 + 5 x 0.361 = 11.8.
        let tb: Vec<Outcome> = (0..13)
            .map(|i| outcome("a", "GET /tb", 1_000 + i * 30, 1_001 + i * 30, true))
            .collect();
        assert_eq!(score(&tb).excesses[0].excess, 1);
        // Spread over 2.4 s, 12 fit: 10 + 5 * 2.4 = 22.
        let slow: Vec<Outcome> = (0..12)
            .map(|i| outcome("a", "GET /tb", 1_000 + i * 200, 1_001 + i * 200, true))
            .collect();
        assert!(score(&slow).excesses.is_empty());
    }

    #[test]
    fn an_under_admission_is_counted_against_the_reference() {
        let runs: Vec<Outcome> = (0..15)
            .map(|i| outcome("a", "GET /fw", 10 + i * 10, 11 + i * 10, i < 7))
            .collect();
        let s = score(&runs);
        assert_eq!((s.over, s.under), (0, 3));
    }
}
