//! The owner path: every limit of a check decided by its key's owner, all or nothing.
//!
//! A gateway selects the limits locally, answers at once if the deny cache
//! already holds a denial for one of them, and otherwise asks each limit's
//! owner concurrently (itself directly, others through their batchers).
//! The protocol is consume-then-refund: if any enforcing limit denies, the
//! limits that admitted are refunded at the decision time their owner
//! returned, so a denied request consumes nothing. Between a consume and
//! its refund a concurrent request can see that budget briefly spent, so
//! the race can only under-admit, never over-admit.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use compact_str::CompactString;
use weir_core::rules::{Selected, Selection};
use weir_core::{
    Applied, CheckError, Decision, InputField, Placed, Request, Rule, RuleSet, Verdict,
    NANOS_PER_MS,
};
use weir_proto::weir::v1::op_result::Outcome;
use weir_proto::weir::v1::{
    CarriedLimit, CounterOp, Decision as WireDecision, OpKind, OpResult, PeerError, PeerErrorCode,
};

use super::peers::PeerFailure;
use super::status::bump;
use super::{Inner, LocalOutcome};
use crate::engine::{CheckFailure, OwnerFailure};
use crate::ring::Ring;

/// Decides checks on this node when it owns all their limits; see [`Inner::placing`].
pub(crate) struct Here<'a> {
    inner: &'a Inner,
    ring: &'a Ring,
    leaving: bool,
}

impl Here<'_> {
    pub(crate) fn check(&self, req: &Request<'_>) -> Result<Placed, CheckFailure> {
        let limiter = &self.inner.limiter;
        let placed = if self.leaving {
            limiter.check_placed(req, |_| false)
        } else {
            let me = self.inner.me.as_str();
            limiter.check_placed(req, |hash_part| {
                self.ring.owner_id(hash_part).is_none_or(|o| o == me)
            })
        };
        Ok(placed?)
    }
}

/// Where one limit was decided, so a refund goes back to the same place.
enum Via {
    Local,
    Remote { id: String, addr: SocketAddr },
    Fallback,
    Open,
}

struct Step {
    rule: Arc<Rule>,
    hash_part: CompactString,
    decision: Decision,
    via: Via,
}

pub(crate) fn decision_from_wire(d: &WireDecision) -> Decision {
    Decision {
        allowed: d.allowed,
        limit: d.limit,
        remaining: d.remaining,
        retry_after: Duration::from_nanos(d.retry_after_ns),
        reset_at: d.reset_at_ms,
        delay: Duration::from_nanos(d.delay_ns),
        at: d.at,
    }
}

pub(crate) fn decision_to_wire(d: &Decision) -> WireDecision {
    let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    WireDecision {
        allowed: d.allowed,
        limit: d.limit,
        remaining: d.remaining,
        retry_after_ns: ns(d.retry_after),
        reset_at_ms: d.reset_at,
        delay_ns: ns(d.delay),
        at: d.at,
    }
}

/// One selected limit: its rule and the hash part its counter is keyed on.
fn pick<'a>(rules: &'a RuleSet, s: &'a Selected) -> (&'a Arc<Rule>, &'a CompactString) {
    (&rules.rules()[s.rule], &s.hash_part)
}

impl Inner {
    pub(crate) async fn check(&self, req: &Request<'_>) -> Result<Verdict, CheckFailure> {
        match self.check_here(req)? {
            Placed::Decided(v) => Ok(v),
            Placed::Elsewhere(rules, sel) => self.check_at_owners(req, rules, sel).await,
        }
    }

    /// The fast path: a check whose every limit this node owns is decided
    /// at once, with no task, future or second ring lookup per limit (on a
    /// ring of one, that is every check). Anything else comes back with its
    /// selection for [`Inner::check_at_owners`].
    pub(crate) fn check_here(&self, req: &Request<'_>) -> Result<Placed, CheckFailure> {
        self.placing(|here| here.check(req))
    }

    /// Runs `f` with one ring snapshot and one in-flight mark, however many
    /// checks it places: on two cores, a shared counter touched per check
    /// is a cache line crossing between them per check.
    pub(crate) fn placing<T>(&self, f: impl FnOnce(&Here<'_>) -> T) -> T {
        let ring = self.routing_ring();
        // The same guard as `consume_local`: a leave either waits for these
        // checks or is seen here, and then the owners decide.
        self.local_inflight.fetch_add(1, Ordering::SeqCst);
        let here = Here {
            inner: self,
            ring: &ring,
            leaving: self.is_leaving(),
        };
        let out = f(&here);
        self.local_inflight.fetch_sub(1, Ordering::SeqCst);
        out
    }

    /// Decides a selection whose limits are not all owned here.
    pub(crate) async fn check_at_owners(
        &self,
        req: &Request<'_>,
        rules: Arc<RuleSet>,
        sel: Selection,
    ) -> Result<Verdict, CheckFailure> {
        let ring = self.routing_ring();
        let now = self.limiter.now();
        let pick = |s| pick(&rules, s);
        // Only remote keys are cached: a local one costs no round trip.
        for (rule, hash_part) in sel.iter().map(pick) {
            if rule.shadow || ring.owner_id(hash_part).is_none_or(|o| o == self.me) {
                continue;
            }
            if let Some(decision) = self.deny.lookup(&rule.name, hash_part, req.cost, now) {
                bump(&self.net.stats.deny_cache_hits, 1);
                return Ok(Verdict {
                    allowed: false,
                    applied: vec![Applied {
                        rule: rule.clone(),
                        hash_part: hash_part.clone(),
                        decision,
                    }],
                });
            }
        }
        let decide = |(rule, hash_part)| self.decide_one(&ring, rule, hash_part, req.cost);
        let outcomes = if sel.len() == 1 {
            vec![decide(sel.iter().map(pick).next().expect("one limit")).await]
        } else {
            futures::future::join_all(sel.iter().map(pick).map(decide)).await
        };
        let mut failure = None;
        let steps: Vec<Step> = outcomes
            .into_iter()
            .filter_map(|o| o.map_err(|e| failure = failure.take().or(Some(e))).ok())
            .collect();
        let denied = steps.iter().any(|s| !s.rule.shadow && !s.decision.allowed);
        if denied || failure.is_some() {
            // Answer only once the refunds have landed (or their deadline
            // passed): a client that retries straight after its denial then
            // finds the budget it was not charged.
            let refunds = steps
                .iter()
                .filter(|s| s.decision.allowed)
                .map(|s| self.refund(s, req.cost));
            futures::future::join_all(refunds).await;
        }
        if let Some(e) = failure {
            return Err(e);
        }
        for s in &steps {
            if matches!(s.via, Via::Remote { .. }) && !s.rule.shadow && !s.decision.allowed {
                self.deny
                    .insert(&s.rule.name, &s.hash_part, req.cost, &s.decision, now);
            }
        }
        Ok(Verdict {
            allowed: !denied,
            applied: steps
                .into_iter()
                .map(|s| Applied {
                    rule: s.rule,
                    hash_part: s.hash_part,
                    decision: s.decision,
                })
                .collect(),
        })
    }

    /// One request against a limit it carries itself (an Envoy descriptor's
    /// override), decided by the key's owner like any rule's limit. There
    /// is nothing to refund: such a limit is never one of several.
    pub(crate) async fn check_carried(
        &self,
        rule: &Arc<Rule>,
        hash_part: &str,
        cost: u64,
    ) -> Result<Decision, CheckFailure> {
        let owner = self
            .routing_ring()
            .owner(hash_part)
            .filter(|o| o.id != self.me)
            .map(|o| (o.id.clone(), o.grpc));
        match owner {
            Some((id, addr)) => {
                let (d, _) = self
                    .ask_owner(rule, hash_part, cost, id, addr, true)
                    .await?;
                Ok(d)
            }
            None => Ok(self.limiter.check_adhoc(rule, hash_part, cost)?),
        }
    }

    async fn decide_one(
        &self,
        ring: &Ring,
        rule: &Arc<Rule>,
        hash_part: &CompactString,
        cost: u64,
    ) -> Result<Step, CheckFailure> {
        let step = |decision, via| Step {
            rule: rule.clone(),
            hash_part: hash_part.clone(),
            decision,
            via,
        };
        let (id, addr) = match ring.owner(hash_part) {
            Some(o) if o.id != self.me => (o.id.clone(), o.grpc),
            _ => match self.consume_local(&rule.name, hash_part, cost) {
                LocalOutcome::Decided(d) => return Ok(step(d?, Via::Local)),
                LocalOutcome::Moved => {
                    // Leaving: wait until the counters are with their new
                    // owners, then ask the new owner.
                    self.handover_done().await;
                    match self.routing_ring().owner(hash_part) {
                        Some(o) if o.id != self.me => (o.id.clone(), o.grpc),
                        _ => {
                            return Err(CheckFailure::Unavailable(
                                "this node is leaving and no other member is left".into(),
                            ))
                        }
                    }
                }
            },
        };
        let (decision, via) = self
            .ask_owner(rule, hash_part, cost, id, addr, false)
            .await?;
        Ok(step(decision, via))
    }

    /// Sends one consume to a remote owner and applies the owner-failure
    /// policy when it does not answer in time.
    /// `carried`: the rule is a request's own limit, sent along whole.
    async fn ask_owner(
        &self,
        rule: &Arc<Rule>,
        hash_part: &str,
        cost: u64,
        id: String,
        addr: SocketAddr,
        carried: bool,
    ) -> Result<(Decision, Via), CheckFailure> {
        let now = self.limiter.now();
        if self.fallback.bypass(&id, now) {
            return self.undecided(rule, hash_part, cost, &id, "owner in fallback", carried);
        }
        let op = CounterOp {
            rule: rule.name.to_string(),
            key: hash_part.to_string(),
            cost,
            kind: OpKind::Consume as i32,
            at: 0,
            carried: carried.then(|| CarriedLimit {
                limit: rule.limit,
                window_ns: u64::try_from(rule.window.as_nanos()).unwrap_or(u64::MAX),
            }),
        };
        let deadline = self.config.owner_deadline;
        let reply = match self.batchers.submit(&id, addr, op) {
            Ok(rx) => match tokio::time::timeout(deadline, rx).await {
                Ok(Ok(reply)) => reply,
                Ok(Err(_)) => Err(PeerFailure::Unreachable("batcher stopped".into())),
                Err(_) => Err(PeerFailure::Timeout(deadline)),
            },
            Err(f) => Err(f),
        };
        match reply {
            Ok(OpResult {
                outcome: Some(Outcome::Decision(d)),
            }) => {
                self.fallback.answered(&id, now);
                Ok((decision_from_wire(&d), Via::Remote { id, addr }))
            }
            Ok(OpResult {
                outcome: Some(Outcome::Error(e)),
            }) => {
                self.fallback.answered(&id, now);
                self.peer_error(rule, hash_part, cost, &id, e, carried)
            }
            Ok(OpResult { outcome: None }) => {
                self.undecided(rule, hash_part, cost, &id, "empty answer", carried)
            }
            Err(f) => {
                let why = f.to_string();
                // An owner that has meanwhile left the ring is not "lost":
                // its keys already have a new owner.
                if self.ring.load().members().iter().any(|m| m.id == id) {
                    self.fallback.failed(&id, now, &why);
                }
                self.undecided(rule, hash_part, cost, &id, &why, carried)
            }
        }
    }

    fn peer_error(
        &self,
        rule: &Arc<Rule>,
        hash_part: &str,
        cost: u64,
        owner: &str,
        e: PeerError,
        carried: bool,
    ) -> Result<(Decision, Via), CheckFailure> {
        let input = |field, reason| Err(CheckFailure::Input(CheckError::Invalid { field, reason }));
        match PeerErrorCode::try_from(e.code).unwrap_or(PeerErrorCode::Unspecified) {
            PeerErrorCode::CostExceedsLimit => {
                Err(CheckFailure::Input(CheckError::CostExceedsLimit {
                    rule: rule.name.to_string(),
                    cost,
                    max: rule.policy.max_cost(),
                }))
            }
            PeerErrorCode::InvalidCost => input(InputField::Cost, "must be at least 1"),
            PeerErrorCode::InvalidKey => input(InputField::Key, "must not be empty"),
            PeerErrorCode::StoreFull => Err(CheckFailure::Unavailable(e.message)),
            // The owner cannot decide this op (its rules lag behind ours,
            // or it is leaving): decide as if it had not answered. It pulls
            // our newer rules from the version the call carried.
            PeerErrorCode::UnknownRule | PeerErrorCode::NotOwner | PeerErrorCode::Unspecified => {
                self.undecided(rule, hash_part, cost, owner, &e.message, carried)
            }
        }
    }

    /// The owner-failure policy for one limit.
    fn undecided(
        &self,
        rule: &Arc<Rule>,
        hash_part: &str,
        cost: u64,
        owner: &str,
        why: &str,
        carried: bool,
    ) -> Result<(Decision, Via), CheckFailure> {
        match self.config.on_owner_failure {
            OwnerFailure::Local if carried => {
                // A carried limit has no fallback table: divide it here, in
                // counters of its own so the full limit's stay untouched.
                bump(&self.net.stats.fallback_decisions, 1);
                let n = u64::try_from(self.ring.load().len()).unwrap_or(1).max(1);
                let local = Rule::carried(
                    &format!("{}@local", rule.name),
                    rule.limit.div_ceil(n).max(1),
                    rule.window,
                )
                .map_err(|e| CheckFailure::Unavailable(e.reason))?;
                let d = self.limiter.check_adhoc(&local, hash_part, cost)?;
                Ok((d, Via::Fallback))
            }
            OwnerFailure::Local => {
                bump(&self.net.stats.fallback_decisions, 1);
                let d = self.fallback.consume(&rule.name, hash_part, cost)?;
                Ok((d, Via::Fallback))
            }
            OwnerFailure::Open => {
                let now = self.limiter.now();
                let window_ms = u64::try_from(rule.window.as_millis()).unwrap_or(u64::MAX);
                let d = Decision {
                    allowed: true,
                    limit: rule.limit,
                    remaining: rule.limit.saturating_sub(cost),
                    retry_after: Duration::ZERO,
                    reset_at: (now / NANOS_PER_MS).saturating_add(window_ms),
                    delay: Duration::ZERO,
                    at: now,
                };
                Ok((d, Via::Open))
            }
            OwnerFailure::Closed => Err(CheckFailure::Unavailable(format!(
                "the owner of this key ({owner}) did not answer: {why}"
            ))),
        }
    }

    /// Gives back what one admitted limit consumed. A remote refund is
    /// awaited up to the owner deadline; one that does not arrive in time
    /// leaves the budget spent, which can only under-admit.
    async fn refund(&self, s: &Step, cost: u64) {
        let (rule, hash_part, at) = (&*s.rule.name, s.hash_part.as_str(), s.decision.at);
        match &s.via {
            Via::Local => self.limiter.refund(rule, hash_part, at, cost),
            Via::Remote { id, addr } => {
                let op = CounterOp {
                    rule: rule.to_string(),
                    key: hash_part.to_string(),
                    cost,
                    kind: OpKind::Refund as i32,
                    at,
                    carried: None,
                };
                if let Ok(rx) = self.batchers.submit(id, *addr, op) {
                    let _ = tokio::time::timeout(self.config.owner_deadline, rx).await;
                }
            }
            Via::Fallback => self.fallback.refund(rule, hash_part, at, cost),
            Via::Open => {}
        }
    }
}
