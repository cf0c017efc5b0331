//! weir-core's types to the `weir.v1.Peer` messages and back: the one place the wire format meets the meaning.

use std::borrow::Cow;
use std::time::Duration;

use weir_core::{
    CheckError, CounterSnapshot, Decision, InputField, Nanos, Rule, State, Unavailable,
    REFUND_SPENT,
};
use weir_proto::weir::v1::op_result::Outcome;
use weir_proto::weir::v1::{
    CarriedLimit, CounterOp, CounterState, Decision as WireDecision, OpKind, OpResult, PeerError,
    PeerErrorCode,
};

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

pub fn decision_to_wire(d: &Decision) -> WireDecision {
    WireDecision {
        allowed: d.allowed,
        limit: d.limit,
        remaining: d.remaining,
        retry_after_ns: nanos(d.retry_after),
        reset_at_ms: d.reset_at,
        delay_ns: nanos(d.delay),
        at: d.at,
    }
}

pub fn decision_from_wire(d: &WireDecision) -> Decision {
    Decision {
        allowed: d.allowed,
        limit: d.limit,
        remaining: d.remaining,
        retry_after: Duration::from_nanos(d.retry_after_ns),
        reset_at: d.reset_at_ms,
        delay: Duration::from_nanos(d.delay_ns),
        at: d.at,
    }
}

/// A consume of `cost` on (rule, hash part). `carried`: the limit is a
/// request's own (an Envoy override), sent along whole so the owner decides
/// against it as sent. It never expires: [`expiring`] sets when it does.
pub fn consume(rule: &Rule, hash_part: &str, cost: u64, carried: bool) -> CounterOp {
    CounterOp {
        // Copied as a `str`: `to_string` on the `Arc<str>` goes through
        // `Display`, about 110 instructions more per copy.
        rule: String::from(&*rule.name),
        key: hash_part.to_string(),
        cost,
        kind: OpKind::Consume as i32,
        at: 0,
        carried: carried.then(|| CarriedLimit {
            limit: rule.limit,
            window_ns: nanos(rule.window),
        }),
        stand_in_for: String::new(),
        sent_on: false,
        asked_back: false,
        asker_boot: 0,
        expires_at: 0,
        checks: 0,
        traceparent: String::new(),
    }
}

/// The same op, counted nowhere after `at` (unix ns, [`crate::owner::peers::expiry`]).
pub fn expiring(mut op: CounterOp, at: Nanos) -> CounterOp {
    op.expires_at = at;
    op
}

/// The same op, sent to the key's replica holder because `owner` cannot be reached.
pub fn stand_in(mut op: CounterOp, owner: &str) -> CounterOp {
    op.stand_in_for = owner.to_string();
    op
}

/// Records `cost` admitted without the key's owner, whatever its limit.
pub fn charge(rule: &str, hash_part: &str, cost: u64) -> CounterOp {
    CounterOp {
        rule: rule.to_string(),
        key: hash_part.to_string(),
        cost,
        kind: OpKind::Charge as i32,
        at: 0,
        carried: None,
        stand_in_for: String::new(),
        sent_on: false,
        asked_back: false,
        asker_boot: 0,
        expires_at: 0,
        checks: 0,
        traceparent: String::new(),
    }
}

/// Asks a hot key's owner for the next lease, telling it the `used` units
/// and the `checks` decided from leases since the last ask (the traffic it
/// no longer sees).
pub fn lease(rule: &str, hash_part: &str, used: u64, checks: u64) -> CounterOp {
    CounterOp {
        rule: rule.to_string(),
        key: hash_part.to_string(),
        cost: used,
        checks,
        kind: OpKind::Lease as i32,
        ..CounterOp::default()
    }
}

/// `dead` admitted `cost` at `at` (its clock) for the sender: for the
/// key's new owner, which adds it unless its copy already holds it.
pub fn admitted(rule: &str, hash_part: &str, cost: u64, at: Nanos, dead: &str) -> CounterOp {
    CounterOp {
        at,
        ..stand_in(charge(rule, hash_part, cost), dead)
    }
}

/// Gives back `cost` consumed by a decision the owner took at `at`.
pub fn refund(rule: &str, hash_part: &str, cost: u64, at: Nanos) -> CounterOp {
    CounterOp {
        rule: rule.to_string(),
        key: hash_part.to_string(),
        cost,
        kind: OpKind::Refund as i32,
        at,
        carried: None,
        stand_in_for: String::new(),
        sent_on: false,
        asked_back: false,
        asker_boot: 0,
        expires_at: 0,
        checks: 0,
        traceparent: String::new(),
    }
}

/// Gives `cost` back to what (rule, hash part) has spent, tied to no
/// decision ([`REFUND_SPENT`]): an Envoy refund. A carried limit goes
/// along whole, as a consume's does, so the owner finds its counter.
pub fn refund_spent(rule: &Rule, hash_part: &str, cost: u64) -> CounterOp {
    CounterOp {
        carried: rule.carried.then(|| CarriedLimit {
            limit: rule.limit,
            window_ns: nanos(rule.window),
        }),
        ..refund(&rule.name, hash_part, cost, REFUND_SPENT)
    }
}

/// Reads (`OpKind::Peek`) or clears (`OpKind::Reset`) one counter at its
/// owner, for the counters API.
pub fn counter_admin(rule: &str, hash_part: &str, kind: OpKind) -> CounterOp {
    CounterOp {
        rule: rule.to_string(),
        key: hash_part.to_string(),
        kind: kind as i32,
        ..CounterOp::default()
    }
}

/// The counter's state an owner answered a peek or a reset with.
pub fn counter_state(result: OpResult, rule: &Rule) -> Result<Decision, CheckError> {
    match answer(result, rule, 1) {
        Answer::Decided(d) => Ok(d),
        Answer::Refused(e) => Err(e),
        Answer::Undecided(why) => Err(Unavailable::Unreachable(why).into()),
        Answer::NotReady | Answer::Expired => {
            Err(Unavailable::Unreachable("the key's owner is not ready".into()).into())
        }
    }
}

/// The rule an op carries, rebuilt exactly as the sender built it.
pub fn carried_rule(op: &CounterOp) -> Option<Result<Rule, CheckError>> {
    let c = op.carried.as_ref()?;
    Some(
        Rule::carried(&op.rule, c.limit, Duration::from_nanos(c.window_ns))
            .map_err(|e| CheckError::invalid(InputField::Limit, e.reason)),
    )
}

pub fn decided(d: &Decision) -> OpResult {
    OpResult {
        outcome: Some(Outcome::Decision(decision_to_wire(d))),
        lease: None,
    }
}

/// The answer to a refund: nothing to report beyond "done".
pub fn refunded() -> OpResult {
    OpResult {
        outcome: Some(Outcome::Decision(WireDecision {
            allowed: true,
            ..WireDecision::default()
        })),
        lease: None,
    }
}

/// The owner cannot decide this op: it is not (or no longer) the key's owner.
pub fn not_owner(message: &str) -> OpResult {
    refusal(PeerErrorCode::NotOwner, "key", message.to_string())
}

/// The op came after its expiry, and was answered without being counted.
pub fn expired() -> OpResult {
    refusal(
        PeerErrorCode::Expired,
        "expires_at",
        "the op came after its gateway gave up on it: not counted".to_string(),
    )
}

/// The receiver has not heard of its cluster yet, and decides nothing.
pub fn not_ready(message: &str) -> OpResult {
    refusal(PeerErrorCode::NotReady, "", message.to_string())
}

/// Whether an answer is [`not_owner`]'s: the node did not decide the op.
pub fn is_not_owner(result: &OpResult) -> bool {
    matches!(&result.outcome, Some(Outcome::Error(e)) if e.code == PeerErrorCode::NotOwner as i32)
}

fn refusal(code: PeerErrorCode, field: &str, message: String) -> OpResult {
    OpResult {
        outcome: Some(Outcome::Error(PeerError {
            code: code as i32,
            field: field.to_string(),
            message,
        })),
        lease: None,
    }
}

pub fn error_to_wire(e: &CheckError) -> OpResult {
    match e {
        CheckError::Invalid { field, reason } => refusal(
            match field {
                InputField::Key => PeerErrorCode::InvalidKey,
                InputField::Cost => PeerErrorCode::InvalidCost,
                _ => PeerErrorCode::InvalidInput,
            },
            field.as_str(),
            reason.to_string(),
        ),
        CheckError::CostExceedsLimit { max, .. } => {
            refusal(PeerErrorCode::CostExceedsLimit, "cost", max.to_string())
        }
        CheckError::Unavailable(Unavailable::UnknownRule(rule)) => {
            refusal(PeerErrorCode::UnknownRule, "rule", rule.clone())
        }
        CheckError::Unavailable(Unavailable::StoreFull { max_keys, .. }) => {
            refusal(PeerErrorCode::StoreFull, "", max_keys.to_string())
        }
        // The field tells the one store of carried limits from a rule's.
        CheckError::Unavailable(Unavailable::CarriedFull { max_keys }) => {
            refusal(PeerErrorCode::StoreFull, "limit", max_keys.to_string())
        }
        CheckError::Unavailable(u) => refusal(PeerErrorCode::NotOwner, "", u.to_string()),
    }
}

/// When the owner applied a charge (its clock), from its answer.
pub fn answer_charge(result: OpResult) -> Option<Nanos> {
    match result.outcome {
        Some(Outcome::Decision(d)) => Some(d.at),
        _ => None,
    }
}

/// When an owner admitted an op, by its answer; None for a denial, an
/// error or no answer.
pub fn admitted_at(result: &OpResult) -> Option<Nanos> {
    match &result.outcome {
        Some(Outcome::Decision(d)) if d.allowed => Some(d.at),
        _ => None,
    }
}

/// What an owner's answer to one op means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Decided(Decision),
    /// The request is wrong or the owner's store refused it: the check's answer.
    Refused(CheckError),
    /// The owner cannot decide this op (its rules lag behind ours, it is
    /// leaving, or the answer is empty): treat as no answer.
    Undecided(String),
    /// The owner has not heard of its cluster yet: treat as an owner that
    /// did not answer in time.
    NotReady,
    /// The op reached its decider after its expiry and was not counted:
    /// treat as an owner that did not answer in time.
    Expired,
}

/// Reads an owner's answer to a consume of `cost` on `rule`.
pub fn answer(result: OpResult, rule: &Rule, cost: u64) -> Answer {
    let e = match result.outcome {
        Some(Outcome::Decision(d)) => return Answer::Decided(decision_from_wire(&d)),
        Some(Outcome::Error(e)) => e,
        None => return Answer::Undecided("empty answer".into()),
    };
    let input = |field: InputField| {
        Answer::Refused(CheckError::invalid(field, Cow::Owned(e.message.clone())))
    };
    match PeerErrorCode::try_from(e.code).unwrap_or(PeerErrorCode::Unspecified) {
        PeerErrorCode::CostExceedsLimit => Answer::Refused(CheckError::CostExceedsLimit {
            rule: rule.name.to_string(),
            cost,
            max: rule.policy.max_cost(),
        }),
        PeerErrorCode::InvalidCost => input(InputField::Cost),
        PeerErrorCode::InvalidKey => input(InputField::Key),
        PeerErrorCode::InvalidInput => {
            input(InputField::parse(&e.field).unwrap_or(InputField::Key))
        }
        PeerErrorCode::StoreFull if e.field == "limit" => Answer::Refused(
            Unavailable::CarriedFull {
                max_keys: e.message.parse().unwrap_or(0),
            }
            .into(),
        ),
        PeerErrorCode::StoreFull => Answer::Refused(
            Unavailable::StoreFull {
                rule: rule.name.to_string(),
                max_keys: e.message.parse().unwrap_or(0),
            }
            .into(),
        ),
        // The owner's rules lag behind ours (it pulls ours from the version
        // the call carried), or it is leaving.
        PeerErrorCode::UnknownRule | PeerErrorCode::NotOwner | PeerErrorCode::Unspecified => {
            Answer::Undecided(e.message)
        }
        PeerErrorCode::NotReady => Answer::NotReady,
        PeerErrorCode::Expired => Answer::Expired,
    }
}

pub fn snapshot_to_wire(snap: &CounterSnapshot) -> Option<CounterState> {
    match postcard::to_allocvec(&snap.state) {
        Ok(state) => Some(CounterState {
            rule: snap.rule.clone(),
            key: snap.hash_part.clone(),
            state,
            carried: snap.carried.map(|c| CarriedLimit {
                limit: c.limit,
                window_ns: nanos(c.window),
            }),
        }),
        Err(e) => {
            tracing::error!(rule = %snap.rule, error = %e, "cannot encode a counter for handoff");
            None
        }
    }
}

pub fn snapshot_from_wire(c: CounterState) -> Option<CounterSnapshot> {
    let state: State = postcard::from_bytes(&c.state).ok()?;
    let carried = c.carried.map(|l| weir_core::CarriedLimit {
        limit: l.limit,
        window: Duration::from_nanos(l.window_ns),
    });
    Some(CounterSnapshot {
        rule: c.rule,
        hash_part: c.key,
        state,
        carried,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule() -> Rule {
        Rule::carried("r", 5, Duration::from_secs(60)).unwrap()
    }

    #[test]
    fn every_refusal_reads_back_as_the_error_that_caused_it() {
        let errors = [
            CheckError::invalid(InputField::Ip, "is not an address"),
            CheckError::invalid(InputField::Key, "must not be empty"),
            CheckError::invalid(InputField::Cost, "must be at least 1"),
            CheckError::CostExceedsLimit {
                rule: "r".into(),
                cost: 9,
                max: 5,
            },
            Unavailable::StoreFull {
                rule: "r".into(),
                max_keys: 12,
            }
            .into(),
            Unavailable::CarriedFull { max_keys: 12 }.into(),
        ];
        for e in errors {
            assert_eq!(
                answer(error_to_wire(&e), &rule(), 9),
                Answer::Refused(e.clone()),
                "{e}"
            );
        }
        let unknown = Unavailable::UnknownRule("r".into()).into();
        assert!(matches!(
            answer(error_to_wire(&unknown), &rule(), 1),
            Answer::Undecided(_)
        ));
    }

    #[test]
    fn a_decision_survives_the_wire() {
        let d = Decision::deny(5, Duration::from_nanos(1_234_567_891), 42);
        assert_eq!(answer(decided(&d), &rule(), 1), Answer::Decided(d));
    }

    #[test]
    fn a_carried_rule_is_rebuilt_exactly() {
        let op = consume(&rule(), "k", 1, true);
        assert_eq!(carried_rule(&op).unwrap().unwrap(), rule());
        assert!(carried_rule(&consume(&rule(), "k", 1, false)).is_none());
    }
}
