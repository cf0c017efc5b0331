//! The limiter: rules, counters and a clock composed into one `check`.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use compact_str::CompactString;

use crate::algorithm::{Policy, State};
use crate::check::{CheckRequest, CheckResponse, Decide, MAX_KEY_LEN};
use crate::clock::{Clock, Nanos};
use crate::decision::Decision;
use crate::error::{CheckError, InputField, Unavailable};
use crate::rules::{Rule, RuleSet, Scope, SelectMemo, Selection, Subject};
use crate::snapshot::{Absorb, CarriedLimit, CounterSnapshot};
use crate::store::{AbsorbError, Carried, Counters, StoreCounts};

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
    /// The verdict of one limit alone (a carried limit's decision).
    pub fn single(rule: Arc<Rule>, hash_part: &str, decision: Decision) -> Verdict {
        Verdict {
            allowed: decision.allowed,
            applied: vec![Applied {
                rule,
                hash_part: hash_part.into(),
                decision,
            }],
        }
    }

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
    /// selection indexes into come with it. Boxed: a selection is 88
    /// bytes, and a batch's answers, mostly decided here, are moved
    /// several times (at 136 bytes each, unboxed, they were).
    Elsewhere(Arc<RuleSet>, Box<Selection>),
}

/// Rules and the counters that go with them, swapped whole on a reload so a
/// check never sees one set's rules with another's counters.
struct Tables {
    rules: Arc<RuleSet>,
    counters: Vec<Arc<Counters>>,
}

impl Tables {
    /// The position of the rule called `name` (the set's own index).
    fn position(&self, name: &str) -> Option<usize> {
        self.rules.get(name).map(|(i, _)| i)
    }
}

/// Validates a request and selects its limits in `rules`, refusing a cost
/// that one of them can never admit.
/// A batch passes its `memo`; a lone request none.
fn select_in(
    rules: &RuleSet,
    req: &CheckRequest,
    memo: Option<&mut SelectMemo>,
) -> Result<Selection, CheckError> {
    // The memo's route and tier passed on an earlier item of the batch.
    let known = memo
        .as_deref()
        .is_some_and(|m| m.vouches_for(&req.route, req.tier.as_deref()));
    let ip = req.validate_trusting(known)?;
    let subject = Subject {
        key: &req.key,
        route: &req.route,
        tier: req.tier.as_deref(),
        ip: ip.as_deref(),
    };
    let sel = match memo {
        Some(memo) => rules.select_with(&subject, memo),
        None => rules.select(&subject),
    };
    for s in sel.iter() {
        CheckError::fits(&rules.rules()[s.rule], req.cost)?;
    }
    Ok(sel)
}

/// Brings the counters of every selected limit into cache before any is
/// decided, one rule's table at a time (see `Counters::warm`). `expected`
/// is about how many limits there are (mostly one per selection), so the
/// vector of their keys is sized once instead of grown.
fn warm<'s>(t: &Tables, selections: impl Iterator<Item = &'s Selection>, expected: usize) {
    let mut by_rule: Vec<(usize, &str)> = Vec::with_capacity(expected);
    by_rule.extend(
        selections
            .flat_map(Selection::iter)
            .map(|s| (s.rule, s.hash_part)),
    );
    // Mostly one rule for the whole batch: nothing to sort then.
    if by_rule.windows(2).any(|w| w[0].0 != w[1].0) {
        by_rule.sort_unstable_by_key(|p| p.0);
    }
    for group in by_rule.chunk_by(|a, b| a.0 == b.0) {
        // How many it found matters to its tests only.
        let _ = t.counters[group[0].0].warm(group.iter().map(|p| p.1));
    }
}

/// The most items `iter` says it may yield, or the least when it cannot
/// say; never more than a few thousand unless it is sure to yield them,
/// so an iterator that bounds itself loosely reserves no huge vector.
fn most(iter: &impl Iterator) -> usize {
    let (least, most) = iter.size_hint();
    least.max(most.unwrap_or(least).min(4096))
}

/// A request's limits, and whether every one of them is placed here.
type Placement = (Selection, bool);

fn store_full(rule: &str, max_keys: usize) -> CheckError {
    Unavailable::StoreFull {
        rule: rule.to_string(),
        max_keys,
    }
    .into()
}

fn valid_cost(cost: u64) -> Result<(), CheckError> {
    if cost == 0 {
        return Err(CheckError::invalid(InputField::Cost, "must be at least 1"));
    }
    Ok(())
}

/// Same algorithm, window and queue: what spent counts mean is unchanged.
fn only_limit_changed(was: &Rule, now: &Rule) -> bool {
    was.algorithm == now.algorithm && was.window == now.window && was.queue == now.queue
}

/// Budget that a global rule's keys draw from before their counter: the
/// share of the limit this region holds (weir-cluster's regions). A rule
/// with `scope = "global"` is admitted only when both its gate and its
/// counter admit; a limiter without a gate decides it as a regional rule.
pub trait Gate: Send + Sync {
    /// Takes `cost` of (rule, key) at `now`; when the share has no room,
    /// how long until it might, and nothing is taken.
    fn take(&self, rule: &Rule, hash_part: &str, cost: u64, now: Nanos) -> Result<(), Duration>;
    /// Gives back `cost` taken at `at`.
    fn give_back(&self, rule: &Rule, hash_part: &str, at: Nanos, cost: u64);
}

/// Decides checks in this process: a rule set, its counters and a clock.
///
/// A [`Limiter`] is shared by reference (or in an [`Arc`]) between
/// threads; `check` takes `&self`. A new rule set replaces the old one with
/// [`Limiter::install`], keeping the counters of the rules that did not
/// change.
///
/// ```
/// use std::sync::Arc;
/// use weir_core::{CheckRequest, Limiter, LimiterConfig, RuleSet, SystemClock};
///
/// let rules = RuleSet::from_toml(r#"
///     [[rule]]
///     name      = "per-client"
///     algorithm = "token_bucket"
///     limit     = 10
///     window    = "1s"
///     burst     = 20
/// "#)?;
/// let limiter = Limiter::new(
///     rules,
///     Arc::new(SystemClock::new()),
///     LimiterConfig { max_keys_per_rule: 100_000 },
/// );
/// let verdict = limiter.check(&CheckRequest::new("cust_42", "GET /").cost(5))?;
/// assert!(verdict.allowed);
/// assert_eq!(verdict.binding().unwrap().decision.remaining, 15);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Limiter {
    clock: Arc<dyn Clock>,
    config: LimiterConfig,
    tables: ArcSwap<Tables>,
    /// Limits carried by requests, all under one key ceiling.
    carried: Carried,
    /// Set once when the node takes part in global limits.
    /// Shared with the limiters made by [`Limiter::behind_gate_of`].
    gate: Arc<OnceLock<Arc<dyn Gate>>>,
}

impl Limiter {
    pub fn new(rules: RuleSet, clock: Arc<dyn Clock>, config: LimiterConfig) -> Limiter {
        let limiter = Limiter {
            clock,
            config,
            tables: ArcSwap::from_pointee(Tables {
                rules: Arc::new(RuleSet::empty()),
                counters: Vec::new(),
            }),
            carried: Carried::new(config.max_keys_per_rule),
            gate: Arc::default(),
        };
        limiter.install(rules);
        limiter
    }

    /// A limiter with counters of its own under `main`'s rules, clock and
    /// settings, behind `main`'s gate whether it is set already or later:
    /// copies that decide for `main`'s keys (standing in for their owner)
    /// must not admit a global rule past the share `main` would.
    pub fn behind_gate_of(main: &Limiter) -> Limiter {
        let own = Limiter::new((*main.rules()).clone(), main.clock.clone(), main.config);
        Limiter {
            gate: main.gate.clone(),
            ..own
        }
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Puts global rules' keys behind `gate` from now on; only the first
    /// gate set counts (false when one was already set).
    pub fn set_gate(&self, gate: Arc<dyn Gate>) -> bool {
        self.gate.set(gate).is_ok()
    }

    fn gate_of(&self, rule: &Rule) -> Option<&Arc<dyn Gate>> {
        match rule.scope {
            Scope::Global => self.gate.get(),
            Scope::Regional => None,
        }
    }

    /// One limit's decision: the gate (a global rule's share), then the
    /// counter; what the gate took goes back when the counter refuses.
    fn gated(
        &self,
        rule: &Rule,
        counters: &Counters,
        hash_part: &str,
        now: Nanos,
        cost: u64,
        max_delay: Option<Duration>,
    ) -> Result<Decision, CheckError> {
        let gate = self.gate_of(rule);
        if let Some(g) = gate {
            if let Err(wait) = g.take(rule, hash_part, cost, now) {
                return Ok(Decision::deny(rule.limit, wait, now));
            }
        }
        let d = counters
            .consume_within(hash_part, now, cost, max_delay)
            .map_err(|_| store_full(&rule.name, self.config.max_keys_per_rule));
        if let Some(g) = gate {
            if !matches!(d, Ok(d) if d.allowed) {
                g.give_back(rule, hash_part, now, cost);
            }
        }
        d
    }

    /// Gives back what the admitted limits of a denied request consumed.
    fn refund_all(&self, t: &Tables, applied: &[Applied], cost: u64) {
        for a in applied.iter().filter(|a| a.decision.allowed) {
            if let Some(i) = t.position(&a.rule.name) {
                t.counters[i].refund(&a.hash_part, a.decision.at, cost);
            }
            if let Some(g) = self.gate_of(&a.rule) {
                g.give_back(&a.rule, &a.hash_part, a.decision.at, cost);
            }
        }
    }

    pub fn config(&self) -> LimiterConfig {
        self.config
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
        for r in rules.rules() {
            let previous = old
                .position(&r.name)
                .map(|j| (&old.rules.rules()[j], &old.counters[j]));
            let table = match previous {
                Some((_, c)) if *c.policy() == r.policy => Some(c.clone()),
                Some((was, c)) if resize && only_limit_changed(was, r) => {
                    c.resized(r.policy, max_keys, now).map(Arc::new)
                }
                _ => None,
            };
            counters.push(table.unwrap_or_else(|| Arc::new(Counters::new(r.policy, max_keys))));
        }
        self.tables.store(Arc::new(Tables {
            rules: Arc::new(rules),
            counters,
        }));
    }

    /// Which limits a request meets, after validating it.
    pub fn select(&self, req: &CheckRequest) -> Result<(Arc<RuleSet>, Selection), CheckError> {
        let rules = self.rules();
        let sel = select_in(&rules, req, None)?;
        Ok((rules, sel))
    }

    /// Decides a request against every limit it meets, all or nothing: a
    /// request that one enforcing limit denies consumes nothing from the
    /// others (what they admitted is refunded before this returns).
    /// A request that carries its own limit is decided against it alone.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use weir_core::{CheckRequest, FakeClock, Limiter, RuleSet};
    ///
    /// let rules = RuleSet::from_toml(r#"
    ///     [[rule]]
    ///     name = "per-client"
    ///     algorithm = "fixed_window"
    ///     limit = 100
    ///     window = "60s"
    ///
    ///     [[rule]]
    ///     name = "per-ip"
    ///     by = "ip"
    ///     algorithm = "fixed_window"
    ///     limit = 1
    ///     window = "60s"
    /// "#)?;
    /// let limiter = Limiter::new(rules, Arc::new(FakeClock::at_secs(1e9)), Default::default());
    /// let from = |key: &str| CheckRequest::new(key, "GET /").ip("203.0.113.9");
    /// assert!(limiter.check(&from("alice"))?.allowed);
    /// // The same address again: per-ip denies, and per-client keeps bob's budget.
    /// let denied = limiter.check(&from("bob"))?;
    /// assert!(!denied.allowed);
    /// assert_eq!(denied.binding().unwrap().rule.name.as_ref(), "per-ip");
    /// assert_eq!(limiter.remaining("per-client", "bob"), Some(100));
    ///
    /// // Bad input is refused naming its field, and consumes nothing.
    /// let err = limiter.check(&CheckRequest::new("", "GET /")).unwrap_err();
    /// assert_eq!(err.field(), Some("key"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check(&self, req: &CheckRequest) -> Result<Verdict, CheckError> {
        if let Some(rule) = &req.limit {
            req.validate()?;
            let decision = self.check_adhoc(rule, &req.key, req.cost)?;
            return Ok(Verdict::single(rule.clone(), &req.key, decision));
        }
        // One snapshot for the whole check: the rules selected and the
        // counters spent always come from the same reload, and no counter
        // is looked up again by name.
        let t = self.tables.load();
        let sel = select_in(&t.rules, req, None)?;
        self.decide_selected(&t, &sel, req, self.clock.now())
    }

    /// Like [`Limiter::check`], but only when every selected limit is
    /// placed on this process (`here` says which rule and hash part are).
    /// Otherwise nothing is consumed and the selection is handed back, so a
    /// cluster can take it to the owners without selecting again.
    pub fn check_placed(
        &self,
        req: &CheckRequest,
        here: impl Fn(&Rule, &str) -> bool,
    ) -> Result<Placed, CheckError> {
        self.check_placed_at(req, self.clock.now(), here)
    }

    /// [`Limiter::check_placed`] at `now`, read from this limiter's clock
    /// by the caller: a batch reads it once for all its requests, which
    /// arrived together (a clock read was 1.7% of a 100-item call's CPU).
    pub fn check_placed_at(
        &self,
        req: &CheckRequest,
        now: Nanos,
        here: impl Fn(&Rule, &str) -> bool,
    ) -> Result<Placed, CheckError> {
        self.placed_in(&self.tables.load(), req, now, &here)
    }

    /// [`Limiter::check_placed_at`] for each of `reqs`, in order, all from
    /// one snapshot of the rules: a snapshot per request was 1.3% of a
    /// 100-item call's CPU, in the atomics both cores contend on.
    pub fn check_placed_all_at<'r>(
        &self,
        reqs: impl IntoIterator<Item = &'r CheckRequest>,
        now: Nanos,
        here: impl Fn(&Rule, &str) -> bool,
    ) -> Vec<Result<Placed, CheckError>> {
        let t = self.tables.load();
        // Every request's limits first, and whether they are all here;
        // then the counters of those decided here warmed together; then
        // the decisions, in order.
        let mut memo = SelectMemo::default();
        let reqs = reqs.into_iter();
        // Sized for the most requests the iterator may give (a filtered
        // slice's length): grown from nothing, the vector was copied six
        // times over for a 100-item batch.
        let mut selected: Vec<(&CheckRequest, Result<Placement, CheckError>)> =
            Vec::with_capacity(most(&reqs));
        selected.extend(reqs.map(|req| (req, self.selected_in(&t, req, &here, Some(&mut memo)))));
        warm(
            &t,
            selected.iter().filter_map(|(_, s)| match s {
                Ok((sel, true)) => Some(sel),
                _ => None,
            }),
            selected.len(),
        );
        selected
            .into_iter()
            .map(|(req, s)| self.place_selected(&t, req, s?, now))
            .collect()
    }

    fn placed_in(
        &self,
        t: &Tables,
        req: &CheckRequest,
        now: Nanos,
        here: &impl Fn(&Rule, &str) -> bool,
    ) -> Result<Placed, CheckError> {
        let selected = self.selected_in(t, req, here, None)?;
        self.place_selected(t, req, selected, now)
    }

    /// A request's limits, and whether every one of them is placed here.
    fn selected_in(
        &self,
        t: &Tables,
        req: &CheckRequest,
        here: &impl Fn(&Rule, &str) -> bool,
        memo: Option<&mut SelectMemo>,
    ) -> Result<Placement, CheckError> {
        let sel = select_in(&t.rules, req, memo)?;
        let all_here = sel
            .iter()
            .all(|s| here(&t.rules.rules()[s.rule], s.hash_part));
        Ok((sel, all_here))
    }

    fn place_selected(
        &self,
        t: &Tables,
        req: &CheckRequest,
        (sel, all_here): Placement,
        now: Nanos,
    ) -> Result<Placed, CheckError> {
        if !all_here {
            return Ok(Placed::Elsewhere(t.rules.clone(), Box::new(sel)));
        }
        self.decide_selected(t, &sel, req, now).map(Placed::Decided)
    }

    fn decide_selected(
        &self,
        t: &Tables,
        sel: &Selection,
        req: &CheckRequest,
        now: Nanos,
    ) -> Result<Verdict, CheckError> {
        let cost = req.cost;
        // A shadow rule never denies, so it never makes a caller wait either.
        let max_delay = |rule: &Rule| if rule.shadow { None } else { req.max_delay };
        let mut applied: Vec<Applied> = Vec::with_capacity(sel.len());
        for s in sel.iter() {
            let rule = &t.rules.rules()[s.rule];
            let counters = &t.counters[s.rule];
            let decision = match self.gated(rule, counters, s.hash_part, now, cost, max_delay(rule))
            {
                Ok(d) => d,
                Err(e) => {
                    self.refund_all(t, &applied, cost);
                    return Err(e);
                }
            };
            applied.push(Applied {
                rule: rule.clone(),
                hash_part: s.hash_part.into(),
                decision,
            });
            if !decision.allowed && !rule.shadow {
                self.refund_all(t, &applied, cost);
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
        t.position(rule)
            .map(|i| t.counters[i].clone())
            .ok_or_else(|| Unavailable::UnknownRule(rule.to_string()).into())
    }

    /// One limit's decision for one key, as an owner takes it for a peer.
    pub fn consume(
        &self,
        rule: &str,
        hash_part: &str,
        cost: u64,
        now: Nanos,
    ) -> Result<Decision, CheckError> {
        let (r, c) = self.rule_and_counters(rule)?;
        valid_cost(cost)?;
        let max = c.policy().max_cost();
        if cost > max {
            return Err(CheckError::CostExceedsLimit {
                rule: rule.to_string(),
                cost,
                max,
            });
        }
        self.gated(&r, &c, hash_part, now, cost, None)
    }

    fn rule_and_counters(&self, rule: &str) -> Result<(Arc<Rule>, Arc<Counters>), CheckError> {
        let t = self.tables.load();
        t.position(rule)
            .map(|i| (t.rules.rules()[i].clone(), t.counters[i].clone()))
            .ok_or_else(|| Unavailable::UnknownRule(rule.to_string()).into())
    }

    /// Gives back what a decision taken at `at` consumed. Unknown rules are
    /// ignored: a rule removed meanwhile has nothing left to refund.
    pub fn refund(&self, rule: &str, hash_part: &str, at: Nanos, cost: u64) {
        if let Ok((r, c)) = self.rule_and_counters(rule) {
            c.refund(hash_part, at, cost);
            if let Some(g) = self.gate_of(&r) {
                g.give_back(&r, hash_part, at, cost);
            }
        }
    }

    /// Records `cost` admitted elsewhere on (rule, key) whatever the limit:
    /// a gateway that decided without its owner, or a replica that stood in
    /// for it, charging what it admitted.
    pub fn charge(&self, rule: &str, hash_part: &str, cost: u64) -> Result<(), CheckError> {
        let c = self.counters(rule)?;
        c.charge(hash_part, self.clock.now(), cost)
            .map_err(|_| store_full(rule, self.config.max_keys_per_rule))
    }

    /// The budget (rule, key) has left now, without spending any: what a
    /// check of cost 1 would leave, plus that 1. None when the rule is
    /// unknown; a key never seen has the whole limit.
    pub fn remaining(&self, rule: &str, hash_part: &str) -> Option<u64> {
        let c = self.counters(rule).ok()?;
        let mut state = c.get(hash_part).unwrap_or_else(|| c.policy().fresh());
        let d = c.policy().decide(&mut state, self.clock.now(), 1)?;
        Some(if d.allowed { d.remaining + 1 } else { 0 })
    }

    /// The limits a refund of `req` goes to (an Envoy descriptor with
    /// `is_negative_hits`): those a check of it would meet, shadow ones
    /// included, or the one it carries, each with its counter's hash part.
    /// The request is validated as a check of cost 1 is: a refund is never
    /// refused for naming more than a limit holds, since none is given
    /// back past a full budget.
    pub fn refund_targets(
        &self,
        req: &CheckRequest,
    ) -> Result<Vec<(Arc<Rule>, CompactString)>, CheckError> {
        let probe = CheckRequest {
            cost: 1,
            ..req.clone()
        };
        if let Some(rule) = &req.limit {
            probe.validate()?;
            return Ok(vec![(rule.clone(), CompactString::new(&req.key))]);
        }
        let t = self.tables.load();
        let sel = select_in(&t.rules, &probe, None)?;
        Ok(sel
            .iter()
            .map(|s| {
                (
                    t.rules.rules()[s.rule].clone(),
                    CompactString::new(s.hash_part),
                )
            })
            .collect())
    }

    /// Gives `cost` back to what (rule, key) has spent here, tied to no
    /// decision ([`crate::REFUND_SPENT`]); a carried rule's counter is
    /// the carried table's.
    pub fn give_back(&self, rule: &Rule, hash_part: &str, cost: u64) {
        if rule.carried {
            self.refund_adhoc(rule, hash_part, crate::REFUND_SPENT, cost);
        } else {
            self.refund(&rule.name, hash_part, crate::REFUND_SPENT, cost);
        }
    }

    /// (rule, key)'s state now, spending nothing: `remaining` is the
    /// budget left (what a check of cost 1 would leave, plus that 1),
    /// `reset_at` when it is whole again, `allowed` whether a check of
    /// cost 1 would pass. A key never seen has the whole limit. None when
    /// the rule is unknown.
    pub fn peek(&self, rule: &str, hash_part: &str) -> Option<Decision> {
        let c = self.counters(rule).ok()?;
        let now = self.clock.now();
        let mut state = c.get(hash_part).unwrap_or_else(|| c.policy().fresh());
        let rest = c.policy().rest_at(&state).max(now);
        let mut d = c.policy().decide(&mut state, now, 1)?;
        d.remaining = if d.allowed { d.remaining + 1 } else { 0 };
        d.reset_at = crate::decision::ms_ceil(rest);
        Some(d)
    }

    /// Clears (rule, key): a held key's state becomes a fresh one's, which
    /// a replica copying it takes whole. False when the rule is unknown;
    /// a key not held is already clear.
    pub fn reset(&self, rule: &str, hash_part: &str) -> bool {
        let Ok(c) = self.counters(rule) else {
            return false;
        };
        if c.get(hash_part).is_some() {
            c.put(hash_part, c.policy().fresh(), self.clock.now());
        }
        true
    }

    /// One key's counter, copied; None when the rule or the key is unknown.
    pub fn snapshot(&self, rule: &str, hash_part: &str) -> Option<CounterSnapshot> {
        let state = self.counters(rule).ok()?.get(hash_part)?;
        Some(CounterSnapshot::of_rule(rule, hash_part, state))
    }

    /// Replaces a key's counter whole with `snap` (a replica taking its
    /// owner's copy). False when the rule is unknown here or now uses
    /// another algorithm.
    pub fn put(&self, snap: CounterSnapshot) -> bool {
        match self.counters(&snap.rule) {
            Ok(c) => c.put(&snap.hash_part, snap.state, self.clock.now()),
            Err(_) => false,
        }
    }

    /// Every held (rule, key) whose hash part `keep` accepts.
    pub fn keys_where(&self, mut keep: impl FnMut(&str) -> bool) -> Vec<(Arc<str>, CompactString)> {
        let t = self.tables.load();
        let mut out = Vec::new();
        for (r, c) in t.rules.rules().iter().zip(&t.counters) {
            out.extend(c.keys(&mut keep).into_iter().map(|k| (r.name.clone(), k)));
        }
        out
    }

    /// Removes and returns one key's counter.
    pub fn take(&self, rule: &str, hash_part: &str) -> Option<CounterSnapshot> {
        let state = self.counters(rule).ok()?.remove(hash_part)?;
        Some(CounterSnapshot::of_rule(rule, hash_part, state))
    }

    /// Records `cost` on a state outside the tables (see
    /// [`crate::Policy::charge`]); false when the rule is unknown or of
    /// another algorithm.
    pub fn charge_state(&self, rule: &str, state: &mut State, cost: u64) -> bool {
        match self.counters(rule) {
            Ok(c) => c.policy().charge(state, self.clock.now(), cost),
            Err(_) => false,
        }
    }

    /// What `snap` spent beyond `base`, under the rule in force.
    pub fn since(&self, snap: &CounterSnapshot, base: &State) -> Option<State> {
        let c = self.counters(&snap.rule).ok()?;
        c.policy().since(&snap.state, base, self.clock.now())
    }

    /// Decides one request against a rule that is not in the rule set but
    /// carried by the request (an Envoy descriptor's override). Every
    /// carried limit's keys share one table and one `max_keys_per_rule`
    /// ceiling, so no caller can multiply the ceiling by naming more limits.
    pub fn check_adhoc(
        &self,
        rule: &Rule,
        hash_part: &str,
        cost: u64,
    ) -> Result<Decision, CheckError> {
        valid_cost(cost)?;
        CheckError::fits(rule, cost)?;
        self.carried
            .consume(&rule.name, &rule.policy, hash_part, self.clock.now(), cost)
            .map_err(|_| {
                Unavailable::CarriedFull {
                    max_keys: self.config.max_keys_per_rule,
                }
                .into()
            })
    }

    /// Gives back what a carried limit's decision taken at `at` consumed.
    pub fn refund_adhoc(&self, rule: &Rule, hash_part: &str, at: Nanos, cost: u64) {
        self.carried.refund(&rule.name, hash_part, at, cost);
    }

    /// Drops the keys at rest of every rule (their state equal to a fresh
    /// key's, so no answer changes); returns how many. Run it periodically,
    /// off the request path: a full table then rarely has to on a new key.
    pub fn sweep(&self) -> usize {
        let now = self.clock.now();
        let t = self.tables.load();
        self.carried.sweep(now) + t.counters.iter().map(|c| c.sweep(now)).sum::<usize>()
    }

    /// Keys dropped at rest and new keys refused at the ceiling, over every
    /// table in force and the carried limits' one.
    pub fn store_counts(&self) -> StoreCounts {
        let t = self.tables.load();
        t.counters
            .iter()
            .map(|c| c.counts())
            .fold(self.carried.counts(), |a, b| a + b)
    }

    /// Whether this process holds a counter of `rule` for `hash_part`.
    pub fn holds(&self, rule: &str, hash_part: &str) -> bool {
        self.counters(rule).is_ok_and(|c| c.contains(hash_part))
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

    /// Keys held for limits carried by requests, together.
    pub fn adhoc_keys(&self) -> usize {
        self.carried.len()
    }

    /// Removes and returns every counter whose hash part `keep` rejects,
    /// the carried limits' (keyed by the caller key) among them: what a node
    /// hands to the keys' owners when it leaves or the ring changes.
    pub fn take_unless(&self, keep: impl FnMut(&str) -> bool) -> Vec<CounterSnapshot> {
        self.unkept(keep, true)
    }

    /// Copies of every counter whose hash part `keep` rejects, left in
    /// place: what a node offers the keys' owners while it goes on
    /// deciding on them, until [`Limiter::settle`] once an owner has one.
    pub fn copy_unless(&self, keep: impl FnMut(&str) -> bool) -> Vec<CounterSnapshot> {
        self.unkept(keep, false)
    }

    fn unkept(&self, mut keep: impl FnMut(&str) -> bool, take: bool) -> Vec<CounterSnapshot> {
        let t = self.tables.load();
        let mut out = Vec::new();
        for (r, c) in t.rules.rules().iter().zip(&t.counters) {
            let states = c.unkept(&mut keep, take);
            out.extend(
                states
                    .into_iter()
                    .map(|(k, state)| CounterSnapshot::of_rule(&r.name, &k, state)),
            );
        }
        out.extend(carried_snapshots(self.carried.unkept(keep, take)));
        out
    }

    /// `sent`, a copy of one counter ([`Limiter::copy_unless`]), is now
    /// counted by the key's owner: only what was spent here since it was
    /// taken stays, for the owner's next handoff. The key never goes
    /// missing meanwhile, so no decision here starts it over. True when
    /// something stays: the owner lacks it until it is handed over too.
    pub fn settle(&self, sent: &CounterSnapshot) -> bool {
        let now = self.clock.now();
        if sent.carried.is_some() {
            let name: Arc<str> = Arc::from(sent.rule.as_str());
            self.carried
                .settle(&name, &sent.hash_part, &sent.state, now)
        } else if let Ok(c) = self.counters(&sent.rule) {
            c.settle(&sent.hash_part, &sent.state, now)
        } else {
            false
        }
    }

    /// What `hash_part`'s counter of `rule` spent here beyond `base`, an
    /// earlier state of it already sent to the key's owner, as a state of
    /// its own (what [`Limiter::settle`] against `base` would leave, left
    /// in place here), with the counter as it is now. None when nothing was
    /// spent beyond `base`, or the rule or the key is unknown here.
    pub fn spent_beyond(
        &self,
        rule: &str,
        hash_part: &str,
        base: &State,
    ) -> Option<(CounterSnapshot, CounterSnapshot)> {
        let c = self.counters(rule).ok()?;
        let (policy, now) = (c.policy(), self.clock.now());
        let current = c.get(hash_part)?;
        let spent = policy.beyond(&current, base, now)?;
        Some((
            CounterSnapshot::of_rule(rule, hash_part, current),
            CounterSnapshot::of_rule(rule, hash_part, spent),
        ))
    }

    /// Folds in a counter handed over by another node, after checking it:
    /// a key no check could name, a state that breaks its algorithm's
    /// invariants, or a new key past the ceiling is refused, and a refused
    /// counter changes nothing. A carried limit's counter goes to the
    /// carried limits' table, under the limit it names.
    pub fn absorb(&self, snap: CounterSnapshot) -> Result<(), Absorb> {
        if snap.hash_part.is_empty() || snap.hash_part.len() > MAX_KEY_LEN {
            return Err(Absorb::Refused(AbsorbError::Invalid));
        }
        let now = self.clock.now();
        if let Some(c) = snap.carried {
            let rule = Rule::carried(&snap.rule, c.limit, c.window)
                .map_err(|_| Absorb::Refused(AbsorbError::Invalid))?;
            return self
                .carried
                .absorb(&rule.name, &rule.policy, &snap.hash_part, snap.state, now)
                .map_err(Absorb::Refused);
        }
        let c = self.counters(&snap.rule).map_err(|_| Absorb::UnknownRule)?;
        c.absorb(&snap.hash_part, snap.state, now)
            .map_err(Absorb::Refused)
    }
}

/// Carried limits' counters as portable snapshots. Carried limits are built
/// by `Rule::carried`, a counting policy, so their limit and window are
/// always there.
fn carried_snapshots(
    states: Vec<(Arc<str>, CompactString, Policy, State)>,
) -> impl Iterator<Item = CounterSnapshot> {
    states.into_iter().filter_map(|(name, k, policy, state)| {
        let (limit, window) = policy.limit_and_window()?;
        let carried = CarriedLimit { limit, window };
        Some(CounterSnapshot::of_carried(&name, &k, state, carried))
    })
}

/// Decided in this process, with nothing to wait for.
impl Decide for Limiter {
    fn decide<'a>(
        &'a self,
        req: &'a CheckRequest,
    ) -> impl std::future::Future<Output = Result<CheckResponse, CheckError>> + Send + 'a {
        std::future::ready(self.check(req).map(|v| v.response()))
    }

    fn now(&self) -> Nanos {
        Limiter::now(self)
    }
}

#[cfg(test)]
mod tests {
    use super::most;

    #[test]
    fn a_batch_is_sized_for_its_most_items_within_a_cap() {
        // A filtered slice, as a cluster hands the limiter its batch.
        let items = [1u8; 100];
        assert_eq!(most(&items.iter().filter(|&&i| i > 1)), 100);
        assert_eq!(most(&(0..1_000_000).filter(|i| i % 2 == 0)), 4096);
        assert_eq!(most(&std::iter::repeat_n(1, 5_000)), 5_000);
        assert_eq!(most(&std::iter::from_fn(|| Some(1))), 0);
    }
}
