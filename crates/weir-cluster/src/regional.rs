//! Global limits in a running node: the region's holder behind the limiter's gate, the allocator for keys homed here, and the rounds between regions.
//!
//! Each node of a region holds the allocations of the global keys it owns
//! in its region (every check of a key comes to its owner, so the region
//! is exact within its share), and, when its region is a key's home and it
//! owns the key, that key's allocator. Every round it sends each home
//! region the reports of its keys (one call per region), to whichever node
//! of that region answers; that node passes each report to the key's owner
//! there. The protocol itself is [`crate::regions`]; this file only moves
//! it over [`RegionLink`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::{Mutex, RwLock};
use weir_core::{Gate, Limiter, Nanos, Rule, Scope};

use crate::regions::allocator::{Allocator, Budget};
use crate::regions::arrivals::Arrivals;
use crate::regions::holder::{Holder, KeyStatus, Mode};
use crate::regions::home;
use crate::regions::{nanos, Grant, RegionConfig, Report};
use crate::topology::ring::Ring;
use crate::topology::routing::Routing;

/// Why a call to another region failed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct RegionCallFailed(pub String);

/// Calls to nodes by gRPC address: other regions' nodes, or this region's
/// owner of a key. The gRPC adapter is `net::regions`; tests use memory.
pub trait RegionLink: Send + Sync + 'static {
    /// Reports for keys homed in the region `addr` is in; `forwarded`:
    /// passed on inside that region, answer them there.
    fn allocate(
        &self,
        addr: &str,
        from: &str,
        reports: Vec<Report>,
        forwarded: bool,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<Vec<Grant>, RegionCallFailed>>;

    /// The region `addr` is in.
    fn hello(
        &self,
        addr: &str,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<String, RegionCallFailed>>;
}

/// A region peer as configured: its address, and its region once known.
#[derive(Debug, Clone)]
struct Peer {
    addr: String,
    region: Option<Arc<str>>,
}

/// Parses `--region-peers` entries: `HOST:PORT` or `REGION=HOST:PORT`.
fn parse_peers(peers: &[String]) -> Vec<Peer> {
    peers
        .iter()
        .map(|p| match p.split_once('=') {
            Some((region, addr)) => Peer {
                addr: addr.trim().to_string(),
                region: Some(region.trim().into()),
            },
            None => Peer {
                addr: p.trim().to_string(),
                region: None,
            },
        })
        .collect()
}

/// The parts that exist once every region is known.
struct Ready {
    /// Every region's name, sorted.
    regions: Vec<Arc<str>>,
    holder: Holder,
    allocator: Allocator,
    /// When keys came to this node as their home allocator.
    arrivals: Mutex<Arrivals>,
}

/// Counters for metrics.
#[derive(Debug, Default)]
pub struct RegionCounts {
    pub reports_sent: AtomicU64,
    pub grants_received: AtomicU64,
    pub calls_failed: AtomicU64,
    pub reports_answered: AtomicU64,
}

/// This node's part in global limits.
pub struct Regional {
    config: RegionConfig,
    me: Arc<str>,
    peers: RwLock<Vec<Peer>>,
    ready: OnceLock<Ready>,
    limiter: Arc<Limiter>,
    routing: Arc<Routing>,
    link: Arc<dyn RegionLink>,
    pub counts: RegionCounts,
}

/// What `GET /v1/cluster` shows of regions.
#[derive(Debug, Clone)]
pub struct RegionStatus {
    pub region: String,
    /// Every region's name, once all are known.
    pub regions: Vec<String>,
    /// Homes not heard from for three rounds, with how long (ms).
    pub unreachable: Vec<(String, u64)>,
    pub keys: Vec<KeyStatus>,
    pub keys_total: usize,
    pub keys_fallback: usize,
    pub allocator_keys: usize,
}

fn budget(rule: &Rule) -> Budget {
    Budget {
        limit: rule.limit,
        window: nanos(rule.window).max(1),
    }
}

impl Regional {
    pub fn new(
        config: RegionConfig,
        limiter: Arc<Limiter>,
        routing: Arc<Routing>,
        link: Arc<dyn RegionLink>,
    ) -> Arc<Regional> {
        let r = Arc::new(Regional {
            me: config.name.as_str().into(),
            peers: RwLock::new(parse_peers(&config.peers)),
            config,
            ready: OnceLock::new(),
            limiter,
            routing,
            link,
            counts: RegionCounts::default(),
        });
        r.try_ready();
        r
    }

    pub fn name(&self) -> &Arc<str> {
        &self.me
    }

    pub fn config(&self) -> &RegionConfig {
        &self.config
    }

    /// Builds the holder and allocator once every peer's region is known.
    fn try_ready(&self) -> bool {
        if self.ready.get().is_some() {
            return true;
        }
        let peers = self.peers.read().clone();
        if peers.iter().any(|p| p.region.is_none()) {
            return false;
        }
        let mut regions: Vec<Arc<str>> = peers.iter().filter_map(|p| p.region.clone()).collect();
        regions.push(self.me.clone());
        regions.sort();
        regions.dedup();
        let now = self.limiter.now();
        let _ = self.ready.set(Ready {
            holder: Holder::new(self.config.clone(), self.routing.me(), &regions, now),
            allocator: Allocator::new(self.config.clone(), &regions),
            arrivals: Mutex::new(Arrivals::new(self.routing.ring(), now)),
            regions: regions.clone(),
        });
        tracing::info!(region = %self.me, ?regions, "every region known; global limits in force");
        true
    }

    /// Asks each peer whose region is not known yet.
    async fn learn(&self) {
        let unknown: Vec<String> = self
            .peers
            .read()
            .iter()
            .filter(|p| p.region.is_none())
            .map(|p| p.addr.clone())
            .collect();
        for addr in unknown {
            match self.link.hello(&addr, self.deadline()).await {
                Ok(region) => {
                    let mut peers = self.peers.write();
                    for p in peers.iter_mut().filter(|p| p.addr == addr) {
                        p.region = Some(region.as_str().into());
                    }
                }
                Err(e) => tracing::debug!(%addr, error = %e, "region peer did not say its region"),
            }
        }
        self.try_ready();
    }

    fn deadline(&self) -> Duration {
        (self.config.round * 4).max(Duration::from_secs(1))
    }

    /// One round: reports to every home region, answers taken.
    pub async fn round(self: &Arc<Self>) {
        if !self.try_ready() {
            self.learn().await;
            return;
        }
        let ready = self.ready.get().expect("ready");
        let now = self.limiter.now();
        let idle = 100 * nanos(self.config.round);
        ready.allocator.sweep(now, idle);
        // Every round, not only when reports come: a key's arrival is
        // counted from when the change was seen.
        self.see_ring(ready, now);
        let mut by_home: Vec<(Arc<str>, Vec<Report>)> = Vec::new();
        for (home, rep) in ready.holder.reports(now) {
            match by_home.iter_mut().find(|(h, _)| *h == home) {
                Some((_, v)) => v.push(rep),
                None => by_home.push((home, vec![rep])),
            }
        }
        let calls = by_home.into_iter().map(|(home, reports)| {
            let me = self.clone();
            async move { me.send_home(home, reports).await }
        });
        futures::future::join_all(calls).await;
    }

    async fn send_home(&self, home: Arc<str>, reports: Vec<Report>) {
        let Some(ready) = self.ready.get() else {
            return;
        };
        self.counts
            .reports_sent
            .fetch_add(reports.len() as u64, Ordering::Relaxed);
        let answer = if home == self.me {
            Ok(self.answer(&self.me.clone(), reports, false).await)
        } else {
            self.call_region(&home, reports).await
        };
        let now = self.limiter.now();
        match answer {
            Ok(grants) => {
                ready.holder.heard_from(&home, now);
                self.counts
                    .grants_received
                    .fetch_add(grants.len() as u64, Ordering::Relaxed);
                for g in &grants {
                    ready.holder.granted(&home, g, now);
                }
            }
            Err(e) => {
                self.counts.calls_failed.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%home, error = %e, "region round failed");
            }
        }
    }

    /// Tries the home region's peers in turn, starting from a different one
    /// each round so that one dead peer costs at most every other round.
    async fn call_region(
        &self,
        home: &Arc<str>,
        reports: Vec<Report>,
    ) -> Result<Vec<Grant>, RegionCallFailed> {
        let addrs: Vec<String> = self
            .peers
            .read()
            .iter()
            .filter(|p| p.region.as_ref() == Some(home))
            .map(|p| p.addr.clone())
            .collect();
        if addrs.is_empty() {
            return Err(RegionCallFailed(format!("no peer in region {home}")));
        }
        let start = (self.limiter.now() / nanos(self.config.round).max(1)) as usize;
        let mut last = RegionCallFailed("no attempt".into());
        for i in 0..addrs.len() {
            let addr = &addrs[(start + i) % addrs.len()];
            match self
                .link
                .allocate(addr, &self.me, reports.clone(), false, self.deadline())
                .await
            {
                Ok(g) => return Ok(g),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// The ring in force, noted in the arrivals.
    fn see_ring(&self, ready: &Ready, now: Nanos) -> Arc<Ring> {
        let ring = self.routing.ring();
        let keep = self.config.silent_after();
        ready.arrivals.lock().see(ring.clone(), now, keep);
        ring
    }

    /// Answers reports from region `from` for keys homed here: this node's
    /// own keys at its allocator, the others passed on to their owners in
    /// this region (or answered here when `forwarded`, or when the owner
    /// cannot be reached: a missing answer would only make the sender wait).
    pub async fn answer(
        &self,
        from: &Arc<str>,
        reports: Vec<Report>,
        forwarded: bool,
    ) -> Vec<Grant> {
        let Some(ready) = self.ready.get() else {
            return Vec::new();
        };
        let rules = self.limiter.rules();
        let ring = self.see_ring(ready, self.limiter.now());
        let me = self.routing.me();
        let mut grants = Vec::new();
        let mut elsewhere: Vec<(String, Vec<Report>)> = Vec::new();
        for mut rep in reports {
            rep.region = from.clone();
            let Some((_, rule)) = rules.get(&rep.rule) else {
                continue;
            };
            if rule.scope != Scope::Global {
                continue;
            }
            let owner = ring.owner(&rep.key);
            match owner {
                Some(o) if !forwarded && o.id != me => {
                    let addr = o.grpc.to_string();
                    match elsewhere.iter_mut().find(|(a, _)| *a == addr) {
                        Some((_, v)) => v.push(rep),
                        None => elsewhere.push((addr, vec![rep])),
                    }
                }
                _ => {
                    self.counts.reports_answered.fetch_add(1, Ordering::Relaxed);
                    let now = self.limiter.now();
                    // Answered for a key this node's ring gives another
                    // (a peer's ring moved it here first): it arrives now,
                    // as far as this node can tell.
                    let arrived = match owner {
                        Some(o) if o.id == me => ready.arrivals.lock().arrived(&rep.key, me),
                        _ => now,
                    };
                    grants.extend(ready.allocator.report(&rep, budget(rule), now, arrived));
                }
            }
        }
        let passes = elsewhere.into_iter().map(|(addr, reps)| {
            let link = self.link.clone();
            let (from, deadline) = (from.clone(), self.deadline());
            async move { link.allocate(&addr, &from, reps, true, deadline).await }
        });
        for r in futures::future::join_all(passes).await {
            match r {
                Ok(g) => grants.extend(g),
                Err(e) => {
                    tracing::debug!(error = %e, "passing region reports to their owner failed")
                }
            }
        }
        grants
    }

    pub fn status(&self, keys: usize) -> RegionStatus {
        let now = self.limiter.now();
        let Some(ready) = self.ready.get() else {
            return RegionStatus {
                region: self.me.to_string(),
                regions: Vec::new(),
                unreachable: Vec::new(),
                keys: Vec::new(),
                keys_total: 0,
                keys_fallback: 0,
                allocator_keys: 0,
            };
        };
        let mut all = ready.holder.status(now);
        let keys_fallback = all.iter().filter(|k| k.mode == Mode::Fallback).count();
        let keys_total = all.len();
        all.sort_by_key(|k| std::cmp::Reverse(k.used));
        all.truncate(keys);
        RegionStatus {
            region: self.me.to_string(),
            regions: ready.regions.iter().map(|r| r.to_string()).collect(),
            unreachable: ready
                .holder
                .unreachable_homes(now)
                .into_iter()
                .map(|(h, quiet)| (h.to_string(), quiet / 1_000_000))
                .collect(),
            keys: all,
            keys_total,
            keys_fallback,
            allocator_keys: ready.allocator.len(),
        }
    }
}

/// The limiter's gate: a global rule's key is admitted only within this
/// region's allocation for it. Until every region is known nothing is:
/// which region is a key's home is not settled before then.
pub struct RegionGate(pub Arc<Regional>);

impl Gate for RegionGate {
    fn take(&self, rule: &Rule, hash_part: &str, cost: u64, now: Nanos) -> Result<(), Duration> {
        let r = &self.0;
        let Some(ready) = r.ready.get() else {
            return Err(r.config.round);
        };
        // `regions` is sorted and deduplicated, and holds this region.
        let home = &ready.regions[home::index(hash_part, ready.regions.len())];
        ready
            .holder
            .take((&rule.name, hash_part), home, budget(rule), cost, now)
    }

    fn give_back(&self, rule: &Rule, hash_part: &str, at: Nanos, cost: u64) {
        if let Some(ready) = self.0.ready.get() {
            ready.holder.give_back(&rule.name, hash_part, at, cost);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::net::SocketAddr;

    use weir_core::{FakeClock, LimiterConfig, RuleSet};

    use super::*;
    use crate::topology::membership::NodeIdentity;
    use crate::topology::ring::Ring;

    /// Peers that say they are in region `b`, or say nothing; none answers
    /// a report.
    pub(crate) struct Says(pub(crate) Option<&'static str>);

    impl RegionLink for Says {
        fn allocate(
            &self,
            _: &str,
            _: &str,
            _: Vec<Report>,
            _: bool,
            _: Duration,
        ) -> BoxFuture<'static, Result<Vec<Grant>, RegionCallFailed>> {
            Box::pin(async { Err(RegionCallFailed("unreachable".into())) })
        }
        fn hello(
            &self,
            _: &str,
            _: Duration,
        ) -> BoxFuture<'static, Result<String, RegionCallFailed>> {
            let said = self.0.map(str::to_string);
            Box::pin(async move { said.ok_or_else(|| RegionCallFailed("silent".into())) })
        }
    }

    pub(crate) fn regional(peers: &[&str], link: Arc<dyn RegionLink>) -> Arc<Regional> {
        let rules = RuleSet::from_toml(
            "[[rule]]\nname = \"g\"\nalgorithm = \"fixed_window\"\nlimit = 400\nwindow = \"1s\"\nscope = \"global\"\n",
        )
        .unwrap();
        let limiter = Arc::new(Limiter::new(
            rules,
            Arc::new(FakeClock::at_secs(100.0)),
            LimiterConfig::default(),
        ));
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let me = NodeIdentity::new("n1", addr, addr);
        let routing = Arc::new(Routing::new("n1".into(), Ring::new(&[me], 16)));
        let mut config = RegionConfig::new("a");
        config.peers = peers.iter().map(|p| p.to_string()).collect();
        let r = Regional::new(config, limiter.clone(), routing, link);
        limiter.set_gate(Arc::new(RegionGate(r.clone())));
        r
    }

    #[tokio::test]
    async fn global_keys_are_refused_until_every_regions_name_is_known() {
        let silent = regional(&["10.0.0.1:1"], Arc::new(Says(None)));
        let rule = silent.limiter.rules().get("g").unwrap().1.clone();
        let now = silent.limiter.now();
        let gate = RegionGate(silent.clone());
        assert!(
            gate.take(&rule, "k", 1, now).is_err(),
            "which region is home is not settled"
        );
        silent.round().await;
        assert!(gate.take(&rule, "k", 1, now).is_err(), "still not");
        let says = regional(&["10.0.0.1:1"], Arc::new(Says(Some("b"))));
        let gate = RegionGate(says.clone());
        says.round().await;
        assert_eq!(says.status(0).regions, ["a", "b"]);
        // Ready: the floor (400 / 40 = 10) is admitted without asking.
        let admitted = (0..20)
            .filter(|_| gate.take(&rule, "k", 1, now).is_ok())
            .count();
        assert_eq!(admitted, 10);
    }

    #[tokio::test]
    async fn a_key_that_came_to_this_node_is_lent_only_once_the_regions_have_reported() {
        let clock = Arc::new(FakeClock::at_secs(100.0));
        let rules = RuleSet::from_toml(
            "[[rule]]\nname = \"g\"\nalgorithm = \"fixed_window\"\nlimit = 400\nwindow = \"10s\"\nscope = \"global\"\n",
        )
        .unwrap();
        let limiter = Arc::new(Limiter::new(rules, clock.clone(), LimiterConfig::default()));
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let (n1, n2) = (
            NodeIdentity::new("n1", addr, addr),
            NodeIdentity::new("n2", addr, addr),
        );
        let both = Ring::new(&[n1.clone(), n2], 16);
        let (moved, stayed) = (both.first_key_of("n2"), both.first_key_of("n1"));
        let routing = Arc::new(Routing::new("n1".into(), both.clone()));
        let mut config = RegionConfig::new("a");
        config.peers = vec!["b=10.0.0.1:1".into()];
        let r = Regional::new(config, limiter, routing.clone(), Arc::new(Says(None)));
        // Past the three rounds after this node started, which count as
        // an arrival of every key.
        clock.advance(Duration::from_secs(1));
        let from_b = Arc::<str>::from("b");
        let granted = |key: &str, forwarded: bool| {
            let rep = Report {
                rule: "g".into(),
                key: key.into(),
                region: from_b.clone(),
                holder: "x".into(),
                window: weir_core::Clock::now(&*clock) / 10_000_000_000,
                used: 0,
                received: 0,
                released: 0,
                allocation: 0,
                fallback: false,
                demand: 1_000,
                retire: false,
                answered: 0,
            };
            let r = r.clone();
            async move { r.answer(&"b".into(), vec![rep], forwarded).await[0].granted }
        };
        // A peer whose ring already moved n2's key here passes its report
        // on: it arrives now, as far as this node can tell.
        assert_eq!(granted(&moved, true).await, 0, "passed on by a peer");
        routing.install(Arc::new(Ring::new(&[n1], 16)));
        assert!(
            granted(&stayed, false).await > 0,
            "its owner did not change"
        );
        assert_eq!(granted(&moved, false).await, 0, "n2 may have lent it");
        clock.advance(Duration::from_millis(760));
        assert!(granted(&moved, false).await > 0, "three rounds on");
    }

    #[tokio::test]
    async fn a_named_peer_needs_no_asking() {
        let r = regional(&["b=10.0.0.1:1"], Arc::new(Says(None)));
        assert_eq!(r.status(0).regions, ["a", "b"]);
    }
}
