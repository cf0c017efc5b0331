//! A check's answer as HTTP, one way for the node and the tower layer: 200 or 429 with the rate-limit headers and a JSON body, or an RFC 9457 problem.

mod decision;
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
use decision::DecisionBody;

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
        Rendered::with_body(status, content_type, body)
    }

    fn with_body(status: StatusCode, content_type: &'static str, body: Vec<u8>) -> Self {
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
        let ok = Rendered::with_body(StatusCode::OK, "application/json", decision.json());
        (ok, allowed_headers)
    } else {
        let status = StatusCode::TOO_MANY_REQUESTS;
        let body = decision.problem_json(status);
        (
            Rendered::with_body(status, PROBLEM_JSON, body),
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

#[cfg(test)]
mod tests;
