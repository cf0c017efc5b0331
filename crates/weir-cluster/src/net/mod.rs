//! The network under the protocols: gRPC calls between nodes, Decide calls on direct connections, their authentication, and per-owner batching.

pub mod auth;
pub mod batcher;
mod conn;
pub mod direct;
pub mod grpc;
pub mod peer_tls;
pub mod regions;
pub mod server;
