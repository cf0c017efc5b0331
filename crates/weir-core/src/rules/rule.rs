//! One rule: which requests it limits, and how.

use std::sync::Arc;
use std::time::Duration;

use super::{Hot, RoutePattern};
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

/// One validated rule. Build it through [`RuleSet`](crate::RuleSet) parsing; every field has
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
    /// Set for a limit a request carried ([`Rule::carried`]), never for a
    /// rule of a set: its name is made of the caller's values.
    pub carried: bool,
}

/// The label every limit carried in a request is counted under, in metrics
/// and in any other tally by rule. A carried limit is named after its value,
/// so labelling it by name would let a caller mint a series per value; `*`
/// cannot occur in a rule name, so this label never collides with a rule's.
pub const CARRIED_LABEL: &str = "override:*";

/// [`CARRIED_LABEL`], allocated once rather than per check.
static CARRIED: std::sync::LazyLock<Arc<str>> =
    std::sync::LazyLock::new(|| Arc::from(CARRIED_LABEL));

impl Rule {
    /// The name this rule is counted under: its own, or [`CARRIED_LABEL`]
    /// for every limit a request carried. Whatever callers send, the
    /// labels are the rule set's names and this one.
    pub fn label(&self) -> &Arc<str> {
        if self.carried {
            &CARRIED
        } else {
            &self.name
        }
    }

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

    /// Writes the bytes `serde_json` writes for [`Rule::to_json`], without
    /// building the `Value`: a tier's JSON and digest go over every rule
    /// of the tier, and the map of each rule was most of their cost. The
    /// keys come sorted, as `serde_json::Map` sorts them.
    pub fn write_json(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        fn text(out: &mut impl std::io::Write, key: &str, v: &str) -> std::io::Result<()> {
            write!(out, ",\"{key}\":")?;
            serde_json::to_writer(&mut *out, v).map_err(std::io::Error::from)
        }
        write!(out, "{{\"algorithm\":\"{}\"", self.algorithm.as_str())?;
        if let Some(b) = self.burst {
            write!(out, ",\"burst\":{b}")?;
        }
        write!(out, ",\"by\":\"{}\"", self.by.as_str())?;
        if let Some(c) = &self.client {
            text(out, "client", c)?;
        }
        if self.hot != Hot::default_for(self.algorithm, self.queue) {
            write!(out, ",\"hot\":\"{}\"", self.hot.as_str())?;
        }
        write!(out, ",\"limit\":{}", self.limit)?;
        text(out, "name", &self.name)?;
        if let Some(q) = self.queue {
            write!(out, ",\"queue\":{q}")?;
        }
        if let Some(r) = &self.route {
            text(out, "route", r.as_str())?;
        }
        if self.scope != Scope::Regional {
            write!(out, ",\"scope\":\"{}\"", self.scope.as_str())?;
        }
        write!(out, ",\"shadow\":{}", self.shadow)?;
        if let Hot::Shard(k) = self.hot {
            write!(out, ",\"shards\":{k}")?;
        }
        if let Some(t) = &self.tier {
            text(out, "tier", t)?;
        }
        text(out, "window", &format_duration(self.window))?;
        write!(out, "}}")
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
            carried: true,
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
