//! A UDP membership runs on a thread of its own: it gossips while the runtime that started it is stalled, and its thread ends with its handle.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use weir_cluster::membership::{Membership, MembershipConfig, NodeIdentity, GOSSIP_THREAD};

/// Two members on loopback find each other well within this (fast config:
/// announces every 200 ms).
const DEADLINE: Duration = Duration::from_secs(10);

/// The tests count this process's gossip threads: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn config(name: &str, seeds: &[SocketAddr]) -> MembershipConfig {
    let identity = NodeIdentity::new(
        name,
        "127.0.0.1:0".parse().unwrap(),
        "127.0.0.1:1".parse().unwrap(),
    );
    MembershipConfig::fast(identity, seeds.to_vec()).with_secret(b"own-thread".to_vec())
}

fn bound() -> std::net::UdpSocket {
    std::net::UdpSocket::bind("127.0.0.1:0").unwrap()
}

/// Polls `cond` on this thread (no runtime runs here) until it holds;
/// panics naming `what` after [`DEADLINE`].
fn settle(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// This process's threads named [`GOSSIP_THREAD`].
fn gossip_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end() == GOSSIP_THREAD)
        .count()
}

fn sees(m: &Membership, id: &str) -> bool {
    m.view().members.iter().any(|i| i.id == id)
}

/// Guard: a member whose driver was a task on the runtime that started it
/// went silent while that runtime did not run (a node's workers busy with
/// rule work): it answered no announce, and a joiner never found it.
#[test]
fn a_member_gossips_while_the_runtime_that_started_it_does_not_run() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let stalled = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Started in a runtime that never runs again: nothing polls a task on it.
    let a = stalled
        .block_on(Membership::start(
            config("a", &[]),
            "127.0.0.1:0".parse().unwrap(),
        ))
        .unwrap();
    let b = Membership::start_on_own_thread(config("b", &[a.local_addr()]), bound()).unwrap();
    settle(
        "the joiner and the stalled runtime's member see each other",
        || sees(&b, "a") && sees(&a, "b"),
    );
    assert!(a.is_running() && b.is_running());
}

/// Guard: the thread ends with the driver, however the driver ends:
/// dropped, aborted, or after a graceful leave.
#[test]
fn the_gossip_thread_ends_with_its_driver() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let before = gossip_threads();
    let dropped = Membership::start_on_own_thread(config("dropped", &[]), bound()).unwrap();
    let aborted = Membership::start_on_own_thread(config("aborted", &[]), bound()).unwrap();
    let leaver = Membership::start_on_own_thread(config("leaver", &[]), bound()).unwrap();
    // A thread names itself once it runs, a moment after it is spawned.
    settle("one thread each", || gossip_threads() == before + 3);

    let port = dropped.local_addr();
    drop(dropped);
    // Dropping waits for the thread: its socket is closed on return.
    assert_eq!(gossip_threads(), before + 2);
    std::net::UdpSocket::bind(port).expect("the dropped member's port is free again");

    aborted.abort();
    settle("the aborted driver's thread ends", || {
        !aborted.is_running() && gossip_threads() == before + 1
    });

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(leaver.leave_gracefully()).unwrap();
    assert!(
        !leaver.is_running(),
        "a graceful leave returns once the driver has ended"
    );
    settle("the leaver's thread ends", || gossip_threads() == before);
    drop((aborted, leaver));
}
