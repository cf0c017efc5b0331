//! `POST /v1/check` under arbitrary bodies: the parser never panics, and a real node answers 200, 429 or a problem+json 4xx, never a 5xx.
//!
//! The body parser is a pure function, so most cases go to it directly and
//! a smaller run goes over the socket. Bounded for CI by PROPTEST_CASES; a
//! long run is `PROPTEST_CASES=1000000 cargo test -p weir-tests --test fuzz_check_body --release`.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Value};
use weir_node::http::check_input::CheckInput;
use weir_tests::{proptest_cases, TestNode};

const RULES: &str = r#"
[[rule]]
name      = "per-client"
by        = "client"
algorithm = "sliding_window_counter"
limit     = 3
window    = "60s"

[[rule]]
name      = "per-ip"
by        = "ip"
algorithm = "token_bucket"
limit     = 5
window    = "60s"
"#;

/// Small, so some generated bodies pass it and must get 413.
const MAX_BODY: usize = 600;

fn string() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        prop::sample::select(vec![
            "cust_42",
            "POST /v1/charges",
            "free",
            "203.0.113.9",
            "::1",
            "0:0:0:0:0:0:0:1",
            "999.1.1.1",
            "fe80::1%eth0",
            "a\u{0}b",
            "\u{7f}",
            "é",
        ])
        .prop_map(String::from),
        any::<String>(),
        "[a-z]{250,300}",
    ]
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(vec![
            json!(0),
            json!(1),
            json!(-1),
            json!(2),
            json!(3),
            json!(4),
            json!(1.0),
            json!(1.5),
            json!(1e30),
            json!(u64::MAX),
            json!(i64::MIN),
            json!(9_007_199_254_740_993.0_f64),
        ]),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        number(),
        string().prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(string(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Mostly check-shaped objects (the known fields with any values, now and
/// then an unknown one), else any JSON, else any bytes.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let field = prop_oneof![
        8 => prop::sample::select(vec!["key", "route", "cost", "tier", "ip"]).prop_map(String::from),
        1 => string(),
    ];
    let fitting = prop_oneof![
        3 => prop_oneof![string().prop_map(Value::from), number()],
        1 => value(),
    ];
    let check = prop::collection::btree_map(field, fitting, 0..6).prop_map(|m| {
        Value::Object(m.into_iter().collect())
            .to_string()
            .into_bytes()
    });
    prop_oneof![
        6 => check,
        2 => value().prop_map(|v| v.to_string().into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..MAX_BODY * 2),
    ]
}

#[test]
fn the_body_parser_never_panics_and_every_refusal_names_a_field() {
    let mut runner = TestRunner::new(Config::with_cases(proptest_cases(4000)));
    runner
        .run(&body(), |bytes| {
            if let Err(e) = CheckInput::parse(&bytes) {
                // An unknown field is named as the client spelt it, even "".
                prop_assert!(!e.field.is_empty() || e.metric_field == "unknown_field");
                prop_assert!(!e.metric_field.is_empty());
                prop_assert!(!e.detail.is_empty());
            }
            Ok(())
        })
        .unwrap();
}

/// Bodies a client would send: a key, and any of the other fields with a
/// value of the right type (or null), so that most of them are accepted.
fn plausible_body() -> impl Strategy<Value = Vec<u8>> {
    let text = || prop_oneof![3 => string().prop_map(Value::from), 1 => Just(Value::Null)];
    let cost = prop_oneof![4 => number(), 1 => Just(Value::Null)];
    (
        string().prop_filter("a key", |k| !k.is_empty()),
        prop::option::of(text()),
        prop::option::of(cost),
        prop::option::of(text()),
        prop::option::of(text()),
    )
        .prop_map(|(key, route, cost, tier, ip)| {
            let mut m = serde_json::Map::new();
            m.insert("key".into(), key.into());
            for (name, v) in [("route", route), ("cost", cost), ("tier", tier), ("ip", ip)] {
                if let Some(v) = v {
                    m.insert(name.into(), v);
                }
            }
            Value::Object(m).to_string().into_bytes()
        })
}

#[test]
fn the_fast_path_reads_every_body_exactly_as_the_checked_path_does() {
    let mut runner = TestRunner::new(Config::with_cases(proptest_cases(4000)));
    let accepted = std::cell::Cell::new(0u32);
    runner
        .run(&prop_oneof![plausible_body(), body()], |bytes| {
            let checked = CheckInput::parse_checked(&bytes);
            accepted.set(accepted.get() + u32::from(checked.is_ok()));
            prop_assert_eq!(CheckInput::parse(&bytes), checked);
            Ok(())
        })
        .unwrap();
    // The comparison means nothing unless many bodies were accepted.
    let accepted = accepted.get();
    assert!(accepted > 100, "only {accepted} bodies were accepted");
}

/// The node's answer to `bytes`, judged against the pure parser's verdict.
async fn judge(node: &TestNode, bytes: Vec<u8>) -> Result<(), TestCaseError> {
    let parsed = CheckInput::parse(&bytes);
    let len = bytes.len();
    let res = node.check_raw(bytes).await;
    let status = res.status().as_u16();
    let ctype = weir_tests::header(res.headers(), "content-type").map(str::to_string);
    let text = res.text().await.expect("response body");
    prop_assert!(status < 500, "{status}: {text}");
    if status == 200 {
        return Ok(());
    }
    prop_assert_eq!(
        ctype.as_deref(),
        Some("application/problem+json"),
        "{}",
        status
    );
    let problem: Value = serde_json::from_str(&text).expect("problem+json is JSON");
    prop_assert_eq!(problem["status"].as_u64(), Some(u64::from(status)));
    match status {
        429 => prop_assert!(parsed.is_ok(), "a malformed body was rate limited"),
        413 => prop_assert!(len > MAX_BODY, "413 for {len} bytes"),
        400 => {
            let field = problem["field"].as_str().expect("a 400 names its field");
            if let Err(e) = &parsed {
                prop_assert_eq!(field, e.field.as_str());
            } else {
                // Well-formed JSON refused by the core's own checks.
                prop_assert!(
                    ["key", "route", "tier", "ip", "cost"].contains(&field),
                    "{field}"
                );
            }
        }
        other => prop_assert!(false, "unexpected status {other}: {text}"),
    }
    if len > MAX_BODY {
        prop_assert_eq!(status, 413);
    }
    Ok(())
}

#[test]
fn a_real_node_answers_every_body_with_a_verdict_or_a_problem() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let node = rt.block_on(TestNode::start(RULES, |c| {
        c.limits.max_body_bytes = MAX_BODY;
    }));
    let mut runner = TestRunner::new(Config::with_cases(proptest_cases(300)));
    runner
        .run(&body(), |bytes| rt.block_on(judge(&node, bytes)))
        .unwrap();
    // Still serving: no case took the node down.
    let ok = rt.block_on(node.check(json!({"key": "after-the-run"})));
    assert_eq!(ok.status().as_u16(), 200);
    rt.block_on(node.shutdown());
}
