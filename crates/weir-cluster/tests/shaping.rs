//! A caller's longest wait across the cluster: a scheduling leaky bucket's delay beyond it is a denial that leaves nothing scheduled at the key's owner.

mod common;

use std::time::Duration;

use common::*;
use weir_core::CheckRequest;

/// One request a second per client, up to five scheduled ahead.
const PACED: &str = r#"
[[rule]]
name = "paced"
algorithm = "leaky_bucket"
limit = 10
window = "10s"
queue = 5
"#;

/// Guard: the gateway turns an owner's admission whose delay is past the
/// caller's `max_delay` into a denial and refunds it. Without it the check
/// is admitted (and the caller either waits longer than it said it would
/// or sends early); without the refund the next caller waits two intervals.
#[tokio::test(start_paused = true)]
async fn a_delay_past_the_callers_wait_at_a_remote_owner_is_refused_and_given_back() {
    let (_net, nodes) = paused_members(2, PACED, |_| {}).await;
    let gateway = &nodes[0];
    let key = key_owned_by(gateway, "node-2", "paced");
    let check = |max: Option<Duration>| {
        let mut req = CheckRequest::new(&key, "GET /");
        req.max_delay = max;
        async move { gateway.engine.check(&req).await.unwrap().response() }
    };
    // Apart in time, so the owner can tell which admission a refund is for.
    let tick = || tokio::time::advance(Duration::from_millis(1));

    let first = check(None).await;
    assert!(first.allowed && first.delay.is_zero());
    tick().await;
    let refused = check(Some(Duration::from_millis(100))).await;
    assert!(!refused.allowed, "{refused:?}");
    assert!(refused.delay.is_zero());
    assert!(
        refused.retry_after > Duration::from_millis(800)
            && refused.retry_after < Duration::from_millis(900),
        "about 1 s less the 0.1 s offered: {refused:?}"
    );
    tick().await;
    let next = check(None).await;
    assert!(next.allowed);
    assert!(
        next.delay < Duration::from_secs(1),
        "one interval after the first, not two: {next:?}"
    );
    // A meter from any gateway: nothing scheduled, nothing spent.
    tick().await;
    let meter = nodes[1]
        .engine
        .check(&CheckRequest::new(&key, "GET /").max_delay(Duration::ZERO))
        .await
        .unwrap();
    assert!(!meter.allowed);
}
