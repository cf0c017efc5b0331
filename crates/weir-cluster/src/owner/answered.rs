//! What each owner admitted for this gateway in the last seconds: reported to the keys' new owners when it dies, so that the admissions its copies had not received yet are not granted again.

use std::collections::VecDeque;
use std::sync::Arc;

use compact_str::CompactString;
use dashmap::DashMap;
use parking_lot::Mutex;
use weir_core::{Nanos, NANOS_PER_SEC};

/// How long an admission is kept: far longer than a replication round
/// trip on a loaded node (the only gap it has to cover).
pub const KEEP: Nanos = 2 * NANOS_PER_SEC;
/// Most admissions kept per owner; past it the oldest go first.
pub const MOST: usize = 65_536;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    pub rule: Arc<str>,
    pub hash_part: CompactString,
    pub cost: u64,
    /// The owner's decision time.
    pub at: Nanos,
    /// This gateway's clock when the answer came.
    seen: Nanos,
}

#[derive(Default)]
pub struct Answered {
    by_owner: DashMap<String, Mutex<VecDeque<Admission>>, weir_core::determinism::HashState>,
}

impl Answered {
    /// `owner` admitted `cost` of (rule, hash_part) at `at` (its clock);
    /// this gateway heard at `now` (its own).
    pub fn record(
        &self,
        owner: &str,
        rule: &Arc<str>,
        hash_part: &str,
        cost: u64,
        at: Nanos,
        now: Nanos,
    ) {
        let a = Admission {
            rule: rule.clone(),
            hash_part: CompactString::new(hash_part),
            cost,
            at,
            seen: now,
        };
        let push = |log: &Mutex<VecDeque<Admission>>| {
            let mut log = log.lock();
            while log
                .front()
                .is_some_and(|o| now.saturating_sub(o.seen) > KEEP || log.len() >= MOST)
            {
                log.pop_front();
            }
            log.push_back(a);
        };
        // The read guard ends with this `if let` before an insert locks.
        if let Some(log) = self.by_owner.get(owner) {
            push(&log);
            return;
        }
        push(&self.by_owner.entry(owner.to_string()).or_default());
    }

    /// Removes and returns what `owner` admitted for this gateway within
    /// [`KEEP`] of `now`.
    pub fn take(&self, owner: &str, now: Nanos) -> Vec<Admission> {
        let Some((_, log)) = self.by_owner.remove(owner) else {
            return Vec::new();
        };
        log.into_inner()
            .into_iter()
            .filter(|a| now.saturating_sub(a.seen) <= KEEP)
            .collect()
    }

    /// Admissions kept, over every owner.
    pub fn len(&self) -> usize {
        self.by_owner.iter().map(|l| l.lock().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owners_recent_admissions_are_kept_for_a_while_and_taken_once() {
        let a = Answered::default();
        let r: Arc<str> = Arc::from("r");
        a.record("o", &r, "old", 1, 5, 0);
        a.record("o", &r, "k", 2, 9, KEEP);
        a.record("p", &r, "k", 1, 9, KEEP);
        let taken = a.take("o", KEEP + 1);
        assert_eq!(taken.len(), 1, "the first is older than KEEP");
        assert_eq!(
            (taken[0].hash_part.as_str(), taken[0].cost, taken[0].at),
            ("k", 2, 9)
        );
        assert!(a.take("o", KEEP + 1).is_empty(), "taken once");
        assert_eq!(a.len(), 1, "another owner's are kept");
    }

    #[test]
    fn an_owners_log_is_bounded() {
        let a = Answered::default();
        let r: Arc<str> = Arc::from("r");
        for i in 0..(MOST as u64 + 10) {
            a.record("o", &r, "k", 1, i, 0);
        }
        assert_eq!(a.len(), MOST);
    }
}
