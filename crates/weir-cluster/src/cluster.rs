//! A running cluster member: the parts wired together, and the background loops that keep them current.
//!
//! The protocol and its failure bounds are written up in `docs/cluster.md`;
//! the parts each live in a module of their own (see the crate root).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::task::AbortHandle;
use tonic::service::interceptor::InterceptedService;
use weir_core::{Limiter, RuleSet, RulesError};
use weir_proto::weir::v1::peer_server::PeerServer;
use weir_proto::weir::v1::regions_server::RegionsServer;
use weir_proto::weir::v1::{NodeSummary, SummaryRequest};

use crate::background;
use crate::config::{ClusterConfig, GossipProfile};
use crate::handler::PeerHandler;
use crate::link::Link;
use crate::net::auth::{PeerAuth, PeerToken};
use crate::net::batcher::{Batchers, Ctx};
use crate::net::direct::{Copies, DirectServer};
use crate::net::grpc::{TonicLink, MAX_PEER_MESSAGE};
use crate::net::peer_tls::PeerTls;
use crate::net::regions::{RegionsService, TonicRegionLink};
use crate::net::server::PeerService;
use crate::owner::breaker::Breakers;
use crate::owner::deny_cache::DenyCache;
use crate::owner::hot::HotKey;
use crate::owner::lease::Lessor;
use crate::owner::local::Local;
use crate::owner::moves::Moves;
use crate::owner::replica::Replicas;
use crate::owner::replicate::Replicator;
use crate::owner::serve::OwnerService;
use crate::regional::{RegionGate, RegionLink, RegionStatus, Regional};
use crate::stats::{ClusterStats, FallbackStatus, MemberStatus, Stats};
use crate::strategy::{self, Parts, Strategy};
use crate::summary::{self, ActivitySource, MemberSummary};
use crate::topology::membership::{
    Datagrams, Membership, MembershipConfig, MembershipError, MembershipStats, NodeIdentity,
};
use crate::topology::ring::Ring;
use crate::topology::routing::Routing;
use crate::topology::rules_sync::{Rules, RulesHints};
use crate::topology::seeds::SeedResolver;
use crate::topology::tier_writes::{self, Condition, TierWriteError};

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(transparent)]
    Membership(#[from] MembershipError),
    #[error("invalid cluster config: {0}")]
    Config(&'static str),
}

/// The peer service as mounted on a node's gRPC server.
pub type PeerServiceServer = InterceptedService<PeerServer<PeerService>, PeerAuth>;
/// The region service, mounted beside the peer service.
pub type RegionsServiceServer = InterceptedService<RegionsServer<RegionsService>, PeerAuth>;

/// How long start waits for seed names to resolve (a DNS record may appear
/// a little after the pod it names).
const SEED_PATIENCE: Duration = Duration::from_secs(5);
/// Announce intervals a node given seeds waits alone for its cluster
/// before it takes itself for the first member ([`Routing::joining`]),
/// unless `join_timeout` says how long: its checks wait meanwhile rather
/// than be decided on nothing.
const JOIN_ANNOUNCES: u32 = 5;

/// What a member talks over: gossip datagrams, peer calls, seed resolution.
pub(crate) struct Transport {
    pub gossip: Gossip,
    pub link: Arc<dyn Link>,
    pub region_link: Arc<dyn RegionLink>,
    pub resolver: SeedResolver,
}

/// What gossip goes over, which also says where the membership driver runs.
pub(crate) enum Gossip {
    /// A bound UDP socket: the driver gets a thread and runtime of its own.
    Udp(std::net::UdpSocket),
    /// The in-memory network of tests and the simulator: the driver is a
    /// task on the caller's runtime, stepped with the rest of the member.
    InProcess(Arc<dyn Datagrams>),
}

/// The wired parts; the background loops hold it, the [`Cluster`] handle stops them.
struct Inner {
    config: ClusterConfig,
    limiter: Arc<Limiter>,
    membership: Arc<Membership>,
    routing: Arc<Routing>,
    rules: Arc<Rules>,
    strategy: Arc<dyn Strategy>,
    handler: Arc<PeerHandler>,
    link: Arc<dyn Link>,
    stats: Arc<Stats>,
    replicator: Arc<Replicator>,
    lessor: Arc<Lessor>,
    regional: Option<Arc<Regional>>,
    /// Tokens of the cluster secret and every accepted one: a peer call
    /// carrying any of them is taken.
    accepted_tokens: Vec<PeerToken>,
    resolver: SeedResolver,
    tasks: Mutex<Vec<AbortHandle>>,
    stopped: AtomicBool,
    /// Set when the member is killed: its peer service then answers
    /// nothing, even on connections still open, as a dead process.
    killed: Arc<AtomicBool>,
    /// The copies its direct connections bring, taken in the order they came.
    copies: Arc<Copies>,
}

/// A running cluster member. Dropping it stops its tasks without a goodbye.
pub struct Cluster {
    inner: Arc<Inner>,
}

impl Cluster {
    /// Joins (or founds) the cluster over UDP gossip on `gossip_bind` and
    /// gRPC peer calls, and starts the background tasks. The caller mounts
    /// [`Cluster::peer_service`] on `identity.grpc`.
    pub async fn start(
        config: ClusterConfig,
        identity: NodeIdentity,
        gossip_bind: SocketAddr,
        limiter: Arc<Limiter>,
    ) -> Result<Cluster, ClusterError> {
        Self::start_over(config, identity, gossip_bind, limiter, None).await
    }

    /// [`Cluster::start`], dialling every peer under mutual TLS when `tls`
    /// is given; the caller serves its peer port under the same.
    pub async fn start_over(
        config: ClusterConfig,
        identity: NodeIdentity,
        gossip_bind: SocketAddr,
        limiter: Arc<Limiter>,
        tls: Option<Arc<PeerTls>>,
    ) -> Result<Cluster, ClusterError> {
        config.validate().map_err(ClusterError::Config)?;
        let socket =
            std::net::UdpSocket::bind(gossip_bind).map_err(|source| MembershipError::Bind {
                addr: gossip_bind,
                source,
            })?;
        let token = config
            .secret
            .as_deref()
            .and_then(|s| PeerToken::new(s.as_bytes()));
        let transport = Transport {
            gossip: Gossip::Udp(socket),
            link: Arc::new(TonicLink::new(token.clone(), !config.grpc_only).with_tls(tls.clone())),
            region_link: Arc::new(TonicRegionLink::new(token).with_tls(tls)),
            resolver: SeedResolver::system(),
        };
        Cluster::assemble(config, identity, limiter, transport).await
    }

    pub(crate) async fn assemble(
        config: ClusterConfig,
        identity: NodeIdentity,
        limiter: Arc<Limiter>,
        t: Transport,
    ) -> Result<Cluster, ClusterError> {
        config.validate().map_err(ClusterError::Config)?;
        let seeds = t
            .resolver
            .resolve_patiently(&config.seeds, SEED_PATIENCE)
            .await;
        let mut mc = match config.gossip_profile {
            GossipProfile::Lan => MembershipConfig::new(identity, seeds),
            GossipProfile::Fast => MembershipConfig::fast(identity, seeds),
        };
        if let Some(s) = &config.secret {
            mc = mc.with_secret(s.as_bytes().to_vec());
        }
        for s in &config.secret_accept {
            mc = mc.accepting(s.as_bytes().to_vec());
        }
        mc.insecure_open = config.insecure_open;
        let join_grace = config
            .join_timeout
            .unwrap_or(JOIN_ANNOUNCES * mc.announce_interval);
        let membership = Arc::new(match t.gossip {
            Gossip::Udp(socket) => Membership::start_on_own_thread(mc, socket)?,
            Gossip::InProcess(datagrams) => Membership::start_on(mc, datagrams)?,
        });
        let me = membership.identity().id;
        let stats = Arc::new(Stats::default());
        // Subscribe before reading the first view, so a change in between
        // is seen by the watcher rather than lost.
        let mut views = membership.subscribe();
        let (ring, fed) = {
            let view = views.borrow_and_update();
            (Ring::with_default_vnodes(&view.members), view.fed)
        };
        let routing = Arc::new(if config.seeds.is_empty() {
            Routing::new(me.clone(), ring)
        } else {
            Routing::joining_for(me.clone(), ring, join_grace, fed)
        });
        let (hints, hints_rx) = RulesHints::new();
        let hints = Arc::new(hints);
        let local = Arc::new(Local::new(limiter.clone()));
        let ctx = Ctx {
            link: t.link.clone(),
            me,
            limiter: limiter.clone(),
            hints: hints.clone(),
            stats: stats.clone(),
            late_window: crate::owner::peers::LATE_WINDOW,
        };
        let replicas = Arc::new(Replicas::new(&limiter));
        // Only the owner strategy changes counters that others copy; under
        // the others nothing is marked and the loop stays asleep.
        let replicator = Arc::new(Replicator::new(config.replicas > 1));
        let peers = Arc::new(Batchers::new(ctx, config.batch));
        let lessor = Arc::new(Lessor::new(
            config.hot_key_rate,
            local.clone(),
            replicator.clone(),
            stats.clone(),
        ));
        let breakers = Arc::new(Breakers::new(config.fallback_probe));
        let moves = Arc::new(Moves::new(routing.me()));
        let deny = Arc::new(DenyCache::new(config.deny_cache_keys));
        let strategy = strategy::build(Parts {
            config: config.clone(),
            local: local.clone(),
            routing: routing.clone(),
            peers: peers.clone(),
            link: t.link.clone(),
            stats: stats.clone(),
            replicas: replicas.clone(),
            replicator: replicator.clone(),
            lessor: lessor.clone(),
            breakers: breakers.clone(),
            moves: moves.clone(),
            boot: membership.identity().boot,
            deny: deny.clone(),
        });
        let on_rules = {
            let s = strategy.clone();
            Arc::new(move |set: &RuleSet| s.on_rules(set))
        };
        let rules = Arc::new(Rules::new(
            limiter.clone(),
            t.link.clone(),
            routing.clone(),
            stats.clone(),
            on_rules,
        ));
        let owner = OwnerService {
            local,
            routing: routing.clone(),
            peers: peers.clone(),
            hints,
            stats: stats.clone(),
            deadline: config.owner_deadline,
            replicas: replicas.clone(),
            replicator: replicator.clone(),
            lessor: lessor.clone(),
            breakers,
            moves,
            deny,
        };
        let handler = Arc::new(PeerHandler::new(
            owner,
            replicas,
            rules.clone(),
            strategy.clone(),
            limiter.clone(),
            membership.clone(),
            stats.clone(),
        ));
        let accepted_tokens = config
            .secrets()
            .filter_map(|s| PeerToken::new(s.as_bytes()))
            .collect();
        let regional = config.region.clone().map(|rc| {
            let r = Regional::new(rc, limiter.clone(), routing.clone(), t.region_link.clone());
            limiter.set_gate(Arc::new(RegionGate(r.clone())));
            r
        });
        let killed = Arc::new(AtomicBool::new(false));
        let copies = Arc::new(Copies::new(handler.clone(), killed.clone()));
        let inner = Arc::new(Inner {
            config,
            limiter,
            membership,
            routing,
            rules,
            strategy: strategy.clone(),
            handler,
            link: t.link,
            stats,
            replicator: replicator.clone(),
            lessor,
            regional: regional.clone(),
            accepted_tokens,
            resolver: t.resolver,
            tasks: Mutex::new(Vec::new()),
            stopped: AtomicBool::new(false),
            killed,
            copies,
        });
        let c = &inner.config;
        let mut tasks = vec![
            spawn(background::follow_view(
                inner.routing.clone(),
                inner.rules.clone(),
                strategy.clone(),
                views,
            )),
            spawn(background::maintain(
                strategy.clone(),
                inner.rules.clone(),
                c.rules_sync_interval,
            )),
            spawn(background::follow_hints(inner.rules.clone(), hints_rx)),
            spawn(stop_on_drop(peers)),
        ];
        if !c.seeds.is_empty() {
            tasks.push(spawn(background::reseed(
                inner.routing.clone(),
                inner.membership.clone(),
                inner.resolver.clone(),
                c.seeds.clone(),
                c.reseed_interval,
            )));
        }
        if replicator.is_on() {
            tasks.push(spawn(background::replicate(
                replicator,
                inner.limiter.clone(),
                inner.routing.clone(),
                inner.link.clone(),
                inner.stats.clone(),
                inner.membership.identity().boot,
            )));
        }
        if let Some(r) = regional {
            tasks.push(spawn(background::region_rounds(r)));
        }
        tasks.extend(strategy.spawn());
        *inner.tasks.lock() = tasks;
        tracing::info!(node = %inner.membership.identity(), strategy = inner.strategy.name(), "cluster member started");
        Ok(Cluster { inner })
    }

    /// This node's identity as gossiped (gossip port filled in).
    pub fn identity(&self) -> NodeIdentity {
        self.inner.membership.identity()
    }

    pub fn node_id(&self) -> &str {
        self.inner.routing.me()
    }

    pub fn gossip_addr(&self) -> SocketAddr {
        self.inner.membership.local_addr()
    }

    pub fn limiter(&self) -> &Arc<Limiter> {
        &self.inner.limiter
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.inner.config
    }

    /// The strategy this member decides by, chosen at start.
    pub fn strategy(&self) -> &Arc<dyn Strategy> {
        &self.inner.strategy
    }

    /// The ring this node routes by now.
    pub fn ring(&self) -> Arc<Ring> {
        self.inner.routing.ring()
    }

    /// Whether this node, given seeds, has not heard of its cluster yet
    /// (and its grace alone has not passed): it owns no key, and its
    /// checks wait for the join.
    pub fn joining(&self) -> bool {
        self.inner.routing.joining()
    }

    /// Whether this node was given seeds, none answered within its join
    /// timeout, and it runs as its cluster's only member.
    pub fn runs_alone(&self) -> bool {
        self.inner.routing.runs_alone()
    }

    /// Resolves once this node is past [joining](Cluster::joining): at
    /// once when it is, else on the join or when its grace alone ends.
    pub async fn until_joined(&self) {
        self.inner.routing.until_joined().await
    }

    /// The members this node asks about the keys it took from them on
    /// joining, until each says its handoff is done (or the wait ends).
    pub fn awaiting(&self) -> Vec<String> {
        self.inner.routing.arrivals().awaited()
    }

    /// The owner of a hash part on this node's ring.
    pub fn owner_of(&self, hash_part: &str) -> Option<NodeIdentity> {
        self.inner.routing.ring().owner(hash_part).cloned()
    }

    /// Every known member (down ones included, for a while) with its share
    /// of this node's ring.
    pub fn members_status(&self) -> Vec<MemberStatus> {
        let shares = self.inner.routing.ring().shares();
        let share = |id: &str| {
            shares
                .iter()
                .find(|(i, _)| i == id)
                .map_or(0.0, |(_, s)| *s)
        };
        self.inner
            .membership
            .members()
            .into_iter()
            .map(|m| MemberStatus {
                ring_share: if m.state.is_live() {
                    share(&m.identity.id)
                } else {
                    0.0
                },
                breaker: self.inner.strategy.breaker_of(&m.identity.id),
                id: m.identity.id,
                gossip: m.identity.gossip,
                grpc: m.identity.grpc,
                state: m.state,
            })
            .collect()
    }

    /// Traffic counters of the gossip socket (datagrams dropped for a bad
    /// tag among them).
    pub fn gossip_stats(&self) -> MembershipStats {
        self.inner.membership.stats()
    }

    /// The hottest keys this node owns, over the last whole second, at
    /// most `n`; and the rate from which a key is hot.
    pub fn hot_keys(&self, n: usize) -> (Vec<HotKey>, u64) {
        let hot = &self.inner.lessor.hot;
        (hot.top(n, self.inner.limiter.now()), hot.threshold())
    }

    /// Ops sent to other nodes since start, by rule: every rule in force
    /// (0 when none went out, so a rule's series exists from the start),
    /// and any rule since removed that did send some.
    pub fn forwarded_by_rule(&self) -> Vec<(Arc<str>, u64)> {
        let mut sent = self.inner.stats.forwarded_by_rule();
        for rule in self.inner.limiter.rules().rules() {
            if !sent.iter().any(|(name, _)| *name == rule.name) {
                sent.push((rule.name.clone(), 0));
            }
        }
        sent.sort();
        sent
    }

    pub fn stats(&self) -> ClusterStats {
        let mut s = self
            .inner
            .stats
            .snapshot(&self.inner.strategy.fallback_counts());
        s.replication_pending = self.inner.replicator.pending() as u64;
        s
    }

    pub fn fallback_status(&self) -> FallbackStatus {
        self.inner.strategy.fallback_status()
    }

    /// What peers call, whatever carries the calls.
    pub(crate) fn handler(&self) -> &Arc<PeerHandler> {
        &self.inner.handler
    }

    /// The `weir.v1.Peer` service to mount on this node's gRPC port, behind
    /// the cluster-secret check.
    pub fn peer_service(&self) -> PeerServiceServer {
        let auth = self.peer_auth();
        let service = PeerService::new(self.inner.handler.clone(), self.inner.killed.clone());
        let server = PeerServer::new(service)
            .max_decoding_message_size(MAX_PEER_MESSAGE)
            .max_encoding_message_size(MAX_PEER_MESSAGE);
        InterceptedService::new(server, auth)
    }

    /// Serves the direct connections (`net::direct`) that this
    /// node's gRPC listener finds among its connections, behind the same
    /// cluster-secret check as the peer service.
    pub fn direct_server(&self) -> DirectServer {
        let auth = self.peer_auth();
        DirectServer::new(
            self.inner.handler.clone(),
            self.inner.killed.clone(),
            auth,
            self.inner.stats.clone(),
            self.inner.copies.clone(),
        )
    }

    /// The `weir.v1.Regions` service to mount beside the peer service, when
    /// this node is in a region.
    pub fn regions_service(&self) -> Option<RegionsServiceServer> {
        let regional = self.inner.regional.clone()?;
        let auth = self.peer_auth();
        Some(InterceptedService::new(
            RegionsServer::new(RegionsService::new(regional)),
            auth,
        ))
    }

    /// The cluster-secret check every peer-facing service sits behind.
    fn peer_auth(&self) -> PeerAuth {
        PeerAuth::new(
            self.inner.accepted_tokens.clone(),
            self.inner.config.insecure_open,
            self.inner.stats.clone(),
        )
    }

    /// This node's part in global limits: its region, the regions known,
    /// homes it cannot reach, and its `keys` busiest global keys.
    pub fn region_status(&self, keys: usize) -> Option<RegionStatus> {
        self.inner.regional.as_ref().map(|r| r.status(keys))
    }

    /// Region protocol counters (reports sent, grants, failed calls).
    pub fn regional(&self) -> Option<&Arc<Regional>> {
        self.inner.regional.as_ref()
    }

    /// A `PUT /v1/limits/{tier}`: made by the tier's owner on the ring
    /// (here, or forwarded), `condition` judged there under its rules lock.
    pub async fn write_tier(
        &self,
        tier: Option<String>,
        body: String,
        condition: Condition,
    ) -> Result<Arc<RuleSet>, TierWriteError> {
        tier_writes::write(self.inner.rules.clone(), tier, body, condition).await
    }

    /// Applies a local rule write and pushes the result to every member.
    pub fn write_rules(
        &self,
        write: impl FnOnce(&RuleSet) -> Result<RuleSet, RulesError>,
    ) -> Result<Arc<RuleSet>, RulesError> {
        self.inner.rules.write(write)
    }

    /// Leaves gracefully: hands every counter to its owner on the ring
    /// without this node, announces the departure, and waits (up to
    /// `leave_timeout`) until no peer lists this node any more. Checks that
    /// arrive meanwhile are forwarded to the new owners, so none is lost.
    pub async fn leave(&self) {
        let inner = &self.inner;
        if inner.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        // The whole leave is bounded by `leave_timeout`, so a shutdown
        // (and the grace period deploy files allow for it) stays bounded
        // even when peers are slow.
        let give_up = tokio::time::Instant::now() + inner.config.leave_timeout;
        // Replication is stopped once its round in flight is settled, not
        // aborted with the other tasks: a copy call cut off mid-flight can
        // still land at its holder after the handoff, and be promoted
        // there on top of the handed count.
        let _ = tokio::time::timeout_at(give_up, inner.replicator.stop()).await;
        inner.abort_tasks();
        let rest = inner.routing.peers();
        if rest.is_empty() {
            let _ = inner.membership.leave_gracefully().await;
            tracing::info!("left; no peer to hand anything to");
            return;
        }
        inner.strategy.leave(give_up).await;
        if let Err(e) = inner.membership.leave_gracefully().await {
            tracing::warn!(error = %e, "leave announcement failed");
        }
        let waited =
            background::until_forgotten(&*inner.link, inner.routing.me(), &rest, give_up).await;
        inner.strategy.settle_leave(give_up).await;
        tracing::info!(?waited, "left the cluster");
    }

    /// Stops everything at once with no goodbye, as a crash would: peers
    /// find out through failure detection. For tests.
    pub fn kill(&self) {
        self.inner.killed.store(true, Ordering::SeqCst);
        self.inner.stop();
        self.inner.membership.abort();
    }

    /// Where the spans of the ops this node decides for its peers go
    /// (the gateway's come with each check, [`crate::trace::within`]).
    pub fn trace_with(&self, tracer: crate::trace::Tracer) {
        self.inner.handler.trace_with(tracer);
    }

    /// Where this node's summaries take their per-second activity from.
    pub fn report_activity(&self, source: Arc<dyn ActivitySource>) {
        self.inner.handler.set_activity(source);
    }

    /// This node's own summary, as a peer asking `Peer/Summary` gets it.
    pub fn summary(&self, seconds: u32) -> NodeSummary {
        self.inner.handler.summary(SummaryRequest { seconds })
    }

    /// Every member as this node sees it, each live one with its own
    /// summary, asked all at once with `deadline` each; a member that does
    /// not answer in time is [`summary::Reply::NoAnswer`], not left out.
    pub async fn summaries(&self, seconds: u32, deadline: Duration) -> Vec<MemberSummary> {
        let identities = self.inner.membership.members();
        let members = self
            .members_status()
            .into_iter()
            .filter_map(|m| {
                let identity = identities.iter().find(|i| i.identity.id == m.id)?;
                Some((m, identity.identity.clone()))
            })
            .collect();
        let local = self.summary(seconds);
        summary::ask_all(&*self.inner.link, members, local, seconds, deadline).await
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.inner.stop();
    }
}

impl Inner {
    fn abort_tasks(&self) {
        for t in self.tasks.lock().drain(..) {
            t.abort();
        }
    }

    fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.abort_tasks();
    }
}

fn spawn(task: impl std::future::Future<Output = ()> + Send + 'static) -> AbortHandle {
    tokio::spawn(task).abort_handle()
}

/// Holds the batchers for as long as the member runs; when the tasks are
/// aborted, dropping them stops every per-owner queue.
async fn stop_on_drop(peers: Arc<Batchers>) {
    struct StopOnDrop(Arc<Batchers>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.clear();
        }
    }
    let _guard = StopOnDrop(peers);
    std::future::pending::<()>().await;
}
