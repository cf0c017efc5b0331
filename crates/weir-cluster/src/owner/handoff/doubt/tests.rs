//! A handoff call that got no answer is asked about before its counters
//! are offered again, so its owner counts them once.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use weir_core::Limiter;

use super::super::tests::{admits, node, owner_and_holder, Holder};
use crate::memory::MemoryNet;
use crate::topology::ring::Ring;

/// Longer than a handoff call waits for its answer.
const PAST_THE_DEADLINE: Duration = Duration::from_millis(2500);

/// `n3` owning a key, `n1` holding it as a stray with 2 of its 5 spent.
struct Scene {
    net: MemoryNet,
    _owner: crate::Cluster,
    owner_limiter: Arc<Limiter>,
    owner_host: std::net::IpAddr,
    h: Holder,
}

impl Scene {
    async fn new() -> Scene {
        let net = MemoryNet::new();
        let (owner, owner_limiter, h) = owner_and_holder(&net).await;
        let owner_host = owner.identity().grpc.ip();
        h.spend(2);
        Scene {
            net,
            _owner: owner,
            owner_limiter,
            owner_host,
            h,
        }
    }

    /// Every handoff to the owner reaches it `after` it was sent.
    fn handoffs_arrive(&self, after: Duration) {
        self.net.slow_handoffs_to(self.owner_host, after);
    }

    /// A sweep whose call times out here and reaches the owner after;
    /// later calls arrive at once.
    async fn sweep_past_the_deadline(&self) {
        self.handoffs_arrive(PAST_THE_DEADLINE);
        self.h.handoff.rebalance().await;
        self.handoffs_arrive(Duration::ZERO);
    }

    /// Polls, on the paused clock, until the owner holds the key.
    async fn owner_has_the_key(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !self.owner_limiter.holds("r", &self.h.key) {
            assert!(tokio::time::Instant::now() < deadline, "never landed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn held_here(&self) -> bool {
        self.h.local.limiter().holds("r", &self.h.key)
    }

    fn in_doubt(&self) -> usize {
        self.h.handoff.doubts.lock().len()
    }

    fn failed(&self) -> u64 {
        self.h.handoff.stats.handoffs_failed.load(Ordering::Relaxed)
    }

    fn admitted_by_the_owner(&self) -> usize {
        admits(&self.owner_limiter, &self.h.key)
    }
}

/// Guard: a handoff call that timed out here but landed at its owner is
/// not offered again whole. Offered again, the owner added the key's 2
/// spent a second time (4 of 5), and refused its callers for the rest of
/// the window.
#[tokio::test(start_paused = true)]
async fn a_handoff_that_timed_out_but_landed_is_counted_once() {
    let s = Scene::new().await;
    s.sweep_past_the_deadline().await;
    assert_eq!(s.failed(), 1);
    assert!(s.h.local.take_strays(), "kept here for the next sweep");
    s.owner_has_the_key().await;
    s.h.handoff.rebalance().await;
    assert!(!s.held_here(), "settled: it landed");
    assert_eq!(s.in_doubt(), 0);
    assert_eq!(s.admitted_by_the_owner(), 3, "2 of 5 spent, once");
}

/// Guard: while the owner does not say what became of a call, its
/// counters are not offered again. Each sweep offered them whole, each
/// offer timed out and landed late, and the owner counted 2 spent as 2,
/// then 4, then 6.
#[tokio::test(start_paused = true)]
async fn counters_in_doubt_are_not_offered_again_while_their_owner_is_silent() {
    let s = Scene::new().await;
    s.handoffs_arrive(PAST_THE_DEADLINE);
    for _ in 0..3 {
        s.h.handoff.rebalance().await;
        assert!(s.h.local.take_strays(), "kept here for the next sweep");
    }
    assert_eq!(s.failed(), 1, "offered once in three sweeps");
    let limiter = s.h.local.limiter();
    assert_eq!(
        admits(limiter, &s.h.key),
        3,
        "decided here on its whole count"
    );
    s.owner_has_the_key().await;
    s.handoffs_arrive(Duration::ZERO);
    s.h.handoff.rebalance().await;
    assert_eq!(s.in_doubt(), 0);
    assert_eq!(
        s.admitted_by_the_owner(),
        0,
        "the 2 that landed and the 3 spent here since: 5 of 5"
    );
}

/// A call that never reached its owner (lost on the way) is offered again
/// once the owner says so: a call in doubt is never dropped.
#[tokio::test(start_paused = true)]
async fn a_handoff_that_never_landed_is_offered_again() {
    let s = Scene::new().await;
    s.net.partition(&[s.h.host], &[s.owner_host]);
    s.h.handoff.rebalance().await;
    assert_eq!(s.in_doubt(), 1, "lost on the way: a timeout");
    s.net.heal();
    s.h.handoff.rebalance().await;
    assert_eq!(s.in_doubt(), 0);
    assert!(!s.held_here(), "delivered by the second sweep");
    assert_eq!(s.admitted_by_the_owner(), 3, "2 of 5 spent");
}

/// Guard: a call asked about before it reaches its owner is refused when
/// it does, after its counters went out again. Taken then, the owner
/// counted them twice (2 of 5 spent as 4).
#[tokio::test(start_paused = true)]
async fn a_call_asked_about_before_it_arrives_is_refused_when_it_does() {
    let s = Scene::new().await;
    s.sweep_past_the_deadline().await;
    // The first call is still on its way: the question overtakes it.
    s.h.handoff.rebalance().await;
    assert!(!s.held_here(), "offered again and delivered");
    // Not a wait for a condition: on the paused clock, past the moment
    // the first call reaches the owner.
    tokio::time::sleep(PAST_THE_DEADLINE).await;
    assert_eq!(s.admitted_by_the_owner(), 3, "2 of 5 spent, once");
}

/// Guard: a call whose receiver has left the ring since is still asked
/// about while the receiver answers: it handed what it took on with its
/// own leave. Forgotten at once, the counters stayed whole here, now
/// their owner, and the receiver's handover added them a second time.
#[tokio::test(start_paused = true)]
async fn a_receiver_that_left_the_ring_is_still_asked_while_it_answers() {
    let s = Scene::new().await;
    s.sweep_past_the_deadline().await;
    s.owner_has_the_key().await;
    let alone = Ring::with_default_vnodes(&[node("n1")]);
    s.h.handoff.routing.install(Arc::new(alone));
    s.h.handoff.rebalance().await;
    assert_eq!(s.in_doubt(), 0);
    assert!(!s.held_here(), "its count is the one the receiver hands on");
}
