//! Cluster members for tests: on real sockets (UDP gossip, the Peer service on a real port) or on the in-memory network, where partitions and crashes are injected.
#![allow(dead_code)]

pub mod joining;

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Server;
use weir_cluster::membership::NodeIdentity;
use weir_cluster::memory::MemoryNet;
use weir_cluster::net::direct::{is_direct, DirectServer};
use weir_cluster::{Cluster, ClusterConfig, Engine, GossipProfile};
use weir_core::{
    CheckError, CheckRequest, Clock, Limiter, LimiterConfig, Rule, RuleSet, SystemClock, Verdict,
};
use weir_proto::weir::v1::{CounterOp, DecideRequest, OpResult};

/// One limit: 20 per 60 s per client, exact (sliding log).
pub const RULES: &str = r#"
[[rule]]
name = "per-client"
algorithm = "sliding_window_log"
limit = 20
window = "60s"
"#;
pub const LIMIT: usize = 20;

/// One limit of 1000 per 60 s (fixed window): room for every check a
/// replication test sends.
pub const ROOMY_RULES: &str = r#"
[[rule]]
name = "r"
algorithm = "fixed_window"
limit = 1000
window = "60s"
"#;

/// Longest any awaited condition may take. A passing condition returns at
/// once; this is only how long a failing test hangs.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// Where a member's traffic goes.
enum Wire {
    /// Real sockets: the Peer service on its own port, stopped on exit.
    Sockets {
        grpc: SocketAddr,
        stop: Option<oneshot::Sender<()>>,
        server: Option<JoinHandle<()>>,
    },
    /// The in-memory network, where this member has a host of its own.
    Memory { net: MemoryNet, host: IpAddr },
}

pub struct TestNode {
    pub id: String,
    pub engine: Arc<Engine>,
    pub cluster: Arc<Cluster>,
    wire: Wire,
}

pub fn loopback0() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn limiter(rules: &str, clock: Arc<dyn Clock>) -> Arc<Limiter> {
    Arc::new(Limiter::new(
        RuleSet::from_toml(rules).unwrap(),
        clock,
        LimiterConfig::default(),
    ))
}

/// The secret test members share unless a test says otherwise: a cluster
/// runs with one, as every deployment should.
pub const SECRET: &str = "weir-test-cluster-secret";

/// The fast gossip profile, the test secret and a 1 s owner deadline
/// (generous: a debug build on a loaded machine must not fall back by
/// accident), seeded with `seeds`; `tweak` may change any of it.
fn config(seeds: &[SocketAddr], tweak: impl FnOnce(&mut ClusterConfig)) -> ClusterConfig {
    let mut config = ClusterConfig {
        secret: Some(SECRET.into()),
        seeds: seeds.iter().map(ToString::to_string).collect(),
        gossip_profile: GossipProfile::Fast,
        owner_deadline: Duration::from_secs(1),
        rules_sync_interval: Duration::from_millis(500),
        ..ClusterConfig::default()
    };
    tweak(&mut config);
    config
}

/// Accepts on `listener`: direct connections are served by `direct`,
/// every other connection comes out for the gRPC server. When the stream
/// is dropped, with the server, accepting stops and the direct
/// connections close as a node's do: the calls that have arrived are
/// answered first.
fn serve_direct(
    listener: TcpListener,
    direct: DirectServer,
) -> impl futures::Stream<Item = std::io::Result<TcpStream>> {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let (open, closing) = tokio::sync::watch::channel(());
    let accepting = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            // Without TCP_NODELAY a small answer can wait on a delayed ACK.
            let _ = tcp.set_nodelay(true);
            let (tx, direct, mut closing) = (tx.clone(), direct.clone(), closing.clone());
            tokio::spawn(async move {
                let closing = async move {
                    let _ = closing.changed().await;
                };
                let mut first = [0u8; 1];
                match tcp.peek(&mut first).await {
                    Ok(1) if is_direct(first[0]) => direct.serve(tcp, DEADLINE, closing).await,
                    Ok(1) => {
                        let _ = tx.send(Ok(tcp)).await;
                    }
                    _ => {}
                }
            });
        }
    });
    let mut served = Served {
        accepting,
        _open: open,
        conns: rx,
    };
    futures::stream::poll_fn(move |cx| served.conns.poll_recv(cx))
}

/// The gRPC server's connections; dropped, it stops accepting and closes
/// the direct connections (`_open` is their closing signal).
struct Served {
    accepting: JoinHandle<()>,
    _open: tokio::sync::watch::Sender<()>,
    conns: tokio::sync::mpsc::Receiver<std::io::Result<TcpStream>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl TestNode {
    /// A member on real sockets on loopback.
    pub async fn start(
        id: &str,
        seeds: &[SocketAddr],
        rules: &str,
        tweak: impl FnOnce(&mut ClusterConfig),
    ) -> TestNode {
        let listener = TcpListener::bind(loopback0()).await.unwrap();
        let grpc = listener.local_addr().unwrap();
        let identity = NodeIdentity::new(id, loopback0(), grpc);
        let limiter = limiter(rules, Arc::new(SystemClock::new()));
        let cluster = Cluster::start(config(seeds, tweak), identity, loopback0(), limiter)
            .await
            .unwrap();
        let cluster = Arc::new(cluster);
        let (stop, stopped) = oneshot::channel::<()>();
        let service = cluster.peer_service();
        let incoming = serve_direct(listener, cluster.direct_server());
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
            engine: Arc::new(Engine::clustered(cluster.clone())),
            cluster,
            wire: Wire::Sockets {
                grpc,
                stop: Some(stop),
                server: Some(server),
            },
        }
    }

    /// A member on the in-memory network `net`, deciding on its virtual clock.
    pub async fn start_in(
        net: &MemoryNet,
        id: &str,
        seeds: &[SocketAddr],
        rules: &str,
        tweak: impl FnOnce(&mut ClusterConfig),
    ) -> TestNode {
        let cluster = net
            .start(id, config(seeds, tweak), limiter(rules, net.clock()))
            .await
            .unwrap();
        Self::on(net, id, cluster)
    }

    /// A member started on `host`, a killed member's address on the
    /// in-memory network, as its process restarted: the same id and
    /// address, a new boot, no counters.
    pub async fn restart_in(
        net: &MemoryNet,
        host: IpAddr,
        id: &str,
        seeds: &[SocketAddr],
        rules: &str,
        tweak: impl FnOnce(&mut ClusterConfig),
    ) -> TestNode {
        let cluster = net
            .restart(host, id, config(seeds, tweak), limiter(rules, net.clock()))
            .await
            .unwrap();
        Self::on(net, id, cluster)
    }

    fn on(net: &MemoryNet, id: &str, cluster: Cluster) -> TestNode {
        let cluster = Arc::new(cluster);
        TestNode {
            id: id.to_string(),
            engine: Arc::new(Engine::clustered(cluster.clone())),
            wire: Wire::Memory {
                net: net.clone(),
                host: cluster.identity().gossip.ip(),
            },
            cluster,
        }
    }

    pub fn gossip(&self) -> SocketAddr {
        self.cluster.identity().gossip
    }

    /// Where peers call this member.
    pub fn grpc(&self) -> SocketAddr {
        self.cluster.identity().grpc
    }

    pub fn ring_ids(&self) -> Vec<String> {
        self.cluster
            .ring()
            .members()
            .iter()
            .map(|m| m.id.clone())
            .collect()
    }

    /// This member's host on the in-memory network.
    pub fn host(&self) -> IpAddr {
        self.memory().1
    }

    pub async fn check(&self, key: &str) -> Result<Verdict, CheckError> {
        self.engine.check(&CheckRequest::new(key, "GET /")).await
    }

    /// Dies without a goodbye: gossip stops, the peer port closes.
    pub async fn kill(mut self) {
        self.cluster.kill();
        if let Wire::Memory { net, host } = &self.wire {
            net.crash(*host);
        }
        self.stop_server().await;
    }

    /// Leaves gracefully, then closes the peer port.
    pub async fn leave(mut self) {
        self.cluster.leave().await;
        self.stop_server().await;
    }

    async fn stop_server(&mut self) {
        if let Wire::Sockets { stop, server, .. } = &mut self.wire {
            if let Some(stop) = stop.take() {
                let _ = stop.send(());
            }
            if let Some(server) = server.take() {
                let _ = server.await;
            }
        }
    }

    fn memory(&self) -> (&MemoryNet, IpAddr) {
        match &self.wire {
            Wire::Memory { net, host } => (net, *host),
            Wire::Sockets { .. } => panic!("partitions need members on the in-memory network"),
        }
    }

    /// Cuts this member off from `others` both ways (gossip and peer calls).
    pub fn partition_from(&self, others: &[&TestNode]) {
        let (net, me) = self.memory();
        let hosts: Vec<IpAddr> = others.iter().map(|o| o.memory().1).collect();
        net.partition(&[me], &hosts);
    }

    /// Every partition of this member's network heals.
    pub fn heal(&self) {
        self.memory().0.heal();
    }
}

/// `n` members joined through the first, each made by `start`; returns
/// once every node's ring holds all of them and no node still waits for
/// an older one's word that its handoff is over (until then it asks that
/// member about some of its keys: docs/cluster.md, "When the ring
/// changes").
async fn assemble<F, Fut>(n: usize, start: F) -> Vec<TestNode>
where
    F: Fn(String, Vec<SocketAddr>) -> Fut,
    Fut: Future<Output = TestNode>,
{
    let first = start("node-1".into(), Vec::new()).await;
    let seed = first.gossip();
    let mut nodes = vec![first];
    for i in 2..=n {
        nodes.push(start(format!("node-{i}"), vec![seed]).await);
    }
    let took = wait_until("every ring holds every member", || {
        nodes
            .iter()
            .all(|node| node.ring_ids().len() == n && node.cluster.awaiting().is_empty())
    })
    .await;
    println!("{n} members converged in {took:?}");
    nodes
}

/// `n` members on real sockets, each with `tweak` applied.
pub async fn cluster(n: usize, rules: &str, tweak: impl Fn(&mut ClusterConfig)) -> Vec<TestNode> {
    let tweak = &tweak;
    assemble(n, |id, seeds| async move {
        TestNode::start(&id, &seeds, rules, tweak).await
    })
    .await
}

/// `n` members on the in-memory network `net`, each with `tweak` applied.
pub async fn memory_cluster(
    net: &MemoryNet,
    n: usize,
    rules: &str,
    tweak: impl Fn(&mut ClusterConfig),
) -> Vec<TestNode> {
    let tweak = &tweak;
    assemble(n, |id, seeds| async move {
        TestNode::start_in(net, &id, &seeds, rules, tweak).await
    })
    .await
}

/// Every setting at its default but the seeds the harness fills in.
pub fn defaults(c: &mut ClusterConfig) {
    *c = ClusterConfig {
        seeds: std::mem::take(&mut c.seeds),
        secret: c.secret.take(),
        ..ClusterConfig::default()
    };
}

/// `n` members on a fresh in-memory network at the default settings (then
/// `tweak`), for tests under tokio's paused clock.
pub async fn paused_members(
    n: usize,
    rules: &str,
    tweak: impl Fn(&mut ClusterConfig),
) -> (MemoryNet, Vec<TestNode>) {
    let net = MemoryNet::new();
    let nodes = memory_cluster(&net, n, rules, |c| {
        defaults(c);
        tweak(c);
    })
    .await;
    (net, nodes)
}

/// Polls `cond` every 10 ms; panics naming `what` after [`DEADLINE`].
pub async fn wait_until(what: &str, cond: impl FnMut() -> bool) -> Duration {
    wait_until_showing(what, cond, String::new).await
}

/// [`wait_until`], and a timeout also shows `state`: what a rare failure
/// needs to say which way it went.
pub async fn wait_until_showing(
    what: &str,
    mut cond: impl FnMut() -> bool,
    state: impl Fn() -> String,
) -> Duration {
    let started = Instant::now();
    loop {
        if cond() {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < DEADLINE,
            "timed out after {DEADLINE:?} waiting until {what}{}",
            state()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Each node's view of the members, for a failure message.
pub fn views(nodes: &[TestNode]) -> String {
    nodes
        .iter()
        .map(|n| {
            let members: Vec<String> = n
                .cluster
                .members_status()
                .iter()
                .map(|m| format!("{} {:?}", m.id, m.state))
                .collect();
            format!(
                "\n  {}: ring {:?}, members [{}], gossip {:?}",
                n.id,
                n.ring_ids(),
                members.join(", "),
                n.cluster.gossip_stats()
            )
        })
        .collect()
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

/// `op` sent to `to` by a gateway played by hand as `from`: the answer,
/// and how long it took.
pub async fn decided_by_hand(
    net: &MemoryNet,
    to: &NodeIdentity,
    op: CounterOp,
    from: &str,
) -> (OpResult, Duration) {
    let (_, gateway) = net.link();
    let req = DecideRequest {
        ops: vec![op],
        rules_version: 0,
        from_node: from.into(),
    };
    let sent = tokio::time::Instant::now();
    let mut answer = gateway
        .decide(to, req, Duration::from_secs(2))
        .await
        .unwrap();
    (answer.results.remove(0), sent.elapsed())
}

/// A key node-1 owns while it and node-2 are the members, and node-3 once
/// it joins them. node-3 copies it to node-1 (the key's owner were node-3
/// gone), which then sends on the checks it gets for it; until the first
/// copy lands, only node-1's handoff tells it where the count went.
pub fn taken_from_node_1_by_node_3(prefix: &str) -> String {
    let ring = |ids: &[&str]| {
        let addr = "127.0.0.1:1".parse().unwrap();
        let members: Vec<_> = ids
            .iter()
            .map(|id| NodeIdentity::new(*id, addr, addr))
            .collect();
        weir_cluster::ring::Ring::with_default_vnodes(&members)
    };
    let (before, after) = (
        ring(&["node-1", "node-2"]),
        ring(&["node-1", "node-2", "node-3"]),
    );
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .find(|k| before.owner_id(k) == Some("node-1") && after.owner_id(k) == Some("node-3"))
        .unwrap()
}

/// [`RULES`]' one rule, as `node` has it.
pub fn per_client(node: &TestNode) -> Arc<Rule> {
    let rules = node.engine.limiter().rules();
    rules.get("per-client").unwrap().1.clone()
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
