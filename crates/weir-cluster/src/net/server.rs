//! The `weir.v1.Peer` gRPC server: a thin adapter from tonic to the node's `PeerHandler`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tonic::{Request, Response, Status};
use weir_proto::weir::v1::peer_server::Peer;
use weir_proto::weir::v1::{
    DecideRequest, DecideResponse, HandoffRequest, HandoffResponse, MembersRequest,
    MembersResponse, NodeSummary, PullRulesRequest, PushRulesResponse, ReplicateRequest,
    ReplicateResponse, RuleSet as WireRuleSet, SummaryRequest, SyncRequest, SyncResponse,
    WriteTierRequest, WriteTierResponse,
};

use crate::handler::PeerHandler;

pub struct PeerService {
    handler: Arc<PeerHandler>,
    killed: Arc<AtomicBool>,
}

impl PeerService {
    pub fn new(handler: Arc<PeerHandler>, killed: Arc<AtomicBool>) -> Self {
        PeerService { handler, killed }
    }

    /// A killed member answers no call, even one on a connection that
    /// outlived it: it is gone, as a killed process is.
    fn alive(&self) -> Result<(), Status> {
        if self.killed.load(Ordering::SeqCst) {
            return Err(Status::unavailable("this node was killed"));
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl Peer for PeerService {
    async fn decide(&self, r: Request<DecideRequest>) -> Result<Response<DecideResponse>, Status> {
        self.alive()?;
        Ok(Response::new(self.handler.decide(r.into_inner()).await))
    }

    async fn handoff(
        &self,
        r: Request<HandoffRequest>,
    ) -> Result<Response<HandoffResponse>, Status> {
        self.alive()?;
        self.handler
            .handoff(r.into_inner())
            .await
            .map(Response::new)
            .map_err(|_| Status::failed_precondition(crate::link::LEAVING))
    }

    async fn push_rules(
        &self,
        r: Request<WireRuleSet>,
    ) -> Result<Response<PushRulesResponse>, Status> {
        self.alive()?;
        self.handler
            .push_rules(r.into_inner())
            .await
            .map(Response::new)
            .map_err(|e| Status::invalid_argument(e.to_string()))
    }

    async fn pull_rules(
        &self,
        r: Request<PullRulesRequest>,
    ) -> Result<Response<WireRuleSet>, Status> {
        self.alive()?;
        Ok(Response::new(self.handler.pull_rules(r.into_inner()).await))
    }

    async fn write_tier(
        &self,
        r: Request<WriteTierRequest>,
    ) -> Result<Response<WriteTierResponse>, Status> {
        self.alive()?;
        Ok(Response::new(self.handler.write_tier(r.into_inner()).await))
    }

    async fn sync_counts(&self, r: Request<SyncRequest>) -> Result<Response<SyncResponse>, Status> {
        self.alive()?;
        self.handler
            .sync_counts(r.into_inner())
            .map(Response::new)
            .map_err(|e| Status::failed_precondition(e.to_string()))
    }

    async fn replicate(
        &self,
        r: Request<ReplicateRequest>,
    ) -> Result<Response<ReplicateResponse>, Status> {
        self.alive()?;
        Ok(Response::new(self.handler.replicate(r.into_inner())))
    }

    async fn members(
        &self,
        _r: Request<MembersRequest>,
    ) -> Result<Response<MembersResponse>, Status> {
        self.alive()?;
        Ok(Response::new(self.handler.members()))
    }

    async fn summary(&self, r: Request<SummaryRequest>) -> Result<Response<NodeSummary>, Status> {
        self.alive()?;
        Ok(Response::new(self.handler.summary(r.into_inner())))
    }
}
