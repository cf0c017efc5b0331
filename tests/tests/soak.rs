//! Soak: steady HTTP load over a sliding population of keys; every answer is 200 or 429, and keys and memory stay flat once warm.
//!
//! Runs ~20 s by default; `WEIR_SOAK_SECS=3600 cargo test -p weir-tests --test soak --release -- --nocapture`
//! runs an hour. Each second a new cohort of keys appears and the cohort
//! that has had its LIFE stops sending, so a node that failed to drop idle
//! keys (it sweeps every second) would grow by COHORT keys a second.
//!
//! The node runs in a process of its own (this test binary again, running
//! only `node_process`), so the memory measured is the node's, not the
//! load generator's.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use weir_tests::{client, metric_value, TestNode};

/// Set in the child process that runs the node.
const NODE_ENV: &str = "WEIR_SOAK_NODE";

/// Short windows so a key that stops sending is idle within seconds: the
/// sliding counter after two windows, the fixed window after one.
const RULES: &str = r#"
[[rule]]
name      = "per-client"
by        = "client"
algorithm = "sliding_window_counter"
limit     = 20
window    = "1s"

[[rule]]
name      = "per-ip"
by        = "ip"
algorithm = "fixed_window"
limit     = 50
window    = "1s"
"#;

/// New client keys per second.
const COHORT: u64 = 200;
/// Seconds a key sends for before it stops for good.
const LIFE: u64 = 3;
/// Clients per IP address, so IP counters churn too.
const PER_IP: u64 = 4;
/// Target request rate: ~3 per live key per second, under both limits.
const RATE: u64 = 2_000;
const WORKERS: u64 = 8;

fn soak_secs() -> u64 {
    std::env::var("WEIR_SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}

/// Resident set size of the node's process, in KiB.
fn rss_kib(node: &NodeProcess) -> u64 {
    let path = format!("/proc/{}/status", node.child.id());
    let status = std::fs::read_to_string(&path).expect("read the node's /proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc status")
}

/// The node under soak, in a child process; killed when dropped.
struct NodeProcess {
    child: Child,
    base: String,
    client: reqwest::Client,
}

impl NodeProcess {
    /// Runs this test binary again with only `node_process`, which prints
    /// the node's HTTP address and serves until its stdin closes.
    fn start() -> NodeProcess {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut child = Command::new(exe)
            .args(["node_process", "--exact", "--ignored", "--nocapture"])
            .env(NODE_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the node process");
        let stdout = child.stdout.take().expect("piped stdout");
        let addr = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|l| l.strip_prefix("weir-soak-node ").map(str::to_string))
            .expect("the node process printed its address");
        NodeProcess {
            child,
            base: format!("http://{addr}"),
            client: client(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

impl Drop for NodeProcess {
    /// Closes the node's stdin so it ends by itself and removes its rules
    /// directory (a killed process leaves it behind); killed only if it has
    /// not ended within the deadline.
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Ok(Some(_)) | Err(_) => break,
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The node side of the soak: only in the child process `NodeProcess` starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the soak's node process; memory_and_keys_stay_flat_under_key_churn_and_nothing_fails runs it"]
async fn node_process() {
    if std::env::var_os(NODE_ENV).is_none() {
        return;
    }
    let node = TestNode::start(RULES, |_| {}).await;
    println!("weir-soak-node {}", node.node().http_addr());
    // Serve until the parent closes stdin (or is gone).
    tokio::task::spawn_blocking(|| {
        let mut sink = String::new();
        while std::io::stdin().read_line(&mut sink).is_ok_and(|n| n > 0) {}
    })
    .await
    .expect("stdin watcher");
}

/// Keys of both rules, from the per-rule `weir_keys` gauge.
async fn keys(node: &NodeProcess) -> u64 {
    let text = node
        .client
        .get(node.url("/metrics"))
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics text");
    ["per-client", "per-ip"]
        .iter()
        .map(|r| {
            metric_value(&text, &format!("weir_keys{{rule=\"{r}\"}}")).expect("weir_keys gauge")
        })
        .sum::<f64>() as u64
}

#[derive(Default)]
struct Tally {
    sent: AtomicU64,
    failed: AtomicU64,
    first_failure: Mutex<Option<String>>,
}

impl Tally {
    fn fail(&self, what: String) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        self.first_failure.lock().unwrap().get_or_insert(what);
    }
}

/// splitmix64: enough randomness to spread picks over keys, no dependency.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Sends checks for live keys at RATE / WORKERS per second until `end`.
async fn worker(
    node: Arc<NodeProcess>,
    seed: u64,
    start: Instant,
    end: Instant,
    tally: Arc<Tally>,
) {
    let mut rng = seed;
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 * WORKERS / RATE));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while Instant::now() < end {
        tick.tick().await;
        let cohort = start
            .elapsed()
            .as_secs()
            .saturating_sub(next(&mut rng) % LIFE);
        let id = next(&mut rng) % COHORT;
        let ip_n = cohort * COHORT / PER_IP + id / PER_IP;
        let ip = format!(
            "10.{}.{}.{}",
            (ip_n >> 16) & 255,
            (ip_n >> 8) & 255,
            ip_n & 255
        );
        let body = json!({"key": format!("c{cohort}-{id}"), "ip": ip});
        tally.sent.fetch_add(1, Ordering::Relaxed);
        match node
            .client
            .post(node.url("/v1/check"))
            .json(&body)
            .send()
            .await
        {
            Ok(res) if matches!(res.status().as_u16(), 200 | 429) => {}
            Ok(res) => tally.fail(format!("status {} for {body}", res.status())),
            // The whole chain: reqwest's own message names only the URL.
            Err(e) => tally.fail(format!("{e:?} for {body}")),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_and_keys_stay_flat_under_key_churn_and_nothing_fails() {
    let secs = soak_secs();
    // Warm once every cohort alive at once has also had time to go idle and
    // be swept: LIFE + two windows + one sweep, with room.
    let warm = Duration::from_secs((secs * 2 / 5).max(LIFE + 5));
    assert!(
        warm < Duration::from_secs(secs),
        "WEIR_SOAK_SECS={secs} is shorter than the warm-up"
    );

    let node = Arc::new(NodeProcess::start());
    let tally = Arc::new(Tally::default());
    let start = Instant::now();
    let end = start + Duration::from_secs(secs);
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| tokio::spawn(worker(node.clone(), w, start, end, tally.clone())))
        .collect();

    tokio::time::sleep_until((start + warm).into()).await;
    let (warm_rss, warm_keys) = (rss_kib(&node), keys(&node).await);
    let mut peak_keys = warm_keys;
    while Instant::now() + Duration::from_secs(1) < end {
        tokio::time::sleep(Duration::from_secs(1)).await;
        peak_keys = peak_keys.max(keys(&node).await);
    }
    let (end_rss, end_keys) = (rss_kib(&node), keys(&node).await);
    for w in workers {
        w.await.expect("worker");
    }

    let sent = tally.sent.load(Ordering::Relaxed);
    let failed = tally.failed.load(Ordering::Relaxed);
    eprintln!(
        "soak {secs}s: {sent} checks; keys warm {warm_keys} peak {peak_keys} end {end_keys}; \
         RSS warm {warm_rss} KiB end {end_rss} KiB"
    );
    assert_eq!(
        failed,
        0,
        "{failed} of {sent} checks failed; first: {:?}",
        tally.first_failure.lock().unwrap()
    );
    assert!(
        sent >= secs * RATE / 10,
        "only {sent} checks in {secs}s: the load did not run"
    );
    // The count saw-tooths by about one cohort (its client and IP keys)
    // between sweeps; a node that swept nothing would gain that much every
    // second and be far past this by the end.
    let ceiling = warm_keys + warm_keys / 10 + 2 * COHORT;
    assert!(
        peak_keys <= ceiling,
        "keys grew from {warm_keys} to {peak_keys} (ceiling {ceiling}): idle keys are not dropped"
    );
    assert!(
        warm_keys >= COHORT,
        "only {warm_keys} keys held: the churn did not run"
    );
    assert!(
        end_rss <= warm_rss + warm_rss / 10,
        "RSS grew from {warm_rss} KiB to {end_rss} KiB, more than 10%"
    );
}
