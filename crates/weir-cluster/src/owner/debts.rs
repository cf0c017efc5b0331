//! What this gateway admitted without a key's owner, owed to it: charged once the key's owner answers again, so its count includes them.

use std::sync::Arc;

use parking_lot::Mutex;
use weir_core::{Nanos, NANOS_PER_MS};

/// One admission the owner has not counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    pub rule: Arc<str>,
    pub hash_part: String,
    pub cost: u64,
    /// Unix ms after which the admission is outside every window it could
    /// count in: owed no longer.
    pub until_ms: u64,
}

pub struct Debts {
    owed: Mutex<Vec<Charge>>,
    max: usize,
}

impl Debts {
    pub fn new(max: usize) -> Self {
        Debts {
            owed: Mutex::new(Vec::new()),
            max,
        }
    }

    /// Records an admission decided without the owner. Past `max` owed
    /// charges new ones are dropped (counted by the caller): the owner then
    /// under-counts, which the fallback's own limit already bounds.
    pub fn owe(&self, charge: Charge) -> bool {
        let mut owed = self.owed.lock();
        if owed.len() >= self.max {
            return false;
        }
        owed.push(charge);
        true
    }

    /// The charges `payable` says can go now (their key's owner answers),
    /// removed; expired ones are dropped on the way.
    pub fn take_payable(&self, now: Nanos, payable: impl Fn(&Charge) -> bool) -> Vec<Charge> {
        let now_ms = now / NANOS_PER_MS;
        let mut owed = self.owed.lock();
        owed.retain(|c| c.until_ms > now_ms);
        let (pay, keep): (Vec<Charge>, Vec<Charge>) = owed.drain(..).partition(|c| payable(c));
        *owed = keep;
        pay
    }

    /// Charges waiting for their owner.
    pub fn waiting(&self) -> usize {
        self.owed.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn charge(key: &str, until_ms: u64) -> Charge {
        Charge {
            rule: "r".into(),
            hash_part: key.into(),
            cost: 1,
            until_ms,
        }
    }

    #[test]
    fn charges_wait_for_their_owner_and_expire_with_their_window() {
        let d = Debts::new(2);
        assert!(d.owe(charge("a", 100)));
        assert!(d.owe(charge("b", 100)));
        assert!(!d.owe(charge("c", 100)), "bounded");
        let paid = d.take_payable(50 * NANOS_PER_MS, |c| c.hash_part == "a");
        assert_eq!(paid, [charge("a", 100)]);
        assert_eq!(d.waiting(), 1);
        assert!(
            d.take_payable(100 * NANOS_PER_MS, |_| true).is_empty(),
            "b expired"
        );
        assert_eq!(d.waiting(), 0);
    }
}
