//! The members a node waits to hear from after it joins: until one says
//! its handoff to this node is done, the keys this node took from it are
//! asked of it rather than decided on a count that has not arrived.
//!
//! A member that took a joiner in routes the joiner's keys to it at once,
//! while the key's old owner may not have taken the joiner in yet, or be
//! handing its counters over: decided by the joiner then, a check found
//! none of the key's count and was admitted on nothing. The old owner
//! still has that count, and knows whether it still does: asked, it
//! decides the check while its ring gives it the key, or on the count it
//! kept if its handoff did not deliver it, and otherwise, once its
//! handoff has landed, says the joiner holds the count now
//! ([`crate::owner::serve`]).
//!
//! Only a member that started before this node can hold counts of its
//! keys. One that started after (or at the same moment, by id) has none,
//! and asking it would only add a round trip; worse, a newcomer whose ring
//! lacks this node would decide the key as its own, on nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use tokio::time::Instant;

use super::membership::NodeIdentity;
use super::ring::Ring;

/// How long a member is waited for once it enters this node's ring: its
/// word comes a moment after its own ring takes this node in, which is a
/// gossip round or a few later (more in a large cluster). One that never
/// says (its handoff failed, say) is not asked after this.
pub const WAIT: Duration = Duration::from_secs(5);

#[derive(Default)]
pub struct Arrivals {
    /// Members older than this node, with when each entered its ring,
    /// whose handoff is not done yet. A handful at most: a linear scan.
    awaited: Mutex<Waits>,
    /// Whether any member is waited for: the one read on a check's path.
    /// Relaxed: the waits themselves are read under the lock.
    any: AtomicBool,
}

#[derive(Default)]
struct Waits {
    awaited: Vec<(String, Instant)>,
    /// Members that said so before this node's ring took them in (their
    /// ring took this node in first), with when: not waited for when they
    /// enter it within [`WAIT`].
    early: Vec<(String, Instant)>,
}

/// Whether `a` started before `b`: the lower incarnation (a fresh process
/// starts at the wall clock in milliseconds), then the lower id, so that of
/// any two members exactly one is the older.
pub fn older(a: &NodeIdentity, b: &NodeIdentity) -> bool {
    (a.incarnation, &a.id) < (b.incarnation, &b.id)
}

impl Arrivals {
    /// The ring changed from `before` to `after`: waits for each member
    /// older than `me` that entered it, and no longer for one that left
    /// (a leaving member hands its counters over before it goes).
    pub fn ring_changed(&self, me: &str, before: &Ring, after: &Ring) {
        let Some(mine) = after.members().iter().find(|m| m.id == me) else {
            return;
        };
        let now = Instant::now();
        let known = |ring: &Ring, id: &str| ring.members().iter().any(|m| m.id == id);
        let mut w = self.awaited.lock();
        w.early.retain(|(_, at)| now.duration_since(*at) < WAIT);
        let Waits { awaited, early } = &mut *w;
        awaited.retain(|(id, _)| known(after, id));
        let entered = after.members().iter().filter(|m| {
            !known(before, &m.id) && older(m, mine) && !early.iter().any(|(id, _)| *id == m.id)
        });
        awaited.extend(entered.map(|m| (m.id.clone(), now)));
        self.any.store(!awaited.is_empty(), Ordering::Relaxed);
    }

    /// `from` says its handoff to this node is done.
    pub fn arrived(&self, from: &str) {
        let now = Instant::now();
        let mut w = self.awaited.lock();
        if !self.stop_waiting(&mut w, from) {
            w.early.retain(|(_, at)| now.duration_since(*at) < WAIT);
            w.early.push((from.to_string(), now));
        }
    }

    /// `from`, still waited for, handed this node counters without saying
    /// its sweep is over: the wait starts again from now, so a sweep that
    /// takes longer than [`WAIT`] (a million counters, several seconds)
    /// is waited out while its calls keep coming. Ended at [`WAIT`] from
    /// the join, the keys of its last calls were decided here on nothing
    /// until their counts arrived.
    pub fn heard_from(&self, from: &str) {
        let now = Instant::now();
        let mut w = self.current();
        for (_, since) in w.awaited.iter_mut().filter(|(id, _)| id == from) {
            *since = now;
        }
    }

    /// `from` cannot be heard from (an op asked of it got no answer in the
    /// late window, or could not be sent): asked no more. A member this
    /// node's SWIM does not suspect can still be cut off from it alone.
    pub fn give_up(&self, from: &str) {
        self.stop_waiting(&mut self.awaited.lock(), from);
    }

    /// Waits for `from` no longer; whether it was waited for.
    fn stop_waiting(&self, w: &mut Waits, from: &str) -> bool {
        let before = w.awaited.len();
        w.awaited.retain(|(id, _)| id != from);
        self.any.store(!w.awaited.is_empty(), Ordering::Relaxed);
        w.awaited.len() < before
    }

    /// Whom to ask about `hash_part`, a key this node owns on `ring`: the
    /// member that would own it without this node, while it is waited for.
    pub fn asks<'r>(&self, ring: &'r Ring, hash_part: &str) -> Option<&'r NodeIdentity> {
        if !self.any.load(Ordering::Relaxed) {
            return None;
        }
        let previous = ring.replica_of(hash_part)?;
        let asked = self
            .current()
            .awaited
            .iter()
            .any(|(id, _)| *id == previous.id);
        asked.then_some(previous)
    }

    /// The members waited for now.
    pub fn awaited(&self) -> Vec<String> {
        let w = self.current();
        w.awaited.iter().map(|(id, _)| id.clone()).collect()
    }

    /// The waits, without those that have ended.
    fn current(&self) -> MutexGuard<'_, Waits> {
        let mut w = self.awaited.lock();
        let now = Instant::now();
        w.awaited
            .retain(|(_, since)| now.duration_since(*since) < WAIT);
        if w.awaited.is_empty() {
            self.any.store(false, Ordering::Relaxed);
        }
        w
    }
}

#[cfg(test)]
mod tests;
