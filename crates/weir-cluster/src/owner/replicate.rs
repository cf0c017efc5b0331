//! The owner's side of replication: which of its counters changed since they were last copied to their replica holder.
//!
//! Every change to a counter this node owns marks its key; the replication
//! loop takes what is marked, copies each state whole to the key's holder
//! (the next member on the ring) and records how long the oldest change
//! waited: the lag, which is also how much a crash can lose.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use compact_str::CompactString;
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use tokio::sync::Notify;
use weir_core::Nanos;

/// A counter: its rule's name and its hash part.
pub type Key = (Arc<str>, CompactString);

pub struct Replicator {
    /// Off when each counter has one copy (`--replicas 1`).
    on: bool,
    /// Changed keys and when each first changed since its last copy.
    dirty: DashMap<Key, Nanos, weir_core::determinism::HashState>,
    /// Keys taken for a copy not yet acknowledged.
    in_flight: AtomicUsize,
    wake: Notify,
    /// Held by the replication loop through a round (taking the marked
    /// keys, copying them, settling the calls); true once stopped.
    rounds: tokio::sync::Mutex<bool>,
}

impl Replicator {
    pub fn new(on: bool) -> Self {
        Replicator {
            on,
            dirty: DashMap::default(),
            in_flight: AtomicUsize::new(0),
            wake: Notify::new(),
            rounds: tokio::sync::Mutex::new(false),
        }
    }

    /// The replication loop's turn for one round; None once stopped.
    pub async fn round(&self) -> Option<tokio::sync::MutexGuard<'_, bool>> {
        let round = self.rounds.lock().await;
        (!*round).then_some(round)
    }

    /// Stops replication for good, once the round in progress (if any) is
    /// settled: its copies have landed or failed. A leaving node stops
    /// before it takes its counters, so no copy it took can reach a holder
    /// after its handoff, to be promoted there on top of the handed count.
    pub async fn stop(&self) {
        *self.rounds.lock().await = true;
    }

    pub fn is_on(&self) -> bool {
        self.on
    }

    /// A counter this node owns changed at `now`. Only a key not marked
    /// yet wakes the loop: one already marked was announced when it was,
    /// and is copied with this change (the copy is read after it is taken),
    /// so a hot key costs no shared wake-up per check.
    pub fn mark(&self, rule: &Arc<str>, hash_part: &str, now: Nanos) {
        if !self.on {
            return;
        }
        let key = (rule.clone(), CompactString::new(hash_part));
        if let Entry::Vacant(v) = self.dirty.entry(key) {
            v.insert(now);
            self.wake.notify_one();
        }
    }

    /// Takes up to `max` marked keys with the time each first changed;
    /// they count as in flight until [`Replicator::copied`] or
    /// [`Replicator::retry`]. The rest stay marked for the next round.
    pub fn take(&self, max: usize) -> Vec<(Key, Nanos)> {
        let keys: Vec<Key> = self
            .dirty
            .iter()
            .take(max)
            .map(|e| e.key().clone())
            .collect();
        keys.into_iter()
            .filter_map(|k| {
                // In flight before it leaves the marked set, so that
                // `pending` never reads a key in neither.
                self.in_flight.fetch_add(1, Ordering::SeqCst);
                let taken = self.dirty.remove(&k);
                if taken.is_none() {
                    self.in_flight.fetch_sub(1, Ordering::SeqCst);
                }
                taken
            })
            .collect()
    }

    /// `n` taken keys reached their holder (or need no copy).
    pub fn copied(&self, n: usize) {
        self.in_flight.fetch_sub(n, Ordering::SeqCst);
    }

    /// Marks keys again whose copy did not arrive, keeping their first change.
    pub fn retry(&self, keys: Vec<(Key, Nanos)>) {
        let n = keys.len();
        for (k, since) in keys {
            self.dirty.entry(k).or_insert(since);
        }
        self.copied(n);
        self.wake.notify_one();
    }

    /// Resolves when something is marked.
    pub async fn changed(&self) {
        if self.dirty.is_empty() {
            self.wake.notified().await;
        }
    }

    /// Changes not yet copied: marked, or in a call not yet acknowledged.
    pub fn pending(&self) -> usize {
        self.dirty.len() + self.in_flight.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guard: `stop` waits for the round in progress, and no round starts
    /// after it.
    #[tokio::test]
    async fn stopping_waits_for_the_round_in_progress_and_ends_the_rounds() {
        use futures::FutureExt;
        let r = Replicator::new(true);
        let round = r.round().await.expect("running");
        let mut stop = Box::pin(r.stop());
        assert!((&mut stop).now_or_never().is_none(), "stopped mid-round");
        drop(round);
        tokio::time::timeout(std::time::Duration::from_secs(5), stop)
            .await
            .expect("stopped once the round settled");
        assert!(r.round().await.is_none());
    }

    #[tokio::test]
    async fn a_fresh_mark_wakes_the_loop_and_a_marked_keys_change_does_not() {
        use futures::FutureExt;
        let r = Replicator::new(true);
        let rule: Arc<str> = "r".into();
        let wait = std::time::Duration::from_secs(5);
        for round in 0..3 {
            let (woken, ()) = tokio::join!(tokio::time::timeout(wait, r.changed()), async {
                tokio::task::yield_now().await;
                r.mark(&rule, "k", round);
                r.mark(&rule, "k", round + 1);
            });
            woken.expect("a fresh mark wakes the loop");
            assert!(
                r.wake.notified().now_or_never().is_none(),
                "the second change of a marked key left no wake-up behind"
            );
            assert_eq!(r.take(10), [((rule.clone(), "k".into()), round)]);
            r.copied(1);
        }
    }

    #[test]
    fn a_key_changed_twice_is_copied_once_from_its_first_change() {
        let r = Replicator::new(true);
        let rule: Arc<str> = "r".into();
        r.mark(&rule, "k", 5);
        r.mark(&rule, "k", 9);
        r.mark(&rule, "j", 7);
        let mut taken = r.take(10);
        taken.sort();
        assert_eq!(taken.len(), 2);
        assert_eq!(taken[1], ((rule.clone(), "k".into()), 5));
        assert_eq!(r.pending(), 2, "in flight until acknowledged");
        r.copied(1);
        r.retry(vec![((rule.clone(), "k".into()), 5)]);
        assert_eq!(r.pending(), 1);
        assert_eq!(r.take(10), [((rule, "k".into()), 5)]);
        r.copied(1);
        assert_eq!(r.pending(), 0);
        let off = Replicator::new(false);
        off.mark(&"r".into(), "k", 1);
        assert_eq!(off.pending(), 0, "one copy: nothing to stream");
    }

    /// Guard: a round takes at most its share of the marked keys and
    /// leaves the rest marked, so the loop comes straight back for them.
    /// Taken whole, a ring change's marks (every counter a node owns)
    /// made one call over the peer message ceiling.
    #[tokio::test]
    async fn a_round_takes_at_most_its_share_and_leaves_the_rest_marked() {
        let r = Replicator::new(true);
        let rule: Arc<str> = "r".into();
        for i in 0..10 {
            r.mark(&rule, &format!("k{i}"), i);
        }
        let mut taken = Vec::new();
        for expected in [4, 4, 2] {
            let wait = std::time::Duration::from_secs(5);
            tokio::time::timeout(wait, r.changed())
                .await
                .expect("marks remain: the loop is not put to sleep");
            let round = r.take(4);
            assert_eq!(round.len(), expected);
            r.copied(round.len());
            taken.extend(round);
        }
        taken.sort();
        taken.dedup();
        assert_eq!(taken.len(), 10, "every key once");
        assert_eq!(r.pending(), 0);
    }
}
