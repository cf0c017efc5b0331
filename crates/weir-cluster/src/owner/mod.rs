//! The owner protocol: a check's limits decided by their keys' owners, with a deny cache and an owner-failure policy.

pub mod deny_cache;
pub mod fallback;
pub mod gateway;
pub mod handoff;
pub mod local;
pub mod peers;
pub mod serve;
