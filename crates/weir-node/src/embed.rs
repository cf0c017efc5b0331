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

use weir_cluster::{GossipProfile, OwnerFailure, StrategyKind};

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

    /// `--peer-grpc`
    pub fn peer_grpc(mut self, addr: SocketAddr) -> Self {
        self.config.peer_grpc = Some(addr);
        self
    }

    /// `--tls-cert` and `--tls-key`
    pub fn tls(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.config.tls = Some(crate::tls::TlsFiles {
            cert: cert.into(),
            key: key.into(),
        });
        self
    }

    /// `--advertise-grpc`
    pub fn advertise_grpc(mut self, addr: SocketAddr) -> Self {
        self.config.advertise_grpc = Some(addr);
        self
    }

    /// `--advertise-gossip`
    pub fn advertise_gossip(mut self, addr: SocketAddr) -> Self {
        self.config.advertise_gossip = Some(addr);
        self
    }

    /// `--seeds`: gossip addresses (`HOST:PORT`) of nodes already in the cluster.
    pub fn seeds<I, S>(mut self, seeds: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.config.cluster.seeds = seeds.into_iter().map(Into::into).collect();
        self
    }

    /// `--rules`; watched and reloaded on change, as for `weir serve`.
    pub fn rules_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.config.rules_file = Some(path.into());
        self
    }

    /// `--strategy`
    pub fn strategy(mut self, strategy: StrategyKind) -> Self {
        self.config.cluster.strategy = strategy;
        self
    }

    /// `--sync-interval`
    pub fn sync_interval(mut self, interval: Duration) -> Self {
        self.config.cluster.sync_interval = interval;
        self
    }

    /// `--on-owner-failure`
    pub fn on_owner_failure(mut self, on_failure: OwnerFailure) -> Self {
        self.config.cluster.on_owner_failure = on_failure;
        self
    }

    /// `--owner-deadline`
    pub fn owner_deadline(mut self, deadline: Duration) -> Self {
        self.config.cluster.owner_deadline = deadline;
        self
    }

    /// `--join-timeout`
    pub fn join_timeout(mut self, timeout: Duration) -> Self {
        self.config.cluster.join_timeout = Some(timeout);
        self
    }

    /// `--leave-timeout`
    pub fn leave_timeout(mut self, timeout: Duration) -> Self {
        self.config.cluster.leave_timeout = timeout;
        self
    }

    /// `--replicas`: copies of each counter in all (1 or 2).
    pub fn replicas(mut self, n: usize) -> Self {
        self.config.cluster.replicas = n;
        self
    }

    /// `--hot-key-rate`: checks per second from which a key is leased.
    pub fn hot_key_rate(mut self, per_sec: u64) -> Self {
        self.config.cluster.hot_key_rate = per_sec;
        self
    }

    /// `--fallback-cap`: most checks per second admitted without owners.
    pub fn fallback_cap(mut self, per_sec: u64) -> Self {
        self.config.cluster.fallback_cap = per_sec;
        self
    }

    /// `--admin-token`
    pub fn admin_token(mut self, token: impl Into<String>) -> Self {
        self.config.admin_token = Some(token.into());
        self
    }

    /// `--cluster-secret`
    pub fn cluster_secret(mut self, secret: impl Into<String>) -> Self {
        self.config.cluster.secret = Some(secret.into());
        self
    }

    /// Membership timings: `Lan` (the default) in production, `Fast` on loopback.
    pub fn gossip_profile(mut self, profile: GossipProfile) -> Self {
        self.config.cluster.gossip_profile = profile;
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

    /// `--ui`: the dashboard at `GET /ui` on the HTTP port.
    pub fn ui(mut self, on: bool) -> Self {
        self.config.ui = on;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_lands_in_the_serve_config() {
        let addr = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
        let c = NodeBuilder::new()
            .node_id("n1")
            .http(addr(1))
            .grpc(addr(2))
            .gossip(addr(3))
            .seeds(["10.0.0.2:7946", "10.0.0.3:7946"])
            .rules_file("rules.toml")
            .strategy(StrategyKind::Gossip)
            .sync_interval(Duration::from_millis(250))
            .on_owner_failure(OwnerFailure::Closed)
            .owner_deadline(Duration::from_millis(7))
            .leave_timeout(Duration::from_secs(20))
            .join_timeout(Duration::from_secs(40))
            .replicas(1)
            .admin_token("admin")
            .cluster_secret("secret")
            .gossip_profile(GossipProfile::Fast)
            .retry_jitter(true)
            .max_keys_per_rule(10)
            .drain_timeout(Duration::from_secs(1))
            .ui(false)
            .into_config();
        assert_eq!(c.node_id.as_deref(), Some("n1"));
        assert_eq!((c.http, c.grpc, c.gossip), (addr(1), addr(2), addr(3)));
        assert_eq!(c.cluster.seeds, ["10.0.0.2:7946", "10.0.0.3:7946"]);
        assert_eq!(c.rules_file, Some(PathBuf::from("rules.toml")));
        assert_eq!(c.cluster.strategy, StrategyKind::Gossip);
        assert_eq!(c.cluster.sync_interval, Duration::from_millis(250));
        assert_eq!(c.cluster.on_owner_failure, OwnerFailure::Closed);
        assert_eq!(c.cluster.owner_deadline, Duration::from_millis(7));
        assert_eq!(c.cluster.leave_timeout, Duration::from_secs(20));
        assert_eq!(c.cluster.join_timeout, Some(Duration::from_secs(40)));
        assert_eq!(c.cluster.replicas, 1);
        assert_eq!(c.admin_token.as_deref(), Some("admin"));
        assert_eq!(c.cluster.secret.as_deref(), Some("secret"));
        assert_eq!(c.cluster.gossip_profile, GossipProfile::Fast);
        assert!(c.retry_jitter);
        assert_eq!(c.max_keys_per_rule, 10);
        assert_eq!(c.drain_timeout, Duration::from_secs(1));
        assert!(!c.ui);
    }

    #[test]
    fn defaults_are_free_loopback_ports() {
        let c = NodeBuilder::new().into_config();
        for a in [c.http, c.grpc, c.gossip] {
            assert!(a.ip().is_loopback());
            assert_eq!(a.port(), 0);
        }
    }
}
