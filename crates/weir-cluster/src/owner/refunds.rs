//! Giving back an admission an owner made that its gateway did not grant,
//! at whichever node counts the key now.
//!
//! The owner may have left the ring since it decided: a graceful leave
//! hands its counters to the keys' next owners, and the node stops once no
//! member lists it. A refund sent to it then is lost, and the window admits
//! less than its limit for as long as the admission stands in it.

use std::sync::Arc;
use std::time::Duration;

use weir_core::Nanos;
use weir_proto::weir::v1::CounterOp;

use super::local::Local;
use super::peers::{PeerFailure, Peers, Reply};
use super::replicate::Replicator;
use crate::topology::membership::NodeIdentity;
use crate::topology::routing::Routing;
use crate::wire;

/// Sends refunds (cheap to clone: a refund may be sent from a task of its own).
#[derive(Clone)]
pub struct Refunds {
    pub peers: Arc<dyn Peers>,
    pub routing: Arc<Routing>,
    pub local: Arc<Local>,
    pub replicator: Arc<Replicator>,
}

/// Where a key is counted now.
enum Counted {
    Here,
    At(NodeIdentity),
    /// No ring to say (this node is leaving, or alone and not yet joined).
    Nowhere,
}

impl Refunds {
    /// Gives back `cost` that `owner` admitted at `at` (its clock) for the
    /// key. It goes to `owner` while this node's ring lists it; a leaving
    /// owner sends it on with the key. Else, or when the owner did not
    /// take it (no decision there: the op never left this node, or its
    /// connection was refused or closed), it goes to the key's owner now,
    /// which was handed the count. A refund that reached the owner but was
    /// not answered in time is not sent again: counted twice, it would
    /// admit one more than the limit.
    ///
    /// `wait` bounds each send, its time queued in this node included: one
    /// still queued then is dropped, and the budget stays spent.
    pub async fn give_back(
        &self,
        owner: &NodeIdentity,
        (rule, hash_part): (&Arc<str>, &str),
        cost: u64,
        at: Nanos,
        wait: Duration,
    ) {
        let op = wire::refund(rule, hash_part, cost, at);
        let first = if self.routing.is_member(&owner.id) {
            owner.clone()
        } else {
            match self.counted(hash_part) {
                Counted::At(next) => next,
                Counted::Here => return self.here(rule, hash_part, cost, at),
                Counted::Nowhere => return,
            }
        };
        if self.taken(&first, op.clone(), wait).await {
            return;
        }
        match self.counted(hash_part) {
            Counted::At(next) if next.id != first.id => {
                self.taken(&next, op, wait).await;
            }
            Counted::Here => self.here(rule, hash_part, cost, at),
            // Still the same node, or none: nothing else holds the count.
            Counted::At(_) | Counted::Nowhere => {}
        }
    }

    /// Gives back `cost` that `owner` admitted at `at`, at `owner` only and
    /// only while this node's ring lists it: for an answer heard after
    /// the late window, when the ring may have moved the key on without
    /// that admission (an owner cut off or declared down before its copy
    /// took it). Given back anywhere else, it would be a refund of
    /// nothing counted there: one admission too many.
    pub async fn give_back_where_counted(
        &self,
        owner: &NodeIdentity,
        (rule, hash_part): (&Arc<str>, &str),
        cost: u64,
        at: Nanos,
        wait: Duration,
    ) {
        if self.routing.is_member(&owner.id) {
            self.taken(owner, wire::refund(rule, hash_part, cost, at), wait)
                .await;
        }
    }

    fn counted(&self, hash_part: &str) -> Counted {
        let ring = self.routing.routing_ring();
        match ring.owner(hash_part) {
            Some(o) if o.id == self.routing.me() => Counted::Here,
            Some(o) => Counted::At(o.clone()),
            None => Counted::Nowhere,
        }
    }

    /// False only when `to` made no decision on it.
    async fn taken(&self, to: &NodeIdentity, op: CounterOp, wait: Duration) -> bool {
        !matches!(
            self.peers.decide(to, op, wait).await,
            Reply::Failed(
                PeerFailure::Queued(_)
                    | PeerFailure::Overloaded
                    | PeerFailure::Unreachable(_)
                    | PeerFailure::Refused(_)
            )
        )
    }

    fn here(&self, rule: &Arc<str>, hash_part: &str, cost: u64, at: Nanos) {
        let limiter = self.local.limiter();
        limiter.refund(rule, hash_part, at, cost);
        self.replicator.mark(rule, hash_part, limiter.now());
    }
}
