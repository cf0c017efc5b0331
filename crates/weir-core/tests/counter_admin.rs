//! One key's counter read, cleared and refunded by name, as the counters
//! API and Envoy refunds use the limiter.

use std::sync::Arc;

use weir_core::{CheckRequest, FakeClock, Limiter, LimiterConfig, RuleSet, REFUND_SPENT};

const RULES: &str = r#"
[[rule]]
name = "per-client"
algorithm = "fixed_window"
limit = 5
window = "60s"
"#;

fn limiter() -> Limiter {
    // 6000 s is a window boundary: the window closes at 6060 s.
    let clock = Arc::new(FakeClock::at_secs(6_000.0));
    Limiter::new(
        RuleSet::from_toml(RULES).unwrap(),
        clock,
        LimiterConfig::default(),
    )
}

fn fill(l: &Limiter, key: &str, n: usize) -> usize {
    (0..n)
        .filter(|_| l.check(&CheckRequest::new(key, "GET /")).unwrap().allowed)
        .count()
}

#[test]
fn peek_shows_the_budget_left_and_spends_none() {
    let l = limiter();
    let fresh = l.peek("per-client", "c").unwrap();
    assert_eq!((fresh.limit, fresh.remaining, fresh.allowed), (5, 5, true));
    assert_eq!(fill(&l, "c", 3), 3);
    for _ in 0..3 {
        assert_eq!(l.peek("per-client", "c").unwrap().remaining, 2);
    }
    assert_eq!(l.peek("per-client", "c").unwrap().reset_at, 6_060_000);
    assert_eq!(fill(&l, "c", 3), 2);
    let full = l.peek("per-client", "c").unwrap();
    assert_eq!((full.remaining, full.allowed), (0, false));
    assert!(l.peek("no-such-rule", "c").is_none());
}

#[test]
fn reset_lets_the_whole_limit_through_again() {
    let l = limiter();
    assert_eq!(fill(&l, "c", 6), 5);
    assert!(l.reset("per-client", "c"));
    assert_eq!(l.peek("per-client", "c").unwrap().remaining, 5);
    assert_eq!(fill(&l, "c", 6), 5);
    assert!(!l.reset("no-such-rule", "c"));
    // A key never seen is already clear, and stays unheld.
    assert!(l.reset("per-client", "unseen"));
    assert!(!l.holds("per-client", "unseen"));
}

#[test]
fn refund_of_spent_by_rule_name_gives_budget_back() {
    let l = limiter();
    assert_eq!(fill(&l, "c", 6), 5);
    l.refund("per-client", "c", REFUND_SPENT, 2);
    assert_eq!(fill(&l, "c", 5), 2);
}
