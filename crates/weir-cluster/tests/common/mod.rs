//! In-process cluster members on loopback: a limiter, a Cluster, and the Peer service on a real port.
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;
use weir_cluster::membership::{Blackhole, NodeIdentity};
use weir_cluster::{CheckFailure, Cluster, ClusterConfig, Engine, GossipProfile};
use weir_core::{Limiter, LimiterConfig, Request, RuleSet, SystemClock, Verdict};

/// One limit: 20 per 60 s per client, exact (sliding log).
pub const RULES: &str = r#"
[[rule]]
name = "per-client"
algorithm = "sliding_window_log"
limit = 20
window = "60s"
"#;
pub const LIMIT: usize = 20;

/// Longest any awaited condition may take. A passing condition returns at
/// once; this is only how long a failing test hangs.
pub const DEADLINE: Duration = Duration::from_secs(20);

pub struct TestNode {
    pub id: String,
    pub engine: Arc<Engine>,
    pub cluster: Arc<Cluster>,
    pub grpc: SocketAddr,
    /// This node's own fault injector: addresses it cannot reach or hear.
    pub blackhole: Blackhole,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<()>>,
}

pub fn loopback0() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

impl TestNode {
    /// Starts a member with the fast gossip profile and a 1 s owner
    /// deadline (generous: a debug build on a loaded machine must not fall
    /// back by accident); `tweak` may change any of it.
    pub async fn start(
        id: &str,
        seeds: &[SocketAddr],
        rules: &str,
        tweak: impl FnOnce(&mut ClusterConfig),
    ) -> TestNode {
        let listener = TcpListener::bind(loopback0()).await.unwrap();
        let grpc = listener.local_addr().unwrap();
        let limiter = Arc::new(Limiter::new(
            RuleSet::from_toml(rules).unwrap(),
            Arc::new(SystemClock::new()),
            LimiterConfig::default(),
        ));
        let blackhole = Blackhole::new();
        let mut config = ClusterConfig::new(NodeIdentity::new(id, loopback0(), grpc), loopback0());
        config.seeds = seeds.to_vec();
        config.gossip_profile = GossipProfile::Fast;
        config.owner_deadline = Duration::from_secs(1);
        config.rules_sync_interval = Duration::from_millis(500);
        config.blackhole = Some(blackhole.clone());
        tweak(&mut config);
        let cluster = Arc::new(Cluster::start(config, limiter.clone()).await.unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let service = cluster.peer_service();
        // Without TCP_NODELAY a small answer can wait on a delayed ACK.
        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
        let server = tokio::spawn(async move {
            let _ = Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await;
        });
        TestNode {
            id: id.to_string(),
            engine: Arc::new(Engine::clustered(limiter, cluster.clone())),
            cluster,
            grpc,
            blackhole,
            stop: Some(stop),
            server: Some(server),
        }
    }

    pub fn gossip(&self) -> SocketAddr {
        self.cluster.gossip_addr()
    }

    pub fn ring_ids(&self) -> Vec<String> {
        self.cluster
            .ring()
            .members()
            .iter()
            .map(|m| m.id.clone())
            .collect()
    }

    pub async fn check(&self, key: &str) -> Result<Verdict, CheckFailure> {
        self.engine.check(&Request::new(key, "GET /", 1)).await
    }

    /// Dies without a goodbye: gossip stops, the peer port closes.
    pub async fn kill(mut self) {
        self.cluster.kill();
        self.stop_server().await;
    }

    /// Leaves gracefully, then closes the peer port.
    pub async fn leave(mut self) {
        self.cluster.leave().await;
        self.stop_server().await;
    }

    async fn stop_server(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
    }

    /// Cuts this node off from `others` both ways (gossip and peer calls).
    pub fn partition_from(&self, others: &[&TestNode]) {
        for o in others {
            self.blackhole.block(o.gossip());
            self.blackhole.block(o.grpc);
            o.blackhole.block(self.gossip());
            o.blackhole.block(self.grpc);
        }
    }
}

/// `n` members joined through the first, each with `tweak` applied; returns
/// once every node's ring holds all of them.
pub async fn cluster(n: usize, rules: &str, tweak: impl Fn(&mut ClusterConfig)) -> Vec<TestNode> {
    let first = TestNode::start("node-1", &[], rules, &tweak).await;
    let seed = first.gossip();
    let mut nodes = vec![first];
    for i in 2..=n {
        nodes.push(TestNode::start(&format!("node-{i}"), &[seed], rules, &tweak).await);
    }
    let took = wait_until("every ring holds every member", || {
        nodes.iter().all(|node| node.ring_ids().len() == n)
    })
    .await;
    println!("{n} members converged in {took:?}");
    nodes
}

/// Polls `cond` every 10 ms; panics naming `what` after [`DEADLINE`].
pub async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    loop {
        if cond() {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < DEADLINE,
            "timed out after {DEADLINE:?} waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Like [`wait_until`] with an async condition.
pub async fn wait_until_async<F, Fut>(what: &str, mut cond: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    loop {
        if cond().await {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < DEADLINE,
            "timed out after {DEADLINE:?} waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A key whose owner (on `by`'s ring) is `owner`.
pub fn key_owned_by(by: &TestNode, owner: &str, prefix: &str) -> String {
    (0..100_000)
        .map(|i| format!("{prefix}-{i}"))
        .find(|k| by.cluster.owner_of(k).is_some_and(|o| o.id == owner))
        .expect("some key lands on every member")
}

/// How many of `n` checks of `key`, sent round-robin over `nodes`, are admitted.
pub async fn admitted_round_robin(nodes: &[&TestNode], key: &str, n: usize) -> usize {
    let mut admitted = 0;
    for i in 0..n {
        let v = nodes[i % nodes.len()].check(key).await.expect("a verdict");
        admitted += usize::from(v.allowed);
    }
    admitted
}
