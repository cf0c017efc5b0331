//! The bare tonic services: weir.v1.RateLimiter answering every item "allowed" (plainly, or after bumping the item's key counter), and Envoy's RateLimitService answering every descriptor with weir's status fields, none deciding.

use std::net::SocketAddr;

use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite};
use tonic::transport::server::{Connected, TcpIncoming};
use tonic::transport::Server;
use weir_proto::envoy::config::core::v3::HeaderValue;
use weir_proto::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use weir_proto::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use weir_proto::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use weir_proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use weir_proto::prost_types;
use weir_proto::weir::v1::rate_limiter_server::{RateLimiter, RateLimiterServer};
use weir_proto::weir::v1::{CheckRequest, CheckResponse, CheckResult};

use super::Counts;

/// The RLS domain the bare responder answers OVER_LIMIT for, as the
/// node's bench rules deny it (bench/requests/rules.toml).
pub const DENY_DOMAIN: &str = "bench-deny";

/// weir.v1.RateLimiter answering every item "allowed", plainly or, with
/// `counts`, after bumping the item's key counter as the axum reference
/// does: the cheapest honest check, deciding nothing.
#[derive(Default)]
struct Bare {
    counts: Option<Counts>,
}

impl Bare {
    fn counting() -> Self {
        Bare {
            counts: Some(Counts::default()),
        }
    }
}

/// The bare RateLimiter as a value, to call in process: deciding nothing,
/// or with `counting`, bumping each item's key counter first.
pub fn rate_limiter(counting: bool) -> impl RateLimiter {
    if counting {
        Bare::counting()
    } else {
        Bare::default()
    }
}

const LIMIT: u64 = 1_000_000_000;

/// What the node answers for an admitted item of the bench rules.
fn admitted(remaining: u64) -> CheckResult {
    CheckResult {
        allowed: true,
        limit: LIMIT,
        remaining,
        reset_at_ms: 1_795_981_980_000,
        rule: "bench".into(),
        limited: true,
        window_ms: 60_000,
        ..Default::default()
    }
}

#[tonic::async_trait]
impl RateLimiter for Bare {
    async fn check(
        &self,
        request: tonic::Request<CheckRequest>,
    ) -> Result<tonic::Response<CheckResponse>, tonic::Status> {
        let results = request
            .into_inner()
            .items
            .iter()
            .map(|item| {
                admitted(match &self.counts {
                    Some(c) => LIMIT.saturating_sub(c.bump(&item.key, item.cost.unwrap_or(1))),
                    None => LIMIT - 1,
                })
            })
            .collect();
        Ok(tonic::Response::new(CheckResponse { results }))
    }
}

struct BareRls;

/// The bare RLS responder as a value, to call in process.
pub fn rls_responder() -> impl RateLimitService {
    BareRls
}

fn header(key: &str, value: &str) -> HeaderValue {
    HeaderValue {
        key: key.into(),
        value: value.into(),
        raw_value: Vec::new(),
    }
}

/// What the node answers for one descriptor of the bench rules, with the
/// IETF headers it adds, built per call as the node builds them.
fn bare_response(descriptors: usize, over: bool) -> RateLimitResponse {
    let (code, name, per_unit, unit, remaining) = if over {
        (Code::OverLimit, "bench-deny", 1, Unit::Hour, 0)
    } else {
        (Code::Ok, "bench", 1_000_000_000, Unit::Minute, 999_999_999)
    };
    let statuses = (0..descriptors)
        .map(|_| DescriptorStatus {
            code: code as i32,
            current_limit: Some(RateLimit {
                name: name.into(),
                requests_per_unit: per_unit,
                unit: unit as i32,
            }),
            limit_remaining: remaining,
            duration_until_reset: Some(prost_types::Duration {
                seconds: 60,
                nanos: 0,
            }),
            quota: None,
        })
        .collect();
    let mut headers = vec![
        header("RateLimit-Limit", &per_unit.to_string()),
        header("RateLimit-Remaining", &remaining.to_string()),
        header("RateLimit-Reset", "60"),
        header("RateLimit-Policy", &format!("\"{name}\";q={per_unit};w=60")),
        header("RateLimit", &format!("\"{name}\";r={remaining};t=60")),
    ];
    if over {
        headers.push(header("Retry-After", "3600"));
    }
    RateLimitResponse {
        overall_code: code as i32,
        statuses,
        response_headers_to_add: headers,
        ..RateLimitResponse::default()
    }
}

#[tonic::async_trait]
impl RateLimitService for BareRls {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let req = request.into_inner();
        let over = req.domain == DENY_DOMAIN;
        Ok(tonic::Response::new(bare_response(
            req.descriptors.len(),
            over,
        )))
    }
}

/// Both bare services on `incoming`, on one port as the node serves them,
/// with tonic's default server settings.
pub async fn serve<I, IO, IE>(incoming: I)
where
    I: Stream<Item = Result<IO, IE>>,
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    IE: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let _ = Server::builder()
        .add_service(RateLimiterServer::new(Bare::default()))
        .add_service(RateLimitServiceServer::new(BareRls))
        .serve_with_incoming(incoming)
        .await;
}

/// The counting RateLimiter alone on `incoming`, with tonic's default
/// server settings.
pub async fn serve_counting<I, IO, IE>(incoming: I)
where
    I: Stream<Item = Result<IO, IE>>,
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    IE: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let _ = Server::builder()
        .add_service(RateLimiterServer::new(Bare::counting()))
        .serve_with_incoming(incoming)
        .await;
}

/// A listener on `addr` with TCP_NODELAY, as the node's.
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpIncoming> {
    TcpIncoming::bind(addr)
        .map(|i| i.with_nodelay(Some(true)))
        .map_err(std::io::Error::other)
}

/// Serves both on 127.0.0.1; their URL. The listener is bound before this
/// returns, so the first call cannot beat the server to its port.
pub async fn bare_grpc() -> String {
    let incoming = bind("127.0.0.1:0".parse().expect("address")).expect("bind");
    let addr = incoming.local_addr().expect("address");
    tokio::spawn(serve(incoming));
    format!("http://{addr}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_counting_reference_spends_each_items_cost_on_its_key() {
        let item = |key: &str, cost| weir_proto::weir::v1::CheckItem {
            key: key.into(),
            cost,
            ..Default::default()
        };
        let counting = Bare::counting();
        let call = |items| counting.check(tonic::Request::new(CheckRequest { items }));
        call(vec![item("a", Some(3)), item("b", None)])
            .await
            .unwrap();
        let r = call(vec![item("a", None), item("b", Some(2))])
            .await
            .unwrap()
            .into_inner();
        let remaining: Vec<u64> = r.results.iter().map(|x| x.remaining).collect();
        assert_eq!(remaining, [LIMIT - 4, LIMIT - 3]);
        assert!(r.results.iter().all(|x| x.allowed));
    }

    #[test]
    fn the_bare_answer_has_one_status_per_descriptor_and_denies_the_deny_domain() {
        let ok = bare_response(2, false);
        assert_eq!(ok.statuses.len(), 2);
        assert_eq!(ok.overall_code, Code::Ok as i32);
        let over = bare_response(1, true);
        assert_eq!(over.overall_code, Code::OverLimit as i32);
        assert!(over
            .response_headers_to_add
            .iter()
            .any(|h| h.key == "Retry-After"));
    }
}
