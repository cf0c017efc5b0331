//! Fixed window (docs/algorithms.md): one counter per epoch-aligned window.
//!
//! The cheapest algorithm and the one with the worst worst case: L = 5 admits
//! 5 at 12:00:59.7 and 5 more at 12:01:00.1, ten inside 400 ms. The count
//! bound is 2L; the instantaneous rate is unbounded. Right for daily quotas.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Algorithm;
use crate::clock::Nanos;
use crate::decision::{ms_ceil, Decision};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FixedWindow {
    pub(crate) limit: u64,
    pub(crate) window: Nanos,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FixedWindowState {
    idx: u64,
    count: u64,
}

impl FixedWindow {
    /// The window `now` falls in, never earlier than one already counted: a
    /// clock stepping back keeps filling the current window instead of
    /// reopening an old one with a fresh budget.
    fn roll(&self, s: &mut FixedWindowState, now: Nanos) {
        let idx = (now / self.window).max(s.idx);
        if idx != s.idx {
            s.idx = idx;
            s.count = 0;
        }
    }
}

impl Algorithm for FixedWindow {
    type State = FixedWindowState;

    fn fresh(&self) -> FixedWindowState {
        FixedWindowState { idx: 0, count: 0 }
    }

    fn decide(&self, s: &mut FixedWindowState, now: Nanos, cost: u64) -> Decision {
        self.roll(s, now);
        let end = (s.idx + 1).saturating_mul(self.window);
        let allowed = s.count + cost <= self.limit;
        if allowed {
            s.count += cost;
        }
        let retry = if allowed { 0 } else { end.saturating_sub(now) };
        Decision {
            allowed,
            limit: self.limit,
            remaining: self.limit - s.count,
            retry_after: Duration::from_nanos(retry),
            reset_at: ms_ceil(if s.count > 0 { end } else { now }),
            delay: Duration::ZERO,
            at: now,
        }
    }

    fn refund(&self, s: &mut FixedWindowState, at: Nanos, cost: u64) {
        // A cost spent in a window that has closed no longer limits anyone.
        if at / self.window == s.idx {
            s.count = s.count.saturating_sub(cost);
        }
    }

    /// Off the window last counted: a closed one resets on the next read
    /// whatever it holds.
    fn give_back(&self, s: &mut FixedWindowState, cost: u64) {
        s.count = s.count.saturating_sub(cost);
    }

    fn is_idle(&self, s: &FixedWindowState, now: Nanos) -> bool {
        s.count == 0 || now / self.window > s.idx
    }

    fn rest_at(&self, s: &FixedWindowState) -> Nanos {
        if s.count == 0 {
            return 0;
        }
        s.idx.saturating_add(1).saturating_mul(self.window)
    }

    fn merge(&self, into: &mut FixedWindowState, other: FixedWindowState, now: Nanos) {
        self.roll(into, now);
        if other.idx == into.idx {
            into.count = (into.count + other.count).min(self.limit);
        }
    }

    fn charge(&self, s: &mut FixedWindowState, now: Nanos, cost: u64) {
        self.roll(s, now);
        // A full window denies until its end whatever the excess, so the
        // count never needs to go past the limit.
        s.count = s.count.saturating_add(cost).min(self.limit);
    }

    fn since(
        &self,
        s: &FixedWindowState,
        base: &FixedWindowState,
        _now: Nanos,
    ) -> FixedWindowState {
        let count = if s.idx == base.idx {
            s.count.saturating_sub(base.count)
        } else {
            s.count
        };
        FixedWindowState { idx: s.idx, count }
    }

    fn admit(&self, s: FixedWindowState, now: Nanos) -> Option<FixedWindowState> {
        (s.count <= self.limit).then(|| FixedWindowState {
            idx: s.idx.min(now / self.window),
            count: s.count,
        })
    }

    fn max_cost(&self) -> u64 {
        self.limit
    }
}
