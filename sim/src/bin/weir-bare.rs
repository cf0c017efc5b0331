//! The `weir-bare` binary: bare reference servers for the edge benchmarks (see `weir_sim::bench::bare`).

use std::process::ExitCode;

use clap::Parser;
use weir_sim::bench::bare::{self, BareArgs};

// The allocator `weir serve` runs on: a reference on another would price
// the allocator, not weir's work.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    match bare::run(&BareArgs::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weir-bare: {e}");
            ExitCode::from(1)
        }
    }
}
