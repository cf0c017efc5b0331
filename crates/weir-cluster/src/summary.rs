//! `Peer/Summary`: what a node tells a peer's dashboard about itself, and one round of asking every member for it.

use std::time::Duration;

use futures::future::join_all;
use weir_proto::weir::v1::{ActivitySecond, NodeSummary, SummaryRequest};

use crate::link::{Link, PeerFailure};
use crate::stats::MemberStatus;
use crate::topology::membership::NodeIdentity;

/// The most seconds of activity one summary carries: the five minutes a
/// dashboard draws.
pub const MAX_SUMMARY_SECONDS: u32 = 300;

/// Per-second activity the embedding node keeps beside the cluster (its
/// checks per rule). The cluster carries it in summaries and never reads it.
pub trait ActivitySource: Send + Sync + 'static {
    /// The last `seconds` whole seconds, oldest first.
    fn recent(&self, seconds: u32) -> Vec<ActivitySecond>;
}

/// What one member said about itself, or why it said nothing.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Answered(NodeSummary),
    /// Down in this node's view, so not asked.
    Down,
    /// Live in this node's view but no answer in time: state unknown.
    NoAnswer(PeerFailure),
}

/// One member as this node sees it, and its reply.
#[derive(Debug, Clone)]
pub struct MemberSummary {
    pub member: MemberStatus,
    pub reply: Reply,
}

/// Asks every live member but this one at once, each within `deadline`;
/// `local` is this node's own summary, so the round costs no call to itself.
pub(crate) async fn ask_all(
    link: &dyn Link,
    members: Vec<(MemberStatus, NodeIdentity)>,
    local: NodeSummary,
    seconds: u32,
    deadline: Duration,
) -> Vec<MemberSummary> {
    let asks = members.into_iter().map(|(member, identity)| {
        let me = member.id == local.node;
        let call = (!me && member.state.is_live())
            .then(|| link.summary(&identity, SummaryRequest { seconds }, deadline));
        let local = &local;
        async move {
            let reply = match call {
                _ if me => Reply::Answered(local.clone()),
                Some(call) => call.await.map_or_else(Reply::NoAnswer, Reply::Answered),
                None => Reply::Down,
            };
            MemberSummary { member, reply }
        }
    });
    join_all(asks).await
}
