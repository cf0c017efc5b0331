//! A handoff call that got no answer is asked about before its counters
//! are offered again, so its owner counts them once.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::super::tests::{admits, owner_and_holder};
use crate::memory::MemoryNet;

/// Longer than a handoff call waits for its answer.
const PAST_THE_DEADLINE: Duration = Duration::from_millis(2500);

/// Polls `done` on the paused clock until it holds, for at most 10 s.
async fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Guard: a handoff call that timed out here but landed at its owner is
/// not offered again whole. Offered again, the owner added the key's 2
/// spent a second time (4 of 5), and refused its callers for the rest of
/// the window.
#[tokio::test(start_paused = true)]
async fn a_handoff_that_timed_out_but_landed_is_counted_once() {
    let net = MemoryNet::new();
    let (owner, owner_limiter, h) = owner_and_holder(&net).await;
    let owner_host = owner.identity().grpc.ip();
    let limiter = h.local.limiter();
    for _ in 0..2 {
        assert!(
            limiter
                .consume("r", &h.key, 1, limiter.now())
                .unwrap()
                .allowed
        );
    }
    net.slow_handoffs_to(owner_host, PAST_THE_DEADLINE);
    h.handoff.rebalance().await;
    assert_eq!(failed(&h), 1);
    assert!(h.local.take_strays(), "kept here for the next sweep");
    eventually("the call lands at the owner after all", || {
        owner_limiter.holds("r", &h.key)
    })
    .await;
    net.slow_handoffs_to(owner_host, Duration::ZERO);
    h.handoff.rebalance().await;
    assert!(!limiter.holds("r", &h.key), "settled: it landed");
    assert!(h.handoff.doubts.lock().is_empty());
    assert_eq!(admits(&owner_limiter, &h.key), 3, "2 of 5 spent, once");
}

/// Guard: while the owner does not say what became of a call, its
/// counters are not offered again. Each sweep offered them whole, each
/// offer timed out and landed late, and the owner counted 2 spent as 2,
/// then 4, then 6.
#[tokio::test(start_paused = true)]
async fn counters_in_doubt_are_not_offered_again_while_their_owner_is_silent() {
    let net = MemoryNet::new();
    let (owner, owner_limiter, h) = owner_and_holder(&net).await;
    let owner_host = owner.identity().grpc.ip();
    let limiter = h.local.limiter();
    for _ in 0..2 {
        assert!(
            limiter
                .consume("r", &h.key, 1, limiter.now())
                .unwrap()
                .allowed
        );
    }
    net.slow_handoffs_to(owner_host, PAST_THE_DEADLINE);
    for _ in 0..3 {
        h.handoff.rebalance().await;
        assert!(h.local.take_strays(), "kept here for the next sweep");
    }
    assert_eq!(failed(&h), 1, "offered once in three sweeps");
    assert_eq!(
        admits(limiter, &h.key),
        3,
        "decided here on its whole count"
    );
    eventually("the call lands at the owner after all", || {
        owner_limiter.holds("r", &h.key)
    })
    .await;
    net.slow_handoffs_to(owner_host, Duration::ZERO);
    h.handoff.rebalance().await;
    assert!(h.handoff.doubts.lock().is_empty());
    assert_eq!(
        admits(&owner_limiter, &h.key),
        0,
        "the 2 that landed and the 3 spent here since: 5 of 5"
    );
}

fn failed(h: &super::super::tests::Holder) -> u64 {
    h.handoff.stats.handoffs_failed.load(Ordering::Relaxed)
}

/// A call that never reached its owner (lost on the way) is offered again
/// once the owner says so: a call in doubt is never dropped.
#[tokio::test(start_paused = true)]
async fn a_handoff_that_never_landed_is_offered_again() {
    let net = MemoryNet::new();
    let (owner, owner_limiter, h) = owner_and_holder(&net).await;
    let owner_host = owner.identity().grpc.ip();
    let limiter = h.local.limiter();
    for _ in 0..2 {
        assert!(
            limiter
                .consume("r", &h.key, 1, limiter.now())
                .unwrap()
                .allowed
        );
    }
    net.partition(&[h.host], &[owner_host]);
    h.handoff.rebalance().await;
    assert_eq!(
        h.handoff.doubts.lock().len(),
        1,
        "lost on the way: a timeout"
    );
    net.heal();
    h.handoff.rebalance().await;
    assert!(h.handoff.doubts.lock().is_empty());
    assert!(!limiter.holds("r", &h.key), "delivered by the second sweep");
    assert_eq!(admits(&owner_limiter, &h.key), 3, "2 of 5 spent");
}

/// Guard: a call asked about before it reaches its owner is refused when
/// it does, after its counters went out again. Taken then, the owner
/// counted them twice (2 of 5 spent as 4).
#[tokio::test(start_paused = true)]
async fn a_call_asked_about_before_it_arrives_is_refused_when_it_does() {
    let net = MemoryNet::new();
    let (owner, owner_limiter, h) = owner_and_holder(&net).await;
    let owner_host = owner.identity().grpc.ip();
    let limiter = h.local.limiter();
    for _ in 0..2 {
        assert!(
            limiter
                .consume("r", &h.key, 1, limiter.now())
                .unwrap()
                .allowed
        );
    }
    net.slow_handoffs_to(owner_host, PAST_THE_DEADLINE);
    h.handoff.rebalance().await;
    // The first call is still on its way: the question overtakes it.
    net.slow_handoffs_to(owner_host, Duration::ZERO);
    h.handoff.rebalance().await;
    assert!(!limiter.holds("r", &h.key), "offered again and delivered");
    // Not a wait for a condition: on the paused clock, past the moment
    // the first call reaches the owner.
    tokio::time::sleep(PAST_THE_DEADLINE).await;
    assert_eq!(admits(&owner_limiter, &h.key), 3, "2 of 5 spent, once");
}

/// Guard: a call whose receiver has left the ring since is still asked
/// about while the receiver answers: it handed what it took on with its
/// own leave. Forgotten at once, the counters stayed whole here, now
/// their owner, and the receiver's handover added them a second time.
#[tokio::test(start_paused = true)]
async fn a_receiver_that_left_the_ring_is_still_asked_while_it_answers() {
    let net = MemoryNet::new();
    let (owner, owner_limiter, h) = owner_and_holder(&net).await;
    let owner_host = owner.identity().grpc.ip();
    let limiter = h.local.limiter();
    for _ in 0..2 {
        assert!(
            limiter
                .consume("r", &h.key, 1, limiter.now())
                .unwrap()
                .allowed
        );
    }
    net.slow_handoffs_to(owner_host, PAST_THE_DEADLINE);
    h.handoff.rebalance().await;
    eventually("the call lands at the owner after all", || {
        owner_limiter.holds("r", &h.key)
    })
    .await;
    net.slow_handoffs_to(owner_host, Duration::ZERO);
    let alone =
        crate::topology::ring::Ring::with_default_vnodes(&[super::super::tests::node("n1")]);
    h.handoff.routing.install(std::sync::Arc::new(alone));
    h.handoff.rebalance().await;
    assert!(h.handoff.doubts.lock().is_empty());
    assert!(
        !limiter.holds("r", &h.key),
        "its count is the one the receiver hands on"
    );
}
