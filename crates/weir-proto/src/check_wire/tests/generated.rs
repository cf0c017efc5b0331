//! Generated, mutated and garbage messages, each decoded by both sides.

use proptest::prelude::*;

use super::*;
use crate::wire_test::arb::*;

fn item_limit() -> impl Strategy<Value = pb::ItemLimit> {
    prop_oneof![(1..100u64, 1..100_000u64), (number(), number())]
        .prop_map(|(limit, window_ms)| pb::ItemLimit { limit, window_ms })
}

fn check_item() -> impl Strategy<Value = pb::CheckItem> {
    (
        text(),
        text(),
        prop::option::of(number()),
        text(),
        text(),
        prop::option::of(item_limit()),
        prop::option::of(number()),
        any::<bool>(),
    )
        .prop_map(
            |(key, route, cost, tier, ip, limit, max_delay_ms, refund)| pb::CheckItem {
                key,
                route,
                cost,
                tier,
                ip,
                limit,
                max_delay_ms,
                refund,
            },
        )
}

fn check_request() -> impl Strategy<Value = pb::CheckRequest> {
    prop::collection::vec(check_item(), 0..20).prop_map(|items| pb::CheckRequest { items })
}

// --- structured garbage: raw fields, mostly well-formed ---

fn limit_field() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => (1..=2u32, raw_varint()).prop_map(|(t, v)| [key(t, VARINT), v].concat()),
        1 => any_field(),
    ]
}

fn item_field() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => (prop::sample::select(vec![1u32, 2, 4, 5]), string_bytes(), length_error())
            .prop_map(|(t, body, off)| delimited_off(t, &body, off)),
        4 => (prop::sample::select(vec![3u32, 7, 8]), raw_varint())
            .prop_map(|(t, v)| [key(t, VARINT), v].concat()),
        4 => (prop::collection::vec(limit_field(), 0..4), length_error())
            .prop_map(|(f, off)| delimited_off(6, &f.concat(), off)),
        1 => any_field(),
    ]
}

fn top_field() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => (prop::collection::vec(item_field(), 0..6), length_error())
            .prop_map(|(f, off)| delimited_off(1, &f.concat(), off)),
        1 => any_field(),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn prosts_messages_decode_as_prost_decodes_them(msg in check_request()) {
        let bytes = msg.encode_to_vec();
        agrees(&bytes);
        prop_assert_eq!(decoded(&bytes).len(), msg.items.len());
    }

    #[test]
    fn mutated_messages_decode_as_prost_decodes_them(
        msg in check_request(),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        agrees(&mutated(msg.encode_to_vec(), &mutations));
    }

    #[test]
    fn structured_garbage_decodes_as_prost_decodes_it(bytes in fields(top_field())) {
        agrees(&bytes);
    }
}
