//! What every handler of one node shares.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use weir_cluster::Engine;

use crate::activity::Activity;
use crate::config::ServeConfig;
use crate::metrics::Metrics;

pub struct NodeState {
    pub node_id: String,
    pub engine: Arc<Engine>,
    pub config: ServeConfig,
    pub metrics: Arc<Metrics>,
    /// The last minutes of checks per rule, per second, for the dashboard.
    pub activity: Arc<Activity>,
    /// False until every listener is up, and again once shutdown begins, so
    /// /readyz takes the node out of rotation before it stops answering.
    pub ready: AtomicBool,
}
