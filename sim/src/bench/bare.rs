//! `weir-bare`: the bare reference servers in a process of their own, so they are measured as a node is, and the request files of `bench/edges.sh`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use tokio::net::TcpListener;

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
        if let Some(a) = args.http {
            tokio::spawn(axum_check::serve(bind(a).await?));
            println!("axum check on http://{a}");
        }
        if let Some(a) = args.raw_http {
            tokio::spawn(raw_http::serve(bind(a).await?));
            println!("hand-written HTTP/1.1 on http://{a}");
        }
        let grpc_bind = |a: SocketAddr| {
            grpc::bind(loopback(a)?).map_err(|e| SimError::Usage(format!("cannot bind {a}: {e}")))
        };
        if let Some(a) = args.grpc {
            tokio::spawn(grpc::serve(grpc_bind(a)?));
            println!("tonic RateLimiter and RLS on http://{a}");
        }
        if let Some(a) = args.grpc_counting {
            tokio::spawn(grpc::serve_counting(grpc_bind(a)?));
            println!("tonic RateLimiter, counting, on http://{a}");
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(args.max_secs)) => {}
            () = stop => {}
        }
        Ok(())
    })
}
