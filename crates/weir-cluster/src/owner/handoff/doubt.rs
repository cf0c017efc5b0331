//! Handoff calls that got no answer in time, and may still have landed.
//!
//! A sweep used to keep such a call's counters as undelivered and offer
//! them whole again with the next sweep. When the call had landed after
//! all (its receiver slow, the answer late or lost), the owner added them
//! a second time, and the keys refused their callers for the rest of
//! their window. Now the next sweep first asks the receiver what became of
//! the call (`Calls` on its side): landed, and this node keeps only what
//! was spent here since; never, and the counters go out again as before.

use std::time::Duration;
use weir_core::determinism::HashSet;

use weir_core::CounterSnapshot;
use weir_proto::weir::v1::{CallFate, HandoffRequest};

use super::{Handed, Handoff};
use crate::owner::moves::{counter_id, CounterId};
use crate::stats::bump;
use crate::topology::membership::NodeIdentity;
use crate::topology::ring::Ring;

/// How long a sweep waits for a receiver to say what became of a call:
/// the sweep (a ring change's among them) waits meanwhile, and one not
/// answered is asked again by the next sweep.
pub(super) const ASK_DEADLINE: Duration = Duration::from_millis(250);

/// What is left of `deadline` from now.
pub(super) fn until(deadline: tokio::time::Instant) -> Duration {
    deadline.saturating_duration_since(tokio::time::Instant::now())
}

/// A handoff call that got no answer in time.
pub(super) struct Doubt {
    /// Its receiver, the process the ring listed.
    pub owner: NodeIdentity,
    /// Its name ([`HandoffRequest::call`]).
    pub call: u64,
    /// Its counters, each as it was taken here.
    pub counters: Vec<CounterSnapshot>,
}

/// What the receivers said about the calls in doubt.
#[derive(Debug, Default)]
pub(super) struct Asked {
    /// Counters of calls that did not land, or whose fate is still unknown.
    pub not_landed: usize,
    /// The counters of the calls their receivers say never landed, whole
    /// here: a leave offers them again ([`Handoff::leave`]).
    pub never: Vec<CounterSnapshot>,
}

impl Handed {
    /// Keeps the calls in doubt for the next sweep to ask about; returns
    /// every counter not known to be with its owner, those of the calls in
    /// doubt among them.
    pub(super) fn keep_doubts(mut self, handoff: &Handoff) -> Vec<CounterSnapshot> {
        for d in &self.doubtful {
            self.undelivered.extend(d.counters.iter().cloned());
        }
        handoff.doubts.lock().append(&mut self.doubtful);
        self.undelivered
    }
}

impl Handoff {
    /// The counters of the calls still in doubt: not offered again until
    /// their receivers say those calls never landed.
    pub(super) fn doubted(&self) -> HashSet<CounterId> {
        let doubts = self.doubts.lock();
        doubts
            .iter()
            .flat_map(|d| d.counters.iter().map(counter_id))
            .collect()
    }

    /// Asks the receiver of each call in doubt what became of it, each
    /// within `deadline`. A call that landed leaves here only what was
    /// spent since it was taken; one that never did, or whose receiver
    /// does not answer and is no longer on `ring` (its counters have
    /// another owner now), is forgotten, its counters offered again by the
    /// sweep; one not answered stays in doubt.
    pub(super) async fn settle_doubts(&self, ring: &Ring, deadline: Duration) -> Asked {
        let doubts = std::mem::take(&mut *self.doubts.lock());
        let mut asked = Asked::default();
        if doubts.is_empty() {
            return asked;
        }
        let listed = |d: &Doubt| {
            ring.members()
                .iter()
                .any(|m| m.id == d.owner.id && m.boot == d.owner.boot)
        };
        let asks = doubts.into_iter().map(|d| async move {
            // One that left the ring may still answer while it drains: a
            // call it took went on with its leave's handover. Gone, its
            // counters have another owner, which they go to now.
            let fate = match self.ask(&d, deadline).await {
                None if !listed(&d) => Some(CallFate::Never),
                fate => fate,
            };
            (d, fate)
        });
        let mut landed = Vec::new();
        let mut still = Vec::new();
        for (d, fate) in futures::future::join_all(asks).await {
            match fate {
                Some(CallFate::Landed) => {
                    bump(&self.stats.keys_moved_out, d.counters.len() as u64);
                    landed.extend(d.counters);
                }
                // Never, or a receiver that does not name calls.
                Some(_) => {
                    asked.not_landed += d.counters.len();
                    asked.never.extend(d.counters);
                }
                None => {
                    asked.not_landed += d.counters.len();
                    still.push(d);
                }
            }
        }
        self.doubts.lock().append(&mut still);
        if landed.is_empty() {
            return asked;
        }
        tracing::info!(
            counters = landed.len(),
            "a handoff that got no answer had landed"
        );
        // Kept by an earlier landing: checks for them go to their owner now.
        self.moves.delivered_later(&landed);
        self.settle(landed).await;
        asked
    }

    /// What became of `d`'s call, if its receiver says in time.
    async fn ask(&self, d: &Doubt, deadline: Duration) -> Option<CallFate> {
        let req = HandoffRequest {
            from_node: self.routing.me().to_string(),
            boot: self.boot,
            at: self.local.limiter().now(),
            ask_about: d.call,
            ..Default::default()
        };
        match self.link.handoff(&d.owner, req, deadline).await {
            Ok(r) => Some(r.fate()),
            Err(e) => {
                tracing::debug!(to = %d.owner.id, call = d.call, error = %e, "could not ask about a handoff");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests;
