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
        "stats": stats_view(&s),
        "hot": super::hot::hot_view(state, 5),
        "region": region_view(cluster),
    })
}

/// Global limits as this node sees them: null when it is in no region.
/// `fallback` is true while a home region has gone unheard and some key is
/// decided on its static share.
fn region_view(cluster: &weir_cluster::Cluster) -> Value {
    let Some(r) = cluster.region_status(10) else {
        return Value::Null;
    };
    let counts = cluster.regional().map(|g| &g.counts);
    let load = |a: Option<&std::sync::atomic::AtomicU64>| {
        a.map_or(0, |a| a.load(std::sync::atomic::Ordering::Relaxed))
    };
    json!({
        "name": r.region,
        "regions": r.regions,
        "ready": !r.regions.is_empty(),
        "fallback": r.keys_fallback > 0,
        "keys_in_fallback": r.keys_fallback,
        "unreachable": r.unreachable.iter().map(|(h, ms)| json!({"region": h, "quiet_ms": ms})).collect::<Vec<_>>(),
        "allocator_keys": r.allocator_keys,
        "reports_sent": load(counts.map(|c| &c.reports_sent)),
        "grants_received": load(counts.map(|c| &c.grants_received)),
        "calls_failed": load(counts.map(|c| &c.calls_failed)),
        "keys": r.keys.iter().map(|k| json!({
            "rule": &*k.rule,
            "key": k.key.as_str(),
            "home": &*k.home,
            "window": k.window,
            "allocation": k.allocation,
            "used": k.used,
            "next": k.next,
            "mode": k.mode.as_str(),
        })).collect::<Vec<_>>(),
    })
}

/// The cluster's counters since start, as one flat object.
fn stats_view(s: &weir_cluster::ClusterStats) -> Value {
    let pairs = [
        ("peer_calls", json!(s.peer_calls)),
        ("peer_bytes", json!(s.peer_bytes)),
        ("peer_ops", json!(s.peer_ops)),
        ("peer_failures", json!(s.peer_failures)),
        ("deny_cache_hits", json!(s.deny_cache_hits)),
        ("fallback_decisions", json!(s.fallback_decisions)),
        ("fallback_entered", json!(s.fallback_entered)),
        ("fallback_left", json!(s.fallback_left)),
        ("handoffs_sent", json!(s.handoffs_sent)),
        ("handoffs_failed", json!(s.handoffs_failed)),
        ("handoff_bytes", json!(s.handoff_bytes)),
        ("handoffs_received", json!(s.handoffs_received)),
        ("keys_moved_out", json!(s.keys_moved_out)),
        ("keys_moved_in", json!(s.keys_moved_in)),
        ("keys_lost", json!(s.keys_lost)),
        ("rules_pushed", json!(s.rules_pushed)),
        ("rules_adopted", json!(s.rules_adopted)),
        ("unauthenticated", json!(s.unauthenticated)),
        ("direct_connections", json!(s.direct_connections)),
        ("strays", json!(s.strays)),
        ("asked_back", json!(s.asked_back)),
        ("slow_decisions", json!(s.slow_decisions)),
        ("replica_decisions", json!(s.replica_decisions)),
        ("late_refunds", json!(s.late_refunds)),
        ("expired_ops", json!(s.expired_ops)),
        ("charges_owed", json!(s.charges_owed)),
        ("charges_paid", json!(s.charges_paid)),
        ("charges_dropped", json!(s.charges_dropped)),
        ("admissions_reported", json!(s.admissions_reported)),
        ("admissions_recovered", json!(s.admissions_recovered)),
        ("replicated", json!(s.replicated)),
        ("replication_pending", json!(s.replication_pending)),
        ("replication_lag_p99_ms", json!(ms(s.replication_lag.p99))),
        ("replication_lag_max_ms", json!(ms(s.replication_lag.max))),
        ("forward_queue_p99_ms", json!(ms(s.queue_wait.p99))),
        ("forward_call_p99_ms", json!(ms(s.call_time.p99))),
        ("leases_granted", json!(s.leases_granted)),
        ("lease_units_granted", json!(s.lease_units_granted)),
        ("lease_decisions", json!(s.lease_decisions)),
        ("lease_renewals", json!(s.lease_renewals)),
        ("lease_units_returned", json!(s.lease_units_returned)),
        ("tier_decisions", json!(s.tier_decisions)),
        ("fallback_capped", json!(s.fallback_capped)),
    ];
    Value::Object(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
