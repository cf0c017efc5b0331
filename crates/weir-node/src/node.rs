//! Starting and stopping one node: bind, serve, drain.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use weir_cluster::membership::NodeIdentity;
use weir_cluster::{Cluster, ClusterError, Engine};
use weir_core::{Limiter, LimiterConfig, RuleSet, RulesError, SystemClock};

use crate::config::ServeConfig;
use crate::metrics::scrape::NodeCollector;
use crate::metrics::Metrics;
use crate::readiness::Stage;
use crate::reload::Loaded;
use crate::state::NodeState;
use crate::traces::Traces;
use weir_cluster::net::peer_tls::PeerTls;

#[derive(Debug, Error)]
pub enum NodeError {
    #[error("cannot bind {what} on {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot read rules file {path}: {source}")]
    RulesFile {
        path: String,
        source: std::io::Error,
    },
    #[error("invalid rules file {path}: {source}")]
    Rules { path: String, source: RulesError },
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    #[error(transparent)]
    PeerTls(#[from] weir_cluster::net::peer_tls::PeerTlsError),
    #[error("cannot join the cluster: {0}")]
    Cluster(#[from] ClusterError),
    /// The OTLP exporter could not be built; nothing was started.
    #[error("cannot export traces: {0}")]
    Traces(String),
}

/// How often idle keys are dropped.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// A running node. Dropping it does not stop it; call [`Node::shutdown`].
pub struct Node {
    state: Arc<NodeState>,
    http_addr: SocketAddr,
    grpc_addr: SocketAddr,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

/// The rules to start with, and the file's text when they came from one (the
/// reloader compares against it, so an event that changes nothing installs nothing).
pub(crate) fn load_rules(config: &ServeConfig) -> Result<(RuleSet, Option<Loaded>), NodeError> {
    let Some(path) = &config.rules_file else {
        return Ok((crate::default_rules::default_rules(), None));
    };
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| NodeError::RulesFile {
        path: shown.clone(),
        source,
    })?;
    let rules = RuleSet::from_toml(&text).map_err(|source| NodeError::Rules {
        path: shown,
        source,
    })?;
    let loaded = Loaded::new(&text, &rules);
    Ok((rules, Some(loaded)))
}

async fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener, NodeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| NodeError::Bind { what, addr, source })
}

impl Node {
    /// Binds every listener and starts serving. Port 0 picks a free port;
    /// the chosen addresses are logged and returned by the accessors.
    pub async fn start(config: ServeConfig) -> Result<Node, NodeError> {
        config.validate().map_err(NodeError::Config)?;
        let tls = config.tls.as_ref().map(|t| t.load()).transpose()?;
        let peer_tls = match &config.peer_tls {
            Some(files) => Some(Arc::new(PeerTls::new(files.load()?))),
            None => None,
        };
        // A large file takes a moment to parse and index: off the runtime's
        // workers, which may already serve another node in this process.
        let (rules, rules_text) = {
            let config = config.clone();
            tokio::task::spawn_blocking(move || load_rules(&config))
                .await
                .map_err(|e| {
                    NodeError::Config(format!("loading the rules did not finish: {e}"))
                })??
        };
        let limiter = Arc::new(Limiter::new(
            rules,
            Arc::new(SystemClock::new()),
            LimiterConfig {
                max_keys_per_rule: config.max_keys_per_rule,
            },
        ));
        let http_listener = bind("HTTP", config.http).await?;
        let grpc_listener = bind("gRPC", config.grpc).await?;
        let peer_listener = match config.peer_grpc {
            Some(addr) => Some(bind("gRPC peer", addr).await?),
            None => None,
        };
        let http_addr = http_listener
            .local_addr()
            .expect("bound socket has an address");
        let grpc_addr = grpc_listener
            .local_addr()
            .expect("bound socket has an address");
        // Port 0 has become a real port: record the chosen addresses so
        // every view of the config (the cluster document, logs) shows them.
        let mut config = config;
        config.http = http_addr;
        config.grpc = grpc_addr;
        config.peer_grpc = peer_listener
            .as_ref()
            .map(|l| l.local_addr().expect("bound socket has an address"));
        let node_id = config
            .node_id
            .clone()
            .unwrap_or_else(|| http_addr.to_string());
        // Every node is a cluster member; one started without seeds is a
        // cluster of one until another joins through it.
        let cluster =
            Arc::new(start_cluster(&config, &node_id, limiter.clone(), peer_tls.clone()).await?);
        config.gossip = cluster.gossip_addr();
        let engine = Arc::new(Engine::clustered(cluster.clone()));
        let scrape = NodeCollector::new(engine.clone(), config.max_keys_per_rule);
        let traces = Traces::start(&config.traces, &node_id).map_err(NodeError::Traces)?;
        if let Some(t) = &traces {
            cluster.trace_with(t.tracer().clone());
        }
        let state = Arc::new(NodeState {
            node_id,
            engine,
            config,
            metrics: Arc::new(Metrics::new(Some(Box::new(scrape)))),
            activity: Arc::default(),
            lifecycle: Default::default(),
            traces,
        });
        cluster.report_activity(state.activity.clone());
        let (stop, stopped) = watch::channel(false);
        let mut tasks = Vec::new();
        let (http_tls, grpc_tls) = match tls {
            Some(a) => (Some(a.http), Some(a.grpc)),
            None => (None, None),
        };
        tasks.push(tokio::spawn(crate::http::serve(
            state.clone(),
            http_listener,
            http_tls,
            signal(stopped.clone()),
        )));
        tasks.push(tokio::spawn(crate::grpc::serve(
            state.clone(),
            grpc_listener,
            grpc_tls,
            peer_listener,
            peer_tls.clone(),
            signal(stopped.clone()),
        )));
        tasks.push(tokio::spawn(sweep(limiter, signal(stopped.clone()))));
        tasks.push(tokio::spawn(crate::activity::sample(
            state.clone(),
            signal(stopped.clone()),
        )));
        if let (Some(tls), Some(files)) = (&peer_tls, &state.config.peer_tls) {
            tasks.extend(crate::peer_tls_reload::spawn(
                tls.clone(),
                files.clone(),
                signal(stopped.clone()),
            ));
        }
        if let Some(path) = state.config.rules_file.clone() {
            tasks.extend(crate::reload::spawn(
                state.clone(),
                path,
                rules_text,
                signal(stopped.clone()),
            ));
        }
        state.lifecycle.set(Stage::Serving);
        announce_trust(&state.config);
        tracing::info!(
            node = %state.node_id,
            http = %http_addr,
            grpc = %grpc_addr,
            peer = %state.config.peer_listener(),
            tls = state.config.tls.is_some(),
            peer_tls = state.config.peer_tls.is_some(),
            "weir node serving"
        );
        Ok(Node {
            state,
            http_addr,
            grpc_addr,
            stop,
            tasks,
        })
    }

    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc_addr
    }

    /// Where weir.v1.Peer is served: `--peer-grpc` when set, else the gRPC port.
    pub fn peer_addr(&self) -> SocketAddr {
        self.state.config.peer_listener()
    }

    pub fn state(&self) -> &Arc<NodeState> {
        &self.state
    }

    /// Leaves the cluster (handing its counters to their new owners), then
    /// stops accepting, lets in-flight requests finish (up to the drain
    /// timeout), and returns.
    pub async fn shutdown(self) {
        self.state.lifecycle.set(Stage::Leaving);
        if let Some(cluster) = self.state.engine.cluster() {
            cluster.leave().await;
        }
        let _ = self.stop.send(true);
        let drain = self.state.config.drain_timeout;
        let all = futures::future::join_all(self.tasks);
        if tokio::time::timeout(drain, all).await.is_err() {
            tracing::warn!(?drain, "drain timeout passed with requests still in flight");
        }
        if let Some(traces) = &self.state.traces {
            traces.shutdown().await;
        }
        tracing::info!(node = %self.state.node_id, "weir node stopped");
    }
}

impl Node {
    /// Stops everything at once with no goodbye and no handoff, as a crash
    /// would: peers notice through failure detection. For tests.
    pub fn kill(self) {
        if let Some(cluster) = self.state.engine.cluster() {
            cluster.kill();
        }
        self.state.lifecycle.set(Stage::Leaving);
        let _ = self.stop.send(true);
        for t in self.tasks {
            t.abort();
        }
        tracing::info!(node = %self.state.node_id, "weir node killed");
    }
}

/// Says at every start whom this node takes gossip and peer calls from.
fn announce_trust(config: &ServeConfig) {
    match trust_notice(config) {
        Some(Notice::Warn(text)) => tracing::warn!("{text}"),
        Some(Notice::Info(text)) => tracing::info!("{text}"),
        None => {}
    }
}

/// What the start log says about trust, and how loud.
#[derive(Debug, PartialEq, Eq)]
enum Notice {
    Warn(&'static str),
    Info(&'static str),
}

fn trust_notice(config: &ServeConfig) -> Option<Notice> {
    let c = &config.cluster;
    Some(match (&c.secret, &config.peer_tls) {
        (Some(_), Some(_)) => return None,
        (Some(_), None) => Notice::Warn(
            "peer traffic is not encrypted: gossip is sealed under the cluster secret, but \
             forwarded checks, copies and rule pushes cross the peer port in plaintext \
             (authenticated, readable by anyone on the path); give --peer-tls-cert, \
             --peer-tls-key and --peer-ca to encrypt them (docs/security.md)",
        ),
        (None, _) if c.insecure_open => Notice::Warn(
            "INSECURE: --insecure-open-cluster: no cluster secret, and gossip and peer calls \
             are taken from anyone who can reach the gossip and peer ports; they can join the \
             ring, decide a share of all keys and replace the rules without the admin token \
             (docs/security.md)",
        ),
        (None, _) => Notice::Info(
            "standalone node: no --cluster-secret, so it takes no gossip and serves no peer \
             calls; give every node the same secret to form a cluster",
        ),
    })
}

async fn start_cluster(
    config: &ServeConfig,
    node_id: &str,
    limiter: Arc<Limiter>,
    peer_tls: Option<Arc<PeerTls>>,
) -> Result<Cluster, NodeError> {
    // Port 0 in an advertised address means "the port that was bound"; the
    // membership fills in the gossip one once its socket is bound.
    let mut grpc = config.advertised_grpc();
    if grpc.port() == 0 {
        grpc.set_port(config.peer_listener().port());
    }
    let identity = NodeIdentity::new(node_id, config.advertised_gossip(), grpc);
    let cluster = config.cluster.clone();
    Ok(Cluster::start_over(cluster, identity, config.gossip, limiter, peer_tls).await?)
}

/// Resolves when the stop flag is raised.
async fn signal(mut stopped: watch::Receiver<bool>) {
    let _ = stopped.wait_for(|s| *s).await;
}

async fn sweep(limiter: Arc<Limiter>, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(SWEEP_INTERVAL);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tick.tick() => {
                let limiter = limiter.clone();
                let _ = tokio::task::spawn_blocking(move || limiter.sweep()).await;
            }
        }
    }
}

/// Starts a node and serves until `shutdown` resolves, then drains.
pub async fn run(config: ServeConfig, shutdown: impl Future<Output = ()>) -> Result<(), NodeError> {
    let node = Node::start(config).await?;
    shutdown.await;
    node.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use weir_cluster::net::peer_tls::PeerTlsFiles;

    use super::*;

    #[test]
    fn a_secret_without_peer_tls_warns_that_peer_traffic_is_not_encrypted() {
        let mut c = ServeConfig::default();
        c.cluster.secret = Some("s".into());
        assert!(matches!(trust_notice(&c), Some(Notice::Warn(t)) if t.contains("not encrypted")));
        c.peer_tls = Some(PeerTlsFiles {
            cert: "c".into(),
            key: "k".into(),
            ca: "a".into(),
        });
        assert_eq!(trust_notice(&c), None);
        c.cluster.secret = None;
        c.cluster.insecure_open = true;
        assert!(matches!(trust_notice(&c), Some(Notice::Warn(t)) if t.starts_with("INSECURE")));
    }
}
