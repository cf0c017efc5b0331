//! What the layer answers itself: rate-limit headers, 429, 400, 500 and 503, as HTTP problems or gRPC statuses.

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use http_body_util::{Either, Full};
use serde_json::{Map, Value};
use weir_core::headers::{reset_after_secs, whole_secs_up, HeaderSet, RateLimitHeaders};
use weir_core::Nanos;

use super::backend::Checked;
use crate::check::CheckResponse;

pub const PROBLEM_JSON: &str = "application/problem+json";

// Looked up on every admitted response; lower case, as `from_static` wants.
const REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
const STATE: HeaderName = HeaderName::from_static("ratelimit");

/// The inner service's body, or one the layer wrote.
pub type LayerBody<B> = Either<B, Full<Bytes>>;

/// DESIGN section 5's headers for a remote verdict, with weir-core's
/// rounding so they read exactly as a node's; `None` when no rule matched.
/// The window is not on the wire, so `RateLimit-Policy` carries the quota
/// alone (`w` is optional in the IETF draft).
pub fn remote_headers(r: &CheckResponse, now: Nanos) -> Option<RateLimitHeaders> {
    let rule = r.rule.as_deref().filter(|_| r.limited)?;
    Some(RateLimitHeaders {
        rule: rule.into(),
        limit: r.limit,
        remaining: r.remaining,
        reset_in: reset_after_secs(r.reset_at_ms, now),
        reset_unix: r.reset_at_ms.div_ceil(1000),
        window_secs: None,
        retry_after: (!r.allowed).then(|| r.retry_after_secs()),
    })
}

/// Adds an admitted request's headers to the service's response. When a
/// layer further in (the post-authentication limit) has already described
/// a limit with less budget left, that one stays: the caller is shown the
/// tighter limit, as a single check shows its binding rule.
pub fn add_allowed_headers(h: &mut HeaderMap, checked: Checked, set: HeaderSet) {
    let ours = checked.response.remaining;
    if remaining_shown(h).is_some_and(|theirs| theirs <= ours) {
        return;
    }
    if let Some(headers) = checked.headers {
        headers.write_set_to(h, set);
    }
}

/// The budget left that a layer further in has already shown, from
/// `RateLimit-Remaining` or else the `r` of the IETF `RateLimit` field.
fn remaining_shown(h: &HeaderMap) -> Option<u64> {
    if let Some(v) = h.get(&REMAINING) {
        return v.to_str().ok()?.parse().ok();
    }
    let state = h.get(&STATE)?.to_str().ok()?;
    state
        .split(';')
        .find_map(|p| p.trim().strip_prefix("r="))?
        .parse()
        .ok()
}

/// Whether a request is gRPC: its refusals must be gRPC statuses, since a
/// gRPC client reads an HTTP 429 as a broken transport.
pub fn is_grpc(h: &HeaderMap) -> bool {
    h.get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}

/// The denial: 429, every header of DESIGN section 5 (Retry-After in whole
/// seconds, rounded up, never 0) and a problem body with the verdict.
/// `retry_after` replaces the verdict's own when the layer jitters it.
pub fn too_many<B>(
    checked: Checked,
    retry_after: Option<u64>,
    grpc: bool,
) -> Response<LayerBody<B>> {
    let Checked {
        response: r,
        mut headers,
    } = checked;
    if let (Some(secs), Some(h)) = (retry_after, headers.as_mut()) {
        h.retry_after = Some(secs.max(1));
    }
    let rule = r.rule.as_deref().unwrap_or_default();
    let detail = format!("over the limit of rule \"{rule}\"");
    let mut res = if grpc {
        grpc_status(8, &detail)
    } else {
        let mut m = members(
            StatusCode::TOO_MANY_REQUESTS,
            "rate-limited",
            "Too Many Requests",
        );
        m.insert("detail".into(), detail.into());
        m.insert("allowed".into(), false.into());
        m.insert("limit".into(), r.limit.into());
        m.insert("remaining".into(), r.remaining.into());
        m.insert("retry_after_ms".into(), whole_ms_up(&r).into());
        m.insert("reset_at".into(), r.reset_at_ms.into());
        m.insert("rule".into(), rule.into());
        problem_response(StatusCode::TOO_MANY_REQUESTS, m)
    };
    if let Some(h) = headers {
        h.write_to(res.headers_mut());
    }
    res
}

fn whole_ms_up(r: &CheckResponse) -> u64 {
    u64::try_from(r.retry_after.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// Whole seconds of a jittered wait, for Retry-After.
pub fn jittered_secs(r: &CheckResponse) -> u64 {
    let base = std::time::Duration::from_secs(r.retry_after_secs());
    whole_secs_up(crate::retry::server_jitter(base, &mut rand::rng()))
}

/// A refusal that is not a rate limit: 400 (bad input, naming the field),
/// 500 (the service is misconfigured) or 503 (the limiter cannot decide
/// and the layer fails closed; never 429, the caller is not over quota).
pub fn problem<B>(
    status: StatusCode,
    kind: &str,
    title: &str,
    detail: &str,
    field: Option<&str>,
    grpc: bool,
) -> Response<LayerBody<B>> {
    if grpc {
        let code = match status {
            StatusCode::BAD_REQUEST => 3,
            StatusCode::SERVICE_UNAVAILABLE => 14,
            _ => 13,
        };
        return grpc_status(code, detail);
    }
    let mut m = members(status, kind, title);
    m.insert("detail".into(), detail.into());
    if let Some(f) = field {
        m.insert("field".into(), f.into());
    }
    problem_response(status, m)
}

fn members(status: StatusCode, kind: &str, title: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("type".into(), format!("urn:weir:problem:{kind}").into());
    m.insert("title".into(), title.into());
    m.insert("status".into(), status.as_u16().into());
    m
}

fn problem_response<B>(status: StatusCode, m: Map<String, Value>) -> Response<LayerBody<B>> {
    let body = Bytes::from(Value::Object(m).to_string());
    let mut res = Response::new(Either::Right(Full::new(body)));
    *res.status_mut() = status;
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    res
}

/// A trailers-only gRPC response: HTTP 200 with the status in the headers.
fn grpc_status<B>(code: u8, message: &str) -> Response<LayerBody<B>> {
    let mut res = Response::new(Either::Right(Full::new(Bytes::new())));
    let h = res.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    h.insert("grpc-status", HeaderValue::from(u16::from(code)));
    // grpc-message is percent-encoded on the wire; keep it to the safe subset.
    let safe: String = message
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '%' || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if let Ok(v) = HeaderValue::try_from(safe) {
        h.insert("grpc-message", v);
    }
    res
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use weir_core::headers::{
        RATELIMIT, RATELIMIT_POLICY, RATELIMIT_RESET, RETRY_AFTER, X_RATELIMIT_RESET,
    };
    use weir_core::{NANOS_PER_MS, NANOS_PER_SEC};

    const NOW: Nanos = 1_738_368_054 * NANOS_PER_SEC + 300 * NANOS_PER_MS;

    fn denied() -> CheckResponse {
        CheckResponse {
            allowed: false,
            limit: 100,
            remaining: 0,
            retry_after: Duration::from_millis(5_670),
            reset_at_ms: NOW / NANOS_PER_MS + 5_700,
            rule: Some("charges-per-client".into()),
            limited: true,
        }
    }

    #[test]
    fn remote_headers_read_as_the_seed_example() {
        let h = remote_headers(&denied(), NOW).unwrap().pairs();
        let get = |n: &str| h.iter().find(|(k, _)| *k == n).map(|(_, v)| v.as_str());
        assert_eq!(get(RETRY_AFTER), Some("6"));
        assert_eq!(get(RATELIMIT_RESET), Some("6"));
        assert_eq!(get(X_RATELIMIT_RESET), Some("1738368060"));
        assert_eq!(get(RATELIMIT_POLICY), Some("\"charges-per-client\";q=100"));
        assert_eq!(get(RATELIMIT), Some("\"charges-per-client\";r=0;t=6"));
    }

    #[test]
    fn unlimited_has_no_headers() {
        let r = CheckResponse {
            allowed: true,
            ..CheckResponse::default()
        };
        assert_eq!(remote_headers(&r, NOW), None);
    }

    fn loose_response(remaining: u64) -> CheckResponse {
        CheckResponse {
            allowed: true,
            remaining,
            ..denied()
        }
    }

    fn checked(remaining: u64) -> Checked {
        Checked {
            response: loose_response(remaining),
            headers: remote_headers(&loose_response(remaining), NOW),
        }
    }

    #[test]
    fn tighter_inner_limit_is_kept() {
        let mut h = HeaderMap::new();
        h.insert("ratelimit-remaining", HeaderValue::from_static("3"));
        add_allowed_headers(&mut h, checked(900), HeaderSet::All);
        assert_eq!(h["ratelimit-remaining"], "3");
        add_allowed_headers(&mut h, checked(1), HeaderSet::All);
        assert_eq!(h["ratelimit-remaining"], "1");
    }

    #[test]
    fn tighter_inner_limit_is_kept_when_only_the_ietf_fields_are_sent() {
        let mut h = HeaderMap::new();
        add_allowed_headers(&mut h, checked(3), HeaderSet::Ietf);
        assert_eq!(h.get("ratelimit-remaining"), None);
        add_allowed_headers(&mut h, checked(900), HeaderSet::Ietf);
        assert_eq!(h["ratelimit"], "\"charges-per-client\";r=3;t=6");
        add_allowed_headers(&mut h, checked(1), HeaderSet::Ietf);
        assert_eq!(h["ratelimit"], "\"charges-per-client\";r=1;t=6");
    }

    #[test]
    fn jittered_retry_after_stays_within_base_and_twice_base() {
        let r = denied();
        let seen: Vec<u64> = (0..500).map(|_| jittered_secs(&r)).collect();
        assert!(seen.iter().all(|s| (6..=12).contains(s)), "{seen:?}");
        assert!(
            seen.iter().any(|&s| s != seen[0]),
            "jitter that never varies spreads nothing"
        );
    }
}
