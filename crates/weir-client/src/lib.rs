//! weir-client: check calls against a weir node, retry discipline, and a tower layer for services.
//!
//! - [`Client`]: weir's gRPC API (concurrent checks batched into one call)
//!   or its HTTP API, each check with a deadline.
//! - [`retry`](mod@retry): full jitter, Retry-After handling and a retry budget.
//! - [`layer`]: [`RateLimitLayer`], which checks every incoming request
//!   against an in-process limiter, an embedded node or a remote node
//!   before the service runs.
#![forbid(unsafe_code)]

mod client;
mod error;
pub mod layer;
pub mod retry;

pub use client::{Client, ClientBuilder, DEFAULT_DEADLINE, DEFAULT_MAX_BATCH};
pub use error::ClientError;
pub use layer::{FailureMode, HeaderSet, KeyExtractor, RateLimitLayer, DEFAULT_MAX_DELAY};
pub use retry::{retry, BudgetError, RetryBudget, RetryPolicy};
pub use weir_core::{CheckRequest, CheckResponse, Decide};
