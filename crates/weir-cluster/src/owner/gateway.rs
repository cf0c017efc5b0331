//! The gateway side of the owner protocol: every limit of a check decided by its key's owner, all or nothing.
//!
//! A gateway selects the limits locally, answers at once if the deny cache
//! already holds a denial for one of them, and otherwise asks each limit's
//! owner concurrently (itself directly, others through `Peers`). The
//! protocol is consume-then-refund: if any enforcing limit denies, the
//! limits that admitted are refunded at the decision time their owner
//! returned, so a denied request consumes nothing. Between a consume and
//! its refund a concurrent request can see that budget briefly spent, so
//! the race can only under-admit, never over-admit.
//!
//! Nothing here knows about sockets, tokio or gRPC: the network is the
//! `Peers` trait, time is the limiter's clock.

use std::sync::Arc;

use compact_str::CompactString;
use rand::Rng;
use weir_core::rules::{shard_name, Hot};
use weir_core::rules::{Selected, Selection};
use weir_core::{
    Applied, CheckError, CheckRequest, Decision, Limiter, Nanos, Placed, Rule, RuleSet,
    Unavailable, Verdict,
};

use super::deny_cache::DenyCache;
use super::handoff::sweep;
use super::lease;
use super::local::Local;
use super::owned::previous_owner;
use super::remote::{Remote, Via};
use crate::stats::{bump, FallbackCounts, FallbackStatus};
use crate::topology::membership::NodeIdentity;
use crate::topology::ring::Ring;
use crate::topology::routing::Routing;

struct Step {
    rule: Arc<Rule>,
    hash_part: CompactString,
    decision: Decision,
    via: Via,
}

/// One selected limit: its rule and the hash part its counter is keyed on;
/// for a sharded rule, one of its sub-counters at random, keyed apart so
/// that each lands on the owner of its own key.
fn pick(rules: &RuleSet, s: Selected<'_>) -> (Arc<Rule>, CompactString) {
    let rule = &rules.rules()[s.rule];
    if let Hot::Shard(k) = rule.hot {
        let i = crate::determinism::with_rng(|r| r.random_range(0..k));
        if let Some((_, shard)) = rules.get(&shard_name(&rule.name, i)) {
            let key = CompactString::new(format!("{}#{i}", s.hash_part));
            return (shard.clone(), key);
        }
    }
    (rule.clone(), CompactString::new(s.hash_part))
}

pub struct Gateway {
    local: Arc<Local>,
    routing: Arc<Routing>,
    deny: Arc<DenyCache>,
    remote: Arc<Remote>,
}

impl Gateway {
    pub fn new(deny: Arc<DenyCache>, remote: Remote) -> Self {
        Gateway {
            local: remote.local.clone(),
            routing: remote.routing.clone(),
            deny,
            remote: Arc::new(remote),
        }
    }

    pub fn remote(&self) -> &Remote {
        &self.remote
    }

    /// The denials this gateway caches, for a caller that changed a
    /// counter outside a check (a refund, a reset).
    pub fn deny_cache(&self) -> &DenyCache {
        &self.deny
    }

    pub fn fallback_status(&self) -> FallbackStatus {
        self.remote.breakers().status()
    }

    pub fn fallback_counts(&self) -> FallbackCounts {
        self.remote.breakers().counts()
    }
    /// Decides, on this node's counters, each request whose every limit this
    /// node owns; the others come back with their selection for
    /// [`Gateway::check_at_owners`]. One ring snapshot and one in-flight mark
    /// however many requests: on two cores, a shared counter touched per
    /// check is a cache line crossing between them per check.
    pub fn check_here<'r>(
        &self,
        reqs: impl Iterator<Item = &'r CheckRequest>,
    ) -> Vec<Result<Placed, CheckError>> {
        self.placing(|limiter, now, here| limiter.check_placed_all_at(reqs, now, here))
    }

    /// [`Gateway::check_here`] for one request, with no vector around it.
    pub fn check_one_here(&self, req: &CheckRequest) -> Result<Placed, CheckError> {
        self.placing(|limiter, now, here| limiter.check_placed_at(req, now, here))
    }

    /// Runs `place` on this node's limiter, at its clock's now, with what
    /// says whether a limit is this node's to decide, inside one ring
    /// snapshot and one in-flight mark.
    fn placing<T>(
        &self,
        place: impl FnOnce(&Limiter, Nanos, &dyn Fn(&Rule, &str) -> bool) -> T,
    ) -> T {
        let me = self.routing.me();
        let limiter = self.local.limiter();
        let now = limiter.now();
        let (routing, breakers) = (&self.routing, &self.remote.breakers);
        // Joining, this node owns nothing yet: each check waits for the
        // join in `check_at_owners`.
        let joining = routing.joining();
        // The mark before the ring: a ring change's sweep waits for the
        // marks taken before it (`Local::quiesce`), so a check routed here
        // by the ring before the change is in the copy the sweep sends.
        self.local.guarded(|leaving| {
            self.routing.with_routing_ring(|ring| {
                let mine = ring.owned_by(me);
                place(limiter, now, &|rule: &Rule, h: &str| {
                    // A sharded or local-tier rule is never its key's
                    // owner's to decide whole; a key whose count may be
                    // on its way is asked of its previous owner.
                    !leaving
                        && !joining
                        && matches!(rule.hot, Hot::Off | Hot::Lease)
                        && mine(h)
                        && previous_owner(routing, breakers, ring, h).is_none()
                })
            })
        })
    }

    /// Decides a selection whose limits are not all owned here.
    pub async fn check_at_owners(
        &self,
        req: &CheckRequest,
        rules: Arc<RuleSet>,
        sel: Selection,
    ) -> Result<Verdict, CheckError> {
        self.routing.until_joined().await;
        let ring = self.routing.routing_ring();
        let now = self.local.limiter().now();
        let me = self.routing.me();
        let picks: Vec<(Arc<Rule>, CompactString)> = sel.iter().map(|s| pick(&rules, s)).collect();
        // Only remote keys are cached: a local one costs no round trip.
        for (rule, hash_part) in &picks {
            if rule.shadow || ring.owner_id(hash_part).is_none_or(|o| o == me) {
                continue;
            }
            if let Some(decision) = self.deny.lookup(&rule.name, hash_part, req.cost, now) {
                bump(&self.remote.stats.deny_cache_hits, 1);
                return Ok(Verdict::single(rule.clone(), hash_part, decision));
            }
        }
        let ring = &ring;
        let outcomes = if picks.len() == 1 {
            vec![
                self.decide_one(ring, &picks[0].0, &picks[0].1, req.cost)
                    .await,
            ]
        } else {
            let each = picks
                .iter()
                .map(|(rule, hash_part)| self.decide_one(ring, rule, hash_part, req.cost));
            futures::future::join_all(each).await
        };
        let mut failure = None;
        let steps: Vec<Step> = outcomes
            .into_iter()
            .filter_map(|o| o.map_err(|e| failure = failure.take().or(Some(e))).ok())
            .collect();
        // An admission that would make the caller wait past its
        // `max_delay` is a denial: refunded below like the others.
        let too_late = |s: &Step| !s.rule.shadow && s.decision.exceeds(req.max_delay);
        let denied = steps
            .iter()
            .any(|s| !s.rule.shadow && !s.decision.allowed || too_late(s));
        if denied || failure.is_some() {
            // Answer only once the refunds have landed (or their deadline
            // passed): a client that retries straight after its denial then
            // finds the budget it was not charged.
            let refunds = steps
                .iter()
                .filter(|s| s.decision.allowed)
                .map(|s| async move {
                    self.remote
                        .refund(&s.rule, &s.hash_part, req.cost, &s.decision, &s.via)
                        .await;
                    // A denial cached from this budget being briefly spent no longer holds.
                    self.deny
                        .refunded(&s.rule.name, &s.hash_part, self.local.limiter().now());
                });
            futures::future::join_all(refunds).await;
        }
        if let Some(e) = failure {
            return Err(e);
        }
        for s in &steps {
            if matches!(s.via, Via::Owner(_)) && !s.rule.shadow && !s.decision.allowed {
                let counter = (&s.rule.name, s.hash_part.as_str());
                let hold = lease::deny_hold(&s.rule);
                self.deny.insert(counter, req.cost, &s.decision, now, hold);
            }
            if !denied && s.decision.allowed {
                self.remote.owe(&s.rule, &s.hash_part, req.cost, &s.via);
            }
        }
        let applied = steps.into_iter().map(|s| Applied {
            decision: match req.max_delay {
                Some(max) if too_late(&s) => s.decision.beyond(max),
                _ => s.decision,
            },
            rule: s.rule,
            hash_part: s.hash_part,
        });
        Ok(Verdict {
            allowed: !denied,
            applied: applied.collect(),
        })
    }

    /// A request against a limit it carries itself (an Envoy descriptor's
    /// override), decided by the key's owner like any rule's limit. There
    /// is nothing to refund: such a limit is never one of several.
    pub async fn check_carried(
        &self,
        req: &CheckRequest,
        rule: &Arc<Rule>,
    ) -> Result<Verdict, CheckError> {
        req.validate()?;
        self.routing.until_joined().await;
        let remote = &self.remote;
        let (decision, via) = match self.routing.remote_owner(&req.key) {
            Some(owner) => remote.decide(rule, &req.key, req.cost, owner, true).await?,
            None => match remote.decide_owned(rule, &req.key, req.cost, true).await {
                Some(decided) => decided?,
                None => {
                    let owner = self.owner_after_handover(&req.key).await?;
                    remote.decide(rule, &req.key, req.cost, owner, true).await?
                }
            },
        };
        if decision.allowed {
            remote.owe(rule, &req.key, req.cost, &via);
        }
        Ok(Verdict::single(rule.clone(), &req.key, decision))
    }

    /// Once a leaving node has handed its counters over, the key's new owner.
    async fn owner_after_handover(&self, hash_part: &str) -> Result<NodeIdentity, CheckError> {
        self.local.until_handed_over().await;
        self.routing
            .remote_owner(hash_part)
            .ok_or(CheckError::Unavailable(Unavailable::Leaving))
    }

    async fn decide_one(
        &self,
        ring: &Ring,
        rule: &Arc<Rule>,
        hash_part: &CompactString,
        cost: u64,
    ) -> Result<Step, CheckError> {
        let step = |decision, via| Step {
            rule: rule.clone(),
            hash_part: hash_part.clone(),
            decision,
            via,
        };
        if rule.hot == Hot::Local {
            bump(&self.remote.stats.tier_decisions, 1);
            let d = self.remote.fallback().tier(rule, hash_part, cost)?;
            return Ok(step(d, Via::Tier));
        }
        let owner = match ring.owner(hash_part) {
            Some(o) if o.id != self.routing.me() => o.clone(),
            _ => match self.remote.decide_owned(rule, hash_part, cost, false).await {
                Some(decided) => {
                    let (d, via) = decided?;
                    return Ok(step(d, via));
                }
                None => self.owner_after_handover(hash_part).await?,
            },
        };
        if let Some(decided) = self.remote.decide_moving(rule, hash_part, cost, &owner) {
            let (d, via) = decided?;
            return Ok(step(d, via));
        }
        if let Some(d) = self.remote.from_lease(rule, hash_part, cost, &owner) {
            return Ok(step(d, Via::Lease));
        }
        let (decision, via) = self
            .remote
            .decide(rule, hash_part, cost, owner, false)
            .await?;
        Ok(step(decision, via))
    }

    /// A new rule set: cached denials may no longer hold (a limit was
    /// raised), and the divided limits and replica copies follow the rules.
    pub fn on_rules(&self, rules: &RuleSet) {
        self.deny.clear();
        self.remote
            .fallback()
            .rebuild(rules, self.routing.ring().len());
        self.remote.replicas.on_rules(rules);
    }

    /// A new member view.
    pub fn on_ring(&self, old: &Ring, ring: &Ring, rules: &RuleSet) {
        if old.len() != ring.len() {
            // A pass over every rule: 100,000 of them would hold up the
            // checks queued on this worker.
            crate::offload::off_the_workers(|| self.remote.fallback().rebuild(rules, ring.len()));
        }
        let is_member = |id: &str| ring.members().iter().any(|m| m.id == id);
        for gone in old.members().iter().filter(|m| !is_member(&m.id)) {
            if gone.id != self.routing.me() {
                self.remote.report_lost(&gone.id, old);
            }
        }
        // A breaker judges a process: one restarted under its id answers
        // anew. Kept open, its gateways stood in on a copy beside it (and
        // the holder too), and the key had two counts.
        let boot = |r: &Ring, id: &str| r.members().iter().find(|m| m.id == id).map(|m| m.boot);
        let same_process =
            |id: &str| is_member(id) && (boot(old, id).is_none_or(|b| boot(ring, id) == Some(b)));
        let now = self.local.limiter().now();
        self.remote.breakers().retain_members(same_process, now);
        self.remote.peers.retain(&is_member);
    }

    /// Members SWIM suspects: a shorter silence from them is enough to
    /// take them for lost.
    pub fn on_suspects(&self, suspects: &[String]) {
        self.remote.breakers().suspect(suspects);
    }

    /// Periodic chores: expired denials, idle fallback keys, breakers of
    /// owners that have meanwhile left the ring (a call already queued to
    /// one failed just after it left), and debts to owners that answer again.
    pub async fn maintain(&self) {
        let now = self.local.limiter().now();
        self.deny.purge(now);
        self.remote.fallback().sweep();
        // A pass over every copy held, once a second: many go to the
        // blocking pool, off the workers, as the node's own counters'
        // sweep does.
        if self.remote.replicas.sweep_due() {
            let replicas = self.remote.replicas.clone();
            sweep(replicas.len(), move || replicas.sweep()).await;
        }
        self.remote.return_ended_leases();
        let routing = &self.routing;
        self.remote
            .breakers()
            .retain_members(|id| routing.is_member(id), now);
        self.remote.pay_debts().await;
    }
}
