//! Randomised waits, so clients rejected together do not return together.

use std::time::Duration;

use rand::Rng;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// AWS-style full jitter: uniform in `[0, min(cap, base * 2^attempt))`.
///
/// The uniform draw is the whole point. 100,000 clients told to wait the same
/// second fire within ~10 ms of each other: 10,000,000 req/s, 100x a gateway
/// sized for 100,000. Doubling alone changes when that herd arrives, never
/// whether it arrives together; spreading it over the whole interval brings
/// the peak back to exactly the design rate.
///
/// `base * 2^attempt` saturates at `cap`, so any `attempt` is safe.
pub fn full_jitter<R: Rng + ?Sized>(
    attempt: u32,
    base: Duration,
    cap: Duration,
    rng: &mut R,
) -> Duration {
    let base_ns = base.as_nanos();
    let cap_ns = cap.as_nanos();
    let ceiling_ns = if base_ns == 0 {
        0
    } else if attempt >= base_ns.leading_zeros() {
        // The shift would push bits off the top: the exponential is past any cap.
        cap_ns
    } else {
        (base_ns << attempt).min(cap_ns)
    };
    uniform_below(ceiling_ns, rng)
}

/// A wait uniform in `[0, retry_after)`; never exactly `retry_after`, and 0 for 0.
///
/// The server gives every blocked client the same value, so obeying it
/// literally builds the herd: sleeping exactly Retry-After is the 100x spike
/// repeated every interval, re-synchronised by each wave of rejections.
pub fn honor_retry_after<R: Rng + ?Sized>(retry_after: Duration, rng: &mut R) -> Duration {
    uniform_below(retry_after.as_nanos(), rng)
}

/// What a server should send as Retry-After: `base + uniform[0, base)`.
///
/// The server jitters too because it cannot make every client on the
/// internet call [`honor_retry_after`]; clients that obey
/// literally still spread over `[base, 2 * base)`. Saturates at `Duration::MAX`.
pub fn server_jitter<R: Rng + ?Sized>(base: Duration, rng: &mut R) -> Duration {
    base.saturating_add(uniform_below(base.as_nanos(), rng))
}

/// Uniform in `[0, limit_ns)` nanoseconds, drawn as an integer so the upper
/// bound stays exclusive (a float fraction can round up onto it).
fn uniform_below<R: Rng + ?Sized>(limit_ns: u128, rng: &mut R) -> Duration {
    if limit_ns == 0 {
        return Duration::ZERO;
    }
    let ns = rng.random_range(0..limit_ns);
    // `ns` is below some Duration's nanos, so its seconds fit in u64.
    let secs = u64::try_from(ns / NANOS_PER_SEC).unwrap_or(u64::MAX);
    let subsec = u32::try_from(ns % NANOS_PER_SEC).unwrap_or(0);
    Duration::new(secs, subsec)
}

/// A denial's wait in whole milliseconds with server-side jitter
/// ([`server_jitter`]): what a node or a layer shows instead of the bare
/// wait when asked to spread its callers.
pub fn jittered_retry_after_ms<R: Rng + ?Sized>(r: &crate::CheckResponse, rng: &mut R) -> u64 {
    jittered_wait_ms(r.retry_after_ms(), rng)
}

/// [`jittered_retry_after_ms`] of a wait already in whole milliseconds (a
/// batch item's answer, written without a `CheckResponse`).
pub fn jittered_wait_ms<R: Rng + ?Sized>(wait_ms: u64, rng: &mut R) -> u64 {
    let base = Duration::from_millis(wait_ms);
    u64::try_from(server_jitter(base, rng).as_millis()).unwrap_or(u64::MAX)
}
