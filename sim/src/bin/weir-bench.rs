//! weir-bench: a bounded, loopback-only load generator for one weir node.
//!
//! It drives `POST /v1/check` (HTTP/1.1, one keep-alive connection per
//! concurrent worker) and `weir.v1.RateLimiter/Check` (gRPC, 1 or 100 items
//! per call) at several concurrencies, each configuration bounded by time
//! and by a check count, and records every call's latency in an HDR
//! histogram. Then it takes the highest call rate seen for HTTP and for
//! 1-item gRPC as the saturating load and sends half of it open-loop, at
//! fixed intervals, timing each call from when it was due (so a stalled
//! node cannot hide its queue), to check the p99 there.
//!
//! The node under test is one of:
//! - `--spawn target/release/weir`: `weir serve` as a separate process, so
//!   the node and the generator are two processes sharing the machine
//!   (the headline figures in docs/performance.md);
//! - `--http URL` / `--grpc URL`: a node already running;
//! - neither: a node started in this process on its own runtime.
//!
//! Spawned and in-process nodes serve one rule that admits everything
//! (`sliding_window_counter`, limit 10^9 per 60 s), so the path measured
//! is a real decision that ends in 200, not a denial. `--reference` adds
//! bare servers in this process (a hand-written HTTP/1.1 responder sending
//! a canned verdict, and a tonic `RateLimiter` that answers without
//! deciding) to show what the generator and the transport cost alone.
//!
//! Only loopback addresses are accepted.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint};
use weir_proto::weir::v1::rate_limiter_client::RateLimiterClient;
use weir_proto::weir::v1::rate_limiter_server::{RateLimiter, RateLimiterServer};
use weir_proto::weir::v1::{CheckItem, CheckRequest, CheckResponse, CheckResult};

/// The one rule spawned and in-process nodes serve: far above anything a
/// run can reach on one key, so every check is admitted.
const RULES: &str = r#"[[rule]]
name      = "bench"
algorithm = "sliding_window_counter"
limit     = 1000000000
window    = "60s"
"#;
const ROUTE: &str = "POST /bench";

#[derive(Parser, Debug)]
#[command(
    name = "weir-bench",
    about = "Loopback load generator for one weir node: HTTP and gRPC checks per second and latency"
)]
struct Args {
    /// Run `PATH serve` as a separate process and measure it.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["http", "grpc"])]
    spawn: Option<PathBuf>,
    /// HTTP base URL of a running node, e.g. http://127.0.0.1:8080.
    #[arg(long, value_name = "URL")]
    http: Option<String>,
    /// gRPC URL of a running node, e.g. http://127.0.0.1:8081.
    #[arg(long, value_name = "URL")]
    grpc: Option<String>,
    /// Measured seconds per configuration.
    #[arg(long, default_value_t = 5.0)]
    secs: f64,
    /// Warm-up seconds per configuration, not recorded.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Most checks per measured configuration (whichever of this and
    /// --secs is reached first ends it).
    #[arg(long, default_value_t = 20_000_000)]
    max_checks: u64,
    /// Distinct keys; each check picks one at random.
    #[arg(long, default_value_t = 100_000)]
    keys: usize,
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    concurrency: Vec<usize>,
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "http,grpc1,grpc100"
    )]
    workloads: Vec<Workload>,
    /// HTTP client: `raw` writes HTTP/1.1 on a keep-alive socket per
    /// worker; `reqwest` uses a pooled reqwest client.
    #[arg(long, value_enum, default_value = "raw")]
    http_client: HttpClientKind,
    /// gRPC connections the workers share (a worker uses i mod N).
    #[arg(long, default_value_t = 1)]
    grpc_conns: usize,
    /// Skip the open-loop run at half the saturating load.
    #[arg(long)]
    no_open_loop: bool,
    /// Connections (HTTP) or workers (gRPC) in the open-loop run.
    #[arg(long, default_value_t = 64)]
    open_loop_workers: usize,
    /// Also measure bare reference servers in this process.
    #[arg(long)]
    reference: bool,
    /// Worker threads of the generator's runtime.
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Workload {
    Http,
    Grpc1,
    Grpc100,
}

impl Workload {
    fn items(self) -> usize {
        match self {
            Workload::Http | Workload::Grpc1 => 1,
            Workload::Grpc100 => 100,
        }
    }
    fn label(self) -> &'static str {
        match self {
            Workload::Http => "HTTP POST /v1/check",
            Workload::Grpc1 => "gRPC Check, 1 item",
            Workload::Grpc100 => "gRPC Check, 100 items",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum HttpClientKind {
    Raw,
    Reqwest,
}

/// What is measured: a name for the table and where it listens.
#[derive(Clone)]
struct Target {
    name: String,
    http: Option<SocketAddr>,
    grpc: Option<String>,
    /// The node's process, when it is a separate one, for its CPU time.
    pid: Option<u32>,
}

fn loopback(url: &str) -> SocketAddr {
    let rest = url
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("{url}: only http:// URLs are supported"));
    let hostport = rest.split('/').next().unwrap_or(rest);
    let hostport = hostport.replacen("localhost", "127.0.0.1", 1);
    let addr: SocketAddr = hostport
        .parse()
        .unwrap_or_else(|e| panic!("{url}: expected http://IP:PORT ({e})"));
    assert!(
        addr.ip().is_loopback(),
        "{url}: weir-bench only sends to loopback addresses"
    );
    addr
}

// ---------------------------------------------------------------- keys

struct Keys(Vec<String>);

impl Keys {
    fn new(n: usize) -> Keys {
        Keys((0..n).map(|i| format!("key-{i:06}")).collect())
    }
    fn pick(&self, rng: &mut Rng) -> &str {
        &self.0[(rng.next() % self.0.len() as u64) as usize]
    }
}

/// xorshift64*: a key index per check without locking or allocating.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

// ---------------------------------------------------------------- clients

/// HTTP/1.1 on one keep-alive socket, written and parsed by hand so the
/// generator spends as little of the shared CPU as possible.
struct RawHttp {
    addr: SocketAddr,
    stream: TcpStream,
    req: Vec<u8>,
    buf: Vec<u8>,
}

impl RawHttp {
    async fn connect(addr: SocketAddr) -> std::io::Result<RawHttp> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(RawHttp {
            addr,
            stream,
            req: Vec::with_capacity(256),
            buf: Vec::with_capacity(4096),
        })
    }

    /// One request; the response's status.
    async fn post(&mut self, path: &str, body: &str) -> Result<u16, String> {
        self.req.clear();
        write!(
            Buf(&mut self.req),
            "POST {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        )
        .map_err(|e| e.to_string())?;
        self.stream
            .write_all(&self.req)
            .await
            .map_err(|e| e.to_string())?;
        read_message(&mut self.stream, &mut self.buf)
            .await
            .map(|(first, _)| status_of(&first))
    }
}

/// `write!` into a byte vector.
struct Buf<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Buf<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn status_of(first_line: &[u8]) -> u16 {
    // "HTTP/1.1 200 OK"
    first_line
        .get(9..12)
        .and_then(|s| std::str::from_utf8(s).ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Reads one HTTP/1.1 message framed by Content-Length; returns its first
/// line and its body length. Bytes past it stay in `buf`.
async fn read_message(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> Result<(Vec<u8>, usize), String> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = find(buf, b"\r\n\r\n") {
            let head = &buf[..end];
            let first_end = find(head, b"\r\n").unwrap_or(head.len());
            let mut length = None;
            for line in head[first_end..].split(|&b| b == b'\n') {
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                if line.len() > 15 && line[..15].eq_ignore_ascii_case(b"content-length:") {
                    length = std::str::from_utf8(&line[15..])
                        .ok()
                        .and_then(|s| s.trim().parse::<usize>().ok());
                }
            }
            let length = length.ok_or("a response without content-length")?;
            let total = end + 4 + length;
            while buf.len() < total {
                let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
                if n == 0 {
                    return Err("connection closed mid-body".into());
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let first = buf[..first_end].to_vec();
            buf.drain(..total);
            return Ok((first, length));
        }
        let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("connection closed".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

enum Conn {
    Raw(RawHttp),
    Reqwest(reqwest::Client, String),
    Grpc(RateLimiterClient<Channel>, usize),
}

/// What one call decided.
#[derive(Default, Clone, Copy)]
struct Tally {
    checks: u64,
    allowed: u64,
    errors: u64,
}

fn body(key: &str) -> String {
    format!(r#"{{"key":"{key}","route":"{ROUTE}","cost":1}}"#)
}

impl Conn {
    async fn call(&mut self, keys: &Keys, rng: &mut Rng) -> Tally {
        match self {
            Conn::Raw(c) => {
                let b = body(keys.pick(rng));
                match c.post("/v1/check", &b).await {
                    Ok(200) => Tally {
                        checks: 1,
                        allowed: 1,
                        errors: 0,
                    },
                    Ok(429) => Tally {
                        checks: 1,
                        allowed: 0,
                        errors: 0,
                    },
                    Ok(_) => Tally {
                        checks: 0,
                        allowed: 0,
                        errors: 1,
                    },
                    Err(_) => {
                        // Reconnect so one broken socket does not end the worker.
                        if let Ok(fresh) = RawHttp::connect(c.addr).await {
                            *c = fresh;
                        }
                        Tally {
                            checks: 0,
                            allowed: 0,
                            errors: 1,
                        }
                    }
                }
            }
            Conn::Reqwest(client, url) => {
                let b = body(keys.pick(rng));
                let sent = client
                    .post(url.as_str())
                    .header("content-type", "application/json")
                    .body(b)
                    .send()
                    .await;
                match sent {
                    Ok(r) => {
                        let status = r.status().as_u16();
                        let _ = r.bytes().await;
                        match status {
                            200 => Tally {
                                checks: 1,
                                allowed: 1,
                                errors: 0,
                            },
                            429 => Tally {
                                checks: 1,
                                allowed: 0,
                                errors: 0,
                            },
                            _ => Tally {
                                checks: 0,
                                allowed: 0,
                                errors: 1,
                            },
                        }
                    }
                    Err(_) => Tally {
                        checks: 0,
                        allowed: 0,
                        errors: 1,
                    },
                }
            }
            Conn::Grpc(client, n) => {
                let items = (0..*n)
                    .map(|_| CheckItem {
                        key: keys.pick(rng).to_owned(),
                        route: ROUTE.to_owned(),
                        cost: Some(1),
                        ..Default::default()
                    })
                    .collect();
                match client.check(CheckRequest { items }).await {
                    Ok(r) => {
                        let results = r.into_inner().results;
                        let allowed = results.iter().filter(|r| r.allowed).count() as u64;
                        let errors = results.iter().filter(|r| r.error.is_some()).count() as u64;
                        Tally {
                            checks: results.len() as u64 - errors,
                            allowed,
                            errors,
                        }
                    }
                    Err(_) => Tally {
                        checks: 0,
                        allowed: 0,
                        errors: 1,
                    },
                }
            }
        }
    }
}

async fn grpc_channel(url: &str) -> Channel {
    loopback(url);
    Endpoint::from_shared(url.to_owned())
        .expect("gRPC URL")
        .tcp_nodelay(true)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

async fn connections(args: &Args, target: &Target, w: Workload, n: usize) -> Vec<Conn> {
    match w {
        Workload::Http => {
            let addr = target.http.expect("an HTTP address");
            match args.http_client {
                HttpClientKind::Raw => {
                    let mut v = Vec::with_capacity(n);
                    for _ in 0..n {
                        v.push(Conn::Raw(RawHttp::connect(addr).await.expect("connect")));
                    }
                    v
                }
                HttpClientKind::Reqwest => {
                    let client = reqwest::Client::builder()
                        .pool_max_idle_per_host(n)
                        .tcp_nodelay(true)
                        .build()
                        .expect("reqwest client");
                    let url = format!("http://{addr}/v1/check");
                    (0..n)
                        .map(|_| Conn::Reqwest(client.clone(), url.clone()))
                        .collect()
                }
            }
        }
        Workload::Grpc1 | Workload::Grpc100 => {
            let url = target.grpc.as_deref().expect("a gRPC URL");
            let mut channels = Vec::new();
            for _ in 0..args.grpc_conns.clamp(1, n) {
                channels.push(grpc_channel(url).await);
            }
            (0..n)
                .map(|i| {
                    let ch = channels[i % channels.len()].clone();
                    Conn::Grpc(RateLimiterClient::new(ch), w.items())
                })
                .collect()
        }
    }
}

// ---------------------------------------------------------------- runs

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1_000, 60_000_000_000, 3).expect("histogram bounds")
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1_000)
}

struct Measured {
    calls: u64,
    tally: Tally,
    elapsed: Duration,
    /// Per call, from when it was sent.
    latency: Histogram<u64>,
    /// Per call, from when it was due (open-loop runs only).
    from_due: Option<Histogram<u64>>,
    /// CPU seconds used over the run, by this process and by the node's.
    cpu_self: f64,
    cpu_node: Option<f64>,
    /// CPU seconds the whole machine was busy over the run.
    cpu_machine: f64,
}

/// CPU seconds the machine has spent busy (all CPUs, not idle or iowait).
fn machine_busy() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return 0.0;
    };
    let Some(line) = stat.lines().next() else {
        return 0.0;
    };
    let f: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    if f.len() < 5 {
        return 0.0;
    }
    (f.iter().take(8).sum::<f64>() - f[3] - f[4]) / clock_ticks()
}

/// CPU seconds (user + system) a process has used so far.
fn cpu_seconds(pid: Option<u32>) -> Option<f64> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/stat"),
        None => "/proc/self/stat".to_owned(),
    };
    let stat = std::fs::read_to_string(path).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    let hz = clock_ticks();
    Some(ticks / hz)
}

/// CPU seconds of the node's process, when it is a separate one.
fn node_cpu(pid: Option<u32>) -> Option<f64> {
    pid.and_then(|p| cpu_seconds(Some(p)))
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf reads a constant and has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as f64
    } else {
        100.0
    }
}

/// Closed loop: every worker sends its next call as soon as the last one is
/// answered, until the deadline or the shared check budget runs out.
async fn closed_loop(
    conns: Vec<Conn>,
    keys: Arc<Keys>,
    dur: Duration,
    max_checks: u64,
    items: u64,
    node_pid: Option<u32>,
) -> (Vec<Conn>, Measured) {
    let budget = Arc::new(AtomicU64::new(0));
    let cpu0 = (cpu_seconds(None), node_cpu(node_pid));
    let busy0 = machine_busy();
    let start = Instant::now();
    let deadline = start + dur;
    let mut handles = Vec::new();
    for (i, mut conn) in conns.into_iter().enumerate() {
        let keys = keys.clone();
        let budget = budget.clone();
        handles.push(tokio::spawn(async move {
            let mut rng = Rng::new(i as u64 + 1 + start.elapsed().as_nanos() as u64);
            let mut hist = histogram();
            let mut tally = Tally::default();
            let mut calls = 0u64;
            while Instant::now() < deadline
                && budget.fetch_add(items, Ordering::Relaxed) < max_checks
            {
                let t0 = Instant::now();
                let t = conn.call(&keys, &mut rng).await;
                hist.record(nanos(t0.elapsed())).ok();
                calls += 1;
                tally.checks += t.checks;
                tally.allowed += t.allowed;
                tally.errors += t.errors;
            }
            (conn, hist, tally, calls)
        }));
    }
    let mut conns = Vec::new();
    let mut latency = histogram();
    let mut tally = Tally::default();
    let mut calls = 0;
    for h in handles {
        let (c, hist, t, n) = h.await.expect("worker");
        conns.push(c);
        latency.add(hist).expect("same bounds");
        tally.checks += t.checks;
        tally.allowed += t.allowed;
        tally.errors += t.errors;
        calls += n;
    }
    let elapsed = start.elapsed();
    let cpu1 = (cpu_seconds(None), node_cpu(node_pid));
    let busy1 = machine_busy();
    (
        conns,
        Measured {
            calls,
            tally,
            elapsed,
            latency,
            from_due: None,
            cpu_self: cpu1.0.zip(cpu0.0).map(|(a, b)| a - b).unwrap_or(0.0),
            cpu_node: cpu1.1.zip(cpu0.1).map(|(a, b)| a - b),
            cpu_machine: busy1 - busy0,
        },
    )
}

/// Open loop: a pacer thread hands out send times at a fixed interval,
/// round-robin over the workers; each call is timed from when it was due.
/// Calls due during the warm-up are sent but not recorded.
async fn open_loop(
    conns: Vec<Conn>,
    keys: Arc<Keys>,
    rate: f64,
    warmup: Duration,
    dur: Duration,
    node_pid: Option<u32>,
) -> Measured {
    let workers = conns.len();
    let mut senders = Vec::with_capacity(workers);
    let mut handles = Vec::with_capacity(workers);
    let start = Instant::now() + Duration::from_millis(20);
    let measure_from = start + warmup;
    for (i, mut conn) in conns.into_iter().enumerate() {
        let (tx, mut rx) = mpsc::unbounded_channel::<Instant>();
        senders.push(tx);
        let keys = keys.clone();
        handles.push(tokio::spawn(async move {
            let mut rng = Rng::new(i as u64 + 7);
            let mut hist = histogram();
            let mut due_hist = histogram();
            let mut tally = Tally::default();
            let mut calls = 0u64;
            while let Some(due) = rx.recv().await {
                let t0 = Instant::now();
                let t = conn.call(&keys, &mut rng).await;
                let end = Instant::now();
                if due >= measure_from {
                    hist.record(nanos(end - t0)).ok();
                    due_hist.record(nanos(end - due)).ok();
                    calls += 1;
                    tally.checks += t.checks;
                    tally.allowed += t.allowed;
                    tally.errors += t.errors;
                }
            }
            (hist, due_hist, tally, calls)
        }));
    }
    let interval = Duration::from_secs_f64(1.0 / rate);
    let end = measure_from + dur;
    let cpu_cell = Arc::new(std::sync::Mutex::new((None, None, None, 0.0)));
    let cell = cpu_cell.clone();
    let pacer = std::thread::spawn(move || {
        let mut k: u64 = 0;
        let mut marked = false;
        loop {
            let due = start + interval.mul_f64(k as f64);
            if due >= end {
                break;
            }
            let now = Instant::now();
            if !marked && now >= measure_from {
                marked = true;
                *cell.lock().unwrap() = (
                    Some(now),
                    cpu_seconds(None),
                    node_cpu(node_pid),
                    machine_busy(),
                );
            }
            if due > now {
                std::thread::sleep(due - now);
                continue;
            }
            let _ = senders[(k % workers as u64) as usize].send(due);
            k += 1;
        }
    });
    tokio::task::spawn_blocking(move || pacer.join().expect("pacer"))
        .await
        .expect("pacer");
    let mut latency = histogram();
    let mut from_due = histogram();
    let mut tally = Tally::default();
    let mut calls = 0;
    for h in handles {
        let (a, b, t, n) = h.await.expect("worker");
        latency.add(a).expect("same bounds");
        from_due.add(b).expect("same bounds");
        tally.checks += t.checks;
        tally.allowed += t.allowed;
        tally.errors += t.errors;
        calls += n;
    }
    let (t0, s0, n0, b0) = *cpu_cell.lock().unwrap();
    let elapsed = t0.map(|t| t.elapsed()).unwrap_or(dur);
    Measured {
        calls,
        tally,
        elapsed,
        latency,
        from_due: Some(from_due),
        cpu_self: cpu_seconds(None).zip(s0).map(|(a, b)| a - b).unwrap_or(0.0),
        cpu_node: node_cpu(node_pid).zip(n0).map(|(a, b)| a - b),
        cpu_machine: machine_busy() - b0,
    }
}

// ---------------------------------------------------------------- report

struct Row {
    target: String,
    workload: String,
    concurrency: String,
    m: Measured,
}

fn us(ns: u64) -> String {
    let us = ns as f64 / 1000.0;
    if us >= 100.0 {
        format!("{us:.0}")
    } else {
        format!("{us:.1}")
    }
}

fn thousands(x: f64) -> String {
    let n = x.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn print_row(r: &Row) {
    let m = &r.m;
    let secs = m.elapsed.as_secs_f64();
    let (p50, p99) = match &m.from_due {
        Some(h) => (
            format!(
                "{} ({} from due)",
                us(m.latency.value_at_quantile(0.5)),
                us(h.value_at_quantile(0.5))
            ),
            format!(
                "{} ({} from due)",
                us(m.latency.value_at_quantile(0.99)),
                us(h.value_at_quantile(0.99))
            ),
        ),
        None => (
            us(m.latency.value_at_quantile(0.5)),
            us(m.latency.value_at_quantile(0.99)),
        ),
    };
    let node_cpu = m
        .cpu_node
        .map(|c| format!("{:.2}", c / secs))
        .unwrap_or_else(|| "-".into());
    // Busy CPU not accounted to the generator or a separate node: other
    // processes (and, for an in-process node, the node itself).
    let other = (m.cpu_machine - m.cpu_self - m.cpu_node.unwrap_or(0.0)).max(0.0) / secs;
    println!(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {:.2} | {} | {:.2} | {} |",
        r.target,
        r.workload,
        r.concurrency,
        thousands(m.tally.checks as f64 / secs),
        thousands(m.calls as f64 / secs),
        p50,
        p99,
        us(m.latency.max()),
        m.cpu_self / secs,
        node_cpu,
        other,
        m.tally.errors + (m.tally.checks - m.tally.allowed),
    );
}

fn print_header() {
    println!();
    println!("| target | workload | concurrency | checks/s | calls/s | p50 us | p99 us | max us | generator CPU (cores) | node CPU (cores) | other CPU (cores) | errors + denials |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
}

// ---------------------------------------------------------------- targets

struct Spawned(Child);

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

fn rules_file() -> PathBuf {
    let path = std::env::temp_dir().join(format!("weir-bench-rules-{}.toml", std::process::id()));
    std::fs::write(&path, RULES).expect("write the rules file");
    path
}

async fn wait_ready(addr: SocketAddr) {
    let give_up = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(mut s) = TcpStream::connect(addr).await {
            let req = format!("GET /readyz HTTP/1.1\r\nhost: {addr}\r\n\r\n");
            if s.write_all(req.as_bytes()).await.is_ok() {
                let mut buf = Vec::new();
                if let Ok((first, _)) = read_message(&mut s, &mut buf).await {
                    if status_of(&first) == 200 {
                        return;
                    }
                }
            }
        }
        assert!(
            Instant::now() < give_up,
            "the node at {addr} never became ready"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A 200 with the headers and body weir sends for an admitted check.
fn canned() -> Vec<u8> {
    let body = r#"{"allowed":true,"limit":1000000000,"remaining":999999999,"reset_at":1795981980000,"retry_after_ms":0,"rule":"bench"}"#;
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nratelimit-limit: 1000000000\r\n\
         ratelimit-remaining: 999999999\r\nratelimit-reset: 120\r\nx-ratelimit-limit: 1000000000\r\n\
         x-ratelimit-remaining: 999999999\r\nx-ratelimit-reset: 1795981980\r\n\
         ratelimit-policy: \"bench\";q=1000000000;w=60\r\nratelimit: \"bench\";r=999999999;t=120\r\n\
         content-length: {}\r\ndate: Sun, 29 Nov 2026 19:51:39 GMT\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

async fn bare_http() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let canned: Arc<[u8]> = canned().into();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let canned = canned.clone();
            let _ = s.set_nodelay(true);
            tokio::spawn(async move {
                let mut buf = Vec::with_capacity(4096);
                while read_message(&mut s, &mut buf).await.is_ok() {
                    if s.write_all(&canned).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

struct Bare;

#[tonic::async_trait]
impl RateLimiter for Bare {
    async fn check(
        &self,
        request: tonic::Request<CheckRequest>,
    ) -> Result<tonic::Response<CheckResponse>, tonic::Status> {
        let results = request
            .into_inner()
            .items
            .iter()
            .map(|_| CheckResult {
                allowed: true,
                limit: 1_000_000_000,
                remaining: 999_999_999,
                reset_at_ms: 1_795_981_980_000,
                rule: "bench".into(),
                limited: true,
                ..Default::default()
            })
            .collect();
        Ok(tonic::Response::new(CheckResponse { results }))
    }
}

async fn bare_grpc() -> String {
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port())
        .parse()
        .expect("address");
    tokio::spawn(
        tonic::transport::Server::builder()
            .tcp_nodelay(true)
            .add_service(RateLimiterServer::new(Bare))
            .serve(addr),
    );
    let url = format!("http://{addr}");
    let give_up = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(addr).await.is_err() {
        assert!(Instant::now() < give_up, "bare gRPC server did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    url
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn runtime(threads: usize, name: &str) -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name(name)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

// ---------------------------------------------------------------- main

fn main() {
    let args = Args::parse();
    let load_before = loadavg();
    assert!(args.secs > 0.0 && args.warmup >= 0.0 && args.keys > 0);
    let keys = Arc::new(Keys::new(args.keys));
    let gen_rt = runtime(args.threads, "bench-gen");
    // Servers living in this process run on a runtime of their own, so they
    // and the generator are scheduled like two processes would be.
    let server_rt = runtime(2, "bench-node");
    let mut _spawned = None;
    let mut _node = None;
    let mut targets = Vec::new();

    if let Some(bin) = &args.spawn {
        let rules = rules_file();
        let (h, g, s) = (free_port(), free_port(), free_port());
        let mut cmd = Command::new(bin);
        cmd.arg("serve")
            .args(["--http", &format!("127.0.0.1:{h}")])
            .args(["--grpc", &format!("127.0.0.1:{g}")])
            .args(["--gossip", &format!("127.0.0.1:{s}")])
            .arg("--rules")
            .arg(&rules)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        eprintln!("node: {cmd:?}");
        let child = cmd.spawn().expect("spawn the node");
        let pid = child.id();
        _spawned = Some(Spawned(child));
        let http: SocketAddr = format!("127.0.0.1:{h}").parse().expect("address");
        gen_rt.block_on(wait_ready(http));
        targets.push(Target {
            name: "weir serve (separate process)".into(),
            http: Some(http),
            grpc: Some(format!("http://127.0.0.1:{g}")),
            pid: Some(pid),
        });
    } else if args.http.is_some() || args.grpc.is_some() {
        targets.push(Target {
            name: "weir serve (running)".into(),
            http: args.http.as_deref().map(loopback),
            grpc: args.grpc.clone(),
            pid: None,
        });
    } else {
        let mut config = weir_node::ServeConfig::ephemeral();
        config.rules_file = Some(rules_file());
        let node = server_rt
            .block_on(weir_node::Node::start(config))
            .expect("start the node");
        targets.push(Target {
            name: "weir node (in-process)".into(),
            http: Some(node.http_addr()),
            grpc: Some(format!("http://{}", node.grpc_addr())),
            pid: None,
        });
        _node = Some(node);
    }
    if args.reference {
        let http = server_rt.block_on(bare_http());
        let grpc = server_rt.block_on(bare_grpc());
        targets.push(Target {
            name: "bare reference (in-process)".into(),
            http: Some(http),
            grpc: Some(grpc),
            pid: None,
        });
    }

    let warmup = Duration::from_secs_f64(args.warmup);
    let secs = Duration::from_secs_f64(args.secs);
    let mut rows = Vec::new();
    // Highest calls/s per (target, workload): the saturating load.
    let mut peak: Vec<(usize, Workload, f64)> = Vec::new();
    for (ti, target) in targets.iter().enumerate() {
        for &w in &args.workloads {
            let reachable = match w {
                Workload::Http => target.http.is_some(),
                _ => target.grpc.is_some(),
            };
            if !reachable {
                continue;
            }
            for &c in &args.concurrency {
                let m = gen_rt.block_on(async {
                    let conns = connections(&args, target, w, c).await;
                    let items = w.items() as u64;
                    let (conns, _) =
                        closed_loop(conns, keys.clone(), warmup, u64::MAX, items, None).await;
                    let (_, m) = closed_loop(
                        conns,
                        keys.clone(),
                        secs,
                        args.max_checks,
                        items,
                        target.pid,
                    )
                    .await;
                    m
                });
                let rate = m.calls as f64 / m.elapsed.as_secs_f64();
                match peak.iter_mut().find(|(t, pw, _)| *t == ti && *pw == w) {
                    Some(p) => p.2 = p.2.max(rate),
                    None => peak.push((ti, w, rate)),
                }
                let row = Row {
                    target: target.name.clone(),
                    workload: w.label().into(),
                    concurrency: c.to_string(),
                    m,
                };
                eprintln!(
                    "{} / {} / c={}: {} checks/s, p99 {} us",
                    row.target,
                    row.workload,
                    c,
                    thousands(row.m.tally.checks as f64 / row.m.elapsed.as_secs_f64()),
                    us(row.m.latency.value_at_quantile(0.99))
                );
                rows.push(row);
            }
        }
    }

    if !args.no_open_loop {
        for &(ti, w, sat) in &peak {
            if w == Workload::Grpc100 {
                continue;
            }
            let target = &targets[ti];
            let rate = sat / 2.0;
            let m = gen_rt.block_on(async {
                let conns = connections(&args, target, w, args.open_loop_workers).await;
                open_loop(conns, keys.clone(), rate, warmup, secs, target.pid).await
            });
            eprintln!(
                "{} / {} open loop at {} calls/s: p99 {} us from due",
                target.name,
                w.label(),
                thousands(rate),
                us(m.from_due
                    .as_ref()
                    .map(|h| h.value_at_quantile(0.99))
                    .unwrap_or(0))
            );
            rows.push(Row {
                target: target.name.clone(),
                workload: w.label().into(),
                concurrency: format!(
                    "open loop, {} calls/s (half of {}) over {}",
                    thousands(rate),
                    thousands(sat),
                    args.open_loop_workers
                ),
                m,
            });
        }
    }

    println!("\nload average before: {load_before}, after: {}", loadavg());
    println!(
        "{} keys, {} s measured after {} s warm-up per row (at most {} checks), HTTP client {:?}, {} gRPC connection(s), generator runtime {} threads",
        args.keys,
        args.secs,
        args.warmup,
        args.max_checks,
        args.http_client,
        args.grpc_conns,
        args.threads
    );
    print_header();
    for r in &rows {
        print_row(r);
    }
    if let Some(node) = _node.take() {
        server_rt.block_on(node.shutdown());
    }
}
