//! The copies this node holds of other owners' counters: replaced whole as the owners stream them, decided on while an owner cannot be reached, and promoted when it dies.
//!
//! The holder of a key's copy is the next member clockwise after its owner
//! (`Ring::replica_of`), which is exactly who owns the key once the owner
//! leaves the ring: a death hands the key to the node that already holds
//! its counts. What is lost is only the owner's changes not yet streamed.
//!
//! Decisions taken on a copy (standing in for an unreachable owner) are
//! kept apart and re-applied over every copy the owner streams, until one
//! arrives that the owner took after it was charged with them: a copy in
//! flight while a charge lands cannot erase them.
//!
//! A promoted key remembers the copy it started from (its base), so that
//! if its old owner comes back as the same incarnation (a healed partition)
//! only what was spent since the promotion is handed back, and the base is
//! not counted twice; an owner that restarted gets everything.
//!
//! A copy lags its owner by one replication round trip. When an owner dies,
//! the gateways it answered report the admissions it made in their last
//! seconds ([`Replicas::admitted_by`]); those made after the copy was taken
//! are added to it (or start one, for a key no copy of had arrived, or join
//! this node's counters where it stood in on them without a copy), so a
//! crash loses only admissions whose answer never left the owner (which
//! their gateways refused) and the owner's own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use compact_str::CompactString;
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use weir_core::{Absorb, CheckError, CounterSnapshot, Decision, Limiter, Nanos, RuleSet, State};

use crate::topology::membership::NodeIdentity;
use crate::topology::ring::Ring;

type Key = (Arc<str>, CompactString);

/// How long a promoted key remembers its base: past it the old owner's
/// return is a rejoin, not a heal (the membership forgets a down member
/// after 15 minutes).
const BASE_KEPT: Duration = Duration::from_secs(15 * 60);
/// How long a handed-over key refuses its sender's older copies: far past
/// the deadline of the replication call that could carry one (1 s).
const HANDED_KEPT: Duration = Duration::from_secs(60);
/// How often idle copies are dropped. Every maintenance tick (250 ms)
/// asks, and each pass reads every copy held: at four a second, half a
/// million copies cost about 3% of a core, four times one pass a second,
/// which is how often the node's own counters are swept. A copy at rest
/// only holds memory until the next pass.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Where one stand-in admission is on its way to the owner's count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Charged {
    Owed,
    Sent,
    /// Applied by the owner at this time on its clock: copies it took
    /// later include it.
    At(Nanos),
}

#[derive(Debug, Clone, Copy)]
struct Standin {
    at: Nanos,
    cost: u64,
    charged: Charged,
}

/// Whose copy a key is, and what was decided on it while standing in.
#[derive(Debug, Clone, Default)]
struct Meta {
    owner: String,
    /// The owner process's boot the copy came from.
    boot: u64,
    /// The owner's clock when it took the copy: its admissions decided
    /// before are in it.
    taken_at: Nanos,
    /// Admissions decided here for the owner not yet in its copies.
    standins: Vec<Standin>,
    /// A new process of the owner asked about the key: the copy goes whole
    /// to it once the ring takes it in, so nothing on it is charged.
    superseded: bool,
}

/// A stand-in admission to charge to its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owed {
    pub owner: String,
    pub rule: Arc<str>,
    pub hash_part: String,
    pub cost: u64,
    /// The stand-in decision's time, which names it when the charge lands.
    pub at: Nanos,
}

/// An admission a lost owner made, as a gateway it answered reports it.
#[derive(Debug, Clone, Copy)]
pub struct Admitted<'a> {
    pub owner: &'a str,
    pub rule: &'a str,
    pub hash_part: &'a str,
    pub cost: u64,
    /// The owner's decision time, on its clock.
    pub at: Nanos,
}

/// Where a stand-in was decided.
#[derive(Debug, PartialEq)]
pub enum StandIn<T> {
    /// On the copy held of the owner's counts.
    Copy(Decision),
    /// With no copy held, by the caller, on this node's counters.
    Here(T),
}

struct Base {
    owner: String,
    boot: u64,
    /// The owner's clock when it took the copy promoted.
    taken_at: Nanos,
    /// The copy as promoted: the owner's last copy plus the stand-ins on it.
    state: State,
    /// Of those stand-ins, what the owner was never charged with: it does
    /// not have them, so they go back with what was spent since.
    uncharged: u64,
    at: Nanos,
}

/// The process a handoff came from.
#[derive(Debug, Clone, Copy)]
pub struct Sender<'a> {
    pub node: &'a str,
    pub boot: u64,
    /// Its clock once it had taken the counters: a copy it took earlier is
    /// older than what it handed over.
    pub at: Nanos,
}

/// A key handed over to this node by the owner of the copy it held,
/// remembered so that a copy the sender took before the handoff is not
/// taken after it.
struct Handed {
    from: String,
    boot: u64,
    at: Nanos,
    /// This node's clock when it was handed over.
    kept_from: Nanos,
}

pub struct Replicas {
    store: Limiter,
    meta: DashMap<Key, Meta, weir_core::determinism::HashState>,
    bases: DashMap<Key, Base, weir_core::determinism::HashState>,
    handed: DashMap<Key, Handed, weir_core::determinism::HashState>,
    /// The nodes that handed counters here lately, with this node's clock
    /// when the last handoff of each arrived. A report of their
    /// admissions starts no copy: see `admitted_by`. (A rebalance hands
    /// only some keys; a report of another key is refused, as every report
    /// without a copy was before copies could be started.)
    handoffs: DashMap<String, Nanos, weir_core::determinism::HashState>,
    /// When the last sweep ran, on the store's clock (0: never).
    swept_at: AtomicU64,
}

fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn key(rule: &str, hash_part: &str) -> Key {
    (Arc::from(rule), CompactString::new(hash_part))
}

/// The stand-in admissions on a copy that its owner has not applied.
fn uncharged(m: &Meta) -> u64 {
    m.standins
        .iter()
        .filter(|s| !matches!(s.charged, Charged::At(_)))
        .map(|s| s.cost)
        .sum()
}

impl Replicas {
    /// Copies kept under `main`'s rules, clock, key ceiling and region
    /// gate: a copy standing in for its owner takes a global rule's share
    /// as the owner would.
    pub fn new(main: &Limiter) -> Self {
        Replicas {
            store: Limiter::behind_gate_of(main),
            meta: DashMap::default(),
            bases: DashMap::default(),
            handed: DashMap::default(),
            handoffs: DashMap::default(),
            swept_at: AtomicU64::new(0),
        }
    }

    pub fn on_rules(&self, rules: &RuleSet) {
        self.store.install(rules.clone());
    }

    /// Takes the copies `owner` streamed (taken at `taken_at` on its
    /// clock), replacing what was held, with the stand-in admissions they
    /// cannot include yet applied on top. A copy of a key `owner` does not
    /// own on `ring` (this node's) is refused: one sent before a join
    /// moved the key elsewhere would otherwise outlive the ring change
    /// that dropped the copy held, and be handed to the key's new owner on
    /// top of its count should `owner` die. So is one from a process of
    /// `owner` (`boot`) that `ring` does not list.
    pub fn take(
        &self,
        owner: &str,
        boot: u64,
        taken_at: Nanos,
        states: Vec<CounterSnapshot>,
        ring: &Ring,
    ) -> u32 {
        let mut taken = 0;
        for snap in states {
            // From the process the ring lists as the key's owner only: a
            // restarted owner's first copies, sent before this node's ring
            // takes it in, replaced the old process's copy (its count) with
            // the new one's (none), and the new process was then handed
            // the copy of its own count.
            let sender = ring.owner(&snap.hash_part);
            if !sender.is_some_and(|o| o.id == owner && o.boot == boot) {
                continue;
            }
            let k = key(&snap.rule, &snap.hash_part);
            let (rule, hash_part) = (snap.rule.clone(), snap.hash_part.clone());
            // Held while the copy is put: a handoff of the key (which takes
            // the same entry) lands wholly before or after.
            let entry = self.meta.entry(k);
            let stale = self
                .handed
                .get(entry.key())
                .is_some_and(|h| h.from == owner && h.boot == boot && taken_at <= h.at);
            if stale || !self.store.put(snap) {
                continue;
            }
            taken += 1;
            let mut m = entry.or_default();
            m.owner = owner.to_string();
            m.boot = boot;
            m.taken_at = taken_at;
            m.standins
                .retain(|s| !matches!(s.charged, Charged::At(t) if t <= taken_at));
            for s in &m.standins {
                let _ = self.store.charge(&rule, &hash_part, s.cost);
            }
        }
        taken
    }

    /// The owner of the copy held of (rule, key), if one is held.
    pub fn holder_of(&self, rule: &str, hash_part: &str) -> Option<String> {
        self.meta
            .get(&key(rule, hash_part))
            .map(|m| m.owner.clone())
    }

    /// Whether the copy held of (rule, key) has stand-in admissions its
    /// owner has not applied.
    pub fn owes(&self, rule: &str, hash_part: &str) -> bool {
        self.meta
            .get(&key(rule, hash_part))
            .is_some_and(|m| uncharged(&m) > 0)
    }

    /// The copy held of (rule, key), if one is.
    #[cfg(test)]
    pub fn copy(&self, rule: &str, hash_part: &str) -> Option<CounterSnapshot> {
        self.store.snapshot(rule, hash_part)
    }

    /// Decides one op on the copy, standing in for its owner; with no copy
    /// held, `here` decides it on this node's own counters, which hold
    /// whatever count of the key is here (its owner handed it over, this
    /// node promoted the copy, decided it as its new owner, or stood in on
    /// them before). A fresh copy in their place would grant the key a
    /// second budget, and one its counters never see.
    ///
    /// The copy's entry is held through the decision, either way, so a
    /// handoff (`handed_over`), a promotion (`on_ring`) or a lost owner's
    /// report (`admitted_by`) of the key lands wholly before it, or after
    /// it with this admission in what it settles.
    pub fn stand_in<T>(
        &self,
        rule: &str,
        hash_part: &str,
        cost: u64,
        here: impl FnOnce() -> T,
    ) -> Result<StandIn<T>, CheckError> {
        let mut copy = match self.meta.entry(key(rule, hash_part)) {
            Entry::Occupied(copy) => copy,
            // Held while `here` decides: it touches this node's counters,
            // never this map.
            Entry::Vacant(_none) => return Ok(StandIn::Here(here())),
        };
        let d = self
            .store
            .consume(rule, hash_part, cost, self.store.now())?;
        if d.allowed {
            copy.get_mut().standins.push(Standin {
                at: d.at,
                cost,
                charged: Charged::Owed,
            });
        }
        Ok(StandIn::Copy(d))
    }

    /// Gives back a stand-in admission a denied check refunds: on the copy,
    /// or on `main` when none is held (the admission was decided there, or
    /// the copy is settled there with it).
    pub fn refund(&self, rule: &str, hash_part: &str, at: Nanos, cost: u64, main: &Limiter) {
        let Some(mut m) = self.meta.get_mut(&key(rule, hash_part)) else {
            main.refund(rule, hash_part, at, cost);
            return;
        };
        self.store.refund(rule, hash_part, at, cost);
        if let Some(i) = m
            .standins
            .iter()
            .rposition(|s| s.at == at && s.cost == cost)
        {
            m.standins.remove(i);
        }
    }

    /// Merges into `main` a counter its owner handed over itself (a
    /// graceful leave or a ring change).
    /// - An unpromoted copy is superseded: the count arrives whole, so the
    ///   copy is dropped, and the stand-in admissions the owner was never
    ///   charged with are counted here instead.
    /// - A copy promoted from the sender's process (this node's ring dropped
    ///   the sender before its handoff arrived) is already in `main`, with
    ///   the admissions gateways reported since: only what the owner spent
    ///   past it is added (merging the whole count would charge the key's
    ///   window twice and deny everything until it passed).
    /// - Anything else is merged whole.
    ///
    /// A copy the sender took before the handoff and that arrives after it
    /// (a replication call in flight) would be promoted on top of the
    /// count. A leaving sender stops replicating before it takes its
    /// counters (`Cluster::leave`, `Replicator::stop`); should a call it
    /// gave up on still land, a key whose copy this node held is refused
    /// older copies from the sender for a minute (`take`). Only those are
    /// remembered, so the records are bounded by the copies this node
    /// held, not by the size of a handoff.
    ///
    /// The copy's entry is held through the merge, so neither a ring change
    /// (`on_ring`) nor a copy (`take`) of the key lands in between.
    pub fn handed_over(
        &self,
        main: &Limiter,
        snap: CounterSnapshot,
        from: &Sender,
    ) -> Result<(), Absorb> {
        let (rule, hash_part) = (snap.rule.clone(), snap.hash_part.clone());
        let handed = || Handed {
            from: from.node.to_string(),
            boot: from.boot,
            at: from.at,
            kept_from: self.store.now(),
        };
        match self.meta.entry(key(&rule, &hash_part)) {
            Entry::Occupied(copy) => {
                main.absorb(snap)?;
                self.store.take(&rule, &hash_part);
                let standins = uncharged(copy.get());
                if copy.get().owner == from.node {
                    self.handed.insert(copy.key().clone(), handed());
                }
                copy.remove();
                if standins > 0 {
                    let _ = main.charge(&rule, &hash_part, standins);
                }
                Ok(())
            }
            Entry::Vacant(copy) => {
                let promoted = self.bases.remove_if(copy.key(), |_, b| {
                    b.owner == from.node && b.boot == from.boot
                });
                let snap = match promoted {
                    Some((_, base)) => {
                        self.handed.insert(copy.key().clone(), handed());
                        match self.past(&snap, &base) {
                            Some(state) => CounterSnapshot { state, ..snap },
                            None => snap,
                        }
                    }
                    None => snap,
                };
                main.absorb(snap)
            }
        }
    }

    /// Remembers that `from` handed counters over, once a handoff and
    /// before any of its counters lands: a report of its admissions
    /// arriving after this starts no copy. One that arrived earlier started
    /// a copy that the key's handed count supersedes.
    pub fn handoff_from(&self, from: &Sender) {
        // Once a handoff call: the id's allocation is nothing beside it.
        self.handoffs
            .insert(from.node.to_string(), self.store.now());
    }

    /// Stand-in admissions to charge to the owners `payable` accepts, each
    /// marked as sent until [`Replicas::charged`] or [`Replicas::unsent`].
    pub fn owed(&self, payable: impl Fn(&str) -> bool) -> Vec<Owed> {
        let mut out = Vec::new();
        for mut e in self.meta.iter_mut() {
            if e.standins.is_empty() || e.superseded || !payable(&e.owner) {
                continue;
            }
            let (rule, hash_part) = e.key().clone();
            let owner = e.owner.clone();
            for s in e.standins.iter_mut().filter(|s| s.charged == Charged::Owed) {
                s.charged = Charged::Sent;
                out.push(Owed {
                    owner: owner.clone(),
                    rule: rule.clone(),
                    hash_part: hash_part.to_string(),
                    cost: s.cost,
                    at: s.at,
                });
            }
        }
        out
    }

    /// A new process of the owner of (rule, key)'s copy asked about the
    /// key (it restarted under its id, and this node's ring lists the old
    /// process still): the copy goes whole to it once the ring takes it in,
    /// so nothing decided on it is charged to the owner's id meanwhile,
    /// which the new process answers, and would count twice.
    pub fn supersede(&self, rule: &str, hash_part: &str) {
        if let Some(mut m) = self.meta.get_mut(&key(rule, hash_part)) {
            m.superseded = true;
        }
    }

    /// The owner applied a charge at `applied_at` on its clock.
    pub fn charged(&self, o: &Owed, applied_at: Nanos) {
        self.mark(o, Charged::At(applied_at));
    }

    /// A charge did not arrive: it is owed again.
    pub fn unsent(&self, o: &Owed) {
        self.mark(o, Charged::Owed);
    }

    fn mark(&self, o: &Owed, to: Charged) {
        if let Some(mut m) = self.meta.get_mut(&key(&o.rule, &o.hash_part)) {
            if let Some(s) = m
                .standins
                .iter_mut()
                .find(|s| s.at == o.at && s.cost == o.cost)
            {
                s.charged = to;
            }
        }
    }

    /// An admission its owner made, reported by a gateway the owner
    /// answered once it was lost: added to the copy (or the counter
    /// promoted from it) unless the copy already holds it. True when added.
    ///
    /// With no copy here yet (the owner admitted the key before its first
    /// copy arrived), the admission is added to this node's counters if a
    /// stand-in was decided there; otherwise a copy is started from
    /// nothing with it,
    /// while `ring` (this node's) still has the owner, with this node its
    /// key's holder. From then on it is a copy like any other: a copy the
    /// owner took later replaces it, a handoff supersedes it, and the ring
    /// dropping the owner promotes it. Dropped instead, the admission would
    /// be granted again by the key's next owner. Once the owner handed its
    /// counters here, none is started: what it admitted before is in the
    /// handoff, and what it admitted after (a leaving owner sends its
    /// checks on) was decided here.
    pub fn admitted_by(&self, a: &Admitted, main: &Limiter, ring: &Ring, me: &str) -> bool {
        // The copy's entry is held through; each other guard is of its own
        // map, held over no other access of it.
        match self.meta.entry(key(a.rule, a.hash_part)) {
            Entry::Occupied(mut copy) => {
                let m = copy.get_mut();
                if m.owner != a.owner
                    || a.at <= m.taken_at
                    || self.store.charge(a.rule, a.hash_part, a.cost).is_err()
                {
                    return false;
                }
                // Applied by the owner at `at`: later copies include it.
                m.standins.push(Standin {
                    at: a.at,
                    cost: a.cost,
                    charged: Charged::At(a.at),
                });
                true
            }
            Entry::Vacant(slot) => {
                if let Some(mut b) = self.bases.get_mut(slot.key()) {
                    if b.owner != a.owner
                        || a.at <= b.taken_at
                        || main.charge(a.rule, a.hash_part, a.cost).is_err()
                    {
                        return false;
                    }
                    // The owner holds it too: what goes back to it after a
                    // heal must not.
                    return self.store.charge_state(a.rule, &mut b.state, a.cost);
                }
                let handed = self.handoffs.contains_key(a.owner);
                let holder = ring.owner_id(a.hash_part) == Some(a.owner)
                    && ring.replica_of(a.hash_part).is_some_and(|h| h.id == me);
                let boot = ring
                    .members()
                    .iter()
                    .find(|m| m.id == a.owner)
                    .map(|m| m.boot);
                let Some(boot) = boot.filter(|_| holder && !handed) else {
                    return false;
                };
                // Stood in for the owner on this node's counters already
                // (`stand_in`, no copy held): the key's count is there, and
                // the admission with it. Started beside them, a copy decided
                // the next stand-ins without the first, and the ring's drop
                // of the owner added both: one over for each (a check the
                // holder decided for itself before the report arrived).
                if main.holds(a.rule, a.hash_part) {
                    return main.charge(a.rule, a.hash_part, a.cost).is_ok();
                }
                if self.store.charge(a.rule, a.hash_part, a.cost).is_err() {
                    return false;
                }
                slot.insert(Meta {
                    owner: a.owner.to_string(),
                    boot,
                    taken_at: 0,
                    standins: vec![Standin {
                        at: a.at,
                        cost: a.cost,
                        charged: Charged::At(a.at),
                    }],
                    superseded: false,
                });
                true
            }
        }
    }

    /// On a new ring: copies whose owner left it, or came back on it as
    /// another process (restarted, so it holds none of their counts). Those
    /// this node now owns are merged into `main`, its counters (with their
    /// base remembered); returns how many, and the others, for their new
    /// owners (a restarted owner among them). Copies this node no longer
    /// holds for a live owner are dropped.
    ///
    /// Each copy's entry is held until its count is in `main`: a stand-in
    /// that finds no copy is decided on `main`, and must find it there.
    /// The merge adds the copy to any count `main` holds of the key already
    /// (ops a gateway whose ring dropped the owner first sent here).
    pub fn on_ring(&self, ring: &Ring, me: &str, main: &Limiter) -> (usize, Vec<CounterSnapshot>) {
        let members: Vec<&NodeIdentity> = ring.members().iter().collect();
        let live = |id: &str, boot: u64| members.iter().any(|m| m.id == id && m.boot == boot);
        let (mut mine, mut theirs) = (0, Vec::new());
        let keys: Vec<Key> = self.meta.iter().map(|e| e.key().clone()).collect();
        let now = self.store.now();
        for k in keys {
            // Held until the copy is a base or gone: a handoff of the same
            // key (`handed_over`) waits for it, and sees one or the other.
            let Entry::Occupied(copy) = self.meta.entry(k) else {
                continue;
            };
            let (rule, hash_part) = copy.key().clone();
            let m = copy.get();
            if live(&m.owner, m.boot) {
                // Still its owner's copy, if this node is still the holder.
                if ring.replica_of(&hash_part).is_none_or(|h| h.id != me) {
                    self.store.take(&rule, &hash_part);
                    copy.remove();
                }
                continue;
            }
            let Some(snap) = self.store.take(&rule, &hash_part) else {
                copy.remove();
                continue;
            };
            if ring.owner_id(&hash_part).is_some_and(|o| o == me) {
                let base = Base {
                    owner: m.owner.clone(),
                    boot: m.boot,
                    taken_at: m.taken_at,
                    state: snap.state.clone(),
                    uncharged: uncharged(m),
                    at: now,
                };
                self.bases.insert((rule.clone(), hash_part.clone()), base);
                if let Err(e) = main.absorb(snap) {
                    tracing::warn!(%rule, key = %hash_part, ?e, "a promoted copy was not taken");
                }
                mine += 1;
            } else {
                theirs.push(snap);
            }
            copy.remove();
        }
        (mine, theirs)
    }

    /// What to hand `to` for a counter this node promoted: only what was
    /// spent since, when `to` is the same process the copy came from (a
    /// healed partition: its own count holds the rest); None when `snap`
    /// goes whole (`to` restarted empty, or the key has no base).
    pub fn hand_back(&self, snap: &CounterSnapshot, to: &NodeIdentity) -> Option<CounterSnapshot> {
        // Carried limits have no copies; one may share a rule's name.
        if snap.carried.is_some() {
            return None;
        }
        let k = key(&snap.rule, &snap.hash_part);
        let (_, base) = self.bases.remove(&k)?;
        if base.owner != to.id || base.boot != to.boot {
            return None;
        }
        let state = self.past(snap, &base)?;
        Some(CounterSnapshot {
            rule: snap.rule.clone(),
            hash_part: snap.hash_part.clone(),
            state,
            carried: None,
        })
    }

    /// What `snap`, a later count of a promoted key, holds past its base,
    /// plus the base's stand-ins its owner was never charged with (the
    /// owner's own count lacks them). None (`snap` whole) when it cannot be
    /// said.
    fn past(&self, snap: &CounterSnapshot, base: &Base) -> Option<State> {
        let mut since = self.store.since(snap, &base.state)?;
        let charged = base.uncharged == 0
            || self
                .store
                .charge_state(&snap.rule, &mut since, base.uncharged);
        charged.then_some(since)
    }

    /// Whether a sweep is due (`SWEEP_EVERY` since the last), claiming
    /// it when it is: asked before the pass is sent off to the blocking
    /// pool, so the ticks it is not due cost no hop there.
    pub fn sweep_due(&self) -> bool {
        let now = self.store.now();
        let last = self.swept_at.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < nanos(SWEEP_EVERY) {
            return false;
        }
        self.swept_at.store(now.max(1), Ordering::Relaxed);
        true
    }

    /// Drops idle copies and old bases: a pass over every copy held.
    pub fn sweep(&self) {
        let now = self.store.now();
        self.store.sweep();
        let kept = nanos(BASE_KEPT);
        self.bases.retain(|_, b| now.saturating_sub(b.at) < kept);
        let kept = nanos(HANDED_KEPT);
        self.handed
            .retain(|_, h| now.saturating_sub(h.kept_from) < kept);
        self.handoffs.retain(|_, at| now.saturating_sub(*at) < kept);
    }

    /// Copies held.
    pub fn len(&self) -> usize {
        self.store.keys()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use weir_core::{FakeClock, Gate, LimiterConfig, Rule, RuleSet};

    use super::*;

    /// A region's share with no room left.
    struct Spent;

    impl Gate for Spent {
        fn take(&self, _: &Rule, _: &str, _: u64, _: Nanos) -> Result<(), Duration> {
            Err(Duration::from_millis(250))
        }
        fn give_back(&self, _: &Rule, _: &str, _: Nanos, _: u64) {}
    }

    /// Guard: a copy standing in for its owner takes a global rule's share
    /// from this node's region gate, as the owner would have; without it a
    /// stand-in admitted past the region's share during every failover.
    #[test]
    fn a_stand_in_on_a_global_rule_is_held_to_the_regions_share() {
        let main = limiter(
            r#"
            [[rule]]
            name = "g"
            algorithm = "fixed_window"
            limit = 10
            window = "60s"
            scope = "global"
            "#,
        );
        let replicas = Replicas::new(&main);
        assert_eq!(copy_of_owner_1(&main, &replicas, "g", "k"), 1);
        // The gate arrives once the node joins its regions, after the copies.
        assert!(main.set_gate(Arc::new(Spent)));
        let d = on_the_copy(replicas.stand_in("g", "k", 1, || ()));
        assert!(!d.allowed, "{d:?}");
        assert_eq!(d.retry_after, Duration::from_millis(250));
    }

    /// Guard: with no copy held, the key's entry stays taken while the
    /// caller decides on this node's counters, so a lost owner's report
    /// (`admitted_by`) lands wholly before that decision (and joins the
    /// count it finds there) or after it. Let go first, a report landing
    /// between the two started a copy beside the decision, and the key
    /// admitted one more than its limit.
    #[test]
    fn a_stand_in_on_this_nodes_counters_holds_the_keys_entry() {
        let main = limiter(
            "[[rule]]\nname = \"r\"\nalgorithm = \"fixed_window\"\nlimit = 3\nwindow = \"60s\"\n",
        );
        let replicas = Replicas::new(&main);
        let held = replicas.stand_in("r", "k", 1, || {
            replicas.meta.try_entry(key("r", "k")).is_none()
        });
        assert!(matches!(held, Ok(StandIn::Here(true))), "{held:?}");
    }

    /// A stand-in that must have been decided on the copy.
    fn on_the_copy<T: std::fmt::Debug>(stood: Result<StandIn<T>, CheckError>) -> Decision {
        match stood {
            Ok(StandIn::Copy(d)) => d,
            other => panic!("not decided on a copy: {other:?}"),
        }
    }

    /// A node's counters under the rules `toml`, on a fake clock.
    fn limiter(toml: &str) -> Limiter {
        Limiter::new(
            RuleSet::from_toml(toml).unwrap(),
            Arc::new(FakeClock::at_secs(6_000.0)),
            LimiterConfig::default(),
        )
    }

    /// Takes into `replicas` a copy, from `owner-1`, of a counter of
    /// (`rule`, `key`) with one spent: made on `main`, then taken out of it.
    fn copy_of_owner_1(main: &Limiter, replicas: &Replicas, rule: &str, key: &str) -> u32 {
        let addr = "127.0.0.1:1".parse().unwrap();
        let owner = NodeIdentity {
            boot: 1,
            ..NodeIdentity::new("owner-1", addr, addr)
        };
        let ring = Ring::with_default_vnodes(&[owner]);
        main.consume(rule, key, 1, main.now()).unwrap();
        let copy = main.take(rule, key).unwrap();
        replicas.take("owner-1", 1, main.now(), vec![copy], &ring)
    }

    /// A maintenance tick's sweep of the copies, as `Gateway::maintain`
    /// runs it: whether it ran.
    fn swept(replicas: &Replicas) -> bool {
        let due = replicas.sweep_due();
        if due {
            replicas.sweep();
        }
        due
    }

    /// Guard: the copies are swept at most once a second, however often
    /// the maintenance tick asks: each pass reads every copy held, and at
    /// the tick's four a second half a million copies cost 3% of a core.
    #[test]
    fn the_copies_are_swept_once_a_second() {
        let rules =
            "[[rule]]\nname = \"r\"\nalgorithm = \"fixed_window\"\nlimit = 5\nwindow = \"1s\"\n";
        let clock = Arc::new(FakeClock::at_secs(6_000.0));
        let main = Limiter::new(
            RuleSet::from_toml(rules).unwrap(),
            clock.clone(),
            LimiterConfig::default(),
        );
        let replicas = Replicas::new(&main);
        copy_of_owner_1(&main, &replicas, "r", "k");
        assert!(swept(&replicas), "the first sweep runs");
        assert_eq!(replicas.len(), 1, "a live copy stays");
        // k at rest once its window is over; j live in the next window.
        clock.advance(Duration::from_millis(1_500));
        copy_of_owner_1(&main, &replicas, "r", "j");
        assert!(swept(&replicas));
        assert_eq!(replicas.len(), 1, "k dropped at rest, j kept");
        // j at rest from here on, kept until a second after that pass.
        clock.advance(Duration::from_millis(600));
        for _ in 0..2 {
            assert!(!swept(&replicas), "within a second of the last pass");
            clock.advance(Duration::from_millis(250));
        }
        assert_eq!(replicas.len(), 1, "kept until the next pass");
        assert!(swept(&replicas), "a second after the last pass");
        assert_eq!(replicas.len(), 0);
    }

    /// Guard: with no copy of the key held, a stand-in is decided on this
    /// node's counters. On a fresh copy instead, a holder whose counters
    /// already spent the key (it owns it now, on its ring) granted it a
    /// second budget, and one those counters never saw.
    #[test]
    fn with_no_copy_a_stand_in_is_left_to_this_nodes_counters() {
        let main = limiter(
            "[[rule]]\nname = \"r\"\nalgorithm = \"fixed_window\"\nlimit = 3\nwindow = \"60s\"\n",
        );
        let replicas = Replicas::new(&main);
        let here = replicas.stand_in("r", "k", 1, || main.consume("r", "k", 1, main.now()));
        assert!(matches!(here, Ok(StandIn::Here(Ok(_)))), "{here:?}");
        assert!(replicas.is_empty(), "no copy was made up");
        assert_eq!(copy_of_owner_1(&main, &replicas, "r", "held"), 1);
        let d = on_the_copy(replicas.stand_in("r", "held", 1, || ()));
        assert_eq!((d.allowed, d.remaining), (true, 1), "1 + this one of 3");
    }
}
