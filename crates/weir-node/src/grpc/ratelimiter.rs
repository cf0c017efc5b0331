//! weir.v1.RateLimiter/Check: a batch of checks, one verdict (or item error) per item.

use std::sync::Arc;

use tonic::{Request as GrpcRequest, Response, Status};
use weir_cluster::CheckFailure;
use weir_core::{CheckError, Request, Verdict};
use weir_proto::weir::v1::rate_limiter_server::RateLimiter;
use weir_proto::weir::v1::{
    CheckItem, CheckRequest, CheckResponse, CheckResult, ErrorCode, ItemError,
};

use crate::state::NodeState;

pub struct RateLimiterService {
    state: Arc<NodeState>,
}

impl RateLimiterService {
    pub fn new(state: Arc<NodeState>) -> Self {
        RateLimiterService { state }
    }
}

/// An item as the core reads it; empty `tier`/`ip` are proto3's "not set".
/// An explicit cost of 0 is passed on: the core refuses it naming `cost`,
/// the same words every API uses.
fn to_request(item: &CheckItem) -> Request<'_> {
    Request {
        key: &item.key,
        route: &item.route,
        cost: item.cost.unwrap_or(1),
        tier: present(&item.tier),
        ip: present(&item.ip),
    }
}

fn present(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

pub(crate) fn item_error(failure: &CheckFailure) -> ItemError {
    match failure {
        CheckFailure::Input(e) => ItemError {
            code: match e {
                CheckError::CostExceedsLimit { .. } => ErrorCode::CostExceedsLimit,
                _ => ErrorCode::InvalidArgument,
            } as i32,
            field: e.field().unwrap_or_default().into(),
            message: e.to_string(),
        },
        CheckFailure::Unavailable(m) => ItemError {
            code: ErrorCode::Unavailable as i32,
            field: String::new(),
            message: m.clone(),
        },
    }
}

pub(crate) fn check_result(verdict: &Verdict) -> CheckResult {
    match verdict.binding() {
        Some(a) => CheckResult {
            allowed: verdict.allowed,
            limit: a.decision.limit,
            remaining: a.decision.remaining,
            retry_after_ms: a.decision.retry_after_ms(),
            reset_at_ms: a.decision.reset_at,
            rule: a.rule.name.to_string(),
            delay_ms: a.decision.delay_ms(),
            limited: true,
            error: None,
        },
        None => CheckResult {
            allowed: verdict.allowed,
            limited: false,
            ..CheckResult::default()
        },
    }
}

#[tonic::async_trait]
impl RateLimiter for RateLimiterService {
    async fn check(
        &self,
        request: GrpcRequest<CheckRequest>,
    ) -> Result<Response<CheckResponse>, Status> {
        let items = request.into_inner().items;
        let max = self.state.config.limits.max_batch_items;
        let metrics = &self.state.metrics;
        if items.is_empty() {
            metrics.record_rejected_input("items");
            return Err(Status::invalid_argument("items: must not be empty"));
        }
        if items.len() > max {
            metrics.record_rejected_input("items");
            return Err(Status::invalid_argument(format!(
                "items: at most {max} per call, got {}",
                items.len()
            )));
        }

        let requests: Vec<Request<'_>> = items.iter().map(to_request).collect();
        // Latency is for metrics only, never for a decision (those read the core's clock).
        let started = tokio::time::Instant::now();
        let verdicts = self.state.engine.check_many(&requests).await;
        // One pass decides the whole batch; each item is charged its share so
        // the latency histogram stays per check.
        let per_item = started.elapsed() / u32::try_from(requests.len()).unwrap_or(u32::MAX);
        if verdicts.len() != requests.len() {
            // check_many answers every request; anything else is an engine bug,
            // and answering results[i] for the wrong items[i] would be worse.
            return Err(Status::internal(
                "the engine answered a different number of checks",
            ));
        }

        metrics.record_verdicts(verdicts.iter().filter_map(|o| o.as_ref().ok()), per_item);
        let results = verdicts
            .iter()
            .map(|outcome| match outcome {
                Ok(v) => check_result(v),
                Err(f) => {
                    metrics.record_failure(f, per_item);
                    CheckResult {
                        error: Some(item_error(f)),
                        ..CheckResult::default()
                    }
                }
            })
            .collect();
        Ok(Response::new(CheckResponse { results }))
    }
}
