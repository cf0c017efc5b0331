//! The gateway's side of leases: budget its owners handed it for hot keys, decided here without a call until it runs out or its term ends.
//!
//! A lease is used only within its term, measured on this node's clock from
//! when the op that won it was sent (never later than the owner meant).
//! Half used, the gateway asks for the next one in the background, so a
//! steady hot key is decided here without waiting; what is left at the end
//! of a term goes back to the owner as a refund against the window it was
//! counted in.

use std::sync::Arc;

use compact_str::CompactString;
use dashmap::DashMap;
use weir_core::{Decision, Nanos, Rule};
use weir_proto::weir::v1::Lease;

type Key = (Arc<str>, CompactString);

#[derive(Debug, Clone)]
struct Held {
    owner: String,
    units: u64,
    /// The last grant's size: half of it left starts a renewal.
    granted: u64,
    /// Units decided here since the last renewal asked: the demand the
    /// owner sizes the next lease by.
    used: u64,
    /// Checks decided here since the last renewal asked: the key's heat
    /// the owner no longer sees.
    checks: u64,
    /// On this node's clock.
    expires: Nanos,
    /// The owner's decision time of the last grant, for the refund.
    at: Nanos,
    renewing: bool,
}

/// Budget to give back to an owner: a lease ended with units unused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unused {
    pub owner: String,
    pub rule: Arc<str>,
    pub hash_part: CompactString,
    pub units: u64,
    pub at: Nanos,
}

/// A check decided from a lease, and whether to ask for the next one now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FromLease {
    pub decision: Decision,
    /// When a renewal should start, what was decided since the last one.
    pub renew: Option<Used>,
}

/// What a gateway decided from its leases of a key since it last asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Used {
    /// What the owner sizes the next lease by.
    pub units: u64,
    /// What the owner counts towards the key's heat.
    pub checks: u64,
}

#[derive(Default)]
pub struct Leases {
    held: DashMap<Key, Held, weir_core::determinism::HashState>,
}

impl Leases {
    /// Decides `cost` of `rule`'s `hash_part` from a lease held for it, or
    /// None (no lease, ended, or too little left: ask the owner).
    pub fn take(&self, rule: &Rule, hash_part: &str, cost: u64, now: Nanos) -> Option<FromLease> {
        let mut h = self
            .held
            .get_mut(&(rule.name.clone(), CompactString::new(hash_part)))?;
        if now >= h.expires || h.units < cost {
            return None;
        }
        h.units -= cost;
        h.used = h.used.saturating_add(cost);
        h.checks = h.checks.saturating_add(1);
        let renew = (!h.renewing && h.units < h.granted / 2).then_some(Used {
            units: h.used,
            checks: h.checks,
        });
        if renew.is_some() {
            h.renewing = true;
            h.used = 0;
            h.checks = 0;
        }
        let decision = Decision {
            remaining: h.units,
            ..Decision::uncounted(rule.limit, 0, rule.window, now)
        };
        Some(FromLease { decision, renew })
    }

    /// Gives back `cost` a lease decided for a check that was refused by
    /// another of its limits.
    pub fn give_back(&self, rule: &Arc<str>, hash_part: &str, cost: u64) {
        if let Some(mut h) = self
            .held
            .get_mut(&(rule.clone(), CompactString::new(hash_part)))
        {
            h.units = h.units.saturating_add(cost);
        }
    }

    /// Takes a lease `owner` granted for an op sent at `sent`, arriving at
    /// `now`. Units still held from an earlier grant of the same owner are
    /// kept while its term runs (it then ends in the same window as the new
    /// one); a lease whose term has ended, or one from another owner (the
    /// ring changed), is replaced, and what it held is returned as unused:
    /// kept, its units would be used past their term, in a window that did
    /// not count them.
    pub fn grant(
        &self,
        rule: &Arc<str>,
        hash_part: &str,
        owner: &str,
        lease: &Lease,
        sent: Nanos,
        now: Nanos,
    ) -> Option<Unused> {
        let key = (rule.clone(), CompactString::new(hash_part));
        let expires = sent.saturating_add(lease.ttl_ns);
        let mut h = self.held.entry(key).or_insert_with(|| Held {
            owner: owner.to_string(),
            units: 0,
            granted: 0,
            used: 0,
            checks: 0,
            expires,
            at: lease.at,
            renewing: false,
        });
        let ends = h.owner != owner || now >= h.expires;
        let replaced = (ends && h.units > 0).then(|| Unused {
            owner: h.owner.clone(),
            rule: rule.clone(),
            hash_part: CompactString::new(hash_part),
            units: h.units,
            at: h.at,
        });
        if ends {
            h.units = 0;
        }
        if h.owner != owner {
            h.owner = owner.to_string();
        }
        h.units = h.units.saturating_add(lease.units);
        h.granted = lease.units;
        h.expires = expires;
        h.at = lease.at;
        h.renewing = false;
        replaced
    }

    /// A renewal came back without a lease: the next half-used mark asks again.
    pub fn renewal_refused(&self, rule: &Arc<str>, hash_part: &str) {
        if let Some(mut h) = self
            .held
            .get_mut(&(rule.clone(), CompactString::new(hash_part)))
        {
            h.renewing = false;
            // Asking again at every check would be a call per check.
            h.granted = h.units;
        }
    }

    /// Removes the leases whose term has ended and returns what they had
    /// left.
    pub fn ended(&self, now: Nanos) -> Vec<Unused> {
        let mut out = Vec::new();
        self.held.retain(|(rule, key), h| {
            if now < h.expires {
                return true;
            }
            if h.units > 0 {
                out.push(Unused {
                    owner: h.owner.clone(),
                    rule: rule.clone(),
                    hash_part: key.clone(),
                    units: h.units,
                    at: h.at,
                });
            }
            false
        });
        out
    }

    /// Units held now over every lease.
    pub fn units(&self) -> u64 {
        self.held.iter().map(|h| h.units).sum()
    }

    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule() -> Arc<Rule> {
        weir_core::RuleSet::from_toml(
            "[[rule]]\nname = \"r\"\nalgorithm = \"token_bucket\"\nlimit = 100\nwindow = \"1s\"\n",
        )
        .unwrap()
        .get("r")
        .unwrap()
        .1
        .clone()
    }

    fn lease(units: u64) -> Lease {
        Lease {
            units,
            ttl_ns: 1_000,
            at: 7,
        }
    }

    /// Guard: a renewal reports checks and units apart. The owner's heat
    /// counts checks; told the units, one costly check decided from a
    /// lease counted as many checks as it cost units.
    #[test]
    fn a_renewal_reports_the_checks_and_the_units_decided_from_the_lease() {
        let (r, l) = (rule(), Leases::default());
        l.grant(&r.name, "k", "o", &lease(100), 0, 0);
        let t = l.take(&r, "k", 60, 1).expect("from the lease");
        let used = Used {
            units: 60,
            checks: 1,
        };
        assert_eq!(t.renew, Some(used));
    }

    #[test]
    fn a_lease_decides_until_spent_or_ended_and_asks_again_at_half() {
        let (r, l) = (rule(), Leases::default());
        assert!(l.take(&r, "k", 1, 0).is_none(), "no lease: ask the owner");
        assert!(l.grant(&r.name, "k", "o", &lease(10), 100, 100).is_none());
        let mut renewals = Vec::new();
        for i in 0..10 {
            let t = l.take(&r, "k", 1, 500).expect("from the lease");
            assert!(t.decision.allowed);
            assert_eq!(t.decision.remaining, 9 - i);
            renewals.extend(t.renew);
        }
        // Six checks of one unit took it under half: what the owner is told.
        let used = Used {
            units: 6,
            checks: 6,
        };
        assert_eq!(renewals, [used], "one renewal at the half-used mark");
        assert!(l.take(&r, "k", 1, 500).is_none(), "spent");
        l.grant(&r.name, "k", "o", &lease(4), 600, 600);
        assert!(l.take(&r, "k", 1, 600 + 1_000).is_none(), "its term ended");
        let back = l.ended(600 + 1_000);
        assert_eq!(back.len(), 1);
        assert_eq!((back[0].units, back[0].at), (4, 7));
        assert!(l.is_empty());
    }

    #[test]
    fn units_of_a_lease_whose_term_ended_go_back_and_never_into_the_next() {
        let (r, l) = (rule(), Leases::default());
        l.grant(&r.name, "k", "o", &lease(10), 0, 0);
        l.take(&r, "k", 2, 500).expect("from the lease");
        // Still in its term: the next grant adds to what is left.
        assert!(l.grant(&r.name, "k", "o", &lease(6), 900, 950).is_none());
        assert_eq!(l.units(), 14);
        // The term (from 900) ended at 1,900, before the next grant came
        // back: what it left is returned against its own window, and only
        // the new grant's units are held.
        let next = Lease {
            units: 5,
            ttl_ns: 1_000,
            at: 2_500,
        };
        let back = l
            .grant(&r.name, "k", "o", &next, 1_800, 2_000)
            .expect("the ended lease's units returned");
        assert_eq!((back.owner.as_str(), back.units, back.at), ("o", 14, 7));
        assert_eq!(l.units(), 5);
        let t = l.take(&r, "k", 1, 2_100).expect("from the new lease");
        assert_eq!(t.decision.remaining, 4);
    }

    #[test]
    fn a_grant_from_a_new_owner_returns_what_the_old_one_lent() {
        let (r, l) = (rule(), Leases::default());
        l.grant(&r.name, "k", "old", &lease(10), 0, 0);
        let back = l
            .grant(&r.name, "k", "new", &lease(6), 10, 10)
            .expect("returned");
        assert_eq!((back.owner.as_str(), back.units), ("old", 10));
        assert_eq!(l.units(), 6);
        l.give_back(&r.name, "k", 2);
        assert_eq!(l.units(), 8);
    }
}
