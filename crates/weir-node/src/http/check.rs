//! `POST /v1/check`: one request in, the verdict and its rate-limit headers out.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use rand::Rng;
use serde::Serialize;
use weir_cluster::CheckFailure;
use weir_core::headers::RateLimitHeaders;
use weir_core::{Applied, CheckError, Verdict};

use super::body::read_capped;
use super::check_input::CheckInput;
use super::problem::{Problem, PROBLEM_JSON};
use crate::state::NodeState;

pub async fn check(
    State(state): State<Arc<NodeState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let bytes = match read_capped(&headers, body, &state.config.limits).await {
        Ok(b) => b,
        Err(p) => {
            state.metrics.record_rejected_input("body");
            return p.into_response();
        }
    };
    let input = match CheckInput::parse(&bytes) {
        Ok(i) => i,
        Err(e) => {
            state.metrics.record_rejected_input(e.metric_field);
            return Problem::invalid(e.field, e.detail).into_response();
        }
    };
    let limiter = state.engine.limiter();
    // Timed on the limiter's clock, the one time source the node reads.
    let started = limiter.now();
    let outcome = state.engine.check(&input.request()).await;
    let now = limiter.now();
    let elapsed = Duration::from_nanos(now.saturating_sub(started));
    match outcome {
        Ok(verdict) => {
            state.metrics.record_verdict(&verdict, elapsed);
            verdict_response(&verdict, now, state.config.retry_jitter)
        }
        Err(failure) => {
            state.metrics.record_failure(&failure, elapsed);
            failure_problem(&failure).into_response()
        }
    }
}

fn failure_problem(failure: &CheckFailure) -> Problem {
    match failure {
        CheckFailure::Input(e) => {
            let p = Problem::invalid(e.field().unwrap_or("request"), e.to_string());
            match e {
                CheckError::CostExceedsLimit { rule, .. } => p.with_rule(rule.clone()),
                _ => p,
            }
        }
        // 503, never 429: the caller is not over its limit, the limiter
        // cannot decide (seed 9, "429 is not 503").
        CheckFailure::Unavailable(reason) => Problem::unavailable(reason.clone()),
    }
}

fn verdict_response(verdict: &Verdict, now: u64, jitter: bool) -> Response {
    let Some(applied) = verdict.binding() else {
        // No enforcing rule matched: unlimited, and no RateLimit headers
        // because there is no limit to describe.
        let body = Unlimited {
            allowed: true,
            rule: None,
        };
        return json_response(StatusCode::OK, "application/json", &body);
    };
    let d = &applied.decision;
    // Jittered in milliseconds, so clients that read the body's
    // retry_after_ms spread out too, not only over whole seconds; the header
    // is the same wait rounded up.
    let jittered_ms = (!d.allowed && jitter).then(|| jittered(d.retry_after_ms()));
    let retry_after = jittered_ms.map(|ms| ms.div_ceil(1000).max(1));
    let mut decision = DecisionBody::of(applied);
    if let Some(ms) = jittered_ms {
        decision.retry_after_ms = ms;
    }
    let mut res = if verdict.allowed {
        json_response(StatusCode::OK, "application/json", &decision)
    } else {
        let status = StatusCode::TOO_MANY_REQUESTS;
        let denied = DeniedBody {
            kind: "urn:weir:problem:rate-limited",
            title: "Too Many Requests",
            status: status.as_u16(),
            detail: format!("over the limit of rule \"{}\"", applied.rule.name),
            decision,
        };
        json_response(status, PROBLEM_JSON, &denied)
    };
    RateLimitHeaders::of(applied, now, retry_after).write_to(res.headers_mut());
    res
}

/// Serialized straight from typed fields: this is every check's answer,
/// and a `serde_json::Value` tree would cost a map and a string per field.
fn json_response(
    status: StatusCode,
    content_type: &'static str,
    body: &impl Serialize,
) -> Response {
    let bytes = serde_json::to_vec(body).expect("a body of numbers and strings serializes");
    let mut res = (status, bytes).into_response();
    res.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    res
}

/// The answer when no enforcing rule matched.
#[derive(Serialize)]
struct Unlimited {
    allowed: bool,
    rule: Option<&'static str>,
}

#[derive(Serialize)]
struct DecisionBody<'a> {
    allowed: bool,
    limit: u64,
    remaining: u64,
    retry_after_ms: u64,
    reset_at: u64,
    rule: &'a str,
    // Ceiling, as with every wait shown: sending early would be refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    delay_ms: Option<u64>,
}

impl<'a> DecisionBody<'a> {
    fn of(applied: &'a Applied) -> Self {
        let d = &applied.decision;
        DecisionBody {
            allowed: d.allowed,
            limit: d.limit,
            remaining: d.remaining,
            retry_after_ms: d.retry_after_ms(),
            reset_at: d.reset_at,
            rule: &applied.rule.name,
            delay_ms: (!d.delay.is_zero()).then(|| d.delay_ms()),
        }
    }
}

/// A 429: an RFC 9457 problem whose extension members are the decision.
#[derive(Serialize)]
struct DeniedBody<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    title: &'static str,
    status: u16,
    detail: String,
    #[serde(flatten)]
    decision: DecisionBody<'a>,
}

/// Server-side jitter (seed 9): base + uniform(0, base), so clients denied in
/// the same instant are not told to return in the same instant.
fn jittered(base: u64) -> u64 {
    base.saturating_add(rand::rng().random_range(0..=base))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_base_and_twice_base() {
        let seen: Vec<u64> = (0..2000).map(|_| jittered(10)).collect();
        assert!(seen.iter().all(|&s| (10..=20).contains(&s)));
        // Not constant: a jitter that always returns the base spreads nothing.
        assert!(seen.iter().any(|&s| s != seen[0]));
    }
}
