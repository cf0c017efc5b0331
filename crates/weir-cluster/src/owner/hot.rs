//! Which of its keys are hot at this owner: a bounded heavy-hitter summary per rule, over one-second intervals.
//!
//! Space-saving (Metwally et al.): each rule tracks at most [`TRACKED`]
//! keys; a key not tracked takes the place of the least counted one and
//! inherits its count as possible error. Any key with more than 1/TRACKED
//! of a rule's checks in an interval is always tracked, so a whale is never
//! missed, and memory stays bounded whatever the keys. A key is hot when
//! its checks in the last whole interval reach the threshold.
//!
//! Hotness counts checks, not the units they cost: one check of cost 1,000
//! is one round trip to the owner, and what leases save is round trips. The
//! units each gateway sent are kept beside, for sizing its lease.

use std::sync::Arc;

use compact_str::CompactString;
use dashmap::DashMap;
use parking_lot::Mutex;
use weir_core::{Nanos, NANOS_PER_SEC};

/// Keys tracked per rule.
pub const TRACKED: usize = 32;
/// The interval rates are counted over.
pub const INTERVAL: Nanos = NANOS_PER_SEC;
/// Gateways tracked per key (a cluster larger than this shares the rest).
const GATEWAYS: usize = 64;

/// One key of the last whole interval.
#[derive(Debug, Clone, PartialEq)]
pub struct HotKey {
    pub rule: Arc<str>,
    pub key: CompactString,
    /// Checks in the interval (whatever each cost), possibly over-counted by `error`.
    pub checks: u64,
    pub error: u64,
}

/// What an owner knows of one hot key's traffic in the last interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heat {
    /// Checks per second for the key, all gateways together.
    pub per_sec: u64,
    /// Units (the checks' cost) from the gateway asked about: what it
    /// would decide from a lease of one term.
    pub from_gateway: u64,
    /// Gateways that sent the key.
    pub gateways: usize,
}

#[derive(Debug, Clone)]
struct Entry {
    key: CompactString,
    /// Checks, whatever their cost.
    count: u64,
    error: u64,
    /// Units sent, by gateway.
    by: Vec<(Arc<str>, u64)>,
}

#[derive(Debug, Default)]
struct Summary {
    start: Nanos,
    current: Vec<Entry>,
    /// The last whole interval, most counted first.
    last: Vec<Entry>,
}

impl Summary {
    /// Moves to the interval holding `now`; an interval with nothing in it
    /// leaves nothing behind.
    fn roll(&mut self, now: Nanos) {
        if now < self.start.saturating_add(INTERVAL) {
            return;
        }
        let mut ended = std::mem::take(&mut self.current);
        ended.sort_by_key(|e| std::cmp::Reverse(e.count));
        self.last = if now < self.start.saturating_add(2 * INTERVAL) {
            ended
        } else {
            Vec::new()
        };
        self.start = now - now % INTERVAL;
    }

    fn record(&mut self, key: &str, from: &Arc<str>, (checks, units): (u64, u64)) {
        let i = match self.current.iter().position(|e| e.key == key) {
            Some(i) => i,
            None if self.current.len() < TRACKED => {
                self.current.push(Entry {
                    key: CompactString::new(key),
                    count: 0,
                    error: 0,
                    by: Vec::new(),
                });
                self.current.len() - 1
            }
            None => {
                let (i, min) = self
                    .current
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, e)| e.count)
                    .map(|(i, e)| (i, e.count))
                    .expect("a full summary has entries");
                self.current[i] = Entry {
                    key: CompactString::new(key),
                    count: min,
                    error: min,
                    by: Vec::new(),
                };
                i
            }
        };
        let e = &mut self.current[i];
        e.count = e.count.saturating_add(checks);
        match e.by.iter().position(|(g, _)| g == from) {
            Some(j) => e.by[j].1 = e.by[j].1.saturating_add(units),
            None if e.by.len() < GATEWAYS => e.by.push((from.clone(), units)),
            None => {}
        }
    }
}

pub struct HotKeys {
    rules: DashMap<Arc<str>, Mutex<Summary>, weir_core::determinism::HashState>,
    /// Checks per second from which a key is hot.
    threshold: u64,
}

impl HotKeys {
    pub fn new(threshold: u64) -> Self {
        HotKeys {
            rules: DashMap::default(),
            threshold: threshold.max(1),
        }
    }

    pub fn threshold(&self) -> u64 {
        self.threshold
    }

    /// Counts one op of `cost` for `key` of `rule`, sent by gateway `from`:
    /// one check towards the key's heat, `cost` units towards `from`'s share.
    pub fn record(&self, rule: &Arc<str>, key: &str, from: &Arc<str>, cost: u64, now: Nanos) {
        self.record_many(rule, key, from, (1, cost), now);
    }

    /// Counts `(checks, units)` for `key` of `rule` sent by gateway `from`
    /// at once: what a gateway decided from its leases, reported when it
    /// asks for the next one.
    pub fn record_many(
        &self,
        rule: &Arc<str>,
        key: &str,
        from: &Arc<str>,
        used: (u64, u64),
        now: Nanos,
    ) {
        // The read guard ends with this `if let` (no `else`) before any
        // insert takes a shard's write lock.
        if let Some(s) = self.rules.get(rule) {
            let mut s = s.lock();
            s.roll(now);
            s.record(key, from, used);
            return;
        }
        let s = self.rules.entry(rule.clone()).or_default();
        let mut s = s.lock();
        s.roll(now);
        s.record(key, from, used);
    }

    /// The key's traffic if it is hot: in the last whole interval, or in
    /// the current one once it alone reaches the threshold (that many
    /// checks in under a second is at least that rate), so a whale is
    /// leased within its first second rather than after it.
    pub fn heat(&self, rule: &str, key: &str, from: &str, now: Nanos) -> Option<Heat> {
        let s = self.rules.get(rule)?;
        let mut s = s.lock();
        s.roll(now);
        let hot = |entries: &[Entry]| {
            let e = entries.iter().find(|e| e.key == key)?;
            self.heat_of(e, from)
        };
        hot(&s.last).or_else(|| hot(&s.current))
    }

    fn heat_of(&self, e: &Entry, from: &str) -> Option<Heat> {
        // The guaranteed count: what was surely this key's.
        let per_sec = e.count - e.error;
        if per_sec < self.threshold {
            return None;
        }
        Some(Heat {
            per_sec,
            from_gateway: e
                .by
                .iter()
                .find(|(g, _)| &**g == from)
                .map_or(0, |(_, n)| *n),
            gateways: e.by.len().max(1),
        })
    }

    /// The hottest keys of the last whole interval over every rule, most
    /// checks first, at most `n`.
    pub fn top(&self, n: usize, now: Nanos) -> Vec<HotKey> {
        let mut out = Vec::new();
        for r in self.rules.iter() {
            let mut s = r.value().lock();
            s.roll(now);
            out.extend(s.last.iter().map(|e| HotKey {
                rule: r.key().clone(),
                key: e.key.clone(),
                checks: e.count,
                error: e.error,
            }));
        }
        out.sort_by_key(|h| std::cmp::Reverse(h.checks));
        out.truncate(n);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(id: &str) -> Arc<str> {
        Arc::from(id)
    }

    #[test]
    fn a_whale_among_many_keys_is_found_with_its_rate_and_gateways() {
        let h = HotKeys::new(100);
        let r = g("r");
        let t = 5 * INTERVAL;
        for i in 0..10_000u64 {
            // One key in three is the whale, the rest spread over 5,000 keys.
            let key = if i % 3 == 0 {
                "whale".to_string()
            } else {
                format!("k{i}")
            };
            let from = if i % 2 == 0 { g("a") } else { g("b") };
            h.record(&r, &key, &from, 1, t + i);
        }
        let heat = h.heat("r", "whale", "a", t + INTERVAL).expect("hot");
        assert!(heat.per_sec >= 3_334 - 3_334 / 10, "{heat:?}");
        assert_eq!(heat.gateways, 2);
        assert_eq!(heat.from_gateway, 1_667);
        let top = h.top(3, t + INTERVAL);
        assert_eq!(top[0].key, "whale");
        assert!(top.len() <= 3);
        // A cold key is not hot, and an idle interval forgets everything.
        assert!(h.heat("r", "k1", "b", t + INTERVAL).is_none());
        assert!(h.heat("r", "whale", "a", t + 3 * INTERVAL).is_none());
    }

    #[test]
    fn a_key_is_hot_as_soon_as_its_interval_reaches_the_rate() {
        let h = HotKeys::new(100);
        let r = g("r");
        let t = 7 * INTERVAL;
        for i in 0..99u64 {
            h.record(&r, "whale", &g("a"), 1, t + i);
        }
        assert!(h.heat("r", "whale", "a", t + 99).is_none(), "99 < 100");
        h.record(&r, "whale", &g("b"), 1, t + 99);
        let heat = h
            .heat("r", "whale", "a", t + 100)
            .expect("hot mid-interval");
        assert_eq!(
            (heat.per_sec, heat.from_gateway, heat.gateways),
            (100, 99, 2)
        );
    }

    /// Guard: heat counts checks. Counted in units, one check of cost
    /// 1,000 made its key hot at a threshold of 100 checks a second.
    #[test]
    fn one_costly_check_is_one_check_however_many_units_it_costs() {
        let h = HotKeys::new(100);
        let r = g("r");
        let t = 3 * INTERVAL;
        h.record(&r, "costly", &g("a"), 1_000, t);
        assert!(h.heat("r", "costly", "a", t + 1).is_none(), "1 check < 100");
        // A hot key's gateway share stays in units, for its lease's size.
        for i in 1..100u64 {
            h.record(&r, "costly", &g("a"), 10, t + i);
        }
        let heat = h.heat("r", "costly", "a", t + 100).expect("100 checks");
        assert_eq!((heat.per_sec, heat.from_gateway), (100, 1_000 + 99 * 10));
        let top = h.top(1, t + INTERVAL);
        assert_eq!((top[0].checks, top[0].error), (100, 0));
    }

    #[test]
    fn memory_stays_bounded_whatever_the_keys() {
        let h = HotKeys::new(1);
        let r = g("r");
        for i in 0..100_000u64 {
            h.record(&r, &format!("k{i}"), &g("a"), 1, i);
        }
        let s = h.rules.get("r").unwrap();
        assert!(s.lock().current.len() <= TRACKED);
    }
}
