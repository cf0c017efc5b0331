//! Faults injected while a workload runs, and how long the survivors take to notice and recover.

use std::time::Duration;

use tokio::time::Instant;
use weir_core::{Clock, SystemClock};

use crate::cluster::Cluster;
use crate::load::Live;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// SIGKILL the last node.
    Kill,
    /// SIGSTOP the last node until the others notice, then SIGCONT.
    Pause,
    /// Kill the last node and start it again with the same id and ports.
    Restart,
    /// SIGTERM each node in turn, waiting for it to rejoin.
    Rolling,
    /// SIGTERM the last node and, once every other node has dropped it,
    /// start it again seeded by the first node alone: a member joining,
    /// its keys moving to it while the others learn of it a gossip round
    /// or two apart.
    Join,
    /// Cut the last node off from its peers (network namespaces; needs root).
    Partition,
    /// Until the run ends: a spinning thread per core beside the cluster,
    /// and every node in turn stalled (SIGSTOP, SIGCONT) for tens of ms.
    Busy,
}

impl FaultKind {
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::Pause => "pause",
            FaultKind::Restart => "restart",
            FaultKind::Rolling => "rolling",
            FaultKind::Join => "join",
            FaultKind::Partition => "partition",
            FaultKind::Busy => "busy",
        }
    }
}

/// What happened, in seconds.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct FaultReport {
    pub kind: String,
    pub node: String,
    /// When it was injected, from the run's start.
    pub at_s: f64,
    /// Unix nanoseconds of the injection, on the records' clock.
    pub at_unix_ns: u64,
    /// Until the first survivor saw the node as anything but alive.
    pub suspected_after_s: Option<f64>,
    /// Until every survivor saw it down (or dropped it): the detection time.
    pub detected_after_s: Option<f64>,
    /// Until every node listed every node alive again.
    pub recovered_after_s: Option<f64>,
    /// Rolling restart: each node's time from SIGTERM to rejoined.
    pub rejoin_s: Vec<f64>,
    /// Busy: spinning threads, and stalls of one node at a time.
    #[serde(default)]
    pub hogs: u32,
    #[serde(default)]
    pub stalls: u32,
    /// Why the fault was not injected.
    pub skipped: Option<String>,
    pub error: Option<String>,
}

/// Longest the sim waits for the survivors to notice.
const DETECT_DEADLINE: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(50);

/// Polls the survivors until every one sees `victim` down or gone.
/// Returns (first suspicion, full detection), measured from `since`.
async fn watch_detection(
    cluster: &Cluster,
    victim: usize,
    since: Instant,
) -> (Option<Duration>, Option<Duration>) {
    let id = cluster.nodes[victim].id.clone();
    let mut suspected = None;
    while since.elapsed() < DETECT_DEADLINE {
        let mut all_down = true;
        for i in (0..cluster.len()).filter(|&i| i != victim && cluster.is_up(i)) {
            let state = match cluster.members(i).await {
                Ok(ms) => ms.into_iter().find(|(m, _)| *m == id).map(|(_, s)| s),
                Err(_) => Some("alive".to_string()),
            };
            if state.as_deref() != Some("alive") && suspected.is_none() {
                suspected = Some(since.elapsed());
            }
            // Absent counts as down: a node may drop a dead member outright.
            all_down &= matches!(state.as_deref(), None | Some("down"));
        }
        if all_down {
            return (suspected.or(Some(since.elapsed())), Some(since.elapsed()));
        }
        tokio::time::sleep(POLL).await;
    }
    (suspected, None)
}

/// [`watch_detection`], its two times written into `report`.
async fn watch_into(cluster: &Cluster, victim: usize, t0: Instant, report: &mut FaultReport) {
    let (suspected, detected) = watch_detection(cluster, victim, t0).await;
    report.suspected_after_s = secs(suspected);
    report.detected_after_s = secs(detected);
}

fn secs(d: Option<Duration>) -> Option<f64> {
    d.map(|d| d.as_secs_f64())
}

/// When and how long, for [`inject`].
pub struct Window {
    /// When the run began, for reporting.
    pub run_start: Instant,
    /// When to inject.
    pub at: Instant,
    /// When the run ends: a fault that lasts (busy) stops there.
    pub until: Instant,
}

/// Injects `kind` and follows it through.
pub async fn inject(
    cluster: &mut Cluster,
    kind: FaultKind,
    window: Window,
    live: &Live,
    clock: &SystemClock,
) -> FaultReport {
    let Window {
        run_start,
        at,
        until,
    } = window;
    // The last node: never the seed, so the others' join path stays intact.
    let victim = cluster.len() - 1;
    let mut report = FaultReport {
        kind: kind.name().to_string(),
        node: cluster.nodes[victim].id.clone(),
        ..FaultReport::default()
    };
    if cluster.len() < 2 {
        report.skipped = Some("a fault needs at least 2 nodes".into());
        return report;
    }
    if kind == FaultKind::Partition && !cluster.has_netns() {
        report.skipped = Some(
            crate::netns::unavailable()
                .unwrap_or_else(|| "the cluster was not started in network namespaces".into()),
        );
        return report;
    }
    tokio::time::sleep_until(at).await;
    let t0 = Instant::now();
    report.at_s = t0.duration_since(run_start).as_secs_f64();
    report.at_unix_ns = clock.now();
    let result = match kind {
        FaultKind::Kill => {
            live.set(victim, false);
            let r = cluster.kill(victim);
            watch_into(cluster, victim, t0, &mut report).await;
            r
        }
        FaultKind::Pause => pause(cluster, victim, t0, live, &mut report).await,
        FaultKind::Partition => partition(cluster, victim, t0, &mut report).await,
        FaultKind::Restart => {
            live.set(victim, false);
            let r = match cluster.restart(victim) {
                Ok(()) => cluster.wait_formed().await.map(|_| ()),
                Err(e) => Err(e),
            };
            report.recovered_after_s = Some(t0.elapsed().as_secs_f64());
            live.set(victim, true);
            r
        }
        FaultKind::Rolling => rolling(cluster, live, &mut report).await,
        FaultKind::Join => join(cluster, victim, t0, live, &mut report).await,
        FaultKind::Busy => busy(cluster, until, &mut report).await,
    };
    if let Err(e) = result {
        report.error = Some(e.to_string());
    }
    report
}

async fn pause(
    cluster: &mut Cluster,
    victim: usize,
    t0: Instant,
    live: &Live,
    report: &mut FaultReport,
) -> Result<(), crate::error::SimError> {
    live.set(victim, false);
    cluster.pause(victim)?;
    watch_into(cluster, victim, t0, report).await;
    cluster.resume(victim)?;
    live.set(victim, true);
    let r = cluster.wait_formed().await;
    report.recovered_after_s = Some(t0.elapsed().as_secs_f64());
    r.map(|_| ())
}

async fn partition(
    cluster: &mut Cluster,
    victim: usize,
    t0: Instant,
    report: &mut FaultReport,
) -> Result<(), crate::error::SimError> {
    // Clients on the victim's side keep sending to it: that is where a
    // partition over-admits.
    cluster.cut(victim)?;
    let (s, d) = watch_detection(cluster, victim, t0).await;
    report.suspected_after_s = secs(s);
    report.detected_after_s = secs(d);
    cluster.heal(victim)?;
    let r = cluster.wait_formed().await;
    report.recovered_after_s = Some(t0.elapsed().as_secs_f64());
    r.map(|_| ())
}

async fn rolling(
    cluster: &mut Cluster,
    live: &Live,
    report: &mut FaultReport,
) -> Result<(), crate::error::SimError> {
    report.node = "all".into();
    for i in 0..cluster.len() {
        let t = Instant::now();
        live.set(i, false);
        cluster.terminate(i, Duration::from_secs(5)).await?;
        cluster.restart(i)?;
        cluster.wait_formed().await?;
        live.set(i, true);
        report.rejoin_s.push(t.elapsed().as_secs_f64());
    }
    Ok(())
}

async fn join(
    cluster: &mut Cluster,
    victim: usize,
    t0: Instant,
    live: &Live,
    report: &mut FaultReport,
) -> Result<(), crate::error::SimError> {
    live.set(victim, false);
    cluster.terminate(victim, Duration::from_secs(5)).await?;
    watch_into(cluster, victim, t0, report).await;
    cluster.join_through_first(victim)?;
    let r = cluster.wait_formed().await;
    report.recovered_after_s = Some(t0.elapsed().as_secs_f64());
    live.set(victim, true);
    r.map(|_| ())
}

/// How long each stall lasts, and the pause between two (on different
/// nodes): a stall is several owner deadlines long but far shorter than
/// SWIM's suspicion, so it tests "slow is not dead".
const STALL: Duration = Duration::from_millis(40);
const BETWEEN_STALLS: Duration = Duration::from_millis(200);

/// Keeps every core busy and stalls the nodes in turn until `until`.
async fn busy(
    cluster: &mut Cluster,
    until: Instant,
    report: &mut FaultReport,
) -> Result<(), crate::error::SimError> {
    report.node = "all".into();
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    let hogs = crate::hogs::Hogs::start(cores, until.into_std());
    report.hogs = u32::try_from(cores).unwrap_or(u32::MAX);
    let mut i = 0;
    while Instant::now() + STALL < until {
        if cluster.is_up(i) {
            cluster.stall(i, STALL).await?;
            report.stalls += 1;
        }
        i = (i + 1) % cluster.len();
        tokio::time::sleep(BETWEEN_STALLS).await;
    }
    drop(hogs);
    Ok(())
}
