//! The ring changes that took keys from this node, remembered so that a
//! check a peer still sends here goes to the key's new owner once the
//! key's count has reached it.
//!
//! A member whose ring has not taken a joiner in yet sends the joiner's
//! keys to their old owner. Decided there, after the handoff, a check
//! found what was spent since (none of the count, which the joiner now
//! holds) and was admitted on it: one over the limit in most join races
//! at the defaults.

use std::collections::VecDeque;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use weir_core::determinism::{HashMap, HashSet};

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;
use weir_core::CounterSnapshot;

use crate::topology::arrivals::{self, older};
use crate::topology::membership::NodeIdentity;
use crate::topology::ring::Ring;

/// Moves remembered: more ring changes than a gossip round brings, so a
/// peer still on an older ring finds the one that moved its key.
const REMEMBERED: usize = 8;

/// How long a member's word that it asks this node about the keys it
/// took holds, from when it was sent for: well within the
/// [`arrivals::WAIT`] its own wait lasts past each handoff call it
/// receives, so that a word not renewed (the calls stopped) lapses
/// before that wait could have ended.
const ASKED_FOR: Duration = Duration::from_millis(arrivals::WAIT.as_millis() as u64 / 2);

/// Names one counter: its rule (or carried limit), key, and which of the two.
pub type CounterId = (String, String, bool);

/// The id of the counter `snap` holds.
pub fn counter_id(snap: &CounterSnapshot) -> CounterId {
    (
        snap.rule.clone(),
        snap.hash_part.clone(),
        snap.carried.is_some(),
    )
}

/// The ring changes that may have taken keys from this node, newest last.
pub struct Moves {
    me: String,
    recent: Mutex<VecDeque<Arc<Move>>>,
    /// Moves begun whose sweep has not landed them: read without the lock
    /// on every check a gateway sends to another member, so that a cluster
    /// at rest never takes it ([`Moves::deciding_for`]).
    unlanded: Arc<AtomicUsize>,
}

/// One ring change: it took from this node each key that `before` gave
/// it and `after` gives another member.
pub struct Move {
    before: Arc<Ring>,
    after: Arc<Ring>,
    landed: OnceLock<Landed>,
    landing: Notify,
    /// Counters its sweep kept that a later sweep delivered: a check for
    /// one decided on what stayed here (what was spent since the copy)
    /// would start the key over.
    delivered_later: Mutex<HashSet<CounterId>>,
    /// Keys decided here on their whole count before its sweep landed (an
    /// op a joiner asked about, or one sent on to the new owner that got
    /// no answer): what they spent since the copy goes to the new owner
    /// before the landing ([`Landing::decided_here`]).
    decided_here: Mutex<HashSet<CounterId>>,
    /// Until when each member it took in asks this node about the keys it
    /// took, as far as this node knows (None: it does not): foreseen from
    /// which of the two started first ([`crate::topology::arrivals`]),
    /// then as each handoff call's answer says.
    askers: Mutex<HashMap<String, Option<Instant>>>,
    /// Its share of [`Moves::unlanded`] until it lands.
    unlanded: Arc<AtomicUsize>,
}

/// How the sweep after a ring change ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Landed {
    /// Every counter reached its new owner but these, still whole here.
    Delivered { kept: HashSet<CounterId> },
    /// The sweep ended before its handoff did: every counter is still here.
    Kept,
}

impl Moves {
    pub fn new(me: &str) -> Self {
        Moves {
            me: me.to_string(),
            recent: Mutex::default(),
            unlanded: Arc::default(),
        }
    }

    /// The ring is about to change from `before` (the one routed by now)
    /// to `after`; the sweep that follows lands it ([`Moves::pending`]).
    /// Only a member joining takes keys from the others: one leaving or
    /// lost hands its own on and moves nobody else's. (A member restarted
    /// takes none, but is recorded for the word its sweep ends with.)
    pub fn begin(&self, before: Arc<Ring>, after: Arc<Ring>) {
        self.unlanded.fetch_add(1, Ordering::Relaxed);
        let mut change = Move {
            before,
            after,
            landed: OnceLock::new(),
            landing: Notify::new(),
            delivered_later: Mutex::default(),
            decided_here: Mutex::default(),
            askers: Mutex::default(),
            unlanded: self.unlanded.clone(),
        };
        if change.joined().next().is_none() {
            return;
        }
        // A member that started after this node waits for its word, and
        // asks it meanwhile; one that started first does not.
        let me = change.after.members().iter().find(|m| m.id == self.me);
        let until = Instant::now() + ASKED_FOR;
        let askers = change
            .joined()
            .map(|j| (j.id.clone(), me.filter(|me| older(me, j)).map(|_| until)))
            .collect();
        change.askers = Mutex::new(askers);
        let mut recent = self.recent.lock();
        if recent.len() == REMEMBERED {
            recent.pop_front();
        }
        recent.push_back(Arc::new(change));
    }

    /// The moves no sweep has landed yet, for a sweep over `ring` (the one
    /// routed by), which offers the keys they took. A move from `ring` is
    /// begun but not yet routed by: the next sweep's.
    pub fn pending(&self, ring: &Arc<Ring>) -> Vec<Arc<Move>> {
        let recent = self.recent.lock();
        recent
            .iter()
            .filter(|m| m.landed.get().is_none() && !Arc::ptr_eq(&m.before, ring))
            .cloned()
            .collect()
    }

    /// The newest move that took `key` from this node to `owner`, its owner
    /// now.
    pub fn took(&self, key: &str, owner: &str) -> Option<Arc<Move>> {
        if owner == self.me {
            return None;
        }
        let recent = self.recent.lock();
        recent
            .iter()
            .rev()
            .find(|m| m.took(key, &self.me, owner))
            .cloned()
    }

    /// The move that took `key` from this node to `owner` and has not
    /// landed, while `owner` asks this node about the keys it took: the
    /// key's count is whole here, and a gateway here decides its check on
    /// it, as it would when `owner` asked. Sent to `owner`, the check came
    /// back here as its question, two hops later: on two shared cores, a
    /// join of a million counters at half load refused some thousands of
    /// checks that missed the owner deadline meanwhile. Once `owner` no
    /// longer asks, it decides the key on what it holds, and so must every
    /// check of it.
    pub fn deciding_for(&self, key: &str, owner: &str) -> Option<Arc<Move>> {
        if self.unlanded.load(Ordering::Relaxed) == 0 || owner == self.me {
            return None;
        }
        // Only the moves still to land, each two ring lookups: the landed
        // ones stay remembered long after, and this runs for every check
        // sent to another member while one is on its way.
        let taken = {
            let recent = self.recent.lock();
            recent
                .iter()
                .rev()
                .filter(|m| m.landed.get().is_none())
                .find(|m| m.took(key, &self.me, owner))
                .cloned()
        }?;
        taken.asked_by(owner).then_some(taken)
    }

    /// `joiner` says, answering a handoff call sent at `sent`, whether it
    /// asks this node about the keys it took from it.
    pub fn told(&self, joiner: &str, asks: bool, sent: Instant) {
        let recent = self.recent.lock();
        for m in recent.iter().filter(|m| m.landed.get().is_none()) {
            if let Some(said) = m.askers.lock().get_mut(joiner) {
                *said = asks.then_some(sent + ASKED_FOR);
            }
        }
    }

    /// The newest ring change that took in `id`'s process `boot` (a
    /// member joining, or restarted), landed or not: what its sweep kept
    /// here is still decided here.
    pub fn taking_in(&self, id: &str, boot: u64) -> Option<Arc<Move>> {
        let recent = self.recent.lock();
        recent
            .iter()
            .rev()
            .find(|m| m.joined().any(|j| j.id == id && j.boot == boot))
            .cloned()
    }

    /// A sweep delivered `delivered`: the landed moves whose sweeps kept
    /// any of them find them with their owners from now on.
    pub fn delivered_later(&self, delivered: &[CounterSnapshot]) {
        let recent = self.recent.lock();
        let keeping: Vec<&Arc<Move>> = recent.iter().filter(|m| m.kept_any()).collect();
        // Nothing kept, as nearly always: no id to build.
        if keeping.is_empty() {
            return;
        }
        for snap in delivered {
            let carried = snap.carried.is_some();
            for m in keeping
                .iter()
                .filter(|m| m.kept(&snap.rule, &snap.hash_part, carried))
            {
                m.delivered_later.lock().insert(counter_id(snap));
            }
        }
    }
}

impl Move {
    /// The members it took in: new ones, and new processes of members (a
    /// restart under the same id moves no keys, but the new process waits
    /// for word that this node's sweep is over, as a joiner does).
    pub fn joined(&self) -> impl Iterator<Item = &NodeIdentity> {
        self.after.taken_in(&self.before)
    }

    /// Whether it took `key` from `me` to `owner`.
    fn took(&self, key: &str, me: &str, owner: &str) -> bool {
        self.before.owner_id(key) == Some(me) && self.after.owner_id(key) == Some(owner)
    }

    /// Whether `joiner`, a member it took in, asks this node about the
    /// keys it took, as far as this node knows.
    fn asked_by(&self, joiner: &str) -> bool {
        let until = self.askers.lock().get(joiner).copied().flatten();
        until.is_some_and(|until| Instant::now() < until)
    }

    /// Whether it took in a new process of `id`, a member already on the
    /// ring before it (a restart), rather than a new member.
    pub fn restarted(&self, id: &str) -> bool {
        self.before.members().iter().any(|m| m.id == id)
    }

    /// An op for the counter of `rule` (or the carried limit of that
    /// name) and `key` was decided here on its whole count: before its
    /// sweep has landed, what it spent goes to the new owner with it.
    pub fn decided_here(&self, rule: &str, key: &str, carried: bool) {
        if self.landed.get().is_none() {
            let id = (rule.to_string(), key.to_string(), carried);
            self.decided_here.lock().insert(id);
        }
    }

    /// Records how its sweep ended and wakes the checks waiting on it.
    /// The first call counts.
    pub fn land(&self, landed: Landed) {
        if self.landed.set(landed).is_ok() {
            self.unlanded.fetch_sub(1, Ordering::Relaxed);
            self.landing.notify_waiters();
        }
    }

    /// Whether the counter of `rule` (or the carried limit of that name)
    /// and `key` is with its new owner: its sweep has landed and delivered
    /// it, or a later sweep did.
    pub fn delivered(&self, rule: &str, key: &str, carried: bool) -> bool {
        match self.landed.get() {
            None => false,
            Some(l) if l.delivered(rule, key, carried) => true,
            Some(_) => {
                let id = (rule.to_string(), key.to_string(), carried);
                self.delivered_later.lock().contains(&id)
            }
        }
    }

    /// Whether its sweep kept the counter of `rule` (or the carried limit
    /// of that name) and `key` here: named among those it kept, or,
    /// dropped before it landed, a key it gave a member it took in (it
    /// kept them all; the others were never its to name).
    fn kept(&self, rule: &str, key: &str, carried: bool) -> bool {
        match self.landed.get() {
            Some(l @ Landed::Delivered { .. }) => !l.delivered(rule, key, carried),
            Some(Landed::Kept) => {
                let owner = self.after.owner_id(key);
                self.joined().any(|j| Some(&*j.id) == owner)
            }
            None => false,
        }
    }

    /// Whether its sweep has landed keeping something here that no later
    /// sweep has delivered yet (as far as it can tell: one dropped before
    /// it landed named nothing).
    fn kept_any(&self) -> bool {
        match self.landed.get() {
            Some(Landed::Delivered { kept }) => kept.len() > self.delivered_later.lock().len(),
            Some(Landed::Kept) => true,
            None => false,
        }
    }

    /// How its sweep ended, once it has.
    pub async fn landed(&self) -> &Landed {
        loop {
            // Created before the check: `notify_waiters` wakes it even if
            // the landing comes in between.
            let woken = self.landing.notified();
            if let Some(landed) = self.landed.get() {
                return landed;
            }
            woken.await;
        }
    }
}

impl Drop for Move {
    /// One that took nobody in, or forgotten before a sweep landed it.
    fn drop(&mut self) {
        if self.landed.get().is_none() {
            self.unlanded.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Landed {
    /// Whether the counter of `rule` (or the carried limit of that name)
    /// and `key` reached its new owner.
    pub fn delivered(&self, rule: &str, key: &str, carried: bool) -> bool {
        match self {
            // Nothing kept, as nearly always: no id to build.
            Landed::Delivered { kept } if kept.is_empty() => true,
            Landed::Delivered { kept } => !kept.contains(&(rule.into(), key.into(), carried)),
            Landed::Kept => false,
        }
    }
}

/// The moves a sweep lands, whichever way it ends: a sweep dropped before
/// it landed them (a leave aborts the task running it) kept every counter.
pub struct Landing(Vec<Arc<Move>>);

impl Landing {
    pub fn new(moves: Vec<Arc<Move>>) -> Self {
        Landing(moves)
    }

    /// The keys decided here on their whole count since the last call,
    /// over every move it lands.
    pub fn decided_here(&self) -> HashSet<CounterId> {
        let mut all = HashSet::default();
        for m in &self.0 {
            all.extend(m.decided_here.lock().drain());
        }
        all
    }

    pub fn land(mut self, kept: HashSet<CounterId>) {
        for m in self.0.drain(..) {
            m.land(Landed::Delivered { kept: kept.clone() });
        }
    }
}

impl Drop for Landing {
    fn drop(&mut self) {
        for m in self.0.drain(..) {
            m.land(Landed::Kept);
        }
    }
}

#[cfg(test)]
mod tests;
