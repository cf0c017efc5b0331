//! A gateway's check of a key a ring change took from its own node, while
//! the handoff that carries the key's count is still on its way: decided
//! here, on the count still whole here, as the key's new owner would have
//! this node decide it when asked ([`super::moves::Moves::deciding_for`]).

use std::sync::Arc;

use weir_core::{CheckError, Decision, Rule};

use super::remote::{Remote, Via};
use crate::stats::bump;
use crate::topology::membership::NodeIdentity;

impl Remote {
    /// Decides a limit of a rule (never a carried one, which no pass before
    /// the landing hands on) whose key `owner` took from this node, while
    /// the handoff has not landed and `owner` asks this node about it.
    /// None when that is not so, or this node is leaving: the check goes
    /// to `owner`.
    pub(super) fn decide_moving(
        &self,
        rule: &Arc<Rule>,
        hash_part: &str,
        cost: u64,
        owner: &NodeIdentity,
    ) -> Option<Result<(Decision, Via), CheckError>> {
        let taken = self.moves.deciding_for(hash_part, &owner.id)?;
        let decided = self
            .local
            .guarded(|_| self.decide_here(rule, hash_part, cost, false))?;
        if decided.is_ok() {
            // Counted here for a key another member owns: what it spent
            // goes to that member before the landing, and failing that,
            // with the next stray sweep. Named once decided: a pass that
            // reads the key before finds nothing spent yet, and forgets it.
            bump(&self.stats.strays, 1);
            self.local.mark_stray();
            taken.decided_here(&rule.name, hash_part, false);
        }
        Some(decided)
    }
}
