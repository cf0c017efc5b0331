//! A node alone, or a process embedding the limiter: every check decided in this process.

use std::sync::Arc;

use weir_core::{CheckRequest, Limiter, Verdict};

use super::{Decided, Strategy};

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
}
