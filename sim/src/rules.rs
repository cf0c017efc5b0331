//! The rules every simulated cluster and the reference limiter share, one per workload route.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::SimError;

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
    /// `hot = ...` (and `shards`), when the rule says; None keeps weir's default.
    pub hot: Option<&'static str>,
    pub shards: Option<u32>,
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
            hot: None,
            shards: None,
        }
    }

    /// The same rule with `hot = how` (and `shards = k` for "shard").
    pub fn hot(mut self, how: &'static str, shards: Option<u32>) -> Self {
        self.hot = Some(how);
        self.shards = shards;
        self
    }

    fn toml(&self) -> String {
        let mut t = format!(
            "[[rule]]\nname      = \"{}\"\nroute     = \"{}\"\nby        = \"client\"\nalgorithm = \"{}\"\nlimit     = {}\nwindow    = \"{}ms\"\n",
            self.name,
            self.route,
            self.algorithm,
            self.limit,
            self.window.as_millis()
        );
        if let Some(h) = self.hot {
            t.push_str(&format!("hot       = \"{h}\"\n"));
        }
        if let Some(k) = self.shards {
            t.push_str(&format!("shards    = {k}\n"));
        }
        t
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

/// Writes `toml` to `dir/rules.toml`, creating `dir`, and returns the file's
/// full path: nodes run from another directory (and namespace).
pub fn write_file(dir: &Path, toml: &str) -> Result<PathBuf, SimError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| SimError::io(format!("creating {}", dir.display()), e))?;
    let path = dir.join("rules.toml");
    std::fs::write(&path, toml)
        .map_err(|e| SimError::io(format!("writing {}", path.display()), e))?;
    std::path::absolute(&path).map_err(|e| SimError::io("resolving the rules path", e))
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

    #[test]
    fn a_written_rules_file_has_a_full_path_in_a_new_dir() {
        let dir = std::env::temp_dir()
            .join(format!("weir-sim-rules-test-{}", std::process::id()))
            .join("nested");
        let path = write_file(&dir, "# none\n").expect("written");
        assert!(path.is_absolute() && path.starts_with(&dir));
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "# none\n");
        std::fs::remove_dir_all(dir.parent().expect("parent")).expect("cleaned up");
    }
}
