//! A keyed concurrent store of counter state: one atomic read-modify-write per key.
//!
//! One store per rule, holding exactly that rule's state type, so a token
//! bucket key costs its 16 bytes of state and not the size of the largest
//! algorithm's. DashMap's per-shard write lock is the chapter's `with
//! self.lock`: no two threads can spend the same token (seed 6.1 measured 570
//! to 1,767 admitted against a capacity of 500 without it).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use compact_str::CompactString;
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;

use crate::algorithm::{
    Algorithm, FixedWindow, LeakyBucket, Policy, SlidingCounter, SlidingLog, State, TokenBucket,
};
use crate::clock::{Nanos, NANOS_PER_SEC};
use crate::decision::Decision;

/// Keys are attacker-chosen strings, so the hasher is seeded per process
/// (foldhash's RandomState) to keep collision floods out.
type Map<S> = DashMap<CompactString, S, foldhash::fast::RandomState>;

/// The store is at its key ceiling and nothing idle could be dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

/// How often a full store may sweep on the request path; a flood of new keys
/// must not turn every request into a full scan.
const SWEEP_EVERY: Nanos = NANOS_PER_SEC;

struct KeyedStore<A: Algorithm> {
    algo: A,
    map: Map<A::State>,
    len: AtomicUsize,
    max_keys: usize,
    last_sweep: AtomicU64,
}

impl<A> KeyedStore<A>
where
    A: Algorithm,
    A::State: Send + Sync,
{
    fn new(algo: A, max_keys: usize) -> Self {
        KeyedStore {
            algo,
            map: Map::default(),
            len: AtomicUsize::new(0),
            max_keys,
            last_sweep: AtomicU64::new(0),
        }
    }

    fn consume(&self, key: &str, now: Nanos, cost: u64) -> Result<Decision, Full> {
        if let Some(mut s) = self.map.get_mut(key) {
            return Ok(self.algo.decide(&mut s, now, cost));
        }
        self.make_room(now)?;
        match self.map.entry(CompactString::new(key)) {
            Entry::Occupied(mut o) => Ok(self.algo.decide(o.get_mut(), now, cost)),
            Entry::Vacant(v) => {
                let mut s = self.algo.fresh();
                let d = self.algo.decide(&mut s, now, cost);
                v.insert(s);
                self.len.fetch_add(1, Ordering::Relaxed);
                Ok(d)
            }
        }
    }

    /// Before a new key: if at the ceiling, sweep idle keys (at most once per
    /// SWEEP_EVERY) and refuse if that freed nothing.
    fn make_room(&self, now: Nanos) -> Result<(), Full> {
        if self.len.load(Ordering::Relaxed) < self.max_keys {
            return Ok(());
        }
        let last = self.last_sweep.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= SWEEP_EVERY
            && self
                .last_sweep
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.sweep(now);
        }
        if self.len.load(Ordering::Relaxed) < self.max_keys {
            Ok(())
        } else {
            Err(Full)
        }
    }

    fn refund(&self, key: &str, at: Nanos, cost: u64) {
        if let Some(mut s) = self.map.get_mut(key) {
            self.algo.refund(&mut s, at, cost);
        }
    }

    /// Records `cost` spent elsewhere on `key`, creating it when it is new
    /// (refused only when the store is full of live keys).
    fn charge(&self, key: &str, now: Nanos, cost: u64) -> Result<(), Full> {
        if let Some(mut s) = self.map.get_mut(key) {
            self.algo.charge(&mut s, now, cost);
            return Ok(());
        }
        self.make_room(now)?;
        let mut entry = self.map.entry(CompactString::new(key)).or_insert_with(|| {
            self.len.fetch_add(1, Ordering::Relaxed);
            self.algo.fresh()
        });
        self.algo.charge(&mut entry, now, cost);
        Ok(())
    }

    fn get(&self, key: &str) -> Option<A::State> {
        self.map.get(key).map(|s| s.clone())
    }

    /// Replaces `key`'s state whole (a replica taking its owner's copy); a
    /// new key needs room, as for a consume.
    fn put(&self, key: &str, state: A::State, now: Nanos) -> Result<(), Full> {
        if let Some(mut s) = self.map.get_mut(key) {
            *s = state;
            return Ok(());
        }
        self.make_room(now)?;
        if self.map.insert(CompactString::new(key), state).is_none() {
            self.len.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    fn keys(&self, out: &mut Vec<CompactString>, keep: &mut dyn FnMut(&str) -> bool) {
        out.extend(self.map.iter().map(|e| e.key().clone()).filter(|k| keep(k)));
    }

    fn remove(&self, key: &str) -> Option<A::State> {
        let (_, s) = self.map.remove(key)?;
        self.len.fetch_sub(1, Ordering::Relaxed);
        Some(s)
    }

    fn sweep(&self, now: Nanos) -> usize {
        let mut removed = 0;
        self.map.retain(|_, s| {
            let idle = self.algo.is_idle(s, now);
            removed += usize::from(idle);
            !idle
        });
        self.len.fetch_sub(removed, Ordering::Relaxed);
        removed
    }

    fn take(&self, keep: &mut dyn FnMut(&str) -> bool) -> Vec<(CompactString, A::State)> {
        let mut out = Vec::new();
        self.map.retain(|k, s| {
            if keep(k) {
                return true;
            }
            out.push((k.clone(), s.clone()));
            false
        });
        self.len.fetch_sub(out.len(), Ordering::Relaxed);
        out
    }

    /// Every key of this store under `algo` (the same algorithm with other
    /// parameters), each state merged into a fresh one, so what was spent
    /// stays spent and the new parameters' bounds apply.
    fn resized(&self, algo: A, max_keys: usize, now: Nanos) -> KeyedStore<A> {
        let out = KeyedStore::new(algo, max_keys);
        for e in self.map.iter() {
            let mut s = out.algo.fresh();
            out.algo.merge(&mut s, e.value().clone(), now);
            out.map.insert(e.key().clone(), s);
        }
        out.len.store(out.map.len(), Ordering::Relaxed);
        out
    }

    fn absorb(&self, key: &str, other: A::State, now: Nanos) {
        match self.map.entry(CompactString::new(key)) {
            Entry::Occupied(mut o) => self.algo.merge(o.get_mut(), other, now),
            Entry::Vacant(v) => {
                v.insert(other);
                self.len.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

enum Inner {
    TokenBucket(KeyedStore<TokenBucket>),
    LeakyBucket(KeyedStore<LeakyBucket>),
    FixedWindow(KeyedStore<FixedWindow>),
    SlidingLog(KeyedStore<SlidingLog>),
    SlidingCounter(KeyedStore<SlidingCounter>),
}

/// Runs `$body` with `$s` bound to whichever typed store `$inner` holds.
macro_rules! each_store {
    ($inner:expr, $s:ident => $body:expr) => {
        match $inner {
            Inner::TokenBucket($s) => $body,
            Inner::LeakyBucket($s) => $body,
            Inner::FixedWindow($s) => $body,
            Inner::SlidingLog($s) => $body,
            Inner::SlidingCounter($s) => $body,
        }
    };
}

/// Every key's state under one policy.
pub struct Counters {
    policy: Policy,
    inner: Inner,
}

impl Counters {
    pub fn new(policy: Policy, max_keys: usize) -> Self {
        let inner = match policy {
            Policy::TokenBucket(a) => Inner::TokenBucket(KeyedStore::new(a, max_keys)),
            Policy::LeakyBucket(a) => Inner::LeakyBucket(KeyedStore::new(a, max_keys)),
            Policy::FixedWindow(a) => Inner::FixedWindow(KeyedStore::new(a, max_keys)),
            Policy::SlidingLog(a) => Inner::SlidingLog(KeyedStore::new(a, max_keys)),
            Policy::SlidingCounter(a) => Inner::SlidingCounter(KeyedStore::new(a, max_keys)),
        };
        Counters { policy, inner }
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Decides `cost` for `key` atomically. The caller has checked
    /// `1 <= cost <= policy.max_cost()`.
    pub fn consume(&self, key: &str, now: Nanos, cost: u64) -> Result<Decision, Full> {
        debug_assert!(cost >= 1 && cost <= self.policy.max_cost());
        each_store!(&self.inner, s => s.consume(key, now, cost))
    }

    /// Gives back what a decision taken at `at` consumed.
    pub fn refund(&self, key: &str, at: Nanos, cost: u64) {
        each_store!(&self.inner, s => s.refund(key, at, cost))
    }

    /// Records `cost` spent elsewhere on `key`, whatever the limit.
    pub fn charge(&self, key: &str, now: Nanos, cost: u64) -> Result<(), Full> {
        each_store!(&self.inner, s => s.charge(key, now, cost))
    }

    /// `key`'s state, as a copy.
    pub fn get(&self, key: &str) -> Option<State> {
        match &self.inner {
            Inner::TokenBucket(s) => s.get(key).map(State::TokenBucket),
            Inner::LeakyBucket(s) => s.get(key).map(State::LeakyBucket),
            Inner::FixedWindow(s) => s.get(key).map(State::FixedWindow),
            Inner::SlidingLog(s) => s.get(key).map(State::SlidingLog),
            Inner::SlidingCounter(s) => s.get(key).map(State::SlidingCounter),
        }
    }

    /// Replaces `key`'s state whole. False when the state is of another
    /// algorithm, or the key is new and the store is full.
    pub fn put(&self, key: &str, state: State, now: Nanos) -> bool {
        match (&self.inner, state) {
            (Inner::TokenBucket(s), State::TokenBucket(st)) => s.put(key, st, now).is_ok(),
            (Inner::LeakyBucket(s), State::LeakyBucket(st)) => s.put(key, st, now).is_ok(),
            (Inner::FixedWindow(s), State::FixedWindow(st)) => s.put(key, st, now).is_ok(),
            (Inner::SlidingLog(s), State::SlidingLog(st)) => s.put(key, st, now).is_ok(),
            (Inner::SlidingCounter(s), State::SlidingCounter(st)) => s.put(key, st, now).is_ok(),
            _ => false,
        }
    }

    /// The keys `keep` accepts, copied (the map is read shard by shard, so
    /// keys changed meanwhile may be missed or seen).
    pub fn keys(&self, mut keep: impl FnMut(&str) -> bool) -> Vec<CompactString> {
        let mut out = Vec::new();
        each_store!(&self.inner, s => s.keys(&mut out, &mut keep));
        out
    }

    /// Removes and returns `key`'s state.
    pub fn remove(&self, key: &str) -> Option<State> {
        match &self.inner {
            Inner::TokenBucket(s) => s.remove(key).map(State::TokenBucket),
            Inner::LeakyBucket(s) => s.remove(key).map(State::LeakyBucket),
            Inner::FixedWindow(s) => s.remove(key).map(State::FixedWindow),
            Inner::SlidingLog(s) => s.remove(key).map(State::SlidingLog),
            Inner::SlidingCounter(s) => s.remove(key).map(State::SlidingCounter),
        }
    }

    /// Drops every key whose state equals a fresh one; returns how many.
    pub fn sweep(&self, now: Nanos) -> usize {
        each_store!(&self.inner, s => s.sweep(now))
    }

    pub fn len(&self) -> usize {
        each_store!(&self.inner, s => s.len.load(Ordering::Relaxed))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// This table under `policy`, a policy of the same algorithm and window
    /// with another limit (a divided rule when the member count changes):
    /// counts already spent stay spent against the new limit. Only for the
    /// counting algorithms (windows and the log), whose state is counts and
    /// timestamps; a bucket's state is relative to its capacity, so
    /// `None` there, as for a change of algorithm.
    pub fn resized(&self, policy: Policy, max_keys: usize, now: Nanos) -> Option<Counters> {
        let inner = match (&self.inner, policy) {
            (Inner::FixedWindow(s), Policy::FixedWindow(a)) => {
                Inner::FixedWindow(s.resized(a, max_keys, now))
            }
            (Inner::SlidingLog(s), Policy::SlidingLog(a)) => {
                Inner::SlidingLog(s.resized(a, max_keys, now))
            }
            (Inner::SlidingCounter(s), Policy::SlidingCounter(a)) => {
                Inner::SlidingCounter(s.resized(a, max_keys, now))
            }
            _ => return None,
        };
        Some(Counters { policy, inner })
    }

    /// Removes and returns the keys `keep` rejects, as portable states: what a
    /// node hands to their new owners.
    pub fn take_unless(&self, mut keep: impl FnMut(&str) -> bool) -> Vec<(CompactString, State)> {
        match &self.inner {
            Inner::TokenBucket(s) => wrap(s.take(&mut keep), State::TokenBucket),
            Inner::LeakyBucket(s) => wrap(s.take(&mut keep), State::LeakyBucket),
            Inner::FixedWindow(s) => wrap(s.take(&mut keep), State::FixedWindow),
            Inner::SlidingLog(s) => wrap(s.take(&mut keep), State::SlidingLog),
            Inner::SlidingCounter(s) => wrap(s.take(&mut keep), State::SlidingCounter),
        }
    }

    /// Folds a handed-over state into `key`. Returns false when the state is
    /// of another algorithm (the rule changed meanwhile) and was dropped.
    pub fn absorb(&self, key: &str, state: State, now: Nanos) -> bool {
        match (&self.inner, state) {
            (Inner::TokenBucket(s), State::TokenBucket(st)) => s.absorb(key, st, now),
            (Inner::LeakyBucket(s), State::LeakyBucket(st)) => s.absorb(key, st, now),
            (Inner::FixedWindow(s), State::FixedWindow(st)) => s.absorb(key, st, now),
            (Inner::SlidingLog(s), State::SlidingLog(st)) => s.absorb(key, st, now),
            (Inner::SlidingCounter(s), State::SlidingCounter(st)) => s.absorb(key, st, now),
            _ => return false,
        }
        true
    }
}

fn wrap<S>(v: Vec<(CompactString, S)>, f: fn(S) -> State) -> Vec<(CompactString, State)> {
    v.into_iter().map(|(k, s)| (k, f(s))).collect()
}

#[cfg(test)]
mod tests;
