//! The rule set every simulated run uses: one limit per algorithm, and a route that a per-client and a per-IP limit govern together. Windows of 2-3 s, so a 10 s run crosses several.

use weir_core::{AlgorithmKind, Nanos, Rule};

pub const RULES: &str = r#"
[[rule]]
name = "tb"
route = "GET /tb"
algorithm = "token_bucket"
limit = 10
window = "2s"

[[rule]]
name = "gcra"
route = "GET /gcra"
algorithm = "leaky_bucket"
limit = 10
window = "2s"
burst = 3

[[rule]]
name = "fw"
route = "GET /fw"
algorithm = "fixed_window"
limit = 10
window = "2s"

[[rule]]
name = "log"
route = "GET /log"
algorithm = "sliding_window_log"
limit = 10
window = "2s"

[[rule]]
name = "swc"
route = "GET /swc"
algorithm = "sliding_window_counter"
limit = 10
window = "2s"

[[rule]]
name = "both-client"
route = "GET /both"
algorithm = "sliding_window_log"
limit = 8
window = "2s"

[[rule]]
name = "both-ip"
route = "GET /both"
by = "ip"
algorithm = "fixed_window"
limit = 12
window = "3s"
"#;

/// The most a rule can admit over any span of `span` nanoseconds, when its
/// decisions are made in some order within that span: the promise an
/// exact limiter keeps (docs/algorithms.md, "worst count in a window").
/// None when the rule bounds counts per aligned window instead.
pub fn most_in_span(rule: &Rule, span: Nanos) -> Option<f64> {
    let limit = rule.limit as f64;
    let window = rule.window.as_nanos() as f64;
    let rate = limit / window;
    match rule.algorithm {
        // C + rT; C is `burst`, L by default.
        AlgorithmKind::TokenBucket => {
            Some(rule.burst.unwrap_or(rule.limit) as f64 + rate * span as f64)
        }
        // rT + burst; burst 1 by default (perfectly smooth).
        AlgorithmKind::LeakyBucket => Some(rule.burst.unwrap_or(1) as f64 + rate * span as f64),
        // Exactly L in any window of length W: a span shorter than W.
        AlgorithmKind::SlidingWindowLog if (span as f64) < window => Some(limit),
        _ => None,
    }
}

/// The aligned window a time falls in, for the rules that bound each
/// (fixed window exactly, the sliding counter through its current count).
pub fn window_of(rule: &Rule, at: Nanos) -> Option<u64> {
    match rule.algorithm {
        AlgorithmKind::FixedWindow | AlgorithmKind::SlidingWindowCounter => Some(
            at / u64::try_from(rule.window.as_nanos())
                .unwrap_or(u64::MAX)
                .max(1),
        ),
        _ => None,
    }
}
