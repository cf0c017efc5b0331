//! The owner-failure policy: what a gateway decides for a limit whose owner is slow, or lost with no replica to stand in.
//!
//! Failing closed turns an owner's blip into an outage the
//! limiter caused, so the default is to fail open to a local limit. A lost
//! owner's keys are decided from what this gateway last heard about them
//! (its share, `remaining / N`, of what the owner had left) or, for a key
//! it knows nothing of, at L/N: the fleet then admits about what the owner
//! would have, plus what it had admitted before it went quiet. The divided
//! limiter is kept warm (rebuilt whenever the rules or N change) rather
//! than built mid-incident. A slow owner is not lost: under `local` its
//! check is refused for now and reconciled with the owner's late answer,
//! so slowness never over-admits.

use std::sync::Arc;
use std::time::Duration;

use weir_core::{CheckError, Decision, Nanos, Rule, RuleSet, Unavailable};

use super::cap::Cap;
use super::learned::{Learned, Share};
use crate::config::OwnerFailure;
use crate::divided::Divided;
use crate::stats::{bump, Stats};

/// How a limit was decided without its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Substitute {
    /// On the divided local limiter (nothing learned about the key).
    Divided,
    /// From this gateway's share of what the owner last had left.
    Learned,
    /// Admitted uncounted (`open`).
    Open,
    /// The owner is slow, not lost: refused for now, reconciled with its
    /// late answer.
    Slow,
}

impl Substitute {
    /// Whether an admission decided this way is owed to the owner.
    pub fn owes(self) -> bool {
        self != Substitute::Slow
    }
}

pub struct Fallback {
    policy: OwnerFailure,
    divided: Divided,
    learned: Learned,
    /// What every admission decided without an owner spends, node-wide.
    cap: Cap,
    stats: Arc<Stats>,
}

impl Fallback {
    pub fn new(
        policy: OwnerFailure,
        divided: Divided,
        learned: Learned,
        cap: Cap,
        stats: Arc<Stats>,
    ) -> Self {
        Fallback {
            policy,
            divided,
            learned,
            cap,
            stats,
        }
    }

    /// An admission decided without its owner, if the node-wide cap has
    /// room for it; a denial until it has otherwise. The cap bounds what
    /// an outage can let through whatever the keys (by default a local
    /// bucket of 5,000 req/s per node).
    fn capped(&self, d: Decision, rule: &Rule, cost: u64) -> Decision {
        if !d.allowed {
            return d;
        }
        match self.cap.take(cost, d.at) {
            None => d,
            Some(wait) => {
                bump(&self.stats.fallback_capped, 1);
                Decision::deny(rule.limit, wait, d.at)
            }
        }
    }

    /// A limit of a `hot = "local"` rule: this gateway alone against L/N.
    pub fn tier(&self, rule: &Rule, hash_part: &str, cost: u64) -> Result<Decision, CheckError> {
        self.divided.consume(&rule.name, hash_part, cost)
    }

    pub fn tier_refund(&self, rule: &str, hash_part: &str, at: Nanos, cost: u64) {
        self.divided.refund(rule, hash_part, at, cost);
    }

    pub fn policy(&self) -> OwnerFailure {
        self.policy
    }

    /// Resizes the divided limits to the rules and member count in force.
    pub fn rebuild(&self, rules: &RuleSet, n: usize) {
        self.divided.rebuild(rules, n);
    }

    pub fn members(&self) -> usize {
        self.divided.members()
    }

    /// What an owner (or its replica holder) answered for a key.
    pub fn learn(&self, rule: &Arc<str>, hash_part: &str, d: &Decision) {
        self.learned.note(rule, hash_part, d);
    }

    /// One limit decided while its owner is lost, by the configured
    /// policy. `carried`: the limit is a request's own (an Envoy override).
    pub fn without_owner(
        &self,
        rule: &Rule,
        hash_part: &str,
        cost: u64,
        carried: bool,
        owner: &str,
    ) -> Result<(Decision, Substitute), CheckError> {
        let now = self.divided.now();
        let (d, how) = match self.policy {
            OwnerFailure::Local if carried => (
                self.divided.consume_carried(rule, hash_part, cost)?,
                Substitute::Divided,
            ),
            OwnerFailure::Local => {
                let members = self.members();
                match self.learned.take(&rule.name, hash_part, cost, members, now) {
                    Some(Share::Admit(d) | Share::Deny(d)) => (d, Substitute::Learned),
                    None => (
                        self.divided.consume(&rule.name, hash_part, cost)?,
                        Substitute::Divided,
                    ),
                }
            }
            OwnerFailure::Open => self.open(rule, cost, now)?,
            OwnerFailure::Closed => return Err(lost(owner)),
        };
        let capped = self.capped(d, rule, cost);
        if capped.allowed != d.allowed {
            // Refused by the cap: nothing of the key's share is spent.
            self.refund(how, &rule.name, hash_part, d.at, cost);
        }
        Ok((capped, how))
    }

    /// One limit whose owner did not answer within `deadline` but is not
    /// lost: `local` refuses it for now (admitting could only over-admit;
    /// the caller retries after the deadline), `open` admits, `closed`
    /// answers 503.
    pub fn slow(
        &self,
        rule: &Rule,
        cost: u64,
        owner: &str,
        deadline: Duration,
    ) -> Result<(Decision, Substitute), CheckError> {
        let now = self.divided.now();
        match self.policy {
            OwnerFailure::Local => {
                Ok((Decision::deny(rule.limit, deadline, now), Substitute::Slow))
            }
            OwnerFailure::Open => {
                let (d, how) = self.open(rule, cost, now)?;
                Ok((self.capped(d, rule, cost), how))
            }
            OwnerFailure::Closed => Err(lost(owner)),
        }
    }

    fn open(
        &self,
        rule: &Rule,
        cost: u64,
        now: Nanos,
    ) -> Result<(Decision, Substitute), CheckError> {
        let d = Decision::uncounted(rule.limit, cost, rule.window, now);
        Ok((d, Substitute::Open))
    }

    /// Gives back what a substitute decision consumed.
    pub fn refund(&self, how: Substitute, rule: &Arc<str>, hash_part: &str, at: Nanos, cost: u64) {
        match how {
            Substitute::Divided => self.divided.refund(rule, hash_part, at, cost),
            Substitute::Learned => self.learned.give_back(rule, hash_part, cost),
            Substitute::Open | Substitute::Slow => {}
        }
    }

    pub fn sweep(&self) {
        self.divided.sweep();
        self.learned.purge(self.divided.now());
    }
}

fn lost(owner: &str) -> CheckError {
    Unavailable::OwnerUnreachable {
        owner: owner.to_string(),
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::{FakeClock, LimiterConfig};

    const RULES: &str = r#"
[[rule]]
name = "r"
algorithm = "sliding_window_log"
limit = 9
window = "60s"
"#;

    fn capped(policy: OwnerFailure, cap: u64) -> Fallback {
        let rules = RuleSet::from_toml(RULES).unwrap();
        let clock = Arc::new(FakeClock::at_secs(1000.0));
        let divided = Divided::new(&rules, 3, clock, LimiterConfig::default());
        let stats = Arc::new(Stats::default());
        Fallback::new(policy, divided, Learned::new(100), Cap::new(cap), stats)
    }

    fn fallback(policy: OwnerFailure) -> Fallback {
        capped(policy, 0)
    }

    /// Guard: whatever the keys, a node admits no more without their
    /// owners than its cap, under `local` and `open` alike.
    #[test]
    fn the_node_wide_cap_bounds_what_an_outage_admits_over_every_key() {
        for policy in [OwnerFailure::Local, OwnerFailure::Open] {
            let f = capped(policy, 10);
            let admitted = (0..1_000)
                .filter(|i| {
                    f.without_owner(&rule(), &format!("k{i}"), 1, false, "b")
                        .unwrap()
                        .0
                        .allowed
                })
                .count();
            assert_eq!(admitted, 10, "{policy:?}: one second of the cap");
            assert_eq!(
                f.stats
                    .fallback_capped
                    .load(std::sync::atomic::Ordering::Relaxed),
                990
            );
        }
    }

    fn rule() -> Arc<Rule> {
        RuleSet::from_toml(RULES).unwrap().rules()[0].clone()
    }

    #[test]
    fn each_policy_decides_a_lost_owner_as_documented() {
        let local = fallback(OwnerFailure::Local);
        let admitted = (0..10)
            .filter(|_| {
                local
                    .without_owner(&rule(), "k", 1, false, "b")
                    .unwrap()
                    .0
                    .allowed
            })
            .count();
        assert_eq!(admitted, 3, "9 / 3 members");
        let (d, how) = fallback(OwnerFailure::Open)
            .without_owner(&rule(), "k", 4, false, "b")
            .unwrap();
        assert!(d.allowed && how == Substitute::Open);
        assert_eq!(d.remaining, 5);
        let closed = fallback(OwnerFailure::Closed).without_owner(&rule(), "k", 1, false, "b");
        assert_eq!(
            closed.unwrap_err(),
            CheckError::Unavailable(Unavailable::OwnerUnreachable { owner: "b".into() })
        );
    }

    #[test]
    fn a_lost_owner_is_decided_from_what_it_last_said_not_a_fresh_share() {
        let f = fallback(OwnerFailure::Local);
        let r = rule();
        // The owner had admitted 7 of 9: 2 left, 0 for each of 3 gateways.
        let mut said = Decision::uncounted(9, 7, r.window, 1_000_000_000_000);
        said.remaining = 2;
        f.learn(&r.name, "k", &said);
        let (d, how) = f.without_owner(&r, "k", 1, false, "b").unwrap();
        assert_eq!(how, Substitute::Learned);
        assert!(!d.allowed, "a fresh 9/3 would have admitted");
    }

    #[test]
    fn a_slow_owner_is_refused_for_now_under_local() {
        let f = fallback(OwnerFailure::Local);
        let (d, how) = f.slow(&rule(), 1, "b", Duration::from_millis(5)).unwrap();
        assert!(!d.allowed);
        assert_eq!(
            (how, d.retry_after),
            (Substitute::Slow, Duration::from_millis(5))
        );
        assert!(!how.owes());
    }
}
