//! Leaky bucket in its GCRA counter form (docs/algorithms.md): one timestamp of state.
//!
//! Emission interval `T = window / limit`; `tat` is the theoretical arrival
//! time, the instant the bucket would be empty again. A request of cost n
//! moves it to `max(tat, now) + n*T`. It conforms while that stays within
//! `now + burst*T`: with burst 1 (the default) requests must be at least T
//! apart, the perfectly smooth output of a queueing leaky bucket.
//!
//! With `queue = q` the bucket schedules instead of rejecting: a request that
//! does not conform yet is admitted while the backlog ahead of it is at most
//! q requests, and told to wait `delay` until its conforming instant. Nothing
//! is held in memory, so a queue of held requests becomes 8 bytes per key;
//! the caller does the waiting. Send times are then spaced T apart, so the
//! output never exceeds the rate.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Algorithm;
use crate::clock::Nanos;
use crate::decision::{ms_ceil, Decision};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeakyBucket {
    /// Emission interval in ns, rounded up so the rate is never exceeded.
    pub(crate) interval: Nanos,
    pub(crate) burst: u64,
    pub(crate) queue: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LeakyBucketState {
    tat: Nanos,
    /// When the latest admission was decided, or [`NO_REFUND`]. A refund
    /// moves `tat` back only for that admission: one decided earlier has
    /// checks scheduled behind it, and moving `tat` under them would hand
    /// their slots out a second time.
    last: Nanos,
}

/// `last` when no admission can be refunded: none yet, two at one instant
/// (which of them is refunded cannot be told), or a state merged from two.
const NO_REFUND: Nanos = Nanos::MAX;

impl LeakyBucket {
    fn span(&self, n: u64) -> Nanos {
        n.saturating_mul(self.interval)
    }
}

impl Algorithm for LeakyBucket {
    type State = LeakyBucketState;

    fn fresh(&self) -> LeakyBucketState {
        LeakyBucketState {
            tat: 0,
            last: NO_REFUND,
        }
    }

    fn decide(&self, s: &mut LeakyBucketState, now: Nanos, cost: u64) -> Decision {
        let new_tat = s.tat.max(now).saturating_add(self.span(cost));
        let horizon = now.saturating_add(self.span(self.burst + self.queue));
        let allowed = new_tat <= horizon;
        let (remaining, retry, delay) = if allowed {
            s.tat = new_tat;
            s.last = if s.last == now { NO_REFUND } else { now };
            // The request conforms once `tat - burst*T` is reached.
            let conform_at = new_tat.saturating_sub(self.span(self.burst));
            let remaining = (horizon - new_tat) / self.interval;
            (remaining, 0, conform_at.saturating_sub(now))
        } else {
            let remaining = horizon.saturating_sub(s.tat.max(now)) / self.interval;
            (remaining, new_tat - horizon, 0)
        };
        Decision {
            allowed,
            limit: self.burst + self.queue,
            remaining,
            retry_after: Duration::from_nanos(retry),
            reset_at: ms_ceil(s.tat.max(now)),
            delay: Duration::from_nanos(delay),
            at: now,
        }
    }

    fn refund(&self, s: &mut LeakyBucketState, at: Nanos, cost: u64) {
        if at == s.last {
            s.tat = s.tat.saturating_sub(self.span(cost));
            s.last = NO_REFUND;
        }
    }

    /// The theoretical arrival time moves back `cost` intervals. A `tat`
    /// that lands before `now` reads as an empty bucket (`decide` takes
    /// `tat.max(now)`), so the budget never grows past the full burst.
    fn give_back(&self, s: &mut LeakyBucketState, cost: u64) {
        s.tat = s.tat.saturating_sub(self.span(cost));
    }

    fn is_idle(&self, s: &LeakyBucketState, now: Nanos) -> bool {
        s.tat <= now
    }

    fn rest_at(&self, s: &LeakyBucketState) -> Nanos {
        s.tat
    }

    fn merge(&self, into: &mut LeakyBucketState, other: LeakyBucketState, now: Nanos) {
        // Both backlogs must drain: their lengths past `now` add.
        let backlog = into
            .tat
            .saturating_sub(now)
            .saturating_add(other.tat.saturating_sub(now));
        into.tat = now.saturating_add(backlog);
        into.last = NO_REFUND;
    }

    /// A backlog is at most `burst + queue` intervals past the decision
    /// that made it; a longer one is cut to that.
    fn admit(&self, s: LeakyBucketState, now: Nanos) -> Option<LeakyBucketState> {
        let most = now.saturating_add(self.span(self.burst + self.queue));
        Some(LeakyBucketState {
            tat: s.tat.min(most),
            last: NO_REFUND,
        })
    }

    fn charge(&self, s: &mut LeakyBucketState, now: Nanos, cost: u64) {
        s.tat = s.tat.max(now).saturating_add(self.span(cost));
    }

    fn since(&self, s: &LeakyBucketState, base: &LeakyBucketState, now: Nanos) -> LeakyBucketState {
        let backlog = s.tat.saturating_sub(base.tat.max(now));
        LeakyBucketState {
            tat: now + backlog,
            last: NO_REFUND,
        }
    }

    fn max_cost(&self) -> u64 {
        self.burst + self.queue
    }

    fn can_delay(&self) -> bool {
        self.queue > 0
    }
}
