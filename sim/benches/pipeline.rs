//! A 100-item weir.v1 Check without its transport: the node's handler against the bare references' (docs/performance.md, "The 100-item call without its transport").
//!
//! What `bench/edges.sh` measures over HTTP/2 with weir-bench's 16 callers,
//! less everything both sides share but the message: no sockets, no h2, no
//! generator on the same cores. Each call decodes one of a few hundred
//! encoded requests (100 items, each a key drawn from 100,000 as weir-bench
//! draws them), runs the handler, and encodes the answer, on one thread.
//!
//! - `node`: `RateLimiterService` of a node started in process with the
//!   rules `bench/edges.sh` serves (the admitting rule's window an hour
//!   instead of a minute), the owner strategy on a ring of one, as
//!   `weir serve` runs.
//! - `counting`: the counting reference (`weir-bare --grpc-counting`),
//!   which bumps one counter per item's key and decides nothing.
//! - `plain`: the reference that answers every item without a counter.
//!
//! The three run one after the other in one process, so their ratios share the machine's
//! state. Run: `cargo bench -p weir-sim --bench pipeline`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use prost::Message;
use weir_node::grpc::RateLimiterService;
use weir_node::{Node, ServeConfig};
use weir_proto::weir::v1::rate_limiter_server::RateLimiter;
use weir_proto::weir::v1::{CheckItem, CheckRequest};
use weir_sim::bench::keys::{worker_rng, Keys};
use weir_sim::bench::reference::grpc::rate_limiter;
use weir_sim::bench::requests::RULES;
use weir_sim::bench::ROUTE;

// The allocator both servers run with (`weir` and `weir-bare`).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ITEMS: usize = 100;
const KEYS: usize = 100_000;
/// Encoded requests cycled through: 40,000 keys' worth, so the counters
/// touched are spread over the table as weir-bench's random draws spread them.
const BODIES: usize = 400;

/// The rules `bench/edges.sh` gives the node, with the admitting rule's
/// window an hour instead of a minute: each key's window then rolls once an
/// hour, so two runs (or an instruction count under callgrind) do the same
/// work whenever they start.
fn edges_rules_by_the_hour() -> String {
    let minute = r#"window    = "60s""#;
    assert!(RULES.contains(minute), "the bench rules' admitting window");
    RULES.replacen(minute, r#"window    = "1h""#, 1)
}

/// Each item a key drawn as weir-bench draws them, on its route.
fn bodies() -> Vec<Vec<u8>> {
    let keys = Keys::new(KEYS);
    let mut rng = worker_rng(7, 0);
    (0..BODIES)
        .map(|_| {
            let items = (0..ITEMS)
                .map(|_| CheckItem {
                    key: keys.pick(&mut rng).to_owned(),
                    route: ROUTE.to_owned(),
                    cost: Some(1),
                    ..Default::default()
                })
                .collect();
            CheckRequest { items }.encode_to_vec()
        })
        .collect()
}

/// One call of a service on one encoded request, as [`call`] makes it.
type Run<'a> = dyn Fn(&[u8]) -> (usize, bool) + 'a;

/// Decodes `body`, answers it with `service`, encodes the answer: the
/// answer's length, and whether every item was admitted.
async fn call(service: &impl RateLimiter, body: &[u8]) -> (usize, bool) {
    let request = CheckRequest::decode(body).expect("a request this bench encoded");
    let answer = service
        .check(tonic::Request::new(request))
        .await
        .expect("a well-formed batch")
        .into_inner();
    let admitted = answer.results.iter().all(|r| r.allowed);
    (answer.encode_to_vec().len(), admitted)
}

fn pipeline(c: &mut Criterion) {
    // One worker for the node's own tasks (gossip, sweeps); the calls run on
    // the bench's thread through block_on.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let rules = tempfile::NamedTempFile::new().expect("a rules file");
    std::fs::write(rules.path(), edges_rules_by_the_hour()).expect("rules written");
    let node = rt
        .block_on(Node::start(ServeConfig {
            rules_file: Some(rules.path().to_path_buf()),
            ..ServeConfig::ephemeral()
        }))
        .expect("node starts");
    let node_service = RateLimiterService::new(node.state().clone());
    let counting = rate_limiter(true);
    let plain = rate_limiter(false);
    let bodies = bodies();

    let mut group = c.benchmark_group("check_100_items");
    group.throughput(Throughput::Elements(ITEMS as u64));
    group.measurement_time(Duration::from_secs(8));
    let services: [(&str, &Run); 3] = [
        ("node", &|b| rt.block_on(call(&node_service, b))),
        ("counting", &|b| rt.block_on(call(&counting, b))),
        ("plain", &|b| rt.block_on(call(&plain, b))),
    ];
    for (name, run) in services {
        // Every key exists before timing, as it does in a long edges.sh run.
        let admitted = bodies.iter().all(|b| run(b).1);
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
    rt.block_on(node.shutdown());
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(40);
    targets = pipeline
}
criterion_main!(benches);
