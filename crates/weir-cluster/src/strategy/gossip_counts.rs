//! The gossip strategy's bookkeeping (seed 8C): this node's counts per window, and what each peer last reported.
//!
//! Each node decides from its own count plus the last counts its peers sent
//! it, per rule, key and window (`now / window`: the chapter's model counts
//! in aligned windows). Every `--sync-interval` a node sends each peer the
//! counts of the keys it admitted since the last sync. Between syncs each of
//! the N nodes can admit up to the limit minus what it last heard, so right
//! after a sync that reported zero the fleet can admit N x L; the interval
//! changes how likely that is, not the bound.

use std::collections::HashMap;
use std::sync::Arc;

use compact_str::CompactString;
use dashmap::DashMap;
use parking_lot::Mutex;
use weir_core::Nanos;
use weir_proto::weir::v1::CountDelta;

type Key = (Arc<str>, CompactString);

/// This node's admitted cost in one window.
#[derive(Debug, Clone, Copy, Default)]
struct Local {
    window: u64,
    count: u64,
    /// Changed since the last sync.
    dirty: bool,
}

/// What each peer last said about one key: node -> (window, count).
type Heard = HashMap<CompactString, (u64, u64)>;

#[derive(Default)]
pub struct GossipCounts {
    local: DashMap<Key, Local, foldhash::fast::RandomState>,
    remote: DashMap<Key, Heard, foldhash::fast::RandomState>,
    /// Serializes `take_dirty` so two syncs cannot both send and clear.
    syncing: Mutex<()>,
}

fn window_of(now: Nanos, window_ns: u64) -> u64 {
    now / window_ns.max(1)
}

impl GossipCounts {
    /// The cost peers reported admitting for this key in the window holding `now`.
    pub fn heard(&self, rule: &Arc<str>, key: &str, now: Nanos, window_ns: u64) -> u64 {
        let w = window_of(now, window_ns);
        self.remote
            .get(&(rule.clone(), CompactString::new(key)))
            .map_or(0, |h| {
                h.values()
                    .filter(|(win, _)| *win == w)
                    .map(|(_, c)| c)
                    .sum()
            })
    }

    /// Adds what this node admitted; it goes out with the next sync.
    pub fn admitted(&self, rule: &Arc<str>, key: &str, now: Nanos, window_ns: u64, cost: u64) {
        let w = window_of(now, window_ns);
        let mut slot = self
            .local
            .entry((rule.clone(), CompactString::new(key)))
            .or_default();
        if slot.window != w {
            *slot = Local {
                window: w,
                count: 0,
                dirty: true,
            };
        }
        slot.count += cost;
        slot.dirty = true;
    }

    /// The counts changed since the last call, as absolute per-window totals:
    /// a lost sync is repaired by the next one instead of being lost forever.
    pub fn take_dirty(&self) -> Vec<CountDelta> {
        let _one = self.syncing.lock();
        let mut out = Vec::new();
        for mut e in self.local.iter_mut() {
            if e.dirty {
                e.dirty = false;
                out.push(CountDelta {
                    rule: e.key().0.to_string(),
                    key: e.key().1.to_string(),
                    window: e.window,
                    count: e.count,
                });
            }
        }
        out
    }

    /// Records what `from` reported, each delta only if `accept` gives
    /// it a ceiling (its rule is known and its window is the current or
    /// the previous one); its count is clamped to that ceiling. A key not
    /// heard before is taken only while fewer than `max_keys` are held.
    /// Returns how many deltas were taken.
    pub fn apply(
        &self,
        from: &str,
        deltas: &[CountDelta],
        accept: impl Fn(&CountDelta) -> Option<u64>,
        max_keys: usize,
    ) -> usize {
        let mut taken = 0;
        for d in deltas {
            let Some(ceiling) = accept(d) else { continue };
            let key = (Arc::from(d.rule.as_str()), CompactString::new(&d.key));
            // len() before entry(): DashMap's len reads every shard, and
            // the entry's guard write-locks one of them.
            if self.remote.len() >= max_keys && !self.remote.contains_key(&key) {
                continue;
            }
            let mut heard = self.remote.entry(key).or_default();
            let slot = heard.entry(CompactString::new(from)).or_insert((0, 0));
            let count = d.count.min(ceiling);
            // Newer windows replace older ones; within a window counts only grow.
            if d.window > slot.0 || (d.window == slot.0 && count > slot.1) {
                *slot = (d.window, count);
            }
            taken += 1;
        }
        taken
    }

    /// Keys held from peers' reports.
    pub fn heard_keys(&self) -> usize {
        self.remote.len()
    }

    /// Drops counts of windows that ended before `now`'s previous one.
    pub fn sweep(&self, now: Nanos, window_of_rule: impl Fn(&str) -> Option<u64>) {
        let current = |rule: &str| window_of_rule(rule).map(|w| window_of(now, w));
        self.local
            .retain(|k, l| current(&k.0).is_some_and(|c| l.window + 1 >= c));
        self.remote.retain(|k, h| {
            let Some(c) = current(&k.0) else { return false };
            h.retain(|_, (w, _)| *w + 1 >= c);
            !h.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heard_counts_sum_peers_in_the_current_window_only() {
        let g = GossipCounts::default();
        let rule: Arc<str> = Arc::from("r");
        let w = 60_000_000_000;
        let d = |window, count| CountDelta {
            rule: "r".into(),
            key: "k".into(),
            window,
            count,
        };
        let any = |_: &CountDelta| Some(u64::MAX);
        g.apply("a", &[d(10, 3)], any, 10);
        g.apply("b", &[d(10, 4)], any, 10);
        g.apply("c", &[d(9, 50)], any, 10);
        assert_eq!(g.heard(&rule, "k", 10 * w + 5, w), 7);
        // A stale, smaller count from the same peer never lowers what was heard.
        g.apply("a", &[d(10, 1)], any, 10);
        assert_eq!(g.heard(&rule, "k", 10 * w + 5, w), 7);
    }

    #[test]
    fn only_changed_keys_are_sent_once() {
        let g = GossipCounts::default();
        let rule: Arc<str> = Arc::from("r");
        g.admitted(&rule, "k", 5, 10, 2);
        g.admitted(&rule, "k", 6, 10, 1);
        let sent = g.take_dirty();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].count, 3);
        assert!(g.take_dirty().is_empty());
    }

    #[test]
    fn refused_deltas_and_keys_past_the_cap_are_not_held() {
        let g = GossipCounts::default();
        let d = |key: &str, window, count| CountDelta {
            rule: "r".into(),
            key: key.into(),
            window,
            count,
        };
        let only_window_10 = |d: &CountDelta| (d.window == 10).then_some(5);
        let sent = [
            d("a", 10, 9),
            d("b", 1 << 62, 1),
            d("c", 10, 1),
            d("d", 10, 1),
        ];
        assert_eq!(g.apply("p", &sent, only_window_10, 2), 2);
        assert_eq!(
            g.heard_keys(),
            2,
            "the far window is refused, the third key is over the cap"
        );
        let rule: Arc<str> = Arc::from("r");
        assert_eq!(
            g.heard(&rule, "a", 10 * 7, 7),
            5,
            "a count is clamped to the limit"
        );
    }

    /// At the cap, `apply` reads the map's length and membership before it
    /// takes an entry; with a guard alive across them it would deadlock.
    #[test]
    fn applying_at_the_cap_holds_no_guard_across_the_checks() {
        let (done, result) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let g = GossipCounts::default();
            let d = |key: &str| CountDelta {
                rule: "r".into(),
                key: key.into(),
                window: 1,
                count: 1,
            };
            let sent: Vec<CountDelta> = (0..64).map(|i| d(&format!("k{i}"))).collect();
            let taken = g.apply("p", &sent, |_| Some(5), 16);
            let again = g.apply("p", &sent, |_| Some(5), 16);
            let _ = done.send((taken, again, g.heard_keys()));
        });
        let got = result
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("returned instead of deadlocking");
        assert_eq!(got, (16, 16, 16));
    }
}
