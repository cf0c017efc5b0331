//! The check path every API calls: decide here, or (in a cluster) at the owner.
//!
//! The node turns HTTP, gRPC and Envoy RLS requests into one core
//! [`Request`] and hands it to [`Engine::check`]; which node's counters
//! decide is this module's business, not the handler's.

use std::sync::Arc;

use parking_lot::Mutex;
use thiserror::Error;
use weir_core::{CheckError, Decision, Limiter, Request, Rule, RuleSet, RulesError, Verdict};

use crate::cluster::Cluster;

/// Why a check produced no verdict.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CheckFailure {
    /// The request itself is wrong (HTTP 400); nothing was consumed.
    #[error(transparent)]
    Input(CheckError),
    /// The limiter cannot decide and is configured to fail closed, or its
    /// store is full (HTTP 503, never 429).
    #[error("limiter unavailable: {0}")]
    Unavailable(String),
}

impl From<CheckError> for CheckFailure {
    fn from(e: CheckError) -> Self {
        match e {
            CheckError::StoreFull { .. } | CheckError::UnknownRule(_) => {
                CheckFailure::Unavailable(e.to_string())
            }
            _ => CheckFailure::Input(e),
        }
    }
}

/// Which strategy decides checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// Forward each check to the key's owner; exact at steady state.
    #[default]
    Owner,
    /// Count locally, broadcast deltas every sync interval (seed 8C).
    Gossip,
    /// Enforce limit/N alone, N = live members (seed 8A).
    Divide,
}

impl Strategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Owner => "owner",
            Strategy::Gossip => "gossip",
            Strategy::Divide => "divide",
        }
    }
}

/// What a node does when a key's owner does not answer within the deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OwnerFailure {
    /// Decide locally with each rule sized limit/N (N = live members).
    #[default]
    Local,
    /// Admit.
    Open,
    /// Refuse with 503 (never 429: the caller is not over its limit).
    Closed,
}

/// The decision engine a node serves.
pub struct Engine {
    limiter: Arc<Limiter>,
    strategy: Strategy,
    /// Present when this node is a cluster member; the owner strategy
    /// forwards through it and rule writes are pushed through it.
    cluster: Option<Arc<Cluster>>,
    /// Serializes rule changes so two concurrent updates cannot both build
    /// on the same version and lose one of them.
    rules_write: Mutex<()>,
}

impl Engine {
    /// An engine that decides every check in this process.
    pub fn local(limiter: Arc<Limiter>) -> Engine {
        Engine {
            limiter,
            strategy: Strategy::Owner,
            cluster: None,
            rules_write: Mutex::new(()),
        }
    }

    /// An engine whose checks are decided by each key's owner in `cluster`
    /// (the owner strategy), and whose rule writes reach every member.
    pub fn clustered(limiter: Arc<Limiter>, cluster: Arc<Cluster>) -> Engine {
        Engine {
            cluster: Some(cluster),
            ..Engine::local(limiter)
        }
    }

    /// Selects the strategy: `owner` forwards to each key's owner, `gossip`
    /// decides on local counters plus peers' reported counts, `divide`
    /// decides at limit/N alone. The cluster must have been started with the
    /// same strategy for gossip's sync task to run.
    pub fn with_strategy(mut self, strategy: Strategy) -> Engine {
        self.strategy = strategy;
        self
    }

    pub fn limiter(&self) -> &Arc<Limiter> {
        &self.limiter
    }

    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    pub fn cluster(&self) -> Option<&Arc<Cluster>> {
        self.cluster.as_ref()
    }

    fn forwarding(&self) -> Option<&Arc<Cluster>> {
        self.cluster
            .as_ref()
            .filter(|_| self.strategy == Strategy::Owner)
    }

    pub async fn check(&self, req: &Request<'_>) -> Result<Verdict, CheckFailure> {
        match (&self.cluster, self.strategy) {
            (Some(cluster), Strategy::Owner) => cluster.check(req).await,
            (Some(cluster), Strategy::Gossip) => cluster.check_gossip(req),
            (Some(cluster), Strategy::Divide) => cluster.check_divide(req),
            (None, _) => self.limiter.check(req).map_err(CheckFailure::from),
        }
    }

    /// Many checks, each with its own verdict, in order. In a cluster they
    /// are issued together, so checks for one owner share Decide calls.
    pub async fn check_many(&self, reqs: &[Request<'_>]) -> Vec<Result<Verdict, CheckFailure>> {
        match self.forwarding() {
            Some(cluster) => cluster.check_many(reqs).await,
            // Nothing else awaits: gossip, divide and a lone node decide in place.
            None => {
                let mut out = Vec::with_capacity(reqs.len());
                for r in reqs {
                    out.push(self.check(r).await);
                }
                out
            }
        }
    }

    /// One request against a rule the request carries itself (an Envoy
    /// descriptor's limit override). In a cluster under the owner strategy
    /// the key's owner decides it, so an override is as exact as a rule.
    pub async fn check_adhoc(
        &self,
        rule: &Arc<Rule>,
        hash_part: &str,
        cost: u64,
    ) -> Result<Decision, CheckFailure> {
        match self.forwarding() {
            Some(cluster) => cluster.check_carried(rule, hash_part, cost).await,
            None => self
                .limiter
                .check_adhoc(rule, hash_part, cost)
                .map_err(CheckFailure::from),
        }
    }

    pub fn rules(&self) -> Arc<RuleSet> {
        self.limiter.rules()
    }

    /// Replaces the rules of one tier (None: the rules for any tier). The new
    /// set is validated whole and takes the next version; on error the set
    /// in force is untouched.
    pub fn replace_tier(
        &self,
        tier: Option<&str>,
        rules: Vec<Rule>,
    ) -> Result<Arc<RuleSet>, RulesError> {
        self.write_rules(|current| current.with_tier(tier, rules, current.version() + 1))
    }

    /// Installs a whole set (a reloaded rules file). It takes the file's
    /// version when that is newer, else the next version, so versions only grow.
    pub fn install(&self, set: RuleSet) -> Arc<RuleSet> {
        let written = self.write_rules(|current| {
            let version = set.version().max(current.version() + 1);
            Ok(set.with_version(version))
        });
        written.unwrap_or_else(|_| self.limiter.rules())
    }

    /// One rule write: in a cluster, under the cluster's rule lock and
    /// pushed to every member; alone, under this engine's lock.
    fn write_rules(
        &self,
        write: impl FnOnce(&RuleSet) -> Result<RuleSet, RulesError>,
    ) -> Result<Arc<RuleSet>, RulesError> {
        if let Some(cluster) = &self.cluster {
            return cluster.write_rules(write);
        }
        let _guard = self.rules_write.lock();
        let next = write(&self.limiter.rules())?;
        self.limiter.install(next);
        Ok(self.limiter.rules())
    }
}
