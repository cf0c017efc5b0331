//! weir.v1.RateLimiter/Check: a batch of checks, one verdict (or item error) per item.

use std::sync::Arc;
use std::time::Duration;

use tonic::{Request as GrpcRequest, Response, Status};
use weir_core::{CheckError, CheckRequest, Verdict};
use weir_proto::convert;
use weir_proto::weir::v1::rate_limiter_server::RateLimiter;
use weir_proto::weir::v1::{CheckRequest as CheckCall, CheckResponse, CheckResult};

use crate::jitter::jittered_wait;
use crate::state::NodeState;

pub struct RateLimiterService {
    state: Arc<NodeState>,
}

impl RateLimiterService {
    pub fn new(state: Arc<NodeState>) -> Self {
        RateLimiterService { state }
    }
}

#[tonic::async_trait]
impl RateLimiter for RateLimiterService {
    async fn check(
        &self,
        request: GrpcRequest<CheckCall>,
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

        // One item skips the batch machinery (the slot vectors, the label
        // tally), as a lone RLS descriptor does.
        if items.len() == 1 {
            let item = items.into_iter().next().expect("one item");
            let (outcome, elapsed) = match convert::request(item) {
                Ok(req) => {
                    let started = tokio::time::Instant::now();
                    let outcome = self.state.engine.check(&req).await;
                    (outcome, started.elapsed())
                }
                Err(e) => (Err(e), Duration::ZERO),
            };
            if let Ok(v) = &outcome {
                metrics.record_verdict(v, elapsed);
            }
            let results = vec![self.answer(&outcome, elapsed)];
            return Ok(Response::new(CheckResponse { results }));
        }

        // An item whose carried limit cannot limit is refused alone, like
        // any other bad item; the rest are decided together. Only the
        // refused are listed: a slot per item was written and read again
        // for every batch, which almost never has one.
        let mut refused: Vec<(usize, CheckError)> = Vec::new();
        let requests: Vec<CheckRequest> = items
            .into_iter()
            .enumerate()
            .map(|(i, item)| {
                convert::request(item).unwrap_or_else(|e| {
                    refused.push((i, e));
                    // A placeholder the engine refuses at once (empty key), moving nothing.
                    CheckRequest::new("", "")
                })
            })
            .collect();
        // Latency is for metrics only, never for a decision (those read the core's clock).
        let started = tokio::time::Instant::now();
        let mut verdicts = self.state.engine.check_many(&requests).await;
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
        for (i, e) in refused {
            verdicts[i] = Err(e);
        }

        metrics.record_verdicts(verdicts.iter().filter_map(|o| o.as_ref().ok()), per_item);
        let results = verdicts
            .iter()
            .map(|outcome| self.answer(outcome, per_item))
            .collect::<Vec<CheckResult>>();
        Ok(Response::new(CheckResponse { results }))
    }
}

impl RateLimiterService {
    /// One item's result; a failure is counted here, a verdict by the caller.
    fn answer(&self, outcome: &Result<Verdict, CheckError>, took: Duration) -> CheckResult {
        match outcome {
            Ok(v) => {
                let mut result = convert::verdict_result(v);
                // Each denied item draws its own wait, so the callers
                // behind one batch do not come back together either.
                let jitter = self.state.config.retry_jitter;
                if let Some(ms) = jittered_wait(!v.allowed, result.retry_after_ms, jitter) {
                    result.retry_after_ms = ms;
                }
                result
            }
            Err(f) => {
                self.state.metrics.record_failure(f, took);
                convert::error_result(f)
            }
        }
    }
}
