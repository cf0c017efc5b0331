//! A cluster (or a server the sim did not start) with connected clients: runs one plan at a time and scores it.

use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use weir_core::SystemClock;

use crate::cluster::{Cluster, ClusterOptions};
use crate::error::SimError;
use crate::faults::{self, FaultKind};
use crate::load::{start_time, Driver, Live};
use crate::reference;
use crate::score::{score, RunResult};
use crate::scrape::{scrape, NodeTraffic, PeerTraffic};
use crate::target::{http_client, Conn, Endpoint};
use crate::workloads::{Plan, Workload};

/// Which weir API the load goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    /// POST /v1/check.
    Http,
    /// weir.v1.RateLimiter/Check.
    Grpc,
}

/// How every session drives load.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub concurrency: usize,
    pub seed: u64,
    pub quiet: bool,
    /// Envoy RLS domain for `grpc+rls://` targets.
    pub rls_domain: String,
}

pub struct Session {
    pub strategy: String,
    pub cluster: Option<Cluster>,
    /// HTTP bases whose /metrics are scraped.
    bases: Vec<String>,
    driver: Driver,
    control: reqwest::Client,
    opts: LoadOptions,
    /// Said once per run, e.g. that the nodes report another strategy.
    warnings: Vec<String>,
}

impl Session {
    /// Starts a cluster and connects a client to every node.
    pub async fn cluster(
        opts: ClusterOptions,
        protocol: Protocol,
        load: &LoadOptions,
    ) -> Result<Session, SimError> {
        let strategy = opts.strategy.clone();
        let cluster = Cluster::start(opts).await?;
        let http = http_client();
        let mut conns = Vec::new();
        let mut bases = Vec::new();
        for i in 0..cluster.len() {
            let ep = match protocol {
                Protocol::Http => Endpoint::Http(cluster.http_base(i)),
                Protocol::Grpc => Endpoint::Grpc(cluster.grpc_uri(i)),
            };
            conns.push(Conn::connect(&ep, &http, &load.rls_domain).await?);
            bases.push(cluster.http_base(i));
        }
        let mut warnings = Vec::new();
        match cluster.reported_strategy(0).await {
            Some(s) if s == strategy => {}
            Some(s) => warnings.push(format!(
                "asked for --strategy {strategy} but the nodes report \"{s}\""
            )),
            None => warnings.push("the nodes do not report a strategy".into()),
        }
        Ok(Session::new(
            strategy,
            Some(cluster),
            conns,
            bases,
            http,
            load,
            warnings,
        ))
    }

    /// Drives servers the sim did not start.
    pub async fn targets(endpoints: &[Endpoint], load: &LoadOptions) -> Result<Session, SimError> {
        let http = http_client();
        let mut conns = Vec::new();
        for ep in endpoints {
            conns.push(Conn::connect(ep, &http, &load.rls_domain).await?);
        }
        let bases = endpoints
            .iter()
            .filter_map(|e| e.http_base().map(str::to_string))
            .collect();
        Ok(Session::new(
            "target".into(),
            None,
            conns,
            bases,
            http,
            load,
            Vec::new(),
        ))
    }

    fn new(
        strategy: String,
        cluster: Option<Cluster>,
        conns: Vec<Conn>,
        bases: Vec<String>,
        control: reqwest::Client,
        opts: &LoadOptions,
        warnings: Vec<String>,
    ) -> Session {
        let n = conns.len();
        Session {
            strategy,
            cluster,
            bases,
            driver: Driver {
                conns: Arc::new(conns),
                live: Arc::new(Live::all(n)),
                concurrency: opts.concurrency,
                seed: opts.seed,
                clock: Arc::new(SystemClock::new()),
            },
            control,
            opts: opts.clone(),
            warnings,
        }
    }

    pub fn nodes(&self) -> usize {
        self.driver.conns.len()
    }

    /// Brings the cluster to the state a running one is in before a plan
    /// starts: connections open and no owner in fallback.
    ///
    /// First a few checks per node, one at a time, for throwaway keys under
    /// the plan's rules, so the nodes open their connections to each other
    /// (a cold one would charge its handshake to the workload, and with a
    /// 5 ms owner deadline a handshake trips the fallback). Then enough
    /// concurrent checks on a route with no rule to fill the client pool, so
    /// a burst does not wait on TCP handshakes. Then wait out any fallback.
    async fn warm_up(&self, plan: &Plan) {
        let mut tasks = tokio::task::JoinSet::new();
        for (i, conn) in self.driver.conns.iter().enumerate() {
            if !self.driver.live.is_up(i) {
                continue;
            }
            let conn = conn.clone();
            let routes: Vec<String> = plan.rules.iter().map(|r| r.route.clone()).collect();
            tasks.spawn(async move {
                for j in 0..8 {
                    let route = &routes[j % routes.len().max(1)];
                    conn.check(&format!("warm-up-{i}-{j}"), route).await;
                }
            });
        }
        while tasks.join_next().await.is_some() {}
        let per_node = self.opts.concurrency.clamp(1, 32);
        for (i, conn) in self.driver.conns.iter().enumerate() {
            if !self.driver.live.is_up(i) {
                continue;
            }
            for _ in 0..per_node {
                let conn = conn.clone();
                tasks.spawn(async move {
                    conn.check("warm-up", "GET /sim/warm-up").await;
                });
            }
        }
        while tasks.join_next().await.is_some() {}
        self.settle().await;
    }

    /// Waits (up to 3 s) until no node reports an owner in fallback.
    async fn settle(&self) {
        let until = tokio::time::Instant::now() + Duration::from_secs(3);
        while tokio::time::Instant::now() < until {
            let mut any = false;
            for (i, b) in self.bases.iter().enumerate() {
                if i < self.driver.live.len() && !self.driver.live.is_up(i) {
                    continue;
                }
                let doc: Option<serde_json::Value> =
                    match self.control.get(format!("{b}/v1/cluster")).send().await {
                        Ok(r) => r.json().await.ok(),
                        Err(_) => None,
                    };
                any |= doc.is_some_and(|d| d["fallback"]["active"].as_bool() == Some(true));
            }
            if !any {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn traffic(&self) -> NodeTraffic {
        let live: Vec<String> = self
            .bases
            .iter()
            .enumerate()
            .filter(|(i, _)| *i >= self.driver.live.len() || self.driver.live.is_up(*i))
            .map(|(_, b)| b.clone())
            .collect();
        scrape(&self.control, &live).await
    }

    fn progress(&self, plan: &Plan) -> ProgressBar {
        if self.opts.quiet {
            return ProgressBar::hidden();
        }
        let pb = ProgressBar::new(plan.requests.len() as u64);
        pb.set_style(
            ProgressStyle::with_template(
                "{prefix:>8} {msg:<28} [{bar:30}] {pos}/{len} checks {elapsed}",
            )
            .expect("static template")
            .progress_chars("=> "),
        );
        pb.set_prefix(self.strategy.clone());
        pb.set_message(plan.label());
        pb
    }

    /// Runs one plan (with a fault a third of the way in, if asked) and scores it.
    pub async fn run(&mut self, plan: &Plan, fault: Option<FaultKind>) -> RunResult {
        self.warm_up(plan).await;
        let before = self.traffic().await;
        let cpu_before = self.cpu_ticks();
        let (start, start_unix) = start_time(plan, &self.driver.clock);
        let pb = self.progress(plan);
        let driver = self.driver.clone();
        let (records, fault_report) = match (fault, self.cluster.as_mut()) {
            (Some(kind), Some(cluster)) => {
                // Busy is about admissions under load, which the fault
                // workload makes early: it starts with the run.
                let at = match kind {
                    FaultKind::Busy => start,
                    _ => start + plan.duration / 3,
                };
                let live = driver.live.clone();
                let clock = driver.clock.clone();
                let (records, report) = tokio::join!(
                    driver.drive(plan, start, &pb),
                    faults::inject(
                        cluster,
                        kind,
                        faults::Window {
                            run_start: start,
                            at,
                            until: start + plan.duration,
                        },
                        &live,
                        &clock
                    )
                );
                (records, Some(report))
            }
            (Some(kind), None) => {
                let records = driver.drive(plan, start, &pb).await;
                let report = faults::FaultReport {
                    kind: kind.name().into(),
                    skipped: Some("faults need a cluster the sim started".into()),
                    ..Default::default()
                };
                (records, Some(report))
            }
            (None, _) => (driver.drive(plan, start, &pb).await, None),
        };
        pb.finish_and_clear();
        // Let in-flight gossip land before reading the counters.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let after = self.traffic().await;
        let reference = reference::replay(plan, &records);
        let mut result = score(
            plan,
            &self.strategy,
            self.nodes(),
            &records,
            &reference,
            start_unix,
            PeerTraffic::between(&before, &after),
            fault_report,
        );
        result.warnings.extend(self.warnings.iter().cloned());
        if let Some(share) = crate::cpu::busiest_share(&cpu_before, &self.cpu_ticks()) {
            result.figures.set("busiest_node_cpu_share", share);
        }
        if plan.workload == Workload::Whale {
            whale_messages(plan, &mut result);
        }
        result
    }

    /// CPU ticks of each node the sim started (none for targets).
    fn cpu_ticks(&self) -> Vec<Option<u64>> {
        match &self.cluster {
            Some(c) => (0..c.len())
                .map(|i| c.pid(i).and_then(crate::cpu::ticks))
                .collect(),
            None => Vec::new(),
        }
    }
}

/// Ops the whale's rule sent between nodes per whale check, and the
/// busiest node's share of the CPU, in the row's note.
fn whale_messages(plan: &Plan, r: &mut RunResult) {
    let rule = &plan.rules[0].name;
    let ops = r
        .peer
        .series
        .get(&format!("weir_forwarded_ops_total{{rule=\"{rule}\"}}"))
        .copied()
        .unwrap_or(0.0);
    let checks = r.figures.get("whale_checks").unwrap_or(0.0).max(1.0);
    let per = ops / checks;
    r.figures.set("whale_ops_per_check", per);
    r.figures
        .note
        .push_str(&format!("; {per:.3} ops/whale check"));
    if let Some(share) = r.figures.get("busiest_node_cpu_share") {
        r.figures
            .note
            .push_str(&format!("; busiest node {:.0}% of CPU", 100.0 * share));
    }
}
