//! A caller's longest wait: a scheduling leaky bucket's delay beyond it is a denial that consumes nothing.

use std::sync::Arc;
use std::time::Duration;

use weir_core::{CheckRequest, FakeClock, Limiter, LimiterConfig, RuleSet};

/// One request a second per client, up to five scheduled ahead; and a
/// per-IP limit beside it, to see that a refused delay costs it nothing.
const RULES: &str = r#"
[[rule]]
name = "paced"
algorithm = "leaky_bucket"
limit = 10
window = "10s"
queue = 5

[[rule]]
name = "per-ip"
by = "ip"
algorithm = "fixed_window"
limit = 100
window = "1h"
"#;

fn limiter() -> (Limiter, Arc<FakeClock>) {
    let clock = Arc::new(FakeClock::at_secs(1_000.0));
    let rules = RuleSet::from_toml(RULES).unwrap();
    (
        Limiter::new(rules, clock.clone(), LimiterConfig::default()),
        clock,
    )
}

fn req(max: Option<Duration>) -> CheckRequest {
    CheckRequest {
        max_delay: max,
        ..CheckRequest::new("k", "GET /").ip("192.0.2.1")
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn a_delay_within_the_callers_wait_is_admitted_and_reported() {
    let (l, _) = limiter();
    assert_eq!(
        l.check(&req(Some(ms(1500)))).unwrap().response().delay,
        Duration::ZERO
    );
    let second = l.check(&req(Some(ms(1500)))).unwrap().response();
    assert!(second.allowed);
    assert_eq!(second.delay, ms(1000), "one interval behind the first");
}

#[test]
fn a_delay_past_the_callers_wait_is_a_denial_that_consumes_nothing() {
    let (l, clock) = limiter();
    assert!(l.check(&req(None)).unwrap().allowed);
    let refused = l.check(&req(Some(ms(400)))).unwrap();
    assert!(!refused.allowed);
    let r = refused.response();
    assert_eq!(
        (r.retry_after, r.delay),
        (ms(600), Duration::ZERO),
        "1 s needed, 0.4 s offered"
    );
    // Nothing was scheduled for it: the next caller is one interval
    // behind the first admission, not two.
    let next = l.check(&req(None)).unwrap().response();
    assert_eq!(next.delay, ms(1000));
    // And the per-IP limit was refunded: 2 admitted of 100.
    let ip = l
        .check(&req(None))
        .unwrap()
        .applied
        .iter()
        .find(|a| &*a.rule.name == "per-ip")
        .map(|a| a.decision.remaining);
    assert_eq!(ip, Some(97));
    // Retrying after the wait it was told, it fits within 0.4 s again.
    clock.advance(Duration::from_secs(3));
    assert!(l.check(&req(Some(ms(400)))).unwrap().allowed);
}

#[test]
fn a_meter_admits_only_what_needs_no_wait() {
    let (l, clock) = limiter();
    let meter = || req(Some(Duration::ZERO));
    assert!(l.check(&meter()).unwrap().allowed);
    for _ in 0..10 {
        assert!(
            !l.check(&meter()).unwrap().allowed,
            "early arrivals are refused"
        );
    }
    clock.advance(Duration::from_secs(1));
    let r = l.check(&meter()).unwrap().response();
    assert!(
        r.allowed,
        "refused arrivals took no slot: one interval is enough"
    );
    assert_eq!(r.delay, Duration::ZERO);
}

#[test]
fn the_delay_shown_is_the_longest_any_limit_needs() {
    let rules = RuleSet::from_toml(&format!(
        "{RULES}\n[[rule]]\nname = \"slow-ip\"\nby = \"ip\"\nclient = \"k\"\nalgorithm = \"leaky_bucket\"\nlimit = 1\nwindow = \"5s\"\nqueue = 3\n"
    ))
    .unwrap();
    let clock = Arc::new(FakeClock::at_secs(1_000.0));
    let l = Limiter::new(rules, clock, LimiterConfig::default());
    assert!(l.check(&req(None)).unwrap().allowed);
    let r = l.check(&req(None)).unwrap().response();
    assert!(r.allowed);
    assert_eq!(
        r.delay,
        Duration::from_secs(5),
        "the per-IP bucket's 5 s, not the 1 s"
    );
}
