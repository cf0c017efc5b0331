//! Client retry discipline: jittered waits, a success-funded budget, one designated retrier.

mod budget;
mod classify;
mod policy;

pub use budget::{BudgetError, RetryBudget};
pub use classify::{Attempt, Classify};
pub use policy::{retry, Outcome, RetryPolicy, Stop};
pub use weir_core::jitter::{full_jitter, honor_retry_after, server_jitter};
