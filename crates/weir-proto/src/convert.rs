//! `weir.v1.RateLimiter` messages to weir-core's check contract and back: the one mapping the node (server side) and the client share.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use weir_core::{
    ceil_ms, CheckError, CheckRequest, CheckResponse, InputField, Rule, Unavailable, Verdict,
};

use crate::weir::v1::{CheckItem, CheckResult, ErrorCode, ItemError, ItemLimit};

/// The rule an item's own limit stands for: the same on every node, so a
/// key's owner decides it as the gateway built it.
pub fn item_rule(l: &ItemLimit) -> Result<Rule, CheckError> {
    let name = format!("override:{}-per-{}ms", l.limit, l.window_ms);
    Rule::carried(&name, l.limit, Duration::from_millis(l.window_ms))
        .map_err(|e| CheckError::invalid(InputField::Limit, e.reason))
}

/// An item as the core reads it. Empty `tier`/`ip` are proto3's "not set";
/// an explicit cost of 0 is passed on, so the core refuses it naming `cost`,
/// the same words every API uses.
pub fn request(item: CheckItem) -> Result<CheckRequest, CheckError> {
    let present = |s: String| (!s.is_empty()).then_some(s);
    Ok(CheckRequest {
        limit: item
            .limit
            .as_ref()
            .map(item_rule)
            .transpose()?
            .map(Arc::new),
        key: item.key,
        route: item.route,
        cost: item.cost.unwrap_or(1),
        tier: present(item.tier),
        ip: present(item.ip),
        max_delay: item.max_delay_ms.map(Duration::from_millis),
    })
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub fn item(req: &CheckRequest) -> CheckItem {
    CheckItem {
        key: req.key.clone(),
        route: req.route.clone(),
        cost: Some(req.cost),
        tier: req.tier.clone().unwrap_or_default(),
        ip: req.ip.clone().unwrap_or_default(),
        limit: req.limit.as_ref().map(|r| ItemLimit {
            limit: r.limit,
            window_ms: millis(r.window),
        }),
        // Whole milliseconds, rounded down: never a promise to wait longer
        // than the caller will.
        max_delay_ms: req.max_delay.map(millis),
        refund: false,
    }
}

pub fn result(r: &CheckResponse) -> CheckResult {
    CheckResult {
        allowed: r.allowed,
        limit: r.limit,
        remaining: r.remaining,
        retry_after_ms: r.retry_after_ms(),
        reset_at_ms: r.reset_at_ms,
        rule: r.rule.as_deref().unwrap_or_default().to_string(),
        delay_ms: r.delay_ms(),
        limited: r.limited,
        error: None,
        window_ms: r.window.map_or(0, millis),
    }
}

/// One item's answer as `CheckResult` carries it, the rule's name
/// borrowed: what a node's batch writes straight to the wire
/// ([`crate::check_wire`]) and what [`verdict_result`] copies into a message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Answer<'a> {
    pub allowed: bool,
    pub limit: u64,
    pub remaining: u64,
    pub retry_after_ms: u64,
    pub reset_at_ms: u64,
    /// Empty when unlimited.
    pub rule: &'a str,
    pub delay_ms: u64,
    pub limited: bool,
    pub window_ms: u64,
}

impl Answer<'_> {
    pub fn to_result(&self) -> CheckResult {
        CheckResult {
            allowed: self.allowed,
            limit: self.limit,
            remaining: self.remaining,
            retry_after_ms: self.retry_after_ms,
            reset_at_ms: self.reset_at_ms,
            // Copied as a `str`: `to_string` goes through `Display`, 110
            // instructions more per item.
            rule: String::from(self.rule),
            delay_ms: self.delay_ms,
            limited: self.limited,
            error: None,
            window_ms: self.window_ms,
        }
    }
}

/// [`result`] of `v.response()` without the response in between, the
/// rule's name borrowed instead of its `Arc` cloned and dropped.
pub fn verdict_answer(v: &Verdict) -> Answer<'_> {
    let Some((a, delay)) = v.shown() else {
        // Unlimited: `CheckResponse::default()` but for `allowed`.
        return Answer {
            allowed: v.allowed,
            ..Answer::default()
        };
    };
    let d = &a.decision;
    Answer {
        allowed: v.allowed,
        limit: d.limit,
        remaining: d.remaining,
        retry_after_ms: if v.allowed { 0 } else { d.retry_after_ms() },
        reset_at_ms: d.reset_at,
        rule: &a.rule.name,
        delay_ms: ceil_ms(delay),
        limited: true,
        window_ms: millis(a.rule.window),
    }
}

/// [`verdict_answer`] as a message.
pub fn verdict_result(v: &Verdict) -> CheckResult {
    verdict_answer(v).to_result()
}

pub fn error_result(e: &CheckError) -> CheckResult {
    let code = match e {
        CheckError::Invalid { .. } => ErrorCode::InvalidArgument,
        CheckError::CostExceedsLimit { .. } => ErrorCode::CostExceedsLimit,
        CheckError::Unavailable(_) => ErrorCode::Unavailable,
    };
    CheckResult {
        error: Some(ItemError {
            code: code as i32,
            field: e.field().unwrap_or_default().into(),
            message: e.to_string(),
        }),
        ..CheckResult::default()
    }
}

/// A result as the caller reads it: the answer, or the error the node gave
/// for this item. An error code this side does not know is a protocol
/// mismatch: None.
pub fn response(r: CheckResult) -> Option<Result<CheckResponse, CheckError>> {
    if let Some(e) = r.error {
        let field = InputField::parse(&e.field);
        return Some(Err(match ErrorCode::try_from(e.code).ok()? {
            ErrorCode::CostExceedsLimit | ErrorCode::InvalidArgument => CheckError::Invalid {
                field: field.unwrap_or(InputField::Key),
                reason: Cow::Owned(e.message),
            },
            ErrorCode::Unavailable => Unavailable::Unreachable(e.message).into(),
            ErrorCode::Unspecified => return None,
        }));
    }
    Some(Ok(CheckResponse {
        allowed: r.allowed,
        limited: r.limited,
        rule: (!r.rule.is_empty()).then(|| Arc::from(r.rule)),
        limit: r.limit,
        remaining: r.remaining,
        retry_after: Duration::from_millis(r.retry_after_ms),
        reset_at_ms: r.reset_at_ms,
        delay: Duration::from_millis(r.delay_ms),
        window: (r.window_ms > 0).then(|| Duration::from_millis(r.window_ms)),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_survives_the_wire_carried_limit_included() {
        let rule = Arc::new(
            item_rule(&ItemLimit {
                limit: 10,
                window_ms: 60_000,
            })
            .unwrap(),
        );
        let sent = CheckRequest::new("k", "GET /")
            .cost(3)
            .tier("t")
            .ip("::1")
            .carrying(rule)
            .max_delay(Duration::from_millis(250));
        assert_eq!(request(item(&sent)).unwrap(), sent);
        let bare = CheckRequest::new("k", "");
        assert_eq!(
            request(item(&bare)).unwrap(),
            bare,
            "empty tier and ip read as absent"
        );
    }

    #[test]
    fn an_answer_survives_the_wire_at_millisecond_precision() {
        let r = CheckResponse {
            allowed: false,
            limited: true,
            rule: Some("r".into()),
            limit: 5,
            remaining: 0,
            retry_after: Duration::from_millis(1_500),
            reset_at_ms: 99,
            delay: Duration::ZERO,
            window: Some(Duration::from_secs(60)),
        };
        assert_eq!(response(result(&r)), Some(Ok(r)));
        let unlimited = CheckResponse::unlimited();
        assert_eq!(response(result(&unlimited)), Some(Ok(unlimited)));
    }

    #[test]
    fn a_verdicts_result_is_the_result_of_its_response() {
        use weir_core::{Applied, Decision};
        let applied = |name: &str, shadow: bool, allowed: bool, remaining: u64, delay_ms: u64| {
            let mut rule = Rule::carried(name, 10, Duration::from_secs(60)).unwrap();
            rule.shadow = shadow;
            // A wait set on admissions too, though no limiter sets one:
            // only a denial's may be shown.
            let wait = Duration::from_micros(1_500_300);
            let decision = Decision {
                allowed,
                remaining,
                delay: Duration::from_millis(delay_ms),
                ..Decision::deny_until(10, wait, 1_700_000_000_123, 1_700_000_000_000_000_000)
            };
            let rule = Arc::new(rule);
            Applied {
                rule,
                hash_part: "k".into(),
                decision,
            }
        };
        let verdict = |allowed, applied| Verdict { allowed, applied };
        let verdicts = [
            // The tighter limit binds; the later of the two delays is held.
            verdict(
                true,
                vec![
                    applied("a", false, true, 3, 20),
                    applied("b", false, true, 7, 40),
                ],
            ),
            // A shadow's denial and its delay show nowhere.
            verdict(
                true,
                vec![
                    applied("a", false, true, 7, 0),
                    applied("s", true, false, 0, 90),
                ],
            ),
            // Denied: the wait rounded up to whole milliseconds, no delay.
            verdict(
                false,
                vec![
                    applied("a", false, true, 7, 30),
                    applied("b", false, false, 0, 0),
                ],
            ),
            // Unlimited: a shadow alone, or nothing.
            verdict(true, vec![applied("s", true, true, 1, 0)]),
            verdict(true, vec![]),
        ];
        for v in &verdicts {
            assert_eq!(verdict_result(v), result(&v.response()), "{v:?}");
        }
    }

    #[test]
    fn an_item_error_reads_back_naming_its_field() {
        let e = CheckError::invalid(InputField::Ip, "is not an address");
        match response(error_result(&e)) {
            Some(Err(CheckError::Invalid { field, .. })) => assert_eq!(field, InputField::Ip),
            other => panic!("{other:?}"),
        }
        let down: CheckError = Unavailable::Leaving.into();
        assert!(matches!(
            response(error_result(&down)),
            Some(Err(CheckError::Unavailable(_)))
        ));
        let unknown = CheckResult {
            error: Some(ItemError {
                code: 99,
                ..ItemError::default()
            }),
            ..CheckResult::default()
        };
        assert_eq!(response(unknown), None);
    }

    #[test]
    fn a_carried_limit_that_cannot_limit_is_refused_naming_limit() {
        let zero = CheckItem {
            key: "k".into(),
            limit: Some(ItemLimit {
                limit: 0,
                window_ms: 1,
            }),
            ..CheckItem::default()
        };
        assert_eq!(request(zero).unwrap_err().field(), Some("limit"));
    }
}
