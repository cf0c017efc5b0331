//! One key's counter in portable form, and why a node may refuse one handed to it.

use std::time::Duration;

use crate::algorithm::State;
use crate::store::AbsorbError;

/// One key's counter in portable form: what a node hands a key's next owner.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CounterSnapshot {
    /// The rule's name, or the carried limit's.
    pub rule: String,
    pub hash_part: String,
    pub state: State,
    /// Set for a limit a request carried (an Envoy override) rather than a
    /// rule of the set: the receiver rebuilds the limit from it and keeps
    /// the counter with the carried limits'.
    #[serde(default)]
    pub carried: Option<CarriedLimit>,
}

/// The values a carried limit is rebuilt from (`Rule::carried`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CarriedLimit {
    pub limit: u64,
    pub window: Duration,
}

impl CounterSnapshot {
    /// A counter of the rule set's rule `rule`.
    pub fn of_rule(rule: &str, hash_part: &str, state: State) -> Self {
        CounterSnapshot {
            rule: rule.to_string(),
            hash_part: hash_part.to_string(),
            state,
            carried: None,
        }
    }

    /// A counter of the carried limit `name`.
    pub fn of_carried(name: &str, hash_part: &str, state: State, carried: CarriedLimit) -> Self {
        CounterSnapshot {
            carried: Some(carried),
            ..CounterSnapshot::of_rule(name, hash_part, state)
        }
    }
}

/// Why a handed-over counter was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Absorb {
    /// Its rule is not in this node's set (the sets have not converged, or
    /// it was removed): its budget cannot be expressed here.
    #[error("unknown rule")]
    UnknownRule,
    #[error(transparent)]
    Refused(AbsorbError),
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{FakeClock, Limiter, LimiterConfig, Rule, RuleSet};

    fn limiter(clock: &Arc<FakeClock>) -> Limiter {
        Limiter::new(RuleSet::empty(), clock.clone(), LimiterConfig::default())
    }

    #[test]
    fn a_carried_limits_counter_moves_with_its_spent_budget() {
        let clock = Arc::new(FakeClock::at_secs(1_000.0));
        let (old, new) = (limiter(&clock), limiter(&clock));
        let rule = Rule::carried("override:5-per-minute", 5, Duration::from_secs(60)).unwrap();
        for _ in 0..3 {
            assert!(old.check_adhoc(&rule, "k", 1).unwrap().allowed);
        }
        let taken = old.take_unless(|_| false);
        assert_eq!(taken.len(), 1);
        assert_eq!(
            taken[0].carried,
            Some(CarriedLimit {
                limit: 5,
                window: Duration::from_secs(60)
            })
        );
        assert_eq!(old.adhoc_keys(), 0, "taken, not copied");
        // The new owner admitted one on a fresh counter meanwhile.
        assert!(new.check_adhoc(&rule, "k", 1).unwrap().allowed);
        new.absorb(taken[0].clone()).unwrap();
        let d = new.check_adhoc(&rule, "k", 1).unwrap();
        assert_eq!((d.allowed, d.remaining), (true, 0), "3 + 1 + this one = 5");
        assert!(!new.check_adhoc(&rule, "k", 1).unwrap().allowed);
    }

    /// A limiter whose one rule, "r", is 5 a minute under `kind`.
    fn five_a_minute(kind: crate::AlgorithmKind, clock: &Arc<FakeClock>) -> Limiter {
        let burst = if kind == crate::AlgorithmKind::LeakyBucket {
            "burst = 5\n"
        } else {
            ""
        };
        let toml = format!(
            "[[rule]]\nname = \"r\"\nalgorithm = \"{}\"\nlimit = 5\nwindow = \"60s\"\n{burst}",
            kind.as_str()
        );
        let rules = RuleSet::from_toml(&toml).unwrap();
        Limiter::new(rules, clock.clone(), LimiterConfig::default())
    }

    /// What the limiter still admits for `key` under `rule`, up to 10.
    fn admits(l: &Limiter, rule: &str, key: &str) -> usize {
        (0..10)
            .take_while(|_| l.consume(rule, key, 1, l.now()).unwrap().allowed)
            .count()
    }

    /// Guard: a counter offered to its owner stays here, deciding on its
    /// whole count, until the owner has it; then only what was spent
    /// meanwhile stays. Taken out while the handoff was in flight, the key
    /// started over here and admitted past its limit.
    #[test]
    fn a_copied_counter_decides_until_settled_then_keeps_what_was_spent_since() {
        for kind in crate::AlgorithmKind::ALL {
            let clock = Arc::new(FakeClock::at_secs(1_000.0));
            let l = five_a_minute(kind, &clock);
            for key in ["moving", "staying"] {
                assert!(l.consume("r", key, 1, l.now()).unwrap().allowed);
            }
            l.consume("r", "moving", 2, l.now()).unwrap();
            let copies = l.copy_unless(|k| k == "staying");
            assert_eq!(copies.len(), 1, "{kind:?}");
            assert_eq!(l.keys(), 2, "{kind:?}: copied, not taken");
            clock.advance(Duration::from_millis(1));
            // While the owner has not got it: 3 of 5 spent, 2 left.
            assert_eq!(admits(&l, "r", "moving"), 2, "{kind:?}");
            assert!(l.settle(&copies[0]), "{kind:?}: something stays");
            assert_eq!(
                admits(&l, "r", "moving"),
                3,
                "{kind:?}: the 2 spent since stay"
            );
            let all_spent_there = l.copy_unless(|k| k == "staying");
            assert!(!l.settle(&all_spent_there[0]), "{kind:?}");
            assert!(!l.holds("r", "moving"), "{kind:?}: nothing left here");
            assert!(l.holds("r", "staying"), "{kind:?}");
        }
    }

    /// What a counter spent beyond a copy already sent is what settling
    /// against that copy would leave, read without settling: the owner gets
    /// it while the key still decides here on its whole count.
    #[test]
    fn what_was_spent_beyond_a_copy_is_what_settling_would_leave() {
        for kind in crate::AlgorithmKind::ALL {
            let clock = Arc::new(FakeClock::at_secs(1_000.0));
            let l = five_a_minute(kind, &clock);
            assert!(l.consume("r", "k", 1, l.now()).unwrap().allowed);
            let copy = l.copy_unless(|_| false).remove(0);
            assert!(l.spent_beyond("r", "k", &copy.state).is_none(), "{kind:?}");
            clock.advance(Duration::from_millis(1));
            assert!(l.consume("r", "k", 2, l.now()).unwrap().allowed);
            let (now, spent) = l.spent_beyond("r", "k", &copy.state).expect("2 spent");
            assert_eq!(
                l.remaining("r", "k"),
                Some(2),
                "{kind:?}: the whole count here"
            );
            let owner = five_a_minute(kind, &clock);
            owner.absorb(spent).unwrap();
            assert_eq!(admits(&owner, "r", "k"), 3, "{kind:?}: the 2 spent beyond");
            assert!(!l.settle(&now), "{kind:?}: nothing beyond the whole one");
        }
    }

    #[test]
    fn a_copied_carried_counter_settles_the_same_way() {
        let clock = Arc::new(FakeClock::at_secs(1_000.0));
        let l = limiter(&clock);
        let rule = Rule::carried("override:5-per-minute", 5, Duration::from_secs(60)).unwrap();
        for _ in 0..3 {
            assert!(l.check_adhoc(&rule, "k", 1).unwrap().allowed);
        }
        let copies = l.copy_unless(|_| false);
        assert_eq!(copies.len(), 1);
        assert!(copies[0].carried.is_some());
        assert_eq!(l.adhoc_keys(), 1, "copied, not taken");
        assert!(l.check_adhoc(&rule, "k", 1).unwrap().allowed);
        assert!(l.settle(&copies[0]), "the one spent since stays");
        let left = (0..10)
            .take_while(|_| l.check_adhoc(&rule, "k", 1).unwrap().allowed)
            .count();
        assert_eq!(left, 4, "only the one spent since stays");
    }

    #[test]
    fn a_carried_counter_that_cannot_be_a_limit_is_refused() {
        let clock = Arc::new(FakeClock::at_secs(1_000.0));
        let l = limiter(&clock);
        let rule = Rule::carried("o", 5, Duration::from_secs(60)).unwrap();
        l.check_adhoc(&rule, "k", 1).unwrap();
        let mut snap = l.take_unless(|_| false).remove(0);
        snap.carried = Some(CarriedLimit {
            limit: 0,
            window: Duration::from_secs(60),
        });
        assert_eq!(l.absorb(snap), Err(Absorb::Refused(AbsorbError::Invalid)));
        assert_eq!(l.adhoc_keys(), 0);
    }
}
