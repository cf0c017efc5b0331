//! The deny cache (docs/cluster.md, "The deny cache"): "denied until T" per counter, answered with no round trip.
//!
//! It holds denials only, so it can never over-admit. A denial can be
//! caused by budget that a refund gives back a moment later (a check that
//! another limit denied consumed it first); when this gateway sends that
//! refund it forgets the counter's cached denial, and refuses to cache one
//! from a check sent before the refund. A refund sent by another gateway
//! can still leave a denial here until T: the safe direction, and already
//! announced in the Retry-After the caller was given.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use compact_str::CompactString;
use dashmap::DashMap;
use weir_core::determinism::HashState;
use weir_core::{Decision, Nanos};

/// One cached denial.
#[derive(Debug, Clone)]
struct Entry {
    rule: Arc<str>,
    /// Gateway-local clock reading until which the counter stays blocked:
    /// `retry_at`, or sooner when the denial may be held less long.
    until: Nanos,
    /// When the owner said a retry can succeed: what a cached answer's
    /// Retry-After counts down to, held or not, so it is never shortened.
    retry_at: Nanos,
    /// The cost that was denied. A smaller request may fit sooner (a token
    /// bucket refills gradually), so only a cost at least this large hits.
    cost: u64,
    limit: u64,
    reset_at: u64,
}

/// Denials by hash part, then rule: one caller has one or two limits, so a
/// short list per hash part beats a composite key that would allocate on
/// every lookup.
pub struct DenyCache {
    map: DashMap<CompactString, Vec<Entry>, HashState>,
    /// Refunds this gateway sent lately, per hash part: (rule, when).
    refunds: DashMap<CompactString, Vec<(Arc<str>, Nanos)>, HashState>,
    max_keys: usize,
    /// When the last purge began, so a full cache purges on the request
    /// path at most once in [`PURGE_AT_CEILING_EVERY`].
    purged_at: AtomicU64,
    /// Purges done, for the tests of that bound.
    #[cfg(test)]
    purges: AtomicU64,
}

/// How often a full cache may purge on a request's path. A purge reads
/// every entry (0.65-4.4 ms, median 0.8, at the default 100,000 on the
/// 2-vCPU host: `cargo bench -p weir-cluster --bench deny_cache`);
/// done for every new denial while the cache was full of live ones, a
/// flood of denied keys turned each into a scan. Expired entries go with
/// the gateway's maintenance every 250 ms anyway, so between two purges a
/// full cache skips new denials, which costs each a round trip only.
const PURGE_AT_CEILING_EVERY: Nanos = 250 * weir_core::NANOS_PER_MS;

/// How long a refund is remembered: longer than any check waits for its
/// owner's answer (the owner deadline is milliseconds), so a denial from a
/// check sent before the refund always finds it.
const REFUND_MEMORY: Nanos = 10 * weir_core::NANOS_PER_SEC;

impl DenyCache {
    pub fn new(max_keys: usize) -> Self {
        // Purged whole every 250 ms: as in the counters' tables, one
        // shard's lock covers a few thousand keys, not an eighth of them.
        let shards = weir_core::store::shards_for(max_keys);
        DenyCache {
            map: DashMap::with_hasher_and_shard_amount(HashState::default(), shards),
            refunds: DashMap::with_hasher_and_shard_amount(HashState::default(), shards),
            max_keys,
            purged_at: AtomicU64::new(0),
            #[cfg(test)]
            purges: AtomicU64::new(0),
        }
    }

    /// This gateway gave back budget on (rule, hash part) at local time
    /// `now`: a cached denial of it may no longer hold, and a denial from a
    /// check sent before now may have been caused by what was given back.
    pub fn refunded(&self, rule: &Arc<str>, hash_part: &str, now: Nanos) {
        self.map.remove_if_mut(hash_part, |_, entries| {
            entries.retain(|e| e.rule != *rule);
            entries.is_empty()
        });
        if self.refunds.len() >= self.max_keys && !self.refunds.contains_key(hash_part) {
            // Recorded even when still full: a refund forgotten would let a
            // denial it caused be cached. Refunds leave after 10 s.
            self.purge_if_due(now);
        }
        let mut seen = self
            .refunds
            .entry(CompactString::new(hash_part))
            .or_default();
        match seen.iter_mut().find(|(r, _)| r == rule) {
            Some(slot) => slot.1 = slot.1.max(now),
            None => seen.push((rule.clone(), now)),
        }
    }

    /// Whether a refund of (rule, hash part) was sent at or after `sent`.
    fn refunded_since(&self, rule: &str, hash_part: &str, sent: Nanos) -> bool {
        self.refunds
            .get(hash_part)
            .is_some_and(|r| r.iter().any(|(name, at)| &**name == rule && *at >= sent))
    }

    /// The cached denial of `cost` on (rule, hash_part) at local time `now`,
    /// with Retry-After counted down to what is left. Expired entries are
    /// dropped on the way.
    pub fn lookup(&self, rule: &str, hash_part: &str, cost: u64, now: Nanos) -> Option<Decision> {
        let found = {
            let entries = self.map.get(hash_part)?;
            let e = entries.iter().find(|e| &*e.rule == rule)?;
            if e.until <= now {
                None
            } else if cost >= e.cost {
                let wait = Duration::from_nanos(e.retry_at.saturating_sub(now));
                Some(Decision::deny_until(e.limit, wait, e.reset_at, now))
            } else {
                return None;
            }
        };
        if found.is_none() {
            self.expire(hash_part, now);
        }
        found
    }

    /// Records a denial an owner returned, blocking the counter for `hold`
    /// at most ([`super::lease::deny_hold`]); `now` is the local clock when
    /// the check was sent, so the entry never outlives the owner's answer.
    pub fn insert(
        &self,
        (rule, hash_part): (&Arc<str>, &str),
        cost: u64,
        d: &Decision,
        now: Nanos,
        hold: Duration,
    ) {
        if d.allowed || d.retry_after.is_zero() || self.refunded_since(rule, hash_part, now) {
            return;
        }
        if self.map.len() >= self.max_keys && !self.map.contains_key(hash_part) {
            self.purge_if_due(now);
            if self.map.len() >= self.max_keys {
                // Full of live denials: skipping one only costs a round trip.
                return;
            }
        }
        let after =
            |d: Duration| now.saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let retry_at = after(d.retry_after);
        let entry = Entry {
            rule: rule.clone(),
            until: retry_at.min(after(hold)),
            retry_at,
            cost,
            limit: d.limit,
            reset_at: d.reset_at,
        };
        let mut entries = self.map.entry(CompactString::new(hash_part)).or_default();
        match entries.iter_mut().find(|e| e.rule == *rule) {
            // A live denial of a smaller cost blocks more requests and is
            // true until its own time; a larger cost's later time says
            // nothing about the smaller one, so keep the entry as it is.
            Some(e) if e.until > now && e.cost <= cost => {}
            Some(e) => *e = entry,
            None => entries.push(entry),
        }
    }

    fn expire(&self, hash_part: &str, now: Nanos) {
        self.map.remove_if_mut(hash_part, |_, entries| {
            entries.retain(|e| e.until > now);
            entries.is_empty()
        });
    }

    /// [`Self::purge`], unless one began less than
    /// [`PURGE_AT_CEILING_EVERY`] before `now`.
    fn purge_if_due(&self, now: Nanos) {
        let last = self.purged_at.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= PURGE_AT_CEILING_EVERY;
        // One caller purges; the others go on without waiting for it.
        if due
            && self
                .purged_at
                .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.purge(now);
        }
    }

    /// Drops every expired denial, and refunds too old to matter.
    pub fn purge(&self, now: Nanos) {
        self.purged_at.store(now.max(1), Ordering::Relaxed);
        #[cfg(test)]
        self.purges.fetch_add(1, Ordering::Relaxed);
        self.map.retain(|_, entries| {
            entries.retain(|e| e.until > now);
            !entries.is_empty()
        });
        self.refunds.retain(|_, seen| {
            seen.retain(|(_, at)| at.saturating_add(REFUND_MEMORY) > now);
            !seen.is_empty()
        });
    }

    /// Forgets everything: a new rule set may have raised the limits.
    pub fn clear(&self) {
        self.map.clear();
        self.refunds.clear();
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::NANOS_PER_SEC;

    /// A hold that leaves every denial to its own retry time.
    const FOREVER: Duration = Duration::MAX;

    fn denial(retry_secs: u64) -> Decision {
        Decision::deny_until(10, Duration::from_secs(retry_secs), 99_000, 1)
    }

    /// Guard: a hold shorter than the denial frees the counter sooner, but
    /// a cached answer still tells the caller the owner's whole wait. Read
    /// from the hold's end, a leased rule's cached denial said 1 s where
    /// the algorithm said 6.
    #[test]
    fn a_short_hold_frees_the_counter_sooner_and_never_shortens_retry_after() {
        let c = DenyCache::new(100);
        let rule: Arc<str> = Arc::from("r");
        let t0 = 1_000 * NANOS_PER_SEC;
        c.insert((&rule, "k"), 1, &denial(6), t0, Duration::from_secs(1));
        let hit = c.lookup("r", "k", 1, t0 + NANOS_PER_SEC / 2).expect("held");
        assert_eq!(hit.retry_after, Duration::from_millis(5_500));
        assert!(
            c.lookup("r", "k", 1, t0 + NANOS_PER_SEC).is_none(),
            "the hold ended"
        );
    }

    #[test]
    fn a_denial_is_answered_until_its_retry_time_then_forgotten() {
        let c = DenyCache::new(100);
        let rule: Arc<str> = Arc::from("r");
        let t0 = 1_000 * NANOS_PER_SEC;
        c.insert((&rule, "k"), 1, &denial(6), t0, FOREVER);
        let hit = c.lookup("r", "k", 1, t0 + 2 * NANOS_PER_SEC).unwrap();
        assert!(!hit.allowed);
        assert_eq!(hit.retry_after, Duration::from_secs(4));
        assert_eq!(hit.limit, 10);
        assert!(c.lookup("other-rule", "k", 1, t0).is_none());
        assert!(c.lookup("r", "other-key", 1, t0).is_none());
        assert!(c.lookup("r", "k", 1, t0 + 6 * NANOS_PER_SEC).is_none());
        assert_eq!(c.len(), 0, "an expired entry is dropped on lookup");
    }

    #[test]
    fn a_smaller_cost_than_the_denied_one_is_not_answered() {
        let c = DenyCache::new(100);
        let rule: Arc<str> = Arc::from("r");
        c.insert((&rule, "k"), 5, &denial(6), 0, FOREVER);
        assert!(c.lookup("r", "k", 4, 1).is_none());
        assert!(c.lookup("r", "k", 5, 1).is_some());
        assert!(c.lookup("r", "k", 9, 1).is_some());
    }

    #[test]
    fn allowed_decisions_are_never_cached() {
        let c = DenyCache::new(100);
        let mut d = denial(6);
        d.allowed = true;
        c.insert((&Arc::from("r"), "k"), 1, &d, 0, FOREVER);
        assert!(c.lookup("r", "k", 1, 1).is_none());
    }

    #[test]
    fn a_full_cache_skips_new_keys_and_clear_empties_it() {
        let c = DenyCache::new(2);
        let rule: Arc<str> = Arc::from("r");
        c.insert((&rule, "a"), 1, &denial(6), 0, FOREVER);
        c.insert((&rule, "b"), 1, &denial(6), 0, FOREVER);
        c.insert((&rule, "c"), 1, &denial(6), 0, FOREVER);
        assert_eq!(c.len(), 2);
        assert!(c.lookup("r", "c", 1, 1).is_none());
        c.clear();
        assert!(c.lookup("r", "a", 1, 1).is_none());
    }

    #[test]
    fn a_refund_sent_here_clears_the_denial_it_may_have_caused() {
        let c = DenyCache::new(100);
        let rule: Arc<str> = Arc::from("r");
        let t0 = 1_000 * NANOS_PER_SEC;
        c.insert((&rule, "k"), 1, &denial(6), t0, FOREVER);
        assert!(c.lookup("r", "k", 1, t0 + 1).is_some());
        // A check consumed budget here, another limit denied it, and the
        // refund went out: the cached denial may have been its doing.
        c.refunded(&rule, "k", t0 + 2);
        assert!(c.lookup("r", "k", 1, t0 + 3).is_none());
        // The answer to a check sent before the refund arrives after it: it
        // may have seen the refunded budget spent, so it is not cached.
        c.insert((&rule, "k"), 1, &denial(6), t0 + 1, FOREVER);
        assert!(c.lookup("r", "k", 1, t0 + 4).is_none());
        // A check sent after the refund is a denial on its own merits.
        c.insert((&rule, "k"), 1, &denial(6), t0 + 5, FOREVER);
        assert!(c.lookup("r", "k", 1, t0 + 6).is_some());
        // Another rule of the same caller is not touched.
        let other: Arc<str> = Arc::from("o");
        c.insert((&other, "k"), 1, &denial(6), t0 + 1, FOREVER);
        assert!(c.lookup("o", "k", 1, t0 + 6).is_some());
    }

    /// Guard: a cache full of live denials purges on the request path at
    /// most once in [`PURGE_AT_CEILING_EVERY`]. It purged before every new
    /// denial, each a pass over the whole cache: a flood of denied keys
    /// made every one of their answers a scan of 100,000 entries.
    #[test]
    fn a_full_cache_purges_on_the_request_path_at_most_once_a_while() {
        let c = DenyCache::new(100);
        let rule: Arc<str> = Arc::from("r");
        let t0 = 1_000 * NANOS_PER_SEC;
        for i in 0..100 {
            c.insert((&rule, &format!("live-{i}")), 1, &denial(60), t0, FOREVER);
        }
        let purges = || c.purges.load(Ordering::Relaxed);
        for i in 0..1_000 {
            c.insert(
                (&rule, &format!("new-{i}")),
                1,
                &denial(60),
                t0 + i,
                FOREVER,
            );
            c.refunded(&rule, &format!("refund-{i}"), t0 + i);
        }
        assert_eq!(purges(), 1, "one in the first 1,000 ns");
        let later = t0 + PURGE_AT_CEILING_EVERY + 1_000;
        c.insert((&rule, "after-a-while"), 1, &denial(60), later, FOREVER);
        assert_eq!(purges(), 2, "and another once the while is over");
        c.purge(later + 1);
        c.insert(
            (&rule, "right-after-the-tick"),
            1,
            &denial(60),
            later + 2,
            FOREVER,
        );
        assert_eq!(purges(), 3, "the maintenance's purge counts as one");
    }

    /// Every path that reads an entry and then changes the map (an expired
    /// entry dropped on lookup, a full cache purged before an insert, a
    /// refund clearing a denial) on a thread with a deadline: a guard held
    /// across the change would deadlock on its own shard lock.
    #[test]
    fn reads_that_change_the_map_hold_no_guard_across_the_change() {
        let (done, result) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let c = DenyCache::new(1);
            let rule: Arc<str> = Arc::from("r");
            c.insert((&rule, "k"), 1, &denial(1), 0, FOREVER);
            assert!(
                c.lookup("r", "k", 1, 2 * NANOS_PER_SEC).is_none(),
                "expired on lookup"
            );
            c.insert((&rule, "a"), 1, &denial(1), 0, FOREVER);
            c.insert((&rule, "b"), 1, &denial(1), 2 * NANOS_PER_SEC, FOREVER); // purges "a"
            c.refunded(&rule, "b", 3 * NANOS_PER_SEC);
            c.refunded(&rule, "c", 4 * NANOS_PER_SEC); // full of refunds: purges
            let _ = done.send(c.len());
        });
        let left = result
            .recv_timeout(Duration::from_secs(10))
            .expect("returned instead of deadlocking");
        assert_eq!(left, 0);
    }
}
