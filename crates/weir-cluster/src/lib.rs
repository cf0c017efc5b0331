//! weir-cluster: how N nodes decide as one limiter: membership, ring, forwarding, strategies.
#![forbid(unsafe_code)]
pub mod cluster;
pub mod engine;
pub mod membership;
pub mod ring;
pub mod strategy;

pub use cluster::{
    resolve_seeds, BatchConfig, Cluster, ClusterConfig, ClusterError, ClusterStats, FallbackStatus,
    GossipProfile, MemberStatus, SeedResolver,
};
pub use engine::{CheckFailure, Engine, OwnerFailure, Strategy};
