//! envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit: Envoy's RLS on weir's check path.

use std::sync::Arc;
use std::time::Duration;

use tonic::{Request as GrpcRequest, Response, Status};
use weir_core::{CheckError, CheckResponse, Verdict};
use weir_proto::rls_wire::rate_limit_service_server::RateLimitService;
use weir_proto::rls_wire::{Encoded, Request as RlsCall};

use super::envoy_map::{self, MapError};
use super::traced;
use crate::jitter::jittered_ms;
use crate::state::NodeState;

pub struct EnvoyRls {
    state: Arc<NodeState>,
}

impl EnvoyRls {
    pub fn new(state: Arc<NodeState>) -> Self {
        EnvoyRls { state }
    }

    /// Counts descriptor `i`'s outcome in the metrics; a failure comes
    /// back as the status the request is answered with.
    fn record(
        &self,
        i: usize,
        outcome: Result<Verdict, CheckError>,
        took: Duration,
    ) -> Result<Verdict, Status> {
        let metrics = &self.state.metrics;
        // An override is counted under one label whatever its value,
        // as every edge counts it (`Rule::label`).
        match outcome {
            Ok(v) => {
                metrics.record_verdict(&v, took);
                Ok(v)
            }
            Err(f) => {
                metrics.record_failure(&f, took);
                Err(failure_status(i, &f))
            }
        }
    }

    /// The answer's bytes, written from the verdicts (`envoy_map::wire`).
    fn respond(&self, verdicts: &[Verdict]) -> Response<Encoded> {
        let jitter = self.state.config.retry_jitter;
        let wait = |answer: &CheckResponse| jittered_ms(answer, jitter);
        Response::new(Encoded(envoy_map::wire::response(verdicts, wait)))
    }

    /// A request with refunds among its descriptors, each decided in
    /// order: a refund is given back at its counters' nodes and answered
    /// OK with no limit shown (it is no check, so it is never OVER_LIMIT
    /// and counts in no check metric); the rest are checked as usual.
    async fn with_refunds(
        &self,
        checks: &[weir_core::CheckRequest],
        refunds: &[bool],
    ) -> Result<Response<Encoded>, Status> {
        let engine = &self.state.engine;
        let mut verdicts = Vec::with_capacity(checks.len());
        for (i, (c, &refund)) in checks.iter().zip(refunds).enumerate() {
            let started = tokio::time::Instant::now();
            let verdict = if refund {
                engine.refund(c).await.map_err(|f| failure_status(i, &f))?;
                Verdict {
                    allowed: true,
                    applied: Vec::new(),
                }
            } else {
                let outcome = engine.check(c).await;
                self.record(i, outcome, started.elapsed())?
            };
            verdicts.push(verdict);
        }
        Ok(self.respond(&verdicts))
    }

    fn refuse(&self, e: MapError) -> Status {
        self.state.metrics.record_rejected_input(e.field);
        Status::invalid_argument(e.to_string())
    }
}

fn failure_status(i: usize, f: &CheckError) -> Status {
    if f.is_input() {
        Status::invalid_argument(MapError::descriptor(i, f).to_string())
    } else {
        Status::unavailable(format!("descriptors[{i}]: {f}"))
    }
}

#[tonic::async_trait]
impl RateLimitService for EnvoyRls {
    async fn should_rate_limit(
        &self,
        request: GrpcRequest<RlsCall>,
    ) -> Result<Response<Encoded>, Status> {
        traced(&self.state, "weir.check.rls", request, |call| {
            self.decide(call)
        })
        .await
    }
}

impl EnvoyRls {
    async fn decide(&self, call: RlsCall) -> Result<Response<Encoded>, Status> {
        let max = self.state.config.limits.max_batch_items;
        // The message and the request read from it end here, before the
        // decision awaits: its checks own what they need of it.
        let (checks, refunds) = {
            // Counted before it is decoded, so a request over the limit
            // costs its count and no more (rls_wire::Request).
            envoy_map::within_limit(call.descriptors(), max).map_err(|e| self.refuse(e))?;
            let decoded = call.decode()?;
            let checks = envoy_map::to_checks(&decoded, max).map_err(|e| self.refuse(e))?;
            (checks, envoy_map::refunds(&decoded))
        };
        let engine = &self.state.engine;
        // Cost against the rule set's limits is the one input check that needs
        // the rules. With several descriptors it runs for every one before any
        // is decided, so a refused request consumes nothing. (A rule change
        // landing between here and the decision can still refuse one
        // descriptor after others were counted; the window is one rules swap
        // wide.) A lone descriptor is refused by its own decision before it
        // consumes anything, with the same status, so it is not selected twice.
        if checks.len() > 1 || refunds.is_some() {
            for (i, c) in checks.iter().enumerate() {
                let refund = refunds.as_ref().is_some_and(|r| r[i]);
                let valid = if refund {
                    // Held to a check of cost 1: a refund may name more
                    // than its limit holds.
                    engine.limiter().refund_targets(c).map(drop)
                } else if c.limit.is_none() {
                    engine.limiter().select(c).map(drop)
                } else {
                    Ok(())
                };
                valid.map_err(|e| self.refuse(MapError::descriptor(i, &e)))?;
            }
        }
        if let Some(refunds) = refunds {
            return self.with_refunds(&checks, &refunds).await;
        }

        // Latency is for metrics only, never for a decision.
        let started = tokio::time::Instant::now();
        // A lone descriptor (most Envoy routes send one) skips the batch
        // machinery: decided here, it needs no future, no slot vectors and
        // no vector of outcomes.
        if let [one] = checks.as_slice() {
            let outcome = engine.check(one).await;
            let verdict = self.record(0, outcome, started.elapsed())?;
            return Ok(self.respond(std::slice::from_ref(&verdict)));
        }
        let outcomes = engine.check_many(&checks).await;
        let per_item = started.elapsed() / u32::try_from(checks.len()).unwrap_or(u32::MAX);
        let mut verdicts: Vec<Verdict> = Vec::with_capacity(outcomes.len());
        let mut failed = None;
        for (i, o) in outcomes.into_iter().enumerate() {
            match self.record(i, o, per_item) {
                Ok(v) => verdicts.push(v),
                Err(status) => {
                    failed.get_or_insert(status);
                }
            }
        }
        if let Some(status) = failed {
            return Err(status);
        }
        Ok(self.respond(&verdicts))
    }
}
