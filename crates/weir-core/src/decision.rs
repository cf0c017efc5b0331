//! The answer to one check against one limit.

use std::time::Duration;

use crate::clock::{Nanos, NANOS_PER_MS};

/// What a caller is told (seed section 4): the verdict and the numbers a
/// well-behaved client needs to pace itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// The ceiling for this key on this rule.
    pub limit: u64,
    /// Budget left after this request.
    pub remaining: u64,
    /// Zero when allowed; otherwise the exact wait before a retry of the same
    /// cost can succeed (shown to clients rounded up).
    pub retry_after: Duration,
    /// Unix milliseconds at which the budget is fully refilled.
    pub reset_at: u64,
    /// Scheduling leaky bucket only: how long the caller must wait before
    /// sending an admitted request. Zero everywhere else.
    pub delay: Duration,
    /// The owner's clock reading when it decided; a refund names it so the
    /// budget goes back to the window it came from.
    pub at: Nanos,
}

impl Decision {
    /// Retry-After in whole seconds: rounded up and at least 1 on a denial,
    /// because rounding down guarantees the first retry is rejected too (seed 9).
    pub fn retry_after_secs(&self) -> u64 {
        if self.allowed {
            return 0;
        }
        ceil_secs(self.retry_after).max(1)
    }

    pub fn retry_after_ms(&self) -> u64 {
        ceil_ms(self.retry_after)
    }

    /// A scheduling leaky bucket's wait in whole milliseconds, rounded up:
    /// sending earlier would be refused.
    pub fn delay_ms(&self) -> u64 {
        ceil_ms(self.delay)
    }

    /// Seconds from the decision until the budget is full, rounded up.
    pub fn reset_after_secs(&self) -> u64 {
        let at_ms = self.at / NANOS_PER_MS;
        self.reset_at.saturating_sub(at_ms).div_ceil(1000)
    }
}

pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

pub(crate) fn ceil_ms(d: Duration) -> u64 {
    let ns = d.as_nanos();
    u64::try_from(ns.div_ceil(NANOS_PER_MS as u128)).unwrap_or(u64::MAX)
}

/// Unix ms from a nanosecond instant, rounded up so a reset is never early.
pub(crate) fn ms_ceil(at: Nanos) -> u64 {
    at.div_ceil(NANOS_PER_MS)
}
