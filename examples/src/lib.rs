//! An axum hello-world protected by weir in this order: a per-IP limit, then authentication, then a per-client limit.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use weir_client::{Decide, FailureMode, KeyExtractor, RateLimitLayer};
use weir_core::{Limiter, LimiterConfig, RuleSet, RulesError, SystemClock};

/// The rules both modes use: in-process by default, and the sidecar's file.
pub const RULES: &str = include_str!("../sidecar/rules.toml");

/// The header the authentication middleware sets for the layers after it.
pub const CLIENT_ID: &str = "x-client-id";

/// What a credential lookup costs here, standing in for the database round
/// trip a real one makes: the cost the pre-authentication limit protects.
pub const AUTH_COST: Duration = Duration::from_millis(2);

/// The service and a count of credential lookups it has made.
pub struct App {
    pub router: Router,
    pub auth_lookups: Arc<AtomicU64>,
}

/// The two limits: `pre_auth` keyed on the peer IP (tier `pre-auth`),
/// `post_auth` keyed on the authenticated client id (tier `authenticated`).
pub fn layers(
    backend: impl Decide + Clone,
    failure: FailureMode,
) -> (RateLimitLayer, RateLimitLayer) {
    let pre = RateLimitLayer::new(backend.clone(), KeyExtractor::PeerIp)
        .tier("pre-auth")
        .failure_mode(failure);
    let post = RateLimitLayer::new(backend, KeyExtractor::header(CLIENT_ID))
        .tier("authenticated")
        .failure_mode(failure);
    (pre, post)
}

/// A limiter in this process: the fast path, no network.
pub fn in_process(rules: &str) -> Result<Arc<Limiter>, RulesError> {
    Ok(Arc::new(Limiter::new(
        RuleSet::from_toml(rules)?,
        Arc::new(SystemClock::new()),
        LimiterConfig::default(),
    )))
}

/// Requests pass the per-IP limit, then authentication, then the per-client
/// limit, then the handler. A request refused by the first never costs a
/// credential lookup: a rejection must cost less than an acceptance.
pub fn app(pre_auth: RateLimitLayer, post_auth: RateLimitLayer) -> App {
    let auth_lookups = Arc::new(AtomicU64::new(0));
    let lookups = auth_lookups.clone();
    let authenticate = middleware::from_fn(move |req: Request, next: Next| {
        let lookups = lookups.clone();
        async move { authenticate(req, next, &lookups).await }
    });
    // axum runs the last layer added first.
    let router = Router::new()
        .route("/", get(hello))
        .layer(post_auth)
        .layer(authenticate)
        .layer(pre_auth);
    App {
        router,
        auth_lookups,
    }
}

async fn hello(req: Request) -> String {
    let who = req
        .headers()
        .get(CLIENT_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("?");
    format!("hello, {who}\n")
}

/// A fake credential check: `Authorization: Bearer token-<name>` is client
/// `<name>`. It overwrites any client-sent id header, so nobody can pick
/// the key the per-client limit counts them under.
async fn authenticate(mut req: Request, next: Next, lookups: &AtomicU64) -> Response {
    lookups.fetch_add(1, Ordering::Relaxed);
    tokio::time::sleep(AUTH_COST).await;
    let client = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer token-"))
        .filter(|name| !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric()))
        .map(str::to_owned);
    let Some(client) = client else {
        return (
            StatusCode::UNAUTHORIZED,
            "unknown or missing bearer token\n",
        )
            .into_response();
    };
    let value = HeaderValue::try_from(client).expect("checked ASCII alphanumeric");
    req.headers_mut().insert(CLIENT_ID, value);
    next.run(req).await
}
