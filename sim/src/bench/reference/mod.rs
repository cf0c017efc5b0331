//! The bare reference servers, built on the node's own stack so a ratio to them isolates weir's work: a hand-written HTTP/1.1 responder, an axum check handler, and bare tonic RateLimiter and RLS services.
//!
//! Each answers with the bytes the node sends for the same request (the
//! same headers, body fields and descriptor statuses) without deciding.
//! `weir-bare` serves them in a process of their own; `weir-bench
//! --reference` starts them inside the bench.

pub mod axum_check;
pub mod grpc;
pub mod raw_http;

pub use axum_check::bare_axum;
pub use grpc::bare_grpc;
pub use raw_http::bare_http;
