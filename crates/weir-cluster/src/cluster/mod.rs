//! N nodes deciding as one limiter: each check is decided by its key's owner on the ring.
//!
//! [`Cluster`] runs SWIM membership, keeps a consistent-hash [`Ring`] of
//! the live members, forwards counter operations to their owners in
//! batches, answers known denials from a local deny cache, falls back to a
//! local limit/N when an owner does not answer, moves counters when the
//! ring changes, and keeps every node's rule set converged. The protocol
//! and its failure bounds are written up in `docs/cluster.md`.

mod auth;
mod batcher;
mod deny_cache;
mod fallback;
mod handoff;
mod owner;
mod peers;
mod rules_sync;
mod service;
mod status;
mod strategies;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::{ArcSwap, ArcSwapOption};
use parking_lot::Mutex;
use rand::seq::IndexedRandom;
use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;
use tonic::service::interceptor::InterceptedService;
use weir_core::{CheckError, Decision, Limiter, LimiterConfig, RuleSet, RulesError};
use weir_proto::weir::v1::peer_server::PeerServer;
use weir_proto::weir::v1::RuleSet as WireRuleSet;

pub use auth::{PeerAuth, PeerToken, PEER_AUTH_HEADER};
pub use batcher::BatchConfig;
pub use service::PeerService;
pub use status::{ClusterStats, FallbackStatus, MemberStatus};

use crate::engine::{OwnerFailure, Strategy};
use crate::membership::{
    Blackhole, MemberView, Membership, MembershipConfig, MembershipError, NodeIdentity,
};
use crate::ring::Ring;
use crate::strategy::gossip::GossipCounts;
use deny_cache::DenyCache;
use fallback::Fallback;
use peers::PeerPool;
use rules_sync::RulesSync;
use status::{bump, Stats};

/// How quickly membership notices a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GossipProfile {
    /// [`MembershipConfig::lan_foca_config`]: a crash is noticed in ~3-4 s.
    #[default]
    Lan,
    /// [`MembershipConfig::fast_foca_config`]: ~1.3-1.8 s; for loopback tests.
    Fast,
}

/// Everything [`Cluster::start`] needs.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// This node: its id and the gRPC address peers forward to. A gossip
    /// port of 0 is filled in from the bound socket.
    pub identity: NodeIdentity,
    /// UDP address to bind for gossip.
    pub gossip: SocketAddr,
    /// Gossip addresses of nodes to join through (already resolved).
    pub seeds: Vec<SocketAddr>,
    /// The seeds as given (`host:port`), resolved again every
    /// `reseed_interval` while this node knows no peer: a name that did not
    /// resolve at start (a DNS record not there yet) or that now names other
    /// addresses (peers rescheduled) would otherwise leave it a cluster of
    /// one, admitting every limit in full on its own.
    pub seed_names: Vec<String>,
    pub reseed_interval: Duration,
    pub resolver: SeedResolver,
    /// Shared secret: gossip is HMAC-tagged with it and every peer call
    /// must carry a token derived from it.
    pub secret: Option<Vec<u8>>,
    /// How long a gateway waits for an owner's answer before applying
    /// `on_owner_failure`.
    pub owner_deadline: Duration,
    pub on_owner_failure: OwnerFailure,
    pub batch: BatchConfig,
    pub gossip_profile: GossipProfile,
    /// Anti-entropy: how often each node pulls the rule set from one random peer.
    pub rules_sync_interval: Duration,
    /// While an owner is in fallback, how often one check probes it.
    pub fallback_probe: Duration,
    /// Graceful leave: the longest wait for peers to drop this node.
    pub leave_timeout: Duration,
    /// Denials cached at most (distinct hash parts).
    pub deny_cache_keys: usize,
    pub blackhole: Option<Blackhole>,
    /// Which strategy this node's engine runs; the gossip strategy's sync
    /// task runs only under `Gossip`.
    pub strategy: Strategy,
    /// Gossip strategy: how often counts go to every peer.
    pub sync_interval: Duration,
    /// Sizes the fallback limiter's tables (the node's `--max-keys`).
    pub limiter: LimiterConfig,
}

type ResolveFn = dyn Fn(&str) -> std::io::Result<Vec<SocketAddr>> + Send + Sync;

/// Turns a `host:port` seed into addresses. Blocking; run off the runtime.
#[derive(Clone)]
pub struct SeedResolver(Arc<ResolveFn>);

impl SeedResolver {
    /// The system resolver (`getaddrinfo`).
    pub fn system() -> Self {
        SeedResolver::new(|name| {
            use std::net::ToSocketAddrs;
            Ok(name.to_socket_addrs()?.collect())
        })
    }

    pub fn new(
        f: impl Fn(&str) -> std::io::Result<Vec<SocketAddr>> + Send + Sync + 'static,
    ) -> Self {
        SeedResolver(Arc::new(f))
    }

    /// Every address the names resolve to now; names that fail are skipped.
    fn resolve_all(&self, names: &[String]) -> Vec<SocketAddr> {
        let mut out: Vec<SocketAddr> = names
            .iter()
            .filter_map(|n| (self.0)(n).ok())
            .flatten()
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

impl std::fmt::Debug for SeedResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SeedResolver(..)")
    }
}

/// Default owner deadline. One LAN hop is ~0.5 ms (seed 8B) and a batch of
/// 256 ops adds well under a millisecond, so 5 ms is ~10x the expected
/// answer: an owner that has not answered by then is slow enough that the
/// check's whole latency budget (5 ms, seed) is already gone, and deciding
/// it on the fallback costs accuracy on that one check only.
pub const DEFAULT_OWNER_DEADLINE: Duration = Duration::from_millis(5);

impl ClusterConfig {
    pub fn new(identity: NodeIdentity, gossip: SocketAddr) -> Self {
        ClusterConfig {
            identity,
            gossip,
            seeds: Vec::new(),
            seed_names: Vec::new(),
            reseed_interval: Duration::from_secs(5),
            resolver: SeedResolver::system(),
            secret: None,
            owner_deadline: DEFAULT_OWNER_DEADLINE,
            on_owner_failure: OwnerFailure::Local,
            batch: BatchConfig::default(),
            gossip_profile: GossipProfile::Lan,
            rules_sync_interval: Duration::from_secs(5),
            fallback_probe: Duration::from_millis(200),
            leave_timeout: Duration::from_secs(3),
            deny_cache_keys: 100_000,
            blackhole: None,
            strategy: Strategy::Owner,
            sync_interval: Duration::from_millis(100),
            limiter: LimiterConfig::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(transparent)]
    Membership(#[from] MembershipError),
    #[error("invalid cluster config: {0}")]
    Config(&'static str),
}

/// The peer service as mounted on a node's gRPC server.
pub type PeerServiceServer = InterceptedService<PeerServer<PeerService>, PeerAuth>;

/// What the batchers, handoffs and rule pulls share: how to reach peers.
pub(crate) struct Net {
    pub me: String,
    pub peers: PeerPool,
    pub stats: Arc<Stats>,
    pub limiter: Arc<Limiter>,
    pub deadline: Duration,
    hints: mpsc::UnboundedSender<(String, SocketAddr, u64)>,
    /// Highest version hinted so far: every answer from a node that is
    /// ahead says so, and one pull per new version is enough.
    hinted: AtomicU64,
}

impl Net {
    /// A peer reported a newer rule set than ours: pull it soon.
    pub fn hint_rules(&self, id: &str, addr: SocketAddr, version: u64) {
        if self.hinted.fetch_max(version, Ordering::Relaxed) < version {
            let _ = self.hints.send((id.to_string(), addr, version));
        }
    }
}

pub(crate) struct Inner {
    me: String,
    config: ClusterConfig,
    limiter: Arc<Limiter>,
    membership: Membership,
    ring: ArcSwap<Ring>,
    /// Set once a graceful leave begins: the ring without this node.
    after_leave: ArcSwapOption<Ring>,
    leaving: AtomicBool,
    /// Local consumes under way; a leave waits for them before taking the
    /// counters, so none lands after the take.
    local_inflight: AtomicUsize,
    /// Becomes true once a leaving node has handed its counters over; ops
    /// for its keys wait for it, so the new owner never decides a key
    /// before it holds the key's spent budget.
    handed_over: watch::Sender<bool>,
    net: Arc<Net>,
    batchers: batcher::Batchers,
    deny: DenyCache,
    fallback: Fallback,
    rules: RulesSync,
    /// A counter this node does not own was created here; sweep it to its owner.
    strays: AtomicBool,
    /// The gossip strategy's local and heard counts.
    gossip: GossipCounts,
    tasks: Mutex<Vec<AbortHandle>>,
    stopped: AtomicBool,
}

/// A running cluster member. Dropping it stops its tasks without a goodbye.
pub struct Cluster {
    inner: Arc<Inner>,
}

/// Deadline for rule pushes and pulls; they are off the request path.
const RULES_CALL_DEADLINE: Duration = Duration::from_secs(1);
/// How often strays, expired denials and idle fallback keys are swept.
const MAINTENANCE_EVERY: Duration = Duration::from_millis(250);

impl Cluster {
    /// Joins (or founds) the cluster and starts the background tasks. The
    /// caller mounts [`Cluster::peer_service`] on `config.identity.grpc`.
    pub async fn start(
        config: ClusterConfig,
        limiter: Arc<Limiter>,
    ) -> Result<Cluster, ClusterError> {
        if config.owner_deadline.is_zero() {
            return Err(ClusterError::Config(
                "owner_deadline must be longer than zero",
            ));
        }
        let token = match &config.secret {
            Some(s) => Some(
                PeerToken::new(s)
                    .ok_or(ClusterError::Config("cluster secret must not be empty"))?,
            ),
            None => None,
        };
        let mut mc = match config.gossip_profile {
            GossipProfile::Lan => {
                MembershipConfig::new(config.identity.clone(), config.gossip, config.seeds.clone())
            }
            GossipProfile::Fast => {
                MembershipConfig::fast(config.identity.clone(), config.gossip, config.seeds.clone())
            }
        };
        if let Some(s) = &config.secret {
            mc = mc.with_secret(s.clone());
        }
        mc.blackhole = config.blackhole.clone();
        let membership = Membership::start(mc).await?;
        let me = membership.identity().id;

        let (hints, hints_rx) = mpsc::unbounded_channel();
        let net = Arc::new(Net {
            me: me.clone(),
            peers: PeerPool::new(token, config.blackhole.clone(), MAX_PEER_MESSAGE),
            stats: Arc::new(Stats::default()),
            limiter: limiter.clone(),
            deadline: config.owner_deadline,
            hints,
            hinted: AtomicU64::new(0),
        });
        // Subscribe before reading the first view, so a change in between
        // is seen by the watcher rather than lost.
        let mut views = membership.subscribe();
        let ring = Ring::with_default_vnodes(&views.borrow_and_update().members);
        let rules = limiter.rules();
        let fallback = Fallback::new(
            &rules,
            ring.len(),
            limiter.clock().clone(),
            config.limiter,
            config.fallback_probe,
        );
        let inner = Arc::new(Inner {
            me,
            batchers: batcher::Batchers::new(net.clone(), config.batch),
            deny: DenyCache::new(config.deny_cache_keys),
            rules: RulesSync::new(&rules),
            config,
            limiter,
            membership,
            ring: ArcSwap::from_pointee(ring),
            after_leave: ArcSwapOption::empty(),
            leaving: AtomicBool::new(false),
            local_inflight: AtomicUsize::new(0),
            handed_over: watch::Sender::new(false),
            net,
            fallback,
            strays: AtomicBool::new(false),
            gossip: GossipCounts::default(),
            tasks: Mutex::new(Vec::new()),
            stopped: AtomicBool::new(false),
        });
        let mut tasks = vec![
            tokio::spawn(watch_view(inner.clone(), views)).abort_handle(),
            tokio::spawn(maintain(inner.clone())).abort_handle(),
            tokio::spawn(follow_hints(inner.clone(), hints_rx)).abort_handle(),
        ];
        if !inner.config.seed_names.is_empty() {
            tasks.push(tokio::spawn(reseed(inner.clone())).abort_handle());
        }
        if inner.config.strategy == Strategy::Gossip {
            tasks.push(tokio::spawn(strategies::sync_counts(inner.clone())).abort_handle());
        }
        *inner.tasks.lock() = tasks;
        tracing::info!(node = %inner.membership.identity(), "cluster member started");
        Ok(Cluster { inner })
    }

    /// This node's identity as gossiped (gossip port filled in).
    pub fn identity(&self) -> NodeIdentity {
        self.inner.membership.identity()
    }

    pub fn node_id(&self) -> &str {
        &self.inner.me
    }

    pub fn gossip_addr(&self) -> SocketAddr {
        self.inner.membership.local_addr()
    }

    pub fn limiter(&self) -> &Arc<Limiter> {
        &self.inner.limiter
    }

    /// The ring this node routes by now.
    pub fn ring(&self) -> Arc<Ring> {
        self.inner.ring.load_full()
    }

    /// The owner of a hash part on this node's ring.
    pub fn owner_of(&self, hash_part: &str) -> Option<NodeIdentity> {
        self.inner.ring.load().owner(hash_part).cloned()
    }

    /// Every known member (down ones included, for a while) with its share
    /// of this node's ring.
    pub fn members_status(&self) -> Vec<MemberStatus> {
        let shares = self.inner.ring.load().shares();
        self.inner
            .membership
            .members()
            .into_iter()
            .map(|m| {
                let ring_share = if m.state.is_live() {
                    shares
                        .iter()
                        .find(|(id, _)| *id == m.identity.id)
                        .map_or(0.0, |(_, s)| *s)
                } else {
                    0.0
                };
                MemberStatus {
                    id: m.identity.id,
                    gossip: m.identity.gossip,
                    grpc: m.identity.grpc,
                    state: m.state,
                    ring_share,
                }
            })
            .collect()
    }

    /// Traffic counters of the gossip socket (datagrams dropped for a bad
    /// tag among them).
    pub fn gossip_stats(&self) -> crate::membership::MembershipStats {
        self.inner.membership.stats()
    }

    pub fn stats(&self) -> ClusterStats {
        self.inner.net.stats.snapshot(&self.inner.fallback.counts())
    }

    pub fn fallback_status(&self) -> FallbackStatus {
        self.inner.fallback.status()
    }

    pub fn on_owner_failure(&self) -> OwnerFailure {
        self.inner.config.on_owner_failure
    }

    /// The `weir.v1.Peer` service to mount on this node's gRPC port, behind
    /// the cluster-secret check.
    pub fn peer_service(&self) -> PeerServiceServer {
        let token = self.inner.config.secret.as_deref().and_then(PeerToken::new);
        let auth = PeerAuth::new(token, self.inner.net.stats.clone());
        let server = PeerServer::new(PeerService::new(self.inner.clone()))
            .max_decoding_message_size(MAX_PEER_MESSAGE)
            .max_encoding_message_size(MAX_PEER_MESSAGE);
        InterceptedService::new(server, auth)
    }

    /// Decides a check at the owners of its limits (the owner strategy).
    pub(crate) async fn check(
        &self,
        req: &weir_core::Request<'_>,
    ) -> Result<weir_core::Verdict, crate::engine::CheckFailure> {
        self.inner.check(req).await
    }

    /// Decides a request's own limit (an Envoy override) at its key's owner.
    pub(crate) async fn check_carried(
        &self,
        rule: &Arc<weir_core::Rule>,
        hash_part: &str,
        cost: u64,
    ) -> Result<weir_core::Decision, crate::engine::CheckFailure> {
        self.inner.check_carried(rule, hash_part, cost).await
    }

    /// Decides many checks at their owners. Those owned here are decided
    /// first, in place; the rest travel together, so checks for one owner
    /// share Decide calls.
    pub(crate) async fn check_many(
        &self,
        reqs: &[weir_core::Request<'_>],
    ) -> Vec<Result<weir_core::Verdict, crate::engine::CheckFailure>> {
        let placed: Vec<_> = self
            .inner
            .placing(|here| reqs.iter().map(|r| here.check(r)).collect());
        let mut slots = Vec::with_capacity(reqs.len());
        let mut remote = Vec::new();
        for (i, (req, placed)) in reqs.iter().zip(placed).enumerate() {
            slots.push(match placed {
                Ok(weir_core::Placed::Decided(v)) => Some(Ok(v)),
                Ok(weir_core::Placed::Elsewhere(rules, sel)) => {
                    remote.push(
                        async move { (i, self.inner.check_at_owners(req, rules, sel).await) },
                    );
                    None
                }
                Err(e) => Some(Err(e)),
            });
        }
        for (i, outcome) in futures::future::join_all(remote).await {
            slots[i] = Some(outcome);
        }
        // Every slot is filled; a caller that gets fewer answers than it
        // asked for treats that as an engine error.
        slots.into_iter().flatten().collect()
    }

    /// Decides a check on this node's counters plus what peers last reported
    /// (the gossip strategy).
    pub(crate) fn check_gossip(
        &self,
        req: &weir_core::Request<'_>,
    ) -> Result<weir_core::Verdict, crate::engine::CheckFailure> {
        self.inner.check_gossip(req)
    }

    /// Gossip strategy: the cost peers last reported admitting for this
    /// rule and key in the current window.
    pub fn heard(&self, rule: &str, key: &str) -> u64 {
        let rules = self.inner.limiter.rules();
        let Some((_, r)) = rules.get(rule) else {
            return 0;
        };
        let window = u64::try_from(r.window.as_nanos()).unwrap_or(u64::MAX);
        self.inner
            .gossip
            .heard(&r.name, key, self.inner.limiter.now(), window)
    }

    /// Decides a check at limit/N on this node alone (the divide strategy).
    pub(crate) fn check_divide(
        &self,
        req: &weir_core::Request<'_>,
    ) -> Result<weir_core::Verdict, crate::engine::CheckFailure> {
        self.inner.check_divide(req)
    }

    /// Applies a local rule write and pushes the result to every member.
    pub(crate) fn write_rules(
        &self,
        write: impl FnOnce(&RuleSet) -> Result<RuleSet, RulesError>,
    ) -> Result<Arc<RuleSet>, RulesError> {
        let inner = &self.inner;
        let (set, wire) = inner.rules.write(&inner.limiter, &inner.me, write)?;
        inner.after_rules_change();
        inner.push_rules(wire);
        Ok(set)
    }

    /// Leaves gracefully: hands every counter to its owner on the ring
    /// without this node, announces the departure, and waits (up to
    /// `leave_timeout`) until no peer lists this node any more. Checks that
    /// arrive meanwhile are forwarded to the new owners, so none is lost.
    pub async fn leave(&self) {
        self.inner.clone().leave().await;
    }

    /// Stops everything at once with no goodbye, as a crash would: peers
    /// find out through failure detection. For tests.
    pub fn kill(&self) {
        self.inner.stop();
        self.inner.membership.abort();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.inner.stop();
    }
}

/// Handoffs carry whole counters (a sliding log holds up to L timestamps),
/// so peer messages may be far larger than a client's.
const MAX_PEER_MESSAGE: usize = 16 << 20;

enum LocalOutcome {
    Decided(Result<Decision, CheckError>),
    /// This node is leaving; the key now belongs elsewhere.
    Moved,
}

impl Inner {
    /// The ring checks are routed by: the ring without this node once it is leaving.
    fn routing_ring(&self) -> Arc<Ring> {
        match self.after_leave.load_full() {
            Some(r) => r,
            None => self.ring.load_full(),
        }
    }

    fn is_leaving(&self) -> bool {
        self.leaving.load(Ordering::SeqCst)
    }

    /// Decides one op on this node's own counters unless a leave has begun.
    fn consume_local(&self, rule: &str, hash_part: &str, cost: u64) -> LocalOutcome {
        // SeqCst on both sides (here and in `leave`): either the leave sees
        // this consume in flight and waits for it, or this sees the leave.
        self.local_inflight.fetch_add(1, Ordering::SeqCst);
        if self.leaving.load(Ordering::SeqCst) {
            self.local_inflight.fetch_sub(1, Ordering::SeqCst);
            return LocalOutcome::Moved;
        }
        let d = self
            .limiter
            .consume(rule, hash_part, cost, self.limiter.now());
        self.local_inflight.fetch_sub(1, Ordering::SeqCst);
        LocalOutcome::Decided(d)
    }

    /// Resolves once a leaving node's counters have been handed over.
    async fn handover_done(&self) {
        let mut rx = self.handed_over.subscribe();
        let _ = rx.wait_for(|done| *done).await;
    }

    fn after_rules_change(&self) {
        self.deny.clear();
        self.fallback
            .rebuild(&self.limiter.rules(), self.ring.load().len());
    }

    fn push_rules(self: &Arc<Self>, wire: WireRuleSet) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = self.clone();
        rt.spawn(async move {
            let ring = inner.ring.load_full();
            let pushes = ring.members().iter().filter(|m| m.id != inner.me).map(|m| {
                let wire = wire.clone();
                let net = &inner.net;
                async move {
                    match net
                        .peers
                        .push_rules(&m.id, m.grpc, wire, RULES_CALL_DEADLINE)
                        .await
                    {
                        Ok(_) => bump(&net.stats.rules_pushed, 1),
                        // Anti-entropy pulls repair a missed push.
                        Err(e) => {
                            tracing::debug!(peer = %m.id, error = %e, "rules push failed")
                        }
                    }
                }
            });
            futures::future::join_all(pushes).await;
        });
    }

    /// Takes the rule set from `id` if it ranks above ours.
    async fn pull_rules(&self, id: &str, addr: SocketAddr) {
        let have = self.limiter.rules().version();
        match self
            .net
            .peers
            .pull_rules(id, addr, have, RULES_CALL_DEADLINE)
            .await
        {
            Ok(wire) => {
                let _ = self.adopt_rules(&wire, id);
            }
            Err(e) => tracing::debug!(peer = id, error = %e, "rules pull failed"),
        }
    }

    /// Offers a peer's set; Ok(true) when it was adopted.
    fn adopt_rules(&self, wire: &WireRuleSet, from: &str) -> Result<bool, RulesError> {
        let adopted = self.rules.offer(&self.limiter, wire).inspect_err(|e| {
            tracing::warn!(from, error = %e, "refused an invalid rule set from a peer");
        })?;
        if adopted {
            bump(&self.net.stats.rules_adopted, 1);
            self.after_rules_change();
            tracing::info!(version = wire.version, origin = %wire.origin, from, "adopted a peer's rule set");
        }
        Ok(adopted)
    }

    fn random_peer(&self) -> Option<(String, SocketAddr)> {
        let ring = self.ring.load();
        let peers: Vec<&NodeIdentity> = ring.members().iter().filter(|m| m.id != self.me).collect();
        peers
            .choose(&mut rand::rng())
            .map(|m| (m.id.clone(), m.grpc))
    }

    async fn on_view(&self, view: MemberView) {
        let ring = Arc::new(Ring::with_default_vnodes(&view.members));
        let old = self.ring.swap(ring.clone());
        let is_member = |id: &str| ring.members().iter().any(|m| m.id == id);
        if old.len() != ring.len() {
            self.fallback.rebuild(&self.limiter.rules(), ring.len());
        }
        self.fallback.retain_members(is_member, self.limiter.now());
        self.batchers.retain(is_member);
        self.net.peers.retain(is_member);
        let ids: Vec<&str> = ring.members().iter().map(|m| m.id.as_str()).collect();
        tracing::info!(epoch = view.epoch, members = ?ids, "ring rebuilt");
        let joined = ring
            .members()
            .iter()
            .any(|m| m.id != self.me && !old.members().iter().any(|o| o.id == m.id));
        if joined {
            // A node that joins late learns the rules from a peer; the
            // newcomer's own pull carries ours the other way if ours rank higher
            // (the hint in its next Decide, or anti-entropy, settles the rest).
            if let Some((id, addr)) = self.random_peer() {
                self.pull_rules(&id, addr).await;
            }
        }
        self.rebalance().await;
    }

    /// Hands every counter this node holds but no longer owns to its owner.
    async fn rebalance(&self) {
        // Only the owner strategy places counters on the ring; under gossip
        // and divide each node's counters are its own, and moving them would
        // hand a peer budget it has already heard about (or never enforces).
        if self.config.strategy != Strategy::Owner {
            return;
        }
        let ring = self.ring.load_full();
        let me = self.me.clone();
        let limiter = self.limiter.clone();
        let owned = ring.clone();
        let Ok(snaps) = tokio::task::spawn_blocking(move || {
            limiter.take_unless(|k| owned.owner_id(k).is_none_or(|o| o == me))
        })
        .await
        else {
            return;
        };
        if snaps.is_empty() {
            return;
        }
        let n = snaps.len();
        let undelivered = handoff::hand_over(&self.net, snaps, |h| {
            ring.owner(h)
                .filter(|o| o.id != self.me)
                .map(|o| (o.id.clone(), o.grpc))
        })
        .await;
        tracing::info!(
            moved = n - undelivered.len(),
            kept = undelivered.len(),
            "handed counters to their new owners"
        );
        if !undelivered.is_empty() {
            // Keep them and try again on the next sweep rather than lose
            // their spent budget.
            for snap in undelivered {
                self.limiter.absorb(snap);
            }
            self.strays.store(true, Ordering::Relaxed);
        }
    }

    async fn leave(self: Arc<Self>) {
        if self.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        self.abort_tasks();
        let ring = self.ring.load_full();
        let rest: Vec<NodeIdentity> = ring
            .members()
            .iter()
            .filter(|m| m.id != self.me)
            .cloned()
            .collect();
        if rest.is_empty() || self.config.strategy != Strategy::Owner {
            let _ = self.membership.leave_gracefully().await;
            tracing::info!("left; no counters to hand over");
            return;
        }
        // The whole leave is bounded by `leave_timeout`, so a shutdown
        // (and the grace period deploy files allow for it) stays bounded
        // even when peers are slow.
        let deadline = tokio::time::Instant::now() + self.config.leave_timeout;
        let after = Arc::new(Ring::with_default_vnodes(&rest));
        self.after_leave.store(Some(after.clone()));
        self.leaving.store(true, Ordering::SeqCst);
        while self.local_inflight.load(Ordering::SeqCst) > 0
            && tokio::time::Instant::now() < deadline
        {
            tokio::task::yield_now().await;
        }
        let snaps = self.limiter.take_unless(|_| false);
        let n = snaps.len() as u64;
        let handing = handoff::hand_over(&self.net, snaps, |h| {
            after.owner(h).map(|o| (o.id.clone(), o.grpc))
        });
        let lost = match tokio::time::timeout_at(deadline, handing).await {
            Ok(undelivered) => undelivered.len() as u64,
            Err(_) => n,
        };
        bump(&self.net.stats.keys_lost, lost);
        self.handed_over.send_replace(true);
        tracing::info!(
            counters = n,
            lost,
            "handed every counter over; announcing leave"
        );
        if let Err(e) = self.membership.leave_gracefully().await {
            tracing::warn!(error = %e, "leave announcement failed");
        }
        let waited = self.wait_until_forgotten(&rest, deadline).await;
        tracing::info!(?waited, "left the cluster");
    }

    /// Polls every remaining member until none lists this node as live, or
    /// `give_up` passes. Meanwhile checks still routed here are forwarded
    /// to the new owners.
    async fn wait_until_forgotten(
        &self,
        rest: &[NodeIdentity],
        give_up: tokio::time::Instant,
    ) -> Option<Duration> {
        let started = tokio::time::Instant::now();
        loop {
            let asks = rest.iter().map(|m| async move {
                match self
                    .net
                    .peers
                    .members(&m.id, m.grpc, Duration::from_millis(200))
                    .await
                {
                    Ok(r) => r.live.contains(&self.me),
                    // A peer that does not answer will not route here either.
                    Err(_) => false,
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

    fn abort_tasks(&self) {
        for t in self.tasks.lock().drain(..) {
            t.abort();
        }
    }

    fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.abort_tasks();
        self.batchers.clear();
    }
}

async fn watch_view(inner: Arc<Inner>, mut views: watch::Receiver<MemberView>) {
    loop {
        if views.changed().await.is_err() {
            return;
        }
        let view = views.borrow_and_update().clone();
        inner.on_view(view).await;
    }
}

/// Periodic chores: sweep strays to their owners, drop expired denials and
/// idle fallback keys, and pull the rules from a random peer (anti-entropy).
async fn maintain(inner: Arc<Inner>) {
    let mut tick = tokio::time::interval(MAINTENANCE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut next_pull = tokio::time::Instant::now() + inner.config.rules_sync_interval;
    loop {
        tick.tick().await;
        if inner.strays.swap(false, Ordering::Relaxed) {
            inner.rebalance().await;
        }
        let now = inner.limiter.now();
        inner.deny.purge(now);
        inner.fallback.sweep();
        inner.sweep_gossip();
        // An owner can be marked lost just after it left the ring (a call
        // already queued to it failed); its fallback ends here.
        let ring = inner.ring.load_full();
        inner
            .fallback
            .retain_members(|id| ring.members().iter().any(|m| m.id == id), now);
        if tokio::time::Instant::now() >= next_pull {
            next_pull = tokio::time::Instant::now() + inner.config.rules_sync_interval;
            if let Some((id, addr)) = inner.random_peer() {
                inner.pull_rules(&id, addr).await;
            }
        }
    }
}

/// While this node knows no peer, resolves the seed names again and hands
/// the membership any address they now name.
async fn reseed(inner: Arc<Inner>) {
    let mut tick = tokio::time::interval(inner.config.reseed_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick fires at once; start already resolved the names.
    tick.tick().await;
    loop {
        tick.tick().await;
        if inner.ring.load().len() > 1 || inner.is_leaving() {
            continue;
        }
        let (resolver, names) = (
            inner.config.resolver.clone(),
            inner.config.seed_names.clone(),
        );
        let Ok(addrs) = tokio::task::spawn_blocking(move || resolver.resolve_all(&names)).await
        else {
            continue;
        };
        if !addrs.is_empty() {
            tracing::info!(?addrs, "alone: announcing to the seeds as they resolve now");
            inner.membership.add_seeds(addrs);
        }
    }
}

/// Pulls the rules from a peer that said (in a Decide call) it has a newer set.
async fn follow_hints(
    inner: Arc<Inner>,
    mut hints: mpsc::UnboundedReceiver<(String, SocketAddr, u64)>,
) {
    while let Some((id, addr, version)) = hints.recv().await {
        if version > inner.limiter.rules().version() {
            inner.pull_rules(&id, addr).await;
        }
    }
}

/// Resolves `host:port` seeds, retrying names that do not resolve yet (a
/// DNS record that appears a little after the pod does) for up to
/// `patience`. Seeds still unresolved then are logged and skipped.
pub async fn resolve_seeds(seeds: &[String], patience: Duration) -> Vec<SocketAddr> {
    let give_up = tokio::time::Instant::now() + patience;
    let mut out = Vec::new();
    for seed in seeds {
        let mut wait = Duration::from_millis(100);
        loop {
            match tokio::net::lookup_host(seed.as_str()).await {
                Ok(addrs) => {
                    out.extend(addrs);
                    break;
                }
                Err(e) if tokio::time::Instant::now() + wait > give_up => {
                    tracing::warn!(seed = %seed, error = %e, "cannot resolve seed; skipping it");
                    break;
                }
                Err(e) => {
                    tracing::debug!(seed = %seed, error = %e, "seed does not resolve yet; retrying");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(1));
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}
