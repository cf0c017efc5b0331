//! The retry loop: one designated layer, jittered waits, every retry paid from the budget.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;

use super::{full_jitter, honor_retry_after, Attempt, Classify, RetryBudget};

/// How one layer retries.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Total calls, the first included; 0 behaves as 1.
    pub max_attempts: u32,
    /// Full-jitter base: attempt `n`'s wait is below `min(cap, base * 2^n)`.
    pub base: Duration,
    /// Upper bound on a full-jitter wait. Retry-After is not capped: the
    /// server knows when the quota frees, and coming back early is refused.
    pub cap: Duration,
    /// Whether this layer retries 429s. Retries belong at exactly one
    /// layer: three tiers each retrying three times turn one request into
    /// 3 x 3 x 3 = 27 backend requests. Every other layer passes the 429
    /// through untouched.
    pub designated_retrier: bool,
    /// Pays for every retry; share one per dependency so retries stay a
    /// fraction of successes. `None` retries up to `max_attempts` unfunded.
    pub budget: Option<Arc<RetryBudget>>,
}

impl Default for RetryPolicy {
    /// A 0.5 s base and a 30 s cap; not the designated retrier, so a
    /// layer must opt in to retrying 429s.
    fn default() -> Self {
        Self {
            max_attempts: 3,
            base: Duration::from_millis(500),
            cap: Duration::from_secs(30),
            designated_retrier: false,
            budget: None,
        }
    }
}

/// Why [`retry`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The last result was [`Attempt::Done`].
    Done,
    /// A 429 at a layer that is not the designated retrier.
    PassedThrough,
    /// `max_attempts` calls were made.
    AttemptsExhausted,
    /// The budget had no token for another retry.
    BudgetEmpty,
}

/// The last result, how many calls produced it and why the loop stopped.
#[derive(Debug)]
pub struct Outcome<T> {
    pub value: T,
    pub attempts: u32,
    pub stop: Stop,
}

/// Calls `op` until its result is final or `policy` says stop.
///
/// Waits go through `sleep` (pass `tokio::time::sleep`), so tests can
/// record them or run on paused time. A 429 waits [`honor_retry_after`]
/// when the server sent Retry-After, otherwise [`full_jitter`], as does a
/// transient error. The budget is checked before waiting, so a refused
/// retry returns at once instead of sleeping first.
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use std::time::Duration;
/// use http::{Response, StatusCode};
/// use rand::SeedableRng;
/// use weir_client::retry::Stop;
/// use weir_client::{retry, RetryPolicy};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// // This layer is the one that retries 429s; the others pass them through.
/// let policy = RetryPolicy { designated_retrier: true, ..RetryPolicy::default() };
/// let calls = AtomicU32::new(0);
/// let mut waits = Vec::new();
/// let outcome = retry(
///     &policy,
///     &mut rand::rngs::StdRng::seed_from_u64(7),
///     |d| { waits.push(d); async {} }, // tokio::time::sleep in a service
///     || async {
///         // Over quota once, with Retry-After: 2; then admitted.
///         match calls.fetch_add(1, Ordering::SeqCst) {
///             0 => Response::builder().status(429).header("retry-after", "2").body(()).unwrap(),
///             _ => Response::new(()),
///         }
///     },
/// )
/// .await;
/// assert_eq!((outcome.stop, outcome.attempts), (Stop::Done, 2));
/// assert_eq!(outcome.value.status(), StatusCode::OK);
/// // Spread over [0, Retry-After), so callers told the same wait do not return together.
/// assert!(waits[0] < Duration::from_secs(2), "{waits:?}");
/// # }
/// ```
pub async fn retry<T, F, Fut, S, SFut, R>(
    policy: &RetryPolicy,
    rng: &mut R,
    mut sleep: S,
    mut op: F,
) -> Outcome<T>
where
    T: Classify,
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
    S: FnMut(Duration) -> SFut,
    SFut: Future<Output = ()>,
    R: Rng + ?Sized,
{
    let mut attempts = 0;
    loop {
        let value = op().await;
        attempts += 1;
        let retry_after = match value.class() {
            Attempt::Done => {
                if let Some(budget) = &policy.budget {
                    budget.record_success();
                }
                return Outcome {
                    value,
                    attempts,
                    stop: Stop::Done,
                };
            }
            Attempt::RateLimited { .. } if !policy.designated_retrier => {
                return Outcome {
                    value,
                    attempts,
                    stop: Stop::PassedThrough,
                };
            }
            Attempt::RateLimited { retry_after } => retry_after,
            Attempt::Transient => None,
        };
        if attempts >= policy.max_attempts {
            return Outcome {
                value,
                attempts,
                stop: Stop::AttemptsExhausted,
            };
        }
        if let Some(budget) = &policy.budget {
            if !budget.try_retry() {
                return Outcome {
                    value,
                    attempts,
                    stop: Stop::BudgetEmpty,
                };
            }
        }
        let wait = match retry_after {
            Some(retry_after) => honor_retry_after(retry_after, rng),
            None => full_jitter(attempts - 1, policy.base, policy.cap, rng),
        };
        sleep(wait).await;
    }
}
