//! A node alone, or a process embedding the limiter: every check decided in this process.

use std::sync::Arc;

use futures::future::BoxFuture;
use weir_core::{CheckError, CheckRequest, Decision, Limiter, Rule, Verdict};

use super::{counter_here, CounterAction, Decided, Strategy};

pub struct LocalStrategy {
    limiter: Arc<Limiter>,
}

impl LocalStrategy {
    pub fn new(limiter: Arc<Limiter>) -> Self {
        LocalStrategy { limiter }
    }
}

impl Strategy for LocalStrategy {
    fn name(&self) -> &'static str {
        "local"
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn check<'a>(&'a self, req: &'a CheckRequest) -> Decided<'a, Verdict> {
        Decided::Now(self.limiter.check(req))
    }

    fn give_back<'a>(
        &'a self,
        rule: &'a Arc<Rule>,
        hash_part: &'a str,
        cost: u64,
    ) -> BoxFuture<'a, ()> {
        self.limiter.give_back(rule, hash_part, cost);
        Box::pin(async {})
    }

    fn counter<'a>(
        &'a self,
        rule: &'a Arc<Rule>,
        hash_part: &'a str,
        action: CounterAction,
    ) -> BoxFuture<'a, Result<(Decision, Option<String>), CheckError>> {
        let done = counter_here(&self.limiter, rule, hash_part, action);
        Box::pin(async move { done })
    }
}
