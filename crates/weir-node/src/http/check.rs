//! `POST /v1/check`: one request in, the verdict and its rate-limit headers out.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use weir_core::headers::HeaderSet;
use weir_core::{render, Verdict};

use super::body::read_capped;
use super::check_input::CheckInput;
use super::problem::{respond, Problem, ProblemResponse};
use crate::jitter::jittered_ms;
use crate::state::NodeState;
use crate::traces::traced;

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
    let req = match CheckInput::parse(&bytes) {
        Ok(r) => r,
        Err(e) => {
            state.metrics.record_rejected_input(e.metric_field);
            return Problem::invalid(e.field, e.detail).into_response();
        }
    };
    let limiter = state.engine.limiter();
    // Timed on the limiter's clock, the one time source the node reads.
    let started = limiter.now();
    let parent = || {
        headers
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let check = state.engine.check(&req);
    let outcome = traced(state.traces.as_ref(), "weir.check.http", parent, check).await;
    let now = limiter.now();
    let elapsed = Duration::from_nanos(now.saturating_sub(started));
    match outcome {
        Ok(verdict) => {
            state.metrics.record_verdict(&verdict, elapsed);
            verdict_response(&verdict, now, state.config.retry_jitter)
        }
        Err(failure) => {
            state.metrics.record_failure(&failure, elapsed);
            respond(render::failure(&failure))
        }
    }
}

fn verdict_response(verdict: &Verdict, now: u64, jitter: bool) -> Response {
    let answer = verdict.response();
    respond(render::answer(
        &answer,
        now,
        jittered_ms(&answer, jitter),
        HeaderSet::All,
    ))
}
