//! Every limit divided by the member count: what one node of N enforces alone (the divide strategy, and the fallback when an owner is lost).
//!
//! Each of N nodes enforcing L/N admits about L in all when
//! traffic spreads evenly, and up to L/N x (nodes a caller reaches) when it
//! does not. The limiter is rebuilt whenever the rules or N change, and a
//! resize keeps what callers spent (counting algorithms), so a join or a
//! leave does not hand every caller a fresh budget.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use weir_core::{
    Applied, CheckError, CheckRequest, Clock, Decision, Limiter, LimiterConfig, Nanos, Rule,
    RuleSet, Verdict,
};

pub struct Divided {
    limiter: Limiter,
    /// The member count the rules were divided by.
    n: AtomicUsize,
}

/// A cost the divided limit can never hold is valid against the full limit
/// (its owner would decide it), so it is a denial here, not bad input: the
/// caller may retry once the share is back, a window from now.
fn over_share(share: &Rule, now: Nanos) -> Decision {
    Decision::deny(share.limit, share.window, now)
}

impl Divided {
    pub fn new(rules: &RuleSet, n: usize, clock: Arc<dyn Clock>, config: LimiterConfig) -> Self {
        let d = Divided {
            limiter: Limiter::new(RuleSet::empty(), clock, config),
            n: AtomicUsize::new(n.max(1)),
        };
        d.rebuild(rules, n);
        d
    }

    /// Resizes every rule to 1/n of its limit. Rules whose divided policy is
    /// unchanged keep their counters; those only resized keep what callers
    /// spent, for the counting algorithms (`Limiter::install_resized`).
    pub fn rebuild(&self, rules: &RuleSet, n: usize) {
        let n = n.max(1);
        self.n.store(n, Ordering::Relaxed);
        self.limiter.install_resized(rules.divided(n as u64));
    }

    pub fn members(&self) -> usize {
        self.n.load(Ordering::Relaxed)
    }

    pub fn now(&self) -> Nanos {
        self.limiter.now()
    }

    /// Gives `cost` back to what this node's share of (rule, key) spent.
    pub fn give_back(&self, rule: &Rule, hash_part: &str, cost: u64) {
        self.limiter.give_back(rule, hash_part, cost);
    }

    /// This node's share of (rule, key), read or first cleared.
    pub fn counter(
        &self,
        rule: &Rule,
        hash_part: &str,
        action: crate::strategy::CounterAction,
    ) -> Result<(Decision, Option<String>), CheckError> {
        crate::strategy::counter_here(&self.limiter, rule, hash_part, action)
    }

    /// One limit of the rule set, decided at limit/N.
    pub fn consume(&self, rule: &str, hash_part: &str, cost: u64) -> Result<Decision, CheckError> {
        let now = self.limiter.now();
        match self.limiter.consume(rule, hash_part, cost, now) {
            Err(CheckError::CostExceedsLimit { .. }) => {
                let share = self.share(rule).ok_or(CheckError::Unavailable(
                    weir_core::Unavailable::UnknownRule(rule.to_string()),
                ))?;
                Ok(over_share(&share, now))
            }
            other => other,
        }
    }

    /// A limit a request carried (an Envoy override), decided at limit/N in
    /// tables of its own.
    pub fn consume_carried(
        &self,
        rule: &Rule,
        hash_part: &str,
        cost: u64,
    ) -> Result<Decision, CheckError> {
        let share = rule.divided(self.members() as u64);
        if cost > share.policy.max_cost() {
            return Ok(over_share(&share, self.limiter.now()));
        }
        self.limiter.check_adhoc(&share, hash_part, cost)
    }

    /// A whole request decided at limit/N. The request is validated against
    /// the full rules first (`rules`): a cost the real limit allows is valid
    /// input even where the divided limit cannot hold it.
    pub fn check(&self, rules: &Limiter, req: &CheckRequest) -> Result<Verdict, CheckError> {
        if let Some(rule) = &req.limit {
            req.validate()?;
            let d = self.consume_carried(rule, &req.key, req.cost)?;
            return Ok(Verdict::single(rule.clone(), &req.key, d));
        }
        rules.select(req)?;
        match self.limiter.check(req) {
            Err(CheckError::CostExceedsLimit { rule, .. }) => {
                let share = self.share(&rule).ok_or(CheckError::Unavailable(
                    weir_core::Unavailable::UnknownRule(rule.clone()),
                ))?;
                let decision = over_share(&share, self.limiter.now());
                Ok(Verdict {
                    allowed: false,
                    applied: vec![Applied {
                        hash_part: req.key.as_str().into(),
                        decision,
                        rule: share,
                    }],
                })
            }
            other => other,
        }
    }

    /// The divided rule of this name.
    fn share(&self, name: &str) -> Option<Arc<Rule>> {
        self.limiter.rules().get(name).map(|(_, r)| r.clone())
    }

    pub fn refund(&self, rule: &str, hash_part: &str, at: Nanos, cost: u64) {
        self.limiter.refund(rule, hash_part, at, cost);
    }

    pub fn sweep(&self) -> usize {
        self.limiter.sweep()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::FakeClock;

    const RULES: &str = r#"
[[rule]]
name = "r"
algorithm = "sliding_window_log"
limit = 9
window = "60s"
"#;

    fn divided(n: usize) -> (Divided, Limiter) {
        let rules = RuleSet::from_toml(RULES).unwrap();
        let clock = Arc::new(FakeClock::at_secs(1000.0));
        let full = Limiter::new(rules.clone(), clock.clone(), LimiterConfig::default());
        (
            Divided::new(&rules, n, clock, LimiterConfig::default()),
            full,
        )
    }

    #[test]
    fn each_limit_is_divided_by_the_member_count() {
        let (d, _) = divided(3);
        let admitted = (0..10)
            .filter(|_| d.consume("r", "k", 1).unwrap().allowed)
            .count();
        assert_eq!(admitted, 3, "9 / 3 members");
        d.rebuild(&RuleSet::from_toml(RULES).unwrap(), 2);
        let admitted = (0..10)
            .filter(|_| d.consume("r", "k2", 1).unwrap().allowed)
            .count();
        assert_eq!(admitted, 5, "ceil(9 / 2)");
    }

    #[test]
    fn a_cost_over_the_share_is_denied_for_a_window_on_every_path() {
        let (d, full) = divided(3);
        let one = d.consume("r", "k", 5).unwrap();
        let whole = d
            .check(&full, &CheckRequest::new("k", "/").cost(5))
            .unwrap();
        let carried = Arc::new(Rule::carried("o", 9, std::time::Duration::from_secs(60)).unwrap());
        let over = d.consume_carried(&carried, "k", 5).unwrap();
        for decision in [one, whole.applied[0].decision, over] {
            assert!(!decision.allowed);
            assert_eq!(decision.limit, 3);
            assert_eq!(decision.retry_after, std::time::Duration::from_secs(60));
        }
        assert!(!whole.allowed);
        assert!(
            matches!(
                d.check(&full, &CheckRequest::new("k", "/").cost(10)),
                Err(CheckError::CostExceedsLimit { .. })
            ),
            "over the full limit is still bad input"
        );
    }

    #[test]
    fn carried_limits_are_divided_too() {
        let (d, full) = divided(3);
        let rule = Arc::new(Rule::carried("o", 6, std::time::Duration::from_secs(60)).unwrap());
        let req = CheckRequest::new("k", "/").carrying(rule);
        let admitted = (0..5)
            .filter(|_| d.check(&full, &req).unwrap().allowed)
            .count();
        assert_eq!(admitted, 2, "6 / 3 members");
    }
}
