//! The rules a node enforces when started without --rules, so `weir serve`
//! alone is a working limiter.

use weir_core::RuleSet;

/// 100 per minute per client on the sliding window counter (a sound
/// default, 5% typical error at L = 100), and a generous per-IP floor.
pub const DEFAULT_RULES_TOML: &str = r#"
[[rule]]
name      = "default-per-client"
by        = "client"
algorithm = "sliding_window_counter"
limit     = 100
window    = "60s"

[[rule]]
name      = "default-per-ip"
by        = "ip"
algorithm = "sliding_window_counter"
limit     = 1000
window    = "60s"
"#;

pub fn default_rules() -> RuleSet {
    RuleSet::from_toml(DEFAULT_RULES_TOML).expect("the built-in rules are valid")
}

#[cfg(test)]
mod tests {
    #[test]
    fn default_rules_parse() {
        assert_eq!(super::default_rules().rules().len(), 2);
    }
}
