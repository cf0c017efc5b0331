//! The example service: `axum_service [--listen ADDR] [--weir URL] [--fail open|closed] [--rules FILE]`.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use weir_client::{Client, FailureMode};
use weir_examples::{app, in_process, layers, RULES};

#[derive(Parser)]
#[command(about = "A hello-world service rate limited by weir")]
struct Args {
    #[arg(long, default_value = "127.0.0.1:3000")]
    listen: SocketAddr,
    /// A weir node's gRPC address (e.g. http://127.0.0.1:8081); without it
    /// the limiter runs in this process.
    #[arg(long)]
    weir: Option<String>,
    /// What to do when the node cannot be reached.
    #[arg(long, value_enum, default_value = "open")]
    fail: Fail,
    /// Rules for the in-process limiter (default: examples/sidecar/rules.toml).
    #[arg(long)]
    rules: Option<PathBuf>,
    /// Per-check deadline against the node, in milliseconds.
    #[arg(long, default_value_t = 50)]
    deadline_ms: u64,
}

#[derive(Clone, Copy, ValueEnum)]
enum Fail {
    Open,
    Closed,
}

#[tokio::main]
async fn main() {
    if let Err(e) = run(Args::parse()).await {
        eprintln!("axum_service: {e}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let failure = match args.fail {
        Fail::Open => FailureMode::Open,
        Fail::Closed => FailureMode::Closed,
    };
    let (pre, post) = match &args.weir {
        Some(url) => {
            let client = Client::builder()
                .deadline(Duration::from_millis(args.deadline_ms))
                .grpc(url)?;
            eprintln!("limits decided by the weir node at {url}");
            layers(client, failure)
        }
        None => {
            let rules = match &args.rules {
                Some(path) => std::fs::read_to_string(path)?,
                None => RULES.to_string(),
            };
            eprintln!("limits decided in this process");
            layers(in_process(&rules)?, failure)
        }
    };
    let app = app(pre, post);
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    eprintln!("listening on http://{}", listener.local_addr()?);
    axum::serve(
        listener,
        // The pre-authentication limit is keyed on the peer address.
        app.router
            .into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}
