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

use super::{Ceiling, Full, StoreCounts};
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
    map: DashMap<Key, Slot, foldhash::fast::RandomState>,
    ceiling: Ceiling,
}

impl Carried {
    pub fn new(max_keys: usize) -> Self {
        Carried {
            map: DashMap::default(),
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
}
