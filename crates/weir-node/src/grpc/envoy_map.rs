//! Envoy RLS to weir and back, as pure functions (the table is in docs/envoy.md).

use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use weir_core::headers::{
    decimal, whole_secs_up, RateLimitHeaders, RATELIMIT, RATELIMIT_LIMIT, RATELIMIT_POLICY,
    RATELIMIT_REMAINING, RATELIMIT_RESET, RETRY_AFTER,
};
use weir_core::{
    Applied, CheckError, CheckRequest, CheckResponse, Rule, Verdict, MAX_KEY_LEN, NANOS_PER_MS,
};
use weir_proto::envoy::config::core::v3::HeaderValue;
use weir_proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use weir_proto::envoy::r#type::v3::RateLimitUnit;
use weir_proto::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use weir_proto::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use weir_proto::envoy::service::ratelimit::v3::RateLimitResponse;
use weir_proto::prost_types;
use weir_proto::rls_wire::{Descriptor, RlsRequest};

/// Descriptor entry keys read as the caller key, first match wins.
pub const CLIENT_KEYS: [&str; 4] = ["client", "key", "client_id", "generic_key"];
pub const IP_KEYS: [&str; 2] = ["ip", "remote_address"];
pub const TIER_KEYS: [&str; 1] = ["tier"];
pub const ROUTE_KEYS: [&str; 2] = ["route", "path"];

const DAY: u64 = 24 * 3600;
/// Envoy's units with the windows weir gives them. Envoy leaves MONTH and
/// YEAR to the service; weir fixes them at 30 and 365 days so a window is
/// one number and the unit can be read back from it.
const UNITS: [(Unit, RateLimitUnit, &str, u64); 6] = [
    (Unit::Second, RateLimitUnit::Second, "second", 1),
    (Unit::Minute, RateLimitUnit::Minute, "minute", 60),
    (Unit::Hour, RateLimitUnit::Hour, "hour", 3600),
    (Unit::Day, RateLimitUnit::Day, "day", DAY),
    (Unit::Month, RateLimitUnit::Month, "month", 30 * DAY),
    (Unit::Year, RateLimitUnit::Year, "year", 365 * DAY),
];

/// A request refused as bad input. Nothing was decided for any descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{}: {message}", self.path())]
pub struct MapError {
    /// The descriptor at fault; None when the request's own field is.
    pub descriptor: Option<usize>,
    pub field: &'static str,
    pub message: String,
}

impl MapError {
    fn request(field: &'static str, message: impl Into<String>) -> Self {
        MapError {
            descriptor: None,
            field,
            message: message.into(),
        }
    }

    /// A core refusal of descriptor `i`, named as `descriptors[i].<field>`.
    pub fn descriptor(i: usize, e: &CheckError) -> Self {
        MapError {
            descriptor: Some(i),
            field: e.field().unwrap_or("entries"),
            message: e.to_string(),
        }
    }

    /// Where the fault is, e.g. `domain` or `descriptors[2].ip`.
    pub fn path(&self) -> String {
        match self.descriptor {
            Some(i) => format!("descriptors[{i}].{}", self.field),
            None => self.field.to_string(),
        }
    }
}

/// Turns a request into one check per descriptor, validating all of them
/// first when there are several, so a refused request has decided
/// nothing. The rule set's cost ceiling is the one check left to the
/// caller: it needs the rules. A lone descriptor of the rule set is left
/// to its decision, which validates it as its first step.
pub fn to_checks(
    req: &RlsRequest<'_>,
    max_descriptors: usize,
) -> Result<Vec<CheckRequest>, MapError> {
    if req.domain.is_empty() {
        return Err(MapError::request("domain", "must not be empty"));
    }
    if req.descriptors.is_empty() {
        return Err(MapError::request("descriptors", "must not be empty"));
    }
    within_limit(req.descriptors.len(), max_descriptors)?;
    // A lone descriptor of the rule set is validated by its own decision
    // (the same checks, the same status), not twice. Several are validated
    // here, before any is decided, so a refused request consumes nothing.
    let lone = req.descriptors.len() == 1;
    req.descriptors
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let check = descriptor_check(i, req.domain, req.hits_addend, d)?;
            if !lone || check.limit.is_some() {
                check.validate().map_err(|e| MapError::descriptor(i, &e))?;
            }
            Ok(check)
        })
        .collect()
}

/// Which descriptors are refunds (`is_negative_hits`), in order; None
/// when none is, so a request of checks alone allocates nothing for it.
pub fn refunds(req: &RlsRequest<'_>) -> Option<Vec<bool>> {
    let any = req.descriptors.iter().any(|d| d.is_negative_hits);
    any.then(|| req.descriptors.iter().map(|d| d.is_negative_hits).collect())
}

/// Refuses a request of more descriptors than a call may carry: read from
/// the message's top level before it is decoded, and again by
/// [`to_checks`].
pub fn within_limit(descriptors: usize, max: usize) -> Result<(), MapError> {
    if descriptors > max {
        return Err(MapError::request(
            "descriptors",
            format!("at most {max} per request, got {descriptors}"),
        ));
    }
    Ok(())
}

fn entry<'a>(d: &Descriptor<'a>, keys: &[&str]) -> Option<&'a str> {
    d.entries
        .iter()
        .find(|e| keys.contains(&e.key) && !e.value.is_empty())
        .map(|e| e.value)
}

fn descriptor_check(
    i: usize,
    domain: &str,
    request_hits: u32,
    d: &Descriptor<'_>,
) -> Result<CheckRequest, MapError> {
    let key = match entry(d, &CLIENT_KEYS) {
        // An override's counter is its descriptor's own (below), so two
        // descriptors of one client with one override value never share it.
        _ if d.limit.is_some() => override_key(domain, d),
        Some(client) => client.to_string(),
        None => derived_key(domain, d).ok_or_else(|| MapError {
            descriptor: Some(i),
            field: "entries",
            message: format!(
                "the key made of the domain and entries is over {MAX_KEY_LEN} bytes; \
                 add a `client` entry"
            ),
        })?,
    };
    // A descriptor's own hits win; 0 means "not set" at both levels.
    let cost = match d.hits_addend {
        Some(h) if h > 0 => h,
        _ if request_hits > 0 => u64::from(request_hits),
        _ => 1,
    };
    let limit = match &d.limit {
        None => None,
        Some(o) => Some(Arc::new(override_rule(o).map_err(|message| MapError {
            descriptor: Some(i),
            field: "limit",
            message,
        })?)),
    };
    // A refund past the whole limit gives back no more than the limit: cut
    // to it, it is never refused as a cost no check could pass. (A rule of
    // the set is known only once selected: `Limiter::refund_targets`.)
    let cost = match &limit {
        Some(rule) if d.is_negative_hits => cost.min(rule.limit),
        _ => cost,
    };
    Ok(CheckRequest {
        key,
        route: entry(d, &ROUTE_KEYS).unwrap_or(domain).to_string(),
        tier: entry(d, &TIER_KEYS).map(str::to_string),
        ip: entry(d, &IP_KEYS).map(str::to_string),
        cost,
        limit,
        // RLS has no field for a delay: Envoy forwards or refuses at once,
        // so a shaping rule is decided as a meter (an admission that would
        // have to wait is over the limit and consumes nothing).
        max_delay: Some(Duration::ZERO),
    })
}

/// `domain|k=v|k=v`: every distinct descriptor gets its own counter even
/// without a client entry. None when it would exceed the core's key bound.
fn derived_key(domain: &str, d: &Descriptor<'_>) -> Option<String> {
    // Sized once: pushing onto the domain alone reallocated it two or
    // three times per descriptor.
    let len = domain.len()
        + d.entries
            .iter()
            .map(|e| 2 + e.key.len() + e.value.len())
            .sum::<usize>();
    if len > MAX_KEY_LEN {
        return None;
    }
    let mut key = String::with_capacity(len);
    key.push_str(domain);
    for e in &d.entries {
        key.push('|');
        key.push_str(e.key);
        key.push('=');
        key.push_str(e.value);
    }
    Some(key)
}

/// The counter key of a descriptor carrying an override: its domain and
/// every entry, as Envoy's own service keys one (the limit's value is in
/// the rule's name, which keys the table). Readable (`domain|k=v|...`) when
/// that is unambiguous and short enough; otherwise a SHA-256 of the
/// length-prefixed parts, so no two descriptors can be made to collide by
/// putting `|` or `=` in a value.
pub fn override_key(domain: &str, d: &Descriptor<'_>) -> String {
    let plain = |s: &str| !s.contains(['|', '=', '#']);
    let readable = plain(domain) && d.entries.iter().all(|e| plain(e.key) && plain(e.value));
    if readable {
        if let Some(key) = derived_key(domain, d) {
            return key;
        }
    }
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for part in std::iter::once(domain).chain(d.entries.iter().flat_map(|e| [e.key, e.value])) {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("#{hex}")
}

/// The rule a descriptor's `limit` override stands for.
pub fn override_rule(o: &RateLimitOverride) -> Result<Rule, String> {
    if o.requests_per_unit == 0 {
        return Err("requests_per_unit must be at least 1".into());
    }
    let Some(&(_, _, unit_name, secs)) = UNITS.iter().find(|u| u.1 as i32 == o.unit) else {
        return Err(format!(
            "unit must be SECOND, MINUTE, HOUR, DAY, MONTH or YEAR, got {}",
            o.unit
        ));
    };
    let limit = u64::from(o.requests_per_unit);
    let name = format!("override:{limit}-per-{unit_name}");
    Rule::carried(&name, limit, Duration::from_secs(secs)).map_err(|e| e.reason)
}

/// A rule's rate as Envoy states it. Windows of exactly one unit keep it;
/// any other window is scaled to requests per second, rounded down (never
/// below 1, since 0 would read as "no requests allowed").
pub fn rate_limit(name: &str, limit: u64, window: Duration) -> RateLimit {
    let (requests_per_unit, unit) = rate(limit, window);
    RateLimit {
        name: name.to_string(),
        requests_per_unit,
        unit: unit as i32,
    }
}

/// [`rate_limit`]'s requests per unit, and the unit.
fn rate(limit: u64, window: Duration) -> (u32, Unit) {
    let exact = UNITS
        .iter()
        .find(|u| window == Duration::from_secs(u.3))
        .map(|u| (limit, u.0));
    let (per_unit, unit) = exact.unwrap_or_else(|| {
        let per_sec = u128::from(limit) * 1_000_000_000 / window.as_nanos().max(1);
        (
            u64::try_from(per_sec).unwrap_or(u64::MAX).max(1),
            Unit::Second,
        )
    });
    (u32::try_from(per_unit).unwrap_or(u32::MAX), unit)
}

/// A descriptor's code: OK, or OVER_LIMIT when its verdict denies.
fn code(verdict: &Verdict) -> Code {
    if verdict.allowed {
        Code::Ok
    } else {
        Code::OverLimit
    }
}

/// The response's code: OVER_LIMIT when any descriptor's is.
fn overall(verdicts: &[Verdict]) -> Code {
    if verdicts.iter().any(|v| !v.allowed) {
        Code::OverLimit
    } else {
        Code::Ok
    }
}

/// `duration_until_reset` of a binding limit: seconds and nanoseconds.
fn until_reset(a: &Applied) -> (i64, i32) {
    let d = &a.decision;
    let reset_ms = d.reset_at.saturating_sub(d.at / NANOS_PER_MS);
    (
        i64::try_from(reset_ms / 1000).unwrap_or(i64::MAX),
        ((reset_ms % 1000) * 1_000_000) as i32,
    )
}

/// One descriptor's status. A descriptor no enforcing rule limits is OK
/// with no current limit, as Envoy's own service answers an unmatched one.
pub fn status(verdict: &Verdict) -> DescriptorStatus {
    let code = code(verdict) as i32;
    let Some(a) = verdict.binding() else {
        return DescriptorStatus {
            code,
            ..DescriptorStatus::default()
        };
    };
    let (seconds, nanos) = until_reset(a);
    DescriptorStatus {
        code,
        current_limit: Some(rate_limit(&a.rule.name, a.rule.limit, a.rule.window)),
        limit_remaining: u32::try_from(a.decision.remaining).unwrap_or(u32::MAX),
        duration_until_reset: Some(prost_types::Duration { seconds, nanos }),
        quota: None,
    }
}

/// The limit a caller should pace itself by across all descriptors, chosen
/// as [`Verdict::binding`] chooses within one: the denial with the longest
/// wait, else the limit with the least budget left.
pub fn most_restrictive(verdicts: &[Verdict]) -> Option<&Applied> {
    let bound = || {
        verdicts
            .iter()
            .filter_map(|v| Some((v.allowed, v.binding()?)))
    };
    bound()
        .filter(|(allowed, _)| !allowed)
        .map(|(_, a)| a)
        .max_by_key(|a| a.decision.retry_after)
        .or_else(|| bound().map(|(_, a)| a).min_by_key(|a| a.decision.remaining))
}

/// The IETF draft RateLimit-* headers (and Retry-After on a denial) for the
/// most restrictive limit. The X-RateLimit-* family is left out: Envoy's
/// own `enable_x_ratelimit_headers` writes it from the statuses, and two
/// writers of one header would disagree. `wait` may give the denial's wait
/// in milliseconds instead of its own (server-side jitter); Retry-After is
/// then that wait in whole seconds, rounded up. Built from the figures
/// directly, since every answer carries them.
pub fn response_headers(
    verdicts: &[Verdict],
    wait: impl FnOnce(&CheckResponse) -> Option<u64>,
) -> Vec<HeaderValue> {
    let mut out = Vec::with_capacity(6);
    each_header(verdicts, wait, |key, value| {
        out.push(HeaderValue {
            key: key.to_string(),
            value,
            raw_value: Vec::new(),
        });
    });
    out
}

/// [`response_headers`]' names and values, in order, each given to `add`.
fn each_header(
    verdicts: &[Verdict],
    wait: impl FnOnce(&CheckResponse) -> Option<u64>,
    mut add: impl FnMut(&'static str, String),
) {
    let Some(applied) = most_restrictive(verdicts) else {
        return;
    };
    let answer = CheckResponse::of(applied.decision.allowed, applied);
    let secs = wait(&answer).map(|ms| whole_secs_up(Duration::from_millis(ms)));
    let Some(h) = RateLimitHeaders::of(&answer, applied.decision.at, secs) else {
        return;
    };
    add(RATELIMIT_LIMIT, decimal(h.limit));
    add(RATELIMIT_REMAINING, decimal(h.remaining));
    add(RATELIMIT_RESET, decimal(h.reset_in));
    add(RATELIMIT_POLICY, h.policy());
    add(RATELIMIT, h.state());
    if let Some(secs) = h.retry_after {
        add(RETRY_AFTER, decimal(secs));
    }
}

/// The response to a request whose descriptors got these verdicts, in
/// order; `wait` as for [`response_headers`]. The node sends
/// [`wire::response`]'s bytes, which are this message's.
pub fn to_response(
    verdicts: &[Verdict],
    wait: impl FnOnce(&CheckResponse) -> Option<u64>,
) -> RateLimitResponse {
    RateLimitResponse {
        overall_code: overall(verdicts) as i32,
        statuses: verdicts.iter().map(status).collect(),
        response_headers_to_add: response_headers(verdicts, wait),
        ..RateLimitResponse::default()
    }
}

#[cfg(test)]
mod refund_tests;
#[cfg(test)]
mod tests;
pub mod wire;
