//! Rule-set convergence: every node ends up with the same versioned set.
//!
//! A set is ranked by (version, origin node id, digest of its JSON): a
//! receiver adopts a pushed or pulled set only when it ranks higher than
//! its own. Two nodes that both wrote version 7 therefore pick the same one
//! (the higher origin id), and two nodes started from different files at
//! the same version still agree (the higher digest). Writes go out by push
//! at once; pulls after a join and a periodic pull from one random peer
//! (anti-entropy) repair anything a push missed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use weir_core::{Limiter, RuleSet, RulesError};
use weir_proto::weir::v1::RuleSet as WireRuleSet;

use super::membership::NodeIdentity;
use super::routing::Routing;
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

/// Called with every rule set put in force, whoever wrote it.
pub type OnRules = Arc<dyn Fn(&RuleSet) + Send + Sync>;

/// The rule set in force on this node, kept converged with the peers'.
pub struct Rules {
    sync: RulesSync,
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
            sync: RulesSync::new(&limiter.rules()),
            limiter,
            link,
            routing,
            stats,
            on_change,
        }
    }

    /// Applies a local write and pushes the result to every member.
    pub fn write(
        &self,
        write: impl FnOnce(&RuleSet) -> Result<RuleSet, RulesError>,
    ) -> Result<Arc<RuleSet>, RulesError> {
        let (set, wire) = self.sync.write(&self.limiter, self.routing.me(), write)?;
        (self.on_change)(&set);
        self.push(wire);
        Ok(set)
    }

    fn push(&self, wire: WireRuleSet) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let pushes: Vec<_> = self
            .routing
            .peers()
            .into_iter()
            .map(|m| {
                let call = self.link.push_rules(&m, wire.clone(), RULES_CALL_DEADLINE);
                let stats = self.stats.clone();
                async move {
                    match call.await {
                        Ok(_) => bump(&stats.rules_pushed, 1),
                        // Anti-entropy pulls repair a missed push.
                        Err(e) => tracing::debug!(peer = %m.id, error = %e, "rules push failed"),
                    }
                }
            })
            .collect();
        rt.spawn(futures::future::join_all(pushes));
    }

    /// Takes the rule set from `from` if it ranks above ours.
    pub async fn pull(&self, from: &NodeIdentity) {
        let have = self.limiter.rules().version();
        match self.link.pull_rules(from, have, RULES_CALL_DEADLINE).await {
            Ok(wire) => {
                let _ = self.adopt(&wire, &from.id);
            }
            Err(e) => tracing::debug!(peer = %from.id, error = %e, "rules pull failed"),
        }
    }

    /// Pulls from one random peer (anti-entropy).
    pub async fn pull_from_anyone(&self) {
        use rand::seq::IndexedRandom;
        let peer = self.routing.peers().choose(&mut rand::rng()).cloned();
        if let Some(peer) = peer {
            self.pull(&peer).await;
        }
    }

    /// Offers a peer's set; Ok(true) when it was adopted.
    pub fn adopt(&self, wire: &WireRuleSet, from: &str) -> Result<bool, RulesError> {
        let adopted = self.sync.offer(&self.limiter, wire).inspect_err(|e| {
            tracing::warn!(from, error = %e, "refused an invalid rule set from a peer");
        })?;
        if adopted {
            bump(&self.stats.rules_adopted, 1);
            (self.on_change)(&self.limiter.rules());
            tracing::info!(version = wire.version, origin = %wire.origin, from, "adopted a peer's rule set");
        }
        Ok(adopted)
    }

    /// The set in force, as peers exchange it.
    pub fn current(&self) -> WireRuleSet {
        self.sync.current(&self.limiter)
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

/// What is known about the set in force beyond its version.
struct Meta {
    /// Node id where the set was written; empty for the set a node started
    /// with from its own file or defaults.
    origin: String,
    /// The JSON as adopted, served verbatim to pullers.
    json: Arc<str>,
    digest: [u8; 32],
}

fn digest(json: &str) -> [u8; 32] {
    Sha256::digest(json.as_bytes()).into()
}

struct RulesSync {
    /// Held across compare-and-install so a local write and a received set
    /// cannot both build on the same version.
    meta: Mutex<Meta>,
}

impl RulesSync {
    fn new(current: &RuleSet) -> Self {
        let json: Arc<str> = current.to_json().to_string().into();
        RulesSync {
            meta: Mutex::new(Meta {
                origin: String::new(),
                digest: digest(&json),
                json,
            }),
        }
    }

    /// Applies a local write (`write` maps the set in force to the next one)
    /// under the lock; returns the new set and its wire form to push.
    fn write(
        &self,
        limiter: &Limiter,
        me: &str,
        write: impl FnOnce(&RuleSet) -> Result<RuleSet, RulesError>,
    ) -> Result<(Arc<RuleSet>, WireRuleSet), RulesError> {
        let mut meta = self.meta.lock();
        let next = write(&limiter.rules())?;
        limiter.install(next);
        let set = limiter.rules();
        let json: Arc<str> = set.to_json().to_string().into();
        *meta = Meta {
            origin: me.to_string(),
            digest: digest(&json),
            json,
        };
        let wire = wire(set.version(), &meta);
        Ok((set, wire))
    }

    /// Adopts `offered` if it ranks above the set in force. Ok(true) when
    /// it was installed; an invalid set is refused and changes nothing.
    fn offer(&self, limiter: &Limiter, offered: &WireRuleSet) -> Result<bool, RulesError> {
        let offered_digest = digest(&offered.rules_json);
        let mut meta = self.meta.lock();
        let mine = (limiter.rules().version(), meta.origin.as_str(), meta.digest);
        let theirs = (offered.version, offered.origin.as_str(), offered_digest);
        if theirs <= mine {
            return Ok(false);
        }
        let set = RuleSet::from_json(&offered.rules_json)?.with_version(offered.version)?;
        limiter.install(set);
        *meta = Meta {
            origin: offered.origin.clone(),
            json: offered.rules_json.as_str().into(),
            digest: offered_digest,
        };
        Ok(true)
    }

    /// The set in force, as peers exchange it.
    fn current(&self, limiter: &Limiter) -> WireRuleSet {
        let meta = self.meta.lock();
        wire(limiter.rules().version(), &meta)
    }
}

fn wire(version: u64, meta: &Meta) -> WireRuleSet {
    WireRuleSet {
        version,
        origin: meta.origin.clone(),
        rules_json: meta.json.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::{FakeClock, LimiterConfig};

    fn set(limit: u64, version: u64) -> RuleSet {
        RuleSet::from_toml(&format!(
            "version = {version}\n[[rule]]\nname = \"r\"\nalgorithm = \"fixed_window\"\nlimit = {limit}\nwindow = \"60s\"\n"
        ))
        .unwrap()
    }

    fn limiter(s: RuleSet) -> Limiter {
        Limiter::new(s, Arc::new(FakeClock::new(0)), LimiterConfig::default())
    }

    fn limit_of(l: &Limiter) -> u64 {
        l.rules().rules()[0].limit
    }

    #[test]
    fn higher_version_wins_and_lower_is_ignored() {
        let (a, b) = (limiter(set(5, 1)), limiter(set(5, 1)));
        let (sa, sb) = (RulesSync::new(&a.rules()), RulesSync::new(&b.rules()));
        let (_, pushed) = sa
            .write(&a, "node-a", |cur| Ok(set(50, cur.version() + 1)))
            .unwrap();
        assert_eq!(pushed.version, 2);
        assert!(sb.offer(&b, &pushed).unwrap());
        assert_eq!((b.rules().version(), limit_of(&b)), (2, 50));
        assert!(!sb.offer(&b, &pushed).unwrap(), "same set again");
        let stale = WireRuleSet {
            version: 1,
            ..pushed.clone()
        };
        assert!(!sb.offer(&b, &stale).unwrap());
        assert_eq!(sb.current(&b), sa.current(&a));
    }

    #[test]
    fn concurrent_writes_of_one_version_settle_on_the_higher_origin() {
        let (a, b) = (limiter(set(5, 1)), limiter(set(5, 1)));
        let (sa, sb) = (RulesSync::new(&a.rules()), RulesSync::new(&b.rules()));
        let (_, from_a) = sa.write(&a, "node-a", |_| Ok(set(10, 2))).unwrap();
        let (_, from_b) = sb.write(&b, "node-b", |_| Ok(set(20, 2))).unwrap();
        assert!(sa.offer(&a, &from_b).unwrap());
        assert!(!sb.offer(&b, &from_a).unwrap());
        assert_eq!(limit_of(&a), 20);
        assert_eq!(limit_of(&b), 20);
    }

    #[test]
    fn different_start_files_at_one_version_still_converge() {
        let (a, b) = (limiter(set(5, 1)), limiter(set(6, 1)));
        let (sa, sb) = (RulesSync::new(&a.rules()), RulesSync::new(&b.rules()));
        let (wa, wb) = (sa.current(&a), sb.current(&b));
        let a_took = sa.offer(&a, &wb).unwrap();
        let b_took = sb.offer(&b, &wa).unwrap();
        assert!(a_took != b_took, "exactly one side adopts");
        assert_eq!(limit_of(&a), limit_of(&b));
    }

    #[test]
    fn an_invalid_offer_changes_nothing() {
        let a = limiter(set(5, 1));
        let sa = RulesSync::new(&a.rules());
        let bad = WireRuleSet {
            version: 9,
            origin: "x".into(),
            rules_json: "{\"rules\":[{\"name\":\"r\",\"limit\":0}]}".into(),
        };
        assert!(sa.offer(&a, &bad).is_err());
        assert_eq!((a.rules().version(), limit_of(&a)), (1, 5));
    }

    #[test]
    fn a_version_past_the_ceiling_is_refused_and_writes_never_wrap() {
        let a = limiter(set(5, 1));
        let sa = RulesSync::new(&a.rules());
        let forged = WireRuleSet {
            version: u64::MAX,
            origin: "stranger".into(),
            rules_json: a.rules().to_json().to_string(),
        };
        assert!(sa.offer(&a, &forged).is_err(), "u64::MAX is refused");
        assert_eq!(a.rules().version(), 1);

        // At the ceiling itself a set is valid, but no later write is: it
        // fails with an error instead of wrapping to 0, which every peer
        // would rank below the set it holds.
        let top = WireRuleSet {
            version: weir_core::MAX_RULES_VERSION,
            ..forged
        };
        assert!(sa.offer(&a, &top).unwrap());
        let next = sa.write(&a, "node-a", |cur| Ok(set(7, cur.next_version()?)));
        assert!(next.is_err(), "a write past the ceiling is refused");
        assert_eq!(a.rules().version(), weir_core::MAX_RULES_VERSION);
        assert_eq!(limit_of(&a), 5);
    }
}
