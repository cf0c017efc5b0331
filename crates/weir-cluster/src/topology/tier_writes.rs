//! Every write to one tier made by one member, the tier's owner on the ring, so `If-Match` is judged in the one order the writes are made in.
//!
//! Two admins who PUT one tier through two nodes with the same `If-Match`
//! both passed the test when each node judged it against its own set:
//! each saw the tag it was given, each wrote, and one write vanished in
//! the merge. Here the write goes to the member that owns the tier's key
//! (`rules-tier:<tier>`) on the ring, forwarded as a check is; it judges
//! the tag and writes under its rules lock, so of two writes made on the
//! strength of one tag, the second finds the tag changed and is refused
//! (412). The owner pushes the write to every member as any write, and
//! answers with it, so the member that forwarded it holds the write before
//! it answers its caller.
//!
//! While the members disagree on the ring (a join or a death not yet
//! seen by all), two of them can each take themselves for the owner for a
//! moment; the merge still converges, as it does for any two writes.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use weir_core::{RuleError, RuleSet, RulesError};
use weir_proto::weir::v1::{TierWriteOutcome, WriteTierRequest, WriteTierResponse};

use super::rules_sync::Rules;

/// How long a forwarded write may take at its owner: it parses, validates
/// and indexes the whole set, a fraction of a second at 100,000 rules.
const WRITE_DEADLINE: Duration = Duration::from_secs(10);

/// What the caller's `If-Match` asks of the tier's current entity tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// No `If-Match`, or `*`.
    Any,
    /// One of these strong tags, quotes included.
    OneOf(Vec<String>),
}

impl Condition {
    /// Whether a tier whose tag is `current` meets the condition.
    pub fn allows(&self, current: &str) -> bool {
        match self {
            Condition::Any => true,
            Condition::OneOf(tags) => tags.iter().any(|t| t == current),
        }
    }
}

/// Why a tier write was not made. Nothing changed in any case.
#[derive(Debug, thiserror::Error)]
pub enum TierWriteError {
    #[error(transparent)]
    Rules(#[from] RulesError),
    /// The member that writes this tier did not answer.
    #[error("the member that writes this tier ({owner}) cannot be reached: {reason}")]
    OwnerUnreachable { owner: String, reason: String },
    /// The write's task did not finish (the node is stopping).
    #[error("the write did not finish")]
    Unfinished,
}

/// `{"version":N,"rules":[...]}` for one tier of `set`: the version of the
/// tier's last write, and its rules in force.
pub fn tier_json(set: &RuleSet, tier: Option<&str>) -> Value {
    json!({
        "version": set.tier_version(tier),
        "rules": set.tier(tier).map(|r| r.to_json()).collect::<Vec<_>>(),
    })
}

/// The entity tag of one tier as [`tier_json`] shows it: its version and a
/// digest of the listing. Two writes that took one version on two nodes at
/// once have different tags, so a caller who wrote one sees from the tag
/// whether it is the one in force, and `If-Match` with it refuses to
/// overwrite the other.
pub fn tier_tag(set: &RuleSet, tier: Option<&str>) -> String {
    let digest = Sha256::digest(tier_json(set, tier).to_string().as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("\"{}-{hex}\"", set.tier_version(tier))
}

/// The ring key of a tier's writes; `*` for the rules of any tier, which
/// no tier name can be.
fn owner_key(tier: Option<&str>) -> String {
    format!("rules-tier:{}", tier.unwrap_or("*"))
}

/// Parses `body`, judges `condition` and writes the tier, all under the
/// rules lock; the new set and the tiers pushed. On the blocking pool.
fn write_here(
    rules: &Rules,
    tier: Option<&str>,
    body: &str,
    condition: &Condition,
) -> Result<Arc<RuleSet>, RulesError> {
    let body = RuleSet::parse_tier_body(tier, body)?;
    rules.write(|current| {
        if !condition.allows(&tier_tag(current, tier)) {
            return Err(RulesError::Precondition {
                tier: tier.map(str::to_string),
                version: current.tier_version(tier),
            });
        }
        current.refuse_emptying(tier, &body.rules, body.allow_empty)?;
        current.with_tier(tier, body.rules, current.next_version()?)
    })
}

/// Writes `tier` from a PUT `body` at the tier's owner: here, or forwarded.
pub async fn write(
    rules: Arc<Rules>,
    tier: Option<String>,
    body: String,
    condition: Condition,
) -> Result<Arc<RuleSet>, TierWriteError> {
    let owner = rules
        .routing()
        .ring()
        .owner(&owner_key(tier.as_deref()))
        .cloned();
    let Some(owner) = owner.filter(|o| o.id != rules.routing().me()) else {
        let here = rules.clone();
        let written =
            crate::offload::blocking(move || write_here(&here, tier.as_deref(), &body, &condition))
                .await;
        return written
            .ok_or(TierWriteError::Unfinished)?
            .map_err(Into::into);
    };
    let (conditional, if_match) = match condition {
        Condition::Any => (false, Vec::new()),
        Condition::OneOf(tags) => (true, tags),
    };
    let req = WriteTierRequest {
        tier: tier.clone(),
        body_json: body,
        conditional,
        if_match,
    };
    let answer = rules
        .link()
        .write_tier(&owner, req, WRITE_DEADLINE)
        .await
        .map_err(|e| TierWriteError::OwnerUnreachable {
            owner: owner.id.clone(),
            reason: e.to_string(),
        })?;
    match answer.outcome() {
        TierWriteOutcome::Written => {
            // Held here before the caller hears of it: a GET through this
            // node right after the 200 shows the write.
            let written = answer.written.unwrap_or_default();
            if rules.adopt(written, &owner.id).await?.unheld {
                // The write came as an edit of one this node does not
                // hold yet: the owner has both.
                rules.pull(&owner).await;
            }
            Ok(rules.current_set())
        }
        TierWriteOutcome::PreconditionFailed => Err(RulesError::Precondition {
            tier,
            version: answer.version,
        }
        .into()),
        TierWriteOutcome::Invalid if answer.field.is_empty() => Err(RulesError::Syntax {
            format: "JSON",
            message: answer.reason,
        }
        .into()),
        TierWriteOutcome::Invalid => Err(RulesError::Rule(RuleError {
            rule: answer.rule,
            field: answer.field,
            reason: answer.reason,
        })
        .into()),
        TierWriteOutcome::Unspecified => Err(TierWriteError::OwnerUnreachable {
            owner: owner.id.clone(),
            reason: "it answered with no outcome".into(),
        }),
    }
}

/// A write another member forwarded to this one, as the tier's owner.
pub(crate) async fn serve(rules: Arc<Rules>, req: WriteTierRequest) -> WriteTierResponse {
    let condition = if req.conditional {
        Condition::OneOf(req.if_match)
    } else {
        Condition::Any
    };
    let written = crate::offload::blocking(move || {
        let before = rules.current_set().version();
        write_here(&rules, req.tier.as_deref(), &req.body_json, &condition)
            .map(|set| super::rules_wire::to_wire_since(&set, before))
    })
    .await;
    let mut answer = WriteTierResponse::default();
    match written {
        Some(Ok(wire)) => {
            answer.set_outcome(TierWriteOutcome::Written);
            answer.written = Some(wire);
        }
        Some(Err(RulesError::Precondition { version, .. })) => {
            answer.set_outcome(TierWriteOutcome::PreconditionFailed);
            answer.version = version;
        }
        Some(Err(RulesError::Syntax { message, .. })) => {
            answer.set_outcome(TierWriteOutcome::Invalid);
            answer.reason = message;
        }
        Some(Err(RulesError::Rule(e))) => {
            answer.set_outcome(TierWriteOutcome::Invalid);
            (answer.rule, answer.field, answer.reason) = (e.rule, e.field, e.reason);
        }
        // The write did not finish (the runtime is stopping): no outcome.
        None => {}
    }
    answer
}
