//! weir-cluster: how N nodes decide as one limiter: membership, ring, forwarding, strategies.
//!
//! The layers, each depending only on those above it:
//! - `config`, `stats`, `wire` (weir-core to protobuf), `divided` (limits over N);
//! - [`topology`]: membership (SWIM over a datagram transport), the ring, routing, seeds, rules;
//! - [`link`]: the raw peer calls as a trait, and [`owner`]: the owner protocol over a small [`owner::peers::Peers`] trait;
//! - [`strategy`]: one [`strategy::Strategy`] per `--strategy`;
//! - [`net`] (gRPC and batching) and [`memory`] (an in-memory network for tests and simulations);
//! - [`engine`] and [`cluster`]: the check path every API calls, and the wiring;
//! - [`summary`]: what a node shows on a peer's dashboard (`Peer/Summary`);
//! - [`trace`]: a check's trace context carried to its owner, and the spans on either side.
#![forbid(unsafe_code)]

mod background;
pub mod cluster;
pub mod config;
mod divided;
pub mod engine;
mod handler;
mod keys;
pub mod link;
pub mod memory;
pub mod net;
mod offload;
pub mod owner;
pub mod regional;
pub mod regions;
pub mod stats;
pub mod strategy;
pub mod summary;
pub mod topology;
pub mod trace;
pub mod wire;

pub use cluster::{Cluster, ClusterError};
pub use config::{BatchConfig, ClusterConfig, GossipProfile, OwnerFailure, StrategyKind};
pub use engine::Engine;
pub use stats::{ClusterStats, FallbackStatus, MemberStatus};
pub use topology::membership;
pub use topology::ring;
pub use topology::seeds::SeedResolver;
pub use weir_core::determinism;
