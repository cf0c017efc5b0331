//! Each tier's rules as last written, and how two sets merge: tier by tier, the later write wins.
//!
//! A write replaces the rules of one tier (the config API's
//! `PUT /v1/limits/{tier}`), so the unit of convergence is the tier, not the
//! set: two writes to two tiers made on two nodes at the same moment touch
//! different entries, and the merge keeps both. Two writes to one tier
//! conflict, and every node keeps the same one of them: the higher version,
//! then the higher origin (the writing node's id), then the greater JSON of
//! the rules. Merging is per-tier maximum, so it is commutative,
//! associative and idempotent: nodes that have seen the same writes hold
//! the same set whatever order they saw them in.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::sync::{Arc, OnceLock};

use super::edit::{TierEdit, WriteStamp};
use super::Rule;

/// A tier as a set knows it: `None` for the rules that apply to any tier.
pub type TierKey = Option<String>;

/// One tier's rules as last written, and which write that was.
#[derive(Debug, Clone)]
pub struct TierWrite {
    /// The version the write took: above every version its writer held, so
    /// a write always outranks what its writer had seen.
    pub version: u64,
    /// The node that wrote it; empty for the rules a node started with.
    pub origin: Arc<str>,
    /// The rules as written. All of them are in force unless another
    /// tier's higher-ranked write uses one of their names (see
    /// `in_force`); they are kept here either way, so the merge is over
    /// writes and not over what each node made of them.
    pub rules: Vec<Arc<Rule>>,
    /// [`TierWrite::digest`], worked out once: peers compare digests of
    /// every tier on each anti-entropy pull.
    digest: Arc<OnceLock<u64>>,
    /// How this write was made from the tier's write before it, when it
    /// was: a peer holding that write is sent this instead of every rule.
    edit: Option<Arc<TierEdit>>,
}

/// Two writes are equal when they hold the same rules under the same
/// version and origin, whether or not either has worked out its digest.
impl PartialEq for TierWrite {
    fn eq(&self, other: &TierWrite) -> bool {
        (self.version, &self.origin, &self.rules) == (other.version, &other.origin, &other.rules)
    }
}

impl TierWrite {
    pub fn new(version: u64, origin: Arc<str>, rules: Vec<Arc<Rule>>) -> TierWrite {
        TierWrite {
            version,
            origin,
            rules,
            digest: Arc::default(),
            edit: None,
        }
    }

    /// A write that `edit` made of an earlier write of its tier.
    pub fn edited(
        version: u64,
        origin: Arc<str>,
        rules: Vec<Arc<Rule>>,
        edit: TierEdit,
    ) -> TierWrite {
        TierWrite {
            edit: Some(Arc::new(edit)),
            ..TierWrite::new(version, origin, rules)
        }
    }

    /// How this write was made from the tier's write before it, if it was
    /// an edit of one.
    pub fn edit(&self) -> Option<&TierEdit> {
        self.edit.as_deref()
    }

    /// A 64-bit FNV-1a hash of the rules' JSON, the same on every node
    /// and build: two nodes whose writes of a tier have the same version,
    /// origin and digest hold the same rules, so a pull need not carry
    /// them. Two start files at one version share version and origin
    /// (none) and differ only here.
    pub fn digest(&self) -> u64 {
        *self.digest.get_or_init(|| digest_of(&self.rules))
    }

    /// This write's stamp: which write it is, as an edit names its base.
    pub fn stamp(&self) -> WriteStamp {
        WriteStamp {
            version: self.version,
            origin: self.origin.clone(),
            digest: self.digest(),
        }
    }

    /// The same write under another version (its digest stays: the rules
    /// are the same).
    pub(super) fn at_version(&self, version: u64) -> TierWrite {
        TierWrite {
            version,
            ..self.clone()
        }
    }

    /// The rules as the config API writes them: `{"rules":[...]}`.
    pub fn rules_json(&self) -> String {
        rules_json(&self.rules)
    }

    /// The order every node agrees on between two writes of one tier.
    pub fn rank(&self, other: &TierWrite) -> Ordering {
        (self.version, &*self.origin)
            .cmp(&(other.version, &*other.origin))
            // Same version from the same origin only after a node lost its
            // state and wrote again; the text still decides the same way everywhere.
            .then_with(|| self.rules_json().cmp(&other.rules_json()))
    }
}

/// `{"rules":[...]}` for `rules`, written rule by rule: built as one
/// `serde_json::Value` first, the JSON of a tier of 100,000 rules took
/// over 60 MB of maps for 10 MB of text, for every digest and every push.
pub fn rules_json(rules: &[Arc<Rule>]) -> String {
    let mut out = Vec::with_capacity(rules.len() * 128 + 16);
    write_rules_json(rules, &mut out);
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// The FNV-1a hash of [`rules_json`], hashed as it is written.
pub fn digest_of(rules: &[Arc<Rule>]) -> u64 {
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    write_rules_json(rules, &mut h);
    h.0
}

/// Writes the bytes `serde_json` writes for `{"rules": [each to_json]}`.
fn write_rules_json(rules: &[Arc<Rule>], out: &mut impl Write) {
    // Neither sink fails: a Vec grows, a hash takes anything.
    let _ = out.write_all(b"{\"rules\":[");
    for (i, r) in rules.iter().enumerate() {
        if i > 0 {
            let _ = out.write_all(b",");
        }
        let _ = r.write_json(&mut *out);
    }
    let _ = out.write_all(b"]}");
}

/// 64-bit FNV-1a over the bytes written to it.
struct Fnv(u64);

impl Write for Fnv {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

pub(super) type Writes = BTreeMap<TierKey, TierWrite>;

/// Each tier's digest ([`TierWrite::digest`]).
pub type TierDigests = BTreeMap<TierKey, u64>;

/// Per tier, the higher-ranked of the two writes. None when `theirs` holds
/// no write that outranks one of `ours` (merging would change nothing).
pub(super) fn merge(ours: &Writes, theirs: &Writes) -> Option<Writes> {
    let mut merged = ours.clone();
    let mut changed = false;
    for (tier, w) in theirs {
        let wins = merged
            .get(tier)
            .is_none_or(|mine| w.rank(mine) == Ordering::Greater);
        if wins {
            merged.insert(tier.clone(), w.clone());
            changed = true;
        }
    }
    changed.then_some(merged)
}

/// The rules in force for `writes`, in tier order. Rule names are unique
/// in a set, and each node refuses a write that reuses a name in force;
/// but two nodes can each accept one name into a different tier at the
/// same moment. Then the rule of the higher-ranked tier write is in force
/// and the other is not, the same choice on every node. Each tier's own
/// rules were validated alone, and ties are only possible within a tier,
/// so what is left is a valid set.
pub(super) fn in_force(writes: &Writes) -> Vec<Arc<Rule>> {
    let mut by_rank: Vec<(&TierKey, &TierWrite)> = writes.iter().collect();
    by_rank.sort_by(|a, b| b.1.rank(a.1).then_with(|| a.0.cmp(b.0)));
    let mut holder: HashMap<&str, &TierKey> = HashMap::new();
    for (tier, w) in by_rank {
        for r in &w.rules {
            holder.entry(&r.name).or_insert(tier);
        }
    }
    writes
        .iter()
        .flat_map(|(tier, w)| {
            let holder = &holder;
            w.rules
                .iter()
                .filter(move |r| holder.get(&*r.name) == Some(&tier))
        })
        .cloned()
        .collect()
}

/// `rules` grouped by tier, every group one write at `version` by `origin`.
pub(super) fn group(rules: &[Arc<Rule>], version: u64, origin: &Arc<str>) -> Writes {
    let mut writes = Writes::new();
    for r in rules {
        writes
            .entry(r.tier.clone())
            .or_insert_with(|| TierWrite::new(version, origin.clone(), Vec::new()))
            .rules
            .push(r.clone());
    }
    writes
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::RuleSet;
    use super::*;

    fn rules(tier: Option<&str>, names: &[&str], limit: u64) -> Vec<Rule> {
        let list: Vec<String> = names
            .iter()
            .map(|n| {
                format!(r#"{{"name":"{n}","algorithm":"fixed_window","limit":{limit},"window":"1s","client":"{n}"}}"#)
            })
            .collect();
        RuleSet::parse_tier_json(tier, &format!(r#"{{"rules":[{}]}}"#, list.join(","))).unwrap()
    }

    /// `base` with one tier written at the next version by `origin`.
    fn write(
        base: &RuleSet,
        tier: Option<&str>,
        names: &[&str],
        limit: u64,
        origin: &str,
    ) -> RuleSet {
        let v = base.next_version().unwrap();
        base.with_tier(tier, rules(tier, names, limit), v)
            .unwrap()
            .signed(origin, base.version())
    }

    fn in_force(s: &RuleSet) -> Vec<(Option<String>, String, u64)> {
        s.rules()
            .iter()
            .map(|r| (r.tier.clone(), r.name.to_string(), r.limit))
            .collect()
    }

    fn merged(a: &RuleSet, b: &RuleSet) -> RuleSet {
        a.merge(b).unwrap().unwrap_or_else(|| a.clone())
    }

    #[test]
    fn writes_to_two_tiers_on_two_nodes_at_once_both_stay() {
        let start = RuleSet::empty();
        let a = write(&start, Some("free"), &["free-1"], 5, "node-a");
        let b = write(&start, Some("pro"), &["pro-1"], 50, "node-b");
        assert_eq!(a.version(), b.version(), "both built on the same version");
        let (ab, ba) = (merged(&a, &b), merged(&b, &a));
        assert_eq!(in_force(&ab), in_force(&ba));
        assert_eq!(ab.tier(Some("free")).count(), 1);
        assert_eq!(ab.tier(Some("pro")).count(), 1);
        assert_eq!(ab.tier_version(Some("free")), 1);
        assert_eq!(ab.tier_version(Some("pro")), 1);
        assert!(
            ab.merge(&a).unwrap().is_none(),
            "nothing newer the second time"
        );
    }

    #[test]
    fn two_writes_to_one_tier_keep_the_higher_version_then_the_higher_origin() {
        let start = RuleSet::empty();
        let a = write(&start, Some("free"), &["f"], 5, "node-a");
        let b = write(&start, Some("free"), &["f"], 7, "node-b");
        assert_eq!(in_force(&merged(&a, &b)), in_force(&merged(&b, &a)));
        assert_eq!(
            merged(&a, &b).rules()[0].limit,
            7,
            "same version: node-b > node-a"
        );
        let later = write(&a, Some("free"), &["f"], 9, "node-a");
        assert_eq!(
            merged(&b, &later).rules()[0].limit,
            9,
            "a later version wins"
        );
        assert_eq!(merged(&later, &b).rules()[0].limit, 9);
    }

    #[test]
    fn one_name_written_into_two_tiers_at_once_is_in_force_once_the_same_everywhere() {
        let start = RuleSet::empty();
        let a = write(&start, Some("free"), &["shared", "free-own"], 5, "node-a");
        let b = write(&start, Some("pro"), &["shared"], 50, "node-b");
        let (ab, ba) = (merged(&a, &b), merged(&b, &a));
        assert_eq!(in_force(&ab), in_force(&ba));
        // node-b's write ranks higher at the same version: its rule holds the name.
        let shared: Vec<_> = ab.rules().iter().filter(|r| &*r.name == "shared").collect();
        assert_eq!(shared.len(), 1);
        assert_eq!(shared[0].tier.as_deref(), Some("pro"));
        assert_eq!(ab.displaced().len(), 1, "free's copy is kept, out of force");
        assert!(
            ab.get("free-own").is_some(),
            "the rest of free's write is in force"
        );
        // The clash held out of force does not block other writes.
        let gold = write(&ab, Some("gold"), &["gold-own"], 1, "node-a");
        assert!(gold.get("gold-own").is_some());
        // Once pro is rewritten without it, free's rule comes back.
        let c = write(&ab, Some("pro"), &["pro-own"], 50, "node-b");
        assert_eq!(c.get("shared").unwrap().1.tier.as_deref(), Some("free"));
    }

    /// The JSON written rule by rule is the text a whole `Value` gave,
    /// byte for byte, so digests and ranks are what they were.
    #[test]
    fn tier_json_written_rule_by_rule_is_the_whole_value_text() {
        let shared: Vec<Arc<Rule>> = rules(Some("free"), &["a", "b", "c"], 5)
            .into_iter()
            .map(Arc::new)
            .collect();
        let whole = serde_json::json!({
            "rules": shared.iter().map(|r| r.to_json()).collect::<Vec<_>>(),
        })
        .to_string();
        assert_eq!(rules_json(&shared), whole);
        assert_eq!(rules_json(&[]), r#"{"rules":[]}"#);
        let fnv = whole.bytes().fold(0xcbf2_9ce4_8422_2325, |h: u64, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        assert_eq!(digest_of(&shared), fnv);
    }

    /// Every optional field and a name, client and route that need
    /// escaping: a rule's JSON written directly is its `Value`'s text.
    #[test]
    fn a_rule_written_directly_is_its_values_text() {
        let set = RuleSet::from_toml(
            r#"
[[rule]]
name = "tenant.7:a_b-c"
tier = "free \"t\""
client = "c \"q\" / ü"
route = "GET /a/*"
algorithm = "token_bucket"
limit = 10
burst = 20
window = "90s"
shadow = true
hot = "shard"
shards = 4

[[rule]]
name = "queued"
by = "ip"
algorithm = "leaky_bucket"
limit = 5
queue = 3
window = "1m"
scope = "global"

[[rule]]
name = "local"
algorithm = "sliding_window_counter"
limit = 7
window = "1h30m"
hot = "local"
"#,
        )
        .unwrap();
        assert_eq!(set.written_len(), 3);
        for r in set.written() {
            let mut direct = Vec::new();
            r.write_json(&mut direct).unwrap();
            assert_eq!(String::from_utf8(direct).unwrap(), r.to_json().to_string());
        }
    }

    #[test]
    fn a_write_needs_a_version_above_the_tier_it_replaces() {
        let a = write(&RuleSet::empty(), Some("free"), &["f"], 5, "node-a");
        let again = a.with_tier(Some("free"), rules(Some("free"), &["f"], 6), 1);
        assert!(again.is_err());
    }

    #[test]
    fn tier_changes_name_only_the_tiers_that_differ() {
        let a = write(&RuleSet::empty(), Some("free"), &["f"], 5, "");
        let a = write(&a, Some("pro"), &["p"], 5, "");
        let b = write(&a, Some("pro"), &["p"], 6, "");
        let changes = a.tier_changes(&b);
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].0.as_deref(), Some("pro"));
        let gone = a.tier_changes(&RuleSet::empty());
        assert_eq!(gone.len(), 2, "a tier missing from the next set is emptied");
        assert!(gone.iter().all(|(_, r)| r.is_empty()));
    }

    #[test]
    fn changes_since_a_sets_digests_name_only_the_tiers_that_differ() {
        let a = write(&RuleSet::empty(), Some("free"), &["f"], 5, "");
        let a = write(&a, Some("pro"), &["p"], 5, "");
        let b = write(&a, Some("pro"), &["p"], 6, "");
        let changes = b.changes_since(&a.tier_digests());
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].0.as_deref(), Some("pro"));
        assert_eq!(changes[0].1[0].limit, 6);
        assert!(a.changes_since(&a.tier_digests()).is_empty());
        let gone = RuleSet::empty().changes_since(&a.tier_digests());
        assert_eq!(gone.len(), 2, "a tier missing from the next set is emptied");
        assert!(gone.iter().all(|(_, r)| r.is_empty()));
    }

    /// A write over a tier that has one is an edit of it, which rebuilds
    /// it from that write; a tier's first write is not.
    #[test]
    fn a_write_over_a_tier_is_an_edit_of_its_last_write() {
        let a = write(&RuleSet::empty(), Some("free"), &["f", "g"], 5, "node-a");
        assert!(a.tier_write(Some("free")).unwrap().edit().is_none());
        let v = a.next_version().unwrap();
        let mut changed = rules(Some("free"), &["f"], 5);
        changed.extend(rules(Some("free"), &["g"], 6));
        let b = a.with_tier(Some("free"), changed, v).unwrap();
        let (before, after) = (
            a.tier_write(Some("free")).unwrap(),
            b.tier_write(Some("free")).unwrap(),
        );
        let edit = after.edit().expect("an edit");
        assert_eq!(edit.base, before.stamp());
        assert_eq!(edit.placed.len(), 1);
        assert_eq!(edit.apply(before).as_deref(), Some(&after.rules[..]));
        assert!(Arc::ptr_eq(&after.rules[0], &before.rules[0]));
    }

    /// One write: which tier, which names (from a small pool, so names clash
    /// across tiers), which node.
    fn arb_write(
    ) -> impl Strategy<Value = (Option<&'static str>, Vec<&'static str>, u64, &'static str)> {
        (
            prop::sample::select(vec![None, Some("free"), Some("pro")]),
            prop::sample::subsequence(vec!["a", "b", "c"], 0..=3),
            1u64..5,
            prop::sample::select(vec!["node-a", "node-b", "node-c"]),
        )
    }

    proptest! {
        /// Nodes that saw the same writes hold the same rules, whatever
        /// order the writes reached them in.
        #[test]
        fn merging_is_order_free(writes in prop::collection::vec((arb_write(), 0usize..3), 1..8)) {
            let mut nodes = [RuleSet::empty(), RuleSet::empty(), RuleSet::empty()];
            let mut made = Vec::new();
            for ((tier, names, limit, origin), at) in writes {
                // A write a node's own set refuses (a name in force
                // elsewhere) is refused there, as the API would.
                let v = nodes[at].next_version().unwrap();
                if let Ok(s) = nodes[at].with_tier(tier, rules(tier, &names, limit), v) {
                    let s = s.signed(origin, nodes[at].version());
                    nodes[at] = s.clone();
                    made.push(s);
                }
            }
            let forward = made.iter().fold(RuleSet::empty(), |acc, s| merged(&acc, s));
            let backward = made.iter().rev().fold(RuleSet::empty(), |acc, s| merged(&acc, s));
            prop_assert_eq!(in_force(&forward), in_force(&backward));
            prop_assert_eq!(forward.version(), backward.version());
            prop_assert!(forward.merge(&forward).unwrap().is_none(), "merging a set with itself changes nothing");
        }
    }
}
