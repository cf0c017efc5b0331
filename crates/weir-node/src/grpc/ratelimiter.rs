//! weir.v1.RateLimiter/Check: a batch of checks, one verdict (or item error) per item.
//!
//! Served on weir-proto's hand-written codec (`check_wire`): the items
//! arrive as checks, and each answer is written to the wire as it is made.

use std::sync::Arc;
use std::time::Duration;

use tonic::{Request as GrpcRequest, Response, Status};
use weir_core::{CheckError, CheckRequest, Verdict};
use weir_proto::check_wire::rate_limiter_server::RateLimiter;
use weir_proto::check_wire::{Checks, Request as CheckCall, Response as CheckResponse};
use weir_proto::convert;

use super::traced;
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
        traced(&self.state, "weir.check.grpc", request, |call| {
            self.decide(call)
        })
        .await
    }
}

impl RateLimiterService {
    async fn decide(&self, call: CheckCall) -> Result<Response<CheckResponse>, Status> {
        // The batch is measured before any item is decoded, so one over
        // the limit costs its count and no more (check_wire::Request).
        let max = self.state.config.limits.max_batch_items;
        let metrics = &self.state.metrics;
        if call.items() == 0 {
            metrics.record_rejected_input("items");
            return Err(Status::invalid_argument("items: must not be empty"));
        }
        if call.items() > max {
            metrics.record_rejected_input("items");
            return Err(Status::invalid_argument(format!(
                "items: at most {max} per call, got {}",
                call.items()
            )));
        }
        // An item whose carried limit cannot limit is refused alone, like
        // any other bad item, and stands as an empty check the engine
        // refuses at once, moving nothing; the rest are decided together.
        let Checks {
            checks: requests,
            refused,
            refunds,
        } = call.decode()?;
        if !refunds.is_empty() {
            return Ok(Response::new(
                self.with_refunds(&requests, refused, &refunds).await,
            ));
        }

        // One item skips the batch machinery (the slot vectors, the label
        // tally), as a lone RLS descriptor does.
        if requests.len() == 1 {
            let (outcome, elapsed) = match refused.into_iter().next() {
                None => {
                    let started = tokio::time::Instant::now();
                    let outcome = self.state.engine.check(&requests[0]).await;
                    (outcome, started.elapsed())
                }
                Some((_, e)) => (Err(e), Duration::ZERO),
            };
            if let Ok(v) = &outcome {
                metrics.record_verdict(v, elapsed);
            }
            let mut results = CheckResponse::with_capacity(1);
            self.answer(&mut results, &outcome, elapsed);
            return Ok(Response::new(results));
        }

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
        let mut results = CheckResponse::with_capacity(verdicts.len());
        for outcome in &verdicts {
            self.answer(&mut results, outcome, per_item);
        }
        Ok(Response::new(results))
    }
}

impl RateLimiterService {
    /// A batch with refunds among its items, each taken in order: a refund
    /// is given back at its counters' nodes and answered allowed with no
    /// rule (it is no check, and counts in no check metric); the rest are
    /// checked one by one.
    async fn with_refunds(
        &self,
        requests: &[CheckRequest],
        refused: Vec<(usize, CheckError)>,
        refunds: &[usize],
    ) -> CheckResponse {
        let engine = &self.state.engine;
        let mut results = CheckResponse::with_capacity(requests.len());
        for (i, req) in requests.iter().enumerate() {
            let started = tokio::time::Instant::now();
            let outcome = match refused.iter().find(|(at, _)| *at == i) {
                Some((_, e)) => Err(e.clone()),
                None if refunds.binary_search(&i).is_ok() => {
                    engine.refund(req).await.map(|_| Verdict {
                        allowed: true,
                        applied: Vec::new(),
                    })
                }
                None => {
                    let outcome = engine.check(req).await;
                    if let Ok(v) = &outcome {
                        self.state.metrics.record_verdict(v, started.elapsed());
                    }
                    outcome
                }
            };
            self.answer(&mut results, &outcome, started.elapsed());
        }
        results
    }

    /// Appends one item's result; a failure is counted here, a verdict by the caller.
    fn answer(
        &self,
        results: &mut CheckResponse,
        outcome: &Result<Verdict, CheckError>,
        took: Duration,
    ) {
        match outcome {
            Ok(v) => {
                let mut answer = convert::verdict_answer(v);
                // Each denied item draws its own wait, so the callers
                // behind one batch do not come back together either.
                let jitter = self.state.config.retry_jitter;
                if let Some(ms) = jittered_wait(!v.allowed, answer.retry_after_ms, jitter) {
                    answer.retry_after_ms = ms;
                }
                results.push_answer(&answer);
            }
            Err(f) => {
                self.state.metrics.record_failure(f, took);
                results.push_result(&convert::error_result(f));
            }
        }
    }
}
