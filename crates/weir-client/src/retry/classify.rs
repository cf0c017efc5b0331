//! How a call's result is sorted into finished, rate limited or worth retrying.

use std::time::Duration;

use http::{header::RETRY_AFTER, HeaderMap, Response, StatusCode};

/// What one call's result means for the retry loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// Final: a success, or an error no retry can change. The dependency
    /// answered, so it funds the retry budget.
    Done,
    /// A 429: this caller is over quota. Only the designated retrier waits
    /// and retries; every other layer passes it through.
    RateLimited { retry_after: Option<Duration> },
    /// A failure another attempt may not hit (timeout, 502/503/504).
    Transient,
}

/// Sorts a call's result for [`retry`](super::retry).
pub trait Classify {
    fn class(&self) -> Attempt;
}

impl<B> Classify for Response<B> {
    /// 429 is rate limited, 502/503/504 transient, anything else final.
    /// 429 is not 503: one says "you are over quota", the
    /// other "the service is over capacity".
    fn class(&self) -> Attempt {
        match self.status() {
            StatusCode::TOO_MANY_REQUESTS => Attempt::RateLimited {
                retry_after: retry_after_secs(self.headers()),
            },
            StatusCode::BAD_GATEWAY
            | StatusCode::SERVICE_UNAVAILABLE
            | StatusCode::GATEWAY_TIMEOUT => Attempt::Transient,
            _ => Attempt::Done,
        }
    }
}

/// Retry-After as delay-seconds, the form weir sends because every client
/// library parses it. An HTTP-date reads as absent, which falls back to full
/// jitter rather than guessing at clock skew.
fn retry_after_secs(headers: &HeaderMap) -> Option<Duration> {
    let secs = headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(secs))
}
