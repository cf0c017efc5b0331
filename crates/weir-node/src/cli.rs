//! The `weir` command line (docs/configuration.md): `weir serve` and `weir check`.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use weir_cluster::net::peer_tls::PeerTlsFiles;
use weir_cluster::ClusterConfig;

use crate::config::{InputLimits, LogFormat, ServeConfig};
use crate::tls::TlsFiles;

// Public, with `serve_config`, so tests can parse the same flags that deploy
// files pass. (A plain comment: clap would show a doc comment in --help.)
#[derive(Debug, Parser)]
#[command(
    name = "weir",
    version,
    about = "A distributed rate limiter with no external store"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once per process, so the size of the larger variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a node.
    Serve(ServeArgs),
    /// Send one check to a running node; exit 0 allowed, 1 denied, 2 error.
    Check(CheckArgs),
}

/// A name clap has already checked against the accepted ones, or the default.
fn parsed<T: std::str::FromStr<Err = String>>(v: Option<&str>, default: T) -> Result<T, String> {
    v.map_or(Ok(default), str::parse)
}

/// The node configuration `weir serve` would run with, or why it cannot run.
pub fn serve_config(args: &ServeArgs) -> Result<ServeConfig, String> {
    let d = ServeConfig::default();
    let c = &d.cluster;
    let positive = |flag: &str, v: Option<usize>, default: usize| match v {
        Some(0) => Err(format!("{flag} must be at least 1")),
        Some(n) => Ok(n),
        None => Ok(default),
    };
    let nonzero = |flag: &str, v: Option<Duration>, default: Duration| match v {
        Some(d) if d.is_zero() => Err(format!("{flag} must be longer than zero")),
        Some(d) => Ok(d),
        None => Ok(default),
    };
    if args.seeds.iter().any(|s| s.trim().is_empty()) {
        return Err("--seeds has an empty entry".into());
    }
    let region = match (&args.region, args.region_peers.is_empty()) {
        (Some(name), _) if name.trim().is_empty() => {
            return Err("--region must not be empty".into())
        }
        (Some(name), _) => {
            if args.region_peers.iter().any(|s| s.trim().is_empty()) {
                return Err("--region-peers has an empty entry".into());
            }
            let mut r = weir_cluster::regions::RegionConfig::new(name.trim());
            r.peers = args
                .region_peers
                .iter()
                .map(|s| s.trim().to_string())
                .collect();
            r.round = nonzero("--region-round", args.region_round, r.round)?;
            Some(r)
        }
        (None, false) => return Err("--region-peers needs --region (this node's region)".into()),
        (None, true) => None,
    };
    let config = ServeConfig {
        node_id: args.node_id.clone(),
        http: args.http.unwrap_or(d.http),
        grpc: args.grpc.unwrap_or(d.grpc),
        gossip: args.gossip.unwrap_or(d.gossip),
        peer_grpc: args.peer_grpc,
        tls: match (&args.tls_cert, &args.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
            }),
            (None, None) => None,
            _ => return Err("--tls-cert and --tls-key go together: give both or neither".into()),
        },
        peer_tls: match (&args.peer_tls_cert, &args.peer_tls_key, &args.peer_ca) {
            (Some(cert), Some(key), Some(ca)) => Some(PeerTlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                ca: ca.clone(),
            }),
            (None, None, None) => None,
            _ => {
                return Err(
                    "--peer-tls-cert, --peer-tls-key and --peer-ca go together: give all three \
                     or none"
                        .into(),
                )
            }
        },
        advertise_grpc: args.advertise_grpc,
        advertise_gossip: args.advertise_gossip,
        rules_file: args.rules.clone(),
        admin_token: secrets::secret(
            "--admin-token",
            args.admin_token.as_deref(),
            "--admin-token-file",
            args.admin_token_file.as_deref(),
        )?,
        admin_token_accept: secrets::accepted(
            "--admin-token-accept",
            &args.admin_token_accept,
            "--admin-token-accept-file",
            args.admin_token_accept_file.as_deref(),
        )?,
        cluster: ClusterConfig {
            seeds: args.seeds.iter().map(|s| s.trim().to_string()).collect(),
            strategy: parsed(args.strategy.as_deref(), c.strategy)?,
            sync_interval: nonzero("--sync-interval", args.sync_interval, c.sync_interval)?,
            on_owner_failure: parsed(args.on_owner_failure.as_deref(), c.on_owner_failure)?,
            owner_deadline: nonzero("--owner-deadline", args.owner_deadline, c.owner_deadline)?,
            leave_timeout: nonzero("--leave-timeout", args.leave_timeout, c.leave_timeout)?,
            join_timeout: args
                .join_timeout
                .map(|t| nonzero("--join-timeout", Some(t), t))
                .transpose()?
                .or(c.join_timeout),
            replicas: args.replicas.map_or(c.replicas, usize::from),
            hot_key_rate: args.hot_key_rate.unwrap_or(c.hot_key_rate),
            fallback_cap: args.fallback_cap.unwrap_or(c.fallback_cap),
            secret: secrets::secret(
                "--cluster-secret",
                args.cluster_secret.as_deref(),
                "--cluster-secret-file",
                args.cluster_secret_file.as_deref(),
            )?,
            secret_accept: secrets::accepted(
                "--cluster-secret-accept",
                &args.cluster_secret_accept,
                "--cluster-secret-accept-file",
                args.cluster_secret_accept_file.as_deref(),
            )?,
            insecure_open: args.insecure_open_cluster,
            grpc_only: args.peer_grpc_only,
            region,
            ..c.clone()
        },
        retry_jitter: args.retry_jitter,
        limits: InputLimits {
            max_body_bytes: positive(
                "--max-body-bytes",
                args.max_body_bytes,
                d.limits.max_body_bytes,
            )?,
            max_batch_items: positive("--max-batch", args.max_batch, d.limits.max_batch_items)?,
            max_connections: positive(
                "--max-connections",
                args.max_connections,
                d.limits.max_connections,
            )?,
            header_read_timeout: nonzero(
                "--header-read-timeout",
                args.header_read_timeout,
                d.limits.header_read_timeout,
            )?,
            body_read_timeout: nonzero(
                "--body-read-timeout",
                args.body_read_timeout,
                d.limits.body_read_timeout,
            )?,
            idle_timeout: nonzero("--idle-timeout", args.idle_timeout, d.limits.idle_timeout)?,
        },
        max_keys_per_rule: positive("--max-keys", args.max_keys, d.max_keys_per_rule)?,
        drain_timeout: args.drain_timeout.unwrap_or(d.drain_timeout),
        ui: args.ui.unwrap_or(d.ui),
        grpc_threads: args
            .grpc_threads
            .or(args.threads)
            .map(usize::from)
            .or(d.grpc_threads),
        http_threads: args
            .http_threads
            .or(args.threads)
            .map(usize::from)
            .or(d.http_threads),
        traces: crate::traces::TraceConfig {
            otlp_endpoint: args.otlp_endpoint.clone(),
            sample_ratio: args.trace_sample_ratio.unwrap_or(d.traces.sample_ratio),
        },
    };
    config.validate()?;
    Ok(config)
}

pub fn log_format(args: &ServeArgs) -> LogFormat {
    match args.log_format {
        Some(LogFormatArg::Json) => LogFormat::Json,
        Some(LogFormatArg::Text) | None => LogFormat::Text,
    }
}

/// The whole program: parse, run, map the outcome to an exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return flag_error(e),
    };
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Command::Serve(ServeArgs {
        threads: Some(n), ..
    }) = &cli.command
    {
        builder.worker_threads(usize::from(*n));
    }
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(2, &format!("cannot start the async runtime: {e}")),
    };
    match cli.command {
        Command::Serve(args) => runtime.block_on(serve(args)),
        Command::Check(args) => runtime.block_on(check(args)),
    }
}

/// Help and version go out whole; a usage error becomes one line, because
/// scripts and service managers show the first line of stderr.
fn flag_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        // `weir` alone: the help is the answer, but nothing ran.
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::from(2)
        }
        _ => fail(2, &usage_error(&e.render().to_string())),
    }
}

/// A rendered usage error without its usage and help pointer, on one
/// line. What clap puts on the lines after the first belongs to the error:
/// the missing flags, the possible values, a tip with the flag meant.
fn usage_error(rendered: &str) -> String {
    let error: Vec<&str> = rendered
        .lines()
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .collect();
    let line = one_line(&error.join("\n"));
    match line.strip_prefix("error: ") {
        Some(rest) => rest.to_string(),
        None if line.is_empty() => "invalid arguments".to_string(),
        None => line,
    }
}

fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("weir: {}", one_line(message));
    ExitCode::from(code)
}

/// Collapses a multi-line message (TOML errors carry a source excerpt) into one line.
pub fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

async fn serve(args: ServeArgs) -> ExitCode {
    let config = match serve_config(&args) {
        Ok(c) => c,
        Err(e) => return fail(2, &e),
    };
    init_tracing(log_format(&args));
    let shutdown = match shutdown_signal() {
        Ok(s) => s,
        Err(e) => return fail(1, &format!("cannot install signal handlers: {e}")),
    };
    match crate::run(config, shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(1, &e.to_string()),
    }
}

/// Logs to stderr, level from RUST_LOG (default info).
fn init_tracing(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, not in journald or a file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Resolves on SIGTERM or SIGINT. The handlers are installed before this
/// returns, so a signal that arrives while the node is still binding is
/// not lost (and does not kill the process outright).
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        Ok(async move {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            tracing::info!(signal = name, "shutting down; draining in-flight requests");
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!("shutting down; draining in-flight requests");
        })
    }
}

mod check;
#[cfg(test)]
mod env_tests;
mod secrets;
mod serve_args;
#[cfg(test)]
mod tests;

use check::check;
pub use check::CheckArgs;
pub use serve_args::{LogFormatArg, ServeArgs};
