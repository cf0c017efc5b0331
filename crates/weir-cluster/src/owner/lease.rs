//! The owner's side of leases: a slice of a hot key's budget handed to a gateway, counted as spent here until it comes back.
//!
//! Sizing: a gateway gets about what it sent in the last second (its rate
//! over one lease term), but never more than the remaining budget divided
//! by twice the gateways sending the key, and nothing when that is below
//! [`MIN_LEASE`]. So leases shrink as the budget runs out and the last of
//! it is decided here, one check at a time. Whatever sits unused in leases
//! is counted as spent: the cluster never admits more than L, and the most
//! it refuses wrongly is what leases hold unused when the budget runs out,
//! at most half of what remained when they were granted.

use std::sync::Arc;
use std::time::Duration;

use weir_core::{AlgorithmKind, Hot, Nanos, Rule};
use weir_proto::weir::v1::Lease;

use super::hot::HotKeys;
use super::local::{Consumed, Local};
use super::replicate::Replicator;
use crate::stats::{bump, Stats};

/// How long a lease lasts.
pub const LEASE_TERM: Duration = Duration::from_secs(1);
/// Less than this is not worth a lease: the owner decides it check by check.
pub const MIN_LEASE: u64 = 4;
/// No lease within this of a window's end (fixed and sliding counters):
/// it could not be used before its units stop counting.
const TAIL: Nanos = 10_000_000;

pub struct Lessor {
    pub hot: HotKeys,
    local: Arc<Local>,
    replicator: Arc<Replicator>,
    stats: Arc<Stats>,
}

fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Whether `rule`'s hot keys are leased (a shard of a sharded rule never is).
pub fn leased(rule: &Rule) -> bool {
    rule.hot == Hot::Lease && rule.shard_of.is_none()
}

/// The longest a gateway's deny cache holds a denial of `rule`: a term for
/// a leased rule, else as long as the denial says. Part of a hot key's
/// budget may sit unused in gateways' leases and come back within a term;
/// held longer, the cached denial would refuse those units until it ended.
/// The denial the caller is told is never shortened by this: it says what
/// the algorithm says, and the budget that comes back early is a bonus.
pub fn deny_hold(rule: &Rule) -> Duration {
    if leased(rule) {
        LEASE_TERM
    } else {
        Duration::MAX
    }
}

/// How long a lease of `rule` granted at `now` may last: one term, and for
/// the windowed counters no later than the window's end, so that every
/// leased unit is used in the window it was counted in.
pub fn term(rule: &Rule, now: Nanos) -> Option<Nanos> {
    let term = nanos(LEASE_TERM);
    let left = match rule.algorithm {
        AlgorithmKind::FixedWindow | AlgorithmKind::SlidingWindowCounter => {
            let w = nanos(rule.window).max(1);
            (now / w + 1).saturating_mul(w).saturating_sub(now)
        }
        _ => term,
    };
    let t = term.min(left);
    (t >= TAIL).then_some(t)
}

/// The units a gateway sending `from_gateway` of a key's checks per second
/// (of `gateways` that send it) gets when `remaining` is left; 0: none.
pub fn size(from_gateway: u64, gateways: usize, remaining: u64) -> u64 {
    let term_secs = LEASE_TERM.as_secs_f64();
    let wanted = (from_gateway as f64 * term_secs).ceil() as u64;
    let cap = remaining / (2 * gateways.max(1) as u64);
    let units = wanted.min(cap);
    if units < MIN_LEASE {
        0
    } else {
        units
    }
}

impl Lessor {
    pub fn new(
        threshold: u64,
        local: Arc<Local>,
        replicator: Arc<Replicator>,
        stats: Arc<Stats>,
    ) -> Self {
        Lessor {
            hot: HotKeys::new(threshold),
            local,
            replicator,
            stats,
        }
    }

    /// A lease of `rule`'s `key` for gateway `from` after a check left
    /// `remaining` at `now` (the limiter's clock): counted as spent here
    /// before it is offered. None when the key is not hot, the rule is not
    /// leased, or too little is left.
    pub fn offer(
        &self,
        rule: &Rule,
        key: &str,
        from: &str,
        remaining: u64,
        now: Nanos,
    ) -> Option<Lease> {
        if !leased(rule) {
            return None;
        }
        let heat = self.hot.heat(&rule.name, key, from, now)?;
        let ttl = term(rule, now)?;
        let units = size(heat.from_gateway, heat.gateways, remaining);
        if units == 0 {
            return None;
        }
        let d = match self.local.consume(&rule.name, key, units) {
            Consumed::Decided(Ok(d)) if d.allowed => d,
            _ => return None,
        };
        self.replicator.mark(&rule.name, key, d.at);
        bump(&self.stats.leases_granted, 1);
        bump(&self.stats.lease_units_granted, units);
        Some(Lease {
            units,
            ttl_ns: ttl,
            at: d.at,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_the_gateways_rate_for_a_term_capped_by_half_the_remaining_share() {
        assert_eq!(size(500, 2, 100_000), 500, "its rate for one second");
        assert_eq!(
            size(500, 2, 1_000),
            250,
            "a quarter of what is left, two gateways"
        );
        assert_eq!(size(500, 5, 1_000), 100);
        assert_eq!(size(500, 5, 30), 0, "three each is not worth a lease");
        assert_eq!(size(2, 1, 1_000), 0, "a gateway sending 2/s gets none");
    }

    #[test]
    fn a_windowed_lease_ends_with_its_window() {
        let rule = weir_core::RuleSet::from_toml(
            "[[rule]]\nname = \"r\"\nalgorithm = \"fixed_window\"\nlimit = 10\nwindow = \"10s\"\n",
        )
        .unwrap()
        .get("r")
        .unwrap()
        .1
        .clone();
        let s = 1_000_000_000;
        assert_eq!(
            term(&rule, 3 * s),
            Some(s),
            "a whole term inside the window"
        );
        assert_eq!(
            term(&rule, 9 * s + s / 2),
            Some(s / 2),
            "cut at the window's end"
        );
        assert_eq!(term(&rule, 10 * s - 1), None, "too close to the end");
    }
}
