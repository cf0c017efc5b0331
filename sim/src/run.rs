//! The comparison: which runs happen under which strategy, in what order, on which clusters.

use crate::cli::{Cli, StrategyName};
use crate::cluster::ClusterOptions;
use crate::error::SimError;
use crate::faults::FaultKind;
use crate::rules::{self, rules_toml};
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
            let fault = |kind| Phase {
                workload: Workload::Fault,
                fault: Some(kind),
            };
            match cli.fault {
                Some(kind) => v.push(fault(kind)),
                // Last: a kill leaves the cluster one node short.
                None => v.extend([fault(FaultKind::Busy), fault(FaultKind::Kill)]),
            }
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
        Workload::Whale,
    ]
    .into_iter()
    .flat_map(Workload::rules)
    .collect();
    rules_toml(&specs)
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
    let rules_file = rules::write_file(&cli.out, &all_rules())?;
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
    if cli.scenario == Some(Workload::Regions) {
        return crate::regions::run(cli, &bin).await;
    }
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
        opts.replicas = cli.replicas;
        opts.netns = netns;
        // The default comparison runs the retry storm once, under the first
        // strategy: it measures clients, not the cluster.
        let storm = phases
            .iter()
            .find(|p| p.workload == Workload::RetryStorm)
            .filter(|_| cli.scenario.is_some() || si == 0)
            .copied();
        let mine: Vec<Phase> = phases
            .iter()
            .copied()
            .filter(|p| p.workload != Workload::RetryStorm)
            .collect();
        let params = Params {
            nodes: cli.nodes,
            duration: cli.duration,
            seed: cli.seed,
            key_prefix: String::new(),
        };
        if !mine.is_empty() {
            say(
                cli.quiet,
                &format!(
                    "starting {} nodes, strategy {}",
                    cli.nodes,
                    strategy.as_str()
                ),
            );
            let plans = plans_of(&mine, &params);
            results.extend(run_plans(opts.clone(), cli, &load, strategy, &plans).await);
            // What a second copy buys is only seen beside one copy: the kill
            // again on a cluster started with --replicas 1.
            let kill: Vec<Phase> = mine
                .iter()
                .copied()
                .filter(|p| p.fault == Some(FaultKind::Kill))
                .collect();
            if strategy == StrategyName::Owner && cli.replicas.is_none() && !kill.is_empty() {
                let mut one = opts.clone();
                one.replicas = Some(1);
                one.log_dir = opts.log_dir.with_file_name("owner-1-copy");
                say(
                    cli.quiet,
                    &format!("starting {} nodes, strategy owner, --replicas 1", cli.nodes),
                );
                let plans: Vec<_> = plans_of(&kill, &params)
                    .into_iter()
                    .map(|(mut plan, fault)| {
                        plan.variant.push_str(", 1 copy");
                        (plan, fault)
                    })
                    .collect();
                results.extend(run_plans(one, cli, &load, strategy, &plans).await);
            }
        }
        if let Some(phase) = storm {
            results.extend(retry_storms(opts, cli, &params, &load, strategy, phase.fault).await);
        }
    }
    Ok(results)
}

/// Every plan of `phases`, each with its fault. A fault workload's variant
/// names its fault, so a kill and a busy run are two rows, and its keys
/// too: two fault runs on one cluster never share a counter.
fn plans_of(phases: &[Phase], params: &Params) -> Vec<(Plan, Option<FaultKind>)> {
    phases
        .iter()
        .flat_map(|p| {
            let mut params = params.clone();
            let fault = match (p.workload, p.fault) {
                (Workload::Fault, Some(kind)) => Some(kind.name()),
                _ => None,
            };
            if let Some(name) = fault {
                params.key_prefix.push_str(&format!("{name}-"));
            }
            p.workload.plans(&params).into_iter().map(move |mut plan| {
                if let Some(name) = fault {
                    plan.variant = name.to_string();
                }
                (plan, p.fault)
            })
        })
        .collect()
}

/// Starts one cluster and runs `plans` on it in order; if it does not
/// start, every plan is reported failed.
async fn run_plans(
    opts: ClusterOptions,
    cli: &Cli,
    load: &LoadOptions,
    strategy: StrategyName,
    plans: &[(Plan, Option<FaultKind>)],
) -> Vec<RunResult> {
    let mut results = Vec::new();
    match Session::cluster(opts, cli.protocol, load).await {
        Ok(mut session) => {
            for (plan, fault) in plans {
                let r = session.run(plan, *fault).await;
                say(cli.quiet, &summary(&r));
                results.push(r);
            }
        }
        Err(e) => {
            say(
                cli.quiet,
                &format!("{:>8} cluster failed: {e}", strategy.as_str()),
            );
            for (plan, _) in plans {
                results.push(failed(strategy, plan, cli.nodes, &e));
            }
        }
    }
    results
}

/// The retry storm on clusters of its own: clients with no jitter and with
/// full jitter, then clients obeying literally a cluster started with
/// `--retry-jitter`.
async fn retry_storms(
    mut opts: ClusterOptions,
    cli: &Cli,
    params: &Params,
    load: &LoadOptions,
    strategy: StrategyName,
    fault: Option<FaultKind>,
) -> Vec<RunResult> {
    let name = strategy.as_str();
    opts.netns = fault == Some(FaultKind::Partition) && opts.netns;
    say(
        cli.quiet,
        &format!(
            "starting {} nodes, strategy {name}, for the retry storm",
            cli.nodes
        ),
    );
    let plans: Vec<(Plan, Option<FaultKind>)> = Workload::RetryStorm
        .plans(params)
        .into_iter()
        .map(|p| (p, fault))
        .collect();
    opts.log_dir = opts.log_dir.with_file_name(format!("{name}-retry-storm"));
    let mut results = run_plans(opts.clone(), cli, load, strategy, &plans).await;
    opts.retry_jitter = true;
    opts.netns = false;
    opts.log_dir = opts.log_dir.with_file_name(format!("{name}-retry-jitter"));
    let server = retry_storm::plan(params, Retry::Literal, "server-jitter");
    results.extend(run_plans(opts, cli, load, strategy, &[(server, None)]).await);
    results
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
