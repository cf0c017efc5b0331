//! Where the layer's decisions come from: this process's limiter, an embedded node's engine, or a remote node.

use std::sync::Arc;

use futures::future::BoxFuture;
use weir_cluster::{CheckFailure, Engine};
use weir_core::headers::RateLimitHeaders;
use weir_core::{Limiter, Nanos, Verdict};

use super::response::remote_headers;
use crate::check::{CheckRequest, CheckResponse};
use crate::client::Client;
use crate::error::ClientError;

/// A decided check and the rate-limit headers that describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    pub response: CheckResponse,
    /// DESIGN section 5's headers (Retry-After only on a denial); none
    /// when no rule matched, since there is no limit to describe.
    pub headers: Option<RateLimitHeaders>,
}

/// Why a backend gave no verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendError {
    /// The request is malformed (HTTP 400 naming `field`); nothing consumed.
    Input { field: String, message: String },
    /// The limiter cannot decide: unreachable, timed out, or failing
    /// closed itself. The layer fails open or closed as configured.
    Unavailable(String),
}

/// Decides one check. Implemented for an in-process [`Limiter`], an
/// embedded node's [`Engine`] and a remote node's [`Client`].
pub trait Backend: Send + Sync + 'static {
    fn check<'a>(&'a self, req: &'a CheckRequest) -> BoxFuture<'a, Result<Checked, BackendError>>;
}

/// The fast path: decided in this process, no network.
impl Backend for Arc<Limiter> {
    fn check<'a>(&'a self, req: &'a CheckRequest) -> BoxFuture<'a, Result<Checked, BackendError>> {
        let outcome = Limiter::check(self, &req.as_core()).map_err(CheckFailure::from);
        let now = self.now();
        Box::pin(std::future::ready(local(outcome, now)))
    }
}

/// An embedded node: its engine forwards to the key's owner when the node
/// is in a cluster, so the service shares counters with every other node.
impl Backend for Arc<Engine> {
    fn check<'a>(&'a self, req: &'a CheckRequest) -> BoxFuture<'a, Result<Checked, BackendError>> {
        Box::pin(async move {
            let outcome = Engine::check(self, &req.as_core()).await;
            local(outcome, self.limiter().now())
        })
    }
}

/// A remote node over the network.
impl Backend for Client {
    fn check<'a>(&'a self, req: &'a CheckRequest) -> BoxFuture<'a, Result<Checked, BackendError>> {
        Box::pin(async move {
            match Client::check(self, req.clone()).await {
                Ok(response) => {
                    let headers = remote_headers(&response, wall_clock_now());
                    Ok(Checked { response, headers })
                }
                Err(ClientError::InvalidArgument { field, message }) => {
                    Err(BackendError::Input { field, message })
                }
                Err(e) => Err(BackendError::Unavailable(e.to_string())),
            }
        })
    }
}

/// Reset times from a remote node are unix times; reading them as "seconds
/// from now" needs this process's wall clock, through weir-core's clock.
fn wall_clock_now() -> Nanos {
    use weir_core::Clock;
    weir_core::SystemClock::new().now()
}

fn local(outcome: Result<Verdict, CheckFailure>, now: Nanos) -> Result<Checked, BackendError> {
    let verdict = match outcome {
        Ok(v) => v,
        Err(CheckFailure::Input(e)) => {
            return Err(BackendError::Input {
                field: e.field().unwrap_or("request").to_string(),
                message: e.to_string(),
            })
        }
        Err(CheckFailure::Unavailable(reason)) => return Err(BackendError::Unavailable(reason)),
    };
    let Some(applied) = verdict.binding() else {
        return Ok(Checked {
            response: CheckResponse {
                allowed: verdict.allowed,
                ..CheckResponse::default()
            },
            headers: None,
        });
    };
    let d = &applied.decision;
    Ok(Checked {
        response: CheckResponse {
            allowed: verdict.allowed,
            limit: d.limit,
            remaining: d.remaining,
            retry_after: if verdict.allowed {
                std::time::Duration::ZERO
            } else {
                d.retry_after
            },
            reset_at_ms: d.reset_at,
            rule: Some(applied.rule.name.to_string()),
            limited: true,
        },
        headers: Some(RateLimitHeaders::of(applied, now, None)),
    })
}
