//! The rate-limit response headers (seed 9) for one applied limit, as plain strings.

use std::time::Duration;

use crate::clock::{Nanos, NANOS_PER_MS};
use crate::decision::ceil_secs;
use crate::limiter::Applied;

pub const RATELIMIT_LIMIT: &str = "RateLimit-Limit";
pub const RATELIMIT_REMAINING: &str = "RateLimit-Remaining";
pub const RATELIMIT_RESET: &str = "RateLimit-Reset";
pub const X_RATELIMIT_LIMIT: &str = "X-RateLimit-Limit";
pub const X_RATELIMIT_REMAINING: &str = "X-RateLimit-Remaining";
pub const X_RATELIMIT_RESET: &str = "X-RateLimit-Reset";
pub const RATELIMIT_POLICY: &str = "RateLimit-Policy";
pub const RATELIMIT: &str = "RateLimit";
pub const RETRY_AFTER: &str = "Retry-After";

/// Every header for `applied`, decided at `now` (unix nanoseconds).
///
/// Pure so that the server and an embedding client layer produce the same
/// bytes. Both families go out on purpose: `RateLimit-Reset` is seconds
/// from now (the IETF family), `X-RateLimit-Reset` a unix time (the older
/// convention), and neither ever changes meaning.
///
/// `retry_after_secs` replaces the decision's own Retry-After on a denial
/// (server-side jitter); it is still raised to at least 1, because a
/// `Retry-After: 0` invites an immediate retry that is certain to fail.
/// Retry-After appears only on a denial.
pub fn rate_limit_headers(
    applied: &Applied,
    now: Nanos,
    retry_after_secs: Option<u64>,
) -> Vec<(&'static str, String)> {
    let d = &applied.decision;
    let rule = sf_string(&applied.rule.name);
    let reset_in = reset_after_secs(d.reset_at, now);
    // Rounded up so a client that waits this long finds the budget full.
    let reset_unix = d.reset_at.div_ceil(1000);
    let window = ceil_secs(applied.rule.window).max(1);
    let mut out = vec![
        (RATELIMIT_LIMIT, d.limit.to_string()),
        (RATELIMIT_REMAINING, d.remaining.to_string()),
        (RATELIMIT_RESET, reset_in.to_string()),
        (X_RATELIMIT_LIMIT, d.limit.to_string()),
        (X_RATELIMIT_REMAINING, d.remaining.to_string()),
        (X_RATELIMIT_RESET, reset_unix.to_string()),
        (RATELIMIT_POLICY, format!("{rule};q={};w={window}", d.limit)),
        (RATELIMIT, format!("{rule};r={};t={reset_in}", d.remaining)),
    ];
    if !d.allowed {
        let secs = retry_after_secs
            .unwrap_or_else(|| d.retry_after_secs())
            .max(1);
        out.push((RETRY_AFTER, secs.to_string()));
    }
    out
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

/// An RFC 8941 sf-string: quoted, with `"` and `\` escaped. Rule names are
/// restricted to safe characters, so this only guards the format.
pub fn sf_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::{Decision, RuleSet, NANOS_PER_SEC};

    const NOW: Nanos = 1_738_368_054 * NANOS_PER_SEC + 300 * NANOS_PER_MS;

    fn applied(allowed: bool, remaining: u64, retry_after: Duration, reset_at: u64) -> Applied {
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
        Applied {
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
        }
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
    fn reset_in_the_past_reads_zero() {
        assert_eq!(reset_after_secs(1_000, 5 * NANOS_PER_SEC), 0);
        assert_eq!(reset_after_secs(5_001, 5 * NANOS_PER_SEC), 1);
    }

    #[test]
    fn sf_string_escapes_quote_and_backslash() {
        assert_eq!(sf_string(r#"a"b\c"#), r#""a\"b\\c""#);
    }

    #[test]
    fn whole_secs_rounds_up() {
        assert_eq!(whole_secs_up(Duration::from_millis(1_001)), 2);
        assert_eq!(whole_secs_up(Duration::from_secs(2)), 2);
    }
}
