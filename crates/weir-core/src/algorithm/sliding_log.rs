//! Sliding window log (docs/algorithms.md): the timestamps of admitted requests only.
//!
//! Exact at any alignment: no interval of length W ever holds more than L
//! admitted. Only admissions are logged, so a key never holds more than L
//! entries and its memory is set by configuration, not by the sender's rate
//! (logging rejections too would let an attacker set that memory instead).

use std::collections::VecDeque;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Algorithm;
use crate::clock::Nanos;
use crate::decision::{ms_ceil, Decision};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlidingLog {
    pub(crate) limit: u64,
    pub(crate) window: Nanos,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SlidingLogState {
    /// (admitted at, cost), oldest first. Costs sum to `used` <= limit.
    entries: VecDeque<(Nanos, u32)>,
    used: u64,
}

impl SlidingLogState {
    /// Entries held; never more than the limit.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl SlidingLog {
    /// Drops what has aged out; returns `now` clamped to the newest entry so a
    /// backwards clock can neither reorder the log nor age entries early.
    fn trim(&self, s: &mut SlidingLogState, now: Nanos) -> Nanos {
        let now = s.entries.back().map_or(now, |&(t, _)| now.max(t));
        while let Some(&(t, c)) = s.entries.front() {
            if t.saturating_add(self.window) > now {
                break;
            }
            s.entries.pop_front();
            s.used -= u64::from(c);
        }
        now
    }

    /// Keeps the newest L units past a merge or a charge: the window then
    /// stays full longest, so either can only under-admit. The oldest
    /// entry kept is cut to what fits, so a log that went past L is full,
    /// as `since` relies on, rather than short by the rest of an entry.
    fn keep_newest(&self, s: &mut SlidingLogState) {
        while s.used > self.limit {
            let excess = s.used - self.limit;
            let Some(front) = s.entries.front_mut() else {
                break;
            };
            if u64::from(front.1) > excess {
                // excess < front.1, a u32.
                front.1 -= excess as u32;
                s.used = self.limit;
            } else {
                s.used -= u64::from(front.1);
                s.entries.pop_front();
            }
        }
    }

    /// Exact wait until `cost` fits: the instant enough of the oldest entries
    /// have left the window (oldest + W - now).
    fn wait_for(&self, s: &SlidingLogState, now: Nanos, cost: u64) -> Nanos {
        let mut must_free = (s.used + cost).saturating_sub(self.limit);
        for &(t, c) in &s.entries {
            must_free = must_free.saturating_sub(u64::from(c));
            if must_free == 0 {
                return (t + self.window).saturating_sub(now);
            }
        }
        self.window
    }
}

impl Algorithm for SlidingLog {
    type State = SlidingLogState;

    fn fresh(&self) -> SlidingLogState {
        SlidingLogState::default()
    }

    fn decide(&self, s: &mut SlidingLogState, now: Nanos, cost: u64) -> Decision {
        let now = self.trim(s, now);
        let allowed = s.used + cost <= self.limit;
        if allowed {
            // cost <= limit <= MAX_LOG_LIMIT, checked when the rule was built.
            s.entries.push_back((now, cost as u32));
            s.used += cost;
        }
        let retry = if allowed {
            0
        } else {
            self.wait_for(s, now, cost)
        };
        let reset = s.entries.back().map_or(now, |&(t, _)| t + self.window);
        Decision {
            allowed,
            limit: self.limit,
            remaining: self.limit - s.used,
            retry_after: Duration::from_nanos(retry),
            reset_at: ms_ceil(reset),
            delay: Duration::ZERO,
            at: now,
        }
    }

    fn refund(&self, s: &mut SlidingLogState, at: Nanos, cost: u64) {
        let found = s
            .entries
            .iter()
            .rposition(|&(t, c)| t == at && u64::from(c) == cost)
            // A merge or a charge since may have cut the oldest entry to
            // what fits (`keep_newest`): what is left of it is returned.
            .or_else(|| {
                let &(t, c) = s.entries.front()?;
                (t == at && u64::from(c) < cost).then_some(0)
            });
        if let Some((_, c)) = found.and_then(|i| s.entries.remove(i)) {
            s.used -= u64::from(c);
        }
    }

    /// The newest entries go first, the last one cut to what is left of
    /// `cost`: they are the admissions a refund most likely settles, and
    /// taking them frees no slot earlier than taking the oldest would
    /// (the oldest age out first anyway).
    fn give_back(&self, s: &mut SlidingLogState, cost: u64) {
        let mut left = cost;
        while left > 0 {
            let Some(back) = s.entries.back_mut() else {
                break;
            };
            let c = u64::from(back.1);
            if c <= left {
                left -= c;
                s.used -= c;
                s.entries.pop_back();
            } else {
                // c > left, so the cut cost fits its u32.
                back.1 -= left as u32;
                s.used -= left;
                left = 0;
            }
        }
    }

    fn is_idle(&self, s: &SlidingLogState, now: Nanos) -> bool {
        s.entries
            .back()
            .is_none_or(|&(t, _)| t.saturating_add(self.window) <= now)
    }

    fn rest_at(&self, s: &SlidingLogState) -> Nanos {
        s.entries
            .back()
            .map_or(0, |&(t, _)| t.saturating_add(self.window))
    }

    /// Oldest first, every cost at least 1, `used` their sum and at most the
    /// limit: what `decide` and `merge` keep. A log that says otherwise
    /// could make `used` wrap when its entries age out.
    fn admit(&self, s: SlidingLogState, now: Nanos) -> Option<SlidingLogState> {
        let sorted = s
            .entries
            .iter()
            .zip(s.entries.iter().skip(1))
            .all(|(a, b)| a.0 <= b.0);
        let costs_ok = s.entries.iter().all(|&(_, c)| c >= 1);
        let sum: u64 = s.entries.iter().map(|&(_, c)| u64::from(c)).sum();
        if !(sorted && costs_ok && sum == s.used && sum <= self.limit) {
            return None;
        }
        let entries = s
            .entries
            .into_iter()
            .map(|(t, c)| (t.min(now), c))
            .collect();
        Some(SlidingLogState {
            entries,
            used: s.used,
        })
    }

    fn merge(&self, into: &mut SlidingLogState, other: SlidingLogState, now: Nanos) {
        let mut all: Vec<(Nanos, u32)> = into.entries.drain(..).chain(other.entries).collect();
        all.sort_unstable_by_key(|&(t, _)| t);
        into.entries = all.into();
        into.used = into.entries.iter().map(|&(_, c)| u64::from(c)).sum();
        self.trim(into, now);
        self.keep_newest(into);
    }

    fn charge(&self, s: &mut SlidingLogState, now: Nanos, cost: u64) {
        let now = self.trim(s, now);
        // One entry holds at most the limit, so the trim below never drops it.
        let cost = cost.min(self.limit);
        s.entries.push_back((now, cost as u32));
        s.used += cost;
        self.keep_newest(s);
    }

    /// Counted, not matched by time: a later count of a key may hold the
    /// base's admissions at other times than the base does (an owner's own
    /// entry for an admission its copy was charged with when a gateway
    /// reported it), and the base may hold admissions the later count never
    /// got (a stand-in's). What `s` holds past the base's total, over the
    /// same window, is what was spent since; its newest entries carry it,
    /// so the window stays full longest.
    ///
    /// At the limit the count alone falls short: a charge or a merge past L
    /// drops the oldest units of `s`, the base's among them, so a full log
    /// can hold as many as its base and still have spent since. Everything
    /// a full `s` holds after the base's newest entry was spent since, so
    /// that much at least is handed on. (A base entry at the very instant
    /// of a later one is taken as the base's.) It can only overstate what
    /// was spent, which under-admits, never over-admits.
    fn since(&self, s: &SlidingLogState, base: &SlidingLogState, now: Nanos) -> SlidingLogState {
        let (mut s, mut base) = (s.clone(), base.clone());
        let newest = s.entries.back().into_iter().chain(base.entries.back());
        let now = newest.fold(now, |n, &(t, _)| n.max(t));
        self.trim(&mut s, now);
        self.trim(&mut base, now);
        let mut past = s.used.saturating_sub(base.used);
        if s.used >= self.limit {
            let base_newest = base.entries.back().map(|&(t, _)| t);
            let after_base: u64 = s
                .entries
                .iter()
                .rev()
                .take_while(|&&(t, _)| base_newest.is_none_or(|b| t > b))
                .map(|&(_, c)| u64::from(c))
                .sum();
            past = past.max(after_base);
        }
        let mut entries = VecDeque::new();
        for &(t, c) in s.entries.iter().rev() {
            if past == 0 {
                break;
            }
            let part = u64::from(c).min(past);
            // part <= c, a u32.
            entries.push_front((t, part as u32));
            past -= part;
        }
        let used = entries.iter().map(|&(_, c)| u64::from(c)).sum();
        SlidingLogState { entries, used }
    }

    fn max_cost(&self) -> u64 {
        self.limit
    }
}
