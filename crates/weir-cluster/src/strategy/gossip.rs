//! The gossip strategy (docs/cluster.md): decide on this node's counts plus what peers last reported, and report ours every sync interval.
//!
//! Between syncs each of the N nodes can admit up to the limit minus what
//! it last heard, so right after a sync that reported zero the fleet can
//! admit N x L; the interval changes how likely that is, not the bound.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use prost::Message;
use tokio::task::AbortHandle;
use weir_core::{
    AlgorithmKind, Applied, CheckError, CheckRequest, Decision, Limiter, Rule, Verdict,
};
use weir_proto::weir::v1::{CountDelta, SyncRequest};

use super::gossip_counts::{GossipCounts, HeardCounts};
use super::{counter_here, CounterAction, Decided, Strategy, SyncRefused};
use crate::link::Link;
use crate::stats::{bump, Stats};
use crate::topology::routing::Routing;

pub struct GossipStrategy {
    limiter: Arc<Limiter>,
    counts: GossipCounts,
    link: Arc<dyn Link>,
    routing: Arc<Routing>,
    stats: Arc<Stats>,
    sync_interval: Duration,
}

/// Window length of an applied limit in ns, for the gossip bookkeeping.
fn window_ns(a: &Applied) -> u64 {
    u64::try_from(a.rule.window.as_nanos()).unwrap_or(u64::MAX)
}

/// Float slack, as the sliding counter itself allows (`67.5 + 32.5 <= 100`).
const EPS: f64 = 1e-9;

/// What the peers spent of an applied limit, as its algorithm counts. A
/// sliding window counter weighs their previous window in as it weighs its
/// own (`prev * (1 - f) + curr`): counting only the current
/// window would make it a fixed window at every boundary, admitting 2 L
/// across one. Every other algorithm is counted in aligned windows.
fn peers_spent(a: &Applied, heard: HeardCounts) -> f64 {
    if a.rule.algorithm != AlgorithmKind::SlidingWindowCounter {
        return heard.current as f64;
    }
    let w = window_ns(a).max(1);
    let f = (a.decision.at % w) as f64 / w as f64;
    heard.previous as f64 * (1.0 - f) + heard.current as f64
}

impl GossipStrategy {
    pub fn new(
        limiter: Arc<Limiter>,
        link: Arc<dyn Link>,
        routing: Arc<Routing>,
        stats: Arc<Stats>,
        sync_interval: Duration,
    ) -> Self {
        GossipStrategy {
            limiter,
            counts: GossipCounts::default(),
            link,
            routing,
            stats,
            sync_interval,
        }
    }

    /// The cost peers last reported admitting for this rule and key in the
    /// current window.
    pub fn heard(&self, rule: &str, key: &str) -> u64 {
        let rules = self.limiter.rules();
        let Some((_, r)) = rules.get(rule) else {
            return 0;
        };
        let window = u64::try_from(r.window.as_nanos()).unwrap_or(u64::MAX);
        self.counts
            .heard(&r.name, key, self.limiter.now(), window)
            .current
    }

    /// Keys held from peers' reports.
    pub fn heard_keys(&self) -> usize {
        self.counts.heard_keys()
    }

    fn decide(&self, req: &CheckRequest) -> Result<Verdict, weir_core::CheckError> {
        let mut v = self.limiter.check(req)?;
        if !v.allowed {
            return Ok(v);
        }
        // Local counters admitted; add what the peers reported for the same
        // window. Over the limit together means denied, and this node's own
        // spend is given back so the denial consumes nothing.
        let over = v.applied.iter().position(|a| {
            let used = a.decision.limit - a.decision.remaining;
            let heard = self
                .counts
                .heard(&a.rule.name, &a.hash_part, a.decision.at, window_ns(a));
            !a.rule.shadow && used as f64 + peers_spent(a, heard) > a.rule.limit as f64 + EPS
        });
        match over {
            Some(i) => {
                for a in v.applied.iter().filter(|a| a.decision.allowed) {
                    self.limiter
                        .refund(&a.rule.name, &a.hash_part, a.decision.at, req.cost);
                }
                v.allowed = false;
                let a = &mut v.applied[i];
                // Denied until the aligned window the counts are kept in ends.
                let (w, now) = (window_ns(a), a.decision.at);
                let end = (now / w).saturating_add(1).saturating_mul(w);
                a.decision = Decision::deny(a.decision.limit, Duration::from_nanos(end - now), now);
            }
            None => {
                // A shadow limit's denial spent nothing here, so it is not
                // reported as spend: peers would count it against the
                // limit and their shadow verdicts would deny too early.
                for a in v.applied.iter().filter(|a| a.decision.allowed) {
                    let w = window_ns(a);
                    self.counts
                        .admitted(&a.rule.name, &a.hash_part, a.decision.at, w, req.cost);
                }
            }
        }
        Ok(v)
    }

    /// Every sync interval, sends the counts admitted since the last sync to
    /// every live peer. A send that fails is not retried: the next sync
    /// carries the same key's newer total.
    async fn sync_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.sync_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let deltas = self.counts.take_dirty();
            if deltas.is_empty() {
                continue;
            }
            let req = SyncRequest {
                from_node: self.routing.me().to_string(),
                deltas,
            };
            let bytes = req.encoded_len() as u64;
            let sends = self.routing.peers().into_iter().map(|p| {
                bump(&self.stats.sync_messages, 1);
                bump(&self.stats.sync_bytes, bytes);
                bump(&self.stats.sync_deltas, req.deltas.len() as u64);
                self.link.sync_counts(&p, req.clone(), self.sync_interval)
            });
            futures::future::join_all(sends).await;
        }
    }
}

impl Strategy for GossipStrategy {
    fn name(&self) -> &'static str {
        "gossip"
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn check<'a>(&'a self, req: &'a CheckRequest) -> Decided<'a, Verdict> {
        Decided::Now(self.decide(req))
    }

    /// To this node's own count, which its next sync reports lower.
    fn give_back<'a>(
        &'a self,
        rule: &'a Arc<Rule>,
        hash_part: &'a str,
        cost: u64,
    ) -> BoxFuture<'a, ()> {
        self.limiter.give_back(rule, hash_part, cost);
        Box::pin(async {})
    }

    /// This node's own count; what peers reported stays until it ages out.
    fn counter<'a>(
        &'a self,
        rule: &'a Arc<Rule>,
        hash_part: &'a str,
        action: CounterAction,
    ) -> BoxFuture<'a, Result<(Decision, Option<String>), CheckError>> {
        let done = counter_here(&self.limiter, rule, hash_part, action);
        Box::pin(async move { done })
    }

    fn maintain(&self) -> BoxFuture<'_, ()> {
        let rules = self.limiter.rules();
        let window_of = |name: &str| {
            rules
                .get(name)
                .map(|(_, r)| u64::try_from(r.window.as_nanos()).unwrap_or(u64::MAX))
        };
        self.counts.sweep(self.limiter.now(), window_of);
        Box::pin(async {})
    }

    fn spawn(self: Arc<Self>) -> Vec<AbortHandle> {
        vec![tokio::spawn(self.sync_loop()).abort_handle()]
    }

    /// Takes a live peer's counts of known rules for the current or the
    /// previous window only, each clamped to its rule's limit, and holds at
    /// most `max_keys_per_rule` keys per rule in force: nothing a peer
    /// sends can outlive two windows or grow memory past what this node's
    /// own counters may hold.
    fn sync_counts(&self, from: &str, deltas: &[CountDelta]) -> Result<usize, SyncRefused> {
        if from == self.routing.me() || !self.routing.is_member(from) {
            return Err(SyncRefused("the sender is not a live member of this ring"));
        }
        let rules = self.limiter.rules();
        let now = self.limiter.now();
        let accept = |d: &CountDelta| {
            let (_, r) = rules.get(&d.rule)?;
            let current = now
                / u64::try_from(r.window.as_nanos())
                    .unwrap_or(u64::MAX)
                    .max(1);
            (d.window == current || d.window.checked_add(1) == Some(current)).then_some(r.limit)
        };
        let max_keys =
            (self.limiter.config().max_keys_per_rule).saturating_mul(rules.rules().len());
        let taken = self.counts.apply(from, deltas, accept, max_keys);
        bump(&self.stats.sync_refused, (deltas.len() - taken) as u64);
        Ok(taken)
    }
}
