//! Rule-set convergence: every node ends up with the same rules, and no write to one tier undoes another's.
//!
//! Peers exchange every tier's last write and merge tier by tier
//! (weir-core `RuleSet::merge`): per tier the write ranked higher by
//! (version, origin node id, the rules' JSON) wins. Two nodes that write
//! two tiers at the same moment therefore both keep both writes; two that
//! write one tier both keep the same one of the two. Writes go out by push
//! at once; pulls after a join and a periodic pull from one random peer
//! (anti-entropy) repair anything a push missed.
//!
//! What travels is the difference: a push carries only the tiers its write
//! changed, each as the edit of the tier's previous write when it has one
//! (`rules_wire`), and a pull names every write the puller holds (tier,
//! version, origin, digest) so the answer carries only the tiers that
//! differ; two nodes in agreement exchange no rules at all. Parsing, validating and
//! installing what arrives runs on the blocking pool, never on the workers
//! that answer checks and drive gossip.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::mpsc;
use weir_core::rules::PeerWrites;
use weir_core::{Limiter, RuleSet, RulesError};
use weir_proto::weir::v1::{PullRulesRequest, RuleSet as WireRuleSet};

use super::membership::NodeIdentity;
use super::routing::Routing;
use super::rules_wire::{differing, from_wire, stamps, to_wire_since, to_wire_whole_since};
use crate::link::Link;
use crate::stats::{bump, Stats};

/// Deadline for rule pushes and pulls; they are off the request path.
const RULES_CALL_DEADLINE: Duration = Duration::from_secs(1);

/// Peers that said (in a Decide call or its answer) they hold a newer rule
/// set than ours: a queue of nodes to pull from.
pub struct RulesHints {
    /// Highest version hinted so far: every answer from a node that is
    /// ahead says so, and one pull per new version is enough.
    hinted: AtomicU64,
    tx: mpsc::UnboundedSender<(NodeIdentity, u64)>,
}

impl RulesHints {
    pub fn new() -> (RulesHints, mpsc::UnboundedReceiver<(NodeIdentity, u64)>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let hints = RulesHints {
            hinted: AtomicU64::new(0),
            tx,
        };
        (hints, rx)
    }

    /// `from` holds rule set `version`: pull it soon if it is new.
    pub fn hint(&self, from: &NodeIdentity, version: u64) {
        if self.hinted.fetch_max(version, Ordering::Relaxed) < version {
            let _ = self.tx.send((from.clone(), version));
        }
    }
}

/// What merging a peer's rules did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Adopted {
    /// The set in force changed.
    pub changed: bool,
    /// A tier came as an edit of a write this node does not hold and was
    /// left out: its sender is to send it whole.
    pub unheld: bool,
}

/// Called with every rule set put in force, whoever wrote it.
pub type OnRules = Arc<dyn Fn(&RuleSet) + Send + Sync>;

/// The rule set in force on this node, kept converged with the peers'.
pub struct Rules {
    /// Held across read-merge-install, so a local write and a received set
    /// cannot both build on the same set and one undo the other. Shared
    /// with the blocking task that merges a peer's set.
    install: Arc<Mutex<()>>,
    limiter: Arc<Limiter>,
    link: Arc<dyn Link>,
    routing: Arc<Routing>,
    stats: Arc<Stats>,
    on_change: OnRules,
}

impl Rules {
    pub fn new(
        limiter: Arc<Limiter>,
        link: Arc<dyn Link>,
        routing: Arc<Routing>,
        stats: Arc<Stats>,
        on_change: OnRules,
    ) -> Self {
        Rules {
            install: Arc::default(),
            limiter,
            link,
            routing,
            stats,
            on_change,
        }
    }

    /// Applies a local write and pushes the result to every member. The
    /// tiers it wrote are signed with this node's id.
    pub fn write(
        &self,
        write: impl FnOnce(&RuleSet) -> Result<RuleSet, RulesError>,
    ) -> Result<Arc<RuleSet>, RulesError> {
        let me = self.routing.me();
        let (set, before) =
            write_signed(&self.install, &self.limiter, me, write, &*self.on_change)?;
        self.push(&set, before);
        Ok(set)
    }

    /// Pushes the tiers of `set` written after `before` to every peer, as
    /// edits where they are; a peer that lacks what an edit was made from
    /// says so and is sent those tiers whole. Builds nothing when there is
    /// no peer (the JSON of a large tier is a good part of what a write
    /// costs).
    fn push(&self, set: &Arc<RuleSet>, before: u64) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let peers = self.routing.peers();
        if peers.is_empty() {
            return;
        }
        let wire = to_wire_since(set, before);
        let pushes: Vec<_> = peers
            .into_iter()
            .map(|m| {
                let (link, stats, set) = (self.link.clone(), self.stats.clone(), set.clone());
                let edits = wire.clone();
                async move {
                    let pushed = match link.push_rules(&m, edits, RULES_CALL_DEADLINE).await {
                        Ok(answer) if answer.wants_whole => {
                            let whole =
                                crate::offload::blocking(move || to_wire_whole_since(&set, before))
                                    .await
                                    .unwrap_or_default();
                            link.push_rules(&m, whole, RULES_CALL_DEADLINE).await
                        }
                        answered => answered,
                    };
                    match pushed {
                        Ok(_) => bump(&stats.rules_pushed, 1),
                        // Anti-entropy pulls repair a missed push.
                        Err(e) => tracing::debug!(peer = %m.id, error = %e, "rules push failed"),
                    }
                }
            })
            .collect();
        rt.spawn(futures::future::join_all(pushes));
    }

    /// Merges in what `from` holds that differs from ours.
    pub async fn pull(&self, from: &NodeIdentity) {
        // Twice at most: an answer made of edits of writes this node
        // replaced meanwhile is asked for again under the new stamps.
        for _ in 0..2 {
            let limiter = self.limiter.clone();
            // A stamp's digest is worked out once per write, over every
            // rule of the tier: not on a worker.
            let Some(have) = crate::offload::blocking(move || stamps(&limiter.rules())).await
            else {
                return;
            };
            match self.link.pull_rules(from, have, RULES_CALL_DEADLINE).await {
                Ok(wire) => match self.adopt(wire, &from.id).await {
                    Ok(adopted) if adopted.unheld => continue,
                    _ => return,
                },
                Err(e) => {
                    tracing::debug!(peer = %from.id, error = %e, "rules pull failed");
                    return;
                }
            }
        }
    }

    /// Pulls from one random peer (anti-entropy).
    pub async fn pull_from_anyone(&self) {
        use rand::seq::IndexedRandom;
        let peer = crate::determinism::with_rng(|r| self.routing.peers().choose(r).cloned());
        if let Some(peer) = peer {
            self.pull(&peer).await;
        }
    }

    /// Merges a peer's set (some or all of its tiers) into ours. An
    /// invalid set is refused whole and changes nothing. A set with no
    /// tiers changes nothing and costs nothing.
    pub async fn adopt(&self, wire: WireRuleSet, from: &str) -> Result<Adopted, RulesError> {
        if wire.tiers.is_empty() && wire.version <= self.limiter.rules().version() {
            return Ok(Adopted::default());
        }
        let (install, limiter, on_change) = (
            self.install.clone(),
            self.limiter.clone(),
            self.on_change.clone(),
        );
        // Tens of thousands of rules take tens of milliseconds to parse and
        // index: on a worker, that is checks and gossip probes waiting.
        let merged = crate::offload::blocking(move || {
            // Edits are rebuilt from the set in force before the lock: a
            // rebuilt write is checked against its sender's digest, so it
            // is that write whatever was installed meanwhile.
            let offered = from_wire(&wire, &limiter.rules())?;
            let set = merge_in(&install, &limiter, &offered.writes, &*on_change)?;
            Ok((set, offered.unheld))
        })
        .await
        .unwrap_or(Ok((None, false)))
        .inspect_err(|e: &RulesError| {
            tracing::warn!(from, error = %e, "refused an invalid rule set from a peer");
        })?;
        let (merged, unheld) = merged;
        if unheld {
            tracing::debug!(
                from,
                "a peer's edit of a write this node does not hold was left out"
            );
        }
        let Some(set) = merged else {
            return Ok(Adopted {
                changed: false,
                unheld,
            });
        };
        bump(&self.stats.rules_adopted, 1);
        tracing::info!(version = set.version(), from, "merged a peer's rule set");
        for r in set.displaced() {
            tracing::warn!(
                rule = %r.name,
                tier = r.tier.as_deref().unwrap_or("*"),
                "rule not in force: another tier's later write uses its name"
            );
        }
        Ok(Adopted {
            changed: true,
            unheld,
        })
    }

    /// The set in force.
    pub fn current_set(&self) -> Arc<RuleSet> {
        self.limiter.rules()
    }

    pub(crate) fn routing(&self) -> &Arc<Routing> {
        &self.routing
    }

    pub(crate) fn link(&self) -> &Arc<dyn Link> {
        &self.link
    }

    /// The set in force, as peers exchange it: only the tiers whose write
    /// differs from those `have` names (every tier when it names none).
    /// On the blocking pool: digests and whole tiers are worked out over
    /// every rule of a tier.
    pub async fn current(&self, have: PullRulesRequest) -> WireRuleSet {
        let limiter = self.limiter.clone();
        crate::offload::blocking(move || differing(&limiter.rules(), &have))
            .await
            .unwrap_or_default()
    }

    /// Pulls from peers that hinted at a newer set, until the hints end.
    pub async fn follow_hints(&self, mut hints: mpsc::UnboundedReceiver<(NodeIdentity, u64)>) {
        while let Some((from, version)) = hints.recv().await {
            if version > self.limiter.rules().version() {
                self.pull(&from).await;
            }
        }
    }
}

/// Applies `write` to the set in force under `install`, signs the tiers it
/// wrote with `me`, puts the result in force and tells `installed`, still
/// under `install`: two installs tell it in the order they happened, so
/// the last set it hears is the one in force.
/// Returns the new set and the version it was written over.
fn write_signed(
    install: &Mutex<()>,
    limiter: &Limiter,
    me: &str,
    write: impl FnOnce(&RuleSet) -> Result<RuleSet, RulesError>,
    installed: &(dyn Fn(&RuleSet) + Send + Sync),
) -> Result<(Arc<RuleSet>, u64), RulesError> {
    let _one = install.lock();
    let current = limiter.rules();
    let next = write(&current)?.signed(me, current.version());
    limiter.install(next);
    let set = limiter.rules();
    installed(&set);
    Ok((set, current.version()))
}

/// Merges `offered` into the set in force under `install`, telling
/// `installed` as [`write_signed`] does; the new set when anything changed.
fn merge_in(
    install: &Mutex<()>,
    limiter: &Limiter,
    offered: &PeerWrites,
    installed: &(dyn Fn(&RuleSet) + Send + Sync),
) -> Result<Option<Arc<RuleSet>>, RulesError> {
    let _one = install.lock();
    let Some(merged) = limiter.rules().merge_writes(offered)? else {
        return Ok(None);
    };
    limiter.install(merged);
    let set = limiter.rules();
    installed(&set);
    Ok(Some(set))
}

#[cfg(test)]
mod tests {
    use super::super::rules_wire::{to_wire, Offered};
    use super::*;
    use weir_core::{FakeClock, LimiterConfig};
    use weir_proto::weir::v1::TierRules;

    /// A peer's set, every tier of it whole.
    fn from_wire(wire: &WireRuleSet) -> Result<PeerWrites, RulesError> {
        super::from_wire(wire, &RuleSet::empty()).map(|o: Offered| o.writes)
    }

    fn set(limit: u64, version: u64) -> RuleSet {
        RuleSet::from_toml(&format!(
            "version = {version}\n[[rule]]\nname = \"r\"\nalgorithm = \"fixed_window\"\nlimit = {limit}\nwindow = \"60s\"\n"
        ))
        .unwrap()
    }

    fn tier_rules(tier: &str, limit: u64) -> Vec<weir_core::Rule> {
        let body = format!(
            r#"{{"rules":[{{"name":"{tier}-r","algorithm":"fixed_window","limit":{limit},"window":"60s"}}]}}"#
        );
        RuleSet::parse_tier_json(Some(tier), &body).unwrap()
    }

    /// A node's view: its limiter and install lock.
    struct Node(Limiter, Mutex<()>, &'static str);

    impl Node {
        fn new(s: RuleSet, id: &'static str) -> Self {
            Node(
                Limiter::new(s, Arc::new(FakeClock::new(0)), LimiterConfig::default()),
                Mutex::new(()),
                id,
            )
        }

        fn write(
            &self,
            f: impl FnOnce(&RuleSet) -> Result<RuleSet, RulesError>,
        ) -> Result<WireRuleSet, RulesError> {
            write_signed(&self.1, &self.0, self.2, f, &|_| {}).map(|(s, _)| to_wire(&s))
        }

        fn offer(&self, wire: &WireRuleSet) -> Result<bool, RulesError> {
            let offered = super::from_wire(wire, &self.0.rules())?;
            Ok(merge_in(&self.1, &self.0, &offered.writes, &|_| {})?.is_some())
        }

        fn limit_of(&self, name: &str) -> Option<u64> {
            self.0.rules().get(name).map(|(_, r)| r.limit)
        }
    }

    /// Guard: the strategy hears of each set under the install lock. Told
    /// after it, an install that comes second could be told first, and the
    /// strategy (the divide one rebuilds its limits) keep the older set.
    #[test]
    fn the_last_set_heard_of_is_the_one_in_force() {
        let node = Node::new(set(5, 1), "node-a");
        let heard = std::sync::Mutex::new(Vec::new());
        let (installed_tx, installed_rx) = std::sync::mpsc::channel();
        let tell = |s: &RuleSet| {
            if s.version() == 2 {
                // The second install starts while the first is being told.
                installed_tx.send(()).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            heard.lock().unwrap().push(s.version());
        };
        let (v2, v3) = (to_wire(&set(6, 2)), to_wire(&set(7, 3)));
        std::thread::scope(|t| {
            t.spawn(|| merge_in(&node.1, &node.0, &from_wire(&v2).unwrap(), &tell));
            installed_rx.recv().unwrap();
            t.spawn(|| merge_in(&node.1, &node.0, &from_wire(&v3).unwrap(), &tell));
        });
        assert_eq!(node.0.rules().version(), 3);
        assert_eq!(*heard.lock().unwrap(), [2, 3]);
    }

    /// Guard: a pull names what the puller holds, and the answer carries
    /// only what differs: nothing between nodes in agreement, the one tier
    /// a write changed, a start file that differs at the same version.
    #[test]
    fn a_pull_carries_only_the_tiers_that_differ() {
        let (a, b) = (
            Node::new(set(5, 1), "node-a"),
            Node::new(set(5, 1), "node-b"),
        );
        let answer = differing(&a.0.rules(), &stamps(&b.0.rules()));
        assert!(answer.tiers.is_empty(), "in agreement: no rules travel");
        a.write(|cur| cur.with_tier(Some("free"), tier_rules("free", 10), cur.next_version()?))
            .unwrap();
        let answer = differing(&a.0.rules(), &stamps(&b.0.rules()));
        let tiers: Vec<_> = answer.tiers.iter().map(|t| t.tier.as_deref()).collect();
        assert_eq!(tiers, [Some("free")], "only the tier written");
        assert!(b.offer(&answer).unwrap());
        assert_eq!(
            to_wire(&b.0.rules()),
            to_wire(&a.0.rules()),
            "the part was enough"
        );
        // Same version, same (empty) origin, other rules: the digest tells.
        let c = Node::new(set(6, 1), "node-c");
        let answer = differing(&c.0.rules(), &stamps(&Node::new(set(5, 1), "x").0.rules()));
        assert_eq!(answer.tiers.len(), 1);
        // A caller that names nothing gets every tier.
        assert_eq!(
            differing(&a.0.rules(), &PullRulesRequest::default())
                .tiers
                .len(),
            2
        );
    }

    /// Guard: a push carries the tiers its write changed and no other.
    #[test]
    fn a_write_pushes_only_the_tiers_it_wrote() {
        let a = Node::new(set(5, 1), "node-a");
        let (written, before) = write_signed(
            &a.1,
            &a.0,
            a.2,
            |cur| cur.with_tier(Some("pro"), tier_rules("pro", 20), cur.next_version()?),
            &|_| {},
        )
        .unwrap();
        let pushed = to_wire_since(&written, before);
        let tiers: Vec<_> = pushed.tiers.iter().map(|t| t.tier.as_deref()).collect();
        assert_eq!(tiers, [Some("pro")]);
        let b = Node::new(set(5, 1), "node-b");
        assert!(b.offer(&pushed).unwrap());
        assert_eq!(b.limit_of("pro-r"), Some(20));
        assert_eq!(b.limit_of("r"), Some(5), "the tiers not carried stay");
    }

    #[test]
    fn a_newer_write_wins_and_an_older_one_changes_nothing() {
        let (a, b) = (
            Node::new(set(5, 1), "node-a"),
            Node::new(set(5, 1), "node-b"),
        );
        let pushed = a
            .write(|cur| {
                cur.with_tier(
                    None,
                    set(50, 0).rules().iter().map(|r| (**r).clone()).collect(),
                    cur.next_version()?,
                )
            })
            .unwrap();
        assert_eq!(pushed.version, 2);
        assert!(b.offer(&pushed).unwrap());
        assert_eq!((b.0.rules().version(), b.limit_of("r")), (2, Some(50)));
        assert!(!b.offer(&pushed).unwrap(), "same set again");
        assert!(!b.offer(&to_wire(&set(5, 1))).unwrap(), "an older set");
        assert_eq!(to_wire(&b.0.rules()), to_wire(&a.0.rules()));
    }

    #[test]
    fn writes_to_two_tiers_on_two_nodes_at_once_both_stay_on_both() {
        let (a, b) = (
            Node::new(set(5, 1), "node-a"),
            Node::new(set(5, 1), "node-b"),
        );
        let from_a = a
            .write(|cur| cur.with_tier(Some("free"), tier_rules("free", 10), cur.next_version()?))
            .unwrap();
        let from_b = b
            .write(|cur| cur.with_tier(Some("pro"), tier_rules("pro", 20), cur.next_version()?))
            .unwrap();
        assert_eq!(from_a.version, from_b.version, "both built on version 1");
        assert!(a.offer(&from_b).unwrap());
        assert!(b.offer(&from_a).unwrap());
        for n in [&a, &b] {
            assert_eq!(n.limit_of("free-r"), Some(10), "{}", n.2);
            assert_eq!(n.limit_of("pro-r"), Some(20), "{}", n.2);
            assert_eq!(n.limit_of("r"), Some(5), "{}", n.2);
        }
        assert_eq!(to_wire(&a.0.rules()), to_wire(&b.0.rules()));
    }

    #[test]
    fn concurrent_writes_of_one_tier_settle_on_the_higher_origin() {
        let (a, b) = (
            Node::new(set(5, 1), "node-a"),
            Node::new(set(5, 1), "node-b"),
        );
        let from_a = a.write(|_| Ok(set(10, 2))).unwrap();
        let from_b = b.write(|_| Ok(set(20, 2))).unwrap();
        assert!(a.offer(&from_b).unwrap());
        assert!(!b.offer(&from_a).unwrap());
        assert_eq!(a.limit_of("r"), Some(20));
        assert_eq!(b.limit_of("r"), Some(20));
    }

    #[test]
    fn different_start_files_at_one_version_still_converge() {
        let (a, b) = (
            Node::new(set(5, 1), "node-a"),
            Node::new(set(6, 1), "node-b"),
        );
        let (wa, wb) = (to_wire(&a.0.rules()), to_wire(&b.0.rules()));
        let a_took = a.offer(&wb).unwrap();
        let b_took = b.offer(&wa).unwrap();
        assert!(a_took != b_took, "exactly one side adopts");
        assert_eq!(a.limit_of("r"), b.limit_of("r"));
    }

    #[test]
    fn an_invalid_offer_changes_nothing() {
        let a = Node::new(set(5, 1), "node-a");
        let bad = WireRuleSet {
            version: 9,
            tiers: vec![TierRules {
                tier: None,
                version: 9,
                origin: "x".into(),
                rules_json: "{\"rules\":[{\"name\":\"r\",\"limit\":0}]}".into(),
                edit: None,
            }],
        };
        assert!(a.offer(&bad).is_err());
        // A rule naming a tier other than the write's is refused too.
        let free = RuleSet::new(0, tier_rules("free", 7)).unwrap();
        let misfiled = WireRuleSet {
            version: 9,
            tiers: vec![TierRules {
                tier: Some("pro".into()),
                version: 9,
                origin: "x".into(),
                rules_json: to_wire(&free).tiers[0].rules_json.clone(),
                edit: None,
            }],
        };
        assert!(a.offer(&misfiled).is_err());
        assert_eq!(a.0.rules().tier(Some("pro")).count(), 0);
        assert_eq!(
            (a.0.rules().tier_version(None), a.limit_of("r")),
            (1, Some(5))
        );
    }

    #[test]
    fn a_version_past_the_ceiling_is_refused_and_writes_never_wrap() {
        let a = Node::new(set(5, 1), "node-a");
        let mut forged = to_wire(&a.0.rules());
        forged.version = u64::MAX;
        forged.tiers[0].version = u64::MAX;
        forged.tiers[0].origin = "stranger".into();
        assert!(a.offer(&forged).is_err(), "u64::MAX is refused");
        assert_eq!(a.0.rules().version(), 1);

        // At the ceiling itself a set is valid, but no later write is: it
        // fails with an error instead of wrapping to 0, which every peer
        // would rank below the set it holds.
        forged.version = weir_core::MAX_RULES_VERSION;
        forged.tiers[0].version = weir_core::MAX_RULES_VERSION;
        assert!(a.offer(&forged).unwrap());
        let next = a.write(|cur| Ok(set(7, cur.next_version()?)));
        assert!(next.is_err(), "a write past the ceiling is refused");
        assert_eq!(a.0.rules().version(), weir_core::MAX_RULES_VERSION);
        assert_eq!(a.limit_of("r"), Some(5));
    }
}
