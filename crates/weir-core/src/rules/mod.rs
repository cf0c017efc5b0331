//! The rule model (docs/configuration.md, "The rules file"): which limits a request meets.

mod edit;
mod file;
mod hot;
mod parse;
mod pattern;
mod rule;
mod select;
mod tiers;

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use thiserror::Error;

use crate::determinism::HashState;

pub use edit::{TierEdit, WriteStamp};
pub use hot::{part, shard_name, Hot, DEFAULT_SHARDS, MAX_SHARDS};
pub use pattern::RoutePattern;
pub use rule::{format_duration, By, Rule, Scope, CARRIED_LABEL};
pub(crate) use select::SelectMemo;
pub use select::{Selected, Selection};
pub use tiers::{digest_of, rules_json, TierDigests, TierKey, TierWrite};

/// A rules file as parsed: its rules, and whether it says that no rules
/// at all is what it means (`allow_empty = true`).
#[derive(Debug, Clone)]
pub struct RulesFile {
    pub set: RuleSet,
    pub allow_empty: bool,
}

impl RulesFile {
    /// Parses a TOML rules file (`[[rule]]` tables, optional top-level
    /// `version` and `allow_empty`).
    pub fn parse(text: &str) -> Result<RulesFile, RulesError> {
        file::from_toml(text)
    }

    /// Whether reading this file in place of one with rules would lift
    /// every limit by accident: it holds no rules and does not say
    /// `allow_empty = true`. A file truncated by a writer that is not done
    /// yet (`: > rules.toml`) reads as exactly that.
    pub fn empty_by_accident(&self) -> bool {
        !self.allow_empty && self.set.written_len() == 0
    }
}

/// The body of a `PUT /v1/limits/{tier}`: the tier's new rules, and whether
/// the writer means to leave the tier with none (`"allow_empty": true`).
#[derive(Debug, Clone)]
pub struct TierBody {
    pub rules: Vec<Rule>,
    pub allow_empty: bool,
}

/// A rule that cannot be accepted, naming the rule and the field.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("rule \"{rule}\", field \"{field}\": {reason}")]
pub struct RuleError {
    /// The rule's name, or `#N` (1-based position) when it has no usable name.
    pub rule: String,
    pub field: String,
    pub reason: String,
}

/// Why a whole rule set was refused. Nothing of a refused set takes effect.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RulesError {
    #[error("rules are not valid {format}: {message}")]
    Syntax {
        format: &'static str,
        message: String,
    },
    #[error("{0}")]
    Rule(#[from] RuleError),
    /// A conditional write found its tier changed since the caller read it
    /// (another write landed first); nothing was written.
    #[error("tier {} has changed: it is at version {version}, not the version the write was based on", tier_label(.tier))]
    Precondition { tier: TierKey, version: u64 },
}

fn tier_label(tier: &TierKey) -> String {
    match tier {
        Some(t) => format!("\"{t}\""),
        None => "\"*\" (any tier)".to_string(),
    }
}

impl RulesError {
    /// The rule and field at fault, when one is named.
    pub fn rule_error(&self) -> Option<&RuleError> {
        match self {
            RulesError::Rule(e) => Some(e),
            RulesError::Syntax { .. } | RulesError::Precondition { .. } => None,
        }
    }
}

/// Highest rule-set version: 2^53 - 1, the largest integer a JSON reader
/// keeps exactly, so every client of `GET /v1/limits` sees the version a
/// node holds. A write a microsecond for 285 years does not reach it, so a
/// set that claims more was not counted up to it: refusing it keeps a
/// forged version from making the next write wrap (or stall) below it.
pub const MAX_VERSION: u64 = (1 << 53) - 1;

fn version_error(reason: &str) -> RulesError {
    RuleError {
        rule: "(rule set)".into(),
        field: "version".into(),
        reason: reason.into(),
    }
    .into()
}

/// Refuses a version above [`MAX_VERSION`].
fn bounded(version: u64) -> Result<u64, RulesError> {
    if version > MAX_VERSION {
        return Err(version_error("must be at most 9007199254740991 (2^53 - 1)"));
    }
    Ok(version)
}

/// A peer's tier writes, each tier validated alone (and its rules all of
/// that tier): what a node merges into its set ([`RuleSet::merge_writes`]).
/// No index is built for them; at 100,000 rules one took as long to build,
/// and as much memory, as the merged set's.
#[derive(Debug, Clone)]
pub struct PeerWrites {
    version: u64,
    writes: tiers::Writes,
}

impl PeerWrites {
    pub fn new(
        version: u64,
        writes: impl IntoIterator<Item = (TierKey, TierWrite)>,
    ) -> Result<PeerWrites, RulesError> {
        let writes: tiers::Writes = writes.into_iter().collect();
        for (tier, w) in &writes {
            bounded(w.version)?;
            off_tier(&w.rules, tier)?;
            validate(&w.rules)?;
        }
        let top = writes.values().map(|w| w.version).max().unwrap_or(0);
        Ok(PeerWrites {
            version: bounded(version.max(top))?,
            writes,
        })
    }

    /// The highest version of the writes, or the one they were sent under.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The write of `tier`, if one came.
    pub fn tier_write(&self, tier: Option<&str>) -> Option<&TierWrite> {
        self.writes.get(&tier.map(str::to_string))
    }
}

/// A validated, versioned set of rules with its selection index.
///
/// Every tier carries the version of its last write ([`TierWrite`]), and
/// the set's version is the highest of them: a write takes the next one
/// (a Lamport clock), so it ranks above everything its writer had seen.
#[derive(Debug, Clone)]
pub struct RuleSet {
    version: u64,
    writes: tiers::Writes,
    /// Shared by every copy of the set: a set is cloned for each limiter
    /// that decides by it (the node's, its replicas', its fallback's), and
    /// the index of a hundred thousand rules is tens of megabytes.
    compiled: Arc<Compiled>,
}

/// The rules in force, every tier's less any a name clash between two
/// tiers' writes keeps out (see [`RuleSet::merge`]), with their index.
#[derive(Debug)]
struct Compiled {
    rules: Vec<Arc<Rule>>,
    /// Shared by a set and its divided copies, which match as it does.
    index: Arc<select::Index>,
}

/// `rules` followed by the sub-counters of the sharded ones.
fn with_shards(rules: Vec<Arc<Rule>>) -> Vec<Arc<Rule>> {
    let shards: Vec<Arc<Rule>> = rules
        .iter()
        .flat_map(|r| hot::shards_of(r))
        .map(Arc::new)
        .collect();
    rules.into_iter().chain(shards).collect()
}

/// Names unique, and no two rules tied for the same requests. Linear in
/// the rules (plus the sort of [`select::refuse_ties`]): a set of a
/// hundred thousand rules is checked in a fraction of a second.
fn validate(rules: &[Arc<Rule>]) -> Result<(), RulesError> {
    let mut names: HashSet<&str, HashState> = HashSet::default();
    names.reserve(rules.len());
    for r in rules {
        if !names.insert(&r.name) {
            return Err(RuleError {
                rule: r.name.to_string(),
                field: "name".into(),
                reason: "duplicate rule name".into(),
            }
            .into());
        }
    }
    select::refuse_ties(rules)?;
    Ok(())
}

/// Refuses a rule filed under a tier it does not name.
fn off_tier(rules: &[Arc<Rule>], tier: &TierKey) -> Result<(), RulesError> {
    match rules.iter().find(|r| r.tier != *tier) {
        Some(r) => Err(RuleError {
            rule: r.name.to_string(),
            field: "tier".into(),
            reason: "is not the tier of the write that holds it".into(),
        }
        .into()),
        None => Ok(()),
    }
}

impl RuleSet {
    /// Validates the whole set: every rule alone, then names unique and no two
    /// rules tied for the same requests. Every tier is one write at `version`.
    pub fn new(version: u64, rules: Vec<Rule>) -> Result<RuleSet, RulesError> {
        bounded(version)?;
        // Sub-counters are rebuilt from their base rules, never taken as given.
        let rules: Vec<Arc<Rule>> = rules
            .into_iter()
            .filter(|r| r.shard_of.is_none())
            .map(Arc::new)
            .collect();
        validate(&rules)?;
        let writes = tiers::group(&rules, version, &Arc::from(""));
        Ok(RuleSet::indexed(version, writes, rules))
    }

    /// A set from each tier's last write, as peers exchange it. Each tier's
    /// rules are validated alone (and must all carry that tier); which rules
    /// are in force follows from the writes, as on every other node.
    pub fn from_writes(
        version: u64,
        writes: impl IntoIterator<Item = (TierKey, TierWrite)>,
    ) -> Result<RuleSet, RulesError> {
        let offered = PeerWrites::new(version, writes)?;
        RuleSet::build(offered.version, offered.writes)
    }

    fn build(version: u64, writes: tiers::Writes) -> Result<RuleSet, RulesError> {
        let rules = tiers::in_force(&writes);
        // Holds by construction (names deduplicated, ties only within a
        // tier); checked anyway, since a set in force must be valid.
        validate(&rules)?;
        Ok(RuleSet::indexed(version, writes, rules))
    }

    /// `rules` are the written rules in force; the sub-counters of the
    /// sharded ones are derived here, so every set carries them alike.
    fn indexed(version: u64, writes: tiers::Writes, rules: Vec<Arc<Rule>>) -> RuleSet {
        let rules = with_shards(rules);
        let index = Arc::new(select::Index::build(&rules));
        RuleSet {
            version,
            writes,
            compiled: Arc::new(Compiled { rules, index }),
        }
    }

    /// Every rule enforcing 1/n of its budget ([`Rule::divided`]): what
    /// one node of n applies alone. Dividing changes limits only, never
    /// what a rule matches, so the set is not validated again, and it
    /// shares this set's index: its rules (sub-counters included, one per
    /// shard as before) sit at the same positions and match the same
    /// requests. A sharded rule's sub-counters are parts of its divided
    /// limit.
    pub fn divided(&self, n: u64) -> RuleSet {
        let rules = with_shards(self.written().map(|r| Arc::new(r.divided(n))).collect());
        debug_assert_eq!(rules.len(), self.rules().len());
        RuleSet {
            version: self.version,
            writes: self.writes.clone(),
            compiled: Arc::new(Compiled {
                rules,
                index: self.compiled.index.clone(),
            }),
        }
    }

    pub fn empty() -> RuleSet {
        RuleSet::new(0, Vec::new()).expect("no rules cannot conflict")
    }

    /// Parses a TOML rules file (`[[rule]]` tables, optional top-level
    /// `version` and `allow_empty`). The set is validated whole: an error
    /// names the rule and the field at fault.
    ///
    /// ```
    /// use weir_core::RuleSet;
    ///
    /// let rules = RuleSet::from_toml(r#"
    ///     [[rule]]
    ///     name      = "charges-per-client"
    ///     route     = "POST /v1/charges"
    ///     algorithm = "sliding_window_counter"
    ///     limit     = 100
    ///     window    = "60s"
    /// "#)?;
    /// assert_eq!(rules.rules().len(), 1);
    ///
    /// let err = RuleSet::from_toml(r#"
    ///     [[rule]]
    ///     name      = "broken"
    ///     algorithm = "token_bucket"
    ///     limit     = 0
    ///     window    = "1s"
    /// "#).unwrap_err();
    /// assert!(err.to_string().contains("limit"), "{err}");
    /// # Ok::<(), weir_core::RulesError>(())
    /// ```
    pub fn from_toml(text: &str) -> Result<RuleSet, RulesError> {
        file::from_toml(text).map(|f| f.set)
    }

    /// Parses the config API's JSON: `{"rules":[{...}]}`, each rule taking the
    /// given tier (a rule naming another tier is refused).
    pub fn parse_tier_json(tier: Option<&str>, body: &str) -> Result<Vec<Rule>, RulesError> {
        parse::tier_from_json(tier, body).map(|b| b.rules)
    }

    /// [`RuleSet::parse_tier_json`] with the body's `allow_empty` flag.
    pub fn parse_tier_body(tier: Option<&str>, body: &str) -> Result<TierBody, RulesError> {
        parse::tier_from_json(tier, body)
    }

    /// How many rules are in force as written (sub-counters not counted).
    pub fn written_len(&self) -> usize {
        self.written().count()
    }

    /// Refuses a write that would leave `tier` with no rules while it has
    /// some, unless the writer said `allow_empty`: an empty body is more
    /// often a client's mistake than a wish to lift every limit of a tier.
    pub fn refuse_emptying(
        &self,
        tier: Option<&str>,
        rules: &[Rule],
        allow_empty: bool,
    ) -> Result<(), RulesError> {
        if allow_empty || !rules.is_empty() || self.tier(tier).next().is_none() {
            return Ok(());
        }
        Err(RuleError {
            rule: "(request body)".into(),
            field: "rules".into(),
            reason: format!(
                "is empty and would remove every rule of tier {}; send \"allow_empty\": true to mean it",
                tier_label(&tier.map(str::to_string))
            ),
        }
        .into())
    }

    /// Parses a whole set in JSON: `{"version":N,"rules":[...]}`, every tier
    /// one write at that version.
    pub fn from_json(body: &str) -> Result<RuleSet, RulesError> {
        parse::set_from_json(body)
    }

    /// The rules in force in JSON, the form [`RuleSet::from_json`] reads.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "version": self.version,
            "rules": self.written().map(|r| r.to_json()).collect::<Vec<_>>(),
        })
    }

    /// A new set with the rules of `tier` replaced by `rules` (None: the
    /// rules that apply to any tier), as one write at `version`.
    pub fn with_tier(
        &self,
        tier: Option<&str>,
        rules: Vec<Rule>,
        version: u64,
    ) -> Result<RuleSet, RulesError> {
        self.with_tiers(vec![(tier.map(str::to_string), rules)], version)
    }

    /// A new set with each named tier's rules replaced, all as one write at
    /// `version`; the other tiers keep their writes. Refused, changing
    /// nothing, when the result is not a valid set (a name another tier
    /// uses, a tie, a rule of another tier) or `version` is not above
    /// every tier it replaces.
    pub fn with_tiers(
        &self,
        changes: Vec<(TierKey, Vec<Rule>)>,
        version: u64,
    ) -> Result<RuleSet, RulesError> {
        let shared = changes
            .into_iter()
            .map(|(tier, rules)| (tier, rules.into_iter().map(Arc::new).collect()))
            .collect();
        self.with_shared_tiers(shared, version)
    }

    /// [`RuleSet::with_tiers`] with the rules already shared: an edit of a
    /// rules file writes the very rules the file was parsed into, so the
    /// set in force and the file's set hold one copy of each rule between
    /// them, not two.
    pub fn with_shared_tiers(
        &self,
        changes: Vec<(TierKey, Vec<Arc<Rule>>)>,
        version: u64,
    ) -> Result<RuleSet, RulesError> {
        bounded(version)?;
        let mut writes = self.writes.clone();
        let mut candidate: Vec<Arc<Rule>> = self
            .written()
            .filter(|r| !changes.iter().any(|(t, _)| *t == r.tier))
            .cloned()
            .collect();
        for (tier, rules) in changes {
            off_tier(&rules, &tier)?;
            let write = match writes.get(&tier) {
                Some(w) if w.version >= version => {
                    return Err(version_error(
                        "must be above the version of every tier it replaces",
                    ))
                }
                // Made as an edit of the tier's write: peers that hold that
                // write are sent the rules that changed, not the tier.
                Some(before) => {
                    let (edit, rules) = TierEdit::between(before, rules);
                    TierWrite::edited(version, Arc::from(""), rules, edit)
                }
                None => TierWrite::new(version, Arc::from(""), rules),
            };
            candidate.extend(write.rules.iter().cloned());
            writes.insert(tier, write);
        }
        // Validated with the rules in force, as a file is: a name in force
        // in another tier is refused here rather than kept out of force later.
        validate(&candidate)?;
        RuleSet::build(self.version.max(version), writes)
    }

    /// What turns this set into `next`: each tier whose written rules
    /// differ, with `next`'s rules (none, for a tier `next` lacks).
    pub fn tier_changes(&self, next: &RuleSet) -> Vec<(TierKey, Vec<Rule>)> {
        self.shared_tier_changes(next)
            .into_iter()
            .map(|(tier, rules)| (tier, rules.iter().map(|r| (**r).clone()).collect()))
            .collect()
    }

    /// [`RuleSet::tier_changes`] with `next`'s rules shared, not copied.
    pub fn shared_tier_changes(&self, next: &RuleSet) -> Vec<(TierKey, Vec<Arc<Rule>>)> {
        let rules_of = |s: &RuleSet, t: &TierKey| -> Vec<Arc<Rule>> {
            s.writes.get(t).map(|w| w.rules.clone()).unwrap_or_default()
        };
        let mut tiers: Vec<&TierKey> = self.writes.keys().chain(next.writes.keys()).collect();
        tiers.sort();
        tiers.dedup();
        tiers
            .into_iter()
            .filter(|t| rules_of(self, t) != rules_of(next, t))
            .map(|t| (t.clone(), rules_of(next, t)))
            .collect()
    }

    /// Each tier's [digest](TierWrite::digest): what a rules file
    /// reloader keeps of the file it installed last, to tell which tiers
    /// the next edit changes, rather than the file's whole set.
    pub fn tier_digests(&self) -> TierDigests {
        self.writes
            .iter()
            .map(|(t, w)| (t.clone(), w.digest()))
            .collect()
    }

    /// What turns a set whose tiers had the digests `before` into this
    /// one: each tier whose digest differs, with this set's rules (none,
    /// for a tier this set lacks).
    pub fn changes_since(&self, before: &TierDigests) -> Vec<(TierKey, Vec<Arc<Rule>>)> {
        let empty = digest_of(&[]);
        let mut tiers: Vec<&TierKey> = self.writes.keys().chain(before.keys()).collect();
        tiers.sort();
        tiers.dedup();
        tiers
            .into_iter()
            .filter(|t| {
                let now = self.writes.get(*t).map_or(empty, TierWrite::digest);
                before.get(*t).copied().unwrap_or(empty) != now
            })
            .map(|t| {
                let rules = self.writes.get(t).map(|w| w.rules.clone());
                (t.clone(), rules.unwrap_or_default())
            })
            .collect()
    }

    /// This set merged with `other`, tier by tier: each tier takes the
    /// higher-ranked of the two writes ([`TierWrite::rank`]). None when
    /// `other` holds nothing newer, so nothing would change.
    pub fn merge(&self, other: &RuleSet) -> Result<Option<RuleSet>, RulesError> {
        self.merge_at(other.version, &other.writes)
    }

    /// [`RuleSet::merge`] with a peer's writes, for which no index was
    /// built: only the merged set is indexed.
    pub fn merge_writes(&self, other: &PeerWrites) -> Result<Option<RuleSet>, RulesError> {
        self.merge_at(other.version, &other.writes)
    }

    fn merge_at(
        &self,
        version: u64,
        writes: &tiers::Writes,
    ) -> Result<Option<RuleSet>, RulesError> {
        match tiers::merge(&self.writes, writes) {
            Some(writes) => RuleSet::build(self.version.max(version), writes).map(Some),
            None if version > self.version => Ok(Some(RuleSet {
                version,
                ..self.clone()
            })),
            None => Ok(None),
        }
    }

    /// The same set with every write newer than version `after` signed by
    /// `origin`: the node that made them.
    pub fn signed(mut self, origin: &str, after: u64) -> RuleSet {
        let origin: Arc<str> = Arc::from(origin);
        for w in self.writes.values_mut().filter(|w| w.version > after) {
            w.origin = origin.clone();
        }
        self
    }

    /// The same rules as one write at another version, at most [`MAX_VERSION`].
    pub fn with_version(&self, version: u64) -> Result<RuleSet, RulesError> {
        let version = bounded(version)?;
        let writes = self
            .writes
            .iter()
            .map(|(t, w)| (t.clone(), w.at_version(version)))
            .collect();
        Ok(RuleSet {
            version,
            writes,
            ..self.clone()
        })
    }

    /// The version the next write takes; an error once [`MAX_VERSION`] is
    /// reached, rather than a wrap to a version every peer ranks lower.
    pub fn next_version(&self) -> Result<u64, RulesError> {
        match self.version.checked_add(1) {
            Some(v) if v <= MAX_VERSION => Ok(v),
            _ => Err(version_error(
                "is at its ceiling; no later version can be written",
            )),
        }
    }

    /// The highest version of any tier's write: the newest write this set holds.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The version of `tier`'s last write; 0 when it was never written.
    pub fn tier_version(&self, tier: Option<&str>) -> u64 {
        self.tier_write(tier).map_or(0, |w| w.version)
    }

    /// `tier`'s last write, if it has one.
    pub fn tier_write(&self, tier: Option<&str>) -> Option<&TierWrite> {
        self.writes.get(&tier.map(str::to_string))
    }

    /// Every tier's last write, in tier order.
    pub fn writes(&self) -> impl Iterator<Item = (&TierKey, &TierWrite)> {
        self.writes.iter()
    }

    /// Written rules kept out of force by a name clash with another tier.
    pub fn displaced(&self) -> Vec<Arc<Rule>> {
        let in_force: HashSet<*const Rule, HashState> = self.written().map(Arc::as_ptr).collect();
        self.writes
            .values()
            .flat_map(|w| w.rules.iter())
            .filter(|r| !in_force.contains(&Arc::as_ptr(r)))
            .cloned()
            .collect()
    }

    /// Every rule with a counter, sub-counters of sharded rules included.
    pub fn rules(&self) -> &[Arc<Rule>] {
        &self.compiled.rules
    }

    /// The rules in force as written: without the sub-counters derived from them.
    pub fn written(&self) -> impl Iterator<Item = &Arc<Rule>> {
        self.rules().iter().filter(|r| r.shard_of.is_none())
    }

    /// The rules of `tier` in force.
    pub fn tier<'a>(&'a self, tier: Option<&'a str>) -> impl Iterator<Item = &'a Arc<Rule>> + 'a {
        self.written().filter(move |r| r.tier.as_deref() == tier)
    }

    /// The rule called `name` and its position, by a lookup: an owner
    /// finds the rule of every op a peer forwards this way.
    pub fn get(&self, name: &str) -> Option<(usize, &Arc<Rule>)> {
        let i = self.compiled.index.position(name)?;
        Some((i, &self.rules()[i]))
    }

    /// The winning rule of every `by` dimension for this request: the most
    /// specific matching rule keyed by client, and the one keyed by IP
    /// (docs/configuration.md, "Which rule applies").
    ///
    /// ```
    /// use weir_core::rules::Subject;
    /// use weir_core::RuleSet;
    ///
    /// let rules = RuleSet::from_toml(r#"
    ///     [[rule]]
    ///     name = "default"
    ///     algorithm = "fixed_window"
    ///     limit = 100
    ///     window = "60s"
    ///
    ///     [[rule]]
    ///     name = "api"
    ///     route = "/api/*"
    ///     algorithm = "fixed_window"
    ///     limit = 5
    ///     window = "60s"
    /// "#)?;
    /// let names = |route: &str| -> Vec<String> {
    ///     let subject = Subject { key: "cust_42", route, tier: None, ip: None };
    ///     rules.select(&subject).iter().map(|s| rules.rules()[s.rule].name.to_string()).collect()
    /// };
    /// assert_eq!(names("/api/orders"), ["api"]);
    /// assert_eq!(names("/health"), ["default"]);
    /// # Ok::<(), weir_core::RulesError>(())
    /// ```
    pub fn select<'r>(&self, req: &select::Subject<'r>) -> Selection {
        self.compiled.index.select(self.rules(), req, None)
    }

    /// [`RuleSet::select`] for one of several requests selected in turn,
    /// with a memo made for this set.
    pub(crate) fn select_with(
        &self,
        req: &select::Subject<'_>,
        memo: &mut SelectMemo,
    ) -> Selection {
        self.compiled.index.select(self.rules(), req, Some(memo))
    }
}

impl fmt::Display for RuleSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rule set v{} ({} rules)",
            self.version,
            self.rules().len()
        )
    }
}

pub use select::Subject;

#[cfg(test)]
mod tests;
