//! What forwarding costs on a 3-node loopback cluster (docs/performance.md, "Forwarding").
//!
//! Three members run in this process on real sockets. Measured at node-1:
//! the latency of a check decided locally against one forwarded to its
//! owner (one at a time, from a task, and forwarded from a thread outside
//! the runtime as an embedding application calls), and throughput with
//! 64 concurrent callers whose keys all live on the other two nodes, with
//! batching on (the default) and off (one op per Decide call); then the
//! same forwarded latency and throughput with one copy of each counter
//! against two (`--replicas`), interleaved in one run. Run: `cargo bench
//! -p weir-cluster`; only the copies comparison: `cargo bench -p
//! weir-cluster -- copies`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{cluster, key_owned_by, TestNode};
use hdrhistogram::Histogram;
use weir_cluster::BatchConfig;
use weir_core::CheckRequest;

/// Admits everything: the benchmark measures the path, not denials.
const RULES: &str = r#"
[[rule]]
name = "bench"
algorithm = "token_bucket"
limit = 1000000000
window = "1s"
"#;
const LATENCY_SAMPLES: usize = 20_000;
const CONCURRENCY: usize = 64;
const RUN: Duration = Duration::from_secs(3);

fn keys(gateway: &TestNode, owners: &[&str], n: usize, prefix: &str) -> Vec<String> {
    (0..n)
        .map(|i| key_owned_by(gateway, owners[i % owners.len()], &format!("{prefix}{i}")))
        .collect()
}

/// What the whole process (its three nodes and the caller) has used so
/// far, over all its threads: CPU time and thread switches.
#[derive(Clone, Copy)]
struct Usage {
    cpu: Duration,
    switches: u64,
}

impl Usage {
    #[allow(unsafe_code)]
    fn now() -> Option<Usage> {
        let mut r = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: getrusage only fills in the struct it is given, which is
        // read only when it says it succeeded (and was zeroed before).
        let r = unsafe {
            if libc::getrusage(libc::RUSAGE_SELF, r.as_mut_ptr()) != 0 {
                return None;
            }
            r.assume_init()
        };
        let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
        Some(Usage {
            cpu: time(r.ru_utime) + time(r.ru_stime),
            switches: (r.ru_nvcsw + r.ru_nivcsw) as u64,
        })
    }

    /// CPU microseconds and thread switches per check since `self`.
    fn per_check(self, checks: usize) -> Option<(f64, f64)> {
        let now = Usage::now()?;
        Some((
            (now.cpu - self.cpu).as_secs_f64() * 1e6 / checks as f64,
            (now.switches - self.switches) as f64 / checks as f64,
        ))
    }
}

/// Where the one-at-a-time checks are sent from.
#[derive(Clone, Copy)]
enum Caller {
    /// A task on the runtime's workers, as a node's connection task.
    Task,
    /// A thread of the application's own, in `block_on` for each check,
    /// as an embedding application outside the runtime calls.
    Thread,
}

/// One-at-a-time samples: the first thousand checks warm connections
/// and caches up, then LATENCY_SAMPLES are timed and their CPU and
/// thread switches counted.
struct Samples {
    h: Histogram<u64>,
    usage: Option<Usage>,
    next: usize,
}

impl Samples {
    const WARM: usize = 1000;

    fn new() -> Self {
        Samples {
            h: Histogram::new(3).unwrap(),
            usage: None,
            next: 0,
        }
    }

    /// The index of the next check to send, until all are sent.
    fn next(&mut self) -> Option<usize> {
        let i = self.next;
        if i == Self::WARM {
            self.usage = Usage::now();
        }
        self.next += 1;
        (i < Self::WARM + LATENCY_SAMPLES).then_some(i)
    }

    fn record(&mut self, i: usize, started: Instant) {
        if i >= Self::WARM {
            self.h.record(started.elapsed().as_nanos() as u64).unwrap();
        }
    }

    fn done(self) -> (Histogram<u64>, Option<(f64, f64)>) {
        let usage = self.usage.and_then(|u| u.per_check(LATENCY_SAMPLES));
        (self.h, usage)
    }
}

/// One check at a time from `caller`: the latencies, and the CPU and
/// thread switches per check.
async fn latency(
    gateway: &TestNode,
    keys: &[String],
    caller: Caller,
) -> (Histogram<u64>, Option<(f64, f64)>) {
    let (engine, keys) = (gateway.engine.clone(), keys.to_vec());
    match caller {
        Caller::Task => tokio::spawn(async move {
            let mut s = Samples::new();
            while let Some(i) = s.next() {
                let started = Instant::now();
                let v = engine.check(&request(&keys, i)).await.unwrap();
                assert!(v.allowed);
                s.record(i, started);
            }
            s.done()
        })
        .await
        .unwrap(),
        Caller::Thread => {
            let runtime = tokio::runtime::Handle::current();
            let thread = std::thread::spawn(move || {
                let mut s = Samples::new();
                while let Some(i) = s.next() {
                    let started = Instant::now();
                    let v = runtime.block_on(engine.check(&request(&keys, i))).unwrap();
                    assert!(v.allowed);
                    s.record(i, started);
                }
                s.done()
            });
            tokio::task::spawn_blocking(move || thread.join().unwrap())
                .await
                .unwrap()
        }
    }
}

fn request(keys: &[String], i: usize) -> CheckRequest {
    CheckRequest::new(keys[i % keys.len()].as_str(), "GET /")
}

/// "CPU per check, thread switches per check" when the OS tells.
fn cost(usage: Option<(f64, f64)>) -> String {
    match usage {
        Some((cpu, switches)) => format!("   CPU {cpu:>6.1} us   {switches:>4.1} thread switches"),
        None => String::new(),
    }
}

/// Checks per second with CONCURRENCY callers over RUN; also the mean batch.
async fn throughput(gateway: &TestNode, keys: Arc<Vec<String>>) -> (f64, f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let engine = gateway.engine.clone();
    let before = gateway.cluster.stats();
    let workers: Vec<_> = (0..CONCURRENCY)
        .map(|w| {
            let (engine, keys, stop, done) =
                (engine.clone(), keys.clone(), stop.clone(), done.clone());
            tokio::spawn(async move {
                let mut i = w;
                while !stop.load(Ordering::Relaxed) {
                    let key = &keys[i % keys.len()];
                    let v = engine
                        .check(&CheckRequest::new(key.as_str(), "GET /"))
                        .await
                        .unwrap();
                    assert!(v.allowed);
                    done.fetch_add(1, Ordering::Relaxed);
                    i += CONCURRENCY;
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (start_n, started) = (done.load(Ordering::Relaxed), Instant::now());
    let start_stats = gateway.cluster.stats();
    tokio::time::sleep(RUN).await;
    let n = done.load(Ordering::Relaxed) - start_n;
    let secs = started.elapsed().as_secs_f64();
    let end_stats = gateway.cluster.stats();
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let s = gateway.cluster.stats();
    assert_eq!(
        s.fallback_decisions, before.fallback_decisions,
        "every check must really be forwarded"
    );
    let calls = (end_stats.peer_calls - start_stats.peer_calls).max(1) as f64;
    let ops = (end_stats.peer_ops - start_stats.peer_ops) as f64;
    (n as f64 / secs, ops / calls)
}

fn us(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

/// Forwarded latency and throughput with one copy of each counter and
/// with two, alternating so that drift on a shared machine hits both.
async fn copies() {
    const ROUNDS: usize = 3;
    let mut rows: Vec<(usize, f64, f64, f64)> = Vec::new();
    for _ in 0..ROUNDS {
        for replicas in [1, 2] {
            let nodes = cluster(3, RULES, |c| c.replicas = replicas).await;
            let remote = keys(&nodes[0], &["node-2", "node-3"], 5000, "copies");
            let (h, _) = latency(&nodes[0], &remote, Caller::Task).await;
            let (rate, _) = throughput(&nodes[0], Arc::new(remote)).await;
            let lag = nodes[1].cluster.stats().replication_lag;
            println!(
                "  {replicas} cop{}: forwarded p50 {:>7.1} us  p99 {:>7.1} us  {rate:>8.0} checks/s  replication lag p99 {:?}",
                if replicas == 1 { "y  " } else { "ies" },
                us(&h, 0.5),
                us(&h, 0.99),
                lag.p99
            );
            rows.push((replicas, us(&h, 0.5), us(&h, 0.99), rate));
        }
    }
    println!("Two copies against one, each round (p99 ratio, throughput ratio):");
    for pair in rows.chunks(2) {
        let (one, two) = (pair[0], pair[1]);
        println!(
            "  p99 {:.2}x   throughput {:.2}x",
            two.2 / one.2,
            two.3 / one.3
        );
    }
}

async fn run() {
    let nodes = cluster(3, RULES, |_| {}).await;
    let gateway = &nodes[0];
    let local = keys(gateway, &["node-1"], 5000, "local");
    let remote = keys(gateway, &["node-2", "node-3"], 5000, "remote");
    let (l, l_cost) = latency(gateway, &local, Caller::Task).await;
    let (f, f_cost) = latency(gateway, &remote, Caller::Task).await;
    let (t, t_cost) = latency(gateway, &remote, Caller::Thread).await;
    println!("Forwarding latency, one check at a time ({LATENCY_SAMPLES} samples each; CPU and thread switches of the whole process, per check):");
    println!(
        "  local check      p50 {:>8.1} us   p99 {:>8.1} us{}",
        us(&l, 0.5),
        us(&l, 0.99),
        cost(l_cost)
    );
    println!(
        "  forwarded check  p50 {:>8.1} us   p99 {:>8.1} us{}",
        us(&f, 0.5),
        us(&f, 0.99),
        cost(f_cost)
    );
    println!(
        "  forwarding adds  p50 {:>8.1} us   p99 {:>8.1} us",
        us(&f, 0.5) - us(&l, 0.5),
        us(&f, 0.99) - us(&l, 0.99)
    );
    println!(
        "  forwarded from a thread outside the runtime\n                   p50 {:>8.1} us   p99 {:>8.1} us{}",
        us(&t, 0.5),
        us(&t, 0.99),
        cost(t_cost)
    );
    drop(nodes);

    let mut rows = Vec::new();
    let in_flight = |n| BatchConfig {
        max_in_flight: n,
        ..BatchConfig::default()
    };
    for (name, batch, grpc_only) in [
        (
            "batching on (default: 4 in flight)",
            BatchConfig::default(),
            false,
        ),
        (
            "batching off (max_items 1)",
            BatchConfig::unbatched(CONCURRENCY),
            false,
        ),
        ("batching on, 1 call in flight", in_flight(1), false),
        ("batching on, 2 calls in flight", in_flight(2), false),
        ("batching on, 16 calls in flight", in_flight(16), false),
        ("batching on, over gRPC only", BatchConfig::default(), true),
    ] {
        let nodes = cluster(3, RULES, |c| {
            c.batch = batch;
            c.grpc_only = grpc_only;
        })
        .await;
        let remote = Arc::new(keys(&nodes[0], &["node-2", "node-3"], 5000, "tp"));
        let (rate, mean_batch) = throughput(&nodes[0], remote).await;
        rows.push((name, rate, mean_batch));
    }
    println!("Forwarded throughput, {CONCURRENCY} concurrent callers, {RUN:?}:");
    for (name, rate, mean_batch) in &rows {
        println!("  {name:<36} {rate:>9.0} checks/s   mean batch {mean_batch:>6.1} ops/call");
    }
    println!(
        "  batching speedup (default vs off): {:.2}x",
        rows[0].1 / rows[1].1
    );
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` runs this too,
    // and then a short smoke run is enough.
    let smoke = !std::env::args().any(|a| a == "--bench");
    if smoke {
        println!("forwarding: run with `cargo bench -p weir-cluster` for figures");
        return;
    }
    let only_copies = std::env::args().any(|a| a == "copies");
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            if !only_copies {
                run().await;
            }
            copies().await;
        });
}
