//! `GET/PUT /v1/limits/{tier}`: read and replace one tier's rules at run time.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use weir_core::{RuleSet, RulesError, MAX_TIER_LEN};

use super::auth::authorize;
use super::body::read_capped;
use super::problem::{Problem, ProblemResponse};
use crate::state::NodeState;

/// The path tier `*` names the rules that apply to any tier (no `tier` field).
const ANY_TIER: &str = "*";

pub async fn get_limits(
    State(state): State<Arc<NodeState>>,
    tier: Result<Path<String>, PathRejection>,
) -> Response {
    let tier = match path_tier(tier) {
        Ok(t) => t,
        Err(p) => return p.into_response(),
    };
    Json(tier_json(&state.engine.rules(), tier.as_deref())).into_response()
}

pub async fn put_limits(
    State(state): State<Arc<NodeState>>,
    tier: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // Authorization first: nothing of the body is read for an unknown caller.
    if let Err(p) = authorize(state.config.admin_token.as_deref(), &headers) {
        return p.into_response();
    }
    let tier = match path_tier(tier) {
        Ok(t) => t,
        Err(p) => return p.into_response(),
    };
    let bytes = match read_capped(&headers, body, &state.config.limits).await {
        Ok(b) => b,
        Err(p) => return p.into_response(),
    };
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return Problem::invalid("body", "the body is not UTF-8").into_response();
    };
    let replaced = RuleSet::parse_tier_json(tier.as_deref(), text)
        .and_then(|rules| state.engine.replace_tier(tier.as_deref(), rules));
    match replaced {
        Ok(set) => {
            tracing::info!(
                tier = tier.as_deref().unwrap_or(ANY_TIER),
                version = set.version(),
                "rules replaced through the API"
            );
            Json(tier_json(&set, tier.as_deref())).into_response()
        }
        Err(e) => rules_problem(&e).into_response(),
    }
}

/// 400 for a body that is not JSON at all, 422 for JSON that is not a valid
/// rule set; either way the set in force is untouched.
fn rules_problem(e: &RulesError) -> Problem {
    match e.rule_error() {
        Some(re) => {
            Problem::invalid_rules(Some(re.rule.clone()), Some(re.field.clone()), e.to_string())
        }
        None => Problem::invalid("body", e.to_string()),
    }
}

fn path_tier(tier: Result<Path<String>, PathRejection>) -> Result<Option<String>, Problem> {
    let Path(tier) = tier.map_err(|e| Problem::invalid("tier", e.body_text()))?;
    if tier == ANY_TIER {
        return Ok(None);
    }
    // The same bounds a check's tier must meet, so a rule written here can
    // be matched by some request.
    if tier.is_empty() || tier.len() > MAX_TIER_LEN || tier.chars().any(char::is_control) {
        return Err(Problem::invalid(
            "tier",
            format!("must be 1 to {MAX_TIER_LEN} bytes of printable text, or \"*\""),
        ));
    }
    Ok(Some(tier))
}

/// `{"version":N,"rules":[...]}` for one tier of `set`.
pub fn tier_json(set: &RuleSet, tier: Option<&str>) -> Value {
    json!({
        "version": set.version(),
        "rules": set.tier(tier).map(|r| r.to_json()).collect::<Vec<_>>(),
    })
}
