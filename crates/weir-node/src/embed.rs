//! A node started from inside another program: the options of `weir serve` as a builder.
//!
//! ```no_run
//! # async fn demo() -> Result<(), weir_node::NodeError> {
//! let node = weir_node::embed::NodeBuilder::new()
//!     .http("127.0.0.1:0".parse().unwrap())
//!     .grpc("127.0.0.1:0".parse().unwrap())
//!     .gossip("127.0.0.1:7946".parse().unwrap())
//!     .seeds(["10.0.0.2:7946", "10.0.0.3:7946"])
//!     .rules_file("rules.toml")
//!     .start()
//!     .await?;
//! // A service decides through `node.state().engine`, which forwards to
//! // each key's owner like any other node of the cluster.
//! let engine = node.state().engine.clone();
//! # drop(engine);
//! node.shutdown().await;
//! # Ok(())
//! # }
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use weir_cluster::{OwnerFailure, Strategy};

use crate::config::{InputLimits, ServeConfig};
use crate::node::{Node, NodeError};

/// Fills a [`ServeConfig`] the way `weir serve`'s flags do, then starts a
/// [`Node`]. Every address defaults to `127.0.0.1:0` (a free port): an
/// embedded limiter must not collide with the service's own port, and
/// nothing outside the process needs it until it joins a cluster.
#[derive(Debug, Clone)]
pub struct NodeBuilder {
    config: ServeConfig,
}

impl Default for NodeBuilder {
    fn default() -> Self {
        NodeBuilder::new()
    }
}

impl NodeBuilder {
    pub fn new() -> Self {
        NodeBuilder {
            config: ServeConfig::ephemeral(),
        }
    }

    /// Starts from a whole config (e.g. one parsed from `weir serve` flags).
    pub fn from_config(config: ServeConfig) -> Self {
        NodeBuilder { config }
    }

    /// `--node-id`; defaults to the HTTP address.
    pub fn node_id(mut self, id: impl Into<String>) -> Self {
        self.config.node_id = Some(id.into());
        self
    }

    /// `--http`
    pub fn http(mut self, addr: SocketAddr) -> Self {
        self.config.http = addr;
        self
    }

    /// `--grpc`
    pub fn grpc(mut self, addr: SocketAddr) -> Self {
        self.config.grpc = addr;
        self
    }

    /// `--gossip`
    pub fn gossip(mut self, addr: SocketAddr) -> Self {
        self.config.gossip = addr;
        self
    }

    /// `--seeds`: gossip addresses (`HOST:PORT`) of nodes already in the cluster.
    pub fn seeds<I, S>(mut self, seeds: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.config.seeds = seeds.into_iter().map(Into::into).collect();
        self
    }

    /// `--rules`; watched and reloaded on change, as for `weir serve`.
    pub fn rules_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.config.rules_file = Some(path.into());
        self
    }

    /// `--strategy`
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.config.strategy = strategy;
        self
    }

    /// `--sync-interval`
    pub fn sync_interval(mut self, interval: Duration) -> Self {
        self.config.sync_interval = interval;
        self
    }

    /// `--on-owner-failure`
    pub fn on_owner_failure(mut self, on_failure: OwnerFailure) -> Self {
        self.config.on_owner_failure = on_failure;
        self
    }

    /// `--owner-deadline`
    pub fn owner_deadline(mut self, deadline: Duration) -> Self {
        self.config.owner_deadline = deadline;
        self
    }

    /// `--admin-token`
    pub fn admin_token(mut self, token: impl Into<String>) -> Self {
        self.config.admin_token = Some(token.into());
        self
    }

    /// `--cluster-secret`
    pub fn cluster_secret(mut self, secret: impl Into<String>) -> Self {
        self.config.cluster_secret = Some(secret.into());
        self
    }

    /// Server-side Retry-After jitter.
    pub fn retry_jitter(mut self, on: bool) -> Self {
        self.config.retry_jitter = on;
        self
    }

    pub fn limits(mut self, limits: InputLimits) -> Self {
        self.config.limits = limits;
        self
    }

    pub fn max_keys_per_rule(mut self, max: usize) -> Self {
        self.config.max_keys_per_rule = max;
        self
    }

    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.config.drain_timeout = timeout;
        self
    }

    pub fn config(&self) -> &ServeConfig {
        &self.config
    }

    pub fn into_config(self) -> ServeConfig {
        self.config
    }

    /// Binds, serves and (with seeds) joins the cluster exactly as `weir
    /// serve` does: the same [`Node::start`].
    pub async fn start(self) -> Result<Node, NodeError> {
        Node::start(self.config).await
    }
}
