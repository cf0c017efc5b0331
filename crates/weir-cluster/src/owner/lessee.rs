//! A gateway using its leases: deciding hot keys from them, asking for the next one half way through, and giving back what a term left unused.

use std::sync::Arc;

use weir_core::{Nanos, Rule};
use weir_proto::weir::v1::Lease;

use super::lease::leased;
use super::leased::{Unused, Used};
use super::peers::Reply;
use super::remote::Remote;
use crate::stats::bump;
use crate::topology::membership::NodeIdentity;
use crate::wire;

impl Remote {
    /// Decides `cost` of a hot key from a lease its owner granted; None
    /// when no lease covers it. Starts the next lease in the background
    /// when this one is half used. A rule that is not leased costs no
    /// clock read and no look-up.
    pub fn from_lease(
        self: &Arc<Self>,
        rule: &Arc<Rule>,
        hash_part: &str,
        cost: u64,
        owner: &NodeIdentity,
    ) -> Option<weir_core::Decision> {
        if !leased(rule) {
            return None;
        }
        let now = self.now();
        let taken = self.leases.take(rule, hash_part, cost, now)?;
        bump(&self.stats.lease_decisions, 1);
        if let Some(used) = taken.renew {
            bump(&self.stats.lease_renewals, 1);
            let (me, rule, key, owner) = (
                self.clone(),
                rule.clone(),
                hash_part.to_string(),
                owner.clone(),
            );
            tokio::spawn(async move { me.renew(&rule, &key, &owner, used).await });
        }
        Some(taken.decision)
    }

    async fn renew(&self, rule: &Arc<Rule>, hash_part: &str, owner: &NodeIdentity, used: Used) {
        let sent = self.now();
        self.stats.forwarded(rule.label());
        let op = wire::lease(&rule.name, hash_part, used.units, used.checks);
        match self.peers.decide(owner, op, self.deadline).await {
            Reply::Answered(mut result) => match result.lease.take() {
                Some(lease) => self.take_lease(&rule.name, hash_part, &owner.id, &lease, sent),
                None => self.leases.renewal_refused(&rule.name, hash_part),
            },
            _ => self.leases.renewal_refused(&rule.name, hash_part),
        }
    }

    /// Holds a lease `owner` granted for an op sent at `sent`.
    pub(super) fn take_lease(
        &self,
        rule: &Arc<str>,
        hash_part: &str,
        owner: &str,
        lease: &Lease,
        sent: Nanos,
    ) {
        let now = self.now();
        if let Some(unused) = self.leases.grant(rule, hash_part, owner, lease, sent, now) {
            self.give_back(unused);
        }
    }

    /// Gives back what leases whose term ended left unused.
    pub fn return_ended_leases(&self) {
        for unused in self.leases.ended(self.now()) {
            self.give_back(unused);
        }
    }

    /// Refunds unused leased units to the key's owner now (the one that
    /// lent them, unless the ring moved the key and its count since).
    fn give_back(&self, u: Unused) {
        bump(&self.stats.lease_units_returned, u.units);
        let Some(owner) = self.routing.routing_ring().owner(&u.hash_part).cloned() else {
            return;
        };
        let op = wire::refund(&u.rule, &u.hash_part, u.units, u.at);
        if owner.id == self.routing.me() {
            self.limiter().refund(&u.rule, &u.hash_part, u.at, u.units);
            self.replicator.mark(&u.rule, &u.hash_part, self.now());
        } else {
            self.peers.send(&owner, op);
        }
    }
}
