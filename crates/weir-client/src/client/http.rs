//! `POST /v1/check` over one pooled HTTP client: JSON out, verdict or problem back.

use std::time::Duration;

use reqwest::StatusCode;
use serde::{Deserialize, Serialize};

use crate::error::ClientError;
use weir_core::{CheckRequest, CheckResponse};

pub(crate) struct HttpTransport {
    client: reqwest::Client,
    url: reqwest::Url,
}

#[derive(Serialize)]
struct Body<'a> {
    key: &'a str,
    route: &'a str,
    cost: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    tier: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ip: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_delay_ms: Option<u64>,
}

/// The 200 and 429 bodies share these members (the 429 adds problem ones).
#[derive(Deserialize)]
struct Verdict {
    allowed: bool,
    #[serde(default)]
    limit: Option<u64>,
    #[serde(default)]
    remaining: u64,
    #[serde(default)]
    retry_after_ms: u64,
    #[serde(default)]
    reset_at: u64,
    #[serde(default)]
    rule: Option<String>,
    #[serde(default)]
    delay_ms: u64,
}

#[derive(Deserialize, Default)]
struct Problem {
    #[serde(default)]
    field: Option<String>,
    #[serde(default)]
    detail: Option<String>,
}

impl HttpTransport {
    pub(crate) fn new(
        base: &str,
        connect_timeout: Duration,
        idle_timeout: Duration,
        ca_pem: Option<&[u8]>,
    ) -> Result<Self, ClientError> {
        let bad = |reason: String| ClientError::Endpoint {
            url: base.to_string(),
            reason,
        };
        let url = reqwest::Url::parse(base)
            .and_then(|u| u.join("/v1/check"))
            .map_err(|e| bad(e.to_string()))?;
        let mut builder = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .pool_idle_timeout(idle_timeout)
            .tcp_nodelay(true);
        for cert in super::tls::extra_roots(base, ca_pem)? {
            builder = builder.add_root_certificate(cert);
        }
        let client = builder.build().map_err(|e| bad(e.to_string()))?;
        Ok(HttpTransport { client, url })
    }

    pub(crate) async fn check(
        &self,
        req: &CheckRequest,
        deadline: Duration,
    ) -> Result<CheckResponse, ClientError> {
        let body = Body {
            key: &req.key,
            route: &req.route,
            cost: req.cost,
            tier: req.tier.as_deref(),
            ip: req.ip.as_deref(),
            // Whole milliseconds, rounded down: never a promise to wait
            // longer than the caller will.
            max_delay_ms: req
                .max_delay
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        };
        let sent = self
            .client
            .post(self.url.clone())
            .json(&body)
            .timeout(deadline)
            .send();
        // The outer timeout also covers reading the body, which reqwest's
        // per-request timeout does not once headers have arrived.
        let outcome = tokio::time::timeout(deadline, async {
            let res = sent.await?;
            let status = res.status();
            let bytes = res.bytes().await?;
            Ok::<_, reqwest::Error>((status, bytes))
        })
        .await
        .map_err(|_| ClientError::Timeout(deadline))?;
        let (status, bytes) = outcome.map_err(|e| transport_error(&e, deadline))?;
        match status {
            StatusCode::OK | StatusCode::TOO_MANY_REQUESTS => {
                let v: Verdict = serde_json::from_slice(&bytes)
                    .map_err(|e| ClientError::Protocol(format!("{status} body: {e}")))?;
                Ok(CheckResponse {
                    allowed: v.allowed,
                    limited: v.limit.is_some(),
                    limit: v.limit.unwrap_or(0),
                    remaining: v.remaining,
                    retry_after: Duration::from_millis(v.retry_after_ms),
                    reset_at_ms: v.reset_at,
                    rule: v.rule.map(Into::into),
                    delay: Duration::from_millis(v.delay_ms),
                    // The body does not carry the window.
                    window: None,
                })
            }
            StatusCode::SERVICE_UNAVAILABLE => {
                let p: Problem = serde_json::from_slice(&bytes).unwrap_or_default();
                Err(ClientError::Unavailable(
                    p.detail.unwrap_or_else(|| status.to_string()),
                ))
            }
            StatusCode::BAD_REQUEST
            | StatusCode::PAYLOAD_TOO_LARGE
            | StatusCode::UNPROCESSABLE_ENTITY => {
                let p: Problem = serde_json::from_slice(&bytes).unwrap_or_default();
                Err(ClientError::InvalidArgument {
                    field: p.field.unwrap_or_else(|| "request".into()),
                    message: p.detail.unwrap_or_else(|| status.to_string()),
                })
            }
            s if s.is_server_error() => Err(ClientError::Unavailable(s.to_string())),
            s => Err(ClientError::Protocol(format!("status {s}"))),
        }
    }
}

fn transport_error(e: &reqwest::Error, deadline: Duration) -> ClientError {
    if e.is_timeout() {
        ClientError::Timeout(deadline)
    } else if e.is_decode() {
        ClientError::Protocol(e.to_string())
    } else {
        // reqwest's own message stops at "error sending request"; the
        // cause (refused, a certificate not trusted) is in its sources.
        ClientError::Unavailable(weir_core::with_causes(e))
    }
}
