//! What the layer answers itself: rate-limit headers on the service's response, and 429, 400, 500 or 503 as weir-core renders them (or as gRPC statuses).

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use http_body_util::{Either, Full};
use weir_core::headers::{HeaderSet, RateLimitHeaders};
use weir_core::render::{self, Problem, Rendered};
use weir_core::{CheckResponse, Nanos};

// Looked up on every admitted response; lower case, as `from_static` wants.
const REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
const STATE: HeaderName = HeaderName::from_static("ratelimit");

/// The inner service's body, or one the layer wrote.
pub type LayerBody<B> = Either<B, Full<Bytes>>;

fn send<B>(r: Rendered) -> Response<LayerBody<B>> {
    let mut res = Response::new(Either::Right(Full::new(r.body)));
    *res.status_mut() = r.status;
    *res.headers_mut() = r.headers;
    res
}

/// Adds an admitted request's headers to the service's response. When a
/// layer further in (the post-authentication limit) has already described
/// a limit with less budget left, that one stays: the caller is shown the
/// tighter limit, as a single check shows its binding rule.
pub fn add_allowed_headers(h: &mut HeaderMap, r: &CheckResponse, now: Nanos, set: HeaderSet) {
    if remaining_shown(h).is_some_and(|theirs| theirs <= r.remaining) {
        return;
    }
    if let Some(headers) = RateLimitHeaders::of(r, now, None) {
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

/// The denial: 429, every rate-limit header and a problem body
/// with the verdict, exactly as a node sends it (gRPC callers get
/// RESOURCE_EXHAUSTED with the same headers). `retry_after_ms` replaces the
/// answer's own wait when the layer jitters it.
pub fn too_many<B>(
    r: &CheckResponse,
    now: Nanos,
    retry_after_ms: Option<u64>,
    grpc: bool,
) -> Response<LayerBody<B>> {
    let rendered = render::answer(r, now, retry_after_ms, HeaderSet::All);
    if !grpc {
        return send(rendered);
    }
    let rule = r.rule.as_deref().unwrap_or_default();
    let mut res = grpc_status(8, &format!("over the limit of rule \"{rule}\""));
    for (name, value) in rendered.headers.iter().filter(|(n, _)| *n != CONTENT_TYPE) {
        res.headers_mut().insert(name, value.clone());
    }
    res
}

/// A refusal that is not a rate limit: 400 (bad input, naming the field),
/// 500 (the service is misconfigured) or 503 (the limiter cannot decide
/// and the layer fails closed; never 429, the caller is not over quota).
pub fn problem<B>(p: &Problem, grpc: bool) -> Response<LayerBody<B>> {
    if grpc {
        let code = match p.status {
            StatusCode::BAD_REQUEST => 3,
            StatusCode::SERVICE_UNAVAILABLE => 14,
            _ => 13,
        };
        return grpc_status(code, &p.detail);
    }
    send(p.render())
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
    use weir_core::{NANOS_PER_MS, NANOS_PER_SEC};

    const NOW: Nanos = 1_738_368_054 * NANOS_PER_SEC + 300 * NANOS_PER_MS;

    fn answer(remaining: u64) -> CheckResponse {
        CheckResponse {
            allowed: true,
            limited: true,
            rule: Some("charges-per-client".into()),
            limit: 100,
            remaining,
            retry_after: Duration::ZERO,
            reset_at_ms: NOW / NANOS_PER_MS + 5_700,
            delay: Duration::ZERO,
            window: None,
        }
    }

    #[test]
    fn tighter_inner_limit_is_kept() {
        let mut h = HeaderMap::new();
        h.insert("ratelimit-remaining", HeaderValue::from_static("3"));
        add_allowed_headers(&mut h, &answer(900), NOW, HeaderSet::All);
        assert_eq!(h["ratelimit-remaining"], "3");
        add_allowed_headers(&mut h, &answer(1), NOW, HeaderSet::All);
        assert_eq!(h["ratelimit-remaining"], "1");
    }

    #[test]
    fn tighter_inner_limit_is_kept_when_only_the_ietf_fields_are_sent() {
        let mut h = HeaderMap::new();
        add_allowed_headers(&mut h, &answer(3), NOW, HeaderSet::Ietf);
        assert_eq!(h.get("ratelimit-remaining"), None);
        add_allowed_headers(&mut h, &answer(900), NOW, HeaderSet::Ietf);
        assert_eq!(h["ratelimit"], "\"charges-per-client\";r=3;t=6");
        add_allowed_headers(&mut h, &answer(1), NOW, HeaderSet::Ietf);
        assert_eq!(h["ratelimit"], "\"charges-per-client\";r=1;t=6");
    }

    #[test]
    fn a_grpc_denial_is_resource_exhausted_with_the_headers() {
        let mut denied = answer(0);
        denied.allowed = false;
        denied.retry_after = Duration::from_millis(5_670);
        let res: Response<LayerBody<()>> = too_many(&denied, NOW, None, true);
        assert_eq!(res.status(), StatusCode::OK, "trailers-only");
        assert_eq!(res.headers()["grpc-status"], "8");
        assert_eq!(res.headers()["retry-after"], "6");
        assert_eq!(res.headers()[CONTENT_TYPE], "application/grpc");
    }
}
