//! The check contract every edge and every decider shares: one owned request, one answer, one trait.
//!
//! HTTP bodies, gRPC items, Envoy descriptors and the Rust client all turn
//! into a [`CheckRequest`]; whatever decides it (this process's
//! [`Limiter`](crate::Limiter), a cluster engine, a remote node) implements
//! [`Decide`] and answers a [`CheckResponse`], which every edge renders the
//! same way.

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use compact_str::{CompactString, ToCompactString};

use crate::clock::Nanos;
use crate::error::{CheckError, InputField};
use crate::limiter::{Applied, Verdict};
use crate::rules::Rule;

/// Longest caller key accepted (bytes). Keys are stored per counter, so this
/// bounds what one key can cost.
pub const MAX_KEY_LEN: usize = 256;
pub const MAX_ROUTE_LEN: usize = 1024;
pub const MAX_TIER_LEN: usize = 64;
/// An IPv6 address with a zone fits well within this.
pub const MAX_IP_LEN: usize = 64;

/// One rate-limit check as a caller asks it (the body of
/// `POST /v1/check`).
#[derive(Debug, Clone, PartialEq)]
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
    /// A limit the request carries itself (an Envoy descriptor's override):
    /// the check is decided against it alone, on the caller key, and the
    /// rule set is not consulted.
    pub limit: Option<Arc<Rule>>,
    /// The longest this caller will hold an admitted request before sending
    /// it (a scheduling leaky bucket's `delay`). An admission that would
    /// need longer is a denial instead, and consumes nothing; `Some(0)` is
    /// the leaky bucket as a meter, for a caller that cannot wait at all.
    /// None: any delay the rule's `queue` allows.
    pub max_delay: Option<Duration>,
}

impl CheckRequest {
    /// A check of cost 1 with no tier, no IP and no carried limit; the
    /// builder methods set the rest.
    ///
    /// ```
    /// use weir_core::CheckRequest;
    ///
    /// let req = CheckRequest::new("cust_42", "POST /v1/charges")
    ///     .cost(3)
    ///     .tier("free")
    ///     .ip("203.0.113.9");
    /// assert_eq!((req.cost, req.tier.as_deref()), (3, Some("free")));
    /// assert!(req.validate().is_ok());
    /// assert_eq!(CheckRequest::new("k", "r").cost(0).validate().unwrap_err().field(), Some("cost"));
    /// ```
    pub fn new(key: impl Into<String>, route: impl Into<String>) -> Self {
        CheckRequest {
            key: key.into(),
            route: route.into(),
            cost: 1,
            tier: None,
            ip: None,
            limit: None,
            max_delay: None,
        }
    }

    /// Wait at most `max` before sending; a longer delay is a denial.
    pub fn max_delay(mut self, max: Duration) -> Self {
        self.max_delay = Some(max);
        self
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

    /// Decide against `rule` alone instead of the rule set.
    pub fn carrying(mut self, rule: Arc<Rule>) -> Self {
        self.limit = Some(rule);
        self
    }

    /// Refuses malformed attributes before anything is looked up, naming the
    /// field. Returns the canonical IP text, so `::1` and
    /// `0:0:0:0:0:0:0:1` share a counter. A carried limit's cost ceiling is
    /// checked here too; the rule set's needs the rules.
    pub fn validate(&self) -> Result<Option<CompactString>, CheckError> {
        self.validate_trusting(false)
    }

    /// [`CheckRequest::validate`], skipping the route's and the tier's
    /// checks when the caller knows they pass (`route_and_tier_valid`): a
    /// batch's items mostly share both, and checking the same route again
    /// for each item was 31 of the node's 4,700 instructions per item of a
    /// 100-item call (`bench/pipeline-count.sh`).
    pub(crate) fn validate_trusting(
        &self,
        route_and_tier_valid: bool,
    ) -> Result<Option<CompactString>, CheckError> {
        let bad = |field, reason| Err(CheckError::invalid(field, reason));
        if self.cost == 0 {
            return bad(InputField::Cost, "must be at least 1");
        }
        if self.key.is_empty() {
            return bad(InputField::Key, "must not be empty");
        }
        if self.key.len() > MAX_KEY_LEN {
            return bad(InputField::Key, "must be at most 256 bytes");
        }
        if has_control(&self.key) {
            return bad(InputField::Key, "must not contain control characters");
        }
        if !route_and_tier_valid {
            self.validate_route_and_tier()?;
        }
        if let Some(rule) = &self.limit {
            CheckError::fits(rule, self.cost)?;
        }
        match self.ip.as_deref() {
            None => Ok(None),
            Some(ip) if ip.len() > MAX_IP_LEN => bad(InputField::Ip, "is too long"),
            Some(ip) => match ip.parse::<IpAddr>() {
                // An IPv4 string the parser accepts is already canonical
                // (it refuses leading zeros and short forms), so it is kept
                // as sent instead of formatted again on every check; only
                // IPv6 has several spellings of one address.
                Ok(IpAddr::V4(_)) => Ok(Some(CompactString::new(ip))),
                Ok(addr) => Ok(Some(addr.to_compact_string())),
                Err(_) => bad(InputField::Ip, "is not an IPv4 or IPv6 address"),
            },
        }
    }

    fn validate_route_and_tier(&self) -> Result<(), CheckError> {
        let bad = |field, reason| Err(CheckError::invalid(field, reason));
        if self.route.len() > MAX_ROUTE_LEN {
            return bad(InputField::Route, "must be at most 1024 bytes");
        }
        if has_control(&self.route) {
            return bad(InputField::Route, "must not contain control characters");
        }
        match &self.tier {
            Some(t) if t.len() > MAX_TIER_LEN || has_control(t) => bad(
                InputField::Tier,
                "must be at most 64 bytes of printable text",
            ),
            _ => Ok(()),
        }
    }
}

/// True when `s` holds a control character (Unicode Cc: U+0000-U+001F,
/// U+007F-U+009F). Each is a byte below 0x20, the byte 0x7F, or a
/// two-byte sequence led by 0xC2, so a string with none of those bytes
/// holds none: a branch-free pass over the bytes clears almost every key,
/// and only one with a 0xC2 byte (a C1 control, or one of U+00A0-U+00BF)
/// is read again as characters. Decoding every key and route as
/// characters was 5% of a 100-item call's instructions; scanning eight
/// bytes at a time (a borrow trick per word) cost more than this on keys
/// of ten bytes.
fn has_control(s: &str) -> bool {
    let suspect = s.bytes().fold(false, |seen, b| {
        seen | (b < 0x20) | (b == 0x7f) | (b == 0xc2)
    });
    suspect && s.chars().any(char::is_control)
}

/// The answer to one check, as every edge shows it: the binding limit's
/// numbers (the limit that denied, else the one with the least budget
/// left), or "unlimited" when no enforcing rule applied.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CheckResponse {
    pub allowed: bool,
    /// False when no enforcing rule matched: the request is unlimited and
    /// there is no limit to describe in headers.
    pub limited: bool,
    /// The binding rule's name; None when unlimited.
    pub rule: Option<Arc<str>>,
    /// The binding rule's limit per window (or bucket capacity); 0 when unlimited.
    pub limit: u64,
    pub remaining: u64,
    /// Zero when allowed; otherwise the exact wait before a retry of the
    /// same cost can succeed (shown rounded up).
    pub retry_after: Duration,
    /// Unix milliseconds at which the budget is full again.
    pub reset_at_ms: u64,
    /// Scheduling leaky bucket only: how long to hold the admitted request
    /// before sending it.
    pub delay: Duration,
    /// The rule's window, when the decider knows it (a remote node's answer
    /// does not carry it); `RateLimit-Policy` shows it as `w`.
    pub window: Option<Duration>,
}

impl CheckResponse {
    /// The answer when no enforcing rule applied.
    pub fn unlimited() -> Self {
        CheckResponse {
            allowed: true,
            ..CheckResponse::default()
        }
    }

    /// Retry-After in whole seconds: rounded up and at least 1 on a denial,
    /// because rounding down guarantees the first retry is rejected too.
    pub fn retry_after_secs(&self) -> u64 {
        if self.allowed {
            return 0;
        }
        crate::decision::ceil_secs(self.retry_after).max(1)
    }

    /// Retry-After in milliseconds, rounded up.
    pub fn retry_after_ms(&self) -> u64 {
        crate::decision::ceil_ms(self.retry_after)
    }

    /// The shaping delay in milliseconds, rounded up: sending earlier would be refused.
    pub fn delay_ms(&self) -> u64 {
        crate::decision::ceil_ms(self.delay)
    }

    /// The answer describing one applied limit.
    pub fn of(allowed: bool, a: &Applied) -> Self {
        let d = &a.decision;
        CheckResponse {
            allowed,
            limited: true,
            rule: Some(a.rule.name.clone()),
            limit: d.limit,
            remaining: d.remaining,
            retry_after: if allowed {
                Duration::ZERO
            } else {
                d.retry_after
            },
            reset_at_ms: d.reset_at,
            delay: if allowed { d.delay } else { Duration::ZERO },
            window: Some(a.rule.window),
        }
    }
}

impl Verdict {
    /// The binding limit and how long an admitted caller holds its request
    /// before sending: what [`Verdict::response`] shows, borrowed from the
    /// verdict. None when no enforcing rule applied (unlimited).
    pub fn shown(&self) -> Option<(&Applied, Duration)> {
        let binding = self.binding()?;
        // Every enforcing limit's slot must have come before sending: the
        // caller waits for the latest of them.
        let delay = if self.allowed {
            let enforcing = self.applied.iter().filter(|a| !a.rule.shadow);
            enforcing
                .map(|a| a.decision.delay)
                .max()
                .unwrap_or_default()
        } else {
            Duration::ZERO
        };
        Some((binding, delay))
    }

    /// What the caller is shown: the binding limit, or unlimited.
    pub fn response(&self) -> CheckResponse {
        match self.shown() {
            Some((a, delay)) => CheckResponse {
                delay,
                ..CheckResponse::of(self.allowed, a)
            },
            None => CheckResponse {
                allowed: self.allowed,
                ..CheckResponse::default()
            },
        }
    }
}

/// Something that decides checks: this process's limiter, a cluster
/// engine, or a remote node. The tower layer and the simulator work over it.
pub trait Decide: Send + Sync + 'static {
    /// Decides one check. Bad input is refused naming its field and
    /// consumes nothing.
    fn decide<'a>(
        &'a self,
        req: &'a CheckRequest,
    ) -> impl Future<Output = Result<CheckResponse, CheckError>> + Send + 'a;

    /// Many checks, each with its own answer, in order. A decider that can
    /// carry them together (one call per owner, one RPC) overrides this.
    fn decide_many<'a>(
        &'a self,
        reqs: &'a [CheckRequest],
    ) -> impl Future<Output = Vec<Result<CheckResponse, CheckError>>> + Send + 'a {
        async move {
            let mut out = Vec::with_capacity(reqs.len());
            for r in reqs {
                out.push(self.decide(r).await);
            }
            out
        }
    }

    /// The clock the answers' reset times are read against (unix ns), for
    /// the `RateLimit-Reset` seconds an edge shows.
    fn now(&self) -> Nanos;
}

impl<D: Decide> Decide for Arc<D> {
    fn decide<'a>(
        &'a self,
        req: &'a CheckRequest,
    ) -> impl Future<Output = Result<CheckResponse, CheckError>> + Send + 'a {
        (**self).decide(req)
    }

    fn decide_many<'a>(
        &'a self,
        reqs: &'a [CheckRequest],
    ) -> impl Future<Output = Vec<Result<CheckResponse, CheckError>>> + Send + 'a {
        (**self).decide_many(reqs)
    }

    fn now(&self) -> Nanos {
        (**self).now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_malformed_attribute_is_named() {
        let field = |r: CheckRequest| r.validate().unwrap_err().field();
        assert_eq!(field(CheckRequest::new("k", "/").cost(0)), Some("cost"));
        assert_eq!(field(CheckRequest::new("", "/")), Some("key"));
        assert_eq!(field(CheckRequest::new("a\u{7}", "/")), Some("key"));
        assert_eq!(field(CheckRequest::new("k".repeat(257), "/")), Some("key"));
        assert_eq!(field(CheckRequest::new("k", "/\n")), Some("route"));
        assert_eq!(field(CheckRequest::new("k", "/").tier("t\0")), Some("tier"));
        assert_eq!(field(CheckRequest::new("k", "/").ip("1.2.3")), Some("ip"));
    }

    #[test]
    fn control_characters_are_found_as_characters_would_find_them() {
        let c1 = ['\u{80}', '\u{85}', '\u{9f}'];
        for c in ('\0'..='\u{7f}')
            .chain(c1)
            .chain(['\u{a0}', '\u{100}', '\u{2028}', 'é'])
        {
            for s in [format!("{c}"), format!("key-{c}-tail"), format!("é{c}")] {
                assert_eq!(has_control(&s), s.chars().any(char::is_control), "{s:?}");
            }
        }
        assert!(has_control("plain\u{85}"));
        assert!(!has_control("Ā-é-\u{a0}"));
        // The bytes just past each bound are no controls.
        assert!(!has_control(&" ~\u{a0}\u{c0}".repeat(4)));
    }

    #[test]
    fn ipv6_spellings_share_one_canonical_text() {
        let ip = |s: &str| CheckRequest::new("k", "/").ip(s).validate().unwrap();
        assert_eq!(ip("0:0:0:0:0:0:0:1"), ip("::1"));
        assert_eq!(ip("203.0.113.9").as_deref(), Some("203.0.113.9"));
    }

    #[test]
    fn a_carried_limit_refuses_a_cost_it_can_never_admit() {
        let rule = Arc::new(Rule::carried("o", 5, Duration::from_secs(60)).unwrap());
        let r = CheckRequest::new("k", "/").carrying(rule).cost(6);
        assert!(matches!(
            r.validate(),
            Err(CheckError::CostExceedsLimit { max: 5, .. })
        ));
    }

    #[test]
    fn the_delay_shown_is_every_enforcing_limits_latest_not_the_binding_ones() {
        use crate::{Applied, Decision, Verdict};
        let applied = |shadow: bool, allowed: bool, remaining: u64, delay_ms: u64| {
            let mut rule = Rule::carried("r", 10, Duration::from_secs(60)).unwrap();
            rule.shadow = shadow;
            Applied {
                rule: Arc::new(rule),
                hash_part: "k".into(),
                decision: Decision {
                    allowed,
                    limit: 10,
                    remaining,
                    retry_after: Duration::ZERO,
                    reset_at: 0,
                    delay: Duration::from_millis(delay_ms),
                    at: 0,
                },
            }
        };
        let admitted = Verdict {
            allowed: true,
            applied: vec![
                applied(false, true, 2, 20),
                applied(false, true, 8, 40),
                applied(true, true, 0, 90),
            ],
        };
        let (binding, delay) = admitted.shown().unwrap();
        assert_eq!(binding.decision.remaining, 2, "the fewest left binds");
        assert_eq!(delay, Duration::from_millis(40), "not the shadow's 90");
        assert_eq!(admitted.response().delay, delay);
        let denied = Verdict {
            allowed: false,
            applied: vec![applied(false, true, 2, 20), applied(false, false, 0, 0)],
        };
        assert_eq!(denied.shown().unwrap().1, Duration::ZERO);
    }

    #[test]
    fn denial_wait_is_never_shown_as_zero_seconds() {
        let r = CheckResponse {
            allowed: false,
            retry_after: Duration::from_nanos(1),
            ..CheckResponse::default()
        };
        assert_eq!(r.retry_after_secs(), 1);
        assert_eq!(r.retry_after_ms(), 1);
        assert_eq!(CheckResponse::unlimited().retry_after_secs(), 0);
    }
}
