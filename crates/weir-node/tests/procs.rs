//! Real `weir serve` processes on loopback ports, for tests that kill, starve or pause them.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use weir_cluster::membership::NodeIdentity;
use weir_cluster::ring::Ring;

pub const WEIR: &str = env!("CARGO_BIN_EXE_weir");

/// A `weir serve` child, killed when dropped.
pub struct Proc {
    pub child: Child,
    pub http: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    /// SIGKILL: no goodbye, no hand-off.
    pub fn kill(&mut self) {
        self.child.kill().expect("SIGKILL");
        let _ = self.child.wait();
    }
}

/// Starts `weir serve` with only the flags a test needs to run several
/// nodes on one host (ports 0, its rules, a seed); every other setting is
/// the binary's default.
pub fn spawn(id: &str, rules: &Path, seed: Option<&str>, extra: &[&str]) -> Proc {
    let mut cmd = Command::new(WEIR);
    cmd.args(["serve", "--log-format", "json", "--node-id", id])
        .args(["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
        .args(["--gossip", "127.0.0.1:0"])
        .arg("--rules")
        .arg(rules)
        .args(extra)
        .env("RUST_LOG", "info")
        .env("WEIR_CLUSTER_SECRET", "weir-node-test-secret")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(seed) = seed {
        cmd.args(["--seeds", seed]);
    }
    let mut child = cmd.spawn().expect("spawn weir serve");
    // The chosen ports are only in the log; keep draining it afterwards so
    // the child never blocks on a full pipe.
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let http = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the node logs that it serves");
        let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        if v["fields"]["message"] == "weir node serving" {
            break v["fields"]["http"].as_str().unwrap().to_string();
        }
    };
    std::thread::spawn(move || for _ in rx {});
    Proc {
        child,
        http: format!("http://{http}"),
    }
}

/// Its pool lets an idle connection go well before a node closes it (at
/// the header-read timeout), so no check is written to a closing one.
pub fn client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(timeout)
        .pool_idle_timeout(weir_node::ServeConfig::default().limits.header_read_timeout / 2)
        .build()
        .unwrap()
}

pub async fn cluster_doc(client: &reqwest::Client, p: &Proc) -> Value {
    client
        .get(format!("{}/v1/cluster", p.http))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

pub fn live_ids(doc: &Value) -> Vec<String> {
    doc["members"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["state"] != "down")
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect()
}

pub async fn wait_for(
    what: &str,
    limit: Duration,
    mut cond: impl AsyncFnMut() -> bool,
) -> Duration {
    let started = Instant::now();
    loop {
        if cond().await {
            return started.elapsed();
        }
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `names` started as one cluster joined through the first, each with
/// `extra` flags; returns once every node lists all of them.
pub async fn cluster(
    names: &[&str],
    rules: &Path,
    extra: &[&str],
    client: &reqwest::Client,
) -> Vec<Proc> {
    let first = spawn(names[0], rules, None, extra);
    let seed = cluster_doc(client, &first).await["members"][0]["gossip"]
        .as_str()
        .unwrap()
        .to_string();
    let mut procs = vec![first];
    for n in &names[1..] {
        procs.push(spawn(n, rules, Some(&seed), extra));
    }
    let want: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    for p in &procs {
        wait_for("every member listed", Duration::from_secs(30), async || {
            live_ids(&cluster_doc(client, p).await) == want
        })
        .await;
    }
    procs
}

/// The ring the nodes `names` build (ownership is a function of the member
/// ids alone), for choosing keys by owner.
pub fn ring_of(names: &[&str]) -> Ring {
    let any = "127.0.0.1:1".parse().unwrap();
    let ids: Vec<NodeIdentity> = names
        .iter()
        .map(|n| NodeIdentity::new(*n, any, any))
        .collect();
    Ring::with_default_vnodes(&ids)
}

/// `POST /v1/check` for `key` at the node serving `http`: the HTTP status, or 0 when there was none.
pub async fn check(client: &reqwest::Client, http: &str, key: &str) -> u16 {
    let res = client
        .post(format!("{http}/v1/check"))
        .json(&json!({"key": key, "route": "GET /x"}))
        .send()
        .await;
    res.map(|r| r.status().as_u16()).unwrap_or(0)
}

/// Threads that spin until dropped, keeping the CPU busy beside the nodes.
pub struct Hogs {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Hogs {
    /// `n` spinning threads, each stopping by itself after `at_most`.
    pub fn start(n: usize, at_most: Duration) -> Hogs {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let until = Instant::now() + at_most;
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                        x = std::hint::black_box(
                            x.wrapping_mul(6364136223846793005).wrapping_add(1),
                        );
                    }
                })
            })
            .collect();
        Hogs { stop, threads }
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
