//! The answer to one check against one limit.

use std::time::Duration;

use crate::clock::{Nanos, NANOS_PER_MS};

/// What a caller is told: the verdict and the numbers a
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
    /// A denial decided at `now` that lifts after `retry_after`; the budget
    /// is taken to be back then too.
    pub fn deny(limit: u64, retry_after: Duration, now: Nanos) -> Decision {
        let until = now.saturating_add(u64::try_from(retry_after.as_nanos()).unwrap_or(u64::MAX));
        Decision::deny_until(limit, retry_after, ms_ceil(until), now)
    }

    /// A denial decided at `now` whose reset time is already known (a
    /// denial remembered from its owner's answer).
    pub fn deny_until(limit: u64, retry_after: Duration, reset_at: u64, now: Nanos) -> Decision {
        Decision {
            allowed: false,
            limit,
            remaining: 0,
            retry_after,
            reset_at,
            delay: Duration::ZERO,
            at: now,
        }
    }

    /// An admission that no counter recorded (the owner could not be asked
    /// and the node fails open): shown as the full limit less this cost,
    /// resetting one window from now.
    pub fn uncounted(limit: u64, cost: u64, window: Duration, now: Nanos) -> Decision {
        let window_ns = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX);
        Decision {
            allowed: true,
            limit,
            remaining: limit.saturating_sub(cost),
            retry_after: Duration::ZERO,
            reset_at: ms_ceil(now.saturating_add(window_ns)),
            delay: Duration::ZERO,
            at: now,
        }
    }

    /// This admission, which asks the caller to wait `delay` before
    /// sending, as a denial for a caller that waits at most `max` (and
    /// `delay > max`): the request could pass once `delay - max` has gone
    /// by, if nothing else is scheduled meanwhile. Whoever turns it into a
    /// denial gives back what the admission consumed.
    pub fn beyond(&self, max: Duration) -> Decision {
        Decision {
            allowed: false,
            remaining: 0,
            retry_after: self.delay.saturating_sub(max),
            delay: Duration::ZERO,
            ..*self
        }
    }

    /// Whether an admission would make a caller that waits at most `max`
    /// wait longer.
    pub fn exceeds(&self, max: Option<Duration>) -> bool {
        self.allowed && max.is_some_and(|m| self.delay > m)
    }

    /// Retry-After in whole seconds: rounded up and at least 1 on a denial,
    /// because rounding down guarantees the first retry is rejected too.
    pub fn retry_after_secs(&self) -> u64 {
        if self.allowed {
            return 0;
        }
        ceil_secs(self.retry_after).max(1)
    }

    /// Retry-After in milliseconds, rounded up.
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

/// Whole milliseconds, rounded up; u64::MAX past it. A whole second is a
/// whole number of milliseconds, so only the sub-second nanoseconds are
/// rounded: in 32 bits, where dividing by a constant is a multiply, not
/// the 128-bit division (a library call) that dividing `as_nanos` takes,
/// twice per answer.
pub fn ceil_ms(d: Duration) -> u64 {
    let sub_ms = d.subsec_nanos().div_ceil(1_000_000);
    d.as_secs()
        .checked_mul(1000)
        .and_then(|ms| ms.checked_add(u64::from(sub_ms)))
        .unwrap_or(u64::MAX)
}

/// Unix ms from a nanosecond instant, rounded up so a reset is never early.
pub fn ms_ceil(at: Nanos) -> u64 {
    at.div_ceil(NANOS_PER_MS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::NANOS_PER_SEC;

    #[test]
    fn a_denial_resets_when_its_wait_ends_rounded_up_to_the_millisecond() {
        let now = 10 * NANOS_PER_SEC + 1;
        let d = Decision::deny(7, Duration::from_secs(2), now);
        assert!(!d.allowed);
        assert_eq!((d.limit, d.remaining, d.at), (7, 0, now));
        assert_eq!(d.reset_at, 12_001, "12 s + 1 ns is in the 12,001st ms");
        assert_eq!(d.retry_after_secs(), 2);
    }

    #[test]
    fn milliseconds_round_up_as_nanoseconds_divided_would() {
        let by_nanos = |d: Duration| {
            u64::try_from(d.as_nanos().div_ceil(u128::from(NANOS_PER_MS))).unwrap_or(u64::MAX)
        };
        let secs = [
            0,
            1,
            59,
            3_600,
            u64::MAX / 1000,
            u64::MAX / 1000 + 1,
            u64::MAX,
        ];
        let nanos = [
            0,
            1,
            999_999,
            1_000_000,
            1_000_001,
            500_000_000,
            999_999_999,
        ];
        for s in secs {
            for n in nanos {
                let d = Duration::new(s, n);
                assert_eq!(ceil_ms(d), by_nanos(d), "{d:?}");
            }
        }
    }

    #[test]
    fn an_uncounted_admission_shows_the_limit_less_its_cost() {
        let d = Decision::uncounted(10, 3, Duration::from_secs(60), 0);
        assert!(d.allowed);
        assert_eq!((d.remaining, d.reset_at), (7, 60_000));
        assert_eq!(
            Decision::uncounted(2, 3, Duration::from_secs(1), 0).remaining,
            0
        );
    }
}
