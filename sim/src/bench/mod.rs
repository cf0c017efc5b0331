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
//!   (the figures in docs/performance.md, "One node, closed and
//!   open loop");
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

mod args;
pub mod bare;
mod closed_loop;
mod conn;
mod forwarded;
mod http1;
pub mod keys;
mod machine;
mod measure;
pub mod model;
mod open_loop;
pub mod pipeline;
pub mod reference;
mod report;
pub mod requests;
mod target;

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Runtime;

pub use args::Args;
use args::Workload;
use closed_loop::closed_loop;
use conn::connections;
use keys::Keys;
use open_loop::open_loop;
use report::{thousands, us, Row};
pub use target::ROUTE;
use target::{Target, Targets};

use crate::error::SimError;

fn runtime(threads: usize, name: &str) -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name(name)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// The highest calls/s one workload reached on one target (by index): its
/// saturating load.
struct Peak {
    target: usize,
    workload: Workload,
    calls_per_s: f64,
}

/// What every configuration of one run shares.
struct Bench<'a> {
    args: &'a Args,
    keys: Arc<Keys>,
    rt: Runtime,
    warmup: Duration,
    secs: Duration,
}

impl Bench<'_> {
    /// Every workload at every concurrency, closed-loop, on every target
    /// that serves it.
    fn closed_rows(&self, targets: &[Target]) -> (Vec<Row>, Vec<Peak>) {
        let mut rows = Vec::new();
        let mut peaks: Vec<Peak> = Vec::new();
        for (ti, target) in targets.iter().enumerate() {
            for &w in &self.args.workloads {
                if !target.serves(w) {
                    continue;
                }
                for &c in &self.args.concurrency {
                    let m = self.rt.block_on(async {
                        let conns = connections(self.args, target, w, c).await;
                        let items = w.items() as u64;
                        let (conns, _) = closed_loop(
                            conns,
                            self.keys.clone(),
                            self.warmup,
                            u64::MAX,
                            items,
                            None,
                        )
                        .await;
                        let (_, m) = closed_loop(
                            conns,
                            self.keys.clone(),
                            self.secs,
                            self.args.max_checks,
                            items,
                            target.pid,
                        )
                        .await;
                        m
                    });
                    let rate = m.totals.calls as f64 / m.elapsed.as_secs_f64();
                    match peaks.iter_mut().find(|p| p.target == ti && p.workload == w) {
                        Some(p) => p.calls_per_s = p.calls_per_s.max(rate),
                        None => peaks.push(Peak {
                            target: ti,
                            workload: w,
                            calls_per_s: rate,
                        }),
                    }
                    eprintln!(
                        "{} / {} / c={}: {} checks/s, p99 {} us",
                        target.name,
                        w.label(),
                        c,
                        thousands(m.totals.tally.checks as f64 / m.elapsed.as_secs_f64()),
                        us(m.totals.latency.value_at_quantile(0.99))
                    );
                    rows.push(Row {
                        target: target.name.clone(),
                        workload: w.label().into(),
                        concurrency: c.to_string(),
                        m,
                    });
                }
            }
        }
        (rows, peaks)
    }

    /// Half of each saturating load, open-loop, for HTTP and 1-item gRPC.
    fn open_rows(&self, targets: &[Target], peaks: &[Peak]) -> Vec<Row> {
        let workers = self.args.open_loop_workers;
        let mut rows = Vec::new();
        for p in peaks.iter().filter(|p| p.workload != Workload::Grpc100) {
            let target = &targets[p.target];
            let w = p.workload;
            let rate = p.calls_per_s / 2.0;
            let m = self.rt.block_on(async {
                let conns = connections(self.args, target, w, workers).await;
                open_loop(
                    conns,
                    self.keys.clone(),
                    rate,
                    self.warmup,
                    self.secs,
                    target.pid,
                )
                .await
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
                    thousands(p.calls_per_s),
                    workers
                ),
                m,
            });
        }
        rows
    }
}

/// Measures the targets `args` names and prints the table.
pub fn run(args: &Args) -> Result<(), SimError> {
    if !(args.secs > 0.0 && args.warmup >= 0.0 && args.keys > 0) {
        return Err(SimError::Usage(
            "--secs must be above 0, --warmup at least 0 and --keys at least 1".into(),
        ));
    }
    if args.model {
        return print_model(args);
    }
    let load_before = machine::loadavg();
    if let (true, Some(bin)) = (args.forwarded, &args.spawn) {
        let rt = runtime(args.threads, "bench-gen");
        forwarded::run(args, bin, &rt)?;
        println!(
            "load average before: {load_before}, after: {}",
            machine::loadavg()
        );
        return Ok(());
    }
    let bench = Bench {
        args,
        keys: Arc::new(Keys::new(args.keys)),
        rt: runtime(args.threads, "bench-gen"),
        warmup: Duration::from_secs_f64(args.warmup),
        secs: Duration::from_secs_f64(args.secs),
    };
    // Servers living in this process run on a runtime of their own, so they
    // and the generator are scheduled like two processes would be.
    let server_rt = runtime(2, "bench-node");
    let targets = Targets::start(args, &bench.rt, &server_rt)?;
    let (mut rows, peaks) = bench.closed_rows(&targets.list);
    if !args.no_open_loop {
        rows.extend(bench.open_rows(&targets.list, &peaks));
    }
    println!(
        "\nload average before: {load_before}, after: {}",
        machine::loadavg()
    );
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
    report::print_table(&rows);
    targets.stop(&server_rt);
    Ok(())
}

/// The cluster model's table (and plot) from the costs `args` gives.
fn print_model(args: &Args) -> Result<(), SimError> {
    let c = &args.costs;
    let i = c.inputs();
    println!("{i:?}");
    print!("{}", model::table(&i, c.whale));
    if let (Some(n), Some(rate)) = (c.check_nodes, c.check_rate) {
        let (busiest, mean) = model::load(&i, n, model::Keys::Uniform, true, rate);
        println!(
            "predicted: {n} nodes at {rate:.0} checks/s use {:.1} us of node CPU per check (busiest node {busiest:.2} cores, mean {mean:.2}); \
             with {} cores per node they reach {:.0} checks/s",
            mean * n as f64 / rate * 1e6,
            i.cores,
            model::throughput(&i, n, model::Keys::Uniform, true)
        );
    }
    if let Some(path) = &c.model_svg {
        model::plot(&i, c.whale, path)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
