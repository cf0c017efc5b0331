//! The comparison: which runs happen under which strategy, in what order, on which clusters.

use std::path::{Path, PathBuf};

use crate::cli::{Cli, StrategyName};
use crate::cluster::ClusterOptions;
use crate::error::SimError;
use crate::faults::FaultKind;
use crate::rules::rules_toml;
use crate::score::RunResult;
use crate::session::{LoadOptions, Session};
use crate::target::Endpoint;
use crate::weir_bin::{self, Profile};
use crate::workloads::{retry_storm, Params, Plan, Retry, Workload};

/// One workload under one strategy, with or without a fault.
#[derive(Debug, Clone, Copy)]
struct Phase {
    workload: Workload,
    fault: Option<FaultKind>,
}

/// What to run, derived from the command line.
fn phases(cli: &Cli) -> Vec<Phase> {
    let plain = |w| Phase {
        workload: w,
        fault: None,
    };
    match cli.scenario {
        Some(Workload::Fault) => vec![Phase {
            workload: Workload::Fault,
            fault: Some(cli.fault.unwrap_or(FaultKind::Kill)),
        }],
        Some(w) => vec![Phase {
            workload: w,
            fault: cli.fault,
        }],
        None => {
            let mut v: Vec<Phase> = Workload::STANDARD.into_iter().map(plain).collect();
            v.push(plain(Workload::RetryStorm));
            // Last: a kill leaves the cluster one node short.
            v.push(Phase {
                workload: Workload::Fault,
                fault: Some(cli.fault.unwrap_or(FaultKind::Kill)),
            });
            v
        }
    }
}

/// All rules every workload uses: one file serves every run.
pub fn all_rules() -> String {
    let specs: Vec<_> = [
        Workload::Steady,
        Workload::Boundary,
        Workload::SingleConnection,
        Workload::Spread,
        Workload::Burst,
        Workload::HotKey,
        Workload::RetryStorm,
        Workload::Fault,
    ]
    .into_iter()
    .flat_map(Workload::rules)
    .collect();
    rules_toml(&specs)
}

fn write_rules(out: &Path) -> Result<PathBuf, SimError> {
    std::fs::create_dir_all(out)
        .map_err(|e| SimError::io(format!("creating {}", out.display()), e))?;
    let path = out.join("rules.toml");
    std::fs::write(&path, all_rules())
        .map_err(|e| SimError::io(format!("writing {}", path.display()), e))?;
    // Nodes run from another directory (and namespace): give them a full path.
    std::path::absolute(&path).map_err(|e| SimError::io("resolving the rules path", e))
}

fn say(quiet: bool, line: &str) {
    if !quiet {
        eprintln!("{line}");
    }
}

fn summary(r: &RunResult) -> String {
    match &r.error {
        Some(e) => format!("{:>8} {:<28} error: {e}", r.strategy, r.label()),
        None => format!(
            "{:>8} {:<28} {} checks, admitted {} (ref {}), over {:.1}% under {:.1}%, p99 {:.2}ms",
            r.strategy,
            r.label(),
            r.checks,
            r.admitted,
            r.reference_admitted,
            r.over_pct,
            r.under_pct,
            r.latency.p99_ms
        ),
    }
}

/// Runs everything the command line asks for and returns every result.
pub async fn run(cli: &Cli) -> Result<Vec<RunResult>, SimError> {
    let rules_file = write_rules(&cli.out)?;
    let load = LoadOptions {
        concurrency: cli.concurrency,
        seed: cli.seed,
        quiet: cli.quiet,
        rls_domain: cli.rls_domain.clone(),
    };
    let phases = phases(cli);
    if !cli.target.is_empty() {
        return run_targets(cli, &phases, &load).await;
    }
    let bin = weir_bin::locate(cli.weir_bin.as_deref(), Profile::own(), cli.quiet)?;
    let partition = phases.iter().any(|p| p.fault == Some(FaultKind::Partition));
    let netns = partition && crate::netns::unavailable().is_none();
    let mut results = Vec::new();
    for (si, &strategy) in cli.strategy.iter().enumerate() {
        let mut opts = ClusterOptions::new(
            bin.clone(),
            cli.nodes,
            strategy.as_str(),
            rules_file.clone(),
            cli.out.join("logs").join(strategy.as_str()),
        );
        opts.sync_interval = cli.sync_interval;
        opts.on_owner_failure = cli.on_owner_failure.clone();
        opts.owner_deadline = cli.owner_deadline;
        opts.netns = netns;
        // The default comparison runs the retry storm once, under the first
        // strategy: it measures clients, not the cluster.
        let storm_here = cli.scenario.is_some() || si == 0;
        let mine: Vec<Phase> = phases
            .iter()
            .copied()
            .filter(|p| p.workload != Workload::RetryStorm || storm_here)
            .collect();
        let params = Params {
            nodes: cli.nodes,
            duration: cli.duration,
            seed: cli.seed,
            key_prefix: String::new(),
        };
        say(
            cli.quiet,
            &format!(
                "starting {} nodes, strategy {}",
                cli.nodes,
                strategy.as_str()
            ),
        );
        match Session::cluster(opts.clone(), cli.protocol, &load).await {
            Ok(mut session) => {
                for phase in &mine {
                    for plan in phase.workload.plans(&params) {
                        let r = session.run(&plan, phase.fault).await;
                        say(cli.quiet, &summary(&r));
                        results.push(r);
                    }
                }
            }
            Err(e) => {
                say(
                    cli.quiet,
                    &format!("{:>8} cluster failed: {e}", strategy.as_str()),
                );
                for phase in &mine {
                    for plan in phase.workload.plans(&params) {
                        results.push(failed(strategy, &plan, cli.nodes, &e));
                    }
                }
            }
        }
        if mine.iter().any(|p| p.workload == Workload::RetryStorm) {
            let r = server_jitter_storm(opts, cli, &params, &load, strategy).await;
            say(cli.quiet, &summary(&r));
            results.push(r);
        }
    }
    Ok(results)
}

/// The retry storm again on a cluster started with `--retry-jitter`, clients
/// obeying Retry-After literally.
async fn server_jitter_storm(
    mut opts: ClusterOptions,
    cli: &Cli,
    params: &Params,
    load: &LoadOptions,
    strategy: StrategyName,
) -> RunResult {
    opts.retry_jitter = true;
    opts.netns = false;
    opts.log_dir = opts
        .log_dir
        .with_file_name(format!("{}-retry-jitter", strategy.as_str()));
    let plan = retry_storm::plan(params, Retry::Literal, "server-jitter");
    match Session::cluster(opts, cli.protocol, load).await {
        Ok(mut s) => s.run(&plan, None).await,
        Err(e) => failed(strategy, &plan, cli.nodes, &e),
    }
}

fn failed(strategy: StrategyName, plan: &Plan, nodes: usize, e: &SimError) -> RunResult {
    RunResult::failed(
        strategy.as_str(),
        plan.workload.name(),
        &plan.variant,
        nodes,
        e.to_string(),
    )
}

async fn run_targets(
    cli: &Cli,
    phases: &[Phase],
    load: &LoadOptions,
) -> Result<Vec<RunResult>, SimError> {
    let endpoints = cli
        .target
        .iter()
        .map(|t| Endpoint::parse(t))
        .collect::<Result<Vec<_>, _>>()?;
    say(
        cli.quiet,
        &format!(
            "driving {} target(s); they should run the rules in {}",
            endpoints.len(),
            cli.out.join("rules.toml").display()
        ),
    );
    let mut session = Session::targets(&endpoints, load).await?;
    let params = Params {
        nodes: endpoints.len(),
        duration: cli.duration,
        seed: cli.seed,
        // A server that outlives the sim keeps its counters: fresh keys per
        // run. Only the names change; the plan's shape still follows --seed.
        key_prefix: format!(
            "t{}-",
            weir_core::Clock::now(&weir_core::SystemClock::new()) / 1_000_000_000 % 1_000_000
        ),
    };
    let mut results = Vec::new();
    for phase in phases {
        for plan in phase.workload.plans(&params) {
            let r = session.run(&plan, phase.fault).await;
            say(cli.quiet, &summary(&r));
            results.push(r);
        }
    }
    Ok(results)
}
