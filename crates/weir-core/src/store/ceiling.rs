//! A store's key ceiling: how many keys it holds, and when a new key may
//! sweep the table for room.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::{Full, StoreCounts};
use crate::clock::{Nanos, NANOS_PER_SEC};

/// How often a sweep on the request path may come up empty: when the key
/// that was about to rest was spent again, the sweep frees nothing, and a
/// caller that keeps doing that must not turn every new key into a scan.
const FRUITLESS_SWEEP_EVERY: Nanos = NANOS_PER_SEC;

/// How long after a sweep on the request path the next may start, per key
/// of the ceiling: 200 ms at a million keys. A sweep passes over the whole
/// table, 13-16 ms at a million keys on one thread here and about 25 ms
/// with another thread at the table. Under a flood of new keys into a
/// table full of live ones, each sweep frees only the keys that came to
/// rest since the last, so unspaced, the flood's two threads spent 98.5-98.8%
/// of their time sweeping; spaced, 12-16% in calls over 100 us, against
/// 2-8% for the same flood into a table with room, which grows
/// (`cargo bench -p weir-core --bench ceiling`). New keys got in nearly
/// as fast as keys came to rest either way (18,700 a second against
/// 19,700 of the 20,000). A key at rest waits at most this long
/// (or the idle sweep, each second) to make room.
const SWEEP_SPACING_PER_KEY: Nanos = 200;

/// The key ceiling of one store and what it did there. No live key is
/// ever evicted: a new key takes the room of keys at rest, or is refused.
pub(crate) struct Ceiling {
    len: AtomicUsize,
    max_keys: usize,
    /// No held key comes to rest before this instant: a lower bound, lowered
    /// on every write and made exact by every sweep. While `now` is below
    /// it, a full store refuses a new key with no scan at all.
    earliest_rest: AtomicU64,
    /// When the next sweep on the request path may start.
    next_sweep_at: AtomicU64,
    /// One sweep at a time. A caller on the request path never waits for
    /// one: a worker blocked behind a sweep serves nothing meanwhile.
    sweeping: std::sync::Mutex<()>,
    dropped_at_rest: AtomicU64,
    refused_full: AtomicU64,
}

impl Ceiling {
    pub(crate) fn new(max_keys: usize) -> Self {
        Ceiling {
            len: AtomicUsize::new(0),
            max_keys,
            earliest_rest: AtomicU64::new(Nanos::MAX),
            next_sweep_at: AtomicU64::new(0),
            sweeping: std::sync::Mutex::new(()),
            dropped_at_rest: AtomicU64::new(0),
            refused_full: AtomicU64::new(0),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Sets the count outright, for a store filled without `added`.
    pub(crate) fn holds(&self, n: usize) {
        self.len.store(n, Ordering::Relaxed);
    }

    pub(crate) fn added(&self) {
        self.len.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn removed(&self, n: usize) {
        self.len.fetch_sub(n, Ordering::Relaxed);
    }

    /// A key's state changed and comes to rest at `at`.
    pub(crate) fn rests_at(&self, at: Nanos) {
        // A key's rest mostly moves later as it is spent, so the bound
        // rarely drops. Read first: fetch_min is a compare-and-swap loop
        // that writes the line on every decision, and this line is shared
        // by every key of the rule.
        if at < self.earliest_rest.load(Ordering::Relaxed) {
            self.earliest_rest.fetch_min(at, Ordering::Relaxed);
        }
    }

    /// Before a new key: Ok when there is room, after dropping keys at rest
    /// with `sweep` if some may be and no request swept lately; Err when
    /// there is no room. `sweep` drops the keys at rest at `now` and
    /// returns how many, and the earliest rest of those it kept.
    pub(crate) fn make_room(
        &self,
        now: Nanos,
        sweep: impl FnOnce() -> (usize, Nanos),
    ) -> Result<(), Full> {
        if self.len() < self.max_keys {
            return Ok(());
        }
        let may_rest = now >= self.earliest_rest.load(Ordering::Relaxed);
        if may_rest && self.claim_sweep(now) {
            // Another sweep under way (the idle sweep) is making room
            // already; this caller does not wait for it.
            if let Some(_one) = self.try_sweep_lock() {
                if self.len() >= self.max_keys && self.swept(sweep()) == 0 {
                    let wait = FRUITLESS_SWEEP_EVERY.max(self.sweep_spacing());
                    self.next_sweep_at
                        .store(now.saturating_add(wait), Ordering::Relaxed);
                }
            }
        }
        if self.len() < self.max_keys {
            return Ok(());
        }
        self.refused_full.fetch_add(1, Ordering::Relaxed);
        Err(Full)
    }

    /// How far apart sweeps on the request path are.
    fn sweep_spacing(&self) -> Nanos {
        (self.max_keys as Nanos).saturating_mul(SWEEP_SPACING_PER_KEY)
    }

    /// True for the one caller that may sweep on the request path at
    /// `now`; the next may only `sweep_spacing` later.
    fn claim_sweep(&self, now: Nanos) -> bool {
        let next = self.next_sweep_at.load(Ordering::Relaxed);
        now >= next
            && self
                .next_sweep_at
                .compare_exchange(
                    next,
                    now.saturating_add(self.sweep_spacing()),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    fn try_sweep_lock(&self) -> Option<std::sync::MutexGuard<'_, ()>> {
        match self.sweeping.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Held while sweeping. A panic mid-sweep leaves nothing to repair
    /// (retain is per key), so a poisoned lock is taken as it is.
    pub(crate) fn sweep_lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.sweeping.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Books a sweep's outcome: `(dropped, earliest rest of the kept)`.
    /// Returns how many were dropped.
    pub(crate) fn swept(&self, (dropped, earliest): (usize, Nanos)) -> usize {
        self.removed(dropped);
        self.dropped_at_rest
            .fetch_add(dropped as u64, Ordering::Relaxed);
        // Exact for the keys the sweep kept. A write racing the sweep can
        // be missed here, which only delays its key's drop to a later sweep
        // (the node sweeps every table each second).
        self.earliest_rest.store(earliest, Ordering::Relaxed);
        dropped
    }

    pub(crate) fn counts(&self) -> StoreCounts {
        StoreCounts {
            dropped_at_rest: self.dropped_at_rest.load(Ordering::Relaxed),
            refused_full: self.refused_full.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests;
