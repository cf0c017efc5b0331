//! Starting and stopping one node: bind, serve, drain.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use weir_cluster::Engine;
use weir_core::{Limiter, LimiterConfig, RuleSet, RulesError, SystemClock};

use crate::config::ServeConfig;
use crate::metrics::Metrics;
use crate::state::NodeState;

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

pub(crate) fn load_rules(config: &ServeConfig) -> Result<RuleSet, NodeError> {
    let Some(path) = &config.rules_file else {
        return Ok(crate::default_rules::default_rules());
    };
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| NodeError::RulesFile {
        path: shown.clone(),
        source,
    })?;
    RuleSet::from_toml(&text).map_err(|source| NodeError::Rules {
        path: shown,
        source,
    })
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
        let rules = load_rules(&config)?;
        let limiter = Arc::new(Limiter::new(
            rules,
            Arc::new(SystemClock::new()),
            LimiterConfig {
                max_keys_per_rule: config.max_keys_per_rule,
            },
        ));
        let engine = Arc::new(Engine::local(limiter.clone()));
        let http_listener = bind("HTTP", config.http).await?;
        let grpc_listener = bind("gRPC", config.grpc).await?;
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
        let node_id = config
            .node_id
            .clone()
            .unwrap_or_else(|| http_addr.to_string());
        let state = Arc::new(NodeState {
            node_id,
            engine,
            config,
            metrics: Arc::new(Metrics::default()),
            ready: Default::default(),
        });
        let (stop, stopped) = watch::channel(false);
        let mut tasks = Vec::new();
        tasks.push(tokio::spawn(crate::http::serve(
            state.clone(),
            http_listener,
            signal(stopped.clone()),
        )));
        tasks.push(tokio::spawn(crate::grpc::serve(
            state.clone(),
            grpc_listener,
            signal(stopped.clone()),
        )));
        tasks.push(tokio::spawn(sweep(limiter, signal(stopped.clone()))));
        if let Some(path) = state.config.rules_file.clone() {
            tasks.extend(crate::reload::spawn(
                state.clone(),
                path,
                signal(stopped.clone()),
            ));
        }
        state.ready.store(true, Ordering::SeqCst);
        tracing::info!(node = %state.node_id, http = %http_addr, grpc = %grpc_addr, "weir node serving");
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

    pub fn state(&self) -> &Arc<NodeState> {
        &self.state
    }

    /// Stops accepting, lets in-flight requests finish (up to the drain
    /// timeout), then returns.
    pub async fn shutdown(self) {
        self.state.ready.store(false, Ordering::SeqCst);
        let _ = self.stop.send(true);
        let drain = self.state.config.drain_timeout;
        let all = futures::future::join_all(self.tasks);
        if tokio::time::timeout(drain, all).await.is_err() {
            tracing::warn!(?drain, "drain timeout passed with requests still in flight");
        }
        tracing::info!(node = %self.state.node_id, "weir node stopped");
    }
}

/// Resolves when the stop flag is raised.
fn signal(mut stopped: watch::Receiver<bool>) -> impl Future<Output = ()> + Send + 'static {
    async move {
        let _ = stopped.wait_for(|s| *s).await;
    }
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
