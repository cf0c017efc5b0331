//! Moving counters to their new owner when the ring changes or a node leaves.
//!
//! The receiver merges what it gets into what it has (weir-core `absorb`),
//! and a merge adds spent budgets, so a handoff never grants a fresh budget:
//! a key that has used 15 of 20 stays at 15 or more on its new owner.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use weir_core::determinism::{HashMap, HashSet};

use parking_lot::Mutex;
use prost::Message;
use weir_core::{Absorb, AbsorbError, CounterSnapshot, Limiter};
use weir_proto::weir::v1::{CallFate, CounterState, HandoffRequest};

use super::local::Local;
use super::moves::{counter_id, CounterId, Landing, Move, Moves};
use super::replica::{Replicas, Sender};
use super::replicate::Replicator;
use crate::link::{Link, PeerFailure};
use crate::stats::{bump, Stats};
use crate::topology::arrivals;
use crate::topology::membership::NodeIdentity;
use crate::topology::ring::Ring;
use crate::topology::routing::Routing;
use crate::wire;

/// Bytes of counter state per Handoff call: well under the message ceiling,
/// so a large handoff is several calls rather than one refused one.
const CHUNK_BYTES: usize = 1 << 20;
const HANDOFF_DEADLINE: Duration = Duration::from_secs(2);
/// A leave's first wait before it offers again the counters a member
/// turned away (one that is leaving too, which this node's ring still
/// lists): about a gossip round, so the ring has likely dropped it. Each
/// wait doubles, up to [`LEAVE_RETRY_MAX`].
const LEAVE_RETRY: Duration = Duration::from_millis(50);
const LEAVE_RETRY_MAX: Duration = Duration::from_millis(400);
/// How long a word said again by the maintenance tick waits for its
/// answer: it holds off the sweeps meanwhile (a ring change's among
/// them), and a member that does not answer a call this small in that
/// time is asked again at the next tick.
const RETELL_DEADLINE: Duration = Duration::from_millis(100);
/// Sweeps over at most this many counters run in place (well under a
/// millisecond); larger ones go to the blocking pool, off the workers that
/// answer checks.
const INLINE_COUNTERS: usize = 4096;

/// Runs `f`, a sweep over about `n` counters, where it belongs.
pub async fn sweep<T: Send + 'static>(
    n: usize,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    crate::offload::by_size(n, INLINE_COUNTERS, f).await
}

/// What became of the counters of one Handoff call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Absorbed {
    pub accepted: u32,
    /// Refused as no honest peer would send them (undecodable, a state that
    /// breaks its algorithm's invariants, a key no check could name), or a
    /// new key past `--max-keys`.
    pub refused: u32,
}

/// Folds the counters `from` handed over into `limiter`,
/// each checked before it is taken. Counters of rules this node does not
/// know (or that changed algorithm) are dropped without being counted as
/// refused: their budget cannot be expressed here, which is not the
/// sender's fault. A copy this node held of a received counter is settled
/// by it (`Replicas::handed_over`), so no spend is counted twice.
pub fn absorb(
    limiter: &Limiter,
    replicas: &Replicas,
    replicator: &Replicator,
    from: &Sender,
    counters: Vec<CounterState>,
) -> Absorbed {
    let mut out = Absorbed::default();
    replicas.handoff_from(from);
    let (rules, now) = (limiter.rules(), limiter.now());
    for c in counters {
        let Some(snap) = wire::snapshot_from_wire(c) else {
            out.refused += 1;
            continue;
        };
        // Carried limits have no copies; one may share a rule's name.
        let taken = if snap.carried.is_some() {
            limiter.absorb(snap)
        } else {
            // Copied to this node's holder of it, as if it changed here:
            // the sender, often that holder, keeps no copy of a counter it
            // handed over, so none was left anywhere until the key's next
            // check, and a crash before it lost the key's count.
            let name = replicator
                .is_on()
                .then(|| rules.get(&snap.rule).map(|(_, r)| r.name.clone()))
                .flatten();
            let key = name.map(|name| (name, snap.hash_part.clone()));
            let taken = replicas.handed_over(limiter, snap, from);
            if let (Ok(()), Some((name, key))) = (&taken, key) {
                replicator.mark(&name, &key, now);
            }
            taken
        };
        match taken {
            Ok(()) => out.accepted += 1,
            Err(Absorb::UnknownRule | Absorb::Refused(AbsorbError::OtherAlgorithm)) => {}
            Err(Absorb::Refused(_)) => out.refused += 1,
        }
    }
    if out.refused > 0 {
        tracing::warn!(refused = out.refused, "refused handed-over counters");
    }
    out
}

/// The counters kept here, named as a ring change's landing names them.
fn kept_ids(undelivered: &[CounterSnapshot]) -> HashSet<CounterId> {
    undelivered.iter().map(counter_id).collect()
}

/// Whether any of `undelivered` is for member `id` on `ring`.
fn kept_for(undelivered: &[CounterSnapshot], ring: &Ring, id: &str) -> bool {
    undelivered
        .iter()
        .any(|c| ring.owner_id(&c.hash_part) == Some(id))
}

/// Hands counters to their owners.
pub struct Handoff {
    local: Arc<Local>,
    routing: Arc<Routing>,
    link: Arc<dyn Link>,
    stats: Arc<Stats>,
    /// Counters promoted from copies hand back only what was spent since,
    /// to the owner process they were copied from.
    replicas: Arc<Replicas>,
    /// This process's boot, sent with every handoff.
    boot: u64,
    /// The ring changes that took keys from here, landed by the sweep
    /// that follows each.
    moves: Arc<Moves>,
    /// A rebalance is under way. Two at once (a ring change and a stray
    /// sweep) would offer the same counters twice, and the owner would
    /// count them twice.
    rebalancing: AtomicBool,
    /// Members that may still wait for this node's word that its sweeps
    /// are over for them, which has not reached them (a counter of theirs
    /// was kept here, or the call failed), with when each was first due
    /// it: each later sweep tells them, until their wait has ended.
    unsaid: Mutex<Vec<(NodeIdentity, tokio::time::Instant)>>,
    /// The last name given to a handoff call ([`HandoffRequest::call`]).
    calls_named: AtomicU64,
    /// Calls that got no answer in time, and may have landed: their
    /// counters stay here, and are not offered again, until the receiver
    /// says what became of the call ([`Self::settle_doubts`]).
    doubts: Mutex<Vec<Doubt>>,
}

/// Clears the rebalancing flag however the rebalance ends (a leave aborts
/// the task running it mid-call).
struct Rebalancing<'a>(&'a AtomicBool);

impl Drop for Rebalancing<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Handoff {
    pub fn new(
        local: Arc<Local>,
        routing: Arc<Routing>,
        link: Arc<dyn Link>,
        stats: Arc<Stats>,
        replicas: Arc<Replicas>,
        boot: u64,
        moves: Arc<Moves>,
    ) -> Self {
        Handoff {
            local,
            routing,
            link,
            stats,
            replicas,
            boot,
            moves,
            rebalancing: AtomicBool::new(false),
            unsaid: Mutex::default(),
            calls_named: AtomicU64::new(0),
            doubts: Mutex::default(),
        }
    }

    /// The ring changes that took keys from here.
    pub fn moves(&self) -> &Arc<Moves> {
        &self.moves
    }

    /// Hands counters that belong elsewhere on the current ring to their
    /// owners (a dead owner's copies this node held but does not inherit).
    /// Those not delivered join this node's counters as strays, which the
    /// next sweep offers their owners again: dropped, a restarted owner
    /// whose first handoff failed never had its old process's count.
    pub async fn hand_to_owners(&self, snaps: Vec<CounterSnapshot>) {
        let ring = self.routing.ring();
        let undelivered = self.hand_over(snaps, &ring, None).await.keep_doubts(self);
        if undelivered.is_empty() {
            return;
        }
        tracing::warn!(
            counters = undelivered.len(),
            "could not hand over a lost owner's copies yet"
        );
        let limiter = self.local.limiter();
        for snap in undelivered {
            if limiter.absorb(snap).is_err() {
                bump(&self.stats.handoff_refused, 1);
            }
        }
        self.local.mark_stray();
    }

    /// Hands every counter this node holds but no longer owns to its owner.
    /// Each is offered as a copy and stays here, deciding on its whole
    /// count, until its owner has it; then only what was spent meanwhile
    /// stays ([`Limiter::settle`]). Taking it out first left the key empty
    /// here for the call's round trip: a check decided meanwhile (one a
    /// leaving owner forwarded, say, to an owner that refused the stray
    /// back) started it over. Those not delivered stay whole, for the next
    /// sweep. One runs at a time; one asked for meanwhile is left to the
    /// next sweep. It lands the ring changes begun before it
    /// ([`Moves::pending`]): checks peers send here for the keys they
    /// took wait for it, then go to the keys' new owners.
    pub async fn rebalance(&self) {
        if self.rebalancing.swap(true, Ordering::AcqRel) {
            self.local.mark_stray();
            return;
        }
        let _running = Rebalancing(&self.rebalancing);
        let ring = self.routing.ring();
        // Before the copy below: a call that landed leaves here only what
        // was spent since, and one still in doubt is not offered again.
        self.settle_doubts(&ring, ASK_DEADLINE).await;
        let pending = self.moves.pending(&ring);
        let joiners = self.waiting_for_me(&pending, &ring);
        let landing = Landing::new(pending);
        let me = self.routing.me().to_string();
        let limiter = self.local.limiter().clone();
        let owned = ring.clone();
        // A check that read the ring before it changed decides first, so
        // its admission is in the copy.
        self.local.quiesce().await;
        let held = limiter.keys();
        let Some(copies) = sweep(held, move || {
            limiter.copy_unless(|k| owned.owner_id(k).is_none_or(|o| o == me))
        })
        .await
        else {
            return;
        };
        let undelivered = if copies.is_empty() {
            landing.land(HashSet::default());
            Vec::new()
        } else {
            self.deliver(copies, &ring, landing).await
        };
        self.say_swept(joiners, &undelivered, &ring, HANDOFF_DEADLINE)
            .await;
        if !undelivered.is_empty() {
            self.local.mark_stray();
        }
    }

    /// Tells the members still due this node's word (`Self::say_swept`)
    /// without a sweep, when no stray waits for one: nothing is kept here
    /// for anyone then, and the word is all they lack. Run by the
    /// maintenance tick (every 250 ms) when it has no strays to sweep: a
    /// sweep copies every counter this node holds, too much to repeat for
    /// a word that did not get through.
    pub async fn retell(&self) {
        if self.unsaid.lock().is_empty() || self.rebalancing.swap(true, Ordering::AcqRel) {
            return;
        }
        let _running = Rebalancing(&self.rebalancing);
        // A sweep that kept counters marks strays before it clears the
        // flag taken above: the next sweep tells their owners, not this.
        if self.local.has_strays() {
            return;
        }
        let ring = self.routing.ring();
        self.say_swept(Vec::new(), &[], &ring, RETELL_DEADLINE)
            .await;
    }

    /// Offers `copies` to their owners on `ring`, lands `landing`, and
    /// settles those delivered; returns the others, still whole here.
    async fn deliver(
        &self,
        copies: Vec<CounterSnapshot>,
        ring: &Ring,
        landing: Landing,
    ) -> Vec<CounterSnapshot> {
        let mut handed = self.hand_over(copies, ring, None).await;
        let delivered = std::mem::take(&mut handed.delivered);
        // Kept here whole, and landed as kept, like those not delivered.
        let undelivered = handed.keep_doubts(self);
        let moved = delivered.len();
        // A key an earlier sweep kept is with its owner now: checks asked
        // or sent here for it go there.
        self.moves.delivered_later(&delivered);
        let kept = kept_ids(&undelivered);
        let delivered = self
            .hand_spent_meanwhile(delivered, &kept, ring, &landing)
            .await;
        // Landed before the copies settle: an op for one of the keys,
        // decided here once its copy had settled but before the landing,
        // was decided on what was spent since the copy alone.
        landing.land(kept);
        self.settle(delivered).await;
        tracing::info!(
            moved,
            kept = undelivered.len(),
            "handed counters to their new owners"
        );
        undelivered
    }

    /// Settles this node's counters by the copies of them their owners
    /// now hold: only what was spent here since each copy stays.
    async fn settle(&self, delivered: Vec<CounterSnapshot>) {
        let limiter = self.local.limiter().clone();
        let spent_since = sweep(delivered.len(), move || {
            // `|` not `||`: every copy settles.
            delivered
                .iter()
                .fold(false, |kept, sent| limiter.settle(sent) | kept)
        })
        .await;
        // What was decided here after a copy was taken (a check that read
        // the ring before it changed, an op sent on by a leaving owner) is
        // not in what the owner got: the next sweep hands it over, not the
        // next ring change, which may come after its window.
        if spent_since == Some(true) {
            self.local.mark_stray();
        }
    }

    /// The members that `moves` took in, still on `ring`, that wait for
    /// this node's word ([`arrivals::Arrivals`]): those that started after it.
    fn waiting_for_me(&self, moves: &[Arc<Move>], ring: &Ring) -> Vec<NodeIdentity> {
        let me = self.routing.me();
        let Some(mine) = ring.members().iter().find(|m| m.id == me) else {
            return Vec::new();
        };
        let mut joiners: Vec<NodeIdentity> = Vec::new();
        let joined = moves.iter().flat_map(|m| m.joined());
        for j in joined.filter(|j| arrivals::older(mine, j)) {
            let now = ring.members().iter().find(|m| m.id == j.id);
            if let Some(now) = now.filter(|n| !joiners.contains(n)) {
                joiners.push(now.clone());
            }
        }
        joiners
    }

    /// Tells each of `joiners`, and each member an earlier sweep could
    /// not tell while it may still wait ([`arrivals::WAIT`]), that this
    /// node's sweeps are over for it, unless one of its counters was not
    /// delivered: it still waits, then, and asks this node, which decides
    /// on the count it kept. Those still untold are told by the sweep
    /// that delivers what was kept for them, or by [`Self::retell`].
    /// Untold, a member asked this node about each of its keys' checks
    /// until its wait ended.
    async fn say_swept(
        &self,
        joiners: Vec<NodeIdentity>,
        undelivered: &[CounterSnapshot],
        ring: &Ring,
        deadline: Duration,
    ) {
        let now = tokio::time::Instant::now();
        // Only one sweep or retell runs at a time (the rebalancing flag):
        // nothing else takes `unsaid` or adds to it meanwhile. A member is
        // the same process (id and boot) as the ring lists it now: its
        // incarnation moves with every rejoin, and its wait does not.
        let same = |a: &NodeIdentity, b: &NodeIdentity| a.id == b.id && a.boot == b.boot;
        let earlier = std::mem::take(&mut *self.unsaid.lock());
        let mut due: Vec<_> = earlier
            .into_iter()
            .filter(|(_, since)| now.duration_since(*since) < arrivals::WAIT)
            .filter_map(|(j, since)| {
                let listed = ring.members().iter().find(|m| same(m, &j))?;
                Some((listed.clone(), since))
            })
            .collect();
        for j in joiners {
            if !due.iter().any(|(d, _)| same(d, &j)) {
                due.push((j, now));
            }
        }
        let says = due.into_iter().map(|(j, since)| async move {
            let told = !kept_for(undelivered, ring, &j.id) && self.tell_swept(&j, deadline).await;
            (!told).then_some((j, since))
        });
        let unsaid: Vec<_> = futures::future::join_all(says)
            .await
            .into_iter()
            .flatten()
            .collect();
        *self.unsaid.lock() = unsaid;
    }

    /// Tells `joiner` that this node's sweeps are over for it; whether it heard.
    async fn tell_swept(&self, joiner: &NodeIdentity, deadline: Duration) -> bool {
        let req = HandoffRequest {
            from_node: self.routing.me().to_string(),
            boot: self.boot,
            at: self.local.limiter().now(),
            swept: true,
            ..Default::default()
        };
        match self.link.handoff(joiner, req, deadline).await {
            Ok(_) => true,
            Err(e) => {
                tracing::debug!(to = %joiner.id, error = %e, "could not say a sweep was over");
                false
            }
        }
    }

    /// A graceful leave's handover: no consume lands here from now on, and
    /// every counter goes to its owner on the ring without this node.
    /// Ops that reach this node meanwhile wait for it, then go to the new
    /// owners. Returns how many counters were lost (not delivered by `give_up`).
    pub async fn leave(&self, give_up: tokio::time::Instant) -> u64 {
        let after = self.routing.leave();
        let _ = tokio::time::timeout_at(give_up, self.local.begin_leave()).await;
        self.settle_doubts(&after, ASK_DEADLINE.min(until(give_up)))
            .await;
        // Still in doubt, they go with the rest: counted twice if they
        // landed, rather than lost if they did not.
        self.doubts.lock().clear();
        let mut snaps = self.local.limiter().take_unless(|_| false);
        let n = snaps.len() as u64;
        let mut ring = after;
        let mut pause = LEAVE_RETRY;
        let mut leaving: Vec<String> = Vec::new();
        let lost = loop {
            // Each call waits no later than `give_up`, and none starts after
            // it: what was delivered by then is with its owner, not lost.
            // Cut off whole at `give_up`, a leave over half a million
            // counters (more than three seconds' handing over here) counted
            // every one of them lost, delivered or not.
            let mut handed = self.hand_over(snaps, &ring, Some(give_up)).await;
            // A call that timed out may have landed: asked until `give_up`.
            self.doubts.lock().append(&mut handed.doubtful);
            let asked = self.settle_doubts(&ring, until(give_up)).await;
            // Turned away whole (their owner on this node's ring is leaving
            // too, or never took the call): offered again until `give_up`,
            // on the ring as it is then without the members that said they
            // are leaving (a leaving node's ring no longer follows the
            // cluster's). Given up on, another member owned the keys with
            // no count of them. Calls still unanswered stay in doubt.
            let unanswered = asked.not_landed - asked.never.len();
            leaving.extend(handed.leaving);
            snaps = handed.undelivered;
            snaps.extend(asked.never);
            // Alone, nobody is left to take them.
            let done = (snaps.is_empty() && unanswered == 0) || ring.members().is_empty();
            if done || tokio::time::Instant::now() + pause >= give_up {
                // Still in doubt at the end: counted lost, though they may
                // have landed.
                self.doubts.lock().clear();
                break (snaps.len() + unanswered) as u64;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(LEAVE_RETRY_MAX);
            let mut peers = self.routing.peers();
            peers.retain(|p| !leaving.iter().any(|l| *l == *p.id));
            ring = Arc::new(Ring::with_default_vnodes(&peers));
        };
        bump(&self.stats.keys_lost, lost);
        self.local.handed_over();
        tracing::info!(counters = n, lost, "handed every counter over");
        lost
    }

    /// Sends every snapshot to its owner on `ring`, each as its owner gets
    /// it ([`Replicas::hand_back`]), encoded a chunk at a time: the
    /// snapshots themselves are moved, never copied, so a large handoff
    /// holds them once. With `until`, no call waits past it and none
    /// starts after it: the rest stay undelivered.
    async fn hand_over(
        &self,
        snaps: Vec<CounterSnapshot>,
        ring: &Ring,
        until: Option<tokio::time::Instant>,
    ) -> Handed {
        let me = self.routing.me();
        let mut by_owner: HashMap<&NodeIdentity, Vec<CounterSnapshot>> = HashMap::default();
        let mut handed = Handed::default();
        let doubted = self.doubted();
        // A counter's id is two strings copied: built only when some call
        // is in doubt, not for each of a million counters every sweep.
        let in_doubt =
            |snap: &CounterSnapshot| !doubted.is_empty() && doubted.contains(&counter_id(snap));
        for snap in snaps {
            let owner = ring.owner(&snap.hash_part).filter(|o| o.id != me);
            match owner.filter(|_| !in_doubt(&snap)) {
                Some(owner) => by_owner.entry(owner).or_default().push(snap),
                None => handed.undelivered.push(snap),
            }
        }
        let sends = by_owner
            .into_iter()
            .map(|(owner, snaps)| async move { self.send_to(owner, snaps, until).await });
        for sent in futures::future::join_all(sends).await {
            handed.delivered.extend(sent.delivered);
            handed.undelivered.extend(sent.undelivered);
            handed.doubtful.extend(sent.doubtful);
            handed.leaving.extend(sent.leaving);
        }
        handed
    }

    /// Sends `snaps` to one owner in chunks, each call given until
    /// `until` at most.
    async fn send_to(
        &self,
        owner: &NodeIdentity,
        snaps: Vec<CounterSnapshot>,
        until: Option<tokio::time::Instant>,
    ) -> Handed {
        let mut handed = Handed::default();
        let mut chunk: Vec<(CounterSnapshot, CounterState)> = Vec::new();
        let mut bytes = 0;
        let mut snaps = snaps.into_iter().peekable();
        while let Some(snap) = snaps.next() {
            let back = self.replicas.hand_back(&snap, owner);
            match wire::snapshot_to_wire(back.as_ref().unwrap_or(&snap)) {
                Some(w) => {
                    bytes += w.state.len() + w.key.len() + w.rule.len();
                    chunk.push((snap, w));
                }
                // Cannot be sent, ever: not kept for the next sweep.
                None => handed.delivered.push(snap),
            }
            if bytes < CHUNK_BYTES && snaps.peek().is_some() {
                continue;
            }
            let (originals, counters): (Vec<_>, Vec<_>) =
                std::mem::take(&mut chunk).into_iter().unzip();
            bytes = 0;
            if counters.is_empty() {
                continue;
            }
            let left = until.map(|t| t.saturating_duration_since(tokio::time::Instant::now()));
            if left.is_some_and(|left| left.is_zero()) {
                handed.undelivered.extend(originals);
                handed.undelivered.extend(snaps);
                break;
            }
            let deadline = left.map_or(HANDOFF_DEADLINE, |left| left.min(HANDOFF_DEADLINE));
            let n = counters.len() as u64;
            let call = self.calls_named.fetch_add(1, Ordering::Relaxed) + 1;
            let req = HandoffRequest {
                counters,
                from_node: self.routing.me().to_string(),
                boot: self.boot,
                // Read after the counters were taken (`leave`, `rebalance`):
                // a copy of one of them taken before is older than this.
                at: self.local.limiter().now(),
                swept: false,
                call,
                ask_about: 0,
            };
            let encoded = req.encoded_len() as u64;
            let sent = tokio::time::Instant::now();
            match self.link.handoff(owner, req, deadline).await {
                // Only a receiver that names calls says never: it was
                // asked about this call first, by a sweep that gave up on it.
                Ok(r) if r.fate() == CallFate::Never => handed.undelivered.extend(originals),
                Ok(r) => {
                    self.moves.told(&owner.id, r.asks_sender, sent);
                    bump(&self.stats.handoffs_sent, 1);
                    bump(&self.stats.handoff_bytes, encoded);
                    bump(&self.stats.keys_moved_out, n);
                    handed.delivered.extend(originals);
                }
                // Taken nothing: its keys' next owner is on a ring without it.
                Err(PeerFailure::Leaving) => {
                    handed.undelivered.extend(originals);
                    handed.leaving.push(owner.id.to_string());
                }
                Err(e) => {
                    bump(&self.stats.handoffs_failed, 1);
                    tracing::warn!(owner = %owner.id, counters = n, error = %e, "handoff failed");
                    match e {
                        // Sent, and perhaps taken: asked about before the
                        // counters are offered again.
                        PeerFailure::Timeout(_) | PeerFailure::Unreachable(_) => {
                            handed.doubtful.push(Doubt {
                                owner: owner.clone(),
                                call,
                                counters: originals,
                            })
                        }
                        _ => handed.undelivered.extend(originals),
                    }
                }
            }
        }
        handed
    }
}

/// Where the counters of a handoff went: each as it was taken here.
#[derive(Default)]
struct Handed {
    /// Now counted by their owners.
    delivered: Vec<CounterSnapshot>,
    /// No owner but this node, or its owner did not take them: still
    /// whole here.
    undelivered: Vec<CounterSnapshot>,
    /// Sent in calls that got no answer: still whole here, and perhaps
    /// counted by their owners too.
    doubtful: Vec<Doubt>,
    /// Owners that turned their counters away because they are leaving.
    /// (A list: a set's hasher would take a draw from a simulated run's
    /// seed on every handoff.)
    leaving: Vec<String>,
}

mod calls;
mod doubt;
mod meanwhile;

pub use calls::{Arrival, Calls};
use doubt::{until, Doubt, ASK_DEADLINE};
#[cfg(test)]
mod tests;
