//! `GET/PUT /v1/limits/{tier}`: read and replace one tier's rules at run time, conditionally on `If-Match`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::header::ETAG;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
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
    if let Err(p) = authorize(state.config.admin_token.as_deref(), &headers) {
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
    if std::str::from_utf8(&bytes).is_err() {
        return Problem::invalid("body", "the body is not UTF-8").into_response();
    }
    // Parsing, validating and indexing a set of many rules is CPU work
    // of a size the caller chooses: on the blocking pool, the workers
    // go on answering checks meanwhile.
    let writer = (state.clone(), tier.clone());
    let replaced = tokio::task::spawn_blocking(move || {
        let (state, tier) = writer;
        let text = std::str::from_utf8(&bytes).expect("checked above");
        let t = tier.as_deref();
        RuleSet::parse_tier_body(t, text).and_then(|body| {
            state
                .engine
                .replace_tier_if(t, body.rules, body.allow_empty, |current| {
                    condition.allows(&tier_tag(current, t))
                })
        })
    })
    .await;
    let replaced = match replaced {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "a rules write failed to finish");
            return Problem::unavailable(
                "the write did not finish; the rules in force are unchanged",
            )
            .into_response();
        }
    };
    match replaced {
        Ok(set) => {
            tracing::info!(
                tier = tier.as_deref().unwrap_or(ANY_TIER),
                version = set.tier_version(tier.as_deref()),
                "rules replaced through the API"
            );
            tier_response(&set, tier.as_deref())
        }
        Err(e) => rules_problem(&e).into_response(),
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

/// `{"version":N,"rules":[...]}` for one tier of `set`: the version of the
/// tier's last write, and its rules in force.
pub fn tier_json(set: &RuleSet, tier: Option<&str>) -> Value {
    json!({
        "version": set.tier_version(tier),
        "rules": set.tier(tier).map(|r| r.to_json()).collect::<Vec<_>>(),
    })
}

/// The entity tag of one tier as [`tier_json`] shows it: its version and a
/// digest of the listing. Two writes that took one version on two nodes at
/// once have different tags, so a caller who wrote one sees from the tag
/// whether it is the one in force, and `If-Match` with it refuses to
/// overwrite the other.
pub fn tier_tag(set: &RuleSet, tier: Option<&str>) -> String {
    let digest = Sha256::digest(tier_json(set, tier).to_string().as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("\"{}-{hex}\"", set.tier_version(tier))
}
