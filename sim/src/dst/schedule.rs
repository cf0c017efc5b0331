//! A run's schedule, drawn whole from its seed before it starts: the network's conditions, the fault episodes with their times, and every client check.

use std::fmt;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The fault kinds `--faults` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub enum FaultKind {
    /// Up to 3 ms more on each message, drawn per message: reordering.
    Delay,
    /// Gossip datagrams lost.
    Loss,
    /// Gossip datagrams delivered twice.
    Dup,
    /// One node or a minority cut off from the rest, then healed.
    Partition,
    /// One node's messages to another lost, the way back open, then healed.
    Oneway,
    /// A node stopped (SIGSTOP), then resumed.
    Pause,
    /// A node killed (SIGKILL), restarted later with its id and empty memory.
    Crash,
    /// A node leaves gracefully.
    Leave,
    /// A new member joins.
    Join,
    /// A node that falls behind: every message to or from it slower.
    Slow,
}

impl FaultKind {
    pub const ALL: [FaultKind; 10] = [
        FaultKind::Delay,
        FaultKind::Loss,
        FaultKind::Dup,
        FaultKind::Partition,
        FaultKind::Oneway,
        FaultKind::Pause,
        FaultKind::Crash,
        FaultKind::Leave,
        FaultKind::Join,
        FaultKind::Slow,
    ];

    /// The kinds that happen at a moment (the others are conditions of
    /// the whole run).
    fn is_episode(self) -> bool {
        !matches!(self, FaultKind::Delay | FaultKind::Loss | FaultKind::Dup)
    }

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Delay => "delay",
            FaultKind::Loss => "loss",
            FaultKind::Dup => "dup",
            FaultKind::Partition => "partition",
            FaultKind::Oneway => "oneway",
            FaultKind::Pause => "pause",
            FaultKind::Crash => "crash",
            FaultKind::Leave => "leave",
            FaultKind::Join => "join",
            FaultKind::Slow => "slow",
        }
    }
}

/// What the harness does to the cluster at a moment. Nodes are numbered
/// from 0 in the order they started; a joiner takes the next number.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// The nodes in `side` cannot reach the others, nor the others them.
    Partition {
        side: Vec<usize>,
    },
    /// Nothing from `from` reaches `to`.
    CutOneWay {
        from: usize,
        to: usize,
    },
    Heal,
    Pause(usize),
    Resume(usize),
    Crash(usize),
    /// The crashed node starts again with its id and an empty memory.
    Restart(usize),
    Leave(usize),
    Join,
    Slow(usize, Duration),
    Fast(usize),
}

impl Action {
    /// The fault kind this action injects, if it starts one.
    pub fn kind(&self) -> Option<FaultKind> {
        match self {
            Action::Partition { .. } => Some(FaultKind::Partition),
            Action::CutOneWay { .. } => Some(FaultKind::Oneway),
            Action::Pause(_) => Some(FaultKind::Pause),
            Action::Crash(_) => Some(FaultKind::Crash),
            Action::Leave(_) => Some(FaultKind::Leave),
            Action::Join => Some(FaultKind::Join),
            Action::Slow(..) => Some(FaultKind::Slow),
            Action::Heal | Action::Resume(_) | Action::Restart(_) | Action::Fast(_) => None,
        }
    }
}

impl Action {
    /// The members this action stops, cuts off or slows.
    fn touches(&self) -> Vec<usize> {
        match self {
            Action::Partition { side } => side.clone(),
            Action::CutOneWay { from, to } => vec![*from, *to],
            Action::Pause(n) | Action::Crash(n) | Action::Leave(n) | Action::Slow(n, _) => vec![*n],
            _ => Vec::new(),
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Partition { side } => write!(f, "partition {side:?} from the rest"),
            Action::CutOneWay { from, to } => write!(f, "cut {from} -> {to}"),
            Action::Heal => write!(f, "heal"),
            Action::Pause(n) => write!(f, "pause {n}"),
            Action::Resume(n) => write!(f, "resume {n}"),
            Action::Crash(n) => write!(f, "crash {n}"),
            Action::Restart(n) => write!(f, "restart {n}"),
            Action::Leave(n) => write!(f, "leave {n}"),
            Action::Join => write!(f, "join"),
            Action::Slow(n, d) => write!(f, "slow {n} by {d:?}"),
            Action::Fast(n) => write!(f, "{n} fast again"),
        }
    }
}

/// One client check: who sends it, through which node, on what.
#[derive(Debug, Clone)]
pub struct PlannedCheck {
    pub at: Duration,
    pub client: usize,
    /// The node the client would use; a client whose node cannot take it
    /// (crashed, paused, left) uses the next one that can.
    pub gateway: usize,
    pub key: String,
    pub route: &'static str,
    pub ip: String,
    pub cost: u64,
}

/// Everything a run does, in time order.
#[derive(Debug, Clone)]
pub struct Schedule {
    pub seed: u64,
    pub nodes: usize,
    pub replicas: usize,
    pub duration: Duration,
    pub jitter: Duration,
    pub loss: f64,
    pub duplication: f64,
    pub actions: Vec<(Duration, Action)>,
    pub checks: Vec<PlannedCheck>,
}

/// The routes of [`super::rules::RULES`]: one per algorithm, and one that
/// two limits (per client and per IP) govern together.
pub const ROUTES: [&str; 6] = [
    "GET /tb",
    "GET /gcra",
    "GET /fw",
    "GET /log",
    "GET /swc",
    "GET /both",
];

/// Clients sending checks at once.
const CLIENTS: usize = 4;
/// Checks per simulated second, all clients together.
const RATE: f64 = 60.0;
/// Keys carrying half of the traffic.
const HOT_KEYS: usize = 2;
const KEYS: usize = 16;

impl Schedule {
    /// The schedule of `seed`: the same seed, the same schedule.
    pub fn draw(seed: u64, nodes: usize, replicas: usize, faults: &[FaultKind]) -> Schedule {
        // A stream of its own: the cluster's draws come from the same seed
        // through another generator, so the schedule does not shift when
        // the cluster draws more or less.
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed_5c4e_d01e_0000);
        let duration = Duration::from_secs(10);
        let has = |k| faults.contains(&k);
        let jitter = if has(FaultKind::Delay) && rng.random_bool(0.7) {
            Duration::from_micros(rng.random_range(100..=3_000))
        } else {
            Duration::ZERO
        };
        let loss = if has(FaultKind::Loss) && rng.random_bool(0.5) {
            rng.random_range(0.01..0.2)
        } else {
            0.0
        };
        let duplication = if has(FaultKind::Dup) && rng.random_bool(0.5) {
            rng.random_range(0.01..0.2)
        } else {
            0.0
        };
        let episodes: Vec<FaultKind> = faults.iter().copied().filter(|k| k.is_episode()).collect();
        let actions = episodes_for(&mut rng, nodes, &episodes, duration);
        let mut checks = checks_for(&mut rng, nodes, duration);
        checks.extend(bursts_for(&mut rng, nodes, &actions, duration));
        checks.sort_by_key(|c| c.at);
        Schedule {
            seed,
            nodes,
            replicas,
            duration,
            jitter,
            loss,
            duplication,
            actions,
            checks,
        }
    }
}

/// One to three episodes, each a fault and its end, none overlapping, at
/// most a minority of the members away at once.
fn episodes_for(
    rng: &mut SmallRng,
    nodes: usize,
    kinds: &[FaultKind],
    duration: Duration,
) -> Vec<(Duration, Action)> {
    let mut out = Vec::new();
    if kinds.is_empty() {
        return out;
    }
    let mut members = nodes;
    // Members that are gone for good (left), never chosen again.
    let mut gone: Vec<usize> = Vec::new();
    // Members the episode still going on touches, when the next one
    // begins before it ends: never chosen by it.
    let mut busy: Vec<usize> = Vec::new();
    let mut t = Duration::from_millis(rng.random_range(300..2_000));
    let end = duration - Duration::from_millis(500);
    for _ in 0..rng.random_range(1..=3) {
        if t >= end {
            break;
        }
        let this = out.len();
        let kind = kinds[rng.random_range(0..kinds.len())];
        let live: Vec<usize> = (0..members)
            .filter(|n| !gone.contains(n) && !busy.contains(n))
            .collect();
        if live.is_empty() {
            break;
        }
        let pick = |rng: &mut SmallRng| live[rng.random_range(0..live.len())];
        let lasts = Duration::from_millis(rng.random_range(200..3_000));
        let until = (t + lasts).min(end);
        match kind {
            FaultKind::Partition if live.len() >= 3 => {
                let minority = (live.len() - 1) / 2;
                let size = rng.random_range(1..=minority.max(1));
                let mut side = live.clone();
                while side.len() > size {
                    side.remove(rng.random_range(0..side.len()));
                }
                out.push((t, Action::Partition { side }));
                out.push((until, Action::Heal));
            }
            FaultKind::Oneway if live.len() >= 2 => {
                let from = pick(rng);
                let mut to = pick(rng);
                while to == from {
                    to = pick(rng);
                }
                out.push((t, Action::CutOneWay { from, to }));
                out.push((until, Action::Heal));
            }
            FaultKind::Pause => {
                let n = pick(rng);
                out.push((t, Action::Pause(n)));
                out.push((until, Action::Resume(n)));
            }
            FaultKind::Crash if live.len() >= 2 => {
                let n = pick(rng);
                out.push((t, Action::Crash(n)));
                if rng.random_bool(0.8) {
                    out.push((until, Action::Restart(n)));
                } else {
                    gone.push(n);
                }
            }
            FaultKind::Leave if live.len() >= 3 => {
                let n = pick(rng);
                out.push((t, Action::Leave(n)));
                gone.push(n);
            }
            FaultKind::Join => {
                out.push((t, Action::Join));
                members += 1;
            }
            FaultKind::Slow => {
                let n = pick(rng);
                let extra = Duration::from_millis(rng.random_range(1..=20));
                out.push((t, Action::Slow(n, extra)));
                out.push((until, Action::Fast(n)));
            }
            _ => {}
        }
        busy = out[this..].iter().flat_map(|(_, a)| a.touches()).collect();
        // One episode in three begins while the last still lasts: where two
        // mechanisms meet (a join whose old owner then stops answering) is
        // where a count can be lost.
        t = if rng.random_bool(1.0 / 3.0) {
            t + Duration::from_millis(rng.random_range(50..600)).min(lasts)
        } else {
            busy.clear();
            until + Duration::from_millis(rng.random_range(100..2_000))
        };
    }
    out
}

/// Poisson arrivals from every client; half the traffic on the hot keys,
/// each client mostly through its own node.
fn checks_for(rng: &mut SmallRng, nodes: usize, duration: Duration) -> Vec<PlannedCheck> {
    let mut out = Vec::new();
    let mut t = 0.0f64;
    let end = duration.as_secs_f64();
    loop {
        let u: f64 = rng.random_range(f64::EPSILON..1.0);
        t += -u.ln() / RATE;
        if t >= end {
            break;
        }
        let client = rng.random_range(0..CLIENTS);
        let gateway = if rng.random_bool(0.7) {
            client % nodes
        } else {
            rng.random_range(0..nodes)
        };
        let key = if rng.random_bool(0.5) {
            format!("hot{}", rng.random_range(0..HOT_KEYS))
        } else {
            format!("k{}", rng.random_range(0..KEYS))
        };
        out.push(PlannedCheck {
            at: Duration::from_secs_f64(t),
            client,
            gateway,
            key,
            route: ROUTES[rng.random_range(0..ROUTES.len())],
            ip: format!("192.0.2.{}", rng.random_range(1..=3)),
            cost: if rng.random_bool(0.9) { 1 } else { 2 },
        });
    }
    out
}

/// Checks a burst sends on one counter, more than its limit.
const BURST: usize = 14;
/// How long a burst lasts from the action that starts it.
const BURST_SPAN: f64 = 0.4;

/// Around each action, two bursts on one hot key and route each, through
/// any node (a joiner among them): the moments a ring changes are where a
/// count can be lost, and only a counter pushed past its limit shows it.
fn bursts_for(
    rng: &mut SmallRng,
    nodes: usize,
    actions: &[(Duration, Action)],
    duration: Duration,
) -> Vec<PlannedCheck> {
    let mut out = Vec::new();
    let end = duration.as_secs_f64();
    // A joiner takes the next number.
    let mut members = nodes;
    for (at, action) in actions {
        if *action == Action::Join {
            members += 1;
        }
        for _ in 0..2 {
            let key = format!("hot{}", rng.random_range(0..HOT_KEYS));
            let route = ROUTES[rng.random_range(0..ROUTES.len())];
            for _ in 0..BURST {
                let t = at.as_secs_f64() + rng.random_range(0.0..BURST_SPAN);
                if t >= end {
                    continue;
                }
                out.push(PlannedCheck {
                    at: Duration::from_secs_f64(t),
                    client: rng.random_range(0..CLIENTS),
                    gateway: rng.random_range(0..members),
                    key: key.clone(),
                    route,
                    ip: format!("192.0.2.{}", rng.random_range(1..=3)),
                    cost: 1,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_draws_the_same_schedule_and_another_seed_another() {
        let a = Schedule::draw(5, 5, 2, &FaultKind::ALL);
        let b = Schedule::draw(5, 5, 2, &FaultKind::ALL);
        let c = Schedule::draw(6, 5, 2, &FaultKind::ALL);
        assert_eq!(a.actions, b.actions);
        assert_eq!(a.checks.len(), b.checks.len());
        assert!(a
            .checks
            .iter()
            .zip(&b.checks)
            .all(|(x, y)| x.at == y.at && x.key == y.key));
        assert!(a.actions != c.actions || a.checks.len() != c.checks.len());
    }

    #[test]
    fn only_the_kinds_asked_for_are_drawn() {
        for seed in 0..200 {
            let s = Schedule::draw(seed, 5, 2, &[FaultKind::Pause]);
            assert!(s
                .actions
                .iter()
                .all(|(_, a)| matches!(a, Action::Pause(_) | Action::Resume(_))));
            assert_eq!(s.jitter, Duration::ZERO);
            assert_eq!(s.loss, 0.0);
        }
        let none = Schedule::draw(1, 5, 2, &[]);
        assert!(none.actions.is_empty());
    }

    #[test]
    fn a_partition_never_cuts_off_a_majority() {
        for seed in 0..500 {
            let s = Schedule::draw(seed, 5, 2, &[FaultKind::Partition]);
            for (_, a) in &s.actions {
                if let Action::Partition { side } = a {
                    assert!(!side.is_empty() && side.len() <= 2, "{side:?}");
                }
            }
        }
    }
}
