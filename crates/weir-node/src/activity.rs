//! What this node did in each of the last five minutes' seconds (checks per rule, fallback and deny-cache answers), for the dashboard.
//!
//! Once a second the sampler reads the running totals (the same counters
//! `/metrics` exports) and keeps the difference as that second's sample. The
//! ring holds at most [`MAX_SUMMARY_SECONDS`] samples and each sample only
//! the rules that saw checks, so memory is bounded by rules x seconds; there
//! is never a series per key.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use weir_cluster::summary::{ActivitySource, MAX_SUMMARY_SECONDS};
use weir_core::NANOS_PER_SEC;
use weir_proto::weir::v1::{ActivitySecond, RuleActivity};

use crate::metrics::Metrics;
use crate::state::NodeState;

/// Running totals since start, as read at the end of one second.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    /// Per rule: allowed, denied, shadow-denied.
    pub rules: Vec<(Arc<str>, [u64; 3])>,
    pub fallback_decisions: u64,
    pub deny_cache_hits: u64,
    /// Checks decided by a replica holder for a lost owner; None where
    /// there are no copies (a strategy other than owner).
    pub replica_decisions: Option<u64>,
}

#[derive(Default)]
struct Ring {
    seconds: VecDeque<ActivitySecond>,
    /// The totals at the previous sample. Rules stay once seen, so a rule
    /// removed and put back is not counted from zero again.
    last_rules: HashMap<Arc<str>, [u64; 3]>,
    last_fallback: u64,
    last_deny_cache: u64,
    last_replica: u64,
}

/// The last [`MAX_SUMMARY_SECONDS`] seconds of this node's activity.
#[derive(Default)]
pub struct Activity {
    ring: Mutex<Ring>,
}

impl Activity {
    /// Records what happened since the previous call as second `unix_s`.
    /// A second the sampler missed (a stalled runtime) is folded into the
    /// next one it records.
    pub fn record(&self, unix_s: u64, totals: Totals) {
        let mut ring = self.ring.lock();
        let mut rules = Vec::new();
        for (rule, now) in totals.rules {
            let before = ring.last_rules.insert(rule.clone(), now).unwrap_or([0; 3]);
            let d = [0, 1, 2].map(|i| now[i].saturating_sub(before[i]));
            if d != [0; 3] {
                rules.push(RuleActivity {
                    rule: rule.to_string(),
                    allowed: d[0],
                    denied: d[1],
                    shadow_denied: d[2],
                });
            }
        }
        let second = ActivitySecond {
            unix_s,
            rules,
            fallback_decisions: totals.fallback_decisions.saturating_sub(ring.last_fallback),
            deny_cache_hits: totals.deny_cache_hits.saturating_sub(ring.last_deny_cache),
            replica_decisions: totals
                .replica_decisions
                .map(|n| n.saturating_sub(ring.last_replica)),
        };
        ring.last_fallback = totals.fallback_decisions;
        ring.last_replica = totals.replica_decisions.unwrap_or(0);
        ring.last_deny_cache = totals.deny_cache_hits;
        if ring.seconds.len() == MAX_SUMMARY_SECONDS as usize {
            ring.seconds.pop_front();
        }
        ring.seconds.push_back(second);
    }
}

impl ActivitySource for Activity {
    fn recent(&self, seconds: u32) -> Vec<ActivitySecond> {
        let ring = self.ring.lock();
        let skip = ring.seconds.len().saturating_sub(seconds as usize);
        ring.seconds.iter().skip(skip).cloned().collect()
    }
}

/// The totals now: every rule (and the Envoy overrides' label) that saw
/// checks, from the metrics, and the cluster's fallback and deny-cache counts.
fn totals(state: &NodeState) -> Totals {
    let m: &Metrics = &state.metrics;
    let rules = state.engine.rules();
    let shadow = rules.rules().iter().filter(|r| r.shadow).map(|r| &r.name);
    let stats = state
        .engine
        .cluster()
        .map(|c| c.stats())
        .unwrap_or_default();
    Totals {
        rules: m.rule_totals(shadow),
        fallback_decisions: stats.fallback_decisions,
        deny_cache_hits: stats.deny_cache_hits,
        replica_decisions: (state.engine.cluster().map(|c| c.strategy().name()) == Some("owner"))
            .then_some(stats.replica_decisions),
    }
}

/// Samples at every whole second of the limiter's clock until `stop`, so
/// the seconds of every node line up and a dashboard can add them.
pub async fn sample(state: Arc<NodeState>, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    let clock = state.engine.limiter().clock().clone();
    loop {
        let now = clock.now();
        let next = (now / NANOS_PER_SEC + 1) * NANOS_PER_SEC;
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(Duration::from_nanos(next - now)) => {}
        }
        // The second that just ended: [next - 1 s, next).
        state
            .activity
            .record(next / NANOS_PER_SEC - 1, totals(&state));
    }
}

#[cfg(test)]
mod tests;
