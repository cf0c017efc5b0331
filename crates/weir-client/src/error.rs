//! Why a check got no verdict.

use std::time::Duration;

use thiserror::Error;

/// A check that produced no verdict.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ClientError {
    /// The request is malformed (`field` names the attribute, as the node
    /// names it: `key`, `route`, `cost`, `tier`, `ip`). Refused before any
    /// counter was touched; retrying the same request cannot succeed.
    #[error("invalid {field}: {message}")]
    InvalidArgument { field: String, message: String },
    /// The node could not be reached, or answered that it cannot decide
    /// (fail-closed cluster, full store). No verdict; whether budget was
    /// spent is unknown only if the request reached the node.
    #[error("weir unavailable: {0}")]
    Unavailable(String),
    /// No answer within the per-call deadline. The check may still have been
    /// decided (and budget spent) at the node after the caller gave up.
    #[error("no answer from weir within {0:?}")]
    Timeout(Duration),
    /// The node answered something this client cannot read (a version
    /// mismatch or a proxy in the way). Treated like unavailability.
    #[error("unexpected answer from weir: {0}")]
    Protocol(String),
    /// The endpoint URL given to the builder is unusable; nothing was sent.
    #[error("invalid endpoint {url:?}: {reason}")]
    Endpoint { url: String, reason: String },
}

impl ClientError {
    /// True when the limiter, not the request, is at fault: the case a
    /// caller fails open or closed on.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            ClientError::Unavailable(_) | ClientError::Timeout(_) | ClientError::Protocol(_)
        )
    }
}
