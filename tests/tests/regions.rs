//! Regions linked through relays (one node each, and a region of two): a global limit holds across them, a cut region falls back visibly, and a new home owner of a key lends nothing twice.

use std::time::Duration;

use serde_json::json;
use weir_node::ServeConfig;
use weir_tests::{cluster_member, metric_value, start_cluster, wait_until, Relay, TestNode};

fn rules(window: &str, limit: u64) -> String {
    format!(
        "[[rule]]\nname = \"global\"\nalgorithm = \"fixed_window\"\nlimit = {limit}\nwindow = \"{window}\"\nscope = \"global\"\n"
    )
}

/// A short round, so the tests move quickly; each guarantee is also
/// tested at the default round (`RegionConfig::DEFAULT_ROUND`).
const QUICK: Duration = Duration::from_millis(50);
const DEFAULT: Duration = weir_cluster::regions::RegionConfig::DEFAULT_ROUND;

fn in_region(c: &mut ServeConfig, id: &str, region: &str, peer: &str, round: Duration) {
    cluster_member(c, id, None);
    set_region(c, region, &[peer.to_string()], round);
}

fn set_region(c: &mut ServeConfig, region: &str, peers: &[String], round: Duration) {
    let mut r = weir_cluster::regions::RegionConfig::new(region);
    r.peers = peers.to_vec();
    r.round = round;
    c.cluster.region = Some(r);
}

/// Regions `a` and `b`, reporting every `round`; a's peer named, b's asked
/// for its region.
async fn two_regions(rules: &str, round: Duration) -> (TestNode, TestNode, Relay, Relay) {
    let (to_a, to_b) = (Relay::start().await, Relay::start().await);
    let b_peer = to_b.addr.to_string();
    let a = TestNode::start(rules, |c| {
        in_region(c, "node-a", "a", &format!("b={b_peer}"), round)
    })
    .await;
    let b = TestNode::start(rules, |c| {
        in_region(c, "node-b", "b", &to_a.addr.to_string(), round)
    })
    .await;
    to_a.point_at(a.node().grpc_addr());
    to_b.point_at(b.node().grpc_addr());
    for n in [&a, &b] {
        wait_until("both regions known", || async {
            n.get_json("/v1/cluster").await["region"]["ready"] == true
        })
        .await;
    }
    (a, b, to_a, to_b)
}

fn key_homed_in(region: &str) -> String {
    (0..)
        .map(|i| format!("cust-{i}"))
        .find(|k| weir_cluster::regions::home::home(k, &["a", "b"]) == Some(region))
        .unwrap()
}

async fn allowed(n: &TestNode, key: &str) -> bool {
    let res = n.check(json!({"key": key, "route": "GET /x"})).await;
    match res.status().as_u16() {
        200 => true,
        429 => false,
        s => panic!("status {s}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_regions_together_admit_no_more_than_the_global_limit() {
    together_no_more_than_the_limit(QUICK).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_regions_together_admit_no_more_than_the_global_limit_at_the_default_round() {
    together_no_more_than_the_limit(DEFAULT).await;
}

async fn together_no_more_than_the_limit(round: Duration) {
    // One window of an hour: the whole test sits in one or two windows.
    let (a, b, _ra, _rb) = two_regions(&rules("3600s", 200), round).await;
    let key = key_homed_in("b");
    let window = || weir_tests::unix_secs() / 3600;
    let start = window();
    let mut admitted = 0;
    let give_up = tokio::time::Instant::now() + weir_tests::DEADLINE;
    // Both regions ask until the limit is spent: at the start each holds
    // only its floor, then shares follow demand round by round.
    while admitted < 200 && tokio::time::Instant::now() < give_up {
        for n in [&a, &b] {
            admitted += usize::from(allowed(n, &key).await);
        }
    }
    for _ in 0..100 {
        for n in [&a, &b] {
            admitted += usize::from(allowed(n, &key).await);
        }
    }
    if window() == start {
        assert_eq!(admitted, 200, "exactly the global limit, over two regions");
    }
    let doc = a.get_json("/v1/cluster").await;
    assert_eq!(doc["region"]["regions"], json!(["a", "b"]));
    assert_eq!(doc["region"]["keys"][0]["home"], "b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_cut_from_a_keys_home_falls_back_and_says_so() {
    cut_region_falls_back(QUICK).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_cut_from_a_keys_home_falls_back_and_says_so_at_the_default_round() {
    cut_region_falls_back(DEFAULT).await;
}

async fn cut_region_falls_back(round: Duration) {
    let (a, b, _to_a, to_b) = two_regions(&rules("1s", 100), round).await;
    let key = key_homed_in("b");
    wait_until("a holds an allocation from b", || async {
        allowed(&a, &key).await;
        let doc = a.get_json("/v1/cluster").await;
        doc["region"]["grants_received"].as_u64() > Some(0)
            && doc["region"]["keys"][0]["allocation"].as_u64() > Some(2)
    })
    .await;
    to_b.set_cut(true);
    wait_until("a falls back to its static share", || async {
        allowed(&a, &key).await;
        let doc = a.get_json("/v1/cluster").await;
        doc["region"]["fallback"] == true
            && doc["region"]["unreachable"][0]["region"] == "b"
            && doc["region"]["keys"][0]["allocation"] == 50
    })
    .await;
    let m = a.metrics().await;
    assert_eq!(
        metric_value(&m, "weir_region_keys{mode=\"fallback\"}"),
        Some(1.0)
    );
    to_b.set_cut(false);
    wait_until("a is back on its allocation", || async {
        allowed(&a, &key).await;
        a.get_json("/v1/cluster").await["region"]["fallback"] == false
    })
    .await;
    drop(b);
}

/// The hour-long window the home-change tests run in.
fn hour() -> u64 {
    weir_tests::unix_secs() / 3600
}

/// Region a asks for `key` (a limit of 200 homed in b) until it has
/// admitted 180: it holds nearly all of the limit.
async fn spend_most_in_a(a: &TestNode, key: &str) {
    let mut admitted = 0;
    let give_up = tokio::time::Instant::now() + weir_tests::DEADLINE;
    while admitted < 180 && tokio::time::Instant::now() < give_up {
        admitted += usize::from(allowed(a, key).await);
    }
    assert_eq!(admitted, 180, "a was granted most of the limit");
}

/// After the home's owner of `key` changed, regions a and b ask long
/// enough for the new books to settle (3 rounds) and for several rounds
/// of grants after, each every few milliseconds. With a's 180 before,
/// they admit the limit of 200 and no more (unless the hour's window
/// ended meanwhile).
async fn both_ask_after_the_change(
    a: &TestNode,
    b: &TestNode,
    key: &str,
    round: Duration,
    start: u64,
) {
    let mut admitted = 180;
    let until = tokio::time::Instant::now() + round * 12;
    while tokio::time::Instant::now() < until {
        for n in [a, b] {
            admitted += usize::from(allowed(n, key).await);
        }
    }
    if hour() == start {
        assert!(admitted <= 200, "{admitted} admitted of a limit of 200");
        assert!(admitted >= 190, "the limit is lent again: {admitted}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_home_lends_nothing_a_region_still_holds() {
    home_restarts(QUICK).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_home_lends_nothing_a_region_still_holds_at_the_default_round() {
    home_restarts(DEFAULT).await;
}

/// Region a spends most of a global limit homed in b; b's node restarts,
/// its books lost; then both regions ask for as long as it takes the new
/// books to settle and be lent again. Together they admit the limit, no
/// more: the new node counts what a says it received.
async fn home_restarts(round: Duration) {
    let rules = rules("3600s", 200);
    let (a, b, to_a, to_b) = two_regions(&rules, round).await;
    let key = key_homed_in("b");
    let start = hour();
    spend_most_in_a(&a, &key).await;
    b.shutdown().await;
    let b = TestNode::start(&rules, |c| {
        in_region(c, "node-b", "b", &to_a.addr.to_string(), round)
    })
    .await;
    to_b.point_at(b.node().grpc_addr());
    wait_until("the new b knows both regions", || async {
        b.get_json("/v1/cluster").await["region"]["ready"] == true
    })
    .await;
    both_ask_after_the_change(&a, &b, &key, round, start).await;
    let doc = b.get_json("/v1/cluster").await;
    assert!(
        doc["region"]["allocator_keys"].as_u64() > Some(0),
        "b allocates the key again: {doc}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_home_owner_that_leaves_leaves_no_budget_to_lend_twice() {
    home_owner_leaves(QUICK).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_home_owner_that_leaves_leaves_no_budget_to_lend_twice_at_the_default_round() {
    home_owner_leaves(DEFAULT).await;
}

/// Region b has two nodes; a reaches either. After a spent 180 of 200,
/// the node of b holding the key's books leaves gracefully, and the other
/// becomes the key's owner with no books: it waits, counts what a says it
/// received, and lends only the rest.
async fn home_owner_leaves(round: Duration) {
    let rules = rules("3600s", 200);
    let relays = [
        Relay::start().await,
        Relay::start().await,
        Relay::start().await,
    ];
    let [to_a, to_b1, to_b2] = &relays;
    let a = TestNode::start(&rules, |c| {
        cluster_member(c, "node-a", None);
        let peers = [to_b1, to_b2].map(|r| format!("b={}", r.addr));
        set_region(c, "a", &peers, round);
    })
    .await;
    let mut b = start_cluster(2, &rules, |c| {
        set_region(c, "b", &[format!("a={}", to_a.addr)], round);
    })
    .await;
    to_a.point_at(a.node().grpc_addr());
    to_b1.point_at(b[0].node().grpc_addr());
    to_b2.point_at(b[1].node().grpc_addr());
    let key = key_homed_in("b");
    let start = hour();
    spend_most_in_a(&a, &key).await;
    // Whichever node of b answered a's reports first passed them to the
    // key's owner there, the one node that keeps its books.
    let books = std::sync::atomic::AtomicUsize::new(usize::MAX);
    wait_until("one node of b keeps the key's books", || async {
        for (i, n) in b.iter().enumerate() {
            if n.get_json("/v1/cluster").await["region"]["allocator_keys"] == 1 {
                books.store(i, std::sync::atomic::Ordering::Relaxed);
            }
        }
        books.load(std::sync::atomic::Ordering::Relaxed) != usize::MAX
    })
    .await;
    let owner = b.remove(books.into_inner());
    let heir = b.remove(0);
    owner.shutdown().await;
    wait_until("the other node of b is alone", || async {
        let doc = heir.get_json("/v1/cluster").await;
        let alive = doc["members"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["state"] == "alive").count());
        alive == 1
    })
    .await;
    both_ask_after_the_change(&a, &heir, &key, round, start).await;
}
