//! The owner strategy (docs/cluster.md): every limit decided by its key's owner on the ring; exact at steady state.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use weir_core::{
    CheckError, CheckRequest, CounterSnapshot, Decision, Limiter, Placed, Rule, RuleSet,
    Unavailable, Verdict,
};
use weir_proto::weir::v1::OpKind;

use super::{counter_here, CounterAction, Decided, Strategy};
use crate::owner::gateway::Gateway;
use crate::owner::handoff::{sweep, Handoff};
use crate::owner::local::Local;
use crate::owner::peers::Reply;
use crate::owner::replica::Replicas;
use crate::owner::replicate::Replicator;
use crate::stats::{FallbackCounts, FallbackStatus};
use crate::topology::ring::Ring;
use crate::wire;

/// How long a reset waits for the other members to forget their cached
/// denials of its key: longer than any answer on a working link, short
/// enough for an operator's request.
const FORGET_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

pub struct OwnerStrategy {
    gateway: Gateway,
    handoff: Handoff,
    local: Arc<Local>,
    replicas: Arc<Replicas>,
    replicator: Arc<Replicator>,
    /// The ring holds this node alone: a change has no holder to be copied
    /// to, so it is not marked (marking is a map write per admitted
    /// check, for nothing). When a member joins,
    /// `mark_owned` marks every counter owned here.
    alone: AtomicBool,
    /// Copies of a dead owner's counters that another member owns now,
    /// taken off the copies by `before_ring` and handed over by `on_ring`.
    orphans: Mutex<Vec<CounterSnapshot>>,
}

impl OwnerStrategy {
    /// Sends every other member an `OpKind::Forget` of the key's cached
    /// denials under `rule`, and waits for their answers, up to
    /// [`FORGET_WAIT`]: a member that does not answer keeps its denial
    /// until it lapses, which is the safe direction.
    async fn forget_denials(&self, rule: &str, hash_part: &str) {
        let remote = self.gateway.remote();
        let ring = remote.routing.ring();
        let me = remote.routing.me();
        let told = ring.members().iter().filter(|m| m.id != me).map(|m| {
            let op = wire::counter_admin(rule, hash_part, OpKind::Forget);
            remote.peers.decide(m, op, FORGET_WAIT)
        });
        futures::future::join_all(told).await;
    }

    pub fn new(
        gateway: Gateway,
        handoff: Handoff,
        local: Arc<Local>,
        replicas: Arc<Replicas>,
        replicator: Arc<Replicator>,
    ) -> Self {
        let alone = gateway.remote().routing.ring().len() <= 1;
        OwnerStrategy {
            gateway,
            handoff,
            local,
            replicas,
            replicator,
            alone: AtomicBool::new(alone),
            orphans: Mutex::default(),
        }
    }

    fn limiter(&self) -> &Arc<Limiter> {
        self.local.limiter()
    }

    /// How this node decides the limits of keys it does not own.
    pub fn gateway(&self) -> &Gateway {
        &self.gateway
    }

    /// An admitted verdict decided here changed counters this node owns.
    fn changed(&self, v: &Verdict) {
        if !self.replicator.is_on() || !v.allowed || self.alone.load(Ordering::Relaxed) {
            return;
        }
        for a in &v.applied {
            if a.decision.allowed {
                self.replicator
                    .mark(&a.rule.name, &a.hash_part, a.decision.at);
            }
        }
    }

    /// A new ring: copies of a dead owner's counters this node was sent
    /// but does not own go to their new owners (the ones it owns became
    /// its own in `before_ring`).
    async fn hand_orphans(&self) {
        let orphans = std::mem::take(&mut *self.orphans.lock());
        if !orphans.is_empty() {
            self.handoff.hand_to_owners(orphans).await;
        }
    }

    /// A new ring: every counter owned here is copied to its holder on it.
    async fn mark_owned(&self, ring: &Ring) {
        if self.replicator.is_on() {
            let me = self.gateway.remote().me().to_string();
            let limiter = self.limiter().clone();
            let now = limiter.now();
            let replicator = self.replicator.clone();
            let ring = ring.clone();
            // Every counter this node holds is read: a large store goes to
            // the blocking pool, as a sweep does, off the workers that
            // answer checks and gossip.
            sweep(limiter.keys(), move || {
                for (rule, key) in limiter.keys_where(|k| ring.owner_id(k) == Some(&me)) {
                    replicator.mark(&rule, &key, now);
                }
            })
            .await;
        }
    }
}

impl Strategy for OwnerStrategy {
    fn name(&self) -> &'static str {
        "owner"
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    /// At the key's owner, with this gateway's cached denial of it
    /// forgotten (the budget it was denied for may be back). Sent once,
    /// as a composed check's refund is; unanswered, the budget stays spent.
    fn give_back<'a>(
        &'a self,
        rule: &'a Arc<Rule>,
        hash_part: &'a str,
        cost: u64,
    ) -> BoxFuture<'a, ()> {
        let remote = self.gateway.remote();
        let now = self.limiter().now();
        self.gateway
            .deny_cache()
            .refunded(&rule.name, hash_part, now);
        match remote.routing.remote_owner(hash_part) {
            Some(owner) => {
                let op = wire::refund_spent(rule, hash_part, cost);
                let sent = remote.peers.decide(&owner, op, remote.deadline);
                Box::pin(async move {
                    let _ = sent.await;
                })
            }
            None => {
                self.limiter().give_back(rule, hash_part, cost);
                // Carried limits have no copies.
                let copied = self.replicator.is_on() && !self.alone.load(Ordering::Relaxed);
                if copied && !rule.carried {
                    self.replicator.mark(&rule.name, hash_part, now);
                }
                Box::pin(async {})
            }
        }
    }

    /// At the key's owner. After a reset every member's gateway forgets
    /// its cached denial of the key, this one's at once and the others' by
    /// an `OpKind::Forget` the answer waits for (up to `FORGET_WAIT`): a
    /// denial cached before the reset would otherwise refuse the key there
    /// until it lapsed, as long as an hour for an hourly limit.
    fn counter<'a>(
        &'a self,
        rule: &'a Arc<Rule>,
        hash_part: &'a str,
        action: CounterAction,
    ) -> BoxFuture<'a, Result<(Decision, Option<String>), CheckError>> {
        let remote = self.gateway.remote();
        let now = self.limiter().now();
        if action == CounterAction::Reset {
            self.gateway
                .deny_cache()
                .refunded(&rule.name, hash_part, now);
        }
        let at_owner: BoxFuture<'a, _> = match remote.routing.remote_owner(hash_part) {
            None => {
                let done = counter_here(self.limiter(), rule, hash_part, action);
                if action == CounterAction::Reset && done.is_ok() && self.replicator.is_on() {
                    self.replicator.mark(&rule.name, hash_part, now);
                }
                Box::pin(std::future::ready(done))
            }
            Some(owner) => {
                let kind = match action {
                    CounterAction::Peek => OpKind::Peek,
                    CounterAction::Reset => OpKind::Reset,
                };
                let op = wire::counter_admin(&rule.name, hash_part, kind);
                let sent = remote.peers.decide(&owner, op, remote.deadline);
                Box::pin(async move {
                    let unreachable = |why: String| Err(Unavailable::Unreachable(why).into());
                    match sent.await {
                        Reply::Answered(result) => wire::counter_state(result, rule)
                            .map(|d| (d, Some(owner.id.to_string()))),
                        Reply::Late(_) => {
                            unreachable(format!("{} did not answer in time", owner.id))
                        }
                        Reply::Failed(f) => unreachable(format!("{}: {f:?}", owner.id)),
                    }
                })
            }
        };
        Box::pin(async move {
            let done = at_owner.await;
            if action == CounterAction::Reset && done.is_ok() {
                self.forget_denials(&rule.name, hash_part).await;
            }
            done
        })
    }

    /// A check whose every limit this node owns is decided at once, with no
    /// future and one ring lookup per limit (on a ring of one, that is every
    /// check); the rest go to their owners.
    fn check<'a>(&'a self, req: &'a CheckRequest) -> Decided<'a, Verdict> {
        if let Some(rule) = &req.limit {
            return Decided::Later(Box::pin(self.gateway.check_carried(req, rule)));
        }
        match self.gateway.check_one_here(req) {
            Ok(Placed::Decided(v)) => {
                self.changed(&v);
                Decided::Now(Ok(v))
            }
            Ok(Placed::Elsewhere(rules, sel)) => {
                Decided::Later(Box::pin(self.gateway.check_at_owners(req, rules, *sel)))
            }
            Err(e) => Decided::Now(Err(e)),
        }
    }

    /// Those owned here are decided first, in place; the rest travel
    /// together, so checks for one owner share Decide calls.
    fn check_many<'a>(
        &'a self,
        reqs: &'a [CheckRequest],
    ) -> BoxFuture<'a, Vec<Result<Verdict, CheckError>>> {
        Box::pin(async move {
            let rule_set = reqs.iter().filter(|r| r.limit.is_none());
            let placed = self.gateway.check_here(rule_set);
            // Mostly every request is decided here and none carries a limit
            // of its own: then the answers are the verdicts, collected in
            // place. The slots below cost a 100-item call two more vectors.
            let all_here = |p: &Result<Placed, CheckError>| !matches!(p, Ok(Placed::Elsewhere(..)));
            if placed.len() == reqs.len() && placed.iter().all(all_here) {
                return placed
                    .into_iter()
                    .map(|p| match p? {
                        Placed::Decided(v) => {
                            self.changed(&v);
                            Ok(v)
                        }
                        Placed::Elsewhere(..) => unreachable!("every request was decided here"),
                    })
                    .collect();
            }
            let mut placed = placed.into_iter();
            let mut slots = Vec::with_capacity(reqs.len());
            let mut waiting = Vec::new();
            for (i, req) in reqs.iter().enumerate() {
                let outcome = match &req.limit {
                    Some(rule) => {
                        waiting.push(Box::pin(async move {
                            (i, self.gateway.check_carried(req, rule).await)
                        }) as BoxFuture<'_, _>);
                        None
                    }
                    None => match placed.next().expect("one answer per request") {
                        Ok(Placed::Decided(v)) => {
                            self.changed(&v);
                            Some(Ok(v))
                        }
                        Ok(Placed::Elsewhere(rules, sel)) => {
                            waiting.push(Box::pin(async move {
                                (i, self.gateway.check_at_owners(req, rules, *sel).await)
                            }));
                            None
                        }
                        Err(e) => Some(Err(e)),
                    },
                };
                slots.push(outcome);
            }
            for (i, outcome) in futures::future::join_all(waiting).await {
                slots[i] = Some(outcome);
            }
            // Every slot is filled; a caller that gets fewer answers than it
            // asked for treats that as an engine error. Sized up front: a
            // flattened iterator cannot say how many it yields.
            let mut answers = Vec::with_capacity(slots.len());
            answers.extend(slots.into_iter().flatten());
            answers
        })
    }

    fn on_rules(&self, rules: &RuleSet) {
        self.gateway.on_rules(rules);
    }

    /// Copies of a dead owner's counters that this node owns on `ring`
    /// become its own before any check is routed by it: one decided here
    /// in between found the key empty, and admitted past the copy's count.
    /// The change is recorded as taking keys from here (`Moves::begin`)
    /// before it too, so that no check a peer sends here for one of them
    /// is decided on the count that is about to leave.
    ///
    /// Every copy held is looked at (half a million took 0.6 s here, 1.7 s
    /// when each was promoted): many go to the blocking pool, off the
    /// workers that answer checks and gossip.
    fn before_ring<'a>(&'a self, ring: &'a Arc<Ring>) -> BoxFuture<'a, ()> {
        let routing = &self.gateway.remote().routing;
        self.handoff.moves().begin(routing.ring(), ring.clone());
        let me = self.gateway.remote().me().to_string();
        let (replicas, limiter, ring) =
            (self.replicas.clone(), self.limiter().clone(), ring.clone());
        Box::pin(async move {
            let held = replicas.len();
            let copies = sweep(held, move || replicas.on_ring(&ring, &me, &limiter)).await;
            let Some((promoted, orphans)) = copies else {
                tracing::error!(copies = held, "the copies' pass for a new ring failed");
                return;
            };
            if promoted > 0 {
                tracing::info!(
                    counters = promoted,
                    "took over a lost owner's counters from their copies"
                );
            }
            self.orphans.lock().extend(orphans);
        })
    }

    fn on_ring<'a>(&'a self, old: &'a Ring, ring: &'a Ring) -> BoxFuture<'a, ()> {
        // Before `mark_owned`, so a change made after it is marked as it happens.
        self.alone.store(ring.len() <= 1, Ordering::Relaxed);
        self.gateway.on_ring(old, ring, &self.limiter().rules());
        let took_in = ring.taken_in(old).next().is_some();
        Box::pin(async move {
            self.hand_orphans().await;
            if took_in {
                // The handoff first: the checks of the keys a joiner took
                // wait for it, and the gateways sending them give up at the
                // owner deadline. Marked first, a million counters held put
                // 0.6 s of reading every key before the first handoff call
                // (2-vCPU host); after it, the marking reads only what the
                // handoff left here.
                self.handoff.rebalance().await;
                self.mark_owned(ring).await;
            } else {
                // A member lost or gone moves no key from here: what this
                // node took over is copied to its new holders first.
                self.mark_owned(ring).await;
                self.handoff.rebalance().await;
            }
        })
    }

    fn on_suspects(&self, suspects: &[String]) {
        self.gateway.on_suspects(suspects);
    }

    fn maintain(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.gateway.maintain().await;
            if self.local.take_strays() {
                self.handoff.rebalance().await;
            } else {
                self.handoff.retell().await;
            }
        })
    }

    fn leave(&self, give_up: tokio::time::Instant) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.handoff.leave(give_up).await;
        })
    }

    /// Ops the leave sent on to their keys' new owners: an answer that
    /// comes late is given back at the new owner, which takes as long as
    /// the call may (two seconds); stopped before, the new owner kept an
    /// admission nobody got.
    fn settle_leave(&self, give_up: tokio::time::Instant) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let _ = tokio::time::timeout_at(give_up, self.local.until_forwarded()).await;
        })
    }

    fn fallback_status(&self) -> FallbackStatus {
        self.gateway.fallback_status()
    }

    fn fallback_counts(&self) -> FallbackCounts {
        self.gateway.fallback_counts()
    }

    fn breaker_of(&self, id: &str) -> &'static str {
        self.gateway.remote().breakers().state_of(id).as_str()
    }
}
