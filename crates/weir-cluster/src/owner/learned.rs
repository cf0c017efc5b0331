//! What a gateway last heard from each key's owner, so a fallback starts from the owner's count rather than a fresh L/N.
//!
//! Every owner answer (and every replica's) updates the key's entry: the
//! budget left and when it is whole again. While the owner is lost and that
//! reset has not come, the local fallback lets this gateway spend at most
//! its share of what was left, `remaining / N`: the N gateways together
//! cannot spend more than the owner had left when they last heard from it.

use std::sync::Arc;

use compact_str::CompactString;
use dashmap::DashMap;
use weir_core::{Decision, Nanos, NANOS_PER_MS};

type Key = (Arc<str>, CompactString);

#[derive(Debug, Clone, Copy)]
struct Entry {
    limit: u64,
    remaining: u64,
    /// Unix ms at which the owner's budget is whole again.
    reset_at_ms: u64,
    /// Spent on this gateway's fallback since the owner last answered.
    spent_here: u64,
}

pub struct Learned {
    map: DashMap<Key, Entry, weir_core::determinism::HashState>,
    max_keys: usize,
}

/// The fallback's verdict from what was learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Share {
    /// Within this gateway's share of what the owner had left.
    Admit(Decision),
    /// The share is spent: denied until the owner's budget resets.
    Deny(Decision),
}

impl Learned {
    pub fn new(max_keys: usize) -> Self {
        Learned {
            // Purged whole every 250 ms: as in the counters' tables, one
            // shard's lock covers a few thousand keys, not an eighth of them.
            map: DashMap::with_hasher_and_shard_amount(
                Default::default(),
                weir_core::store::shards_for(max_keys),
            ),
            max_keys,
        }
    }

    /// An owner's decision for (rule, key): what it had left then.
    pub fn note(&self, rule: &Arc<str>, hash_part: &str, d: &Decision) {
        let entry = Entry {
            limit: d.limit,
            remaining: d.remaining,
            reset_at_ms: d.reset_at,
            spent_here: 0,
        };
        if let Some(mut e) = self.map.get_mut(&key(rule, hash_part)) {
            *e = entry;
            return;
        }
        // Full: a key not learned falls back to L/N, as before any answer.
        if self.map.len() < self.max_keys {
            self.map.insert(key(rule, hash_part), entry);
        }
    }

    /// This gateway's share of what the owner last had left, among
    /// `members` gateways; None when nothing current is known.
    pub fn take(
        &self,
        rule: &Arc<str>,
        hash_part: &str,
        cost: u64,
        members: usize,
        now: Nanos,
    ) -> Option<Share> {
        let now_ms = now / NANOS_PER_MS;
        let mut e = self.map.get_mut(&key(rule, hash_part))?;
        if e.reset_at_ms <= now_ms {
            return None;
        }
        let share = e.remaining / members.max(1) as u64;
        let left = share.saturating_sub(e.spent_here);
        if cost <= left {
            e.spent_here += cost;
            let mut d = Decision::uncounted(e.limit, cost, std::time::Duration::ZERO, now);
            d.remaining = left - cost;
            d.reset_at = e.reset_at_ms;
            return Some(Share::Admit(d));
        }
        let wait = std::time::Duration::from_millis(e.reset_at_ms - now_ms);
        Some(Share::Deny(Decision::deny_until(
            e.limit,
            wait,
            e.reset_at_ms,
            now,
        )))
    }

    /// Gives back a fallback admission that a denied check refunds.
    pub fn give_back(&self, rule: &Arc<str>, hash_part: &str, cost: u64) {
        if let Some(mut e) = self.map.get_mut(&key(rule, hash_part)) {
            e.spent_here = e.spent_here.saturating_sub(cost);
        }
    }

    /// Drops what has reset: it says nothing any more.
    pub fn purge(&self, now: Nanos) {
        let now_ms = now / NANOS_PER_MS;
        self.map.retain(|_, e| e.reset_at_ms > now_ms);
    }
}

fn key(rule: &Arc<str>, hash_part: &str) -> Key {
    (rule.clone(), CompactString::new(hash_part))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use weir_core::NANOS_PER_SEC;

    #[test]
    fn a_gateway_spends_at_most_its_share_of_what_the_owner_had_left() {
        let l = Learned::new(10);
        let rule: Arc<str> = "r".into();
        let now = 100 * NANOS_PER_SEC;
        assert_eq!(l.take(&rule, "k", 1, 3, now), None, "nothing learned yet");
        // The owner had 7 of 20 left; three gateways: 2 each.
        let mut d = Decision::uncounted(20, 13, Duration::from_secs(60), now);
        d.remaining = 7;
        l.note(&rule, "k", &d);
        let got: Vec<bool> = (0..3)
            .map(|_| matches!(l.take(&rule, "k", 1, 3, now), Some(Share::Admit(_))))
            .collect();
        assert_eq!(got, [true, true, false]);
        l.give_back(&rule, "k", 1);
        assert!(matches!(
            l.take(&rule, "k", 1, 3, now),
            Some(Share::Admit(_))
        ));
        // Past the owner's reset the knowledge is stale.
        let later = now + 61 * NANOS_PER_SEC;
        assert_eq!(l.take(&rule, "k", 1, 3, later), None);
        l.purge(later);
        assert_eq!(l.map.len(), 0);
    }
}
