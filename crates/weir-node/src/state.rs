//! What every handler of one node shares.

use std::sync::Arc;

use weir_cluster::Engine;

use crate::activity::Activity;
use crate::config::ServeConfig;
use crate::metrics::Metrics;
use crate::readiness::Lifecycle;
use crate::traces::Traces;

pub struct NodeState {
    pub node_id: String,
    pub engine: Arc<Engine>,
    pub config: ServeConfig,
    pub metrics: Arc<Metrics>,
    /// The last minutes of checks per rule, per second, for the dashboard.
    pub activity: Arc<Activity>,
    /// Starting until every listener is up, leaving once shutdown begins,
    /// so /readyz and gRPC health take the node out of rotation before it
    /// stops answering ([`NodeState::readiness`]).
    pub lifecycle: Lifecycle,
    /// Set when the node exports traces (`--otlp-endpoint`).
    pub traces: Option<Traces>,
}
