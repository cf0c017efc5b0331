//! What the layer did, counted, so a service can export it with its own metrics.

use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters shared by every clone of one layer.
#[derive(Debug, Default)]
pub struct LayerStats {
    allowed: AtomicU64,
    denied: AtomicU64,
    invalid: AtomicU64,
    unavailable_open: AtomicU64,
    unavailable_closed: AtomicU64,
    delayed: AtomicU64,
}

/// One reading of [`LayerStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatsSnapshot {
    /// Admitted by the limiter and passed to the service.
    pub allowed: u64,
    /// Refused with 429; the service never saw them.
    pub denied: u64,
    /// Refused with 400 (or 500 for a missing peer address).
    pub invalid: u64,
    /// The limiter could not decide and the request went through anyway.
    pub unavailable_open: u64,
    /// The limiter could not decide and the request got a 503.
    pub unavailable_closed: u64,
    /// Of `allowed`, those a shaping rule scheduled: held for their delay
    /// before the service saw them.
    pub delayed: u64,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Outcome {
    Allowed,
    Denied,
    Invalid,
    UnavailableOpen,
    UnavailableClosed,
}

impl LayerStats {
    pub(crate) fn record(&self, outcome: Outcome) {
        let c = match outcome {
            Outcome::Allowed => &self.allowed,
            Outcome::Denied => &self.denied,
            Outcome::Invalid => &self.invalid,
            Outcome::UnavailableOpen => &self.unavailable_open,
            Outcome::UnavailableClosed => &self.unavailable_closed,
        };
        // Relaxed: independent counters, read only for reporting.
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// An admitted request was held for its delay.
    pub(crate) fn delayed(&self) {
        self.delayed.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            allowed: self.allowed.load(Ordering::Relaxed),
            denied: self.denied.load(Ordering::Relaxed),
            invalid: self.invalid.load(Ordering::Relaxed),
            unavailable_open: self.unavailable_open.load(Ordering::Relaxed),
            unavailable_closed: self.unavailable_closed.load(Ordering::Relaxed),
            delayed: self.delayed.load(Ordering::Relaxed),
        }
    }
}
