//! weir-client
#![forbid(unsafe_code)]

pub mod retry;

pub use retry::{retry, BudgetError, RetryBudget, RetryPolicy};
