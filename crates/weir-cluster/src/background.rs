//! The loops a member runs beside its checks: following the member view, periodic chores, rule hints, re-seeding, and the wait at the end of a leave.

use std::sync::Arc;
use std::time::Duration;
use weir_core::determinism::HashMap;

use tokio::sync::{mpsc, watch};
use weir_core::{Limiter, Nanos};
use weir_proto::weir::v1::{CounterState, ReplicateRequest};

use crate::link::Link;
use crate::owner::replicate::{Key, Replicator};
use crate::stats::{bump, Stats};
use crate::strategy::Strategy;
use crate::topology::membership::{MemberView, Membership, NodeIdentity};
use crate::topology::ring::Ring;
use crate::topology::routing::Routing;
use crate::topology::rules_sync::Rules;
use crate::topology::seeds::SeedResolver;
use crate::wire;

/// How often strays, expired denials and idle keys are swept.
const MAINTENANCE_EVERY: Duration = Duration::from_millis(250);

/// Rebuilds the ring on every member view and tells the strategy.
pub async fn follow_view(
    routing: Arc<Routing>,
    rules: Arc<Rules>,
    strategy: Arc<dyn Strategy>,
    mut views: watch::Receiver<MemberView>,
) {
    while views.changed().await.is_ok() {
        let view = views.borrow_and_update().clone();
        strategy.on_suspects(&view.suspects);
        let ring = Ring::with_default_vnodes(&view.members);
        let installed = if routing.ring().members() == ring.members() {
            None
        } else {
            let ring = Arc::new(ring);
            // Before the ring is routed by: a dead owner's copies become
            // this node's counters first, so no check finds a key it now
            // owns empty.
            strategy.before_ring(&ring).await;
            Some((routing.install(ring.clone()), ring))
        };
        // After the ring it came with: joined on the ring before, this node
        // routed by a part of the cluster for a moment.
        if view.fed {
            routing.fed();
        }
        let Some((old, ring)) = installed else {
            continue;
        };
        let ids: Vec<&str> = ring.members().iter().map(|m| m.id.as_str()).collect();
        tracing::info!(epoch = view.epoch, members = ?ids, "ring rebuilt");
        // The strategy follows the ring at once (a divided limit must not
        // lag the member count it divides by), before any call goes out.
        let following = strategy.on_ring(&old, &ring);
        let me = routing.me();
        let joined = ring
            .members()
            .iter()
            .find(|m| m.id != me && !old.members().iter().any(|o| o.id == m.id));
        if let Some(newcomer) = joined {
            // A node that joins late learns the rules from a peer; the
            // newcomer's own pull carries ours the other way if ours rank
            // higher (a hint in its next Decide, or anti-entropy, settles
            // the rest).
            rules.pull(newcomer).await;
        }
        following.await;
    }
}

/// Periodic chores: the strategy's sweeps, and the rules pulled from a
/// random peer every `pull_every` (anti-entropy).
pub async fn maintain(strategy: Arc<dyn Strategy>, rules: Arc<Rules>, pull_every: Duration) {
    let mut tick = tokio::time::interval(MAINTENANCE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut next_pull = tokio::time::Instant::now() + pull_every;
    loop {
        tick.tick().await;
        strategy.maintain().await;
        if tokio::time::Instant::now() >= next_pull {
            next_pull = tokio::time::Instant::now() + pull_every;
            rules.pull_from_anyone().await;
        }
    }
}

/// Pulls the rules from peers that said they hold a newer set.
pub async fn follow_hints(rules: Arc<Rules>, hints: mpsc::UnboundedReceiver<(NodeIdentity, u64)>) {
    rules.follow_hints(hints).await;
}

/// While this node knows no peer, resolves the seed names again every
/// `every` and hands the membership any address they now name.
pub async fn reseed(
    routing: Arc<Routing>,
    membership: Arc<Membership>,
    resolver: SeedResolver,
    names: Vec<String>,
    every: Duration,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick fires at once; start already resolved the names.
    tick.tick().await;
    loop {
        tick.tick().await;
        if routing.ring().len() > 1 {
            continue;
        }
        let (resolver, names) = (resolver.clone(), names.clone());
        let Some(addrs) = crate::offload::blocking(move || resolver.resolve_all(&names)).await
        else {
            continue;
        };
        if !addrs.is_empty() {
            tracing::info!(?addrs, "alone: announcing to the seeds as they resolve now");
            membership.add_seeds(addrs);
        }
    }
}

/// Polls every remaining member until none lists `me` as live, or
/// `give_up` passes. Meanwhile checks still routed here are forwarded to
/// the new owners.
pub async fn until_forgotten(
    link: &dyn Link,
    me: &str,
    rest: &[NodeIdentity],
    give_up: tokio::time::Instant,
) -> Option<Duration> {
    let started = tokio::time::Instant::now();
    loop {
        let asks = rest.iter().map(|m| {
            let call = link.members(m, Duration::from_millis(200));
            async move {
                // A peer that does not answer will not route here either.
                call.await.is_ok_and(|r| r.live.iter().any(|id| id == me))
            }
        });
        let listed = futures::future::join_all(asks).await;
        if !listed.contains(&true) {
            return Some(started.elapsed());
        }
        if tokio::time::Instant::now() >= give_up {
            tracing::warn!("peers still list this node at the leave timeout");
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Deadline of one Replicate call; a holder slower than this gets the
/// changes again with the next.
const REPLICATE_DEADLINE: Duration = Duration::from_secs(1);
/// Pause after a failed Replicate call, so a holder that is down does not
/// turn the loop into a busy one.
const REPLICATE_BACKOFF: Duration = Duration::from_millis(50);
/// How long the first change waits for others to ride the same call:
/// without it, each call carried what changed during one round trip, a
/// few keys under load, and paid a call's overhead for them. It adds at
/// most this much to the replication lag (docs/performance.md, "Two
/// copies against one", for what two copies cost).
const REPLICATE_LINGER: Duration = Duration::from_millis(1);
/// Most keys one replication round takes; the rest wait for the next
/// round, which follows at once. A ring change marks every counter a node
/// owns (a million, say), and a round reads each state on a worker that
/// also answers checks: taken whole, a million counters made one call far
/// over the peer message ceiling, refused at every retry, so no counter
/// was copied again, and each retry read them all anew.
const REPLICATE_KEYS_PER_ROUND: usize = 4096;
/// Bytes of counter state per Replicate call: a round's keys for one
/// holder go in as many calls as they fill (a sliding log's state holds
/// up to its limit's timestamps).
const REPLICATE_CHUNK_BYTES: usize = 1 << 20;

/// Copies the counters this node owns to their replica holders as they
/// change. One round at a time, of one call per holder unless its states
/// fill more: changes made while a round is in flight ride the next one,
/// so the batches grow with the load and the lag stays about one round
/// trip.
pub async fn replicate(
    replicator: Arc<Replicator>,
    limiter: Arc<Limiter>,
    routing: Arc<Routing>,
    link: Arc<dyn Link>,
    stats: Arc<Stats>,
    boot: u64,
) {
    loop {
        replicator.changed().await;
        // Held until this round's calls are settled; none once stopped.
        let Some(round) = replicator.round().await else {
            return;
        };
        tokio::time::sleep(REPLICATE_LINGER).await;
        let changed = replicator.take(REPLICATE_KEYS_PER_ROUND);
        if changed.is_empty() {
            continue;
        }
        let ring = routing.ring();
        let me = routing.me();
        let mut by_holder = Round::default();
        let mut no_copy = 0;
        for (key, since) in changed {
            // A key that moved to another owner is that owner's to copy.
            match ring
                .replica_of(&key.1)
                .filter(|_| ring.owner_id(&key.1) == Some(me))
            {
                Some(holder) => by_holder
                    .entry(holder.clone())
                    .or_default()
                    .push((key, since)),
                None => no_copy += 1,
            }
        }
        replicator.copied(no_copy);
        // Read before any state: a charge applied by then is in every state.
        let at = limiter.now();
        let Some(runs) = states_of(&limiter, by_holder).await else {
            return;
        };
        let mut calls = Vec::new();
        for (holder, (keys, states)) in runs {
            if states.is_empty() {
                // Gone since they were marked: nothing to copy.
                replicator.copied(keys.len());
                continue;
            }
            let req = ReplicateRequest {
                from_node: me.to_string(),
                states,
                boot,
                at,
            };
            let call = link.replicate(&holder, req, REPLICATE_DEADLINE);
            calls.push(async move { (call.await.is_ok(), keys) });
        }
        let mut failed = false;
        for (ok, keys) in futures::future::join_all(calls).await {
            if ok {
                let now = limiter.now();
                replicator.copied(keys.len());
                bump(&stats.replicated, keys.len() as u64);
                for (_, since) in &keys {
                    stats
                        .replication_lag
                        .record(Duration::from_nanos(now.saturating_sub(*since)));
                }
            } else {
                failed = true;
                replicator.retry(keys);
            }
        }
        drop(round);
        if failed {
            tokio::time::sleep(REPLICATE_BACKOFF).await;
        }
    }
}

/// Keys taken for a copy, each with when it first changed, and the
/// states of those that still have one: one Replicate call.
type Run = (Vec<(Key, Nanos)>, Vec<CounterState>);

/// A round's keys by their holder, each with when it first changed.
type Round = HashMap<NodeIdentity, Vec<(Key, Nanos)>>;

/// Rounds of at most this many keys read their states on the worker
/// running the loop (a sixteenth of the round timed below); larger ones on the
/// blocking pool. A ring change marks every counter a node owns, and its
/// rounds of 4,096 held a worker 3-7 ms each to read them (up to 19 ms on
/// two busy cores, timed in a build logging each round during
/// `bench/join-load.sh`'s million-counter join), while the checks queued
/// on that worker waited.
const INLINE_KEYS: usize = 256;

/// The states of each holder's keys, read now, in runs of one call each;
/// None when the read did not finish (the runtime is shutting down).
async fn states_of(limiter: &Arc<Limiter>, by_holder: Round) -> Option<Vec<(NodeIdentity, Run)>> {
    let n: usize = by_holder.values().map(Vec::len).sum();
    let read = move |limiter: &Limiter| {
        let mut runs = Vec::new();
        for (holder, keys) in by_holder {
            for run in chunked(limiter, keys, REPLICATE_CHUNK_BYTES) {
                runs.push((holder.clone(), run));
            }
        }
        runs
    };
    let limiter = limiter.clone();
    crate::offload::by_size(n, INLINE_KEYS, move || read(&limiter)).await
}

/// The states of `keys`, read now, in runs of at most `max_bytes` (a
/// state larger than that alone), each with the keys it copies: a key
/// with no state any more rides with the run it falls in.
fn chunked(limiter: &Limiter, keys: Vec<(Key, Nanos)>, max_bytes: usize) -> Vec<Run> {
    let mut runs = Vec::new();
    let (mut run, mut states, mut bytes) = (Vec::new(), Vec::new(), 0);
    for (key, since) in keys {
        let snapshot = limiter.snapshot(&key.0, &key.1);
        if let Some(state) = snapshot.as_ref().and_then(wire::snapshot_to_wire) {
            let size = state.state.len() + state.key.len() + state.rule.len();
            if bytes + size > max_bytes && !states.is_empty() {
                runs.push((std::mem::take(&mut run), std::mem::take(&mut states)));
                bytes = 0;
            }
            bytes += size;
            states.push(state);
        }
        run.push((key, since));
    }
    if !run.is_empty() {
        runs.push((run, states));
    }
    runs
}

/// Region rounds: every `round`, this node's reports to each home region
/// (and, until every region is known, asking the peers theirs).
pub(crate) async fn region_rounds(regional: std::sync::Arc<crate::regional::Regional>) {
    let mut tick = tokio::time::interval(regional.config().round);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        // Each round runs on its own: a home that is slow to answer delays
        // its own grants, not the next round's reports elsewhere.
        let r = regional.clone();
        tokio::spawn(async move { r.round().await });
    }
}

#[cfg(test)]
mod tests;
