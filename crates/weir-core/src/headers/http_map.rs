//! The headers written straight into an `http::HeaderMap`: names built at
//! compile time and numbers formatted without an intermediate `String`, since
//! a server and a tower layer build them on every response.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};

use super::{push_decimal, RateLimitHeaders};

// Lower case, as HTTP/2 requires and `from_static` insists; the names are
// case-insensitive, so these are the constants of the parent module.
const LIMIT: HeaderName = HeaderName::from_static("ratelimit-limit");
const REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
const RESET: HeaderName = HeaderName::from_static("ratelimit-reset");
const X_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
const POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const STATE: HeaderName = HeaderName::from_static("ratelimit");

/// Which rate-limit headers a response carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HeaderSet {
    /// Both families (`RateLimit-*`, `X-RateLimit-*`) and the IETF fields.
    #[default]
    All,
    /// Only the IETF draft's `RateLimit-Policy` and `RateLimit`, which say
    /// everything the other six do: for admitted responses of a service
    /// that would rather not carry eight headers on every answer. Retry-After
    /// still goes out on a denial.
    Ietf,
}

impl RateLimitHeaders {
    /// Inserts every header into `h`, replacing any of the same name;
    /// Retry-After only on a denial.
    pub fn write_to(&self, h: &mut HeaderMap) {
        self.write_set_to(h, HeaderSet::All);
    }

    /// Inserts the headers of `set` into `h`, replacing any of the same name.
    pub fn write_set_to(&self, h: &mut HeaderMap, set: HeaderSet) {
        // Every value is rendered into one buffer and each header holds a
        // slice of it: two allocations in all, where a `HeaderValue` per
        // number would take one each.
        let mut buf = String::with_capacity(160);
        let mut ends = [0usize; 7];
        let numbers = [self.limit, self.remaining, self.reset_in, self.reset_unix];
        for (i, n) in numbers.into_iter().enumerate() {
            push_decimal(&mut buf, n);
            ends[i] = buf.len();
        }
        self.push_policy(&mut buf);
        ends[4] = buf.len();
        self.push_state(&mut buf);
        ends[5] = buf.len();
        if let Some(secs) = self.retry_after {
            push_decimal(&mut buf, secs);
            ends[6] = buf.len();
        }
        let all = Bytes::from(buf);
        let value = |i: usize| {
            let start = if i == 0 { 0 } else { ends[i - 1] };
            // Digits and a quoted rule name of visible ASCII: always valid.
            HeaderValue::from_maybe_shared(all.slice(start..ends[i]))
        };
        let all = [
            (POLICY, 4),
            (STATE, 5),
            (LIMIT, 0),
            (REMAINING, 1),
            (RESET, 2),
            (X_LIMIT, 0),
            (X_REMAINING, 1),
            (X_RESET, 3),
        ];
        let names = match set {
            HeaderSet::All => &all[..],
            HeaderSet::Ietf => &all[..2],
        };
        h.reserve(names.len() + 1);
        for (name, i) in names.iter().cloned() {
            if let Ok(v) = value(i) {
                h.insert(name, v);
            }
        }
        if self.retry_after.is_some() {
            if let Ok(v) = value(6) {
                h.insert(http::header::RETRY_AFTER, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(retry_after: Option<u64>) -> RateLimitHeaders {
        RateLimitHeaders {
            rule: "charges-per-client".into(),
            limit: 100,
            remaining: 7,
            reset_in: 6,
            reset_unix: 1_738_368_060,
            window_secs: Some(60),
            retry_after,
        }
    }

    #[test]
    fn the_map_holds_exactly_the_string_pairs() {
        for retry_after in [None, Some(6)] {
            let f = figures(retry_after);
            let mut h = HeaderMap::new();
            f.write_to(&mut h);
            let pairs = f.pairs();
            assert_eq!(h.len(), pairs.len());
            for (name, value) in pairs {
                assert_eq!(
                    h.get(name).map(|v| v.to_str().unwrap()),
                    Some(&*value),
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn the_ietf_set_carries_policy_state_and_retry_after_only() {
        let mut h = HeaderMap::new();
        figures(Some(6)).write_set_to(&mut h, HeaderSet::Ietf);
        let mut names: Vec<&str> = h.keys().map(|n| n.as_str()).collect();
        names.sort();
        assert_eq!(names, ["ratelimit", "ratelimit-policy", "retry-after"]);
        assert_eq!(h["ratelimit"], "\"charges-per-client\";r=7;t=6");
    }

    #[test]
    fn headers_already_there_are_replaced_not_doubled() {
        let mut h = HeaderMap::new();
        figures(None).write_to(&mut h);
        let mut tighter = figures(None);
        tighter.remaining = 1;
        tighter.write_to(&mut h);
        assert_eq!(
            h.get_all(super::super::RATELIMIT_REMAINING).iter().count(),
            1
        );
        assert_eq!(h[super::super::RATELIMIT_REMAINING], "1");
    }
}
