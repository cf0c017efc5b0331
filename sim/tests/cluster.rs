//! A cluster of real `weir serve` processes, stopped as an operator stops one.

use std::time::Duration;

use weir_sim::cluster::{Cluster, ClusterOptions};
use weir_sim::{rules, SimError};

mod common;

const RULES: &str =
    "[[rule]]\nname = \"all\"\nalgorithm = \"token_bucket\"\nlimit = 100\nwindow = \"1s\"\n";

fn start(name: &str, nodes: usize) -> (tokio::runtime::Runtime, Cluster) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = common::scratch(name);
    let rules = rules::write_file(&dir, RULES).expect("rules file");
    let opts = ClusterOptions::new(common::weir_bin().clone(), nodes, "owner", rules, dir);
    let cluster = rt.block_on(Cluster::start(opts)).expect("cluster forms");
    (rt, cluster)
}

#[test]
fn shut_down_lets_every_node_leave_by_itself() {
    let _one = common::one_at_a_time();
    let (rt, mut cluster) = start("shut-down", 3);
    // A node killed by a signal has no exit code and fails this.
    rt.block_on(cluster.shut_down(Duration::from_secs(30)))
        .expect("every node leaves with success after SIGTERM");
    assert!((0..3).all(|i| !cluster.is_up(i) && cluster.pid(i).is_none()));
}

#[test]
fn shut_down_kills_and_names_a_node_that_does_not_leave() {
    let _one = common::one_at_a_time();
    let (rt, mut cluster) = start("shut-down-stuck", 1);
    // Stopped, it cannot act on SIGTERM before the deadline.
    cluster.pause(0).expect("SIGSTOP");
    let err = rt
        .block_on(cluster.shut_down(Duration::from_millis(500)))
        .expect_err("a stopped node cannot leave by itself");
    match err {
        SimError::NodeExited { node, status, .. } => {
            assert_eq!(node, "n1");
            assert!(status.contains("killed"), "{status}");
        }
        other => panic!("unexpected error: {other}"),
    }
    assert!(cluster.pid(0).is_none(), "the stuck node is reaped");
}
