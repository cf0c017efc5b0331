//! Answers written here against the same results written by prost.

use proptest::prelude::*;

use super::*;
use crate::wire_test::arb::{config, number, text};

/// An answer's owned parts, so that a generated [`Answer`] can borrow its rule.
#[derive(Debug, Clone)]
struct OwnedAnswer {
    allowed: bool,
    numbers: [u64; 6],
    rule: String,
    limited: bool,
}

impl OwnedAnswer {
    fn answer(&self) -> Answer<'_> {
        let [limit, remaining, retry_after_ms, reset_at_ms, delay_ms, window_ms] = self.numbers;
        Answer {
            allowed: self.allowed,
            limit,
            remaining,
            retry_after_ms,
            reset_at_ms,
            rule: &self.rule,
            delay_ms,
            limited: self.limited,
            window_ms,
        }
    }
}

#[derive(Debug, Clone)]
enum Pushed {
    Answer(OwnedAnswer),
    Result(pb::CheckResult),
}

fn rule_name() -> impl Strategy<Value = String> {
    prop_oneof![
        text(),
        // 120 to 300 bytes: past one varint byte of length.
        ("[a-z]{10}", 12..=30usize).prop_map(|(s, n)| s.repeat(n)),
    ]
}

fn owned_answer() -> impl Strategy<Value = OwnedAnswer> {
    (
        any::<bool>(),
        prop::array::uniform6(number()),
        rule_name(),
        any::<bool>(),
    )
        .prop_map(|(allowed, numbers, rule, limited)| OwnedAnswer {
            allowed,
            numbers,
            rule,
            limited,
        })
}

fn error_result() -> impl Strategy<Value = pb::CheckResult> {
    (
        prop_oneof![0..4i32, any::<i32>()],
        text(),
        text(),
        any::<bool>(),
    )
        .prop_map(|(code, field, message, allowed)| pb::CheckResult {
            allowed,
            error: Some(pb::ItemError {
                code,
                field,
                message,
            }),
            ..pb::CheckResult::default()
        })
}

fn pushed() -> impl Strategy<Value = Pushed> {
    prop_oneof![
        4 => owned_answer().prop_map(Pushed::Answer),
        1 => error_result().prop_map(Pushed::Result),
    ]
}

/// Asserts `pushed` encodes as prost encodes its results, and that prost
/// reads those bytes back to them.
fn encodes_as_prost(pushed: &[Pushed]) {
    let mut response = Response::with_capacity(pushed.len());
    let mut results = Vec::new();
    for p in pushed {
        match p {
            Pushed::Answer(a) => {
                response.push_answer(&a.answer());
                results.push(a.answer().to_result());
            }
            Pushed::Result(r) => {
                response.push_result(r);
                results.push(r.clone());
            }
        }
    }
    let expected = pb::CheckResponse { results };
    let prosts = expected.encode_to_vec();
    assert!(
        response.as_bytes() == prosts,
        "check_wire wrote [{}], prost [{}], for {pushed:?}",
        hex(response.as_bytes()),
        hex(&prosts)
    );
    assert_eq!(
        pb::CheckResponse::decode(response.as_bytes()).as_ref(),
        Ok(&expected)
    );
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn responses_encode_as_prost_encodes_them(
        pushed in prop::collection::vec(pushed(), 0..30),
    ) {
        encodes_as_prost(&pushed);
    }
}

#[test]
fn a_default_answer_is_an_empty_result() {
    let mut response = Response::default();
    response.push_answer(&Answer::default());
    assert_eq!(response.as_bytes(), [0x0a, 0x00]);
    encodes_as_prost(&[Pushed::Answer(OwnedAnswer {
        allowed: false,
        numbers: [0; 6],
        rule: String::new(),
        limited: false,
    })]);
}

#[test]
fn an_answer_with_every_field_set_is_written_in_field_order() {
    let a = Answer {
        allowed: true,
        limit: 10,
        remaining: 3,
        retry_after_ms: 1500,
        reset_at_ms: 99,
        rule: "r",
        delay_ms: 7,
        limited: true,
        window_ms: 60_000,
    };
    let mut response = Response::default();
    response.push_answer(&a);
    #[rustfmt::skip]
    let expected = [
        0x0a, 22,
        0x08, 1,
        0x10, 10,
        0x18, 3,
        0x20, 0xdc, 0x0b,
        0x28, 99,
        0x32, 1, b'r',
        0x38, 7,
        0x40, 1,
        0x50, 0xe0, 0xd4, 0x03,
    ];
    assert_eq!(response.as_bytes(), expected);
    assert_eq!(
        response.as_bytes(),
        pb::CheckResponse {
            results: vec![a.to_result()]
        }
        .encode_to_vec()
    );
}

#[test]
fn the_largest_answers_encode_as_prost_encodes_them() {
    let most = OwnedAnswer {
        allowed: true,
        numbers: [u64::MAX; 6],
        rule: "ü".repeat(150),
        limited: true,
    };
    let error = pb::CheckResult {
        error: Some(pb::ItemError {
            code: -1,
            field: "cost".into(),
            message: "invalid cost: must be at least 1".into(),
        }),
        ..pb::CheckResult::default()
    };
    encodes_as_prost(&[
        Pushed::Answer(most.clone()),
        Pushed::Result(error),
        Pushed::Answer(most),
    ]);
}
