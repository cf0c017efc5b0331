//! `GET /v1/cluster`: this node's view of the cluster.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::state::NodeState;

pub async fn get_cluster(State(state): State<Arc<NodeState>>) -> Json<Value> {
    Json(cluster_view(&state))
}

/// The whole document in one place: membership, ring shares, fallback
/// state and the cluster's counters, as this node sees them.
pub fn cluster_view(state: &NodeState) -> Value {
    let engine = &state.engine;
    let Some(cluster) = engine.cluster() else {
        let config = &state.config;
        return json!({
            "node_id": state.node_id,
            "strategy": engine.strategy(),
            "rules_version": engine.rules().version(),
            "fallback": {"active": false, "owners": [], "entered_total": 0},
            "members": [{
                "id": state.node_id,
                "gossip": config.gossip.to_string(),
                "grpc": config.grpc.to_string(),
                "state": "alive",
                "ring_share": 1.0,
            }],
        });
    };
    let members: Vec<Value> = cluster
        .members_status()
        .into_iter()
        .map(|m| {
            json!({
                "id": m.id,
                "gossip": m.gossip.to_string(),
                "grpc": m.grpc.to_string(),
                "state": m.state.as_str(),
                "ring_share": m.ring_share,
                "breaker": m.breaker,
            })
        })
        .collect();
    let fallback = cluster.fallback_status();
    let s = cluster.stats();
    json!({
        "node_id": state.node_id,
        "strategy": engine.strategy(),
        "rules_version": engine.rules().version(),
        "fallback": {
            "active": fallback.active,
            "owners": fallback.owners,
            "entered_total": fallback.entered_total,
        },
        "members": members,
        "stats": {
            "peer_calls": s.peer_calls,
            "peer_bytes": s.peer_bytes,
            "peer_ops": s.peer_ops,
            "peer_failures": s.peer_failures,
            "deny_cache_hits": s.deny_cache_hits,
            "fallback_decisions": s.fallback_decisions,
            "fallback_entered": s.fallback_entered,
            "fallback_left": s.fallback_left,
            "handoffs_sent": s.handoffs_sent,
            "handoff_bytes": s.handoff_bytes,
            "handoffs_received": s.handoffs_received,
            "keys_moved_out": s.keys_moved_out,
            "keys_moved_in": s.keys_moved_in,
            "keys_lost": s.keys_lost,
            "rules_pushed": s.rules_pushed,
            "rules_adopted": s.rules_adopted,
            "unauthenticated": s.unauthenticated,
            "strays": s.strays,
            "slow_decisions": s.slow_decisions,
            "replica_decisions": s.replica_decisions,
            "late_refunds": s.late_refunds,
            "charges_owed": s.charges_owed,
            "charges_paid": s.charges_paid,
            "charges_dropped": s.charges_dropped,
            "admissions_reported": s.admissions_reported,
            "admissions_recovered": s.admissions_recovered,
            "replicated": s.replicated,
            "replication_pending": s.replication_pending,
            "replication_lag_p99_ms": ms(s.replication_lag.p99),
            "replication_lag_max_ms": ms(s.replication_lag.max),
            "forward_queue_p99_ms": ms(s.queue_wait.p99),
            "forward_call_p99_ms": ms(s.call_time.p99),
        },
    })
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
