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

/// Where the owner protocol's ops go. A peer is named by identity (its id
/// keys queues and connections, its gRPC address is dialled).
pub trait Peers: Send + Sync + 'static {
    /// One counter op for `to`, carried with whatever else is queued for it;
    /// resolves with the owner's result or why there is none, within `deadline`.
    fn decide(
        &self,
        to: &NodeIdentity,
        op: CounterOp,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<OpResult, PeerFailure>>;

    /// Queues `op` for `to` with nobody waiting for the answer (a refund).
    fn send(&self, to: &NodeIdentity, op: CounterOp);

    /// Forgets connections and queues of peers `keep` rejects (members that left).
    fn retain(&self, keep: &dyn Fn(&str) -> bool);
}
