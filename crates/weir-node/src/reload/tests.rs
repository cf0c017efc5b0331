//! The reloader installs a file's rules once per distinct content.

use std::sync::Arc;

use weir_cluster::Engine;
use weir_core::{Limiter, LimiterConfig, RuleSet, SystemClock};

use super::{reload, Loaded};
use crate::config::ServeConfig;
use crate::state::NodeState;

fn rules(limit: u64) -> String {
    format!(
        "[[rule]]\nname = \"r\"\nalgorithm = \"fixed_window\"\nlimit = {limit}\nwindow = \"1m\"\n"
    )
}

fn state() -> NodeState {
    let limiter = Limiter::new(
        RuleSet::empty(),
        Arc::new(SystemClock::new()),
        LimiterConfig::default(),
    );
    NodeState {
        node_id: "n".into(),
        engine: Arc::new(Engine::local(Arc::new(limiter))),
        config: ServeConfig::ephemeral(),
        metrics: Default::default(),
        activity: Default::default(),
        lifecycle: Default::default(),
        traces: None,
    }
}

/// A node whose rules file (in the returned directory) held `rules(limit)`
/// and was loaded once; the text it loaded.
fn loaded(limit: u64) -> (tempfile::TempDir, NodeState, Option<Loaded>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.toml");
    let state = state();
    let mut last = None;
    std::fs::write(&path, rules(limit)).unwrap();
    reload(&state, &path, &mut last);
    (dir, state, last)
}

#[test]
fn unchanged_content_is_not_installed_again() {
    let (dir, state, mut last) = loaded(1);
    let path = dir.path().join("rules.toml");
    let v1 = state.engine.rules().version();
    reload(&state, &path, &mut last);
    assert_eq!(state.engine.rules().version(), v1, "same text, same set");
    std::fs::write(&path, rules(2)).unwrap();
    reload(&state, &path, &mut last);
    assert!(state.engine.rules().version() > v1, "new text, new set");
    assert_eq!(state.metrics.rules_reloads(), 2);
}

#[test]
fn an_edit_writes_only_the_tiers_it_changed() {
    let (dir, state, mut last) = loaded(1);
    let path = dir.path().join("rules.toml");
    // A tier written through the config API, which the file does not hold.
    let pro = RuleSet::parse_tier_json(
        Some("pro"),
        r#"{"rules":[{"name":"pro-r","algorithm":"fixed_window","limit":9,"window":"1m"}]}"#,
    )
    .unwrap();
    state.engine.replace_tier(Some("pro"), pro).unwrap();
    std::fs::write(&path, rules(2)).unwrap();
    reload(&state, &path, &mut last);
    let set = state.engine.rules();
    assert_eq!(set.get("r").unwrap().1.limit, 2, "the edit is in force");
    assert_eq!(
        set.get("pro-r").map(|(_, r)| r.limit),
        Some(9),
        "the API's write to a tier the edit left alone stays"
    );
}

/// Guard: a file truncated while rules are in force (what a writer that
/// truncates first leaves for a moment) is refused, counted and the rules
/// kept; the finished file is then read against the last good one.
#[test]
fn a_file_emptied_while_rules_are_in_force_is_refused_and_counted() {
    let (dir, state, mut last) = loaded(1);
    let path = dir.path().join("rules.toml");
    for empty in ["", "version = 9\n", "# all gone\n"] {
        std::fs::write(&path, empty).unwrap();
        reload(&state, &path, &mut last);
        assert_eq!(
            state.engine.rules().get("r").map(|(_, r)| r.limit),
            Some(1),
            "{empty:?} lifts no limit"
        );
    }
    assert_eq!(state.metrics.rules_reload_failures(), 3);
    assert_eq!(state.metrics.rules_reloads(), 1, "only the first load");
    std::fs::write(&path, rules(2)).unwrap();
    reload(&state, &path, &mut last);
    assert_eq!(state.engine.rules().get("r").unwrap().1.limit, 2);
}

/// A file that says `allow_empty = true` may remove every rule.
#[test]
fn a_file_that_says_allow_empty_removes_every_rule() {
    let (dir, state, mut last) = loaded(1);
    let path = dir.path().join("rules.toml");
    std::fs::write(&path, "allow_empty = true\n").unwrap();
    reload(&state, &path, &mut last);
    assert_eq!(state.engine.rules().written_len(), 0);
    assert_eq!(state.metrics.rules_reload_failures(), 0);
}
