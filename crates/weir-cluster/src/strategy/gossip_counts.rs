//! The gossip strategy's bookkeeping (docs/cluster.md): this node's counts per window, and what each peer last reported.
//!
//! Each node decides from its own count plus the last counts its peers sent
//! it, per rule, key and window (`now / window`: gossip counts
//! in aligned windows), the previous window's counts kept beside the
//! current ones so a sliding window counter can weigh them in as its own
//! counter does. Every `--sync-interval` a node sends each peer the counts
//! of the keys it admitted since the last sync. Between syncs each of
//! the N nodes can admit up to the limit minus what it last heard, so right
//! after a sync that reported zero the fleet can admit N x L; the interval
//! changes how likely that is, not the bound.

use std::sync::Arc;
use weir_core::determinism::HashMap;

use compact_str::CompactString;
use dashmap::DashMap;
use parking_lot::Mutex;
use weir_core::Nanos;
use weir_proto::weir::v1::CountDelta;

type Key = (Arc<str>, CompactString);

/// This node's admitted cost in the current window and the one before.
#[derive(Debug, Clone, Copy, Default)]
struct Local {
    window: u64,
    count: u64,
    /// The count of window `window - 1`: a sliding window counter's
    /// estimate weighs it in, so peers must hear its final value.
    prev: u64,
    /// `count` changed since the last sync.
    dirty: bool,
    /// `prev` changed after its last sync (admissions just before the
    /// boundary that no sync carried yet).
    prev_dirty: bool,
}

/// What one peer last said about one key: its counts in window `window`
/// and in the window before.
#[derive(Debug, Clone, Copy, Default)]
struct PeerCounts {
    window: u64,
    count: u64,
    prev: u64,
}

impl PeerCounts {
    /// Folds in the peer's total `count` for `window`. Newer windows replace
    /// older ones (the last one becoming `prev`); within a window counts
    /// only grow, so a stale report never lowers what was heard.
    fn report(&mut self, window: u64, count: u64) {
        if window > self.window {
            self.prev = if window == self.window + 1 {
                self.count
            } else {
                0
            };
            self.window = window;
            self.count = count;
        } else if window == self.window {
            self.count = self.count.max(count);
        } else if window + 1 == self.window {
            self.prev = self.prev.max(count);
        }
    }

    /// (current, previous) counts as seen from window `w`.
    fn at(&self, w: u64) -> (u64, u64) {
        if self.window == w {
            (self.count, self.prev)
        } else if self.window + 1 == w {
            (0, self.count)
        } else {
            (0, 0)
        }
    }
}

/// What each peer last said about one key.
type Heard = HashMap<CompactString, PeerCounts>;

/// What the peers together reported for one key, as seen from now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeardCounts {
    /// Admitted in the current window.
    pub current: u64,
    /// Admitted in the window before it.
    pub previous: u64,
}

#[derive(Default)]
pub struct GossipCounts {
    local: DashMap<Key, Local, weir_core::determinism::HashState>,
    remote: DashMap<Key, Heard, weir_core::determinism::HashState>,
    /// Serializes `take_dirty` so two syncs cannot both send and clear.
    syncing: Mutex<()>,
}

fn window_of(now: Nanos, window_ns: u64) -> u64 {
    now / window_ns.max(1)
}

impl GossipCounts {
    /// The cost peers reported admitting for this key in the window holding
    /// `now` and in the one before it.
    pub fn heard(&self, rule: &Arc<str>, key: &str, now: Nanos, window_ns: u64) -> HeardCounts {
        let w = window_of(now, window_ns);
        let Some(h) = self.remote.get(&(rule.clone(), CompactString::new(key))) else {
            return HeardCounts::default();
        };
        h.values().fold(HeardCounts::default(), |acc, p| {
            let (current, previous) = p.at(w);
            HeardCounts {
                current: acc.current + current,
                previous: acc.previous + previous,
            }
        })
    }

    /// Adds what this node admitted; it goes out with the next sync.
    pub fn admitted(&self, rule: &Arc<str>, key: &str, now: Nanos, window_ns: u64, cost: u64) {
        let w = window_of(now, window_ns);
        let mut slot = self
            .local
            .entry((rule.clone(), CompactString::new(key)))
            .or_default();
        if w < slot.window {
            // Decided just before a boundary but recorded after a check
            // decided past it: it belongs to the previous window, which
            // must not replace the current one (losing its count).
            if w + 1 == slot.window {
                slot.prev += cost;
                slot.prev_dirty = true;
            }
            return;
        }
        if slot.window != w {
            let follows = slot.window + 1 == w;
            *slot = Local {
                window: w,
                count: 0,
                prev: if follows { slot.count } else { 0 },
                dirty: true,
                prev_dirty: follows && slot.dirty,
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
            let delta = |window, count| CountDelta {
                rule: e.key().0.to_string(),
                key: e.key().1.to_string(),
                window,
                count,
            };
            // The previous window's final total first, so a receiver that
            // takes them in order rolls over onto it.
            if e.prev_dirty {
                out.push(delta(e.window - 1, e.prev));
            }
            if e.dirty {
                out.push(delta(e.window, e.count));
            }
            e.prev_dirty = false;
            e.dirty = false;
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
            let slot = heard.entry(CompactString::new(from)).or_insert(PeerCounts {
                window: d.window,
                ..PeerCounts::default()
            });
            slot.report(d.window, d.count.min(ceiling));
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
            h.retain(|_, p| p.window + 1 >= c);
            !h.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(window: u64, count: u64) -> CountDelta {
        CountDelta {
            rule: "r".into(),
            key: "k".into(),
            window,
            count,
        }
    }

    fn any(_: &CountDelta) -> Option<u64> {
        Some(u64::MAX)
    }

    const W: u64 = 60_000_000_000;

    /// (current, previous) heard for "k" in `window`.
    fn heard_at(g: &GossipCounts, window: u64) -> (u64, u64) {
        let h = g.heard(&Arc::from("r"), "k", window * W + 5, W);
        (h.current, h.previous)
    }

    #[test]
    fn heard_counts_sum_peers_per_window() {
        let g = GossipCounts::default();
        g.apply("a", &[delta(10, 3)], any, 10);
        g.apply("b", &[delta(10, 4)], any, 10);
        g.apply("c", &[delta(9, 50)], any, 10);
        g.apply("d", &[delta(7, 80)], any, 10);
        let want = (7, 50);
        assert_eq!(heard_at(&g, 10), want, "window 7 is too old to count");
        // A stale, smaller count from the same peer never lowers what was heard.
        g.apply("a", &[delta(10, 1)], any, 10);
        assert_eq!(heard_at(&g, 10), want);
    }

    #[test]
    fn a_peers_last_window_is_still_heard_once_it_moves_on() {
        let g = GossipCounts::default();
        g.apply("a", &[delta(10, 20)], any, 10);
        assert_eq!(heard_at(&g, 11), (0, 20));
        g.apply("a", &[delta(11, 2)], any, 10);
        assert_eq!(heard_at(&g, 11), (2, 20));
        // The previous window's final total arriving after the new one.
        g.apply("a", &[delta(10, 25)], any, 10);
        assert_eq!(heard_at(&g, 11), (2, 25));
        // Two windows on, nothing of window 10 is left.
        g.apply("a", &[delta(13, 1)], any, 10);
        assert_eq!(heard_at(&g, 13), (1, 0));
    }

    #[test]
    fn admissions_no_sync_carried_before_the_boundary_go_out_with_the_next() {
        let g = GossipCounts::default();
        let rule: Arc<str> = Arc::from("r");
        g.admitted(&rule, "k", 10 * W, W, 3);
        assert_eq!(g.take_dirty().len(), 1);
        g.admitted(&rule, "k", 10 * W + 1, W, 2);
        // The window turns before the next sync.
        g.admitted(&rule, "k", 11 * W, W, 1);
        let sent: Vec<(u64, u64)> = g.take_dirty().iter().map(|d| (d.window, d.count)).collect();
        assert_eq!(sent, [(10, 5), (11, 1)]);
        let peer = GossipCounts::default();
        peer.apply("n", &g_deltas(&sent), any, 10);
        assert_eq!(heard_at(&peer, 11), (1, 5));
    }

    #[test]
    fn an_admission_recorded_after_the_boundary_it_preceded_keeps_both_windows() {
        let g = GossipCounts::default();
        let rule: Arc<str> = Arc::from("r");
        // Two checks either side of the boundary, recorded in reverse order.
        g.admitted(&rule, "k", 11 * W, W, 1);
        g.admitted(&rule, "k", 11 * W - 1, W, 2);
        let mut sent: Vec<(u64, u64)> =
            g.take_dirty().iter().map(|d| (d.window, d.count)).collect();
        sent.sort_unstable();
        assert_eq!(sent, [(10, 2), (11, 1)]);
        g.admitted(&rule, "k", 11 * W + 1, W, 4);
        let sent: Vec<(u64, u64)> = g.take_dirty().iter().map(|d| (d.window, d.count)).collect();
        assert_eq!(sent, [(11, 5)], "the current window's count was kept");
    }

    fn g_deltas(sent: &[(u64, u64)]) -> Vec<CountDelta> {
        sent.iter().map(|&(w, c)| delta(w, c)).collect()
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
            g.heard(&rule, "a", 10 * 7, 7).current,
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
