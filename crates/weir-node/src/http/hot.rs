//! `GET /v1/hot`: the hottest keys this node owns, and what its leases and valves did.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::state::NodeState;

/// Keys listed at most.
const LISTED: usize = 20;

pub async fn get_hot(State(state): State<Arc<NodeState>>) -> Json<Value> {
    Json(hot_view(&state, LISTED))
}

/// The top `n` keys by checks in the last whole second at this owner (a
/// bounded summary: counts may be over by `error`), with the rate from
/// which a key is leased. Empty on a node alone.
pub fn hot_view(state: &NodeState, n: usize) -> Value {
    let Some(cluster) = state.engine.cluster() else {
        return json!({"node_id": state.node_id, "interval_s": 1, "threshold": null, "keys": []});
    };
    let (keys, threshold) = cluster.hot_keys(n);
    let keys: Vec<Value> = keys
        .into_iter()
        .map(|k| {
            json!({
                "rule": &*k.rule,
                "key": k.key.as_str(),
                "checks": k.checks,
                "error": k.error,
                "hot": k.checks - k.error >= threshold,
            })
        })
        .collect();
    json!({
        "node_id": state.node_id,
        "interval_s": 1,
        "threshold": threshold,
        "keys": keys,
    })
}
