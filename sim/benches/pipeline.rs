//! A 100-item weir.v1 Check without its transport: the node's handler against the bare references' (docs/performance.md, "The 100-item call without its transport").
//!
//! What `bench/edges.sh` measures over HTTP/2 with weir-bench's 16 callers,
//! less everything both sides share but the message: no sockets, no h2, no
//! generator on the same cores. The calls are `weir_sim::bench::pipeline`'s:
//!
//! - `node`: the handler of a node started in process with the edges
//!   rules, on its own codec as `weir serve` runs it;
//! - `counting`: the counting reference (`weir-bare --grpc-counting`),
//!   which bumps one counter per item's key and decides nothing;
//! - `plain`: the reference that answers every item without a counter;
//!   both references on prost's codec, as their servers run.
//!
//! The three run one after the other in one process, so their ratios share the machine's
//! state. Run: `cargo bench -p weir-sim --bench pipeline`. For instruction
//! counts, which this host's noise does not move, see `bench/pipeline-count.sh`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use weir_sim::bench::pipeline::{all_admitted, bodies, InProcess, Prost, ITEMS};
use weir_sim::bench::reference::grpc::rate_limiter;

// The allocator both servers run with (`weir` and `weir-bare`).
#[global_allocator]
static ALLOC: weir_alloc::Mimalloc = weir_alloc::Mimalloc;

/// One call of a handler on one encoded request: the encoded answer.
type Run<'a> = dyn Fn(&[u8]) -> Vec<u8> + 'a;

fn pipeline(c: &mut Criterion) {
    let here = InProcess::start();
    let node_service = here.service();
    let counting = Prost(rate_limiter(true));
    let plain = Prost(rate_limiter(false));
    let bodies = bodies();

    let mut group = c.benchmark_group("check_100_items");
    group.throughput(Throughput::Elements(ITEMS as u64));
    group.measurement_time(Duration::from_secs(8));
    let services: [(&str, &Run); 3] = [
        ("node", &|b| here.run(&node_service, b)),
        ("counting", &|b| here.run(&counting, b)),
        ("plain", &|b| here.run(&plain, b)),
    ];
    for (name, run) in services {
        // Every key exists before timing, as it does in a long edges.sh run.
        let admitted = bodies.iter().all(|b| all_admitted(&run(b)));
        assert!(admitted, "{name}: the bench rules admit every item");
        let mut next = 0;
        group.bench_function(name, |b| {
            b.iter(|| {
                next = (next + 1) % bodies.len();
                black_box(run(&bodies[next]))
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(40);
    targets = pipeline
}
criterion_main!(benches);
