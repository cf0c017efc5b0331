//! The two weaker strategies, kept so their over-admission can be measured.
//!
//! `divide` (seed 8A): each node enforces limit/N alone, N = live members,
//! with no communication; it reuses the fallback's divided limiter, which is
//! kept sized to the live member count. `gossip` (seed 8C): each node decides
//! on its own full-limit counters plus the counts its peers last reported,
//! and sends its own every sync interval.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use prost::Message;
use weir_core::{Applied, CheckError, Decision, Request, Verdict, NANOS_PER_MS};
use weir_proto::weir::v1::SyncRequest;

use super::status::bump;
use super::Inner;
use crate::engine::CheckFailure;
use crate::strategy::gossip::{deny, window_ns};

impl Inner {
    pub(super) fn check_divide(&self, req: &Request<'_>) -> Result<Verdict, CheckFailure> {
        // Validate against the full rules first: a cost the real limit
        // allows is valid input even where the divided limit cannot hold it.
        self.limiter.select(req)?;
        match self.fallback.check(req) {
            Err(CheckError::CostExceedsLimit { rule, max, .. }) => {
                let rule = self
                    .fallback
                    .rule(&rule)
                    .ok_or_else(|| CheckFailure::Unavailable(format!("rule {rule} vanished")))?;
                let now = self.limiter.now();
                let window = u64::try_from(rule.window.as_nanos()).unwrap_or(u64::MAX);
                Ok(Verdict {
                    allowed: false,
                    applied: vec![Applied {
                        hash_part: req.key.into(),
                        decision: Decision {
                            allowed: false,
                            limit: max,
                            remaining: 0,
                            retry_after: Duration::from_nanos(window),
                            reset_at: (now + window) / NANOS_PER_MS,
                            delay: Duration::ZERO,
                            at: now,
                        },
                        rule,
                    }],
                })
            }
            other => other.map_err(CheckFailure::from),
        }
    }

    pub(super) fn check_gossip(&self, req: &Request<'_>) -> Result<Verdict, CheckFailure> {
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
                .gossip
                .heard(&a.rule.name, &a.hash_part, a.decision.at, window_ns(a));
            !a.rule.shadow && used + heard > a.rule.limit
        });
        match over {
            Some(i) => {
                for a in v.applied.iter().filter(|a| a.decision.allowed) {
                    self.limiter
                        .refund(&a.rule.name, &a.hash_part, a.decision.at, req.cost);
                }
                let at = v.applied[i].decision.at;
                deny(&mut v, i, at);
            }
            None => {
                for a in &v.applied {
                    let w = window_ns(a);
                    self.gossip
                        .admitted(&a.rule.name, &a.hash_part, a.decision.at, w, req.cost);
                }
            }
        }
        Ok(v)
    }

    pub(super) fn sweep_gossip(&self) {
        let rules = self.limiter.rules();
        let window_of = |name: &str| {
            rules
                .get(name)
                .map(|(_, r)| u64::try_from(r.window.as_nanos()).unwrap_or(u64::MAX))
        };
        self.gossip.sweep(self.limiter.now(), window_of);
    }
}

/// Every sync interval, sends the counts admitted since the last sync to
/// every live peer. A send that fails is not retried: the next sync carries
/// the same key's newer total.
pub(super) async fn sync_counts(inner: Arc<Inner>) {
    let mut tick = tokio::time::interval(inner.config.sync_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if inner.stopped.load(Ordering::Relaxed) {
            return;
        }
        let deltas = inner.gossip.take_dirty();
        if deltas.is_empty() {
            continue;
        }
        let req = SyncRequest {
            from_node: inner.me.clone(),
            deltas,
        };
        let bytes = req.encoded_len() as u64;
        let peers: Vec<_> = inner
            .ring
            .load()
            .members()
            .iter()
            .filter(|m| m.id != inner.me)
            .cloned()
            .collect();
        let stats = &inner.net.stats;
        let sends = peers.iter().map(|p| {
            bump(&stats.sync_messages, 1);
            bump(&stats.sync_bytes, bytes);
            bump(&stats.sync_deltas, req.deltas.len() as u64);
            inner.net.peers.sync_counts(
                &p.id,
                p.grpc,
                req.clone(),
                inner.config.sync_interval.max(inner.config.owner_deadline),
            )
        });
        futures::future::join_all(sends).await;
    }
}
