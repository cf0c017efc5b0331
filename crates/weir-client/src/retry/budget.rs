//! Retries funded by recent successes, so a failing dependency is retried less, not more.

use std::sync::atomic::{AtomicU64, Ordering};

use thiserror::Error;

/// Fixed point: one token is a million units. Integers keep ten deposits of
/// 0.1 equal to exactly one token; in `f64`, 0.1 added ten times is
/// 0.9999999999999999 and the tenth success would not fund the retry it
/// paid for. Ratios finer than 1e-6 round to the nearest unit.
const ONE: u64 = 1_000_000;

/// A budget parameter was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Error)]
pub enum BudgetError {
    /// `field` was NaN, infinite or negative. Nothing was built; a budget
    /// passed to [`RetryBudget::with_max`] is dropped, not modified.
    #[error("retry budget `{field}` must be finite and non-negative, got {value}")]
    Invalid { field: &'static str, value: f64 },
}

/// A token balance: each success deposits `ratio`, each retry spends one.
///
/// A 10% budget funds one retry per ten successes, so steady-state load tops
/// out at 1.1x the request rate, against 4x for three blind retries. In a
/// total outage nothing succeeds, nothing refills, and only the seed is
/// spendable: 10 retries against 100,000 failures is
/// (100,000 + 10) / 100,000 = 1.0001x. The harder the dependency fails, the
/// less it is retried.
///
/// Shared through `&self` (an atomic counter), so one budget can sit behind
/// an `Arc` for every task calling the same dependency.
///
/// The balance is unbounded by default: a long quiet period
/// of successes then banks an arbitrarily large balance, which a later
/// outage can spend as an unbounded storm. Production callers should set
/// [`with_max`](Self::with_max).
///
/// ```
/// use weir_client::RetryBudget;
///
/// // A tenth of a retry earned per success, 2 to start with, at most 10 banked.
/// let budget = RetryBudget::new(0.1, 2.0)?.with_max(10.0)?;
/// assert!(budget.try_retry());
/// assert!(budget.try_retry());
/// assert!(!budget.try_retry(), "the seed is spent");
/// for _ in 0..10 {
///     budget.record_success();
/// }
/// assert!(budget.try_retry(), "ten successes paid for one more");
/// # Ok::<(), weir_client::BudgetError>(())
/// ```
#[derive(Debug)]
pub struct RetryBudget {
    balance: AtomicU64,
    deposit: u64,
    max: u64,
}

impl RetryBudget {
    /// A budget earning `ratio` tokens per success, starting with `seed`.
    /// `ratio` 0 is allowed: only the seed is ever spendable.
    pub fn new(ratio: f64, seed: f64) -> Result<Self, BudgetError> {
        Ok(Self {
            deposit: to_units("ratio", ratio)?,
            balance: AtomicU64::new(to_units("seed", seed)?),
            max: u64::MAX,
        })
    }

    /// Caps the balance at `max` tokens (clamping the seed too), so however
    /// long the quiet period, an outage can spend at most `max` retries.
    pub fn with_max(mut self, max: f64) -> Result<Self, BudgetError> {
        self.max = to_units("max", max)?;
        let balance = self.balance.get_mut();
        *balance = (*balance).min(self.max);
        Ok(self)
    }

    /// Deposits `ratio` tokens, up to the cap.
    pub fn record_success(&self) {
        // Relaxed: the balance is the only shared state and each update is one RMW.
        let _ = self
            .balance
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |tokens| {
                Some(tokens.saturating_add(self.deposit).min(self.max))
            });
    }

    /// Spends one token if at least one is available; `false` spends nothing.
    pub fn try_retry(&self) -> bool {
        self.balance
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |tokens| {
                if tokens < ONE {
                    return None; // an empty budget refuses; the balance never goes negative
                }
                Some(tokens - ONE) // a retry costs one token
            })
            .is_ok()
    }

    /// The current balance in tokens, for metrics and tests.
    pub fn balance(&self) -> f64 {
        self.balance.load(Ordering::Relaxed) as f64 / ONE as f64
    }
}

impl Default for RetryBudget {
    /// The defaults: ratio 0.1 (1.1x steady state), seed 10 (1.0001x in an outage).
    fn default() -> Self {
        Self {
            deposit: ONE / 10,
            balance: AtomicU64::new(10 * ONE),
            max: u64::MAX,
        }
    }
}

fn to_units(field: &'static str, value: f64) -> Result<u64, BudgetError> {
    if !value.is_finite() || value < 0.0 {
        return Err(BudgetError::Invalid { field, value });
    }
    // `as` saturates, so a huge but finite value becomes u64::MAX units.
    Ok((value * ONE as f64).round() as u64)
}
