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
