//! weir-bench's command line: where the node is, how long and how hard to drive it.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "weir-bench",
    about = "Loopback load generator for one weir node: HTTP and gRPC checks per second and latency"
)]
pub struct Args {
    /// Run `PATH serve` as a separate process and measure it.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["http", "grpc"])]
    pub spawn: Option<PathBuf>,
    /// HTTP base URL of a running node, e.g. http://127.0.0.1:8080.
    #[arg(long, value_name = "URL")]
    pub http: Option<String>,
    /// gRPC URL of a running node, e.g. http://127.0.0.1:8081.
    #[arg(long, value_name = "URL")]
    pub grpc: Option<String>,
    /// Measured seconds per configuration.
    #[arg(long, default_value_t = 5.0)]
    pub secs: f64,
    /// Warm-up seconds per configuration, not recorded.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Most checks per measured configuration (whichever of this and
    /// --secs is reached first ends it).
    #[arg(long, default_value_t = 20_000_000)]
    pub max_checks: u64,
    /// Distinct keys; each check picks one at random.
    #[arg(long, default_value_t = 100_000)]
    pub keys: usize,
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    pub concurrency: Vec<usize>,
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "http,grpc1,grpc100"
    )]
    pub workloads: Vec<Workload>,
    /// HTTP client: `raw` writes HTTP/1.1 on a keep-alive socket per
    /// worker; `reqwest` uses a pooled reqwest client.
    #[arg(long, value_enum, default_value = "raw")]
    pub http_client: HttpClientKind,
    /// gRPC connections the workers share (a worker uses i mod N).
    #[arg(long, default_value_t = 1)]
    pub grpc_conns: usize,
    /// Skip the open-loop run at half the saturating load.
    #[arg(long)]
    pub no_open_loop: bool,
    /// Connections (HTTP) or workers (gRPC) in the open-loop run.
    #[arg(long, default_value_t = 64)]
    pub open_loop_workers: usize,
    /// Also measure bare reference servers in this process.
    #[arg(long)]
    pub reference: bool,
    /// HTTP base URL of running bare references (`weir-bare`), measured
    /// after the node in the same run.
    #[arg(long, value_name = "URL")]
    pub bare_http: Option<String>,
    /// gRPC URL of running bare references (`weir-bare`).
    #[arg(long, value_name = "URL")]
    pub bare_grpc: Option<String>,
    /// Measure the forwarded path instead: a 3-node cluster of `--spawn`
    /// nodes, checks to node 1 for keys the others own, open loop at half
    /// the saturating rate (`--forwarded-load`), beside keys node 1 owns at
    /// the same rate.
    #[arg(long, requires = "spawn")]
    pub forwarded: bool,
    /// With `--forwarded`: the open-loop rate of the latency figures, as a
    /// share of the two-copy saturating rate (above 0, at most 1). Below
    /// the default half the cores sit idler, as a larger machine's would.
    #[arg(long, value_name = "SHARE", default_value_t = 0.5, value_parser = load_share, requires = "forwarded")]
    pub forwarded_load: f64,
    /// With `--forwarded`: an argument for every node it starts, once per
    /// argument (`--node-arg=--peer-grpc-only` forwards over gRPC only,
    /// to compare with the direct connections).
    #[arg(
        long = "node-arg",
        value_name = "ARG",
        allow_hyphen_values = true,
        requires = "forwarded"
    )]
    pub node_args: Vec<String>,
    /// Print the cluster model's predictions (no load is sent) from the
    /// per-check costs below, as `--forwarded` measures them.
    #[arg(long)]
    pub model: bool,
    #[command(flatten)]
    pub costs: ModelArgs,
    /// Worker threads of the generator's runtime.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    Http,
    Grpc1,
    Grpc100,
}

impl Workload {
    /// Checks per call.
    pub fn items(self) -> usize {
        match self {
            Workload::Http | Workload::Grpc1 => 1,
            Workload::Grpc100 => 100,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Workload::Http => "HTTP POST /v1/check",
            Workload::Grpc1 => "gRPC Check, 1 item",
            Workload::Grpc100 => "gRPC Check, 100 items",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HttpClientKind {
    Raw,
    Reqwest,
}

/// A share of a rate: above 0 and at most 1.
fn load_share(s: &str) -> Result<f64, String> {
    let share: f64 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    if share > 0.0 && share <= 1.0 {
        Ok(share)
    } else {
        Err(format!("must be above 0 and at most 1, got {s}"))
    }
}

/// The cluster model's inputs: CPU microseconds per check, op or call.
/// The defaults are the medians, input by input, of three `--forwarded`
/// runs on a quiet machine (docs/performance.md, "Past one machine").
#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// Cores per node.
    #[arg(long, default_value_t = 2.0)]
    pub cores: f64,
    /// The edge (HTTP) and a local decision, per check received.
    #[arg(long, default_value_t = 8.9)]
    pub edge_us: f64,
    #[arg(long, default_value_t = 0.0)]
    pub gateway_call_us: f64,
    #[arg(long, default_value_t = 6.0)]
    pub gateway_op_us: f64,
    #[arg(long, default_value_t = 9.3)]
    pub owner_call_us: f64,
    #[arg(long, default_value_t = 1.8)]
    pub owner_op_us: f64,
    /// The second copy of a counter, per admitted check.
    #[arg(long, default_value_t = 3.4)]
    pub copy_us: f64,
    /// Decide call time under load.
    #[arg(long, default_value_t = 250.0)]
    pub rtt_us: f64,
    /// The whale key's share of all checks.
    #[arg(long, default_value_t = 0.2)]
    pub whale: f64,
    /// Write the plot of predicted checks/s against N here.
    #[arg(long, value_name = "SVG")]
    pub model_svg: Option<PathBuf>,
    /// Also print the predicted node CPU per check with this many nodes...
    #[arg(long)]
    pub check_nodes: Option<usize>,
    /// ...at this rate (checks/s), uniform keys, batching on.
    #[arg(long)]
    pub check_rate: Option<f64>,
}

impl ModelArgs {
    pub fn inputs(&self) -> super::model::Inputs {
        let s = |us: f64| us * 1e-6;
        super::model::Inputs {
            cores: self.cores,
            edge: s(self.edge_us),
            gateway_call: s(self.gateway_call_us),
            gateway_op: s(self.gateway_op_us),
            owner_call: s(self.owner_call_us),
            owner_op: s(self.owner_op_us),
            copy: s(self.copy_us),
            rtt: s(self.rtt_us),
            // The defaults of the node (docs/cluster.md): 4 calls in flight per owner, 256 ops per call.
            in_flight: 4.0,
            max_batch: 256.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Args;

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(["weir-bench"].iter().chain(args))
    }

    #[test]
    fn the_forwarded_load_is_half_unless_told() {
        let a = parse(&["--spawn", "weir", "--forwarded"]).expect("parses");
        assert_eq!(a.forwarded_load, 0.5);
        let a =
            parse(&["--spawn", "weir", "--forwarded", "--forwarded-load", "0.1"]).expect("parses");
        assert_eq!(a.forwarded_load, 0.1);
    }

    #[test]
    fn a_forwarded_load_outside_its_range_is_refused_naming_it() {
        for (bad, why) in [
            ("0", "must be above 0 and at most 1"),
            ("-0.5", "must be above 0 and at most 1"),
            ("1.5", "must be above 0 and at most 1"),
            ("NaN", "must be above 0 and at most 1"),
            ("half", "is not a number"),
        ] {
            let flag = format!("--forwarded-load={bad}");
            let e = parse(&["--spawn", "weir", "--forwarded", &flag])
                .expect_err(bad)
                .to_string();
            assert!(
                e.contains("--forwarded-load") && e.contains(why),
                "{bad}: {e}"
            );
        }
        let a =
            parse(&["--spawn", "weir", "--forwarded", "--forwarded-load", "1"]).expect("parses");
        assert_eq!(a.forwarded_load, 1.0);
    }

    #[test]
    fn node_arguments_reach_the_forwarded_run_in_order() {
        let a = parse(&[
            "--spawn",
            "weir",
            "--forwarded",
            "--node-arg=--peer-grpc-only",
            "--node-arg",
            "--owner-deadline=10ms",
        ])
        .expect("parses");
        assert_eq!(a.node_args, ["--peer-grpc-only", "--owner-deadline=10ms"]);
        let e = parse(&["--spawn", "weir", "--node-arg=--peer-grpc-only"])
            .expect_err("no forwarded run to take it")
            .to_string();
        assert!(e.contains("--forwarded"), "{e}");
    }

    #[test]
    fn a_forwarded_load_without_the_forwarded_run_is_refused() {
        let e = parse(&["--spawn", "weir", "--forwarded-load", "0.2"]).expect_err("refused");
        assert!(e.to_string().contains("--forwarded"), "{e}");
    }
}
