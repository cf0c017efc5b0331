//! Counting and the exposition's names, without a node.

use std::sync::Arc;
use std::time::Duration;

use weir_core::{CheckRequest, FakeClock, Limiter, LimiterConfig, RuleSet};

use super::{same_label, Metrics};

#[test]
fn a_batch_is_counted_per_label_and_timed_per_check() {
    let rules = RuleSet::from_toml(
        "[[rule]]\nname = \"r\"\nroute = \"GET /a\"\nalgorithm = \"fixed_window\"\nlimit = 1\nwindow = \"60s\"\n",
    )
    .unwrap();
    let limiter = Limiter::new(
        rules,
        Arc::new(FakeClock::at_secs(60.0)),
        LimiterConfig::default(),
    );
    let verdicts: Vec<_> = [
        ("k1", "GET /a"),
        ("k1", "GET /a"),
        ("k2", "GET /a"),
        ("k3", "GET /b"),
    ]
    .iter()
    .map(|(k, r)| limiter.check(&CheckRequest::new(*k, *r)).unwrap())
    .collect();
    let m = Metrics::default();
    m.record_verdicts(&verdicts, Duration::from_micros(20));
    assert_eq!(m.checks("r", "allowed"), 2);
    assert_eq!(m.checks("r", "denied"), 1);
    assert_eq!(m.checks("", "unlimited"), 1);
    // Per rule, only the rules that saw checks; the unlimited label is none.
    let none: Vec<Arc<str>> = Vec::new();
    assert_eq!(m.rule_totals(none.iter()), [(Arc::from("r"), [2, 1, 0])]);
    let text = m.render();
    assert!(text.contains("weir_decision_seconds_count 4\n"), "{text}");
    assert!(
        text.contains("weir_decision_seconds_bucket{le=\"2.5e-05\"} 4\n"),
        "{text}"
    );
    assert!(
        text.contains("weir_decision_seconds_bucket{le=\"1e-05\"} 0\n"),
        "{text}"
    );
}

#[test]
fn labels_are_alike_by_name_and_verdict_wherever_they_live() {
    let r: Arc<str> = Arc::from("r");
    let again: Arc<str> = Arc::from(String::from("r"));
    let other: Arc<str> = Arc::from("s");
    use super::Outcome::{Allowed, Denied};
    assert!(same_label((&r, Allowed), (&r, Allowed)));
    assert!(same_label((&r, Denied), (&again, Denied)));
    assert!(!same_label((&r, Allowed), (&r, Denied)));
    assert!(!same_label((&r, Allowed), (&other, Allowed)));
}

#[test]
fn counters_keep_their_exported_names() {
    let m = Metrics::default();
    m.record_rejected_input("cost");
    m.record_reload();
    m.record_reload_failure();
    let text = m.render();
    for line in [
        "# TYPE weir_checks_total counter\n",
        "weir_checks_total{rule=\"\",verdict=\"invalid\"} 1\n",
        "weir_rejected_inputs_total{field=\"cost\"} 1\n",
        "weir_rules_reloads_total 1\n",
        "weir_rules_reload_failures_total 1\n",
        "# TYPE weir_decision_seconds histogram\n",
    ] {
        assert!(text.contains(line), "{line:?} missing from\n{text}");
    }
}
