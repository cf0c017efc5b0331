//! The raw node-to-node calls (`weir.v1.Peer`), as one trait: gRPC in a node, an in-memory network in tests and simulations.

use std::time::Duration;

use futures::future::BoxFuture;
use weir_proto::weir::v1::{
    DecideRequest, DecideResponse, HandoffRequest, HandoffResponse, MembersResponse, NodeSummary,
    PullRulesRequest, PushRulesResponse, ReplicateRequest, ReplicateResponse,
    RuleSet as WireRuleSet, SummaryRequest, SyncRequest, SyncResponse, WriteTierRequest,
    WriteTierResponse,
};

use crate::topology::membership::NodeIdentity;

/// Why a peer call produced no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerFailure {
    /// No answer within the deadline; the peer may still have acted on it.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The connection was refused or reset: evidence the peer is not there.
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The peer answered with an error status (unauthenticated, malformed).
    #[error("refused: {0}")]
    Refused(String),
    /// Too many ops queued for this peer already.
    #[error("too many calls queued for this owner")]
    Overloaded,
    /// Queued in this gateway past the deadline; never sent.
    #[error("still queued after {0:?}")]
    Queued(Duration),
    /// The peer is leaving the cluster and took nothing: a handoff it
    /// turned away goes to the owner on a ring without it.
    #[error("{LEAVING}")]
    Leaving,
}

/// What a leaving node answers a handoff with, on every transport.
pub const LEAVING: &str = "this node is leaving";

/// One unary call per method, each bounded by `deadline`. A failure says
/// why there is no answer; the call may still have reached the peer.
pub trait Link: Send + Sync + 'static {
    fn decide(
        &self,
        to: &NodeIdentity,
        req: DecideRequest,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<DecideResponse, PeerFailure>>;

    fn handoff(
        &self,
        to: &NodeIdentity,
        req: HandoffRequest,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<HandoffResponse, PeerFailure>>;

    fn push_rules(
        &self,
        to: &NodeIdentity,
        set: WireRuleSet,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<PushRulesResponse, PeerFailure>>;

    /// A tier's write made by `to`, the tier's owner.
    fn write_tier(
        &self,
        to: &NodeIdentity,
        req: WriteTierRequest,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<WriteTierResponse, PeerFailure>>;

    /// What `to` holds that differs from the writes `have` names.
    fn pull_rules(
        &self,
        to: &NodeIdentity,
        have: PullRulesRequest,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<WireRuleSet, PeerFailure>>;

    fn sync_counts(
        &self,
        to: &NodeIdentity,
        req: SyncRequest,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<SyncResponse, PeerFailure>>;

    fn members(
        &self,
        to: &NodeIdentity,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<MembersResponse, PeerFailure>>;

    fn replicate(
        &self,
        to: &NodeIdentity,
        req: ReplicateRequest,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<ReplicateResponse, PeerFailure>>;

    /// Forgets connections to peers `keep` rejects (members that left).
    fn retain(&self, keep: &dyn Fn(&str) -> bool);

    fn summary(
        &self,
        to: &NodeIdentity,
        req: SummaryRequest,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<NodeSummary, PeerFailure>>;
}
