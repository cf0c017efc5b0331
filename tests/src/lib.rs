//! Black-box test helpers: nodes on ephemeral ports, an HTTP client, polling with a deadline.
#![forbid(unsafe_code)]

pub mod upstream;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::Value;
use tempfile::TempDir;
use weir_node::{Node, NodeState, ServeConfig};
use weir_proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use weir_proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use weir_proto::envoy::service::ratelimit::v3::RateLimitRequest;

/// One admission per client an hour: a rule whose state a test can read at
/// once, the second check of a key always refused.
pub const ONE_PER_HOUR: &str = r#"
[[rule]]
name      = "per-client"
algorithm = "sliding_window_log"
limit     = 1
window    = "1h"
"#;

/// How long any awaited condition may take before the test fails. Generous:
/// a loaded CI machine is slow, and a passing condition returns at once.
pub const DEADLINE: Duration = Duration::from_secs(15);

/// Polls `cond` until it holds, failing the test with `what` after [`DEADLINE`].
pub async fn wait_until<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let give_up = tokio::time::Instant::now() + DEADLINE;
    loop {
        if cond().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "timed out after {DEADLINE:?} waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One node on 127.0.0.1:0 with its rules in a file of its own.
pub struct TestNode {
    node: Option<Node>,
    pub base: String,
    pub client: reqwest::Client,
    pub rules_path: PathBuf,
    _dir: TempDir,
}

impl TestNode {
    /// Starts a node enforcing `rules` (TOML); `adjust` may change the config.
    pub async fn start(rules: &str, adjust: impl FnOnce(&mut ServeConfig)) -> TestNode {
        let dir = tempfile::tempdir().expect("temp dir");
        let rules_path = dir.path().join("rules.toml");
        std::fs::write(&rules_path, rules).expect("write rules file");
        let mut config = ServeConfig {
            rules_file: Some(rules_path.clone()),
            ..ServeConfig::ephemeral()
        };
        adjust(&mut config);
        let node = Node::start(config).await.expect("node starts");
        let base = format!("http://{}", node.http_addr());
        TestNode {
            node: Some(node),
            base,
            client: client(),
            rules_path,
            _dir: dir,
        }
    }

    pub fn node(&self) -> &Node {
        self.node.as_ref().expect("node running")
    }

    pub fn state(&self) -> &Arc<NodeState> {
        self.node().state()
    }

    /// Takes the node out, e.g. to shut it down while a request is in flight.
    pub fn take(&mut self) -> Node {
        self.node.take().expect("node running")
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `POST /v1/check` with a JSON body.
    pub async fn check(&self, body: Value) -> reqwest::Response {
        self.check_raw(body.to_string()).await
    }

    /// `POST /v1/check` with any bytes as the body.
    pub async fn check_raw(&self, body: impl Into<reqwest::Body>) -> reqwest::Response {
        self.client
            .post(self.url("/v1/check"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("check request")
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(self.url(path))
            .send()
            .await
            .expect("GET request")
    }

    pub async fn get_json(&self, path: &str) -> Value {
        self.get(path).await.json().await.expect("JSON body")
    }

    /// The node's Prometheus exposition.
    pub async fn metrics(&self) -> String {
        self.get("/metrics")
            .await
            .text()
            .await
            .expect("metrics text")
    }

    /// One sample of the exposition, by its full name with labels
    /// (`weir_checks_total{rule="r",verdict="allowed"}`); None if absent.
    pub async fn metric(&self, series: &str) -> Option<f64> {
        metric_value(&self.metrics().await, series)
    }

    pub fn write_rules(&self, rules: &str) {
        std::fs::write(&self.rules_path, rules).expect("rewrite rules file");
    }

    /// Replaces the rules file the way editors save: a new file renamed over it.
    pub fn replace_rules(&self, rules: &str) {
        replace_file(&self.rules_path, rules);
    }

    pub async fn shutdown(mut self) {
        if let Some(node) = self.node.take() {
            node.shutdown().await;
        }
    }
}

/// An HTTP client for tests that never goes through a proxy from the
/// environment. Its pool lets an idle connection go well before a node
/// closes it (at the header-read timeout), so no request is written to a
/// connection the node is closing.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(DEADLINE)
        .pool_idle_timeout(weir_node::ServeConfig::default().limits.header_read_timeout / 2)
        .build()
        .expect("HTTP client")
}

pub fn replace_file(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write temp file");
    std::fs::rename(&tmp, path).expect("rename over the file");
}

pub fn metric_value(exposition: &str, series: &str) -> Option<f64> {
    exposition.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.trim().parse().ok()
    })
}

/// A response header as text, or None.
pub fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// A numeric response header; panics naming it when missing or not a number.
pub fn header_u64(headers: &HeaderMap, name: &str) -> u64 {
    header(headers, name)
        .unwrap_or_else(|| panic!("missing header {name}"))
        .parse()
        .unwrap_or_else(|_| panic!("header {name} is not a number"))
}

/// Status, headers and JSON body of a response, so a test can read all three.
pub async fn parts(res: reqwest::Response) -> (u16, HeaderMap, Value) {
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let body = res.json().await.expect("JSON body");
    (status, headers, body)
}

/// Unix seconds now, from the wall clock, to compare X-RateLimit-Reset with.
pub fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

/// Writes `request` on a fresh connection and reads until the server closes
/// it; for what an HTTP client library will not send (a chunked body, a
/// request held half-written).
pub async fn raw_exchange(addr: std::net::SocketAddr, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("write request");
    let mut out = Vec::new();
    tokio::time::timeout(DEADLINE, stream.read_to_end(&mut out))
        .await
        .expect("server closes the connection")
        .expect("read response");
    String::from_utf8_lossy(&out).into_owned()
}

/// Cases for a property test: `PROPTEST_CASES` when set (a long run),
/// else `default`, sized for CI.
pub fn proptest_cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The cluster secret of test clusters.
pub const CLUSTER_SECRET: &str = "weir-black-box-test-secret";

/// Makes `c` cluster member `id`, joining through `seed` (none: the first
/// member), with the test secret, the fast gossip profile and a one-second
/// owner deadline, generous so a slow debug build never falls back by accident.
pub fn cluster_member(c: &mut ServeConfig, id: &str, seed: Option<std::net::SocketAddr>) {
    c.node_id = Some(id.to_string());
    c.cluster.secret = Some(CLUSTER_SECRET.to_string());
    c.cluster.seeds = seed.map(|s| s.to_string()).into_iter().collect();
    c.cluster.gossip_profile = weir_cluster::GossipProfile::Fast;
    c.cluster.owner_deadline = Duration::from_secs(1);
}

/// Cluster members `node-1` to `node-{n}`, each joined through the first
/// (see [`cluster_member`]) and changed by `adjust`; returns once every one
/// of them lists `n` alive members and the joins have [`settled`].
pub async fn start_cluster(
    n: usize,
    rules: &str,
    adjust: impl Fn(&mut ServeConfig),
) -> Vec<TestNode> {
    let mut nodes: Vec<TestNode> = Vec::new();
    for i in 1..=n {
        let seed = nodes.first().map(|f| f.state().config.gossip);
        let id = format!("node-{i}");
        nodes.push(
            TestNode::start(rules, |c| {
                cluster_member(c, &id, seed);
                adjust(c);
            })
            .await,
        );
    }
    for node in &nodes {
        wait_until(
            &format!("{} lists {n} alive members", node.state().node_id),
            || async {
                let doc = node.get_json("/v1/cluster").await;
                let alive = doc["members"]
                    .as_array()
                    .map_or(0, |m| m.iter().filter(|m| m["state"] == "alive").count());
                alive == n
            },
        )
        .await;
        settled(node).await;
    }
    nodes
}

/// Waits until `node` waits for no older member's word that its sweep
/// after the join is over. Until that word, the older member decides the
/// checks that reach it for the keys on their way to `node` itself (on
/// the count it still holds), and a test that reads where a check went,
/// or kills `node` and expects its keys' checks to find it gone, must
/// wait for it.
pub async fn settled(node: &TestNode) {
    let cluster = node.state().engine.cluster().expect("a cluster member");
    let what = format!(
        "{} heard the older members' sweeps are over",
        node.state().node_id
    );
    wait_until(&what, || async { cluster.awaiting().is_empty() }).await;
}

/// An Envoy RLS request in `domain` with one descriptor, `client=<client>`.
pub fn rls_request(domain: &str, client: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "client".into(),
                value: client.into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

/// A TCP relay on 127.0.0.1:0 to a target set later (nodes of two regions
/// each need the other's address at start), which a test can cut: a cut
/// drops every open connection and every new one until healed.
pub struct Relay {
    pub addr: std::net::SocketAddr,
    target: Arc<std::sync::Mutex<Option<std::net::SocketAddr>>>,
    cut: Arc<std::sync::atomic::AtomicBool>,
    conns: Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Relay {
    pub async fn start() -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind relay");
        let addr = listener.local_addr().expect("relay address");
        let target: Arc<std::sync::Mutex<Option<std::net::SocketAddr>>> = Arc::default();
        let cut: Arc<std::sync::atomic::AtomicBool> = Arc::default();
        let conns: Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let accept = {
            let (target, cut, conns) = (target.clone(), cut.clone(), conns.clone());
            tokio::spawn(async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    let to = *target.lock().unwrap();
                    if cut.load(std::sync::atomic::Ordering::SeqCst) {
                        continue;
                    }
                    let Some(to) = to else { continue };
                    let task = tokio::spawn(async move {
                        if let Ok(mut out) = tokio::net::TcpStream::connect(to).await {
                            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                        }
                    });
                    // Checked again under the lock a cut drains, so a cut
                    // since the check above leaves no connection behind.
                    let mut conns = conns.lock().unwrap();
                    if cut.load(std::sync::atomic::Ordering::SeqCst) {
                        task.abort();
                    } else {
                        conns.push(task.abort_handle());
                    }
                }
            })
        };
        Relay {
            addr,
            target,
            cut,
            conns,
            accept,
        }
    }

    pub fn point_at(&self, to: std::net::SocketAddr) {
        *self.target.lock().unwrap() = Some(to);
    }

    /// Cuts (true) or heals (false) the link.
    pub fn set_cut(&self, cut: bool) {
        self.cut.store(cut, std::sync::atomic::Ordering::SeqCst);
        if cut {
            for c in self.conns.lock().unwrap().drain(..) {
                c.abort();
            }
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
        self.set_cut(true);
    }
}
