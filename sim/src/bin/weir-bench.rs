//! The `weir-bench` binary: parse the flags and measure (see `weir_sim::bench`).

use std::process::ExitCode;

use clap::Parser;
use weir_sim::bench::{self, Args};

fn main() -> ExitCode {
    match bench::run(&Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weir-bench: {e}");
            ExitCode::from(1)
        }
    }
}
