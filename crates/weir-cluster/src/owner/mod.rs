//! The owner protocol: a check's limits decided by their keys' owners, with a deny cache, a breaker per owner, replicas, and an owner-failure policy.

pub mod answered;
pub mod breaker;
pub mod cap;
pub mod counter_admin;
pub mod debts;
pub mod deny_cache;
pub mod fallback;
pub mod gateway;
pub mod handoff;
pub mod hot;
pub mod learned;
pub mod lease;
pub mod leased;
mod lessee;
pub mod local;
pub mod moves;
mod moving;
mod owned;
pub mod peers;
mod refunds;
pub mod remote;
pub mod replica;
pub mod replicate;
pub mod serve;
