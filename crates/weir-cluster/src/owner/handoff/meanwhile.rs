//! What a ring change's old owner decided on a key it handed over while the
//! handoff was on its way: sent after the handoff, before the sweep lands.
//!
//! The joiner asks the old owner about its keys until that owner's sweep is
//! over, and an op asked about while the handoff is still on its way is
//! decided on the count the old owner still holds, whole. Settled with the
//! rest, what it spent stayed there as a stray for the next sweep, after
//! the landing and the word: the joiner decided the key alone meanwhile
//! on a count without it, and the window admitted over its limit.

use std::sync::Arc;
use weir_core::determinism::HashSet;

use weir_core::CounterSnapshot;

use super::{sweep, Handed, Handoff};
use crate::owner::moves::{counter_id, CounterId, Landing};
use crate::topology::ring::Ring;

/// Passes after the handoff, each for the keys decided here during the one
/// before: each is a call over a few keys, so fewer ops come in during it.
/// What is decided after the last goes with the next stray sweep.
const PASSES: usize = 3;

impl Handoff {
    /// Hands each key's owner what was spent here on the keys of
    /// `delivered` since their copies were read ([`Landing::decided_here`]),
    /// and the whole count of a key decided here that the copy did not hold
    /// (new here, or dropped at rest) unless it is in `kept`; returns
    /// `delivered` with each key handed again as it was read for it, and
    /// each new key handed, which is what the owner now counts.
    pub(super) async fn hand_spent_meanwhile(
        &self,
        mut delivered: Vec<CounterSnapshot>,
        kept: &HashSet<CounterId>,
        ring: &Ring,
        landing: &Landing,
    ) -> Vec<CounterSnapshot> {
        for _ in 0..PASSES {
            let mut ids = landing.decided_here();
            ids.retain(|id| !kept.contains(id));
            if ids.is_empty() {
                break;
            }
            let shared = Arc::new(std::mem::take(&mut delivered));
            let scan = Arc::clone(&shared);
            let found = sweep(shared.len(), move || positions(&scan, ids)).await;
            delivered = Arc::try_unwrap(shared).unwrap_or_else(|a| (*a).clone());
            let (at, new) = found.unwrap_or_default();
            // An op in flight on one of them decides before it is read.
            self.local.quiesce().await;
            let limiter = self.local.limiter();
            // Each read with where it goes among `delivered`: its place,
            // or none for a key the copy did not hold.
            let mut read = Vec::new();
            let mut spent = Vec::new();
            for i in at {
                let sent = &delivered[i];
                // A carried limit's counter is read by none but its sweep.
                if sent.carried.is_some() {
                    continue;
                }
                if let Some((now, beyond)) =
                    limiter.spent_beyond(&sent.rule, &sent.hash_part, &sent.state)
                {
                    read.push((Some(i), now));
                    spent.push(beyond);
                }
            }
            // Decided here on nothing handed over: all it holds was spent
            // meanwhile. Left for the next stray sweep, it reached the
            // owner after the landing, which had the owner decide the key
            // alone on a count without it.
            for (rule, key, carried) in new {
                if let Some(now) = limiter.snapshot(&rule, &key).filter(|_| !carried) {
                    read.push((None, now.clone()));
                    spent.push(now);
                }
            }
            if spent.is_empty() {
                continue;
            }
            let Handed {
                delivered: got,
                doubtful,
                ..
            } = self.hand_over(spent, ring, None).await;
            // A call that got no answer may still land: what it carried
            // stays here, not offered again until its receiver says what
            // became of it (doubt.rs). Landed, the next sweep settles the
            // key by it; offered again at once, the owner counted it twice.
            self.doubts.lock().extend(doubtful);
            let got: HashSet<(&str, &str)> = got
                .iter()
                .map(|s| (s.rule.as_str(), s.hash_part.as_str()))
                .collect();
            let mut handed_new = Vec::new();
            for (i, now) in read {
                // Not delivered, or in doubt: what was spent since stays
                // here when the copy settles, a stray for the next sweep.
                if !got.contains(&(now.rule.as_str(), now.hash_part.as_str())) {
                    continue;
                }
                match i {
                    Some(i) => delivered[i] = now,
                    None => handed_new.push(now),
                }
            }
            delivered.extend(handed_new);
        }
        delivered
    }
}

/// Where each of `ids` is among `copies`, and the ids none of them is.
fn positions(
    copies: &[CounterSnapshot],
    mut ids: HashSet<CounterId>,
) -> (Vec<usize>, Vec<CounterId>) {
    let at: Vec<usize> = {
        let wanted: HashSet<(&str, &str, bool)> = ids
            .iter()
            .map(|(rule, key, carried)| (rule.as_str(), key.as_str(), *carried))
            .collect();
        copies
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                wanted.contains(&(c.rule.as_str(), c.hash_part.as_str(), c.carried.is_some()))
            })
            .map(|(i, _)| i)
            .collect()
    };
    for &i in &at {
        ids.remove(&counter_id(&copies[i]));
    }
    (at, ids.into_iter().collect())
}
