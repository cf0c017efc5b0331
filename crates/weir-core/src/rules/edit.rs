//! One tier's write as an edit of the write before it: what a peer that holds that write needs to rebuild this one, the rules that changed instead of the whole tier.
//!
//! A rules file of 100,000 rules in one tier, edited to change one limit,
//! is one write of the whole tier; sent whole to each peer it was about
//! 10 MB of JSON to write, send, parse and index. Sent as an edit it is
//! the one changed rule and its position.
//!
//! An edit keeps the base's rules that the new list holds unchanged and
//! in the same order, and places every other rule of the new list at its
//! position; so the rebuilt list is the new list, order included, and has
//! its digest. The receiver checks that digest: a base it does not hold,
//! or a rebuild that came out different, leaves the tier to be sent whole.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::tiers::TierWrite;
use super::Rule;
use crate::determinism::HashState;

/// Which write of a tier: its version, its origin and the digest of its
/// rules (two start files at one version differ only there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteStamp {
    pub version: u64,
    pub origin: Arc<str>,
    pub digest: u64,
}

/// How one write of a tier was made from the write before it.
#[derive(Debug, Clone, PartialEq)]
pub struct TierEdit {
    /// The write edited.
    pub base: WriteStamp,
    /// How many rules the tier holds after the edit.
    pub len: usize,
    /// The base's rules not kept as they were: removed, changed or moved.
    pub dropped: Vec<Arc<str>>,
    /// Every rule of the new list not kept from the base, with its
    /// position in the new list, in order.
    pub placed: Vec<(usize, Arc<Rule>)>,
}

impl TierEdit {
    /// The edit that turns `base`'s rules into `next`, and `next` with
    /// each rule kept from the base as the base's own `Arc`: the set that
    /// takes the write then shares those rules with the set it replaces
    /// instead of holding a second copy of each.
    ///
    /// A rule is kept when the base holds an equal rule of its name after
    /// the last one kept (one pass: a rule moved before others kept is
    /// placed anew, so the kept ones stay in the base's order).
    pub fn between(base: &TierWrite, next: Vec<Arc<Rule>>) -> (TierEdit, Vec<Arc<Rule>>) {
        let mut position: HashMap<&str, usize, HashState> = HashMap::default();
        position.reserve(base.rules.len());
        for (i, r) in base.rules.iter().enumerate() {
            position.insert(&r.name, i);
        }
        let mut kept = vec![false; base.rules.len()];
        let mut after = None;
        let mut placed = Vec::new();
        let mut rules = Vec::with_capacity(next.len());
        for (j, r) in next.into_iter().enumerate() {
            let same = position
                .get(&*r.name)
                .copied()
                .filter(|&i| after.is_none_or(|a| i > a) && base.rules[i] == r);
            match same {
                Some(i) => {
                    kept[i] = true;
                    after = Some(i);
                    rules.push(base.rules[i].clone());
                }
                None => {
                    placed.push((j, r.clone()));
                    rules.push(r);
                }
            }
        }
        let dropped = base
            .rules
            .iter()
            .zip(&kept)
            .filter(|(_, kept)| !**kept)
            .map(|(r, _)| r.name.clone())
            .collect();
        let edit = TierEdit {
            base: base.stamp(),
            len: rules.len(),
            dropped,
            placed,
        };
        (edit, rules)
    }

    /// Whether sending this edit beats sending the whole tier: it places
    /// fewer than half the tier's rules.
    pub fn is_small(&self) -> bool {
        self.placed.len() * 2 < self.len
    }

    /// The edited list, rebuilt from `base`; None when `base` is not the
    /// write this edit was made from or the edit does not fit it.
    pub fn apply(&self, base: &TierWrite) -> Option<Vec<Arc<Rule>>> {
        if (base.version, &base.origin) != (self.base.version, &self.base.origin)
            || base.digest() != self.base.digest
        {
            return None;
        }
        // A list longer than the base and the placed rules together cannot
        // come of them; refused before anything is sized by it.
        if self.len > base.rules.len() + self.placed.len() {
            return None;
        }
        let dropped: HashSet<&str, HashState> = self.dropped.iter().map(|n| &**n).collect();
        let mut kept = base.rules.iter().filter(|r| !dropped.contains(&*r.name));
        let mut placed = self.placed.iter().peekable();
        let mut rules = Vec::with_capacity(self.len);
        for j in 0..self.len {
            match placed.next_if(|(at, _)| *at == j) {
                Some((_, r)) => rules.push(r.clone()),
                None => rules.push(kept.next()?.clone()),
            }
        }
        (kept.next().is_none() && placed.next().is_none()).then_some(rules)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::RuleSet;
    use super::*;

    /// Rules named `r<n>` keyed on client `c<n>`, each with its limit.
    fn rules(named: &[(u8, u64)]) -> Vec<Arc<Rule>> {
        let list: Vec<String> = named
            .iter()
            .map(|(n, limit)| {
                format!(r#"{{"name":"r{n}","client":"c{n}","algorithm":"fixed_window","limit":{limit},"window":"1s"}}"#)
            })
            .collect();
        let body = format!(r#"{{"rules":[{}]}}"#, list.join(","));
        RuleSet::parse_tier_json(None, &body)
            .unwrap()
            .into_iter()
            .map(Arc::new)
            .collect()
    }

    fn write(named: &[(u8, u64)]) -> TierWrite {
        TierWrite::new(3, Arc::from("node-a"), rules(named))
    }

    #[test]
    fn one_changed_limit_places_one_rule_and_keeps_the_rest_shared() {
        let base = write(&[(1, 5), (2, 5), (3, 5), (4, 5)]);
        let (edit, next) = TierEdit::between(&base, rules(&[(1, 5), (2, 9), (3, 5), (4, 5)]));
        assert_eq!(edit.placed.len(), 1);
        assert_eq!(edit.placed[0].0, 1);
        assert_eq!(&*edit.dropped, [Arc::from("r2")]);
        assert!(edit.is_small());
        assert!(
            Arc::ptr_eq(&next[0], &base.rules[0]),
            "kept rules are the base's"
        );
        assert!(!Arc::ptr_eq(&next[1], &base.rules[1]));
        assert_eq!(edit.apply(&base).unwrap(), next);
    }

    /// Guard: an edit is applied only to the write it was made from.
    #[test]
    fn an_edit_fits_only_its_base() {
        let base = write(&[(1, 5), (2, 5)]);
        let (edit, _) = TierEdit::between(&base, rules(&[(1, 5), (2, 6)]));
        let other_rules = TierWrite::new(3, Arc::from("node-a"), rules(&[(1, 5), (2, 7)]));
        assert_eq!(edit.apply(&other_rules), None, "same stamp, other digest");
        let other_origin = TierWrite::new(3, Arc::from("node-b"), base.rules.clone());
        assert_eq!(edit.apply(&other_origin), None);
        let other_version = TierWrite::new(4, Arc::from("node-a"), base.rules.clone());
        assert_eq!(edit.apply(&other_version), None);
    }

    proptest! {
        /// Whatever the edit (rules added, removed, changed, moved), the
        /// base and the edit give back the new list, order included.
        #[test]
        fn applying_an_edit_to_its_base_gives_the_new_list(
            before in prop::collection::vec((0u8..12, 1u64..4), 0..10),
            after in prop::collection::vec((0u8..12, 1u64..4), 0..10),
        ) {
            let dedup = |v: Vec<(u8, u64)>| {
                let mut seen = HashSet::new();
                v.into_iter().filter(|(n, _)| seen.insert(*n)).collect::<Vec<_>>()
            };
            let (before, after) = (dedup(before), dedup(after));
            let base = write(&before);
            let (edit, next) = TierEdit::between(&base, rules(&after));
            prop_assert_eq!(&next, &rules(&after));
            prop_assert_eq!(edit.apply(&base), Some(next));
        }
    }
}
