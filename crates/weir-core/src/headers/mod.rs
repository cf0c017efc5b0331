//! The rate-limit response headers for one applied limit.

use std::sync::Arc;
use std::time::Duration;

use crate::check::CheckResponse;
use crate::clock::{Nanos, NANOS_PER_MS};
use crate::decision::ceil_secs;

pub const RATELIMIT_LIMIT: &str = "RateLimit-Limit";
pub const RATELIMIT_REMAINING: &str = "RateLimit-Remaining";
pub const RATELIMIT_RESET: &str = "RateLimit-Reset";
pub const X_RATELIMIT_LIMIT: &str = "X-RateLimit-Limit";
pub const X_RATELIMIT_REMAINING: &str = "X-RateLimit-Remaining";
pub const X_RATELIMIT_RESET: &str = "X-RateLimit-Reset";
pub const RATELIMIT_POLICY: &str = "RateLimit-Policy";
pub const RATELIMIT: &str = "RateLimit";
pub const RETRY_AFTER: &str = "Retry-After";

/// The figures every rate-limit header is rendered from, for one limit.
///
/// Computed once, then rendered as strings ([`RateLimitHeaders::pairs`],
/// for Envoy and tests) or straight into an `http::HeaderMap` (feature
/// `http`), so the server and an embedding client layer send the same
/// bytes. Both families go out on purpose: `RateLimit-Reset` is seconds
/// from now (the IETF family), `X-RateLimit-Reset` a unix time (the older
/// convention), and neither ever changes meaning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitHeaders {
    pub rule: Arc<str>,
    pub limit: u64,
    pub remaining: u64,
    /// Seconds from now until the budget is back, rounded up.
    pub reset_in: u64,
    /// The same instant as a unix time in seconds, rounded up.
    pub reset_unix: u64,
    /// The window in whole seconds, for `RateLimit-Policy`'s `w`; absent
    /// when the caller does not know it (a remote verdict).
    pub window_secs: Option<u64>,
    /// Whole seconds, at least 1; only on a denial.
    pub retry_after: Option<u64>,
}

impl RateLimitHeaders {
    /// The headers describing an answer, read at `now` (unix nanoseconds);
    /// None when it is unlimited, since there is no limit to describe.
    ///
    /// `retry_after_secs` replaces the answer's own Retry-After on a denial
    /// (server-side jitter); it is still raised to at least 1, because a
    /// `Retry-After: 0` invites an immediate retry that is certain to fail.
    pub fn of(r: &CheckResponse, now: Nanos, retry_after_secs: Option<u64>) -> Option<Self> {
        let rule = r.rule.as_ref().filter(|_| r.limited)?;
        Some(RateLimitHeaders {
            rule: rule.clone(),
            limit: r.limit,
            remaining: r.remaining,
            reset_in: reset_after_secs(r.reset_at_ms, now),
            // Rounded up so a client that waits this long finds the budget full.
            reset_unix: r.reset_at_ms.div_ceil(1000),
            window_secs: r.window.map(|w| ceil_secs(w).max(1)),
            retry_after: (!r.allowed).then(|| {
                retry_after_secs
                    .unwrap_or_else(|| r.retry_after_secs())
                    .max(1)
            }),
        })
    }

    /// `RateLimit-Policy`: the quota and, when known, its window.
    pub fn policy(&self) -> String {
        let mut out = String::with_capacity(self.rule.len() + 32);
        self.push_policy(&mut out);
        out
    }

    /// `RateLimit`: what is left and when it resets.
    pub fn state(&self) -> String {
        let mut out = String::with_capacity(self.rule.len() + 32);
        self.push_state(&mut out);
        out
    }

    pub(crate) fn push_policy(&self, out: &mut String) {
        push_sf_string(out, &self.rule);
        out.push_str(";q=");
        push_decimal(out, self.limit);
        if let Some(w) = self.window_secs {
            out.push_str(";w=");
            push_decimal(out, w);
        }
    }

    pub(crate) fn push_state(&self, out: &mut String) {
        push_sf_string(out, &self.rule);
        out.push_str(";r=");
        push_decimal(out, self.remaining);
        out.push_str(";t=");
        push_decimal(out, self.reset_in);
    }

    /// Every header as a (name, value) pair; Retry-After only on a denial.
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![
            (RATELIMIT_LIMIT, decimal(self.limit)),
            (RATELIMIT_REMAINING, decimal(self.remaining)),
            (RATELIMIT_RESET, decimal(self.reset_in)),
            (X_RATELIMIT_LIMIT, decimal(self.limit)),
            (X_RATELIMIT_REMAINING, decimal(self.remaining)),
            (X_RATELIMIT_RESET, decimal(self.reset_unix)),
            (RATELIMIT_POLICY, self.policy()),
            (RATELIMIT, self.state()),
        ];
        if let Some(secs) = self.retry_after {
            out.push((RETRY_AFTER, decimal(secs)));
        }
        out
    }
}

/// Every header for an answer as strings (none when unlimited):
/// [`RateLimitHeaders::of`], then [`RateLimitHeaders::pairs`].
pub fn rate_limit_headers(
    r: &CheckResponse,
    now: Nanos,
    retry_after_secs: Option<u64>,
) -> Vec<(&'static str, String)> {
    RateLimitHeaders::of(r, now, retry_after_secs).map_or_else(Vec::new, |h| h.pairs())
}

/// Seconds from `now` until `reset_at` (unix ms), rounded up: a reset shown
/// early sends the client back before its budget is there.
pub fn reset_after_secs(reset_at_ms: u64, now: Nanos) -> u64 {
    let now_ms = now / NANOS_PER_MS;
    reset_at_ms.saturating_sub(now_ms).div_ceil(1000)
}

/// Whole seconds, rounded up, for a Retry-After that a caller computes
/// itself (e.g. after adding jitter).
pub fn whole_secs_up(d: Duration) -> u64 {
    ceil_secs(d)
}

/// An RFC 8941 sf-string: quoted, with `"` and `\\` escaped. Rule names are
/// restricted to safe characters, so this only guards the format.
pub fn sf_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    push_sf_string(&mut out, s);
    out
}

fn push_sf_string(out: &mut String, s: &str) {
    out.push('"');
    // Copied a run at a time between the characters that need escaping
    // (almost always the whole name at once): pushed a character at a
    // time, it was 8% of weir's own instructions on an RLS request
    // (`CALL=rls bench/pipeline-count.sh`). Both characters are ASCII, so
    // a byte's position is a character boundary; searching for either of
    // two `char`s decoded every character first.
    let mut rest = s;
    while let Some(i) = rest.bytes().position(|b| b == b'"' || b == b'\\') {
        out.push_str(&rest[..i]);
        out.push('\\');
        out.push_str(&rest[i..=i]);
        rest = &rest[i + 1..];
    }
    out.push_str(rest);
    out.push('"');
}

/// `n` in decimal, as every header shows a number.
pub fn decimal(n: u64) -> String {
    itoa::Buffer::new().format(n).to_owned()
}

/// Appends `n` in decimal. Headers are rendered on every answer, and
/// `core::fmt` took several times the instructions for the same digits.
pub(crate) fn push_decimal(out: &mut String, n: u64) {
    out.push_str(itoa::Buffer::new().format(n));
}

#[cfg(feature = "http")]
mod http_map;
#[cfg(feature = "http")]
pub use http_map::HeaderSet;

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::{Applied, Decision, RuleSet, NANOS_PER_SEC};

    const NOW: Nanos = 1_738_368_054 * NANOS_PER_SEC + 300 * NANOS_PER_MS;

    fn applied(
        allowed: bool,
        remaining: u64,
        retry_after: Duration,
        reset_at: u64,
    ) -> CheckResponse {
        let set = RuleSet::from_toml(
            r#"
            [[rule]]
            name = "charges-per-client"
            algorithm = "fixed_window"
            limit = 100
            window = "60s"
            "#,
        )
        .unwrap();
        let a = Applied {
            rule: Arc::clone(&set.rules()[0]),
            hash_part: "cust_42".into(),
            decision: Decision {
                allowed,
                limit: 100,
                remaining,
                retry_after,
                reset_at,
                delay: Duration::ZERO,
                at: NOW,
            },
        };
        CheckResponse::of(allowed, &a)
    }

    fn get<'a>(h: &'a [(&'static str, String)], name: &str) -> Option<&'a str> {
        h.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }

    #[test]
    fn denial_carries_both_families_and_rounded_up_retry_after() {
        // Reset 5.7 s after NOW: shown as 6 seconds and as the next whole unix second.
        let reset_at = NOW / NANOS_PER_MS + 5_700;
        let h = rate_limit_headers(
            &applied(false, 0, Duration::from_millis(5_670), reset_at),
            NOW,
            None,
        );
        assert_eq!(get(&h, RATELIMIT_LIMIT), Some("100"));
        assert_eq!(get(&h, RATELIMIT_REMAINING), Some("0"));
        assert_eq!(get(&h, RATELIMIT_RESET), Some("6"));
        assert_eq!(get(&h, X_RATELIMIT_LIMIT), Some("100"));
        assert_eq!(get(&h, X_RATELIMIT_REMAINING), Some("0"));
        assert_eq!(get(&h, X_RATELIMIT_RESET), Some("1738368060"));
        assert_eq!(
            get(&h, RATELIMIT_POLICY),
            Some("\"charges-per-client\";q=100;w=60")
        );
        assert_eq!(get(&h, RATELIMIT), Some("\"charges-per-client\";r=0;t=6"));
        assert_eq!(get(&h, RETRY_AFTER), Some("6"));
    }

    #[test]
    fn allowed_has_no_retry_after() {
        let h = rate_limit_headers(
            &applied(true, 42, Duration::ZERO, NOW / NANOS_PER_MS + 1_000),
            NOW,
            Some(9),
        );
        assert_eq!(get(&h, RETRY_AFTER), None);
        assert_eq!(get(&h, RATELIMIT_REMAINING), Some("42"));
    }

    #[test]
    fn retry_after_is_never_zero() {
        let h = rate_limit_headers(
            &applied(false, 0, Duration::from_nanos(1), NOW / NANOS_PER_MS),
            NOW,
            Some(0),
        );
        assert_eq!(get(&h, RETRY_AFTER), Some("1"));
    }

    #[test]
    fn jittered_retry_after_replaces_the_base() {
        let h = rate_limit_headers(
            &applied(false, 0, Duration::from_secs(3), NOW / NANOS_PER_MS + 3_000),
            NOW,
            Some(5),
        );
        assert_eq!(get(&h, RETRY_AFTER), Some("5"));
    }

    #[test]
    fn an_unlimited_answer_has_no_headers() {
        assert!(rate_limit_headers(&CheckResponse::unlimited(), NOW, None).is_empty());
    }

    #[test]
    fn an_answer_without_a_window_leaves_w_out_of_the_policy() {
        let mut r = applied(true, 1, Duration::ZERO, NOW / NANOS_PER_MS);
        r.window = None;
        let h = rate_limit_headers(&r, NOW, None);
        assert_eq!(
            get(&h, RATELIMIT_POLICY),
            Some("\"charges-per-client\";q=100")
        );
    }

    #[test]
    fn reset_in_the_past_reads_zero() {
        assert_eq!(reset_after_secs(1_000, 5 * NANOS_PER_SEC), 0);
        assert_eq!(reset_after_secs(5_001, 5 * NANOS_PER_SEC), 1);
    }

    #[test]
    fn sf_string_escapes_quote_and_backslash() {
        assert_eq!(sf_string(r#"a"b\c"#), r#""a\"b\\c""#);
        // Escapes next to each other and at either end.
        assert_eq!(sf_string(r#""\\""#), r#""\"\\\\\"""#);
        assert_eq!(sf_string(""), r#""""#);
    }

    #[test]
    fn numbers_are_plain_decimal_at_both_ends() {
        assert_eq!(decimal(0), "0");
        assert_eq!(decimal(u64::MAX), u64::MAX.to_string());
        let mut out = String::from("q=");
        push_decimal(&mut out, 1_000_000_000);
        assert_eq!(out, "q=1000000000");
    }

    #[test]
    fn whole_secs_rounds_up() {
        assert_eq!(whole_secs_up(Duration::from_millis(1_001)), 2);
        assert_eq!(whole_secs_up(Duration::from_secs(2)), 2);
    }
}
