//! Counters of limits carried by requests (Envoy overrides), all in one table under one key ceiling.
//!
//! A carried limit is named after its value (`override:10-per-minute`), so
//! callers choose how many distinct limits there are. One table for all of
//! them, keyed by (limit name, key), means no caller can use up a fixed
//! number of per-limit tables, and `--max-keys` bounds them all together.

use std::sync::Arc;

use compact_str::CompactString;
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;

use super::{shards_for, AbsorbError, Ceiling, Full, StoreCounts};
use crate::algorithm::{Policy, State};
use crate::clock::Nanos;
use crate::decision::Decision;

type Key = (Arc<str>, CompactString);

/// One key of a carried limit: the policy it was last decided under, and its state.
struct Slot {
    policy: Policy,
    state: State,
}

pub struct Carried {
    map: DashMap<Key, Slot, crate::determinism::HashState>,
    ceiling: Ceiling,
}

impl Carried {
    pub fn new(max_keys: usize) -> Self {
        Carried {
            map: DashMap::with_hasher_and_shard_amount(Default::default(), shards_for(max_keys)),
            ceiling: Ceiling::new(max_keys),
        }
    }

    /// Decides `cost` for `key` under the carried limit `name` with `policy`.
    /// The caller has checked `1 <= cost <= policy.max_cost()`.
    pub fn consume(
        &self,
        name: &Arc<str>,
        policy: &Policy,
        key: &str,
        now: Nanos,
        cost: u64,
    ) -> Result<Decision, Full> {
        let k = (name.clone(), CompactString::new(key));
        // One lookup that holds its guard only inside `decide`: the guard
        // of a DashMap entry write-locks the shard, so nothing else touches
        // the map while it lives.
        if !self.map.contains_key(&k) {
            self.ceiling.make_room(now, || self.sweep_at(now))?;
        }
        let decision = match self.map.entry(k) {
            Entry::Occupied(mut o) => self.decide(o.get_mut(), policy, now, cost),
            Entry::Vacant(v) => {
                let mut slot = Slot {
                    policy: *policy,
                    state: policy.fresh(),
                };
                let d = self.decide(&mut slot, policy, now, cost);
                v.insert(slot);
                self.ceiling.added();
                d
            }
        };
        Ok(decision)
    }

    fn decide(&self, slot: &mut Slot, policy: &Policy, now: Nanos, cost: u64) -> Decision {
        // The same name under another policy: a divided share resized keeps
        // what its callers spent; any other change starts the key over.
        if slot.policy != *policy {
            if !slot.policy.keeps_counts_as(policy) {
                slot.state = policy.fresh();
            }
            slot.policy = *policy;
        }
        let d = policy
            .decide(&mut slot.state, now, cost)
            .expect("the state was made for this policy");
        self.ceiling.rests_at(policy.rest_at(&slot.state));
        d
    }

    /// Gives back `cost` consumed at `at` under the limit `name`.
    pub fn refund(&self, name: &Arc<str>, key: &str, at: Nanos, cost: u64) {
        if let Some(mut slot) = self.map.get_mut(&(name.clone(), CompactString::new(key))) {
            let Slot { policy, state } = &mut *slot;
            policy.refund(state, at, cost);
            self.ceiling.rests_at(policy.rest_at(state));
        }
    }

    /// Every key whose caller key `keep` rejects, with its policy and state:
    /// removed when `take` (what a node hands to the keys' owners when it
    /// leaves), else copied and left in place (see [`Carried::settle`]).
    pub fn unkept(
        &self,
        mut keep: impl FnMut(&str) -> bool,
        take: bool,
    ) -> Vec<(Arc<str>, CompactString, Policy, State)> {
        let out_of = |(name, key): &Key, slot: &Slot| {
            (name.clone(), key.clone(), slot.policy, slot.state.clone())
        };
        if !take {
            let unkept = self.map.iter().filter(|e| !keep(&e.key().1));
            return unkept.map(|e| out_of(e.key(), e.value())).collect();
        }
        let mut out = Vec::new();
        self.map.retain(|k, slot| {
            if keep(&k.1) {
                return true;
            }
            out.push(out_of(k, slot));
            false
        });
        self.ceiling.removed(out.len());
        out
    }

    /// Keeps of `key` under `name` only what was spent past `sent`, an
    /// earlier copy of its state now counted elsewhere; the key is dropped
    /// when nothing was. One entry guard throughout. True when something
    /// stays.
    pub fn settle(&self, name: &Arc<str>, key: &str, sent: &State, now: Nanos) -> bool {
        let Entry::Occupied(mut o) = self.map.entry((name.clone(), CompactString::new(key))) else {
            return false;
        };
        let policy = o.get().policy;
        let Some(past) = policy.since(&o.get().state, sent, now) else {
            return false;
        };
        let mut kept = policy.fresh();
        policy.merge(&mut kept, past, now);
        if policy.is_idle(&kept, now) {
            o.remove();
            self.ceiling.removed(1);
            return false;
        }
        self.ceiling.rests_at(policy.rest_at(&kept));
        o.get_mut().state = kept;
        true
    }

    /// Folds a state another node held for `key` under the carried limit
    /// `name` into this table, after checking it as a handed-over rule
    /// counter is checked: spent budgets add, and an invalid state, or a new
    /// key past the ceiling, is refused and changes nothing.
    pub fn absorb(
        &self,
        name: &Arc<str>,
        policy: &Policy,
        key: &str,
        state: State,
        now: Nanos,
    ) -> Result<(), AbsorbError> {
        let other = policy.admit(state, now).ok_or(AbsorbError::Invalid)?;
        // Merged into a fresh state, so the state held is one this node's
        // own arithmetic produced.
        let mut incoming = policy.fresh();
        policy.merge(&mut incoming, other, now);
        if policy.is_idle(&incoming, now) {
            return Ok(());
        }
        let k = (name.clone(), CompactString::new(key));
        // Room is made before the entry's guard is taken: a sweep
        // write-locks every shard, this key's among them.
        if !self.map.contains_key(&k) {
            self.ceiling
                .make_room(now, || self.sweep_at(now))
                .map_err(|Full| AbsorbError::Full)?;
        }
        match self.map.entry(k) {
            Entry::Occupied(mut o) => {
                let slot = o.get_mut();
                if slot.policy == *policy {
                    policy.merge(&mut slot.state, incoming, now);
                } else {
                    // Held under another value of the same name: as a
                    // consume would, start the key over under this one.
                    *slot = Slot {
                        policy: *policy,
                        state: incoming,
                    };
                }
                self.ceiling.rests_at(policy.rest_at(&slot.state));
            }
            Entry::Vacant(v) => {
                self.ceiling.rests_at(policy.rest_at(&incoming));
                v.insert(Slot {
                    policy: *policy,
                    state: incoming,
                });
                self.ceiling.added();
            }
        }
        Ok(())
    }

    fn sweep_at(&self, now: Nanos) -> (usize, Nanos) {
        let mut removed = 0;
        let mut earliest = Nanos::MAX;
        self.map.retain(|_, slot| {
            let idle = slot.policy.is_idle(&slot.state, now);
            removed += usize::from(idle);
            if !idle {
                earliest = earliest.min(slot.policy.rest_at(&slot.state));
            }
            !idle
        });
        (removed, earliest)
    }

    /// Drops every key at rest; returns how many.
    pub fn sweep(&self, now: Nanos) -> usize {
        let _one = self.ceiling.sweep_lock();
        self.ceiling.swept(self.sweep_at(now))
    }

    pub fn len(&self) -> usize {
        self.ceiling.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn counts(&self) -> StoreCounts {
        self.ceiling.counts()
    }

    /// How many locks the keys are spread over.
    #[cfg(test)]
    pub(crate) fn shard_count(&self) -> usize {
        self.map.shards().len()
    }
}
