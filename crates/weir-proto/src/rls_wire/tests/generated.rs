//! Generated, mutated and garbage messages, each decoded by both sides.

use proptest::prelude::*;

use super::*;
use crate::wire_test::arb::*;

/// Entry keys the node looks for, and any others.
fn entry_key() -> impl Strategy<Value = String> {
    let known = ["client", "user_id", "route", "tier", "ip", "generic_key"];
    prop_oneof![
        2 => prop::sample::select(known.to_vec()).prop_map(String::from),
        1 => text(),
    ]
}

fn rls_descriptor() -> impl Strategy<Value = RateLimitDescriptor> {
    let entry = (entry_key(), text()).prop_map(|(key, value)| PbEntry { key, value });
    let limit = (number(), number()).prop_map(|(requests, unit)| RateLimitOverride {
        requests_per_unit: requests as u32,
        unit: unit as i32,
    });
    (
        prop::collection::vec(entry, 0..4),
        prop::option::of(limit),
        prop::option::of(number()),
        any::<bool>(),
    )
        .prop_map(
            |(entries, limit, hits_addend, is_negative_hits)| RateLimitDescriptor {
                entries,
                limit,
                hits_addend,
                is_negative_hits,
            },
        )
}

fn rls_request() -> impl Strategy<Value = RateLimitRequest> {
    (
        text(),
        prop::collection::vec(rls_descriptor(), 0..8),
        number(),
    )
        .prop_map(|(domain, descriptors, hits)| RateLimitRequest {
            domain,
            descriptors,
            hits_addend: hits as u32,
        })
}

// --- structured garbage: raw fields, mostly well-formed ---

fn varint_field(tags: Vec<u32>) -> impl Strategy<Value = Vec<u8>> {
    (prop::sample::select(tags), raw_varint()).prop_map(|(t, v)| [key(t, VARINT), v].concat())
}

/// A message of `field`s, its length maybe off.
fn message(field: impl Strategy<Value = Vec<u8>>, tag: u32) -> impl Strategy<Value = Vec<u8>> {
    (prop::collection::vec(field, 0..4), length_error())
        .prop_map(move |(f, off)| delimited_off(tag, &f.concat(), off))
}

fn entry_field() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => (1..=2u32, string_bytes(), length_error())
            .prop_map(|(t, body, off)| delimited_off(t, &body, off)),
        1 => any_field(),
    ]
}

fn descriptor_field() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => message(entry_field(), 1),
        2 => message(prop_oneof![6 => varint_field(vec![1, 2]), 1 => any_field()], 2),
        2 => message(prop_oneof![6 => varint_field(vec![1]), 1 => any_field()], 3),
        // `is_negative_hits`: any varint, or the tag under another wire type.
        2 => varint_field(vec![4]),
        1 => any_field(),
    ]
}

fn top_field() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        2 => (string_bytes(), length_error()).prop_map(|(body, off)| delimited_off(1, &body, off)),
        4 => message(descriptor_field(), 2),
        2 => varint_field(vec![3]),
        1 => any_field(),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn prosts_messages_decode_as_prost_decodes_them(msg in rls_request()) {
        let bytes = msg.encode_to_vec();
        prop_assert_eq!(decoded(&bytes), msg);
    }

    #[test]
    fn mutated_messages_decode_as_prost_decodes_them(
        msg in rls_request(),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        agrees(&mutated(msg.encode_to_vec(), &mutations));
    }

    #[test]
    fn structured_garbage_decodes_as_prost_decodes_it(bytes in fields(top_field())) {
        agrees(&bytes);
    }
}
