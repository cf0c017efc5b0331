//! The rules every simulated cluster and the reference limiter share, one per workload route.

use std::time::Duration;

/// One rule as the sim writes it into the rules file: keyed by client,
/// matched by an exact route so each workload has its own counters.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RuleSpec {
    pub name: String,
    pub route: String,
    pub algorithm: &'static str,
    pub limit: u64,
    #[serde(serialize_with = "as_secs")]
    pub window: Duration,
}

fn as_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl RuleSpec {
    pub fn new(name: &str, algorithm: &'static str, limit: u64, window: Duration) -> Self {
        RuleSpec {
            name: name.to_string(),
            route: format!("GET /sim/{name}"),
            algorithm,
            limit,
            window,
        }
    }

    fn toml(&self) -> String {
        format!(
            "[[rule]]\nname      = \"{}\"\nroute     = \"{}\"\nby        = \"client\"\nalgorithm = \"{}\"\nlimit     = {}\nwindow    = \"{}ms\"\n",
            self.name,
            self.route,
            self.algorithm,
            self.limit,
            self.window.as_millis()
        )
    }
}

/// The rules file for a set of workloads. Rules with the same name (two
/// variants of one workload) are written once.
pub fn rules_toml(specs: &[RuleSpec]) -> String {
    let mut seen = std::collections::BTreeSet::new();
    let mut out =
        String::from("# Written by weir-sim: one rule per workload route, keyed by client.\n\n");
    for s in specs {
        if seen.insert(s.name.clone()) {
            out.push_str(&s.toml());
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_rules_parse_in_core() {
        let specs = [
            RuleSpec::new("a", "fixed_window", 10, Duration::from_secs(2)),
            RuleSpec::new(
                "b",
                "sliding_window_counter",
                5,
                Duration::from_millis(1500),
            ),
            RuleSpec::new("a", "fixed_window", 10, Duration::from_secs(2)),
        ];
        let set = weir_core::RuleSet::from_toml(&rules_toml(&specs)).expect("valid rules");
        assert_eq!(set.rules().len(), 2);
        assert_eq!(set.rules()[1].window, Duration::from_millis(1500));
    }
}
