//! `GET/PUT /v1/limits/{tier}`: read and replace one tier's rules at run time, conditionally on `If-Match`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::header::ETAG;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use weir_cluster::topology::tier_writes::TierWriteError;
pub use weir_cluster::topology::tier_writes::{tier_json, tier_tag};
use weir_core::{RuleSet, RulesError, MAX_TIER_LEN};

use super::auth::authorize;
use super::body::read_capped;
use super::if_match::IfMatch;
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
    tier_response(&state.engine.rules(), tier.as_deref())
}

pub async fn put_limits(
    State(state): State<Arc<NodeState>>,
    tier: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // Authorization first: nothing of the body is read for an unknown caller.
    if let Err(p) = authorize(
        state.config.admin_token.as_deref(),
        &state.config.admin_token_accept,
        &headers,
    ) {
        return p.into_response();
    }
    let tier = match path_tier(tier) {
        Ok(t) => t,
        Err(p) => return p.into_response(),
    };
    let condition = match IfMatch::parse(&headers) {
        Ok(c) => c,
        Err(p) => return p.into_response(),
    };
    let bytes = match read_capped(&headers, body, &state.config.limits).await {
        Ok(b) => b,
        Err(p) => return p.into_response(),
    };
    let Ok(text) = String::from_utf8(bytes.to_vec()) else {
        return Problem::invalid("body", "the body is not UTF-8").into_response();
    };
    let replaced = state
        .engine
        .write_tier(tier.clone(), text, condition.into_condition())
        .await;
    match replaced {
        Ok(set) => {
            tracing::info!(
                tier = tier.as_deref().unwrap_or(ANY_TIER),
                version = set.tier_version(tier.as_deref()),
                "rules replaced through the API"
            );
            tier_response(&set, tier.as_deref())
        }
        Err(TierWriteError::Rules(e)) => rules_problem(&e).into_response(),
        Err(e) => {
            tracing::warn!(tier = tier.as_deref().unwrap_or(ANY_TIER), error = %e, "a rules write was not made");
            Problem::unavailable(format!("{e}; the rules in force are unchanged")).into_response()
        }
    }
}

/// 200 with one tier's rules, its version and its entity tag.
fn tier_response(set: &RuleSet, tier: Option<&str>) -> Response {
    let mut res = Json(tier_json(set, tier)).into_response();
    if let Ok(tag) = HeaderValue::from_str(&tier_tag(set, tier)) {
        res.headers_mut().insert(ETAG, tag);
    }
    res
}

/// 400 for a body that is not JSON at all, 422 for JSON that is not a valid
/// rule set, 412 when `If-Match` no longer holds; either way the set in
/// force is untouched.
fn rules_problem(e: &RulesError) -> Problem {
    if let RulesError::Precondition { .. } = e {
        return Problem::precondition_failed(e.to_string());
    }
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
