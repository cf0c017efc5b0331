//! A check's answer as HTTP, one way for the node and the tower layer: 200 or 429 with the rate-limit headers and a JSON body, or an RFC 9457 problem.

mod problem;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, StatusCode};
use serde::Serialize;

pub use problem::{Problem, PROBLEM_JSON};

use crate::check::CheckResponse;
use crate::clock::Nanos;
use crate::error::CheckError;
use crate::headers::{HeaderSet, RateLimitHeaders};

/// An HTTP answer, before a server or a layer wraps it in its body type.
#[derive(Debug, Clone)]
pub struct Rendered {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Rendered {
    fn json(status: StatusCode, content_type: &'static str, body: &impl Serialize) -> Self {
        let body = serde_json::to_vec(body).expect("a body of numbers and strings serializes");
        let mut headers = HeaderMap::with_capacity(10);
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        Rendered {
            status,
            headers,
            body: body.into(),
        }
    }
}

/// The answer to a decided check: 200 (`application/json`) or 429
/// (`application/problem+json` whose extension members are the decision),
/// with the rate-limit headers on both. `retry_after_ms` replaces the
/// answer's own wait on a denial (server-side jitter): the body carries it
/// and `Retry-After` is it rounded up to whole seconds. `allowed_headers`
/// picks the headers of an admitted answer; a denial carries them all.
pub fn answer(
    r: &CheckResponse,
    now: Nanos,
    retry_after_ms: Option<u64>,
    allowed_headers: HeaderSet,
) -> Rendered {
    let Some(rule) = r.rule.as_deref().filter(|_| r.limited) else {
        // Unlimited: no RateLimit headers, there is no limit to describe.
        return Rendered::json(
            StatusCode::OK,
            "application/json",
            &Unlimited {
                allowed: r.allowed,
                rule: None,
            },
        );
    };
    let retry_after_ms = retry_after_ms.filter(|_| !r.allowed);
    let mut decision = DecisionBody::of(r, rule);
    if let Some(ms) = retry_after_ms {
        decision.retry_after_ms = ms;
    }
    let (mut out, set) = if r.allowed {
        let ok = Rendered::json(StatusCode::OK, "application/json", &decision);
        (ok, allowed_headers)
    } else {
        let status = StatusCode::TOO_MANY_REQUESTS;
        let denied = DeniedBody {
            kind: "urn:weir:problem:rate-limited",
            title: "Too Many Requests",
            status: status.as_u16(),
            detail: format!("over the limit of rule \"{rule}\""),
            decision,
        };
        (
            Rendered::json(status, PROBLEM_JSON, &denied),
            HeaderSet::All,
        )
    };
    let retry_after_secs = retry_after_ms.map(|ms| ms.div_ceil(1000));
    if let Some(h) = RateLimitHeaders::of(r, now, retry_after_secs) {
        h.write_set_to(&mut out.headers, set);
    }
    out
}

/// The refusal of a check that got no verdict: 400 naming the field, or 503
/// when the limiter cannot decide (never 429: the caller is not over its
/// limit).
pub fn failure(e: &CheckError) -> Rendered {
    Problem::of_check(e).render()
}

/// The answer when no enforcing rule matched.
#[derive(Serialize)]
struct Unlimited {
    allowed: bool,
    rule: Option<&'static str>,
}

#[derive(Serialize)]
struct DecisionBody<'a> {
    allowed: bool,
    limit: u64,
    remaining: u64,
    retry_after_ms: u64,
    reset_at: u64,
    rule: &'a str,
    // Ceiling, as with every wait shown: sending early would be refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    delay_ms: Option<u64>,
}

impl<'a> DecisionBody<'a> {
    fn of(r: &CheckResponse, rule: &'a str) -> Self {
        DecisionBody {
            allowed: r.allowed,
            limit: r.limit,
            remaining: r.remaining,
            retry_after_ms: r.retry_after_ms(),
            reset_at: r.reset_at_ms,
            rule,
            delay_ms: (!r.delay.is_zero()).then(|| r.delay_ms()),
        }
    }
}

/// A 429: an RFC 9457 problem whose extension members are the decision.
#[derive(Serialize)]
struct DeniedBody<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    title: &'static str,
    status: u16,
    detail: String,
    #[serde(flatten)]
    decision: DecisionBody<'a>,
}

#[cfg(test)]
mod tests;
