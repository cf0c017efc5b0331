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
    /// the saturating rate, beside keys node 1 owns at the same rate.
    #[arg(long, requires = "spawn")]
    pub forwarded: bool,
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
