//! weir.v1.RateLimiter/Check: a batch of checks, one verdict (or item error) per item.

use std::sync::Arc;
use std::time::Duration;

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
fn to_request(item: &CheckItem) -> Result<Request<'_>, ItemError> {
    let cost = match item.cost {
        None => 1,
        Some(0) => {
            return Err(ItemError {
                code: ErrorCode::InvalidArgument as i32,
                field: "cost".into(),
                message: "invalid cost: must be at least 1".into(),
            })
        }
        Some(c) => c,
    };
    Ok(Request {
        key: &item.key,
        route: &item.route,
        cost,
        tier: present(&item.tier),
        ip: present(&item.ip),
    })
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

fn ceil_ms(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

pub(crate) fn check_result(verdict: &Verdict) -> CheckResult {
    match verdict.binding() {
        Some(a) => CheckResult {
            allowed: verdict.allowed,
            limit: a.decision.limit,
            remaining: a.decision.remaining,
            retry_after_ms: if verdict.allowed {
                0
            } else {
                a.decision.retry_after_ms()
            },
            reset_at_ms: a.decision.reset_at,
            rule: a.rule.name.to_string(),
            delay_ms: ceil_ms(a.decision.delay),
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

fn errored(error: ItemError) -> CheckResult {
    CheckResult {
        error: Some(error),
        ..CheckResult::default()
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

        let mapped: Vec<Result<Request<'_>, ItemError>> = items.iter().map(to_request).collect();
        let requests: Vec<Request<'_>> = mapped
            .iter()
            .filter_map(|m| m.as_ref().ok().copied())
            .collect();
        // Latency is for metrics only, never for a decision (those read the core's clock).
        let started = tokio::time::Instant::now();
        let mut verdicts = self.state.engine.check_many(&requests).await.into_iter();
        // One pass decides the whole batch; each item is charged its share so
        // the latency histogram stays per check.
        let per_item = started.elapsed() / u32::try_from(requests.len().max(1)).unwrap_or(1);

        let mut results = Vec::with_capacity(items.len());
        for m in mapped {
            let result = match m {
                Err(e) => {
                    metrics.record_rejected_input("cost");
                    errored(e)
                }
                Ok(_) => match verdicts.next() {
                    Some(Ok(v)) => {
                        metrics.record_verdict(&v, per_item);
                        check_result(&v)
                    }
                    Some(Err(f)) => {
                        metrics.record_failure(&f, per_item);
                        errored(item_error(&f))
                    }
                    None => {
                        // check_many answers every request; a short answer is a
                        // bug in the engine, reported per item instead of a panic.
                        let f = CheckFailure::Unavailable("no verdict for this item".into());
                        metrics.record_failure(&f, per_item);
                        errored(item_error(&f))
                    }
                },
            };
            results.push(result);
        }
        Ok(Response::new(CheckResponse { results }))
    }
}
