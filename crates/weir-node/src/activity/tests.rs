//! The per-second ring: what one second holds, and how much it keeps.

use std::sync::Arc;

use weir_cluster::summary::{ActivitySource, MAX_SUMMARY_SECONDS};

use super::{Activity, Totals};

fn totals(rules: &[(&str, [u64; 3])], fallback: u64) -> Totals {
    Totals {
        rules: rules.iter().map(|(r, t)| (Arc::from(*r), *t)).collect(),
        fallback_decisions: fallback,
        deny_cache_hits: 0,
        replica_decisions: None,
    }
}

#[test]
fn replica_decisions_are_counted_per_second_where_there_are_copies() {
    let a = Activity::default();
    let with = |n| Totals {
        replica_decisions: Some(n),
        ..totals(&[], 0)
    };
    a.record(1, with(4));
    a.record(2, with(9));
    a.record(3, totals(&[], 0));
    let s = a.recent(3);
    assert_eq!(s[0].replica_decisions, Some(4));
    assert_eq!(s[1].replica_decisions, Some(5));
    assert_eq!(
        s[2].replica_decisions, None,
        "no copies: not known, not zero"
    );
}

#[test]
fn a_second_holds_only_what_happened_in_it() {
    let a = Activity::default();
    a.record(100, totals(&[("r", [5, 1, 0])], 0));
    a.record(101, totals(&[("r", [7, 4, 0])], 3));
    let s = a.recent(10);
    assert_eq!(s.len(), 2);
    assert_eq!(
        (s[0].unix_s, s[0].rules[0].allowed, s[0].rules[0].denied),
        (100, 5, 1)
    );
    assert_eq!(
        (s[1].unix_s, s[1].rules[0].allowed, s[1].rules[0].denied),
        (101, 2, 3)
    );
    assert_eq!(s[1].fallback_decisions, 3);
}

#[test]
fn rules_without_checks_in_a_second_are_left_out() {
    let a = Activity::default();
    a.record(1, totals(&[("quiet", [0, 0, 0]), ("busy", [1, 0, 2])], 0));
    a.record(2, totals(&[("quiet", [0, 0, 0]), ("busy", [1, 0, 2])], 0));
    let s = a.recent(2);
    assert_eq!(s[0].rules.len(), 1);
    assert_eq!(s[0].rules[0].rule, "busy");
    assert_eq!(s[0].rules[0].shadow_denied, 2);
    assert!(s[1].rules.is_empty(), "nothing new in the second second");
}

#[test]
fn a_rule_put_back_is_not_counted_from_zero_again() {
    let a = Activity::default();
    a.record(1, totals(&[("r", [10, 0, 0])], 0));
    a.record(2, totals(&[], 0));
    a.record(3, totals(&[("r", [11, 0, 0])], 0));
    let s = a.recent(1);
    assert_eq!(s[0].rules[0].allowed, 1);
}

#[test]
fn the_ring_keeps_the_last_five_minutes_and_no_more() {
    let a = Activity::default();
    let max = u64::from(MAX_SUMMARY_SECONDS);
    for t in 0..max + 100 {
        a.record(t, totals(&[("r", [t, 0, 0])], 0));
    }
    let all = a.recent(u32::MAX);
    assert_eq!(all.len() as u64, max);
    assert_eq!(all[0].unix_s, 100, "the oldest were dropped");
    assert_eq!(
        a.recent(3).iter().map(|s| s.unix_s).collect::<Vec<_>>(),
        [max + 97, max + 98, max + 99]
    );
}
