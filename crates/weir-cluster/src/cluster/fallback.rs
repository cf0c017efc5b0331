//! The local fallback: when an owner does not answer, decide on a limiter sized limit/N.
//!
//! Seed section 11: failing closed turns an owner's blip into an outage the
//! limiter caused, so the default is to fail open to a local limit. Each of
//! the N gateways enforces L/N alone for the keys of the lost owner, so the
//! fleet still admits about L per window in total for such a key, plus what
//! the owner had admitted before it went quiet. The limiter is kept warm
//! (rebuilt whenever the rules or N change) rather than built mid-incident.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use weir_core::{
    CheckError, Clock, Decision, Limiter, LimiterConfig, Nanos, RuleSet, NANOS_PER_MS,
};

use super::status::{FallbackCounts, FallbackStatus};

/// One owner this node has given up on for now.
#[derive(Debug, Clone, Copy)]
struct Lost {
    /// Local clock reading when the owner was first found unreachable.
    since: Nanos,
    /// Until then checks for this owner skip the peer call entirely; the
    /// first check after it probes the owner.
    probe_at: Nanos,
}

#[derive(Debug, Default)]
struct Owners {
    lost: BTreeMap<String, Lost>,
    entered: u64,
    left: u64,
}

pub(crate) struct Fallback {
    limiter: Limiter,
    /// The member count the divided rules were built for.
    n: AtomicUsize,
    owners: Mutex<Owners>,
    /// Owners in fallback; read without the lock on every forwarded check.
    active: AtomicUsize,
    probe_every: Nanos,
}

impl Fallback {
    pub fn new(
        rules: &RuleSet,
        n: usize,
        clock: Arc<dyn Clock>,
        config: LimiterConfig,
        probe_every: Duration,
    ) -> Self {
        let f = Fallback {
            limiter: Limiter::new(RuleSet::empty(), clock, config),
            n: AtomicUsize::new(n.max(1)),
            owners: Mutex::new(Owners::default()),
            active: AtomicUsize::new(0),
            probe_every: u64::try_from(probe_every.as_nanos()).unwrap_or(u64::MAX),
        };
        f.rebuild(rules, n);
        f
    }

    /// Resizes every rule to 1/n of its limit. Rules whose divided policy is
    /// unchanged keep their fallback counters; those only resized keep what
    /// callers spent, for the counting algorithms (`Limiter::install_resized`).
    pub fn rebuild(&self, rules: &RuleSet, n: usize) {
        let n = n.max(1);
        self.n.store(n, Ordering::Relaxed);
        let divided = rules.rules().iter().map(|r| r.divided(n as u64)).collect();
        match RuleSet::new(rules.version(), divided) {
            Ok(set) => self.limiter.install_resized(set),
            // Dividing changes only limits, never what a rule matches, so a
            // valid set stays valid; keep the last good one if not.
            Err(e) => tracing::error!(error = %e, "cannot divide the rules for the fallback"),
        }
    }

    pub fn members(&self) -> usize {
        self.n.load(Ordering::Relaxed)
    }

    /// True when checks for `owner` should go straight to the fallback: it
    /// failed recently and it is not yet time to probe it again. At most one
    /// check per probe interval is let through to probe.
    pub fn bypass(&self, owner: &str, now: Nanos) -> bool {
        if self.active.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let mut owners = self.owners.lock();
        match owners.lost.get_mut(owner) {
            Some(lost) if now < lost.probe_at => true,
            Some(lost) => {
                lost.probe_at = now.saturating_add(self.probe_every);
                false
            }
            None => false,
        }
    }

    /// Records that `owner` did not answer; logs and counts the first time.
    pub fn failed(&self, owner: &str, now: Nanos, why: &str) {
        let mut owners = self.owners.lock();
        let probe_at = now.saturating_add(self.probe_every);
        if let Some(lost) = owners.lost.get_mut(owner) {
            lost.probe_at = probe_at;
            return;
        }
        owners.lost.insert(
            owner.to_string(),
            Lost {
                since: now,
                probe_at,
            },
        );
        owners.entered += 1;
        self.active.store(owners.lost.len(), Ordering::Relaxed);
        tracing::warn!(
            owner,
            reason = why,
            members = self.members(),
            "owner unreachable: deciding its keys on the local fallback (limit/N)"
        );
    }

    /// Records an answer from `owner`; leaves fallback if it was in it.
    pub fn answered(&self, owner: &str, now: Nanos) {
        if self.active.load(Ordering::Relaxed) == 0 {
            return;
        }
        self.leave(owner, now, "owner answered");
    }

    /// Drops owners that are no longer members: their keys have a new owner.
    pub fn retain_members(&self, is_member: impl Fn(&str) -> bool, now: Nanos) {
        let gone: Vec<String> = {
            let owners = self.owners.lock();
            owners
                .lost
                .keys()
                .filter(|o| !is_member(o))
                .cloned()
                .collect()
        };
        for owner in gone {
            self.leave(&owner, now, "owner left the ring");
        }
    }

    fn leave(&self, owner: &str, now: Nanos, why: &str) {
        let mut owners = self.owners.lock();
        if let Some(lost) = owners.lost.remove(owner) {
            owners.left += 1;
            self.active.store(owners.lost.len(), Ordering::Relaxed);
            let after = Duration::from_nanos(now.saturating_sub(lost.since));
            tracing::info!(owner, reason = why, ?after, "left fallback for owner");
        }
    }

    /// One limit decided locally at limit/N. A cost over the divided limit
    /// can never fit here, so it is denied (not refused as bad input: it is
    /// valid against the full limit the owner enforces).
    pub fn consume(&self, rule: &str, hash_part: &str, cost: u64) -> Result<Decision, CheckError> {
        let now = self.limiter.now();
        match self.limiter.consume(rule, hash_part, cost, now) {
            Err(CheckError::CostExceedsLimit { max, .. }) => Ok(Decision {
                allowed: false,
                limit: max,
                remaining: 0,
                retry_after: Duration::from_secs(1),
                reset_at: now / NANOS_PER_MS + 1000,
                delay: Duration::ZERO,
                at: now,
            }),
            other => other,
        }
    }

    /// A whole request decided at limit/N (the divide strategy).
    pub fn check(&self, req: &weir_core::Request<'_>) -> Result<weir_core::Verdict, CheckError> {
        self.limiter.check(req)
    }

    /// The divided rule of this name, for a denial built by hand.
    pub fn rule(&self, name: &str) -> Option<Arc<weir_core::Rule>> {
        self.limiter.rules().get(name).map(|(_, r)| r.clone())
    }

    pub fn refund(&self, rule: &str, hash_part: &str, at: Nanos, cost: u64) {
        self.limiter.refund(rule, hash_part, at, cost);
    }

    pub fn sweep(&self) -> usize {
        self.limiter.sweep()
    }

    pub fn counts(&self) -> FallbackCounts {
        let owners = self.owners.lock();
        FallbackCounts {
            entered: owners.entered,
            left: owners.left,
            active: owners.lost.len() as u64,
        }
    }

    pub fn status(&self) -> FallbackStatus {
        let owners = self.owners.lock();
        FallbackStatus {
            active: !owners.lost.is_empty(),
            owners: owners.lost.keys().cloned().collect(),
            entered_total: owners.entered,
        }
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

    fn fallback(n: usize) -> Fallback {
        let rules = RuleSet::from_toml(RULES).unwrap();
        let clock = Arc::new(FakeClock::at_secs(1000.0));
        Fallback::new(
            &rules,
            n,
            clock,
            LimiterConfig::default(),
            Duration::from_millis(100),
        )
    }

    #[test]
    fn fallback_enforces_the_limit_divided_by_the_member_count() {
        let f = fallback(3);
        let admitted = (0..10)
            .filter(|_| f.consume("r", "k", 1).unwrap().allowed)
            .count();
        assert_eq!(admitted, 3, "9 / 3 members");
        f.rebuild(&RuleSet::from_toml(RULES).unwrap(), 2);
        let admitted = (0..10)
            .filter(|_| f.consume("r", "k2", 1).unwrap().allowed)
            .count();
        assert_eq!(admitted, 5, "ceil(9 / 2)");
    }

    #[test]
    fn a_cost_over_the_divided_limit_is_denied_not_refused() {
        let f = fallback(3);
        let d = f.consume("r", "k", 5).unwrap();
        assert!(!d.allowed);
    }

    #[test]
    fn entering_and_leaving_are_counted_once_per_episode() {
        let f = fallback(3);
        assert!(!f.bypass("b", 0));
        f.failed("b", 0, "timeout");
        f.failed("b", 10, "timeout");
        assert_eq!(f.status().owners, vec!["b".to_string()]);
        assert!(f.bypass("b", 50), "within the probe interval");
        assert!(!f.bypass("b", 200_000_000), "one probe after the interval");
        assert!(f.bypass("b", 200_000_001), "and only one");
        f.answered("b", 300_000_000);
        let s = f.status();
        assert!(!s.active);
        assert_eq!(s.entered_total, 1);
        assert_eq!(f.counts().left, 1);
        f.failed("c", 0, "refused");
        f.retain_members(|m| m != "c", 1);
        assert!(!f.status().active);
    }
}
