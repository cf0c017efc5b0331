//! The limiter: rules, counters and a clock composed into one `check`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use compact_str::{CompactString, ToCompactString};

use crate::algorithm::State;
use crate::clock::{Clock, Nanos};
use crate::decision::Decision;
use crate::error::{CheckError, InputField};
use crate::rules::{Rule, RuleSet, Selection, Subject};
use crate::store::Counters;

/// Longest caller key accepted (bytes). Keys are stored per counter, so this
/// bounds what one key can cost.
pub const MAX_KEY_LEN: usize = 256;
pub const MAX_ROUTE_LEN: usize = 1024;
pub const MAX_TIER_LEN: usize = 64;
/// An IPv6 address with a zone fits well within this.
pub const MAX_IP_LEN: usize = 64;

/// One check as a caller asks it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The caller key: a customer id or API key.
    pub key: &'a str,
    pub route: &'a str,
    pub cost: u64,
    pub tier: Option<&'a str>,
    pub ip: Option<&'a str>,
}

impl<'a> Request<'a> {
    pub fn new(key: &'a str, route: &'a str, cost: u64) -> Self {
        Request {
            key,
            route,
            cost,
            tier: None,
            ip: None,
        }
    }

    /// Refuses malformed attributes before anything is looked up. Returns the
    /// canonical IP text, so `::1` and `0:0:0:0:0:0:0:1` share a counter.
    pub fn validate(&self) -> Result<Option<CompactString>, CheckError> {
        let bad = |field, reason| Err(CheckError::Invalid { field, reason });
        if self.cost == 0 {
            return bad(InputField::Cost, "must be at least 1");
        }
        if self.key.is_empty() {
            return bad(InputField::Key, "must not be empty");
        }
        if self.key.len() > MAX_KEY_LEN {
            return bad(InputField::Key, "must be at most 256 bytes");
        }
        if self.key.chars().any(char::is_control) {
            return bad(InputField::Key, "must not contain control characters");
        }
        if self.route.len() > MAX_ROUTE_LEN {
            return bad(InputField::Route, "must be at most 1024 bytes");
        }
        if self.route.chars().any(char::is_control) {
            return bad(InputField::Route, "must not contain control characters");
        }
        if let Some(t) = self.tier {
            if t.len() > MAX_TIER_LEN || t.chars().any(char::is_control) {
                return bad(
                    InputField::Tier,
                    "must be at most 64 bytes of printable text",
                );
            }
        }
        match self.ip {
            None => Ok(None),
            Some(ip) if ip.len() > MAX_IP_LEN => bad(InputField::Ip, "is too long"),
            Some(ip) => match ip.parse::<IpAddr>() {
                // An IPv4 string the parser accepts is already canonical
                // (it refuses leading zeros and short forms), so it is kept
                // as sent instead of formatted again on every check; only
                // IPv6 has several spellings of one address.
                Ok(IpAddr::V4(_)) => Ok(Some(CompactString::new(ip))),
                Ok(addr) => Ok(Some(addr.to_compact_string())),
                Err(_) => bad(InputField::Ip, "is not an IPv4 or IPv6 address"),
            },
        }
    }
}

/// One limit applied to a request.
#[derive(Debug, Clone)]
pub struct Applied {
    pub rule: Arc<Rule>,
    pub hash_part: CompactString,
    pub decision: Decision,
}

/// The outcome of a check over every limit the request met.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// True when every enforcing limit admitted. Shadow limits never deny.
    pub allowed: bool,
    pub applied: Vec<Applied>,
}

impl Verdict {
    /// The limit whose numbers the caller is shown: the enforcing limit that
    /// denied, or the enforcing one with the least budget left. None when no
    /// enforcing rule applied (the request is unlimited).
    pub fn binding(&self) -> Option<&Applied> {
        let enforcing = self.applied.iter().filter(|a| !a.rule.shadow);
        if self.allowed {
            enforcing.min_by_key(|a| a.decision.remaining)
        } else {
            enforcing
                .filter(|a| !a.decision.allowed)
                .max_by_key(|a| a.decision.retry_after)
        }
    }

    /// Shadow limits that would have denied this request.
    pub fn shadow_denials(&self) -> impl Iterator<Item = &Applied> {
        self.applied
            .iter()
            .filter(|a| a.rule.shadow && !a.decision.allowed)
    }
}

/// One key's counter in portable form: what a node hands a key's next owner.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CounterSnapshot {
    pub rule: String,
    pub hash_part: String,
    pub state: State,
}

#[derive(Debug, Clone, Copy)]
pub struct LimiterConfig {
    /// Ceiling on keys held per rule; beyond it idle keys are swept and new
    /// keys refused, so no caller can grow memory without bound.
    pub max_keys_per_rule: usize,
}

impl Default for LimiterConfig {
    fn default() -> Self {
        LimiterConfig {
            max_keys_per_rule: 1_000_000,
        }
    }
}

/// What [`Limiter::check_placed`] did with a request.
#[derive(Debug)]
pub enum Placed {
    /// Every limit lives here and was decided.
    Decided(Verdict),
    /// Some limit lives elsewhere: nothing was consumed. The rules the
    /// selection indexes into come with it.
    Elsewhere(Arc<RuleSet>, Selection),
}

/// Rules and the counters that go with them, swapped whole on a reload so a
/// check never sees one set's rules with another's counters.
struct Tables {
    rules: Arc<RuleSet>,
    counters: Vec<Arc<Counters>>,
    by_name: HashMap<Arc<str>, usize>,
}

/// Most distinct ad-hoc policies (limits carried by a request itself, such
/// as an Envoy descriptor's override) held at once; each costs a counter table.
pub const MAX_ADHOC_POLICIES: usize = 256;

/// Validates a request and selects its limits in `rules`, refusing a cost
/// that one of them can never admit.
fn select_in(rules: &RuleSet, req: &Request<'_>) -> Result<Selection, CheckError> {
    let ip = req.validate()?;
    let sel = rules.select(&Subject {
        key: req.key,
        route: req.route,
        tier: req.tier,
        ip: ip.as_deref(),
    });
    for s in sel.iter() {
        let rule = &rules.rules()[s.rule];
        let max = rule.policy.max_cost();
        if req.cost > max {
            return Err(CheckError::CostExceedsLimit {
                rule: rule.name.to_string(),
                cost: req.cost,
                max,
            });
        }
    }
    Ok(sel)
}

/// Same algorithm, window and queue: what spent counts mean is unchanged.
fn only_limit_changed(was: &Rule, now: &Rule) -> bool {
    was.algorithm == now.algorithm && was.window == now.window && was.queue == now.queue
}

/// Gives back what the admitted limits of a denied request consumed.
fn refund_all(t: &Tables, applied: &[Applied], cost: u64) {
    for a in applied.iter().filter(|a| a.decision.allowed) {
        if let Some(&i) = t.by_name.get(&a.rule.name) {
            t.counters[i].refund(&a.hash_part, a.decision.at, cost);
        }
    }
}

/// Decides checks in this process.
pub struct Limiter {
    clock: Arc<dyn Clock>,
    config: LimiterConfig,
    tables: ArcSwap<Tables>,
    adhoc: dashmap::DashMap<Arc<str>, Arc<Counters>>,
}

impl Limiter {
    pub fn new(rules: RuleSet, clock: Arc<dyn Clock>, config: LimiterConfig) -> Limiter {
        let limiter = Limiter {
            clock,
            config,
            tables: ArcSwap::from_pointee(Tables {
                rules: Arc::new(RuleSet::empty()),
                counters: Vec::new(),
                by_name: HashMap::new(),
            }),
            adhoc: dashmap::DashMap::new(),
        };
        limiter.install(rules);
        limiter
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    pub fn now(&self) -> Nanos {
        self.clock.now()
    }

    pub fn rules(&self) -> Arc<RuleSet> {
        self.tables.load().rules.clone()
    }

    /// Puts a validated rule set in force. A rule whose name and policy are
    /// unchanged keeps its counters; a new or changed rule starts fresh.
    pub fn install(&self, rules: RuleSet) {
        self.install_with(rules, false);
    }

    /// Like [`Limiter::install`], but a rule whose only change is its limit
    /// (and burst) keeps what its callers spent, for the counting
    /// algorithms: how a divided limiter follows the member count without
    /// handing every caller a fresh budget at each join or leave.
    pub fn install_resized(&self, rules: RuleSet) {
        self.install_with(rules, true);
    }

    fn install_with(&self, rules: RuleSet, resize: bool) {
        let old = self.tables.load_full();
        let now = self.clock.now();
        let max_keys = self.config.max_keys_per_rule;
        let mut counters = Vec::with_capacity(rules.rules().len());
        let mut by_name = HashMap::new();
        for (i, r) in rules.rules().iter().enumerate() {
            let previous = old
                .by_name
                .get(&r.name)
                .map(|&j| (&old.rules.rules()[j], &old.counters[j]));
            let table = match previous {
                Some((_, c)) if *c.policy() == r.policy => Some(c.clone()),
                Some((was, c)) if resize && only_limit_changed(was, r) => {
                    c.resized(r.policy, max_keys, now).map(Arc::new)
                }
                _ => None,
            };
            counters.push(table.unwrap_or_else(|| Arc::new(Counters::new(r.policy, max_keys))));
            by_name.insert(r.name.clone(), i);
        }
        self.tables.store(Arc::new(Tables {
            rules: Arc::new(rules),
            counters,
            by_name,
        }));
    }

    /// Which limits a request meets, after validating it.
    pub fn select(&self, req: &Request<'_>) -> Result<(Arc<RuleSet>, Selection), CheckError> {
        let rules = self.rules();
        let sel = select_in(&rules, req)?;
        Ok((rules, sel))
    }

    /// Decides a request against every limit it meets, all or nothing: a
    /// request that one enforcing limit denies consumes nothing from the
    /// others (what they admitted is refunded before this returns).
    pub fn check(&self, req: &Request<'_>) -> Result<Verdict, CheckError> {
        // One snapshot for the whole check: the rules selected and the
        // counters spent always come from the same reload, and no counter
        // is looked up again by name.
        let t = self.tables.load();
        let sel = select_in(&t.rules, req)?;
        self.decide(&t, &sel, req.cost)
    }

    /// Like [`Limiter::check`], but only when every selected limit's hash
    /// part is placed on this process (`here` says which are). Otherwise
    /// nothing is consumed and the selection is handed back, so a cluster
    /// can take it to the owners without selecting again.
    pub fn check_placed(
        &self,
        req: &Request<'_>,
        here: impl Fn(&str) -> bool,
    ) -> Result<Placed, CheckError> {
        let t = self.tables.load();
        let sel = select_in(&t.rules, req)?;
        if !sel.iter().all(|s| here(&s.hash_part)) {
            return Ok(Placed::Elsewhere(t.rules.clone(), sel));
        }
        self.decide(&t, &sel, req.cost).map(Placed::Decided)
    }

    fn decide(&self, t: &Tables, sel: &Selection, cost: u64) -> Result<Verdict, CheckError> {
        let now = self.clock.now();
        let mut applied: Vec<Applied> = Vec::with_capacity(sel.len());
        for s in sel.iter() {
            let rule = &t.rules.rules()[s.rule];
            let decision = match t.counters[s.rule].consume(&s.hash_part, now, cost) {
                Ok(d) => d,
                Err(_) => {
                    refund_all(t, &applied, cost);
                    return Err(CheckError::StoreFull {
                        rule: rule.name.to_string(),
                        max_keys: self.config.max_keys_per_rule,
                    });
                }
            };
            applied.push(Applied {
                rule: rule.clone(),
                hash_part: s.hash_part.clone(),
                decision,
            });
            if !decision.allowed && !rule.shadow {
                refund_all(t, &applied, cost);
                return Ok(Verdict {
                    allowed: false,
                    applied,
                });
            }
        }
        Ok(Verdict {
            allowed: true,
            applied,
        })
    }

    fn counters(&self, rule: &str) -> Result<Arc<Counters>, CheckError> {
        let t = self.tables.load();
        t.by_name
            .get(rule)
            .map(|&i| t.counters[i].clone())
            .ok_or_else(|| CheckError::UnknownRule(rule.to_string()))
    }

    /// One limit's decision for one key, as an owner takes it for a peer.
    pub fn consume(
        &self,
        rule: &str,
        hash_part: &str,
        cost: u64,
        now: Nanos,
    ) -> Result<Decision, CheckError> {
        let c = self.counters(rule)?;
        if cost == 0 {
            return Err(CheckError::Invalid {
                field: InputField::Cost,
                reason: "must be at least 1",
            });
        }
        let max = c.policy().max_cost();
        if cost > max {
            return Err(CheckError::CostExceedsLimit {
                rule: rule.to_string(),
                cost,
                max,
            });
        }
        c.consume(hash_part, now, cost)
            .map_err(|_| CheckError::StoreFull {
                rule: rule.to_string(),
                max_keys: self.config.max_keys_per_rule,
            })
    }

    /// Gives back what a decision taken at `at` consumed. Unknown rules are
    /// ignored: a rule removed meanwhile has nothing left to refund.
    pub fn refund(&self, rule: &str, hash_part: &str, at: Nanos, cost: u64) {
        if let Ok(c) = self.counters(rule) {
            c.refund(hash_part, at, cost);
        }
    }

    /// Decides one request against a rule that is not in the rule set but
    /// carried by the request (an Envoy descriptor's own limit). Counters are
    /// kept per distinct rule name, at most [`MAX_ADHOC_POLICIES`] of them.
    pub fn check_adhoc(
        &self,
        rule: &Rule,
        hash_part: &str,
        cost: u64,
    ) -> Result<Decision, CheckError> {
        if cost == 0 {
            return Err(CheckError::Invalid {
                field: InputField::Cost,
                reason: "must be at least 1",
            });
        }
        let max = rule.policy.max_cost();
        if cost > max {
            return Err(CheckError::CostExceedsLimit {
                rule: rule.name.to_string(),
                cost,
                max,
            });
        }
        let counters = match self.adhoc.get(&rule.name) {
            Some(c) if *c.policy() == rule.policy => c.clone(),
            _ => {
                if self.adhoc.len() >= MAX_ADHOC_POLICIES && !self.adhoc.contains_key(&rule.name) {
                    return Err(CheckError::StoreFull {
                        rule: rule.name.to_string(),
                        max_keys: MAX_ADHOC_POLICIES,
                    });
                }
                let c = Arc::new(Counters::new(rule.policy, self.config.max_keys_per_rule));
                self.adhoc.insert(rule.name.clone(), c.clone());
                c
            }
        };
        counters
            .consume(hash_part, self.clock.now(), cost)
            .map_err(|_| CheckError::StoreFull {
                rule: rule.name.to_string(),
                max_keys: self.config.max_keys_per_rule,
            })
    }

    /// Drops idle keys of every rule; returns how many. Run it periodically.
    pub fn sweep(&self) -> usize {
        let now = self.clock.now();
        let t = self.tables.load();
        let adhoc: usize = self.adhoc.iter().map(|c| c.sweep(now)).sum();
        // An ad-hoc table with no keys left is as good as absent: drop it so
        // the MAX_ADHOC_POLICIES slots free up again.
        self.adhoc.retain(|_, c| !c.is_empty());
        adhoc + t.counters.iter().map(|c| c.sweep(now)).sum::<usize>()
    }

    /// Keys held across all rules.
    pub fn keys(&self) -> usize {
        self.tables.load().counters.iter().map(|c| c.len()).sum()
    }

    /// Keys held by each rule of the set in force, in the set's order.
    pub fn keys_per_rule(&self) -> Vec<(Arc<str>, usize)> {
        let t = self.tables.load();
        t.rules
            .rules()
            .iter()
            .zip(&t.counters)
            .map(|(r, c)| (r.name.clone(), c.len()))
            .collect()
    }

    /// Keys held by the ad-hoc tables (rules carried by requests), together.
    pub fn adhoc_keys(&self) -> usize {
        self.adhoc.iter().map(|c| c.len()).sum()
    }

    /// Removes and returns every counter whose hash part `keep` rejects.
    pub fn take_unless(&self, mut keep: impl FnMut(&str) -> bool) -> Vec<CounterSnapshot> {
        let t = self.tables.load();
        let mut out = Vec::new();
        for (r, c) in t.rules.rules().iter().zip(&t.counters) {
            for (k, state) in c.take_unless(&mut keep) {
                out.push(CounterSnapshot {
                    rule: r.name.to_string(),
                    hash_part: k.to_string(),
                    state,
                });
            }
        }
        out
    }

    /// Folds in a counter handed over by another node. False when its rule is
    /// unknown here or now uses another algorithm.
    pub fn absorb(&self, snap: CounterSnapshot) -> bool {
        match self.counters(&snap.rule) {
            Ok(c) => c.absorb(&snap.hash_part, snap.state, self.clock.now()),
            Err(_) => false,
        }
    }
}
