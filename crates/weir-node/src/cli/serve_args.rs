//! The flags of `weir serve`, each also read from `WEIR_` + its name in
//! capitals (docs/configuration.md).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use weir_cluster::{ClusterConfig, OwnerFailure, StrategyKind};

use crate::config::ServeConfig;

/// Options left out take [`ServeConfig::default`]'s value, so the flags and
/// the library agree on one set of defaults.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// This node's id [default: its HTTP address].
    #[arg(long, env = "WEIR_NODE_ID", value_name = "ID")]
    pub node_id: Option<String>,
    /// HTTP listen address; port 0 picks a free port [default: 127.0.0.1:8080].
    #[arg(long, env = "WEIR_HTTP", value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// gRPC listen address [default: 127.0.0.1:8081].
    #[arg(long, env = "WEIR_GRPC", value_name = "ADDR")]
    pub grpc: Option<SocketAddr>,
    /// Gossip (UDP) address [default: 127.0.0.1:7946].
    #[arg(long, env = "WEIR_GOSSIP", value_name = "ADDR")]
    pub gossip: Option<SocketAddr>,
    /// Serve the peer service (weir.v1.Peer) here instead of on --grpc (plaintext unless --peer-tls-cert).
    #[arg(long, env = "WEIR_PEER_GRPC", value_name = "ADDR")]
    pub peer_grpc: Option<SocketAddr>,
    /// PEM certificate chain of this node for mutual TLS between peers (with --peer-tls-key and --peer-ca); reloaded when it changes.
    #[arg(long, env = "WEIR_PEER_TLS_CERT", value_name = "FILE")]
    pub peer_tls_cert: Option<PathBuf>,
    /// PEM private key of --peer-tls-cert.
    #[arg(long, env = "WEIR_PEER_TLS_KEY", value_name = "FILE")]
    pub peer_tls_key: Option<PathBuf>,
    /// PEM certificate of the CA that signs every peer's certificate, for this cluster alone.
    #[arg(long, env = "WEIR_PEER_CA", value_name = "FILE")]
    pub peer_ca: Option<PathBuf>,
    /// PEM certificate chain: serve HTTPS on --http and TLS gRPC on --grpc (needs --tls-key, --peer-grpc).
    #[arg(long, env = "WEIR_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "WEIR_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// gRPC address peers are told to reach [default: the bound --peer-grpc, else --grpc].
    #[arg(long, env = "WEIR_ADVERTISE_GRPC", value_name = "ADDR")]
    pub advertise_grpc: Option<SocketAddr>,
    /// Gossip address peers are told to reach [default: the bound --gossip address].
    #[arg(long, env = "WEIR_ADVERTISE_GOSSIP", value_name = "ADDR")]
    pub advertise_gossip: Option<SocketAddr>,
    /// Nodes to join through, comma separated.
    #[arg(
        long,
        env = "WEIR_SEEDS",
        value_name = "HOST:PORT,...",
        value_delimiter = ','
    )]
    pub seeds: Vec<String>,
    /// TOML rules file, reloaded when it changes [default: built-in rules].
    #[arg(long, env = "WEIR_RULES", value_name = "FILE")]
    pub rules: Option<PathBuf>,
    #[arg(
        long,
        env = "WEIR_STRATEGY",
        value_parser = names(&StrategyKind::ALL.map(StrategyKind::as_str)),
        help = with_default("Which strategy decides checks", |c| c.strategy.to_string())
    )]
    pub strategy: Option<String>,
    #[arg(
        long,
        env = "WEIR_SYNC_INTERVAL",
        value_name = "DUR",
        value_parser = humantime::parse_duration,
        help = with_default("Gossip strategy: how often deltas are broadcast", |c| {
            duration(c.sync_interval)
        })
    )]
    pub sync_interval: Option<Duration>,
    #[arg(
        long,
        env = "WEIR_ON_OWNER_FAILURE",
        value_parser = names(&OwnerFailure::ALL.map(OwnerFailure::as_str)),
        help = with_default("What to do when a key's owner does not answer in time", |c| {
            c.on_owner_failure.to_string()
        })
    )]
    pub on_owner_failure: Option<String>,
    #[arg(
        long,
        env = "WEIR_OWNER_DEADLINE",
        value_name = "DUR",
        value_parser = humantime::parse_duration,
        help = with_default("How long to wait for a key's owner", |c| duration(c.owner_deadline))
    )]
    pub owner_deadline: Option<Duration>,
    #[arg(
        long,
        env = "WEIR_LEAVE_TIMEOUT",
        value_name = "DUR",
        value_parser = humantime::parse_duration,
        help = with_default(
            "On shutdown, the longest time spent handing counters over and waiting for peers to drop this node; counters not handed over by then cost what a crash costs",
            |c| duration(c.leave_timeout)
        )
    )]
    pub leave_timeout: Option<Duration>,
    #[arg(
        long,
        env = "WEIR_JOIN_TIMEOUT",
        value_name = "DUR",
        value_parser = humantime::parse_duration,
        help = "With --seeds, how long to wait for a seed to answer before running as the cluster's first member; the node is not ready meanwhile [default: five announce intervals, 5s]"
    )]
    pub join_timeout: Option<Duration>,
    #[arg(
        long,
        env = "WEIR_REPLICAS",
        value_name = "N",
        value_parser = clap::value_parser!(u8).range(1..=2),
        help = with_default(
            "Copies of each counter in all: 2 keeps one on the next member, which stands in for an unreachable owner and takes over a dead one with its counts; 1 keeps none",
            |c| c.replicas.to_string()
        )
    )]
    pub replicas: Option<u8>,
    #[arg(
        long,
        env = "WEIR_HOT_KEY_RATE",
        value_name = "N",
        value_parser = clap::value_parser!(u64).range(1..),
        help = with_default(
            "Checks per second at its owner from which a key is hot: leased to the gateways sending it (rules with hot = \"lease\", the default for counting algorithms)",
            |c| c.hot_key_rate.to_string()
        )
    )]
    pub hot_key_rate: Option<u64>,
    #[arg(
        long,
        env = "WEIR_FALLBACK_CAP",
        value_name = "N",
        help = with_default(
            "Most checks per second this node admits without their owners, over every key (0: no cap)",
            |c| c.fallback_cap.to_string()
        )
    )]
    pub fallback_cap: Option<u64>,
    /// This node's region: rules with scope = "global" then hold across every
    /// region linked through --region-peers (docs/regions.md).
    #[arg(long, env = "WEIR_REGION", value_name = "NAME")]
    pub region: Option<String>,
    /// Peer gRPC addresses of nodes in other regions, comma separated; write
    /// REGION=HOST:PORT to name a node's region, else it is asked.
    #[arg(
        long,
        env = "WEIR_REGION_PEERS",
        value_name = "[REGION=]HOST:PORT,...",
        value_delimiter = ','
    )]
    pub region_peers: Vec<String>,
    #[arg(
        long,
        env = "WEIR_REGION_ROUND",
        value_name = "DUR",
        value_parser = humantime::parse_duration,
        help = format!(
            "How often a region reports its use of global keys to their home regions [default: {}]",
            duration(weir_cluster::regions::RegionConfig::DEFAULT_ROUND)
        )
    )]
    pub region_round: Option<Duration>,
    /// Token for rule writes (PUT /v1/limits); writes are refused without one.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "WEIR_ADMIN_TOKEN",
        hide_env_values = true
    )]
    pub admin_token: Option<String>,
    /// File holding the admin token (one trailing newline is dropped), as a
    /// mounted Kubernetes Secret is; instead of --admin-token.
    #[arg(
        long,
        env = "WEIR_ADMIN_TOKEN_FILE",
        value_name = "FILE",
        conflicts_with = "admin_token"
    )]
    pub admin_token_file: Option<PathBuf>,
    /// Admin tokens also taken beside --admin-token, comma separated: a
    /// rotation's old (or next) token (docs/security.md).
    #[arg(
        long,
        value_name = "TOKEN,...",
        env = "WEIR_ADMIN_TOKEN_ACCEPT",
        hide_env_values = true,
        value_delimiter = ','
    )]
    pub admin_token_accept: Vec<String>,
    /// File holding admin tokens also taken, one a line; instead of
    /// --admin-token-accept.
    #[arg(
        long,
        env = "WEIR_ADMIN_TOKEN_ACCEPT_FILE",
        value_name = "FILE",
        conflicts_with = "admin_token_accept"
    )]
    pub admin_token_accept_file: Option<PathBuf>,
    /// Shared secret that seals gossip and authenticates peer calls between
    /// nodes; without it a node takes neither and runs alone.
    #[arg(
        long,
        value_name = "SECRET",
        env = "WEIR_CLUSTER_SECRET",
        hide_env_values = true
    )]
    pub cluster_secret: Option<String>,
    /// File holding the cluster secret (one trailing newline is dropped);
    /// instead of --cluster-secret.
    #[arg(
        long,
        env = "WEIR_CLUSTER_SECRET_FILE",
        value_name = "FILE",
        conflicts_with = "cluster_secret"
    )]
    pub cluster_secret_file: Option<PathBuf>,
    /// Secrets also accepted to open gossip and verify peer calls, never to
    /// seal or sign, comma separated: a rotation's old (or next) secret
    /// (docs/security.md).
    #[arg(
        long,
        value_name = "SECRET,...",
        env = "WEIR_CLUSTER_SECRET_ACCEPT",
        hide_env_values = true,
        value_delimiter = ','
    )]
    pub cluster_secret_accept: Vec<String>,
    /// File holding secrets also accepted, one a line; instead of
    /// --cluster-secret-accept.
    #[arg(
        long,
        env = "WEIR_CLUSTER_SECRET_ACCEPT_FILE",
        value_name = "FILE",
        conflicts_with = "cluster_secret_accept"
    )]
    pub cluster_secret_accept_file: Option<PathBuf>,
    /// INSECURE: with no --cluster-secret, take gossip and peer calls from
    /// anyone who can reach the ports (they can join the ring and replace
    /// the rules). Only for isolated test networks.
    #[arg(long, env = "WEIR_INSECURE_OPEN_CLUSTER")]
    pub insecure_open_cluster: bool,
    /// Forward checks to their owners over gRPC only, not on the direct
    /// connections a node opens to each peer that takes them.
    #[arg(long, env = "WEIR_PEER_GRPC_ONLY")]
    pub peer_grpc_only: bool,
    /// Log line format; the level comes from RUST_LOG [default: text].
    #[arg(long, env = "WEIR_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormatArg>,
    /// Spread the wait a denial reports over [base, 2 x base] (HTTP, gRPC Check, RLS) so denied clients do not return together.
    #[arg(long, env = "WEIR_RETRY_JITTER")]
    pub retry_jitter: bool,
    /// Most counter keys held per rule [default: 1000000].
    #[arg(long, env = "WEIR_MAX_KEYS", value_name = "N")]
    pub max_keys: Option<usize>,
    /// Largest HTTP request body in bytes [default: 65536].
    #[arg(long, env = "WEIR_MAX_BODY_BYTES", value_name = "BYTES")]
    pub max_body_bytes: Option<usize>,
    /// Most checks in one batched call [default: 1000].
    #[arg(long, env = "WEIR_MAX_BATCH", value_name = "N")]
    pub max_batch: Option<usize>,
    /// Most concurrent client connections per listener, HTTP and gRPC each [default: 10000].
    #[arg(long, env = "WEIR_MAX_CONNECTIONS", value_name = "N")]
    pub max_connections: Option<usize>,
    /// How long an HTTP client may take to send a request's head (and a TLS handshake) [default: 10s].
    #[arg(long, env = "WEIR_HEADER_READ_TIMEOUT", value_name = "DUR", value_parser = humantime::parse_duration)]
    pub header_read_timeout: Option<Duration>,
    /// How long an HTTP client may take to send a request's body [default: 10s].
    #[arg(long, env = "WEIR_BODY_READ_TIMEOUT", value_name = "DUR", value_parser = humantime::parse_duration)]
    pub body_read_timeout: Option<Duration>,
    /// How long a connection may sit with no request before it is closed [default: 60s].
    #[arg(long, env = "WEIR_IDLE_TIMEOUT", value_name = "DUR", value_parser = humantime::parse_duration)]
    pub idle_timeout: Option<Duration>,
    /// How long shutdown waits for in-flight requests [default: 10s].
    #[arg(long, env = "WEIR_DRAIN_TIMEOUT", value_name = "DUR", value_parser = humantime::parse_duration)]
    pub drain_timeout: Option<Duration>,
    /// Worker threads serving requests [default: one per CPU]. A sidecar
    /// sharing its host with the service it protects may take fewer.
    #[arg(long, env = "WEIR_THREADS", value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
    /// Threads serving the gRPC port, each with a one-thread runtime of its
    /// own [default: --threads, else one per CPU]; 0 serves it on the
    /// node's shared runtime instead.
    #[arg(long, env = "WEIR_GRPC_THREADS", value_name = "N")]
    pub grpc_threads: Option<u16>,
    /// Threads serving the HTTP port, each with a one-thread runtime of its
    /// own [default: --threads, else one per CPU]; 0 serves it on the
    /// node's shared runtime instead.
    #[arg(long, env = "WEIR_HTTP_THREADS", value_name = "N")]
    pub http_threads: Option<u16>,
    #[arg(
        long,
        env = "WEIR_UI",
        value_name = "true|false",
        help = format!(
            "Serve the live dashboard at GET /ui [default: {}]",
            ServeConfig::default().ui
        )
    )]
    pub ui: Option<bool>,
    /// Send OpenTelemetry traces over OTLP/HTTP (protobuf) to this base URL,
    /// e.g. http://127.0.0.1:4318 (spans go to /v1/traces under it) [default: no traces].
    #[arg(long, env = "WEIR_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    #[arg(
        long,
        env = "WEIR_TRACE_SAMPLE_RATIO",
        value_name = "0.0-1.0",
        help = format!(
            "Share of checks without a sampled traceparent that start a trace; a caller's \
             sampled flag is always followed [default: {}]",
            crate::traces::TraceConfig::default().sample_ratio
        )
    )]
    pub trace_sample_ratio: Option<f64>,
}

/// Help text that ends in the default [`ClusterConfig`] holds, so the help
/// and the library cannot disagree.
fn with_default(what: &str, default: impl Fn(&ClusterConfig) -> String) -> String {
    format!("{what} [default: {}]", default(&ClusterConfig::default()))
}

fn duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// Accepts exactly these names, and lists them in the help.
fn names(names: &[&'static str]) -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(names.iter().copied())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormatArg {
    Text,
    Json,
}
