//! `GET /ui/api/cluster`: the dashboard's document, this node's view of the cluster with each live member's own summary, asked over the authenticated peer service.
//!
//! The browser talks to this node only; this node asks its peers
//! (`Peer/Summary`, each within [`PEER_DEADLINE`]) and adds up their
//! activity. A live member that does not answer in time is shown as
//! unknown, never left out. Nothing of the node's configuration is in the
//! document: no admin token, no cluster secret.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use weir_cluster::summary::{MemberSummary, Reply, MAX_SUMMARY_SECONDS};
use weir_cluster::MemberStatus;
use weir_core::RuleSet;
use weir_proto::weir::v1::{BreakerState, NodeSummary};

use super::problem::{Problem, ProblemResponse};
use crate::state::NodeState;

/// How long a member has to answer: under the page's one-second poll, so
/// a slow member never makes polls pile up.
pub const PEER_DEADLINE: Duration = Duration::from_millis(400);

#[derive(Debug, Deserialize)]
pub struct Params {
    /// The last this many seconds of activity (at most five minutes).
    seconds: Option<u32>,
}

pub async fn get_dashboard(
    State(state): State<Arc<NodeState>>,
    params: Result<Query<Params>, QueryRejection>,
) -> Response {
    let seconds = match params {
        Ok(Query(p)) => p.seconds.unwrap_or(MAX_SUMMARY_SECONDS),
        Err(e) => return Problem::invalid("seconds", e.body_text()).into_response(),
    };
    if seconds == 0 || seconds > MAX_SUMMARY_SECONDS {
        return Problem::invalid("seconds", format!("must be 1 to {MAX_SUMMARY_SECONDS}"))
            .into_response();
    }
    let replies = match state.engine.cluster() {
        Some(cluster) => cluster.summaries(seconds, PEER_DEADLINE).await,
        None => Vec::new(),
    };
    Json(document(
        &state.node_id,
        state.engine.strategy(),
        &state.engine.rules(),
        &replies,
    ))
    .into_response()
}

/// The whole document: who answers, the rules in force, every member with
/// its reply, and the activity of the members that answered, second by second.
pub fn document(
    node_id: &str,
    strategy: &str,
    rules: &RuleSet,
    replies: &[MemberSummary],
) -> Value {
    let members: Vec<Value> = replies.iter().map(|r| member(node_id, r)).collect();
    let answered: Vec<&NodeSummary> = replies
        .iter()
        .filter_map(|r| match &r.reply {
            Reply::Answered(s) => Some(s),
            _ => None,
        })
        .collect();
    json!({
        "node_id": node_id,
        "strategy": strategy,
        "rules": {
            "version": rules.version(),
            "rules": rules.rules().iter().map(|r| r.to_json()).collect::<Vec<_>>(),
        },
        "members": members,
        "activity": activity(&answered),
    })
}

fn member(me: &str, r: &MemberSummary) -> Value {
    let m: &MemberStatus = &r.member;
    let mut v = json!({
        "id": m.id,
        "gossip": m.gossip.to_string(),
        "grpc": m.grpc.to_string(),
        "state": m.state.as_str(),
        "ring_share": m.ring_share,
        "self": m.id == me,
    });
    let (reply, summary, error) = match &r.reply {
        Reply::Answered(s) => ("answered", summary(s), None),
        Reply::Down => ("down", Value::Null, None),
        Reply::NoAnswer(e) => ("no_answer", Value::Null, Some(e.to_string())),
    };
    v["reply"] = reply.into();
    v["summary"] = summary;
    if let Some(e) = error {
        v["error"] = e.into();
    }
    v
}

/// One member's own figures. The optional ones are present only when that
/// member keeps them, so "not known" never shows as zero.
fn summary(s: &NodeSummary) -> Value {
    let fallback = s.fallback.clone().unwrap_or_default();
    let mut v = Map::new();
    v.insert("strategy".into(), s.strategy.clone().into());
    v.insert("rules_version".into(), s.rules_version.into());
    v.insert(
        "fallback".into(),
        json!({
            "active": fallback.active,
            "owners": fallback.owners,
            "entered_total": fallback.entered_total,
        }),
    );
    v.insert("fallback_decisions".into(), s.fallback_decisions.into());
    v.insert("deny_cache_hits".into(), s.deny_cache_hits.into());
    if let Some(n) = s.replica_decisions {
        v.insert("replica_decisions".into(), n.into());
    }
    if let Some(b) = &s.breakers {
        let owners: Vec<Value> = b
            .owners
            .iter()
            .map(|o| json!({"owner": o.owner, "state": breaker_state(o.state)}))
            .collect();
        v.insert("breakers".into(), owners.into());
    }
    if let Some(h) = &s.hot_keys {
        let keys: Vec<Value> = h
            .keys
            .iter()
            .map(|k| json!({"rule": k.rule, "key": k.key, "checks": k.checks}))
            .collect();
        v.insert("hot_keys".into(), keys.into());
    }
    Value::Object(v)
}

fn breaker_state(code: i32) -> &'static str {
    match BreakerState::try_from(code) {
        Ok(BreakerState::Closed) => "closed",
        Ok(BreakerState::Open) => "open",
        Ok(BreakerState::HalfOpen) => "half_open",
        Ok(BreakerState::Unspecified) | Err(_) => "unknown",
    }
}

/// Per-second totals over the members that answered, oldest first:
/// `{"t": unix_s, "rules": {name: [allowed, denied, shadow_denied]},
/// "fallback_decisions": n, "deny_cache_hits": n}`, plus
/// `replica_decisions` when some member keeps it. A second no member
/// reported is absent, not zero.
fn activity(answered: &[&NodeSummary]) -> Vec<Value> {
    #[derive(Default)]
    struct Second {
        rules: BTreeMap<String, [u64; 3]>,
        fallback: u64,
        deny_cache: u64,
        replica: Option<u64>,
    }
    let mut seconds: BTreeMap<u64, Second> = BTreeMap::new();
    for s in answered {
        for a in &s.activity {
            let sec = seconds.entry(a.unix_s).or_default();
            for r in &a.rules {
                let t = sec.rules.entry(r.rule.clone()).or_default();
                t[0] += r.allowed;
                t[1] += r.denied;
                t[2] += r.shadow_denied;
            }
            sec.fallback += a.fallback_decisions;
            sec.deny_cache += a.deny_cache_hits;
            if let Some(n) = a.replica_decisions {
                *sec.replica.get_or_insert(0) += n;
            }
        }
    }
    seconds
        .into_iter()
        .map(|(t, s)| {
            let mut v = json!({
                "t": t,
                "rules": s.rules,
                "fallback_decisions": s.fallback,
                "deny_cache_hits": s.deny_cache,
            });
            if let Some(n) = s.replica {
                v["replica_decisions"] = n.into();
            }
            v
        })
        .collect()
}

#[cfg(test)]
mod tests;
