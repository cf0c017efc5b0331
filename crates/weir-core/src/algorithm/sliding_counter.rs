//! Sliding window counter (docs/algorithms.md): `est = prev * (1 - f) + curr`.
//!
//! Two counts per key. Unbiased under Poisson traffic with standard deviation
//! `sqrt(p f (1-f))`: 5 requests at L = 100, 22% of the limit at L = 5, which
//! is why small limits belong to the log.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{nanos_f64, Algorithm};
use crate::clock::Nanos;
use crate::decision::{ms_ceil, Decision};

/// Float slack so `67.5 + 32.5 <= 100` style sums are not lost to rounding.
const EPS: f64 = 1e-9;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlidingCounter {
    pub(crate) limit: u64,
    pub(crate) window: Nanos,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SlidingCounterState {
    /// The highest time ever seen for this key; the window index derives
    /// from it. Clamping to it is `max(now, self.high)`: a
    /// backwards step freezes the window instead of zeroing both counts and
    /// handing out a second budget.
    pub(crate) high: Nanos,
    pub(crate) prev: u64,
    pub(crate) curr: u64,
}

impl SlidingCounter {
    /// Advances to the window holding `now`; returns (clamped now, elapsed fraction f).
    fn roll(&self, s: &mut SlidingCounterState, now: Nanos) -> (Nanos, f64) {
        let now = now.max(s.high);
        let (idx, old) = (now / self.window, s.high / self.window);
        if idx != old {
            // Only the immediately preceding window contributes; after a gap of
            // two or more the previous one has fully aged out.
            s.prev = if idx == old + 1 { s.curr } else { 0 };
            s.curr = 0;
        }
        s.high = now;
        (now, nanos_f64(now % self.window) / self.window as f64)
    }

    /// The estimate a request at `now` would see, without changing state.
    pub fn estimate_at(&self, s: &SlidingCounterState, now: Nanos) -> f64 {
        let mut probe = *s;
        let (_, f) = self.roll(&mut probe, now);
        Self::estimate(&probe, f)
    }

    fn estimate(s: &SlidingCounterState, f: f64) -> f64 {
        s.prev as f64 * (1.0 - f) + s.curr as f64
    }

    /// Smallest wait after which the estimate admits `cost`.
    ///
    /// `est(f)` falls linearly as f grows, so solve
    /// `prev * (1 - f') + curr <= limit - cost` for f'. When even a zero
    /// previous window would not make room, wait for the roll, after which
    /// the current count becomes `prev` and decays the same way.
    fn wait_for(&self, s: &SlidingCounterState, f: f64, cost: u64) -> f64 {
        let w = self.window as f64;
        let rest = w * (1.0 - f);
        let head = self.limit as f64 - cost as f64 - s.curr as f64;
        if head >= 0.0 && s.prev > 0 {
            let need_f = 1.0 - head / s.prev as f64;
            return ((need_f - f) * w).clamp(0.0, rest);
        }
        let after_roll = if s.curr > 0 {
            (1.0 - (self.limit - cost) as f64 / s.curr as f64).max(0.0) * w
        } else {
            0.0
        };
        rest + after_roll
    }
}

impl Algorithm for SlidingCounter {
    type State = SlidingCounterState;

    fn fresh(&self) -> SlidingCounterState {
        SlidingCounterState::default()
    }

    fn decide(&self, s: &mut SlidingCounterState, now: Nanos, cost: u64) -> Decision {
        let (now, f) = self.roll(s, now);
        let est = Self::estimate(s, f);
        let allowed = est + cost as f64 <= self.limit as f64 + EPS;
        if allowed {
            s.curr += cost;
        }
        let retry = if allowed {
            0.0
        } else {
            self.wait_for(s, f, cost)
        };
        let after = Self::estimate(s, f);
        let idx = now / self.window;
        let reset = if s.curr > 0 {
            (idx + 2) * self.window
        } else if s.prev > 0 {
            (idx + 1) * self.window
        } else {
            now
        };
        Decision {
            allowed,
            limit: self.limit,
            remaining: (self.limit as f64 - after + EPS).floor().max(0.0) as u64,
            retry_after: Duration::from_nanos(retry.ceil() as u64),
            reset_at: ms_ceil(reset),
            delay: Duration::ZERO,
            at: now,
        }
    }

    fn refund(&self, s: &mut SlidingCounterState, at: Nanos, cost: u64) {
        let (at_idx, idx) = (at / self.window, s.high / self.window);
        if at_idx == idx {
            s.curr = s.curr.saturating_sub(cost);
        } else if at_idx + 1 == idx {
            s.prev = s.prev.saturating_sub(cost);
        }
    }

    /// Off the current window's count first, then the previous one's.
    /// Taken from `prev`, a unit lowers the estimate by `1 - f` only, so a
    /// refund larger than `curr` gives back a little less than it names,
    /// never more. If the state's window has closed, its `curr` is the
    /// next read's `prev` and its `prev` ages out: the order still holds.
    fn give_back(&self, s: &mut SlidingCounterState, cost: u64) {
        let from_curr = cost.min(s.curr);
        s.curr -= from_curr;
        s.prev = s.prev.saturating_sub(cost - from_curr);
    }

    fn is_idle(&self, s: &SlidingCounterState, now: Nanos) -> bool {
        let (idx, high) = (now / self.window, s.high / self.window);
        (s.prev == 0 && s.curr == 0) || idx >= high + 2 || (idx == high + 1 && s.curr == 0)
    }

    fn rest_at(&self, s: &SlidingCounterState) -> Nanos {
        let idx = s.high / self.window;
        let idle_from = if s.curr > 0 {
            idx.saturating_add(2)
        } else if s.prev > 0 {
            idx.saturating_add(1)
        } else {
            return 0;
        };
        idle_from.saturating_mul(self.window)
    }

    fn merge(&self, into: &mut SlidingCounterState, other: SlidingCounterState, now: Nanos) {
        let mut other = other;
        let (now, _) = self.roll(into, now);
        self.roll(&mut other, now);
        // Saturating: spent budgets add, and past the limit more says nothing.
        into.prev = into.prev.saturating_add(other.prev);
        into.curr = into.curr.saturating_add(other.curr);
    }

    /// Counts above the limit are honest (a merge of two full counters),
    /// so only the time is checked.
    fn admit(&self, s: SlidingCounterState, now: Nanos) -> Option<SlidingCounterState> {
        Some(SlidingCounterState {
            high: s.high.min(now),
            ..s
        })
    }

    fn charge(&self, s: &mut SlidingCounterState, now: Nanos, cost: u64) {
        self.roll(s, now);
        s.curr = s.curr.saturating_add(cost);
    }

    fn since(
        &self,
        s: &SlidingCounterState,
        base: &SlidingCounterState,
        _now: Nanos,
    ) -> SlidingCounterState {
        let (idx, then) = (s.high / self.window, base.high / self.window);
        let (prev, curr) = if idx == then {
            (
                s.prev.saturating_sub(base.prev),
                s.curr.saturating_sub(base.curr),
            )
        } else if idx == then + 1 {
            (s.prev.saturating_sub(base.curr), s.curr)
        } else {
            (s.prev, s.curr)
        };
        SlidingCounterState {
            high: s.high,
            prev,
            curr,
        }
    }

    fn max_cost(&self) -> u64 {
        self.limit
    }
}
