//! What a run measured: verdicts, call latencies in HDR histograms, and the CPU time spent.

use std::ops::AddAssign;
use std::time::Duration;

use hdrhistogram::Histogram;

use super::machine::CpuUsed;

/// What one call decided.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub checks: u64,
    pub allowed: u64,
    pub errors: u64,
}

impl Tally {
    pub const ERROR: Tally = Tally {
        checks: 0,
        allowed: 0,
        errors: 1,
    };

    /// One check answered over HTTP: 200 admits, 429 denies, anything else
    /// is an error.
    pub fn of_status(status: u16) -> Tally {
        match status {
            200 => Tally {
                checks: 1,
                allowed: 1,
                errors: 0,
            },
            429 => Tally {
                checks: 1,
                allowed: 0,
                errors: 0,
            },
            _ => Tally::ERROR,
        }
    }
}

impl AddAssign for Tally {
    fn add_assign(&mut self, t: Tally) {
        self.checks += t.checks;
        self.allowed += t.allowed;
        self.errors += t.errors;
    }
}

/// 1 us to 60 s at 3 significant digits: every latency a bounded run can see.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1_000, 60_000_000_000, 3).expect("histogram bounds")
}

/// A latency in the histogram's unit, clamped to its lowest bound.
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1_000)
}

/// Calls, their verdicts and their latencies, from when each was sent.
pub struct Totals {
    pub calls: u64,
    pub tally: Tally,
    pub latency: Histogram<u64>,
}

impl Default for Totals {
    fn default() -> Totals {
        Totals {
            calls: 0,
            tally: Tally::default(),
            latency: histogram(),
        }
    }
}

impl Totals {
    pub fn record(&mut self, latency: Duration, t: Tally) {
        self.latency.record(nanos(latency)).ok();
        self.calls += 1;
        self.tally += t;
    }

    /// Adds another worker's totals.
    pub fn merge(&mut self, other: Totals) {
        self.latency.add(other.latency).expect("same bounds");
        self.calls += other.calls;
        self.tally += other.tally;
    }
}

pub struct Measured {
    pub totals: Totals,
    pub elapsed: Duration,
    /// Per call, from when it was due (open-loop runs only).
    pub from_due: Option<Histogram<u64>>,
    pub cpu: CpuUsed,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_200_and_429_count_as_checks() {
        let mut t = Tally::default();
        for status in [200, 429, 503, 0] {
            t += Tally::of_status(status);
        }
        assert_eq!(
            t,
            Tally {
                checks: 2,
                allowed: 1,
                errors: 2
            }
        );
    }

    #[test]
    fn merged_totals_keep_every_call_and_latencies_are_clamped_to_the_bounds() {
        let mut a = Totals::default();
        a.record(Duration::from_nanos(10), Tally::of_status(200));
        let mut b = Totals::default();
        b.record(Duration::from_millis(2), Tally::of_status(429));
        a.merge(b);
        assert_eq!((a.calls, a.latency.len()), (2, 2));
        assert!(a.latency.equivalent(a.latency.max(), 2_000_000));
        assert_eq!((a.tally.checks, a.tally.allowed), (2, 1));
        assert_eq!(nanos(Duration::from_nanos(10)), 1_000);
        assert_eq!(nanos(Duration::MAX), u64::MAX);
    }
}
