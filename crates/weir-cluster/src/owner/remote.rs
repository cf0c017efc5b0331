//! One limit decided away from this node: at its owner, at the owner's replica holder while the owner is lost, or here without either.
//!
//! - The owner answers in time: its decision, and what it had left is
//!   remembered for the fallback.
//! - The owner is slow (no answer within the deadline) but not lost: the
//!   fallback decides that one check (`local` refuses it for now). The op
//!   carries an expiry past which no node counts it (`peers::expiry`), and
//!   an answer decided before it is reconciled: what the owner admitted and
//!   this gateway refused is refunded there, so the owner counts only what
//!   was admitted.
//! - The owner is lost (its breaker is open: misses in a row, a refused
//!   connection, SWIM suspicion): the replica holder decides on its copy of
//!   the owner's counts. Only when it is unreachable too does this gateway
//!   decide alone, from its share of what it last heard; what it admits is
//!   owed to the key's owner and charged once it answers again.

use std::sync::Arc;
use std::time::Duration;

use weir_core::{CheckError, Decision, Limiter, Nanos, Rule};
use weir_proto::weir::v1::OpResult;

use super::answered::Answered;
use super::breaker::Breakers;
use super::debts::{Charge, Debts};
use super::fallback::{Fallback, Substitute};
use super::lease::Lessor;
use super::leased::Leases;
use super::local::{Consumed, Local};
use super::moves::Moves;
use super::peers::{expiry, LateAnswer, PeerFailure, Peers, Reply, HEARD_FOR, LATE_WINDOW};
use super::refunds::Refunds;
use super::replica::{Admitted, Replicas, StandIn};
use super::replicate::Replicator;
use crate::stats::{bump, Stats};
use crate::topology::membership::NodeIdentity;
use crate::topology::ring::Ring;
use crate::topology::routing::Routing;
use crate::wire::{self, Answer};

/// Where one limit was decided, so a refund goes back to the same place.
#[derive(Debug, Clone)]
pub enum Via {
    Local,
    Owner(NodeIdentity),
    /// A replica holder (None: this node) standing in for `owner`.
    Replica {
        holder: Option<NodeIdentity>,
        owner: String,
    },
    Substitute(Substitute),
    /// This gateway, from a lease its owner granted.
    Lease,
    /// This gateway alone against L/N: a `hot = "local"` rule.
    Tier,
}

pub struct Remote {
    pub local: Arc<Local>,
    pub routing: Arc<Routing>,
    pub peers: Arc<dyn Peers>,
    pub stats: Arc<Stats>,
    pub deadline: Duration,
    pub breakers: Arc<Breakers>,
    pub fallback: Fallback,
    pub debts: Arc<Debts>,
    pub replicas: Arc<Replicas>,
    pub replicator: Arc<Replicator>,
    /// Leases this gateway holds for hot keys of other owners.
    pub leases: Arc<Leases>,
    /// Hot keys this node owns, and the leases it grants on them.
    pub lessor: Arc<Lessor>,
    /// What each owner admitted for this gateway lately, for its keys' new
    /// owners should it die.
    pub answered: Arc<Answered>,
    /// The ring changes that took keys from this node.
    pub moves: Arc<Moves>,
}

/// Who to send an op to: a node, and the owner it stands in for if any.
struct Target<'a> {
    node: &'a NodeIdentity,
    stand_in_for: Option<&'a str>,
}

impl Remote {
    pub(super) fn limiter(&self) -> &Limiter {
        self.local.limiter()
    }

    pub(super) fn now(&self) -> Nanos {
        self.limiter().now()
    }

    fn refunds(&self) -> Refunds {
        Refunds {
            peers: self.peers.clone(),
            routing: self.routing.clone(),
            local: self.local.clone(),
            replicator: self.replicator.clone(),
        }
    }

    pub fn me(&self) -> &str {
        self.routing.me()
    }

    pub fn breakers(&self) -> &Breakers {
        &self.breakers
    }

    pub fn fallback(&self) -> &Fallback {
        &self.fallback
    }

    /// Decides one limit whose owner is another node.
    pub async fn decide(
        &self,
        rule: &Arc<Rule>,
        hash_part: &str,
        cost: u64,
        owner: NodeIdentity,
        carried: bool,
    ) -> Result<(Decision, Via), CheckError> {
        let now = self.now();
        if !self.breakers.admit(&owner.id, now) {
            return self
                .without_owner(rule, hash_part, cost, &owner, carried)
                .await;
        }
        let target = Target {
            node: &owner,
            stand_in_for: None,
        };
        match self
            .ask(&target, rule, hash_part, cost, carried, now)
            .await?
        {
            Some(d) => Ok((d, Via::Owner(owner))),
            // It left the ring while the op was on its way (its port
            // closes once no member lists it): the key has a successor.
            None if !self.routing.is_member(&owner.id) => {
                self.successor(rule, hash_part, cost, &owner, carried).await
            }
            None => {
                self.without_owner(rule, hash_part, cost, &owner, carried)
                    .await
            }
        }
    }

    /// Decides a limit whose owner left the ring while the op was on its
    /// way at the key's owner on the ring now, this node or a peer, as any
    /// limit is. Standing in for the one that left decided it on a copy of
    /// the successor's counts, which lag them, or here on counts the
    /// successor never sees.
    async fn successor(
        &self,
        rule: &Arc<Rule>,
        hash_part: &str,
        cost: u64,
        gone: &NodeIdentity,
        carried: bool,
    ) -> Result<(Decision, Via), CheckError> {
        if let Some(next) = self.routing.remote_owner(hash_part) {
            return Box::pin(self.decide(rule, hash_part, cost, next, carried)).await;
        }
        match self.decide_here(rule, hash_part, cost, carried) {
            Some(decided) => decided,
            None => {
                self.without_owner(rule, hash_part, cost, gone, carried)
                    .await
            }
        }
    }

    /// Asks `target` for a decision, sending it at `now`. Some(decision)
    /// from it or, when it is only slow, from the fallback; None when it
    /// is lost.
    async fn ask(
        &self,
        target: &Target<'_>,
        rule: &Arc<Rule>,
        hash_part: &str,
        cost: u64,
        carried: bool,
        now: Nanos,
    ) -> Result<Option<Decision>, CheckError> {
        let id = &target.node.id;
        let expires = expiry(now, self.deadline);
        let mut op = wire::expiring(wire::consume(rule, hash_part, cost, carried), expires);
        if let Some(owner) = target.stand_in_for {
            op = wire::stand_in(op, owner);
        }
        // Ends when this returns: the answer came, or the wait ran out.
        let _span = crate::trace::forward(&mut op, id);
        let slow = |late: Option<LateAnswer>| self.slow(target, rule, hash_part, cost, late);
        self.stats.forwarded(rule.label());
        match self.peers.decide(target.node, op, self.deadline).await {
            Reply::Answered(mut result) => {
                self.breakers.answered(id, now);
                if let (Some(lease), None) = (result.lease.take(), target.stand_in_for) {
                    self.take_lease(&rule.name, hash_part, &target.node.id, &lease, now);
                }
                match wire::answer(result, rule, cost) {
                    Answer::Decided(d) => {
                        self.fallback.learn(&rule.name, hash_part, &d);
                        if d.allowed && target.stand_in_for.is_none() && !carried {
                            self.answered
                                .record(id, &rule.name, hash_part, cost, d.at, self.now());
                        }
                        Ok(Some(d))
                    }
                    Answer::Refused(e) => Err(e),
                    // Its rules lag behind ours, or it is leaving.
                    Answer::Undecided(why) => {
                        tracing::debug!(node = %id, why, "could not decide");
                        Ok(None)
                    }
                    // A joiner that has not heard of its cluster: alive,
                    // and ready in a moment. Taken for lost, its holder
                    // stood in, on what it kept after handing it the key.
                    // Or the op expired on its way (it waited out the
                    // fence somewhere, or the clocks disagree): not
                    // counted, and as late as an owner that did not answer.
                    Answer::NotReady | Answer::Expired => slow(None).map(Some),
                }
            }
            Reply::Late(late) => {
                self.breakers.missed(id, now);
                slow(Some(late)).map(Some)
            }
            Reply::Failed(PeerFailure::Unreachable(why) | PeerFailure::Refused(why)) => {
                // Only a member that is still on the ring is "lost": one
                // that left has a successor for its keys already.
                if self.routing.is_member(id) {
                    self.breakers.lost(id, now, &why);
                }
                Ok(None)
            }
            // Only a handoff is turned away so; a leaving member answers
            // checks until its counters are with their new owners.
            Reply::Failed(PeerFailure::Leaving) => Ok(None),
            // Never left this gateway, or left and failed with no answer:
            // slow either way, nothing to reconcile.
            Reply::Failed(
                PeerFailure::Queued(_) | PeerFailure::Overloaded | PeerFailure::Timeout(_),
            ) => {
                self.breakers.missed(id, now);
                slow(None).map(Some)
            }
        }
    }

    /// A limit whose target did not answer in time. Its late answer, if it
    /// comes, is reconciled with what was decided here: an admission there
    /// that was refused here is refunded there. An op read after its
    /// expiry is answered EXPIRED and counted nowhere, so an answer that
    /// misses the late window can only be one decided in time and then
    /// held on its way back (`peers::expiry`).
    fn slow(
        &self,
        target: &Target<'_>,
        rule: &Arc<Rule>,
        hash_part: &str,
        cost: u64,
        late: Option<LateAnswer>,
    ) -> Result<Decision, CheckError> {
        bump(&self.stats.slow_decisions, 1);
        let decided = self
            .fallback
            .slow(rule, cost, &target.node.id, self.deadline);
        let refused_here = !matches!(decided, Ok((d, _)) if d.allowed);
        if let Some(late) = late {
            let (refunds, stats) = (self.refunds(), self.stats.clone());
            let breakers = self.breakers.clone();
            let node = target.node.clone();
            let stand_in_for = target.stand_in_for.map(str::to_string);
            let key = hash_part.to_string();
            let rule = rule.clone();
            // Past this, the ring may have moved the key on without the
            // admission: its refund goes only where it was counted.
            let heard_by = tokio::time::Instant::now() + LATE_WINDOW;
            self.peers.on_late(
                late,
                Box::new(move |result: OpResult| {
                    // A late answer is still an answer: the owner is slow,
                    // not lost, and its run of misses ends here.
                    breakers.answered(&node.id, refunds.local.limiter().now());
                    let Answer::Decided(d) = wire::answer(result, &rule, cost) else {
                        return;
                    };
                    if !(d.allowed && refused_here) {
                        return;
                    }
                    bump(&stats.late_refunds, 1);
                    match &stand_in_for {
                        Some(owner) => {
                            let op = wire::refund(&rule.name, &key, cost, d.at);
                            refunds.peers.send(&node, wire::stand_in(op, owner));
                        }
                        // Nobody waits on it: it may queue behind the
                        // slow owner's other calls for as long as a late
                        // answer is heard.
                        None => {
                            let in_window = tokio::time::Instant::now() <= heard_by;
                            tokio::spawn(async move {
                                let counter = (&rule.name, key.as_str());
                                let wait = HEARD_FOR;
                                if in_window {
                                    refunds.give_back(&node, counter, cost, d.at, wait).await;
                                } else {
                                    refunds
                                        .give_back_where_counted(&node, counter, cost, d.at, wait)
                                        .await;
                                }
                            });
                        }
                    }
                }),
            );
        }
        decided.map(|(d, _)| d)
    }

    /// The owner is lost: its replica holder stands in, else the fallback.
    async fn without_owner(
        &self,
        rule: &Arc<Rule>,
        hash_part: &str,
        cost: u64,
        owner: &NodeIdentity,
        carried: bool,
    ) -> Result<(Decision, Via), CheckError> {
        // Carried limits have no copies: only their owner counts them.
        let holder = (!carried).then(|| {
            let ring = self.routing.routing_ring();
            // Before anything is decided on a copy, the copy learns what
            // the owner admitted for this gateway since it was taken. With
            // one copy, the key's next owner starts one from them, for the
            // ring to promote if it drops the owner: reported only then,
            // seconds later, they had aged out (`answered.rs`) and were
            // granted again.
            self.report_lost(&owner.id, &ring);
            ring.replica_of(hash_part)
                .filter(|h| self.replicator.is_on() && h.id != owner.id)
                .cloned()
        });
        if let Some(holder) = holder.flatten() {
            if holder.id == self.routing.me() {
                if let Some(decided) = self.stand_in_here(rule, hash_part, cost, owner)? {
                    return Ok(decided);
                }
            }
            let now = self.now();
            if self.breakers.admit(&holder.id, now) {
                let target = Target {
                    node: &holder,
                    stand_in_for: Some(&owner.id),
                };
                let asked = self.ask(&target, rule, hash_part, cost, carried, now);
                if let Some(d) = asked.await? {
                    bump(&self.stats.replica_decisions, 1);
                    let via = Via::Replica {
                        holder: Some(holder.clone()),
                        owner: owner.id.clone(),
                    };
                    return Ok((d, via));
                }
            }
        }
        bump(&self.stats.fallback_decisions, 1);
        let (d, how) = self
            .fallback
            .without_owner(rule, hash_part, cost, carried, &owner.id)?;
        Ok((d, Via::Substitute(how)))
    }

    /// This node is the key's replica holder: it stands in for `owner` on
    /// its copy, or with none held (settled into its counters, or never
    /// sent), decides on its counters. None when it is leaving.
    fn stand_in_here(
        &self,
        rule: &Arc<Rule>,
        hash_part: &str,
        cost: u64,
        owner: &NodeIdentity,
    ) -> Result<Option<(Decision, Via)>, CheckError> {
        let here = || self.decide_here(rule, hash_part, cost, false);
        match self.replicas.stand_in(&rule.name, hash_part, cost, here)? {
            StandIn::Copy(d) => {
                bump(&self.stats.replica_decisions, 1);
                let via = Via::Replica {
                    holder: None,
                    owner: owner.id.clone(),
                };
                Ok(Some((d, via)))
            }
            StandIn::Here(decided) => decided.transpose(),
        }
    }

    /// Decides a limit on this node's counters, marking an admission for
    /// its copy; None when this node is leaving.
    pub(super) fn decide_here(
        &self,
        rule: &Arc<Rule>,
        hash_part: &str,
        cost: u64,
        carried: bool,
    ) -> Option<Result<(Decision, Via), CheckError>> {
        let consumed = if carried {
            self.local.consume_carried(rule, hash_part, cost)
        } else {
            self.local.consume(&rule.name, hash_part, cost)
        };
        let Consumed::Decided(d) = consumed else {
            return None;
        };
        Some(d.map(|d| {
            // Carried limits have no copies.
            if d.allowed && !carried {
                self.replicator.mark(&rule.name, hash_part, d.at);
            }
            (d, Via::Local)
        }))
    }

    /// Gives back what one admitted limit consumed. A remote refund is
    /// awaited up to the owner deadline; one that does not arrive in time
    /// leaves the budget spent, which can only under-admit.
    pub async fn refund(
        &self,
        rule: &Arc<Rule>,
        hash_part: &str,
        cost: u64,
        d: &Decision,
        via: &Via,
    ) {
        let name = &rule.name;
        match via {
            Via::Local => {
                self.limiter().refund(name, hash_part, d.at, cost);
                self.replicator.mark(name, hash_part, self.now());
            }
            Via::Owner(owner) => {
                let counter = (name, hash_part);
                let refunds = self.refunds();
                refunds
                    .give_back(owner, counter, cost, d.at, self.deadline)
                    .await;
            }
            Via::Replica { holder: None, .. } => {
                let main = self.limiter();
                self.replicas.refund(name, hash_part, d.at, cost, main)
            }
            Via::Replica {
                holder: Some(holder),
                owner,
            } => {
                let op = wire::stand_in(wire::refund(name, hash_part, cost, d.at), owner);
                let _ = self.peers.decide(holder, op, self.deadline).await;
            }
            Via::Substitute(how) => self.fallback.refund(*how, name, hash_part, d.at, cost),
            Via::Lease => self.leases.give_back(name, hash_part, cost),
            Via::Tier => self.fallback.tier_refund(name, hash_part, d.at, cost),
        }
    }

    /// `lost` stopped answering (its breaker opened) or left the ring
    /// without handing its counters over: what it admitted for this
    /// gateway lately goes to the holders of its keys' copies (their new
    /// owners, once the ring dropped it), which add what their copy was
    /// taken before, or start the copy with it when none had arrived.
    /// Safe for an owner that is only cut off: a copy it
    /// takes later holds these admissions and replaces them.
    pub fn report_lost(&self, lost: &str, ring: &Ring) {
        let now = self.now();
        for a in self.answered.take(lost, now) {
            let target = match ring.owner(&a.hash_part) {
                Some(o) if o.id == lost => ring.replica_of(&a.hash_part).filter(|h| h.id != lost),
                other => other,
            };
            let Some(owner) = target else {
                continue;
            };
            let dead = lost;
            bump(&self.stats.admissions_reported, 1);
            if owner.id == self.routing.me() {
                let admitted = Admitted {
                    owner: dead,
                    rule: &a.rule,
                    hash_part: &a.hash_part,
                    cost: a.cost,
                    at: a.at,
                };
                let (limiter, here) = (self.limiter(), self.routing.ring());
                if self
                    .replicas
                    .admitted_by(&admitted, limiter, &here, self.routing.me())
                {
                    bump(&self.stats.admissions_recovered, 1);
                    self.replicator.mark(&a.rule, &a.hash_part, now);
                }
            } else {
                let op = wire::admitted(&a.rule, &a.hash_part, a.cost, a.at, dead);
                self.peers.send(owner, op);
            }
        }
    }

    /// An admission decided here without the owner, in a check that was
    /// admitted whole: owed to the key's owner.
    pub fn owe(&self, rule: &Rule, hash_part: &str, cost: u64, via: &Via) {
        let Via::Substitute(how) = via else {
            return;
        };
        if !how.owes() {
            return;
        }
        let window_ms = u64::try_from(rule.window.as_millis()).unwrap_or(u64::MAX);
        let charge = Charge {
            rule: rule.name.clone(),
            hash_part: hash_part.to_string(),
            cost,
            until_ms: (self.now() / weir_core::NANOS_PER_MS).saturating_add(window_ms),
        };
        if self.debts.owe(charge) {
            bump(&self.stats.charges_owed, 1);
        } else {
            bump(&self.stats.charges_dropped, 1);
        }
    }

    /// Charges what this node owes: admissions its fallback decided, to the
    /// key's owner now on the ring (itself, once a dead owner's keys came
    /// here), and stand-in admissions its replica copies hold, to the owner
    /// they stood in for. An owner whose breaker is open is charged only
    /// when its probe is due, the charge being the probe.
    pub async fn pay_debts(&self) {
        let now = self.now();
        let ring = self.routing.routing_ring();
        let me = self.routing.me();
        let member = |id: &str| ring.members().iter().find(|m| m.id == id).cloned();
        let (paid, owed) = {
            // One admit per owner: it lets one probe through per interval.
            let admitted = std::cell::RefCell::new(weir_core::determinism::HashMap::default());
            let payable = |id: &str| {
                id == me
                    || *admitted
                        .borrow_mut()
                        .entry(id.to_string())
                        .or_insert_with(|| self.breakers.admit(id, now))
            };
            let paid = self
                .debts
                .take_payable(now, |c| ring.owner_id(&c.hash_part).is_some_and(&payable));
            let owed = self.replicas.owed(|id| member(id).is_some() && payable(id));
            (paid, owed)
        };
        let debts = paid.into_iter().filter_map(|c| {
            let owner = ring.owner(&c.hash_part)?.clone();
            Some(async move {
                let ok = self.charge(&owner, &c).await.is_some();
                if !ok {
                    self.debts.owe(c);
                }
            })
        });
        let copies = owed.into_iter().filter_map(|o| {
            let owner = member(&o.owner)?;
            Some(async move {
                let charged = Charge {
                    rule: o.rule.clone(),
                    hash_part: o.hash_part.clone(),
                    cost: o.cost,
                    until_ms: u64::MAX,
                };
                match self.charge(&owner, &charged).await {
                    Some(applied_at) => self.replicas.charged(&o, applied_at),
                    // A late or lost answer leaves it unknown whether the
                    // charge landed: owed again, so it may land twice (the
                    // safe way).
                    None => self.replicas.unsent(&o),
                }
            })
        });
        futures::future::join_all(debts).await;
        futures::future::join_all(copies).await;
    }

    /// Charges `c` to `owner`; the owner's clock when it applied it, or
    /// None when it did not answer.
    async fn charge(&self, owner: &NodeIdentity, c: &Charge) -> Option<Nanos> {
        let now = self.now();
        if owner.id == self.routing.me() {
            if !self.local.charge(&c.rule, &c.hash_part, c.cost) {
                return None;
            }
            self.replicator.mark(&c.rule, &c.hash_part, now);
            bump(&self.stats.charges_paid, 1);
            return Some(now);
        }
        let op = wire::charge(&c.rule, &c.hash_part, c.cost);
        match self.peers.decide(owner, op, self.deadline).await {
            Reply::Answered(result) => {
                self.breakers.answered(&owner.id, now);
                let applied = wire::answer_charge(result)?;
                bump(&self.stats.charges_paid, 1);
                Some(applied)
            }
            // Only a member still on the ring is lost: the ring may have
            // dropped the owner while the charge was on its way.
            Reply::Failed(PeerFailure::Unreachable(why)) => {
                if self.routing.is_member(&owner.id) {
                    self.breakers.lost(&owner.id, now, &why);
                }
                None
            }
            _ => {
                if self.routing.is_member(&owner.id) {
                    self.breakers.missed(&owner.id, now);
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests;
