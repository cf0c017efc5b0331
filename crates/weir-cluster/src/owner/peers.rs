//! The owner protocol's one seam to the network: send a counter op to its owner.
//!
//! Ops are the `weir.v1.Peer` protobuf structs (plain data; the mapping to
//! and from weir-core's types is `net::wire`). In a node, `net::Batchers`
//! implements this by carrying concurrent ops to one owner in one call over
//! a `net::Link` (gRPC, or the in-memory network of tests and simulations).

use std::time::Duration;

use futures::future::BoxFuture;
use weir_proto::weir::v1::{CounterOp, OpResult};

pub use crate::link::PeerFailure;

use crate::topology::membership::NodeIdentity;

/// What became of one op sent to its owner.
pub enum Reply {
    /// The owner's result.
    Answered(OpResult),
    /// Sent, but not answered within the deadline: the owner may still
    /// decide it. The answer, if it comes, is the late one's to reconcile.
    Late(LateAnswer),
    /// No decision at the owner: the op never left this gateway (queue
    /// full, or queued past the deadline) or the connection was refused.
    /// `Timeout` here means the call itself failed late: sent, outcome unknown.
    Failed(PeerFailure),
}

/// How long a Decide call may take: answers after a caller's deadline still
/// arrive within it and are reconciled; one later than this is not.
pub const LATE_WINDOW: Duration = Duration::from_secs(1);

/// An owner's answer still to come, if it comes at all.
pub struct LateAnswer(pub BoxFuture<'static, Option<OpResult>>);

/// Where the owner protocol's ops go. A peer is named by identity (its id
/// keys queues and connections, its gRPC address is dialled).
pub trait Peers: Send + Sync + 'static {
    /// One counter op for `to`, carried with whatever else is queued for
    /// it. `deadline` bounds the time queued in this gateway and, apart,
    /// the time from sending to the answer; both are measured.
    fn decide(
        &self,
        to: &NodeIdentity,
        op: CounterOp,
        deadline: Duration,
    ) -> BoxFuture<'static, Reply>;

    /// Queues `op` for `to` with nobody waiting for the answer (a refund, a charge).
    fn send(&self, to: &NodeIdentity, op: CounterOp);

    /// Runs `then` with a late answer when it arrives; nothing if it never does.
    fn on_late(&self, late: LateAnswer, then: Box<dyn FnOnce(OpResult) + Send>);

    /// Forgets connections and queues of peers `keep` rejects (members that left).
    fn retain(&self, keep: &dyn Fn(&str) -> bool);
}
