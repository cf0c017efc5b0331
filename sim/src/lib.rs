//! weir-sim: runs an N-node weir cluster on this machine and scores every verdict against an exact reference limiter.
// deny, not forbid: signal.rs needs kill(2) and prctl(2) and
// bench/machine.rs sysconf(3) from libc, and each allows unsafe for those
// calls alone.
#![deny(unsafe_code)]

pub mod bench;
pub mod cli;
pub mod cluster;
pub mod cpu;
pub mod dst;
pub mod error;
pub mod faults;
pub mod guard;
pub mod hogs;
pub mod html;
pub mod load;
pub mod netns;
pub mod plot;
pub mod reference;
pub mod regions;
pub mod relay;
pub mod report;
pub mod rules;
pub mod run;
pub mod score;
pub mod scrape;
pub mod session;
pub mod signal;
pub mod target;
pub mod weir_bin;
pub mod workloads;

pub use error::SimError;
