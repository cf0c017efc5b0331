//! The `weir.v1.Peer` server: what a node does for its peers.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};
use weir_core::{CheckError, Rule};
use weir_proto::weir::v1::op_result::Outcome;
use weir_proto::weir::v1::peer_server::Peer;
use weir_proto::weir::v1::{
    CounterOp, DecideRequest, DecideResponse, Decision as WireDecision, HandoffRequest,
    HandoffResponse, MembersRequest, MembersResponse, OpKind, OpResult, PeerError, PeerErrorCode,
    PullRulesRequest, PushRulesResponse, RuleSet as WireRuleSet, SyncRequest, SyncResponse,
};

use super::owner::decision_to_wire;
use super::status::bump;
use super::{handoff, Inner, LocalOutcome};

/// Serves peers: decides the ops of the keys this node owns, takes over
/// handed-off counters, and exchanges rule sets.
pub struct PeerService {
    inner: Arc<Inner>,
}

impl PeerService {
    pub(crate) fn new(inner: Arc<Inner>) -> Self {
        PeerService { inner }
    }
}

fn error(code: PeerErrorCode, field: &str, message: impl Into<String>) -> OpResult {
    OpResult {
        outcome: Some(Outcome::Error(PeerError {
            code: code as i32,
            field: field.to_string(),
            message: message.into(),
        })),
    }
}

fn check_error(e: &CheckError) -> OpResult {
    let code = match e {
        CheckError::Invalid { .. } => PeerErrorCode::InvalidCost,
        CheckError::CostExceedsLimit { .. } => PeerErrorCode::CostExceedsLimit,
        CheckError::UnknownRule(_) => PeerErrorCode::UnknownRule,
        CheckError::StoreFull { .. } => PeerErrorCode::StoreFull,
    };
    error(code, e.field().unwrap_or(""), e.to_string())
}

/// The answer to a refund: nothing to report beyond "done".
fn refunded() -> OpResult {
    OpResult {
        outcome: Some(Outcome::Decision(WireDecision {
            allowed: true,
            ..WireDecision::default()
        })),
    }
}

impl Inner {
    /// Sends an op that reached a leaving node on to the key's new owner.
    async fn forward(&self, op: CounterOp) -> OpResult {
        let ring = self.routing_ring();
        let Some((id, addr)) = ring
            .owner(&op.key)
            .filter(|o| o.id != self.me)
            .map(|o| (o.id.clone(), o.grpc))
        else {
            return error(
                PeerErrorCode::NotOwner,
                "key",
                "no other member to forward to",
            );
        };
        if op.kind() == OpKind::Refund {
            self.batchers.send_and_forget(&id, addr, op);
            return refunded();
        }
        let answer = match self.batchers.submit(&id, addr, op) {
            Ok(rx) => tokio::time::timeout(self.config.owner_deadline, rx).await,
            Err(_) => return error(PeerErrorCode::NotOwner, "key", "new owner overloaded"),
        };
        match answer {
            Ok(Ok(Ok(result))) => result,
            _ => error(
                PeerErrorCode::NotOwner,
                "key",
                "the key's new owner did not answer",
            ),
        }
    }
}

#[tonic::async_trait]
impl Peer for PeerService {
    async fn decide(
        &self,
        request: Request<DecideRequest>,
    ) -> Result<Response<DecideResponse>, Status> {
        let req = request.into_inner();
        let inner = &self.inner;
        let mine = inner.limiter.rules().version();
        let ring = inner.ring.load_full();
        if req.rules_version > mine {
            if let Some(m) = ring.members().iter().find(|m| m.id == req.from_node) {
                inner.net.hint_rules(&m.id, m.grpc, req.rules_version);
            }
        }
        let mut results = Vec::with_capacity(req.ops.len());
        let mut moved = Vec::new();
        for (i, op) in req.ops.iter().enumerate() {
            let result = match op.kind() {
                OpKind::Consume if op.key.is_empty() => {
                    Some(error(PeerErrorCode::InvalidKey, "key", "must not be empty"))
                }
                OpKind::Consume if op.carried.is_some() => Some(decide_carried(inner, op)),
                OpKind::Consume => match inner.consume_local(&op.rule, &op.key, op.cost) {
                    LocalOutcome::Decided(Ok(d)) => {
                        // The sender's ring is behind ours: decide anyway
                        // (bouncing could loop between two stale views) and
                        // sweep the counter to its owner shortly.
                        if ring.owner_id(&op.key).is_some_and(|o| o != inner.me) {
                            bump(&inner.net.stats.strays, 1);
                            inner.strays.store(true, Ordering::Relaxed);
                        }
                        Some(OpResult {
                            outcome: Some(Outcome::Decision(decision_to_wire(&d))),
                        })
                    }
                    LocalOutcome::Decided(Err(e)) => Some(check_error(&e)),
                    LocalOutcome::Moved => None,
                },
                OpKind::Refund if inner.is_leaving() => None,
                OpKind::Refund => {
                    inner.limiter.refund(&op.rule, &op.key, op.at, op.cost);
                    Some(refunded())
                }
            };
            if result.is_none() {
                moved.push(i);
            }
            results.push(result);
        }
        if !moved.is_empty() {
            inner.handover_done().await;
            let forwards = moved.iter().map(|&i| inner.forward(req.ops[i].clone()));
            let answers = futures::future::join_all(forwards).await;
            for (&i, answer) in moved.iter().zip(answers) {
                results[i] = Some(answer);
            }
        }
        Ok(Response::new(DecideResponse {
            results: results.into_iter().map(Option::unwrap_or_default).collect(),
            rules_version: mine,
        }))
    }

    async fn handoff(
        &self,
        request: Request<HandoffRequest>,
    ) -> Result<Response<HandoffResponse>, Status> {
        let req = request.into_inner();
        let n = req.counters.len();
        let limiter = self.inner.limiter.clone();
        let counters = req.counters;
        let accepted = tokio::task::spawn_blocking(move || handoff::absorb(&limiter, counters))
            .await
            .map_err(|_| Status::internal("handoff task failed"))?;
        let stats = &self.inner.net.stats;
        bump(&stats.handoffs_received, 1);
        bump(&stats.keys_moved_in, u64::from(accepted));
        tracing::info!(from = %req.from_node, counters = n, accepted, "took over counters");
        Ok(Response::new(HandoffResponse { accepted }))
    }

    async fn push_rules(
        &self,
        request: Request<WireRuleSet>,
    ) -> Result<Response<PushRulesResponse>, Status> {
        let wire = request.into_inner();
        let inner = &self.inner;
        let applied = inner
            .adopt_rules(&wire, &wire.origin)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        Ok(Response::new(PushRulesResponse {
            version: inner.limiter.rules().version(),
            applied,
        }))
    }

    async fn pull_rules(
        &self,
        _request: Request<PullRulesRequest>,
    ) -> Result<Response<WireRuleSet>, Status> {
        Ok(Response::new(self.inner.rules.current(&self.inner.limiter)))
    }

    async fn sync_counts(
        &self,
        request: Request<SyncRequest>,
    ) -> Result<Response<SyncResponse>, Status> {
        let req = request.into_inner();
        let applied = self.inner.gossip.apply(&req.from_node, &req.deltas);
        Ok(Response::new(SyncResponse {
            applied: u32::try_from(applied).unwrap_or(u32::MAX),
        }))
    }

    async fn members(
        &self,
        _request: Request<MembersRequest>,
    ) -> Result<Response<MembersResponse>, Status> {
        let inner = &self.inner;
        let live = if inner.membership.is_running() {
            inner
                .membership
                .view()
                .members
                .into_iter()
                .map(|m| m.id)
                .collect()
        } else {
            Vec::new()
        };
        Ok(Response::new(MembersResponse {
            node: inner.me.clone(),
            live,
        }))
    }
}

/// A limit the request carried (an Envoy override), rebuilt from the op and
/// decided on this node's counters for such limits.
fn decide_carried(inner: &Inner, op: &CounterOp) -> OpResult {
    let Some(c) = &op.carried else {
        return error(PeerErrorCode::Unspecified, "carried", "no carried limit");
    };
    let window = Duration::from_nanos(c.window_ns);
    match Rule::carried(&op.rule, c.limit, window) {
        Ok(rule) => match inner.limiter.check_adhoc(&rule, &op.key, op.cost) {
            Ok(d) => OpResult {
                outcome: Some(Outcome::Decision(decision_to_wire(&d))),
            },
            Err(e) => check_error(&e),
        },
        Err(e) => error(PeerErrorCode::Unspecified, "carried", e.reason),
    }
}
