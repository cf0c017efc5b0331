//! [`RateLimitLayer`]: a tower layer that checks every request against weir before the service runs.
//!
//! Works wherever tower does (axum's `Router::layer`, tonic's
//! `Server::layer`, a hyper `service_fn` behind `tower::ServiceBuilder`):
//! it takes `http::Request<B>` and answers `http::Response<Either<ResBody,
//! Full<Bytes>>>`, the left side being the service's own body. A denied
//! request gets a 429 from the layer and never reaches the service; a
//! rejection must cost less than an acceptance.

mod decider;
mod key;
mod response;
mod stats;

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use http::request::Parts;
use http::{Request, Response};
use http_body_util::Either;
use tower::{Layer, Service};

pub use key::{peer_ip, KeyError, KeyExtractor, KeyFn};
pub use response::LayerBody;
pub use stats::{LayerStats, StatsSnapshot};
pub use weir_core::headers::HeaderSet;
pub use weir_core::render::PROBLEM_JSON;

use decider::Erased;
use stats::Outcome;
use weir_core::jitter::jittered_retry_after_ms;
use weir_core::render::Problem;
use weir_core::{CheckRequest, CheckResponse, Decide};

/// How long the layer holds a shaped request by default before the
/// service sees it: 1 s. Longer than most shaping needs, and shorter than
/// the time most callers wait for an answer before they give up.
pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(1);

/// What to do when the limiter cannot decide (unreachable, timed out, or
/// failing closed itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailureMode {
    /// Serve the request unchecked. The default: a limiter outage should not
    /// become a service outage, and each instance still protects itself by
    /// its own capacity.
    #[default]
    Open,
    /// Refuse with 503 (never 429: the caller is not over its limit).
    Closed,
}

type RouteFn = Arc<dyn Fn(&Parts) -> String + Send + Sync>;

#[derive(Clone)]
struct Config {
    decider: Arc<dyn Erased>,
    key: KeyExtractor,
    route: Option<RouteFn>,
    tier: Option<String>,
    cost: u64,
    failure: FailureMode,
    max_delay: Duration,
    jitter: bool,
    allowed_headers: HeaderSet,
    stats: Arc<LayerStats>,
}

/// Checks each request against a [`Decide`] (an in-process limiter, an
/// embedded node's engine, or a remote node's [`crate::Client`]) before the
/// inner service.
///
/// ```no_run
/// use std::time::Duration;
/// use weir_client::{Client, FailureMode, HeaderSet, KeyExtractor, RateLimitLayer};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// // A remote node: concurrent checks share gRPC calls.
/// let node = Client::grpc("http://127.0.0.1:8081")?;
/// let layer = RateLimitLayer::new(node, KeyExtractor::PeerIp)
///     .tier("anonymous")
///     .failure_mode(FailureMode::Closed) // 503 when the node cannot answer
///     .allowed_headers(HeaderSet::Ietf)
///     .max_delay(Duration::from_millis(200));
/// let app = axum::Router::new()
///     .route("/", axum::routing::get(|| async { "hello" }))
///     .layer(layer);
/// // PeerIp reads axum's ConnectInfo<SocketAddr>.
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
/// axum::serve(listener, app.into_make_service_with_connect_info::<std::net::SocketAddr>()).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RateLimitLayer {
    config: Arc<Config>,
}

impl RateLimitLayer {
    /// Cost 1, no tier, route `"METHOD /path"`, failing open, holding a
    /// shaped request at most [`DEFAULT_MAX_DELAY`].
    pub fn new(decider: impl Decide, key: KeyExtractor) -> Self {
        RateLimitLayer {
            config: Arc::new(Config {
                decider: Arc::new(decider),
                key,
                route: None,
                tier: None,
                cost: 1,
                failure: FailureMode::Open,
                max_delay: DEFAULT_MAX_DELAY,
                jitter: false,
                allowed_headers: HeaderSet::All,
                stats: Arc::default(),
            }),
        }
    }

    fn edit(mut self, f: impl FnOnce(&mut Config)) -> Self {
        f(Arc::make_mut(&mut self.config));
        self
    }

    /// The tier sent with every check; rules naming it apply. Two layers
    /// on one limiter (pre- and post-authentication) are told apart this way.
    pub fn tier(self, tier: impl Into<String>) -> Self {
        let tier = tier.into();
        self.edit(|c| c.tier = Some(tier))
    }

    /// Units each request costs.
    pub fn cost(self, cost: u64) -> Self {
        self.edit(|c| c.cost = cost)
    }

    pub fn failure_mode(self, mode: FailureMode) -> Self {
        self.edit(|c| c.failure = mode)
    }

    /// The longest the layer holds an admitted request before calling the
    /// service, when a shaping rule (a leaky bucket with a `queue`) asks
    /// for a delay. A request whose delay would be longer is refused with
    /// a 429 instead, and the limiter counts nothing for it; zero makes
    /// every shaping rule a meter. A held request keeps its connection and
    /// its task for the whole delay.
    pub fn max_delay(self, max: Duration) -> Self {
        self.edit(|c| c.max_delay = max)
    }

    /// The route to check instead of `"METHOD /path"`.
    pub fn route_with(self, f: impl Fn(&Parts) -> String + Send + Sync + 'static) -> Self {
        self.edit(|c| c.route = Some(Arc::new(f)))
    }

    /// Retry-After becomes base + uniform[0, base), for callers
    /// that obey it literally and would otherwise return together.
    pub fn jitter_retry_after(self, on: bool) -> Self {
        self.edit(|c| c.jitter = on)
    }

    /// The rate-limit headers an admitted response carries: all eight
    /// (the default), or only the IETF `RateLimit-Policy`
    /// and `RateLimit`. A denial always carries every header.
    pub fn allowed_headers(self, set: HeaderSet) -> Self {
        self.edit(|c| c.allowed_headers = set)
    }

    /// Counters shared by every service this layer has built.
    pub fn stats(&self) -> Arc<LayerStats> {
        self.config.stats.clone()
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            config: self.config.clone(),
        }
    }
}

/// The service [`RateLimitLayer`] builds.
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> RateLimit<S> {
    pub fn stats(&self) -> Arc<LayerStats> {
        self.config.stats.clone()
    }
}

/// The checked request, or the layer's own answer when it cannot be checked.
enum Prepared {
    Check(CheckRequest),
    Refuse(Problem),
}

impl Config {
    fn prepare(&self, parts: &Parts) -> Prepared {
        let (key, ip) = match key::extract(&self.key, parts) {
            Ok(k) => k,
            Err(KeyError::Missing { field, detail }) => {
                return Prepared::Refuse(Problem::invalid(field, detail))
            }
            Err(KeyError::NoPeerAddress) => {
                return Prepared::Refuse(Problem::misconfigured(
                    "no-peer-address",
                    "Peer address unknown",
                    "the server records no peer address; serve axum with \
                     into_make_service_with_connect_info::<SocketAddr>()",
                ))
            }
        };
        let route = match &self.route {
            Some(f) => f(parts),
            None => key::default_route(parts),
        };
        Prepared::Check(CheckRequest {
            key,
            route,
            cost: self.cost,
            tier: self.tier.clone(),
            ip,
            limit: None,
            max_delay: Some(self.max_delay),
        })
    }
}

impl Config {
    /// An admission that asks for a longer wait than the service allows is
    /// a denial. The decider already refuses one (consuming nothing) when
    /// it honours the request's `max_delay`; this is the bound when it does
    /// not (a node that predates the field), so no request is ever held
    /// longer than `max_delay`.
    fn within_max_delay(&self, r: CheckResponse) -> CheckResponse {
        if !r.allowed || r.delay <= self.max_delay {
            return r;
        }
        CheckResponse {
            allowed: false,
            remaining: 0,
            retry_after: r.delay - self.max_delay,
            delay: Duration::ZERO,
            ..r
        }
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for RateLimit<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqB: Send + 'static,
    ResB: Send + 'static,
{
    type Response = Response<LayerBody<ResB>>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        // The clone that was made ready goes into the future; a fresh clone
        // stays behind for the next poll_ready (tower's usual swap).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let config = self.config.clone();
        let (parts, body) = req.into_parts();
        let grpc = response::is_grpc(&parts.headers);
        let prepared = config.prepare(&parts);
        let req = Request::from_parts(parts, body);
        Box::pin(async move {
            let stats = &config.stats;
            let check = match prepared {
                Prepared::Check(c) => c,
                Prepared::Refuse(p) => {
                    stats.record(Outcome::Invalid);
                    return Ok(response::problem(&p, grpc));
                }
            };
            let decider = &config.decider;
            let decided = decider.decide(&check).await;
            match decided.map(|r| config.within_max_delay(r)) {
                Ok(r) if r.allowed => {
                    stats.record(Outcome::Allowed);
                    // The slot the limiter scheduled comes `delay` from now;
                    // the decider has already refused anything past
                    // `max_delay`, so this wait is bounded by it.
                    if !r.delay.is_zero() {
                        stats.delayed();
                        tokio::time::sleep(r.delay).await;
                    }
                    let mut res = inner.call(req).await?;
                    let set = config.allowed_headers;
                    response::add_allowed_headers(res.headers_mut(), &r, decider.now(), set);
                    Ok(res.map(Either::Left))
                }
                Ok(r) => {
                    stats.record(Outcome::Denied);
                    let wait = config
                        .jitter
                        .then(|| jittered_retry_after_ms(&r, &mut rand::rng()));
                    Ok(response::too_many(&r, decider.now(), wait, grpc))
                }
                Err(e) if e.is_input() => {
                    stats.record(Outcome::Invalid);
                    Ok(response::problem(&Problem::of_check(&e), grpc))
                }
                Err(e) => match config.failure {
                    FailureMode::Open => {
                        stats.record(Outcome::UnavailableOpen);
                        Ok(inner.call(req).await?.map(Either::Left))
                    }
                    FailureMode::Closed => {
                        stats.record(Outcome::UnavailableClosed);
                        let detail = format!("the rate limiter cannot decide: {e}");
                        Ok(response::problem(&Problem::unavailable(detail), grpc))
                    }
                },
            }
        })
    }
}
