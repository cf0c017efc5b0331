//! `--retry-jitter`: the wait a denial reports, spread so callers denied together do not return together, on every edge.

use weir_core::jitter::jittered_wait_ms;
use weir_core::CheckResponse;

/// Server-side jitter: base + uniform(0, base) in milliseconds,
/// for a denial when `jitter` is on; None otherwise (the bare wait stands).
/// In milliseconds, so clients that read `retry_after_ms` spread out too,
/// not only over whole seconds; a `Retry-After` header is the same wait
/// rounded up.
pub fn jittered_ms(r: &CheckResponse, jitter: bool) -> Option<u64> {
    jittered_wait(!r.allowed, r.retry_after_ms(), jitter)
}

/// [`jittered_ms`] of a wait already in whole milliseconds: `denied` says
/// whether there is a wait to spread.
pub fn jittered_wait(denied: bool, wait_ms: u64, jitter: bool) -> Option<u64> {
    (denied && jitter).then(|| jittered_wait_ms(wait_ms, &mut rand::rng()))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn jitter_stays_within_base_and_twice_base() {
        let denied = CheckResponse {
            retry_after: Duration::from_millis(10),
            ..CheckResponse::default()
        };
        assert_eq!(jittered_ms(&denied, false), None, "off unless asked for");
        assert_eq!(
            jittered_wait(false, 10, true),
            None,
            "an admission waits for nothing"
        );
        let seen: Vec<u64> = (0..2000)
            .map(|_| jittered_ms(&denied, true).unwrap())
            .collect();
        assert!(seen.iter().all(|&s| (10..20).contains(&s)));
        // Not constant: a jitter that always returns the base spreads nothing.
        assert!(seen.iter().any(|&s| s != seen[0]));
    }
}
