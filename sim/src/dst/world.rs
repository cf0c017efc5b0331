//! One seed's run: whole members on the in-memory network, on one thread under tokio's paused clock, driven through their schedule; every message goes into the run's digest.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use weir_cluster::determinism::Deterministic;
use weir_cluster::membership::MemberState;
use weir_cluster::memory::{Fate, MemoryNet, NetEvent};
use weir_cluster::{Cluster, ClusterConfig, Engine};
use weir_core::{CheckRequest, Clock, Limiter, LimiterConfig, Nanos, RuleSet, NANOS_PER_SEC};

use super::oracle::{Counter, Outcome};
use super::rules::RULES;
use super::schedule::{Action, PlannedCheck, Schedule};

/// How long the members may take to form one ring before the run starts.
const FORMING: Duration = Duration::from_secs(60);
/// How long after its last check a run waits for every answer.
const DRAINING: Duration = Duration::from_secs(30);
/// How long after the last check's answer the members still up have to
/// agree on one ring: SWIM's suspicion and down timeouts at the defaults
/// with room to spare.
const SETTLING: Duration = Duration::from_secs(30);
/// Keys per rule a member holds at most: far more than a run touches.
const KEYS_PER_RULE: usize = 4096;
const SECRET: &str = "weir-dst-cluster-secret";

/// What a run did.
#[derive(Debug, Default)]
pub struct Ran {
    pub outcomes: Vec<Outcome>,
    /// Checks that had no answer when the run ended.
    pub unanswered: Vec<PlannedCheck>,
    /// Simulated time from the first check to the last answer.
    pub simulated: Duration,
    /// A digest of every message, its fate, and every answer.
    pub digest: u64,
    /// Why the run could not go on, if it could not.
    pub error: Option<String>,
}

/// Where a trace goes: each line as it happens.
pub type TraceSink = Rc<dyn Fn(String)>;

/// A trace of one run: where its lines go, and whether gossip datagrams
/// (many, and rarely what a failure turns on) are among them.
pub struct Trace {
    pub sink: TraceSink,
    pub gossip: bool,
}

/// Runs `schedule` on a fresh runtime and network; `trace` sees each
/// message and answer.
pub fn run(schedule: &Schedule, trace: Option<Trace>) -> Ran {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime builds");
    let ran = rt.block_on(async {
        let net = MemoryNet::new();
        let _deterministic = Deterministic::enter(schedule.seed, net.clock());
        World::new(net, schedule, trace).run().await
    });
    // Members' tasks still pending are dropped with the runtime, on this
    // thread, before the next run claims it.
    drop(rt);
    ran
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Up,
    Paused,
    Crashed,
    Left,
}

struct Member {
    id: String,
    host: IpAddr,
    cluster: Arc<Cluster>,
    engine: Arc<Engine>,
    state: State,
    /// Bumped when the member dies or leaves: a check that began on an
    /// earlier life has no answer.
    life: u64,
    /// The ring a trace last showed for this member.
    traced_ring: RefCell<Vec<String>>,
}

struct World<'s> {
    net: MemoryNet,
    clock: Arc<dyn Clock>,
    schedule: &'s Schedule,
    members: Vec<Member>,
    digest: Arc<Mutex<DefaultHasher>>,
    trace: Option<Trace>,
    /// Trace lines from the tap and the checks (which cannot hold the
    /// sink: the tap must be Send), drained into the sink in order.
    lines: Lines,
    names: Arc<Mutex<HashMap<IpAddr, String>>>,
    /// Each member's life, shared with the checks in flight.
    lives: Rc<RefCell<Vec<u64>>>,
}

type Lines = Arc<Mutex<Vec<String>>>;

impl<'s> World<'s> {
    fn new(net: MemoryNet, schedule: &'s Schedule, trace: Option<Trace>) -> World<'s> {
        net.set_jitter(schedule.jitter);
        net.set_loss(schedule.loss);
        net.set_duplication(schedule.duplication);
        let clock = net.clock();
        World {
            net,
            clock,
            schedule,
            members: Vec::new(),
            digest: Arc::new(Mutex::new(DefaultHasher::new())),
            trace,
            lines: Arc::default(),
            names: Arc::default(),
            lives: Rc::default(),
        }
    }

    fn config(&self, seeds: Vec<SocketAddr>) -> ClusterConfig {
        ClusterConfig {
            secret: Some(SECRET.into()),
            seeds: seeds.iter().map(ToString::to_string).collect(),
            replicas: self.schedule.replicas,
            ..ClusterConfig::default()
        }
    }

    fn limiter(&self) -> Arc<Limiter> {
        let rules = RuleSet::from_toml(RULES).expect("the simulator's rules parse");
        Arc::new(Limiter::new(
            rules,
            self.clock.clone(),
            LimiterConfig {
                max_keys_per_rule: KEYS_PER_RULE,
            },
        ))
    }

    /// A live member's gossip address other than `not`'s, to join through,
    /// drawn from the seed: a joiner seeded by a member other than its
    /// keys' old owner meets that owner's checks before the owner knows it.
    fn a_seed(&self, not: Option<usize>) -> Vec<SocketAddr> {
        let live: Vec<SocketAddr> = self
            .members
            .iter()
            .enumerate()
            .filter(|(i, m)| Some(*i) != not && m.state == State::Up)
            .map(|(_, m)| m.cluster.gossip_addr())
            .collect();
        if live.is_empty() {
            return live;
        }
        let i = weir_cluster::determinism::with_rng(|r| r.random_range(0..live.len()));
        vec![live[i]]
    }

    fn install_tap(&self) {
        let digest = self.digest.clone();
        let clock = self.clock.clone();
        let names = self.names.clone();
        let trace = self.trace.as_ref().map(|t| t.gossip);
        let queue = self.lines.clone();
        let calls = std::sync::Mutex::new(super::calls::Calls::default());
        self.net.tap(Arc::new(move |e: &NetEvent<'_>| {
            let now = clock.now();
            let mut h = digest.lock().expect("the digest lock is never poisoned");
            (now, e.from, e.to, e.what, e.bytes, fate_code(e.fate)).hash(&mut *h);
            drop(h);
            if trace.is_some_and(|gossip| gossip || e.what != "gossip") {
                let names = names.lock().expect("never poisoned");
                let name = |ip: &IpAddr| names.get(ip).cloned().unwrap_or_else(|| ip.to_string());
                let ops = {
                    let mut calls = calls.lock().expect("never poisoned");
                    match e.what {
                        "decide" => calls.request(e.from, e.to, e.bytes),
                        "decide answer" => calls.answer(e.from, e.to, e.bytes),
                        other => super::calls::counters(other, e.bytes),
                    }
                };
                queue.lock().expect("never poisoned").push(format!(
                    "{} {} -> {} {} ({} B) {:?}{}{}",
                    at(now),
                    name(&e.from),
                    name(&e.to),
                    e.what,
                    e.bytes.len(),
                    e.fate,
                    if ops.is_empty() { "" } else { ": " },
                    ops
                ));
            }
        }));
    }

    fn flush_trace(&self) {
        let Some(Trace { sink, .. }) = &self.trace else {
            return;
        };
        let lines = std::mem::take(&mut *self.lines.lock().expect("never poisoned"));
        for line in lines {
            sink(line);
        }
        for m in self.members.iter().filter(|m| m.state == State::Up) {
            let ring: Vec<String> = m
                .cluster
                .ring()
                .members()
                .iter()
                .map(|n| format!("{}#{:04x}", n.id, n.boot & 0xffff))
                .collect();
            if *m.traced_ring.borrow() != ring {
                sink(format!("{} {} ring: {ring:?}", at(self.clock.now()), m.id));
                *m.traced_ring.borrow_mut() = ring;
            }
        }
    }

    fn say(&self, line: String) {
        self.flush_trace();
        if let Some(Trace { sink, .. }) = &self.trace {
            sink(line);
        }
    }

    async fn start_member(&mut self, seeds: Vec<SocketAddr>) -> Result<(), String> {
        let id = format!("node-{}", self.members.len());
        let cluster = self
            .net
            .start(&id, self.config(seeds), self.limiter())
            .await
            .map_err(|e| format!("{id} did not start: {e}"))?;
        let host = cluster.identity().grpc.ip();
        self.names
            .lock()
            .expect("never poisoned")
            .insert(host, id.clone());
        let cluster = Arc::new(cluster);
        self.members.push(Member {
            id,
            host,
            engine: Arc::new(Engine::clustered(cluster.clone())),
            cluster,
            state: State::Up,
            life: 0,
            traced_ring: RefCell::default(),
        });
        self.lives.borrow_mut().push(0);
        Ok(())
    }

    /// Every member up holds every other up member in its ring, suspects
    /// none of them, and waits on no handoff.
    fn formed(&self) -> bool {
        let up: Vec<&Member> = self
            .members
            .iter()
            .filter(|m| m.state == State::Up)
            .collect();
        up.iter().all(|m| {
            let ring = m.cluster.ring();
            let suspects = m
                .cluster
                .members_status()
                .iter()
                .any(|s| s.state == MemberState::Suspect);
            ring.len() == up.len() && !suspects && m.cluster.awaiting().is_empty()
        })
    }

    async fn run(mut self) -> Ran {
        self.install_tap();
        let mut ran = Ran::default();
        if let Err(e) = self.form().await {
            self.flush_trace();
            ran.error = Some(e);
            return ran;
        }
        let start = tokio::time::Instant::now();
        let outcomes: Rc<RefCell<Vec<(usize, Outcome)>>> = Rc::default();
        let mut pending = Vec::new();
        let mut steps: Vec<(Duration, Step<'_>)> = self
            .schedule
            .actions
            .iter()
            .map(|(t, a)| (*t, Step::Act(a)))
            .chain(
                self.schedule
                    .checks
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (c.at, Step::Check(i, c))),
            )
            .collect();
        // Stable: an action and a check at one instant keep this order.
        steps.sort_by_key(|(t, _)| *t);
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                for (t, step) in steps {
                    tokio::time::sleep_until(start + t).await;
                    match step {
                        Step::Act(a) => {
                            self.say(format!("{} fault: {a}", at(self.clock.now())));
                            if let Err(e) = self.act(a).await {
                                ran.error = Some(e);
                                break;
                            }
                        }
                        Step::Check(i, c) => {
                            if let Some(handle) = self.send(i, c, outcomes.clone()) {
                                pending.push((i, handle));
                            }
                        }
                    }
                    self.flush_trace();
                }
                let until = tokio::time::Instant::now() + DRAINING;
                for (i, handle) in pending {
                    if tokio::time::timeout_at(until, handle).await.is_err() {
                        ran.unanswered.push(self.schedule.checks[i].clone());
                    }
                }
                // Every fault has ended: the members still up must come
                // back to one ring with no handoff left waiting.
                if ran.error.is_none() {
                    if let Err(views) = self.until_formed(SETTLING).await {
                        ran.error = Some(format!(
                            "the members did not settle into one ring {SETTLING:?} after the faults ended ({views})"
                        ));
                    }
                }
            })
            .await;
        self.flush_trace();
        ran.simulated = start.elapsed();
        let mut outcomes = std::mem::take(&mut *outcomes.borrow_mut());
        outcomes.sort_by_key(|(i, _)| *i);
        let mut h = self.digest.lock().expect("never poisoned").clone();
        for (i, o) in &outcomes {
            (i, o.sent, o.answered, &o.admitted).hash(&mut h);
        }
        ran.digest = h.finish();
        ran.outcomes = outcomes.into_iter().map(|(_, o)| o).collect();
        for m in &self.members {
            m.cluster.kill();
        }
        ran
    }

    async fn form(&mut self) -> Result<(), String> {
        for i in 0..self.schedule.nodes {
            let seeds = self.a_seed(None);
            debug_assert!(i == 0 || !seeds.is_empty());
            self.start_member(seeds).await?;
        }
        self.until_formed(FORMING).await.map_err(|views| {
            format!(
                "the {} members formed no ring in {FORMING:?} ({views})",
                self.members.len()
            )
        })?;
        self.say(format!(
            "{} formed: {} members",
            at(self.clock.now()),
            self.members.len()
        ));
        Ok(())
    }

    /// Waits up to `limit` until [`Self::formed`]; each member's view when it
    /// does not.
    async fn until_formed(&self, limit: Duration) -> Result<(), String> {
        let give_up = tokio::time::Instant::now() + limit;
        while !self.formed() {
            if tokio::time::Instant::now() >= give_up {
                let views: Vec<String> = self
                    .members
                    .iter()
                    .filter(|m| m.state == State::Up)
                    .map(|m| {
                        let ring = m.cluster.ring();
                        let ids: Vec<&str> = ring.members().iter().map(|n| n.id.as_str()).collect();
                        let suspects: Vec<String> = m
                            .cluster
                            .members_status()
                            .into_iter()
                            .filter(|s| s.state == MemberState::Suspect)
                            .map(|s| s.id)
                            .collect();
                        format!(
                            "{}: ring {ids:?} suspects {suspects:?} awaiting {:?}",
                            m.id,
                            m.cluster.awaiting()
                        )
                    })
                    .collect();
                return Err(views.join("; "));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// Sends check `i` through its gateway, or the next member that can take
    /// it; None when no member can.
    fn send(
        &self,
        i: usize,
        c: &PlannedCheck,
        outcomes: Rc<RefCell<Vec<(usize, Outcome)>>>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let n = self.members.len();
        let g = (0..n)
            .map(|k| (c.gateway + k) % n)
            .find(|&g| self.members[g].state == State::Up)?;
        let m = &self.members[g];
        let (engine, clock) = (m.engine.clone(), self.clock.clone());
        let req = CheckRequest::new(c.key.clone(), c.route)
            .cost(c.cost)
            .ip(c.ip.clone());
        let lives = self.lives.clone();
        let life = m.life;
        let lines = self.trace.is_some().then(|| self.lines.clone());
        let gateway = m.id.clone();
        Some(tokio::task::spawn_local(async move {
            let sent = clock.now();
            let verdict = engine.check(&req).await;
            let answered = clock.now();
            // A gateway that died meanwhile answered nobody.
            let alive = lives.borrow().get(g).copied() == Some(life);
            let admitted = match &verdict {
                Ok(v) if v.allowed && alive => Some(
                    v.applied
                        .iter()
                        .map(|a| Counter {
                            rule: a.rule.name.clone(),
                            key: a.hash_part.to_string(),
                        })
                        .collect(),
                ),
                _ => None,
            };
            if let Some(lines) = lines {
                let what = match (&verdict, alive) {
                    (_, false) => "no answer (gateway gone)".to_string(),
                    (Ok(v), _) => {
                        let left: Vec<String> = v
                            .applied
                            .iter()
                            .map(|a| format!("{} {} left", a.rule.name, a.decision.remaining))
                            .collect();
                        let said = if v.allowed { "allowed" } else { "denied" };
                        format!("{said} ({})", left.join(", "))
                    }
                    (Err(e), _) => format!("error: {e}"),
                };
                lines.lock().expect("never poisoned").push(format!(
                    "{} check #{i} {} {} ip {} cost {} via {gateway}, sent {}: {what}",
                    at(answered),
                    req.key,
                    req.route,
                    req.ip.as_deref().unwrap_or("-"),
                    req.cost,
                    at(sent)
                ));
            }
            outcomes.borrow_mut().push((
                i,
                Outcome {
                    sent,
                    answered,
                    req,
                    admitted,
                },
            ));
        }))
    }

    fn mark(&mut self, n: usize, state: State) {
        let m = &mut self.members[n];
        if matches!(state, State::Crashed | State::Left) {
            m.life += 1;
            self.lives.borrow_mut()[n] = m.life;
        }
        m.state = state;
    }

    async fn act(&mut self, action: &Action) -> Result<(), String> {
        match *action {
            Action::Partition { ref side } => {
                let (inside, outside): (Vec<IpAddr>, Vec<IpAddr>) = {
                    let (a, b): (Vec<_>, Vec<_>) = self
                        .members
                        .iter()
                        .enumerate()
                        .partition(|(i, _)| side.contains(i));
                    (
                        a.into_iter().map(|(_, m)| m.host).collect(),
                        b.into_iter().map(|(_, m)| m.host).collect(),
                    )
                };
                self.net.partition(&inside, &outside);
            }
            Action::CutOneWay { from, to } => {
                if let (Some(a), Some(b)) = (self.members.get(from), self.members.get(to)) {
                    self.net.cut_one_way(a.host, b.host);
                }
            }
            Action::Heal => self.net.heal(),
            Action::Pause(n) => {
                if self.members.get(n).is_some_and(|m| m.state == State::Up) {
                    self.net.pause(self.members[n].host);
                    self.mark(n, State::Paused);
                }
            }
            Action::Resume(n) => {
                if self
                    .members
                    .get(n)
                    .is_some_and(|m| m.state == State::Paused)
                {
                    self.net.resume(self.members[n].host);
                    self.mark(n, State::Up);
                }
            }
            Action::Crash(n) => {
                if let Some(m) = self.members.get(n).filter(|m| m.state != State::Left) {
                    m.cluster.kill();
                    self.net.crash(m.host);
                    self.net.resume(m.host);
                    self.mark(n, State::Crashed);
                }
            }
            Action::Restart(n) => {
                if self
                    .members
                    .get(n)
                    .is_some_and(|m| m.state == State::Crashed)
                {
                    let seeds = self.a_seed(Some(n));
                    let (host, id) = (self.members[n].host, self.members[n].id.clone());
                    let cluster = self
                        .net
                        .restart(host, &id, self.config(seeds), self.limiter())
                        .await
                        .map_err(|e| format!("{id} did not restart: {e}"))?;
                    let cluster = Arc::new(cluster);
                    let m = &mut self.members[n];
                    m.engine = Arc::new(Engine::clustered(cluster.clone()));
                    m.cluster = cluster;
                    self.mark(n, State::Up);
                }
            }
            Action::Leave(n) => {
                if self.members.get(n).is_some_and(|m| m.state == State::Up) {
                    let cluster = self.members[n].cluster.clone();
                    self.mark(n, State::Left);
                    // A leave takes its time (the handoff); checks go on.
                    tokio::task::spawn_local(async move { cluster.leave().await });
                }
            }
            Action::Join => {
                let seeds = self.a_seed(None);
                self.start_member(seeds).await?;
            }
            Action::Slow(n, extra) => {
                if let Some(m) = self.members.get(n) {
                    self.net.slow_down(m.host, extra);
                }
            }
            Action::Fast(n) => {
                if let Some(m) = self.members.get(n) {
                    self.net.slow_down(m.host, Duration::ZERO);
                }
            }
        }
        Ok(())
    }
}

enum Step<'a> {
    Act(&'a Action),
    Check(usize, &'a PlannedCheck),
}

fn fate_code(f: Fate) -> u8 {
    match f {
        Fate::Sent => 0,
        Fate::Duplicated => 1,
        Fate::Lost => 2,
        Fate::Refused => 3,
    }
}

/// Simulated time as seconds since the virtual clock's origin.
pub fn at(now: Nanos) -> String {
    let origin = weir_cluster::memory::VirtualClock::ORIGIN;
    let since = now.saturating_sub(origin);
    format!(
        "t={}.{:06}s",
        since / NANOS_PER_SEC,
        (since % NANOS_PER_SEC) / 1_000
    )
}
