//! The cheapest honest `POST /v1/check` on weir's HTTP stack: axum reads the same JSON, bumps one DashMap counter and answers with the same headers and body shape, deciding nothing.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde::Deserialize;
use tokio::net::TcpListener;

use super::grpc::DENY_DOMAIN;

/// The body weir's check reads, borrowed where it can be.
#[derive(Deserialize)]
struct Body<'a> {
    #[serde(borrow)]
    key: Cow<'a, str>,
    #[serde(borrow, default)]
    route: Option<Cow<'a, str>>,
    #[serde(default)]
    cost: Option<u64>,
}

type Counts = Arc<super::Counts>;

const LIMIT: u64 = 1_000_000_000;

async fn check(State(counts): State<Counts>, body: Bytes) -> Response {
    let Ok(b) = serde_json::from_slice::<Body<'_>>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let cost = b.cost.unwrap_or(1);
    let seen = counts.bump(&b.key, cost);
    if b.route.as_deref() == Some(DENY_DOMAIN) {
        return denied();
    }
    let remaining = LIMIT.saturating_sub(seen);
    // The same eight headers and body fields weir sends for an admitted check.
    let mut h = HeaderMap::with_capacity(10);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    limit_headers(&mut h, "bench", LIMIT, remaining, 120);
    let body = format!(
        r#"{{"allowed":true,"limit":{LIMIT},"remaining":{remaining},"reset_at":1795981980000,"retry_after_ms":0,"rule":"bench"}}"#
    );
    (StatusCode::OK, h, body).into_response()
}

/// The 429 weir sends on the deny route, with its problem body.
fn denied() -> Response {
    let mut h = HeaderMap::with_capacity(11);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    limit_headers(&mut h, DENY_DOMAIN, 1, 0, 3600);
    h.insert(header::RETRY_AFTER, HeaderValue::from(3600u64));
    let body = format!(
        r#"{{"allowed":false,"detail":"over the limit of rule \"{DENY_DOMAIN}\"","limit":1,"remaining":0,"reset_at":1795981980000,"retry_after_ms":3599000,"rule":"{DENY_DOMAIN}","status":429,"title":"Too Many Requests","type":"urn:weir:problem:rate-limited"}}"#
    );
    (StatusCode::TOO_MANY_REQUESTS, h, body).into_response()
}

fn limit_headers(h: &mut HeaderMap, rule: &str, limit: u64, remaining: u64, reset: u64) {
    let num = |n: u64| HeaderValue::from(n);
    h.insert(HeaderName::from_static("ratelimit-limit"), num(limit));
    h.insert(
        HeaderName::from_static("ratelimit-remaining"),
        num(remaining),
    );
    h.insert(HeaderName::from_static("ratelimit-reset"), num(reset));
    h.insert(HeaderName::from_static("x-ratelimit-limit"), num(limit));
    h.insert(
        HeaderName::from_static("x-ratelimit-remaining"),
        num(remaining),
    );
    h.insert(
        HeaderName::from_static("x-ratelimit-reset"),
        num(1_795_981_980),
    );
    let policy = format!("\"{rule}\";q={limit};w=60");
    let state = format!("\"{rule}\";r={remaining};t={reset}");
    for (name, v) in [("ratelimit-policy", policy), ("ratelimit", state)] {
        if let Ok(v) = HeaderValue::try_from(v) {
            h.insert(HeaderName::from_static(name), v);
        }
    }
}

pub fn router() -> Router {
    Router::new()
        .route("/v1/check", post(check))
        .with_state(Counts::default())
}

/// Serves the handler on `listener` with axum's own server, TCP_NODELAY
/// on, as weir's HTTP listener has it.
pub async fn serve(listener: TcpListener) {
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let _ = axum::serve(listener, router()).await;
}

/// Serves the handler on the connections `listener` hands over (a share
/// of weir-bare's dealt connections, TCP_NODELAY set by the dealer).
pub async fn serve_from<L>(listener: L)
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let _ = axum::serve(listener, router()).await;
}

/// Serves the handler on 127.0.0.1; its address.
pub async fn bare_axum() -> SocketAddr {
    super::on_loopback(serve).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    #[tokio::test]
    async fn each_check_bumps_its_key_and_answers_with_the_headers() {
        let app = router();
        let req = || {
            axum::http::Request::post("/v1/check")
                .body(axum::body::Body::from(
                    r#"{"key":"k","route":"GET /","cost":2}"#,
                ))
                .unwrap()
        };
        app.clone().oneshot(req()).await.unwrap();
        let r = app.oneshot(req()).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["ratelimit-remaining"], (LIMIT - 4).to_string());
        assert_eq!(r.headers()["content-type"], "application/json");
        assert_eq!(
            r.headers()["ratelimit"],
            format!("\"bench\";r={};t=120", LIMIT - 4)
        );
        let deny = axum::http::Request::post("/v1/check")
            .body(axum::body::Body::from(
                r#"{"key":"k","route":"bench-deny"}"#,
            ))
            .unwrap();
        let r = router().oneshot(deny).await.unwrap();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()["retry-after"], "3600");
    }
}
