//! weir-core: everything one process needs to decide a rate-limit check, with no I/O.
//!
//! The layers, bottom up: a [`Clock`], five pure algorithms behind one
//! [`Policy`], a keyed concurrent [`store`] that applies a policy atomically
//! per key, a validated [`RuleSet`] that says which limits a request meets, and
//! the [`Limiter`] that ties them into one `check`.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use weir_core::{CheckRequest, FakeClock, Limiter, RuleSet};
//!
//! let rules = RuleSet::from_toml(r#"
//!     [[rule]]
//!     name      = "charges-per-client"
//!     route     = "POST /v1/charges"
//!     algorithm = "sliding_window_log"
//!     limit     = 2
//!     window    = "60s"
//! "#)?;
//! let clock = Arc::new(FakeClock::at_secs(1_800_000_000.0));
//! let limiter = Limiter::new(rules, clock.clone(), Default::default());
//!
//! let charge = CheckRequest::new("cust_42", "POST /v1/charges");
//! assert!(limiter.check(&charge)?.allowed);
//! assert!(limiter.check(&charge)?.allowed);
//! let third = limiter.check(&charge)?;
//! assert!(!third.allowed);
//! assert_eq!(third.binding().unwrap().rule.name.as_ref(), "charges-per-client");
//!
//! // A minute later the window has moved past both.
//! clock.advance(Duration::from_secs(60));
//! assert!(limiter.check(&charge)?.allowed);
//!
//! // A route no rule names is unlimited.
//! let other = limiter.check(&CheckRequest::new("cust_42", "GET /v1/balance"))?;
//! assert!(other.allowed && other.binding().is_none());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]

pub mod algorithm;
mod check;
mod clock;
mod decision;
pub mod determinism;
mod error;
pub mod headers;
pub mod jitter;
mod key;
mod limiter;
#[cfg(feature = "http")]
pub mod render;
pub mod rules;
mod snapshot;
pub mod store;

pub use algorithm::{AlgorithmKind, Policy, State, REFUND_SPENT};
pub use check::{
    CheckRequest, CheckResponse, Decide, MAX_IP_LEN, MAX_KEY_LEN, MAX_ROUTE_LEN, MAX_TIER_LEN,
};
pub use clock::{Clock, FakeClock, Nanos, SystemClock, NANOS_PER_MS, NANOS_PER_SEC};
pub use decision::{ceil_ms, Decision};
pub use error::{with_causes, CheckError, InputField, Unavailable};
pub use key::{hash_part, CounterKey};
pub use limiter::{Applied, Gate, Limiter, LimiterConfig, Placed, Verdict};
pub use rules::{
    By, Hot, Rule, RuleError, RuleSet, RulesError, RulesFile, Scope, TierBody, CARRIED_LABEL,
    MAX_VERSION as MAX_RULES_VERSION,
};
pub use snapshot::{Absorb, CarriedLimit, CounterSnapshot};
pub use store::{AbsorbError, StoreCounts};
