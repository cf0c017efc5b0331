//! `weir-sim dst`: whole members on a simulated clock and network, one seed per run, faults drawn from the seed, every check scored; a failing seed replays exactly.

pub mod calls;
pub mod judge;
pub mod oracle;
pub mod rules;
pub mod schedule;
pub mod world;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::ops::Range;
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use clap::Parser;

use judge::Report;
use schedule::{FaultKind, Schedule};

/// The `dst` command line.
#[derive(Debug, Parser)]
#[command(
    name = "weir-sim dst",
    about = "Deterministic simulation: whole members on one thread, a simulated clock and network, faults from a seed, every check scored against the exact reference"
)]
pub struct DstArgs {
    /// Seeds to run, `A..B` (B excluded) or one number.
    #[arg(long, value_parser = parse_seeds, default_value = "1..101", conflicts_with = "seed")]
    pub seeds: Range<u64>,
    /// One seed to run (with --trace, to replay it).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Members at the start.
    #[arg(long, default_value_t = 5)]
    pub nodes: usize,
    /// Copies of each counter, as `weir serve --replicas`.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=2))]
    pub replicas: u64,
    /// Fault kinds to draw from, comma separated [default: all].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub faults: Vec<FaultKind>,
    /// Print the run's faults, peer calls and check answers as they happen.
    #[arg(long)]
    pub trace: bool,
    /// With --trace: only lines that name this key (and the faults).
    #[arg(long, requires = "trace")]
    pub key: Option<String>,
    /// With --trace: gossip datagrams too.
    #[arg(long, requires = "trace")]
    pub gossip: bool,
    /// Runs at once [default: the machine's cores].
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Only violations and the total.
    #[arg(long, short)]
    pub quiet: bool,
}

fn parse_seeds(s: &str) -> Result<Range<u64>, String> {
    let bad = |what: &str| format!("--seeds {s:?}: {what}; write A..B (B excluded) or one number");
    match s.split_once("..") {
        Some((a, b)) => {
            let a: u64 = a.trim().parse().map_err(|_| bad("A is not a number"))?;
            let b: u64 = b.trim().parse().map_err(|_| bad("B is not a number"))?;
            if b <= a {
                return Err(bad("B must be greater than A"));
            }
            Ok(a..b)
        }
        None => {
            let a: u64 = s.trim().parse().map_err(|_| bad("not a number"))?;
            Ok(a..a + 1)
        }
    }
}

impl DstArgs {
    fn fault_kinds(&self) -> Vec<FaultKind> {
        if self.faults.is_empty() {
            FaultKind::ALL.to_vec()
        } else {
            self.faults.clone()
        }
    }

    fn schedule(&self, seed: u64) -> Schedule {
        Schedule::draw(
            seed,
            self.nodes,
            self.replicas as usize,
            &self.fault_kinds(),
        )
    }

    /// The command that replays `seed` alone, with its trace.
    pub fn replay(&self, seed: u64, key: Option<&str>) -> String {
        let mut cmd = format!("weir-sim dst --seed {seed} --trace");
        if self.nodes != 5 {
            let _ = write!(cmd, " --nodes {}", self.nodes);
        }
        if self.replicas != 2 {
            let _ = write!(cmd, " --replicas {}", self.replicas);
        }
        if !self.faults.is_empty() {
            let names: Vec<&str> = self.faults.iter().map(|f| f.name()).collect();
            let _ = write!(cmd, " --faults {}", names.join(","));
        }
        if let Some(key) = key {
            let _ = write!(cmd, " --key {key}");
        }
        cmd
    }
}

/// Runs `seed` once and judges it.
pub fn run_seed(args: &DstArgs, seed: u64) -> Report {
    let schedule = args.schedule(seed);
    let ran = world::run(&schedule, None);
    judge::judge(&schedule, ran)
}

/// Runs the command; exit status 1 on any violation.
pub fn main(args: DstArgs) -> ExitCode {
    if args.nodes == 0 {
        eprintln!("weir-sim dst: --nodes must be at least 1");
        return ExitCode::from(2);
    }
    if args.trace {
        return trace(&args);
    }
    let seeds = match args.seed {
        Some(s) => s..s + 1,
        None => args.seeds.clone(),
    };
    let started = Instant::now();
    let total = run_all(&args, seeds);
    let took = started.elapsed();
    if !args.quiet {
        println!(
            "{} runs in {:.1} s of wall time ({:.0} runs a minute), {:.0} simulated seconds",
            total.runs,
            took.as_secs_f64(),
            total.runs as f64 * 60.0 / took.as_secs_f64().max(1e-9),
            total.simulated_secs
        );
        println!("faults by kind: {}", kinds(&total.faults));
    }
    println!(
        "runs {}, checks {}, faults {}, over {}, under {}, violations {}",
        total.runs,
        total.checks,
        total.faults.values().sum::<u64>(),
        total.over,
        total.under,
        total.violations
    );
    if total.violations > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Every run's figures added up.
#[derive(Debug, Default)]
pub struct Total {
    pub runs: u64,
    pub checks: u64,
    pub faults: BTreeMap<FaultKind, u64>,
    pub over: u64,
    pub under: u64,
    pub violations: u64,
    pub simulated_secs: f64,
    /// Every run's digest, in seed order: equal totals on one thread and on
    /// several mean the same messages and answers, not just the same sums.
    pub digests: Vec<u64>,
}

/// Runs `seeds` on `--jobs` threads, each run alone on its thread, and
/// prints each run's line in seed order.
pub fn run_all(args: &DstArgs, seeds: Range<u64>) -> Total {
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let next = AtomicU64::new(seeds.start);
    let (tx, rx) = mpsc::channel::<Report>();
    let mut total = Total::default();
    std::thread::scope(|s| {
        for _ in 0..jobs {
            let (tx, next) = (tx.clone(), &next);
            let end = seeds.end;
            s.spawn(move || loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= end {
                    break;
                }
                if tx.send(run_seed(args, seed)).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        // Lines in seed order, whatever order the runs end in.
        let mut waiting: BTreeMap<u64, Report> = BTreeMap::new();
        let mut due = seeds.start;
        for report in rx {
            waiting.insert(report.seed, report);
            while let Some(r) = waiting.remove(&due) {
                print_report(args, &r);
                add(&mut total, &r);
                due += 1;
            }
        }
    });
    total
}

fn add(total: &mut Total, r: &Report) {
    total.runs += 1;
    total.checks += r.checks;
    total.over += r.score.over;
    total.under += r.score.under;
    total.violations += r.violations.len() as u64;
    total.simulated_secs += r.simulated_secs;
    total.digests.push(r.digest);
    for (k, n) in &r.faults {
        *total.faults.entry(*k).or_default() += n;
    }
}

fn print_report(args: &DstArgs, r: &Report) {
    if !args.quiet {
        println!(
            "seed {}: {:.1} s, {} checks, faults [{}], over {}, under {}, violations {}, digest {:016x}",
            r.seed,
            r.simulated_secs,
            r.checks,
            kinds(&r.faults),
            r.score.over,
            r.score.under,
            r.violations.len(),
            r.digest
        );
    }
    for v in &r.violations {
        println!("{}", v.line(r.seed));
        println!("  replay: {}", args.replay(r.seed, v.key.as_deref()));
    }
}

fn kinds(faults: &BTreeMap<FaultKind, u64>) -> String {
    let parts: Vec<String> = faults
        .iter()
        .map(|(k, n)| format!("{} {n}", k.name()))
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

/// Replays one seed, printing what happened as it happened.
fn trace(args: &DstArgs) -> ExitCode {
    let seed = args.seed.unwrap_or(args.seeds.start);
    let schedule = args.schedule(seed);
    println!(
        "seed {seed}: {} nodes, {} copies, jitter {:?}, loss {:.3}, duplication {:.3}, {} checks",
        schedule.nodes,
        schedule.replicas,
        schedule.jitter,
        schedule.loss,
        schedule.duplication,
        schedule.checks.len()
    );
    for (t, a) in &schedule.actions {
        println!("  at {t:?}: {a}");
    }
    let key = args.key.clone();
    let sink: world::TraceSink = Rc::new(move |line: String| {
        let shown = match &key {
            None => true,
            Some(k) => {
                line.contains(k.as_str())
                    || line.contains("fault:")
                    || line.contains("formed")
                    || line.contains(" ring: ")
            }
        };
        if shown {
            // A reader that stopped (`| head`) ends the trace, not the run.
            let _ = writeln!(std::io::stdout().lock(), "{line}");
        }
    });
    let ran = world::run(
        &schedule,
        Some(world::Trace {
            sink,
            gossip: args.gossip,
        }),
    );
    let report = judge::judge(&schedule, ran);
    print_report(args, &report);
    println!("digest {:016x}", report.digest);
    if report.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
