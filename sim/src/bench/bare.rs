//! `weir-bare`: the bare reference servers in a process of their own, so they are measured as a node is, and the request files of `bench/edges.sh`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use tokio::net::TcpListener;

use axum::serve::Listener;
use weir_node::{accept, cores};

use super::reference::{axum_check, grpc, raw_http};
use crate::error::SimError;

#[derive(Parser, Debug)]
#[command(
    name = "weir-bare",
    about = "Bare reference servers on weir's stack (axum check, hand-written HTTP/1.1, tonic RateLimiter and Envoy RLS), loopback only"
)]
pub struct BareArgs {
    /// The axum check handler (JSON read, one DashMap counter).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// The hand-written HTTP/1.1 responder (canned answer).
    #[arg(long, value_name = "ADDR")]
    pub raw_http: Option<SocketAddr>,
    /// weir.v1.RateLimiter and Envoy's RateLimitService, on one port.
    #[arg(long, value_name = "ADDR")]
    pub grpc: Option<SocketAddr>,
    /// weir.v1.RateLimiter bumping one DashMap counter per item.
    #[arg(long, value_name = "ADDR")]
    pub grpc_counting: Option<SocketAddr>,
    /// Worker threads [default: one per CPU, as `weir serve`].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Threads serving each gRPC listener, each with a one-thread runtime
    /// of its own, as `weir serve` serves its gRPC port [default:
    /// --threads, else one per CPU]; 0 serves them on the worker threads.
    #[arg(long)]
    pub grpc_threads: Option<usize>,
    /// Threads serving the axum check handler, as `weir serve` serves its
    /// HTTP port [default: --threads, else one per CPU]; 0 serves it on
    /// the worker threads. The hand-written responder stays on them.
    #[arg(long)]
    pub http_threads: Option<usize>,
    /// Exit after this many seconds, whatever happens.
    #[arg(long, default_value_t = 3600)]
    pub max_secs: u64,
    /// Write the request files and rules to DIR and exit.
    #[arg(long, value_name = "DIR")]
    pub write_requests: Option<PathBuf>,
}

fn loopback(addr: SocketAddr) -> Result<SocketAddr, SimError> {
    if addr.ip().is_loopback() {
        Ok(addr)
    } else {
        Err(SimError::Usage(format!(
            "{addr}: weir-bare listens on loopback addresses only"
        )))
    }
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, SimError> {
    TcpListener::bind(loopback(addr)?)
        .await
        .map_err(|e| SimError::Usage(format!("cannot bind {addr}: {e}")))
}

/// The connections `listener` accepts dealt out in turn to `threads`
/// one-thread runtimes, each serving its share with `serve`
/// (`weir_node::cores`), as the node serves its ports.
async fn on_cores<S, F>(name: &str, listener: TcpListener, threads: usize, serve: S)
where
    S: Fn(accept::Dealt) -> F + Send + Sync + 'static,
    F: std::future::Future<Output = ()> + 'static,
{
    // No cap on connections, as the servers' own listeners have none.
    let slots = accept::slots(tokio::sync::Semaphore::MAX_PERMITS);
    let shares = match accept::deal(listener, slots, threads, std::future::pending()) {
        Ok(shares) => shares,
        Err(e) => return eprintln!("weir-bare: cannot deal the {name} connections: {e}"),
    };
    if let Err(e) = cores::serve(name, shares, serve).await {
        eprintln!("weir-bare: cannot start the {name} threads: {e}");
    }
}

/// Serves the axum check handler on `listener`: on `threads` one-thread
/// runtimes as the node serves its HTTP port, or on this runtime when
/// `threads` is 0.
async fn serve_axum(listener: TcpListener, threads: usize) {
    if threads == 0 {
        return axum_check::serve(listener).await;
    }
    on_cores("weir-bare-http", listener, threads, axum_check::serve_from).await
}

/// Serves a bare gRPC reference (with `counting`, the counting
/// RateLimiter) on `listener` as the node serves its gRPC port: on
/// `threads` one-thread runtimes with the connections dealt out in turn
/// (`weir_node::cores`), or on this runtime when `threads` is 0. On the
/// multi-thread runtime each HTTP/2 answer goes out in a write of its
/// own (docs/performance.md, "Writes and wake-ups per request"), which
/// a node on its own threads does not pay: the reference would then be
/// no ceiling.
async fn serve_grpc(listener: TcpListener, counting: bool, threads: usize) {
    async fn on<I, IO, IE>(incoming: I, counting: bool)
    where
        I: futures::Stream<Item = Result<IO, IE>>,
        IO: tokio::io::AsyncRead
            + tokio::io::AsyncWrite
            + tonic::transport::server::Connected
            + Unpin
            + Send
            + 'static,
        IE: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        if counting {
            grpc::serve_counting(incoming).await
        } else {
            grpc::serve(incoming).await
        }
    }
    if threads == 0 {
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        return on(incoming, counting).await;
    }
    let serve = move |share: accept::Dealt| {
        let incoming = futures::stream::unfold(share, |mut share| async move {
            let (io, _) = share.accept().await;
            Some((Ok::<_, std::io::Error>(io), share))
        });
        on(incoming, counting)
    };
    on_cores("weir-bare-grpc", listener, threads, serve).await
}

/// Serves what `args` names until `--max-secs` pass or it is told to stop
/// (SIGTERM or SIGINT): returning from `main`, not killed, so a profiling
/// build writes its profile on the way out (bench/pgo.sh).
pub fn run(args: &BareArgs) -> Result<(), SimError> {
    if let Some(dir) = &args.write_requests {
        super::requests::write_all(dir)
            .map_err(|e| SimError::Usage(format!("{}: {e}", dir.display())))?;
        println!("wrote the request files to {}", dir.display());
        return Ok(());
    }
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.threads {
        rt.worker_threads(n);
    }
    let rt = rt.enable_all().build().expect("a tokio runtime");
    rt.block_on(async {
        // Before the first address line, which tells a caller it may stop us.
        let stop = crate::signal::stop_requested()
            .map_err(|e| SimError::io("installing a signal handler", e))?;
        let per_cpu =
            || std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        if let Some(a) = args.http {
            let threads = args.http_threads.or(args.threads).unwrap_or_else(per_cpu);
            tokio::spawn(serve_axum(bind(a).await?, threads));
            println!("axum check on http://{a}");
        }
        if let Some(a) = args.raw_http {
            tokio::spawn(raw_http::serve(bind(a).await?));
            println!("hand-written HTTP/1.1 on http://{a}");
        }
        let threads = args.grpc_threads.or(args.threads).unwrap_or_else(per_cpu);
        if let Some(a) = args.grpc {
            tokio::spawn(serve_grpc(bind(a).await?, false, threads));
            println!("tonic RateLimiter and RLS on http://{a}");
        }
        if let Some(a) = args.grpc_counting {
            tokio::spawn(serve_grpc(bind(a).await?, true, threads));
            println!("tonic RateLimiter, counting, on http://{a}");
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(args.max_secs)) => {}
            () = stop => {}
        }
        Ok(())
    })
}
