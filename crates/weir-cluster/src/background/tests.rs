//! The order in which a member follows a new view.

use std::net::SocketAddr;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use weir_core::{CheckRequest, LimiterConfig, RuleSet, SystemClock, Verdict};

use super::*;
use crate::memory::MemoryNet;
use crate::strategy::Decided;

/// Records the members the node routed by when the strategy was told.
struct Recorder {
    routing: Arc<Routing>,
    seen: Mutex<Vec<(&'static str, usize)>>,
}

impl Strategy for Recorder {
    fn name(&self) -> &'static str {
        "recorder"
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn check<'a>(&'a self, _: &'a CheckRequest) -> Decided<'a, Verdict> {
        unreachable!("no check is sent")
    }

    fn before_ring(&self, _: &Arc<Ring>) {
        let routed = self.routing.routing_ring().len();
        self.seen.lock().push(("before", routed));
    }

    fn on_ring<'a>(&'a self, _: &'a Ring, _: &'a Ring) -> BoxFuture<'a, ()> {
        let routed = self.routing.routing_ring().len();
        self.seen.lock().push(("on", routed));
        Box::pin(async {})
    }
}

fn member(id: &str) -> NodeIdentity {
    let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
    NodeIdentity::new(id, addr, addr)
}

/// Guard: the strategy prepares for a ring before checks are routed by it
/// (a dead owner's copies become this node's counters first); told after,
/// a check routed here in between found a key it now owns empty.
#[tokio::test(start_paused = true)]
async fn the_strategy_prepares_for_a_ring_before_checks_are_routed_by_it() {
    let me = member("a");
    let routing = Arc::new(Routing::new(
        "a".into(),
        Ring::with_default_vnodes(&[me.clone(), member("b")]),
    ));
    let recorder = Arc::new(Recorder {
        routing: routing.clone(),
        seen: Mutex::default(),
    });
    let limiter = Arc::new(Limiter::new(
        RuleSet::empty(),
        Arc::new(SystemClock::new()),
        LimiterConfig::default(),
    ));
    let (_, link) = MemoryNet::new().link();
    let rules = Arc::new(Rules::new(
        limiter,
        link,
        routing.clone(),
        Arc::new(Stats::default()),
        Arc::new(|_: &RuleSet| {}),
    ));
    let (views, view) = watch::channel(MemberView {
        epoch: 0,
        members: Vec::new(),
        suspects: Vec::new(),
    });
    let following = tokio::spawn(follow_view(routing.clone(), rules, recorder.clone(), view));
    // b died: a alone.
    views
        .send(MemberView {
            epoch: 1,
            members: vec![me],
            suspects: Vec::new(),
        })
        .unwrap();
    for _ in 0..100 {
        if recorder.seen.lock().len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    following.abort();
    assert_eq!(*recorder.seen.lock(), [("before", 2), ("on", 1)]);
}
