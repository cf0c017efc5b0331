//! Rule selection: the most specific matching rule of each `by` dimension.
//!
//! Precedence: client+route > client > tier+route > tier > route
//! alone > global default. Within a rank an exact route beats a wildcard, a
//! pattern pinning more characters beats one pinning fewer, and a rule naming
//! a tier beats one that does not. Rules still tied are refused at load.

use std::collections::HashMap;
use std::sync::Arc;

use compact_str::CompactString;

use super::{By, Rule, RuleError};
use crate::determinism::HashState;

/// The request attributes selection looks at, already validated.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// The caller key (client id).
    pub key: &'a str,
    pub route: &'a str,
    pub tier: Option<&'a str>,
    /// Canonical text of the caller's IP, when known.
    pub ip: Option<&'a str>,
}

/// One limit a request meets: the rule (by position in its set) and the
/// attribute value its counter is keyed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Selected<'s> {
    pub rule: usize,
    pub hash_part: &'s str,
}

/// At most one enforcing and one shadow winner per dimension, in the order
/// client, IP, client shadow, IP shadow. Shadow rules are chosen apart from
/// enforcing ones, so dark-launching a more specific rule leaves the rule in
/// force today enforcing while the new one is only counted.
///
/// The winners sit first, in that order, and the caller key and the IP are
/// held once each, only when a winner is keyed on them. A batch moves each
/// selection several times, and at 128 bytes (a slot per dimension, the
/// key copied into each) every move was a call to memcpy.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    winners: [Winner; 4],
    len: u8,
    key: CompactString,
    ip: CompactString,
}

/// A winner in one word: its rule's position in the set shifted left once,
/// the low bit set when its counter is keyed on the IP (a position is
/// below `isize::MAX`, so the shift loses nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Winner(usize);

impl Selection {
    pub fn iter(&self) -> impl Iterator<Item = Selected<'_>> {
        self.winners[..self.len()].iter().map(|w| Selected {
            rule: w.0 >> 1,
            hash_part: if w.0 & 1 == 1 { &self.ip } else { &self.key },
        })
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Adds `rule` as the next winner, its counter keyed on `value`: the
    /// IP when `on_ip`, else the caller key.
    fn push(&mut self, rule: usize, on_ip: bool, value: &str) {
        let held = if on_ip { &mut self.ip } else { &mut self.key };
        if held.is_empty() {
            *held = CompactString::new(value);
        }
        self.winners[self.len()] = Winner(rule << 1 | usize::from(on_ip));
        self.len += 1;
    }
}

/// Two selections are equal when they name the same limits on the same
/// counters, whatever else they hold.
impl PartialEq for Selection {
    fn eq(&self, other: &Selection) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Selection {}

/// Orders rules of one dimension; larger is more specific.
type Score = (u8, bool, usize, bool);

fn score(r: &Rule) -> Score {
    let rank = match (r.client.is_some(), r.tier.is_some(), r.route.is_some()) {
        (true, _, true) => 5,
        (true, _, false) => 4,
        (false, true, true) => 3,
        (false, true, false) => 2,
        (false, false, true) => 1,
        (false, false, false) => 0,
    };
    let exact = r.route.as_ref().is_some_and(|p| p.is_exact());
    let len = r.route.as_ref().map_or(0, |p| p.literal_len());
    (rank, exact, len, r.tier.is_some())
}

fn matches(r: &Rule, s: &Subject<'_>) -> bool {
    r.tier.as_deref().is_none_or(|t| s.tier == Some(t))
        && r.client.as_deref().is_none_or(|c| c == s.key)
        && r.route.as_ref().is_none_or(|p| p.matches(s.route))
        && (r.by == By::Client || s.ip.is_some())
}

/// Rule positions under a text key (a client id, a route, a tier).
type Table<V> = HashMap<Box<str>, V, HashState>;

/// The tier key of a rule or a request in the index: a tier's name, or
/// the empty text for none (a tier name is never empty, so they never meet).
fn tier_key(tier: Option<&str>) -> &str {
    tier.unwrap_or("")
}

/// Candidates by client id, and the general rules by tier and exact route,
/// so what a request costs to select does not grow with the rules it cannot
/// match: a set of a hundred thousand per-tenant routes costs a request
/// two lookups, its tier's and the any-tier exact route, plus the rules
/// with a pattern (or no route) of those two tiers.
#[derive(Debug, Clone, Default)]
pub(super) struct Index {
    by_client: Table<Vec<usize>>,
    /// General rules with an exact route: by tier key, then by route.
    exact: Table<Table<Vec<usize>>>,
    /// General rules with a wildcard route or none, by tier key.
    patterns: Table<Vec<usize>>,
    scores: Vec<Score>,
    /// Every rule's position by name, sub-counters included.
    by_name: Table<usize>,
}

impl Index {
    pub(super) fn build(rules: &[Arc<Rule>]) -> Index {
        let mut ix = Index::default();
        ix.scores.reserve(rules.len());
        for (i, r) in rules.iter().enumerate() {
            ix.scores.push(score(r));
            ix.by_name.insert(Box::from(&*r.name), i);
            // A sharded rule's sub-counters are chosen by the cluster, never
            // by a request.
            if r.shard_of.is_some() {
                continue;
            }
            let tier = Box::from(tier_key(r.tier.as_deref()));
            match (&r.client, &r.route) {
                (Some(c), _) => ix.by_client.entry(c.as_str().into()).or_default().push(i),
                (None, Some(p)) if p.is_exact() => ix
                    .exact
                    .entry(tier)
                    .or_default()
                    .entry(p.as_str().into())
                    .or_default()
                    .push(i),
                (None, _) => ix.patterns.entry(tier).or_default().push(i),
            }
        }
        ix
    }

    /// The position of the rule called `name`.
    pub(super) fn position(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    pub(super) fn select(
        &self,
        rules: &[Arc<Rule>],
        s: &Subject<'_>,
        memo: Option<&mut SelectMemo>,
    ) -> Selection {
        let search = || {
            let mut best = [None; 4];
            // The request's tier, then the rules for any tier (when the
            // request names one; else they are the same key).
            let tiers = [Some(tier_key(s.tier)), s.tier.map(|_| "")];
            for tier in tiers.into_iter().flatten() {
                if let Some(own) = self.exact.get(tier).and_then(|t| t.get(s.route)) {
                    self.weigh(&mut best, rules, own, s);
                }
                if let Some(own) = self.patterns.get(tier) {
                    self.weigh(&mut best, rules, own, s);
                }
            }
            best
        };
        // A lone request keeps no memo: noting what it saw (a copy of its
        // route) would be work no later request reads.
        let mut best = match memo {
            Some(memo) => memo.general(s, search),
            None => search(),
        };
        // A client's own rules always outrank the general ones (rank 4 or
        // 5 against at most 3), so weighing them after the general winners
        // picks what weighing them first would.
        if let Some(own) = self.by_client.get(s.key) {
            self.weigh(&mut best, rules, own, s);
        }
        // Client, IP, client shadow, IP shadow; an IP rule without an IP
        // to key it on applies to nobody.
        let mut sel = Selection::default();
        for (slot, on_ip) in best.iter().zip([false, true, false, true]) {
            let value = if on_ip { s.ip } else { Some(s.key) };
            if let (Some((_, rule)), Some(value)) = (slot, value) {
                sel.push(*rule, on_ip, value);
            }
        }
        sel
    }

    /// Puts each matching rule of `candidates` in its slot of `best` when
    /// it is more specific than the slot's rule.
    fn weigh(&self, best: &mut Best, rules: &[Arc<Rule>], candidates: &[usize], s: &Subject<'_>) {
        for &i in candidates {
            let r = &rules[i];
            if !matches(r, s) {
                continue;
            }
            let slot = &mut best[usize::from(r.by == By::Ip) + 2 * usize::from(r.shadow)];
            if slot.is_none_or(|(sc, _)| self.scores[i] > sc) {
                *slot = Some((self.scores[i], i));
            }
        }
    }
}

/// The winning rule of each slot, with its score.
type Best = [Option<(Score, usize)>; 4];

/// The general rules' winners for the last route, tier and IP presence
/// selected with it. Nothing else of a request decides among rules that
/// name no client, and a batch's items mostly share a route, so all but
/// the first skip the search over every general rule. Valid for one rule
/// set only: make a new one for each.
#[derive(Debug, Default)]
pub(crate) struct SelectMemo {
    last: Option<(Seen, Best)>,
}

/// What the general rules' winners depend on.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    route: CompactString,
    tier: Option<CompactString>,
    has_ip: bool,
}

impl Seen {
    fn is_on(&self, route: &str, tier: Option<&str>) -> bool {
        self.route == route && self.tier.as_deref() == tier
    }
}

impl SelectMemo {
    /// True when `route` and `tier` are those of the last subject selected
    /// for. A subject is selected for only once its request has passed
    /// validation (`select_in` validates first), so they are known valid.
    pub(crate) fn vouches_for(&self, route: &str, tier: Option<&str>) -> bool {
        self.last
            .as_ref()
            .is_some_and(|(seen, _)| seen.is_on(route, tier))
    }

    fn general(&mut self, s: &Subject<'_>, search: impl FnOnce() -> Best) -> Best {
        match &self.last {
            Some((seen, best)) if seen.is_on(s.route, s.tier) && seen.has_ip == s.ip.is_some() => {
                *best
            }
            _ => {
                let best = search();
                let seen = Seen {
                    route: s.route.into(),
                    tier: s.tier.map(CompactString::from),
                    has_ip: s.ip.is_some(),
                };
                self.last = Some((seen, best));
                best
            }
        }
    }
}

/// Refuses two rules that would win the same request at the same precedence:
/// which one applied would depend on file order.
///
/// Only rules alike in every part of their precedence (dimension, shadow,
/// score, client, tier) can tie, so the rules are grouped by that first,
/// in one pass. Within a group every route is exact, or every one a
/// pattern, or none is given (exactness is part of the score): exact
/// routes tie when equal (a set lookup), rules without a route always
/// tie, and patterns are compared only where they can overlap
/// ([`pattern_ties`]). A set of n per-tenant routes is checked in
/// O(n log n), not by comparing every pair.
pub(super) fn refuse_ties(rules: &[Arc<Rule>]) -> Result<(), RuleError> {
    type Group = (By, bool, Score, Option<String>, Option<String>);
    let mut groups: HashMap<Group, Vec<usize>, HashState> = HashMap::default();
    for (i, r) in rules.iter().enumerate() {
        if r.shard_of.is_some() {
            continue;
        }
        let key = (r.by, r.shadow, score(r), r.client.clone(), r.tier.clone());
        groups.entry(key).or_default().push(i);
    }
    // The tie reported is the one of the earliest rule to tie with an
    // earlier one, as a reader going down the file meets it.
    let mut first: Option<(usize, usize)> = None;
    for members in groups.values() {
        let found = match &rules[members[0]].route {
            None => (members.len() > 1).then(|| (members[1], members[0])),
            Some(p) if p.is_exact() => exact_ties(rules, members),
            Some(_) => pattern_ties(rules, members),
        };
        if let Some(pair) = found {
            first = Some(first.map_or(pair, |f| f.min(pair)));
        }
    }
    match first {
        None => Ok(()),
        Some((b, a)) => Err(RuleError {
            rule: rules[b].name.to_string(),
            field: "route".into(),
            reason: format!(
                "ties with rule \"{}\": both match the same requests at the same precedence",
                rules[a].name
            ),
        }),
    }
}

/// The first rule of `members` (positions in file order) whose exact route
/// an earlier one has, with that earlier one.
fn exact_ties(rules: &[Arc<Rule>], members: &[usize]) -> Option<(usize, usize)> {
    let mut seen: HashMap<&str, usize, HashState> = HashMap::default();
    for &b in members {
        let route = rules[b].route.as_ref().map_or("", |p| p.as_str());
        if let Some(&a) = seen.get(route) {
            return Some((b, a));
        }
        seen.insert(route, b);
    }
    None
}

/// Two patterns of `members` that some route matches both, as (later,
/// earlier) in file order. A route both match begins with both literal
/// prefixes (up to the first `*`), so one prefix begins the other: in
/// prefix order, each pattern is compared only with the chain of earlier
/// ones whose prefix begins its own, and of those only with the ones whose
/// literal suffix agrees with its own the same way, before the full test.
fn pattern_ties(rules: &[Arc<Rule>], members: &[usize]) -> Option<(usize, usize)> {
    let text = |i: usize| rules[i].route.as_ref().map_or("", |p| p.as_str());
    let prefix = |i: usize| text(i).split('*').next().unwrap_or("");
    let suffix = |i: usize| text(i).rsplit('*').next().unwrap_or("");
    let mut sorted = members.to_vec();
    sorted.sort_by(|&a, &b| prefix(a).cmp(prefix(b)).then(a.cmp(&b)));
    let mut chain: Vec<usize> = Vec::new();
    let mut found: Option<(usize, usize)> = None;
    for &c in &sorted {
        while chain
            .last()
            .is_some_and(|&top| !prefix(c).starts_with(prefix(top)))
        {
            chain.pop();
        }
        for &o in &chain {
            let (sc, so) = (suffix(c), suffix(o));
            if !(sc.ends_with(so) || so.ends_with(sc)) {
                continue;
            }
            let (pc, po) = (rules[c].route.as_ref(), rules[o].route.as_ref());
            if pc.zip(po).is_some_and(|(x, y)| x.overlaps(y)) {
                let pair = (c.max(o), c.min(o));
                found = Some(found.map_or(pair, |f| f.min(pair)));
            }
        }
        chain.push(c);
    }
    found
}

#[cfg(test)]
mod tests;
