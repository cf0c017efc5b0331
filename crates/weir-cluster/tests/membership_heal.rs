//! A healed partition rejoins, even when gossip datagrams are lost: members on the in-memory network under tokio's paused clock, at the default settings.

mod common;

use common::*;

/// Heals to try. Without the guard a heal stalled about once in a hundred
/// at the fast test profile, and at the ninth heal of a run at these
/// defaults; three hundred take about 25 s.
const HEALS: usize = 300;

/// Guard: after a healed partition every member can renew its identity at
/// once (each side tells the other it was declared down). A renewal leaves
/// foca silent, every timer of the old identity dropped, until a member
/// it lists speaks to it; its one gossip round was all that could, and
/// with that lost no member of either side ever spoke again (gossip
/// stopped dead on all five; each side kept the other down for good).
/// The driver now announces to the members it lists until foca is
/// active again.
#[tokio::test(start_paused = true)]
async fn a_partition_heals_though_a_third_of_the_gossip_is_lost() {
    for heal in 0..HEALS {
        let (net, nodes) = paused_members(5, RULES, |_| {}).await;
        let (minority, majority) = nodes.split_at(2);
        for m in minority {
            m.partition_from(&majority.iter().collect::<Vec<_>>());
        }
        wait_until("the sides split", || {
            minority.iter().all(|n| n.ring_ids().len() == 2)
                && majority.iter().all(|n| n.ring_ids().len() == 3)
        })
        .await;
        net.set_loss(0.3);
        net.heal();
        wait_until_showing(
            &format!("all five rejoin (heal {heal})"),
            || nodes.iter().all(|n| n.ring_ids().len() == 5),
            || views(&nodes),
        )
        .await;
    }
}
