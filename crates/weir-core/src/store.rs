//! A keyed concurrent store of counter state: one atomic read-modify-write per key.
//!
//! One store per rule, holding exactly that rule's state type, so a token
//! bucket key costs its 16 bytes of state and not the size of the largest
//! algorithm's. DashMap's per-shard write lock is the lock around
//! each read-modify-write: no two threads can spend the same token (without
//! it, racing threads each read the same balance and admit past the limit).

use std::hash::BuildHasher;
use std::sync::OnceLock;
use std::time::Duration;

use compact_str::CompactString;
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;

use crate::algorithm::{
    Algorithm, FixedWindow, LeakyBucket, Policy, SlidingCounter, SlidingLog, State, TokenBucket,
};
use crate::clock::Nanos;
use crate::decision::Decision;

pub use carried::Carried;
use ceiling::Ceiling;

/// Keys are attacker-chosen strings, so the hasher is seeded per process
/// (foldhash's RandomState) to keep collision floods out.
type Map<S> = DashMap<CompactString, S, crate::determinism::HashState>;

/// The store is at its key ceiling, and no key at rest made room: every
/// key it holds is live, or a sweep for room ran too lately to run again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

/// Why a handed-over state was not taken. Nothing changed in any case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AbsorbError {
    /// The state is another algorithm's (the rule changed meanwhile).
    #[error("the state belongs to another algorithm")]
    OtherAlgorithm,
    /// The state breaks its algorithm's invariants; no honest node holds it.
    #[error("the state breaks its algorithm's invariants")]
    Invalid,
    /// A new key, and the store is at its ceiling with no room made.
    #[error("the store is full")]
    Full,
}

/// What a store did at its ceiling, since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreCounts {
    /// Keys dropped because they were at rest (their state equal to a
    /// fresh key's): no answer changes.
    pub dropped_at_rest: u64,
    /// New keys refused because no room was made for them.
    pub refused_full: u64,
}

impl std::ops::Add for StoreCounts {
    type Output = StoreCounts;
    fn add(self, o: StoreCounts) -> StoreCounts {
        StoreCounts {
            dropped_at_rest: self.dropped_at_rest + o.dropped_at_rest,
            refused_full: self.refused_full + o.refused_full,
        }
    }
}

/// The most keys one shard should hold at a store's ceiling. Every pass
/// over the keys (the idle sweep each second, a sweep at the ceiling, a
/// shard's table growing) write-locks one shard at a time for the whole of
/// it, and each check on that shard waits it out: 13-18 ns a key here, so
/// about 0.1 ms at this size. DashMap's default, four shards a core, put
/// 125,000 keys under one lock at the default ceiling of a million on two
/// cores, and a check that met the sweep waited up to 2-3 ms
/// (docs/performance.md, "The idle sweep and a check").
const KEYS_PER_SHARD: usize = 8192;

/// More shards cost every lookup a little: each shard's lock sits on a
/// padded line pair of its own, and the more of them there are the fewer
/// stay in the core's cache (a 100-item batch in one process over 128
/// shards took 3-10% longer than over 8 on two cores, where a server of
/// 32 cores has 128 by DashMap's default anyway). Past this many, half a
/// megabyte of locks a rule, a bigger ceiling holds more keys a shard.
const MAX_SHARDS: usize = 4096;

/// How many shards a store of at most `max_keys` keys gets: enough to keep
/// each near `KEYS_PER_SHARD`, and never fewer than DashMap would use on
/// this machine, so a small store keeps its spread across cores.
pub fn shards_for(max_keys: usize) -> usize {
    static BY_CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let by_cores = *BY_CORES.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        (cores * 4).next_power_of_two()
    });
    let by_keys = max_keys.div_ceil(KEYS_PER_SHARD).next_power_of_two();
    by_keys.clamp(by_cores, MAX_SHARDS.max(by_cores))
}

struct KeyedStore<A: Algorithm> {
    algo: A,
    map: Map<A::State>,
    ceiling: Ceiling,
}

impl<A> KeyedStore<A>
where
    A: Algorithm,
    A::State: Send + Sync,
{
    fn new(algo: A, max_keys: usize) -> Self {
        KeyedStore {
            algo,
            map: Map::with_hasher_and_shard_amount(Default::default(), shards_for(max_keys)),
            ceiling: Ceiling::new(max_keys),
        }
    }

    /// Decides `cost` on `s` and notes when the key comes to rest. An
    /// admission whose delay is over `max_delay` is undone here, under the
    /// key's lock, so no other request ever sees its slot taken.
    fn decide(
        &self,
        s: &mut A::State,
        now: Nanos,
        cost: u64,
        max_delay: Option<Duration>,
    ) -> Decision {
        let before = (max_delay.is_some() && self.algo.can_delay()).then(|| s.clone());
        let d = self.algo.decide(s, now, cost);
        if let (Some(before), Some(max)) = (before, max_delay) {
            if d.exceeds(Some(max)) {
                *s = before;
                return d.beyond(max);
            }
        }
        self.ceiling.rests_at(self.algo.rest_at(s));
        d
    }

    fn consume(
        &self,
        key: &str,
        now: Nanos,
        cost: u64,
        max_delay: Option<Duration>,
    ) -> Result<Decision, Full> {
        // The guard of `get_mut` is dropped at the end of this `if let`
        // (it has no `else`), before `make_room` write-locks shards.
        if let Some(mut s) = self.map.get_mut(key) {
            return Ok(self.decide(&mut s, now, cost, max_delay));
        }
        self.ceiling.make_room(now, || self.sweep_at(now))?;
        match self.map.entry(CompactString::new(key)) {
            Entry::Occupied(mut o) => Ok(self.decide(o.get_mut(), now, cost, max_delay)),
            Entry::Vacant(v) => {
                let mut s = self.algo.fresh();
                let d = self.decide(&mut s, now, cost, max_delay);
                v.insert(s);
                self.ceiling.added();
                Ok(d)
            }
        }
    }

    /// Reads the slots of `keys` so that the decisions that follow find
    /// them in cache. A batch's keys are random over a table larger than
    /// the core's cache, so each lookup is a miss; here they are read one
    /// shard at a time under one read lock, with no locked instruction
    /// between two lookups, so the processor overlaps their misses instead
    /// of waiting out each in turn. That pays where a shard holds several
    /// of a batch's keys; over the 128 shards of a million-key ceiling a
    /// 100-item batch meets most shards once, and over 256 a batch took
    /// as long without warming (docs/performance.md, "The idle sweep and
    /// a check"). Returns how many of `keys` it holds.
    fn warm<'k>(&self, keys: impl Iterator<Item = &'k str>) -> usize {
        let shards = self.map.shards();
        // Hashed and sharded as the map itself does for a lookup.
        let placed: Vec<(usize, (u64, &str))> = keys
            .map(|k| {
                let hash = self.map.hasher().hash_one(k);
                (self.map.determine_shard(hash as usize), (hash, k))
            })
            .collect();
        let (ordered, starts) = by_shard(&placed, shards.len());
        let mut held = 0;
        for (s, run) in starts.windows(2).enumerate() {
            if run[0] == run[1] {
                continue;
            }
            let shard = shards[s].read();
            for &(hash, key) in &ordered[run[0]..run[1]] {
                // Comparing the key reads the slot; the state beside it
                // is in the same line or the next. Reading the state here
                // too cost more than it saved (docs/performance.md).
                let found = shard.find(hash, |(k, _)| k.as_str() == key);
                held += usize::from(std::hint::black_box(found).is_some());
            }
        }
        held
    }

    fn refund(&self, key: &str, at: Nanos, cost: u64) {
        if let Some(mut s) = self.map.get_mut(key) {
            crate::algorithm::refund_at(&self.algo, &mut s, at, cost);
            self.ceiling.rests_at(self.algo.rest_at(&s));
        }
    }

    /// Records `cost` spent elsewhere on `key`, creating it when it is new
    /// (refused only when the store is full of live keys).
    fn charge(&self, key: &str, now: Nanos, cost: u64) -> Result<(), Full> {
        // The guard is dropped at the end of this `if let` (no `else`),
        // before `make_room` write-locks shards.
        if let Some(mut s) = self.map.get_mut(key) {
            self.algo.charge(&mut s, now, cost);
            self.ceiling.rests_at(self.algo.rest_at(&s));
            return Ok(());
        }
        self.ceiling.make_room(now, || self.sweep_at(now))?;
        match self.map.entry(CompactString::new(key)) {
            Entry::Occupied(mut o) => self.algo.charge(o.get_mut(), now, cost),
            Entry::Vacant(v) => {
                let mut s = self.algo.fresh();
                self.algo.charge(&mut s, now, cost);
                self.ceiling.rests_at(self.algo.rest_at(&s));
                v.insert(s);
                self.ceiling.added();
            }
        }
        Ok(())
    }

    fn get(&self, key: &str) -> Option<A::State> {
        self.map.get(key).map(|s| s.clone())
    }

    /// Replaces `key`'s state whole (a replica taking its owner's copy),
    /// after checking it as a hand-off is checked; a new key needs room,
    /// as for a consume.
    fn put(&self, key: &str, state: A::State, now: Nanos) -> Result<(), AbsorbError> {
        let state = self.algo.admit(state, now).ok_or(AbsorbError::Invalid)?;
        self.ceiling.rests_at(self.algo.rest_at(&state));
        if let Some(mut s) = self.map.get_mut(key) {
            *s = state;
            return Ok(());
        }
        self.ceiling
            .make_room(now, || self.sweep_at(now))
            .map_err(|Full| AbsorbError::Full)?;
        if self.map.insert(CompactString::new(key), state).is_none() {
            self.ceiling.added();
        }
        Ok(())
    }

    fn keys(&self, out: &mut Vec<CompactString>, keep: &mut dyn FnMut(&str) -> bool) {
        out.extend(self.map.iter().map(|e| e.key().clone()).filter(|k| keep(k)));
    }

    fn remove(&self, key: &str) -> Option<A::State> {
        let (_, s) = self.map.remove(key)?;
        self.ceiling.removed(1);
        Some(s)
    }

    /// `sent`, an earlier copy of `key`'s state, is now counted elsewhere:
    /// only what was spent past it stays, the key dropped when nothing was.
    /// One entry guard throughout, so no decision finds the key missing.
    /// True when something stays.
    fn settle(&self, key: &str, sent: &A::State, now: Nanos) -> bool {
        let Entry::Occupied(mut o) = self.map.entry(CompactString::new(key)) else {
            return false;
        };
        let Some(kept) = self.algo.beyond(o.get(), sent, now) else {
            o.remove();
            self.ceiling.removed(1);
            return false;
        };
        self.ceiling.rests_at(self.algo.rest_at(&kept));
        *o.get_mut() = kept;
        true
    }

    /// Drops every key at rest at `now`; returns how many, and the earliest
    /// rest of those kept.
    fn sweep_at(&self, now: Nanos) -> (usize, Nanos) {
        let mut removed = 0;
        let mut earliest = Nanos::MAX;
        self.map.retain(|_, s| {
            let idle = self.algo.is_idle(s, now);
            removed += usize::from(idle);
            if !idle {
                earliest = earliest.min(self.algo.rest_at(s));
            }
            !idle
        });
        (removed, earliest)
    }

    fn sweep(&self, now: Nanos) -> usize {
        let _one = self.ceiling.sweep_lock();
        self.ceiling.swept(self.sweep_at(now))
    }

    /// The keys `keep` rejects with their states, removed when `take`,
    /// else copied and left in place.
    fn unkept(
        &self,
        keep: &mut dyn FnMut(&str) -> bool,
        take: bool,
    ) -> Vec<(CompactString, A::State)> {
        if !take {
            let unkept = self.map.iter().filter(|e| !keep(e.key()));
            return unkept
                .map(|e| (e.key().clone(), e.value().clone()))
                .collect();
        }
        let mut out = Vec::new();
        self.map.retain(|k, s| {
            if keep(k) {
                return true;
            }
            out.push((k.clone(), s.clone()));
            false
        });
        self.ceiling.removed(out.len());
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
            out.ceiling.rests_at(out.algo.rest_at(&s));
            out.map.insert(e.key().clone(), s);
        }
        out.ceiling.holds(out.map.len());
        out
    }

    /// Folds a peer's state for `key` in, after checking it: an invalid
    /// state, or a new key past the ceiling, is refused and changes nothing.
    fn absorb(&self, key: &str, other: A::State, now: Nanos) -> Result<(), AbsorbError> {
        let other = self.algo.admit(other, now).ok_or(AbsorbError::Invalid)?;
        // Merged into a fresh state, so the state held is one this node's
        // own arithmetic produced (a log trimmed, times clamped).
        let mut incoming = self.algo.fresh();
        self.algo.merge(&mut incoming, other, now);
        if self.algo.is_idle(&incoming, now) {
            return Ok(());
        }
        // Room is made before the entry's guard is taken: a sweep
        // write-locks every shard, this key's among them.
        if !self.map.contains_key(key) {
            self.ceiling
                .make_room(now, || self.sweep_at(now))
                .map_err(|Full| AbsorbError::Full)?;
        }
        match self.map.entry(CompactString::new(key)) {
            Entry::Occupied(mut o) => {
                self.algo.merge(o.get_mut(), incoming, now);
                self.ceiling.rests_at(self.algo.rest_at(o.get()));
            }
            Entry::Vacant(v) => {
                self.ceiling.rests_at(self.algo.rest_at(&incoming));
                v.insert(incoming);
                self.ceiling.added();
            }
        }
        Ok(())
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

impl Inner {
    fn new(policy: Policy, max_keys: usize) -> Inner {
        match policy {
            Policy::TokenBucket(a) => Inner::TokenBucket(KeyedStore::new(a, max_keys)),
            Policy::LeakyBucket(a) => Inner::LeakyBucket(KeyedStore::new(a, max_keys)),
            Policy::FixedWindow(a) => Inner::FixedWindow(KeyedStore::new(a, max_keys)),
            Policy::SlidingLog(a) => Inner::SlidingLog(KeyedStore::new(a, max_keys)),
            Policy::SlidingCounter(a) => Inner::SlidingCounter(KeyedStore::new(a, max_keys)),
        }
    }
}

/// Every key's state under one policy.
///
/// ```
/// use std::time::Duration;
/// use weir_core::store::Counters;
/// use weir_core::{AlgorithmKind, Policy, NANOS_PER_SEC};
///
/// let policy = Policy::new(AlgorithmKind::LeakyBucket, 2, Duration::from_secs(1), None, None)?;
/// let counters = Counters::new(policy, 1_000_000);
/// let now = 1_000 * NANOS_PER_SEC;
/// // GCRA spaces 2 a second 500 ms apart: an early second request waits.
/// assert!(counters.consume("cust_42", now, 1).unwrap().allowed);
/// let early = counters.consume("cust_42", now, 1).unwrap();
/// assert!(!early.allowed);
/// assert_eq!(early.retry_after, Duration::from_millis(500));
/// assert!(counters.consume("cust_42", now + NANOS_PER_SEC / 2, 1).unwrap().allowed);
/// assert!(counters.consume("cust_7", now, 1).unwrap().allowed);
/// # Ok::<(), weir_core::algorithm::ParamError>(())
/// ```
///
/// The table is made at the first key written, not with the rule: a map
/// of a million-key ceiling is 128 shards of two cache lines each, 16 KB
/// before it holds a key, and a set of a hundred thousand per-tenant
/// rules (most of them idle on any one node, and held again by the
/// node's replica and fallback limiters) spent gigabytes on empty maps.
/// Reads of a table not yet made find nothing, as they would in an
/// empty one.
pub struct Counters {
    policy: Policy,
    max_keys: usize,
    inner: OnceLock<Inner>,
}

impl Counters {
    pub fn new(policy: Policy, max_keys: usize) -> Self {
        Counters {
            policy,
            max_keys,
            inner: OnceLock::new(),
        }
    }

    /// The table, when a key was ever written.
    fn made(&self) -> Option<&Inner> {
        self.inner.get()
    }

    /// The table, made now if no key was written before.
    fn make(&self) -> &Inner {
        self.inner
            .get_or_init(|| Inner::new(self.policy, self.max_keys))
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Decides `cost` for `key` atomically. The caller has checked
    /// `1 <= cost <= policy.max_cost()`.
    pub fn consume(&self, key: &str, now: Nanos, cost: u64) -> Result<Decision, Full> {
        self.consume_within(key, now, cost, None)
    }

    /// [`Counters::consume`] for a caller that waits at most `max_delay`
    /// before sending: an admission that would need longer is a denial
    /// ([`Decision::beyond`]) and consumes nothing.
    pub fn consume_within(
        &self,
        key: &str,
        now: Nanos,
        cost: u64,
        max_delay: Option<Duration>,
    ) -> Result<Decision, Full> {
        debug_assert!(cost >= 1 && cost <= self.policy.max_cost());
        each_store!(self.make(), s => s.consume(key, now, cost, max_delay))
    }

    /// Brings the slots of `keys` into cache ahead of their decisions
    /// (see `KeyedStore::warm`); nothing changes. Returns how many of
    /// `keys` the table holds: a warming that hashed or sharded otherwise
    /// than the map would miss them, and no answer would show it.
    pub fn warm<'k>(&self, keys: impl Iterator<Item = &'k str>) -> usize {
        match self.made() {
            Some(inner) => each_store!(inner, s => s.warm(keys)),
            None => 0,
        }
    }

    /// Gives back what a decision taken at `at` consumed.
    pub fn refund(&self, key: &str, at: Nanos, cost: u64) {
        if let Some(inner) = self.made() {
            each_store!(inner, s => s.refund(key, at, cost))
        }
    }

    /// Records `cost` spent elsewhere on `key`, whatever the limit.
    pub fn charge(&self, key: &str, now: Nanos, cost: u64) -> Result<(), Full> {
        each_store!(self.make(), s => s.charge(key, now, cost))
    }

    /// `key`'s state, as a copy.
    pub fn get(&self, key: &str) -> Option<State> {
        match self.made()? {
            Inner::TokenBucket(s) => s.get(key).map(State::TokenBucket),
            Inner::LeakyBucket(s) => s.get(key).map(State::LeakyBucket),
            Inner::FixedWindow(s) => s.get(key).map(State::FixedWindow),
            Inner::SlidingLog(s) => s.get(key).map(State::SlidingLog),
            Inner::SlidingCounter(s) => s.get(key).map(State::SlidingCounter),
        }
    }

    /// Replaces `key`'s state whole. False when the state is of another
    /// algorithm, breaks its invariants, or is new and the store is full.
    pub fn put(&self, key: &str, state: State, now: Nanos) -> bool {
        match (self.make(), state) {
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
        if let Some(inner) = self.made() {
            each_store!(inner, s => s.keys(&mut out, &mut keep));
        }
        out
    }

    /// Removes and returns `key`'s state.
    pub fn remove(&self, key: &str) -> Option<State> {
        match self.made()? {
            Inner::TokenBucket(s) => s.remove(key).map(State::TokenBucket),
            Inner::LeakyBucket(s) => s.remove(key).map(State::LeakyBucket),
            Inner::FixedWindow(s) => s.remove(key).map(State::FixedWindow),
            Inner::SlidingLog(s) => s.remove(key).map(State::SlidingLog),
            Inner::SlidingCounter(s) => s.remove(key).map(State::SlidingCounter),
        }
    }

    /// Keeps of `key` only what was spent past `sent`, an earlier copy of
    /// its state now counted elsewhere; true when something was. Nothing
    /// changes when `sent` is of another algorithm.
    pub fn settle(&self, key: &str, sent: &State, now: Nanos) -> bool {
        let Some(inner) = self.made() else {
            return false;
        };
        match (inner, sent) {
            (Inner::TokenBucket(s), State::TokenBucket(st)) => s.settle(key, st, now),
            (Inner::LeakyBucket(s), State::LeakyBucket(st)) => s.settle(key, st, now),
            (Inner::FixedWindow(s), State::FixedWindow(st)) => s.settle(key, st, now),
            (Inner::SlidingLog(s), State::SlidingLog(st)) => s.settle(key, st, now),
            (Inner::SlidingCounter(s), State::SlidingCounter(st)) => s.settle(key, st, now),
            _ => false,
        }
    }

    /// Drops every key at rest (its state equal to a fresh one); returns how many.
    pub fn sweep(&self, now: Nanos) -> usize {
        self.made()
            .map_or(0, |inner| each_store!(inner, s => s.sweep(now)))
    }

    pub fn len(&self) -> usize {
        self.made()
            .map_or(0, |inner| each_store!(inner, s => s.ceiling.len()))
    }

    /// Whether a counter is held for `key` (a read: nothing moves).
    pub fn contains(&self, key: &str) -> bool {
        self.made()
            .is_some_and(|inner| each_store!(inner, s => s.map.contains_key(key)))
    }

    /// What this table did at its key ceiling.
    pub fn counts(&self) -> StoreCounts {
        self.made().map_or_else(
            StoreCounts::default,
            |inner| each_store!(inner, s => s.ceiling.counts()),
        )
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many locks the keys are spread over.
    #[cfg(test)]
    fn shard_count(&self) -> usize {
        each_store!(self.make(), s => s.map.shards().len())
    }

    /// This table under `policy`, a policy of the same algorithm and window
    /// with another limit (a divided rule when the member count changes):
    /// counts already spent stay spent against the new limit. Only for the
    /// counting algorithms (windows and the log), whose state is counts and
    /// timestamps; a bucket's state is relative to its capacity, so
    /// `None` there, as for a change of algorithm.
    pub fn resized(&self, policy: Policy, max_keys: usize, now: Nanos) -> Option<Counters> {
        let Some(made) = self.made() else {
            let counting = matches!(
                (self.policy, policy),
                (Policy::FixedWindow(_), Policy::FixedWindow(_))
                    | (Policy::SlidingLog(_), Policy::SlidingLog(_))
                    | (Policy::SlidingCounter(_), Policy::SlidingCounter(_))
            );
            return counting.then(|| Counters::new(policy, max_keys));
        };
        let inner = match (made, policy) {
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
        Some(Counters {
            policy,
            max_keys,
            inner: OnceLock::from(inner),
        })
    }

    /// Removes and returns the keys `keep` rejects, as portable states: what a
    /// node hands to their new owners.
    pub fn take_unless(&self, mut keep: impl FnMut(&str) -> bool) -> Vec<(CompactString, State)> {
        self.unkept(&mut keep, true)
    }

    /// The keys `keep` rejects with their states: removed when `take`, else
    /// copied and left in place (what a node offers their owners while it
    /// goes on deciding on them).
    pub fn unkept(
        &self,
        keep: &mut dyn FnMut(&str) -> bool,
        take: bool,
    ) -> Vec<(CompactString, State)> {
        let Some(inner) = self.made() else {
            return Vec::new();
        };
        match inner {
            Inner::TokenBucket(s) => wrap(s.unkept(keep, take), State::TokenBucket),
            Inner::LeakyBucket(s) => wrap(s.unkept(keep, take), State::LeakyBucket),
            Inner::FixedWindow(s) => wrap(s.unkept(keep, take), State::FixedWindow),
            Inner::SlidingLog(s) => wrap(s.unkept(keep, take), State::SlidingLog),
            Inner::SlidingCounter(s) => wrap(s.unkept(keep, take), State::SlidingCounter),
        }
    }

    /// Folds a handed-over state into `key`, after checking it against its
    /// algorithm's invariants and the key ceiling.
    pub fn absorb(&self, key: &str, state: State, now: Nanos) -> Result<(), AbsorbError> {
        match (self.make(), state) {
            (Inner::TokenBucket(s), State::TokenBucket(st)) => s.absorb(key, st, now),
            (Inner::LeakyBucket(s), State::LeakyBucket(st)) => s.absorb(key, st, now),
            (Inner::FixedWindow(s), State::FixedWindow(st)) => s.absorb(key, st, now),
            (Inner::SlidingLog(s), State::SlidingLog(st)) => s.absorb(key, st, now),
            (Inner::SlidingCounter(s), State::SlidingCounter(st)) => s.absorb(key, st, now),
            _ => Err(AbsorbError::OtherAlgorithm),
        }
    }
}

/// `items`, each tagged with its shard (below `shards`), in shard order,
/// and where each shard's run starts (one past the last: `items.len()`):
/// a counting sort, as a batch holds far more items than a map has shards.
fn by_shard<T: Copy>(items: &[(usize, T)], shards: usize) -> (Vec<T>, Vec<usize>) {
    let Some(&(_, filler)) = items.first() else {
        return (Vec::new(), vec![0; shards + 1]);
    };
    let mut starts = vec![0; shards + 1];
    for &(s, _) in items {
        starts[s + 1] += 1;
    }
    for s in 0..shards {
        starts[s + 1] += starts[s];
    }
    let mut next = starts.clone();
    let mut out = vec![filler; items.len()];
    for &(s, t) in items {
        out[next[s]] = t;
        next[s] += 1;
    }
    (out, starts)
}

fn wrap<S>(v: Vec<(CompactString, S)>, f: fn(S) -> State) -> Vec<(CompactString, State)> {
    v.into_iter().map(|(k, s)| (k, f(s))).collect()
}

mod carried;
mod ceiling;
#[cfg(test)]
mod tests;
