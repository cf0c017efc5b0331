//! The network under the protocols: gRPC calls between nodes, their authentication, and per-owner batching.

pub mod auth;
pub mod batcher;
mod conn;
pub mod grpc;
pub mod regions;
pub mod server;
