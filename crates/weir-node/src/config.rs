//! Everything `weir serve` can be told, as a plain struct a library caller fills in too.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use weir_cluster::net::peer_tls::PeerTlsFiles;
use weir_cluster::ClusterConfig;

use crate::tls::TlsFiles;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Documented ceilings on what one request may carry; over them a request
/// is refused with 4xx naming the field and nothing is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputLimits {
    /// Largest HTTP request body, bytes.
    pub max_body_bytes: usize,
    /// Most checks in one gRPC Check call or one RLS request's descriptors.
    pub max_batch_items: usize,
    /// Most concurrent client connections per listener.
    pub max_connections: usize,
    /// How long a client has to send a request's head, from the moment the
    /// connection (or the previous request) is ready for one; it also bounds
    /// a TLS handshake.
    pub header_read_timeout: Duration,
    /// How long a client has to send a whole request body.
    pub body_read_timeout: Duration,
    /// How long a connection may sit with no request before it is closed,
    /// on every listener and protocol (an HTTP/2 client answering pings
    /// would otherwise hold its slot forever).
    pub idle_timeout: Duration,
}

impl Default for InputLimits {
    fn default() -> Self {
        InputLimits {
            max_body_bytes: 64 * 1024,
            max_batch_items: 1000,
            max_connections: 10_000,
            // Clients are services on the same network sending bodies of a
            // few hundred bytes; ten seconds is ample for them and ends a
            // stalled client's hold on its connection slot.
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(10),
            // Long enough that a client pool's connections between bursts
            // stay up (a reconnect costs a handshake), short enough that
            // abandoned ones come back within a minute.
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// The options of `weir serve` (docs/configuration.md).
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Defaults to the HTTP address when absent.
    pub node_id: Option<String>,
    pub http: SocketAddr,
    pub grpc: SocketAddr,
    pub gossip: SocketAddr,
    /// Serve weir.v1.Peer here instead of on `grpc`; needed with `tls`,
    /// since peers do not use the client certificate.
    pub peer_grpc: Option<SocketAddr>,
    /// HTTPS on `http` and TLS gRPC on `grpc`.
    pub tls: Option<TlsFiles>,
    /// Mutual TLS between peers: the peer port (`peer_grpc`, else `grpc`)
    /// speaks nothing else, and this node dials its peers under it.
    pub peer_tls: Option<PeerTlsFiles>,
    /// The gRPC address peers are told to forward to; None: the bound one.
    /// A port of 0 takes the bound port.
    pub advertise_grpc: Option<SocketAddr>,
    /// The gossip address peers are told to probe; None: the bound one.
    pub advertise_gossip: Option<SocketAddr>,
    /// None: the built-in default rules.
    pub rules_file: Option<PathBuf>,
    pub admin_token: Option<String>,
    /// Admin tokens also taken, during a rotation (`--admin-token-accept`).
    pub admin_token_accept: Vec<String>,
    /// How the node decides with its peers: strategy, seeds, secret,
    /// owner deadline and failure policy, gossip timings.
    pub cluster: ClusterConfig,
    /// Server-side jitter of a denial's wait on every edge (base + uniform(0, base)).
    pub retry_jitter: bool,
    pub limits: InputLimits,
    pub max_keys_per_rule: usize,
    /// How long shutdown waits for in-flight requests.
    pub drain_timeout: Duration,
    /// Serve the live dashboard at `GET /ui`.
    pub ui: bool,
    /// Threads serving the gRPC listener, each a one-thread runtime of its
    /// own (`cores.rs`); None: one per CPU; Some(0): on the runtime
    /// that runs the node.
    pub grpc_threads: Option<usize>,
    /// Threads serving the HTTP listener, as `grpc_threads` the gRPC one.
    pub http_threads: Option<usize>,
    /// OpenTelemetry traces: off unless an OTLP endpoint is named.
    pub traces: crate::traces::TraceConfig,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            node_id: None,
            http: "127.0.0.1:8080".parse().expect("literal address"),
            grpc: "127.0.0.1:8081".parse().expect("literal address"),
            gossip: "127.0.0.1:7946".parse().expect("literal address"),
            peer_grpc: None,
            tls: None,
            peer_tls: None,
            advertise_grpc: None,
            advertise_gossip: None,
            rules_file: None,
            admin_token: None,
            admin_token_accept: Vec::new(),
            cluster: ClusterConfig::default(),
            retry_jitter: false,
            limits: InputLimits::default(),
            max_keys_per_rule: 1_000_000,
            drain_timeout: Duration::from_secs(10),
            ui: true,
            grpc_threads: None,
            http_threads: None,
            traces: Default::default(),
        }
    }
}

impl InputLimits {
    /// The timing rules every listener's connections are held to.
    pub fn timeouts(&self) -> crate::accept::Timeouts {
        crate::accept::Timeouts {
            head: self.header_read_timeout,
            idle: self.idle_timeout,
            // A request whose body never comes. Twice the body timeout,
            // so that on the HTTP port its 408 is always sent first.
            stall: self.body_read_timeout.saturating_mul(2),
        }
    }
}

impl ServeConfig {
    /// Every port on 127.0.0.1:0, for tests and embedding.
    pub fn ephemeral() -> Self {
        let any: SocketAddr = "127.0.0.1:0".parse().expect("literal address");
        ServeConfig {
            http: any,
            grpc: any,
            gossip: any,
            ..ServeConfig::default()
        }
    }

    /// How many one-thread runtimes serve the gRPC listener; 0: none, it
    /// is served on the node's own runtime.
    pub fn grpc_threads(&self) -> usize {
        self.grpc_threads.unwrap_or_else(one_per_cpu)
    }

    /// How many one-thread runtimes serve the HTTP listener; 0: none, it
    /// is served on the node's own runtime.
    pub fn http_threads(&self) -> usize {
        self.http_threads.unwrap_or_else(one_per_cpu)
    }

    /// The listener weir.v1.Peer is served on.
    pub fn peer_listener(&self) -> SocketAddr {
        self.peer_grpc.unwrap_or(self.grpc)
    }

    /// Where peers forward checks to this node.
    pub fn advertised_grpc(&self) -> SocketAddr {
        self.advertise_grpc.unwrap_or(self.peer_listener())
    }

    /// Why this config cannot run, in one line.
    pub fn validate(&self) -> Result<(), String> {
        if self.tls.is_some() && self.peer_grpc.is_none() {
            return Err(
                "--tls-cert needs --peer-grpc ADDR: peers reach each other on a port \
                        of their own, in plaintext or under --peer-tls-cert"
                    .into(),
            );
        }
        self.check_advertised()?;
        self.check_trust()?;
        self.traces.validate()?;
        self.cluster.validate().map_err(str::to_string)
    }

    /// Refuses a node that would join peers it cannot authenticate: seeds
    /// need the cluster secret, or the operator's explicit
    /// `--insecure-open-cluster` (which a secret contradicts).
    fn check_trust(&self) -> Result<(), String> {
        let c = &self.cluster;
        if c.secret.is_some() && c.insecure_open {
            return Err(
                "--insecure-open-cluster and --cluster-secret contradict each other: \
                 a cluster with a secret takes only its members"
                    .into(),
            );
        }
        if !c.secret_accept.is_empty() && c.secret.is_none() {
            return Err(
                "--cluster-secret-accept needs --cluster-secret: accepted secrets open and \
                 verify, and only the cluster secret seals and signs"
                    .into(),
            );
        }
        if !self.admin_token_accept.is_empty() && self.admin_token.is_none() {
            return Err(
                "--admin-token-accept needs --admin-token: accepted tokens stand beside it \
                 during a rotation"
                    .into(),
            );
        }
        if !c.seeds.is_empty() && c.secret.is_none() && !c.insecure_open {
            return Err(
                "--seeds needs --cluster-secret (or WEIR_CLUSTER_SECRET): a node without \
                 one takes no gossip and runs alone (--insecure-open-cluster lets anyone join)"
                    .into(),
            );
        }
        Ok(())
    }

    /// Where peers send this node gossip.
    pub fn advertised_gossip(&self) -> SocketAddr {
        self.advertise_gossip.unwrap_or(self.gossip)
    }

    /// Refuses addresses peers could not be told to reach: 0.0.0.0 (or
    /// `::`) means "every interface" to a listener but "this host" to
    /// whoever is told it, so a node advertising it points its peers at
    /// themselves. Without seeds a node may bind one, as a single node that
    /// no peer needs to reach.
    pub fn check_advertised(&self) -> Result<(), String> {
        let ports = [
            (
                if self.peer_grpc.is_some() {
                    "--peer-grpc"
                } else {
                    "--grpc"
                },
                "--advertise-grpc",
                self.peer_listener(),
                self.advertise_grpc,
            ),
            (
                "--gossip",
                "--advertise-gossip",
                self.gossip,
                self.advertise_gossip,
            ),
        ];
        for (flag, advertise, bound, given) in ports {
            match given {
                Some(a) if a.ip().is_unspecified() => {
                    return Err(format!("{advertise} {a} is not an address peers can reach"));
                }
                None if !self.cluster.seeds.is_empty() && bound.ip().is_unspecified() => {
                    return Err(format!(
                        "{flag} {bound} binds every interface, which peers cannot be told to reach; \
                         with --seeds, give {advertise} ADDR"
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// One serving thread per CPU the process may run on.
fn one_per_cpu() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}
