//! SWIM membership (foca over UDP): who is in the cluster, watched so the ring can follow.

mod config;
mod datagrams;
mod driver_thread;
mod identity;
mod replay_window;
mod runtime;
mod seal;

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{mpsc, oneshot, watch};

pub use config::MembershipConfig;
pub use datagrams::{Datagrams, UdpDatagrams};
pub use driver_thread::GOSSIP_THREAD;
pub use identity::NodeIdentity;
pub use seal::OVERHEAD as SEAL_OVERHEAD;

use driver_thread::Running;
use runtime::Driver;
use seal::Keyring;

/// How a member is seen from this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemberState {
    Alive,
    /// Missed a probe; still counted as live (SWIM gives it time to refute).
    Suspect,
    /// Declared down, or left; kept for a while so operators can see it.
    Down,
}

impl MemberState {
    /// Lower-case name as `/v1/cluster` shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            MemberState::Alive => "alive",
            MemberState::Suspect => "suspect",
            MemberState::Down => "down",
        }
    }

    /// Alive and Suspect members own ring space; Down ones do not.
    pub fn is_live(self) -> bool {
        self != MemberState::Down
    }
}

impl From<foca::State> for MemberState {
    fn from(s: foca::State) -> Self {
        match s {
            foca::State::Alive => MemberState::Alive,
            foca::State::Suspect => MemberState::Suspect,
            foca::State::Down => MemberState::Down,
        }
    }
}

/// One entry of [`Membership::members`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub identity: NodeIdentity,
    pub state: MemberState,
}

/// The live members (Alive or Suspect, self included), sorted, with an epoch
/// that grows by one every time the set changes. The epoch is local to this
/// node; two nodes agree on ownership because they agree on `members`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberView {
    pub epoch: u64,
    pub members: Vec<NodeIdentity>,
    /// Ids of the live members that missed a probe: still on the ring, but
    /// evidence that they may be gone (a gateway stops waiting on them).
    pub suspects: Vec<String>,
    /// Whether a member sent this node the list of its members (its answer
    /// to an announce): until then the view holds only the members heard
    /// of one by one, maybe a part of the cluster.
    pub fed: bool,
}

/// Traffic counters of the gossip socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MembershipStats {
    pub packets_in: u64,
    pub packets_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Datagrams dropped because no accepted secret opened them: not
    /// sealed, sealed under another secret, or altered (every datagram, on
    /// a node with no secret that was not opened to anyone).
    pub bad_mac_dropped: u64,
    /// Authentic (or unauthenticated-mode) datagrams foca refused to parse.
    pub invalid_dropped: u64,
    pub send_errors: u64,
    /// Opened datagrams stamped outside the freshness window (a replay
    /// of an old capture, or a peer whose clock is far off).
    pub stale_dropped: u64,
    /// Opened, fresh datagrams whose sender's counter was already taken (a
    /// replay) or had fallen out of the replay window.
    pub replayed_dropped: u64,
    /// Member updates still to be sent on (each goes out a few times): 0
    /// once the node has told what it knows as often as it will.
    pub updates_backlog: u64,
}

/// Who may speak gossip to this node.
pub(crate) enum Gate<A> {
    /// Holders of an accepted cluster secret: sealed, fresh, first-seen datagrams.
    Secret(A),
    /// Anyone: the operator asked for an open cluster.
    Open,
    /// No one: no secret and not opened, so this node stays alone.
    Closed,
}

#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    #[error("cannot bind gossip socket {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("invalid membership config: {0}")]
    Config(&'static str),
    #[error("membership task is not running")]
    Stopped,
    /// The thread (or its runtime) the driver runs on could not be
    /// started; nothing was started.
    #[error("cannot start the gossip thread: {source}")]
    Thread { source: std::io::Error },
}

/// State the task publishes and the handle reads.
struct Shared {
    identity: Mutex<NodeIdentity>,
    members: Mutex<Vec<Member>>,
    view: watch::Sender<MemberView>,
    stats: Counters,
}

#[derive(Default)]
struct Counters {
    packets_in: AtomicU64,
    packets_out: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    bad_mac_dropped: AtomicU64,
    invalid_dropped: AtomicU64,
    send_errors: AtomicU64,
    stale_dropped: AtomicU64,
    replayed_dropped: AtomicU64,
    /// A gauge, set as the member list is published.
    updates_backlog: AtomicU64,
}

impl Counters {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// A poisoned lock only means a panic elsewhere mid-update; the data is a
/// plain snapshot, still fine to read.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

enum Command {
    Leave(Option<oneshot::Sender<()>>),
    /// More gossip addresses to announce to while alone.
    AddSeeds(Vec<SocketAddr>),
}

/// Handle to a running membership task. Dropping it stops the task without
/// a goodbye (peers detect that as a failure); use
/// [`Membership::leave_gracefully`] or [`Membership::leave`] to announce the
/// departure.
pub struct Membership {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    commands: mpsc::UnboundedSender<Command>,
    driver: Option<Running>,
}

/// Builds the driver once its transport is there (on a thread of its own,
/// the socket is registered with that thread's runtime first).
type MakeDriver = Box<dyn FnOnce(Arc<dyn Datagrams>) -> Driver + Send>;

impl Membership {
    /// Binds a UDP gossip socket on `bind` and starts the membership driver
    /// on a thread and runtime of its own ([`Membership::start_on_own_thread`]).
    pub async fn start(
        config: MembershipConfig,
        bind: SocketAddr,
    ) -> Result<Membership, MembershipError> {
        let socket = std::net::UdpSocket::bind(bind)
            .map_err(|source| MembershipError::Bind { addr: bind, source })?;
        Membership::start_on_own_thread(config, socket)
    }

    /// Starts the membership driver over a bound UDP socket, on an OS
    /// thread with a current-thread tokio runtime of its own: a node busy
    /// with checks or rule work never delays its probes, their answers or
    /// its timers (`driver_thread`).
    pub fn start_on_own_thread(
        config: MembershipConfig,
        socket: std::net::UdpSocket,
    ) -> Result<Membership, MembershipError> {
        let local_addr = socket
            .local_addr()
            .map_err(|source| MembershipError::Thread { source })?;
        Membership::launch(config, local_addr, |make| {
            Running::on_own_thread(socket, make)
                .map_err(|source| MembershipError::Thread { source })
        })
    }

    /// Starts the membership task over any datagram transport (UDP, or an
    /// in-memory network in tests and simulations) as a task on the
    /// current tokio runtime: the simulator steps every member on its one
    /// thread, so the driver must run there too.
    pub fn start_on(
        config: MembershipConfig,
        socket: Arc<dyn Datagrams>,
    ) -> Result<Membership, MembershipError> {
        let local_addr = socket.local_addr();
        Membership::launch(config, local_addr, |make| Ok(Running::task(socket, make)))
    }

    /// Everything a start needs but the transport; `spawn` runs the driver.
    fn launch(
        config: MembershipConfig,
        local_addr: SocketAddr,
        spawn: impl FnOnce(MakeDriver) -> Result<Running, MembershipError>,
    ) -> Result<Membership, MembershipError> {
        config.validate()?;

        let mut identity = config.identity.clone();
        if identity.gossip.port() == 0 {
            identity.gossip.set_port(local_addr.port());
        }
        if identity.gossip.ip().is_unspecified() {
            identity.gossip.set_ip(local_addr.ip());
        }

        let gate = match &config.secret {
            Some(secret) => {
                // A fresh session per start: its key and counters are this
                // run's alone (`seal`).
                let session = crate::determinism::with_rng(|r| {
                    let mut s = [0u8; seal::SESSION_LEN];
                    r.fill_bytes(&mut s);
                    s
                });
                Gate::Secret(
                    Keyring::new(secret, &config.accept, session)
                        .ok_or(MembershipError::Config("cluster secret must not be empty"))?,
                )
            }
            None if config.insecure_open => Gate::Open,
            None => Gate::Closed,
        };
        let mut foca_config = config.foca.clone();
        if matches!(gate, Gate::Secret(_)) {
            // Keep whole datagrams within the configured size, seal included.
            foca_config.max_packet_size =
                NonZeroUsize::new(foca_config.max_packet_size.get() - SEAL_OVERHEAD)
                    .ok_or(MembershipError::Config("max_packet_size too small"))?;
        }

        let (view_tx, _) = watch::channel(MemberView {
            epoch: 0,
            members: vec![identity.clone()],
            suspects: Vec::new(),
            fed: false,
        });
        let shared = Arc::new(Shared {
            identity: Mutex::new(identity.clone()),
            members: Mutex::new(vec![Member {
                identity: identity.clone(),
                state: MemberState::Alive,
            }]),
            view: view_tx,
            stats: Counters::default(),
        });
        let (commands, command_rx) = mpsc::unbounded_channel();
        let seeds = config
            .seeds
            .iter()
            .copied()
            .filter(|s| *s != identity.gossip && *s != local_addr)
            .collect();

        tracing::info!(node = %identity, bind = %local_addr, "gossip socket bound");
        let for_driver = Arc::clone(&shared);
        let announce_interval = config.announce_interval;
        let make: MakeDriver = Box::new(move |socket| {
            Driver::new(
                identity,
                foca_config,
                socket,
                gate,
                seeds,
                announce_interval,
                for_driver,
                command_rx,
            )
        });
        let driver = spawn(make)?;
        Ok(Membership {
            shared,
            local_addr,
            commands,
            driver: Some(driver),
        })
    }

    /// The bound gossip address (useful after binding port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// This node's current identity (its incarnation grows on every rejoin).
    pub fn identity(&self) -> NodeIdentity {
        lock(&self.shared.identity).clone()
    }

    /// Every known member, self included, with down members remembered for
    /// `foca.remove_down_after`. Sorted by identity.
    pub fn members(&self) -> Vec<Member> {
        lock(&self.shared.members).clone()
    }

    /// The current live view.
    pub fn view(&self) -> MemberView {
        self.shared.view.borrow().clone()
    }

    /// A receiver that changes whenever the live set changes.
    pub fn subscribe(&self) -> watch::Receiver<MemberView> {
        self.shared.view.subscribe()
    }

    pub fn stats(&self) -> MembershipStats {
        let c = &self.shared.stats;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        MembershipStats {
            packets_in: get(&c.packets_in),
            packets_out: get(&c.packets_out),
            bytes_in: get(&c.bytes_in),
            bytes_out: get(&c.bytes_out),
            bad_mac_dropped: get(&c.bad_mac_dropped),
            invalid_dropped: get(&c.invalid_dropped),
            send_errors: get(&c.send_errors),
            stale_dropped: get(&c.stale_dropped),
            replayed_dropped: get(&c.replayed_dropped),
            updates_backlog: get(&c.updates_backlog),
        }
    }

    /// Whether the gossip driver is still running (on a thread of its
    /// own: whether that thread is).
    pub fn is_running(&self) -> bool {
        self.driver.as_ref().is_some_and(Running::is_running)
    }

    /// Declares this node down to a few peers, waits until those datagrams
    /// are sent, and stops the task. Peers drop the node at once instead of
    /// waiting out a failure detection.
    pub async fn leave_gracefully(&self) -> Result<(), MembershipError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Leave(Some(tx)))
            .map_err(|_| MembershipError::Stopped)?;
        rx.await.map_err(|_| MembershipError::Stopped)
    }

    /// Adds gossip addresses to announce to while this node knows no peer
    /// (seed names resolved again); the next announce goes out at once.
    pub fn add_seeds(&self, seeds: Vec<SocketAddr>) {
        let _ = self.commands.send(Command::AddSeeds(seeds));
    }

    /// Like [`Membership::leave_gracefully`] without waiting: the task sends
    /// its goodbye and stops on its own.
    pub fn leave(mut self) {
        // Detach rather than abort, so the goodbye still goes out.
        if let Some(driver) = self.driver.take() {
            driver.detach();
        }
        let _ = self.commands.send(Command::Leave(None));
    }

    /// Stops the task at once, as a crash would (no goodbye).
    pub fn abort(&self) {
        if let Some(driver) = &self.driver {
            driver.abort();
        }
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        if let Some(driver) = self.driver.take() {
            driver.stop();
        }
    }
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("identity", &self.identity())
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}
