//! The `weir-sim` command line.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::faults::FaultKind;
use crate::session::Protocol;
use crate::workloads::Workload;

const AFTER_HELP: &str = "\
Scenarios:
  (none)             the default comparison: every standard workload under each
                     strategy, the retry storm, and one kill; prints the table
  steady             Poisson traffic over 300 keys, most clients at 30% of their limit
  boundary           bursts either side of a fixed-window boundary (fixed vs sliding)
  single-connection  one client per node, all its traffic on that node
  spread             clients round-robin over every node
  burst              every node gets a full limit for one key at the same instant
  hot-key            one key carries half of all traffic
  retry-storm        clients rejected together retry: no jitter, full jitter,
                     server jitter (weir serve --retry-jitter)
  fault              saturating keys while --fault is injected (default kill)
  whale              one key with 90% of the traffic from every node, cold keys
                     beside it, under each hot-key valve: off, lease, shard, local
  regions            three regions (--nodes each, 2-3) linked by relays delaying
                     75/150 ms one way, one global limit; demand moves from east
                     to west, then west is cut from the key's home region

Faults (--fault), injected a third of the way into each run:
  kill       SIGKILL the last node; time until every survivor sees it down
  pause      SIGSTOP it until the others notice, then SIGCONT
  restart    kill it and start it again with the same id and ports
  rolling    SIGTERM each node in turn, waiting for it to rejoin
  join       SIGTERM it and, once the others dropped it, start it again
             seeded by the first node alone: its keys move to it while
             the others learn of it a gossip round or two apart
  partition  cut it off from its peers (network namespaces: root and `ip`;
             reported as skipped where the machine does not allow it)
  busy       until the run ends, a spinning thread per core beside the nodes
             and every node in turn stalled (SIGSTOP/SIGCONT) for 40ms

Targets (--target, comma separated, drives servers the sim did not start;
start them with --rules OUT/rules.toml so the reference uses the same rules):
  http://HOST:PORT      weir's HTTP API
  grpc://HOST:PORT      weir's gRPC API (weir.v1.RateLimiter/Check)
  grpc+rls://HOST:PORT  any Envoy rate limit service (descriptor entries
                        route=ROUTE, client=KEY in --rls-domain)";

#[derive(Debug, Parser)]
#[command(
    name = "weir-sim",
    version,
    about = "Runs an N-node weir cluster locally and measures what each strategy admits and costs",
    after_help = AFTER_HELP
)]
pub struct Cli {
    /// Workload to run; none runs the default comparison.
    #[arg(value_enum)]
    pub scenario: Option<Workload>,
    /// Nodes in the cluster.
    #[arg(long, default_value_t = 5)]
    pub nodes: usize,
    /// Strategies to compare, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "owner,gossip,divide")]
    pub strategy: Vec<StrategyName>,
    /// Length of each run (workloads have their own default, 3-15 s).
    #[arg(long, value_name = "DUR", value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// Where the table's JSON, the plots, the rules file and node logs go.
    #[arg(long, value_name = "DIR", default_value = "sim-out")]
    pub out: PathBuf,
    /// Makes every workload reproducible.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Drive these servers instead of starting a cluster.
    #[arg(long, value_name = "URL", value_delimiter = ',')]
    pub target: Vec<String>,
    /// Fault to inject.
    #[arg(long, value_enum)]
    pub fault: Option<FaultKind>,
    /// Gossip strategy sync interval, passed to every node [default: weir's].
    #[arg(long, value_name = "DUR", value_parser = humantime::parse_duration)]
    pub sync_interval: Option<Duration>,
    /// What a node does when a key's owner does not answer (passed through).
    #[arg(long, value_name = "local|open|closed")]
    pub on_owner_failure: Option<String>,
    /// How long a node waits for a key's owner before its fallback decides
    /// (passed through) [default: weir's, 5ms].
    #[arg(long, value_name = "DUR", value_parser = humantime::parse_duration)]
    pub owner_deadline: Option<Duration>,
    /// Copies of each counter, passed to every node as `--replicas`
    /// [default: weir's, 2].
    #[arg(long, value_name = "1|2")]
    pub replicas: Option<usize>,
    /// Checks in flight at once.
    #[arg(long, default_value_t = 128)]
    pub concurrency: usize,
    /// Which weir API the load goes through.
    #[arg(long, value_enum, default_value = "http")]
    pub protocol: Protocol,
    /// The weir binary [default: built from this checkout, or beside weir-sim].
    #[arg(long, value_name = "PATH")]
    pub weir_bin: Option<PathBuf>,
    /// Envoy RLS domain for grpc+rls:// targets.
    #[arg(long, default_value = "weir")]
    pub rls_domain: String,
    /// Print the table and draw the plots of an earlier run's results.json
    /// (into --out) instead of running anything.
    #[arg(long, value_name = "FILE")]
    pub replot: Option<PathBuf>,
    /// No progress bars or per-run lines; the table is still printed.
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StrategyName {
    Owner,
    Gossip,
    Divide,
}

impl StrategyName {
    pub fn as_str(self) -> &'static str {
        match self {
            StrategyName::Owner => "owner",
            StrategyName::Gossip => "gossip",
            StrategyName::Divide => "divide",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_arguments_is_the_default_comparison() {
        let c = Cli::try_parse_from(["weir-sim"]).expect("parses");
        assert_eq!(c.scenario, None);
        assert_eq!(c.nodes, 5);
        assert_eq!(c.strategy.len(), 3);
        assert_eq!(c.out, PathBuf::from("sim-out"));
    }

    #[test]
    fn design_flags_parse() {
        let c = Cli::try_parse_from([
            "weir-sim",
            "burst",
            "--nodes",
            "3",
            "--strategy",
            "gossip,divide",
            "--duration",
            "2s",
            "--fault",
            "pause",
            "--target",
            "http://127.0.0.1:1,grpc+rls://127.0.0.1:2",
        ])
        .expect("parses");
        assert_eq!(c.scenario, Some(Workload::Burst));
        assert_eq!(c.strategy, vec![StrategyName::Gossip, StrategyName::Divide]);
        assert_eq!(c.duration, Some(Duration::from_secs(2)));
        assert_eq!(c.fault, Some(FaultKind::Pause));
        assert_eq!(c.target.len(), 2);
    }
}
