//! What travels for a write: one changed rule of a large tier as an edit, whole tiers to a peer that lacks the edit's base.

use prost::Message;
use weir_core::RuleSet;

use super::*;

const RULES: usize = 1_000;

/// One rule per tenant route; tenant 7's limit is `limit7`.
fn file(limit7: u64) -> RuleSet {
    let mut text = String::new();
    for i in 0..RULES {
        let limit = if i == 7 { limit7 } else { 1_000 };
        text.push_str(&format!(
            "[[rule]]\nname = \"tenant-{i}\"\nroute = \"GET /t/{i}\"\n\
             algorithm = \"fixed_window\"\nlimit = {limit}\nwindow = \"1h\"\n"
        ));
    }
    RuleSet::from_toml(&text).unwrap()
}

/// `base` with its file rewritten to `limit7`, written by node-a as a
/// reload writes it.
fn edited(base: &RuleSet, limit7: u64) -> RuleSet {
    let changes = base.shared_tier_changes(&file(limit7));
    let v = base.next_version().unwrap();
    base.with_shared_tiers(changes, v)
        .unwrap()
        .signed("node-a", base.version())
}

fn limit7(set: &RuleSet) -> u64 {
    set.get("tenant-7").unwrap().1.limit
}

/// Guard: a one-rule edit of a large tier pushes that rule, not the
/// tier, and a peer holding the tier's write rebuilds the very write.
#[test]
fn a_one_rule_edit_of_a_large_tier_pushes_one_rule() {
    let base = file(500);
    let next = edited(&base, 600);
    let pushed = to_wire_since(&next, base.version());
    let whole = to_wire_whole_since(&next, base.version());
    assert_eq!(pushed.tiers.len(), 1);
    let tier = &pushed.tiers[0];
    assert!(tier.rules_json.is_empty(), "no whole tier");
    let edit = tier.edit.as_ref().expect("an edit");
    assert_eq!(
        (edit.positions.as_slice(), edit.dropped.len()),
        (&[7][..], 1)
    );
    let (small, large) = (pushed.encoded_len(), whole.encoded_len());
    assert!(small * 100 < large, "{small} bytes against {large} whole");

    let offered = from_wire(&pushed, &base).unwrap();
    assert!(!offered.unheld);
    let merged = base
        .merge_writes(&offered.writes)
        .unwrap()
        .expect("a change");
    assert_eq!(limit7(&merged), 600);
    assert_eq!(
        to_wire(&merged),
        to_wire(&next),
        "the same write everywhere"
    );
}

/// Guard: an edit reaching a peer that holds another write of the tier
/// takes nothing of it (nor its version), and the whole tier then does.
#[test]
fn an_edit_of_a_write_not_held_is_left_out_and_the_whole_tier_is_not() {
    let base = file(500);
    let next = edited(&base, 600);
    let elsewhere = file(499);
    let offered = from_wire(&to_wire_since(&next, base.version()), &elsewhere).unwrap();
    assert!(offered.unheld);
    assert_eq!(offered.writes.version(), 0, "no version without its write");
    assert!(elsewhere.merge_writes(&offered.writes).unwrap().is_none());

    let whole = from_wire(&to_wire_whole_since(&next, base.version()), &elsewhere).unwrap();
    assert!(!whole.unheld);
    assert_eq!(
        limit7(&elsewhere.merge_writes(&whole.writes).unwrap().unwrap()),
        600
    );
}

/// A push that comes after its write (by a pull) finds nothing missing.
#[test]
fn an_edit_of_a_write_already_held_is_nothing_missing() {
    let base = file(500);
    let next = edited(&base, 600);
    let offered = from_wire(&to_wire_since(&next, base.version()), &next).unwrap();
    assert!(!offered.unheld);
    assert!(next.merge_writes(&offered.writes).unwrap().is_none());
}

#[test]
fn a_pull_answer_is_an_edit_only_for_a_puller_that_holds_its_base() {
    let base = file(500);
    let next = edited(&base, 600);
    let answer = differing(&next, &stamps(&base));
    assert!(answer.tiers[0].edit.is_some());
    let answer = differing(&next, &stamps(&file(499)));
    assert!(answer.tiers[0].edit.is_none() && !answer.tiers[0].rules_json.is_empty());
    assert!(differing(&next, &stamps(&next)).tiers.is_empty());
}

/// Guard: a rebuild is checked against the sender's digest, and an edit
/// that does not fit its base is refused without sizing anything by it.
#[test]
fn an_edit_that_does_not_rebuild_the_senders_rules_is_left_out() {
    let base = file(500);
    let next = edited(&base, 600);
    let mut wrong_digest = to_wire_since(&next, base.version());
    wrong_digest.tiers[0].edit.as_mut().unwrap().digest ^= 1;
    assert!(from_wire(&wrong_digest, &base).unwrap().unheld);
    let mut too_long = to_wire_since(&next, base.version());
    too_long.tiers[0].edit.as_mut().unwrap().len = u64::MAX;
    assert!(from_wire(&too_long, &base).unwrap().unheld);
}

/// An edit that places most of a tier is no smaller: the tier goes whole.
#[test]
fn an_edit_that_places_most_rules_goes_whole() {
    let base = RuleSet::from_toml(
        "[[rule]]\nname = \"a\"\nroute = \"/a\"\nalgorithm = \"fixed_window\"\nlimit = 1\nwindow = \"1s\"\n",
    )
    .unwrap();
    let other = RuleSet::from_toml(
        "[[rule]]\nname = \"a\"\nroute = \"/a\"\nalgorithm = \"fixed_window\"\nlimit = 2\nwindow = \"1s\"\n",
    )
    .unwrap();
    let v = base.next_version().unwrap();
    let next = base
        .with_shared_tiers(base.shared_tier_changes(&other), v)
        .unwrap();
    let pushed = to_wire_since(&next, base.version());
    assert!(pushed.tiers[0].edit.is_none());
    assert!(!pushed.tiers[0].rules_json.is_empty());
}
