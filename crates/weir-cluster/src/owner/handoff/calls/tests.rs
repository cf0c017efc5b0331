//! A named handoff call is taken once, and one asked about first never.

use std::sync::Arc;

use super::*;

fn take(calls: &Arc<Calls>, call: u64) -> Taking {
    match calls.arrive("n1", 7, call) {
        Arrival::Take(t) => t,
        _ => panic!("call {call} should be taken"),
    }
}

async fn seen(calls: &Arc<Calls>, call: u64) -> CallFate {
    match calls.arrive("n1", 7, call) {
        Arrival::Seen(s) => s.fate().await,
        _ => panic!("call {call} should have been seen"),
    }
}

/// Guard: the same call arriving twice is taken once.
#[tokio::test]
async fn a_call_that_landed_is_not_taken_again() {
    let calls = Arc::new(Calls::default());
    take(&calls, 1).landed();
    assert_eq!(seen(&calls, 1).await, CallFate::Landed);
    assert_eq!(calls.ask("n1", 7, 1).await, CallFate::Landed);
}

/// Guard: a call asked about before it arrives is never taken, so its
/// sender can offer the counters again.
#[tokio::test]
async fn a_call_asked_about_first_is_never_taken() {
    let calls = Arc::new(Calls::default());
    assert_eq!(calls.ask("n1", 7, 3).await, CallFate::Never);
    assert_eq!(seen(&calls, 3).await, CallFate::Never, "arriving late");
    assert_eq!(
        calls.ask("n1", 7, 3).await,
        CallFate::Never,
        "and asked again"
    );
}

/// Guard: a question about a call being taken waits for it: answered
/// "never" meanwhile, its sender offered the counters again and the
/// receiver counted them twice.
#[tokio::test(start_paused = true)]
async fn a_question_about_a_call_being_taken_waits_for_it() {
    let calls = Arc::new(Calls::default());
    let taking = take(&calls, 2);
    let asked = calls.ask("n1", 7, 2);
    let taken = async {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        taking.landed();
    };
    let (fate, ()) = tokio::join!(asked, taken);
    assert_eq!(fate, CallFate::Landed);
}

/// A taking that ends without landing (its absorbing panicked) counts as
/// never taken, for whoever waits on it and whoever asks later.
#[tokio::test]
async fn a_call_whose_taking_failed_never_landed() {
    let calls = Arc::new(Calls::default());
    let taking = take(&calls, 4);
    let waiting = match calls.arrive("n1", 7, 4) {
        Arrival::Seen(s) => s,
        _ => panic!("seen while being taken"),
    };
    drop(taking);
    assert_eq!(waiting.fate().await, CallFate::Never);
    assert_eq!(calls.ask("n1", 7, 4).await, CallFate::Never);
}

/// Calls are told apart by sender process: another boot of the same node,
/// or another node, may use the same name. Unnamed calls are not recorded.
#[tokio::test]
async fn calls_are_named_per_sender_process() {
    let calls = Arc::new(Calls::default());
    take(&calls, 1).landed();
    assert!(matches!(calls.arrive("n1", 8, 1), Arrival::Take(_)));
    assert!(matches!(calls.arrive("n2", 7, 1), Arrival::Take(_)));
    assert!(matches!(calls.arrive("n1", 7, 0), Arrival::Unnamed));
    assert!(matches!(calls.arrive("n1", 7, 0), Arrival::Unnamed));
}

/// Guard: the record is bounded; the oldest calls are forgotten first.
#[tokio::test]
async fn the_record_forgets_the_oldest_calls_past_its_bound() {
    let calls = Arc::new(Calls::default());
    for call in 1..=(REMEMBERED as u64 + 1) {
        take(&calls, call).landed();
    }
    assert_eq!(calls.record.lock().fates.len(), REMEMBERED);
    assert_eq!(calls.ask("n1", 7, 2).await, CallFate::Landed, "remembered");
    // Asked about, a forgotten call is recorded as never taken, in turn
    // forgetting the oldest left.
    assert_eq!(calls.ask("n1", 7, 1).await, CallFate::Never, "forgotten");
    assert_eq!(calls.record.lock().fates.len(), REMEMBERED);
}
