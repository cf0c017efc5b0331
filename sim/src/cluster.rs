//! The cluster launcher: N real `weir serve` processes on loopback, started, watched, faulted and always killed.

use std::collections::BTreeSet;
use std::fs::OpenOptions;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::SimError;
use crate::guard;
use crate::netns::Netns;
use crate::signal::{self, Signal};

/// The cluster secret every node of this run shares, fresh per process:
/// the simulated cluster runs as a deployment should, with gossip and peer
/// calls authenticated (a node without one stays alone).
fn run_secret() -> &'static str {
    static SECRET: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SECRET.get_or_init(|| format!("{:032x}", rand::random::<u128>()))
}

/// How to start the nodes.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    pub bin: PathBuf,
    pub nodes: usize,
    pub strategy: String,
    /// Passed as `--sync-interval` when set; otherwise the node's default.
    pub sync_interval: Option<Duration>,
    pub rules_file: PathBuf,
    /// `weir serve --retry-jitter`.
    pub retry_jitter: bool,
    pub on_owner_failure: Option<String>,
    /// `weir serve --owner-deadline`; None keeps weir's default.
    pub owner_deadline: Option<Duration>,
    /// `weir serve --replicas`; None keeps weir's default.
    pub replicas: Option<usize>,
    pub log_dir: PathBuf,
    /// One network namespace per node, so a partition can cut one off.
    pub netns: bool,
    /// How long membership may take to converge.
    pub form_deadline: Duration,
    /// RUST_LOG for the nodes; None passes this process's own on.
    pub rust_log: Option<String>,
    /// Further `weir serve` flags, the same for every node (`--region`).
    pub extra_args: Vec<String>,
}

impl ClusterOptions {
    pub fn new(
        bin: PathBuf,
        nodes: usize,
        strategy: &str,
        rules_file: PathBuf,
        log_dir: PathBuf,
    ) -> Self {
        ClusterOptions {
            bin,
            nodes,
            strategy: strategy.to_string(),
            sync_interval: None,
            rules_file,
            retry_jitter: false,
            on_owner_failure: None,
            owner_deadline: None,
            replicas: None,
            log_dir,
            netns: false,
            form_deadline: Duration::from_secs(30),
            rust_log: None,
            extra_args: Vec::new(),
        }
    }
}

/// One node's identity and addresses; they survive a restart unchanged.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NodeAddrs {
    pub id: String,
    pub http: SocketAddr,
    pub grpc: SocketAddr,
    pub gossip: SocketAddr,
}

/// A running cluster. Dropping it kills every node it started.
pub struct Cluster {
    opts: ClusterOptions,
    pub nodes: Vec<NodeAddrs>,
    children: Vec<Option<Child>>,
    /// Which nodes should be running and members right now.
    up: Vec<bool>,
    control: reqwest::Client,
    net: Option<Netns>,
}

/// Distinct free loopback ports: TCP for HTTP and gRPC, UDP for gossip.
/// All are held until every one is chosen so none is handed out twice,
/// then released for the nodes to bind.
fn free_addrs(n: usize) -> Result<Vec<NodeAddrs>, SimError> {
    let io = |e| SimError::io("picking a free port", e);
    let mut tcp = Vec::new();
    let mut udp = Vec::new();
    let mut out = Vec::new();
    for k in 0..n {
        let h = TcpListener::bind("127.0.0.1:0").map_err(io)?;
        let g = TcpListener::bind("127.0.0.1:0").map_err(io)?;
        let u = UdpSocket::bind("127.0.0.1:0").map_err(io)?;
        out.push(NodeAddrs {
            id: format!("n{}", k + 1),
            http: h.local_addr().map_err(io)?,
            grpc: g.local_addr().map_err(io)?,
            gossip: u.local_addr().map_err(io)?,
        });
        tcp.extend([h, g]);
        udp.push(u);
    }
    Ok(out)
}

fn last_line(path: &std::path::Path) -> String {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            s.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::to_string)
        })
        .unwrap_or_else(|| "no output".into())
}

impl Cluster {
    /// Starts every node and waits until each lists all of them alive.
    pub async fn start(opts: ClusterOptions) -> Result<Cluster, SimError> {
        if opts.nodes == 0 {
            return Err(SimError::Usage("--nodes must be at least 1".into()));
        }
        std::fs::create_dir_all(&opts.log_dir)
            .map_err(|e| SimError::io(format!("creating {}", opts.log_dir.display()), e))?;
        let (net, nodes) = if opts.netns {
            let net = Netns::create(opts.nodes)?;
            let nodes = (0..opts.nodes)
                .map(|k| NodeAddrs {
                    id: format!("n{}", k + 1),
                    http: SocketAddr::new(Netns::client_ip(k), 8080),
                    grpc: SocketAddr::new(Netns::cluster_ip(k), 8081),
                    gossip: SocketAddr::new(Netns::cluster_ip(k), 7946),
                })
                .collect();
            (Some(net), nodes)
        } else {
            (None, free_addrs(opts.nodes)?)
        };
        let mut cluster = Cluster {
            children: (0..opts.nodes).map(|_| None).collect(),
            up: vec![false; opts.nodes],
            opts,
            nodes,
            control: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(1))
                // Let go before a node closes an idle connection.
                .pool_idle_timeout(weir_client::DEFAULT_IDLE_TIMEOUT)
                .build()
                .expect("static client settings"),
            net,
        };
        // Node 1 is the seed of the others.
        for i in 0..cluster.nodes.len() {
            let seeds = if i == 0 {
                Vec::new()
            } else {
                vec![cluster.nodes[0].gossip]
            };
            cluster.spawn(i, &seeds)?;
        }
        cluster.wait_formed().await?;
        Ok(cluster)
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn options(&self) -> &ClusterOptions {
        &self.opts
    }

    pub fn http_base(&self, i: usize) -> String {
        format!("http://{}", self.nodes[i].http)
    }

    pub fn grpc_uri(&self, i: usize) -> String {
        format!("http://{}", self.nodes[i].grpc)
    }

    pub fn is_up(&self, i: usize) -> bool {
        self.up[i]
    }

    /// Node `i`'s process id while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.children[i].as_ref().map(Child::id)
    }

    fn log_path(&self, i: usize) -> PathBuf {
        self.opts.log_dir.join(format!("{}.log", self.nodes[i].id))
    }

    fn spawn(&mut self, i: usize, seeds: &[SocketAddr]) -> Result<(), SimError> {
        let n = &self.nodes[i];
        let o = &self.opts;
        let mut cmd = match &self.net {
            Some(net) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &net.namespace(i)]).arg(&o.bin);
                c
            }
            None => Command::new(&o.bin),
        };
        cmd.arg("serve")
            .args(["--node-id", &n.id])
            .args(["--http", &n.http.to_string()])
            .args(["--grpc", &n.grpc.to_string()])
            .args(["--gossip", &n.gossip.to_string()])
            .arg("--rules")
            .arg(&o.rules_file)
            .args(["--strategy", &o.strategy])
            .args(&o.extra_args)
            // A rolling restart waits on each drain; nothing is in flight for long.
            .args(["--drain-timeout", "2s"])
            // From the environment, as the deploy files pass it.
            .env("WEIR_CLUSTER_SECRET", run_secret());
        if !seeds.is_empty() {
            let s: Vec<String> = seeds.iter().map(ToString::to_string).collect();
            cmd.args(["--seeds", &s.join(",")]);
        }
        if o.retry_jitter {
            cmd.arg("--retry-jitter");
        }
        if let Some(f) = &o.on_owner_failure {
            cmd.args(["--on-owner-failure", f]);
        }
        if let Some(d) = o.sync_interval {
            cmd.args(["--sync-interval", &format!("{}ms", d.as_millis())]);
        }
        if let Some(d) = o.owner_deadline {
            cmd.args(["--owner-deadline", &format!("{}ms", d.as_millis())]);
        }
        if let Some(n) = o.replicas {
            cmd.args(["--replicas", &n.to_string()]);
        }
        if let Some(filter) = &o.rust_log {
            cmd.env("RUST_LOG", filter);
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(i))
            .map_err(|e| SimError::io(format!("opening {}", self.log_path(i).display()), e))?;
        let err = log
            .try_clone()
            .map_err(|e| SimError::io("duplicating a log handle", e))?;
        cmd.stdin(Stdio::null()).stdout(log).stderr(err);
        signal::die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(|e| SimError::io(format!("starting {}", o.bin.display()), e))?;
        guard::track(child.id());
        self.children[i] = Some(child);
        self.up[i] = true;
        Ok(())
    }

    /// Ids of the nodes that should be members.
    fn expected(&self) -> BTreeSet<String> {
        (0..self.len())
            .filter(|&i| self.up[i])
            .map(|i| self.nodes[i].id.clone())
            .collect()
    }

    /// This node's view: (member id, state) pairs.
    pub async fn members(&self, i: usize) -> Result<Vec<(String, String)>, String> {
        let v: serde_json::Value = self
            .control
            .get(format!("{}/v1/cluster", self.http_base(i)))
            .send()
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        Ok(v["members"]
            .as_array()
            .map(|ms| {
                ms.iter()
                    .map(|m| {
                        let s = |f: &str| m[f].as_str().unwrap_or_default().to_string();
                        (s("id"), s("state"))
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    /// The strategy node `i` says it runs.
    pub async fn reported_strategy(&self, i: usize) -> Option<String> {
        let v: serde_json::Value = self
            .control
            .get(format!("{}/v1/cluster", self.http_base(i)))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        v["strategy"].as_str().map(str::to_string)
    }

    async fn ready(&self, i: usize) -> bool {
        self.control
            .get(format!("{}/readyz", self.http_base(i)))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    }

    /// Fails if a node that should be running has exited by itself.
    fn check_children(&mut self) -> Result<(), SimError> {
        for i in 0..self.len() {
            if !self.up[i] {
                continue;
            }
            if let Some(c) = &mut self.children[i] {
                if let Ok(Some(status)) = c.try_wait() {
                    guard::untrack(c.id());
                    self.children[i] = None;
                    self.up[i] = false;
                    return Err(SimError::NodeExited {
                        node: self.nodes[i].id.clone(),
                        status: status.to_string(),
                        line: last_line(&self.log_path(i)),
                    });
                }
            }
        }
        Ok(())
    }

    /// Polls until every running node is ready and lists exactly the running
    /// nodes as alive.
    pub async fn wait_formed(&mut self) -> Result<Duration, SimError> {
        let started = Instant::now();
        let deadline = started + self.opts.form_deadline;
        loop {
            self.check_children()?;
            let expected = self.expected();
            let mut lagging = None;
            for i in (0..self.len()).filter(|&i| self.up[i]) {
                if !self.ready(i).await {
                    lagging = Some(format!("{} is not ready", self.nodes[i].id));
                    break;
                }
                let alive: BTreeSet<String> = match self.members(i).await {
                    Ok(ms) => ms
                        .into_iter()
                        .filter(|(_, s)| s == "alive")
                        .map(|(id, _)| id)
                        .collect(),
                    Err(e) => {
                        lagging = Some(format!("{}: {e}", self.nodes[i].id));
                        break;
                    }
                };
                if alive != expected {
                    lagging = Some(format!(
                        "{} sees {} of {} members alive",
                        self.nodes[i].id,
                        alive.intersection(&expected).count(),
                        expected.len()
                    ));
                    break;
                }
            }
            match lagging {
                None => return Ok(started.elapsed()),
                Some(detail) if Instant::now() >= deadline => {
                    return Err(SimError::NotFormed {
                        secs: self.opts.form_deadline.as_secs(),
                        detail,
                    })
                }
                Some(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    fn signal(&self, i: usize, sig: Signal) -> Result<(), SimError> {
        let Some(c) = &self.children[i] else {
            return Ok(());
        };
        signal::send(c.id(), sig)
            .map_err(|e| SimError::io(format!("signalling {}", self.nodes[i].id), e))
    }

    fn reap(&mut self, i: usize) {
        if let Some(mut c) = self.children[i].take() {
            let _ = c.wait();
            guard::untrack(c.id());
        }
        self.up[i] = false;
    }

    /// SIGKILL: the node vanishes without a word to its peers.
    pub fn kill(&mut self, i: usize) -> Result<(), SimError> {
        self.signal(i, Signal::Cont)?;
        self.signal(i, Signal::Kill)?;
        self.reap(i);
        Ok(())
    }

    /// SIGSTOP: the process stays, its sockets stay open, nothing answers.
    pub fn pause(&mut self, i: usize) -> Result<(), SimError> {
        self.signal(i, Signal::Stop)?;
        self.up[i] = false;
        Ok(())
    }

    pub fn resume(&mut self, i: usize) -> Result<(), SimError> {
        self.signal(i, Signal::Cont)?;
        self.up[i] = true;
        Ok(())
    }

    /// SIGSTOP for `d`, then SIGCONT: a stall (a long GC pause, a starved
    /// scheduler), not an outage. The node stays up for the load.
    pub async fn stall(&self, i: usize, d: Duration) -> Result<(), SimError> {
        self.signal(i, Signal::Stop)?;
        tokio::time::sleep(d).await;
        self.signal(i, Signal::Cont)
    }

    /// SIGTERM and wait for the node to drain and exit (SIGKILL after
    /// `deadline`). How it exited is not judged here: a fault may stop a
    /// node mid-drain; [`Cluster::shut_down`] is the clean stop.
    pub async fn terminate(&mut self, i: usize, deadline: Duration) -> Result<(), SimError> {
        self.signal(i, Signal::Term)?;
        let _ = self.left_by(i, Instant::now() + deadline, deadline).await;
        Ok(())
    }

    /// SIGTERM to every running node at once, then waits for each to drain
    /// and exit: the whole cluster stopped as an operator stops it, each
    /// node through its own shutdown (so a profiling build writes its
    /// profile, which a SIGKILL never lets it do). A node still running
    /// after `deadline` is killed; the first node that did not leave with
    /// success is the error.
    pub async fn shut_down(&mut self, deadline: Duration) -> Result<(), SimError> {
        for i in 0..self.len() {
            self.signal(i, Signal::Term)?;
        }
        let until = Instant::now() + deadline;
        let mut failed = None;
        for i in 0..self.len() {
            if let Some(status) = self.left_by(i, until, deadline).await {
                failed.get_or_insert(SimError::NodeExited {
                    node: self.nodes[i].id.clone(),
                    status,
                    line: last_line(&self.log_path(i)),
                });
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// Waits until `until` for node `i` to exit: None when it left with
    /// success (or was not running), else how it failed. One still running
    /// then is killed.
    async fn left_by(&mut self, i: usize, until: Instant, deadline: Duration) -> Option<String> {
        loop {
            let exited = self.children[i].as_mut()?.try_wait();
            match exited {
                Ok(Some(status)) => {
                    self.reap(i);
                    return (!status.success()).then(|| status.to_string());
                }
                Ok(None) if Instant::now() < until => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Ok(None) => {
                    let _ = self.kill(i);
                    return Some(format!("still running {deadline:?} after SIGTERM, killed"));
                }
                Err(e) => {
                    let _ = self.kill(i);
                    return Some(format!("waiting for it: {e}"));
                }
            }
        }
    }

    /// Starts node `i` again with its old id and addresses, seeded by every
    /// other running node (the first seed may be the one restarting).
    pub fn restart(&mut self, i: usize) -> Result<(), SimError> {
        if self.children[i].is_some() {
            self.kill(i)?;
        }
        let seeds: Vec<SocketAddr> = (0..self.len())
            .filter(|&j| j != i && self.up[j])
            .map(|j| self.nodes[j].gossip)
            .collect();
        self.spawn(i, &seeds)
    }

    /// Starts node `i`, which is not running, seeded by node 1 alone, as a
    /// new member joins: the others learn of it from node 1's gossip, not
    /// all at once from its own announcement. Node `i` is not node 1.
    pub fn join_through_first(&mut self, i: usize) -> Result<(), SimError> {
        let seed = self.nodes[0].gossip;
        self.spawn(i, &[seed])
    }

    /// Cuts node `i` from its peers (network namespaces only).
    pub fn cut(&mut self, i: usize) -> Result<(), SimError> {
        let net = self
            .net
            .as_ref()
            .ok_or_else(|| SimError::Usage("partition needs a namespaced cluster".into()))?;
        net.cut(i)?;
        self.up[i] = false;
        Ok(())
    }

    pub fn heal(&mut self, i: usize) -> Result<(), SimError> {
        if let Some(net) = &self.net {
            net.heal(i)?;
        }
        self.up[i] = self.children[i].is_some();
        Ok(())
    }

    pub fn has_netns(&self) -> bool {
        self.net.is_some()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.len() {
            let _ = self.kill(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_addresses_are_distinct() {
        let a = free_addrs(4).expect("ports");
        let mut tcp: Vec<u16> = a
            .iter()
            .flat_map(|n| [n.http.port(), n.grpc.port()])
            .collect();
        tcp.sort_unstable();
        tcp.dedup();
        assert_eq!(tcp.len(), 8);
        assert_eq!(a[3].id, "n4");
    }
}
