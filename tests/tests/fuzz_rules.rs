//! Rule parsing under arbitrary input: never a panic, and every accepted set survives a JSON round trip unchanged.
//!
//! Bounded for CI by PROPTEST_CASES (default below); a long run is
//! `PROPTEST_CASES=1000000 cargo test -p weir-tests --test fuzz_rules --release`.

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::Config;
use weir_core::{Rule, RuleSet};

/// Cases per property unless PROPTEST_CASES says otherwise: a few seconds in CI.
fn config(default_cases: u32) -> Config {
    Config::with_cases(weir_tests::proptest_cases(default_cases))
}

/// A value for a rule field, in the shape either format can carry. Biased
/// toward values near the guards (0, 1, limits, NaN, durations) because
/// that is where a parser goes wrong.
#[derive(Debug, Clone)]
enum Val {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    List(Vec<Val>),
    Table(Vec<(String, Val)>),
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        prop::sample::select(vec![
            "client",
            "ip",
            "token_bucket",
            "leaky_bucket",
            "fixed_window",
            "sliding_window_log",
            "sliding_window_counter",
            "60s",
            "1m",
            "500ms",
            "1h 30m",
            "0s",
            "-1s",
            "1ns",
            "400days",
            "401days",
            "*",
            "POST /v1/*",
            "free",
            "r-1",
            "r-2",
            "a:b.c",
            "name with space",
        ])
        .prop_map(String::from),
        "[a-z0-9_:.-]{1,70}",
        any::<String>(),
        "[\\x00-\\x7f]{0,300}",
    ]
}

fn val() -> impl Strategy<Value = Val> {
    let leaf = prop_oneof![
        3 => text().prop_map(Val::Str),
        3 => prop_oneof![
            prop::sample::select(vec![
                0i64, 1, -1, 5, 100, 100_000, 100_001, 1_000_000_000_000, 1_000_000_000_001,
                i64::MAX, i64::MIN,
            ]),
            any::<i64>(),
        ]
        .prop_map(Val::Int),
        2 => prop_oneof![
            prop::sample::select(vec![
                f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0, 0.5, 1.0, 1.5, 60.0,
                1e-10, 1e300, 9_007_199_254_740_993.0,
            ]),
            any::<f64>(),
        ]
        .prop_map(Val::Float),
        1 => any::<bool>().prop_map(Val::Bool),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Val::List),
            prop::collection::vec(("[a-z]{1,5}", inner), 0..3).prop_map(Val::Table),
        ]
    })
}

const FIELDS: [&str; 11] = [
    "name",
    "tier",
    "client",
    "route",
    "by",
    "algorithm",
    "limit",
    "window",
    "burst",
    "queue",
    "shadow",
];

/// A value that fits the field, so generated rules get past the first
/// refusal and reach the checks between fields.
fn plausible(field: &'static str) -> BoxedStrategy<Val> {
    let s = |v: Vec<&'static str>| {
        prop::sample::select(v)
            .prop_map(|s| Val::Str(s.into()))
            .boxed()
    };
    match field {
        "name" => "[a-z]{1,3}-[0-9]{1,2}".prop_map(Val::Str).boxed(),
        "tier" => s(vec!["free", "pro"]),
        "client" => s(vec!["cust_1", "cust_2"]),
        "route" => s(vec!["GET /x", "POST /v1/*", "*", "POST /v1/charges"]),
        "by" => s(vec!["client", "ip"]),
        "algorithm" => s(vec![
            "token_bucket",
            "leaky_bucket",
            "fixed_window",
            "sliding_window_log",
            "sliding_window_counter",
        ]),
        "limit" => (1i64..200).prop_map(Val::Int).boxed(),
        "window" => s(vec!["1s", "60s", "1h", "500ms", "1m 30s"]),
        "burst" => (1i64..50).prop_map(Val::Int).boxed(),
        "queue" => (0i64..10).prop_map(Val::Int).boxed(),
        _ => any::<bool>().prop_map(Val::Bool).boxed(),
    }
}

/// A rule: each known field absent, plausible or arbitrary, and now and
/// then a field no rule has.
fn rule_fields() -> BoxedStrategy<Vec<(String, Val)>> {
    let fields: Vec<BoxedStrategy<Option<(String, Val)>>> = FIELDS
        .iter()
        .map(|&f| {
            let required = matches!(f, "name" | "algorithm" | "limit" | "window");
            let (absent, fits) = if required { (1, 24) } else { (12, 4) };
            prop_oneof![
                absent => Just(None),
                fits => plausible(f).prop_map(move |v| Some((f.to_string(), v))),
                1 => val().prop_map(move |v| Some((f.to_string(), v))),
            ]
            .boxed()
        })
        .collect();
    let unknown = prop::option::weighted(0.05, ("[a-z_]{1,8}", val()));
    (fields, unknown)
        .prop_map(|(known, unknown)| known.into_iter().flatten().chain(unknown).collect())
        .boxed()
}

fn toml_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn toml_val(v: &Val) -> String {
    match v {
        Val::Str(s) => toml_str(s),
        Val::Int(i) => i.to_string(),
        Val::Float(f) if f.is_nan() => "nan".into(),
        Val::Float(f) if f.is_infinite() => (if *f > 0.0 { "inf" } else { "-inf" }).into(),
        Val::Float(f) => format!("{f:?}"),
        Val::Bool(b) => b.to_string(),
        Val::List(l) => format!(
            "[{}]",
            l.iter().map(toml_val).collect::<Vec<_>>().join(", ")
        ),
        Val::Table(t) => format!(
            "{{{}}}",
            t.iter()
                .map(|(k, v)| format!("{k} = {}", toml_val(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn json_val(v: &Val) -> serde_json::Value {
    match v {
        Val::Str(s) => s.as_str().into(),
        Val::Int(i) => (*i).into(),
        // JSON has no NaN or infinity; serde_json turns them into null.
        Val::Float(f) => {
            serde_json::Number::from_f64(*f).map_or(serde_json::Value::Null, Into::into)
        }
        Val::Bool(b) => (*b).into(),
        Val::List(l) => l.iter().map(json_val).collect(),
        Val::Table(t) => t.iter().map(|(k, v)| (k.clone(), json_val(v))).collect(),
    }
}

fn rules_file(version: Option<i64>, rules: &[Vec<(String, Val)>]) -> String {
    let mut out = String::new();
    if let Some(v) = version {
        out.push_str(&format!("version = {v}\n"));
    }
    for r in rules {
        out.push_str("[[rule]]\n");
        for (k, v) in r {
            out.push_str(&format!("{k} = {}\n", toml_val(v)));
        }
    }
    out
}

/// Text that is mostly a rules file: a well-formed one, cut, spliced or
/// with bytes flipped, so the TOML parser and the validator both get hit.
fn tomlish() -> impl Strategy<Value = String> {
    let file = (
        prop::option::of(prop_oneof![9 => 0i64..5, 1 => any::<i64>()]),
        prop::collection::vec(rule_fields(), 0..4),
    )
        .prop_map(|(v, r)| rules_file(v, &r))
        .boxed();
    prop_oneof![
        6 => file.clone(),
        1 => (file.clone(), any::<prop::sample::Index>()).prop_map(|(f, i)| {
            let cut = i.index(f.len() + 1);
            f.char_indices().take_while(|(at, _)| *at < cut).map(|(_, c)| c).collect()
        }),
        1 => (file, any::<prop::sample::Index>(), "[\\[\\]=\"#\n{}a-z0-9 .,-]{0,8}").prop_map(
            |(f, i, junk)| {
                let chars: Vec<char> = f.chars().collect();
                let at = i.index(chars.len() + 1);
                chars[..at].iter().chain(junk.chars().collect::<Vec<_>>().iter()).chain(&chars[at..]).collect()
            }
        ),
        1 => any::<String>(),
    ]
}

/// An accepted set, written out and read back, is the same set.
fn assert_round_trip(set: &RuleSet) -> Result<(), TestCaseError> {
    let json = set.to_json().to_string();
    let back = RuleSet::from_json(&json)
        .map_err(|e| TestCaseError::fail(format!("{json} did not parse back: {e}")))?;
    prop_assert_eq!(back.version(), set.version());
    prop_assert_eq!(back.rules(), set.rules(), "{}", json);
    Ok(())
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn rules_file_never_panics_and_accepted_sets_round_trip(text in tomlish()) {
        if let Ok(set) = RuleSet::from_toml(&text) {
            assert_round_trip(&set)?;
        }
    }

    #[test]
    fn config_api_body_never_panics_and_accepted_rules_round_trip(
        // Tiers as the HTTP layer lets them through (limits.rs refuses an
        // empty or over-long path tier before the body is parsed).
        tier in prop::option::of(prop::sample::select(vec!["free", "pro", "x:y.z"])),
        rules in prop::collection::vec(rule_fields(), 0..4),
        wrap in 0u8..4,
    ) {
        let list: Vec<serde_json::Value> = rules
            .iter()
            .map(|r| r.iter().map(|(k, v)| (k.clone(), json_val(v))).collect())
            .collect();
        let body = match wrap {
            0 => serde_json::json!({"rules": list}),
            1 => serde_json::json!({"rules": list, "extra": 1}),
            2 => serde_json::json!(list),
            _ => serde_json::json!({"rules": list.first().cloned()}),
        };
        let Ok(parsed) = RuleSet::parse_tier_json(tier, &body.to_string()) else {
            return Ok(());
        };
        for r in &parsed {
            prop_assert_eq!(r.tier.as_deref(), tier, "a rule takes the path's tier");
        }
        // The config API's own read-back body parses to the same rules.
        let shown: Vec<serde_json::Value> = parsed.iter().map(Rule::to_json).collect();
        let again = RuleSet::parse_tier_json(tier, &serde_json::json!({"rules": shown}).to_string())
            .map_err(|e| TestCaseError::fail(format!("read-back refused: {e}")))?;
        prop_assert_eq!(&again, &parsed);
        if let Ok(set) = RuleSet::new(7, parsed) {
            assert_round_trip(&set)?;
        }
    }
}

/// The generator must reach acceptance, or the round-trip property above is
/// never exercised and the test proves nothing.
#[test]
fn the_generators_produce_accepted_sets() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = tomlish();
    let accepted = (0..500)
        .filter(|_| {
            let text = strategy.new_tree(&mut runner).unwrap().current();
            RuleSet::from_toml(&text).is_ok_and(|s| !s.rules().is_empty())
        })
        .count();
    assert!(
        accepted >= 25,
        "only {accepted} of 500 generated files were accepted"
    );
}
