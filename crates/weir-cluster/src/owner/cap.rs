//! One node-wide bucket that every admission decided without an owner draws from, so an outage is never unlimited.

use std::time::Duration;

use parking_lot::Mutex;
use weir_core::{Nanos, NANOS_PER_SEC};

/// A token bucket of `per_sec` tokens refilled at `per_sec` a second; a
/// rate of 0 is no cap.
pub struct Cap {
    per_sec: u64,
    /// Tokens left and when they were counted.
    state: Mutex<(f64, Nanos)>,
}

impl Cap {
    pub fn new(per_sec: u64) -> Self {
        Cap {
            per_sec,
            state: Mutex::new((per_sec as f64, 0)),
        }
    }

    pub fn per_sec(&self) -> u64 {
        self.per_sec
    }

    /// Takes `cost` at `now`: None when there was room, else how long
    /// until there is.
    pub fn take(&self, cost: u64, now: Nanos) -> Option<Duration> {
        if self.per_sec == 0 {
            return None;
        }
        let rate = self.per_sec as f64;
        let mut s = self.state.lock();
        let (tokens, at) = *s;
        let elapsed = now.saturating_sub(at) as f64 / NANOS_PER_SEC as f64;
        let tokens = (tokens + elapsed * rate).min(rate);
        let cost = cost as f64;
        if tokens >= cost {
            *s = (tokens - cost, now.max(at));
            return None;
        }
        *s = (tokens, now.max(at));
        Some(Duration::from_secs_f64((cost - tokens) / rate))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cap_admits_a_second_of_its_rate_then_its_rate() {
        let c = Cap::new(100);
        let t0 = 10 * NANOS_PER_SEC;
        let first = (0..1_000).filter(|_| c.take(1, t0).is_none()).count();
        assert_eq!(first, 100, "a full bucket, then nothing");
        let wait = c.take(1, t0).expect("empty");
        assert!(wait <= Duration::from_millis(10), "{wait:?}");
        let later = (0..1_000)
            .filter(|_| c.take(1, t0 + NANOS_PER_SEC / 2).is_none())
            .count();
        assert_eq!(later, 50, "half a second refills half");
        assert!(Cap::new(0).take(1_000_000, t0).is_none(), "0 is no cap");
    }
}
