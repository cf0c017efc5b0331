//! weir-cluster: how N nodes decide as one limiter: membership, ring, forwarding, strategies.
#![forbid(unsafe_code)]
pub mod engine;
pub mod membership;
pub mod ring;

pub use engine::{CheckFailure, Engine, OwnerFailure, Strategy};
