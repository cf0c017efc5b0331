//! The check path every API calls: the strategy chosen at start decides, here or at the owners.
//!
//! The node turns HTTP, gRPC and Envoy RLS requests into one
//! [`CheckRequest`] and hands it to [`Engine::check`]; which node's counters
//! decide is the strategy's business, not the handler's.

use std::future::Future;
use std::sync::Arc;

use parking_lot::Mutex;
use weir_core::rules::TierDigests;
use weir_core::{
    CheckError, CheckRequest, CheckResponse, Decide, Decision, Limiter, Nanos, Rule, RuleSet,
    RulesError, Verdict,
};

use crate::cluster::Cluster;
use crate::strategy::local::LocalStrategy;
use crate::strategy::{CounterAction, Strategy};
use crate::topology::tier_writes::{self, Condition, TierWriteError};

/// The decision engine a node serves.
pub struct Engine {
    limiter: Arc<Limiter>,
    strategy: Arc<dyn Strategy>,
    /// Present when this node is a cluster member: rule writes reach every
    /// member through it.
    cluster: Option<Arc<Cluster>>,
    /// Serializes rule changes on a lone engine so two concurrent updates
    /// cannot both build on the same version and lose one of them.
    rules_write: Mutex<()>,
}

impl Engine {
    /// An engine that decides every check in this process.
    pub fn local(limiter: Arc<Limiter>) -> Engine {
        Engine {
            strategy: Arc::new(LocalStrategy::new(limiter.clone())),
            limiter,
            cluster: None,
            rules_write: Mutex::new(()),
        }
    }

    /// An engine that decides by the cluster's strategy, and whose rule
    /// writes reach every member.
    pub fn clustered(cluster: Arc<Cluster>) -> Engine {
        Engine {
            limiter: cluster.limiter().clone(),
            strategy: cluster.strategy().clone(),
            cluster: Some(cluster),
            rules_write: Mutex::new(()),
        }
    }

    pub fn limiter(&self) -> &Arc<Limiter> {
        &self.limiter
    }

    /// The strategy's name as `GET /v1/cluster` shows it.
    pub fn strategy(&self) -> &'static str {
        self.strategy.name()
    }

    pub fn cluster(&self) -> Option<&Arc<Cluster>> {
        self.cluster.as_ref()
    }

    /// Decides one check against every limit it meets (or the one it carries).
    pub async fn check(&self, req: &CheckRequest) -> Result<Verdict, CheckError> {
        self.strategy.check(req).resolve().await
    }

    /// Many checks, each with its own verdict, in order. In a cluster they
    /// are issued together, so checks for one owner share Decide calls.
    pub async fn check_many(&self, reqs: &[CheckRequest]) -> Vec<Result<Verdict, CheckError>> {
        self.strategy.check_many(reqs).await
    }

    /// Gives a request's cost back to every limit a check of it would
    /// meet, at the nodes that count them (an Envoy descriptor with
    /// `is_negative_hits`). Never denied; refused only as bad input, before
    /// anything is given back. Answers the limits it went to.
    pub async fn refund(&self, req: &CheckRequest) -> Result<Vec<Arc<Rule>>, CheckError> {
        let targets = self.limiter.refund_targets(req)?;
        let sends = targets
            .iter()
            .map(|(rule, hash_part)| self.strategy.give_back(rule, hash_part, req.cost));
        futures::future::join_all(sends).await;
        Ok(targets.into_iter().map(|(rule, _)| rule).collect())
    }

    /// One counter of a rule of the set, read or first cleared wherever
    /// it is counted (the counters API): its state after, and the id of
    /// the node that counts it (None: this node). Unknown rule: `Ok(None)`.
    pub async fn counter(
        &self,
        rule: &str,
        hash_part: &str,
        action: CounterAction,
    ) -> Result<Option<(Decision, Option<String>)>, CheckError> {
        let Some(rule) = self.limiter.rules().get(rule).map(|(_, r)| r.clone()) else {
            return Ok(None);
        };
        self.strategy
            .counter(&rule, hash_part, action)
            .await
            .map(Some)
    }

    pub fn rules(&self) -> Arc<RuleSet> {
        self.limiter.rules()
    }

    /// Replaces the rules of one tier (None: the rules for any tier) as one
    /// write at the next version. The new set is validated whole; on error
    /// the set in force is untouched.
    pub fn replace_tier(
        &self,
        tier: Option<&str>,
        rules: Vec<Rule>,
    ) -> Result<Arc<RuleSet>, RulesError> {
        self.replace_tier_if(tier, rules, true, |_| true)
    }

    /// [`Engine::replace_tier`], only if `precondition` holds for the set in
    /// force at the moment of writing (it runs under the write lock, so no
    /// other write can land between the test and the write). When it does
    /// not, nothing changes and the error is [`RulesError::Precondition`]
    /// with the tier's version: how a client refuses to overwrite a change
    /// it has not seen. Unless `allow_empty`, a write of no rules to a tier
    /// that has some is refused ([`RuleSet::refuse_emptying`]), also under
    /// the lock, so it is judged against the rules it would remove.
    pub fn replace_tier_if(
        &self,
        tier: Option<&str>,
        rules: Vec<Rule>,
        allow_empty: bool,
        precondition: impl FnOnce(&RuleSet) -> bool,
    ) -> Result<Arc<RuleSet>, RulesError> {
        self.write_rules(|current| {
            if !precondition(current) {
                return Err(RulesError::Precondition {
                    tier: tier.map(str::to_string),
                    version: current.tier_version(tier),
                });
            }
            current.refuse_emptying(tier, &rules, allow_empty)?;
            current.with_tier(tier, rules, current.next_version()?)
        })
    }

    /// A `PUT /v1/limits/{tier}` body written as one write, if `condition`
    /// holds for the tier's entity tag ([`tier_writes::tier_tag`]) when it
    /// is written. In a cluster the tier's owner on the ring makes it (see
    /// [`tier_writes`]); alone, this engine, on the blocking pool: parsing
    /// and indexing a large set is no work for the workers.
    pub async fn write_tier(
        self: &Arc<Self>,
        tier: Option<String>,
        body: String,
        condition: Condition,
    ) -> Result<Arc<RuleSet>, TierWriteError> {
        if let Some(cluster) = &self.cluster {
            return cluster.write_tier(tier, body, condition).await;
        }
        let engine = self.clone();
        let written = crate::offload::blocking(move || {
            let t = tier.as_deref();
            let body = RuleSet::parse_tier_body(t, &body)?;
            engine.replace_tier_if(t, body.rules, body.allow_empty, |current| {
                condition.allows(&tier_writes::tier_tag(current, t))
            })
        })
        .await;
        written
            .ok_or(TierWriteError::Unfinished)?
            .map_err(Into::into)
    }

    /// Installs a whole set (a rules file read at start or by hand): every
    /// tier whose rules differ from the set in force takes `set`'s rules.
    /// They are one write, at the file's version when that is newer, else
    /// at the next version, so versions only grow.
    pub fn install(&self, set: RuleSet) -> Result<Arc<RuleSet>, RulesError> {
        self.install_changes(None, set)
    }

    /// A rules file edited from one whose tiers had the digests
    /// `previous` ([`RuleSet::tier_digests`]) to `next`: only the tiers the
    /// edit changed are written, so what the config API wrote to a tier
    /// the edit left alone stays in force.
    pub fn install_edit(
        &self,
        previous: &TierDigests,
        next: RuleSet,
    ) -> Result<Arc<RuleSet>, RulesError> {
        self.install_changes(Some(previous), next)
    }

    fn install_changes(
        &self,
        previous: Option<&TierDigests>,
        next: RuleSet,
    ) -> Result<Arc<RuleSet>, RulesError> {
        self.write_rules(|current| {
            let changes = match previous {
                Some(digests) => next.changes_since(digests),
                None => current.shared_tier_changes(&next),
            };
            if changes.is_empty() {
                return Ok(current.clone());
            }
            let version = next.version().max(current.next_version()?);
            current.with_shared_tiers(changes, version)
        })
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
        let set = self.limiter.rules();
        self.strategy.on_rules(&set);
        Ok(set)
    }
}

impl Decide for Engine {
    fn decide<'a>(
        &'a self,
        req: &'a CheckRequest,
    ) -> impl Future<Output = Result<CheckResponse, CheckError>> + Send + 'a {
        let decided = self.strategy.check(req);
        async move { decided.resolve().await.map(|v| v.response()) }
    }

    fn decide_many<'a>(
        &'a self,
        reqs: &'a [CheckRequest],
    ) -> impl Future<Output = Vec<Result<CheckResponse, CheckError>>> + Send + 'a {
        let all = self.strategy.check_many(reqs);
        async move {
            all.await
                .into_iter()
                .map(|r| r.map(|v| v.response()))
                .collect()
        }
    }

    fn now(&self) -> Nanos {
        self.limiter.now()
    }
}
