//! `GET /v1/cluster`: this node's view of the cluster.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::state::NodeState;

pub async fn get_cluster(State(state): State<Arc<NodeState>>) -> Json<Value> {
    Json(cluster_view(&state))
}

/// The whole document in one place, so membership can replace the member
/// list without touching the handler.
pub fn cluster_view(state: &NodeState) -> Value {
    let config = &state.config;
    json!({
        "node_id": state.node_id,
        "strategy": state.engine.strategy().as_str(),
        "rules_version": state.engine.rules().version(),
        "fallback": {"active": false},
        "members": [{
            "id": state.node_id,
            "gossip": config.gossip.to_string(),
            "grpc": config.grpc.to_string(),
            "state": "alive",
            "ring_share": 1.0,
        }],
    })
}
