//! weir-client: check calls against a weir node, retry discipline, and a tower layer for services.
//!
//! - [`Client`]: weir's gRPC API (concurrent checks batched into one call)
//!   or its HTTP API, each check with a deadline.
//! - [`retry`](mod@retry): full jitter, Retry-After handling and a retry budget.
//! - [`layer`]: [`RateLimitLayer`], which checks every incoming request
//!   against an in-process limiter, an embedded node or a remote node
//!   before the service runs.
//!
//! An axum service limited in process, 2 requests a minute per API key:
//!
//! ```
//! use std::sync::Arc;
//! use axum::{body::Body, http::Request, routing::get, Router};
//! use tower::ServiceExt;
//! use weir_client::{KeyExtractor, RateLimitLayer};
//! use weir_core::{Limiter, RuleSet, SystemClock};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let rules = RuleSet::from_toml(r#"
//!     [[rule]]
//!     name      = "per-key"
//!     algorithm = "sliding_window_log"
//!     limit     = 2
//!     window    = "60s"
//! "#)?;
//! let limiter = Arc::new(Limiter::new(rules, Arc::new(SystemClock::new()), Default::default()));
//! let layer = RateLimitLayer::new(limiter, KeyExtractor::header("x-api-key"));
//! let app = Router::new().route("/", get(|| async { "hello" })).layer(layer.clone());
//!
//! let call = || Request::get("/").header("x-api-key", "alice").body(Body::empty()).unwrap();
//! for _ in 0..2 {
//!     let res = app.clone().oneshot(call()).await?;
//!     assert_eq!(res.status(), 200);
//!     assert_eq!(res.headers()["ratelimit-limit"], "2");
//! }
//! let res = app.clone().oneshot(call()).await?;
//! assert_eq!(res.status(), 429);
//! assert!(res.headers().contains_key("retry-after"));
//! assert_eq!(layer.stats().snapshot().denied, 1);
//!
//! // No key: a 400 naming the header, and the service never runs.
//! let res = app.oneshot(Request::get("/").body(Body::empty())?).await?;
//! assert_eq!(res.status(), 400);
//! # Ok(())
//! # }
//! ```
//!
//! Against a node instead, the same layer takes a [`Client`]:
//! `RateLimitLayer::new(Client::grpc("http://127.0.0.1:8081")?, key)`.
#![forbid(unsafe_code)]

mod client;
mod error;
pub mod layer;
pub mod retry;

pub use client::{
    Client, ClientBuilder, DEFAULT_DEADLINE, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_BATCH,
};
pub use error::ClientError;
pub use layer::{FailureMode, HeaderSet, KeyExtractor, RateLimitLayer, DEFAULT_MAX_DELAY};
pub use retry::{retry, BudgetError, RetryBudget, RetryPolicy};
pub use weir_core::{CheckRequest, CheckResponse, Decide};
