//! Seed names resolved again while a node is alone, so a DNS record that
//! appears late does not leave a node a cluster of one.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use weir_cluster::memory::MemoryNet;
use weir_cluster::SeedResolver;

// Paused time: the in-memory network runs on tokio's clock, so the
// absence at the end is watched over fifty resolve intervals of virtual
// time, in no real time at all.
#[tokio::test(start_paused = true)]
async fn a_node_alone_joins_once_its_seed_name_resolves() {
    // What "peers.weir.test" resolves to: nothing yet, as for a DNS record
    // that is not published when the node starts.
    let record: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
    let lookups = Arc::new(Mutex::new(0u32));
    let resolver = {
        let (record, lookups) = (record.clone(), lookups.clone());
        SeedResolver::new(move |name| {
            assert_eq!(name, "peers.weir.test:7946", "ip:port seeds need no lookup");
            *lookups.lock().unwrap() += 1;
            record.lock().unwrap().map(|a| vec![a]).ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such host yet")
            })
        })
    };
    let net = MemoryNet::new();
    net.resolve_names(resolver);
    let late = TestNode::start_in(&net, "node-1", &[], RULES, |c| {
        c.seeds = vec!["peers.weir.test:7946".into()];
        c.reseed_interval = Duration::from_millis(100);
    })
    .await;
    let other = TestNode::start_in(&net, "node-2", &[], RULES, |_| {}).await;
    // Both alone: neither knows the other's address.
    wait_until("the alone node keeps resolving", || {
        *lookups.lock().unwrap() >= 2
    })
    .await;
    assert_eq!(late.ring_ids(), ["node-1"]);

    *record.lock().unwrap() = Some(other.gossip());
    wait_until("both rings hold both nodes", || {
        late.ring_ids() == ["node-1", "node-2"] && other.ring_ids() == ["node-1", "node-2"]
    })
    .await;

    // Not alone any more: no further lookups.
    let settled = *lookups.lock().unwrap();
    // An absence can only be observed over a window: fifty resolve intervals.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        *lookups.lock().unwrap() <= settled + 1,
        "a node with peers kept resolving its seeds"
    );
}
