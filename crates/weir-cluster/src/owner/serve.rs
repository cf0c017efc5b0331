//! The owner side of the owner protocol: deciding the ops peers forward for the keys this node owns.

use std::sync::Arc;
use std::time::Duration;

use weir_core::{CheckError, Decision, InputField, Nanos, Rule, RuleSet};
use weir_proto::weir::v1::{CounterOp, DecideRequest, DecideResponse, OpKind, OpResult};

use super::breaker::Breakers;
use super::counter_admin;
use super::deny_cache::DenyCache;
use super::lease::Lessor;
use super::local::{Consumed, Forwarding, Local};
use super::moves::{Move, Moves};
use super::owned::previous_owner;
use super::peers::{expired, Peers, Reply, LATE_WINDOW};
use super::replica::{Admitted, Replicas, StandIn};
use super::replicate::Replicator;
use crate::stats::{bump, Stats};
use crate::topology::membership::NodeIdentity;
use crate::topology::routing::Routing;
use crate::topology::rules_sync::RulesHints;
use crate::wire;

/// How long an op a joiner asked about waits for the landing of the
/// handoff that took its key, when its count is not whole here
/// ([`OwnerService::landing_wait`]): half the asker's deadline (the late
/// window), so the answer, the op decided here on the count still held
/// if the handoff has not landed, reaches the asker in time. Waited the
/// whole late window, it came after the asker's deadline, and the asker
/// stopped asking this node and decided the key on nothing (a handoff of
/// half a million counters takes seconds).
const ASKED_LANDING_WAIT: Duration = Duration::from_millis(LATE_WINDOW.as_millis() as u64 / 2);

/// Where an op goes instead of being decided here.
enum Onward {
    /// To the key's owner on this node's ring, which the sender's lacks:
    /// at once (the key's copy is here), or once the handoff of the ring
    /// change that took the key from here has landed.
    Owner(Option<Arc<Move>>),
    /// Back to the member that owned the key before this node joined,
    /// whose handoff has not come ([`crate::topology::arrivals`]).
    Back,
}

pub struct OwnerService {
    pub local: Arc<Local>,
    pub routing: Arc<Routing>,
    pub peers: Arc<dyn Peers>,
    pub hints: Arc<RulesHints>,
    pub stats: Arc<Stats>,
    pub deadline: Duration,
    /// Copies of other owners' counters, decided on when standing in.
    pub replicas: Arc<Replicas>,
    /// Changes to counters owned here, to be copied to their holders.
    pub replicator: Arc<Replicator>,
    /// Hot keys seen here, and the leases granted on them.
    pub lessor: Arc<Lessor>,
    /// What this node knows of each owner's health (its gateway's).
    pub breakers: Arc<Breakers>,
    /// The ring changes that took keys from this node.
    pub moves: Arc<Moves>,
    /// The denials this node's gateway caches (`OpKind::Forget`).
    pub deny: Arc<DenyCache>,
}

impl OwnerService {
    /// Answers one Decide call: `results[i]` answers `ops[i]`.
    pub async fn decide(&self, req: DecideRequest) -> DecideResponse {
        // One snapshot of the rules and the ring for the whole call, not one
        // per op: each is an Arc whose count every core's calls share.
        let rules = self.local.limiter().rules();
        let mine = rules.version();
        let mut results = Vec::with_capacity(req.ops.len());
        let mut moved = Vec::new();
        let mut sent_on = Vec::new();
        let from: Arc<str> = Arc::from(req.from_node.as_str());
        let me = self.routing.me();
        let mut landing = Vec::new();
        // The ring is read, and the ops decided on it, inside one in-flight
        // mark: a ring change's sweep copies the counters only once the
        // ops routed here by the ring before it have decided
        // (`Local::quiesce`). What waits below is decided after that, and
        // goes with the next stray sweep if the key moved meanwhile.
        self.local.guarded(|_| {
            let ring = self.routing.ring();
            // Alone on its ring, yet a member sends it ops: it has not heard of
            // the cluster it joins yet (its seed's answer has not come). A
            // gateway's ops, decided as the keys' only member, were admitted on
            // nothing while their owners still counted them. One sent on by a
            // key's old owner comes after that owner's handoff to this node:
            // the count is here, and told "not the owner", the old owner
            // decided it on what it kept (nothing).
            let alone = self.routing.joining() && req.from_node != self.routing.me();
            if req.rules_version > mine {
                if let Some(m) = ring.members().iter().find(|m| m.id == req.from_node) {
                    self.hints.hint(m, req.rules_version);
                }
            }
            for (i, op) in req.ops.iter().enumerate() {
                // About this node's gateway, not a counter: wherever the key
                // is owned and whatever this node's view.
                if op.kind() == OpKind::Forget {
                    let now = self.local.limiter().now();
                    self.deny
                        .refunded(&Arc::from(op.rule.as_str()), &op.key, now);
                    results.push(Some(wire::refunded()));
                    continue;
                }
                if alone && !op.sent_on {
                    results.push(Some(wire::not_ready(
                        "this node has not heard of its cluster yet",
                    )));
                    continue;
                }
                // The one ring lookup per op: the key's owner, when another
                // member (the sender's ring differs from this node's).
                let other = ring.owner(&op.key).filter(|o| o.id != me);
                if let Some(owner) = other.filter(|_| op.asked_back && !self.local.is_leaving()) {
                    // Asked as the key's previous owner by a member whose
                    // view lacks the key's owner on this one (it learns the
                    // members one by one): the owner decides, on the count
                    // it holds. Told "not the previous owner", the asker
                    // decided on nothing.
                    if owner.id != *req.from_node && !op.sent_on && self.breakers.trusted(&owner.id)
                    {
                        sent_on.push((i, owner.clone(), Onward::Owner(None)));
                        results.push(None);
                        continue;
                    }
                    // Asked by a new process of the key's owner (restarted
                    // under its id) that this node's ring has not taken in:
                    // the old process's copy of the key is here, and the op is
                    // decided on it; the ring taking the new process in hands
                    // it the copy, this admission with it. Told to decide the
                    // op itself, the new process admitted on nothing.
                    if Self::restarted(op, owner, &req.from_node) && self.holds_copy(op, owner) {
                        self.replicas.supersede(&op.rule, &op.key);
                        let decided = self.decide_op(op, &from, &rules, false, Some(owner));
                        results.push(decided.or_else(|| Some(wire::not_owner("leaving"))));
                        continue;
                    }
                    // Asked by a joiner about a key this node's ring gives it.
                    // The count is here until the handoff of the ring change
                    // that took the key there has landed, then the joiner
                    // holds it; if no change took it from here, this node
                    // holds nothing the joiner lacks.
                    // The ring change that took the asker's process in hands
                    // it the copies of its old process (a restart) before its
                    // sweep lands: answered sooner, the asker decided on what
                    // it held without them. One that sweep kept is decided
                    // on here until a later sweep delivers it.
                    let took = self.moves.took(&op.key, &owner.id);
                    let taking = self.moves.taking_in(&owner.id, op.asker_boot);
                    if took.is_none() && taking.is_none() {
                        results.push(Some(wire::not_owner("not the key's previous owner")));
                    } else {
                        landing.push((i, took, taking));
                        results.push(None);
                    }
                    continue;
                }
                // Stood in for by a gateway that takes the key's owner for
                // lost, while this node hears the owner and holds no copy
                // of its count: the copy went to a new process of the owner
                // (restarted under its id), which decides the key on it.
                // Decided here too, on what this node's counters have of
                // the key, the key had two counts.
                if let Some(owner) = other.filter(|o| self.back_from_loss(op, o)) {
                    sent_on.push((i, owner.clone(), Onward::Owner(None)));
                    results.push(None);
                    continue;
                }
                let elsewhere = other.filter(|_| Self::sent_as_owner(op));
                let copied = elsewhere.filter(|o| self.holds_copy(op, o));
                if let Some((owner, taken)) = self.goes_to_owner(op, elsewhere, copied.is_some()) {
                    sent_on.push((i, owner.clone(), Onward::Owner(taken)));
                    results.push(None);
                    continue;
                }
                // A key this node owns, whose count may still be on its way.
                let previous = other
                    .is_none()
                    .then(|| previous_owner(&self.routing, &self.breakers, &ring, &op.key))
                    .flatten();
                if let Some(previous) = previous.filter(|_| Self::asks_back(op)) {
                    sent_on.push((i, previous.clone(), Onward::Back));
                    results.push(None);
                    continue;
                }
                // A lease is granted from the key's count: none while that
                // may still be on its way.
                let owned = other.is_none() && !(op.kind() == OpKind::Lease && previous.is_some());
                let result = self.decide_op(op, &from, &rules, owned, copied);
                match result {
                    // Leaving, and sent on by a holder that has a copy to
                    // decide on: told at once, not after the handoff (by
                    // then the holder has stood in, and it would be decided
                    // twice). A refund is sent on with nobody waiting for
                    // the answer: it goes to the new owner with the rest.
                    None if op.sent_on && op.kind() == OpKind::Consume => {
                        results.push(Some(wire::not_owner("this node is leaving")));
                    }
                    None => {
                        moved.push(i);
                        results.push(None);
                    }
                    Some(_) => results.push(result),
                }
            }
        });
        if !sent_on.is_empty() {
            let sends = sent_on
                .iter()
                .map(|(i, to, how)| self.send_on(to, &req.ops[*i], how));
            let answers = futures::future::join_all(sends).await;
            for ((i, to, how), answer) in sent_on.iter().zip(answers) {
                // The owner made no decision (unreachable, leaving, or
                // silent for the late window), or the key's count never
                // left: stood in for on the copy, or decided on this
                // node's count. Asked back, the previous owner did not
                // hold the count: decided here.
                let op = &req.ops[*i];
                results[*i] = answer.or_else(|| match how {
                    Onward::Owner(taken) => {
                        let copied = taken.is_none().then_some(to);
                        let decided = self.decide_op(op, &from, &rules, false, copied);
                        // Named once decided: a pass that reads the key
                        // before finds nothing spent yet, and forgets it.
                        if let Some(m) = taken {
                            m.decided_here(&op.rule, &op.key, op.carried.is_some());
                        }
                        decided
                    }
                    Onward::Back => self.decide_if_still_owned(op, &from, &rules),
                });
                if results[*i].is_none() {
                    moved.push(*i);
                }
            }
        }
        if !landing.is_empty() {
            let waits = landing.iter().map(|(i, took, taking)| {
                let op = &req.ops[*i];
                let wait = Self::landing_wait(op, &req.from_node, took, taking);
                Self::with_the_asker(op, took, taking, wait)
            });
            let handed = futures::future::join_all(waits).await;
            for ((i, took, taking), handed) in landing.iter().zip(handed) {
                // Handed over: the joiner decides on the count it holds.
                // Kept here: decided on it, and swept to the joiner later.
                // Not landed yet: decided on it, and what it spent goes to
                // the joiner before the landing.
                let op = &req.ops[*i];
                // A count decided here since the landing (stand-ins with no
                // copy to decide on, kept for the next sweep) is the key's
                // newest: the asker holds none of it.
                let counted_since =
                    op.carried.is_none() && self.local.limiter().holds(&op.rule, &op.key);
                results[*i] = if handed && !counted_since {
                    Some(wire::not_owner("the key's count was handed to the sender"))
                } else {
                    let decided = self.decide_op(op, &from, &rules, false, None);
                    for m in [took, taking].into_iter().flatten() {
                        m.decided_here(&op.rule, &op.key, op.carried.is_some());
                    }
                    decided
                };
                if results[*i].is_none() {
                    moved.push(*i);
                }
            }
        }
        if !moved.is_empty() {
            // Leaving: the ops wait until the counters are with their new
            // owners, then go there. Counted from now, so the leave does
            // not end before their answers are dealt with.
            let counted: Vec<_> = moved.iter().map(|_| self.local.forwarding()).collect();
            self.local.until_handed_over().await;
            let forwards = moved
                .iter()
                .zip(counted)
                .map(|(&i, counted)| self.forward(req.ops[i].clone(), counted));
            let answers = futures::future::join_all(forwards).await;
            for (&i, answer) in moved.iter().zip(answers) {
                results[i] = Some(answer);
            }
        }
        DecideResponse {
            results: results.into_iter().map(Option::unwrap_or_default).collect(),
            rules_version: mine,
        }
    }

    /// Whether this node asks `sender` about the keys `sender` would own
    /// without it (`previous_owner`): it waits for `sender`'s word that
    /// its sweep is over, and trusts it. Told with each handoff call's
    /// answer, so that the sender decides those keys as a gateway only
    /// while this node would ask it.
    pub fn asks(&self, sender: &str) -> bool {
        let waits = self
            .routing
            .arrivals()
            .awaited()
            .iter()
            .any(|a| a == sender);
        waits && self.breakers.trusted(sender)
    }

    /// Whether `op` was asked by a process of `owner`'s id other than the
    /// one this node's ring lists: `owner` restarted.
    fn restarted(op: &CounterOp, owner: &NodeIdentity, from: &str) -> bool {
        op.asker_boot != 0 && owner.id == from && owner.boot != op.asker_boot
    }

    /// Whether `op`, a consume standing in for `owner` (the key's owner on
    /// this node's ring), goes to `owner` instead: this node trusts it and
    /// holds no copy of the key from it to decide on.
    fn back_from_loss(&self, op: &CounterOp, owner: &NodeIdentity) -> bool {
        op.stand_in_for == *owner.id
            && !op.sent_on
            && op.kind() == OpKind::Consume
            && op.carried.is_none()
            && !self.replicas.owes(&op.rule, &op.key)
            && self.breakers.trusted(&owner.id)
    }

    /// Whether a gateway sent `op` here as the key's owner: a consume,
    /// refund or charge naming no owner it stands in for.
    fn sent_as_owner(op: &CounterOp) -> bool {
        op.stand_in_for.is_empty()
            && matches!(op.kind(), OpKind::Consume | OpKind::Refund | OpKind::Charge)
    }

    /// Whether `op`, for a key this node owns whose count may still be on
    /// its way, is asked of the key's previous owner: one sent here as the
    /// owner, not by a node that sent it on or was asked it already.
    fn asks_back(op: &CounterOp) -> bool {
        Self::sent_as_owner(op) && !op.sent_on && !op.asked_back
    }

    /// Whether this node holds a copy of the key of `op`, from `owner`, to
    /// decide it on. Never for a carried limit (not copied), nor for a
    /// charge: on a copy it reads as the owner's own admission, which the
    /// owner is never charged for, but a gateway charges what it admitted
    /// without the owner.
    fn holds_copy(&self, op: &CounterOp, owner: &NodeIdentity) -> bool {
        op.carried.is_none()
            && op.kind() != OpKind::Charge
            && self.replicas.holder_of(&op.rule, &op.key).as_deref() == Some(&*owner.id)
    }

    /// Whether an op sent here as the key's owner ([`Self::sent_as_owner`])
    /// for a key `elsewhere` owns on this node's ring goes to that owner
    /// rather than being decided here, and when: at once if this node holds
    /// the key's copy, or once the handoff of the ring change that took the
    /// key from here (the move returned, [`Moves::took`]) has landed.
    ///
    /// Only while this node trusts the owner (its breaker closed, SWIM not
    /// suspecting it). The gateway's ring may have dropped a dead owner
    /// first (SWIM would suspect it here too; the copy stands in), or not
    /// yet have taken in one that just joined, which holds the count. A
    /// joiner's keys are mostly its replica holder's old ones, so stood in
    /// for on the copy regardless, a key's checks were admitted twice
    /// while a join spread, up to twice its limit; decided on what the old
    /// owner kept after its handoff, one over in most joins. Not for an op
    /// sent on already (two nodes whose rings disagree would send it back
    /// and forth), nor while this node leaves (its ops wait for the
    /// leave's handoff, [`Self::forward`]).
    fn goes_to_owner<'r>(
        &self,
        op: &CounterOp,
        elsewhere: Option<&'r NodeIdentity>,
        copied: bool,
    ) -> Option<(&'r NodeIdentity, Option<Arc<Move>>)> {
        let owner = elsewhere.filter(|o| !op.sent_on && self.breakers.trusted(&o.id))?;
        if copied {
            return Some((owner, None));
        }
        if self.local.is_leaving() {
            return None;
        }
        Some((owner, Some(self.moves.took(&op.key, &owner.id)?)))
    }

    /// Sends `op` on to its owner, marked so it goes no further, or to the
    /// key's previous owner, marked as asked, as `how` says, and
    /// returns its decision, waited for as long as a late one may take
    /// (the gateway reconciles an answer later than its own deadline).
    /// None when it made none: its connection was refused, the op never
    /// left this node, the owner is leaving or not the previous one, or no
    /// answer came in that time (then the copy decides too, and its
    /// admission, charged to the owner later, is counted twice: never one
    /// over the limit). A refund sent on is not waited for. An op for a key a
    /// ring change `took` from here waits until its handoff has landed, so
    /// the owner decides it on the key's count; None if the count stayed
    /// here.
    async fn send_on(&self, to: &NodeIdentity, op: &CounterOp, how: &Onward) -> Option<OpResult> {
        if let Onward::Owner(Some(took)) = how {
            if !Self::handed(op, took).await {
                return None;
            }
        }
        let back = matches!(how, Onward::Back);
        if back {
            bump(&self.stats.asked_back, 1);
        }
        let op = CounterOp {
            sent_on: !back,
            asked_back: back,
            asker_boot: if back { self.routing.boot() } else { 0 },
            ..op.clone()
        };
        // Asked back, a refund is waited for: one the previous owner does
        // not take is applied here.
        if op.kind() == OpKind::Refund && !back {
            self.peers.send(to, op);
            return Some(wire::refunded());
        }
        match self.peers.decide(to, op, LATE_WINDOW).await {
            Reply::Answered(result) if !wire::is_not_owner(&result) => Some(result),
            Reply::Answered(_) => None,
            _ => {
                if back {
                    self.routing.arrivals().give_up(&to.id);
                }
                None
            }
        }
    }

    /// Whether the count of the key of an asked `op` is with the asker:
    /// the ring change that took the asker's process in (`taking`) and
    /// the one that `took` the key from here, if any, delivered it, their
    /// landing waited for `wait` at most. A restart moves no keys, but its
    /// sweep hands the new process the old one's copy: kept here, it is
    /// decided on here until a later sweep delivers it.
    async fn with_the_asker(
        op: &CounterOp,
        took: &Option<Arc<Move>>,
        taking: &Option<Arc<Move>>,
        wait: Duration,
    ) -> bool {
        let until = tokio::time::Instant::now() + wait;
        for m in [taking, took].into_iter().flatten() {
            if !Self::handed_by(op, m, until).await {
                return false;
            }
        }
        true
    }

    /// How long an asked `op` waits for the landing ([`Self::with_the_asker`]).
    /// Not at all when a ring change `took` its key from here, and the
    /// change `taking` the asker's process in, if any, took in a new member
    /// rather than restarting one: the key's count is whole in this node's
    /// counters until the handoff lands (none when the copy did not hold
    /// the key), so it is decided on at once, and the passes before the
    /// landing hand the asker what it spent. After a restart the count may
    /// be in a copy this node hands on, not its own to decide on; a carried
    /// limit's is handed on by no pass: [`ASKED_LANDING_WAIT`]. Waiting for
    /// every landing held the asker's call, and with it the call slots of
    /// every gateway sending the asker checks: on two shared cores, a join
    /// of a million counters at half load refused most checks of the
    /// joiner's keys for the seconds its handoff took.
    fn landing_wait(
        op: &CounterOp,
        asker: &str,
        took: &Option<Arc<Move>>,
        taking: &Option<Arc<Move>>,
    ) -> Duration {
        let restart = taking.as_ref().is_some_and(|m| m.restarted(asker));
        if took.is_some() && !restart && op.carried.is_none() {
            Duration::ZERO
        } else {
            ASKED_LANDING_WAIT
        }
    }

    /// Whether the count of the key of `op` reached its new owner with the
    /// handoff of the ring change `m` or a later sweep, its landing waited
    /// for as long as a late answer may take. False when it stayed here.
    async fn handed(op: &CounterOp, m: &Move) -> bool {
        Self::handed_by(op, m, tokio::time::Instant::now() + LATE_WINDOW).await
    }

    /// [`Self::handed`], the landing waited for until `until`.
    async fn handed_by(op: &CounterOp, m: &Move, until: tokio::time::Instant) -> bool {
        let landed = tokio::time::timeout_at(until, m.landed()).await;
        landed.is_ok() && m.delivered(&op.rule, &op.key, op.carried.is_some())
    }

    /// An op for a key this node's ring gave it before it asked the key's
    /// previous owner, decided with the ring read again inside the
    /// in-flight mark the decision takes: a ring change during the ask
    /// that moved the key on has had its sweep copy the counters already,
    /// so an admission here is a stray for the next sweep. Taken for owned,
    /// it stayed here and the key's owner never counted it.
    fn decide_if_still_owned(
        &self,
        op: &CounterOp,
        from: &Arc<str>,
        rules: &RuleSet,
    ) -> Option<OpResult> {
        self.local.guarded(|_| {
            let owned = self.routing.owns(&op.key);
            self.decide_op(op, from, rules, owned, None)
        })
    }

    /// One op on this node's counters (or, standing in for an owner, on
    /// its copy: the one it names, or `copied`, [`Self::holds_copy`]);
    /// None when this node is leaving and the op must go to the key's new
    /// owner. `owned`: this node's ring gives it the key.
    fn decide_op(
        &self,
        op: &CounterOp,
        from: &Arc<str>,
        rules: &RuleSet,
        owned: bool,
        copied: Option<&NodeIdentity>,
    ) -> Option<OpResult> {
        if op.key.is_empty() && op.kind() != OpKind::Refund {
            let empty = CheckError::invalid(InputField::Key, "must not be empty");
            return Some(wire::error_to_wire(&empty));
        }
        // The fence: every path to a count (here, on a copy, after a wait
        // for a landing, sent on by a leaving node) comes through this
        // point, so a consume its gateway has given up on is counted by
        // no node, however long it was held on its way (`peers::expiry`).
        if op.kind() == OpKind::Consume && expired(op, self.local.limiter().now()) {
            bump(&self.stats.expired_ops, 1);
            return Some(wire::expired());
        }
        // A gateway whose ring dropped the owner before ours did sends the
        // key here as its new owner: it is decided on the copy, which has
        // the owner's counts, until this node's ring promotes it.
        let standing_in = Some(op.stand_in_for.as_str()).filter(|o| !o.is_empty());
        let here = || self.decide_counted(op, from, rules, owned);
        match standing_in.or(copied.map(|o| &*o.id)) {
            Some(owner) => self.stand_in(op, owner, here),
            None => here(),
        }
    }

    /// One op on this node's counters: see [`Self::decide_op`].
    fn decide_counted(
        &self,
        op: &CounterOp,
        from: &Arc<str>,
        rules: &RuleSet,
        owned: bool,
    ) -> Option<OpResult> {
        // The rule as this node has it: its name is the interned one the
        // hot-key summary and the replicator key on (no allocation per op),
        // and a rule this node does not know has no counter to mark.
        let rule = rules.get(&op.rule).map(|(_, r)| r);
        let consumed = match op.kind() {
            OpKind::Consume => match wire::carried_rule(op) {
                Some(Ok(rule)) => self.local.consume_carried(&rule, &op.key, op.cost),
                Some(Err(e)) => return Some(wire::error_to_wire(&e)),
                None => {
                    if let Some(rule) = rule {
                        let now = self.local.limiter().now();
                        self.lessor
                            .hot
                            .record(&rule.name, &op.key, from, op.cost, now);
                    }
                    self.local.consume(&op.rule, &op.key, op.cost)
                }
            },
            OpKind::Lease if self.local.is_leaving() => return None,
            OpKind::Lease => return Some(self.lease(op, rule, from, owned)),
            OpKind::Refund | OpKind::Charge | OpKind::Reset if self.local.is_leaving() => {
                return None
            }
            // Answered in `decide`, before the key's owner is looked up.
            OpKind::Forget => return Some(wire::refunded()),
            OpKind::Reset | OpKind::Peek => {
                return Some(counter_admin::apply(
                    self.local.limiter(),
                    &self.replicator,
                    op,
                    rule,
                ))
            }
            OpKind::Refund => {
                let limiter = self.local.limiter();
                match wire::carried_rule(op) {
                    Some(Ok(carried)) => limiter.refund_adhoc(&carried, &op.key, op.at, op.cost),
                    Some(Err(e)) => return Some(wire::error_to_wire(&e)),
                    None => limiter.refund(&op.rule, &op.key, op.at, op.cost),
                }
                if let Some(rule) = rule {
                    self.replicator.mark(&rule.name, &op.key, limiter.now());
                }
                return Some(wire::refunded());
            }
            OpKind::Charge => {
                let now = self.local.limiter().now();
                if self.local.charge(&op.rule, &op.key, op.cost) {
                    if let Some(rule) = rule {
                        self.replicator.mark(&rule.name, &op.key, now);
                    }
                    if !owned {
                        // Swept to the key's owner with the next sweep, as
                        // a stray consume is; left here, it counted nowhere.
                        self.stray();
                    }
                }
                // When it was applied: copies taken later include it.
                let applied = Decision::uncounted(0, 0, Duration::ZERO, now);
                return Some(wire::decided(&applied));
            }
        };
        match consumed {
            Consumed::Decided(Ok(d)) => {
                if !owned {
                    // The sender's ring is behind ours: decided anyway
                    // (bouncing could loop between two stale views), and
                    // the counter swept to its owner shortly.
                    self.stray();
                }
                // A known rule: consume refuses an unknown one.
                let (Some(rule), None) = (rule, &op.carried) else {
                    return Some(wire::decided(&d));
                };
                let mut result = wire::decided(&d);
                if d.allowed {
                    self.replicator.mark(&rule.name, &op.key, d.at);
                    result.lease = self.offer(rule, &op.key, from, d.remaining, d.at, owned);
                }
                Some(result)
            }
            Consumed::Decided(Err(e)) => Some(wire::error_to_wire(&e)),
            Consumed::Moved => None,
        }
    }

    /// Notes a counter changed here for a key another member owns.
    fn stray(&self) {
        bump(&self.stats.strays, 1);
        self.local.mark_stray();
    }

    /// A lease for a hot key, if this node would grant one to `from`: only
    /// while its ring gives it the key (`owned`). A key's old owner after a
    /// join, asked by a gateway whose ring is behind, would lease from
    /// what it kept after its handoff (nothing spent): a fresh budget.
    fn offer(
        &self,
        rule: &Rule,
        key: &str,
        from: &Arc<str>,
        remaining: u64,
        now: Nanos,
        owned: bool,
    ) -> Option<weir_proto::weir::v1::Lease> {
        if !owned || **from == *self.routing.me() {
            return None;
        }
        self.lessor.offer(rule, key, from, remaining, now)
    }

    /// A gateway asking for the next lease of a hot key (it is half way
    /// through the last), with the units it decided from leases since it
    /// last asked: counted as the key's traffic (the owner no longer sees
    /// those checks), then a lease from what is left, or none.
    fn lease(
        &self,
        op: &CounterOp,
        rule: Option<&Arc<Rule>>,
        from: &Arc<str>,
        owned: bool,
    ) -> OpResult {
        let limiter = self.local.limiter();
        let now = limiter.now();
        let mut result = wire::decided(&Decision::uncounted(0, 0, Duration::ZERO, now));
        let Some(rule) = rule else {
            return result;
        };
        // At least the ask itself, from a sender that counts no checks.
        let used = (op.checks.max(1), op.cost);
        self.lessor
            .hot
            .record_many(&rule.name, &op.key, from, used, now);
        let remaining = limiter.remaining(&op.rule, &op.key).unwrap_or(0);
        result.lease = self.offer(rule, &op.key, from, remaining, now, owned);
        result
    }

    /// An op sent here because the key's owner cannot be reached from its
    /// gateway: decided on this node's copy of the owner's counts. When no
    /// copy is held, a check is decided by `here` on this node's counters,
    /// which have whatever count of the key is here (handed over,
    /// promoted, decided as its new owner, or standing in before).
    fn stand_in(
        &self,
        op: &CounterOp,
        owner: &str,
        here: impl FnOnce() -> Option<OpResult>,
    ) -> Option<OpResult> {
        let limiter = self.local.limiter();
        Some(match op.kind() {
            OpKind::Refund => {
                self.replicas
                    .refund(&op.rule, &op.key, op.at, op.cost, limiter);
                wire::refunded()
            }
            // Leases are the owner's, never a copy's.
            OpKind::Lease => wire::not_owner("only the key's owner leases"),
            // On this node's own count, as a consume with no copy is.
            OpKind::Reset | OpKind::Peek | OpKind::Forget => return here(),
            // A dead owner's admission, reported by a gateway it answered.
            OpKind::Charge => {
                let admitted = Admitted {
                    owner,
                    rule: &op.rule,
                    hash_part: &op.key,
                    cost: op.cost,
                    at: op.at,
                };
                let ring = self.routing.ring();
                if self
                    .replicas
                    .admitted_by(&admitted, limiter, &ring, self.routing.me())
                {
                    bump(&self.stats.admissions_recovered, 1);
                    self.replicator
                        .mark(&Arc::from(op.rule.as_str()), &op.key, limiter.now());
                }
                wire::refunded()
            }
            OpKind::Consume => match wire::carried_rule(op) {
                // Carried limits have no copies: the owner's count is the
                // only one, so standing in for it would grant a fresh one.
                Some(_) => wire::not_owner("a carried limit has no copy to decide on"),
                None => match self.replicas.stand_in(&op.rule, &op.key, op.cost, here) {
                    Ok(StandIn::Copy(d)) => wire::decided(&d),
                    Ok(StandIn::Here(decided)) => return decided,
                    Err(e) => wire::error_to_wire(&e),
                },
            },
        })
    }

    /// Sends an op that reached a leaving node on to the key's new owner;
    /// `counted` until its answer, late or not, has been dealt with.
    async fn forward(&self, op: CounterOp, counted: Forwarding) -> OpResult {
        let Some(owner) = self.routing.remote_owner(&op.key) else {
            return wire::not_owner("no other member to forward to");
        };
        if op.kind() != OpKind::Consume {
            self.peers.send(&owner, op);
            return wire::refunded();
        }
        let refund = op
            .carried
            .is_none()
            .then(|| (op.rule.clone(), op.key.clone(), op.cost));
        // Waited for as long as a late answer may take, and passed on: a
        // gateway that gave up on the check meanwhile reconciles it (an
        // admission it refused is given back at the key's new owner).
        // Answered "not decided" at the owner deadline instead, the new
        // owner's admission was this node's to give back, and its waiting
        // tasks end with it: 5 of 100 leave races beside two busy loops
        // counted 19 of 20.
        match self.peers.decide(&owner, op, LATE_WINDOW).await {
            Reply::Answered(result) => result,
            Reply::Late(late) => {
                // The gateway is told the op was not decided and decides it
                // elsewhere: an admission the new owner makes after all
                // went to nobody, and is given back. (A carried limit's
                // stays spent: a refund names a rule's counter only.) The
                // call is heard for the late window past the op's own, and
                // the leave waits for the refund to be answered
                // (`Strategy::settle_leave`): the node stops after it.
                if let Some((rule, key, cost)) = refund {
                    let peers = self.peers.clone();
                    let then = move |result: OpResult| {
                        let Some(at) = wire::admitted_at(&result) else {
                            return;
                        };
                        let refund = wire::refund(&rule, &key, cost, at);
                        tokio::spawn(async move {
                            let _ = peers.decide(&owner, refund, LATE_WINDOW).await;
                            drop(counted);
                        });
                    };
                    self.peers.on_late(late, Box::new(then));
                }
                wire::not_owner("the key's new owner did not answer in time")
            }
            _ => wire::not_owner("the key's new owner did not answer"),
        }
    }
}
