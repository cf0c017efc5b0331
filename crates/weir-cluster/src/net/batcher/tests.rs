//! The batcher's two clocks on a paused runtime: an op still queued at its
//! deadline is never sent; a sent op's answer has a deadline of its own,
//! counted from the send; a later answer still reaches the reconciler. And
//! the calls of one that callers send themselves to an idle owner, past
//! the queue, sharing its slots.

use std::collections::VecDeque;
use std::sync::Mutex;

use weir_core::{LimiterConfig, RuleSet, SystemClock};
use weir_proto::weir::v1::{
    DecideResponse, HandoffRequest, HandoffResponse, MembersResponse, NodeSummary,
    PullRulesRequest, PushRulesResponse, ReplicateRequest, ReplicateResponse,
    RuleSet as WireRuleSet, SummaryRequest, SyncRequest, SyncResponse, WriteTierRequest,
    WriteTierResponse,
};

use super::*;

/// An owner whose Decide calls take the listed times, one per call in
/// order, and that records the keys of every call it was sent.
struct SlowOwner {
    takes: Mutex<VecDeque<Duration>>,
    calls: Arc<Mutex<Vec<Vec<String>>>>,
}

impl Link for SlowOwner {
    fn decide(
        &self,
        _to: &NodeIdentity,
        req: DecideRequest,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<DecideResponse, PeerFailure>> {
        let takes = self.takes.lock().unwrap().pop_front().unwrap_or_default();
        let keys = req.ops.iter().map(|o| o.key.clone()).collect();
        self.calls.lock().unwrap().push(keys);
        let results = vec![OpResult::default(); req.ops.len()];
        // As a real link: no answer past the deadline it was given.
        Box::pin(async move {
            if takes > deadline {
                tokio::time::sleep(deadline).await;
                return Err(PeerFailure::Timeout(deadline));
            }
            tokio::time::sleep(takes).await;
            Ok(DecideResponse {
                results,
                rules_version: 0,
            })
        })
    }

    fn handoff(
        &self,
        _: &NodeIdentity,
        _: HandoffRequest,
        _: Duration,
    ) -> BoxFuture<'static, Result<HandoffResponse, PeerFailure>> {
        unreachable!("the batcher only decides")
    }

    fn push_rules(
        &self,
        _: &NodeIdentity,
        _: WireRuleSet,
        _: Duration,
    ) -> BoxFuture<'static, Result<PushRulesResponse, PeerFailure>> {
        unreachable!("the batcher only decides")
    }

    fn pull_rules(
        &self,
        _: &NodeIdentity,
        _: PullRulesRequest,
        _: Duration,
    ) -> BoxFuture<'static, Result<WireRuleSet, PeerFailure>> {
        unreachable!("the batcher only decides")
    }

    fn write_tier(
        &self,
        _: &NodeIdentity,
        _: WriteTierRequest,
        _: Duration,
    ) -> BoxFuture<'static, Result<WriteTierResponse, PeerFailure>> {
        unreachable!("the batcher only decides")
    }

    fn sync_counts(
        &self,
        _: &NodeIdentity,
        _: SyncRequest,
        _: Duration,
    ) -> BoxFuture<'static, Result<SyncResponse, PeerFailure>> {
        unreachable!("the batcher only decides")
    }

    fn members(
        &self,
        _: &NodeIdentity,
        _: Duration,
    ) -> BoxFuture<'static, Result<MembersResponse, PeerFailure>> {
        unreachable!("the batcher only decides")
    }

    fn replicate(
        &self,
        _: &NodeIdentity,
        _: ReplicateRequest,
        _: Duration,
    ) -> BoxFuture<'static, Result<ReplicateResponse, PeerFailure>> {
        unreachable!("the batcher only decides")
    }

    fn retain(&self, _: &dyn Fn(&str) -> bool) {}

    fn summary(
        &self,
        _: &NodeIdentity,
        _: SummaryRequest,
        _: Duration,
    ) -> BoxFuture<'static, Result<NodeSummary, PeerFailure>> {
        unreachable!("the batcher only decides")
    }
}

/// Batchers to one owner whose calls take `takes`, one call in flight at a
/// time so a second op waits in the queue; and what the owner was sent.
fn one_call_at_a_time(takes: &[u64]) -> (Batchers, Arc<Mutex<Vec<Vec<String>>>>) {
    let config = BatchConfig {
        max_in_flight: 1,
        ..BatchConfig::default()
    };
    batchers(takes, config)
}

/// Batchers with `config` to one owner whose calls take `takes`.
fn batchers(takes: &[u64], config: BatchConfig) -> (Batchers, Arc<Mutex<Vec<Vec<String>>>>) {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let link = SlowOwner {
        takes: Mutex::new(takes.iter().map(|&ms| Duration::from_millis(ms)).collect()),
        calls: calls.clone(),
    };
    let ctx = Ctx {
        link: Arc::new(link),
        me: "gateway".into(),
        limiter: Arc::new(Limiter::new(
            RuleSet::from_toml("").unwrap(),
            Arc::new(SystemClock::new()),
            LimiterConfig::default(),
        )),
        hints: Arc::new(RulesHints::new().0),
        stats: Arc::new(Stats::default()),
        late_window: Duration::from_secs(1),
    };
    (Batchers::new(ctx, config), calls)
}

fn owner() -> NodeIdentity {
    NodeIdentity::new(
        "owner",
        "127.0.0.1:7946".parse().unwrap(),
        "127.0.0.1:50051".parse().unwrap(),
    )
}

fn op(key: &str) -> CounterOp {
    CounterOp {
        key: key.into(),
        cost: 1,
        ..CounterOp::default()
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn sent(calls: &Mutex<Vec<Vec<String>>>) -> Vec<Vec<String>> {
    calls.lock().unwrap().clone()
}

fn keys(calls: &[&[&str]]) -> Vec<Vec<String>> {
    calls
        .iter()
        .map(|c| c.iter().map(|k| k.to_string()).collect())
        .collect()
}

/// Lets the batcher run until the owner has been sent `n` calls, so an op
/// queued next waits for a free slot instead of joining a call.
async fn until_sent(calls: &Mutex<Vec<Vec<String>>>, n: usize) {
    for _ in 0..1000 {
        if calls.lock().unwrap().len() >= n {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("the batcher did not send call {n}");
}

#[tokio::test(start_paused = true)]
async fn an_op_still_queued_at_its_deadline_is_refused_and_never_sent() {
    let (batchers, calls) = one_call_at_a_time(&[10]);
    let first = batchers.decide(&owner(), op("first"), ms(50));
    until_sent(&calls, 1).await;
    let queued = batchers.decide(&owner(), op("queued"), ms(5));
    let (first, queued) = tokio::join!(first, queued);
    assert!(matches!(first, Reply::Answered(_)));
    assert!(
        matches!(queued, Reply::Failed(PeerFailure::Queued(d)) if d == ms(5)),
        "the op waited behind a 10 ms call with a 5 ms deadline"
    );
    // Long after the first call ended and freed its slot.
    tokio::time::sleep(ms(100)).await;
    assert_eq!(sent(&calls), keys(&[&["first"]]));
}

#[tokio::test(start_paused = true)]
async fn a_sent_op_has_its_deadline_again_from_when_it_left_the_queue() {
    // Queued 4 ms behind the first call, then answered 4 ms after leaving:
    // 8 ms from queueing, 4 from the send, with a 5 ms deadline.
    let (batchers, calls) = one_call_at_a_time(&[4, 4]);
    let first = batchers.decide(&owner(), op("first"), ms(50));
    until_sent(&calls, 1).await;
    let second = batchers.decide(&owner(), op("second"), ms(5));
    let (_, second) = tokio::join!(first, second);
    assert!(matches!(second, Reply::Answered(_)));
    assert_eq!(calls.lock().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_sent_op_answered_past_its_deadline_is_late_and_its_answer_still_arrives() {
    let (batchers, _) = one_call_at_a_time(&[10]);
    let started = Instant::now();
    let Reply::Late(late) = batchers.decide(&owner(), op("slow"), ms(5)).await else {
        panic!("a 10 ms call with a 5 ms deadline is late");
    };
    assert_eq!(started.elapsed(), ms(5), "the caller hears at its deadline");
    assert!(late.0.await.is_some(), "the answer reaches the reconciler");
    assert_eq!(started.elapsed(), ms(10));
}

#[tokio::test(start_paused = true)]
async fn an_answer_seconds_past_the_late_window_still_reaches_the_reconciler() {
    // An owner that counted the op just before its fence, then stalled (or
    // a gateway starved): its answer comes 4 s after a 5 ms deadline.
    let (batchers, _) = one_call_at_a_time(&[4_000]);
    let started = Instant::now();
    let Reply::Late(late) = batchers.decide(&owner(), op("stalled"), ms(5)).await else {
        panic!("a 4 s call with a 5 ms deadline is late");
    };
    assert!(late.0.await.is_some(), "the answer reaches the reconciler");
    assert_eq!(started.elapsed(), ms(4_000));
}

#[tokio::test(start_paused = true)]
async fn a_call_still_listened_for_frees_its_slot_at_the_late_window() {
    // One slot: the stalled call holds it for its deadline and the late
    // window (1 s), not for the 4 s its answer takes.
    let (batchers, calls) = one_call_at_a_time(&[4_000, 10]);
    let started = Instant::now();
    let Reply::Late(late) = batchers.decide(&owner(), op("stalled"), ms(5)).await else {
        panic!("a 4 s call with a 5 ms deadline is late");
    };
    // Its reconciler listens on, as `Peers::on_late` does.
    let listened = tokio::spawn(late.0);
    let next = batchers.decide(&owner(), op("next"), ms(2_000)).await;
    assert!(
        matches!(next, Reply::Answered(_)),
        "sent when the slot freed"
    );
    assert_eq!(started.elapsed(), ms(1_005 + 10));
    assert_eq!(sent(&calls), keys(&[&["stalled"], &["next"]]));
    assert!(listened.await.unwrap().is_some(), "and still heard");
}

#[tokio::test(start_paused = true)]
async fn a_call_in_flight_when_its_batcher_stops_is_still_answered() {
    let (batchers, calls) = one_call_at_a_time(&[10, 10]);
    let alone = batchers.decide(&owner(), op("alone"), ms(50));
    let queued = batchers.decide(&owner(), op("queued"), ms(50));
    assert!(matches!(alone.await, Reply::Answered(_)));
    // The batcher's own call, sent when the first one freed the slot.
    until_sent(&calls, 2).await;
    batchers.clear();
    assert!(
        matches!(queued.await, Reply::Answered(_)),
        "the op may have been consumed at the owner: its answer is owed"
    );
}

#[tokio::test(start_paused = true)]
async fn an_op_still_queued_when_its_batcher_stops_is_refused_and_never_sent() {
    let (batchers, calls) = one_call_at_a_time(&[10]);
    let first = batchers.decide(&owner(), op("sent"), ms(50));
    until_sent(&calls, 1).await;
    let queued = batchers.decide(&owner(), op("queued"), ms(50));
    batchers.clear();
    let (_, queued) = tokio::join!(first, queued);
    assert!(
        matches!(queued, Reply::Failed(PeerFailure::Unreachable(_))),
        "an op its batcher never sent is refused"
    );
    tokio::time::sleep(ms(100)).await;
    assert_eq!(sent(&calls), keys(&[&["sent"]]));
}

#[tokio::test(start_paused = true)]
async fn ops_queued_behind_a_full_set_of_calls_leave_together_when_one_ends() {
    let (batchers, calls) = one_call_at_a_time(&[10, 10]);
    let first = batchers.decide(&owner(), op("first"), ms(50));
    until_sent(&calls, 1).await;
    let a = batchers.decide(&owner(), op("a"), ms(50));
    let b = batchers.decide(&owner(), op("b"), ms(50));
    let (first, a, b) = tokio::join!(first, a, b);
    assert!([first, a, b]
        .iter()
        .all(|r| matches!(r, Reply::Answered(_))));
    assert_eq!(sent(&calls), keys(&[&["first"], &["a", "b"]]));
}

#[tokio::test(start_paused = true)]
async fn a_queued_op_answered_past_its_deadline_is_late_and_its_answer_still_arrives() {
    // Sent at 4 ms when the first call frees the slot, answered 10 ms later.
    let (batchers, calls) = one_call_at_a_time(&[4, 10]);
    let started = Instant::now();
    let first = batchers.decide(&owner(), op("first"), ms(50));
    let queued = batchers.decide(&owner(), op("queued"), ms(5));
    let (_, queued) = tokio::join!(first, queued);
    let Reply::Late(late) = queued else {
        panic!("a 10 ms call with a 5 ms deadline is late");
    };
    assert_eq!(started.elapsed(), ms(9), "5 ms after it left the queue");
    assert!(late.0.await.is_some(), "the answer reaches the reconciler");
    assert_eq!(started.elapsed(), ms(14));
    assert_eq!(sent(&calls), keys(&[&["first"], &["queued"]]));
}

#[tokio::test(start_paused = true)]
async fn a_lone_op_to_an_idle_owner_is_sent_by_its_caller_without_the_batcher() {
    // The defaults: four slots, and the 5 ms owner deadline.
    let (batchers, calls) = batchers(&[1], BatchConfig::default());
    let deadline = crate::config::ClusterConfig::default().owner_deadline;
    let alone = batchers.decide(&owner(), op("alone"), deadline);
    // On this one-thread runtime the batcher's task has not run yet.
    assert_eq!(sent(&calls), keys(&[&["alone"]]));
    assert!(matches!(alone.await, Reply::Answered(_)));
}

#[tokio::test(start_paused = true)]
async fn an_op_never_leaves_ahead_of_ops_already_queued() {
    let (batchers, calls) = one_call_at_a_time(&[10, 10]);
    let alone = batchers.decide(&owner(), op("alone"), ms(50));
    let a = batchers.decide(&owner(), op("a"), ms(50));
    // Its caller gives up: the slot is free again, with "a" still queued.
    drop(alone);
    let b = batchers.decide(&owner(), op("b"), ms(50));
    let (a, b) = tokio::join!(a, b);
    assert!(matches!((a, b), (Reply::Answered(_), Reply::Answered(_))));
    assert_eq!(sent(&calls), keys(&[&["alone"], &["a", "b"]]));
}

#[tokio::test(start_paused = true)]
async fn with_a_linger_every_op_waits_in_the_queue_for_company() {
    let config = BatchConfig {
        linger: ms(1),
        ..BatchConfig::default()
    };
    let (batchers, calls) = batchers(&[1], config);
    let a = batchers.decide(&owner(), op("a"), ms(50));
    let b = batchers.decide(&owner(), op("b"), ms(50));
    let (a, b) = tokio::join!(a, b);
    assert!(matches!((a, b), (Reply::Answered(_), Reply::Answered(_))));
    assert_eq!(sent(&calls), keys(&[&["a", "b"]]));
}

#[tokio::test(start_paused = true)]
async fn with_a_call_in_flight_an_op_goes_through_the_queue_though_a_slot_is_free() {
    // The defaults: four slots, three of them free.
    let (batchers, calls) = batchers(&[10, 1], BatchConfig::default());
    let alone = batchers.decide(&owner(), op("alone"), ms(50));
    let queued = batchers.decide(&owner(), op("queued"), ms(50));
    assert_eq!(sent(&calls), keys(&[&["alone"]]), "left to the batcher");
    let queued = tokio::spawn(queued);
    // The batcher sends it in the second slot, the first call still out.
    until_sent(&calls, 2).await;
    assert!(matches!(queued.await.unwrap(), Reply::Answered(_)));
    assert!(matches!(alone.await, Reply::Answered(_)));
}
