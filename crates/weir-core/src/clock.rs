//! Time as the algorithms see it: unix-epoch nanoseconds from an injected clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Nanoseconds since the unix epoch. u64 lasts until the year 2554.
pub type Nanos = u64;

pub const NANOS_PER_MS: u64 = 1_000_000;
pub const NANOS_PER_SEC: u64 = 1_000_000_000;

/// The only source of time the algorithms read.
///
/// Window algorithms need epoch-aligned time so every node agrees where a
/// window starts; the token bucket needs time that never steps
/// backwards. [`SystemClock`] gives both; each algorithm also
/// clamps per key, so a clock that does step back freezes a window instead of
/// resetting it.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Nanos;
}

/// Wall time read once at start, advanced by the monotonic clock afterwards.
///
/// An NTP step after start cannot move it, and at start it agrees with every
/// other NTP-disciplined node to within their skew, which is what window
/// boundaries need.
#[derive(Debug, Clone)]
pub struct SystemClock {
    anchor_wall: Nanos,
    anchor_mono: Instant,
}

impl SystemClock {
    pub fn new() -> Self {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        SystemClock {
            anchor_wall: u64::try_from(wall.as_nanos()).unwrap_or(u64::MAX),
            anchor_mono: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Nanos {
        let elapsed = u64::try_from(self.anchor_mono.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.anchor_wall.saturating_add(elapsed)
    }
}

/// A clock that moves only when a test says so, forwards or backwards.
///
/// ```
/// use std::time::Duration;
/// use weir_core::{Clock, FakeClock, NANOS_PER_SEC};
///
/// let clock = FakeClock::at_secs(100.0);
/// clock.advance(Duration::from_millis(1500));
/// assert_eq!(clock.now(), 101 * NANOS_PER_SEC + NANOS_PER_SEC / 2);
/// ```
#[derive(Debug, Default)]
pub struct FakeClock {
    now: AtomicU64,
}

impl FakeClock {
    pub fn new(start: Nanos) -> Self {
        FakeClock {
            now: AtomicU64::new(start),
        }
    }

    pub fn at_secs(secs: f64) -> Self {
        Self::new((secs * NANOS_PER_SEC as f64) as Nanos)
    }

    pub fn set(&self, now: Nanos) {
        self.now.store(now, Ordering::SeqCst);
    }

    pub fn advance(&self, by: Duration) {
        self.now.fetch_add(
            u64::try_from(by.as_nanos()).unwrap_or(u64::MAX),
            Ordering::SeqCst,
        );
    }

    /// Steps the clock back, as an NTP correction does.
    pub fn rewind(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        let _ = self
            .now
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                Some(n.saturating_sub(by))
            });
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Nanos {
        self.now.load(Ordering::SeqCst)
    }
}

impl<C: Clock> Clock for std::sync::Arc<C> {
    fn now(&self) -> Nanos {
        (**self).now()
    }
}
