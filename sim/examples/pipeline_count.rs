//! `pipeline_count N [node|counting|plain] [batch|one|one-denied|rls|rls-denied|http|http-denied]`:
//! N calls of one handler in process (`weir_sim::bench::pipeline`), inside
//! `measured`, for callgrind to count (`bench/pipeline-count.sh`). A batch
//! call is a 100-item weir.v1 Check, a one call the 1-item Check of
//! `bench/edges.sh`; an RLS call is the one-descriptor
//! ShouldRateLimit of `bench/edges.sh`, answered by the node or (plain) by
//! the bare responder; an HTTP call is wrk's `POST /v1/check`, answered by
//! the node's router or (counting) by the axum reference.
//!
//! Every key is created before `measured` starts, as in the criterion
//! bench. Two counts at two values of N, subtracted, give the instructions
//! of N calls exactly: the start-up and the warming calls fall outside the
//! toggled function, and their calls must not be counted as the window's.

use std::hint::black_box;

use weir_sim::bench::pipeline::{
    all_admitted, bodies, http_bodies, one_item_body, rls_body, rls_ok, Handler, InProcess, Prost,
    ProstRls,
};
use weir_sim::bench::reference::axum_check;
use weir_sim::bench::reference::grpc::{rate_limiter, rls_responder};

// The allocator both servers run with (`weir` and `weir-bare`).
#[global_allocator]
static ALLOC: weir_alloc::Mimalloc = weir_alloc::Mimalloc;

/// The calls callgrind counts (`--toggle-collect=pipeline_count::measured*`).
#[inline(never)]
fn measured(n: usize, mut call: impl FnMut(usize) -> usize) -> usize {
    (0..n).map(&mut call).sum()
}

/// What a call answers: its size, summed inside `measured` so nothing is
/// optimised away, and whether it is `ok`, read outside it.
trait Answered {
    fn size(&self) -> usize;
    fn ok(&self) -> bool;
}

/// HTTP calls: the answer's length, and whether it was OK.
impl Answered for (usize, bool) {
    fn size(&self) -> usize {
        self.0
    }
    fn ok(&self) -> bool {
        self.1
    }
}

/// A gRPC call's encoded answer, and what reads it as ok: every item
/// admitted (`all_admitted`) or the overall code OK (`rls_ok`).
struct Encoded(Vec<u8>, fn(&[u8]) -> bool);

impl Answered for Encoded {
    fn size(&self) -> usize {
        self.0.len()
    }
    fn ok(&self) -> bool {
        (self.1)(&self.0)
    }
}

/// `bodies` answered in turn: each once to create its keys (and take a
/// denied route's one admission an hour), once more to check the answer
/// is `ok`, then cycled through `n` counted calls.
fn cycled<B, A: Answered>(bodies: &[B], ok: bool, n: usize, mut call: impl FnMut(&B) -> A) {
    for b in bodies {
        call(b);
    }
    let answered = bodies.iter().all(|b| call(b).ok() == ok);
    assert!(answered, "the bench rules answer every call with ok = {ok}");
    black_box(measured(n, |i| call(&bodies[i % bodies.len()]).size()));
}

fn batch(here: &InProcess, handler: &impl Handler, n: usize) {
    cycled(&bodies(), true, n, |b| {
        Encoded(here.run(handler, b), all_admitted)
    });
}

/// The 1-item Check; the plain reference admits every item, as it does
/// over the wire.
fn one_item(here: &InProcess, handler: &impl Handler, plain: bool, denied: bool, n: usize) {
    let ok = plain || !denied;
    cycled(&[one_item_body(denied)], ok, n, |b| {
        Encoded(here.run(handler, b), all_admitted)
    });
}

fn rls(here: &InProcess, handler: &impl Handler, denied: bool, n: usize) {
    cycled(&[rls_body(denied)], !denied, n, |b| {
        Encoded(here.run(handler, b), rls_ok)
    });
}

fn http(here: &InProcess, app: &axum::Router, denied: bool, n: usize) {
    cycled(&http_bodies(denied), !denied, n, |b| here.run_http(app, b));
}

fn main() {
    let usage =
        "usage: pipeline_count N [node|counting|plain] [batch|one|one-denied|rls|rls-denied|http|http-denied]";
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).expect(usage);
    let handler = args.next().unwrap_or_else(|| "node".into());
    let call = args.next().unwrap_or_else(|| "batch".into());
    let here = InProcess::start();
    match (handler.as_str(), call.as_str()) {
        ("node", "batch") => batch(&here, &here.service(), n),
        ("counting", "batch") => batch(&here, &Prost(rate_limiter(true)), n),
        ("plain", "batch") => batch(&here, &Prost(rate_limiter(false)), n),
        ("node", "one" | "one-denied") => one_item(&here, &here.service(), false, call != "one", n),
        ("plain", "one" | "one-denied") => {
            one_item(&here, &Prost(rate_limiter(false)), true, call != "one", n)
        }
        ("node", "rls" | "rls-denied") => rls(&here, &here.rls_service(), call != "rls", n),
        ("plain", "rls" | "rls-denied") => rls(&here, &ProstRls(rls_responder()), call != "rls", n),
        ("node", "http" | "http-denied") => http(&here, &here.router(), call != "http", n),
        ("counting", "http" | "http-denied") => {
            http(&here, &axum_check::router(), call != "http", n)
        }
        other => panic!("{usage}: not {other:?}"),
    }
}
