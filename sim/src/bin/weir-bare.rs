//! The `weir-bare` binary: bare reference servers for the edge benchmarks (see `weir_sim::bench::bare`).

use std::process::ExitCode;

use clap::Parser;
use weir_sim::bench::bare::{self, BareArgs};

// The allocator `weir serve` runs on: a reference on another would price
// the allocator, not weir's work.
#[global_allocator]
static ALLOC: weir_alloc::Mimalloc = weir_alloc::Mimalloc;

fn main() -> ExitCode {
    // A subscriber as `weir serve` installs one (level from RUST_LOG,
    // default info). Without any, the stack's disabled spans are not free:
    // tracing hands each to the `log` facade, which cost the references
    // 0.36 us of a 16 us RLS request that the node does not pay.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    match bare::run(&BareArgs::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weir-bare: {e}");
            ExitCode::from(1)
        }
    }
}
