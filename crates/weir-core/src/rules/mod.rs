//! The rule model (DESIGN section 3): which limits a request meets.

mod hot;
mod parse;
mod pattern;
mod select;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;

pub use hot::{part, shard_name, Hot, DEFAULT_SHARDS, MAX_SHARDS};
pub use pattern::RoutePattern;
pub use select::{Selected, Selection};

use crate::algorithm::{AlgorithmKind, ParamError, Policy};

/// Which request attribute a rule's counter is keyed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum By {
    #[default]
    Client,
    Ip,
}

impl By {
    pub fn as_str(self) -> &'static str {
        match self {
            By::Client => "client",
            By::Ip => "ip",
        }
    }
}

/// Where a rule's limit holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Scope {
    /// Within one region (one weir cluster): every rule's meaning when the
    /// node runs without regions.
    #[default]
    Regional,
    /// Across every region together: each region enforces the share of the
    /// limit the key's home region allocates it (docs/regions.md).
    Global,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Regional => "regional",
            Scope::Global => "global",
        }
    }
}

/// One validated rule. Build it through [`RuleSet`] parsing; every field has
/// passed the guards, so a `Rule` in hand always limits.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub name: Arc<str>,
    pub tier: Option<String>,
    pub client: Option<String>,
    pub route: Option<RoutePattern>,
    pub by: By,
    pub algorithm: AlgorithmKind,
    pub limit: u64,
    pub window: Duration,
    pub burst: Option<u64>,
    pub queue: Option<u64>,
    pub shadow: bool,
    /// What the owner strategy does with this rule's hot keys.
    pub hot: Hot,
    /// For a sub-counter of a sharded rule, the rule it is part of. Such
    /// rules are derived from their base when a set is built: never
    /// selected, listed or written out themselves.
    pub shard_of: Option<Arc<str>>,
    /// Whether the limit holds per region or across all of them.
    pub scope: Scope,
    pub policy: Policy,
}

impl Rule {
    /// The rule as the config API shows it; parsing this back gives the same rule.
    pub fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        m.insert("name".into(), self.name.as_ref().into());
        if let Some(t) = &self.tier {
            m.insert("tier".into(), t.as_str().into());
        }
        if let Some(c) = &self.client {
            m.insert("client".into(), c.as_str().into());
        }
        if let Some(r) = &self.route {
            m.insert("route".into(), r.as_str().into());
        }
        m.insert("by".into(), self.by.as_str().into());
        m.insert("algorithm".into(), self.algorithm.as_str().into());
        m.insert("limit".into(), self.limit.into());
        m.insert("window".into(), format_duration(self.window).into());
        if let Some(b) = self.burst {
            m.insert("burst".into(), b.into());
        }
        if let Some(q) = self.queue {
            m.insert("queue".into(), q.into());
        }
        m.insert("shadow".into(), self.shadow.into());
        if self.hot != Hot::default_for(self.algorithm, self.queue) {
            m.insert("hot".into(), self.hot.as_str().into());
        }
        if let Hot::Shard(k) = self.hot {
            m.insert("shards".into(), k.into());
        }
        if self.scope != Scope::Regional {
            m.insert("scope".into(), self.scope.as_str().into());
        }
        serde_json::Value::Object(m)
    }

    /// A limit carried by a request instead of the rule set (an Envoy
    /// descriptor's override): a sliding window counter on the caller key.
    /// Rebuilt from these three values, it is the same rule on every node,
    /// which is how an owner decides it for a node that forwarded it.
    pub fn carried(name: &str, limit: u64, window: Duration) -> Result<Rule, ParamError> {
        let algorithm = AlgorithmKind::SlidingWindowCounter;
        let policy = Policy::new(algorithm, limit, window, None, None)?;
        Ok(Rule {
            name: name.into(),
            tier: None,
            client: None,
            route: None,
            by: By::Client,
            algorithm,
            limit,
            window,
            burst: None,
            queue: None,
            shadow: false,
            // Carried limits are decided at their owner only.
            hot: Hot::Off,
            shard_of: None,
            scope: Scope::Regional,
            policy,
        })
    }

    /// The same rule enforcing 1/n of its budget: what one node of n applies
    /// alone (the divide strategy, and the fallback when an owner is lost).
    /// Never below 1, so a divided limit still admits.
    pub fn divided(&self, n: u64) -> Rule {
        let n = n.max(1);
        let part = |v: u64| v.div_ceil(n).max(1);
        let mut r = self.clone();
        r.limit = part(self.limit);
        r.burst = self.burst.map(part);
        r.policy = Policy::new(r.algorithm, r.limit, r.window, r.burst, r.queue)
            .expect("a divided valid rule stays valid");
        r
    }
}

/// Durations written back the way people write them in rules files.
pub fn format_duration(d: Duration) -> String {
    humantime::format_duration(d).to_string().replace(' ', "")
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
}

impl RulesError {
    /// The rule and field at fault, when one is named.
    pub fn rule_error(&self) -> Option<&RuleError> {
        match self {
            RulesError::Rule(e) => Some(e),
            RulesError::Syntax { .. } => None,
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

/// A validated, versioned set of rules with its selection index.
#[derive(Debug, Clone)]
pub struct RuleSet {
    version: u64,
    rules: Vec<Arc<Rule>>,
    index: select::Index,
}

impl RuleSet {
    /// Validates the whole set: every rule alone, then names unique and no two
    /// rules tied for the same requests.
    pub fn new(version: u64, rules: Vec<Rule>) -> Result<RuleSet, RulesError> {
        bounded(version)?;
        // Sub-counters are rebuilt from their base rules, never taken as given.
        let rules: Vec<Rule> = rules.into_iter().filter(|r| r.shard_of.is_none()).collect();
        let shards: Vec<Rule> = rules.iter().flat_map(hot::shards_of).collect();
        let rules: Vec<Arc<Rule>> = rules.into_iter().chain(shards).map(Arc::new).collect();
        for (i, r) in rules.iter().enumerate() {
            if rules[..i].iter().any(|o| o.name == r.name) {
                return Err(RuleError {
                    rule: r.name.to_string(),
                    field: "name".into(),
                    reason: "duplicate rule name".into(),
                }
                .into());
            }
        }
        select::refuse_ties(&rules)?;
        let index = select::Index::build(&rules);
        Ok(RuleSet {
            version,
            rules,
            index,
        })
    }

    pub fn empty() -> RuleSet {
        RuleSet::new(0, Vec::new()).expect("no rules cannot conflict")
    }

    /// Parses a TOML rules file (`[[rule]]` tables, optional top-level
    /// `version`).
    pub fn from_toml(text: &str) -> Result<RuleSet, RulesError> {
        parse::from_toml(text)
    }

    /// Parses the config API's JSON: `{"rules":[{...}]}`, each rule taking the
    /// given tier (a rule naming another tier is refused).
    pub fn parse_tier_json(tier: Option<&str>, body: &str) -> Result<Vec<Rule>, RulesError> {
        parse::tier_from_json(tier, body)
    }

    /// Parses a whole set in JSON, as peers exchange it: `{"version":N,"rules":[...]}`.
    pub fn from_json(body: &str) -> Result<RuleSet, RulesError> {
        parse::set_from_json(body)
    }

    /// The whole set in JSON, the form [`RuleSet::from_json`] reads.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "version": self.version,
            "rules": self.written().map(|r| r.to_json()).collect::<Vec<_>>(),
        })
    }

    /// A new set with the rules of `tier` replaced by `rules` (None: the
    /// rules that apply to any tier).
    pub fn with_tier(
        &self,
        tier: Option<&str>,
        rules: Vec<Rule>,
        version: u64,
    ) -> Result<RuleSet, RulesError> {
        let kept = self
            .written()
            .filter(|r| r.tier.as_deref() != tier)
            .map(|r| (**r).clone());
        RuleSet::new(version, kept.chain(rules).collect())
    }

    /// The same rules under another version number, at most [`MAX_VERSION`].
    pub fn with_version(&self, version: u64) -> Result<RuleSet, RulesError> {
        Ok(RuleSet {
            version: bounded(version)?,
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

    pub fn version(&self) -> u64 {
        self.version
    }

    /// Every rule with a counter, sub-counters of sharded rules included.
    pub fn rules(&self) -> &[Arc<Rule>] {
        &self.rules
    }

    /// The rules as written: without the sub-counters derived from them.
    pub fn written(&self) -> impl Iterator<Item = &Arc<Rule>> {
        self.rules.iter().filter(|r| r.shard_of.is_none())
    }

    pub fn tier<'a>(&'a self, tier: Option<&'a str>) -> impl Iterator<Item = &'a Arc<Rule>> + 'a {
        self.written().filter(move |r| r.tier.as_deref() == tier)
    }

    pub fn get(&self, name: &str) -> Option<(usize, &Arc<Rule>)> {
        self.rules
            .iter()
            .enumerate()
            .find(|(_, r)| &*r.name == name)
    }

    /// The winning rule of every `by` dimension for this request.
    pub fn select<'r>(&self, req: &select::Subject<'r>) -> Selection {
        self.index.select(&self.rules, req)
    }
}

impl fmt::Display for RuleSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rule set v{} ({} rules)", self.version, self.rules.len())
    }
}

pub use select::Subject;

#[cfg(test)]
mod tests;
