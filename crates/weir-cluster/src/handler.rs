//! What a node does for its peers, one method per `weir.v1.Peer` call, whatever carries the call (gRPC, or the in-memory network).

use std::sync::{Arc, OnceLock};

use weir_core::{Limiter, RulesError};
use weir_proto::weir::v1::{
    Breaker, BreakerState, Breakers, CallFate, DecideRequest, DecideResponse, FallbackSummary,
    HandoffRequest, HandoffResponse, HotKey, HotKeys, MembersResponse, NodeSummary,
    PullRulesRequest, PushRulesResponse, ReplicateRequest, ReplicateResponse,
    RuleSet as WireRuleSet, SummaryRequest, SyncRequest, SyncResponse, WriteTierRequest,
    WriteTierResponse,
};

use crate::owner::handoff;
use crate::owner::replica::{Replicas, Sender};
use crate::owner::serve::OwnerService;
use crate::stats::{bump, Stats};
use crate::strategy::{Strategy, SyncRefused};
use crate::summary::{ActivitySource, MAX_SUMMARY_SECONDS};
use crate::topology::membership::Membership;
use crate::topology::rules_sync::Rules;
use crate::trace;
use crate::wire;

/// Hot keys a summary carries.
const SUMMARY_HOT_KEYS: usize = 10;
/// This node is leaving the cluster and takes no counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leaving;

pub struct PeerHandler {
    owner: OwnerService,
    replicas: Arc<Replicas>,
    rules: Arc<Rules>,
    strategy: Arc<dyn Strategy>,
    limiter: Arc<Limiter>,
    membership: Arc<Membership>,
    stats: Arc<Stats>,
    /// The embedding node's per-second activity, once it reports it.
    activity: OnceLock<Arc<dyn ActivitySource>>,
    /// The named handoff calls received.
    calls: Arc<handoff::Calls>,
    /// Set when the node exports traces: the owner's decision spans.
    tracer: OnceLock<trace::Tracer>,
}

impl PeerHandler {
    pub fn new(
        owner: OwnerService,
        replicas: Arc<Replicas>,
        rules: Arc<Rules>,
        strategy: Arc<dyn Strategy>,
        limiter: Arc<Limiter>,
        membership: Arc<Membership>,
        stats: Arc<Stats>,
    ) -> Self {
        PeerHandler {
            owner,
            replicas,
            rules,
            strategy,
            limiter,
            membership,
            stats,
            activity: OnceLock::new(),
            calls: Arc::default(),
            tracer: OnceLock::new(),
        }
    }

    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// Decides the ops of the keys this node owns.
    pub async fn decide(&self, req: DecideRequest) -> DecideResponse {
        let Some(tracer) = self.tracer.get() else {
            return self.owner.decide(req).await;
        };
        let spans = trace::Decisions::start(tracer, &req, self.owner.routing.me());
        let resp = self.owner.decide(req).await;
        if let Some(spans) = spans {
            spans.end(&resp);
        }
        resp
    }

    /// Where the owner's decision spans go; the first tracer set stays.
    pub fn trace_with(&self, tracer: trace::Tracer) {
        let _ = self.tracer.set(tracer);
    }

    /// Takes over counters handed to this node. A node that is leaving
    /// refuses them (it has handed its own over already, and would lose
    /// these): the sender keeps them and tries again once its ring has
    /// dropped this node.
    pub async fn handoff(&self, req: HandoffRequest) -> Result<HandoffResponse, Leaving> {
        if req.ask_about != 0 {
            // Answered while leaving too: a call taken before went on with
            // this node's own handover, and one never taken is refused.
            let fate = self
                .calls
                .ask(&req.from_node, req.boot, req.ask_about)
                .await;
            return Ok(HandoffResponse {
                fate: fate.into(),
                ..HandoffResponse::default()
            });
        }
        if self.owner.local.is_leaving() {
            return Err(Leaving);
        }
        if req.swept && req.counters.is_empty() {
            // Not a handoff of its own: no counters, so none of what a
            // handoff from that node means to later reports.
            self.owner.routing.arrivals().arrived(&req.from_node);
            return Ok(HandoffResponse::default());
        }
        if !req.swept {
            self.owner.routing.arrivals().heard_from(&req.from_node);
        }
        let taking = match self.calls.arrive(&req.from_node, req.boot, req.call) {
            handoff::Arrival::Unnamed => None,
            handoff::Arrival::Take(taking) => Some(taking),
            handoff::Arrival::Seen(seen) => {
                return Ok(HandoffResponse {
                    fate: seen.fate().await.into(),
                    ..HandoffResponse::default()
                })
            }
        };
        let named = taking.is_some();
        let n = req.counters.len();
        let (limiter, replicas) = (self.limiter.clone(), self.replicas.clone());
        let replicator = self.owner.replicator.clone();
        let (counters, from, boot, at) = (req.counters, req.from_node.clone(), req.boot, req.at);
        let absorbed = handoff::sweep(n, move || {
            let from = Sender {
                node: &from,
                boot,
                at,
            };
            let absorbed = handoff::absorb(&limiter, &replicas, &replicator, &from, counters);
            // Said from the sweep itself, which runs to its end even when
            // the call's own task is dropped (its caller gave up on it).
            if let Some(taking) = taking {
                taking.landed();
            }
            absorbed
        })
        .await;
        let fate = match (&absorbed, named) {
            (_, false) => CallFate::Unspecified,
            (Some(_), true) => CallFate::Landed,
            (None, true) => CallFate::Never,
        };
        let absorbed = absorbed.unwrap_or_default();
        bump(&self.stats.handoffs_received, 1);
        bump(&self.stats.keys_moved_in, u64::from(absorbed.accepted));
        bump(&self.stats.handoff_refused, u64::from(absorbed.refused));
        tracing::info!(from = %req.from_node, counters = n, accepted = absorbed.accepted, refused = absorbed.refused, "took over counters");
        if req.swept {
            self.owner.routing.arrivals().arrived(&req.from_node);
        }
        Ok(HandoffResponse {
            accepted: absorbed.accepted,
            fate: fate.into(),
            asks_sender: self.owner.asks(&req.from_node),
        })
    }

    pub async fn push_rules(&self, wire: WireRuleSet) -> Result<PushRulesResponse, RulesError> {
        let adopted = self.rules.adopt(wire, "a push").await?;
        Ok(PushRulesResponse {
            version: self.limiter.rules().version(),
            applied: adopted.changed,
            wants_whole: adopted.unheld,
        })
    }

    /// A tier's write forwarded to this member as the tier's owner.
    pub async fn write_tier(&self, req: WriteTierRequest) -> WriteTierResponse {
        crate::topology::tier_writes::serve(self.rules.clone(), req).await
    }

    pub async fn pull_rules(&self, have: PullRulesRequest) -> WireRuleSet {
        self.rules.current(have).await
    }

    pub fn sync_counts(&self, req: SyncRequest) -> Result<SyncResponse, SyncRefused> {
        let applied = self.strategy.sync_counts(&req.from_node, &req.deltas)?;
        Ok(SyncResponse {
            applied: u32::try_from(applied).unwrap_or(u32::MAX),
        })
    }

    /// The copies this node holds of other owners' counters.
    #[cfg(test)]
    pub(crate) fn replicas(&self) -> &Replicas {
        &self.replicas
    }

    /// Takes an owner's counters as this node's copies of them: only from
    /// a member of the ring, each state checked as a hand-off is, and no
    /// more keys than the ceiling.
    pub fn replicate(&self, req: ReplicateRequest) -> ReplicateResponse {
        if !self.owner.routing.is_member(&req.from_node) {
            tracing::debug!(from = %req.from_node, "copies refused: not a member");
            return ReplicateResponse { accepted: 0 };
        }
        let states = req
            .states
            .into_iter()
            .filter_map(wire::snapshot_from_wire)
            .collect();
        let ring = self.owner.routing.ring();
        let accepted = self
            .replicas
            .take(&req.from_node, req.boot, req.at, states, &ring);
        ReplicateResponse { accepted }
    }

    /// The members on the ring this node routes by (a member that left is
    /// forgotten only once no peer routes to it); none once this node has
    /// stopped gossiping.
    pub fn members(&self) -> MembersResponse {
        let m = &self.membership;
        let live = if m.is_running() {
            let ring = self.owner.routing.ring();
            ring.members().iter().map(|m| m.id.clone()).collect()
        } else {
            Vec::new()
        };
        MembersResponse {
            node: m.identity().id,
            live,
        }
    }

    /// The hottest keys this node owns, over the last whole second.
    fn hot_keys(&self) -> HotKeys {
        let now = self.limiter.now();
        let keys = self
            .owner
            .lessor
            .hot
            .top(SUMMARY_HOT_KEYS, now)
            .into_iter()
            .map(|h| HotKey {
                rule: h.rule.to_string(),
                key: h.key.to_string(),
                checks: h.checks,
            })
            .collect();
        HotKeys { keys }
    }

    /// This node's breaker for every other member of its ring.
    fn breakers(&self) -> Breakers {
        let me = self.membership.identity().id;
        let ring = self.owner.routing.ring();
        let owners = ring
            .members()
            .iter()
            .filter(|m| m.id != me)
            .map(|m| Breaker {
                owner: m.id.clone(),
                state: match self.strategy.breaker_of(&m.id) {
                    "open" => BreakerState::Open,
                    "half_open" => BreakerState::HalfOpen,
                    _ => BreakerState::Closed,
                } as i32,
            })
            .collect();
        Breakers { owners }
    }

    /// Where summaries take their activity from; the first source set stays.
    pub fn set_activity(&self, source: Arc<dyn ActivitySource>) {
        let _ = self.activity.set(source);
    }

    /// This node's state and its last `seconds` of activity, for a dashboard.
    pub fn summary(&self, req: SummaryRequest) -> NodeSummary {
        let fallback = self.strategy.fallback_status();
        let stats = self.stats.snapshot(&self.strategy.fallback_counts());
        let seconds = req.seconds.min(MAX_SUMMARY_SECONDS);
        // Breakers and replica holders exist only under the owner strategy.
        let owner = self.strategy.name() == "owner";
        NodeSummary {
            node: self.membership.identity().id,
            strategy: self.strategy.name().to_string(),
            rules_version: self.limiter.rules().version(),
            fallback: Some(FallbackSummary {
                active: fallback.active,
                owners: fallback.owners,
                entered_total: fallback.entered_total,
            }),
            fallback_decisions: stats.fallback_decisions,
            deny_cache_hits: stats.deny_cache_hits,
            activity: self
                .activity
                .get()
                .map(|a| a.recent(seconds))
                .unwrap_or_default(),
            replica_decisions: owner.then_some(stats.replica_decisions),
            breakers: owner.then(|| self.breakers()),
            hot_keys: owner.then(|| self.hot_keys()),
        }
    }
}

#[cfg(test)]
mod tests;
