//! A gateway's check of a key its own node owns: decided here, or, while
//! the key's count may still be on its way from the member that owned it
//! before this node joined, by that member ([`crate::topology::arrivals`]).

use std::sync::Arc;

use weir_core::{CheckError, Decision, Rule};
use weir_proto::weir::v1::CounterOp;

use super::breaker::Breakers;
use super::peers::{expiry, Reply, LATE_WINDOW};
use super::remote::{Remote, Via};
use crate::stats::bump;
use crate::topology::membership::NodeIdentity;
use crate::topology::ring::Ring;
use crate::topology::routing::Routing;
use crate::wire::{self, Answer};

/// The member to ask about `hash_part`, a key this node owns on `ring`,
/// while its count may still be on its way from it
/// ([`crate::topology::arrivals::Arrivals::asks`]). Not one this node does
/// not trust (its breaker open, or SWIM suspecting it): each op would wait
/// the late window for it.
pub(super) fn previous_owner<'r>(
    routing: &Routing,
    breakers: &Breakers,
    ring: &'r Ring,
    hash_part: &str,
) -> Option<&'r NodeIdentity> {
    let asked = routing.arrivals().asks(ring, hash_part);
    asked.filter(|p| breakers.trusted(&p.id))
}

impl Remote {
    /// Decides a limit this node owns; None when it is leaving.
    pub(super) async fn decide_owned(
        &self,
        rule: &Arc<Rule>,
        hash_part: &str,
        cost: u64,
        carried: bool,
    ) -> Option<Result<(Decision, Via), CheckError>> {
        let previous = self.routing.with_routing_ring(|ring| {
            previous_owner(&self.routing, &self.breakers, ring, hash_part).cloned()
        });
        if let Some(previous) = previous {
            if let Some(decided) = self
                .ask_back(rule, hash_part, cost, carried, previous)
                .await
            {
                return Some(decided);
            }
        }
        self.decide_if_still_owned(rule, hash_part, cost, carried)
    }

    /// [`Remote::decide_here`] for a key this node's ring gave it when the
    /// check began, with the ring read again inside the in-flight mark
    /// the decision takes. A ring change since (during the ask, above)
    /// that moved the key on has had its sweep copy the counters already:
    /// it waits only for the marks taken before it. An admission here is
    /// then a stray, for the next sweep to carry to the key's owner; taken
    /// for owned, it stayed here and that owner never counted it.
    fn decide_if_still_owned(
        &self,
        rule: &Arc<Rule>,
        hash_part: &str,
        cost: u64,
        carried: bool,
    ) -> Option<Result<(Decision, Via), CheckError>> {
        self.local.guarded(|_| {
            let owned = self.routing.owns(hash_part);
            let decided = self.decide_here(rule, hash_part, cost, carried);
            if !owned && matches!(decided, Some(Ok(_))) {
                bump(&self.stats.strays, 1);
                self.local.mark_stray();
            }
            decided
        })
    }

    /// Asks `previous` to decide the limit, waiting as long as a late
    /// answer may take (a check of the gateway's own, with no deadline of
    /// its own to meet but the client's). None when it did not: it no
    /// longer holds the key's count, or did not answer.
    async fn ask_back(
        &self,
        rule: &Arc<Rule>,
        hash_part: &str,
        cost: u64,
        carried: bool,
        previous: NodeIdentity,
    ) -> Option<Result<(Decision, Via), CheckError>> {
        bump(&self.stats.asked_back, 1);
        let op = CounterOp {
            asked_back: true,
            asker_boot: self.routing.boot(),
            expires_at: expiry(self.now(), LATE_WINDOW),
            ..wire::consume(rule, hash_part, cost, carried)
        };
        let Reply::Answered(result) = self.peers.decide(&previous, op, LATE_WINDOW).await else {
            self.routing.arrivals().give_up(&previous.id);
            return None;
        };
        match wire::answer(result, rule, cost) {
            // Given back, if need be, where it was counted.
            Answer::Decided(d) => Some(Ok((d, Via::Owner(previous)))),
            Answer::Refused(e) => Some(Err(e)),
            Answer::Undecided(_) | Answer::NotReady | Answer::Expired => None,
        }
    }
}
