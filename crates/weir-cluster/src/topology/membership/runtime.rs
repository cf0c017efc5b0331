//! The task that drives foca: UDP in and out, timers, notifications, published snapshots.

use std::cmp::{Ordering as CmpOrdering, Reverse};
use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use foca::{
    AccumulatingRuntime, Codec, Foca, Member as SwimMember, Message, NoCustomBroadcast,
    OwnedNotification, PostcardCodec, State as SwimState, Timer,
};
use rand::seq::IteratorRandom;
use rand_foca::rngs::SmallRng;
use rand_foca::SeedableRng;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, MissedTickBehavior};

use super::datagrams::Datagrams;
use super::seal::{Dropped, Keyring};
use super::Gate;
use super::{lock, Command, Counters, Member, MemberState, MemberView, NodeIdentity, Shared};
use crate::keys;

type SwimNode = Foca<NodeIdentity, PostcardCodec, SmallRng, NoCustomBroadcast>;

/// Largest UDP payload; a receive buffer this big never truncates a datagram
/// (foca itself rejects anything over its max_packet_size).
const RECV_BUF: usize = 65_536;

/// A foca timer due at `at`; `seq` keeps equal deadlines in submission order.
struct Scheduled {
    at: Instant,
    seq: u64,
    timer: Timer<NodeIdentity>,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == CmpOrdering::Equal
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

pub(super) struct Driver {
    foca: SwimNode,
    rt: AccumulatingRuntime<NodeIdentity>,
    socket: Arc<dyn Datagrams>,
    gate: Gate<Keyring>,
    seeds: Vec<SocketAddr>,
    announce_interval: Duration,
    timers: BinaryHeap<Reverse<Scheduled>>,
    timer_seq: u64,
    shared: Arc<Shared>,
    commands: mpsc::UnboundedReceiver<Command>,
    live: Vec<NodeIdentity>,
    suspects: Vec<String>,
    /// When each member now suspected was first seen suspected here.
    suspected_since: Vec<(String, Instant)>,
    /// A suspicion older than this has lost its countdown; see
    /// `reraise_stale_suspicions`.
    stale_after: Duration,
    epoch: u64,
    left: bool,
    /// Set when foca renewed this node's identity; see `reraise_suspicions`.
    rejoined: bool,
    /// foca is probing and gossiping: it says so (`Active`) once it has an
    /// active member to talk to, and stops when it renews its identity.
    connected: bool,
    /// A member answered an announce with its member list
    /// ([`super::MemberView::fed`]).
    fed: bool,
    out: Vec<u8>,
}

/// Members a silent node announces to per interval (`announce_if_stalled`).
const STALLED_ANNOUNCES: usize = 3;

impl Driver {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        identity: NodeIdentity,
        config: foca::Config,
        socket: Arc<dyn Datagrams>,
        gate: Gate<Keyring>,
        seeds: Vec<SocketAddr>,
        announce_interval: Duration,
        shared: Arc<Shared>,
        commands: mpsc::UnboundedReceiver<Command>,
    ) -> Self {
        // foca only needs randomness to pick probe targets; seeding a fast
        // generator from the OS-seeded thread rng is plenty.
        let rng = SmallRng::seed_from_u64(crate::determinism::with_rng(|r| r.next_u64()));
        let live = vec![identity.clone()];
        let stale_after = 2 * config.suspect_to_down_after + announce_interval;
        Driver {
            foca: Foca::new(identity, config, rng, PostcardCodec),
            rt: AccumulatingRuntime::new(),
            socket,
            gate,
            seeds,
            announce_interval,
            timers: BinaryHeap::new(),
            timer_seq: 0,
            shared,
            commands,
            live,
            suspects: Vec::new(),
            suspected_since: Vec::new(),
            stale_after,
            epoch: 0,
            left: false,
            rejoined: false,
            connected: false,
            fed: false,
            out: Vec::with_capacity(2048),
        }
    }

    /// Runs until told to leave, or until its handle is gone. A graceful
    /// leave's caller is handed back to be told once the driver has ended,
    /// so it never finds the driver still running.
    pub(super) async fn run(mut self) -> Option<oneshot::Sender<()>> {
        let mut buf = vec![0u8; RECV_BUF];
        // The first tick fires at once, so the first announce goes out
        // immediately; later ones repeat until some peer is active, which
        // covers seeds that start after us and a cluster we lost.
        let mut announce = tokio::time::interval(self.announce_interval);
        announce.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            let next_timer = self.timers.peek().map(|Reverse(s)| s.at);
            // biased: an unbiased select draws from the runtime's own
            // generator, which no seed reaches.
            tokio::select! {
                biased;
                cmd = self.commands.recv() => match cmd {
                    Some(Command::Leave(reply)) => {
                        self.leave().await;
                        return reply;
                    }
                    Some(Command::AddSeeds(seeds)) => {
                        for seed in seeds {
                            if !self.seeds.contains(&seed) {
                                self.seeds.push(seed);
                            }
                        }
                        self.announce_to_unheard_seeds();
                    }
                    // Unreachable in practice: the handle aborts the task on drop.
                    None => return None,
                },
                received = self.socket.recv_from(&mut buf) => match received {
                    Ok((len, from)) => self.on_datagram(&mut buf[..len], from),
                    // On some platforms an ICMP "port unreachable" from an
                    // earlier send surfaces here; it says nothing about this
                    // socket, so keep going.
                    Err(error) => tracing::debug!(%error, "gossip recv error"),
                },
                _ = sleep_until_opt(next_timer), if next_timer.is_some() => self.fire_due_timers(),
                _ = announce.tick() => {
                    self.announce_to_unheard_seeds();
                    self.announce_if_stalled();
                    self.reraise_stale_suspicions();
                }
            }
            self.flush().await;
            self.publish();
        }
    }

    fn on_datagram(&mut self, datagram: &mut [u8], from: SocketAddr) {
        let stats = &self.shared.stats;
        Counters::add(&stats.packets_in, 1);
        Counters::add(&stats.bytes_in, datagram.len() as u64);
        let len = datagram.len();
        let payload = match &mut self.gate {
            Gate::Secret(keyring) => match keyring.opener.open(datagram, keys::unix_ms()) {
                Ok(payload) => payload,
                Err(why) => {
                    let counter = match why {
                        Dropped::Unopened => &stats.bad_mac_dropped,
                        Dropped::Stale => &stats.stale_dropped,
                        Dropped::Replayed => &stats.replayed_dropped,
                    };
                    Counters::add(counter, 1);
                    tracing::debug!(%from, len, ?why, "dropped gossip datagram");
                    return;
                }
            },
            Gate::Open => datagram,
            // No secret and not opened: this node is a cluster of one, and
            // a datagram not sealed is as good as one sealed under another secret.
            Gate::Closed => {
                Counters::add(&stats.bad_mac_dropped, 1);
                return;
            }
        };
        let feed = !self.fed
            && Codec::<NodeIdentity>::decode_header(&mut PostcardCodec, payload)
                .is_ok_and(|h| h.message == Message::Feed);
        match self.foca.handle_data(payload, &mut self.rt) {
            Ok(()) => self.fed |= feed,
            Err(error) => {
                Counters::add(&stats.invalid_dropped, 1);
                tracing::debug!(%from, %error, "foca rejected datagram");
            }
        }
    }

    fn fire_due_timers(&mut self) {
        let now = Instant::now();
        while self.timers.peek().is_some_and(|Reverse(s)| s.at <= now) {
            let Some(Reverse(due)) = self.timers.pop() else {
                break;
            };
            if let Err(error) = self.foca.handle_timer(due.timer, &mut self.rt) {
                tracing::debug!(%error, "foca timer error");
            }
        }
    }

    /// Announces to each seed not yet among the members, and to every
    /// seed until one answered with its member list (a seed heard of only
    /// by gossip leaves this node a part of the cluster to learn one by
    /// one). A node whose first announce
    /// to its seed was lost, and that another joiner reached first, was
    /// otherwise a cluster apart from its seed's for good (found by
    /// `weir-sim dst`: members started at once on a lossy network formed
    /// two rings that never merged).
    fn announce_to_unheard_seeds(&mut self) {
        if self.left {
            return;
        }
        let me = self.foca.identity().gossip;
        let known: Vec<SocketAddr> = self.foca.iter_members().map(|m| m.id().gossip).collect();
        for seed in self
            .seeds
            .iter()
            .filter(|s| **s != me && (!self.fed || !known.contains(s)))
        {
            // foca accepts an Announce addressed to any identity with the
            // receiver's address, so a placeholder carrying only the seed's
            // address is enough.
            let dst = NodeIdentity {
                id: String::new(),
                gossip: *seed,
                grpc: *seed,
                incarnation: 0,
                boot: 0,
            };
            if let Err(error) = self.foca.announce(dst, &mut self.rt) {
                tracing::debug!(%seed, %error, "announce failed");
            }
        }
    }

    /// A renewed identity leaves foca disconnected, every timer of the old
    /// one dropped, until a message from an active member reaches it; the
    /// only one it sends itself is a single gossip round. After a healed
    /// partition every node can renew at once, and with that round lost
    /// no node ever spoke again: each side kept the other down for good.
    /// Until foca is active again, this announces to a few of the members
    /// it still lists each interval; one that hears it answers, and both
    /// resume.
    fn announce_if_stalled(&mut self) {
        if self.left || self.connected || self.foca.num_members() == 0 {
            return;
        }
        // A few at a time, as foca's own periodic announce does: one that
        // answers is enough, and a large cluster is not flooded.
        let chosen = self
            .foca
            .iter_members()
            .map(|m| m.id().clone())
            .collect::<Vec<_>>();
        let chosen = crate::determinism::with_rng(|r| {
            chosen.into_iter().choose_multiple(r, STALLED_ANNOUNCES)
        });
        for member in chosen {
            if let Err(error) = self.foca.announce(member, &mut self.rt) {
                tracing::debug!(%error, "announce failed");
            }
        }
    }

    async fn leave(&mut self) {
        self.left = true;
        if let Err(error) = self.foca.leave_cluster(&mut self.rt) {
            tracing::warn!(%error, "leave_cluster failed");
        }
        self.flush().await;
        self.publish();
        tracing::info!(node = %self.foca.identity(), "left the cluster");
    }

    /// Drains what foca queued: sends (awaited, so nothing is silently
    /// dropped on a full buffer), timers, notifications.
    async fn flush(&mut self) {
        loop {
            while let Some((dst, data)) = self.rt.to_send() {
                self.send(dst.gossip, &data).await;
            }
            let now = Instant::now();
            while let Some((after, timer)) = self.rt.to_schedule() {
                self.timer_seq += 1;
                self.timers.push(Reverse(Scheduled {
                    at: now + after,
                    seq: self.timer_seq,
                    timer,
                }));
            }
            while let Some(notification) = self.rt.to_notify() {
                self.on_notification(notification);
            }
            if !std::mem::take(&mut self.rejoined) {
                return;
            }
            self.reraise_suspicions();
        }
    }

    /// foca ties each suspicion's countdown to the identity that raised it,
    /// so renewing the identity drops every countdown still running. A
    /// member this node suspected while cut off would then stay "suspect"
    /// here for good: the suspicion was gossiped into the cut, so the member
    /// never heard it and never refuted it. Raising each suspicion again,
    /// one incarnation up so that it counts as news, sends it out: a live
    /// member refutes it at once, and a dead one fails its next probe,
    /// which starts a fresh countdown to down.
    fn reraise_suspicions(&mut self) {
        self.reraise(|_| true);
    }

    /// A suspicion ends within `suspect_to_down_after`: refuted, or the
    /// member declared down. One that outlived it twice over has lost its
    /// countdown (dropped with an identity this node renewed, or raised
    /// while foca could not keep it) and would stay "suspect" here for
    /// good, the member routed to but taken for lost by the breakers: it
    /// is raised again, which a live member refutes and a dead one's next
    /// failed probe turns into a fresh countdown.
    fn reraise_stale_suspicions(&mut self) {
        let now = Instant::now();
        let stale: Vec<String> = self
            .suspected_since
            .iter_mut()
            .filter(|(_, since)| now.duration_since(*since) >= self.stale_after)
            .map(|(id, since)| {
                *since = now;
                id.clone()
            })
            .collect();
        if !stale.is_empty() {
            tracing::info!(members = ?stale, "raising suspicions that outlived their countdown");
            self.reraise(|id| stale.contains(&id.id));
        }
    }

    /// Raises again each suspicion of a member `which` names.
    fn reraise(&mut self, which: impl Fn(&NodeIdentity) -> bool) {
        let suspects: Vec<SwimMember<NodeIdentity>> = self
            .foca
            .iter_membership_state()
            .filter(|m| m.state() == SwimState::Suspect && which(m.id()))
            .map(|m| {
                let incarnation = m.incarnation().saturating_add(1);
                SwimMember::new(m.id().clone(), incarnation, SwimState::Suspect)
            })
            .collect();
        if suspects.is_empty() {
            return;
        }
        tracing::info!(members = suspects.len(), "raising suspicions again");
        if let Err(error) = self
            .foca
            .apply_many(suspects.into_iter(), true, &mut self.rt)
        {
            tracing::debug!(%error, "re-raising suspicions failed");
        }
    }

    async fn send(&mut self, to: SocketAddr, payload: &[u8]) {
        match &mut self.gate {
            Gate::Secret(keyring) => {
                keyring
                    .sealer
                    .seal_into(&mut self.out, payload, keys::unix_ms())
            }
            Gate::Open | Gate::Closed => {
                self.out.clear();
                self.out.extend_from_slice(payload);
            }
        }
        let stats = &self.shared.stats;
        match self.socket.send_to(&self.out, to).await {
            Ok(n) => {
                Counters::add(&stats.packets_out, 1);
                Counters::add(&stats.bytes_out, n as u64);
            }
            Err(error) => {
                Counters::add(&stats.send_errors, 1);
                tracing::debug!(%to, %error, "gossip send failed");
            }
        }
    }

    fn on_notification(&mut self, notification: OwnedNotification<NodeIdentity>) {
        match notification {
            OwnedNotification::MemberUp(m) => tracing::info!(member = %m, "member up"),
            OwnedNotification::MemberDown(m) => tracing::info!(member = %m, "member down"),
            OwnedNotification::Rename(old, new) => {
                tracing::info!(%old, %new, "member rejoined with a new incarnation")
            }
            OwnedNotification::Active => {
                self.connected = true;
                tracing::info!("joined the cluster");
            }
            OwnedNotification::Idle => {
                self.connected = false;
                tracing::warn!("no live peers left; announcing to seeds until one answers")
            }
            OwnedNotification::Rejoin(new) => {
                // foca already renewed the identity and told the cluster.
                self.connected = false;
                tracing::warn!(node = %new, "declared down by the cluster; rejoined");
                *lock(&self.shared.identity) = new;
                self.rejoined = true;
            }
            OwnedNotification::Defunct => {
                if !self.left {
                    tracing::error!("declared down and cannot renew identity");
                }
            }
        }
    }

    /// Publishes the member list and, if the live set changed, a new view.
    fn publish(&mut self) {
        let backlog = self.foca.updates_backlog() as u64;
        self.shared
            .stats
            .updates_backlog
            .store(backlog, std::sync::atomic::Ordering::Relaxed);
        let me = self.foca.identity().clone();
        let mut members = Vec::with_capacity(self.foca.iter_membership_state().len() + 1);
        members.push(Member {
            identity: me.clone(),
            state: if self.left {
                MemberState::Down
            } else {
                MemberState::Alive
            },
        });
        for m in self.foca.iter_membership_state() {
            // Our own earlier incarnations linger as Down entries after a
            // rejoin; they are not another member.
            if m.id().gossip == me.gossip {
                continue;
            }
            members.push(Member {
                identity: m.id().clone(),
                state: m.state().into(),
            });
        }
        members.sort_by(|a, b| a.identity.cmp(&b.identity));

        let live_changed = {
            let mut live = members
                .iter()
                .filter(|m| m.state.is_live())
                .map(|m| &m.identity);
            let same = live.clone().count() == self.live.len()
                && live.by_ref().zip(&self.live).all(|(a, b)| a == b);
            !same
        };
        let suspects: Vec<String> = members
            .iter()
            .filter(|m| m.state == MemberState::Suspect)
            .map(|m| m.identity.id.clone())
            .collect();
        let fed_changed = self.fed != self.shared.view.borrow().fed;
        if live_changed || suspects != self.suspects || fed_changed {
            self.live = members
                .iter()
                .filter(|m| m.state.is_live())
                .map(|m| m.identity.clone())
                .collect();
            let now = Instant::now();
            self.suspected_since.retain(|(id, _)| suspects.contains(id));
            for id in &suspects {
                if !self.suspected_since.iter().any(|(s, _)| s == id) {
                    self.suspected_since.push((id.clone(), now));
                }
            }
            self.suspects = suspects;
            self.epoch += 1;
            self.shared.view.send_replace(MemberView {
                epoch: self.epoch,
                members: self.live.clone(),
                suspects: self.suspects.clone(),
                fed: self.fed,
            });
            tracing::debug!(
                epoch = self.epoch,
                live = self.live.len(),
                "member view changed"
            );
        }
        *lock(&self.shared.members) = members;
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
