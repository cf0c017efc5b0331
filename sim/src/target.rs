//! One check over the wire: weir HTTP, weir gRPC or any Envoy RLS server, reduced to one outcome.

use std::time::Duration;

use tonic::transport::{Channel, Endpoint as GrpcEndpoint};
use weir_proto::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor, RateLimitDescriptor,
};
use weir_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use weir_proto::envoy::service::ratelimit::v3::{rate_limit_response, RateLimitRequest};
use weir_proto::weir::v1::rate_limiter_client::RateLimiterClient;
use weir_proto::weir::v1::{CheckItem, CheckRequest, ErrorCode};

use crate::error::SimError;

/// Longest a single check may take before it counts as failed.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// What one check came back as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Allowed,
    /// 429, with the wait the server asked for (Retry-After, in ms).
    Denied {
        retry_after_ms: u64,
    },
    /// 503 or gRPC UNAVAILABLE: the limiter could not decide.
    Unavailable,
    /// Transport error, timeout or an unexpected answer.
    Failed,
}

impl Outcome {
    pub fn is_allowed(self) -> bool {
        self == Outcome::Allowed
    }
}

/// How the sim reaches one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// weir's HTTP API: `http://host:port`.
    Http(String),
    /// weir's gRPC API (`weir.v1.RateLimiter/Check`): `grpc://host:port`.
    Grpc(String),
    /// Envoy's rate limit service: `grpc+rls://host:port`.
    Rls(String),
}

impl Endpoint {
    /// Parses `--target` entries.
    pub fn parse(url: &str) -> Result<Endpoint, SimError> {
        let url = url.trim().trim_end_matches('/');
        if let Some(rest) = url.strip_prefix("grpc+rls://") {
            Ok(Endpoint::Rls(format!("http://{rest}")))
        } else if let Some(rest) = url.strip_prefix("grpc://") {
            Ok(Endpoint::Grpc(format!("http://{rest}")))
        } else if url.starts_with("http://") {
            Ok(Endpoint::Http(url.to_string()))
        } else {
            Err(SimError::Usage(format!(
                "--target {url}: expected http://HOST:PORT, grpc://HOST:PORT or grpc+rls://HOST:PORT"
            )))
        }
    }

    /// Where its /metrics and /v1/cluster live, when it is a weir HTTP endpoint.
    pub fn http_base(&self) -> Option<&str> {
        match self {
            Endpoint::Http(u) => Some(u),
            _ => None,
        }
    }
}

/// A connected client for one node; clones share the connection pool.
#[derive(Clone)]
pub enum Conn {
    Http {
        client: reqwest::Client,
        url: String,
    },
    Grpc(RateLimiterClient<Channel>),
    Rls {
        client: RateLimitServiceClient<Channel>,
        domain: String,
    },
}

/// The HTTP client every connection shares: no proxy (the sim only talks to
/// machines it can see directly), pooled keep-alive connections.
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(CHECK_TIMEOUT)
        .pool_max_idle_per_host(1024)
        .tcp_nodelay(true)
        .build()
        .expect("a client with static settings builds")
}

impl Conn {
    pub async fn connect(
        endpoint: &Endpoint,
        http: &reqwest::Client,
        rls_domain: &str,
    ) -> Result<Conn, SimError> {
        let channel = |uri: &str| -> Result<Channel, SimError> {
            Ok(GrpcEndpoint::from_shared(uri.to_string())
                .map_err(|e| SimError::Usage(format!("{uri}: {e}")))?
                .timeout(CHECK_TIMEOUT)
                .tcp_nodelay(true)
                .connect_lazy())
        };
        Ok(match endpoint {
            Endpoint::Http(base) => Conn::Http {
                client: http.clone(),
                url: format!("{base}/v1/check"),
            },
            Endpoint::Grpc(uri) => Conn::Grpc(RateLimiterClient::new(channel(uri)?)),
            Endpoint::Rls(uri) => Conn::Rls {
                client: RateLimitServiceClient::new(channel(uri)?),
                domain: rls_domain.to_string(),
            },
        })
    }

    pub async fn check(&self, key: &str, route: &str) -> Outcome {
        match self {
            Conn::Http { client, url } => http_check(client, url, key, route).await,
            Conn::Grpc(client) => grpc_check(client.clone(), key, route).await,
            Conn::Rls { client, domain } => rls_check(client.clone(), domain, key, route).await,
        }
    }
}

async fn http_check(client: &reqwest::Client, url: &str, key: &str, route: &str) -> Outcome {
    let body = serde_json::json!({"key": key, "route": route, "cost": 1});
    let Ok(res) = client.post(url).json(&body).send().await else {
        return Outcome::Failed;
    };
    let status = res.status().as_u16();
    // Retry-After is the client contract (whole seconds);
    // it is what a client that retries actually reads.
    let retry_after_s = res
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    // Drain the body so the connection goes back to the pool.
    let _ = res.bytes().await;
    match status {
        200 => Outcome::Allowed,
        429 => Outcome::Denied {
            retry_after_ms: retry_after_s.unwrap_or(1) * 1000,
        },
        503 => Outcome::Unavailable,
        _ => Outcome::Failed,
    }
}

async fn grpc_check(mut client: RateLimiterClient<Channel>, key: &str, route: &str) -> Outcome {
    let req = CheckRequest {
        items: vec![CheckItem {
            key: key.to_string(),
            route: route.to_string(),
            cost: Some(1),
            ..CheckItem::default()
        }],
    };
    let res = match client.check(req).await {
        Ok(r) => r.into_inner(),
        Err(s) if s.code() == tonic::Code::Unavailable => return Outcome::Unavailable,
        Err(_) => return Outcome::Failed,
    };
    let Some(r) = res.results.into_iter().next() else {
        return Outcome::Failed;
    };
    match r.error {
        Some(e) if e.code == ErrorCode::Unavailable as i32 => Outcome::Unavailable,
        Some(_) => Outcome::Failed,
        None if r.allowed => Outcome::Allowed,
        None => Outcome::Denied {
            retry_after_ms: r.retry_after_ms,
        },
    }
}

async fn rls_check(
    mut client: RateLimitServiceClient<Channel>,
    domain: &str,
    key: &str,
    route: &str,
) -> Outcome {
    let entry = |k: &str, v: &str| rate_limit_descriptor::Entry {
        key: k.to_string(),
        value: v.to_string(),
    };
    let req = RateLimitRequest {
        domain: domain.to_string(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![entry("route", route), entry("client", key)],
            limit: None,
            hits_addend: None,
            is_negative_hits: false,
        }],
        hits_addend: 1,
    };
    let res = match client.should_rate_limit(req).await {
        Ok(r) => r.into_inner(),
        Err(s) if s.code() == tonic::Code::Unavailable => return Outcome::Unavailable,
        Err(_) => return Outcome::Failed,
    };
    match rate_limit_response::Code::try_from(res.overall_code) {
        Ok(rate_limit_response::Code::Ok) => Outcome::Allowed,
        Ok(rate_limit_response::Code::OverLimit) => {
            let wait = res
                .statuses
                .first()
                .and_then(|s| s.duration_until_reset)
                .map_or(1000, |d| {
                    (d.seconds.max(0) as u64) * 1000 + (d.nanos.max(0) as u64).div_ceil(1_000_000)
                });
            Outcome::Denied {
                retry_after_ms: wait,
            }
        }
        _ => Outcome::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_urls_pick_the_protocol() {
        assert_eq!(
            Endpoint::parse("http://127.0.0.1:8080/").unwrap(),
            Endpoint::Http("http://127.0.0.1:8080".into())
        );
        assert_eq!(
            Endpoint::parse("grpc+rls://127.0.0.1:8081").unwrap(),
            Endpoint::Rls("http://127.0.0.1:8081".into())
        );
        assert_eq!(
            Endpoint::parse("grpc://[::1]:1").unwrap(),
            Endpoint::Grpc("http://[::1]:1".into())
        );
        assert!(Endpoint::parse("ftp://x").is_err());
    }
}
