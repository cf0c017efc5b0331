//! The five algorithms: pure functions of (state, now, cost) -> decision.
//!
//! Each lives in its own file with its derivation. A
//! [`Policy`] is one validated, configured algorithm; the store applies it to
//! a key's [`State`] under that key's lock.

mod fixed_window;
mod leaky_bucket;
mod sliding_counter;
mod sliding_log;
mod token_bucket;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use fixed_window::{FixedWindow, FixedWindowState};
pub use leaky_bucket::{LeakyBucket, LeakyBucketState};
pub use sliding_counter::{SlidingCounter, SlidingCounterState};
pub use sliding_log::{SlidingLog, SlidingLogState};
pub use token_bucket::{TokenBucket, TokenBucketState};

use crate::clock::Nanos;
use crate::decision::Decision;

/// A refund's `at` that names no decision: `cost` comes back from what
/// the key has spent now (`Algorithm::give_back`), as an Envoy
/// descriptor with `is_negative_hits` asks. No decision is taken at the
/// last nanosecond of the clock's range.
pub const REFUND_SPENT: Nanos = Nanos::MAX;

/// A refund of a decision taken at `at`, or of what is spent when `at` is
/// [`REFUND_SPENT`]: the one place the two meet.
pub(crate) fn refund_at<A: Algorithm>(a: &A, s: &mut A::State, at: Nanos, cost: u64) {
    if at == REFUND_SPENT {
        a.give_back(s, cost);
    } else {
        a.refund(s, at, cost);
    }
}

/// Largest limit any rule may carry (a trillion per window).
pub const MAX_LIMIT: u64 = 1_000_000_000_000;
/// Largest limit of a sliding_window_log rule. The log keeps one entry per
/// admitted request, so this is the per-key memory ceiling: 16 B x 100,000 =
/// 1.6 MB. Larger limits are what the counter algorithms are for.
pub const MAX_LOG_LIMIT: u64 = 100_000;
/// Longest window: a little over a year, enough for yearly quotas.
pub const MAX_WINDOW: Duration = Duration::from_secs(400 * 24 * 3600);

/// One algorithm's arithmetic. Implementations are pure: everything they
/// know arrives as arguments, which is what lets one store, the tests and a
/// peer's handoff all drive the same code.
pub(crate) trait Algorithm {
    type State: Clone;
    /// The state of a key never seen, equal to one idle long enough.
    fn fresh(&self) -> Self::State;
    /// Decides a request of `cost` (1 <= cost <= max_cost) at `now`; consumes
    /// budget only when it admits.
    fn decide(&self, s: &mut Self::State, now: Nanos, cost: u64) -> Decision;
    /// Gives back `cost` consumed by a decision taken at `at`.
    fn refund(&self, s: &mut Self::State, at: Nanos, cost: u64);
    /// Gives back `cost` of what the state has spent, tied to no decision
    /// (an Envoy refund, [`REFUND_SPENT`]): never below nothing spent, so
    /// never above the full budget. No `now` is needed: each algorithm's
    /// next read brings the state up to date, and what it ages out first
    /// is given back no more than it would have been.
    fn give_back(&self, s: &mut Self::State, cost: u64);
    /// True once the state says no more than a fresh one, so dropping it
    /// loses nothing (a TTL, computed instead of set).
    fn is_idle(&self, s: &Self::State, now: Nanos) -> bool;
    /// The instant from which the state says no more than a fresh one if
    /// no request comes first: `is_idle` holds from then on.
    fn rest_at(&self, s: &Self::State) -> Nanos;
    /// Folds in the state another node held for the same key; spent budgets
    /// add, so a merge never hands out a fresh budget.
    fn merge(&self, into: &mut Self::State, other: Self::State, now: Nanos);
    /// Records `cost` admitted elsewhere (a gateway deciding without its
    /// owner, a replica standing in for it) whatever the limit, so the
    /// state says what was really spent. A state that cannot hold more
    /// than its limit is left full.
    fn charge(&self, s: &mut Self::State, now: Nanos, cost: u64);
    /// What `s` spent beyond `base`, an earlier snapshot of the same key:
    /// the part a node that stood in for an owner hands back to it, so the
    /// owner does not count `base` twice.
    fn since(&self, s: &Self::State, base: &Self::State, now: Nanos) -> Self::State;
    /// What `s` spent beyond `base` as a state of its own, merged into a
    /// fresh one as a handed-over state is: what settling `s` against
    /// `base` leaves. None when nothing was spent beyond it.
    fn beyond(&self, s: &Self::State, base: &Self::State, now: Nanos) -> Option<Self::State> {
        let mut kept = self.fresh();
        self.merge(&mut kept, self.since(s, base, now), now);
        (!self.is_idle(&kept, now)).then_some(kept)
    }
    /// A state received from a peer, checked against the invariants this
    /// algorithm keeps: None when no honest node could hold it (a count
    /// above the limit, a log whose total is not the sum of its entries,
    /// tokens that are not a number). Times ahead of `now` are taken as
    /// `now`, so neither a peer's clock skew nor a forged far-future time
    /// can hold a key past the window it would have held it anyway.
    fn admit(&self, s: Self::State, now: Nanos) -> Option<Self::State>;
    /// The largest cost that can ever succeed.
    fn max_cost(&self) -> u64;
    /// Whether an admission can come with a delay (a scheduling leaky
    /// bucket); a store keeps a copy of the state before deciding only then.
    fn can_delay(&self) -> bool {
        false
    }
}

pub(crate) fn nanos_f64(n: Nanos) -> f64 {
    n as f64
}

/// The algorithm names used in rules files and on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlgorithmKind {
    TokenBucket,
    LeakyBucket,
    FixedWindow,
    SlidingWindowLog,
    SlidingWindowCounter,
}

impl AlgorithmKind {
    pub const ALL: [AlgorithmKind; 5] = [
        AlgorithmKind::TokenBucket,
        AlgorithmKind::LeakyBucket,
        AlgorithmKind::FixedWindow,
        AlgorithmKind::SlidingWindowLog,
        AlgorithmKind::SlidingWindowCounter,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AlgorithmKind::TokenBucket => "token_bucket",
            AlgorithmKind::LeakyBucket => "leaky_bucket",
            AlgorithmKind::FixedWindow => "fixed_window",
            AlgorithmKind::SlidingWindowLog => "sliding_window_log",
            AlgorithmKind::SlidingWindowCounter => "sliding_window_counter",
        }
    }
}

impl fmt::Display for AlgorithmKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AlgorithmKind {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        AlgorithmKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or(())
    }
}

/// A parameter that cannot configure an algorithm. The field is named as it
/// is in a rules file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamError {
    pub field: &'static str,
    pub reason: String,
}

/// One configured algorithm, valid by construction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Policy {
    TokenBucket(TokenBucket),
    LeakyBucket(LeakyBucket),
    FixedWindow(FixedWindow),
    SlidingLog(SlidingLog),
    SlidingCounter(SlidingCounter),
}

impl Policy {
    /// Builds a policy, refusing every parameter that would make it admit
    /// without limit or never admit: zero windows and limits, bursts below 1,
    /// and options the algorithm does not have.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_core::{AlgorithmKind, Policy, NANOS_PER_SEC};
    ///
    /// // 10 a second, bursts of up to 20.
    /// let policy = Policy::new(AlgorithmKind::TokenBucket, 10, Duration::from_secs(1), Some(20), None)?;
    /// let mut state = policy.fresh();
    /// let now = 5 * NANOS_PER_SEC;
    /// let d = policy.decide(&mut state, now, 20).unwrap();
    /// assert!(d.allowed && d.remaining == 0);
    /// let d = policy.decide(&mut state, now, 1).unwrap();
    /// assert_eq!((d.allowed, d.retry_after), (false, Duration::from_millis(100)));
    ///
    /// let err = Policy::new(AlgorithmKind::FixedWindow, 0, Duration::from_secs(1), None, None).unwrap_err();
    /// assert_eq!(err.field, "limit");
    /// # Ok::<(), weir_core::algorithm::ParamError>(())
    /// ```
    pub fn new(
        kind: AlgorithmKind,
        limit: u64,
        window: Duration,
        burst: Option<u64>,
        queue: Option<u64>,
    ) -> Result<Policy, ParamError> {
        let err = |field, reason: &str| {
            Err(ParamError {
                field,
                reason: reason.to_string(),
            })
        };
        if limit == 0 {
            return err("limit", "must be at least 1");
        }
        if limit > MAX_LIMIT {
            return err("limit", "must be at most 1000000000000");
        }
        if window.is_zero() {
            return err("window", "must be longer than zero");
        }
        if window > MAX_WINDOW {
            return err("window", "must be at most 400 days");
        }
        let window_ns = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX);
        if burst == Some(0) {
            return err("burst", "must be at least 1");
        }
        if burst.is_some_and(|b| b > MAX_LIMIT) {
            return err("burst", "must be at most 1000000000000");
        }
        let takes_burst = matches!(
            kind,
            AlgorithmKind::TokenBucket | AlgorithmKind::LeakyBucket
        );
        if burst.is_some() && !takes_burst {
            return err("burst", "applies only to token_bucket and leaky_bucket");
        }
        if queue.is_some() && kind != AlgorithmKind::LeakyBucket {
            return err("queue", "applies only to leaky_bucket");
        }
        if queue.is_some_and(|q| q > MAX_LIMIT) {
            return err("queue", "must be at most 1000000000000");
        }
        Ok(match kind {
            AlgorithmKind::TokenBucket => Policy::TokenBucket(TokenBucket {
                capacity: burst.unwrap_or(limit),
                limit,
                window: window_ns,
            }),
            AlgorithmKind::LeakyBucket => {
                let interval = window_ns.div_ceil(limit);
                if interval == 0 || window_ns < limit {
                    return err("limit", "leaky_bucket needs at least 1 ns per request");
                }
                Policy::LeakyBucket(LeakyBucket {
                    interval,
                    burst: burst.unwrap_or(1),
                    queue: queue.unwrap_or(0),
                })
            }
            AlgorithmKind::FixedWindow => Policy::FixedWindow(FixedWindow {
                limit,
                window: window_ns,
            }),
            AlgorithmKind::SlidingWindowLog => {
                if limit > MAX_LOG_LIMIT {
                    return err(
                        "limit",
                        "sliding_window_log keeps one entry per admitted request; \
                         limits above 100000 belong to sliding_window_counter",
                    );
                }
                Policy::SlidingLog(SlidingLog {
                    limit,
                    window: window_ns,
                })
            }
            AlgorithmKind::SlidingWindowCounter => Policy::SlidingCounter(SlidingCounter {
                limit,
                window: window_ns,
            }),
        })
    }

    /// The limit and window a counting policy was built from (what a
    /// carried limit is rebuilt from on another node); None for the leaky
    /// bucket, which keeps only their ratio.
    pub fn limit_and_window(&self) -> Option<(u64, Duration)> {
        let (limit, window) = match self {
            Policy::TokenBucket(a) => (a.limit, a.window),
            Policy::FixedWindow(a) => (a.limit, a.window),
            Policy::SlidingLog(a) => (a.limit, a.window),
            Policy::SlidingCounter(a) => (a.limit, a.window),
            Policy::LeakyBucket(_) => return None,
        };
        Some((limit, Duration::from_nanos(window)))
    }

    pub fn kind(&self) -> AlgorithmKind {
        match self {
            Policy::TokenBucket(_) => AlgorithmKind::TokenBucket,
            Policy::LeakyBucket(_) => AlgorithmKind::LeakyBucket,
            Policy::FixedWindow(_) => AlgorithmKind::FixedWindow,
            Policy::SlidingLog(_) => AlgorithmKind::SlidingWindowLog,
            Policy::SlidingCounter(_) => AlgorithmKind::SlidingWindowCounter,
        }
    }

    /// The largest cost a single request may carry under this policy.
    pub fn max_cost(&self) -> u64 {
        match self {
            Policy::TokenBucket(a) => a.max_cost(),
            Policy::LeakyBucket(a) => a.max_cost(),
            Policy::FixedWindow(a) => a.max_cost(),
            Policy::SlidingLog(a) => a.max_cost(),
            Policy::SlidingCounter(a) => a.max_cost(),
        }
    }

    /// A fresh state for this policy.
    pub fn fresh(&self) -> State {
        match self {
            Policy::TokenBucket(a) => State::TokenBucket(a.fresh()),
            Policy::LeakyBucket(a) => State::LeakyBucket(a.fresh()),
            Policy::FixedWindow(a) => State::FixedWindow(a.fresh()),
            Policy::SlidingLog(a) => State::SlidingLog(a.fresh()),
            Policy::SlidingCounter(a) => State::SlidingCounter(a.fresh()),
        }
    }

    /// Records `cost` spent elsewhere (see the algorithms' `charge`); false
    /// when the state is of another algorithm.
    pub fn charge(&self, s: &mut State, now: Nanos, cost: u64) -> bool {
        match (self, s) {
            (Policy::TokenBucket(a), State::TokenBucket(s)) => a.charge(s, now, cost),
            (Policy::LeakyBucket(a), State::LeakyBucket(s)) => a.charge(s, now, cost),
            (Policy::FixedWindow(a), State::FixedWindow(s)) => a.charge(s, now, cost),
            (Policy::SlidingLog(a), State::SlidingLog(s)) => a.charge(s, now, cost),
            (Policy::SlidingCounter(a), State::SlidingCounter(s)) => a.charge(s, now, cost),
            _ => return false,
        }
        true
    }

    /// Folds `other` into `into` (see the algorithms' `merge`); false when
    /// the states are of another algorithm.
    pub fn merge(&self, into: &mut State, other: State, now: Nanos) -> bool {
        match (self, into, other) {
            (Policy::TokenBucket(a), State::TokenBucket(m), State::TokenBucket(o)) => {
                a.merge(m, o, now)
            }
            (Policy::LeakyBucket(a), State::LeakyBucket(m), State::LeakyBucket(o)) => {
                a.merge(m, o, now)
            }
            (Policy::FixedWindow(a), State::FixedWindow(m), State::FixedWindow(o)) => {
                a.merge(m, o, now)
            }
            (Policy::SlidingLog(a), State::SlidingLog(m), State::SlidingLog(o)) => {
                a.merge(m, o, now)
            }
            (Policy::SlidingCounter(a), State::SlidingCounter(m), State::SlidingCounter(o)) => {
                a.merge(m, o, now)
            }
            _ => return false,
        }
        true
    }

    /// What `s` spent beyond `base` (see the algorithms' `since`); None when
    /// either state is of another algorithm.
    pub fn since(&self, s: &State, base: &State, now: Nanos) -> Option<State> {
        Some(match (self, s, base) {
            (Policy::TokenBucket(a), State::TokenBucket(s), State::TokenBucket(b)) => {
                State::TokenBucket(a.since(s, b, now))
            }
            (Policy::LeakyBucket(a), State::LeakyBucket(s), State::LeakyBucket(b)) => {
                State::LeakyBucket(a.since(s, b, now))
            }
            (Policy::FixedWindow(a), State::FixedWindow(s), State::FixedWindow(b)) => {
                State::FixedWindow(a.since(s, b, now))
            }
            (Policy::SlidingLog(a), State::SlidingLog(s), State::SlidingLog(b)) => {
                State::SlidingLog(a.since(s, b, now))
            }
            (Policy::SlidingCounter(a), State::SlidingCounter(s), State::SlidingCounter(b)) => {
                State::SlidingCounter(a.since(s, b, now))
            }
            _ => return None,
        })
    }

    /// [`Policy::since`] as a state of its own, merged into a fresh one as
    /// a handed-over state is: what settling `s` against `base` leaves.
    /// None when nothing was spent beyond it, or either state is of
    /// another algorithm.
    pub fn beyond(&self, s: &State, base: &State, now: Nanos) -> Option<State> {
        let mut kept = self.fresh();
        self.merge(&mut kept, self.since(s, base, now)?, now);
        (!self.is_idle(&kept, now)).then_some(kept)
    }

    /// Decides one request against a state; for tests, simulators and any
    /// caller that keeps its own state. The store is the concurrent version.
    /// Returns None when the state belongs to another algorithm.
    pub fn decide(&self, state: &mut State, now: Nanos, cost: u64) -> Option<Decision> {
        Some(match (self, state) {
            (Policy::TokenBucket(a), State::TokenBucket(s)) => a.decide(s, now, cost),
            (Policy::LeakyBucket(a), State::LeakyBucket(s)) => a.decide(s, now, cost),
            (Policy::FixedWindow(a), State::FixedWindow(s)) => a.decide(s, now, cost),
            (Policy::SlidingLog(a), State::SlidingLog(s)) => a.decide(s, now, cost),
            (Policy::SlidingCounter(a), State::SlidingCounter(s)) => a.decide(s, now, cost),
            _ => return None,
        })
    }
}

/// Runs `$body` with `$a` and `$s` bound to the algorithm and state of one
/// kind; `$other` when the state belongs to another algorithm.
macro_rules! each_pair {
    ($policy:expr, $state:expr, ($a:ident, $s:ident) => $body:expr, _ => $other:expr) => {
        match ($policy, $state) {
            (Policy::TokenBucket($a), State::TokenBucket($s)) => $body,
            (Policy::LeakyBucket($a), State::LeakyBucket($s)) => $body,
            (Policy::FixedWindow($a), State::FixedWindow($s)) => $body,
            (Policy::SlidingLog($a), State::SlidingLog($s)) => $body,
            (Policy::SlidingCounter($a), State::SlidingCounter($s)) => $body,
            _ => $other,
        }
    };
}

impl Policy {
    /// Gives back `cost` consumed at `at` (or spent at all, when `at` is
    /// [`REFUND_SPENT`]); nothing for another algorithm's state.
    pub fn refund(&self, state: &mut State, at: Nanos, cost: u64) {
        each_pair!(self, state, (a, s) => refund_at(a, s, at, cost), _ => ())
    }

    /// True once the state says no more than a fresh one (another
    /// algorithm's state says nothing this policy can use: idle too).
    pub fn is_idle(&self, state: &State, now: Nanos) -> bool {
        each_pair!(self, state, (a, s) => a.is_idle(s, now), _ => true)
    }

    /// When the state comes to rest if no request comes first.
    pub fn rest_at(&self, state: &State) -> Nanos {
        each_pair!(self, state, (a, s) => a.rest_at(s), _ => 0)
    }

    /// Whether counts kept under `self` mean the same under `to`: the same
    /// counting algorithm over the same window, only the limit changed (a
    /// divided share resized), or the very same policy.
    pub fn keeps_counts_as(&self, to: &Policy) -> bool {
        match (self, to) {
            (Policy::FixedWindow(a), Policy::FixedWindow(b)) => a.window == b.window,
            (Policy::SlidingCounter(a), Policy::SlidingCounter(b)) => a.window == b.window,
            (Policy::SlidingLog(a), Policy::SlidingLog(b)) => a.window == b.window,
            _ => self == to,
        }
    }

    /// A state received from a peer, validated as `Algorithm::admit`
    /// does; None too when it is another algorithm's.
    pub fn admit(&self, state: State, now: Nanos) -> Option<State> {
        Some(match (self, state) {
            (Policy::TokenBucket(a), State::TokenBucket(s)) => State::TokenBucket(a.admit(s, now)?),
            (Policy::LeakyBucket(a), State::LeakyBucket(s)) => State::LeakyBucket(a.admit(s, now)?),
            (Policy::FixedWindow(a), State::FixedWindow(s)) => State::FixedWindow(a.admit(s, now)?),
            (Policy::SlidingLog(a), State::SlidingLog(s)) => State::SlidingLog(a.admit(s, now)?),
            (Policy::SlidingCounter(a), State::SlidingCounter(s)) => {
                State::SlidingCounter(a.admit(s, now)?)
            }
            _ => return None,
        })
    }
}

/// The state of one key under any algorithm; the portable form a node hands
/// to a key's next owner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum State {
    TokenBucket(TokenBucketState),
    LeakyBucket(LeakyBucketState),
    FixedWindow(FixedWindowState),
    SlidingLog(SlidingLogState),
    SlidingCounter(SlidingCounterState),
}

#[cfg(test)]
mod give_back_tests;
#[cfg(test)]
mod pass_tests;
#[cfg(test)]
mod tests;
