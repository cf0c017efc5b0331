//! A lone member marks no change for replication (there is no holder to copy to), and marks again once a member joins.

mod common;

use common::*;

// One thread: nothing runs between a check and the reading of the pending
// count, so the replication loop cannot take a mark before it is counted.
#[tokio::test]
async fn a_lone_member_marks_nothing_and_marks_again_once_joined() {
    let lone = cluster(1, ROOMY_RULES, |_| {}).await;
    lone[0].check("k").await.expect("a verdict");
    assert_eq!(lone[0].cluster.stats().replication_pending, 0);

    // node-1 starts alone here too, then node-2 joins it.
    let two = cluster(2, ROOMY_RULES, |_| {}).await;
    let key = key_owned_by(&two[0], "node-1", "mine");
    two[0].check(&key).await.expect("a verdict");
    assert_eq!(
        two[0].cluster.stats().replication_pending,
        1,
        "with a holder on the ring, a change is marked for its copy"
    );
}
