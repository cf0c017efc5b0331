//! Requests per second through an axum hello-world: bare, behind the layer on an in-process limiter, and on a remote node.
//!
//! Everything runs in one process on loopback: the servers, a weir node and
//! the load generator share the machine, so read the ratios, not the
//! absolute numbers (docs/performance.md, "Client and tower layer").
//!
//! `cargo bench -p weir-client --bench layer` prints the loopback table
//! (WEIR_BENCH_ROUNDS, WEIR_BENCH_SECS, WEIR_BENCH_CLIENT=raw|hyper|both
//! for the load generator) and then criterion's in-memory
//! tower-call numbers; a filter argument picks `loopback` or `tower_call`.

use std::convert::Infallible;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::response::Response as AxumResponse;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use criterion::{Criterion, Throughput};
use http::{HeaderName, HeaderValue, Request, Response};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use tokio::runtime::Runtime;
use tower::util::MapResponseLayer;
use tower::{Service, ServiceBuilder, ServiceExt};
use weir_client::{Client, HeaderSet, KeyExtractor, RateLimitLayer};
use weir_core::{Limiter, LimiterConfig, RuleSet, SystemClock};
use weir_node::{Node, ServeConfig};

/// A limit no run reaches, so every request is admitted and every
/// configuration does the same work downstream of the decision.
const RULES: &str = r#"
[[rule]]
name      = "per-client"
algorithm = "sliding_window_counter"
limit     = 1000000000000
window    = "60s"
"#;
/// Requests in flight at once, over as many keep-alive connections.
const CONCURRENCY: u64 = 32;
/// Distinct caller keys, so the limiter's map is exercised, not one hot entry.
const KEYS: u64 = 1024;

fn limiter() -> Arc<Limiter> {
    Arc::new(Limiter::new(
        RuleSet::from_toml(RULES).unwrap(),
        Arc::new(SystemClock::new()),
        LimiterConfig::default(),
    ))
}

fn hello() -> Router {
    Router::new().route("/", get(|| async { "hello" }))
}

async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

struct Targets {
    /// (row name, address), in the order the table shows them.
    rows: Vec<(&'static str, SocketAddr)>,
    remote_layer: RateLimitLayer,
    _node: Node,
    /// The node's rules file, removed when the targets go.
    _rules: tempfile::NamedTempFile,
}

async fn targets(http: &HttpClient<HttpConnector, Empty<Bytes>>) -> Targets {
    let mut rules = tempfile::NamedTempFile::new().unwrap();
    rules.write_all(RULES.as_bytes()).unwrap();
    let mut config = ServeConfig::ephemeral();
    config.rules_file = Some(rules.path().to_path_buf());
    let node = Node::start(config).await.unwrap();
    // A deadline far above loopback latency under load: a check that timed
    // out would fail open and flatter the remote row.
    let client = Client::builder()
        .deadline(Duration::from_secs(2))
        .grpc(&format!("http://{}", node.grpc_addr()))
        .unwrap();
    let remote_layer = RateLimitLayer::new(client, KeyExtractor::header("x-client-id"));
    let key = KeyExtractor::header("x-client-id");
    let in_process = serve(hello().layer(RateLimitLayer::new(limiter(), key))).await;
    // The control row: the bare service sending, as constants, the very
    // headers the layer sends. It prices carrying the contract's eight
    // headers (built by the server, parsed by the load generator on the
    // same cores) apart from deciding.
    let sample = http
        .request(
            Request::get(format!("http://{in_process}/"))
                .header("x-client-id", "c0")
                .body(Empty::new())
                .unwrap(),
        )
        .await
        .unwrap();
    let headers: Vec<(HeaderName, HeaderValue)> = sample
        .headers()
        .iter()
        .filter(|(n, _)| n.as_str().contains("ratelimit"))
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    assert_eq!(
        headers.len(),
        8,
        "the layer's allowed response lacks headers"
    );
    let with_headers = hello().layer(MapResponseLayer::new(move |mut res: AxumResponse| {
        res.headers_mut().extend(headers.iter().cloned());
        res
    }));
    Targets {
        rows: vec![
            ("bare", serve(hello()).await),
            (
                "bare + the same 8 headers, static",
                serve(with_headers).await,
            ),
            ("layer, in-process limiter", in_process),
            (
                "layer, in-process limiter, IETF headers only on 200",
                serve(
                    hello().layer(
                        RateLimitLayer::new(limiter(), KeyExtractor::header("x-client-id"))
                            .allowed_headers(HeaderSet::Ietf),
                    ),
                )
                .await,
            ),
            (
                "layer, remote node (gRPC)",
                serve(hello().layer(remote_layer.clone())).await,
            ),
        ],
        remote_layer,
        _node: node,
        _rules: rules,
    }
}

/// Sends `total` GETs from `CONCURRENCY` workers; returns the wall time.
async fn load(
    http: &HttpClient<HttpConnector, Empty<Bytes>>,
    addr: SocketAddr,
    total: u64,
) -> Duration {
    let started = Instant::now();
    let workers = (0..CONCURRENCY).map(|w| {
        let http = http.clone();
        tokio::spawn(async move {
            let mut i = w;
            while i < total {
                let req = Request::get(format!("http://{addr}/"))
                    .header("x-client-id", format!("c{}", i % KEYS))
                    .body(Empty::new())
                    .unwrap();
                let res = http.request(req).await.unwrap();
                assert_eq!(res.status(), 200);
                res.into_body().collect().await.unwrap();
                i += CONCURRENCY;
            }
        })
    });
    for w in futures::future::join_all(workers).await {
        w.unwrap();
    }
    started.elapsed()
}

/// The load generator the rows are measured with.
#[derive(Clone, Copy, PartialEq)]
enum Generator {
    /// HTTP/1.1 written and read by hand on one keep-alive socket per
    /// worker: finds the end of the head and `content-length`, nothing else,
    /// so the generator's share of the two cores barely grows with the
    /// number of response headers and the rows price the server.
    Raw,
    /// hyper's pooled client, which parses every response header into a
    /// `HeaderMap` on the same cores as the server.
    Hyper,
}

/// Sends `total` GETs from `CONCURRENCY` raw keep-alive connections.
async fn load_raw(addr: SocketAddr, total: u64) -> Duration {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let started = Instant::now();
    let workers = (0..CONCURRENCY).map(|w| {
        tokio::spawn(async move {
            let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
            conn.set_nodelay(true).unwrap();
            let mut buf = vec![0u8; 4096];
            let mut req = Vec::with_capacity(128);
            let mut i = w;
            while i < total {
                req.clear();
                req.extend_from_slice(b"GET / HTTP/1.1\r\nhost: b\r\nx-client-id: c");
                req.extend_from_slice((i % KEYS).to_string().as_bytes());
                req.extend_from_slice(b"\r\n\r\n");
                conn.write_all(&req).await.unwrap();
                let mut filled = 0;
                let (head_end, body_len) = loop {
                    let n = conn.read(&mut buf[filled..]).await.unwrap();
                    assert!(n > 0, "the server closed the connection");
                    filled += n;
                    if let Some(end) = buf[..filled].windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = &buf[..end];
                        assert!(head.starts_with(b"HTTP/1.1 200"), "not a 200");
                        break (end + 4, content_length(head));
                    }
                };
                while filled < head_end + body_len {
                    filled += conn.read(&mut buf[filled..]).await.unwrap();
                }
                i += CONCURRENCY;
            }
        })
    });
    for w in futures::future::join_all(workers).await {
        w.unwrap();
    }
    started.elapsed()
}

fn content_length(head: &[u8]) -> usize {
    head.split(|&b| b == b'\n')
        .find_map(|line| {
            let line = std::str::from_utf8(line).ok()?.trim_end();
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .expect("every response here has a content-length")
}

/// Rounds of `secs` per configuration, interleaved (bare, control, in-process,
/// remote, bare, ...) so a change in the machine's load hits every
/// configuration alike; each round's ratios come from the same minute.
fn loopback(rounds: usize, secs: f64, warm_up: u64, generator: Generator) {
    let rt = Runtime::new().unwrap();
    let http = HttpClient::builder(TokioExecutor::new())
        .pool_max_idle_per_host(CONCURRENCY as usize)
        .build_http();
    let t = rt.block_on(targets(&http));
    let configs = &t.rows;
    // Warm-up: connections, the limiter's keys, the node's keys.
    let run = |addr: SocketAddr, n: u64| match generator {
        Generator::Raw => rt.block_on(load_raw(addr, n)),
        Generator::Hyper => rt.block_on(load(&http, addr, n)),
    };
    for (_, addr) in configs {
        run(*addr, warm_up);
    }
    let mut rps = vec![Vec::new(); configs.len()];
    for _ in 0..rounds {
        for (i, (_, addr)) in configs.iter().enumerate() {
            // Size the run from the last measured rate so each lasts ~secs.
            let last = rps[i].last().copied().unwrap_or(5_000.0);
            let n = ((last * secs) as u64).max(CONCURRENCY);
            let took = run(*addr, n);
            rps[i].push(n as f64 / took.as_secs_f64());
        }
    }
    let s = t.remote_layer.stats().snapshot();
    assert_eq!(
        (s.unavailable_open, s.denied),
        (0, 0),
        "remote checks timed out or were denied: the remote row would be wrong"
    );
    let client = match generator {
        Generator::Raw => "raw HTTP/1.1 generator",
        Generator::Hyper => "hyper client generator",
    };
    println!(
        "\n{rounds} interleaved rounds of ~{secs} s each, {CONCURRENCY} connections, loopback, {client}"
    );
    println!(
        "| configuration | req/s (median) | min..max | vs bare (median of per-round ratios) |"
    );
    println!("|---|---:|---:|---:|");
    for (i, (name, _)) in configs.iter().enumerate() {
        let ratios: Vec<f64> = rps[i].iter().zip(&rps[0]).map(|(x, b)| x / b).collect();
        let (lo, hi) = rps[i]
            .iter()
            .fold((f64::MAX, 0.0f64), |(l, h), &x| (l.min(x), h.max(x)));
        println!(
            "| {name} | {:.0} | {lo:.0}..{hi:.0} | {:.3} |",
            median(&rps[i]),
            median(&ratios)
        );
    }
    println!();
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The layer's own cost per request with no network at all: a tower call
/// into a service that answers at once.
fn in_memory(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let bare = ServiceBuilder::new().service_fn(|_req: Request<Empty<Bytes>>| async {
        Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
    });
    let layered = ServiceBuilder::new()
        .layer(RateLimitLayer::new(
            limiter(),
            KeyExtractor::header("x-client-id"),
        ))
        .service(bare);
    let mut g = c.benchmark_group("tower_call_in_memory");
    g.throughput(Throughput::Elements(1));
    let mut i = 0u64;
    let mut req = move || {
        i += 1;
        Request::get("/")
            .header("x-client-id", format!("c{}", i % KEYS))
            .body(Empty::new())
            .unwrap()
    };
    let mut svc = bare;
    g.bench_function("bare", |b| {
        b.iter(|| rt.block_on(async { svc.ready().await.unwrap().call(req()).await.unwrap() }))
    });
    let mut svc = layered;
    g.bench_function("layer_in_process", |b| {
        b.iter(|| rt.block_on(async { svc.ready().await.unwrap().call(req()).await.unwrap() }))
    });
    g.finish();
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --all-targets` does not, and
    // then one short round only proves the bench still runs.
    let bench = std::env::args().any(|a| a == "--bench");
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let wants = |name: &str| filter.as_deref().is_none_or(|f| name.contains(f));
    if wants("loopback") {
        let rounds = env_or("WEIR_BENCH_ROUNDS", if bench { 7.0 } else { 1.0 }) as usize;
        let secs = env_or("WEIR_BENCH_SECS", if bench { 3.0 } else { 0.05 });
        let warm_up = if bench { 4 * KEYS } else { CONCURRENCY };
        // WEIR_BENCH_CLIENT: raw (the default), hyper, or both.
        let client = std::env::var("WEIR_BENCH_CLIENT").unwrap_or_default();
        for (name, generator) in [("raw", Generator::Raw), ("hyper", Generator::Hyper)] {
            let chosen = match client.as_str() {
                "" => name == "raw",
                c => c == name || c == "both",
            };
            if chosen {
                loopback(rounds.max(1), secs, warm_up, generator);
            }
        }
    }
    let mut c = Criterion::default().configure_from_args();
    in_memory(&mut c);
    c.final_summary();
}

fn env_or(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
