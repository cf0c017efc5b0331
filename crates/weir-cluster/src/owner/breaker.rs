//! One circuit breaker per owner: slow is not dead, and an owner counts as lost only on evidence.
//!
//! A missed deadline costs that one check; the breaker opens only on a
//! refused or reset connection (the process is gone), or after
//! [`TRIP_AFTER`] misses spanning at least [`TRIP_SPAN`] with no answer
//! between them, not even a late one (hung, stopped, cut off); for an owner
//! SWIM suspects, one miss and [`SUSPECT_SPAN`] of silence. While open,
//! checks for the owner skip the call (its keys go to the replica holder,
//! else the local fallback) except one probe every `probe_every`: the
//! half-open state. The probe's answer closes the breaker; its failure
//! opens it again.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use weir_core::Nanos;

use crate::stats::{FallbackCounts, FallbackStatus};

/// Missed deadlines that open a breaker, when they span at least
/// [`TRIP_SPAN`] and the owner answered nothing between them, in time or
/// late. A busy owner misses deadlines but its late answers keep coming,
/// and every one ends the run: only an owner silent for as long as a late
/// answer is waited for (hung, stopped, cut off) counts as lost. Opening
/// on less would let a replica holder stand in beside a live owner, and
/// both admit. (A dead process refuses connections, which opens at once.)
pub const TRIP_AFTER: u32 = 3;
/// The silence that opens a breaker of an owner SWIM suspects: SWIM has
/// heard nothing from it either, and one miss with nothing heard for a
/// quarter of a second agrees.
pub const SUSPECT_SPAN: Duration = Duration::from_millis(250);
pub const TRIP_SPAN: Duration = super::peers::LATE_WINDOW;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go to the owner.
    Closed,
    /// The owner is lost: its keys are decided elsewhere.
    Open,
    /// Lost, with one probe call in flight.
    HalfOpen,
}

impl BreakerState {
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Breaker {
    state: BreakerState,
    /// Missed deadlines since the last answer.
    misses: u32,
    /// When the run of misses began, or when it opened (for the log line
    /// that says how long it lasted).
    since: Nanos,
    probe_at: Nanos,
}

#[derive(Debug, Default)]
struct Owners {
    /// Only owners with a miss or an open breaker; the rest are closed.
    tracked: BTreeMap<String, Breaker>,
    /// Owners SWIM suspects now: a shorter silence is enough for them.
    suspects: std::collections::BTreeSet<String>,
    entered: u64,
    left: u64,
}

pub struct Breakers {
    owners: Mutex<Owners>,
    /// Owners tracked; read without the lock on every forwarded check, so a
    /// healthy cluster never takes it.
    tracked: AtomicUsize,
    probe_every: Nanos,
}

impl Breakers {
    pub fn new(probe_every: Duration) -> Self {
        Breakers {
            owners: Mutex::new(Owners::default()),
            tracked: AtomicUsize::new(0),
            probe_every: u64::try_from(probe_every.as_nanos()).unwrap_or(u64::MAX),
        }
    }

    fn update(&self, f: impl FnOnce(&mut Owners)) {
        let mut owners = self.owners.lock();
        f(&mut owners);
        self.tracked.store(owners.tracked.len(), Ordering::Relaxed);
    }

    /// Whether to call `owner` now: always while closed; while open, only
    /// as the one probe due every `probe_every`.
    pub fn admit(&self, owner: &str, now: Nanos) -> bool {
        if self.tracked.load(Ordering::Relaxed) == 0 {
            return true;
        }
        let mut owners = self.owners.lock();
        let Some(b) = owners.tracked.get_mut(owner) else {
            return true;
        };
        match b.state {
            BreakerState::Closed => true,
            BreakerState::HalfOpen => false,
            BreakerState::Open if now < b.probe_at => false,
            BreakerState::Open => {
                b.state = BreakerState::HalfOpen;
                b.probe_at = now.saturating_add(self.probe_every);
                true
            }
        }
    }

    /// `owner` answered: closed, misses forgiven.
    pub fn answered(&self, owner: &str, now: Nanos) {
        if self.tracked.load(Ordering::Relaxed) == 0 {
            return;
        }
        self.update(|o| {
            if let Some(b) = o.tracked.remove(owner) {
                if b.state != BreakerState::Closed {
                    o.left += 1;
                    let after = Duration::from_nanos(now.saturating_sub(b.since));
                    tracing::info!(owner, ?after, "owner answers again: breaker closed");
                }
            }
        });
    }

    /// `owner` missed a deadline: it opens after [`TRIP_AFTER`] in a row
    /// spanning [`TRIP_SPAN`].
    pub fn missed(&self, owner: &str, now: Nanos) {
        self.update(|o| {
            let (after, span) = if o.suspects.contains(owner) {
                (1, SUSPECT_SPAN)
            } else {
                (TRIP_AFTER, TRIP_SPAN)
            };
            let span = u64::try_from(span.as_nanos()).unwrap_or(u64::MAX);
            let b = o.tracked.entry(owner.to_string()).or_insert(Breaker {
                state: BreakerState::Closed,
                misses: 0,
                since: now,
                probe_at: now,
            });
            b.misses += 1;
            let trip = match b.state {
                BreakerState::Closed => b.misses >= after && now.saturating_sub(b.since) >= span,
                // The probe missed too.
                BreakerState::HalfOpen => true,
                BreakerState::Open => false,
            };
            if trip {
                Self::open(o, owner, now, self.probe_every, "missed deadlines in a row");
            }
        });
    }

    /// The owners SWIM suspects now (the others are cleared). Suspicion
    /// alone opens nothing: a suspected owner that still answers, even
    /// late, is deciding, and a copy standing in beside it would admit
    /// twice. It only shortens the silence that opens its breaker to
    /// [`SUSPECT_SPAN`].
    pub fn suspect(&self, owners: &[String]) {
        let mut o = self.owners.lock();
        o.suspects = owners.iter().cloned().collect();
    }

    /// Whether `owner` answers as far as this node knows: its breaker is
    /// closed and SWIM does not suspect it.
    pub fn trusted(&self, owner: &str) -> bool {
        let o = self.owners.lock();
        let closed = o
            .tracked
            .get(owner)
            .is_none_or(|b| b.state == BreakerState::Closed);
        closed && !o.suspects.contains(owner)
    }

    /// Evidence that `owner` is gone (refused or reset connection): open
    /// at once.
    pub fn lost(&self, owner: &str, now: Nanos, why: &str) {
        self.update(|o| Self::open(o, owner, now, self.probe_every, why));
    }

    fn open(o: &mut Owners, owner: &str, now: Nanos, probe_every: Nanos, why: &str) {
        let b = o.tracked.entry(owner.to_string()).or_insert(Breaker {
            state: BreakerState::Closed,
            misses: 0,
            since: now,
            probe_at: now,
        });
        b.probe_at = now.saturating_add(probe_every);
        if b.state == BreakerState::Closed {
            b.since = now;
            o.entered += 1;
            tracing::warn!(
                owner,
                reason = why,
                "owner lost: breaker open; its keys go to the replica holder or the fallback"
            );
        }
        b.state = BreakerState::Open;
    }

    /// Forgets owners that are no longer members: their keys have a new owner.
    pub fn retain_members(&self, is_member: impl Fn(&str) -> bool, now: Nanos) {
        if self.tracked.load(Ordering::Relaxed) == 0 {
            return;
        }
        self.update(|o| {
            let gone: Vec<String> = o
                .tracked
                .keys()
                .filter(|id| !is_member(id))
                .cloned()
                .collect();
            for id in gone {
                if let Some(b) = o.tracked.remove(&id) {
                    if b.state != BreakerState::Closed {
                        o.left += 1;
                        let after = Duration::from_nanos(now.saturating_sub(b.since));
                        tracing::info!(owner = %id, ?after, "lost owner left the ring");
                    }
                }
            }
        });
    }

    pub fn state_of(&self, owner: &str) -> BreakerState {
        if self.tracked.load(Ordering::Relaxed) == 0 {
            return BreakerState::Closed;
        }
        let owners = self.owners.lock();
        owners
            .tracked
            .get(owner)
            .map_or(BreakerState::Closed, |b| b.state)
    }

    pub fn counts(&self) -> FallbackCounts {
        let owners = self.owners.lock();
        FallbackCounts {
            entered: owners.entered,
            left: owners.left,
            active: owners
                .tracked
                .values()
                .filter(|b| b.state != BreakerState::Closed)
                .count() as u64,
        }
    }

    pub fn status(&self) -> FallbackStatus {
        let owners = self.owners.lock();
        let open: Vec<String> = owners
            .tracked
            .iter()
            .filter(|(_, b)| b.state != BreakerState::Closed)
            .map(|(id, _)| id.clone())
            .collect();
        FallbackStatus {
            active: !open.is_empty(),
            owners: open,
            entered_total: owners.entered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    #[test]
    fn a_burst_of_misses_is_not_a_lost_owner_but_a_silent_span_of_them_is() {
        let span = u64::try_from(TRIP_SPAN.as_nanos()).unwrap();
        let b = Breakers::new(Duration::from_millis(200));
        for t in 0..10 {
            b.missed("o", t * MS);
        }
        assert_eq!(
            b.state_of("o"),
            BreakerState::Closed,
            "ten misses in 10 ms: slow, not dead"
        );
        b.answered("o", 20 * MS);
        b.missed("o", 30 * MS);
        b.missed("o", 30 * MS + span - MS);
        assert_eq!(
            b.state_of("o"),
            BreakerState::Closed,
            "an answer forgave the burst"
        );
        b.missed("o", 30 * MS + span - 1);
        assert_eq!(
            b.state_of("o"),
            BreakerState::Closed,
            "just short of the span"
        );
        b.missed("o", 30 * MS + span);
        assert_eq!(
            b.state_of("o"),
            BreakerState::Open,
            "the span and three misses"
        );
        assert_eq!(b.status().owners, ["o"]);
    }

    #[test]
    fn a_suspected_owner_is_lost_after_a_short_silence_not_at_once() {
        let b = Breakers::new(Duration::from_millis(200));
        b.suspect(&["o".to_string()]);
        assert_eq!(b.state_of("o"), BreakerState::Closed, "suspicion alone");
        b.missed("o", 0);
        b.answered("o", 100 * MS);
        b.missed("o", 200 * MS);
        b.missed("o", 449 * MS);
        assert_eq!(
            b.state_of("o"),
            BreakerState::Closed,
            "heard 349 ms ago at most"
        );
        b.missed("o", 450 * MS);
        assert_eq!(
            b.state_of("o"),
            BreakerState::Open,
            "a quarter second of silence"
        );
        // No longer suspected: the long span applies again.
        let b = Breakers::new(Duration::from_millis(200));
        b.suspect(&["o".to_string()]);
        b.suspect(&[]);
        b.missed("o", 0);
        b.missed("o", 250 * MS);
        b.missed("o", 500 * MS);
        assert_eq!(b.state_of("o"), BreakerState::Closed);
    }

    #[test]
    fn an_open_breaker_lets_one_probe_through_per_interval() {
        let b = Breakers::new(Duration::from_millis(200));
        assert!(b.admit("o", 0), "unknown owners are closed");
        b.lost("o", 0, "connection refused");
        assert!(!b.admit("o", 100 * MS));
        assert!(b.admit("o", 200 * MS), "the probe");
        assert_eq!(b.state_of("o"), BreakerState::HalfOpen);
        assert!(!b.admit("o", 201 * MS), "one probe at a time");
        b.missed("o", 210 * MS);
        assert_eq!(
            b.state_of("o"),
            BreakerState::Open,
            "a missed probe opens it again"
        );
        assert!(b.admit("o", 410 * MS));
        b.answered("o", 411 * MS);
        assert_eq!(b.state_of("o"), BreakerState::Closed);
        let c = b.counts();
        assert_eq!((c.entered, c.left, c.active), (1, 1, 0));
    }

    #[test]
    fn an_owner_that_left_the_ring_is_forgotten() {
        let b = Breakers::new(Duration::from_millis(200));
        b.lost("gone", 0, "suspect");
        b.retain_members(|id| id != "gone", 1);
        assert_eq!(b.state_of("gone"), BreakerState::Closed);
        assert!(!b.status().active);
    }
}
