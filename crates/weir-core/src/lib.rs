//! weir-core: everything one process needs to decide a rate-limit check, with no I/O.
//!
//! The layers, bottom up: a [`Clock`], five pure algorithms behind one
//! [`Policy`], a keyed concurrent [`store`] that applies a policy atomically
//! per key, a validated [`RuleSet`] that says which limits a request meets, and
//! the [`Limiter`] that ties them into one `check`.
#![forbid(unsafe_code)]

pub mod algorithm;
mod clock;
mod decision;
mod error;
pub mod headers;
mod key;
mod limiter;
pub mod rules;
pub mod store;

pub use algorithm::{AlgorithmKind, Policy, State};
pub use clock::{Clock, FakeClock, Nanos, SystemClock, NANOS_PER_MS, NANOS_PER_SEC};
pub use decision::Decision;
pub use error::{CheckError, InputField};
pub use key::{hash_part, CounterKey};
pub use limiter::{
    Applied, CounterSnapshot, Limiter, LimiterConfig, Placed, Request, Verdict, MAX_ADHOC_POLICIES,
    MAX_IP_LEN, MAX_KEY_LEN, MAX_ROUTE_LEN, MAX_TIER_LEN,
};
pub use rules::{By, Rule, RuleError, RuleSet, RulesError};
