//! The owner protocol's one seam to the network: send a counter op to its owner.
//!
//! Ops are the `weir.v1.Peer` protobuf structs (plain data; the mapping to
//! and from weir-core's types is `net::wire`). In a node, `net::Batchers`
//! implements this by carrying concurrent ops to one owner in one call over
//! a `net::Link` (gRPC, or the in-memory network of tests and simulations).

use std::time::Duration;

use futures::future::BoxFuture;
use weir_core::Nanos;
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

/// How long past its deadline a Decide call's answer is still listened
/// for and reconciled. An owner counts an op only until its fence, half a
/// late window past the deadline ([`expiry`]); the answer to one counted
/// just before it must still reach the gateway, which a stall of either
/// process (a starved CPU, a pause) can delay by seconds. Nothing waits on
/// it but the reconciler, and a call's slot is freed at the late window.
pub const HEARD_FOR: Duration = Duration::from_secs(10);

/// When a consume sent at `sent` (the gateway's clock) with `deadline`
/// stops being counted anywhere (`CounterOp.expires_at`): half a late
/// window past the deadline.
///
/// Between the deadline and the expiry an owner may still count the op;
/// its answer then reaches the gateway within the late window (the call
/// lasts the deadline plus a whole late window), and an admission the
/// gateway refused is refunded (`Remote::slow`). From the expiry on, the
/// op is fenced: a node that reads it later (an owner stalled for
/// seconds, SIGSTOP-like, then resumed; a queue that held it) answers
/// EXPIRED and counts nothing, so however long the stall, a check the
/// gateway refused for now is never counted past the window the refund
/// covers.
///
/// An absolute time on the unix clock, not a remaining budget the owner
/// turns into a time on receipt: a stalled owner reads the op only once it
/// resumes, so a budget counted from then would restart after the stall
/// and the op would be counted. The price is clock skew between nodes,
/// which the half late window absorbs: an owner whose clock is behind by
/// up to that counts an op that much later, still answered while the
/// gateway listens and refunded; one ahead by up to that fences nothing
/// the gateway still waits for (the deadline is milliseconds). Peers'
/// authentication already needs clocks within 30 s; NTP keeps them
/// within milliseconds.
pub fn expiry(sent: Nanos, deadline: Duration) -> Nanos {
    let fenced = deadline.saturating_add(LATE_WINDOW / 2);
    sent.saturating_add(u64::try_from(fenced.as_nanos()).unwrap_or(u64::MAX))
}

/// Whether `op` is past its expiry at `now` ([`expiry`]).
pub fn expired(op: &CounterOp, now: Nanos) -> bool {
    op.expires_at != 0 && now > op.expires_at
}

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
