//! What a node does for its peers, one method per `weir.v1.Peer` call, whatever carries the call (gRPC, or the in-memory network).

use std::sync::{Arc, OnceLock};

use weir_core::{Limiter, RulesError};
use weir_proto::weir::v1::{
    DecideRequest, DecideResponse, FallbackSummary, HandoffRequest, HandoffResponse,
    MembersResponse, NodeSummary, PushRulesResponse, RuleSet as WireRuleSet, SummaryRequest,
    SyncRequest, SyncResponse,
};

use crate::owner::handoff;
use crate::owner::serve::OwnerService;
use crate::stats::{bump, Stats};
use crate::strategy::{Strategy, SyncRefused};
use crate::summary::{ActivitySource, MAX_SUMMARY_SECONDS};
use crate::topology::membership::Membership;
use crate::topology::rules_sync::Rules;

pub struct PeerHandler {
    owner: OwnerService,
    rules: Arc<Rules>,
    strategy: Arc<dyn Strategy>,
    limiter: Arc<Limiter>,
    membership: Arc<Membership>,
    stats: Arc<Stats>,
    /// The embedding node's per-second activity, once it reports it.
    activity: OnceLock<Arc<dyn ActivitySource>>,
}

impl PeerHandler {
    pub fn new(
        owner: OwnerService,
        rules: Arc<Rules>,
        strategy: Arc<dyn Strategy>,
        limiter: Arc<Limiter>,
        membership: Arc<Membership>,
        stats: Arc<Stats>,
    ) -> Self {
        PeerHandler {
            owner,
            rules,
            strategy,
            limiter,
            membership,
            stats,
            activity: OnceLock::new(),
        }
    }

    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// Decides the ops of the keys this node owns.
    pub async fn decide(&self, req: DecideRequest) -> DecideResponse {
        self.owner.decide(req).await
    }

    /// Takes over counters handed to this node.
    pub async fn handoff(&self, req: HandoffRequest) -> HandoffResponse {
        let n = req.counters.len();
        let limiter = self.limiter.clone();
        let counters = req.counters;
        let accepted = handoff::sweep(n, move || handoff::absorb(&limiter, counters))
            .await
            .unwrap_or(0);
        bump(&self.stats.handoffs_received, 1);
        bump(&self.stats.keys_moved_in, u64::from(accepted));
        tracing::info!(from = %req.from_node, counters = n, accepted, "took over counters");
        HandoffResponse { accepted }
    }

    pub fn push_rules(&self, wire: WireRuleSet) -> Result<PushRulesResponse, RulesError> {
        let applied = self.rules.adopt(&wire, &wire.origin)?;
        Ok(PushRulesResponse {
            version: self.limiter.rules().version(),
            applied,
        })
    }

    pub fn pull_rules(&self) -> WireRuleSet {
        self.rules.current()
    }

    pub fn sync_counts(&self, req: SyncRequest) -> Result<SyncResponse, SyncRefused> {
        let applied = self.strategy.sync_counts(&req.from_node, &req.deltas)?;
        Ok(SyncResponse {
            applied: u32::try_from(applied).unwrap_or(u32::MAX),
        })
    }

    /// The members this node counts as live; none once it has stopped gossiping.
    pub fn members(&self) -> MembersResponse {
        let m = &self.membership;
        let live = if m.is_running() {
            m.view().members.into_iter().map(|m| m.id).collect()
        } else {
            Vec::new()
        };
        MembersResponse {
            node: m.identity().id,
            live,
        }
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
            // Not kept by this node yet: replica holders, breakers per owner
            // and heavy hitters fill these in when they exist; absent is
            // shown as "not known", never as zero.
            replica_decisions: None,
            breakers: None,
            hot_keys: None,
        }
    }
}
