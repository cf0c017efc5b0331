//! The order in which a member follows a new view, and how a replication round's copies are cut into calls.

use std::net::SocketAddr;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use weir_core::{CheckRequest, FakeClock, LimiterConfig, Rule, RuleSet, SystemClock, Verdict};

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

    fn give_back<'a>(&'a self, _: &'a Arc<Rule>, _: &'a str, _: u64) -> BoxFuture<'a, ()> {
        unreachable!("no refund is sent")
    }

    fn counter<'a>(
        &'a self,
        _: &'a Arc<Rule>,
        _: &'a str,
        _: crate::strategy::CounterAction,
    ) -> BoxFuture<'a, Result<(weir_core::Decision, Option<String>), weir_core::CheckError>> {
        unreachable!("no counter is asked for")
    }

    fn before_ring<'a>(&'a self, _: &'a Arc<Ring>) -> BoxFuture<'a, ()> {
        let routed = self.routing.routing_ring().len();
        self.seen.lock().push(("before", routed));
        Box::pin(async {})
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
        fed: true,
    });
    let following = tokio::spawn(follow_view(routing.clone(), rules, recorder.clone(), view));
    // b died: a alone.
    views
        .send(MemberView {
            epoch: 1,
            members: vec![me],
            suspects: Vec::new(),
            fed: true,
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

/// Guard: a round's states go in runs of at most the given bytes, a
/// state larger than that alone, and every key in exactly one run, in
/// order; a key with no state any more rides with the run it falls in.
/// In one run, a round over a large store made one call over the peer
/// message ceiling.
#[test]
fn a_rounds_states_are_cut_into_runs_under_the_byte_bound() {
    let rules = RuleSet::from_toml(
        "[[rule]]\nname = \"r\"\nalgorithm = \"fixed_window\"\nlimit = 5\nwindow = \"60s\"\n",
    )
    .unwrap();
    let clock = Arc::new(FakeClock::at_secs(1000.0));
    let limiter = Limiter::new(rules, clock, LimiterConfig::default());
    let rule: Arc<str> = "r".into();
    let mut keys = Vec::new();
    for i in 0..50 {
        let key = format!("key-{i}");
        // Every tenth key was dropped since it was marked.
        if i % 10 != 3 {
            limiter.consume("r", &key, 1, limiter.now()).unwrap();
        }
        keys.push(((rule.clone(), key.as_str().into()), i as Nanos));
    }
    let one = wire::snapshot_to_wire(&limiter.snapshot("r", "key-10").unwrap()).unwrap();
    let size = one.state.len() + one.key.len() + one.rule.len();
    let bound = size * 4;
    let runs = chunked(&limiter, keys.clone(), bound);
    assert_eq!(runs.len(), 12, "45 states, 4 a run");
    for (run, states) in &runs {
        let bytes: usize = states
            .iter()
            .map(|s| s.state.len() + s.key.len() + s.rule.len())
            .sum();
        assert!(bytes <= bound, "{bytes} bytes in a run");
        assert!(run.len() >= states.len());
    }
    let all: Vec<_> = runs.iter().flat_map(|(run, _)| run.clone()).collect();
    assert_eq!(all, keys, "every key once, in order");
    let states: usize = runs.iter().map(|(_, s)| s.len()).sum();
    assert_eq!(states, 45);
    let whole = chunked(&limiter, keys, size / 2);
    assert_eq!(whole.len(), 45, "a state over the bound goes alone");
}

/// A round of `n` keys of rule `r`, each spent once, all for one holder.
fn round_of(n: usize) -> (Arc<Limiter>, Round) {
    let rules = RuleSet::from_toml(
        "[[rule]]\nname = \"r\"\nalgorithm = \"fixed_window\"\nlimit = 5\nwindow = \"60s\"\n",
    )
    .unwrap();
    let clock = Arc::new(FakeClock::at_secs(1000.0));
    let limiter = Arc::new(Limiter::new(rules, clock, LimiterConfig::default()));
    let rule: Arc<str> = "r".into();
    let keys = (0..n)
        .map(|i| {
            let key = format!("key-{i}");
            limiter.consume("r", &key, 1, limiter.now()).unwrap();
            ((rule.clone(), key.as_str().into()), 0)
        })
        .collect();
    (limiter, [(member("b"), keys)].into_iter().collect())
}

/// How many times a task beside `states_of` got to run before the states
/// were read, on a runtime of one thread.
async fn turns_while_reading(n: usize) -> usize {
    let (limiter, round) = round_of(n);
    let reading = tokio::spawn(async move { states_of(&limiter, round).await });
    let mut turns = 0;
    while !reading.is_finished() {
        tokio::task::yield_now().await;
        turns += 1;
    }
    let runs = reading.await.unwrap().expect("the runtime is up");
    let states: usize = runs.iter().map(|(_, (_, states))| states.len()).sum();
    assert_eq!(states, n, "every key's state was read");
    turns
}

/// Guard: a ring change's rounds read their states off the worker that
/// runs the loop. On it, each round of 4,096 held the worker 3-7 ms
/// (up to 19 ms) during a million-counter join, and the checks queued on
/// it waited. Read in place, the read is over within the first turn the
/// task gets; on the blocking pool, the task waits for it at least once.
#[tokio::test(flavor = "current_thread")]
async fn a_large_rounds_states_are_read_off_the_worker_and_a_small_ones_in_place() {
    assert!(
        turns_while_reading(REPLICATE_KEYS_PER_ROUND).await > 1,
        "the other task ran while the states were read"
    );
    assert_eq!(turns_while_reading(INLINE_KEYS).await, 1, "read in place");
}
