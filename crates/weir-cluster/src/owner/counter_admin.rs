//! The counters API at the node that counts a key: one counter read
//! (`OP_KIND_PEEK`) or cleared (`OP_KIND_RESET`) without a check.

use std::sync::Arc;

use weir_core::{Limiter, Rule, Unavailable};
use weir_proto::weir::v1::{CounterOp, OpKind, OpResult};

use super::replicate::Replicator;
use crate::wire;

/// A peek or a reset of `op`'s counter on `limiter`, answered with the
/// counter's state after. `rule` is the rule as this node has it: one it
/// does not know is refused, as a consume naming it is. A reset is marked
/// for the replicator, so the key's replica holder takes the fresh state
/// in place of its copy, as it takes any change.
pub fn apply(
    limiter: &Limiter,
    replicator: &Replicator,
    op: &CounterOp,
    rule: Option<&Arc<Rule>>,
) -> OpResult {
    let Some(rule) = rule else {
        return wire::error_to_wire(&Unavailable::UnknownRule(op.rule.clone()).into());
    };
    if op.kind() == OpKind::Reset && limiter.reset(&rule.name, &op.key) {
        replicator.mark(&rule.name, &op.key, limiter.now());
    }
    match limiter.peek(&rule.name, &op.key) {
        Some(d) => wire::decided(&d),
        None => wire::error_to_wire(&Unavailable::UnknownRule(op.rule.clone()).into()),
    }
}
