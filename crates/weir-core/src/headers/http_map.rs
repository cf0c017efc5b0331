//! The headers written straight into an `http::HeaderMap`: names built at
//! compile time and numbers formatted without an intermediate `String`, since
//! a server and a tower layer build them on every response.

use http::{HeaderMap, HeaderName, HeaderValue};

use super::RateLimitHeaders;

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

impl RateLimitHeaders {
    /// Inserts every header into `h`, replacing any of the same name;
    /// Retry-After only on a denial.
    pub fn write_to(&self, h: &mut HeaderMap) {
        h.reserve(9);
        h.insert(LIMIT, HeaderValue::from(self.limit));
        h.insert(REMAINING, HeaderValue::from(self.remaining));
        h.insert(RESET, HeaderValue::from(self.reset_in));
        h.insert(X_LIMIT, HeaderValue::from(self.limit));
        h.insert(X_REMAINING, HeaderValue::from(self.remaining));
        h.insert(X_RESET, HeaderValue::from(self.reset_unix));
        // Rule names are restricted to visible ASCII, so these always
        // convert; were one not to, the header is left out rather than the
        // response lost.
        if let Ok(v) = HeaderValue::try_from(self.policy()) {
            h.insert(POLICY, v);
        }
        if let Ok(v) = HeaderValue::try_from(self.state()) {
            h.insert(STATE, v);
        }
        if let Some(secs) = self.retry_after {
            h.insert(http::header::RETRY_AFTER, HeaderValue::from(secs));
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
