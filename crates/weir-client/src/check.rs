//! One check as a caller asks it and the answer it gets, whatever the transport.

use std::time::Duration;

use crate::error::ClientError;

/// One rate-limit check (DESIGN section 5: the body of `POST /v1/check`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRequest {
    /// The caller's identity: a customer id, API key or, before
    /// authentication, the peer IP.
    pub key: String,
    /// The operation, e.g. `"POST /v1/charges"`; matched against rule routes.
    pub route: String,
    /// Units this request consumes; at least 1.
    pub cost: u64,
    pub tier: Option<String>,
    pub ip: Option<String>,
}

impl CheckRequest {
    /// A check of cost 1 with no tier and no IP.
    pub fn new(key: impl Into<String>, route: impl Into<String>) -> Self {
        CheckRequest {
            key: key.into(),
            route: route.into(),
            cost: 1,
            tier: None,
            ip: None,
        }
    }

    pub fn cost(mut self, cost: u64) -> Self {
        self.cost = cost;
        self
    }

    pub fn tier(mut self, tier: impl Into<String>) -> Self {
        self.tier = Some(tier.into());
        self
    }

    pub fn ip(mut self, ip: impl Into<String>) -> Self {
        self.ip = Some(ip.into());
        self
    }

    /// The request as weir-core reads it.
    pub fn as_core(&self) -> weir_core::Request<'_> {
        weir_core::Request {
            key: &self.key,
            route: &self.route,
            cost: self.cost,
            tier: self.tier.as_deref(),
            ip: self.ip.as_deref(),
        }
    }

    /// Refuses what every node would refuse, with the same field names, so a
    /// malformed check costs no round trip.
    pub fn validate(&self) -> Result<(), ClientError> {
        self.as_core()
            .validate()
            .map(drop)
            .map_err(|e| ClientError::InvalidArgument {
                field: e.field().unwrap_or("request").to_string(),
                message: e.to_string(),
            })
    }
}

/// The verdict on one check and the numbers a caller needs to pace itself.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CheckResponse {
    pub allowed: bool,
    /// The binding rule's limit per window (or bucket capacity); 0 when unlimited.
    pub limit: u64,
    pub remaining: u64,
    /// Zero when allowed; otherwise the wait before a retry can succeed.
    pub retry_after: Duration,
    /// Unix milliseconds at which the budget is full again.
    pub reset_at_ms: u64,
    /// The rule that decided; None when no rule matched.
    pub rule: Option<String>,
    /// False when no rule matched: the request is unlimited and there is
    /// no limit to describe in headers.
    pub limited: bool,
}

impl CheckResponse {
    /// Retry-After in whole seconds, rounded up and never 0 on a denial: a
    /// rounded-down wait makes the first retry certain to fail (seed 9).
    pub fn retry_after_secs(&self) -> u64 {
        if self.allowed {
            return 0;
        }
        weir_core::headers::whole_secs_up(self.retry_after).max(1)
    }
}
