//! weir.v1.RateLimiter/Check: a batch of checks, one verdict (or item error) per item.

use std::sync::Arc;

use tonic::{Request as GrpcRequest, Response, Status};
use weir_core::{CheckError, CheckRequest};
use weir_proto::convert;
use weir_proto::weir::v1::rate_limiter_server::RateLimiter;
use weir_proto::weir::v1::{CheckRequest as CheckCall, CheckResponse, CheckResult};

use crate::jitter::jittered_ms;
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

        // An item whose carried limit cannot limit is refused alone, like
        // any other bad item; the rest are decided together.
        let (requests, refused): (Vec<CheckRequest>, Vec<Option<CheckError>>) = items
            .into_iter()
            .map(|item| match convert::request(item) {
                Ok(r) => (r, None),
                // A placeholder the engine refuses at once (empty key), moving nothing.
                Err(e) => (CheckRequest::new("", ""), Some(e)),
            })
            .unzip();
        // Latency is for metrics only, never for a decision (those read the core's clock).
        let started = tokio::time::Instant::now();
        // One item skips the batch machinery, as a lone RLS descriptor does.
        let mut verdicts = match requests.as_slice() {
            [one] => vec![self.state.engine.check(one).await],
            many => self.state.engine.check_many(many).await,
        };
        for (v, e) in verdicts.iter_mut().zip(refused) {
            if let Some(e) = e {
                *v = Err(e);
            }
        }
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
        let jitter = self.state.config.retry_jitter;
        let results = verdicts
            .iter()
            .map(|outcome| match outcome {
                Ok(v) => {
                    let answer = v.response();
                    let mut result = convert::result(&answer);
                    // Each denied item draws its own wait, so the callers
                    // behind one batch do not come back together either.
                    if let Some(ms) = jittered_ms(&answer, jitter) {
                        result.retry_after_ms = ms;
                    }
                    result
                }
                Err(f) => {
                    metrics.record_failure(f, per_item);
                    convert::error_result(f)
                }
            })
            .collect::<Vec<CheckResult>>();
        Ok(Response::new(CheckResponse { results }))
    }
}
