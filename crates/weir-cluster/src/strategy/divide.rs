//! The divide strategy (docs/cluster.md): each node enforces limit/N alone, N = live members, with no communication.

use std::sync::Arc;

use futures::future::BoxFuture;
use weir_core::{CheckError, CheckRequest, Decision, Limiter, Rule, RuleSet, Verdict};

use super::{CounterAction, Decided, Strategy};
use crate::divided::Divided;
use crate::topology::ring::Ring;

pub struct DivideStrategy {
    /// The full rules: requests are validated against them.
    limiter: Arc<Limiter>,
    divided: Divided,
}

impl DivideStrategy {
    pub fn new(limiter: Arc<Limiter>, divided: Divided) -> Self {
        DivideStrategy { limiter, divided }
    }
}

impl Strategy for DivideStrategy {
    fn name(&self) -> &'static str {
        "divide"
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn check<'a>(&'a self, req: &'a CheckRequest) -> Decided<'a, Verdict> {
        Decided::Now(self.divided.check(&self.limiter, req))
    }

    /// To this node's share: the only count it has.
    fn give_back<'a>(
        &'a self,
        rule: &'a Arc<Rule>,
        hash_part: &'a str,
        cost: u64,
    ) -> BoxFuture<'a, ()> {
        self.divided.give_back(rule, hash_part, cost);
        Box::pin(async {})
    }

    /// This node's share.
    fn counter<'a>(
        &'a self,
        rule: &'a Arc<Rule>,
        hash_part: &'a str,
        action: CounterAction,
    ) -> BoxFuture<'a, Result<(Decision, Option<String>), CheckError>> {
        let done = self.divided.counter(rule, hash_part, action);
        Box::pin(async move { done })
    }

    fn on_rules(&self, rules: &RuleSet) {
        self.divided.rebuild(rules, self.divided.members());
    }

    fn on_ring<'a>(&'a self, _old: &'a Ring, ring: &'a Ring) -> BoxFuture<'a, ()> {
        if ring.len() != self.divided.members() {
            crate::offload::off_the_workers(|| {
                self.divided.rebuild(&self.limiter.rules(), ring.len())
            });
        }
        Box::pin(async {})
    }

    fn maintain(&self) -> BoxFuture<'_, ()> {
        self.divided.sweep();
        Box::pin(async {})
    }
}
