//! Token bucket (docs/algorithms.md): capacity C, refill r = limit/window, refilled lazily on read.
//!
//! `tokens = min(C, tokens + (now - last) * r)` at the moment a request
//! arrives; no timer per key. Over any interval T it admits at most
//! `C + r*T`: 200 in 60 s at C = 100, r = 100/60 s, the first 100 at once.

use serde::{Deserialize, Serialize};

use super::{nanos_f64, Algorithm};
use crate::clock::Nanos;
use crate::decision::{ms_ceil, Decision};

/// Slack for float rounding in the refill (`0.6 s * 100/60 s` can land a hair
/// under 1.0); a billionth of a token never changes a verdict that matters.
const EPS: f64 = 1e-9;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenBucket {
    pub(crate) capacity: u64,
    pub(crate) limit: u64,
    pub(crate) window: Nanos,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TokenBucketState {
    tokens: f64,
    /// Highest time seen. Refill uses `now - ts` saturating, so a clock that
    /// steps back hands out nothing instead of negative tokens.
    ts: Nanos,
}

impl TokenBucket {
    fn refill(&self, s: &mut TokenBucketState, now: Nanos) {
        if now > s.ts {
            // Multiply before dividing: exact for the tests' 100 per 60 s.
            let dripped = nanos_f64(now - s.ts) * self.limit as f64 / self.window as f64;
            s.tokens = (s.tokens + dripped).min(self.capacity as f64);
            s.ts = now;
        }
    }

    /// Nanoseconds for `tokens` to drip in.
    fn time_for(&self, tokens: f64) -> Nanos {
        (tokens.max(0.0) * self.window as f64 / self.limit as f64).ceil() as Nanos
    }
}

impl Algorithm for TokenBucket {
    type State = TokenBucketState;

    fn fresh(&self) -> TokenBucketState {
        TokenBucketState {
            tokens: self.capacity as f64,
            ts: 0,
        }
    }

    fn decide(&self, s: &mut TokenBucketState, now: Nanos, cost: u64) -> Decision {
        self.refill(s, now);
        let cost_f = cost as f64;
        let allowed = s.tokens + EPS >= cost_f;
        if allowed {
            s.tokens = (s.tokens - cost_f).max(0.0);
        }
        let retry = if allowed {
            0
        } else {
            self.time_for(cost_f - s.tokens)
        };
        let now = now.max(s.ts);
        Decision {
            allowed,
            limit: self.capacity,
            remaining: (s.tokens + EPS).floor() as u64,
            retry_after: std::time::Duration::from_nanos(retry),
            reset_at: ms_ceil(now + self.time_for(self.capacity as f64 - s.tokens)),
            delay: std::time::Duration::ZERO,
            at: now,
        }
    }

    fn refund(&self, s: &mut TokenBucketState, _at: Nanos, cost: u64) {
        s.tokens = (s.tokens + cost as f64).min(self.capacity as f64);
    }

    /// Tokens back, up to the capacity: a refill first would add the same
    /// drip under the same cap.
    fn give_back(&self, s: &mut TokenBucketState, cost: u64) {
        s.tokens = (s.tokens + cost as f64).min(self.capacity as f64);
    }

    fn is_idle(&self, s: &TokenBucketState, now: Nanos) -> bool {
        let mut probe = *s;
        self.refill(&mut probe, now);
        probe.tokens + EPS >= self.capacity as f64
    }

    fn rest_at(&self, s: &TokenBucketState) -> Nanos {
        s.ts.saturating_add(self.time_for(self.capacity as f64 - s.tokens))
    }

    fn merge(&self, into: &mut TokenBucketState, other: TokenBucketState, now: Nanos) {
        let mut other = other;
        self.refill(into, now);
        self.refill(&mut other, now);
        // Spent budgets add: (C - a) + (C - b) spent leaves a + b - C, down
        // to the one bucket of debt a charge may leave, which must carry
        // over: floored at zero, a handed-over debt was admitted again.
        let capacity = self.capacity as f64;
        into.tokens = (into.tokens + other.tokens - capacity).max(-capacity);
        into.ts = into.ts.max(other.ts);
    }

    fn charge(&self, s: &mut TokenBucketState, now: Nanos, cost: u64) {
        self.refill(s, now);
        // Tokens may go below zero, down to one bucket of debt: the refill
        // pays an over-admission back before anything is admitted again.
        s.tokens = (s.tokens - cost as f64).max(-(self.capacity as f64));
        s.ts = s.ts.max(now);
    }

    fn since(
        &self,
        s: &TokenBucketState,
        base: &TokenBucketState,
        _now: Nanos,
    ) -> TokenBucketState {
        let mut then = *base;
        self.refill(&mut then, s.ts);
        let spent = (then.tokens - s.tokens).max(0.0);
        TokenBucketState {
            tokens: self.capacity as f64 - spent,
            ts: s.ts,
        }
    }

    fn admit(&self, s: TokenBucketState, now: Nanos) -> Option<TokenBucketState> {
        // Down to one bucket of debt: what `charge` leaves after admissions
        // decided elsewhere.
        let capacity = self.capacity as f64;
        let valid = s.tokens.is_finite() && (-capacity..=capacity + EPS).contains(&s.tokens);
        valid.then(|| TokenBucketState {
            tokens: s.tokens.min(self.capacity as f64),
            ts: s.ts.min(now),
        })
    }

    fn max_cost(&self) -> u64 {
        self.capacity
    }
}
