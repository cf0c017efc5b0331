//! How a check is decided, one implementation per `--strategy`, chosen once at start.
//!
//! The engine holds one [`Strategy`] and no other code branches on which it
//! is: each strategy also says what it does when the rules or the members
//! change, on its periodic chores, and when the node leaves.

pub mod divide;
pub mod gossip;
mod gossip_counts;
pub mod local;
pub mod owner;

use futures::future::BoxFuture;
use std::sync::Arc;
use tokio::task::AbortHandle;

use weir_core::{CheckError, CheckRequest, Decision, Limiter, Rule, RuleSet, Unavailable, Verdict};
use weir_proto::weir::v1::CountDelta;

use crate::stats::{FallbackCounts, FallbackStatus};
use crate::topology::ring::Ring;

/// A decision that is ready now, or one that has to wait (for an owner).
/// Deciding in place allocates no future: that is every check on a lone
/// node, and every check under gossip and divide.
pub enum Decided<'a, T> {
    Now(Result<T, CheckError>),
    Later(BoxFuture<'a, Result<T, CheckError>>),
}

impl<T> Decided<'_, T> {
    pub async fn resolve(self) -> Result<T, CheckError> {
        match self {
            Decided::Now(r) => r,
            Decided::Later(f) => f.await,
        }
    }
}

/// What the counters API does to one counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterAction {
    /// Read it, spending nothing.
    Peek,
    /// Clear it: its state becomes a fresh key's.
    Reset,
}

/// [`Strategy::counter`] on a limiter of this node's own: the only count
/// a strategy that keeps no owners has (gossip and divide clear this
/// node's count alone).
pub(crate) fn counter_here(
    limiter: &Limiter,
    rule: &Rule,
    hash_part: &str,
    action: CounterAction,
) -> Result<(Decision, Option<String>), CheckError> {
    if action == CounterAction::Reset {
        limiter.reset(&rule.name, hash_part);
    }
    match limiter.peek(&rule.name, hash_part) {
        Some(d) => Ok((d, None)),
        None => Err(Unavailable::UnknownRule(rule.name.to_string()).into()),
    }
}

/// Why a peer's gossip counts were not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SyncRefused(pub &'static str);

pub trait Strategy: Send + Sync + 'static {
    /// The name `GET /v1/cluster` shows (`owner`, `gossip`, `divide`, `local`).
    fn name(&self) -> &'static str;

    /// The strategy itself, for a caller that knows which it is (a test
    /// reading what a gossip node has heard).
    fn as_any(&self) -> &dyn std::any::Any;

    /// Decides one check against every limit it meets (or the one it carries).
    fn check<'a>(&'a self, req: &'a CheckRequest) -> Decided<'a, Verdict>;

    /// Many checks, each with its own verdict, in order.
    fn check_many<'a>(
        &'a self,
        reqs: &'a [CheckRequest],
    ) -> BoxFuture<'a, Vec<Result<Verdict, CheckError>>> {
        Box::pin(async move {
            let mut out = Vec::with_capacity(reqs.len());
            for r in reqs {
                out.push(self.check(r).resolve().await);
            }
            out
        })
    }

    /// Gives `cost` back to what (rule, hash part) has spent, at the node
    /// that counts it (an Envoy refund; `rule.carried` for a request's own
    /// limit). Best effort: a refund that cannot reach the counter is
    /// dropped and the budget stays spent, the side that never admits
    /// more than the limit.
    fn give_back<'a>(
        &'a self,
        rule: &'a Arc<Rule>,
        hash_part: &'a str,
        cost: u64,
    ) -> BoxFuture<'a, ()>;

    /// (rule, hash part)'s counter, read or first cleared, at the node
    /// that counts it (the counters API): its state after, and that
    /// node's id (None: this node).
    fn counter<'a>(
        &'a self,
        rule: &'a Arc<Rule>,
        hash_part: &'a str,
        action: CounterAction,
    ) -> BoxFuture<'a, Result<(Decision, Option<String>), CheckError>>;

    /// A new rule set is in force.
    fn on_rules(&self, _rules: &RuleSet) {}

    /// The live members are about to change to `ring`: what must be in
    /// place before a check is routed by it.
    fn before_ring<'a>(&'a self, _ring: &'a std::sync::Arc<Ring>) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    /// The live members changed from `old` to `ring`.
    fn on_ring<'a>(&'a self, _old: &'a Ring, _ring: &'a Ring) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    /// The live members SWIM suspects now (on the ring, maybe gone).
    fn on_suspects(&self, _suspects: &[String]) {}

    /// Periodic chores (sweeps, strays).
    fn maintain(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    /// A graceful leave, bounded by `give_up`: hand over what others need.
    fn leave(&self, _give_up: tokio::time::Instant) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    /// The end of a graceful leave, once peers no longer route here: waits,
    /// until `give_up`, for what is still under way on others' behalf.
    fn settle_leave(&self, _give_up: tokio::time::Instant) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    /// Background tasks of this strategy's own, started with the node.
    fn spawn(self: std::sync::Arc<Self>) -> Vec<AbortHandle> {
        Vec::new()
    }

    /// A peer's gossip counts. Only the gossip strategy takes them; every
    /// other refuses, so nobody can grow a store that nothing reads.
    fn sync_counts(&self, _from: &str, _deltas: &[CountDelta]) -> Result<usize, SyncRefused> {
        Err(SyncRefused("this node does not run the gossip strategy"))
    }

    /// Which owners this node decides for on its own (owner strategy only).
    fn fallback_status(&self) -> FallbackStatus {
        FallbackStatus::default()
    }

    fn fallback_counts(&self) -> FallbackCounts {
        FallbackCounts::default()
    }

    /// This node's breaker for member `id` (owner strategy only).
    fn breaker_of(&self, _id: &str) -> &'static str {
        "closed"
    }
}

/// What a strategy may be built from: the node's parts, wired once.
pub struct Parts {
    pub config: crate::config::ClusterConfig,
    pub local: std::sync::Arc<crate::owner::local::Local>,
    pub routing: std::sync::Arc<crate::topology::routing::Routing>,
    pub peers: std::sync::Arc<dyn crate::owner::peers::Peers>,
    pub link: std::sync::Arc<dyn crate::link::Link>,
    pub stats: std::sync::Arc<crate::stats::Stats>,
    pub replicas: std::sync::Arc<crate::owner::replica::Replicas>,
    pub replicator: std::sync::Arc<crate::owner::replicate::Replicator>,
    pub lessor: std::sync::Arc<crate::owner::lease::Lessor>,
    /// One per owner, shared by this node's gateway and its owner service.
    pub breakers: std::sync::Arc<crate::owner::breaker::Breakers>,
    /// The ring changes that took keys from this node: begun by the
    /// strategy, landed by its handoff, read by the owner service.
    pub moves: std::sync::Arc<crate::owner::moves::Moves>,
    /// This process's boot (`NodeIdentity::boot`).
    pub boot: u64,
    /// The denials this node's gateway caches, which its owner service
    /// forgets when a reset elsewhere clears their counter.
    pub deny: std::sync::Arc<crate::owner::deny_cache::DenyCache>,
}

/// The strategy `config.strategy` names: the one place the flag is read.
pub fn build(p: Parts) -> std::sync::Arc<dyn Strategy> {
    use crate::config::StrategyKind;
    use crate::divided::Divided;
    use crate::owner::cap::Cap;
    use crate::owner::debts::Debts;
    use crate::owner::learned::Learned;
    use crate::owner::leased::Leases;
    use crate::owner::remote::Remote;
    use crate::owner::{fallback::Fallback, gateway::Gateway, handoff::Handoff};
    use std::sync::Arc;

    let limiter = p.local.limiter().clone();
    let divided = || {
        let n = p.routing.ring().len();
        Divided::new(
            &limiter.rules(),
            n,
            limiter.clock().clone(),
            limiter.config(),
        )
    };
    let c = &p.config;
    match c.strategy {
        StrategyKind::Owner => {
            // The fallback remembers and owes at most as many keys as it
            // caches denials for: both are per-key state a gateway keeps
            // about keys it does not own.
            let learned = Learned::new(c.deny_cache_keys);
            let fallback = Fallback::new(
                c.on_owner_failure,
                divided(),
                learned,
                Cap::new(c.fallback_cap),
                p.stats.clone(),
            );
            let remote = Remote {
                local: p.local.clone(),
                routing: p.routing.clone(),
                peers: p.peers,
                stats: p.stats.clone(),
                deadline: c.owner_deadline,
                breakers: p.breakers,
                fallback,
                debts: Arc::new(Debts::new(c.deny_cache_keys)),
                replicas: p.replicas.clone(),
                replicator: p.replicator.clone(),
                leases: Arc::new(Leases::default()),
                lessor: p.lessor.clone(),
                answered: Arc::new(Default::default()),
                moves: p.moves.clone(),
            };
            let gateway = Gateway::new(p.deny, remote);
            let handoff = Handoff::new(
                p.local.clone(),
                p.routing,
                p.link,
                p.stats,
                p.replicas.clone(),
                p.boot,
                p.moves,
            );
            Arc::new(owner::OwnerStrategy::new(
                gateway,
                handoff,
                p.local,
                p.replicas,
                p.replicator,
            ))
        }
        StrategyKind::Gossip => Arc::new(gossip::GossipStrategy::new(
            limiter.clone(),
            p.link,
            p.routing,
            p.stats,
            c.sync_interval,
        )),
        StrategyKind::Divide => Arc::new(divide::DivideStrategy::new(limiter.clone(), divided())),
    }
}
