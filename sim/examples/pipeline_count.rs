//! `pipeline_count N [node|counting|plain]`: N 100-item calls of one
//! handler in process (`weir_sim::bench::pipeline`), inside `measured`,
//! for callgrind to count (`bench/pipeline-count.sh`).
//!
//! Every key is created before `measured` starts, as in the criterion
//! bench. Two counts at two values of N, subtracted, give the instructions
//! of N calls exactly: the start-up and the warming calls fall outside the
//! toggled function, and their calls must not be counted as the window's.

use std::hint::black_box;

use weir_proto::weir::v1::rate_limiter_server::RateLimiter;
use weir_sim::bench::pipeline::{bodies, InProcess};
use weir_sim::bench::reference::grpc::rate_limiter;

// The allocator both servers run with (`weir` and `weir-bare`).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The calls callgrind counts (`--toggle-collect=pipeline_count::measured*`).
#[inline(never)]
fn measured(here: &InProcess, service: &impl RateLimiter, bodies: &[Vec<u8>], n: usize) -> usize {
    (0..n)
        .map(|i| here.run(service, &bodies[i % bodies.len()]).0)
        .sum()
}

fn count(here: &InProcess, service: &impl RateLimiter, n: usize) {
    let bodies = bodies();
    let admitted = bodies.iter().all(|b| here.run(service, b).1);
    assert!(admitted, "the bench rules admit every item");
    black_box(measured(here, service, &bodies, n));
}

fn main() {
    let usage = "usage: pipeline_count N [node|counting|plain]";
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).expect(usage);
    let here = InProcess::start();
    match args.next().as_deref() {
        None | Some("node") => count(&here, &here.service(), n),
        Some("counting") => count(&here, &rate_limiter(true), n),
        Some("plain") => count(&here, &rate_limiter(false), n),
        Some(other) => panic!("{usage}: not {other:?}"),
    }
}
