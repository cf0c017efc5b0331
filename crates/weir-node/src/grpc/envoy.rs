//! envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit: Envoy's RLS on weir's check path.

use std::sync::Arc;

use tonic::{Request as GrpcRequest, Response, Status};
use weir_core::{CheckError, CheckResponse, Verdict};
use weir_proto::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use weir_proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

use super::envoy_map::{self, MapError};
use crate::jitter::jittered_ms;
use crate::state::NodeState;

pub struct EnvoyRls {
    state: Arc<NodeState>,
}

impl EnvoyRls {
    pub fn new(state: Arc<NodeState>) -> Self {
        EnvoyRls { state }
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
        request: GrpcRequest<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let req = request.into_inner();
        let engine = &self.state.engine;
        let max = self.state.config.limits.max_batch_items;
        let checks = envoy_map::to_checks(&req, max).map_err(|e| self.refuse(e))?;
        // Cost against the rule set's limits is the one input check that needs
        // the rules. With several descriptors it runs for every one before any
        // is decided, so a refused request consumes nothing. (A rule change
        // landing between here and the decision can still refuse one
        // descriptor after others were counted; the window is one rules swap
        // wide.) A lone descriptor is refused by its own decision before it
        // consumes anything, with the same status, so it is not selected twice.
        if checks.len() > 1 {
            for (i, c) in checks.iter().enumerate().filter(|(_, c)| c.limit.is_none()) {
                engine
                    .limiter()
                    .select(c)
                    .map_err(|e| self.refuse(MapError::descriptor(i, &e)))?;
            }
        }

        // Latency is for metrics only, never for a decision.
        let started = tokio::time::Instant::now();
        // A lone descriptor (most Envoy routes send one) skips the batch
        // machinery: decided here, it needs no future and no slot vectors.
        let outcomes = match checks.as_slice() {
            [one] => vec![engine.check(one).await],
            many => engine.check_many(many).await,
        };
        let per_item = started.elapsed() / u32::try_from(checks.len()).unwrap_or(u32::MAX);

        let mut verdicts: Vec<Verdict> = Vec::with_capacity(outcomes.len());
        let mut failed = None;
        for (i, (o, c)) in outcomes.into_iter().zip(&checks).enumerate() {
            match o {
                Ok(v) => {
                    if c.limit.is_some() {
                        self.state.metrics.record_override_verdict(&v, per_item);
                    } else {
                        self.state.metrics.record_verdict(&v, per_item);
                    }
                    verdicts.push(v);
                }
                Err(f) => {
                    self.state.metrics.record_failure(&f, per_item);
                    failed.get_or_insert((i, f));
                }
            }
        }
        if let Some((i, f)) = failed {
            return Err(failure_status(i, &f));
        }
        let jitter = self.state.config.retry_jitter;
        let wait = |answer: &CheckResponse| jittered_ms(answer, jitter);
        Ok(Response::new(envoy_map::to_response(&verdicts, wait)))
    }
}
