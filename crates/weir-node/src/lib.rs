//! weir-node: serves weir-core's checks over HTTP, gRPC and Envoy RLS.
//!
//! [`Node::start`] binds every port (port 0 picks a free one) and returns a
//! handle with the chosen addresses; [`run`] is the same with a shutdown
//! future, which is all the `weir serve` binary does.
#![forbid(unsafe_code)]

pub mod accept;
pub mod activity;
pub mod cli;
pub mod config;
pub mod cores;
pub mod default_rules;
pub mod embed;
pub mod grpc;
pub mod http;
mod jitter;
pub mod metrics;
mod node;
mod peer_tls_reload;
pub mod readiness;
mod reload;
pub mod state;
pub mod tls;
pub mod traces;

pub use config::{InputLimits, LogFormat, ServeConfig};
pub use embed::NodeBuilder;
pub use node::{run, Node, NodeError};
pub use state::NodeState;
