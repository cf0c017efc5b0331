use std::time::Duration;

use serde_json::Value;

use super::*;
use crate::{Unavailable, NANOS_PER_MS, NANOS_PER_SEC};

const NOW: Nanos = 1_738_368_054 * NANOS_PER_SEC + 300 * NANOS_PER_MS;

fn denied() -> CheckResponse {
    CheckResponse {
        allowed: false,
        limited: true,
        rule: Some("charges-per-client".into()),
        limit: 100,
        remaining: 0,
        retry_after: Duration::from_millis(5_670),
        reset_at_ms: NOW / NANOS_PER_MS + 5_700,
        delay: Duration::ZERO,
        window: Some(Duration::from_secs(60)),
    }
}

fn body(r: &Rendered) -> Value {
    serde_json::from_slice(&r.body).unwrap()
}

#[test]
fn a_denial_is_a_429_problem_with_the_decision_and_every_header() {
    let r = answer(&denied(), NOW, None, HeaderSet::Ietf);
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers[CONTENT_TYPE], PROBLEM_JSON);
    assert_eq!(r.headers["retry-after"], "6");
    assert_eq!(
        r.headers["x-ratelimit-reset"], "1738368060",
        "a denial carries every header"
    );
    let b = body(&r);
    assert_eq!(b["type"], "urn:weir:problem:rate-limited");
    assert_eq!(b["status"], 429);
    assert_eq!(b["retry_after_ms"], 5_670);
    assert_eq!(b["rule"], "charges-per-client");
    assert_eq!(b.get("delay_ms"), None);
}

#[test]
fn a_jittered_wait_goes_in_the_body_and_rounded_up_in_the_header() {
    let r = answer(&denied(), NOW, Some(9_001), HeaderSet::All);
    assert_eq!(body(&r)["retry_after_ms"], 9_001);
    assert_eq!(r.headers["retry-after"], "10");
}

#[test]
fn an_admission_is_a_200_with_the_chosen_headers_and_any_delay() {
    let mut ok = denied();
    ok.allowed = true;
    ok.remaining = 4;
    ok.retry_after = Duration::ZERO;
    ok.delay = Duration::from_micros(1_500);
    let r = answer(&ok, NOW, Some(7), HeaderSet::Ietf);
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.headers[CONTENT_TYPE], "application/json");
    assert_eq!(r.headers.get("retry-after"), None);
    assert_eq!(
        r.headers.get("ratelimit-remaining"),
        None,
        "IETF fields only"
    );
    let b = body(&r);
    assert_eq!(
        (b["remaining"].as_u64(), b["delay_ms"].as_u64()),
        (Some(4), Some(2))
    );
    assert_eq!(
        b["retry_after_ms"], 0,
        "jitter never applies to an admission"
    );
}

#[test]
fn unlimited_is_a_200_without_headers() {
    let r = answer(&CheckResponse::unlimited(), NOW, None, HeaderSet::All);
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.headers.len(), 1, "content-type only");
    assert_eq!(body(&r), serde_json::json!({"allowed": true, "rule": null}));
}

#[test]
fn failures_are_400_naming_the_field_or_503() {
    let bad = failure(&CheckError::invalid(
        crate::InputField::Ip,
        "is not an address",
    ));
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(body(&bad)["field"], "ip");
    let over = failure(&CheckError::CostExceedsLimit {
        rule: "r".into(),
        cost: 9,
        max: 5,
    });
    assert_eq!(
        (body(&over)["field"].as_str(), body(&over)["rule"].as_str()),
        (Some("cost"), Some("r"))
    );
    let down = failure(&Unavailable::Leaving.into());
    assert_eq!(down.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(down.headers[CONTENT_TYPE], PROBLEM_JSON);
}
