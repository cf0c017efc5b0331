//! The owner-failure policy: what a gateway does for a limit whose owner did not answer, and which owners it has given up on.
//!
//! Seed section 11: failing closed turns an owner's blip into an outage the
//! limiter caused, so the default is to fail open to a local limit. Each of
//! the N gateways enforces L/N alone for the keys of the lost owner, so the
//! fleet still admits about L per window in total for such a key, plus what
//! the owner had admitted before it went quiet. The divided limiter is kept
//! warm (rebuilt whenever the rules or N change) rather than built
//! mid-incident.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use weir_core::{CheckError, Decision, Nanos, Rule, RuleSet, Unavailable};

use crate::config::OwnerFailure;
use crate::divided::Divided;
use crate::stats::{FallbackCounts, FallbackStatus};

/// How a limit was decided without its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Substitute {
    /// On the divided local limiter; a refund goes back there.
    Divided,
    /// Admitted uncounted (`open`); nothing to refund.
    Open,
}

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

pub struct Fallback {
    policy: OwnerFailure,
    divided: Divided,
    owners: Mutex<Owners>,
    /// Owners in fallback; read without the lock on every forwarded check.
    active: AtomicUsize,
    probe_every: Nanos,
}

impl Fallback {
    pub fn new(policy: OwnerFailure, divided: Divided, probe_every: Duration) -> Self {
        Fallback {
            policy,
            divided,
            owners: Mutex::new(Owners::default()),
            active: AtomicUsize::new(0),
            probe_every: u64::try_from(probe_every.as_nanos()).unwrap_or(u64::MAX),
        }
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

    /// One limit decided without its owner, by the configured policy.
    /// `carried`: the limit is a request's own (an Envoy override).
    pub fn decide(
        &self,
        rule: &Rule,
        hash_part: &str,
        cost: u64,
        carried: bool,
        owner: &str,
    ) -> Result<(Decision, Substitute), CheckError> {
        match self.policy {
            OwnerFailure::Local if carried => {
                let d = self.divided.consume_carried(rule, hash_part, cost)?;
                Ok((d, Substitute::Divided))
            }
            OwnerFailure::Local => {
                let d = self.divided.consume(&rule.name, hash_part, cost)?;
                Ok((d, Substitute::Divided))
            }
            OwnerFailure::Open => {
                let d = Decision::uncounted(rule.limit, cost, rule.window, self.divided.now());
                Ok((d, Substitute::Open))
            }
            OwnerFailure::Closed => Err(Unavailable::OwnerUnreachable {
                owner: owner.to_string(),
            }
            .into()),
        }
    }

    /// Gives back what a substitute decision consumed.
    pub fn refund(&self, how: Substitute, rule: &str, hash_part: &str, at: Nanos, cost: u64) {
        if how == Substitute::Divided {
            self.divided.refund(rule, hash_part, at, cost);
        }
    }

    pub fn sweep(&self) -> usize {
        self.divided.sweep()
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
    use std::sync::Arc;
    use weir_core::{FakeClock, LimiterConfig};

    const RULES: &str = r#"
[[rule]]
name = "r"
algorithm = "sliding_window_log"
limit = 9
window = "60s"
"#;

    fn fallback(policy: OwnerFailure) -> Fallback {
        let rules = RuleSet::from_toml(RULES).unwrap();
        let clock = Arc::new(FakeClock::at_secs(1000.0));
        let divided = Divided::new(&rules, 3, clock, LimiterConfig::default());
        Fallback::new(policy, divided, Duration::from_millis(100))
    }

    fn rule() -> Arc<Rule> {
        RuleSet::from_toml(RULES).unwrap().rules()[0].clone()
    }

    #[test]
    fn each_policy_decides_as_documented() {
        let local = fallback(OwnerFailure::Local);
        let admitted = (0..10)
            .filter(|_| local.decide(&rule(), "k", 1, false, "b").unwrap().0.allowed)
            .count();
        assert_eq!(admitted, 3, "9 / 3 members");
        let (d, how) = fallback(OwnerFailure::Open)
            .decide(&rule(), "k", 4, false, "b")
            .unwrap();
        assert!(d.allowed && how == Substitute::Open);
        assert_eq!(d.remaining, 5);
        let closed = fallback(OwnerFailure::Closed).decide(&rule(), "k", 1, false, "b");
        assert_eq!(
            closed.unwrap_err(),
            CheckError::Unavailable(Unavailable::OwnerUnreachable { owner: "b".into() })
        );
    }

    #[test]
    fn entering_and_leaving_are_counted_once_per_episode() {
        let f = fallback(OwnerFailure::Local);
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
