//! Named workloads: each turns parameters into a plan of timed checks and reads its own figures back.

pub mod boundary;
pub mod burst;
pub mod fault;
pub mod hot_key;
pub mod retry_storm;
pub mod single_connection;
pub mod spread;
pub mod steady;
pub mod whale;

use std::collections::BTreeMap;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::load::Record;
use crate::rules::RuleSpec;

/// Every workload the sim knows, in the order the default comparison runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// Poisson arrivals over many keys; most clients near 30% of their limit.
    Steady,
    /// Bursts either side of a fixed-window boundary (fixed vs sliding counter).
    Boundary,
    /// Clients each pinned to one node, as one long-lived connection is.
    SingleConnection,
    /// Clients round-robin over every node.
    Spread,
    /// A synchronized burst on every node at once.
    Burst,
    /// One key carrying half of all traffic.
    HotKey,
    /// Clients rejected together retry after Retry-After (no jitter, full jitter, server jitter).
    RetryStorm,
    /// Saturating keys spread over all nodes while a fault is injected.
    Fault,
    /// One whale key from every node beside cold keys, under each hot-key
    /// valve (off, lease, shard, local).
    Whale,
    /// Three regions linked by delaying relays, one global limit, demand
    /// moving between regions and a cut (its own runner: `crate::regions`).
    Regions,
}

impl Workload {
    pub const STANDARD: [Workload; 6] = [
        Workload::Steady,
        Workload::Boundary,
        Workload::SingleConnection,
        Workload::Spread,
        Workload::Burst,
        Workload::HotKey,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Steady => "steady",
            Workload::Boundary => "boundary",
            Workload::SingleConnection => "single-connection",
            Workload::Spread => "spread",
            Workload::Burst => "burst",
            Workload::HotKey => "hot-key",
            Workload::RetryStorm => "retry-storm",
            Workload::Fault => "fault",
            Workload::Whale => "whale",
            Workload::Regions => "regions",
        }
    }

    /// The rules this workload's plans use.
    pub fn rules(self) -> Vec<RuleSpec> {
        match self {
            Workload::Steady => vec![steady::rule()],
            Workload::Boundary => boundary::rules().to_vec(),
            Workload::SingleConnection => vec![single_connection::rule()],
            Workload::Spread => vec![spread::rule()],
            Workload::Burst => vec![burst::rule()],
            Workload::HotKey => vec![hot_key::rule()],
            Workload::RetryStorm => vec![retry_storm::rule()],
            Workload::Fault => vec![fault::rule()],
            Workload::Whale => whale::rules(),
            Workload::Regions => Vec::new(),
        }
    }

    /// The plans one run of this workload drives (the retry storm has one per jitter mode
    /// that needs no server flag; server jitter needs its own cluster).
    pub fn plans(self, p: &Params) -> Vec<Plan> {
        match self {
            Workload::Steady => vec![steady::plan(p)],
            Workload::Boundary => vec![boundary::plan(p)],
            Workload::SingleConnection => vec![single_connection::plan(p)],
            Workload::Spread => vec![spread::plan(p)],
            Workload::Burst => vec![burst::plan(p)],
            Workload::HotKey => vec![hot_key::plan(p)],
            Workload::RetryStorm => vec![
                retry_storm::plan(p, Retry::Literal, "no-jitter"),
                retry_storm::plan(p, Retry::FullJitter, "full-jitter"),
            ],
            Workload::Fault => vec![fault::plan(p)],
            Workload::Whale => whale::plans(p),
            Workload::Regions => Vec::new(),
        }
    }

    /// Figures that only make sense for this workload, and a short note for the table.
    pub fn figures(self, plan: &Plan, records: &[Record], reference: &[bool]) -> Figures {
        match self {
            Workload::Steady => steady::figures(plan, records, reference),
            Workload::Boundary => boundary::figures(plan, records, reference),
            Workload::SingleConnection => single_connection::figures(plan, records, reference),
            Workload::Spread => spread::figures(plan, records, reference),
            Workload::Burst => burst::figures(plan, records, reference),
            Workload::HotKey => hot_key::figures(plan, records, reference),
            Workload::RetryStorm => retry_storm::figures(plan, records, reference),
            Workload::Fault => fault::figures(plan, records, reference),
            Workload::Whale => whale::figures(plan, records, reference),
            Workload::Regions => Figures::default(),
        }
    }
}

/// What every workload is told.
#[derive(Debug, Clone)]
pub struct Params {
    /// Nodes the traffic is spread over.
    pub nodes: usize,
    /// Overrides the workload's own length where it has one.
    pub duration: Option<Duration>,
    pub seed: u64,
    /// Prefixes every key, so two plans on one cluster never share a counter.
    pub key_prefix: String,
}

impl Params {
    pub fn new(nodes: usize, seed: u64) -> Self {
        Params {
            nodes,
            duration: None,
            seed,
            key_prefix: String::new(),
        }
    }

    pub fn duration_or(&self, d: Duration) -> Duration {
        self.duration.unwrap_or(d)
    }

    /// A generator that depends only on the seed and the workload, so one
    /// `--seed` reproduces every plan whatever else ran before it.
    pub fn rng(&self, workload: Workload) -> StdRng {
        let salt = workload
            .name()
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            });
        StdRng::seed_from_u64(self.seed ^ salt)
    }

    pub fn key(&self, stem: &str, i: usize) -> String {
        format!("{}{stem}-{i:04}", self.key_prefix)
    }
}

/// One check to send: when (from the plan's start), to which node, for which key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Planned {
    pub at: Duration,
    pub node: usize,
    /// Index into [`Plan::keys`].
    pub key: u32,
    /// Index into [`Plan::rules`].
    pub rule: u8,
}

/// What a client does with a 429.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Retry {
    /// Give up.
    Never,
    /// Sleep exactly Retry-After, then retry once (which builds the herd).
    Literal,
    /// Sleep uniform in [0, Retry-After), then retry once.
    FullJitter,
}

/// Where the plan's clock must sit against the epoch: `boundary_at` into the
/// plan falls exactly on a multiple of `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Align {
    pub window: Duration,
    pub boundary_at: Duration,
}

/// A fully determined run: the same plan and seed send the same checks.
#[derive(Debug, Clone)]
pub struct Plan {
    pub workload: Workload,
    /// Distinguishes runs of one workload ("no-jitter", "sync 50ms").
    pub variant: String,
    pub rules: Vec<RuleSpec>,
    pub keys: Vec<String>,
    /// Sorted by `at`.
    pub requests: Vec<Planned>,
    pub align: Option<Align>,
    pub retry: Retry,
    /// Keys whose admitted-over-time is plotted against their limit.
    pub watched: Vec<u32>,
    /// Rule of the watched keys.
    pub watched_rule: u8,
    pub duration: Duration,
}

impl Plan {
    pub fn new(workload: Workload, rules: Vec<RuleSpec>, duration: Duration) -> Self {
        Plan {
            workload,
            variant: String::new(),
            rules,
            keys: Vec::new(),
            requests: Vec::new(),
            align: None,
            retry: Retry::Never,
            watched: Vec::new(),
            watched_rule: 0,
            duration,
        }
    }

    pub fn add_key(&mut self, key: String) -> u32 {
        self.keys.push(key);
        (self.keys.len() - 1) as u32
    }

    pub fn push(&mut self, at: Duration, node: usize, key: u32, rule: u8) {
        self.requests.push(Planned {
            at,
            node,
            key,
            rule,
        });
    }

    /// Sorts the requests by time; stable, so equal times keep insertion order.
    pub fn finish(mut self) -> Self {
        self.requests.sort_by_key(|r| r.at);
        self
    }

    pub fn label(&self) -> String {
        if self.variant.is_empty() {
            self.workload.name().to_string()
        } else {
            format!("{} ({})", self.workload.name(), self.variant)
        }
    }
}

/// Workload-specific results.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Figures {
    pub values: BTreeMap<String, f64>,
    /// One short phrase for the terminal table.
    pub note: String,
}

impl Figures {
    pub fn set(&mut self, name: &str, v: f64) {
        self.values.insert(name.to_string(), v);
    }

    pub fn get(&self, name: &str) -> Option<f64> {
        self.values.get(name).copied()
    }
}

/// Admitted checks per key, first attempts and retries alike.
pub fn admitted_per_key(plan: &Plan, records: &[Record]) -> Vec<u64> {
    let mut n = vec![0u64; plan.keys.len()];
    for r in records.iter().filter(|r| r.outcome.is_allowed()) {
        n[r.key as usize] += 1;
    }
    n
}

/// The reference's admitted checks per key.
pub fn reference_per_key(plan: &Plan, records: &[Record], reference: &[bool]) -> Vec<u64> {
    let mut n = vec![0u64; plan.keys.len()];
    for (r, &ok) in records.iter().zip(reference) {
        if ok {
            n[r.key as usize] += 1;
        }
    }
    n
}

/// Evenly spaced times in `[0, span)`, `count` of them.
pub fn spaced(count: usize, span: Duration) -> impl Iterator<Item = Duration> {
    (0..count).map(move |i| span.mul_f64(i as f64 / count.max(1) as f64))
}

/// The 99th percentile latency of `records`, in milliseconds; 0 for none.
pub fn p99_ms<'a>(records: impl IntoIterator<Item = &'a Record>) -> f64 {
    let mut v: Vec<u64> = records.into_iter().map(|x| x.latency_ns).collect();
    v.sort_unstable();
    v.get((v.len() as f64 * 0.99) as usize)
        .or(v.last())
        .map_or(0.0, |&ns| ns as f64 / 1e6)
}

/// A uniformly random node.
pub fn any_node(rng: &mut StdRng, nodes: usize) -> usize {
    rng.random_range(0..nodes.max(1))
}

/// Mean of a slice, 0 for none.
pub fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        0.0
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

/// Admitted per client as a multiple of L, mean and extremes, against the reference.
pub fn per_client_figures(
    plan: &Plan,
    records: &[Record],
    reference: &[bool],
    limit: u64,
) -> Figures {
    let a = admitted_per_key(plan, records);
    let r = reference_per_key(plan, records, reference);
    let x = |v: &[u64]| -> Vec<f64> { v.iter().map(|&n| n as f64 / limit as f64).collect() };
    let (a, r) = (x(&a), x(&r));
    let min = a.iter().copied().fold(f64::INFINITY, f64::min);
    let max = a.iter().copied().fold(0.0, f64::max);
    let mut f = Figures::default();
    f.set("admitted_per_client_x_limit", mean(&a));
    f.set(
        "admitted_per_client_x_limit_min",
        if a.is_empty() { 0.0 } else { min },
    );
    f.set("admitted_per_client_x_limit_max", max);
    f.set("admitted_per_client_x_limit_reference", mean(&r));
    f.note = format!("per client {:.2}xL (ref {:.2}xL)", mean(&a), mean(&r));
    f
}
