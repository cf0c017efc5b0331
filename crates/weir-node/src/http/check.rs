//! `POST /v1/check`: one request in, the verdict and its rate-limit headers out.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use rand::Rng;
use serde_json::{json, Value};
use weir_cluster::CheckFailure;
use weir_core::headers::rate_limit_headers;
use weir_core::{Applied, CheckError, Verdict};

use super::body::read_capped;
use super::check_input::CheckInput;
use super::problem::{problem_members, Problem, PROBLEM_JSON};
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
        let body = json!({"allowed": true, "rule": Value::Null});
        return (StatusCode::OK, axum::Json(body)).into_response();
    };
    let d = &applied.decision;
    let retry_after = (!d.allowed && jitter).then(|| jittered(d.retry_after_secs()));
    let mut body = decision_json(applied);
    let (status, content_type) = if verdict.allowed {
        (StatusCode::OK, "application/json")
    } else {
        let mut m = problem_members(
            StatusCode::TOO_MANY_REQUESTS,
            "rate-limited",
            "Too Many Requests",
        );
        m.insert(
            "detail".into(),
            format!("over the limit of rule \"{}\"", applied.rule.name).into(),
        );
        if let Value::Object(fields) = body {
            m.extend(fields);
        }
        body = Value::Object(m);
        (StatusCode::TOO_MANY_REQUESTS, PROBLEM_JSON)
    };
    let mut res = (status, body.to_string()).into_response();
    let h = res.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    for (name, value) in rate_limit_headers(applied, now, retry_after) {
        if let (Ok(n), Ok(v)) = (HeaderName::try_from(name), HeaderValue::try_from(value)) {
            h.insert(n, v);
        }
    }
    res
}

fn decision_json(applied: &Applied) -> Value {
    let d = &applied.decision;
    let mut body = json!({
        "allowed": d.allowed,
        "limit": d.limit,
        "remaining": d.remaining,
        "retry_after_ms": d.retry_after_ms(),
        "reset_at": d.reset_at,
        "rule": applied.rule.name.as_ref(),
    });
    if !d.delay.is_zero() {
        // Ceiling, as with every wait shown: sending early would be refused.
        body["delay_ms"] = ceil_ms(d.delay).into();
    }
    body
}

fn ceil_ms(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
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
