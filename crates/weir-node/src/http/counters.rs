//! `GET` and `DELETE /v1/counters/{rule}/{key}`: one key's counter of one
//! rule, read or cleared at the node that counts it.
//!
//! `{key}` is the counter's hash part: the caller key for a rule keyed by
//! client, the IP for one keyed by IP. A read spends nothing; a clear
//! needs the admin token, as a rule write does.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use weir_cluster::strategy::CounterAction;
use weir_core::{Decision, MAX_KEY_LEN};

use super::auth::authorize;
use super::problem::{Problem, ProblemResponse};
use crate::state::NodeState;

pub async fn get_counter(
    State(state): State<Arc<NodeState>>,
    Path((rule, key)): Path<(String, String)>,
) -> Response {
    match counter(&state, &rule, &key, CounterAction::Peek).await {
        Ok((d, owner)) => Json(json!({
            "rule": rule,
            "key": key,
            "limit": d.limit,
            "remaining": d.remaining,
            "reset_at": d.reset_at,
            "owner": owner,
        }))
        .into_response(),
        Err(p) => p.into_response(),
    }
}

pub async fn delete_counter(
    State(state): State<Arc<NodeState>>,
    headers: HeaderMap,
    Path((rule, key)): Path<(String, String)>,
) -> Response {
    if let Err(p) = authorize(
        state.config.admin_token.as_deref(),
        &state.config.admin_token_accept,
        &headers,
    ) {
        return p.into_response();
    }
    match counter(&state, &rule, &key, CounterAction::Reset).await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(p) => p.into_response(),
    }
}

/// The counter after `action`, with the id of the node that counts it.
async fn counter(
    state: &NodeState,
    rule: &str,
    key: &str,
    action: CounterAction,
) -> Result<(Decision, String), Problem> {
    if key.is_empty() || key.len() > MAX_KEY_LEN || key.chars().any(char::is_control) {
        return Err(Problem::invalid(
            "key",
            format!("must be 1 to {MAX_KEY_LEN} bytes with no control characters"),
        ));
    }
    match state.engine.counter(rule, key, action).await {
        Ok(Some((d, owner))) => Ok((d, owner.unwrap_or_else(|| state.node_id.clone()))),
        Ok(None) => Err(Problem::not_found(format!("no rule named \"{rule}\"")).with_rule(rule)),
        Err(e) => Err(Problem::of_check(&e)),
    }
}
