//! An in-memory network for tests and simulations: whole cluster members whose gossip and peer calls are delivered in process, with injected latency, loss, partitions and crashes.
//!
//! Each member gets a host address of its own (`10.0.0.N`, never bound),
//! so a partition or a crash cuts gossip and peer calls alike. Delivery
//! runs on tokio timers: under a paused clock (`#[tokio::test(start_paused
//! = true)]`) a test of seconds of cluster time runs in milliseconds, and
//! the same seed gives the same interleaving far more often than sockets do.

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use rand::Rng;
use tokio::sync::mpsc;
use weir_core::{Clock, Limiter, Nanos};
use weir_proto::weir::v1::{
    DecideRequest, DecideResponse, HandoffRequest, HandoffResponse, MembersResponse, NodeSummary,
    PullRulesRequest, PushRulesResponse, ReplicateRequest, ReplicateResponse,
    RuleSet as WireRuleSet, SummaryRequest, SyncRequest, SyncResponse, WriteTierRequest,
    WriteTierResponse,
};

use crate::cluster::{Cluster, ClusterError, Gossip, Transport};
use crate::config::ClusterConfig;
use crate::handler::PeerHandler;
use crate::link::{Link, PeerFailure};
use crate::net::grpc::MAX_PEER_MESSAGE;
use crate::topology::membership::{Datagrams, NodeIdentity};
use crate::topology::seeds::SeedResolver;

mod tap;
pub use tap::{Fate, NetEvent, Tap};

const GOSSIP_PORT: u16 = 7946;
const GRPC_PORT: u16 = 8081;

type Datagram = (Vec<u8>, SocketAddr);

#[derive(Default)]
struct State {
    sockets: HashMap<SocketAddr, mpsc::UnboundedSender<Datagram>>,
    handlers: HashMap<IpAddr, Weak<PeerHandler>>,
    /// Host pairs that cannot reach each other, both ways.
    cut: HashSet<(IpAddr, IpAddr)>,
    /// Hosts that are down: calls to them are refused, datagrams lost.
    crashed: HashSet<IpAddr>,
    /// Extra one-way delay on everything to or from a host.
    slow: HashMap<IpAddr, Duration>,
    /// What becomes of the handoffs sent to a host.
    handoffs: HashMap<IpAddr, Handoffs>,
    /// Extra time a host's answers to Decide calls take on their way back.
    slow_answers: HashMap<IpAddr, Duration>,
    /// Hosts that hear no gossip, while their peer calls pass.
    deaf: HashSet<IpAddr>,
    /// The most counters one Replicate call was given, refused or not.
    largest_replicate: usize,
    /// The largest peer request delivered; larger ones are refused.
    ceiling: usize,
    latency: Duration,
    loss: f64,
    hosts: u32,
    /// Seed names that are not `ip:port`, as a test's DNS would answer.
    names: Option<SeedResolver>,
    /// Up to this much more delay on each delivery, drawn per message:
    /// messages overtake each other.
    jitter: Duration,
    /// The fraction of gossip datagrams delivered twice.
    duplication: f64,
    /// Hosts stopped (SIGSTOP): what they send and what is sent to them
    /// waits until they resume.
    paused: HashSet<IpAddr>,
    tap: Option<Tap>,
}

impl State {
    fn blocked(&self, a: IpAddr, b: IpAddr) -> bool {
        self.cut.contains(&(a, b)) || self.crashed.contains(&a) || self.crashed.contains(&b)
    }

    /// One-way delay from `a` to `b`, with its draw of jitter.
    fn delay(&self, a: IpAddr, b: IpAddr) -> Duration {
        let extra = |h| self.slow.get(&h).copied().unwrap_or_default();
        let jitter = if self.jitter.is_zero() {
            Duration::ZERO
        } else {
            let most = u64::try_from(self.jitter.as_nanos()).unwrap_or(u64::MAX);
            Duration::from_nanos(crate::determinism::with_rng(|r| r.random_range(0..=most)))
        };
        self.latency + extra(a) + extra(b) + jitter
    }

    fn note(&self, event: NetEvent<'_>) {
        if let Some(tap) = &self.tap {
            tap(&event);
        }
    }
}

/// What becomes of the handoffs sent to a host.
#[derive(Clone, Copy)]
enum Handoffs {
    /// Taken this much later.
    Held(Duration),
    Refused,
}

/// The network; clone it freely, every clone is the same network.
#[derive(Clone)]
pub struct MemoryNet {
    state: Arc<Mutex<State>>,
    clock: Arc<VirtualClock>,
    /// Wakes the deliveries waiting on a paused host. A Notify, not a
    /// watch channel: a watch wakes its waiters in an order drawn from the
    /// runtime's generator, which no seed reaches.
    resumed: Arc<tokio::sync::Notify>,
}

impl Default for MemoryNet {
    fn default() -> Self {
        MemoryNet::new()
    }
}

impl MemoryNet {
    /// A network with a one-way latency of 100 us, about a LAN hop on loopback.
    pub fn new() -> Self {
        let net = MemoryNet {
            state: Arc::default(),
            clock: Arc::new(VirtualClock::new()),
            resumed: Arc::default(),
        };
        {
            let mut s = net.state.lock();
            s.latency = Duration::from_micros(100);
            s.ceiling = MAX_PEER_MESSAGE;
        }
        net
    }

    /// One clock for every member's limiter: the network's virtual time.
    pub fn clock(&self) -> Arc<dyn Clock> {
        self.clock.clone()
    }

    /// Starts a member named `id` on a host of its own.
    pub async fn start(
        &self,
        id: &str,
        config: ClusterConfig,
        limiter: Arc<Limiter>,
    ) -> Result<Cluster, ClusterError> {
        let host = self.new_host();
        self.start_on(host, id, config, limiter).await
    }

    /// Starts a member named `id` on `host`, a crashed member's, as a
    /// process restarted with its address: a new boot, the same id.
    pub async fn restart(
        &self,
        host: IpAddr,
        id: &str,
        config: ClusterConfig,
        limiter: Arc<Limiter>,
    ) -> Result<Cluster, ClusterError> {
        self.state.lock().crashed.remove(&host);
        self.start_on(host, id, config, limiter).await
    }

    async fn start_on(
        &self,
        host: IpAddr,
        id: &str,
        config: ClusterConfig,
        limiter: Arc<Limiter>,
    ) -> Result<Cluster, ClusterError> {
        let datagrams = self.gossip_socket_on(host);
        let gossip = datagrams.local_addr();
        let identity = NodeIdentity::new(id, gossip, SocketAddr::new(host, GRPC_PORT));
        let transport = Transport {
            gossip: Gossip::InProcess(datagrams),
            link: Arc::new(MemoryLink {
                net: self.clone(),
                from: host,
            }),
            // Regions are linked over gRPC only (the protocol's own tests
            // run on `regions::tests`' network).
            region_link: Arc::new(crate::net::regions::TonicRegionLink::new(None)),
            resolver: self.seed_resolver(),
        };
        let cluster = Cluster::assemble(config, identity, limiter, transport).await?;
        let handler = Arc::downgrade(cluster.handler());
        self.state.lock().handlers.insert(host, handler);
        Ok(cluster)
    }

    /// A gossip socket on a new host of its own, for a membership without
    /// the rest of a member (peer calls to the host are refused).
    pub fn gossip_socket(&self) -> Arc<dyn Datagrams> {
        self.gossip_socket_on(self.new_host())
    }

    fn gossip_socket_on(&self, host: IpAddr) -> Arc<dyn Datagrams> {
        let gossip = SocketAddr::new(host, GOSSIP_PORT);
        let (tx, rx) = mpsc::unbounded_channel();
        self.state.lock().sockets.insert(gossip, tx);
        Arc::new(MemorySocket {
            net: self.clone(),
            local: gossip,
            rx: tokio::sync::Mutex::new(rx),
        })
    }

    fn new_host(&self) -> IpAddr {
        let mut s = self.state.lock();
        s.hosts += 1;
        IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + s.hosts))
    }

    /// Peer calls from a new host of their own, with no member on it: for
    /// a test that plays one side of the protocol by hand.
    pub fn link(&self) -> (IpAddr, Arc<dyn Link>) {
        let from = self.new_host();
        let link = MemoryLink {
            net: self.clone(),
            from,
        };
        (from, Arc::new(link))
    }

    /// `ip:port` as itself; any other name by the test's `names`.
    fn seed_resolver(&self) -> SeedResolver {
        let state = self.state.clone();
        SeedResolver::new(move |name| match name.parse::<SocketAddr>() {
            Ok(a) => Ok(vec![a]),
            Err(e) => {
                // Cloned out first: the test's resolver runs with the
                // network unlocked, so it may use the network itself.
                let names = state.lock().names.clone();
                match names {
                    Some(names) => names.resolve(name),
                    None => Err(io::Error::other(e)),
                }
            }
        })
    }

    /// Seed names that are not `ip:port` are resolved by `names`.
    pub fn resolve_names(&self, names: SeedResolver) {
        self.state.lock().names = Some(names);
    }

    /// Nothing gets between the hosts of `a` and those of `b`, either way.
    pub fn partition(&self, a: &[IpAddr], b: &[IpAddr]) {
        let mut s = self.state.lock();
        for &x in a {
            for &y in b {
                s.cut.insert((x, y));
                s.cut.insert((y, x));
            }
        }
    }

    /// Every partition heals.
    pub fn heal(&self) {
        self.state.lock().cut.clear();
    }

    /// `host` stops answering: calls to it are refused, as a dead process's
    /// port refuses connections, and its datagrams are lost.
    pub fn crash(&self, host: IpAddr) {
        self.state.lock().crashed.insert(host);
    }

    /// Everything to or from `host` takes `extra` longer, each way.
    pub fn slow_down(&self, host: IpAddr, extra: Duration) {
        self.state.lock().slow.insert(host, extra);
    }

    /// Every handoff to `host` takes `extra` longer to reach it (a large
    /// one, say), while other calls pass as before.
    pub fn slow_handoffs_to(&self, host: IpAddr, extra: Duration) {
        self.state
            .lock()
            .handoffs
            .insert(host, Handoffs::Held(extra));
    }

    /// `host` refuses every handoff, while it answers other calls.
    pub fn refuse_handoffs_to(&self, host: IpAddr) {
        self.state.lock().handoffs.insert(host, Handoffs::Refused);
    }

    /// `host` hears no gossip (its membership learns nothing new) while
    /// `deaf`, and answers every call as before.
    pub fn deafen(&self, host: IpAddr, deaf: bool) {
        let mut s = self.state.lock();
        if deaf {
            s.deaf.insert(host);
        } else {
            s.deaf.remove(&host);
        }
    }

    /// `host` decides each op at once, but its answers to Decide calls take
    /// `extra` longer to come back (a loaded host's replies), while every
    /// other call to it passes as before.
    pub fn slow_answers_from(&self, host: IpAddr, extra: Duration) {
        self.state.lock().slow_answers.insert(host, extra);
    }

    /// Peer requests over `bytes` are refused from now on, as the real
    /// transports refuse those over [`MAX_PEER_MESSAGE`] (the default):
    /// a test's few thousand counters stand for a node's million.
    pub fn set_message_ceiling(&self, bytes: usize) {
        self.state.lock().ceiling = bytes;
    }

    /// The most counters one Replicate call was given so far, refused
    /// over the ceiling or not.
    pub fn largest_replicate_call(&self) -> usize {
        self.state.lock().largest_replicate
    }

    /// The one-way latency of every delivery.
    pub fn set_latency(&self, latency: Duration) {
        self.state.lock().latency = latency;
    }

    /// The fraction of gossip datagrams lost, 0 to 1.
    pub fn set_loss(&self, loss: f64) {
        self.state.lock().loss = loss.clamp(0.0, 1.0);
    }

    /// Each delivery takes up to `jitter` longer, drawn per message, so
    /// messages between two hosts arrive out of order.
    pub fn set_jitter(&self, jitter: Duration) {
        self.state.lock().jitter = jitter;
    }

    /// The fraction of gossip datagrams delivered twice, 0 to 1.
    pub fn set_duplication(&self, duplication: f64) {
        self.state.lock().duplication = duplication.clamp(0.0, 1.0);
    }

    /// Nothing from `from` reaches `to`, while `to` still reaches `from`.
    pub fn cut_one_way(&self, from: IpAddr, to: IpAddr) {
        self.state.lock().cut.insert((from, to));
    }

    /// `host` stops as a SIGSTOPped process does: what it sends and what
    /// is sent to it wait until [`MemoryNet::resume`].
    pub fn pause(&self, host: IpAddr) {
        self.state.lock().paused.insert(host);
    }

    /// `host` runs again: what waited on it goes on its way.
    pub fn resume(&self, host: IpAddr) {
        self.state.lock().paused.remove(&host);
        self.resumed.notify_waiters();
    }

    /// Every message, and what became of it, goes to `tap` as well.
    pub fn tap(&self, tap: Tap) {
        self.state.lock().tap = Some(tap);
    }

    /// Returns once neither `a` nor `b` is paused.
    async fn until_running(&self, a: IpAddr, b: IpAddr) {
        loop {
            // Registered before the look, so a resume between the two wakes it.
            let resumed = self.resumed.notified();
            let mut resumed = std::pin::pin!(resumed);
            resumed.as_mut().enable();
            {
                let s = self.state.lock();
                if !s.paused.contains(&a) && !s.paused.contains(&b) {
                    return;
                }
            }
            resumed.await;
        }
    }

    /// Shows the tap a call's request and where it goes.
    fn note_call(
        &self,
        from: IpAddr,
        to: IpAddr,
        what: &'static str,
        req: &impl prost::Message,
        route: &Route,
    ) {
        let s = self.state.lock();
        if s.tap.is_some() {
            let fate = match route {
                Route::To(..) | Route::Back(_) => Fate::Sent,
                Route::Lost => Fate::Lost,
                Route::Refused => Fate::Refused,
            };
            let bytes = req.encode_to_vec();
            s.note(NetEvent {
                from,
                to,
                what,
                bytes: &bytes,
                fate,
            });
        }
    }

    /// Whether the answer from `host`, served by `served_by`, gets back to
    /// `to`: the handler is `host`'s no longer (crashed, restarted), the
    /// way back is cut, or it travels for the one-way delay.
    fn answer_route<T: prost::Message>(
        &self,
        host: IpAddr,
        to: IpAddr,
        served_by: &Weak<PeerHandler>,
        what: &'static str,
        answer: &Result<T, PeerFailure>,
    ) -> Route {
        let s = self.state.lock();
        let same = s
            .handlers
            .get(&host)
            .is_some_and(|h| Weak::ptr_eq(h, served_by));
        let (route, fate) = if s.crashed.contains(&host) || !same {
            (Route::Refused, Fate::Refused)
        } else if s.blocked(host, to) {
            (Route::Lost, Fate::Lost)
        } else {
            (Route::Back(s.delay(host, to)), Fate::Sent)
        };
        if s.tap.is_some() {
            let bytes = match answer {
                Ok(a) => a.encode_to_vec(),
                Err(e) => e.to_string().into_bytes(),
            };
            let what = match what {
                "decide" => "decide answer",
                "handoff" => "handoff answer",
                "replicate" => "replicate answer",
                _ => "answer",
            };
            s.note(NetEvent {
                from: host,
                to,
                what,
                bytes: &bytes,
                fate,
            });
        }
        route
    }

    /// Where a call from `from` to `to` goes: the handler and the one-way
    /// delay, or why it cannot.
    fn route(&self, from: IpAddr, to: &NodeIdentity) -> Route {
        let s = self.state.lock();
        let host = to.grpc.ip();
        if s.crashed.contains(&host) {
            return Route::Refused;
        }
        if s.blocked(from, host) {
            return Route::Lost;
        }
        match s.handlers.get(&host).and_then(Weak::upgrade) {
            Some(h) => Route::To(h, s.delay(from, host)),
            None => Route::Refused,
        }
    }
}

/// Unix time that moves with tokio's clock: under a paused runtime it
/// advances only as timers do, so windows and buckets follow the cluster's
/// virtual time. Starts at a fixed instant, so runs repeat.
#[derive(Debug, Clone)]
pub struct VirtualClock {
    origin: tokio::time::Instant,
    at_origin: Nanos,
}

impl VirtualClock {
    /// Where every virtual clock starts: 2026-01-01T00:00:00Z.
    pub const ORIGIN: Nanos = 1_767_225_600 * weir_core::NANOS_PER_SEC;

    /// [`VirtualClock::ORIGIN`] at the moment of the call.
    pub fn new() -> Self {
        VirtualClock {
            origin: tokio::time::Instant::now(),
            at_origin: Self::ORIGIN,
        }
    }
}

impl Default for VirtualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Nanos {
        let elapsed = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.at_origin.saturating_add(elapsed)
    }
}

enum Route {
    To(Arc<PeerHandler>, Duration),
    /// An answer on its way back, for this long.
    Back(Duration),
    /// Nothing answers: a partition is a black hole.
    Lost,
    /// The connection is refused at once.
    Refused,
}

struct MemorySocket {
    net: MemoryNet,
    local: SocketAddr,
    rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<Datagram>>,
}

impl Datagrams for MemorySocket {
    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn send_to<'a>(
        &'a self,
        payload: &'a [u8],
        to: SocketAddr,
    ) -> BoxFuture<'a, io::Result<usize>> {
        let from = self.local.ip();
        let (target, delays) = {
            let s = self.net.state.lock();
            let draw = |p: f64| p > 0.0 && crate::determinism::with_rng(|r| r.random_bool(p));
            let lost = s.blocked(from, to.ip()) || s.deaf.contains(&to.ip()) || draw(s.loss);
            let target = if lost {
                None
            } else {
                s.sockets.get(&to).cloned()
            };
            let mut delays = vec![s.delay(from, to.ip())];
            if draw(s.duplication) {
                delays.push(s.delay(from, to.ip()));
            }
            let fate = match (&target, delays.len()) {
                (None, _) => Fate::Lost,
                (Some(_), 1) => Fate::Sent,
                (Some(_), _) => Fate::Duplicated,
            };
            s.note(NetEvent {
                from,
                to: to.ip(),
                what: "gossip",
                bytes: payload,
                fate,
            });
            (target, delays)
        };
        if let Some(tx) = target {
            for delay in delays {
                let (tx, net) = (tx.clone(), self.net.clone());
                let datagram = (payload.to_vec(), self.local);
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    net.until_running(datagram.1.ip(), to.ip()).await;
                    let _ = tx.send(datagram);
                });
            }
        }
        let n = payload.len();
        Box::pin(async move { Ok(n) })
    }

    fn recv_from<'a>(
        &'a self,
        buf: &'a mut [u8],
    ) -> BoxFuture<'a, io::Result<(usize, SocketAddr)>> {
        Box::pin(async move {
            let mut rx = self.rx.lock().await;
            let (data, from) = rx
                .recv()
                .await
                .ok_or_else(|| io::Error::other("network gone"))?;
            let n = data.len().min(buf.len());
            buf[..n].copy_from_slice(&data[..n]);
            Ok((n, from))
        })
    }
}

/// Refuses a request the real transports would: one over the peer
/// message ceiling.
fn within_ceiling(req: &impl prost::Message, ceiling: usize) -> Result<(), PeerFailure> {
    let len = req.encoded_len();
    if len > ceiling {
        return Err(PeerFailure::Refused(format!(
            "a message of {len} bytes is over the {ceiling}-byte limit"
        )));
    }
    Ok(())
}

struct MemoryLink {
    net: MemoryNet,
    from: IpAddr,
}

impl MemoryLink {
    /// One call: the request travels, the handler answers, the answer
    /// travels back, all within `deadline`. The handler runs on its own
    /// task, as a server's does: a caller that stops waiting does not stop
    /// the decision it asked for.
    ///
    /// The answer leaves the host as it is when the handler is done: one
    /// that crashed or restarted meanwhile resets the connection, one cut
    /// off from the caller since (or paused) keeps it from arriving, so a
    /// check can be decided at its owner and never heard of.
    fn call<R, T, F, Fut>(
        &self,
        to: &NodeIdentity,
        deadline: Duration,
        what: &'static str,
        req: R,
        f: F,
    ) -> BoxFuture<'static, Result<T, PeerFailure>>
    where
        R: prost::Message + Send + 'static,
        T: prost::Message + Send + 'static,
        F: FnOnce(Arc<PeerHandler>, R) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, PeerFailure>> + Send + 'static,
    {
        let (from, host) = (self.from, to.grpc.ip());
        let route = self.net.route(from, to);
        self.net.note_call(from, host, what, &req, &route);
        let net = self.net.clone();
        Box::pin(async move {
            let (handler, delay) = match route {
                Route::To(h, d) => (h, d),
                Route::Back(_) | Route::Refused => {
                    return Err(PeerFailure::Unreachable("connection refused".into()))
                }
                Route::Lost => {
                    tokio::time::sleep(deadline).await;
                    return Err(PeerFailure::Timeout(deadline));
                }
            };
            let served_by = Arc::downgrade(&handler);
            let on_server = net.clone();
            let served = tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                on_server.until_running(from, host).await;
                f(handler, req).await
            });
            let round_trip = async move {
                let answer = served
                    .await
                    .unwrap_or_else(|e| Err(PeerFailure::Unreachable(e.to_string())));
                net.until_running(host, from).await;
                match net.answer_route(host, from, &served_by, what, &answer) {
                    Route::Back(back) | Route::To(_, back) => tokio::time::sleep(back).await,
                    Route::Refused => {
                        return Err(PeerFailure::Unreachable("connection reset".into()))
                    }
                    Route::Lost => std::future::pending().await,
                }
                answer
            };
            tokio::time::timeout(deadline, round_trip)
                .await
                .unwrap_or(Err(PeerFailure::Timeout(deadline)))
        })
    }
}

impl Link for MemoryLink {
    fn decide(
        &self,
        to: &NodeIdentity,
        req: DecideRequest,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<DecideResponse, PeerFailure>> {
        let extra = self
            .net
            .state
            .lock()
            .slow_answers
            .get(&to.grpc.ip())
            .copied();
        self.call(to, deadline, "decide", req, move |h, req| async move {
            let answer = h.decide(req).await;
            if let Some(extra) = extra {
                tokio::time::sleep(extra).await;
            }
            Ok(answer)
        })
    }

    fn handoff(
        &self,
        to: &NodeIdentity,
        req: HandoffRequest,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<HandoffResponse, PeerFailure>> {
        let ceiling = self.net.state.lock().ceiling;
        if let Err(too_large) = within_ceiling(&req, ceiling) {
            return Box::pin(async move { Err(too_large) });
        }
        let fault = self.net.state.lock().handoffs.get(&to.grpc.ip()).copied();
        self.call(to, deadline, "handoff", req, move |h, req| async move {
            match fault {
                Some(Handoffs::Held(extra)) => tokio::time::sleep(extra).await,
                Some(Handoffs::Refused) => {
                    return Err(PeerFailure::Refused("handoffs refused".into()))
                }
                None => {}
            }
            h.handoff(req).await.map_err(|_| PeerFailure::Leaving)
        })
    }

    fn push_rules(
        &self,
        to: &NodeIdentity,
        set: WireRuleSet,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<PushRulesResponse, PeerFailure>> {
        self.call(to, deadline, "push_rules", set, |h, set| async move {
            h.push_rules(set)
                .await
                .map_err(|e| PeerFailure::Refused(e.to_string()))
        })
    }

    fn pull_rules(
        &self,
        to: &NodeIdentity,
        have: PullRulesRequest,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<WireRuleSet, PeerFailure>> {
        self.call(to, deadline, "pull_rules", have, |h, have| async move {
            Ok(h.pull_rules(have).await)
        })
    }

    fn write_tier(
        &self,
        to: &NodeIdentity,
        req: WriteTierRequest,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<WriteTierResponse, PeerFailure>> {
        self.call(to, deadline, "write_tier", req, |h, req| async move {
            Ok(h.write_tier(req).await)
        })
    }

    fn sync_counts(
        &self,
        to: &NodeIdentity,
        req: SyncRequest,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<SyncResponse, PeerFailure>> {
        self.call(to, deadline, "sync_counts", req, |h, req| async move {
            h.sync_counts(req)
                .map_err(|e| PeerFailure::Refused(e.to_string()))
        })
    }

    fn members(
        &self,
        to: &NodeIdentity,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<MembersResponse, PeerFailure>> {
        self.call(to, deadline, "members", (), |h, ()| async move {
            Ok(h.members())
        })
    }

    fn replicate(
        &self,
        to: &NodeIdentity,
        req: ReplicateRequest,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<ReplicateResponse, PeerFailure>> {
        let ceiling = {
            let mut s = self.net.state.lock();
            s.largest_replicate = s.largest_replicate.max(req.states.len());
            s.ceiling
        };
        if let Err(too_large) = within_ceiling(&req, ceiling) {
            return Box::pin(async move { Err(too_large) });
        }
        self.call(to, deadline, "replicate", req, |h, req| async move {
            Ok(h.replicate(req))
        })
    }

    fn retain(&self, _keep: &dyn Fn(&str) -> bool) {}

    fn summary(
        &self,
        to: &NodeIdentity,
        req: SummaryRequest,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<NodeSummary, PeerFailure>> {
        self.call(to, deadline, "summary", req, move |h, req| async move {
            Ok(h.summary(req))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_name_is_resolved_with_the_network_unlocked() {
        let net = MemoryNet::new();
        let inner = net.clone();
        // A resolver that uses the network, as a test that partitions
        // while names resolve would: under the network's lock it would
        // wait on itself for ever.
        net.resolve_names(SeedResolver::new(move |_| {
            inner.heal();
            Ok(vec![SocketAddr::from(([10, 0, 0, 9], GOSSIP_PORT))])
        }));
        let resolver = net.seed_resolver();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(resolver.resolve("peers.weir.test:7946"));
        });
        let got = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("resolved within the deadline, not stuck on the network's lock");
        assert_eq!(
            got.unwrap(),
            [SocketAddr::from(([10, 0, 0, 9], GOSSIP_PORT))]
        );
    }
}
